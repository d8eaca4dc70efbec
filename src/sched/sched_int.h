/*
 * sched_int.h - the scheduler's state, shared by its rooms (internal to
 * src/sched): sched.c (admission, the pull interface), planning.c (drawing
 * and placing steps, the kept failure), state.c (creation, the window's
 * rings), lst.c (least slack and splitting), baseline.c (the local and FIFO
 * services), rebalance.c and lend.c. Nothing outside src/sched includes it.
 * Calls go one way: sched.c calls the rooms, the rooms call planning.c and
 * state.c, which call no room.
 *
 * DESIGN: the step window. A step's state (its samples, placement, batch
 * records, task progress) lives from the moment it is planned until every
 * rank has finished it and a later step has been taken; steps [lo, planned)
 * occupy slots step & (cap - 1) of power-of-two rings that double when the
 * window outgrows them and never depend on the run's length. A task's
 * position `pos` is global (step * G + k); at() maps it to its slot.
 */
#ifndef DH_SCHED_INT_H
#define DH_SCHED_INT_H

#include "sched.h"

#include "../core/heap.h"
#include "../plan/plan.h"

/* Classes of GPU cost a step is dealt to nodes by (planning.c): two to an octave. */
#define DEAL_CLASSES 64
#define DH_HALF_OCTAVES 4096 /* dh__cost_half_octave's values */
#define BELOW_CLIP 254 /* a replica's table of half-octaves: 254 or more below, or no cost */

typedef struct {
    int64_t bytes;
    double pred_gpu_raw; /* uncalibrated predicted compute (sum of sample costs) */
    double lead;         /* its staggered lead (lst.c), once its step's leads are set */
    int32_t first;       /* into members[] of the step: positions of this batch */
    int32_t ntasks, ndone, nissued;
    uint8_t admitted; /* (finished: s->rank_finished) */
} batch_rec;

typedef struct {
    double key;
    int64_t pos;
    int32_t part, nparts; /* nparts 0: whole sample, not yet considered for splitting */
} heap_item;

/* Least slack's order (lst.c): the key, then the earlier position, then the lower part. */
static inline int heap_before(const heap_item *a, const heap_item *b)
{
    if (a->key != b->key)
        return a->key < b->key;
    if (a->pos != b->pos)
        return a->pos < b->pos;
    return a->part < b->part;
}

static inline double heap_key(const heap_item *a)
{
    return a->key;
}

DH_HEAP_DEFINE(task_heap, heap_item, heap_before)
/* a node's queue of tasks: task_heap_q (heap.h), tiered unless lending reads it (state.c) */
DH_TIERS_DEFINE(task_heap, heap_item, heap_before, heap_key)

/* A growable FIFO of task positions (pool, helix-fifo): one per node. */
typedef struct {
    int64_t *pos;
    int64_t head, tail;
    size_t cap;
} pos_fifo;

typedef struct {
    double cpu; /* a batch's predicted CPU */
    int32_t i;  /* its rank within its node */
} dh__lead_key;

