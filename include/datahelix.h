/*
 * datahelix.h - the public C API of DataHelix.
 *
 * DataHelix is a data plane for synchronous data-parallel training on video
 * and multimodal data. Everything starts from metadata descriptors: one per
 * sample, read from a JSON Lines manifest or probed from media headers. This
 * header exposes the descriptor catalog (manifest loading, the preprocessing
 * spec, per-sample derivation of shapes, tokens and decode work), the
 * deterministic sampler and header-only media probing.
 *
 * Conventions (docs/ARCHITECTURE.md, "How the C is written"):
 * - every public symbol starts with dh_ / DH_; handles are opaque;
 * - functions that can fail return 0 on success or a negative error code:
 *   either a negated errno (DH_EINVAL == -EINVAL) or a project code from the
 *   reserved range below; dh_strerror() and dh_err_name() describe both;
 * - ownership is stated above each function.
 */
#ifndef DATAHELIX_H
#define DATAHELIX_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DH_BUILDING_LIBRARY) && defined(__GNUC__)
#define DH_API __attribute__((visibility("default")))
#else
#define DH_API
#endif

#define DH_VERSION_MAJOR 0
#define DH_VERSION_MINOR 1
#define DH_VERSION_PATCH 0

/* ------------------------------------------------------------------ errors */

/*
 * One X-macro table generates the enum, dh_strerror() and dh_err_name().
 * Errno-backed codes keep the system's value; project codes live in
 * [-10999, -10000] so they never collide with errno.
 */
#define DH_ERRNO_MAP(XX)                                                                           \
    XX(EINVAL, -EINVAL, "invalid argument")                                                        \
    XX(ENOMEM, -ENOMEM, "out of memory")                                                           \
    XX(ENOENT, -ENOENT, "no such file or directory")                                               \
    XX(EACCES, -EACCES, "permission denied")                                                       \
    XX(EIO, -EIO, "input/output error")                                                            \
    XX(ERANGE, -ERANGE, "value out of range")                                                      \
    XX(EEXIST, -EEXIST, "already exists")                                                          \
    XX(ENOTDIR, -ENOTDIR, "not a directory")                                                       \
    XX(ECANCELED, -ECANCELED, "stopped before it completed")                                       \
    XX(EPARSE, -10000, "malformed input")                                                          \
    XX(ESCHEMA, -10001, "missing key or wrong type")                                               \
    XX(ELIMIT, -10002, "value over configured limit")                                              \
    XX(EDUP, -10003, "duplicate id")                                                               \
    XX(EPATH, -10004, "path escapes the manifest directory")                                       \
    XX(EDECODE, -10005, "decode failed")                                                           \
    XX(ECORRUPT, -10006, "corrupt or truncated media")                                             \
    XX(ENOTMEDIA, -10007, "not a media file")                                                      \
    XX(EUNSUPPORTED, -10008, "unsupported media or codec")                                         \
    XX(EMISMATCH, -10009, "state does not match this manifest")                                    \
    XX(EEMPTY, -10010, "nothing to do: empty input")

typedef enum {
#define DH_ERR_ENUM(name, value, text) DH_##name = (value),
    DH_ERRNO_MAP(DH_ERR_ENUM)
#undef DH_ERR_ENUM
} dh_errno;

/* Human-readable text for an error code; never NULL, static storage. */
DH_API const char *dh_strerror(int err);
/* Symbolic name ("DH_ELIMIT"); never NULL, static storage. */
DH_API const char *dh_err_name(int err);

DH_API const char *dh_version_string(void);
/* The version as a number: major * 10000 + minor * 100 + patch (0.1.0 is 100). */
#define DH_VERSION_NUMBER (DH_VERSION_MAJOR * 10000 + DH_VERSION_MINOR * 100 + DH_VERSION_PATCH)
DH_API int dh_version(void);

/*
 * Silences FFmpeg's log output process-wide (unless DH_FFMPEG_LOG is set in
 * the environment). The library never does this by itself, since the log
 * level belongs to the host process; the datahelix CLI calls it. Call it
 * before starting threads that use FFmpeg.
 */
DH_API void dh_quiet_ffmpeg_logs(void);

/* --------------------------------------------------------- media vocabulary */

typedef enum {
    DH_MEDIA_VIDEO = 0,
    DH_MEDIA_IMAGE = 1,
    DH_MEDIA_AUDIO = 2,
    DH_MEDIA_TYPE_COUNT
} dh_media_type;

typedef enum {
    DH_CODEC_OTHER = 0, /* a codec string we do not model; kept, costed generically */
    DH_CODEC_H264,
    DH_CODEC_HEVC,
    DH_CODEC_VP9,
    DH_CODEC_AV1,
    DH_CODEC_VP8,
    DH_CODEC_MPEG4,
    DH_CODEC_JPEG,
    DH_CODEC_PNG,
    DH_CODEC_FLAC,
    DH_CODEC_PCM,
    DH_CODEC_AAC,
    DH_CODEC_MP3,
    DH_CODEC_OPUS,
    DH_CODEC_VORBIS,
    DH_CODEC_COUNT
} dh_codec;

