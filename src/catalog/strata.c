/*
 * strata.c - a stratified epoch order whose node shares are found alone: the
 * first part of the per-node control plane of issue 25 (docs/MULTINODE.md,
 * "What a per-node replica needs"). Built, tested and measured
 * (bench_strata); the sampler's stratified mode (dh__sampler_stratify) draws
 * from it, and nothing in the engine asks for that mode yet.
 *
 * DESIGN: the samples are in K classes of predicted cost (the caller's: 0
 * the heaviest; the GPU model's features are the sample's own, so every node
 * computes the same classes). An epoch interleaves the classes evenly: class
 * c's a-th sample (in the class's own permutation) sits at key (2a + 1) /
 * (2 n_c), and the epoch is every sample by key, the lower class first on a
 * tie. That is Webster's sequential apportionment: every prefix of the epoch
 * holds each class within about one sample of its proportion, and how many of
 * each class the first h positions hold is computed directly (O(K) at h / n,
 * then at most K / 2 single moves of O(K)), so a step's samples are known
 * class by class without laying out the epoch. Each class's own order in an
 * epoch is the caller's (dh__strata_use: the sampler's Fisher-Yates shuffle
 * of each class, drawn ahead as its uniform order is), read at the class's
 * indices; none given, the classes in id order.
 *
 * A keyed Feistel network (no table, nothing shuffled ahead: any index's
 * sample in a few hashes) was the class order first. Measured and dropped
 * (bench/RESULTS.md): four rounds of it placed neighbouring ids at biased
 * distances in small classes (a pair test, z = 9 at 100 samples over 20,000
 * epochs), six rounds cost about 270 instructions a sample for a whole step,
 * where a Fisher-Yates shuffle ahead costs a swap; a node drawing only its
 * share would pay that for G / N samples, but every replica still lays out
 * the whole step (docs/MULTINODE.md).
 *
 * A step is laid out class by class, heaviest first, and dealt to N nodes
 * one sample of every run of N to each, the run's rotation drawn from
 * (epoch, step position, run), as the scheduler deals a uniform step
 * (planning.c): node k finds its G / N samples from the K class counts
 * alone, O(K^2 + G / N) a step, where a replica draws and deals all G. A
 * rotation, because node k must find its run's sample without the others'
 * costs; each run is of nearly equal cost (the classes sorted), so every
 * share weighs about the same.
 *
 * Nothing here is thread-safe: a dh__strata keeps its step's workspace (as a
 * dh_sampler belongs to one thread).
 */
#include "catalog.h"

#include <stdlib.h>

#define GOLDEN 0x9e3779b97f4a7c15ULL

struct dh__strata {
    int64_t n;
    int classes;
    uint64_t key;
    int64_t *first;        /* classes + 1: class c's samples are ids[first[c], first[c + 1]) */
    uint32_t *ids;         /* the samples class by class, by id within a class */
    const uint32_t *order; /* the epoch's order of each class, laid out as ids (or ids) */
    /* the last step laid out (step_segments): class c's indices in its order are [lo[c],
     * hi[c]) then, when the step wraps to the epoch's start, [lo2[c], hi2[c]); at[c]: where
     * class c starts in the step (at[classes] = G). One allocation with first, classes + 1
     * entries each. */
    int64_t *lo, *hi, *lo2, *hi2, *at;
};

static int64_t class_size(const dh__strata *t, int c)
{
    return t->first[c + 1] - t->first[c];
}

/* Whether class c's a-th sample comes before class d's b-th in an epoch: key (2a + 1) /
 * (2 n_c) against (2b + 1) / (2 n_d), exactly (products below 2^63: n < 2^31). */
static int before(const dh__strata *t, int c, int64_t a, int d, int64_t b)
{
    uint64_t x = (uint64_t)(2 * a + 1) * (uint64_t)class_size(t, d);
    uint64_t y = (uint64_t)(2 * b + 1) * (uint64_t)class_size(t, c);
    return x < y || (x == y && c < d);
}

/* The class whose next sample comes first (cnt: each class's taken), or -1. */
static int next_class(const dh__strata *t, const int64_t *cnt)
{
    int best = -1;
    for (int c = 0; c < t->classes; c++)
        if (cnt[c] < class_size(t, c) && (best < 0 || before(t, c, cnt[c], best, cnt[best])))
            best = c;
    return best;
}

