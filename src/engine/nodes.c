/*
 * nodes.c - the real engine as one node of several (docs/MULTINODE.md): this
 * process runs its node's ranks and workers; every node's scheduler plans
 * every step alike, and the nodes exchange what happened after each step.
 * This file sets the layer up, runs the GREETING and HELLO rounds (is every
 * node the same release, running the same job?) and tears it down; the
 * others are listed in nodes_int.h.
 *
 * DESIGN
 * - The exchange is dh_run_config.exchange, an allgather of one fixed-size
 *   record per node (the agent implements it with MPI; tests with threads).
 *   The library itself has no MPI in it.
 * - Rounds, all through the same allgather, every node taking part in each:
 *   GREETING first (32 bytes that never change: the wire version, nodes_wire.h),
 *   HELLO when the engine starts (the job's identity: an agent of another job
 *   is refused before it waits for its trainers), BEGIN once before the
 *   workers start (the resume point) (every node checks that it runs the
 *   same job as node 0; the shared start of the clock is the moment it
 *   returns); STEP st once every local rank released step st; FINAL when the
 *   node's run is over, repeated until every node's record is FINAL (its
 *   totals: CPU, memory, moves). A STEP round that meets another node's
 *   FINAL record means that node stopped: the step is not applied (no node
 *   closes it) and this node stops too, so every node counts the same steps.
 * - After a STEP round each node applies the other nodes' ranks to its
 *   replica: their records (asked, ready, compute, longest task), batch taken
 *   and step done in the scheduler, and the step's releases, which close the
 *   step when every rank is in. So every node holds the whole run's records
 *   and computes the same result.
 * - Stopping is agreed: should_stop is read when a node builds its STEP
 *   record, and every node stops after the first step any node asked to.
 * - One thread per node does the exchanges (never holding e->mu while it
 *   waits); emulated ranks wait for their step's exchange (the all-reduce of
 *   a synchronous job), trainers attached to `serve` do not.
 * - Messages (send, recv; one thread receives): lending (STEAL, TASK,
 *   NOTASK, RESULT) and the agreed rebalancing moves (MOVE), each described
 *   where it is handled below.
 */
#include "nodes_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tests: records carry at most this many exact costs (< 0: as many as computed). */
static _Atomic int64_t test_cost_cap = -1;

void dh__eng_test_cost_cap(int64_t n)
{
    test_cost_cap = n;
}

int dh__eng_nodes_init(dh_engine *e)
{
    const dh_run_config *c = &e->run.cfg;
    e->nodes = c->exchange && c->nodes > 1 ? c->nodes : 1;
    e->node = e->nodes > 1 ? c->node : 0;
    int per = e->R / e->nodes;
    e->rank_lo = e->node * per;
    e->rank_hi = e->rank_lo + per;
    if (e->nodes == 1)
        return 0;
    struct dh__xchg *x = dh__calloc(1, sizeof *x);
    if (!x)
        return DH_ENOMEM;
    e->x = x;
    const dh__policy_caps *caps = dh__policy_caps_of(e->run.policy);
    x->moving = c->send && c->recv && caps->rebalance;
    x->open_at = sizeof(xrec) + (size_t)per * sizeof(xrank);
    x->cost_at = x->open_at + dh__align_up((size_t)per, 8);
    /* A node's share of a step is G / N samples on average; a record carries the exact
     * costs of twice that (its first ones in the step's order), so it stays small at many
     * nodes. A sample past that is planned as unknown by every node, its own included. */
    x->ncost = DH_MIN(e->G, 2 * ((e->G + e->nodes - 1) / e->nodes) + 8);
    if (test_cost_cap >= 0)
        x->ncost = DH_MIN(x->ncost, test_cost_cap);
    size_t end = x->moving ? x->cost_at + (size_t)x->ncost * sizeof(float) : x->open_at;
    x->bytes = dh__align_up(end, 64);
    x->mine = dh__calloc(1, x->bytes);
    x->all = dh__calloc((size_t)e->nodes, x->bytes);
    pthread_cond_init(&x->cv, NULL);
    x->asking = -1;
    x->lending = c->send && c->recv && caps->lend;
    x->late = dh__calloc((size_t)e->nodes, sizeof *x->late);
    x->late_bytes = dh__calloc((size_t)e->nodes, sizeof *x->late_bytes);
    x->skip = dh__calloc((size_t)e->nodes, 1);
    int64_t biggest = 0;
    for (int64_t i = 0; i < e->run.samples.n; i++)
        biggest = DH_MAX(biggest, e->run.samples.bytes[i]);
    x->lim = (dh__wire_limits){e->nodes, per, e->run.samples.n, e->G,
                               biggest + ITEM_ALIGN * DH__WIRE_MAX_ITEMS, DH_MAX(1, c->workers),
                               x->bytes};
    if (x->moving) {
        x->mv_frozen = dh__calloc((size_t)e->R, 1);
        x->mv_known = dh__calloc((size_t)e->G, sizeof *x->mv_known);
        x->mv_need = dh__calloc((size_t)e->nodes * 2, sizeof *x->mv_need);
        x->mv_n = x->mv_need ? x->mv_need + e->nodes : NULL;
        if (!x->mv_frozen || !x->mv_known || !x->mv_need)
            return DH_ENOMEM;
    }
    return x->mine && x->all && x->late && x->late_bytes && x->skip ? 0 : DH_ENOMEM;
}

