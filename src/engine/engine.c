/*
 * engine.c - the real engine: W decoding threads and R consumers driving the
 * same scheduler as the simulator, on the wall clock.
 *
 * DESIGN
 * - One mutex (e->mu) guards the scheduler, the batch slots, the records and
 *   the error count. Decoding happens outside it. Lock order: e->mu may be
 *   held while taking the ring's lock (dh__ring_free); dh__ring_alloc, which
 *   can block, is only ever called without e->mu.
 * - A batch's layout is fixed from the descriptors when its first task is
 *   dispatched: one slot per media item, 64-byte aligned and packed. Its
 *   buffer comes from the ring, so memory is bounded by the ring's size; a
 *   worker that finds the ring full waits (backpressure). Every batch that
 *   holds a buffer can complete without another allocation, so waiting
 *   cannot deadlock.
 * - A task is one sample, or one part of a split sample: part p of n decodes
 *   its share of the sampled video frames. A failed sample's slots are zeroed
 *   and its items carry the error; the batch is still delivered and the
 *   failure counted, so delivered + failed = samples.
 * - Rebalancing (helix, DESIGN.md mechanism 4): step s is offered to the
 *   scheduler once, before any rank takes a batch of it: as soon as all its
 *   batches are prepared (the copies then happen while the ranks compute
 *   the step before), or else when the first rank asks for it. The
 *   scheduler may move prepared samples between s's batches. Batches a
 *   worker is writing into (in-flight tasks) are frozen for that plan. A batch that receives samples is laid out afresh in a buffer from
 *   a second ring (the move arena: the main ring's space is the prefetch
 *   window's) and every item it keeps or receives is copied there; a batch
 *   that only gives is compacted in place (its items keep their order, so
 *   each moves down). Receivers are copied before donors are compacted. If
 *   the arena has no room the plan is refused and counted, never waited on.
 * - Consumers: dh_engine_next_batch records the deadline (the request time)
 *   and waits for readiness; dh_engine_release ends the step (the scheduler
 *   learns the compute window) and frees the buffer. dh_engine_run adds R
 *   emulated ranks that sleep each batch's ground-truth GPU time and meet at
 *   a barrier, then c0 (the fixed per-step cost).
 */
#include "../codec/decode.h"
#include "../metrics/metrics.h"
#include "../sim/setup.h"
#include "ring.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ITEM_ALIGN 64

typedef struct {
    double taken;          /* when its rank took it (trace) */
    int64_t offset, block; /* in the ring; block < 0: no buffer */
    int64_t bytes;
    dh_batch_item *items;
    int64_t *samples, *tokens;
    int32_t nitems, nsamples, nfailed;
    int32_t inflight;      /* tasks writing into the buffer now */
    uint8_t laid_out, allocating, allocated;
    uint8_t in_arena;      /* the buffer is in the move arena, not the main ring */
} batch_slot;

struct dh_engine {
    dh__run run;
    dh__sched *sched;
    dh__ring ring;
    dh__ring arena;         /* buffers of batches that received moved samples */
    dh__records rec;
    dh__trace trace;
    pthread_mutex_t mu;
    pthread_cond_t work, ready, room;
    pthread_t *threads;
    int nthreads, stop;
    int64_t N, G;
    int R;
    batch_slot *slot;
    uint8_t *sample_failed; /* per manifest sample, this run */
    int64_t *next_step;     /* per rank */
    uint8_t *reb_offered;   /* per step: offered to rebalancing already */
    uint8_t *frozen, *received, *changed; /* per rank, rebalancing scratch */
    batch_slot *fresh;      /* per rank, rebalancing scratch: new layouts */
    double move_s;          /* how long the last plan took to carry out */
    struct timespec t0;
    dh_sample_error_cb on_error;
    void *user;
    int64_t failed;
    double cpu_sum;          /* CPU time inside decoding, all tasks */
    double worker_cpu;       /* CPU time of the worker threads, all of it */
    const dh_spec *spec;
};

static double elapsed(const dh_engine *e)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - e->t0.tv_sec) + (double)(t.tv_nsec - e->t0.tv_nsec) * 1e-9;
}

static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_for(double s)
{
    if (s <= 0)
        return;
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0)
        ;
}

/* ---------------------------------------------------------------- layout */

static int64_t align_up(int64_t x)
{
    return (x + ITEM_ALIGN - 1) & ~(int64_t)(ITEM_ALIGN - 1);
}

