/*
 * sched.c - the policies behind the pull interface of sched.h.
 *
 * DESIGN
 * - Steps are planned lazily, in order, when their first batch enters the
 *   window, so placement uses the calibration learnt so far. helix and
 *   helix-fifo partition with dh__partition(); local, pool and
 *   helix-nobalance use the DistributedSampler stride (sample k -> rank k%R).
 * - Window: batches are admitted in (step, rank) order while the bytes of
 *   admitted, not yet finished batches fit the memory budget (at least one
 *   batch is always admitted, so a batch larger than the budget cannot
 *   deadlock). A batch's bytes are freed when its rank finishes the step.
 * - Shared policies (pool, helix*) keep one ready structure: a FIFO of task
 *   positions in admission order, or a min-heap on the least-slack key
 *   D(s) - c, where D(s) is the predicted start of step s (prefix sum of
 *   predicted step times) and c the task's calibrated predicted cost. Since
 *   "now" shifts every slack equally, ordering by D(s) - c is ordering by
 *   slack = deadline - now - cost.
 * - local mirrors PyTorch's DataLoader: rank r owns k = max(1, W/R) workers;
 *   worker j builds batches s = j, j+k, ... whole and in order, sample by
 *   sample, and may start batch s only while s < taken_r + 2k (prefetch
 *   factor 2 per worker: the index queue holds 2k batches past the last one
 *   the trainer took).
 */
#include "sched.h"

#include "../core/heap.h"
#include "../plan/plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t bytes;
    double pred_gpu_raw; /* uncalibrated predicted compute (sum of sample costs) */
    int32_t first;       /* into members[] of the step: positions of this batch */
    int32_t ntasks, ndone, nissued;
    uint8_t admitted, finished;
} batch_rec;

typedef struct {
    double key;
    int64_t pos;
    int32_t part, nparts; /* nparts 0: whole sample, not yet considered for splitting */
} heap_item;

struct dh__sched {
    dh__sched_config cfg;
    int64_t G, N;
    int R, W, k_local;
    dh__calib calib;
    batch_rec *batch;     /* N * R */
    int32_t *rank_of;     /* N * G */
    int64_t *members;     /* N * G: positions grouped by (step, rank) */
    double *step_start;   /* N + 1: D(s), predicted start of step s */
    float *task_pred;     /* N * G: raw predicted cost */
    int32_t *parts_left;  /* N * G: parts of a split sample still running or queued */
    float *revealed;      /* N * G: exact GPU cost once prepared; < 0 until then */
    uint8_t *done;        /* N * G: sample fully prepared */
    int32_t *orig_rank;   /* N * G: placement before rebalancing (realised gain) */
    int32_t *finished_ranks; /* N: ranks done with the step */
    dh__reb_stats reb;
    double last_plan_cost; /* modelled cost of the last plan the gate saw */
    int64_t cur_step;     /* latest step any rank has taken, and when */
    double cur_time;
    int64_t planned;      /* steps planned so far */
    int64_t cap_violations; /* samples no rank could take within the caps */
    /* window */
    int64_t admit_next;   /* next batch index s * R + r to admit */
    int64_t mem_in_use, mem_peak;
    /* shared ready structures, one per node: each node's workers serve its ranks */
    int nodes, ranks_per_node, workers_per_node;
    int64_t **fifo;
    int64_t *fifo_head, *fifo_tail;
    heap_item **heap;
    int64_t *heap_n;
    size_t *heap_cap;
    /* local */
    int64_t *taken;       /* per rank: batches taken (next step it will take) */
    int64_t *worker_step; /* per local worker: batch it is building, or next to build */
    /* planning scratch, allocated once */
    double *plan_gpu, *plan_cpu; /* G */
    int64_t *plan_tokens, *plan_bytes; /* G */
    int32_t *plan_fill;          /* R */
    /* lending */
    int nworkers;
    double *worker_free;         /* per worker: when it is predicted to be free */
    double *lend_free;           /* workers per node, scratch */
    void *lend_tasks;            /* DH_LEND_LOOK queued_task, scratch */
    uint64_t epoch;              /* bumped when deadlines move */
    uint64_t lend_ver, best_ver; /* any change lending reads; the version best_* is for */
    int best_node;               /* lending's latest node, or -1 */
    double best_late;
    uint64_t *node_ver;          /* per node: bumped when its queue or workers change */
    uint64_t *lend_memo_ver, *lend_memo_epoch; /* per node: backlog_lateness memo */
    double *lend_memo_val;
};

static const char *const policy_names[DH_POL_COUNT + 1] = {
    "local", "pool", "helix", "helix-nobalance", "helix-fifo", "helix-noreb", NULL};

int dh__policy_from_name(const char *name)
{
    for (int p = 0; name && p < DH_POL_COUNT; p++)
        if (!strcmp(name, policy_names[p]))
            return p;
    return -1;
}

