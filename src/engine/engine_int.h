/*
 * engine_int.h - the real engine's state, shared by its rooms (internal to
 * src/engine): base.c (the clock, the stop path, the one-node layer),
 * slots.c (the step window of batch slots, layout, buffers), workers.c
 * (decoding threads), carry.c (carrying out rebalancing plans), engine.c
 * (lifecycle and the consumer API) and ranks.c (emulated ranks). The
 * several-node layer (nodes*.c, nodes_int.h) is reached only through
 * e->nops (dh__node_ops below). Calls go one way: engine.c and ranks.c call
 * workers.c, carry.c, slots.c and base.c, each of which calls only those
 * after it; the several-node layer calls into them, never the reverse.
 *
 * DESIGN
 * - One mutex (e->mu) guards the scheduler, the batch slots, the records and
 *   the error count. Decoding happens outside it. Lock order: e->mu may be
 *   held while taking the ring's lock (dh__ring_free); dh__ring_alloc, which
 *   can block, is only ever called without e->mu.
 * - Steps in flight: each live step has one heap block of R batch slots
 *   (eng_step), reached through a power-of-two ring of pointers indexed by
 *   step. Growing the ring moves pointers only, so a worker may keep a
 *   batch_slot pointer while it decodes without the lock. A step's block is
 *   freed when every rank released its batch; engine memory is sized by the
 *   steps in flight, not by the run.
 * - Stopping (dh_engine_stop, a failure, or should_stop) sets e->stop and
 *   wakes every waiter: workers exit, consumers return DH_ECANCELED or the
 *   error that stopped the run.
 */
#ifndef DH_ENGINE_INT_H
#define DH_ENGINE_INT_H

#include "../metrics/live.h"
#include "../metrics/metrics.h"
#include "../run/run.h"
#include "../store/store.h"
#include "engine_serve.h"
#include "gate.h"
#include "ring.h"

#include <pthread.h>
#include <time.h>

#define ITEM_ALIGN 64

typedef struct {
    double taken;          /* when its rank took it (trace) */
    double released_at;    /* when its rank released it (the step exchange) */
    int64_t offset, block; /* in the ring; block < 0: no buffer */
    int64_t bytes;
    dh_batch_item *items;
    dh_media_draw *draws;  /* nitems, made when the batch is first taken */
    int64_t *samples, *tokens;
    int32_t nitems, nsamples, nfailed;
    int32_t inflight;      /* tasks writing into the buffer now */
    int32_t incoming;      /* samples moved here from another node, still on the wire */
    int32_t departing;     /* samples leaving for another node, not yet packed: held back */
    uint8_t agreeing;      /* offered to the nodes' agreed plan: not taken until it is made */
    uint8_t laid_out, allocating, allocated;
    uint8_t in_arena;      /* the buffer is in the move arena, not the main ring */
    uint8_t closed_early;  /* several nodes: its step was exchanged while its trainer still
                            * kept it (nodes_step.c): its release only gives the memory back */
} batch_slot;

typedef struct {
    int released;        /* ranks that released their batch of the step */
    uint8_t reb_offered; /* offered to rebalancing already (on several nodes: planned here) */
    uint8_t published;   /* several nodes: offered to the agreed plan (no local plan then) */
    int32_t incoming;    /* several nodes: samples moved to this node, still on the wire */
    double moves_at;     /* when the agreed plan that sent them was carried out here */
    batch_slot b[];      /* R */
} eng_step;

