/*
 * test_sched.c - each policy's semantics on tiny hand-built scenarios with
 * known answers, driven through the pull interface as an engine would, plus
 * calibration on synthetic truth.
 */
#include "sched/sched.h"
#include "sched/sched_int.h" /* the step's batch records and members, to compare */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXS 128

/* A tiny world: sample i has predicted CPU row[i].cpu_pred, GPU cost row[i].feat.v (a_enc = 1). */
typedef struct {
    dh__sample_row row[MAXS]; /* cpu_pred, feat, bytes, cls */
    int32_t segments[MAXS];
    int64_t order[MAXS];
    int64_t drawn;   /* steps the scheduler drew from order */
    float drawn_cpu; /* > 0: the CPU every draw gives (with cfg.order_cpu) */
    const uint8_t *carry; /* a replica's byte a sample, carried with each draw (world_carry) */
    uint8_t carried[MAXS];
    dh__sched_config cfg;
} world;

/* The order source: step s is order[s * G, (s + 1) * G), wrapping round the table. */
static int world_order(void *ctx, int64_t *out, float *cpu)
{
    world *w = ctx;
    int64_t G = w->cfg.global_batch;
    for (int64_t k = 0; k < G; k++) {
        out[k] = w->order[(w->drawn * G + k) % MAXS];
        if (w->carry)
            w->carried[k] = w->carry[out[k]];
        if (cpu) /* the order source draws each sample's CPU (cfg.order_cpu) */
            cpu[k] = w->drawn_cpu > 0 ? w->drawn_cpu : w->cfg.pred.row[out[k]].cpu_pred;
    }
    w->drawn++;
    return 0;
}

/* The order source carrying a replica's bytes (cfg.carry_bytes), as the sampler does. */
static const uint8_t *world_carry(void *ctx, const uint8_t *bytes)
{
    world *w = ctx;
    w->carry = bytes;
    return bytes ? w->carried : NULL;
}

static void world_init(world *w, dh__policy p, int ranks, int workers, int64_t G, int64_t steps)
{
    memset(w, 0, sizeof *w);
    for (int i = 0; i < MAXS; i++) {
        w->row[i].cpu_pred = 0.1f;
        w->row[i].feat.v = 1.0f;
        w->row[i].bytes = 10;
        w->segments[i] = 1;
        w->order[i] = i;
    }
    w->cfg = (dh__sched_config){.policy = p, .ranks = ranks, .workers = workers,
                                .global_batch = G, .steps = steps, .memory_budget = 1 << 30,
                                .gpu = {.a_enc = 1.0}, .next_order = world_order,
                                .order_ctx = w};
    w->cfg.pred = (dh__pred){.n = MAXS, .row = w->row, .segments = w->segments};
}

static dh__sched *make(world *w)
{
    dh__sched *s = NULL;
    ck_assert_int_eq(dh__sched_new(&w->cfg, &s), 0);
    return s;
}

START_TEST(pool_is_fifo_in_submission_order)
{
    /* Stride placement: step 0 rank 0 = samples 0,2; rank 1 = 1,3; then step 1. FIFO serves
     * batches in (step, rank) order, samples in batch order. */
    world w;
    world_init(&w, DH_POL_POOL, 2, 1, 4, 2);
    dh__sched *s = make(&w);
    int64_t expect[] = {0, 2, 1, 3, 4, 6, 5, 7};
    dh__task t;
    for (int k = 0; k < 8; k++) {
        ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
        ck_assert_int_eq(t.sample, expect[k]);
        ck_assert_int_eq(t.rank, (int)(expect[k] % 2));
        ck_assert_int_eq(t.nparts, 1);
    }
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 1);
    dh__sched_free(s);
}
END_TEST

START_TEST(local_workers_are_private_and_build_whole_batches)
{
    /* R = 2, W = 4: k = 2 workers per rank. Worker 0 builds rank 0's batches of steps 0, 2,
     * 4, ...; worker 1 steps 1, 3, ...; workers 2 and 3 the same for rank 1. */
    world w;
    world_init(&w, DH_POL_LOCAL, 2, 4, 4, 8);
    dh__sched *s = make(&w);
    ck_assert_int_eq(dh__sched_worker_count(s), 4);
    ck_assert_int_eq(dh__sched_worker_rank(s, 3), 1);
    dh__task t;
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0, &t), 0);
    ck_assert_int_eq(t.step, 0);
    ck_assert_int_eq(t.rank, 0);
    ck_assert_int_eq(t.sample, 0);
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0, &t), 0); /* same batch, next sample */
    ck_assert_int_eq(t.sample, 2);
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0, &t), 0); /* batch done: its next one */
    ck_assert_int_eq(t.step, 2);
    ck_assert_int_eq(dh__sched_next_task(s, 1, 0, &t), 0);
    ck_assert_int_eq(t.step, 1);
    ck_assert_int_eq(t.rank, 0);
    ck_assert_int_eq(dh__sched_next_task(s, 3, 0, &t), 0);
    ck_assert_int_eq(t.step, 1);
    ck_assert_int_eq(t.rank, 1);
    ck_assert_int_eq(t.sample, 5);
    dh__sched_free(s);
}
END_TEST

START_TEST(local_prefetch_is_two_batches_per_worker)
{
    /* R = 1, W = 1: one worker may run 2 batches ahead of what the trainer took. */
    world w;
    world_init(&w, DH_POL_LOCAL, 1, 1, 1, 10);
    dh__sched *s = make(&w);
    dh__task t;
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0, &t), 0);
    ck_assert_int_eq(t.step, 0);
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0, &t), 0);
    ck_assert_int_eq(t.step, 1);
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0, &t), 1); /* step 2 must wait */
    dh__sched_batch_taken(s, 0, 0, 1.0);
    ck_assert_int_eq(dh__sched_next_task(s, 0, 1.0, &t), 0);
    ck_assert_int_eq(t.step, 2);
    dh__sched_free(s);
}
END_TEST

/* One worker, one rank, one sample per step; step compute predicted 1 s each. */
static void one_worker_world(world *w, dh__policy p)
{
    world_init(w, p, 1, 1, 1, 4);
    w->row[3].cpu_pred = 2.5f; /* the heavy sample of step 3 */
}

START_TEST(the_window_not_the_run_sizes_the_scheduler)
{
    /* 1,000 steps of a pool run taken one by one: the scheduler holds a handful of steps,
     * whatever the run's length, and keeps serving after the window wrapped many times. */
    world w;
    world_init(&w, DH_POL_POOL, 2, 2, 4, 1000);
    w.cfg.memory_budget = 40; /* one step of two 20-byte batches */
    dh__sched *s = make(&w);
    dh__task t;
    int64_t most = 0;
    for (int64_t st = 0; st < 1000; st++) {
        while (!dh__sched_batch_ready(s, st, 0) || !dh__sched_batch_ready(s, st, 1)) {
            ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
            ck_assert_int_eq(t.step, st);
            ck_assert_int_ge(dh__sched_task_done(s, &t, 0.0, 0.1, -1), 0);
        }
        for (int r = 0; r < 2; r++)
            dh__sched_batch_taken(s, r, st, (double)st);
        for (int r = 0; r < 2; r++)
            dh__sched_step_done(s, r, st, st + 0.5, 0.5);
        most = DH_MAX(most, dh__sched_window_steps(s));
    }
    ck_assert_int_le(most, 3);
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), DH__IDLE); /* the run is over */
    dh__sched_free(s);
}
END_TEST

static int failing_order(void *ctx, int64_t *out, float *cpu)
{
    (void)ctx;
    (void)out;
    (void)cpu;
    return DH_ENOMEM;
}

START_TEST(an_order_source_failure_is_an_error_not_idleness)
{
    /* "No work now" and "failed" are different answers, and the failure sticks. */
    world w;
    world_init(&w, DH_POL_HELIX, 1, 1, 1, 5);
    w.cfg.next_order = failing_order;
    dh__sched *s = make(&w);
    dh__task t;
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), DH_ENOMEM);
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), DH_ENOMEM);
    ck_assert_int_eq(dh__sched_error(s), DH_ENOMEM);
    ck_assert_int_lt(dh__sched_rank_of(s, 0, 0), 0);
    dh__sched_free(s);
}
END_TEST

START_TEST(a_drawn_cpu_is_the_order_sources_only_when_it_draws_one)
{
    /* Without order_cpu the scheduler reads the table's prediction (and hands the source no
     * array to write); with it, the prediction is what the step's draw made (a random
     * augmentation's), whatever the table says. */
    for (int order_cpu = 0; order_cpu <= 1; order_cpu++) {
        world w;
        world_init(&w, DH_POL_HELIX, 2, 2, 4, 3);
        w.drawn_cpu = 0.3f; /* the table says 0.1 */
        w.cfg.order_cpu = order_cpu;
        dh__sched *s = make(&w);
        dh__task t;
        for (int k = 0; k < 4; k++) {
            ck_assert_int_eq(dh__sched_next_task(s, k % 2, 0.0, &t), 0);
            ck_assert_int_eq(t.step, 0);
            ck_assert_double_eq_tol(t.pred_cost, order_cpu ? 0.3 : 0.1, 1e-6);
        }
        dh__sched_free(s);
    }
}
END_TEST

START_TEST(local_with_more_ranks_than_workers_stays_in_bounds)
{
    /* R = 4, W = 2: local still runs one private worker per rank (4 threads); their
     * bookkeeping must index ranks' nodes, not W's (this overflowed a node table). */
    world w;
    world_init(&w, DH_POL_LOCAL, 4, 2, 4, 4);
    dh__sched *s = make(&w);
    ck_assert_int_eq(dh__sched_worker_count(s), 4);
    dh__task t;
    for (int wk = 0; wk < 4; wk++) {
        ck_assert_int_eq(dh__sched_next_task(s, wk, 0.0, &t), 0);
        ck_assert_int_eq(t.rank, wk);
        ck_assert_int_ge(dh__sched_task_done(s, &t, 0.1, 0.1, -1), 0);
    }
    ck_assert_int_eq(dh__sched_next_task(s, 4, 0.0, &t), DH_EINVAL);
    dh__sched_free(s);
}
END_TEST

START_TEST(least_slack_starts_a_heavy_sample_three_steps_ahead_first)
{
    /* Deadlines D(s) = s seconds (1 s predicted compute per step). Keys D - c: s0 -0.1,
     * s1 0.9, s2 1.9, s3 3 - 2.5 = 0.5: least slack serves 0, 3, 1, 2 - the heavy sample three
     * steps ahead before the light one of the next step. FIFO by step serves 0, 1, 2, 3. */
    world w;
    one_worker_world(&w, DH_POL_HELIX);
    dh__sched *s = make(&w);
    int64_t expect[] = {0, 3, 1, 2};
    dh__task t;
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
        ck_assert_int_eq(t.sample, expect[k]);
    }
    dh__sched_free(s);
    one_worker_world(&w, DH_POL_HELIX_FIFO);
    s = make(&w);
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
        ck_assert_int_eq(t.sample, k);
    }
    dh__sched_free(s);
}
END_TEST

