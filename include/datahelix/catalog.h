/*
 * datahelix/catalog.h - the descriptor catalog: manifests, the
 * preprocessing spec, derivation of shapes, tokens and decode work, the
 * deterministic sampler, header-only probing and indexing.
 *
 * Thread-safety: a loaded dh_manifest and a dh_spec are read-only and may be
 * read from any number of threads at once; adding lines (dh_manifest_parse_line)
 * and freeing need the caller's exclusion. A dh_sampler belongs to one thread
 * at a time. dh_probe_file may run on many threads at once; dh_index_dir
 * starts its own threads and calls its callbacks from the calling thread.
 * Part of the public C API; include <datahelix.h> for all of it.
 */
#ifndef DATAHELIX_CATALOG_H
#define DATAHELIX_CATALOG_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif
/* ------------------------------------------------------------- manifest */

typedef struct dh_manifest dh_manifest;

typedef enum { DH_ON_ERROR_SKIP = 0, DH_ON_ERROR_FAIL = 1 } dh_on_error;

typedef struct {
    dh_limits limits;
    dh_on_error on_error;
    int check_files;   /* 1: each media path must exist and be a readable file */
    dh_diag_cb diag;   /* called once per rejected line; may be NULL */
    void *diag_user;
} dh_load_opts;

typedef struct {
    int64_t lines;   /* non-blank lines seen */
    int64_t loaded;  /* samples in the table */
    int64_t skipped; /* lines rejected; loaded + skipped == lines */
    int64_t blank;   /* blank lines (ignored, not counted in lines) */
} dh_load_stats;

DH_API void dh_load_opts_default(dh_load_opts *opts);

/*
 * Loads a JSON Lines manifest. Media paths are resolved against the
 * manifest's directory. On success *out owns the table (free with
 * dh_manifest_free). With DH_ON_ERROR_FAIL the first bad line makes the call
 * fail with that line's code; with SKIP bad lines are reported through
 * opts->diag and left out. stats may be NULL. An I/O error is always fatal.
 */
DH_API int dh_manifest_load(const char *path, const dh_load_opts *opts, dh_manifest **out,
                            dh_load_stats *stats);

/* An empty table whose media paths are relative to base_dir (may be NULL). */
DH_API int dh_manifest_new(const char *base_dir, const dh_limits *limits, dh_manifest **out);
DH_API void dh_manifest_free(dh_manifest *m);

/*
 * Parses one manifest line (no trailing newline needed) and appends it.
 * The fuzzing entry point: never crashes on any bytes. On failure nothing is
 * appended and, if errbuf is non-NULL, a message naming the line and reason
 * is written there. lineno is used only in messages.
 */
DH_API int dh_manifest_parse_line(dh_manifest *m, const char *line, size_t len, int64_t lineno,
                                  char *errbuf, size_t errlen);

DH_API int64_t dh_manifest_count(const dh_manifest *m);
/*
 * Hash of the accepted samples' descriptors, in order (the sampler keys on
 * it). The sim truth and the JSON spelling do not enter it.
 */
DH_API uint64_t dh_manifest_hash(const dh_manifest *m);
/* Bytes held by the descriptor table (arrays, strings, id index). */
DH_API size_t dh_manifest_memory(const dh_manifest *m);
DH_API const char *dh_manifest_dir(const dh_manifest *m);

typedef struct {
    const char *id;      /* borrowed, valid until dh_manifest_free */
    int64_t line;        /* manifest line it came from (0 when appended by API) */
    int64_t text_tokens; /* -1 (since 0.2): a text without "text_tokens"; the spec's text
                          * section counts them (dh_derive_sample) */
    int32_t media_count;
    double sim_cpu_ms;   /* ground truth for engines only; < 0 when absent */
    double sim_gpu_ms;
    /* Added in 0.2: the sample's text (UTF-8, borrowed; NULL: none) and integer label
     * (has_label 0: none), from the manifest's "text" and "label" (a shard's .txt and .cls). */
    const char *text;
    int64_t label;
    int has_label;
    /* Added in 0.2: the sample's "meta" object as compact JSON (borrowed; NULL: none), from
     * the manifest's "meta" (a shard's .json member). */
    const char *meta;
} dh_sample_info;

