/*
 * rebalance.c - cost-gated collective rebalancing (mechanism 4, GPU
 * residual skew): once samples are prepared their exact GPU cost is known,
 * and a step's prepared samples may move between its ranks as one plan,
 * only when the plan's predicted gain beats its transfer cost.
 *
 * DESIGN: prepared samples have exact costs (revealed); the others stay
 * where they are and weigh their predicted cost, and so does every sample of
 * a frozen rank (the engine is still writing into its batch). The planner
 * improves the current placement of the movable samples over the open
 * ranks, on top of those fixed loads (only moves that lower the step's
 * maximum), and the whole plan is applied if its gain beats its cost: the
 * most bytes any rank receives over the move bandwidth (the network's
 * between nodes), plus latency, times the measured/modelled factor, times
 * 1 + 4 x the GPU prediction error (noisier estimates move less). A plan
 * that would put a receiving rank over a per-rank cap, or that the engine's
 * accept callback turns down, is refused. Every candidate move is counted
 * as moved, gated or refused.
 *
 * Several nodes of several ranks plan by groups of DH_MOVE_GROUP nodes
 * (docs/MULTINODE.md): from every node's load and slowest rank (O(G + R) a
 * step) the nodes are grouped so that the groups' loads are alike, and each
 * group plans the movable samples of its nodes over their open ranks alone.
 * Below the step's floor (the highest of the groups' lower bounds) no move
 * shortens the step; a group above it weighs what the step gains if every
 * group reaches its own plan. A replica (node_local) plans only its own
 * group: its cost no longer grows with the job's ranks; the simulator, which
 * is every node, plans every group. One node, and nodes of one rank, plan
 * one group over every rank, as before.
 */
#include "sched_int.h"

#include "../plan/plan.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Slowest rank of step st under a placement (G ranks), with exact costs where known. */
static double step_max(const dh__sched *s, int64_t st, const int32_t *rank_of, double *load)
{
    int64_t base = step_slot(s, st) * s->G;
    memset(load, 0, (size_t)s->R * sizeof *load);
    for (int64_t k = 0; k < s->G; k++) {
        int64_t p = base + k;
        double g = s->revealed[p] >= 0 ? s->revealed[p] : s->slot_gpu[p];
        load[rank_of[k]] += g;
    }
    double m = 0;
    for (int r = 0; r < s->R; r++)
        m = DH_MAX(m, load[r]);
    return m;
}

/* Several nodes of several ranks: moves are planned by groups of nodes. */
static int by_groups(const dh__sched *s)
{
    return s->nodes > 1 && s->ranks_per_node > 1;
}

/* Realised gain of a replica's group (nodes, -1 ended): its slowest rank before its moves
 * and after, exact costs. Its samples stayed within it, so they are its batches' members. */
static double group_gain(const dh__sched *s, int64_t st, const int32_t *nodes)
{
    int per = s->ranks_per_node, n = 0;
    while (n < DH_MOVE_GROUP && nodes[n] >= 0)
        n++;
    double *before = s->plan_gpu, *after = s->plan_cpu, b = 0, a = 0; /* n * per <= R each */
    for (int i = 0; i < n * per; i++)
        before[i] = after[i] = 0;
    for (int j = 0; j < n; j++)
        for (int r = nodes[j] * per; r < (nodes[j] + 1) * per; r++) {
            const batch_rec *br = batch_of(s, st, r);
            const int64_t *mem = s->members + step_slot(s, st) * s->G + br->first;
            for (int32_t m = 0; m < br->ntasks; m++) {
                int64_t p = at(s, mem[m]);
                double g = s->revealed[p] >= 0 ? s->revealed[p] : s->slot_gpu[p];
                int o = s->orig_rank[p], at_o = 0;
                while (at_o < n - 1 && nodes[at_o] != node_of_rank(s, o))
                    at_o++;
                before[at_o * per + o % per] += g;
                after[j * per + r % per] += g;
            }
        }
    for (int i = 0; i < n * per; i++) {
        b = DH_MAX(b, before[i]);
        a = DH_MAX(a, after[i]);
    }
    return b - a;
}

void dh__reb_step_finished(dh__sched *s, int64_t st)
{
    int64_t base = step_slot(s, st) * s->G;
    if (s->cfg.node_local && by_groups(s)) {
        /* A replica knows its own group's plan, counted by the group's lowest node (a sum over
         * nodes counts every group once); a step planned by nobody: every node its own. */
        const int32_t *group = s->group + step_slot(s, st) * DH_MOVE_GROUP;
        int32_t alone[DH_MOVE_GROUP];
        if (group[0] < 0) {
            for (int j = 0; j < DH_MOVE_GROUP; j++)
                alone[j] = j ? -1 : s->cfg.node;
            group = alone;
        }
        if (group[0] == s->cfg.node)
            s->reb.realised_gain_s += group_gain(s, st, group);
        return;
    }
    if (s->reb_quiet)
        return; /* agreed plans: another node counts what they gained */
    /* Realised gain: the step's slowest rank before and after its moves, exact costs. */
    s->reb.realised_gain_s += step_max(s, st, s->orig_rank + base, s->plan_gpu) -
                              step_max(s, st, s->rank_of + base, s->plan_gpu);
}

