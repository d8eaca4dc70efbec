/*
 * test_decode.c - decoded frames against the ffmpeg command-line tool at the
 * same presentation times after the same crop and scale (PSNR >= 40 dB), on
 * H.264 with B-frames and on a variable-frame-rate file; seeks; and every
 * class of bad input the decoder meets.
 */
#include "codec/decode.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *media;

static void make_media(void)
{
    media = tu_mkdtemp();
    const char *ff = tu_ffmpeg();
    int rc = tu_sh(
        "cd %s && %s -v error -y -nostdin -f lavfi -i testsrc2=size=320x240:rate=25 -t 8 "
        "-c:v libx264 -g 25 -keyint_min 25 -sc_threshold 0 -bf 2 -pix_fmt yuv420p bf.mp4 && "
        "%s -v error -y -nostdin -f lavfi -i testsrc2=size=160x120:rate=30 -frames:v 60 "
        "-vf \"setpts='if(lt(N,45),N/30,1.5+(N-45)/10)/TB'\" -fps_mode vfr -c:v libx264 -g 20 "
        "-bf 2 -pix_fmt yuv420p -video_track_timescale 90000 vfr.mp4 && head -c 20000 bf.mp4 > cut.mp4",
        media, ff, ff);
    ck_assert_int_eq(rc, 0);
}

static void drop_media(void)
{
    tu_sh("rm -rf %s", media);
}

static dh_probe_result probe(const char *name)
{
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/%s", media, name);
    dh_probe_result r;
    ck_assert_int_eq(dh_probe_file(path, NULL, &r, err, sizeof err), 0);
    return r;
}

static dh_spec *spec_json(const char *json)
{
    dh_spec *s;
    char err[256];
    ck_assert_msg(dh_spec_parse(json, strlen(json), &s, err, sizeof err) == 0, "%s", err);
    return s;
}

/* Display-order index of the frame shown at time t, from ffprobe's frame timestamps. */
static int64_t shown_at(const char *name, double t)
{
    char *out = tu_capture("%s -v error -select_streams v:0 -show_entries frame=pts_time "
                           "-of csv=p=0 '%s/%s'",
                           tu_ffprobe(), media, name);
    ck_assert_ptr_nonnull(out);
    int64_t n = 0, best = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"), n++)
        if (atof(line) <= t + 1e-6)
            best = n;
    free(out);
    return best;
}

/* The reference frame from the ffmpeg tool: same crop and bilinear scale, RGB24. */
static uint8_t *reference(const char *name, int64_t index, dh__rect r, int ow, int oh)
{
    char *cmd = NULL;
    if (asprintf(&cmd,
                 "%s -v error -nostdin -i '%s/%s' -vf \"select=eq(n\\,%lld),crop=%d:%d:%d:%d,"
                 "scale=%d:%d:flags=bilinear,format=rgb24\" -sws_flags bilinear -frames:v 1 "
                 "-f rawvideo -",
                 tu_ffmpeg(), media, name, (long long)index, r.w, r.h, r.x, r.y, ow, oh) < 0)
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

static double psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
    double se = 0;
    for (size_t i = 0; i < n; i++)
        se += (double)(a[i] - b[i]) * (a[i] - b[i]);
    return se == 0 ? INFINITY : 10.0 * log10(255.0 * 255.0 / (se / n));
}

