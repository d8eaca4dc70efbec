/*
 * nodes_wire.h - what the nodes of a several-node run say to each other
 * (internal to src/engine; docs/MULTINODE.md): the exchange records and the
 * messages, with the checks every received one passes before it is read.
 *
 * DESIGN
 * - Every run begins with a GREETING round: 32 bytes whose layout never
 *   changes between releases (magic, wire version, the size of this
 *   release's records). Nodes of different versions stop there, each naming
 *   both versions, instead of misreading each other's records.
 * - Records (the allgather's, one per node per round) and messages (send,
 *   recv) are host-order structs: every node of a job runs the same build
 *   (the version says so) on one architecture.
 * - A received record or message is checked whole before any field is
 *   used: its kind and sender, its length against what its own fields
 *   declare, its counts against the job's sizes, its strings terminated.
 *   dh__wire_check_msg and dh__wire_check_record return 0 or DH_EPARSE with
 *   a sentence naming the node and what was wrong (fuzz/fuzz_node_wire.c).
 */
#ifndef DH_NODES_WIRE_H
#define DH_NODES_WIRE_H

#include "engine_int.h"

#define DH__WIRE_MAGIC 0x57584844u /* "DHXW" */
#define DH__WIRE_VERSION 6 /* 1: before the greeting; 2: greeting, checked messages; 3: when
                            * a node's fault happened (FINAL); 4: the steps taken past the
                            * last closed one (FINAL); 5: each node's share of a step's truth
                            * (STEP); 6: the CUTOFF round after a stop, each
                            * node's load of the next step (STEP) */

/* The first round of every run; never changes (a later version keeps these 32 bytes). */
typedef struct {
    uint32_t magic, version;
    uint64_t record_bytes; /* this node's records (rounds after the greeting) */
    int32_t node;
    int32_t ranks;         /* the job's (0 before this field was filled: it was reserved) */
    uint64_t global_batch; /* the job's (likewise) */
} dh__wire_greeting;

/* Exchange records (the allgather's rounds). */
#define DH__MORE_STEPS 8 /* steps a rank may be ahead of the exchange, at most counted */
/* CUTOFF: the round after the STEP round where a stop was agreed (nodes_step.c) */
enum { X_HELLO = 1, X_STEP, X_FINAL, X_BEGIN, X_CUTOFF };

typedef struct {
    double asked, ready, compute, longest, taken, released;
} xrank;

typedef struct {
    int32_t kind, node;
    int64_t step;  /* STEP: its step; CUTOFF: the furthest step a rank of this node took (-1:
                    * none) */
    int32_t stop;  /* STEP: stop every node after this step */
    int32_t error; /* FINAL: what stopped this node (0: its run ended or was stopped) */
    double err_at; /* FINAL: when this node's own fault happened (shared clock; 0: none) */
    /* STEP */
    double first_start; /* the step's first task started here (-1: none) */
    int64_t failed;     /* the step's samples that failed here */
    double late;        /* this node's backlog's predicted worst lateness (lending) */
    int64_t late_bytes; /* output bytes of its least-slack task */
    /* the modelled truth of this node's batches of the step (the records' bound: every
     * node adds the N shares in node order, so all compute the same sums) */
    double truth_gpu, truth_gpu_max, truth_cpu;
    /* STEP, agreed moves (x->moving): step + 1 is offered to the agreed plan (mv), with this
     * node's GPU prediction error, move factor and arena room; after r[]: per local rank
     * whether its batch is open to the plan, then per position of step + 1 the exact GPU
     * cost of a sample prepared here (< 0: not prepared here) */
    int32_t mv;
    double mv_mape, mv_factor, mv_net;
    double mv_load; /* its load of step + 1 (dh__sched_node_load; < 0: not dealt to nodes) */
    int64_t mv_room, mv_ids;
    /* HELLO: what every node must agree on (the job's identity) */
    uint64_t manifest_hash, spec_hash, seed;
    int64_t ranks, workers, batch, steps, budget, start_epoch, start_step, order;
    int64_t leases, rank_token_cap, rank_byte_cap;
    int32_t serving, resume;
    double cpu_scale, rho, net_bandwidth, net_latency, move_bandwidth, max_failed;
    double sample_timeout;
    char policy[32], workload[64];
    /* FINAL: this node's totals, and the steps it closed (every node's must agree) */
    dh__node_totals tot;
    int64_t closed_steps, closed_failed;
    /* FINAL: the steps after the last closed one that every rank of this node took (a stop is
     * agreed at a step's exchange, when its ranks may hold the next ones already; trainers
     * that leave together end the run before their last step is exchanged), and the samples
     * of each that failed here; 0 when this node's run failed other than as its trainers
     * meant */
    int64_t more_steps, more_failed[DH__MORE_STEPS];
    char msg[256];
    xrank r[];
} xrec;

/* Messages (send, recv): each starts with its kind and its sender. */
enum { M_STEAL = 1, M_TASK, M_NOTASK, M_RESULT, M_MOVE };

typedef struct {
    int32_t kind, node;
} m_head; /* STEAL, NOTASK: nothing more */

/* TASK: a task of the owner's, lent (a lender's workers prepare it and send a RESULT). */
typedef struct {
    int32_t kind, node, rank, part, nparts, nitems;
    int64_t pos, step, sample;
    double pred_cost;
    int64_t item_bytes[]; /* nitems */
} dh__lend_msg;

typedef struct {
    int32_t kind, node, part, status;
    int64_t pos, payload;
    double cpu, sent; /* sent: when the lender sent it (the shared clock) */
    char path[512], err[384];
} m_result; /* then, at dh__wire_result_header(), payload bytes of items, each 64-aligned */

typedef struct {
    int32_t kind, node, nitems, pad;
    int64_t step, k, sample, payload;
} m_move; /* then int32_t status[nitems]; at dh__wire_move_header(nitems), the items */

/* Where a RESULT's items begin, and a MOVE's. */
size_t dh__wire_result_header(void);
size_t dh__wire_move_header(int32_t nitems);

/* What a node's messages and records are checked against. */
typedef struct {
    int nodes;            /* of the job */
    int ranks_per_node;
    int64_t samples;      /* of the manifest: a sample index is below */
    int64_t global_batch; /* a step's positions are below */
    int64_t max_bytes;    /* a task's or a sample's bytes are at most (its largest batch) */
    int max_parts;        /* a split sample's parts are at most (the job's workers) */
    size_t record_bytes;  /* every record's size */
    int64_t steps;        /* of the run: a step a rank took is below */
} dh__wire_limits;

#define DH__WIRE_MAX_ITEMS 4096 /* items of one sample (the manifest's limits are lower) */

/* Checks a message from node `from` (its kind, sender, length and counts). 0, or DH_EPARSE
 * with why; *kind gets its kind when it has one. */
int dh__wire_check_msg(const dh__wire_limits *lim, int from, const void *data, size_t len,
                       int32_t *kind, char *why, size_t whylen);
/* Checks node k's record of a round (its kind and node; a HELLO's and FINAL's strings are
 * terminated in place, so the record is writable). 0, or DH_EPARSE with why. */
int dh__wire_check_record(const dh__wire_limits *lim, int k, xrec *r, char *why, size_t whylen);
/* Checks every node's greeting against `mine`: 0, or DH_EPARSE naming the first node of
 * another version, or DH_EINVAL the first whose records differ in size from this node's
 * (naming --ranks or --batch when they differ). */
int dh__wire_check_greetings(const dh__wire_greeting *all, int nodes,
                             const dh__wire_greeting *mine, char *why, size_t whylen);

#endif
