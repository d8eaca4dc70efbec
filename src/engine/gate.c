/*
 * gate.c - CPU tokens shared by the engines of one agent's streams (gate.h).
 * Waiters are few (at most every worker thread of every stream), so a freed
 * token is handed over by a linear scan for the best one.
 */
#include "gate.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct waiter {
    const atomic_int *urgent;
    int active;
    double slack;
    int64_t seq;
    int granted;
    struct waiter *next;
} waiter;

struct dh__gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int free;
    int64_t seq, waits;
    waiter *head; /* in arrival order */
};

int dh__gate_new(int tokens, dh__gate **out)
{
    dh__gate *g = dh__calloc(1, sizeof *g);
    if (!g)
        return DH_ENOMEM;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->free = tokens > 0 ? tokens : 1;
    *out = g;
    return 0;
}

void dh__gate_free(dh__gate *g)
{
    if (!g)
        return;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

/* 1 when a goes before b: a stream with a rank waiting now, then an active stream, then
 * least slack, then oldest. */
static int before(const waiter *a, const waiter *b)
{
    int ua = a->urgent && atomic_load(a->urgent) > 0, ub = b->urgent && atomic_load(b->urgent) > 0;
    if (ua != ub)
        return ua;
    if (a->active != b->active)
        return a->active;
    if (a->slack != b->slack)
        return a->slack < b->slack;
    return a->seq < b->seq;
}

/* The best waiter's link, or NULL. Under g->mu. */
static waiter **best_waiter(dh__gate *g)
{
    waiter **best = NULL;
    for (waiter **w = &g->head; *w; w = &(*w)->next)
        if (!best || before(*w, *best))
            best = w;
    return best;
}

/* Hands the caller's token to *link's waiter. Under g->mu. */
static void hand_over(dh__gate *g, waiter **link)
{
    waiter *w = *link;
    *link = w->next;
    w->granted = 1; /* the token goes straight to it: nobody may take it in between */
    pthread_cond_broadcast(&g->cv);
}

/* Queues the caller and waits for a token; returns the seconds waited. Under g->mu. */
static double wait_turn(dh__gate *g, const atomic_int *urgent, int active, double slack)
{
    double t0 = dh__mono();
    waiter me = {urgent, active, slack, g->seq++, 0, NULL};
    waiter **tail = &g->head;
    while (*tail)
        tail = &(*tail)->next;
    *tail = &me;
    g->waits++;
    while (!me.granted)
        pthread_cond_wait(&g->cv, &g->mu);
    return dh__mono() - t0;
}

double dh__gate_enter(dh__gate *g, const atomic_int *urgent, int active, double slack)
{
    pthread_mutex_lock(&g->mu);
    double waited = 0;
    if (g->free > 0 && !g->head)
        g->free--;
    else
        waited = wait_turn(g, urgent, active, slack);
    pthread_mutex_unlock(&g->mu);
    return waited;
}

double dh__gate_renew(dh__gate *g, const atomic_int *urgent, int active, double slack)
{
    pthread_mutex_lock(&g->mu);
    double waited = 0;
    waiter me = {urgent, active, slack, INT64_MAX, 0, NULL}; /* ties: the waiters first */
    waiter **best = best_waiter(g);
    if (best && before(*best, &me)) {
        hand_over(g, best);
        waited = wait_turn(g, urgent, active, slack);
    }
    pthread_mutex_unlock(&g->mu);
    return waited;
}

void dh__gate_leave(dh__gate *g)
{
    pthread_mutex_lock(&g->mu);
    waiter **best = best_waiter(g);
    if (best)
        hand_over(g, best);
    else
        g->free++;
    pthread_mutex_unlock(&g->mu);
}

int64_t dh__gate_waits(dh__gate *g)
{
    pthread_mutex_lock(&g->mu);
    int64_t n = g->waits;
    pthread_mutex_unlock(&g->mu);
    return n;
}
