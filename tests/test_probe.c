/*
 * test_probe.c - header probing and `index` on real media made at test time
 * with the ffmpeg command-line tool, checked against what ffprobe reports for
 * the same files; plus every class of bad file.
 */
#include "testutil.h"

#include <libavutil/log.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *media; /* made once per test case, before the forked tests */

#define FF "%s -v error -y -nostdin "

static void make_media(void)
{
    media = tu_mkdtemp();
    const char *ff = tu_ffmpeg();
    int rc = tu_sh("cd %s && mkdir -p good bad && cd good && "
                   /* H.264 with B-frames and a 25-frame GOP */
                   FF "-f lavfi -i testsrc=size=320x240:rate=25 -t 4 -c:v libx264 -g 25 "
                   "-keyint_min 25 -sc_threshold 0 -bf 2 -pix_fmt yuv420p h264_bframes.mp4 && "
                   /* variable frame rate: 45 frames at 30 fps, then 15 at 10 fps */
                   FF "-f lavfi -i testsrc=size=160x120:rate=30 -frames:v 60 "
                   "-vf \"setpts='if(lt(N,45),N/30,1.5+(N-45)/10)/TB'\" -fps_mode vfr "
                   "-c:v libx264 -g 20 -bf 2 -pix_fmt yuv420p -video_track_timescale 90000 vfr.mp4 && "
                   /* Matroska has no per-frame index: frames are counted from packets */
                   FF "-f lavfi -i testsrc=size=192x108:rate=30 -t 2 -c:v libx265 -x265-params "
                   "log-level=none:keyint=15:min-keyint=15:scenecut=0 -pix_fmt yuv420p hevc.mkv && "
                   FF "-f lavfi -i testsrc=size=640x480 -frames:v 1 photo.jpg && "
                   FF "-f lavfi -i testsrc=size=300x200 -frames:v 1 rgb.png && "
                   FF "-f lavfi -i testsrc=size=64x48 -frames:v 1 -pix_fmt gray16be grey16.png && "
                   FF "-f lavfi -i testsrc=size=50x40 -frames:v 1 -pix_fmt pal8 palette.png && "
                   FF "-f lavfi -i sine=frequency=440:sample_rate=16000 -t 3 speech.flac && "
                   FF "-f lavfi -i sine=frequency=300:sample_rate=44100 -ac 2 -t 1.5 stereo.wav",
                   media, ff, ff, ff, ff, ff, ff, ff, ff, ff);
    ck_assert_msg(rc == 0, "ffmpeg failed to make test media (rc %d)", rc);
    /* A JPEG whose frame header sits behind 320 KiB of APP1 metadata. */
    rc = tu_sh("cd %s/good && { printf '\\377\\330'; for i in 1 2 3 4 5; do "
               "printf '\\377\\341\\377\\377'; head -c 65533 /dev/zero; done; "
               "tail -c +3 photo.jpg; } > big_exif.jpg",
               media);
    ck_assert_int_eq(rc, 0);
    rc = tu_sh("cd %s/bad && echo 'just some notes' > notes.txt && : > empty.mp4 && "
               "head -c 3000 ../good/h264_bframes.mp4 > truncated.mp4 && "
               "head -c 120 ../good/photo.jpg > truncated.jpg && "
               /* IHDR with colour type 7 (invalid) and one 100000x100000 */
               "printf '\\211PNG\\r\\n\\032\\n\\000\\000\\000\\rIHDR\\000\\000\\001\\000\\000\\000"
               "\\001\\000\\010\\007\\000\\000\\000\\000\\000\\000\\000' > badihdr.png && "
               "printf '\\211PNG\\r\\n\\032\\n\\000\\000\\000\\rIHDR\\000\\001\\206\\240\\000\\001"
               "\\206\\240\\010\\002\\000\\000\\000\\000\\000\\000\\000' > huge.png",
               media);
    ck_assert_int_eq(rc, 0);
}

static void drop_media(void)
{
    tu_sh("rm -rf %s", media);
}

/* ffprobe's view of the first video or audio stream, plus packet keyframe flags. */
static json_t *ffprobe(const char *file, const char *stream)
{
    char *out = tu_capture("%s -v error -select_streams %s:0 -show_entries "
                           "stream=codec_name,width,height,nb_frames,avg_frame_rate,duration,"
                           "sample_rate,channels:packet=flags -of json '%s/good/%s'",
                           tu_ffprobe(), stream, media, file);
    ck_assert_ptr_nonnull(out);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    ck_assert_msg(j != NULL, "ffprobe output did not parse: %s", out);
    free(out);
    return j;
}

static double rational(const char *s)
{
    int num = 0, den = 1;
    sscanf(s, "%d/%d", &num, &den);
    return den ? (double)num / den : 0.0;
}

