/*
 * store.h - media on object storage: HTTP(S) and S3 objects read by byte
 * range through libcurl (internal; docs/STORAGE.md).
 *
 * A manifest path (or an index input) that starts with http://, https:// or
 * s3:// names an object. dh__remote is one thread's connection to the stores:
 * a reused curl handle (keep-alive: one connection per worker and host), a
 * small cache of fetched extents, and counters. Reads fetch an aligned block
 * of the object (dh__store_conf.block_bytes) and, while reads run forward
 * through one object, the next blocks too (read-ahead), never past the end of
 * the range the caller allows (a tar member's bytes): a sample's fetch is the
 * bytes decoding reads, rounded to blocks at most.
 *
 * Every GET carries a Range, and the answer must be 206 with the Content-Range
 * asked for (a store that ignores Range is refused after at most the bytes
 * asked for, never read whole). An object pinned at index time (its ETag) is
 * read with If-Match, so an object changed since is named, not decoded.
 * Transient failures (connection errors, timeouts, 408, 429, 500, 502, 503,
 * 504) are retried with exponential backoff and jitter, honouring
 * Retry-After, until the caller's deadline; 403 and 404 fail at once. Errors
 * name the object as the user wrote it, without a query string or
 * credentials; a signature or a key never reaches a message.
 */
#ifndef DH_STORE_H
#define DH_STORE_H

#include "../core/core.h"

#include <sys/types.h>

/* 1 when path names an object (http://, https://, s3://). */
int dh__is_remote(const char *path);

/* Where S3 objects are and who asks (from the environment: docs/STORAGE.md). */
typedef struct {
    char endpoint[512];    /* AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL; "": AWS itself */
    char endpoint_from[32]; /* which of the two set it (named in errors) */
    char region[64];       /* AWS_REGION or AWS_DEFAULT_REGION; default us-east-1 */
    char key[256], secret[256]; /* AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; "": unsigned */
    char token[4096];      /* AWS_SESSION_TOKEN */
    char ca_bundle[1024];  /* AWS_CA_BUNDLE: a PEM file of CAs to trust for https ("": the
                            * system's) */
    int path_style;        /* bucket in the path (endpoint/bucket/key), not the host name:
                            * DH_S3_ADDRESSING=path|virtual; default path with an endpoint */
    int64_t block_bytes;   /* one fetch's size: DH_FETCH_BLOCK_KIB (default 256 KiB) */
    int readahead;         /* blocks fetched beyond while reads run forward:
                            * DH_FETCH_READAHEAD (default 1) */
    double request_timeout_s; /* one request's limit: DH_FETCH_TIMEOUT_S (default 30) */
    double retry_budget_s; /* retrying without a caller's deadline (index): 60 s */
} dh__store_conf;

/* The configuration from the environment; 0, or DH_EINVAL with the variable named in err. */
int dh__store_conf_env(dh__store_conf *c, char *err, size_t errlen);

/* The HTTP URL of an object (an s3:// one mapped to its endpoint, its key escaped); 0 or
 * DH_EINVAL with the reason in err. */
int dh__store_url(const dh__store_conf *c, const char *path, char *url, size_t len, char *err,
                  size_t errlen);

/* The HTTP URL of the root of an s3:// path's bucket (".../BUCKET/" path-style, else
 * "https://BUCKET.host/"), which a listing queries; 0 or DH_EINVAL with the reason. */
int dh__store_bucket_url(const dh__store_conf *c, const char *path, char *url, size_t len,
                         char *err, size_t errlen);

/* path as errors show it: without userinfo, query string or fragment. */
void dh__store_display(const char *path, char *out, size_t len);

/* What was fetched: a run's storage figures (summed over threads). */
typedef struct {
    int64_t bytes, requests, retries, failures;
    double wait_s;   /* time spent in requests and backoff */
    /* the fetch cost model's inputs: sums over answered requests of 1, seconds t, MB b,
     * b^2 and b t (a least-squares fit of t = latency + b / bandwidth; sums add up) */
    double fit_n, fit_t, fit_b, fit_bb, fit_bt;
    int64_t cache_hits, cache_bytes; /* ranges read from the local cache instead */
} dh__fetch_stats;

