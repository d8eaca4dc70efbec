/*
 * spec.c - the preprocessing spec: JSON -> struct dh_spec.
 *
 * The format is documented in docs/SPEC.md. Every section and key is
 * optional and falls back to the "default" spec's value, but a key the parser
 * does not know is an error (a typo must not silently change training data).
 * Built-in workload specs (spec_builtin.c) are JSON text parsed by this same
 * code, so there is one definition of what a spec means.
 */
#include "catalog.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *errbuf;
    size_t errlen;
} spec_ctx;

static int spec_fail(spec_ctx *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int spec_fail(spec_ctx *c, int code, const char *fmt, ...)
{
    if (c->errbuf && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->errbuf, c->errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Rejects keys of obj that are not in the NULL-terminated allowed list. */
static int only_keys(spec_ctx *c, const json_t *obj, const char *where, const char *const *allowed)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            ok |= !strcmp(*a, key);
        if (!ok)
            return spec_fail(c, DH_ESCHEMA, "spec: %s.%s: unknown key", where, key);
    }
    return 0;
}

static int spec_int(spec_ctx *c, const json_t *obj, const char *where, const char *key,
                    int64_t min, int64_t max, int64_t *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return spec_fail(c, DH_ESCHEMA, "spec: %s.%s: expected an integer", where, key);
    int64_t x = json_integer_value(v);
    if (x < min || x > max)
        return spec_fail(c, DH_ERANGE, "spec: %s.%s: %lld is outside [%lld, %lld]", where, key,
                         (long long)x, (long long)min, (long long)max);
    *out = x;
    return 0;
}

static int spec_i32(spec_ctx *c, const json_t *obj, const char *where, const char *key,
                    int32_t min, int32_t max, int32_t *out)
{
    int64_t x = *out;
    int rc = spec_int(c, obj, where, key, min, max, &x);
    *out = (int32_t)x;
    return rc;
}

static int spec_num(spec_ctx *c, const json_t *obj, const char *where, const char *key,
                    double min, double max, double *out)
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return spec_fail(c, DH_ESCHEMA, "spec: %s.%s: expected a number", where, key);
    double x = json_number_value(v);
    if (!(x >= min && x <= max))
        return spec_fail(c, DH_ERANGE, "spec: %s.%s: %g is outside [%g, %g]", where, key, x, min,
                         max);
    *out = x;
    return 0;
}

static int section(spec_ctx *c, const json_t *root, const char *name, const char *const *allowed,
                   const json_t **out)
{
    *out = json_object_get(root, name);
    if (!*out)
        return 0;
    if (!json_is_object(*out))
        return spec_fail(c, DH_ESCHEMA, "spec: %s: expected an object", name);
    return only_keys(c, *out, name, allowed);
}

static int parse_buckets(spec_ctx *c, const json_t *arr, const char *where, dh__resize *r)
{
    if (!json_is_array(arr) || json_array_size(arr) == 0 ||
        json_array_size(arr) > DH_MAX_BUCKETS)
        return spec_fail(c, DH_ESCHEMA, "spec: %s.buckets: expected 1..%d [height, width] pairs",
                         where, DH_MAX_BUCKETS);
    r->nbuckets = (int32_t)json_array_size(arr);
    for (int i = 0; i < r->nbuckets; i++) {
        const json_t *b = json_array_get(arr, (size_t)i);
        const json_t *h = json_array_get(b, 0), *w = json_array_get(b, 1);
        if (!json_is_array(b) || json_array_size(b) != 2 || !json_is_integer(h) ||
            !json_is_integer(w) || json_integer_value(h) < 1 || json_integer_value(w) < 1 ||
            json_integer_value(h) > 65536 || json_integer_value(w) > 65536)
            return spec_fail(c, DH_ESCHEMA, "spec: %s.buckets[%d]: expected [height, width]",
                             where, i);
        r->buckets[i][0] = (int32_t)json_integer_value(h);
        r->buckets[i][1] = (int32_t)json_integer_value(w);
    }
    return 0;
}

