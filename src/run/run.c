/*
 * run.c - run preparation shared by both engines (see run.h).
 *
 * Defaults: a workload run generates min(steps, 1000) global batches of
 * samples (200 steps unless given) and runs `steps` batches over them,
 * epoch after epoch; a manifest run covers one epoch of complete batches
 * unless steps or epochs ask for more (the sampler rolls into later
 * epochs), or goes on until stopped (DH_STEPS_FOREVER).
 * Without a workload, a manifest run uses the "default" spec and a generic
 * GPU shape (linear in tokens and latents, quadratic in tokens from 8k) at
 * rho 1. The memory budget defaults to what the DataLoader baseline holds:
 * 2 prefetched batches per worker plus the batch each rank is computing on,
 * each of G/R samples of mean output size.
 */
#include "run.h"

#include "../catalog/catalog.h"
#include "../metrics/metrics.h"
#include "../workloads/workloads.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_STEPS 200
#define MAX_GENERATED_STEPS 1000 /* a longer workload run goes round its dataset */
/* Memory of one generated sample while a run holds it: descriptor, predictions, truth
 * (peak RSS over samples at 10^6 samples: 185 bytes for anyres-images, 195 omni-mix, 311
 * interleaved-docs; the largest, rounded up, so a refusal errs early). */
#define GENERATED_BYTES_PER_SAMPLE 320

void dh_run_config_default(dh_run_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->struct_size = sizeof *cfg;
    cfg->policy = "helix";
    cfg->ranks = 8;
    cfg->workers = 32;
    cfg->seed = 1;
}

static int resolve_inputs(dh__run *run, const dh__workload **wl, char *err, size_t errlen)
{
    dh_run_config *c = &run->cfg;
    *wl = NULL;
    if (c->workload) {
        *wl = dh__workload_find(c->workload);
        if (!*wl) {
            dh__msg(err, errlen, "unknown workload \"%s\"", c->workload);
            return DH_ENOENT;
        }
    } else if (!c->manifest) {
        dh__msg(err, errlen, "a run needs a workload or a manifest");
        return DH_EINVAL;
    }
    int defaulted = !c->global_batch;
    if (defaulted)
        c->global_batch = *wl ? (*wl)->global_batch : 64;
    if (c->ranks < 1 || c->workers < 1 || c->global_batch < c->ranks) {
        dh__msg(err, errlen, "need ranks >= 1, workers >= 1 and a global batch >= ranks (%lld < %d%s)",
                (long long)c->global_batch, c->ranks,
                defaulted ? ": the default global batch is too small, --batch sets it" : "");
        return DH_EINVAL;
    }
    snprintf(run->workload, sizeof run->workload, "%s", c->workload ? c->workload : "manifest");
    if (c->manifest && c->workload_samples > 0) {
        dh__msg(err, errlen, "workload_samples (--workload-samples) sizes a built-in workload's "
                "generated dataset; a manifest run reads its manifest (%lld samples here)",
                (long long)dh_manifest_count(c->manifest));
        return DH_EINVAL;
    }
    if (c->manifest) {
        run->m = c->manifest;
    } else {
        int64_t steps = c->steps > 0 ? DH_MIN(c->steps, MAX_GENERATED_STEPS) : DEFAULT_STEPS;
        int64_t n = c->workload_samples > 0 ? c->workload_samples : steps * c->global_batch;
        if (!c->steps && !c->epochs)
            c->steps = DEFAULT_STEPS;
        /* A run at many ranks generates steps x G descriptors by default: say so before the
         * machine runs out of memory (a user's 10^12 filled 16 GB and went on). */
        double need = (double)n * GENERATED_BYTES_PER_SAMPLE;
        int64_t avail = dh__memory_available();
        if (avail > 0 && need > 0.8 * (double)avail) {
            dh__msg(err, errlen, "the %s dataset of %lld generated samples needs about %.1f GiB, "
                    "more than the %.1f GiB this process may use (--workload-samples N "
                    "generates a smaller one; epochs go round it)", c->workload, (long long)n,
                    need / 1073741824.0, (double)avail / 1073741824.0);
            return DH_ENOMEM;
        }
        int rc = dh__workload_generate_until(c->workload, n, c->seed, c->should_stop,
                                             c->should_stop_user, &run->owned);
        if (rc) {
            dh__msg(err, errlen, "generating %s (%lld samples): %s", c->workload, (long long)n,
                    dh_strerror(rc));
            return rc;
        }
        run->m = run->owned;
    }
    int rc = c->spec ? 0 : dh_spec_builtin(*wl ? (*wl)->name : "default", &run->spec);
    if (rc)
        dh__msg(err, errlen, "no spec: %s", dh_strerror(rc));
    return rc;
}