const char *dh__policy_name(dh__policy p)
{
    return (unsigned)p < DH_POL_COUNT ? policy_names[p] : "?";
}

const char *const *dh_policy_names(void)
{
    return policy_names;
}

static int shared_lst(const dh__sched *s)
{
    return s->cfg.policy == DH_POL_HELIX || s->cfg.policy == DH_POL_HELIX_NOBALANCE ||
           s->cfg.policy == DH_POL_HELIX_NOREB;
}

static int balanced(const dh__sched *s)
{
    return s->cfg.policy == DH_POL_HELIX || s->cfg.policy == DH_POL_HELIX_FIFO ||
           s->cfg.policy == DH_POL_HELIX_NOREB;
}

/* ---------------------------------------------------------------- planning */

static double sample_gpu(const dh__sched *s, int64_t sample)
{
    return dh__gpu_sample_cost(&s->cfg.gpu, &s->cfg.pred.feat[sample]);
}

/*
 * Groups step st's positions by rank (members) and recomputes each batch's
 * task count, done count, bytes and predicted GPU time from rank_of; called
 * after planning and after a rebalancing plan moved samples.
 */
static void regroup(dh__sched *s, int64_t st)
{
    int64_t G = s->G, base = st * G;
    const int64_t *idx = s->cfg.order + base;
    const int32_t *rank_of = s->rank_of + base;
    batch_rec *b = s->batch + st * s->R;
    for (int r = 0; r < s->R; r++)
        b[r].ntasks = b[r].ndone = 0, b[r].bytes = 0, b[r].pred_gpu_raw = 0;
    for (int64_t k = 0; k < G; k++) {
        batch_rec *br = &b[rank_of[k]];
        br->ntasks++;
        br->ndone += s->done[base + k];
        br->bytes += s->cfg.pred.bytes[idx[k]];
        br->pred_gpu_raw += sample_gpu(s, idx[k]);
    }
    int32_t off = 0;
    for (int r = 0; r < s->R; r++) {
        b[r].first = off;
        off += b[r].ntasks;
    }
    int32_t *fill = s->plan_fill;
    memset(fill, 0, (size_t)s->R * sizeof *fill);
    for (int64_t k = 0; k < G; k++) /* positions grouped by rank, in batch order */
        s->members[base + b[rank_of[k]].first + fill[rank_of[k]]++] = base + k;
}

/* Places step st's samples, groups them by rank and fills its batch records. */
static int plan_step(dh__sched *s, int64_t st)
{
    int64_t G = s->G, base = st * G;
    const int64_t *idx = s->cfg.order + base;
    int32_t *rank_of = s->rank_of + base;
    if (balanced(s)) {
        double *gpu = s->plan_gpu, *cpu = s->plan_cpu;
        for (int64_t k = 0; k < G; k++) {
            gpu[k] = sample_gpu(s, idx[k]);
            cpu[k] = dh__calib_cpu(&s->calib, s->cfg.pred.cls[idx[k]], s->cfg.pred.cpu_pred[idx[k]]);
            s->plan_tokens[k] = s->cfg.pred.tokens ? s->cfg.pred.tokens[idx[k]] : 0;
            s->plan_bytes[k] = s->cfg.pred.bytes[idx[k]];
        }
        dh__part_in in = {.n = (int)G, .ranks = s->R, .gpu = gpu, .cpu = cpu,
                          .tokens = s->plan_tokens, .bytes = s->plan_bytes,
                          .cap_tokens = s->cfg.rank_token_cap, .cap_bytes = s->cfg.rank_byte_cap};
        dh__part_out po;
        int rc = dh__partition(&in, rank_of, &po);
        if (rc)
            return rc;
        s->cap_violations += po.cap_violations;
    } else {
        dh__partition_stride((int)G, s->R, rank_of);
    }
    memcpy(s->orig_rank + base, rank_of, (size_t)G * sizeof *rank_of);
    batch_rec *b = s->batch + st * s->R;
    for (int r = 0; r < s->R; r++)
        memset(&b[r], 0, sizeof b[r]);
    for (int64_t k = 0; k < G; k++)
        s->task_pred[base + k] = s->cfg.pred.cpu_pred[idx[k]];
    regroup(s, st);
    double step_gpu = 0;
    for (int r = 0; r < s->R; r++)
        step_gpu = DH_MAX(step_gpu, b[r].pred_gpu_raw);
    s->step_start[st + 1] =
        s->step_start[st] + dh__calib_gpu(&s->calib, s->cfg.gpu.c0 + step_gpu);
    s->planned = st + 1;
    return 0;
}

static int ensure_planned(dh__sched *s, int64_t st)
{
    while (s->planned <= st && s->planned < s->N) {
        int rc = plan_step(s, s->planned);
        if (rc)
            return rc;
    }
    return 0;
}

/* ------------------------------------------------------------- ready queues */

static int heap_before(const heap_item *a, const heap_item *b)
{
    if (a->key != b->key)
        return a->key < b->key;
    if (a->pos != b->pos)
        return a->pos < b->pos;
    return a->part < b->part;
}

