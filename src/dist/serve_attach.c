/*
 * serve_attach.c - the agent's ranks attaching (serve_int.h): each attach
 * the acceptor queued is validated against the stream (world, rank, job
 * identity, resume point) and held unanswered, a held one whose trainer went
 * away is dropped (its rank free again), and once every rank is in, each is
 * answered with the pools' descriptors and what the run is.
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

/*
 * Where a resumed attach starts in this agent's order: the samples the state consumed of its
 * epoch (the order within an epoch depends only on the seed, not on the global batch), as
 * (epoch, step, shift) of this agent's global batch: the epoch's remaining batches start at
 * the first sample not consumed and keep its last step where an epoch's last step is, so
 * no sample is served twice or skipped. Refuses a position outside the epoch or past the
 * job's end.
 */
int dh__agent_resume_point(const agent *a, const dh__attach *q, start_point *p, char *why,
                           size_t len)
{
    int64_t G = a->cfg->global_batch, Gs = q->resume_global_batch ? q->resume_global_batch : G;
    int64_t n = a->samples, spe = a->steps_per_epoch, keep = a->cfg->keep_last;
    /* every number is the trainer's: bounded before any arithmetic */
    int sane = Gs >= 1 && Gs <= INT32_MAX && q->step >= 0 && q->step <= n && q->epoch >= 0 &&
               q->epoch <= INT32_MAX && q->resume_shift > -Gs && q->resume_shift < Gs &&
               q->resume_global_step >= -1 && q->resume_global_step <= (INT64_C(1) << 50);
    int64_t consumed = sane ? q->step * Gs + q->resume_shift : -1;
    if (consumed < 0 || consumed > n)
        return dh__fail(why, len, DH_EINVAL, "the saved position (epoch %lld, step %lld of "
                        "global batch %lld) is not a position of this manifest's %lld samples",
                        (long long)q->epoch, (long long)q->step, (long long)Gs, (long long)n);
    int64_t left = keep ? (n - consumed + G - 1) / G : (n - consumed) / G; /* batches */
    p->epoch = q->epoch + (left == 0); /* nothing left of its epoch: the next one */
    p->step = left ? spe - left : 0;
    p->shift = left ? consumed - p->step * G : 0;
    p->dropped = keep ? 0 : n - consumed - left * G;
    /* Global steps go on from the state's count (at its own global batch). */
    int64_t spe_s = keep ? (n + Gs - 1) / Gs : n / Gs;
    p->base = q->resume_global_step >= 0 ? q->resume_global_step : q->epoch * spe_s + q->step;
    if (a->cfg->steps >= 0 && dh__agent_job_left(a, p) <= 0) {
        char end[96];
        if (a->cfg->steps > 0)
            snprintf(end, sizeof end, "--steps %lld", (long long)a->cfg->steps);
        else
            snprintf(end, sizeof end, "--epochs %lld of %lld steps",
                     (long long)DH_MAX(a->cfg->epochs, 1), (long long)spe);
        return dh__fail(why, len, DH_ERANGE, "the saved state is at step %lld (epoch %lld), "
                        "past this job's end (%s): the job is complete", (long long)p->base,
                        (long long)q->epoch, end);
    }
    return 0;
}

/* Where an attach starts, in words: "the start", or its saved position. */
static const char *start_of(const dh__attach *q, char *buf, size_t len)
{
    if (!q->resume)
        return "the start";
    int n = snprintf(buf, len, "epoch %lld, step %lld", (long long)q->epoch, (long long)q->step);
    if (n > 0 && (size_t)n < len && q->resume_global_step >= 0)
        snprintf(buf + n, len - (size_t)n, " (global step %lld)",
                 (long long)q->resume_global_step);
    return buf;
}

