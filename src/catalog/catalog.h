/*
 * catalog.h - the descriptor table's layout, shared by the catalog modules
 * (manifest loading, derivation, sampler).
 *
 * DESIGN: the table is a struct of arrays. A sample costs a few fixed-width
 * fields; its media items live out of line in per-media arrays, and variable
 * data (ids, paths, keyframe lists) lives in two pools addressed by 32-bit
 * offsets. This keeps a one-media sample near 110 bytes in total, so a
 * million-sample manifest fits comfortably in memory and scans fast. Rows are
 * only appended after a line is fully validated, so a rejected line never
 * leaves partial state behind.
 */
#ifndef DH_CATALOG_H
#define DH_CATALOG_H

#include "../core/core.h"

#define DH__NO_STR UINT32_MAX      /* a string column's "absent" */
#define DH__NO_LABEL INT64_MIN     /* the label column's "absent" */

struct dh_manifest {
    char *dir; /* directory media paths are relative to; "" for cwd */
    dh_limits limits;
    int check_files;
    uint64_t hash;

    /* samples */
    int64_t n;
    size_t cap;
    uint32_t *id_off;
    uint32_t *line;
    int32_t *text_tokens;
    uint32_t *media_first;
    uint16_t *media_count;
    float *sim_cpu_ms; /* < 0: absent */
    float *sim_gpu_ms;
    uint32_t *text_off; /* DH__NO_STR: none */
    uint32_t *meta_off; /* DH__NO_STR: none */
    int64_t *label;     /* DH__NO_LABEL: none */

    /* media items */
    int64_t nm;
    size_t mcap;
    uint8_t *m_type;
    uint8_t *m_codec;
    uint8_t *m_channels;
    uint32_t *m_path_off;
    int32_t *m_width, *m_height;
    float *m_fps;
    int32_t *m_frames;
    float *m_duration;
    int32_t *m_rate;
    int64_t *m_bytes;
    uint32_t *m_kf_off, *m_kf_count;
    int64_t *m_offset;       /* > 0: a byte range of the file (a tar member) */
    uint32_t *m_member_off;  /* DH__NO_STR: none */
    uint32_t *m_etag_off;    /* an object's ETag pinned at index; DH__NO_STR: none */
    int64_t *m_file_bytes;   /* a range's whole file size when indexed (0: not pinned) */

    /* pools */
    int32_t *kf;
    size_t nkf, kfcap;
    char *str;
    size_t nstr, strcap;

    /* scratch document of the line being parsed (jsonlite.h); not thread-safe */
    struct jv_doc_s *doc;

    /* id -> sample index + 1 in the low 32 bits (0 = empty), the id's 32-bit hash in the high
     * ones (a probe compares ids only when the hashes match, and a resize needs no id);
     * open addressing, power-of-two size. It covers rows [0, idx_rows): while the ids came
     * ascending (ids_unordered 0) the rest need no index (manifest_table.c) */
    uint64_t *idx;
    size_t idx_cap;
    int64_t idx_rows;
    int ids_unordered;
};

/* ------------------------------------------------------------------ spec */

typedef enum {
    DH_RESIZE_NATIVE = 0, /* keep source size */
    DH_RESIZE_FIXED,      /* stretch to width x height */
    DH_RESIZE_CROP,       /* scale to cover width x height, centre crop */
    DH_RESIZE_LONG_SIDE,  /* cap the long side, round both sides to a multiple */
    DH_RESIZE_BUCKET,     /* nearest-aspect bucket, then cover + crop */
    DH_RESIZE_RANDOM_RESIZED_CROP, /* a random area and aspect, scaled to width x height */
    DH_RESIZE_RANDOM_CROP /* short side scaled to a random length, then a random crop */
} dh__resize_mode;

#define DH_MAX_BUCKETS 16

typedef struct {
    dh__resize_mode mode;
    int32_t width, height;  /* FIXED, CROP */
    int32_t max_side;       /* LONG_SIDE */
    int32_t multiple;       /* LONG_SIDE: both sides rounded to this */
    int32_t nbuckets;       /* BUCKET: (height, width) pairs */
    int32_t buckets[DH_MAX_BUCKETS][2];
} dh__resize;

