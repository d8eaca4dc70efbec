/*
 * metrics.c - DESIGN.md's metrics, computed once for both engines.
 *
 *   input wait(s, r) = max(0, ready - deadline); percentiles over s >= 1
 *   (step 0 is pipeline fill, reported apart as fill_wait_ms);
 *   miss rate = fraction of (s >= 1, r) with ready > deadline;
 *   throughput = samples consumed / makespan;
 *   GPU idle = 1 - sum compute / (R * makespan);
 *   bound = max(sum_s [o + max(sum_{i in s} g_i / R, max_{i in s} g_i)],
 *               sum_i c_i / W), efficiency = bound / makespan.
 *   wait_single_frac = sum over late (s >= 1, r) of
 *       min(wait, max(0, first start of step s + longest task of (s, r) - deadline))
 *     / sum of waits: what one task too long for its window explains.
 */
#include "metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int dh__records_init(dh__records *rec, int ranks, int64_t steps)
{
    memset(rec, 0, sizeof *rec);
    rec->R = ranks;
    rec->N = steps;
    size_t n = (size_t)(steps * ranks + 1), s = (size_t)steps + 1;
    rec->deadline = calloc(n, sizeof *rec->deadline);
    rec->ready = calloc(n, sizeof *rec->ready);
    rec->compute = calloc(n, sizeof *rec->compute);
    rec->step_gpu_sum = calloc(s, sizeof *rec->step_gpu_sum);
    rec->step_gpu_max = calloc(s, sizeof *rec->step_gpu_max);
    rec->step_start = malloc(s * sizeof *rec->step_start);
    rec->longest_task = calloc(n, sizeof *rec->longest_task);
    if (!rec->deadline || !rec->ready || !rec->compute || !rec->step_gpu_sum ||
        !rec->step_gpu_max || !rec->step_start || !rec->longest_task) {
        dh__records_free(rec);
        return DH_ENOMEM;
    }
    for (size_t i = 0; i < s; i++)
        rec->step_start[i] = -1;
    return 0;
}

void dh__records_task(dh__records *rec, int64_t step, int rank, double start, double seconds)
{
    if (step < 0 || step >= rec->N)
        return;
    if (rec->step_start[step] < 0 || start < rec->step_start[step])
        rec->step_start[step] = start;
    double *l = &rec->longest_task[step * rec->R + rank];
    *l = DH_MAX(*l, seconds);
}

void dh__records_free(dh__records *rec)
{
    free(rec->deadline);
    free(rec->ready);
    free(rec->compute);
    free(rec->step_gpu_sum);
    free(rec->step_gpu_max);
    free(rec->step_start);
    free(rec->longest_task);
    memset(rec, 0, sizeof *rec);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n). */
static double percentile(const double *v, int64_t n, double p)
{
    if (n == 0)
        return 0.0;
    int64_t k = (int64_t)ceil(p / 100.0 * (double)n);
    return v[DH_MAX(k, 1) - 1];
}

static void wait_stats(const dh__records *rec, dh_result *out)
{
    int64_t n = (rec->N - 1) * rec->R, misses = 0;
    double *w = malloc((size_t)(n > 0 ? n : 1) * sizeof *w), sum = 0, fill = 0, single = 0;
    for (int r = 0; r < rec->R && rec->N > 0; r++)
        fill += DH_MAX(0.0, rec->ready[r] - rec->deadline[r]);
    out->fill_wait_ms = rec->R ? fill / rec->R * 1e3 : 0;
    if (!w || n <= 0) {
        free(w);
        return;
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t b = rec->R + k; /* skip step 0 */
        double late = rec->ready[b] - rec->deadline[b];
        misses += late > 1e-9;
        w[k] = DH_MAX(0.0, late) * 1e3;
        sum += w[k];
        /* The part of the wait that the batch's longest task alone explains: even started
         * when its step's first task did, it would end this late. */
        int64_t st = b / rec->R;
        if (late > 1e-9 && rec->step_start[st] >= 0)
            single += DH_MIN(late, DH_MAX(0.0, rec->step_start[st] + rec->longest_task[b] -
                                                   rec->deadline[b])) * 1e3;
    }
    out->wait_single_frac = sum > 0 ? single / sum : 0;
    qsort(w, (size_t)n, sizeof *w, cmp_double);
    out->miss_rate = (double)misses / (double)n;
    out->wait_mean_ms = sum / (double)n;
    out->wait_p50_ms = percentile(w, n, 50);
    out->wait_p95_ms = percentile(w, n, 95);
    out->wait_p99_ms = percentile(w, n, 99);
    free(w);
}

