/*
 * test_derive.c - the preprocessing spec and descriptor derivation on
 * hand-made cases whose answers are worked out in the comments.
 */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

static dh_spec *spec_json(const char *json)
{
    dh_spec *s = NULL;
    char err[256] = "";
    int rc = dh_spec_parse(json, strlen(json), &s, err, sizeof err);
    ck_assert_msg(rc == 0, "spec %s: %s", json, err);
    return s;
}

static dh_spec *builtin(const char *name)
{
    dh_spec *s = NULL;
    ck_assert_int_eq(dh_spec_builtin(name, &s), 0);
    return s;
}

static dh_media_derived derive(const dh_spec *s, const dh_media_info *mi)
{
    dh_media_derived d;
    ck_assert_int_eq(dh_derive_media(s, mi, &d), 0);
    return d;
}

START_TEST(uniform_sampling_decodes_straight_through)
{
    /* 16 of 300 frames: indices floor((2k+1)*300/32) = 9, 28, ..., 234, 253, 271, 290.
     * Keyframes at 0 and 250. Up to 234 the decoder runs forward from 0 (235 frames, the
     * opening seek). 253 lies behind keyframe 250 > 234, so it seeks there and decodes
     * 250..253 (4) instead of 19 frames forward; then 271 and 290 forward (18 + 19).
     * Total 276 frames, 2 seeks. */
    dh_spec *s = spec_json("{\"video\":{\"frames\":16}}");
    int32_t kf[] = {0, 250};
    dh_media_info v = tu_video(1280, 720, 30, 300, kf, 2);
    int64_t idx[16];
    ck_assert_int_eq(dh_video_sample_frames(s, &v, idx, 16), 16);
    ck_assert_int_eq(idx[0], 9);
    ck_assert_int_eq(idx[1], 28);
    ck_assert_int_eq(idx[15], 290);
    dh_media_derived d = derive(s, &v);
    ck_assert_int_eq(d.sampled_frames, 16);
    ck_assert_int_eq(d.decoded_frames, 276);
    ck_assert_int_eq(d.seeks, 2);
    ck_assert_int_eq(d.decode_pixels, 276LL * 1280 * 720);
    /* Without the keyframe at 250 it is one pass 0..290. */
    dh_media_info one = tu_video(1280, 720, 30, 300, kf, 1);
    d = derive(s, &one);
    ck_assert_int_eq(d.decoded_frames, 291);
    ck_assert_int_eq(d.seeks, 1);
    dh_spec_free(s);
}
END_TEST

START_TEST(sparse_sampling_seeks)
{
    /* 2 of 1000 frames: 250 and 750. Keyframes every 100: seek to 200, decode 51; seek to
     * 700, decode 51. Without keyframes: one pass 0..750 = 751 frames. */
    dh_spec *s = spec_json("{\"video\":{\"frames\":2}}");
    int32_t kf[10];
    for (int i = 0; i < 10; i++)
        kf[i] = i * 100;
    dh_media_info v = tu_video(640, 360, 25, 1000, kf, 10);
    dh_media_derived d = derive(s, &v);
    ck_assert_int_eq(d.decoded_frames, 102);
    ck_assert_int_eq(d.seeks, 2);
    dh_media_info nokf = tu_video(640, 360, 25, 1000, NULL, 0);
    d = derive(s, &nokf);
    ck_assert_int_eq(d.decoded_frames, 751);
    ck_assert_int_eq(d.seeks, 1);
    dh_spec_free(s);
}
END_TEST

START_TEST(dense_sampling_across_keyframes)
{
    /* 50 of 100 frames: odd indices 1..99; keyframes every 10. Crossing a keyframe seeks
     * (t=11 from cur=9: key 10 > 9) but costs the same 2 frames: 100 decoded, 10 seeks. */
    dh_spec *s = spec_json("{\"video\":{\"frames\":50}}");
    int32_t kf[10];
    for (int i = 0; i < 10; i++)
        kf[i] = i * 10;
    dh_media_info v = tu_video(64, 64, 10, 100, kf, 10);
    dh_media_derived d = derive(s, &v);
    ck_assert_int_eq(d.decoded_frames, 100);
    ck_assert_int_eq(d.seeks, 10);
    /* More samples than frames: every frame once. */
    dh_spec *all = spec_json("{\"video\":{\"frames\":500}}");
    d = derive(all, &v);
    ck_assert_int_eq(d.sampled_frames, 100);
    ck_assert_int_eq(d.decoded_frames, 100);
    dh_spec_free(s);
    dh_spec_free(all);
}
END_TEST

