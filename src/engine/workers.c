/*
 * workers.c - the real engine's decoding threads: each pulls its next task
 * from the scheduler under e->mu, decodes outside it straight into the
 * batch buffer, and reports the measured CPU time back.
 *
 * DESIGN: a task is one sample, or one part of a split sample: part p of n
 * decodes its share of the sampled video frames. A failed sample's slots
 * are zeroed and its items carry the error; the batch is still delivered
 * and the failure counted once per scheduled occurrence (the same manifest
 * sample in a later epoch is decoded afresh), so delivered + failed =
 * samples. A scheduler failure stops the run (dh__eng_fail), never waits.
 */
#include "engine_int.h"

#include "../codec/decode.h"
#include "../codec/source.h"
#include "../store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void report(dh_engine *e, const dh__task *t, const char *path, int code, const char *msg)
{
    dh_sample_info si;
    dh_manifest_sample(e->run.m, t->sample, &si);
    if (e->on_error) {
        dh_sample_error se = {t->step, t->rank, t->sample, si.id, path, code, msg};
        e->on_error(&se, e->user);
    }
}

/* Seconds task t may take (dh_run_config.sample_timeout_s); 0: no limit. */
static double task_limit(const dh_engine *e, const dh__task *t)
{
    double cfg = e->run.cfg.sample_timeout_s;
    if (cfg != 0)
        return cfg > 0 ? cfg : 0;
    return DH_MIN(300.0, DH_MAX(10.0, 20.0 * t->pred_cost));
}

