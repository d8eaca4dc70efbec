/*
 * engine.c - the real engine's lifecycle and consumer API: W decoding
 * threads (workers.c) and R consumers driving the same scheduler as the
 * simulator, on the wall clock. See engine_int.h for the locking and the
 * step window.
 *
 * DESIGN: dh_engine_next_batch records the deadline (the request time) and
 * waits for readiness; dh_engine_release ends the step for that rank (the
 * scheduler learns the compute window) and frees the buffer. A run ends
 * after its last step, when dh_engine_stop is called, when should_stop says
 * so, or when something fails inside the engine; every consumer blocked in
 * next_batch then returns (DH_EEMPTY after the last step, DH_ECANCELED when
 * stopped, the failure's code otherwise).
 */
#include "engine_int.h"
#include "engine_serve.h"

#include "../catalog/catalog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dh__engine_fail_msg(dh_engine *e)
{
    pthread_mutex_lock(&e->mu);
    const char *m = e->error == DH_EFAILED && e->fail_msg[0] ? e->fail_msg : NULL;
    pthread_mutex_unlock(&e->mu);
    return m;
}

void dh__engine_abort(dh_engine *e, int rc, const char *why)
{
    pthread_mutex_lock(&e->mu);
    e->nops->own_error(e, why); /* the other nodes are told this reason */
    dh__eng_fail(e, rc);
    pthread_mutex_unlock(&e->mu);
}

/* engine_serve.h: the reason travels in this node's FINAL record, read at the others' HELLO. */
void dh__engine_refuse(dh_engine *e, int rc, const char *why)
{
    pthread_mutex_lock(&e->mu);
    if (!e->error)
        e->error = rc;
    e->nops->refuse(e, why);
    pthread_mutex_unlock(&e->mu);
}

const char *dh__engine_earlier_msg(dh_engine *e)
{
    pthread_mutex_lock(&e->mu);
    const char *m = e->nops->earlier(e);
    pthread_mutex_unlock(&e->mu);
    return m[0] ? m : NULL;
}

const char *dh__engine_peer_msg(dh_engine *e)
{
    pthread_mutex_lock(&e->mu);
    const char *m = e->nops->error(e);
    pthread_mutex_unlock(&e->mu);
    return m[0] ? m : NULL;
}

void dh__engine_count_taken(dh_engine *e)
{
    e->count_taken = 1;
}

const char *dh__engine_stopped_by(dh_engine *e)
{
    pthread_mutex_lock(&e->mu);
    const char *m = e->nops->stopped_by(e);
    pthread_mutex_unlock(&e->mu);
    return m[0] ? m : NULL;
}

int dh__engine_begin(dh_engine *e, int resume, int64_t epoch, int64_t step, int64_t shift,
                     int64_t steps, char *err, size_t errlen)
{
    if (e->nthreads)
        return dh__fail(err, errlen, DH_EINVAL, "the engine has begun already");
    if (resume) {
        dh_sampler_state st = {dh_manifest_hash(e->run.m), e->run.cfg.seed, epoch, step};
        int rc = dh_sampler_set_state(e->run.sampler, &st);
        if (!rc && shift)
            rc = dh__sampler_shift(e->run.sampler, shift);
        if (!rc)
            dh__run_begin_at(&e->run, epoch, step);
        if (!rc && e->N != DH__STEPS_UNBOUNDED && steps <= 0)
            rc = DH_ERANGE;
        if (rc)
            return dh__fail(err, errlen, rc, "cannot resume at epoch %lld step %lld: %s (an "
                            "epoch has %lld steps)", (long long)epoch, (long long)step,
                            dh_strerror(rc),
                            (long long)dh_sampler_steps_per_epoch(e->run.sampler));
        if (e->N != DH__STEPS_UNBOUNDED) { /* what remains of the job */
            e->N = steps;
            e->run.cfg.steps = e->N;
            dh__sched_set_steps(e->sched, e->N);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &e->t0); /* several nodes: the one they agree on */
    int rc = e->nops->begin(e, err, errlen);
    if (rc)
        return rc;
    rc = dh__eng_start_workers(e);
    if (rc)
        dh__msg(err, errlen, "cannot start the decoding threads: %s", dh_strerror(rc));
    return rc;
}

int dh__engine_pool(const dh_engine *e, int pool, int *fd, int64_t *size)
{
    const dh__ring *r = pool == 0 ? &e->ring : pool == 1 ? &e->arena : NULL;
    if (!r || r->shm.ro_fd < 0)
        return DH_EINVAL;
    *fd = r->shm.ro_fd; /* trainers get it read-only */
    *size = r->size;
    return 0;
}

int dh__engine_locate(const dh_engine *e, const uint8_t *data, int32_t *pool, int64_t *offset)
{
    for (int32_t p = 0; p < 2; p++) {
        const dh__ring *r = p ? &e->arena : &e->ring;
        if (data && r->base && data >= r->base && data < r->base + r->size) {
            *pool = p;
            *offset = data - r->base;
            return 0;
        }
    }
    return DH_EINVAL;
}

void dh_engine_stop(dh_engine *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&e->mu);
    dh__eng_stop_locked(e);
    pthread_mutex_unlock(&e->mu);
}

