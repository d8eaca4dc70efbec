/*
 * engine_int.h - the real engine's state, shared by its rooms (internal to
 * src/engine): slots.c (the step window of batch slots, layout, buffers),
 * workers.c (decoding threads), carry.c (carrying out rebalancing plans),
 * engine.c (lifecycle and the consumer API) and ranks.c (emulated ranks).
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

#include "../metrics/metrics.h"
#include "../run/run.h"
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
    int64_t *samples, *tokens;
    int32_t nitems, nsamples, nfailed;
    int32_t inflight;      /* tasks writing into the buffer now */
    int32_t incoming;      /* samples moved here from another node, still on the wire */
    uint8_t agreeing;      /* offered to the nodes' agreed plan: not taken until it is made */
    uint8_t laid_out, allocating, allocated;
    uint8_t in_arena;      /* the buffer is in the move arena, not the main ring */
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
    int shared;             /* > 0: pools in memfds trainers map, room for this many leases each */
    int error;              /* what stopped the run, if it failed (0: not failed) */
    int64_t nok, nfail;     /* samples finished fine and failed (dh_run_config.max_failed_frac) */
    char fail_msg[400];     /* why too many samples failed (DH_EFAILED): the last one's error */
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
    int idle_workers;        /* workers waiting on `work` (a wake-up costs tens of us on a VM) */
    const dh_spec *spec;
    /* several nodes (nodes.c): this process runs ranks [rank_lo, rank_hi) and its workers */
    int node, nodes, rank_lo, rank_hi;
    struct dh__xchg *x;     /* the step exchange; NULL on one node */
    /* an agent's several streams: CPU tokens shared with the other streams' engines (gate.h;
     * NULL: none), and how many of this engine's ranks wait for a batch right now */
    struct dh__gate *gate;
    atomic_int waiting;
    double gate_wait_s;     /* seconds workers waited for a token (under mu) */
    double last_take, take_gap; /* when a batch was last taken, the mean gap between takes */
};

/* 1 when rank r runs in this process (every rank on one node). */
static inline int dh__eng_rank_here(const dh_engine *e, int r)
{
    return r >= e->rank_lo && r < e->rank_hi;
}

/* engine.c */

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
int dh__eng_start_workers(dh_engine *e);
/* After a task: failures, records, the scheduler; a completed batch is announced. remote: it
 * was prepared on another node (its CPU is counted there). Under e->mu. */
void dh__eng_finish_task(dh_engine *e, int w, const dh__task *t, batch_slot *b, uint8_t *base,
                         int rc, double started, double cpu, const char *path, const char *err,
                         int remote);

/* nodes.c: the engine as one node of several (docs/MULTINODE.md) */
/* Sets the node's share from cfg (one node: every rank); 0 or DH_ENOMEM. */
int dh__eng_nodes_init(dh_engine *e);
/* Before the workers start: agrees with every node (the same job?) and sets the shared
 * start of the clock (e->t0); starts the exchange thread. 0, or an error with a sentence. */
int dh__eng_nodes_begin(dh_engine *e, char *err, size_t errlen);
/* When the engine starts: the GREETING and HELLO rounds (the same release, the same job:
 * refused naming the setting that differs, before an agent waits for its trainers). */
int dh__eng_nodes_hello(dh_engine *e, char *err, size_t errlen);
/* A rank of this node waits until step st has been exchanged with every node (0), or the
 * run stopped (-1). Without e->mu. */
int dh__eng_wait_exchanged(dh_engine *e, int64_t st);
/* Before a node that finished its steps stops: until every node finished them too (another
 * node may still be waiting for a sample this node prepares for it). Without e->mu. */
void dh__eng_nodes_drain(dh_engine *e);
/*
 * A node's totals of a run, each field once with how the job's figure reads every node's
 * (SUM, or MAX: the makespan, the longest exchange, the worst wire factor). A node's FINAL
 * record carries its own; dh__eng_nodes_finish folds every node's by this list.
 */
#define DH__NODE_TOTALS(X)                                                                        \
    X(double, cpu_sum, SUM) X(double, worker_cpu, SUM) X(double, makespan, MAX)                   \
    X(double, move_s, SUM) X(double, pred_gain, SUM) X(double, real_gain, SUM)                    \
    X(double, xsum, SUM) X(double, xmax, MAX) X(double, ctrl, SUM) X(double, net_factor, MAX)     \
    X(int64_t, xn, SUM) X(int64_t, peak, SUM) X(int64_t, considered, SUM) X(int64_t, moved, SUM) \
    X(int64_t, gated, SUM) X(int64_t, refused, SUM) X(int64_t, moved_bytes, SUM)                  \
    X(int64_t, remote, SUM) X(int64_t, remote_bytes, SUM) X(int64_t, lend_considered, SUM)       \
    X(int64_t, lent, SUM) X(int64_t, lend_gated, SUM) X(int64_t, shipped, SUM)