DH_API int dh_manifest_sample(const dh_manifest *m, int64_t i, dh_sample_info *out);
DH_API int dh_manifest_media(const dh_manifest *m, int64_t i, int32_t j, dh_media_info *out);
/* Index of the sample with this id, or -1. */
DH_API int64_t dh_manifest_find(const dh_manifest *m, const char *id);

/* ------------------------------------------------------------------ spec */

/*
 * The preprocessing spec: what each modality is turned into. Parsed from
 * JSON (unknown keys are an error) or taken from a built-in workload.
 * See docs/SPEC.md for the format.
 */
typedef struct dh_spec dh_spec;

DH_API int dh_spec_parse(const char *json, size_t len, dh_spec **out, char *errbuf, size_t errlen);
DH_API int dh_spec_load(const char *path, dh_spec **out, char *errbuf, size_t errlen);
/* The spec of a built-in workload (names of docs/WORKLOADS.md), or "default". */
DH_API int dh_spec_builtin(const char *name, dh_spec **out);
/* NULL-terminated list of built-in spec names; static storage. */
DH_API const char *const *dh_spec_builtin_names(void);
DH_API void dh_spec_free(dh_spec *s);
/* A hash of what the spec means (its values, not its JSON spelling): agents and trainers
 * compare it to refuse a mismatch. 0 for NULL. */
DH_API uint64_t dh_spec_hash(const dh_spec *s);

/* ------------------------------------------------------------ derivation */

/*
 * What one media item becomes under a spec, derived from its descriptor
 * alone (nothing is decoded). shape is the output tensor, outermost first
 * (video: T,H,W,3 uint8; tiled image: tiles,H,W,3; audio: samples or
 * mel_bins,frames float32).
 */
typedef struct {
    int32_t ndim;
    int64_t shape[4];
    int32_t elem_bytes;
    int64_t out_bytes;
    int64_t latents;        /* visual/audio latents the encoder sees */
    int64_t tokens;         /* tokens contributed to the sequence */
    int64_t sampled_frames; /* video: frames kept; image: 1; audio: 0 */
    int64_t decoded_frames; /* video: frames the decoder must produce */
    int32_t seeks;          /* video: seeks to a keyframe (including the first) */
    int64_t decode_pixels;  /* source pixels decoded (after DCT-domain scaling) */
    int64_t resize_pixels;  /* output pixels produced by resize/convert */
    int32_t out_width, out_height;
} dh_media_derived;

typedef struct {
    int64_t tokens;         /* text + all media tokens */
    int64_t latents;        /* sum of media latents */
    int64_t out_bytes;      /* all output tensors, text ids as int32 */
    int64_t decoded_frames;
    int64_t decode_pixels;
    int32_t media_count;
} dh_sample_derived;

/* The largest output one media item may have (4 GiB): a spec whose frames, resize or tiles
 * would give more is DH_ELIMIT from dh_derive_media, not an allocation that fails later. */
#define DH_MAX_ITEM_BYTES (INT64_C(4) << 30)

DH_API int dh_derive_media(const dh_spec *spec, const dh_media_info *media, dh_media_derived *out);
/*
 * Derives every media item of sample i and the sample totals. per_media may be
 * NULL; otherwise it must hold media_count entries.
 */
DH_API int dh_derive_sample(const dh_spec *spec, const dh_manifest *m, int64_t i,
                            dh_sample_derived *out, dh_media_derived *per_media);

/*
 * Sampled frame indices of a video under the spec (ascending, at most cap
 * written). Returns the number of sampled frames, or a negative error.
 */
DH_API int64_t dh_video_sample_frames(const dh_spec *spec, const dh_media_info *media,
                                      int64_t *frames, int64_t cap);

/* ---------------------------------------------------- random augmentation */

/*
 * What a spec's random keys chose for one media item (docs/SPEC.md, "Random augmentation"):
 * a pure function of (seed, epoch, sample id, item index), drawn when the sample is planned,
 * so a resumed, re-planned or rebalanced run, or one at another world size, draws the same.
 * Every item has one: without random keys (or for the plain draw) each choice takes its
 * central value (clip centred, the resize mode's own crop, no flip), which is also what the
 * output shapes are derived from (a draw never changes a shape).
 */