const char *dh__order_name(int order)
{
    return order == DH_ORDER_STRATIFIED ? "stratified" : "uniform";
}

#define ORDER_CLASSES 64 /* a stratified order's classes: 32 octaves of GPU cost */

/* The stratified order (--order stratified) over classes of the run's predicted GPU cost;
 * on several nodes of several ranks each step comes laid out by node (run->by_node). */
static int stratify(dh__run *run, char *err, size_t errlen)
{
    dh_run_config *c = &run->cfg;
    int nodes = DH_MAX(1, c->nodes);
    if (c->global_batch % nodes)
        return dh__fail(err, errlen, DH_EINVAL, "--order stratified on %d nodes needs a global "
                        "batch that is a multiple of them (each node takes one sample of every "
                        "%d): %lld is not", nodes, nodes, (long long)c->global_batch);
    uint16_t *cls = malloc((size_t)run->samples.n * sizeof *cls);
    if (!cls)
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory for the classes of %lld samples",
                        (long long)run->samples.n);
    dh__gpu_classes(&run->gpu, &run->samples, ORDER_CLASSES, cls);
    int rc = dh__sampler_stratify(run->sampler, cls, ORDER_CLASSES);
    free(cls);
    if (rc)
        return dh__fail(err, errlen, rc, "--order stratified: %s", dh_strerror(rc));
    run->by_node = nodes > 1 && c->ranks / nodes > 1;
    return 0;
}

static int build_sampler(dh__run *run, char *err, size_t errlen)
{
    dh_run_config *c = &run->cfg;
    dh_sampler_opts so = {.global_batch = c->global_batch, .seed = c->seed,
                          .shuffle = !c->no_shuffle, .drop_last = !c->keep_last};
    int rc = dh_sampler_new(run->m, &so, &run->sampler);
    if (rc) {
        dh__msg(err, errlen, "sampler: %lld samples cannot fill a global batch of %lld (%s)",
                (long long)dh_manifest_count(run->m), (long long)c->global_batch, dh_strerror(rc));
        return rc;
    }
    run->random = dh_spec_is_random(run->use_spec);
    if (c->order != DH_ORDER_UNIFORM && c->order != DH_ORDER_STRATIFIED)
        return dh__fail(err, errlen, DH_EINVAL, "order %d is neither DH_ORDER_UNIFORM nor "
                        "DH_ORDER_STRATIFIED", c->order);
    if (c->order == DH_ORDER_STRATIFIED && (c->no_shuffle || c->keep_last))
        return dh__fail(err, errlen, DH_EINVAL, "--order stratified does not go with %s: it "
                        "reorders every epoch by cost (a validation stream takes --order "
                        "uniform)", c->no_shuffle ? "--no-shuffle" : "--keep-last");
    if (c->order == DH_ORDER_STRATIFIED && (rc = stratify(run, err, errlen)))
        return rc;
    if (c->resume) {
        dh__run_begin_at(run, c->start_epoch, c->start_step);
        dh_sampler_state st = {dh_manifest_hash(run->m), c->seed, c->start_epoch, c->start_step};
        if ((rc = dh_sampler_set_state(run->sampler, &st)))
            return dh__fail(err, errlen, rc, "cannot resume at epoch %lld step %lld: %s (an "
                            "epoch has %lld steps)", (long long)c->start_epoch,
                            (long long)c->start_step, dh_strerror(rc),
                            (long long)dh_sampler_steps_per_epoch(run->sampler));
    }
    if (c->steps < 0 && c->steps != DH_STEPS_FOREVER) {
        dh__msg(err, errlen, "steps must be > 0, 0 (epochs) or DH_STEPS_FOREVER, not %lld",
                (long long)c->steps);
        return DH_EINVAL;
    }
    if (!c->steps) {
        int64_t per = dh_sampler_steps_per_epoch(run->sampler);
        int64_t epochs = c->epochs > 0 ? c->epochs : 1;
        if (epochs > INT64_MAX / 4 / per) {
            dh__msg(err, errlen, "%lld epochs of %lld steps is too long a run", (long long)epochs,
                    (long long)per);
            return DH_ERANGE;
        }
        c->steps = epochs * per;
    }
    return 0;
}

