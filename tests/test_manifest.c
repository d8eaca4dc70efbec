/* test_manifest.c - manifest parsing, every bad-input class, loading and accounting. */
#include "catalog/catalog.h"
#include "core/core.h"
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VIDEO_OK                                                                                   \
    "{\"id\":\"s1\",\"text_tokens\":12,\"media\":[{\"type\":\"video\",\"path\":\"v/1.mp4\","      \
    "\"codec\":\"h264\",\"width\":1280,\"height\":720,\"fps\":30,\"frames\":300,"               \
    "\"duration\":10.0,\"keyframes\":[0,250],\"bytes\":1234567}],\"sim\":{\"cpu_ms\":41.5,"     \
    "\"gpu_ms\":12.0},\"unknown_key\":{\"ignored\":true}}"

static dh_manifest *m;
static char err[1024];

static void setup(void)
{
    ck_assert_int_eq(dh_manifest_new("/data", NULL, &m), 0);
    err[0] = 0;
}

static void teardown(void)
{
    dh_manifest_free(m);
    m = NULL;
}

static int parse(const char *line)
{
    err[0] = 0;
    return dh_manifest_parse_line(m, line, strlen(line), 7, err, sizeof err);
}

/* The line must fail with code, leave the table unchanged, and name what is wrong. */
static void expect_bad(const char *line, int code, const char *needle)
{
    int64_t before = dh_manifest_count(m);
    uint64_t hash = dh_manifest_hash(m);
    int rc = parse(line);
    ck_assert_msg(rc == code, "line %s: expected %s, got %s (%s)", line, dh_err_name(code),
                  dh_err_name(rc), err);
    ck_assert_msg(strstr(err, needle) != NULL, "message \"%s\" lacks \"%s\"", err, needle);
    ck_assert_msg(strstr(err, "line 7") != NULL, "message \"%s\" lacks the line number", err);
    ck_assert_int_eq(dh_manifest_count(m), before);
    ck_assert_uint_eq(dh_manifest_hash(m), hash);
}

START_TEST(parses_design_example)
{
    ck_assert_int_eq(parse(VIDEO_OK), 0);
    ck_assert_int_eq(dh_manifest_count(m), 1);
    dh_sample_info si;
    ck_assert_int_eq(dh_manifest_sample(m, 0, &si), 0);
    ck_assert_str_eq(si.id, "s1");
    ck_assert_int_eq(si.text_tokens, 12);
    ck_assert_int_eq(si.media_count, 1);
    ck_assert_int_eq(si.line, 7);
    ck_assert_double_eq_tol(si.sim_cpu_ms, 41.5, 1e-6);
    dh_media_info mi;
    ck_assert_int_eq(dh_manifest_media(m, 0, 0, &mi), 0);
    ck_assert_int_eq(mi.type, DH_MEDIA_VIDEO);
    ck_assert_int_eq(mi.codec, DH_CODEC_H264);
    ck_assert_str_eq(mi.path, "v/1.mp4");
    ck_assert_int_eq(mi.width, 1280);
    ck_assert_int_eq(mi.height, 720);
    ck_assert_int_eq(mi.frames, 300);
    ck_assert_int_eq(mi.keyframe_count, 2);
    ck_assert_int_eq(mi.keyframes[1], 250);
    ck_assert_int_eq(mi.bytes, 1234567);
    ck_assert_int_eq(dh_manifest_media(m, 0, 1, &mi), DH_EINVAL);
    ck_assert_int_eq(dh_manifest_find(m, "s1"), 0);
    ck_assert_int_eq(dh_manifest_find(m, "nope"), -1);
}
END_TEST

START_TEST(multimodal_and_text_only)
{
    ck_assert_int_eq(parse("{\"id\":\"t\",\"text_tokens\":5}"), 0);
    ck_assert_int_eq(
        parse("{\"id\":\"mm\",\"media\":[{\"type\":\"image\",\"path\":\"i/1.jpg\",\"codec\":"
              "\"jpeg\",\"width\":1024,\"height\":768},{\"type\":\"audio\",\"path\":\"a/1.flac\","
              "\"codec\":\"flac\",\"sample_rate\":16000,\"channels\":1,\"duration\":12.3}]}"),
        0);
    dh_sample_info si;
    dh_manifest_sample(m, 1, &si);
    ck_assert_int_eq(si.media_count, 2);
    ck_assert(si.sim_gpu_ms < 0); /* absent truth */
    dh_media_info mi;
    dh_manifest_media(m, 1, 1, &mi);
    ck_assert_int_eq(mi.type, DH_MEDIA_AUDIO);
    ck_assert_int_eq(mi.sample_rate, 16000);
    ck_assert_double_eq_tol(mi.duration_s, 12.3, 1e-4);
}
END_TEST

/* Shards and text: a media item may be a byte range of its file (a tar member); a sample may
 * carry its text and label. Each bad value is named. */