struct dh__sched {
    dh__sched_config cfg;
    const dh__policy_caps *caps;
    int64_t G, N; /* N: steps of the run (DH__STEPS_UNBOUNDED until stopped) */
    int R, W, k_local;
    dh__calib calib;
    dh__calib plan_calib;    /* what placement reads: calib, or the start's on a replica */
    /* the step window: live steps [lo, planned), slot = step & (cap - 1) */
    int64_t lo, cap;
    batch_rec *batch;        /* cap * R */
    int64_t *order;          /* cap * G: the step's sample indices, from the order source */
    int32_t *rank_of;        /* cap * G */
    int64_t *members;        /* cap * G: global positions grouped by (step, rank) */
    float *task_pred;        /* cap * G: raw predicted cost */
    double *slot_gpu;        /* cap * G: the sample's predicted GPU cost (sample_gpu) */
    int64_t *slot_bytes;     /* cap * G: its bytes; these three read once when the step is
                              * drawn, where a sample's own tables are a cache miss each time */
    uint8_t *slot_cls;       /* cap * G: its class (the CPU calibration's) */
    int32_t *slot_segs;      /* cap * G: its keyframe segments (1 without): drawn with the
                              * rest, or on a replica when its task is queued (plan_step) */
    int32_t *parts_left;     /* cap * G: parts of a split sample still running or queued,
                              * written when it is split (dh__lst_next) and read only for a
                              * split sample's tasks: not cleared as a step is planned (its
                              * G entries a step were a tenth of a replica's writes) */
    float *revealed;         /* cap * G: exact GPU cost once prepared; < 0 until then */
    uint8_t *done;           /* cap * G: sample fully prepared */
    int32_t *orig_rank;      /* cap * G: placement before rebalancing (realised gain); on a
                              * replica, for a node's samples once it is settled */
    double *step_start;      /* cap: D(s), predicted start of step s, for s in [lo, planned] */
    int32_t *finished_ranks; /* cap: ranks done with the step */
    uint8_t *rank_finished;  /* cap * R: rank r done with the step (step_done); apart from its
                              * batch record, whose line is long cold when another node's rank
                              * finishes (bench/RESULTS.md, "A replica's step is memory") */
    int32_t *group;          /* cap * DH_MOVE_GROUP: a replica's group of nodes in the step's
                              * moves, -1 ended (none: no plan), rebalance.c */
    int32_t *node_pos;       /* cap * G, a deal to nodes: each node's positions, ascending,
                              * node after node (place_balanced); NULL without a deal */
    int32_t *node_end;       /* cap * (nodes + 1): node n's are node_pos[end[n], end[n + 1]);
                              * end[nodes] == G once the step was dealt */
    uint8_t *settled;        /* cap * nodes: the node's share is placed as the node places it
                              * (a replica's other nodes: once their moves are planned here);
                              * until then a replica (rows_lazy) writes nothing of its
                              * batches (their records, members, done and revealed flags
                              * are not written, their lines never brought in; a walk of
                              * the whole step, regroup, after a plan that marked more
                              * than a quarter of the ranks, writes their records and
                              * members as dealt) nor gathers its samples' rows (its slot_*
                              * are not written): a reader of another node's batch checks
                              * this first (dh__sched_batch_samples counts it from
                              * node_pos) and reads none of it */
    int32_t *node_mem;       /* cap * nodes, a deal to nodes: where node n's block of the
                              * step's members starts (what settling it groups from) */
    double *first_lead;      /* cap * nodes: the step's first batch's lead on the node (lst.c) */
    uint64_t *leads_ver;     /* cap * nodes: calib_ver + 1 when the step's leads on the node
                              * were set, 0: not set (lst.c) */
    dh__reb_stats reb;
    double last_plan_cost;   /* modelled cost of the last plan the gate saw */
    uint8_t reb_quiet;       /* realised gains counted on another node (agreed plans) */
    int64_t cur_step;        /* latest step any rank has taken, and when */
    double cur_time;
    int64_t planned;         /* steps planned so far */
    int64_t cap_violations;  /* samples no rank could take within the caps */
    int error;               /* the first internal failure; every later call returns it */
    /* window of admitted batches */
    int64_t admit_next;      /* next batch index s * R + r to admit */
    int64_t mem_in_use, mem_peak;
    /* shared ready structures, one per node: each node's workers serve its ranks */
    int nodes, ranks_per_node, workers_per_node;
    pos_fifo *fifo;
    task_heap_q *queue; /* least slack's, per node: queue[n].a[0, queue[n].n) is its heap */
    /* local */
    int64_t *taken;       /* per rank: batches taken (next step it will take) */
    int64_t *worker_step; /* per local worker: batch it is building, or next to build */
    /* planning scratch, allocated once */
    double *plan_gpu, *plan_cpu;       /* max(G, R) */
    int64_t *plan_tokens, *plan_bytes; /* G */
    int32_t *plan_fill;                /* R */
    int *share_ord;                    /* G, several nodes: scratch, the deal's rotation of
                                        * each run, then a share's LPT order (place_share) */
    uint16_t *deal_class;              /* G, several nodes: each sample's half-octave */
    uint8_t *deal_key;                 /* G, several nodes: each sample's key (planning.c) */
    int32_t *deal_hist;                /* DH_HALF_OCTAVES, several nodes: the deal's counts */
    int32_t *deal_turn;                /* nodes, several nodes: the deal's round-robin */
    uint8_t *below;                    /* pred.n, a replica dealing by classes: each sample's
                                        * predicted GPU cost in half-octaves below the
                                        * dataset's heaviest (BELOW_CLIP: that many or more,
                                        * or no cost): the deal's input (rows_lazy) */
    const uint8_t *drawn_below;        /* G, NULL: each drawn sample's below, carried by the
                                        * order source with its draw (cfg.carry_bytes) */
    uint16_t half_of[BELOW_CLIP + 1];  /* below -> the half-octave it stands for (0: none) */
    int half_top;                      /* the dataset's heaviest half-octave */
    int32_t *share_rank;               /* G: a node share's ranks */
    double *share_gpu, *share_cpu;     /* G */
    int64_t *share_tokens, *share_bytes; /* G */
    int32_t *reb_i32;                  /* 3G + 3R + N: rebalancing's per-plan arrays */
    dh__lead_key *lead_keys;           /* ranks per node: lst.c's sort of a step's batches */
    int32_t *rank_node;                /* R: each rank's node (node_of_rank: no division in
                                        * the per-sample loops that read it) */
    dh__part_ws part_ws;               /* the partitioner's memory, kept between plans */
    uint64_t calib_ver;                /* CPU calibration changes so far */
    double *reb_f64;                   /* 2R (a step's groups: their loads, before a plan) */
    float *reb_known;                  /* G, several nodes: the exact costs an agreed plan
                                        * reads, from the nodes' lists (rebalance.c) */
    /* ranks whose samples changed since their step was last grouped (an applied plan, a
     * settled share): moved_list[0, nmoved), moved[r] set for each, and the regrouping's
     * scratch (dh__sched_regroup_moved: G positions, G members) */
    int32_t *moved_list, nmoved;
    uint8_t *moved;
    int32_t *moved_pos;
    int64_t *moved_mem;
    int32_t *plan_pos; /* G: dh__sched_plan_positions' answer */
    /* the groups of nodes made for step groups_step's moves (rebalance.c), made once a step */
    int64_t groups_step;
    int ngroups;
    double groups_floor, groups_step_max; /* rebalance.c's reb_target */
    int32_t *groups;                   /* 3N + 1: the nodes group by group, each group's
                                        * first, each node's group */
    /* lending */
    int nworkers;
    double *worker_free;         /* per worker: when it is predicted to be free */
    double *lend_free;           /* workers per node, scratch */
    void *lend_tasks;            /* DH_LEND_LOOK queued tasks, scratch */
    uint64_t epoch;              /* bumped when deadlines move */
    uint64_t lend_ver, best_ver; /* any change lending reads; the version best_* is for */
    int best_node;               /* lending's latest node, or -1 */
    double best_late;
    uint64_t *node_ver;          /* per node: bumped when its queue or workers change */
    uint64_t *lend_memo_ver, *lend_memo_epoch; /* per node: backlog_lateness memo */
    double *lend_memo_val;
    /* the latest node, kept as nodes change: a tournament tree over the nodes' latenesses
     * (leaves lend_P..lend_P+nodes-1 hold node indices, inner nodes the later child, ties
     * to the lower node), and the nodes changed since it was last brought up to date */
    int lend_P, *lend_tree, *lend_dirty_list, lend_ndirty, lend_all_dirty;
    double *lend_leaf;  /* per node: its lateness as the tree has it (-inf: empty queue) */
    uint8_t *lend_dirty;
};

