/*
 * sched.c - the scheduler's spine: admission and the pull interface of
 * sched.h. Its memory and the step window are in state.c, planning and the
 * failure it keeps in planning.c; how work is served lives in its rooms:
 * lst.c (least slack, splitting), baseline.c (local, FIFO), rebalance.c,
 * lend.c. Which room runs is read from the policy's row (policy.c). The
 * rooms call planning.c and state.c, never back into this file.
 *
 * DESIGN
 * - Window: batches are admitted in (step, rank) order while the bytes of
 *   admitted, not yet finished batches fit the memory budget (at least one
 *   batch is always admitted, so a batch larger than the budget cannot
 *   deadlock). A batch's bytes are freed when its rank finishes the step.
 *   A step leaves the window (its slot is reused) once every rank finished
 *   it and a later step was taken, so state is sized by the steps in
 *   flight, never by the run (sched_int.h).
 * - Errors: an allocation or order-source failure is kept (s->error) and
 *   returned by every later call, so an engine stops instead of waiting for
 *   work that will never come.
 */
#include "sched_int.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- admission */

/*
 * Bytes of batches a rank still holds after its later steps began (a
 * trainer keeping a tensor): they stay in memory, but must not starve the
 * window, or a single kept batch would stop the run. In lockstep runs (every
 * engine's emulated ranks, the simulator) steps before the latest one taken
 * are finished, so this is 0 there. Served, the latest taken step's batches
 * count here too: the pool's slack holds what trainers keep, and a Loader
 * keeps its batch until the next one arrives, so a next batch that did not
 * fit beside it in the budget was never admitted (a user trial: one worker,
 * two-clip batches twice the size the default budget was derived from).
 */
static int64_t held_past_their_step(const dh__sched *s)
{
    int64_t bytes = 0, end = s->cur_step + (s->cfg.held_in_slack ? 1 : 0);
    for (int64_t st = s->lo; st < end && st < s->planned; st++)
        for (int r = 0; r < s->R; r++) {
            const batch_rec *b = batch_of(s, st, r);
            if (rank_here(s, r) && b->admitted && !s->rank_finished[step_slot(s, st) * s->R + r] &&
                s->taken[r] > st)
                bytes += b->bytes;
        }
    return bytes;
}

/* Admits batches in (step, rank) order while the memory budget allows. */
static int admit(dh__sched *s)
{
    int64_t held = s->lo < s->cur_step + s->cfg.held_in_slack ? held_past_their_step(s) : 0;
    while (s->admit_next / s->R < s->N) {
        int64_t st = s->admit_next / s->R;
        int rc = dh__sched_ensure_planned(s, st);
        if (rc)
            return rc;
        int rank = (int)(s->admit_next % s->R);
        if (!rank_here(s, rank)) { /* another node's: it admits and prepares it (nothing of
                                    * its batch is read here: dh__sched_batch_ready is asked
                                    * of this node's ranks); on to this node's next rank */
            int64_t first = (int64_t)s->cfg.node * s->ranks_per_node;
            s->admit_next = (rank < first ? st : st + 1) * s->R + first;
            continue;
        }
        batch_rec *b = batch_of(s, st, rank);
        int64_t in_use = s->mem_in_use - held;
        if (in_use > 0 && in_use + b->bytes > s->cfg.memory_budget)
            break;
        b->admitted = 1;
        s->mem_in_use += b->bytes;
        s->mem_peak = DH_MAX(s->mem_peak, s->mem_in_use);
        const int64_t *mem = s->members + step_slot(s, st) * s->G + b->first;
        int node = node_of_rank(s, rank), lst = s->caps->service == DH_SERVE_LEAST_SLACK;
        double first_lead = 0, lead = lst ? dh__lst_lead(s, st, rank, &first_lead) : 0;
        for (int32_t k = 0; k < b->ntasks; k++) {
            rc = lst ? dh__lst_push(s, node, mem[k], lead, first_lead)
                     : dh__fifo_push(&s->fifo[node], mem[k]);
            if (rc)
                return dh__sched_fail(s, rc);
        }
        s->admit_next++;
    }
    return 0;
}

/* ------------------------------------------------------------ pull interface */

static int node_of_worker(const dh__sched *s, int worker)
{
    if (s->caps->service == DH_SERVE_LOCAL) /* private workers: the node of their rank */
        return node_of_rank(s, worker / s->k_local);
    return worker / s->workers_per_node;
}

