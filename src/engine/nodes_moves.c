/*
 * nodes_moves.c - rebalancing moves agreed between nodes (docs/MULTINODE.md;
 * the layer's files: nodes_int.h).
 *
 * Rebalancing between nodes. A plan moves prepared samples between the batches of one step,
 * and every node must make the same one: so step ns is planned by every node at the exchange
 * of step ns - 1, from what every record says (its ranks' batches open to the plan, the exact
 * GPU cost of each sample it prepared, its prediction error, move factor and arena room), by
 * the same deterministic code. Nodes of several ranks plan in groups of a few nodes chosen
 * alike from every node's slowest rank (rebalance.c): each node plans its group's moves only,
 * and every node of a group makes the same plan. A batch is open when it is complete, in its buffer and not
 * taken; from then until the plan is made it is not handed to its rank (`agreeing`: emulated
 * ranks wait for the exchange anyway; a trainer asking for it waits one exchange). Each node
 * carries out its part: its receiving batches are laid out afresh in the arena (the plan is
 * refused by its group, alike, if one of them published too little room), samples moving within
 * the node are copied, samples leaving are packed and sent (MOVE) after the lock is dropped,
 * and samples arriving keep their batch from being handed out until they are copied in.
 */
#include "nodes_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Tests: every node publishes at most this much move-arena room (< 0: what it has). */
static _Atomic int64_t test_room = -1;

void dh__eng_test_move_room(int64_t bytes)
{
    test_room = bytes;
}

int dh__nodes_moving(const dh_engine *e)
{
    return e->x->moving;
}

int dh__nodes_plan_pending(dh_engine *e, int64_t st, int rank)
{
    struct dh__xchg *x = e->x;
    if (!x->moving || st < 1 || x->exchanged >= st || x->done || e->stop || x->cutting)
        return 0; /* no plan is made after a stop (nodes_step.c: agree_cutoff) */
    eng_step *prev = st - 1 >= e->lo ? dh__eng_step(e, st - 1) : NULL;
    return !prev || prev->b[rank].released_at > 0;
}

/* Step ns into this node's STEP record: its batches open to the plan (marked agreeing) and
 * the costs of the samples it prepared. Under e->mu. */
void dh__nodes_offer(dh_engine *e, xrec *m, int64_t ns)
{
    struct dh__xchg *x = e->x;
    uint8_t *open = rec_open(x, m);
    float *cost = rec_cost(x, m);
    if (ns >= e->N || dh__sched_rank_of(e->sched, ns, 0) < 0)
        return; /* mv 0: no plan for ns (the run's end, or the scheduler failed) */
    eng_step *s = dh__eng_step(e, ns);
    if (!s || s->reb_offered)
        return; /* planned here alone already (a rank took its batch before this exchange) */
    s->published = 1;
    m->mv = 1;
    m->mv_mape = dh__calib_gpu_mape(dh__sched_calib(e->sched));
    m->mv_factor = dh__sched_reb_stats(e->sched)->move_factor;
    m->mv_net = dh__sched_reb_stats(e->sched)->net_factor;
    dh__ring_room(&e->arena, &m->mv_room, &m->mv_ids);
    if (test_room >= 0)
        m->mv_room = DH_MIN(m->mv_room, test_room);
    for (int i = 0; i < rpn(e); i++) {
        int r = e->rank_lo + i;
        batch_slot *b = &s->b[r];
        open[i] = b->laid_out && b->allocated && !b->inflight &&
                  !b->incoming && e->next_step[r] <= ns && dh__sched_batch_ready(e->sched, ns, r);
        b->agreeing = open[i];
    }
    /* this node's samples of ns, in the step's order, as far as ncost: its positions of the
     * deal (a walk of the whole step without one), and its load over them */
    int32_t mine = 0;
    const int32_t *pos = dh__sched_node_positions(e->sched, ns, e->node, &mine);
    int64_t n = 0;
    for (int32_t i = 0; pos && i < mine && n < x->ncost; i++)
        cost[n++] = (float)dh__sched_prepared_cost(e->sched, ns, pos[i]);
    for (int64_t k = 0; !pos && k < e->G && n < x->ncost; k++)
        if (dh__eng_rank_here(e, dh__sched_rank_of(e->sched, ns, k)))
            cost[n++] = (float)dh__sched_prepared_cost(e->sched, ns, k);
    for (; n < x->ncost; n++)
        cost[n] = -1;
    m->mv_load = dh__sched_node_load(e->sched, ns, e->node, cost, x->ncost);
}

