/*
 * test_augment.c - random augmentation (docs/SPEC.md, "Random augmentation"): the spec's
 * random keys and their mistakes, draws that are pure functions of (seed, epoch, sample id,
 * item), the cost model following a draw, and decoded crops, flips, clips and audio windows
 * against the ffmpeg tool's crop + scale + hflip of the same frames.
 */
#include "codec/decode.h"
#include "cost/cost.h"
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
        "cd %s && %s -v error -y -nostdin -f lavfi -i testsrc2=size=320x240:rate=25 -t 4 "
        "-c:v libx264 -g 25 -keyint_min 25 -sc_threshold 0 -bf 2 -pix_fmt yuv420p v.mp4 && "
        "%s -v error -y -nostdin -f lavfi -i testsrc2=size=320x240 -frames:v 1 p.png && "
        "%s -v error -y -nostdin -f lavfi -i testsrc2=size=640x480 -frames:v 1 -q:v 1 "
        "-pix_fmt yuvj444p j.jpg && "
        "%s -v error -y -nostdin -f lavfi -i sine=frequency=440:sample_rate=16000 -t 3 a.wav",
        media, ff, ff, ff, ff);
    ck_assert_int_eq(rc, 0);
}

static void drop_media(void)
{
    tu_rmdir(&media);
}

static dh_spec *spec_json(const char *json)
{
    dh_spec *s = NULL;
    char err[256] = "";
    int rc = dh_spec_parse(json, strlen(json), &s, err, sizeof err);
    ck_assert_msg(rc == 0, "spec %s: %s", json, err);
    return s;
}

/* The parse error of a spec that must be refused, checked to name `says`. */
static void refused(const char *json, const char *says)
{
    dh_spec *s = NULL;
    char err[256] = "";
    ck_assert_int_ne(dh_spec_parse(json, strlen(json), &s, err, sizeof err), 0);
    ck_assert_ptr_null(s);
    ck_assert_msg(strstr(err, says), "spec %s: error \"%s\" does not say \"%s\"", json, err, says);
}

static dh_media_info image(int w, int h)
{
    return (dh_media_info){.type = DH_MEDIA_IMAGE, .codec = DH_CODEC_JPEG, .width = w,
                           .height = h};
}

START_TEST(random_keys_parse_and_mistakes_are_named)
{
    dh_spec *s = spec_json(
        "{\"video\":{\"frames\":8,\"clip_s\":2,\"random_start\":true,\"fps_jitter\":0.25,"
        "\"flip\":0.5,\"resize\":{\"mode\":\"random_resized_crop\",\"size\":112,"
        "\"scale\":[0.2,1],\"ratio\":[0.5,2]}},"
        "\"image\":{\"flip\":0.5,\"resize\":{\"mode\":\"random_crop\",\"size\":224,"
        "\"short_side\":[256,320]}},\"audio\":{\"clip_s\":1,\"random_offset\":true}}");
    ck_assert_int_eq(dh_spec_is_random(s), 1);
    dh_spec *plain = spec_json("{\"video\":{\"frames\":8}}");
    ck_assert_int_eq(dh_spec_is_random(plain), 0);
    ck_assert_int_eq(dh_spec_is_random(NULL), 0);
    /* a clip alone is not random (it is centred), but it changes what the spec means */
    dh_spec *clip = spec_json("{\"video\":{\"frames\":8,\"clip_s\":2}}");
    ck_assert_int_eq(dh_spec_is_random(clip), 0);
    ck_assert_uint_ne(dh_spec_hash(clip), dh_spec_hash(plain));
    dh_spec *flip = spec_json("{\"video\":{\"frames\":8,\"flip\":0.5}}");
    ck_assert_uint_ne(dh_spec_hash(flip), dh_spec_hash(plain));
    dh_spec_free(s);
    dh_spec_free(plain);
    dh_spec_free(clip);
    dh_spec_free(flip);

    refused("{\"video\":{\"flip\":1.5}}", "video.flip");
    refused("{\"video\":{\"random_start\":true}}", "random_start needs clip_s");
    refused("{\"video\":{\"fps_jitter\":0.2}}", "fps_jitter needs clip_s");
    refused("{\"video\":{\"clip_s\":1,\"fps_jitter\":0.95}}", "video.fps_jitter");
    refused("{\"video\":{\"sampling\":\"consecutive\",\"clip_s\":1}}", "consecutive");
    refused("{\"video\":{\"random_start\":1,\"clip_s\":1}}", "expected true or false");
    refused("{\"image\":{\"resize\":{\"mode\":\"crop\",\"size\":8,\"scale\":[0.1,1]}}}",
            "only mode random_resized_crop takes it");
    refused("{\"image\":{\"resize\":{\"mode\":\"random_resized_crop\",\"size\":8,"
            "\"short_side\":[8,9]}}}", "only mode random_crop");
    refused("{\"image\":{\"resize\":{\"mode\":\"random_resized_crop\"}}}", "needs \"size\"");
    refused("{\"image\":{\"resize\":{\"mode\":\"random_resized_crop\",\"size\":8,"
            "\"scale\":[0.9,0.1]}}}", "is not a range");
    refused("{\"image\":{\"resize\":{\"mode\":\"random_resized_crop\",\"size\":8,"
            "\"ratio\":[0,1]}}}", "is not a range");
    refused("{\"image\":{\"resize\":{\"mode\":\"random_crop\",\"size\":8,"
            "\"short_side\":[8.5,9]}}}", "whole pixels");
    refused("{\"image\":{\"resize\":{\"mode\":\"random_resized_crop\",\"size\":8},"
            "\"tiles\":{\"size\":8}}}", "tiles cover the whole image");
    refused("{\"audio\":{\"random_offset\":true}}", "random_offset needs clip_s");
    refused("{\"video\":{\"random_flip\":0.5}}", "video.random_flip: unknown key");
    refused("{\"video\":{\"resize\":{\"mode\":\"random_sized_crop\",\"size\":8}}}",
            "random_resized_crop or random_crop");
}
END_TEST