/* A [lo, hi] pair of numbers within [min, max] with lo <= hi (lo > min when open). */
static int spec_pair(spec_ctx *c, const json_t *obj, const char *where, const char *key,
                     double min, double max, int open, double out[2])
{
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    const json_t *a = json_array_get(v, 0), *b = json_array_get(v, 1);
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_number(a) || !json_is_number(b))
        return spec_fail(c, DH_ESCHEMA, "spec: %s.%s: expected [low, high]", where, key);
    double lo = json_number_value(a), hi = json_number_value(b);
    if (!(lo >= min && hi <= max && lo <= hi) || (open && lo <= min))
        return spec_fail(c, DH_ERANGE, "spec: %s.%s: [%g, %g] is not a range within %s%g, %g]",
                         where, key, lo, hi, open ? "(" : "[", min, max);
    out[0] = lo;
    out[1] = hi;
    return 0;
}

/* The random crops' own keys: only their mode may have them. */
static int parse_random_crop(spec_ctx *c, const json_t *o, const char *w, const char *mode,
                             dh__resize *r, dh__augment *aug)
{
    int rrc = r->mode == DH_RESIZE_RANDOM_RESIZED_CROP, rc_ = r->mode == DH_RESIZE_RANDOM_CROP;
    static const char *const own[] = {"scale", "ratio", "short_side"};
    for (int i = 0; i < 3; i++)
        if (json_object_get(o, own[i]) && !(i < 2 ? rrc : rc_))
            return spec_fail(c, DH_ESCHEMA, "spec: %s.%s: only mode %s takes it (mode is %s)", w,
                             own[i], i < 2 ? "random_resized_crop" : "random_crop", mode);
    aug->scale[0] = 0.08; /* torchvision's RandomResizedCrop defaults */
    aug->scale[1] = 1.0;
    aug->ratio[0] = 3.0 / 4.0;
    aug->ratio[1] = 4.0 / 3.0;
    double side[2] = {0, 0};
    int rc;
    if ((rc = spec_pair(c, o, w, "scale", 0, 1, 1, aug->scale)) ||
        (rc = spec_pair(c, o, w, "ratio", 0, 1e3, 1, aug->ratio)) ||
        (rc = spec_pair(c, o, w, "short_side", 1, 65536, 0, side)))
        return rc;
    if (side[0] != floor(side[0]) || side[1] != floor(side[1]))
        return spec_fail(c, DH_ESCHEMA, "spec: %s.short_side: expected whole pixels", w);
    aug->short_side[0] = (int32_t)side[0];
    aug->short_side[1] = (int32_t)side[1];
    if (!rrc) /* the ranges mean nothing to other modes: zero keeps their hash as it was */
        aug->scale[0] = aug->scale[1] = aug->ratio[0] = aug->ratio[1] = 0;
    return 0;
}

