/*
 * metrics.h - per-batch records, the docs/DESIGN.md metrics and lower bound, the
 * JSON result and the Chrome trace; one module for both engines (internal).
 */
#ifndef DH_METRICS_H
#define DH_METRICS_H

#include "../core/core.h"

#include <stdio.h>

/*
 * Input waits for percentiles: exact (every positive wait kept) up to
 * DH_WAIT_EXACT values, then a log-spaced histogram (0.1% relative
 * resolution) so a run of any length holds bounded memory. Zero waits are
 * counted, not stored.
 */
#define DH_WAIT_EXACT 65536
typedef struct {
    int64_t zeros, n;   /* waits of 0; positive waits */
    double *v;          /* the positive waits while n <= DH_WAIT_EXACT */
    size_t cap;
    int64_t *hist;      /* non-NULL once the exact list overflowed */
} dh__wait_sketch;

/* One batch (step, rank) of the records. */
typedef struct {
    double deadline;     /* when rank r asked for batch s */
    double ready;        /* when batch (s, r) was complete */
    double compute;      /* compute seconds of (s, r) */
    double longest_task; /* the longest single task (or split part), delivery included */
} dh__rec_batch;

/* One step of the records: what no placement can hide, and the bound's inputs. */
typedef struct {
    double start;   /* when the step's first task started; < 0: none yet */
    double gpu_sum; /* sum of true g_i of the step */
    double gpu_max; /* max true g_i of the step */
    double cpu_sum; /* sum of true c_i of the step (the real engine: the cost model's) */
    double cpu_spent; /* real engine: CPU its tasks measured on this node's workers */
    int64_t failed; /* samples of the step that failed */
    uint8_t closed; /* every rank is done with it */
} dh__rec_step;

/*
 * Records of a run, streamed: steps live in a window of slots from the
 * moment an engine first touches them until they are closed (every rank
 * done) and every earlier step is closed too; then they are folded into the
 * running metrics and their slots reused. Memory depends on the steps in
 * flight, not on the run's length.
 */
typedef struct {
    int R;
    int64_t G;          /* samples per step */
    double step_fixed;  /* o: fixed cost of a step (per-step constant + all-reduce) */
    int64_t lo, hi, cap; /* live steps [lo, hi), slot = step & (cap - 1) */
    dh__rec_batch *batch; /* cap * R */
    dh__rec_step *step;   /* cap */
    int error;            /* growing the window failed: the run must stop */
    /* folded steps */
    int64_t steps, misses, waits;
    double fill, wait_sum, single, compute_sum, placement, gpu_bound;
    dh__wait_sketch sketch;
    int64_t late_steps;   /* steps >= 1 with any rank late */
    double stall_sum;     /* sum over steps >= 1 of the step's longest wait (ms) */
    dh__wait_sketch stalls;
    double cpu_true_sum;  /* sum of true c_i over drawn samples (the real engine: measured) */
    int cpu_measured;     /* cpu_true_sum is measured work: keep it whole when a run stops */
    /* folded steps: the CPU their tasks measured here (the real engine's bound), and the
     * cost model's CPU of their samples (its model bound, a separate figure) */
    double cpu_spent, cpu_model;
    /* Compute is what the consumers measured (trainer processes), not the emulated truth:
     * the bound's GPU side is then each step's measured compute spread over the ranks (a
     * step cannot end before its average rank's compute), since the model's g_i says
     * nothing of what real trainers spent. */
    int gpu_measured;
    double makespan;
    int64_t failed;       /* samples of folded steps that failed (delivered = steps * G - failed) */
    struct dh__live *live; /* the real engine's live figures (live.h), or NULL */
    /* The ordered bound (metrics.c, fold): the workers W it divides CPU by (0: not computed),
     * the folded steps' CPU (worker-seconds) and GPU terms summed, their longest task, and
     * the largest max(C_k / W, L_k) + m_k + o - P_k so far. */
    int workers;
    double ord_cpu, ord_gpu, ord_longest, ord_lead;
} dh__records;

int dh__records_init(dh__records *rec, int ranks, int64_t global_batch);
void dh__records_free(dh__records *rec);

/*
 * The record of batch (step, rank) / of a step, opening the step (and any
 * before it) if needed; NULL if the step was folded already or the window
 * could not grow (rec->error is then set). Valid until the next call that
 * may open a step.
 */
dh__rec_batch *dh__records_batch(dh__records *rec, int64_t step, int rank);
dh__rec_step *dh__records_step(dh__records *rec, int64_t step);

/* The records of batches (step, first .. first + n - 1) written whole, rank first + i's from
 * deadline[i * stride], ready, compute and longest alike (strides in bytes: the fields of an
 * array of structs, as another node's STEP record carries its ranks); the same as writing each
 * through dh__records_batch, without a call and the window's checks a rank (a node's share of
 * every step on every node: 8,184 ranks at 1,024 nodes). Nothing when the step was folded or
 * the window could not grow (rec->error is then set). */
void dh__records_ranks(dh__records *rec, int64_t step, int first, int n, const double *deadline,
                       const double *ready, const double *compute, const double *longest,
                       size_t stride);
/* A task of batch (step, rank) started at `start` and took `seconds` (delivery included). */
void dh__records_task(dh__records *rec, int64_t step, int rank, double start, double seconds);
/* Real engine: a task of `step` spent `cpu` seconds on a worker of this node. */
void dh__records_cpu(dh__records *rec, int64_t step, double cpu);
/* Step `step` is over on every rank: fold it (and any closed steps after it) in order. */
void dh__records_close(dh__records *rec, int64_t step);

/*
 * Fills every metric of out that the records determine (workers: W of the
 * bound). Steps never closed (a stopped run) do not count.
 */
void dh__records_finish(dh__records *rec, int workers, dh_result *out);

/* Chrome trace (JSON array format; opens in Perfetto). NULL path: all calls are no-ops.
 * Written under a temporary name and renamed when closed: a killed run leaves no
 * truncated trace under the asked name. */
typedef struct {
    FILE *f;
    int first;
    char *path, *tmp;
} dh__trace;

int dh__trace_open(dh__trace *t, const char *path, int workers, int ranks);
void dh__trace_span(dh__trace *t, int pid, int tid, const char *name, double start_s,
                    double dur_s, int64_t step, int rank, int64_t sample);
int dh__trace_close(dh__trace *t);

enum { DH_TRACE_WORKERS = 1, DH_TRACE_RANKS = 2 };

#endif
