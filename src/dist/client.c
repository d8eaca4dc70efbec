/*
 * client.c - a trainer process's side of the agent (datahelix/client.h).
 *
 * DESIGN: the client maps the agent's two pools once, from the descriptors
 * that arrive with ATTACHED. A BATCH message's payload is kept as the
 * batch's storage (samples, tokens, items, ids) until the batch is
 * released, so a dh_batch points into it and into the shared pool and
 * nothing is copied. Sending is serialised by send_mu, so releases and
 * reports may come from any thread (a garbage collector's) while one
 * thread waits in dh_client_next; the receiving side belongs to that one
 * thread (a second one is refused: busy), and a detach from another thread
 * shuts the socket down for it to close. Lock order: lease_mu may be taken
 * while holding send_mu, never the reverse.
 *
 * Steps: the agent numbers a run's steps from 0; the client adds where the
 * run started in the sample order (base), so a caller sees steps counted
 * from the start of training, and takes it off what it sends back.
 */
#include "dist.h"

#include "../core/shm.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    int64_t step;
    void *payload; /* the BATCH message: the batch's arrays live here */
    double emulated_s;
    const uint8_t *flags; /* per sample: DH__SAMPLE_* */
    const uint8_t *labels; /* per sample: an int64 (unaligned) */
    const char *texts;     /* per sample: a NUL-terminated text */
    const char *metas;     /* per sample: a NUL-terminated JSON object ("" when none) */
} held;

struct dh_client {
    int fd;
    int timeout_ms;
    int rank;
    dh__attached info;
    dh__shm pools[2];
    pthread_mutex_t send_mu, lease_mu;
    held *leases;
    int nleases;
    size_t cap;
    int64_t taken; /* batches taken so far (state) */
    int64_t base;  /* the global step of the run's step 0 */
    pid_t pid;     /* the process that connected: only it speaks to the agent */
    /* A thread is in dh_client_next (only one may be: it owns the receiving side); a
     * detach meanwhile shuts the socket down and leaves closing it to that thread. */
    atomic_int busy;
    int closing;   /* under send_mu: detached while busy; next closes fd when it returns */
};

/* 1 in a process forked from the one that connected: it shares the socket and the pools'
 * mappings, and must say nothing to the agent (a child's release or detach would give the
 * agent memory the parent still views, or end the parent's session). */
/* Milliseconds on the monotonic clock. */
static double now_ms(void)
{
    return dh__mono() * 1e3;
}

static int forked(const dh_client *c)
{
    return getpid() != c->pid;
}

void dh_client_opts_default(dh_client_opts *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->resume_global_step = -1;
}

/* The sentence of an ERROR message into errbuf; returns its code. */
static int error_reply(const void *p, uint32_t len, char *err, size_t errlen)
{
    int32_t code = DH_EPARSE;
    if (len >= sizeof code)
        memcpy(&code, p, sizeof code);
    const char *text = len > sizeof code ? (const char *)p + sizeof code : "";
    dh__msg(err, errlen, "%.*s", (int)(len > sizeof code ? len - sizeof code : 0), text);
    return code < 0 ? code : DH_EPARSE;
}

static int map_pools(dh_client *c, const int *fds, int nfds)
{
    int64_t sizes[2] = {c->info.ring_size, c->info.arena_size};
    int rc = nfds == 2 ? 0 : DH_EPARSE;
    for (int k = 0; k < 2 && !rc; k++)
        rc = dh__shm_map(&c->pools[k], fds[k], sizes[k], 0); /* read-only (so is the fd) */
    for (int k = 0; k < 2 && !rc; k++) /* a write into it is named before the SIGSEGV */
        dh__segv_hint_add(c->pools[k].base, (size_t)c->pools[k].size, c->rank);
    for (int k = 0; k < nfds; k++)
        if (rc && (k >= 2 || c->pools[k].fd != fds[k]))
            close(fds[k]);
    return rc;
}

/* How long the agent may stay silent while ranks attach (it speaks every second). */
#define AGENT_SILENCE_MS 15000

/* Waits for the agent's answer to the attach, through its WAITING messages: as long as it
 * waits, or attach_ms when > 0. The answer's head and payload (and fds) are the caller's. */