/* 1 when the plan keeps every rank that receives samples within the per-rank caps, 0 when
 * not, < 0 on an allocation failure. rank_of: the plan's ranks at the positions P[0, np) (a
 * group's plan: every sample of the group's ranks, the only ones that gain), or at every
 * position (P NULL). */
static int plan_within_caps(const dh__sched *s, int64_t st, const int32_t *rank_of,
                            const int32_t *P, int64_t np)
{
    if (!s->cfg.rank_token_cap && !s->cfg.rank_byte_cap)
        return 1;
    int64_t base = step_slot(s, st) * s->G;
    int64_t *tok = dh__calloc((size_t)s->R * 2, sizeof *tok);
    uint8_t *gains = dh__calloc((size_t)s->R, 1);
    if (!tok || !gains) {
        free(tok);
        free(gains);
        return DH_ENOMEM;
    }
    int ok = 1;
    int64_t *byt = tok + s->R;
    for (int64_t j = 0; ok && j < (P ? np : s->G); j++) {
        int64_t k = P ? P[j] : j;
        if (!batch_settled(s, st, s->rank_of[base + k]))
            continue; /* a node a replica has not settled: no plan of its moves reaches it */
        int64_t i = s->order[base + k];
        tok[rank_of[k]] += s->cfg.pred.tokens ? s->cfg.pred.tokens[i] : 0;
        byt[rank_of[k]] += s->slot_bytes[base + k];
        gains[rank_of[k]] |= rank_of[k] != s->rank_of[base + k];
    }
    for (int r = 0; ok && r < s->R; r++)
        if (gains[r] && ((s->cfg.rank_token_cap && tok[r] > s->cfg.rank_token_cap) ||
                         (s->cfg.rank_byte_cap && byt[r] > s->cfg.rank_byte_cap)))
            ok = 0;
    free(tok);
    free(gains);
    return ok;
}

/* The per-plan working set, carved from scratch allocated once per scheduler. */
typedef struct {
    int64_t n;                  /* movable samples */
    int open;                   /* ranks that may give or receive */
    int nranks;                 /* the ranks the plan is over (every rank, or a group's) */
    double *fixed, *mov_gpu;    /* per rank; per movable sample */
    int64_t *pos_of, *mov_bytes; /* per movable sample: k within the step, bytes */
    int32_t *start, *plan, *new_rank; /* per movable sample (start, plan); per k (new_rank) */
    int32_t *cidx, *rank_at;    /* rank -> open index (-1 frozen); open index -> rank */
    int32_t *ranks;             /* the plan's ranks */
    double *loads, *cfixed;     /* per rank; per open rank */
} reb_plan;

static void plan_scratch(dh__sched *s, reb_plan *p)
{
    int64_t G = s->G;
    int R = s->R;
    *p = (reb_plan){.fixed = s->plan_cpu, .mov_gpu = s->plan_gpu, .pos_of = s->plan_bytes,
                    .mov_bytes = s->plan_tokens, .start = s->reb_i32, .plan = s->reb_i32 + G,
                    .new_rank = s->reb_i32 + 2 * G, .cidx = s->reb_i32 + 3 * G,
                    .rank_at = s->reb_i32 + 3 * G + R, .ranks = s->reb_i32 + 3 * G + 2 * R,
                    .loads = s->reb_f64, .cfixed = s->reb_f64 + R};
}

/* The exact GPU cost of the sample at slot a if this scheduler saw it prepared, else -1. */
static double seen_prepared(const dh__sched *s, int64_t a)
{
    if (rows_lazy(s) && !s->settled[a / s->G * s->nodes + node_of_rank(s, s->rank_of[a])])
        return -1; /* a node a replica has not settled: none prepared here, its flags not
                    * written (planning.c, clear_flags) */
    return s->done[a] && s->revealed[a] >= 0 ? s->revealed[a] : -1;
}

/* What a plan may read: on one node the scheduler's own state; agreed between nodes, only
 * what every node was given alike (dh__reb_agreed). */
typedef struct {
    const uint8_t *frozen;
    const float *known; /* agreed: the exact costs every node was told (else NULL) */
    double gpu_mape, move_factor, net_factor;
    int need_admitted; /* every batch of the step admitted here (one node) */
    int count;         /* agreed over every rank: this node counts the plan */
    int other_groups;  /* a replica plans the other groups' moves, not its own (benchmarks) */
    /* agreed, by node (dh__reb_agreed): known is filled from these for the nodes planned */
    const float *(*costs_of)(const void *ctx, int node);
    const void *costs_ctx;
    int64_t ncost;
    const double *node_load; /* N, or NULL */
} reb_in;

