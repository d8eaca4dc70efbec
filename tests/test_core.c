/* test_core.c - error vocabulary, hashing, RNG and growable arrays. */
#include "core/bitset.h"
#include "core/core.h"
#include "core/heap.h"
#include "testutil.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

START_TEST(error_names_and_texts)
{
    ck_assert_str_eq(dh_err_name(0), "DH_OK");
    ck_assert_str_eq(dh_err_name(DH_ELIMIT), "DH_ELIMIT");
    ck_assert_str_eq(dh_err_name(DH_EINVAL), "DH_EINVAL");
    ck_assert_int_eq(DH_EINVAL, -EINVAL);
    ck_assert_str_eq(dh_strerror(DH_EDUP), "duplicate id");
    ck_assert_str_eq(dh_err_name(-10999), "DH_EUNKNOWN");
    ck_assert_str_eq(dh_strerror(12345), "unknown error");
    /* An errno outside the table still gets the C library's text. */
    ck_assert_str_eq(dh_strerror(-EPIPE), strerror(EPIPE));
    /* Every project code is in the reserved range and has distinct text. */
    int codes[] = {DH_EPARSE, DH_ESCHEMA, DH_ELIMIT, DH_EDUP, DH_EPATH, DH_EDECODE,
                   DH_ECORRUPT, DH_ENOTMEDIA, DH_EUNSUPPORTED, DH_EMISMATCH, DH_EEMPTY};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        ck_assert_int_le(codes[i], -10000);
        ck_assert_int_ge(codes[i], -10999);
        for (size_t j = 0; j < i; j++)
            ck_assert_str_ne(dh_strerror(codes[i]), dh_strerror(codes[j]));
    }
}
END_TEST

START_TEST(hash_is_stable_and_sensitive)
{
    const char *a = "the quick brown fox jumps";
    uint64_t h = dh__hash_bytes(a, strlen(a), 7);
    ck_assert_uint_eq(h, dh__hash_bytes(a, strlen(a), 7));
    ck_assert_uint_ne(h, dh__hash_bytes(a, strlen(a), 8));
    ck_assert_uint_ne(h, dh__hash_bytes(a, strlen(a) - 1, 7));
    char b[32];
    strcpy(b, a);
    b[3] ^= 1;
    ck_assert_uint_ne(h, dh__hash_bytes(b, strlen(b), 7));
    /* Trailing zero bytes are not lost in the tail word. */
    ck_assert_uint_ne(dh__hash_bytes("ab\0", 3, 0), dh__hash_bytes("ab", 2, 0));
}
END_TEST

/* Issue 23's draws: a pure function of (seed, epoch, sample id, item, n), so a resumed,
 * re-planned or resized job (another process) redraws the same augmentation. */
START_TEST(draws_are_pure_functions_of_what_they_are_for)
{
    dh__draws d = dh__draws_of(7, 3, "clip-000042", 1);
    /* pinned: changing the generator changes every augmented run (draw.c) */
    uint64_t first = dh__draw_u64(&d, 0), second = dh__draw_u64(&d, 1);
    ck_assert_uint_eq(first, 0x2b4e1963d31f4223ULL);
    ck_assert_uint_eq(second, 0x7c3fc3f0cbc002d0ULL);
    dh__draws again = dh__draws_of(7, 3, "clip-000042", 1);
    ck_assert_uint_eq(dh__draw_u64(&again, 0), first);
    ck_assert_uint_eq(dh__draw_u64(&again, 1), second);
    ck_assert_uint_ne(first, second);
    /* the same in another process */
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t p = fork();
    if (!p) {
        dh__draws c = dh__draws_of(7, 3, "clip-000042", 1);
        uint64_t v = dh__draw_u64(&c, 1);
        _exit(write(fds[1], &v, sizeof v) == sizeof v ? 0 : 1);
    }
    uint64_t child = 0;
    ck_assert_int_eq(read(fds[0], &child, sizeof child), (ssize_t)sizeof child);
    waitpid(p, NULL, 0);
    close(fds[0]);
    close(fds[1]);
    ck_assert_uint_eq(child, second);
    /* every input matters */
    dh__draws other[4] = {dh__draws_of(8, 3, "clip-000042", 1), dh__draws_of(7, 4, "clip-000042", 1),
                          dh__draws_of(7, 3, "clip-000043", 1), dh__draws_of(7, 3, "clip-000042", 0)};
    for (int k = 0; k < 4; k++)
        ck_assert_uint_ne(dh__draw_u64(&other[k], 0), first);
    /* ranges, and a fair spread over a fixed set of draws (deterministic: cannot flake) */
    double sum = 0;
    int buckets[10] = {0};
    for (uint32_t n = 0; n < 100000; n++) {
        double u = dh__draw_unit(&d, n);
        ck_assert(u >= 0 && u < 1);
        sum += u;
        buckets[(int)(u * 10)]++;
        double r = dh__draw_range(&d, n, 0.08, 1.0);
        ck_assert(r >= 0.08 && r < 1.0);
        ck_assert_uint_lt(dh__draw_below(&d, n, 7), 7);
    }
    ck_assert(sum / 100000 > 0.49 && sum / 100000 < 0.51);
    for (int b = 0; b < 10; b++)
        ck_assert_int_gt(buckets[b], 9500);
}
END_TEST