void dh_result_init(dh_result *r)
{
    memset(r, 0, sizeof *r);
    r->struct_size = sizeof *r;
}

int dh__result_check(const dh_result *out, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0; /* a run's message is about this run only */
    if (!out || out->struct_size < sizeof(uint32_t) || out->struct_size > sizeof *out)
        return dh__fail(err, errlen, DH_EINVAL, "the result struct is not initialised "
                                                "(dh_result_init or DH_RESULT_INIT)");
    return 0;
}

void dh__result_give(dh_result *out, const dh_result *full)
{
    uint32_t size = out->struct_size;
    memcpy(out, full, size);
    out->struct_size = size;
}

/* A caller's config, from the size it was built with: unknown fields take defaults. */
static int take_config(dh_run_config *dst, const dh_run_config *src, char *err, size_t errlen)
{
    memset(dst, 0, sizeof *dst);
    if (src->struct_size < sizeof(uint32_t) || src->struct_size > sizeof *dst)
        return dh__fail(err, errlen, DH_EINVAL,
                        "the run config is not initialised (dh_run_config_default) or comes "
                        "from a newer datahelix.h (struct_size %u, this library knows %zu)",
                        (unsigned)src->struct_size, sizeof *dst);
    memcpy(dst, src, src->struct_size);
    dst->struct_size = sizeof *dst;
    return 0;
}

/* x is finite and in [lo, hi] (or exactly 0 when zero_ok: "the default"). */
static int in_range(double x, double lo, double hi, int zero_ok)
{
    return (zero_ok && x == 0) || (isfinite(x) && x >= lo && x <= hi);
}

/*
 * Every number of the config that reaches arithmetic, allocation or sleep, checked where
 * it enters: NaN, infinities and sizes that overflow later sums are refused here.
 */
