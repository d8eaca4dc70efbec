/*
 * serve_rank.c - serving one rank (serve_int.h): its thread answers its
 * requests in order (NEXT blocks in the engine on this thread only),
 * describes each batch (ids, flags, labels, texts, metas beside the views),
 * keeps its leases, and turns its death or an early detach into the
 * sentence every other rank is told.
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
    size_t len = 2 * ns * sizeof(int64_t) + ni * (sizeof(dh_batch_item) + sizeof(dh_media_draw)) +
                 ids + ns + ns * sizeof(int64_t) + texts + metas;
    if (ni && !b->draws)
        return DH_ENOMEM; /* the engine could not make them */
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
    memcpy(w, b->draws, ni * sizeof(dh_media_draw)), w += ni * sizeof(dh_media_draw);
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

/* The sentence for a run that cannot go on (another rank died, the agent stopped); 0, or the
 * peer did not take it (it stopped reading: the caller gives up on it). */
static int send_end(agent *a, conn *c, int rc)
{
    char msg[sizeof a->fault + 64];
    const char *failed = rc == DH_EFAILED && a->e ? dh__engine_fail_msg(a->e) : NULL;
    const char *peer = rc == DH_EPEER && a->e ? dh__engine_peer_msg(a->e) : NULL;
    const char *by = rc == DH_ECANCELED && a->e ? dh__engine_stopped_by(a->e) : NULL;
    pthread_mutex_lock(&a->mu); /* the engine's lock is not taken inside ours */
    if (rc == DH_EPEER && a->fault[0])
        snprintf(msg, sizeof msg, "%s", a->fault);
    else if (peer) /* another node's rank or the node itself (several nodes) */
        snprintf(msg, sizeof msg, "%s", peer);
    else if (rc == DH_EEMPTY)
        snprintf(msg, sizeof msg, "the run is complete");
    else if (rc == DH_ECANCELED) /* this agent, or another node's (every node stops) */
        snprintf(msg, sizeof msg, "%s", by ? by : "the agent was stopped (Ctrl-C, SIGTERM or "
                                                  "its caller)");
    else
        snprintf(msg, sizeof msg, "the agent's run failed: %s", failed ? failed : dh_strerror(rc));
    c->ended = 1; /* after an end, the rank leaving is expected (gone_before reads it) */
    pthread_mutex_unlock(&a->mu);
    return dh__proto_send_error(c->fd, rc, msg);
}

static void release_lease(agent *a, conn *c, lease *l, int reclaimed);

/* Answers a NEXT; 0, or the connection is broken (the rank died or stopped reading). */
static int on_next(agent *a, conn *c)
{
    if (c->nleases >= a->o.max_leases) {
        char msg[320]; /* (a trial kept tensors of each batch and read only the first part) */
        snprintf(msg, sizeof msg, "rank %d holds %d batches: release one before taking another "
                 "(max_leases %d; a Python batch is held while any tensor viewing it lives: "
                 "keep a .clone() of what outlives its step)", c->rank, c->nleases,
                 a->o.max_leases);
        return dh__proto_send_error(c->fd, DH_ELIMIT, msg);
    }
    pthread_mutex_lock(&a->mu);
    int beyond = c->next_step >= a->left_at; /* a rank that left will never take this step */
    pthread_mutex_unlock(&a->mu);
    if (beyond)
        return send_end(a, c, DH_EPEER);
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
    if (rc) /* a client that reads nothing costs one send timeout, not one per request */
        return send_end(a, c, rc);
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
        return send_end(a, c, DH_EPEER);
    }
    c->leases[c->nleases++] = (lease){b, dh__mono(), -1.0};
    dh__engine_count_lease(a->e, 1);
    rc = send_batch(a, c, &b);
    if (rc == DH_EPEER || rc == DH_ETIMEDOUT) { /* never delivered: the rank did not take it */
        release_lease(a, c, &c->leases[c->nleases - 1], 1);
        pthread_mutex_lock(&a->mu);
        c->next_step = b.step;
        pthread_mutex_unlock(&a->mu);
    }
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
    dh__engine_count_lease(a->e, -1);
    *l = c->leases[--c->nleases];
}

