/*
 * jsonlite.c - the fast strict scanner for manifest lines and the jansson
 * converter (see jsonlite.h for why both exist).
 *
 * The scanner follows RFC 8259's grammar exactly for what it accepts and
 * declines (returns nonzero) on anything it does not handle itself: string
 * escapes, bytes >= 0x80, integers of 19+ digits, reals strtod cannot take
 * whole (e.g. under a non-C locale) or that overflow, nesting deeper than 64,
 * objects with more than 64 members, duplicate keys, and top-level values
 * other than objects and arrays (jansson rejects those without
 * JSON_DECODE_ANY). Declined lines go to jansson, so the only promise the
 * scanner makes is: what it accepts, jansson accepts with the same values.
 */
#include "jsonlite.h"

#include "../core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_MEMBERS 64

typedef struct {
    const char *p, *end;
    jv_doc *d;
    int depth;
} scanner;

static void reset(jv_doc *d)
{
    d->n = 0;
    d->nstr = 0;
}

static uint32_t new_node(jv_doc *d, jv_type t)
{
    if (d->n >= UINT32_MAX - 1 || dh__grow((void **)&d->nodes, &d->cap, d->n + 1, sizeof *d->nodes))
        return JV_NONE;
    jv *v = &d->nodes[d->n];
    memset(v, 0, sizeof *v);
    v->type = t;
    v->child = v->next = JV_NONE;
    return (uint32_t)d->n++;
}

/* Copies len bytes into the string pool, NUL-terminated; JV_NONE on failure. */
static uint32_t pool_add(jv_doc *d, const char *s, size_t len)
{
    if (d->nstr + len + 1 > UINT32_MAX ||
        dh__grow((void **)&d->str, &d->strcap, d->nstr + len + 1, 1))
        return JV_NONE;
    memcpy(d->str + d->nstr, s, len);
    d->str[d->nstr + len] = 0;
    uint32_t off = (uint32_t)d->nstr;
    d->nstr += len + 1;
    return off;
}

static void skip_ws(scanner *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static int scan_value(scanner *s, uint32_t *out);

/* A string without escapes, control characters or non-ASCII bytes. */
static int scan_string(scanner *s, uint32_t *off, uint32_t *len)
{
    const char *start = ++s->p;
    while (s->p < s->end) {
        unsigned char c = (unsigned char)*s->p;
        if (c == '"')
            break;
        if (c == '\\' || c < 0x20 || c >= 0x80)
            return -1;
        s->p++;
    }
    if (s->p >= s->end)
        return -1;
    *len = (uint32_t)(s->p - start);
    *off = pool_add(s->d, start, *len);
    s->p++;
    return *off == JV_NONE ? -1 : 0;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/*
 * Clinger's fast path: a decimal "-?d+.d+" with at most 15 significant digits
 * is m / 10^k with m < 2^53 and k <= 15, both exact doubles, so one IEEE
 * division is correctly rounded: the very value strtod returns. Anything
 * else (exponents, long mantissas) goes to strtod.
 */
static int clinger(const char *p, const char *end, double *out)
{
    static const double pow10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
    int neg = *p == '-';
    p += neg;
    uint64_t m = 0;
    int digits = 0, frac = -1;
    for (; p < end; p++) {
        if (*p == '.') {
            frac = 0;
            continue;
        }
        if (!is_digit(*p) || ++digits > 15)
            return 0;
        m = m * 10 + (uint64_t)(*p - '0');
        frac += frac >= 0;
    }
    if (frac < 0)
        return 0;
    *out = (double)m / pow10[frac];
    if (neg)
        *out = -*out;
    return 1;
}

static int scan_number(scanner *s, uint32_t *out)
{
    const char *start = s->p, *q = s->p;
    if (q < s->end && *q == '-')
        q++;
    if (q >= s->end || !is_digit(*q))
        return -1;
    const char *digits = q;
    if (*q == '0')
        q++;
    else
        while (q < s->end && is_digit(*q))
            q++;
    size_t ndigits = (size_t)(q - digits);
    int real = 0;
    if (q < s->end && *q == '.') {
        real = 1;
        if (++q >= s->end || !is_digit(*q))
            return -1;
        while (q < s->end && is_digit(*q))
            q++;
    }
    if (q < s->end && (*q == 'e' || *q == 'E')) {
        real = 1;
        if (++q < s->end && (*q == '+' || *q == '-'))
            q++;
        if (q >= s->end || !is_digit(*q))
            return -1;
        while (q < s->end && is_digit(*q))
            q++;
    }
    uint32_t idx = new_node(s->d, real ? JV_REAL : JV_INT);
    if (idx == JV_NONE)
        return -1;
    jv *v = &s->d->nodes[idx];
    if (!real) {
        if (ndigits > 18)
            return -1; /* may not fit in int64: jansson decides */
        int64_t x = 0;
        for (const char *c = digits; c < q; c++)
            x = x * 10 + (*c - '0');
        v->i = *start == '-' ? -x : x;
    } else if (clinger(start, q, &v->d)) {
        /* exact: same double strtod would return */
    } else {
        char buf[64];
        size_t n = (size_t)(q - start);
        if (n >= sizeof buf)
            return -1;
        memcpy(buf, start, n);
        buf[n] = 0;
        char *end;
        v->d = strtod(buf, &end);
        if (end != buf + n || !isfinite(v->d))
            return -1;
    }
    s->p = q;
    *out = idx;
    return 0;
}

static int scan_literal(scanner *s, const char *word, jv_type t, uint32_t *out)
{
    size_t n = strlen(word);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, word, n) != 0)
        return -1;
    s->p += n;
    *out = new_node(s->d, t);
    return *out == JV_NONE ? -1 : 0;
}

