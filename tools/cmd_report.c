/*
 * cmd_report.c - `datahelix report RESULT.json... [--trace TRACE] -o report.html`: one
 * self-contained HTML page (inline SVG and CSS; no script, font, image or network) that
 * draws what the JSON results and a trace say: the policies compared per workload (median
 * bars with the run-to-run range, real beside simulated), the input wait's distribution
 * per policy, a per-rank timeline with each rank's waits for data and the worker and sample
 * it waited for, and every run's configuration.
 *
 * Inputs are what the CLI writes: a result object (run, sim, serve --json) or a bench
 * object ({"runs": [...], "sim_predictions": [...]}), read with jansson; a trace is read
 * line by line (the library writes one event per line), which keeps a trace of 10,000 steps
 * to a fraction of a second. Every drawn number carries its value in a data-value attribute
 * and a <title>, so a test (and a reader hovering) sees exactly what was drawn.
 */
#include "cli.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char help[] =
    "usage: datahelix report RESULT.json [MORE.json ...] [--trace TRACE.json] -o REPORT.html\n"
    "\n"
    "Writes one self-contained HTML page (inline SVG, no scripts, fonts or network) from\n"
    "results that run, sim, serve (--json) and bench (--json) wrote: per workload, the\n"
    "policies compared (throughput, efficiency, deadline misses, input wait p95, step stall\n"
    "p95; bars are medians, whiskers the range over repeats; real runs beside simulated ones,\n"
    "including a real bench's own simulator predictions), the input wait's distribution per\n"
    "policy, and every run's configuration. --trace adds a per-rank timeline from a run's\n"
    "Chrome trace (run --trace): when each rank computed, each wait for data in red, and the\n"
    "longest waits with the worker and sample each waited for.\n";

static double dmin(double a, double b)
{
    return a < b ? a : b;
}

static double dmax(double a, double b)
{
    return a > b ? a : b;
}

/* ---- results ---- */

typedef struct {
    char file[128], workload[64], policy[32], engine[24];
    int ranks, workers, nodes;
    int64_t steps, samples, delivered, failed;
    double v[5]; /* the compared metrics, in metric[] order */
    double p50, p99, mean, makespan, bound, model_bound;
    double ordered, eff_ordered; /* the ordered bound and its efficiency (0: an older JSON) */
} row;

enum { M_THR, M_EFF, M_MISS, M_P95, M_STALL, NMETRIC };
static const struct {
    const char *key, *title, *unit;
} metric[NMETRIC] = {{"throughput", "Throughput", "samples/s"},
                     {"efficiency", "Efficiency", ""},
                     {"miss", "Deadline misses", "%"},
                     {"wait_p95", "Input wait p95", "ms"},
                     {"stall_p95", "Step stall p95", "ms"}};

typedef struct {
    row *v;
    int64_t n, cap;
} rows;

/* Room for one more element of `size` bytes in *v (n used of *cap, doubled when full); 0, or
 * 1 when out of memory (nothing changed). */
static int grow(void **v, int64_t n, int64_t *cap, size_t size)
{
    if (n < *cap)
        return 0;
    int64_t c = *cap ? 2 * *cap : 1024;
    void *p = realloc(*v, (size_t)c * size);
    if (!p)
        return 1;
    *v = p, *cap = c;
    return 0;
}

static double num(json_t *o, const char *k)
{
    json_t *x = json_object_get(o, k);
    return json_is_number(x) ? json_number_value(x) : 0;
}

static void str(json_t *o, const char *k, char *out, size_t len)
{
    json_t *x = json_object_get(o, k);
    snprintf(out, len, "%s", json_is_string(x) ? json_string_value(x) : "");
}

