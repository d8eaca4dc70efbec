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
} dh__staged_media;

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

/* The id index's slot for id (empty, or the sample's if the id is taken: its row is
 * DH__ID_ROW(*slot) - 1); *hash (may be NULL) gets the id's hash, which the slot keeps. */
uint64_t *dh__manifest_id_slot(const dh_manifest *m, const char *id, size_t len, uint32_t *hash);
#define DH__ID_ROW(entry) ((uint32_t)(entry))
/* Room in the id index for n samples; 0 or DH_ENOMEM. */
int dh__manifest_id_reserve(dh_manifest *m, int64_t n);
/* Appends a validated sample to the table; 0 or DH_ENOMEM (then nothing changed). */
int dh__manifest_commit(dh_manifest *m, const dh__staged_sample *s, int64_t lineno,
                        size_t kf_staged);

#endif
