/*
 * test_sim.c - metrics and bound on hand-built records, the simulator's
 * determinism and accounting, the JSON contract, the trace, and the rule
 * that policies never read ground truth.
 */
#include "metrics/metrics.h"
#include "run/run.h"
#include "workloads/workloads.h"
#include "testutil.h"

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* Defect 16 of issue 22: the default budget never refuses its own run. On several nodes each
 * node's share of it fell under one largest batch where samples vary widely (a run refused
 * with "1070.2 MiB is below the 1073.3 MiB this run needs"). Every workload, 2 to 8 nodes. */
START_TEST(a_nodes_default_budget_holds_its_largest_batch)
{
    for (const char *const *w = dh_workload_names(); *w; w++)
        for (int nodes = 2; nodes <= 8; nodes *= 2) {
            dh_run_config c;
            dh_run_config_default(&c);
            c.workload = *w;
            c.policy = "helix";
            c.ranks = 8;
            c.workers = 8;
            c.nodes = nodes;
            c.steps = 2;
            dh__run run;
            char err[256] = "";
            ck_assert_msg(dh__run_setup(&c, &run, err, sizeof err) == 0, "%s", err);
            for (int leases = 0; leases <= 4; leases += 4) {
                dh__run node = run;
                node.cfg.memory_budget = dh__run_node_budget(&run, 0, leases);
                ck_assert_msg(dh__run_check_budget(&node, leases, err, sizeof err) == 0,
                              "%s on %d nodes: %s", *w, nodes, err);
            }
            dh__run_free(&run);
        }
}
END_TEST

/* Sample i of m as a manifest line, from the public accessors. The table keeps reals as
 * floats: an audio duration (generated to the millisecond) is printed to the millisecond,
 * a rate (a whole number) exactly. */
static void line_of(const dh_manifest *m, int64_t i, char *buf, size_t cap)
{
    dh_sample_info si;
    ck_assert_int_eq(dh_manifest_sample(m, i, &si), 0);
    size_t n = (size_t)snprintf(buf, cap, "{\"id\":\"%s\",\"text_tokens\":%lld,\"media\":[", si.id,
                                (long long)si.text_tokens);
    for (int32_t j = 0; j < si.media_count; j++) {
        dh_media_info mi;
        ck_assert_int_eq(dh_manifest_media(m, i, j, &mi), 0);
        n += (size_t)snprintf(buf + n, cap - n, "%s{\"type\":\"%s\",\"path\":\"%s\",\"codec\":\"%s\"",
                              j ? "," : "", dh_media_type_name(mi.type), mi.path,
                              dh_codec_name(mi.codec));
        if (mi.type == DH_MEDIA_AUDIO)
            n += (size_t)snprintf(buf + n, cap - n, ",\"sample_rate\":%d,\"channels\":%d,"
                                  "\"duration\":%.3f", mi.sample_rate, mi.channels, mi.duration_s);
        else
            n += (size_t)snprintf(buf + n, cap - n, ",\"width\":%d,\"height\":%d", mi.width,
                                  mi.height);
        if (mi.type == DH_MEDIA_VIDEO) {
            n += (size_t)snprintf(buf + n, cap - n, ",\"fps\":%.17g,\"frames\":%lld,\"keyframes\":[",
                                  mi.fps, (long long)mi.frames);
            for (int32_t k = 0; k < mi.keyframe_count; k++)
                n += (size_t)snprintf(buf + n, cap - n, "%s%d", k ? "," : "", mi.keyframes[k]);
            n += (size_t)snprintf(buf + n, cap - n, "]");
        }
        n += (size_t)snprintf(buf + n, cap - n, "}");
    }
    snprintf(buf + n, cap - n, "]}");
    ck_assert_uint_lt(n + 2, cap);
}

/* The generators build samples in memory: each workload's table and hash must be those of
 * its samples written as manifest lines and parsed. */
/* The cost table and the truth of one manifest, built on `threads` threads. */
static int build_on(int threads, const dh_manifest *m, const dh_spec *spec, dh__samples *tab,
                    dh__truth *t, char *err, size_t errlen)
{
    dh__cpu_model cpu;
    dh__cpu_model_default(&cpu);
    dh__parallel_set_max(threads);
    int rc = dh__samples_build(m, spec, &cpu, tab, err, errlen);
    if (!rc) {
        ck_assert_int_eq(dh__truth_init(t, tab->n), 0);
        dh__gpu_model g = {1, 1.0 / 8000, 0.5, 1.0 / 3000, 0.01};
        dh__stress st = {.cpu_sigma = 0.4, .cpu_heavy_frac = 0.1, .cpu_heavy_k = 5,
                         .understate_frac = 0.2, .understate_k = 3, .understate_told = 1};
        dh__truth_cpu(t, m, tab->row, 11, 1.5);
        dh__truth_cpu_stress(t, m, tab->row, 11, &st);
        dh__truth_gpu(t, m, tab->row, &g, 11);
        dh__truth_understate(t, m, tab->row, &g, 11, &st);
    }
    dh__parallel_set_max(0);
    return rc;
}

START_TEST(the_cost_table_and_truth_are_the_same_on_any_number_of_threads)
{
    dh_manifest *m;
    dh_spec *spec;
    ck_assert_int_eq(dh_workload_generate("omni-mix", 3001, 7, &m), 0);
    ck_assert_int_eq(dh_spec_builtin("omni-mix", &spec), 0);
    dh__samples one, many;
    dh__truth t1, tn;
    char err[256] = "";
    ck_assert_int_eq(build_on(1, m, spec, &one, &t1, err, sizeof err), 0);
    for (int threads = 2; threads <= 5; threads += 3) {
        ck_assert_int_eq(build_on(threads, m, spec, &many, &tn, err, sizeof err), 0);
        ck_assert_int_eq(many.n, 3001);
        int differ = 0;
        for (int64_t i = 0; i < one.n; i++) {
            const dh__sample_row *a = &one.row[i], *b = &many.row[i];
            differ += memcmp(&a->feat, &b->feat, sizeof a->feat) || a->bytes != b->bytes ||
                      a->cpu_pred != b->cpu_pred || a->cls != b->cls ||
                      one.segments[i] != many.segments[i] || one.tokens[i] != many.tokens[i] ||
                      t1.of[i].cpu != tn.of[i].cpu || t1.of[i].gpu != tn.of[i].gpu;
        }
        ck_assert_int_eq(differ, 0);
        dh__samples_free(&many);
        dh__truth_free(&tn);
    }
    dh__samples_free(&one);
    dh__truth_free(&t1);
    dh_spec_free(spec);
    dh_manifest_free(m);
}
END_TEST

START_TEST(a_cost_table_names_its_first_bad_sample_on_any_number_of_threads)
{
    /* Native size, 100 frames: a 4000 x 4000 video is 4.8 GB of output, over an item's 4 GiB;
     * 320 x 240 is 23 MB. Four threads cut 40 samples into ranges of 10: a bad sample in the
     * first and in the last, then in the last alone. */
    dh_spec *spec = NULL;
    const char *sj = "{\"video\":{\"frames\":100,\"resize\":{\"mode\":\"native\"}}}";
    ck_assert_int_eq(dh_spec_parse(sj, strlen(sj), &spec, NULL, 0), 0);
    static const int bad[2][2] = {{9, 31}, {31, -1}};
    for (int c = 0; c < 2; c++)
        for (int threads = 1; threads <= 4; threads += 3) {
            dh_manifest *m;
            ck_assert_int_eq(dh_manifest_new("", NULL, &m), 0);
            for (int i = 0; i < 40; i++) {
                int big = i == bad[c][0] || i == bad[c][1];
                char line[512];
                snprintf(line, sizeof line, "{\"id\":\"s%02d\",\"media\":[{\"type\":\"video\","
                         "\"path\":\"v%d.mp4\",\"width\":%d,\"height\":%d,\"fps\":25,"
                         "\"frames\":250}]}", i, i, big ? 4000 : 320, big ? 4000 : 240);
                char perr[256] = "";
                ck_assert_msg(!dh_manifest_parse_line(m, line, strlen(line), i + 1, perr,
                                                     sizeof perr), "%s", perr);
            }
            dh__samples tab;
            dh__truth t;
            char err[256] = "";
            ck_assert_int_eq(build_on(threads, m, spec, &tab, &t, err, sizeof err), DH_ELIMIT);
            char want[32];
            snprintf(want, sizeof want, "sample \"s%02d\":", bad[c][0]);
            ck_assert_msg(strstr(err, want) && strstr(err, "MiB of output"), "%d threads: %s",
                          threads, err);
            ck_assert_ptr_null(tab.row); /* freed */
            dh_manifest_free(m);
        }
    dh_spec_free(spec);
}
END_TEST

