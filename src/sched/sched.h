/*
 * sched.h - the co-scheduling brain (docs/DESIGN.md mechanisms 2 and 3) behind a
 * pull interface that both engines drive, internal.
 *
 * Engine calls, in any interleaving the engine's clock produces:
 *   next_task(worker, now)       a free worker asks for work
 *   task_done(task, now, cost)   a task finished; cost is measured seconds
 *   batch_taken(rank, step, now) rank r starts consuming batch s (it was ready)
 *   step_done(rank, step, now, gpu) rank r finished computing step s
 * and reads batch_ready(step, rank) to know when a rank may start.
 *
 * The scheduler sees predictions only (dh__pred): never ground truth. It
 * includes nothing from src/truth, and the engines hand it no truth: the
 * types say so (test_truth checks it over whole runs).
 */
#ifndef DH_SCHED_H
#define DH_SCHED_H

#include "../cost/cost.h"

typedef enum {
    DH_POL_LOCAL = 0,        /* rank-local DataLoader: private workers, whole batches in order */
    DH_POL_POOL,             /* shared actor pool: one task per sample, FIFO */
    DH_POL_HELIX,            /* balanced placement, least slack first, rebalancing, lending */
    DH_POL_HELIX_NOBALANCE,  /* stride placement, least slack first */
    DH_POL_HELIX_FIFO,       /* balanced placement, FIFO */
    DH_POL_HELIX_NOREB,      /* helix without collective rebalancing (nor lending) */
    DH_POL_COUNT
} dh__policy;

/* Which rank a sample of the global batch goes to. */
typedef enum {
    DH_PLACE_STRIDE = 0, /* DistributedSampler: sample k -> rank k mod R, equal counts */
    DH_PLACE_BALANCED    /* token-latent-aware partition (mechanism 2) */
} dh__placement;

/* In which order CPU workers take tasks. */
typedef enum {
    DH_SERVE_LOCAL = 0,  /* private workers per rank build whole batches in step order */
    DH_SERVE_FIFO,       /* shared pool, one task per sample, in admission order */
    DH_SERVE_LEAST_SLACK /* shared pool, least slack first over the window (mechanism 3) */
} dh__service;

/*
 * A policy is one row of capabilities: every ablation of helix is helix
 * with one of them turned off. The scheduler never compares policy ids.
 */
typedef struct {
    const char *name;
    dh__placement placement;
    dh__service service;
    uint8_t split;     /* heavy samples may be cut into keyframe-aligned parts */
    uint8_t rebalance; /* prepared samples may move between a step's ranks (mechanism 4) */
    uint8_t lend;      /* an idle node may prepare another node's late samples */
} dh__policy_caps;

/* The row of policy p (p < DH_POL_COUNT). */
const dh__policy_caps *dh__policy_caps_of(dh__policy p);

/* Returns the policy for a name, or -1. */
int dh__policy_from_name(const char *name);
const char *dh__policy_name(dh__policy p);
/* "local, pool, ...": every policy name, for messages; static storage. */
const char *dh__policy_list(void);

/* The prediction columns of the sample table: what a policy may read. */
typedef struct {
    int64_t n;
    const dh__sample_row *row; /* CPU prediction, GPU features, bytes, class */
    const int32_t *segments; /* independently decodable keyframe segments per sample */
    const int64_t *tokens;   /* tokens per sample (for the token cap) */
} dh__pred;

