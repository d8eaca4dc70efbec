/*
 * bench_strata.c - what drawing a step's order costs one node (issue 25): the
 * uniform order, which every node's replica draws over the whole global batch,
 * against the stratified order (src/catalog/strata.c: `--order stratified`),
 * laid out class by class, laid out node by node (what every replica draws
 * with it), and as one node's share found alone; each sampler's shuffle of
 * the next epoch ahead included. The classes are drawn at random, skewed to
 * the heavy ones (the order's cost does not depend on which sample is in which
 * class). CPU time of one thread, per step, over STEPS steps that cross an
 * epoch's boundary when SAMPLES / G < STEPS.
 *   usage: bench_strata [SAMPLES] [GLOBAL_BATCH] [NODES] [CLASSES] [STEPS]
 *   (default 1048576 32768 1024 64 200)
 */
#include "bench_clock.h"
#include "catalog/catalog.h"

#include <stdio.h>
#include <stdlib.h>

static long long arg(int argc, char **argv, int i, long long dflt)
{
    return argc > i ? atoll(argv[i]) : dflt;
}

/* A manifest of n minimal samples (what the sampler keys on: their content hash). */
static dh_manifest *make_manifest(int64_t n)
{
    dh_manifest *m = NULL;
    if (dh_manifest_new("", NULL, &m))
        return NULL;
    char line[96];
    for (int64_t i = 0; i < n; i++) {
        int len = snprintf(line, sizeof line, "{\"id\":\"s%lld\",\"text_tokens\":1}", (long long)i);
        if (dh_manifest_parse_line(m, line, (size_t)len, i + 1, NULL, 0)) {
            dh_manifest_free(m);
            return NULL;
        }
    }
    return m;
}

enum { UNIFORM, STRATIFIED, BY_NODE, SHARE };

/* Seconds of this thread's CPU a step of a sampler's draw: uniform, stratified (the whole
 * step class by class, or node by node), or node 0's share. */
static double time_sampler(const dh_manifest *m, int64_t G, int steps, int64_t *out,
                           const uint16_t *cls, int classes, int nodes, int how)
{
    dh_sampler_opts so = {.global_batch = G, .seed = 1, .shuffle = 1, .drop_last = 1};
    dh_sampler *s = NULL;
    if (dh_sampler_new(m, &so, &s) || (how != UNIFORM && dh__sampler_stratify(s, cls, classes)))
        return -1;
    double t0 = 0;
    for (int k = 0; k <= steps; k++) { /* step 0: the first epoch's shuffle, paid once */
        int rc = how == BY_NODE ? dh__sampler_next_by_node(s, nodes, out)
                 : how == SHARE ? dh__sampler_next_share(s, nodes, 0, out)
                                : dh_sampler_next(s, out, G);
        if (rc)
            return -1;
        if (k == 0)
            t0 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
    }
    double t = (bench_seconds(CLOCK_THREAD_CPUTIME_ID) - t0) / steps;
    dh_sampler_free(s);
    return t;
}

int main(int argc, char **argv)
{
    int64_t n = arg(argc, argv, 1, 1048576), G = arg(argc, argv, 2, 32768);
    int nodes = (int)arg(argc, argv, 3, 1024), classes = (int)arg(argc, argv, 4, 64);
    int steps = (int)arg(argc, argv, 5, 200);
    if (n < 1 || G < 1 || G > n || nodes < 1 || G % nodes || classes < 1 ||
        classes > DH__STRATA_MAX || steps < 1) {
        fprintf(stderr, "usage: bench_strata [SAMPLES] [GLOBAL_BATCH <= SAMPLES] [NODES "
                        "dividing it] [CLASSES 1..%d] [STEPS]\n", DH__STRATA_MAX);
        return 2;
    }
    uint16_t *cls = malloc((size_t)n * sizeof *cls);
    int64_t *out = malloc((size_t)G * sizeof *out);
    dh_manifest *m = make_manifest(n);
    if (!cls || !out || !m)
        return fprintf(stderr, "bench_strata: out of memory\n"), 1;
    dh__rng r;
    dh__rng_seed(&r, 7);
    for (int64_t i = 0; i < n; i++) {
        uint64_t a = dh__rng_below(&r, (uint64_t)classes), b = dh__rng_below(&r, (uint64_t)classes);
        cls[i] = (uint16_t)DH_MIN(a, b);
    }
    double whole = time_sampler(m, G, steps, out, cls, classes, nodes, UNIFORM);
    double laid = time_sampler(m, G, steps, out, cls, classes, nodes, STRATIFIED);
    double by_node = time_sampler(m, G, steps, out, cls, classes, nodes, BY_NODE);
    double share = time_sampler(m, G, steps, out, cls, classes, nodes, SHARE);
    printf("samples %lld, global batch %lld, %d nodes, %d classes, %d steps; CPU per step:\n",
           (long long)n, (long long)G, nodes, classes, steps);
    printf("  uniform, whole step                        %9.1f us  (%.1f ns a sample)\n",
           whole * 1e6, whole * 1e9 / (double)G);
    printf("  stratified, whole step class by class      %9.1f us  (%.1f ns a sample)\n",
           laid * 1e6, laid * 1e9 / (double)G);
    printf("  stratified, whole step node by node        %9.1f us  (%.1f ns a sample)\n",
           by_node * 1e6, by_node * 1e9 / (double)G);
    printf("  stratified, node 0's share alone           %9.1f us  (%.1f ns a sample of it)\n",
           share * 1e6, share * 1e9 / (double)(G / nodes));
    dh_manifest_free(m);
    free(out);
    free(cls);
    return whole < 0 || laid < 0 || by_node < 0 || share < 0;
}
