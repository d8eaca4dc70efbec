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
 */
#include "engine_int.h"

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
    /* HELLO: what every node must agree on */
    uint64_t manifest_hash, seed;
    int64_t ranks, workers, batch, steps, budget, start_epoch, start_step;
    double cpu_scale, rho;
    char policy[32], workload[64];
    /* FINAL: this node's totals */
    double cpu_sum, worker_cpu, makespan, move_s, pred_gain, real_gain;
    double xsum, xmax, ctrl;
    int64_t xn, peak, considered, moved, gated, refused, moved_bytes, closed_steps, closed_failed;
    char msg[256];
    xrank r[];
} xrec;

struct dh__xchg {
    pthread_t thread;
    int started, done;    /* done: the thread left (no more STEP rounds here) */
    pthread_cond_t cv;    /* exchanged moved, a step's releases are in, or the run stopped */
    int64_t exchanged;    /* steps exchanged with every node */
    size_t bytes;         /* one record */
    xrec *mine;
    unsigned char *all;
    double sum, max, ctrl; /* seconds in STEP rounds (wall), the largest, under e->mu */
    int64_t n;
    char err[384];        /* why another node (or the exchange) stopped this one */
};

static xrec *rec_of(const struct dh__xchg *x, int node)
{
    return (xrec *)(x->all + (size_t)node * x->bytes);
}

static int rpn(const dh_engine *e)
{
    return e->rank_hi - e->rank_lo;
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
    x->bytes = (sizeof(xrec) + (size_t)per * sizeof(xrank) + 63) & ~(size_t)63;
    x->mine = dh__calloc(1, x->bytes);
    x->all = dh__calloc((size_t)e->nodes, x->bytes);
    pthread_cond_init(&x->cv, NULL);
    return x->mine && x->all ? 0 : DH_ENOMEM;
}

void dh__eng_nodes_free(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    if (!x)
        return;
    pthread_cond_destroy(&x->cv);
    free(x->mine);
    free(x->all);
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
           : a->start_epoch != b->start_epoch || a->start_step != b->start_step
               ? "the resume point (every rank must restore the same checkpoint)"
           : a->cpu_scale != b->cpu_scale       ? "the CPU calibration (--cpu-cost-scale)"
           : a->rho != b->rho                   ? "--rho"
           : strcmp(a->policy, b->policy)       ? "--policy"
           : strcmp(a->workload, b->workload)   ? "--workload"
                                                : NULL;
}

static void *exchange_main(void *arg);

int dh__eng_nodes_begin(dh_engine *e, char *err, size_t errlen)
{
    struct dh__xchg *x = e->x;
    if (!x) {
        clock_gettime(CLOCK_MONOTONIC, &e->t0);
        return 0;
    }
    fill_hello(e, x->mine);
    int rc = round_trip(e, err, errlen);
    for (int k = 1; !rc && k < e->nodes; k++) {
        const char *what = job_differs(rec_of(x, 0), rec_of(x, k));
        if (what)
            rc = dh__fail(err, errlen, DH_EINVAL, "node %d was started on another job than "
                          "node 0: %s differs; every node must run the same command", k, what);
    }
    if (rc)
        return rc;
    clock_gettime(CLOCK_MONOTONIC, &e->t0); /* every node leaves the round together */
    rc = dh__thread_create(&x->thread, exchange_main, e);
    if (rc)
        return dh__fail(err, errlen, rc, "cannot start the exchange thread");
    x->started = 1;
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
    eng_step *s = dh__eng_step(e, st);
    for (int i = 0; i < rpn(e); i++) {
        int r = e->rank_lo + i;
        dh__rec_batch *rb = dh__records_batch(&e->rec, st, r);
        if (rb)
            m->r[i] = (xrank){rb->deadline, rb->ready, rb->compute, rb->longest_task, 0, 0};
        if (s)
            m->r[i].taken = s->b[r].taken, m->r[i].released = s->b[r].released_at;
    }
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
        double t3 = dh__eng_elapsed(e);
        int stop = apply_step(e, st);
        x->ctrl += held + dh__eng_elapsed(e) - t3;
        x->exchanged = st + 1;
        pthread_cond_broadcast(&x->cv);
        pthread_cond_broadcast(&e->ready);
        if (stop) {
            if (e->error)
                dh__eng_fail(e, e->error);
            else
                dh__eng_stop_locked(e);
            break;
        }
    }
    x->done = 1;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
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
    m->error = e->error == DH_EPEER && x->err[0] ? 0 : e->error; /* a peer's failure is its own */
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
    m->move_s = reb->move_s;
    m->pred_gain = reb->predicted_gain_s;
    m->real_gain = reb->realised_gain_s;
    m->xsum = x->sum;
    m->xmax = x->max;
    m->ctrl = x->ctrl;
    m->xn = x->n;
    m->closed_steps = e->rec.steps;
    m->closed_failed = e->rec.failed;
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
    *t = (dh__node_totals){.nodes = 1};
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
        t->nodes = o == me && !(all_final && !rc) ? 1 : e->nodes;
        t->cpu_sum += o->cpu_sum;
        t->worker_cpu += o->worker_cpu;
        t->makespan = DH_MAX(t->makespan, o->makespan);
        t->peak += o->peak;
        t->considered += o->considered;
        t->moved += o->moved;
        t->gated += o->gated;
        t->refused += o->refused;
        t->moved_bytes += o->moved_bytes;
        t->move_s += o->move_s;
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
    full->reb_move_s = t->move_s;
    full->reb_predicted_gain_s = t->pred_gain;
    full->reb_realised_gain_s = t->real_gain;
    full->exchange_mean_s = t->xn ? t->xsum / (double)t->xn : 0;
    full->exchange_max_s = t->xmax;
    full->control_mean_s = t->xn ? t->ctrl / (double)t->xn : 0;
}