/* -------------------------------------------------------------- consumers */

/* 1 when batch (st, rank) may be handed out: prepared, and on several nodes neither waiting
 * for the nodes' plan nor for samples moved to it, nor held back by a stop. */
static int ready(dh_engine *e, int64_t st, int rank, const batch_slot *b)
{
    return dh__sched_batch_ready(e->sched, st, rank) && !b->agreeing && !b->incoming &&
           !b->departing && !e->nops->plan_pending(e, st, rank) && !e->nops->held(e, st);
}

/* Waits until batch (st, rank) is ready or the run stops; 0 or the reason it cannot be had. */
static int wait_ready(dh_engine *e, int64_t st, int rank, const batch_slot *b)
{
    while (!e->stop && !ready(e, st, rank, b))
        pthread_cond_wait(&e->ready, &e->mu);
    if (ready(e, st, rank, b) && !e->error)
        return 0;
    return e->error ? e->error : DH_ECANCELED;
}

/* dh_engine_next_batch; *wake set: idle workers wait for dh__engine_wake (the caller
 * answers its consumer first), else they are woken here. */
int dh__engine_next(dh_engine *e, int rank, dh_batch *out, int *wake)
{
    if (!e || !out || !dh__eng_rank_here(e, rank))
        return DH_EINVAL; /* not a rank, or another node's */
    pthread_mutex_lock(&e->mu);
    int64_t st = e->next_step[rank];
    if (st >= e->N) {
        pthread_mutex_unlock(&e->mu);
        return DH_EEMPTY;
    }
    double asked = dh__eng_elapsed(e);
    dh__rec_batch *rb = dh__records_batch(&e->rec, st, rank);
    batch_slot *b = dh__eng_slot(e, st, rank);
    int rc = rb && b ? 0 : (e->error ? e->error : DH_ENOMEM);
    if (!rc) {
        rb->deadline = asked;
        dh__eng_offer_step(e, st, DH_TRACE_RANKS, rank); /* unless it was offered once prepared */
        int early = !dh__sched_batch_ready(e->sched, st, rank);
        if (early) {
            pthread_cond_broadcast(&e->work); /* the request may be what admits this batch */
            atomic_fetch_add(&e->waiting, 1); /* a gate shared with other streams favours us */
        }
        rc = wait_ready(e, st, rank, b);
        if (early)
            atomic_fetch_sub(&e->waiting, 1);
    }
    if (!rc && !b->laid_out)
        rc = dh__lay_out(e, st, rank, b); /* a batch with no samples */
    if (rc) {
        pthread_mutex_unlock(&e->mu);
        return rc;
    }
    /* Again: while we waited, workers may have opened later steps and regrown the records'
     * ring, which moves every record (the slot b is allocated per step and stays put). */
    rb = dh__records_batch(&e->rec, st, rank);
    if (rb && rb->ready == 0)
        rb->ready = asked; /* empty batches are ready at once */
    if (rb && rb->ready > asked) /* the rank waited for its data: the trace says how long */
        dh__trace_span(&e->trace, DH_TRACE_RANKS, rank, "wait for data", asked,
                       rb->ready - asked, st, rank, -1);
    b->taken = dh__eng_elapsed(e);
    dh__sched_batch_taken(e->sched, rank, st, b->taken);
    if (e->last_take > 0) /* how often this engine's trainers take batches (a gate reads it) */
        e->take_gap = 0.8 * e->take_gap + 0.2 * (b->taken - e->last_take);
    e->last_take = b->taken;
    e->next_step[rank]++;
    e->nops->wake(e); /* several nodes: a step this rank still keeps may be exchanged now */
    if (!b->draws && b->nitems) /* what each item drew: the same draws its workers made */
        b->draws = dh__calloc((size_t)b->nitems, sizeof *b->draws);
    for (int32_t k = 0; b->draws && k < b->nitems; k++)
        dh__run_draw(&e->run, st, b->items[k].sample, b->items[k].media, &b->draws[k]);
    *out = (dh_batch){.step = st, .rank = rank, .nsamples = b->nsamples, .nitems = b->nitems,
                      .nfailed = b->nfailed, .samples = b->samples, .tokens = b->tokens,
                      .items = b->items, .bytes = b->bytes, .data = dh__slot_data(e, b),
                      .draws = b->draws};
    /* local: the prefetch window moved. Only idle workers need the news, and they get it
     * after the lock is dropped: the consumer's request is the latency users see. */
    int idle = e->idle_workers > 0;
    pthread_mutex_unlock(&e->mu);
    if (wake)
        *wake = idle;
    else if (idle)
        pthread_cond_broadcast(&e->work);
    return 0;
}

