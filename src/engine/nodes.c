/*
 * nodes.c - the real engine as one node of several (docs/MULTINODE.md): this
 * process runs its node's ranks and workers; every node's scheduler plans
 * every step alike, and the nodes exchange what happened after each step.
 * This file sets the layer up, begins it and tears it down, and holds its
 * table of entries for the engine (dh__several_nodes); nodes_meet.c runs
 * the GREETING, HELLO and BEGIN rounds; the others are listed in
 * nodes_int.h. Calls within the layer go one way: this file calls the
 * others, nodes_meet.c and nodes_wire.c call none of them.
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
 *   record; after a round where any node asked, a CUTOFF round agrees the
 *   furthest step any rank took, and every node serves up to it and stops
 *   (nodes_step.c).
 * - One thread per node does the exchanges (never holding e->mu while it
 *   waits); emulated ranks wait for their step's exchange (the all-reduce of
 *   a synchronous job), trainers attached to `serve` do not.
 * - Messages (send, recv; one thread receives): lending (STEAL, TASK,
 *   NOTASK, RESULT) and the agreed rebalancing moves (MOVE), each described
 *   where it is handled below.
 */
#include "nodes_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tests: records carry at most this many exact costs (< 0: as many as computed). */
static _Atomic int64_t test_cost_cap = -1;

void dh__eng_test_cost_cap(int64_t n)
{
    test_cost_cap = n;
}

/* This node's share of the ranks and workers, the scheduler's node fields, the layer's state. */
static int nodes_init(dh_engine *e, dh__sched_config *sc)
{
    const dh_run_config *c = &e->run.cfg;
    e->nodes = c->nodes;
    e->node = c->node;
    int per = e->R / e->nodes;
    e->rank_lo = e->node * per;
    e->rank_hi = e->rank_lo + per;
    sc->node_local = 1;
    sc->node = e->node;
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
    x->stop_from = -1;
    x->lending = c->send && c->recv && caps->lend;
    x->late = dh__calloc((size_t)e->nodes, sizeof *x->late);
    x->late_bytes = dh__calloc((size_t)e->nodes, sizeof *x->late_bytes);
    x->skip = dh__calloc((size_t)e->nodes, 1);
    x->truth_buf = dh__calloc((size_t)e->G, sizeof *x->truth_buf);
    e->run.truth_by_nodes = 1; /* each node sums its own batches' truth (nodes_step.c) */
    int64_t biggest = e->run.bytes_max;
    x->lim = (dh__wire_limits){e->nodes, per, e->run.samples.n, e->G,
                               biggest + ITEM_ALIGN * DH__WIRE_MAX_ITEMS, DH_MAX(1, c->workers),
                               x->bytes, e->N};
    if (x->moving) {
        x->mv_frozen = dh__calloc((size_t)e->R, 1);
        x->mv_load = dh__calloc((size_t)e->nodes, sizeof *x->mv_load);
        x->mv_need = dh__calloc((size_t)e->nodes * 2, sizeof *x->mv_need);
        x->mv_n = x->mv_need ? x->mv_need + e->nodes : NULL;
        if (!x->mv_frozen || !x->mv_load || !x->mv_need)
            return DH_ENOMEM;
    }
    return x->mine && x->all && x->late && x->late_bytes && x->skip && x->truth_buf ? 0
                                                                                 : DH_ENOMEM;
}

static void nodes_free(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    if (!x) /* its allocation failed */
        return;
    pthread_cond_destroy(&x->cv);
    free(x->mine);
    free(x->all);
    free(x->late);
    free(x->late_bytes);
    free(x->skip);
    free(x->truth_buf);
    free(x->lent);
    for (int k = 0; k < x->rq_n; k++)
        free(x->rq[(x->rq_head + k) % x->rq_cap]);
    free(x->rq);
    free(x->back);
    free(x->mv_frozen);
    free(x->mv_load);
    free(x->mv_need);
    for (int k = 0; k < x->nout; k++)
        free(x->out[k].items);
    for (int k = 0; k < x->nparked; k++)
        free(x->parked[k].data);
    free(x->out);
    free(x->parked);
    free(x);
    e->x = NULL;
}

static const char *nodes_error(const dh_engine *e)
{
    return e->x && !e->x->own ? e->x->err : ""; /* its own reason is its caller's */
}

static void nodes_own_error(dh_engine *e, const char *why)
{
    struct dh__xchg *x = e->x;
    if (!x || !why || x->err[0])
        return;
    dh__msg(x->err, sizeof x->err, "%s", why);
    x->own = 1;
    x->err_at = dh__eng_elapsed(e);
}

static const char *nodes_stopped_by(const dh_engine *e)
{
    return e->x ? e->x->stopped_by : "";
}

static const char *nodes_earlier(const dh_engine *e)
{
    return e->x ? e->x->first : "";
}

/* A node that never began: the reason travels in its FINAL record, read at the others' HELLO. */
static void nodes_refuse(dh_engine *e, const char *why)
{
    if (e->x && !e->x->err[0])
        dh__msg(e->x->err, sizeof e->x->err, "%s", why);
}

static void nodes_wake(dh_engine *e)
{
    if (e->x)
        pthread_cond_broadcast(&e->x->cv);
}

static int nodes_begin(dh_engine *e, char *err, size_t errlen)
{
    struct dh__xchg *x = e->x;
    x->lim.steps = e->N; /* what remains of the job once resumed: a cutoff is checked by it */
    int rc = dh__nodes_meet(e, X_BEGIN, err, errlen);
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

/* The step exchange agrees on stopping (should_stop is asked there, for every node). */
static void nodes_step_closed(dh_engine *e)
{
    (void)e;
}

const dh__node_ops dh__several_nodes = {
    .init = nodes_init,
    .hello = dh__nodes_hello,
    .begin = nodes_begin,
    .wait_exchanged = dh__nodes_wait_exchanged,
    .step_closed = nodes_step_closed,
    .wake = nodes_wake,
    .error = nodes_error,
    .earlier = nodes_earlier,
    .stopped_by = nodes_stopped_by,
    .own_error = nodes_own_error,
    .refuse = nodes_refuse,
    .moving = dh__nodes_moving,
    .plan_pending = dh__nodes_plan_pending,
    .held = dh__nodes_held,
    .take_back = dh__nodes_take_back,
    .lend_work = dh__nodes_lend_work,
    .drain = dh__nodes_drain,
    .finish = dh__nodes_finish,
    .result = dh__nodes_result,
    .free = nodes_free,
};