/* One result object into rs; 0, or 1 (out of memory). */
static int add_row(rows *rs, json_t *o, const char *file, int predicted)
{
    if (grow((void **)&rs->v, rs->n, &rs->cap, sizeof *rs->v))
        return 1;
    row *r = &rs->v[rs->n++];
    memset(r, 0, sizeof *r);
    const char *base = strrchr(file, '/');
    snprintf(r->file, sizeof r->file, "%s", base ? base + 1 : file);
    str(o, "workload", r->workload, sizeof r->workload);
    str(o, "policy", r->policy, sizeof r->policy);
    char order[16] = "";
    str(o, "order", order, sizeof order);
    if (!strcmp(order, "stratified")) /* its own bars and rows: another configuration */
        snprintf(r->policy + strlen(r->policy), sizeof r->policy - strlen(r->policy),
                 "+stratified");
    str(o, "engine", r->engine, sizeof r->engine);
    if (!r->workload[0])
        snprintf(r->workload, sizeof r->workload, "manifest");
    if (predicted || !r->engine[0])
        snprintf(r->engine, sizeof r->engine, "sim");
    r->ranks = (int)num(o, "ranks"), r->workers = (int)num(o, "workers");
    r->nodes = (int)num(o, "nodes") > 0 ? (int)num(o, "nodes") : 1;
    r->steps = (int64_t)num(o, "steps"), r->samples = (int64_t)num(o, "samples");
    r->delivered = (int64_t)num(o, "delivered"), r->failed = (int64_t)num(o, "failed");
    r->v[M_THR] = num(o, "throughput_sps");
    r->v[M_EFF] = num(o, "efficiency");
    r->v[M_MISS] = 100 * num(o, "miss_rate");
    r->v[M_P95] = num(o, "wait_p95_ms");
    r->v[M_STALL] = num(o, "stall_p95_ms");
    r->p50 = num(o, "wait_p50_ms"), r->p99 = num(o, "wait_p99_ms");
    r->mean = num(o, "wait_mean_ms"), r->makespan = num(o, "makespan_s");
    r->bound = num(o, "bound_s"), r->model_bound = num(o, "model_bound_s");
    r->ordered = num(o, "bound_ordered_s"), r->eff_ordered = num(o, "efficiency_ordered");
    return 0;
}

/* 0 when path is a regular file, else 1 with the reason said (a FIFO or /dev/zero would
 * never end, a directory is no result). */
static int regular(const char *path, const char *what)
{
    struct stat st;
    if (stat(path, &st)) {
        cli_err("report: cannot open the %s %s: %s", what, path, strerror(errno));
        return 1;
    }
    if (!S_ISREG(st.st_mode)) {
        cli_err("report: the %s %s is not a regular file", what, path);
        return 1;
    }
    return 0;
}

/* 1 when a and b name the same file (out must not be one of the inputs). */
static int same_file(const char *a, const char *b)
{
    struct stat x, y;
    return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* A result file: one result, or a bench's runs (and its simulator predictions). 0 or 1. */
static int load(rows *rs, const char *path)
{
    if (regular(path, "result"))
        return 1;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        cli_err("report: %s:%d: %s", path, je.line, je.text);
        return 1;
    }
    int rc = 0;
    json_t *runs = json_object_get(root, "runs");
    if (json_is_array(runs)) {
        size_t k;
        json_t *o;
        json_array_foreach(runs, k, o) rc |= json_is_object(o) && add_row(rs, o, path, 0);
        json_t *pred = json_object_get(root, "sim_predictions");
        json_array_foreach(pred, k, o) rc |= json_is_object(o) && add_row(rs, o, path, 1);
        if (json_array_size(runs) == 0)
            cli_err("report: %s: a bench result without runs", path);
    } else if (json_is_object(root) && json_is_string(json_object_get(root, "policy"))) {
        rc = add_row(rs, root, path, 0);
    } else {
        cli_err("report: %s: not a DataHelix result (a run's or sim's --json object, or "
                "bench --json)", path);
        rc = 1;
    }
    json_decref(root);
    return rc;
}

/* ---- drawing ---- */

static const char *const palette[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
                                      "#edc948", "#b07aa1", "#9c755f"};

/* Distinct strings of rows (a field at offset off), in order of appearance, among rows of
 * workload wl (NULL: all). */
static int distinct(const rows *rs, size_t off, const char *wl, const char **out, int max)
{
    int n = 0;
    for (int k = 0; k < rs->n; k++) {
        const char *s = (const char *)&rs->v[k] + off;
        if (wl && strcmp(rs->v[k].workload, wl))
            continue;
        int seen = 0;
        for (int j = 0; j < n && !seen; j++)
            seen = !strcmp(out[j], s);
        if (!seen && n < max)
            out[n++] = s;
    }
    return n;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int n;
    double med, lo, hi;
    const row *mid; /* the run with the median p95 (its percentiles draw the CDF) */
} summary;

static summary stat_of(const rows *rs, const char *wl, const char *pol, const char *eng, int m)
{
    double v[256];
    summary s = {0};
    for (int k = 0; k < rs->n; k++) {
        const row *r = &rs->v[k];
        if (strcmp(r->workload, wl) || strcmp(r->policy, pol) || strcmp(r->engine, eng))
            continue;
        if (s.n < 256)
            v[s.n++] = r->v[m];
    }
    if (!s.n)
        return s;
    qsort(v, (size_t)s.n, sizeof *v, cmp_d);
    s.lo = v[0], s.hi = v[s.n - 1];
    s.med = v[(s.n - 1) / 2]; /* of an even count, the lower middle run's, as bench picks */
    for (int k = 0; k < rs->n && !s.mid; k++) {
        const row *r = &rs->v[k];
        if (!strcmp(r->workload, wl) && !strcmp(r->policy, pol) && !strcmp(r->engine, eng) &&
            r->v[m] == v[(s.n - 1) / 2])
            s.mid = r;
    }
    return s;
}