/* Node k's exact costs of step ns, as its record carried them (dh__reb_agreed.costs_of). */
static const float *costs_in_record(const void *ctx, int node)
{
    const struct dh__xchg *x = ctx;
    return rec_cost(x, rec_of(x, node));
}

/* Sample k of step st leaves this node's batch `from` (rank r) for node `to`: noted with its
 * items' layout, packed once the lock is dropped (dh__nodes_send_moves). 0 or DH_ENOMEM. */
static int move_out(dh_engine *e, int64_t st, int64_t k, int to, int r, batch_slot *from)
{
    struct dh__xchg *x = e->x;
    const int64_t *order = dh__sched_step_order(e->sched, st);
    int32_t n, first = dh__slot_items_of(from->items, from->nitems, order[k], &n);
    departure d = {to, r, st, k, order[k], n, dh__malloc((size_t)DH_MAX(n, 1) * sizeof *d.items),
                   dh__slot_data(e, from), !e->received[r], NULL, -1};
    if (!d.items || !d.base || dh__nodes_push((void **)&x->out, &x->nout, &x->capout, sizeof d, &d))
        return free(d.items), DH_ENOMEM;
    memcpy(d.items, from->items + first, (size_t)n * sizeof *d.items);
    from->departing++;
    return 0;
}

/* dh__departures for an agreed plan: the samples leaving this node. A batch that also
 * receives gets a new buffer: its old one is freed after its last departure is packed. */
static int departures(dh_engine *e, int64_t st, batch_slot *slots, const int32_t *rank_of)
{
    struct dh__xchg *x = e->x;
    int per = e->rank_hi - e->rank_lo, start = x->nout;
    int32_t np = 0; /* the plan's group's positions: no other sample moves (dh__eng_carry,
                     * whose list this call refills alike) */
    const int32_t *P = dh__sched_plan_positions(e->sched, st, &np);
    for (int64_t i = 0; i < (P ? np : e->G); i++) {
        int64_t k = P ? P[i] : i;
        int from = dh__sched_rank_of(e->sched, st, k);
        if (dh__eng_rank_here(e, from) && !dh__eng_rank_here(e, rank_of[k])) {
            int rc = move_out(e, st, k, rank_of[k] / per, from, &slots[from]);
            if (rc)
                return rc;
        }
    }
    for (int i = start; i < x->nout; i++) {
        departure *d = &x->out[i];
        int later = 0; /* another departure from the same batch comes after this one */
        for (int j = i + 1; j < x->nout && !later; j++)
            later = x->out[j].from == d->from;
        const batch_slot *b = &slots[d->from];
        if (!d->held && !later && b->allocated) {
            d->ring = b->in_arena ? &e->arena : &e->ring;
            d->block = b->block;
        }
    }
    return 0;
}

/* What a batch that gets samples under an agreed plan needs of its node's move arena
 * (dh__sched_receivers' callback): its laid-out bytes and one buffer. 0 or DH_ENOMEM. */
static int receiver_room(void *ctx, int r, const int64_t *samples, int32_t n)
{
    dh_engine *e = ctx;
    struct dh__xchg *x = e->x;
    batch_slot probe = {.block = -1};
    int64_t *mine = dh__malloc((size_t)DH_MAX(n, 1) * sizeof *mine);
    int rc = mine ? 0 : DH_ENOMEM;
    if (mine) {
        memcpy(mine, samples, (size_t)n * sizeof *mine);
        rc = dh__lay_out_samples(e, &probe, mine, n); /* the same layout on every node */
    }
    x->mv_need[r / rpn(e)] += dh__ring_aligned(probe.bytes);
    x->mv_n[r / rpn(e)]++;
    dh__slot_clear_layout(&probe);
    return rc;
}