START_TEST(members_text_and_labels)
{
    /* a first sample without any of them: the optional columns come later, it reads absent */
    ck_assert_int_eq(parse("{\"id\":\"k0\",\"media\":[{\"type\":\"image\",\"path\":\"i.jpg\","
                           "\"width\":4,\"height\":4}]}"), 0);
    ck_assert_int_eq(parse("{\"id\":\"k1\",\"text\":\"a caf\\u00e9 \xe2\x82\xac\",\"label\":-3,"
                           "\"media\":[{\"type\":\"image\",\"path\":\"s/00000.tar\","
                           "\"offset\":1536,\"bytes\":4000,\"member\":\"k1.jpg\",\"width\":4,"
                           "\"height\":4}]}"), 0);
    ck_assert_int_eq(parse("{\"id\":\"k2\",\"text_tokens\":3}"), 0);
    dh_sample_info si;
    dh_media_info mi;
    dh_manifest_sample(m, 0, &si);
    ck_assert(!si.text && !si.has_label);
    dh_manifest_media(m, 0, 0, &mi);
    ck_assert(mi.offset == 0 && !mi.member);
    dh_manifest_sample(m, 1, &si);
    ck_assert_str_eq(si.text, "a caf\xc3\xa9 \xe2\x82\xac");
    ck_assert_int_eq(si.has_label, 1);
    ck_assert_int_eq(si.label, -3);
    dh_manifest_media(m, 1, 0, &mi);
    ck_assert_int_eq(mi.offset, 1536);
    ck_assert_int_eq(mi.bytes, 4000);
    ck_assert_str_eq(mi.member, "k1.jpg");
    dh_manifest_sample(m, 2, &si);
    ck_assert_ptr_null(si.text);
    ck_assert_int_eq(si.has_label, 0);
    ck_assert_ptr_null(si.meta);
    /* a meta object, kept as compact JSON in its key order (numbers as jansson writes them) */
    ck_assert_int_eq(parse("{\"id\":\"k3\",\"text_tokens\":1,\"meta\": {\"z\": [1, 2.5, "
                           "\"\\u00e9\"], \"a\": {\"b\": null}}}"), 0);
    dh_manifest_sample(m, 3, &si);
    ck_assert_str_eq(si.meta, "{\"z\":[1,2.5,\"\xc3\xa9\"],\"a\":{\"b\":null}}");
    dh_manifest_sample(m, 1, &si);
    ck_assert_ptr_null(si.meta);
    expect_bad("{\"id\":\"b7\",\"text_tokens\":1,\"meta\":[1]}", DH_ESCHEMA,
               "meta: expected an object, got an array");
    expect_bad("{\"id\":\"b8\"}", DH_ESCHEMA, "neither \"media\" nor \"text\"");
    expect_bad("{\"id\":\"b1\",\"media\":[{\"type\":\"image\",\"path\":\"s.tar\",\"offset\":512,"
               "\"width\":4,\"height\":4}]}", DH_ESCHEMA, "media[0].offset: a byte range needs "
               "its size in \"bytes\"");
    /* invalid UTF-8 is refused by the JSON layer, a lone surrogate escape too */
    expect_bad("{\"id\":\"b2\",\"text_tokens\":1,\"text\":\"bad \xc3\x28 byte\"}", DH_EPARSE,
               "unable to decode byte 0xc3");
    expect_bad("{\"id\":\"b3\",\"text_tokens\":1,\"text\":\"x\\ud800\"}", DH_EPARSE, "");
    expect_bad("{\"id\":\"b4\",\"text_tokens\":1,\"label\":1.5}", DH_ESCHEMA,
               "label: expected an integer");
    expect_bad("{\"id\":\"b5\",\"text_tokens\":1,\"text\":7}", DH_ESCHEMA,
               "text: expected a string");
    expect_bad("{\"id\":\"b6\",\"media\":[{\"type\":\"image\",\"path\":\"s.tar\",\"offset\":-1,"
               "\"bytes\":3,\"width\":4,\"height\":4}]}", DH_ERANGE, "offset: -1 is below");
    /* text, label and ranges are part of what a sample is */
    dh_manifest *a, *b;
    dh_manifest_new("", NULL, &a);
    dh_manifest_new("", NULL, &b);
    const char *l1 = "{\"id\":\"1\",\"text_tokens\":1,\"text\":\"a dog\"}";
    const char *l2 = "{\"id\":\"1\",\"text_tokens\":1,\"text\":\"a cat\"}";
    const char *l3 = "{\"id\":\"2\",\"text_tokens\":1,\"meta\":{\"x\":1}}";
    const char *l4 = "{\"id\":\"2\",\"text_tokens\":1,\"meta\":{\"x\":2}}";
    ck_assert_int_eq(dh_manifest_parse_line(a, l1, strlen(l1), 1, NULL, 0), 0);
    ck_assert_int_eq(dh_manifest_parse_line(b, l2, strlen(l2), 1, NULL, 0), 0);
    ck_assert_uint_ne(dh_manifest_hash(a), dh_manifest_hash(b));
    dh_manifest_free(b);
    dh_manifest_new("", NULL, &b);
    ck_assert_int_eq(dh_manifest_parse_line(b, l1, strlen(l1), 1, NULL, 0), 0);
    ck_assert_int_eq(dh_manifest_parse_line(a, l3, strlen(l3), 2, NULL, 0), 0);
    ck_assert_int_eq(dh_manifest_parse_line(b, l4, strlen(l4), 2, NULL, 0), 0);
    ck_assert_uint_ne(dh_manifest_hash(a), dh_manifest_hash(b));
    dh_manifest_free(a);
    dh_manifest_free(b);
}
END_TEST

START_TEST(video_timing_is_completed)
{
    /* frames from duration * fps, fps from frames / duration. */
    ck_assert_int_eq(parse("{\"id\":\"a\",\"media\":[{\"type\":\"video\",\"path\":\"a\","
                           "\"width\":2,\"height\":2,\"fps\":25,\"duration\":4}]}"),
                     0);
    ck_assert_int_eq(parse("{\"id\":\"b\",\"media\":[{\"type\":\"video\",\"path\":\"b\","
                           "\"width\":2,\"height\":2,\"frames\":50,\"duration\":2}]}"),
                     0);
    dh_media_info mi;
    dh_manifest_media(m, 0, 0, &mi);
    ck_assert_int_eq(mi.frames, 100);
    dh_manifest_media(m, 1, 0, &mi);
    ck_assert_double_eq_tol(mi.fps, 25.0, 1e-6);
    expect_bad("{\"id\":\"c\",\"media\":[{\"type\":\"video\",\"path\":\"c\",\"width\":2,"
               "\"height\":2,\"frames\":50}]}",
               DH_ESCHEMA, "two of");
}
END_TEST