/* Why this attach cannot be accepted (a sentence in why), or 0. */
static int refuse_reason(agent *a, const conn *c, char *why, size_t len)
{
    const dh__attach *q = &c->req;
    if (q->world_size != a->R && a->hi - a->lo == a->R)
        return dh__fail(why, len, DH_EMISMATCH, "world size %d, but this agent serves %d ranks "
                        "(a Loader takes RANK and WORLD_SIZE from its environment, as torchrun "
                        "sets them; elsewhere give rank= and world_size=)", q->world_size, a->R);
    if (q->world_size != a->R) /* several nodes: --ranks is the job's (a trial read "serves 2") */
        return dh__fail(why, len, DH_EMISMATCH, "world size %d, but the job's agents were "
                        "started with --ranks %d (every node's ranks; this agent, node %d, "
                        "serves ranks %d..%d)", q->world_size, a->R, a->lo / (a->hi - a->lo),
                        a->lo, a->hi - 1);
    if (q->rank < 0 || q->rank >= a->R)
        return dh__fail(why, len, DH_EMISMATCH, "rank %d is outside 0..%d", q->rank, a->R - 1);
    if (q->rank < a->lo || q->rank >= a->hi)
        return dh__fail(why, len, DH_EMISMATCH, "rank %d belongs to node %d; this agent is node "
                        "%d and serves ranks %d..%d (attach to your node's agent)", q->rank,
                        q->rank / (a->hi - a->lo), a->lo / (a->hi - a->lo), a->lo, a->hi - 1);
    if (a->conns[q->rank].fd >= 0)
        return dh__fail(why, len, DH_EMISMATCH, "rank %d is attached already (pid %d)", q->rank,
                        a->conns[q->rank].pid);
    if (q->global_batch && q->global_batch != a->cfg->global_batch)
        return dh__fail(why, len, DH_EMISMATCH, "global batch %lld, but this agent serves %lld",
                        (long long)q->global_batch, (long long)a->cfg->global_batch);
    if (q->manifest_hash && q->manifest_hash != a->manifest_hash)
        return dh__fail(why, len, DH_EMISMATCH, "the manifest differs from the one the "
                        "trainer expects (its saved state's, or the one it names): descriptor "
                        "hashes differ (a saved state of another dataset, or the manifest was "
                        "re-indexed or edited since it was saved?)");
    if (q->spec_hash && q->spec_hash != a->spec_hash)
        return dh__fail(why, len, DH_EMISMATCH, "the agent's preprocessing spec differs from "
                        "the one the trainer expects (its saved state's, or the one it names: "
                        "--spec, --workload or --augment changed since?)");
    if (q->resume && q->check_seed && q->resume_seed != a->cfg->seed)
        return dh__fail(why, len, DH_EMISMATCH, "the saved state is from a run with seed %llu, "
                        "this agent runs seed %llu (--seed)", (unsigned long long)q->resume_seed,
                        (unsigned long long)a->cfg->seed);
    if (q->resume && q->resume_order && q->resume_order - 1 != a->cfg->order)
        return dh__fail(why, len, DH_EMISMATCH, "the saved state is from a run with --order %s, "
                        "this agent runs --order %s (a position in one order holds other samples "
                        "in the other: serve with the state's --order)",
                        dh__order_name(q->resume_order - 1), dh__order_name(a->cfg->order));
    start_point p;
    int rc = q->resume ? dh__agent_resume_point(a, q, &p, why, len) : 0;
    if (rc)
        return rc;
    for (int r = a->lo; r < a->hi; r++) { /* every rank must resume at the same place */
        const conn *o = &a->conns[r];
        if (o->fd >= 0 && (o->req.resume != q->resume ||
                           (q->resume && (o->req.epoch != q->epoch || o->req.step != q->step ||
                                          o->req.resume_shift != q->resume_shift ||
                                          o->req.resume_global_step != q->resume_global_step ||
                                          o->req.resume_global_batch !=
                                              q->resume_global_batch))))
        {
            char mine[96], theirs[96];
            return dh__fail(why, len, DH_EMISMATCH, "rank %d resumes at %s, rank %d at %s "
                            "(restore the same checkpoint on every rank; rank %d waits for a "
                            "rank %d that starts where it does, until the attach timeout)",
                            o->rank, start_of(&o->req, theirs, sizeof theirs), q->rank,
                            start_of(q, mine, sizeof mine), o->rank, q->rank);
        }
    }
    return 0;
}