/* Links child after last (or as first child of parent). */
static void link_child(jv_doc *d, uint32_t parent, uint32_t *last, uint32_t child)
{
    if (*last == JV_NONE)
        d->nodes[parent].child = child;
    else
        d->nodes[*last].next = child;
    *last = child;
    d->nodes[parent].count++;
}

static int key_seen(const jv_doc *d, uint32_t obj, const char *key, uint32_t hash)
{
    for (uint32_t c = d->nodes[obj].child; c != JV_NONE; c = d->nodes[c].next)
        if (d->nodes[c].keyhash == hash && !strcmp(d->str + d->nodes[c].key, key))
            return 1;
    return 0;
}

static int scan_container(scanner *s, int object, uint32_t *out)
{
    if (++s->depth > MAX_DEPTH)
        return -1;
    uint32_t idx = new_node(s->d, object ? JV_OBJECT : JV_ARRAY), last = JV_NONE;
    if (idx == JV_NONE)
        return -1;
    char close = object ? '}' : ']';
    s->p++;
    skip_ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        s->depth--;
        *out = idx;
        return 0;
    }
    for (;;) {
        uint32_t key = 0, keylen, child, hash = 0;
        if (object) {
            skip_ws(s);
            if (s->p >= s->end || *s->p != '"' || scan_string(s, &key, &keylen))
                return -1;
            hash = jv_key_hash(s->d->str + key, keylen);
            if (s->d->nodes[idx].count >= MAX_MEMBERS || key_seen(s->d, idx, s->d->str + key, hash))
                return -1;
            skip_ws(s);
            if (s->p >= s->end || *s->p != ':')
                return -1;
            s->p++;
        }
        if (scan_value(s, &child))
            return -1;
        s->d->nodes[child].key = key;
        s->d->nodes[child].keyhash = hash;
        link_child(s->d, idx, &last, child);
        skip_ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == close) {
            s->p++;
            break;
        }
        return -1;
    }
    s->depth--;
    *out = idx;
    return 0;
}