/* The scheduler's accept callback for an agreed plan (its group's, rebalance.c): every node
 * of the group decides alike whether every node's receiving batches fit the arena room it
 * published; then this node carries out its part. 0: carried out; 1: refused (by every node
 * of the group). */
static int carry_agreed(void *ctx, int64_t st, const int32_t *rank_of)
{
    dh_engine *e = ctx;
    struct dh__xchg *x = e->x;
    const int64_t *order = dh__sched_step_order(e->sched, st);
    if (!order)
        return 1; /* not on any node: every replica plans the same steps */
    memset(x->mv_need, 0, (size_t)e->nodes * 2 * sizeof *x->mv_need);
    /* Every batch that gets a sample, laid out as every node lays it out: the scheduler gives
     * each with its samples in the step's order, from the group's positions alone (a walk
     * of the whole step before; a scan per rank, O(G R), took a third of a second a step at
     * 1,024 nodes of 8 ranks). */
    int rc = dh__sched_receivers(e->sched, st, rank_of, receiver_room, e);
    if (rc) {
        if (!e->stop)
            dh__eng_fail(e, rc);
        return 1;
    }
    for (int k = 0; k < e->nodes; k++) {
        const xrec *o = rec_of(x, k);
        if (x->mv_need[k] > o->mv_room || x->mv_n[k] > o->mv_ids)
            return 1; /* node k has no room to receive: no node moves anything */
    }
    eng_step *s = dh__eng_step(e, st);
    memset(e->changed, 0, (size_t)e->R);
    double t0 = dh__eng_elapsed(e);
    rc = !s || dh__eng_carry(e, st, rank_of, departures);
    x->carry_s += dh__eng_elapsed(e) - t0;
    if (rc) {
        /* the room was published: only a failure gets here; the others go on without us */
        if (!x->err[0])
            dh__msg(x->err, sizeof x->err, "node %d could not carry out the plan agreed for "
                    "step %lld (no room in its move arena)", e->node, (long long)st);
        dh__eng_fail(e, DH_ENOMEM);
        return 0;
    }
    int part = 0; /* does the plan change a batch of this node? */
    for (int r = e->rank_lo; r < e->rank_hi; r++)
        part |= e->changed[r];
    s->incoming = 0;
    for (int r = e->rank_lo; r < e->rank_hi; r++)
        s->incoming += s->b[r].incoming;
    if (part)
        s->moves_at = dh__eng_elapsed(e);
    return 0;
}

/* After step ns - 1's round: every node makes the plan of step ns alike. Under e->mu. */
void dh__nodes_agree(dh_engine *e, int64_t ns)
{
    struct dh__xchg *x = e->x;
    eng_step *s = ns < e->N ? dh__eng_step(e, ns) : NULL;
    int all = s != NULL;
    for (int k = 0; all && k < e->nodes; k++)
        all = rec_of(x, k)->mv;
    /* Each node's costs are of its samples in the step's order: the same on every replica,
     * since no plan of ns was made anywhere yet. A sample prepared here after the record
     * went out stays unknown, as it is for the others. The plan reads the costs of the
     * nodes it plans with, and every node's load as the node said it. */
    dh__reb_agreed a = {.frozen = x->mv_frozen, .count = e->node == 0,
                        .costs_of = costs_in_record, .costs_ctx = x, .ncost = x->ncost,
                        .node_load = x->mv_load};
    for (int k = 0; all && k < e->nodes; k++) {
        xrec *o = rec_of(x, k);
        const uint8_t *open = rec_open(x, o);
        for (int i = 0; i < rpn(e); i++)
            x->mv_frozen[k * rpn(e) + i] = !open[i];
        a.gpu_mape = DH_MAX(a.gpu_mape, o->mv_mape);
        a.move_factor = DH_MAX(a.move_factor, o->mv_factor);
        a.net_factor = DH_MAX(a.net_factor, o->mv_net);
        x->mv_load[k] = o->mv_load;
        if (o->mv_load < 0) /* not dealt to nodes: the plan reads every cost */
            a.node_load = NULL;
    }
    if (all) {
        double moved_before = s->moves_at;
        dh__sched_rebalance_agreed(e->sched, ns, &a, carry_agreed, e);
        double now = dh__eng_elapsed(e);
        if (s->moves_at != moved_before) { /* this node took part in a plan */
            for (int r = e->rank_lo; r < e->rank_hi; r++) {
                dh__rec_batch *rb = dh__records_batch(&e->rec, ns, r);
                if (s->b[r].in_arena && !s->b[r].incoming && rb && rb->ready > 0)
                    rb->ready = DH_MAX(rb->ready, now); /* complete once its copies are */
            }
        }
    }
    for (int r = e->rank_lo; s && r < e->rank_hi; r++)
        s->b[r].agreeing = 0;
}

