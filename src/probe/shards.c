/*
 * shards.c - the samples of one WebDataset tar shard, as manifest lines
 * (used by index.c for every .tar file it finds).
 *
 * DESIGN: the shard's members come from its headers (tar.c); members whose
 * keys are equal and adjacent form one sample (WebDataset's rule: the key is
 * the path up to the first dot of the base name); a key that comes back
 * after another is a new sample, its id marked "#2", "#3"... Each media
 * member is probed in place, as a byte range of the shard (the container's
 * headers only, as for a loose file); the .txt member is the sample's text
 * (UTF-8, at most 1 MiB), the .cls member its integer label. A bad member
 * costs its sample, named with the shard, the member and the reason; a
 * shard damaged part-way keeps the samples before the damage and names the
 * rest; a shard that is not an uncompressed tar is named once.
 */
#include "probe.h"

#include "../catalog/catalog.h"
#include "../codec/source.h"
#include "../store/store.h"
#include "tar.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct {
    char *name;
    size_t key;                  /* its WebDataset key: name[0..key) */
    int64_t header, offset, size;
    char type;
} member;

/* 1 when members a and b have the same key. */
static int same_key(const member *a, const member *b)
{
    return a->key == b->key && !strncmp(a->name, b->name, a->key);
}

typedef struct {
    member *m;
    size_t n, cap;
} member_list;

static int collect(const dh__tar_member *tm, void *user)
{
    member_list *l = user;
    if (tm->type == '5')
        return 0; /* directories hold nothing */
    if (dh__grow((void **)&l->m, &l->cap, l->n + 1, sizeof *l->m))
        return DH_ENOMEM;
    member *m = &l->m[l->n];
    *m = (member){strdup(tm->name), 0, tm->header, tm->offset, tm->size, tm->type};
    if (!m->name)
        return DH_ENOMEM;
    m->key = dh__wds_split(m->name, NULL, 0);
    l->n++;
    return 0;
}

/* Which modality a member's suffix is (its last extension decides): media type, or one of
 * the text kinds below, or -1 (ignored). */
enum { KIND_TEXT = 100, KIND_LABEL, KIND_META, KIND_UNKNOWN = -5 /* ignored, unasked */ };

static const struct {
    const char *name;
    int kind;
} kinds[] = {{"video", DH_MEDIA_VIDEO}, {"image", DH_MEDIA_IMAGE}, {"audio", DH_MEDIA_AUDIO},
             {"text", KIND_TEXT},       {"label", KIND_LABEL},      {"meta", KIND_META},
             {"ignore", -1}};

/* The kind a rule "EXT=KIND" (n bytes) gives ext, or -2 when it is not a rule for ext; -3
 * when it is malformed. */
static int rule_kind(const char *rule, size_t n, const char *ext)
{
    const char *eq = memchr(rule, '=', n);
    size_t elen = eq ? (size_t)(eq - rule) : 0;
    if (!eq || !elen || elen > 16 || memchr(rule, '.', elen))
        return -3;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (strlen(kinds[k].name) == n - elen - 1 && !memcmp(eq + 1, kinds[k].name, n - elen - 1))
            return ext && strlen(ext) == elen && !strncasecmp(ext, rule, elen) ? kinds[k].kind
                                                                              : -2;
    return -3;
}

int dh_index_suffixes_check(const char *rules, char *err, size_t errlen)
{
    for (const char *p = rules; p && *p;) {
        size_t n = strcspn(p, ",");
        if (rule_kind(p, n, NULL) == -3)
            return dh__fail(err, errlen, DH_EINVAL, "suffix rule \"%.*s\": expected EXT=KIND, "
                            "EXT a suffix without dots (at most 16 bytes), KIND one of video, "
                            "image, audio, text, label, meta, ignore", (int)n, p);
        p += n + (p[n] == ',');
    }
    return 0;
}