/* Text for HTML/SVG (names come from files: & < > " escaped). */
static void esc(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}

/* Decimals to show x with about 3 significant digits, without an exponent. */
static int decimals(double x)
{
    double a = fabs(x);
    return a >= 100 || a == 0 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
}

static double nice_top(double x)
{
    if (!(x > 0))
        return 1;
    double p = pow(10, floor(log10(x))), m = x / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

/* The y axis of a chart of height h from y0 (top) and its gridlines, bottom..top. */
static void axis_from(FILE *f, double bottom, double top, int x0, int x1, int y0, int h)
{
    for (int k = 0; k <= 4; k++) {
        double v = bottom + (top - bottom) * k / 4;
        int y = y0 + h - (int)lround(h * k / 4.0);
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" class=\"grid\"/>"
                "<text x=\"%d\" y=\"%d\" class=\"tick\" text-anchor=\"end\">%.4g</text>\n",
                x0, x1, y, y, x0 - 4, y + 4, v);
    }
}

static void axis(FILE *f, double top, int x0, int x1, int y0, int h)
{
    axis_from(f, 0, top, x0, x1, y0, h);
}

/* One metric of one workload: bars per policy and engine (median, whisker over runs). */
static void bar_chart(FILE *f, const rows *rs, const char *wl, int m, const char **pol, int np,
                      const char **eng, int ne)
{
    const int W = 226, H = 214, x0 = 44, top_pad = 28, h = 150;
    double top = 0;
    for (int p = 0; p < np; p++)
        for (int e = 0; e < ne; e++) {
            summary s = stat_of(rs, wl, pol[p], eng[e], m);
            top = s.n && s.hi > top ? s.hi : top;
        }
    top = m == M_EFF ? 1.0 : nice_top(top * 1.05);
    fprintf(f, "<svg class=\"chart\" width=\"%d\" height=\"%d\" data-metric=\"%s\">"
            "<text x=\"%d\" y=\"16\" class=\"ctitle\">%s%s%s%s</text>\n", W, H, metric[m].key,
            x0, metric[m].title, metric[m].unit[0] ? " (" : "", metric[m].unit,
            metric[m].unit[0] ? ")" : "");
    axis(f, top, x0, W - 6, top_pad, h);
    double gw = (double)(W - 6 - x0) / np, bw = dmin(28.0, 0.8 * gw / ne);
    for (int p = 0; p < np; p++) {
        double gx = x0 + gw * p + (gw - bw * ne) / 2;
        for (int e = 0; e < ne; e++) {
            summary s = stat_of(rs, wl, pol[p], eng[e], m);
            if (!s.n)
                continue;
            double x = gx + bw * e, bh = h * dmin(s.med, top) / top;
            fprintf(f, "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                    "fill=\"%s\" fill-opacity=\"%s\" data-workload=\"", x,
                    top_pad + h - bh, bw - 2, bh, palette[p % 8], strcmp(eng[e], "sim") ? "1" : "0.45");
            esc(f, wl);
            fprintf(f, "\" data-policy=\"");
            esc(f, pol[p]);
            fprintf(f, "\" data-engine=\"%s\" data-metric=\"%s\" data-value=\"%.6g\" "
                    "data-runs=\"%d\" data-lo=\"%.6g\" data-hi=\"%.6g\"><title>", eng[e],
                    metric[m].key, s.med, s.n, s.lo, s.hi);
            esc(f, pol[p]);
            fprintf(f, " (%s): %.4g%s%s", eng[e], s.med, metric[m].unit[0] ? " " : "",
                    metric[m].unit);
            if (s.n > 1)
                fprintf(f, ", median of %d runs, range %.4g to %.4g", s.n, s.lo, s.hi);
            fprintf(f, "</title></rect>\n");
            if (s.n > 1) { /* the run-to-run range */
                double cx = x + (bw - 2) / 2, ylo = top_pad + h - h * dmin(s.lo, top) / top,
                       yhi = top_pad + h - h * dmin(s.hi, top) / top;
                fprintf(f, "<path class=\"range\" d=\"M%.1f %.1fV%.1fM%.1f %.1fh8M%.1f %.1fh8\"/>\n",
                        cx, ylo, yhi, cx - 4, ylo, cx - 4, yhi);
            }
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"val\" text-anchor=\"middle\">%.*f"
                    "</text>\n", x + (bw - 2) / 2, top_pad + h - bh - 3, decimals(s.med), s.med);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">",
                x0 + gw * p + gw / 2, top_pad + h + 14);
        esc(f, pol[p]);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
}

/*
 * The input wait's distribution per policy (one engine), from each run's figures: the
 * share of waits that were zero (1 - miss rate) and the p50, p95 and p99, joined by lines.
 * A result keeps no more than these points; the caption says so.
 */