START_TEST(temporal_range)
{
    /* 2 s..4 s of a 30 fps video: frames [60, 120); 6 uniform: 60 + (2k+1)*60/12 = 65, 75, ... */
    dh_spec *s = spec_json("{\"video\":{\"frames\":6,\"start_s\":2,\"end_s\":4}}");
    dh_media_info v = tu_video(64, 64, 30, 300, NULL, 0);
    int64_t idx[6];
    ck_assert_int_eq(dh_video_sample_frames(s, &v, idx, 6), 6);
    ck_assert_int_eq(idx[0], 65);
    ck_assert_int_eq(idx[5], 115);
    /* A range past the end of a short video keeps its last frame. */
    dh_media_info shortv = tu_video(64, 64, 30, 30, NULL, 0);
    ck_assert_int_eq(dh_video_sample_frames(s, &shortv, idx, 6), 1);
    ck_assert_int_eq(idx[0], 29);
    dh_spec_free(s);
}
END_TEST

START_TEST(kinetics_shapes_and_tokens)
{
    /* 16 frames at 224x224, patch 14 (16x16 grid), temporal patch 2: 8 * 256 = 2048 tokens. */
    dh_spec *s = builtin("kinetics-clips");
    dh_media_info v = tu_video(340, 256, 25, 250, NULL, 0);
    dh_media_derived d = derive(s, &v);
    ck_assert_int_eq(d.ndim, 4);
    ck_assert_int_eq(d.shape[0], 16);
    ck_assert_int_eq(d.shape[1], 224);
    ck_assert_int_eq(d.shape[2], 224);
    ck_assert_int_eq(d.shape[3], 3);
    ck_assert_int_eq(d.out_bytes, 16 * 224 * 224 * 3);
    ck_assert_int_eq(d.latents, 2048);
    ck_assert_int_eq(d.tokens, 2048);
    ck_assert_int_eq(d.resize_pixels, 16 * 224 * 224);
    dh_spec_free(s);
}
END_TEST

START_TEST(llava_fps_sampling_and_pooling)
{
    /* 1 fps: 40 s -> 40 frames; 3 min -> capped at 64. 384/14 = 27, pooled 2x2 rounding
     * up = 14x14 = 196 tokens per frame (docs/WORKLOADS.md). */
    dh_spec *s = builtin("llava-video-sft");
    dh_media_info v = tu_video(1280, 720, 30, 1200, NULL, 0);
    dh_media_derived d = derive(s, &v);
    ck_assert_int_eq(d.sampled_frames, 40);
    ck_assert_int_eq(d.tokens, 40 * 196);
    ck_assert_int_eq(d.shape[1], 384);
    dh_media_info longv = tu_video(1280, 720, 30, 5400, NULL, 0);
    d = derive(s, &longv);
    ck_assert_int_eq(d.sampled_frames, 64);
    ck_assert_int_eq(d.tokens, 64 * 196);
    dh_spec_free(s);
}
END_TEST

START_TEST(native_resolution_long_side)
{
    /* 1920x1080 20 s: 2 fps -> 40 frames. Long side 448: 1080*448/1920 = 252 = 18*14.
     * Latents: ceil(40/2) * 18 * 32 = 11520. Portrait 1080x1920 swaps the grid. A small
     * 320x240 stays at native size rounded to multiples of 14: 322x238. */
    dh_spec *s = builtin("native-res-video");
    dh_media_info v = tu_video(1920, 1080, 30, 600, NULL, 0);
    dh_media_derived d = derive(s, &v);
    ck_assert_int_eq(d.sampled_frames, 40);
    ck_assert_int_eq(d.out_width, 448);
    ck_assert_int_eq(d.out_height, 252);
    ck_assert_int_eq(d.latents, 20 * 18 * 32);
    dh_media_info p = tu_video(1080, 1920, 30, 600, NULL, 0);
    d = derive(s, &p);
    ck_assert_int_eq(d.out_width, 252);
    ck_assert_int_eq(d.out_height, 448);
    dh_media_info small = tu_video(320, 240, 30, 600, NULL, 0);
    d = derive(s, &small);
    ck_assert_int_eq(d.out_width, 322);
    ck_assert_int_eq(d.out_height, 238);
    dh_spec_free(s);
}
END_TEST

