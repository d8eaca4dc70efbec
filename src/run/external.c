/*
 * external.c - runs of a loader outside the library (the bench's PyTorch
 * DataLoader contender): what its emulated ranks must sleep, and its
 * measured (step, rank) timings turned into a dh_result through the same
 * records and metrics as our engines, so every figure means the same thing.
 */
#include "run.h"

#include <stdio.h>
#include <string.h>

int dh_run_emulated_gpu(const dh_run_config *cfg, double *gpu_s, int64_t n, double *step_fixed_s,
                        char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!cfg || (!gpu_s && n) || n < 0)
        return DH_EINVAL;
    dh__run run;
    int rc = dh__run_setup(cfg, &run, err, errlen);
    if (rc)
        return rc;
    if (n != run.truth.n) {
        rc = dh__fail(err, errlen, DH_EINVAL, "the run has %lld samples, not %lld",
                      (long long)run.truth.n, (long long)n);
    } else {
        for (int64_t i = 0; i < n; i++)
            gpu_s[i] = run.truth.of[i].gpu;
        if (step_fixed_s)
            *step_fixed_s = run.gpu.c0;
    }
    dh__run_free(&run);
    return rc;
}

int dh_result_from_steps(const dh_external_run *x, dh_result *out, char *err, size_t errlen)
{
    int rc = dh__result_check(out, err, errlen);
    if (rc)
        return rc;
    if (!x || x->ranks <= 0 || x->workers <= 0 || x->global_batch <= 0 || x->steps < 0 ||
        (x->steps && (!x->batches || !x->step_info)))
        return dh__fail(err, errlen, DH_EINVAL, "an external run needs ranks, workers, a "
                        "global batch and its steps");
    dh__records rec;
    if ((rc = dh__records_init(&rec, x->ranks, x->global_batch)))
        return rc;
    rec.step_fixed = x->step_fixed_s;
    rec.cpu_measured = 1;
    for (int64_t s = 0; s < x->steps && !rec.error; s++) {
        const dh_external_step *si = &x->step_info[s];
        dh__rec_step *sp = dh__records_step(&rec, s);
        if (!sp)
            break;
        sp->gpu_sum = si->gpu_sum;
        sp->gpu_max = si->gpu_max;
        sp->cpu_sum = si->cpu_sum;
        sp->failed = si->failed;
        rec.cpu_true_sum += si->cpu_sum;
        for (int r = 0; r < x->ranks; r++) {
            const dh_external_batch *eb = &x->batches[s * x->ranks + r];
            dh__records_task(&rec, s, r, eb->first_task_start, eb->longest_task);
            dh__rec_batch *b = dh__records_batch(&rec, s, r);
            if (!b)
                break;
            b->deadline = eb->asked;
            b->ready = eb->ready;
            b->compute = eb->compute;
        }
        dh__records_close(&rec, s);
    }
    rc = rec.error;
    if (!rc) {
        rec.makespan = x->makespan_s;
        dh_result full;
        dh_result_init(&full);
        snprintf(full.workload, sizeof full.workload, "%s", x->workload ? x->workload : "");
        snprintf(full.policy, sizeof full.policy, "%s", x->policy ? x->policy : "");
        snprintf(full.engine, sizeof full.engine, "%s", x->engine ? x->engine : "real");
        full.ranks = x->ranks;
        full.workers = x->workers;
        dh__records_finish(&rec, x->workers, &full);
        full.model_bound_s = 0; /* the bound is its own measured costs; no model of its own */
        full.memory_budget = x->memory_budget;
        full.memory_peak = x->memory_peak;
        full.framework_overhead = x->framework_overhead;
        dh__result_give(out, &full);
    } else {
        dh__msg(err, errlen, "out of memory for the run's records");
    }
    dh__records_free(&rec);
    return rc;
}