START_TEST(every_workload_is_its_manifest_lines)
{
    static char line[65536];
    for (const char *const *w = dh_workload_names(); *w; w++) {
        dh_manifest *g, *p;
        ck_assert_int_eq(dh_workload_generate(*w, 400, 5, &g), 0);
        ck_assert_int_eq(dh_manifest_new("", NULL, &p), 0);
        for (int64_t i = 0; i < dh_manifest_count(g); i++) {
            line_of(g, i, line, sizeof line);
            char err[512] = "";
            ck_assert_msg(!dh_manifest_parse_line(p, line, strlen(line), i + 1, err, sizeof err),
                          "%s: %s", *w, err);
        }
        ck_assert_int_eq(dh_manifest_count(p), 400);
        ck_assert_msg(dh_manifest_hash(g) == dh_manifest_hash(p), "%s: the lines differ", *w);
        dh_manifest_free(g);
        dh_manifest_free(p);
    }
}
END_TEST

static int stop_calls;
static int stop_after_two(void *user)
{
    (void)user;
    return ++stop_calls > 2;
}

/* Generating is asked after every 4,096 samples: the third question stops it, at 12,288. */
static void stops_at_the_third_question(void)
{
    dh_manifest *m = NULL;
    stop_calls = 0;
    ck_assert_int_eq(dh__workload_generate_until("laion-images", 100000, 1, stop_after_two, NULL,
                                                 &m),
                     DH_ECANCELED);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(stop_calls, 3);
}

START_TEST(generating_draws_on_a_thread_of_its_own_the_same_manifest)
{
    /* 5,000 samples are five blocks, past the ring of four: the draw waits for the commits */
    for (const char *const *w = dh_workload_names(); *w; w++) {
        dh_manifest *one, *two;
        dh__parallel_set_max(1);
        ck_assert_int_eq(dh_workload_generate(*w, 5000, 3, &one), 0);
        dh__parallel_set_max(2);
        ck_assert_int_eq(dh_workload_generate(*w, 5000, 3, &two), 0);
        ck_assert_int_eq(dh_manifest_count(two), 5000);
        ck_assert_msg(dh_manifest_hash(one) == dh_manifest_hash(two), "%s differs", *w);
        dh_manifest_free(one);
        dh_manifest_free(two);
    }
    /* asked to stop on the caller's thread, at the same sample */
    dh_manifest *m = NULL;
    stops_at_the_third_question();
    /* out of memory anywhere, on either thread: an error, never a hang or a partial table */
    dh_manifest *ref;
    ck_assert_int_eq(dh_workload_generate("interleaved-docs", 3000, 2, &ref), 0);
    int failed = 0;
    for (int64_t k = 1; k < 400; k += 3) {
        dh__alloc_fail_at(k, 0);
        int rc = dh_workload_generate("interleaved-docs", 3000, 2, &m);
        dh__alloc_fail_at(0, 0);
        ck_assert_msg(rc == 0 || rc == DH_ENOMEM, "allocation %lld: %d", (long long)k, rc);
        failed += rc != 0;
        if (!rc) {
            ck_assert(dh_manifest_hash(m) == dh_manifest_hash(ref));
            dh_manifest_free(m);
        } else {
            ck_assert_ptr_null(m);
        }
    }
    ck_assert_int_gt(failed, 0);
    dh_manifest_free(ref);
    dh__parallel_set_max(0);
}
END_TEST

START_TEST(generating_a_workload_stops_when_asked_and_refuses_what_does_not_fit)
{
    dh_manifest *m = NULL;
    stops_at_the_third_question();
    ck_assert_int_eq(dh__workload_generate_until("laion-images", 5000, 1, NULL, NULL, &m), 0);
    ck_assert_int_eq(dh_manifest_count(m), 5000);
    dh_manifest_free(m);
    /* a run: a dataset larger than this machine's memory is refused before any is made, and
     * a manifest run is not given a generated dataset's size */
    dh_run_config cfg;
    dh_run_config_default(&cfg);
    cfg.workload = "laion-images";
    cfg.steps = 2;
    cfg.workload_samples = INT64_C(1) << 40;
    dh_result res = DH_RESULT_INIT;
    char err[512] = "";
    ck_assert_int_eq(dh_sim_run(&cfg, &res, err, sizeof err), DH_ENOMEM);
    ck_assert_ptr_nonnull(strstr(err, "GiB"));
    ck_assert_ptr_nonnull(strstr(err, "--workload-samples"));
    ck_assert_int_eq(dh_workload_generate("laion-images", 300, 1, &m), 0);
    cfg.workload = NULL;
    cfg.manifest = m;
    cfg.workload_samples = 10;
    cfg.ranks = 2;
    cfg.workers = 2;
    cfg.global_batch = 4;
    ck_assert_int_eq(dh_sim_run(&cfg, &res, err, sizeof err), DH_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "a manifest run reads its manifest (300 samples here)"));
    dh_manifest_free(m);
}
END_TEST

START_TEST(metrics_on_a_hand_built_trace)
{
    /* R = 2, 3 steps. Step 0 (fill): ready 1.0 vs deadline 0 on both ranks. Step 1: rank 0
     * on time, rank 1 0.5 s late. Step 2: both on time. Compute 1 s per batch, makespan 5 s.
     * True costs: step g sums 2, 2, 4, max g 1, 1, 3; o = 0.1; CPU sum 6 over W = 2. */
    dh__records rec;
    ck_assert_int_eq(dh__records_init(&rec, 2, 4), 0);
    double deadline[] = {0, 0, 2, 2, 3.5, 3.5}, ready[] = {1, 1, 1.5, 2.5, 3, 3};
    double sum[] = {2, 2, 4}, mx[] = {1, 1, 3};
    for (int b = 0; b < 6; b++) {
        dh__rec_batch *rb = dh__records_batch(&rec, b / 2, b % 2);
        ck_assert_ptr_nonnull(rb);
        rb->deadline = deadline[b];
        rb->ready = ready[b];
        rb->compute = 1.0;
    }
    for (int st = 0; st < 3; st++) {
        dh__records_step(&rec, st)->gpu_sum = sum[st];
        dh__records_step(&rec, st)->gpu_max = mx[st];
    }
    rec.step_fixed = 0.1;
    rec.cpu_true_sum = 6;
    rec.makespan = 5;
    /* Step 1's first task started at 1.0; rank 1's longest took 1.2 s (and a shorter 0.3):
     * alone it ends 0.2 s after rank 1's deadline, 0.2 of its 0.5 s wait. Rank 0's long task
     * does not matter: rank 0 did not wait. */
    dh__records_task(&rec, 1, 1, 1.3, 0.3);
    dh__records_task(&rec, 1, 1, 1.0, 1.2);
    dh__records_task(&rec, 1, 0, 1.1, 5.0);
    /* Steps fold in order: closing 2 before 1 waits for 1. */
    dh__records_close(&rec, 0);
    dh__records_close(&rec, 2);
    ck_assert_int_eq(rec.steps, 1);
    dh__records_close(&rec, 1);
    ck_assert_int_eq(rec.steps, 3);
    ck_assert_ptr_null(dh__records_batch(&rec, 1, 0)); /* folded: gone */
    dh_result r = DH_RESULT_INIT;
    memset(&r, 0, sizeof r);
    dh__records_finish(&rec, 2, &r);
    ck_assert_int_eq(r.samples, 12);
    ck_assert_int_eq(r.delivered, 12);
    ck_assert_double_eq_tol(r.wait_single_frac, 0.4, 1e-9);
    ck_assert_double_eq_tol(r.fill_wait_ms, 1000, 1e-9);
    ck_assert_double_eq_tol(r.miss_rate, 0.25, 1e-12);     /* 1 of 4 after the fill step */
    ck_assert_double_eq_tol(r.wait_mean_ms, 125, 1e-9);    /* (0 + 500 + 0 + 0) / 4 */
    ck_assert_double_eq_tol(r.wait_p50_ms, 0, 1e-12);
    ck_assert_double_eq_tol(r.wait_p95_ms, 500, 1e-9);
    /* Step stalls: step 1 waits for rank 1 (500 ms), step 2 for nobody. */
    ck_assert_double_eq_tol(r.stall_mean_ms, 250, 1e-9);
    ck_assert_double_eq_tol(r.stall_p95_ms, 500, 1e-9);
    ck_assert_double_eq_tol(r.stall_p99_ms, 500, 1e-9);
    ck_assert_double_eq_tol(r.late_step_frac, 0.5, 1e-12);
    /* GPU bound: (0.1 + max(1, 1)) + (0.1 + max(1, 1)) + (0.1 + max(2, 3)) = 5.3 > CPU 3. */
    ck_assert_double_eq_tol(r.bound_gpu_s, 5.3, 1e-12);
    ck_assert_double_eq_tol(r.bound_cpu_s, 3.0, 1e-12);
    ck_assert_double_eq_tol(r.bound_s, 5.3, 1e-12);
    ck_assert_double_eq_tol(r.efficiency, 5.3 / 5, 1e-12);
    ck_assert_double_eq_tol(r.throughput_sps, 12.0 / 5, 1e-12);
    ck_assert_double_eq_tol(r.gpu_idle_frac, 1 - 6.0 / 10, 1e-12);
    ck_assert_double_eq_tol(r.placement_s, 3 * 1.1, 1e-12);
    dh__records_free(&rec);
}
END_TEST