START_TEST(a_steps_batches_are_due_smallest_cpu_first)
{
    /* One step, four ranks of one sample each (stride placement), one worker, a 1 s step.
     * A batch is due its step's start minus the CPU of the batches due after it (its lead),
     * smallest first, ties by rank: CPU 0.4 0.1 0.3 0.2 on ranks 0-3 are due in the order of
     * ranks 1, 3, 2, 0 (keys -1.0, -0.9, -0.7, -0.4); equal CPU in rank order. With a
     * budget of one batch, batches are admitted one by one as others finish, and every
     * one is still served once. */
    static const float cpu[2][4] = {{0.4f, 0.1f, 0.3f, 0.2f}, {0.1f, 0.1f, 0.1f, 0.1f}};
    static const int64_t expect[2][4] = {{1, 3, 2, 0}, {0, 1, 2, 3}};
    for (int c = 0; c < 2; c++) {
        for (int budget = 0; budget < 2; budget++) {
            world w;
            world_init(&w, DH_POL_HELIX_NOBALANCE, 4, 1, 4, 1);
            for (int i = 0; i < 4; i++)
                w.row[i].cpu_pred = cpu[c][i];
            if (budget)
                w.cfg.memory_budget = 10; /* one batch at a time: admitted as others finish */
            dh__sched *s = make(&w);
            dh__task t;
            for (int k = 0; k < 4; k++) {
                ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
                if (!budget)
                    ck_assert_int_eq(t.sample, expect[c][k]);
                ck_assert_int_eq(dh__sched_task_done(s, &t, 0.1, 0.1, 1.0), 1);
                dh__sched_batch_taken(s, t.rank, 0, 0.1);
                dh__sched_step_done(s, t.rank, 0, 0.2, 1.0);
            }
            ck_assert_int_eq(dh__sched_next_task(s, 0, 0.3, &t), DH__IDLE);
            dh__sched_free(s);
        }
    }
}
END_TEST

START_TEST(a_large_nodes_batches_are_due_smallest_cpu_first_too)
{
    /* 100 ranks on one node (over the 64 whose leads follow every calibration change): the
     * leads come from a sort of the node's batches. CPU 1e-4 x (100 - i) on rank i, all
     * due within the 1 s step: the smallest batch first, so ranks 99, 98, ... and the order
     * holds after calibration moved (a task done at twice its prediction). */
    world w;
    world_init(&w, DH_POL_HELIX_NOBALANCE, 100, 1, 100, 1);
    for (int i = 0; i < 100; i++)
        w.row[i].cpu_pred = 1e-4f * (float)(100 - i);
    dh__sched *s = make(&w);
    dh__task t;
    for (int k = 0; k < 100; k++) {
        ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
        ck_assert_int_eq(t.sample, 99 - k);
        ck_assert_int_eq(dh__sched_task_done(s, &t, 0.01, 2.0 * t.pred_cost, 1.0), 1);
    }
    dh__sched_free(s);
}
END_TEST

START_TEST(window_is_bounded_by_memory)
{
    /* Batches of 10 bytes, budget 25: two batches admitted; the third waits for a step. */
    world w;
    world_init(&w, DH_POL_POOL, 1, 1, 1, 5);
    w.cfg.memory_budget = 25;
    dh__sched *s = make(&w);
    dh__task t;
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0, &t), 0);
    ck_assert_int_eq(dh__sched_task_done(s, &t, 0.1, 0.1, -1), 1);
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0, &t), 0);
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0, &t), 1);
    ck_assert(dh__sched_batch_ready(s, 0, 0));
    dh__sched_batch_taken(s, 0, 0, 0.2);
    dh__sched_step_done(s, 0, 0, 1.2, 1.0);
    ck_assert_int_eq(dh__sched_next_task(s, 0, 1.2, &t), 0);
    ck_assert_int_eq(t.step, 2);
    ck_assert_int_eq(dh__sched_memory_peak(s), 20);
    dh__sched_free(s);
}
END_TEST

/* Fetching ahead of admission (objects): a step is planned early only within the horizon
 * and the step cap, is the step admission would have planned, and is admitted later as any. */
START_TEST(steps_are_planned_ahead_of_admission_for_the_fetchers)
{
    world w, w2;
    world_init(&w, DH_POL_HELIX, 2, 2, 4, 200);
    w.cfg.memory_budget = 45; /* batches of 20 bytes: one step admitted */
    w2 = w;
    w2.cfg.order_ctx = &w2;
    dh__sched *s = make(&w), *late = make(&w2);
    dh__task t;
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0, &t), 0);
    ck_assert_int_eq(t.step, 0);
    ck_assert_int_eq(dh__sched_window_steps(s), 2); /* admission looked at step 1 */
    ck_assert_int_eq(dh__sched_plan_ahead(s, 1, 0), 1); /* planned */
    ck_assert_int_eq(dh__sched_plan_ahead(s, 2, 0.5), 0); /* predicted past the horizon */
    ck_assert_int_eq(dh__sched_window_steps(s), 2);
    for (int64_t st = 2; st < DH__PLAN_AHEAD_STEPS; st++)
        ck_assert_int_eq(dh__sched_plan_ahead(s, st, 1e6), 1);
    ck_assert_int_eq(dh__sched_plan_ahead(s, DH__PLAN_AHEAD_STEPS, 1e6), 0); /* the cap */
    ck_assert_int_eq(dh__sched_window_steps(s), DH__PLAN_AHEAD_STEPS);
    /* the same steps as planned at admission, by a scheduler that never planned ahead */
    for (int64_t st = 0; st < 3; st++)
        for (int64_t k = 0; k < 4; k++) {
            ck_assert_int_eq(dh__sched_rank_of(late, st, k), dh__sched_rank_of(s, st, k));
            ck_assert_int_eq(dh__sched_step_order(late, st)[k], dh__sched_step_order(s, st)[k]);
        }
    /* admission still admits step 1 once step 0 is consumed */
    for (int n = 0; n < 3; n++) {
        ck_assert_int_eq(dh__sched_task_done(s, &t, 0.1, 0.1, -1) >= 0, 1);
        ck_assert_int_eq(dh__sched_next_task(s, 0, 0.1, &t), 0);
        ck_assert_int_eq(t.step, 0);
    }
    ck_assert_int_eq(dh__sched_task_done(s, &t, 0.1, 0.1, -1) >= 0, 1);
    for (int r = 0; r < 2; r++) {
        ck_assert(dh__sched_batch_ready(s, 0, r));
        dh__sched_batch_taken(s, r, 0, 0.2);
        dh__sched_step_done(s, r, 0, 1.2, 1.0);
    }
    ck_assert_int_eq(dh__sched_next_task(s, 0, 1.2, &t), 0);
    ck_assert_int_eq(t.step, 1);
    dh__sched_free(s);
    dh__sched_free(late);
}
END_TEST

START_TEST(heavy_late_sample_is_split_into_keyframe_parts)
{
    /* Step 0's sample costs 4 s with 8 keyframe segments, its deadline is 0: it is split
     * (8 parts at most, one per segment; 4 workers here cap it at 4), and the batch is
     * complete only when every part is done. The same on a replica of its node (which reads
     * a sample's segments when it queues its task, where a single node reads them when it
     * draws the step). */
    int local = _i;
    world w;
    world_init(&w, DH_POL_HELIX, 1, 4, 1, 2);
    w.cfg.node_local = local;
    w.cfg.node = 0;
    w.row[0].cpu_pred = 4.0f;
    w.segments[0] = 8;
    dh__sched *s = make(&w);
    dh__task parts[4];
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(dh__sched_next_task(s, k, 0.0, &parts[k]), 0);
        ck_assert_int_eq(parts[k].sample, 0);
        ck_assert_int_eq(parts[k].nparts, 4);
        ck_assert_int_eq(parts[k].part, k);
        ck_assert_double_eq_tol(parts[k].pred_cost, 1.0, 1e-6);
    }
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(dh__sched_task_done(s, &parts[k], 1.0, 1.0, -1), 0);
    ck_assert(!dh__sched_batch_ready(s, 0, 0));
    ck_assert_int_eq(dh__sched_task_done(s, &parts[3], 1.0, 1.0, -1), 1);
    ck_assert(dh__sched_batch_ready(s, 0, 0));
    /* A light sample is never split. */
    dh__task t;
    ck_assert_int_eq(dh__sched_next_task(s, 0, 1.0, &t), 0);
    ck_assert_int_eq(t.sample, 1);
    ck_assert_int_eq(t.nparts, 1);
    dh__sched_free(s);
}
END_TEST

START_TEST(a_split_samples_latest_start_counts_one_part)
{
    /* Deadlines D(s) = s. Step 1's sample costs 3 s in 8 keyframe segments, so it will be
     * split into at least ceil(3 / 1) = 3 parts of 1 s on these 4 workers: it must start by
     * D(1) - 1 = 0, after step 0's light sample (-0.1). Counting the whole 3 s (key -2) put
     * it first, and with CPU short every step then waited for the one before. The same
     * sample with one segment cannot be split: it must start first. */
    for (int segs = 8; segs >= 1; segs -= 7) {
        world w;
        world_init(&w, DH_POL_HELIX, 1, 4, 1, 3);
        w.row[1].cpu_pred = 3.0f;
        w.segments[1] = segs;
        dh__sched *s = make(&w);
        dh__task t;
        ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
        ck_assert_int_eq(t.sample, segs > 1 ? 0 : 1);
        ck_assert_int_eq(dh__sched_next_task(s, 1, 0.0, &t), 0);
        ck_assert_int_eq(t.sample, segs > 1 ? 1 : 0);
        if (segs > 1)
            ck_assert_int_gt(t.nparts, 1);
        dh__sched_free(s);
    }
}
END_TEST

START_TEST(balanced_placement_evens_predicted_gpu)
{
    /* GPU costs 4, 1, 4, 1, 1, 1 over 2 ranks: the stride gives {4, 4, 1} = 9 | {1, 1, 1} = 3;
     * the balanced placement 6 | 6. */
    world w;
    world_init(&w, DH_POL_HELIX, 2, 2, 6, 1);
    float g[] = {4, 1, 4, 1, 1, 1};
    for (int i = 0; i < 6; i++)
        w.row[i].feat.v = g[i];
    dh__sched *s = make(&w);
    double load[2] = {0};
    for (int k = 0; k < 6; k++)
        load[dh__sched_rank_of(s, 0, k)] += g[k];
    ck_assert_double_eq_tol(load[0], 6, 1e-9);
    ck_assert_double_eq_tol(load[1], 6, 1e-9);
    dh__sched_free(s);
    w.cfg.policy = DH_POL_HELIX_NOBALANCE;
    s = make(&w);
    ck_assert_int_eq(dh__sched_rank_of(s, 0, 2), 0); /* stride: sample 2 -> rank 0 */
    dh__sched_free(s);
}
END_TEST

/* Several nodes of several ranks: the draw is dealt to nodes in LPT order, snaking, each
 * node's share balanced among its ranks; a replica places its own node's share as the job
 * does and the others' only on their nodes, until it plans their moves (then as they do).
 * Before, one partition over all ranks gave the heaviest samples to the lowest ranks' nodes
 * step after step (their workers ran late). */
