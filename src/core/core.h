/*
 * core.h - internal helpers shared by every module: hashing, the seeded RNG,
 * growable arrays and bounded message formatting. Nothing here is public;
 * non-static symbols carry the dh__ prefix.
 */
#ifndef DH_CORE_H
#define DH_CORE_H

#include "datahelix.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DH_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DH_MAX(a, b) ((a) > (b) ? (a) : (b))

/* x rounded up to a multiple of a (a power of two): the one spelling of align-up. */
static inline uint64_t dh__align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) & ~(a - 1);
}

/* 64-bit hash of a byte string (8 bytes per round, good avalanche). */
uint64_t dh__hash_bytes(const void *data, size_t len, uint64_t seed);
/* Where the first byte of s[0..n) that is not well-formed UTF-8 is (overlong forms,
 * surrogates and code points over U+10FFFF included), or n when all of it is. */
size_t dh__utf8_check(const char *s, size_t n);
/* Finaliser of splitmix64: a bijective 64-bit mix (inline, as the two below: a shuffle's
 * swap called the three, one after another, bench/RESULTS.md). */
static inline uint64_t dh__mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/*
 * Bytes this process's control groups still allow it (the least limit - usage over its
 * groups and their ancestors, cgroup v1 and v2), or -1 when none limits it. Reads the
 * given /proc/self/cgroup and /proc/self/mountinfo (files of the same form in tests).
 */
int64_t dh__cgroup_room(const char *proc_cgroup, const char *mountinfo);
/* Bytes this process may still fill: MemAvailable, and what its control groups still allow
 * (the smaller); -1 when neither is known (shm.c). */
int64_t dh__memory_available(void);

/* Seconds on the monotonic clock (CLOCK_MONOTONIC): for durations and deadlines. */
double dh__mono(void);
/* The period of progress lines in logs: $DH_PROGRESS_SECONDS, default 30 (at least 0.05). */
double dh__progress_seconds(void);

/*
 * Draws that are pure functions of (seed, epoch, sample id, item) (draw.c): the n-th of them
 * is the same in every process, at any world size, after any resume or re-plan. unit:
 * [0, 1); range: [lo, hi); below: [0, bound), bound > 0.
 */
typedef struct {
    uint64_t key;
} dh__draws;
dh__draws dh__draws_of(uint64_t seed, int64_t epoch, const char *sample_id, int32_t item);
uint64_t dh__draw_u64(const dh__draws *d, uint32_t n);
double dh__draw_unit(const dh__draws *d, uint32_t n);
double dh__draw_range(const dh__draws *d, uint32_t n, double lo, double hi);
uint64_t dh__draw_below(const dh__draws *d, uint32_t n, uint64_t bound);

/* splitmix64 generator: tiny, fast, fully determined by its seed. */
typedef struct {
    uint64_t state;
} dh__rng;

static inline void dh__rng_seed(dh__rng *r, uint64_t seed)
{
    r->state = seed;
}

static inline uint64_t dh__rng_next(dh__rng *r)
{
    r->state += 0x9e3779b97f4a7c15ULL;
    return dh__mix64(r->state);
}

/* Uniform integer in [0, bound), bound > 0, without modulo bias. */
static inline uint64_t dh__rng_below(dh__rng *r, uint64_t bound)
{
    /* Rejection sampling on the top of the range removes modulo bias. The exact limit (a
     * division) is needed only for a draw in the range's last `bound` values: every draw
     * below that is under it (a shuffle's swaps called this once each, every step). */
    uint64_t x = dh__rng_next(r);
    if (x > UINT64_MAX - bound) {
        uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
        while (x >= limit)
            x = dh__rng_next(r);
    }
    return x % bound;
}

/*
 * Makes *buf hold at least need elements of elem bytes, growing the capacity
 * geometrically. Returns 0 or DH_ENOMEM (then *buf is unchanged and still
 * owned by the caller).
 */
int dh__grow(void **buf, size_t *cap, size_t need, size_t elem);

