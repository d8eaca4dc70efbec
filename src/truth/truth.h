/*
 * truth.h - ground truth and the stress injectors (internal; engines only).
 *
 * DESIGN: what a sample really costs: its CPU preparation on one worker and
 * its GPU compute, from the manifest's `sim` fields where given, otherwise
 * from the cost models times seeded log-normal noise (sigma 0.25 CPU, 0.05
 * GPU). The stress injectors bend that truth away from the predictions
 * (heavier CPU samples, understated tokens) to test how the mechanisms cope.
 * Policies never include this header: src/sched sees predictions only, so
 * no policy can read truth, whatever path it takes. The simulator takes
 * every duration from here; the real engine's emulated ranks take their
 * compute time from here.
 */
#ifndef DH_TRUTH_H
#define DH_TRUTH_H

#include "../cost/cost.h"

/* A sample's truth: both costs side by side, one cache miss where a step, a task or the
 * records read them at random (two arrays were two). */
typedef struct {
    float cpu; /* seconds of preparing the sample on one worker */
    float gpu; /* seconds of computing it */
} dh__truth_of;

typedef struct {
    int64_t n;
    dh__truth_of *of; /* n: sample i's */
} dh__truth;

/* What the stress options ask for (all zero: none). */
typedef struct {
    double cpu_sigma;                   /* log-normal sigma of CPU truth; 0: 0.25 */
    double cpu_heavy_frac, cpu_heavy_k; /* this fraction truly costs k x its prediction */
    double understate_frac, understate_k; /* this fraction truly has k x its tokens */
    int understate_told;                /* ...and the descriptors say so (the reference) */
} dh__stress;

int dh__truth_init(dh__truth *t, int64_t n);
void dh__truth_free(dh__truth *t);

/*
 * CPU truth from the manifest's sim.cpu_ms, else the raw (machine-neutral)
 * prediction (row[i].cpu_pred) times noise, scaled to this machine by cpu_scale (> 0).
 */
void dh__truth_cpu(dh__truth *t, const dh_manifest *m, const dh__sample_row *row, uint64_t seed,
                   double cpu_scale);
/* The CPU stress: truth redrawn around the (scaled) prediction; given truth stays. */
void dh__truth_cpu_stress(dh__truth *t, const dh_manifest *m, const dh__sample_row *row,
                          uint64_t seed, const dh__stress *st);
/* GPU truth from sim.gpu_ms, else the (rho-scaled) model times noise. */
void dh__truth_gpu(dh__truth *t, const dh_manifest *m, const dh__sample_row *row,
                   const dh__gpu_model *g, uint64_t seed);
/*
 * The GPU stress: a seeded fraction of samples truly carries k x the tokens
 * and latents of its descriptor. With understate_told the descriptors are
 * corrected too (each row's feat is rewritten): the truthful reference run.
 */
void dh__truth_understate(dh__truth *t, const dh_manifest *m, dh__sample_row *row,
                          const dh__gpu_model *g, uint64_t seed, const dh__stress *st);

#endif
