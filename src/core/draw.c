/*
 * draw.c - random draws that are pure functions of what they are for: the
 * n-th draw of (seed, epoch, sample, item) is the same in every process,
 * whatever the world size, the resume point or the plan, so nothing about
 * random augmentation has to be saved or replayed (issue 23: each draw is
 * made when its sample is planned, before anything is decoded).
 *
 * DESIGN: a counter-based generator. The key is a 64-bit hash of (seed,
 * epoch, the sample's id, item); draw n is splitmix64's output at position
 * n of the sequence that starts at the key (mix64(key + (n + 1) * golden)),
 * so any draw is computed directly, in any order. The values are part of
 * the job's meaning (a resumed job must redraw the same crops): the tests
 * pin a few of them, and changing this file changes every augmented run.
 * The key hashes the inputs' bytes in host order: every process of a job
 * runs on one architecture (as the node wire already assumes).
 */
#include "core.h"

#include <string.h>

#define GOLDEN 0x9e3779b97f4a7c15ULL

dh__draws dh__draws_of(uint64_t seed, int64_t epoch, const char *sample_id, int32_t item)
{
    uint64_t words[3] = {seed, (uint64_t)epoch, (uint64_t)(uint32_t)item};
    uint64_t id = dh__hash_bytes(sample_id, sample_id ? strlen(sample_id) : 0, 0x6472617773ULL);
    return (dh__draws){dh__hash_bytes(words, sizeof words, id)};
}

uint64_t dh__draw_u64(const dh__draws *d, uint32_t n)
{
    return dh__mix64(d->key + ((uint64_t)n + 1) * GOLDEN);
}

double dh__draw_unit(const dh__draws *d, uint32_t n)
{
    return (double)(dh__draw_u64(d, n) >> 11) * 0x1.0p-53; /* 53 bits: [0, 1) */
}

double dh__draw_range(const dh__draws *d, uint32_t n, double lo, double hi)
{
    return lo + (hi - lo) * dh__draw_unit(d, n);
}

uint64_t dh__draw_below(const dh__draws *d, uint32_t n, uint64_t bound)
{
    /* the 53-bit unit draw scaled (bias below bound / 2^53: nothing for crop offsets) */
    uint64_t v = (uint64_t)(dh__draw_unit(d, n) * (double)bound);
    return v < bound ? v : bound - 1;
}
