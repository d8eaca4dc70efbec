/*
 * serve.c - the per-node agent (datahelix/serve.h): trainer processes attach
 * over a Unix socket, one per rank, and take batches that view the engine's
 * shared pools.
 *
 * DESIGN
 * - Phases: listen; wait until every rank attached (each attach validated
 *   and held unanswered); start the engine, its pools in memfds; answer
 *   every attach with the pools' descriptors; serve; finish.
 * - One thread per rank serves that rank's requests in order: NEXT blocks in
 *   dh_engine_next_batch, so a rank waiting for its batch holds only its own
 *   thread. The main thread watches should_stop and the threads' ends.
 * - While ranks attach, the agent tells each waiting one every second how
 *   many have attached (WAITING), so a client waits as long as the agent
 *   does; a waiting rank that goes away is dropped and its rank is free
 *   again, so the run never starts with a rank that is gone.
 * - A lease is a batch handed to a rank and not yet released; a rank holds
 *   at most max_leases. A rank that dies or disconnects before the run ended
 *   has its leases released and stops the run with DH_EPEER and a sentence
 *   naming it: every other rank's next request gets that sentence (a
 *   synchronous job cannot go on without it), never a hang.
 * - A rank that detaches cleanly before the run's end (its loop broke, its
 *   process was interrupted) leaves at step T: the others may still take
 *   the steps before T, a request for T or later gets the sentence naming
 *   it, and once no rank can take anything more the run stops. A finite
 *   run cut short so fails; an endless run (--steps 0) ended by its
 *   trainers leaving is a normal end.
 * - Steps on the wire are the engine's (0 = the run's first); the client
 *   adds the resume position, so trainers see steps counted from the start
 *   of training.
 * - Lock order: a.mu (agent state) is never held while calling the engine.
 */
#include "serve_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void event(agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void event(agent *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dh__serve_say(a->hub, a->stream, fmt, ap);
    va_end(ap);
}

/* A step of this run as the trainers count it: from the start of training. */
static int64_t training_step(const agent *a, int64_t st)
{
    return a->info.step_base + st;
}

/* Steps left of the job from a start (--steps counts global steps from the start of
 * training, --epochs whole epochs), or -1 for an endless job. */
static int64_t job_left(const agent *a, const start_point *p)
{
    const dh_run_config *c = a->cfg;
    return c->steps > 0    ? c->steps - p->base
           : c->steps == 0 ? DH_MAX(c->epochs, 1) * a->steps_per_epoch -
                                 (p->epoch * a->steps_per_epoch + p->step)
                           : -1;
}

