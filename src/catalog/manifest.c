/*
 * manifest.c - one JSON Lines manifest line -> a validated staged record.
 *
 * Each line is parsed (the fast scanner, jansson as the authority),
 * validated completely into a staging record, and only then committed to
 * the struct-of-arrays table (manifest_table.c). Every rejection names the line, the sample id when it is known,
 * the offending key and the reason. Unknown keys are ignored (docs/DESIGN.md, Data
 * model); wrong types, missing required keys, negative or over-limit sizes,
 * paths that escape the manifest directory and duplicate ids are errors.
 *
 * A sample built in memory (the built-in workloads' generators) skips the
 * JSON but not the checks: dh__manifest_add_built runs the same range,
 * timing, keyframe, path and id checks on its fields and commits it the same
 * way, so its row and the manifest's hash are those of the same line parsed.
 */
#include "manifest_int.h"
#include "jsonlite.h"
#include "../store/store.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ID_MAX_BYTES 1024
#define PATH_MAX_BYTES 4096
#define DH__MIN_FPS 0.001 /* frames per second: below this a rate is a typo or an attack */
#define DH__MAX_SIM_MS 3.6e6 /* an hour of CPU or GPU time per sample: beyond is no measurement */

typedef dh__line_error line_error;

static int fail(line_error *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(line_error *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->reason, sizeof e->reason, fmt, ap);
    va_end(ap);
    e->code = code;
    return code;
}

/* An integer key's value against its bounds (limit_code: the error over max). */
static int int_range(const char *key, const char *where, int64_t v, int64_t min, int64_t max,
                     int limit_code, line_error *e)
{
    if (v < min)
        return fail(e, DH_ERANGE, "%s%s: %lld is below the minimum %lld", where, key,
                    (long long)v, (long long)min);
    if (v > max)
        return fail(e, limit_code, "%s%s: %lld is over the limit %lld", where, key,
                    (long long)v, (long long)max);
    return 0;
}

/* A real key's value: finite, >= 0, at most max. */
static int num_range(const char *key, const char *where, double d, double max, line_error *e)
{
    if (!isfinite(d) || d < 0)
        return fail(e, DH_ERANGE, "%s%s: %g must be a finite number >= 0", where, key, d);
    if (d > max)
        return fail(e, DH_ELIMIT, "%s%s: %g is over the limit %g", where, key, d, max);
    return 0;
}

/*
 * Reads an optional integer key into *out (left unchanged when absent).
 * where names the enclosing object in messages ("media[0]").
 */
static int get_int(const jv_doc *doc, const jv *obj, const char *key, const char *where,
                   int64_t min, int64_t max, int limit_code, int64_t *out, line_error *e)
{
    const jv *v = jv_get(doc, obj, key);
    if (!v)
        return 0;
    if (v->type == JV_REAL) {
        double d = v->d;
        /* 10.0 where an integer is expected is harmless; 10.5 is not. */
        if (d != floor(d) || d < -9e18 || d > 9e18)
            return fail(e, DH_ESCHEMA, "%s%s: expected an integer, got %g", where, key, d);
        *out = (int64_t)d;
    } else if (v->type == JV_INT) {
        *out = v->i;
    } else {
        return fail(e, DH_ESCHEMA, "%s%s: expected an integer, got %s", where, key, jv_kind(v));
    }
    return int_range(key, where, *out, min, max, limit_code, e);
}

static int get_num(const jv_doc *doc, const jv *obj, const char *key, const char *where,
                   double max, double *out, line_error *e)
{
    const jv *v = jv_get(doc, obj, key);
    if (!v)
        return 0;
    if (!jv_is_number(v))
        return fail(e, DH_ESCHEMA, "%s%s: expected a number, got %s", where, key, jv_kind(v));
    double d = jv_number(v);
    int rc = num_range(key, where, d, max, e);
    if (!rc)
        *out = d;
    return rc;
}

static int get_str(const jv_doc *doc, const jv *obj, const char *key, const char *where,
                   int required, const char **out, line_error *e)
{
    const jv *v = jv_get(doc, obj, key);
    if (!v) {
        if (required)
            return fail(e, DH_ESCHEMA, "%smissing required key \"%s\"", where, key);
        return 0;
    }
    if (v->type != JV_STRING)
        return fail(e, DH_ESCHEMA, "%s%s: expected a string, got %s", where, key, jv_kind(v));
    *out = jv_str(doc, v);
    return 0;
}

