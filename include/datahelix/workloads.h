/*
 * datahelix/workloads.h - the built-in workload suite (docs/WORKLOADS.md):
 * seeded descriptor generators and writers of real media.
 *
 * Thread-safety: safe from any thread; each call owns what it creates.
 * Part of the public C API; include <datahelix.h> for all of it.
 */
#ifndef DATAHELIX_WORKLOADS_H
#define DATAHELIX_WORKLOADS_H

#include "catalog.h"

#ifdef __cplusplus
extern "C" {
#endif
/* ------------------------------------------------------------- workloads */

/*
 * The eleven workloads of the docs/WORKLOADS.md suite as seeded descriptor
 * generators (simulation scale: full resolutions and durations). Each carries
 * its preprocessing spec, GPU model shape, load factor rho and global batch.
 */
DH_API const char *const *dh_workload_names(void); /* NULL-terminated, static */
/*
 * Generates `samples` descriptors of workload `name` into a new manifest
 * (*out, free with dh_manifest_free). Same (name, samples, seed): same table.
 */
DH_API int dh_workload_generate(const char *name, int64_t samples, uint64_t seed,
                                dh_manifest **out);
typedef struct {
    int64_t samples;  /* lines written to DIR/manifest.jsonl */
    int64_t files;    /* media files encoded */
    int64_t bytes;    /* their total size */
} dh_gen_stats;

/*
 * Writes `samples` samples of workload `name` as real media under dir
 * (created if needed), scaled down by scale: "mini" (resolution, duration
 * and keyframe interval / 4), "small" (/ 2) or "full", with real encoders
 * (H.264 via libx264, JPEG, PNG, FLAC), then probes every file and writes
 * dir/manifest.jsonl from what the probe measured. progress may be NULL.
 */
DH_API int dh_workload_write(const char *name, const char *dir, int64_t samples, uint64_t seed,
                             const char *scale, void (*progress)(int64_t done, int64_t total, void *),
                             void *user, dh_gen_stats *stats, char *errbuf, size_t errlen);

/*
 * Added in 0.2: the same samples as WebDataset shards, per_shard samples a shard
 * (dir/shards/00000.tar, ...; per_shard 0: loose files as dh_workload_write): per sample
 * its media (KEY.mp4, KEY.jpg, KEY.J.EXT when it has several), a caption of the workload's
 * text length (KEY.txt, about 4 bytes a token), a label (KEY.cls, one of 400) and
 * metadata (KEY.json: key, status, url, as video2dataset writes a subset of), and
 * dir/manifest.jsonl describing each media item as a byte range of its shard.
 */
DH_API int dh_workload_write_shards(const char *name, const char *dir, int64_t samples,
                                    uint64_t seed, const char *scale, int64_t per_shard,
                                    void (*progress)(int64_t done, int64_t total, void *),
                                    void *user, dh_gen_stats *stats, char *errbuf,
                                    size_t errlen);

/* The workload's default global batch, or a negative error. */
DH_API int64_t dh_workload_global_batch(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* DATAHELIX_WORKLOADS_H */