START_TEST(t2v_buckets_and_vae_latents)
{
    /* 49 consecutive frames from the middle of 240: 95..143. 16:9 720p -> 720x1280 bucket;
     * latents (1 + 48/4) * 720/16 * 1280/16 = 13*45*80. A 4:3 640x480 clip is nearer the
     * 480x848 bucket in log-aspect (|ln(1.767/1.333)| < |ln(1.778/1.333)|): 13*30*53. */
    dh_spec *s = builtin("t2v-diffusion");
    dh_media_info v = tu_video(1280, 720, 24, 240, NULL, 0);
    int64_t idx[49];
    ck_assert_int_eq(dh_video_sample_frames(s, &v, idx, 49), 49);
    ck_assert_int_eq(idx[0], 95);
    ck_assert_int_eq(idx[48], 143);
    dh_media_derived d = derive(s, &v);
    ck_assert_int_eq(d.shape[1], 720);
    ck_assert_int_eq(d.shape[2], 1280);
    ck_assert_int_eq(d.latents, 13 * 45 * 80);
    ck_assert_int_eq(d.decoded_frames, 144); /* one pass 0..143, no keyframe list */
    dh_media_info sd = tu_video(640, 480, 24, 240, NULL, 0);
    d = derive(s, &sd);
    ck_assert_int_eq(d.shape[1], 480);
    ck_assert_int_eq(d.shape[2], 848);
    ck_assert_int_eq(d.latents, 13 * 30 * 53);
    dh_spec_free(s);
}
END_TEST

START_TEST(anyres_tiles)
{
    /* 1000x700 with 336 tiles: 3x3 = 9 > 5 -> 2x3 -> 2x2 = 4, plus the base tile = 5 tiles
     * of 24x24 = 576 tokens. A 300x300 image: 1 tile + base = 2. */
    dh_spec *s = builtin("anyres-images");
    dh_media_info im = {.type = DH_MEDIA_IMAGE, .codec = DH_CODEC_PNG, .width = 1000, .height = 700};
    dh_media_derived d = derive(s, &im);
    ck_assert_int_eq(d.ndim, 4);
    ck_assert_int_eq(d.shape[0], 5);
    ck_assert_int_eq(d.shape[1], 336);
    ck_assert_int_eq(d.tokens, 5 * 576);
    ck_assert_int_eq(d.out_bytes, 5 * 336 * 336 * 3);
    ck_assert_int_eq(d.decode_pixels, 1000 * 700);
    /* What an outside loader must do: the same 2x2 grid after a base tile. */
    dh_media_recipe rc;
    ck_assert_int_eq(dh_media_recipe_of(s, &im, &rc), 0);
    ck_assert_str_eq(rc.resize, "fixed");
    ck_assert_int_eq(rc.tile_cols * rc.tile_rows + rc.base_tile, d.shape[0]);
    ck_assert_int_eq(rc.base_tile, 1);
    im.width = im.height = 300;
    d = derive(s, &im);
    ck_assert_int_eq(d.shape[0], 2);
    ck_assert_int_eq(dh_media_recipe_of(s, &im, &rc), 0);
    ck_assert_int_eq(rc.tile_cols * rc.tile_rows, 1);
    ck_assert_int_eq(dh_media_recipe_of(NULL, &im, &rc), DH_EINVAL);
    dh_spec_free(s);
    s = builtin("speech-asr"); /* audio: the rate and mel layout */
    dh_media_info au = {.type = DH_MEDIA_AUDIO, .codec = DH_CODEC_FLAC, .sample_rate = 44100,
                        .channels = 2, .duration_s = 3};
    ck_assert_int_eq(dh_media_recipe_of(s, &au, &rc), 0);
    ck_assert_int_eq(rc.sample_rate, 16000);
    ck_assert_int_eq(rc.mel_bins, 80);
    ck_assert_int_eq(rc.mel_fps, 100);
    ck_assert_str_eq(rc.resize, "native");
    dh_spec_free(s);
    s = builtin("kinetics-clips");
    dh_media_info v = tu_video(640, 360, 25, 100, NULL, 0);
    ck_assert_int_eq(dh_media_recipe_of(s, &v, &rc), 0);
    ck_assert_str_eq(rc.resize, "crop");
    dh_spec_free(s);
}
END_TEST