/* A run config of the given shape (defaults otherwise). */
static dh_run_config shaped(const char *policy, int ranks, int workers, int64_t batch,
                            int64_t steps)
{
    dh_run_config c;
    dh_run_config_default(&c);
    c.policy = policy;
    c.ranks = ranks;
    c.workers = workers;
    c.global_batch = batch;
    c.steps = steps;
    return c;
}

/* Issue 25 (a user's trial): with one sample a batch, no rebalancing plan can lower a step's
 * slowest rank, so helix keeps no move arena and admits what pool admits from the same
 * budget. Before, it reserved one and prepared fewer steps ahead (kinetics-clips at 64 ranks:
 * helix 0.667 against pool's 0.795, helix-noreb 0.943). With two samples a batch it keeps it. */
START_TEST(one_sample_batches_keep_no_move_arena)
{
    for (int per = 1; per <= 2; per++) {
        int64_t adm[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            dh_run_config c = shaped(k ? "helix" : "pool", 16, 16, 16 * per, 4);
            c.workload = "kinetics-clips";
            dh__run run;
            char err[256];
            ck_assert_msg(dh__run_setup(&c, &run, err, sizeof err) == 0, "%s", err);
            adm[k] = dh__run_admission_budget(&run, 0);
            ck_assert_int_eq(dh__run_arena_bytes(&run) > 0, k == 1 && per == 2);
            dh__run_free(&run);
        }
        if (per == 1)
            ck_assert_int_eq(adm[1], adm[0]);
        else
            ck_assert_int_lt(adm[1], adm[0]);
        /* and the simulated run moves nothing with one sample a rank, as before */
        dh_run_config c = shaped("helix", 16, 16, 16 * per, 6);
        c.workload = "kinetics-clips";
        dh_result r = DH_RESULT_INIT;
        char err[256];
        ck_assert_msg(dh_sim_run(&c, &r, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(r.delivered + r.failed, 6 * 16 * per);
        ck_assert_int_le(r.memory_peak, r.memory_budget);
        if (per == 1)
            ck_assert_int_eq(r.reb_moved, 0);
    }
}
END_TEST

START_TEST(an_outside_run_gets_the_same_metrics)
{
    /* The hand-built trace above, handed in as a loader outside the library would
     * (dh_result_from_steps): every metric as through the records. */
    dh_external_batch b[6] = {
        {0, 1, 1, -1, 0},     {0, 1, 1, -1, 0},        /* step 0: the fill */
        {2, 1.5, 1, 1.0, 5.0}, {2, 2.5, 1, 1.0, 1.2},   /* step 1: rank 1 0.5 s late */
        {3.5, 3, 1, -1, 0},   {3.5, 3, 1, -1, 0}};
    dh_external_step st[3] = {{2, 1, 2, 0}, {2, 1, 2, 1}, {4, 3, 2, 0}};
    dh_external_run x = {.workload = "w", .policy = "torch", .ranks = 2, .workers = 2,
                         .global_batch = 4, .steps = 3, .batches = b, .step_info = st,
                         .step_fixed_s = 0.1, .makespan_s = 5};
    dh_result r = DH_RESULT_INIT;
    char err[256];
    ck_assert_int_eq(dh_result_from_steps(&x, &r, err, sizeof err), 0);
    ck_assert_str_eq(r.policy, "torch");
    ck_assert_str_eq(r.engine, "real");
    ck_assert_int_eq(r.samples, 12);
    ck_assert_int_eq(r.failed, 1);
    ck_assert_int_eq(r.delivered, 11);
    ck_assert_double_eq_tol(r.throughput_sps, 11 / 5.0, 1e-12);
    ck_assert_double_eq_tol(r.fill_wait_ms, 1000, 1e-9);
    ck_assert_double_eq_tol(r.miss_rate, 0.25, 1e-12);
    ck_assert_double_eq_tol(r.wait_mean_ms, 125, 1e-9);
    ck_assert_double_eq_tol(r.wait_p95_ms, 500, 1e-9);
    ck_assert_double_eq_tol(r.wait_single_frac, 0.4, 1e-9);
    ck_assert_double_eq_tol(r.stall_mean_ms, 250, 1e-9);
    ck_assert_double_eq_tol(r.late_step_frac, 0.5, 1e-12);
    ck_assert_double_eq_tol(r.bound_cpu_s, 3, 1e-12); /* CPU 6 s over 2 workers */
    ck_assert_double_eq_tol(r.bound_gpu_s, 0.1 * 3 + 1 + 1 + 3, 1e-12);
    /* Refused: no ranks; a result too small. */
    x.ranks = 0;
    ck_assert_int_eq(dh_result_from_steps(&x, &r, err, sizeof err), DH_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "ranks"));
}
END_TEST

START_TEST(emulated_gpu_time_is_the_engines_for_any_policy)
{
    dh_run_config c = shaped("local", 2, 2, 8, 4);
    c.workload = "kinetics-clips";
    c.workload_samples = 64;
    double g[64], h[64], c0 = 0, c1 = 0;
    char err[256];
    ck_assert_int_eq(dh_run_emulated_gpu(&c, g, 64, &c0, err, sizeof err), 0);
    c.policy = "helix";
    ck_assert_int_eq(dh_run_emulated_gpu(&c, h, 64, &c1, err, sizeof err), 0);
    ck_assert(c0 > 0 && c0 == c1);
    for (int i = 0; i < 64; i++)
        ck_assert(g[i] > 0 && g[i] == h[i]);
    ck_assert_int_eq(dh_run_emulated_gpu(&c, g, 63, &c0, err, sizeof err), DH_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "64 samples"));
}
END_TEST

/* Every field of rank r's batch record of step st is zero. */
static void assert_batch_zero(dh__records *rec, int64_t st, int r)
{
    const dh__rec_batch *b = dh__records_batch(rec, st, r);
    ck_assert_ptr_nonnull(b);
    ck_assert_msg(b->deadline == 0 && b->ready == 0 && b->compute == 0 && b->longest_task == 0,
                  "step %lld rank %d: a record left from an earlier step in its slot",
                  (long long)st, r);
}

START_TEST(a_records_slot_opens_zeroed_after_a_fold_a_growth_and_a_stop)
{
    /* A slot's batch records are cleared when its step folds (or is dropped), not when the
     * next step opens in it: every step must still open with zeroed records, as the ring
     * goes round, grows with steps opened far ahead, and after a stopped run dropped the
     * steps it had opened. */
    enum { R = 3 };
    dh__records rec;
    ck_assert_int_eq(dh__records_init(&rec, R, 6), 0);
    int64_t opened = -1;
    for (int64_t st = 0; st < 40; st++) {
        int64_t ahead = st == 17 ? st + 20 : st + 2; /* at 17: the window grows */
        for (int64_t o = st; o <= ahead; o++)
            for (int r = 0; r < R; r++) {
                if (o > opened) /* opened by this read */
                    assert_batch_zero(&rec, o, r);
                dh__rec_batch *b = dh__records_batch(&rec, o, r);
                b->deadline = 1.0 + (double)o, b->ready = 2.0 + (double)o;
                b->compute = 0.5, b->longest_task = 0.25;
            }
        opened = DH_MAX(opened, ahead);
        dh__records_close(&rec, st);
    }
    ck_assert_int_ge(rec.cap, 32);
    ck_assert_int_eq(rec.steps, 40);
    int64_t hi = rec.hi; /* steps 40.. opened and written, never closed: a stopped run */
    ck_assert_int_gt(hi, 40);
    rec.makespan = 100;
    dh_result r = DH_RESULT_INIT;
    memset(&r, 0, sizeof r);
    dh__records_finish(&rec, 1, &r);
    ck_assert_int_eq(r.steps, 40);
    for (int64_t st = 40, end = hi + rec.cap; st < end; st++) /* (their slots, and past) */
        for (int k = 0; k < R; k++)
            assert_batch_zero(&rec, st, k);
    dh__records_free(&rec);
}
END_TEST

