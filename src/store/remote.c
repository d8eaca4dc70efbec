/*
 * remote.c - HTTP(S) and S3 objects read by byte range through libcurl (see
 * store.h; the environment it reads is in docs/STORAGE.md).
 *
 * DESIGN: libcurl (Debian's 7.88) because it is the well-kept HTTP client:
 * TLS, keep-alive, proxies, redirects and SigV4 signing (CURLOPT_AWS_SIGV4)
 * are its job, not ours. One easy handle per thread, reused, so a worker
 * keeps its connection to a store open from sample to sample. curl 7.88 signs
 * a request but does not send the payload hash S3 requires, so every request
 * carries x-amz-content-sha256 (the hash of an empty body: only GETs are
 * sent). A GET always asks a Range: the body callback stops a transfer that
 * brings more than was asked, so a store ignoring Range costs one block, not
 * the object. Fetched extents stay in a small per-thread LRU, so the
 * demuxer's back-and-forth within a block costs no second request.
 */
#include "store.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define EXTENTS 8          /* fetched extents a thread keeps */
#define BODY_ERR_MAX 512   /* bytes of an error answer kept (its S3 code) */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

int dh__is_remote(const char *p)
{
    if (!p || ((p[0] | 0x20) != 'h' && (p[0] | 0x20) != 's'))
        return 0; /* a local path, told by its first byte (asked of every media item loaded) */
    return !strncasecmp(p, "http://", 7) || !strncasecmp(p, "https://", 8) ||
           !strncasecmp(p, "s3://", 5);
}

void dh__store_display(const char *path, char *out, size_t len)
{
    const char *scheme = strstr(path, "://");
    const char *host = scheme ? scheme + 3 : path;
    size_t hostlen = strcspn(host, "/?#");
    const char *at = memchr(host, '@', hostlen); /* user:password@host */
    size_t head = (size_t)(host - path);
    const char *rest = at ? at + 1 : host;
    snprintf(out, len, "%.*s%.*s", (int)head, path, (int)strcspn(rest, "?#"), rest);
}

/* ------------------------------------------------------- configuration */

static const char *env(const char *a, const char *b)
{
    const char *v = getenv(a);
    if ((!v || !*v) && b)
        v = getenv(b);
    return v && *v ? v : NULL;
}

/* A positive number from variable name (def when unset); -1 with err when malformed. */
static double env_num(const char *name, double def, double lo, double hi, char *err,
                      size_t errlen)
{
    const char *v = env(name, NULL);
    if (!v)
        return def;
    char *end = NULL;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= lo && x <= hi)) {
        dh__fail(err, errlen, DH_EINVAL, "%s=\"%.40s\": expected a number from %g to %g", name,
                 v, lo, hi);
        return -1;
    }
    return x;
}

/* Copies an environment value into a field; DH_EINVAL when it does not fit. */
static int env_copy(char *dst, size_t cap, const char *v, const char *name, char *err,
                    size_t errlen)
{
    if (!v)
        return 0;
    if (strlen(v) >= cap)
        return dh__fail(err, errlen, DH_EINVAL, "%s: over %zu bytes", name, cap - 1);
    strcpy(dst, v);
    return 0;
}