/*
 * Allocation of the run-time modules (scheduler, records, engines, run
 * setup, truth, costs, planner) goes through these, so that tests can make
 * the Nth allocation fail (curl's torture idea) and check that every error
 * path reports and frees. Same contracts as malloc/calloc/realloc.
 */
void *dh__malloc(size_t n);
void *dh__calloc(size_t n, size_t size);
void *dh__realloc(void *p, size_t n);
/* Memory aligned to align (a power of two), freed by free(); size is rounded up to it. */
void *dh__aligned_alloc(size_t align, size_t n);
/*
 * A large table kept for the run (util.c says which): as dh__malloc and dh__calloc, counted
 * by the same hook and freed by free(), but a block of 2 MiB or more is asked to be on huge
 * pages (dh__table_alloc also puts it on a 2 MiB boundary). dh__huge_hint asks it of the
 * whole 2 MiB pages inside [p, p + n) (madvise MADV_HUGEPAGE, a hint: ignored where refused
 * or where transparent huge pages are off) and returns p: for a table grown in place.
 */
void *dh__table_alloc(size_t n);
void *dh__table_calloc(size_t n, size_t size);
void *dh__huge_hint(void *p, size_t n);
/* A hint: the pages of [p, p + n) made present and writable now, on the calling thread (their
 * first-touch zeroing taken off a thread that will write them); their contents unchanged. No
 * effect where the kernel cannot (before Linux 5.14). */
void dh__populate(const void *p, size_t n);
/*
 * Test hook: the n-th counted allocation from now fails, and every one after
 * it too while `sticky` (0: the failure hook is off). Thread-safe. Returns
 * the allocations counted since the previous call.
 */
int64_t dh__alloc_fail_at(int64_t n, int sticky);

/*
 * pthread_create for the library's threads, returning 0 or a negative
 * errno; a test hook makes the n-th creation from now fail with EAGAIN
 * (0: off), to check that every caller unwinds a partial start.
 */
int dh__thread_create(pthread_t *t, void *(*fn)(void *), void *arg);
/* pthread_cond_timedwait for at most `seconds` (a condition made with default attributes,
 * on CLOCK_REALTIME); the caller holds mu and checks its predicate again. */
void dh__cond_wait_s(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds);

/*
 * Output files appear complete or not at all: dh__out_open creates a file under a temporary
 * name beside path (path.tmp.PID) and dh__out_close renames it over path when keep is set,
 * or removes it (an interrupted or failed writer leaves nothing a later run could trust).
 * tmp (at least strlen(path) + 32 bytes) receives the temporary name. NULL: see errno.
 */
FILE *dh__out_open(const char *path, char *tmp, size_t tmplen);
int dh__out_close(FILE *f, const char *tmp, const char *path, int keep);
void dh__thread_fail_at(int64_t n);

/* snprintf that never overflows and tolerates buf == NULL. */
void dh__msg(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Formats a message into err (if any) and returns code: the one error-return helper. */
int dh__fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Online CPU count, at least 1. */
int dh__cpu_count(void);
/*
 * fn(ctx, lo, hi) over [0, n) cut into contiguous ranges, one a thread, run at once: up to
 * DH_PARALLEL_MAX threads (the caller's among them), no more than the CPUs this process may
 * run on, and one for every `grain` items at least (below 2 x grain the caller runs it
 * alone). For work whose items are independent, so the result does not depend on how many
 * threads ran it; a thread that cannot start has its range run by the caller.
 */
#define DH_PARALLEL_MAX 8
void dh__parallel_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t lo, int64_t hi),
                      void *ctx);
/* How many threads dh__parallel_for would use for n items. A test hook: after
 * dh__parallel_set_max(k > 0) every call uses k threads whatever the CPUs and the grain (at
 * most one an item); 0 restores the rule above. */
int dh__parallel_threads(int64_t n, int64_t grain);
void dh__parallel_set_max(int max);

#endif
