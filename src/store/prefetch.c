/*
 * prefetch.c - a node's fetcher threads: the byte ranges of the samples the schedule says
 * come next, fetched in that order while workers decode others (see store.h).
 *
 * DESIGN: the fetchers pull their work (next()), so the order is the schedule's and the
 * depth is what the budget allows: a fetcher asks for the next range only while the bytes
 * fetched and not yet taken are under the budget. A range is an entry (pending or ready;
 * a failed fetch leaves none) in one short list under the prefetcher's lock; a worker that misses its own
 * extents looks there, copies a ready range into its own buffer, waits for a pending one
 * until its own deadline, and otherwise fetches itself, so every failure is named by the
 * worker's own attempt, within its sample's limit, as without fetchers. Waiting on the
 * network happens on fetcher threads; workers keep decoding.
 */
#include "store.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { PENDING, READY };

typedef struct entry {
    struct entry *next;
    dh__fetch_job job;
    uint8_t *data;
    size_t cap;           /* data's size (a reused buffer may be larger than the range) */
    int state;            /* PENDING or READY */
    int dropped;          /* its step retired while fetched or read: freed by the last user */
    int taken, readers;   /* copies made; workers copying it now, without the lock */
} entry;

#define SPARES 64 /* buffers kept for reuse */

struct dh__prefetch {
    pthread_mutex_t mu;
    pthread_cond_t changed; /* an entry changed state, budget freed, stopping */
    entry *list;
    int64_t held, budget;
    int asking;           /* a fetcher asks next() for work, without the lock: the others
                           * wait, or two could both pass the budget check and overrun it */
    int stop;             /* atomic: fetches in progress read it */
    int nthreads;
    pthread_t *threads;
    int (*next)(void *user, dh__fetch_job *job);
    void *user;
    dh__store_conf conf;
    dh__prefetch_stats st;
    /* Buffers of taken ranges, reused by the fetchers: a range is copied into the worker's
     * own extent, so no buffer is allocated in one thread and freed in another (glibc's
     * per-thread arenas then grow and shrink with every range: page faults that cost more
     * CPU than the copy, 20% of a 2-core run's throughput). */
    struct {
        uint8_t *p;
        size_t cap;
    } spare[SPARES];
    int nspare;
};

/* Under p->mu: a buffer of at least len bytes (a spare, grown if need be), or NULL. */
static uint8_t *buffer(dh__prefetch *p, size_t len, size_t *cap)
{
    len = len ? len : 1;
    if (p->nspare) {
        int best = 0; /* the smallest that fits, else the largest */
        for (int k = 1; k < p->nspare; k++) {
            int fits = p->spare[k].cap >= len, bfits = p->spare[best].cap >= len;
            if ((fits && (!bfits || p->spare[k].cap < p->spare[best].cap)) ||
                (!fits && !bfits && p->spare[k].cap > p->spare[best].cap))
                best = k;
        }
        uint8_t *b = p->spare[best].p;
        size_t c = p->spare[best].cap;
        p->spare[best] = p->spare[--p->nspare];
        if (c < len) {
            uint8_t *g = realloc(b, len);
            if (!g) {
                free(b);
                return NULL;
            }
            b = g, c = len;
        }
        *cap = c;
        return b;
    }
    *cap = len;
    return malloc(len);
}

/* Under p->mu: b back for reuse (freed when there are enough). */
static void give_back(dh__prefetch *p, uint8_t *b, size_t cap)
{
    if (b && p->nspare < SPARES)
        p->spare[p->nspare].p = b, p->spare[p->nspare++].cap = cap;
    else
        free(b);
}

static int stopping(const dh__prefetch *p)
{
    return __atomic_load_n(&p->stop, __ATOMIC_ACQUIRE);
}

static void timed_wait(dh__prefetch *p, double seconds)
{
    dh__cond_wait_s(&p->changed, &p->mu, seconds);
}

static double mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void unlink_entry(dh__prefetch *p, entry *e)
{
    for (entry **q = &p->list; *q; q = &(*q)->next)
        if (*q == e) {
            *q = e->next;
            break;
        }
    p->held -= e->job.hi - e->job.lo;
}