START_TEST(a_nodes_ranks_records_written_at_once_are_the_per_rank_ones)
{
    /* Another node's ranks, from an array of structs as its STEP record carries them, written
     * at once (dh__records_ranks) and one by one (dh__records_batch): the same records and
     * the same folded metrics, over steps the window grows through; a folded step, or ranks
     * past the job's, write nothing. */
    enum { R = 6, PER = 3, STEPS = 20 };
    typedef struct {
        double asked, ready, compute, longest, taken, released;
    } wire_rank;
    dh__records a, b;
    ck_assert_int_eq(dh__records_init(&a, R, 12), 0);
    ck_assert_int_eq(dh__records_init(&b, R, 12), 0);
    for (int64_t st = 0; st < STEPS; st++) {
        for (int node = 0; node < R / PER; node++) {
            wire_rank w[PER];
            for (int i = 0; i < PER; i++) {
                double x = (double)(st * R + node * PER + i);
                w[i] = (wire_rank){x, x + 0.5 + 0.25 * (i == 1), 0.1 * x + 1, 0.01 * x, -1, -2};
            }
            dh__records_ranks(&a, st + 9, node * PER, PER, &w[0].asked, &w[0].ready,
                              &w[0].compute, &w[0].longest, sizeof w[0]); /* ahead: grows */
            for (int i = 0; i < PER; i++) {
                dh__rec_batch *rb = dh__records_batch(&b, st + 9, node * PER + i);
                ck_assert_ptr_nonnull(rb);
                *rb = (dh__rec_batch){w[i].asked, w[i].ready, w[i].compute, w[i].longest};
            }
        }
        for (int r = 0; r < R; r++) {
            const dh__rec_batch *x = dh__records_batch(&a, st + 9, r),
                                *y = dh__records_batch(&b, st + 9, r);
            ck_assert(memcmp(x, y, sizeof *x) == 0);
        }
        dh__records_close(&a, st);
        dh__records_close(&b, st);
    }
    double w1 = 7;
    dh__records_ranks(&a, 0, 0, 1, &w1, &w1, &w1, &w1, sizeof w1); /* folded: nothing */
    dh__records_ranks(&a, STEPS, R - 1, 2, &w1, &w1, &w1, &w1, sizeof w1); /* past R */
    ck_assert(dh__records_batch(&a, STEPS, R - 1)->deadline != 7);
    a.makespan = b.makespan = 100;
    dh_result ra = DH_RESULT_INIT, rb = DH_RESULT_INIT;
    dh__records_finish(&a, 2, &ra);
    dh__records_finish(&b, 2, &rb);
    ck_assert_int_eq(ra.steps, STEPS);
    ck_assert(ra.wait_mean_ms > 0);
    ck_assert(ra.wait_mean_ms == rb.wait_mean_ms && ra.wait_p95_ms == rb.wait_p95_ms &&
              ra.fill_wait_ms == rb.fill_wait_ms && ra.miss_rate == rb.miss_rate &&
              ra.gpu_idle_frac == rb.gpu_idle_frac && ra.stall_mean_ms == rb.stall_mean_ms);
    dh__records_free(&a);
    dh__records_free(&b);
}
END_TEST

START_TEST(wait_percentiles_stay_bounded_past_the_exact_list)
{
    /* 200,000 waits of 1..200000 us over 1 rank: the exact list overflows into the
     * histogram; percentiles stay within its 0.1% resolution and the window stays small. */
    dh__records rec;
    ck_assert_int_eq(dh__records_init(&rec, 1, 1), 0);
    for (int64_t st = 0; st <= 200000; st++) {
        dh__rec_batch *b = dh__records_batch(&rec, st, 0);
        b->deadline = 0;
        b->ready = st * 1e-6;
        dh__records_close(&rec, st);
    }
    ck_assert_int_le(rec.cap, 8);
    ck_assert_ptr_nonnull(rec.sketch.hist);
    rec.makespan = 1;
    dh_result r = DH_RESULT_INIT;
    memset(&r, 0, sizeof r);
    dh__records_finish(&rec, 1, &r);
    ck_assert_double_eq_tol(r.wait_p50_ms, 100.0, 0.1);
    ck_assert_double_eq_tol(r.wait_p99_ms, 198.0, 0.2);
    ck_assert_double_eq_tol(r.wait_mean_ms, 100.0005, 1e-6);
    dh__records_free(&rec);
}
END_TEST

static dh_result run(const char *workload, const char *policy, uint64_t seed, int64_t steps)
{
    dh_run_config c;
    dh_run_config_default(&c);
    c.workload = workload;
    c.policy = policy;
    c.seed = seed;
    c.steps = steps;
    dh_result r = DH_RESULT_INIT;
    char err[256] = "";
    int rc = dh_sim_run(&c, &r, err, sizeof err);
    ck_assert_msg(rc == 0, "%s/%s: %s", workload, policy, err);
    return r;
}

START_TEST(simulation_is_deterministic_and_accounts_for_every_sample)
{
    const char *const *pol = dh_policy_names();
    for (int p = 0; pol[p]; p++) {
        dh_result a = run("omni-mix", pol[p], 7, 30), b = run("omni-mix", pol[p], 7, 30);
        ck_assert_double_eq(a.makespan_s, b.makespan_s);
        ck_assert_double_eq(a.wait_p99_ms, b.wait_p99_ms);
        ck_assert_int_eq(a.samples, 30 * 128);
        ck_assert_int_eq(a.delivered + a.failed, a.samples);
        ck_assert_double_le(a.bound_s, a.makespan_s * (1 + 1e-9) + 0.0); /* no run beats the bound */
        ck_assert_double_le(a.placement_s, a.makespan_s * (1 + 1e-9));
        ck_assert_int_le(a.memory_peak, a.memory_budget);
        dh_result c = run("omni-mix", pol[p], 8, 30);
        ck_assert_double_ne(a.makespan_s, c.makespan_s);
    }
}
END_TEST

START_TEST(the_ring_of_drawn_truth_changes_no_result)
{
    /* Every policy; several nodes with lending (helix), split samples (kinetics' long
     * clips), and more steps in flight than the ring holds (a one-sample batch a rank over
     * many workers runs far ahead): a task's truth read from its position's entry, or from
     * its sample's when the ring does not hold its step, is the sample's. */
    static const struct {
        const char *wl;
        int ranks, workers, nodes;
        int64_t batch;
    } shape[] = {{"omni-mix", 8, 16, 2, 64}, {"kinetics-clips", 4, 8, 1, 32},
                 {"laion-images", 8, 64, 1, 8}};
    const char *const *pol = dh_policy_names();
    for (size_t k = 0; k < sizeof shape / sizeof *shape; k++)
        for (int p = 0; pol[p]; p++) {
            dh_result r[2];
            for (int off = 0; off < 2; off++) {
                dh_run_config cfg;
                dh_run_config_default(&cfg);
                cfg.workload = shape[k].wl;
                cfg.policy = pol[p];
                cfg.ranks = shape[k].ranks;
                cfg.workers = shape[k].workers;
                cfg.nodes = shape[k].nodes;
                cfg.global_batch = shape[k].batch;
                cfg.steps = 40;
                cfg.seed = 3;
                char err[256] = "";
                r[off] = (dh_result)DH_RESULT_INIT;
                dh__pos_truth_off = off;
                ck_assert_msg(!dh_sim_run(&cfg, &r[off], err, sizeof err), "%s", err);
            }
            dh__pos_truth_off = 0;
            ck_assert_msg(r[0].makespan_s == r[1].makespan_s && r[0].bound_s == r[1].bound_s &&
                              r[0].wait_p99_ms == r[1].wait_p99_ms &&
                              r[0].reb_moved == r[1].reb_moved && r[0].lent == r[1].lent,
                          "%s %s: %.9g vs %.9g", shape[k].wl, pol[p], r[0].makespan_s,
                          r[1].makespan_s);
        }
}
END_TEST

START_TEST(helix_beats_the_baselines_where_skew_exists)
{
    /* interleaved-docs: LLM-dominated, long-tailed sequence lengths. Balanced placement must
     * win clearly over the stride placement of both baselines. */
    dh_result h = run("interleaved-docs", "helix", 1, 100);
    dh_result l = run("interleaved-docs", "local", 1, 100);
    dh_result p = run("interleaved-docs", "pool", 1, 100);
    ck_assert_double_gt(h.throughput_sps, 1.2 * l.throughput_sps);
    ck_assert_double_gt(h.throughput_sps, 1.2 * p.throughput_sps);
}
END_TEST

/* A manifest whose sim truth is scaled by k (k = 0: no sim fields); same descriptors. */
static dh_manifest *truth_manifest(double k)
{
    dh_manifest *m;
    dh_manifest_new("", NULL, &m);
    char line[512], sim[96] = "";
    for (int i = 0; i < 64; i++) {
        if (k > 0)
            snprintf(sim, sizeof sim, ",\"sim\":{\"cpu_ms\":%.3f,\"gpu_ms\":%.3f}",
                     k * (1 + i % 5), k * (10 + (i * 13) % 7));
        int n = snprintf(line, sizeof line,
                         "{\"id\":\"s%d\",\"text_tokens\":%d,\"media\":[{\"type\":\"image\","
                         "\"path\":\"i/%d.jpg\",\"codec\":\"jpeg\",\"width\":%d,\"height\":%d}]%s}",
                         i, 50 + (i * 37) % 900, i, 300 + i * 10, 200 + i * 7, sim);
        ck_assert_int_eq(dh_manifest_parse_line(m, line, (size_t)n, i + 1, NULL, 0), 0);
    }
    return m;
}