void dh__eng_nodes_free(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    if (!x)
        return;
    pthread_cond_destroy(&x->cv);
    free(x->mine);
    free(x->all);
    free(x->late);
    free(x->late_bytes);
    free(x->skip);
    free(x->lent);
    for (int k = 0; k < x->rq_n; k++)
        free(x->rq[(x->rq_head + k) % x->rq_cap]);
    free(x->rq);
    free(x->back);
    free(x->mv_frozen);
    free(x->mv_known);
    free(x->mv_need);
    for (int k = 0; k < x->nout; k++)
        free(x->out[k].data);
    for (int k = 0; k < x->nparked; k++)
        free(x->parked[k].data);
    free(x->out);
    free(x->parked);
    free(x);
    e->x = NULL;
}

const char *dh__eng_nodes_error(const dh_engine *e)
{
    return e->x ? e->x->err : "";
}

void dh__eng_nodes_own_error(dh_engine *e, const char *why)
{
    struct dh__xchg *x = e->x;
    if (!x || !why || x->err[0])
        return;
    dh__msg(x->err, sizeof x->err, "%s", why);
    x->own = 1;
}

void dh__eng_nodes_wake(dh_engine *e)
{
    if (e->x)
        pthread_cond_broadcast(&e->x->cv);
}

/* One round of `bytes` from mine into all, every node's (without e->mu). */
static int exchange(dh_engine *e, const void *mine, void *all, size_t bytes, char *err,
                    size_t errlen)
{
    err[0] = 0;
    int rc = e->run.cfg.exchange(e->run.cfg.exchange_user, mine, all, bytes, err, errlen);
    if (rc && !err[0])
        dh__msg(err, errlen, "the exchange between nodes failed: %s", dh_strerror(rc));
    return rc;
}

int dh__nodes_round(dh_engine *e, char *err, size_t errlen)
{
    struct dh__xchg *x = e->x;
    x->mine->node = e->node;
    int rc = exchange(e, x->mine, x->all, x->bytes, err, errlen);
    for (int k = 0; !rc && k < e->nodes; k++)
        rc = dh__wire_check_record(&x->lim, k, rec_of(x, k), err, errlen);
    return rc;
}

int dh__nodes_push(void **arr, int *n, int *cap, size_t size, const void *item)
{
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 8;
        void *p = realloc(*arr, (size_t)nc * size);
        if (!p)
            return DH_ENOMEM;
        *arr = p;
        *cap = nc;
    }
    memcpy((char *)*arr + (size_t)(*n)++ * size, item, size);
    return 0;
}