static void cdf_chart(FILE *f, const rows *rs, const char *wl, const char **pol, int np,
                      const char *eng)
{
    const int W = 520, H = 250, x0 = 44, top_pad = 24, h = 180, w = W - x0 - 120;
    double xmax = 0, ymin = 1; /* y starts below the lowest share of batches that waited 0 */
    for (int p = 0; p < np; p++) {
        summary s = stat_of(rs, wl, pol[p], eng, M_P95);
        if (s.mid)
            xmax = dmax(xmax, s.mid->p99), ymin = dmin(ymin, 1 - s.mid->v[M_MISS] / 100);
    }
    xmax = nice_top(dmax(xmax, 1e-3) * 1.05);
    ymin = dmin(0.8, floor(dmax(0.0, ymin - 0.02) * 10) / 10);
    fprintf(f, "<svg class=\"cdf\" width=\"%d\" height=\"%d\" data-engine=\"%s\">"
            "<text x=\"%d\" y=\"14\" class=\"ctitle\">Input wait, share of batches waiting at "
            "most x ms (%s)</text>\n", W, H, eng, x0, eng);
    axis_from(f, ymin, 1.0, x0, x0 + w, top_pad, h);
    for (int k = 0; k <= 4; k++)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"tick\" text-anchor=\"middle\">%.3g</text>\n",
                x0 + w * k / 4.0, top_pad + h + 14, xmax * k / 4);
    for (int p = 0; p < np; p++) {
        summary s = stat_of(rs, wl, pol[p], eng, M_P95);
        if (!s.mid)
            continue;
        const row *r = s.mid;
        double zero = dmax(0.0, 1.0 - r->v[M_MISS] / 100);
        double px[5] = {0, 0, r->p50, r->v[M_P95], r->p99}, py[5] = {0, zero, 0.5, 0.95, 0.99};
        fprintf(f, "<polyline class=\"cdfline\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\" "
                "data-policy=\"", palette[p % 8]);
        esc(f, pol[p]);
        fprintf(f, "\" data-zero=\"%.6g\" data-p50=\"%.6g\" data-p95=\"%.6g\" data-p99=\"%.6g\" "
                "points=\"", zero, r->p50, r->v[M_P95], r->p99);
        double last = 0;
        int drawn = 0;
        for (int k = 0; k < 5; k++) {
            if ((k >= 2 && py[k] <= zero) || py[k] < ymin) /* 0 ms already, or below the axis */
                continue;
            double y = dmax(py[k], last);
            last = y;
            drawn++;
            fprintf(f, "%.1f,%.1f ", x0 + w * dmin(px[k], xmax) / xmax,
                    top_pad + h - h * (y - ymin) / (1 - ymin));
        }
        if (drawn < 2) /* no wait up to the p99: a level line, so that it shows */
            fprintf(f, "%.1f,%.1f", (double)(x0 + w), top_pad + h - h * (last - ymin) / (1 - ymin));
        fprintf(f, "\"><title>");
        esc(f, pol[p]);
        fprintf(f, ": %.1f%% of batches waited 0 ms; p50 %.3g ms, p95 %.3g ms, p99 %.3g ms"
                "</title></polyline>\n", 100 * zero, r->p50, r->v[M_P95], r->p99);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"10\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"%d\" class=\"tick\">", x0 + w + 12, top_pad + 16 * p,
                palette[p % 8], x0 + w + 28, top_pad + 9 + 16 * p);
        esc(f, pol[p]);
        fprintf(f, "</text>\n");
    }
    fprintf(f, "</svg>\n");
}

/* ---- the trace ---- */

typedef struct {
    double t0, t1; /* seconds */
    int64_t step, sample;
    int row;       /* rank, or worker */
    int rank;
} span;

typedef struct {
    span *v;
    int64_t n, cap;
} spans;

static int push(spans *s, span x)
{
    if (grow((void **)&s->v, s->n, &s->cap, sizeof *s->v))
        return 1;
    s->v[s->n++] = x;
    return 0;
}

typedef struct {
    spans compute, prepare, waits; /* waits: a rank's request waiting for its data */
    int ranks, workers;
    double end;
} trace;