START_TEST(a_spec_starts_from_a_base_and_augment_adds_the_standard_keys)
{
    /* "base" starts from a built-in spec; the keys given change only themselves */
    dh_spec *k = NULL, *b = spec_json("{\"base\":\"kinetics-clips\"}");
    ck_assert_int_eq(dh_spec_builtin("kinetics-clips", &k), 0);
    ck_assert_uint_eq(dh_spec_hash(b), dh_spec_hash(k));
    dh_spec *f = spec_json("{\"base\":\"kinetics-clips\",\"video\":{\"flip\":0.5}}");
    dh_media_info v = tu_video(640, 360, 30, 900, NULL, 0);
    dh_media_derived a, c;
    ck_assert_int_eq(dh_derive_media(k, &v, &a), 0);
    ck_assert_int_eq(dh_derive_media(f, &v, &c), 0);
    ck_assert_int_eq(c.sampled_frames, 16); /* kinetics' frames, not the default's 8 */
    ck_assert_mem_eq(&a, &c, sizeof a);
    ck_assert_int_eq(dh_spec_is_random(f), 1);
    refused("{\"base\":\"kinetics\"}", "base: \"kinetics\" is not a built-in spec");
    refused("{\"base\":3}", "base: a non-string is not a built-in spec");
    /* the rules between keys hold after the base is merged (a user trial found a random crop
     * accepted, then ignored, with the tiles of anyres-images); "tiles": null removes them */
    refused("{\"base\":\"anyres-images\",\"image\":{\"resize\":{\"mode\":"
            "\"random_resized_crop\",\"size\":336}}}", "tiles cover the whole image");
    dh_spec *untiled = spec_json("{\"base\":\"anyres-images\",\"image\":{\"tiles\":null,"
                                 "\"resize\":{\"mode\":\"random_resized_crop\",\"size\":336}}}");
    dh_media_info im = image(640, 480);
    dh_media_derived ud;
    ck_assert_int_eq(dh_derive_media(untiled, &im, &ud), 0);
    ck_assert_int_eq(ud.ndim, 3);
    dh_spec_free(untiled);
    /* a short side that cannot cover the output is refused, not clamped without a word */
    refused("{\"image\":{\"resize\":{\"mode\":\"random_crop\",\"size\":64,"
            "\"short_side\":[16,32]}}}", "cannot cover it");

    /* --augment changes no key the spec's own JSON gives: "flip": 0 stays off, an explicit
     * crop stays a centre crop (a user trial lost a deliberate flip 0 to it) */
    dh_spec *own = spec_json("{\"base\":\"kinetics-clips\",\"video\":{\"flip\":0,"
                             "\"resize\":{\"mode\":\"crop\",\"size\":224}}}");
    ck_assert_int_eq(dh_spec_augment(own), 0);
    dh_media_draw od;
    for (int e = 0; e < 20; e++) {
        ck_assert_int_eq(dh_media_draw_of(own, &v, 1, e, "x", 0, &od), 0);
        ck_assert_int_eq(od.flip, 0);
        ck_assert_int_eq(od.crop_w, 360); /* the centred 360x360 cover crop */
    }
    ck_assert_int_ge(od.frame_span, 96); /* the clip it did not give is augmented */
    dh_spec_free(own);

    /* --augment: flips, a crop becomes a random resized crop of its size, a uniform clip of
     * 4 s at a random start; shapes and tokens stay; fps sampling keeps its frames */
    ck_assert_int_eq(dh_spec_augment(k), 0);
    ck_assert_int_eq(dh_spec_is_random(k), 1);
    ck_assert_uint_ne(dh_spec_hash(k), dh_spec_hash(b));
    dh_media_draw d;
    ck_assert_int_eq(dh_media_draw_of(k, &v, 1, 0, "x", 0, &d), 0);
    ck_assert_int_ge(d.frame_span, 96); /* 4 s at 30 fps, jitter 0.2 */
    ck_assert_int_le(d.frame_span, 144);
    ck_assert_int_eq(dh_derive_media_drawn(k, &v, &d, &c), 0);
    ck_assert_mem_eq(c.shape, a.shape, sizeof a.shape);
    ck_assert_int_eq(c.tokens, a.tokens);
    dh_spec *llava = NULL;
    ck_assert_int_eq(dh_spec_builtin("llava-video-sft", &llava), 0);
    ck_assert_int_eq(dh_derive_media(llava, &v, &a), 0);
    ck_assert_int_eq(dh_spec_augment(llava), 0);
    ck_assert_int_eq(dh_derive_media(llava, &v, &c), 0);
    ck_assert_int_eq(c.sampled_frames, a.sampled_frames); /* 30 s at 1 fps: 30 frames */
    ck_assert_int_eq(dh_spec_augment(NULL), DH_EINVAL);
    dh_spec_free(llava);
    dh_spec_free(k);
    dh_spec_free(b);
    dh_spec_free(f);
}
END_TEST