void dh_serve_opts_default(dh_serve_opts *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

/* ------------------------------------------------------------------ attach */

/*
 * Where a resumed attach starts in this agent's order: the samples the state consumed of its
 * epoch (the order within an epoch depends only on the seed, not on the global batch), as
 * (epoch, step, shift) of this agent's global batch: the epoch's remaining batches start at
 * the first sample not consumed and keep its last step where an epoch's last step is, so
 * no sample is served twice or skipped. Refuses a position outside the epoch or past the
 * job's end.
 */
static int resume_point(const agent *a, const dh__attach *q, start_point *p, char *why,
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
    if (a->cfg->steps >= 0 && job_left(a, p) <= 0) {
        char end[96];
        if (a->cfg->steps > 0)
            snprintf(end, sizeof end, "--steps %lld", (long long)a->cfg->steps);
        else
            snprintf(end, sizeof end, "--epochs %lld of %lld steps", (long long)DH_MAX(a->cfg->epochs, 1),
                     (long long)spe);
        return dh__fail(why, len, DH_ERANGE, "the saved state is at step %lld (epoch %lld), "
                        "past this job's end (%s): the job is complete", (long long)p->base,
                        (long long)q->epoch, end);
    }
    return 0;
}

/* Why this attach cannot be accepted (a sentence in why), or 0. */
static int refuse_reason(agent *a, const conn *c, char *why, size_t len)
{
    const dh__attach *q = &c->req;
    if (q->world_size != a->R)
        return dh__fail(why, len, DH_EMISMATCH, "world size %d, but this agent serves %d ranks "
                        "(a Loader takes RANK and WORLD_SIZE from its environment, as torchrun "
                        "sets them; elsewhere give rank= and world_size=)", q->world_size, a->R);
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
                        "hashes differ (re-indexed or edited since?)");
    if (q->spec_hash && q->spec_hash != a->spec_hash)
        return dh__fail(why, len, DH_EMISMATCH, "the agent's preprocessing spec differs from "
                        "the one the trainer expects (its saved state's, or the one it names: "
                        "--spec or --workload changed since?)");
    if (q->resume && q->check_seed && q->resume_seed != a->cfg->seed)
        return dh__fail(why, len, DH_EMISMATCH, "the saved state is from a run with seed %llu, "
                        "this agent runs seed %llu (--seed)", (unsigned long long)q->resume_seed,
                        (unsigned long long)a->cfg->seed);
    start_point p;
    int rc = q->resume ? resume_point(a, q, &p, why, len) : 0;
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
            return dh__fail(why, len, DH_EMISMATCH, "rank %d resumes at %s, rank %d at %s "
                            "(restore the same checkpoint on every rank)", o->rank,
                            o->req.resume ? "a saved state" : "the start", q->rank,
                            q->resume ? "a saved state" : "the start");
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
    char why[256] = "";
    conn *held = in->req.rank >= a->lo && in->req.rank < a->hi ? &a->conns[in->req.rank] : NULL;
    /* Its rank is held by a process that is gone, though its socket is not closed (a child
     * it forked holds it): the new one takes its place. */
    if (held && held->fd >= 0 && kill(held->pid, 0) < 0 && errno == ESRCH)
        drop_attach(a, held, "died");
    conn c = {.a = a, .fd = in->fd, .pid = in->pid, .req = in->req, .rank = in->req.rank};
    int rc = refuse_reason(a, &c, why, sizeof why);
    if (rc) {
        dh__serve_refuse(a->hub, a, in->fd, in->pid, rc, why);
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

/* Takes the attaches the acceptor queued for this stream: validated, or refused with why
 * (NULL: validated against the stream as it attaches). */
static void take_queued(agent *a, int code, const char *why)
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
        if (why)
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
static int wait_for_ranks(agent *a)
{
    double until = dh__mono() + a->o.attach_timeout_ms / 1e3, told = 0;
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
        if (ready > 0 || tell) {
            tend_attaches(a, pf, ready > 0 ? n : 0, until, tell);
            told = tell ? dh__mono() : told;
        }
        if (ready > 0 && (pf[0].revents & POLLIN))
            take_queued(a, 0, NULL);
    }
    return 0;
}

/* --------------------------------------------------------------- serving */

/*
 * Which samples of b are padding: in an epoch's last batch (keep_last), the duplicates of
 * the epoch's first samples that fill it up; the agent draws that batch from its own copy
 * of the order. Exact when the manifest holds at least one global batch (the padding then
 * never repeats a sample of the same batch). 0 or an error.
 */
static int pad_flags(agent *a, const dh_batch *b, uint8_t *flags)
{
    memset(flags, 0, (size_t)b->nsamples);
    int64_t G = a->cfg->global_batch, spe = a->steps_per_epoch;
    int64_t epoch, epoch_step, shift; /* shift: a resumed epoch's */
    dh__run_position(&a->info, b->step, &epoch, &epoch_step, &shift);
    int64_t real = DH_MIN(G, a->samples - ((spe - 1) * G + shift)); /* then the filling */
    if (!a->cfg->keep_last || real >= G || epoch_step != spe - 1)
        return 0;
    pthread_mutex_lock(&a->mu); /* the cached batch is every rank thread's */
    int rc = 0;
    if (a->pad_epoch != epoch) {
        dh_sampler_state st = {dh_manifest_hash(a->cfg->manifest), a->cfg->seed, epoch, spe - 1};
        rc = dh_sampler_set_state(a->order, &st);
        if (!rc && shift)
            rc = dh__sampler_shift(a->order, shift);
        if (!rc)
            rc = dh_sampler_next(a->order, a->last, G);
        a->pad_epoch = rc ? -1 : epoch;
    }
    for (int32_t k = 0; !rc && k < b->nsamples; k++) {
        int is_real = 0;
        for (int64_t j = 0; j < real && !is_real; j++)
            is_real = a->last[j] == b->samples[k];
        flags[k] = is_real ? 0 : DH__SAMPLE_PAD;
    }
    pthread_mutex_unlock(&a->mu);
    return rc;
}

static int send_batch(agent *a, conn *c, const dh_batch *b)
{
    dh__batch_head bh = {.step = b->step, .rank = b->rank, .pool = -1, .bytes = b->bytes,
                         .nsamples = b->nsamples, .nitems = b->nitems, .nfailed = b->nfailed,
                         .emulated_s = dh_engine_batch_gpu_seconds(a->e, b)};
    if (b->nitems && dh__engine_locate(a->e, b->data, &bh.pool, &bh.offset))
        return DH_EINVAL;
    size_t ns = (size_t)b->nsamples, ni = (size_t)b->nitems, ids = 0, texts = 0, metas = 0;
    for (size_t k = 0; k < ns; k++) {
        dh_sample_info si;
        dh_manifest_sample(a->cfg->manifest, b->samples[k], &si);
        ids += strlen(si.id) + 1;
        texts += (si.text ? strlen(si.text) : 0) + 1;
        metas += (si.meta ? strlen(si.meta) : 0) + 1;
    }
    size_t len = 2 * ns * sizeof(int64_t) + ni * sizeof(dh_batch_item) + ids + ns +
                 ns * sizeof(int64_t) + texts + metas;
    if (len > DH__PROTO_MAX - sizeof bh)
        return DH_ELIMIT;
    bh.text_bytes = (uint32_t)texts;
    bh.meta_bytes = (uint32_t)metas;
    uint8_t *body = dh__malloc(DH_MAX(len, 1));
    if (!body)
        return DH_ENOMEM;
    uint8_t *w = body;
    memcpy(w, b->samples, ns * sizeof(int64_t)), w += ns * sizeof(int64_t);
    memcpy(w, b->tokens, ns * sizeof(int64_t)), w += ns * sizeof(int64_t);
    memcpy(w, b->items, ni * sizeof(dh_batch_item)), w += ni * sizeof(dh_batch_item);
    for (size_t k = 0; k < ns; k++) {
        dh_sample_info si;
        dh_manifest_sample(a->cfg->manifest, b->samples[k], &si);
        size_t n = strlen(si.id) + 1;
        memcpy(w, si.id, n), w += n;
    }
    bh.ids_bytes = (uint32_t)ids;
    int rc = pad_flags(a, b, w);
    if (rc) {
        free(body);
        return rc;
    }
    uint8_t *flags = w, *labels = w + ns, *text = labels + ns * sizeof(int64_t);
    uint8_t *meta = text + texts;
    for (size_t k = 0; k < ns; k++) {
        dh_sample_info si;
        dh_manifest_sample(a->cfg->manifest, b->samples[k], &si);
        flags[k] |= (si.text ? DH__SAMPLE_TEXT : 0) | (si.has_label ? DH__SAMPLE_LABEL : 0) |
                    (si.meta ? DH__SAMPLE_META : 0);
        int64_t label = si.has_label ? si.label : 0;
        memcpy(labels + k * sizeof label, &label, sizeof label);
        size_t n = (si.text ? strlen(si.text) : 0) + 1;
        memcpy(text, si.text ? si.text : "", n), text += n;
        n = (si.meta ? strlen(si.meta) : 0) + 1;
        memcpy(meta, si.meta ? si.meta : "", n), meta += n;
    }
    rc = dh__proto_send2(c->fd, DH__MSG_BATCH, &bh, sizeof bh, body, (uint32_t)len);
    free(body);
    return rc;
}

/* The sentence for a run that cannot go on (another rank died, the agent stopped). */
static void send_end(agent *a, conn *c, int rc)
{
    char msg[480];
    const char *failed = rc == DH_EFAILED && a->e ? dh__engine_fail_msg(a->e) : NULL;
    const char *peer = rc == DH_EPEER && a->e ? dh__engine_peer_msg(a->e) : NULL;
    pthread_mutex_lock(&a->mu); /* the engine's lock is not taken inside ours */
    if (rc == DH_EPEER && a->fault[0])
        snprintf(msg, sizeof msg, "%s", a->fault);
    else if (peer) /* another node's rank or the node itself (several nodes) */
        snprintf(msg, sizeof msg, "%s", peer);
    else if (rc == DH_EEMPTY)
        snprintf(msg, sizeof msg, "the run is complete");
    else if (rc == DH_ECANCELED)
        snprintf(msg, sizeof msg, "the agent was stopped (Ctrl-C, SIGTERM or its caller)");
    else
        snprintf(msg, sizeof msg, "the agent's run failed: %s", failed ? failed : dh_strerror(rc));
    pthread_mutex_unlock(&a->mu);
    c->ended = 1; /* after an end, the rank leaving is expected */
    dh__proto_send_error(c->fd, rc, msg);
}

/* Answers a NEXT; 0, or the connection is broken (the rank died or stopped reading). */
static int on_next(agent *a, conn *c)
{
    if (c->nleases >= a->o.max_leases) {
        char msg[160];
        snprintf(msg, sizeof msg, "rank %d holds %d batches: release one before taking another "
                 "(max_leases %d)", c->rank, c->nleases, a->o.max_leases);
        return dh__proto_send_error(c->fd, DH_ELIMIT, msg);
    }
    pthread_mutex_lock(&a->mu);
    int beyond = c->next_step >= a->left_at; /* a rank that left will never take this step */
    pthread_mutex_unlock(&a->mu);
    if (beyond) {
        send_end(a, c, DH_EPEER);
        return 0;
    }
    dh_batch b;
    int wake = 0;
    pthread_mutex_lock(&a->mu);
    c->waiting = 1; /* watch sees this rank's socket while the engine holds the thread */
    c->wait_since = dh__mono();
    c->stall_told = 0;
    pthread_mutex_unlock(&a->mu);
    int rc = dh__engine_next(a->e, c->rank, &b, &wake);
    pthread_mutex_lock(&a->mu);
    c->waiting = 0;
    pthread_mutex_unlock(&a->mu);
    if (rc) {
        send_end(a, c, rc);
        return 0;
    }
    pthread_mutex_lock(&a->mu);
    c->next_step = b.step + 1;
    c->took_at = dh__mono();
    beyond = b.step >= a->left_at; /* it left while this rank waited */
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->mu);
    if (beyond) {
        dh_engine_release(a->e, &b, 0);
        if (wake)
            dh__engine_wake(a->e);
        send_end(a, c, DH_EPEER);
        return 0;
    }
    c->leases[c->nleases++] = (lease){b, dh__mono(), -1.0};
    rc = send_batch(a, c, &b);
    if (wake)
        dh__engine_wake(a->e); /* after the answer: the rank does not wait for it */
    if (rc && rc != DH_EPEER && rc != DH_ETIMEDOUT)
        rc = dh__proto_send_error(c->fd, rc, rc == DH_ELIMIT ? "cannot describe the batch: its "
                                  "ids, texts and metas are over 64 MiB (a smaller --batch or "
                                  "--max-text-bytes)" : "cannot describe the batch");
    return rc;
}