/* Reads a trace the library wrote (one event per line); 0, or 1 with the error said. */
static int load_trace(const char *path, trace *t)
{
    if (regular(path, "trace"))
        return 1;
    FILE *f = fopen(path, "r");
    if (!f) {
        cli_err("report: cannot open the trace %s: %s", path, strerror(errno));
        return 1;
    }
    char line[1024], name[64];
    int64_t lineno = 0, events = 0;
    int rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        int pid, tid, rank;
        double ts, dur;
        long long step, sample;
        const char *ev = strstr(line, "{\"ph\":\"X\"");
        if (!ev)
            continue; /* the array's brackets, names of processes and threads */
        if (sscanf(ev, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%63[^\"]\",\"ts\":%lf,"
                   "\"dur\":%lf,\"args\":{\"step\":%lld,\"rank\":%d,\"sample\":%lld}}",
                   &pid, &tid, name, &ts, &dur, &step, &rank, &sample) != 8 || tid < 0 ||
            tid > 1 << 20 || !(dur >= 0)) {
            cli_err("report: %s:%lld: not an event of a DataHelix trace", path,
                    (long long)lineno);
            rc = 1;
            break;
        }
        span s = {ts * 1e-6, (ts + dur) * 1e-6, step, sample, tid, rank};
        events++;
        t->end = dmax(t->end, s.t1);
        if (pid == 2 && !strcmp(name, "compute")) {
            rc = push(&t->compute, s);
            t->ranks = t->ranks > tid ? t->ranks : tid + 1;
        } else if (pid == 2 && !strcmp(name, "wait for data")) {
            rc = push(&t->waits, s);
        } else if (pid == 1) {
            rc = push(&t->prepare, s);
            t->workers = t->workers > tid ? t->workers : tid + 1;
        }
    }
    fclose(f);
    if (!rc && !t->compute.n) {
        cli_err("report: %s: no rank computed in this trace (%lld events on lines of their "
                "own): report reads traces as `run --trace` writes them, one event a line",
                path, (long long)events);
        rc = 1;
    }
    return rc;
}

/* A rank's wait for data before a step: [t0, t1], and the last sample that made it wait. */
typedef struct {
    double t0, t1;
    int rank, worker;
    int64_t step, sample;
} bubble;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->row != y->row)
        return x->row - y->row;
    return (x->t0 > y->t0) - (x->t0 < y->t0);
}

static int cmp_bubble_len(const void *a, const void *b)
{
    const bubble *x = a, *y = b;
    double dx = x->t1 - x->t0, dy = y->t1 - y->t0;
    return (dx < dy) - (dx > dy);
}

/*
 * Bubbles: each wait for data the engine traced (a rank asked for its batch of step s before
 * it was ready), with the sample that made it wait: the batch's last one to be prepared, and
 * the worker that prepared it.
 */
static int find_bubbles(trace *t, bubble **out, int64_t *nout)
{
    int64_t R = t->ranks, nsteps = 0;
    for (int64_t k = 0; k < t->waits.n; k++)
        nsteps = nsteps > t->waits.v[k].step ? nsteps : t->waits.v[k].step + 1;
    span *last = calloc((size_t)(R * nsteps + 1), sizeof *last); /* latest prepare per batch */
    bubble *b = malloc((size_t)(t->waits.n + 1) * sizeof *b);
    if (!last || !b) {
        free(last);
        free(b);
        return 1;
    }
    for (int64_t k = 0; k < R * nsteps; k++)
        last[k].row = -1;
    for (int64_t k = 0; k < t->prepare.n; k++) {
        const span *p = &t->prepare.v[k];
        if (p->step < 0 || p->step >= nsteps || p->rank < 0 || p->rank >= R)
            continue;
        span *l = &last[p->step * R + p->rank];
        if (l->row < 0 || p->t1 > l->t1)
            *l = *p;
    }
    qsort(t->waits.v, (size_t)t->waits.n, sizeof *t->waits.v, cmp_span);
    int64_t n = 0;
    for (int64_t k = 0; k < t->waits.n; k++) {
        const span *w = &t->waits.v[k];
        if (w->row < 0 || w->row >= R || w->step < 0)
            continue;
        const span *l = &last[w->step * R + w->row];
        b[n++] = (bubble){w->t0, w->t1, w->row, l->row, w->step, l->row >= 0 ? l->sample : -1};
    }
    free(last);
    *out = b;
    *nout = n;
    return 0;
}

/* One row of the timeline: spans (sorted by start) merged where closer than a pixel. */
static void lane(FILE *f, const span *v, int64_t n, double t0, double scale, int y, int hgt,
                 const char *cls, const char *fill)
{
    for (int64_t k = 0; k < n;) {
        double a = v[k].t0, b = v[k].t1;
        int64_t j = k + 1;
        while (j < n && (v[j].t0 - b) * scale < 1.0) /* merged: under a pixel apart */
            b = dmax(b, v[j++].t1);
        fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
                "fill=\"%s\"/>\n", cls, 120 + (a - t0) * scale, y, dmax(0.5, (b - a) * scale),
                hgt, fill);
        k = j;
    }
}

/* The lane of lane_row under its label: its spans of s (sorted by row) from *at, which moves
 * past them. */
