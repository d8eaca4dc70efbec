/*
 * carry.c - carrying out rebalancing plans on the real batch buffers
 * (helix, mechanism 4).
 *
 * DESIGN: step s is offered to the scheduler once, before any rank takes a
 * batch of it: as soon as all its batches are prepared (the copies then
 * happen while the ranks compute the step before), or else when the first
 * rank asks for it. The scheduler may move prepared samples between s's
 * batches. Batches a worker is writing into (in-flight tasks) are frozen for
 * that plan. A batch that receives samples is laid out afresh in a buffer
 * from a second ring (the move arena: the main ring's space is the prefetch
 * window's) and every item it keeps or receives is copied there; a batch
 * that only gives is compacted in place (its items keep their order, so
 * each moves down). Receivers are copied before donors are compacted. If
 * the arena has no room the plan is refused and counted, never waited on.
 * On several nodes the plan is agreed at the step exchange (nodes.c), not
 * offered here: this node carries out its part (its batches only; samples
 * arriving are counted in their batch's `incoming` and copied in when they
 * land; samples leaving are handed to the layer, which packs them once the
 * lock is dropped: a batch that only gives then keeps its items where they
 * are, holes included, and is held back while `departing`, and a batch
 * that also receives leaves its old buffer to the layer to free).
 * Everything here runs under e->mu.
 */
#include "engine_int.h"

#include <stdlib.h>
#include <string.h>

static const dh_batch_item *find_item(const batch_slot *b, int64_t sample, int32_t media)
{
    for (int32_t k = 0; b->laid_out && k < b->nitems; k++)
        if (b->items[k].sample == sample && b->items[k].media == media)
            return &b->items[k];
    return NULL;
}

/*
 * Copies (or, in place, moves down) items [first, end) of `to` from where
 * `from` holds them, with their status. In place, items go in the order of their offsets
 * (type by type: slots.c's place_by_type), so none lands on one not yet moved.
 */
static void copy_items(dh_engine *e, batch_slot *to, int32_t first, int32_t end,
                       const batch_slot *from)
{
    uint8_t *dst = dh__slot_data(e, to);
    const uint8_t *src = dh__slot_data(e, from);
    for (int32_t n = 0; dst && src && n < (DH_MEDIA_AUDIO + 1) * (end - first); n++) {
        int32_t k = first + n % (end - first);
        if (to->items[k].type != n / (end - first))
            continue;
        dh_batch_item *it = &to->items[k];
        const dh_batch_item *old = find_item(from, it->sample, it->media);
        if (!old)
            continue; /* not dispatched yet: decoded into the new layout later */
        if (dst + it->offset != src + old->offset) /* a donor's items before its first gap stay */
            memmove(dst + it->offset, src + old->offset, (size_t)it->bytes);
        it->status = old->status;
    }
}

void dh__slot_count_failed(batch_slot *b)
{
    b->nfailed = 0;
    for (int32_t k = 0; k < b->nitems; k++)
        b->nfailed += b->items[k].status && (k == 0 || b->items[k - 1].sample != b->items[k].sample);
}

/* An agreed plan's donor: its items stay where they are (what leaves is read from there
 * later), so the buffer keeps its old span. */
static void keep_in_place(batch_slot *to, const batch_slot *from)
{
    for (int32_t k = 0; k < to->nitems; k++) {
        dh_batch_item *it = &to->items[k];
        const dh_batch_item *old = find_item(from, it->sample, it->media);
        if (old) { /* an open batch holds every sample it keeps */
            it->offset = old->offset;
            it->status = old->status;
        }
    }
    to->bytes = from->bytes;
}

/* Position i of the positions a plan can have moved: P[i], or i (P NULL: the whole step). */
static int64_t at_pos(const int32_t *P, int64_t i)
{
    return P ? P[i] : i;
}

/* New layouts for every batch the plan changes (each holding only positions P[0, np): see
 * dh__eng_carry); receivers get arena buffers. 0 or 1 (no room). */
