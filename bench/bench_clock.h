/*
 * bench_clock.h - seconds on one of the system's clocks (CLOCK_MONOTONIC for
 * wall time, CLOCK_PROCESS_CPUTIME_ID or CLOCK_THREAD_CPUTIME_ID for CPU
 * time), for the benchmark programs.
 */
#ifndef DH_BENCH_CLOCK_H
#define DH_BENCH_CLOCK_H

#include <time.h>

static inline double bench_seconds(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#endif