struct dh_engine {
    dh__run run;
    dh__sched *sched;
    dh__ring ring;
    dh__ring arena;         /* buffers of batches that received moved samples */
    dh__records rec;
    dh__trace trace;
    pthread_mutex_t mu;
    pthread_cond_t work, ready, room;
    pthread_t *threads;
    int nthreads, stop;
    int io_stop; /* atomic, set with stop: the workers' requests to object stores end at once */
    int shared;             /* > 0: pools in memfds trainers map, room for this many leases each */
    int error;              /* what stopped the run, if it failed (0: not failed) */
    _Atomic int count_taken; /* the run ends as its trainers meant (dh__engine_count_taken) */
    int64_t nok, nfail;     /* samples finished fine and failed (dh_run_config.max_failed_frac) */
    char fail_msg[1200];    /* why too many samples failed (DH_EFAILED): the last one's error */
    int64_t N, G;           /* N: steps of the run (DH__STEPS_UNBOUNDED: until stopped) */
    int R;
    eng_step **steps;       /* ring of live steps, slot = step & (cap - 1) */
    int64_t lo, hi, cap;    /* live steps [lo, hi) */
    int64_t *next_step;     /* per rank */
    uint8_t *frozen, *received, *changed; /* per rank, rebalancing scratch */
    batch_slot *fresh;      /* per rank, rebalancing scratch: new layouts */
    double move_s;          /* how long the last plan took to carry out */
    struct timespec t0;
    dh_sample_error_cb on_error;
    void *user;
    double cpu_sum;          /* CPU time inside decoding, all tasks */
    double worker_cpu;       /* CPU time of the worker threads, all of it */
    dh__fetch_stats fetched; /* what workers read from object stores (under mu, at exit) */
    /* Fetching ahead (objects only): the node's fetchers, and where the next range they
     * ask for is (step, sample of its global batch, item); under mu. */
    dh__prefetch *pf;
    int store_streak;        /* samples in a row the object store failed (under mu) */
    int objects;             /* the manifest names objects (found once, at start) */
    dh__prefetch_stats pf_stats; /* the fetchers' figures, kept when they stop */
    int64_t pf_step, pf_k;
    int pf_j;
    int idle_workers;        /* workers waiting on `work` (a wake-up costs tens of us on a VM) */
    const dh_spec *spec;
    /* several nodes (nodes.c): this process runs ranks [rank_lo, rank_hi) and its workers */
    int node, nodes, rank_lo, rank_hi;
    const struct dh__node_ops *nops; /* the several-node layer, or dh__one_node */
    struct dh__xchg *x;     /* the several-node layer's state (nodes_int.h); NULL on one node */
    /* an agent's several streams: CPU tokens shared with the other streams' engines (gate.h;
     * NULL: none), and how many of this engine's ranks wait for a batch right now */
    struct dh__gate *gate;
    atomic_int waiting;
    double gate_wait_s;     /* seconds workers waited for a token (under mu) */
    double last_take, take_gap; /* when a batch was last taken, the mean gap between takes */
    struct dh__live *live;  /* the figures published for scraping (live.h), or NULL */
};

/* 1 when rank r runs in this process (every rank on one node). */
static inline int dh__eng_rank_here(const dh_engine *e, int r)
{
    return r >= e->rank_lo && r < e->rank_hi;
}

/* base.c */

double dh__eng_elapsed(const dh_engine *e);
double dh__thread_cpu(void);
/* Stops the run with error rc (first one wins) and wakes every waiter. Under e->mu. */
void dh__eng_fail(dh_engine *e, int rc);
/* Stops the run (no error) and wakes every waiter. Under e->mu. */
void dh__eng_stop_locked(dh_engine *e);

/* slots.c (all under e->mu) */
/* The slot of batch (step, rank), opening the step if needed; NULL when released/failed. */
batch_slot *dh__eng_slot(dh_engine *e, int64_t step, int rank);
eng_step *dh__eng_step(dh_engine *e, int64_t step);
/* Rank released its batch of step: frees the step once every rank did. */
void dh__eng_step_released(dh_engine *e, int64_t step);
/* n ranks released their batches of step (another node's, from its STEP record): the same as
 * n calls of dh__eng_step_released. */
void dh__eng_steps_released(dh_engine *e, int64_t step, int n);
void dh__eng_slots_free(dh_engine *e);
uint8_t *dh__slot_data(dh_engine *e, const batch_slot *b);
/* The items of `sample` in a batch's layout (they are adjacent): the first one's index
 * (nitems when it has none) and, when n is not NULL, how many. */
int32_t dh__slot_items_of(const dh_batch_item *items, int32_t nitems, int64_t sample,
                          int32_t *n);
void dh__slot_clear_layout(batch_slot *b);
int dh__lay_out_samples(dh_engine *e, batch_slot *b, int64_t *samples, int32_t n);
int dh__lay_out(dh_engine *e, int64_t st, int r, batch_slot *b);
int dh__ensure_buffer(dh_engine *e, batch_slot *b);
int64_t dh__eng_ring_size(const dh_engine *e);
int64_t dh__eng_arena_size(const dh_engine *e);

/* workers.c */
/* Samples in a row an object store may fail before the run stops (docs/STORAGE.md). */
#define DH__STORE_STREAK 32
/* Starts the node's fetchers (when the run reads objects and wants them), then the
 * workers; dh__eng_stop_fetchers (after the workers are joined) keeps their figures. */
int dh__eng_start_workers(dh_engine *e);
void dh__eng_stop_fetchers(dh_engine *e);
/* The first (up to max) distinct objects manifest m names (samples' media on a store;
 * borrowed) into out; how many. */
