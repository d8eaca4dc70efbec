/*
 * nodes_int.h - what the files of the several-node layer share (internal to
 * src/engine; docs/MULTINODE.md):
 *   nodes.c        set-up, begin, teardown, the table of entries (dh__several_nodes)
 *   nodes_meet.c   the GREETING, HELLO (the job's identity) and BEGIN rounds; round helpers
 *   nodes_step.c   the STEP rounds and the FINAL totals
 *   nodes_lend.c   lending a late task to an idle node, and its result
 *   nodes_moves.c  rebalancing moves agreed between nodes
 *   nodes_msg.c    the message thread: every message checked, then dispatched
 *   nodes_wire.c   the wire formats' checks (nodes_wire.h)
 */
#ifndef DH_NODES_INT_H
#define DH_NODES_INT_H

#include "engine_int.h"
#include "nodes_wire.h"

typedef struct {
    dh__task t;
    double sent; /* when the TASK went out (the task's start on this node's clock) */
    int to;
} lent_task;

typedef struct {
    int node;    /* to (out) or from (parked) */
    void *data;  /* a MOVE message */
    size_t len;
} move_msg;

/* A sample leaving this node under an agreed plan, packed and sent once the lock is dropped:
 * its bytes stay where its old batch held them until then (nothing is copied under e->mu). */
typedef struct {
    int node, from;           /* to node; the rank whose batch it leaves */
    int64_t st, k, sample;
    int32_t nitems;
    dh_batch_item *items;     /* as laid out in the old batch: offsets into base */
    const uint8_t *base;      /* the old batch's buffer */
    int held;                 /* the old batch kept its buffer and is held back (departing) */
    dh__ring *ring;           /* non-NULL: the old buffer was replaced; free `block` once */
    int64_t block;            /*   this, its batch's last departure, is packed */
} departure;

struct dh__xchg {
    pthread_t thread;
    int started, done;    /* done: the thread left (no more STEP rounds here) */
    pthread_cond_t cv;    /* exchanged moved, a step's releases are in, or the run stopped */
    int64_t exchanged;    /* steps exchanged with every node */
    size_t bytes;         /* one record */
    xrec *mine;
    unsigned char *all;
    double sum, max, ctrl; /* seconds in STEP rounds (wall), the largest, under e->mu */
    double carry_s;        /* seconds carrying out agreed plans (copies, packing) */
    int64_t n;
    char err[384];        /* why another node (or the exchange) stopped this one */
    int own;              /* err is this node's own reason (told to the others) */
    double err_at;        /* when this node's own reason came (the shared clock) */
    char stopped_by[256]; /* another node asked to stop, this one did not (nodes_step.c) */
    int stop_from;        /*   that node (-1: none) */
    int cutting;          /* a stop's cutoff: 0 none, CUT_AGREEING, CUT_AGREED (nodes_step.c) */
    int64_t cut;          /*   agreed: the last step served on every node */
    char first[448];      /* another node's own fault that came before this node's, or "" */
    int greeted;          /* the GREETING round: 0 not yet, 1 passed, -1 failed (no more rounds) */
    int began;            /* the HELLO round passed */
    int finished;         /* the FINAL rounds were made: totals holds every node's */
    dh__node_totals totals;
    int64_t more_steps, more_failed; /* steps every rank took past the last closed one, and
                                      * their failed samples (FINAL) */
    dh__wire_limits lim;  /* what the other nodes' records and messages are checked against */
    int64_t *truth_buf;   /* G, scratch: a batch's samples, for the step's truth (STEP) */
    /* lending (send and recv set, a lending policy) */
    int lending;
    pthread_t mthread;
    int mstarted;
    double *late;          /* per node, from the last STEP round */
    int64_t *late_bytes;
    uint8_t *skip;         /* per node: answered NOTASK or gated since the last round */
    int asking;            /* the node a STEAL is out to, or -1 */
    lent_task *lent;       /* owner: tasks out on other nodes */
    int nlent, caplent;
    dh__lend_msg **rq;     /* lender: other nodes' tasks to prepare here (FIFO) */
    int rq_head, rq_n, rq_cap;
    dh__task *back;        /* owner: tasks popped for a lender but kept here */
    int nback, capback;
    /* agreed moves (send and recv set, a rebalancing policy) */
    int moving;
    size_t open_at, cost_at; /* where a record's open flags and costs begin */
    int64_t ncost;           /* costs a record carries: its node's first samples of the step */
    uint8_t *mv_frozen;      /* R, scratch */
    double *mv_load;         /* N, scratch: every node's load of the step (its record) */
    int64_t *mv_need, *mv_n; /* per node, scratch: arena bytes and buffers a plan needs */
    departure *out;          /* left by a plan, packed and sent once the lock is dropped */
    int nout, capout;
    move_msg *parked;        /* arrived before this node made the plan they belong to */
    int nparked, capparked;
};


