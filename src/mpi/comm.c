/*
 * comm.c - the communication thread of a multi-node agent (see comm.h; the
 * layer's files: comm_int.h).
 *
 * DESIGN: MPI is initialised FUNNELED inside the thread, which then loops
 * (pump): post the callers' new sends and complete earlier ones (comm_msg.c),
 * send heartbeats (comm_live.c), receive heartbeats and headers and hand
 * complete messages to the inbox in order per sender (comm_msg.c), drive
 * the one exchange in flight (comm_ag.c), and declare a node dead when it
 * was silent for the timeout (comm_live.c). While a transfer is in flight
 * it polls without sleeping (MPI moves a large message only while it is
 * called); when nothing is in flight and iterations move nothing it waits,
 * 50 us doubling to 5 ms, or until a caller queues work (a condition
 * variable), so an idle agent costs little CPU and what it is given goes
 * out at once. Callers share the inbox, outbox and exchange slot with it
 * under one mutex; every wait has a deadline and ends early when a node is
 * dead. Buffers are the comm's own (callers' data is copied), so a caller
 * that gives up never leaves MPI writing into its memory.
 */
#include "comm_int.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

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
    int rc = dh__comm_learn_names(c);
    if (rc)
        snprintf(c->err, sizeof c->err, "cannot learn the other nodes: %s", dh_strerror(rc));
    return rc;
}


/* One pass of the loop: the callers' new sends, heartbeats, incoming messages in order per
 * sender, the exchange in flight, liveness. 1 if anything moved. Without c->mu held. */
static int pump(dh__comm *c, comm_pump *p)
{
    double now = dh__comm_mono();
    pthread_mutex_lock(&c->mu);
    msg *fresh = c->out_head;
    c->out_head = c->out_tail = NULL;
    int ag_ask = c->ag == AG_ASKED;
    if (ag_ask)
        c->ag = AG_RUNNING;
    pthread_mutex_unlock(&c->mu);
    int moved = dh__comm_sends(c, fresh, p);
    dh__comm_beat(c, p, now);
    moved |= dh__comm_probe(c, p, now);
    msg *got = dh__comm_take_in_order(c, p);
    int ag_done = dh__comm_ag_progress(c, ag_ask, now);
    moved |= ag_done || got;
    pthread_mutex_lock(&c->mu);
    for (msg *m = got, *nx; m; m = nx) { /* for callers, in order per sender */
        nx = m->next;
        free(m->req);
        m->req = NULL;
        if (m->tag != MSG_FAREWELL) {
            dh__comm_append(&c->in_head, &c->in_tail, m);
            continue;
        }
        if (c->dead < 0) { /* its sender failed: every wait ends with its reason */
            c->dead = m->peer;
            snprintf(c->err, sizeof c->err, "%s failed: %.*s", c->names[m->peer],
                     (int)m->len, m->len ? (const char *)m->data : "");
        }
        dh__comm_msg_free(m);
    }
    if (ag_done)
        c->ag = AG_DONE;
    dh__comm_check_alive_locked(c, now);
    if (moved || c->dead >= 0)
        pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return moved;
}

/*
 * Between passes, when nothing moved: back off from 50 us to IDLE_MAX_NS (a message from
 * another node waits at most that long to be seen; work queued here wakes the thread at
 * once), so an idle agent's thread costs well under 1% of a core. An exchange waiting for a
 * slower node is spun on for its first AG_SPIN_S only, then polled every 50 us, doubling up
 * to AG_POLL_MAX_NS: spinning through a whole step's wait would take a core from the
 * decoders. The node that arrives last finds every record there and goes on at once; only
 * nodes that were early (they had slack) see theirs up to a poll late.
 */
static void rest(dh__comm *c, const comm_pump *pp, int moved, double *ag_since, long *idle_ns)
{
    double now = dh__comm_mono();
    int ag = c->ag_active;
    *ag_since = !ag ? 0 : *ag_since > 0 ? *ag_since : now;
    int busy = moved || pp->sending || pp->receiving || (ag && now - *ag_since < AG_SPIN_S);
    long next = *idle_ns ? *idle_ns * 2 : 50000;
    *idle_ns = busy ? 0 : DH_MIN(next, ag ? AG_POLL_MAX_NS : IDLE_MAX_NS);
    if (*idle_ns) { /* until the backoff ends, or a caller queues work */
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_nsec += *idle_ns;
        t.tv_sec += t.tv_nsec / 1000000000L;
        t.tv_nsec %= 1000000000L;
        pthread_mutex_lock(&c->mu);
        if (!c->out_head && c->ag != AG_ASKED && !c->stop)
            pthread_cond_timedwait(&c->wake, &c->mu, &t);
        pthread_mutex_unlock(&c->mu);
    } else if (!moved) {
        sched_yield(); /* a transfer in flight progresses only while MPI is called */
    }
}