/* 64 equal samples: cpu_ms of CPU and gpu_ms of accelerator time each (sim truth). */
static dh_manifest *flat_manifest(double cpu_ms, double gpu_ms)
{
    dh_manifest *m;
    dh_manifest_new("", NULL, &m);
    char line[512];
    for (int i = 0; i < 64; i++) {
        int n = snprintf(line, sizeof line,
                         "{\"id\":\"s%d\",\"text_tokens\":100,\"media\":[{\"type\":\"image\","
                         "\"path\":\"i/%d.jpg\",\"codec\":\"jpeg\",\"width\":640,\"height\":480}],"
                         "\"sim\":{\"cpu_ms\":%.3f,\"gpu_ms\":%.3f}}",
                         i, i, cpu_ms, gpu_ms);
        ck_assert_int_eq(dh_manifest_parse_line(m, line, (size_t)n, i + 1, NULL, 0), 0);
    }
    return m;
}

/* A 40-step simulated run of 16 samples a step, each cpu_ms to prepare and gpu_ms to
 * compute, with policy on ranks and workers; it must succeed. */
static dh_result flat_run(const char *policy, double cpu_ms, double gpu_ms, int ranks,
                          int workers)
{
    dh_manifest *m = flat_manifest(cpu_ms, gpu_ms);
    dh_run_config c = shaped(policy, ranks, workers, 16, 40);
    c.manifest = m;
    dh_result r = DH_RESULT_INIT;
    char err[256];
    ck_assert_msg(dh_sim_run(&c, &r, err, sizeof err) == 0, "%s: %s", policy, err);
    dh_manifest_free(m);
    return r;
}

START_TEST(a_late_step_keeps_most_ranks_on_time)
{
    /* CPU-bound: one worker prepares a step's 16 samples in 160 ms while a rank computes its
     * 4 in 120 ms, so every step is late. Batches are due one after another (fewest ranks
     * waiting): the first three of the next step are ready while the ranks compute, and
     * only the last rank waits, where interleaving every rank's samples made all four wait.
     * The step's stall is the same either way: the step needs the same CPU. */
    dh_result r = flat_run("helix-noreb", 10, 30, 4, 1);
    ck_assert_msg(r.late_step_frac > 0.75 && r.miss_rate < 0.5, "late steps %.3f, misses %.3f",
                  r.late_step_frac, r.miss_rate);
}
END_TEST

/* The ordered bound counts what the bound leaves out: 20 steps heavy on CPU (16 samples of
 * 10 ms on one worker: 0.16 s a step, 0.04 s of compute a rank), then 20 heavy on GPU (1 ms,
 * 40 ms a sample: 0.016 s, 0.16 s). CPU 3.52 s and GPU 4.0 s in all (the bound), but no rank
 * starts step 19 before the first 20 steps' 3.2 s of CPU is done, its batch takes 0.04 s
 * (4 samples), and 20 steps of 0.16 s of compute come after it: 6.44 s (plus the steps'
 * fixed cost o). */
/* A manifest of n images whose true costs the simulator takes as given: the first `split`
 * cost cpu_a / gpu_a ms, the others cpu_b / gpu_b. */
static dh_manifest *timed_images(int n, int split, int cpu_a, int gpu_a, int cpu_b, int gpu_b)
{
    dh_manifest *m;
    ck_assert_int_eq(dh_manifest_new("", NULL, &m), 0);
    char line[512];
    for (int i = 0; i < n; i++) {
        int len = snprintf(line, sizeof line,
                           "{\"id\":\"s%03d\",\"media\":[{\"type\":\"image\",\"path\":"
                           "\"i.jpg\",\"width\":64,\"height\":64}],\"sim\":{\"cpu_ms\":%d,"
                           "\"gpu_ms\":%d}}",
                           i, i < split ? cpu_a : cpu_b, i < split ? gpu_a : gpu_b);
        ck_assert_int_eq(dh_manifest_parse_line(m, line, (size_t)len, i + 1, NULL, 0), 0);
    }
    return m;
}

/* A simulated run of m's samples in their order. */
static dh_result sim_in_order(const char *policy, int ranks, int workers, int64_t batch,
                              int64_t steps, dh_manifest *m)
{
    dh_run_config c = shaped(policy, ranks, workers, batch, steps);
    c.manifest = m;
    c.no_shuffle = 1;
    dh_result r = DH_RESULT_INIT;
    char err[256];
    ck_assert_msg(dh_sim_run(&c, &r, err, sizeof err) == 0, "%s", err);
    return r;
}

START_TEST(the_ordered_bound_counts_the_fill_and_the_drain)
{
    dh_manifest *m = timed_images(640, 320, 10, 10, 1, 40);
    const char *pol[] = {"local", "pool", "helix", "helix-fifo"};
    for (int p = 0; p < 4; p++) {
        dh_result r = sim_in_order(pol[p], 4, 1, 16, 40, m);
        double o = (r.bound_gpu_s - 4.0) / 40; /* every step's fixed cost */
        ck_assert(o >= 0 && o < 0.01);
        ck_assert_double_eq_tol(r.bound_cpu_s, 3.52, 1e-6);
        ck_assert_double_eq_tol(r.bound_s, 4.0 + 40 * o, 1e-6);
        /* the smallest batch of step 19 is the placement's: 4 samples (0.04 s) with local's and
         * pool's, maybe fewer where helix moved one */
        ck_assert_msg(r.bound_ordered_s > 6.4 + 21 * o - 1e-6 &&
                          r.bound_ordered_s < 6.44 + 21 * o + 1e-6 &&
                          (p > 1 || fabs(r.bound_ordered_s - (6.44 + 21 * o)) < 1e-6),
                      "%s: ordered %.6f", pol[p], r.bound_ordered_s);
        ck_assert_msg(r.makespan_s >= r.bound_ordered_s - 1e-9, "%s: makespan %.6f, ordered %.6f",
                      pol[p], r.makespan_s, r.bound_ordered_s); /* local meets it exactly */
        ck_assert_double_eq_tol(r.efficiency_ordered, r.bound_ordered_s / r.makespan_s, 1e-6);
    }
    dh_manifest_free(m);
}
END_TEST

/* A task runs on one worker: the first step's image of 1 s CPU (an image is never split)
 * holds that step back 1 s however many workers there are, where dividing the step's CPU
 * over 16 workers said 0.07 s. 4 steps of 16 samples over 4 ranks, 10 ms of GPU a sample:
 * no rank starts step 0 before 1 s, its batch takes 0.04 s, then 3 more steps of 0.04 s:
 * 1.16 s (plus the steps' fixed cost o); before, the ordered bound read 0.23 s. */
START_TEST(the_ordered_bound_counts_a_task_whole)
{
    dh_manifest *m = timed_images(64, 1, 1000, 10, 10, 10);
    const char *pol[] = {"local", "pool", "helix", "helix-fifo"};
    for (int p = 0; p < 4; p++) {
        dh_result r = sim_in_order(pol[p], 4, 16, 16, 4, m);
        double o = (r.bound_gpu_s - 0.16) / 4;
        ck_assert(o >= 0 && o < 0.01);
        /* the smallest batch of step 0: 4 samples (0.04 s), fewer where helix moved one */
        ck_assert_msg(r.bound_ordered_s > 1.12 + 4 * o - 1e-6 &&
                          r.bound_ordered_s < 1.16 + 4 * o + 1e-6,
                      "%s: ordered %.6f", pol[p], r.bound_ordered_s);
        ck_assert_msg(r.makespan_s >= r.bound_ordered_s - 1e-9, "%s: makespan %.6f, ordered %.6f",
                      pol[p], r.makespan_s, r.bound_ordered_s);
    }
    dh_manifest_free(m);
}
END_TEST

/* Text that costs nothing to prepare (and so, scaled to its CPU, nothing to compute): helix
 * placed every sample of a step on one rank and stopped as stalled on the others' empty
 * batches (a user's text-only manifest). Every balanced policy runs it to the end. */
START_TEST(samples_that_cost_nothing_are_placed_on_every_rank)
{
    dh_manifest *m;
    ck_assert_int_eq(dh_manifest_new("", NULL, &m), 0);
    const char *a = "{\"id\":\"a\",\"text_tokens\":10}", *b = "{\"id\":\"b\",\"text_tokens\":10}";
    ck_assert_int_eq(dh_manifest_parse_line(m, a, strlen(a), 1, NULL, 0), 0);
    ck_assert_int_eq(dh_manifest_parse_line(m, b, strlen(b), 2, NULL, 0), 0);
    const char *pol[] = {"helix", "helix-fifo", "helix-noreb", "pool"};
    for (int p = 0; p < 4; p++) {
        dh_run_config c = shaped(pol[p], 2, 1, 2, 3);
        c.manifest = m;
        dh_result r = DH_RESULT_INIT;
        char err[256] = "";
        ck_assert_msg(dh_sim_run(&c, &r, err, sizeof err) == 0, "%s: %s", pol[p], err);
        ck_assert_int_eq(r.delivered, 6);
    }
    dh_manifest_free(m);
}
END_TEST