/* The random keys of a visual section (docs/SPEC.md, "Random augmentation"). */
typedef struct {
    double scale[2], ratio[2]; /* random_resized_crop: area fraction, aspect (w / h) ranges */
    int32_t short_side[2];     /* random_crop: the short side drawn in [lo, hi] px (0: cover) */
    double flip;               /* probability of a horizontal flip */
} dh__augment;

typedef enum { DH_SAMPLE_UNIFORM = 0, DH_SAMPLE_FPS, DH_SAMPLE_CONSECUTIVE } dh__sampling;

/* Keys a spec's own JSON gave (not its base's): --augment never overrides them. */
enum { DH__GIVEN_VRESIZE = 1, DH__GIVEN_VFLIP = 2, DH__GIVEN_CLIP = 4, DH__GIVEN_START = 8,
       DH__GIVEN_JITTER = 16, DH__GIVEN_IRESIZE = 32, DH__GIVEN_IFLIP = 64 };

struct dh_spec {
    uint32_t given; /* DH__GIVEN_*: not part of what the spec means (not hashed) */
    int plain;      /* dh_spec_plain: every item takes its plain draw, random keys or not */
    struct {
        dh__sampling sampling;
        int64_t frames;     /* UNIFORM, CONSECUTIVE: count */
        double fps;         /* FPS: target rate */
        int64_t max_frames; /* FPS: cap */
        double start_s, end_s; /* temporal range; end_s <= 0: to the end */
        dh__resize resize;
        int32_t patch, temporal_patch, pool;
        int32_t vae_temporal, vae_spatial; /* > 0: VAE latents instead of patches */
        double clip_s;        /* > 0: frames come from a clip this long within the range */
        int32_t random_start; /* the clip (or consecutive run) starts at a random frame */
        double fps_jitter;    /* the clip's span scaled by a factor in [1 - j, 1 + j] */
        dh__augment aug;
    } video;
    struct {
        dh__resize resize;
        int32_t patch, pool;
        int32_t tile_size, max_tiles, base_tile; /* tile_size > 0: any-res tiling */
        dh__augment aug;
    } image;
    struct {
        int32_t sample_rate;
        int32_t mel_bins;  /* 0: raw PCM output */
        int32_t mel_fps;
        double tokens_per_s;
        double clip_s;         /* > 0: a window this long (the whole item when shorter) */
        int32_t random_offset; /* the window starts at a random time */
    } audio;
    struct {
        int64_t max_tokens; /* 0: no cap */
        /* A text without "text_tokens" counts ceil(bytes / bytes_per_token) tokens, or with
         * tokens_per_word > 0, ceil(whitespace-separated words x tokens_per_word). */
        double bytes_per_token, tokens_per_word;
    } text;
};

/* A source rectangle (pixels). */
typedef struct {
    int x, y, w, h;
} dh__rect;

/* The crop of a w x h source for an output of ow x oh covering it (centre, even offsets). */
dh__rect dh__cover_crop(int w, int h, int ow, int oh);

/* The draw numbers of each random choice (draw.c's n): fixed, since they are part of what a
 * job means. */
enum { DH__DRAW_START = 0, DH__DRAW_JITTER = 1, DH__DRAW_FLIP = 2, DH__DRAW_SHORT = 3,
       DH__DRAW_CROP_X = 4, DH__DRAW_CROP_Y = 5, DH__DRAW_RRC = 8 /* 4 per attempt, 10 tries */ };

/* A copy of a spec (free with dh_spec_free), or NULL when out of memory. */
dh_spec *dh__spec_dup(const dh_spec *s);

/* Tokens of a text by the spec's text section (a manifest without "text_tokens"); 0: NULL. */
int64_t dh__text_tokens(const dh_spec *spec, const char *text);
/* Any-res tiling of a w x h image: the grid (cols x rows) before the base tile. */
void dh__image_grid(const dh_spec *s, int64_t w, int64_t h, int64_t *cols, int64_t *rows);
/* JPEG DCT-domain scale M (of M/8) the decoder uses for a w x h source (draw: a random
 * crop's rectangle; NULL: the plain one). */
int dh__jpeg_scale_m(const dh_spec *s, int64_t w, int64_t h, const dh_media_draw *draw);
/* Output size (ow x oh) of a resize of a w x h source, and the intermediate (iw x ih) it is
 * scaled to before a crop. */
void dh__resize_dims(const dh__resize *r, int64_t w, int64_t h, int64_t *ow, int64_t *oh,
                     int64_t *iw, int64_t *ih);