static int kind_of(const char *suffix, const char *rules)
{
    static const struct {
        const char *ext;
        int kind;
    } table[] = {{"mp4", DH_MEDIA_VIDEO},  {"webm", DH_MEDIA_VIDEO}, {"mkv", DH_MEDIA_VIDEO},
                 {"avi", DH_MEDIA_VIDEO},  {"mov", DH_MEDIA_VIDEO},  {"jpg", DH_MEDIA_IMAGE},
                 {"jpeg", DH_MEDIA_IMAGE}, {"png", DH_MEDIA_IMAGE},  {"webp", DH_MEDIA_IMAGE},
                 {"wav", DH_MEDIA_AUDIO},  {"flac", DH_MEDIA_AUDIO}, {"mp3", DH_MEDIA_AUDIO},
                 {"m4a", DH_MEDIA_AUDIO},  {"ogg", DH_MEDIA_AUDIO},  {"txt", KIND_TEXT},
                 {"cls", KIND_LABEL},      {"json", KIND_META}};
    const char *dot = strrchr(suffix, '.');
    const char *ext = dot ? dot + 1 : suffix;
    int ruled = -2;
    for (const char *p = rules; p && *p;) { /* the user's rules first (the last of them for
                                             * a suffix), then the defaults */
        size_t n = strcspn(p, ",");
        int kind = rule_kind(p, n, ext);
        ruled = kind >= -1 ? kind : ruled;
        p += n + (p[n] == ',');
    }
    if (ruled >= -1)
        return ruled;
    for (size_t k = 0; k < sizeof table / sizeof table[0]; k++)
        if (!strcmp(ext, table[k].ext))
            return table[k].kind;
    return KIND_UNKNOWN;
}

void dh__list_add_once(char *list, size_t cap, const char *item, size_t n)
{
    for (const char *q = list; *q; q += strcspn(q, ",") + (q[strcspn(q, ",")] == ','))
        if (strcspn(q, ",") == n && !strncmp(q, item, n))
            return; /* there */
    size_t have = strlen(list);
    if (n && have + n + 2 < cap)
        snprintf(list + have, cap - have, "%s%.*s", have ? "," : "", (int)n, item);
}

/* Counts a member no rule knows, and remembers its suffix (the first few) for the summary. */
static void note_unknown(dh__shard_result *r, const char *suffix)
{
    r->ignored++;
    const char *dot = strrchr(suffix, '.');
    const char *ext = dot ? dot + 1 : suffix;
    dh__list_add_once(r->ignored_suffixes, sizeof r->ignored_suffixes, ext, strlen(ext));
}