int dh__eng_run_task(dh_engine *e, const dh__task *t, const dh_batch_item *items,
                     int32_t nitems, uint8_t *base, dh__worker_ctx *x)
{
    dh__fd_cache *shards = x->shards;
    char *path = x->path, *err = x->err;
    size_t pathlen = sizeof x->path, errlen = sizeof x->err;
    const dh_manifest *m = e->run.m;
    dh_sample_info si;
    dh_manifest_sample(m, t->sample, &si);
    double limit = task_limit(e, t), started = dh__source_now(); /* one limit, every item */
    int32_t first = dh__slot_items_of(items, nitems, t->sample, NULL);
    if (first + si.media_count > nitems)
        return DH_EINVAL; /* the layout does not hold this sample: a scheduler bug */
    for (int32_t j = 0; j < si.media_count; j++) {
        dh_media_info mi;
        dh_manifest_media(m, t->sample, j, &mi);
        const dh_batch_item *it = &items[first + j];
        const char *dir = dh_manifest_dir(m);
        if (dh__is_remote(mi.path)) /* an object: without a query string or credentials */
            dh__store_display(mi.path, path, pathlen);
        else
            snprintf(path, pathlen, "%s%s%s", dir, dir[0] ? "/" : "", mi.path);
        snprintf(path + strlen(path), pathlen - strlen(path), "%s%s", mi.offset > 0 ? ":" : "",
                 mi.offset > 0 ? (mi.member ? mi.member : "?") : "");
        /* Opened beneath the manifest's directory by the kernel, within the task's limit; a
         * shard's member is read in place. */
        dh__media_src src = DH__ITEM_SRC(dir, mi.path, &mi);
        src.cache = shards;
        src.limit_s = limit;
        src.started = started;
        /* What random augmentation drew for this item in this step's epoch (the plain draw
         * without random keys): the same draw the cost model planned with. */
        dh_media_draw dr;
        int rc = dh__run_draw(&e->run, t->step, t->sample, j, &dr);
        if (rc)
            return dh__fail(err, errlen, rc, "cannot draw its random augmentation from its "
                            "descriptor");
        rc = dh__decode_item(&src, e->spec, &mi, &dr, t->part, t->nparts, base + it->offset,
                             (size_t)it->bytes, NULL, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* 1 when t's sample has failed in this batch already (another part failed it). */
static int sample_failed(const batch_slot *b, int64_t sample)
{
    int32_t k = dh__slot_items_of(b->items, b->nitems, sample, NULL);
    return k < b->nitems && b->items[k].status != 0;
}

/* Marks sample t->sample failed in its batch: its items carry the code. */
static void fail_sample(dh_engine *e, const dh__task *t, batch_slot *b, int code)
{
    if (sample_failed(b, t->sample))
        return;
    b->nfailed++;
    dh__rec_step *sp = dh__records_step(&e->rec, t->step);
    if (sp)
        sp->failed++;
    for (int32_t k = 0; k < b->nitems; k++)
        if (b->items[k].sample == t->sample)
            b->items[k].status = code;
}

/*
 * Zeroes the slots of failed samples once the batch is complete: only then
 * has every part of a split sample stopped writing into its slot.
 */
static void zero_failed(batch_slot *b, uint8_t *base)
{
    for (int32_t k = 0; base && k < b->nitems && b->nfailed; k++)
        if (b->items[k].status)
            memset(base + b->items[k].offset, 0, (size_t)b->items[k].bytes);
}

/*
 * The exact GPU cost of t's sample once its last part is done: the user's
 * reading of the decoded items, or the emulated ranks' per-sample time;
 * -1 for a failed sample (it does not move).
 */
static double revealed_gpu(dh_engine *e, const dh__task *t, const batch_slot *b,
                           const uint8_t *base)
{
    if (sample_failed(b, t->sample) || !dh__sched_last_part(e->sched, t))
        return -1.0;
    if (!e->run.cfg.sample_gpu_cost)
        return e->run.truth.of[t->sample].gpu;
    int32_t n, first = dh__slot_items_of(b->items, b->nitems, t->sample, &n);
    return e->run.cfg.sample_gpu_cost(t->sample, b->items + first, n, base,
                                      e->run.cfg.sample_gpu_cost_user);
}

/* 1 when sample i's failure rc came from an object store (its media are objects, and the
 * store refused, failed or did not answer in time). */
static int store_failure(const dh_engine *e, int64_t i, int rc)
{
    dh_media_info mi;
    return (rc == DH_EREMOTE || rc == DH_ETIMEDOUT || rc == DH_ENOENT || rc == DH_EACCES) &&
           !dh_manifest_media(e->run.m, i, 0, &mi) && dh__is_remote(mi.path);
}

/* Stops the run (DH_EFAILED) when failures pass dh_run_config.max_failed_frac: at least 16,
 * and more than that fraction of the samples finished so far; or when the object store
 * failed the last DH__STORE_STREAK samples in a row (a store that went down in a long run
 * would otherwise need as many failures as the samples delivered before it). */
static void too_many_failed(dh_engine *e, const dh__task *t, int rc, const char *path,
                            const char *why)
{
    double frac = e->run.cfg.max_failed_frac > 0 ? e->run.cfg.max_failed_frac : 0.5;
    e->store_streak = store_failure(e, t->sample, rc) ? e->store_streak + 1 : 0;
    int share = e->nfail >= 16 && (double)e->nfail > frac * (double)(e->nfail + e->nok);
    if (frac >= 1 || (!share && e->store_streak < DH__STORE_STREAK))
        return;
    dh_sample_info si;
    dh_manifest_sample(e->run.m, t->sample, &si);
    /* the sample, and its file when it had one to open: a trainer hears only of the last */
    char last[1024];
    snprintf(last, sizeof last, "\"%s\"%s%s%s", si.id, path && path[0] ? " (" : "",
             path && path[0] ? path : "", path && path[0] ? ")" : "");
    if (share)
        snprintf(e->fail_msg, sizeof e->fail_msg, "%lld of the %lld samples finished so far "
                 "failed, over the --max-failed share %.2f (the last, %s: %s; the agent's "
                 "log names every one: more than one file may be missing)",
                 (long long)e->nfail, (long long)(e->nfail + e->nok), frac, last, why);
    else
        snprintf(e->fail_msg, sizeof e->fail_msg, "the object store failed the last %d "
                 "samples in a row: it looks unreachable or refuses us (the last, %s: %s; "
                 "--max-failed 1 goes on regardless)", e->store_streak, last, why);
    dh__eng_fail(e, DH_EFAILED);
}

/* A task in the live figures, under the kind of its sample's first medium: its CPU time,
 * and its sample once prepared fine (its last part done, no part failed). */
static void live_task(dh__live *l, const batch_slot *b, int64_t sample, double cpu, int done)
{
    int32_t k = dh__slot_items_of(b->items, b->nitems, sample, NULL);
    int kind = k < b->nitems && b->items[k].type >= 0 && b->items[k].type < DH_MEDIA_TYPE_COUNT
                   ? b->items[k].type
                   : DH_MEDIA_TYPE_COUNT; /* text only */
    dh__live_observe(&l->decode[kind], cpu);
    atomic_fetch_add_explicit(&l->busy_ns, (long long)(cpu * 1e9), memory_order_relaxed);
    if (done)
        atomic_fetch_add_explicit(&l->prepared[kind], 1, memory_order_relaxed);
}

/* What a worker read from object stores since it last said, in the live figures. */
static void live_reads(dh__live *l, dh__worker_ctx *x)
{
    dh__fetch_stats now = dh__fd_cache_fetched(x->shards), d;
    dh__fetch_since(&d, &now, &x->published);
    x->published = now;
    atomic_fetch_add_explicit(&l->read_bytes, d.bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->read_requests, d.requests, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->read_failures, d.failures, memory_order_relaxed);
}

void dh__eng_finish_task(dh_engine *e, int w, const dh__task *t, batch_slot *b, uint8_t *base,
                         int rc, double started, double cpu, const char *path, const char *err,
                         int remote)
{
    if (rc == DH_ECANCELED && e->stop) { /* the run is stopping: not the sample's fault */
        b->inflight--;
        return;
    }
    if (rc) {
        if (!sample_failed(b, t->sample)) { /* a split sample's other parts fail it once */
            report(e, t, path, rc, err[0] ? err : dh_strerror(rc));
            if (e->live)
                dh__live_failure(e->live, rc);
            e->nfail++;
            too_many_failed(e, t, rc, path, err[0] ? err : dh_strerror(rc));
        }
        fail_sample(e, t, b, rc);
    } else if (dh__sched_last_part(e->sched, t) &&
               dh__slot_items_of(b->items, b->nitems, t->sample, NULL) < b->nitems) {
        e->nok++; /* a sample with media read (a text alone proves nothing about the files) */
        e->store_streak = 0;
    }
    if (!remote) {
        e->cpu_sum += cpu;
        dh__records_cpu(&e->rec, t->step, cpu);
    }
    if (!remote && e->live && cpu >= 0)
        live_task(e->live, b, t->sample, cpu,
                  !rc && dh__sched_last_part(e->sched, t) && !sample_failed(b, t->sample));
    dh__records_task(&e->rec, t->step, t->rank, started, dh__eng_elapsed(e) - started);
    if (w >= 0)
        dh__trace_span(&e->trace, DH_TRACE_WORKERS, w, rc ? "prepare (failed)" : "prepare",
                       started, dh__eng_elapsed(e) - started, t->step, t->rank, t->sample);
    int complete = dh__sched_task_done(e->sched, t, dh__eng_elapsed(e), rc ? -1.0 : cpu,
                                       revealed_gpu(e, t, b, base));
    b->inflight--; /* done writing: b may be re-laid out from here */
    if (complete < 0) {
        dh__eng_fail(e, complete);
    } else if (complete) {
        zero_failed(b, base);
        dh__rec_batch *rb = dh__records_batch(&e->rec, t->step, t->rank);
        if (rb)
            rb->ready = dh__eng_elapsed(e);
        dh__eng_offer_prepared_step(e, t->step, w);
        pthread_cond_broadcast(&e->ready);
    }
    pthread_cond_broadcast(&e->work);
}

/* Takes and runs one task; returns 1 when there was none (the caller waits). x->held: this
 * worker holds a token of the engine's gate (kept from task to task, given back when idle). */
static int work_once(dh_engine *e, int w, dh__worker_ctx *x)
{
    int *held = &x->held;
    dh__task t;
    int rc = e->nops->take_back(e, &t) ? 0
                                       : dh__sched_next_task(e->sched, w, dh__eng_elapsed(e), &t);
    if (rc == DH__IDLE && e->nops->lend_work(e, w, x)) /* another node's late work, done */
        return 0;
    if (rc) {
        if (rc < 0)
            dh__eng_fail(e, rc);
        return 1;
    }
    if (t.worker < 0)
        t.worker = w; /* handed back: this worker runs it */
    batch_slot *b = dh__eng_slot(e, t.step, t.rank);
    if (!b) {
        dh__eng_fail(e, e->error ? e->error : DH_EINVAL);
        return 1;
    }
    b->inflight++; /* frozen for rebalancing from here until the task is done */
    rc = b->laid_out ? 0 : dh__lay_out(e, t.step, t.rank, b);
    if (!rc)
        rc = dh__ensure_buffer(e, b);
    uint8_t *base = dh__slot_data(e, b);
    const dh_batch_item *items = b->items; /* stable while inflight > 0 */
    int32_t nitems = b->nitems;
    double now = dh__eng_elapsed(e), slack = 0;
    int active = 0;
    if (e->gate) { /* active: its trainers took a batch lately (a few of their gaps ago) */
        slack = dh__sched_task_slack(e->sched, &t, now);
        active = e->last_take > 0 && now - e->last_take < DH_MAX(0.5, 4 * e->take_gap);
    }
    pthread_mutex_unlock(&e->mu);
    double waited = !e->gate ? 0
                    : *held ? dh__gate_renew(e->gate, &e->waiting, active, slack)
                            : dh__gate_enter(e->gate, &e->waiting, active, slack);
    *held = e->gate != NULL;
    double c0 = dh__thread_cpu(), started = dh__eng_elapsed(e);
    x->err[0] = 0;
    x->path[0] = 0;
    if (!rc)
        rc = dh__eng_run_task(e, &t, items, nitems, base, x);
    double cpu = dh__thread_cpu() - c0;
    pthread_mutex_lock(&e->mu);
    e->gate_wait_s += waited;
    dh__eng_finish_task(e, w, &t, b, base, rc, started, cpu, x->path, x->err, 0);
    return 0;
}

static void *worker_main(void *arg)
{
    dh_engine *e = ((void **)arg)[0];
    int w = (int)(intptr_t)((void **)arg)[1];
    free(arg);
    dh__worker_ctx *x = dh__calloc(1, sizeof *x); /* 5 KB: off the thread's stack */
    if (x)
        x->shards = dh__fd_cache_new(8);
    if (x && x->shards)
        dh__fd_cache_use_prefetch(x->shards, e->pf, &e->io_stop);
    pthread_mutex_lock(&e->mu);
    if (!x)
        dh__eng_fail(e, DH_ENOMEM);
    while (x && !e->stop)
        if (!work_once(e, w, x)) {
            if (e->live && e->objects)
                live_reads(e->live, x);
        } else if (!e->stop) {
            if (x->held) /* idle: another stream may use the CPU */
                dh__gate_leave(e->gate), x->held = 0;
            e->idle_workers++;
            pthread_cond_wait(&e->work, &e->mu);
            e->idle_workers--;
        }
    if (x && x->held)
        dh__gate_leave(e->gate);
    e->worker_cpu += dh__thread_cpu(); /* under e->mu: the whole thread, scheduling included */
    dh__fetch_stats fs = dh__fd_cache_fetched(x ? x->shards : NULL);
    dh__fetch_add(&e->fetched, &fs);
    pthread_mutex_unlock(&e->mu);
    if (x)
        dh__fd_cache_free(x->shards);
    free(x);
    return NULL;
}

/*
 * The next range the fetchers should bring (dh__prefetch's next): each item on an object
 * of this node's ranks' samples, step by step in the schedule's order, over the steps
 * predicted to start within DH__FETCH_HORIZON_S of the oldest one in flight (planned ahead
 * of admission if need be); 0 while the next step is beyond that, -1 once stopped.
 */
static int next_fetch(void *user, dh__fetch_job *job)
{
    dh_engine *e = user;
    const dh_manifest *m = e->run.m;
    pthread_mutex_lock(&e->mu);
    int got = 0;
    while (!got && !e->stop) {
        if (e->pf_step < e->lo) /* behind the window: what is left starts at its head */
            e->pf_step = e->lo, e->pf_k = 0, e->pf_j = 0;
        int planned = e->pf_step < e->N
                          ? dh__sched_plan_ahead(e->sched, e->pf_step, DH__FETCH_HORIZON_S)
                          : 0;
        if (planned < 0) { /* the scheduler failed: the run stops with it */
            dh__eng_fail(e, planned);
            break;
        }
        const int64_t *order = planned ? dh__sched_step_order(e->sched, e->pf_step) : NULL;
        if (!order)
            break; /* beyond the horizon (or the run's end) */
        if (e->pf_k >= e->G) {
            e->pf_step++, e->pf_k = 0, e->pf_j = 0;
            continue;
        }
        int64_t sample = order[e->pf_k];
        dh_sample_info si;
        if (sample < 0 || !dh__eng_rank_here(e, dh__sched_rank_of(e->sched, e->pf_step, e->pf_k)) ||
            dh_manifest_sample(m, sample, &si) || e->pf_j >= si.media_count) {
            e->pf_k++, e->pf_j = 0;
            continue;
        }
        dh_media_info mi;
        dh_manifest_media(m, sample, e->pf_j++, &mi);
        if (!dh__is_remote(mi.path) || mi.bytes <= 0)
            continue;
        snprintf(job->path, sizeof job->path, "%s", mi.path);
        snprintf(job->etag, sizeof job->etag, "%s", mi.etag ? mi.etag : "");
        job->size = mi.offset > 0 ? mi.file_bytes : mi.bytes;
        job->lo = mi.offset > 0 ? mi.offset : 0;
        job->hi = job->lo + DH_MIN(mi.bytes, DH__FETCH_AHEAD_ITEM_MAX); /* a huge file: its head */
        job->step = e->pf_step;
        got = 1;
    }
    got = e->stop ? -1 : got;
    pthread_mutex_unlock(&e->mu);
    return got;
}

int dh__eng_first_objects(const dh_manifest *m, const char **out, int max)
{
    int n = 0;
    for (int64_t i = 0, ns = dh_manifest_count(m); i < ns && n < max; i++) {
        dh_sample_info si;
        dh_manifest_sample(m, i, &si);
        for (int j = 0; j < si.media_count && n < max; j++) {
            dh_media_info mi;
            dh_manifest_media(m, i, j, &mi);
            int seen = 0;
            for (int k = 0; k < n && !seen; k++)
                seen = !strcmp(out[k], mi.path);
            if (dh__is_remote(mi.path) && !seen)
                out[n++] = mi.path;
        }
    }
    return n;
}

/* The node's fetchers, when the run reads objects and wants them. */
static int start_fetchers(dh_engine *e)
{
    const dh_run_config *c = &e->run.cfg;
    if (e->pf || c->fetchers < 0 || !e->objects)
        return 0;
    char err[300];
    int rc = dh__prefetch_new(c->fetchers > 0 ? c->fetchers : 16,
                              c->fetch_ahead_bytes > 0 ? c->fetch_ahead_bytes : 256 << 20,
                              next_fetch, e, &e->pf, err, sizeof err);
    if (rc) /* the workers fetch for themselves, and name what is wrong per sample */
        e->pf = NULL;
    return 0;
}

void dh__eng_stop_fetchers(dh_engine *e)
{
    pthread_mutex_lock(&e->mu); /* a step released meanwhile reads e->pf under e->mu */
    dh__prefetch *pf = e->pf;
    e->pf = NULL;
    pthread_mutex_unlock(&e->mu);
    if (!pf)
        return;
    dh__prefetch_free(pf, &e->pf_stats); /* joined first: every fetcher's figures */
    /* the run's bytes and requests include theirs; its wait is the workers' alone (what
     * they waited for a range in flight is theirs already) */
    dh__fetch_stats f = e->pf_stats.fetched;
    f.wait_s = 0;
    dh__fetch_add(&e->fetched, &f);
}

int dh__eng_start_workers(dh_engine *e)
{
    start_fetchers(e);
    int first = 0, n = dh__sched_node_workers(e->sched, e->node, &first); /* one node: all */
    e->threads = dh__calloc((size_t)n, sizeof *e->threads);
    if (!e->threads)
        return DH_ENOMEM;
    for (int w = 0; w < n; w++) {
        void **arg = dh__malloc(2 * sizeof *arg);
        if (!arg)
            return DH_ENOMEM;
        arg[0] = e;
        arg[1] = (void *)(intptr_t)(first + w);
        int rc = dh__thread_create(&e->threads[w], worker_main, arg);
        if (rc) {
            free(arg);
            return rc; /* the threads started so far are joined by dh_engine_finish */
        }
        e->nthreads = w + 1;
    }
    return 0;
}
