/* test_plan.c - the batch partition: invariants, known optima, caps. */
#include "plan/plan.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double max_load(const double *g, const int32_t *rank_of, int n, int R)
{
    double load[16] = {0}, m = 0;
    for (int i = 0; i < n; i++)
        load[rank_of[i]] += g[i];
    for (int r = 0; r < R; r++)
        m = fmax(m, load[r]);
    return m;
}

/* Exact optimum by enumerating every assignment (n <= 10, R <= 3). */
static double brute_force(const double *g, int n, int R)
{
    int32_t a[16] = {0};
    double best = INFINITY;
    long total = 1;
    for (int i = 0; i < n; i++)
        total *= R;
    for (long code = 0; code < total; code++) {
        long c = code;
        for (int i = 0; i < n; i++, c /= R)
            a[i] = (int32_t)(c % R);
        best = fmin(best, max_load(g, a, n, R));
    }
    return best;
}

START_TEST(refinement_fixes_the_classic_lpt_case)
{
    /* LPT on {3,3,2,2,2} over 2 ranks gives 7 | 5; the optimum is 6 | 6 ({3,3} | {2,2,2}). */
    double g[] = {3, 3, 2, 2, 2};
    int32_t rank_of[5];
    dh__part_in in = {.n = 5, .ranks = 2, .gpu = g};
    dh__part_out out;
    ck_assert_int_eq(dh__partition(&in, rank_of, &out), 0);
    ck_assert_double_eq_tol(out.max_gpu, 6.0, 1e-9);
    ck_assert_double_eq_tol(max_load(g, rank_of, 5, 2), 6.0, 1e-9);
    ck_assert_double_eq_tol(out.mean_gpu, 6.0, 1e-9);
    ck_assert_int_ge(out.moves, 1);
}
END_TEST

START_TEST(near_optimal_on_random_small_instances)
{
    srand(5);
    double worst = 1.0, sum = 0;
    int cases = 0;
    for (int t = 0; t < 300; t++) {
        int n = 3 + rand() % 8, R = 2 + rand() % 2;
        double g[16];
        for (int i = 0; i < n; i++) /* heavy-tailed, like quadratic attention costs */
            g[i] = pow(1.0 + rand() % 100, 2.0);
        int32_t rank_of[16];
        dh__part_in in = {.n = n, .ranks = R, .gpu = g};
        dh__part_out out;
        ck_assert_int_eq(dh__partition(&in, rank_of, &out), 0);
        for (int i = 0; i < n; i++)
            ck_assert(rank_of[i] >= 0 && rank_of[i] < R);
        double got = max_load(g, rank_of, n, R), opt = brute_force(g, n, R);
        ck_assert_double_eq_tol(got, out.max_gpu, 1e-6 * got);
        ck_assert_double_ge(got, opt - 1e-9);
        /* Graham's bound for LPT is 4/3 - 1/(3R); refinement only lowers the maximum. */
        ck_assert_double_le(got, (4.0 / 3.0 - 1.0 / (3.0 * R)) * opt + 1e-9);
        worst = fmax(worst, got / opt);
        sum += got / opt;
        cases++;
    }
    printf("partition vs exact optimum on %d small instances: mean %.4f, worst %.4f\n", cases,
           sum / cases, worst);
}
END_TEST

START_TEST(every_sample_placed_once_at_scale)
{
    int n = 4096, R = 512;
    double *g = malloc(n * sizeof *g), *c = malloc(n * sizeof *c);
    int32_t *rank_of = malloc(n * sizeof *rank_of);
    srand(9);
    for (int i = 0; i < n; i++) {
        g[i] = 1.0 + rand() % 1000;
        c[i] = rand() % 50;
    }
    dh__part_in in = {.n = n, .ranks = R, .gpu = g, .cpu = c};
    dh__part_out out;
    ck_assert_int_eq(dh__partition(&in, rank_of, &out), 0);
    int count[512] = {0};
    for (int i = 0; i < n; i++)
        count[rank_of[i]]++;
    int total = 0;
    for (int r = 0; r < R; r++)
        total += count[r];
    ck_assert_int_eq(total, n);
    /* Against the lower bound max(mean, largest sample). */
    double lb = fmax(out.mean_gpu, 1000.0);
    ck_assert_double_le(out.max_gpu, lb * 4.0 / 3.0);
    printf("4096 samples over 512 ranks: max/lower bound %.4f\n", out.max_gpu / lb);
    free(g);
    free(c);
    free(rank_of);
}
END_TEST