START_TEST(each_node_places_its_share_of_the_draw)
{
    for (int G = 9; G <= 10; G++) {
        world w;
        world_init(&w, DH_POL_HELIX, 4, 4, G, 1);
        w.cfg.nodes = 2;
        for (int i = 0; i < G; i++) /* the heavy half first, as the draw may bring them */
            w.row[i].feat.v = i < G / 2 ? 4.0f : 1.0f;
        int32_t want[10];
        for (int node = -1; node < 2; node++) { /* the simulator's view, then each replica */
            w.cfg.node_local = node >= 0;
            w.cfg.node = node >= 0 ? node : 0;
            w.drawn = 0; /* the same draw for every view (before, the replicas drew the next) */
            dh__sched *s = make(&w);
            double load[4] = {0};
            int count[2] = {0}, heavy[2] = {0};
            for (int k = 0; k < G; k++) {
                int r = dh__sched_rank_of(s, 0, k);
                if (node < 0)
                    want[k] = r;
                ck_assert_int_eq(r / 2, want[k] / 2); /* on the node the job places it */
                if (r / 2 == node)
                    ck_assert_int_eq(r, want[k]); /* its own node: placed as the job does */
            }
            if (node >= 0) { /* planning the moves (none: no exact cost known) places the
                              * group's other node as it does */
                float unknown[10];
                uint8_t frozen[4] = {0};
                for (int k = 0; k < G; k++)
                    unknown[k] = -1;
                dh__reb_agreed a = {.frozen = frozen, .known = unknown, .move_factor = 1.0,
                                    .net_factor = 1.0};
                dh__sched_rebalance_agreed(s, 0, &a, NULL, NULL);
            }
            for (int k = 0; k < G; k++) {
                int r = dh__sched_rank_of(s, 0, k);
                load[r] += w.row[k].feat.v;
                count[r / 2]++;
                heavy[r / 2] += k < G / 2;
                ck_assert_int_eq(r, want[k]); /* every replica agrees */
            }
            /* Dealt heaviest first, snaking over the nodes: each gets half the samples and
             * half the heavy ones (contiguous halves gave one node every heavy sample). */
            ck_assert_int_eq(count[0], (G + 1) / 2);
            ck_assert_int_eq(count[1], G / 2);
            ck_assert_int_le(abs(heavy[0] - heavy[1]), 1);
            /* and partitioned within: 4 4 1 1 1 | 4 4 1 1 (G = 9) makes 6 the slowest rank,
             * 4 4 4 1 1 | 4 4 1 1 1 (G = 10) makes 8, as one partition over all four does */
            double mx = DH_MAX(DH_MAX(load[0], load[1]), DH_MAX(load[2], load[3]));
            ck_assert_double_eq_tol(mx, G == 9 ? 6 : 8, 1e-9);
            dh__sched_free(s);
        }
    }
    /* nodes of one rank: a share would place nothing; one partition over every rank */
    world w;
    world_init(&w, DH_POL_HELIX, 2, 2, 4, 1);
    w.cfg.nodes = 2;
    float g[] = {4, 4, 1, 1};
    for (int i = 0; i < 4; i++)
        w.row[i].feat.v = g[i];
    dh__sched *s = make(&w);
    double load[2] = {0};
    for (int k = 0; k < 4; k++)
        load[dh__sched_rank_of(s, 0, k)] += g[k];
    ck_assert_double_eq_tol(load[0], 5, 1e-9);
    ck_assert_double_eq_tol(load[1], 5, 1e-9);
    dh__sched_free(s);
}
END_TEST

/* Prepares every sample of step 0 (one worker), revealing the given exact GPU costs. */
static void prepare_step0(dh__sched *s, const double *revealed, int n)
{
    for (int k = 0; k < n; k++) {
        dh__task t;
        ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
        dh__sched_task_done(s, &t, 0.0, 0.1, revealed[t.sample]);
    }
}

static double rank_load(dh__sched *s, int rank, const double *g)
{
    int64_t samples[16];
    int32_t n = dh__sched_batch_samples(s, 0, rank, samples, 16);
    double sum = 0;
    for (int32_t k = 0; k < n; k++)
        sum += g[samples[k]];
    return sum;
}

/*
 * Exact costs that skew step st of a 4-sample, 2-rank world: 3 for the samples placed with
 * position 0 (on rank r0, returned), 1 for the others; g is indexed by sample.
 */
static int skew_step(dh__sched *s, int64_t st, double *g)
{
    int r0 = dh__sched_rank_of(s, st, 0);
    for (int k = 0; k < 4; k++)
        g[st * 4 + k] = dh__sched_rank_of(s, st, k) == r0 ? 3.0 : 1.0;
    return r0;
}

/*
 * The deal to nodes: the step's samples by classes of GPU cost (two to an octave below the
 * step's heaviest, by position within a class; zero costs and what is 64 half-octaves
 * lighter in the last class), each run of N of that order giving one sample to every node
 * (at a rotation drawn per run). Every view agrees: the simulator's and each replica's.
 */
START_TEST(the_deal_to_nodes_gives_every_node_one_of_each_run_of_classes)
{
    /* 16 samples over 4 nodes of 2 ranks; the heaviest costs 16, so [16, 24) is class 0,
     * [12, 16) class 1, [8, 12) 2, [6, 8) 3, [4, 6) 4, [3, 4) 5, [2, 3) 6; k2 costs nothing
     * and k4 1e-30: both in the last class, k2 first by position */
    static const float v[16] = {3, 16, 0, 9, 1e-30f, 12, 5.01f, 14, 2,
                                11, 7, 13, 5.01001f, 11.11f, 6, 15};
    /* the deal's order by class, then position: its runs of 4 go one to each node */
    static const int deal[16] = {1, 5, 7, 11, 15, 3, 9, 13, 10, 14, 6, 12, 0, 8, 2, 4};
    int node_of[5][16];
    for (int node = -1; node < 4; node++) {
        world w;
        world_init(&w, DH_POL_HELIX, 8, 8, 16, 1);
        w.cfg.nodes = 4;
        w.cfg.node_local = node >= 0;
        w.cfg.node = node >= 0 ? node : 0;
        for (int k = 0; k < 16; k++)
            w.row[k].feat.v = v[k];
        dh__sched *s = make(&w);
        for (int k = 0; k < 16; k++)
            node_of[node + 1][k] = dh__sched_rank_of(s, 0, k) / 2;
        for (int run = 0; run < 4; run++) {
            int seen = 0;
            for (int j = 0; j < 4; j++)
                seen |= 1 << node_of[node + 1][deal[4 * run + j]];
            ck_assert_msg(seen == 15, "view %d: run %d of the deal (samples %d %d %d %d) is "
                          "not one sample a node", node, run, deal[4 * run], deal[4 * run + 1],
                          deal[4 * run + 2], deal[4 * run + 3]);
        }
        ck_assert_mem_eq(node_of[node + 1], node_of[0], sizeof node_of[0]);
        dh__sched_free(s);
    }
}
END_TEST

/*
 * The deal by its definition, on a shape the test above does not reach: 3 nodes (no power of
 * two) and 38 samples a step (a last run of 2), over four steps (their runs' rotations
 * differ), costs over many half-octaves with zeros and ties. Place i of the step sorted by
 * class (then position) is run i / N's place i % N, which goes to node (place - rotation)
 * mod N, the rotation drawn from (step, run). Every view deals so: the whole job's and each
 * replica's (from its byte table, read at random or carried by the order with each draw).
 */
START_TEST(the_deal_follows_its_definition_with_a_short_last_run)
{
    enum { N = 3, PER = 2, G = 38, STEPS = 4 };
    for (int v = -1; v < 2 * N; v++) {
        int view = v < N ? v : v - N, carried = v >= N;
        world w;
        world_init(&w, DH_POL_HELIX, N * PER, 2 * N * PER, G, STEPS);
        w.cfg.nodes = N;
        w.cfg.node_local = view >= 0;
        w.cfg.node = view >= 0 ? view : 0;
        if (carried)
            w.cfg.carry_bytes = world_carry;
        for (int i = 0; i < MAXS; i++) /* 0, then costs from 2^-9 to 2^9 (with repeats) */
            w.row[i].feat.v = i % 11 == 0 ? 0.0f : ldexpf(1.0f + (float)(i % 7) / 7, i % 19 - 9);
        dh__sched *s = make(&w);
        ck_assert(carried ? s->drawn_below && w.carry == s->below : !s->drawn_below);
        for (int st = 0; st < STEPS; st++) {
            uint64_t h[G], top = 0;
            for (int k = 0; k < G; k++) {
                h[k] = dh__cost_half_octave(w.row[w.order[(st * G + k) % MAXS]].feat.v);
                top = h[k] > top ? h[k] : top;
            }
            int sorted[G], node_of[G], n = 0; /* positions by class, then position */
            for (uint64_t c = 0; c < DEAL_CLASSES; c++)
                for (int k = 0; k < G; k++)
                    if (dh__cost_class(h[k], top, DEAL_CLASSES) == c)
                        sorted[n++] = k;
            ck_assert_int_eq(n, G);
            for (int i = 0; i < G; i++) {
                uint64_t run = (uint64_t)(i / N);
                int rot = (int)(dh__mix64(((uint64_t)st << 32) + run + 0x9e3779b97f4a7c15ULL) %
                                N);
                int want = ((i % N) - rot + N) % N, got = dh__sched_rank_of(s, st, sorted[i]);
                ck_assert_msg(got >= 0 && got / PER == want,
                              "view %d%s, step %d: position %d (place %d of the deal) on rank "
                              "%d, not node %d",
                              view, carried ? " (carried)" : "", st, sorted[i], i, got, want);
                node_of[sorted[i]] = want;
            }
            for (int node = 0; node < N; node++) { /* its block: its positions, ascending */
                int32_t cnt = -1, at = 0;
                const int32_t *pos = dh__sched_node_positions(s, st, node, &cnt);
                ck_assert_ptr_nonnull(pos);
                for (int k = 0; k < G; k++)
                    if (node_of[k] == node) {
                        ck_assert_int_lt(at, cnt);
                        ck_assert_int_eq(pos[at], k);
                        /* a node a replica has not placed: its ranks round-robin in order */
                        if (view >= 0 && node != view)
                            ck_assert_int_eq(dh__sched_rank_of(s, st, k), node * PER + at % PER);
                        at++;
                    }
                ck_assert_int_eq(at, cnt);
            }
        }
        dh__sched_free(s);
        ck_assert_ptr_null(w.carry); /* carried no more once the table is freed */
    }
}
END_TEST

/*
 * A stratified order lays each step out node by node (--order stratified): the deal is that
 * layout, node k taking positions [k G / N, (k + 1) G / N) whatever their costs, from every
 * view; its ranks then partition them (each rank of the node gets some).
 */
