/*
 * sampler.c - the global sample order and the fixed global batches.
 *
 * DESIGN: the order of an epoch is a Fisher-Yates permutation drawn from a
 * splitmix64 stream seeded by mix(manifest content hash, seed, epoch), so it
 * is a pure function of those three values: two processes (or a resumed run)
 * that agree on them agree on every batch. The state is four integers; no
 * history is needed to resume. Global batch s of an epoch is positions
 * [s*G, (s+1)*G) of the (padded or truncated) order. The permutation of the
 * current epoch is materialised (4 bytes per sample). The next epoch's is
 * shuffled ahead, a share at each step (about G swaps), into a second
 * buffer: shuffled whole when the epoch began, a dataset of 10 million
 * samples stopped its node's scheduler for 0.17 s there (26 million: 0.6 s;
 * the swaps land at random in a table larger than the caches), every node at
 * the same step. Same draws in the same order: the same permutation.
 *
 * Stratified (dh__sampler_stratify, strata.c): the epoch is strata.c's order
 * over the caller's classes of cost instead, each class in its own
 * Fisher-Yates order (the same shuffle and stream, each swap drawn inside its
 * class; materialised and shuffled ahead as above); positions, steps, the
 * state and shifts mean the same, and a node's share of a step is found
 * without the rest of it (issue 25).
 *
 * Carried bytes (dh__sampler_carry): the caller's byte a sample (a replica's
 * class of cost, the deal's input) rides in the top byte of each entry of
 * the uniform order's permutation, the sample's index in the other 24 bits,
 * so a step's bytes come in step order with its draw instead of a read at
 * random a sample (the shuffle moves them with the indices, at no cost: an
 * entry is still 4 bytes). The order is the same.
 */
#include "catalog.h"

#include <stdlib.h>
#include <string.h>

/* A Fisher-Yates shuffle in progress: swaps done down to index i (it runs n-1 .. 1), the
 * stream where its draws stopped, and the draws made ahead of their swap (index k's at
 * j[k % FY_AHEAD], for k in [drawn, i]), so that their random reads are issued early. Each
 * index swaps inside its class, [first[c], first[c + 1]) (c: drawn's), in a stratified order
 * (first NULL: the uniform order, one class). */
#define FY_AHEAD 16
typedef struct {
    dh__rng rng;
    int64_t i, drawn;
    int64_t j[FY_AHEAD];
    const int64_t *first;
    int c;
} fy_state;

struct dh_sampler {
    dh_sampler_opts opts;
    uint64_t manifest_hash;
    int64_t n;
    int64_t epoch;
    int64_t step;
    int64_t perm_epoch; /* epoch whose permutation perm holds; -1 none */
    int64_t shift;      /* positions the current epoch's batches are shifted by (a resume) */
    uint32_t *perm;
    /* the next epoch's permutation, shuffled ahead: ahead_epoch's (-1 none), [0,
     * ahead_filled) holding the identity it starts from; NULL when it could not be
     * allocated (an epoch is then shuffled whole as it begins) */
    uint32_t *ahead;
    int64_t ahead_epoch, ahead_filled;
    fy_state ahead_fy;
    /* a stratified order's classes, which the shuffle keeps each index in, and what an
     * epoch's permutation starts from (NULL: the identity) */
    const int64_t *first;
    int classes;
    const uint32_t *start; /* NULL: the identity */
    dh__strata *strata;    /* the stratified order (dh__sampler_stratify), reading perm */
    const uint8_t *carry;  /* n: the byte each entry carries (dh__sampler_carry); NULL none */
    uint8_t *drawn_bytes;  /* global_batch: the last step's carried bytes */
};

#define CARRY_SHIFT 24 /* an entry: the sample's index below, its carried byte above */
#define CARRY_MAX ((int64_t)1 << CARRY_SHIFT)

/* Starts epoch e's shuffle: the stream seeded, no swap done yet (it starts from the
 * identity, which the caller writes). */
static void fy_start(const dh_sampler *s, int64_t e, fy_state *f)
{
    dh__rng_seed(&f->rng, dh__mix64(s->manifest_hash ^ dh__mix64(s->opts.seed) ^
                                    dh__mix64((uint64_t)e + 0x243f6a8885a308d3ULL)));
    f->i = s->opts.shuffle ? s->n - 1 : 0;
    f->drawn = f->i + 1;
    f->first = s->strata ? s->first : NULL;
    f->c = s->classes - 1;
}