/* Issue 12: timing the loader accepted but nothing downstream could use. */
START_TEST(video_timing_must_be_usable_and_agree)
{
    /* 1e-300 passed validation and became 0 once stored: every command then stopped with
     * "cannot derive" instead of skipping this line. */
    expect_bad("{\"id\":\"a\",\"media\":[{\"type\":\"video\",\"path\":\"a\",\"width\":2,"
               "\"height\":2,\"fps\":1e-300,\"duration\":5}]}",
               DH_ESCHEMA, "media[0].fps: 1e-300 is below 0.001");
    /* 120 frames, 5 s and 100000 fps contradict: the decoder sampled frame 0 eight times. */
    expect_bad("{\"id\":\"b\",\"media\":[{\"type\":\"video\",\"path\":\"b\",\"width\":2,"
               "\"height\":2,\"frames\":120,\"duration\":5,\"fps\":100000}]}",
               DH_ESCHEMA, "media[0]: contradictory timing: 120 frames at 100000 fps last 0.0012 s");
    /* Containers round: a frame count, a duration and an average rate that nearly agree are
     * fine (variable frame rate, edit lists). */
    ck_assert_int_eq(parse("{\"id\":\"c\",\"media\":[{\"type\":\"video\",\"path\":\"c\","
                           "\"width\":2,\"height\":2,\"frames\":119,\"duration\":5.08,"
                           "\"fps\":24}]}"),
                     0);
    ck_assert_int_eq(parse("{\"id\":\"d\",\"media\":[{\"type\":\"video\",\"path\":\"d\","
                           "\"width\":2,\"height\":2,\"frames\":60,\"duration\":3.0,"
                           "\"fps\":25.7}]}"),
                     0);
}
END_TEST

START_TEST(malformed_json)
{
    expect_bad("{\"id\":\"x\",", DH_EPARSE, "malformed JSON");
    expect_bad("not json at all", DH_EPARSE, "malformed JSON");
    expect_bad("[1,2,3]", DH_ESCHEMA, "must be a JSON object");
    expect_bad("{\"id\":\"x\",\"id\":\"y\",\"text_tokens\":1}", DH_EPARSE, "duplicate");
    expect_bad("\"\\u0000\"", DH_EPARSE, "malformed JSON");
    /* Binary garbage and an empty buffer. */
    ck_assert_int_ne(dh_manifest_parse_line(m, "\xff\xfe\x00\x01", 4, 7, err, sizeof err), 0);
    ck_assert_int_ne(dh_manifest_parse_line(m, "", 0, 7, err, sizeof err), 0);
}
END_TEST

START_TEST(wrong_types_and_missing_keys)
{
    expect_bad("{\"text_tokens\":3}", DH_ESCHEMA, "missing required key \"id\"");
    expect_bad("{\"id\":7,\"text_tokens\":3}", DH_ESCHEMA, "id: expected a string");
    expect_bad("{\"id\":\"\",\"text_tokens\":3}", DH_ESCHEMA, "id: must be");
    expect_bad("{\"id\":\"x\"}", DH_ESCHEMA, "neither");
    expect_bad("{\"id\":\"x\",\"text_tokens\":\"many\"}", DH_ESCHEMA, "text_tokens: expected an integer");
    expect_bad("{\"id\":\"x\",\"text_tokens\":2.5}", DH_ESCHEMA, "expected an integer");
    expect_bad("{\"id\":\"x\",\"media\":{}}", DH_ESCHEMA, "media: expected an array");
    expect_bad("{\"id\":\"x\",\"media\":[3]}", DH_ESCHEMA, "media[0]: expected an object");
    expect_bad("{\"id\":\"x\",\"media\":[{\"path\":\"a\"}]}", DH_ESCHEMA, "missing required key \"type\"");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"image\",\"width\":2,\"height\":2}]}",
               DH_ESCHEMA, "missing required key \"path\"");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"hologram\",\"path\":\"a\"}]}", DH_ESCHEMA,
               "not video, image or audio");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"image\",\"path\":\"a\",\"width\":\"9\","
               "\"height\":2}]}",
               DH_ESCHEMA, "media[0].width: expected an integer, got a string");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"image\",\"path\":\"a\"}]}", DH_ESCHEMA,
               "needs positive \"width\" and \"height\"");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"audio\",\"path\":\"a\"}]}", DH_ESCHEMA,
               "audio needs a positive \"duration\"");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"video\",\"path\":\"a\",\"width\":2,"
               "\"height\":2,\"frames\":9,\"fps\":3,\"keyframes\":\"0\"}]}",
               DH_ESCHEMA, "keyframes: expected an array");
    expect_bad("{\"id\":\"x\",\"text_tokens\":1,\"sim\":[1]}", DH_ESCHEMA, "sim: expected an object");
    expect_bad("{\"id\":\"x\",\"text_tokens\":1,\"sim\":{\"gpu_ms\":\"fast\"}}", DH_ESCHEMA,
               "sim.gpu_ms: expected a number");
    /* Issue 12: 1e9 ms (11.6 days per sample) was accepted and slept by emulated ranks. */
    expect_bad("{\"id\":\"x\",\"text_tokens\":1,\"sim\":{\"gpu_ms\":1e9}}", DH_ELIMIT,
               "sim.gpu_ms: 1e+09 is over the limit 3.6e+06");
}
END_TEST