static int parse_resize(spec_ctx *c, const json_t *sec, const char *where, dh__resize *r,
                        dh__augment *aug)
{
    static const char *const keys[] = {"mode", "width", "height", "size", "max", "multiple",
                                       "buckets", "scale", "ratio", "short_side", NULL};
    const json_t *o = json_object_get(sec, "resize");
    if (!o)
        return 0;
    char w[48];
    snprintf(w, sizeof w, "%s.resize", where);
    if (!json_is_object(o))
        return spec_fail(c, DH_ESCHEMA, "spec: %s: expected an object", w);
    int rc = only_keys(c, o, w, keys);
    if (rc)
        return rc;
    const char *mode = json_string_value(json_object_get(o, "mode"));
    static const char *const modes[] = {"native", "fixed", "crop", "long_side", "bucket",
                                        "random_resized_crop", "random_crop"};
    int found = -1;
    for (int i = 0; mode && i < 7; i++)
        if (!strcmp(mode, modes[i]))
            found = i;
    if (found < 0)
        return spec_fail(c, DH_ESCHEMA, "spec: %s.mode: expected native, fixed, crop, long_side, "
                         "bucket, random_resized_crop or random_crop", w);
    memset(r, 0, sizeof *r);
    r->mode = (dh__resize_mode)found;
    int32_t size = 0;
    r->multiple = 1;
    if ((rc = spec_i32(c, o, w, "size", 1, 65536, &size)))
        return rc;
    r->width = r->height = size;
    if ((rc = spec_i32(c, o, w, "width", 1, 65536, &r->width)) ||
        (rc = spec_i32(c, o, w, "height", 1, 65536, &r->height)) ||
        (rc = spec_i32(c, o, w, "max", 1, 65536, &r->max_side)) ||
        (rc = spec_i32(c, o, w, "multiple", 1, 4096, &r->multiple)))
        return rc;
    int sized = r->mode == DH_RESIZE_FIXED || r->mode == DH_RESIZE_CROP ||
                r->mode == DH_RESIZE_RANDOM_RESIZED_CROP || r->mode == DH_RESIZE_RANDOM_CROP;
    if (sized && (!r->width || !r->height))
        return spec_fail(c, DH_ESCHEMA, "spec: %s: %s needs \"size\" or \"width\" and \"height\"",
                         w, mode);
    if ((rc = parse_random_crop(c, o, w, mode, r, aug)))
        return rc;
    if (r->mode == DH_RESIZE_LONG_SIDE && !r->max_side)
        return spec_fail(c, DH_ESCHEMA, "spec: %s: long_side needs \"max\"", w);
    if (r->mode == DH_RESIZE_BUCKET)
        return parse_buckets(c, json_object_get(o, "buckets"), w, r);
    return 0;
}

static int spec_bool(spec_ctx *c, const json_t *obj, const char *where, const char *key,
                     int32_t *out)
{
    const json_t *v = json_object_get(obj, key);
    if (v && !json_is_boolean(v))
        return spec_fail(c, DH_ESCHEMA, "spec: %s.%s: expected true or false", where, key);
    if (v)
        *out = json_is_true(v);
    return 0;
}

/* The video section's temporal random keys and its flip. */
/* Marks the keys of section v among names[k] as given (bits[k]). */
static void mark_given(dh_spec *s, const json_t *v, const char *const *names, const uint32_t *bits,
                       int n)
{
    for (int k = 0; k < n; k++)
        if (json_object_get(v, names[k]))
            s->given |= bits[k];
}

static int parse_video_random(spec_ctx *c, const json_t *v, dh_spec *s)
{
    static const char *const names[] = {"resize", "flip", "clip_s", "random_start", "fps_jitter"};
    static const uint32_t bits[] = {DH__GIVEN_VRESIZE, DH__GIVEN_VFLIP, DH__GIVEN_CLIP,
                                    DH__GIVEN_START, DH__GIVEN_JITTER};
    mark_given(s, v, names, bits, 5);
    int rc;
    if ((rc = spec_num(c, v, "video", "clip_s", 0, 1e9, &s->video.clip_s)) ||
        (rc = spec_bool(c, v, "video", "random_start", &s->video.random_start)) ||
        (rc = spec_num(c, v, "video", "fps_jitter", 0, 0.9, &s->video.fps_jitter)) ||
        (rc = spec_num(c, v, "video", "flip", 0, 1, &s->video.aug.flip)))
        return rc;
    return 0;
}

/*
 * The rules between keys, checked once the whole spec is known (a base's keys included):
 * each names the keys that clash.
 */
