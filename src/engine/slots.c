/*
 * slots.c - the real engine's batch slots: the window of steps in flight,
 * each batch's layout fixed from the descriptors, and its buffer.
 *
 * DESIGN: a batch's layout is fixed from the descriptors when its first task
 * is dispatched: one slot per media item, 64-byte aligned and packed. Its
 * buffer comes from the ring, so memory is bounded by the ring's size; a
 * worker that finds the ring full waits (backpressure). Every batch that
 * holds a buffer can complete without another allocation, so waiting cannot
 * deadlock. Everything here runs under e->mu.
 */
#include "engine_int.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ step window */

static int grow_ring(dh_engine *e, int64_t ncap)
{
    eng_step **steps = dh__calloc((size_t)ncap, sizeof *steps);
    if (!steps)
        return DH_ENOMEM;
    for (int64_t st = e->lo; st < e->hi; st++)
        steps[st & (ncap - 1)] = e->steps[st & (e->cap - 1)];
    free(e->steps);
    e->steps = steps;
    e->cap = ncap;
    return 0;
}

eng_step *dh__eng_step(dh_engine *e, int64_t step)
{
    if (step < e->lo || step >= e->N)
        return NULL;
    if (step >= e->hi) {
        int64_t ncap = e->cap ? e->cap : 8;
        while (ncap < step + 1 - e->lo)
            ncap *= 2;
        if (ncap != e->cap && grow_ring(e, ncap)) {
            dh__eng_fail(e, DH_ENOMEM);
            return NULL;
        }
        for (; e->hi <= step; e->hi++) {
            eng_step *s = dh__calloc(1, sizeof *s + (size_t)e->R * sizeof(batch_slot));
            if (!s) {
                dh__eng_fail(e, DH_ENOMEM);
                return NULL;
            }
            for (int r = 0; r < e->R; r++)
                s->b[r].block = -1;
            e->steps[e->hi & (e->cap - 1)] = s;
        }
    }
    return e->steps[step & (e->cap - 1)];
}

batch_slot *dh__eng_slot(dh_engine *e, int64_t step, int rank)
{
    eng_step *s = dh__eng_step(e, step);
    return s ? &s->b[rank] : NULL;
}

static void free_step(eng_step *s, int R)
{
    for (int r = 0; s && r < R; r++)
        dh__slot_clear_layout(&s->b[r]);
    free(s);
}

/* The live figures that are states, not events: memory, rebalancing, the models' error. */
static void live_gauges(dh_engine *e)
{
    dh__live *l = e->live;
    pthread_mutex_lock(&e->ring.mu); /* e->mu may be held while taking a ring's lock */
    int64_t used = e->ring.in_use;
    pthread_mutex_unlock(&e->ring.mu);
    pthread_mutex_lock(&e->arena.mu);
    used += e->arena.in_use;
    pthread_mutex_unlock(&e->arena.mu);
    atomic_store_explicit(&l->pool_bytes, used, memory_order_relaxed);
    const dh__reb_stats *rs = dh__sched_reb_stats(e->sched);
    atomic_store_explicit(&l->reb_moves, rs->moved, memory_order_relaxed);
    atomic_store_explicit(&l->reb_bytes, rs->bytes_moved, memory_order_relaxed);
    atomic_store_explicit(&l->lent, rs->lent, memory_order_relaxed);
    atomic_store_explicit(&l->lent_bytes, rs->bytes_shipped, memory_order_relaxed);
    const dh__calib *c = dh__sched_calib(e->sched);
    atomic_store_explicit(&l->cpu_mape_ppm, (long long)(1e6 * dh__calib_cpu_mape(c)),
                          memory_order_relaxed);
    atomic_store_explicit(&l->gpu_mape_ppm, (long long)(1e6 * dh__calib_gpu_mape(c)),
                          memory_order_relaxed);
    if (e->pf) { /* the fetchers' lock is never held while they take e->mu */
        dh__fetch_stats f = dh__prefetch_fetched(e->pf);
        atomic_store_explicit(&l->ahead_bytes, f.bytes, memory_order_relaxed);
        atomic_store_explicit(&l->ahead_requests, f.requests, memory_order_relaxed);
        atomic_store_explicit(&l->ahead_failures, f.failures, memory_order_relaxed);
    }
}

void dh__eng_step_released(dh_engine *e, int64_t step)
{
    dh__eng_steps_released(e, step, 1);
}

void dh__eng_steps_released(dh_engine *e, int64_t step, int n)
{
    eng_step *s = dh__eng_step(e, step);
    if (!s || n <= 0)
        return;
    int local = e->rank_hi - e->rank_lo;
    if (s->released < local && s->released + n >= local)
        e->nops->wake(e); /* this node's ranks are done: the step exchange may go */
    if ((s->released += n) < e->R)
        return;
    dh__records_close(&e->rec, step);
    if (e->live)
        live_gauges(e);
    while (e->lo < e->hi && e->steps[e->lo & (e->cap - 1)]->released == e->R) {
        free_step(e->steps[e->lo & (e->cap - 1)], e->R);
        e->steps[e->lo & (e->cap - 1)] = NULL;
        e->lo++;
        dh__prefetch_retire(e->pf, e->lo); /* what no worker took of a step over */
    }
}