static void labelled_lane(FILE *f, const spans *s, int64_t *at, int lane_row, const char *who, int y,
                          int lh, double scale, const char *cls, const char *fill)
{
    fprintf(f, "<text x=\"112\" y=\"%d\" class=\"tick\" text-anchor=\"end\">%s %d</text>\n",
            y + 11, who, lane_row);
    int64_t from = *at;
    while (*at < s->n && s->v[*at].row == lane_row)
        (*at)++;
    lane(f, s->v + from, *at - from, 0, scale, y, lh, cls, fill);
}

static void timeline(FILE *f, trace *t, const char *path)
{
    bubble *b = NULL;
    int64_t nb = 0;
    if (find_bubbles(t, &b, &nb)) {
        cli_err("report: out of memory reading the trace's waits");
        return;
    }
    const int W = 1180, lh = 14;
    double scale = (W - 130) / dmax(t->end, 1e-6);
    int rows_n = t->ranks + t->workers, H = 40 + rows_n * (lh + 4);
    fprintf(f, "<h2>Timeline of a traced run</h2>\n<p class=\"note\">From ");
    esc(f, path);
    fprintf(f, ": %lld steps over %.3f s. Each rank's compute is blue; a red bar is a rank "
            "waiting for its batch (from its request until the batch's last sample was "
            "ready); workers' preparation is gray. Spans closer than a pixel are "
            "drawn as one. Hover for details.</p>\n",
            (long long)(t->compute.n / (t->ranks > 0 ? t->ranks : 1)), t->end);
    fprintf(f, "<svg class=\"timeline\" viewBox=\"0 0 %d %d\" width=\"100%%\" data-ranks=\"%d\" "
            "data-workers=\"%d\" data-bubbles=\"%lld\">\n", W, H, t->ranks, t->workers,
            (long long)nb);
    for (int k = 0; k <= 5; k++)
        fprintf(f, "<text x=\"%.1f\" y=\"12\" class=\"tick\" text-anchor=\"middle\">%.2f s"
                "</text>\n", 120 + (W - 130) * k / 5.0, t->end * k / 5);
    qsort(t->prepare.v, (size_t)t->prepare.n, sizeof *t->prepare.v, cmp_span);
    qsort(t->compute.v, (size_t)t->compute.n, sizeof *t->compute.v, cmp_span);
    int64_t c = 0, p = 0;
    for (int r = 0; r < t->ranks; r++) {
        int y = 22 + r * (lh + 4);
        labelled_lane(f, &t->compute, &c, r, "rank", y, lh, scale, "compute", "#4e79a7");
        for (int64_t k = 0; k < nb;) { /* its waits, named; those under a pixel apart as one */
            if (b[k].rank != r) {
                k++;
                continue;
            }
            int64_t j = k + 1, worst = k, count = 1;
            double end = b[k].t1;
            for (; j < nb && b[j].rank == r && (b[j].t0 - end) * scale < 1.0; j++, count++) {
                end = dmax(end, b[j].t1);
                worst = b[j].t1 - b[j].t0 > b[worst].t1 - b[worst].t0 ? j : worst;
            }
            const bubble *w = &b[worst];
            fprintf(f, "<rect class=\"bubble\" x=\"%.1f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
                    "fill=\"#e15759\" data-rank=\"%d\" data-step=\"%lld\" data-worker=\"%d\" "
                    "data-sample=\"%lld\" data-ms=\"%.3f\" data-count=\"%lld\"><title>rank %d "
                    "waited %.1f ms before step %lld, for sample %lld (worker %d)",
                    120 + b[k].t0 * scale, y, dmax(1.0, (end - b[k].t0) * scale), lh, r,
                    (long long)w->step, w->worker, (long long)w->sample, 1e3 * (w->t1 - w->t0),
                    (long long)count, r, 1e3 * (w->t1 - w->t0), (long long)w->step,
                    (long long)w->sample, w->worker);
            if (count > 1)
                fprintf(f, "; the longest of %lld waits drawn here", (long long)count);
            fprintf(f, "</title></rect>\n");
            k = j;
        }
    }
    for (int w = 0; w < t->workers; w++) {
        int y = 22 + (t->ranks + w) * (lh + 4);
        labelled_lane(f, &t->prepare, &p, w, "worker", y, lh, scale, "prepare", "#9aa0a6");
    }
    fprintf(f, "</svg>\n");
    qsort(b, (size_t)nb, sizeof *b, cmp_bubble_len);
    fprintf(f, "<h3>The longest waits for data</h3>\n<table class=\"bubbles\"><tr><th>rank</th>"
            "<th>before step</th><th>waited ms</th><th>for sample</th><th>prepared by</th></tr>\n");
    for (int64_t k = 0; k < nb && k < 10; k++)
        fprintf(f, "<tr><td>%d</td><td>%lld</td><td>%.1f</td><td>%lld</td><td>worker %d</td>"
                "</tr>\n", b[k].rank, (long long)b[k].step, 1e3 * (b[k].t1 - b[k].t0),
                (long long)b[k].sample, b[k].worker);
    if (!nb)
        fprintf(f, "<tr><td colspan=\"5\">no rank waited for data</td></tr>\n");
    fprintf(f, "</table>\n");
    free(b);
}