void dh__engine_set_gate(dh_engine *e, struct dh__gate *g)
{
    e->gate = g;
}

double dh__engine_gate_wait(dh_engine *e)
{
    pthread_mutex_lock(&e->mu);
    double s = e->gate_wait_s;
    pthread_mutex_unlock(&e->mu);
    return s;
}

void dh__engine_wake(dh_engine *e)
{
    pthread_cond_broadcast(&e->work); /* no state changes here: nothing to lock */
}

int dh_engine_next_batch(dh_engine *e, int rank, dh_batch *out)
{
    return dh__engine_next(e, rank, out, NULL);
}

double dh_engine_batch_gpu_seconds(const dh_engine *e, const dh_batch *b)
{
    double g = 0;
    for (int32_t k = 0; k < b->nsamples; k++)
        g += e->run.truth.of[b->samples[k]].gpu;
    return g;
}

void dh_engine_release(dh_engine *e, const dh_batch *b, double gpu_seconds)
{
    if (!e || !b)
        return;
    pthread_mutex_lock(&e->mu);
    batch_slot *s = dh__eng_slot(e, b->step, b->rank);
    dh__rec_batch *rb = dh__records_batch(&e->rec, b->step, b->rank);
    if (!s || !rb || !dh__eng_rank_here(e, b->rank)) { /* released twice, or not ours */
        pthread_mutex_unlock(&e->mu);
        return;
    }
    if (!s->closed_early) { /* else every node recorded its step already (nodes_step.c) */
        double gpu = gpu_seconds >= 0 ? gpu_seconds : dh_engine_batch_gpu_seconds(e, b);
        rb->compute = gpu;
        s->released_at = dh__eng_elapsed(e);
        dh__trace_span(&e->trace, DH_TRACE_RANKS, b->rank, "compute", s->taken,
                       dh__eng_elapsed(e) - s->taken, b->step, b->rank, -1);
        dh__sched_step_done(e->sched, b->rank, b->step, dh__eng_elapsed(e), gpu);
    }
    if (s->allocated)
        dh__ring_free(s->in_arena ? &e->arena : &e->ring, s->block);
    s->allocated = 0;
    dh__slot_clear_layout(s);
    dh__eng_step_released(e, b->step);
    if (e->lo > b->step) /* a step just ended: stop here? */
        e->nops->step_closed(e);
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
}