START_TEST(rng_below_is_in_range_and_covers)
{
    dh__rng r;
    dh__rng_seed(&r, 42);
    int seen[7] = {0};
    for (int i = 0; i < 7000; i++) {
        uint64_t x = dh__rng_below(&r, 7);
        ck_assert_uint_lt(x, 7);
        seen[x]++;
    }
    for (int i = 0; i < 7; i++)
        ck_assert_int_gt(seen[i], 800); /* ~1000 expected each */
    dh__rng a, b;
    dh__rng_seed(&a, 5);
    dh__rng_seed(&b, 5);
    for (int i = 0; i < 100; i++)
        ck_assert_uint_eq(dh__rng_next(&a), dh__rng_next(&b));
    /* the draws are the rejection sampling every sampler order was made with: the exact
     * limit of each draw, redrawn at or above it (bounds just above 2^63 reject half) */
    static const uint64_t bounds[] = {1, 2, 7, 1000003, (1ULL << 63) + 1, 3ULL << 62,
                                      UINT64_MAX - 1, UINT64_MAX};
    for (size_t k = 0; k < sizeof bounds / sizeof *bounds; k++) {
        uint64_t bound = bounds[k], limit = UINT64_MAX - UINT64_MAX % bound;
        dh__rng_seed(&a, 9 + k);
        dh__rng_seed(&b, 9 + k);
        for (int i = 0; i < 2000; i++) {
            uint64_t x;
            do
                x = dh__rng_next(&b);
            while (x >= limit);
            ck_assert_uint_eq(dh__rng_below(&a, bound), x % bound);
        }
    }
}
END_TEST

START_TEST(bitset_finds_the_next_member)
{
    for (int64_t n = 1; n < 20000; n = n * 3 + 7) {
        dh__bitset b;
        ck_assert_int_eq(dh__bitset_init(&b, n), 0);
        uint8_t *ref = calloc((size_t)n, 1);
        ck_assert_ptr_nonnull(ref);
        uint64_t r = (uint64_t)n * 2654435761u + 1;
        for (int round = 0; round < 400; round++) {
            r = r * 6364136223846793005ULL + 1442695040888963407ULL;
            int64_t i = (int64_t)((r >> 33) % (uint64_t)n);
            int put = round < 200 ? (int)((r >> 20) & 1) : 0; /* then empty it out */
            if (round >= 200)
                for (int64_t k = 0; k < n; k += 97)
                    ref[k] = 0, dh__bitset_put(&b, k, 0);
            ref[i] = (uint8_t)put;
            dh__bitset_put(&b, i, put);
            int64_t from = (int64_t)((r >> 11) % (uint64_t)(n + 1)), hi = from + (int64_t)(r % 9000);
            int64_t want = from, cap = hi < n ? hi : n;
            while (want < cap && !ref[want])
                want++;
            ck_assert_int_eq(dh__bitset_next(&b, from, hi), want < cap ? want : hi < n ? hi : n);
            ck_assert_int_eq(dh__bitset_next(&b, 0, n) < n, memchr(ref, 1, (size_t)n) != NULL);
            ck_assert_int_eq(dh__bitset_has(&b, i), ref[i]);
            ck_assert_int_eq(dh__bitset_has(&b, from < n ? from : 0), ref[from < n ? from : 0]);
        }
        free(ref);
        dh__bitset_free(&b);
    }
}
END_TEST