/* What a lost rank means for the others. */
const char *dh__agent_fault_tail(const agent *a)
{
    return a->o.on_rank_exit == DH_ON_RANK_EXIT_WAIT ? "the agent waits for the job to restart"
                                                     : "the job cannot go on without it";
}

/* 1 when the bytes waiting on c's socket hold a DETACH (looked at, not taken); an ABORT's
 * reason is kept (c->why). */
int dh__agent_detach_waiting(conn *c)
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
        if (h.type == DH__MSG_ABORT && h.len <= (size_t)n - at - sizeof h) {
            dh__agent_abort_said(c, buf + at + sizeof h, h.len);
            return 0;
        }
        at += sizeof h + h.len;
    }
    return 0;
}

void dh__agent_abort_said(conn *c, const void *text, uint32_t len)
{
    const unsigned char *t = text;
    size_t n = DH_MIN((size_t)len, sizeof c->why - 1);
    pthread_mutex_lock(&c->a->mu); /* the watch may read it from the socket as well */
    for (size_t i = 0; i < n; i++)
        c->why[i] = t[i] >= 0x20 && t[i] < 0x7f ? (char)t[i] : '?';
    c->why[n] = 0;
    c->failed = 1;
    pthread_mutex_unlock(&c->a->mu);
}

/* How long a silent end waits for another gone rank's ABORT to be marked (gone_before). */
#define ABORT_MARK_GRACE_S 0.1

/* Rank o failed saying why (its ABORT was taken, or is waiting: dh__agent_detach_waiting). */
static int said_why(agent *a, const conn *o)
{
    pthread_mutex_lock(&a->mu);
    int said = o->failed;
    pthread_mutex_unlock(&a->mu);
    return said;
}

/* Another rank whose socket is gone without a DETACH (it died, or failed: ABORT) when rank c's
 * own fault comes: under DDP a rank's death makes the others fail in the collective first,
 * so that one is the cause. Every rank still in is looked at, computing ones too: a rank
 * killed while it computed has its own thread reading its socket, but that thread may see
 * the end after the failure it caused is taken here (a user's trial: SIGKILL of rank 3, and
 * rank 2's "Connection reset by peer" named as the cause, one run in three). A rank whose
 * thread already took its DETACH is marked hung up first (on_detach), so it is not taken
 * for dead here. Both gone by the time one is taken: a rank that died without a word (killed,
 * crashed) came before one whose trainer failed saying why (its collective broke because
 * of it), so a silent death is not blamed on a failure with a reason. */
static conn *gone_before(agent *a, const conn *c)
{
    pthread_mutex_lock(&a->mu);
    int silent = !c->failed;
    pthread_mutex_unlock(&a->mu);
    for (int r = a->lo; r < a->hi; r++) {
        conn *o = &a->conns[r];
        if (o == c)
            continue;
        pthread_mutex_lock(&a->mu);
        int look = o->started && !o->finished && !o->hung_up && !o->ended && o->fd >= 0;
        pthread_mutex_unlock(&a->mu);
        struct pollfd p = {.fd = o->fd, .events = POLLRDHUP};
        if (!look || poll(&p, 1, 0) <= 0 || !(p.revents & (POLLHUP | POLLRDHUP | POLLERR)) ||
            dh__agent_detach_waiting(o))
            continue;
        int said = said_why(a, o);
        /* Both silent so far: o's thread may have taken its ABORT off the socket and not yet
         * marked it (CI under TSan: rank 1 killed, rank 0's "Connection reset by peer" taken
         * for a silent death and named first, once in CI); a moment tells. */
        for (double t0 = dh__mono(); silent && !said && dh__mono() - t0 < ABORT_MARK_GRACE_S;) {
            usleep(5000);
            said = said_why(a, o);
        }
        if (!(silent && said))
            return o;
    }
    return NULL;
}

static void lost(agent *a, conn *c, const char *at, int look_around);

/* How rank c was lost, in words: died, or failed saying why (at: where it was). */
static const char *how_lost(const conn *c, const char *at, char *buf, size_t len)
{
    if (!c->failed)
        snprintf(buf, len, "rank %d (pid %d) died or disconnected%s", c->rank, (int)c->pid, at);
    else if (c->why[0])
        snprintf(buf, len, "rank %d (pid %d) failed%s, its trainer says: %s", c->rank,
                 (int)c->pid, at, c->why);
    else
        snprintf(buf, len, "rank %d (pid %d) failed%s (its trainer gave no reason)", c->rank,
                 (int)c->pid, at);
    return buf;
}