START_TEST(negative_and_absurd_sizes)
{
    expect_bad("{\"id\":\"x\",\"text_tokens\":-1}", DH_ERANGE, "below the minimum");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"image\",\"path\":\"a\",\"width\":-5,"
               "\"height\":2}]}",
               DH_ERANGE, "media[0].width: -5");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"image\",\"path\":\"a\",\"width\":100000,"
               "\"height\":100000}]}",
               DH_ELIMIT, "pixels, over the limit");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"video\",\"path\":\"a\",\"width\":2,"
               "\"height\":2,\"frames\":999999999,\"fps\":30}]}",
               DH_ELIMIT, "frames: 999999999 is over the limit");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"audio\",\"path\":\"a\",\"duration\":1e7}]}",
               DH_ELIMIT, "duration");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"image\",\"path\":\"a\",\"width\":2,"
               "\"height\":2,\"bytes\":9223372036854775807}]}",
               DH_ELIMIT, "bytes");
    expect_bad("{\"id\":\"x\",\"text_tokens\":99999999999}", DH_ELIMIT, "text_tokens");
    /* An absurd duration is refused before frames are derived from it (no overflow). */
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"video\",\"path\":\"a\",\"width\":2,"
               "\"height\":2,\"duration\":1e300,\"fps\":30}]}",
               DH_ELIMIT, "media[0].duration: 1e+300 is over the limit");
    /* A duration derived from frames / fps is bounded too. */
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"video\",\"path\":\"a\",\"width\":2,"
               "\"height\":2,\"frames\":1000000,\"fps\":0.001}]}",
               DH_ELIMIT, "s is over the limit");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"video\",\"path\":\"a\",\"width\":2,"
               "\"height\":2,\"frames\":10,\"fps\":-30}]}",
               DH_ERANGE, "fps");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"video\",\"path\":\"a\",\"width\":2,"
               "\"height\":2,\"frames\":10,\"fps\":30,\"keyframes\":[0,5,3]}]}",
               DH_ERANGE, "ascending");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"video\",\"path\":\"a\",\"width\":2,"
               "\"height\":2,\"frames\":10,\"fps\":30,\"keyframes\":[0,10]}]}",
               DH_ERANGE, "past the last frame");
}
END_TEST

START_TEST(configurable_limits)
{
    dh_manifest_free(m);
    dh_limits lim;
    dh_limits_default(&lim);
    lim.max_pixels = 100;
    lim.max_media = 1;
    lim.max_line_bytes = 200;
    lim.max_text_bytes = 8;
    ck_assert_int_eq(dh_manifest_new("", &lim, &m), 0);
    expect_bad("{\"id\":\"t\",\"text\":\"nine bytes\"}", DH_ELIMIT,
               "text: 10 bytes, over the limit 8 (--max-text-bytes)");
    expect_bad("{\"id\":\"t\",\"text_tokens\":1,\"meta\":{\"a\": 123}}", DH_ELIMIT,
               "meta: 9 bytes as compact JSON, over the limit 8");
    ck_assert_int_eq(parse("{\"id\":\"t\",\"text\":\"8 bytes!\",\"meta\":{\"a\": 12}}"), 0);
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"image\",\"path\":\"a\",\"width\":11,"
               "\"height\":10}]}",
               DH_ELIMIT, "over the limit 100");
    expect_bad("{\"id\":\"x\",\"media\":[{\"type\":\"audio\",\"path\":\"a\",\"duration\":1},"
               "{\"type\":\"audio\",\"path\":\"b\",\"duration\":1}]}",
               DH_ELIMIT, "2 items, over the limit 1");
    char big[300];
    memset(big, ' ', sizeof big - 1);
    big[sizeof big - 1] = 0;
    memcpy(big, "{\"id\":\"x\",\"text_tokens\":1}", 26); /* without its NUL */
    expect_bad(big, DH_ELIMIT, "bytes, over the limit 200");
    ck_assert_int_eq(parse("{\"id\":\"x\",\"media\":[{\"type\":\"image\",\"path\":\"a\","
                           "\"width\":10,\"height\":10}]}"),
                     0);
}
END_TEST

START_TEST(paths_must_stay_inside)
{
    const char *fmt = "{\"id\":\"%s\",\"media\":[{\"type\":\"image\",\"path\":\"%s\",\"width\":2,"
                      "\"height\":2}]}";
    const char *bad[] = {"/etc/passwd", "../secret.jpg", "a/../../b.jpg", "./..", "a/..", ""};
    const char *good[] = {"a.jpg", "a/../b.jpg", "./a/./b.jpg", "a/b/../../c.jpg"};
    char line[512];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(line, sizeof line, fmt, "x", bad[i]);
        expect_bad(line, bad[i][0] ? DH_EPATH : DH_ESCHEMA, "path");
    }
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char id[8];
        snprintf(id, sizeof id, "g%zu", i);
        snprintf(line, sizeof line, fmt, id, good[i]);
        ck_assert_msg(parse(line) == 0, "%s: %s", good[i], err);
    }
}
END_TEST

START_TEST(duplicate_ids)
{
    ck_assert_int_eq(parse("{\"id\":\"dup\",\"text_tokens\":1}"), 0);
    expect_bad("{\"id\":\"dup\",\"text_tokens\":2}", DH_EDUP, "already used on line 7");
    /* Many ids force the index to grow; all stay findable. */
    char line[128];
    for (int i = 0; i < 5000; i++) {
        snprintf(line, sizeof line, "{\"id\":\"k%d\",\"text_tokens\":%d}", i, i);
        ck_assert_int_eq(parse(line), 0);
    }
    for (int i = 0; i < 5000; i += 97) {
        snprintf(line, sizeof line, "k%d", i);
        ck_assert_int_eq(dh_manifest_find(m, line), i + 1);
    }
    expect_bad("{\"id\":\"k4999\",\"text_tokens\":2}", DH_EDUP, "k4999");
}
END_TEST

/* ---- samples built in memory (the built-in workloads) ---- */

static const int64_t built_kf[] = {0, 250};

static dh__built_media built_video(void)
{
    return (dh__built_media){.type = DH_MEDIA_VIDEO, .codec = DH_CODEC_H264, .path = "v/1.mp4",
                             .width = 1280, .height = 720, .fps = 30, .frames = 300,
                             .keyframes = built_kf, .nkeyframes = 2};
}

