/*
 * comm.c - the communication thread of a multi-node agent (see comm.h).
 *
 * DESIGN: MPI is initialised FUNNELED inside the thread, which then loops:
 * post queued sends (a 2-word header, then the payload in chunks), complete
 * sends, send heartbeats, receive heartbeats and headers (probing those two
 * tags only; a header's chunks are received by receives posted at once, and
 * MPI's per-sender ordering keeps them matched), complete receives into the
 * inbox, drive the one allgather in flight, and declare a node dead when it
 * was silent for the timeout. While a transfer is in flight it polls
 * without sleeping (MPI moves a large message only while it is called);
 * when nothing is in flight and iterations move nothing it waits, 50 us
 * doubling to 1 ms, or until a caller queues work (a condition variable),
 * so an idle agent costs little CPU, what it is given goes out at once, and
 * an arriving message waits at most about 1 ms to be seen. Callers share the inbox,
 * outbox and allgather slot with it under one mutex; every wait has a
 * deadline and ends early when a node is dead. Buffers are the comm's own
 * (callers' data is copied), so a caller that gives up never leaves MPI
 * writing into its memory.
 */
#include "comm.h"

#include <mpi.h>

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdarg.h>
#include <unistd.h>

/* Self-contained (the agent links it beside the shared library, whose internals are hidden). */
#define DH_MIN(a, b) ((a) < (b) ? (a) : (b))

/* Writes the sentence into err (may be NULL) and returns code. */
static int comm_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int comm_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

enum { TAG_HB = 1, TAG_HDR = 2, TAG_DATA = 3, TAG_AG = 4 };
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
    char err[320];   /* the start failure, or who died */
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

static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Waits on c->cv until `deadline` (monotonic seconds); 0, or ETIMEDOUT. */
static int wait_until(dh__comm *c, double deadline)
{
    double left = deadline - mono();
    if (left <= 0)
        return 1;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double at = (double)t.tv_sec + (double)t.tv_nsec * 1e-9 + DH_MIN(left, 0.05);
    t.tv_sec = (time_t)at;
    t.tv_nsec = (long)((at - (double)t.tv_sec) * 1e9);
    pthread_cond_timedwait(&c->cv, &c->mu, &t);
    return 0;
}

static void msg_free(msg *m)
{
    if (!m)
        return;
    free(m->data);
    free(m->req);
    free(m);
}

static int nchunks(size_t len, size_t chunk)
{
    return (int)((len + chunk - 1) / chunk);
}

/* Posts m's header and chunks to m->peer (thread only). */
static int post_send(dh__comm *c, msg *m)
{
    int n = nchunks(m->len, m->chunk);
    m->req = calloc((size_t)n + 1, sizeof *m->req);
    if (!m->req)
        return DH_ENOMEM;
    m->hdr[0] = (uint64_t)(uint32_t)m->tag;
    m->hdr[1] = m->len;
    m->hdr[2] = m->chunk;
    m->nreq = n + 1;
    if (MPI_Isend(m->hdr, 3, MPI_UINT64_T, m->peer, TAG_HDR, c->comm, &m->req[0]) != MPI_SUCCESS)
        return DH_EIO;
    for (int k = 0; k < n; k++) {
        size_t off = (size_t)k * m->chunk, len = DH_MIN(m->chunk, m->len - off);
        if (MPI_Isend(m->data + off, (int)len, MPI_BYTE, m->peer, TAG_DATA, c->comm,
                      &m->req[k + 1]) != MPI_SUCCESS)
            return DH_EIO;
    }
    return 0;
}