DH_HEAP_DEFINE(task_heap, heap_item, heap_before)

/* Lending's predictions read node queues and workers (per node) and deadlines (all). */
static void touch_node(dh__sched *s, int node)
{
    s->node_ver[node]++;
    s->lend_ver++;
}

static void touch_all(dh__sched *s)
{
    s->epoch++;
    s->lend_ver++;
}

static int heap_push(dh__sched *s, int node, heap_item it)
{
    touch_node(s, node);
    return task_heap_push(&s->heap[node], &s->heap_cap[node], &s->heap_n[node], it);
}

static heap_item heap_pop(dh__sched *s, int node)
{
    touch_node(s, node);
    return task_heap_pop(s->heap[node], &s->heap_n[node]);
}

static int node_of_rank(const dh__sched *s, int rank)
{
    return rank / s->ranks_per_node;
}

static double task_cost(const dh__sched *s, int64_t pos)
{
    return dh__calib_cpu(&s->calib, s->cfg.pred.cls[s->cfg.order[pos]], s->task_pred[pos]);
}

/* Admits batches in (step, rank) order while the memory budget allows. */
static int admit(dh__sched *s)
{
    int64_t total = s->N * s->R;
    while (s->admit_next < total) {
        int64_t st = s->admit_next / s->R;
        int rc = ensure_planned(s, st);
        if (rc)
            return rc;
        batch_rec *b = &s->batch[s->admit_next];
        if (s->mem_in_use > 0 && s->mem_in_use + b->bytes > s->cfg.memory_budget)
            break;
        b->admitted = 1;
        s->mem_in_use += b->bytes;
        s->mem_peak = DH_MAX(s->mem_peak, s->mem_in_use);
        const int64_t *mem = s->members + st * s->G + b->first;
        int node = node_of_rank(s, (int)(s->admit_next % s->R));
        for (int32_t k = 0; k < b->ntasks; k++) {
            if (shared_lst(s)) {
                heap_item it = {s->step_start[st] - task_cost(s, mem[k]), mem[k], 0, 0};
                if (heap_push(s, node, it))
                    return DH_ENOMEM;
            } else
                s->fifo[node][s->fifo_tail[node]++] = mem[k];
        }
        s->admit_next++;
    }
    return 0;
}

/* ------------------------------------------------------------------- local */

/* The local worker's next task: the next sample of its current batch, if allowed. */
static int local_next(dh__sched *s, int worker, int64_t *pos)
{
    int r = worker / s->k_local;
    int64_t st = s->worker_step[worker];
    for (;;) {
        if (st >= s->N || st >= s->taken[r] + 2 * s->k_local)
            return 1;
        if (ensure_planned(s, st))
            return 1;
        batch_rec *b = &s->batch[st * s->R + r];
        if (!b->admitted) {
            b->admitted = 1;
            s->mem_in_use += b->bytes;
            s->mem_peak = DH_MAX(s->mem_peak, s->mem_in_use);
        }
        if (b->nissued < b->ntasks) {
            *pos = s->members[st * s->G + b->first + b->nissued++];
            return 0;
        }
        /* This batch is fully issued: the worker moves on to its next one. */
        st = s->worker_step[worker] = st + s->k_local;
    }
}

/* ------------------------------------------------------------------ public */

/*
 * Splitting heavy samples: a sample predicted to cost more than its step's
 * predicted duration is cut into ceil(cost / step) keyframe-aligned parts, or
 * more if its slack before the batch's estimated deadline is under a quarter
 * of its cost (enough parts for each to fit the time left with that margin),
 * never more than its `segments` nor W. The other parts go back on the heap
 * with the same key, so the next free workers take them at once. Light
 * samples are never split: when CPU is the bottleneck every task is near its
 * deadline, and splitting them would only add the per-part overhead.
 */
static int32_t split_parts(dh__sched *s, const heap_item *it, double now)
{
    int64_t sample = s->cfg.order[it->pos];
    int32_t segs = s->cfg.pred.segments ? s->cfg.pred.segments[sample] : 1;
    if (segs < 2)
        return 1;
    int64_t st = it->pos / s->G;
    double c = task_cost(s, it->pos);
    if (c <= s->step_start[st + 1] - s->step_start[st])
        return 1;
    double step = s->step_start[st + 1] - s->step_start[st];
    double left = s->cur_time + s->step_start[st] - s->step_start[s->cur_step] - now;
    double parts = ceil(c / step);
    if (left - c < 0.25 * c)
        parts = DH_MAX(parts, left > 0 ? ceil(1.25 * c / left) : (double)segs);
    return (int32_t)DH_MIN(DH_MAX(parts, 2.0), DH_MIN((double)segs, (double)s->W));
}