static dh_probe_result probe_ok(const char *file)
{
    char path[4096], err[512] = "";
    snprintf(path, sizeof path, "%s/good/%s", media, file);
    dh_probe_result r;
    int rc = dh_probe_file(path, NULL, &r, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s (%s)", file, dh_err_name(rc), err);
    return r;
}

/* Our video descriptor must match ffprobe: codec, size, frames, rate, keyframe positions. */
static void check_video_against_ffprobe(const char *file, int expect_scanned)
{
    dh_probe_result r = probe_ok(file);
    json_t *j = ffprobe(file, "v");
    json_t *st = json_array_get(json_object_get(j, "streams"), 0);
    json_t *pk = json_object_get(j, "packets");
    ck_assert_int_eq(r.info.type, DH_MEDIA_VIDEO);
    ck_assert_str_eq(r.codec_name, json_string_value(json_object_get(st, "codec_name")));
    ck_assert_int_eq(r.info.width, json_integer_value(json_object_get(st, "width")));
    ck_assert_int_eq(r.info.height, json_integer_value(json_object_get(st, "height")));
    ck_assert_int_eq(r.scanned, expect_scanned);
    const char *nb = json_string_value(json_object_get(st, "nb_frames"));
    int64_t frames = nb ? atoll(nb) : (int64_t)json_array_size(pk);
    ck_assert_int_eq(r.info.frames, frames);
    ck_assert_int_eq(r.info.frames, (int64_t)json_array_size(pk));
    double fps = rational(json_string_value(json_object_get(st, "avg_frame_rate")));
    if (fps > 0)
        ck_assert_double_eq_tol(r.info.fps, fps, 1e-3 * fps);
    /* Keyframes: packet positions flagged K, in packet (decode) order. */
    int32_t nk = 0;
    for (size_t i = 0; i < json_array_size(pk); i++) {
        const char *flags = json_string_value(json_object_get(json_array_get(pk, i), "flags"));
        if (flags && flags[0] == 'K') {
            ck_assert_int_lt(nk, r.info.keyframe_count);
            ck_assert_int_eq(r.info.keyframes[nk], (int32_t)i);
            nk++;
        }
    }
    ck_assert_int_eq(nk, r.info.keyframe_count);
    const char *dur = json_string_value(json_object_get(st, "duration"));
    if (dur)
        ck_assert_double_eq_tol(r.info.duration_s, atof(dur), 0.05);
    ck_assert_int_gt(r.info.duration_s, 0);
    json_decref(j);
    dh_probe_result_clear(&r);
}

START_TEST(the_library_leaves_ffmpeg_logging_alone)
{
    /* A trainer embedding the library keeps its FFmpeg log level; only dh_quiet_ffmpeg_logs
     * (which the CLI calls) changes it. */
    av_log_set_level(AV_LOG_WARNING);
    dh_probe_result r = probe_ok("h264_bframes.mp4");
    dh_probe_result_clear(&r);
    ck_assert_int_eq(av_log_get_level(), AV_LOG_WARNING);
    unsetenv("DH_FFMPEG_LOG");
    dh_quiet_ffmpeg_logs();
    ck_assert_int_eq(av_log_get_level(), AV_LOG_QUIET);
    ck_assert_int_eq(dh_version(), DH_VERSION_NUMBER);
    ck_assert_int_eq(dh_version(), 200);
}
END_TEST

START_TEST(h264_with_bframes_matches_ffprobe)
{
    check_video_against_ffprobe("h264_bframes.mp4", 0);
    dh_probe_result r = probe_ok("h264_bframes.mp4");
    /* 4 s at 25 fps with a fixed 25-frame GOP. */
    ck_assert_int_eq(r.info.frames, 100);
    ck_assert_int_eq(r.info.keyframe_count, 4);
    ck_assert_int_eq(r.info.keyframes[3], 75);
    ck_assert_double_eq_tol(r.info.duration_s, 4.0, 0.05);
    ck_assert_int_eq(r.info.codec, DH_CODEC_H264);
    dh_probe_result_clear(&r);
}
END_TEST

START_TEST(variable_frame_rate_matches_ffprobe)
{
    check_video_against_ffprobe("vfr.mp4", 0);
    dh_probe_result r = probe_ok("vfr.mp4");
    ck_assert_int_eq(r.info.frames, 60);
    /* 45 frames at 30 fps then 15 at 10 fps: the stream lasts 2.8 s (ffprobe agrees), so
     * the average rate is 60/2.8 = 21.4 fps, neither of the two nominal rates. */
    ck_assert_double_eq_tol(r.info.duration_s, 2.8, 0.05);
    ck_assert_double_eq_tol(r.info.fps, 60.0 / 2.8, 0.1);
    dh_probe_result_clear(&r);
}
END_TEST

START_TEST(matroska_is_scanned_not_decoded)
{
    check_video_against_ffprobe("hevc.mkv", 1);
    dh_probe_result r = probe_ok("hevc.mkv");
    ck_assert_int_eq(r.info.codec, DH_CODEC_HEVC);
    ck_assert_int_eq(r.info.frames, 60);
    ck_assert_int_eq(r.info.keyframe_count, 4); /* keyint 15 */
    dh_probe_result_clear(&r);
}
END_TEST

START_TEST(images_match_ffprobe)
{
    const char *files[] = {"photo.jpg", "big_exif.jpg", "rgb.png", "grey16.png", "palette.png"};
    const char *as[] = {"photo.jpg", "photo.jpg", "rgb.png", "grey16.png", "palette.png"};
    for (size_t i = 0; i < 5; i++) {
        dh_probe_result r = probe_ok(files[i]);
        json_t *j = ffprobe(as[i], "v");
        json_t *st = json_array_get(json_object_get(j, "streams"), 0);
        ck_assert_int_eq(r.info.type, DH_MEDIA_IMAGE);
        ck_assert_int_eq(r.info.width, json_integer_value(json_object_get(st, "width")));
        ck_assert_int_eq(r.info.height, json_integer_value(json_object_get(st, "height")));
        ck_assert_int_eq(r.info.codec, strstr(files[i], ".png") ? DH_CODEC_PNG : DH_CODEC_JPEG);
        json_decref(j);
        dh_probe_result_clear(&r);
    }
}
END_TEST

START_TEST(audio_matches_ffprobe)
{
    const char *files[] = {"speech.flac", "stereo.wav"};
    const double dur[] = {3.0, 1.5};
    for (int i = 0; i < 2; i++) {
        dh_probe_result r = probe_ok(files[i]);
        json_t *j = ffprobe(files[i], "a");
        json_t *st = json_array_get(json_object_get(j, "streams"), 0);
        ck_assert_int_eq(r.info.type, DH_MEDIA_AUDIO);
        ck_assert_int_eq(r.info.sample_rate,
                         atoi(json_string_value(json_object_get(st, "sample_rate"))));
        ck_assert_int_eq(r.info.channels, json_integer_value(json_object_get(st, "channels")));
        ck_assert_double_eq_tol(r.info.duration_s, dur[i], 0.01);
        ck_assert_str_eq(r.codec_name, json_string_value(json_object_get(st, "codec_name")));
        json_decref(j);
        dh_probe_result_clear(&r);
    }
}
END_TEST

static void expect_probe_error(const char *rel, const dh_limits *lim, int code, const char *needle)
{
    char path[4096], err[512] = "";
    snprintf(path, sizeof path, "%s/%s", media, rel);
    dh_probe_result r;
    int rc = dh_probe_file(path, lim, &r, err, sizeof err);
    ck_assert_msg(rc == code, "%s: expected %s, got %s (%s)", rel, dh_err_name(code),
                  dh_err_name(rc), err);
    ck_assert_msg(strstr(err, needle) != NULL, "%s: \"%s\" lacks \"%s\"", rel, err, needle);
    ck_assert_ptr_null(r.info.path);
    ck_assert_ptr_null(r.info.keyframes);
}

START_TEST(bad_files_give_clear_errors)
{
    expect_probe_error("bad/notes.txt", NULL, DH_ENOTMEDIA, "not a readable media container");
    expect_probe_error("bad/empty.mp4", NULL, DH_ENOTMEDIA, "empty file");
    expect_probe_error("bad/truncated.mp4", NULL, DH_ENOTMEDIA, "Invalid data");
    expect_probe_error("bad/truncated.jpg", NULL, DH_ECORRUPT, "JPEG header");
    expect_probe_error("bad/badihdr.png", NULL, DH_ECORRUPT, "colour type 7");
    expect_probe_error("bad/huge.png", NULL, DH_ELIMIT, "100000x100000");
    expect_probe_error("bad/missing.mp4", NULL, DH_ENOENT, "cannot open");
    expect_probe_error("bad", NULL, DH_ENOTMEDIA, "not a regular file");
    dh_limits lim;
    dh_limits_default(&lim);
    lim.max_frames = 50;
    expect_probe_error("good/h264_bframes.mp4", &lim, DH_ELIMIT, "100 frames");
    lim.max_frames = 30;
    expect_probe_error("good/hevc.mkv", &lim, DH_ELIMIT, "more than 30 frames");
    dh_limits_default(&lim);
    lim.max_duration_s = 2;
    expect_probe_error("good/speech.flac", &lim, DH_ELIMIT, "audio lasts 3.0 s");
    lim.max_bytes = 100;
    expect_probe_error("good/photo.jpg", &lim, DH_ELIMIT, "over the limit 100");
}
END_TEST

/* ---- index ---- */

static char *read_file(const char *path)
{
    return tu_capture("cat '%s'", path);
}

START_TEST(index_accounts_and_round_trips)
{
    char out[4096];
    /* Manifest in the parent directory: paths get the "good/" or "bad/" prefix. */
    snprintf(out, sizeof out, "%s/manifest.jsonl", media);
    dh_index_opts o;
    dh_index_opts_default(&o);
    o.threads = 2;
    dh_index_stats st;
    ck_assert_int_eq(dh_index_dir(media, out, &o, &st), 0);
    ck_assert_int_eq(st.files, 10 + 6);
    ck_assert_int_eq(st.probed, 10);
    ck_assert_int_eq(st.skipped, 6);
    ck_assert_int_eq(st.probed + st.skipped, st.files);
    ck_assert_int_eq(st.scanned, 1);
    dh_load_opts lo;
    dh_load_opts_default(&lo);
    lo.check_files = 1;
    lo.on_error = DH_ON_ERROR_FAIL;
    dh_manifest *m = NULL;
    dh_load_stats ls;
    ck_assert_int_eq(dh_manifest_load(out, &lo, &m, &ls), 0);
    ck_assert_int_eq(ls.loaded, 10);
    int64_t i = dh_manifest_find(m, "good/h264_bframes.mp4");
    ck_assert_int_ge(i, 0);
    dh_media_info mi;
    dh_manifest_media(m, i, 0, &mi);
    ck_assert_str_eq(mi.path, "good/h264_bframes.mp4");
    ck_assert_int_eq(mi.frames, 100);
    ck_assert_int_eq(mi.keyframe_count, 4);
    /* Sorted by path, whatever the thread count. */
    dh_sample_info a, b;
    for (int64_t k = 1; k < dh_manifest_count(m); k++) {
        dh_manifest_sample(m, k - 1, &a);
        dh_manifest_sample(m, k, &b);
        ck_assert_int_lt(strcmp(a.id, b.id), 0);
    }
    dh_manifest_free(m);
    char *first = read_file(out);
    o.threads = 1;
    ck_assert_int_eq(dh_index_dir(media, out, &o, &st), 0);
    char *second = read_file(out);
    ck_assert_str_eq(first, second);
    free(first);
    free(second);
}
END_TEST

typedef struct {
    int n;
    char first[1024];
} diag_seen;

static void seen(const dh_diag *d, void *user)
{
    diag_seen *s = user;
    if (s->n++ == 0)
        snprintf(s->first, sizeof s->first, "%s", d->message);
}

START_TEST(index_reports_skips_and_refuses_outside_manifest)
{
    char dir[4096], out[4096];
    snprintf(dir, sizeof dir, "%s/bad", media);
    snprintf(out, sizeof out, "%s/bad/m.jsonl", media);
    dh_index_opts o;
    dh_index_opts_default(&o);
    diag_seen s = {0};
    o.diag = seen;
    o.diag_user = &s;
    dh_index_stats st;
    ck_assert_int_eq(dh_index_dir(dir, out, &o, &st), 0);
    ck_assert_int_eq(st.probed, 0);
    ck_assert_int_eq(st.skipped, 6);
    ck_assert_int_eq(s.n, 6);
    ck_assert_msg(strstr(s.first, "/bad/badihdr.png: skipped: PNG IHDR") != NULL, "%s", s.first);
    /* Re-indexing skips the manifest written by the previous run. */
    ck_assert_int_eq(dh_index_dir(dir, out, &o, &st), 0);
    ck_assert_int_eq(st.files, 6);
    /* A manifest outside DIR's tree would need paths with "..": refused. */
    snprintf(out, sizeof out, "%s/good/m.jsonl", media);
    ck_assert_int_eq(dh_index_dir(dir, out, &o, &st), DH_EPATH);
    ck_assert_int_eq(dh_index_dir("/nonexistent-dir", out, &o, &st), DH_ENOENT);
    ck_assert_int_eq(dh_index_dir(out, out, &o, &st), DH_ENOENT); /* out does not exist */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("probe");
    TCase *tc = tcase_create("probe");
    tcase_add_unchecked_fixture(tc, make_media, drop_media);
    tcase_set_timeout(tc, 120);
    ADD_TEST(tc, h264_with_bframes_matches_ffprobe);
    ADD_TEST(tc, the_library_leaves_ffmpeg_logging_alone);
    ADD_TEST(tc, variable_frame_rate_matches_ffprobe);
    ADD_TEST(tc, matroska_is_scanned_not_decoded);
    ADD_TEST(tc, images_match_ffprobe);
    ADD_TEST(tc, audio_matches_ffprobe);
    ADD_TEST(tc, bad_files_give_clear_errors);
    ADD_TEST(tc, index_accounts_and_round_trips);
    ADD_TEST(tc, index_reports_skips_and_refuses_outside_manifest);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