static int await_answer(dh_client *c, int attach_ms, dh__msg_head *h, void **p, int *fds,
                        int *nfds, char *err, size_t errlen)
{
    double t0 = now_ms();
    dh__waiting w = {0, 0, 0};
    for (;;) {
        int left = attach_ms > 0 ? attach_ms - (int)(now_ms() - t0) : AGENT_SILENCE_MS;
        int n = left <= 0 ? 0 : *nfds;
        int rc = left <= 0 ? DH_ETIMEDOUT
                           : dh__proto_recv(c->fd, DH_MIN(left, AGENT_SILENCE_MS), h, p, fds, &n);
        if (!rc && h->type == DH__MSG_WAITING) {
            if (h->len == sizeof w)
                memcpy(&w, *p, sizeof w);
            free(*p);
            *p = NULL;
            for (int k = 0; k < n; k++) /* a wait carries no descriptor */
                close(fds[k]);
            continue;
        }
        *nfds = n;
        if (rc == DH_ETIMEDOUT && attach_ms > 0 && left <= AGENT_SILENCE_MS)
            return dh__fail(err, errlen, rc, "not every rank attached within %d ms (%d of %d "
                            "attached to the agent; it waits %.0f s more)", attach_ms,
                            (int)w.attached, (int)w.needed, w.seconds_left);
        if (rc == DH_ETIMEDOUT)
            return dh__fail(err, errlen, rc, "the agent said nothing for %d s while ranks "
                            "attached (it is stopped or hung)", AGENT_SILENCE_MS / 1000);
        if (rc)
            return dh__fail(err, errlen, rc, "the agent went away during the attach%s",
                            w.needed ? " (it waited for ranks to attach: see its output)" : "");
        return 0;
    }
}

/* Sends ATTACH and waits for ATTACHED (the agent answers once every rank attached). */
static int attach(dh_client *c, const dh_client_opts *o, char *err, size_t errlen)
{
    dh__attach q = {.rank = o->rank, .world_size = o->world_size,
                    .global_batch = o->global_batch, .manifest_hash = o->manifest_hash,
                    .spec_hash = o->spec_hash, .pid = (int32_t)getpid(), .resume = o->resume,
                    .epoch = o->epoch, .step = o->step, .resume_seed = o->resume_seed,
                    .resume_global_batch = o->resume_global_batch,
                    .check_seed = o->check_seed, .resume_shift = o->resume_shift,
                    .resume_order = o->resume && o->check_order ? o->resume_order + 1 : 0,
                    .resume_global_step = o->resume ? o->resume_global_step : -1};
    if (o->stream && strlen(o->stream) >= sizeof q.stream)
        return dh__fail(err, errlen, DH_EINVAL, "stream name \"%.40s...\" is longer than %d "
                        "bytes", o->stream, (int)sizeof q.stream - 1);
    if (o->stream)
        memcpy(q.stream, o->stream, strlen(o->stream));
    int rc = dh__proto_send(c->fd, DH__MSG_ATTACH, &q, sizeof q, NULL, 0);
    if (rc)
        return dh__fail(err, errlen, rc, "the agent closed the connection");
    dh__msg_head h;
    void *p = NULL;
    int fds[2], nfds = 2;
    rc = await_answer(c, o->attach_timeout_ms, &h, &p, fds, &nfds, err, errlen);
    if (!rc && h.type == DH__MSG_ERROR)
        rc = error_reply(p, h.len, err, errlen);
    else if (!rc && (h.type != DH__MSG_ATTACHED || h.len != sizeof c->info))
        rc = dh__fail(err, errlen, DH_EPARSE, "unexpected answer to the attach");
    if (!rc) {
        memcpy(&c->info, p, sizeof c->info);
        c->base = c->info.step_base;
        if ((rc = map_pools(c, fds, nfds)))
            dh__msg(err, errlen, "cannot map the agent's batch pools: %s", dh_strerror(rc));
    } else {
        for (int k = 0; k < nfds; k++)
            close(fds[k]);
    }
    free(p);
    return rc;
}

/*
 * The agent must be a process of this user (or root): an abstract socket name can be taken by
 * anyone, so whoever listens there is asked by the kernel (SO_PEERCRED) before anything is
 * sent to it or taken from it. 0 or DH_EACCES, said.
 */