/* known (s->reb_known) at node `node`'s positions of step st, from its list of costs (its
 * samples in the step's order, as far as in->ncost). */
static void known_of_node(dh__sched *s, int64_t st, const reb_in *in, int node)
{
    int32_t n = 0;
    const int32_t *P = dh__sched_node_positions(s, st, node, &n);
    const float *c = in->costs_of(in->costs_ctx, node);
    for (int32_t i = 0; i < n; i++)
        s->reb_known[P[i]] = i < in->ncost ? c[i] : -1;
}

/* known at every position of step st from the nodes' lists: by the deal's positions, or by
 * a walk of the step when it was not dealt (nodes of one rank). */
static void known_of_all(dh__sched *s, int64_t st, const reb_in *in)
{
    int32_t n;
    if (dh__sched_node_positions(s, st, 0, &n)) {
        for (int node = 0; node < s->nodes; node++)
            known_of_node(s, st, in, node);
        return;
    }
    int64_t base = step_slot(s, st) * s->G;
    int32_t *seen = s->reb_i32; /* per node: its samples met so far (the plan's start[],
                                 * written by the plan before it reads it) */
    memset(seen, 0, (size_t)s->nodes * sizeof *seen);
    for (int64_t k = 0; k < s->G; k++) {
        int node = node_of_rank(s, s->rank_of[base + k]);
        int32_t i = seen[node]++;
        s->reb_known[k] = i < in->ncost ? in->costs_of(in->costs_ctx, node)[i] : -1;
    }
}

/* The exact cost of the k-th sample of step st (at slot a) the plan may use, else < 0. */
static double exact_cost(const dh__sched *s, const reb_in *in, int64_t k, int64_t a)
{
    return in->known ? in->known[k] : seen_prepared(s, a);
}

static void take_sample(const dh__sched *s, const reb_in *in, reb_plan *p, int64_t base,
                        int64_t k)
{
    int64_t a = base + k;
    double exact = exact_cost(s, in, k, a);
    if (exact >= 0 && p->cidx[s->rank_of[a]] >= 0) {
        p->pos_of[p->n] = k;
        p->mov_gpu[p->n] = exact;
        p->mov_bytes[p->n] = s->slot_bytes[a];
        p->n++;
    } else {
        p->fixed[s->rank_of[a]] += exact >= 0 ? exact : s->slot_gpu[a];
    }
}

/* A sample another node prepared (slot a, its exact GPU cost as exchanged): the replica
 * learns it for the realised gain (a sample prepared here is known first-hand). */
static void learn(dh__sched *s, int64_t st, int64_t a, double cost)
{
    if (!(cost >= 0) || s->done[a] || rank_here(s, s->rank_of[a]))
        return;
    s->revealed[a] = (float)cost;
    s->done[a] = 1;
    batch_of(s, st, s->rank_of[a])->ndone++;
}

/* Splits the samples of step st on the plan's ranks (p->ranks) into movable (exact cost
 * known, on an open rank) and fixed loads. Over every rank in the step's order; over a
 * group's, rank by rank in batch order (each batch's members). */
static void collect_movable(dh__sched *s, int64_t st, const reb_in *in, reb_plan *p)
{
    int64_t base = step_slot(s, st) * s->G;
    p->n = p->open = 0;
    for (int i = 0; i < p->nranks; i++) {
        int r = p->ranks[i];
        p->fixed[r] = 0;
        p->cidx[r] = in->frozen && in->frozen[r] ? -1 : p->open;
        if (p->cidx[r] >= 0)
            p->rank_at[p->open++] = r;
    }
    /* agreed: the exchanged costs of the plan's samples are learnt (those of the other
     * groups are never read here) */
    if (p->nranks == s->R) {
        for (int64_t k = 0; k < s->G; k++) {
            if (in->known)
                learn(s, st, base + k, in->known[k]);
            take_sample(s, in, p, base, k);
        }
        return;
    }
    for (int i = 0; i < p->nranks; i++) {
        const batch_rec *b = batch_of(s, st, p->ranks[i]);
        const int64_t *mem = s->members + base + b->first;
        for (int32_t j = 0; j < b->ntasks; j++) {
            int64_t k = mem[j] - st * s->G;
            if (in->known)
                learn(s, st, base + k, in->known[k]);
            take_sample(s, in, p, base, k);
        }
    }
}

/* What a group's plan is gated against (one group over every rank: step_max < 0). */
typedef struct {
    double floor;    /* the highest of the groups' lower bounds: below it no move pays */
    double step_max; /* what the step takes before any group's moves (its most loaded node's
                      * load over its ranks: the same on every replica) */
} reb_target;

