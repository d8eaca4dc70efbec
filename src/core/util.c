/*
 * util.c - hashing, the seeded RNG, growable arrays and bounded formatting.
 *
 * The hash reads 8 bytes per round because the manifest loader hashes every
 * accepted line (the sampler's order is keyed on content) and a byte-at-a-time
 * hash would cost a noticeable share of the load budget.
 */
#include "core.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

uint64_t dh__hash_bytes(const void *data, size_t len, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t h = dh__mix64(seed ^ (0x9e3779b97f4a7c15ULL * (len + 1)));
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ dh__mix64(w)) * 0x100000001b3ULL;
        h ^= h >> 29;
        p += 8;
        len -= 8;
    }
    uint64_t tail = 0;
    memcpy(&tail, p, len);
    h ^= dh__mix64(tail ^ ((uint64_t)len << 56));
    return dh__mix64(h);
}

double dh__mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

double dh__progress_seconds(void)
{
    const char *env = getenv("DH_PROGRESS_SECONDS");
    char *end = NULL;
    double s = env && *env ? strtod(env, &end) : 30.0;
    return (!end || !*end) && s >= 0.05 ? s : 30.0; /* as the CLI reads it (it warns) */
}

int dh__grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2)
            return DH_ENOMEM;
        ncap *= 2;
    }
    if (elem && ncap > SIZE_MAX / elem)
        return DH_ENOMEM;
    void *p = dh__realloc(*buf, ncap * elem);
    if (!p)
        return DH_ENOMEM;
    *buf = p;
    *cap = ncap;
    return 0;
}

void dh__msg(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || !len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

int dh__fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

int dh__cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ------------------------------------------------------ parallel ranges */

static _Atomic int parallel_max; /* 0: the CPUs this process may run on */

/* The CPUs this process may run on (its affinity: a container or taskset narrows it). */
static int usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return DH_MIN(CPU_COUNT(&set), dh__cpu_count());
    return dh__cpu_count();
}

void dh__parallel_set_max(int max)
{
    parallel_max = max > 0 ? max : 0;
}

int dh__parallel_threads(int64_t n, int64_t grain)
{
    int forced = parallel_max;
    int64_t by_work = forced ? n : grain > 0 ? n / grain : n;
    int cap = DH_MIN(forced ? forced : usable_cpus(), DH_PARALLEL_MAX);
    return (int)DH_MAX(1, DH_MIN(cap, by_work));
}

typedef struct {
    void (*fn)(void *ctx, int64_t lo, int64_t hi);
    void *ctx;
    int64_t lo, hi;
} par_range;

static void *par_main(void *arg)
{
    par_range *r = arg;
    r->fn(r->ctx, r->lo, r->hi);
    return NULL;
}

void dh__parallel_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t lo, int64_t hi),
                      void *ctx)
{
    if (n <= 0)
        return;
    int t = dh__parallel_threads(n, grain);
    par_range r[DH_PARALLEL_MAX];
    pthread_t tid[DH_PARALLEL_MAX];
    int started[DH_PARALLEL_MAX] = {0};
    for (int k = 0; k < t; k++)
        r[k] = (par_range){fn, ctx, n * k / t, n * (k + 1) / t};
    for (int k = 1; k < t; k++)
        started[k] = dh__thread_create(&tid[k], par_main, &r[k]) == 0;
    fn(ctx, r[0].lo, r[0].hi);
    for (int k = 1; k < t; k++) {
        if (started[k])
            pthread_join(tid[k], NULL);
        else
            fn(ctx, r[k].lo, r[k].hi); /* its thread could not start */
    }
}

/* ------------------------------------------------------ allocation hook */

static _Atomic int64_t alloc_count, alloc_fail_at;
static _Atomic int alloc_sticky;

/* 1 when this allocation must fail (the hook is armed and its turn came). */
static int alloc_fails(void)
{
    int64_t at = alloc_fail_at;
    if (!at)
        return 0;
    int64_t n = ++alloc_count;
    return n == at || (alloc_sticky && n > at);
}

void *dh__malloc(size_t n)
{
    return alloc_fails() ? NULL : malloc(n);
}

void *dh__calloc(size_t n, size_t size)
{
    return alloc_fails() ? NULL : calloc(n, size);
}

void *dh__realloc(void *p, size_t n)
{
    return alloc_fails() ? NULL : realloc(p, n);
}