void dh__agent_lost(agent *a, conn *c, const char *at)
{
    lost(a, c, at, 1);
}

/* How long a rank's failure with a reason waits for another's silent end to show (below). */
#define SILENT_DEATH_GRACE_S 0.25

int dh__agent_blame_first(agent *a, const conn *c)
{
    pthread_mutex_lock(&a->mu);
    int first_fault = !a->fault_code, said = c->failed;
    pthread_mutex_unlock(&a->mu);
    conn *before = first_fault ? gone_before(a, c) : NULL;
    /* A trainer that fails saying why may do so because a peer died an instant before (its
     * collective broke), and the dead one's socket may close a moment after the peer's
     * message is here: the failure waits a little for such an end before it is the cause. */
    for (double t0 = dh__mono(); first_fault && said && !before &&
                                 dh__mono() - t0 < SILENT_DEATH_GRACE_S;) {
        usleep(10000);
        before = gone_before(a, c);
    }
    if (!before)
        return 0;
    pthread_mutex_lock(&a->mu);
    before->hung_up = 1;
    pthread_mutex_unlock(&a->mu);
    lost(a, before, "", 0);
    return 1;
}

static void lost(agent *a, conn *c, const char *at, int look_around)
{
    if (look_around && dh__agent_blame_first(a, c)) { /* this rank's fault follows it */
        char how[sizeof a->fault];
        pthread_mutex_lock(&a->mu);
        how_lost(c, at, how, sizeof how);
        pthread_mutex_unlock(&a->mu);
        event(a, "then %s", how);
        return;
    }
    char why[sizeof a->fault], by[200] = "";
    const char *other = a->e ? dh__engine_stopped_by(a->e) : NULL; /* not under a->mu */
    /* its trainers were told the run failed on too many failed samples: one that fails then
     * (its collective broke as a peer left) is not the cause (a user's trial blamed gloo) */
    int failed = !other && a->e && dh__engine_fail_msg(a->e);
    const char *tail = failed ? "not the cause" : dh__agent_fault_tail(a);
    if (other)
        snprintf(by, sizeof by, "%s, then ", other);
    else if (failed)
        snprintf(by, sizeof by, "the run had stopped on too many failed samples (--max-failed: "
                                "the reason follows), then ");
    pthread_mutex_lock(&a->mu);
    int first = !a->died;
    if (!a->fault_code) { /* a rank that left earlier stays the cause */
        a->fault_code = DH_EPEER;
        char how[sizeof a->fault];
        /* After the agent was stopped its trainers are told so, and one that fails then (its
         * collective broke as another rank stopped) is not the cause (a user's trial: Ctrl-C
         * on the agent ended with "rank 0 failed ... Connection closed by peer") */
        snprintf(a->fault, sizeof a->fault, "%s%s; %s",
                 a->stopping ? "the agent was stopped (Ctrl-C, SIGTERM or its caller), then "
                             : by, /* another node's agent was (every node stops with it) */
                 how_lost(c, at, how, sizeof how), tail);
    }
    a->died = 1;
    snprintf(why, sizeof why, "%s", a->fault);
    pthread_mutex_unlock(&a->mu);
    if (first) {
        event(a, "%s", why);
        dh__engine_abort(a->e, DH_EPEER, why);
    }
}

/*
 * A rank died or disconnected. Its run not over, the batch of the last step it took gives its
 * memory back (dh__engine_reclaim) but its step stays unfinished, and the run stops
 * (dh__agent_lost). Before, it was released for it and counted as a completed step, although
 * the rank never finished it. A batch it kept of an earlier step (a tensor held on to) is of
 * a step it went past, which it did finish: that one is released (it was reclaimed too, and
 * a batch kept from step 0 made the accounting read 0 steps).
 */
