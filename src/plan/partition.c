/*
 * partition.c - global batch -> ranks, minimising the step's maximum
 * predicted GPU time (docs/DESIGN.md mechanism 2).
 *
 * LPT (longest processing time first) places samples in decreasing GPU cost
 * on the least loaded rank that stays within the token and byte caps, ties
 * going to the rank with less CPU work; a heap of ranks makes it O(n log R).
 * LPT is within 4/3 of optimal; the refinement then repeatedly takes the most
 * loaded rank and applies the best single move or pairwise swap with one of
 * the least loaded ranks that lowers the pair's maximum (a Karmarkar-Karp-like
 * differencing step restricted to pairs), until nothing improves. Cost: LPT
 * plus a bounded number of refinement rounds, each O(log R + k * members^2);
 * bench/bench_plan measures a 4,096-sample batch over 512 ranks
 * (bench/RESULTS.md).
 */
#include "plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REFINE_PARTNERS 8  /* least-loaded ranks tried per refinement round */
#define EPS 1e-12

/* A rank in LPT's heap: its GPU load, the first of the order's keys (the others are read
 * from its record on a tie), in 16 bytes: 16,384 ranks' heap fits the L2. */
typedef struct {
    double g;
    int r;
} lpt_ent;

/* A rank's loads in one record: placing a sample on a rank at random reads one or two cache
 * lines, not one in each of six arrays (16,384 ranks: 640 KB of them, past the L2). */
typedef struct {
    double g, c;  /* GPU and CPU load */
    int64_t t, b; /* tokens and bytes, for the caps (tokens: also a tie-break) */
    int n, head;  /* samples (a tie-break), and the first member (-1: none) */
} rank_load;

typedef struct {
    const dh__part_in *in;
    int32_t *rank_of;
    rank_load *rk;           /* per rank */
    int *next, *prev;        /* members of each rank (from rk[r].head): doubly linked, O(1) moves */
    lpt_ent *heap;           /* LPT's heap of ranks (R) */
    int *aside;              /* ranks LPT set aside (R) */
    int *rh[4];              /* refinement's rank heaps: most (h, pos), least (h, pos) */
} part_state;

void dh__partition_stride(int n, int ranks, int32_t *rank_of)
{
    for (int i = 0; i < n; i++)
        rank_of[i] = i % ranks;
}

static uint64_t desc_key(double x)
{
    return dh__part_desc_key(x);
}

#define RADIX_BITS 11
#define RADIX (1 << RADIX_BITS)

/* LPT's order between samples a and b: decreasing GPU, then decreasing CPU, then index. */
static int lpt_before(const dh__part_in *in, int a, int b)
{
    uint64_t ga = desc_key(in->gpu[a]), gb = desc_key(in->gpu[b]);
    if (ga != gb)
        return ga < gb;
    uint64_t ca = in->cpu ? desc_key(in->cpu[a]) : 0, cb = in->cpu ? desc_key(in->cpu[b]) : 0;
    return ca != cb ? ca < cb : a < b;
}

/* Below this many samples a merge sort beats the radix sort's fixed cost (its 2,048 counters
 * cleared and summed for every digit): a node's share of a step is often a few dozen samples. */
#define SMALL_SORT 1024

/* Bottom-up merge sort of order[0, n) by lpt_before, tmp as scratch (n). */
static void merge_sort_lpt(const dh__part_in *in, int *order, int *tmp, size_t n)
{
    int *a = order, *b = tmp;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = DH_MIN(lo + w, n), hi = DH_MIN(lo + 2 * w, n), i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                b[k++] = lpt_before(in, a[j], a[i]) ? a[j++] : a[i++];
            while (i < mid)
                b[k++] = a[i++];
            while (j < hi)
                b[k++] = a[j++];
        }
        int *t = a;
        a = b;
        b = t;
    }
    if (a != order)
        memcpy(order, a, n * sizeof *order);
}

/* A sample and its key in a radix pass (plan.h's order: the CPU key, then the GPU key). */
typedef struct {
    uint64_t key;
    int i;
} lpt_kv;

