/*
 * nodes.c - the real engine as one node of several (docs/MULTINODE.md): this
 * process runs its node's ranks and workers; every node's scheduler plans
 * every step alike, and the nodes exchange what happened after each step.
 *
 * DESIGN
 * - The exchange is dh_run_config.exchange, an allgather of one fixed-size
 *   record per node (the agent implements it with MPI; tests with threads).
 *   The library itself has no MPI in it.
 * - Rounds, all through the same allgather, every node taking part in each:
 *   HELLO once before the workers start (every node checks that it runs the
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
#include "engine_int.h"

#include "../codec/decode.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { X_HELLO = 1, X_STEP, X_FINAL };

typedef struct {
    double asked, ready, compute, longest, taken, released;
} xrank;

typedef struct {
    int32_t kind, node;
    int64_t step;
    int32_t stop;  /* STEP: stop every node after this step */
    int32_t error; /* FINAL: what stopped this node (0: its run ended or was stopped) */
    /* STEP */
    double first_start; /* the step's first task started here (-1: none) */
    int64_t failed;     /* the step's samples that failed here */
    double late;        /* this node's backlog's predicted worst lateness (lending) */
    int64_t late_bytes; /* output bytes of its least-slack task */
    /* STEP, agreed moves (x->moving): step + 1 is offered to the agreed plan (mv), with this
     * node's GPU prediction error, move factor and arena room; after r[]: per local rank
     * whether its batch is open to the plan, then per position of step + 1 the exact GPU
     * cost of a sample prepared here (< 0: not prepared here) */
    int32_t mv;
    double mv_mape, mv_factor, mv_net;
    int64_t mv_room, mv_ids;
    /* HELLO: what every node must agree on */
    uint64_t manifest_hash, seed;
    int64_t ranks, workers, batch, steps, budget, start_epoch, start_step, order;
    double cpu_scale, rho;
    char policy[32], workload[64];
    /* FINAL: this node's totals */
    double cpu_sum, worker_cpu, makespan, move_s, pred_gain, real_gain, net_factor;
    double xsum, xmax, ctrl;
    int64_t xn, peak, considered, moved, gated, refused, moved_bytes, closed_steps, closed_failed;
    int64_t remote, remote_bytes;
    int64_t lend_considered, lent, lend_gated, shipped;
    char msg[256];
    xrank r[];
} xrec;

typedef struct {
    dh__task t;
    double sent; /* when the TASK went out (the task's start on this node's clock) */
    int to;
} lent_task;

typedef struct {
    int node;    /* to (out) or from (parked) */
    void *data;  /* a MOVE message */
    size_t len;
} move_msg;

struct dh__xchg {
    pthread_t thread;
    int started, done;    /* done: the thread left (no more STEP rounds here) */
    pthread_cond_t cv;    /* exchanged moved, a step's releases are in, or the run stopped */
    int64_t exchanged;    /* steps exchanged with every node */
    size_t bytes;         /* one record */
    xrec *mine;
    unsigned char *all;
    double sum, max, ctrl; /* seconds in STEP rounds (wall), the largest, under e->mu */
    double carry_s;        /* seconds carrying out agreed plans (copies, packing) */
    int64_t n;
    char err[384];        /* why another node (or the exchange) stopped this one */
    int began;            /* the HELLO round passed */
    /* lending (send and recv set, a lending policy) */
    int lending;
    pthread_t mthread;
    int mstarted;
    double *late;          /* per node, from the last STEP round */
    int64_t *late_bytes;
    uint8_t *skip;         /* per node: answered NOTASK or gated since the last round */
    int asking;            /* the node a STEAL is out to, or -1 */
    lent_task *lent;       /* owner: tasks out on other nodes */
    int nlent, caplent;
    dh__lend_msg **rq;     /* lender: other nodes' tasks to prepare here (FIFO) */
    int rq_head, rq_n, rq_cap;
    dh__task *back;        /* owner: tasks popped for a lender but kept here */
    int nback, capback;
    /* agreed moves (send and recv set, a rebalancing policy) */
    int moving;
    size_t open_at, cost_at; /* where a record's open flags and costs begin */
    int64_t ncost;           /* costs a record carries: its node's first samples of the step */
    uint8_t *mv_frozen;      /* R, scratch */
    float *mv_known;         /* G, scratch: every exchanged exact cost of the step */
    int64_t *mv_need, *mv_n; /* per node, scratch: arena bytes and buffers a plan needs */
    move_msg *out;           /* packed by a plan, sent once the lock is dropped */
    int nout, capout;
    move_msg *parked;        /* arrived before this node made the plan they belong to */
    int nparked, capparked;
};

static xrec *rec_of(const struct dh__xchg *x, int node)
{
    return (xrec *)(x->all + (size_t)node * x->bytes);
}

/* Tests: records carry at most this many exact costs (< 0: as many as computed). */
static _Atomic int64_t test_cost_cap = -1;

void dh__eng_test_cost_cap(int64_t n)
{
    test_cost_cap = n;
}

static int rpn(const dh_engine *e)
{
    return e->rank_hi - e->rank_lo;
}

static uint8_t *rec_open(const struct dh__xchg *x, xrec *m)
{
    return (uint8_t *)m + x->open_at;
}