static int spec_check(spec_ctx *c, const dh_spec *s)
{
    int consecutive = s->video.sampling == DH_SAMPLE_CONSECUTIVE;
    if (consecutive && (s->video.clip_s > 0 || s->video.fps_jitter > 0))
        return spec_fail(c, DH_ESCHEMA, "spec: video: consecutive sampling takes no clip_s or "
                         "fps_jitter (its clip is its frames; random_start moves it)");
    if (!consecutive && s->video.clip_s <= 0 && (s->video.random_start || s->video.fps_jitter > 0))
        return spec_fail(c, DH_ESCHEMA, "spec: video: %s needs clip_s (the length of the clip "
                         "taken from the range)", s->video.random_start ? "random_start"
                                                                         : "fps_jitter");
    if (s->image.tile_size > 0 && s->image.resize.mode >= DH_RESIZE_RANDOM_RESIZED_CROP)
        return spec_fail(c, DH_ESCHEMA, "spec: image: tiles cover the whole image; a random "
                         "crop cannot go with them (flip can; \"tiles\": null removes a "
                         "base's tiles)");
    if (s->audio.random_offset && s->audio.clip_s <= 0)
        return spec_fail(c, DH_ESCHEMA, "spec: audio: random_offset needs clip_s (the length "
                         "of the window it moves)");
    const dh__resize *rz[2] = {&s->video.resize, &s->image.resize};
    const dh__augment *au[2] = {&s->video.aug, &s->image.aug};
    for (int k = 0; k < 2; k++) {
        int32_t side = DH_MAX(rz[k]->width, rz[k]->height);
        if (rz[k]->mode == DH_RESIZE_RANDOM_CROP && au[k]->short_side[0] &&
            au[k]->short_side[0] < side)
            return spec_fail(c, DH_ERANGE, "spec: %s.resize.short_side: [%d, %d] starts below "
                             "the %dx%d output it is cropped to: a short side under %d px "
                             "cannot cover it", k ? "image" : "video", au[k]->short_side[0],
                             au[k]->short_side[1], rz[k]->width, rz[k]->height, side);
    }
    return 0;
}

static int parse_video(spec_ctx *c, const json_t *root, dh_spec *s)
{
    static const char *const keys[] = {"sampling", "frames", "fps", "max_frames", "start_s",
                                       "end_s", "resize", "patch", "temporal_patch", "pool",
                                       "vae", "clip_s", "random_start", "fps_jitter", "flip",
                                       NULL};
    const json_t *v;
    int rc = section(c, root, "video", keys, &v);
    if (rc || !v)
        return rc;
    const json_t *smp = json_object_get(v, "sampling");
    if (smp) {
        const char *name = json_string_value(smp);
        if (name && !strcmp(name, "uniform"))
            s->video.sampling = DH_SAMPLE_UNIFORM;
        else if (name && !strcmp(name, "fps"))
            s->video.sampling = DH_SAMPLE_FPS;
        else if (name && !strcmp(name, "consecutive"))
            s->video.sampling = DH_SAMPLE_CONSECUTIVE;
        else
            return spec_fail(c, DH_ESCHEMA,
                             "spec: video.sampling: expected uniform, fps or consecutive");
    }
    if ((rc = spec_int(c, v, "video", "frames", 1, 100000, &s->video.frames)) ||
        (rc = spec_num(c, v, "video", "fps", 1e-6, 1000, &s->video.fps)) ||
        (rc = spec_int(c, v, "video", "max_frames", 1, 100000, &s->video.max_frames)) ||
        (rc = spec_num(c, v, "video", "start_s", 0, 1e9, &s->video.start_s)) ||
        (rc = spec_num(c, v, "video", "end_s", 0, 1e9, &s->video.end_s)) ||
        (rc = spec_i32(c, v, "video", "patch", 1, 4096, &s->video.patch)) ||
        (rc = spec_i32(c, v, "video", "temporal_patch", 1, 1024, &s->video.temporal_patch)) ||
        (rc = spec_i32(c, v, "video", "pool", 1, 64, &s->video.pool)) ||
        (rc = parse_resize(c, v, "video", &s->video.resize, &s->video.aug)) ||
        (rc = parse_video_random(c, v, s)))
        return rc;
    if (s->video.end_s > 0 && s->video.end_s <= s->video.start_s)
        return spec_fail(c, DH_ERANGE, "spec: video.end_s must be after video.start_s");
    const json_t *vae = json_object_get(v, "vae");
    if (vae) {
        static const char *const vkeys[] = {"temporal", "spatial", NULL};
        if (!json_is_object(vae))
            return spec_fail(c, DH_ESCHEMA, "spec: video.vae: expected an object");
        s->video.vae_temporal = 4;
        s->video.vae_spatial = 8;
        if ((rc = only_keys(c, vae, "video.vae", vkeys)) ||
            (rc = spec_i32(c, vae, "video.vae", "temporal", 1, 64, &s->video.vae_temporal)) ||
            (rc = spec_i32(c, vae, "video.vae", "spatial", 1, 256, &s->video.vae_spatial)))
            return rc;
    }
    return 0;
}