/* What went wrong on one line; callers choose how to phrase the prefix. */
typedef struct {
    int code;
    char id[128]; /* sample id when it was read before the error, else "" */
    char reason[384];
} dh__line_error;

/*
 * Shifts the batches of the sampler's current epoch by `shift` sample positions (batch s
 * covers positions s * G + shift ...), until the epoch ends: a job resumed at another global
 * batch goes on at the first sample the interrupted one had not consumed. The epoch's last
 * batch must still fit (drop_last) or start inside it (keep_last). 0 or DH_EINVAL.
 */
int dh__sampler_shift(dh_sampler *s, int64_t shift);

/*
 * The uniform order carries bytes[i] with sample i (a replica's class of cost, the deal's
 * input), so that each dh_sampler_next gives the drawn samples' bytes in step order too
 * (dh__sampler_drawn_bytes): the same order, each byte in the top of its sample's 4-byte
 * entry, moved by the shuffle with it. bytes: n entries, read as each epoch's permutation
 * is filled, so valid while the sampler draws; NULL: carried no more. 0; DH_ERANGE past
 * 2^24 samples (an index keeps 24 bits), DH_EINVAL for a stratified sampler, DH_ENOMEM.
 * A carrying sampler is not stratified (dh__sampler_stratify: DH_EINVAL).
 */
int dh__sampler_carry(dh_sampler *s, const uint8_t *bytes);
/* The last step's carried bytes, global_batch of them in the step's order; NULL without
 * dh__sampler_carry. */
const uint8_t *dh__sampler_drawn_bytes(const dh_sampler *s);

/*
 * A stratified epoch order whose node shares are found alone (strata.c; issue 25's per-node
 * control plane: the sampler's stratified mode below, `--order stratified`). cls[i]: sample
 * i's class of predicted cost, in [0, classes), 0 the heaviest; n < 2^31; classes at most
 * DH__STRATA_MAX; key: the job's (manifest hash and seed), for the rotations of node
 * shares. Each class is in id order until dh__strata_use gives an epoch's order. 0,
 * DH_EINVAL or DH_ENOMEM; free with dh__strata_free. Not thread-safe.
 */
#define DH__STRATA_MAX 1024
typedef struct dh__strata dh__strata;
int dh__strata_new(const uint16_t *cls, int64_t n, int classes, uint64_t key, dh__strata **out);
void dh__strata_free(dh__strata *t);
/* The samples class by class, by id within a class (n entries; class c's at [first[c],
 * first[c + 1]), first: classes + 1 entries): where an epoch's order of each class starts. */
const uint32_t *dh__strata_ids(const dh__strata *t, const int64_t **first);
/* The epoch's order of each class from now on (n entries laid out as dh__strata_ids, each
 * class's own samples permuted; kept by the caller while it is used); NULL: id order. */
void dh__strata_use(dh__strata *t, const uint32_t *order);
int64_t dh__strata_class_size(const dh__strata *t, int c);
/* cnt[c] (classes entries): how many of class c the first h positions of an epoch hold. */
void dh__strata_counts(const dh__strata *t, int64_t h, int64_t *cnt);
/* Positions [h0, h0 + G) of epoch `epoch` (wrapping to its start), class by class, heaviest
 * first: G sample indices into out. 0 <= h0 < n, 1 <= G <= n; 0 or DH_EINVAL. */
int dh__strata_step(dh__strata *t, int64_t epoch, int64_t h0, int64_t G, int64_t *out);
/* Node `node` of `nodes`' share of that step, found without the rest of it: one sample of
 * every run of `nodes` of the step laid out (run r's in out[r]), G / nodes in all; the
 * nodes' shares partition the step. `nodes` must divide G; 0 or DH_EINVAL. */
int dh__strata_share(dh__strata *t, int64_t epoch, int64_t h0, int64_t G, int nodes, int node,
                     int64_t *out);
/* The whole step laid out node by node: node k's share (as dh__strata_share gives it) at
 * out[k G / nodes, (k + 1) G / nodes). `nodes` must divide G; 0 or DH_EINVAL. */
int dh__strata_step_by_node(dh__strata *t, int64_t epoch, int64_t h0, int64_t G, int nodes,
                            int64_t *out);