enum { CUT_AGREEING = 1, CUT_AGREED };

static inline xrec *rec_of(const struct dh__xchg *x, int node)
{
    return (xrec *)(x->all + (size_t)node * x->bytes);
}

/* Ranks per node. */
static inline int rpn(const dh_engine *e)
{
    return e->rank_hi - e->rank_lo;
}

static inline uint8_t *rec_open(const struct dh__xchg *x, xrec *m)
{
    return (uint8_t *)m + x->open_at;
}

static inline float *rec_cost(const struct dh__xchg *x, xrec *m)
{
    return (float *)((uint8_t *)m + x->cost_at);
}

/* nodes_meet.c: the GREETING round (every node the same release, with records of the same
 * size), the first of every run: a node that gives up before it began greets before its
 * FINAL. HELLO (dh__several_nodes' hello: greeting and identity) and BEGIN (kind X_BEGIN: the
 * resume point) rounds. Without e->mu. */
int dh__nodes_greet(dh_engine *e, char *err, size_t errlen);
int dh__nodes_hello(dh_engine *e, char *err, size_t errlen);
int dh__nodes_meet(dh_engine *e, int kind, char *err, size_t errlen);
/* nodes_meet.c: one round, mine to every node, every node's into x->all, each checked. Without
 * e->mu. */
int dh__nodes_round(dh_engine *e, char *err, size_t errlen);
/* nodes_meet.c: appends item (size bytes) to a growable array. 0 or DH_ENOMEM. */
int dh__nodes_push(void **arr, int *n, int *cap, size_t size, const void *item);
/* A message another node sent that this node cannot take: the run stops, naming it (the
 * first sentence wins). Under e->mu. */
void dh__nodes_refuse(dh_engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* nodes_step.c: the exchange thread (STEP rounds until the run ends here), and the entries of
 * dh__several_nodes it defines (dh__node_ops says what each does). */
void *dh__nodes_exchange_main(void *arg);
int dh__nodes_wait_exchanged(dh_engine *e, int64_t st);
void dh__nodes_drain(dh_engine *e);
void dh__nodes_finish(dh_engine *e, dh__node_totals *t);
void dh__nodes_result(const dh_engine *e, const dh__node_totals *t, dh_result *full);
/* nodes_step.c: dh__several_nodes' held (a stop's cutoff is being agreed, or is past st). */
int dh__nodes_held(const dh_engine *e, int64_t st);

/* nodes_lend.c, from the message thread: a STEAL, a TASK (queued for this node's workers)
 * and a RESULT, each checked already. */
void dh__nodes_on_steal(dh_engine *e, int from);
void dh__nodes_on_task(dh_engine *e, dh__lend_msg *m);
void dh__nodes_on_notask(dh_engine *e, int from);
void dh__nodes_on_result(dh_engine *e, int from, const uint8_t *data, size_t len);
/* nodes_lend.c: dh__several_nodes' take_back and lend_work. */
int dh__nodes_take_back(dh_engine *e, dh__task *t);
int dh__nodes_lend_work(dh_engine *e, int w, dh__worker_ctx *x);

/* nodes_moves.c. Under e->mu: step ns offered in this node's STEP record; the plan of ns
 * made at the exchange of ns - 1; moves that came before their plan applied. Without it:
 * what the last plan packed, sent. From the message thread: a MOVE (1: kept, parked). */
void dh__nodes_offer(dh_engine *e, xrec *m, int64_t ns);
void dh__nodes_agree(dh_engine *e, int64_t ns);
void dh__nodes_apply_parked(dh_engine *e);
int dh__nodes_send_moves(dh_engine *e);
int dh__nodes_on_move(dh_engine *e, int from, void *data, size_t len);
/* nodes_moves.c: dh__several_nodes' moving and plan_pending. */
int dh__nodes_moving(const dh_engine *e);
int dh__nodes_plan_pending(dh_engine *e, int64_t st, int rank);

/* nodes_msg.c: the message thread. */
void *dh__nodes_message_main(void *arg);

#endif