/*
 * Lexical check that a relative path stays inside its base directory:
 * no absolute paths, no ".." that climbs above the start.
 */
static int path_is_contained(const char *p)
{
    if (p[0] == '/' || p[0] == '\0')
        return 0;
    int depth = 0;
    while (*p) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (--depth < 0)
                return 0;
        } else if (n > 0 && !(n == 1 && p[0] == '.')) {
            depth++;
        }
        p += n;
        if (*p == '/')
            p++;
    }
    return depth > 0;
}

/* An object's path: a host (or bucket) and something after it, no control bytes (what a
 * store is asked for is checked by the store). */
static int remote_path_ok(const char *p)
{
    const char *host = strstr(p, "://") + 3;
    size_t hlen = strcspn(host, "/");
    if (!hlen || !host[hlen] || !host[hlen + 1])
        return 0;
    for (const unsigned char *q = (const unsigned char *)p; *q; q++)
        if (*q < ' ' || *q == 0x7f || (*q == ' ' && strncmp(p, "s3://", 5)))
            return 0; /* an s3 key is escaped when asked for; a URL is given escaped */
    return 1;
}

static int check_path(const dh_manifest *m, const char *path, const char *where, line_error *e)
{
    size_t len = strlen(path);
    if (len == 0 || len > PATH_MAX_BYTES)
        return fail(e, DH_ESCHEMA, "%spath: must be 1..%d bytes", where, PATH_MAX_BYTES);
    if (dh__is_remote(path)) /* an object: its store says whether it is there, when read */
        return remote_path_ok(path) ? 0
             : fail(e, DH_ESCHEMA, "%spath \"%s\": expected http://HOST/..., https://HOST/... "
                    "or s3://BUCKET/KEY", where, path);
    if (!path_is_contained(path))
        return fail(e, DH_EPATH, "%spath \"%s\" escapes the manifest directory", where, path);
    if (!m->check_files)
        return 0;
    char full[PATH_MAX_BYTES * 2];
    snprintf(full, sizeof full, "%s%s%s", m->dir, m->dir[0] ? "/" : "", path);
    struct stat st;
    if (stat(full, &st) != 0)
        return fail(e, DH_ENOENT, "%spath \"%s\": file not found", where, full);
    if (!S_ISREG(st.st_mode))
        return fail(e, DH_ENOTMEDIA, "%spath \"%s\": not a regular file", where, full);
    if (access(full, R_OK) != 0)
        return fail(e, DH_EACCES, "%spath \"%s\": not readable", where, full);
    return 0;
}

/*
 * Keyframes are staged past m->nkf; they only become part of the table on commit.
 * Room for n of sm's keyframes; then keyframe_at stages each, i = 0 .. n - 1.
 */
static int keyframes_room(dh_manifest *m, size_t n, const char *where, dh__staged_media *sm,
                          size_t *staged, line_error *e)
{
    if (n > (size_t)m->limits.max_keyframes)
        return fail(e, DH_ELIMIT, "%skeyframes: %zu entries, over the limit %d", where, n,
                    m->limits.max_keyframes);
    if (dh__grow((void **)&m->kf, &m->kfcap, m->nkf + *staged + n, sizeof *m->kf))
        return fail(e, DH_ENOMEM, "out of memory");
    sm->kf_first = m->nkf + *staged;
    sm->kf_count = n;
    *staged += n;
    return 0;
}

static int keyframe_at(dh_manifest *m, dh__staged_media *sm, size_t i, int64_t k,
                       const char *where, line_error *e)
{
    int64_t prev = i ? m->kf[sm->kf_first + i - 1] : -1;
    if (k <= prev || k < 0)
        return fail(e, DH_ERANGE, "%skeyframes[%zu]: %lld must be >= 0 and ascending", where, i,
                    (long long)k);
    if (sm->frames > 0 && k >= sm->frames)
        return fail(e, DH_ERANGE, "%skeyframes[%zu]: %lld is past the last frame (%lld)", where,
                    i, (long long)k, (long long)sm->frames - 1);
    m->kf[sm->kf_first + i] = (int32_t)k;
    return 0;
}