int dh__eng_first_objects(const dh_manifest *m, const char **out, int max);
/* What a worker keeps between tasks: its message buffers, its open shards and its CPU token. */
typedef struct {
    char path[4096], err[512];
    struct dh__fd_cache *shards; /* NULL (out of memory): each shard opened per item */
    int held;                    /* a token of e->gate */
    dh__fetch_stats published;   /* of its shards' reads, what the live figures have */
} dh__worker_ctx;
/* Decodes task t's share of its sample into base, laid out as items; 0 or the first error
 * (err and path say which item and why). Without e->mu. */
int dh__eng_run_task(dh_engine *e, const dh__task *t, const dh_batch_item *items,
                     int32_t nitems, uint8_t *base, dh__worker_ctx *x);
/* After a task: failures, records, the scheduler; a completed batch is announced. remote: it
 * was prepared on another node (its CPU is counted there). Under e->mu. */
void dh__eng_finish_task(dh_engine *e, int w, const dh__task *t, batch_slot *b, uint8_t *base,
                         int rc, double started, double cpu, const char *path, const char *err,
                         int remote);

/*
 * A node's totals of a run, each field once with how the job's figure reads every node's
 * (SUM, or MAX: the makespan, the longest exchange, the worst wire factor). A node's FINAL
 * record carries its own; the layer's finish folds every node's by this list.
 */
#define DH__NODE_TOTALS(X)                                                                        \
    X(double, cpu_sum, SUM) X(double, worker_cpu, SUM) X(double, makespan, MAX)                   \
    X(double, cpu_counted, SUM)                                                                   \
    X(double, move_s, SUM) X(double, pred_gain, SUM) X(double, real_gain, SUM)                    \
    X(double, xsum, SUM) X(double, xmax, MAX) X(double, ctrl, SUM) X(double, net_factor, MAX)     \
    X(int64_t, xn, SUM) X(int64_t, peak, SUM) X(int64_t, considered, SUM) X(int64_t, moved, SUM) \
    X(int64_t, gated, SUM) X(int64_t, refused, SUM) X(int64_t, moved_bytes, SUM)                  \
    X(int64_t, remote, SUM) X(int64_t, remote_bytes, SUM) X(int64_t, lend_considered, SUM)       \
    X(int64_t, lent, SUM) X(int64_t, lend_gated, SUM) X(int64_t, shipped, SUM)                   \
    X(double, fetch_wait, SUM) X(int64_t, fetch_bytes, SUM) X(int64_t, fetch_requests, SUM)      \
    X(int64_t, fetch_retries, SUM) X(int64_t, fetch_failures, SUM) X(double, fit_n, SUM)         \
    X(double, fit_t, SUM) X(double, fit_b, SUM) X(double, fit_bb, SUM) X(double, fit_bt, SUM)    \
    X(int64_t, cache_hits, SUM) X(int64_t, cache_bytes, SUM)
/* A node's fetch counters as totals' initialisers. */
#define DH__FETCH_TOTALS(f)                                                                       \
    .fetch_wait = (f).wait_s, .fetch_bytes = (f).bytes, .fetch_requests = (f).requests,          \
    .fetch_retries = (f).retries, .fetch_failures = (f).failures, .fit_n = (f).fit_n,            \
    .fit_t = (f).fit_t, .fit_b = (f).fit_b, .fit_bb = (f).fit_bb, .fit_bt = (f).fit_bt,          \
    .cache_hits = (f).cache_hits, .cache_bytes = (f).cache_bytes
typedef struct {
#define DH__TOTAL_FIELD(type, name, how) type name;
    DH__NODE_TOTALS(DH__TOTAL_FIELD)
#undef DH__TOTAL_FIELD
} dh__node_totals;

/*
 * The several-node layer as the rest of the engine sees it (nodes*.c; docs/MULTINODE.md):
 * e->nops is dh__several_nodes when the run has an exchange and more than one node, else
 * dh__one_node (base.c), whose entries do nothing and answer 0, NULL or "". The single-node
 * engine therefore carries no several-node conditionals, and only nodes*.c know e->x.
 */