int dh__store_conf_env(dh__store_conf *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    const char *ep = env("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL");
    snprintf(c->endpoint_from, sizeof c->endpoint_from, "%s",
             env("AWS_ENDPOINT_URL_S3", NULL) ? "AWS_ENDPOINT_URL_S3" : "AWS_ENDPOINT_URL");
    int rc = env_copy(c->endpoint, sizeof c->endpoint, ep, "AWS_ENDPOINT_URL", err, errlen);
    rc = rc ? rc : env_copy(c->region, sizeof c->region, env("AWS_REGION", "AWS_DEFAULT_REGION"),
                            "AWS_REGION", err, errlen);
    rc = rc ? rc : env_copy(c->key, sizeof c->key, env("AWS_ACCESS_KEY_ID", NULL),
                            "AWS_ACCESS_KEY_ID", err, errlen);
    rc = rc ? rc : env_copy(c->secret, sizeof c->secret, env("AWS_SECRET_ACCESS_KEY", NULL),
                            "AWS_SECRET_ACCESS_KEY", err, errlen);
    rc = rc ? rc : env_copy(c->token, sizeof c->token, env("AWS_SESSION_TOKEN", NULL),
                            "AWS_SESSION_TOKEN", err, errlen);
    rc = rc ? rc : env_copy(c->ca_bundle, sizeof c->ca_bundle, env("AWS_CA_BUNDLE", NULL),
                            "AWS_CA_BUNDLE", err, errlen);
    if (rc)
        return rc;
    if (!c->region[0])
        strcpy(c->region, "us-east-1");
    for (const char *q = c->region; *q; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '-'))
            return dh__fail(err, errlen, DH_EINVAL, "AWS_REGION=\"%s\": not a region name",
                            c->region);
    if (c->ca_bundle[0] && access(c->ca_bundle, R_OK) != 0)
        return dh__fail(err, errlen, DH_EINVAL, "AWS_CA_BUNDLE=\"%s\": %s", c->ca_bundle,
                        strerror(errno));
    if (!!c->key[0] != !!c->secret[0])
        return dh__fail(err, errlen, DH_EINVAL, "%s is set but %s is not: set both (signed "
                        "requests) or neither (anonymous)", c->key[0] ? "AWS_ACCESS_KEY_ID"
                        : "AWS_SECRET_ACCESS_KEY", c->key[0] ? "AWS_SECRET_ACCESS_KEY"
                        : "AWS_ACCESS_KEY_ID");
    if (c->endpoint[0] && !(!strncasecmp(c->endpoint, "http://", 7) ||
                            !strncasecmp(c->endpoint, "https://", 8)))
        return dh__fail(err, errlen, DH_EINVAL, "AWS_ENDPOINT_URL=\"%s\": expected http:// or "
                        "https://", c->endpoint);
    size_t el = strlen(c->endpoint);
    while (el > 0 && c->endpoint[el - 1] == '/')
        c->endpoint[--el] = 0;
    const char *style = env("DH_S3_ADDRESSING", NULL);
    if (style && strcmp(style, "path") && strcmp(style, "virtual"))
        return dh__fail(err, errlen, DH_EINVAL, "DH_S3_ADDRESSING=\"%.40s\": expected path or "
                        "virtual", style);
    c->path_style = style ? !strcmp(style, "path") : c->endpoint[0] != 0;
    double kib = env_num("DH_FETCH_BLOCK_KIB", 256, 4, 65536, err, errlen);
    double ra = env_num("DH_FETCH_READAHEAD", 1, 0, 64, err, errlen);
    double to = env_num("DH_FETCH_TIMEOUT_S", 30, 0.1, 3600, err, errlen);
    if (kib < 0 || ra < 0 || to < 0)
        return DH_EINVAL;
    c->block_bytes = (int64_t)kib * 1024;
    c->readahead = (int)ra;
    c->request_timeout_s = to;
    c->retry_budget_s = 60;
    return 0;
}

/* Appends key escaped as SigV4 wants an S3 path: unreserved bytes and '/' as they are. */
static int escape_key(const char *key, char *out, size_t len)
{
    size_t o = 0;
    for (const unsigned char *q = (const unsigned char *)key; *q; q++) {
        int keep = (*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') ||
                   (*q >= '0' && *q <= '9') || strchr("-_.~/", *q);
        if (o + 4 >= len)
            return -1;
        o += keep ? (size_t)snprintf(out + o, len - o, "%c", *q)
                  : (size_t)snprintf(out + o, len - o, "%%%02X", *q);
    }
    out[o] = 0;
    return 0;
}

int dh__store_url(const dh__store_conf *c, const char *path, char *url, size_t len, char *err,
                  size_t errlen)
{
    if (strncasecmp(path, "s3://", 5)) {
        if (strlen(path) >= len)
            return dh__fail(err, errlen, DH_EINVAL, "a URL over %zu bytes", len - 1);
        strcpy(url, path);
        return 0;
    }
    const char *bucket = path + 5, *slash = strchr(bucket, '/');
    size_t blen = slash ? (size_t)(slash - bucket) : strlen(bucket);
    if (!blen || blen > 63 || !slash || !slash[1])
        return dh__fail(err, errlen, DH_EINVAL, "expected s3://BUCKET/KEY");
    for (size_t k = 0; k < blen; k++)
        if (!((bucket[k] >= 'a' && bucket[k] <= 'z') || (bucket[k] >= '0' && bucket[k] <= '9') ||
              bucket[k] == '-' || bucket[k] == '.'))
            return dh__fail(err, errlen, DH_EINVAL, "\"%.*s\" is not a bucket name (lower-case "
                            "letters, digits, '-' and '.')", (int)blen, bucket);
    char key[4096 * 3];
    if (escape_key(slash + 1, key, sizeof key))
        return dh__fail(err, errlen, DH_EINVAL, "a key over %zu bytes", sizeof key / 3);
    int n;
    if (c->endpoint[0] && c->path_style) {
        n = snprintf(url, len, "%s/%.*s/%s", c->endpoint, (int)blen, bucket, key);
    } else if (c->endpoint[0]) { /* virtual-hosted on the endpoint: bucket.host */
        const char *host = strstr(c->endpoint, "://") + 3;
        n = snprintf(url, len, "%.*s%.*s.%s/%s", (int)(host - c->endpoint), c->endpoint,
                     (int)blen, bucket, host, key);
    } else if (c->path_style) {
        n = snprintf(url, len, "https://s3.%s.amazonaws.com/%.*s/%s", c->region, (int)blen,
                     bucket, key);
    } else {
        n = snprintf(url, len, "https://%.*s.s3.%s.amazonaws.com/%s", (int)blen, bucket,
                     c->region, key);
    }
    if (n < 0 || (size_t)n >= len)
        return dh__fail(err, errlen, DH_EINVAL, "a URL over %zu bytes", len - 1);
    return 0;
}

int dh__store_bucket_url(const dh__store_conf *c, const char *path, char *url, size_t len,
                         char *err, size_t errlen)
{
    if (strncasecmp(path, "s3://", 5))
        return dh__fail(err, errlen, DH_EINVAL, "expected s3://BUCKET/PREFIX");
    char one[600];
    size_t blen = strcspn(path + 5, "/");
    if (blen > 63)
        blen = 64; /* refused as a bucket name below */
    snprintf(one, sizeof one, "s3://%.*s/x", (int)blen, path + 5);
    int rc = dh__store_url(c, one, url, len, err, errlen);
    if (!rc)
        url[strlen(url) - 1] = 0; /* the bucket's root: ".../BUCKET/" or "BUCKET.host/" */
    return rc;
}

/* ------------------------------------------------------------ the handle */

typedef struct {
    uint64_t obj;        /* hash of the path and its ETag */
    int64_t off, len;
    uint8_t *data;
    uint64_t used;       /* 0: empty */
} extent;

struct dh__remote {
    dh__store_conf conf;
    CURL *h;
    struct curl_slist *headers; /* x-amz-content-sha256 (+ the session token) */
    extent ext[EXTENTS];
    uint64_t tick, rng;
    uint64_t last_obj;   /* the object and end of the last fetch: read-ahead while forward */
    int64_t last_end;
    dh__fetch_stats st;
    dh__take_fn take;    /* ranges the node's fetchers brought (prefetch.c), or NULL */
    void *take_ctx;
    const int *abort;    /* atomic; set: requests and retries end at once (or NULL) */
    int probe;           /* dh__store_reachable: an HTTP answer ends the retries... */
    int answered;        /* ...and sets this: the store is there */
};

static int aborted(const dh__remote *r)
{
    return r->abort && __atomic_load_n(r->abort, __ATOMIC_ACQUIRE);
}

/* libcurl's progress hook: a non-zero answer ends the transfer. */
static int on_progress(void *user, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)a, (void)b, (void)c, (void)d;
    return aborted(user);
}