#define DIGITS ((64 + RADIX_BITS - 1) / RADIX_BITS)
/* Below this many samples, digits of 8 bits (8 passes, 256 counters each: 8 KB cleared a sort)
 * in place of 11 (6 passes, 2,048 counters each: 48 KB cleared to order a job's 1,024 nodes,
 * twice a step on every replica); about as many instructions, a sixth of the memory written */
#define SMALL_RADIX 4096

/* A stable LSD radix sort of a[0, n) by key, digits of `bits`, b as scratch, cnt its counters
 * (DIGITS * RADIX); returns where the result is. Any width gives the same order. */
static inline __attribute__((always_inline)) lpt_kv *radix_bits(lpt_kv *a, lpt_kv *b, size_t n,
                                                               uint32_t *cnt, const int bits)
{
    const int digits = (64 + bits - 1) / bits;
    const uint32_t radix = 1u << bits, mask = radix - 1;
    memset(cnt, 0, (size_t)digits * radix * sizeof *cnt);
    for (size_t k = 0; k < n; k++) /* every digit's counts in one pass */
        for (int d = 0; d < digits; d++)
            cnt[d * radix + ((a[k].key >> (d * bits)) & mask)]++;
    for (int d = 0; d < digits; d++) {
        int shift = d * bits;
        uint32_t *c = cnt + d * radix;
        if (c[(a[0].key >> shift) & mask] == n)
            continue; /* every sample has this digit */
        for (uint32_t v = 0, sum = 0; v < radix; v++) {
            uint32_t x = c[v];
            c[v] = sum;
            sum += x;
        }
        for (size_t k = 0; k < n; k++)
            b[c[(a[k].key >> shift) & mask]++] = a[k];
        lpt_kv *t = a;
        a = b;
        b = t;
    }
    return a;
}

/* radix_bits at the width for n (its two widths compiled apart: the digit loops unrolled). */
static lpt_kv *radix_kv(lpt_kv *a, lpt_kv *b, size_t n, uint32_t (*cnt)[RADIX])
{
    if (n < SMALL_RADIX)
        return radix_bits(a, b, n, cnt[0], 8);
    return radix_bits(a, b, n, cnt[0], RADIX_BITS);
}

/*
 * The samples in LPT's order (plan.h). A stable least-significant-digit
 * radix sort on the keys (CPU first, then GPU, from index order) gives that
 * order in O(n) passes; digits every sample shares are skipped. Each sample
 * travels with its key (no pass reads a key through the order) and a key's
 * digits are counted in one pass. Comparison sorting was most of a 32,768-
 * sample plan's time; below SMALL_SORT samples it is the faster one, and
 * gives the same order.
 */
static void sort_lpt(const dh__part_in *in, int *order, lpt_kv *kv, int *tmp,
                     uint32_t (*cnt)[RADIX])
{
    size_t n = (size_t)in->n;
    if (n < SMALL_SORT) {
        for (size_t i = 0; i < n; i++)
            order[i] = (int)i;
        merge_sort_lpt(in, order, tmp, n);
        return;
    }
    lpt_kv *a = kv;
    for (size_t i = 0; i < n; i++)
        a[i] = (lpt_kv){in->cpu ? desc_key(in->cpu[i]) : 0, (int)i};
    if (in->cpu)
        a = radix_kv(a, a == kv ? kv + n : kv, n, cnt);
    for (size_t k = 0; k < n; k++)
        a[k].key = desc_key(in->gpu[a[k].i]);
    a = radix_kv(a, a == kv ? kv + n : kv, n, cnt);
    for (size_t k = 0; k < n; k++)
        order[k] = a[k].i;
}

static int64_t val(const int64_t *v, int i)
{
    return v ? v[i] : 0;
}

static int fits(const part_state *s, int r, int i, int out)
{
    const dh__part_in *in = s->in;
    if (!in->cap_tokens && !in->cap_bytes)
        return 1;
    int64_t t = s->rk[r].t + val(in->tokens, i) - (out >= 0 ? val(in->tokens, out) : 0);
    int64_t b = s->rk[r].b + val(in->bytes, i) - (out >= 0 ? val(in->bytes, out) : 0);
    return (!in->cap_tokens || t <= in->cap_tokens) && (!in->cap_bytes || b <= in->cap_bytes);
}

