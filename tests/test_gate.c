/*
 * test_gate.c - CPU tokens shared by an agent's streams: free tokens are
 * taken without waiting; a freed token goes to a stream with a rank waiting
 * now (even if it started waiting after the task queued), then to the least
 * slack, then to the oldest.
 */
#include "engine/gate.h"
#include "testutil.h"

#include <pthread.h>
#include <unistd.h>

typedef struct {
    dh__gate *g;
    atomic_int *urgent;
    double slack;
    int id;
} who;

static pthread_mutex_t order_mu = PTHREAD_MUTEX_INITIALIZER;
static int order[8], norder;

static void *take(void *arg)
{
    who *w = arg;
    dh__gate_enter(w->g, w->urgent, w->slack);
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
    ck_assert_int_eq(dh__gate_tokens(g), 2);
    ck_assert(dh__gate_enter(g, NULL, 0) == 0);
    ck_assert(dh__gate_enter(g, NULL, 0) == 0);
    ck_assert_int_eq(dh__gate_waits(g), 0);
    dh__gate_leave(g);
    dh__gate_leave(g);
    dh__gate_free(g);
}
END_TEST

START_TEST(a_waiting_rank_first_then_least_slack_then_oldest)
{
    dh__gate *g;
    ck_assert_int_eq(dh__gate_new(1, &g), 0);
    ck_assert(dh__gate_enter(g, NULL, 0) == 0); /* the test holds the only token */
    atomic_int idle = 0, waiting = 1;
    who w[4] = {{.urgent = &idle, .slack = 5, .id = 0},
                {.urgent = &idle, .slack = 1, .id = 1},
                {.urgent = &waiting, .slack = 9, .id = 2},
                {.urgent = &idle, .slack = 1, .id = 3}};
    run_waiters(g, w, 4);
    ck_assert_int_eq(order[0], 2); /* its stream has a rank waiting */
    ck_assert_int_eq(order[1], 1); /* least slack, and older than 3 */
    ck_assert_int_eq(order[2], 3);
    ck_assert_int_eq(order[3], 0);
    dh__gate_free(g);
}
END_TEST

/* A rank that starts waiting after its stream's task queued moves that task ahead. */
START_TEST(urgency_is_read_when_the_token_is_handed_over)
{
    dh__gate *g;
    ck_assert_int_eq(dh__gate_new(1, &g), 0);
    ck_assert(dh__gate_enter(g, NULL, 0) == 0);
    atomic_int a = 0, b = 0;
    who w[2] = {{.urgent = &a, .slack = 0, .id = 0}, {.urgent = &b, .slack = 100, .id = 1}};
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

int main(void)
{
    Suite *s = suite_create("gate");
    TCase *tc = tcase_create("gate");
    tcase_add_test(tc, free_tokens_are_taken_without_waiting);
    tcase_add_test(tc, a_waiting_rank_first_then_least_slack_then_oldest);
    tcase_add_test(tc, urgency_is_read_when_the_token_is_handed_over);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