static void on_death(agent *a, conn *c)
{
    pthread_mutex_lock(&a->mu);
    int done = c->ended || c->detached || (a->N > 0 && c->next_step >= a->N);
    int64_t last = c->next_step - 1;
    pthread_mutex_unlock(&a->mu);
    if (done) { /* the run was over for it: going away is its end */
        while (c->nleases)
            release_lease(a, c, &c->leases[0], 1);
        return;
    }
    int64_t held[MAX_LEASES];
    int nh = 0;
    for (int k = 0; k < c->nleases && k < MAX_LEASES; k++) { /* in step order */
        int64_t st = dh__agent_step(a, c->leases[k].b.step);
        int i = nh++;
        for (; i > 0 && held[i - 1] > st; i--)
            held[i] = held[i - 1];
        held[i] = st;
    }
    char at[160] = "";
    for (int k = 0, n = 0; k < nh && n < (int)sizeof at - 32; k++)
        n += snprintf(at + n, sizeof at - (size_t)n, "%s%lld",
                      k ? (k + 1 == nh ? " and " : ", ")
                        : (nh > 1 ? " holding steps " : " holding step "),
                      (long long)held[k]);
    for (int k = 0; k < c->nleases;) /* steps it went past: finished */
        if (c->leases[k].b.step < last)
            release_lease(a, c, &c->leases[k], 1);
        else
            k++;
    while (c->nleases) { /* before the run stops: the engine is surely there */
        dh__engine_reclaim(a->e, &c->leases[0].b);
        dh__engine_count_lease(a->e, -1);
        c->leases[0] = c->leases[--c->nleases];
    }
    dh__agent_lost(a, c, at);
}

int dh__agent_mark_left(agent *a, conn *c)
{
    int early = !c->ended && (a->N < 0 || c->next_step < a->N);
    if (early && c->next_step < a->left_at)
        a->left_at = c->next_step;
    if (early && !a->fault_code) { /* a death or an earlier leaving stays the cause */
        if (c->next_step == 0)
            snprintf(a->fault, sizeof a->fault, "rank %d (pid %d) left before taking a batch "
                     "(in synchronous training every rank takes every step: iterate the Loader "
                     "on every rank); %s", c->rank, (int)c->pid, dh__agent_fault_tail(a));
        else if (a->N < 0)
            snprintf(a->fault, sizeof a->fault, "rank %d (pid %d) left after step %lld; %s",
                     c->rank, (int)c->pid, (long long)dh__agent_step(a, c->next_step - 1),
                     dh__agent_fault_tail(a));
        else
            snprintf(a->fault, sizeof a->fault, "rank %d (pid %d) left after %lld of the run's "
                     "%lld steps; %s", c->rank, (int)c->pid, (long long)c->next_step,
                     (long long)a->N, dh__agent_fault_tail(a));
        a->fault_code = DH_EPEER;
    }
    pthread_cond_broadcast(&a->changed);
    return early;
}

void dh__agent_tell_left(agent *a, const conn *c, int early, const char *how)
{
    if (early)
        event(a, "rank %d detached (pid %d)%s after taking %lld batches%s", c->rank,
              (int)c->pid, how, (long long)c->next_step, a->N < 0 ? "" : ", before the run's end");
    else /* the count as an early one has it (a trial compared the streams' lines) */
        event(a, "rank %d detached (pid %d) after taking %lld batches", c->rank, (int)c->pid,
              (long long)c->next_step);
}

/* A clean detach: the end of the run for this rank, or leaving it early (see DESIGN). */
static void on_detach(agent *a, conn *c)
{
    pthread_mutex_lock(&a->mu);
    int over = c->ended || (a->N > 0 && c->next_step >= a->N);
    int told = c->hung_up; /* the watch saw it first */
    c->hung_up = 1;        /* from here no rank's failure takes it for dead (gone_before) */
    pthread_mutex_unlock(&a->mu);
    if (!over) /* leaving early, perhaps because another rank died (DDP) */
        dh__agent_blame_first(a, c);
    c->detached = 1;
    while (c->nleases)
        release_lease(a, c, &c->leases[0], 0);
    pthread_mutex_lock(&a->mu);
    int early = dh__agent_mark_left(a, c);
    pthread_mutex_unlock(&a->mu);
    if (!told)
        dh__agent_tell_left(a, c, early, "");
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
        if (h.type == DH__MSG_ABORT)
            dh__agent_abort_said(c, p, h.len);
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
    if (h->type == DH__MSG_ABORT)
        dh__agent_abort_said(c, p, h->len);
    on_death(a, c); /* a message we do not understand: treat the peer as broken */
    return 1;
}

void *dh__agent_rank_main(void *arg)
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