static lease *find_lease(conn *c, int64_t step)
{
    for (int k = 0; k < c->nleases; k++)
        if (c->leases[k].b.step == step)
            return &c->leases[k];
    return NULL;
}

/*
 * Gives lease l back to the engine with the step time it was reported, else its hold time;
 * either within the time since the rank took it or gave back its previous batch, whichever
 * is later: a rank computes one step at a time, and batches it holds together (a garbage
 * collector's late release) must not count their common time twice.
 */
static void release_lease(agent *a, conn *c, lease *l, int reclaimed)
{
    double now = dh__mono(), window = now - DH_MAX(l->taken, c->last_release);
    double s = reclaimed ? 0 : DH_MAX(0.0, l->seconds >= 0 ? DH_MIN(l->seconds, window) : window);
    c->last_release = reclaimed ? c->last_release : now;
    dh_engine_release(a->e, &l->b, s);
    c->released += !reclaimed;
    *l = c->leases[--c->nleases];
}

/* What a lost rank means for the others. */
static const char *fault_tail(const agent *a)
{
    return a->o.on_rank_exit == DH_ON_RANK_EXIT_WAIT ? "the agent waits for the job to restart"
                                                     : "the job cannot go on without it";
}

static void on_death(agent *a, conn *c)
{
    int64_t step = c->nleases ? c->leases[0].b.step : -1;
    while (c->nleases)
        release_lease(a, c, &c->leases[0], 1);
    pthread_mutex_lock(&a->mu);
    int done = c->ended || c->detached || (a->N > 0 && c->next_step >= a->N);
    pthread_mutex_unlock(&a->mu);
    if (done) /* the run was over for it: going away is its end */
        return;
    pthread_mutex_lock(&a->mu);
    int first = !a->died;
    if (!a->fault_code) { /* a rank that left earlier stays the cause */
        a->fault_code = DH_EPEER;
        const char *then = fault_tail(a);
        if (step >= 0)
            snprintf(a->fault, sizeof a->fault, "rank %d (pid %d) died or disconnected holding "
                     "step %lld; %s", c->rank, (int)c->pid, (long long)training_step(a, step),
                     then);
        else
            snprintf(a->fault, sizeof a->fault, "rank %d (pid %d) died or disconnected; %s",
                     c->rank, (int)c->pid, then);
    }
    a->died = 1;
    pthread_mutex_unlock(&a->mu);
    if (first) {
        event(a, "%s", a->fault);
        dh__engine_abort(a->e, DH_EPEER, a->fault);
    }
}