START_TEST(refinement_reaches_the_bound_over_many_ranks)
{
    /* Eight samples a rank, GPU cost quadratic in a log-normal token count (sigma 0.3, so
     * the mean load, not the largest sample, is the bound): LPT leaves the most loaded ranks
     * over it and refinement brings the maximum to within 0.5% of it in hundreds of moves,
     * each needing the most and least loaded ranks found right after the last. */
    int n = 16384, R = 2048;
    double *g = malloc(n * sizeof *g);
    int32_t *rank_of = malloc(n * sizeof *rank_of);
    ck_assert(g && rank_of);
    for (int seed = 1; seed <= 3; seed++) {
        srand(seed);
        double largest = 0;
        for (int i = 0; i < n; i++) {
            double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = rand() / (RAND_MAX + 1.0);
            double tokens = 1000 * exp(0.3 * sqrt(-2 * log(u1)) * cos(6.283185307 * u2));
            g[i] = tokens + tokens * tokens / 4000.0;
            largest = fmax(largest, g[i]);
        }
        dh__part_in in = {.n = n, .ranks = R, .gpu = g};
        dh__part_out out;
        ck_assert_int_eq(dh__partition(&in, rank_of, &out), 0);
        ck_assert_int_gt(out.moves, 100);
        ck_assert_double_le(out.max_gpu, 1.005 * fmax(out.mean_gpu, largest));
    }
    free(g);
    free(rank_of);
}
END_TEST

/* Costs for the refinement tests: quadratic in a log-normal token count (sigma 0.3), or
 * (quantised) a few dozen distinct values, so that many moves and swaps tie. */
static void mild_costs(double *g, int n, int seed, int quantised)
{
    srand(seed);
    for (int i = 0; i < n; i++) {
        double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = rand() / (RAND_MAX + 1.0);
        double tokens = 1000 * exp(0.3 * sqrt(-2 * log(u1)) * cos(6.283185307 * u2));
        g[i] = quantised ? round(tokens / 50.0) : tokens + tokens * tokens / 4000.0;
    }
}

START_TEST(gathered_refinement_chooses_as_the_list_walk)
{
    /* Without caps the refinement reads members into arrays and scans swaps without
     * branches; with caps (here never binding) it walks the lists and asks the caps. Both
     * must choose the same move every round: the same plan, move for move. Shapes: 8 a rank
     * (arrays), 100 a rank (over the arrays' 64: lists), and one rank holding the many
     * samples that cost nothing next to ranks of a few (both in one round). */
    struct {
        int n, R, quantised, zeros;
    } shape[] = {{4096, 512, 0, 0}, {4096, 512, 1, 0}, {6000, 60, 0, 0},
                 {6000, 60, 1, 0},  {2000, 200, 0, 300}};
    for (size_t k = 0; k < sizeof shape / sizeof *shape; k++) {
        int n = shape[k].n, R = shape[k].R;
        double *g = malloc(n * sizeof *g);
        int32_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        ck_assert(g && a && b);
        int64_t moved = 0; /* LPT's plans: a few moves at 100 a rank, hundreds at 8 */
        for (int seed = 1; seed <= 3; seed++) {
            mild_costs(g, n, seed, shape[k].quantised);
            for (int i = 0; i < shape[k].zeros; i++)
                g[i * 3] = 0;
            dh__part_in fast = {.n = n, .ranks = R, .gpu = g};
            dh__part_in walk = fast;
            walk.cap_tokens = INT64_MAX;
            dh__part_out fo, wo;
            ck_assert_int_eq(dh__partition(&fast, a, &fo), 0);
            ck_assert_int_eq(dh__partition(&walk, b, &wo), 0);
            moved += fo.moves;
            ck_assert_int_eq(fo.moves, wo.moves);
            ck_assert_int_eq(memcmp(a, b, n * sizeof *a), 0);
            ck_assert(fo.max_gpu == wo.max_gpu);
            /* improving a given placement (the rebalancer's call) takes the same path */
            for (int i = 0; i < n; i++)
                a[i] = b[i] = (int32_t)((i * 7) % R);
            fast.initial = walk.initial = a;
            int32_t *fa = malloc(n * sizeof *fa), *wa = malloc(n * sizeof *wa);
            ck_assert(fa && wa);
            ck_assert_int_eq(dh__partition(&fast, fa, &fo), 0);
            ck_assert_int_eq(dh__partition(&walk, wa, &wo), 0);
            ck_assert_int_gt(fo.moves, 0);
            ck_assert_int_eq(fo.moves, wo.moves);
            ck_assert_int_eq(memcmp(fa, wa, n * sizeof *fa), 0);
            free(fa);
            free(wa);
        }
        ck_assert_int_gt(moved, 0);
        free(g);
        free(a);
        free(b);
    }
}
END_TEST