static int parse_image(spec_ctx *c, const json_t *root, dh_spec *s)
{
    static const char *const keys[] = {"resize", "patch", "pool", "tiles", "flip", NULL};
    const json_t *v;
    int rc = section(c, root, "image", keys, &v);
    if (rc || !v)
        return rc;
    static const char *const names[] = {"resize", "flip"};
    static const uint32_t bits[] = {DH__GIVEN_IRESIZE, DH__GIVEN_IFLIP};
    mark_given(s, v, names, bits, 2);
    if ((rc = spec_i32(c, v, "image", "patch", 1, 4096, &s->image.patch)) ||
        (rc = spec_i32(c, v, "image", "pool", 1, 64, &s->image.pool)) ||
        (rc = parse_resize(c, v, "image", &s->image.resize, &s->image.aug)) ||
        (rc = spec_num(c, v, "image", "flip", 0, 1, &s->image.aug.flip)))
        return rc;
    const json_t *t = json_object_get(v, "tiles");
    if (json_is_null(t)) /* no tiles (a base's removed) */
        s->image.tile_size = s->image.max_tiles = s->image.base_tile = 0;
    else if (t) {
        static const char *const tkeys[] = {"size", "max", "base", NULL};
        if (!json_is_object(t))
            return spec_fail(c, DH_ESCHEMA, "spec: image.tiles: expected an object (or null: "
                             "no tiles)");
        s->image.tile_size = 336;
        s->image.max_tiles = 4;
        s->image.base_tile = 1;
        if ((rc = only_keys(c, t, "image.tiles", tkeys)) ||
            (rc = spec_i32(c, t, "image.tiles", "size", 1, 8192, &s->image.tile_size)) ||
            (rc = spec_i32(c, t, "image.tiles", "max", 1, 256, &s->image.max_tiles)))
            return rc;
        const json_t *base = json_object_get(t, "base");
        if (base && !json_is_boolean(base))
            return spec_fail(c, DH_ESCHEMA, "spec: image.tiles.base: expected true or false");
        if (base)
            s->image.base_tile = json_is_true(base);
    }
    return 0;
}

static int parse_audio_text(spec_ctx *c, const json_t *root, dh_spec *s)
{
    static const char *const akeys[] = {"sample_rate", "mel_bins", "mel_fps", "tokens_per_s",
                                        "clip_s", "random_offset", NULL};
    static const char *const tkeys[] = {"max_tokens", "bytes_per_token", "tokens_per_word", NULL};
    const json_t *a, *t = NULL;
    int rc = section(c, root, "audio", akeys, &a);
    if (!rc && a &&
        ((rc = spec_i32(c, a, "audio", "sample_rate", 1000, 384000, &s->audio.sample_rate)) ||
         (rc = spec_i32(c, a, "audio", "mel_bins", 0, 1024, &s->audio.mel_bins)) ||
         (rc = spec_i32(c, a, "audio", "mel_fps", 1, 10000, &s->audio.mel_fps)) ||
         (rc = spec_num(c, a, "audio", "tokens_per_s", 0, 100000, &s->audio.tokens_per_s)) ||
         (rc = spec_num(c, a, "audio", "clip_s", 0, 1e9, &s->audio.clip_s)) ||
         (rc = spec_bool(c, a, "audio", "random_offset", &s->audio.random_offset))))
        return rc;
    if (!rc)
        rc = section(c, root, "text", tkeys, &t);
    if (!rc && t &&
        ((rc = spec_int(c, t, "text", "max_tokens", 0, INT64_MAX, &s->text.max_tokens)) ||
         (rc = spec_num(c, t, "text", "bytes_per_token", 0.01, 1e6, &s->text.bytes_per_token)) ||
         (rc = spec_num(c, t, "text", "tokens_per_word", 0.01, 1e6, &s->text.tokens_per_word))))
        return rc;
    if (t && json_object_get(t, "bytes_per_token") && json_object_get(t, "tokens_per_word"))
        return spec_fail(c, DH_ESCHEMA, "spec: text: give bytes_per_token or tokens_per_word, "
                                        "not both");
    return rc;
}