/* Slot of a global position (step * G + k) in the cap * G rings. */
static inline int64_t at(const dh__sched *s, int64_t pos)
{
    return ((pos / s->G) & (s->cap - 1)) * s->G + pos % s->G;
}

/* A hint: the rows of slot a a pop reads (popping 1: least slack's next task) or a task's
 * completion does (0), on their way into the cache ahead of it (a miss each at scale). */
static inline void prefetch_rows(const dh__sched *s, int64_t a, int popping)
{
    __builtin_prefetch(&s->task_pred[a]);
    __builtin_prefetch(&s->slot_cls[a]);
    __builtin_prefetch(&s->rank_of[a]);
    __builtin_prefetch(&s->parts_left[a]);
    if (popping) {
        __builtin_prefetch(&s->slot_segs[a]);
        __builtin_prefetch(&s->order[a]);
    } else {
        __builtin_prefetch(&s->revealed[a]);
        __builtin_prefetch(&s->done[a]);
    }
}

/* Slot of a live step in the per-step rings. */
static inline int64_t step_slot(const dh__sched *s, int64_t st)
{
    return st & (s->cap - 1);
}

static inline batch_rec *batch_of(const dh__sched *s, int64_t st, int rank)
{
    return &s->batch[step_slot(s, st) * s->R + rank];
}