typedef struct {
    int64_t first_frame, frame_span; /* video: sampled frames spread over [first, first+span) */
    double start_s;                  /* video: first_frame / fps; audio: the window's start */
    double span_s;                   /* video: frame_span / fps; audio: the window's length */
    int32_t crop_x, crop_y, crop_w, crop_h; /* video, image: the source pixels scaled to the
                                               output (the whole image for tiles) */
    int32_t flip;                    /* 1: the output is mirrored left to right */
} dh_media_draw;

/*
 * Adds the standard training augmentation to a spec in place (`--augment`; docs/SPEC.md):
 * a horizontal flip with probability 0.5 for video and images; a crop resize becomes a
 * random_resized_crop of the same output size (torchvision's ranges); uniform video
 * sampling takes its frames from a 4 s clip at a random start with 20% frame-rate jitter,
 * consecutive sampling starts its run at a random frame; fps sampling, other resize modes,
 * tiles' grid and audio stay as they are. A key the spec's own JSON gives (not its base's)
 * is never changed: "flip": 0 stays off. Output shapes stay as the spec derives them.
 */
DH_API int dh_spec_augment(dh_spec *spec);
/*
 * Turns a spec's random augmentation off in place (`--no-augment`: a validation stream beside
 * an augmented training one): every item takes its plain draw (the clip centred, the resize
 * mode's own crop, no flip), whatever random keys the spec or dh_spec_augment gave; output
 * shapes stay as they are, and dh_spec_is_random says 0. Added in 0.3.
 */
DH_API int dh_spec_plain(dh_spec *spec);
/* What a spec's random keys do, in one line for people ("off" without any), written to buf
 * (truncated to len): what `serve` and `inspect` print. */
DH_API void dh_spec_random_text(const dh_spec *spec, char *buf, size_t len);
/* 1 when the spec has a random key (a random clip start, frame-rate jitter, a random crop, a
 * flip, a random audio offset); 0 otherwise, and for NULL. */
DH_API int dh_spec_is_random(const dh_spec *spec);
/* The draw of item `item` of the sample with this id in this epoch of a job seeded `seed`. */
DH_API int dh_media_draw_of(const dh_spec *spec, const dh_media_info *media, uint64_t seed,
                            int64_t epoch, const char *sample_id, int32_t item,
                            dh_media_draw *out);
/* The plain draw: every random choice at its central value. */
DH_API int dh_media_draw_plain(const dh_spec *spec, const dh_media_info *media,
                               dh_media_draw *out);
/* dh_derive_media for one draw (NULL: the plain draw): the decode work follows the draw (a
 * clip behind a later keyframe seeks; a small crop lets JPEG decode at a smaller scale). */
DH_API int dh_derive_media_drawn(const dh_spec *spec, const dh_media_info *media,
                                 const dh_media_draw *draw, dh_media_derived *out);
/*
 * The source frame indices a video item's draw sampled, from the draw and the item's frame
 * count alone (its shape[0]): frame k is first_frame + floor((2k + 1) * frame_span /
 * (2 * count)), which is also consecutive sampling's first_frame + k. For a client that
 * has a batch's draws but not the spec or manifest. Returns count (at most cap written),
 * or DH_EINVAL.
 */
DH_API int64_t dh_draw_frames(const dh_media_draw *draw, int64_t count, int64_t *frames,
                              int64_t cap);
/* dh_video_sample_frames for one draw (NULL: the plain draw). */
DH_API int64_t dh_video_frames_drawn(const dh_spec *spec, const dh_media_info *media,
                                     const dh_media_draw *draw, int64_t *frames, int64_t cap);

/*
 * How a media item is prepared under the spec, for loaders outside the library that must
 * do the same work (the bench's PyTorch contender): the resize mode ("native", "fixed",
 * "crop" = cover then centre crop, "long_side", "bucket" = nearest-aspect bucket, cover,
 * crop; static strings) and, for any-res images, the tile grid (cols x rows of tiles of
 * the output size, 0 x 0 without tiling) and whether a base tile of the whole image comes
 * first; for audio, the rate it is resampled to and the log-mel spectrogram's bins and
 * frames per second (mel_bins 0: raw samples). Output sizes and frames come from
 * dh_derive_media and dh_video_sample_frames.
 */
typedef struct {
    const char *resize;
    int64_t tile_cols, tile_rows;
    int32_t base_tile;
    int32_t sample_rate, mel_bins, mel_fps;
} dh_media_recipe;
DH_API int dh_media_recipe_of(const dh_spec *spec, const dh_media_info *media,
                              dh_media_recipe *out);

