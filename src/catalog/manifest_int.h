/*
 * manifest_int.h - what manifest.c (validation of a line into a staged
 * record) and manifest_table.c (the table it is committed to) share.
 * Internal to src/catalog.
 */
#ifndef DH_MANIFEST_INT_H
#define DH_MANIFEST_INT_H

#include "catalog.h"

typedef struct {
    dh_media_type type;
    dh_codec codec;
    const char *path;
    int64_t width, height, frames, rate, channels, bytes;
    double fps, duration;
    size_t kf_first, kf_count; /* into the manifest's kf pool, past nkf (staged) */
    int64_t offset;            /* > 0: a byte range of path (a tar member) */
    const char *member;        /* its name in the shard; NULL: none */
    const char *etag;          /* the object's ETag when indexed; NULL: none */
    int64_t file_bytes;        /* with offset: the shard's size when indexed (0: not pinned) */
} dh__staged_media; /* a new field: set it in built_media (manifest.c), field by field */

typedef struct {
    const char *id;
    uint64_t *id_slot; /* empty slot of the id index found during validation */
    uint32_t id_hash;  /* what goes into it with the row */
    int64_t text_tokens;
    double sim_cpu, sim_gpu;
    const char *text;  /* NULL: none */
    const char *meta;  /* compact JSON of the sample's "meta" object; NULL: none */
    int64_t label;
    int has_label;
    int media_count;
    dh__staged_media *media;
} dh__staged_sample;

/* Whether s's id (len bytes) may be added: 0, with s->id_slot the index's slot to fill on
 * commit (NULL: the ids are still ascending and the index waits); DH_EDUP with *dup_row the
 * row that has it; DH_ENOMEM. */
int dh__manifest_id_claim(dh_manifest *m, dh__staged_sample *s, size_t len, int64_t *dup_row);
/* Appends a validated sample to the table; 0 or DH_ENOMEM (then nothing changed). */
int dh__manifest_commit(dh_manifest *m, const dh__staged_sample *s, int64_t lineno,
                        size_t kf_staged);

#endif