/* Under p->mu: e out of the list, its buffer back for reuse. */
static void free_entry(dh__prefetch *p, entry *e)
{
    unlink_entry(p, e);
    give_back(p, e->data, e->cap);
    free(e);
}

static void *fetcher(void *arg)
{
    dh__prefetch *p = arg;
    char err[400];
    dh__remote *r = dh__remote_new(&p->conf, err, sizeof err);
    if (r) /* stopping ends a fetch in progress, its retries too */
        dh__remote_set_abort(r, &p->stop);
    dh__fetch_stats given = {0}, now_st, delta; /* what this fetcher added to p->st so far */
    pthread_mutex_lock(&p->mu);
    while (r && !stopping(p)) {
        if (p->held >= p->budget || p->asking) { /* full: until a worker takes a range */
            timed_wait(p, 0.05);
            continue;
        }
        entry *e = calloc(1, sizeof *e);
        p->asking = 1;
        pthread_mutex_unlock(&p->mu);
        int got = e ? p->next(p->user, &e->job) : 0;
        pthread_mutex_lock(&p->mu);
        p->asking = 0;
        pthread_cond_broadcast(&p->changed); /* the next fetcher may ask */
        if (got <= 0 || stopping(p)) {
            free(e);
            if (got < 0)
                break;
            if (!stopping(p))
                timed_wait(p, 0.02); /* nothing planned yet */
            continue;
        }
        int64_t len = e->job.hi - e->job.lo;
        e->data = buffer(p, (size_t)len, &e->cap);
        if (!e->data) {
            free(e);
            continue;
        }
        e->state = PENDING;
        e->next = p->list;
        p->list = e;
        p->held += len;
        pthread_mutex_unlock(&p->mu);
        dh__object_ref o = {e->job.path, e->job.etag[0] ? e->job.etag : NULL, e->job.size,
                            e->job.lo, e->job.hi};
        int rc = dh__remote_fetch(r, &o, e->job.lo, e->job.hi, e->data,
                                  mono_now() + p->conf.request_timeout_s, err, sizeof err);
        pthread_mutex_lock(&p->mu);
        now_st = dh__remote_stats(r); /* counted as they go: a live figure reads them */
        dh__fetch_since(&delta, &now_st, &given);
        dh__fetch_add(&p->st.fetched, &delta);
        given = now_st;
        e->state = READY;
        if (e->dropped && !rc)
            p->st.dropped++; /* fetched for nothing: its step retired, or given up on */
        if (e->dropped || rc) /* retired meanwhile, or failed: a worker fetches itself */
            free_entry(p, e);
        pthread_cond_broadcast(&p->changed);
    }
    now_st = dh__remote_stats(r);
    dh__fetch_since(&delta, &now_st, &given);
    dh__fetch_add(&p->st.fetched, &delta);
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->mu);
    dh__remote_free(r);
    return NULL;
}

dh__fetch_stats dh__prefetch_fetched(dh__prefetch *p)
{
    pthread_mutex_lock(&p->mu);
    dh__fetch_stats f = p->st.fetched;
    pthread_mutex_unlock(&p->mu);
    return f;
}

int dh__prefetch_new(int fetchers, int64_t budget, int (*next)(void *user, dh__fetch_job *job),
                     void *user, dh__prefetch **out, char *err, size_t errlen)
{
    *out = NULL;
    dh__prefetch *p = dh__calloc(1, sizeof *p);
    if (!p)
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    int rc = dh__store_conf_env(&p->conf, err, errlen);
    if (rc) {
        free(p);
        return rc;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->changed, NULL);
    p->budget = budget > 0 ? budget : 1;
    p->next = next;
    p->user = user;
    p->threads = dh__calloc((size_t)DH_MAX(fetchers, 1), sizeof *p->threads);
    for (int k = 0; p->threads && k < fetchers; k++)
        if (dh__thread_create(&p->threads[p->nthreads], fetcher, p) == 0)
            p->nthreads++;
    if (!p->nthreads) {
        dh__prefetch_free(p, NULL);
        return dh__fail(err, errlen, DH_ENOMEM, "cannot start a fetcher thread");
    }
    *out = p;
    return 0;
}