static uint8_t *slot_data(dh_engine *e, const batch_slot *b)
{
    return b->allocated ? (b->in_arena ? e->arena.base : e->ring.base) + b->offset : NULL;
}

static void slot_clear_layout(batch_slot *b)
{
    free(b->items);
    free(b->samples);
    free(b->tokens);
    b->items = NULL;
    b->samples = b->tokens = NULL;
    b->nitems = b->nsamples = b->nfailed = 0;
    b->laid_out = 0;
}

/*
 * Lays b out for samples[0..n) (b takes the array): one packed, aligned slot
 * per media item, in sample order. Called with e->mu held.
 */
static int lay_out_samples(dh_engine *e, batch_slot *b, int64_t *samples, int32_t n)
{
    const dh_manifest *m = e->run.m;
    int32_t nitems = 0;
    for (int32_t k = 0; k < n; k++) {
        dh_sample_info si;
        dh_manifest_sample(m, samples[k], &si);
        nitems += si.media_count;
    }
    b->samples = samples;
    b->nsamples = n;
    b->tokens = calloc((size_t)DH_MAX(n, 1), sizeof *b->tokens);
    b->items = calloc((size_t)DH_MAX(nitems, 1), sizeof *b->items);
    if (!b->tokens || !b->items)
        return DH_ENOMEM;
    int64_t off = 0;
    for (int32_t k = 0; k < n; k++) {
        dh_sample_info si;
        dh_manifest_sample(m, samples[k], &si);
        b->tokens[k] = e->run.samples.tokens[samples[k]];
        for (int32_t j = 0; j < si.media_count; j++) {
            dh_media_info mi;
            dh_media_derived md;
            dh_manifest_media(m, samples[k], j, &mi);
            int rc = dh_derive_media(e->spec, &mi, &md);
            if (rc)
                return rc;
            dh_batch_item *it = &b->items[b->nitems++];
            *it = (dh_batch_item){.sample = samples[k], .media = j, .type = mi.type,
                                  .ndim = md.ndim, .elem_bytes = md.elem_bytes,
                                  .offset = off, .bytes = md.out_bytes};
            memcpy(it->shape, md.shape, sizeof it->shape);
            off = align_up(off + md.out_bytes);
        }
    }
    b->bytes = off;
    b->laid_out = 1;
    return 0;
}

/* Fixes batch (st, r)'s layout from the descriptors. Called with e->mu held. */
static int lay_out(dh_engine *e, int64_t st, int r, batch_slot *b)
{
    int64_t *samples = malloc((size_t)e->G * sizeof *samples);
    if (!samples)
        return DH_ENOMEM;
    int32_t n = DH_MAX(0, dh__sched_batch_samples(e->sched, st, r, samples, (int32_t)e->G));
    return lay_out_samples(e, b, samples, n);
}

/* Gives batch b its buffer: one worker allocates (outside the lock), others wait. */
static int ensure_buffer(dh_engine *e, batch_slot *b)
{
    while (b->allocating && !b->allocated)
        pthread_cond_wait(&e->room, &e->mu);
    if (b->allocated)
        return 0;
    b->allocating = 1;
    int64_t bytes = b->bytes;
    pthread_mutex_unlock(&e->mu);
    int64_t block = -1, off = dh__ring_alloc(&e->ring, bytes, &block);
    pthread_mutex_lock(&e->mu);
    if (off < 0)
        return DH_ENOMEM; /* closed or larger than the pool */
    b->offset = off;
    b->block = block;
    b->allocated = 1;
    pthread_cond_broadcast(&e->room);
    return 0;
}

/* ---------------------------------------------------------------- workers */

static void report(dh_engine *e, const dh__task *t, const char *path, int code, const char *msg)
{
    dh_sample_info si;
    dh_manifest_sample(e->run.m, t->sample, &si);
    if (e->on_error) {
        dh_sample_error se = {t->step, t->rank, t->sample, si.id, path, code, msg};
        e->on_error(&se, e->user);
    }
}

