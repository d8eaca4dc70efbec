/*
 * datahelix/metrics.h - live metrics of running engines, served over HTTP in
 * Prometheus's text exposition format (docs/METRICS.md lists every series).
 * Part of the public C API; include <datahelix.h> for all of it.
 */
#ifndef DATAHELIX_METRICS_H
#define DATAHELIX_METRICS_H

#include "base.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * An endpoint serving GET /metrics from a thread of its own (libmicrohttpd). Engines whose
 * dh_run_config.metrics names it publish there while they run; their counters stay until
 * dh_metrics_stop (a scrape after a run ended still reads its totals). Scraping never takes
 * an engine's lock: the engines keep their figures in atomics.
 */
typedef struct dh_metrics dh_metrics;

/*
 * Listens on where: "PORT", ":PORT" or "ADDR:PORT" (IPv4 address; no ADDR: 127.0.0.1;
 * PORT 0: any free port, dh_metrics_port tells which). 0 and *out, or an error (DH_EINVAL:
 * where does not parse; DH_EIO: cannot listen there, said in errbuf).
 */
DH_API int dh_metrics_start(const char *where, dh_metrics **out, char *errbuf, size_t errlen);
/* The port it listens on. Any thread. */
DH_API int dh_metrics_port(const dh_metrics *m);
/* GET /metrics answered so far. Any thread. */
DH_API int64_t dh_metrics_scrapes(const dh_metrics *m);
/* Stops listening and frees it (after every engine publishing there was freed). NULL: no-op. */
DH_API void dh_metrics_stop(dh_metrics *m);

#ifdef __cplusplus
}
#endif
#endif /* DATAHELIX_METRICS_H */
