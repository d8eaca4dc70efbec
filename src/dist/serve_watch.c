/*
 * serve_watch.c - the agent's main thread while its ranks are served
 * (serve_int.h): it waits for their threads, stops the run when should_stop
 * says so or when no rank can take a step any more, and sees what a rank
 * thread blocked in the engine cannot: a trainer that died meanwhile, and a
 * rank that takes nothing while another waits for its batch.
 */
#include "serve_int.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A rank blocked in the engine for its next batch cannot see its socket: a trainer that dies
 * meanwhile is seen here, and the run stops naming it (nothing was said before, until another
 * rank left); one that detached (a close() after its request timed out) is a rank leaving,
 * told now: the others' requests for the steps it will not take fail from here. */
static void spot_hangups(agent *a)
{
    for (int r = a->lo; r < a->hi; r++) {
        conn *c = &a->conns[r];
        pthread_mutex_lock(&a->mu);
        int look = c->started && !c->finished && c->waiting && !c->hung_up;
        pthread_mutex_unlock(&a->mu);
        struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
        if (!look || poll(&p, 1, 0) <= 0 || !(p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
            continue;
        if (dh__agent_detach_waiting(c)) { /* left cleanly: the others are told now, not once its
                                  * thread is back from the engine */
            dh__agent_blame_first(a, c);
            pthread_mutex_lock(&a->mu);
            int early = dh__agent_mark_left(a, c);
            c->hung_up = 1;
            pthread_mutex_unlock(&a->mu);
            dh__agent_tell_left(a, c, early, " while its request waited");
            continue;
        }
        char at[64];
        pthread_mutex_lock(&a->mu);
        c->hung_up = 1;
        snprintf(at, sizeof at, " while it waited for step %lld",
                 (long long)dh__agent_step(a, c->next_step));
        pthread_mutex_unlock(&a->mu);
        dh__agent_lost(a, c, at);
    }
}

/* A rank waiting this long for its batch is a stall worth a line (tests make it shorter). */
static _Atomic double stall_s = 10.0;

void dh__serve_test_stall(double seconds)
{
    stall_s = seconds;
}

/* Under a.mu: a rank that has waited stall_s for its batch while another rank takes nothing
 * (stopped, or not iterating its Loader) is told in one line naming both: the waiting
 * trainer's own timeout can only say that nothing came. */
static void spot_stalls(agent *a)
{
    double now = dh__mono();
    for (int r = a->lo; r < a->hi; r++) {
        conn *c = &a->conns[r];
        if (!c->started || c->finished || !c->waiting || c->stall_told ||
            now - c->wait_since < stall_s)
            continue;
        const conn *idle = NULL; /* the rank furthest behind that is not asking */
        for (int j = a->lo; j < a->hi; j++) {
            const conn *o = &a->conns[j];
            if (o != c && o->started && !o->finished && !o->waiting &&
                (!idle || o->next_step < idle->next_step))
                idle = o;
        }
        c->stall_told = 1;
        if (!idle || idle->next_step > c->next_step)
            continue; /* everyone is asking: the workers are behind, not a rank */
        char last[64] = "no batch at all yet";
        if (idle->next_step)
            snprintf(last, sizeof last, "it took step %lld last",
                     (long long)dh__agent_step(a, idle->next_step - 1));
        event(a, "rank %d has waited %.0f s for its batch of step %lld; rank %d (pid %d) has "
              "taken nothing for %.0f s (%s): is it stopped, or not iterating its Loader?",
              c->rank, now - c->wait_since, (long long)dh__agent_step(a, c->next_step),
              idle->rank, (int)idle->pid, now - idle->took_at, last);
    }
}

/* How often the watch looks (ms): a rank blocked in the engine that dies is seen within this,
 * usually before its peers' faults (under DDP they follow within tens of ms; when one comes
 * first, dh__agent_blame_first still names the dead rank). Tests may make it longer. */
static _Atomic long watch_ms = 20;

void dh__serve_test_watch_ms(long ms)
{
    watch_ms = ms;
}

/* Waits until every rank's thread ended, stopping the engine when should_stop says so. */
void dh__agent_watch(agent *a)
{
    pthread_mutex_lock(&a->mu);
    for (;;) {
        int running = 0;
        for (int r = a->lo; r < a->hi; r++)
            running += a->conns[r].started && !a->conns[r].finished;
        if (!running)
            break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        long ms = watch_ms;
        until.tv_sec += ms / 1000;
        until.tv_nsec += (ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L)
            until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&a->changed, &a->mu, &until);
        int reap = a->left_at < INT64_MAX && !a->died;
        for (int r = a->lo; reap && r < a->hi; r++) /* can any rank still take a step? */
            reap = !(a->conns[r].started && !a->conns[r].finished &&
                     a->conns[r].next_step < a->left_at);
        char why[sizeof a->fault];
        snprintf(why, sizeof why, "%s", a->fault);
        spot_stalls(a);
        pthread_mutex_unlock(&a->mu);
        if (reap) { /* no: wake whoever waits for a step the rank that left will not take */
            dh__engine_count_taken(a->e); /* they left together: what they took counts */
            dh__engine_abort(a->e, DH_EPEER, why);
        }
        spot_hangups(a);
        if (a->o.on_rank_exit == DH_ON_RANK_EXIT_STOP) /* waiting: for the next set of ranks */
            dh__agent_take_queued(a, DH_EMISMATCH, "this stream's ranks are all attached and its "
                                  "run is going (a second trainer for one rank, or a Loader "
                                  "created twice?)");
        if (a->cfg->should_stop && a->cfg->should_stop(a->cfg->should_stop_user)) {
            a->stopping = 1; /* a rank lost from here on follows the stop (lost) */
            dh__engine_count_taken(a->e);
            if (!a->cfg->exchange || a->cfg->nodes < 2) /* on several, the nodes agree first */
                dh_engine_stop(a->e);
        }
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
}
