/*
 * cost.h - CPU and GPU cost models, the per-sample cost table, online
 * calibration (internal).
 *
 * DESIGN: this module holds predictions only (cpu_pred, GPU features and
 * the calibrated GPU model): what a policy may read. Ground truth (the
 * manifest's `sim` fields, or the models times seeded noise) and the stress
 * injectors live in src/truth, which only the engines include.
 */
#ifndef DH_COST_H
#define DH_COST_H

#include "../core/core.h"

#include <string.h>

/* Seconds to prepare media on one worker, from descriptor-derived work. */
typedef struct {
    double open_s;      /* container open, per video/audio item */
    double image_open_s;
    double seek_s;      /* per seek to a keyframe */
    double decode_ns_per_px[DH_CODEC_COUNT];
    double resize_ns_per_px;
    double audio_s_per_s; /* decode + log-mel per second of audio */
} dh__cpu_model;

void dh__cpu_model_default(dh__cpu_model *m);
double dh__cpu_media_cost(const dh__cpu_model *m, const dh_media_info *mi,
                          const dh_media_derived *md);

/* gpu(B) = c0 + sum_i [a_llm T_i + b_llm T_i^2 + sum_m (a_enc V_m + b_enc V_m^2)] (seconds). */
typedef struct {
    double a_llm, b_llm, a_enc, b_enc, c0;
} dh__gpu_model;

typedef struct {
    float t, v;   /* tokens; latents summed over media */
    float t2, v2; /* T^2; sum over media of V_m^2 */
} dh__gpu_feat;

static inline double dh__gpu_sample_cost(const dh__gpu_model *g, const dh__gpu_feat *f)
{
    return g->a_llm * f->t + g->b_llm * f->t2 + g->a_enc * f->v + g->b_enc * f->v2;
}

/* A cost's half-octave: its binary exponent and first mantissa bit (two a factor of two,
 * increasing with the cost; exact, so every node computes the same); 0 for none (x <= 0).
 * Classes of cost (the deal of a step to nodes, a stratified order) count half-octaves
 * below the heaviest. */
static inline uint64_t dh__cost_half_octave(double x)
{
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return x > 0 ? u >> 51 : 0; /* positive: below 2^12 */
}

/* The class of a cost of half-octave h among `classes` classes counted down from the
 * heaviest's half-octave (top >= h): top - h, and the last class for anything lighter and for
 * no cost (h 0). One definition for the deal of a step to nodes, a stratified order's classes
 * and a replica's table of them (selects, not branches: the classes come at random). */
static inline uint64_t dh__cost_class(uint64_t h, uint64_t top, uint64_t classes)
{
    uint64_t c = top - h < classes - 1 ? top - h : classes - 1;
    return h ? c : classes - 1;
}

/* Cost classes for calibration: what dominates a sample's preparation. */
enum { DH_CLS_VIDEO_H264, DH_CLS_VIDEO_OTHER, DH_CLS_JPEG, DH_CLS_IMAGE_OTHER, DH_CLS_AUDIO,
       DH_CLS_TEXT, DH_CLS_COUNT };

/*
 * One sample's predictions that planning reads for every drawn sample, packed in one
 * 32-byte row (rows are 32-byte aligned, so one cache line): a drawn sample is a random
 * read in a table larger than the caches, one miss instead of four (bench/RESULTS.md,
 * "One row a sample").
 */
typedef struct {
    dh__gpu_feat feat; /* GPU features */
    int64_t bytes;     /* output bytes */
    float cpu_pred;    /* seconds, uncalibrated model */
    uint8_t cls;       /* DH_CLS_* */
} dh__sample_row;
_Static_assert(sizeof(dh__sample_row) == 32, "a sample's row is one aligned half cache line");

/* The per-sample prediction table every policy and engine works from. */
typedef struct {
    int64_t n;
    dh__sample_row *row; /* 32-byte aligned */
    int32_t *segments;   /* independently decodable keyframe segments (>= 1) */
    int64_t *tokens;     /* total tokens (text + media) */
} dh__samples;

/* Builds the prediction table for every sample of m under spec. */
int dh__samples_build(const dh_manifest *m, const dh_spec *spec, const dh__cpu_model *cpu,
                      dh__samples *out, char *err, size_t errlen);
void dh__samples_free(dh__samples *s);
/* Sample i's predicted CPU seconds as random augmentation drew it in this epoch (a clip
 * behind a later keyframe seeks, a small crop decodes a JPEG at a smaller scale); without
 * random keys, the table's prediction. */
int dh__cpu_drawn_cost(const dh__cpu_model *cpu, const dh_spec *spec, const dh_manifest *m,
                       int64_t i, uint64_t seed, int64_t epoch, double *seconds);

/*
 * Scales a GPU model's shape so that the load factor
 * rho = (mean CPU work of a global batch / W) / (mean balanced GPU step time)
 * holds for this table; c0 becomes 5% of the balanced step.
 */
void dh__gpu_scale_for_rho(dh__gpu_model *g, const dh__samples *s, int ranks, int workers,
                           int64_t global_batch, double rho);

/* Each sample's class of predicted GPU cost for a stratified order (dh__sampler_stratify):
 * class c holds the costs c half-octaves (dh__cost_half_octave) below the heaviest, the
 * last class what is lighter and zero costs. cls: s->n entries; classes in [1, 65536]. */
void dh__gpu_classes(const dh__gpu_model *g, const dh__samples *s, int classes, uint16_t *cls);

/* Standard log-normal multiplier with mean 1, deterministic in (seed, i, stream). */
double dh__lognormal_noise(uint64_t seed, int64_t i, uint64_t stream, double sigma);

/*
 * Online calibration. CPU: per class, an EWMA of log(measured / predicted)
 * corrects later predictions of that class. GPU: one EWMA factor of observed
 * over predicted compute windows. Both keep the running mean absolute
 * percentage error of the predictions they were asked for.
 */
typedef struct {
    double cpu_log_ratio[DH_CLS_COUNT];
    double cpu_scale[DH_CLS_COUNT]; /* exp(cpu_log_ratio), set with it: read per task */
    int64_t cpu_n[DH_CLS_COUNT];
    double cpu_ape_sum;
    int64_t cpu_ape_n;
    double gpu_factor;
    int64_t gpu_n;
    double gpu_ape_sum;
    int64_t gpu_ape_n;
} dh__calib;

void dh__calib_init(dh__calib *c);
/* A predicted CPU cost of class cls, calibrated (the scheduler asks for it per task). */
static inline double dh__calib_cpu(const dh__calib *c, int cls, double predicted)
{
    return predicted * c->cpu_scale[cls];
}
void dh__calib_cpu_observe(dh__calib *c, int cls, double predicted_raw, double measured);
double dh__calib_gpu(const dh__calib *c, double predicted);
void dh__calib_gpu_observe(dh__calib *c, double predicted_raw, double measured);
double dh__calib_cpu_mape(const dh__calib *c);
double dh__calib_gpu_mape(const dh__calib *c);

#endif
