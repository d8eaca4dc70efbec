/*
 * bench_control.c - one agent's control plane at many nodes (SIMULATED
 * workload, real scheduler): node 0's replica of the whole job's scheduler
 * (dh__sched_config.node_local), driven step by step as the engine drives it
 * on a node of NODES x RANKS_PER_NODE ranks with 32 workers per node:
 *   - its own workers take every task of its ranks and finish it (the
 *     decisions: planning every step's placement of the global batch,
 *     admission, leads, least slack, splitting, calibration);
 *   - its own ranks take and finish their batches;
 *   - the other nodes' ranks are applied as their STEP records say (batch
 *     taken, step done: dh__sched_ranks_stepped, a node's ranks at once; two
 *     calls a rank until 2026-12-07), as apply_step does after each exchange,
 *     and the step is closed in the job's records, which every engine keeps (each step's
 *     modelled truth summed there for the bound: every node sums its own
 *     batches' and adds the N nodes' shares from their records;
 *     BENCH_NO_RECORDS=1 leaves the records out, as this benchmark did before
 *     2026-12-06);
 *   - the next step's moves are agreed, as at the step's exchange
 *     (dh__nodes_agree): from every node's exchanged exact costs the node
 *     plans its group's moves as every node of the group does.
 * The whole job (untimed) is a second replica of node 0, which also places
 * every other node's share and plans every other group's moves as those
 * nodes do: the step's compute is read from it. Until 2026-12-07 the timed
 * replica planned the other groups itself, which settled every node on it
 * (an engine's replica settles only its own node and its group's), so the
 * other nodes' batches it then applied were all settled ones.
 * It prints the CPU seconds of that work per step against the step's
 * simulated compute time (the workload's GPU model: the slowest rank's
 * batch plus the fixed cost), one core. Node 0's share of the records it sends (its
 * samples' exact costs of the next step and its load) is in it; copying the records and
 * the wire are not (O(ranks) copies); of carrying out its group's plan, finding the
 * batches that get samples is, the copies are not (the data plane's). BENCH_WALK=1 agrees
 * the moves as the engine did before 2026-12-06: node 0's costs found by a walk of the
 * step, every exchanged cost placed at its position by another walk, and the plan's
 * receivers found by a third (this benchmark timed none of them).
 *   usage: bench_control [NODES] [RANKS_PER_NODE] [GLOBAL_BATCH] [STEPS] [WORKLOAD] [SAMPLES]
 * SAMPLES: the dataset (default 8 global batches; an epoch's boundary falls every SAMPLES / G
 * steps, where "max" shows what starting an epoch costs).
 */
#include "bench_clock.h"
#include "run/run.h"

/* Under callgrind (bench/count_control.sh) only the timed parts are counted: the instructions
 * a step, which this VM's noise does not move (its timings move by a fifth within the hour).
 * Valgrind's header, when installed; without it the marks are nothing. */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define TIMED_MARK() CALLGRIND_TOGGLE_COLLECT
#endif
#endif
#ifndef TIMED_MARK
#define TIMED_MARK() ((void)0)
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The exact costs every node's STEP record carries (the benchmark takes them from the
 * truth, as if every sample were prepared), and each node's load. */
typedef struct {
    float *costs; /* nodes x ncost */
    double *load; /* nodes */
    int64_t ncost;
} record_set;

static const float *record_costs(const void *ctx, int node)
{
    const record_set *c = ctx;
    return c->costs + node * c->ncost;
}

/* Node k's costs of step ns as dh__nodes_offer found them before 2026-12-06: a walk of the
 * step's positions until ncost of its own (BENCH_WALK=1). */
static void walk_costs(dh__sched *s, int64_t ns, int k, int rpn, int64_t G,
                       const int64_t *order, const dh__run *run, float *cost, int64_t ncost)
{
    int64_t n = 0;
    for (int64_t j = 0; j < G && n < ncost; j++)
        if (dh__sched_rank_of(s, ns, j) / rpn == k)
            cost[n++] = (float)run->truth.of[order[j]].gpu;
    for (; n < ncost; n++)
        cost[n] = -1;
}