static int lst_next(dh__sched *s, int node, double now, int64_t *pos, int32_t *part,
                    int32_t *nparts)
{
    if (!s->heap_n[node])
        return 1;
    heap_item it = heap_pop(s, node);
    if (it.nparts == 0) {
        it.nparts = split_parts(s, &it, now);
        s->parts_left[it.pos] = it.nparts;
        for (int32_t p = 1; p < it.nparts; p++) {
            heap_item rest = {it.key, it.pos, p, it.nparts};
            if (heap_push(s, node, rest))
                return 1;
        }
    }
    *pos = it.pos;
    *part = it.part;
    *nparts = it.nparts;
    return 0;
}

/* Predicted slack of a queued task: its batch's estimated deadline - now - its cost. */
static double slack_of(const dh__sched *s, const heap_item *it, double now)
{
    int64_t st = it->pos / s->G;
    double c = task_cost(s, it->pos) / (it->nparts > 0 ? it->nparts : 1);
    return s->cur_time + s->step_start[st] - s->step_start[s->cur_step] - now - c;
}

typedef struct {
    double slack, cost;
} queued_task;

static int by_slack(const void *a, const void *b)
{
    double x = ((const queued_task *)a)->slack, y = ((const queued_task *)b)->slack;
    return (x > y) - (x < y);
}

/*
 * Node b's predicted worst lateness if only its own workers take its queued
 * tasks: list scheduling, in slack order, onto its workers from the times
 * they are predicted to be free. A task deep in a backlog is late even when
 * the least-slack one could still start in time. Looks at the heap's first
 * DH_LEND_LOOK entries (its most urgent, roughly).
 */
#define DH_LEND_LOOK 64
static double backlog_lateness(dh__sched *s, int b, double now)
{
    /*
     * Every idle worker of every other node asks this after every event: the answer is
     * kept until b's queue or workers change (node_ver) or deadlines move (epoch: a step
     * taken or finished). Calibration drifts slowly and is picked up at the next change;
     * an idle worker of b whose predicted free time has passed would take a task (and
     * change node_ver) before the clock could matter.
     */
    if (s->lend_memo_ver[b] == s->node_ver[b] && s->lend_memo_epoch[b] == s->epoch)
        return s->lend_memo_val[b];
    int64_t n = DH_MIN(s->heap_n[b], (int64_t)DH_LEND_LOOK);
    int wpn = s->workers_per_node;
    queued_task *q = s->lend_tasks;
    double *free_at = s->lend_free;
    for (int64_t i = 0; i < n; i++) {
        const heap_item *it = &s->heap[b][i];
        q[i].cost = task_cost(s, it->pos) / (it->nparts > 0 ? it->nparts : 1);
        q[i].slack = slack_of(s, it, now);
    }
    qsort(q, (size_t)n, sizeof *q, by_slack);
    for (int w = 0; w < wpn; w++)
        free_at[w] = DH_MAX(now, s->worker_free[b * wpn + w]);
    double worst = -1e300;
    for (int64_t i = 0; i < n; i++) {
        int first = 0;
        for (int w = 1; w < wpn; w++)
            first = free_at[w] < free_at[first] ? w : first;
        worst = DH_MAX(worst, free_at[first] - now - q[i].slack); /* its end - its deadline */
        free_at[first] += q[i].cost;
    }
    s->lend_memo_ver[b] = s->node_ver[b];
    s->lend_memo_epoch[b] = s->epoch;
    s->lend_memo_val[b] = worst;
    return worst;
}

/*
 * CPU readiness skew across nodes (helix): a worker with nothing to do on its
 * own node takes the least-slack task of the other node whose queued tasks
 * are predicted latest (backlog_lateness), when that lateness exceeds the
 * cost of shipping the prepared sample back (bytes over the network plus
 * latency) times 1 + 4 x the CPU prediction error. Returns the node to take
 * from, or -1; *ship gets the shipping time.
 */
static int lend_from(dh__sched *s, int home, double now, double *ship)
{
    /* The latest node is the same for every idle worker until something changes (home's
     * own queue is empty, or it would not ask, so no answer names it). */
    if (s->best_ver != s->lend_ver) {
        s->best_node = -1;
        s->best_late = 0;
        for (int b = 0; b < s->nodes; b++) {
            if (!s->heap_n[b])
                continue;
            double late = backlog_lateness(s, b, now);
            if (late > s->best_late)
                s->best_node = b, s->best_late = late;
        }
        s->best_ver = s->lend_ver;
    }
    int best = s->best_node == home ? -1 : s->best_node;
    double best_late = s->best_late;
    if (best < 0)
        return -1;
    int64_t bytes = s->cfg.pred.bytes[s->cfg.order[s->heap[best][0].pos]];
    *ship = (double)bytes / s->cfg.net_bandwidth + s->cfg.net_latency;
    s->reb.lend_considered++;
    if (best_late <= (1.0 + 4.0 * dh__calib_cpu_mape(&s->calib)) * *ship) {
        s->reb.lend_gated++;
        return -1;
    }
    s->reb.lent++;
    s->reb.bytes_shipped += bytes;
    return best;
}