static int check_numbers(const dh_run_config *c, char *err, size_t errlen)
{
#define CHECK(ok, ...) \
    do { \
        if (!(ok)) \
            return dh__fail(err, errlen, DH_EINVAL, __VA_ARGS__); \
    } while (0)
    CHECK(c->ranks >= 1 && c->ranks <= (1 << 20), "ranks %d: expected 1 to %d", c->ranks,
          1 << 20);
    CHECK(c->workers >= 1 && c->workers <= (1 << 20), "workers %d: expected 1 to %d",
          c->workers, 1 << 20);
    CHECK(c->global_batch >= 0 && c->global_batch <= INT32_MAX,
          "global batch %lld: expected 0 (the workload's) to %d", (long long)c->global_batch,
          INT32_MAX);
    CHECK(c->memory_budget >= 0 && c->memory_budget <= DH_MAX_MEMORY_BUDGET,
          "memory budget %lld bytes: expected 0 (the default) to %lld (1 PiB)",
          (long long)c->memory_budget, (long long)DH_MAX_MEMORY_BUDGET);
    CHECK(in_range(c->rho, 1e-3, 1e3, 1), "rho %g: expected 0 (the workload's) or 0.001 to 1000",
          c->rho);
    CHECK(in_range(c->cpu_cost_scale, 1e-6, 1e6, 1), "cpu_cost_scale %g: expected 1e-6 to 1e6",
          c->cpu_cost_scale);
    CHECK(in_range(c->net_bandwidth, 1, 1e15, 1), "net bandwidth %g B/s: expected 1 to 1e15",
          c->net_bandwidth);
    CHECK(in_range(c->net_latency, 0, 1e3, 1), "net latency %g s: expected 0 to 1000",
          c->net_latency);
    CHECK(in_range(c->move_bandwidth, 1, 1e15, 1), "move bandwidth %g B/s: expected 1 to 1e15",
          c->move_bandwidth);
    CHECK(isfinite(c->sample_timeout_s) && c->sample_timeout_s <= 86400,
          "sample timeout %g s: expected at most 86400 (0: derived, < 0: none)",
          c->sample_timeout_s);
    CHECK(c->fetchers >= -1 && c->fetchers <= 256, "fetchers %d: expected -1 (none), 0 (the "
          "default) or 1 to 256", c->fetchers);
    CHECK(in_range(c->fetch_latency_s, 0, 60, 1) && in_range(c->fetch_bandwidth, 0, 1e15, 1),
          "fetch model: latency %g s (0 to 60) and bandwidth %g B/s (0 to 1e15)",
          c->fetch_latency_s, c->fetch_bandwidth);
    CHECK(c->fetch_ahead_bytes >= 0, "fetch-ahead budget %lld bytes: expected 0 (the default) "
          "or more", (long long)c->fetch_ahead_bytes);
    const dh_stress *x = c->stress;
    if (x) {
        CHECK(in_range(x->understate_fraction, 0, 1, 1) && in_range(x->cpu_heavy_fraction, 0, 1, 1),
              "stress fractions must lie in [0, 1]");
        CHECK(in_range(x->understate_factor, 0, DH_STRESS_MAX_FACTOR, 1) &&
                  in_range(x->cpu_heavy_factor, 0, DH_STRESS_MAX_FACTOR, 1),
              "stress factors must lie in (0, %g]", DH_STRESS_MAX_FACTOR);
        CHECK(in_range(x->cpu_noise_sigma, 0, 10, 1), "cpu noise sigma %g: expected 0 to 10",
              x->cpu_noise_sigma);
    }
#undef CHECK
    return 0;
}

/* The stress of the config, as the truth module takes it. */
static dh__stress stress_of(const dh_run_config *c)
{
    dh__stress st = {0};
    const dh_stress *x = c->stress;
    if (!x)
        return st;
    st = (dh__stress){.cpu_sigma = x->cpu_noise_sigma, .cpu_heavy_frac = x->cpu_heavy_fraction,
                      .cpu_heavy_k = x->cpu_heavy_factor, .understate_told = x->understate_told};
    if (x->understate_fraction > 0 && x->understate_factor > 0)
        st.understate_frac = x->understate_fraction, st.understate_k = x->understate_factor;
    return st;
}

/*
 * Scales the GPU model to rho over the CPU work of the spec without --augment, so that
 * augmentation changes what preparing a sample costs, not what computing it does (the
 * same GPU truth with and without it; tokens and shapes do not depend on a draw).
 */
static int scale_gpu(dh__run *run, const dh__workload *wl, const dh__cpu_model *cpu,
                     char *err, size_t errlen)
{
    dh_run_config *c = &run->cfg;
    dh__samples plain, *base = &run->samples;
    if (c->augment) {
        dh_spec *builtin = NULL;
        const dh_spec *s = c->spec;
        int rc = s ? 0 : dh_spec_builtin(wl ? wl->name : "default", &builtin);
        if (!rc)
            rc = dh__samples_build(run->m, s ? s : builtin, cpu, &plain, err, errlen);
        dh_spec_free(builtin);
        if (rc)
            return rc;
        for (int64_t i = 0; c->cpu_cost_scale > 0 && i < plain.n; i++)
            plain.row[i].cpu_pred *= (float)c->cpu_cost_scale;
        base = &plain;
    }
    dh__gpu_scale_for_rho(&run->gpu, base, c->ranks, c->workers, c->global_batch, c->rho);
    if (base == &plain)
        dh__samples_free(&plain);
    return 0;
}

/*
 * Predictions and truth, in this order: truth from the raw CPU model (or the
 * manifest), then both moved to this machine by cpu_cost_scale, the CPU
 * stress, the GPU model scaled to rho (over the un-augmented spec's work), GPU
 * truth and the GPU stress.
 */
