/*
 * jsonlite.h - a small read-only JSON document for manifest lines, filled
 * either by a fast strict scanner or from a jansson tree.
 *
 * Why: jansson builds a hashed tree with an allocation per value and tops
 * out near 150k manifest lines/s on one core here; the loader's target is
 * 300k. The fast scanner handles the common shape of manifest lines (ASCII,
 * no escapes, integers that fit in 18 digits) and declines everything else.
 * jansson stays the authority: a line the scanner declines or finds invalid
 * is parsed again by jansson, which then accepts it (converted into this
 * document) or rejects it with its own message. So the scanner only ever
 * needs to be right when it accepts, and a differential test checks that it
 * accepts nothing jansson would not, with the same values.
 */
#ifndef DH_JSONLITE_H
#define DH_JSONLITE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { JV_NULL, JV_FALSE, JV_TRUE, JV_INT, JV_REAL, JV_STRING, JV_ARRAY, JV_OBJECT } jv_type;

#define JV_NONE UINT32_MAX

typedef struct {
    jv_type type;
    uint32_t count; /* children of an array/object, or string length */
    uint32_t child; /* first child, JV_NONE if empty */
    uint32_t next;  /* next sibling, JV_NONE if last */
    uint32_t key;   /* object members: offset of the key in the string pool */
    uint32_t keyhash; /* object members: jv_key_hash of the key, to skip most strcmp calls */
    uint32_t str;   /* strings: offset in the string pool (NUL-terminated) */
    int64_t i;
    double d;
} jv;

typedef struct jv_doc_s {
    jv *nodes;
    size_t n, cap;
    char *str;
    size_t nstr, strcap;
} jv_doc;

/* Parses with the fast scanner. 0: accepted; nonzero: declined or invalid (ask jansson). */
int dh__jv_parse_fast(jv_doc *doc, const char *text, size_t len);
/* Converts a jansson tree into doc. 0 or DH_ENOMEM / DH_ELIMIT. */
int dh__jv_from_jansson(jv_doc *doc, const json_t *root);
void dh__jv_free(jv_doc *doc);

static inline const jv *jv_node(const jv_doc *d, uint32_t i)
{
    return i == JV_NONE ? NULL : &d->nodes[i];
}
static inline const jv *jv_root(const jv_doc *d)
{
    return d->n ? &d->nodes[0] : NULL;
}
static inline const jv *jv_first(const jv_doc *d, const jv *v)
{
    return jv_node(d, v->child);
}
static inline const jv *jv_next(const jv_doc *d, const jv *v)
{
    return jv_node(d, v->next);
}
static inline const char *jv_str(const jv_doc *d, const jv *v)
{
    return d->str + v->str;
}
static inline int jv_is_number(const jv *v)
{
    return v->type == JV_INT || v->type == JV_REAL;
}
static inline double jv_number(const jv *v)
{
    return v->type == JV_INT ? (double)v->i : v->d;
}
/* FNV-1a of a key; cheap on the short keys manifests use. */
static inline uint32_t jv_key_hash(const char *s, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}
/* Member of an object by key (first match), or NULL. */
const jv *jv_get(const jv_doc *d, const jv *obj, const char *key);
/* "an object", "a string", ... for messages. */
const char *jv_kind(const jv *v);

#endif