START_TEST(a_built_sample_is_its_line)
{
    dh__built_media media[3] = {
        built_video(),
        {.type = DH_MEDIA_IMAGE, .codec = DH_CODEC_PNG, .path = "i/1.png", .width = 64,
         .height = 48},
        {.type = DH_MEDIA_AUDIO, .codec = DH_CODEC_FLAC, .path = "a/1.flac", .rate = 16000,
         .channels = 1, .duration = 3.25}};
    dh__built_sample b = {.id = "s1", .text_tokens = 12, .nmedia = 3, .media = media};
    ck_assert_int_eq(dh__manifest_add_built(m, &b, 7, err, sizeof err), 0);
    b.id = "s2";
    b.nmedia = 0;
    ck_assert_int_eq(dh__manifest_add_built(m, &b, 8, err, sizeof err), 0);
    dh_manifest *p;
    ck_assert_int_eq(dh_manifest_new("/data", NULL, &p), 0);
    const char *l1 = "{\"id\":\"s1\",\"text_tokens\":12,\"media\":[{\"type\":\"video\","
                     "\"path\":\"v/1.mp4\",\"codec\":\"h264\",\"width\":1280,\"height\":720,"
                     "\"fps\":30,\"frames\":300,\"keyframes\":[0,250]},{\"type\":\"image\","
                     "\"path\":\"i/1.png\",\"codec\":\"png\",\"width\":64,\"height\":48},"
                     "{\"type\":\"audio\",\"path\":\"a/1.flac\",\"codec\":\"flac\","
                     "\"sample_rate\":16000,\"channels\":1,\"duration\":3.25}]}";
    const char *l2 = "{\"id\":\"s2\",\"text_tokens\":12}";
    ck_assert_int_eq(dh_manifest_parse_line(p, l1, strlen(l1), 7, err, sizeof err), 0);
    ck_assert_int_eq(dh_manifest_parse_line(p, l2, strlen(l2), 8, err, sizeof err), 0);
    ck_assert_uint_eq(dh_manifest_hash(m), dh_manifest_hash(p));
    ck_assert_int_eq(dh_manifest_find(m, "s2"), 1);
    for (int32_t j = 0; j < 3; j++) {
        dh_media_info x, y;
        ck_assert_int_eq(dh_manifest_media(m, 0, j, &x), 0);
        ck_assert_int_eq(dh_manifest_media(p, 0, j, &y), 0);
        ck_assert_str_eq(x.path, y.path);
        ck_assert(x.type == y.type && x.codec == y.codec && x.width == y.width &&
                  x.height == y.height && x.frames == y.frames && x.fps == y.fps &&
                  x.duration_s == y.duration_s && x.sample_rate == y.sample_rate &&
                  x.channels == y.channels && x.keyframe_count == y.keyframe_count);
    }
    dh_media_info v;
    dh_manifest_media(m, 0, 0, &v);
    ck_assert(v.duration_s == 10.0 && v.keyframes[1] == 250); /* timing completed as parsed */
    dh_manifest_free(p);
}
END_TEST

/* A built sample must fail with code, change nothing, and say which sample and why. */
static void expect_bad_built(const dh__built_sample *b, int code, const char *needle)
{
    int64_t before = dh_manifest_count(m);
    uint64_t hash = dh_manifest_hash(m);
    err[0] = 0;
    ck_assert_int_eq(dh__manifest_add_built(m, b, 9, err, sizeof err), code);
    ck_assert_int_eq(dh_manifest_count(m), before);
    ck_assert_uint_eq(dh_manifest_hash(m), hash);
    ck_assert_msg(strstr(err, needle) && strstr(err, "line 9"), "error \"%s\" lacks \"%s\"",
                  err, needle);
}

START_TEST(a_built_sample_is_checked_as_its_line)
{
    dh__built_media v = built_video();
    dh__built_sample b = {.id = "x", .text_tokens = 1, .nmedia = 1, .media = &v};
    ck_assert_int_eq(dh__manifest_add_built(m, &b, 3, err, sizeof err), 0);
    expect_bad_built(&b, DH_EDUP, "already used on line 3");
    b.id = "y";
    static const int64_t down[] = {0, 250, 100}, past[] = {0, 300};
    v.keyframes = down;
    v.nkeyframes = 3;
    expect_bad_built(&b, DH_ERANGE, "keyframes[2]: 100 must be >= 0 and ascending");
    v.keyframes = past;
    v.nkeyframes = 2;
    expect_bad_built(&b, DH_ERANGE, "past the last frame");
    v = built_video();
    v.path = "../../etc/passwd";
    expect_bad_built(&b, DH_EPATH, "escapes the manifest directory");
    v = built_video();
    v.fps = 0;
    v.frames = 0;
    expect_bad_built(&b, DH_ESCHEMA, "needs two of");
    v = built_video();
    v.width = 0;
    expect_bad_built(&b, DH_ESCHEMA, "media[0].video needs positive");
    v = built_video();
    v.fps = -1;
    expect_bad_built(&b, DH_ERANGE, "media[0].fps: -1 must be a finite number >= 0");
    v = built_video();
    v.width = INT64_C(1) << 31;
    expect_bad_built(&b, DH_ELIMIT, "media[0].width");
    v = built_video();
    b.text_tokens = -2;
    expect_bad_built(&b, DH_ERANGE, "text_tokens: -2 is below the minimum 0");
    b.text_tokens = 1;
    b.nmedia = 300;
    expect_bad_built(&b, DH_ELIMIT, "media: 300 items");
    b.nmedia = 1;
    b.id = "";
    expect_bad_built(&b, DH_ESCHEMA, "id: must be");
}
END_TEST

/* Ids in ascending order are checked against the last one and found by bisection; the
 * index is made when one comes out of order, and every id before it must then be in it. */