DH_API const char *dh_media_type_name(dh_media_type t);
/* Returns -1 for an unknown type name. */
DH_API int dh_media_type_from_name(const char *name);
DH_API const char *dh_codec_name(dh_codec c);
/* Unknown names (including NULL) map to DH_CODEC_OTHER. Aliases: h265, mjpeg... */
DH_API dh_codec dh_codec_from_name(const char *name);

/*
 * One media item of a sample, as described by the manifest or the prober.
 * Unknown numeric fields are 0. keyframes (frame indices, ascending) is
 * borrowed: valid as long as the object it came from.
 */
typedef struct {
    dh_media_type type;
    dh_codec codec;
    const char *path; /* relative to the manifest directory */
    int32_t width, height;
    double fps;
    int64_t frames;
    double duration_s;
    int32_t sample_rate;
    int32_t channels;
    int64_t bytes;
    const int32_t *keyframes;
    int32_t keyframe_count;
} dh_media_info;

/* --------------------------------------------------------------- limits */

/*
 * Upper bounds applied to untrusted sizes before anything is allocated or
 * derived from them. A value over a limit is a DH_ELIMIT error for that line.
 */
typedef struct {
    int64_t max_pixels;      /* width * height of one image or frame */
    int64_t max_frames;      /* frames of one video */
    double max_duration_s;   /* duration of one video or audio item */
    int64_t max_bytes;       /* bytes of one media file */
    int32_t max_media;       /* media items in one sample */
    int64_t max_text_tokens; /* text tokens of one sample */
    int32_t max_keyframes;   /* keyframe list length of one video */
    int64_t max_line_bytes;  /* length of one manifest line */
} dh_limits;

/* Fills sane defaults (16k x 16k pixels, 10M frames, 24 h, 1 TiB ...). */
DH_API void dh_limits_default(dh_limits *lim);

/* --------------------------------------------------------- diagnostics */

/*
 * A diagnostic about one line, sample or file. Strings are borrowed and valid
 * only during the callback.
 */
typedef struct {
    const char *file;      /* manifest or media file */
    int64_t line;          /* 1-based manifest line, 0 when not applicable */
    const char *sample_id; /* NULL when unknown (e.g. the line did not parse) */
    int code;              /* negative error code */
    const char *message;   /* full sentence: what is wrong and where */
} dh_diag;

typedef void (*dh_diag_cb)(const dh_diag *diag, void *user);

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
    int64_t text_tokens;
    int32_t media_count;
    double sim_cpu_ms;   /* ground truth for engines only; < 0 when absent */
    double sim_gpu_ms;
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
} dh_index_opts;

typedef struct {
    int64_t files;   /* regular files found */
    int64_t probed;  /* written to the manifest */
    int64_t skipped; /* probed + skipped == files */
    int64_t scanned; /* probed by packet scan (no container index) */
} dh_index_stats;

DH_API void dh_index_opts_default(dh_index_opts *opts);
/*
 * Walks dir recursively, probes every regular file in parallel and writes one
 * manifest line per probed file (one media item, id = path relative to dir)
 * to out_path, in sorted path order. Paths in the manifest are relative to
 * out_path's directory. The output file itself is never indexed.
 */
DH_API int dh_index_dir(const char *dir, const char *out_path, const dh_index_opts *opts,
                        dh_index_stats *stats);

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

/* The workload's default global batch, or a negative error. */
DH_API int64_t dh_workload_global_batch(const char *name);

/* ------------------------------------------------------------------ runs */

struct dh_batch_item; /* an item of a prepared batch (real engine, below) */

/*
 * One run of a policy over a manifest, in the simulator (engine "sim") or
 * the real engine ("real"). Zero fields take defaults: global_batch from the
 * workload (or 64), steps = one epoch of complete batches, memory_budget =
 * what the DataLoader baseline holds (2 batches per worker).
 */
