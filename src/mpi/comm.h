/*
 * comm.h - the node-to-node layer of a multi-node agent, on OpenMPI
 * (internal; linked into the agent only, never into libdatahelix, so
 * trainer processes never load MPI).
 *
 * One communication thread owns every MPI call, from MPI_Init_thread
 * (MPI_THREAD_FUNNELED: it is the only thread that calls MPI) to
 * MPI_Finalize. Other threads hand it work and wait with timeouts:
 *   - messages to one node (any size: sent as chunks of at most
 *     dh__comm_chunk bytes, so a payload over 2 GiB never reaches an MPI
 *     count; received into 64-byte-aligned buffers, in order per sender);
 *   - a per-step exchange of one fixed-size record per node (a
 *     nonblocking allgather the thread drives);
 *   - liveness: every node sends a heartbeat to every other node each
 *     dh__comm_heartbeat(timeout) seconds (an eighth of the timeout, at
 *     most DH__COMM_HEARTBEAT_S); a node not heard from for the timeout
 *     is dead, and every wait then returns DH_EPEER with a sentence naming
 *     it (node, host, pid), never hanging. (Under mpirun, pass
 *     --enable-recovery so the survivors run on to report; without it
 *     mpirun terminates them itself, and dh__comm_silent names who went
 *     quiet first.)
 */
#ifndef DH_COMM_H
#define DH_COMM_H

#include <datahelix.h> /* error codes only: this layer uses no library internals */

#include <stddef.h>
#include <stdint.h>

#define DH__COMM_HEARTBEAT_S 0.25

/* Seconds between heartbeats for a node timeout: often enough that a live node is never
 * taken for dead, rarely enough that an idle thread costs little. */
static inline double dh__comm_heartbeat(double timeout_s)
{
    return timeout_s / 8 < DH__COMM_HEARTBEAT_S ? timeout_s / 8 : DH__COMM_HEARTBEAT_S;
}

typedef struct dh__comm dh__comm;

/* A received message: payload 64-byte aligned (free with free()), len bytes, from node. */
typedef struct {
    int from;
    int32_t tag;
    size_t len;
    void *data;
} dh__comm_msg;

/*
 * Starts the communication thread, which initialises MPI and learns every
 * node's host and pid. timeout_s: how long a node may stay silent before it
 * is dead (> 0). 0, or an error with a sentence in err.
 */
int dh__comm_start(double timeout_s, dh__comm **out, char *err, size_t errlen);
int dh__comm_rank(const dh__comm *c);
int dh__comm_size(const dh__comm *c);
/* "node K (HOST, pid P)" of node k, for messages; static per comm, valid until stop. */
const char *dh__comm_name(const dh__comm *c, int node);

/* Largest chunk of one MPI send (default 1 GiB; tests make it small). */
void dh__comm_set_chunk(dh__comm *c, size_t bytes);

/* Queues len bytes of buf (copied) for node `to`; 0, DH_EINVAL, DH_ENOMEM or DH_EPEER. */
int dh__comm_send(dh__comm *c, int to, int32_t tag, const void *buf, size_t len);

/*
 * This node fails before the others can hear why (it never reached the run's first
 * exchange: a socket in use, an input it cannot read): every other node is told `why`, and
 * its waits end at once with DH_EPEER and "node K (HOST, pid P) failed: why" instead of
 * waiting out the timeout for a silent node. Call before dh__comm_stop.
 */
void dh__comm_farewell(dh__comm *c, const char *why);

/* The next message from any node, waiting up to timeout_s: 0, DH_ETIMEDOUT, or DH_EPEER
 * (a node died; err says which). */
int dh__comm_recv(dh__comm *c, dh__comm_msg *msg, double timeout_s, char *err, size_t errlen);

/*
 * Every node contributes len bytes of mine; all (size * len bytes) gets them in node
 * order. Every node must call it the same number of times with the same len. 0,
 * DH_ETIMEDOUT (after timeout_s) or DH_EPEER, with a sentence in err.
 */
int dh__comm_allgather(dh__comm *c, const void *mine, void *all, size_t len, double timeout_s,
                       char *err, size_t errlen);

/* CPU seconds the communication thread has used so far (the control plane's own cost). */
double dh__comm_cpu(dh__comm *c);

/* The node silent longest, if silent for more than min_s (else -1), and for how long. */
int dh__comm_silent(dh__comm *c, double min_s, double *silent_s);

/* Stops the thread after sending what was queued (at most a few seconds), finalises MPI
 * (not after a node died: MPI_Finalize would wait for it forever) and frees c. Messages
 * not received are dropped. */
void dh__comm_stop(dh__comm *c);

#endif
