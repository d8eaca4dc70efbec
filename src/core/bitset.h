/*
 * bitset.h - a set of small integers [0, n) with "first member at or after
 * i" in O(n / 4096) words read at worst: a bit per member and a bit per
 * 64-bit word that holds a member. The simulator keeps its idle workers in
 * one, so that polling them costs the idle workers it meets, not every
 * worker (at 16,384 ranks x 4 workers the plain scan was an O(W) walk per
 * event).
 */
#ifndef DH_BITSET_H
#define DH_BITSET_H

#include "core.h"

#include <stdlib.h>

typedef struct {
    uint64_t *bits;  /* bit i: i is a member */
    uint64_t *words; /* bit w: bits[w] is not 0 */
    int64_t n, nwords;
} dh__bitset;

/* An empty set of [0, n); 0 or DH_ENOMEM. */
static inline int dh__bitset_init(dh__bitset *b, int64_t n)
{
    b->n = n;
    b->nwords = (n + 63) >> 6;
    b->bits = dh__calloc((size_t)(b->nwords ? b->nwords : 1), sizeof *b->bits);
    b->words = dh__calloc((size_t)((b->nwords + 63) >> 6 ? (b->nwords + 63) >> 6 : 1),
                          sizeof *b->words);
    return b->bits && b->words ? 0 : DH_ENOMEM;
}

static inline void dh__bitset_free(dh__bitset *b)
{
    free(b->bits);
    free(b->words);
    b->bits = b->words = NULL;
}

static inline void dh__bitset_put(dh__bitset *b, int64_t i, int member)
{
    uint64_t bit = 1ULL << (i & 63);
    if (member) {
        b->bits[i >> 6] |= bit;
        b->words[i >> 12] |= 1ULL << ((i >> 6) & 63);
    } else if (!(b->bits[i >> 6] &= ~bit)) {
        b->words[i >> 12] &= ~(1ULL << ((i >> 6) & 63));
    }
}

static inline int dh__bitset_has(const dh__bitset *b, int64_t i)
{
    return (int)((b->bits[i >> 6] >> (i & 63)) & 1);
}

/* The smallest member in [from, hi), or hi when there is none. */
static inline int64_t dh__bitset_next(const dh__bitset *b, int64_t from, int64_t hi)
{
    if (hi > b->n)
        hi = b->n;
    if (from < 0)
        from = 0;
    if (from >= hi)
        return hi;
    int64_t word = from >> 6;
    uint64_t m = b->bits[word] & (~0ULL << (from & 63));
    while (!m) {
        if (++word >= b->nwords || word << 6 >= hi)
            return hi;
        uint64_t sum = b->words[word >> 6] & (~0ULL << (word & 63));
        while (!sum) { /* no member in the rest of this group of 64 words */
            word = ((word >> 6) + 1) << 6;
            if (word >= b->nwords || word << 6 >= hi)
                return hi;
            sum = b->words[word >> 6];
        }
        word = ((word >> 6) << 6) + __builtin_ctzll(sum);
        m = b->bits[word];
    }
    int64_t i = (word << 6) + __builtin_ctzll(m);
    return i < hi ? i : hi;
}

#endif