static int build_costs(dh__run *run, const dh__workload *wl, char *err, size_t errlen)
{
    dh_run_config *c = &run->cfg;
    dh__cpu_model cpu;
    dh__cpu_model_default(&cpu);
    int rc = dh__samples_build(run->m, run->use_spec, &cpu, &run->samples, err, errlen);
    if (!rc && (rc = dh__truth_init(&run->truth, run->samples.n)))
        dh__msg(err, errlen, "out of memory for the truth of %lld samples",
                (long long)run->samples.n);
    if (rc)
        return rc;
    double sum = 0;
    for (int64_t i = 0; i < run->samples.n; i++) {
        run->bytes_max = DH_MAX(run->bytes_max, run->samples.row[i].bytes);
        sum += (double)run->samples.row[i].bytes;
    }
    run->bytes_mean = sum / (double)(run->samples.n ? run->samples.n : 1);
    dh__truth_cpu(&run->truth, run->m, run->samples.row, c->seed, c->cpu_cost_scale);
    /* A measured machine factor moves the CPU predictions (and so rho) to this machine. */
    for (int64_t i = 0; c->cpu_cost_scale > 0 && i < run->samples.n; i++)
        run->samples.row[i].cpu_pred *= (float)c->cpu_cost_scale;
    dh__stress st = stress_of(c);
    if (st.cpu_sigma > 0 || st.cpu_heavy_frac > 0)
        dh__truth_cpu_stress(&run->truth, run->m, run->samples.row, c->seed, &st);
    run->gpu = wl ? wl->gpu : (dh__gpu_model){1.0, 1.0 / 8000, 1.0, 0, 0};
    if (!c->rho)
        c->rho = wl ? wl->rho : 1.0;
    if ((rc = scale_gpu(run, wl, &cpu, err, errlen)))
        return rc;
    dh__truth_gpu(&run->truth, run->m, run->samples.row, &run->gpu, c->seed);
    if (st.understate_frac > 0)
        dh__truth_understate(&run->truth, run->m, run->samples.row, &run->gpu, c->seed, &st);
    return 0;
}

/* DataLoader's holding: 2 prefetched batches per worker plus the one each rank computes on. */
/* The largest sample's output bytes, and the mean (set by build_costs: rows' bytes do not
 * change after; the budgets asked for them a dozen times, a pass over every row each). */
static int64_t max_sample_bytes(const dh__run *run, double *mean)
{
    if (mean)
        *mean = run->bytes_mean;
    return run->bytes_max;
}

/* The largest batch one rank can get, with its items' 64-byte alignment. */
static int64_t big_batch(const dh__run *run)
{
    int64_t per_rank = (run->cfg.global_batch + run->cfg.ranks - 1) / run->cfg.ranks;
    return max_sample_bytes(run, NULL) * per_rank + 64 * per_rank * 16;
}

int64_t dh__run_pool_slack(const dh__run *run, int leases)
{
    return 2 * 2 * big_batch(run) + (int64_t)leases * run->cfg.ranks * big_batch(run);
}

static int64_t arena_bytes(const dh__run *run)
{
    double mean;
    max_sample_bytes(run, &mean);
    int64_t step = (int64_t)(mean * (double)run->cfg.global_batch) + 64 * run->cfg.global_batch * 16;
    return 2 * step + 2 * 2 * big_batch(run);
}

/* A batch of one sample (global batch = ranks) leaves rebalancing nothing to gain: a move
 * only puts two samples on one rank, never lowering the slowest. Reserving the arena then
 * cost helix its lookahead for nothing (issue 25's trial: kinetics-clips at 64 ranks, 1
 * sample and 1 worker each, helix 0.667 against pool's 0.795). */
int64_t dh__run_arena_bytes(const dh__run *run)
{
    return dh__policy_caps_of(run->policy)->rebalance && run->cfg.global_batch > run->cfg.ranks
               ? arena_bytes(run)
               : 0;
}

