/*
 * sim.c - the discrete-event simulator: a virtual clock driving the
 * scheduler's pull interface with durations from ground truth.
 *
 * DESIGN: one event heap ordered by (time, sequence number), so runs are
 * deterministic for a seed. Workers take a task whenever they are free and
 * the policy has one; a task lasts its sample's true CPU cost. Rank r asks
 * for batch s at the end of step s-1's barrier (its deadline), starts
 * computing as soon as the batch is complete, computes for the sum of its
 * samples' true GPU costs, then waits at the barrier, which ends the fixed
 * per-step cost c0 after the last rank arrives. Workers are re-polled only
 * when something that can create work happens: their own task ended, a
 * batch was taken (local's prefetch window moves) or a step finished (memory
 * is freed for the shared window).
 *
 * CPU contention: cfg.workers is the CPU the run has. A policy with more
 * worker threads than that (local with ranks > workers: one private worker
 * per rank, as DataLoader's num_workers >= 1) shares it: while B > W tasks
 * run, each progresses at W / B of full speed (processor sharing). Their
 * completion events are re-issued whenever B changes (a version per worker
 * marks the stale ones); with B <= W nothing changes and every task lasts
 * exactly its true cost.
 *
 * Object storage (cfg.fetch_latency_s / fetch_bandwidth set): a sample's media must be
 * fetched before it is decoded. Each node's fetchers (cfg.fetchers, default 16) take the
 * positions of the steps predicted to start within DH__FETCH_HORIZON_S of the oldest step
 * in flight (planned ahead of admission if need be) in the schedule's order, as the real
 * engine's do, while the
 * bytes fetched and not yet taken stay under the budget; one fetch lasts its requests
 * (256 KiB blocks) x the latency plus its bytes over the fetcher's share of the node's
 * link. A worker starting a sample whose fetch is in flight waits for it; one the
 * fetchers did not reach (or every sample, with fetchers -1) it fetches itself, over a
 * worker's share of the link. Waiting holds the worker, as a blocked thread does.
 */
#include "../run/run.h"

#include "../catalog/catalog.h"
#include "../core/bitset.h"
#include "../core/heap.h"
#include "../metrics/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { EV_TASK_DONE, EV_COMPUTE_DONE, EV_BARRIER, EV_FETCH_DONE };

#define FETCH_BLOCK (256 * 1024)

/* A position's fetch: pos = step * G + k (-1: a free entry of the ring). */
typedef struct {
    int64_t pos, bytes;
    double ready;   /* when its bytes are here */
    int taken;      /* a worker has started it (the fetchers skip it) */
    int node;       /* whose fetchers brought it */
} fetch_pos;

/* The fetch model (objects), as the file's comment says. */
typedef struct {
    int on, slots, nodes;
    double latency, slot_bw, worker_bw;
    int64_t budget;
    int *active;            /* per node: fetches in flight */
    int64_t *held;          /* per node: bytes fetched ahead, not yet taken */
    int64_t *step, *k;      /* per node: the next position its fetchers consider */
    fetch_pos *ring;        /* by pos & (cap - 1); grows when two live positions collide */
    int64_t cap, low;       /* low: positions below it are over */
    int64_t bytes, requests, ready_n, waited_n, missed_n, dropped;
    double wait_s;
} fetch_model;

typedef struct {
    double t;
    int64_t seq;
    int type;
    int a;     /* worker or rank */
    int64_t b; /* step */
    int64_t pos; /* a task's: its position (its rows are prefetched a completion ahead) */
} event;