/* Index k's draw (its swap's partner, in [lo, k]), kept until its swap and its place
 * prefetched. */
static inline __attribute__((always_inline)) void fy_draw(uint32_t *p, fy_state *f, int64_t k,
                                                          int64_t lo)
{
    int64_t j = lo + (int64_t)dh__rng_below(&f->rng, (uint64_t)(k - lo) + 1);
    f->j[(uint64_t)k % FY_AHEAD] = j;
    __builtin_prefetch(&p[j], 1);
}

/* Index i's swap with its drawn partner. */
static inline __attribute__((always_inline)) void fy_swap(uint32_t *p, const fy_state *f,
                                                          int64_t i)
{
    int64_t j = f->j[(uint64_t)i % FY_AHEAD];
    uint32_t t = p[i];
    p[i] = p[j];
    p[j] = t;
}

/* Up to `swaps` more of the shuffle's swaps on p (0: every one left). The draws are the
 * same, in the same order, as one swap after another: each is made FY_AHEAD - 1 swaps
 * early and its place prefetched (the swaps' random reads were the shuffle's time: 0.20 ->
 * 0.09 s at 10 million samples). */
static inline __attribute__((always_inline)) void fy_run(uint32_t *p, fy_state *f,
                                                         int64_t swaps, int classes)
{
    /* the state in locals (stores to f->j would otherwise reload it a draw); lo: where
     * drawn's class starts */
    int64_t i = f->i, drawn = f->drawn, lo = 0;
    int c = f->c;
    if (classes)
        lo = f->first[c];
    int64_t stop = swaps && i > swaps ? i - swaps : 0;
    if (!classes && drawn == i - (FY_AHEAD - 2)) /* under way, uniform: one draw a swap, for
                                                   * every i from which FY_AHEAD - 1 ahead is
                                                   * still an index (the loop below, with its
                                                   * tests, took a third more instructions) */
        for (int64_t end = DH_MAX(stop, FY_AHEAD - 1); i > end; i--) {
            fy_draw(p, f, --drawn, 0);
            fy_swap(p, f, i);
        }
    for (; i > stop; i--) {
        /* drawn down to i - (FY_AHEAD - 1), at least 1 (indices are positive: their slots
         * by unsigned remainder, a mask) */
        int64_t upto = DH_MAX(1, i - (FY_AHEAD - 1));
        while (drawn > upto) {
            drawn--;
            while (classes && drawn < lo)
                lo = f->first[--c];
            fy_draw(p, f, drawn, lo);
        }
        fy_swap(p, f, i);
    }
    f->i = i;
    f->drawn = drawn;
    f->c = c;
}

/* (The uniform order's loop has no class to find: testing for one cost its shuffle about a
 * tenth more instructions.) */
static void fy_swaps(uint32_t *p, fy_state *f, int64_t swaps)
{
    if (f->first)
        fy_run(p, f, swaps, 1);
    else
        fy_run(p, f, swaps, 0);
}

/* Where an epoch's permutation starts (the identity, or the classes' samples by id) in
 * p[*filled, upto). */
static void perm_fill(const dh_sampler *s, uint32_t *p, int64_t *filled, int64_t upto)
{
    if (s->start && *filled < upto) {
        memcpy(p + *filled, s->start + *filled, (size_t)(upto - *filled) * sizeof *p);
        *filled = upto;
    }
    if (s->carry)
        for (; *filled < upto; (*filled)++)
            p[*filled] = (uint32_t)*filled | (uint32_t)s->carry[*filled] << CARRY_SHIFT;
    for (; *filled < upto; (*filled)++)
        p[*filled] = (uint32_t)*filled;
}

/* perm becomes the current epoch's: the one shuffled ahead, finished, when it is that. */
static void build_perm(dh_sampler *s)
{
    if (s->ahead && s->ahead_epoch == s->epoch) {
        perm_fill(s, s->ahead, &s->ahead_filled, s->n);
        fy_swaps(s->ahead, &s->ahead_fy, 0);
        uint32_t *t = s->perm;
        s->perm = s->ahead;
        s->ahead = t;
    } else {
        fy_state f;
        int64_t filled = 0;
        perm_fill(s, s->perm, &filled, s->n);
        fy_start(s, s->epoch, &f);
        fy_swaps(s->perm, &f, 0);
    }
    s->perm_epoch = s->epoch;
    s->ahead_epoch = -1;
}