int dh__sched_next_task(dh__sched *s, int worker, double now, dh__task *out)
{
    int64_t pos;
    int32_t part = 0, nparts = 1;
    double ship = 0;
    if (s->cfg.policy == DH_POL_LOCAL) {
        if (local_next(s, worker, &pos))
            return 1;
    } else {
        if (admit(s))
            return 1;
        int node = worker / s->workers_per_node;
        if (shared_lst(s)) {
            if (lst_next(s, node, now, &pos, &part, &nparts)) {
                int from = s->cfg.policy == DH_POL_HELIX && s->nodes > 1
                               ? lend_from(s, node, now, &ship)
                               : -1;
                if (from < 0 || lst_next(s, from, now, &pos, &part, &nparts))
                    return 1;
            }
        } else {
            if (s->fifo_head[node] == s->fifo_tail[node])
                return 1;
            pos = s->fifo[node][s->fifo_head[node]++];
        }
    }
    out->ship_s = ship;
    out->pos = pos;
    out->step = pos / s->G;
    out->sample = s->cfg.order[pos];
    out->rank = s->rank_of[pos];
    out->worker = worker;
    out->part = part;
    out->nparts = nparts;
    out->pred_cost = task_cost(s, pos) / nparts;
    if (worker < s->nworkers) {
        s->worker_free[worker] = now + out->pred_cost;
        touch_node(s, worker / s->workers_per_node);
    }
    return 0;
}

int dh__sched_task_done(dh__sched *s, const dh__task *t, double now, double measured,
                        double revealed_gpu)
{
    int32_t n = t->nparts > 0 ? t->nparts : 1;
    if (t->worker >= 0 && t->worker < s->nworkers) {
        s->worker_free[t->worker] = now;
        touch_node(s, t->worker / s->workers_per_node);
    }
    if (measured >= 0) /* a failed task's time says nothing about decoding */
        dh__calib_cpu_observe(&s->calib, s->cfg.pred.cls[t->sample], s->task_pred[t->pos] / n,
                              measured - (n > 1 ? DH_SPLIT_PART_OVERHEAD_S : 0));
    if (n > 1 && --s->parts_left[t->pos] > 0)
        return 0; /* other parts of this sample are still running */
    s->revealed[t->pos] = (float)revealed_gpu;
    s->done[t->pos] = 1;
    batch_rec *b = &s->batch[t->step * s->R + s->rank_of[t->pos]];
    return ++b->ndone == b->ntasks;
}

int dh__sched_last_part(const dh__sched *s, const dh__task *t)
{
    return t->nparts <= 1 || s->parts_left[t->pos] <= 1;
}

int dh__sched_batch_ready(const dh__sched *s, int64_t step, int rank)
{
    if (step >= s->planned)
        return 0;
    const batch_rec *b = &s->batch[step * s->R + rank];
    return b->admitted && b->ndone == b->ntasks;
}

void dh__sched_batch_taken(dh__sched *s, int rank, int64_t step, double now)
{
    touch_all(s); /* deadlines move */
    s->taken[rank] = DH_MAX(s->taken[rank], step + 1);
    if (step > s->cur_step || (step == 0 && s->cur_time == 0)) {
        s->cur_step = step;
        s->cur_time = now; /* deadlines of later steps count from here */
    }
}

/* Slowest rank of a step under a placement, with exact costs where known. */
static double step_max(const dh__sched *s, int64_t st, const int32_t *rank_of, double *load)
{
    memset(load, 0, (size_t)s->R * sizeof *load);
    for (int64_t k = 0; k < s->G; k++) {
        int64_t pos = st * s->G + k;
        double g = s->revealed[pos] >= 0 ? s->revealed[pos] : sample_gpu(s, s->cfg.order[pos]);
        load[rank_of[pos]] += g;
    }
    double m = 0;
    for (int r = 0; r < s->R; r++)
        m = DH_MAX(m, load[r]);
    return m;
}

void dh__sched_step_done(dh__sched *s, int rank, int64_t step, double now, double gpu_time)
{
    touch_all(s);
    (void)now;
    batch_rec *b = &s->batch[step * s->R + rank];
    if (b->finished)
        return;
    b->finished = 1;
    s->mem_in_use -= b->bytes;
    if (b->ntasks > 0)
        dh__calib_gpu_observe(&s->calib, b->pred_gpu_raw, gpu_time);
    if (++s->finished_ranks[step] == s->R && s->cfg.policy == DH_POL_HELIX) {
        /* Realised gain: the step's slowest rank before and after its moves, exact costs. */
        s->reb.realised_gain_s += step_max(s, step, s->orig_rank, s->plan_gpu) -
                                  step_max(s, step, s->rank_of, s->plan_gpu);
    }
}