/* A clean detach: the end of the run for this rank, or leaving it early (see DESIGN). */
static void on_detach(agent *a, conn *c)
{
    c->detached = 1;
    while (c->nleases)
        release_lease(a, c, &c->leases[0], 0);
    pthread_mutex_lock(&a->mu);
    int early = !c->ended && (a->N < 0 || c->next_step < a->N);
    if (early && c->next_step < a->left_at)
        a->left_at = c->next_step;
    if (early && !a->fault_code) { /* a death or an earlier leaving stays the cause */
        if (c->next_step == 0)
            snprintf(a->fault, sizeof a->fault, "rank %d (pid %d) left before taking a batch "
                     "(in synchronous training every rank takes every step: iterate the Loader "
                     "on every rank); %s", c->rank, (int)c->pid, fault_tail(a));
        else if (a->N < 0)
            snprintf(a->fault, sizeof a->fault, "rank %d (pid %d) left after step %lld; %s",
                     c->rank, (int)c->pid, (long long)training_step(a, c->next_step - 1),
                     fault_tail(a));
        else
            snprintf(a->fault, sizeof a->fault, "rank %d (pid %d) left after %lld of the run's "
                     "%lld steps; %s", c->rank, (int)c->pid, (long long)c->next_step,
                     (long long)a->N, fault_tail(a));
        a->fault_code = DH_EPEER;
    }
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->mu);
    if (early)
        event(a, "rank %d detached (pid %d) after taking %lld batches%s", c->rank, (int)c->pid,
              (long long)c->next_step, a->N < 0 ? "" : ", before the run's end");
    else
        event(a, "rank %d detached (pid %d)", c->rank, (int)c->pid);
}

/* The answer to a NEXT could not be sent: the trainer died, or detached while its request
 * waited (a close() from another thread). What it sent before going tells which. */
static void gone_after_next(agent *a, conn *c)
{
    for (;;) {
        dh__msg_head h;
        void *p = NULL;
        if (dh__proto_recv(c->fd, 0, &h, &p, NULL, NULL)) {
            on_death(a, c);
            return;
        }
        int detach = h.type == DH__MSG_DETACH;
        if (h.type == DH__MSG_RELEASE && h.len == sizeof(dh__release)) {
            lease *l = find_lease(c, ((const dh__release *)p)->step);
            if (l)
                release_lease(a, c, l, 0);
        }
        free(p);
        if (detach) {
            on_detach(a, c);
            return;
        }
    }
}

/* One message of a rank; 1 when the rank is gone (detached or dead). */
static int serve_one(agent *a, conn *c, const dh__msg_head *h, const void *p)
{
    if (h->type == DH__MSG_NEXT)
        return on_next(a, c) ? (gone_after_next(a, c), 1) : 0;
    if (h->type == DH__MSG_RELEASE && h->len == sizeof(dh__release)) {
        lease *l = find_lease(c, ((const dh__release *)p)->step);
        if (l)
            release_lease(a, c, l, 0);
        return 0;
    }
    if (h->type == DH__MSG_REPORT && h->len == sizeof(dh__report)) {
        const dh__report *r = p;
        lease *l = find_lease(c, r->step);
        if (l && r->seconds >= 0 && r->seconds < 1e6)
            l->seconds = r->seconds;
        return 0;
    }
    if (h->type == DH__MSG_DETACH) {
        on_detach(a, c);
        return 1;
    }
    on_death(a, c); /* a message we do not understand: treat the peer as broken */
    return 1;
}