/* A step's share of shuffling the next epoch ahead: the identity written in the epoch's
 * first quarter (sequential writes, cheap), then swaps at twice the pace that would just
 * finish (each a random read and write: the cost), so that it is done by the epoch's end. */
static void shuffle_ahead(dh_sampler *s)
{
    if (!s->ahead || !s->opts.shuffle)
        return;
    if (s->ahead_epoch != s->epoch + 1) {
        fy_start(s, s->epoch + 1, &s->ahead_fy);
        s->ahead_epoch = s->epoch + 1;
        s->ahead_filled = 0;
    }
    int64_t steps = dh_sampler_steps_per_epoch(s), share = (s->n + steps - 1) / steps;
    if (s->ahead_filled < s->n) {
        perm_fill(s, s->ahead, &s->ahead_filled, DH_MIN(s->n, s->ahead_filled + 4 * share));
        return;
    }
    fy_swaps(s->ahead, &s->ahead_fy, 2 * share);
}

int dh_sampler_new(const dh_manifest *m, const dh_sampler_opts *opts, dh_sampler **out)
{
    if (!m || !opts || !out || opts->global_batch < 1)
        return DH_EINVAL;
    *out = NULL;
    if (m->n == 0)
        return DH_EEMPTY;
    if (opts->drop_last && m->n < opts->global_batch)
        return DH_ERANGE; /* no complete batch: the epoch would be empty forever */
    dh_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return DH_ENOMEM;
    s->perm = dh__table_alloc((size_t)m->n * sizeof *s->perm); /* swapped at random */
    if (!s->perm) {
        free(s);
        return DH_ENOMEM;
    }
    /* NULL: each epoch shuffled whole */
    s->ahead = dh__table_alloc((size_t)m->n * sizeof *s->ahead);
    s->ahead_epoch = -1;
    s->opts = *opts;
    s->manifest_hash = m->hash;
    s->n = m->n;
    s->perm_epoch = -1;
    s->classes = 1;
    *out = s;
    return 0;
}

void dh_sampler_free(dh_sampler *s)
{
    if (!s)
        return;
    free(s->perm);
    free(s->ahead);
    free(s->drawn_bytes);
    dh__strata_free(s->strata);
    free(s);
}

int dh__sampler_carry(dh_sampler *s, const uint8_t *bytes)
{
    if (!s || (bytes && s->strata))
        return DH_EINVAL;
    if (!bytes) { /* carried no more */
        if (s->carry)
            s->perm_epoch = s->ahead_epoch = -1;
        s->carry = NULL;
        return 0;
    }
    if (s->n > CARRY_MAX)
        return DH_ERANGE; /* an index needs more than the entry's 24 bits */
    if (!s->drawn_bytes && !(s->drawn_bytes = malloc((size_t)s->opts.global_batch)))
        return DH_ENOMEM;
    s->carry = bytes;
    s->perm_epoch = s->ahead_epoch = -1; /* each epoch's entries carry them from now */
    return 0;
}

const uint8_t *dh__sampler_drawn_bytes(const dh_sampler *s)
{
    return s && s->carry ? s->drawn_bytes : NULL;
}

int64_t dh_sampler_steps_per_epoch(const dh_sampler *s)
{
    int64_t g = s->opts.global_batch;
    return s->opts.drop_last ? s->n / g : (s->n + g - 1) / g;
}

/* The next step's first position in its epoch (the epoch moved on when the last one ended). */
static int64_t next_base(dh_sampler *s)
{
    if (s->step >= dh_sampler_steps_per_epoch(s)) {
        s->epoch++;
        s->step = 0;
        s->shift = 0;
    }
    return s->step * s->opts.global_batch + s->shift;
}