/* ---- the page ---- */

/* Runs of one bar that differ in shape (ranks, workers, nodes) are said, on the page and on
 * stderr: their median mixes what should not be. */
static void mixed_shapes(FILE *f, const rows *rs, const char *wl)
{
    for (int k = 0; k < rs->n; k++) {
        const row *a = &rs->v[k];
        if (strcmp(a->workload, wl))
            continue;
        for (int j = 0; j < k; j++) {
            const row *b = &rs->v[j];
            if (strcmp(b->workload, wl) || strcmp(a->policy, b->policy) ||
                strcmp(a->engine, b->engine))
                continue;
            if (a->ranks == b->ranks && a->workers == b->workers && a->nodes == b->nodes)
                continue;
            cli_err("report: %s / %s (%s): runs of different shapes in one bar (R=%d W=%d in "
                    "%s, R=%d W=%d in %s)", wl, a->policy, a->engine, b->ranks, b->workers,
                    b->file, a->ranks, a->workers, a->file);
            fprintf(f, "<p class=\"warn\">");
            esc(f, a->policy);
            fprintf(f, " (%s): runs of different shapes share its bars (R=%d W=%d and R=%d W=%d; "
                    "see the table below)</p>\n", a->engine, b->ranks, b->workers, a->ranks,
                    a->workers);
            return;
        }
    }
}

static void config_table(FILE *f, const rows *rs)
{
    fprintf(f, "<h2>Runs and their configuration</h2>\n<table class=\"config\"><tr><th>file</th>"
            "<th>workload</th><th>policy</th><th>engine</th><th>ranks</th><th>workers</th>"
            "<th>nodes</th><th>steps</th><th>samples</th><th>delivered + failed</th>"
            "<th>makespan s</th><th>bound s</th><th>model bound s</th><th>efficiency</th>"
            "<th>ordered bound s</th><th>of it</th><th>samples/s</th></tr>\n");
    for (int k = 0; k < rs->n; k++) {
        const row *r = &rs->v[k];
        fprintf(f, "<tr class=\"run\" data-ordered=\"%.6g\"><td>", r->ordered);
        esc(f, r->file);
        fprintf(f, "</td><td>");
        esc(f, r->workload);
        fprintf(f, "</td><td>");
        esc(f, r->policy);
        fprintf(f, "</td><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%lld</td><td>%lld</td>"
                "<td>%lld + %lld</td><td>%.3f</td><td>%.3f</td>", r->engine, r->ranks,
                r->workers, r->nodes, (long long)r->steps, (long long)r->samples,
                (long long)r->delivered, (long long)r->failed, r->makespan, r->bound);
        if (r->model_bound > 0) /* the models' view (the simulator's: its bound) */
            fprintf(f, "<td>%.3f</td>", r->model_bound);
        else
            fprintf(f, "<td>&ndash;</td>");
        fprintf(f, "<td>%.3f</td>", r->v[M_EFF]);
        if (r->ordered > 0) /* with the fill and the drain, for the run's own batches */
            fprintf(f, "<td>%.3f</td><td>%.3f</td>", r->ordered, r->eff_ordered);
        else
            fprintf(f, "<td>&ndash;</td><td>&ndash;</td>");
        fprintf(f, "<td>%.1f</td></tr>\n", r->v[M_THR]);
    }
    fprintf(f, "</table>\n");
}

static const char style[] =
    "body{font-family:sans-serif;margin:24px;color:#222;max-width:1220px}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}"
    "h3{font-size:15px}.note{color:#555;font-size:13px}"
    "svg{margin:4px 8px 4px 0;background:#fff}.grid{stroke:#e4e4e4}"
    ".tick{font-size:11px;fill:#555}.ctitle{font-size:13px;font-weight:bold;fill:#222}"
    ".val{font-size:10px;fill:#333}.range{stroke:#222;stroke-width:1.2;fill:none}"
    "table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:3px 6px;"
    "text-align:right}th{background:#f4f4f4}td:nth-child(-n+4){text-align:left}"
    ".warn{color:#b00;font-size:13px}.legend span{display:inline-block;width:12px;height:10px;margin:0 4px 0 12px}";