static int stage_keyframes(dh_manifest *m, const jv *arr, const char *where, dh__staged_media *sm,
                           size_t *staged, line_error *e)
{
    if (!arr)
        return 0;
    if (arr->type != JV_ARRAY)
        return fail(e, DH_ESCHEMA, "%skeyframes: expected an array, got %s", where, jv_kind(arr));
    int rc = keyframes_room(m, arr->count, where, sm, staged, e);
    size_t i = 0;
    for (const jv *v = rc ? NULL : jv_first(m->doc, arr); v && !rc; v = jv_next(m->doc, v), i++)
        rc = v->type != JV_INT ? fail(e, DH_ESCHEMA, "%skeyframes[%zu]: expected an integer, "
                                      "got %s", where, i, jv_kind(v))
                               : keyframe_at(m, sm, i, v->i, where, e);
    return rc;
}

/*
 * Fills frames/fps/duration from each other so that all three are known.
 * duration and fps are already bounded (limits, 100k fps), so their product fits.
 */
static int complete_timing(dh__staged_media *sm, const char *where, line_error *e)
{
    int given = (sm->frames > 0) + (sm->duration > 0) + (sm->fps > 0);
    if (sm->fps > 0 && sm->fps < DH__MIN_FPS) /* 1e-300 would be 0 once stored as a float */
        return fail(e, DH_ESCHEMA, "%sfps: %g is below %g", where, sm->fps, DH__MIN_FPS);
    /* All three given: they must agree (a frame count, a container duration and an average
     * rate never match exactly; a contradiction beyond a quarter plus a second is a lie the
     * decoder would follow silently, e.g. sampling frame 0 eight times). */
    if (given == 3) {
        double implied = (double)sm->frames / sm->fps;
        if (fabs(implied - sm->duration) > 0.25 * sm->duration + 1.0)
            return fail(e, DH_ESCHEMA, "%.*s: contradictory timing: %lld frames at %g fps "
                        "last %g s, but \"duration\" says %g s", (int)strlen(where) - 1, where,
                        (long long)sm->frames, sm->fps, implied, sm->duration);
    }
    if (sm->frames == 0 && sm->duration > 0 && sm->fps > 0)
        sm->frames = (int64_t)llround(sm->duration * sm->fps);
    if (sm->duration == 0 && sm->frames > 0 && sm->fps > 0)
        sm->duration = (double)sm->frames / sm->fps;
    if (sm->fps == 0 && sm->frames > 0 && sm->duration > 0)
        sm->fps = (double)sm->frames / sm->duration;
    if (sm->frames <= 0 || sm->fps <= 0)
        return fail(e, DH_ESCHEMA, "%svideo needs two of \"frames\", \"fps\", \"duration\"", where);
    return 0;
}

static int check_limits(const dh_manifest *m, const dh__staged_media *sm, const char *where,
                        line_error *e)
{
    const dh_limits *l = &m->limits;
    if (sm->width * sm->height > l->max_pixels)
        return fail(e, DH_ELIMIT, "%.*s: %lldx%lld is %lld pixels, over the limit %lld",
                    (int)strlen(where) - 1, where, (long long)sm->width, (long long)sm->height,
                    (long long)(sm->width * sm->height), (long long)l->max_pixels);
    if (sm->frames > l->max_frames || sm->frames > INT32_MAX)
        return fail(e, DH_ELIMIT, "%sframes: %lld is over the limit %lld", where,
                    (long long)sm->frames, (long long)l->max_frames);
    /* A duration derived as frames / fps is checked here; a given one was bounded on read. */
    if (sm->duration > l->max_duration_s)
        return fail(e, DH_ELIMIT, "%sduration: %g s is over the limit %g s", where, sm->duration,
                    l->max_duration_s);
    return 0;
}

/* What a media item's fields must satisfy together, once each is in its range (type names
 * the item's type in messages); video timing is completed here. */
