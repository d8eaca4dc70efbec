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
    char region[64];       /* AWS_REGION or AWS_DEFAULT_REGION; default us-east-1 */
    char key[256], secret[256]; /* AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY; "": unsigned */
    char token[4096];      /* AWS_SESSION_TOKEN */
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

/* path as errors show it: without userinfo, query string or fragment. */
void dh__store_display(const char *path, char *out, size_t len);

/* What was fetched: a run's storage figures (summed over threads). */
typedef struct {
    int64_t bytes, requests, retries, failures;
    double wait_s;   /* time spent in requests and backoff */
} dh__fetch_stats;

typedef struct dh__remote dh__remote;

/* One thread's connection, configured from the environment (conf NULL) or conf. NULL
 * with err when the configuration or curl cannot be set up. */
dh__remote *dh__remote_new(const dh__store_conf *conf, char *err, size_t errlen);
void dh__remote_free(dh__remote *r);
/* Its counters since it was made. */
dh__fetch_stats dh__remote_stats(const dh__remote *r);

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

#endif
