/*
 * test_gate.c - CPU tokens shared by an agent's streams: free tokens are
 * taken without waiting; a freed token goes to a stream with a rank waiting
 * now (even if it started waiting after the task queued), then to an active
 * stream, then to the least slack, then to the oldest.
 */
#include "engine/gate.h"
#include "testutil.h"

#include <pthread.h>
#include <unistd.h>

typedef struct {
    dh__gate *g;
    atomic_int *urgent;
    int active;
    double slack;
    int id;
} who;

static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static int order[8], norder;

static void *take(void *arg)
{
    who *w = arg;
    dh__gate_enter(w->g, w->urgent, w->active, w->slack);
    pthread_mutex_lock(&order_mu);
    order[norder++] = w->id;
    pthread_mutex_unlock(&order_mu);
    dh__gate_leave(w->g);
    return NULL;
}

/* Starts the waiters one at a time (each queued before the next comes: arrival order is
 * known), then frees the one token the test holds; returns when all have run. */
static void run_waiters(dh__gate *g, who *w, int n)
{
    pthread_t t[8];
    norder = 0;
    int64_t before = dh__gate_waits(g);
    for (int k = 0; k < n; k++) {
        w[k].g = g;
        ck_assert_int_eq(pthread_create(&t[k], NULL, take, &w[k]), 0);
        while (dh__gate_waits(g) < before + k + 1)
            usleep(1000);
    }
    dh__gate_leave(g);
    for (int k = 0; k < n; k++)
        pthread_join(t[k], NULL);
    ck_assert_int_eq(norder, n);
}

START_TEST(free_tokens_are_taken_without_waiting)
{
    dh__gate *g;
    ck_assert_int_eq(dh__gate_new(2, &g), 0);
    ck_assert(dh__gate_enter(g, NULL, 1, 0) == 0);
    ck_assert(dh__gate_enter(g, NULL, 1, 0) == 0);
    ck_assert_int_eq(dh__gate_waits(g), 0);
    dh__gate_leave(g);
    dh__gate_leave(g);
    dh__gate_free(g);
}
END_TEST

START_TEST(a_waiting_rank_first_then_active_then_least_slack_then_oldest)
{
    dh__gate *g;
    ck_assert_int_eq(dh__gate_new(1, &g), 0);
    ck_assert(dh__gate_enter(g, NULL, 1, 0) == 0); /* the test holds the only token */
    atomic_int idle = 0, waiting = 1;
    who w[5] = {{.urgent = &idle, .active = 1, .slack = 5, .id = 0},
                {.urgent = &idle, .active = 1, .slack = 1, .id = 1},
                {.urgent = &waiting, .active = 0, .slack = 9, .id = 2},
                {.urgent = &idle, .active = 1, .slack = 1, .id = 3},
                {.urgent = &idle, .active = 0, .slack = -50, .id = 4}};
    run_waiters(g, w, 5);
    ck_assert_int_eq(order[0], 2); /* its stream has a rank waiting */
    ck_assert_int_eq(order[1], 1); /* active, least slack, and older than 3 */
    ck_assert_int_eq(order[2], 3);
    ck_assert_int_eq(order[3], 0);
    ck_assert_int_eq(order[4], 4); /* an idle stream's stale deadline comes last */
    dh__gate_free(g);
}
END_TEST

/* A rank that starts waiting after its stream's task queued moves that task ahead. */
START_TEST(urgency_is_read_when_the_token_is_handed_over)
{
    dh__gate *g;
    ck_assert_int_eq(dh__gate_new(1, &g), 0);
    ck_assert(dh__gate_enter(g, NULL, 1, 0) == 0);
    atomic_int a = 0, b = 0;
    who w[2] = {{.urgent = &a, .active = 1, .slack = 0, .id = 0},
                {.urgent = &b, .active = 1, .slack = 100, .id = 1}};
    pthread_t t[2];
    for (int k = 0; k < 2; k++) {
        w[k].g = g;
        ck_assert_int_eq(pthread_create(&t[k], NULL, take, &w[k]), 0);
        while (dh__gate_waits(g) < k + 1)
            usleep(1000);
    }
    norder = 0;
    atomic_store(&b, 1); /* stream b's rank now waits for a batch */
    dh__gate_leave(g);
    for (int k = 0; k < 2; k++)
        pthread_join(t[k], NULL);
    ck_assert_int_eq(order[0], 1);
    ck_assert_int_eq(order[1], 0);
    dh__gate_free(g);
}
END_TEST

/* A worker keeps its token from task to task unless a better task waits. */
START_TEST(a_busy_worker_keeps_its_token_unless_a_better_task_waits)
{
    dh__gate *g;
    ck_assert_int_eq(dh__gate_new(1, &g), 0);
    atomic_int no = 0;
    ck_assert(dh__gate_enter(g, &no, 1, 0) == 0);
    who w[1] = {{.urgent = &no, .active = 0, .slack = -9, .id = 7}}; /* an idle stream */
    pthread_t t;
    w[0].g = g;
    ck_assert_int_eq(pthread_create(&t, NULL, take, &w[0]), 0);
    while (dh__gate_waits(g) < 1)
        usleep(1000);
    norder = 0;
    ck_assert(dh__gate_renew(g, &no, 1, 3) == 0); /* active beats idle: kept, no wait */
    ck_assert_int_eq(dh__gate_waits(g), 1);
    /* an inactive next task of ours (its stream's trainers went away) yields to the older
     * waiter of equal class with less slack, then gets the token back when it is done */
    ck_assert(dh__gate_renew(g, &no, 0, 3) >= 0);
    ck_assert_int_eq(dh__gate_waits(g), 2);
    pthread_join(t, NULL);
    ck_assert_int_eq(norder, 1);
    ck_assert_int_eq(order[0], 7);
    dh__gate_leave(g);
    dh__gate_free(g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gate");
    TCase *tc = tcase_create("gate");
    ADD_TEST(tc, free_tokens_are_taken_without_waiting);
    ADD_TEST(tc, a_waiting_rank_first_then_active_then_least_slack_then_oldest);
    ADD_TEST(tc, urgency_is_read_when_the_token_is_handed_over);
    ADD_TEST(tc, a_busy_worker_keeps_its_token_unless_a_better_task_waits);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