static int check_media(dh_manifest *m, dh__staged_media *sm, const char *type, const char *where,
                       line_error *e)
{
    int rc;
    if (sm->file_bytes && (sm->offset <= 0 || sm->offset > sm->file_bytes - sm->bytes))
        return fail(e, DH_ESCHEMA, "%sfile_bytes: %lld cannot hold bytes %lld..%lld", where,
                    (long long)sm->file_bytes, (long long)sm->offset,
                    (long long)(sm->offset + sm->bytes));
    if (sm->offset > 0 && sm->bytes <= 0)
        return fail(e, DH_ESCHEMA, "%soffset: a byte range needs its size in \"bytes\"", where);
    if (sm->member && (!sm->member[0] || strlen(sm->member) > PATH_MAX_BYTES))
        return fail(e, DH_ESCHEMA, "%smember: must be 1..%d bytes", where, PATH_MAX_BYTES);
    if (sm->etag && (!sm->etag[0] || strlen(sm->etag) > 127 || strpbrk(sm->etag, "\r\n")))
        return fail(e, DH_ESCHEMA, "%setag: must be 1..127 bytes on one line", where);
    if (sm->type != DH_MEDIA_AUDIO && (sm->width <= 0 || sm->height <= 0))
        return fail(e, DH_ESCHEMA, "%s%s needs positive \"width\" and \"height\"", where, type);
    if (sm->type == DH_MEDIA_VIDEO && (rc = complete_timing(sm, where, e)))
        return rc;
    if (sm->type == DH_MEDIA_AUDIO && sm->duration <= 0)
        return fail(e, DH_ESCHEMA, "%saudio needs a positive \"duration\"", where);
    return check_limits(m, sm, where, e);
}

/* "media[i]." (0 <= i < 256), the prefix of an item's messages: made for every item, so not
 * by printf. */
static void media_where(char where[32], int i)
{
    char *p = where + 6;
    memcpy(where, "media[", 6);
    if (i >= 100)
        *p++ = (char)('0' + i / 100);
    if (i >= 10)
        *p++ = (char)('0' + i / 10 % 10);
    *p++ = (char)('0' + i % 10);
    memcpy(p, "].", 3);
}

static int parse_media(dh_manifest *m, const jv *obj, int i, dh__staged_media *sm, size_t *kf_staged,
                       line_error *e)
{
    char where[32];
    media_where(where, i);
    memset(sm, 0, sizeof *sm);
    const jv_doc *d = m->doc;
    if (obj->type != JV_OBJECT)
        return fail(e, DH_ESCHEMA, "media[%d]: expected an object, got %s", i, jv_kind(obj));
    const char *type = NULL, *codec = NULL;
    int rc;
    if ((rc = get_str(d, obj, "type", where, 1, &type, e)) ||
        (rc = get_str(d, obj, "path", where, 1, &sm->path, e)) ||
        (rc = get_str(d, obj, "codec", where, 0, &codec, e)))
        return rc;
    int t = dh_media_type_from_name(type);
    if (t < 0)
        return fail(e, DH_ESCHEMA, "%stype: \"%s\" is not video, image or audio", where, type);
    sm->type = (dh_media_type)t;
    sm->codec = dh_codec_from_name(codec);
    const dh_limits *l = &m->limits;
    if ((rc = get_int(d, obj, "width", where, 0, 1 << 30, DH_ELIMIT, &sm->width, e)) ||
        (rc = get_int(d, obj, "height", where, 0, 1 << 30, DH_ELIMIT, &sm->height, e)) ||
        (rc = get_int(d, obj, "frames", where, 0, INT64_MAX, DH_ELIMIT, &sm->frames, e)) ||
        (rc = get_int(d, obj, "sample_rate", where, 0, 10000000, DH_ELIMIT, &sm->rate, e)) ||
        (rc = get_int(d, obj, "channels", where, 0, 255, DH_ELIMIT, &sm->channels, e)) ||
        (rc = get_int(d, obj, "bytes", where, 0, l->max_bytes, DH_ELIMIT, &sm->bytes, e)) ||
        (rc = get_num(d, obj, "fps", where, 100000.0, &sm->fps, e)) ||
        (rc = get_num(d, obj, "duration", where, l->max_duration_s, &sm->duration, e)) ||
        (rc = get_int(d, obj, "offset", where, 0, INT64_MAX / 2, DH_ERANGE, &sm->offset, e)) ||
        (rc = get_str(d, obj, "member", where, 0, &sm->member, e)) ||
        (rc = get_str(d, obj, "etag", where, 0, &sm->etag, e)) ||
        (rc = get_int(d, obj, "file_bytes", where, 0, INT64_MAX / 2, DH_ERANGE,
                      &sm->file_bytes, e)))
        return rc;
    if ((rc = check_media(m, sm, type, where, e)))
        return rc;
    if (sm->type == DH_MEDIA_VIDEO &&
        (rc = stage_keyframes(m, jv_get(d, obj, "keyframes"), where, sm, kf_staged, e)))
        return rc;
    return check_path(m, sm->path, where, e);
}