/* The fetch cost model fitted to s: seconds per request and bytes/s; 0 when there are too
 * few requests (8) or their sizes do not vary enough to tell the two apart (then latency
 * is their mean time and bandwidth 0: unknown). */
int dh__fetch_fit(const dh__fetch_stats *s, double *latency_s, double *bandwidth);
/* a += b, every field. */
void dh__fetch_add(dh__fetch_stats *a, const dh__fetch_stats *b);
/* *a = what b holds beyond since (b's counters grew from since's). */
void dh__fetch_since(dh__fetch_stats *a, const dh__fetch_stats *b, const dh__fetch_stats *since);

typedef struct dh__remote dh__remote;

/* One thread's connection, configured from the environment (conf NULL) or conf. NULL
 * with err when the configuration or curl cannot be set up. */
dh__remote *dh__remote_new(const dh__store_conf *conf, char *err, size_t errlen);
void dh__remote_free(dh__remote *r);
/* Its counters since it was made. */
dh__fetch_stats dh__remote_stats(const dh__remote *r);

/* Asks the stores for paths[0..n) (distinct objects; each retried within 10 s, 3 attempts
 * when nothing answers at the address) until one is there: 0 when a store answers (a 404
 * for one object or a 503 too: its samples name it, or it is busy), else the failure (a
 * wrong address, TLS, refused credentials, a store down, or n > 1 objects all missing: a
 * server that is not the store they were indexed from). A run whose manifest names
 * objects checks this before it starts; unsigned S3 requests are said once on stderr. */
int dh__store_reachable(const dh__store_conf *c, const char *const *paths, int n, char *err,
                        size_t errlen);

/* A whole answer of url (a listing; path names it in errors), at most max bytes, retried
 * as reads are: *body malloc'ed (the caller frees it), *len its bytes. */
int dh__remote_get_all(dh__remote *r, const char *path, const char *url, size_t max,
                       uint8_t **body, size_t *len, char *err, size_t errlen);

/* An object's size and ETag (a 1-byte ranged GET: servers answer HEAD unevenly). */
typedef struct {
    int64_t size;
    char etag[128]; /* "" when the store gives none */
} dh__object;

int dh__remote_stat(dh__remote *r, const char *path, double deadline, dh__object *out,
                    char *err, size_t errlen);

/* An object as a read sees it: the bytes [lo, hi) of it the caller may read (a tar
 * member's range; hi <= size), its size and ETag as indexed (etag NULL or "": not pinned). */
typedef struct {
    const char *path;
    const char *etag;
    int64_t size, lo, hi;
} dh__object_ref;

/*
 * Up to n bytes of o at off (lo <= off), fetched in blocks that never leave [lo, hi).
 * Returns the bytes copied (0 at or past hi), or an error with the sentence in err:
 * DH_ENOENT (404), DH_EACCES (403), DH_ECORRUPT (the object changed: another ETag or
 * size), DH_ETIMEDOUT (the deadline passed while retrying), DH_EREMOTE (anything else).
 * deadline: CLOCK_MONOTONIC seconds, 0 for the retry budget.
 */
ssize_t dh__remote_read(dh__remote *r, const dh__object_ref *o, void *buf, size_t n,
                        int64_t off, double deadline, char *err, size_t errlen);

/*
 * Fetching ahead (prefetch.c): a node's fetcher threads, each with its own connection,
 * fetch the byte ranges of the samples the schedule says come next, in that order, while
 * the workers decode others; a worker whose read misses its own extents takes a fetched
 * range (copied into its own buffer), waits for one in flight (for a while), or
 * fetches it itself when no fetcher has it (or a fetcher's fetch failed: the worker's own
 * attempt then names the failure). Bytes fetched and not yet taken stay under a budget.
 */