typedef struct {
#define DH__TOTAL_FIELD(type, name, how) type name;
    DH__NODE_TOTALS(DH__TOTAL_FIELD)
#undef DH__TOTAL_FIELD
} dh__node_totals;
/* After the workers stopped: the FINAL rounds; t gets every node's totals. */
void dh__eng_nodes_finish(dh_engine *e, dh__node_totals *t);
/*
 * Lending between nodes (nodes.c; docs/MULTINODE.md). A node whose queue is empty asks the
 * node reported latest for a task (STEAL); the owner pops its least-slack task if its backlog
 * is late and answers with the sample's item sizes (TASK) or NOTASK; the lender decodes into
 * its own memory and ships the items back (RESULT), which the owner copies into the batch
 * and completes as its own worker would. Under e->mu:
 *   dh__eng_lend_handback: a task popped for a lender that could not be lent (no buffer
 *     room, a split part): this node's workers run it first; 1 with *t.
 *   dh__eng_lend_remote: another node's task to prepare here (free it with free()), or NULL
 *     (and a STEAL goes out if a node is worth asking).
 * Without e->mu: dh__eng_lend_result ships a prepared (or failed) task back.
 */
enum { DH__LEND_STEAL = 1, DH__LEND_TASK, DH__LEND_NOTASK, DH__LEND_RESULT }; /* kinds */
typedef struct {
    int32_t kind, node, rank, part, nparts, nitems;
    int64_t pos, step, sample;
    double pred_cost;
    int64_t item_bytes[]; /* nitems */
} dh__lend_msg;
int dh__eng_lend_handback(dh_engine *e, dh__task *t);
/* Tests only: lend whenever a worker is idle, late or not (process-wide). */
void dh__eng_test_lend_always(int on);
dh__lend_msg *dh__eng_lend_remote(dh_engine *e);
/* The bytes a RESULT message keeps before its payload (data must start there). */
size_t dh__eng_lend_header(void);
void dh__eng_lend_result(dh_engine *e, const dh__lend_msg *m, uint8_t *msg, int64_t payload,
                         int status, double cpu, const char *path, const char *err);

/* Writes the totals' share of a several-node result (moves, exchange costs, the budget). */
void dh__node_result(const dh__node_totals *t, int nodes, dh_result *full);
/* Wakes the exchange thread and the ranks waiting for it (a release, a stop). */
void dh__eng_nodes_wake(dh_engine *e);
/* What stopped the run if another node did ("" if none). */
const char *dh__eng_nodes_error(const dh_engine *e);
/* Under e->mu: this node stops the run for a reason of its own (a trainer of its died): the
 * other nodes read it in its FINAL record (the first reason wins; NULL or one node: nothing). */
void dh__eng_nodes_own_error(dh_engine *e, const char *why);
void dh__eng_nodes_free(dh_engine *e);

/* Rebalancing agreed between nodes (nodes.c; docs/MULTINODE.md): 1 when this run makes
 * every plan with the other nodes at the step exchange (then no node plans alone). */
int dh__eng_nodes_moving(const dh_engine *e);
/* The scheduler's node fields. */
void dh__eng_nodes_sched_config(dh_engine *e, dh__sched_config *sc);
/* Tests only: every node publishes at most `bytes` of move-arena room (< 0: off). */
void dh__eng_test_move_room(int64_t bytes);
/* Tests only: STEP records carry at most n exact costs per node (< 0: off). */
void dh__eng_test_cost_cap(int64_t n);
/* 1 while rank's batch of st waits for the plan made at step st - 1's exchange: the rank
 * released st - 1 (one that still holds it takes st at once: the exchange waits for its
 * release) and the exchange has not happened yet. Under e->mu. */
int dh__eng_nodes_plan_pending(dh_engine *e, int64_t st, int rank);
/* A sample of step st (position k) leaves this node's batch `from` for node `to`: its items
 * are packed for sending now (before the batch is compacted). 0 or DH_ENOMEM. Under e->mu. */
int dh__eng_move_out(dh_engine *e, int64_t st, int64_t k, int to, const batch_slot *from);

/* carry.c */
/* Carries out plan rank_of of step st on the batch buffers. agreed: a plan made with the
 * other nodes; only this node's batches change here, samples leaving are packed for their
 * node (dh__eng_move_out) and samples arriving are counted in their batch's `incoming`.
 * 0, or 1 when the arena has no room for a receiving batch (nothing changed then). */
int dh__eng_carry(dh_engine *e, int64_t st, const int32_t *rank_of, int agreed);
/* Recounts b's failed samples from its items' status. */
void dh__slot_count_failed(batch_slot *b);
void dh__eng_offer_step(dh_engine *e, int64_t st, int pid, int tid);
void dh__eng_offer_prepared_step(dh_engine *e, int64_t st, int worker);

#endif
