/*
 * ranks.c - emulated ranks for the real engine: R threads that each take
 * their batch, "compute" for its ground-truth GPU time (sleeping, as an
 * accelerator would, using no CPU), meet at a barrier and pay the fixed
 * per-step cost c0, like the ranks of a synchronous data-parallel job.
 *
 * DESIGN: the barrier is our own (mutex + condition variable) rather than
 * pthread_barrier_t, because it must break: a rank that cannot go on (the
 * run stopped or failed, or a thread could not start) breaks it, and every
 * rank waiting there returns at once instead of waiting forever.
 */
#include "engine_int.h"

#include <stdlib.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, waiting, broken;
    int64_t generation;
    int live;              /* rank threads not yet ended */
    pthread_cond_t ended;  /* one ended */
} rank_barrier;

/* 1 for the last rank to arrive (it reports progress), 0 for the others, -1 if broken. */
static int barrier_wait(rank_barrier *b)
{
    pthread_mutex_lock(&b->mu);
    int rc = 0;
    if (b->broken) {
        rc = -1;
    } else if (++b->waiting == b->n) {
        b->waiting = 0;
        b->generation++;
        pthread_cond_broadcast(&b->cv);
        rc = 1;
    } else {
        int64_t gen = b->generation;
        while (gen == b->generation && !b->broken)
            pthread_cond_wait(&b->cv, &b->mu);
        rc = gen == b->generation ? -1 : 0;
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

static void barrier_break(rank_barrier *b)
{
    pthread_mutex_lock(&b->mu);
    b->broken = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void sleep_for(double s)
{
    if (!(s > 0) || s > 1e6) /* NaN, negative or absurd: never a sleep */
        return;
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0)
        ;
}

typedef struct {
    dh_engine *e;
    int rank;
    rank_barrier *barrier;
    int rc;
} rank_arg;

/* Requests each batch, "computes" for its true GPU time, meets the others, pays c0. */
static void *rank_main(void *p)
{
    rank_arg *a = p;
    dh_engine *e = a->e;
    for (int64_t st = 0; st < e->N; st++) {
        dh_batch b;
        int rc = dh_engine_next_batch(e, a->rank, &b);
        if (rc) {
            a->rc = rc == DH_EEMPTY ? 0 : rc;
            break;
        }
        double gpu = dh_engine_batch_gpu_seconds(e, &b);
        sleep_for(gpu);
        dh_engine_release(e, &b, gpu);
        int last = barrier_wait(a->barrier);
        if (last < 0 || e->nops->wait_exchanged(e, st)) /* several nodes: every node's ranks */
            break;
        if (last && e->run.cfg.progress)
            e->run.cfg.progress(st + 1, e->run.cfg.steps > 0 ? e->N : -1,
                                e->run.cfg.progress_user);
        sleep_for(e->run.gpu.c0);
    }
    barrier_break(a->barrier); /* whoever leaves first lets the others go */
    pthread_mutex_lock(&a->barrier->mu);
    a->barrier->live--;
    pthread_cond_broadcast(&a->barrier->ended);
    pthread_mutex_unlock(&a->barrier->mu);
    pthread_mutex_lock(&e->mu);
    if (e->rec.makespan < dh__eng_elapsed(e))
        e->rec.makespan = dh__eng_elapsed(e);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/*
 * Until every rank thread ended, the calling thread asks should_stop every 0.2 s (one node:
 * several agree on stopping at their step exchange): a step that does not end (a store
 * that is down, each sample retried until its limit) must not hold a Ctrl-C for minutes.
 * It asks under e->mu, as a closing step does, so should_stop is never called twice at
 * once. The run then stops as dh_engine_stop does: the accounting is of the completed steps.
 */
static void watch_ranks(dh_engine *e, rank_barrier *b)
{
    int stopped = e->nodes > 1;
    pthread_mutex_lock(&b->mu);
    while (b->live > 0) {
        dh__cond_wait_s(&b->ended, &b->mu, 0.2);
        if (b->live > 0 && !stopped) {
            pthread_mutex_unlock(&b->mu);
            pthread_mutex_lock(&e->mu);
            if ((stopped = e->stop || dh__run_should_stop(&e->run)))
                dh__eng_stop_locked(e);
            pthread_mutex_unlock(&e->mu);
            pthread_mutex_lock(&b->mu);
        }
    }
    pthread_mutex_unlock(&b->mu);
}

/* Starts and joins this node's rank threads; 0, or the first rank's error. */
static int run_ranks(dh_engine *e, char *err, size_t errlen)
{
    int n = e->rank_hi - e->rank_lo;
    rank_barrier barrier = {.n = n, .live = n};
    pthread_mutex_init(&barrier.mu, NULL);
    pthread_cond_init(&barrier.cv, NULL);
    pthread_cond_init(&barrier.ended, NULL);
    rank_arg *args = dh__calloc((size_t)n, sizeof *args);
    pthread_t *tids = dh__calloc((size_t)n, sizeof *tids);
    int started = 0, rc = 0;
    for (int r = 0; args && tids && r < n; r++, started++) {
        args[r] = (rank_arg){e, e->rank_lo + r, &barrier, 0};
        if (dh__thread_create(&tids[r], rank_main, &args[r]) != 0)
            break;
    }
    if (started < n) { /* the ranks that did start must not wait for the missing ones */
        rc = dh__fail(err, errlen, DH_ENOMEM, "cannot start %d rank threads (started %d)", n,
                      started);
        dh_engine_stop(e);
        barrier_break(&barrier);
    }
    pthread_mutex_lock(&barrier.mu);
    barrier.live -= n - started; /* the threads that never started never end */
    pthread_mutex_unlock(&barrier.mu);
    watch_ranks(e, &barrier);
    for (int r = 0; r < started; r++)
        pthread_join(tids[r], NULL);
    for (int r = 0; r < started && !rc; r++)
        rc = args[r].rc == DH_ECANCELED ? 0 : args[r].rc;
    pthread_mutex_destroy(&barrier.mu);
    pthread_cond_destroy(&barrier.cv);
    pthread_cond_destroy(&barrier.ended);
    free(args);
    free(tids);
    return rc;
}

int dh_engine_run(const dh_run_config *cfg, dh_sample_error_cb on_error, void *user,
                  dh_result *out, char *err, size_t errlen)
{
    if (!out)
        return DH_EINVAL;
    int rc = dh__result_check(out, err, errlen);
    if (rc)
        return rc;
    dh_engine *e;
    rc = dh_engine_start(cfg, on_error, user, &e, err, errlen);
    if (rc)
        return rc;
    rc = run_ranks(e, err, errlen);
    int frc = dh_engine_finish(e, out);
    rc = rc ? rc : frc;
    if (rc == DH_EFAILED && err && errlen && e->fail_msg[0])
        dh__msg(err, errlen, "the run stopped: %s", e->fail_msg);
    if (rc && err && errlen && !err[0] && e->nops->error(e)[0]) /* another node's */
        dh__msg(err, errlen, "%s", e->nops->error(e));
    if (rc && err && errlen && !err[0])
        dh__msg(err, errlen, "the run stopped: %s", dh_strerror(rc));
    dh_engine_free(e);
    return rc;
}