static void *rank_main(void *arg)
{
    conn *c = arg;
    agent *a = c->a;
    for (;;) {
        dh__msg_head h;
        void *p = NULL;
        int rc = dh__proto_recv(c->fd, 500, &h, &p, NULL, NULL);
        if (rc == DH_ETIMEDOUT && (a->stopping || c->ended)) {
            /* Stopping: tell the rank, then let it go. Its end delivered and idle since: a
             * trainer that never detaches must not keep the agent; its mapping stays valid. */
            if (!c->ended)
                send_end(a, c, DH_ECANCELED);
            while (c->nleases)
                release_lease(a, c, &c->leases[0], 1);
            break;
        }
        if (rc == DH_ETIMEDOUT)
            continue; /* the rank is computing; its death shows as a closed socket */
        int gone = rc ? (on_death(a, c), 1) : serve_one(a, c, &h, p);
        free(p);
        if (gone)
            break;
    }
    pthread_mutex_lock(&a->mu);
    c->finished = 1;
    pthread_cond_broadcast(&a->changed);
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

/* ------------------------------------------------------------- lifecycle */

/* Answers every held attach: the pools' descriptors and what the run is. */
static int answer_attaches(agent *a)
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
static void fill_info(agent *a)
{
    const dh_run_config *c = a->cfg;
    const dh__attach *q = &a->conns[a->lo].req;
    start_point p = a->gen ? a->restart : (start_point){0, 0, 0, 0, 0};
    if (q->resume)
        resume_point(a, q, &p, NULL, 0);
    int64_t Gs = q->resume_global_batch;
    if (q->resume && Gs && Gs != c->global_batch && p.dropped > 0 && p.epoch == q->epoch)
        event(a, "resuming a state of global batch %lld at %lld: the last %lld samples of epoch "
              "%lld fill no batch of %lld and are dropped, as an epoch's incomplete tail is "
              "(--keep-last keeps it)", (long long)Gs, (long long)c->global_batch,
              (long long)p.dropped, (long long)p.epoch, (long long)c->global_batch);
    a->N = job_left(a, &p);
    a->info = (dh__attached){.steps = a->N, .manifest_hash = a->manifest_hash,
                             .spec_hash = a->spec_hash, .seed = c->seed, .world_size = a->R,
                             .max_leases = a->o.max_leases, .global_batch = c->global_batch,
                             .epoch = p.epoch, .step = p.step, .shift = p.shift,
                             .steps_per_epoch = a->steps_per_epoch, .rank_lo = a->lo,
                             .rank_hi = a->hi, .step_base = p.base};
}

/* 1 when the bytes waiting on c's socket hold a DETACH (looked at, not taken). */
static int detach_waiting(const conn *c)
{
    uint8_t buf[4096];
    ssize_t n = recv(c->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    for (size_t at = 0; n > 0 && at + sizeof(dh__msg_head) <= (size_t)n;) {
        dh__msg_head h;
        memcpy(&h, buf + at, sizeof h);
        if (h.magic != DH__PROTO_MAGIC)
            return 0;
        if (h.type == DH__MSG_DETACH)
            return 1;
        at += sizeof h + h.len;
    }
    return 0;
}

/* A rank blocked in the engine for its next batch cannot see its socket: a trainer that dies
 * meanwhile is seen here, and the run stops naming it (nothing was said before, until another
 * rank left). A trainer that detached is left to its thread, which sees it once it can. */
static void spot_hangups(agent *a)
{
    for (int r = a->lo; r < a->hi; r++) {
        conn *c = &a->conns[r];
        pthread_mutex_lock(&a->mu);
        int look = c->started && !c->finished && c->waiting && !c->hung_up;
        pthread_mutex_unlock(&a->mu);
        struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
        if (!look || poll(&p, 1, 0) <= 0 || !(p.revents & (POLLHUP | POLLRDHUP | POLLERR)) ||
            detach_waiting(c))
            continue;
        char why[sizeof a->fault];
        pthread_mutex_lock(&a->mu);
        c->hung_up = 1;
        int first = !a->died;
        if (!a->fault_code) {
            a->fault_code = DH_EPEER;
            snprintf(a->fault, sizeof a->fault, "rank %d (pid %d) died or disconnected while "
                     "it waited for step %lld; %s", c->rank, (int)c->pid,
                     (long long)training_step(a, c->next_step), fault_tail(a));
        }
        a->died = 1;
        snprintf(why, sizeof why, "%s", a->fault);
        pthread_mutex_unlock(&a->mu);
        if (first) {
            event(a, "%s", why);
            dh__engine_abort(a->e, DH_EPEER, why);
        }
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
                     (long long)training_step(a, idle->next_step - 1));
        event(a, "rank %d has waited %.0f s for its batch of step %lld; rank %d (pid %d) has "
              "taken nothing for %.0f s (%s): is it stopped, or not iterating its Loader?",
              c->rank, now - c->wait_since, (long long)training_step(a, c->next_step),
              idle->rank, (int)idle->pid, now - idle->took_at, last);
    }
}

/* Waits until every rank's thread ended, stopping the engine when should_stop says so. */
static void watch(agent *a)
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
        until.tv_nsec += 200 * 1000000L;
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
        if (reap) /* no: wake whoever waits for a step the rank that left will not take */
            dh__engine_abort(a->e, DH_EPEER, why);
        spot_hangups(a);
        if (a->o.on_rank_exit == DH_ON_RANK_EXIT_STOP) /* waiting: for the next set of ranks */
            take_queued(a, DH_EMISMATCH, "this stream's ranks are all attached and its run "
                        "is going (a second trainer for one rank, or a Loader created twice?)");
        if (a->cfg->should_stop && a->cfg->should_stop(a->cfg->should_stop_user)) {
            a->stopping = 1;
            if (!a->cfg->exchange || a->cfg->nodes < 2) /* on several, the nodes agree first */
                dh_engine_stop(a->e);
        }
        pthread_mutex_lock(&a->mu);
    }
    pthread_mutex_unlock(&a->mu);
}

static int start_ranks(agent *a, char *err, size_t errlen)
{
    for (int r = a->lo; r < a->hi; r++)
        a->conns[r].took_at = dh__mono(); /* a rank that takes nothing is idle from here */
    for (int r = a->lo; r < a->hi; r++) {
        int rc = dh__thread_create(&a->conns[r].thread, rank_main, &a->conns[r]);
        if (rc) {
            dh_engine_stop(a->e); /* the ranks that started must not wait for this one */
            return dh__fail(err, errlen, rc, "cannot start the thread of rank %d", r);
        }
        a->conns[r].started = 1;
    }
    return 0;
}