/* Decodes `name` under spec and compares every sampled frame with the tool's. */
static void compare_with_ffmpeg(const char *name, const char *spec_text, int crop)
{
    dh_probe_result pr = probe(name);
    dh_spec *spec = spec_json(spec_text);
    dh_media_derived md;
    ck_assert_int_eq(dh_derive_media(spec, &pr.info, &md), 0);
    uint8_t *out = malloc((size_t)md.out_bytes);
    dh__decode_stats st;
    char err[256] = "";
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", media, name);
    int rc = dh__decode_video(path, spec, &pr.info, out, (size_t)md.out_bytes, &st, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", name, err);
    ck_assert_int_eq(st.bytes_written, md.out_bytes);
    int64_t idx[64];
    int64_t n = dh_video_sample_frames(spec, &pr.info, idx, 64);
    dh__rect r = crop ? dh__cover_crop(pr.info.width, pr.info.height, md.out_width, md.out_height)
                      : (dh__rect){0, 0, pr.info.width, pr.info.height};
    size_t fb = (size_t)md.out_width * md.out_height * 3;
    for (int64_t k = 0; k < n; k++) {
        int64_t shown = shown_at(name, (idx[k] + 0.5) / pr.info.fps);
        uint8_t *ref = reference(name, shown, r, md.out_width, md.out_height);
        double q = psnr(out + k * fb, ref, fb);
        ck_assert_msg(q >= 40.0, "%s frame %lld (display index %lld): PSNR %.1f dB", name,
                      (long long)idx[k], (long long)shown, q);
        free(ref);
    }
    free(out);
    dh_spec_free(spec);
    dh_probe_result_clear(&pr);
}

START_TEST(bframes_match_ffmpeg_with_crop)
{
    compare_with_ffmpeg("bf.mp4", "{\"video\":{\"frames\":8,\"resize\":{\"mode\":\"crop\",\"size\":112}}}", 1);
}
END_TEST

START_TEST(bframes_match_ffmpeg_fixed_and_long_side)
{
    compare_with_ffmpeg("bf.mp4", "{\"video\":{\"frames\":5,\"resize\":{\"mode\":\"fixed\",\"width\":96,\"height\":64}}}", 0);
    compare_with_ffmpeg("bf.mp4", "{\"video\":{\"sampling\":\"fps\",\"fps\":1,\"max_frames\":8,"
                                  "\"resize\":{\"mode\":\"long_side\",\"max\":160,\"multiple\":16}}}", 0);
}
END_TEST

START_TEST(variable_frame_rate_matches_ffmpeg)
{
    compare_with_ffmpeg("vfr.mp4", "{\"video\":{\"frames\":6,\"resize\":{\"mode\":\"crop\",\"size\":64}}}", 1);
}
END_TEST

START_TEST(sparse_samples_seek_dense_ones_do_not)
{
    /* 200 frames, keyframes every 25. The decoder must follow the derivation's rule
     * (derive.c): seek when the target lies behind a keyframe later than the frame held.
     * Two samples (frames 50 and 150): two seeks, a handful of frames decoded. Forty
     * samples, one every 5 frames: a seek at each of the 7 keyframes crossed, and about
     * the frames the derivation predicts (plus B-frame reordering lookahead). The decoder
     * does not seek for the opening keyframe; the derivation counts it. */
    dh_probe_result pr = probe("bf.mp4");
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/bf.mp4", media);
    dh_spec *two = spec_json("{\"video\":{\"frames\":2,\"resize\":{\"mode\":\"fixed\",\"size\":32}}}");
    dh_spec *dense = spec_json("{\"video\":{\"frames\":40,\"resize\":{\"mode\":\"fixed\",\"size\":32}}}");
    uint8_t *buf = malloc(40 * 32 * 32 * 3);
    dh__decode_stats st;
    ck_assert_int_eq(dh__decode_video(path, two, &pr.info, buf, 40 * 32 * 32 * 3, &st, err, sizeof err), 0);
    ck_assert_int_eq(st.seeks, 2);
    ck_assert_int_lt(st.frames_decoded, 20);
    dh_media_derived md;
    dh_derive_media(two, &pr.info, &md);
    ck_assert_int_eq(md.seeks, 2);
    ck_assert_int_le(st.frames_decoded, md.decoded_frames + 4);
    ck_assert_int_eq(dh__decode_video(path, dense, &pr.info, buf, 40 * 32 * 32 * 3, &st, err, sizeof err), 0);
    dh_derive_media(dense, &pr.info, &md);
    ck_assert_int_eq(st.seeks, md.seeks - 1);
    ck_assert_int_eq(st.seeks, 7);
    ck_assert_int_le(st.frames_decoded, md.decoded_frames + 4 * (st.seeks + 1));
    ck_assert_int_ge(st.frames_decoded, md.decoded_frames);
    free(buf);
    dh_spec_free(two);
    dh_spec_free(dense);
    dh_probe_result_clear(&pr);
}
END_TEST

static void expect_decode_error(const char *name, dh_media_info mi, size_t cap, int code,
                                const char *needle)
{
    dh_spec *s = spec_json("{\"video\":{\"frames\":4,\"resize\":{\"mode\":\"fixed\",\"size\":16}}}");
    char path[4096], err[256] = "";
    snprintf(path, sizeof path, "%s/%s", media, name);
    uint8_t *buf = malloc(cap + 1);
    int rc = dh__decode_video(path, s, &mi, buf, cap, NULL, err, sizeof err);
    ck_assert_msg(rc == code, "%s: expected %s got %s (%s)", name, dh_err_name(code),
                  dh_err_name(rc), err);
    ck_assert_msg(strstr(err, needle) != NULL, "\"%s\" lacks \"%s\"", err, needle);
    free(buf);
    dh_spec_free(s);
}

START_TEST(bad_input_is_a_clear_error)
{
    dh_probe_result pr = probe("bf.mp4");
    dh_media_info mi = pr.info;
    size_t cap = 4 * 16 * 16 * 3;
    mi.width = 640;
    expect_decode_error("bf.mp4", mi, cap, DH_ECORRUPT, "the file is 320x240 but its manifest entry says 640x240");
    mi = pr.info;
    mi.frames = 2000; /* claims 80 s: the samples lie past the real end */
    mi.keyframe_count = 0;
    expect_decode_error("bf.mp4", mi, cap, DH_ECORRUPT, "fewer frames than its manifest entry");
    mi = pr.info;
    expect_decode_error("bf.mp4", mi, cap - 1, DH_ERANGE, "slot holds");
    expect_decode_error("missing.mp4", mi, cap, DH_ENOENT, "cannot open");
    expect_decode_error("cut.mp4", mi, cap, DH_EDECODE, "");
    dh_probe_result_clear(&pr);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("video");
    tcase_add_unchecked_fixture(tc, make_media, drop_media);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, bframes_match_ffmpeg_with_crop);
    tcase_add_test(tc, bframes_match_ffmpeg_fixed_and_long_side);
    tcase_add_test(tc, variable_frame_rate_matches_ffmpeg);
    tcase_add_test(tc, sparse_samples_seek_dense_ones_do_not);
    tcase_add_test(tc, bad_input_is_a_clear_error);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