START_TEST(a_step_laid_out_by_node_is_dealt_as_laid_out)
{
    static const int shapes[][3] = {{4, 2, 16}, {3, 3, 21}, {2, 4, 8}};
    for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++) {
        int N = shapes[sh][0], per = shapes[sh][1], G = shapes[sh][2];
        for (int node = -1; node < N; node++) {
            world w;
            world_init(&w, DH_POL_HELIX, N * per, N * per, G, 1);
            w.cfg.nodes = N;
            w.cfg.node_local = node >= 0;
            w.cfg.node = node >= 0 ? node : 0;
            w.cfg.order_by_node = 1;
            for (int k = 0; k < MAXS; k++) /* heavy first: a snake would spread them */
                w.row[k].feat.v = (float)(MAXS - k);
            dh__sched *s = make(&w);
            ck_assert_int_ge(dh__sched_rank_of(s, 0, 0), 0); /* step 0 planned */
            const int64_t *order = dh__sched_step_order(s, 0);
            for (int k = 0; k < G; k++) {
                ck_assert_int_eq(order[k], k); /* the draw's positions as drawn */
                ck_assert_msg(dh__sched_rank_of(s, 0, k) / per == k / (G / N),
                              "%d nodes x %d, view %d: position %d on node %d, not %d", N, per,
                              node, k, dh__sched_rank_of(s, 0, k) / per, k / (G / N));
            }
            int64_t got[MAXS];
            for (int r = 0; r < N * per; r++)
                ck_assert_int_gt(dh__sched_batch_samples(s, 0, r, got, MAXS), 0);
            dh__sched_free(s);
        }
    }
}
END_TEST

/* Step 0's batch records and each rank's samples, rank after rank, to compare after
 * regrouping it. */
typedef struct {
    batch_rec b[64];
    int32_t n[64]; /* each rank's count */
    int64_t samples[MAXS];
} step_groups;

/* walked: each batch's members as a walk of the step (regroup) wrote them; else its samples
 * as dh__sched_batch_samples gives them (a replica writes no members for a node it has not
 * settled, and reads them from the node's positions). */
static void groups_of(dh__sched *s, int R, int G, int walked, step_groups *g)
{
    ck_assert_int_le(R, 64);
    ck_assert_int_le(G, MAXS);
    memcpy(g->b, batch_of(s, 0, 0), (size_t)R * sizeof *g->b);
    const int64_t *order = dh__sched_step_order(s, 0);
    int32_t at = 0;
    for (int r = 0; r < R; r++) {
        for (int32_t j = 0; walked && j < g->b[r].ntasks; j++)
            g->samples[at++] = order[s->members[step_slot(s, 0) * G + g->b[r].first + j]];
        g->n[r] = walked ? g->b[r].ntasks
                         : dh__sched_batch_samples(s, 0, r, g->samples + at, MAXS - at);
        at += walked ? 0 : g->n[r];
    }
    ck_assert_int_eq(at, G);
}

/* Where x (before a walk) differs from y (after it): rank + 1, -1 the samples, 0 none. A
 * replica writes no record of a node it has not settled: only such a batch's count and
 * samples are compared. */
static int groups_differ(dh__sched *s, const step_groups *x, const step_groups *y, int R, int G)
{
    for (int r = 0; r < R; r++) {
        int settled = s->settled[step_slot(s, 0) * s->nodes + r / s->ranks_per_node];
        if (x->n[r] != y->n[r] ||
            (settled && (x->b[r].first != y->b[r].first || x->b[r].ntasks != y->b[r].ntasks ||
                         x->b[r].ndone != y->b[r].ndone || x->b[r].bytes != y->b[r].bytes ||
                         x->b[r].pred_gpu_raw != y->b[r].pred_gpu_raw)))
            return r + 1;
    }
    return memcmp(x->samples, y->samples, (size_t)G * sizeof *x->samples) ? -1 : 0;
}

/* A world of `nodes` nodes of R / nodes ranks, seen by the whole job (node < 0) or by node's
 * replica, planning G samples a step. */
static void node_world(world *w, int R, int64_t G, int nodes, int node)
{
    world_init(w, DH_POL_HELIX, R, R, G, 2);
    w->cfg.nodes = nodes;
    w->cfg.node_local = node >= 0;
    w->cfg.node = node >= 0 ? node : 0;
}

START_TEST(a_step_dealt_to_nodes_is_grouped_as_a_walk_of_the_step_groups_it)
{
    /* A step dealt to nodes is grouped by rank from each node's share (group_by_shares);
     * regrouping it by a walk of the whole step (regroup, as after a rebalancing plan) must
     * change nothing: the same members in the same order and the same sums, bit for bit,
     * from every view (the whole job's, and each node's replica, whose other nodes' shares
     * go round-robin over their ranks), with shares that do not divide evenly. */
    static const int shapes[][3] = {{4, 2, 16}, {4, 2, 22}, {3, 3, 20}, {2, 4, 9}};
    for (size_t sh = 0; sh < 2 * sizeof shapes / sizeof *shapes; sh++) {
        /* the second time each shape dividing evenly, its step laid out by node */
        int laid = sh >= sizeof shapes / sizeof *shapes, i = (int)(sh % 4);
        int N = shapes[i][0], per = shapes[i][1], G = shapes[i][2], R = N * per;
        if (laid && G % N)
            continue;
        for (int node = -1; node < N; node++) {
            world w;
            node_world(&w, R, G, N, node);
            w.cfg.order_by_node = laid;
            for (int k = 0; k < MAXS; k++) {
                w.row[k].feat.v = 0.1f + (float)((k * 37) % 23) / 7.0f;
                w.row[k].cpu_pred = 0.05f + (float)((k * 11) % 13) / 50.0f;
                w.row[k].bytes = 100 + (k * 7919) % 1000;
            }
            dh__sched *s = make(&w);
            ck_assert_int_ge(dh__sched_rank_of(s, 0, 0), 0); /* step 0 planned */
            step_groups x, y;
            groups_of(s, R, G, 0, &x);
            dh__sched_regroup(s, 0);
            groups_of(s, R, G, 1, &y);
            int d = groups_differ(s, &x, &y, R, G);
            ck_assert_msg(d == 0, "%d nodes x %d, G %d, view %d: %s %d differs", N, per, G, node,
                          d > 0 ? "rank" : "members", d > 0 ? d - 1 : 0);
            dh__sched_free(s);
        }
    }
}
END_TEST

START_TEST(a_replica_settles_a_node_once_and_refuses_a_move_to_one_it_has_not)
{
    /* A replica settles another node's share from the deal's positions, once; a move that
     * reaches a node it has not settled (whose batches it does not keep) fails and the
     * failure is kept, instead of grouping the wrong samples when the node is settled. */
    for (int touched = 0; touched <= 1; touched++) {
        world w;
        node_world(&w, 8, 16, 4, 0);
        for (int k = 0; k < MAXS; k++)
            w.row[k].feat.v = 0.5f + (float)(k % 5);
        dh__sched *s = make(&w);
        ck_assert_int_ge(dh__sched_rank_of(s, 0, 0), 0);
        if (touched) { /* a sample of node 0 moved to node 1's first rank */
            dh__sched_mark_moved(s, 0);
            dh__sched_mark_moved(s, 2);
            dh__sched_regroup_moved(s, 0);
        }
        ck_assert_int_eq(dh__sched_settle(s, 0, 1), touched ? DH_EMISMATCH : 1);
        ck_assert_int_eq(dh__sched_settle(s, 0, 1), touched ? DH_EMISMATCH : 0);
        ck_assert_int_eq(dh__sched_settle(s, 0, 2), touched ? DH_EMISMATCH : 1);
        dh__sched_free(s);
    }
}
END_TEST

START_TEST(another_nodes_ranks_stepped_at_once_are_each_taken_then_done)
{
    /* dh__sched_ranks_stepped (another node's ranks, as its STEP record says) leaves a
     * replica as each rank's dh__sched_batch_taken then dh__sched_step_done in rank order
     * does: ranks taken, the step's latest and its time, each rank's step finished once,
     * the window's low end, the calibration (a settled node's batches are observed) and
     * the realised gains when a step's last rank finishes. 3 nodes of 2 ranks, node 1's
     * view; node 2 settled at step 1; a record repeated (finished already) and one of a step
     * that left the window change nothing. */
    enum { N = 3, PER = 2, R = N * PER, G = 12, STEPS = 6 };
    typedef struct {
        double taken, released, compute;
    } rec;
    dh__sched *s[2];
    world w[2];
    for (int v = 0; v < 2; v++) {
        node_world(&w[v], R, G, N, 1);
        w[v].cfg.steps = STEPS;
        for (int k = 0; k < MAXS; k++)
            w[v].row[k].feat.v = 0.5f + (float)(k % 7);
        s[v] = make(&w[v]);
    }
    for (int64_t st = 0; st < STEPS; st++) {
        for (int v = 0; v < 2; v++) {
            ck_assert_int_ge(dh__sched_rank_of(s[v], st, 0), 0); /* planned */
            if (st == 1)
                ck_assert_int_eq(dh__sched_settle(s[v], st, 2), 1);
        }
        double t = 1.0 + (double)st;
        for (int v = 0; v < 2; v++) {
            for (int node = 0; node < N; node++) {
                rec r[PER];
                for (int i = 0; i < PER; i++)
                    r[i] = (rec){t + 0.01 * (node * PER + i), t + 0.5 + 0.01 * i,
                                 0.3 + 0.05 * (node * PER + i)};
                for (int again = 0; again <= (st == 2 && node == 2); again++) {
                    if (v == 1 && node != 1) {
                        dh__sched_ranks_stepped(s[v], st, node * PER, PER, &r[0].taken,
                                                &r[0].released, &r[0].compute, sizeof r[0]);
                        continue;
                    }
                    for (int i = 0; i < PER; i++) {
                        dh__sched_batch_taken(s[v], node * PER + i, st, r[i].taken);
                        dh__sched_step_done(s[v], node * PER + i, st, r[i].released,
                                            r[i].compute);
                    }
                }
            }
            if (st == 4) { /* step 0 left the window: its records again change nothing */
                rec r[PER] = {{0.5, 0.7, 9.0}, {0.5, 0.7, 9.0}};
                if (v == 1)
                    dh__sched_ranks_stepped(s[v], 0, 0, PER, &r[0].taken, &r[0].released,
                                            &r[0].compute, sizeof r[0]);
                else
                    for (int i = 0; i < PER; i++) {
                        dh__sched_batch_taken(s[v], i, 0, r[i].taken);
                        dh__sched_step_done(s[v], i, 0, r[i].released, r[i].compute);
                    }
            }
        }
        const dh__sched *a = s[0], *b = s[1];
        ck_assert_int_eq(a->lo, b->lo);
        ck_assert_int_eq(a->planned, b->planned);
        ck_assert_int_eq(a->cur_step, b->cur_step);
        ck_assert(a->cur_time == b->cur_time);
        ck_assert_int_eq(a->epoch, b->epoch);
        for (int r = 0; r < R; r++)
            ck_assert_int_eq(a->taken[r], b->taken[r]);
        for (int64_t q = a->lo; q < a->planned; q++) {
            ck_assert_int_eq(a->finished_ranks[step_slot(a, q)],
                             b->finished_ranks[step_slot(b, q)]);
            ck_assert(!memcmp(a->rank_finished + step_slot(a, q) * R,
                              b->rank_finished + step_slot(b, q) * R, R));
        }
        ck_assert_int_eq(a->calib.gpu_n, b->calib.gpu_n);
        ck_assert(a->reb.realised_gain_s == b->reb.realised_gain_s);
        ck_assert_int_eq(a->mem_in_use, b->mem_in_use);
    }
    ck_assert_int_ge(s[0]->lo, 3);        /* steps retired on the way */
    ck_assert_int_gt(s[0]->calib.gpu_n, 0); /* settled batches observed */
    dh__sched_free(s[0]);
    dh__sched_free(s[1]);
}
END_TEST