/* Writes the page from the result files and trace (may be NULL) to out; 0 or 1. */
int cli_report_write(const char *const *inputs, int n, const char *trace_path, const char *out)
{
    rows rs = {0};
    int rc = 0;
    for (int k = 0; k < n + (trace_path != NULL) && !rc; k++)
        if (same_file(out, k < n ? inputs[k] : trace_path)) {
            cli_err("report: -o %s is one of the inputs: it would be overwritten", out);
            rc = 1;
        }
    for (int k = 0; k < n && !rc; k++)
        rc = load(&rs, inputs[k]);
    trace t = {0};
    if (!rc && trace_path)
        rc = load_trace(trace_path, &t);
    if (!rc && !rs.n) {
        cli_err("report: no runs in the results given");
        rc = 1;
    }
    cli_out o = {0};
    if (!rc)
        rc = cli_out_open(&o, out);
    if (rc) {
        free(rs.v), free(t.compute.v), free(t.prepare.v), free(t.waits.v);
        return 1;
    }
    FILE *f = o.f;
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>DataHelix report</title><style>%s</style></head><body>\n"
            "<h1>DataHelix report</h1>\n<p class=\"note\">%lld runs from", style, (long long)rs.n);
    for (int k = 0; k < n; k++) {
        fputs(k ? ", " : " ", f);
        esc(f, inputs[k]);
    }
    fprintf(f, "; made %s. Real runs are measured on their machine; sim runs are simulated "
            "figures (a real bench's own predictions of its runs among them, drawn paler)."
            "</p>\n", when);
    const char *wl[64], *pol[16], *eng[4];
    int nw = distinct(&rs, offsetof(row, workload), NULL, wl, 64);
    for (int w = 0; w < nw; w++) {
        int np = distinct(&rs, offsetof(row, policy), wl[w], pol, 16);
        int ne = distinct(&rs, offsetof(row, engine), wl[w], eng, 4);
        fprintf(f, "<h2 class=\"workload\">");
        esc(f, wl[w]);
        fprintf(f, "</h2>\n<div class=\"legend note\">");
        for (int p = 0; p < np; p++) {
            fprintf(f, "<span style=\"background:%s\"></span>", palette[p % 8]);
            esc(f, pol[p]);
        }
        fprintf(f, "%s</div>\n", ne > 1 ? " &mdash; solid: real, pale: simulated" : "");
        mixed_shapes(f, &rs, wl[w]);
        for (int m = 0; m < NMETRIC; m++)
            bar_chart(f, &rs, wl[w], m, pol, np, eng, ne);
        fprintf(f, "<br>\n");
        for (int e = 0; e < ne; e++)
            cdf_chart(f, &rs, wl[w], pol, np, eng[e]);
        fprintf(f, "<p class=\"note\">The wait's distribution is drawn through the points each "
                "result keeps: the share of batches that did not wait, then p50, p95 and p99 "
                "(for repeats, the run with the median p95).</p>\n");
    }
    if (trace_path) {
        int match = 0;
        for (int k = 0; k < rs.n; k++)
            match |= rs.v[k].ranks == t.ranks;
        if (!match)
            cli_err("report: the trace %s has %d ranks, none of the results does: is it "
                    "another run's?", trace_path, t.ranks);
        timeline(f, &t, trace_path);
    }
    config_table(f, &rs);
    fprintf(f, "</body></html>\n");
    free(rs.v), free(t.compute.v), free(t.prepare.v), free(t.waits.v);
    if (cli_out_commit(&o))
        return 1;
    return 0;
}

int cli_report_beside(const char *json, const char *trace_path)
{
    char html[4200];
    size_t n = strlen(json);
    int cut = n > 5 && !strcmp(json + n - 5, ".json") ? 5 : 0;
    if (n - (size_t)cut + 6 > sizeof html) {
        cli_err("report: %s: the path is too long for a report beside it", json);
        return 1;
    }
    snprintf(html, sizeof html, "%.*s.html", (int)(n - (size_t)cut), json);
    if (cli_report_write(&json, 1, trace_path, html))
        return 1;
    printf("report: %s\n", html);
    return 0;
}

int cli_report(int argc, char **argv)
{
    const char *out = NULL, *trace_path = NULL;
    const char **in = calloc((size_t)argc, sizeof *in);
    int n = 0;
    if (!in)
        return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            free(in);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output") || !strcmp(a, "--trace")) {
            if (i + 1 >= argc) {
                cli_err("report: %s needs a value (see datahelix report --help)", a);
                free(in);
                return CLI_USAGE;
            }
            *(a[1] == 'o' || a[2] == 'o' ? &out : &trace_path) = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            cli_unexpected("report", a, (const char *const[]){help, NULL});
            free(in);
            return CLI_USAGE;
        } else {
            in[n++] = a;
        }
    }
    if (!n || !out) {
        cli_err("report: give result files and -o REPORT.html (see datahelix report --help)");
        free(in);
        return CLI_USAGE;
    }
    double t0 = cli_now();
    int rc = cli_report_write(in, n, trace_path, out);
    if (!rc)
        printf("report: %s (%.2f s)\n", out, cli_now() - t0);
    free(in);
    return rc;
}