START_TEST(grow_keeps_contents)
{
    int *v = NULL;
    size_t cap = 0;
    for (int i = 0; i < 1000; i++) {
        ck_assert_int_eq(dh__grow((void **)&v, &cap, (size_t)i + 1, sizeof *v), 0);
        v[i] = i;
    }
    ck_assert_uint_ge(cap, 1000);
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(v[i], i);
    /* An impossible size fails cleanly and leaves the buffer alone. */
    ck_assert_int_eq(dh__grow((void **)&v, &cap, SIZE_MAX / 2, 16), DH_ENOMEM);
    ck_assert_int_eq(v[999], 999);
    free(v);
}
END_TEST

/* The sample table's rows: aligned (a row in one cache line), any size, zero included;
 * an impossible size is refused, not wrapped round. */
START_TEST(aligned_alloc_aligns_and_refuses_impossible_sizes)
{
    for (size_t n = 0; n < 200; n += 7) {
        char *p = dh__aligned_alloc(32, n);
        ck_assert_ptr_nonnull(p);
        ck_assert_uint_eq((uintptr_t)p % 32, 0);
        memset(p, 1, n);
        free(p);
    }
    ck_assert_ptr_null(dh__aligned_alloc(64, SIZE_MAX - 8));
}
END_TEST

/* The VmFlags of the mapping holding address a, from /proc/self/smaps ("" when not found). */
static void vm_flags_at(uintptr_t a, char *flags, size_t len)
{
    flags[0] = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return;
    char line[512];
    int inside = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            inside = a >= lo && a < hi;
        else if (inside && !strncmp(line, "VmFlags:", 8)) {
            snprintf(flags, len, "%s", line + 8);
            break;
        }
    }
    fclose(f);
}

/* A table of a huge page or more starts on a 2 MiB boundary and its whole huge pages are
 * advised (the mapping's "hg" flag: the advice itself, which does not depend on whether the
 * kernel then finds a free huge page); a table grown in place is advised by dh__huge_hint;
 * small tables are plain blocks; the allocation hook counts and fails them like the rest. */
START_TEST(large_tables_are_aligned_and_advised_huge)
{
    const size_t huge = (size_t)2 << 20;
    int thp = access("/sys/kernel/mm/transparent_hugepage", F_OK) == 0; /* else refused */
    char *small = dh__table_alloc(100);
    ck_assert_ptr_nonnull(small);
    free(small);
    char *p = dh__table_alloc(3 * huge);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq((uintptr_t)p % huge, 0);
    memset(p, 7, 3 * huge);
    char flags[512];
    vm_flags_at((uintptr_t)p + huge, flags, sizeof flags);
    ck_assert_msg(strlen(flags) > 0, "no mapping found for the table in /proc/self/smaps");
    if (thp)
        ck_assert_msg(strstr(flags, " hg") != NULL, "table not advised huge: VmFlags%s", flags);
    free(p);
    int *z = dh__table_calloc(huge, 2 * sizeof *z); /* zeroed */
    ck_assert_ptr_nonnull(z);
    ck_assert_int_eq(z[huge], 0);
    vm_flags_at((uintptr_t)z + 4 * huge, flags, sizeof flags); /* inside: past its first page */
    if (thp)
        ck_assert_msg(strstr(flags, " hg") != NULL, "zeroed table not advised: VmFlags%s", flags);
    free(z);
    size_t cap = 0; /* grown, then advised */
    char *g = NULL;
    ck_assert_int_eq(dh__grow((void **)&g, &cap, 5 * huge, 1), 0);
    ck_assert_ptr_eq(dh__huge_hint(g, cap), g);
    vm_flags_at(((uintptr_t)g + 2 * huge) & ~(uintptr_t)(huge - 1), flags, sizeof flags);
    if (thp)
        ck_assert_msg(strstr(flags, " hg") != NULL, "grown table not advised: VmFlags%s", flags);
    free(g);
    ck_assert_ptr_null(dh__huge_hint(NULL, 3 * huge));
    dh__alloc_fail_at(1, 0); /* counted by the hook */
    ck_assert_ptr_null(dh__table_alloc(3 * huge));
    dh__alloc_fail_at(1, 0);
    ck_assert_ptr_null(dh__table_calloc(1, 1));
    dh__alloc_fail_at(0, 0);
}
END_TEST

