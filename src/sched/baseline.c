/*
 * baseline.c - the services of the baselines: the rank-local DataLoader and
 * the FIFO queue of a shared pool.
 *
 * DESIGN
 * - local mirrors PyTorch's DataLoader: rank r owns k = max(1, W/R) workers;
 *   worker j builds batches s = j, j+k, ... whole and in order, sample by
 *   sample, and may start batch s only while s < taken_r + 2k (prefetch
 *   factor 2 per worker: the index queue holds 2k batches past the last one
 *   the trainer took). With W < R every rank still gets one worker, as a
 *   real job would (the CPU budget is then exceeded; see docs/POLICIES.md).
 * - pool (and helix-fifo) serve tasks in admission order: (step, rank),
 *   then the batch's samples in order, like a Ray actor pool fed by a
 *   submission loop.
 */
#include "sched_int.h"

#include <stdlib.h>
#include <string.h>

int dh__local_next(dh__sched *s, int worker, int64_t *pos)
{
    int r = worker / s->k_local;
    int64_t st = s->worker_step[worker];
    for (;;) {
        if (st >= s->N || st >= s->taken[r] + 2 * s->k_local)
            return DH__IDLE;
        int rc = dh__sched_ensure_planned(s, st);
        if (rc)
            return rc;
        batch_rec *b = batch_of(s, st, r);
        if (!b->admitted) {
            b->admitted = 1;
            s->mem_in_use += b->bytes;
            s->mem_peak = DH_MAX(s->mem_peak, s->mem_in_use);
        }
        if (b->nissued < b->ntasks) {
            *pos = s->members[step_slot(s, st) * s->G + b->first + b->nissued++];
            return 0;
        }
        /* This batch is fully issued: the worker moves on to its next one. */
        st = s->worker_step[worker] = st + s->k_local;
    }
}

int dh__fifo_push(pos_fifo *q, int64_t pos)
{
    if (q->head == q->tail)
        q->head = q->tail = 0;
    if (q->cap && (size_t)q->tail == q->cap && (size_t)q->head >= q->cap / 2) { /* reuse the front */
        memmove(q->pos, q->pos + q->head, (size_t)(q->tail - q->head) * sizeof *q->pos);
        q->tail -= q->head;
        q->head = 0;
    }
    if (dh__grow((void **)&q->pos, &q->cap, (size_t)q->tail + 1, sizeof *q->pos))
        return DH_ENOMEM;
    q->pos[q->tail++] = pos;
    return 0;
}

int dh__fifo_next(pos_fifo *q, int64_t *pos)
{
    if (q->head == q->tail)
        return DH__IDLE;
    *pos = q->pos[q->head++];
    return 0;
}