/* --------------------------------------------------------------- sampler */

/*
 * The global sample order: a pure function of (manifest content hash, seed,
 * epoch). Global batch s of an epoch is a fixed set of G samples. With
 * drop_last the tail that does not fill a batch is dropped; otherwise the
 * epoch is padded to a multiple of G with samples from its beginning (as
 * PyTorch's DistributedSampler pads).
 */
typedef struct dh_sampler dh_sampler;

typedef struct {
    uint64_t manifest_hash;
    uint64_t seed;
    int64_t epoch;
    int64_t step; /* next batch within the epoch */
} dh_sampler_state;

typedef struct {
    int64_t global_batch; /* G >= 1 */
    uint64_t seed;
    int shuffle;   /* 0: manifest order */
    int drop_last; /* 1: drop the incomplete tail; 0: pad it */
} dh_sampler_opts;

DH_API int dh_sampler_new(const dh_manifest *m, const dh_sampler_opts *opts, dh_sampler **out);
DH_API void dh_sampler_free(dh_sampler *s);
DH_API int64_t dh_sampler_steps_per_epoch(const dh_sampler *s);
/*
 * Writes the G sample indices of the next global batch into out (cap >= G)
 * and advances; rolls over into the next epoch at the end of one.
 */
DH_API int dh_sampler_next(dh_sampler *s, int64_t *out, int64_t cap);
DH_API void dh_sampler_get_state(const dh_sampler *s, dh_sampler_state *st);
/* Fails with DH_EMISMATCH if the state belongs to another manifest or seed. */
DH_API int dh_sampler_set_state(dh_sampler *s, const dh_sampler_state *st);

/*
 * Predicted CPU seconds to prepare sample i on one worker, from its
 * descriptor and the spec (decode work, seeks, resize, audio), with the
 * uncalibrated constants of docs/WORKLOADS.md.
 */
DH_API int dh_sample_cpu_cost(const dh_spec *spec, const dh_manifest *m, int64_t i,
                              double *seconds);

/* ------------------------------------------------------------------ probe */

/*
 * Header-only probing of one media file: container/stream headers through
 * libavformat (video, audio), the TurboJPEG header reader (JPEG) and the IHDR
 * chunk (PNG). Pixels are never decoded. If a container has no frame index,
 * packets are scanned (demuxed, not decoded) to count frames and keyframes,
 * and scanned is set.
 */
typedef struct {
    dh_media_info info; /* path is the probed path; keyframes owned here */
    int scanned;
    char format[32];     /* container or image format name */
    char codec_name[32]; /* the decoder's codec name, also for codecs not in dh_codec */
    int64_t bytes_read;  /* added in 0.2: bytes the probe read from the file */
    char etag[128];      /* added in 0.2: an object's ETag (path http://, https://, s3://) */
} dh_probe_result;

DH_API int dh_probe_file(const char *path, const dh_limits *limits, dh_probe_result *out,
                         char *errbuf, size_t errlen);
DH_API void dh_probe_result_clear(dh_probe_result *r);

typedef struct {
    int threads;                /* 0: one per online CPU */
    dh_limits limits;
    dh_diag_cb diag;            /* one call per skipped file */
    void *diag_user;
    void (*progress)(int64_t done, int64_t total, void *user); /* may be NULL */
    void *progress_user;
    /* Added in 0.2: a shard member's suffix rules beyond the defaults (docs/MANIFEST.md),
     * "EXT=KIND[,EXT=KIND...]", KIND one of video, image, audio, text, label, meta, ignore;
     * they override the defaults. NULL: none. A malformed rule: DH_EINVAL. */
    const char *suffixes;
} dh_index_opts;

typedef struct {
    int64_t files;   /* regular files found (shards included) */
    int64_t probed;  /* loose files written to the manifest */
    int64_t skipped; /* loose files left out: probed + skipped + shards == files */
    int64_t scanned; /* probed by packet scan (no container index) */
    /* Added in 0.2: tar shards (files ending in .tar), the samples written from them and
     * those left out (a bad member costs its sample; an unreadable shard, all of its). */
    int64_t shards, shard_samples, shard_skipped;
    /* Added in 0.2: bytes read (tar headers, container headers, texts and labels) and the
     * bytes of the media they describe. */
    int64_t bytes_read, media_bytes;
    int64_t shards_unread; /* of shards: not read at all (compressed, not a tar, unopenable) */
    /* Added in 0.2: shard members whose suffix no rule knows (ignored; --suffix EXT=KIND
     * gives them a kind), and the first few of those suffixes, comma-separated. */
    int64_t members_ignored;
    char ignored_suffixes[64];
} dh_index_stats;

