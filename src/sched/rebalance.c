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
 */
#include "sched_int.h"

#include "../plan/plan.h"

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
        double g = s->revealed[p] >= 0 ? s->revealed[p] : sample_gpu(s, s->order[p]);
        load[rank_of[k]] += g;
    }
    double m = 0;
    for (int r = 0; r < s->R; r++)
        m = DH_MAX(m, load[r]);
    return m;
}

void dh__reb_step_finished(dh__sched *s, int64_t st)
{
    if (s->reb_quiet)
        return; /* agreed plans: another node counts what they gained */
    /* Realised gain: the step's slowest rank before and after its moves, exact costs. */
    int64_t base = step_slot(s, st) * s->G;
    s->reb.realised_gain_s += step_max(s, st, s->orig_rank + base, s->plan_gpu) -
                              step_max(s, st, s->rank_of + base, s->plan_gpu);
}

/* 1 when the plan keeps every rank that receives samples within the per-rank caps, 0 when
 * not, < 0 on an allocation failure. */
static int plan_within_caps(const dh__sched *s, int64_t st, const int32_t *rank_of)
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
    for (int64_t k = 0; ok && k < s->G; k++) {
        int64_t i = s->order[base + k];
        tok[rank_of[k]] += s->cfg.pred.tokens ? s->cfg.pred.tokens[i] : 0;
        byt[rank_of[k]] += s->cfg.pred.bytes[i];
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
    double *fixed, *mov_gpu;    /* per rank; per movable sample */
    int64_t *pos_of, *mov_bytes; /* per movable sample: k within the step, bytes */
    int32_t *start, *plan, *new_rank; /* per movable sample (start, plan); per k (new_rank) */
    int32_t *cidx, *rank_at;    /* rank -> open index (-1 frozen); open index -> rank */
    double *loads, *cfixed;     /* per rank; per open rank */
} reb_plan;

static void plan_scratch(dh__sched *s, reb_plan *p)
{
    int64_t G = s->G;
    int R = s->R;
    *p = (reb_plan){.fixed = s->plan_cpu, .mov_gpu = s->plan_gpu, .pos_of = s->plan_bytes,
                    .mov_bytes = s->plan_tokens, .start = s->reb_i32, .plan = s->reb_i32 + G,
                    .new_rank = s->reb_i32 + 2 * G, .cidx = s->reb_i32 + 3 * G,
                    .rank_at = s->reb_i32 + 3 * G + R, .loads = s->reb_f64,
                    .cfixed = s->reb_f64 + R};
}

/* The exact GPU cost of the sample at slot a if this scheduler saw it prepared, else -1. */
static double seen_prepared(const dh__sched *s, int64_t a)
{
    return s->done[a] && s->revealed[a] >= 0 ? s->revealed[a] : -1;
}

/* Splits step st's samples into movable (prepared, on open ranks) and fixed loads. known
 * (G, may be NULL): the exact costs to plan with (< 0: not known), instead of what this
 * scheduler has seen prepared (agreed plans: what every node was told alike). */
static void collect_movable(dh__sched *s, int64_t st, const uint8_t *frozen, const float *known,
                            reb_plan *p)
{
    int64_t base = step_slot(s, st) * s->G;
    for (int r = 0; r < s->R; r++) {
        p->fixed[r] = 0;
        p->cidx[r] = frozen && frozen[r] ? -1 : p->open;
        if (p->cidx[r] >= 0)
            p->rank_at[p->open++] = r;
    }
    for (int64_t k = 0; k < s->G; k++) {
        int64_t a = base + k;
        double exact = known ? known[k] : seen_prepared(s, a);
        if (exact >= 0 && p->cidx[s->rank_of[a]] >= 0) {
            p->pos_of[p->n] = k;
            p->mov_gpu[p->n] = exact;
            p->mov_bytes[p->n] = s->cfg.pred.bytes[s->order[a]];
            p->n++;
        } else {
            p->fixed[s->rank_of[a]] += exact >= 0 ? exact : sample_gpu(s, s->order[a]);
        }
    }
}

/*
 * Plans the movable samples over the open ranks: fills p->plan (open rank
 * indices) and *gain (the step's maximum before - after). 0 or an error.
 */