static int parse_sim(const jv_doc *d, const jv *root, dh__staged_sample *s, line_error *e)
{
    s->sim_cpu = s->sim_gpu = -1.0;
    const jv *sim = jv_get(d, root, "sim");
    if (!sim)
        return 0;
    if (sim->type != JV_OBJECT)
        return fail(e, DH_ESCHEMA, "sim: expected an object, got %s", jv_kind(sim));
    int rc = get_num(d, sim, "cpu_ms", "sim.", DH__MAX_SIM_MS, &s->sim_cpu, e);
    return rc ? rc : get_num(d, sim, "gpu_ms", "sim.", DH__MAX_SIM_MS, &s->sim_gpu, e);
}

/* A sample's "text" (at most limits.max_text_bytes; UTF-8, as the JSON layer guarantees: the
 * fast scanner declines any byte over 0x7f, jansson refuses invalid UTF-8 and lone
 * surrogates) and integer "label". */
static int parse_text(const dh_manifest *m, const jv_doc *d, const jv *root,
                      dh__staged_sample *s, line_error *e)
{
    int rc = get_str(d, root, "text", "", 0, &s->text, e);
    if (rc)
        return rc;
    size_t n = s->text ? strlen(s->text) : 0;
    if ((int64_t)n > m->limits.max_text_bytes)
        return fail(e, DH_ELIMIT, "text: %zu bytes, over the limit %lld (--max-text-bytes)", n,
                    (long long)m->limits.max_text_bytes);
    s->label = DH__NO_LABEL;
    rc = get_int(d, root, "label", "", -(INT64_C(1) << 53), INT64_C(1) << 53, DH_ERANGE,
                 &s->label, e);
    s->has_label = s->label != DH__NO_LABEL;
    const jv *meta = jv_get(d, root, "meta");
    if (!rc && meta && meta->type != JV_OBJECT)
        return fail(e, DH_ESCHEMA, "meta: expected an object, got %s", jv_kind(meta));
    return rc;
}

/* The sample's id, claimed; DH_EDUP naming the line that has it. */
static int claim_id(dh_manifest *m, dh__staged_sample *s, size_t idlen, line_error *e)
{
    int64_t row = -1;
    int rc = dh__manifest_id_claim(m, s, idlen, &row);
    if (rc == DH_EDUP)
        return fail(e, DH_EDUP, "id \"%s\" already used on line %u", s->id, m->line[row]);
    return rc ? fail(e, rc, "out of memory") : 0;
}

/* The id's length, checked, and the id kept for messages; 0 on a bad id (e says why). */
static size_t take_id(dh__staged_sample *s, line_error *e)
{
    size_t idlen = strlen(s->id);
    if (idlen == 0 || idlen > ID_MAX_BYTES) {
        fail(e, DH_ESCHEMA, "id: must be 1..%d bytes", ID_MAX_BYTES);
        return 0;
    }
    size_t keep = DH_MIN(idlen, sizeof e->id - 1); /* ids are clipped in messages */
    memcpy(e->id, s->id, keep);
    e->id[keep] = 0;
    return idlen;
}

