/*
 * truth.c - ground truth and the stress injectors (see truth.h). Every draw
 * is a pure function of (seed, sample, stream), so a run is reproducible
 * and truth does not depend on the order samples are visited.
 */
#include "truth.h"
#include "../catalog/catalog.h"

#include <stdlib.h>
#include <string.h>

int dh__truth_init(dh__truth *t, int64_t n)
{
    memset(t, 0, sizeof *t);
    size_t k = (size_t)(n > 0 ? n : 1);
    t->n = n;
    t->of = dh__table_alloc(k * sizeof *t->of);
    if (!t->of)
        return DH_ENOMEM;
    return 0;
}

void dh__truth_free(dh__truth *t)
{
    free(t->of);
    memset(t, 0, sizeof *t);
}

/* A uniform draw in [0, 1) for sample i of one stress stream. */
static double stress_draw(uint64_t seed, int64_t i, uint64_t stream)
{
    uint64_t h = dh__mix64(seed ^ dh__mix64((uint64_t)i + stream));
    return (double)(h >> 11) / 9007199254740992.0;
}

/* One pass over the truth: its inputs, for the range functions below. */
typedef struct {
    dh__truth *t;
    const dh_manifest *m;
    const dh__sample_row *row;
    dh__sample_row *told; /* the understated pass's rows, written */
    uint64_t seed;
    double cpu_scale;
    const dh__gpu_model *g;
    const dh__stress *st;
} pass;

/* Samples a thread at least: every draw is the sample's own, so a large table's passes run
 * on the CPUs the run has before its workers start (the same truth on any number). */
#define PASS_GRAIN 65536

static void cpu_range(void *ctx, int64_t lo, int64_t hi)
{
    const pass *p = ctx;
    for (int64_t i = lo; i < hi; i++) {
        double sim_cpu_ms = dh__manifest_sim_cpu_ms(p->m, i);
        p->t->of[i].cpu = sim_cpu_ms >= 0
                              ? (float)(sim_cpu_ms * 1e-3)
                              : (float)(p->row[i].cpu_pred * dh__lognormal_noise(p->seed, i, 1, 0.25));
        if (p->cpu_scale > 0 && sim_cpu_ms < 0) /* model-derived truth follows the machine */
            p->t->of[i].cpu *= (float)p->cpu_scale;
    }
}

void dh__truth_cpu(dh__truth *t, const dh_manifest *m, const dh__sample_row *row, uint64_t seed,
                   double cpu_scale)
{
    pass p = {.t = t, .m = m, .row = row, .seed = seed, .cpu_scale = cpu_scale};
    dh__parallel_for(t->n, PASS_GRAIN, cpu_range, &p);
}

static void cpu_stress_range(void *ctx, int64_t lo, int64_t hi)
{
    const pass *p = ctx;
    double sigma = p->st->cpu_sigma > 0 ? p->st->cpu_sigma : 0.25;
    for (int64_t i = lo; i < hi; i++) {
        if (dh__manifest_sim_cpu_ms(p->m, i) >= 0)
            continue;
        double heavy = stress_draw(p->seed, i, 0xc9e5) < p->st->cpu_heavy_frac ? p->st->cpu_heavy_k
                                                                                : 1.0;
        p->t->of[i].cpu =
            (float)(p->row[i].cpu_pred * heavy * dh__lognormal_noise(p->seed, i, 1, sigma));
    }
}

void dh__truth_cpu_stress(dh__truth *t, const dh_manifest *m, const dh__sample_row *row,
                          uint64_t seed, const dh__stress *st)
{
    pass p = {.t = t, .m = m, .row = row, .seed = seed, .st = st};
    dh__parallel_for(t->n, PASS_GRAIN, cpu_stress_range, &p);
}

static void gpu_range(void *ctx, int64_t lo, int64_t hi)
{
    const pass *p = ctx;
    for (int64_t i = lo; i < hi; i++) {
        double sim_gpu_ms = dh__manifest_sim_gpu_ms(p->m, i);
        p->t->of[i].gpu = sim_gpu_ms >= 0 ? (float)(sim_gpu_ms * 1e-3)
                                          : (float)(dh__gpu_sample_cost(p->g, &p->row[i].feat) *
                                                    dh__lognormal_noise(p->seed, i, 2, 0.05));
    }
}

void dh__truth_gpu(dh__truth *t, const dh_manifest *m, const dh__sample_row *row,
                   const dh__gpu_model *g, uint64_t seed)
{
    pass p = {.t = t, .m = m, .row = row, .seed = seed, .g = g};
    dh__parallel_for(t->n, PASS_GRAIN, gpu_range, &p);
}

static void understate_range(void *ctx, int64_t lo, int64_t hi)
{
    const pass *p = ctx;
    double k = p->st->understate_k;
    for (int64_t i = lo; i < hi; i++) {
        if (dh__manifest_sim_gpu_ms(p->m, i) >= 0 ||
            stress_draw(p->seed, i, 0x5172e55) >= p->st->understate_frac)
            continue;
        dh__gpu_feat f = p->row[i].feat;
        f.t *= (float)k;
        f.v *= (float)k;
        f.t2 *= (float)(k * k);
        f.v2 *= (float)(k * k);
        p->t->of[i].gpu =
            (float)(dh__gpu_sample_cost(p->g, &f) * dh__lognormal_noise(p->seed, i, 2, 0.05));
        if (p->st->understate_told) /* the reference: descriptors that tell the truth */
            p->told[i].feat = f;
    }
}

void dh__truth_understate(dh__truth *t, const dh_manifest *m, dh__sample_row *row,
                          const dh__gpu_model *g, uint64_t seed, const dh__stress *st)
{
    pass p = {.t = t, .m = m, .row = row, .told = row, .seed = seed, .g = g, .st = st};
    dh__parallel_for(t->n, PASS_GRAIN, understate_range, &p);
}