/* The "default" spec: 8 uniform frames and images at 224 px, patch 14; 16 kHz log-mel audio. */
static void spec_defaults(dh_spec *s)
{
    memset(s, 0, sizeof *s);
    s->video.sampling = DH_SAMPLE_UNIFORM;
    s->video.frames = 8;
    s->video.fps = 1.0;
    s->video.max_frames = 64;
    s->video.resize = (dh__resize){.mode = DH_RESIZE_CROP, .width = 224, .height = 224, .multiple = 1};
    s->video.patch = 14;
    s->video.temporal_patch = 1;
    s->video.pool = 1;
    s->image.resize = s->video.resize;
    s->image.patch = 14;
    s->image.pool = 1;
    s->audio.sample_rate = 16000;
    s->audio.mel_bins = 80;
    s->audio.mel_fps = 100;
    s->audio.tokens_per_s = 25.0;
    s->text.bytes_per_token = 4.0;
}

/* "base": a built-in spec the others keys change (its own JSON has no base). */
static int spec_base(spec_ctx *c, const json_t *root, dh_spec *s)
{
    const json_t *b = json_object_get(root, "base");
    if (!b)
        return 0;
    dh_spec *from = NULL;
    if (!json_is_string(b) || dh_spec_builtin(json_string_value(b), &from))
        return spec_fail(c, DH_ESCHEMA, "spec: base: %s%s%s is not a built-in spec (default "
                         "or a workload: `datahelix sim --list`)", json_is_string(b) ? "\"" : "",
                         json_is_string(b) ? json_string_value(b) : "a non-string",
                         json_is_string(b) ? "\"" : "");
    *s = *from;
    s->given = 0; /* what the base gave is not this spec's word: --augment may change it */
    dh_spec_free(from);
    return 0;
}