/* The engine's accept callback for its group's plan finds the batches that get samples
 * (their layouts and the room they need: here only counted) before carrying it out, which
 * is the data plane's (copies: not here). */
static int64_t receivers, walk_G; /* walk_G: the global batch, walk_R the ranks */
static int walk_R;

static int count_receiver(void *ctx, int r, const int64_t *samples, int32_t n)
{
    (void)ctx;
    (void)r;
    receivers += n > 0 && samples[0] >= 0;
    return 0;
}

static int accept_plan(void *ctx, int64_t st, const int32_t *rank_of)
{
    return dh__sched_receivers(ctx, st, rank_of, count_receiver, NULL);
}

/* ...as it did before 2026-12-06 (BENCH_WALK=1): the plan's samples grouped by rank by a
 * walk of the whole step, over the whole step's new ranks (which the scheduler copied for
 * every plan until 2026-12-08; it now gives a group's plan at the group's positions). */
static int accept_walking(void *ctx, int64_t st, const int32_t *plan_rank)
{
    dh__sched *s = ctx;
    int64_t G = walk_G;
    int R = walk_R;
    const int64_t *order = dh__sched_step_order(s, st);
    int64_t *samples = malloc((size_t)G * sizeof *samples);
    int32_t *end = calloc((size_t)R + 1, sizeof *end);
    uint8_t *gets = calloc((size_t)R, 1);
    int32_t *rank_of = malloc((size_t)G * sizeof *rank_of), np = 0;
    if (!samples || !end || !gets || !rank_of)
        return free(samples), free(end), free(gets), free(rank_of), 1;
    for (int64_t k = 0; k < G; k++)
        rank_of[k] = dh__sched_rank_of(s, st, k);
    const int32_t *P = dh__sched_plan_positions(s, st, &np);
    for (int32_t i = 0; i < (P ? np : (int32_t)G); i++)
        rank_of[P ? P[i] : i] = plan_rank[P ? P[i] : i];
    for (int64_t k = 0; k < G; k++) {
        end[rank_of[k] + 1]++;
        gets[rank_of[k]] |= dh__sched_rank_of(s, st, k) != rank_of[k];
    }
    for (int r = 0; r < R; r++)
        end[r + 1] += end[r];
    for (int64_t k = 0; k < G; k++)
        samples[end[rank_of[k]]++] = order[k];
    for (int r = 0; r < R; r++)
        if (gets[r])
            count_receiver(NULL, r, samples + (r ? end[r - 1] : 0),
                           end[r] - (r ? end[r - 1] : 0));
    free(samples);
    free(end);
    free(gets);
    free(rank_of);
    return 0;
}

/* A rank's step as its node's STEP record says it (as the engine's wire record lays it out:
 * the records' fields, then the scheduler's). */
typedef struct {
    double asked, ready, compute, longest, taken, released;
} bench_rank;

/* The whole job's replica draws the steps the timed one drew (the same order). */
typedef struct {
    const dh__sched *timed;
    int64_t G, drawn;
} job_order;

static int job_next(void *ctx, int64_t *out, float *cpu)
{
    job_order *j = ctx;
    const int64_t *order = dh__sched_step_order(j->timed, j->drawn);
    if (!order || cpu)
        return DH_EINVAL; /* drawn there first; no drawn CPU (checked at start) */
    memcpy(out, order, (size_t)j->G * sizeof *out);
    j->drawn++;
    return 0;
}

/* Node k's costs of step ns in the step's order (as far as ncost) and its load, as
 * dh__nodes_offer computes them over its own positions. */