/*
 * Plans the movable samples over the open ranks: fills p->plan (open rank indices), *gain
 * (what the gate weighs) and *drop (the plan's slowest rank before - after). Over every rank
 * both are the step's slowest rank before - after. A group of nodes whose slowest rank is
 * above the floor and comes down weighs what the step gains if every such group reaches its
 * own: what the step takes before (t->step_max, or its own slowest rank if higher) - its own
 * after (or the floor), so the groups just above the floor move with the slowest one (each
 * weighing only its own drop, they stayed and set the step: t2v-diffusion lost 1% more).
 * 0 or an error.
 */
static int plan_moves(dh__sched *s, int64_t st, reb_plan *p, const reb_target *t, double *gain,
                      double *drop)
{
    int64_t base = step_slot(s, st) * s->G;
    double old_max = 0, frozen_max = 0;
    for (int i = 0; i < p->nranks; i++)
        p->loads[p->ranks[i]] = p->fixed[p->ranks[i]];
    for (int64_t i = 0; i < p->n; i++) {
        int r = s->rank_of[base + p->pos_of[i]];
        p->start[i] = p->cidx[r];
        p->loads[r] += p->mov_gpu[i];
    }
    for (int i = 0; i < p->nranks; i++) {
        int r = p->ranks[i];
        old_max = DH_MAX(old_max, p->loads[r]);
        if (p->cidx[r] < 0)
            frozen_max = DH_MAX(frozen_max, p->fixed[r]);
        else
            p->cfixed[p->cidx[r]] = p->fixed[r];
    }
    dh__part_in in = {.n = (int)p->n, .ranks = p->open, .gpu = p->mov_gpu,
                      .base_gpu = p->cfixed, .initial = p->start, .ws = &s->part_ws};
    dh__part_out po;
    int rc = dh__partition(&in, p->plan, &po);
    double after = DH_MAX(DH_MAX(po.max_gpu, frozen_max), t->floor);
    *drop = old_max - after;
    if (t->step_max < 0)
        *gain = *drop;
    else
        *gain = old_max > t->floor && after < old_max ? DH_MAX(t->step_max, old_max) - after : 0;
    return rc;
}

/* The plan's modelled transfer cost, each part scaled by what such transfers measured to
 * cost against the model (within a node, between nodes); counts its moves, remote ones and
 * bytes. *local: the part within nodes, unscaled (what observe_move compares with). */
static double plan_cost(dh__sched *s, reb_plan *p, double move_factor, double net_factor,
                        int64_t *moves, int64_t *remote, int64_t *bytes, int64_t *remote_bytes,
                        double *local)
{
    double *in_time = p->loads; /* reused: per-rank receive time, scaled */
    double *in_local = p->cfixed; /* reused (no longer read): the same, unscaled, local only */
    for (int i = 0; i < p->nranks; i++)
        in_time[p->ranks[i]] = in_local[p->ranks[i]] = 0;
    for (int64_t i = 0; i < p->n; i++) {
        int from = p->rank_at[p->start[i]], to = p->rank_at[p->plan[i]];
        p->plan[i] = to;
        if (to != from) { /* across nodes over the network, else a local handoff */
            int net = node_of_rank(s, to) != node_of_rank(s, from);
            (*moves)++;
            *remote += net;
            *bytes += p->mov_bytes[i];
            *remote_bytes += net ? p->mov_bytes[i] : 0;
            double t = (double)p->mov_bytes[i] /
                       (net ? s->cfg.net_bandwidth : s->cfg.move_bandwidth);
            in_time[to] += t * (net ? net_factor : move_factor);
            in_local[to] += net ? 0 : t;
        }
    }
    double cost = 0;
    *local = 0;
    for (int i = 0; i < p->nranks; i++) {
        cost = DH_MAX(cost, in_time[p->ranks[i]]);
        *local = DH_MAX(*local, in_local[p->ranks[i]]);
    }
    *local += s->cfg.move_latency;
    return cost + (*remote ? s->cfg.net_latency * net_factor : s->cfg.move_latency * move_factor);
}

/* Plans step st's moves over p->ranks and applies the plan when it passes the gate, the caps
 * and accept (rank_of changed; the caller regroups). t: see plan_moves. count: the plan is
 * counted in this scheduler's stats (its predicted gain: its own drop). 1: applied; 0: not. */
static int group_positions(const dh__sched *s, int64_t st, int32_t *pos, int32_t *n);