/* 1 when the plan keeps every rank that receives samples within the per-rank caps. */
static int plan_within_caps(const dh__sched *s, int64_t st, const int32_t *rank_of)
{
    if (!s->cfg.rank_token_cap && !s->cfg.rank_byte_cap)
        return 1;
    int64_t *tok = calloc((size_t)s->R * 2, sizeof *tok);
    uint8_t *gains = calloc((size_t)s->R, 1);
    int ok = tok && gains;
    int64_t *byt = ok ? tok + s->R : NULL;
    for (int64_t k = 0; ok && k < s->G; k++) {
        int64_t i = s->cfg.order[st * s->G + k];
        tok[rank_of[k]] += s->cfg.pred.tokens ? s->cfg.pred.tokens[i] : 0;
        byt[rank_of[k]] += s->cfg.pred.bytes[i];
        gains[rank_of[k]] |= rank_of[k] != s->rank_of[st * s->G + k];
    }
    for (int r = 0; ok && r < s->R; r++)
        if (gains[r] && ((s->cfg.rank_token_cap && tok[r] > s->cfg.rank_token_cap) ||
                         (s->cfg.rank_byte_cap && byt[r] > s->cfg.rank_byte_cap)))
            ok = 0;
    free(tok);
    free(gains);
    return ok;
}

/*
 * The rebalancing plan of one step (DESIGN.md mechanism 4, GPU residual skew
 * inside a node). Prepared samples have exact costs (revealed); the others
 * stay where they are and weigh their predicted cost, and so does every
 * sample of a frozen rank (the engine is still writing into its batch).
 * The planner improves the current placement of the movable samples over
 * the open ranks, on top of those fixed loads (only moves that lower the
 * step's maximum), and the whole plan is applied if its gain beats its
 * cost: the most bytes any rank receives over the move bandwidth, plus
 * latency, times 1 + 4 x the GPU prediction error (noisier estimates move
 * less). A plan that would put a receiving rank over a per-rank cap, or
 * that the engine's accept callback turns down, is refused.
 */