/* The class whose last taken sample comes last, or -1. */
static int last_class(const dh__strata *t, const int64_t *cnt)
{
    int best = -1;
    for (int c = 0; c < t->classes; c++)
        if (cnt[c] > 0 && (best < 0 || before(t, best, cnt[best] - 1, c, cnt[c] - 1)))
            best = c;
    return best;
}

void dh__strata_counts(const dh__strata *t, int64_t h, int64_t *cnt)
{
    /* the samples whose key is below h / n: (2a + 1) n < 2 h n_c, within K / 2 of h */
    h = DH_MAX(0, DH_MIN(h, t->n));
    uint64_t n = (uint64_t)t->n;
    int64_t total = 0;
    for (int c = 0; c < t->classes; c++) {
        uint64_t twice = 2 * (uint64_t)h * (uint64_t)class_size(t, c);
        int64_t k = twice > n ? (int64_t)((twice - n + 2 * n - 1) / (2 * n)) : 0;
        cnt[c] = DH_MIN(k, class_size(t, c));
        total += cnt[c];
    }
    for (; total < h; total++)
        cnt[next_class(t, cnt)]++;
    for (; total > h; total--)
        cnt[last_class(t, cnt)]--;
}

int dh__strata_new(const uint16_t *cls, int64_t n, int classes, uint64_t key, dh__strata **out)
{
    if (!cls || !out || n < 1 || n >= (1LL << 31) || classes < 1 || classes > DH__STRATA_MAX)
        return DH_EINVAL;
    *out = NULL;
    for (int64_t i = 0; i < n; i++)
        if (cls[i] >= classes)
            return DH_EINVAL;
    dh__strata *t = calloc(1, sizeof *t);
    size_t k1 = (size_t)classes + 1;
    if (!t || !(t->first = calloc(6 * k1, sizeof *t->first)) ||
        !(t->ids = malloc((size_t)n * sizeof *t->ids))) {
        dh__strata_free(t);
        return DH_ENOMEM;
    }
    t->lo = t->first + k1;
    t->hi = t->lo + k1;
    t->lo2 = t->hi + k1;
    t->hi2 = t->lo2 + k1;
    t->at = t->hi2 + k1;
    t->n = n;
    t->classes = classes;
    t->key = key;
    for (int64_t i = 0; i < n; i++) /* a counting sort by class, stable */
        t->first[cls[i] + 1]++;
    for (int c = 0; c < classes; c++)
        t->first[c + 1] += t->first[c];
    for (int c = 0; c < classes; c++) /* at: where the next of class c goes */
        t->at[c] = t->first[c];
    for (int64_t i = 0; i < n; i++)
        t->ids[t->at[cls[i]]++] = (uint32_t)i;
    t->order = t->ids;
    *out = t;
    return 0;
}

void dh__strata_free(dh__strata *t)
{
    if (!t)
        return;
    free(t->first); /* and the step's workspace */
    free(t->ids);
    free(t);
}

const uint32_t *dh__strata_ids(const dh__strata *t, const int64_t **first)
{
    *first = t->first;
    return t->ids;
}

void dh__strata_use(dh__strata *t, const uint32_t *order)
{
    t->order = order ? order : t->ids;
}

int64_t dh__strata_class_size(const dh__strata *t, int c)
{
    return c >= 0 && c < t->classes ? class_size(t, c) : 0;
}

/* Lays out positions [h0, h0 + G) of the epoch (wrapping to its start, as padding does)
 * class by class into the workspace. */
static void step_segments(dh__strata *t, int64_t h0, int64_t G)
{
    dh__strata_counts(t, h0, t->lo);
    if (h0 + G <= t->n) {
        dh__strata_counts(t, h0 + G, t->hi);
        for (int c = 0; c < t->classes; c++)
            t->lo2[c] = t->hi2[c] = 0;
    } else {
        dh__strata_counts(t, h0 + G - t->n, t->hi2);
        for (int c = 0; c < t->classes; c++) {
            t->hi[c] = class_size(t, c);
            t->lo2[c] = 0;
        }
    }
    t->at[0] = 0;
    for (int c = 0; c < t->classes; c++)
        t->at[c + 1] = t->at[c] + (t->hi[c] - t->lo[c]) + (t->hi2[c] - t->lo2[c]);
}