int64_t dh__run_admission_budget(const dh__run *run, int leases)
{
    return run->cfg.memory_budget - dh__run_pool_slack(run, leases) - dh__run_arena_bytes(run);
}

static int64_t default_budget(const dh__run *run)
{
    const dh_run_config *c = &run->cfg;
    double mean = run->bytes_mean;
    int k = c->workers / c->ranks > 1 ? c->workers / c->ranks : 1;
    double batches = (double)c->ranks * (2.0 * k + 1.0);
    /* at least one of the largest batches: samples far above the mean (one long video among
     * images) made the default smaller than what the run needs, and it was refused */
    return DH_MAX((int64_t)(batches * ((double)c->global_batch / c->ranks) * mean),
                  big_batch(run));
}

int dh__run_setup(const dh_run_config *cfg, dh__run *run, char *err, size_t errlen)
{
    memset(run, 0, sizeof *run);
    int rc = take_config(&run->cfg, cfg, err, errlen);
    if (!rc)
        rc = check_numbers(&run->cfg, err, errlen);
    if (rc)
        return rc;
    cfg = &run->cfg;
    int pol = dh__policy_from_name(cfg->policy);
    if (pol < 0) {
        dh__msg(err, errlen, "unknown policy \"%s\" (%s)", cfg->policy ? cfg->policy : "",
                dh__policy_list());
        return DH_EINVAL;
    }
    run->policy = (dh__policy)pol;
    dh_run_config *c = &run->cfg;
    const dh__workload *wl;
    rc = resolve_inputs(run, &wl, err, errlen);
    if (!rc && c->nodes > 1 && (c->ranks % c->nodes || c->workers % c->nodes)) {
        int r_ok = c->ranks % c->nodes == 0, w_ok = c->workers % c->nodes == 0;
        /* the one that does not divide named (a user trial could not tell which) */
        dh__msg(err, errlen, "%d nodes (--nodes, or mpirun -np) must divide --ranks (%d) and "
                "--workers (%d): each node runs the same share; %s%s%s%s not", c->nodes,
                c->ranks, c->workers, r_ok ? "" : "--ranks", !r_ok && !w_ok ? " and " : "",
                w_ok ? "" : "--workers", !r_ok && !w_ok ? " do" : " does");
        rc = DH_EINVAL;
    }
    int own = c->augment || c->no_augment; /* the run changes its spec */
    if (!rc && own && cfg->spec) { /* a copy: the caller's spec is theirs */
        run->spec = dh__spec_dup(cfg->spec);
        rc = run->spec ? 0 : DH_ENOMEM;
    }
    if (!rc) {
        run->use_spec = own ? run->spec : cfg->spec ? cfg->spec : run->spec;
        if (c->augment)
            dh_spec_augment(run->spec);
        if (c->no_augment)
            dh_spec_plain(run->spec);
        rc = build_costs(run, wl, err, errlen);
    }
    if (!rc)
        rc = build_sampler(run, err, errlen);
    if (rc) {
        dh__run_free(run);
        return rc;
    }
    /* One budget for every policy: what the DataLoader holds, plus the pool's slack and a
     * move arena (the largest a policy may reserve), so each policy's admissions, slack and
     * arena fit it; a policy without rebalancing admits what helix keeps for its arena. */
    if (!c->memory_budget)
        c->memory_budget = default_budget(run) + dh__run_pool_slack(run, 0) + arena_bytes(run);
    return 0;
}

int64_t dh__run_node_budget(const dh__run *run, int64_t asked, int leases)
{
    int nodes = DH_MAX(1, run->cfg.nodes);
    if (asked > 0)
        return asked / nodes;
    /* Each node holds its share of what the default holds for batches, and at least one of
     * the largest batches: a share of less would refuse the default's own run (samples far
     * above the mean made the whole job's default under two largest batches). */
    int64_t fixed = dh__run_pool_slack(run, leases) + arena_bytes(run);
    return DH_MAX((run->cfg.memory_budget - fixed) / nodes, big_batch(run)) + fixed;
}

int64_t dh__run_min_budget(const dh__run *run, int leases)
{
    return dh__run_pool_slack(run, leases) + dh__run_arena_bytes(run) + big_batch(run);
}

