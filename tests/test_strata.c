/* test_strata.c - the stratified epoch order: every sample once an epoch, class counts of
 * every prefix against a brute-force merge, steps in proportion, node shares that partition
 * their step without reading it. */
#include "catalog/catalog.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* n samples in `classes` classes, sample i's drawn from a fixed generator (some classes
 * large, some of one sample, some empty when classes is large against n). */
static uint16_t *random_classes(int64_t n, int classes, uint64_t seed)
{
    uint16_t *cls = malloc((size_t)n * sizeof *cls);
    ck_assert_ptr_nonnull(cls);
    dh__rng r;
    dh__rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) { /* skewed: low classes more often */
        uint64_t a = dh__rng_below(&r, (uint64_t)classes), b = dh__rng_below(&r, (uint64_t)classes);
        cls[i] = (uint16_t)DH_MIN(a, b);
    }
    return cls;
}

static dh__strata *make(const uint16_t *cls, int64_t n, int classes, uint64_t key)
{
    dh__strata *t = NULL;
    ck_assert_int_eq(dh__strata_new(cls, n, classes, key, &t), 0);
    return t;
}

/* One epoch's steps of G from position 0 (the last wrapping when G does not divide n): how
 * many times each sample came, in seen (n). Returns the steps drawn. */
static int64_t draw_epoch(dh__strata *t, int64_t n, int64_t G, int64_t epoch, int *seen)
{
    int64_t *step = malloc((size_t)G * sizeof *step), steps = (n + G - 1) / G;
    ck_assert_ptr_nonnull(step);
    memset(seen, 0, (size_t)n * sizeof *seen);
    for (int64_t s = 0; s < steps; s++) {
        ck_assert_int_eq(dh__strata_step(t, epoch, s * G, G, step), 0);
        for (int64_t j = 0; j < G; j++) {
            if (step[j] < 0 || step[j] >= n) /* (Check's asserts are a write each: kept out */
                ck_abort_msg("sample %lld of %lld", (long long)step[j], (long long)n);
            seen[step[j]]++;
        }
    }
    free(step);
    return steps;
}

START_TEST(an_epoch_holds_every_sample_once)
{
    static const int64_t sizes[] = {1, 2, 3, 7, 64, 100, 1000, 4097, 100003};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        int64_t n = sizes[i];
        for (int classes = 1; classes <= 40; classes += 13) {
            uint16_t *cls = random_classes(n, classes, (uint64_t)n * 31 + (uint64_t)classes);
            dh__strata *t = make(cls, n, classes, 42);
            int *seen = malloc((size_t)n * sizeof *seen);
            for (int64_t G = DH_MAX(1, n / 500); G <= n; G = G * 4 + 1) {
                int64_t steps = draw_epoch(t, n, G, 3, seen), pad = steps * G - n;
                /* each sample once; the padding repeats the epoch's first positions */
                int64_t twice = 0;
                for (int64_t k = 0; k < n; k++) {
                    if (seen[k] != 1 && seen[k] != 2) /* of the loops of many) */
                        ck_abort_msg("n %lld G %lld: sample %lld %d times", (long long)n,
                                     (long long)G, (long long)k, seen[k]);
                    twice += seen[k] == 2;
                }
                ck_assert_int_eq(twice, pad);
            }
            free(seen);
            free(cls);
            dh__strata_free(t);
        }
    }
}
END_TEST

/* The brute-force epoch: every (key, class) sorted by double key (exact for these sizes:
 * equal rationals round to the same double), lower class first on a tie. */
typedef struct {
    double key;
    int cls;
} keyed;

static int by_key(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->cls - y->cls;
}

START_TEST(prefix_counts_are_the_merge_of_the_classes)
{
    for (uint64_t seed = 1; seed <= 20; seed++) {
        int64_t n = 50 + (int64_t)(seed * 37 % 400);
        int classes = 1 + (int)(seed * 7 % 30);
        uint16_t *cls = random_classes(n, classes, seed);
        dh__strata *t = make(cls, n, classes, seed);
        keyed *all = malloc((size_t)n * sizeof *all);
        int64_t m = 0;
        for (int c = 0; c < classes; c++) {
            int64_t nc = dh__strata_class_size(t, c);
            for (int64_t a = 0; a < nc; a++)
                all[m++] = (keyed){(2.0 * (double)a + 1) / (2.0 * (double)nc), c};
        }
        ck_assert_int_eq(m, n);
        qsort(all, (size_t)n, sizeof *all, by_key);
        int64_t want[32] = {0}, got[32];
        for (int64_t h = 0; h <= n; h++) {
            dh__strata_counts(t, h, got);
            ck_assert_msg(memcmp(want, got, (size_t)classes * sizeof *got) == 0,
                          "seed %llu: counts differ at h = %lld", (unsigned long long)seed,
                          (long long)h);
            if (h < n)
                want[all[h].cls]++;
        }
        free(all);
        free(cls);
        dh__strata_free(t);
    }
}
END_TEST

