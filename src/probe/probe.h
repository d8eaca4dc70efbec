/* probe.h - manifest line pieces shared by index and gen (internal); dh__media_json is in
 * probe.c, the rest in shards.c. */
#ifndef DH_PROBE_H
#define DH_PROBE_H

#include "../core/core.h"

#include <jansson.h>

/* The manifest JSON of one probed media item stored at `path` (new reference). */
json_t *dh__media_json(const dh_probe_result *r, const char *path);

/* The manifest lines of one tar shard's samples, and what was wrong (shards.c). */
typedef struct {
    char **lines;                 /* JSON, without a newline, in member order */
    size_t nlines, line_cap;
    struct {
        int code;
        char *message;            /* names the shard, the sample and the member */
    } *diags;
    size_t ndiags, diag_cap;
    int64_t samples, skipped;     /* samples written, samples left out */
    int64_t bytes_read, media_bytes; /* what indexing read, and the media bytes described */
    int64_t ignored;              /* members of a suffix no rule knows (not read) */
    char ignored_suffixes[64];    /* the first few of those suffixes, comma-separated */
    int failed;                   /* the shard could not be read at all */
} dh__shard_result;

/*
 * Indexes the shard rel (below root; the manifest sees root as prefix): its samples by
 * WebDataset's grouping, media probed in place. 0, or DH_ENOMEM (every other problem is in
 * r's diags).
 */
int dh__index_shard(const char *root, const char *rel, const char *prefix,
                    const dh_limits *limits, const char *suffixes, dh__shard_result *r);

void dh__shard_result_clear(dh__shard_result *r);
/* Appends n bytes of item to a comma-separated list of cap bytes unless it is there already
 * or there is no room. */
void dh__list_add_once(char *list, size_t cap, const char *item, size_t n);

#endif