static void node_costs(const dh__sched *s, int64_t ns, int k, const int64_t *order,
                       const dh__run *run, float *cost, int64_t ncost, double *load)
{
    int32_t n = 0;
    const int32_t *pos = dh__sched_node_positions(s, ns, k, &n);
    int64_t i = 0;
    for (; i < n && i < ncost; i++)
        cost[i] = (float)run->truth.of[order[pos[i]]].gpu;
    for (; i < ncost; i++)
        cost[i] = -1;
    load[k] = dh__sched_node_load(s, ns, k, cost, ncost);
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: bench_control [NODES (1024)] [RANKS_PER_NODE (8)] [GLOBAL_BATCH (32768)] "
               "[STEPS (20)] [WORKLOAD (omni-mix)] [SAMPLES (8 x GLOBAL_BATCH)]\n"
               "one agent's control plane per step on node 0 of NODES, against the step's "
               "simulated compute (bench/RESULTS.md, issue 25)\n");
        return 0;
    }
    int nodes = argc > 1 ? atoi(argv[1]) : 1024, rpn = argc > 2 ? atoi(argv[2]) : 8;
    int64_t G = argc > 3 ? atoll(argv[3]) : 32768, steps = argc > 4 ? atoll(argv[4]) : 20;
    const char *wl = argc > 5 ? argv[5] : "omni-mix";
    int64_t samples = argc > 6 ? atoll(argv[6]) : 8 * G; /* epochs go round it */
    if (nodes < 1 || rpn < 1 || steps < 2 || G < (int64_t)nodes * rpn || samples < G) {
        fprintf(stderr, "usage: bench_control [NODES] [RANKS_PER_NODE] [GLOBAL_BATCH >= ranks] "
                        "[STEPS >= 2] [WORKLOAD] [SAMPLES >= GLOBAL_BATCH]\n");
        return 2;
    }
    dh_run_config cfg;
    dh_run_config_default(&cfg);
    cfg.workload = wl;
    cfg.policy = "helix";
    cfg.ranks = nodes * rpn;
    cfg.workers = nodes * 32;
    cfg.nodes = nodes;
    cfg.global_batch = G;
    cfg.steps = steps;
    cfg.workload_samples = samples;
    const char *kind = getenv("BENCH_ORDER"); /* "stratified": --order stratified */
    cfg.order = kind && !strcmp(kind, "stratified") ? DH_ORDER_STRATIFIED : DH_ORDER_UNIFORM;
    char err[512];
    dh__run run;
    if (dh__run_setup(&cfg, &run, err, sizeof err)) {
        fprintf(stderr, "bench_control: %s\n", err);
        return 1;
    }
    dh__records rec; /* the job's records, as an engine keeps them (the header) */
    int with_rec = !getenv("BENCH_NO_RECORDS");
    int walk = getenv("BENCH_WALK") != NULL; /* the agreement as before 2026-12-06 */
    walk_G = G;
    if (dh__records_init(&rec, cfg.ranks, G)) {
        fprintf(stderr, "bench_control: no records\n");
        return 1;
    }
    rec.step_fixed = run.gpu.c0;
    run.rec = with_rec ? &rec : NULL;
    run.truth_by_nodes = 1; /* as an engine of several nodes: each sums its own batches' */
    /* each node's share of a step's truth (gpu, max, cpu), as their records bring it: the
     * others' left at 0 (computing them here, untimed, only evicted the agent's own data) */
    double *part = calloc((size_t)nodes * 3, sizeof *part);
    dh__sched_config sc;
    run.cfg.memory_budget = dh__run_node_budget(&run, 0, 0); /* as the engine sets a node's */
    dh__run_sched_config(&run, 0, &sc);
    sc.node_local = 1;
    sc.node = 0;
    dh__sched *s = NULL, *job = NULL;
    if (sc.order_cpu) { /* the job's replica would place on other CPU predictions */
        fprintf(stderr, "bench_control: %s draws each sample's CPU (random augmentation "
                        "keys), which the job's view does not copy\n", wl);
        return 2;
    }
    job_order jo = {NULL, G, 0};
    dh__sched_config jc = sc;
    jc.next_order = job_next;
    jc.order_ctx = &jo;
    jc.carry_bytes = NULL; /* the same deal from its table */
    if (dh__sched_new(&sc, &s) || (jo.timed = s, dh__sched_new(&jc, &job))) {
        fprintf(stderr, "bench_control: no scheduler\n");
        return 1;
    }
    int R = walk_R = cfg.ranks, first = 0, nw = dh__sched_node_workers(s, 0, &first);
    int64_t *buf = malloc((size_t)G * sizeof *buf);
    double *gpu = calloc((size_t)R, sizeof *gpu);
    bench_rank *xr = malloc((size_t)R * sizeof *xr);
    float *known = malloc((size_t)G * sizeof *known);
    record_set cc = {NULL, NULL, G < 2 * ((G + nodes - 1) / nodes) + 8 ? G
                                 : 2 * ((G + nodes - 1) / nodes) + 8}; /* as nodes.c */
    cc.costs = malloc((size_t)(nodes * cc.ncost) * sizeof *cc.costs);
    cc.load = malloc((size_t)nodes * sizeof *cc.load);
    uint8_t *frozen = calloc((size_t)R, 1);
    dh__task *running = malloc((size_t)nw * sizeof *running);
    if (!buf || !gpu || !xr || !running || !known || !frozen || !part || !cc.costs || !cc.load)
        return 1;
    double now = 0, ctl_sum = 0, ctl_max = 0, step_sum = 0, others_sum = 0, reb_sum = 0;
    /* the same past the first quarter of the steps: the start's first touches of the tables
     * (the window's steps, the records) left out, as a job of many steps pays them once */
    int64_t settled = steps / 4 > 1 ? steps / 4 : 1;
    double late_ctl = 0, late_step = 0;
    int64_t tasks = 0;
    for (int64_t st = 0; st < steps; st++) {
        TIMED_MARK(); /* counted from here... */
        double t0 = bench_seconds(CLOCK_PROCESS_CPUTIME_ID), others = -1;
        /* its workers prepare every task of its ranks for this step (and what the window
         * admits ahead of it), each finishing at its predicted cost */
        for (int r = 0; r < rpn; r++) {
            while (!dh__sched_batch_ready(s, st, r)) {
                int n = 0;
                for (int w = first; w < first + nw; w++)
                    if (dh__sched_next_task(s, w, now, &running[n]) == 0)
                        n++;
                if (n == 0) {
                    fprintf(stderr, "bench_control: step %lld rank %d not ready and no task\n",
                            (long long)st, r);
                    return 1;
                }
                for (int k = 0; k < n; k++)
                    dh__sched_task_done(s, &running[k], now, running[k].pred_cost,
                                        run.truth.of[running[k].sample].gpu);
                tasks += n;
            }
        }
        double t_ready = bench_seconds(CLOCK_PROCESS_CPUTIME_ID);
        TIMED_MARK(); /* ...to here, as timed */
        /* the step's compute, from the workload's GPU model (simulated; not the agent's), over
         * the batches as the job's nodes placed them and moved */
        double step_gpu = 0;
        memset(part, 0, 3 * sizeof *part);
        for (int r = 0; r < R; r++) {
            int32_t n = dh__sched_batch_samples(job, st, r, buf, (int32_t)G);
            if (n < 0) {
                fprintf(stderr, "bench_control: the job's step %lld: %s\n", (long long)st,
                        dh_strerror(n));
                return 1;
            }
            gpu[r] = 0;
            for (int32_t k = 0; k < n; k++)
                gpu[r] += run.truth.of[buf[k]].gpu;
            step_gpu = gpu[r] > step_gpu ? gpu[r] : step_gpu;
        }
        double step_s = step_gpu + run.gpu.c0;
        for (int r = rpn; r < R; r++) /* the other nodes' ranks as their records say */
            xr[r] = (bench_rank){now, now, gpu[r], 0, now, now + gpu[r]};
        TIMED_MARK();
        double t1 = bench_seconds(CLOCK_PROCESS_CPUTIME_ID);
        for (int r = 0; with_rec && r < rpn; r++) { /* its own share, into its record */
            int32_t n = dh__sched_batch_samples(s, st, r, buf, (int32_t)G);
            dh__run_add_truth(&run, st, buf, n, part, part + 1, part + 2);
        }
        for (int r = 0; r < rpn; r++) { /* its own ranks' */
            dh__sched_batch_taken(s, r, st, now);
            dh__sched_step_done(s, r, st, now + gpu[r], gpu[r]);
        }
        if (nodes > 1) /* (one node: none to apply) */
            others = bench_seconds(CLOCK_PROCESS_CPUTIME_ID);
        for (int k = 1; k < nodes; k++) /* the others', node by node from their records */
            dh__sched_ranks_stepped(s, st, k * rpn, rpn, &xr[k * rpn].taken,
                                    &xr[k * rpn].released, &xr[k * rpn].compute, sizeof *xr);
        for (int k = 1; with_rec && k < nodes; k++) /* and into the job's records, as the
                                                     * engine writes them (until 2026-12-07
                                                     * the benchmark left them out) */
            dh__records_ranks(&rec, st, k * rpn, rpn, &xr[k * rpn].asked, &xr[k * rpn].ready,
                              &xr[k * rpn].compute, &xr[k * rpn].longest, sizeof *xr);
        dh__rec_step *sp = with_rec ? dh__records_step(&rec, st) : NULL;
        for (int k = 0; sp && k < nodes; k++) { /* every node's share, as apply_step adds */
            sp->gpu_sum += part[3 * k];
            sp->gpu_max = part[3 * k + 1] > sp->gpu_max ? part[3 * k + 1] : sp->gpu_max;
            sp->cpu_sum += part[3 * k + 2];
            rec.cpu_true_sum += part[3 * k + 2];
        }
        if (with_rec)
            dh__records_close(&rec, st);
        others = others < 0 ? 0 : bench_seconds(CLOCK_PROCESS_CPUTIME_ID) - others; /* 1 node */
        now += step_s;
        double t_reb_start = bench_seconds(CLOCK_PROCESS_CPUTIME_ID);
        TIMED_MARK();
        for (int r = 0; r < R; r++) { /* the job's replica: every rank's step done */
            dh__sched_batch_taken(job, r, st, now - step_s);
            dh__sched_step_done(job, r, st, now - step_s + gpu[r], gpu[r]);
        }
        /* the next step's agreed moves: every sample's exact cost came in the records (the
         * benchmark reads them from the truth: not the agent's time) */
        int64_t ns = st + 1;
        double t_reb = 0;
        if (ns < steps) {
            const int64_t *order = dh__sched_step_order(s, ns);
            if (!order) { /* planned by now: the window reaches past the next step */
                fprintf(stderr, "bench_control: step %lld not planned\n", (long long)ns);
                return 1;
            }
            /* Every node's STEP record carries its samples' exact costs of ns in the step's
             * order and its load, which each node computes over its own share (node 0's
             * timed: dh__nodes_offer); without a deal to nodes, every cost */
            int32_t n0;
            int by_node = dh__sched_node_positions(s, ns, 0, &n0) != NULL && !walk;
            for (int k = by_node ? 1 : nodes; k < nodes; k++)
                node_costs(s, ns, k, order, &run, cc.costs + k * cc.ncost, cc.ncost, cc.load);
            for (int64_t j = 0; !by_node && !walk && j < G; j++)
                known[j] = (float)run.truth.of[order[j]].gpu;
            for (int k = 0; walk && k < nodes; k++) /* the records, as the others sent them */
                walk_costs(s, ns, k, rpn, G, order, &run, cc.costs + k * cc.ncost, cc.ncost);
            TIMED_MARK();
            t_reb = bench_seconds(CLOCK_PROCESS_CPUTIME_ID);
            if (by_node)
                node_costs(s, ns, 0, order, &run, cc.costs, cc.ncost, cc.load);
            if (walk) { /* before 2026-12-06: node 0's costs and every known by walks of G */
                walk_costs(s, ns, 0, rpn, G, order, &run, cc.costs, cc.ncost);
                int64_t *seen = (int64_t *)cc.load; /* nodes, scratch */
                memset(seen, 0, (size_t)nodes * sizeof *seen);
                for (int64_t j = 0; j < G; j++) {
                    int k = dh__sched_rank_of(s, ns, j) / rpn;
                    int64_t i = seen[k]++;
                    known[j] = i < cc.ncost ? cc.costs[k * cc.ncost + i] : -1;
                }
            }
            dh__reb_agreed a = {.frozen = frozen, .known = by_node ? NULL : known,
                                .gpu_mape = dh__calib_gpu_mape(dh__sched_calib(s)),
                                .move_factor = 1, .net_factor = 1, .count = 1,
                                .costs_of = by_node ? record_costs : NULL, .costs_ctx = &cc,
                                .ncost = cc.ncost, .node_load = by_node ? cc.load : NULL};
            dh__sched_rebalance_agreed(s, ns, &a, walk ? accept_walking : accept_plan, s);
            t_reb = bench_seconds(CLOCK_PROCESS_CPUTIME_ID) - t_reb;
            TIMED_MARK();
            /* the job's moves (not this agent's time), on the job's replica: node 0's group's
             * as the timed one planned them, then the other groups', which their nodes plan:
             * the step the job takes, and the job's moves in the counts below */
            if (dh__sched_rank_of(job, ns, 0) < 0) {
                fprintf(stderr, "bench_control: the job's step %lld not planned\n",
                        (long long)ns);
                return 1;
            }
            dh__sched_rebalance_agreed(job, ns, &a, NULL, NULL);
            a.other_groups = 1;
            dh__sched_rebalance_agreed(job, ns, &a, NULL, NULL);
        }
        double ctl = (t_reb_start - t1) + t_reb + (t_ready - t0);
        if (st > 0) { /* step 0 plans the window's first steps at once */
            ctl_sum += ctl;
            ctl_max = ctl > ctl_max ? ctl : ctl_max;
            step_sum += step_s;
            others_sum += others;
            reb_sum += t_reb;
        }
        if (st >= settled) {
            late_ctl += ctl;
            late_step += step_s;
        }
    }
    int64_t n = steps - 1;
    printf("%d nodes x %d ranks, global batch %lld, %s: one agent's control plane %.3f ms a step "
           "(max %.3f; applying the other nodes' ranks %.3f, agreeing moves %.3f) against a %.1f ms "
           "step (simulated): %.2f%%; %lld tasks of its own\n",
           nodes, rpn, (long long)G, wl, 1e3 * ctl_sum / n, 1e3 * ctl_max, 1e3 * others_sum / n,
           1e3 * reb_sum / n,
           1e3 * step_sum / n, 100.0 * ctl_sum / step_sum, (long long)tasks);
    printf("  past the first %lld steps: %.3f ms a step, %.2f%% of the step\n", (long long)settled,
           1e3 * late_ctl / (double)(steps - settled), 100.0 * late_ctl / late_step);
    const dh__reb_stats *rs = dh__sched_reb_stats(job);
    printf("  agreed plans: %lld moves considered, %lld made, %lld gated off (%.0f a step)\n",
           (long long)rs->considered, (long long)rs->moved, (long long)rs->gated,
           (double)rs->considered / (double)(steps - 1));
    dh__sched_free(job);
    dh__sched_free(s);
    run.rec = NULL;
    dh__records_free(&rec);
    dh__run_free(&run);
    free(buf);
    free(gpu);
    free(xr);
    free(running);
    free(known);
    free(cc.costs);
    free(cc.load);
    free(frozen);
    free(part);
    return 0;
}