typedef struct {
    double k;
    int64_t id;
} qitem;

static int qbefore(const qitem *a, const qitem *b)
{
    return a->k < b->k || (a->k == b->k && a->id < b->id);
}

static double qkey(const qitem *a)
{
    return a->k;
}

DH_HEAP_DEFINE(qh, qitem, qbefore)
DH_TIERS_DEFINE(qh, qitem, qbefore, qkey)

/* The tiered queue pops what one heap pops, in the same order, whatever the keys: spread,
 * tied, pushed in waves that move on like a run's steps (most of them above the cut), and
 * pops that empty the heap mid-wave; a refill that cannot allocate says so and loses
 * nothing; keys that do not compare (NaN) still all come out. */
START_TEST(tiered_queue_pops_as_one_heap)
{
    for (int shape = 0; shape < 3; shape++) {
        qh_q one = {0}, two = {.tiered = 1};
        dh__rng r;
        dh__rng_seed(&r, 7 + (uint64_t)shape);
        int64_t id = 0, popped = 0;
        for (int wave = 0; wave < 60; wave++) {
            int push = 200 + (int)dh__rng_below(&r, 2000);
            for (int j = 0; j < push; j++) {
                double k = shape == 0   ? (double)dh__rng_below(&r, 1000000)
                           : shape == 1 ? (double)(wave + (int)dh__rng_below(&r, 6))
                                        : wave * 10.0 + (double)dh__rng_below(&r, 50) / 3;
                qitem it = {k, id++};
                ck_assert_int_eq(qh_qpush(&one, it), 0);
                ck_assert_int_eq(qh_qpush(&two, it), 0);
            }
            int pops = (int)dh__rng_below(&r, (uint64_t)push + 300);
            for (int j = 0; j < pops && one.n; j++, popped++) {
                qitem a, b;
                ck_assert_int_eq(qh_qpop(&one, &a), 0);
                ck_assert_int_eq(qh_qpop(&two, &b), 0);
                ck_assert_msg(a.id == b.id && a.k == b.k, "shape %d pop %lld: %lld (%g) against "
                              "%lld (%g)", shape, (long long)popped, (long long)b.id, b.k,
                              (long long)a.id, a.k);
                ck_assert_int_eq(one.n == 0, two.n == 0);
            }
        }
        ck_assert_ptr_nonnull(two.far); /* the tiers were used */
        qh_qfree(&one);
        qh_qfree(&two);
    }
    qh_q q = {.tiered = 1}; /* a refill that fails: DH_ENOMEM, nothing lost */
    for (int64_t i = 0; i < 5000; i++)
        ck_assert_int_eq(qh_qpush(&q, (qitem){(double)(i % 977), i}), 0);
    int64_t n = 0, failed = 0;
    qitem it;
    while (q.n) {
        int64_t before = q.n + q.nfar;
        if (q.n == 1 && !failed && q.nfar) {
            dh__alloc_fail_at(1, 0);
            ck_assert_int_eq(qh_qpop(&q, &it), DH_ENOMEM);
            dh__alloc_fail_at(0, 0);
            ck_assert_int_eq(q.n + q.nfar, before - 1);
            failed = 1;
            n++;
            ck_assert_int_eq(qh_qrefill(&q), 0); /* a retry moves them */
            continue;
        }
        ck_assert_int_eq(qh_qpop(&q, &it), 0);
        n++;
    }
    ck_assert_int_eq(failed, 1);
    ck_assert_int_eq(n + q.nfar, 5000);
    ck_assert_int_eq(q.nfar, 0);
    qh_qfree(&q);
    qh_q nan = {.tiered = 1};
    for (int64_t i = 0; i < 1000; i++)
        ck_assert_int_eq(qh_qpush(&nan, (qitem){i % 3 ? NAN : (double)i, i}), 0);
    for (n = 0; nan.n; n++)
        ck_assert_int_eq(qh_qpop(&nan, &it), 0);
    ck_assert_int_eq(n, 1000);
    qh_qfree(&nan);
}
END_TEST

typedef struct {
    _Atomic int visits[1000];
    _Atomic int calls;
} par_seen;