static int lay_out_fresh(dh_engine *e, const int64_t *order, const int32_t *rank_of,
                         const int32_t *P, int64_t np)
{
    int rc = 0;
    for (int r = 0; r < e->R; r++) /* (a batch's fresh layout is read only if it changes) */
        if (e->changed[r])
            memset(&e->fresh[r], 0, sizeof e->fresh[r]);
    for (int r = 0; r < e->R && !rc; r++) {
        if (!e->changed[r])
            continue;
        int64_t *samples = dh__malloc((size_t)DH_MAX(np, 1) * sizeof *samples);
        int32_t n = 0;
        for (int64_t i = 0; samples && i < np; i++)
            if (rank_of[at_pos(P, i)] == r)
                samples[n++] = order[at_pos(P, i)];
        rc = samples ? dh__lay_out_samples(e, &e->fresh[r], samples, n) : DH_ENOMEM;
        if (!rc && e->received[r]) {
            batch_slot *f = &e->fresh[r];
            int64_t off = dh__ring_try_alloc(&e->arena, f->bytes, &f->block);
            rc = off < 0;
            f->offset = off;
            f->allocated = f->in_arena = off >= 0;
        }
    }
    if (rc) {
        for (int r = 0; r < e->R; r++) { /* (only a changed batch's was cleared) */
            if (!e->changed[r])
                continue;
            if (e->fresh[r].allocated)
                dh__ring_free(&e->arena, e->fresh[r].block);
            dh__slot_clear_layout(&e->fresh[r]);
        }
        memset(e->received, 0, (size_t)e->R);
    }
    return rc ? 1 : 0;
}

/* Receivers first (donors still hold their data): each sample from its old batch. A sample
 * whose old batch is on another node arrives later (agreed plans): counted as incoming. */
static void copy_receivers(dh_engine *e, int64_t st, batch_slot *slots, const int64_t *order,
                           const int32_t *rank_of, const int32_t *P, int64_t np)
{
    for (int r = 0; r < e->R; r++) {
        int32_t item = 0;
        for (int64_t i = 0; e->received[r] && i < np; i++) {
            int64_t k = at_pos(P, i);
            if (rank_of[k] != r)
                continue;
            dh_sample_info si;
            dh_manifest_sample(e->run.m, order[k], &si);
            int from = dh__sched_rank_of(e->sched, st, k);
            if (dh__eng_rank_here(e, from))
                copy_items(e, &e->fresh[r], item, item + si.media_count, &slots[from]);
            else
                e->fresh[r].incoming++;
            item += si.media_count;
        }
    }
}

int dh__eng_carry(dh_engine *e, int64_t st, const int32_t *rank_of, dh__departures depart)
{
    int agreed = depart != NULL;
    double t0 = dh__eng_elapsed(e);
    const int64_t *order = dh__sched_step_order(e->sched, st);
    eng_step *step = dh__eng_step(e, st);
    if (!order || !step)
        return 1;
    batch_slot *slots = step->b;
    /* the positions the plan can have moved: an agreed plan's group's (a replica's plan
     * moves no other sample, and only the batches of its group's ranks change: each holds
     * only these positions), else the whole step. Walking the whole step here and for each
     * changed batch cost an engine O(G) a batch at every exchange. */
    int32_t np = 0;
    const int32_t *P = agreed ? dh__sched_plan_positions(e->sched, st, &np) : NULL;
    if (!P)
        np = (int32_t)e->G;
    memset(e->changed, 0, (size_t)e->R);
    memset(e->received, 0, (size_t)e->R);
    for (int64_t i = 0; i < np; i++) { /* agreed: only this node's batches change here */
        int64_t k = at_pos(P, i);
        int from = dh__sched_rank_of(e->sched, st, k), to = rank_of[k];
        if (from == to)
            continue;
        if (!agreed || dh__eng_rank_here(e, to))
            e->received[to] = e->changed[to] = 1;
        if (!agreed || dh__eng_rank_here(e, from))
            e->changed[from] = 1;
    }
    if (lay_out_fresh(e, order, rank_of, P, np))
        return 1;
    copy_receivers(e, st, slots, order, rank_of, P, np);
    int rc = agreed ? depart(e, st, slots, rank_of) : 0;
    if (rc)
        dh__eng_fail(e, rc); /* the other nodes go on with the plan: this one cannot */
    for (int r = 0; r < e->R; r++) {
        if (!e->changed[r])
            continue;
        batch_slot *b = &slots[r], *f = &e->fresh[r];
        if (!e->received[r]) { /* a donor keeps its buffer: compacted in place, or as it is */
            f->offset = b->offset;
            f->block = b->block;
            f->allocated = b->allocated;
            f->in_arena = b->in_arena;
            f->departing = b->departing;
            if (agreed)
                keep_in_place(f, b);
            else
                copy_items(e, f, 0, f->nitems, b);
        } else if (b->allocated && !b->departing) { /* else the layer frees it once packed */
            dh__ring_free(b->in_arena ? &e->arena : &e->ring, b->block);
        }
        dh__slot_count_failed(f);
        dh__slot_clear_layout(b);
        f->taken = b->taken;
        *b = *f;
    }
    e->move_s = dh__eng_elapsed(e) - t0;
    return 0;
}

