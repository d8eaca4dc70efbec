/*
 * plan.h - token-latent-aware partition of a global batch over ranks
 * (docs/DESIGN.md mechanism 2), internal.
 */
#ifndef DH_PLAN_H
#define DH_PLAN_H

#include "../core/core.h"

#include <string.h>

/* A key whose unsigned order is x's order reversed (-0 is 0, as == has it): LPT's order of
 * GPU and CPU costs, heaviest first. */
static inline uint64_t dh__part_desc_key(double x)
{
    uint64_t u;
    x += 0.0;
    memcpy(&u, &x, sizeof u);
    return ~(u >> 63 ? ~u : u | 1ULL << 63);
}

/* Memory a caller keeps between plans (zero it first; dh__part_ws_free at the end). */
typedef struct {
    void *mem;
    size_t cap;
} dh__part_ws;
void dh__part_ws_free(dh__part_ws *ws);

typedef struct {
    int n;              /* samples in the global batch */
    int ranks;
    const double *gpu;  /* predicted GPU seconds per sample (primary objective) */
    const double *cpu;  /* predicted CPU seconds per sample (secondary balance) */
    const int64_t *tokens; /* for cap_tokens; may be NULL when uncapped */
    const int64_t *bytes;  /* for cap_bytes; may be NULL when uncapped */
    int64_t cap_tokens; /* per-rank caps; 0: none */
    int64_t cap_bytes;
    const double *base_gpu; /* per-rank load already fixed there (rebalancing); may be NULL */
    const int32_t *initial; /* start from this placement and only refine it; may be NULL */
    dh__part_ws *ws;        /* reused between calls; NULL: memory for this call only */
} dh__part_in;

typedef struct {
    double max_gpu;  /* predicted GPU time of the most loaded rank */
    double mean_gpu; /* total / ranks: the lower bound of max_gpu */
    int moves;       /* refinement moves and swaps applied */
    int cap_violations; /* samples no rank could take within the caps (placed anyway) */
} dh__part_out;

/*
 * Places every sample on exactly one rank (rank_of[i] in [0, ranks)),
 * minimising the maximum predicted GPU time: LPT, then improving moves and
 * swaps off the most loaded rank. Ranks may get unequal sample counts.
 * Returns 0 or DH_ENOMEM / DH_EINVAL.
 */
int dh__partition(const dh__part_in *in, int32_t *rank_of, dh__part_out *out);

/*
 * LPT's order of in->n samples into order[]: decreasing gpu, then decreasing cpu (when
 * given), then increasing index, in in->ws's memory when given. Returns 0 or DH_ENOMEM.
 * (The scheduler deals a step's samples over nodes in this order.)
 */
int dh__part_lpt_order(const dh__part_in *in, int *order);

/* DistributedSampler placement: sample k of the global batch goes to rank k mod R. */
void dh__partition_stride(int n, int ranks, int32_t *rank_of);

#endif