static int parse_sample(dh_manifest *m, const jv *root, dh__staged_sample *s, size_t *kf_staged,
                        line_error *e)
{
    const jv_doc *d = m->doc;
    if (root->type != JV_OBJECT)
        return fail(e, DH_ESCHEMA, "a manifest line must be a JSON object, got %s", jv_kind(root));
    int rc = get_str(d, root, "id", "", 1, &s->id, e);
    if (rc)
        return rc;
    size_t idlen = take_id(s, e);
    if (!idlen)
        return e->code;
    s->text_tokens = -1;
    if ((rc = get_int(d, root, "text_tokens", "", 0, m->limits.max_text_tokens, DH_ELIMIT,
                      &s->text_tokens, e)))
        return rc;
    if ((rc = parse_sim(d, root, s, e)) || (rc = parse_text(m, d, root, s, e)))
        return rc;
    const jv *media = jv_get(d, root, "media");
    if (media && media->type != JV_ARRAY)
        return fail(e, DH_ESCHEMA, "media: expected an array, got %s", jv_kind(media));
    size_t nmedia = media ? media->count : 0;
    if (nmedia > (size_t)m->limits.max_media)
        return fail(e, DH_ELIMIT, "media: %zu items, over the limit %d", nmedia, m->limits.max_media);
    if (nmedia == 0 && s->text_tokens < 0 && !s->text)
        return fail(e, DH_ESCHEMA, "sample has neither \"media\" nor \"text\" nor \"text_tokens\"");
    if (s->text_tokens < 0 && !s->text)
        s->text_tokens = 0; /* a text without a count stays -1: the spec counts it */
    s->media_count = (int)nmedia;
    int i = 0;
    for (const jv *item = nmedia ? jv_first(d, media) : NULL; item; item = jv_next(d, item), i++)
        if ((rc = parse_media(m, item, i, &s->media[i], kf_staged, e)))
            return rc;
    return claim_id(m, s, idlen, e);
}

/*
 * Fills m->doc from the line: the fast scanner first; jansson when the scanner
 * declines, and jansson's verdict and message when the line is not valid JSON.
 */
static int parse_document(dh_manifest *m, const char *line, size_t len, line_error *e)
{
    if (!m->doc && !(m->doc = calloc(1, sizeof *m->doc)))
        return fail(e, DH_ENOMEM, "out of memory");
    if (dh__jv_parse_fast(m->doc, line, len) == 0)
        return 0;
    json_error_t jerr;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return fail(e, DH_EPARSE, "malformed JSON at column %d: %s", jerr.column, jerr.text);
    int rc = dh__jv_from_jansson(m->doc, root);
    json_decref(root);
    return rc ? fail(e, rc, "out of memory") : 0;
}

/*
 * The line's "meta" object as compact JSON into *out (malloc'd). The line is parsed again by
 * jansson, which keeps what the read-only document does not (key order, the spelling of
 * numbers): only lines with a meta pay for it.
 */
static int compact_meta(const char *line, size_t len, int64_t max, char **out, line_error *e)
{
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
    char *text = root ? json_dumps(json_object_get(root, "meta"),
                                   JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!text)
        return fail(e, DH_ENOMEM, "out of memory");
    size_t n = strlen(text);
    if ((int64_t)n > max) {
        free(text);
        return fail(e, DH_ELIMIT, "meta: %zu bytes as compact JSON, over the limit %lld "
                    "(--max-text-bytes)", n, (long long)max);
    }
    *out = text;
    return 0;
}

int dh__manifest_parse_line(dh_manifest *m, const char *line, size_t len, int64_t lineno,
                            line_error *e)
{
    e->code = 0;
    e->id[0] = 0;
    e->reason[0] = 0;
    if (!m || (!line && len))
        return fail(e, DH_EINVAL, "invalid argument");
    if ((int64_t)len > m->limits.max_line_bytes)
        return fail(e, DH_ELIMIT, "line is %zu bytes, over the limit %lld", len,
                    (long long)m->limits.max_line_bytes);
    if (m->n >= (int64_t)UINT32_MAX - 1)
        return fail(e, DH_ELIMIT, "too many samples in one manifest");
    if (m->limits.max_media > 256)
        return fail(e, DH_EINVAL, "limits.max_media may be at most 256");
    int rc = parse_document(m, line, len, e);
    if (rc)
        return rc;
    dh__staged_media media[256];
    dh__staged_sample s = {.media = media};
    size_t kf_staged = 0;
    rc = parse_sample(m, jv_root(m->doc), &s, &kf_staged, e);
    char *meta = NULL;
    if (!rc && jv_get(m->doc, jv_root(m->doc), "meta"))
        rc = compact_meta(line, len, m->limits.max_text_bytes, &meta, e);
    s.meta = meta;
    if (!rc) {
        rc = dh__manifest_commit(m, &s, lineno, kf_staged);
        if (rc)
            fail(e, rc, "%s", dh_strerror(rc));
    }
    free(meta);
    return rc;
}