typedef struct dh__prefetch dh__prefetch;

/* An item larger than this is fetched ahead by its head only (the worker reads the rest). */
#define DH__FETCH_AHEAD_ITEM_MAX ((int64_t)64 << 20)

/* One range to fetch: bytes [lo, hi) of object path (of size bytes, etag or NULL), for
 * step `step` (what is left of a retired step is dropped). */
typedef struct {
    char path[4096];
    char etag[128];
    int64_t size, lo, hi, step;
} dh__fetch_job;

/*
 * next(user, job): 1 with the next range to fetch in job, 0 when none is known yet (asked
 * again after a short wait), -1 when no more will come. Called on a
 * fetcher thread, never under the prefetcher's lock. fetchers: threads (>= 1); budget:
 * bytes fetched and not yet taken, at most.
 */
int dh__prefetch_new(int fetchers, int64_t budget, int (*next)(void *user, dh__fetch_job *job),
                     void *user, dh__prefetch **out, char *err, size_t errlen);
/* Drops ranges of steps before `step` that no worker took. */
void dh__prefetch_retire(dh__prefetch *p, int64_t step);
/* The run is stopping: fetches in progress and their retries end at once, a worker waiting
 * for a range stops waiting (the threads are joined by dh__prefetch_free). */
void dh__prefetch_stop(dh__prefetch *p);
/* The fetchers' counters (their requests are not the workers'), and ranges workers took
 * ready / after waiting, found nowhere, and ranges dropped unused. */
typedef struct {
    dh__fetch_stats fetched;
    int64_t taken_ready, taken_waited, missed, dropped;
} dh__prefetch_stats;
/* The fetchers' requests so far (as of their last finished fetch). Any thread; takes the
 * fetchers' lock, never held while they ask for work. */
dh__fetch_stats dh__prefetch_fetched(dh__prefetch *p);
/* Stops the fetchers (a fetch in progress ends by its own timeout), gives their final
 * figures (stats may be NULL) and frees it. */
void dh__prefetch_free(dh__prefetch *p, dh__prefetch_stats *stats);

/* A worker's connection takes ranges from p before fetching itself (NULL: never). */
void dh__remote_use_prefetch(dh__remote *r, dh__prefetch *p);

/* What prefetch.c uses of remote.c (calls go that way only): exactly [start, end) of o
 * into buf, checked as any read's; and the hook a worker's misses ask first: 1 with a
 * range [*off, *off + *len) holding `at` copied into *data (the caller's buffer, which the
 * hook grows with realloc). */
int dh__remote_fetch(dh__remote *r, const dh__object_ref *o, int64_t start, int64_t end,
                     uint8_t *buf, double deadline, char *err, size_t errlen);
typedef int (*dh__take_fn)(void *ctx, const dh__object_ref *o, int64_t at, double deadline,
                           uint8_t **data, int64_t *off, int64_t *len);
void dh__remote_set_take(dh__remote *r, dh__take_fn fn, void *ctx);
/* *flag (read atomically) set ends r's request in progress and its retries at once. */
void dh__remote_set_abort(dh__remote *r, const int *flag);

/*
 * The optional local cache of fetched ranges (cache.c): DH_FETCH_CACHE=DIR turns it on,
 * DH_FETCH_CACHE_MIB its budget (default 10240), least recently used out first. Only
 * ranges of objects with an ETag are kept (the key holds it, so a changed object is
 * fetched again). get: 1 with exactly len bytes in buf; put keeps a range. Thread-safe; a
 * cache that cannot be written is one warning on stderr, then off.
 */
uint64_t dh__cache_key(const char *path, const char *etag, int64_t start, int64_t end);
int dh__cache_get(const char *etag, uint64_t key, uint8_t *buf, int64_t len);
void dh__cache_put(const char *etag, uint64_t key, const uint8_t *buf, int64_t len);

#endif