static int plan_group(dh__sched *s, int64_t st, const reb_in *in, reb_plan *p,
                      const reb_target *t, int count, dh__reb_accept accept, void *ctx)
{
    collect_movable(s, st, in, p);
    if (p->n == 0 || p->open < 2)
        return 0;
    double gain = 0, drop = 0;
    int rc = plan_moves(s, st, p, t, &gain, &drop);
    if (rc) {
        dh__sched_fail(s, rc);
        return 0;
    }
    dh__reb_stats keep = s->reb; /* restored when another node counts this plan */
    int64_t moves = 0, remote = 0, bytes = 0, rbytes = 0, base = step_slot(s, st) * s->G;
    double local = 0; /* what the engine measured moves to cost against the model scales it */
    double cost = plan_cost(s, p, in->move_factor, in->net_factor, &moves, &remote, &bytes,
                            &rbytes, &local);
    s->reb.plans++;
    s->reb.considered += moves;
    int applied = 0;
    if (!moves)
        goto out;
    s->last_plan_cost = local;
    double margin = 1.0 + 4.0 * in->gpu_mape;
    if (gain <= margin * cost) {
        s->reb.gated += moves;
        goto out;
    }
    int within = 1;
    if (accept || s->cfg.rank_token_cap || s->cfg.rank_byte_cap) {
        /* The plan's ranks at every position its group holds (a replica's group's plan moves
         * no other sample, and what is given the plan reads only these: the engine's carry
         * and dh__sched_receivers through dh__sched_plan_positions), else at every position:
         * a copy of the whole step a plan was O(G) on every node at every exchange. */
        int32_t np = 0;
        const int32_t *P = !in->other_groups && group_positions(s, st, s->plan_pos, &np)
                               ? s->plan_pos
                               : NULL;
        if (P) {
#ifndef NDEBUG /* a debug build: a read of another position is rank -1 */
            memset(p->new_rank, 0xff, (size_t)s->G * sizeof *p->new_rank);
#endif
            for (int32_t i = 0; i < np; i++)
                p->new_rank[P[i]] = s->rank_of[base + P[i]];
        } else {
            memcpy(p->new_rank, s->rank_of + base, (size_t)s->G * sizeof *p->new_rank);
        }
        for (int64_t i = 0; i < p->n; i++) {
            assert(p->new_rank[p->pos_of[i]] >= 0); /* a movable sample is its group's */
            p->new_rank[p->pos_of[i]] = p->plan[i];
        }
        within = plan_within_caps(s, st, p->new_rank, P, np);
    }
    if (within < 0) {
        dh__sched_fail(s, within);
        goto out;
    }
    if (!within || (accept && accept(ctx, st, p->new_rank))) {
        s->reb.refused += moves;
        goto out;
    }
    for (int64_t i = 0; i < p->n; i++) {
        int32_t *r = &s->rank_of[base + p->pos_of[i]];
        if (*r != p->plan[i]) { /* both batches change: the caller regroups them */
            dh__sched_mark_moved(s, *r);
            dh__sched_mark_moved(s, p->plan[i]);
            *r = p->plan[i];
        }
    }
    applied = 1;
    s->reb.plans_applied++;
    s->reb.moved += moves;
    s->reb.moved_remote += remote;
    s->reb.remote_bytes += rbytes;
    s->reb.bytes_moved += bytes;
    s->reb.predicted_gain_s += drop;
out:
    if (!count)
        s->reb = keep;
    return applied;
}

typedef struct {
    double load;
    int node;
} node_key;

/* The group the i-th node in order goes to among g groups: 0..g-1, then g-1..0, ... */
static int snake_group(int i, int g)
{
    return (i / g) % 2 ? g - 1 - i % g : i % g;
}

typedef struct {
    int ngroups;
    int32_t *list, *first, *group_of, *scratch; /* N, ngroups + 1, N, N */
} node_groups;

/*
 * Groups the nodes for step st's moves (the file's DESIGN): the nodes ordered by their load
 * (their samples' GPU, exact costs where known; ties to the lower node), dealt over
 * ceil(N / DH_MOVE_GROUP) groups snaking, so the groups' loads are alike (ordered by their
 * slowest rank instead, t2v-diffusion on 64 nodes lost 1.6% against one plan over every
 * rank: bench/RESULTS.md). A node's load does not depend on how its samples sit on its
 * ranks, which a replica knows only for the nodes it plans with. Fills g->list (the nodes
 * group by group, each group's in increasing order), g->first (ngroups + 1) and
 * s->groups_step_max (the most loaded node's load over its ranks: what the step takes at
 * least). Returns the step's floor, the highest of the groups' loads over their ranks: no
 * group ends below it, so no move below it shortens the step; < 0 when out of memory.
 */