/* The shared pool's next task for a worker of `node`, lending included. */
static int shared_next(dh__sched *s, int node, double now, int64_t *pos, int32_t *part,
                       int32_t *nparts, double *ship)
{
    int rc = admit(s);
    if (rc)
        return rc;
    if (s->caps->service == DH_SERVE_FIFO)
        return dh__fifo_next(&s->fifo[node], pos);
    rc = dh__lst_next(s, node, now, pos, part, nparts);
    if (rc != DH__IDLE || !s->caps->lend || s->nodes < 2 || s->cfg.node_local)
        return rc;
    int from = dh__lend_from(s, node, now, ship);
    return from < 0 ? DH__IDLE : dh__lst_next(s, from, now, pos, part, nparts);
}

/* The task at global position pos (part of nparts), for `worker` (-1: another node's). */
static void fill_task(dh__sched *s, int64_t pos, int32_t part, int32_t nparts, int worker,
                      double ship, dh__task *out)
{
    out->ship_s = ship;
    out->pos = pos;
    out->step = pos / s->G;
    out->sample = sample_at(s, pos);
    out->rank = s->rank_of[at(s, pos)];
    out->worker = worker;
    out->part = part;
    out->nparts = nparts;
    out->pred_cost = task_cost(s, pos) / nparts;
}

int dh__sched_next_task(dh__sched *s, int worker, double now, dh__task *out)
{
    if (s->error)
        return s->error;
    if (worker < 0 || worker >= s->nworkers)
        return DH_EINVAL;
    int64_t pos = 0;
    int32_t part = 0, nparts = 1;
    double ship = 0;
    int rc = s->caps->service == DH_SERVE_LOCAL
                 ? dh__local_next(s, worker, &pos)
                 : shared_next(s, worker / s->workers_per_node, now, &pos, &part, &nparts, &ship);
    if (rc)
        return rc < 0 ? dh__sched_fail(s, rc) : rc;
    fill_task(s, pos, part, nparts, worker, ship, out);
    s->worker_free[worker] = now + out->pred_cost;
    touch_node(s, node_of_worker(s, worker));
    return 0;
}

int dh__sched_task_done(dh__sched *s, const dh__task *t, double now, double measured,
                        double revealed_gpu)
{
    int32_t n = t->nparts > 0 ? t->nparts : 1;
    if (t->step < s->lo || t->step >= s->planned)
        return DH_EINVAL;
    if (t->worker >= 0 && t->worker < s->nworkers) {
        s->worker_free[t->worker] = now;
        touch_node(s, node_of_worker(s, t->worker));
    }
    int64_t a = at(s, t->pos);
    if (measured >= 0) { /* a failed task's time says nothing about decoding */
        dh__calib_cpu_observe(&s->calib, s->slot_cls[a], s->task_pred[a] / n,
                              measured - (n > 1 ? DH_SPLIT_PART_OVERHEAD_S : 0));
        s->calib_ver++; /* the staggered leads of small nodes follow it (lst.c) */
    }
    if (n > 1 && --s->parts_left[a] > 0)
        return 0; /* other parts of this sample are still running */
    s->revealed[a] = (float)revealed_gpu;
    s->done[a] = 1;
    batch_rec *b = batch_of(s, t->step, s->rank_of[a]);
    return ++b->ndone == b->ntasks;
}

int64_t dh__sched_next_pos(const dh__sched *s, int worker)
{
    if (worker < 0 || worker >= s->nworkers || s->caps->service == DH_SERVE_LOCAL ||
        s->caps->service == DH_SERVE_FIFO)
        return -1;
    const task_heap_q *q = &s->queue[worker / s->workers_per_node];
    return q->n ? q->a[0].pos : -1;
}

void dh__sched_prefetch(const dh__sched *s, int64_t pos)
{
    if (pos < s->lo * s->G || pos >= s->planned * s->G)
        return; /* (out of the window: its rows are another position's) */
    prefetch_rows(s, at(s, pos), 0);
}

int dh__sched_last_part(const dh__sched *s, const dh__task *t)
{
    return t->nparts <= 1 || s->parts_left[at(s, t->pos)] <= 1;
}

int dh__sched_batch_ready(const dh__sched *s, int64_t step, int rank)
{
    if (step < s->lo)
        return 1; /* left the window: it was complete */
    if (step >= s->planned)
        return 0;
    const batch_rec *b = batch_of(s, step, rank);
    return b->admitted && b->ndone == b->ntasks;
}

