/*
 * serve_int.h - what the agent's files share (internal to src/dist): the
 * agent's streams and their connections (serve.c), and the acceptor that
 * reads each new connection's attach and hands it to its stream (accept.c).
 */
#ifndef DH_SERVE_INT_H
#define DH_SERVE_INT_H

#include "dist.h"

#include "../catalog/catalog.h"
#include "../engine/engine_serve.h"
#include "../engine/gate.h"
#include "../run/run.h"

#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>

#define MAX_LEASES 64

typedef struct {
    dh_batch b;
    double taken;   /* monotonic seconds */
    double seconds; /* the reported step time; < 0: none */
} lease;

/* Where a run starts: (epoch, step, shift) of the order, and its first global step. */
typedef struct {
    int64_t epoch, step, shift, base;
    int64_t dropped; /* samples of the resumed epoch that fill no batch of the new size */
} start_point;

typedef struct agent agent;
typedef struct hub hub;

/* An attach the acceptor read, waiting for its stream to look at it. */
typedef struct {
    int fd;
    int32_t pid;
    dh__attach req;
} pending;

typedef struct {
    agent *a;
    int fd, rank;
    int32_t pid;
    dh__attach req;
    pthread_t thread;
    int started, finished, detached, ended; /* ended: the run's end was delivered */
    int waiting;       /* under a.mu: blocked in the engine for its next batch */
    double wait_since; /* under a.mu: since when (monotonic seconds) */
    double took_at;    /* under a.mu: when it last took a batch (or attached) */
    int stall_told;    /* under a.mu: this wait was reported as a stall */
    int hung_up;       /* under a.mu: seen gone while waiting (by watch) */
    int64_t next_step; /* batches handed to this rank so far (under a.mu) */
    int64_t released;  /* batches it gave back (not taken back at its death) */
    double last_release; /* when it gave one back last (monotonic seconds) */
    lease leases[MAX_LEASES];
    int nleases;
    int failed;        /* under a.mu: it left as a failed rank (ABORT), saying why */
    char why[DH__ABORT_TEXT + 1];
} conn;

struct agent {
    const dh_run_config *cfg; /* &run below */
    dh_run_config run;
    dh_serve_opts o;
    hub *hub;
    const char *stream;     /* this stream's name */
    int R;
    int lo, hi;             /* the ranks this agent serves: all, or its node's on several */
    dh_engine *e;
    conn *conns;
    struct pollfd *pf;      /* the listening socket and each held attach */
    int attached;
    int refused;            /* attaches refused while ranks attach, the last one's why */
    char last_refused[512]; /* whole: as long as any refusal's (take_attach's why) */
    uint64_t manifest_hash, spec_hash;
    char augment_text[400];     /* what the spec's random keys do (dh_spec_random_text) */
    int64_t steps_per_epoch, samples;
    dh__attached info;
    pthread_mutex_t mu;
    pthread_cond_t changed;
    _Atomic int stopping;   /* should_stop said so: ranks are told, then let go */
    int end_code;           /* done: what a late attach is told (code, sentence) */
    const char *end_why;
    int fault_code;
    char fault[640];
    int64_t N;              /* steps of this run; -1: until stopped */
    int64_t left_at;        /* the earliest step a rank that left early will not take */
    int died;               /* a rank died (not a clean detach) */
    /* Restarts (on_rank_exit wait): generation 0 is the first set of ranks; a later one
     * starts, unless its ranks present a state, where every rank of the last had got to. */
    int gen;
    start_point restart;
    int e_began; /* this generation's ranks all attached and its engine began */
    /* keep_last: the samples of the last batch of epoch pad_epoch, and which are padding */
    dh_sampler *order;
    int64_t pad_epoch, *last;
    /* Attaches the acceptor read for this stream (under hub.mu), and a pipe that wakes the
     * stream when one arrives. done: the stream ended (the acceptor refuses its attaches). */
    pending *queue;
    size_t nqueue, capq;
    int inbox[2];
    int done, unused; /* unused: no trainer ever came while the other streams ran */
    int ran;          /* under hub.mu: a set of its ranks attached and its run began */
    pthread_t thread;
    dh_sample_error_cb on_error;
    void *user;
    dh_result *out;
    int rc;
    char err[1024];
};