START_TEST(a_replica_deals_as_the_job_and_reads_only_the_rows_of_nodes_it_settles)
{
    /* A replica deals a step from its table of each sample's half-octave of cost as the
     * whole job deals it from the costs: every node's positions are the same. It reads the
     * rows of the nodes it settles alone: another node's batches hold only their counts as
     * dealt round-robin (no predicted GPU, no bytes) until it is settled, and then what the
     * whole job's hold; its GPU calibration observes only batches it knows the prediction
     * of; the step's predicted start is its own node's slowest rank. Costs spread over many
     * half-octaves, shares that do not divide evenly; its table (a byte a sample) clips what
     * is 254 half-octaves or more below the dataset's heaviest: with such costs in the step
     * (spread 1), and with a step so much lighter than the dataset's heaviest that it reads
     * its rows (spread 2). */
    enum { N = 4, PER = 2, R = N * PER, G = 22 };
    for (int variant = 0; variant < 3 * N; variant++) {
        int node = variant % N, spread = variant / N;
        world wj, wr;
        node_world(&wj, R, G, N, -1);
        node_world(&wr, R, G, N, node);
        for (int k = 0; k < MAXS; k++) {
            float v = 0.05f * (float)(1u << ((k * 7) % 11)) + (float)((k * 13) % 5) / 9.0f;
            if (spread == 1 && k % 5 == 1) /* 2^133 apart: clipped, and in the step */
                v = k % 2 ? 1e38f : 1e-2f;
            if (spread == 1 && k % 7 == 3) /* no cost: the table's last entry too */
                v = 0.0f;
            if (spread == 2 && k == MAXS - 1) /* not drawn in step 0 */
                v = 1e38f;
            wj.row[k].feat.v = wr.row[k].feat.v = v;
            wj.row[k].bytes = wr.row[k].bytes = 100 + (k * 7919) % 1000;
            wj.row[k].cpu_pred = wr.row[k].cpu_pred = 0.05f + (float)((k * 11) % 13) / 50.0f;
        }
        dh__sched *job = make(&wj), *rep = make(&wr);
        ck_assert_int_ge(dh__sched_rank_of(job, 0, 0), 0);
        ck_assert_int_ge(dh__sched_rank_of(rep, 0, 0), 0);
        double own_max = 0;
        for (int n = 0; n < N; n++) {
            int32_t nj = 0, nr = 0;
            const int32_t *pj = dh__sched_node_positions(job, 0, n, &nj),
                          *pr = dh__sched_node_positions(rep, 0, n, &nr);
            ck_assert(pj && pr);
            ck_assert_int_eq(nj, nr);
            ck_assert_msg(!memcmp(pj, pr, (size_t)nj * sizeof *pj), "view %d: node %d's share",
                          node, n);
        }
        for (int r = 0; r < R; r++) {
            const batch_rec *bj = batch_of(job, 0, r), *br = batch_of(rep, 0, r);
            if (r / PER == node) {
                ck_assert(bj->ntasks == br->ntasks && bj->pred_gpu_raw == br->pred_gpu_raw &&
                          bj->bytes == br->bytes);
                own_max = DH_MAX(own_max, br->pred_gpu_raw);
            } else {
                ck_assert(br->pred_gpu_raw == 0 && br->bytes == 0);
            }
        }
        ck_assert(own_max > 0);
        int clipped = 0; /* the paths the variants are for were taken */
        for (int k = 0; k < MAXS; k++)
            clipped += rep->below[k] == BELOW_CLIP;
        ck_assert(spread ? clipped > 0 : clipped == 0);
        for (int k = 0; spread == 2 && k < G; k++) /* every row read, for the deal */
            ck_assert(rep->slot_gpu[step_slot(rep, 0) * G + k] ==
                      job->slot_gpu[step_slot(job, 0) * G + k]);
        ck_assert(rep->step_start[step_slot(rep, 1)] ==
                  rep->step_start[step_slot(rep, 0)] +
                      dh__calib_gpu(&rep->calib, wr.cfg.gpu.c0 + own_max));
        for (int n = 0; n < N; n++) /* a node's load with no exact cost: its predictions */
            ck_assert(dh__sched_node_load(rep, 0, n, NULL, 0) ==
                      dh__sched_node_load(job, 0, n, NULL, 0));
        /* a batch of a node not settled says nothing to the calibration; its own do */
        int other = (node + 1) % N;
        int64_t seen = rep->calib.gpu_n;
        dh__sched_step_done(rep, other * PER, 0, 1.0, 0.5);
        ck_assert_int_eq(rep->calib.gpu_n, seen);
        dh__sched_step_done(rep, node * PER, 0, 1.0, 0.5);
        ck_assert_int_eq(rep->calib.gpu_n, seen + 1);
        for (int n = 0; n < N; n++) /* settled: its rows read, its batches the job's */
            ck_assert_int_eq(dh__sched_settle(rep, 0, n), n != node);
        for (int r = 0; r < R; r++) {
            const batch_rec *bj = batch_of(job, 0, r), *br = batch_of(rep, 0, r);
            ck_assert_msg(bj->ntasks == br->ntasks && bj->bytes == br->bytes &&
                              bj->pred_gpu_raw == br->pred_gpu_raw,
                          "view %d: rank %d once settled", node, r);
            int64_t a[G], b[G];
            int32_t na = dh__sched_batch_samples(job, 0, r, a, G),
                    nb = dh__sched_batch_samples(rep, 0, r, b, G);
            ck_assert_int_eq(na, nb);
            ck_assert(!memcmp(a, b, (size_t)na * sizeof *a));
        }
        dh__sched_free(job);
        dh__sched_free(rep);
    }
}
END_TEST

START_TEST(a_step_regrouped_after_moves_is_what_a_walk_of_the_step_gives)
{
    /* After agreed moves only the ranks samples moved to or from are regrouped
     * (dh__sched_regroup_moved: a group's plan marks at most its 8 ranks of 64, the other
     * groups' plans most ranks, which regroups the whole step); a walk of the whole step
     * (regroup) must then change nothing, from the job's view and replicas', 32 nodes of
     * 2 ranks in groups of 4. Exact costs 4 times or half the predictions, scattered, make
     * moves pay. */
    enum { N = 32, PER = 2, R = N * PER, G = 128 };
    static const int views[] = {-1, 0, 5, 31};
    int64_t moved_any = 0;
    for (size_t v = 0; v < sizeof views / sizeof *views; v++) {
        for (int others = 0; others <= 1; others++) {
            int node = views[v];
            world w;
            node_world(&w, R, G, N, node);
            for (int k = 0; k < MAXS; k++) {
                w.row[k].feat.v = 1.0f;
                w.row[k].bytes = 100 + k;
            }
            dh__sched *s = make(&w);
            ck_assert_int_ge(dh__sched_rank_of(s, 0, 0), 0);
            float known[G];
            for (int k = 0; k < G; k++) /* a quarter of them heavy, scattered */
                known[k] = ((uint32_t)k * 2654435761u >> 13) % 4 == 0 ? 4.0f : 0.5f;
            uint8_t frozen[R] = {0};
            dh__reb_agreed a = {.frozen = frozen, .known = known, .move_factor = 1.0,
                                .net_factor = 1.0, .count = 1, .other_groups = others};
            dh__sched_rebalance_agreed(s, 0, &a, NULL, NULL);
            moved_any += dh__sched_reb_stats(s)->moved;
            step_groups x, y;
            groups_of(s, R, G, 0, &x);
            dh__sched_regroup(s, 0);
            groups_of(s, R, G, 1, &y);
            int d = groups_differ(s, &x, &y, R, G);
            ck_assert_msg(d == 0, "view %d%s: %s %d differs from a walk of the step", node,
                          others ? ", the other groups' plans" : "",
                          d > 0 ? "rank" : "members", d > 0 ? d - 1 : 0);
            dh__sched_free(s);
        }
    }
    ck_assert_int_gt(moved_any, 0); /* the moves were made: the regrouping was tested */
}
END_TEST

/* Each node's list of exact costs in a test: node n's i-th sample of the step (cost_list). */
typedef struct {
    float list[32][8];
    int64_t ncost;
} node_lists;

static const float *list_of(const void *ctx, int node)
{
    return ((const node_lists *)ctx)->list[node];
}

/* dh__sched_receivers against a walk of the whole step: every rank the plan gives a sample,
 * with its samples under the plan in the step's order (an accept callback; carries out). */
typedef struct {
    dh__sched *s;
    const int32_t *rank_of;
    int64_t st, G;
    int R, next, calls; /* the first rank not yet met; receivers met in all */
    int own_groups;     /* plans of the replica's own group met */
} receivers_check;

static int check_receiver(void *ctx, int r, const int64_t *samples, int32_t n)
{
    receivers_check *c = ctx;
    const int64_t *order = dh__sched_step_order(c->s, c->st);
    int32_t at = 0, gets = 0;
    for (int q = c->next; q < r; q++) /* no rank between the last one and r gets a sample */
        for (int64_t k = 0; k < c->G; k++)
            ck_assert(!(c->rank_of[k] == q && dh__sched_rank_of(c->s, c->st, k) != q));
    for (int64_t k = 0; k < c->G; k++)
        if (c->rank_of[k] == r) {
            ck_assert_int_lt(at, n);
            ck_assert_int_eq(samples[at++], order[k]);
            gets |= dh__sched_rank_of(c->s, c->st, k) != r;
        }
    ck_assert_int_eq(at, n);
    ck_assert(gets);
    c->next = r + 1;
    c->calls++;
    return 0;
}

static receivers_check *receivers_of;

static int accept_checking_receivers(void *ctx, int64_t st, const int32_t *rank_of)
{
    (void)ctx;
    receivers_check *c = receivers_of;
    /* A replica's own group's plan gives its ranks at the group's positions alone (no other
     * sample moves): the whole step's are the placement's with those laid over it. Another
     * group's plan (a benchmark's) gives every position. */
    int32_t np = 0, *full = malloc((size_t)c->G * sizeof *full);
    const int32_t *P = dh__sched_plan_positions(c->s, st, &np);
    ck_assert_ptr_nonnull(full);
    for (int64_t k = 0; k < c->G; k++)
        full[k] = P ? dh__sched_rank_of(c->s, st, k) : rank_of[k];
    for (int32_t i = 0; i < np; i++) {
        ck_assert_int_ge(rank_of[P[i]], 0);
        ck_assert_int_lt(rank_of[P[i]], c->R);
        full[P[i]] = rank_of[P[i]];
    }
    c->own_groups += P != NULL;
    c->rank_of = full;
    c->st = st;
    c->next = 0;
    int rc = dh__sched_receivers(c->s, st, rank_of, check_receiver, c);
    for (int q = c->next; q < c->R; q++) /* nor any rank after the last */
        for (int64_t k = 0; k < c->G; k++)
            ck_assert(!(full[k] == q && dh__sched_rank_of(c->s, st, k) != q));
    free(full);
    return rc;
}