static double group_nodes(dh__sched *s, int64_t st, const reb_in *in, node_groups *g)
{
    int N = s->nodes, per = s->ranks_per_node;
    int64_t base = step_slot(s, st) * s->G;
    node_key *key = dh__malloc((size_t)N * sizeof *key);
    double *load = dh__malloc((size_t)N * sizeof *load);
    int *ord = dh__malloc((size_t)N * sizeof *ord);
    if (!key || !load || !ord) {
        free(key);
        free(load);
        free(ord);
        return -1;
    }
    for (int n = 0; n < N; n++) /* each node's load as it said (dh__sched_node_load) */
        load[n] = in->node_load ? in->node_load[n] : 0;
    for (int64_t k = 0; !in->node_load && k < s->G; k++) {
        int64_t a = base + k;
        double exact = exact_cost(s, in, k, a);
        load[node_of_rank(s, s->rank_of[a])] += exact >= 0 ? exact : s->slot_gpu[a];
    }
    /* heaviest first, ties to the lower node: LPT's order (a radix sort; qsort's
     * comparisons were 4% of a replica's instructions a step at 1,024 nodes) */
    dh__part_in by_load = {.n = N, .ranks = 1, .gpu = load, .ws = &s->part_ws};
    int rc = dh__part_lpt_order(&by_load, ord);
    for (int i = 0; !rc && i < N; i++)
        key[i] = (node_key){load[ord[i]], ord[i]};
    free(load);
    free(ord);
    if (rc) {
        free(key);
        return -1;
    }
    s->groups_step_max = key[0].load / per;
    g->ngroups = (N + DH_MOVE_GROUP - 1) / DH_MOVE_GROUP;
    double *gsum = s->reb_f64; /* per group: its load, then its nodes */
    int32_t *gnodes = g->scratch;
    for (int i = 0; i <= g->ngroups; i++)
        g->first[i] = 0;
    for (int i = 0; i < g->ngroups; i++)
        gsum[i] = gnodes[i] = 0;
    for (int i = 0; i < N; i++) {
        int grp = snake_group(i, g->ngroups);
        g->group_of[key[i].node] = grp;
        g->first[grp + 1]++;
        gsum[grp] += key[i].load;
        gnodes[grp]++;
    }
    free(key);
    double floor_s = 0;
    for (int i = 0; i < g->ngroups; i++) {
        floor_s = DH_MAX(floor_s, gsum[i] / (gnodes[i] * per));
        g->first[i + 1] += g->first[i];
    }
    int32_t *fill = gnodes; /* no longer read: each group's next place in the list */
    for (int i = 0; i < g->ngroups; i++)
        fill[i] = g->first[i];
    for (int n = 0; n < N; n++) /* in node order: each group's nodes increasing */
        g->list[fill[g->group_of[n]]++] = n;
    return floor_s;
}

/* Moves by groups of nodes (the file's DESIGN): every group on the simulator, this node's
 * group on a replica. 1 when some plan was applied. */
static int rebalance_groups(dh__sched *s, int64_t st, const reb_in *in, reb_plan *p,
                            dh__reb_accept accept, void *ctx)
{
    int N = s->nodes, per = s->ranks_per_node, me = s->cfg.node, applied = 0;
    node_groups g = {s->ngroups, s->groups, s->groups + N, s->groups + 2 * N + 1,
                     p->ranks + s->R};
    if (s->groups_step != st) { /* made once a step: a second call plans in the same groups */
        s->groups_floor = group_nodes(s, st, in, &g);
        if (s->groups_floor < 0) {
            dh__sched_fail(s, DH_ENOMEM);
            return 0;
        }
        s->ngroups = g.ngroups;
        s->groups_step = st;
    }
    int mine = g.group_of[me];
    /* the nodes of the groups a replica plans: the exact costs its plan reads, and their
     * shares placed as they placed them */
    for (int i = 0; s->cfg.node_local && i < g.ngroups; i++)
        for (int j = g.first[i]; j < g.first[i + 1] && (in->other_groups ? i != mine : i == mine);
             j++) {
            if (in->costs_of && in->node_load)
                known_of_node(s, st, in, g.list[j]);
            dh__sched_settle(s, st, g.list[j]);
        }
    if (s->error)
        return 0;
    for (int i = 0; i < g.ngroups && !s->error; i++) {
        const int32_t *nodes = g.list + g.first[i];
        int n = g.first[i + 1] - g.first[i];
        if (s->cfg.node_local && (in->other_groups ? i == mine : i != mine))
            continue;
        if (s->cfg.node_local && i == mine) { /* what its realised gain is counted over */
            int32_t *keep = s->group + step_slot(s, st) * DH_MOVE_GROUP;
            for (int j = 0; j < DH_MOVE_GROUP; j++)
                keep[j] = j < n ? nodes[j] : -1;
        }
        p->nranks = 0;
        for (int j = 0; j < n; j++)
            for (int r = nodes[j] * per; r < (nodes[j] + 1) * per; r++)
                p->ranks[p->nranks++] = r;
        /* on a replica the group's lowest node counts it: a sum over nodes counts it once */
        reb_target t = {s->groups_floor, s->groups_step_max};
        applied |= plan_group(s, st, in, p, &t,
                              !s->cfg.node_local || in->other_groups || nodes[0] == me, accept,
                              ctx);
    }
    return applied;
}