int dh_spec_parse(const char *json, size_t len, dh_spec **out, char *errbuf, size_t errlen)
{
    spec_ctx c = {errbuf, errlen};
    if (!out || (!json && len))
        return DH_EINVAL;
    *out = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return spec_fail(&c, DH_EPARSE, "spec: malformed JSON at line %d column %d: %s", jerr.line,
                         jerr.column, jerr.text);
    static const char *const top[] = {"video", "image", "audio", "text", "name", "base", NULL};
    dh_spec *s = calloc(1, sizeof *s);
    int rc = s ? 0 : DH_ENOMEM;
    if (!rc && !json_is_object(root))
        rc = spec_fail(&c, DH_ESCHEMA, "spec: expected a JSON object");
    if (!rc) {
        spec_defaults(s);
        if (!(rc = only_keys(&c, root, "spec", top)) && !(rc = spec_base(&c, root, s)) &&
            !(rc = parse_video(&c, root, s)) &&
            !(rc = parse_image(&c, root, s)) && !(rc = parse_audio_text(&c, root, s)))
            rc = spec_check(&c, s);
    }
    json_decref(root);
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int dh_spec_load(const char *path, dh_spec **out, char *errbuf, size_t errlen)
{
    spec_ctx c = {errbuf, errlen};
    if (!path || !out)
        return DH_EINVAL;
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return spec_fail(&c, -errno, "spec %s: %s", path, strerror(errno));
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    int toobig = buf && n == (1 << 20);
    int ioerr = ferror(f);
    fclose(f);
    int rc;
    if (!buf)
        rc = DH_ENOMEM;
    else if (toobig)
        rc = spec_fail(&c, DH_ELIMIT, "spec %s: larger than 1 MiB", path);
    else if (ioerr)
        rc = spec_fail(&c, DH_EIO, "spec %s: read error", path);
    else
        rc = dh_spec_parse(buf, n, out, errbuf, errlen);
    free(buf);
    if (rc && errbuf && errlen && !strncmp(errbuf, "spec: ", 6)) { /* which file said it */
        char why[512];
        snprintf(why, sizeof why, "%s", errbuf + 6);
        snprintf(errbuf, errlen, "spec %s: %s", path, why);
    }
    return rc;
}

dh_spec *dh__spec_dup(const dh_spec *s)
{
    dh_spec *d = s ? dh__malloc(sizeof *d) : NULL;
    if (d)
        *d = *s;
    return d;
}

void dh_spec_free(dh_spec *s)
{
    free(s);
}

/* Mixes one value into a running hash (fields are hashed one by one, never padding). */
static uint64_t mix_in(uint64_t h, uint64_t v)
{
    return dh__mix64(h ^ dh__mix64(v + 0x9e3779b97f4a7c15ULL));
}

static uint64_t mix_num(uint64_t h, double x)
{
    uint64_t v;
    memcpy(&v, &x, sizeof v);
    return mix_in(h, v);
}

uint64_t dh_spec_hash(const dh_spec *s)
{
    if (!s)
        return 0;
    uint64_t h = 0x73706563; /* "spec" */
    h = mix_in(h, (uint64_t)s->video.sampling);
    h = mix_in(h, (uint64_t)s->video.frames);
    h = mix_num(h, s->video.fps);
    h = mix_in(h, (uint64_t)s->video.max_frames);
    h = mix_num(h, s->video.start_s);
    h = mix_num(h, s->video.end_s);
    h = mix_in(h, dh__hash_bytes(&s->video.resize, sizeof s->video.resize, 1));
    h = mix_in(h, (uint64_t)s->video.patch);
    h = mix_in(h, (uint64_t)s->video.temporal_patch);
    h = mix_in(h, (uint64_t)s->video.pool);
    h = mix_in(h, (uint64_t)s->video.vae_temporal);
    h = mix_in(h, (uint64_t)s->video.vae_spatial);
    h = mix_in(h, dh__hash_bytes(&s->image.resize, sizeof s->image.resize, 2));
    h = mix_in(h, (uint64_t)s->image.patch);
    h = mix_in(h, (uint64_t)s->image.pool);
    h = mix_in(h, (uint64_t)s->image.tile_size);
    h = mix_in(h, (uint64_t)s->image.max_tiles);
    h = mix_in(h, (uint64_t)s->image.base_tile);
    h = mix_in(h, (uint64_t)s->audio.sample_rate);
    h = mix_in(h, (uint64_t)s->audio.mel_bins);
    h = mix_in(h, (uint64_t)s->audio.mel_fps);
    h = mix_num(h, s->audio.tokens_per_s);
    h = mix_in(h, (uint64_t)s->text.max_tokens);
    if (s->plain) /* its draws differ from the same spec's random ones */
        h = mix_in(h, 0x706c61696eULL);
    if (s->text.bytes_per_token != 4.0 || s->text.tokens_per_word > 0) /* the defaults keep */
        h = mix_num(mix_num(h, s->text.bytes_per_token), s->text.tokens_per_word); /* old hashes */
    if (s->video.clip_s > 0 || s->audio.clip_s > 0 || dh_spec_is_random(s)) { /* so do specs */
        h = mix_num(mix_num(h, s->video.clip_s), s->video.fps_jitter); /* without these keys */
        h = mix_in(mix_in(h, (uint64_t)s->video.random_start), (uint64_t)s->audio.random_offset);
        h = mix_num(h, s->audio.clip_s);
        h = mix_in(h, dh__hash_bytes(&s->video.aug, sizeof s->video.aug, 3));
        h = mix_in(h, dh__hash_bytes(&s->image.aug, sizeof s->image.aug, 4));
    }
    return h;
}