void dh__remote_set_abort(dh__remote *r, const int *flag)
{
    r->abort = flag;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

dh__remote *dh__remote_new(const dh__store_conf *conf, char *err, size_t errlen)
{
    dh__store_conf c;
    if (!conf) {
        if (dh__store_conf_env(&c, err, errlen))
            return NULL;
        conf = &c;
    }
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        dh__fail(err, errlen, DH_EREMOTE, "libcurl cannot start: %s",
                 curl_easy_strerror(curl_init_rc));
        return NULL;
    }
    dh__remote *r = dh__calloc(1, sizeof *r);
    if (!r) {
        dh__fail(err, errlen, DH_ENOMEM, "out of memory");
        return NULL;
    }
    r->conf = *conf;
    r->rng = (uint64_t)(uintptr_t)r ^ (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
    r->h = curl_easy_init();
    r->headers = curl_slist_append(NULL, "x-amz-content-sha256: " EMPTY_SHA256);
    if (r->headers && conf->token[0]) {
        char line[sizeof conf->token + 32];
        snprintf(line, sizeof line, "x-amz-security-token: %s", conf->token);
        struct curl_slist *more = curl_slist_append(r->headers, line);
        if (more)
            r->headers = more;
        else {
            curl_slist_free_all(r->headers);
            r->headers = NULL;
        }
    }
    if (!r->h || !r->headers) {
        dh__remote_free(r);
        dh__fail(err, errlen, DH_ENOMEM, "out of memory (curl handle)");
        return NULL;
    }
    return r;
}

void dh__remote_free(dh__remote *r)
{
    if (!r)
        return;
    for (int k = 0; k < EXTENTS; k++)
        free(r->ext[k].data);
    curl_slist_free_all(r->headers);
    if (r->h)
        curl_easy_cleanup(r->h);
    free(r);
}

int dh__fetch_fit(const dh__fetch_stats *s, double *latency_s, double *bandwidth)
{
    *latency_s = *bandwidth = 0;
    if (s->fit_n < 8)
        return 0;
    double n = s->fit_n, mb = s->fit_b / n, mt = s->fit_t / n;
    double vb = s->fit_bb / n - mb * mb, cbt = s->fit_bt / n - mb * mt;
    double slope = vb > 1e-12 ? cbt / vb : 0; /* seconds per MB */
    if (slope <= 0 || mt - slope * mb < 0) { /* sizes alike, or noise: the mean time */
        *latency_s = mt;
        return 1;
    }
    *latency_s = mt - slope * mb;
    *bandwidth = 1e6 / slope;
    return 1;
}

void dh__fetch_add(dh__fetch_stats *a, const dh__fetch_stats *b)
{
    a->bytes += b->bytes, a->requests += b->requests, a->retries += b->retries;
    a->failures += b->failures, a->wait_s += b->wait_s;
    a->fit_n += b->fit_n, a->fit_t += b->fit_t, a->fit_b += b->fit_b;
    a->fit_bb += b->fit_bb, a->fit_bt += b->fit_bt;
    a->cache_hits += b->cache_hits, a->cache_bytes += b->cache_bytes;
}

void dh__fetch_since(dh__fetch_stats *a, const dh__fetch_stats *b, const dh__fetch_stats *since)
{
    *a = (dh__fetch_stats){
        b->bytes - since->bytes, b->requests - since->requests, b->retries - since->retries,
        b->failures - since->failures, b->wait_s - since->wait_s, b->fit_n - since->fit_n,
        b->fit_t - since->fit_t, b->fit_b - since->fit_b, b->fit_bb - since->fit_bb,
        b->fit_bt - since->fit_bt, b->cache_hits - since->cache_hits,
        b->cache_bytes - since->cache_bytes};
}

dh__fetch_stats dh__remote_stats(const dh__remote *r)
{
    return r ? r->st : (dh__fetch_stats){0};
}

/* --------------------------------------------------------- one request */

typedef struct {
    CURL *h;
    uint8_t *buf;          /* the body of a 2xx answer goes here, at most cap bytes */
    size_t cap, len;
    int grow;              /* buf is malloc'ed and grows (up to cap): an answer of any size */
    int over;              /* more came than was asked for */
    long status;
    int64_t cr_start, cr_end, cr_total; /* Content-Range; -1 when absent */
    int64_t clen;
    char etag[128];
    double retry_after;    /* seconds; 0 when absent */
    char body[BODY_ERR_MAX]; /* the start of an error answer */
    size_t blen;
} answer;

static size_t on_header(char *line, size_t size, size_t n, void *user)
{
    answer *a = user;
    size_t len = size * n;
    char h[1024];
    snprintf(h, sizeof h, "%.*s", (int)(len < sizeof h ? len : sizeof h - 1), line);
    h[strcspn(h, "\r\n")] = 0;
    if (!strncmp(h, "HTTP/", 5)) { /* a new answer (after a redirect or a 100): start again */
        a->cr_start = a->cr_end = a->cr_total = a->clen = -1;
        a->etag[0] = 0;
        a->retry_after = 0;
        return len;
    }
    char *colon = strchr(h, ':');
    if (!colon)
        return len;
    *colon = 0;
    const char *v = colon + 1 + strspn(colon + 1, " \t");
    long long x, y, t;
    if (!strcasecmp(h, "Content-Range")) {
        if (sscanf(v, "bytes %lld-%lld/%lld", &x, &y, &t) == 3)
            a->cr_start = x, a->cr_end = y, a->cr_total = t;
        else if (sscanf(v, "bytes */%lld", &t) == 1)
            a->cr_total = t;
    } else if (!strcasecmp(h, "Content-Length") && sscanf(v, "%lld", &x) == 1) {
        a->clen = x;
    } else if (!strcasecmp(h, "ETag")) {
        snprintf(a->etag, sizeof a->etag, "%s", v);
    } else if (!strcasecmp(h, "Retry-After")) {
        char *end = NULL;
        double s = strtod(v, &end);
        a->retry_after = end != v && s > 0 && s < 3600 ? s : 0; /* an HTTP date: ignored */
    }
    return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *user)
{
    answer *a = user;
    size_t len = size * n;
    if (!a->status)
        curl_easy_getinfo(a->h, CURLINFO_RESPONSE_CODE, &a->status);
    if (a->status < 200 || a->status > 299) { /* an error's text: its start kept */
        size_t keep = DH_MIN(len, sizeof a->body - 1 - a->blen);
        memcpy(a->body + a->blen, data, keep);
        a->blen += keep;
        a->body[a->blen] = 0;
        return len;
    }
    if (a->len + len > a->cap) { /* a store that ignores Range: stop here */
        a->over = 1;
        return 0;
    }
    if (a->grow) {
        uint8_t *b = realloc(a->buf, a->len + len);
        if (!b)
            return 0;
        a->buf = b;
    }
    memcpy(a->buf + a->len, data, len);
    a->len += len;
    return len;
}

/* The S3 error code in an error answer's XML ("NoSuchKey"), or "". */
static void s3_code(const answer *a, char *out, size_t len)
{
    const char *c = strstr(a->body, "<Code>"), *e = c ? strstr(c, "</Code>") : NULL;
    if (c && e && e - c - 6 < 64)
        snprintf(out, len, " %.*s", (int)(e - c - 6), c + 6);
    else
        out[0] = 0;
}

/* UNREACHABLE: no connection (refused, no such host): retried within a sample's limit (a
 * store restarting), but a few attempts only without one (index: a wrong port or host
 * must not cost a minute per shard). */
enum { OK, RETRY, FATAL, UNREACHABLE };

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/*
 * One ranged GET of [start, end) of url into a->buf (cap end - start; stat asks one byte
 * and keeps it), or of the whole answer when start < 0 (a listing). Returns OK, RETRY
 * (worth another attempt) or FATAL, with the sentence and its code in *rc and why.
 */
static int get_once(dh__remote *r, const char *url, const char *etag, int64_t start,
                    int64_t end, double timeout, answer *a, int *rc, char *why, size_t wlen)
{
    CURL *h = r->h;
    struct curl_slist *hdr = r->headers, *extra = NULL;
    char line[200];
    if (etag && etag[0]) {
        snprintf(line, sizeof line, "If-Match: %s", etag);
        extra = curl_slist_append(NULL, line);
        if (!extra) {
            *rc = dh__fail(why, wlen, DH_ENOMEM, "out of memory");
            return FATAL;
        }
        extra->next = r->headers; /* borrowed: unlinked again below */
        hdr = extra;
    }
    char range[64];
    snprintf(range, sizeof range, "%lld-%lld", (long long)start, (long long)end - 1);
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_RANGE, start >= 0 ? range : NULL);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    long ms = (long)(timeout * 1000) > 1 ? (long)(timeout * 1000) : 1;
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, ms < 5000 ? ms : 5000L);
    if (r->conf.ca_bundle[0])
        curl_easy_setopt(h, CURLOPT_CAINFO, r->conf.ca_bundle);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, a);
    char detail[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
    if (r->abort) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, r);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
    if (r->conf.key[0] && !strncasecmp(url, "http", 4) && r->conf.secret[0]) {
        char sig[128];
        snprintf(sig, sizeof sig, "aws:amz:%s:s3", r->conf.region);
        curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sig);
        curl_easy_setopt(h, CURLOPT_USERNAME, r->conf.key);
        curl_easy_setopt(h, CURLOPT_PASSWORD, r->conf.secret);
    }
    a->h = h;
    a->len = 0;
    a->over = 0;
    a->status = 0;
    a->blen = 0;
    a->body[0] = 0;
    a->cr_start = a->cr_end = a->cr_total = a->clen = -1;
    a->etag[0] = 0;
    a->retry_after = 0;
    r->st.requests++;
    CURLcode c = curl_easy_perform(h);
    if (extra) {
        extra->next = NULL;
        curl_slist_free_all(extra);
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a->status);
    r->st.bytes += (int64_t)a->len;
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    if (c != CURLE_OK && !(c == CURLE_WRITE_ERROR && a->over)) {
        int ca = c == CURLE_PEER_FAILED_VERIFICATION;
        *rc = dh__fail(why, wlen, c == CURLE_OPERATION_TIMEDOUT ? DH_ETIMEDOUT : DH_EREMOTE,
                       "%s%s%s%s%s%s", curl_easy_strerror(c), detail[0] ? ": " : "", detail,
                       !ca ? "" : r->conf.ca_bundle[0] ? " (AWS_CA_BUNDLE names "
                       : " (a store with a private CA: set AWS_CA_BUNDLE to its PEM file)",
                       ca && r->conf.ca_bundle[0] ? r->conf.ca_bundle : "",
                       ca && r->conf.ca_bundle[0] ? ": does it hold this store's CA?)" : "");
        switch (c) {
        case CURLE_COULDNT_RESOLVE_PROXY: case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_CONNECT:
            return UNREACHABLE;
        case CURLE_OPERATION_TIMEDOUT: case CURLE_SEND_ERROR: case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING: case CURLE_PARTIAL_FILE: case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
            return RETRY;
        default: /* TLS, a malformed URL, ...: another attempt would fail alike */
            return FATAL;
        }
    }
    char code[80];
    s3_code(a, code, sizeof code);
    long s = a->status;
    if (s == 206 || s == 200)
        return OK;
    if (s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504) {
        *rc = dh__fail(why, wlen, DH_EREMOTE, "HTTP %ld%s", s, code);
        return RETRY; /* UNREACHABLE and RETRY are retried alike otherwise */
    }
    if (s == 412 || s == 416) {
        *rc = dh__fail(why, wlen, DH_ECORRUPT, "HTTP %ld%s: the object changed since it was "
                       "indexed (%s): index it again", s, code,
                       s == 412 ? "its ETag is no longer the one pinned" : "it is shorter");
        return FATAL;
    }
    const char *hint = s == 403 && !r->conf.key[0]
                           ? " (access denied: the request was not signed, as AWS_ACCESS_KEY_ID "
                             "and AWS_SECRET_ACCESS_KEY are not set; profiles, ~/.aws files and "
                             "instance roles are not read)"
                       : s == 403 ? " (access denied: check the credentials and the region)"
                       : s != 404 ? ""
                       : strstr(code, "Bucket") ? " (no such bucket)"
                                                : " (no such object)";
    *rc = dh__fail(why, wlen, s == 404 ? DH_ENOENT : s == 403 || s == 401 ? DH_EACCES
                                                                          : DH_EREMOTE,
                   "HTTP %ld%s%s", s, code, hint);
    return FATAL;
}