static void rebalance(dh__sched *s, int64_t st, const reb_in *in, dh__reb_accept accept,
                      void *ctx)
{
    if (!s->caps->rebalance || st < s->lo || st >= s->planned || s->error)
        return;
    for (int r = 0; in->need_admitted && r < s->R; r++) /* (another node's batches: admitted
                                                          * there; admission here goes on
                                                          * past them once its own are) */
        if ((rank_here(s, r) && !batch_of(s, st, r)->admitted) ||
            s->rank_finished[step_slot(s, st) * s->R + r])
            return; /* moves stay inside admitted, untaken batches */
    reb_plan p;
    plan_scratch(s, &p);
    reb_in by_node = *in;
    if (rows_lazy(s) && !in->node_load && !in->need_admitted) /* an agreed plan without the
                                                               * nodes' loads reads every
                                                               * node's predictions */
        dh__sched_gather_unsettled(s, st);
    if (in->costs_of) { /* the exact costs from the nodes' lists: as far as the plan reads */
        by_node.known = s->reb_known;
        if (!by_groups(s) || !in->node_load || !dh__sched_node_positions(s, st, 0, &(int32_t){0}))
            by_node.node_load = NULL, known_of_all(s, st, &by_node);
        in = &by_node;
    }
    int applied;
    if (by_groups(s) && s->cfg.node_local && in->need_admitted) {
        /* a replica's plan of its own batches alone (when no plan could be agreed) */
        p.nranks = 0;
        for (int r = s->cfg.node * s->ranks_per_node; r < (s->cfg.node + 1) * s->ranks_per_node;
             r++)
            p.ranks[p.nranks++] = r;
        reb_target t = {0, -1};
        applied = plan_group(s, st, in, &p, &t, 1, accept, ctx);
    } else if (by_groups(s)) {
        applied = rebalance_groups(s, st, in, &p, accept, ctx);
    } else {
        p.nranks = s->R;
        for (int r = 0; r < s->R; r++)
            p.ranks[r] = r;
        reb_target t = {0, -1};
        applied = plan_group(s, st, in, &p, &t, in->count, accept, ctx);
    }
    if (applied) {
        dh__sched_regroup_moved(s, st);
        dh__lst_leads_stale(s, st);
    }
}

void dh__sched_rebalance(dh__sched *s, int64_t st, double now, const uint8_t *frozen,
                         dh__reb_accept accept, void *ctx)
{
    (void)now;
    reb_in in = {frozen, NULL, dh__calib_gpu_mape(&s->calib), s->reb.move_factor,
                 s->reb.net_factor, 1, 1, 0, NULL, NULL, 0, NULL};
    rebalance(s, st, &in, accept, ctx);
}

void dh__sched_rebalance_agreed(dh__sched *s, int64_t st, const dh__reb_agreed *a,
                                dh__reb_accept accept, void *ctx)
{
    reb_in in = {a->frozen, a->known, a->gpu_mape, a->move_factor, a->net_factor, 0, a->count,
                 a->other_groups, a->costs_of, a->costs_ctx, a->ncost, a->node_load};
    rebalance(s, st, &in, accept, ctx);
}

const int32_t *dh__sched_node_positions(const dh__sched *s, int64_t st, int node, int32_t *n)
{
    if (st < s->lo || st >= s->planned || node < 0 || node >= s->nodes || !s->node_pos)
        return NULL;
    const int32_t *end = s->node_end + step_slot(s, st) * (s->nodes + 1);
    if (end[s->nodes] != s->G) /* not dealt to nodes */
        return NULL;
    *n = end[node + 1] - end[node];
    return s->node_pos + step_slot(s, st) * s->G + end[node];
}

/* A replica's group's positions of step st, ascending, into pos (*n): 1; 0 when it planned
 * no group's moves of a step dealt to nodes (any position may move). */
static int group_positions(const dh__sched *s, int64_t st, int32_t *pos, int32_t *n)
{
    const int32_t *grp = s->group + step_slot(s, st) * DH_MOVE_GROUP;
    int32_t cnt;
    *n = 0;
    if (!s->cfg.node_local || !by_groups(s) || grp[0] < 0 ||
        !dh__sched_node_positions(s, st, grp[0], &cnt))
        return 0;
    for (int j = 0; j < DH_MOVE_GROUP && grp[j] >= 0; j++) {
        const int32_t *P = dh__sched_node_positions(s, st, grp[j], &cnt);
        memcpy(pos + *n, P, (size_t)cnt * sizeof *pos);
        *n += cnt;
    }
    qsort(pos, (size_t)*n, sizeof *pos, dh__sched_by_position);
    return 1;
}

const int32_t *dh__sched_plan_positions(dh__sched *s, int64_t st, int32_t *n)
{
    *n = 0;
    if (st < s->lo || st >= s->planned || !group_positions(s, st, s->plan_pos, n))
        return NULL;
    return s->plan_pos;
}