static void par_visit(void *ctx, int64_t lo, int64_t hi)
{
    par_seen *p = ctx;
    p->calls++;
    for (int64_t i = lo; i < hi; i++)
        p->visits[i]++;
}

START_TEST(parallel_ranges_cover_every_item_once)
{
    /* Below two grains a call runs on the caller's thread alone; the hook forces threads. */
    ck_assert_int_eq(dh__parallel_threads(1000, 600), 1);
    ck_assert_int_le(dh__parallel_threads(1 << 30, 1), DH_PARALLEL_MAX);
    ck_assert_int_ge(dh__parallel_threads(1 << 30, 1), 1);
    static const int64_t sizes[] = {0, 1, 2, 3, 7, 999, 1000};
    for (int threads = 1; threads <= DH_PARALLEL_MAX + 1; threads++) {
        dh__parallel_set_max(threads);
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            int64_t n = sizes[k];
            ck_assert_int_eq(dh__parallel_threads(n, 1 << 20),
                             n ? DH_MIN(DH_MIN(threads, DH_PARALLEL_MAX), (int)n) : 1);
            par_seen *p = calloc(1, sizeof *p);
            dh__parallel_for(n, 1 << 20, par_visit, p);
            for (int64_t i = 0; i < 1000; i++)
                ck_assert_int_eq(p->visits[i], i < n);
            ck_assert_int_eq(p->calls, n ? dh__parallel_threads(n, 1 << 20) : 0);
            free(p);
        }
    }
    /* A thread that cannot start: the caller runs its range. */
    dh__parallel_set_max(4);
    dh__thread_fail_at(2);
    par_seen *p = calloc(1, sizeof *p);
    dh__parallel_for(1000, 1, par_visit, p);
    dh__thread_fail_at(0);
    for (int64_t i = 0; i < 1000; i++)
        ck_assert_int_eq(p->visits[i], 1);
    ck_assert_int_eq(p->calls, 4);
    free(p);
    dh__parallel_set_max(0);
}
END_TEST

START_TEST(vocabulary_round_trips)
{
    for (int c = 1; c < DH_CODEC_COUNT; c++)
        ck_assert_int_eq(dh_codec_from_name(dh_codec_name((dh_codec)c)), c);
    ck_assert_int_eq(dh_codec_from_name("h265"), DH_CODEC_HEVC);
    ck_assert_int_eq(dh_codec_from_name("mjpeg"), DH_CODEC_JPEG);
    ck_assert_int_eq(dh_codec_from_name("prores"), DH_CODEC_OTHER);
    ck_assert_int_eq(dh_codec_from_name(NULL), DH_CODEC_OTHER);
    ck_assert_int_eq(dh_media_type_from_name("audio"), DH_MEDIA_AUDIO);
    ck_assert_int_eq(dh_media_type_from_name("Video"), -1);
    ck_assert_str_eq(dh_media_type_name((dh_media_type)9), "unknown");
}
END_TEST

/* Defect 8 of issue 22: the memory a process's control groups allow, cgroup v1 and v2 alike
 * (a v1 limit was ignored: the agent was OOM-killed inside a 200 MiB group without a word).
 * Fake hierarchies in files of the kernel's forms. */
