/*
 * planning.c - drawing and placing the steps of the scheduler (sched.c), and
 * the first failure it keeps. A leaf of the scheduler's rooms: sched.c,
 * baseline.c and rebalance.c call it; it calls only state.c and the
 * partitioner.
 *
 * DESIGN
 * - Steps are planned lazily, in order, when their first batch enters the
 *   window, so placement uses the calibration learnt so far. The order
 *   source gives each step's G samples as it is planned (the sampler rolls
 *   from epoch to epoch); balanced placement partitions them with
 *   dh__partition(), stride placement deals sample k to rank k % R.
 * - Several nodes of several ranks: balanced placement deals the step's
 *   samples to nodes by classes of GPU cost, each node one of every run of N
 *   of them heaviest first, at a rotation drawn per run (deal_to_nodes), so
 *   every node's share weighs about the same, and partitions each share
 *   over its node's own ranks (place_share: LPT over the share's samples
 *   alone). A node's placement then depends on its share alone, so a replica
 *   (node_local) partitions only its own node's share and deals the others
 *   round-robin over their ranks until it plans moves with them
 *   (dh__sched_settle places a node's share with place_share too, as that
 *   node did): the others' ranks are then right as to node, and what a
 *   replica's deadlines read of them is near (docs/MULTINODE.md). One
 *   partition over every rank gave the heaviest
 *   samples (heavy in CPU too) to the lowest ranks' nodes step after step,
 *   whose workers then ran late, and contiguous slices of the draw could be
 *   heavy, which only moves between nodes mended (bench/RESULTS.md). Nodes of
 *   one rank keep one partition over every rank:
 *   a share of one rank is placed by nobody (omni-mix, 16 nodes of 1 rank:
 *   0.892 -> 0.809 with shares).
 * - Errors: an allocation or order-source failure is kept (s->error) and
 *   returned by every later call, so an engine stops instead of waiting for
 *   work that will never come.
 */
#include "sched_int.h"

#include "../plan/plan.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int dh__sched_fail(dh__sched *s, int rc)
{
    if (!s->error)
        s->error = rc;
    return s->error;
}

/* ---------------------------------------------------------------- planning */

/* Counts the sample at slot a in its batch's task count, done count, bytes and predicted GPU
 * (regrouping adds a batch's samples in ascending position, so its sums are the same). */
static inline void batch_add(const dh__sched *s, batch_rec *br, int64_t a)
{
    br->ntasks++;
    br->ndone += s->done[a];
    br->bytes += s->slot_bytes[a];
    br->pred_gpu_raw += s->slot_gpu[a];
}

/* Where each node's block of step st's members starts, from its first rank's batch (after a
 * walk of the step wrote every batch's). */
static void set_node_mem(dh__sched *s, int64_t st)
{
    int32_t *mem = s->node_mem + step_slot(s, st) * s->nodes;
    for (int node = 0; s->nodes > 1 && node < s->nodes; node++)
        mem[node] = batch_of(s, st, node * s->ranks_per_node)->first;
}

/*
 * Groups step st's positions by rank (members) and recomputes each batch's
 * task count, done count, bytes and predicted GPU time from rank_of; called
 * after planning and after a rebalancing plan moved samples.
 */
static void regroup(dh__sched *s, int64_t st, int fresh)
{
    int64_t G = s->G, base = step_slot(s, st) * G;
    const int32_t *rank_of = s->rank_of + base;
    batch_rec *b = batch_of(s, st, 0);
    if (fresh) /* a step just planned: every field of its records starts at 0 */
        memset(b, 0, (size_t)s->R * sizeof *b);
    else
        for (int r = 0; r < s->R; r++)
            b[r].ntasks = b[r].ndone = 0, b[r].bytes = 0, b[r].pred_gpu_raw = 0;
    if (!rows_lazy(s))
        for (int64_t k = 0; k < G; k++)
            batch_add(s, &b[rank_of[k]], base + k);
    else /* a replica sums only the batches of the nodes it settled (group_node) */
        for (int64_t k = 0; k < G; k++)
            if (batch_settled(s, st, rank_of[k]))
                batch_add(s, &b[rank_of[k]], base + k);
            else
                b[rank_of[k]].ntasks++;
    int32_t off = 0;
    for (int r = 0; r < s->R; r++) {
        b[r].first = off;
        off += b[r].ntasks;
    }
    set_node_mem(s, st);
    int32_t *fill = s->plan_fill;
    memset(fill, 0, (size_t)s->R * sizeof *fill);
    for (int64_t k = 0; k < G; k++) /* positions grouped by rank, in batch order */
        s->members[base + b[rank_of[k]].first + fill[rank_of[k]]++] = st * G + k;
}

