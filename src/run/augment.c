/*
 * augment.c - random augmentation seen from the run: which epoch a step belongs to, and so
 * what each of its samples drew (catalog's dh_media_draw_of), what that costs to prepare
 * (the prediction the scheduler plans with) and, in the simulator, what it truly costs.
 *
 * DESIGN: the epoch of step k is a pure function of where the sampler began (epoch0, step0)
 * and the epoch's length, since the sampler rolls over every steps-per-epoch steps; so a
 * worker, a lent task on another node and the cost model all name the same draw without a
 * table shared between threads. Without random keys every function returns the table's
 * figures, so such runs plan exactly as before.
 */
#include "run.h"

void dh__run_begin_at(dh__run *run, int64_t epoch, int64_t step)
{
    run->epoch0 = epoch;
    run->step0 = step;
}

int64_t dh__run_epoch_of(const dh__run *run, int64_t step)
{
    int64_t per = dh_sampler_steps_per_epoch(run->sampler);
    return run->epoch0 + (run->step0 + step) / (per > 0 ? per : 1);
}

int dh__run_draw(const dh__run *run, int64_t step, int64_t i, int32_t j, dh_media_draw *out)
{
    dh_sample_info si;
    dh_media_info mi;
    int rc = dh_manifest_sample(run->m, i, &si);
    if (!rc)
        rc = dh_manifest_media(run->m, i, j, &mi);
    if (!rc)
        rc = dh_media_draw_of(run->use_spec, &mi, run->cfg.seed, dh__run_epoch_of(run, step),
                              si.id, j, out);
    return rc;
}

double dh__run_drawn_cpu(const dh__run *run, int64_t step, int64_t i)
{
    if (!run->random)
        return run->samples.row[i].cpu_pred;
    dh__cpu_model cpu;
    dh__cpu_model_default(&cpu);
    double c;
    if (dh__cpu_drawn_cost(&cpu, run->use_spec, run->m, i, run->cfg.seed,
                           dh__run_epoch_of(run, step), &c))
        return run->samples.row[i].cpu_pred; /* the table derived it: a draw cannot fail */
    return run->cfg.cpu_cost_scale > 0 ? (double)(float)(c * run->cfg.cpu_cost_scale) : c;
}

double dh__run_true_of(const dh__run *run, int64_t i, double drawn)
{
    double truth = run->truth.of[i].cpu, plain = run->samples.row[i].cpu_pred;
    return !run->random || plain <= 0 ? truth : truth * drawn / plain;
}

void dh__run_add_truth(const dh__run *run, int64_t step, const int64_t *samples, int32_t n,
                       double *gpu, double *gpu_max, double *cpu)
{
    for (int32_t k = 0; k < n; k++) {
        int64_t i = samples[k];
        double g = run->truth.of[i].gpu;
        *gpu += g;
        *gpu_max = DH_MAX(*gpu_max, g);
        /* the draw as the order source made it (a float), none without random keys */
        double drawn = run->random ? (float)dh__run_drawn_cpu(run, step, i) : 0.0;
        *cpu += dh__run_true_of(run, i, drawn);
    }
}

double dh__run_true_cpu(const dh__run *run, int64_t step, int64_t i)
{
    return run->random ? dh__run_true_of(run, i, dh__run_drawn_cpu(run, step, i))
                       : run->truth.of[i].cpu;
}
