/*
 * lst.c - least slack first over the memory-bounded window, with
 * keyframe-aligned splitting of heavy samples (mechanism 3).
 *
 * DESIGN: each node keeps one min-heap of queued tasks on the key
 * D(s) - c, where D(s) is the predicted start of step s (the prefix sum of
 * predicted step times) and c the task's calibrated predicted cost. "now"
 * shifts every slack equally, so ordering by D(s) - c is ordering by
 * slack = deadline - now - cost. Ties go to the earlier position, then the
 * lower part, so runs are deterministic. A node's queue holds several steps of
 * admitted tasks (six at 4,096 ranks: 200,000): it is tiered (heap.h), the
 * heap holding only about the most urgent eighth of them, so a pop walks a
 * heap that much smaller (and misses the cache on fewer levels).
 */
#include "sched_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int heap_push(dh__sched *s, int node, heap_item it)
{
    touch_node(s, node);
    return task_heap_qpush(&s->queue[node], it);
}

/* The most urgent task of node (its queue is not empty); 0 or DH_ENOMEM. */
static int heap_pop(dh__sched *s, int node, heap_item *out)
{
    touch_node(s, node);
    return task_heap_qpop(&s->queue[node], out);
}

/*
 * The fewest parts a task at pos of predicted cost c is split into (split_parts below):
 * a sample costlier than its step, with keyframes to cut at, into ceil(c / step) parts,
 * at least 2, at most its segments and W; any other, 1.
 */
static double least_parts(const dh__sched *s, int64_t pos, double c, int32_t *segs)
{
    int64_t st = pos / s->G;
    *segs = s->slot_segs[at(s, pos)];
    double step = D(s, st + 1) - D(s, st);
    if (!s->caps->split || *segs < 2 || c <= step)
        return 1;
    return DH_MIN(DH_MAX(ceil(c / step), 2.0), DH_MIN((double)*segs, (double)s->W));
}

int dh__lst_push(dh__sched *s, int node, int64_t pos, double lead, double first_lead)
{
    /* Its latest start is when it must start to end by its batch's due time: a task that
     * will be split ends after a part's time, not the whole sample's (counting the whole
     * put a heavy sample of the next step ahead of this step's light ones, and when CPU is
     * short every step then waits for the one before: omni-mix at 512 ranks, 30 steps,
     * the first step's ranks waited 335 ms on average, now 146, for 136 ms of its CPU over
     * the workers). */
    int32_t segs = 1;
    if (s->cfg.node_local) /* a replica reads only its own tasks' (planning read the rest) */
        s->slot_segs[at(s, pos)] =
            s->cfg.pred.segments ? s->cfg.pred.segments[sample_at(s, pos)] : 1;
    double c = task_cost(s, pos);
    c /= least_parts(s, pos, c, &segs);
    /* A task longer than the step's whole lead spread cannot wait for its batch's turn: it
     * must start with the step's first batch, or it alone makes its batch late. */
    heap_item it = {D(s, pos / s->G) - (c > first_lead ? first_lead : lead) - c, pos, 0, 0};
    return heap_push(s, node, it);
}

/* Predicted CPU seconds of batch (st, rank): the calibrated cost of its tasks. */
static double batch_cpu(const dh__sched *s, int64_t st, int rank)
{
    const batch_rec *b = batch_of(s, st, rank);
    const int64_t *mem = s->members + step_slot(s, st) * s->G + b->first;
    double c = 0;
    for (int32_t k = 0; k < b->ntasks; k++)
        c += task_cost(s, mem[k]);
    return c;
}

/* Batches are due in order of predicted CPU, ties by rank. */
static int by_cpu_then_rank(const void *a, const void *b)
{
    const dh__lead_key *x = a, *y = b;
    return x->cpu != y->cpu ? (x->cpu < y->cpu ? -1 : 1) : (x->i > y->i) - (x->i < y->i);
}