static inline double D(const dh__sched *s, int64_t st)
{
    return s->step_start[step_slot(s, st)];
}

static inline int64_t sample_at(const dh__sched *s, int64_t pos)
{
    return s->order[at(s, pos)];
}

static inline double sample_gpu(const dh__sched *s, int64_t sample)
{
    return dh__gpu_sample_cost(&s->cfg.gpu, &s->cfg.pred.row[sample].feat);
}

/* A queued task's calibrated predicted cost (whole sample). */
static inline double task_cost(const dh__sched *s, int64_t pos)
{
    int64_t a = at(s, pos);
    return dh__calib_cpu(&s->calib, s->slot_cls[a], s->task_pred[a]);
}

static inline int node_of_rank(const dh__sched *s, int rank)
{
    return s->rank_node[rank];
}

/*
 * 1 on a replica that deals its steps to nodes (several nodes of several ranks, balanced
 * placement): it reads the rows of a step's samples (slot_gpu, slot_bytes, slot_cls and,
 * unless the order source drew it, task_pred) only for the nodes it settles, when it settles
 * them, and deals the step by each sample's half-octave (below), a denser table
 * (planning.c). Until a node is settled, what a replica knows of its batches is their counts.
 */
static inline int rows_lazy(const dh__sched *s)
{
    return s->cfg.node_local && s->nodes > 1 && s->ranks_per_node > 1 &&
           s->caps->placement == DH_PLACE_BALANCED;
}

/* 1 when the replica placed rank's batch of step st as its node did (settled): its members,
 * bytes and predicted GPU are known here. */
static inline int batch_settled(const dh__sched *s, int64_t st, int rank)
{
    return s->settled[step_slot(s, st) * s->nodes + node_of_rank(s, rank)];
}

/* 1 when rank's batches are admitted, queued and counted here (sched.h: node_local). */
static inline int rank_here(const dh__sched *s, int rank)
{
    return !s->cfg.node_local || node_of_rank(s, rank) == s->cfg.node;
}

/* Lending's predictions read node queues and workers (per node) and deadlines (all). */
static inline void touch_node(dh__sched *s, int node)
{
    s->node_ver[node]++;
    s->lend_ver++;
    if (!s->lend_dirty[node]) {
        s->lend_dirty[node] = 1;
        s->lend_dirty_list[s->lend_ndirty++] = node;
    }
}

static inline void touch_all(dh__sched *s)
{
    s->epoch++;
    s->lend_ver++;
    s->lend_all_dirty = 1;
}

/* state.c */
/* Room in the window for steps [lo, st] and the start of st + 1; 0 or DH_ENOMEM. */
int dh__sched_ensure_room(dh__sched *s, int64_t st);
/* Steps every rank finished, before the latest taken one, leave the window. */
void dh__sched_retire(dh__sched *s);