DH_API void dh_index_opts_default(dh_index_opts *opts);
/* Added in 0.2: 1 when a file name is a WebDataset shard's: .tar, or a compressed tar (.tar.gz,
 * .tgz, .tar.zst, .tar.bz2, .tar.xz), which index names as compressed. */
DH_API int dh_index_shard_name(const char *name);
/* Added in 0.2: checks suffix rules (dh_index_opts.suffixes): 0, or DH_EINVAL and why. */
DH_API int dh_index_suffixes_check(const char *rules, char *errbuf, size_t errlen);
/*
 * Walks dir recursively, probes every regular file in parallel and writes one
 * manifest line per probed file (one media item, id = path relative to dir)
 * to out_path, in sorted path order. Paths in the manifest are relative to
 * out_path's directory. The output file itself is never indexed. A file
 * ending in .tar is a WebDataset shard: one line per sample (its members
 * grouped by key, media probed in place as byte ranges, the .txt member its
 * text and the .cls member its label; id "SHARD:KEY"), docs/MANIFEST.md.
 */
DH_API int dh_index_dir(const char *dir, const char *out_path, const dh_index_opts *opts,
                        dh_index_stats *stats);
/*
 * Added in 0.2: the same for a list of files (tar shards, or media files), in the order
 * given, each of which must lie in out_path's directory or below it; one that does not, or
 * does not exist, is reported through opts->diag and counted as skipped.
 */
DH_API int dh_index_paths(const char *const *paths, size_t n, const char *out_path,
                          const dh_index_opts *opts, dh_index_stats *stats);
/*
 * Added in 0.2: the objects under an S3 prefix, to index. prefix: s3://BUCKET/ or
 * s3://BUCKET/PREFIX (every key that starts with PREFIX, at any depth, but keys ending in
 * '/'), listed with ListObjectsV2 page after page (store, region and credentials from the
 * environment: docs/STORAGE.md). *urls: s3:// URLs in the store's key order (*n of them;
 * none is not an error), freed with dh_store_list_free. 0, or an error code (DH_EINVAL:
 * the settings or the prefix; DH_EACCES, DH_ENOENT: refused, no such bucket; DH_EREMOTE)
 * with its sentence in err.
 */
DH_API int dh_store_list(const char *prefix, char ***urls, size_t *n, char *err,
                         size_t errlen);
DH_API void dh_store_list_free(char **urls, size_t n);

/* An object of a manifest that is not there, not readable, or not as indexed. */
typedef struct {
    const char *object;    /* its URL, without a query string or credentials */
    int64_t line;          /* the manifest line of the first sample that names it */
    const char *sample_id; /* that sample's id */
    int code;              /* DH_ENOENT, DH_EACCES, DH_ECORRUPT (changed), DH_EREMOTE, ... */
    const char *reason;    /* the sentence ("GET ...: HTTP 404 (no such object)") */
} dh_object_problem;
/*
 * Added in 0.2: asks the stores whether each object m names (http(s)://, s3://) is there,
 * readable and as indexed (its size; its ETag when pinned): one request per distinct
 * object (a shard's samples share it), 16 at a time, retried as reads are. Each object
 * that fails goes to on_bad (may be NULL) after all were asked, in manifest order;
 * progress (may be NULL) is called as objects are answered, one call at a time. Returns
 * the number of objects that failed (>= 0; *checked: the distinct objects asked), or a
 * negative code with its sentence in err when the store settings are wrong.
 */
DH_API int64_t dh_manifest_check_objects(const dh_manifest *m,
                                         void (*on_bad)(const dh_object_problem *p,
                                                        void *user),
                                         void *user,
                                         void (*progress)(int64_t done, int64_t total,
                                                          void *user),
                                         void *progress_user, int64_t *checked, char *err,
                                         size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* DATAHELIX_CATALOG_H */