START_TEST(ids_in_order_and_out_of_order)
{
    char line[128], id[32];
    for (int i = 0; i < 3000; i++) {
        snprintf(line, sizeof line, "{\"id\":\"a%05d\",\"text_tokens\":1}", i);
        ck_assert_int_eq(parse(line), 0);
    }
    ck_assert_uint_eq(m->idx_cap, 0); /* not needed yet */
    ck_assert_int_eq(dh_manifest_find(m, "a00000"), 0);
    ck_assert_int_eq(dh_manifest_find(m, "a02999"), 2999);
    ck_assert_int_eq(dh_manifest_find(m, "a01234"), 1234);
    ck_assert_int_eq(dh_manifest_find(m, "a012345"), -1);
    ck_assert_int_eq(dh_manifest_find(m, "0"), -1);
    ck_assert_int_eq(dh_manifest_find(m, "b"), -1);
    expect_bad("{\"id\":\"a02999\",\"text_tokens\":1}", DH_EDUP, "already used on line 7");
    expect_bad("{\"id\":\"a00017\",\"text_tokens\":1}", DH_EDUP, "a00017");
    /* in order again after the refusals, then one out of order: all are indexed */
    ck_assert_int_eq(parse("{\"id\":\"a03000\",\"text_tokens\":1}"), 0);
    ck_assert_int_eq(parse("{\"id\":\"Z\",\"text_tokens\":1}"), 0);
    ck_assert_uint_gt(m->idx_cap, 0);
    for (int i = 0; i <= 3000; i += 7) {
        snprintf(id, sizeof id, "a%05d", i);
        ck_assert_int_eq(dh_manifest_find(m, id), i);
        snprintf(line, sizeof line, "{\"id\":\"%s\",\"text_tokens\":1}", id);
        expect_bad(line, DH_EDUP, id);
    }
    ck_assert_int_eq(dh_manifest_find(m, "Z"), 3001);
    expect_bad("{\"id\":\"a03000\",\"text_tokens\":1}", DH_EDUP, "a03000");
    expect_bad("{\"id\":\"Z\",\"text_tokens\":1}", DH_EDUP, "Z");
    ck_assert_int_eq(parse("{\"id\":\"zz\",\"text_tokens\":1}"), 0); /* kept indexed */
    expect_bad("{\"id\":\"zz\",\"text_tokens\":1}", DH_EDUP, "zz");
    ck_assert_int_eq(dh_manifest_find(m, "zz"), 3002);
    ck_assert_int_eq(dh_manifest_find(m, "a0300"), -1);
}
END_TEST

START_TEST(memory_per_sample_is_compact)
{
    char line[512];
    for (int i = 0; i < 20000; i++) {
        snprintf(line, sizeof line,
                 "{\"id\":\"s%06d\",\"text_tokens\":40,\"media\":[{\"type\":\"video\","
                 "\"path\":\"v/%06d.mp4\",\"width\":640,\"height\":360,\"fps\":30,"
                 "\"frames\":300,\"keyframes\":[0,250]}]}",
                 i, i);
        ck_assert_int_eq(parse(line), 0);
    }
    /* Capacity slack of the growing arrays is included: stay under 2x the 128 B goal here. */
    double per = (double)dh_manifest_memory(m) / 20000.0;
    ck_assert_msg(per < 256.0, "%.1f bytes per sample while growing", per);
}
END_TEST

/* ---- file loading ---- */

typedef struct {
    int n;
    int64_t lines[16];
    int codes[16];
    char ids[16][32];
    char msgs[16][600];
} diag_log;

static void log_diag(const dh_diag *d, void *user)
{
    diag_log *l = user;
    if (l->n < 16) {
        l->lines[l->n] = d->line;
        l->codes[l->n] = d->code;
        snprintf(l->ids[l->n], sizeof l->ids[0], "%s", d->sample_id ? d->sample_id : "");
        snprintf(l->msgs[l->n], sizeof l->msgs[0], "%s", d->message);
    }
    l->n++;
}

static const char *mixed_manifest =
    "{\"id\":\"a\",\"text_tokens\":1}\r\n"
    "\n"
    "{\"id\":\"b\",\"text_tokens\":-1}\n"
    "   \n"
    "{broken\n"
    "{\"id\":\"a\",\"text_tokens\":2}\n"
    "{\"id\":\"c\",\"media\":[{\"type\":\"image\",\"path\":\"img/c.jpg\",\"width\":4,\"height\":4}]}\n"
    "{\"id\":\"d\",\"text_tokens\":4}"; /* no final newline */