/*
 * Since when (CLOCK_MONOTONIC seconds) the stores have refused connections (killed, or
 * moved); 0 while they answer. Shared by every connection of the process: once no
 * connection could be made for longer than a request's time limit (5 s at most), a refused
 * connection is not retried, so a run whose store died names it in its samples within
 * seconds (and stops after 32 in a row) instead of after each sample's whole limit; any
 * answer from a store clears it.
 */
static _Atomic double refused_since;

static uint64_t rng_next(dh__remote *r)
{
    r->rng ^= r->rng << 13;
    r->rng ^= r->rng >> 7;
    r->rng ^= r->rng << 17;
    return r->rng;
}

/* Sleeps s seconds, in slices of 50 ms at most while r's abort flag stays clear. */
static void sleep_s(const dh__remote *r, double s)
{
    for (double end = now_s() + s, left = s; left > 0 && !aborted(r); left = end - now_s()) {
        double d = left < 0.05 ? left : 0.05;
        struct timespec t = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        while (nanosleep(&t, &t) != 0 && errno == EINTR) {
        }
    }
}

/*
 * GET [start, end) of path (start < 0: all of it, at url_given) with retries until the
 * deadline (0: the retry budget). On success a holds the answer; else the error, its
 * sentence in err naming the object.
 */