/* Forgets a held attach whose rank went away (or cannot be told anything): its rank is free. */
static void drop_attach(agent *a, conn *c, const char *why)
{
    event(a, "rank %d (pid %d) %s before the run started; waiting for rank %d again", c->rank,
          (int)c->pid, why, c->rank);
    close(c->fd);
    c->fd = -1;
    a->attached--;
}

/* Validates an attach the acceptor read for this stream; keeps it, or refuses and closes. */
static void take_attach(agent *a, const pending *in)
{
    char why[512] = "";
    conn *held = in->req.rank >= a->lo && in->req.rank < a->hi ? &a->conns[in->req.rank] : NULL;
    /* Its rank is held by a process that is gone, though its socket is not closed (a child
     * it forked holds it): the new one takes its place. */
    if (held && held->fd >= 0 && kill(held->pid, 0) < 0 && errno == ESRCH)
        drop_attach(a, held, "died");
    conn c = {.a = a, .fd = in->fd, .pid = in->pid, .req = in->req, .rank = in->req.rank};
    int rc = refuse_reason(a, &c, why, sizeof why);
    if (rc) {
        dh__serve_refuse(a->hub, a, in->fd, in->pid, rc, why);
        a->refused++; /* an attach timeout names them (a trial: "0 of 4 attached", not why) */
        snprintf(a->last_refused, sizeof a->last_refused, "%.*s",
                 (int)sizeof a->last_refused - 1, why);
        return;
    }
    int32_t pid = in->pid;
    a->conns[c.rank] = c;
    a->attached++;
    event(a, "rank %d attached (pid %d), %d of %d", c.rank, (int)pid, a->attached, a->hi - a->lo);
}

/* Tells each held attach how many ranks are in (a client waits while the agent does), and
 * drops those whose trainer went away: a held attach says nothing more until answered, so
 * a readable socket means it closed. */
