/*
 * comm_int.h - what the files of the communication layer share (internal to
 * src/mpi; comm.h is its interface):
 *   comm.c       the thread (its loop, start and stop) and the callers' side of messages
 *   comm_base.c  error sentences, the clock, bounded waits, the node-died check (a leaf)
 *   comm_msg.c   messages on the wire: chunked sends, receives delivered in order per sender
 *   comm_ag.c    the per-step exchange (an allgather the thread drives)
 *   comm_live.c  who is who, heartbeats and declaring a silent node dead
 */
#ifndef DH_COMM_INT_H
#define DH_COMM_INT_H

#include "comm.h"

#include <mpi.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* Self-contained (the agent links it beside the shared library, whose internals are hidden). */
#define DH_MIN(a, b) ((a) < (b) ? (a) : (b))

enum { TAG_HB = 1, TAG_HDR = 2, TAG_DATA = 3, TAG_AG = 4 };
/* A message's own tag (callers' are >= 0): the sender failed, and says why (its text). */
#define MSG_FAREWELL (-1)
/*
 * Up to this many nodes the exchange is point to point: each node sends its record to every
 * other (small: MPI delivers it eagerly, with no call on the receiving side) and collects
 * theirs, one message per node per step, in order per sender. It completes as soon as the
 * last record lands, where a nonblocking allgather's rounds each wait for both sides to call
 * MPI (1.3 ms per exchange here on 2 nodes polled every 200 us, against 70 us spun on).
 * Above it, MPI_Iallgather (N log N messages instead of N^2).
 */
#define AG_P2P_MAX 32
#define CHUNK_DEFAULT ((size_t)1 << 30)
#define STOP_GRACE_S 3.0
#define AG_SPIN_S 50e-6         /* an exchange is spun on this long, then polled */
#define AG_POLL_MAX_NS 2000000L /* at most this far apart (see below) */
#define IDLE_MAX_NS 5000000L    /* nothing pending: wake at least this often (or when given work) */

typedef struct msg {
    struct msg *next;
    int peer;
    int32_t tag;
    size_t len;
    uint8_t *data;
    uint64_t hdr[3]; /* tag, len, the sender's chunk size */
    size_t chunk;
    MPI_Request *req;
    int nreq;
} msg;

typedef enum { AG_IDLE, AG_ASKED, AG_RUNNING, AG_DONE } ag_state;

struct dh__comm {
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* the thread -> callers: something arrived, or a node died */
    pthread_cond_t wake; /* callers -> the idle thread: work was queued */
    int rank, size;
    int started, stop;
    int rc;          /* start failure */
    int dead;        /* first node found dead, or -1 */
    char err[1024];  /* the start failure, who died, or a farewell */
    double timeout;
    size_t chunk;
    msg *out_head, *out_tail; /* queued by callers */
    msg *in_head, *in_tail;   /* received, for callers */
    double *last_seen;        /* per node, monotonic seconds (under mu) */
    char (*names)[160];
    /* one allgather at a time, in the comm's own buffers */
    ag_state ag;
    uint8_t *ag_mine, *ag_all;
    size_t ag_len;
    MPI_Comm comm;
    double cpu_s; /* the thread's CPU time so far (under mu) */
    /* the comm thread's own: the exchange in flight */
    MPI_Request ag_req;       /* Iallgather, or NULL */
    MPI_Request *ag_sreq;     /* point to point: sends to each node */
    uint8_t *ag_have;         /* point to point: records in, per node */
    int ag_active, ag_got;
};

/* The thread's own state between passes of its loop. */
typedef struct {
    msg *sending, *receiving; /* posted, not complete; receiving in arrival order */
    MPI_Request *hb_req;      /* per node: the heartbeat in flight */
    double hb_at;             /* when heartbeats last went out */
    uint8_t *blocked;         /* per node, scratch: an earlier message of it is incomplete */
} comm_pump;

/* comm_base.c. Monotonic seconds. */
double dh__comm_mono(void);
/* Writes the sentence into err (may be NULL) and returns code. */
int dh__comm_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* comm_base.c: waits on c->cv until `deadline` (monotonic seconds; 0, or 1 past it); under c->mu,
 * DH_EPEER with the dead node's sentence, or 0. */
int dh__comm_wait_until(dh__comm *c, double deadline);
int dh__comm_dead_locked(dh__comm *c, char *err, size_t errlen);

/* comm_msg.c (the thread's, but append and msg_free: anyone's under c->mu). */
void dh__comm_msg_free(msg *m);
void dh__comm_append(msg **head, msg **tail, msg *m);
/* Posts the callers' new messages; completes sends; 1 if anything moved. */
int dh__comm_sends(dh__comm *c, msg *fresh, comm_pump *p);
/* Receives incoming heartbeats and headers (posting each message's chunks); 1 if a message
 * began. Each source heard is noted in c->last_seen. */
int dh__comm_probe(dh__comm *c, comm_pump *p, double now);
/* The received messages that are complete and have no earlier incomplete one from their
 * sender (so each sender's messages are delivered in the order it sent them). */
msg *dh__comm_take_in_order(dh__comm *c, comm_pump *p);

/* comm_ag.c: starts (ask) or moves on the exchange in flight; 1 when it completed. */
int dh__comm_ag_progress(dh__comm *c, int ask, double now);

/* comm_live.c. Every node's host and pid, once after MPI_Init (0 or an error); heartbeats
 * to every node when due; under c->mu, the first node silent past the timeout is dead. */
int dh__comm_learn_names(dh__comm *c);
void dh__comm_beat(dh__comm *c, comm_pump *p, double now);
void dh__comm_check_alive_locked(dh__comm *c, double now);

#endif
