/*
 * test_decode.c - decoded frames against the ffmpeg command-line tool at the
 * same presentation times after the same crop and scale (PSNR >= 40 dB), on
 * H.264 with B-frames and on a variable-frame-rate file; seeks; and every
 * class of bad input the decoder meets.
 */
#include "codec/decode.h"
#include "codec/scale.h"
#include "testutil.h"

#include <libavutil/pixfmt.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

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
    tu_rmdir(&media);
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
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", media, name);
    return tu_ffmpeg_rgb(path, index, r.x, r.y, r.w, r.h, ow, oh, 0);
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
    int rc = dh__decode_video(DH__SRC(path), spec, &pr.info, out, (size_t)md.out_bytes, &st, err, sizeof err);
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
        double q = tu_psnr(out + k * fb, ref, fb);
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
    ck_assert_int_eq(dh__decode_video(DH__SRC(path), two, &pr.info, buf, 40 * 32 * 32 * 3, &st, err, sizeof err), 0);
    ck_assert_int_eq(st.seeks, 2);
    ck_assert_int_lt(st.frames_decoded, 20);
    dh_media_derived md;
    dh_derive_media(two, &pr.info, &md);
    ck_assert_int_eq(md.seeks, 2);
    ck_assert_int_le(st.frames_decoded, md.decoded_frames + 4);
    ck_assert_int_eq(dh__decode_video(DH__SRC(path), dense, &pr.info, buf, 40 * 32 * 32 * 3, &st, err, sizeof err), 0);
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

START_TEST(split_parts_decode_disjoint_keyframe_segments)
{
    /* Two sparse samples (two seek segments) split in 2 parts: together the parts write
     * exactly the whole decode, and decode about as many frames as the whole did. */
    dh_probe_result pr = probe("bf.mp4");
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/bf.mp4", media);
    dh_spec *s = spec_json("{\"video\":{\"frames\":6,\"resize\":{\"mode\":\"fixed\",\"size\":24}}}");
    size_t n = 6 * 24 * 24 * 3;
    uint8_t *whole = calloc(1, n), *parts = calloc(1, n);
    dh__decode_stats sw, s0, s1;
    ck_assert_int_eq(dh__decode_video(DH__SRC(path), s, &pr.info, whole, n, &sw, err, sizeof err), 0);
    ck_assert_int_eq(dh__decode_video_part(DH__SRC(path), s, &pr.info, NULL, 0, 2, parts, n, &s0, err, sizeof err), 0);
    ck_assert_int_eq(dh__decode_video_part(DH__SRC(path), s, &pr.info, NULL, 1, 2, parts, n, &s1, err, sizeof err), 0);
    ck_assert_mem_eq(whole, parts, n);
    ck_assert_int_gt(s0.bytes_written, 0);
    ck_assert_int_gt(s1.bytes_written, 0);
    ck_assert_int_le(s0.frames_decoded + s1.frames_decoded, sw.frames_decoded + 4);
    free(whole);
    free(parts);
    dh_spec_free(s);
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
    int rc = dh__decode_video(DH__SRC(path), s, &mi, buf, cap, NULL, err, sizeof err);
    ck_assert_msg(rc == code, "%s: expected %s got %s (%s)", name, dh_err_name(code),
                  dh_err_name(rc), err);
    ck_assert_msg(strstr(err, needle) != NULL, "\"%s\" lacks \"%s\"", err, needle);
    free(buf);
    dh_spec_free(s);
}