/* Rank r's place among the ranks a plan may touch: its group's (grp, ng nodes ascending, per
 * ranks each), or every rank (ng 0). */
static int rank_index(const int32_t *grp, int ng, int per, int r)
{
    int j = 0;
    while (j < ng - 1 && grp[j] != r / per)
        j++;
    assert(!ng || grp[j] == r / per); /* a group's plan moves samples within the group */
    return ng ? j * per + r % per : r;
}

int dh__sched_receivers(dh__sched *s, int64_t st, const int32_t *rank_of, dh__reb_receiver got,
                        void *ctx)
{
    if (st < s->lo || st >= s->planned)
        return 0;
    int64_t G = s->G, base = step_slot(s, st) * G;
    int32_t *pos = s->moved_pos, n = 0; /* scratch until the plan is regrouped */
    const int32_t *grp = s->group + step_slot(s, st) * DH_MOVE_GROUP;
    int ng = 0, per = s->ranks_per_node;
    if (group_positions(s, st, pos, &n)) /* only its group's samples move: its ranks alone
                                          * are counted (every rank's were, 2 passes over
                                          * 8,192 at 1,024 nodes) */
        while (ng < DH_MOVE_GROUP && grp[ng] >= 0)
            ng++;
    else
        for (int64_t k = 0; k < G; k++)
            pos[n++] = (int32_t)k;
    int nr = ng ? ng * per : s->R; /* the ranks counted, in rank order (a group's ascending) */
    int32_t *end = dh__calloc((size_t)nr + 1, sizeof *end);
    uint8_t *gets = dh__calloc((size_t)nr, 1);
    int rc = end && gets ? 0 : DH_ENOMEM;
    for (int32_t i = 0; !rc && i < n; i++) { /* the samples by rank, each in the step's order */
        int32_t k = pos[i], x = rank_index(grp, ng, per, rank_of[k]);
        end[x + 1]++;
        gets[x] |= rank_of[k] != s->rank_of[base + k];
    }
    for (int x = 0; !rc && x < nr; x++)
        end[x + 1] += end[x];
    int64_t *samples = s->moved_mem;
    for (int32_t i = 0; !rc && i < n; i++) /* end[x] walks from x's start to its end */
        samples[end[rank_index(grp, ng, per, rank_of[pos[i]])]++] = s->order[base + pos[i]];
    for (int x = 0; !rc && x < nr; x++)
        if (gets[x])
            rc = got(ctx, ng ? grp[x / per] * per + x % per : x, samples + (x ? end[x - 1] : 0),
                     end[x] - (x ? end[x - 1] : 0));
    free(end);
    free(gets);
    return rc;
}

double dh__sched_node_load(const dh__sched *s, int64_t st, int node, const float *cost,
                           int64_t ncost)
{
    int32_t n;
    const int32_t *P = dh__sched_node_positions(s, st, node, &n);
    if (!P)
        return -1;
    int64_t base = step_slot(s, st) * s->G;
    /* a node a replica has not settled: its rows were not read into the step (rows_lazy),
     * so a prediction comes from the sample's row (the same value) */
    int from_rows = !s->settled[step_slot(s, st) * s->nodes + node];
    double load = 0; /* group_nodes' sum: the same additions in the same order */
    for (int32_t i = 0; i < n; i++)
        load += i < ncost && cost[i] >= 0 ? (double)cost[i]
                : from_rows               ? sample_gpu(s, s->order[base + P[i]])
                                          : s->slot_gpu[base + P[i]];
    return load;
}

double dh__sched_prepared_cost(const dh__sched *s, int64_t st, int64_t k)
{
    if (st < s->lo || st >= s->planned || k < 0 || k >= s->G)
        return -1;
    return seen_prepared(s, step_slot(s, st) * s->G + k);
}

void dh__sched_reb_counting(dh__sched *s, int on)
{
    s->reb_quiet = !on;
}

void dh__sched_observe_move(dh__sched *s, double seconds)
{
    s->reb.move_s += seconds;
    if (s->last_plan_cost <= 0 || seconds <= 0)
        return;
    double r = log(seconds / s->last_plan_cost);
    /* From the model (factor 1) as the prior: one slow plan does not shut the gate for good. */
    s->reb.move_factor = exp(0.7 * log(s->reb.move_factor) + 0.3 * r);
    s->reb.move_obs++;
}

void dh__sched_observe_wire(dh__sched *s, int64_t bytes, double seconds)
{
    double model = (double)bytes / s->cfg.net_bandwidth + s->cfg.net_latency;
    if (!(seconds > 0) || !(model > 0))
        return;
    double r = log(seconds / model);
    s->reb.net_factor = exp(0.7 * log(s->reb.net_factor) + 0.3 * r);
    s->reb.net_obs++;
}

const dh__reb_stats *dh__sched_reb_stats(const dh__sched *s)
{
    return &s->reb;
}