typedef struct dh__node_ops {
    /* Engine start, before anything runs: this node's share of the ranks (rank_lo, rank_hi)
     * and the scheduler's node fields; 0 or DH_ENOMEM. */
    int (*init)(dh_engine *e, dh__sched_config *sc);
    /* Without e->mu. hello: the GREETING and HELLO rounds (the same release and job, else
     * refused naming the setting that differs). begin: before the workers start, every node
     * agrees on the start (e->t0) and the layer's threads start. 0 or an error + sentence. */
    int (*hello)(dh_engine *e, char *err, size_t errlen);
    int (*begin)(dh_engine *e, char *err, size_t errlen);
    /* Without e->mu: a rank waits until step st was exchanged with every node (0), or the
     * run stopped (-1). */
    int (*wait_exchanged)(dh_engine *e, int64_t st);
    /* Under e->mu: a rank released a batch and every step before e->lo is over. One node
     * asks dh_run_config.should_stop here; several agree on stopping at the exchange. */
    void (*step_closed)(dh_engine *e);
    /* Under e->mu: wakes the layer's threads and ranks waiting on it (a release, a stop). */
    void (*wake)(dh_engine *e);
    /* What stopped the run if another node did ("" if none); earlier: after finish, another
     * node's own fault that came before this node's (its first cause), or "". */
    const char *(*error)(const dh_engine *e);
    const char *(*earlier)(const dh_engine *e);
    /* Another node was asked to stop (Ctrl-C on its agent) and every node stopped with it:
     * which node, in a sentence ("" if none, or this node asked too). */
    const char *(*stopped_by)(const dh_engine *e);
    /* Under e->mu: this node stops for a reason of its own (a trainer of its died), told to
     * the others in its FINAL record (the first reason wins); refuse: it never began (the
     * reason also travels, as the node's own failure). */
    void (*own_error)(dh_engine *e, const char *why);
    void (*refuse)(dh_engine *e, const char *why);
    /* Under e->mu. moving: every rebalancing plan is made with the other nodes at the step
     * exchange (no node plans alone). plan_pending: rank's batch of st waits for the plan
     * made at step st - 1's exchange (the rank released st - 1; one that still holds it
     * takes st at once, the exchange waiting for its release). */
    int (*moving)(const dh_engine *e);
    int (*plan_pending)(dh_engine *e, int64_t st, int rank);
    /* Under e->mu: a rank's new batch of step st is held back while the nodes agree where a
     * stop ends, and refused past it (nodes_step.c: the run stops once every rank took it). */
    int (*held)(const dh_engine *e, int64_t st);
    /* Under e->mu, for an idle worker. take_back: a task popped for a lender that could not
     * be lent, which this node runs first (1 with *t). lend_work: another node's late task
     * prepared here and shipped back (1: it ran one, dropping e->mu meanwhile; 0: none, and
     * a node worth asking may have been asked). */
    int (*take_back)(dh_engine *e, dh__task *t);
    int (*lend_work)(dh_engine *e, int w, dh__worker_ctx *x);
    /* Without e->mu, once this node's ranks took their last step: until every node did too
     * (another may still wait for a sample this node prepares for it). */
    void (*drain)(dh_engine *e);
    /* After the workers stopped (a failed start included): the FINAL rounds; joins the
     * layer's threads; t (this node's totals on entry) gets every node's. Again: the kept
     * totals. result: their share of the job's result (moves, exchange costs, budget). */
    void (*finish)(dh_engine *e, dh__node_totals *t);
    void (*result)(const dh_engine *e, const dh__node_totals *t, dh_result *full);
    void (*free)(dh_engine *e);
} dh__node_ops;
extern const dh__node_ops dh__one_node, dh__several_nodes;

/* Tests only (process-wide): lend whenever a worker is idle, late or not; every node
 * publishes at most `bytes` of move-arena room (< 0: off); STEP records carry at most n
 * exact costs per node (< 0: off). */
void dh__eng_test_lend_always(int on);
void dh__eng_test_move_room(int64_t bytes);
void dh__eng_test_cost_cap(int64_t n);

/* carry.c */
/* Samples of step st leaving this node's batches (slots) for other nodes under plan rank_of,
 * called before the batches change (e->received says which get a new buffer): each source
 * batch's `departing` counts what leaves it. 0 or an error (the run stops). */
typedef int (*dh__departures)(dh_engine *e, int64_t st, batch_slot *slots,
                              const int32_t *rank_of);
/* Carries out plan rank_of of step st on the batch buffers. depart NULL: this node's own
 * plan. Else a plan made with the other nodes: only this node's batches change here,
 * samples leaving are handed to depart and samples arriving are counted in their batch's
 * `incoming`. 0, or 1 when the arena has no room for a receiving batch (nothing changed). */
int dh__eng_carry(dh_engine *e, int64_t st, const int32_t *rank_of, dh__departures depart);
/* Recounts b's failed samples from its items' status. */
void dh__slot_count_failed(batch_slot *b);
void dh__eng_offer_step(dh_engine *e, int64_t st, int pid, int tid);
void dh__eng_offer_prepared_step(dh_engine *e, int64_t st, int worker);

#endif