void dh__prefetch_retire(dh__prefetch *p, int64_t step)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    for (entry *e = p->list, *nx; e; e = nx) {
        nx = e->next;
        if (e->job.step >= step || e->dropped)
            continue;
        if (e->state == READY && !e->taken && !e->readers)
            p->st.dropped++; /* fetched for nothing (one in flight counts when it lands) */
        if (e->state == PENDING || e->readers)
            e->dropped = 1; /* its fetcher, or its last reader, frees it */
        else
            free_entry(p, e);
    }
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->mu);
}

void dh__prefetch_stop(dh__prefetch *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->mu);
}

void dh__prefetch_free(dh__prefetch *p, dh__prefetch_stats *stats)
{
    if (!p)
        return;
    dh__prefetch_stop(p);
    for (int k = 0; k < p->nthreads; k++)
        pthread_join(p->threads[k], NULL);
    for (entry *e = p->list; e; e = e->next)
        p->st.dropped += e->state == READY && !e->taken && !e->dropped; /* the run ended first */
    if (stats)
        *stats = p->st;
    for (entry *e = p->list, *nx; e; e = nx) {
        nx = e->next;
        free(e->data);
        free(e);
    }
    for (int k = 0; k < p->nspare; k++)
        free(p->spare[k].p);
    free(p->threads);
    pthread_cond_destroy(&p->changed);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* The entry of o holding byte at, or NULL: of the earliest step, when the same range is
 * fetched for several (the sample again in a later epoch, fetched ahead already). */
static entry *find(dh__prefetch *p, const dh__object_ref *o, int64_t at)
{
    entry *best = NULL;
    for (entry *e = p->list; e; e = e->next)
        if (!e->dropped && e->job.lo <= at && at < e->job.hi && !strcmp(e->job.path, o->path) &&
            !strcmp(e->job.etag, o->etag ? o->etag : "") && (!best || e->job.step < best->job.step))
            best = e;
    return best;
}

/* dh__remote's take hook: 1 with a fetched range copied into *data (the caller's buffer,
 * grown to fit), else 0. A range taken stays until its step retires (counted in the
 * budget): a split sample's other parts read the same bytes. */
static int take(void *ctx, const dh__object_ref *o, int64_t at, double deadline,
                uint8_t **data, int64_t *off, int64_t *len)
{
    dh__prefetch *p = ctx;
    pthread_mutex_lock(&p->mu);
    entry *e = find(p, o, at);
    int waited = 0;
    /* A range in flight is waited for half the time the sample has left: a store that
     * is slow or down then leaves the worker the other half to try itself, and to name
     * what the store does (a fetcher's failure has no sample to name). */
    double now = mono_now(), until = deadline > 0 ? now + (deadline - now) / 2
                                                  : now + p->conf.request_timeout_s;
    while (e && e->state == PENDING && !stopping(p) && mono_now() < until) {
        waited = 1;
        timed_wait(p, 0.01);
        e = find(p, o, at);
    }
    if (e && e->state == PENDING)
        e->dropped = 1; /* given up on: its fetcher frees it */
    int got = e && e->state == READY;
    uint8_t *into = NULL;
    if (got) { /* copied without the lock: a reader keeps it in the list */
        e->readers++;
        pthread_mutex_unlock(&p->mu);
        size_t n = (size_t)(e->job.hi - e->job.lo);
        into = realloc(*data, n ? n : 1);
        if (into) {
            memcpy(into, e->data, n);
            *data = into, *off = e->job.lo, *len = (int64_t)n;
        }
        pthread_mutex_lock(&p->mu);
        e->readers--;
        got = into != NULL;
        if (got && !e->taken++) { /* counted once: a split sample's later parts are not */
            if (waited)
                p->st.taken_waited++;
            else
                p->st.taken_ready++;
        }
        if (e->dropped && !e->readers) { /* retired while copied */
            free_entry(p, e);
            pthread_cond_broadcast(&p->changed); /* budget freed */
        }
    } else {
        p->st.missed++;
    }
    pthread_mutex_unlock(&p->mu);
    return got;
}

void dh__remote_use_prefetch(dh__remote *r, dh__prefetch *p)
{
    dh__remote_set_take(r, p ? take : NULL, p);
}