static int get(dh__remote *r, const char *path, const char *url_given, const char *etag,
               int64_t start, int64_t end, double deadline, answer *a, char *err, size_t errlen)
{
    char url[8192], shown[1024], why[400] = "", bytes[64] = "";
    dh__store_display(path, shown, sizeof shown);
    int rc = url_given ? (snprintf(url, sizeof url, "%s", url_given) >= (int)sizeof url
                          ? dh__fail(why, sizeof why, DH_EINVAL, "a URL over 8 KiB") : 0)
                       : dh__store_url(&r->conf, path, url, sizeof url, why, sizeof why);
    if (rc)
        return dh__fail(err, errlen, rc, "%s: %s", shown, why);
    if (start >= 0)
        snprintf(bytes, sizeof bytes, " bytes %lld-%lld", (long long)start, (long long)end - 1);
    double t0 = now_s();
    int caller_deadline = deadline > 0;
    if (deadline <= 0)
        deadline = t0 + r->conf.retry_budget_s;
    for (int attempt = 0;; attempt++) {
        double left = deadline - now_s();
        if (left <= 0) {
            rc = DH_ETIMEDOUT;
            break;
        }
        double t1 = now_s();
        int what = get_once(r, url, etag, start, end,
                            DH_MIN(left, r->conf.request_timeout_s), a, &rc, why, sizeof why);
        if (a->status > 0 && atomic_load(&refused_since) != 0.0)
            atomic_store(&refused_since, 0.0); /* an answer: a store is there */
        if (what == OK) {
            double t = now_s() - t1, mb = (double)a->len / 1e6; /* the cost model's input */
            r->st.fit_n += 1, r->st.fit_t += t, r->st.fit_b += mb;
            r->st.fit_bb += mb * mb, r->st.fit_bt += mb * t;
            r->st.wait_s += now_s() - t0;
            return 0;
        }
        if (aborted(r)) { /* the run is stopping: not the object's fault, not counted */
            r->st.wait_s += now_s() - t0;
            return dh__fail(err, errlen, DH_ECANCELED, "GET %s: stopped", shown);
        }
        if (what == FATAL)
            break;
        if (what == UNREACHABLE) {
            double zero = 0.0, since = atomic_load(&refused_since), t = now_s();
            if (since == 0.0)
                atomic_compare_exchange_strong(&refused_since, &zero, t);
            else if (t - since > DH_MIN(5.0, r->conf.request_timeout_s)) {
                snprintf(why + strlen(why), sizeof why - strlen(why), "; not retried: no "
                         "connection to a store for %.1f s (is it down?)", t - since);
                break;
            }
        }
        if (r->probe && a->status >= 400) { /* a 503 or 429 answer: the store is there */
            r->answered = 1;
            break;
        }
        if (what == UNREACHABLE && !caller_deadline && attempt >= 2) {
            snprintf(why + strlen(why), sizeof why - strlen(why), "; gave up after %d attempts "
                     "(is the address right?)", attempt + 1);
            break;
        }
        /* backoff: 100 ms doubling to 8 s, half of it random; Retry-After when longer */
        double d = 0.1 * (double)(1u << (attempt < 7 ? attempt : 7));
        d = d / 2 + d / 2 * (double)(rng_next(r) >> 11) / 9007199254740992.0;
        if (a->retry_after > d)
            d = a->retry_after;
        if (now_s() + d >= deadline) {
            snprintf(why + strlen(why), sizeof why - strlen(why), "; gave up after %d "
                     "attempt%s: the next would pass %s", attempt + 1, attempt ? "s" : "",
                     caller_deadline ? "the sample's time limit" : "the time allowed");
            rc = rc == DH_ETIMEDOUT ? rc : DH_EREMOTE;
            break;
        }
        r->st.retries++;
        sleep_s(r, d);
    }
    r->st.wait_s += now_s() - t0;
    r->st.failures++;
    char at[700] = ""; /* an s3:// object: the store asked, and what chose it */
    if (!strncasecmp(path, "s3://", 5)) {
        const char *host = strstr(url, "://");
        int n = host ? (int)(host + 3 - url) + (int)strcspn(host + 3, "/") : 0;
        snprintf(at, sizeof at, " (at %.*s%s%s)", n, url, r->conf.endpoint[0] ? ", from " : "",
                 r->conf.endpoint[0] ? r->conf.endpoint_from : "");
    }
    return dh__fail(err, errlen, rc, "GET %s%s%s: %s", shown, bytes, at,
                    why[0] ? why : "over the time limit");
}

