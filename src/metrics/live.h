/*
 * live.h - what running engines publish for scraping (internal; the endpoint
 * is datahelix/metrics.h, the series docs/METRICS.md). An engine updates its
 * stream's block with relaxed atomics where its figures change (a task done,
 * a step folded, a lease taken); the endpoint's thread reads them without
 * any engine's lock. Blocks live as long as the endpoint, so totals outlast
 * the engine and a stream's next engine (a restart) counts on from them.
 */
#ifndef DH_LIVE_H
#define DH_LIVE_H

#include "../core/core.h"

#include <stdatomic.h>

/* Histogram upper bounds in seconds (Prometheus `le`), and +Inf after them. */
#define DH__LIVE_BUCKETS 14
typedef struct {
    atomic_llong n[DH__LIVE_BUCKETS + 1]; /* per bucket, not cumulative */
    atomic_llong sum_ns;
} dh__live_hist;

#define DH__LIVE_REASONS 24 /* distinct failure codes kept (later ones: reason "other") */
#define DH__LIVE_KINDS (DH_MEDIA_TYPE_COUNT + 1) /* video, image, audio, text (no media) */

typedef struct dh__live {
    char stream[64];
    int rank_lo, rank_hi;   /* this node's ranks: per-rank series */
    atomic_int running;     /* an engine publishes here now */
    /* folded steps (every rank done): the run's own accounting as it grows */
    atomic_llong steps, delivered, failed;
    atomic_llong prepared[DH__LIVE_KINDS];    /* samples prepared fine on this node, by kind */
    atomic_int reason_code[DH__LIVE_REASONS]; /* failures on this node, by code */
    atomic_llong reason_n[DH__LIVE_REASONS + 1];
    dh__live_hist *wait;    /* rank_hi - rank_lo: each batch's exposed input wait */
    atomic_llong *misses;   /* rank_hi - rank_lo: batches not ready when asked */
    dh__live_hist stall;    /* per step: its slowest rank's wait */
    dh__live_hist decode[DH__LIVE_KINDS]; /* CPU seconds of each task, by its sample's kind */
    atomic_llong busy_ns;   /* worker CPU seconds in tasks */
    atomic_llong pool_bytes, pool_budget, leases;
    atomic_llong reb_moves, reb_bytes, lent, lent_bytes;
    atomic_llong cpu_mape_ppm, gpu_mape_ppm; /* the cost models' running error, x 1e6 */
    /* object stores: what the workers read themselves (added as they go) and what the
     * node's fetchers read ahead (their running totals) */
    atomic_llong read_bytes, read_requests, read_failures;
    atomic_llong ahead_bytes, ahead_requests, ahead_failures;
} dh__live;

void dh__live_observe(dh__live_hist *h, double seconds);
/* A sample failed on this node with code. */
void dh__live_failure(dh__live *l, int code);
/* The block of stream (made on first use, with per-rank series for [rank_lo, rank_hi));
 * NULL when out of memory or DH__LIVE_STREAMS are in use. Any thread. */
struct dh_metrics;
#define DH__LIVE_STREAMS 16
dh__live *dh__metrics_stream(struct dh_metrics *m, const char *stream, int rank_lo,
                             int rank_hi);
/* The exposition text of every block of m (malloc'd, *len bytes); NULL when out of memory. */
char *dh__metrics_render(struct dh_metrics *m, size_t *len);

#endif
