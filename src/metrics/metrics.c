/*
 * metrics.c - docs/DESIGN.md's metrics, computed once for both engines.
 *   (served runs: the GPU side is sum_s of the ranks' measured compute / R)
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

#include "live.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ wait sketch */

#define HIST_LO_MS 1e-6   /* waits below land in bucket 0 */
#define HIST_RATIO 1.001  /* bucket b covers [lo * r^b, lo * r^(b+1)) */
#define HIST_BUCKETS 34560 /* up to ~1e9 ms */

static int64_t hist_bucket(double w)
{
    double b = w > HIST_LO_MS ? floor(log(w / HIST_LO_MS) / log(HIST_RATIO)) : 0;
    return (int64_t)DH_MIN(b, (double)(HIST_BUCKETS - 1));
}

static double hist_value(int64_t b)
{
    return HIST_LO_MS * pow(HIST_RATIO, (double)b + 0.5);
}

static int sketch_add(dh__wait_sketch *k, double w)
{
    if (w <= 0) {
        k->zeros++;
        return 0;
    }
    if (!k->hist && k->n < DH_WAIT_EXACT) {
        if (dh__grow((void **)&k->v, &k->cap, (size_t)k->n + 1, sizeof *k->v))
            return DH_ENOMEM;
        k->v[k->n++] = w;
        return 0;
    }
    if (!k->hist) { /* the exact list is full: fold it into the histogram */
        if (!(k->hist = dh__calloc(HIST_BUCKETS, sizeof *k->hist)))
            return DH_ENOMEM;
        for (int64_t i = 0; i < k->n; i++)
            k->hist[hist_bucket(k->v[i])]++;
        free(k->v);
        k->v = NULL;
        k->cap = 0;
    }
    k->hist[hist_bucket(w)]++;
    k->n++;
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile over every wait added (k->v sorted). */
static double sketch_percentile(const dh__wait_sketch *k, double p)
{
    int64_t total = k->zeros + k->n;
    if (total == 0)
        return 0.0;
    int64_t rank = DH_MAX((int64_t)ceil(p / 100.0 * (double)total), 1);
    if (rank <= k->zeros)
        return 0.0;
    rank -= k->zeros;
    if (!k->hist)
        return k->v[rank - 1];
    for (int64_t b = 0, seen = 0; b < HIST_BUCKETS; b++)
        if ((seen += k->hist[b]) >= rank)
            return hist_value(b);
    return hist_value(HIST_BUCKETS - 1);
}

/* ---------------------------------------------------------------- records */

int dh__records_init(dh__records *rec, int ranks, int64_t global_batch)
{
    memset(rec, 0, sizeof *rec);
    rec->R = ranks;
    rec->G = global_batch;
    rec->ord_lead = -INFINITY;
    return ranks > 0 ? 0 : DH_EINVAL;
}

void dh__records_free(dh__records *rec)
{
    free(rec->batch);
    free(rec->step);
    free(rec->sketch.v);
    free(rec->sketch.hist);
    free(rec->stalls.v);
    free(rec->stalls.hist);
    memset(rec, 0, sizeof *rec);
}

/* Moves the live steps into slots of a window of ncap steps. */
static int records_regrow(dh__records *rec, int64_t ncap)
{
    dh__rec_batch *batch = dh__table_calloc((size_t)(ncap * rec->R), sizeof *batch);
    dh__rec_step *step = dh__table_calloc((size_t)ncap, sizeof *step);
    if (!batch || !step) {
        free(batch);
        free(step);
        return DH_ENOMEM;
    }
    for (int64_t st = rec->lo; st < rec->hi; st++) {
        int64_t o = st & (rec->cap - 1), n = st & (ncap - 1);
        step[n] = rec->step[o];
        memcpy(batch + n * rec->R, rec->batch + o * rec->R, (size_t)rec->R * sizeof *batch);
    }
    free(rec->batch);
    free(rec->step);
    rec->batch = batch;
    rec->step = step;
    rec->cap = ncap;
    return 0;
}

/* Opens steps up to `st`; 0, or an error (then rec->error is set). A slot's batch records are
 * zero already: cleared when the step in it before was folded (or dropped), while they were
 * still in the cache, and zero from the start. Cleared here, as a step was drawn some steps
 * ahead of being taken, they were cold: a record a rank of the job, 262 KB a step at 8,192
 * ranks written once more (bench/RESULTS.md, "Records cleared as they are folded"). */
static int records_open(dh__records *rec, int64_t st)
{
    if (rec->error)
        return rec->error;
    int64_t ncap = rec->cap ? rec->cap : 8;
    while (ncap < st + 1 - rec->lo)
        ncap *= 2;
    if (ncap != rec->cap && (rec->error = records_regrow(rec, ncap)))
        return rec->error;
    for (; rec->hi <= st; rec->hi++) {
        int64_t slot = rec->hi & (rec->cap - 1);
        memset(&rec->step[slot], 0, sizeof rec->step[slot]);
        rec->step[slot].start = -1;
    }
    return 0;
}

/* Step st's batch records zeroed, for the step its slot opens next (records_open). */
static void records_clear(dh__records *rec, int64_t st)
{
    memset(&rec->batch[(st & (rec->cap - 1)) * rec->R], 0, (size_t)rec->R * sizeof *rec->batch);
}

dh__rec_step *dh__records_step(dh__records *rec, int64_t step)
{
    if (step < rec->lo || records_open(rec, step))
        return NULL;
    return &rec->step[step & (rec->cap - 1)];
}

dh__rec_batch *dh__records_batch(dh__records *rec, int64_t step, int rank)
{
    if (step < rec->lo || rank < 0 || rank >= rec->R || records_open(rec, step))
        return NULL;
    return &rec->batch[(step & (rec->cap - 1)) * rec->R + rank];
}

void dh__records_ranks(dh__records *rec, int64_t step, int first, int n, const double *deadline,
                       const double *ready, const double *compute, const double *longest,
                       size_t stride)
{
    if (n <= 0 || first < 0 || first + n > rec->R || step < rec->lo || records_open(rec, step))
        return;
    dh__rec_batch *b = &rec->batch[(step & (rec->cap - 1)) * rec->R + first];
    const char *d = (const char *)deadline, *r = (const char *)ready, *c = (const char *)compute,
               *l = (const char *)longest;
    for (int i = 0; i < n; i++, d += stride, r += stride, c += stride, l += stride)
        b[i] = (dh__rec_batch){*(const double *)d, *(const double *)r, *(const double *)c,
                               *(const double *)l};
}

void dh__records_task(dh__records *rec, int64_t step, int rank, double start, double seconds)
{
    dh__rec_step *st = dh__records_step(rec, step);
    dh__rec_batch *b = dh__records_batch(rec, step, rank);
    if (!st || !b)
        return;
    if (st->start < 0 || start < st->start)
        st->start = start;
    b->longest_task = DH_MAX(b->longest_task, seconds);
}

/* A folded step in the live figures: the same accounting and waits as the result's. */
static void live_fold(dh__records *rec, int64_t st, const dh__rec_step *sp,
                      const dh__rec_batch *b, double stall_ms)
{
    dh__live *l = rec->live;
    atomic_fetch_add_explicit(&l->steps, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->delivered, rec->G - sp->failed, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->failed, sp->failed, memory_order_relaxed);
    if (st == 0) /* the first batches fill the pipeline: the result keeps that apart too */
        return;
    for (int r = l->rank_lo; r < l->rank_hi; r++) {
        double late = b[r].ready - b[r].deadline;
        dh__live_observe(&l->wait[r - l->rank_lo], DH_MAX(0.0, late));
        if (late > 1e-9)
            atomic_fetch_add_explicit(&l->misses[r - l->rank_lo], 1, memory_order_relaxed);
    }
    dh__live_observe(&l->stall, stall_ms * 1e-3);
}

/*
 * The ordered bound: ranks compute the steps in order, and a rank starts a step only with
 * its batch prepared, so by the time the last rank starts step k every sample of steps
 * 0..k is prepared: at least C_k / W after the start (C_k their CPU, W workers, as if the
 * work divided perfectly). That rank then computes its batch (at least m_k, the step's
 * smallest batch in this run's placement), the step closes (o, the fixed cost), and each
 * later step j takes at least its GPU term g_j, as in the bound. So
 *     makespan >= max over k of ( C_k / W + m_k + o + sum_{j > k} g_j ),
 * the fill and the drain the bound leaves out (k = 0: the first step's CPU; the last k:
 * all the CPU, then one batch). Work divides into tasks, and a task runs on one worker:
 * every task of steps 0..k has ended too, so the last rank starts step k no earlier than
 * L_k, the longest task (or split part) of those steps, after the start: C_k / W is
 * max(C_k / W, L_k). Only m_k and L_k depend on the run (its placement, and how far it
 * split its heavy samples): no schedule of these batches and tasks beats it, and another
 * placement has its own (with m_k = 0 it would hold for any, and say next to nothing:
 * the first step's compute is most of the fill). Kept online: sum_{j > k} g_j = P - P_k,
 * P_k the GPU terms up to step k, so the bound is P + max_k (max(C_k / W, L_k) + m_k + o
 * - P_k).
 */
static void ordered_fold(dh__records *rec, double cpu, double gpu, double quickest, double longest)
{
    if (rec->workers <= 0)
        return;
    rec->ord_cpu += cpu;
    rec->ord_gpu += gpu;
    rec->ord_longest = DH_MAX(rec->ord_longest, longest);
    double fixed = rec->gpu_measured ? 0 : rec->step_fixed; /* measured: in the compute */
    double lead = DH_MAX(rec->ord_cpu / rec->workers, rec->ord_longest) + quickest + fixed -
                  rec->ord_gpu;
    rec->ord_lead = DH_MAX(rec->ord_lead, lead);
}

/*
 * Folds step st into the running metrics, in step order, so every sum is
 * taken in the same order as over a whole-run array.
 */
static void fold(dh__records *rec, int64_t st)
{
    const dh__rec_step *sp = &rec->step[st & (rec->cap - 1)];
    const dh__rec_batch *b = &rec->batch[(st & (rec->cap - 1)) * rec->R];
    double slowest = 0, stall = 0, quickest = INFINITY, longest = 0, step_compute = 0;
    /* the sums in locals, added in the same order as into the records (every rank's batch a
     * step on every node: a pass over 8,192 ranks at 1,024 nodes), a wait of 0 counted here */
    double fill = rec->fill, wait_sum = rec->wait_sum, single = rec->single;
    int64_t misses = 0, zeros = 0;
    for (int r = 0; r < rec->R; r++) {
        double late = b[r].ready - b[r].deadline;
        quickest = DH_MIN(quickest, b[r].compute);
        longest = DH_MAX(longest, b[r].longest_task);
        if (st == 0) {
            fill += DH_MAX(0.0, late);
        } else {
            double w = DH_MAX(0.0, late) * 1e3;
            misses += late > 1e-9;
            wait_sum += w;
            /* The part of the wait that the batch's longest task alone explains: even started
             * when its step's first task did, it would end this late. */
            if (late > 1e-9 && sp->start >= 0)
                single += DH_MIN(late, DH_MAX(0.0, sp->start + b[r].longest_task -
                                                       b[r].deadline)) * 1e3;
            if (w <= 0)
                zeros++;
            else if (sketch_add(&rec->sketch, w))
                rec->error = DH_ENOMEM;
            stall = DH_MAX(stall, w);
        }
        slowest = DH_MAX(slowest, b[r].compute);
        step_compute += b[r].compute;
    }
    rec->fill = fill, rec->wait_sum = wait_sum, rec->single = single;
    rec->misses += misses;
    rec->sketch.zeros += zeros;
    rec->waits += st == 0 ? 0 : rec->R;
    if (rec->live)
        live_fold(rec, st, sp, b, stall);
    if (st > 0) { /* the step waits for its slowest rank */
        rec->stall_sum += stall;
        rec->late_steps += stall > 1e-6;
        if (sketch_add(&rec->stalls, stall))
            rec->error = DH_ENOMEM;
    }
    rec->placement += rec->step_fixed + slowest;
    rec->compute_sum += step_compute;
    double gpu = rec->gpu_measured ? step_compute / rec->R
                                   : rec->step_fixed + DH_MAX(sp->gpu_sum / rec->R, sp->gpu_max);
    rec->gpu_bound += gpu;
    ordered_fold(rec, rec->cpu_measured ? sp->cpu_spent : sp->cpu_sum, gpu, quickest, longest);
    rec->failed += sp->failed;
    rec->cpu_spent += sp->cpu_spent;
    rec->cpu_model += sp->cpu_sum;
    rec->steps++;
}

void dh__records_cpu(dh__records *rec, int64_t step, double cpu)
{
    dh__rec_step *sp = dh__records_step(rec, step);
    if (sp && cpu > 0)
        sp->cpu_spent += cpu;
}

void dh__records_close(dh__records *rec, int64_t step)
{
    dh__rec_step *sp = dh__records_step(rec, step);
    if (!sp)
        return;
    sp->closed = 1;
    for (; rec->lo < rec->hi && rec->step[rec->lo & (rec->cap - 1)].closed; rec->lo++) {
        fold(rec, rec->lo);
        records_clear(rec, rec->lo);
    }
}

static void wait_stats(dh__records *rec, dh_result *out)
{
    out->fill_wait_ms = rec->R && rec->steps > 0 ? rec->fill / rec->R * 1e3 : 0;
    int64_t n = rec->waits;
    if (n <= 0)
        return;
    if (rec->sketch.v && !rec->sketch.hist)
        qsort(rec->sketch.v, (size_t)rec->sketch.n, sizeof *rec->sketch.v, cmp_double);
    out->wait_single_frac = rec->wait_sum > 0 ? rec->single / rec->wait_sum : 0;
    out->miss_rate = (double)rec->misses / (double)n;
    out->wait_mean_ms = rec->wait_sum / (double)n;
    out->wait_p50_ms = sketch_percentile(&rec->sketch, 50);
    out->wait_p95_ms = sketch_percentile(&rec->sketch, 95);
    out->wait_p99_ms = sketch_percentile(&rec->sketch, 99);
    int64_t steps = rec->steps - 1; /* step 0 is the pipeline's fill */
    if (steps <= 0)
        return;
    if (rec->stalls.v && !rec->stalls.hist)
        qsort(rec->stalls.v, (size_t)rec->stalls.n, sizeof *rec->stalls.v, cmp_double);
    out->stall_mean_ms = rec->stall_sum / (double)steps;
    out->stall_p95_ms = sketch_percentile(&rec->stalls, 95);
    out->stall_p99_ms = sketch_percentile(&rec->stalls, 99);
    out->late_step_frac = (double)rec->late_steps / (double)steps;
}

void dh__records_finish(dh__records *rec, int workers, dh_result *out)
{
    /* Steps opened but never closed (a stopped run) do not count, nor does their CPU work. */
    for (int64_t st = rec->lo; st < rec->hi; st++) {
        if (!rec->cpu_measured)
            rec->cpu_true_sum -= rec->step[st & (rec->cap - 1)].cpu_sum;
        records_clear(rec, st);
    }
    rec->hi = rec->lo;
    out->steps = rec->steps;
    out->samples = rec->steps * rec->G;
    out->failed = rec->failed;
    out->delivered = out->samples - rec->failed;
    out->makespan_s = rec->makespan;
    out->throughput_sps = rec->makespan > 0 ? (double)out->delivered / rec->makespan : 0;
    out->placement_s = rec->placement;
    out->bound_gpu_s = rec->gpu_bound;
    out->bound_cpu_s = rec->cpu_true_sum / workers;
    out->bound_s = DH_MAX(out->bound_gpu_s, out->bound_cpu_s);
    /* measured CPU: the cost model's view of the same steps is a separate figure */
    out->model_bound_s = rec->cpu_measured ? DH_MAX(out->bound_gpu_s, rec->cpu_model / workers)
                                           : out->bound_s;
    out->efficiency = rec->makespan > 0 ? out->bound_s / rec->makespan : 0;
    /* never below bound_s: where the CPU per step is known only in part (another node's
     * workers in a real run of several nodes, an outside loader) it is the weaker of the two */
    out->bound_ordered_s = DH_MAX(out->bound_s, rec->ord_gpu + rec->ord_lead);
    out->efficiency_ordered = rec->makespan > 0 ? out->bound_ordered_s / rec->makespan : 0;
    out->gpu_idle_frac = rec->makespan > 0 ? 1.0 - rec->compute_sum / (rec->R * rec->makespan) : 0;
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
            "\"wait_single_frac\":%.6f,\"stall_mean_ms\":%.6g,\"stall_p95_ms\":%.6g,"
            "\"stall_p99_ms\":%.6g,\"late_step_frac\":%.6f,\"nodes\":%d,"
            "\"exchange_mean_s\":%.6g,\"exchange_max_s\":%.6g,\"control_mean_s\":%.6g,"
            "\"reb_remote\":%lld,\"reb_remote_bytes\":%lld,\"net_factor\":%.6g,"
            "\"fetch_bytes\":%lld,\"fetch_requests\":%lld,\"fetch_retries\":%lld,"
            "\"fetch_failures\":%lld,\"fetch_wait_s\":%.6g,\"fetch_ahead_ready\":%lld,"
            "\"fetch_ahead_waited\":%lld,\"fetch_ahead_missed\":%lld,"
            "\"fetch_ahead_dropped\":%lld,\"fetch_latency_s\":%.6g,\"fetch_bandwidth\":%.6g,"
            "\"fetch_cache_hits\":%lld,\"fetch_cache_bytes\":%lld,\"setup_s\":%.6g,"
            "\"model_bound_s\":%.9g,\"bound_ordered_s\":%.9g,\"efficiency_ordered\":%.6f,"
            "\"order\":\"%s\"}",
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
            r->wait_single_frac, r->stall_mean_ms, r->stall_p95_ms, r->stall_p99_ms,
            r->late_step_frac, r->nodes > 0 ? r->nodes : 1, r->exchange_mean_s,
            r->exchange_max_s, r->control_mean_s, (long long)r->reb_remote,
            (long long)r->reb_remote_bytes, r->net_factor > 0 ? r->net_factor : 1.0,
            (long long)r->fetch_bytes, (long long)r->fetch_requests, (long long)r->fetch_retries,
            (long long)r->fetch_failures, r->fetch_wait_s, (long long)r->fetch_ahead_ready,
            (long long)r->fetch_ahead_waited, (long long)r->fetch_ahead_missed,
            (long long)r->fetch_ahead_dropped, r->fetch_latency_s, r->fetch_bandwidth,
            (long long)r->fetch_cache_hits, (long long)r->fetch_cache_bytes, r->setup_s,
            r->model_bound_s, r->bound_ordered_s, r->efficiency_ordered,
            r->order[0] ? r->order : "uniform");
    return ferror(f) ? DH_EIO : 0;
}

/* ------------------------------------------------------------------- trace */

int dh__trace_open(dh__trace *t, const char *path, int workers, int ranks)
{
    memset(t, 0, sizeof *t);
    if (!path)
        return 0;
    size_t tmplen = strlen(path) + 32;
    t->path = dh__malloc(strlen(path) + 1);
    t->tmp = dh__malloc(tmplen);
    if (!t->path || !t->tmp) {
        free(t->path);
        free(t->tmp);
        t->path = t->tmp = NULL;
        return DH_ENOMEM;
    }
    strcpy(t->path, path);
    t->f = dh__out_open(path, t->tmp, tmplen);
    if (!t->f) {
        int rc = -errno;
        free(t->path);
        free(t->tmp);
        t->path = t->tmp = NULL;
        return rc;
    }
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
    int rc = dh__out_close(t->f, t->tmp, t->path, 1); /* complete: under its name now */
    t->f = NULL;
    free(t->path);
    free(t->tmp);
    t->path = t->tmp = NULL;
    return rc;
}