static void tend_attaches(agent *a, const struct pollfd *pf, int n, double until, int tell)
{
    dh__waiting w = {a->attached, a->hi - a->lo, DH_MAX(0.0, until - dh__mono())};
    for (int r = a->lo; r < a->hi; r++) {
        conn *c = &a->conns[r];
        if (c->fd < 0)
            continue;
        int gone = 0;
        for (int k = 1; k < n; k++)
            if (pf[k].fd == c->fd && (pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
                gone = 1;
        if (gone)
            drop_attach(a, c, "went away");
        else if (tell && dh__proto_send(c->fd, DH__MSG_WAITING, &w, sizeof w, NULL, 0))
            drop_attach(a, c, "could not be told the wait");
    }
}

/*
 * While the run begins on several nodes (the BEGIN round waits for every node's ranks to
 * attach, up to that node's --attach-timeout), this node's held attaches are told every
 * second that the agent waits: their clients give up after 15 s of silence, and a node
 * whose trainers start later (a checkpoint still loading) made this node's fail with "the
 * agent said nothing" (a user's trial).
 */
static void *teller_main(void *arg)
{
    dh__agent_teller *t = arg;
    agent *a = t->a;
    pthread_mutex_lock(&t->mu);
    for (double told = dh__mono(); !t->stop;) {
        dh__cond_wait_s(&t->cv, &t->mu, 0.1); /* a wrong attach is answered within 0.1 s */
        if (t->stop)
            break;
        dh__waiting w = {a->attached, a->hi - a->lo, DH_MAX(0.0, t->until - dh__mono())};
        int tell = dh__mono() - told >= 1.0;
        told = tell ? dh__mono() : told;
        for (int r = a->lo; tell && r < a->hi; r++) /* a send that fails: the answer will too */
            if (a->conns[r].fd >= 0)
                (void)dh__proto_send(a->conns[r].fd, DH__MSG_WAITING, &w, sizeof w, NULL, 0);
        /* every rank of this node is in: an attach now is another node's rank, or a second */
        dh__agent_take_queued(a, DH_EMISMATCH, "this node's ranks are all attached and wait "
                              "for the other nodes' (a second trainer for one rank, or a "
                              "Loader created twice?)");
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

int dh__agent_teller_start(agent *a, dh__agent_teller *t)
{
    memset(t, 0, sizeof *t);
    t->a = a;
    t->until = dh__mono() + a->o.attach_timeout_ms / 1e3;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    int rc = dh__thread_create(&t->thread, teller_main, t);
    t->running = !rc;
    return rc;
}

void dh__agent_teller_stop(dh__agent_teller *t)
{
    if (t->running) {
        pthread_mutex_lock(&t->mu);
        t->stop = 1;
        pthread_cond_signal(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
}

/* Takes the attaches the acceptor queued for this stream: validated, or refused with why
 * (NULL: validated against the stream as it attaches); a rank of another node, or of
 * another world size, is told so instead (a trainer given the wrong node's socket heard
 * nothing for 15 s, or "this stream's run has ended" before it began: a user's trial). */
void dh__agent_take_queued(agent *a, int code, const char *why)
{
    char b[64];
    while (read(a->inbox[0], b, sizeof b) > 0) /* the wake-ups: non-blocking */
        ;
    pthread_mutex_lock(&a->hub->mu);
    pending *q = a->queue;
    size_t n = a->nqueue;
    a->queue = NULL;
    a->nqueue = a->capq = 0;
    pthread_mutex_unlock(&a->hub->mu);
    for (size_t k = 0; k < n; k++) {
        const dh__attach *r = &q[k].req;
        char own[512];
        conn c = {.a = a, .fd = q[k].fd, .pid = q[k].pid, .req = *r, .rank = r->rank};
        if (why && (r->world_size != a->R || r->rank < a->lo || r->rank >= a->hi))
            dh__serve_refuse(a->hub, a, q[k].fd, q[k].pid,
                             refuse_reason(a, &c, own, sizeof own), own);
        else if (why)
            dh__serve_refuse(a->hub, a, q[k].fd, q[k].pid, code, why);
        else
            take_attach(a, &q[k]);
    }
    free(q);
}

/* How many other streams of the agent have not ended (*serving: of those, how many began
 * serving their trainers). */
static int others_live(agent *a, int *serving)
{
    hub *h = a->hub;
    int n = 0;
    *serving = 0;
    pthread_mutex_lock(&h->mu);
    for (int k = 0; k < h->n; k++) {
        n += &h->s[k] != a && !h->s[k].done;
        *serving += &h->s[k] != a && !h->s[k].done && h->s[k].ran;
    }
    pthread_mutex_unlock(&h->mu);
    return n;
}

/* Accepts until every rank attached; 0, DH_ETIMEDOUT or DH_ECANCELED. */
int dh__agent_wait_for_ranks(agent *a)
{
    double until = dh__mono() + a->o.attach_timeout_ms / 1e3, told = 0;
    double said = dh__mono(), every = dh__progress_seconds();
    while (a->attached < a->hi - a->lo) {
        if ((a->cfg->should_stop && a->cfg->should_stop(a->cfg->should_stop_user)) ||
            atomic_load(&a->hub->quit))
            return DH_ECANCELED;
        /* With no trainer yet, a stream waits as long as another serves its trainers (a
         * validation Loader attaches at its first pass, maybe hours in); from its first
         * trainer, or while no stream serves, the timeout. */
        int serving = 0, live = a->hub->n > 1 && !a->attached ? others_live(a, &serving) : 1;
        if (serving)
            until = dh__mono() + a->o.attach_timeout_ms / 1e3;
        if (dh__mono() > until)
            return DH_ETIMEDOUT;
        if (!live && !a->gen) { /* the other streams ended and nobody came for this one */
            a->unused = 1;
            return DH_ECANCELED;
        }
        struct pollfd *pf = a->pf;
        pf[0] = (struct pollfd){.fd = a->inbox[0], .events = POLLIN};
        int n = 1;
        for (int r = a->lo; r < a->hi; r++)
            if (a->conns[r].fd >= 0)
                pf[n++] = (struct pollfd){.fd = a->conns[r].fd, .events = POLLIN};
        int ready = poll(pf, (nfds_t)n, 200);
        int tell = dh__mono() - told >= 1.0;
        if (!serving && dh__mono() - said >= every) { /* a heartbeat in the agent's log */
            said = dh__mono();
            /* and what it refused (a trial: the agent waited out its timeout after refusing
             * every trainer, its log saying only that it waits) */
            char refused[600] = "";
            if (a->refused)
                snprintf(refused, sizeof refused, "; %d attach%s refused, the last: %s",
                         a->refused, a->refused == 1 ? "" : "es", a->last_refused);
            event(a, DH_SERVE_WAITING_EVENT " %d of %d attached, %.0f s left (--attach-timeout)%s",
                  a->attached, a->hi - a->lo, DH_MAX(0.0, until - said), refused);
        }
        if (ready > 0 || tell) {
            tend_attaches(a, pf, ready > 0 ? n : 0, until, tell);
            told = tell ? dh__mono() : told;
        }
        if (ready > 0 && (pf[0].revents & POLLIN))
            dh__agent_take_queued(a, 0, NULL);
    }
    return 0;
}

/* --------------------------------------------------------------- serving */

/* Answers every held attach: the pools' descriptors and what the run is. */
int dh__agent_answer(agent *a)
{
    int fds[2];
    int rc = dh__engine_pool(a->e, 0, &fds[0], &a->info.ring_size);
    if (!rc)
        rc = dh__engine_pool(a->e, 1, &fds[1], &a->info.arena_size);
    for (int r = a->lo; !rc && r < a->hi; r++)
        if (dh__proto_send(a->conns[r].fd, DH__MSG_ATTACHED, &a->info, sizeof a->info, fds, 2))
            event(a, "rank %d went away before the run started", r); /* seen by its thread */
    return rc;
}

/* What the run is, as every rank is told; the resume point was checked at the attach. */
void dh__agent_fill_info(agent *a)
{
    const dh_run_config *c = a->cfg;
    const dh__attach *q = &a->conns[a->lo].req;
    start_point p = a->gen ? a->restart : (start_point){0, 0, 0, 0, 0};
    if (q->resume)
        dh__agent_resume_point(a, q, &p, NULL, 0);
    int64_t Gs = q->resume_global_batch;
    if (q->resume && Gs && Gs != c->global_batch && p.dropped > 0 && p.epoch == q->epoch)
        event(a, "resuming a state of global batch %lld at %lld: the last %lld samples of epoch "
              "%lld fill no batch of %lld and are dropped, as an epoch's incomplete tail is%s",
              (long long)Gs, (long long)c->global_batch, (long long)p.dropped,
              (long long)p.epoch, (long long)c->global_batch,
              c->order == DH_ORDER_UNIFORM ? " (--keep-last keeps it)" : "");
    a->N = dh__agent_job_left(a, &p);
    a->info = (dh__attached){.steps = a->N, .manifest_hash = a->manifest_hash,
                             .spec_hash = a->spec_hash, .seed = c->seed, .world_size = a->R,
                             .max_leases = a->o.max_leases, .global_batch = c->global_batch,
                             .epoch = p.epoch, .step = p.step, .shift = p.shift,
                             .steps_per_epoch = a->steps_per_epoch, .rank_lo = a->lo,
                             .rank_hi = a->hi, .step_base = p.base, .order = c->order};
}