void *dh__aligned_alloc(size_t align, size_t n)
{
    size_t up = (n + align - 1) / align * align;
    return alloc_fails() || up < n ? NULL : aligned_alloc(align, up ? up : align);
}

/*
 * Huge pages for the large tables. A replica's and the simulator's tables (a step window's
 * per-position arrays, the job's records, the sampler's orders, the truth and prediction
 * rows, the manifest's columns, the task and event heaps) are megabytes to gigabytes, kept for
 * the run and read and written at random: with 4 KiB pages nearly every such access misses
 * the TLB, and first touching them faults a page at a time (a 1,024-node replica's start:
 * 30,626 faults -> 16,675). Such a table of 2 MiB or more is asked to be backed by 2 MiB
 * pages (madvise MADV_HUGEPAGE, which Debian's default "madvise" mode of transparent huge
 * pages honours; "always" needs no asking, "never" refuses) and dh__table_alloc puts it on a
 * 2 MiB boundary so that a table of one or two huge pages is not split across three. Only
 * whole huge pages inside a block are advised: its tail on 4 KiB pages costs no more memory
 * than before. Not for what lives a sample (a file read whole, decoded audio): a huge page
 * there is 2 MiB zeroed, and perhaps compacted for, a sample. bench/RESULTS.md, "Huge pages
 * for the tables".
 */
#define HUGE_PAGE ((size_t)2 << 20)

void *dh__huge_hint(void *p, size_t n)
{
#ifdef MADV_HUGEPAGE
    if (p && n >= HUGE_PAGE) {
        uintptr_t lo = ((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1);
        uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(HUGE_PAGE - 1);
        if (hi > lo)
            (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE); /* a hint: refused, nothing lost */
    }
#endif
    return p;
}

void dh__populate(const void *p, size_t n)
{
#ifdef MADV_POPULATE_WRITE
    if (p && n) {
        uintptr_t lo = (uintptr_t)p & ~(uintptr_t)4095;
        uintptr_t hi = ((uintptr_t)p + n + 4095) & ~(uintptr_t)4095;
        (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE); /* a hint: refused, nothing lost */
    }
#else
    (void)p;
    (void)n;
#endif
}

void *dh__table_alloc(size_t n)
{
    if (alloc_fails())
        return NULL;
    void *p = NULL;
    if (n < HUGE_PAGE || posix_memalign(&p, HUGE_PAGE, n))
        p = malloc(n);
    return dh__huge_hint(p, n);
}

void *dh__table_calloc(size_t n, size_t size)
{
    void *p = alloc_fails() ? NULL : calloc(n, size);
    return dh__huge_hint(p, p ? n * size : 0); /* calloc checked the product */
}

int64_t dh__alloc_fail_at(int64_t n, int sticky)
{
    int64_t counted = alloc_count;
    alloc_count = 0;
    alloc_sticky = sticky;
    alloc_fail_at = n;
    return counted;
}

/* --------------------------------------------------------- thread hook */

static _Atomic int64_t thread_count, thread_fail_at;

int dh__thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
    int64_t at = thread_fail_at;
    if (at && ++thread_count == at)
        return -EAGAIN;
    int rc = pthread_create(t, NULL, fn, arg);
    return rc ? -rc : 0;
}

void dh__cond_wait_s(pthread_cond_t *cv, pthread_mutex_t *mu, double seconds)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    long ns = t.tv_nsec + (long)((seconds > 0 ? seconds : 0) * 1e9);
    t.tv_sec += ns / 1000000000L;
    t.tv_nsec = ns % 1000000000L;
    pthread_cond_timedwait(cv, mu, &t);
}

void dh__thread_fail_at(int64_t n)
{
    thread_count = 0;
    thread_fail_at = n;
}

FILE *dh__out_open(const char *path, char *tmp, size_t tmplen)
{
    if ((size_t)snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid()) >= tmplen) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    return fopen(tmp, "wb");
}

int dh__out_close(FILE *f, const char *tmp, const char *path, int keep)
{
    int rc = ferror(f) ? DH_EIO : 0;
    if (fclose(f) != 0 && !rc)
        rc = DH_EIO;
    if (keep && !rc && rename(tmp, path) != 0)
        rc = -errno;
    if (!keep || rc)
        unlink(tmp);
    return rc;
}

size_t dh__utf8_check(const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n)
            return i;
        uint32_t cp = len == 1 ? c : c & (0x7Fu >> len);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < least[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += len;
    }
    return n;
}