typedef struct {
    dh__policy policy;
    int ranks, workers;
    int64_t global_batch, steps;
    int64_t memory_budget;   /* bytes of admitted, not yet consumed batches */
    int held_in_slack;       /* served: a batch its trainer holds is in the pool's slack, not
                              * in memory_budget (the latest taken step's too) */
    int64_t rank_token_cap, rank_byte_cap; /* balanced placement caps; 0: none */
    double move_bandwidth;   /* bytes/s of moving a prepared sample between ranks (0: 20 GB/s) */
    double move_latency;     /* seconds per move plan (0: 5 us: a shared-memory handoff) */
    int nodes;               /* ranks and workers split evenly over nodes (0: 1) */
    double net_bandwidth;    /* bytes/s between nodes (0: 100 Gb/s) */
    double net_latency;      /* seconds per transfer between nodes (0: 20 us) */
    /*
     * 1: this scheduler is node `node`'s replica on a real multi-node run. It plans every
     * step for every rank exactly as the other nodes' replicas do (placement depends only on
     * the order, the predictions and the start calibration), but admits, queues and counts
     * memory for its own node's ranks only; other nodes' ranks advance through batch_taken
     * and step_done as the step exchange reports them. No lending (it needs the queues of
     * other nodes). 0: every node is here (the simulator, a one-node run).
     */
    int node_local, node;
    dh__pred pred;
    dh__gpu_model gpu;       /* predicted GPU model (c0 = fixed per-step cost) */
    /*
     * The order source: writes the G sample indices of the next global batch
     * (called once per step, in step order, when the step is planned);
     * returns 0 or a negative error, which stops the run.
     */
    /* The next step's G sample indices (out) and, when order_cpu is set, each one's raw
     * predicted CPU seconds (cpu: what the sample's random augmentation drew in that step);
     * otherwise cpu is NULL and the scheduler takes the table's (pred.row[i].cpu_pred) as it
     * reads the drawn sample's row, one read of the row a drawn sample instead of two. */
    int (*next_order)(void *ctx, int64_t *out, float *cpu);
    void *order_ctx;
    int order_cpu;
    /* Optional: offered a replica's byte a sample (its deal's class of cost, made at start),
     * the order source may carry it with its draws: it returns where each next_order then
     * leaves the drawn samples' bytes in step order (G bytes), or NULL (the deal reads each
     * drawn sample's byte from the table, at random); having returned a place, it fills it
     * at every draw until dh__sched_free offers NULL (carry them no more: the table is
     * freed). */
    const uint8_t *(*carry_bytes)(void *ctx, const uint8_t *bytes);
    /* 1: the order source lays each step out node by node (a stratified order: node k's
     * share at positions [k G / N, (k + 1) G / N)), and the deal to nodes is that layout
     * (no sort by class). Several nodes of several ranks, N dividing G. */
    int order_by_node;
} dh__sched_config;

/* steps = 0 in the config: the run goes on until the engine stops it. */
#define DH__STEPS_UNBOUNDED (INT64_C(1) << 52)

typedef struct {
    int64_t pos;    /* position in the global order: step * G + k */
    int64_t sample; /* sample index */
    int64_t step;
    int32_t rank;
    int32_t worker;
    int32_t part, nparts; /* a keyframe-aligned part of a split sample: part of nparts (1: whole) */
    double ship_s;        /* > 0: prepared on another node; the result arrives this much later */
    double pred_cost; /* calibrated prediction of this part when dispatched */
} dh__task;

/*
 * Extra cost of each part of a split sample (container open and the seek to
 * its keyframe), as the simulator models it; the real engine measures it.
 */
#define DH_SPLIT_PART_OVERHEAD_S 0.002

typedef struct dh__sched dh__sched;

int dh__sched_new(const dh__sched_config *cfg, dh__sched **out);
/* Shortens or sets the run's length before its first step is planned (a resumed job serves
 * what remains of it); steps > 0. */
void dh__sched_set_steps(dh__sched *s, int64_t steps);
void dh__sched_free(dh__sched *s);
/* Worker threads the engine must run: W, or R * max(1, W / R) for local. */
int dh__sched_worker_count(const dh__sched *s);
/* Ranks whose private workers are w's (local), or -1 when workers are shared. */
int dh__sched_worker_rank(const dh__sched *s, int worker);
/* The workers of node `node`: [*first, *first + return value). */
int dh__sched_node_workers(const dh__sched *s, int node, int *first);

/*
 * 0: *out is the worker's next task; DH__IDLE: nothing for this worker now;
 * < 0: the scheduler failed (out of memory, the order source failed): the
 * run must stop. After a failure every call returns the same error.
 */
