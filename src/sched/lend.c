/*
 * lend.c - CPU readiness across nodes (helix; the simulator's nodes): a
 * worker with nothing to do on its own node prepares another node's late
 * sample and ships it back, when the predicted lateness beats the shipping
 * cost (mechanism 4, its CPU side).
 *
 * DESIGN: lending reads every node's queue, workers and deadlines, and every
 * idle worker of every other node asks after every event, so its answers
 * are memoised: per node until that node's queue or workers change
 * (node_ver) or deadlines move (epoch), and the latest node overall until
 * anything lending reads changes (lend_ver). The latest node is found in a
 * tournament tree over the nodes, in which only the nodes changed since the
 * last question are computed again (O(changed x log nodes), where scanning
 * every node made each question O(nodes): half of a 1,024-node simulation);
 * a deadline move (a new step taken) recomputes them all, once a step.
 */
#include "sched_int.h"

#include <math.h>
#include <stdlib.h>

/* Looks at the heap's first DH_LEND_LOOK entries (its most urgent, roughly). */
#define DH_LEND_LOOK 64

typedef struct {
    double slack, cost;
} queued_task;

static int by_slack(const void *a, const void *b)
{
    double x = ((const queued_task *)a)->slack, y = ((const queued_task *)b)->slack;
    return (x > y) - (x < y);
}

int dh__lend_init(dh__sched *s)
{
    size_t nodes = (size_t)s->nodes;
    s->lend_free = dh__calloc((size_t)s->nworkers, sizeof *s->lend_free);
    s->lend_tasks = dh__malloc(DH_LEND_LOOK * sizeof(queued_task));
    s->lend_memo_ver = dh__calloc(nodes, sizeof *s->lend_memo_ver);
    s->lend_memo_epoch = dh__calloc(nodes, sizeof *s->lend_memo_epoch);
    s->node_ver = dh__calloc(nodes, sizeof *s->node_ver);
    s->lend_memo_val = dh__calloc(nodes, sizeof *s->lend_memo_val);
    s->epoch = 1; /* memos start invalid (epoch 0) */
    for (s->lend_P = 1; s->lend_P < s->nodes; s->lend_P *= 2)
        ;
    s->lend_tree = dh__malloc(2 * (size_t)s->lend_P * sizeof *s->lend_tree);
    s->lend_leaf = dh__malloc(nodes * sizeof *s->lend_leaf);
    s->lend_dirty = dh__calloc(nodes, 1);
    s->lend_dirty_list = dh__malloc(nodes * sizeof *s->lend_dirty_list);
    s->lend_all_dirty = 1;
    if (!s->lend_free || !s->lend_tasks || !s->lend_memo_ver || !s->lend_memo_epoch ||
        !s->node_ver || !s->lend_memo_val || !s->lend_tree || !s->lend_leaf || !s->lend_dirty ||
        !s->lend_dirty_list)
        return DH_ENOMEM;
    return 0;
}

void dh__lend_free(dh__sched *s)
{
    free(s->lend_free);
    free(s->lend_tasks);
    free(s->lend_memo_ver);
    free(s->lend_memo_epoch);
    free(s->node_ver);
    free(s->lend_memo_val);
    free(s->lend_tree);
    free(s->lend_leaf);
    free(s->lend_dirty);
    free(s->lend_dirty_list);
}

/*
 * Node b's predicted worst lateness if only its own workers take its queued
 * tasks: list scheduling, in slack order, onto its workers from the times
 * they are predicted to be free. A task deep in a backlog is late even when
 * the least-slack one could still start in time. Calibration drifts slowly
 * and is picked up at the next change; an idle worker of b whose predicted
 * free time has passed would take a task (and change node_ver) before the
 * clock could matter.
 */
double dh__lend_lateness(dh__sched *s, int b, double now)
{
    if (s->lend_memo_ver[b] == s->node_ver[b] && s->lend_memo_epoch[b] == s->epoch)
        return s->lend_memo_val[b];
    int64_t n = DH_MIN(s->queue[b].n, (int64_t)DH_LEND_LOOK);
    int wpn = s->workers_per_node;
    queued_task *q = s->lend_tasks;
    double *free_at = s->lend_free;
    for (int64_t i = 0; i < n; i++) {
        const heap_item *it = &s->queue[b].a[i];
        q[i].cost = task_cost(s, it->pos) / (it->nparts > 0 ? it->nparts : 1);
        q[i].slack = dh__lst_slack(s, it, now);
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

/* The later of two tree entries (node indices, -1 for none), ties to the lower node. */
static int later(const dh__sched *s, int a, int b)
{
    if (a < 0 || b < 0)
        return a < 0 ? b : a;
    return s->lend_leaf[b] > s->lend_leaf[a] ? b : a;
}

/* Node b's leaf again (its lateness now, -inf with an empty queue) and the path above it. */
static void tree_set(dh__sched *s, int b, double now)
{
    s->lend_leaf[b] = s->queue[b].n ? dh__lend_lateness(s, b, now) : -INFINITY;
    for (int i = (s->lend_P + b) / 2; i >= 1; i /= 2)
        s->lend_tree[i] = later(s, s->lend_tree[2 * i], s->lend_tree[2 * i + 1]);
}

/* Brings the tree up to date with what changed since the last question. */
static void tree_update(dh__sched *s, double now)
{
    if (s->lend_all_dirty) {
        for (int i = 0; i < s->lend_P; i++) {
            int b = i < s->nodes ? i : -1;
            if (b >= 0)
                s->lend_leaf[b] = s->queue[b].n ? dh__lend_lateness(s, b, now) : -INFINITY;
            s->lend_tree[s->lend_P + i] = b;
        }
        for (int i = s->lend_P - 1; i >= 1; i--)
            s->lend_tree[i] = later(s, s->lend_tree[2 * i], s->lend_tree[2 * i + 1]);
    } else {
        for (int k = 0; k < s->lend_ndirty; k++)
            tree_set(s, s->lend_dirty_list[k], now);
    }
    for (int k = 0; k < s->lend_ndirty; k++)
        s->lend_dirty[s->lend_dirty_list[k]] = 0;
    s->lend_ndirty = 0;
    s->lend_all_dirty = 0;
}

/*
 * The node an idle worker of `home` should take from: the other node whose
 * queued tasks are predicted latest (backlog_lateness), when that lateness
 * exceeds the cost of shipping the prepared sample back (bytes over the
 * network plus latency) times 1 + 4 x the CPU prediction error. Returns the
 * node, or -1; *ship gets the shipping time.
 */
int dh__lend_from(dh__sched *s, int home, double now, double *ship)
{
    /* The latest node is the same for every idle worker until something changes (home's
     * own queue is empty, or it would not ask, so no answer names it). */
    if (s->best_ver != s->lend_ver) {
        tree_update(s, now);
        int top = s->lend_tree[1];
        s->best_node = top >= 0 && s->lend_leaf[top] > 0 ? top : -1;
        s->best_late = s->best_node >= 0 ? s->lend_leaf[top] : 0;
        s->best_ver = s->lend_ver;
    }
    int best = s->best_node == home ? -1 : s->best_node;
    if (best < 0)
        return -1;
    int64_t bytes = s->slot_bytes[at(s, s->queue[best].a[0].pos)];
    *ship = (double)bytes / s->cfg.net_bandwidth + s->cfg.net_latency;
    s->reb.lend_considered++;
    if (s->best_late <= (1.0 + 4.0 * dh__calib_cpu_mape(&s->calib)) * *ship) {
        s->reb.lend_gated++;
        return -1;
    }
    s->reb.lent++;
    s->reb.bytes_shipped += bytes;
    return best;
}