static void place(part_state *s, int i, int r, int sign)
{
    const dh__part_in *in = s->in;
    rank_load *k = &s->rk[r];
    k->g += sign * in->gpu[i];
    k->c += sign * (in->cpu ? in->cpu[i] : 0);
    k->t += sign * val(in->tokens, i);
    k->b += sign * val(in->bytes, i);
    k->n += sign;
    if (sign > 0) {
        s->rank_of[i] = r;
        s->prev[i] = -1;
        s->next[i] = k->head;
        if (k->head >= 0)
            s->prev[k->head] = i;
        k->head = i;
    } else {
        if (s->prev[i] >= 0)
            s->next[s->prev[i]] = s->next[i];
        else
            k->head = s->next[i];
        if (s->next[i] >= 0)
            s->prev[s->next[i]] = s->prev[i];
    }
}

/* LPT's order of ranks: less GPU load first, then less CPU load, then fewer tokens, then
 * fewer samples, then the lower index. Samples that cost nothing predicted (text only) all
 * went to rank 0 while it stayed the least loaded: the tokens and the count spread them. A
 * rank's entry is rewritten whenever its loads change, so its g is its record's. */
static int ent_before(const rank_load *rk, const lpt_ent *a, const lpt_ent *b)
{
    if (a->g != b->g)
        return a->g < b->g;
    const rank_load *x = &rk[a->r], *y = &rk[b->r];
    if (x->c != y->c)
        return x->c < y->c;
    if (x->t != y->t)
        return x->t < y->t;
    if (x->n != y->n)
        return x->n < y->n;
    return a->r < b->r;
}

static lpt_ent ent_of(const part_state *s, int r)
{
    return (lpt_ent){s->rk[r].g, r};
}

/* The same order between ranks a and b, read from the loads. */
static int rank_before(const part_state *s, int a, int b)
{
    lpt_ent x = ent_of(s, a), y = ent_of(s, b);
    return ent_before(s->rk, &x, &y);
}

/* LPT's heap is 4-ary: half the levels of a binary one, and a node's four children in one
 * cache line (one sift a sample). The order is total, so the top is the same rank whatever
 * the heap's shape. */
#define ARY 4

static void sift_down(const rank_load *rk, lpt_ent *heap, int n, int i)
{
    lpt_ent x = heap[i];
    for (;;) {
        int c = ARY * i + 1, end = DH_MIN(c + ARY, n);
        if (c >= n)
            break;
        for (int k = c + 1; k < end; k++)
            c = ent_before(rk, &heap[k], &heap[c]) ? k : c;
        if (!ent_before(rk, &heap[c], &x))
            break;
        heap[i] = heap[c];
        i = c;
    }
    heap[i] = x;
}

static void sift_up(const rank_load *rk, lpt_ent *heap, int i)
{
    lpt_ent x = heap[i];
    while (i > 0 && ent_before(rk, &x, &heap[(i - 1) / ARY])) {
        heap[i] = heap[(i - 1) / ARY];
        i = (i - 1) / ARY;
    }
    heap[i] = x;
}

/* Orders heap[0, n) into LPT's heap, in O(n). */
static void heapify(const rank_load *rk, lpt_ent *heap, int n)
{
    for (int i = (n - 2) / ARY; i >= 0; i--)
        sift_down(rk, heap, n, i);
}

static int heap_pop_rank(const rank_load *rk, lpt_ent *heap, int *n)
{
    int top = heap[0].r;
    heap[0] = heap[--*n];
    if (*n)
        sift_down(rk, heap, *n, 0);
    return top;
}

static void heap_push_rank(const part_state *s, lpt_ent *heap, int *n, int r)
{
    heap[(*n)++] = ent_of(s, r);
    sift_up(s->rk, heap, *n - 1);
}

/* Samples are placed in an order (LPT's) or on ranks (a given placement) that land at
 * random in 16,384 ranks' and 131,072 samples' arrays: the rows a placement PLACE_AHEAD
 * later touches are asked for ahead. */
#define PLACE_AHEAD 8