START_TEST(load_skip_accounts_every_line)
{
    char *dir = tu_mkdtemp();
    char *path = tu_write(dir, "m.jsonl", mixed_manifest, -1);
    dh_load_opts o;
    dh_load_opts_default(&o);
    diag_log log = {0};
    o.diag = log_diag;
    o.diag_user = &log;
    dh_manifest *mm = NULL;
    dh_load_stats st;
    ck_assert_int_eq(dh_manifest_load(path, &o, &mm, &st), 0);
    ck_assert_int_eq(st.lines, 6);
    ck_assert_int_eq(st.blank, 2);
    ck_assert_int_eq(st.loaded, 3);
    ck_assert_int_eq(st.skipped, 3);
    ck_assert_int_eq(st.loaded + st.skipped, st.lines);
    ck_assert_int_eq(dh_manifest_count(mm), 3);
    ck_assert_str_eq(dh_manifest_dir(mm), dir);
    ck_assert_int_eq(log.n, 3);
    ck_assert_int_eq(log.lines[0], 3);
    ck_assert_int_eq(log.codes[0], DH_ERANGE);
    ck_assert_str_eq(log.ids[0], "b");
    ck_assert_int_eq(log.lines[1], 5);
    ck_assert_int_eq(log.codes[1], DH_EPARSE);
    ck_assert_str_eq(log.ids[1], "");
    ck_assert_int_eq(log.lines[2], 6);
    ck_assert_int_eq(log.codes[2], DH_EDUP);
    ck_assert_msg(strstr(log.msgs[2], "m.jsonl:6: sample \"a\"") != NULL, "%s", log.msgs[2]);
    dh_sample_info si;
    dh_manifest_sample(mm, 2, &si);
    ck_assert_str_eq(si.id, "d");
    ck_assert_int_eq(si.line, 8);
    dh_manifest_free(mm);
    tu_sh("rm -rf %s", dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(load_fail_stops_at_first_bad_line)
{
    char *dir = tu_mkdtemp();
    char *path = tu_write(dir, "m.jsonl", mixed_manifest, -1);
    dh_load_opts o;
    dh_load_opts_default(&o);
    o.on_error = DH_ON_ERROR_FAIL;
    dh_manifest *mm = (dh_manifest *)1;
    dh_load_stats st;
    ck_assert_int_eq(dh_manifest_load(path, &o, &mm, &st), DH_ERANGE);
    ck_assert_ptr_null(mm);
    ck_assert_int_eq(st.lines, 2);
    ck_assert_int_eq(st.skipped, 1);
    tu_sh("rm -rf %s", dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(load_check_files)
{
    char *dir = tu_mkdtemp();
    tu_sh("mkdir -p %s/img %s/adir", dir, dir);
    free(tu_write(dir, "img/c.jpg", "x", 1));
    char *path = tu_write(
        dir, "m.jsonl",
        "{\"id\":\"c\",\"media\":[{\"type\":\"image\",\"path\":\"img/c.jpg\",\"width\":4,\"height\":4}]}\n"
        "{\"id\":\"gone\",\"media\":[{\"type\":\"image\",\"path\":\"img/gone.jpg\",\"width\":4,\"height\":4}]}\n"
        "{\"id\":\"dir\",\"media\":[{\"type\":\"image\",\"path\":\"adir\",\"width\":4,\"height\":4}]}\n",
        -1);
    dh_load_opts o;
    dh_load_opts_default(&o);
    o.check_files = 1;
    diag_log log = {0};
    o.diag = log_diag;
    o.diag_user = &log;
    dh_manifest *mm = NULL;
    dh_load_stats st;
    ck_assert_int_eq(dh_manifest_load(path, &o, &mm, &st), 0);
    ck_assert_int_eq(st.loaded, 1);
    ck_assert_int_eq(log.codes[0], DH_ENOENT);
    ck_assert_msg(strstr(log.msgs[0], "img/gone.jpg") != NULL, "%s", log.msgs[0]);
    ck_assert_int_eq(log.codes[1], DH_ENOTMEDIA);
    dh_manifest_free(mm);
    /* Without the check the same manifest loads fully (paths are not touched). */
    o.check_files = 0;
    ck_assert_int_eq(dh_manifest_load(path, &o, &mm, &st), 0);
    ck_assert_int_eq(st.loaded, 3);
    dh_manifest_free(mm);
    tu_sh("rm -rf %s", dir);
    free(path);
    free(dir);
}
END_TEST

/* Issue 12 #8: getline read a whole line before the length check (inspect /dev/zero grew
 * to the address-space limit, then reported 0 lines and exited 0). */
START_TEST(long_lines_are_skipped_without_being_held_and_devices_refused)
{
    char *dir = tu_mkdtemp(), path[4096];
    snprintf(path, sizeof path, "%s/long.jsonl", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"id\":\"a\",\"text_tokens\":1}\n", f);
    fputc('{', f);
    for (int i = 0; i < 300000; i++) /* one 300 kB line, over a 64 kB limit */
        fputc(' ', f);
    fputs("}\n{\"id\":\"b\",\"text_tokens\":2}\n", f);
    fclose(f);
    dh_load_opts o;
    dh_load_opts_default(&o);
    o.limits.max_line_bytes = 65536;
    diag_log log = {0};
    o.diag = log_diag;
    o.diag_user = &log;
    dh_manifest *mm = NULL;
    dh_load_stats st;
    ck_assert_int_eq(dh_manifest_load(path, &o, &mm, &st), 0);
    ck_assert_int_eq(st.lines, 3);
    ck_assert_int_eq(st.loaded, 2);
    ck_assert_int_eq(st.skipped, 1);
    ck_assert_int_eq(log.codes[0], DH_ELIMIT);
    ck_assert_msg(strstr(log.msgs[0], ":2: line is 300002 bytes, over the limit 65536"), "%s",
                  log.msgs[0]);
    dh_manifest_free(mm);
    /* a device is not a manifest: refused at once instead of read forever */
    log = (diag_log){0};
    ck_assert_int_eq(dh_manifest_load("/dev/zero", &o, &mm, &st), DH_EINVAL);
    ck_assert_msg(strstr(log.msgs[0], "a character device"), "%s", log.msgs[0]);
    tu_sh("rm -rf %s", dir);
    free(dir);
}
END_TEST

START_TEST(load_missing_file)
{
    dh_manifest *mm = NULL;
    diag_log log = {0};
    dh_load_opts o;
    dh_load_opts_default(&o);
    o.diag = log_diag;
    o.diag_user = &log;
    ck_assert_int_eq(dh_manifest_load("/nonexistent/m.jsonl", &o, &mm, NULL), DH_ENOENT);
    ck_assert_int_eq(log.n, 1);
    ck_assert_msg(strstr(log.msgs[0], "/nonexistent/m.jsonl") != NULL, "%s", log.msgs[0]);
    ck_assert_int_eq(dh_manifest_load(NULL, NULL, &mm, NULL), DH_EINVAL);
    /* A directory is named as such, not reported as an I/O error. */
    log.n = 0;
    ck_assert_int_eq(dh_manifest_load("/tmp", &o, &mm, NULL), -EISDIR);
    ck_assert_msg(strstr(log.msgs[0], "/tmp: is a directory") != NULL, "%s", log.msgs[0]);
}
END_TEST

START_TEST(reserved_columns_are_listed_and_populating_them_changes_nothing)
{
    dh_manifest *tm;
    ck_assert_int_eq(dh_manifest_new("", NULL, &tm), 0);
    const char *l = "{\"id\":\"a\",\"media\":[{\"type\":\"image\",\"path\":\"a.jpg\","
                    "\"width\":4,\"height\":4}]}";
    ck_assert_int_eq(dh_manifest_parse_line(tm, l, strlen(l), 1, NULL, 0), 0);
    uint64_t h = dh_manifest_hash(tm);
    ck_assert_int_eq(dh__manifest_reserve(tm, 100000, 100000, 3200000), 0);
    dh__manifest_span sp[32];
    int n = dh__manifest_spans(tm, sp, 32);
    ck_assert_int_eq(n, 20); /* 7 columns a sample, 13 a media item */
    ck_assert_int_eq(dh__manifest_spans(tm, sp, 5), 5);
    n = dh__manifest_spans(tm, sp, 32);
    for (int k = 0; k < n; k++) {
        ck_assert_uint_ge(sp[k].rows, 100001u);
        dh__populate(sp[k].base, sp[k].rows * sp[k].elem);
        dh__populate((const char *)sp[k].base + 1, 3); /* unaligned, short: a hint all the same */
    }
    dh__populate(NULL, 100);
    /* the committed row reads as it was, and more commit after it */
    dh_sample_info si;
    ck_assert_int_eq(dh_manifest_sample(tm, 0, &si), 0);
    ck_assert_str_eq(si.id, "a");
    ck_assert_uint_eq(dh_manifest_hash(tm), h);
    const char *l2 = "{\"id\":\"b\",\"text_tokens\":3}";
    ck_assert_int_eq(dh_manifest_parse_line(tm, l2, strlen(l2), 2, NULL, 0), 0);
    ck_assert_int_eq(dh_manifest_count(tm), 2);
    dh_manifest_free(tm);
}
END_TEST

START_TEST(hash_follows_content)
{
    dh_manifest *a, *b, *c;
    dh_manifest_new("", NULL, &a);
    dh_manifest_new("/elsewhere", NULL, &b);
    dh_manifest_new("", NULL, &c);
    const char *l1 = "{\"id\":\"1\",\"text_tokens\":1}", *l2 = "{\"id\":\"2\",\"text_tokens\":1}";
    dh_manifest_parse_line(a, l1, strlen(l1), 1, NULL, 0);
    dh_manifest_parse_line(a, l2, strlen(l2), 2, NULL, 0);
    dh_manifest_parse_line(b, l1, strlen(l1), 10, NULL, 0);
    dh_manifest_parse_line(b, l2, strlen(l2), 20, NULL, 0);
    dh_manifest_parse_line(c, l2, strlen(l2), 1, NULL, 0);
    dh_manifest_parse_line(c, l1, strlen(l1), 2, NULL, 0);
    ck_assert_uint_eq(dh_manifest_hash(a), dh_manifest_hash(b));
    ck_assert_uint_ne(dh_manifest_hash(a), dh_manifest_hash(c));
    /* Truth and spelling do not count; a descriptor field does. */
    dh_manifest *d, *e, *f;
    dh_manifest_new("", NULL, &d);
    dh_manifest_new("", NULL, &e);
    dh_manifest_new("", NULL, &f);
    const char *v1 = "{\"id\":\"v\",\"media\":[{\"type\":\"video\",\"path\":\"a.mp4\",\"width\":8,"
                     "\"height\":8,\"fps\":25,\"frames\":50,\"keyframes\":[0,25]}],"
                     "\"sim\":{\"cpu_ms\":1}}";
    const char *v2 = "{ \"media\": [ {\"frames\":50, \"keyframes\":[0,25], \"type\":\"video\","
                     "\"path\":\"a.mp4\",\"height\":8,\"width\":8,\"fps\":25.0}], \"id\":\"v\","
                     "\"sim\":{\"cpu_ms\":99,\"gpu_ms\":3} }";
    const char *v3 = "{\"id\":\"v\",\"media\":[{\"type\":\"video\",\"path\":\"a.mp4\",\"width\":8,"
                     "\"height\":8,\"fps\":25,\"frames\":50,\"keyframes\":[0,24]}]}";
    ck_assert_int_eq(dh_manifest_parse_line(d, v1, strlen(v1), 1, NULL, 0), 0);
    ck_assert_int_eq(dh_manifest_parse_line(e, v2, strlen(v2), 1, NULL, 0), 0);
    ck_assert_int_eq(dh_manifest_parse_line(f, v3, strlen(v3), 1, NULL, 0), 0);
    ck_assert_uint_eq(dh_manifest_hash(d), dh_manifest_hash(e));
    ck_assert_uint_ne(dh_manifest_hash(d), dh_manifest_hash(f));
    dh_manifest_free(d);
    dh_manifest_free(e);
    dh_manifest_free(f);
    dh_manifest_free(a);
    dh_manifest_free(b);
    dh_manifest_free(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("manifest");
    TCase *tc = tcase_create("parse");
    tcase_add_checked_fixture(tc, setup, teardown);
    ADD_TEST(tc, parses_design_example);
    ADD_TEST(tc, multimodal_and_text_only);
    ADD_TEST(tc, members_text_and_labels);
    ADD_TEST(tc, video_timing_is_completed);
    ADD_TEST(tc, video_timing_must_be_usable_and_agree);
    ADD_TEST(tc, long_lines_are_skipped_without_being_held_and_devices_refused);
    ADD_TEST(tc, malformed_json);
    ADD_TEST(tc, wrong_types_and_missing_keys);
    ADD_TEST(tc, negative_and_absurd_sizes);
    ADD_TEST(tc, configurable_limits);
    ADD_TEST(tc, paths_must_stay_inside);
    ADD_TEST(tc, duplicate_ids);
    ADD_TEST(tc, memory_per_sample_is_compact);
    ADD_TEST(tc, a_built_sample_is_its_line);
    ADD_TEST(tc, ids_in_order_and_out_of_order);
    ADD_TEST(tc, a_built_sample_is_checked_as_its_line);
    suite_add_tcase(s, tc);
    TCase *tl = tcase_create("load");
    ADD_TEST(tl, load_skip_accounts_every_line);
    ADD_TEST(tl, load_fail_stops_at_first_bad_line);
    ADD_TEST(tl, load_check_files);
    ADD_TEST(tl, load_missing_file);
    ADD_TEST(tl, hash_follows_content);
    ADD_TEST(tl, reserved_columns_are_listed_and_populating_them_changes_nothing);
    suite_add_tcase(s, tl);
    return tu_run(s);
}