typedef struct {
    const char *workload;    /* built-in workload (spec, GPU model, rho); NULL with a manifest */
    const dh_manifest *manifest; /* run these samples; NULL: generate the workload */
    const dh_spec *spec;     /* overrides the workload's spec; may be NULL */
    const char *policy;      /* local | pool | helix | helix-nobalance | helix-fifo | helix-noreb */
    int ranks, workers;
    int64_t global_batch;
    int64_t steps;
    uint64_t seed;
    int64_t memory_budget;   /* bytes of prepared + in-preparation batches */
    double rho;              /* 0: the workload's load factor (1.0 for a plain manifest) */
    double cpu_cost_scale;   /* measured / predicted CPU cost on this machine; 0: 1 */
    /* Stress: this fraction of samples (seeded) truly carries `understate_factor` x the
     * tokens and latents their descriptors say; policies still see the descriptors. */
    double understate_fraction, understate_factor;
    int understate_told; /* the same heavier samples, but described truthfully (the reference) */
    int nodes;               /* ranks and workers split evenly over nodes; 0: 1 */
    double net_bandwidth;    /* bytes/s between nodes; 0: 100 Gb/s */
    double net_latency;      /* seconds per transfer between nodes; 0: 20 us */
    double cpu_noise_sigma;  /* log-normal sigma of CPU truth around the model; 0: 0.25 */
    /* Stress: this fraction of samples truly costs cpu_heavy_factor x its predicted CPU. */
    double cpu_heavy_fraction, cpu_heavy_factor;
    int64_t rank_token_cap;  /* helix placement: tokens per rank per step; 0: none */
    int64_t rank_byte_cap;   /* helix placement: output bytes per rank per step; 0: none */
    const char *trace_path;  /* Chrome trace (Perfetto) of the run, or NULL */
    /* Real engine: called after each completed step (from a rank thread); may be NULL. */
    void (*progress)(int64_t step_done, int64_t steps, void *user);
    void *progress_user;
    /* bytes/s of handing a prepared sample to another rank of the same node (rebalancing's
     * transfer cost); 0: 20 GB/s, a shared-memory copy */
    double move_bandwidth;
    /*
     * Real engine: the exact GPU seconds of a prepared sample, read from its decoded items
     * (what the model really sees, e.g. tokens after dropping padding), or < 0 if unknown.
     * Called once per prepared sample, from the worker thread that completes it, with the
     * engine's lock held: keep it cheap. NULL: the emulated ranks' per-sample time.
     * Rebalancing (helix) moves prepared samples between the ranks of a step on these costs.
     */
    double (*sample_gpu_cost)(int64_t sample, const struct dh_batch_item *items, int32_t nitems,
                              const uint8_t *data, void *user);
    void *sample_gpu_cost_user;
    /*
     * Run length (with `steps` above): steps > 0 runs that many global batches; steps ==
     * DH_STEPS_FOREVER goes on epoch after epoch until stopped (dh_engine_stop, or
     * should_stop); steps == 0 runs `epochs` whole epochs (0: one epoch; a workload run
     * without a manifest: 200 steps).
     */
    int64_t epochs;
    /* Polled once per step by both engines (from an engine thread): nonzero ends the run
     * after the steps in flight, with the accounting of what was done. May be NULL. */
    int (*should_stop)(void *user);
    void *should_stop_user;
    /* Samples a workload run generates (its dataset; epochs go round it); 0: the samples
     * of min(steps, 1000) global batches (200 batches when steps is 0). */
    int64_t workload_samples;
} dh_run_config;

/* steps value of a run that goes on until it is stopped. */
#define DH_STEPS_FOREVER (-1)

DH_API void dh_run_config_default(dh_run_config *cfg);
DH_API const char *const *dh_policy_names(void); /* NULL-terminated, static */

/* The docs/DESIGN.md result contract: every metric of one run. */
typedef struct {
    char workload[64], policy[32], engine[8];
    int ranks, workers;
    int64_t steps, samples, delivered, failed;
    double makespan_s, throughput_sps, bound_s, efficiency, miss_rate;
    double fill_wait_ms, wait_mean_ms, wait_p50_ms, wait_p95_ms, wait_p99_ms, gpu_idle_frac;
    double cpu_mape, gpu_mape; /* running prediction error of the calibrated models */
    double bound_gpu_s, bound_cpu_s; /* the two terms of the bound */
    /* sum over steps of o + the slowest rank's true compute under the chosen placement:
     * the makespan with zero input wait. bound <= placement <= makespan splits the loss
     * into placement (integrality, prediction error) and input wait (scheduling). */
    double placement_s;
    int64_t memory_budget, memory_peak;
    int64_t cap_violations; /* samples placed over a per-rank cap no rank could meet */
    double framework_overhead; /* real engine: worker CPU not spent decoding, as a fraction */
    /* collective rebalancing (helix): candidate moves, applied, refused by the gate */
    int64_t reb_considered, reb_moved, reb_gated, reb_bytes;
    double reb_predicted_gain_s, reb_realised_gain_s;
    /* CPU readiness across nodes: remote late samples considered, prepared elsewhere, gated */
    int64_t lend_considered, lent, lend_gated, bytes_shipped;
    double wall_s; /* time the simulator itself took */
    /* moves of plans that passed the gate but were not carried out (a per-rank cap, or the
     * real engine had no buffer room to receive them) */
    int64_t reb_refused;
    /* real engine: seconds spent moving decoded data for rebalancing, and the gate's
     * calibrated transfer cost (measured / modelled; 1 in the simulator) */
    double reb_move_s, reb_move_factor;
    /* of the input wait (steps >= 1), the fraction a single task explains: the batch's
     * longest task (or split part), started when its step's first task did, would still
     * end that late, so no placement or lending hides it (only finer splitting could) */
    double wait_single_frac;
} dh_result;