void dh__nodes_refuse(dh_engine *e, const char *fmt, ...)
{
    if (!e->x->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->x->err, sizeof e->x->err, fmt, ap);
        va_end(ap);
    }
    dh__eng_fail(e, DH_EPARSE);
}

/* ------------------------------------------------------------ greeting, hello */

static void fill_hello(dh_engine *e, xrec *m)
{
    const dh_run_config *c = &e->run.cfg;
    memset(m, 0, e->x->bytes);
    m->kind = X_HELLO;
    m->manifest_hash = dh_manifest_hash(e->run.m);
    m->spec_hash = e->spec ? dh_spec_hash(e->spec) : 0;
    m->seed = c->seed;
    m->ranks = c->ranks;
    m->workers = c->workers;
    m->batch = c->global_batch;
    m->steps = e->N;
    m->budget = c->memory_budget;
    dh_sampler_state where; /* where the order starts (a resumed job: every node alike) */
    dh_sampler_get_state(e->run.sampler, &where);
    m->start_epoch = where.epoch;
    m->start_step = where.step;
    m->order = (c->no_shuffle ? 1 : 0) | (c->keep_last ? 2 : 0);
    m->serving = e->shared > 0;
    m->leases = e->shared;
    m->resume = c->resume;
    m->rank_token_cap = c->rank_token_cap;
    m->rank_byte_cap = c->rank_byte_cap;
    m->cpu_scale = c->cpu_cost_scale;
    m->rho = c->rho;
    m->net_bandwidth = c->net_bandwidth;
    m->net_latency = c->net_latency;
    m->move_bandwidth = c->move_bandwidth;
    m->max_failed = c->max_failed_frac;
    m->sample_timeout = c->sample_timeout_s;
    snprintf(m->policy, sizeof m->policy, "%s", dh__policy_name(e->run.policy));
    snprintf(m->workload, sizeof m->workload, "%s", e->run.workload);
}

/*
 * The first setting in which node k's job differs from node 0's, or NULL. Settings a user
 * gives come before what is derived from them (the memory budget follows the workload, the
 * spec, the policy and the leases: a node started with another --spec is told so, not that
 * its budget differs).
 */
static const char *job_differs(const xrec *a, const xrec *b)
{
    return a->serving != b->serving
               ? "the command: one node serves trainers (datahelix serve), another runs "
                 "emulated ranks (datahelix run)"
           : a->manifest_hash != b->manifest_hash ? "the manifest (its hash)"
           : strcmp(a->workload, b->workload)     ? "--workload"
           : a->spec_hash != b->spec_hash         ? "the preprocessing spec (--spec)"
           : strcmp(a->policy, b->policy)         ? "--policy"
           : a->seed != b->seed                   ? "--seed"
           : a->ranks != b->ranks                 ? "--ranks"
           : a->workers != b->workers             ? "--workers"
           : a->batch != b->batch                 ? "--batch"
           : a->steps != b->steps                 ? "the run's length (--steps, --epochs)"
           : a->order != b->order                 ? "the sample order (--no-shuffle, --keep-last)"
           : a->leases != b->leases               ? "--max-leases"
           : a->cpu_scale != b->cpu_scale         ? "the CPU calibration (--cpu-cost-scale, "
                                                    "--calibrate)"
           : a->rho != b->rho                     ? "--rho"
           : a->net_bandwidth != b->net_bandwidth || a->net_latency != b->net_latency
               ? "the network model (--net-gbps, --net-latency-us)"
           : a->move_bandwidth != b->move_bandwidth ? "the move bandwidth"
           : a->rank_token_cap != b->rank_token_cap || a->rank_byte_cap != b->rank_byte_cap
               ? "the per-rank caps"
           : a->max_failed != b->max_failed       ? "--max-failed"
           : a->sample_timeout != b->sample_timeout ? "the per-sample time limit"
           : a->budget != b->budget               ? "--memory-budget"
                                                  : NULL;
}

/* Where node k's run starts, if not where node 0's does (every rank must restore the same
 * checkpoint), or NULL. */
