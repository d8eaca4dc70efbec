/* testutil.c - temp files, shell commands and the test runner wrapper. */
#include "testutil.h"

#include "run/run.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

char *tu_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/dhtest.XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    ck_assert_msg(d != NULL, "mkdtemp failed");
    return strdup(d);
}

char *tu_write(const char *dir, const char *name, const char *data, long len)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    size_t n = len < 0 ? strlen(data) : (size_t)len;
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
    return path;
}

static char *vfmt(const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        return NULL;
    return s;
}

int tu_sh(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *cmd = vfmt(fmt, ap);
    va_end(ap);
    int rc = cmd ? system(cmd) : -1;
    free(cmd);
    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

char *tu_capture(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *cmd = vfmt(fmt, ap);
    va_end(ap);
    FILE *p = cmd ? popen(cmd, "r") : NULL;
    free(cmd);
    if (!p)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (n + 1 >= cap)
            buf = realloc(buf, cap *= 2);
    }
    buf[n] = 0;
    pclose(p);
    return buf;
}

const char *tu_ffmpeg(void)
{
    const char *e = getenv("DH_FFMPEG");
    return e && *e ? e : "ffmpeg";
}

const char *tu_ffprobe(void)
{
    const char *e = getenv("DH_FFPROBE");
    return e && *e ? e : "ffprobe";
}

int tu_wanted(const char *name)
{
    static long seen; /* the tests offered so far, in the order the suite adds them */
    const char *only = getenv("DH_TEST_ONLY");
    if (only && !strstr(name, only))
        return 0;
    const char *shard = getenv("DH_TEST_SHARD");
    if (!shard || !*shard)
        return 1;
    long k = 0, n = 0;
    char end = 0;
    if (sscanf(shard, "%ld/%ld%c", &k, &n, &end) != 2 || n < 1 || k < 1 || k > n) {
        fprintf(stderr, "DH_TEST_SHARD=%s: expected k/n with 1 <= k <= n\n", shard);
        exit(2);
    }
    return seen++ % n == k - 1;
}

int tu_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

int64_t tu_min_budget(const dh_run_config *c, int leases)
{
    dh__run run;
    char err[256];
    dh_run_config x = *c;
    x.memory_budget = 0;
    ck_assert_msg(dh__run_setup(&x, &run, err, sizeof err) == 0, "%s", err);
    int64_t need = dh__run_min_budget(&run, leases);
    dh__run_free(&run);
    return need;
}

uint8_t *tu_ffmpeg_rgb(const char *path, int64_t index, int x, int y, int w, int h, int ow,
                       int oh, int hflip)
{
    char *cmd = NULL;
    if (asprintf(&cmd,
                 "%s -v error -nostdin -i '%s' -vf \"select=eq(n\\,%lld),crop=%d:%d:%d:%d,"
                 "scale=%d:%d:flags=bilinear,%sformat=rgb24\" -sws_flags bilinear -frames:v 1 "
                 "-f rawvideo -",
                 tu_ffmpeg(), path, (long long)index, w, h, x, y, ow, oh, hflip ? "hflip," : "") < 0)
        return NULL;
    FILE *p = popen(cmd, "r");
    free(cmd);
    size_t n = (size_t)ow * oh * 3;
    uint8_t *buf = malloc(n);
    size_t got = p ? fread(buf, 1, n, p) : 0;
    if (p)
        pclose(p);
    ck_assert_uint_eq(got, n);
    return buf;
}

double tu_psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
    double se = 0;
    for (size_t i = 0; i < n; i++)
        se += (double)(a[i] - b[i]) * (a[i] - b[i]);
    return se == 0 ? INFINITY : 10.0 * log10(255.0 * 255.0 / (se / (double)n));
}

void tu_rmdir(char **dir)
{
    if (*dir)
        tu_sh("rm -rf %s", *dir);
    free(*dir);
    *dir = NULL;
}

dh_media_info tu_video(int w, int h, double fps, int64_t frames, const int32_t *kf, int nkf)
{
    return (dh_media_info){.type = DH_MEDIA_VIDEO, .codec = DH_CODEC_H264, .width = w,
                           .height = h, .fps = fps, .frames = frames,
                           .duration_s = frames / fps, .keyframes = kf, .keyframe_count = nkf};
}