/* engine_serve.h: a dead trainer's batch: its memory comes back, its step stays unfinished. */
void dh__engine_reclaim(dh_engine *e, const dh_batch *b)
{
    if (!e || !b)
        return;
    pthread_mutex_lock(&e->mu);
    batch_slot *s = dh__eng_slot(e, b->step, b->rank);
    if (s && dh__eng_rank_here(e, b->rank) && s->allocated) {
        dh__ring_free(s->in_arena ? &e->arena : &e->ring, s->block);
        s->allocated = 0;
        dh__slot_clear_layout(s);
        pthread_cond_broadcast(&e->work);
    }
    pthread_mutex_unlock(&e->mu);
}

/* -------------------------------------------------------------- lifecycle */

static int engine_alloc(dh_engine *e, char *err, size_t errlen)
{
    e->next_step = dh__calloc((size_t)e->R, sizeof *e->next_step);
    e->frozen = dh__calloc((size_t)e->R * 3, 1);
    e->received = e->frozen ? e->frozen + e->R : NULL;
    e->changed = e->frozen ? e->frozen + 2 * e->R : NULL;
    e->fresh = dh__calloc((size_t)e->R, sizeof *e->fresh);
    if (!e->next_step || !e->frozen || !e->fresh)
        return DH_ENOMEM;
    /* Blocks outstanding at once: batches holding a buffer, far fewer than this. */
    int64_t max_blocks = DH_MAX(1 << 16, 64 * (int64_t)e->R);
    int rc = dh__records_init(&e->rec, e->R, e->G);
    e->rec.step_fixed = e->run.gpu.c0;
    e->rec.cpu_measured = 1;
    e->rec.workers = e->run.cfg.workers;
    e->rec.gpu_measured = e->shared > 0; /* trainers report their own compute */
    e->run.rec = &e->rec;
    int share = e->shared ? DH_RING_SHARE : 0;
    if (!rc)
        rc = dh__ring_init(&e->ring, dh__eng_ring_size(e), max_blocks, share, err, errlen);
    if (!rc) /* copies land here on a critical path: fault its pages in now */
        rc = dh__ring_init(&e->arena, dh__eng_arena_size(e), max_blocks, DH_RING_POPULATE | share,
                           err, errlen);
    return rc;
}

static dh_engine *engine_new(const dh_run_config *cfg, dh_sample_error_cb on_error, void *user)
{
    dh_engine *e = dh__calloc(1, sizeof *e);
    if (!e)
        return NULL;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->ready, NULL);
    pthread_cond_init(&e->room, NULL);
    e->on_error = on_error;
    e->user = user;
    e->spec = cfg->spec;
    e->nops = &dh__one_node; /* until the run says otherwise (dh__engine_start) */
    return e;
}

/* A serving engine's default budget: the run's, which also holds the batches trainers may
 * keep (`shared` each). */
static int64_t serving_budget(const dh__run *run, int shared)
{
    return run->cfg.memory_budget + dh__run_pool_slack(run, shared) - dh__run_pool_slack(run, 0);
}

int64_t dh__engine_default_budget(const dh_run_config *cfg, int shared, char *err,
                                  size_t errlen)
{
    dh_run_config c = *cfg;
    c.memory_budget = 0;
    dh__run run;
    int rc = dh__run_setup(&c, &run, err, errlen);
    if (rc)
        return rc;
    int64_t b = serving_budget(&run, shared);
    dh__run_free(&run);
    return b;
}

/* The engine's live figures, when the run names an endpoint (cfg->metrics). 0 or an error. */
static int publish(dh_engine *e, const dh_run_config *cfg, char *why, size_t len)
{
    if (!cfg->metrics)
        return 0;
    const char *name = cfg->metrics_stream ? cfg->metrics_stream : "train";
    e->live = dh__metrics_stream(cfg->metrics, name, e->rank_lo, e->rank_hi);
    if (!e->live)
        return dh__fail(why, len, DH_EINVAL, "metrics: stream \"%s\" is published with other "
                        "ranks already, or %d streams are (or out of memory)", name,
                        DH__LIVE_STREAMS);
    e->rec.live = e->live;
    atomic_store(&e->live->pool_budget, e->run.cfg.memory_budget);
    atomic_store(&e->live->running, 1);
    return 0;
}