START_TEST(without_random_keys_every_draw_is_the_plain_one)
{
    /* A spec without random keys draws nothing: any seed, epoch or id gives the plain draw,
     * and derivation with it is derivation as it always was. */
    dh_spec *s = spec_json("{\"video\":{\"frames\":16}}");
    int32_t kf[] = {0, 250};
    dh_media_info v = tu_video(1280, 720, 30, 300, kf, 2);
    dh_media_draw plain, d;
    ck_assert_int_eq(dh_media_draw_plain(s, &v, &plain), 0);
    ck_assert_int_eq(dh_media_draw_of(s, &v, 99, 7, "x", 0, &d), 0);
    ck_assert_mem_eq(&plain, &d, sizeof d);
    ck_assert_int_eq(plain.first_frame, 0);
    ck_assert_int_eq(plain.frame_span, 300);
    ck_assert_int_eq(plain.flip, 0);
    /* the default crop mode's centred rectangle: 720x720 of 1280x720 */
    ck_assert_int_eq(plain.crop_w, 720);
    ck_assert_int_eq(plain.crop_x, 280);
    dh_media_derived a, b;
    ck_assert_int_eq(dh_derive_media(s, &v, &a), 0);
    ck_assert_int_eq(dh_derive_media_drawn(s, &v, &d, &b), 0);
    ck_assert_mem_eq(&a, &b, sizeof a);
    ck_assert_int_eq(a.decoded_frames, 276); /* test_derive's worked example */
    dh_spec_free(s);
}
END_TEST

START_TEST(a_plain_spec_draws_plainly_whatever_its_random_keys)
{
    /* --no-augment (a validation stream beside augmented training): an augmented spec made
     * plain draws the plain draw for every seed, epoch and id, keeps its shapes, says "off",
     * and hashes apart from both the random spec and the spec it was augmented from. */
    dh_spec *s = spec_json("{\"video\":{\"frames\":16,\"flip\":0.5}}"), *base = NULL;
    ck_assert_int_eq(dh_spec_builtin("default", &base), 0);
    ck_assert_int_eq(dh_spec_augment(s), 0);
    int32_t kf[] = {0, 250};
    dh_media_info v = tu_video(1280, 720, 30, 300, kf, 2);
    dh_media_derived random_shape, plain_shape;
    ck_assert_int_eq(dh_derive_media(s, &v, &random_shape), 0);
    uint64_t random_hash = dh_spec_hash(s);
    ck_assert_int_eq(dh_spec_is_random(s), 1);
    ck_assert_int_eq(dh_spec_plain(s), 0);
    ck_assert_int_eq(dh_spec_plain(NULL), DH_EINVAL);
    ck_assert_int_eq(dh_spec_is_random(s), 0);
    ck_assert_uint_ne(dh_spec_hash(s), random_hash);
    ck_assert_uint_ne(dh_spec_hash(s), dh_spec_hash(base));
    dh_media_draw plain, d;
    ck_assert_int_eq(dh_media_draw_plain(s, &v, &plain), 0);
    ck_assert_int_eq(plain.flip, 0);
    for (int e = 0; e < 8; e++) {
        ck_assert_int_eq(dh_media_draw_of(s, &v, 7, e, "clip", 0, &d), 0);
        ck_assert_mem_eq(&plain, &d, sizeof d);
    }
    ck_assert_int_eq(dh_derive_media(s, &v, &plain_shape), 0);
    ck_assert_mem_eq(plain_shape.shape, random_shape.shape, sizeof plain_shape.shape);
    char text[400];
    dh_spec_random_text(s, text, sizeof text);
    ck_assert_str_eq(text, "off (--no-augment: every item its plain draw)");
    dh_spec_free(base);
    dh_spec_free(s);
}
END_TEST