START_TEST(an_agreed_plan_from_the_nodes_lists_is_the_plan_from_every_cost)
{
    /* A replica learns the exact costs of the nodes it plans with from their lists (each
     * node's samples in the step's order, as far as ncost) and every node's load as the node
     * computed it (dh__sched_node_load), where it read every cost of the step: the plans must
     * be the same, bit for bit, with costs unknown (not prepared, or past ncost). 32 nodes of
     * 2 ranks in groups of 4, replicas' views, their own group's plan and the others'. */
    enum { N = 32, PER = 2, R = N * PER, G = 128 };
    static const int views[] = {0, 5, 31};
    int64_t moved_any = 0, receivers_met = 0, own_met = 0;
    for (size_t v = 0; v < sizeof views / sizeof *views; v++) {
        for (int variant = 0; variant < 4; variant++) {
            int node = views[v], others = variant & 1, loads = !(variant & 2);
            dh__sched *s[3]; /* two replicas of node, and the whole job */
            world w[3];      /* as long as the schedulers: a replica reads rows when it
                              * settles a node */
            for (int j = 0; j < 3; j++) {
                node_world(&w[j], R, G, N, j < 2 ? node : -1);
                for (int k = 0; k < MAXS; k++) {
                    w[j].row[k].feat.v = 1.0f;
                    w[j].row[k].bytes = 100 + k;
                }
                s[j] = make(&w[j]);
                ck_assert_int_ge(dh__sched_rank_of(s[j], 0, 0), 0);
            }
            static node_lists nl;
            nl.ncost = 3; /* shares of about 4: the last ones unknown */
            int seen[N] = {0};
            float known[G];
            for (int k = 0; k < G; k++) { /* a walk of the step, as the engine made known */
                int n = dh__sched_rank_of(s[0], 0, k) / PER, i = seen[n]++;
                float c = k % 7 == 0 ? -1.0f /* not prepared */
                          : ((uint32_t)k * 2654435761u >> 13) % 4 == 0 ? 4.0f : 0.5f;
                if (i < nl.ncost)
                    nl.list[n][i] = c;
                known[k] = i < nl.ncost ? c : -1.0f;
            }
            double load[N]; /* each node's, as it computes it over its own share: a replica
                             * reads the rows of the nodes it settles alone, so from the whole
                             * job's view, which deals the step alike */
            for (int n = 0; n < N; n++) {
                int32_t n1 = 0, n2 = 0;
                const int32_t *p1 = dh__sched_node_positions(s[1], 0, n, &n1),
                              *p2 = dh__sched_node_positions(s[2], 0, n, &n2);
                ck_assert(p1 && p2 && n1 == n2 && !memcmp(p1, p2, (size_t)n1 * sizeof *p1));
                load[n] = dh__sched_node_load(s[2], 0, n, nl.list[n], nl.ncost);
            }
            dh__sched_free(s[2]);
            uint8_t frozen[R] = {0};
            dh__reb_agreed a = {.frozen = frozen, .known = known, .move_factor = 1.0,
                                .net_factor = 1.0, .count = 1, .other_groups = others};
            dh__sched_rebalance_agreed(s[0], 0, &a, NULL, NULL);
            dh__reb_agreed b = {.frozen = frozen, .move_factor = 1.0, .net_factor = 1.0,
                                .count = 1, .other_groups = others, .costs_of = list_of,
                                .costs_ctx = &nl, .ncost = nl.ncost,
                                .node_load = loads ? load : NULL};
            receivers_check rc = {s[1], NULL, 0, G, R, 0, 0, 0};
            receivers_of = &rc; /* and its receivers, from its group's positions */
            dh__sched_rebalance_agreed(s[1], 0, &b, accept_checking_receivers, NULL);
            receivers_met += rc.calls;
            own_met += rc.own_groups;
            const dh__reb_stats *x = dh__sched_reb_stats(s[0]), *y = dh__sched_reb_stats(s[1]);
            ck_assert_int_eq(x->considered, y->considered);
            ck_assert_int_eq(x->moved, y->moved);
            ck_assert(x->predicted_gain_s == y->predicted_gain_s);
            for (int k = 0; k < G; k++) /* the same costs learnt: the plans read them */
                ck_assert_msg(dh__sched_prepared_cost(s[0], 0, k) ==
                                  dh__sched_prepared_cost(s[1], 0, k),
                              "view %d, variant %d: position %d learnt %g, from the lists %g",
                              node, variant, k, dh__sched_prepared_cost(s[0], 0, k),
                              dh__sched_prepared_cost(s[1], 0, k));
            for (int k = 0; k < G; k++)
                ck_assert_msg(dh__sched_rank_of(s[0], 0, k) == dh__sched_rank_of(s[1], 0, k),
                              "view %d, variant %d: position %d on rank %d, from the lists %d",
                              node, variant, k, dh__sched_rank_of(s[0], 0, k),
                              dh__sched_rank_of(s[1], 0, k));
            moved_any += x->moved;
            dh__sched_free(s[0]);
            dh__sched_free(s[1]);
        }
    }
    ck_assert_int_gt(moved_any, 0); /* plans were made: their inputs were compared */
    ck_assert_int_gt(receivers_met, 0);
    ck_assert_int_gt(own_met, 0); /* a replica's own group's plan, by its positions, met */
}
END_TEST

START_TEST(rebalancing_finds_the_known_optimal_plan)
{
    /* Four samples predicted equal: placed 2 | 2. Prepared, they turn out to cost 3, 1, 3, 1
     * with both 3s on rank 0 (6 | 2). The optimal plan swaps a 3 for a 1: 4 | 4. */
    world w;
    world_init(&w, DH_POL_HELIX, 2, 1, 4, 1);
    dh__sched *s = make(&w);
    double g[4];
    int r0 = skew_step(s, 0, g);
    prepare_step0(s, g, 4);
    ck_assert_double_eq_tol(rank_load(s, r0, g), 6.0, 1e-9);
    dh__sched_rebalance(s, 0, 1.0, NULL, NULL, NULL);
    ck_assert_double_eq_tol(rank_load(s, 0, g), 4.0, 1e-9);
    ck_assert_double_eq_tol(rank_load(s, 1, g), 4.0, 1e-9);
    const dh__reb_stats *st = dh__sched_reb_stats(s);
    ck_assert_int_eq(st->moved, 2); /* one swap = two moves */
    ck_assert_double_eq_tol(st->predicted_gain_s, 2.0, 1e-9);
    /* Every sample is still in step 0, exactly once, and both batches are ready. */
    int seen[4] = {0};
    for (int r = 0; r < 2; r++) {
        int64_t samples[8];
        int32_t n = dh__sched_batch_samples(s, 0, r, samples, 8);
        ck_assert_int_eq(n, 2);
        for (int32_t k = 0; k < n; k++)
            seen[samples[k]]++;
        ck_assert(dh__sched_batch_ready(s, 0, r));
    }
    for (int k = 0; k < 4; k++)
        ck_assert_int_eq(seen[k], 1);
    dh__sched_free(s);
}
END_TEST

START_TEST(rebalancing_gate_follows_transfer_cost)
{
    world w;
    double g[4];
    /* Huge transfer cost (1 byte/s): the same beneficial plan is refused and counted. */
    world_init(&w, DH_POL_HELIX, 2, 1, 4, 1);
    w.cfg.move_bandwidth = 1.0;
    dh__sched *s = make(&w);
    int r0 = skew_step(s, 0, g);
    prepare_step0(s, g, 4);
    dh__sched_rebalance(s, 0, 1.0, NULL, NULL, NULL);
    ck_assert_int_eq(dh__sched_reb_stats(s)->moved, 0);
    ck_assert_int_eq(dh__sched_reb_stats(s)->gated, 2);
    ck_assert_double_eq_tol(rank_load(s, r0, g), 6.0, 1e-9);
    dh__sched_free(s);
    /* No gain (exact costs already balanced): nothing is considered. */
    world_init(&w, DH_POL_HELIX, 2, 1, 4, 1);
    s = make(&w);
    for (int k = 0; k < 4; k++)
        g[k] = 1.0;
    prepare_step0(s, g, 4);
    dh__sched_rebalance(s, 0, 1.0, NULL, NULL, NULL);
    ck_assert_int_eq(dh__sched_reb_stats(s)->considered, 0);
    dh__sched_free(s);
    /* helix-noreb never moves. */
    world_init(&w, DH_POL_HELIX_NOREB, 2, 1, 4, 1);
    s = make(&w);
    r0 = skew_step(s, 0, g);
    prepare_step0(s, g, 4);
    dh__sched_rebalance(s, 0, 1.0, NULL, NULL, NULL);
    ck_assert_int_eq(dh__sched_reb_stats(s)->plans, 0);
    dh__sched_free(s);
}
END_TEST

START_TEST(only_prepared_samples_move)
{
    /* Rank 0's two samples are prepared and heavy; rank 1's are not prepared yet: nothing of
     * rank 1 may move, and rank 1 keeps its unprepared samples. */
    world w;
    world_init(&w, DH_POL_HELIX, 2, 2, 4, 1);
    dh__sched *s = make(&w);
    int r0 = dh__sched_rank_of(s, 0, 0);
    dh__task t[4];
    int got = 0;
    for (int k = 0; k < 4; k++)
        ck_assert_int_eq(dh__sched_next_task(s, k % 2, 0.0, &t[got++]), 0);
    for (int k = 0; k < 4; k++)
        if (t[k].rank == r0)
            dh__sched_task_done(s, &t[k], 0.0, 0.1, 5.0);
    dh__sched_rebalance(s, 0, 1.0, NULL, NULL, NULL);
    for (int k = 0; k < 4; k++)
        if (t[k].rank != r0)
            ck_assert_int_eq(dh__sched_rank_of(s, 0, t[k].pos), t[k].rank);
    /* One heavy sample moved to rank 1 (5 + 1 + 1 < 10). */
    ck_assert_int_eq(dh__sched_reb_stats(s)->moved, 1);
    dh__sched_free(s);
}
END_TEST

START_TEST(frozen_ranks_neither_give_nor_receive)
{
    /* Six equal predictions over 3 ranks (2 | 2 | 2); prepared, rank a's two cost 5 and the
     * rest 1 (10 | 2 | 2). Rank b is frozen (the engine is writing into its batch): only a and
     * c may trade, which gives 6 | 2 | 6. */
    world w;
    world_init(&w, DH_POL_HELIX, 3, 1, 6, 1);
    dh__sched *s = make(&w);
    int a = dh__sched_rank_of(s, 0, 0), b = (a + 1) % 3, c = (a + 2) % 3;
    double g[6];
    int64_t before[8];
    for (int k = 0; k < 6; k++)
        g[k] = dh__sched_rank_of(s, 0, k) == a ? 5.0 : 1.0;
    prepare_step0(s, g, 6);
    int32_t nb = dh__sched_batch_samples(s, 0, b, before, 8);
    uint8_t frozen[3] = {0};
    frozen[b] = 1;
    dh__sched_rebalance(s, 0, 1.0, frozen, NULL, NULL);
    int64_t after[8];
    ck_assert_int_eq(dh__sched_batch_samples(s, 0, b, after, 8), nb);
    ck_assert_mem_eq(after, before, (size_t)nb * sizeof *after);
    ck_assert_double_eq_tol(rank_load(s, a, g), 6.0, 1e-9);
    ck_assert_double_eq_tol(rank_load(s, c, g), 6.0, 1e-9);
    ck_assert_int_gt(dh__sched_reb_stats(s)->moved, 0);
    dh__sched_free(s);
}
END_TEST