START_TEST(every_step_holds_each_class_in_proportion)
{
    int64_t n = 100000, G = 512;
    int classes = 48;
    uint16_t *cls = random_classes(n, classes, 9);
    dh__strata *t = make(cls, n, classes, 9);
    int64_t *step = malloc((size_t)G * sizeof *step), per[48], worst = 0;
    for (int64_t s = 0; s * G + G <= n; s++) {
        ck_assert_int_eq(dh__strata_step(t, 0, s * G, G, step), 0);
        memset(per, 0, sizeof per);
        for (int64_t j = 0; j < G; j++) {
            per[cls[step[j]]]++;
            /* laid out class by class, heaviest (0) first */
            if (j > 0 && cls[step[j - 1]] > cls[step[j]])
                ck_abort_msg("step %lld: class %d after %d", (long long)s, cls[step[j]],
                             cls[step[j - 1]]);
        }
        for (int c = 0; c < classes; c++) {
            double ideal = (double)G * (double)dh__strata_class_size(t, c) / (double)n;
            worst = DH_MAX(worst, (int64_t)ceil(fabs((double)per[c] - ideal)));
        }
    }
    /* a uniform draw of 512 from these classes strays by tens; the apportionment by about one */
    ck_assert_msg(worst <= 2, "a class strayed %lld samples from its share of a step",
                  (long long)worst);
    free(step);
    free(cls);
    dh__strata_free(t);
}
END_TEST

/* Node shares of the step at h0: each in its run, together the step, each sample once; the
 * step laid out by node is the shares one after the other. */
static void check_shares(dh__strata *t, int64_t epoch, int64_t h0, int64_t G, int nodes)
{
    int64_t *step = malloc((size_t)G * sizeof *step), *share = malloc((size_t)G * sizeof *share);
    int64_t *by_node = malloc((size_t)G * sizeof *by_node);
    char *taken = calloc((size_t)G, 1);
    ck_assert_int_eq(dh__strata_step(t, epoch, h0, G, step), 0);
    ck_assert_int_eq(dh__strata_step_by_node(t, epoch, h0, G, nodes, by_node), 0);
    for (int k = 0; k < nodes; k++) {
        ck_assert_int_eq(dh__strata_share(t, epoch, h0, G, nodes, k, share), 0);
        if (memcmp(share, by_node + k * (G / nodes), (size_t)(G / nodes) * sizeof *share))
            ck_abort_msg("node %d of %d: its block of the step laid out by node is not its "
                         "share", k, nodes);
        for (int64_t r = 0; r < G / nodes; r++) {
            int64_t j = r * nodes; /* its run: the step's places [r N, (r + 1) N) */
            while (j < (r + 1) * nodes && (step[j] != share[r] || taken[j]))
                j++;
            if (j == (r + 1) * nodes)
                ck_abort_msg("node %d of %d: sample %lld is not in run %lld", k, nodes,
                             (long long)share[r], (long long)r);
            taken[j] = 1;
        }
    }
    for (int64_t j = 0; j < G; j++)
        if (!taken[j])
            ck_abort_msg("place %lld of the step is in no node's share", (long long)j);
    free(taken);
    free(by_node);
    free(share);
    free(step);
}

START_TEST(node_shares_partition_their_step)
{
    int64_t n = 20000;
    uint16_t *cls = random_classes(n, 24, 5);
    dh__strata *t = make(cls, n, 24, 5);
    static const int nodes[] = {1, 2, 3, 8, 64, 512};
    for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++) {
        int64_t G = nodes[i] * 6;
        check_shares(t, 0, 0, G, nodes[i]);
        check_shares(t, 2, 7 * G % (n - G), G, nodes[i]);
        check_shares(t, 1, n - G / 2, G, nodes[i]); /* a step wrapping to the epoch's start */
    }
    free(cls);
    dh__strata_free(t);
}
END_TEST

START_TEST(shares_weigh_about_the_same)
{
    /* class c costs 2^-c (halvings, as the deal's classes): every node's share is within the
     * spread of its runs of the mean, which a step laid out by cost keeps small */
    int64_t n = 50000, G = 4096;
    int classes = 16, nodes = 64;
    uint16_t *cls = random_classes(n, classes, 11);
    dh__strata *t = make(cls, n, classes, 11);
    int64_t *step = malloc((size_t)G * sizeof *step), *share = malloc((size_t)G * sizeof *share);
    ck_assert_int_eq(dh__strata_step(t, 0, G, G, step), 0);
    double total = 0, spread = 0;
    for (int64_t j = 0; j < G; j++)
        total += ldexp(1.0, -cls[step[j]]);
    for (int64_t r = 0; r < G / nodes; r++)
        spread += ldexp(1.0, -cls[step[r * nodes]]) - ldexp(1.0, -cls[step[r * nodes + nodes - 1]]);
    for (int k = 0; k < nodes; k++) {
        ck_assert_int_eq(dh__strata_share(t, 0, G, G, nodes, k, share), 0);
        double load = 0;
        for (int64_t r = 0; r < G / nodes; r++)
            load += ldexp(1.0, -cls[share[r]]);
        ck_assert_msg(fabs(load - total / nodes) <= spread,
                      "node %d: %.3f against %.3f (spread %.3f)", k, load, total / nodes, spread);
    }
    ck_assert(spread < 0.1 * total / nodes); /* the bound above is tight enough to mean it */
    free(share);
    free(step);
    free(cls);
    dh__strata_free(t);
}
END_TEST