/* Runs cfg in the discrete-event simulator. */
DH_API int dh_sim_run(const dh_run_config *cfg, dh_result *out, char *errbuf, size_t errlen);
/* Writes one result as a JSON object (no trailing newline). */
DH_API int dh_result_write_json(const dh_result *r, void *file /* FILE * */);

/* ------------------------------------------------------------ real engine */

/*
 * One prepared batch of rank r for step s: a contiguous buffer whose layout
 * was fixed from the descriptors before decoding (and laid out afresh if
 * rebalancing moved prepared samples in or out before the step began). Each media item of each
 * sample has its slot (64-byte aligned, packed, not padded); a sample that
 * failed has status < 0 on its items and zero-filled slots, and is counted
 * in nfailed. Valid until dh_engine_release().
 */
typedef struct dh_batch_item {
    int64_t sample;      /* index in the manifest */
    int32_t media;       /* media item within the sample */
    int32_t type;        /* dh_media_type */
    int32_t ndim;
    int32_t elem_bytes;  /* 1: uint8, 4: float32 */
    int64_t shape[4];
    int64_t offset;      /* from data */
    int64_t bytes;
    int32_t status;      /* 0, or the negative error code of its sample */
} dh_batch_item;

typedef struct {
    int64_t step;
    int32_t rank;
    int32_t nsamples, nitems, nfailed;
    const int64_t *samples;       /* manifest indices, nsamples */
    const int64_t *tokens;        /* tokens per sample (text + media), nsamples */
    const dh_batch_item *items;   /* nitems, grouped by sample */
    const uint8_t *data;
    int64_t bytes;
} dh_batch;

/* A per-sample failure: which sample and file, and why. Strings static per engine. */
typedef struct {
    int64_t step;
    int32_t rank;
    int64_t sample;
    const char *id;
    const char *path;
    int code;
    const char *message;
} dh_sample_error;

typedef void (*dh_sample_error_cb)(const dh_sample_error *e, void *user);

/*
 * The engine as a service for real consumers: start it, then each rank's
 * consumer calls dh_engine_next_batch (blocks until its next batch is
 * ready; DH_EEMPTY after the last step) and dh_engine_release when its step
 * is done (gpu_seconds: the compute time it observed, or < 0 if unknown).
 * dh_engine_finish waits for the workers and fills the result.
 */
typedef struct dh_engine dh_engine;

DH_API int dh_engine_start(const dh_run_config *cfg, dh_sample_error_cb on_error, void *user,
                           dh_engine **out, char *errbuf, size_t errlen);
DH_API int dh_engine_next_batch(dh_engine *e, int rank, dh_batch *out);
DH_API void dh_engine_release(dh_engine *e, const dh_batch *b, double gpu_seconds);
/*
 * Stops the run: workers finish their current task and exit, every consumer
 * blocked in dh_engine_next_batch returns DH_ECANCELED (a batch that is
 * already complete may still be taken). Safe from any thread, and from a
 * progress or should_stop callback; not from a signal handler (set a flag
 * that should_stop reads instead). Then call dh_engine_finish.
 */
DH_API void dh_engine_stop(dh_engine *e);
DH_API int dh_engine_finish(dh_engine *e, dh_result *out);
DH_API void dh_engine_free(dh_engine *e);
/*
 * Decodes the first `count` samples of m under spec on this thread and
 * returns measured / predicted CPU time in *scale: the factor that brings
 * docs/WORKLOADS.md's starting constants to this machine.
 */
DH_API int dh_measure_cpu_scale(const dh_manifest *m, const dh_spec *spec, int64_t count,
                                double *scale, char *errbuf, size_t errlen);

/* The true GPU seconds of a batch (the emulated ranks sleep this long). */
DH_API double dh_engine_batch_gpu_seconds(const dh_engine *e, const dh_batch *b);

/*
 * Runs cfg on the real engine: W decoding threads on this machine feeding R
 * emulated ranks that sleep each batch's ground-truth GPU time (the
 * workload's model, or sim.gpu_ms) and meet at a barrier per step. cfg must
 * carry a manifest of real media. Per-sample failures go to on_error (may
 * be NULL) and are counted: delivered + failed = samples.
 */
DH_API int dh_engine_run(const dh_run_config *cfg, dh_sample_error_cb on_error, void *user,
                         dh_result *out, char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* DATAHELIX_H */