typedef struct {
    int calls, differs;
    dh__sched *s;
} accept_ctx;

static int refuse_plan(void *ctx, int64_t step, const int32_t *rank_of)
{
    accept_ctx *x = ctx;
    x->calls++;
    for (int64_t k = 0; k < 4; k++)
        x->differs += rank_of[k] != dh__sched_rank_of(x->s, step, k);
    return 1;
}

START_TEST(refused_plans_leave_the_placement_and_are_counted)
{
    world w;
    world_init(&w, DH_POL_HELIX, 2, 1, 4, 1);
    dh__sched *s = make(&w);
    double g[4];
    int r0 = skew_step(s, 0, g);
    prepare_step0(s, g, 4);
    /* The engine could not carry the plan out (no buffer room): nothing moves. */
    accept_ctx x = {0, 0, s};
    dh__sched_rebalance(s, 0, 1.0, NULL, refuse_plan, &x);
    ck_assert_int_eq(x.calls, 1);
    ck_assert_int_eq(x.differs, 2); /* it was shown the swap before it was applied */
    ck_assert_int_eq(dh__sched_reb_stats(s)->refused, 2);
    ck_assert_int_eq(dh__sched_reb_stats(s)->moved, 0);
    ck_assert_double_eq_tol(rank_load(s, r0, g), 6.0, 1e-9);
    dh__sched_free(s);

    /* A plan that would put a receiving rank over the token cap is refused as well. Costs
     * 3, 1 | 1, 1: the only gain is moving the 1 over (3 | 3), which gives that rank 3 x 10
     * tokens against a cap of 20. Without the cap it moves. */
    int64_t tokens[MAXS];
    for (int i = 0; i < MAXS; i++)
        tokens[i] = 10;
    for (int capped = 1; capped >= 0; capped--) {
        world_init(&w, DH_POL_HELIX, 2, 1, 4, 1);
        w.cfg.pred.tokens = tokens;
        w.cfg.rank_token_cap = capped ? 20 : 0;
        s = make(&w);
        r0 = dh__sched_rank_of(s, 0, 0);
        for (int k = 0; k < 4; k++)
            g[k] = 1.0;
        g[0] = 3.0;
        prepare_step0(s, g, 4);
        dh__sched_rebalance(s, 0, 1.0, NULL, NULL, NULL);
        ck_assert_int_eq(dh__sched_reb_stats(s)->moved, capped ? 0 : 1);
        ck_assert_int_eq(dh__sched_reb_stats(s)->refused, capped ? 1 : 0);
        ck_assert_double_eq_tol(rank_load(s, r0, g), capped ? 4.0 : 3.0, 1e-9);
        dh__sched_free(s);
    }
}
END_TEST

START_TEST(measured_move_cost_closes_the_gate)
{
    /* Two steps with the same skew (3, 3 | 1, 1 by exact cost). Step 0's swap passes the gate
     * on the modelled cost (microseconds); the engine then reports that carrying plans out
     * takes 100 s each, so step 1's identical swap is gated. */
    world w;
    world_init(&w, DH_POL_HELIX, 2, 1, 4, 2);
    dh__sched *s = make(&w);
    double g[8];
    for (int st = 0; st < 2; st++)
        skew_step(s, st, g);
    for (int k = 0; k < 8; k++) {
        dh__task t;
        ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
        dh__sched_task_done(s, &t, 0.0, 0.1, g[t.sample]);
    }
    const dh__reb_stats *st = dh__sched_reb_stats(s);
    dh__sched_rebalance(s, 0, 1.0, NULL, NULL, NULL);
    ck_assert_int_eq(st->moved, 2);
    ck_assert_double_eq(st->move_factor, 1.0);
    for (int i = 0; i < 20; i++)
        dh__sched_observe_move(s, 100.0);
    ck_assert_double_gt(st->move_factor, 1e6);
    ck_assert_double_eq_tol(st->move_s, 2000.0, 1e-6);
    dh__sched_rebalance(s, 1, 2.0, NULL, NULL, NULL);
    ck_assert_int_eq(st->moved, 2);
    ck_assert_int_eq(st->gated, 2);
    dh__sched_free(s);
}
END_TEST

START_TEST(measured_wire_cost_closes_the_gates_between_nodes)
{
    /* The same skew on two nodes, one rank each: every move crosses the network. Step 0's
     * swap passes on the network model (us) and is counted as remote; transfers between
     * nodes then measure 100 s each, so step 1's identical swap is gated, and so is lending
     * a sample whose lateness (1 s) beat the model's shipping cost before. */
    world w;
    world_init(&w, DH_POL_HELIX, 2, 2, 4, 2);
    w.cfg.nodes = 2;
    dh__sched *s = make(&w);
    double g[8];
    for (int st = 0; st < 2; st++)
        skew_step(s, st, g);
    dh__task t;
    for (int wk = 0; wk < 2; wk++)
        while (dh__sched_next_task(s, wk, 0.0, &t) == 0)
            dh__sched_task_done(s, &t, 0.0, 0.1, g[t.step * 4 + (t.pos % 4)]);
    const dh__reb_stats *st = dh__sched_reb_stats(s);
    ck_assert_int_eq(dh__sched_lend_gate(s, 1.0, 1 << 20), 1);
    dh__sched_rebalance(s, 0, 1.0, NULL, NULL, NULL);
    ck_assert_int_eq(st->moved, 2);
    ck_assert_int_eq(st->moved_remote, 2);
    ck_assert_int_gt(st->remote_bytes, 0);
    ck_assert_double_eq(st->net_factor, 1.0);
    for (int i = 0; i < 20; i++)
        dh__sched_observe_wire(s, 1 << 20, 100.0);
    ck_assert_double_gt(st->net_factor, 1e5); /* 100 s against ~100 us */
    ck_assert_int_eq(st->net_obs, 20);
    ck_assert_double_eq(st->move_factor, 1.0); /* moves within a node are another matter */
    dh__sched_rebalance(s, 1, 2.0, NULL, NULL, NULL);
    ck_assert_int_eq(st->moved, 2);
    ck_assert_int_eq(st->gated, 2);
    ck_assert_int_eq(dh__sched_lend_gate(s, 1.0, 1 << 20), 0);
    dh__sched_free(s);
}
END_TEST

START_TEST(an_agreed_plan_is_applied_by_every_node_and_counted_by_one)
{
    /* Agreed between nodes (dh__sched_rebalance_agreed): the plan comes from the inputs
     * given (frozen ranks, the exchanged exact costs, factors), the placement changes on a
     * node that does not count it, and its stats stay as they were there; a frozen rank
     * keeps its samples. Replicas that saw different samples prepared (one all, one none:
     * a sample may be prepared on its node after the costs were exchanged) make the same
     * plan from the same exchanged costs. */
    for (int count = 0; count <= 1; count++) {
        world w, wb;
        world_init(&w, DH_POL_HELIX, 2, 1, 4, 1);
        world_init(&wb, DH_POL_HELIX, 2, 1, 4, 1);
        dh__sched *s = make(&w), *b = make(&wb);
        double g[4];
        float known[4];
        int r0 = skew_step(s, 0, g);
        ck_assert_int_eq(skew_step(b, 0, g), r0);
        for (int k = 0; k < 4; k++)
            known[k] = (float)g[k];
        prepare_step0(s, g, 4);
        uint8_t frozen[2] = {0, 0};
        dh__reb_agreed a = {.frozen = frozen, .known = known, .move_factor = 1.0,
                            .net_factor = 1.0, .count = count};
        frozen[r0] = 1;
        dh__sched_rebalance_agreed(s, 0, &a, NULL, NULL);
        ck_assert_double_eq_tol(rank_load(s, r0, g), 6.0, 1e-9); /* frozen: nothing moves */
        frozen[r0] = 0;
        dh__sched_rebalance_agreed(s, 0, &a, NULL, NULL);
        dh__sched_rebalance_agreed(b, 0, &a, NULL, NULL);
        ck_assert_double_eq_tol(rank_load(s, r0, g), 4.0, 1e-9);
        for (int k = 0; k < 4; k++)
            ck_assert_int_eq(dh__sched_rank_of(b, 0, k), dh__sched_rank_of(s, 0, k));
        ck_assert_int_eq(dh__sched_reb_stats(s)->moved, count ? 2 : 0);
        ck_assert_int_eq(dh__sched_reb_stats(s)->plans, count ? 1 : 0);
        dh__sched_free(s);
        dh__sched_free(b);
    }
}
END_TEST

/* Several nodes of several ranks agree their moves by groups of nodes (rebalance.c): each
 * replica plans its own group's moves alone; the other groups' moves, planned on request
 * (other_groups), are what those groups' replicas made; every replica's view of its own
 * node is the job's (the nodes it did not plan with it keeps on the right node only); samples move only within groups of at most DH_MOVE_GROUP nodes. 8 nodes
 * of 2 ranks; nodes 0 and 1 prepared samples 10x heavier than predicted (the load order
 * puts them in different groups: both groups move). */
START_TEST(nodes_agree_their_moves_by_groups)
{
    enum { NODES = 8, PER = 2, R = NODES * PER, G = 64 };
    world w;
    world_init(&w, DH_POL_HELIX, R, R, G, 1);
    w.cfg.nodes = NODES;
    for (int i = 0; i < G; i++)
        w.row[i].feat.v = 1.0f + (float)(i % 7);
    float known[G];
    uint8_t frozen[R] = {0};
    static int32_t before[G], own[NODES][G], all[NODES][G];
    for (int node = 0; node < NODES; node++) {
        w.cfg.node_local = 1;
        w.cfg.node = node;
        w.drawn = 0;
        dh__sched *s = make(&w);
        for (int k = 0; k < G; k++) {
            int r = dh__sched_rank_of(s, 0, k);
            if (node == 0)
                before[k] = r;
            ck_assert_int_eq(r / PER, before[k] / PER); /* every replica dealt the step alike */
            known[k] = w.row[k].feat.v * (r / PER < 2 ? 10.0f : 1.0f);
        }
        dh__reb_agreed a = {.frozen = frozen, .known = known, .move_factor = 1.0,
                            .net_factor = 1.0};
        dh__sched_rebalance_agreed(s, 0, &a, NULL, NULL);
        for (int k = 0; k < G; k++)
            own[node][k] = dh__sched_rank_of(s, 0, k);
        a.other_groups = 1;
        dh__sched_rebalance_agreed(s, 0, &a, NULL, NULL);
        for (int k = 0; k < G; k++)
            all[node][k] = dh__sched_rank_of(s, 0, k);
        dh__sched_free(s);
    }
    int group[NODES]; /* nodes joined by a sample moving between them */
    for (int n = 0; n < NODES; n++)
        group[n] = n;
    int planned_alone = 0, across = 0;
    double load[2][R] = {{0}};
    for (int k = 0; k < G; k++) {
        int from = before[k] / PER, to = all[0][k] / PER;
        for (int n = 0; n < NODES; n++) {
            ck_assert_int_eq(all[n][k], all[0][k]); /* every replica's groups plan alike */
            ck_assert(own[n][k] / PER == from || own[n][k] / PER == to);
            if (from == n || to == n) /* what it gives and gets: as the job's plan */
                ck_assert_int_eq(own[n][k], all[0][k]);
            planned_alone += own[n][k] / PER != to; /* another group's move, not made here */
        }
        if (from != to) {
            across++;
            int a = group[from], b = group[to];
            for (int n = 0; n < NODES; n++)
                if (group[n] == b)
                    group[n] = a;
        }
        load[0][before[k]] += known[k];
        load[1][all[0][k]] += known[k];
    }
    ck_assert_int_gt(across, 0);
    ck_assert_int_gt(planned_alone, 0); /* a replica did not plan the other groups' moves */
    int sizes[NODES] = {0}, groups = 0;
    for (int n = 0; n < NODES; n++)
        groups += sizes[group[n]]++ == 0;
    for (int n = 0; n < NODES; n++)
        ck_assert_int_le(sizes[n], DH_MOVE_GROUP);
    ck_assert_int_ge(groups, 2);
    double max_before = 0, max_after = 0;
    for (int r = 0; r < R; r++) {
        max_before = DH_MAX(max_before, load[0][r]);
        max_after = DH_MAX(max_after, load[1][r]);
    }
    ck_assert_double_lt(max_after, max_before);
}
END_TEST

