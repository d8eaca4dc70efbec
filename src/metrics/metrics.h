/*
 * metrics.h - per-batch records, the DESIGN.md metrics and lower bound, the
 * JSON result and the Chrome trace; one module for both engines (internal).
 */
#ifndef DH_METRICS_H
#define DH_METRICS_H

#include "../core/core.h"

#include <stdio.h>

typedef struct {
    int R;
    int64_t N;
    double *deadline; /* N * R: when rank r asked for batch s */
    double *ready;    /* N * R: when batch (s, r) was complete */
    double *compute;  /* N * R: compute seconds of (s, r) */
    /* What no placement can hide: the first task of step s started at step_start[s] (< 0:
     * none yet), and the longest single task (or split part) of batch (s, r) took
     * longest_task seconds, delivery included. See dh__records_task. */
    double *step_start;   /* N */
    double *longest_task; /* N * R */
    double makespan;
    /* bound inputs, from the run's true costs */
    double step_fixed;   /* o: fixed cost of a step (per-step constant + all-reduce) */
    double *step_gpu_sum; /* N: sum of true g_i of the step */
    double *step_gpu_max; /* N: max true g_i of the step */
    double cpu_true_sum;  /* sum of true c_i over consumed samples */
    int64_t samples, delivered, failed;
} dh__records;

int dh__records_init(dh__records *rec, int ranks, int64_t steps);
void dh__records_free(dh__records *rec);

/* A task of batch (step, rank) started at `start` and took `seconds` (delivery included). */
void dh__records_task(dh__records *rec, int64_t step, int rank, double start, double seconds);

/* Fills every metric of out that the records determine (workers: W of the bound). */
void dh__records_finish(const dh__records *rec, int workers, dh_result *out);

/* Chrome trace (JSON array format; opens in Perfetto). NULL path: all calls are no-ops. */
typedef struct {
    FILE *f;
    int first;
} dh__trace;

int dh__trace_open(dh__trace *t, const char *path, int workers, int ranks);
void dh__trace_span(dh__trace *t, int pid, int tid, const char *name, double start_s,
                    double dur_s, int64_t step, int rank, int64_t sample);
int dh__trace_close(dh__trace *t);

enum { DH_TRACE_WORKERS = 1, DH_TRACE_RANKS = 2 };

#endif