static int trust_agent(int fd, const char *name, char *err, size_t errlen)
{
    uint32_t uid = 0;
    int32_t pid = 0;
    int rc = dh__peer_uid(fd, &uid, &pid);
    if (rc)
        return dh__fail(err, errlen, rc, "cannot ask who listens on %s: %s", name,
                        dh_strerror(rc));
    if (uid != getuid() && uid != 0)
        return dh__fail(err, errlen, DH_EACCES, "the process listening on %s (pid %d) belongs to "
                        "user %u, not to you (%u): refusing to attach to it (another user's "
                        "process took the name first? stop it, or give your agent and trainers "
                        "another --socket / DH_JOB)", name, (int)pid, (unsigned)uid,
                        (unsigned)getuid());
    return 0;
}

int dh_client_connect(const dh_client_opts *opts, dh_client **out, char *err, size_t errlen)
{
    if (!opts || !out || opts->struct_size < sizeof(uint32_t) ||
        opts->struct_size > sizeof(dh_client_opts))
        return dh__fail(err, errlen, DH_EINVAL, "initialise the options with "
                                                "dh_client_opts_default");
    dh_client_opts o;
    dh_client_opts_default(&o);
    memcpy(&o, opts, opts->struct_size);
    *out = NULL;
    char name[108];
    if (!o.socket && dh_serve_default_socket(NULL, name, sizeof name) == 0)
        o.socket = name;
    dh_client *c = dh__calloc(1, sizeof *c);
    if (!c)
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    c->pools[0].fd = c->pools[1].fd = c->pools[0].ro_fd = c->pools[1].ro_fd = -1;
    c->timeout_ms = o.timeout_ms > 0 ? o.timeout_ms : 60000;
    c->rank = o.rank;
    c->pid = getpid();
    pthread_mutex_init(&c->send_mu, NULL);
    pthread_mutex_init(&c->lease_mu, NULL);
    /* A trainer may start before its agent: it waits for it to listen, as for the others
     * to attach when bounded, else timeout_ms. */
    c->fd = dh__connect_told(o.socket,
                             o.attach_timeout_ms > 0 ? o.attach_timeout_ms : c->timeout_ms,
                             o.on_wait, o.on_wait_user, err, errlen);
    int rc = c->fd < 0 ? c->fd : trust_agent(c->fd, o.socket, err, errlen);
    if (rc && c->fd >= 0) { /* an agent not trusted is told nothing, not even goodbye */
        close(c->fd);
        c->fd = -1;
    }
    rc = rc ? rc : attach(c, &o, err, errlen);
    if (rc) {
        dh_client_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Keeps a batch's payload (checked: parts) until its release. */
static int hold(dh_client *c, int64_t step, void *payload, const dh__batch_parts *parts)
{
    pthread_mutex_lock(&c->lease_mu);
    int rc = dh__grow((void **)&c->leases, &c->cap, (size_t)c->nleases + 1,
                      sizeof *c->leases);
    if (!rc)
        c->leases[c->nleases++] = (held){step, payload, parts->head.emulated_s, parts->flags,
                                         parts->labels, parts->texts, parts->metas};
    pthread_mutex_unlock(&c->lease_mu);
    return rc;
}

/* Checks a BATCH message (dh__proto_batch_parts: nothing of it is trusted) and points out at
 * its parts; 0 or DH_EPARSE. */
static int read_batch(dh_client *c, const uint8_t *p, uint32_t len, dh_batch *out,
                      dh__batch_parts *parts)
{
    int64_t sizes[2] = {c->pools[0].size, c->pools[1].size};
    if (dh__proto_batch_parts(p, len, sizes, parts))
        return DH_EPARSE;
    const dh__batch_head *bh = &parts->head;
    const dh__shm *pool = bh->pool >= 0 ? &c->pools[bh->pool] : NULL;
    *out = (dh_batch){.step = c->base + bh->step, .rank = bh->rank, .nsamples = bh->nsamples,
                      .nitems = bh->nitems, .nfailed = bh->nfailed, .samples = parts->samples,
                      .tokens = parts->tokens, .items = parts->items, .draws = parts->draws,
                      .data = pool ? pool->base + bh->offset : NULL,
                      .bytes = pool ? bh->bytes : 0};
    return 0;
}

static int next_batch(dh_client *c, int timeout_ms, dh_batch *out, char *err, size_t errlen);

int dh_client_next(dh_client *c, int timeout_ms, dh_batch *out, char *err, size_t errlen)
{
    if (!c || !out)
        return DH_EINVAL;
    if (forked(c))
        return dh__fail(err, errlen, DH_EINVAL, "this client was connected by process %d: a "
                        "forked process must connect its own (create its Loader after the "
                        "fork)", (int)c->pid);
    if (atomic_exchange(&c->busy, 1))
        return dh__fail(err, errlen, DH_EBUSY, "another thread is taking this rank's next "
                        "batch: one thread iterates a client (a Loader)");
    int rc = next_batch(c, timeout_ms, out, err, errlen);
    pthread_mutex_lock(&c->send_mu);
    if (c->closing) { /* detached meanwhile: the socket is ours to close */
        close(c->fd);
        c->fd = -1;
        c->closing = 0;
    }
    atomic_store(&c->busy, 0);
    pthread_mutex_unlock(&c->send_mu);
    return rc;
}

/* dh_client_next, in the one thread that may receive. */
static int next_batch(dh_client *c, int timeout_ms, dh_batch *out, char *err, size_t errlen)
{
    int32_t t = timeout_ms < 0 ? c->timeout_ms : timeout_ms;
    pthread_mutex_lock(&c->send_mu);
    int fd = c->closing ? -1 : c->fd; /* a detach from another thread may close it */
    int rc = fd < 0 ? DH_EPEER : dh__proto_send(fd, DH__MSG_NEXT, &t, sizeof t, NULL, 0);
    pthread_mutex_unlock(&c->send_mu);
    if (fd < 0)
        return dh__fail(err, errlen, DH_EPEER, "the client has detached");
    dh__msg_head h;
    void *p = NULL;
    /* Sending fails once the agent closed; its last word (why) may still be waiting. */
    int sent = rc;
    rc = dh__proto_recv(fd, sent ? 0 : t, &h, &p, NULL, NULL);
    if (sent && rc == DH_ETIMEDOUT)
        rc = DH_EPEER;
    pthread_mutex_lock(&c->send_mu);
    int closed = c->closing; /* a detach from another thread ended this wait */
    pthread_mutex_unlock(&c->send_mu);
    if (rc && closed)
        return dh__fail(err, errlen, DH_ECANCELED, "this client was closed (close() from another "
                        "thread) while this request waited");
    if (rc == DH_EPEER)
        return dh__fail(err, errlen, rc, "the agent died or closed the connection");
    if (rc == DH_ETIMEDOUT)
        return dh__fail(err, errlen, rc, "no batch within %d ms (the connection is out of step "
                                         "now: close it; is another rank stopped or not "
                                         "iterating? the agent's output names a rank that "
                                         "takes nothing)", (int)t);
    if (rc)
        return dh__fail(err, errlen, rc, "receiving a batch: %s", dh_strerror(rc));
    if (h.type == DH__MSG_ERROR) {
        rc = error_reply(p, h.len, err, errlen);
        free(p);
        return rc;
    }
    dh__batch_parts parts;
    rc = h.type == DH__MSG_BATCH ? read_batch(c, p, h.len, out, &parts) : DH_EPARSE;
    if (!rc)
        rc = hold(c, out->step, p, &parts);
    if (rc) {
        free(p);
        return dh__fail(err, errlen, rc, "the agent sent a malformed batch");
    }
    c->taken++;
    return 0;
}

double dh_client_emulated_seconds(dh_client *c, const dh_batch *b)
{
    double s = -1;
    pthread_mutex_lock(&c->lease_mu);
    for (int k = 0; k < c->nleases; k++)
        if (c->leases[k].step == b->step)
            s = c->leases[k].emulated_s;
    pthread_mutex_unlock(&c->lease_mu);
    return s;
}

/* The lease of batch b (under lease_mu), or NULL. */
static const held *lease_of(const dh_client *c, const dh_batch *b)
{
    for (int j = 0; j < c->nleases; j++)
        if (c->leases[j].step == b->step)
            return &c->leases[j];
    return NULL;
}

int dh_client_sample_pad(dh_client *c, const dh_batch *b, int32_t k)
{
    if (!c || !b || k < 0 || k >= b->nsamples)
        return DH_EINVAL;
    pthread_mutex_lock(&c->lease_mu);
    const held *h = lease_of(c, b);
    int pad = h ? (h->flags[k] & DH__SAMPLE_PAD ? 1 : 0) : DH_EINVAL;
    pthread_mutex_unlock(&c->lease_mu);
    return pad;
}

/* Sample k's string of a batch's texts (meta 0) or metas (1), when its flag says it has one. */
static const char *sample_string(dh_client *c, const dh_batch *b, int32_t k, int meta)
{
    if (!c || !b || k < 0 || k >= b->nsamples)
        return NULL;
    const char *t = NULL;
    pthread_mutex_lock(&c->lease_mu);
    const held *h = lease_of(c, b);
    if (h && (h->flags[k] & (meta ? DH__SAMPLE_META : DH__SAMPLE_TEXT))) {
        t = meta ? h->metas : h->texts;
        for (int32_t j = 0; j < k; j++)
            t += strlen(t) + 1;
    }
    pthread_mutex_unlock(&c->lease_mu);
    return t;
}

const char *dh_client_sample_text(dh_client *c, const dh_batch *b, int32_t k)
{
    return sample_string(c, b, k, 0);
}

const char *dh_client_sample_meta(dh_client *c, const dh_batch *b, int32_t k)
{
    return sample_string(c, b, k, 1);
}

int dh_client_sample_label(dh_client *c, const dh_batch *b, int32_t k, int64_t *label)
{
    if (!c || !b || !label || k < 0 || k >= b->nsamples)
        return DH_EINVAL;
    int rc = DH_EINVAL;
    pthread_mutex_lock(&c->lease_mu);
    const held *h = lease_of(c, b);
    if (h) {
        rc = h->flags[k] & DH__SAMPLE_LABEL ? 1 : 0;
        memcpy(label, h->labels + 8 * (size_t)k, sizeof *label);
        *label = rc ? *label : 0;
    }
    pthread_mutex_unlock(&c->lease_mu);
    return rc;
}

const char *dh_client_sample_id(const dh_client *c, const dh_batch *b, int32_t k)
{
    (void)c;
    if (!b || k < 0 || k >= b->nsamples)
        return NULL;
    const char *s = (const char *)(b->items + b->nitems) +
                    (size_t)b->nitems * sizeof(dh_media_draw); /* the ids follow the draws */
    while (k-- > 0)
        s += strlen(s) + 1;
    return s;
}

int dh_client_release(dh_client *c, const dh_batch *b)
{
    if (!c || !b)
        return DH_EINVAL;
    void *payload = NULL;
    pthread_mutex_lock(&c->send_mu);
    pthread_mutex_lock(&c->lease_mu);
    for (int k = 0; k < c->nleases; k++)
        if (c->leases[k].step == b->step) {
            payload = c->leases[k].payload;
            c->leases[k] = c->leases[--c->nleases];
            break;
        }
    pthread_mutex_unlock(&c->lease_mu);
    dh__release r = {b->step - c->base};
    /* Detached: the agent took every lease back; a forked child's copy: the parent's to
     * give back. */
    int silent = c->fd < 0 || c->closing || forked(c);
    int rc = !payload ? DH_EINVAL
             : silent ? 0
                      : dh__proto_send(c->fd, DH__MSG_RELEASE, &r, sizeof r, NULL, 0);
    pthread_mutex_unlock(&c->send_mu);
    free(payload); /* after the send: b's arrays may live in it */
    return rc;
}

int dh_client_report_step(dh_client *c, int64_t step, double seconds)
{
    if (!c || !(seconds >= 0))
        return DH_EINVAL;
    if (forked(c))
        return DH_EINVAL;
    dh__report r = {step - c->base, seconds};
    pthread_mutex_lock(&c->send_mu);
    int rc = c->fd < 0 || c->closing ? DH_EPEER
                                     : dh__proto_send(c->fd, DH__MSG_REPORT, &r, sizeof r, NULL, 0);
    pthread_mutex_unlock(&c->send_mu);
    return rc;
}

int dh_client_max_leases(const dh_client *c)
{
    return c ? c->info.max_leases : DH_EINVAL;
}

int dh_client_order(const dh_client *c)
{
    return c ? c->info.order : DH_EINVAL;
}

int dh_client_step_position(const dh_client *c, int64_t step, int64_t *epoch,
                            int64_t *epoch_step)
{
    if (!c || !epoch || !epoch_step || step < c->base)
        return DH_EINVAL;
    dh__run_position(&c->info, step - c->base, epoch, epoch_step, NULL);
    return 0;
}

int dh_client_run_get(const dh_client *c, dh_client_run *out)
{
    if (!c || !out)
        return DH_EINVAL;
    const dh__attached *i = &c->info;
    *out = (dh_client_run){i->steps, i->epoch, i->step, i->steps_per_epoch, i->global_batch,
                           i->world_size, i->rank_lo, i->rank_hi, i->manifest_hash,
                           i->spec_hash, i->seed, i->step_base};
    return 0;
}

int dh_client_state_get(dh_client *c, dh_client_state *st)
{
    if (!c || !st)
        return DH_EINVAL;
    int64_t epoch, step, shift;
    dh__run_position(&c->info, c->taken, &epoch, &step, &shift);
    *st = (dh_client_state){c->info.manifest_hash, c->info.spec_hash, c->info.seed,
                            c->info.world_size, c->info.global_batch, epoch, step, shift,
                            c->base + c->taken};
    return 0;
}

/*
 * The batches still held when detaching stay what they were: their pages become private
 * copies at the same addresses (MAP_FIXED), so views that outlive the session keep their
 * bytes while the agent, told of the detach, reuses its shared memory. Pages are copied
 * whole (a neighbour batch's bytes on a shared page are copied too: harmless).
 */
static void keep_held(dh_client *c)
{
    long page = sysconf(_SC_PAGESIZE);
    pthread_mutex_lock(&c->lease_mu);
    for (int k = 0; k < c->nleases; k++) {
        dh__batch_head bh;
        memcpy(&bh, c->leases[k].payload, sizeof bh);
        const dh__shm *pool = bh.pool >= 0 && bh.pool <= 1 ? &c->pools[bh.pool] : NULL;
        if (!pool || !pool->base || bh.bytes <= 0)
            continue;
        uintptr_t lo = (uintptr_t)(pool->base + bh.offset) & ~(uintptr_t)(page - 1);
        uintptr_t hi = ((uintptr_t)(pool->base + bh.offset + bh.bytes) + (uintptr_t)page - 1) &
                       ~(uintptr_t)(page - 1);
        size_t len = (size_t)(hi - lo);
        void *copy = malloc(len);
        if (!copy)
            continue; /* the views would see reused memory: nothing better to do */
        memcpy(copy, (void *)lo, len);
        void *m = mmap((void *)lo, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (m != MAP_FAILED) {
            memcpy(m, copy, len);
            mprotect(m, len, PROT_READ);
        }
        free(copy);
    }
    pthread_mutex_unlock(&c->lease_mu);
}

/* Ends the connection (under send_mu): closed, or, while a thread waits in dh_client_next,
 * shut down (its wait ends at once) and left for that thread to close. */
static void hang_up(dh_client *c)
{
    if (atomic_load(&c->busy)) {
        shutdown(c->fd, SHUT_RDWR);
        c->closing = 1;
    } else {
        close(c->fd);
        c->fd = -1;
    }
}

void dh_client_detach(dh_client *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->send_mu);
    if (c->fd >= 0 && !c->closing && !forked(c))
        keep_held(c);
    if (c->fd >= 0 && !c->closing) {
        if (!forked(c)) /* a forked child closes its copy of the socket, silently */
            dh__proto_send(c->fd, DH__MSG_DETACH, NULL, 0, NULL, 0); /* releases the leases */
        hang_up(c);
    }
    pthread_mutex_unlock(&c->send_mu);
}

void dh_client_fail(dh_client *c, const char *why)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->send_mu);
    if (c->fd >= 0 && !c->closing) {
        char text[DH__ABORT_TEXT];
        size_t full = why ? strnlen(why, DH__ABORT_TEXT + 1) : 0;
        size_t n = DH_MIN(full, DH__ABORT_TEXT);
        memcpy(text, why ? why : "", n);
        if (full > n) /* cut: said so, not left mid-sentence */
            memcpy(text + n - 4, " ...", 4);
        if (!forked(c)) /* a forked child closes its copy of the socket, silently */
            dh__proto_send(c->fd, DH__MSG_ABORT, text, (uint32_t)n, NULL, 0);
        hang_up(c);
    }
    pthread_mutex_unlock(&c->send_mu);
}

void dh_client_abort(dh_client *c)
{
    dh_client_fail(c, NULL);
}

void dh_client_close(dh_client *c)
{
    if (!c)
        return;
    dh_client_detach(c);
    for (int k = 0; k < c->nleases; k++)
        free(c->leases[k].payload);
    free(c->leases);
    for (int k = 0; k < 2; k++) {
        dh__segv_hint_remove(c->pools[k].base);
        dh__shm_destroy(&c->pools[k]);
    }
    pthread_mutex_destroy(&c->send_mu);
    pthread_mutex_destroy(&c->lease_mu);
    free(c);
}