void dh__sched_regroup(dh__sched *s, int64_t st)
{
    regroup(s, st, 0);
}

int dh__sched_by_position(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/*
 * regroup(s, st, 0) after plans that moved samples only between the marked
 * ranks: the other ranks' members and sums are what a walk of the step would
 * give again (their samples did not change), and the members before the
 * first marked rank's block and after the last one's stay where they are (the
 * moves keep the marked ranks' total). So only the marked ranks' samples are
 * gathered, sorted by position and summed in that order (as regroup sums
 * them), and the members between the first and the last marked rank are
 * rewritten. A plan over a group of 4 nodes marks at most 32 of 8,192 ranks;
 * regroup's walk of the step was a ninth of a replica's time at 1,024 nodes.
 */
void dh__sched_regroup_moved(dh__sched *s, int64_t st)
{
    int n = s->nmoved, R = s->R;
    int32_t *list = s->moved_list;
    const uint8_t *settled = s->settled + step_slot(s, st) * s->nodes;
    for (int i = 0; i < n; i++)
        if (!settled[node_of_rank(s, list[i])]) { /* a replica moves only the samples of
                                                   * nodes it settled: it keeps no batch of
                                                   * the others to move them in */
            dh__sched_fail(s, DH_EMISMATCH);
            n = 0;
        }
    if (n > 0 && n <= R / 4) {
        int64_t G = s->G, base = step_slot(s, st) * G, step0 = st * G;
        batch_rec *b = batch_of(s, st, 0);
        int64_t *mem = s->members + base, *out = s->moved_mem;
        int32_t *pos = s->moved_pos, m = 0;
        qsort(list, (size_t)n, sizeof *list, dh__sched_by_position);
        for (int i = 0; i < n; i++) {
            batch_rec *br = &b[list[i]];
            for (int32_t j = 0; j < br->ntasks; j++)
                pos[m++] = (int32_t)(mem[br->first + j] - step0);
            br->ntasks = br->ndone = 0, br->bytes = 0, br->pred_gpu_raw = 0;
        }
        qsort(pos, (size_t)m, sizeof *pos, dh__sched_by_position);
        for (int32_t j = 0; j < m; j++)
            batch_add(s, &b[s->rank_of[base + pos[j]]], base + pos[j]);
        /* the span's new layout into out: an unmarked rank's block as it was, a marked
         * one's samples by position (cur: each marked rank's next place; planning's scratch,
         * free here); a node a replica has not settled, whose members and batches it does
         * not write, only moves its block's start (node_mem) */
        int per = s->ranks_per_node;
        int32_t lo = b[list[0]].first, at = lo, *cur = s->plan_fill;
        int32_t *nmem = s->node_mem + step_slot(s, st) * s->nodes;
        const int32_t *end = s->node_end + step_slot(s, st) * (s->nodes + 1);
        for (int r = list[0]; r <= list[n - 1]; r++) {
            int node = node_of_rank(s, r);
            if (!settled[node]) { /* entered at its first rank: its whole share, as dealt */
                nmem[node] = at;
                at += end[node + 1] - end[node];
                r = (node + 1) * per - 1;
                continue;
            }
            if (r == node * per)
                nmem[node] = at;
            if (!s->moved[r])
                memcpy(out + (at - lo), mem + b[r].first, (size_t)b[r].ntasks * sizeof *out);
            b[r].first = cur[r] = at;
            at += b[r].ntasks;
        }
        for (int32_t j = 0; j < m; j++)
            out[cur[s->rank_of[base + pos[j]]]++ - lo] = step0 + pos[j];
        /* back into members: the span's runs of settled nodes, each run's blocks at once
         * (the whole span when every node is settled) */
        int last = node_of_rank(s, list[n - 1]);
        for (int node = node_of_rank(s, list[0]); node <= last;) {
            int first = node;
            while (node <= last && settled[node])
                node++;
            if (node == first) {
                node++;
                continue;
            }
            int r0 = DH_MAX(first * per, list[0]), r1 = DH_MIN(node * per - 1, list[n - 1]);
            memcpy(mem + b[r0].first, out + (b[r0].first - lo),
                   (size_t)(b[r1].first + b[r1].ntasks - b[r0].first) * sizeof *out);
        }
    } else if (n > 0) {
        regroup(s, st, 0);
    }
    for (int i = 0; i < s->nmoved; i++)
        s->moved[list[i]] = 0;
    s->nmoved = 0;
}

#define GATHER_AHEAD 16 /* samples */

/*
 * Reads the rows of step st's samples at positions pos[0, n) (NULL: the
 * step's first n) into the step's slots: the CPU prediction (unless the
 * order source drew it), the predicted GPU cost, bytes and class. Each row
 * is a random read in the dataset's table, independent of the others, so it
 * is issued ahead of its use. A replica (rows_lazy) reads only the rows of
 * the nodes it settles, when it settles them.
 */
static void gather_rows(dh__sched *s, int64_t st, const int32_t *pos, int64_t n)
{
    int64_t base = step_slot(s, st) * s->G;
    const int64_t *idx = s->order + base;
    const dh__sample_row *rows = s->cfg.pred.row;
    for (int64_t i = 0; i < n; i++) {
        if (i + GATHER_AHEAD < n)
            __builtin_prefetch(&rows[idx[pos ? pos[i + GATHER_AHEAD] : i + GATHER_AHEAD]]);
        int64_t k = pos ? pos[i] : i, a = base + k;
        const dh__sample_row *row = &rows[idx[k]];
        if (!s->cfg.order_cpu)
            s->task_pred[a] = row->cpu_pred;
        s->slot_gpu[a] = sample_gpu(s, idx[k]);
        s->slot_bytes[a] = row->bytes;
        s->slot_cls[a] = (uint8_t)row->cls;
    }
}

/* Partitions n samples (the arrays given, contiguous) over `ranks` ranks into out. */
static int partition_block(dh__sched *s, int n, int ranks, const double *gpu, const double *cpu,
                           const int64_t *tokens, const int64_t *bytes, int32_t *out)
{
    dh__part_in in = {.n = n, .ranks = ranks, .gpu = gpu, .cpu = cpu, .tokens = tokens,
                      .bytes = bytes, .cap_tokens = s->cfg.rank_token_cap,
                      .cap_bytes = s->cfg.rank_byte_cap, .ws = &s->part_ws};
    dh__part_out po;
    int rc = dh__partition(&in, out, &po);
    s->cap_violations += rc ? 0 : po.cap_violations;
    return rc;
}

/* Each class's calibrated CPU per predicted second, as placement reads it (a replica: the
 * start's, so every node computes the same). */
static void placement_scale(const dh__sched *s, double one[DH_CLS_COUNT])
{
    for (int c = 0; c < DH_CLS_COUNT; c++)
        one[c] = dh__calib_cpu(s->cfg.node_local ? &s->plan_calib : &s->calib, c, 1.0);
}

/* A hint: the token count placement_input will read for slot a, a random read in the
 * dataset's table (most of a replica's deal, and of a 16,384-rank plan's inputs). */
static inline void prefetch_tokens(const dh__sched *s, int64_t a)
{
    if (s->cfg.pred.tokens)
        __builtin_prefetch(&s->cfg.pred.tokens[s->order[a]]);
}

/* What placement reads of the sample at slot a, into element k of the arrays given. */
static void placement_input(const dh__sched *s, const double *one, int64_t a, double *gpu,
                            double *cpu, int64_t *tokens, int64_t *bytes, int64_t k)
{
    gpu[k] = s->slot_gpu[a];
    cpu[k] = s->task_pred[a] * one[s->slot_cls[a]];
    tokens[k] = s->cfg.pred.tokens ? s->cfg.pred.tokens[s->order[a]] : 0;
    bytes[k] = s->slot_bytes[a];
}

/*
 * Places a node's share of step st, its samples at positions pos[0, n) of
 * the step (ascending), over the node's ranks, as every replica places it:
 * LPT's order over these samples alone (ties: position), then the node's own
 * partition. Writes rank_of and orig_rank. count_caps: the share's samples
 * no rank could take within the caps count as the run's (the node placing
 * its own share; a replica settling another's does not count them again).
 */
static int place_share(dh__sched *s, int64_t st, int node, const int32_t *pos, int n,
                       int count_caps)
{
    int per = s->ranks_per_node;
    int64_t base = step_slot(s, st) * s->G;
    double one[DH_CLS_COUNT];
    placement_scale(s, one);
    for (int i = 0; i < n; i++) {
        if (i + GATHER_AHEAD < n)
            prefetch_tokens(s, base + pos[i + GATHER_AHEAD]);
        placement_input(s, one, base + pos[i], s->share_gpu, s->share_cpu, s->plan_tokens,
                        s->plan_bytes, i);
    }
    dh__part_in in = {.n = n, .ranks = per, .gpu = s->share_gpu, .cpu = s->share_cpu,
                      .ws = &s->part_ws};
    int rc = dh__part_lpt_order(&in, s->share_ord);
    for (int j = 0; !rc && j < n; j++) {
        int i = s->share_ord[j];
        s->plan_gpu[j] = s->share_gpu[i];
        s->plan_cpu[j] = s->share_cpu[i];
        s->share_tokens[j] = s->plan_tokens[i];
        s->share_bytes[j] = s->plan_bytes[i];
    }
    int64_t violations = s->cap_violations;
    if (!rc)
        rc = partition_block(s, n, per, s->plan_gpu, s->plan_cpu, s->share_tokens,
                             s->share_bytes, s->share_rank);
    if (!count_caps)
        s->cap_violations = violations;
    if (rc)
        return rc;
    for (int j = 0; j < n; j++) {
        int64_t a = base + pos[s->share_ord[j]];
        s->rank_of[a] = s->orig_rank[a] = node * per + s->share_rank[j];
    }
    return 0;
}

/*
 * Groups a settled node's share of step st (its positions P[0, n), ascending,
 * its block of the step's node_pos; placed as the node placed it: rank_of)
 * into its ranks' batches, their members from place `at` on: its batch
 * records written whole (counts, bytes, predicted GPU, members; nothing of
 * it is done yet). Every sum is what regroup gives (the same additions in the
 * same order: each rank's samples in ascending position).
 * A node a replica has not settled is not grouped at all: none of its batch
 * records is written (their lines are never brought in; writing them, as
 * this did until 2026-12-07, was a replica's first write of 8,192 records a
 * step at 1,024 nodes), dh__sched_batch_samples reads its batches from
 * node_pos, and settling the node groups it here (only regroup's walk of the
 * whole step, after a plan marking more than a quarter of the ranks, writes
 * such a node's records, as dealt, and reads none of them).
 */
static void group_node(dh__sched *s, int64_t st, int node, const int32_t *P, int n, int32_t at)
{
    int per = s->ranks_per_node;
    int64_t G = s->G, base = step_slot(s, st) * G;
    const double *gpu = s->slot_gpu + base;
    batch_rec *nb = batch_of(s, st, node * per);
    const int32_t *rank_of = s->rank_of + base;
    int64_t *mem = s->members + base;
    /* the node's cursors, after the N ends of a deal (R = N x per >= N + per when N and per
     * are both at least 2, as a deal has them) */
    int32_t *fill = s->plan_fill + s->nodes;
    memset(nb, 0, (size_t)per * sizeof *nb);
    for (int j = 0; j < n; j++)
        nb[rank_of[P[j]] - node * per].ntasks++;
    for (int r = 0; r < per; r++) {
        nb[r].first = fill[r] = at;
        at += nb[r].ntasks;
    }
    for (int j = 0; j < n; j++) {
        batch_rec *br = &nb[rank_of[P[j]] - node * per];
        br->bytes += s->slot_bytes[base + P[j]];
        br->pred_gpu_raw += gpu[P[j]];
        mem[fill[br - nb]++] = st * G + P[j];
    }
}

/* A node's samples of step st at positions P[0, n) not prepared, nor their exact costs
 * known: where a replica keeps these flags only for the nodes it settled, written when it
 * settles them (for a whole step they are cleared at once: plan_step). */
static void clear_flags(dh__sched *s, int64_t st, const int32_t *P, int n)
{
    int64_t base = step_slot(s, st) * s->G;
    for (int j = 0; j < n; j++)
        s->done[base + P[j]] = 0, s->revealed[base + P[j]] = -1.0f;
}

/*
 * regroup(s, st, 1) for a step just dealt to nodes (place_balanced), node by
 * node (group_node), each node's positions its block of the step's node_pos,
 * ending at end[node]: members and the batch records are written in order;
 * regroup's walk of the step wrote both at random (about a fifth of a
 * replica's time at 1,024 nodes: bench/RESULTS.md). Each node's members start
 * where its positions do; a node a replica has not settled is not grouped.
 */
static void group_by_shares(dh__sched *s, int64_t st, const int32_t *end, const uint8_t *settled)
{
    int64_t base = step_slot(s, st) * s->G;
    int32_t *nmem = s->node_mem + step_slot(s, st) * s->nodes;
    for (int node = 0, lo = 0; node < s->nodes; lo = end[node++]) {
        nmem[node] = lo;
        if (settled[node])
            group_node(s, st, node, s->node_pos + base + lo, end[node] - lo, lo);
    }
}

#define DEAL_AHEAD 32 /* samples */

/* The heaviest half-octave counted (0: none above no cost). */
static int heaviest(const int32_t *hist)
{
    int top = DH_HALF_OCTAVES - 1;
    while (top > 0 && !hist[top])
        top--;
    return top;
}

/*
 * The step's G samples dealt to nodes by classes of GPU cost: sorted by class, heaviest
 * first (DEAL_CLASSES classes of half-octaves below the step's heaviest, as a stratified
 * order's: dh__cost_half_octave; zero costs and what is lighter in the last class; in step
 * order within a class), each run of N of that order gives one sample to every node, the
 * node taking place (node + rotation) mod N of it, the rotation drawn from (step, run).
 * Every node's share then weighs about the same in GPU and, with it, in CPU, and no node is
 * favoured. Node k's positions, ascending, go to pos[start[k - 1], start[k]) (start[k]: the
 * end of node k's block; start[-1] = 0), and each position's rank to rank_of as dealt
 * round-robin over its node's ranks (rank r of a node: its positions r, r + per, ...),
 * which placing the node's share replaces.
 * The snake it replaced (heaviest first, 0..N-1 then N-1..0, over two counting sorts of
 * 16,384 classes, GPU then CPU) read the same efficiency in the simulator and cost a replica
 * a fifth more at 1,024 nodes (bench/RESULTS.md, "The class-rotation deal"); this deal is
 * also what a node can compute from the step's classes alone. A replica (rows_lazy) reads
 * each sample's half-octave from its table (s->below), not the sample's row.
 */
static void deal_to_nodes(dh__sched *s, int64_t st, int64_t base, int32_t *pos,
                          int32_t *rank_of, int32_t *start)
{
    int N = s->nodes, G = (int)s->G, per = s->ranks_per_node;
    const int64_t *idx = s->order + base;
    uint16_t *u = s->deal_class;
    int32_t *hist = s->deal_hist, *turn = s->deal_turn;
    /* Each sample's key, a byte, and what class a key is (tb): a replica's byte of its table
     * (its half-octave below the dataset's heaviest, clipped), counted by byte in one pass
     * (the classes follow from the step's heaviest, which the counts give); else, and for a
     * step the table's bytes are too coarse for, the class itself, from the half-octave of
     * the sample's cost. */
    const uint8_t *key = s->deal_key;
    uint8_t tb[256];
    int top = 0, from_rows = !s->below;
    memset(hist, 0, DH_HALF_OCTAVES * sizeof *hist);
    if (s->below) { /* a replica: from its table, a byte a sample */
        if (s->drawn_below) /* carried by the order with the step's draw, in order */
            key = s->drawn_below;
        else /* a read at random a sample: issued ahead */
            for (int k = 0; k < G; k++) {
                if (k + DEAL_AHEAD < G)
                    __builtin_prefetch(&s->below[idx[k + DEAL_AHEAD]]);
                s->deal_key[k] = s->below[idx[k]];
            }
#ifndef NDEBUG
        for (int k = 0; k < G; k++)
            assert(key[k] == s->below[idx[k]]);
#endif
        /* counted by byte four ways, unrolled (one count's chain of increments was the
         * pass's time; a sample's half-octave written out beside it, a fifth of it) */
        int32_t four[4][BELOW_CLIP + 1];
        memset(four, 0, sizeof four);
        int k = 0;
        for (; k + 4 <= G; k += 4) {
            four[0][key[k]]++;
            four[1][key[k + 1]]++;
            four[2][key[k + 2]]++;
            four[3][key[k + 3]]++;
        }
        for (; k < G; k++)
            four[0][key[k]]++;
        for (int b = 0; b <= BELOW_CLIP; b++)
            hist[s->half_of[b]] += four[0][b] + four[1][b] + four[2][b] + four[3][b];
        top = heaviest(hist);
        /* A cost the table clipped (BELOW_CLIP half-octaves or more below the dataset's
         * heaviest, or none) stands for the heaviest it may be: exact while that falls in
         * the last class, that is while the step's heaviest is at most BELOW_CLIP -
         * (DEAL_CLASSES - 1) below the dataset's. A step lighter than that reads its rows. */
        from_rows = top && s->half_top - top > BELOW_CLIP - (DEAL_CLASSES - 1);
        if (from_rows) {
            gather_rows(s, st, NULL, G);
            memset(hist, 0, DH_HALF_OCTAVES * sizeof *hist);
        }
    }
    if (from_rows) {
        for (int k = 0; k < G; k++)
            hist[u[k] = (uint16_t)dh__cost_half_octave(s->slot_gpu[base + k])]++;
        top = heaviest(hist);
    }
    /* Sorted by class, heaviest first (stably), sample k's place in the deal's order is its
     * class's next; that place's run and place in the run give its node (place j of run r:
     * node (j - rotation(r)) mod N), so a pass in step order deals each sample without
     * laying the sorted order out (it was scattered, then each run written back at random:
     * bench/RESULTS.md "The deal without its sorted order"). cls: each half-octave's class
     * (the last: what is lighter, and no cost). */
    uint8_t cls[DH_HALF_OCTAVES]; /* (no sample's is above top) */
    for (int h = 0; h <= top; h++)
        cls[h] = (uint8_t)dh__cost_class((uint64_t)h, (uint64_t)top, DEAL_CLASSES);
    if (from_rows) { /* the key is the class */
        for (int k = 0; k < G; k++)
            s->deal_key[k] = cls[u[k]];
        key = s->deal_key;
        for (int c = 0; c < DEAL_CLASSES; c++)
            tb[c] = (uint8_t)c;
    } else /* a byte's class (a byte whose half-octave is above top is in no sample) */
        for (int b = 0; b <= BELOW_CLIP; b++)
            tb[b] = s->half_of[b] <= top ? cls[s->half_of[b]] : 0;
    int32_t run[DEAL_CLASSES], place[DEAL_CLASSES], n = 0;
    for (int c = 0; c < DEAL_CLASSES; c++) { /* where each class starts: its run and place */
        run[c] = n / N, place[c] = n % N;
        n += c < DEAL_CLASSES - 1 ? (top - c >= 1 ? hist[top - c] : 0) : 0;
    }
    int *rot = s->share_ord; /* each run's rotation (G >= the runs) */
    int runs = (G + N - 1) / N;
    for (int r = 0; r < runs; r++)
        rot[r] = (int)(dh__mix64(((uint64_t)st << 32) + (uint64_t)r + 0x9e3779b97f4a7c15ULL) %
                       (uint64_t)N);
    /* each node's count: one of every full run, and of the last run's places if short */
    for (int node = 0; node < N; node++)
        start[node] = G / N;
    for (int j = 0, m = G % N; j < m; j++) {
        int node = j - rot[runs - 1];
        start[node < 0 ? node + N : node]++;
    }
    for (int node = 0, a = 0; node < N; node++) { /* counts to where each block starts */
        int c = start[node];
        start[node] = a;
        a += c;
    }
    for (int k = 0; k < G; k++) { /* each sample's node, in rank_of for the pass below (one
                                   * pass doing both ran a third slower) */
        int c = tb[key[k]], j = place[c], node = j - rot[run[c]];
        node += node < 0 ? N : 0;
        if (++j == N)
            j = 0, run[c]++;
        place[c] = j;
        rank_of[k] = node;
    }
    memset(turn, 0, (size_t)N * sizeof *turn);
    for (int k = 0; k < G; k++) { /* each node's positions, ascending (start[] becomes ends),
                                   * and their ranks round-robin */
        int node = rank_of[k];
        pos[start[node]++] = k;
        rank_of[k] = node * per + turn[node];
        turn[node] = turn[node] + 1 == per ? 0 : turn[node] + 1;
    }
}

/* Places step st's samples (rank_of); 1 when it grouped them by rank too (group_by_shares),
 * 0 when the caller must (regroup), or an error. */
static int place_balanced(dh__sched *s, int64_t st, int32_t *rank_of)
{
    int64_t base = step_slot(s, st) * s->G;
    if (s->nodes == 1 || s->ranks_per_node == 1) { /* one partition over every rank */
        double one[DH_CLS_COUNT];
        placement_scale(s, one); /* once a plan */
        for (int64_t k = 0; k < s->G; k++) {
            if (k + GATHER_AHEAD < s->G)
                prefetch_tokens(s, base + k + GATHER_AHEAD);
            placement_input(s, one, base + k, s->plan_gpu, s->plan_cpu, s->plan_tokens,
                            s->plan_bytes, k);
        }
        return partition_block(s, (int)s->G, s->R, s->plan_gpu, s->plan_cpu, s->plan_tokens,
                               s->plan_bytes, rank_of);
    }
    /* Several nodes of several ranks: the step's samples are dealt to nodes by classes of
     * cost, each node one of every run of N of them (deal_to_nodes; a stratified order comes
     * dealt so), so every node's share weighs about the same; each node's ranks then
     * partition its share among themselves. */
    int N = s->nodes, G = (int)s->G, per = s->ranks_per_node;
    int32_t *pos = s->node_pos + base; /* kept with the step (dh__sched_node_positions) */
    int32_t *start = s->plan_fill; /* R >= N: each node's block of pos */
    if (s->cfg.order_by_node) { /* the order's layout is the deal: node k's block k */
        for (int k = 0; k < G; k++)
            pos[k] = k;
        for (int node = 0; node < N; node++)
            start[node] = (int32_t)((int64_t)(node + 1) * G / N);
    } else
        deal_to_nodes(s, st, base, pos, rank_of, start);
    int32_t *end = s->node_end + step_slot(s, st) * (N + 1);
    end[0] = 0;
    memcpy(end + 1, start, (size_t)N * sizeof *end);
    uint8_t *settled = s->settled + step_slot(s, st) * N;
    for (int node = 0; node < N; node++) {
        int lo = node ? start[node - 1] : 0, hi = start[node];
        settled[node] = !s->cfg.node_local || node == s->cfg.node;
        if (!settled[node]) { /* another node's: dealt round-robin for now (the deal did) */
            for (int a = lo; s->cfg.order_by_node && a < hi; a += per)
                for (int r = 0, n = DH_MIN(per, hi - a); r < n; r++)
                    rank_of[pos[a + r]] = node * per + r;
            continue;
        }
        if (rows_lazy(s)) /* a replica reads the rows of the nodes it settles */
            gather_rows(s, st, pos + lo, hi - lo);
        int rc = place_share(s, st, node, pos + lo, hi - lo, 1);
        if (rc)
            return rc;
    }
    group_by_shares(s, st, start, settled);
    return 1;
}

void dh__sched_gather_unsettled(dh__sched *s, int64_t st)
{
    const uint8_t *settled = s->settled + step_slot(s, st) * s->nodes;
    for (int node = 0; node < s->nodes; node++) {
        int32_t n = 0;
        const int32_t *pos = dh__sched_node_positions(s, st, node, &n);
        if (pos && !settled[node])
            gather_rows(s, st, pos, n);
    }
}

int dh__sched_settle(dh__sched *s, int64_t st, int node)
{
    uint8_t *settled = s->settled + step_slot(s, st) * s->nodes + node;
    if (s->error) /* a kept failure, as every later call returns it */
        return s->error;
    if (*settled)
        return 0;
    /* An unsettled node's samples are its share as dealt (a replica settles a node before it
     * plans moves with it, and moves no sample of a node it has not settled:
     * dh__sched_regroup_moved): its block of node_pos, ascending */
    int32_t n = 0;
    const int32_t *pos = dh__sched_node_positions(s, st, node, &n);
    if (!pos) /* a step not dealt to nodes has no node to settle */
        return dh__sched_fail(s, DH_EMISMATCH);
    gather_rows(s, st, pos, n); /* its samples' rows, read only now (rows_lazy) */
    int rc = place_share(s, st, node, pos, n, 0); /* as the node placed it */
    if (rc)
        return dh__sched_fail(s, rc);
    /* The node's batches grouped alone, its flags and records written now: its samples
     * stayed on its ranks, so only they and its block of members change (a walk of the
     * whole step would rewrite every batch) */
    clear_flags(s, st, pos, n);
    group_node(s, st, node, pos, n, s->node_mem[step_slot(s, st) * s->nodes + node]);
    dh__lst_leads_stale(s, st);
    *settled = 1;
    return 1;
}

/* Draws step st's samples, places them, groups them by rank, fills its records. */
static int plan_step(dh__sched *s, int64_t st)
{
    int rc = dh__sched_ensure_room(s, st);
    if (rc)
        return rc;
    int64_t G = s->G, base = step_slot(s, st) * G;
    int64_t *idx = s->order + base;
    float *pred = s->task_pred + base;
    if ((rc = s->cfg.next_order(s->cfg.order_ctx, idx, s->cfg.order_cpu ? pred : NULL)))
        return rc;
    uint64_t outside = 0; /* one test a step, not a branch a sample */
    for (int64_t k = 0; k < G; k++)
        outside |= (uint64_t)idx[k] >= (uint64_t)s->cfg.pred.n;
    if (outside)
        return DH_ERANGE;
    /* the drawn samples' metadata, read once at random from the dataset's table (one row a
     * sample: gather_rows) and, when every task is queued here, its segments; least slack
     * reads the class and segments again at every pop, from the step's slots (a dependent
     * miss each from the table). A replica queues its own node's tasks alone and reads
     * their segments as it queues them (dh__lst_push), and reads the rows of the nodes it
     * settles alone, once they are dealt (rows_lazy: the deal reads s->below). */
    if (!rows_lazy(s))
        gather_rows(s, st, NULL, G);
#ifndef NDEBUG
    else /* a debug build: a read of a row not gathered is a NaN or a negative size */
        for (int64_t k = 0; k < G; k++) {
            s->slot_gpu[base + k] = NAN, s->slot_bytes[base + k] = -1;
            if (!s->cfg.order_cpu)
                pred[k] = NAN;
        }
#endif
    const int32_t *segs = s->cfg.pred.segments;
    for (int64_t k = 0; !s->cfg.node_local && k < G; k++) { /* a pass apart: a replica's
                                                          * gather above stays as it was */
        if (segs && k + GATHER_AHEAD < G)
            __builtin_prefetch(&segs[idx[k + GATHER_AHEAD]]);
        s->slot_segs[base + k] = segs ? segs[idx[k]] : 1;
    }
    int32_t *rank_of = s->rank_of + base;
    memset(s->settled + step_slot(s, st) * s->nodes, 1, (size_t)s->nodes);
    if (s->caps->placement == DH_PLACE_BALANCED)
        rc = place_balanced(s, st, rank_of);
    else
        dh__partition_stride((int)G, s->R, rank_of);
    if (rc < 0)
        return rc;
    int grouped = rc;
    if (!grouped) /* a deal wrote each settled node's (place_share); a replica's others are
                   * written when it settles them */
        memcpy(s->orig_rank + base, rank_of, (size_t)G * sizeof *rank_of);
    const uint8_t *settled = s->settled + step_slot(s, st) * s->nodes;
    if (rows_lazy(s)) { /* a replica: the flags of the nodes it settled (the rest when it
                         * settles them: dh__sched_settle) */
#ifndef NDEBUG /* a debug build: a read of another node's flag is a NaN or a count of 64 */
        memset(s->done + base, 64, (size_t)G * sizeof *s->done);
        for (int64_t k = 0; k < G; k++)
            s->revealed[base + k] = NAN;
#endif
        const int32_t *end = s->node_end + step_slot(s, st) * (s->nodes + 1);
        for (int node = 0; node < s->nodes; node++) /* (a replica's step is always dealt) */
            if (settled[node])
                clear_flags(s, st, s->node_pos + base + end[node], end[node + 1] - end[node]);
    } else {
        memset(s->done + base, 0, (size_t)G * sizeof *s->done);
        for (int64_t k = 0; k < G; k++)
            s->revealed[base + k] = -1.0f;
    }
    s->finished_ranks[step_slot(s, st)] = 0;
    memset(s->rank_finished + step_slot(s, st) * s->R, 0, (size_t)s->R);
    for (int j = 0; j < DH_MOVE_GROUP; j++)
        s->group[step_slot(s, st) * DH_MOVE_GROUP + j] = -1;
    if (!grouped)
        regroup(s, st, 1);
    dh__lst_leads_stale(s, st);
    /* The step's predicted start: its slowest rank's predicted GPU. A replica has placed only
     * its own node's batches by now, whose slowest rank it takes for the step's (the deal
     * makes every node's share weigh about the same; the other nodes' batches, which it
     * has not written, are not read). */
    const batch_rec *b = batch_of(s, st, 0);
    double step_gpu = 0;
    for (int r = 0; !rows_lazy(s) && r < s->R; r++)
        step_gpu = DH_MAX(step_gpu, b[r].pred_gpu_raw);
    for (int node = 0, per = s->ranks_per_node; rows_lazy(s) && node < s->nodes; node++)
        for (int r = node * per; settled[node] && r < (node + 1) * per; r++)
            step_gpu = DH_MAX(step_gpu, b[r].pred_gpu_raw);
    s->step_start[step_slot(s, st + 1)] = D(s, st) + dh__calib_gpu(&s->calib, s->cfg.gpu.c0 + step_gpu);
    s->planned = st + 1;
    return 0;
}

int dh__sched_ensure_planned(dh__sched *s, int64_t st)
{
    if (s->error)
        return s->error;
    while (s->planned <= st && s->planned < s->N) {
        int rc = plan_step(s, s->planned);
        if (rc)
            return dh__sched_fail(s, rc);
    }
    return 0;
}