static int event_before(const event *x, const event *y)
{
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

static double event_time(const event *x)
{
    return x->t;
}

DH_HEAP_DEFINE(event_heap, event, event_before)
/* tiered (heap.h): at 16,384 ranks 65,536 workers each have a completion in it */
DH_TIERS_DEFINE(event_heap, event, event_before, event_time)

/* A worker's task and its state, together: a completion touches one worker's, and at
 * 16,384 ranks the workers' arrays were a cache miss each (current, start, rem, ver). */
typedef struct {
    dh__task task;
    double start;  /* when it started */
    double rem;    /* seconds of full-speed work left (contention only) */
    int64_t ver;   /* version of its live completion event */
    double cost;   /* its true duration (true_cost), and its sample's true GPU cost: the */
    double gpu;    /* truth's line is read once, at dispatch */
} worker_run;

typedef struct {
    dh__run *run;
    dh__sched *sched;
    dh__records rec;
    dh__trace trace;
    event_heap_q events;
    int64_t seq;
    int nworkers;
    worker_run *wk; /* per worker */
    dh__bitset idle; /* idle workers (finding the next one costs the idle ones it meets) */
    int64_t *waiting;  /* per rank: step it waits for, -1 when busy */
    int arrived;       /* ranks at the current step's barrier (one step at a time) */
    int64_t *batch_buf;
    int64_t N;         /* steps of the run */
    int cores;         /* CPU the workers share (cfg.workers) */
    int busy;          /* workers running a task */
    double shared_at;  /* when rem was last brought up to date */
    int done;
    int error;         /* the first failure (scheduler, records); ends the run */
    fetch_model fx;
} sim;

static int push(sim *s, double t, int type, int a, int64_t b)
{
    event e = {t, s->seq++, type, a, b, -1};
    return event_heap_qpush(&s->events, e);
}

/* Worker w's completion at t, under its next version. */
static int push_done(sim *s, double t, int w)
{
    event e = {t, s->seq++, EV_TASK_DONE, w, ++s->wk[w].ver, s->wk[w].task.pos};
    return event_heap_qpush(&s->events, e);
}

static int pop(sim *s, event *e)
{
    return event_heap_qpop(&s->events, e);
}

/* A task's true duration (its sample's, or an equal share plus the part overhead) and its
 * sample's true GPU cost. */
static double true_cost(const sim *s, const dh__task *t, double *gpu)
{
    const dh__truth_of *r = dh__run_pos_truth(s->run, t->step, t->pos);
    double c = r ? r->cpu : dh__run_true_cpu(s->run, t->step, t->sample);
    *gpu = r ? r->gpu : s->run->truth.of[t->sample].gpu;
    return t->nparts > 1 ? c / t->nparts + DH_SPLIT_PART_OVERHEAD_S : c;
}

/* A hint: the ring's entry of the task worker w most likely gets next, into the cache. */
static void prefetch_next_truth(const sim *s, int w)
{
    int64_t pos = dh__sched_next_pos(s->sched, w), G = s->run->cfg.global_batch;
    if (pos >= 0) {
        const dh__truth_of *r = dh__run_pos_truth(s->run, pos / G, pos);
        if (r)
            __builtin_prefetch(r);
    }
}

static void fail(sim *s, int rc)
{
    if (!s->error)
        s->error = rc;
}

/* The speed of each running task while `busy` share the CPU. */
static double share(const sim *s, int busy)
{
    return busy > s->cores ? (double)s->cores / busy : 1.0;
}

/* ---------------------------------------------------------- the fetch model */

/* A sample's stored bytes and requests (a block of 256 KiB at most per request). */
static int64_t sample_fetch(const sim *s, int64_t sample, int64_t *requests)
{
    const dh_manifest *m = s->run->m;
    dh_sample_info si;
    int64_t bytes = 0;
    *requests = 0;
    if (dh_manifest_sample(m, sample, &si))
        return 0;
    for (int j = 0; j < si.media_count; j++) {
        dh_media_info mi;
        dh_manifest_media(m, sample, j, &mi);
        int64_t b = dh__stored_bytes(&mi);
        bytes += b;
        *requests += (b + FETCH_BLOCK - 1) / FETCH_BLOCK;
    }
    return bytes;
}

static double fetch_time(const fetch_model *f, int64_t bytes, int64_t requests, double bw)
{
    return (double)requests * f->latency + (double)bytes / bw;
}

static fetch_pos *fetch_find(fetch_model *f, int64_t pos)
{
    fetch_pos *e = &f->ring[pos & (f->cap - 1)];
    return e->pos == pos ? e : NULL;
}

/* A new entry for pos (the ring doubled while another live position holds its place). */
static fetch_pos *fetch_add(sim *s, int64_t pos)
{
    fetch_model *f = &s->fx;
    while (f->ring[pos & (f->cap - 1)].pos >= 0) {
        int64_t cap = f->cap * 2;
        fetch_pos *r = dh__malloc((size_t)cap * sizeof *r);
        if (!r) {
            fail(s, DH_ENOMEM);
            return NULL;
        }
        for (int64_t k = 0; k < cap; k++)
            r[k].pos = -1;
        for (int64_t k = 0; k < f->cap; k++)
            if (f->ring[k].pos >= 0)
                r[f->ring[k].pos & (cap - 1)] = f->ring[k];
        free(f->ring);
        f->ring = r;
        f->cap = cap;
    }
    fetch_pos *e = &f->ring[pos & (f->cap - 1)];
    *e = (fetch_pos){.pos = pos};
    return e;
}

static int node_of_rank(const sim *s, int rank)
{
    return s->fx.nodes > 1 ? rank / (s->run->cfg.ranks / s->fx.nodes) : 0;
}

/* Each node's fetchers take the next positions of their node's ranks, as far as the steps
 * predicted to start within DH__FETCH_HORIZON_S of the oldest step in flight (planned
 * ahead of admission if need be). */
static void fetch_fill(sim *s, double now)
{
    fetch_model *f = &s->fx;
    int64_t G = s->run->cfg.global_batch;
    for (int n = 0; n < f->nodes && !s->error; n++) {
        if (f->step[n] * G < f->low)
            f->step[n] = f->low / G, f->k[n] = 0;
        while (f->active[n] < f->slots && f->held[n] < f->budget && f->step[n] < s->N) {
            int planned = dh__sched_plan_ahead(s->sched, f->step[n], DH__FETCH_HORIZON_S);
            if (planned < 0) {
                fail(s, planned);
                return;
            }
            const int64_t *order = planned ? dh__sched_step_order(s->sched, f->step[n]) : NULL;
            if (!order)
                break; /* beyond the horizon (or the run's end) */
            if (f->k[n] >= G) {
                f->step[n]++, f->k[n] = 0;
                continue;
            }
            int64_t k = f->k[n]++, pos = f->step[n] * G + k;
            int rank = dh__sched_rank_of(s->sched, f->step[n], k);
            if (order[k] < 0 || rank < 0 || node_of_rank(s, rank) != n || fetch_find(f, pos))
                continue; /* another node's, or a worker started it already */
            int64_t req, bytes = sample_fetch(s, order[k], &req);
            fetch_pos *e = fetch_add(s, pos);
            if (!e)
                return;
            e->bytes = bytes;
            e->node = n;
            e->ready = now + fetch_time(f, bytes, req, f->slot_bw);
            f->active[n]++;
            f->held[n] += bytes;
            f->bytes += bytes, f->requests += req;
            if (push(s, e->ready, EV_FETCH_DONE, n, pos))
                fail(s, DH_ENOMEM);
        }
    }
}

/* Seconds worker-side before task t can be decoded: waiting for its fetch, or fetching it. */
static double fetch_wait(sim *s, const dh__task *t, double now)
{
    fetch_model *f = &s->fx;
    fetch_pos *e = fetch_find(f, t->pos);
    double wait = 0;
    if (e && e->taken)
        return 0; /* another part of a split sample fetched it */
    if (e) {
        wait = DH_MAX(0.0, e->ready - now);
        f->held[e->node] -= e->bytes;
        *(wait > 0 ? &f->waited_n : &f->ready_n) += 1;
    } else {
        int64_t req, bytes = sample_fetch(s, t->sample, &req);
        if (!(e = fetch_add(s, t->pos)))
            return 0;
        wait = fetch_time(f, bytes, req, f->worker_bw);
        f->bytes += bytes, f->requests += req;
        f->missed_n += f->slots > 0;
    }
    e->taken = 1;
    e->bytes = 0;
    f->wait_s += wait;
    return wait;
}

/* Steps before `step` are over: what the fetchers brought for them and no worker took. */
static void fetch_retire(sim *s, int64_t step)
{
    fetch_model *f = &s->fx;
    f->low = step * s->run->cfg.global_batch;
    for (int64_t k = 0; k < f->cap; k++) {
        fetch_pos *e = &f->ring[k];
        if (e->pos < 0 || e->pos >= f->low)
            continue;
        if (!e->taken) {
            f->held[e->node] -= e->bytes;
            f->dropped++;
        }
        e->pos = -1;
    }
}

static int fetch_init(sim *s)
{
    fetch_model *f = &s->fx;
    const dh_run_config *c = &s->run->cfg;
    f->on = c->fetch_latency_s > 0 || c->fetch_bandwidth > 0;
    if (!f->on)
        return 0;
    f->nodes = c->nodes > 1 ? c->nodes : 1;
    f->slots = c->fetchers < 0 ? 0 : c->fetchers > 0 ? c->fetchers : 16;
    f->latency = c->fetch_latency_s;
    double bw = c->fetch_bandwidth > 0 ? c->fetch_bandwidth : 1.25e9;
    f->slot_bw = bw / DH_MAX(f->slots, 1);
    f->worker_bw = bw / DH_MAX(s->nworkers / f->nodes, 1);
    f->budget = c->fetch_ahead_bytes > 0 ? c->fetch_ahead_bytes : (int64_t)256 << 20;
    f->cap = 1024;
    f->active = dh__calloc((size_t)f->nodes, sizeof *f->active);
    f->held = dh__calloc((size_t)f->nodes, sizeof *f->held);
    f->step = dh__calloc((size_t)f->nodes, sizeof *f->step);
    f->k = dh__calloc((size_t)f->nodes, sizeof *f->k);
    f->ring = dh__malloc((size_t)f->cap * sizeof *f->ring);
    if (!f->active || !f->held || !f->step || !f->k || !f->ring)
        return DH_ENOMEM;
    for (int64_t k = 0; k < f->cap; k++)
        f->ring[k].pos = -1;
    return 0;
}

static void fetch_free(fetch_model *f)
{
    free(f->active);
    free(f->held);
    free(f->step);
    free(f->k);
    free(f->ring);
}

/* Brings every running task's remaining work up to `now` at the current speed. */
static void contention_advance(sim *s, double now)
{
    double rate = share(s, s->busy), dt = now - s->shared_at;
    for (int w = 0; dt > 0 && rate < 1.0 && w < s->nworkers; w++)
        if (!dh__bitset_has(&s->idle, w))
            s->wk[w].rem -= dt * rate;
    s->shared_at = now;
}

/* New completion events for every running task at the current speed (the old ones go
 * stale by version). */
static int contention_reissue(sim *s, double now)
{
    double rate = share(s, s->busy);
    for (int w = 0; w < s->nworkers; w++)
        if (!dh__bitset_has(&s->idle, w) &&
            push_done(s, now + DH_MAX(s->wk[w].rem, 0.0) / rate, w))
            return DH_ENOMEM;
    return 0;
}

/* Gives worker w a task if the policy has one; returns 0 if it got one. */
static int dispatch(sim *s, int w, double now)
{
    worker_run *k = &s->wk[w];
    dh__task *t = &k->task;
    int rc = dh__sched_next_task(s->sched, w, now, t);
    if (rc) {
        if (rc < 0)
            fail(s, rc);
        return 1;
    }
    contention_advance(s, now);
    dh__bitset_put(&s->idle, w, 0);
    k->start = now;
    k->cost = true_cost(s, t, &k->gpu);
    prefetch_next_truth(s, w);
    /* A sample prepared on another node arrives after its network transfer; one on an
     * object store is decoded once its bytes are here. */
    k->rem = k->cost + t->ship_s;
    if (s->fx.on && !t->ship_s)
        k->rem += fetch_wait(s, t, now);
    if (share(s, ++s->busy) < 1.0 || share(s, s->busy - 1) < 1.0)
        rc = contention_reissue(s, now);
    else
        rc = push_done(s, now + k->rem, w);
    if (rc)
        fail(s, rc);
    return rc ? 1 : 0;
}

/*
 * Polls idle workers: those of one rank (local), or all (shared). Shared
 * workers are asked node by node (workers are numbered node-major): the
 * first idle worker of a node that gets nothing ends that node's poll, as
 * every other idle worker of the node would get the same nothing (its own
 * queue is empty and lending answers the same for all of them). Asking
 * every idle worker made each event cost O(W) at 1,024 nodes.
 */
static void poll_idle(sim *s, int rank, double now)
{
    int per = s->nworkers / s->run->cfg.ranks;
    int shared = dh__sched_worker_rank(s->sched, 0) < 0;
    int nodes = s->run->cfg.nodes > 1 ? s->run->cfg.nodes : 1, wpn = s->nworkers / nodes;
    int lo = shared || rank < 0 ? 0 : rank * per, hi = shared || rank < 0 ? s->nworkers : lo + per;
    for (int w = (int)dh__bitset_next(&s->idle, lo, hi); w < hi;
         w = (int)dh__bitset_next(&s->idle, w + 1, hi))
        if (dispatch(s, w, now) && shared)
            w = (w / wpn + 1) * wpn - 1; /* on to the next node's first worker */
}

static void start_compute(sim *s, int r, int64_t st, double now)
{
    double gpu = 0;
    int32_t n = dh__sched_batch_samples(s->sched, st, r, s->batch_buf, (int32_t)s->run->cfg.global_batch);
    dh__rec_batch *b = dh__records_batch(&s->rec, st, r);
    if (n < 0 || !b) {
        fail(s, n < 0 ? n : s->rec.error);
        return;
    }
    for (int32_t k = 0; k < n; k++)
        gpu += s->run->truth.of[s->batch_buf[k]].gpu;
    s->waiting[r] = -1;
    b->compute = gpu;
    dh__sched_batch_taken(s->sched, r, st, now);
    dh__trace_span(&s->trace, DH_TRACE_RANKS, r, "compute", now, gpu, st, r, -1);
    push(s, now + gpu, EV_COMPUTE_DONE, r, st);
    poll_idle(s, r, now); /* local: the prefetch window moved */
}

static void request(sim *s, int r, int64_t st, double now)
{
    dh__rec_batch *b = dh__records_batch(&s->rec, st, r);
    if (!b) {
        fail(s, s->rec.error ? s->rec.error : DH_EINVAL);
        return;
    }
    b->deadline = now;
    s->waiting[r] = st;
    if (dh__sched_batch_ready(s->sched, st, r))
        start_compute(s, r, st, now);
}

static void on_task_done(sim *s, const event *e)
{
    int w = e->a;
    worker_run *k = &s->wk[w];
    if (dh__bitset_has(&s->idle, w) || e->b != k->ver)
        return; /* re-issued at another speed */
    contention_advance(s, e->t);
    dh__bitset_put(&s->idle, w, 1);
    s->busy--;
    if (share(s, s->busy + 1) < 1.0 && contention_reissue(s, e->t) != 0) {
        fail(s, DH_ENOMEM);
        return;
    }
    dh__task t = k->task;
    double cost = k->cost;
    /* its wall time: its cost unless it shared the CPU with more tasks than cores */
    double wall = s->nworkers > s->cores ? e->t - k->start : cost + t.ship_s;
    dh__records_task(&s->rec, t.step, t.rank, k->start, wall);
    dh__trace_span(&s->trace, DH_TRACE_WORKERS, w, t.ship_s > 0 ? "prepare (lent)" : "prepare",
                   k->start, s->nworkers > s->cores ? wall : cost, t.step, t.rank, t.sample);
    /* The sample's exact GPU cost becomes known once it is prepared (docs/DESIGN.md mech. 4). */
    int rc = dh__sched_task_done(s->sched, &t, e->t, cost, k->gpu);
    dh__rec_batch *b = dh__records_batch(&s->rec, t.step, t.rank);
    if (rc < 0 || !b) {
        fail(s, rc < 0 ? rc : s->rec.error);
        return;
    }
    if (rc) {
        b->ready = e->t;
        if (s->waiting[t.rank] == t.step)
            start_compute(s, t.rank, t.step, e->t);
    }
    if (dh__bitset_has(&s->idle, w))
        dispatch(s, w, e->t);
}

static void on_compute_done(sim *s, const event *e)
{
    int r = e->a;
    int64_t st = e->b;
    dh__rec_batch *b = dh__records_batch(&s->rec, st, r);
    dh__sched_step_done(s->sched, r, st, e->t, b ? b->compute : 0);
    poll_idle(s, -1, e->t); /* memory was freed */
    if (++s->arrived == s->rec.R) {
        s->arrived = 0;
        if (push(s, e->t + s->run->gpu.c0, EV_BARRIER, -1, st))
            fail(s, DH_ENOMEM);
    }
}

static void on_barrier(sim *s, const event *e)
{
    int64_t next = e->b + 1;
    dh__records_close(&s->rec, e->b);
    if (s->fx.on)
        fetch_retire(s, next);
    if (next >= s->N || dh__run_should_stop(s->run)) {
        s->rec.makespan = e->t;
        s->done = 1;
        return;
    }
    dh__sched_rebalance(s->sched, next, e->t, NULL, NULL, NULL); /* before any rank takes its batch */
    for (int r = 0; r < s->rec.R; r++)
        request(s, r, next, e->t);
}

static void on_fetch_done(sim *s, const event *e)
{
    s->fx.active[e->a]--;
    fetch_fill(s, e->t);
}

static int sim_alloc(sim *s)
{
    int R = s->run->cfg.ranks;
    s->nworkers = dh__sched_worker_count(s->sched);
    s->wk = dh__calloc((size_t)s->nworkers, sizeof *s->wk);
    int rc = dh__bitset_init(&s->idle, s->nworkers);
    s->cores = s->run->cfg.workers;
    s->waiting = dh__malloc((size_t)R * sizeof *s->waiting);
    s->batch_buf = dh__malloc((size_t)s->run->cfg.global_batch * sizeof *s->batch_buf);
    if (rc || !s->wk || !s->waiting || !s->batch_buf)
        return DH_ENOMEM;
    for (int w = 0; w < s->nworkers; w++)
        dh__bitset_put(&s->idle, w, 1);
    s->events.tiered = 1;
    dh__run *run = s->run;
    if (dh__pos_truth_off)
        return 0; /* (a test's reference: every task reads its sample's truth) */
    run->pos_truth = dh__table_alloc((size_t)DH__POS_TRUTH_STEPS * (size_t)run->cfg.global_batch *
                                     sizeof *run->pos_truth);
    run->pos_truth_step = dh__malloc(DH__POS_TRUTH_STEPS * sizeof *run->pos_truth_step);
    if (!run->pos_truth || !run->pos_truth_step)
        return DH_ENOMEM;
    for (int k = 0; k < DH__POS_TRUTH_STEPS; k++)
        run->pos_truth_step[k] = -1;
    return 0;
}

static void sim_free(sim *s)
{
    event_heap_qfree(&s->events);
    free(s->wk);
    dh__bitset_free(&s->idle);
    free(s->waiting);
    free(s->batch_buf);
    dh__records_free(&s->rec);
    dh__sched_free(s->sched);
    fetch_free(&s->fx);
    free(s->run->pos_truth);
    free(s->run->pos_truth_step);
    s->run->pos_truth = NULL;
    s->run->pos_truth_step = NULL;
}

static int simulate(sim *s)
{
    for (int r = 0; r < s->rec.R; r++)
        request(s, r, 0, 0.0);
    poll_idle(s, -1, 0.0);
    while (!s->done && !s->error && s->events.n > 0) {
        event e;
        if (pop(s, &e)) {
            fail(s, DH_ENOMEM);
            break;
        }
        const event *next = s->events.n ? &s->events.a[0] : NULL;
        if (next && next->type == EV_TASK_DONE) { /* its worker's and task's rows, while this
                                                   * one is handled (a cache miss each) */
            __builtin_prefetch(&s->wk[next->a]);
            __builtin_prefetch((const char *)&s->wk[next->a] + 64);
            dh__sched_prefetch(s->sched, next->pos);
        }
        if (e.type == EV_TASK_DONE)
            on_task_done(s, &e);
        else if (e.type == EV_COMPUTE_DONE)
            on_compute_done(s, &e);
        else if (e.type == EV_FETCH_DONE)
            on_fetch_done(s, &e);
        else
            on_barrier(s, &e);
        if (s->fx.on) /* planning may have moved: the fetchers' next positions */
            fetch_fill(s, e.t);
    }
    if (!s->error && s->rec.error)
        s->error = s->rec.error; /* the records could not keep up (a fold failed) */
    if (s->error)
        return s->error;
    return s->done ? 0 : DH_EIO; /* an empty heap before the last step is a scheduler stall */
}

static int sim_start(sim *s, dh__run *run, const dh_run_config *cfg, char *err, size_t errlen)
{
    if (run->cfg.steps <= 0 && !cfg->should_stop) {
        dh__msg(err, errlen, "the simulator needs a run length (steps or epochs), or should_stop");
        return DH_EINVAL;
    }
    s->N = run->cfg.steps > 0 ? run->cfg.steps : DH__STEPS_UNBOUNDED;
    dh__sched_config sc;
    dh__run_sched_config(run, 0, &sc);
    int rc = dh__records_init(&s->rec, run->cfg.ranks, run->cfg.global_batch);
    if (!rc)
        rc = dh__sched_new(&sc, &s->sched);
    if (!rc)
        rc = sim_alloc(s);
    if (!rc)
        rc = fetch_init(s);
    if (!rc && (rc = dh__trace_open(&s->trace, cfg->trace_path, s->nworkers, run->cfg.ranks)))
        dh__msg(err, errlen, "cannot write the trace %s: %s", cfg->trace_path, dh_strerror(rc));
    else if (rc)
        dh__msg(err, errlen, "%s", dh_strerror(rc));
    s->rec.step_fixed = run->gpu.c0;
    s->rec.workers = run->cfg.workers;
    run->rec = &s->rec; /* drawn steps' truth: the bound's inputs */
    return rc;
}

int dh_sim_run(const dh_run_config *cfg, dh_result *out, char *err, size_t errlen)
{
    if (!cfg || !out)
        return DH_EINVAL;
    int rc = dh__result_check(out, err, errlen);
    if (rc)
        return rc;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    dh__run run;
    if ((rc = dh__run_setup(cfg, &run, err, errlen)))
        return rc;
    if ((rc = dh__run_check_budget(&run, 0, err, errlen))) {
        dh__run_free(&run);
        return rc;
    }
    dh_result full;
    sim s = {.run = &run};
    struct timespec t_setup;
    if (!(rc = sim_start(&s, &run, cfg, err, errlen))) {
        clock_gettime(CLOCK_MONOTONIC, &t_setup);
        rc = simulate(&s);
        int trc = dh__trace_close(&s.trace);
        if (rc == DH_EIO)
            dh__msg(err, errlen, "simulation stalled before the last step (policy %s)",
                    dh__policy_name(run.policy));
        else if (rc)
            dh__msg(err, errlen, "the simulation stopped: %s", dh_strerror(rc));
        else if (trc)
            dh__msg(err, errlen, "writing the trace %s failed", cfg->trace_path);
        rc = rc ? rc : trc;
        if (!rc) {
            dh__run_fill_result(&run, s.sched, &s.rec, "sim", &full);
            full.fetch_bytes = s.fx.bytes; /* simulated */
            full.fetch_requests = s.fx.requests;
            full.fetch_wait_s = s.fx.wait_s;
            full.fetch_ahead_ready = s.fx.ready_n;
            full.fetch_ahead_waited = s.fx.waited_n;
            full.fetch_ahead_missed = s.fx.missed_n;
            full.fetch_ahead_dropped = s.fx.dropped;
        }
    }
    sim_free(&s);
    dh__run_free(&run);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!rc) {
        full.wall_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
        full.setup_s =
            (double)(t_setup.tv_sec - t0.tv_sec) + (double)(t_setup.tv_nsec - t0.tv_nsec) * 1e-9;
        dh__result_give(out, &full);
    }
    return rc;
}