/* Rank `rank` took step `step` at `now` (the window's low end moves in the caller). */
static inline __attribute__((always_inline)) void rank_took(dh__sched *s, int rank, int64_t step,
                                                            double now)
{
    s->taken[rank] = DH_MAX(s->taken[rank], step + 1);
    if (step > s->cur_step || (step == 0 && s->cur_time == 0)) {
        s->cur_step = step;
        s->cur_time = now; /* deadlines of later steps count from here */
        touch_all(s);      /* deadlines moved: every node's predicted lateness changes */
    }
}

/* Rank `rank` finished step `step`, in the window, after gpu_time of compute (the window's
 * low end moves in the caller). */
static inline __attribute__((always_inline)) void rank_done(dh__sched *s, int rank, int64_t step,
                                                            double gpu_time)
{
    uint8_t *finished = &s->rank_finished[step_slot(s, step) * s->R + rank];
    if (*finished)
        return;
    *finished = 1;
    /* a replica reads nothing of another node's batch it has not settled (whose record it
     * has not written): nothing of it is its own, nor its prediction */
    if (batch_settled(s, step, rank)) {
        const batch_rec *b = batch_of(s, step, rank);
        if (rank_here(s, rank))
            s->mem_in_use -= b->bytes;
        if (b->ntasks > 0) /* a replica knows the predictions of the batches it settled */
            dh__calib_gpu_observe(&s->calib, b->pred_gpu_raw, gpu_time);
    }
    if (++s->finished_ranks[step_slot(s, step)] == s->R && s->caps->rebalance)
        dh__reb_step_finished(s, step);
}

void dh__sched_batch_taken(dh__sched *s, int rank, int64_t step, double now)
{
    rank_took(s, rank, step, now);
    dh__sched_retire(s);
}

void dh__sched_step_done(dh__sched *s, int rank, int64_t step, double now, double gpu_time)
{
    (void)now;
    if (step < s->lo || step >= s->planned)
        return;
    rank_done(s, rank, step, gpu_time);
    dh__sched_retire(s);
}

/* The i-th of a strided array of doubles. */
static double strided(const double *v, int i, size_t stride)
{
    return *(const double *)(const void *)((const char *)v + (size_t)i * stride);
}

void dh__sched_ranks_stepped(dh__sched *s, int64_t step, int rank0, int n, const double *taken,
                             const double *released, const double *gpu_time, size_t stride)
{
    /* each rank's taking and finishing in order, the window's low end moved once at the end:
     * it only leaves steps every rank finished, which none of these can undo, and finishing
     * reads it only for `step`, which cannot leave before its last rank finishes */
    (void)released; /* (step_done's `now`: nothing of it is kept) */
    int in_window = step >= s->lo && step < s->planned; /* (neither end moves here) */
    if (in_window && n > 0 && node_of_rank(s, rank0) == node_of_rank(s, rank0 + n - 1) &&
        !batch_settled(s, step, rank0) && step <= s->cur_step &&
        !(step == 0 && s->cur_time == 0)) {
        /* The usual record: one node's ranks, a node this replica has not settled (nothing of
         * its batches is read), a step no longer the latest: each rank's taken step and
         * finished flag, and the step's count once (its last rank, if one of these, calls
         * the step finished after them all, as it would have after the others). Through
         * rank_done, with its reloads around each flag's store, a rank was 50 instructions. */
        int64_t slot = step_slot(s, step);
        uint8_t *finished = s->rank_finished + slot * s->R;
        int32_t newly = 0;
        for (int r = rank0; r < rank0 + n; r++) {
            s->taken[r] = DH_MAX(s->taken[r], step + 1);
            newly += !finished[r];
            finished[r] = 1;
        }
        s->finished_ranks[slot] += newly;
        if (newly && s->finished_ranks[slot] == s->R && s->caps->rebalance)
            dh__reb_step_finished(s, step);
        dh__sched_retire(s);
        return;
    }
    for (int i = 0; i < n; i++) {
        rank_took(s, rank0 + i, step, strided(taken, i, stride));
        if (in_window)
            rank_done(s, rank0 + i, step, strided(gpu_time, i, stride));
    }
    dh__sched_retire(s);
}

/* ----------------------------------------------------- lending between real nodes */

double dh__sched_backlog_lateness(dh__sched *s, double now, int64_t *head_bytes)
{
    int node = s->cfg.node_local ? s->cfg.node : 0;
    *head_bytes = s->queue[node].n ? s->slot_bytes[at(s, s->queue[node].a[0].pos)] : 0;
    return s->queue[node].n ? dh__lend_lateness(s, node, now) : 0;
}

