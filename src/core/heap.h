/*
 * heap.h - a binary min-heap over a growable array, generated per element
 * type so the comparison inlines (the scheduler's task heap and the
 * simulator's event heap are both on hot paths).
 *
 *   DH_HEAP_DEFINE(prefix, type, before)
 * defines
 *   static int  prefix_push(type **a, size_t *cap, int64_t *n, type item);  0 or DH_ENOMEM
 *   static type prefix_pop(type *a, int64_t *n);                            n must be > 0
 * where before(const type *x, const type *y) is nonzero when x must come out
 * first. Ties must be broken inside `before` for deterministic order.
 */
#ifndef DH_HEAP_H
#define DH_HEAP_H

#include "core.h"

#define DH_HEAP_DEFINE(prefix, type, before)                                                       \
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
            int64_t p = (i - 1) / 2;                                                               \
            if (before(&(*a)[p], &item))                                                           \
                break;                                                                             \
            (*a)[i] = (*a)[p];                                                                     \
            i = p;                                                                                 \
        }                                                                                          \
        (*a)[i] = item;                                                                            \
        return 0;                                                                                  \
    }                                                                                              \
    static __attribute__((unused)) type prefix##_pop(type *a, int64_t *n)                          \
    {                                                                                              \
        type top = a[0], last = a[--*n];                                                           \
        int64_t i = 0;                                                                             \
        for (;;) {                                                                                 \
            int64_t c = 2 * i + 1;                                                                 \
            if (c >= *n)                                                                           \
                break;                                                                             \
            if (c + 1 < *n && before(&a[c + 1], &a[c]))                                            \
                c++;                                                                               \
            if (before(&last, &a[c]))                                                              \
                break;                                                                             \
            a[i] = a[c];                                                                           \
            i = c;                                                                                 \
        }                                                                                          \
        a[i] = last;                                                                               \
        return top;                                                                                \
    }

#endif
