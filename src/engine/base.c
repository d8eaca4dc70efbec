/*
 * base.c - what every room of the engine shares (engine_int.h): the run's
 * clock, the stop path, and the several-node layer's stand-in on one node.
 * A leaf: it calls the rings and, through e->nops, the layer, nothing else
 * of the engine.
 */
#include "engine_int.h"

double dh__eng_elapsed(const dh_engine *e)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - e->t0.tv_sec) + (double)(t.tv_nsec - e->t0.tv_nsec) * 1e-9;
}

double dh__thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Sets the stop flag and wakes every waiter; the rings stop handing out buffers. */
void dh__eng_stop_locked(dh_engine *e)
{
    e->stop = 1;
    __atomic_store_n(&e->io_stop, 1, __ATOMIC_RELEASE);
    dh__prefetch_stop(e->pf); /* lock order: e->mu, then the prefetcher's */
    e->nops->wake(e);
    pthread_cond_broadcast(&e->work);
    pthread_cond_broadcast(&e->ready);
    pthread_cond_broadcast(&e->room);
    dh__ring_close(&e->ring);
    dh__ring_close(&e->arena);
}

void dh__eng_fail(dh_engine *e, int rc)
{
    if (!e->error)
        e->error = rc;
    dh__eng_stop_locked(e);
}

/* ------------------------------------------------------------ one node */

static int one_init(dh_engine *e, dh__sched_config *sc)
{
    (void)e;
    (void)sc;
    return 0;
}

static int one_round(dh_engine *e, char *err, size_t errlen)
{
    (void)e;
    (void)err;
    (void)errlen;
    return 0;
}

static int one_exchanged(dh_engine *e, int64_t st)
{
    (void)e;
    (void)st;
    return 0;
}

/* The run's own question (dh_run_config.should_stop), asked once a step is over. */
static void one_step_closed(dh_engine *e)
{
    if (dh__run_should_stop(&e->run))
        dh__eng_stop_locked(e);
}

static void one_none(dh_engine *e)
{
    (void)e;
}

static const char *one_error(const dh_engine *e)
{
    (void)e;
    return "";
}

static void one_reason(dh_engine *e, const char *why)
{
    (void)e;
    (void)why;
}

static int one_moving(const dh_engine *e)
{
    (void)e;
    return 0;
}

static int one_pending(dh_engine *e, int64_t st, int rank)
{
    (void)e;
    (void)st;
    (void)rank;
    return 0;
}

static int one_held(const dh_engine *e, int64_t st)
{
    (void)e;
    (void)st;
    return 0;
}

static int one_take_back(dh_engine *e, dh__task *t)
{
    (void)e;
    (void)t;
    return 0;
}

static int one_lend_work(dh_engine *e, int w, dh__worker_ctx *x)
{
    (void)e;
    (void)w;
    (void)x;
    return 0;
}

static void one_finish(dh_engine *e, dh__node_totals *t)
{
    (void)e;
    (void)t; /* this node's totals are the job's */
}

static void one_result(const dh_engine *e, const dh__node_totals *t, dh_result *full)
{
    (void)e;
    (void)t;
    (void)full;
}

const dh__node_ops dh__one_node = {
    .init = one_init,
    .hello = one_round,
    .begin = one_round,
    .wait_exchanged = one_exchanged,
    .step_closed = one_step_closed,
    .wake = one_none,
    .error = one_error,
    .earlier = one_error,
    .stopped_by = one_error,
    .own_error = one_reason,
    .refuse = one_reason,
    .moving = one_moving,
    .plan_pending = one_pending,
    .held = one_held,
    .take_back = one_take_back,
    .lend_work = one_lend_work,
    .drain = one_none,
    .finish = one_finish,
    .result = one_result,
    .free = one_none,
};