static int scan_value(scanner *s, uint32_t *out)
{
    skip_ws(s);
    if (s->p >= s->end)
        return -1;
    switch (*s->p) {
    case '{':
        return scan_container(s, 1, out);
    case '[':
        return scan_container(s, 0, out);
    case '"': {
        uint32_t off, len;
        if (scan_string(s, &off, &len))
            return -1;
        *out = new_node(s->d, JV_STRING);
        if (*out == JV_NONE)
            return -1;
        s->d->nodes[*out].str = off;
        s->d->nodes[*out].count = len;
        return 0;
    }
    case 't':
        return scan_literal(s, "true", JV_TRUE, out);
    case 'f':
        return scan_literal(s, "false", JV_FALSE, out);
    case 'n':
        return scan_literal(s, "null", JV_NULL, out);
    default:
        return scan_number(s, out);
    }
}

int dh__jv_parse_fast(jv_doc *doc, const char *text, size_t len)
{
    reset(doc);
    scanner s = {.p = text, .end = text + len, .d = doc};
    skip_ws(&s);
    if (s.p >= s.end || (*s.p != '{' && *s.p != '['))
        return -1;
    uint32_t root;
    if (scan_value(&s, &root))
        return -1;
    skip_ws(&s);
    return s.p == s.end ? 0 : -1;
}

static uint32_t convert(jv_doc *d, const json_t *j)
{
    static const jv_type types[] = {[JSON_OBJECT] = JV_OBJECT, [JSON_ARRAY] = JV_ARRAY,
                                    [JSON_STRING] = JV_STRING, [JSON_INTEGER] = JV_INT,
                                    [JSON_REAL] = JV_REAL,     [JSON_TRUE] = JV_TRUE,
                                    [JSON_FALSE] = JV_FALSE,   [JSON_NULL] = JV_NULL};
    uint32_t idx = new_node(d, types[json_typeof(j)]), last = JV_NONE;
    if (idx == JV_NONE)
        return JV_NONE;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)j, key, v) {
            uint32_t k = pool_add(d, key, strlen(key)), c = convert(d, v);
            if (k == JV_NONE || c == JV_NONE)
                return JV_NONE;
            d->nodes[c].key = k;
            d->nodes[c].keyhash = jv_key_hash(key, strlen(key));
            link_child(d, idx, &last, c);
        }
        break;
    }
    case JSON_ARRAY:
        for (size_t i = 0; i < json_array_size(j); i++) {
            uint32_t c = convert(d, json_array_get(j, i));
            if (c == JV_NONE)
                return JV_NONE;
            link_child(d, idx, &last, c);
        }
        break;
    case JSON_STRING: {
        /* Without JSON_ALLOW_NUL jansson strings hold no NUL: C strings are exact. */
        uint32_t off = pool_add(d, json_string_value(j), json_string_length(j));
        if (off == JV_NONE)
            return JV_NONE;
        d->nodes[idx].str = off;
        d->nodes[idx].count = (uint32_t)json_string_length(j);
        break;
    }
    case JSON_INTEGER:
        d->nodes[idx].i = json_integer_value(j);
        break;
    case JSON_REAL:
        d->nodes[idx].d = json_real_value(j);
        break;
    default:
        break;
    }
    return idx;
}

int dh__jv_from_jansson(jv_doc *doc, const json_t *root)
{
    reset(doc);
    return convert(doc, root) == JV_NONE ? DH_ENOMEM : 0;
}

void dh__jv_free(jv_doc *doc)
{
    free(doc->nodes);
    free(doc->str);
    memset(doc, 0, sizeof *doc);
}

const jv *jv_get(const jv_doc *d, const jv *obj, const char *key)
{
    if (!obj || obj->type != JV_OBJECT)
        return NULL;
    uint32_t hash = jv_key_hash(key, strlen(key));
    for (const jv *c = jv_first(d, obj); c; c = jv_next(d, c))
        if (c->keyhash == hash && !strcmp(d->str + c->key, key))
            return c;
    return NULL;
}

const char *jv_kind(const jv *v)
{
    static const char *const names[] = {"null",      "a boolean", "a boolean", "an integer",
                                        "a number",  "a string",  "an array",  "an object"};
    return names[v->type];
}