START_TEST(draws_are_pure_functions_within_their_ranges)
{
    dh_spec *s = spec_json(
        "{\"video\":{\"frames\":8,\"clip_s\":2,\"random_start\":true,\"fps_jitter\":0.25,"
        "\"flip\":0.5,\"resize\":{\"mode\":\"random_resized_crop\",\"size\":112}}}");
    dh_media_info v = tu_video(640, 360, 30, 900, NULL, 0); /* 30 s; the clip is 60 frames */
    dh_media_derived plain;
    ck_assert_int_eq(dh_derive_media(s, &v, &plain), 0);
    int flips = 0, moved = 0, fallbacks = 0;
    int64_t lo_span = 1000, hi_span = 0;
    for (int k = 0; k < 1000; k++) {
        char id[32];
        snprintf(id, sizeof id, "clip-%d", k % 100);
        dh_media_draw d, again, next;
        ck_assert_int_eq(dh_media_draw_of(s, &v, 42, k / 100, id, 0, &d), 0);
        ck_assert_int_eq(dh_media_draw_of(s, &v, 42, k / 100, id, 0, &again), 0);
        ck_assert_mem_eq(&d, &again, sizeof d); /* a pure function */
        ck_assert_int_eq(dh_media_draw_of(s, &v, 42, k / 100 + 1, id, 0, &next), 0);
        moved += d.first_frame != next.first_frame && d.crop_x != next.crop_x;
        /* jitter scales the 60-frame clip by [0.75, 1.25]; it stays inside the video */
        ck_assert_int_ge(d.frame_span, 45);
        ck_assert_int_le(d.frame_span, 75);
        ck_assert_int_ge(d.first_frame, 0);
        ck_assert_int_le(d.first_frame + d.frame_span, 900);
        ck_assert_double_eq_tol(d.start_s, d.first_frame / 30.0, 1e-9);
        lo_span = d.frame_span < lo_span ? d.frame_span : lo_span;
        hi_span = d.frame_span > hi_span ? d.frame_span : hi_span;
        /* torchvision's ranges: area 8%..100%, aspect 3/4..4/3 (rounding aside), inside */
        double area = (double)d.crop_w * d.crop_h / (640.0 * 360.0);
        double aspect = (double)d.crop_w / d.crop_h;
        ck_assert_msg(area >= 0.07 && area <= 1.0, "area %g", area);
        if (d.crop_h == 360 && d.crop_w == 480) {
            fallbacks++; /* the fallback: the whole height at the widest aspect */
        } else {
            ck_assert_msg(aspect > 0.72 && aspect < 1.39, "aspect %g", aspect);
        }
        ck_assert_int_ge(d.crop_x, 0);
        ck_assert_int_le(d.crop_x + d.crop_w, 640);
        ck_assert_int_le(d.crop_y + d.crop_h, 360);
        ck_assert_int_eq(d.crop_x % 2, 0); /* video: even offsets keep 4:2:0 chroma aligned */
        flips += d.flip;
        /* a draw never changes a shape */
        dh_media_derived dd;
        ck_assert_int_eq(dh_derive_media_drawn(s, &v, &d, &dd), 0);
        ck_assert_mem_eq(dd.shape, plain.shape, sizeof dd.shape);
        ck_assert_int_eq(dd.out_bytes, plain.out_bytes);
        ck_assert_int_eq(dd.tokens, plain.tokens);
    }
    ck_assert_int_ge(flips, 450); /* p = 0.5 over 1000 fixed draws */
    ck_assert_int_le(flips, 550);
    ck_assert_int_ge(moved, 950);
    ck_assert_int_le(lo_span, 47);
    ck_assert_int_ge(hi_span, 73);
    ck_assert_int_le(fallbacks, 50);
    /* other seeds and items draw otherwise */
    dh_media_draw a, b, c;
    dh_media_draw_of(s, &v, 42, 0, "clip-1", 0, &a);
    dh_media_draw_of(s, &v, 43, 0, "clip-1", 0, &b);
    dh_media_draw_of(s, &v, 42, 0, "clip-1", 1, &c);
    ck_assert(memcmp(&a, &b, sizeof a) != 0 && memcmp(&a, &c, sizeof a) != 0);
    dh_spec_free(s);
}
END_TEST