int dh__run_check_budget(const dh__run *run, int leases, char *err, size_t errlen)
{
    int64_t need = dh__run_min_budget(run, leases);
    if (run->cfg.memory_budget >= need)
        return 0;
    return dh__fail(err, errlen, DH_EINVAL,
                    "memory budget %lld byte%s (%.1f MiB) is below the %lld bytes (%.1f MiB) this "
                    "run needs: one of its largest batches, the pool's slack%s%s "
                    "(--memory-budget BYTES; leave it out for the default)",
                    (long long)run->cfg.memory_budget, run->cfg.memory_budget == 1 ? "" : "s",
                    run->cfg.memory_budget / 1048576.0, (long long)need, need / 1048576.0,
                    dh__run_arena_bytes(run) ? ", the move arena" : "",
                    leases ? ", the batches trainers may keep" : "");
}

/*
 * The scheduler's order source: the sampler's next global batch, and with
 * random keys each drawn sample's CPU prediction as this step's draw makes it
 * (without them the scheduler reads the table's with the rest of the row).
 * Each drawn step's true costs go to the engine's records (the bound's
 * inputs), summed in draw order.
 */
_Atomic int dh__pos_truth_off;

#define DRAW_AHEAD 16 /* samples: a drawn sample's table entry is a cache miss, read ahead */

static int draw_step(void *ctx, int64_t *out, float *cpu)
{
    dh__run *run = ctx;
    int rc = run->by_node ? dh__sampler_next_by_node(run->sampler, run->cfg.nodes, out)
                          : dh_sampler_next(run->sampler, out, run->cfg.global_batch);
    for (int64_t k = 0; !rc && cpu && k < run->cfg.global_batch; k++) {
        if (out[k] < 0 || out[k] >= run->samples.n)
            return DH_ERANGE;
        if (k + DRAW_AHEAD < run->cfg.global_batch && out[k + DRAW_AHEAD] >= 0)
            __builtin_prefetch(&run->samples.row[out[k + DRAW_AHEAD]]);
        cpu[k] = (float)dh__run_drawn_cpu(run, run->drawn, out[k]);
    }
    if (rc || !run->rec) {
        run->drawn += !rc;
        return rc;
    }
    dh__rec_step *sp = dh__records_step(run->rec, run->drawn);
    if (!sp)
        return run->rec->error ? run->rec->error : DH_EINVAL;
    int64_t slot = dh__pos_truth_slot(run->drawn);
    dh__truth_of *ring = run->pos_truth && !run->random && !run->truth_by_nodes
                             ? run->pos_truth + slot * run->cfg.global_batch
                             : NULL;
    if (run->pos_truth) /* the step it holds once it is filled */
        run->pos_truth_step[slot] = -1;
    for (int64_t k = 0; !run->truth_by_nodes && k < run->cfg.global_batch; k++) {
        int64_t i = out[k];
        if (i < 0 || i >= run->truth.n)
            return DH_ERANGE;
        /* a miss at random a sample: fetched ahead, not one after the other */
        int64_t j = k + DRAW_AHEAD < run->cfg.global_batch ? out[k + DRAW_AHEAD] : -1;
        if (j >= 0 && j < run->truth.n)
            __builtin_prefetch(&run->truth.of[j]);
        if (ring)
            ring[k] = run->truth.of[i];
        double g = run->truth.of[i].gpu;
        sp->gpu_sum += g;
        sp->gpu_max = DH_MAX(sp->gpu_max, g);
        /* the draw made above, not again (none without random keys: the truth's own) */
        double c = dh__run_true_of(run, i, cpu ? cpu[k] : 0.0);
        sp->cpu_sum += c;
        run->rec->cpu_true_sum += c;
    }
    if (ring)
        run->pos_truth_step[slot] = run->drawn;
    run->drawn++;
    return 0;
}

/* A replica's byte a sample (its deal's class of cost), carried by the sampler's uniform
 * order in its permutation's entries: the deal then reads a step's bytes in order, not one at
 * random a sample (bench/RESULTS.md, "The deal's bytes carried by the order"). */
