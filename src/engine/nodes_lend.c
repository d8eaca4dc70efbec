/*
 * nodes_lend.c - lending between nodes (docs/MULTINODE.md; the layer's
 * files: nodes_int.h). A node whose queue is empty asks the node reported
 * latest for a task (STEAL); the owner pops its least-slack task if its
 * backlog is late and answers with the sample's item sizes (TASK) or
 * NOTASK; the lender decodes into its own memory and ships the items back
 * (RESULT), which the owner copies into the batch and completes as its own
 * worker would. Every message was checked whole (nodes_wire.c) before it
 * gets here.
 */
#include "nodes_int.h"

#include "../codec/decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Tests: lend whenever a worker is idle and the other node has queued work, late or not, so
 * that the whole path (parts, hand-backs, results) runs on every test run, not by timing. */
static _Atomic int lend_always;

void dh__eng_test_lend_always(int on)
{
    lend_always = on;
}

static void send_head(dh_engine *e, int to, int kind)
{
    m_head h = {kind, e->node};
    e->run.cfg.send(e->run.cfg.exchange_user, to, &h, sizeof h);
}

int dh__nodes_take_back(dh_engine *e, dh__task *t)
{
    struct dh__xchg *x = e->x;
    if (!x->nback)
        return 0;
    *t = x->back[--x->nback];
    return 1;
}

/* Another node's task to prepare here (free it with free()), or NULL (and a STEAL goes out if
 * a node is worth asking). Under e->mu. */
static dh__lend_msg *lend_remote(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    if (!x->lending)
        return NULL;
    if (x->rq_n) {
        dh__lend_msg *m = x->rq[x->rq_head];
        x->rq_head = (x->rq_head + 1) % x->rq_cap;
        x->rq_n--;
        return m;
    }
    if (x->asking >= 0 || e->stop)
        return NULL;
    int best = -1; /* the node reported latest, not yet asked in vain this round */
    for (int k = 0; k < e->nodes; k++)
        if (k != e->node && (lend_always || (!x->skip[k] && x->late[k] > 0)) &&
            (best < 0 || x->late[k] > x->late[best]))
            best = k;
    if (best < 0)
        return NULL;
    double late = lend_always ? DH_MAX(x->late[best], 1.0) : x->late[best];
    if (!dh__sched_lend_gate(e->sched, late, DH_MAX(x->late_bytes[best], 1))) {
        x->skip[best] = 1; /* not worth shipping: until the next round says otherwise */
        return NULL;
    }
    x->asking = best;
    send_head(e, best, M_STEAL);
    return NULL;
}

/* Ships a prepared (or failed) task back to its owner: msg holds the payload after its
 * header (NULL: no payload). Without e->mu. */
static void ship_result(dh_engine *e, const dh__lend_msg *m, uint8_t *msg, int64_t payload,
                        int status, double cpu, const char *path, const char *err)
{
    m_result r = {M_RESULT, e->node, m->part, status, m->pos, payload, cpu, dh__eng_elapsed(e),
                  "", ""};
    snprintf(r.path, sizeof r.path, "%s", path);
    snprintf(r.err, sizeof r.err, "%s", err);
    if (msg) {
        memcpy(msg, &r, sizeof r);
        e->run.cfg.send(e->run.cfg.exchange_user, m->node, msg,
                        dh__wire_result_header() + (size_t)payload);
    } else {
        e->run.cfg.send(e->run.cfg.exchange_user, m->node, &r, sizeof r);
    }
}