/* planning.c */
/* Records the scheduler's first failure (rc < 0); every later call returns it. */
/* planning.c: positions (int32_t) in ascending order, for qsort. */
int dh__sched_by_position(const void *a, const void *b);
int dh__sched_fail(dh__sched *s, int rc);
int dh__sched_ensure_planned(dh__sched *s, int64_t st);
/* Regroups step st's positions by rank after its placement changed. */
void dh__sched_regroup(dh__sched *s, int64_t st);
/* The same after plans that moved samples only between the ranks marked moved
 * (dh__sched_mark_moved): only their batches and the members between them are rewritten;
 * clears the marks. */
void dh__sched_regroup_moved(dh__sched *s, int64_t st);

static inline void dh__sched_mark_moved(dh__sched *s, int rank)
{
    if (!s->moved[rank]) {
        s->moved[rank] = 1;
        s->moved_list[s->nmoved++] = rank;
    }
}
/* A replica places another node's share of step st as that node did, and regroups that
 * node's batches (planning.c). 1: placed now; 0: it was; < 0: an error (kept). */
int dh__sched_settle(dh__sched *s, int64_t st, int node);
/* A replica (rows_lazy) reads the rows of step st's samples on the nodes it has not settled,
 * for a plan that reads every node's predictions (one agreed without the nodes' loads). */
void dh__sched_gather_unsettled(dh__sched *s, int64_t st);

/* lst.c: least slack first, with keyframe-aligned splitting */
/* lead: seconds before its step's predicted start that the task's batch is due;
 * first_lead: the step's first batch's (dh__lst_lead) */
int dh__lst_push(dh__sched *s, int node, int64_t pos, double lead, double first_lead);
/*
 * Fewest ranks waiting: the batches of a step are due one after another, smallest
 * predicted CPU first, so that when the step cannot be fully prepared in time, whole
 * batches complete early and only the last ranks wait. The lead of batch (st, rank) is the
 * predicted CPU of the node's batches due after it, over the node's workers, at most the
 * step's predicted duration (a step's batches never go before the previous step's).
 * A step's leads on a node are set together, in one pass over the node's n batches. On a
 * node of at most DH__LEADS_EXACT_RANKS ranks (real nodes: 4 to 16 accelerators) they are set
 * again whenever the CPU calibration changed since, so every batch's lead is what it was when
 * computed alone at its admission (identical results; a per-step snapshot lost 2% on
 * simulated 64-node runs with heavy-tailed CPU). On a larger node (a simulated single node of
 * thousands of ranks) they are set once, with the calibration of the step's first admission
 * there, in O(n log n): recomputing at each admission made a step O(n^2). Regrouping the step
 * (dh__lst_leads_stale) sets them again at the next admission.
 */
#define DH__LEADS_EXACT_RANKS 64
double dh__lst_lead(dh__sched *s, int64_t st, int rank, double *first_lead);
/* Step st's placement changed: its leads are set again when next needed. */
void dh__lst_leads_stale(dh__sched *s, int64_t st);
/* 0: a task; 1: the node's queue is empty; < 0: error. */
int dh__lst_next(dh__sched *s, int node, double now, int64_t *pos, int32_t *part, int32_t *nparts);
/* A queued task's predicted slack: its batch's estimated deadline - now - its cost. */
double dh__lst_slack(const dh__sched *s, const heap_item *it, double now);

/* baseline.c: the rank-local DataLoader and FIFO services */
int dh__local_next(dh__sched *s, int worker, int64_t *pos);
int dh__fifo_push(pos_fifo *q, int64_t pos);
/* 0: a task; 1: empty. */
int dh__fifo_next(pos_fifo *q, int64_t *pos);

/* lend.c: an idle node's worker takes another node's late work */
int dh__lend_from(dh__sched *s, int home, double now, double *ship);
/* Node b's predicted worst lateness if only its own workers take its queue (memoised). */
double dh__lend_lateness(dh__sched *s, int b, double now);
int dh__lend_init(dh__sched *s);
void dh__lend_free(dh__sched *s);

/* rebalance.c: the realised gain of step st once every rank finished it */
void dh__reb_step_finished(dh__sched *s, int64_t st);

#endif