void dh__records_finish(const dh__records *rec, int workers, dh_result *out)
{
    out->steps = rec->N;
    out->samples = rec->samples;
    out->delivered = rec->delivered;
    out->failed = rec->failed;
    out->makespan_s = rec->makespan;
    out->throughput_sps = rec->makespan > 0 ? (double)rec->delivered / rec->makespan : 0;
    double gpu_bound = 0, compute = 0, placement = 0;
    for (int64_t s = 0; s < rec->N; s++) {
        double slowest = 0;
        for (int r = 0; r < rec->R; r++)
            slowest = DH_MAX(slowest, rec->compute[s * rec->R + r]);
        placement += rec->step_fixed + slowest;
        gpu_bound += rec->step_fixed + DH_MAX(rec->step_gpu_sum[s] / rec->R, rec->step_gpu_max[s]);
    }
    out->placement_s = placement;
    for (int64_t b = 0; b < rec->N * rec->R; b++)
        compute += rec->compute[b];
    out->bound_gpu_s = gpu_bound;
    out->bound_cpu_s = rec->cpu_true_sum / workers;
    out->bound_s = DH_MAX(out->bound_gpu_s, out->bound_cpu_s);
    out->efficiency = rec->makespan > 0 ? out->bound_s / rec->makespan : 0;
    out->gpu_idle_frac = rec->makespan > 0 ? 1.0 - compute / (rec->R * rec->makespan) : 0;
    wait_stats(rec, out);
}

int dh_result_write_json(const dh_result *r, void *file)
{
    FILE *f = file;
    if (!r || !f)
        return DH_EINVAL;
    fprintf(f,
            "{\"workload\":\"%s\",\"policy\":\"%s\",\"engine\":\"%s\",\"ranks\":%d,\"workers\":%d,"
            "\"steps\":%lld,\"samples\":%lld,\"delivered\":%lld,\"failed\":%lld,"
            "\"makespan_s\":%.9g,\"throughput_sps\":%.9g,\"bound_s\":%.9g,\"efficiency\":%.6f,"
            "\"miss_rate\":%.6f,\"fill_wait_ms\":%.6g,\"wait_mean_ms\":%.6g,\"wait_p50_ms\":%.6g,"
            "\"wait_p95_ms\":%.6g,\"wait_p99_ms\":%.6g,\"gpu_idle_frac\":%.6f,"
            "\"cpu_mape\":%.6f,\"gpu_mape\":%.6f,\"bound_gpu_s\":%.9g,\"bound_cpu_s\":%.9g,"
            "\"placement_s\":%.9g,\"memory_budget\":%lld,\"memory_peak\":%lld,\"cap_violations\":%lld,\"framework_overhead\":%.6f,\"reb_considered\":%lld,\"reb_moved\":%lld,"
            "\"reb_gated\":%lld,\"reb_bytes\":%lld,\"reb_predicted_gain_s\":%.9g,"
            "\"reb_realised_gain_s\":%.9g,\"lend_considered\":%lld,\"lent\":%lld,"
            "\"lend_gated\":%lld,\"bytes_shipped\":%lld,\"wall_s\":%.6g,\"reb_refused\":%lld,"
            "\"reb_move_s\":%.6g,\"reb_move_factor\":%.6g,"
            "\"wait_single_frac\":%.6f}",
            r->workload, r->policy, r->engine, r->ranks, r->workers, (long long)r->steps,
            (long long)r->samples, (long long)r->delivered, (long long)r->failed, r->makespan_s,
            r->throughput_sps, r->bound_s, r->efficiency, r->miss_rate, r->fill_wait_ms,
            r->wait_mean_ms, r->wait_p50_ms, r->wait_p95_ms, r->wait_p99_ms, r->gpu_idle_frac,
            r->cpu_mape, r->gpu_mape, r->bound_gpu_s, r->bound_cpu_s, r->placement_s,
            (long long)r->memory_budget, (long long)r->memory_peak, (long long)r->cap_violations,
            r->framework_overhead, (long long)r->reb_considered, (long long)r->reb_moved,
            (long long)r->reb_gated, (long long)r->reb_bytes, r->reb_predicted_gain_s,
            r->reb_realised_gain_s, (long long)r->lend_considered, (long long)r->lent,
            (long long)r->lend_gated, (long long)r->bytes_shipped, r->wall_s,
            (long long)r->reb_refused, r->reb_move_s, r->reb_move_factor,
            r->wait_single_frac);
    return ferror(f) ? DH_EIO : 0;
}

/* ------------------------------------------------------------------- trace */

int dh__trace_open(dh__trace *t, const char *path, int workers, int ranks)
{
    memset(t, 0, sizeof *t);
    if (!path)
        return 0;
    t->f = fopen(path, "w");
    if (!t->f)
        return -errno;
    fputs("[\n", t->f);
    fprintf(t->f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"CPU workers\"}},\n",
            DH_TRACE_WORKERS);
    fprintf(t->f, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":\"ranks\"}}",
            DH_TRACE_RANKS);
    for (int w = 0; w < workers; w++)
        fprintf(t->f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"worker %d\"}}",
                DH_TRACE_WORKERS, w, w);
    for (int r = 0; r < ranks; r++)
        fprintf(t->f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"rank %d\"}}",
                DH_TRACE_RANKS, r, r);
    return 0;
}

void dh__trace_span(dh__trace *t, int pid, int tid, const char *name, double start_s,
                    double dur_s, int64_t step, int rank, int64_t sample)
{
    if (!t->f)
        return;
    fprintf(t->f,
            ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,"
            "\"args\":{\"step\":%lld,\"rank\":%d,\"sample\":%lld}}",
            pid, tid, name, start_s * 1e6, dur_s * 1e6, (long long)step, rank, (long long)sample);
}

int dh__trace_close(dh__trace *t)
{
    if (!t->f)
        return 0;
    fputs("\n]\n", t->f);
    int rc = fclose(t->f) == 0 ? 0 : DH_EIO;
    t->f = NULL;
    return rc;
}
