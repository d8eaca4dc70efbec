/*
 * bench_plan.c - planning speed and quality: partition a global batch of G
 * samples over R ranks (default 4,096 over 512), repeated, one core.
 *   usage: bench_plan [G] [R] [REPEATS] [SIGMA]
 * GPU costs are quadratic in a log-normal token count (sigma 0.8 default:
 * heavy-tailed, often bounded by the largest sample; 0.3: mild skew), CPU
 * costs independent. Prints the time per plan and max/lower bound, where the
 * lower bound is max(total / R, largest sample).
 */
#include "bench_clock.h"
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: bench_plan [G (4096)] [R (512)] [REPEATS (50)] [SIGMA (0.8)]\n"
               "partition G samples over R ranks, REPEATS times, one core\n");
        return 0;
    }
    int G = argc > 1 ? atoi(argv[1]) : 4096, R = argc > 2 ? atoi(argv[2]) : 512;
    int reps = argc > 3 ? atoi(argv[3]) : 50;
    double sigma = argc > 4 ? atof(argv[4]) : 0.8;
    double *gpu = malloc((size_t)G * sizeof *gpu), *cpu = malloc((size_t)G * sizeof *cpu);
    int32_t *rank_of = malloc((size_t)G * sizeof *rank_of);
    if (!gpu || !cpu || !rank_of || G < 1 || R < 1)
        return 2;
    srand(1);
    double best = INFINITY, total = 0, worst_ratio = 0;
    for (int rep = 0; rep < reps; rep++) {
        double sum = 0, big = 0;
        for (int i = 0; i < G; i++) {
            double u1 = (rand() + 1.0) / (RAND_MAX + 2.0), u2 = rand() / (RAND_MAX + 1.0);
            double tokens = 1000 * exp(sigma * sqrt(-2 * log(u1)) * cos(6.283185307 * u2));
            gpu[i] = tokens + tokens * tokens / 4000.0;
            cpu[i] = rand() % 1000;
            sum += gpu[i];
            big = fmax(big, gpu[i]);
        }
        dh__part_in in = {.n = G, .ranks = R, .gpu = gpu, .cpu = cpu};
        dh__part_out out;
        double t0 = bench_seconds(CLOCK_MONOTONIC);
        if (dh__partition(&in, rank_of, &out))
            return 1;
        double dt = bench_seconds(CLOCK_MONOTONIC) - t0;
        best = fmin(best, dt);
        total += dt;
        worst_ratio = fmax(worst_ratio, out.max_gpu / fmax(sum / R, big));
    }
    printf("sigma %.2f: partition %d samples over %d ranks: best %.3f ms, mean %.3f ms over %d plans; "
           "max/lower bound worst %.4f\n",
           sigma, G, R, best * 1e3, total / reps * 1e3, reps, worst_ratio);
    free(gpu);
    free(cpu);
    free(rank_of);
    return 0;
}