/* Prepares another node's task (lending) into this node's memory and ships it back. */
static void run_remote(dh_engine *e, int w, dh__lend_msg *m, dh__worker_ctx *x)
{
    dh__task t = {.pos = m->pos, .sample = m->sample, .step = m->step, .rank = m->rank,
                  .worker = w, .part = m->part, .nparts = m->nparts, .pred_cost = m->pred_cost};
    dh_batch_item *items = dh__calloc((size_t)DH_MAX(1, m->nitems), sizeof *items);
    size_t head = dh__wire_result_header(), total = 0;
    for (int32_t j = 0; items && j < m->nitems; j++) {
        items[j] = (dh_batch_item){.sample = t.sample, .media = j, .offset = (int64_t)total,
                                   .bytes = m->item_bytes[j]};
        total += dh__align_up((size_t)m->item_bytes[j], ITEM_ALIGN);
    }
    uint8_t *msg = NULL;
    if (items && posix_memalign((void **)&msg, ITEM_ALIGN, head + total))
        msg = NULL;
    pthread_mutex_unlock(&e->mu);
    double c0 = dh__thread_cpu(), started = dh__eng_elapsed(e);
    x->err[0] = 0;
    x->path[0] = 0;
    int rc = msg ? dh__eng_run_task(e, &t, items, m->nitems, msg + head, x) : DH_ENOMEM;
    double cpu = dh__thread_cpu() - c0;
    if (msg)
        ship_result(e, m, msg, rc ? 0 : (int64_t)total, rc, cpu, x->path,
                    x->err[0] ? x->err : dh_strerror(rc));
    else
        ship_result(e, m, NULL, 0, DH_ENOMEM, cpu, "", "out of memory");
    free(msg);
    free(items);
    free(m);
    pthread_mutex_lock(&e->mu);
    e->cpu_sum += cpu; /* the CPU was spent here; the owner counts the sample */
    dh__records_cpu(&e->rec, t.step, cpu);
    dh__trace_span(&e->trace, DH_TRACE_WORKERS, w, "prepare (lent)", started,
                   dh__eng_elapsed(e) - started, t.step, t.rank, t.sample);
}


int dh__nodes_lend_work(dh_engine *e, int w, dh__worker_ctx *x)
{
    dh__lend_msg *m = lend_remote(e);
    if (!m)
        return 0;
    run_remote(e, w, m, x);
    return 1;
}

/* Owner: a lender asks. Pops this node's least-slack task if its backlog is late, gives it a
 * buffer without waiting (a full pool keeps it here), and answers TASK or NOTASK. */
void dh__nodes_on_steal(dh_engine *e, int from)
{
    struct dh__xchg *x = e->x;
    dh__lend_msg *m = NULL;
    size_t len = 0;
    pthread_mutex_lock(&e->mu);
    dh__task t;
    int rc = e->stop ? DH__IDLE
                     : dh__sched_lend_task(e->sched, dh__eng_elapsed(e), lend_always, &t);
    batch_slot *b = rc ? NULL : dh__eng_slot(e, t.step, t.rank);
    if (rc < 0)
        dh__eng_fail(e, rc);
    if (b) {
        int ok = b->laid_out || !dh__lay_out(e, t.step, t.rank, b);
        if (ok && !b->allocated && !b->allocating) {
            int64_t off = dh__ring_try_alloc(&e->ring, b->bytes, &b->block);
            if (off >= 0)
                b->offset = off, b->allocated = 1;
        }
        int32_t n = 0, first = ok ? dh__slot_items_of(b->items, b->nitems, t.sample, &n) : 0;
        ok = ok && b->allocated && n > 0;
        len = sizeof *m + (size_t)n * sizeof(int64_t);
        if (ok && (m = dh__calloc(1, len))) {
            *m = (dh__lend_msg){M_TASK, e->node, t.rank, t.part, t.nparts, n, t.pos, t.step,
                                t.sample, t.pred_cost};
            for (int32_t j = 0; j < n; j++)
                m->item_bytes[j] = b->items[first + j].bytes;
            lent_task lt = {t, dh__eng_elapsed(e), from};
            if (dh__nodes_push((void **)&x->lent, &x->nlent, &x->caplent, sizeof lt, &lt)) {
                free(m);
                m = NULL;
            }
        }
        if (m) {
            b->inflight++; /* frozen for rebalancing until the result is in */
        } else if (dh__nodes_push((void **)&x->back, &x->nback, &x->capback, sizeof t, &t)) {
            dh__eng_fail(e, DH_ENOMEM);
        } else {
            pthread_cond_broadcast(&e->work); /* kept here: this node's workers take it */
        }
    }
    pthread_mutex_unlock(&e->mu);
    if (m)
        e->run.cfg.send(e->run.cfg.exchange_user, from, m, len);
    else
        send_head(e, from, M_NOTASK);
    free(m);
}

/* The bytes of item `it` that part t->part of a split sample wrote: its share of a video's
 * frames; every other item belongs to part 0. */
static int part_bytes(dh_engine *e, const dh__task *t, const dh_batch_item *it, int64_t *from,
                      int64_t *n)
{
    dh_media_info mi;
    dh_media_draw dr;
    dh_manifest_media(e->run.m, t->sample, it->media, &mi);
    int rc = mi.type == DH_MEDIA_VIDEO ? dh__run_draw(&e->run, t->step, t->sample, it->media, &dr)
                                       : 0;
    if (rc)
        return rc;
    if (mi.type == DH_MEDIA_VIDEO)
        return dh__video_part_bytes(e->spec, &mi, &dr, t->part, t->nparts, from, n);
    *from = 0;
    *n = t->part == 0 ? it->bytes : 0;
    return 0;
}

