/*
 * partition.c - global batch -> ranks, minimising the step's maximum
 * predicted GPU time (DESIGN.md mechanism 2).
 *
 * LPT (longest processing time first) places samples in decreasing GPU cost
 * on the least loaded rank that stays within the token and byte caps, ties
 * going to the rank with less CPU work. LPT is within 4/3 of optimal; the
 * refinement then repeatedly takes the most loaded rank and applies the best
 * single move or pairwise swap with one of the least loaded ranks that lowers
 * the pair's maximum (a Karmarkar-Karp-like differencing step restricted to
 * pairs), until nothing improves. Everything is O(n R) for LPT plus a bounded
 * number of refinement rounds, each O(k^2 * candidates), so a 4,096-sample
 * batch over 512 ranks plans in about a millisecond.
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

#define REFINE_PARTNERS 8  /* least-loaded ranks tried per refinement round */
#define EPS 1e-12

typedef struct {
    const dh__part_in *in;
    int32_t *rank_of;
    double *gpu, *cpu;       /* per-rank loads */
    int64_t *tokens, *bytes; /* per-rank usage for caps */
    int *slot;               /* refinement: rank -> partner slot, -1 if not a partner */
} part_state;

void dh__partition_stride(int n, int ranks, int32_t *rank_of)
{
    for (int i = 0; i < n; i++)
        rank_of[i] = i % ranks;
}

static int by_gpu_desc(const void *a, const void *b, void *ctx)
{
    int i = *(const int *)a, j = *(const int *)b;
    const dh__part_in *in = ctx;
    if (in->gpu[i] != in->gpu[j])
        return in->gpu[i] < in->gpu[j] ? 1 : -1;
    if (in->cpu && in->cpu[i] != in->cpu[j])
        return in->cpu[i] < in->cpu[j] ? 1 : -1;
    return i - j; /* deterministic */
}

static int64_t val(const int64_t *v, int i)
{
    return v ? v[i] : 0;
}

static int fits(const part_state *s, int r, int i, int out)
{
    const dh__part_in *in = s->in;
    int64_t t = s->tokens[r] + val(in->tokens, i) - (out >= 0 ? val(in->tokens, out) : 0);
    int64_t b = s->bytes[r] + val(in->bytes, i) - (out >= 0 ? val(in->bytes, out) : 0);
    return (!in->cap_tokens || t <= in->cap_tokens) && (!in->cap_bytes || b <= in->cap_bytes);
}

static void place(part_state *s, int i, int r, int sign)
{
    const dh__part_in *in = s->in;
    s->gpu[r] += sign * in->gpu[i];
    s->cpu[r] += sign * (in->cpu ? in->cpu[i] : 0);
    s->tokens[r] += sign * val(in->tokens, i);
    s->bytes[r] += sign * val(in->bytes, i);
    if (sign > 0)
        s->rank_of[i] = r;
}

static int lpt(part_state *s, const int *order, dh__part_out *out)
{
    const dh__part_in *in = s->in;
    for (int k = 0; k < in->n; k++) {
        int i = order[k], best = -1;
        for (int r = 0; r < in->ranks; r++) {
            if (!fits(s, r, i, -1))
                continue;
            if (best < 0 || s->gpu[r] < s->gpu[best] - EPS ||
                (s->gpu[r] <= s->gpu[best] + EPS && s->cpu[r] < s->cpu[best]))
                best = r;
        }
        if (best < 0) { /* caps cannot hold it anywhere: least loaded rank, counted */
            out->cap_violations++;
            best = 0;
            for (int r = 1; r < in->ranks; r++)
                if (s->gpu[r] < s->gpu[best])
                    best = r;
        }
        place(s, i, best, +1);
    }
    return 0;
}

/* Indices of the k least loaded ranks other than skip, ascending by load. */
static int least_loaded(const part_state *s, int skip, int *out, int k)
{
    int m = 0;
    for (int r = 0; r < s->in->ranks; r++) {
        if (r == skip)
            continue;
        int pos = m < k ? m++ : k;
        if (pos == k && s->gpu[r] >= s->gpu[out[k - 1]])
            continue;
        if (pos == k)
            pos = k - 1;
        while (pos > 0 && s->gpu[out[pos - 1]] > s->gpu[r]) {
            out[pos] = out[pos - 1];
            pos--;
        }
        out[pos] = r;
    }
    return m;
}

/*
 * One refinement round on the most loaded rank: the best move or swap with a
 * lightly loaded partner. members holds the n samples grouped by rank
 * (scratch). Returns 1 if the pair's maximum went down.
 */