START_TEST(jpeg_dct_scaling)
{
    /* 2048x1536 JPEG to a 224 centre crop: the cover size is 299x224; 1/8 scale gives
     * 256x192 (too small), 2/8 gives 512x384 -> 196608 decoded pixels. PNG decodes all. */
    dh_spec *s = builtin("laion-images");
    dh_media_info im = {.type = DH_MEDIA_IMAGE, .codec = DH_CODEC_JPEG, .width = 2048, .height = 1536};
    dh_media_derived d = derive(s, &im);
    ck_assert_int_eq(d.decode_pixels, 512 * 384);
    ck_assert_int_eq(d.tokens, 256);
    ck_assert_int_eq(d.ndim, 3);
    ck_assert_int_eq(d.out_bytes, 224 * 224 * 3);
    im.codec = DH_CODEC_PNG;
    d = derive(s, &im);
    ck_assert_int_eq(d.decode_pixels, 2048 * 1536);
    /* A source smaller than the target is decoded whole. */
    im.codec = DH_CODEC_JPEG;
    im.width = 100;
    im.height = 80;
    d = derive(s, &im);
    ck_assert_int_eq(d.decode_pixels, 100 * 80);
    dh_spec_free(s);
}
END_TEST

START_TEST(audio_and_text)
{
    /* 12 s at 100 mel frames/s: 80 x 1200 float32; 25 tokens/s -> 300 tokens. Raw PCM: 12*16000. */
    dh_spec *s = builtin("speech-asr");
    dh_media_info a = {.type = DH_MEDIA_AUDIO, .codec = DH_CODEC_FLAC, .duration_s = 12.0,
                       .sample_rate = 16000, .channels = 1};
    dh_media_derived d = derive(s, &a);
    ck_assert_int_eq(d.ndim, 2);
    ck_assert_int_eq(d.shape[0], 80);
    ck_assert_int_eq(d.shape[1], 1200);
    ck_assert_int_eq(d.out_bytes, 80 * 1200 * 4);
    ck_assert_int_eq(d.tokens, 300);
    dh_spec *pcm = spec_json("{\"audio\":{\"mel_bins\":0,\"sample_rate\":16000}}");
    d = derive(pcm, &a);
    ck_assert_int_eq(d.ndim, 1);
    ck_assert_int_eq(d.shape[0], 192000);
    dh_spec_free(s);
    dh_spec_free(pcm);
}
END_TEST

START_TEST(sample_totals)
{
    /* interleaved-docs: two 224-crop images at 64 tokens each (16x16 pooled 2x2) + 500
     * text tokens, capped at 400 by the spec below -> 528 tokens. */
    dh_manifest *m;
    dh_manifest_new("", NULL, &m);
    const char *line =
        "{\"id\":\"doc\",\"text_tokens\":500,\"media\":["
        "{\"type\":\"image\",\"path\":\"a.jpg\",\"codec\":\"jpeg\",\"width\":800,\"height\":600},"
        "{\"type\":\"image\",\"path\":\"b.png\",\"codec\":\"png\",\"width\":300,\"height\":900}]}";
    ck_assert_int_eq(dh_manifest_parse_line(m, line, strlen(line), 1, NULL, 0), 0);
    dh_spec *s = spec_json("{\"image\":{\"resize\":{\"mode\":\"crop\",\"size\":224},\"pool\":2},"
                           "\"text\":{\"max_tokens\":400}}");
    dh_sample_derived sd;
    dh_media_derived md[2];
    ck_assert_int_eq(dh_derive_sample(s, m, 0, &sd, md), 0);
    ck_assert_int_eq(md[0].tokens, 64);
    ck_assert_int_eq(md[1].tokens, 64);
    ck_assert_int_eq(sd.tokens, 400 + 128);
    ck_assert_int_eq(sd.latents, 128);
    ck_assert_int_eq(sd.out_bytes, 400 * 4 + 2 * 224 * 224 * 3);
    ck_assert_int_eq(sd.media_count, 2);
    ck_assert_int_eq(dh_derive_sample(s, m, 1, &sd, NULL), DH_EINVAL);
    dh_spec_free(s);
    dh_manifest_free(m);
}
END_TEST

/* A text without "text_tokens" is counted by the spec's text section: 4 bytes a token by
 * default, or whitespace words times tokens_per_word; a given count wins; the cap applies. */