/* What the agent needs before listening: hashes of what trainers must match. */
static int agent_init(agent *a, hub *h, const dh_serve_stream *st, const dh_serve_opts *opts,
                      char *err, size_t errlen)
{
    memset(a, 0, sizeof *a); /* from here agent_free cleans up whatever follows */
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->changed, NULL);
    a->inbox[0] = a->inbox[1] = -1;
    a->hub = h;
    a->stream = st->name && st->name[0] ? st->name : "train";
    a->on_error = st->on_error;
    a->user = st->user;
    a->out = st->out;
    dh_run_config_default(&a->run);
    const dh_run_config *cfg = st->cfg;
    if (!cfg || cfg->struct_size < sizeof(uint32_t) || cfg->struct_size > sizeof a->run)
        return dh__fail(err, errlen, DH_EINVAL, "initialise the run configuration with "
                                                "dh_run_config_default");
    memcpy(&a->run, cfg, cfg->struct_size);
    a->run.struct_size = sizeof a->run;
    a->cfg = cfg = &a->run;
    if (pipe2(a->inbox, O_NONBLOCK | O_CLOEXEC))
        return dh__fail(err, errlen, -errno, "cannot create a pipe: %s", strerror(errno));
    a->R = cfg->ranks;
    int nodes = cfg->exchange && cfg->nodes > 1 ? cfg->nodes : 1;
    a->lo = nodes > 1 ? cfg->node * (a->R / nodes) : 0;
    a->hi = nodes > 1 ? a->lo + a->R / nodes : a->R;
    dh_serve_opts_default(&a->o);
    if (opts)
        memcpy(&a->o, opts, DH_MIN((size_t)opts->struct_size, sizeof a->o));
    a->o.max_leases = a->o.max_leases > 0 ? DH_MIN(a->o.max_leases, MAX_LEASES) : 4;
    a->o.attach_timeout_ms = a->o.attach_timeout_ms > 0 ? a->o.attach_timeout_ms : 300000;
    a->o.io_timeout_ms = a->o.io_timeout_ms > 0 ? a->o.io_timeout_ms : 30000;
    if (a->o.on_rank_exit == DH_ON_RANK_EXIT_WAIT && nodes > 1)
        return dh__fail(err, errlen, DH_EINVAL, "waiting for ranks to restart works on one "
                        "node only (several nodes restart together under their launcher)");
    if (a->o.on_rank_exit != DH_ON_RANK_EXIT_STOP && a->o.on_rank_exit != DH_ON_RANK_EXIT_WAIT)
        return dh__fail(err, errlen, DH_EINVAL, "on_rank_exit %d: expected stop (0) or wait "
                        "(1)", a->o.on_rank_exit);
    if (!cfg->manifest || cfg->ranks < 1 || cfg->global_batch < cfg->ranks)
        return dh__fail(err, errlen, DH_EINVAL, "serve needs a manifest, ranks >= 1 and a "
                                                "global batch of at least one sample per rank");
    dh_spec *builtin = NULL;
    if (!cfg->spec && dh_spec_builtin(cfg->workload ? cfg->workload : "default", &builtin))
        return dh__fail(err, errlen, DH_ENOENT, "unknown workload \"%s\"", cfg->workload);
    a->spec_hash = dh_spec_hash(cfg->spec ? cfg->spec : builtin);
    dh_spec_free(builtin);
    a->manifest_hash = dh_manifest_hash(cfg->manifest);
    a->samples = dh_manifest_count(cfg->manifest);
    int64_t G = cfg->global_batch;
    a->pad_epoch = -1;
    /* The agent's own copy of the job's order: its epochs' length, and padding to mark. */
    dh_sampler_opts so = {.global_batch = G, .seed = cfg->seed, .shuffle = !cfg->no_shuffle,
                          .drop_last = !cfg->keep_last};
    int rc = dh_sampler_new(cfg->manifest, &so, &a->order);
    if (rc)
        return dh__fail(err, errlen, rc, "%lld samples cannot make an epoch of global batches "
                        "of %lld: %s", (long long)a->samples, (long long)G, dh_strerror(rc));
    a->steps_per_epoch = dh_sampler_steps_per_epoch(a->order);
    if (cfg->keep_last && !(a->last = dh__calloc((size_t)G, sizeof *a->last)))
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    a->left_at = INT64_MAX;
    a->conns = dh__calloc((size_t)a->R, sizeof *a->conns);
    a->pf = dh__calloc((size_t)a->R + 1, sizeof *a->pf);
    if (!a->conns || !a->pf)
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    for (int r = 0; r < a->R; r++)
        a->conns[r].fd = -1;
    return 0;
}

static void agent_free(agent *a)
{
    for (int r = 0; a->conns && r < a->R; r++) {
        if (a->conns[r].started)
            pthread_join(a->conns[r].thread, NULL);
        if (a->conns[r].fd >= 0)
            close(a->conns[r].fd);
    }
    for (size_t k = 0; k < a->nqueue; k++)
        close(a->queue[k].fd);
    free(a->queue);
    for (int k = 0; k < 2; k++)
        if (a->inbox[k] >= 0)
            close(a->inbox[k]);
    dh_engine_free(a->e);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->changed);
    free(a->conns);
    free(a->pf);
    free(a->last);
    dh_sampler_free(a->order);
}

/* Tells every held attach why the run could not start. */
static void refuse_all(agent *a, int rc, const char *why)
{
    for (int r = a->lo; r < a->hi; r++)
        if (a->conns[r].fd >= 0)
            dh__proto_send_error(a->conns[r].fd, rc, why);
}

/*
 * One generation of the job: an engine with its pools, every rank attached, served until the
 * run ends; its accounting into out. 0, or why it ended otherwise (DH_EPEER: ranks died or
 * left early).
 */
static int serve_generation(agent *a, dh_sample_error_cb on_error, void *user, dh_result *out,
                            char *err, size_t errlen)
{
    /* The engine and its pools first: a pool that does not fit fails before anyone waits. */
    int rc = dh__engine_start(a->cfg, a->o.max_leases, on_error, user, &a->e, err, errlen);
    if (!rc && a->hub->gate)
        dh__engine_set_gate(a->e, a->hub->gate);
    if (!rc) {
        int64_t tail = a->cfg->keep_last ? 0 : a->samples % a->cfg->global_batch;
        if (!a->gen)
            event(a, "listening on %s for %d ranks (%d..%d)", a->hub->name, a->hi - a->lo,
                  a->lo, a->hi - 1);
        if (!a->gen && a->o.max_leases < 2)
            event(a, "--max-leases %d: a Python Loader refuses it (`for batch in loader` holds "
                  "its batch while it takes the next: it needs 2)", a->o.max_leases);
        if (!a->gen && tail)
            event(a, "an epoch of %lld samples in global batches of %lld uses %lld: the last "
                  "%lld of each epoch's order are dropped (--keep-last keeps them)",
                  (long long)a->samples, (long long)a->cfg->global_batch,
                  (long long)(a->samples - tail), (long long)tail);
        if ((rc = wait_for_ranks(a))) {
            char why[160];
            snprintf(why, sizeof why, rc == DH_ETIMEDOUT ? "only %d of %d ranks attached in time"
                                                         : "stopped (Ctrl-C, SIGTERM or its "
                                                           "caller) with %d of %d ranks attached",
                     a->attached, a->hi - a->lo);
            dh__msg(err, errlen, "%s", why);
            dh__engine_refuse(a->e, rc, why);
            refuse_all(a, rc, why);
        }
    }
    a->e_began = 0;
    if (!rc) {
        fill_info(a);
        a->e_began = 1;
        pthread_mutex_lock(&a->hub->mu);
        a->ran = 1;
        pthread_mutex_unlock(&a->hub->mu);
        int resume = a->gen || a->conns[a->lo].req.resume;
        if ((rc = dh__engine_begin(a->e, resume, a->info.epoch, a->info.step, a->info.shift,
                                   a->N, err, errlen)))
            refuse_all(a, rc, err && errlen ? err : "the agent could not begin");
    }
    if (!rc && !(rc = answer_attaches(a)) && !(rc = start_ranks(a, err, errlen)))
        watch(a);
    int frc = a->e ? dh_engine_finish(a->e, out) : 0;
    double waited = a->e && a->hub->gate ? dh__engine_gate_wait(a->e) : 0;
    if (waited >= 0.1) /* what sharing the CPU cost this stream */
        event(a, "its workers waited %.1f s in all for CPU the other streams held", waited);
    if (frc == DH_ECANCELED)
        frc = 0;
    if (!a->died && a->left_at < INT64_MAX) /* ranks left: a finite run was cut short */
        frc = a->N > 0 ? DH_EPEER : 0;
    const char *peer = frc == DH_EPEER && !a->fault[0] && a->e ? dh__engine_peer_msg(a->e) : NULL;
    if (!rc && frc == DH_EPEER)
        rc = dh__fail(err, errlen, frc, "%s", a->fault[0] ? a->fault
                                             : peer ? peer : dh_strerror(frc));
    else if (!rc && frc && frc != DH_ECANCELED)
        rc = dh__fail(err, errlen, frc, "the run failed: %s",
                      frc == DH_EFAILED && dh__engine_fail_msg(a->e) ? dh__engine_fail_msg(a->e)
                                                                      : dh_strerror(frc));
    return rc;
}