/* The sample at place u of class c's part of the step laid out. */
static int64_t step_sample(const dh__strata *t, int c, int64_t u)
{
    int64_t first = t->hi[c] - t->lo[c];
    return t->order[t->first[c] + (u < first ? t->lo[c] + u : t->lo2[c] + (u - first))];
}

static int step_args(const dh__strata *t, int64_t epoch, int64_t h0, int64_t G)
{
    return t && epoch >= 0 && h0 >= 0 && h0 < t->n && G >= 1 && G <= t->n ? 0 : DH_EINVAL;
}

int dh__strata_step(dh__strata *t, int64_t epoch, int64_t h0, int64_t G, int64_t *out)
{
    if (step_args(t, epoch, h0, G) || !out)
        return DH_EINVAL;
    step_segments(t, h0, G);
    for (int c = 0; c < t->classes; c++)
        for (int64_t u = 0; u < t->at[c + 1] - t->at[c]; u++)
            out[t->at[c] + u] = step_sample(t, c, u);
    return 0;
}

/* The rotations' key of the step at h0 of epoch `epoch`, and run r's rotation: node k takes
 * the run's place (k + rotation) mod N. */
static uint64_t rotation_key(const dh__strata *t, int64_t epoch, int64_t h0)
{
    return dh__mix64(t->key ^ dh__mix64((uint64_t)epoch + GOLDEN) ^
                     dh__mix64((uint64_t)h0 + 2 * GOLDEN));
}

static int64_t rotation(uint64_t rk, int64_t r, int nodes)
{
    return (int64_t)(dh__mix64(rk + (uint64_t)(r + 1) * GOLDEN) % (uint64_t)nodes);
}

static int share_args(const dh__strata *t, int64_t epoch, int64_t h0, int64_t G, int nodes,
                      const int64_t *out)
{
    return step_args(t, epoch, h0, G) || !out || nodes < 1 || G % nodes ? DH_EINVAL : 0;
}

int dh__strata_share(dh__strata *t, int64_t epoch, int64_t h0, int64_t G, int nodes, int node,
                     int64_t *out)
{
    if (share_args(t, epoch, h0, G, nodes, out) || node < 0 || node >= nodes)
        return DH_EINVAL;
    step_segments(t, h0, G);
    uint64_t rk = rotation_key(t, epoch, h0);
    int c = 0;
    for (int64_t r = 0; r < G / nodes; r++) {
        int64_t j = r * nodes + (node + rotation(rk, r, nodes)) % nodes;
        while (j >= t->at[c + 1])
            c++;
        out[r] = step_sample(t, c, j - t->at[c]);
    }
    return 0;
}

/* Laying out a step node by node: run r's next place goes to node k, whose block holds its
 * samples at out[k per, (k + 1) per); at: places of run r laid out. */
typedef struct {
    int64_t *out, per, r;
    int nodes, k, at;
    uint64_t rk;
} by_node;

/* The next n places of the step laid out class by class, samples src[0, n), to their nodes'
 * blocks (a segment of one class's order: read in a run, not sample by sample). */
static void lay_out(by_node *d, const uint32_t *src, int64_t n)
{
    int64_t per = d->per, r = d->r;
    int nodes = d->nodes, k = d->k, at = d->at;
    for (int64_t u = 0; u < n; u++) {
        if (at == 0)
            k = (int)((nodes - rotation(d->rk, r, nodes)) % nodes);
        d->out[k * per + r] = src[u];
        k = k + 1 == nodes ? 0 : k + 1;
        if (++at == nodes)
            at = 0, r++;
    }
    d->r = r, d->k = k, d->at = at;
}

int dh__strata_step_by_node(dh__strata *t, int64_t epoch, int64_t h0, int64_t G, int nodes,
                            int64_t *out)
{
    if (share_args(t, epoch, h0, G, nodes, out))
        return DH_EINVAL;
    step_segments(t, h0, G);
    /* the step class by class, place j of run r going to the node whose place it is:
     * node (j - r N - rotation) mod N, counted up from the run's first place */
    by_node d = {out, G / nodes, 0, nodes, 0, 0, rotation_key(t, epoch, h0)};
    for (int c = 0; c < t->classes; c++) {
        const uint32_t *o = t->order + t->first[c];
        lay_out(&d, o + t->lo[c], t->hi[c] - t->lo[c]);
        lay_out(&d, o + t->lo2[c], t->hi2[c] - t->lo2[c]);
    }
    return 0;
}