static void prefetch_sample(const part_state *s, int i)
{
    __builtin_prefetch(&s->in->gpu[i]);
    if (s->in->cpu)
        __builtin_prefetch(&s->in->cpu[i]);
    __builtin_prefetch(&s->rank_of[i], 1);
    __builtin_prefetch(&s->next[i], 1);
    __builtin_prefetch(&s->prev[i], 1);
}

/*
 * LPT with a heap of ranks: O(n log R). Ranks whose caps cannot take the
 * sample are set aside and pushed back after it is placed.
 */
static void lpt(part_state *s, const int *order, dh__part_out *out)
{
    const dh__part_in *in = s->in;
    int R = in->ranks, n = R, naside = 0, k = 0;
    lpt_ent *heap = s->heap;
    int *aside = s->aside;
    for (int r = 0; r < R; r++)
        heap[r] = ent_of(s, r);
    if (in->base_gpu) /* else all empty: in rank order, a heap already */
        heapify(s->rk, heap, R);
    if (!in->base_gpu && !in->cap_tokens && !in->cap_bytes && in->n >= R &&
        in->gpu[order[R - 1]] > 0) {
        /* Every rank starts empty and the R largest samples all weigh: the least loaded rank
         * is always the lowest empty one, so sample k of the order goes to rank k, and the
         * heap is built once from there. */
        for (; k < R; k++) {
            place(s, order[k], k, +1);
            heap[k] = ent_of(s, k);
        }
        heapify(s->rk, heap, R);
    }
    for (; k < in->n; k++) {
        int i = order[k], best = -1;
        if (k + PLACE_AHEAD < in->n)
            prefetch_sample(s, order[k + PLACE_AHEAD]);
        if (naside == 0 && n == R && fits(s, heap[0].r, i, -1)) {
            /* the usual case: the least loaded rank takes it and sinks to its new place (the
             * order is total, so this is the rank popping would find) */
            place(s, i, heap[0].r, +1);
            heap[0] = ent_of(s, heap[0].r);
            sift_down(s->rk, heap, n, 0);
            continue;
        }
        while (n > 0) {
            int r = heap_pop_rank(s->rk, heap, &n);
            if (fits(s, r, i, -1)) {
                best = r;
                break;
            }
            aside[naside++] = r;
        }
        if (best < 0) { /* caps cannot hold it anywhere: least loaded rank, counted */
            out->cap_violations++;
            best = aside[0];
            for (int a = 1; a < naside; a++)
                if (rank_before(s, aside[a], best))
                    best = aside[a];
            for (int a = 0; a < naside; a++)
                if (aside[a] == best)
                    aside[a] = aside[--naside];
        }
        place(s, i, best, +1);
        heap_push_rank(s, heap, &n, best);
        while (naside > 0)
            heap_push_rank(s, heap, &n, aside[--naside]);
    }
}

/*
 * Ranks by GPU load in indexed binary heaps (position of each rank kept), one
 * with the most loaded rank on top and one with the least: a refinement round
 * changes two ranks' loads, so keeping both costs O(log R) a round where
 * scanning every rank for the most and least loaded cost O(R) (30% of a
 * 16,384-rank simulation). Ties go to the lower rank, as the scans had it, so
 * plans are unchanged.
 */
typedef struct {
    int *h, *pos, n, most; /* most: the most loaded rank on top, else the least */
    const rank_load *rk;
} rank_heap;

static int rh_before(const rank_heap *q, int a, int b)
{
    double x = q->rk[a].g, y = q->rk[b].g;
    if (x != y)
        return q->most ? x > y : x < y;
    return a < b;
}

static void rh_set(rank_heap *q, int i, int r)
{
    q->h[i] = r;
    q->pos[r] = i;
}

static void rh_down(rank_heap *q, int r)
{
    int i = q->pos[r];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && rh_before(q, q->h[c + 1], q->h[c]))
            c++;
        if (!rh_before(q, q->h[c], r))
            break;
        rh_set(q, i, q->h[c]);
        i = c;
    }
    rh_set(q, i, r);
}