/* Packs departure d into a MOVE message (its bytes read where its old batch holds them);
 * NULL when out of memory. Without e->mu: nothing else touches those bytes meanwhile. */
static uint8_t *pack(dh_engine *e, const departure *d, size_t *len)
{
    size_t head = dh__wire_move_header(d->nitems), payload = 0;
    for (int32_t j = 0; j < d->nitems; j++)
        payload += (size_t)dh__ring_aligned(d->items[j].bytes);
    uint8_t *msg = dh__malloc(head + payload);
    if (!msg)
        return NULL;
    m_move h = {M_MOVE, e->node, d->nitems, 0, d->st, d->k, d->sample, (int64_t)payload};
    memcpy(msg, &h, sizeof h);
    int32_t *status = (int32_t *)(msg + sizeof h);
    uint8_t *dst = msg + head;
    for (int32_t j = 0; j < d->nitems; j++) {
        const dh_batch_item *it = &d->items[j];
        status[j] = it->status;
        memcpy(dst, d->base + it->offset, (size_t)it->bytes);
        dst += dh__ring_aligned(it->bytes);
    }
    *len = head + payload;
    return msg;
}

/* A departure was packed (or the run gave up on it): its batch is released from it. Under
 * e->mu. */
static void settle(dh_engine *e, const departure *d, double now)
{
    if (d->ring)
        dh__ring_free(d->ring, d->block);
    eng_step *s = d->held && d->st >= e->lo ? dh__eng_step(e, d->st) : NULL;
    if (s && s->b[d->from].departing > 0 && --s->b[d->from].departing == 0) {
        dh__rec_batch *rb = dh__records_batch(&e->rec, d->st, d->from);
        if (rb && rb->ready > 0)
            rb->ready = DH_MAX(rb->ready, now); /* held back until now */
        pthread_cond_broadcast(&e->ready);
    }
    free(d->items);
}

/* Packs and sends what the last plan moved away. Without e->mu (the exchange thread's). */
int dh__nodes_send_moves(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    pthread_mutex_lock(&e->mu);
    departure *out = x->out;
    int n = x->nout;
    x->out = NULL;
    x->nout = x->capout = 0;
    pthread_mutex_unlock(&e->mu);
    double t0 = dh__eng_elapsed(e);
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        size_t len = 0;
        uint8_t *msg = pack(e, &out[k], &len);
        int src = msg ? e->run.cfg.send(e->run.cfg.exchange_user, out[k].node, msg, len)
                      : DH_ENOMEM;
        free(msg);
        if (src) {
            rc = src;
            pthread_mutex_lock(&e->mu);
            if (!x->err[0])
                dh__msg(x->err, sizeof x->err, "cannot send moved samples to node %d: %s",
                        out[k].node, dh_strerror(src));
            pthread_mutex_unlock(&e->mu);
        }
    }
    pthread_mutex_lock(&e->mu);
    double now = dh__eng_elapsed(e);
    x->carry_s += now - t0; /* the data plane's: packing is copying */
    for (int k = 0; k < n; k++)
        settle(e, &out[k], now);
    pthread_mutex_unlock(&e->mu);
    free(out);
    return rc;
}

/* A moved sample arrived: its items go into its new batch, which is handed out once nothing
 * else is on the wire for it. Under e->mu, which it drops while it copies. */