int dh__store_reachable(const dh__store_conf *c, const char *const *paths, int n, char *err,
                        size_t errlen)
{
    dh__store_conf q = *c;
    q.retry_budget_s = DH_MIN(q.retry_budget_s, 10.0); /* a store that answers does at once */
    dh__remote *r = dh__remote_new(&q, err, errlen);
    if (!r)
        return DH_ENOMEM;
    r->probe = 1;
    char why[1200] = "";
    int rc = 0, missing = 0;
    for (int k = 0; k < n && !rc && missing == k; k++) {
        dh__object o;
        rc = dh__remote_stat(r, paths[k], 0, &o, why, sizeof why);
        missing += rc == DH_ENOENT;
        /* one object's own trouble (its samples say), or a store busy for now: it answers */
        if (rc == DH_ENOENT || rc == DH_ECORRUPT || r->answered)
            rc = 0;
    }
    dh__remote_free(r);
    if (!rc && n > 1 && missing == n) /* an HTTP server, but not the store that holds them */
        return dh__fail(err, errlen, DH_ENOENT, "none of the first %d objects is there: is the "
                        "store's address (or the bucket) the one they were indexed from? (the "
                        "last: %s)", n, why);
    if (!rc && !strncasecmp(paths[0], "s3://", 5) && !c->key[0])
        fprintf(stderr, "datahelix: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set: "
                "requests to S3 are unsigned (anonymous; a public bucket)\n");
    return rc ? dh__fail(err, errlen, rc, "the object store does not answer as it should: %s",
                         why)
              : 0;
}