/* After a generation lost ranks: where the next starts (the last step every rank had given
 * back), and a clean slate of connections and engine. */
static void prepare_restart(agent *a, const dh_result *done)
{
    int64_t common = INT64_MAX;
    for (int r = a->lo; r < a->hi; r++) {
        conn *c = &a->conns[r];
        if (c->started)
            pthread_join(c->thread, NULL);
        if (c->fd >= 0)
            close(c->fd);
        common = DH_MIN(common, c->released);
        *c = (conn){.a = a, .fd = -1, .rank = r};
    }
    common = common == INT64_MAX ? 0 : common;
    start_point *p = &a->restart;
    dh__run_position(&a->info, common, &p->epoch, &p->step, &p->shift);
    p->base = training_step(a, common);
    event(a, "every rank had given back the batches of the steps before %lld (%lld in this set "
          "of ranks, %lld samples delivered, %lld failed): waiting %d s for the job to restart "
          "at step %lld (epoch %lld, step %lld of it), unless its ranks present a saved state",
          (long long)p->base, (long long)done->steps, (long long)done->delivered,
          (long long)done->failed, a->o.attach_timeout_ms / 1000, (long long)p->base,
          (long long)p->epoch, (long long)p->step);
    dh_engine_free(a->e);
    a->e = NULL;
    a->attached = 0;
    a->fault_code = 0;
    a->died = 0;
    a->left_at = INT64_MAX;
    a->gen++;
}

/* One stream, from its first set of ranks to its end (restarts included): a->rc, a->err. */
static void *stream_main(void *arg)
{
    agent *a = arg;
    dh_result *out = a->out;
    char *err = a->err;
    size_t errlen = sizeof a->err;
    dh_result last; /* the accounting of the last set of ranks that ran (out's size) */
    memcpy(&last, out, out->struct_size);
    int rc = 0;
    while (!rc) {
        rc = serve_generation(a, a->on_error, a->user, out, err, errlen);
        const dh_run_config *cfg = a->cfg;
        int stopped = a->stopping || (cfg->should_stop && cfg->should_stop(cfg->should_stop_user));
        if (a->unused) {
            memcpy(out, &last, out->struct_size); /* as it came: nothing ran */
            int endless = cfg->steps < 0;
            event(a, "no trainer attached while the other streams ran: not started%s",
                  endless ? "" : ", though its job was finite");
            rc = endless ? 0 : dh__fail(err, errlen, DH_ETIMEDOUT, "no trainer attached while the "
                                        "other streams ran, and its job (--epochs/--steps) was "
                                        "finite: it did not run");
            break;
        }
        if (a->gen && !a->e_began) { /* no restart came: the accounting is the last set's */
            memcpy(out, &last, out->struct_size);
            if (rc == DH_ECANCELED)
                dh__msg(err, errlen, "stopped (Ctrl-C, SIGTERM or its caller) while waiting for "
                        "the job to restart after: %s", a->fault);
            else
                dh__msg(err, errlen, "no restart of the job within %d s (%s) after: %s",
                        a->o.attach_timeout_ms / 1000, dh_strerror(rc), a->fault);
            rc = DH_EPEER;
        }
        if (rc != DH_EPEER || a->o.on_rank_exit != DH_ON_RANK_EXIT_WAIT || stopped || !a->e_began)
            break;
        memcpy(&last, out, out->struct_size);
        prepare_restart(a, out);
        rc = 0;
    }
    a->rc = rc;
    const dh_run_config *cfg = a->cfg;
    int stopped = a->stopping || (cfg->should_stop && cfg->should_stop(cfg->should_stop_user));
    pthread_mutex_lock(&a->hub->mu);
    a->end_code = stopped ? DH_ECANCELED : DH_EMISMATCH;
    a->end_why = stopped ? "the agent was stopped (Ctrl-C, SIGTERM or its caller)"
                         : "this stream's run has ended";
    a->done = 1; /* the acceptor refuses its attaches from here */
    pthread_mutex_unlock(&a->hub->mu);
    take_queued(a, a->end_code, a->end_why);
    return NULL;
}

void dh_serve_stream_default(dh_serve_stream *s)
{
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
}

/* Splits opts->memory_budget over the streams that name no budget of their own, in
 * proportion to what each would take by default. 0 or an error. */