START_TEST(lpt_starts_from_the_loads_already_there)
{
    /* Ranks already loaded 3, 2, 1, 0 (base_gpu, no initial placement): LPT must see rank 3
     * as the least loaded, then rank 2. Its heap of ranks was filled in rank order and never ordered, so
     * the first sample went to rank 0 (load 4) and the refinement had to move it back. */
    double base[] = {3, 2, 1, 0}, g[] = {1, 1};
    int32_t rank_of[2];
    dh__part_in in = {.n = 2, .ranks = 4, .gpu = g, .base_gpu = base};
    dh__part_out out;
    ck_assert_int_eq(dh__partition(&in, rank_of, &out), 0);
    ck_assert_int_eq(out.moves, 0);
    ck_assert_int_eq(rank_of[0], 3);
    ck_assert_int_eq(rank_of[1], 2); /* 2 and 3 both at 1 now: fewer samples first */
    ck_assert(out.max_gpu == 3);
}
END_TEST

START_TEST(caps_are_respected_when_feasible)
{
    /* Four equal-cost samples, two of them huge in bytes: a byte cap forces them apart. */
    double g[] = {1, 1, 1, 1};
    int64_t bytes[] = {100, 100, 1, 1}, tokens[] = {10, 10, 10, 10};
    int32_t rank_of[4];
    dh__part_in in = {.n = 4, .ranks = 2, .gpu = g, .bytes = bytes, .tokens = tokens,
                      .cap_bytes = 150, .cap_tokens = 20};
    dh__part_out out;
    ck_assert_int_eq(dh__partition(&in, rank_of, &out), 0);
    ck_assert_int_ne(rank_of[0], rank_of[1]);
    ck_assert_int_eq(out.cap_violations, 0);
    /* Caps no placement can meet are counted, and every sample is still placed. */
    in.cap_tokens = 5;
    ck_assert_int_eq(dh__partition(&in, rank_of, &out), 0);
    ck_assert_int_eq(out.cap_violations, 4);
    for (int i = 0; i < 4; i++)
        ck_assert(rank_of[i] == 0 || rank_of[i] == 1);
}
END_TEST

/* The comparison the radix sort replaced: it must give exactly this order. */
static const double *cmp_gpu, *cmp_cpu;
static int by_gpu_cpu_index(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    if (cmp_gpu[i] != cmp_gpu[j])
        return cmp_gpu[i] < cmp_gpu[j] ? 1 : -1;
    if (cmp_cpu && cmp_cpu[i] != cmp_cpu[j])
        return cmp_cpu[i] < cmp_cpu[j] ? 1 : -1;
    return i - j;
}

START_TEST(lpt_order_is_gpu_then_cpu_descending_then_index)
{
    enum { N = 5000 };
    double *gpu = malloc(N * sizeof *gpu), *cpu = malloc(N * sizeof *cpu);
    int *got = malloc(N * sizeof *got), *want = malloc(N * sizeof *want);
    ck_assert(gpu && cpu && got && want);
    srand(7);
    /* the radix sort (large: digits of 11 bits; from 1,024 to 4,095, the nodes a job's groups
     * are ordered by: digits of 8) and the merge sort (a node's share: small) give the same
     * order */
    static const int sizes[] = {N, 1023, 700, 33, 2, 1, N, N, N, 1024, 4095};
    for (int trial = 0; trial < 4 * 11; trial++) {
        int n = sizes[trial / 4], ties = trial / 4 == 6 || trial / 4 == 7; /* runs of 1,024+ */
        int skew = trial / 4 == 8; /* the sort's buckets: one of thousands, some of tens, ones */
        for (int i = 0; i < n; i++) {
            /* many ties, zeros of both signs, negatives, tiny and huge values; or values
             * that differ in their last bits only (the radix sort's first pass leaves
             * their order to the second), long runs of them */
            int k = rand() % 9;
            gpu[i] = skew ? (k < 6 ? 2.0 + (rand() % 5) * 1e-12
                            : k < 8 ? 3.0 + (rand() % 64) * 1e-9 : (rand() % 100000) * 1e-2)
                   : ties && trial / 4 == 6 ? (rand() % 3 ? 1.0 : nextafter(1.0, 2.0))
                   : ties ? (k < 6 ? 1.0 + (rand() % 5) * 1e-15 : (rand() % 50) * 0.125)
                   : k == 0 ? 0.0 : k == 1 ? -0.0 : k == 2 ? 1.5 : k == 3 ? -2.0 - rand() % 3
                   : k == 4 ? 1e-300 * (rand() % 4) : k == 5 ? 1e300 : (rand() % 50) * 0.125;
            cpu[i] = (rand() % 4) * (rand() % 2 ? 1.0 : -0.0);
            want[i] = i;
        }
        cmp_gpu = gpu;
        cmp_cpu = trial % 2 ? NULL : cpu;
        qsort(want, (size_t)n, sizeof *want, by_gpu_cpu_index);
        dh__part_in in = {.n = n, .ranks = 3, .gpu = gpu, .cpu = cmp_cpu};
        ck_assert_int_eq(dh__part_lpt_order(&in, got), 0);
        for (int i = 0; i < n; i++)
            ck_assert_int_eq(got[i], want[i]);
    }
    dh__part_in none = {.n = 0, .ranks = 1, .gpu = gpu};
    ck_assert_int_eq(dh__part_lpt_order(&none, got), 0);
    free(gpu);
    free(cpu);
    free(got);
    free(want);
}
END_TEST