START_TEST(a_draw_is_pinned)
{
    /* The values are part of what a job means (a resumed job redraws the same crops, in
     * another process, on another version): changing them must be deliberate. */
    dh_spec *s = spec_json(
        "{\"video\":{\"frames\":8,\"clip_s\":2,\"random_start\":true,\"fps_jitter\":0.25,"
        "\"flip\":0.5,\"resize\":{\"mode\":\"random_resized_crop\",\"size\":112}}}");
    dh_media_info v = tu_video(640, 360, 30, 900, NULL, 0);
    dh_media_draw d;
    ck_assert_int_eq(dh_media_draw_of(s, &v, 7, 3, "clip-42", 1, &d), 0);
    ck_assert_int_eq(d.first_frame, 747);
    ck_assert_int_eq(d.frame_span, 74);
    ck_assert_int_eq(d.crop_x, 66);
    ck_assert_int_eq(d.crop_y, 76);
    ck_assert_int_eq(d.crop_w, 164);
    ck_assert_int_eq(d.crop_h, 180);
    ck_assert_int_eq(d.flip, 1);
    dh_spec_free(s);
}
END_TEST

START_TEST(the_cost_model_follows_the_draw)
{
    /* 300 frames at 30 fps, keyframes every 50; 4 frames from a 1 s (30-frame) clip.
     * Plain: the clip is centred at 135..164, frames 138, 146, 153, 161 (the centres of 4
     * equal segments): seek to keyframe 100 and decode 100..146 (47); 153 lies behind
     * keyframe 150, past the decoder's 146: seek, decode 150..161 (12). 59 frames, 2 seeks.
     * A clip drawn at 255: frames 258, 266, 273, 281, behind keyframe 250: 32 frames.
     * A clip drawn at 0: frames 3, 11, 18, 26 from keyframe 0: 27 frames. */
    dh_spec *s = spec_json("{\"video\":{\"frames\":4,\"clip_s\":1,\"random_start\":true}}");
    int32_t kf[] = {0, 50, 100, 150, 200, 250};
    dh_media_info v = tu_video(320, 240, 30, 300, kf, 6);
    dh_media_draw d;
    ck_assert_int_eq(dh_media_draw_plain(s, &v, &d), 0);
    ck_assert_int_eq(d.first_frame, 135);
    dh_media_derived md;
    ck_assert_int_eq(dh_derive_media_drawn(s, &v, &d, &md), 0);
    ck_assert_int_eq(md.decoded_frames, 59);
    ck_assert_int_eq(md.seeks, 2);
    d.first_frame = 255;
    ck_assert_int_eq(dh_derive_media_drawn(s, &v, &d, &md), 0);
    ck_assert_int_eq(md.decoded_frames, 32);
    ck_assert_int_eq(md.seeks, 1);
    int64_t idx[4];
    ck_assert_int_eq(dh_video_frames_drawn(s, &v, &d, idx, 4), 4);
    ck_assert_int_eq(idx[0], 258);
    ck_assert_int_eq(idx[3], 281);
    int64_t from_draw[4]; /* what a client gets from the draw and the shape alone */
    ck_assert_int_eq(dh_draw_frames(&d, 4, from_draw, 4), 4);
    ck_assert_mem_eq(from_draw, idx, sizeof idx);
    ck_assert_int_eq(dh_draw_frames(&d, 31, from_draw, 4), DH_EINVAL); /* span 30 < 31 */
    d.first_frame = 0;
    ck_assert_int_eq(dh_derive_media_drawn(s, &v, &d, &md), 0);
    ck_assert_int_eq(md.decoded_frames, 27);
    /* a draw that is not one of this video is refused, not decoded past its end */
    d.first_frame = 280;
    ck_assert_int_eq(dh_derive_media_drawn(s, &v, &d, &md), DH_EINVAL);
    d.first_frame = 0;
    d.frame_span = 3; /* fewer frames than the spec samples */
    ck_assert_int_eq(dh_video_frames_drawn(s, &v, &d, idx, 4), DH_EINVAL);

    /* The planner's prediction is the drawn one: it varies with the epoch as the clip
     * moves, and a JPEG's small random crop decodes at a smaller DCT scale. */
    dh__cpu_model cpu;
    dh__cpu_model_default(&cpu);
    dh_manifest *m = NULL;
    const char *line = "{\"id\":\"s\",\"media\":[{\"type\":\"video\",\"path\":\"v.mp4\","
                       "\"codec\":\"h264\",\"width\":320,\"height\":240,\"fps\":30,"
                       "\"frames\":300,\"keyframes\":[0,50,100,150,200,250]}]}";
    ck_assert_int_eq(dh_manifest_new("", NULL, &m), 0);
    ck_assert_int_eq(dh_manifest_parse_line(m, line, strlen(line), 1, NULL, 0), 0);
    double lo = 1e9, hi = 0, c;
    for (int64_t epoch = 0; epoch < 20; epoch++) {
        ck_assert_int_eq(dh__cpu_drawn_cost(&cpu, s, m, 0, 1, epoch, &c), 0);
        lo = fmin(lo, c);
        hi = fmax(hi, c);
    }
    ck_assert_double_lt(lo, hi);
    dh_spec *rrc = spec_json("{\"image\":{\"resize\":{\"mode\":\"random_resized_crop\","
                             "\"size\":64}}}");
    dh_media_info im = image(2048, 1536);
    dh_media_draw small = {.crop_w = 1600, .crop_h = 1200}, tiny = {.crop_w = 200, .crop_h = 150};
    dh_media_derived a, b;
    ck_assert_int_eq(dh_derive_media_drawn(rrc, &im, &small, &a), 0);
    ck_assert_int_eq(dh_derive_media_drawn(rrc, &im, &tiny, &b), 0);
    /* 64 rows from 1200 need 1536 x 64 / 1200 = 82 decoded rows: 1/8 scale (256x192); from
     * 150 they need 656 rows: 4/8 (1024x768) */
    ck_assert_int_eq(a.decode_pixels, 256 * 192);
    ck_assert_int_eq(b.decode_pixels, 1024 * 768);
    dh_spec_free(rrc);
    dh_manifest_free(m);
    dh_spec_free(s);
}
END_TEST