START_TEST(text_tokens_are_counted_by_the_spec)
{
    dh_manifest *m;
    dh_manifest_new("", NULL, &m);
    const char *lines[] = {"{\"id\":\"a\",\"text\":\"a red  car\\ton the\\nroad\"}",
                           "{\"id\":\"b\",\"text\":\"words\",\"text_tokens\":9}",
                           "{\"id\":\"c\",\"text\":\"\"}"};
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(dh_manifest_parse_line(m, lines[k], strlen(lines[k]), k + 1, NULL, 0), 0);
    dh_sample_derived sd;
    dh_spec *s = spec_json("{}");
    ck_assert_int_eq(dh_derive_sample(s, m, 0, &sd, NULL), 0);
    ck_assert_int_eq(sd.tokens, 6); /* 22 bytes / 4, rounded up */
    ck_assert_int_eq(sd.out_bytes, 6 * 4);
    ck_assert_int_eq(dh_derive_sample(s, m, 1, &sd, NULL), 0);
    ck_assert_int_eq(sd.tokens, 9);
    ck_assert_int_eq(dh_derive_sample(s, m, 2, &sd, NULL), 0);
    ck_assert_int_eq(sd.tokens, 0);
    uint64_t h_default = dh_spec_hash(s);
    dh_spec_free(s);
    s = spec_json("{\"text\":{\"tokens_per_word\":1.3}}");
    ck_assert_int_eq(dh_derive_sample(s, m, 0, &sd, NULL), 0);
    ck_assert_int_eq(sd.tokens, 8); /* 6 words x 1.3 = 7.8, rounded up */
    ck_assert_uint_ne(dh_spec_hash(s), h_default);
    dh_spec_free(s);
    s = spec_json("{\"text\":{\"bytes_per_token\":2,\"max_tokens\":6}}");
    ck_assert_int_eq(dh_derive_sample(s, m, 0, &sd, NULL), 0);
    ck_assert_int_eq(sd.tokens, 6); /* 11, capped */
    dh_spec_free(s);
    s = spec_json("{\"text\":{\"bytes_per_token\":4}}"); /* the default, spelled out */
    ck_assert_uint_eq(dh_spec_hash(s), h_default);
    dh_spec_free(s);
    dh_manifest_free(m);
}
END_TEST

static void expect_spec_error(const char *json, int code, const char *needle)
{
    dh_spec *s = (dh_spec *)1;
    char err[256] = "";
    int rc = dh_spec_parse(json, strlen(json), &s, err, sizeof err);
    ck_assert_msg(rc == code, "%s: expected %s got %s (%s)", json, dh_err_name(code),
                  dh_err_name(rc), err);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err, needle) != NULL, "\"%s\" lacks \"%s\"", err, needle);
}

/* Issue 12: a spec of 100,000 frames at 65536 px derived 1.4 TB per item and failed later
 * as an out-of-memory with no hint; it is DH_ELIMIT at derivation now. */
START_TEST(outputs_over_the_item_limit_are_refused)
{
    dh_spec *s = spec_json("{\"video\":{\"frames\":100000,\"resize\":{\"mode\":\"fixed\","
                           "\"width\":65536,\"height\":65536}}}");
    dh_media_info mi = tu_video(640, 360, 30, 200000, NULL, 0);
    dh_media_derived d;
    ck_assert_int_eq(dh_derive_media(s, &mi, &d), DH_ELIMIT);
    dh_spec_free(s);
    /* just under: 8 frames of 8192 x 8192 x 3 = 1.5 GiB */
    s = spec_json("{\"video\":{\"frames\":8,\"resize\":{\"mode\":\"fixed\",\"width\":8192,"
                  "\"height\":8192}}}");
    ck_assert_int_eq(dh_derive_media(s, &mi, &d), 0);
    ck_assert_int_eq(d.out_bytes, INT64_C(8) * 8192 * 8192 * 3);
    dh_spec_free(s);
}
END_TEST

