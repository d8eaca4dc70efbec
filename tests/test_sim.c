/*
 * test_sim.c - metrics and bound on hand-built records, the simulator's
 * determinism and accounting, the JSON contract, the trace, and the rule
 * that policies never read ground truth.
 */
#include "metrics/metrics.h"
#include "sim/setup.h"
#include "testutil.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

START_TEST(metrics_on_a_hand_built_trace)
{
    /* R = 2, 3 steps. Step 0 (fill): ready 1.0 vs deadline 0 on both ranks. Step 1: rank 0
     * on time, rank 1 0.5 s late. Step 2: both on time. Compute 1 s per batch, makespan 5 s.
     * True costs: step g sums 2, 2, 4, max g 1, 1, 3; o = 0.1; CPU sum 6 over W = 2. */
    dh__records rec;
    ck_assert_int_eq(dh__records_init(&rec, 2, 3), 0);
    double deadline[] = {0, 0, 2, 2, 3.5, 3.5}, ready[] = {1, 1, 1.5, 2.5, 3, 3};
    for (int b = 0; b < 6; b++) {
        rec.deadline[b] = deadline[b];
        rec.ready[b] = ready[b];
        rec.compute[b] = 1.0;
    }
    double sum[] = {2, 2, 4}, mx[] = {1, 1, 3};
    memcpy(rec.step_gpu_sum, sum, sizeof sum);
    memcpy(rec.step_gpu_max, mx, sizeof mx);
    rec.step_fixed = 0.1;
    rec.cpu_true_sum = 6;
    rec.makespan = 5;
    rec.samples = rec.delivered = 12;
    /* Step 1's first task started at 1.0; rank 1's longest took 1.2 s (and a shorter 0.3):
     * alone it ends 0.2 s after rank 1's deadline, 0.2 of its 0.5 s wait. Rank 0's long task
     * does not matter: rank 0 did not wait. */
    dh__records_task(&rec, 1, 1, 1.3, 0.3);
    dh__records_task(&rec, 1, 1, 1.0, 1.2);
    dh__records_task(&rec, 1, 0, 1.1, 5.0);
    dh_result r;
    memset(&r, 0, sizeof r);
    dh__records_finish(&rec, 2, &r);
    ck_assert_double_eq_tol(r.wait_single_frac, 0.4, 1e-9);
    ck_assert_double_eq_tol(r.fill_wait_ms, 1000, 1e-9);
    ck_assert_double_eq_tol(r.miss_rate, 0.25, 1e-12);     /* 1 of 4 after the fill step */
    ck_assert_double_eq_tol(r.wait_mean_ms, 125, 1e-9);    /* (0 + 500 + 0 + 0) / 4 */
    ck_assert_double_eq_tol(r.wait_p50_ms, 0, 1e-12);
    ck_assert_double_eq_tol(r.wait_p95_ms, 500, 1e-9);
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

static dh_result run(const char *workload, const char *policy, uint64_t seed, int64_t steps)
{
    dh_run_config c;
    dh_run_config_default(&c);
    c.workload = workload;
    c.policy = policy;
    c.seed = seed;
    c.steps = steps;
    dh_result r;
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
        ck_assert_int_le(a.memory_peak, a.memory_budget + a.memory_budget / 8);
        dh_result c = run("omni-mix", pol[p], 8, 30);
        ck_assert_double_ne(a.makespan_s, c.makespan_s);
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

/* A manifest whose sim truth is scaled by k; same descriptors. */
static dh_manifest *truth_manifest(double k)
{
    dh_manifest *m;
    dh_manifest_new("", NULL, &m);
    char line[512];
    for (int i = 0; i < 64; i++) {
        int n = snprintf(line, sizeof line,
                         "{\"id\":\"s%d\",\"text_tokens\":%d,\"media\":[{\"type\":\"image\","
                         "\"path\":\"i/%d.jpg\",\"codec\":\"jpeg\",\"width\":%d,\"height\":%d}],"
                         "\"sim\":{\"cpu_ms\":%.3f,\"gpu_ms\":%.3f}}",
                         i, 50 + (i * 37) % 900, i, 300 + i * 10, 200 + i * 7, k * (1 + i % 5),
                         k * (10 + (i * 13) % 7));
        ck_assert_int_eq(dh_manifest_parse_line(m, line, (size_t)n, i + 1, NULL, 0), 0);
    }
    return m;
}

START_TEST(policies_never_read_ground_truth)
{
    /* Changing the truth (sim fields) must not change the first step's plan. */
    dh_manifest *ma = truth_manifest(1.0), *mb = truth_manifest(7.0);
    dh_run_config c;
    dh_run_config_default(&c);
    c.global_batch = 16;
    c.ranks = 4;
    c.workers = 8;
    c.policy = "helix";
    int plan_a[16], plan_b[16];
    for (int v = 0; v < 2; v++) {
        c.manifest = v ? mb : ma;
        dh__run run;
        char err[256];
        ck_assert_int_eq(dh__run_setup(&c, &run, err, sizeof err), 0);
        dh__sched_config sc;
        dh__run_sched_config(&run, &sc);
        dh__sched *s;
        ck_assert_int_eq(dh__sched_new(&sc, &s), 0);
        for (int k = 0; k < 16; k++)
            (v ? plan_b : plan_a)[k] = dh__sched_rank_of(s, 0, k);
        if (v) /* the truth did differ */
            ck_assert_double_eq_tol(run.samples.cpu_true[0], 7e-3, 1e-9);
        dh__sched_free(s);
        dh__run_free(&run);
    }
    ck_assert_mem_eq(plan_a, plan_b, sizeof plan_a);
    dh_manifest_free(ma);
    dh_manifest_free(mb);
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
    dh_result r;
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
    dh_result r;
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
    c.cpu_noise_sigma = 0.6;
    c.cpu_heavy_fraction = 0.1;
    c.cpu_heavy_factor = 5;
    if (net_gbps > 0)
        c.net_bandwidth = net_gbps * 1e9 / 8;
    dh_result r;
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

START_TEST(nodes_must_divide_ranks_and_workers)
{
    dh_run_config c;
    dh_run_config_default(&c);
    c.workload = "omni-mix";
    c.nodes = 3; /* 8 ranks, 32 workers */
    dh_result r;
    char err[256];
    ck_assert_int_eq(dh_sim_run(&c, &r, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "--nodes 3 must divide") != NULL, "%s", err);
}
END_TEST

START_TEST(bad_run_configs_are_refused_clearly)
{
    dh_run_config c;
    dh_run_config_default(&c);
    dh_result r;
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

int main(void)
{
    Suite *s = suite_create("sim");
    TCase *tc = tcase_create("sim");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, metrics_on_a_hand_built_trace);
    tcase_add_test(tc, simulation_is_deterministic_and_accounts_for_every_sample);
    tcase_add_test(tc, helix_beats_the_baselines_where_skew_exists);
    tcase_add_test(tc, policies_never_read_ground_truth);
    tcase_add_test(tc, json_result_has_the_contract_keys);
    tcase_add_test(tc, trace_opens_as_chrome_json);
    tcase_add_test(tc, rank_caps_are_honoured_or_counted);
    tcase_add_test(tc, one_node_is_the_single_pool);
    tcase_add_test(tc, idle_nodes_prepare_late_samples_when_the_network_is_cheap);
    tcase_add_test(tc, nodes_must_divide_ranks_and_workers);
    tcase_add_test(tc, bad_run_configs_are_refused_clearly);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