/* The scheduler's accept callback on one node. */
static int carry_out(void *ctx, int64_t st, const int32_t *rank_of)
{
    return dh__eng_carry(ctx, st, rank_of, NULL);
}

/*
 * Offers step st to the scheduler's rebalancing, once and only while no
 * rank has taken a batch of it. The trace shows the plan on track (pid, tid):
 * the rank that asked or the worker that completed the step.
 */
void dh__eng_offer_step(dh_engine *e, int64_t st, int pid, int tid)
{
    if (!dh__policy_caps_of(e->run.policy)->rebalance)
        return;
    eng_step *step = dh__eng_step(e, st);
    if (!step || step->reb_offered)
        return;
    /* Several nodes: the step exchange makes the plans. A rank that asks for st before the
     * exchange of st - 1, and will not wait for it (it still holds its batch of st - 1),
     * leaves no plan to agree on: this node then plans st alone, over its own batches, and
     * does not offer st to the agreed plan (the other nodes' view of its batches is left as
     * it was, which no later plan of st reads). Only a rank's request gets here then
     * (dh__eng_offer_prepared_step does not offer on several nodes). */
    if (e->nops->moving(e) && (step->published || e->nops->plan_pending(e, st, tid)))
        return;
    for (int r = 0; r < e->R; r++)
        if (e->next_step[r] > st)
            return; /* taken: too late for this step */
    step->reb_offered = 1;
    const dh__reb_stats *reb = dh__sched_reb_stats(e->sched);
    int64_t moved = reb->moved;
    for (int r = 0; r < e->R; r++) /* another node's batches are not here to move */
        e->frozen[r] = step->b[r].inflight > 0 || !dh__eng_rank_here(e, r);
    double t0 = dh__eng_elapsed(e);
    dh__sched_rebalance(e->sched, st, t0, e->frozen, carry_out, e);
    if (reb->moved == moved)
        return;
    dh__sched_observe_move(e->sched, e->move_s);
    double now = dh__eng_elapsed(e);
    for (int r = 0; r < e->R; r++) { /* a complete receiver is ready once its copy is */
        dh__rec_batch *rb = dh__records_batch(&e->rec, st, r);
        if (e->received[r] && rb && rb->ready > 0)
            rb->ready = DH_MAX(rb->ready, now);
    }
    dh__trace_span(&e->trace, pid, tid, "rebalance", t0, now - t0, st, -1, -1);
}

/* Offers st if all of its batches are prepared (called when one completes); on several
 * nodes the step exchange offers it instead (nodes.c). */
void dh__eng_offer_prepared_step(dh_engine *e, int64_t st, int worker)
{
    if (e->nops->moving(e))
        return;
    for (int r = e->rank_lo; r < e->rank_hi; r++)
        if (!dh__sched_batch_ready(e->sched, st, r))
            return;
    dh__eng_offer_step(e, st, DH_TRACE_WORKERS, worker);
}