/* No run beats it: every workload, policy and shape (more workers than ranks, fewer, several
 * nodes, a run stopped early). */
static int stop_at_third(void *user)
{
    return ++*(int *)user >= 3;
}

START_TEST(no_run_beats_the_ordered_bound)
{
    const char *pol[] = {"local", "pool", "helix", "helix-fifo"};
    const int shape[][3] = {{8, 32, 1}, {8, 4, 1}, {8, 16, 2}};
    for (const char *const *w = dh_workload_names(); *w; w++)
        for (int p = 0; p < 4; p++)
            for (int k = 0; k < 4; k++) {
                int calls = 0;
                dh_run_config c = shaped(pol[p], shape[k % 3][0], shape[k % 3][1], 0, 12);
                c.workload = *w;
                c.nodes = shape[k % 3][2];
                if (k == 3) { /* stopped after three steps (a dataset too small to be asked) */
                    c.steps = 0;
                    c.epochs = 1000;
                    c.workload_samples = 2048;
                    c.should_stop = stop_at_third;
                    c.should_stop_user = &calls;
                }
                dh_result r = DH_RESULT_INIT;
                char err[256] = "";
                ck_assert_msg(dh_sim_run(&c, &r, err, sizeof err) == 0, "%s/%s: %s", *w,
                              pol[p], err);
                ck_assert_msg(r.bound_ordered_s >= r.bound_s && r.efficiency_ordered <= 1 + 1e-9 &&
                                  r.efficiency_ordered >= r.efficiency,
                              "%s/%s shape %d: bound %.4f, ordered %.4f, makespan %.4f", *w,
                              pol[p], k, r.bound_s, r.bound_ordered_s, r.makespan_s);
            }
}
END_TEST

START_TEST(more_worker_threads_than_cores_share_them)
{
    /* local with 4 ranks on 2 workers' worth of CPU runs one private worker per rank (as
     * DataLoader's num_workers >= 1): 4 threads share 2 cores. CPU-bound (10 ms to prepare,
     * 0.1 ms to compute a sample), no policy can beat the CPU bound: 2 / 10 ms = 200
     * samples/s. Before, each of the 4 threads ran at full speed (efficiency near 2). */
    const char *pol[] = {"local", "pool", "helix"};
    for (int k = 0; k < 3; k++) {
        dh_result r = flat_run(pol[k], 10, 0.1, 4, 2);
        ck_assert_msg(r.efficiency <= 1.0 + 1e-9 && r.throughput_sps < 1.02 * 200,
                      "%s: efficiency %.3f, %.1f samples/s", pol[k], r.efficiency,
                      r.throughput_sps);
        ck_assert_int_eq(r.delivered, 40 * 16);
    }
}
END_TEST

#define TRUTH_STEPS 12 /* three epochs of 4 steps: G = 16 over 64 samples */
#define TRUTH_LOG 4096

/*
 * Drives a run's scheduler as an engine would, but with a completion
 * sequence that does not depend on truth: tasks complete first-in first-out
 * with measured = the scheduler's own prediction, ranks report the predicted
 * step time, nothing is revealed (rebalancing off). Logs every dispatched
 * task and every batch's samples; returns the log's length.
 */
static int drive(const dh_run_config *c, int64_t *log)
{
    dh__run run;
    char err[256];
    ck_assert_msg(dh__run_setup(c, &run, err, sizeof err) == 0, "%s", err);
    dh__sched_config sc;
    dh__run_sched_config(&run, 0, &sc);
    dh__sched *s;
    ck_assert_int_eq(dh__sched_new(&sc, &s), 0);
    int n = 0, W = dh__sched_worker_count(s);
    dh__task inflight[64];
    int head = 0, tail = 0;
    double now = 0;
    for (int64_t st = 0; st < TRUTH_STEPS; st++) {
        for (int guard = 0; guard < 100000; guard++) {
            int ready = 1;
            for (int r = 0; r < c->ranks; r++)
                ready &= dh__sched_batch_ready(s, st, r);
            if (ready)
                break;
            for (int w = 0; w < W && tail - head < 64; w++) {
                dh__task t;
                if (dh__sched_next_task(s, w, now, &t) == 0) {
                    inflight[tail++ % 64] = t;
                    log[n++] = t.step * 1000000 + t.sample * 100 + t.part;
                }
            }
            ck_assert_int_gt(tail, head); /* work exists while a batch is not ready */
            dh__task t = inflight[head++ % 64];
            now += t.pred_cost;
            ck_assert_int_ge(dh__sched_task_done(s, &t, now, t.pred_cost, -1.0), 0);
        }
        int64_t samples[64];
        for (int r = 0; r < c->ranks; r++) {
            int32_t k = dh__sched_batch_samples(s, st, r, samples, 64);
            for (int32_t i = 0; i < k; i++)
                log[n++] = -(st * 1000000 + r * 1000 + samples[i]);
            dh__sched_batch_taken(s, r, st, now);
        }
        for (int r = 0; r < c->ranks; r++)
            dh__sched_step_done(s, r, st, now + 0.01, 0.01);
        now += 0.01;
        ck_assert_int_lt(n, TRUTH_LOG - 256);
    }
    dh__sched_free(s);
    dh__run_free(&run);
    return n;
}

START_TEST(policies_never_read_ground_truth)
{
    /* Over whole runs of every policy, truth that differs (sim fields 7x, or the CPU and
     * GPU stress injectors) must leave every step's placement and the whole task order
     * unchanged for the same completion sequence. */
    dh_manifest *m1 = truth_manifest(1.0), *m7 = truth_manifest(7.0), *m0 = truth_manifest(0);
    static int64_t log_a[TRUTH_LOG], log_b[TRUTH_LOG];
    const char *const *pol = dh_policy_names();
    for (int p = 0; pol[p]; p++) {
        for (int pair = 0; pair < 2; pair++) {
            dh_run_config c;
            dh_run_config_default(&c);
            c.global_batch = 16;
            c.ranks = 4;
            c.workers = 8;
            c.steps = TRUTH_STEPS;
            c.policy = pol[p];
            c.manifest = pair ? m0 : m1;
            int na = drive(&c, log_a);
            dh_stress stress = {.cpu_heavy_fraction = 0.5, .cpu_heavy_factor = 9,
                                .understate_fraction = 0.5, .understate_factor = 3};
            if (pair) { /* the same samples under stress: truth moves, predictions do not */
                c.stress = &stress;
            } else {
                c.manifest = m7;
            }
            int nb = drive(&c, log_b);
            ck_assert_int_eq(na, nb);
            ck_assert_msg(!memcmp(log_a, log_b, (size_t)na * sizeof *log_a),
                          "%s: the schedule changed with the truth (pair %d)", pol[p], pair);
        }
    }
    dh_manifest_free(m0);
    dh_manifest_free(m1);
    dh_manifest_free(m7);
}
END_TEST

START_TEST(configs_and_results_grow_without_breaking_callers)
{
    /* An older caller knows a prefix of dh_run_config (up to `epochs`) and of dh_result (up
     * to wait_single_frac): its config still runs, the fields it lacks take defaults, and the
     * library writes no byte past the result the caller has. */
    dh_run_config c;
    dh_run_config_default(&c);
    c.workload = "speech-asr";
    c.steps = 5;
    c.epochs = 77;        /* beyond the older caller's struct: must be ignored */
    c.should_stop = NULL; /* likewise */
    c.struct_size = (uint32_t)offsetof(dh_run_config, epochs);
    struct {
        dh_result r;
        unsigned char guard[64];
    } box;
    memset(&box, 0xAB, sizeof box);
    box.r.struct_size = (uint32_t)offsetof(dh_result, wait_single_frac);
    char err[256] = "";
    ck_assert_msg(dh_sim_run(&c, &box.r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(box.r.steps, 5);
    ck_assert_int_eq(box.r.struct_size, (uint32_t)offsetof(dh_result, wait_single_frac));
    const unsigned char *tail = (const unsigned char *)&box.r + box.r.struct_size;
    for (size_t k = 0; k < sizeof box - box.r.struct_size; k++)
        ck_assert_int_eq(tail[k], 0xAB);
    /* Not initialised, or from a newer header: a clear error, nothing run. */
    c.struct_size = 0;
    dh_result r = DH_RESULT_INIT;
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "dh_run_config_default"));
    c.struct_size = sizeof c + 8;
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_EINVAL);
    dh_run_config_default(&c);
    c.workload = "speech-asr";
    c.steps = 5;
    dh_result bad;
    memset(&bad, 0, sizeof bad);
    ck_assert_int_eq(dh_sim_run(&c, &bad, err, sizeof err), DH_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "dh_result_init"));
}
END_TEST

static int count_to_40(void *user)
{
    return ++*(int *)user >= 40;
}