START_TEST(each_class_is_read_from_the_order_given)
{
    int64_t n = 3000, G = 300;
    uint16_t *cls = random_classes(n, 5, 2);
    dh__strata *t = make(cls, n, 5, 77), *other = make(cls, n, 5, 78);
    int64_t x[300], y[300];
    /* none given: each class in id order, the classes heaviest first */
    ck_assert_int_eq(dh__strata_step(t, 4, 0, G, y), 0);
    for (int64_t j = 1; j < G; j++)
        ck_assert(cls[y[j - 1]] < cls[y[j]] || (cls[y[j - 1]] == cls[y[j]] && y[j - 1] < y[j]));
    /* each class reversed: the step takes each class's first indices of that order */
    const int64_t *first = NULL;
    const uint32_t *ids = dh__strata_ids(t, &first);
    uint32_t *rev = malloc((size_t)n * sizeof *rev);
    for (int c = 0; c < 5; c++)
        for (int64_t a = first[c]; a < first[c + 1]; a++)
            rev[a] = ids[first[c + 1] - 1 - (a - first[c])];
    dh__strata_use(t, rev);
    ck_assert_int_eq(dh__strata_step(t, 4, 0, G, x), 0);
    for (int64_t j = 0; j < G; j++) /* the same classes at the same places, each reversed */
        ck_assert(cls[x[j]] == cls[y[j]] && (j == 0 || cls[x[j - 1]] < cls[x[j]] ||
                                             x[j - 1] > x[j]));
    dh__strata_use(t, NULL); /* back to id order */
    ck_assert_int_eq(dh__strata_step(t, 4, 0, G, x), 0);
    ck_assert_mem_eq(x, y, sizeof x);
    /* the key and the epoch draw the shares' rotations: the same step, other shares */
    ck_assert_int_eq(dh__strata_share(t, 4, 600, G, 10, 0, x), 0);
    ck_assert_int_eq(dh__strata_share(other, 4, 600, G, 10, 0, y), 0);
    ck_assert(memcmp(x, y, (size_t)(G / 10) * sizeof *x) != 0);
    ck_assert_int_eq(dh__strata_share(t, 5, 600, G, 10, 0, y), 0);
    ck_assert(memcmp(x, y, (size_t)(G / 10) * sizeof *x) != 0);
    free(rev);
    dh__strata_free(other);
    dh__strata_free(t);
    free(cls);
}
END_TEST

START_TEST(bad_arguments_are_refused)
{
    uint16_t cls[10] = {0, 1, 2, 0, 1, 2, 0, 1, 2, 3};
    dh__strata *t = NULL;
    int64_t out[10];
    ck_assert_int_eq(dh__strata_new(cls, 10, 3, 1, &t), DH_EINVAL); /* class 3 of 3 */
    ck_assert_ptr_null(t);
    ck_assert_int_eq(dh__strata_new(cls, 0, 4, 1, &t), DH_EINVAL);
    ck_assert_int_eq(dh__strata_new(cls, 10, DH__STRATA_MAX + 1, 1, &t), DH_EINVAL);
    ck_assert_int_eq(dh__strata_new(cls, 10, 4, 1, &t), 0);
    ck_assert_int_eq(dh__strata_step(t, 0, 10, 5, out), DH_EINVAL);  /* past the epoch */
    ck_assert_int_eq(dh__strata_step(t, 0, 0, 11, out), DH_EINVAL);  /* more than the epoch */
    ck_assert_int_eq(dh__strata_step(t, -1, 0, 5, out), DH_EINVAL);
    ck_assert_int_eq(dh__strata_share(t, 0, 0, 6, 4, 0, out), DH_EINVAL); /* 4 nodes, 6 */
    ck_assert_int_eq(dh__strata_share(t, 0, 0, 8, 4, 4, out), DH_EINVAL); /* node 4 of 4 */
    ck_assert_int_eq(dh__strata_step_by_node(t, 0, 0, 6, 4, out), DH_EINVAL);
    ck_assert_int_eq(dh__strata_step_by_node(t, 0, 0, 8, 0, out), DH_EINVAL);
    ck_assert_int_eq(dh__strata_share(t, 0, 0, 8, 4, 3, out), 0);
    dh__strata_free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("strata");
    TCase *tc = tcase_create("core");
    ADD_TEST(tc, an_epoch_holds_every_sample_once);
    ADD_TEST(tc, prefix_counts_are_the_merge_of_the_classes);
    ADD_TEST(tc, every_step_holds_each_class_in_proportion);
    ADD_TEST(tc, node_shares_partition_their_step);
    ADD_TEST(tc, shares_weigh_about_the_same);
    ADD_TEST(tc, each_class_is_read_from_the_order_given);
    ADD_TEST(tc, bad_arguments_are_refused);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