static const char *start_differs(const xrec *a, const xrec *b)
{
    return a->resume != b->resume || a->start_epoch != b->start_epoch ||
                   a->start_step != b->start_step
               ? "the resume point (every rank must restore the same checkpoint)"
               : NULL;
}

int dh__nodes_greet(dh_engine *e, char *err, size_t errlen)
{
    struct dh__xchg *x = e->x;
    dh__wire_greeting mine = {DH__WIRE_MAGIC, DH__WIRE_VERSION, x->bytes, e->node, 0, 0};
    dh__wire_greeting *all = dh__calloc((size_t)e->nodes, sizeof *all);
    if (!all)
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    int rc = exchange(e, &mine, all, sizeof mine, err, errlen);
    if (!rc)
        rc = dh__wire_check_greetings(all, e->nodes, x->bytes, err, errlen);
    x->greeted = rc ? -1 : 1; /* every node read the same greetings: they decide alike */
    free(all);
    return rc;
}

/* One HELLO (identity) or BEGIN (where the run starts) round: a node that gave up before is
 * named with its reason, a node of another job with the setting that differs. */
static int meet(dh_engine *e, int kind, char *err, size_t errlen)
{
    struct dh__xchg *x = e->x;
    fill_hello(e, x->mine);
    x->mine->kind = kind;
    int rc = dh__nodes_round(e, err, errlen);
    for (int k = 0; !rc && k < e->nodes; k++) /* a node that gave up before it began */
        if (rec_of(x, k)->kind == X_FINAL)
            rc = dh__fail(err, errlen, DH_EPEER, "node %d stopped before the run began: %s", k,
                          rec_of(x, k)->msg[0] ? rec_of(x, k)->msg
                                               : dh_strerror(rec_of(x, k)->error));
    for (int k = 0; !rc && k < e->nodes; k++)
        if (rec_of(x, k)->kind != kind)
            rc = dh__fail(err, errlen, DH_EPARSE, "node %d is out of step at the %s round", k,
                          kind == X_HELLO ? "HELLO" : "BEGIN");
    for (int k = 1; !rc && k < e->nodes; k++) {
        const char *what = kind == X_HELLO ? job_differs(rec_of(x, 0), rec_of(x, k))
                                           : start_differs(rec_of(x, 0), rec_of(x, k));
        if (what)
            rc = dh__fail(err, errlen, DH_EINVAL, "node %d was started on another job than "
                          "node 0: %s differs; every node must run the same command", k, what);
    }
    return rc;
}

int dh__eng_nodes_hello(dh_engine *e, char *err, size_t errlen)
{
    if (!e->x)
        return 0;
    int rc = dh__nodes_greet(e, err, errlen);
    return rc ? rc : meet(e, X_HELLO, err, errlen);
}

int dh__eng_nodes_begin(dh_engine *e, char *err, size_t errlen)
{
    struct dh__xchg *x = e->x;
    if (!x) {
        clock_gettime(CLOCK_MONOTONIC, &e->t0);
        return 0;
    }
    int rc = meet(e, X_BEGIN, err, errlen);
    if (rc)
        return rc;
    x->began = 1;
    clock_gettime(CLOCK_MONOTONIC, &e->t0); /* every node leaves the round together */
    rc = dh__thread_create(&x->thread, dh__nodes_exchange_main, e);
    if (rc)
        return dh__fail(err, errlen, rc, "cannot start the exchange thread");
    x->started = 1;
    int messages = x->lending || x->moving;
    if (messages && (rc = dh__thread_create(&x->mthread, dh__nodes_message_main, e)))
        return dh__fail(err, errlen, rc, "cannot start the lending thread");
    x->mstarted = messages;
    if (x->moving) /* every node makes each plan: one counts what it moved and gained */
        dh__sched_reb_counting(e->sched, e->node == 0);
    return 0;
}

void dh__eng_nodes_sched_config(dh_engine *e, dh__sched_config *sc)
{
    sc->node_local = e->nodes > 1;
    sc->node = e->node;
}