START_TEST(epochs_and_stopping_set_the_run_length)
{
    /* speech-asr with a 300-sample dataset and G = 128: 2 steps an epoch (drop_last). */
    dh_run_config c;
    dh_run_config_default(&c);
    c.workload = "speech-asr";
    c.workload_samples = 300;
    c.epochs = 3;
    dh_result r = DH_RESULT_INIT;
    char err[256] = "";
    ck_assert_msg(dh_sim_run(&c, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.steps, 6);
    ck_assert_int_eq(r.samples, 6 * 128);
    /* Without a length the simulator needs should_stop; with it, it ends where told. */
    dh_run_config_default(&c);
    c.workload = "speech-asr";
    c.steps = DH_STEPS_FOREVER;
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_EINVAL);
    int calls = 0;
    c.should_stop = count_to_40;
    c.should_stop_user = &calls;
    c.workload_samples = 300; /* generating 4,096 or more samples asks should_stop too */
    ck_assert_msg(dh_sim_run(&c, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.steps, 40);
    ck_assert_int_eq(r.delivered, 40 * 128);
}
END_TEST

START_TEST(every_allocation_failure_stops_the_simulation_cleanly)
{
    /* Make the n-th allocation of the run-time modules fail (and every one after it), for
     * every n the run makes: each run must fail with a message or succeed, never crash,
     * stall or leak (ASan's leak check runs on this test in the sanitizer build). */
    const char *const *pol = dh_policy_names();
    for (int p = 0; pol[p]; p++) {
        dh_run_config c;
        dh_run_config_default(&c);
        c.workload = "omni-mix";
        c.workload_samples = 64;
        c.policy = pol[p];
        c.ranks = 2;
        c.workers = 4;
        c.nodes = 2;
        c.global_batch = 8;
        c.steps = 12; /* past one epoch */
        dh_result r = DH_RESULT_INIT;
        char err[256];
        dh__alloc_fail_at(INT64_MAX, 0);
        ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), 0);
        int64_t total = dh__alloc_fail_at(0, 0);
        ck_assert_int_gt(total, 10);
        for (int64_t n = 1; n <= total; n++) {
            err[0] = 0;
            dh__alloc_fail_at(n, 1);
            int rc = dh_sim_run(&c, &r, err, sizeof err);
            dh__alloc_fail_at(0, 0);
            ck_assert_msg(rc < 0, "%s: allocation %lld of %lld failed, yet the run succeeded",
                          pol[p], (long long)n, (long long)total);
            ck_assert_msg(err[0] != 0, "%s: allocation %lld: no message", pol[p], (long long)n);
            ck_assert_msg(rc != DH_EIO, "%s: allocation %lld read as a stall: %s", pol[p],
                          (long long)n, err);
        }
    }
}
END_TEST

START_TEST(json_result_has_the_contract_keys)
{
    dh_result r = run("speech-asr", "pool", 1, 10);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_int_eq(dh_result_write_json(&r, f), 0);
    fclose(f);
    json_error_t e;
    json_t *j = json_loads(buf, 0, &e);
    ck_assert_msg(j != NULL, "%s: %s", buf, e.text);
    const char *keys[] = {"workload", "policy", "engine", "ranks", "workers", "steps", "samples",
                          "delivered", "failed", "makespan_s", "throughput_sps", "bound_s",
                          "efficiency", "miss_rate", "fill_wait_ms", "wait_mean_ms", "wait_p50_ms",
                          "wait_p95_ms", "wait_p99_ms", "gpu_idle_frac"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        ck_assert_msg(json_object_get(j, keys[k]) != NULL, "missing key %s", keys[k]);
    ck_assert_str_eq(json_string_value(json_object_get(j, "engine")), "sim");
    ck_assert_str_eq(json_string_value(json_object_get(j, "policy")), "pool");
    ck_assert_int_eq(json_integer_value(json_object_get(j, "samples")), 1280);
    json_decref(j);
    free(buf);
}
END_TEST

START_TEST(trace_opens_as_chrome_json)
{
    char *dir = tu_mkdtemp(), path[4096];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    dh_run_config c;
    dh_run_config_default(&c);
    c.workload = "laion-images";
    c.steps = 3;
    c.trace_path = path;
    dh_result r = DH_RESULT_INIT;
    char err[256];
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), 0);
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    ck_assert_msg(j && json_is_array(j), "trace: %s", e.text);
    int tasks = 0, computes = 0;
    for (size_t i = 0; i < json_array_size(j); i++) {
        const char *name = json_string_value(json_object_get(json_array_get(j, i), "name"));
        tasks += name && !strcmp(name, "prepare");
        computes += name && !strcmp(name, "compute");
    }
    ck_assert_int_eq(tasks, 3 * 256);
    ck_assert_int_eq(computes, 3 * 8);
    json_decref(j);
    c.trace_path = "/nonexistent-dir/trace.json";
    ck_assert_int_ne(dh_sim_run(&c, &r, err, sizeof err), 0);
    tu_sh("rm -rf %s", dir);
    free(dir);
}
END_TEST

START_TEST(rank_caps_are_honoured_or_counted)
{
    dh_run_config c;
    dh_run_config_default(&c);
    c.workload = "anyres-images";
    c.steps = 20;
    dh_result r = DH_RESULT_INIT;
    char err[256];
    c.rank_token_cap = 1000000; /* generous: never binding */
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), 0);
    ck_assert_int_eq(r.cap_violations, 0);
    c.rank_token_cap = 100; /* no rank can hold even one sample: every one is counted */
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), 0);
    ck_assert_int_eq(r.cap_violations, 20 * 64);
    ck_assert_int_eq(r.delivered, 20 * 64);
}
END_TEST

static dh_result run_nodes(int nodes, double net_gbps, const char *policy)
{
    dh_run_config c;
    dh_run_config_default(&c);
    c.workload = "omni-mix";
    c.policy = policy;
    c.steps = 60;
    c.global_batch = 16;
    c.nodes = nodes;
    dh_stress stress = {.cpu_noise_sigma = 0.6, .cpu_heavy_fraction = 0.1, .cpu_heavy_factor = 5};
    c.stress = &stress;
    if (net_gbps > 0)
        c.net_bandwidth = net_gbps * 1e9 / 8;
    dh_result r = DH_RESULT_INIT;
    char err[256];
    ck_assert_msg(dh_sim_run(&c, &r, err, sizeof err) == 0, "%s", err);
    return r;
}

START_TEST(one_node_is_the_single_pool)
{
    dh_result a = run_nodes(0, 0, "helix"), b = run_nodes(1, 0, "helix");
    ck_assert_double_eq(a.makespan_s, b.makespan_s);
    ck_assert_int_eq(b.lend_considered, 0);
}
END_TEST

START_TEST(idle_nodes_prepare_late_samples_when_the_network_is_cheap)
{
    dh_result cheap = run_nodes(4, 100, "helix");
    ck_assert_int_gt(cheap.lent, 0);
    ck_assert_int_eq(cheap.delivered + cheap.failed, cheap.samples);
    ck_assert_int_eq(cheap.delivered, 60 * 16);
    /* Shipping at 1 kbit/s costs more than any lateness: everything is gated off. */
    dh_result dear = run_nodes(4, 1e-6, "helix");
    ck_assert_int_eq(dear.lent, 0);
    ck_assert_int_eq(dear.lend_gated, dear.lend_considered);
    /* helix-noreb and pool never lend. */
    ck_assert_int_eq(run_nodes(4, 100, "helix-noreb").lend_considered, 0);
    ck_assert_int_eq(run_nodes(4, 100, "pool").lend_considered, 0);
}
END_TEST

/* The fetch model (issue 24): media on an object store. */
static dh_result fetch_run(const char *policy, double latency_ms, int fetchers, int nodes)
{
    dh_run_config c;
    dh_run_config_default(&c);
    c.workload = "kinetics-clips";
    c.policy = policy;
    c.ranks = 4;
    c.workers = 4;
    c.nodes = nodes;
    c.global_batch = 32;
    c.steps = 40;
    c.fetch_latency_s = latency_ms / 1e3;
    c.fetch_bandwidth = latency_ms > 0 ? 1.25e8 : 0; /* 1 Gb/s */
    c.fetchers = fetchers;
    dh_result r;
    dh_result_init(&r);
    char err[256] = "";
    ck_assert_msg(dh_sim_run(&c, &r, err, sizeof err) == 0, "%s", err);
    return r;
}