START_TEST(stride_is_distributed_sampler_order)
{
    int32_t rank_of[10];
    dh__partition_stride(10, 4, rank_of);
    int expect[] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1};
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(rank_of[i], expect[i]);
    dh__part_in bad = {.n = 1, .ranks = 0};
    dh__part_out out;
    ck_assert_int_eq(dh__partition(&bad, rank_of, &out), DH_EINVAL);
}
END_TEST
/* Samples that weigh nothing (text costing nothing to prepare) all went to one rank, and
 * the simulator stalled on the others' empty batches: every rank gets one when there are
 * enough, the lightest of the fullest rank. */
START_TEST(no_rank_is_left_without_a_sample)
{
    double g[10] = {0}, mixed[6] = {5, 0, 0, 0, 0, 0};
    int32_t rank_of[10];
    dh__part_out out;
    for (int n = 4; n <= 10; n += 6) {
        dh__part_in in = {.n = n, .ranks = 4, .gpu = g};
        ck_assert_int_eq(dh__partition(&in, rank_of, &out), 0);
        int count[4] = {0};
        for (int i = 0; i < n; i++)
            count[rank_of[i]]++;
        for (int r = 0; r < 4; r++)
            ck_assert_msg(count[r] >= 1, "n=%d: rank %d has none", n, r);
    }
    dh__part_in in = {.n = 6, .ranks = 4, .gpu = mixed};
    ck_assert_int_eq(dh__partition(&in, rank_of, &out), 0);
    int count[4] = {0};
    for (int i = 0; i < 6; i++)
        count[rank_of[i]]++;
    ck_assert(count[0] && count[1] && count[2] && count[3]);
    ck_assert_double_eq_tol(out.max_gpu, 5, 1e-12); /* the heavy one alone */
}
END_TEST

/* A user's text-only manifest: every sample predicted to cost nothing went to rank 0 (25 of
 * 32 a step, the others one each), since rank 0 stayed the least loaded and ties went to the
 * lower index. Ties now go to the rank with fewer tokens, then fewer samples. */
START_TEST(samples_that_cost_nothing_are_spread_by_tokens_then_count)
{
    double g[32] = {0};
    int64_t tok[32];
    int32_t rank_of[32];
    dh__part_out out;
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 32; i++)
            tok[i] = k ? 100 + 37 * (i % 5) : 0; /* no tokens: by count */
        dh__part_in in = {.n = 32, .ranks = 8, .gpu = g, .cpu = g, .tokens = tok};
        ck_assert_int_eq(dh__partition(&in, rank_of, &out), 0);
        int count[8] = {0};
        int64_t t[8] = {0}, most = 0, total = 0;
        for (int i = 0; i < 32; i++) {
            count[rank_of[i]]++;
            t[rank_of[i]] += tok[i];
            total += tok[i];
        }
        for (int r = 0; r < 8; r++) {
            if (!k)
                ck_assert_int_eq(count[r], 4);
            most = t[r] > most ? t[r] : most;
        }
        ck_assert_int_le(most, total / 8 + 248); /* within the largest sample of the mean */
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan");
    TCase *tc = tcase_create("plan");
    tcase_set_timeout(tc, 60);
    ADD_TEST(tc, refinement_fixes_the_classic_lpt_case);
    ADD_TEST(tc, near_optimal_on_random_small_instances);
    ADD_TEST(tc, every_sample_placed_once_at_scale);
    ADD_TEST(tc, gathered_refinement_chooses_as_the_list_walk);
    ADD_TEST(tc, lpt_starts_from_the_loads_already_there);
    ADD_TEST(tc, caps_are_respected_when_feasible);
    ADD_TEST(tc, stride_is_distributed_sampler_order);
    ADD_TEST(tc, lpt_order_is_gpu_then_cpu_descending_then_index);
    ADD_TEST(tc, refinement_reaches_the_bound_over_many_ranks);
    ADD_TEST(tc, no_rank_is_left_without_a_sample);
    ADD_TEST(tc, samples_that_cost_nothing_are_spread_by_tokens_then_count);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
