/*
 * test_ring.c - the batch buffer pool: first fit, merging on free, a block
 * held for long stalling nothing behind it, backpressure and closing.
 */
#include "engine/ring.h"
#include "testutil.h"

#include <pthread.h>
#include <unistd.h>

static dh__ring pool(int64_t size)
{
    dh__ring r;
    char err[128];
    ck_assert_int_eq(dh__ring_init(&r, size, 64, 0, err, sizeof err), 0);
    return r;
}

START_TEST(frees_in_any_order_merge_back_into_one_extent)
{
    dh__ring r = pool(4096);
    int64_t id[4];
    for (int k = 0; k < 4; k++)
        ck_assert_int_eq(dh__ring_try_alloc(&r, 1000, &id[k]), k * 1024); /* 64-aligned */
    ck_assert_int_eq(r.in_use, 4096);
    ck_assert_int_eq(dh__ring_try_alloc(&r, 1, &id[0]), -1); /* full */
    dh__ring_free(&r, id[1]);
    dh__ring_free(&r, id[3]);
    dh__ring_free(&r, id[2]); /* merges with both neighbours */
    ck_assert_int_eq(r.nfree, 1);
    ck_assert_int_eq(r.free_ext[0].off, 1024);
    ck_assert_int_eq(r.free_ext[0].len, 3072);
    dh__ring_free(&r, id[0]);
    dh__ring_free(&r, id[0]); /* a double free changes nothing */
    ck_assert_int_eq(r.nfree, 1);
    ck_assert_int_eq(r.in_use, 0);
    ck_assert_int_eq(r.peak, 4096);
    dh__ring_destroy(&r);
}
END_TEST

START_TEST(a_block_held_for_long_stalls_nothing_behind_it)
{
    /* A trainer keeps the first batch while 1,000 later ones come and go: a ring would stop
     * at its first wrap; the pool keeps serving around the held block. */
    dh__ring r = pool(8 * 1024);
    int64_t held, b;
    ck_assert_int_eq(dh__ring_try_alloc(&r, 1024, &held), 0);
    for (int k = 0; k < 1000; k++) {
        int64_t off = dh__ring_try_alloc(&r, 3000, &b);
        ck_assert_int_ge(off, 1024);
        dh__ring_free(&r, b);
    }
    dh__ring_free(&r, held);
    ck_assert_int_eq(r.in_use, 0);
    dh__ring_destroy(&r);
}
END_TEST

static void *alloc_waiting(void *p)
{
    dh__ring *r = p;
    int64_t b;
    return (void *)(intptr_t)dh__ring_alloc(r, 4096, &b);
}

START_TEST(a_full_pool_makes_allocation_wait_and_closing_wakes_it)
{
    dh__ring r = pool(4096);
    int64_t a;
    ck_assert_int_eq(dh__ring_try_alloc(&r, 4096, &a), 0);
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, alloc_waiting, &r), 0);
    usleep(50000);
    dh__ring_free(&r, a); /* room: the waiter gets it */
    void *got;
    pthread_join(t, &got);
    ck_assert_int_eq((intptr_t)got, 0);
    ck_assert_int_eq(pthread_create(&t, NULL, alloc_waiting, &r), 0);
    usleep(50000);
    dh__ring_close(&r); /* no room ever: closing must wake it with a failure */
    pthread_join(t, &got);
    ck_assert_int_eq((intptr_t)got, -1);
    dh__ring_destroy(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("ring");
    ADD_TEST(tc, frees_in_any_order_merge_back_into_one_extent);
    ADD_TEST(tc, a_block_held_for_long_stalls_nothing_behind_it);
    ADD_TEST(tc, a_full_pool_makes_allocation_wait_and_closing_wakes_it);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