static void *comm_main(void *arg)
{
    dh__comm *c = arg;
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
    comm_pump pp = {.hb_req = malloc((size_t)c->size * sizeof *pp.hb_req),
                   .blocked = calloc((size_t)c->size, 1)};
    c->ag_req = MPI_REQUEST_NULL;
    c->ag_sreq = malloc((size_t)c->size * sizeof *c->ag_sreq);
    c->ag_have = calloc((size_t)c->size, 1);
    for (int k = 0; pp.hb_req && k < c->size; k++)
        pp.hb_req[k] = MPI_REQUEST_NULL;
    double stop_at = 0, ag_since = 0;
    long idle_ns = 0;
    for (;;) {
        int moved = pp.hb_req && pp.blocked ? pump(c, &pp) : 0;
        struct timespec cpu;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
        pthread_mutex_lock(&c->mu);
        int stop = c->stop, dead = c->dead >= 0, queued = c->out_head != NULL;
        c->cpu_s = (double)cpu.tv_sec + (double)cpu.tv_nsec * 1e-9;
        pthread_mutex_unlock(&c->mu);
        if (stop && stop_at == 0)
            stop_at = dh__comm_mono();
        /* stopping: once what was queued went out, or the grace ran out, or a peer died. What
         * was queued includes what callers queued after this pass took their queue (a
         * farewell just before the stop: it was dropped, and the others waited out the node
         * timeout for a node that had said why it failed). */
        if (stop && ((!pp.sending && !queued) || dead || dh__comm_mono() - stop_at > STOP_GRACE_S))
            break;
        rest(c, &pp, moved, &ag_since, &idle_ns);
    }
    for (msg *m = pp.receiving, *nx; m; m = nx) { /* a peer stopped mid-message */
        nx = m->next;
        for (int k = 0; k < m->nreq; k++)
            if (m->req[k] != MPI_REQUEST_NULL) {
                MPI_Cancel(&m->req[k]);
                MPI_Request_free(&m->req[k]);
            }
        dh__comm_msg_free(m);
    }
    for (msg *m = pp.sending, *nx; m; m = nx) {
        nx = m->next;
        dh__comm_msg_free(m); /* (their requests are abandoned: MPI_Finalize cleans up) */
    }
    free(pp.hb_req);
    free(pp.blocked);
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
        dh__comm_msg_free(m);
    }
    for (msg *m = c->out_head, *nx; m; m = nx) {
        nx = m->next;
        dh__comm_msg_free(m);
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
        return dh__comm_fail(err, errlen, DH_EINVAL, "a node timeout must be positive");
    dh__comm *c = calloc(1, sizeof *c);
    if (!c)
        return dh__comm_fail(err, errlen, DH_ENOMEM, "out of memory");
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
        return dh__comm_fail(err, errlen, DH_ENOMEM, "cannot start the communication thread");
    }
    pthread_mutex_lock(&c->mu);
    while (!c->started)
        pthread_cond_wait(&c->cv, &c->mu);
    int rc = c->rc;
    pthread_mutex_unlock(&c->mu);
    if (rc) {
        dh__comm_fail(err, errlen, rc, "%s", c->err);
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

/* Queues a message of any tag (dh__comm_send: the callers' own, >= 0). */
static int queue_msg(dh__comm *c, int to, int32_t tag, const void *buf, size_t len)
{
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
        dh__comm_append(&c->out_head, &c->out_tail, m);
    pthread_cond_signal(&c->wake);
    pthread_mutex_unlock(&c->mu);
    if (dead)
        dh__comm_msg_free(m);
    return dead ? DH_EPEER : 0;
}

int dh__comm_send(dh__comm *c, int to, int32_t tag, const void *buf, size_t len)
{
    if (to < 0 || to >= c->size || to == c->rank || (len && !buf) || tag < 0)
        return DH_EINVAL;
    return queue_msg(c, to, tag, buf, len);
}

void dh__comm_farewell(dh__comm *c, const char *why)
{
    for (int k = 0; c && k < c->size; k++)
        if (k != c->rank)
            queue_msg(c, k, MSG_FAREWELL, why, strlen(why) + 1);
}

int dh__comm_recv(dh__comm *c, dh__comm_msg *out, double timeout_s, char *err, size_t errlen)
{
    double deadline = dh__comm_mono() + timeout_s;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    while (!c->in_head && !(rc = dh__comm_dead_locked(c, err, errlen)))
        if (dh__comm_wait_until(c, deadline)) {
            rc = dh__comm_fail(err, errlen, DH_ETIMEDOUT, "no message within %.1f s", timeout_s);
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


double dh__comm_cpu(dh__comm *c)
{
    pthread_mutex_lock(&c->mu);
    double s = c->cpu_s;
    pthread_mutex_unlock(&c->mu);
    return s;
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