void dh__engine_count_lease(dh_engine *e, int delta)
{
    if (e->live)
        atomic_fetch_add_explicit(&e->live->leases, delta, memory_order_relaxed);
}

int dh__engine_start(const dh_run_config *cfg, int shared, dh_sample_error_cb on_error,
                     void *user, dh_engine **out, char *err, size_t errlen)
{
    if (!cfg || !out)
        return DH_EINVAL;
    *out = NULL;
    if (!cfg->manifest)
        return dh__fail(err, errlen, DH_EINVAL, "the real engine needs a manifest of real media");
    if (cfg->nodes > 1 && !cfg->exchange)
        return dh__fail(err, errlen, DH_EINVAL, "the real engine runs on several nodes as the "
                        "agent started by mpirun (mpirun -np NODES datahelix run), which "
                        "exchanges progress between them; --nodes alone is for the simulator");
    dh_engine *e = engine_new(cfg, on_error, user);
    if (!e)
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory starting the engine");
    e->shared = shared;
    int rc = dh__run_setup(cfg, &e->run, err, errlen);
    if (rc) {
        dh_engine_free(e);
        return rc;
    }
    if (shared && !cfg->memory_budget)
        e->run.cfg.memory_budget = serving_budget(&e->run, shared);
    if (cfg->exchange && cfg->nodes > 1) /* several nodes: each holds its share */
        e->run.cfg.memory_budget = dh__run_node_budget(&e->run, cfg->memory_budget, shared);
    if ((rc = dh__run_check_budget(&e->run, shared, err, errlen))) {
        dh_engine_free(e);
        return rc;
    }
    e->N = e->run.cfg.steps > 0 ? e->run.cfg.steps : DH__STEPS_UNBOUNDED;
    e->G = e->run.cfg.global_batch;
    e->R = e->run.cfg.ranks;
    e->spec = e->run.use_spec;
    dh__sched_config sc;
    dh__run_sched_config(&e->run, shared, &sc);
    char why[1200] = "";
    e->nops = cfg->exchange && cfg->nodes > 1 ? &dh__several_nodes : &dh__one_node;
    e->nodes = 1;
    e->rank_hi = e->R; /* one node: every rank; several: this node's share (init) */
    rc = e->nops->init(e, &sc);
    dh__store_conf store;
    const char *objects[3];
    int nobj = e->run.m ? dh__eng_first_objects(e->run.m, objects, 3) : 0;
    e->objects = nobj > 0;
    if (!rc && e->objects && /* the store's settings, and that it answers, once */
        ((rc = dh__store_conf_env(&store, why, sizeof why)) ||
         (rc = dh__store_reachable(&store, objects, nobj, why, sizeof why))))
        snprintf(why + strlen(why), sizeof why - strlen(why), " (the manifest's media are on an "
                 "object store: docs/STORAGE.md)");
    if (!rc && !(rc = dh__sched_new(&sc, &e->sched)) && !(rc = engine_alloc(e, why, sizeof why)) &&
        !(rc = dh__trace_open(&e->trace, cfg->trace_path, dh__sched_worker_count(e->sched), e->R))) {
        clock_gettime(CLOCK_MONOTONIC, &e->t0);
        rc = publish(e, cfg, why, sizeof why);
        /* every node the same job, now; a serving engine begins on attach */
        if (!rc && !(rc = e->nops->hello(e, why, sizeof why)) && !shared &&
            !(rc = e->nops->begin(e, why, sizeof why)))
            rc = dh__eng_start_workers(e);
    }
    if (rc) {
        dh__msg(err, errlen, "cannot start the engine: %s", why[0] ? why : dh_strerror(rc));
        dh_engine_finish(e, NULL);
        dh_engine_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

int dh_engine_finish(dh_engine *e, dh_result *out)
{
    if (!e)
        return DH_EINVAL;
    e->nops->drain(e);
    pthread_mutex_lock(&e->mu);
    dh__eng_stop_locked(e);
    pthread_mutex_unlock(&e->mu);
    for (int w = 0; w < e->nthreads; w++)
        pthread_join(e->threads[w], NULL);
    e->nthreads = 0;
    dh__eng_stop_fetchers(e); /* after the workers, who may wait on a range in flight */
    if (!e->error && e->nfail > 0 && e->nok == 0) { /* not one sample could be read */
        snprintf(e->fail_msg, sizeof e->fail_msg, "every sample with media failed (%lld)",
                 (long long)e->nfail);
        e->error = DH_EFAILED;
    }
    int trc = dh__trace_close(&e->trace);
    if (e->rec.makespan <= 0)
        e->rec.makespan = dh__eng_elapsed(e);
    /* Several nodes: every node's totals (the records hold every rank already). Always, a
     * failed start included: it joins the layer's threads, and the other nodes wait for
     * this one's FINAL. */
    dh__node_totals t = {.cpu_sum = e->cpu_sum, .worker_cpu = e->worker_cpu,
                         .cpu_counted = e->rec.cpu_spent,
                         .makespan = e->rec.makespan, .peak = e->ring.peak + e->arena.peak,
                         DH__FETCH_TOTALS(e->fetched)};
    e->nops->finish(e, &t);
    if (!out)
        return e->error ? e->error : trc;
    int rc = dh__result_check(out, NULL, 0);
    if (rc)
        return rc;
    e->rec.makespan = t.makespan;
    /* GPU terms from the ground truth (emulated ranks sleep it) or the trainers' reported
     * compute; the CPU term is what the workers measured for the completed steps, on every
     * node: W threads cannot spend more than W x the makespan on them, so the bound is one
     * by construction (CPU of steps never completed, spent maybe after the last one, is not
     * counted). */
    e->rec.cpu_true_sum = t.cpu_counted;
    if (!e->error && e->rec.error)
        e->error = e->rec.error;

    dh_result full;
    dh__run_fill_result(&e->run, e->sched, &e->rec, "real", &full);
    /* the pool's real use, not the scheduler's accounting, with the move arena's */
    full.memory_peak = t.peak;
    full.framework_overhead = t.worker_cpu > 0 ? 1.0 - t.cpu_sum / t.worker_cpu : 0;
    full.wall_s = dh__eng_elapsed(e);
    e->nops->result(e, &t, &full);
    full.fetch_bytes = t.fetch_bytes; /* every node's */
    full.fetch_requests = t.fetch_requests;
    full.fetch_retries = t.fetch_retries;
    full.fetch_failures = t.fetch_failures;
    full.fetch_wait_s = t.fetch_wait;
    dh__fetch_stats fit = {.fit_n = t.fit_n, .fit_t = t.fit_t, .fit_b = t.fit_b,
                           .fit_bb = t.fit_bb, .fit_bt = t.fit_bt}; /* every node's requests */
    dh__fetch_fit(&fit, &full.fetch_latency_s, &full.fetch_bandwidth);
    full.fetch_cache_hits = t.cache_hits;
    full.fetch_cache_bytes = t.cache_bytes;
    full.fetch_ahead_ready = e->pf_stats.taken_ready; /* this node's */
    full.fetch_ahead_waited = e->pf_stats.taken_waited;
    full.fetch_ahead_missed = e->pf_stats.missed;
    full.fetch_ahead_dropped = e->pf_stats.dropped;
    dh__result_give(out, &full);
    return e->error ? e->error : trc;
}

int dh_engine_start(const dh_run_config *cfg, dh_sample_error_cb on_error, void *user,
                    dh_engine **out, char *err, size_t errlen)
{
    return dh__engine_start(cfg, 0, on_error, user, out, err, errlen);
}

void dh_engine_free(dh_engine *e)
{
    if (!e)
        return;
    dh__eng_stop_fetchers(e);
    if (e->live) /* its totals stay at the endpoint */
        atomic_store(&e->live->running, 0);
    dh__eng_slots_free(e);
    free(e->frozen);
    free(e->fresh);
    free(e->next_step);
    free(e->threads);
    dh__ring_destroy(&e->ring);
    dh__ring_destroy(&e->arena);
    dh__records_free(&e->rec);
    e->nops->free(e);
    dh__sched_free(e->sched);
    dh__run_free(&e->run);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->ready);
    pthread_cond_destroy(&e->room);
    free(e);
}