/* Sets the leads of step st's batches on `node`: each batch's is the CPU of those due after it. */
static void set_leads(dh__sched *s, int64_t st, int node)
{
    int n = s->ranks_per_node, first = node * n;
    batch_rec *b = batch_of(s, st, first);
    double all = 0, least = INFINITY, step = D(s, st + 1) - D(s, st), wpn = s->workers_per_node;
    dh__lead_key *key = s->lead_keys;
    for (int i = 0; i < n; i++) {
        key[i] = (dh__lead_key){batch_cpu(s, st, first + i), i};
        all += key[i].cpu;
        least = DH_MIN(least, key[i].cpu);
    }
    if (n <= DH__LEADS_EXACT_RANKS) { /* summed in rank order, as each batch's alone was */
        for (int i = 0; i < n; i++) {
            double after = 0;
            for (int j = 0; j < n; j++)
                if (j != i && (key[j].cpu > key[i].cpu || (key[j].cpu == key[i].cpu && j > i)))
                    after += key[j].cpu;
            b[i].lead = DH_MIN(after / wpn, step);
        }
    } else {
        qsort(key, (size_t)n, sizeof *key, by_cpu_then_rank);
        double after = 0;
        for (int i = n - 1; i >= 0; i--) {
            b[key[i].i].lead = DH_MIN(after / wpn, step);
            after += key[i].cpu;
        }
    }
    int64_t k = step_slot(s, st) * s->nodes + node;
    s->first_lead[k] = DH_MIN((all - least) / wpn, step);
    s->leads_ver[k] = s->calib_ver + 1;
}

double dh__lst_lead(dh__sched *s, int64_t st, int rank, double *first_lead)
{
    int node = node_of_rank(s, rank);
    int64_t k = step_slot(s, st) * s->nodes + node;
    uint64_t v = s->leads_ver[k];
    if (!v || (s->ranks_per_node <= DH__LEADS_EXACT_RANKS && v != s->calib_ver + 1))
        set_leads(s, st, node);
    *first_lead = s->first_lead[k];
    return batch_of(s, st, rank)->lead;
}

void dh__lst_leads_stale(dh__sched *s, int64_t st)
{
    memset(s->leads_ver + step_slot(s, st) * s->nodes, 0, (size_t)s->nodes * sizeof *s->leads_ver);
}

/* The estimated deadline of step st, as seen now (from the latest step taken). */
static double deadline_of(const dh__sched *s, int64_t st)
{
    return s->cur_time + D(s, st) - D(s, s->cur_step);
}

double dh__sched_task_slack(const dh__sched *s, const dh__task *t, double now)
{
    return deadline_of(s, t->step) - now - t->pred_cost;
}

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
    int32_t segs = 1;
    double c = task_cost(s, it->pos), parts = least_parts(s, it->pos, c, &segs);
    if (parts < 2)
        return 1;
    double left = deadline_of(s, it->pos / s->G) - now;
    if (left - c < 0.25 * c)
        parts = DH_MAX(parts, left > 0 ? ceil(1.25 * c / left) : (double)segs);
    return (int32_t)DH_MIN(parts, DH_MIN((double)segs, (double)s->W));
}

int dh__lst_next(dh__sched *s, int node, double now, int64_t *pos, int32_t *part, int32_t *nparts)
{
    if (!s->queue[node].n)
        return DH__IDLE;
    heap_item it;
    if (heap_pop(s, node, &it))
        return DH_ENOMEM;
    if (it.nparts == 0) {
        it.nparts = split_parts(s, &it, now);
        s->parts_left[at(s, it.pos)] = it.nparts;
        for (int32_t p = 1; p < it.nparts; p++) {
            heap_item rest = {it.key, it.pos, p, it.nparts};
            if (heap_push(s, node, rest))
                return DH_ENOMEM;
        }
    }
    *pos = it.pos;
    *part = it.part;
    *nparts = it.nparts;
    if (s->queue[node].n) /* most likely the next pop */
        prefetch_rows(s, at(s, s->queue[node].a[0].pos), 1);
    return 0;
}

double dh__lst_slack(const dh__sched *s, const heap_item *it, double now)
{
    double c = task_cost(s, it->pos) / (it->nparts > 0 ? it->nparts : 1);
    return deadline_of(s, it->pos / s->G) - now - c;
}