static dh_media_info probe(const char *name, dh_probe_result *pr)
{
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/%s", media, name);
    ck_assert_int_eq(dh_probe_file(path, NULL, pr, err, sizeof err), 0);
    return pr->info;
}

/* Decodes `name` as draw d says into a fresh buffer of the derived size. */
static uint8_t *decode_drawn(const char *name, const dh_spec *s, const dh_media_info *mi,
                             const dh_media_draw *d, dh_media_derived *md, dh__decode_stats *st)
{
    char path[4096], err[256] = "";
    snprintf(path, sizeof path, "%s/%s", media, name);
    ck_assert_int_eq(dh_derive_media_drawn(s, mi, d, md), 0);
    uint8_t *out = malloc((size_t)md->out_bytes);
    int rc = dh__decode_item(DH__SRC(path), s, mi, d, 0, 1, out, (size_t)md->out_bytes, st, err,
                             sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", name, err);
    return out;
}

START_TEST(video_crops_clips_and_flips_match_ffmpeg)
{
    /* Each sampled frame of a drawn clip, crop and flip equals the tool's select + crop +
     * bilinear scale + hflip of the same frame to 40 dB; the decoder seeks as derived. */
    dh_spec *s = spec_json(
        "{\"video\":{\"frames\":4,\"clip_s\":1,\"random_start\":true,\"fps_jitter\":0.2,"
        "\"flip\":1.0,\"resize\":{\"mode\":\"random_resized_crop\",\"size\":64}}}");
    dh_probe_result pr;
    dh_media_info mi = probe("v.mp4", &pr);
    char path[4096];
    snprintf(path, sizeof path, "%s/v.mp4", media);
    int late = 0;
    for (int epoch = 0; epoch < 6 && late < 2; epoch++) {
        dh_media_draw d;
        ck_assert_int_eq(dh_media_draw_of(s, &mi, 5, epoch, "v", 0, &d), 0);
        if (epoch > 0 && d.first_frame < 25)
            continue; /* two of them behind a later keyframe: the seek is the point */
        late += d.first_frame >= 25;
        ck_assert_int_eq(d.flip, 1);
        dh_media_derived md;
        dh__decode_stats st;
        uint8_t *out = decode_drawn("v.mp4", s, &mi, &d, &md, &st);
        ck_assert_int_eq(st.seeks, md.seeks);
        ck_assert_int_ge(st.frames_decoded, md.decoded_frames);
        ck_assert_int_le(st.frames_decoded, md.decoded_frames + 3); /* B-frame reordering */
        int64_t idx[4];
        ck_assert_int_eq(dh_video_frames_drawn(s, &mi, &d, idx, 4), 4);
        size_t fb = 64 * 64 * 3;
        for (int k = 0; k < 4; k++) {
            uint8_t *ref = tu_ffmpeg_rgb(path, idx[k], d.crop_x, d.crop_y, d.crop_w, d.crop_h,
                                         64, 64, 1);
            double q = tu_psnr(out + k * fb, ref, fb);
            ck_assert_msg(q >= 40.0, "epoch %d frame %lld crop %dx%d+%d+%d: PSNR %.1f dB", epoch,
                          (long long)idx[k], d.crop_w, d.crop_h, d.crop_x, d.crop_y, q);
            free(ref);
        }
        free(out);
    }
    ck_assert_int_eq(late, 2);
    dh_probe_result_clear(&pr);
    dh_spec_free(s);
}
END_TEST

START_TEST(image_crops_and_flips_match_ffmpeg)
{
    /* PNG (no DCT scaling): the drawn rectangle scaled and mirrored equals the tool's to
     * 40 dB, random_resized_crop and random_crop alike; a flip-free draw is unmirrored. */
    const char *specs[] = {
        "{\"image\":{\"flip\":0.5,\"resize\":{\"mode\":\"random_resized_crop\",\"size\":96}}}",
        "{\"image\":{\"flip\":0.5,\"resize\":{\"mode\":\"random_crop\",\"size\":96,"
        "\"short_side\":[100,200]}}}"};
    char path[4096];
    snprintf(path, sizeof path, "%s/p.png", media);
    int flipped[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        dh_spec *s = spec_json(specs[k]);
        dh_probe_result pr;
        dh_media_info mi = probe("p.png", &pr);
        for (int epoch = 0; epoch < 4; epoch++) {
            dh_media_draw d;
            ck_assert_int_eq(dh_media_draw_of(s, &mi, 11, epoch, "p", 0, &d), 0);
            flipped[d.flip]++;
            dh_media_derived md;
            uint8_t *out = decode_drawn("p.png", s, &mi, &d, &md, NULL);
            uint8_t *ref = tu_ffmpeg_rgb(path, 0, d.crop_x, d.crop_y, d.crop_w, d.crop_h, 96,
                                         96, d.flip);
            double q = tu_psnr(out, ref, (size_t)md.out_bytes);
            ck_assert_msg(q >= 40.0, "%s epoch %d: PSNR %.1f dB", specs[k], epoch, q);
            free(ref);
            free(out);
        }
        dh_probe_result_clear(&pr);
        dh_spec_free(s);
    }
    ck_assert_int_gt(flipped[0], 0);
    ck_assert_int_gt(flipped[1], 0);
    /* JPEG: a small crop decodes at a smaller DCT scale (as derived) and still resembles the
     * tool's full decode of the region (25 dB, as test_decode states for DCT scaling). */
    dh_spec *s = spec_json("{\"image\":{\"flip\":1,\"resize\":{\"mode\":\"random_resized_crop\","
                           "\"size\":48,\"scale\":[0.3,0.3]}}}");
    dh_probe_result pr;
    dh_media_info mi = probe("j.jpg", &pr);
    dh_media_draw d;
    ck_assert_int_eq(dh_media_draw_of(s, &mi, 1, 0, "j", 0, &d), 0);
    dh_media_derived md;
    uint8_t *out = decode_drawn("j.jpg", s, &mi, &d, &md, NULL);
    ck_assert_int_lt(md.decode_pixels, 640 * 480); /* DCT-scaled */
    snprintf(path, sizeof path, "%s/j.jpg", media);
    uint8_t *ref = tu_ffmpeg_rgb(path, 0, d.crop_x, d.crop_y, d.crop_w, d.crop_h, 48, 48, 1);
    double q = tu_psnr(out, ref, (size_t)md.out_bytes);
    ck_assert_msg(q >= 25.0, "JPEG: PSNR %.1f dB", q);
    free(ref);
    free(out);
    dh_probe_result_clear(&pr);
    dh_spec_free(s);
}
END_TEST

START_TEST(a_flipped_tiled_image_is_the_mirror_image_tiled)
{
    /* Tiles are cut from the mirrored picture: the base tile is the tool's hflip of the
     * whole image, and the grid (1 x 2 at most 2 tiles of 320x240) has the mirrored top half
     * first. */
    dh_spec *s = spec_json("{\"image\":{\"flip\":1,\"tiles\":{\"size\":64,\"max\":2,"
                           "\"base\":true}}}");
    dh_probe_result pr;
    dh_media_info mi = probe("p.png", &pr);
    dh_media_draw d;
    ck_assert_int_eq(dh_media_draw_of(s, &mi, 3, 0, "p", 0, &d), 0);
    ck_assert_int_eq(d.flip, 1);
    ck_assert_int_eq(d.crop_w, 320);
    dh_media_derived md;
    uint8_t *out = decode_drawn("p.png", s, &mi, &d, &md, NULL);
    ck_assert_int_eq(md.shape[0], 3); /* base + 1x2 */
    char path[4096];
    snprintf(path, sizeof path, "%s/p.png", media);
    size_t tile = 64 * 64 * 3;
    uint8_t *base = tu_ffmpeg_rgb(path, 0, 0, 0, 320, 240, 64, 64, 1);
    uint8_t *first = tu_ffmpeg_rgb(path, 0, 0, 0, 320, 120, 64, 64, 1);
    ck_assert_double_ge(tu_psnr(out, base, tile), 40.0);
    ck_assert_double_ge(tu_psnr(out + tile, first, tile), 40.0);
    free(base);
    free(first);
    free(out);
    dh_probe_result_clear(&pr);
    dh_spec_free(s);
}
END_TEST

START_TEST(an_audio_window_is_a_slice_of_the_whole)
{
    /* 3 s at 16 kHz; a 1 s window at a drawn offset is exactly those samples of the whole
     * decode, and the plain window is the centred second. */
    dh_spec *whole = spec_json("{\"audio\":{\"mel_bins\":0}}");
    dh_spec *win = spec_json("{\"audio\":{\"mel_bins\":0,\"clip_s\":1,\"random_offset\":true}}");
    dh_probe_result pr;
    dh_media_info mi = probe("a.wav", &pr);
    dh_media_derived mw, mx;
    float *all = (float *)decode_drawn("a.wav", whole, &mi, NULL, &mw, NULL);
    ck_assert_int_eq(mw.shape[0], 48000);
    dh_media_draw d;
    ck_assert_int_eq(dh_media_draw_plain(win, &mi, &d), 0);
    ck_assert_double_eq_tol(d.start_s, 1.0, 1e-9);
    for (int epoch = 0; epoch < 3; epoch++) {
        ck_assert_int_eq(dh_media_draw_of(win, &mi, 9, epoch, "a", 0, &d), 0);
        ck_assert_double_ge(d.start_s, 0);
        ck_assert_double_le(d.start_s, 2.0);
        float *part = (float *)decode_drawn("a.wav", win, &mi, &d, &mx, NULL);
        ck_assert_int_eq(mx.shape[0], 16000);
        long off = lround(d.start_s * 16000);
        ck_assert_mem_eq(part, all + off, 16000 * sizeof(float));
        free(part);
    }
    /* log-mel of a window: mel_fps frames a second of it */
    dh_spec *mel = spec_json("{\"audio\":{\"clip_s\":1,\"random_offset\":true}}");
    dh_media_derived mm;
    ck_assert_int_eq(dh_derive_media_drawn(mel, &mi, &d, &mm), 0);
    ck_assert_int_eq(mm.shape[1], 100);
    free(decode_drawn("a.wav", mel, &mi, &d, &mm, NULL));
    free(all);
    dh_probe_result_clear(&pr);
    dh_spec_free(mel);
    dh_spec_free(win);
    dh_spec_free(whole);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("augment");
    TCase *tc = tcase_create("augment");
    tcase_add_unchecked_fixture(tc, make_media, drop_media);
    ADD_TEST(tc, random_keys_parse_and_mistakes_are_named);
    ADD_TEST(tc, a_spec_starts_from_a_base_and_augment_adds_the_standard_keys);
    ADD_TEST(tc, without_random_keys_every_draw_is_the_plain_one);
    ADD_TEST(tc, a_plain_spec_draws_plainly_whatever_its_random_keys);
    ADD_TEST(tc, draws_are_pure_functions_within_their_ranges);
    ADD_TEST(tc, a_draw_is_pinned);
    ADD_TEST(tc, the_cost_model_follows_the_draw);
    ADD_TEST(tc, video_crops_clips_and_flips_match_ffmpeg);
    ADD_TEST(tc, image_crops_and_flips_match_ffmpeg);
    ADD_TEST(tc, a_flipped_tiled_image_is_the_mirror_image_tiled);
    ADD_TEST(tc, an_audio_window_is_a_slice_of_the_whole);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