static int share_memory(hub *h, int64_t total, char *err, size_t errlen)
{
    int64_t fixed = 0, want[DH_SERVE_MAX_STREAMS] = {0}, wanted = 0;
    for (int k = 0; k < h->n; k++) {
        agent *a = &h->s[k];
        if (a->run.memory_budget) {
            fixed += a->run.memory_budget;
            continue;
        }
        char why[256] = "";
        want[k] = dh__engine_default_budget(a->cfg, a->o.max_leases, why, sizeof why);
        if (want[k] < 0)
            return dh__fail(err, errlen, (int)want[k], "stream %s: %s", a->stream, why);
        wanted += want[k];
    }
    if (total < fixed + (wanted ? 1 : 0))
        return dh__fail(err, errlen, DH_EINVAL, "the agent's memory budget (%.1f MiB) is below "
                        "what the streams with their own budget take (%.1f MiB)",
                        total / 1048576.0, fixed / 1048576.0);
    for (int k = 0; k < h->n; k++)
        if (want[k])
            h->s[k].run.memory_budget =
                (int64_t)((double)(total - fixed) * ((double)want[k] / (double)wanted));
    return 0;
}

int dh_serve_streams(const dh_serve_stream *streams, int n, const dh_serve_opts *opts,
                     char *err, size_t errlen)
{
    if (!streams || n < 1 || n > DH_SERVE_MAX_STREAMS)
        return dh__fail(err, errlen, DH_EINVAL, "an agent serves 1 to %d streams, not %d",
                        DH_SERVE_MAX_STREAMS, n);
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        const dh_serve_stream *s = &streams[k];
        const char *nm = s->name ? s->name : "";
        if (s->struct_size < sizeof(uint32_t) || s->struct_size > sizeof *s || !s->cfg || !s->out)
            rc = dh__fail(err, errlen, DH_EINVAL, "stream %d: initialise it with "
                          "dh_serve_stream_default and give it cfg and out", k);
        else if (strlen(nm) >= DH__STREAM_NAME || (k && !nm[0]) || strchr(nm, '"'))
            rc = dh__fail(err, errlen, DH_EINVAL, "stream %d: a name of 1 to %d bytes without "
                          "quotes, not \"%s\"", k, DH__STREAM_NAME - 1, nm);
        else if (n > 1 && s->cfg->exchange && s->cfg->nodes > 1)
            rc = dh__fail(err, errlen, DH_EINVAL, "several streams are served on one node only "
                          "(on several nodes, run an agent per stream)");
        for (int j = 0; j < k && !rc; j++)
            if (!strcmp(nm[0] ? nm : "train", streams[j].name && streams[j].name[0]
                                                   ? streams[j].name : "train"))
                rc = dh__fail(err, errlen, DH_EINVAL, "two streams are named \"%s\"", nm);
        if (!rc)
            rc = dh__result_check(s->out, err, errlen);
    }
    if (rc)
        return rc;
    hub h = {.listen_fd = -1, .n = n};
    pthread_mutex_init(&h.mu, NULL);
    h.s = dh__calloc((size_t)n, sizeof *h.s);
    if (!h.s)
        rc = dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    int inited = 0, started = 0;
    dh_serve_opts o;
    dh_serve_opts_default(&o);
    if (opts)
        memcpy(&o, opts, DH_MIN((size_t)opts->struct_size, sizeof o));
    h.on_event = o.on_event; /* before the streams: they may tell something at once */
    h.event_user = o.event_user;
    for (; !rc && inited < n; inited++) {
        char why[300] = "";
        rc = agent_init(&h.s[inited], &h, &streams[inited], opts, why, sizeof why);
        if (rc)
            dh__msg(err, errlen, "%s%s%s", n > 1 ? "stream " : "",
                    n > 1 ? h.s[inited].stream : "", n > 1 ? ": " : "");
        if (rc)
            dh__msg(err + strlen(err), errlen - strlen(err), "%s", why);
    }
    if (!rc && n > 1 && o.memory_budget > 0)
        rc = share_memory(&h, o.memory_budget, err, errlen);
    if (!rc && n > 1)
        rc = dh__gate_new(DH_MAX(1, h.s[0].run.workers), &h.gate);
    char name[108];
    h.name = o.socket;
    if (!rc && !h.name && !(rc = dh_serve_default_socket(NULL, name, sizeof name)))
        h.name = name;
    int ranks = 0;
    for (int k = 0; !rc && k < n; k++)
        ranks += h.s[k].R;
    if (!rc && (h.listen_fd = dh__listen(h.name, ranks + 8, err, errlen)) < 0)
        rc = h.listen_fd;
    for (; !rc && started < n; started++)
        if ((rc = dh__thread_create(&h.s[started].thread, stream_main, &h.s[started])))
            dh__fail(err, errlen, rc, "cannot start the thread of a stream");
    if (rc) /* the streams that started must end: none gets an attach */
        atomic_store(&h.quit, 1);
    if (!rc)
        dh__serve_accept(&h, h.s[0].o.io_timeout_ms);
    for (int k = 0; k < started; k++)
        pthread_join(h.s[k].thread, NULL);
    for (int k = 0; k < started && !rc; k++)
        if (h.s[k].rc) { /* the first stream that failed says why */
            rc = h.s[k].rc;
            dh__msg(err, errlen, "%s%s%s%s", n > 1 ? "stream " : "", n > 1 ? h.s[k].stream : "",
                    n > 1 ? ": " : "", h.s[k].err);
        }
    if (h.listen_fd >= 0) {
        close(h.listen_fd);
        if (h.name[0] != '@')
            unlink(h.name);
    }
    for (int k = 0; k < inited; k++)
        agent_free(&h.s[k]);
    free(h.s);
    dh__gate_free(h.gate);
    pthread_mutex_destroy(&h.mu);
    return rc;
}

int dh_serve(const dh_run_config *cfg, const dh_serve_opts *opts, dh_sample_error_cb on_error,
             void *user, dh_result *out, char *err, size_t errlen)
{
    if (!cfg || !out)
        return DH_EINVAL;
    dh_serve_stream s;
    dh_serve_stream_default(&s);
    s.cfg = cfg;
    s.on_error = on_error;
    s.user = user;
    s.out = out;
    return dh_serve_streams(&s, 1, opts, err, errlen);
}