/* The agent: one listening socket whose attaches go to the stream they name. */
struct hub {
    const char *name;
    int listen_fd, n;
    agent *s;
    dh__gate *gate; /* several streams: the node's CPU, shared (NULL: one stream) */
    pthread_mutex_t mu;
    atomic_int quit; /* the agent could not start every stream: the others end */
    int64_t quiet;   /* the acceptor's: connections closed unheard, not yet told */
    int64_t refused_in_row, refused_more; /* its refusals since the last attach; untold */
    void (*on_event)(const char *message, void *user);
    void *event_user;
};

/* accept.c: an event of stream a (prefixed with its name when the agent has several). */
void dh__agent_event(agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define event(...) dh__agent_event(__VA_ARGS__) /* the agent's files tell events so */

/* A step of the run as trainers count it (from the start of training). */
static inline int64_t dh__agent_step(const agent *a, int64_t st)
{
    return a->info.step_base + st;
}

/* Steps left of the job from a start (--steps counts global steps from the start of
 * training, --epochs whole epochs), or -1 for an endless job. */
static inline int64_t dh__agent_job_left(const agent *a, const start_point *p)
{
    const dh_run_config *c = a->cfg;
    return c->steps > 0    ? c->steps - p->base
           : c->steps == 0 ? DH_MAX(c->epochs, 1) * a->steps_per_epoch -
                                 (p->epoch * a->steps_per_epoch + p->step)
                           : -1;
}

/* serve_attach.c: where a resumed attach starts (0, or the refusal in why); the queued
 * attaches taken (validated, or refused with why when why is not NULL); every rank awaited
 * (0, DH_ETIMEDOUT or DH_ECANCELED); what the run is, for every rank; every held attach
 * answered with the pools. */
int dh__agent_resume_point(const agent *a, const dh__attach *q, start_point *p, char *why,
                           size_t len);
void dh__agent_take_queued(agent *a, int code, const char *why);
int dh__agent_wait_for_ranks(agent *a);
/* Tells the held attaches every second that the agent waits, from a thread, until stopped
 * (while the run begins on several nodes); the conns are not touched otherwise meanwhile. */
typedef struct {
    agent *a;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop, running;
    double until; /* the attach timeout, as told */
} dh__agent_teller;
int dh__agent_teller_start(agent *a, dh__agent_teller *t);
void dh__agent_teller_stop(dh__agent_teller *t);
void dh__agent_fill_info(agent *a);
int dh__agent_answer(agent *a);

/* serve_rank.c: a rank's thread (arg: its conn); what a lost rank means for the others;
 * under a.mu, rank c leaving cleanly (where the run stops for the others, the sentence they
 * are told; 1 when it left before the run's end); the event saying so (how: "" or a
 * circumstance, " while its request waited"). */
int dh__agent_mark_left(agent *a, conn *c);
void dh__agent_tell_left(agent *a, const conn *c, int early, const char *how);
void *dh__agent_rank_main(void *arg);
const char *dh__agent_fault_tail(const agent *a);
/* Rank c is lost: it died, or left as a failed rank (c->failed, saying c->why). The run
 * stops for the others naming it (the first cause stays). at: where it was (" holding step
 * 12", " while it waited for step 12", or ""). Without a.mu. */
void dh__agent_lost(agent *a, conn *c, const char *at);
/* Before rank c's fault (or early leaving) is taken as the cause: another rank whose socket
 * is already gone without a DETACH is named first (it died, and c failed because of it, as
 * under DDP). 1 when one was. Without a.mu. */
int dh__agent_blame_first(agent *a, const conn *c);
/* 1 when the bytes waiting on c's socket hold a DETACH (looked at, not taken); an ABORT's
 * reason is kept (c->why). */
int dh__agent_detach_waiting(conn *c);
/* An ABORT's text kept as c->why, printable ASCII only (a trainer's words reach the log). */
void dh__agent_abort_said(conn *c, const void *text, uint32_t len);

/* serve_watch.c: until every rank's thread ended (stopping, spotting the lost and stalled). */
void dh__agent_watch(agent *a);

/*
 * The acceptor: reads the attach of each new connection (all at once: a connection that
 * says nothing delays no other), checks the peer is this user, and queues it for the
 * stream it names; until every stream has ended. io_ms bounds a connection's silence.
 */
void dh__serve_accept(hub *h, int io_ms);
/* Refuses a connection with a sentence (an event of stream a, else of the agent) and
 * closes it; why "" sends nothing (the peer said nothing one could answer). */
void dh__serve_refuse(hub *h, agent *a, int fd, int32_t pid, int rc, const char *why);
/* Tells the agent's on_event, prefixed with the stream's name when the agent has several. */
void dh__serve_say(const hub *h, const char *stream, const char *fmt, va_list ap);

#endif