int dh_sampler_next(dh_sampler *s, int64_t *out, int64_t cap)
{
    if (!s || !out || cap < s->opts.global_batch)
        return DH_EINVAL;
    int64_t g = s->opts.global_batch, base = next_base(s);
    if (s->perm_epoch != s->epoch)
        build_perm(s);
    if (s->strata) {
        dh__strata_use(s->strata, s->perm);
        int rc = dh__strata_step(s->strata, s->epoch, base, g, out);
        if (rc)
            return rc;
        s->step++;
        shuffle_ahead(s);
        return 0;
    }
    /* Padding wraps to the start of this epoch's order, like DistributedSampler: copied in
     * runs up to the order's end (a division per sample was a tenth of a replica's control
     * time at 1,024 nodes, bench/RESULTS.md; a wrap test per sample kept the copy from being
     * vectorised) */
    for (int64_t k = 0, at = base % s->n; k < g; at = 0) {
        int64_t run = DH_MIN(g - k, s->n - at);
        const uint32_t *restrict p = s->perm + at;
        int64_t *restrict o = out + k;
        uint8_t *restrict b = s->carry ? s->drawn_bytes + k : NULL; /* (restrict: a byte's
                                                                      * store may alias) */
        if (s->carry)
            for (int64_t j = 0; j < run; j++) {
                o[j] = p[j] & (CARRY_MAX - 1);
                b[j] = (uint8_t)(p[j] >> CARRY_SHIFT);
            }
        else
            for (int64_t j = 0; j < run; j++)
                o[j] = p[j];
        k += run;
    }
    s->step++;
    shuffle_ahead(s);
    return 0;
}

void dh_sampler_get_state(const dh_sampler *s, dh_sampler_state *st)
{
    st->manifest_hash = s->manifest_hash;
    st->seed = s->opts.seed;
    st->epoch = s->epoch;
    st->step = s->step;
}

int dh_sampler_set_state(dh_sampler *s, const dh_sampler_state *st)
{
    if (!s || !st || st->epoch < 0 || st->step < 0 || st->step > dh_sampler_steps_per_epoch(s))
        return DH_EINVAL;
    if (st->manifest_hash != s->manifest_hash || st->seed != s->opts.seed)
        return DH_EMISMATCH;
    s->epoch = st->epoch;
    s->step = st->step;
    s->shift = 0;
    return 0;
}

int dh__sampler_shift(dh_sampler *s, int64_t shift)
{
    int64_t g = s->opts.global_batch, last = dh_sampler_steps_per_epoch(s) - 1;
    if (shift <= -g || shift >= g || s->step * g + shift < 0 ||
        (s->opts.drop_last ? last * g + shift + g > s->n : last * g + shift >= s->n))
        return DH_EINVAL;
    s->shift = shift;
    return 0;
}

int dh__sampler_stratify(dh_sampler *s, const uint16_t *cls, int classes)
{
    if (!s || !cls || s->carry) /* a carrying sampler's reader expects its bytes each step */
        return DH_EINVAL;
    if (s->opts.global_batch > s->n)
        return DH_ERANGE; /* a stratified step lies inside one epoch */
    dh__strata *t = NULL;
    uint64_t key = dh__mix64(s->manifest_hash ^ dh__mix64(s->opts.seed ^ 0x7374726174614bULL));
    int rc = dh__strata_new(cls, s->n, classes, key, &t);
    if (rc)
        return rc;
    dh__strata_free(s->strata);
    s->strata = t;
    s->start = dh__strata_ids(t, &s->first);
    s->classes = classes;
    s->perm_epoch = s->ahead_epoch = -1; /* each epoch's permutation is the classes' now */
    return 0;
}

/* A stratified sampler's next step (as the node's share or the whole step laid out by node),
 * the sampler moving on a step as dh_sampler_next does. */
static int next_stratified(dh_sampler *s, int nodes, int node, int64_t *out)
{
    int64_t g = s ? s->opts.global_batch : 0;
    if (!s || !s->strata || !out || nodes < 1 || g % nodes || node < -1 || node >= nodes)
        return DH_EINVAL;
    int64_t base = next_base(s);
    if (s->perm_epoch != s->epoch)
        build_perm(s);
    dh__strata_use(s->strata, s->perm);
    int rc = node < 0 ? dh__strata_step_by_node(s->strata, s->epoch, base, g, nodes, out)
                      : dh__strata_share(s->strata, s->epoch, base, g, nodes, node, out);
    if (rc)
        return rc;
    s->step++;
    shuffle_ahead(s);
    return 0;
}

int dh__sampler_next_share(dh_sampler *s, int nodes, int node, int64_t *out)
{
    return node < 0 ? DH_EINVAL : next_stratified(s, nodes, node, out);
}

int dh__sampler_next_by_node(dh_sampler *s, int nodes, int64_t *out)
{
    return next_stratified(s, nodes, -1, out);
}
