/*
 * live.c - the live metrics endpoint: stream blocks the engines update with
 * atomics, and their Prometheus text exposition served by libmicrohttpd.
 *
 * Why libmicrohttpd: a small, well-kept HTTP server library in Debian that
 * runs its own polling thread, so serving never shares a thread with the
 * data path and we parse no HTTP ourselves.
 */
#include "live.h"

#include "datahelix/metrics.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const double live_le[DH__LIVE_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                 0.25,  0.5,    1,     2.5,  5,     10,  30};
static const char *const kind_names[DH__LIVE_KINDS] = {"video", "image", "audio", "text"};

struct dh_metrics {
    struct MHD_Daemon *d;
    pthread_mutex_t mu; /* the list of blocks (their figures are atomics) */
    dh__live *streams[DH__LIVE_STREAMS];
    int n, port;
    atomic_llong scrapes;
};

void dh__live_observe(dh__live_hist *h, double seconds)
{
    if (!(seconds >= 0))
        seconds = 0;
    int b = 0;
    while (b < DH__LIVE_BUCKETS && seconds > live_le[b])
        b++;
    atomic_fetch_add_explicit(&h->n[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_ns, (long long)(seconds * 1e9), memory_order_relaxed);
}

void dh__live_failure(dh__live *l, int code)
{
    int k = 0;
    for (; k < DH__LIVE_REASONS; k++) { /* the code's slot, or claim the first free one */
        int have = atomic_load_explicit(&l->reason_code[k], memory_order_relaxed);
        if (have == code)
            break;
        if (have == 0 && atomic_compare_exchange_strong(&l->reason_code[k], &have, code))
            break;
        if (have == code)
            break;
    }
    atomic_fetch_add_explicit(&l->reason_n[k], 1, memory_order_relaxed);
}

dh__live *dh__metrics_stream(struct dh_metrics *m, const char *stream, int rank_lo, int rank_hi)
{
    pthread_mutex_lock(&m->mu);
    dh__live *l = NULL;
    for (int k = 0; k < m->n && !l; k++)
        if (!strcmp(m->streams[k]->stream, stream))
            l = m->streams[k];
    if (l && (l->rank_lo != rank_lo || l->rank_hi != rank_hi))
        l = NULL; /* another shape under the same name: its series cannot continue */
    else if (!l && m->n < DH__LIVE_STREAMS && (l = calloc(1, sizeof *l))) {
        int n = rank_hi - rank_lo;
        l->wait = calloc((size_t)n, sizeof *l->wait);
        l->misses = calloc((size_t)n, sizeof *l->misses);
        if (!l->wait || !l->misses) {
            free(l->wait);
            free(l->misses);
            free(l);
            l = NULL;
        } else {
            snprintf(l->stream, sizeof l->stream, "%s", stream);
            l->rank_lo = rank_lo;
            l->rank_hi = rank_hi;
            m->streams[m->n++] = l;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return l;
}

/* ---- the exposition text ---- */

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !t->oom; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
        } else if (t->s && (size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        } else {
            size_t cap = DH_MAX(2 * t->cap, t->len + (size_t)n + 4096);
            char *s = realloc(t->s, cap);
            if (!s)
                t->oom = 1;
            else
                t->s = s, t->cap = cap;
        }
    }
}

static long long get(atomic_llong *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

static void family(text *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram's series; labels: `stream="x"` and maybe more. */
static void hist(text *t, const char *name, const char *labels, dh__live_hist *h)
{
    long long cum = 0;
    for (int b = 0; b <= DH__LIVE_BUCKETS; b++) {
        cum += get(&h->n[b]);
        if (b < DH__LIVE_BUCKETS)
            put(t, "%s_bucket{%s,le=\"%g\"} %lld\n", name, labels, live_le[b], cum);
        else
            put(t, "%s_bucket{%s,le=\"+Inf\"} %lld\n", name, labels, cum);
    }
    put(t, "%s_sum{%s} %.9f\n%s_count{%s} %lld\n", name, labels, 1e-9 * (double)get(&h->sum_ns),
        name, labels, cum);
}

/* A scalar family: one series per stream, the field at offset `off` of each block (plus the
 * one at `off2`, unless NO_FIELD), times scale. */
#define NO_FIELD SIZE_MAX
static void scalar(text *t, dh__live **ls, int n, const char *name, const char *type,
                   const char *help, size_t off, size_t off2, double scale)
{
    family(t, name, type, help);
    for (int k = 0; k < n; k++) {
        long long v = get((atomic_llong *)((char *)ls[k] + off));
        if (off2 != NO_FIELD)
            v += get((atomic_llong *)((char *)ls[k] + off2));
        if (scale == 1)
            put(t, "%s{stream=\"%s\"} %lld\n", name, ls[k]->stream, v);
        else
            put(t, "%s{stream=\"%s\"} %.9g\n", name, ls[k]->stream, scale * (double)v);
    }
}

#define SCALAR(name, type, help, field, scale)                                                   \
    scalar(&t, ls, n, name, type, help, offsetof(dh__live, field), NO_FIELD, scale)
/* read by the workers plus read ahead by the fetchers */
#define STORAGE(name, help, what)                                                                \
    scalar(&t, ls, n, name, "counter", help, offsetof(dh__live, read_##what),                     \
           offsetof(dh__live, ahead_##what), 1)

char *dh__metrics_render(struct dh_metrics *m, size_t *len)
{
    dh__live *ls[DH__LIVE_STREAMS];
    pthread_mutex_lock(&m->mu);
    int n = m->n;
    memcpy(ls, m->streams, sizeof ls);
    pthread_mutex_unlock(&m->mu);
    text t = {0};
    char lab[160];
    family(&t, "datahelix_running", "gauge", "1 while an engine serves the stream, else 0.");
    for (int k = 0; k < n; k++)
        put(&t, "datahelix_running{stream=\"%s\"} %d\n", ls[k]->stream,
            atomic_load_explicit(&ls[k]->running, memory_order_relaxed));
    SCALAR("datahelix_steps_total", "counter", "Steps every rank completed.", steps, 1);
    SCALAR("datahelix_samples_delivered_total", "counter",
           "Samples of completed steps delivered decoded (the run's accounting).", delivered, 1);
    SCALAR("datahelix_samples_failed_total", "counter",
           "Samples of completed steps that failed (delivered zero-filled, flagged).", failed,
           1);
    family(&t, "datahelix_samples_prepared_total", "counter",
           "Samples prepared fine on this node, by the kind of their first medium.");
    for (int k = 0; k < n; k++)
        for (int j = 0; j < DH__LIVE_KINDS; j++)
            put(&t, "datahelix_samples_prepared_total{stream=\"%s\",modality=\"%s\"} %lld\n",
                ls[k]->stream, kind_names[j], get(&ls[k]->prepared[j]));
    family(&t, "datahelix_sample_failures_total", "counter",
           "Samples that failed on this node, by error code.");
    for (int k = 0; k < n; k++)
        for (int j = 0; j <= DH__LIVE_REASONS; j++) {
            long long v = get(&ls[k]->reason_n[j]);
            int code = j < DH__LIVE_REASONS ? atomic_load(&ls[k]->reason_code[j]) : 0;
            if (v)
                put(&t, "datahelix_sample_failures_total{stream=\"%s\",reason=\"%s\"} %lld\n",
                    ls[k]->stream, code ? dh_err_name(code) : "other", v);
        }
    family(&t, "datahelix_input_wait_seconds", "histogram",
           "Exposed input wait of each batch: how long its rank's request waited (steps >= 1).");
    for (int k = 0; k < n; k++)
        for (int r = ls[k]->rank_lo; r < ls[k]->rank_hi; r++) {
            snprintf(lab, sizeof lab, "stream=\"%s\",rank=\"%d\"", ls[k]->stream, r);
            hist(&t, "datahelix_input_wait_seconds", lab, &ls[k]->wait[r - ls[k]->rank_lo]);
        }
    family(&t, "datahelix_deadline_misses_total", "counter",
           "Batches not ready when their rank asked (steps >= 1).");
    for (int k = 0; k < n; k++)
        for (int r = ls[k]->rank_lo; r < ls[k]->rank_hi; r++)
            put(&t, "datahelix_deadline_misses_total{stream=\"%s\",rank=\"%d\"} %lld\n",
                ls[k]->stream, r, get(&ls[k]->misses[r - ls[k]->rank_lo]));
    family(&t, "datahelix_step_stall_seconds", "histogram",
           "Per step (>= 1), the longest input wait among its ranks: what the collective lost.");
    for (int k = 0; k < n; k++) {
        snprintf(lab, sizeof lab, "stream=\"%s\"", ls[k]->stream);
        hist(&t, "datahelix_step_stall_seconds", lab, &ls[k]->stall);
    }
    family(&t, "datahelix_decode_seconds", "histogram",
           "CPU seconds of each preparation task (a sample or a part of one) on this node, by "
           "the kind of the sample's first medium.");
    for (int k = 0; k < n; k++)
        for (int j = 0; j < DH__LIVE_KINDS; j++) {
            snprintf(lab, sizeof lab, "stream=\"%s\",modality=\"%s\"", ls[k]->stream,
                     kind_names[j]);
            hist(&t, "datahelix_decode_seconds", lab, &ls[k]->decode[j]);
        }
    SCALAR("datahelix_worker_busy_seconds_total", "counter",
           "CPU seconds this node's workers spent preparing samples.", busy_ns, 1e-9);
    SCALAR("datahelix_pool_bytes", "gauge", "Batch memory in use (pool and move arena).",
           pool_bytes, 1);
    SCALAR("datahelix_pool_budget_bytes", "gauge", "The run's batch memory budget.",
           pool_budget, 1);
    SCALAR("datahelix_leases", "gauge", "Batches trainers hold now (serve).", leases, 1);
    SCALAR("datahelix_rebalance_moves_total", "counter",
           "Prepared samples moved between ranks by rebalancing.", reb_moves, 1);
    SCALAR("datahelix_rebalance_moved_bytes_total", "counter", "Bytes rebalancing moved.",
           reb_bytes, 1);
    SCALAR("datahelix_lent_samples_total", "counter",
           "Late samples of other nodes prepared here (several nodes).", lent, 1);
    SCALAR("datahelix_lent_bytes_total", "counter", "Bytes of lent samples shipped back.",
           lent_bytes, 1);
    STORAGE("datahelix_storage_read_bytes_total",
            "Bytes read from object stores (HTTP(S), S3), by workers and fetchers.", bytes);
    STORAGE("datahelix_storage_requests_total", "Requests to object stores (retries included).",
            requests);
    STORAGE("datahelix_storage_failures_total",
            "Reads from object stores that failed after their retries.", failures);
    family(&t, "datahelix_model_error_ratio", "gauge",
           "Running mean absolute percentage error of the calibrated cost models, as a ratio.");
    for (int k = 0; k < n; k++) {
        put(&t, "datahelix_model_error_ratio{stream=\"%s\",model=\"cpu\"} %.6f\n",
            ls[k]->stream, 1e-6 * (double)get(&ls[k]->cpu_mape_ppm));
        put(&t, "datahelix_model_error_ratio{stream=\"%s\",model=\"gpu\"} %.6f\n",
            ls[k]->stream, 1e-6 * (double)get(&ls[k]->gpu_mape_ppm));
    }
    if (t.oom) {
        free(t.s);
        return NULL;
    }
    *len = t.len;
    return t.s;
}

/* ---- the endpoint ---- */

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_len, void **state)
{
    (void)version, (void)upload, (void)upload_len, (void)state;
    dh_metrics *m = cls;
    const char *body = "not found: the metrics are at /metrics\n";
    unsigned status = MHD_HTTP_NOT_FOUND;
    char *page = NULL;
    size_t len = strlen(body);
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        body = "only GET /metrics\n", status = MHD_HTTP_METHOD_NOT_ALLOWED, len = strlen(body);
    } else if (!strcmp(url, "/metrics")) {
        page = dh__metrics_render(m, &len);
        body = page ? page : "out of memory\n";
        status = page ? MHD_HTTP_OK : MHD_HTTP_INTERNAL_SERVER_ERROR;
        len = page ? len : strlen(body);
        atomic_fetch_add(&m->scrapes, 1);
    }
    struct MHD_Response *r =
        page ? MHD_create_response_from_buffer(len, page, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(page);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type",
                            status == MHD_HTTP_OK ? "text/plain; version=0.0.4; charset=utf-8"
                                                  : "text/plain; charset=utf-8");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

int dh_metrics_start(const char *where, dh_metrics **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!where || !*where)
        return dh__fail(err, errlen, DH_EINVAL, "metrics: give PORT or ADDR:PORT");
    const char *colon = strrchr(where, ':');
    char addr[64] = "127.0.0.1";
    const char *port_s = colon ? colon + 1 : where;
    if (colon && colon > where) {
        if ((size_t)(colon - where) >= sizeof addr)
            return dh__fail(err, errlen, DH_EINVAL, "metrics: \"%s\": the address is too long",
                            where);
        memcpy(addr, where, (size_t)(colon - where));
        addr[colon - where] = 0;
    }
    char *end = NULL;
    long port = strtol(port_s, &end, 10);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (!isdigit((unsigned char)*port_s) || *end || port < 0 || port > 65535)
        return dh__fail(err, errlen, DH_EINVAL, "metrics: \"%s\": the port must be 0 to 65535 "
                        "(ADDR:PORT or PORT)", where);
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return dh__fail(err, errlen, DH_EINVAL, "metrics: \"%s\": \"%s\" is not an IPv4 "
                        "address (0.0.0.0 listens on every interface)", where, addr);
    /* Bound once here first, for the reason a bind fails (libmicrohttpd does not say it). */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int bad = bind(fd, (struct sockaddr *)&sa, sizeof sa) ? errno : 0;
        close(fd);
        if (bad)
            return dh__fail(err, errlen, DH_EIO, "metrics: cannot listen on %s:%ld: %s", addr,
                            port, strerror(bad));
    }
    dh_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return dh__fail(err, errlen, DH_ENOMEM, "metrics: out of memory");
    pthread_mutex_init(&m->mu, NULL);
    /* its own polling thread; a scrape that stalls is cut off after 10 s */
    m->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL,
                            answer, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_END);
    if (!m->d) {
        pthread_mutex_destroy(&m->mu);
        free(m);
        return dh__fail(err, errlen, DH_EIO, "metrics: cannot listen on %s:%ld (in use, or "
                        "not an address of this machine?)", addr, port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
    m->port = info ? info->port : (int)port;
    *out = m;
    return 0;
}

int dh_metrics_port(const dh_metrics *m)
{
    return m ? m->port : 0;
}

int64_t dh_metrics_scrapes(const dh_metrics *m)
{
    return m ? atomic_load(&((dh_metrics *)m)->scrapes) : 0;
}

void dh_metrics_stop(dh_metrics *m)
{
    if (!m)
        return;
    MHD_stop_daemon(m->d);
    for (int k = 0; k < m->n; k++) {
        free(m->streams[k]->wait);
        free(m->streams[k]->misses);
        free(m->streams[k]);
    }
    pthread_mutex_destroy(&m->mu);
    free(m);
}