START_TEST(frames_cut_by_the_edit_list_are_not_described)
{
    /* libx264 with B-frames through our MP4 writer: 25 frames, keyframe interval 24. The
     * edit list ends at 0.96 s, so the 25th frame (a keyframe) is flagged discard and never
     * shown. Probing counted it (frames 25, keyframes [0, 24]) and a sampled time in the
     * last 1/25 s then failed with "no frame decodes". */
    char path[4096], err[256] = "";
    snprintf(path, sizeof path, "%s/cut_by_edit_list.mp4", media);
    ck_assert_msg(dh__encode_video(path, 320, 180, 25.0, 25, 24, 254, err, sizeof err) == 0, "%s", err);
    char *shown = tu_capture("%s -v error -count_frames -select_streams v:0 -show_entries "
                             "stream=nb_read_frames -of csv=p=0 '%s'", tu_ffprobe(), path);
    dh_probe_result r = probe("cut_by_edit_list.mp4");
    ck_assert_int_eq(r.info.frames, atoll(shown)); /* what a decoder returns */
    for (int32_t k = 0; k < r.info.keyframe_count; k++)
        ck_assert_int_lt(r.info.keyframes[k], r.info.frames);
    /* 16 frames over the whole described clip, the last one inside its final frame. */
    dh_spec *spec = spec_json("{\"video\":{\"sampling\":\"uniform\",\"frames\":16,"
                              "\"resize\":{\"mode\":\"crop\",\"size\":64}}}");
    dh_media_derived md;
    ck_assert_int_eq(dh_derive_media(spec, &r.info, &md), 0);
    uint8_t *buf = malloc((size_t)md.out_bytes);
    ck_assert_msg(dh__decode_video(DH__SRC(path), spec, &r.info, buf, (size_t)md.out_bytes, NULL, err,
                                   sizeof err) == 0, "%s", err);
    free(buf);
    free(shown);
    dh_spec_free(spec);
    dh_probe_result_clear(&r);
}
END_TEST

START_TEST(scaling_stays_inside_the_padding_of_a_picture)
{
    /* Packed RGB24 pictures laid out so that DH_SCALE_PAD bytes after their last pixel sit a
     * page that cannot be read: every resize the image decoders make must stay inside.
     * With no padding (how pictures were allocated before) 333x251 -> 336x336 read 32 bytes
     * past the end and crashed, first seen on anyres-images under load. */
    static const int in[][2] = {{333, 251}, {97, 61}, {1023, 767}, {2048, 37}, {111, 2048}};
    static const int out[][2] = {{336, 336}, {224, 224}, {64, 48}};
    long pg = sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < sizeof in / sizeof *in; i++) {
        for (size_t o = 0; o < sizeof out / sizeof *out; o++) {
            int w = in[i][0], h = in[i][1], ow = out[o][0], oh = out[o][1];
            size_t need = (size_t)w * h * 3 + DH_SCALE_PAD;
            size_t total = (need + (size_t)pg - 1) / (size_t)pg * (size_t)pg + (size_t)pg;
            uint8_t *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            ck_assert_ptr_ne(m, MAP_FAILED);
            ck_assert_int_eq(mprotect(m + total - pg, (size_t)pg, PROT_NONE), 0);
            uint8_t *pic = m + total - pg - need, *dst = malloc((size_t)ow * oh * 3);
            memset(pic, 77, need);
            const uint8_t *data[4] = {pic, NULL, NULL, NULL};
            int linesize[4] = {3 * w, 0, 0, 0};
            struct SwsContext *sws = NULL;
            dh__rect whole = {0, 0, w, h}, crop = dh__cover_crop(w, h, ow, oh);
            ck_assert_int_eq(dh__scale_rgb(&sws, data, linesize, AV_PIX_FMT_RGB24, whole, ow, oh, dst), 0);
            ck_assert_int_eq(dh__scale_rgb(&sws, data, linesize, AV_PIX_FMT_RGB24, crop, ow, oh, dst), 0);
            ck_assert_int_eq(dst[(size_t)ow * oh * 3 - 1], 77); /* a flat picture stays flat */
            sws_freeContext(sws);
            free(dst);
            munmap(m, total);
        }
    }
}
END_TEST

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

/* ---- images ---- */

static void make_images(void)
{
    make_media();
    const char *ff = tu_ffmpeg();
    int rc = tu_sh(
        "cd %s && %s -v error -y -nostdin -f lavfi -i testsrc2=size=320x240 -frames:v 1 "
        "-pix_fmt yuvj444p small444.jpg && "
        "%s -v error -y -nostdin -f lavfi -i testsrc2=size=2048x1536 -frames:v 1 big.jpg && "
        "%s -v error -y -nostdin -f lavfi -i testsrc2=size=1000x700 -frames:v 1 wide.png && "
        "%s -v error -y -nostdin -f lavfi -i testsrc2=size=96x64 -frames:v 1 -pix_fmt gray16be g16.png && "
        "%s -v error -y -nostdin -f lavfi -i testsrc2=size=96x64 -frames:v 1 -pix_fmt pal8 pal.png && "
        "%s -v error -y -nostdin -f lavfi -i testsrc2=size=96x64 -frames:v 1 -pix_fmt rgba rgba.png && "
        "head -c 3000 big.jpg > cut.jpg && %s -v error -y -nostdin -f lavfi -i testsrc2=size=96x64 "
        "-frames:v 1 img.bmp",
        media, ff, ff, ff, ff, ff, ff, ff);
    ck_assert_int_eq(rc, 0);
}