void dh__sched_rebalance(dh__sched *s, int64_t st, double now, const uint8_t *frozen,
                         dh__reb_accept accept, void *ctx)
{
    (void)now;
    if (s->cfg.policy != DH_POL_HELIX || st >= s->planned)
        return;
    batch_rec *b = s->batch + st * s->R;
    for (int r = 0; r < s->R; r++)
        if (!b[r].admitted || b[r].finished)
            return; /* moves stay inside admitted, untaken batches */
    int64_t base = st * s->G, n = 0;
    int R = s->R, open = 0;
    /* Planning scratch: fixed loads per rank; cost, position and bytes per movable sample. */
    double *fixed = s->plan_cpu, *mov_gpu = s->plan_gpu;
    int64_t *pos_of = s->plan_bytes, *mov_bytes = s->plan_tokens;
    int32_t *start = malloc((size_t)s->G * sizeof *start), *plan = malloc((size_t)s->G * sizeof *plan);
    int32_t *cidx = malloc((size_t)R * 2 * sizeof *cidx), *rank_at = cidx + R; /* open ranks */
    double *loads = malloc((size_t)R * 2 * sizeof *loads), *cfixed = loads + R;
    int32_t *new_rank = malloc((size_t)s->G * sizeof *new_rank);
    if (!start || !plan || !cidx || !loads || !new_rank)
        goto done;
    for (int r = 0; r < R; r++) {
        fixed[r] = 0;
        cidx[r] = frozen && frozen[r] ? -1 : open;
        if (cidx[r] >= 0)
            rank_at[open++] = r;
    }
    for (int64_t k = 0; k < s->G; k++) {
        int64_t p = base + k;
        if (s->done[p] && s->revealed[p] >= 0 && cidx[s->rank_of[p]] >= 0) {
            pos_of[n] = p;
            mov_gpu[n] = s->revealed[p];
            mov_bytes[n] = s->cfg.pred.bytes[s->cfg.order[p]];
            n++;
        } else {
            fixed[s->rank_of[p]] += s->done[p] && s->revealed[p] >= 0 ? s->revealed[p]
                                                                        : sample_gpu(s, s->cfg.order[p]);
        }
    }
    if (n == 0 || open < 2)
        goto done;
    double old_max = 0, frozen_max = 0;
    memcpy(loads, fixed, (size_t)R * sizeof *loads);
    for (int64_t i = 0; i < n; i++) {
        start[i] = cidx[s->rank_of[pos_of[i]]];
        loads[s->rank_of[pos_of[i]]] += mov_gpu[i];
    }
    for (int r = 0; r < R; r++) {
        old_max = DH_MAX(old_max, loads[r]);
        if (cidx[r] < 0)
            frozen_max = DH_MAX(frozen_max, fixed[r]);
        else
            cfixed[cidx[r]] = fixed[r];
    }
    dh__part_in in = {.n = (int)n, .ranks = open, .gpu = mov_gpu, .base_gpu = cfixed,
                      .initial = start};
    dh__part_out po;
    if (dh__partition(&in, plan, &po))
        goto done;
    int64_t moves = 0, bytes = 0, remote = 0;
    double *in_time = loads; /* reused: per-rank receive time */
    for (int r = 0; r < R; r++)
        in_time[r] = 0;
    for (int64_t i = 0; i < n; i++) {
        int from = rank_at[start[i]], to = rank_at[plan[i]];
        plan[i] = to;
        if (to != from) { /* across nodes over the network, else a local handoff */
            int net = node_of_rank(s, to) != node_of_rank(s, from);
            moves++;
            remote += net;
            bytes += mov_bytes[i];
            in_time[to] += (double)mov_bytes[i] / (net ? s->cfg.net_bandwidth : s->cfg.move_bandwidth);
        }
    }
    s->reb.plans++;
    s->reb.considered += moves;
    if (!moves)
        goto done;
    double cost = 0;
    for (int r = 0; r < R; r++)
        cost = DH_MAX(cost, in_time[r]);
    cost += remote ? s->cfg.net_latency : s->cfg.move_latency;
    s->last_plan_cost = cost;
    cost *= s->reb.move_factor; /* what the engine measured moves to cost against this model */
    double margin = 1.0 + 4.0 * dh__calib_gpu_mape(&s->calib);
    double gain = old_max - DH_MAX(po.max_gpu, frozen_max);
    if (gain <= margin * cost) {
        s->reb.gated += moves;
        goto done;
    }
    memcpy(new_rank, s->rank_of + base, (size_t)s->G * sizeof *new_rank);
    for (int64_t i = 0; i < n; i++)
        new_rank[pos_of[i] - base] = plan[i];
    if (!plan_within_caps(s, st, new_rank) || (accept && accept(ctx, st, new_rank))) {
        s->reb.refused += moves;
        goto done;
    }
    memcpy(s->rank_of + base, new_rank, (size_t)s->G * sizeof *new_rank);
    regroup(s, st);
    s->reb.plans_applied++;
    s->reb.moved += moves;
    s->reb.bytes_moved += bytes;
    s->reb.predicted_gain_s += gain;
done:
    free(start);
    free(plan);
    free(cidx);
    free(loads);
    free(new_rank);
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

const dh__reb_stats *dh__sched_reb_stats(const dh__sched *s)
{
    return &s->reb;
}

int32_t dh__sched_batch_samples(dh__sched *s, int64_t step, int rank, int64_t *out, int32_t cap)
{
    if (ensure_planned(s, step) || step >= s->N)
        return 0;
    const batch_rec *b = &s->batch[step * s->R + rank];
    for (int32_t k = 0; k < b->ntasks && k < cap; k++)
        out[k] = s->cfg.order[s->members[step * s->G + b->first + k]];
    return b->ntasks;
}

int dh__sched_rank_of(dh__sched *s, int64_t step, int64_t k)
{
    if (step >= s->N || k >= s->G || ensure_planned(s, step))
        return -1;
    return s->rank_of[step * s->G + k];
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
    return s->cfg.policy == DH_POL_LOCAL ? s->R * s->k_local : s->W;
}

int dh__sched_worker_rank(const dh__sched *s, int worker)
{
    return s->cfg.policy == DH_POL_LOCAL ? worker / s->k_local : -1;
}

void dh__sched_free(dh__sched *s)
{
    if (!s)
        return;
    free(s->batch);
    free(s->rank_of);
    free(s->members);
    free(s->step_start);
    free(s->task_pred);
    free(s->parts_left);
    free(s->revealed);
    free(s->done);
    free(s->orig_rank);
    free(s->finished_ranks);
    for (int n = 0; n < s->nodes; n++) {
        if (s->fifo)
            free(s->fifo[n]);
        if (s->heap)
            free(s->heap[n]);
    }
    free(s->fifo);
    free(s->fifo_head);
    free(s->fifo_tail);
    free(s->heap);
    free(s->heap_n);
    free(s->heap_cap);
    free(s->taken);
    free(s->worker_step);
    free(s->worker_free);
    free(s->lend_free);
    free(s->lend_tasks);
    free(s->lend_memo_ver);
    free(s->lend_memo_epoch);
    free(s->node_ver);
    free(s->lend_memo_val);
    free(s->plan_gpu);
    free(s->plan_cpu);
    free(s->plan_fill);
    free(s->plan_tokens);
    free(s->plan_bytes);
    free(s);
}

int dh__sched_new(const dh__sched_config *cfg, dh__sched **out)
{
    if (!cfg || !out || cfg->ranks < 1 || cfg->workers < 1 || cfg->global_batch < 1 ||
        cfg->steps < 0 || (unsigned)cfg->policy >= DH_POL_COUNT || !cfg->order ||
        cfg->nodes < 0 || (cfg->nodes > 1 && (cfg->ranks % cfg->nodes || cfg->workers % cfg->nodes)))
        return DH_EINVAL;
    dh__sched *s = calloc(1, sizeof *s);
    if (!s)
        return DH_ENOMEM;
    s->cfg = *cfg;
    s->G = cfg->global_batch;
    s->N = cfg->steps;
    s->R = cfg->ranks;
    s->W = cfg->workers;
    s->k_local = DH_MAX(1, s->W / s->R);
    dh__calib_init(&s->calib);
    size_t nb = (size_t)(s->N * s->R + 1), np = (size_t)(s->N * s->G + 1);
    int nw = dh__sched_worker_count(s);
    s->batch = calloc(nb, sizeof *s->batch);
    s->rank_of = malloc(np * sizeof *s->rank_of);
    s->members = malloc(np * sizeof *s->members);
    s->step_start = calloc((size_t)s->N + 1, sizeof *s->step_start);
    s->task_pred = malloc(np * sizeof *s->task_pred);
    s->nodes = cfg->nodes > 0 ? cfg->nodes : 1;
    s->ranks_per_node = s->R / s->nodes;
    s->workers_per_node = DH_MAX(1, s->W / s->nodes);
    s->fifo = calloc((size_t)s->nodes, sizeof *s->fifo);
    s->fifo_head = calloc((size_t)s->nodes, sizeof *s->fifo_head);
    s->fifo_tail = calloc((size_t)s->nodes, sizeof *s->fifo_tail);
    s->heap = calloc((size_t)s->nodes, sizeof *s->heap);
    s->heap_n = calloc((size_t)s->nodes, sizeof *s->heap_n);
    s->heap_cap = calloc((size_t)s->nodes, sizeof *s->heap_cap);
    for (int n = 0; s->fifo && n < s->nodes; n++)
        if (!(s->fifo[n] = malloc(np * sizeof **s->fifo)))
            break;
    s->parts_left = calloc(np, sizeof *s->parts_left);
    s->revealed = malloc(np * sizeof *s->revealed);
    s->done = calloc(np, sizeof *s->done);
    s->orig_rank = malloc(np * sizeof *s->orig_rank);
    s->finished_ranks = calloc((size_t)s->N + 1, sizeof *s->finished_ranks);
    s->taken = calloc((size_t)s->R, sizeof *s->taken);
    s->worker_step = malloc((size_t)nw * sizeof *s->worker_step);
    s->nworkers = nw;
    s->worker_free = calloc((size_t)nw, sizeof *s->worker_free);
    s->lend_free = calloc((size_t)nw, sizeof *s->lend_free);
    s->lend_tasks = malloc(DH_LEND_LOOK * sizeof(queued_task));
    s->lend_memo_ver = calloc((size_t)s->nodes, sizeof *s->lend_memo_ver);
    s->lend_memo_epoch = calloc((size_t)s->nodes, sizeof *s->lend_memo_epoch);
    s->node_ver = calloc((size_t)s->nodes, sizeof *s->node_ver);
    s->lend_memo_val = calloc((size_t)s->nodes, sizeof *s->lend_memo_val);
    s->epoch = 1; /* memos start invalid (epoch 0) */
    s->plan_gpu = malloc((size_t)DH_MAX(s->G, (int64_t)s->R) * sizeof *s->plan_gpu);
    s->plan_cpu = malloc((size_t)DH_MAX(s->G, (int64_t)s->R) * sizeof *s->plan_cpu);
    s->plan_fill = malloc((size_t)s->R * sizeof *s->plan_fill);
    s->plan_tokens = malloc((size_t)s->G * sizeof *s->plan_tokens);
    s->plan_bytes = malloc((size_t)s->G * sizeof *s->plan_bytes);
    if (!s->plan_tokens || !s->plan_bytes || !s->plan_gpu || !s->plan_cpu || !s->plan_fill || !s->batch || !s->rank_of || !s->members || !s->step_start || !s->task_pred || !s->fifo || !s->fifo[s->nodes - 1] || !s->fifo_head || !s->fifo_tail ||
        !s->heap || !s->heap_n || !s->heap_cap || !s->parts_left || !s->revealed || !s->done || !s->orig_rank ||
        !s->finished_ranks ||
        !s->taken || !s->worker_step || !s->worker_free || !s->lend_free || !s->lend_tasks ||
        !s->lend_memo_ver || !s->lend_memo_epoch || !s->node_ver || !s->lend_memo_val) {
        dh__sched_free(s);
        return DH_ENOMEM;
    }
    for (int w = 0; w < nw; w++)
        s->worker_step[w] = w % s->k_local;
    for (size_t i = 0; i < np; i++)
        s->revealed[i] = -1.0f;
    if (!s->cfg.move_bandwidth)
        s->cfg.move_bandwidth = 20e9;
    if (!s->cfg.move_latency)
        s->cfg.move_latency = 5e-6;
    s->reb.move_factor = 1.0;
    if (!s->cfg.net_bandwidth)
        s->cfg.net_bandwidth = 100e9 / 8;
    if (!s->cfg.net_latency)
        s->cfg.net_latency = 20e-6;
    *out = s;
    return 0;
}