int dh__sched_lend_task(dh__sched *s, double now, int any, dh__task *out)
{
    if (s->error)
        return s->error;
    int node = s->cfg.node_local ? s->cfg.node : 0;
    if (!s->caps->lend || s->caps->service != DH_SERVE_LEAST_SLACK || !s->queue[node].n ||
        (!any && dh__lend_lateness(s, node, now) <= 0))
        return DH__IDLE; /* on time: this node's own workers will do */
    int64_t pos = 0;
    int32_t part = 0, nparts = 1;
    int rc = dh__lst_next(s, node, now, &pos, &part, &nparts);
    if (rc)
        return rc < 0 ? dh__sched_fail(s, rc) : rc;
    fill_task(s, pos, part, nparts, -1, 0, out);
    touch_node(s, node);
    return 0;
}

int dh__sched_lend_gate(dh__sched *s, double late, int64_t bytes)
{
    double ship = ((double)bytes / s->cfg.net_bandwidth + s->cfg.net_latency) * s->reb.net_factor;
    s->reb.lend_considered++;
    if (late <= (1.0 + 4.0 * dh__calib_cpu_mape(&s->calib)) * ship) {
        s->reb.lend_gated++;
        return 0;
    }
    return 1;
}

void dh__sched_count_lent(dh__sched *s, int64_t bytes)
{
    s->reb.lent++;
    s->reb.bytes_shipped += bytes;
}

/* --------------------------------------------------------------- accessors */

int32_t dh__sched_batch_samples(dh__sched *s, int64_t step, int rank, int64_t *out, int32_t cap)
{
    if (step >= s->N || step < s->lo)
        return 0;
    int rc = dh__sched_ensure_planned(s, step);
    if (rc)
        return rc;
    const batch_rec *b = batch_of(s, step, rank);
    int node = node_of_rank(s, rank);
    if (!s->settled[step_slot(s, step) * s->nodes + node]) {
        /* another node's batch as a replica dealt it, round-robin (rank r of the node holds
         * its positions r, r + per, ...): its record not written (planning.c, group_node) */
        int32_t n = 0, k = 0, per = s->ranks_per_node, r = rank - node * per;
        const int32_t *pos = dh__sched_node_positions(s, step, node, &n);
        const int64_t *order = s->order + step_slot(s, step) * s->G;
        for (int32_t j = r; pos && j < n && k < cap; j += per)
            out[k++] = order[pos[j]];
        return pos && r < n ? (n - r + per - 1) / per : 0;
    }
    const int64_t *mem = s->members + step_slot(s, step) * s->G + b->first;
    for (int32_t k = 0; k < b->ntasks && k < cap; k++)
        out[k] = sample_at(s, mem[k]);
    return b->ntasks;
}

int dh__sched_rank_of(dh__sched *s, int64_t step, int64_t k)
{
    if (step >= s->N || step < s->lo || k < 0 || k >= s->G)
        return DH_EINVAL;
    int rc = dh__sched_ensure_planned(s, step);
    return rc ? rc : s->rank_of[step_slot(s, step) * s->G + k];
}

const int64_t *dh__sched_step_order(const dh__sched *s, int64_t step)
{
    return step >= s->lo && step < s->planned ? s->order + step_slot(s, step) * s->G : NULL;
}

int dh__sched_plan_ahead(dh__sched *s, int64_t step, double horizon_s)
{
    if (step < s->planned)
        return step >= s->lo;
    if (step >= s->N || step - s->lo >= DH__PLAN_AHEAD_STEPS || s->error ||
        D(s, s->planned) - D(s, s->lo) > horizon_s)
        return 0;
    int rc = dh__sched_ensure_planned(s, step);
    return rc ? rc : 1;
}

int64_t dh__sched_window_steps(const dh__sched *s)
{
    return s->planned - s->lo;
}

int dh__sched_error(const dh__sched *s)
{
    return s->error;
}

const dh__calib *dh__sched_calib(const dh__sched *s)
{
    return &s->calib;
}

int64_t dh__sched_memory_peak(const dh__sched *s)
{
    return s->mem_peak;
}

int64_t dh__sched_cap_violations(const dh__sched *s)
{
    return s->cap_violations;
}

int dh__sched_worker_count(const dh__sched *s)
{
    return s->nworkers;
}

int dh__sched_worker_rank(const dh__sched *s, int worker)
{
    return s->caps->service == DH_SERVE_LOCAL ? worker / s->k_local : -1;
}

int dh__sched_node_workers(const dh__sched *s, int node, int *first)
{
    int n = s->caps->service == DH_SERVE_LOCAL ? s->ranks_per_node * s->k_local
                                                : s->workers_per_node;
    *first = node * n;
    return n;
}