/* The tool's rendering of a crop of an image scaled to ow x oh, RGB24. */
static uint8_t *image_reference(const char *name, dh__rect r, int ow, int oh)
{
    return reference(name, 0, r, ow, oh);
}

static uint8_t *decode_image_ok(const char *name, const char *spec_text, dh_media_derived *md,
                                dh_media_info *mi_out)
{
    dh_probe_result pr = probe(name);
    dh_spec *spec = spec_json(spec_text);
    ck_assert_int_eq(dh_derive_media(spec, &pr.info, md), 0);
    uint8_t *out = malloc((size_t)md->out_bytes);
    char path[4096], err[256] = "";
    snprintf(path, sizeof path, "%s/%s", media, name);
    dh__decode_stats st;
    int rc = dh__decode_image(DH__SRC(path), spec, &pr.info, out, (size_t)md->out_bytes, &st, err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", name, err);
    ck_assert_int_eq(st.bytes_written, md->out_bytes);
    *mi_out = pr.info;
    mi_out->path = NULL;
    mi_out->keyframes = NULL;
    dh_spec_free(spec);
    dh_probe_result_clear(&pr);
    return out;
}

/* The DCT scale M (of M/8) the decoder used, recovered from the derived decode pixels. */
static int scale_used(const dh_media_info *mi, const dh_media_derived *md)
{
    for (int m = 1; m <= 8; m++)
        if ((int64_t)((mi->width * m + 7) / 8) * ((mi->height * m + 7) / 8) == md->decode_pixels)
            return m;
    return 8;
}

/* Decodes, then compares with the tool's rendering of the same region; min_db per case. */
static void image_case(const char *name, int size, double min_db)
{
    char spec[128];
    snprintf(spec, sizeof spec, "{\"image\":{\"resize\":{\"mode\":\"crop\",\"size\":%d}}}", size);
    dh_media_derived md;
    dh_media_info mi;
    uint8_t *out = decode_image_ok(name, spec, &md, &mi);
    int m = scale_used(&mi, &md);
    dh__rect r = dh__cover_crop((mi.width * m + 7) / 8, (mi.height * m + 7) / 8, size, size);
    /* The same region in full-resolution pixels, for the tool's full decode. */
    r = (dh__rect){r.x * 8 / m, r.y * 8 / m, r.w * 8 / m, r.h * 8 / m};
    uint8_t *ref = image_reference(name, r, size, size);
    double q = tu_psnr(out, ref, (size_t)md.out_bytes);
    ck_assert_msg(q >= min_db, "%s at %d px (DCT scale %d/8): PSNR %.1f dB", name, size, m, q);
    free(ref);
    free(out);
}

START_TEST(jpeg_and_png_match_ffmpeg)
{
    /* Lossless PNG decodes of every colour type, and a 4:4:4 JPEG at full scale (232 px
     * crop of 320x240 needs all of it), match the tool to 40 dB; a JPEG decoded at 2/8
     * scale for a 48 px crop still resembles the tool's full decode of the region. */
    const char *pngs[] = {"wide.png", "g16.png", "pal.png", "rgba.png"};
    for (int k = 0; k < 4; k++)
        image_case(pngs[k], 48, 40.0);
    image_case("small444.jpg", 232, 40.0);
    image_case("small444.jpg", 48, 25.0);
}
END_TEST

START_TEST(jpeg_decodes_at_the_dct_scale_derivation_counts)
{
    /* 2048x1536 to a 224 crop: 2/8 scale (512x384) as dh_derive_media() says; the result
     * still resembles the tool's full-resolution decode of the same region. */
    dh_media_derived md;
    dh_media_info mi;
    uint8_t *out = decode_image_ok("big.jpg", "{\"image\":{\"resize\":{\"mode\":\"crop\",\"size\":224}}}", &md, &mi);
    ck_assert_int_eq(md.decode_pixels, 512 * 384);
    dh__rect r = dh__cover_crop(512, 384, 224, 224);
    dh__rect full = {r.x * 4, r.y * 4, r.w * 4, r.h * 4};
    uint8_t *ref = image_reference("big.jpg", full, 224, 224);
    double q = tu_psnr(out, ref, (size_t)md.out_bytes);
    ck_assert_msg(q >= 25.0, "PSNR %.1f dB", q);
    free(ref);
    free(out);
}
END_TEST

START_TEST(anyres_tiles_are_base_then_grid)
{
    /* 1000x700 with 336 tiles: base tile, then a 2x2 grid (dh__image_grid). */
    dh_media_derived md;
    dh_media_info mi;
    uint8_t *out = decode_image_ok("wide.png", "{\"image\":{\"tiles\":{\"size\":336,\"max\":5,\"base\":true}}}", &md, &mi);
    ck_assert_int_eq(md.shape[0], 5);
    size_t tile = 336 * 336 * 3;
    uint8_t *base = image_reference("wide.png", (dh__rect){0, 0, 1000, 700}, 336, 336);
    ck_assert_double_ge(tu_psnr(out, base, tile), 40.0);
    uint8_t *last = image_reference("wide.png", (dh__rect){500, 350, 500, 350}, 336, 336);
    ck_assert_double_ge(tu_psnr(out + 4 * tile, last, tile), 40.0);
    free(base);
    free(last);
    free(out);
}
END_TEST

START_TEST(bad_images_are_clear_errors)
{
    dh_spec *s = spec_json("{\"image\":{\"resize\":{\"mode\":\"fixed\",\"size\":16}}}");
    char path[4096], err[256];
    uint8_t buf[16 * 16 * 3];
    dh_media_info mi = {.type = DH_MEDIA_IMAGE, .codec = DH_CODEC_JPEG, .width = 2048, .height = 1536};
    snprintf(path, sizeof path, "%s/cut.jpg", media);
    ck_assert_int_eq(dh__decode_image(DH__SRC(path), s, &mi, buf, sizeof buf, NULL, err, sizeof err), DH_EDECODE);
    ck_assert_msg(strstr(err, "JPEG data") != NULL, "%s", err);
    mi.width = 100;
    snprintf(path, sizeof path, "%s/big.jpg", media);
    ck_assert_int_eq(dh__decode_image(DH__SRC(path), s, &mi, buf, sizeof buf, NULL, err, sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "2048x1536 but its manifest entry says 100x1536") != NULL, "%s", err);
    mi.width = 96;
    mi.height = 64;
    mi.codec = DH_CODEC_OTHER;
    snprintf(path, sizeof path, "%s/img.bmp", media);
    ck_assert_int_eq(dh__decode_image(DH__SRC(path), s, &mi, buf, sizeof buf, NULL, err, sizeof err), DH_EUNSUPPORTED);
    snprintf(path, sizeof path, "%s/pal.png", media);
    ck_assert_int_eq(dh__decode_image(DH__SRC(path), s, &mi, buf, sizeof buf - 1, NULL, err, sizeof err), DH_ERANGE);
    snprintf(path, sizeof path, "%s/none.png", media);
    ck_assert_int_eq(dh__decode_image(DH__SRC(path), s, &mi, buf, sizeof buf, NULL, err, sizeof err), DH_ENOENT);
    dh_spec_free(s);
}
END_TEST

/* ---- audio ---- */

static void make_audio(void)
{
    media = tu_mkdtemp();
    const char *ff = tu_ffmpeg();
    int rc = tu_sh("cd %s && %s -v error -y -nostdin -f lavfi -i sine=frequency=440:sample_rate=16000 "
                   "-t 3 tone.flac && %s -v error -y -nostdin -f lavfi "
                   "-i sine=frequency=300:sample_rate=44100 -ac 2 -t 1.5 stereo.wav && "
                   "head -c 4000 tone.flac > cut.flac && echo 'not audio' > text.flac && "
                   "%s -v error -y -nostdin -f lavfi -i sine=sample_rate=16000 -frames:a 0 empty.flac && "
                   "%s -v error -y -nostdin -f lavfi -i sine=frequency=440:sample_rate=16000 -t 270 long.flac",
                   media, ff, ff, ff, ff);
    ck_assert_int_eq(rc, 0);
}

static float *tool_pcm(const char *name, int64_t n)
{
    char *cmd = NULL;
    if (asprintf(&cmd, "%s -v error -nostdin -i '%s/%s' -ac 1 -ar 16000 -f f32le -", tu_ffmpeg(),
                 media, name) < 0)
        return NULL;
    FILE *p = popen(cmd, "r");
    free(cmd);
    float *buf = calloc((size_t)n, sizeof *buf);
    size_t got = p ? fread(buf, sizeof *buf, (size_t)n, p) : 0;
    if (p)
        pclose(p);
    ck_assert_int_ge((int64_t)got, n - 200); /* the tool may end a few samples early */
    return buf;
}

static float *decode_audio_ok(const char *name, const char *spec_text, dh_media_derived *md)
{
    dh_probe_result pr = probe(name);
    dh_spec *spec = spec_json(spec_text);
    ck_assert_int_eq(dh_derive_media(spec, &pr.info, md), 0);
    float *out = malloc((size_t)md->out_bytes);
    char path[4096], err[256] = "";
    snprintf(path, sizeof path, "%s/%s", media, name);
    int rc = dh__decode_audio(DH__SRC(path), spec, &pr.info, (uint8_t *)out, (size_t)md->out_bytes, NULL,
                              err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", name, err);
    dh_spec_free(spec);
    dh_probe_result_clear(&pr);
    return out;
}

START_TEST(pcm_matches_ffmpeg)
{
    const char *pcm16k = "{\"audio\":{\"sample_rate\":16000,\"mel_bins\":0}}";
    const char *files[] = {"tone.flac", "stereo.wav"};
    for (int k = 0; k < 2; k++) {
        dh_media_derived md;
        float *out = decode_audio_ok(files[k], pcm16k, &md);
        int64_t n = md.shape[0];
        ck_assert_int_eq(n, k == 0 ? 48000 : 24000);
        float *ref = tool_pcm(files[k], n);
        double sig = 0, noise = 0;
        for (int64_t i = 0; i < n - 200; i++) {
            sig += (double)ref[i] * ref[i];
            noise += (double)(out[i] - ref[i]) * (out[i] - ref[i]);
        }
        double snr = noise > 0 ? 10 * log10(sig / noise) : INFINITY;
        ck_assert_msg(snr >= 40.0, "%s: SNR %.1f dB against the tool", files[k], snr);
        free(ref);
        free(out);
    }
}
END_TEST

START_TEST(log_mel_peaks_at_the_tone)
{
    /* 3 s at 100 frames/s: 80 x 300. A 440 Hz tone peaks in the filter centred nearest it. */
    dh_media_derived md;
    float *mel = decode_audio_ok("tone.flac", "{\"audio\":{\"sample_rate\":16000,\"mel_bins\":80,\"mel_fps\":100}}", &md);
    ck_assert_int_eq(md.shape[0], 80);
    ck_assert_int_eq(md.shape[1], 300);
    double lo = 0, hi = 2595.0 * log10(1.0 + 8000.0 / 700.0);
    int expect = 0;
    double best = INFINITY;
    for (int m = 0; m < 80; m++) {
        double centre = 700.0 * (pow(10.0, (lo + (hi - lo) * (m + 1) / 81) / 2595.0) - 1.0);
        if (fabs(centre - 440.0) < best)
            best = fabs(centre - 440.0), expect = m;
    }
    int argmax = 0;
    for (int m = 0; m < 80; m++) {
        ck_assert(isfinite(mel[m * 300 + 150]));
        if (mel[m * 300 + 150] > mel[argmax * 300 + 150])
            argmax = m;
    }
    ck_assert_int_le(abs(argmax - expect), 1);
    free(mel);
}
END_TEST

START_TEST(bad_audio_is_a_clear_error)
{
    dh_spec *s = spec_json("{\"audio\":{\"sample_rate\":16000,\"mel_bins\":0}}");
    char path[4096], err[256];
    float *buf = malloc(16000 * 11 * sizeof *buf);
    size_t cap = 16000 * 11 * sizeof *buf;
    dh_media_info mi = {.type = DH_MEDIA_AUDIO, .codec = DH_CODEC_FLAC, .duration_s = 10.0,
                        .sample_rate = 16000, .channels = 1};
    snprintf(path, sizeof path, "%s/tone.flac", media);
    ck_assert_int_eq(dh__decode_audio(DH__SRC(path), s, &mi, (uint8_t *)buf, cap, NULL, err, sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "lasts 3.000 s but its manifest entry says 10.000 s") != NULL, "%s", err);
    mi.duration_s = 3.0;
    mi.sample_rate = 22050;
    ck_assert_int_eq(dh__decode_audio(DH__SRC(path), s, &mi, (uint8_t *)buf, cap, NULL, err, sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "16000 Hz but its manifest entry says 22050 Hz") != NULL, "%s", err);
    mi.sample_rate = 16000;
    ck_assert_int_eq(dh__decode_audio(DH__SRC(path), s, &mi, (uint8_t *)buf, 100, NULL, err, sizeof err), DH_ERANGE);
    snprintf(path, sizeof path, "%s/cut.flac", media);
    ck_assert_int_ne(dh__decode_audio(DH__SRC(path), s, &mi, (uint8_t *)buf, cap, NULL, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/text.flac", media);
    ck_assert_int_ne(dh__decode_audio(DH__SRC(path), s, &mi, (uint8_t *)buf, cap, NULL, err, sizeof err), 0);
    free(buf);
    dh_spec_free(s);
}
END_TEST

/* Under a sanitizer the address space is the sanitizer's (shadow memory): no cap there. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TU_CAP_ADDRESS_SPACE 0
#else
#define TU_CAP_ADDRESS_SPACE 1
#endif

/*
 * Before: a header (a FLAC STREAMINFO, say) claiming 20 hours had its
 * samples allocated before a byte was decoded - 4.6 GB here for a 3-s file;
 * the fuzzer met 2.4 GB. Now at most 16 MiB is reserved for a claim and the
 * rest follows the decoded samples, so under an address space 1 GiB above
 * what the process holds the claim is found out as the contradiction it is,
 * not as a failed allocation.
 */
START_TEST(a_claimed_duration_is_not_allocated_before_it_is_decoded)
{
    dh_spec *s = spec_json("{\"audio\":{\"sample_rate\":16000,\"mel_bins\":8,\"mel_fps\":1}}");
    dh_media_info mi = {.type = DH_MEDIA_AUDIO, .codec = DH_CODEC_FLAC, .duration_s = 72000.0,
                        .sample_rate = 16000, .channels = 1};
    dh_media_derived md;
    ck_assert_int_eq(dh_derive_media(s, &mi, &md), 0);
    ck_assert_int_eq(md.out_bytes, 8 * 72000 * 4); /* the mel slot itself is small */
    uint8_t *slot = malloc((size_t)md.out_bytes);
    if (TU_CAP_ADDRESS_SPACE) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        ck_assert(f && fscanf(f, "%ld", &pages) == 1);
        fclose(f);
        rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 30);
        struct rlimit rl = {cap, cap};
        ck_assert_int_eq(setrlimit(RLIMIT_AS, &rl), 0);
    }
    char path[4096], err[256] = "";
    snprintf(path, sizeof path, "%s/tone.flac", media);
    int rc = dh__decode_audio(DH__SRC(path), s, &mi, slot, (size_t)md.out_bytes, NULL, err, sizeof err);
    ck_assert_msg(rc == DH_ECORRUPT, "%s (%s)", dh_err_name(rc), err);
    ck_assert_msg(strstr(err, "lasts 3.000 s but its manifest entry says 72000.000 s") != NULL, "%s", err);
    /* A real 270-s item is more than the 16 MiB reserved up front: its samples grow the
     * buffer as they are decoded, and the tone is where the first 3 s put it. */
    mi.duration_s = 270.0;
    ck_assert_int_eq(dh_derive_media(s, &mi, &md), 0);
    float *mel = malloc((size_t)md.out_bytes);
    snprintf(path, sizeof path, "%s/long.flac", media);
    rc = dh__decode_audio(DH__SRC(path), s, &mi, (uint8_t *)mel, (size_t)md.out_bytes, NULL, err,
                          sizeof err);
    ck_assert_msg(rc == 0, "%s (%s)", dh_err_name(rc), err);
    int64_t nf = md.shape[1];
    for (int64_t f = 1; f < nf - 1; f += 30) { /* 1, 31, ... 241 s: the same peak */
        int peak = 0, peak1 = 0;
        for (int m = 1; m < 8; m++) {
            peak = mel[m * nf + f] > mel[peak * nf + f] ? m : peak;
            peak1 = mel[m * nf + 1] > mel[peak1 * nf + 1] ? m : peak1;
        }
        ck_assert_int_eq(peak, peak1);
        ck_assert_float_eq_tol(mel[peak * nf + f], mel[peak1 * nf + 1], 0.05f);
    }
    free(mel);
    /* A stream of no samples at all (UBSan, before: memcpy from no buffer). */
    mi.duration_s = 1.0;
    snprintf(path, sizeof path, "%s/empty.flac", media);
    rc = dh__decode_audio(DH__SRC(path), s, &mi, slot, (size_t)md.out_bytes, NULL, err, sizeof err);
    ck_assert_msg(rc == DH_ECORRUPT, "%s (%s)", dh_err_name(rc), err);
    ck_assert_msg(strstr(err, "lasts 0.000 s but its manifest entry says 1.000 s") != NULL, "%s", err);
    free(slot);
    dh_spec_free(s);
}
END_TEST

/* ---- sources: what a decoder may open (issue 12: FIFOs, devices, symlink escapes, time) ---- */

static void make_sources(void)
{
    make_media();
    const char *ff = tu_ffmpeg();
    int rc = tu_sh(
        "cd %s && %s -v error -y -nostdin -f lavfi -i testsrc2=size=64x48 -frames:v 1 in.png && "
        "%s -v error -y -nostdin -f lavfi -i sine=sample_rate=16000 -t 1 tone.flac && "
        "mkdir -p root/v root/.cache && cp in.png root/.cache/blob && cp in.png outside.png && "
        "ln -s ../.cache/blob root/v/inside.png && ln -s %s/outside.png root/v/abs.png && "
        "ln -s ../../outside.png root/v/up.png && ln -s /etc/passwd root/v/passwd.png && "
        "mkfifo root/v/fifo.png root/v/fifo.mp4 && ln -s /dev/zero zero.flac",
        media, ff, ff, media);
    ck_assert_int_eq(rc, 0);
}

static int decode_in_root(const char *rel, const dh_media_info *mi, char *err, size_t errlen)
{
    char root[4096];
    snprintf(root, sizeof root, "%s/root", media);
    dh_spec *s = spec_json("{\"image\":{\"resize\":{\"mode\":\"fixed\",\"size\":32}}}");
    static uint8_t buf[32 * 32 * 3];
    dh__media_src src = {.root = root, .path = rel};
    int rc = dh__decode_image(&src, s, mi, buf, sizeof buf, NULL, err, errlen);
    dh_spec_free(s);
    return rc;
}

START_TEST(sources_are_confined_beneath_the_root_by_the_kernel)
{
    dh_probe_result pr = probe("in.png");
    char err[256];
    ck_assert_int_eq(decode_in_root("v/inside.png", &pr.info, err, sizeof err), 0);
    const char *escapes[] = {"v/abs.png", "v/up.png", "v/passwd.png", "../outside.png"};
    for (int k = 0; k < 4; k++) {
        err[0] = 0;
        ck_assert_int_eq(decode_in_root(escapes[k], &pr.info, err, sizeof err), DH_EPATH);
        ck_assert_msg(strstr(err, "outside the manifest's directory"), "%s: %s", escapes[k], err);
    }
    dh_probe_result_clear(&pr);
}
END_TEST

START_TEST(fifos_and_devices_are_refused_without_blocking)
{
    dh_probe_result pr = probe("in.png");
    char err[256], path[4096];
    /* Before: open() of a FIFO blocked forever (the test's timeout would fire). */
    ck_assert_int_eq(decode_in_root("v/fifo.png", &pr.info, err, sizeof err), DH_ENOTMEDIA);
    ck_assert_msg(strstr(err, "a FIFO"), "%s", err);
    snprintf(path, sizeof path, "%s/root/v/fifo.mp4", media);
    dh_probe_result bad;
    ck_assert_int_eq(dh_probe_file(path, NULL, &bad, err, sizeof err), DH_ENOTMEDIA);
    ck_assert_msg(strstr(err, "a FIFO"), "%s", err);
    /* Before: an audio path linked to /dev/zero spun in stream probing. */
    dh_probe_result tone = probe("tone.flac");
    snprintf(path, sizeof path, "%s/zero.flac", media);
    dh_spec *s = spec_json("{\"audio\":{\"sample_rate\":16000}}");
    static float pcm[16000];
    ck_assert_int_eq(dh__decode_audio(DH__SRC(path), s, &tone.info, (uint8_t *)pcm, sizeof pcm,
                                      NULL, err, sizeof err), DH_ENOTMEDIA);
    ck_assert_msg(strstr(err, "a character device"), "%s", err);
    ck_assert_int_eq(dh_probe_file(path, NULL, &bad, err, sizeof err), DH_ENOTMEDIA);
    dh_spec_free(s);
    dh_probe_result_clear(&tone);
    dh_probe_result_clear(&pr);
}
END_TEST

START_TEST(a_sample_over_its_time_limit_fails_with_its_own_error)
{
    dh_probe_result pr = probe("bf.mp4");
    char path[4096], err[256] = "";
    snprintf(path, sizeof path, "%s/bf.mp4", media);
    dh_spec *s = spec_json("{\"video\":{\"frames\":16,\"resize\":{\"mode\":\"fixed\","
                           "\"size\":64}}}");
    dh_media_derived md;
    ck_assert_int_eq(dh_derive_media(s, &pr.info, &md), 0);
    uint8_t *buf = malloc((size_t)md.out_bytes);
    dh__media_src src = {.path = path, .limit_s = 1e-6};
    ck_assert_int_eq(dh__decode_video(&src, s, &pr.info, buf, (size_t)md.out_bytes, NULL, err,
                                      sizeof err), DH_ETIMEDOUT);
    ck_assert_msg(strstr(err, "time limit"), "%s", err);
    /* The limit counts from `started`, shared by a sample's items: an item opened after the
     * time is up fails at once, even an image (whose decoding has no reads to interrupt). */
    dh_probe_result img = probe("in.png");
    static uint8_t px[32 * 32 * 3];
    dh_spec *is = spec_json("{\"image\":{\"resize\":{\"mode\":\"fixed\",\"size\":32}}}");
    char ipath[4096];
    snprintf(ipath, sizeof ipath, "%s/in.png", media);
    dh__media_src late = {.path = ipath, .limit_s = 1, .started = dh__source_now() - 5};
    err[0] = 0;
    ck_assert_int_eq(dh__decode_image(&late, is, &img.info, px, sizeof px, NULL, err, sizeof err),
                     DH_ETIMEDOUT);
    ck_assert_msg(strstr(err, "time limit of 1.0 s"), "%s", err);
    dh_spec_free(is);
    dh_probe_result_clear(&img);
    src.limit_s = 60; /* a generous limit changes nothing */
    ck_assert_int_eq(dh__decode_video(&src, s, &pr.info, buf, (size_t)md.out_bytes, NULL, err,
                                      sizeof err), 0);
    free(buf);
    dh_spec_free(s);
    dh_probe_result_clear(&pr);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("video");
    tcase_add_unchecked_fixture(tc, make_media, drop_media);
    tcase_set_timeout(tc, 120);
    ADD_TEST(tc, bframes_match_ffmpeg_with_crop);
    ADD_TEST(tc, bframes_match_ffmpeg_fixed_and_long_side);
    ADD_TEST(tc, variable_frame_rate_matches_ffmpeg);
    ADD_TEST(tc, sparse_samples_seek_dense_ones_do_not);
    ADD_TEST(tc, split_parts_decode_disjoint_keyframe_segments);
    ADD_TEST(tc, frames_cut_by_the_edit_list_are_not_described);
    ADD_TEST(tc, scaling_stays_inside_the_padding_of_a_picture);
    ADD_TEST(tc, bad_input_is_a_clear_error);
    suite_add_tcase(s, tc);
    TCase *ti = tcase_create("image");
    tcase_add_unchecked_fixture(ti, make_images, drop_media);
    tcase_set_timeout(ti, 120);
    ADD_TEST(ti, jpeg_and_png_match_ffmpeg);
    ADD_TEST(ti, jpeg_decodes_at_the_dct_scale_derivation_counts);
    ADD_TEST(ti, anyres_tiles_are_base_then_grid);
    ADD_TEST(ti, bad_images_are_clear_errors);
    suite_add_tcase(s, ti);
    TCase *ta = tcase_create("audio");
    tcase_add_unchecked_fixture(ta, make_audio, drop_media);
    tcase_set_timeout(ta, 60);
    ADD_TEST(ta, pcm_matches_ffmpeg);
    ADD_TEST(ta, log_mel_peaks_at_the_tone);
    ADD_TEST(ta, bad_audio_is_a_clear_error);
    ADD_TEST(ta, a_claimed_duration_is_not_allocated_before_it_is_decoded);
    suite_add_tcase(s, ta);
    TCase *tsrc = tcase_create("sources");
    tcase_add_unchecked_fixture(tsrc, make_sources, drop_media);
    tcase_set_timeout(tsrc, 30);
    ADD_TEST(tsrc, sources_are_confined_beneath_the_root_by_the_kernel);
    ADD_TEST(tsrc, fifos_and_devices_are_refused_without_blocking);
    ADD_TEST(tsrc, a_sample_over_its_time_limit_fails_with_its_own_error);
    suite_add_tcase(s, tsrc);
    return tu_run(s);
}