/* Decodes task t's share of its sample into the batch buffer; returns 0 or the first error. */
static int run_task(dh_engine *e, const dh__task *t, batch_slot *b, uint8_t *base, char *path,
                    size_t pathlen, char *err, size_t errlen)
{
    const dh_manifest *m = e->run.m;
    dh_sample_info si;
    dh_manifest_sample(m, t->sample, &si);
    int32_t first_item = 0;
    while (first_item < b->nitems && b->items[first_item].sample != t->sample)
        first_item++;
    for (int32_t j = 0; j < si.media_count; j++) {
        dh_media_info mi;
        dh_manifest_media(m, t->sample, j, &mi);
        const dh_batch_item *it = &b->items[first_item + j];
        const char *dir = dh_manifest_dir(m);
        snprintf(path, pathlen, "%s%s%s", dir, dir[0] ? "/" : "", mi.path);
        uint8_t *dst = base + it->offset;
        int rc;
        if (mi.type == DH_MEDIA_VIDEO) {
            rc = dh__decode_video_part(path, e->spec, &mi, t->part, t->nparts, dst,
                                       (size_t)it->bytes, NULL, err, errlen);
        } else if (t->part > 0) {
            rc = 0; /* only videos split; other items belong to part 0 */
        } else if (mi.type == DH_MEDIA_IMAGE) {
            rc = dh__decode_image(path, e->spec, &mi, dst, (size_t)it->bytes, NULL, err, errlen);
        } else {
            rc = dh__decode_audio(path, e->spec, &mi, dst, (size_t)it->bytes, NULL, err, errlen);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* Marks sample t->sample failed in its batch: its items carry the code. */
static void fail_sample(dh_engine *e, const dh__task *t, batch_slot *b, int code)
{
    if (e->sample_failed[t->sample])
        return; /* another part already failed it */
    e->sample_failed[t->sample] = 1;
    b->nfailed++;
    e->failed++;
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
 * -1 for a failed sample (it does not move). Called with e->mu held.
 */
static double revealed_gpu(dh_engine *e, const dh__task *t, const batch_slot *b, const uint8_t *base)
{
    if (e->sample_failed[t->sample] || !dh__sched_last_part(e->sched, t))
        return -1.0;
    if (!e->run.cfg.sample_gpu_cost)
        return e->run.samples.gpu_true[t->sample];
    int32_t first = 0, n = 0;
    while (first < b->nitems && b->items[first].sample != t->sample)
        first++;
    while (first + n < b->nitems && b->items[first + n].sample == t->sample)
        n++;
    return e->run.cfg.sample_gpu_cost(t->sample, b->items + first, n, base,
                                      e->run.cfg.sample_gpu_cost_user);
}

static void offer_prepared_step(dh_engine *e, int64_t st, int worker);

static void *worker_main(void *arg)
{
    dh_engine *e = ((void **)arg)[0];
    int w = (int)(intptr_t)((void **)arg)[1];
    free(arg);
    char path[4096], err[512];
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        dh__task t;
        if (dh__sched_next_task(e->sched, w, elapsed(e), &t)) {
            pthread_cond_wait(&e->work, &e->mu);
            continue;
        }
        batch_slot *b = &e->slot[t.step * e->R + t.rank];
        b->inflight++; /* frozen for rebalancing from here until the task is done */
        int rc = b->laid_out ? 0 : lay_out(e, t.step, t.rank, b);
        if (!rc)
            rc = ensure_buffer(e, b);
        uint8_t *base = slot_data(e, b);
        pthread_mutex_unlock(&e->mu);
        double c0 = thread_cpu(), started = elapsed(e);
        err[0] = 0;
        path[0] = 0;
        if (!rc)
            rc = run_task(e, &t, b, base, path, sizeof path, err, sizeof err);
        double cpu = thread_cpu() - c0;
        pthread_mutex_lock(&e->mu);
        if (rc) {
            report(e, &t, path, rc, err[0] ? err : dh_strerror(rc));
            fail_sample(e, &t, b, rc);
        }
        e->cpu_sum += cpu;
        dh__records_task(&e->rec, t.step, t.rank, started, elapsed(e) - started);
        dh__trace_span(&e->trace, DH_TRACE_WORKERS, w, rc ? "prepare (failed)" : "prepare",
                       started, elapsed(e) - started, t.step, t.rank, t.sample);
        int complete = dh__sched_task_done(e->sched, &t, elapsed(e), rc ? -1.0 : cpu,
                                           revealed_gpu(e, &t, b, base));
        b->inflight--; /* done writing: b may be re-laid out from here */
        if (complete) {
            zero_failed(b, base);
            e->rec.ready[t.step * e->R + t.rank] = elapsed(e);
            offer_prepared_step(e, t.step, w);
            pthread_cond_broadcast(&e->ready);
        }
        pthread_cond_broadcast(&e->work);
    }
    e->worker_cpu += thread_cpu(); /* under e->mu: the whole thread, scheduling included */
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ------------------------------------------------------------ rebalancing */

static const dh_batch_item *find_item(const batch_slot *b, int64_t sample, int32_t media)
{
    for (int32_t k = 0; b->laid_out && k < b->nitems; k++)
        if (b->items[k].sample == sample && b->items[k].media == media)
            return &b->items[k];
    return NULL;
}

/*
 * Copies (or, in place, moves down) items [first, end) of `to` from where
 * `from` holds them, with their status.
 */
static void copy_items(dh_engine *e, batch_slot *to, int32_t first, int32_t end,
                       const batch_slot *from)
{
    uint8_t *dst = slot_data(e, to);
    const uint8_t *src = slot_data(e, from);
    for (int32_t k = first; dst && src && k < end; k++) {
        dh_batch_item *it = &to->items[k];
        const dh_batch_item *old = find_item(from, it->sample, it->media);
        if (!old)
            continue; /* not dispatched yet: decoded into the new layout later */
        if (dst + it->offset != src + old->offset) /* a donor's items before its first gap stay */
            memmove(dst + it->offset, src + old->offset, (size_t)it->bytes);
        it->status = old->status;
    }
}

static void count_failed(batch_slot *b)
{
    b->nfailed = 0;
    for (int32_t k = 0; k < b->nitems; k++)
        b->nfailed += b->items[k].status && (k == 0 || b->items[k - 1].sample != b->items[k].sample);
}

/*
 * The scheduler's accept callback: carries a gated plan out on the batch
 * buffers of step st (see DESIGN at the top). Returns 0 when done, 1 when
 * the arena has no room for a receiving batch (nothing has changed then).
 */
static int carry_out(void *ctx, int64_t st, const int32_t *rank_of)
{
    dh_engine *e = ctx;
    double t0 = elapsed(e);
    int R = e->R;
    const int64_t *order = e->run.order + st * e->G;
    batch_slot *slots = e->slot + st * R, *fresh = e->fresh;
    uint8_t *recv = e->received, *changed = e->changed;
    memset(changed, 0, (size_t)R);
    memset(fresh, 0, (size_t)R * sizeof *fresh);
    for (int64_t k = 0; k < e->G; k++) {
        int from = dh__sched_rank_of(e->sched, st, k), to = rank_of[k];
        if (from != to)
            recv[to] = changed[from] = changed[to] = 1;
    }
    int rc = 0;
    for (int r = 0; r < R && !rc; r++) {
        if (!changed[r])
            continue;
        int64_t *samples = malloc((size_t)e->G * sizeof *samples);
        int32_t n = 0;
        for (int64_t k = 0; samples && k < e->G; k++)
            if (rank_of[k] == r)
                samples[n++] = order[k];
        rc = samples ? lay_out_samples(e, &fresh[r], samples, n) : DH_ENOMEM;
        if (!rc && recv[r]) {
            int64_t off = dh__ring_try_alloc(&e->arena, fresh[r].bytes, &fresh[r].block);
            rc = off < 0;
            fresh[r].offset = off;
            fresh[r].allocated = fresh[r].in_arena = off >= 0;
        }
    }
    if (rc) {
        for (int r = 0; r < R; r++) {
            if (fresh[r].allocated)
                dh__ring_free(&e->arena, fresh[r].block);
            slot_clear_layout(&fresh[r]);
        }
        memset(recv, 0, (size_t)R);
        return 1;
    }
    /* Receivers first (donors still hold their data): each sample from its old batch. */
    for (int r = 0; r < R; r++) {
        int32_t item = 0;
        for (int64_t k = 0; recv[r] && k < e->G; k++) {
            if (rank_of[k] != r)
                continue;
            dh_sample_info si;
            dh_manifest_sample(e->run.m, order[k], &si);
            copy_items(e, &fresh[r], item, item + si.media_count,
                       &slots[dh__sched_rank_of(e->sched, st, k)]);
            item += si.media_count;
        }
    }
    for (int r = 0; r < R; r++) {
        if (!changed[r])
            continue;
        batch_slot *b = &slots[r];
        if (!recv[r]) { /* a donor keeps its buffer: compact it in place */
            fresh[r].offset = b->offset;
            fresh[r].block = b->block;
            fresh[r].allocated = b->allocated;
            fresh[r].in_arena = b->in_arena;
            copy_items(e, &fresh[r], 0, fresh[r].nitems, b);
        } else if (b->allocated) {
            dh__ring_free(b->in_arena ? &e->arena : &e->ring, b->block);
        }
        count_failed(&fresh[r]);
        slot_clear_layout(b);
        fresh[r].taken = b->taken;
        *b = fresh[r];
    }
    e->move_s = elapsed(e) - t0;
    return 0;
}

/*
 * Offers step st to the scheduler's rebalancing, once and only while no
 * rank has taken a batch of it. The trace shows the plan on track (pid, tid):
 * the rank that asked or the worker that completed the step.
 */
static void offer_step(dh_engine *e, int64_t st, int pid, int tid)
{
    if (st >= e->N || e->reb_offered[st])
        return;
    for (int r = 0; r < e->R; r++)
        if (e->next_step[r] > st)
            return; /* taken: too late for this step */
    e->reb_offered[st] = 1;
    const dh__reb_stats *reb = dh__sched_reb_stats(e->sched);
    int64_t moved = reb->moved;
    for (int r = 0; r < e->R; r++)
        e->frozen[r] = e->slot[st * e->R + r].inflight > 0;
    memset(e->received, 0, (size_t)e->R);
    double t0 = elapsed(e);
    dh__sched_rebalance(e->sched, st, t0, e->frozen, carry_out, e);
    if (reb->moved == moved)
        return;
    dh__sched_observe_move(e->sched, e->move_s);
    double now = elapsed(e);
    for (int r = 0; r < e->R; r++) /* a complete receiver is ready once its copy is */
        if (e->received[r] && e->rec.ready[st * e->R + r] > 0)
            e->rec.ready[st * e->R + r] = DH_MAX(e->rec.ready[st * e->R + r], now);
    dh__trace_span(&e->trace, pid, tid, "rebalance", t0, now - t0, st, -1, -1);
}

/* Offers st if all of its batches are prepared (called when one completes). */
static void offer_prepared_step(dh_engine *e, int64_t st, int worker)
{
    for (int r = 0; r < e->R; r++)
        if (!dh__sched_batch_ready(e->sched, st, r))
            return;
    offer_step(e, st, DH_TRACE_WORKERS, worker);
}

/* -------------------------------------------------------------- consumers */

int dh_engine_next_batch(dh_engine *e, int rank, dh_batch *out)
{
    if (!e || !out || rank < 0 || rank >= e->R)
        return DH_EINVAL;
    pthread_mutex_lock(&e->mu);
    int64_t st = e->next_step[rank];
    if (st >= e->N) {
        pthread_mutex_unlock(&e->mu);
        return DH_EEMPTY;
    }
    double asked = elapsed(e);
    e->rec.deadline[st * e->R + rank] = asked;
    offer_step(e, st, DH_TRACE_RANKS, rank); /* unless it was offered once prepared */
    pthread_cond_broadcast(&e->work); /* the request may be what admits this batch */
    while (!dh__sched_batch_ready(e->sched, st, rank))
        pthread_cond_wait(&e->ready, &e->mu);
    batch_slot *b = &e->slot[st * e->R + rank];
    int rc = b->laid_out ? 0 : lay_out(e, st, rank, b); /* a batch with no samples */
    if (e->rec.ready[st * e->R + rank] == 0)
        e->rec.ready[st * e->R + rank] = asked; /* empty batches are ready at once */
    b->taken = elapsed(e);
    dh__sched_batch_taken(e->sched, rank, st, b->taken);
    e->next_step[rank]++;
    *out = (dh_batch){.step = st, .rank = rank, .nsamples = b->nsamples, .nitems = b->nitems,
                      .nfailed = b->nfailed, .samples = b->samples, .tokens = b->tokens,
                      .items = b->items, .bytes = b->bytes,
                      .data = slot_data(e, b)};
    pthread_cond_broadcast(&e->work); /* local: the prefetch window moved */
    pthread_mutex_unlock(&e->mu);
    return rc;
}

double dh_engine_batch_gpu_seconds(const dh_engine *e, const dh_batch *b)
{
    double g = 0;
    for (int32_t k = 0; k < b->nsamples; k++)
        g += e->run.samples.gpu_true[b->samples[k]];
    return g;
}

void dh_engine_release(dh_engine *e, const dh_batch *b, double gpu_seconds)
{
    if (!e || !b)
        return;
    pthread_mutex_lock(&e->mu);
    batch_slot *s = &e->slot[b->step * e->R + b->rank];
    double gpu = gpu_seconds >= 0 ? gpu_seconds : dh_engine_batch_gpu_seconds(e, b);
    e->rec.compute[b->step * e->R + b->rank] = gpu;
    dh__trace_span(&e->trace, DH_TRACE_RANKS, b->rank, "compute", s->taken,
                   elapsed(e) - s->taken, b->step, b->rank, -1);
    dh__sched_step_done(e->sched, b->rank, b->step, elapsed(e), gpu);
    if (s->allocated)
        dh__ring_free(s->in_arena ? &e->arena : &e->ring, s->block);
    s->allocated = 0;
    slot_clear_layout(s);
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
}

/* -------------------------------------------------------------- lifecycle */

/*
 * Ring size: the memory budget plus room for the largest batch twice over,
 * so out-of-order releases within a step and the no-wrap rule never starve
 * the window the scheduler admits.
 */
static int64_t ring_size(const dh_engine *e)
{
    int64_t max_sample = 0, per_rank = (e->G + e->R - 1) / e->R;
    for (int64_t i = 0; i < e->run.samples.n; i++)
        max_sample = DH_MAX(max_sample, e->run.samples.bytes[i]);
    int64_t big_batch = max_sample * per_rank * 2 + 64 * per_rank * 16;
    return e->run.cfg.memory_budget + 2 * big_batch;
}

/*
 * The move arena holds the batches that received samples, from the step's
 * start until their ranks release them: room for two average steps and two
 * of the largest batches. A plan that does not fit is refused, not waited on.
 */
static int64_t arena_size(const dh_engine *e)
{
    if (e->run.policy != DH_POL_HELIX)
        return 4096;
    int64_t max_sample = 0, sum = 0, per_rank = (e->G + e->R - 1) / e->R;
    for (int64_t i = 0; i < e->run.samples.n; i++) {
        max_sample = DH_MAX(max_sample, e->run.samples.bytes[i]);
        sum += e->run.samples.bytes[i];
    }
    int64_t step = sum / DH_MAX(e->run.samples.n, 1) * e->G + 64 * e->G * 16;
    return 2 * step + 2 * (max_sample * per_rank * 2 + 64 * per_rank * 16);
}

static int start_workers(dh_engine *e)
{
    e->nthreads = dh__sched_worker_count(e->sched);
    e->threads = calloc((size_t)e->nthreads, sizeof *e->threads);
    if (!e->threads)
        return DH_ENOMEM;
    for (int w = 0; w < e->nthreads; w++) {
        void **arg = malloc(2 * sizeof *arg);
        if (!arg)
            return DH_ENOMEM;
        arg[0] = e;
        arg[1] = (void *)(intptr_t)w;
        if (pthread_create(&e->threads[w], NULL, worker_main, arg) != 0) {
            free(arg);
            e->nthreads = w;
            return DH_ENOMEM;
        }
    }
    return 0;
}

static int engine_alloc(dh_engine *e)
{
    size_t nb = (size_t)(e->N * e->R + 1);
    e->slot = calloc(nb, sizeof *e->slot);
    e->next_step = calloc((size_t)e->R, sizeof *e->next_step);
    e->sample_failed = calloc((size_t)(e->run.samples.n + 1), 1);
    e->reb_offered = calloc((size_t)e->N + 1, 1);
    e->frozen = calloc((size_t)e->R * 3, 1);
    e->received = e->frozen ? e->frozen + e->R : NULL;
    e->changed = e->frozen ? e->frozen + 2 * e->R : NULL;
    e->fresh = calloc((size_t)e->R, sizeof *e->fresh);
    if (!e->slot || !e->next_step || !e->sample_failed || !e->frozen || !e->fresh ||
        !e->reb_offered)
        return DH_ENOMEM;
    int rc = dh__records_init(&e->rec, e->R, e->N);
    if (!rc)
        rc = dh__ring_init(&e->ring, ring_size(e), (int64_t)nb, 0);
    if (!rc)
        rc = dh__ring_init(&e->arena, arena_size(e), (int64_t)nb, 1); /* copies: no faults */
    return rc;
}

int dh_engine_start(const dh_run_config *cfg, dh_sample_error_cb on_error, void *user,
                    dh_engine **out, char *err, size_t errlen)
{
    if (!cfg || !out)
        return DH_EINVAL;
    *out = NULL;
    if (!cfg->manifest) {
        dh__msg(err, errlen, "the real engine needs a manifest of real media");
        return DH_EINVAL;
    }
    if (cfg->nodes > 1) {
        dh__msg(err, errlen, "the real engine runs on one node (--nodes 1); the simulator "
                             "models several");
        return DH_EINVAL;
    }
    dh_engine *e = calloc(1, sizeof *e);
    if (!e)
        return DH_ENOMEM;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    pthread_cond_init(&e->ready, NULL);
    pthread_cond_init(&e->room, NULL);
    e->on_error = on_error;
    e->user = user;
    int rc = dh__run_setup(cfg, &e->run, err, errlen);
    if (rc) {
        free(e);
        return rc;
    }
    e->N = e->run.cfg.steps;
    e->G = e->run.cfg.global_batch;
    e->R = e->run.cfg.ranks;
    e->spec = cfg->spec ? cfg->spec : e->run.spec;
    dh__sched_config sc;
    dh__run_sched_config(&e->run, &sc);
    if (!(rc = dh__sched_new(&sc, &e->sched)) && !(rc = engine_alloc(e)) &&
        !(rc = dh__trace_open(&e->trace, cfg->trace_path, dh__sched_worker_count(e->sched), e->R))) {
        clock_gettime(CLOCK_MONOTONIC, &e->t0);
        rc = start_workers(e);
    }
    if (rc) {
        dh__msg(err, errlen, "cannot start the engine: %s", dh_strerror(rc));
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
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_broadcast(&e->work);
    pthread_cond_broadcast(&e->room);
    pthread_mutex_unlock(&e->mu);
    dh__ring_close(&e->ring);
    dh__ring_close(&e->arena);
    for (int w = 0; w < e->nthreads; w++)
        pthread_join(e->threads[w], NULL);
    e->nthreads = 0;
    int trc = dh__trace_close(&e->trace);
    if (!out)
        return trc;
    if (e->rec.makespan <= 0)
        e->rec.makespan = elapsed(e);
    /* GPU terms from the ground truth; the CPU term is what the workers measured. */
    dh__run_bound_inputs(&e->run, &e->rec);
    e->rec.cpu_true_sum = e->cpu_sum;
    e->rec.failed = e->failed;
    e->rec.delivered = e->rec.samples - e->failed;
    dh__run_fill_result(&e->run, e->sched, &e->rec, "real", out);
    /* the pool's real use, not the scheduler's accounting, with the move arena's */
    out->memory_peak = e->ring.peak + e->arena.peak;
    out->framework_overhead = e->worker_cpu > 0 ? 1.0 - e->cpu_sum / e->worker_cpu : 0;
    out->wall_s = elapsed(e);
    return trc;
}

void dh_engine_free(dh_engine *e)
{
    if (!e)
        return;
    for (int64_t b = 0; e->slot && b < e->N * e->R; b++)
        slot_clear_layout(&e->slot[b]);
    free(e->slot);
    free(e->frozen);
    free(e->fresh);
    free(e->next_step);
    free(e->sample_failed);
    free(e->reb_offered);
    free(e->threads);
    dh__ring_destroy(&e->ring);
    dh__ring_destroy(&e->arena);
    dh__records_free(&e->rec);
    dh__sched_free(e->sched);
    dh__run_free(&e->run);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->work);
    pthread_cond_destroy(&e->ready);
    pthread_cond_destroy(&e->room);
    free(e);
}

/* ----------------------------------------------------------- emulated ranks */

typedef struct {
    dh_engine *e;
    int rank;
    pthread_barrier_t *barrier;
    int rc;
} rank_arg;

/* Requests each batch, "computes" for its true GPU time, meets the others, pays c0. */
static void *rank_main(void *p)
{
    rank_arg *a = p;
    dh_engine *e = a->e;
    for (int64_t st = 0; st < e->N; st++) {
        dh_batch b;
        int rc = dh_engine_next_batch(e, a->rank, &b);
        if (rc) {
            a->rc = rc;
            break;
        }
        double gpu = dh_engine_batch_gpu_seconds(e, &b);
        sleep_for(gpu);
        dh_engine_release(e, &b, gpu);
        if (pthread_barrier_wait(a->barrier) == PTHREAD_BARRIER_SERIAL_THREAD &&
            e->run.cfg.progress)
            e->run.cfg.progress(st + 1, e->N, e->run.cfg.progress_user);
        sleep_for(e->run.gpu.c0);
    }
    if (a->rank == 0) {
        pthread_mutex_lock(&e->mu);
        e->rec.makespan = elapsed(e);
        pthread_mutex_unlock(&e->mu);
    }
    return NULL;
}

int dh_engine_run(const dh_run_config *cfg, dh_sample_error_cb on_error, void *user,
                  dh_result *out, char *err, size_t errlen)
{
    if (!out)
        return DH_EINVAL;
    dh_engine *e;
    int rc = dh_engine_start(cfg, on_error, user, &e, err, errlen);
    if (rc)
        return rc;
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, (unsigned)e->R);
    rank_arg *args = calloc((size_t)e->R, sizeof *args);
    pthread_t *tids = calloc((size_t)e->R, sizeof *tids);
    int started = 0;
    for (int r = 0; args && tids && r < e->R; r++, started++) {
        args[r] = (rank_arg){e, r, &barrier, 0};
        if (pthread_create(&tids[r], NULL, rank_main, &args[r]) != 0)
            break;
    }
    rc = started == e->R ? 0 : DH_ENOMEM;
    if (rc) /* a rank that cannot start would hold the others at the barrier forever */
        dh__msg(err, errlen, "cannot start %d rank threads", e->R);
    for (int r = 0; r < started && !rc; r++)
        pthread_join(tids[r], NULL);
    for (int r = 0; r < started && !rc; r++)
        rc = args[r].rc;
    pthread_barrier_destroy(&barrier);
    free(args);
    free(tids);
    int frc = dh_engine_finish(e, out);
    dh_engine_free(e);
    return rc ? rc : frc;
}

/* ------------------------------------------------------------ calibration */

int dh_measure_cpu_scale(const dh_manifest *m, const dh_spec *spec, int64_t count, double *scale,
                         char *err, size_t errlen)
{
    if (!m || !spec || !scale || count < 1)
        return DH_EINVAL;
    dh__cpu_model cpu;
    dh__cpu_model_default(&cpu);
    double predicted = 0, measured = 0;
    char path[4096];
    int64_t n = DH_MIN(count, dh_manifest_count(m)), used = 0;
    for (int64_t i = 0; i < n; i++) {
        dh_sample_derived sd;
        dh_media_derived md[256];
        dh_sample_info si;
        dh_manifest_sample(m, i, &si);
        if (dh_derive_sample(spec, m, i, &sd, md))
            continue;
        double before = thread_cpu(), pred = 0;
        int rc = 0;
        for (int32_t j = 0; j < si.media_count && !rc; j++) {
            dh_media_info mi;
            dh_manifest_media(m, i, j, &mi);
            pred += dh__cpu_media_cost(&cpu, &mi, &md[j]);
            const char *dir = dh_manifest_dir(m);
            snprintf(path, sizeof path, "%s%s%s", dir, dir[0] ? "/" : "", mi.path);
            uint8_t *buf = malloc((size_t)DH_MAX(md[j].out_bytes, 1));
            if (!buf)
                return DH_ENOMEM;
            rc = mi.type == DH_MEDIA_VIDEO   ? dh__decode_video(path, spec, &mi, buf, (size_t)md[j].out_bytes, NULL, NULL, 0)
                 : mi.type == DH_MEDIA_IMAGE ? dh__decode_image(path, spec, &mi, buf, (size_t)md[j].out_bytes, NULL, NULL, 0)
                                             : dh__decode_audio(path, spec, &mi, buf, (size_t)md[j].out_bytes, NULL, NULL, 0);
            free(buf);
        }
        if (rc || pred <= 0)
            continue; /* a failing sample says nothing about decode speed */
        measured += thread_cpu() - before;
        predicted += pred;
        used++;
    }
    if (!used || predicted <= 0) {
        dh__msg(err, errlen, "no sample of the first %lld decoded: cannot calibrate", (long long)n);
        return DH_EDECODE;
    }
    *scale = measured / predicted;
    return 0;
}