int dh__remote_get_all(dh__remote *r, const char *path, const char *url, size_t max,
                       uint8_t **body, size_t *len, char *err, size_t errlen)
{
    answer a = {.cap = max, .grow = 1};
    int rc = get(r, path, url, NULL, -1, 0, 0, &a, err, errlen);
    if (!rc && a.over) {
        char shown[1024];
        dh__store_display(path, shown, sizeof shown);
        rc = dh__fail(err, errlen, DH_ELIMIT, "GET %s: an answer over %zu bytes", shown, max);
    }
    if (rc) {
        free(a.buf);
        return rc;
    }
    *body = a.buf, *len = a.len;
    return 0;
}

int dh__remote_stat(dh__remote *r, const char *path, double deadline, dh__object *out,
                    char *err, size_t errlen)
{
    uint8_t one;
    answer a = {.buf = &one, .cap = 1};
    memset(out, 0, sizeof *out);
    int rc = get(r, path, NULL, NULL, 0, 1, deadline, &a, err, errlen);
    if (rc == DH_ECORRUPT && a.status == 416 && a.cr_total == 0) /* an empty object */
        return 0;
    if (rc)
        return rc;
    out->size = a.status == 206 ? a.cr_total : a.clen;
    snprintf(out->etag, sizeof out->etag, "%s", a.etag);
    if (out->size < 0) {
        char shown[1024];
        dh__store_display(path, shown, sizeof shown);
        return dh__fail(err, errlen, DH_EREMOTE, "%s: the store gives no size (HTTP %ld "
                        "without Content-Range or Content-Length)", shown, a.status);
    }
    return 0;
}

/* ---------------------------------------------------------- block reads */

static uint64_t obj_hash(const dh__object_ref *o)
{
    uint64_t h = dh__hash_bytes(o->path, strlen(o->path), 0x5eed);
    return o->etag ? dh__hash_bytes(o->etag, strlen(o->etag), h) : h;
}

/* Fetches exactly [start, end) of o into buf, the answer checked against what was asked
 * and what was indexed. */