/* Rank r's load changed: back to its place. */
static void rh_fix(rank_heap *q, int r)
{
    int i = q->pos[r];
    while (i > 0 && rh_before(q, r, q->h[(i - 1) / 2])) {
        rh_set(q, i, q->h[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    rh_set(q, i, r);
    rh_down(q, r);
}

/* A heap of n ranks in h and pos (n each). */
static void rh_init(rank_heap *q, int *h, int *pos, int n, const rank_load *rk, int most)
{
    *q = (rank_heap){h, pos, n, most, rk};
    for (int r = 0; r < n; r++)
        rh_set(q, r, r);
    for (int r = n / 2 - 1; r >= 0; r--)
        rh_down(q, q->h[r]);
}

/*
 * The k least loaded ranks other than skip, ascending by load (ties: lower
 * rank first), read off the heap's top without popping: the next smallest is
 * always among the children of those taken, so a handful of candidates do.
 */
static int least_loaded(const rank_heap *q, int skip, int *out, int k)
{
    int cand[2 * REFINE_PARTNERS + 4], nc = q->n > 0, m = 0;
    cand[0] = 0;
    while (m < k && nc > 0) {
        int b = 0;
        for (int c = 1; c < nc; c++)
            if (rh_before(q, q->h[cand[c]], q->h[cand[b]]))
                b = c;
        int i = cand[b];
        cand[b] = cand[--nc];
        if (q->h[i] != skip)
            out[m++] = q->h[i];
        for (int c = 2 * i + 1; c <= 2 * i + 2 && c < q->n; c++)
            cand[nc++] = c;
    }
    return m;
}

/* Members a round gathers from a rank's list into arrays (more: the lists are walked). */
#define GATHER_MAX 64

/* Rank r's members in list order into idx and their GPU costs into g; their count, or -1
 * when r holds more than GATHER_MAX. */
static int gather(const part_state *s, int r, int *idx, double *g)
{
    int m = 0;
    for (int i = s->rk[r].head; i >= 0; i = s->next[i]) {
        if (m == GATHER_MAX)
            return -1;
        idx[m] = i;
        g[m++] = s->in->gpu[i];
    }
    return m;
}

/*
 * One refinement round on the most loaded rank: the best move or swap with a
 * lightly loaded partner. Returns 1 if the pair's maximum went down.
 *
 * Candidates are tried in one order (partner, then top's member in list order,
 * its move, then its swaps with the partner's members in list order) and the
 * first strictly better one is kept. Without caps, and for lists of at most
 * GATHER_MAX members, the members are read into arrays once a round (once a
 * partner) and the swaps are scanned without branches: which swap is better
 * depends on the data, so a branch there missed about half the time (most of a
 * 16,384-rank plan's time). Same order, same comparisons, same choice.
 */
static int refine_round(part_state *s, rank_heap *most, rank_heap *least, int top)
{
    const dh__part_in *in = s->in;
    int partners[REFINE_PARTNERS];
    int np = least_loaded(least, top, partners, REFINE_PARTNERS);
    double best = s->rk[top].g - EPS;
    int bi = -1, bj = -1, br = -1;
    int ti[GATHER_MAX], ri[GATHER_MAX];
    double tg[GATHER_MAX], rg[GATHER_MAX];
    int mt = in->cap_tokens || in->cap_bytes ? -1 : gather(s, top, ti, tg);
    for (int p = 0; p < np; p++) {
        int r = partners[p];
        int mr = mt < 0 ? -1 : gather(s, r, ri, rg);
        if (mr < 0) {
            for (int i = s->rk[top].head; i >= 0; i = s->next[i]) {
                double gi = in->gpu[i];
                if (fits(s, r, i, -1)) { /* move i: top -> r */
                    double m = DH_MAX(s->rk[top].g - gi, s->rk[r].g + gi);
                    if (m < best)
                        best = m, bi = i, bj = -1, br = r;
                }
                for (int j = s->rk[r].head; j >= 0; j = s->next[j]) { /* swap i with j of r */
                    if (in->gpu[j] >= gi || !fits(s, r, i, j))
                        continue;
                    double d = gi - in->gpu[j];
                    double m = DH_MAX(s->rk[top].g - d, s->rk[r].g + d);
                    if (m < best)
                        best = m, bi = i, bj = j, br = r;
                }
            }
            continue;
        }
        double gt = s->rk[top].g, gr = s->rk[r].g;
        for (int k = 0; k < mt; k++) {
            double gi = tg[k];
            double m = DH_MAX(gt - gi, gr + gi); /* move */
            if (m < best)
                best = m, bi = ti[k], bj = -1, br = r;
            int w = -1;
            for (int l = 0; l < mr; l++) { /* swaps, without branches */
                double d = gi - rg[l];
                m = DH_MAX(gt - d, gr + d);
                int better = (d > 0) & (m < best); /* d > 0: rg[l] < gi (or no swap) */
                best = better ? m : best;
                w = better ? l : w;
            }
            if (w >= 0)
                bi = ti[k], bj = ri[w], br = r;
        }
    }
    if (bi < 0)
        return 0;
    place(s, bi, top, -1);
    place(s, bi, br, +1);
    if (bj >= 0) {
        place(s, bj, br, -1);
        place(s, bj, top, +1);
    }
    rh_fix(most, top);
    rh_fix(most, br);
    rh_fix(least, top);
    rh_fix(least, br);
    return 1;
}

/*
 * Improves the most loaded rank until no move or swap helps, or the maximum
 * is within 0.1% of the lower bound max(mean load, largest sample), where no
 * placement can do meaningfully better.
 */
static void refine(part_state *s, dh__part_out *out)
{
    const dh__part_in *in = s->in;
    double total = 0, largest = 0;
    for (int i = 0; i < in->n; i++) {
        total += in->gpu[i];
        largest = DH_MAX(largest, in->gpu[i]);
    }
    for (int r = 0; in->base_gpu && r < in->ranks; r++) {
        total += in->base_gpu[r];
        largest = DH_MAX(largest, in->base_gpu[r]);
    }
    double good_enough = 1.001 * DH_MAX(total / in->ranks, largest);
    rank_heap most, least;
    rh_init(&most, s->rh[0], s->rh[1], in->ranks, s->rk, 1);
    rh_init(&least, s->rh[2], s->rh[3], in->ranks, s->rk, 0);
    for (int round = 0; round < 4 * in->n + 16; round++) {
        int top = most.h[0];
        if (s->rk[top].g <= good_enough || !refine_round(s, &most, &least, top))
            break;
        out->moves++;
    }
}

/* Bytes of one array of n elements of size sz in the workspace (8-byte aligned). */
static size_t ws_len(size_t n, size_t sz)
{
    return (n * sz + 7) & ~(size_t)7;
}

static void *carve(char **p, size_t n, size_t sz)
{
    void *at = *p;
    *p += ws_len(n, sz);
    return at;
}

void dh__part_ws_free(dh__part_ws *ws)
{
    if (ws) {
        free(ws->mem);
        ws->mem = NULL;
        ws->cap = 0;
    }
}

/* At least `need` bytes in ws->mem. 0 or DH_ENOMEM. */
static int ws_reserve(dh__part_ws *ws, size_t need)
{
    if (ws->cap >= need)
        return 0;
    void *m = realloc(ws->mem, need);
    if (!m)
        return DH_ENOMEM;
    ws->mem = m;
    ws->cap = need;
    return 0;
}

/*
 * Every rank gets a sample when there are enough: samples that weigh nothing (text that
 * costs nothing to prepare, whose GPU share was scaled to its CPU) all went to the least
 * loaded rank, which stayed the least loaded, and a rank without a batch waited for one
 * that no task would ever finish (the simulator stopped as stalled). Each empty rank takes
 * the lightest sample of the rank holding the most. Placements with no empty rank are
 * untouched.
 */
static void fill_empty_ranks(part_state *s, int *count)
{
    int R = s->in->ranks;
    if (s->in->n < R)
        return;
    memset(count, 0, (size_t)R * sizeof *count);
    for (int i = 0; i < s->in->n; i++)
        count[s->rank_of[i]]++;
    for (int e = 0; e < R; e++) {
        if (count[e])
            continue;
        int d = 0;
        for (int r = 1; r < R; r++)
            d = count[r] > count[d] ? r : d;
        int light = s->rk[d].head;
        for (int i = s->rk[d].head; i >= 0; i = s->next[i])
            light = s->in->gpu[i] < s->in->gpu[light] ? i : light;
        place(s, light, d, -1);
        place(s, light, e, +1);
        count[d]--;
        count[e]++;
    }
}

int dh__part_lpt_order(const dh__part_in *in, int *order)
{
    size_t n1 = (size_t)(in->n > 0 ? in->n : 1);
    dh__part_ws own = {0}, *ws = in->ws ? in->ws : &own;
    if (ws_reserve(ws, ws_len(2 * n1, sizeof(lpt_kv)) + ws_len(n1, sizeof(int)) +
                           ws_len(DIGITS * RADIX, sizeof(uint32_t))))
        return DH_ENOMEM;
    char *p = ws->mem;
    lpt_kv *kv = carve(&p, 2 * n1, sizeof *kv);
    int *tmp = carve(&p, n1, sizeof *tmp);
    uint32_t(*cnt)[RADIX] = carve(&p, DIGITS * RADIX, sizeof(uint32_t));
    sort_lpt(in, order, kv, tmp, cnt);
    dh__part_ws_free(&own);
    return 0;
}

int dh__partition(const dh__part_in *in, int32_t *rank_of, dh__part_out *out)
{
    if (!in || !rank_of || !out || in->ranks < 1 || in->n < 0 || !in->gpu)
        return DH_EINVAL;
    memset(out, 0, sizeof *out);
    size_t R = (size_t)in->ranks, n1 = (size_t)(in->n ? in->n : 1);
    /* One block for every array of the call, kept in in->ws between calls: a 32,768-sample
     * plan allocated a few MiB per call, which came from fresh pages (mmap, page faults and
     * zeroing: a third of a replica's control time at 1,024 nodes). */
    size_t need = ws_len(R, sizeof(rank_load)) + 5 * ws_len(R, sizeof(int)) +
                  ws_len(R, sizeof(lpt_ent)) +
                  4 * ws_len(n1, sizeof(int)) + ws_len(2 * n1, sizeof(lpt_kv)) +
                  ws_len(DIGITS * RADIX, sizeof(uint32_t));
    dh__part_ws own = {0}, *ws = in->ws ? in->ws : &own;
    if (ws_reserve(ws, need))
        return DH_ENOMEM;
    char *p = ws->mem;
    part_state s = {.in = in, .rank_of = rank_of};
    s.rk = carve(&p, R, sizeof *s.rk);
    s.heap = carve(&p, R, sizeof *s.heap);
    s.aside = carve(&p, R, sizeof *s.aside);
    for (int k = 0; k < 4; k++)
        s.rh[k] = carve(&p, R, sizeof(int));
    s.next = carve(&p, n1, sizeof *s.next);
    s.prev = carve(&p, n1, sizeof *s.prev);
    int *order = carve(&p, n1, sizeof *order), *tmp = carve(&p, n1, sizeof *tmp);
    lpt_kv *kv = carve(&p, 2 * n1, sizeof *kv);
    uint32_t(*cnt)[RADIX] = carve(&p, DIGITS * RADIX, sizeof(uint32_t));
    for (size_t r = 0; r < R; r++)
        s.rk[r] = (rank_load){.g = in->base_gpu ? in->base_gpu[r] : 0, .head = -1};
    if (in->initial) { /* improve a given placement: only moves that lower the maximum */
        for (int i = 0; i < in->n; i++) {
            if (i + PLACE_AHEAD < in->n)
                __builtin_prefetch(&s.rk[in->initial[i + PLACE_AHEAD]], 1);
            place(&s, i, in->initial[i], +1);
        }
    } else {
        sort_lpt(in, order, kv, tmp, cnt);
        lpt(&s, order, out);
    }
    refine(&s, out);
    if (!in->initial)
        fill_empty_ranks(&s, s.rh[0]); /* refinement's heap space is free now */
    double total = 0;
    for (size_t r = 0; r < R; r++) {
        total += s.rk[r].g;
        out->max_gpu = DH_MAX(out->max_gpu, s.rk[r].g);
    }
    out->mean_gpu = total / (double)R;
    dh__part_ws_free(&own);
    return 0;
}