static const uint8_t *carry_bytes(void *ctx, const uint8_t *bytes)
{
    dh__run *run = ctx;
    return dh__sampler_carry(run->sampler, bytes) ? NULL : dh__sampler_drawn_bytes(run->sampler);
}

void dh__run_sched_config(dh__run *run, int leases, dh__sched_config *sc)
{
    memset(sc, 0, sizeof *sc);
    sc->policy = run->policy;
    sc->ranks = run->cfg.ranks;
    sc->workers = run->cfg.workers;
    sc->global_batch = run->cfg.global_batch;
    sc->steps = run->cfg.steps > 0 ? run->cfg.steps : 0;
    sc->memory_budget = dh__run_admission_budget(run, leases);
    sc->held_in_slack = leases > 0;
    sc->rank_token_cap = run->cfg.rank_token_cap;
    sc->nodes = run->cfg.nodes;
    sc->net_bandwidth = run->cfg.net_bandwidth;
    sc->net_latency = run->cfg.net_latency;
    sc->move_bandwidth = run->cfg.move_bandwidth;
    sc->rank_byte_cap = run->cfg.rank_byte_cap;
    sc->pred = (dh__pred){.n = run->samples.n,
                          .row = run->samples.row,
                          .segments = run->samples.segments,
                          .tokens = run->samples.tokens};
    sc->gpu = run->gpu;
    sc->next_order = draw_step;
    sc->carry_bytes = run->by_node ? NULL : carry_bytes;
    sc->order_ctx = run;
    sc->order_cpu = run->random; /* without random keys the table's prediction is the draw's */
    sc->order_by_node = run->by_node;
}

int dh__run_should_stop(const dh__run *run)
{
    return run->cfg.should_stop && run->cfg.should_stop(run->cfg.should_stop_user);
}

void dh__run_free(dh__run *run)
{
    dh__samples_free(&run->samples);
    dh__truth_free(&run->truth);
    dh_manifest_free(run->owned);
    dh_spec_free(run->spec);
    dh_sampler_free(run->sampler);
    memset(run, 0, sizeof *run);
}

void dh__run_fill_result(const dh__run *run, const dh__sched *sched, dh__records *rec,
                         const char *engine, dh_result *out)
{
    dh_result_init(out);
    snprintf(out->workload, sizeof out->workload, "%s", run->workload);
    snprintf(out->policy, sizeof out->policy, "%s", dh__policy_name(run->policy));
    snprintf(out->engine, sizeof out->engine, "%s", engine);
    snprintf(out->order, sizeof out->order, "%s", dh__order_name(run->cfg.order));
    out->ranks = run->cfg.ranks;
    out->workers = run->cfg.workers;
    out->nodes = DH_MAX(1, run->cfg.nodes);
    dh__records_finish(rec, run->cfg.workers, out);
    out->cpu_mape = dh__calib_cpu_mape(dh__sched_calib(sched));
    out->gpu_mape = dh__calib_gpu_mape(dh__sched_calib(sched));
    out->memory_budget = run->cfg.memory_budget;
    out->memory_peak = dh__sched_memory_peak(sched);
    out->cap_violations = dh__sched_cap_violations(sched);
    const dh__reb_stats *reb = dh__sched_reb_stats(sched);
    out->reb_considered = reb->considered;
    out->reb_moved = reb->moved;
    out->reb_gated = reb->gated;
    out->reb_refused = reb->refused;
    out->reb_move_s = reb->move_s;
    out->reb_move_factor = reb->move_factor;
    out->reb_bytes = reb->bytes_moved;
    out->reb_remote = reb->moved_remote;
    out->reb_remote_bytes = reb->remote_bytes;
    out->net_factor = reb->net_factor;
    out->reb_predicted_gain_s = reb->predicted_gain_s;
    out->reb_realised_gain_s = reb->realised_gain_s;
    out->lend_considered = reb->lend_considered;
    out->lent = reb->lent;
    out->lend_gated = reb->lend_gated;
    out->bytes_shipped = reb->bytes_shipped;
}