static float *rec_cost(const struct dh__xchg *x, xrec *m)
{
    return (float *)((uint8_t *)m + x->cost_at);
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
    x->cost_at = x->open_at + (((size_t)per + 7) & ~(size_t)7);
    /* A node's share of a step is G / N samples on average; a record carries the exact
     * costs of twice that (its first ones in the step's order), so it stays small at many
     * nodes. A sample past that is planned as unknown by every node, its own included. */
    x->ncost = DH_MIN(e->G, 2 * ((e->G + e->nodes - 1) / e->nodes) + 8);
    if (test_cost_cap >= 0)
        x->ncost = DH_MIN(x->ncost, test_cost_cap);
    size_t end = x->moving ? x->cost_at + (size_t)x->ncost * sizeof(float) : x->open_at;
    x->bytes = (end + 63) & ~(size_t)63;
    x->mine = dh__calloc(1, x->bytes);
    x->all = dh__calloc((size_t)e->nodes, x->bytes);
    pthread_cond_init(&x->cv, NULL);
    x->asking = -1;
    x->lending = c->send && c->recv && caps->lend;
    x->late = dh__calloc((size_t)e->nodes, sizeof *x->late);
    x->late_bytes = dh__calloc((size_t)e->nodes, sizeof *x->late_bytes);
    x->skip = dh__calloc((size_t)e->nodes, 1);
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

void dh__eng_nodes_wake(dh_engine *e)
{
    if (e->x)
        pthread_cond_broadcast(&e->x->cv);
}

/* One round: mine to every node, every node's into x->all. Without e->mu. */
static int round_trip(dh_engine *e, char *err, size_t errlen)
{
    struct dh__xchg *x = e->x;
    x->mine->node = e->node;
    err[0] = 0;
    int rc = e->run.cfg.exchange(e->run.cfg.exchange_user, x->mine, x->all, x->bytes, err, errlen);
    if (rc && !err[0])
        dh__msg(err, errlen, "the exchange between nodes failed: %s", dh_strerror(rc));
    for (int k = 0; !rc && k < e->nodes; k++)
        if (rec_of(x, k)->node != k || rec_of(x, k)->kind < X_HELLO || rec_of(x, k)->kind > X_FINAL)
            rc = dh__fail(err, errlen, DH_EPARSE, "node %d sent a malformed exchange record", k);
    return rc;
}

/* ------------------------------------------------------------------ hello */

static void fill_hello(dh_engine *e, xrec *m)
{
    const dh_run_config *c = &e->run.cfg;
    memset(m, 0, e->x->bytes);
    m->kind = X_HELLO;
    m->manifest_hash = dh_manifest_hash(e->run.m);
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
    m->cpu_scale = c->cpu_cost_scale;
    m->rho = c->rho;
    snprintf(m->policy, sizeof m->policy, "%s", dh__policy_name(e->run.policy));
    snprintf(m->workload, sizeof m->workload, "%s", e->run.workload);
}

/* The first field in which node k's job differs from node 0's, or NULL. */
static const char *job_differs(const xrec *a, const xrec *b)
{
    return a->manifest_hash != b->manifest_hash ? "the manifest (its hash)"
           : a->seed != b->seed                 ? "--seed"
           : a->ranks != b->ranks               ? "--ranks"
           : a->workers != b->workers           ? "--workers"
           : a->batch != b->batch               ? "--batch"
           : a->steps != b->steps               ? "the run's length (--steps, --epochs)"
           : a->budget != b->budget             ? "--memory-budget"
           : a->order != b->order               ? "the sample order (--no-shuffle, --keep-last)"
           : a->start_epoch != b->start_epoch || a->start_step != b->start_step
               ? "the resume point (every rank must restore the same checkpoint)"
           : a->cpu_scale != b->cpu_scale       ? "the CPU calibration (--cpu-cost-scale)"
           : a->rho != b->rho                   ? "--rho"
           : strcmp(a->policy, b->policy)       ? "--policy"
           : strcmp(a->workload, b->workload)   ? "--workload"
                                                : NULL;
}

static void *exchange_main(void *arg);
static void *message_main(void *arg);
static void offer_next_step(dh_engine *e, xrec *m, int64_t ns);
static void agree_moves(dh_engine *e, int64_t ns);
static int send_moves(dh_engine *e);
static void apply_parked(dh_engine *e);

int dh__eng_nodes_begin(dh_engine *e, char *err, size_t errlen)
{
    struct dh__xchg *x = e->x;
    if (!x) {
        clock_gettime(CLOCK_MONOTONIC, &e->t0);
        return 0;
    }
    fill_hello(e, x->mine);
    int rc = round_trip(e, err, errlen);
    for (int k = 0; !rc && k < e->nodes; k++) /* a node that gave up before it began */
        if (rec_of(x, k)->kind == X_FINAL)
            rc = dh__fail(err, errlen, DH_EPEER, "node %d stopped before the run began: %s", k,
                          rec_of(x, k)->msg[0] ? rec_of(x, k)->msg
                                               : dh_strerror(rec_of(x, k)->error));
    for (int k = 1; !rc && k < e->nodes; k++) {
        const char *what = job_differs(rec_of(x, 0), rec_of(x, k));
        if (what)
            rc = dh__fail(err, errlen, DH_EINVAL, "node %d was started on another job than "
                          "node 0: %s differs; every node must run the same command", k, what);
    }
    if (rc)
        return rc;
    x->began = 1;
    clock_gettime(CLOCK_MONOTONIC, &e->t0); /* every node leaves the round together */
    rc = dh__thread_create(&x->thread, exchange_main, e);
    if (rc)
        return dh__fail(err, errlen, rc, "cannot start the exchange thread");
    x->started = 1;
    int messages = x->lending || x->moving;
    if (messages && (rc = dh__thread_create(&x->mthread, message_main, e)))
        return dh__fail(err, errlen, rc, "cannot start the lending thread");
    x->mstarted = messages;
    if (x->moving) /* every node makes each plan: one counts what it moved and gained */
        dh__sched_reb_counting(e->sched, e->node == 0);
    return 0;
}

/* ------------------------------------------------------------------ steps */

static int local_released(dh_engine *e, int64_t st)
{
    eng_step *s = dh__eng_step(e, st);
    return s && s->released >= rpn(e);
}

static void fill_step(dh_engine *e, int64_t st, int stop)
{
    xrec *m = e->x->mine;
    memset(m, 0, e->x->bytes);
    m->kind = X_STEP;
    m->step = st;
    m->stop = stop;
    dh__rec_step *sp = dh__records_step(&e->rec, st);
    m->first_start = sp ? sp->start : -1;
    m->failed = sp ? sp->failed : 0;
    m->late = dh__sched_backlog_lateness(e->sched, dh__eng_elapsed(e), &m->late_bytes);
    eng_step *s = dh__eng_step(e, st);
    for (int i = 0; i < rpn(e); i++) {
        int r = e->rank_lo + i;
        dh__rec_batch *rb = dh__records_batch(&e->rec, st, r);
        if (rb)
            m->r[i] = (xrank){rb->deadline, rb->ready, rb->compute, rb->longest_task, 0, 0};
        if (s)
            m->r[i].taken = s->b[r].taken, m->r[i].released = s->b[r].released_at;
    }
    if (e->x->moving)
        offer_next_step(e, m, st + 1);
}

/* Applies the other nodes' step st; 1 when every node stops after it (or could not go on). */
static int apply_step(dh_engine *e, int64_t st)
{
    struct dh__xchg *x = e->x;
    int stop = 0;
    for (int k = 0; k < e->nodes; k++) {
        const xrec *o = rec_of(x, k);
        if (o->kind == X_STEP && o->step == st) {
            stop |= o->stop != 0;
            continue;
        }
        if (o->kind == X_FINAL && o->error && !x->err[0])
            dh__msg(x->err, sizeof x->err, "node %d stopped the run: %s", k,
                     o->msg[0] ? o->msg : dh_strerror(o->error));
        if (o->kind == X_FINAL && o->error && !e->error)
            e->error = DH_EPEER;
        return 1; /* node k stopped: step st closes nowhere */
    }
    dh__rec_step *sp = dh__records_step(&e->rec, st);
    for (int k = 0; sp && k < e->nodes; k++) { /* every record first: the releases close it */
        const xrec *o = rec_of(x, k);
        if (k == e->node)
            continue;
        if (o->first_start >= 0 && (sp->start < 0 || o->first_start < sp->start))
            sp->start = o->first_start;
        sp->failed += o->failed;
        for (int i = 0; i < rpn(e); i++) {
            dh__rec_batch *rb = dh__records_batch(&e->rec, st, k * rpn(e) + i);
            if (!rb)
                break;
            *rb = (dh__rec_batch){o->r[i].asked, o->r[i].ready, o->r[i].compute, o->r[i].longest};
            sp = dh__records_step(&e->rec, st); /* the records' ring may have moved */
        }
    }
    for (int k = 0; k < e->nodes; k++) { /* what lending reads, until the next round */
        x->late[k] = rec_of(x, k)->late;
        x->late_bytes[k] = rec_of(x, k)->late_bytes;
        x->skip[k] = 0;
    }
    for (int k = 0; k < e->nodes; k++) {
        const xrec *o = rec_of(x, k);
        for (int i = 0; k != e->node && i < rpn(e); i++) {
            int r = k * rpn(e) + i;
            dh__sched_batch_taken(e->sched, r, st, o->r[i].taken);
            dh__sched_step_done(e->sched, r, st, o->r[i].released, o->r[i].compute);
            e->next_step[r] = st + 1;
            dh__eng_step_released(e, st);
        }
    }
    return stop;
}

static void *exchange_main(void *arg)
{
    dh_engine *e = arg;
    struct dh__xchg *x = e->x;
    char err[384];
    pthread_mutex_lock(&e->mu);
    for (int64_t st = 0; st < e->N; st = x->exchanged) {
        while (!e->stop && !local_released(e, st))
            pthread_cond_wait(&x->cv, &e->mu);
        /* Stopped here: the FINAL round tells the others. A step whose releases are all in
         * is still exchanged (a consumer stops the engine right after its last release). */
        if (!local_released(e, st) || e->error)
            break;
        double t0 = dh__eng_elapsed(e);
        fill_step(e, st, dh__run_should_stop(&e->run));
        double held = dh__eng_elapsed(e) - t0;
        pthread_mutex_unlock(&e->mu);
        double t1 = dh__eng_elapsed(e);
        int rc = round_trip(e, err, sizeof err);
        double t2 = dh__eng_elapsed(e);
        pthread_mutex_lock(&e->mu);
        x->sum += t2 - t1;
        x->max = DH_MAX(x->max, t2 - t1);
        x->n++;
        if (rc) {
            dh__msg(x->err, sizeof x->err, "%s", err);
            dh__eng_fail(e, rc);
            break;
        }
        double t3 = dh__eng_elapsed(e), carried = x->carry_s;
        int stop = apply_step(e, st);
        if (!stop && x->moving)
            agree_moves(e, st + 1);
        /* the control plane's own cost: copying moved data is the data plane's (reb_move_s) */
        x->ctrl += held + dh__eng_elapsed(e) - t3 - (x->carry_s - carried);
        x->exchanged = st + 1;
        if (x->moving)
            apply_parked(e); /* moves of st + 1 that came in before this node made its plan */
        pthread_cond_broadcast(&x->cv);
        pthread_cond_broadcast(&e->ready);
        if (x->nout) {
            pthread_mutex_unlock(&e->mu);
            rc = send_moves(e);
            pthread_mutex_lock(&e->mu);
            if (rc) {
                dh__eng_fail(e, rc);
                break;
            }
        }
        if (stop) {
            if (e->error)
                dh__eng_fail(e, e->error);
            else
                dh__eng_stop_locked(e);
            break;
        }
    }
    for (int64_t st = e->lo; x->moving && st < e->hi; st++) /* no plan is coming now */
        for (int r = e->rank_lo; r < e->rank_hi; r++)
            dh__eng_step(e, st)->b[r].agreeing = 0;
    x->done = 1;
    pthread_cond_broadcast(&x->cv);
    pthread_cond_broadcast(&e->ready);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

void dh__eng_nodes_drain(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    if (!x)
        return;
    pthread_mutex_lock(&e->mu);
    int done = 1; /* did every local rank take every step? (else this node stops early) */
    for (int r = e->rank_lo; r < e->rank_hi; r++)
        done &= e->next_step[r] >= e->N;
    while (done && !e->stop && !x->done && x->exchanged < e->N)
        pthread_cond_wait(&x->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

int dh__eng_wait_exchanged(dh_engine *e, int64_t st)
{
    struct dh__xchg *x = e->x;
    if (!x)
        return 0;
    pthread_mutex_lock(&e->mu);
    while (!e->stop && !x->done && x->exchanged <= st)
        pthread_cond_wait(&x->cv, &e->mu);
    int ok = x->exchanged > st;
    pthread_mutex_unlock(&e->mu);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------ final */

static void fill_final(dh_engine *e, xrec *m)
{
    struct dh__xchg *x = e->x;
    const dh__reb_stats *reb = dh__sched_reb_stats(e->sched);
    memset(m, 0, x->bytes);
    m->kind = X_FINAL;
    /* a peer's failure is its own; a node that never began says why (dh__engine_refuse) */
    m->error = e->error == DH_EPEER && x->err[0] && x->began ? 0 : e->error;
    if (m->error)
        dh__msg(m->msg, sizeof m->msg, "%s", x->err[0] ? x->err : dh_strerror(e->error));
    m->cpu_sum = e->cpu_sum;
    m->worker_cpu = e->worker_cpu;
    m->makespan = e->rec.makespan > 0 ? e->rec.makespan : dh__eng_elapsed(e);
    m->peak = e->ring.peak + e->arena.peak;
    m->considered = reb->considered;
    m->moved = reb->moved;
    m->gated = reb->gated;
    m->refused = reb->refused;
    m->moved_bytes = reb->bytes_moved;
    m->remote = reb->moved_remote;
    m->remote_bytes = reb->remote_bytes;
    m->lend_considered = reb->lend_considered;
    m->lent = reb->lent;
    m->lend_gated = reb->lend_gated;
    m->shipped = reb->bytes_shipped;
    m->move_s = reb->move_s;
    m->net_factor = reb->net_factor;
    m->pred_gain = reb->predicted_gain_s;
    m->real_gain = reb->realised_gain_s;
    m->xsum = x->sum;
    m->xmax = x->max;
    m->ctrl = x->ctrl;
    m->xn = x->n;
    m->closed_steps = e->rec.steps;
    m->closed_failed = e->rec.failed;
}

/* engine_serve.h: the reason travels in this node's FINAL record, read at the others' HELLO. */
void dh__engine_refuse(dh_engine *e, int rc, const char *why)
{
    pthread_mutex_lock(&e->mu);
    if (!e->error)
        e->error = rc;
    if (e->x && !e->x->err[0])
        dh__msg(e->x->err, sizeof e->x->err, "%s", why);
    pthread_mutex_unlock(&e->mu);
}

/* Every node's totals (only this node's if another could not be reached), summed into t. */
void dh__eng_nodes_finish(dh_engine *e, dh__node_totals *t)
{
    struct dh__xchg *x = e->x;
    if (!x)
        return;
    if (x->started)
        pthread_join(x->thread, NULL);
    x->started = 0;
    if (x->mstarted)
        pthread_join(x->mthread, NULL);
    x->mstarted = 0;
    char err[384] = "";
    int rc = 0, all_final = 0;
    xrec *mine = dh__malloc(x->bytes);
    if (!mine)
        rc = DH_ENOMEM;
    else
        fill_final(e, mine);
    /* A node still in a STEP round sees this FINAL, stops, and sends its own next round. */
    for (int round = 0; !rc && !all_final && round < 1000; round++) {
        memcpy(x->mine, mine, x->bytes);
        rc = round_trip(e, err, sizeof err);
        all_final = 1;
        for (int k = 0; !rc && k < e->nodes; k++)
            all_final &= rec_of(x, k)->kind == X_FINAL;
    }
    if (rc && !x->err[0])
        dh__msg(x->err, sizeof x->err, "%s", err);
    if (rc && !e->error)
        e->error = rc;
    const xrec *me = mine;
    *t = (dh__node_totals){0};
    for (int k = 0; me && k < e->nodes; k++) {
        const xrec *o = all_final && !rc ? rec_of(x, k) : k == e->node ? me : NULL;
        if (!o)
            continue;
        if (o->closed_steps != me->closed_steps || o->closed_failed != me->closed_failed) {
            dh__msg(x->err, sizeof x->err, "node %d closed %lld steps with %lld failed "
                     "samples, node %d %lld with %lld: the nodes' accounting disagrees", k,
                     (long long)o->closed_steps, (long long)o->closed_failed, e->node,
                     (long long)me->closed_steps, (long long)me->closed_failed);
            if (!e->error)
                e->error = DH_EMISMATCH;
        }
        t->cpu_sum += o->cpu_sum;
        t->worker_cpu += o->worker_cpu;
        t->makespan = DH_MAX(t->makespan, o->makespan);
        t->peak += o->peak;
        t->considered += o->considered;
        t->moved += o->moved;
        t->gated += o->gated;
        t->refused += o->refused;
        t->moved_bytes += o->moved_bytes;
        t->remote += o->remote;
        t->remote_bytes += o->remote_bytes;
        t->lend_considered += o->lend_considered;
        t->lent += o->lent;
        t->lend_gated += o->lend_gated;
        t->shipped += o->shipped;
        t->move_s += o->move_s;
        t->net_factor = DH_MAX(t->net_factor, o->net_factor);
        t->pred_gain += o->pred_gain;
        t->real_gain += o->real_gain;
        t->xsum += o->xsum;
        t->xmax = DH_MAX(t->xmax, o->xmax);
        t->ctrl += o->ctrl;
        t->xn += o->xn;
    }
    free(mine);
}

void dh__node_result(const dh__node_totals *t, int nodes, dh_result *full)
{
    full->nodes = nodes;
    full->memory_budget *= nodes; /* each node held its share */
    full->reb_considered = t->considered;
    full->reb_moved = t->moved;
    full->reb_gated = t->gated;
    full->reb_refused = t->refused;
    full->reb_bytes = t->moved_bytes;
    full->reb_remote = t->remote;
    full->reb_remote_bytes = t->remote_bytes;
    full->lend_considered = t->lend_considered;
    full->lent = t->lent;
    full->lend_gated = t->lend_gated;
    full->bytes_shipped = t->shipped;
    full->reb_move_s = t->move_s;
    full->net_factor = t->net_factor;
    full->reb_predicted_gain_s = t->pred_gain;
    full->reb_realised_gain_s = t->real_gain;
    full->exchange_mean_s = t->xn ? t->xsum / (double)t->xn : 0;
    full->exchange_max_s = t->xmax;
    full->control_mean_s = t->xn ? t->ctrl / (double)t->xn : 0;
}

/* ---------------------------------------------------------------- lending */

enum { M_STEAL = DH__LEND_STEAL, M_TASK = DH__LEND_TASK, M_NOTASK = DH__LEND_NOTASK,
       M_RESULT = DH__LEND_RESULT, M_MOVE /* agreed moves (below) */ };

typedef struct {
    int32_t kind, node, nitems, pad;
    int64_t step, k, sample, payload;
} m_move; /* then int32_t status[nitems], then the items, each 64-byte aligned */

static int on_move(dh_engine *e, int from, void *data, size_t len);

/* Tests: lend whenever a worker is idle and the other node has queued work, late or not, so
 * that the whole path (parts, hand-backs, results) runs on every test run, not by timing. */
static _Atomic int lend_always;

void dh__eng_test_lend_always(int on)
{
    lend_always = on;
}

typedef struct {
    int32_t kind, node;
} m_head;

typedef struct {
    int32_t kind, node, part, status;
    int64_t pos, payload;
    double cpu, sent; /* sent: when the lender sent it (the shared clock) */
    char path[512], err[384];
} m_result;

static int push(void **arr, int *n, int *cap, size_t size, const void *item)
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

static void send_head(dh_engine *e, int to, int kind)
{
    m_head h = {kind, e->node};
    e->run.cfg.send(e->run.cfg.exchange_user, to, &h, sizeof h);
}

int dh__eng_lend_handback(dh_engine *e, dh__task *t)
{
    struct dh__xchg *x = e->x;
    if (!x->nback)
        return 0;
    *t = x->back[--x->nback];
    return 1;
}

dh__lend_msg *dh__eng_lend_remote(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    if (!x->lending)
        return NULL;
    if (x->rq_n) {
        dh__lend_msg *m = x->rq[x->rq_head];
        x->rq_head = (x->rq_head + 1) % x->rq_cap;
        x->rq_n--;
        return m;
    }
    if (x->asking >= 0 || e->stop)
        return NULL;
    int best = -1; /* the node reported latest, not yet asked in vain this round */
    for (int k = 0; k < e->nodes; k++)
        if (k != e->node && (lend_always || (!x->skip[k] && x->late[k] > 0)) &&
            (best < 0 || x->late[k] > x->late[best]))
            best = k;
    if (best < 0)
        return NULL;
    double late = lend_always ? DH_MAX(x->late[best], 1.0) : x->late[best];
    if (!dh__sched_lend_gate(e->sched, late, DH_MAX(x->late_bytes[best], 1))) {
        x->skip[best] = 1; /* not worth shipping: until the next round says otherwise */
        return NULL;
    }
    x->asking = best;
    send_head(e, best, M_STEAL);
    return NULL;
}

size_t dh__eng_lend_header(void)
{
    return (sizeof(m_result) + ITEM_ALIGN - 1) & ~(size_t)(ITEM_ALIGN - 1);
}

void dh__eng_lend_result(dh_engine *e, const dh__lend_msg *m, uint8_t *msg, int64_t payload,
                         int status, double cpu, const char *path, const char *err)
{
    m_result r = {M_RESULT, e->node, m->part, status, m->pos, payload, cpu, dh__eng_elapsed(e),
                  "", ""};
    snprintf(r.path, sizeof r.path, "%s", path);
    snprintf(r.err, sizeof r.err, "%s", err);
    if (msg) {
        memcpy(msg, &r, sizeof r);
        e->run.cfg.send(e->run.cfg.exchange_user, m->node, msg,
                        dh__eng_lend_header() + (size_t)payload);
    } else {
        e->run.cfg.send(e->run.cfg.exchange_user, m->node, &r, sizeof r);
    }
}

/* Owner: a lender asks. Pops this node's least-slack task if its backlog is late, gives it a
 * buffer without waiting (a full pool keeps it here), and answers TASK or NOTASK. */
static void on_steal(dh_engine *e, int from)
{
    struct dh__xchg *x = e->x;
    dh__lend_msg *m = NULL;
    size_t len = 0;
    pthread_mutex_lock(&e->mu);
    dh__task t;
    int rc = e->stop ? DH__IDLE
                     : dh__sched_lend_task(e->sched, dh__eng_elapsed(e), lend_always, &t);
    batch_slot *b = rc ? NULL : dh__eng_slot(e, t.step, t.rank);
    if (rc < 0)
        dh__eng_fail(e, rc);
    if (b) {
        int ok = b->laid_out || !dh__lay_out(e, t.step, t.rank, b);
        if (ok && !b->allocated && !b->allocating) {
            int64_t off = dh__ring_try_alloc(&e->ring, b->bytes, &b->block);
            if (off >= 0)
                b->offset = off, b->allocated = 1;
        }
        int32_t first = 0, n = 0;
        while (ok && first < b->nitems && b->items[first].sample != t.sample)
            first++;
        while (ok && first + n < b->nitems && b->items[first + n].sample == t.sample)
            n++;
        ok = ok && b->allocated && n > 0;
        len = sizeof *m + (size_t)n * sizeof(int64_t);
        if (ok && (m = dh__calloc(1, len))) {
            *m = (dh__lend_msg){M_TASK, e->node, t.rank, t.part, t.nparts, n, t.pos, t.step,
                                t.sample, t.pred_cost};
            for (int32_t j = 0; j < n; j++)
                m->item_bytes[j] = b->items[first + j].bytes;
            lent_task lt = {t, dh__eng_elapsed(e), from};
            if (push((void **)&x->lent, &x->nlent, &x->caplent, sizeof lt, &lt)) {
                free(m);
                m = NULL;
            }
        }
        if (m) {
            b->inflight++; /* frozen for rebalancing until the result is in */
        } else if (push((void **)&x->back, &x->nback, &x->capback, sizeof t, &t)) {
            dh__eng_fail(e, DH_ENOMEM);
        } else {
            pthread_cond_broadcast(&e->work); /* kept here: this node's workers take it */
        }
    }
    pthread_mutex_unlock(&e->mu);
    if (m)
        e->run.cfg.send(e->run.cfg.exchange_user, from, m, len);
    else
        send_head(e, from, M_NOTASK);
    free(m);
}

/* The bytes of item `it` that part t->part of a split sample wrote: its share of a video's
 * frames; every other item belongs to part 0. */
static int part_bytes(dh_engine *e, const dh__task *t, const dh_batch_item *it, int64_t *from,
                      int64_t *n)
{
    dh_media_info mi;
    dh_manifest_media(e->run.m, t->sample, it->media, &mi);
    if (mi.type == DH_MEDIA_VIDEO)
        return dh__video_part_bytes(e->spec, &mi, t->part, t->nparts, from, n);
    *from = 0;
    *n = t->part == 0 ? it->bytes : 0;
    return 0;
}

/* Owner: a lent task came back. Its items go into the batch; it completes as a worker's. */
static void on_result(dh_engine *e, int from, const uint8_t *data, size_t len)
{
    struct dh__xchg *x = e->x;
    m_result r;
    memcpy(&r, data, sizeof r);
    r.path[sizeof r.path - 1] = r.err[sizeof r.err - 1] = 0;
    pthread_mutex_lock(&e->mu);
    int k = 0;
    while (k < x->nlent && !(x->lent[k].t.pos == r.pos && x->lent[k].t.part == r.part &&
                             x->lent[k].to == from))
        k++;
    batch_slot *b = k < x->nlent ? dh__eng_slot(e, x->lent[k].t.step, x->lent[k].t.rank) : NULL;
    if (b && !e->stop) {
        lent_task lt = x->lent[k];
        x->lent[k] = x->lent[--x->nlent];
        uint8_t *base = dh__slot_data(e, b);
        const uint8_t *src = data + dh__eng_lend_header();
        size_t off = 0;
        int rc = r.status;
        for (int32_t j = 0; !rc && base && j < b->nitems; j++) {
            const dh_batch_item *it = &b->items[j];
            if (it->sample != lt.t.sample)
                continue;
            if (dh__eng_lend_header() + off + (size_t)it->bytes > len) {
                rc = DH_EPARSE; /* a short result: the sample fails, named, never half-copied */
                break;
            }
            int64_t at = 0, n = it->bytes; /* a split sample's part: only what it wrote */
            if (lt.t.nparts > 1)
                rc = part_bytes(e, &lt.t, it, &at, &n);
            if (!rc && n > 0)
                memcpy(base + it->offset + at, src + off + (size_t)at, (size_t)n);
            off += ((size_t)it->bytes + ITEM_ALIGN - 1) & ~(size_t)(ITEM_ALIGN - 1);
        }
        dh__eng_finish_task(e, -1, &lt.t, b, base, rc, lt.sent, rc ? -1.0 : r.cpu, r.path,
                            rc == r.status ? r.err : "the prepared sample arrived incomplete", 1);
        dh__sched_count_lent(e->sched, r.payload);
        if (!rc) /* the wire, as the shared clock tells it (its start agreed to a latency) */
            dh__sched_observe_wire(e->sched, r.payload, dh__eng_elapsed(e) - r.sent);
    }
    pthread_mutex_unlock(&e->mu);
}

static void *message_main(void *arg)
{
    dh_engine *e = arg;
    struct dh__xchg *x = e->x;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        int stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop)
            break;
        int from = -1;
        void *data = NULL;
        size_t len = 0;
        char err[384] = "";
        int rc = e->run.cfg.recv(e->run.cfg.exchange_user, &from, &data, &len, 0.05, err,
                                 sizeof err);
        if (rc == DH_ETIMEDOUT)
            continue;
        if (rc) { /* a node died: this one may be waiting for a sample lent to it */
            pthread_mutex_lock(&e->mu);
            if (!x->err[0])
                dh__msg(x->err, sizeof x->err, "%s", err[0] ? err : dh_strerror(rc));
            dh__eng_fail(e, rc);
            pthread_mutex_unlock(&e->mu);
            break;
        }
        int32_t kind = len >= sizeof(m_head) ? ((const m_head *)data)->kind : 0;
        if (kind == M_STEAL) {
            on_steal(e, from);
        } else if (kind == M_RESULT && len >= sizeof(m_result)) {
            on_result(e, from, data, len);
        } else if (kind == M_TASK && len >= sizeof(dh__lend_msg)) {
            pthread_mutex_lock(&e->mu);
            dh__lend_msg *m = data;
            data = NULL;
            if (x->rq_n == x->rq_cap) { /* grow the FIFO, keeping its order */
                int nc = x->rq_cap ? 2 * x->rq_cap : 8;
                dh__lend_msg **q = dh__calloc((size_t)nc, sizeof *q);
                for (int i = 0; q && i < x->rq_n; i++)
                    q[i] = x->rq[(x->rq_head + i) % x->rq_cap];
                if (q) {
                    free(x->rq);
                    x->rq = q;
                    x->rq_head = 0;
                    x->rq_cap = nc;
                }
            }
            if (x->rq_n < x->rq_cap) {
                x->rq[(x->rq_head + x->rq_n++) % x->rq_cap] = m;
            } else {
                free(m);
                dh__eng_fail(e, DH_ENOMEM);
            }
            x->asking = -1;
            pthread_cond_broadcast(&e->work);
            pthread_mutex_unlock(&e->mu);
        } else if (kind == M_MOVE && len >= sizeof(m_move)) {
            if (on_move(e, from, data, len))
                data = NULL; /* parked until this node makes the plan it belongs to */
        } else if (kind == M_NOTASK) {
            pthread_mutex_lock(&e->mu);
            x->asking = -1;
            if (from >= 0 && from < e->nodes)
                x->skip[from] = 1;
            pthread_cond_broadcast(&e->work);
            pthread_mutex_unlock(&e->mu);
        }
        free(data);
    }
    return NULL;
}

/* ---------------------------------------------------------- agreed moves */

/*
 * Rebalancing between nodes. A plan moves prepared samples between the batches of one step,
 * and every node must make the same one: so step ns is planned by every node at the exchange
 * of step ns - 1, from what every record says (its ranks' batches open to the plan, the exact
 * GPU cost of each sample it prepared, its prediction error, move factor and arena room), by
 * the same deterministic code. A batch is open when it is complete, in its buffer and not
 * taken; from then until the plan is made it is not handed to its rank (`agreeing`: emulated
 * ranks wait for the exchange anyway; a trainer asking for it waits one exchange). Each node
 * carries out its part: its receiving batches are laid out afresh in the arena (the plan is
 * refused everywhere, alike, if some node published too little room), samples moving within
 * the node are copied, samples leaving are packed and sent (MOVE) after the lock is dropped,
 * and samples arriving keep their batch from being handed out until they are copied in.
 */

static size_t move_header(int32_t nitems)
{
    return (sizeof(m_move) + (size_t)nitems * sizeof(int32_t) + ITEM_ALIGN - 1) &
           ~(size_t)(ITEM_ALIGN - 1);
}

/* Tests: every node publishes at most this much move-arena room (< 0: what it has). */
static _Atomic int64_t test_room = -1;

void dh__eng_test_move_room(int64_t bytes)
{
    test_room = bytes;
}

int dh__eng_nodes_moving(const dh_engine *e)
{
    return e->x && e->x->moving;
}

int dh__eng_nodes_plan_pending(dh_engine *e, int64_t st, int rank)
{
    struct dh__xchg *x = e->x;
    if (!x || !x->moving || st < 1 || x->exchanged >= st || x->done || e->stop)
        return 0;
    eng_step *prev = st - 1 >= e->lo ? dh__eng_step(e, st - 1) : NULL;
    return !prev || prev->b[rank].released_at > 0;
}

/* Step ns into this node's STEP record: its batches open to the plan (marked agreeing) and
 * the costs of the samples it prepared. Under e->mu. */
static void offer_next_step(dh_engine *e, xrec *m, int64_t ns)
{
    struct dh__xchg *x = e->x;
    uint8_t *open = rec_open(x, m);
    float *cost = rec_cost(x, m);
    if (ns >= e->N || dh__sched_rank_of(e->sched, ns, 0) < 0)
        return; /* mv 0: no plan for ns (the run's end, or the scheduler failed) */
    eng_step *s = dh__eng_step(e, ns);
    if (!s || s->reb_offered)
        return; /* planned here alone already (a rank took its batch before this exchange) */
    s->published = 1;
    m->mv = 1;
    m->mv_mape = dh__calib_gpu_mape(dh__sched_calib(e->sched));
    m->mv_factor = dh__sched_reb_stats(e->sched)->move_factor;
    m->mv_net = dh__sched_reb_stats(e->sched)->net_factor;
    dh__ring_room(&e->arena, &m->mv_room, &m->mv_ids);
    if (test_room >= 0)
        m->mv_room = DH_MIN(m->mv_room, test_room);
    for (int i = 0; i < rpn(e); i++) {
        int r = e->rank_lo + i;
        batch_slot *b = &s->b[r];
        open[i] = b->laid_out && b->allocated && !b->inflight &&
                  !b->incoming && e->next_step[r] <= ns && dh__sched_batch_ready(e->sched, ns, r);
        b->agreeing = open[i];
    }
    int64_t n = 0; /* this node's samples of ns, in the step's order, as far as ncost */
    for (int64_t k = 0; k < e->G && n < x->ncost; k++)
        if (dh__eng_rank_here(e, dh__sched_rank_of(e->sched, ns, k)))
            cost[n++] = (float)dh__sched_prepared_cost(e->sched, ns, k);
    for (; n < x->ncost; n++)
        cost[n] = -1;
}

/* The scheduler's accept callback for an agreed plan: every node decides alike whether every
 * node's receiving batches fit the arena room it published; then this node carries out its
 * part. 0: carried out; 1: refused (by every node). */
static int carry_agreed(void *ctx, int64_t st, const int32_t *rank_of)
{
    dh_engine *e = ctx;
    struct dh__xchg *x = e->x;
    const int64_t *order = dh__sched_step_order(e->sched, st);
    if (!order)
        return 1; /* not on any node: every replica plans the same steps */
    memset(x->mv_need, 0, (size_t)e->nodes * 2 * sizeof *x->mv_need);
    int64_t *samples = dh__malloc((size_t)e->G * sizeof *samples);
    for (int r = 0; samples && r < e->R; r++) {
        int32_t n = 0, gets = 0;
        for (int64_t k = 0; k < e->G; k++)
            if (rank_of[k] == r) {
                samples[n++] = order[k];
                gets |= dh__sched_rank_of(e->sched, st, k) != r;
            }
        if (!gets)
            continue;
        batch_slot probe = {.block = -1};
        int64_t *mine = dh__malloc((size_t)DH_MAX(n, 1) * sizeof *mine);
        int rc = mine ? 0 : DH_ENOMEM;
        if (mine) {
            memcpy(mine, samples, (size_t)n * sizeof *mine);
            rc = dh__lay_out_samples(e, &probe, mine, n); /* the same layout on every node */
        }
        x->mv_need[r / rpn(e)] += dh__ring_aligned(probe.bytes);
        x->mv_n[r / rpn(e)]++;
        dh__slot_clear_layout(&probe);
        if (rc) {
            free(samples);
            dh__eng_fail(e, rc);
            return 1;
        }
    }
    free(samples);
    if (!samples && !e->stop) {
        dh__eng_fail(e, DH_ENOMEM);
        return 1;
    }
    for (int k = 0; k < e->nodes; k++) {
        const xrec *o = rec_of(x, k);
        if (x->mv_need[k] > o->mv_room || x->mv_n[k] > o->mv_ids)
            return 1; /* node k has no room to receive: no node moves anything */
    }
    eng_step *s = dh__eng_step(e, st);
    memset(e->changed, 0, (size_t)e->R);
    double t0 = dh__eng_elapsed(e);
    int rc = !s || dh__eng_carry(e, st, rank_of, 1);
    x->carry_s += dh__eng_elapsed(e) - t0;
    if (rc) {
        /* the room was published: only a failure gets here; the others go on without us */
        if (!x->err[0])
            dh__msg(x->err, sizeof x->err, "node %d could not carry out the plan agreed for "
                    "step %lld (no room in its move arena)", e->node, (long long)st);
        dh__eng_fail(e, DH_ENOMEM);
        return 0;
    }
    int part = 0; /* does the plan change a batch of this node? */
    for (int r = e->rank_lo; r < e->rank_hi; r++)
        part |= e->changed[r];
    s->incoming = 0;
    for (int r = e->rank_lo; r < e->rank_hi; r++)
        s->incoming += s->b[r].incoming;
    if (part)
        s->moves_at = dh__eng_elapsed(e);
    return 0;
}

/* After step ns - 1's round: every node makes the plan of step ns alike. Under e->mu. */
static void agree_moves(dh_engine *e, int64_t ns)
{
    struct dh__xchg *x = e->x;
    eng_step *s = ns < e->N ? dh__eng_step(e, ns) : NULL;
    int all = s != NULL;
    for (int k = 0; all && k < e->nodes; k++)
        all = rec_of(x, k)->mv;
    dh__reb_agreed a = {x->mv_frozen, x->mv_known, 0, 0, 0, e->node == 0};
    int64_t *seen = x->mv_need; /* per node: its samples met so far (scratch, before carry) */
    for (int k = 0; all && k < e->nodes; k++) {
        xrec *o = rec_of(x, k);
        const uint8_t *open = rec_open(x, o);
        for (int i = 0; i < rpn(e); i++)
            x->mv_frozen[k * rpn(e) + i] = !open[i];
        a.gpu_mape = DH_MAX(a.gpu_mape, o->mv_mape);
        a.move_factor = DH_MAX(a.move_factor, o->mv_factor);
        a.net_factor = DH_MAX(a.net_factor, o->mv_net);
        seen[k] = 0;
    }
    /* Each node's costs are of its samples in the step's order: the same on every replica,
     * since no plan of ns was made anywhere yet. A sample prepared here after the record
     * went out stays unknown, as it is for the others. */
    for (int64_t j = 0; all && j < e->G; j++) {
        int k = dh__sched_rank_of(e->sched, ns, j) / rpn(e);
        int64_t i = seen[k]++;
        x->mv_known[j] = i < x->ncost ? rec_cost(x, rec_of(x, k))[i] : -1;
        if (k != e->node && x->mv_known[j] >= 0)
            dh__sched_learn_prepared(e->sched, ns, j, x->mv_known[j]);
    }
    if (all) {
        double moved_before = s->moves_at;
        dh__sched_rebalance_agreed(e->sched, ns, &a, carry_agreed, e);
        double now = dh__eng_elapsed(e);
        if (s->moves_at != moved_before) { /* this node took part in a plan */
            for (int r = e->rank_lo; r < e->rank_hi; r++) {
                dh__rec_batch *rb = dh__records_batch(&e->rec, ns, r);
                if (s->b[r].in_arena && !s->b[r].incoming && rb && rb->ready > 0)
                    rb->ready = DH_MAX(rb->ready, now); /* complete once its copies are */
            }
        }
    }
    for (int r = e->rank_lo; s && r < e->rank_hi; r++)
        s->b[r].agreeing = 0;
}

int dh__eng_move_out(dh_engine *e, int64_t st, int64_t k, int to, const batch_slot *from)
{
    struct dh__xchg *x = e->x;
    const int64_t *order = dh__sched_step_order(e->sched, st);
    const uint8_t *base = dh__slot_data(e, from);
    int32_t first = 0, n = 0;
    while (first < from->nitems && from->items[first].sample != order[k])
        first++;
    while (first + n < from->nitems && from->items[first + n].sample == order[k])
        n++;
    size_t head = move_header(n), payload = 0;
    for (int32_t j = 0; j < n; j++)
        payload += (size_t)dh__ring_aligned(from->items[first + j].bytes);
    move_msg mm = {to, dh__malloc(head + payload), head + payload};
    if (!mm.data || !base)
        return free(mm.data), DH_ENOMEM;
    m_move h = {M_MOVE, e->node, n, 0, st, k, order[k], (int64_t)payload};
    memcpy(mm.data, &h, sizeof h);
    int32_t *status = (int32_t *)((uint8_t *)mm.data + sizeof h);
    uint8_t *dst = (uint8_t *)mm.data + head;
    for (int32_t j = 0; j < n; j++) {
        const dh_batch_item *it = &from->items[first + j];
        status[j] = it->status;
        memcpy(dst, base + it->offset, (size_t)it->bytes);
        dst += dh__ring_aligned(it->bytes);
    }
    if (push((void **)&x->out, &x->nout, &x->capout, sizeof mm, &mm))
        return free(mm.data), DH_ENOMEM;
    return 0;
}

/* Sends what the last plan packed. Without e->mu (the exchange thread's). */
static int send_moves(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    pthread_mutex_lock(&e->mu);
    move_msg *out = x->out;
    int n = x->nout;
    x->out = NULL;
    x->nout = x->capout = 0;
    pthread_mutex_unlock(&e->mu);
    int rc = 0;
    for (int k = 0; k < n; k++) {
        int src = rc ? rc : e->run.cfg.send(e->run.cfg.exchange_user, out[k].node, out[k].data,
                                            out[k].len);
        if (src && !rc) {
            rc = src;
            pthread_mutex_lock(&e->mu);
            if (!x->err[0])
                dh__msg(x->err, sizeof x->err, "cannot send moved samples to node %d: %s",
                        out[k].node, dh_strerror(src));
            pthread_mutex_unlock(&e->mu);
        }
        free(out[k].data);
    }
    free(out);
    return rc;
}

/* A MOVE this node cannot take: the run stops, naming it (first sentence wins). */
static void move_refused(dh_engine *e, const char *fmt, ...)
{
    if (!e->x->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->x->err, sizeof e->x->err, fmt, ap);
        va_end(ap);
    }
    dh__eng_fail(e, DH_EPARSE);
}

/* A moved sample arrived: its items go into its new batch, which is handed out once nothing
 * else is on the wire for it. Under e->mu. */
static void apply_move(dh_engine *e, const uint8_t *data, size_t len)
{
    m_move h;
    memcpy(&h, data, sizeof h);
    eng_step *s = h.step >= e->lo ? dh__eng_step(e, h.step) : NULL;
    int r = s && h.k >= 0 && h.k < e->G ? dh__sched_rank_of(e->sched, h.step, h.k) : -1;
    batch_slot *b = r >= 0 && dh__eng_rank_here(e, r) ? &s->b[r] : NULL;
    size_t head = move_header(h.nitems);
    if (!b || !b->incoming || h.nitems < 0 || len < head || (size_t)h.payload > len - head) {
        move_refused(e, "node %d sent a sample this node does not expect (step %lld, "
                     "position %lld)", h.node, (long long)h.step, (long long)h.k);
        return;
    }
    const int32_t *status = (const int32_t *)(data + sizeof h);
    uint8_t *base = dh__slot_data(e, b);
    size_t off = 0;
    int32_t j = 0;
    for (int32_t i = 0; base && i < b->nitems; i++) {
        dh_batch_item *it = &b->items[i];
        if (it->sample != h.sample)
            continue;
        size_t n = (size_t)dh__ring_aligned(it->bytes);
        if (j >= h.nitems || off + (size_t)it->bytes > (size_t)h.payload)
            break;
        memcpy(base + it->offset, data + head + off, (size_t)it->bytes);
        it->status = status[j++];
        off += n;
    }
    if (j != h.nitems) { /* layouts are the same on every node: this is a broken message */
        move_refused(e, "a sample moved from node %d arrived incomplete (step %lld, sample "
                     "%lld)", h.node, (long long)h.step, (long long)h.sample);
        return;
    }
    dh__slot_count_failed(b);
    double now = dh__eng_elapsed(e);
    if (--b->incoming == 0) {
        dh__rec_batch *rb = dh__records_batch(&e->rec, h.step, r);
        if (rb && rb->ready > 0)
            rb->ready = DH_MAX(rb->ready, now);
        pthread_cond_broadcast(&e->ready);
    }
    s->incoming--;
    /* what the receiver waited from its plan to this sample: the wire, and the other node's
     * lag to make the same plan */
    dh__sched_observe_wire(e->sched, h.payload, now - s->moves_at);
}

/* Message thread: a MOVE. Applied at once, or parked until this node made the plan (1: the
 * message is kept). */
static int on_move(dh_engine *e, int from, void *data, size_t len)
{
    struct dh__xchg *x = e->x;
    int kept = 0;
    pthread_mutex_lock(&e->mu);
    m_move h;
    memcpy(&h, data, sizeof h);
    if (e->stop) {
        /* the run is over here: nothing waits for it */
    } else if (x->exchanged < h.step) {
        move_msg mm = {from, data, len};
        if (push((void **)&x->parked, &x->nparked, &x->capparked, sizeof mm, &mm))
            dh__eng_fail(e, DH_ENOMEM);
        else
            kept = 1;
    } else {
        apply_move(e, data, len);
    }
    pthread_mutex_unlock(&e->mu);
    return kept;
}

static void apply_parked(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    int k = 0;
    while (k < x->nparked) {
        m_move h;
        memcpy(&h, x->parked[k].data, sizeof h);
        if (x->exchanged < h.step) {
            k++;
            continue;
        }
        apply_move(e, x->parked[k].data, x->parked[k].len);
        free(x->parked[k].data);
        x->parked[k] = x->parked[--x->nparked];
    }
}

void dh__eng_nodes_sched_config(dh_engine *e, dh__sched_config *sc)
{
    sc->node_local = e->nodes > 1;
    sc->node = e->node;
}