static void apply_move(dh_engine *e, const uint8_t *data, size_t len)
{
    m_move h;
    memcpy(&h, data, sizeof h);
    eng_step *s = h.step >= e->lo ? dh__eng_step(e, h.step) : NULL;
    int r = s && h.k >= 0 && h.k < e->G ? dh__sched_rank_of(e->sched, h.step, h.k) : -1;
    batch_slot *b = r >= 0 && dh__eng_rank_here(e, r) ? &s->b[r] : NULL;
    size_t head = dh__wire_move_header(h.nitems);
    if (!b || !b->incoming || h.nitems < 0 || len < head || (size_t)h.payload > len - head) {
        dh__nodes_refuse(e, "node %d sent a sample this node does not expect (step %lld, "
                     "position %lld)", h.node, (long long)h.step, (long long)h.k);
        return;
    }
    const int32_t *status = (const int32_t *)(data + sizeof h);
    /* Its batch is held back while a sample is on the wire for it (incoming): its step, layout
     * and buffer stay put, so the bytes are copied without the engine's lock. */
    uint8_t *base = dh__slot_data(e, b);
    dh_batch_item *items = b->items;
    int32_t nitems = b->nitems, j = 0;
    pthread_mutex_unlock(&e->mu);
    size_t off = 0;
    for (int32_t i = 0; base && i < nitems; i++) {
        const dh_batch_item *it = &items[i];
        if (it->sample != h.sample)
            continue;
        if (j >= h.nitems || off + (size_t)it->bytes > (size_t)h.payload)
            break;
        memcpy(base + it->offset, data + head + off, (size_t)it->bytes);
        j++;
        off += (size_t)dh__ring_aligned(it->bytes);
    }
    pthread_mutex_lock(&e->mu);
    for (int32_t i = 0, k = 0; k < j && i < nitems; i++)
        if (items[i].sample == h.sample)
            items[i].status = status[k++];
    if (j != h.nitems) { /* layouts are the same on every node: this is a broken message */
        dh__nodes_refuse(e, "a sample moved from node %d arrived incomplete (step %lld, sample "
                     "%lld)", h.node, (long long)h.step, (long long)h.sample);
        return;
    }
    dh__slot_count_failed(b);
    double now = dh__eng_elapsed(e);
    if (--b->incoming == 0) {
        dh__rec_batch *rb = dh__records_batch(&e->rec, h.step, r);
        if (rb && rb->ready > 0)
            rb->ready = DH_MAX(rb->ready, now);
        pthread_cond_broadcast(&e->ready);
    }
    s->incoming--;
    /* what the receiver waited from its plan to this sample: the wire, and the other node's
     * lag to make the same plan */
    dh__sched_observe_wire(e->sched, h.payload, now - s->moves_at);
}

/* Message thread: a MOVE. Applied at once, or parked until this node made the plan (1: the
 * message is kept). */
int dh__nodes_on_move(dh_engine *e, int from, void *data, size_t len)
{
    struct dh__xchg *x = e->x;
    int kept = 0;
    pthread_mutex_lock(&e->mu);
    m_move h;
    memcpy(&h, data, sizeof h);
    if (e->stop) {
        /* the run is over here: nothing waits for it */
    } else if (x->exchanged < h.step) {
        move_msg mm = {from, data, len};
        if (dh__nodes_push((void **)&x->parked, &x->nparked, &x->capparked, sizeof mm, &mm))
            dh__eng_fail(e, DH_ENOMEM);
        else
            kept = 1;
    } else {
        apply_move(e, data, len);
    }
    pthread_mutex_unlock(&e->mu);
    return kept;
}

void dh__nodes_apply_parked(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    move_msg *ready = NULL; /* taken out first: applying drops the lock, others may park */
    int n = 0, cap = 0, k = 0;
    while (k < x->nparked) {
        m_move h;
        memcpy(&h, x->parked[k].data, sizeof h);
        if (x->exchanged < h.step) {
            k++;
            continue;
        }
        if (dh__nodes_push((void **)&ready, &n, &cap, sizeof *ready, &x->parked[k])) {
            dh__eng_fail(e, DH_ENOMEM);
            break;
        }
        x->parked[k] = x->parked[--x->nparked];
    }
    for (int i = 0; i < n; i++) {
        if (!e->stop)
            apply_move(e, ready[i].data, ready[i].len);
        free(ready[i].data);
    }
    free(ready);
}