/* Receives a header from src and posts its chunks' receives (thread only). */
static msg *post_recv(dh__comm *c, int src)
{
    msg *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    MPI_Recv(m->hdr, 3, MPI_UINT64_T, src, TAG_HDR, c->comm, MPI_STATUS_IGNORE);
    m->peer = src;
    m->tag = (int32_t)(uint32_t)m->hdr[0];
    m->len = (size_t)m->hdr[1];
    m->chunk = m->hdr[2] ? (size_t)m->hdr[2] : CHUNK_DEFAULT;
    int n = nchunks(m->len, m->chunk);
    m->data = aligned_alloc(64, (m->len + 63) / 64 * 64 + 64);
    m->req = calloc((size_t)n + 1, sizeof *m->req);
    m->nreq = n;
    if (!m->data || !m->req) { /* cannot keep it: take the chunks into nothing */
        msg_free(m);
        return NULL;
    }
    for (int k = 0; k < n; k++) {
        size_t off = (size_t)k * m->chunk, len = DH_MIN(m->chunk, m->len - off);
        MPI_Irecv(m->data + off, (int)len, MPI_BYTE, src, TAG_DATA, c->comm, &m->req[k]);
    }
    return m;
}

/* Tests every request of list *head; unlinks and returns the complete messages. */
static msg *take_complete(msg **head)
{
    msg *done = NULL, **pp = head;
    while (*pp) {
        msg *m = *pp;
        int flag = 1;
        if (m->nreq > 0)
            MPI_Testall(m->nreq, m->req, &flag, MPI_STATUSES_IGNORE);
        if (flag) {
            *pp = m->next;
            m->next = done;
            done = m;
        } else {
            pp = &m->next;
        }
    }
    return done;
}

static void append(msg **head, msg **tail, msg *m)
{
    m->next = NULL;
    if (*tail)
        (*tail)->next = m;
    else
        *head = m;
    *tail = m;
}

/* Who is who: every node's host and pid, gathered once after MPI_Init (thread only). */
static int learn_names(dh__comm *c)
{
    struct {
        int32_t pid;
        char host[64];
    } me = {(int32_t)getpid(), ""}, *all = calloc((size_t)c->size, sizeof *all);
    c->names = calloc((size_t)c->size, sizeof *c->names);
    c->last_seen = calloc((size_t)c->size, sizeof *c->last_seen);
    if (!all || !c->names || !c->last_seen) {
        free(all);
        return DH_ENOMEM;
    }
    gethostname(me.host, sizeof me.host - 1);
    int rc = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, c->comm);
    for (int k = 0; k < c->size; k++)
        snprintf(c->names[k], sizeof c->names[k], "node %d (%.64s, pid %d)", k, all[k].host,
                 (int)all[k].pid);
    free(all);
    double now = mono();
    for (int k = 0; k < c->size; k++)
        c->last_seen[k] = now;
    return rc == MPI_SUCCESS ? 0 : DH_EIO;
}

