/* testutil.h - helpers shared by the Check unit tests. */
#ifndef DH_TESTUTIL_H
#define DH_TESTUTIL_H

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "datahelix.h"

/* A fresh directory under $TMPDIR (or /tmp); the returned string is static per call site. */
char *tu_mkdtemp(void);
/* Removes a directory tu_mkdtemp made, with all it holds, and frees and clears *dir. */
void tu_rmdir(char **dir);
/* A video's descriptor (H.264, no path) with keyframes kf[0..nkf) (may be NULL, 0). */
dh_media_info tu_video(int w, int h, double fps, int64_t frames, const int32_t *kf, int nkf);
/* Writes len bytes (or strlen when len < 0) to dir/name; returns the full path (malloc'd). */
char *tu_write(const char *dir, const char *name, const char *data, long len);
/* Runs a shell command, returns its exit status (-1 if it could not run). */
int tu_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Output of a shell command (malloc'd, NUL-terminated) or NULL. */
char *tu_capture(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* ffmpeg / ffprobe executables (from the build's configuration or PATH). */
const char *tu_ffmpeg(void);
const char *tu_ffprobe(void);
/*
 * The ffmpeg tool's rendering of frame `index` (display order) of `path`: the w x h
 * rectangle at (x, y), bilinear-scaled to ow x oh, mirrored left to right when hflip, RGB24
 * (malloc'd, ow * oh * 3 bytes; the test fails when the tool gives less).
 */
uint8_t *tu_ffmpeg_rgb(const char *path, int64_t index, int x, int y, int w, int h, int ow,
                       int oh, int hflip);
/* Peak signal-to-noise ratio of two byte images (INFINITY when equal). */
double tu_psnr(const uint8_t *a, const uint8_t *b, size_t n);
/* The smallest memory budget a run of c accepts (the one budget of src/run/run.h), with
 * `leases` batches per rank that trainers may keep (serving; 0 otherwise). */
int64_t tu_min_budget(const dh_run_config *c, int leases);
/* Runs an SRunner over one suite and returns the process exit status. */
int tu_run(Suite *s);

/*
 * Whether a test is run, by its name: DH_TEST_ONLY=part runs only the tests whose name
 * contains it (a flaky test, in a loop; every suite); DH_TEST_SHARD=k/n only every n-th
 * test from the k-th (k in [1, n]), in the order the suite adds them, so that n processes
 * run a long suite between them (tests/CMakeLists.txt splits the suites that mostly wait).
 */
int tu_wanted(const char *name);

#define ADD_TEST(tc, t)                                                                  \
    do {                                                                                 \
        if (tu_wanted(#t))                                                               \
            tcase_add_test(tc, t);                                                       \
    } while (0)

/* The same for a loop test (its body sees _i in [lo, hi)); each _i counts as a test of its
 * own for DH_TEST_SHARD. */
#define ADD_LOOP_TEST(tc, t, lo, hi)                                                     \
    do {                                                                                 \
        for (int i_ = (lo); i_ < (hi); i_++)                                             \
            if (tu_wanted(#t))                                                           \
                tcase_add_loop_test(tc, t, i_, i_ + 1);                                  \
    } while (0)

#endif