#define DH__IDLE 1
int dh__sched_next_task(dh__sched *s, int worker, double now, dh__task *out);
/*
 * Returns 1 when this completed the task's batch (0 otherwise). measured < 0: the task
 * failed (its time does not calibrate the CPU model). revealed_gpu is the
 * sample's exact GPU cost once it is prepared (known from its decoded
 * content), or < 0 if the engine cannot tell; rebalancing uses it.
 */
int dh__sched_task_done(dh__sched *s, const dh__task *t, double now, double measured,
                        double revealed_gpu);

/*
 * The engine took `seconds` to carry out the plan it just accepted. The gate
 * then scales its transfer-cost model by the measured / modelled ratio (an
 * EWMA in log space), so moves that prove dear on this machine stop passing.
 */
void dh__sched_observe_move(dh__sched *s, double seconds);
/*
 * A transfer between nodes of `bytes` took `seconds` (from when it was decided to when it
 * landed): the network model (latency + bytes / bandwidth) is scaled by the measured /
 * modelled ratio, as moves within a node are, and both gates between nodes (lending's and
 * moves') use it.
 */
void dh__sched_observe_wire(dh__sched *s, int64_t bytes, double seconds);

/* 1 when t is the last outstanding part of its sample (the one that completes it). */
int dh__sched_last_part(const dh__sched *s, const dh__task *t);
/* A hint: the rows dh__sched_task_done will read for the task at pos, fetched into the cache
 * ahead of it (the simulator knows its next completion one event ahead). No effect otherwise. */
void dh__sched_prefetch(const dh__sched *s, int64_t pos);
/* The position a worker's next task most likely is (its node's least slack queue's top, as
 * it lies now), for hints; -1 when none or the policy's service has no such queue. */
int64_t dh__sched_next_pos(const dh__sched *s, int worker);
/* A dispatched task's slack at `now`: its step's estimated deadline (from the latest step
 * taken) minus now minus its predicted cost; negative: late. */
double dh__sched_task_slack(const dh__sched *s, const dh__task *t, double now);

/*
 * Called with a gated plan before it is applied: rank_of holds the step's
 * new ranks by position k of the global batch: at every position, or, for a
 * replica's plan of its group's moves, only at the group's positions
 * (dh__sched_plan_positions; no other sample moves, and the rest of rank_of
 * is not the step's). Return 0 to accept (the engine has moved the data),
 * nonzero to refuse; the placement then stays.
 */
typedef int (*dh__reb_accept)(void *ctx, int64_t step, const int32_t *rank_of);

/*
 * Collective rebalancing of step `step` (helix only), called when its ranks
 * are about to take their batches: prepared samples may move between ranks
 * of the step as one plan, if the plan's predicted gain beats its transfer
 * cost times a margin that grows with the GPU prediction error. Ranks with
 * frozen[r] set (may be NULL) neither give nor receive; accept may be NULL.
 */
void dh__sched_rebalance(dh__sched *s, int64_t step, double now, const uint8_t *frozen,
                         dh__reb_accept accept, void *ctx);

/*
 * Rebalancing agreed between real nodes (node_local replicas, docs/MULTINODE.md): every node
 * makes the same plan for `step` from the same inputs, exchanged at the previous step. So
 * nothing here may read a node's own state that the others do not share: which ranks are
 * frozen, the exact costs known (a sample prepared here after they were exchanged is not
 * among them), the GPU prediction error and the factors come in; whether a batch is
 * admitted is not asked (a batch not admitted on its node is frozen there). `count`: this
 * node counts the plan in its stats (one node of those making it, so a sum over nodes
 * counts it once).
 */
/* Nodes in a group that agrees its moves (rebalance.c): a replica plans its group's. */
#ifndef DH_MOVE_GROUP
#define DH_MOVE_GROUP 4
#endif