START_TEST(cgroup_limits_of_v1_and_v2_are_read)
{
    char *d = tu_mkdtemp();
    char mi[8192], pc[4096];
    /* v1: memory mounted at D/v1, the process in /jobs/job7 (its parent limits more) */
    ck_assert_int_eq(tu_sh("mkdir -p %s/v1/jobs/job7 %s/v2/a/b %s/v1c/job7", d, d, d), 0);
    ck_assert_int_eq(tu_sh("cd %s/v1 && echo 9223372036854771712 > memory.limit_in_bytes && "
                           "echo 5 > memory.usage_in_bytes && echo 300000000 > "
                           "jobs/memory.limit_in_bytes && echo 100000000 > "
                           "jobs/memory.usage_in_bytes && echo 209715200 > "
                           "jobs/job7/memory.limit_in_bytes && echo 9715200 > "
                           "jobs/job7/memory.usage_in_bytes", d), 0);
    snprintf(mi, sizeof mi, "34 30 0:31 / %s/v1 rw,relatime - cgroup cgroup rw,memory\n", d);
    char *mpath = tu_write(d, "mountinfo", mi, -1);
    snprintf(pc, sizeof pc, "9:name=systemd:/\n4:memory:/jobs/job7\n3:cpuset:/\n0::/\n");
    char *cpath = tu_write(d, "cgroup", pc, -1);
    ck_assert_int_eq(dh__cgroup_room(cpath, mpath), 200000000); /* min(200M, 300M-100M) */
    /* the parent the tighter one */
    ck_assert_int_eq(tu_sh("echo 150000000 > %s/v1/jobs/memory.usage_in_bytes", d), 0);
    ck_assert_int_eq(dh__cgroup_room(cpath, mpath), 150000000);
    free(cpath);
    free(mpath);
    /* v1 in a container: the mount shows the process's group as its root */
    ck_assert_int_eq(tu_sh("echo 1000 > %s/v1c/memory.limit_in_bytes && echo 400 > "
                           "%s/v1c/memory.usage_in_bytes", d, d), 0);
    snprintf(mi, sizeof mi, "34 30 0:31 /jobs/job7 %s/v1c rw - cgroup cgroup rw,memory\n", d);
    mpath = tu_write(d, "mountinfo", mi, -1);
    cpath = tu_write(d, "cgroup", "4:memory:/jobs/job7\n", -1);
    ck_assert_int_eq(dh__cgroup_room(cpath, mpath), 600);
    free(cpath);
    free(mpath);
    /* v2: memory.max "max" at the top, numbers below */
    ck_assert_int_eq(tu_sh("cd %s/v2 && echo max > a/memory.max && echo 7 > a/memory.current "
                           "&& echo 4096 > a/b/memory.max && echo 96 > a/b/memory.current", d),
                     0);
    snprintf(mi, sizeof mi, "40 30 0:37 / %s/v2 rw - cgroup2 cgroup2 rw\n"
             "31 30 0:28 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", d);
    mpath = tu_write(d, "mountinfo", mi, -1);
    cpath = tu_write(d, "cgroup", "1:cpu:/\n0::/a/b\n", -1);
    ck_assert_int_eq(dh__cgroup_room(cpath, mpath), 4000);
    free(cpath);
    /* no limit anywhere, or no cgroup file: -1 */
    cpath = tu_write(d, "cgroup", "0::/a\n", -1);
    ck_assert_int_eq(dh__cgroup_room(cpath, mpath), -1);
    ck_assert_int_eq(dh__cgroup_room("/nonexistent", mpath), -1);
    free(cpath);
    free(mpath);
    tu_sh("rm -rf %s", d);
    free(d);
}
END_TEST

START_TEST(utf8_check_finds_the_first_bad_byte)
{
    struct {
        const char *s;
        size_t bad;
    } cases[] = {
        {"plain", 5},           {"caf\xc3\xa9", 5},         {"\xe2\x82\xac!", 4},
        {"\xf0\x9f\x98\x80", 4}, {"a\xc3\x28", 1},        /* a bad continuation */
        {"\xc0\xaf", 0},         /* overlong "/" */      {"\xed\xa0\x80", 0}, /* surrogate */
        {"\xf4\x90\x80\x80", 0}, /* over U+10FFFF */   {"ok\xe2\x82", 2},    /* cut short */
        {"\xff", 0},             {"x\x80", 1},            /* a stray continuation */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        ck_assert_msg(dh__utf8_check(cases[k].s, strlen(cases[k].s)) == cases[k].bad,
                      "case %zu", k);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    ADD_TEST(tc, error_names_and_texts);
    ADD_TEST(tc, hash_is_stable_and_sensitive);
    ADD_TEST(tc, rng_below_is_in_range_and_covers);
    ADD_TEST(tc, draws_are_pure_functions_of_what_they_are_for);
    ADD_TEST(tc, grow_keeps_contents);
    ADD_TEST(tc, aligned_alloc_aligns_and_refuses_impossible_sizes);
    ADD_TEST(tc, large_tables_are_aligned_and_advised_huge);
    ADD_TEST(tc, bitset_finds_the_next_member);
    ADD_TEST(tc, tiered_queue_pops_as_one_heap);
    ADD_TEST(tc, vocabulary_round_trips);
    ADD_TEST(tc, parallel_ranges_cover_every_item_once);
    ADD_TEST(tc, utf8_check_finds_the_first_bad_byte);
    ADD_TEST(tc, cgroup_limits_of_v1_and_v2_are_read);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