static int plan_moves(dh__sched *s, int64_t st, reb_plan *p, double *gain)
{
    int64_t base = step_slot(s, st) * s->G;
    double old_max = 0, frozen_max = 0;
    memcpy(p->loads, p->fixed, (size_t)s->R * sizeof *p->loads);
    for (int64_t i = 0; i < p->n; i++) {
        int r = s->rank_of[base + p->pos_of[i]];
        p->start[i] = p->cidx[r];
        p->loads[r] += p->mov_gpu[i];
    }
    for (int r = 0; r < s->R; r++) {
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
    *gain = old_max - DH_MAX(po.max_gpu, frozen_max);
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
    for (int r = 0; r < s->R; r++)
        in_time[r] = in_local[r] = 0;
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
    for (int r = 0; r < s->R; r++) {
        cost = DH_MAX(cost, in_time[r]);
        *local = DH_MAX(*local, in_local[r]);
    }
    *local += s->cfg.move_latency;
    return cost + (*remote ? s->cfg.net_latency * net_factor : s->cfg.move_latency * move_factor);
}

/* What a plan may read: on one node the scheduler's own state; agreed between nodes, only
 * what every node was given alike (dh__reb_agreed). */
typedef struct {
    const uint8_t *frozen;
    const float *known; /* agreed: the exact costs every node was told (else NULL) */
    double gpu_mape, move_factor, net_factor;
    int need_admitted; /* every batch of the step admitted here (one node) */
} reb_in;

static void rebalance(dh__sched *s, int64_t st, const reb_in *in, dh__reb_accept accept,
                      void *ctx)
{
    if (!s->caps->rebalance || st < s->lo || st >= s->planned || s->error)
        return;
    for (int r = 0; in->need_admitted && r < s->R; r++) {
        const batch_rec *b = batch_of(s, st, r);
        if (!b->admitted || b->finished)
            return; /* moves stay inside admitted, untaken batches */
    }
    reb_plan p;
    plan_scratch(s, &p);
    collect_movable(s, st, in->frozen, in->known, &p);
    if (p.n == 0 || p.open < 2)
        return;
    double gain = 0;
    int rc = plan_moves(s, st, &p, &gain);
    if (rc) {
        dh__sched_fail(s, rc);
        return;
    }
    int64_t moves = 0, remote = 0, bytes = 0, rbytes = 0, base = step_slot(s, st) * s->G;
    double local = 0; /* what the engine measured moves to cost against the model scales it */
    double cost = plan_cost(s, &p, in->move_factor, in->net_factor, &moves, &remote, &bytes,
                            &rbytes, &local);
    s->reb.plans++;
    s->reb.considered += moves;
    if (!moves)
        return;
    s->last_plan_cost = local;
    double margin = 1.0 + 4.0 * in->gpu_mape;
    if (gain <= margin * cost) {
        s->reb.gated += moves;
        return;
    }
    memcpy(p.new_rank, s->rank_of + base, (size_t)s->G * sizeof *p.new_rank);
    for (int64_t i = 0; i < p.n; i++)
        p.new_rank[p.pos_of[i]] = p.plan[i];
    int within = plan_within_caps(s, st, p.new_rank);
    if (within < 0) {
        dh__sched_fail(s, within);
        return;
    }
    if (!within || (accept && accept(ctx, st, p.new_rank))) {
        s->reb.refused += moves;
        return;
    }
    memcpy(s->rank_of + base, p.new_rank, (size_t)s->G * sizeof *p.new_rank);
    dh__sched_regroup(s, st);
    dh__lst_leads_stale(s, st);
    s->reb.plans_applied++;
    s->reb.moved += moves;
    s->reb.moved_remote += remote;
    s->reb.remote_bytes += rbytes;
    s->reb.bytes_moved += bytes;
    s->reb.predicted_gain_s += gain;
}

void dh__sched_rebalance(dh__sched *s, int64_t st, double now, const uint8_t *frozen,
                         dh__reb_accept accept, void *ctx)
{
    (void)now;
    reb_in in = {frozen, NULL, dh__calib_gpu_mape(&s->calib), s->reb.move_factor,
                 s->reb.net_factor, 1};
    rebalance(s, st, &in, accept, ctx);
}

void dh__sched_rebalance_agreed(dh__sched *s, int64_t st, const dh__reb_agreed *a,
                                dh__reb_accept accept, void *ctx)
{
    reb_in in = {a->frozen, a->known, a->gpu_mape, a->move_factor, a->net_factor, 0};
    dh__reb_stats keep = s->reb;
    rebalance(s, st, &in, accept, ctx);
    if (!a->count) /* every node applied the same plan; one of them counts it */
        s->reb = keep;
}

double dh__sched_prepared_cost(const dh__sched *s, int64_t st, int64_t k)
{
    if (st < s->lo || st >= s->planned || k < 0 || k >= s->G)
        return -1;
    return seen_prepared(s, step_slot(s, st) * s->G + k);
}

int dh__sched_learn_prepared(dh__sched *s, int64_t st, int64_t k, double cost)
{
    if (st < s->lo || st >= s->planned || k < 0 || k >= s->G || !(cost >= 0))
        return DH_EINVAL;
    int64_t a = step_slot(s, st) * s->G + k;
    if (s->done[a] || rank_here(s, s->rank_of[a]))
        return 0; /* prepared here: this node knows it first-hand */
    s->revealed[a] = (float)cost;
    s->done[a] = 1;
    batch_of(s, st, s->rank_of[a])->ndone++;
    return 0;
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
