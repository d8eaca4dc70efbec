/*
 * setup.h - what every run needs before its engine starts (internal): the
 * samples and their cost table, the GPU models (predicted and true), the
 * sampler's order and the memory budget. Engine-independent, so the
 * simulator and the real engine prepare runs identically.
 */
#ifndef DH_SETUP_H
#define DH_SETUP_H

#include "../metrics/metrics.h"
#include "../sched/sched.h"

typedef struct {
    dh_run_config cfg;        /* with defaults filled in */
    dh_manifest *owned;       /* generated manifest, if any */
    const dh_manifest *m;
    dh_spec *spec;
    dh__samples samples;
    dh__gpu_model gpu;        /* scaled to rho: the truth model and the policy's start */
    int64_t *order;           /* steps * G sample indices */
    dh__policy policy;
    char workload[64];
} dh__run;

int dh__run_setup(const dh_run_config *cfg, dh__run *run, char *err, size_t errlen);
void dh__run_free(dh__run *run);
/*
 * The bound's inputs from the run's truth: per-step GPU sums and maxima, the
 * fixed step cost, the sample count, and the CPU truth sum (the real engine
 * replaces the latter with what it measured).
 */
void dh__run_bound_inputs(const dh__run *run, dh__records *rec);
/* Every result field both engines fill alike (metrics, calibration, counters). */
void dh__run_fill_result(const dh__run *run, const dh__sched *sched,
                         const dh__records *rec, const char *engine, dh_result *out);

/* The scheduler config of this run (predictions only). */
void dh__run_sched_config(const dh__run *run, dh__sched_config *sc);

#endif