static int start_mpi(dh__comm *c)
{
    int provided = 0, inited = 0;
    MPI_Initialized(&inited);
    if (inited || MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        snprintf(c->err, sizeof c->err, "MPI could not be initialised");
        return DH_EIO;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
    MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    int rc = learn_names(c);
    if (rc)
        snprintf(c->err, sizeof c->err, "cannot learn the other nodes: %s", dh_strerror(rc));
    return rc;
}

/* Starts (ask) or moves on the exchange in flight; 1 when it completed. The comm thread's. */
static int ag_progress(dh__comm *c, int ask, double now)
{
    size_t len = c->ag_len;
    if (ask) {
        c->ag_active = 1;
        if (c->size > AG_P2P_MAX || !c->ag_sreq || !c->ag_have) {
            MPI_Iallgather(c->ag_mine, (int)len, MPI_BYTE, c->ag_all, (int)len, MPI_BYTE, c->comm,
                           &c->ag_req);
        } else {
            memcpy(c->ag_all + (size_t)c->rank * len, c->ag_mine, len);
            memset(c->ag_have, 0, (size_t)c->size);
            c->ag_have[c->rank] = 1;
            c->ag_got = 1;
            for (int k = 0; k < c->size; k++)
                c->ag_sreq[k] = MPI_REQUEST_NULL;
            for (int k = 0; k < c->size; k++)
                if (k != c->rank)
                    MPI_Isend(c->ag_mine, (int)len, MPI_BYTE, k, TAG_AG, c->comm, &c->ag_sreq[k]);
        }
    }
    if (!c->ag_active)
        return 0;
    int done = 0;
    if (c->ag_req != MPI_REQUEST_NULL) {
        MPI_Test(&c->ag_req, &done, MPI_STATUS_IGNORE);
    } else {
        for (int k = 0; k < c->size; k++) { /* the next record from each sender is this round's */
            int flag = 0;
            if (c->ag_have[k] ||
                MPI_Iprobe(k, TAG_AG, c->comm, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag)
                continue;
            MPI_Recv(c->ag_all + (size_t)k * len, (int)len, MPI_BYTE, k, TAG_AG, c->comm,
                     MPI_STATUS_IGNORE);
            c->ag_have[k] = 1;
            c->ag_got++;
            pthread_mutex_lock(&c->mu);
            c->last_seen[k] = now;
            pthread_mutex_unlock(&c->mu);
        }
        if (c->ag_got == c->size)
            MPI_Testall(c->size, c->ag_sreq, &done, MPI_STATUSES_IGNORE);
    }
    c->ag_active = !done;
    return done;
}

/* One pass of the loop; returns 1 if anything moved. Called without c->mu held. */
static int pump(dh__comm *c, msg **sending, msg **receiving, MPI_Request *hb_req, double *hb_at)
{
    int moved = 0;
    double now = mono();
    pthread_mutex_lock(&c->mu);
    msg *fresh = c->out_head;
    c->out_head = c->out_tail = NULL;
    int ag_ask = c->ag == AG_ASKED;
    if (ag_ask)
        c->ag = AG_RUNNING;
    pthread_mutex_unlock(&c->mu);
    while (fresh) { /* new sends */
        msg *m = fresh;
        fresh = m->next;
        if (post_send(c, m) != 0) { /* cannot post: the peer will time us out */
            msg_free(m);
            continue;
        }
        m->next = *sending;
        *sending = m;
        moved = 1;
    }
    for (msg *m = take_complete(sending), *nx; m; m = nx) {
        nx = m->next;
        msg_free(m);
        moved = 1;
    }
    if (now - *hb_at >= dh__comm_heartbeat(c->timeout)) { /* heartbeats, one in flight per peer */
        static const uint8_t beat = 1;
        for (int k = 0; k < c->size; k++) {
            int done = 1;
            if (k == c->rank)
                continue;
            if (hb_req[k] != MPI_REQUEST_NULL)
                MPI_Test(&hb_req[k], &done, MPI_STATUS_IGNORE);
            if (done)
                MPI_Isend(&beat, 1, MPI_BYTE, k, TAG_HB, c->comm, &hb_req[k]);
        }
        *hb_at = now;
    }
    for (int tag = TAG_HB; tag <= TAG_HDR; tag++) { /* incoming heartbeats and headers */
        int flag = 1;
        MPI_Status st;
        while (MPI_Iprobe(MPI_ANY_SOURCE, tag, c->comm, &flag, &st) == MPI_SUCCESS && flag) {
            int src = st.MPI_SOURCE;
            if (tag == TAG_HB) {
                uint8_t b;
                MPI_Recv(&b, 1, MPI_BYTE, src, TAG_HB, c->comm, MPI_STATUS_IGNORE);
            } else {
                msg *m = post_recv(c, src);
                if (m) {
                    m->next = *receiving;
                    *receiving = m;
                }
            }
            pthread_mutex_lock(&c->mu);
            c->last_seen[src] = now;
            pthread_mutex_unlock(&c->mu);
            moved |= tag != TAG_HB; /* a heartbeat is no work: the idle back-off goes on */
        }
    }
    msg *got = take_complete(receiving);
    int ag_done = ag_progress(c, ag_ask, now);
    moved |= ag_done;
    pthread_mutex_lock(&c->mu);
    for (msg *m = got, *nx; m; m = nx) { /* received: in order of completion per sender */
        nx = m->next;
        free(m->req);
        m->req = NULL;
        append(&c->in_head, &c->in_tail, m);
        moved = 1;
    }
    if (ag_done)
        c->ag = AG_DONE;
    for (int k = 0; k < c->size && c->dead < 0; k++)
        if (k != c->rank && now - c->last_seen[k] > c->timeout) {
            c->dead = k;
            snprintf(c->err, sizeof c->err, "%s stopped responding (nothing heard for %.1f s)",
                     c->names[k], now - c->last_seen[k]);
        }
    if (moved || c->dead >= 0)
        pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return moved;
}

static void *comm_main(void *p)
{
    dh__comm *c = p;
    int rc = start_mpi(c);
    struct timespec cpu0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
    pthread_mutex_lock(&c->mu);
    c->cpu_s = (double)cpu0.tv_sec + (double)cpu0.tv_nsec * 1e-9; /* MPI's start-up */
    c->rc = rc;
    c->started = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (rc)
        return NULL;
    MPI_Request *hb_req = malloc((size_t)c->size * sizeof *hb_req);
    c->ag_req = MPI_REQUEST_NULL;
    c->ag_sreq = malloc((size_t)c->size * sizeof *c->ag_sreq);
    c->ag_have = calloc((size_t)c->size, 1);
    for (int k = 0; hb_req && k < c->size; k++)
        hb_req[k] = MPI_REQUEST_NULL;
    msg *sending = NULL, *receiving = NULL;
    double hb_at = 0, stop_at = 0, ag_since = 0;
    long idle_ns = 0;
    for (;;) {
        int moved = hb_req ? pump(c, &sending, &receiving, hb_req, &hb_at) : 0;
        struct timespec cpu;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
        pthread_mutex_lock(&c->mu);
        int stop = c->stop, dead = c->dead >= 0;
        c->cpu_s = (double)cpu.tv_sec + (double)cpu.tv_nsec * 1e-9;
        pthread_mutex_unlock(&c->mu);
        if (stop && stop_at == 0)
            stop_at = mono();
        /* stopping: once what was queued went out, or the grace ran out, or a peer died */
        if (stop && (!sending || dead || mono() - stop_at > STOP_GRACE_S))
            break;
        /* idle: back off from 50 us to IDLE_MAX_NS (a message from another node waits at
         * most that long to be seen; work queued here wakes the thread at once), so an idle
         * agent's thread costs well under 1% of a core. An exchange waiting for
         * a slower node is spun on for its first AG_SPIN_S only, then polled every 50 us,
         * doubling up to AG_POLL_MAX_NS: spinning through a whole step's wait would take a core
         * from the decoders. The node that arrives last finds every record there and goes on at
         * once; only nodes that were early (they had slack) see theirs up to a poll late. */
        double now = mono();
        int ag = c->ag_active;
        ag_since = !ag ? 0 : ag_since > 0 ? ag_since : now;
        int busy = moved || sending || receiving || (ag && now - ag_since < AG_SPIN_S);
        idle_ns = busy ? 0
                  : ag ? DH_MIN(idle_ns ? idle_ns * 2 : 50000, AG_POLL_MAX_NS)
                       : DH_MIN(idle_ns ? idle_ns * 2 : 50000, IDLE_MAX_NS);
        if (idle_ns) { /* until the backoff ends, or a caller queues work */
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            t.tv_nsec += idle_ns;
            t.tv_sec += t.tv_nsec / 1000000000L;
            t.tv_nsec %= 1000000000L;
            pthread_mutex_lock(&c->mu);
            if (!c->out_head && c->ag != AG_ASKED && !c->stop)
                pthread_cond_timedwait(&c->wake, &c->mu, &t);
            pthread_mutex_unlock(&c->mu);
        } else if (!moved)
            sched_yield(); /* a transfer in flight progresses only while MPI is called */
    }
    for (msg *m = receiving, *nx; m; m = nx) { /* a peer stopped mid-message */
        nx = m->next;
        for (int k = 0; k < m->nreq; k++)
            if (m->req[k] != MPI_REQUEST_NULL) {
                MPI_Cancel(&m->req[k]);
                MPI_Request_free(&m->req[k]);
            }
        msg_free(m);
    }
    for (msg *m = sending, *nx; m; m = nx) {
        nx = m->next;
        msg_free(m); /* (their requests are abandoned: MPI_Finalize cleans up) */
    }
    free(hb_req);
    free(c->ag_sreq);
    free(c->ag_have);
    pthread_mutex_lock(&c->mu);
    int dead = c->dead >= 0;
    pthread_mutex_unlock(&c->mu);
    if (dead) /* MPI_Finalize waits for every process, the dead one too: it would never return */
        return NULL;
    MPI_Comm_free(&c->comm);
    MPI_Finalize();
    return NULL;
}

/* Frees c and everything it still holds (its thread has ended). */
static void comm_free(dh__comm *c)
{
    for (msg *m = c->in_head, *nx; m; m = nx) {
        nx = m->next;
        msg_free(m);
    }
    for (msg *m = c->out_head, *nx; m; m = nx) {
        nx = m->next;
        msg_free(m);
    }
    free(c->ag_mine);
    free(c->ag_all);
    free(c->names);
    free(c->last_seen);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    pthread_cond_destroy(&c->wake);
    free(c);
}

int dh__comm_start(double timeout_s, dh__comm **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!(timeout_s > 0))
        return comm_fail(err, errlen, DH_EINVAL, "a node timeout must be positive");
    dh__comm *c = calloc(1, sizeof *c);
    if (!c)
        return comm_fail(err, errlen, DH_ENOMEM, "out of memory");
    c->dead = -1;
    c->timeout = timeout_s;
    c->chunk = CHUNK_DEFAULT;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_cond_init(&c->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&c->mu, NULL);
    if (pthread_create(&c->thr, NULL, comm_main, c) != 0) {
        pthread_mutex_destroy(&c->mu);
        pthread_cond_destroy(&c->cv);
        pthread_cond_destroy(&c->wake);
        free(c);
        return comm_fail(err, errlen, DH_ENOMEM, "cannot start the communication thread");
    }
    pthread_mutex_lock(&c->mu);
    while (!c->started)
        pthread_cond_wait(&c->cv, &c->mu);
    int rc = c->rc;
    pthread_mutex_unlock(&c->mu);
    if (rc) {
        comm_fail(err, errlen, rc, "%s", c->err);
        pthread_join(c->thr, NULL);
        comm_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int dh__comm_rank(const dh__comm *c)
{
    return c->rank;
}

int dh__comm_size(const dh__comm *c)
{
    return c->size;
}

const char *dh__comm_name(const dh__comm *c, int node)
{
    return node >= 0 && node < c->size ? c->names[node] : "node ?";
}

void dh__comm_set_chunk(dh__comm *c, size_t bytes)
{
    pthread_mutex_lock(&c->mu);
    c->chunk = bytes ? DH_MIN(bytes, CHUNK_DEFAULT) : CHUNK_DEFAULT;
    pthread_mutex_unlock(&c->mu);
}

int dh__comm_send(dh__comm *c, int to, int32_t tag, const void *buf, size_t len)
{
    if (to < 0 || to >= c->size || to == c->rank || (len && !buf) || tag < 0)
        return DH_EINVAL;
    msg *m = calloc(1, sizeof *m);
    uint8_t *copy = malloc(len ? len : 1);
    if (!m || !copy) {
        free(m);
        free(copy);
        return DH_ENOMEM;
    }
    if (len)
        memcpy(copy, buf, len);
    m->peer = to;
    m->tag = tag;
    m->len = len;
    m->data = copy;
    pthread_mutex_lock(&c->mu);
    m->chunk = c->chunk;
    int dead = c->dead >= 0;
    if (!dead)
        append(&c->out_head, &c->out_tail, m);
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->mu);
    if (dead)
        msg_free(m);
    return dead ? DH_EPEER : 0;
}

/* Under c->mu: DH_EPEER with the dead node's sentence, or 0. */
static int dead_locked(dh__comm *c, char *err, size_t errlen)
{
    if (c->dead < 0)
        return 0;
    return comm_fail(err, errlen, DH_EPEER, "%s", c->err);
}

int dh__comm_recv(dh__comm *c, dh__comm_msg *out, double timeout_s, char *err, size_t errlen)
{
    double deadline = mono() + timeout_s;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    while (!c->in_head && !(rc = dead_locked(c, err, errlen)))
        if (wait_until(c, deadline)) {
            rc = comm_fail(err, errlen, DH_ETIMEDOUT, "no message within %.1f s", timeout_s);
            break;
        }
    msg *m = c->in_head;
    if (m && !rc) {
        c->in_head = m->next;
        if (!c->in_head)
            c->in_tail = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (rc)
        return rc;
    *out = (dh__comm_msg){m->peer, m->tag, m->len, m->data};
    free(m);
    return 0;
}

int dh__comm_allgather(dh__comm *c, const void *mine, void *all, size_t len, double timeout_s,
                       char *err, size_t errlen)
{
    if (!len || len > INT32_MAX / (size_t)c->size)
        return comm_fail(err, errlen, DH_EINVAL, "an exchanged record must be 1 to %d bytes",
                        (int)(INT32_MAX / c->size));
    double deadline = mono() + timeout_s;
    pthread_mutex_lock(&c->mu);
    int rc = dead_locked(c, err, errlen);
    if (!rc && c->ag != AG_IDLE)
        rc = comm_fail(err, errlen, DH_EPEER, "the previous exchange never completed");
    if (!rc && c->ag_len != len) {
        free(c->ag_mine);
        free(c->ag_all);
        c->ag_mine = malloc(len);
        c->ag_all = malloc(len * (size_t)c->size);
        c->ag_len = c->ag_mine && c->ag_all ? len : 0;
        if (!c->ag_len)
            rc = comm_fail(err, errlen, DH_ENOMEM, "out of memory");
    }
    if (!rc) {
        memcpy(c->ag_mine, mine, len);
        c->ag = AG_ASKED;
        pthread_cond_signal(&c->wake);
        while (c->ag != AG_DONE && !(rc = dead_locked(c, err, errlen)))
            if (wait_until(c, deadline)) {
                rc = comm_fail(err, errlen, DH_ETIMEDOUT,
                              "the per-step exchange did not complete within %.1f s", timeout_s);
                break;
            }
        if (!rc) {
            memcpy(all, c->ag_all, len * (size_t)c->size);
            c->ag = AG_IDLE;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

double dh__comm_cpu(dh__comm *c)
{
    pthread_mutex_lock(&c->mu);
    double s = c->cpu_s;
    pthread_mutex_unlock(&c->mu);
    return s;
}

int dh__comm_silent(dh__comm *c, double min_s, double *silent_s)
{
    double now = mono(), worst = 0;
    int who = -1;
    pthread_mutex_lock(&c->mu);
    for (int k = 0; k < c->size; k++)
        if (k != c->rank && now - c->last_seen[k] > worst)
            worst = now - c->last_seen[k], who = k;
    pthread_mutex_unlock(&c->mu);
    if (silent_s)
        *silent_s = worst;
    return worst > min_s ? who : -1;
}

void dh__comm_stop(dh__comm *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->thr, NULL);
    comm_free(c);
}