/*
 * Two nodes, one rank and one worker each; 3 samples per rank per step, each
 * 8 s of CPU and `gpu` s of GPU. Both nodes finish step 0 at once; node 1's
 * worker starts its first step-1 task (busy until 8 s), node 0's worker
 * finishes all of its own. Returns the task node 0's worker gets next (or
 * -1): step 1's deadline is 3 x gpu, and node 1's queue ends at 24 s.
 */
static int lend_after_backlog(double gpu, dh__task *lent, int64_t *nlent)
{
    world w;
    world_init(&w, DH_POL_HELIX, 2, 2, 6, 2);
    w.cfg.nodes = 2;
    for (int i = 0; i < 12; i++) {
        w.row[i].cpu_pred = 8.0f;
        w.row[i].feat.v = (float)gpu;
    }
    dh__sched *s = make(&w);
    dh__task t;
    for (int k = 0; k < 3; k++) { /* node 1: step 0 */
        ck_assert_int_eq(dh__sched_next_task(s, 1, 0.0, &t), 0);
        ck_assert_int_eq(t.step, 0);
        dh__sched_task_done(s, &t, 0.0, 8.0, -1);
    }
    ck_assert_int_eq(dh__sched_next_task(s, 1, 0.0, &t), 0); /* busy until 8 s */
    ck_assert_int_eq(t.step, 1);
    for (int k = 0; k < 6; k++) { /* node 0: both steps */
        ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
        ck_assert_int_eq(t.rank, 0);
        dh__sched_task_done(s, &t, 0.0, 8.0, -1);
    }
    int rc = dh__sched_next_task(s, 0, 0.0, lent);
    *nlent = dh__sched_reb_stats(s)->lent;
    dh__sched_free(s);
    return rc == 0 ? lent->rank : -1;
}

START_TEST(idle_node_lends_into_a_backlog_before_it_is_late)
{
    /* GPU 6 s: deadline 18 s; node 1's last queued task would end at 24 s. The least-slack
     * task itself could still start in time (slack 10 s), but the backlog behind it is late:
     * node 0 takes it and ships the result back. */
    dh__task t;
    int64_t n;
    ck_assert_int_eq(lend_after_backlog(6.0, &t, &n), 1);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(t.step, 1);
    ck_assert_double_gt(t.ship_s, 0);
    /* GPU 10 s: deadline 30 s, the queue ends at 24 s: nothing is late, nothing is lent. */
    ck_assert_int_eq(lend_after_backlog(10.0, &t, &n), -1);
    ck_assert_int_eq(n, 0);
}
END_TEST

START_TEST(the_latest_node_lends_first_ties_to_the_lower_node)
{
    /* Four nodes of one rank and one worker, 3 samples a rank and step, GPU 6 s (deadline of
     * step 1: 18 s). Nodes 1 and 3 run the same backlog as above (late by 6 s), node 2 and
     * node 0 drain theirs. Node 0's idle worker takes node 1's task (a tie with node 3: the
     * lower node); once node 1's own worker takes its last task, node 0 takes node 3's. */
    world w;
    world_init(&w, DH_POL_HELIX, 4, 4, 12, 2);
    w.cfg.nodes = 4;
    for (int i = 0; i < 24; i++) {
        w.row[i].cpu_pred = 8.0f;
        w.row[i].feat.v = 6.0f;
    }
    dh__sched *s = make(&w);
    dh__task t;
    for (int node = 1; node < 4; node++) {
        int take = node == 2 ? 6 : 4; /* 1 and 3: step 0, then one of step 1 runs until 8 s */
        for (int k = 0; k < take; k++) {
            ck_assert_int_eq(dh__sched_next_task(s, node, 0.0, &t), 0);
            ck_assert_int_eq(t.rank, node);
            if (k < 3 || node == 2)
                dh__sched_task_done(s, &t, 0.0, 8.0, -1);
        }
    }
    for (int k = 0; k < 6; k++) { /* node 0: both steps */
        ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
        ck_assert_int_eq(t.rank, 0);
        dh__sched_task_done(s, &t, 0.0, 8.0, -1);
    }
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
    ck_assert_int_eq(t.rank, 1);
    ck_assert_double_gt(t.ship_s, 0);
    ck_assert_int_eq(dh__sched_next_task(s, 1, 0.0, &t), 0); /* node 1's last own task */
    ck_assert_int_eq(t.rank, 1);
    ck_assert_int_eq(dh__sched_next_task(s, 0, 0.0, &t), 0);
    ck_assert_int_eq(t.rank, 3);
    ck_assert_int_eq(dh__sched_reb_stats(s)->lent, 2);
    dh__sched_free(s);
}
END_TEST

START_TEST(calibration_converges_on_synthetic_truth)
{
    /* Truth is 1.5x the CPU model for video and 0.8x the GPU model, with 20% noise. */
    dh__calib c;
    dh__calib_init(&c);
    srand(3);
    for (int i = 0; i < 2000; i++) {
        double pred = 0.1 + (rand() % 100) / 100.0;
        double noise = exp(0.2 * ((rand() % 2001) / 1000.0 - 1.0));
        dh__calib_cpu_observe(&c, DH_CLS_VIDEO_H264, pred, 1.5 * pred * noise);
        dh__calib_gpu_observe(&c, pred, 0.8 * pred * noise);
        /* the kept scale is the learnt log ratio's, after every observation, bit for bit */
        ck_assert(dh__calib_cpu(&c, DH_CLS_VIDEO_H264, pred) ==
                  pred * exp(c.cpu_log_ratio[DH_CLS_VIDEO_H264]));
    }
    ck_assert_double_eq_tol(dh__calib_cpu(&c, DH_CLS_VIDEO_H264, 1.0), 1.5, 0.15);
    ck_assert_double_eq_tol(dh__calib_gpu(&c, 1.0), 0.8, 0.08);
    ck_assert_double_eq_tol(dh__calib_cpu(&c, DH_CLS_JPEG, 1.0), 1.0, 1e-12); /* untouched */
    ck_assert_double_lt(dh__calib_cpu_mape(&c), 0.3); /* early errors included */
    ck_assert_double_gt(dh__calib_cpu_mape(&c), 0.0);
}
END_TEST

START_TEST(policy_names_round_trip)
{
    for (int p = 0; p < DH_POL_COUNT; p++)
        ck_assert_int_eq(dh__policy_from_name(dh__policy_name((dh__policy)p)), p);
    ck_assert_int_eq(dh__policy_from_name("ray"), -1);
    world w;
    world_init(&w, DH_POL_HELIX, 0, 1, 1, 1);
    dh__sched *s;
    ck_assert_int_eq(dh__sched_new(&w.cfg, &s), DH_EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("sched");
    ADD_TEST(tc, pool_is_fifo_in_submission_order);
    ADD_TEST(tc, local_workers_are_private_and_build_whole_batches);
    ADD_TEST(tc, local_prefetch_is_two_batches_per_worker);
    ADD_TEST(tc, the_window_not_the_run_sizes_the_scheduler);
    ADD_TEST(tc, an_order_source_failure_is_an_error_not_idleness);
    ADD_TEST(tc, a_drawn_cpu_is_the_order_sources_only_when_it_draws_one);
    ADD_TEST(tc, local_with_more_ranks_than_workers_stays_in_bounds);
    ADD_TEST(tc, least_slack_starts_a_heavy_sample_three_steps_ahead_first);
    ADD_TEST(tc, window_is_bounded_by_memory);
    ADD_TEST(tc, a_steps_batches_are_due_smallest_cpu_first);
    ADD_TEST(tc, a_large_nodes_batches_are_due_smallest_cpu_first_too);
    ADD_TEST(tc, steps_are_planned_ahead_of_admission_for_the_fetchers);
    ADD_LOOP_TEST(tc, heavy_late_sample_is_split_into_keyframe_parts, 0, 2);
    ADD_TEST(tc, a_split_samples_latest_start_counts_one_part);
    ADD_TEST(tc, balanced_placement_evens_predicted_gpu);
    ADD_TEST(tc, each_node_places_its_share_of_the_draw);
    ADD_TEST(tc, the_deal_to_nodes_gives_every_node_one_of_each_run_of_classes);
    ADD_TEST(tc, the_deal_follows_its_definition_with_a_short_last_run);
    ADD_TEST(tc, a_step_dealt_to_nodes_is_grouped_as_a_walk_of_the_step_groups_it);
    ADD_TEST(tc, a_step_laid_out_by_node_is_dealt_as_laid_out);
    ADD_TEST(tc, a_replica_settles_a_node_once_and_refuses_a_move_to_one_it_has_not);
    ADD_TEST(tc, another_nodes_ranks_stepped_at_once_are_each_taken_then_done);
    ADD_TEST(tc, a_replica_deals_as_the_job_and_reads_only_the_rows_of_nodes_it_settles);
    ADD_TEST(tc, a_step_regrouped_after_moves_is_what_a_walk_of_the_step_gives);
    ADD_TEST(tc, an_agreed_plan_from_the_nodes_lists_is_the_plan_from_every_cost);
    ADD_TEST(tc, rebalancing_finds_the_known_optimal_plan);
    ADD_TEST(tc, rebalancing_gate_follows_transfer_cost);
    ADD_TEST(tc, only_prepared_samples_move);
    ADD_TEST(tc, frozen_ranks_neither_give_nor_receive);
    ADD_TEST(tc, refused_plans_leave_the_placement_and_are_counted);
    ADD_TEST(tc, measured_move_cost_closes_the_gate);
    ADD_TEST(tc, measured_wire_cost_closes_the_gates_between_nodes);
    ADD_TEST(tc, an_agreed_plan_is_applied_by_every_node_and_counted_by_one);
    ADD_TEST(tc, nodes_agree_their_moves_by_groups);
    ADD_TEST(tc, idle_node_lends_into_a_backlog_before_it_is_late);
    ADD_TEST(tc, the_latest_node_lends_first_ties_to_the_lower_node);
    ADD_TEST(tc, calibration_converges_on_synthetic_truth);
    ADD_TEST(tc, policy_names_round_trip);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