void dh__eng_slots_free(dh_engine *e)
{
    for (int64_t st = e->lo; e->steps && st < e->hi; st++)
        free_step(e->steps[st & (e->cap - 1)], e->R);
    free(e->steps);
    e->steps = NULL;
    e->lo = e->hi = e->cap = 0;
}

/* ---------------------------------------------------------------- layout */

int32_t dh__slot_items_of(const dh_batch_item *items, int32_t nitems, int64_t sample,
                          int32_t *n)
{
    int32_t first = 0, k = 0;
    while (first < nitems && items[first].sample != sample)
        first++;
    while (first + k < nitems && items[first + k].sample == sample)
        k++;
    if (n)
        *n = k;
    return first;
}

static int64_t align_up(int64_t x)
{
    return (int64_t)dh__align_up((uint64_t)x, ITEM_ALIGN);
}

uint8_t *dh__slot_data(dh_engine *e, const batch_slot *b)
{
    return b->allocated ? (b->in_arena ? e->arena.base : e->ring.base) + b->offset : NULL;
}

void dh__slot_clear_layout(batch_slot *b)
{
    free(b->items);
    free(b->draws);
    free(b->samples);
    free(b->tokens);
    b->items = NULL;
    b->draws = NULL;
    b->samples = b->tokens = NULL;
    b->nitems = b->nsamples = b->nfailed = 0;
    b->laid_out = 0;
}

/* Gives b's items their offsets: one packed, aligned slot each, all of a type's items
 * together (video, image, audio) in batch order, so that a type's items of one size lie at
 * equal distances and Python views them as one [N, ...] tensor, whatever else a sample has.
 * Items of one type keep their order, so a donor compacted in place only moves down. */
static int64_t place_by_type(dh_batch_item *items, int32_t n)
{
    int64_t off = 0;
    for (int32_t t = DH_MEDIA_VIDEO; t <= DH_MEDIA_AUDIO; t++)
        for (int32_t k = 0; k < n; k++)
            if (items[k].type == t) {
                items[k].offset = off;
                off = align_up(off + items[k].bytes);
            }
    return off;
}

/* Lays b out for samples[0..n) (b takes the array): the items grouped by sample, their
 * memory by type (place_by_type). */
int dh__lay_out_samples(dh_engine *e, batch_slot *b, int64_t *samples, int32_t n)
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
    b->tokens = dh__calloc((size_t)DH_MAX(n, 1), sizeof *b->tokens);
    b->items = dh__calloc((size_t)DH_MAX(nitems, 1), sizeof *b->items);
    if (!b->tokens || !b->items)
        return DH_ENOMEM;
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
                                  .bytes = md.out_bytes};
            memcpy(it->shape, md.shape, sizeof it->shape);
        }
    }
    b->bytes = place_by_type(b->items, b->nitems);
    b->laid_out = 1;
    return 0;
}

/* Fixes batch (st, r)'s layout from the descriptors. */
int dh__lay_out(dh_engine *e, int64_t st, int r, batch_slot *b)
{
    int64_t *samples = dh__malloc((size_t)e->G * sizeof *samples);
    if (!samples)
        return DH_ENOMEM;
    int32_t n = dh__sched_batch_samples(e->sched, st, r, samples, (int32_t)e->G);
    if (n < 0) {
        free(samples);
        return n;
    }
    return dh__lay_out_samples(e, b, samples, n);
}

/* Gives batch b its buffer: one worker allocates (outside the lock), others wait. */
int dh__ensure_buffer(dh_engine *e, batch_slot *b)
{
    while (b->allocating && !b->allocated && !e->stop)
        pthread_cond_wait(&e->room, &e->mu);
    if (b->allocated)
        return 0;
    if (e->stop)
        return DH_ECANCELED;
    b->allocating = 1;
    int64_t bytes = b->bytes;
    pthread_mutex_unlock(&e->mu);
    int64_t block = -1, off = dh__ring_alloc(&e->ring, bytes, &block);
    pthread_mutex_lock(&e->mu);
    if (off < 0) {
        b->allocating = 0;
        pthread_cond_broadcast(&e->room);
        return e->stop ? DH_ECANCELED : DH_ENOMEM; /* closed, or larger than the pool */
    }
    b->offset = off;
    b->block = block;
    b->allocated = 1;
    pthread_cond_broadcast(&e->room);
    return 0;
}

/*
 * The pool and the arena split the one memory budget (run.h): the pool holds the
 * admissions, its slack and the leases; the arena the moves. A policy without rebalancing
 * gets a token arena it never uses.
 */
int64_t dh__eng_ring_size(const dh_engine *e)
{
    return dh__run_admission_budget(&e->run, e->shared) + dh__run_pool_slack(&e->run, e->shared);
}

int64_t dh__eng_arena_size(const dh_engine *e)
{
    int64_t a = dh__run_arena_bytes(&e->run);
    return a > 0 ? a : 4096;
}