typedef struct {
    const uint8_t *frozen; /* R: neither give nor receive */
    const float *known;    /* G: each sample's exact GPU cost as exchanged, < 0: unknown */
    double gpu_mape, move_factor, net_factor;
    int count;
    int other_groups; /* plan the other groups' moves instead of this node's group's (the step
                       * the whole job takes, for bench_control); the groups are the same */
    /* Or, instead of known, by node (a replica: what the step records carry): node k's exact
     * costs of its samples in the step's order, as far as ncost (< 0: unknown), read only
     * for the nodes the plan reads; and every node's load (dh__sched_node_load, N), or NULL
     * (then every cost is read, as known is) */
    const float *(*costs_of)(const void *ctx, int node);
    const void *costs_ctx;
    int64_t ncost;
    const double *node_load;
} dh__reb_agreed;
void dh__sched_rebalance_agreed(dh__sched *s, int64_t step, const dh__reb_agreed *in,
                                dh__reb_accept accept, void *ctx);
/* The positions of step `step` its agreed plan can have moved, ascending (*n of them): a
 * replica's group's shares, when it planned its group's moves of a step dealt to nodes (no
 * other sample moves, nor does any other rank's batch change); NULL when any could (one
 * node, a step not dealt, no group planned). Valid until the next call (each call fills the
 * same buffer). */
const int32_t *dh__sched_plan_positions(dh__sched *s, int64_t step, int32_t *n);
/* An agreed plan's receivers, for its accept callback: got(ctx, r, samples, n) for each rank
 * r the plan (rank_of: every position's rank under it) gives a sample, in rank order, with
 * r's samples under the plan in the step's order. A replica whose step was dealt to nodes
 * reads only its group's positions (no other sample moves); else the whole step. 0, got's
 * first non-zero return, or DH_ENOMEM. */
typedef int (*dh__reb_receiver)(void *ctx, int rank, const int64_t *samples, int32_t n);
int dh__sched_receivers(dh__sched *s, int64_t step, const int32_t *rank_of,
                        dh__reb_receiver got, void *ctx);
/* Node `node`'s positions of `step`, ascending (*n of them), as the step was dealt to nodes:
 * NULL when it was not (one node, nodes of one rank, or not planned). Moves leave them. */
const int32_t *dh__sched_node_positions(const dh__sched *s, int64_t step, int node, int32_t *n);
/* Node `node`'s load of `step` as an agreed plan groups nodes by: its samples' GPU costs, the
 * exact one for the i-th of them when i < ncost and cost[i] >= 0, else the predicted one (of
 * a node a replica has not placed, read from the sample's row); < 0 when the step was not
 * dealt to nodes. */
double dh__sched_node_load(const dh__sched *s, int64_t step, int node, const float *cost,
                           int64_t ncost);
/* The exact GPU cost of the k-th sample of step if it is prepared here (or was learnt), else
 * < 0. */
double dh__sched_prepared_cost(const dh__sched *s, int64_t step, int64_t k);
/* Off: this replica's realised gains are not counted (another node counts the agreed plans). */
void dh__sched_reb_counting(dh__sched *s, int on);

/*
 * Lending between real nodes (node_local replicas; the simulator lends through next_task).
 * backlog_lateness: this node's predicted worst lateness if only its own workers take its
 * queue (seconds, <= 0: on time), and the output bytes of its least-slack task, for the step
 * exchange. lend_task: for another node's idle worker, this node's least-slack task if its
 * backlog is late (worker -1), else DH__IDLE. lend_gate: the lender's gate (a node reported
 * `late` seconds; shipping `bytes` back costs the network model): 1 to ask; counts
 * lend_considered and lend_gated. count_lent: a lent task's result arrived.
 */
double dh__sched_backlog_lateness(dh__sched *s, double now, int64_t *head_bytes);
int dh__sched_lend_task(dh__sched *s, double now, int any, dh__task *out); /* any: even on time */
int dh__sched_lend_gate(dh__sched *s, double late, int64_t bytes);
void dh__sched_count_lent(dh__sched *s, int64_t bytes);