START_TEST(spec_errors)
{
    expect_spec_error("{\"vidoe\":{}}", DH_ESCHEMA, "spec.vidoe: unknown key");
    expect_spec_error("{\"video\":{\"frame\":8}}", DH_ESCHEMA, "video.frame: unknown key");
    expect_spec_error("{\"video\":{\"resize\":{\"mode\":\"crop\",\"sise\":3}}}", DH_ESCHEMA,
                      "video.resize.sise");
    expect_spec_error("{\"video\":{\"resize\":{\"mode\":\"zoom\"}}}", DH_ESCHEMA, "mode");
    expect_spec_error("{\"video\":{\"resize\":{\"mode\":\"crop\"}}}", DH_ESCHEMA, "needs");
    expect_spec_error("{\"video\":{\"frames\":\"8\"}}", DH_ESCHEMA, "expected an integer");
    expect_spec_error("{\"video\":{\"patch\":0}}", DH_ERANGE, "video.patch");
    expect_spec_error("{\"video\":{\"sampling\":\"random\"}}", DH_ESCHEMA, "sampling");
    expect_spec_error("{\"video\":{\"start_s\":5,\"end_s\":2}}", DH_ERANGE, "end_s");
    expect_spec_error("{\"image\":{\"tiles\":{\"base\":1}}}", DH_ESCHEMA, "base");
    expect_spec_error("{\"video\":{\"resize\":{\"mode\":\"bucket\",\"buckets\":[[1]]}}}",
                      DH_ESCHEMA, "buckets[0]");
    expect_spec_error("{\"video\":", DH_EPARSE, "malformed JSON");
    expect_spec_error("{\"text\":{\"bytes_per_token\":4,\"tokens_per_word\":1}}", DH_ESCHEMA,
                      "not both");
    expect_spec_error("{\"text\":{\"bytes_per_token\":0}}", DH_ERANGE, "text.bytes_per_token");
    expect_spec_error("{\"text\":{\"words\":1}}", DH_ESCHEMA, "text.words: unknown key");
    expect_spec_error("[]", DH_ESCHEMA, "expected a JSON object");
    dh_spec *s;
    char err[256];
    ck_assert_int_eq(dh_spec_load("/nonexistent/spec.json", &s, err, sizeof err), DH_ENOENT);
    ck_assert_msg(strstr(err, "/nonexistent/spec.json") != NULL, "%s", err);
    ck_assert_int_eq(dh_spec_builtin("no-such-workload", &s), DH_ENOENT);
}
END_TEST

START_TEST(builtin_specs_cover_the_suite)
{
    const char *suite[] = {"kinetics-clips",  "webvid-caption", "panda-hires",
                           "native-res-video", "llava-video-sft", "laion-images",
                           "anyres-images",   "interleaved-docs", "speech-asr",
                           "omni-mix",        "t2v-diffusion"};
    const char *const *names = dh_spec_builtin_names();
    int count = 0;
    while (names[count])
        count++;
    ck_assert_int_eq(count, 12); /* the eleven workloads plus "default" */
    for (size_t i = 0; i < sizeof suite / sizeof suite[0]; i++) {
        dh_spec *s = NULL;
        ck_assert_msg(dh_spec_builtin(suite[i], &s) == 0, "%s", suite[i]);
        dh_spec_free(s);
    }
}
END_TEST

START_TEST(spec_from_file)
{
    char *dir = tu_mkdtemp();
    char *path = tu_write(dir, "spec.json", "{\"name\":\"x\",\"video\":{\"frames\":4}}", -1);
    dh_spec *s = NULL;
    ck_assert_int_eq(dh_spec_load(path, &s, NULL, 0), 0);
    dh_media_info v = tu_video(64, 64, 10, 100, NULL, 0);
    ck_assert_int_eq(derive(s, &v).sampled_frames, 4);
    dh_spec_free(s);
    tu_sh("rm -rf %s", dir);
    free(path);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("derive");
    TCase *tc = tcase_create("derive");
    ADD_TEST(tc, uniform_sampling_decodes_straight_through);
    ADD_TEST(tc, outputs_over_the_item_limit_are_refused);
    ADD_TEST(tc, sparse_sampling_seeks);
    ADD_TEST(tc, dense_sampling_across_keyframes);
    ADD_TEST(tc, temporal_range);
    ADD_TEST(tc, kinetics_shapes_and_tokens);
    ADD_TEST(tc, llava_fps_sampling_and_pooling);
    ADD_TEST(tc, native_resolution_long_side);
    ADD_TEST(tc, t2v_buckets_and_vae_latents);
    ADD_TEST(tc, anyres_tiles);
    ADD_TEST(tc, jpeg_dct_scaling);
    ADD_TEST(tc, audio_and_text);
    ADD_TEST(tc, text_tokens_are_counted_by_the_spec);
    ADD_TEST(tc, sample_totals);
    ADD_TEST(tc, spec_errors);
    ADD_TEST(tc, builtin_specs_cover_the_suite);
    ADD_TEST(tc, spec_from_file);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