/* Owner: a lent task came back. Its items go into the batch; it completes as a worker's. */
void dh__nodes_on_result(dh_engine *e, int from, const uint8_t *data, size_t len)
{
    struct dh__xchg *x = e->x;
    m_result r;
    memcpy(&r, data, sizeof r);
    r.path[sizeof r.path - 1] = r.err[sizeof r.err - 1] = 0;
    pthread_mutex_lock(&e->mu);
    int k = 0;
    while (k < x->nlent && !(x->lent[k].t.pos == r.pos && x->lent[k].t.part == r.part &&
                             x->lent[k].to == from))
        k++;
    batch_slot *b = k < x->nlent ? dh__eng_slot(e, x->lent[k].t.step, x->lent[k].t.rank) : NULL;
    if (!b || e->stop) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    lent_task lt = x->lent[k];
    x->lent[k] = x->lent[--x->nlent];
    /* The slot is frozen (inflight) since the loan: its layout and buffer stay put, so the
     * bytes are copied without the engine's lock, as a worker decodes without it. */
    uint8_t *base = dh__slot_data(e, b);
    const dh_batch_item *items = b->items;
    int32_t nitems = b->nitems;
    pthread_mutex_unlock(&e->mu);
    const uint8_t *src = data + dh__wire_result_header();
    size_t off = 0;
    int rc = r.status;
    for (int32_t j = 0; !rc && base && j < nitems; j++) {
        const dh_batch_item *it = &items[j];
        if (it->sample != lt.t.sample)
            continue;
        if (dh__wire_result_header() + off + (size_t)it->bytes > len) {
            rc = DH_EPARSE; /* a short result: the sample fails, named, never half-copied */
            break;
        }
        int64_t at = 0, n = it->bytes; /* a split sample's part: only what it wrote */
        if (lt.t.nparts > 1)
            rc = part_bytes(e, &lt.t, it, &at, &n);
        if (!rc && n > 0)
            memcpy(base + it->offset + at, src + off + (size_t)at, (size_t)n);
        off += dh__align_up((size_t)it->bytes, ITEM_ALIGN);
    }
    pthread_mutex_lock(&e->mu);
    dh__eng_finish_task(e, -1, &lt.t, b, base, rc, lt.sent, rc ? -1.0 : r.cpu, r.path,
                        rc == r.status ? r.err : "the prepared sample arrived incomplete", 1);
    dh__sched_count_lent(e->sched, r.payload);
    if (!rc) /* the wire, as the shared clock tells it (its start agreed to a latency) */
        dh__sched_observe_wire(e->sched, r.payload, dh__eng_elapsed(e) - r.sent);
    pthread_mutex_unlock(&e->mu);
}


/* A TASK for this node's workers, queued in arrival order. */
void dh__nodes_on_task(dh_engine *e, dh__lend_msg *m)
{
    struct dh__xchg *x = e->x;
    pthread_mutex_lock(&e->mu);
    if (x->rq_n == x->rq_cap) { /* grow the FIFO, keeping its order */
        int nc = x->rq_cap ? 2 * x->rq_cap : 8;
        dh__lend_msg **q = dh__calloc((size_t)nc, sizeof *q);
        for (int i = 0; q && i < x->rq_n; i++)
            q[i] = x->rq[(x->rq_head + i) % x->rq_cap];
        if (q) {
            free(x->rq);
            x->rq = q;
            x->rq_head = 0;
            x->rq_cap = nc;
        }
    }
    if (x->rq_n < x->rq_cap) {
        x->rq[(x->rq_head + x->rq_n++) % x->rq_cap] = m;
    } else {
        free(m);
        dh__eng_fail(e, DH_ENOMEM);
    }
    x->asking = -1;
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
}

/* NOTASK: the node asked has nothing worth lending until its next round. */
void dh__nodes_on_notask(dh_engine *e, int from)
{
    struct dh__xchg *x = e->x;
    pthread_mutex_lock(&e->mu);
    x->asking = -1;
    x->skip[from] = 1;
    pthread_cond_broadcast(&e->work);
    pthread_mutex_unlock(&e->mu);
}