int dh__remote_fetch(dh__remote *r, const dh__object_ref *o, int64_t start, int64_t end,
                     uint8_t *buf, double deadline, char *err, size_t errlen)
{
    const char *etag = o->etag && o->etag[0] ? o->etag : NULL;
    uint64_t key = etag ? dh__cache_key(o->path, etag, start, end) : 0;
    if (etag && dh__cache_get(etag, key, buf, end - start)) {
        r->st.cache_hits++, r->st.cache_bytes += end - start;
        return 0;
    }
    answer a = {.buf = buf, .cap = (size_t)(end - start)};
    int rc = get(r, o->path, NULL, o->etag, start, end, deadline, &a, err, errlen);
    if (rc)
        return rc;
    char shown[1024];
    dh__store_display(o->path, shown, sizeof shown);
    int whole = a.status == 200 && start == 0 && (int64_t)a.len == o->size && end == o->size;
    if (a.status == 200 && !whole)
        return dh__fail(err, errlen, DH_EREMOTE, "GET %s: the store ignored the Range header "
                        "(HTTP 200 with the whole object): refused, objects are read by range",
                        shown);
    int changed = !whole && a.cr_total >= 0 && o->size > 0 && a.cr_total != o->size;
    if (changed ||
        (!whole && (a.cr_start != start || a.cr_end != end - 1 || (int64_t)a.len != end - start)))
        return dh__fail(err, errlen, changed ? DH_ECORRUPT : DH_EREMOTE, changed ?
                        "GET %s: the object is %lld bytes, %lld when it was indexed: it changed "
                        "since (index it again)" : "GET %s: asked bytes %lld-%lld, got %s",
                        shown, changed ? (long long)a.cr_total : (long long)start,
                        changed ? (long long)o->size : (long long)end - 1,
                        a.cr_start < 0 ? "no Content-Range" : "another range or length");
    if (o->etag && o->etag[0] && a.etag[0] && strcmp(a.etag, o->etag))
        return dh__fail(err, errlen, DH_ECORRUPT, "GET %s: the object changed since it was "
                        "indexed (ETag %s, %s pinned): index it again", shown, a.etag, o->etag);
    if (etag)
        dh__cache_put(etag, key, buf, end - start);
    return 0;
}

/* The extent to fill next: a free one, or the least recently used. */
static extent *victim(dh__remote *r)
{
    extent *e = &r->ext[0];
    for (int k = 1; k < EXTENTS && e->used; k++)
        if (!r->ext[k].used || r->ext[k].used < e->used)
            e = &r->ext[k];
    return e;
}

/* Fetches [start, end) of o into an extent. */
static extent *fetch(dh__remote *r, const dh__object_ref *o, uint64_t obj, int64_t start,
                     int64_t end, double deadline, char *err, size_t errlen, int *rc)
{
    extent *e = victim(r);
    size_t want = (size_t)(end - start);
    uint8_t *data = realloc(e->data, want ? want : 1);
    if (!data) {
        *rc = dh__fail(err, errlen, DH_ENOMEM, "out of memory for a %zu-byte block", want);
        return NULL;
    }
    e->data = data;
    e->used = 0;
    *rc = dh__remote_fetch(r, o, start, end, data, deadline, err, errlen);
    if (*rc)
        return NULL;
    e->obj = obj;
    e->off = start;
    e->len = end - start;
    e->used = ++r->tick;
    r->last_obj = obj;
    r->last_end = end;
    return e;
}

/* A range the fetchers brought, copied into an extent, or NULL. */
static extent *taken(dh__remote *r, const dh__object_ref *o, uint64_t obj, int64_t at,
                     double deadline)
{
    if (!r->take)
        return NULL;
    extent *e = victim(r);
    int64_t off = 0, len = 0;
    double t0 = now_s();
    e->used = 0; /* its bytes are replaced, whatever comes */
    int got = r->take(r->take_ctx, o, at, deadline, &e->data, &off, &len);
    r->st.wait_s += now_s() - t0; /* a range in flight: waited for */
    if (!got)
        return NULL;
    *e = (extent){.obj = obj, .off = off, .len = len, .data = e->data, .used = ++r->tick};
    r->last_obj = obj;
    r->last_end = off + len;
    return e;
}

void dh__remote_set_take(dh__remote *r, dh__take_fn fn, void *ctx)
{
    r->take = fn;
    r->take_ctx = ctx;
}

ssize_t dh__remote_read(dh__remote *r, const dh__object_ref *o, void *buf, size_t n,
                        int64_t off, double deadline, char *err, size_t errlen)
{
    if (off >= o->hi || n == 0)
        return 0;
    if (off < o->lo)
        return dh__fail(err, errlen, DH_EINVAL, "read before the range");
    n = (size_t)DH_MIN((int64_t)n, o->hi - off);
    uint64_t obj = obj_hash(o);
    size_t got = 0;
    while (got < n) {
        int64_t at = off + (int64_t)got;
        extent *e = NULL;
        for (int k = 0; k < EXTENTS && !e; k++)
            if (r->ext[k].used && r->ext[k].obj == obj && r->ext[k].off <= at &&
                at < r->ext[k].off + r->ext[k].len)
                e = &r->ext[k];
        if (!e) {
            int64_t b = r->conf.block_bytes;
            int64_t start = DH_MAX(o->lo, at / b * b);
            int forward = r->last_obj == obj && r->last_end == start;
            int64_t end = DH_MIN(o->hi, (start / b + 1 + (forward ? r->conf.readahead : 0)) * b);
            int rc = 0;
            e = taken(r, o, obj, at, deadline);
            if (!e)
                e = fetch(r, o, obj, start, end, deadline, err, errlen, &rc);
            if (!e)
                return got ? (ssize_t)got : rc;
        }
        e->used = ++r->tick;
        size_t take = (size_t)DH_MIN((int64_t)(n - got), e->off + e->len - at);
        memcpy((uint8_t *)buf + got, e->data + (at - e->off), take);
        got += take;
    }
    return (ssize_t)got;
}