static int refine_round(part_state *s, int top, int *members)
{
    const dh__part_in *in = s->in;
    int partners[REFINE_PARTNERS], start[REFINE_PARTNERS + 2], fill[REFINE_PARTNERS + 1];
    int np = least_loaded(s, top, partners, REFINE_PARTNERS);
    /* Group the samples of top (slot np) and of each partner (slots 0..np-1). */
    for (int p = 0; p < np; p++)
        s->slot[partners[p]] = p;
    s->slot[top] = np;
    memset(fill, 0, sizeof fill);
    for (int i = 0; i < in->n; i++)
        if (s->slot[s->rank_of[i]] >= 0)
            fill[s->slot[s->rank_of[i]]]++;
    start[0] = 0;
    for (int p = 0; p <= np; p++)
        start[p + 1] = start[p] + fill[p];
    memcpy(fill, start, sizeof fill);
    for (int i = 0; i < in->n; i++)
        if (s->slot[s->rank_of[i]] >= 0)
            members[fill[s->slot[s->rank_of[i]]]++] = i;
    for (int p = 0; p < np; p++)
        s->slot[partners[p]] = -1;
    s->slot[top] = -1;

    double best = s->gpu[top] - EPS;
    int bi = -1, bj = -1, br = -1;
    for (int p = 0; p < np; p++) {
        int r = partners[p];
        for (int a = start[np]; a < start[np + 1]; a++) {
            int i = members[a];
            double gi = in->gpu[i];
            if (fits(s, r, i, -1)) { /* move i: top -> r */
                double m = DH_MAX(s->gpu[top] - gi, s->gpu[r] + gi);
                if (m < best)
                    best = m, bi = i, bj = -1, br = r;
            }
            for (int b = start[p]; b < start[p + 1]; b++) { /* swap i with j of r */
                int j = members[b];
                if (in->gpu[j] >= gi || !fits(s, r, i, j))
                    continue;
                double d = gi - in->gpu[j];
                double m = DH_MAX(s->gpu[top] - d, s->gpu[r] + d);
                if (m < best)
                    best = m, bi = i, bj = j, br = r;
            }
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
    return 1;
}

static void refine(part_state *s, dh__part_out *out)
{
    const dh__part_in *in = s->in;
    int *members = malloc((size_t)(in->n ? in->n : 1) * sizeof *members);
    s->slot = malloc((size_t)in->ranks * sizeof *s->slot);
    if (members && s->slot) { /* without memory LPT alone is still a valid placement */
        for (int r = 0; r < in->ranks; r++)
            s->slot[r] = -1;
        for (int round = 0; round < 4 * in->n + 16; round++) {
            int top = 0;
            for (int r = 1; r < in->ranks; r++)
                if (s->gpu[r] > s->gpu[top])
                    top = r;
            if (!refine_round(s, top, members))
                break;
            out->moves++;
        }
    }
    free(members);
    free(s->slot);
}

int dh__partition(const dh__part_in *in, int32_t *rank_of, dh__part_out *out)
{
    if (!in || !rank_of || !out || in->ranks < 1 || in->n < 0 || !in->gpu)
        return DH_EINVAL;
    memset(out, 0, sizeof *out);
    size_t R = (size_t)in->ranks;
    part_state s = {.in = in, .rank_of = rank_of};
    s.gpu = calloc(R, sizeof *s.gpu);
    s.cpu = calloc(R, sizeof *s.cpu);
    s.tokens = calloc(R, sizeof *s.tokens);
    s.bytes = calloc(R, sizeof *s.bytes);
    int *order = malloc((size_t)(in->n ? in->n : 1) * sizeof *order);
    int rc = 0;
    if (!s.gpu || !s.cpu || !s.tokens || !s.bytes || !order) {
        rc = DH_ENOMEM;
        goto done;
    }
    for (int i = 0; i < in->n; i++)
        order[i] = i;
    qsort_r(order, (size_t)in->n, sizeof *order, by_gpu_desc, (void *)in);
    lpt(&s, order, out);
    refine(&s, out);
    double total = 0;
    for (size_t r = 0; r < R; r++) {
        total += s.gpu[r];
        out->max_gpu = DH_MAX(out->max_gpu, s.gpu[r]);
    }
    out->mean_gpu = total / (double)R;
done:
    free(s.gpu);
    free(s.cpu);
    free(s.tokens);
    free(s.bytes);
    free(order);
    return rc;
}
