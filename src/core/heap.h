/*
 * heap.h - a min-heap over a growable array, generated per element
 * type so the comparison inlines (the scheduler's task heap and the
 * simulator's event heap are both on hot paths).
 *
 *   DH_HEAP_DEFINE(prefix, type, before)
 * defines
 *   static int  prefix_push(type **a, size_t *cap, int64_t *n, type item);  0 or DH_ENOMEM
 *   static type prefix_pop(type *a, int64_t *n);                            n must be > 0
 *   static void prefix_make(type *a, int64_t n);     orders a[0, n) into a heap, in O(n)
 * where before(const type *x, const type *y) is nonzero when x must come out
 * first. Ties must be broken inside `before` for deterministic order.
 *   DH_HEAP_ARY_DEFINE(prefix, type, before, ary)
 * defines the same for a heap of `ary` children a node (DH_HEAP_DEFINE: 2). With a total
 * order the pops are the same whatever the arity; only a[]'s layout differs.
 *
 *   DH_TIERS_DEFINE(prefix, type, before, key)     (after DH_HEAP_DEFINE(prefix, ...))
 * defines a queue with the same pops, in the same order, for queues that outgrow the cache:
 *   typedef struct { type *a; int64_t n; size_t cap; ...; int tiered; } prefix##_q;
 *   static int  prefix##_qpush(prefix##_q *q, type item);      0 or DH_ENOMEM
 *   static int  prefix##_qpop(prefix##_q *q, type *out);       q->n must be > 0; 0 or DH_ENOMEM
 *   static void prefix##_qfree(prefix##_q *q);
 * where key(const type *x) is the double `before` compares first (x before y whenever
 * key(x) < key(y)). With q->tiered 0 it is the binary heap a[0, n) alone (lending reads its
 * first entries as they lie). With q->tiered set, only
 * the most urgent items are in the heap (a pop walks it from its root to a leaf, missing the
 * cache on most levels once it outgrows the cache): those keyed at most q->cut. The others
 * wait unordered in q->far (a push there is an append), and the heap is 4-ary (half the
 * levels of a binary one, a node's children in two cache lines). When the heap runs empty,
 * the most urgent eighth of far (its cut estimated from a sample of 128 keys) moves to it
 * and is heapified in one pass. Every key in the heap is at most the cut and every key in far
 * above it, so the heap's top is the least of all; q->n is 0 only when far is empty too.
 */
#ifndef DH_HEAP_H
#define DH_HEAP_H

#include "core.h"

#include <math.h>
#include <stdlib.h>

#define DH_HEAP_DEFINE(prefix, type, before) DH_HEAP_ARY_DEFINE(prefix, type, before, 2)

/* The same functions for a heap of `ary` children a node (ary a constant >= 2). */
#define DH_HEAP_ARY_DEFINE(prefix, type, before, ary)                                              \
    static __attribute__((unused)) int prefix##_push(type **a, size_t *cap, int64_t *n,            \
                                                     type item)                                    \
    {                                                                                              \
        size_t was = *cap;                                                                         \
        if (dh__grow((void **)a, cap, (size_t)*n + 1, sizeof **a))                                 \
            return DH_ENOMEM;                                                                      \
        if (*cap != was) /* grown: a table on huge pages (util.c) */                               \
            dh__huge_hint(*a, *cap * sizeof **a);                                                  \
        int64_t i = (*n)++;                                                                        \
        while (i > 0) {                                                                            \
            int64_t p = (i - 1) / (ary);                                                           \
            if (before(&(*a)[p], &item))                                                           \
                break;                                                                             \
            (*a)[i] = (*a)[p];                                                                     \
            i = p;                                                                                 \
        }                                                                                          \
        (*a)[i] = item;                                                                            \
        return 0;                                                                                  \
    }                                                                                              \
    /* item into the hole at i of a[0, n), moved down to its place */                              \
    static inline void prefix##_down(type *a, int64_t n, int64_t i, type item)                     \
    {                                                                                              \
        for (;;) {                                                                                 \
            int64_t c = (ary) * i + 1, end = c + (ary) < n ? c + (ary) : n;                        \
            if (c >= n)                                                                            \
                break;                                                                             \
            for (int64_t k = c + 1; k < end; k++)                                                  \
                if (before(&a[k], &a[c]))                                                          \
                    c = k;                                                                         \
            if (before(&item, &a[c]))                                                              \
                break;                                                                             \
            a[i] = a[c];                                                                           \
            i = c;                                                                                 \
        }                                                                                          \
        a[i] = item;                                                                               \
    }                                                                                              \
    static __attribute__((unused)) type prefix##_pop(type *a, int64_t *n)                          \
    {                                                                                              \
        type top = a[0];                                                                           \
        --*n;                                                                                      \
        prefix##_down(a, *n, 0, a[*n]);                                                            \
        return top;                                                                                \
    }                                                                                              \
    static __attribute__((unused)) void prefix##_make(type *a, int64_t n)                          \
    {                                                                                              \
        for (int64_t i = (n - 2) / (ary); n > 1 && i >= 0; i--)                                    \
            prefix##_down(a, n, i, a[i]);                                                          \
    }