/*
 * Makes the sampler's order the stratified one over these classes (cls: n entries, as
 * dh__strata_new; each class in its own Fisher-Yates order, keyed by the manifest's hash,
 * the seed and the epoch as the uniform order is): dh_sampler_next then gives each step
 * laid out class by class, the state, resume and shift as before (positions of the
 * stratified epoch). A step that passes the epoch's end (keep_last) repeats the epoch's
 * first positions inside their classes, not at the step's end. 0, DH_EINVAL, DH_ERANGE (a
 * global batch larger than the dataset) or DH_ENOMEM (the order unchanged). The run's
 * `--order stratified` (run.c).
 */
int dh__sampler_stratify(dh_sampler *s, const uint16_t *cls, int classes);
/* Node `node` of `nodes`' share of the next step of a stratified sampler (dh__strata_share:
 * G / nodes samples), the sampler moving on a step as dh_sampler_next does; DH_EINVAL
 * without dh__sampler_stratify or when `nodes` does not divide G. */
int dh__sampler_next_share(dh_sampler *s, int nodes, int node, int64_t *out);
/* The next step of a stratified sampler laid out node by node (dh__strata_step_by_node: node
 * k's share in the k-th block of G / nodes), the sampler moving on a step. */
int dh__sampler_next_by_node(dh_sampler *s, int nodes, int64_t *out);

/* A media item's size as stored: its "bytes", else an estimate from its descriptor (the
 * simulator's fetch model): video at 0.1 bit per pixel per frame (H.264 at common rates),
 * JPEG at 2 bits per pixel and PNG at 12, audio at 10 bits per sample (FLAC). */
int64_t dh__stored_bytes(const dh_media_info *mi);

/*
 * A sample built in memory rather than read from a line (the built-in workloads): the
 * fields a line would give, checked by the same rules (ranges, timing, keyframes, path, a
 * unique id) and committed the same way, so the row and the manifest's hash are those of
 * the equivalent line. Values are as stored: a real the line would round (an audio
 * duration of 3 decimals) must be given rounded.
 */
typedef struct {
    dh_media_type type;
    dh_codec codec;
    const char *path;
    int64_t width, height, frames, rate, channels; /* 0: absent */
    double fps, duration;                          /* 0: absent */
    const int64_t *keyframes;                      /* video: ascending frame numbers */
    size_t nkeyframes;
} dh__built_media;

typedef struct {
    const char *id;
    int64_t text_tokens;
    int nmedia;
    const dh__built_media *media;
} dh__built_sample;

/* Room for this many more samples, media items and bytes of strings (ids, paths), so that a
 * table of known size is not copied as it grows; 0 or DH_ENOMEM. */
int dh__manifest_reserve(dh_manifest *m, int64_t samples, int64_t media, int64_t str_bytes);
/* Where the table's columns lie now, for a thread that makes their pages present ahead of the
 * commits (dh__populate): up to max spans, each a column's base, its bytes a row and the rows
 * reserved (a sample's columns and a media item's). Not the string pool: how much of its
 * reservation is used is not known ahead (populating all of it raised a large simulation's
 * peak RSS by 27 MiB). Valid until a commit outgrows a reservation (then a span is stale:
 * populating it is wasted, not wrong). Returns the number of spans. */
typedef struct {
    const void *base;
    size_t elem, rows;
} dh__manifest_span;
int dh__manifest_spans(const dh_manifest *m, dh__manifest_span *out, int max);
/* Appends b as line lineno; 0, or an error phrased as dh_manifest_parse_line's (then nothing
 * changed). */
int dh__manifest_add_built(dh_manifest *m, const dh__built_sample *b, int64_t lineno,
                           char *errbuf, size_t errlen);

/* dh_manifest_parse_line with the error kept structured. */
int dh__manifest_parse_line(dh_manifest *m, const char *line, size_t len, int64_t lineno,
                            dh__line_error *e);

static inline const char *dh__str(const dh_manifest *m, uint32_t off)
{
    return m->str + off;
}

/* Sample i's `sim` truth (ms; < 0: absent), as dh_manifest_sample gives it, without filling
 * the rest of its record: the truth's passes read these alone, four a sample. */
static inline double dh__manifest_sim_cpu_ms(const dh_manifest *m, int64_t i)
{
    return m->sim_cpu_ms[i];
}

static inline double dh__manifest_sim_gpu_ms(const dh_manifest *m, int64_t i)
{
    return m->sim_gpu_ms[i];
}

#endif