START_TEST(the_fetch_model_hides_latency_by_fetching_ahead)
{
    static const char *const pol[] = {"helix", "local", "pool"};
    for (int p = 0; p < 3; p++) {
        dh_result plain = fetch_run(pol[p], 0, 0, 1);
        ck_assert_int_eq(plain.fetch_bytes, 0);
        ck_assert_int_eq(plain.fetch_requests, 0);
        dh_result late = fetch_run(pol[p], 50, -1, 1), ahead = fetch_run(pol[p], 50, 0, 1);
        /* every sample's bytes fetched once either way (no split sample fetches twice) */
        ck_assert_int_gt(late.fetch_bytes, 0);
        ck_assert_int_eq(late.fetch_bytes, ahead.fetch_bytes);
        ck_assert_int_eq(late.fetch_requests, ahead.fetch_requests);
        ck_assert_int_eq(late.delivered + late.failed, plain.delivered + plain.failed);
        /* fetching when a worker starts a sample holds the worker; fetching ahead does not */
        ck_assert_msg(late.fetch_wait_s > 3 * ahead.fetch_wait_s, "%s: %g vs %g", pol[p],
                      late.fetch_wait_s, ahead.fetch_wait_s);
        ck_assert_msg(late.makespan_s > ahead.makespan_s, "%s", pol[p]);
        /* helix and pool plan steps ahead of their deadlines, so their fetches are early;
         * local plans only its prefetch window, and hides less */
        ck_assert_msg(p == 1 || ahead.makespan_s <= plain.makespan_s * 1.05, "%s: %g vs %g",
                      pol[p], ahead.makespan_s, plain.makespan_s);
        ck_assert_int_eq(late.fetch_ahead_ready + late.fetch_ahead_waited, 0);
        ck_assert_int_gt(ahead.fetch_ahead_ready, ahead.fetch_ahead_missed);
        dh_result again = fetch_run(pol[p], 50, 0, 1); /* deterministic */
        ck_assert(again.makespan_s == ahead.makespan_s && again.fetch_wait_s == ahead.fetch_wait_s);
    }
    /* two nodes: each node's fetchers fetch its own ranks' samples, each once */
    dh_result one = fetch_run("helix", 50, 0, 1), two = fetch_run("helix", 50, 0, 2);
    ck_assert_int_eq(one.fetch_bytes, two.fetch_bytes);
}
END_TEST

START_TEST(nodes_must_divide_ranks_and_workers)
{
    dh_run_config c;
    dh_run_config_default(&c);
    c.workload = "omni-mix";
    c.nodes = 3; /* 8 ranks, 32 workers */
    dh_result r = DH_RESULT_INIT;
    char err[256];
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "3 nodes (--nodes, or mpirun -np) must divide") != NULL, "%s", err);
    ck_assert_msg(strstr(err, "; --ranks and --workers do not") != NULL, "%s", err);
    c.ranks = 9; /* which one does not divide is named */
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "; --workers does not") != NULL, "%s", err);
    c.ranks = 8, c.workers = 33;
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "; --ranks does not") != NULL, "%s", err);
}
END_TEST

START_TEST(bad_run_configs_are_refused_clearly)
{
    dh_run_config c;
    dh_run_config_default(&c);
    dh_result r = DH_RESULT_INIT;
    char err[256];
    c.workload = "no-such";
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_ENOENT);
    ck_assert(strstr(err, "no-such") != NULL);
    c.workload = "laion-images";
    c.policy = "ray";
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_EINVAL);
    ck_assert(strstr(err, "ray") != NULL);
    c.policy = "helix";
    c.global_batch = 4; /* fewer than the 8 ranks */
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_EINVAL);
    c.workload = NULL;
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_EINVAL);
}
END_TEST

/* Every policy with ranks above and below workers, on one node and two (issue 12 #1: local
 * with R > W indexed past its node table; the suite runs this under ASan). */
START_TEST(every_policy_runs_every_shape)
{
    static const int shapes[][3] = {{4, 2, 1}, {2, 6, 1}, {8, 4, 2}, {2, 8, 2}};
    const char *const *pol = dh_policy_names();
    for (int p = 0; pol[p]; p++)
        for (int k = 0; k < 4; k++) {
            dh_run_config c;
            dh_run_config_default(&c);
            c.workload = "kinetics-clips";
            c.policy = pol[p];
            c.ranks = shapes[k][0];
            c.workers = shapes[k][1];
            c.nodes = shapes[k][2];
            c.global_batch = 16;
            c.steps = 5;
            dh_result r = DH_RESULT_INIT;
            char err[256];
            ck_assert_msg(dh_sim_run(&c, &r, err, sizeof err) == 0, "%s R=%d W=%d N=%d: %s",
                          pol[p], c.ranks, c.workers, c.nodes, err);
            ck_assert_int_eq(r.delivered + r.failed, 5 * 16);
            ck_assert(isfinite(r.makespan_s) && r.makespan_s > 0);
            ck_assert_int_le(r.memory_peak, r.memory_budget); /* one memory budget */
        }
}
END_TEST

/* Issue 12: NaN, infinities and overflowing sizes are refused where they enter. Before,
 * understate 1:1e200 printed "makespan -nan" and emulated ranks slept nanosleep(-nan); a
 * budget of INT64_MAX overflowed the ring's size arithmetic (UBSan). */
START_TEST(numbers_out_of_range_are_refused_where_they_enter)
{
    dh_run_config c;
    dh_result r = DH_RESULT_INIT;
    char err[256];
    dh_stress st = {.understate_fraction = 1, .understate_factor = 1e200};
    const char *needles[] = {"stress factors", "memory budget", "rho", "cpu_cost_scale",
                             "sample timeout"};
    for (int k = 0; k < 5; k++) {
        dh_run_config_default(&c);
        c.workload = "kinetics-clips";
        c.steps = 3;
        st.understate_factor = k == 0 ? 1e200 : 2;
        c.stress = &st;
        if (k == 1)
            c.memory_budget = INT64_MAX;
        if (k == 2)
            c.rho = NAN;
        if (k == 3)
            c.cpu_cost_scale = INFINITY;
        if (k == 4)
            c.sample_timeout_s = NAN;
        err[0] = 0;
        ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_EINVAL);
        ck_assert_msg(strstr(err, needles[k]), "case %d: %s", k, err);
    }
    dh_run_config_default(&c); /* and the same knobs in range run */
    c.workload = "kinetics-clips";
    c.steps = 3;
    st.understate_factor = DH_STRESS_MAX_FACTOR;
    c.stress = &st;
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), 0);
    ck_assert(isfinite(r.makespan_s));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sim");
    TCase *tc = tcase_create("sim");
    tcase_set_timeout(tc, 120);
    ADD_TEST(tc, metrics_on_a_hand_built_trace);
    ADD_TEST(tc, generating_a_workload_stops_when_asked_and_refuses_what_does_not_fit);
    ADD_TEST(tc, every_workload_is_its_manifest_lines);
    ADD_TEST(tc, the_ordered_bound_counts_the_fill_and_the_drain);
    ADD_TEST(tc, the_ordered_bound_counts_a_task_whole);
    ADD_TEST(tc, no_run_beats_the_ordered_bound);
    ADD_TEST(tc, samples_that_cost_nothing_are_placed_on_every_rank);
    ADD_TEST(tc, a_nodes_default_budget_holds_its_largest_batch);
    ADD_TEST(tc, an_outside_run_gets_the_same_metrics);
    ADD_TEST(tc, a_late_step_keeps_most_ranks_on_time);
    ADD_TEST(tc, more_worker_threads_than_cores_share_them);
    ADD_TEST(tc, emulated_gpu_time_is_the_engines_for_any_policy);
    ADD_TEST(tc, wait_percentiles_stay_bounded_past_the_exact_list);
    ADD_TEST(tc, a_records_slot_opens_zeroed_after_a_fold_a_growth_and_a_stop);
    ADD_TEST(tc, a_nodes_ranks_records_written_at_once_are_the_per_rank_ones);
    ADD_TEST(tc, simulation_is_deterministic_and_accounts_for_every_sample);
    ADD_TEST(tc, helix_beats_the_baselines_where_skew_exists);
    ADD_TEST(tc, policies_never_read_ground_truth);
    ADD_TEST(tc, json_result_has_the_contract_keys);
    ADD_TEST(tc, every_allocation_failure_stops_the_simulation_cleanly);
    ADD_TEST(tc, configs_and_results_grow_without_breaking_callers);
    ADD_TEST(tc, epochs_and_stopping_set_the_run_length);
    ADD_TEST(tc, trace_opens_as_chrome_json);
    ADD_TEST(tc, rank_caps_are_honoured_or_counted);
    ADD_TEST(tc, one_node_is_the_single_pool);
    ADD_TEST(tc, numbers_out_of_range_are_refused_where_they_enter);
    ADD_TEST(tc, every_policy_runs_every_shape);
    ADD_TEST(tc, one_sample_batches_keep_no_move_arena);
    ADD_TEST(tc, idle_nodes_prepare_late_samples_when_the_network_is_cheap);
    ADD_TEST(tc, nodes_must_divide_ranks_and_workers);
    ADD_TEST(tc, the_fetch_model_hides_latency_by_fetching_ahead);
    ADD_TEST(tc, bad_run_configs_are_refused_clearly);
    ADD_TEST(tc, the_ring_of_drawn_truth_changes_no_result);
    ADD_TEST(tc, generating_draws_on_a_thread_of_its_own_the_same_manifest);
    ADD_TEST(tc, the_cost_table_and_truth_are_the_same_on_any_number_of_threads);
    ADD_TEST(tc, a_cost_table_names_its_first_bad_sample_on_any_number_of_threads);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