/* Appends a formatted diagnostic to the shard's result. */
static void add_diag(dh__shard_result *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add_diag(dh__shard_result *r, int code, const char *fmt, ...)
{
    if (dh__grow((void **)&r->diags, &r->diag_cap, r->ndiags + 1, sizeof *r->diags))
        return;
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->diags[r->ndiags].code = code;
    r->diags[r->ndiags].message = strdup(msg);
    if (r->diags[r->ndiags].message)
        r->ndiags++;
}

static int add_line(dh__shard_result *r, json_t *line)
{
    char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    if (!text || dh__grow((void **)&r->lines, &r->line_cap, r->nlines + 1, sizeof *r->lines)) {
        free(text);
        return DH_ENOMEM;
    }
    r->lines[r->nlines++] = text;
    return 0;
}

/* Reads a small member whole (at most max bytes) into a NUL-terminated buffer. */
static int read_member(dh__source *s, const member *m, int64_t max, char **out, char *why,
                       size_t len)
{
    if (m->size > max)
        return dh__fail(why, len, DH_ELIMIT, "%lld bytes, over the limit %lld",
                        (long long)m->size, (long long)max);
    char *buf = malloc((size_t)m->size + 1);
    if (!buf)
        return dh__fail(why, len, DH_ENOMEM, "out of memory");
    int64_t got = 0;
    while (got < m->size) {
        ssize_t n = dh__source_read_at(s, buf + got, (size_t)(m->size - got), m->offset + got);
        if (n <= 0) {
            free(buf);
            return dh__fail(why, len, n < 0 ? (int)n : DH_ECORRUPT, "cannot read it: %s",
                            n < 0 ? dh_strerror((int)n) : "the shard ends first");
        }
        got += n;
    }
    buf[m->size] = 0;
    *out = buf;
    return 0;
}

typedef struct {
    const char *root, *rel, *shown, *prefix; /* DIR, the shard below it (and as messages name
                                               * it), DIR as the manifest sees it */
    const dh_limits *limits;
    const char *suffixes;            /* the user's suffix rules, or NULL */
    dh__source *src;                 /* the shard, opened (for text and label members) */
    dh__fd_cache *cache;             /* the shard kept open (an object: one connection) */
    dh__shard_result *r;
} shard_job;

/* One sample: members g[0..n) sharing key (key_len bytes of g[0].name); id its id. */
/* What one sample's members gave so far. */
typedef struct {
    json_t *media;
    char *text;
    json_t *meta;
    int64_t label;
    int has_label;
} sample_parts;

/* A text member: UTF-8 without NUL, at most max_text_bytes. 0 or the error with why. */
static int text_member(shard_job *j, const member *m, sample_parts *sp, char *why, size_t len)
{
    int rc = read_member(j->src, m, j->limits->max_text_bytes, &sp->text, why, len);
    size_t at = sp->text ? dh__utf8_check(sp->text, (size_t)m->size) : 0;
    if (!rc && (at < (size_t)m->size || strlen(sp->text) != (size_t)m->size))
        rc = dh__fail(why, len, DH_ESCHEMA, "%s at byte %zu",
                      at < (size_t)m->size ? "not valid UTF-8" : "a NUL byte",
                      at < (size_t)m->size ? at : strlen(sp->text));
    return rc;
}

/* A meta member: a JSON object. */
static int meta_member(shard_job *j, const member *m, sample_parts *sp, char *why, size_t len)
{
    char *buf = NULL;
    json_error_t jerr;
    int rc = read_member(j->src, m, j->limits->max_text_bytes, &buf, why, len);
    if (!rc) {
        sp->meta = json_loadb(buf, (size_t)m->size, JSON_REJECT_DUPLICATES, &jerr);
        if (!sp->meta)
            rc = dh__fail(why, len, DH_EPARSE, "malformed JSON at line %d column %d: %s",
                          jerr.line, jerr.column, jerr.text);
        else if (!json_is_object(sp->meta))
            rc = dh__fail(why, len, DH_ESCHEMA, "JSON, but not an object");
    }
    free(buf);
    return rc;
}

/* A label member: an integer a double holds exactly, surrounded by white space at most. */
static int label_member(shard_job *j, const member *m, sample_parts *sp, char *why, size_t len)
{
    char *buf = NULL, *end = NULL;
    int rc = read_member(j->src, m, 64, &buf, why, len);
    if (!rc) {
        sp->label = strtoll(buf, &end, 10);
        while (end && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t'))
            end++;
        if (end == buf || !end || *end || sp->label < -(INT64_C(1) << 53) ||
            sp->label > (INT64_C(1) << 53))
            rc = dh__fail(why, len, DH_ESCHEMA, "not an integer label: \"%.40s\"", buf);
        sp->has_label = !rc;
    }
    free(buf);
    return rc;
}

/* A media member, probed in place: its manifest item. */
static int media_member(shard_job *j, const member *m, sample_parts *sp, char *why, size_t len)
{
    dh__media_src ms = {.root = j->root, .path = j->rel, .range_off = m->offset,
                        .range_len = m->size, .cache = j->cache, .object_bytes = j->src->size,
                        .etag = j->src->etag[0] ? j->src->etag : NULL};
    dh_probe_result pr;
    char perr[500] = "";
    int rc = m->size > 0 ? dh__probe_src(&ms, j->limits, &pr, perr, sizeof perr) : DH_ENOTMEDIA;
    if (rc)
        return dh__fail(why, len, rc, "%s", perr[0] ? perr : "an empty member");
    char path[4200];
    snprintf(path, sizeof path, "%s%s", dh__is_remote(j->rel) ? "" : j->prefix, j->rel);
    json_t *item = dh__media_json(&pr, path);
    json_object_set_new(item, "bytes", json_integer(m->size));
    json_object_set_new(item, "offset", json_integer(m->offset));
    json_object_set_new(item, "member", json_string(m->name));
    json_object_set_new(item, "file_bytes", json_integer(j->src->size));
    if (j->src->etag[0])
        json_object_set_new(item, "etag", json_string(j->src->etag));
    json_array_append_new(sp->media, item);
    j->r->bytes_read += pr.bytes_read;
    j->r->media_bytes += m->size;
    dh_probe_result_clear(&pr);
    return 0;
}

/* Member m of a sample by its kind (the suffix rules'; < 0: not read); 0 or the error. */
static int one_member(shard_job *j, const member *m, int kind, sample_parts *sp, char *why,
                      size_t len)
{
    if (kind >= 0 && m->type != '0')
        return dh__fail(why, len, DH_ENOTMEDIA, "a %s, not a regular file (type '%c')",
                        m->type == '1' || m->type == '2' ? "link"
                        : m->type == '3' || m->type == '4' ? "device"
                        : m->type == 'S' ? "sparse file" : "special member", m->type);
    if (kind == KIND_TEXT)
        return text_member(j, m, sp, why, len);
    if (kind == KIND_META)
        return meta_member(j, m, sp, why, len);
    if (kind == KIND_LABEL)
        return label_member(j, m, sp, why, len);
    if (kind >= 0 && kind < KIND_TEXT)
        return media_member(j, m, sp, why, len);
    return 0;
}

/* One sample of a shard: its members (g[0..n), adjacent, one key) into a manifest line, or a
 * diagnostic naming the shard, the sample and the member at fault. */
static int one_sample(shard_job *j, const member *g, size_t n, size_t key_len, const char *id)
{
    char why[600] = "", suffixes[64][32];
    const char *bad = NULL;
    int rc = 0;
    sample_parts sp = {json_array(), NULL, NULL, 0, 0};
    json_t *line = json_object();
    for (size_t k = 0; k < n && !rc; k++) {
        const member *m = &g[k];
        char suffix[32];
        dh__wds_split(m->name, suffix, sizeof suffix);
        for (size_t p = 0; p < k && p < 64 && !rc; p++)
            if (!strcmp(suffixes[p], suffix))
                rc = dh__fail(why, sizeof why, DH_EDUP, "suffix \"%s\" twice", suffix);
        if (k < 64)
            snprintf(suffixes[k], sizeof suffixes[k], "%s", suffix);
        int kind = rc ? -1 : kind_of(suffix, j->suffixes);
        if (kind == KIND_UNKNOWN && m->type == '0')
            note_unknown(j->r, suffix);
        if (!rc)
            rc = one_member(j, m, kind, &sp, why, sizeof why);
        bad = rc ? m->name : bad;
    }
    if (!rc && !json_array_size(sp.media) && !sp.text)
        rc = dh__fail(why, sizeof why, DH_ENOTMEDIA, "no media or text member"), bad = g[0].name;
    if (rc) {
        j->r->skipped++;
        add_diag(j->r, rc, "%s: sample \"%.*s\": member %s: %s", j->shown, (int)key_len, g[0].name,
                 bad ? bad : "?", why);
    } else {
        json_object_set_new(line, "id", json_string(id));
        /* no text_tokens: the spec's text section counts them (docs/SPEC.md) */
        if (sp.text)
            json_object_set_new(line, "text", json_string(sp.text));
        if (sp.has_label)
            json_object_set_new(line, "label", json_integer(sp.label));
        if (sp.meta)
            json_object_set(line, "meta", sp.meta);
        if (json_array_size(sp.media))
            json_object_set_new(line, "media", json_incref(sp.media));
        rc = add_line(j->r, line);
        if (!rc)
            j->r->samples++;
    }
    free(sp.text);
    json_decref(sp.meta);
    json_decref(sp.media);
    json_decref(line);
    return rc == DH_ENOMEM ? rc : 0;
}

/* What a file that is not a tar at all is, by its first bytes; NULL: nothing known. */
static const char *compressed_kind(dh__source *s)
{
    unsigned char b[6] = {0};
    if (dh__source_read_at(s, b, sizeof b, 0) < 4)
        return NULL;
    if (b[0] == 0x1f && b[1] == 0x8b)
        return "gzip";
    if (b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd)
        return "zstd";
    if (b[0] == 'B' && b[1] == 'Z' && b[2] == 'h')
        return "bzip2";
    if (b[0] == 0xfd && !memcmp(b + 1, "7zXZ", 4))
        return "xz";
    return NULL;
}

static ssize_t shard_read(void *src, void *buf, size_t n, int64_t off)
{
    return dh__source_read_at(src, buf, n, off);
}

void dh__shard_result_clear(dh__shard_result *r)
{
    for (size_t k = 0; k < r->nlines; k++)
        free(r->lines[k]);
    for (size_t k = 0; k < r->ndiags; k++)
        free(r->diags[k].message);
    free(r->lines);
    free(r->diags);
    memset(r, 0, sizeof *r);
}

int dh__index_shard(const char *root, const char *rel, const char *prefix,
                    const dh_limits *limits, const char *suffixes, dh__shard_result *r)
{
    memset(r, 0, sizeof *r);
    dh__source s;
    char err[600] = "";
    char shown[4200]; /* an object's URL without a query or credentials */
    dh__store_display(rel, shown, sizeof shown);
    dh__fd_cache *cache = dh__fd_cache_new(1);
    if (!cache)
        return DH_ENOMEM;
    dh__media_src ms = {.root = root, .path = rel, .cache = cache};
    int rc = dh__source_open(&s, &ms, err, sizeof err);
    if (rc) {
        dh__fd_cache_free(cache);
        add_diag(r, rc, "%s: shard skipped: %s", shown, err);
        r->failed = 1;
        return 0;
    }
    const char *z = compressed_kind(&s);
    member_list l = {0};
    char broken[DH__TAR_NAME_MAX] = "";
    if (z) {
        rc = dh__fail(err, sizeof err, DH_ENOTMEDIA, "a %s-compressed file: shards are read in "
                      "place, uncompressed (WebDataset's plain .tar; decompress it first)", z);
    } else {
        dh__tar_reader rd = {shard_read, &s};
        rc = dh__tar_walk_at(&rd, s.size, collect, &l, broken, sizeof broken, err, sizeof err);
        if (rc && dh__source_fault(&s, NULL, 0)) /* the store failed: what it said */
            rc = dh__source_fault(&s, err, sizeof err);
    }
    if (rc == DH_ENOMEM) {
        dh__source_close(&s);
        dh__fd_cache_free(cache);
        for (size_t k = 0; k < l.n; k++)
            free(l.m[k].name);
        free(l.m);
        return rc;
    }
    /* A shard damaged part-way: the samples of the members before the damage stay, except
     * the last one when the member the damage cut (or an unnamed damage) may belong to it. */
    size_t usable = l.n;
    if (rc && l.n) {
        const member *last = &l.m[l.n - 1];
        member cut_one = {.name = broken, .key = dh__wds_split(broken, NULL, 0)};
        int cut = !broken[0] || same_key(&cut_one, last);
        while (cut && usable > 0 && same_key(&l.m[usable - 1], last))
            usable--;
    }
    shard_job j = {root, rel, shown, prefix, limits, suffixes, &s, cache, r};
    for (size_t k = 0; k < l.n; k++) /* the headers read: a block each, pax data included */
        r->bytes_read += l.m[k].offset - l.m[k].header;
    int frc = 0;
    for (size_t a = 0; a < usable && !frc;) {
        size_t key = l.m[a].key, b = a + 1;
        while (b < usable && same_key(&l.m[b], &l.m[a]))
            b++;
        /* the same key earlier in this shard (not adjacent): another sample, as WebDataset
         * makes it; its id says which (a comparison per earlier sample: keys coming back are
         * rare, and a shard holds thousands of samples at most) */
        int seen = 1;
        for (size_t p = 0; p < a; p++)
            seen += (p == 0 || !same_key(&l.m[p - 1], &l.m[p])) && same_key(&l.m[p], &l.m[a]);
        char id[8400]; /* the shard as the manifest names it: the same whichever way indexed */
        snprintf(id, sizeof id, "%s%s:%.*s", dh__is_remote(rel) ? "" : prefix,
                 dh__is_remote(rel) ? shown : rel, (int)key, l.m[a].name); /* no query string */
        if (seen > 1)
            snprintf(id + strlen(id), sizeof id - strlen(id), "#%d", seen);
        frc = one_sample(&j, &l.m[a], b - a, key, id);
        a = b;
    }
    if (rc) {
        r->failed = !usable;
        add_diag(r, rc, "%s: %s%s: %s%s", shown, usable ? "damaged after member " : "shard skipped",
                 usable ? l.m[usable - 1].name : "", err,
                 usable < l.n ? "; the sample it cut is left out" : "");
        r->skipped += usable < l.n || broken[0]; /* the sample the damage cut */
    }
    for (size_t k = 0; k < l.n; k++)
        free(l.m[k].name);
    free(l.m);
    r->bytes_read += s.read_bytes; /* texts, labels, the format check */
    dh__source_close(&s);
    dh__fd_cache_free(cache);
    return frc;
}