enum { DH_TIERS_SAMPLE = 128, DH_TIERS_SHARE = 8 };

/* The cut of a refill: about one in DH_TIERS_SHARE of keys[0, n) is at most it. */
static inline int dh__tiers_by_key(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define DH_TIERS_DEFINE(prefix, type, before, key)                                                 \
    DH_HEAP_ARY_DEFINE(prefix##_t4, type, before, 4)                                               \
    typedef struct {                                                                               \
        type *a; /* the heap */                                                                    \
        int64_t n;                                                                                 \
        size_t cap;                                                                                \
        type *far; /* keyed above cut, unordered */                                                \
        int64_t nfar;                                                                              \
        size_t farcap;                                                                             \
        double cut;                                                                                \
        int tiered;                                                                                \
    } prefix##_q;                                                                                  \
    static __attribute__((unused)) int prefix##_qrefill(prefix##_q *q)                             \
    {                                                                                              \
        int64_t n = q->nfar, moved = 0;                                                            \
        double cut = -INFINITY;                                                                    \
        if (n <= DH_TIERS_SAMPLE) {                                                                \
            for (int64_t i = 0; i < n; i++)                                                        \
                cut = fmax(cut, key(&q->far[i]));                                                  \
        } else {                                                                                   \
            double k[DH_TIERS_SAMPLE]; /* at random places: a stride could match a pattern */   \
            dh__rng r;                                                                             \
            dh__rng_seed(&r, (uint64_t)n);                                                         \
            for (int j = 0; j < DH_TIERS_SAMPLE; j++)                                              \
                k[j] = key(&q->far[dh__rng_below(&r, (uint64_t)n)]);                               \
            qsort(k, DH_TIERS_SAMPLE, sizeof *k, dh__tiers_by_key);                                \
            cut = k[DH_TIERS_SAMPLE / DH_TIERS_SHARE];                                             \
        }                                                                                          \
        for (int64_t i = 0; i < n; i++)                                                            \
            moved += key(&q->far[i]) <= cut;                                                       \
        int all = !moved; /* keys that do not compare (NaN): all of them */                        \
        if (dh__grow((void **)&q->a, &q->cap, (size_t)(all ? n : moved), sizeof *q->a))            \
            return DH_ENOMEM;                                                                      \
        int64_t kept = 0, k = 0;                                                                   \
        for (int64_t i = 0; i < n; i++)                                                            \
            if (all || key(&q->far[i]) <= cut)                                                     \
                q->a[k++] = q->far[i];                                                             \
            else                                                                                   \
                q->far[kept++] = q->far[i];                                                        \
        prefix##_t4_make(q->a, k);                                                                 \
        q->n = k;                                                                                  \
        q->nfar = kept;                                                                            \
        q->cut = all ? INFINITY : cut;                                                             \
        return 0;                                                                                  \
    }                                                                                              \
    static __attribute__((unused)) int prefix##_qpush(prefix##_q *q, type item)                    \
    {                                                                                              \
        if (q->tiered && !q->n) /* (far is empty too) */                                           \
            q->cut = key(&item);                                                                   \
        else if (q->tiered && !(key(&item) <= q->cut)) {                                           \
            size_t was = q->farcap;                                                                \
            if (dh__grow((void **)&q->far, &q->farcap, (size_t)q->nfar + 1, sizeof item))          \
                return DH_ENOMEM;                                                                  \
            if (q->farcap != was) /* grown: a table on huge pages (util.c) */                      \
                dh__huge_hint(q->far, q->farcap * sizeof item);                                    \
            q->far[q->nfar++] = item;                                                              \
            return 0;                                                                              \
        }                                                                                          \
        return q->tiered ? prefix##_t4_push(&q->a, &q->cap, &q->n, item)                           \
                         : prefix##_push(&q->a, &q->cap, &q->n, item);                             \
    }                                                                                              \
    static __attribute__((unused)) int prefix##_qpop(prefix##_q *q, type *out)                     \
    {                                                                                              \
        *out = q->tiered ? prefix##_t4_pop(q->a, &q->n) : prefix##_pop(q->a, &q->n);               \
        return q->tiered && !q->n && q->nfar ? prefix##_qrefill(q) : 0;                            \
    }                                                                                              \
    static __attribute__((unused)) void prefix##_qfree(prefix##_q *q)                              \
    {                                                                                              \
        free(q->a);                                                                                \
        free(q->far);                                                                              \
    }

#endif