/* e as the public calls phrase it: the line, the sample when known, the reason. */
static int report(const line_error *e, int64_t lineno, char *errbuf, size_t errlen)
{
    if (e->id[0])
        dh__msg(errbuf, errlen, "line %lld: sample \"%s\": %s", (long long)lineno, e->id,
                e->reason);
    else
        dh__msg(errbuf, errlen, "line %lld: %s", (long long)lineno, e->reason);
    return e->code;
}

int dh_manifest_parse_line(dh_manifest *m, const char *line, size_t len, int64_t lineno,
                           char *errbuf, size_t errlen)
{
    line_error e;
    int rc = dh__manifest_parse_line(m, line, len, lineno, &e);
    return rc ? report(&e, lineno, errbuf, errlen) : 0;
}

/* A built media item's fields against the ranges get_int and get_num give the parsed ones. */
static int built_media(dh_manifest *m, const dh__built_media *b, int i, dh__staged_media *sm,
                       size_t *kf_staged, line_error *e)
{
    char where[32];
    media_where(where, i);
    /* field by field: a compound literal zeroed the whole record first (rep stos, a
     * seventh of committing a generated sample with the line below's) */
    sm->type = b->type;
    sm->codec = b->codec;
    sm->path = b->path;
    sm->width = b->width;
    sm->height = b->height;
    sm->frames = b->frames;
    sm->rate = b->rate;
    sm->channels = b->channels;
    sm->bytes = 0;
    sm->fps = b->fps;
    sm->duration = b->duration;
    sm->kf_first = sm->kf_count = 0;
    sm->offset = 0;
    sm->member = sm->etag = NULL;
    sm->file_bytes = 0;
    const dh_limits *l = &m->limits;
    int rc;
    if ((rc = int_range("width", where, b->width, 0, 1 << 30, DH_ELIMIT, e)) ||
        (rc = int_range("height", where, b->height, 0, 1 << 30, DH_ELIMIT, e)) ||
        (rc = int_range("frames", where, b->frames, 0, INT64_MAX, DH_ELIMIT, e)) ||
        (rc = int_range("sample_rate", where, b->rate, 0, 10000000, DH_ELIMIT, e)) ||
        (rc = int_range("channels", where, b->channels, 0, 255, DH_ELIMIT, e)) ||
        (rc = num_range("fps", where, b->fps, 100000.0, e)) ||
        (rc = num_range("duration", where, b->duration, l->max_duration_s, e)) ||
        (rc = check_media(m, sm, dh_media_type_name(b->type), where, e)))
        return rc;
    if (b->type == DH_MEDIA_VIDEO && b->nkeyframes) {
        rc = keyframes_room(m, b->nkeyframes, where, sm, kf_staged, e);
        for (size_t k = 0; !rc && k < b->nkeyframes; k++)
            rc = keyframe_at(m, sm, k, b->keyframes[k], where, e);
        if (rc)
            return rc;
    }
    return check_path(m, sm->path, where, e);
}

int dh__manifest_add_built(dh_manifest *m, const dh__built_sample *b, int64_t lineno,
                           char *errbuf, size_t errlen)
{
    line_error e; /* what a failure reads is set by it: not 516 bytes zeroed a sample */
    e.code = 0;
    e.id[0] = e.reason[0] = 0;
    dh__staged_media media[256];
    dh__staged_sample s = {.id = b->id, .text_tokens = b->text_tokens, .sim_cpu = -1.0,
                           .sim_gpu = -1.0, .media_count = b->nmedia, .media = media};
    size_t idlen = take_id(&s, &e), kf_staged = 0;
    int rc = idlen ? 0 : e.code;
    if (!rc)
        rc = int_range("text_tokens", "", b->text_tokens, 0, m->limits.max_text_tokens,
                       DH_ELIMIT, &e);
    if (!rc && (b->nmedia < 0 || b->nmedia > m->limits.max_media))
        rc = fail(&e, DH_ELIMIT, "media: %d items, over the limit %d", b->nmedia,
                  m->limits.max_media);
    for (int i = 0; !rc && i < b->nmedia; i++)
        rc = built_media(m, &b->media[i], i, &media[i], &kf_staged, &e);
    if (!rc)
        rc = claim_id(m, &s, idlen, &e);
    if (!rc && (rc = dh__manifest_commit(m, &s, lineno, kf_staged)))
        fail(&e, rc, "%s", dh_strerror(rc));
    return rc ? report(&e, lineno, errbuf, errlen) : 0;
}