typedef struct {
    int64_t plans, plans_applied;
    int64_t considered, moved, gated; /* candidate moves, applied, refused by the gate */
    int64_t refused; /* moves of gated-in plans not carried out (a cap; no buffer room) */
    int64_t bytes_moved;
    int64_t moved_remote, remote_bytes; /* of moved: to a rank on another node */
    double predicted_gain_s, realised_gain_s;
    int64_t lend_considered, lent, lend_gated; /* CPU readiness: remote late samples */
    int64_t bytes_shipped;
    double move_s;        /* seconds the engine spent carrying plans out (observed) */
    int64_t move_obs;     /* plans observed */
    double move_factor;   /* measured / modelled transfer cost (1 until observed) */
    double net_factor;    /* the same between nodes: measured / modelled wire time */
    int64_t net_obs;      /* transfers between nodes observed */
} dh__reb_stats;

const dh__reb_stats *dh__sched_reb_stats(const dh__sched *s);
int dh__sched_batch_ready(const dh__sched *s, int64_t step, int rank);
void dh__sched_batch_taken(dh__sched *s, int rank, int64_t step, double now);
void dh__sched_step_done(dh__sched *s, int rank, int64_t step, double now, double gpu_time);
/*
 * Ranks rank0 .. rank0 + n - 1 (another node's, as its STEP record says) took step `step` and
 * finished it: for each in rank order, dh__sched_batch_taken at taken then
 * dh__sched_step_done at released with gpu_time compute, with the same effects, in one call
 * (a replica applies the job's other ranks every step: two calls a rank were a tenth of its
 * control plane at 1,024 nodes, bench/RESULTS.md). The three values of rank i are read at
 * byte offset i * stride from each pointer (an array of the caller's records).
 */
void dh__sched_ranks_stepped(dh__sched *s, int64_t step, int rank0, int n, const double *taken,
                             const double *released, const double *gpu_time, size_t stride);

/*
 * Samples of batch (step, rank): count, and the first `cap` sample indices
 * into out; a negative error if the step cannot be planned. The step must
 * not have left the window (every rank finished it).
 */
int32_t dh__sched_batch_samples(dh__sched *s, int64_t step, int rank, int64_t *out, int32_t cap);
/* Rank of the k-th sample of step's global batch (plans the step if needed), or < 0. */
int dh__sched_rank_of(dh__sched *s, int64_t step, int64_t k);
/* The G sample indices of a planned step still in the window, or NULL. */
const int64_t *dh__sched_step_order(const dh__sched *s, int64_t step);
/*
 * For fetching ahead of admission (media on an object store): plans `step` if it is
 * predicted to start within horizon_s of the window's head (the oldest step not yet over:
 * anchored to consumption, so a stream nobody reads does not run ahead) and lies fewer
 * than DH__PLAN_AHEAD_STEPS past it. 1 when the step is planned (now or before), 0 when it
 * is not to be planned yet (or is the run's end, or has left the window), < 0 on a
 * failure. Planning is deterministic from the order and the placement's calibration, so a
 * step planned early is the step planned late (on a replica of several nodes exactly; on
 * one node with the calibration of that moment).
 */
#define DH__PLAN_AHEAD_STEPS 64
int dh__sched_plan_ahead(dh__sched *s, int64_t step, double horizon_s);
/* The fetchers (the engine's, the simulator's model) reach the steps predicted to start
 * within this many seconds of the oldest step in flight: the admitted window alone may be
 * a step or two, less than a store's latency and queue. */
#define DH__FETCH_HORIZON_S 1.0
/* Steps the window holds now (planned, not yet retired), and the most it held. */
int64_t dh__sched_window_steps(const dh__sched *s);
/* The first internal failure (0 if none). */
int dh__sched_error(const dh__sched *s);
const dh__calib *dh__sched_calib(const dh__sched *s);
int64_t dh__sched_memory_peak(const dh__sched *s);
/* Samples placed over a cap because no rank could take them within it. */
int64_t dh__sched_cap_violations(const dh__sched *s);

#endif
