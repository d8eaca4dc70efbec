/*
 * test_store.c - object storage reads (src/store): URLs, the environment, and ranged
 * reads against a small HTTP server this test runs on 127.0.0.1 in a thread. The server
 * holds one object and a script of faults, and records every request it answers, so the
 * tests assert which ranges were asked, how often, and with which headers.
 */
#include "testutil.h"

#include "store/store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ------------------------------------------------------ the test's server */

#define OBJ_BYTES (1 << 20)
#define MAX_REQS 256
static uint8_t OBJ[OBJ_BYTES];

static struct {
    int fd, port;
    pthread_t tid;
    pthread_mutex_t mu;
    uint8_t *obj;        /* OBJ: never freed, a connection's thread may still be sending */
    char etag[64];
    /* faults: the next n_fail requests get fail_status (with Retry-After 0 when set) */
    int n_fail, fail_status, retry_after, ignore_range, always_fail;
    /* what was asked */
    int nreq;
    int64_t lo[MAX_REQS], hi[MAX_REQS];
    char if_match[MAX_REQS][64];
    int has_sha[MAX_REQS];
    char auth[MAX_REQS][300];
    char line[MAX_REQS][300]; /* the request line's target */
    /* listings (a request with list-type=2): page k answers "continuation-token=tk..." */
    const char *const *pages;
    int npages;
} S;

static void answer(int c, int status, const char *extra, const uint8_t *body, size_t len)
{
    char h[512];
    int n = snprintf(h, sizeof h, "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nETag: %s\r\n%s\r\n",
                     status, len, S.etag, extra);
    if (send(c, h, (size_t)n, MSG_NOSIGNAL) != n)
        return;
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(c, body + off, len - off, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        off += (size_t)w;
    }
}

/* One connection's requests (keep-alive) until the client closes it. */
static void *serve_conn(void *arg)
{
    int c = (int)(intptr_t)arg;
    char buf[8192];
    size_t have = 0;
    for (;;) {
        char *end = NULL;
        while (!(end = memmem(buf, have, "\r\n\r\n", 4))) {
            ssize_t r = read(c, buf + have, sizeof buf - 1 - have);
            if (r <= 0) {
                close(c);
                return NULL;
            }
            have += (size_t)r;
        }
        *end = 0;
        long long a = -1, b = -1;
        const char *rg = strcasestr(buf, "\r\nRange: bytes=");
        if (rg)
            sscanf(rg + 15, "%lld-%lld", &a, &b);
        const char *im = strcasestr(buf, "\r\nIf-Match: ");
        const char *au = strcasestr(buf, "\r\nAuthorization: ");
        pthread_mutex_lock(&S.mu);
        int k = S.nreq < MAX_REQS ? S.nreq++ : MAX_REQS - 1;
        S.lo[k] = a, S.hi[k] = b + 1;
        snprintf(S.if_match[k], sizeof S.if_match[k], "%.*s", im ? (int)strcspn(im + 12, "\r") : 0,
                 im ? im + 12 : "");
        snprintf(S.auth[k], sizeof S.auth[k], "%.*s", au ? (int)strcspn(au + 17, "\r") : 0,
                 au ? au + 17 : "");
        S.has_sha[k] = strcasestr(buf, "\r\nx-amz-content-sha256: ") != NULL;
        const char *target = strchr(buf, ' ');
        snprintf(S.line[k], sizeof S.line[k], "%.*s", target ? (int)strcspn(target + 1, " ") : 0,
                 target ? target + 1 : "");
        const char *tok = strstr(S.line[k], "continuation-token=t");
        int page = !strstr(S.line[k], "list-type=2") ? -1 : tok ? atoi(tok + 20) : 0;
        const char *listing = page >= 0 && page < S.npages ? S.pages[page] : NULL;
        int fail = S.always_fail ? S.fail_status : S.n_fail > 0 ? (S.n_fail--, S.fail_status) : 0;
        int ignore = S.ignore_range;
        int changed = im && strncmp(im + 12, S.etag, strlen(S.etag));
        pthread_mutex_unlock(&S.mu);
        size_t used = (size_t)(end + 4 - buf);
        memmove(buf, buf + used, have - used);
        have -= used;
        char extra[200] = "";
        if (fail) {
            answer(c, fail, S.retry_after ? "Retry-After: 0\r\n" : "",
                   (const uint8_t *)"<Error><Code>SlowDown</Code></Error>", 36);
        } else if (page >= 0 && !listing) {
            answer(c, 404, "", (const uint8_t *)"<Error><Code>NoSuchBucket</Code></Error>", 41);
        } else if (listing) {
            answer(c, 200, "", (const uint8_t *)listing, strlen(listing));
        } else if (changed) {
            answer(c, 412, "", (const uint8_t *)"<Error><Code>PreconditionFailed</Code></Error>", 46);
        } else if (ignore || a < 0) {
            answer(c, 200, "", S.obj, OBJ_BYTES);
        } else if (a >= OBJ_BYTES) {
            answer(c, 416, "Content-Range: bytes */1048576\r\n", NULL, 0);
        } else {
            b = b >= OBJ_BYTES ? OBJ_BYTES - 1 : b;
            snprintf(extra, sizeof extra, "Content-Range: bytes %lld-%lld/%d\r\n", a, b,
                     OBJ_BYTES);
            answer(c, 206, extra, S.obj + a, (size_t)(b - a + 1));
        }
    }
}

static void *accept_loop(void *arg)
{
    (void)arg;
    for (;;) {
        int c = accept(S.fd, NULL, NULL);
        if (c < 0)
            return NULL;
        pthread_t t;
        if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)c) == 0)
            pthread_detach(t);
        else
            close(c);
    }
}

static void server_start(void)
{
    memset(&S, 0, sizeof S);
    pthread_mutex_init(&S.mu, NULL);
    S.obj = OBJ; /* each test runs in its own process (Check forks) */
    for (int k = 0; k < OBJ_BYTES; k++)
        S.obj[k] = (uint8_t)(k * 7 + (k >> 9));
    strcpy(S.etag, "\"v1\"");
    S.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(S.fd, (struct sockaddr *)&sa, sizeof sa), 0);
    socklen_t sl = sizeof sa;
    getsockname(S.fd, (struct sockaddr *)&sa, &sl);
    S.port = ntohs(sa.sin_port);
    ck_assert_int_eq(listen(S.fd, 16), 0);
    ck_assert_int_eq(pthread_create(&S.tid, NULL, accept_loop, NULL), 0);
}

static void server_stop(void)
{
    shutdown(S.fd, SHUT_RDWR);
    close(S.fd);
    pthread_join(S.tid, NULL);
}

static dh__store_conf conf_of(int64_t block, int readahead)
{
    dh__store_conf c;
    char err[200];
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    ck_assert_int_eq(dh__store_conf_env(&c, err, sizeof err), 0);
    c.block_bytes = block;
    c.readahead = readahead;
    c.retry_budget_s = 5;
    return c;
}

static void url_of(char *url, size_t len)
{
    snprintf(url, len, "http://127.0.0.1:%d/bucket/obj.tar", S.port);
}

/* The server started and a connection to it (url: the object's URL); finish frees both. */
static dh__remote *started(int64_t block, int readahead, char *url, size_t len)
{
    server_start();
    dh__store_conf c = conf_of(block, readahead);
    char err[300];
    url_of(url, len);
    dh__remote *r = dh__remote_new(&c, err, sizeof err);
    ck_assert_msg(r != NULL, "%s", err);
    return r;
}

static void finish(dh__remote *r)
{
    dh__remote_free(r);
    server_stop();
}

/* ------------------------------------------------------------------ tests */

/* Changes the fake store's behaviour under its lock: a connection thread of an earlier
 * request may still be reading it (TSan saw the race). */
#define SERVER(...)                                                                                \
    do {                                                                                           \
        pthread_mutex_lock(&S.mu);                                                                 \
        __VA_ARGS__;                                                                               \
        pthread_mutex_unlock(&S.mu);                                                               \
    } while (0)

START_TEST(urls_map_s3_to_its_endpoint_and_escape_keys)
{
    dh__store_conf c;
    char url[1024], err[200];
    memset(&c, 0, sizeof c);
    strcpy(c.region, "eu-west-1");
    ck_assert_int_eq(dh__store_url(&c, "s3://my-bkt/a/b c+d/\xc3\xa9.tar", url, sizeof url, err,
                                   sizeof err), 0);
    ck_assert_str_eq(url, "https://my-bkt.s3.eu-west-1.amazonaws.com/a/b%20c%2Bd/%C3%A9.tar");
    c.path_style = 1;
    ck_assert_int_eq(dh__store_url(&c, "s3://my-bkt/k", url, sizeof url, err, sizeof err), 0);
    ck_assert_str_eq(url, "https://s3.eu-west-1.amazonaws.com/my-bkt/k");
    strcpy(c.endpoint, "http://127.0.0.1:9000");
    ck_assert_int_eq(dh__store_url(&c, "s3://my-bkt/k", url, sizeof url, err, sizeof err), 0);
    ck_assert_str_eq(url, "http://127.0.0.1:9000/my-bkt/k");
    c.path_style = 0;
    ck_assert_int_eq(dh__store_url(&c, "s3://my-bkt/k", url, sizeof url, err, sizeof err), 0);
    ck_assert_str_eq(url, "http://my-bkt.127.0.0.1:9000/k");
    ck_assert_int_eq(dh__store_url(&c, "s3://Bad_Bucket/k", url, sizeof url, err, sizeof err),
                     DH_EINVAL);
    ck_assert_msg(strstr(err, "is not a bucket name"), "%s", err);
    ck_assert_int_eq(dh__store_url(&c, "s3://bkt", url, sizeof url, err, sizeof err), DH_EINVAL);
    ck_assert_int_eq(dh__store_url(&c, "s3://bkt/", url, sizeof url, err, sizeof err), DH_EINVAL);
    ck_assert_int_eq(dh__store_url(&c, "https://h/x?y=1", url, sizeof url, err, sizeof err), 0);
    ck_assert_str_eq(url, "https://h/x?y=1"); /* a URL is the user's, as given */
    char shown[200];
    dh__store_display("https://user:pw@h:8/a/b.tar?X-Amz-Signature=abc#f", shown, sizeof shown);
    ck_assert_str_eq(shown, "https://h:8/a/b.tar");
    dh__store_display("s3://b/k.tar", shown, sizeof shown);
    ck_assert_str_eq(shown, "s3://b/k.tar");
    ck_assert_int_eq(dh__is_remote("S3://b/k"), 1);
    ck_assert_int_eq(dh__is_remote("shards/http://x"), 0);
}
END_TEST

START_TEST(the_environment_is_read_and_its_mistakes_named)
{
    dh__store_conf c;
    char err[300];
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
    setenv("AWS_DEFAULT_REGION", "ap-south-2", 1);
    unsetenv("AWS_REGION");
    unsetenv("DH_S3_ADDRESSING");
    setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SECRET", 1);
    ck_assert_int_eq(dh__store_conf_env(&c, err, sizeof err), 0);
    ck_assert_str_eq(c.endpoint, "http://127.0.0.1:9000");
    ck_assert_str_eq(c.region, "ap-south-2");
    ck_assert_int_eq(c.path_style, 1); /* an endpoint: path-style unless told */
    ck_assert_int_eq(c.block_bytes, 256 * 1024);
    setenv("AWS_ENDPOINT_URL_S3", "https://s3.example.com", 1);
    setenv("DH_S3_ADDRESSING", "virtual", 1);
    ck_assert_int_eq(dh__store_conf_env(&c, err, sizeof err), 0);
    ck_assert_str_eq(c.endpoint, "https://s3.example.com");
    ck_assert_int_eq(c.path_style, 0);
    setenv("DH_S3_ADDRESSING", "sideways", 1);
    ck_assert_int_eq(dh__store_conf_env(&c, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "DH_S3_ADDRESSING=\"sideways\""), "%s", err);
    unsetenv("DH_S3_ADDRESSING");
    setenv("DH_FETCH_BLOCK_KIB", "1", 1);
    ck_assert_int_eq(dh__store_conf_env(&c, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "DH_FETCH_BLOCK_KIB"), "%s", err);
    unsetenv("DH_FETCH_BLOCK_KIB");
    unsetenv("AWS_ACCESS_KEY_ID");
    ck_assert_int_eq(dh__store_conf_env(&c, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not"), "%s",
                  err);
    ck_assert_msg(!strstr(err, "SECRET\""), "a secret in a message: %s", err);
    setenv("AWS_ENDPOINT_URL_S3", "ftp://x", 1);
    setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
    ck_assert_int_eq(dh__store_conf_env(&c, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "expected http:// or https://"), "%s", err);
    unsetenv("AWS_ENDPOINT_URL_S3");
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
}
END_TEST

/* Reads [lo, hi) of the object in chunk-byte steps through r; the bytes must be the object's. */
static void read_range(dh__remote *r, const char *url, const char *etag, int64_t lo, int64_t hi,
                       size_t chunk)
{
    dh__object_ref o = {url, etag, OBJ_BYTES, lo, hi};
    uint8_t *buf = malloc(chunk);
    char err[400] = "";
    for (int64_t at = lo; at < hi;) {
        ssize_t n = dh__remote_read(r, &o, buf, chunk, at, 0, err, sizeof err);
        ck_assert_msg(n > 0, "read at %lld: %zd %s", (long long)at, n, err);
        ck_assert_int_eq(memcmp(buf, S.obj + at, (size_t)n), 0);
        at += n;
    }
    ck_assert_int_eq(dh__remote_read(r, &o, buf, chunk, hi, 0, err, sizeof err), 0);
    free(buf);
}

START_TEST(a_range_is_fetched_in_blocks_with_read_ahead_never_outside_it)
{
    char url[200], err[300];
    dh__remote *r = started(64 * 1024, 1, url, sizeof url);
    ck_assert_ptr_nonnull(r);
    read_range(r, url, S.etag, 1000, 200000, 8192);
    /* the first block from the range's start, then two blocks (read-ahead) while reads run
     * forward, then the rest: never a byte before 1000 or from 200000 on */
    ck_assert_int_eq(S.nreq, 3);
    ck_assert_int_eq(S.lo[0], 1000);
    ck_assert_int_eq(S.hi[0], 65536);
    ck_assert_int_eq(S.lo[1], 65536);
    ck_assert_int_eq(S.hi[1], 196608);
    ck_assert_int_eq(S.lo[2], 196608);
    ck_assert_int_eq(S.hi[2], 200000);
    for (int k = 0; k < S.nreq; k++) {
        ck_assert_str_eq(S.if_match[k], "\"v1\""); /* pinned: asked for that version */
        ck_assert_int_eq(S.has_sha[k], 1);
        ck_assert_str_eq(S.auth[k], ""); /* no credentials: anonymous */
    }
    /* back inside fetched extents: no request */
    read_range(r, url, S.etag, 150000, 200000, 4096);
    ck_assert_int_eq(S.nreq, 3);
    dh__fetch_stats st = dh__remote_stats(r);
    ck_assert_int_eq(st.requests, 3);
    ck_assert_int_eq(st.bytes, 200000 - 1000);
    ck_assert_int_eq(st.retries, 0);
    dh__object ob;
    ck_assert_int_eq(dh__remote_stat(r, url, 0, &ob, err, sizeof err), 0);
    ck_assert_int_eq(ob.size, OBJ_BYTES);
    ck_assert_str_eq(ob.etag, "\"v1\"");
    finish(r);
}
END_TEST

START_TEST(transient_failures_are_retried_and_counted)
{
    char url[200];
    dh__remote *r = started(64 * 1024, 0, url, sizeof url);
    static const int codes[] = {503, 500, 429, 408, 502, 504};
    for (int k = 0; k < 6; k++) {
        SERVER(S.n_fail = 2, S.fail_status = codes[k], S.retry_after = 1);
        read_range(r, url, NULL, (int64_t)k * 70000, (int64_t)k * 70000 + 1000, 1000);
    }
    dh__fetch_stats st = dh__remote_stats(r);
    ck_assert_int_eq(st.retries, 12);
    ck_assert_int_eq(st.requests, 18);
    ck_assert_int_eq(st.failures, 0);
    finish(r);
}
END_TEST

START_TEST(a_refusal_fails_at_once_with_the_status_and_the_object)
{
    server_start();
    dh__store_conf c = conf_of(64 * 1024, 0);
    char url[200], err[400];
    url_of(url, sizeof url);
    strcat(url, "?X-Amz-Signature=TOPSECRET");
    dh__remote *r = dh__remote_new(&c, err, sizeof err);
    uint8_t buf[100];
    dh__object_ref o = {url, NULL, OBJ_BYTES, 0, OBJ_BYTES};
    static const struct {
        int status, code;
        const char *says;
    } cases[] = {{404, DH_ENOENT, "HTTP 404 SlowDown (no such object)"},
                 {403, DH_EACCES, "HTTP 403 SlowDown (access denied"},
                 {400, DH_EREMOTE, "HTTP 400 SlowDown"}};
    for (int k = 0; k < 3; k++) {
        SERVER(S.nreq = 0);
        SERVER(S.n_fail = 5, S.fail_status = cases[k].status, S.retry_after = 0);
        ck_assert_int_eq(dh__remote_read(r, &o, buf, sizeof buf, 0, 0, err, sizeof err),
                         cases[k].code);
        ck_assert_int_eq(S.nreq, 1); /* not retried */
        ck_assert_msg(strstr(err, cases[k].says), "%s", err);
        ck_assert_msg(strstr(err, "GET http://127.0.0.1:") && strstr(err, "/bucket/obj.tar bytes 0-65535"),
                      "%s", err);
        ck_assert_msg(!strstr(err, "TOPSECRET"), "a query string in a message: %s", err);
    }
    finish(r);
}
END_TEST

START_TEST(a_store_that_ignores_range_costs_one_block_then_is_refused)
{
    char url[200], err[400];
    dh__remote *r = started(64 * 1024, 0, url, sizeof url);
    SERVER(S.ignore_range = 1);
    uint8_t buf[100];
    dh__object_ref o = {url, NULL, OBJ_BYTES, 4096, OBJ_BYTES};
    ck_assert_int_eq(dh__remote_read(r, &o, buf, sizeof buf, 4096, 0, err, sizeof err),
                     DH_EREMOTE);
    ck_assert_msg(strstr(err, "the store ignored the Range header"), "%s", err);
    ck_assert_int_le(dh__remote_stats(r).bytes, 64 * 1024); /* not the megabyte */
    finish(r);
}
END_TEST

START_TEST(an_object_changed_since_indexing_is_named)
{
    char url[200], err[400];
    dh__remote *r = started(64 * 1024, 0, url, sizeof url);
    uint8_t buf[100];
    dh__object_ref o = {url, "\"v0\"", OBJ_BYTES, 0, OBJ_BYTES};
    ck_assert_int_eq(dh__remote_read(r, &o, buf, sizeof buf, 0, 0, err, sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "HTTP 412 PreconditionFailed: the object changed since it was indexed"),
                  "%s", err);
    /* another size than indexed: named too */
    dh__object_ref o2 = {url, NULL, OBJ_BYTES + 10, 0, OBJ_BYTES + 10};
    ck_assert_int_eq(dh__remote_read(r, &o2, buf, sizeof buf, 0, 0, err, sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "the object is 1048576 bytes, 1048586 when it was indexed"), "%s",
                  err);
    finish(r);
}
END_TEST

START_TEST(a_store_that_keeps_failing_gives_up_within_the_deadline)
{
    char url[200], err[400];
    dh__remote *r = started(64 * 1024, 0, url, sizeof url);
    SERVER(S.always_fail = 1, S.fail_status = 503);
    uint8_t buf[100];
    dh__object_ref o = {url, NULL, OBJ_BYTES, 0, OBJ_BYTES};
    double deadline = now_s() + 1.0;
    int rc = (int)dh__remote_read(r, &o, buf, sizeof buf, 0, deadline, err, sizeof err);
    ck_assert_int_eq(rc, DH_EREMOTE);
    ck_assert_msg(strstr(err, "HTTP 503 SlowDown; gave up after") &&
                  strstr(err, "the next would pass the sample's time limit"), "%s", err);
    ck_assert_int_ge(S.nreq, 2);
    ck_assert_int_eq(dh__remote_stats(r).failures, 1);
    /* a store that is not there: connection refused, retried, named */
    SERVER(S.always_fail = 0);
    snprintf(url, sizeof url, "http://127.0.0.1:1/x.tar");
    dh__object_ref o3 = {url, NULL, OBJ_BYTES, 0, OBJ_BYTES};
    rc = (int)dh__remote_read(r, &o3, buf, sizeof buf, 0, now_s() + 0.5, err, sizeof err);
    ck_assert_msg(rc == DH_EREMOTE || rc == DH_ETIMEDOUT, "%d %s", rc, err);
    ck_assert_msg(strstr(err, "GET http://127.0.0.1:1/x.tar bytes 0-65535: "), "%s", err);
    finish(r);
}
END_TEST

static int stop_flag;

static void *stop_later(void *arg)
{
    (void)arg;
    usleep(300000);
    __atomic_store_n(&stop_flag, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* A run stopping (Ctrl-C, a failure elsewhere) ends a read that retries a failing store
 * at once: DH_ECANCELED, not the store's failure, not counted; without the flag the read
 * would retry until its deadline, 60 s away. */
START_TEST(stopping_ends_a_retrying_read_at_once_and_counts_no_failure)
{
    char url[200], err[400];
    dh__remote *r = started(64 * 1024, 0, url, sizeof url);
    SERVER(S.always_fail = 1, S.fail_status = 503);
    stop_flag = 0;
    dh__remote_set_abort(r, &stop_flag);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, stop_later, NULL), 0);
    uint8_t buf[100];
    dh__object_ref o = {url, NULL, OBJ_BYTES, 0, OBJ_BYTES};
    int rc = (int)dh__remote_read(r, &o, buf, sizeof buf, 0, now_s() + 60, err, sizeof err);
    pthread_join(th, NULL);
    ck_assert_msg(rc == DH_ECANCELED && strstr(err, "stopped"), "%d %s", rc, err);
    ck_assert_int_eq(dh__remote_stats(r).failures, 0);
    ck_assert_int_ge(dh__remote_stats(r).retries, 1);
    SERVER(S.always_fail = 0);
    finish(r);
}
END_TEST

/* A store that refuses connections for longer than a request's time limit is not retried
 * until each sample's deadline: a run whose store died names it in seconds, not minutes. */
START_TEST(a_store_refusing_connections_for_long_is_not_retried_to_the_deadline)
{
    dh__store_conf c = conf_of(64 * 1024, 0);
    c.request_timeout_s = 0.3;
    char err[400];
    dh__remote *r = dh__remote_new(&c, err, sizeof err);
    ck_assert_ptr_nonnull(r);
    uint8_t buf[100];
    const char *url = "http://127.0.0.1:1/x.tar"; /* nothing listens there */
    dh__object_ref o = {url, NULL, OBJ_BYTES, 0, OBJ_BYTES};
    int rc = (int)dh__remote_read(r, &o, buf, sizeof buf, 0, now_s() + 60, err, sizeof err);
    ck_assert_msg(rc == DH_EREMOTE && strstr(err, "not retried: no connection to a store for") &&
                  strstr(err, "(is it down?)"), "%d %s", rc, err);
    /* the next read gives up at its first refusal */
    rc = (int)dh__remote_read(r, &o, buf, sizeof buf, 0, now_s() + 60, err, sizeof err);
    ck_assert_int_eq(rc, DH_EREMOTE);
    ck_assert_int_eq(dh__remote_stats(r).failures, 2);
    dh__remote_free(r);
}
END_TEST

START_TEST(signed_requests_carry_sigv4_and_never_the_secret)
{
    server_start();
    dh__store_conf c = conf_of(64 * 1024, 0);
    strcpy(c.key, "AKIDEXAMPLE");
    strcpy(c.secret, "wJalrXUtnFEMI");
    strcpy(c.region, "eu-central-1");
    char url[200], err[400];
    url_of(url, sizeof url);
    dh__remote *r = dh__remote_new(&c, err, sizeof err);
    read_range(r, url, NULL, 0, 100, 100);
    ck_assert_msg(!strncmp(S.auth[0], "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/", 40) &&
                  strstr(S.auth[0], "/eu-central-1/s3/aws4_request") &&
                  strstr(S.auth[0], "x-amz-content-sha256") && strstr(S.auth[0], "Signature="),
                  "%s", S.auth[0]);
    ck_assert_msg(!strstr(S.auth[0], "wJalrXUtnFEMI"), "%s", S.auth[0]);
    finish(r);
}
END_TEST

/* An S3 prefix is listed page after page (the continuation token escaped as the signature
 * wants it), "folders" left out, keys in the store's order; a bucket that is not there, an
 * answer that is not a listing and a malformed page size are named. */
START_TEST(an_s3_prefix_is_listed_page_after_page)
{
    static const char *const pages[] = {
        "<?xml version=\"1.0\"?><ListBucketResult><Name>bkt</Name><Prefix>p/</Prefix>"
        "<Contents><Key>p/a.tar</Key><Size>10</Size></Contents>"
        "<Contents><Key>p/dir/</Key><Size>0</Size></Contents>"
        "<Contents><Key>p/b &amp; c.tar</Key><Size>10</Size></Contents>"
        "<IsTruncated>true</IsTruncated><NextContinuationToken>t1 +/=</NextContinuationToken>"
        "</ListBucketResult>",
        "<ListBucketResult><Contents><Key>p/sub/d\xc3\xa9.tar</Key></Contents>"
        "<IsTruncated>false</IsTruncated></ListBucketResult>",
        "<ListBucketResult><Contents><Key>p/x.tar</Key></Content></ListBucketResult>",
    };
    server_start();
    SERVER(S.pages = pages, S.npages = 2);
    char ep[64], err[600];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", S.port);
    setenv("AWS_ENDPOINT_URL", ep, 1);
    setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI", 1);
    char **urls = NULL;
    size_t n = 0;
    ck_assert_int_eq(dh_store_list("s3://bkt/p/", &urls, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(urls[0], "s3://bkt/p/a.tar");
    ck_assert_str_eq(urls[1], "s3://bkt/p/b & c.tar");
    ck_assert_str_eq(urls[2], "s3://bkt/p/sub/d\xc3\xa9.tar");
    dh_store_list_free(urls, n);
    ck_assert_int_eq(S.nreq, 2);
    ck_assert_str_eq(S.line[0], "/bkt/?list-type=2&prefix=p%2F");
    ck_assert_str_eq(S.line[1], "/bkt/?continuation-token=t1%20%2B%2F%3D&list-type=2&prefix=p%2F");
    ck_assert_msg(strstr(S.auth[1], "Signature="), "%s", S.auth[1]);
    /* a whole bucket */
    ck_assert_int_eq(dh_store_list("s3://bkt", &urls, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 3);
    dh_store_list_free(urls, n);
    ck_assert_str_eq(S.line[2], "/bkt/?list-type=2&prefix=");
    /* not a listing */
    SERVER(S.pages = pages + 2, S.npages = 1);
    ck_assert_int_eq(dh_store_list("s3://bkt/p/", &urls, &n, err, sizeof err), DH_EREMOTE);
    ck_assert_msg(strstr(err, "listing s3://bkt/p/: the store's answer is not a listing"), "%s",
                  err);
    ck_assert_ptr_null(urls);
    /* no such bucket */
    SERVER(S.npages = 0);
    ck_assert_int_eq(dh_store_list("s3://nobkt/", &urls, &n, err, sizeof err), DH_ENOENT);
    ck_assert_msg(strstr(err, "GET s3://nobkt/ (at http://127.0.0.1:") &&
                  strstr(err, "HTTP 404 NoSuchBucket (no such bucket)"), "%s", err);
    ck_assert_int_eq(dh_store_list("s3://Bad_Bucket/", &urls, &n, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "is not a bucket name"), "%s", err);
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    server_stop();
}
END_TEST

/* The fetchers' work: 8 ranges of 100 KiB, range k for step k, in order; or, with
 * J.steps set, J.n jobs, job k the range J.range[k] for step J.steps[k]. */
static struct {
    pthread_mutex_t mu;
    int next, n;
    char url[200];
    const int *range, *steps;
    int slow_us; /* each job given this late (the engine's own lock may be busy) */
} J = {PTHREAD_MUTEX_INITIALIZER, 0, 8, "", NULL, NULL, 0};

static int next_job(void *user, dh__fetch_job *job)
{
    (void)user;
    if (J.slow_us)
        usleep((useconds_t)J.slow_us);
    pthread_mutex_lock(&J.mu);
    int k = J.next < J.n ? J.next++ : -1;
    pthread_mutex_unlock(&J.mu);
    if (k < 0)
        return 0;
    snprintf(job->path, sizeof job->path, "%s", J.url);
    job->etag[0] = 0;
    job->size = OBJ_BYTES;
    job->lo = (int64_t)(J.steps ? J.range[k] : k) * 102400;
    job->hi = job->lo + 102400;
    job->step = J.steps ? J.steps[k] : k;
    return 1;
}

static int requests(void)
{
    pthread_mutex_lock(&S.mu);
    int n = S.nreq;
    pthread_mutex_unlock(&S.mu);
    return n;
}

/* Waits (at most 30 s: a condition, not a timing) until the server answered n requests. */
static void await_requests(int n)
{
    for (int k = 0; k < 3000 && requests() < n; k++)
        usleep(10000);
    ck_assert_int_ge(requests(), n);
}

START_TEST(fetchers_bring_the_next_ranges_in_order_within_their_budget)
{
    server_start();
    url_of(J.url, sizeof J.url);
    J.next = 0;
    /* Jobs given slowly: both fetchers passed the budget check while the other asked for
     * work, and a fourth range overran the budget (ASan saw 4 requests once). */
    J.slow_us = 50000;
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    dh__prefetch *p = NULL;
    char err[300];
    /* 250 KiB: two ranges held are under it, the third fills it */
    ck_assert_int_eq(dh__prefetch_new(2, 250 * 1024, next_job, NULL, &p, err, sizeof err), 0);
    await_requests(3);
    usleep(200000); /* room for a wrong fourth request to show */
    ck_assert_int_eq(requests(), 3);
    for (int k = 0; k < 3; k++) /* the first three ranges, whichever fetcher asked first */
        ck_assert_msg(S.lo[k] % 102400 == 0 && S.lo[k] / 102400 < 3 && S.hi[k] == S.lo[k] + 102400,
                      "request %d: %lld-%lld", k, (long long)S.lo[k], (long long)S.hi[k]);
    /* a worker reading range 0 takes it: no request of its own */
    dh__store_conf c = conf_of(64 * 1024, 0);
    dh__remote *w = dh__remote_new(&c, err, sizeof err);
    dh__remote_use_prefetch(w, p);
    read_range(w, J.url, NULL, 0, 102400, 8192);
    ck_assert_int_eq(dh__remote_stats(w).requests, 0);
    usleep(200000); /* a range taken holds its budget until its step retires */
    ck_assert_int_eq(requests(), 3);
    dh__prefetch_retire(p, 1);
    await_requests(4); /* its budget freed: the fourth range, and no more */
    /* ranges of steps before 6 nobody took are dropped; a worker then fetches itself */
    dh__prefetch_retire(p, 6);
    read_range(w, J.url, NULL, 102400, 204800, 102400);
    ck_assert_int_ge(dh__remote_stats(w).requests, 1);
    dh__prefetch_stats st;
    dh__remote_free(w);
    dh__prefetch_free(p, &st);
    ck_assert_int_eq(st.taken_ready + st.taken_waited, 1);
    ck_assert_int_ge(st.dropped, 2);
    ck_assert_int_ge(st.missed, 1);
    ck_assert_int_ge(st.fetched.requests, 4);
    server_stop();
}
END_TEST

/* The same sample in two planned steps (two epochs in the window) is fetched for each: a
 * worker takes the earlier step's copy, and a split sample's other part, on another worker,
 * reads that copy again; the later step's copy waits for its own step. A range nobody took
 * before the end is counted dropped: every range fetched is taken or dropped. */
START_TEST(a_range_goes_to_its_earliest_step_and_serves_every_part_until_retired)
{
    static const int range[] = {0, 0, 1}, steps[] = {1, 5, 7};
    server_start();
    url_of(J.url, sizeof J.url);
    J.next = 0, J.n = 3, J.range = range, J.steps = steps;
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    dh__prefetch *p = NULL;
    char err[300];
    ck_assert_int_eq(dh__prefetch_new(1, 1 << 20, next_job, NULL, &p, err, sizeof err), 0);
    await_requests(3);
    dh__store_conf c = conf_of(64 * 1024, 0);
    dh__remote *w[3];
    for (int k = 0; k < 3; k++) {
        w[k] = dh__remote_new(&c, err, sizeof err);
        ck_assert_ptr_nonnull(w[k]);
        dh__remote_use_prefetch(w[k], p);
    }
    read_range(w[0], J.url, NULL, 0, 102400, 8192); /* step 1's sample, part 1 */
    read_range(w[1], J.url, NULL, 0, 102400, 8192); /* part 2, on another worker */
    dh__prefetch_retire(p, 2);                       /* step 1 is over */
    read_range(w[2], J.url, NULL, 0, 102400, 8192); /* step 5's sample */
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(dh__remote_stats(w[k]).requests, 0);
        dh__remote_free(w[k]);
    }
    usleep(200000); /* step 7's range, asked already, lands (a local 100 KiB answer) */
    dh__prefetch_stats st;
    dh__prefetch_free(p, &st);
    ck_assert_int_eq(st.taken_ready + st.taken_waited, 2); /* a range counted once */
    ck_assert_int_eq(st.dropped, 1);                        /* step 7's, never taken */
    ck_assert_int_eq(st.missed, 0);
    ck_assert_int_eq(st.fetched.requests, 3);
    J.n = 8, J.range = NULL, J.steps = NULL;
    server_stop();
}
END_TEST

START_TEST(a_failed_fetch_ahead_leaves_the_worker_to_fetch_and_name_it)
{
    server_start();
    url_of(J.url, sizeof J.url);
    J.next = 0;
    SERVER(S.always_fail = 1, S.fail_status = 404);
    dh__prefetch *p = NULL;
    char err[300];
    ck_assert_int_eq(dh__prefetch_new(1, 1 << 20, next_job, NULL, &p, err, sizeof err), 0);
    await_requests(1);
    dh__store_conf c = conf_of(64 * 1024, 0);
    dh__remote *w = dh__remote_new(&c, err, sizeof err);
    dh__remote_use_prefetch(w, p);
    uint8_t buf[100];
    dh__object_ref o = {J.url, NULL, OBJ_BYTES, 0, 102400};
    ck_assert_int_eq(dh__remote_read(w, &o, buf, sizeof buf, 0, now_s() + 10, err, sizeof err),
                     DH_ENOENT);
    ck_assert_msg(strstr(err, "HTTP 404"), "%s", err);
    dh__remote_free(w);
    dh__prefetch_free(p, NULL);
    server_stop();
}
END_TEST

START_TEST(the_fetch_model_is_fitted_from_answered_requests)
{
    dh__fetch_stats s = {0};
    double lat, bw;
    ck_assert_int_eq(dh__fetch_fit(&s, &lat, &bw), 0); /* nothing yet */
    /* requests of 0.1 to 2 MB taking 30 ms + MB / 100 MB/s exactly */
    for (int k = 0; k < 20; k++) {
        double mb = 0.1 + 0.1 * k, t = 0.03 + mb / 100;
        dh__fetch_stats one = {.fit_n = 1, .fit_t = t, .fit_b = mb, .fit_bb = mb * mb,
                               .fit_bt = mb * t};
        dh__fetch_add(&s, &one); /* sums add: workers', fetchers', nodes' */
    }
    ck_assert_int_eq(dh__fetch_fit(&s, &lat, &bw), 1);
    ck_assert_double_eq_tol(lat, 0.03, 1e-9);
    ck_assert_double_eq_tol(bw, 100e6, 1e-3);
    /* sizes all alike: the latency is their mean time, the bandwidth unknown */
    dh__fetch_stats same = {.fit_n = 10, .fit_t = 0.5, .fit_b = 1, .fit_bb = 0.1, .fit_bt = 0.05};
    ck_assert_int_eq(dh__fetch_fit(&same, &lat, &bw), 1);
    ck_assert_double_eq_tol(lat, 0.05, 1e-12);
    ck_assert(bw == 0);
    /* the counters of a real exchange feed it */
    char url[200];
    dh__remote *r = started(64 * 1024, 0, url, sizeof url);
    for (int k = 0; k < 9; k++)
        read_range(r, url, NULL, (int64_t)k * 70000, (int64_t)k * 70000 + 1000 * (k + 1), 100000);
    dh__fetch_stats got = dh__remote_stats(r);
    ck_assert(got.fit_n == 9);
    ck_assert_double_eq_tol(got.fit_b, 45000 / 1e6, 1e-12);
    ck_assert_int_eq(dh__fetch_fit(&got, &lat, &bw), 1);
    ck_assert(lat > 0);
    finish(r);
}
END_TEST

/* Files in dir and their total size. */
static int64_t dir_bytes(const char *dir, int *files)
{
    char *out = tu_capture("du -cb %s/*.dhr 2>/dev/null | tail -1 | cut -f1; ls %s | grep -c dhr",
                           dir, dir);
    long long b = 0;
    *files = 0;
    if (out)
        sscanf(out, "%lld %d", &b, files);
    free(out);
    return b;
}

START_TEST(the_local_cache_saves_fetches_within_its_budget)
{
    server_start();
    char *dir = tu_mkdtemp();
    char cdir[600];
    snprintf(cdir, sizeof cdir, "%s/cache", dir);
    setenv("DH_FETCH_CACHE", cdir, 1);
    setenv("DH_FETCH_CACHE_MIB", "1", 1);
    dh__store_conf c = conf_of(300 * 1000, 0);
    char url[200], err[300];
    url_of(url, sizeof url);
    dh__remote *a = dh__remote_new(&c, err, sizeof err), *b = dh__remote_new(&c, err, sizeof err);
    for (int k = 0; k < 3; k++) /* 3 ranges of 300 kB, pinned: fetched and kept */
        read_range(a, url, S.etag, k * 300000, (k + 1) * 300000, 300000);
    ck_assert_int_eq(S.nreq, 3);
    for (int k = 0; k < 3; k++) /* another worker: from the cache, the same bytes */
        read_range(b, url, S.etag, k * 300000, (k + 1) * 300000, 300000);
    ck_assert_int_eq(S.nreq, 3);
    ck_assert_int_eq(dh__remote_stats(b).cache_hits, 3);
    ck_assert_int_eq(dh__remote_stats(b).requests, 0);
    int files;
    ck_assert_int_eq(dir_bytes(cdir, &files), 900000);
    /* a fourth range fills the 1 MiB budget exactly; a fifth is over it: the least recently
     * used range (the first) goes, and is fetched again when asked */
    read_range(a, url, S.etag, 900000, OBJ_BYTES, 300000);
    ck_assert_int_eq(dir_bytes(cdir, &files), 1 << 20);
    ck_assert_int_eq(files, 4);
    dh__remote *fresh = dh__remote_new(&c, err, sizeof err); /* no extents of its own */
    read_range(fresh, url, S.etag, 0, 200000, 200000);
    ck_assert_int_le(dir_bytes(cdir, &files), 1 << 20);
    ck_assert_int_eq(files, 4);
    dh__remote_free(fresh);
    fresh = dh__remote_new(&c, err, sizeof err);
    int before = S.nreq;
    read_range(fresh, url, S.etag, 300000, 600000, 300000); /* still there */
    ck_assert_int_eq(S.nreq, before);
    read_range(fresh, url, S.etag, 0, 300000, 300000); /* evicted */
    ck_assert_int_eq(S.nreq, before + 1);
    dh__remote_free(fresh);
    /* not pinned (no ETag): never kept, as nothing would say it changed */
    dh__remote *d = dh__remote_new(&c, err, sizeof err);
    read_range(d, url, NULL, 0, 1000, 1000);
    read_range(b, url, NULL, 0, 1000, 1000);
    ck_assert_int_eq(dh__remote_stats(b).cache_hits, 3);
    dh__remote_free(a);
    dh__remote_free(b);
    dh__remote_free(d);
    unsetenv("DH_FETCH_CACHE");
    unsetenv("DH_FETCH_CACHE_MIB");
    tu_rmdir(&dir);
    server_stop();
}
END_TEST

START_TEST(a_cache_that_cannot_be_written_is_a_warning_not_a_failure)
{
    server_start();
    char *dir = tu_mkdtemp();
    char cdir[600];
    snprintf(cdir, sizeof cdir, "%s/file", dir);
    free(tu_write(dir, "file", "not a directory", -1)); /* the cache's path is a file */
    setenv("DH_FETCH_CACHE", cdir, 1);
    dh__store_conf c = conf_of(64 * 1024, 0);
    char url[200], err[300];
    url_of(url, sizeof url);
    dh__remote *a = dh__remote_new(&c, err, sizeof err);
    read_range(a, url, S.etag, 0, 100000, 100000); /* read all the same */
    ck_assert_int_eq(dh__remote_stats(a).cache_hits, 0);
    dh__remote_free(a);
    unsetenv("DH_FETCH_CACHE");
    tu_rmdir(&dir);
    server_stop();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("store");
    TCase *tc = tcase_create("store");
    tcase_set_timeout(tc, 60);
    ADD_TEST(tc, urls_map_s3_to_its_endpoint_and_escape_keys);
    ADD_TEST(tc, the_environment_is_read_and_its_mistakes_named);
    ADD_TEST(tc, a_range_is_fetched_in_blocks_with_read_ahead_never_outside_it);
    ADD_TEST(tc, transient_failures_are_retried_and_counted);
    ADD_TEST(tc, a_refusal_fails_at_once_with_the_status_and_the_object);
    ADD_TEST(tc, a_store_that_ignores_range_costs_one_block_then_is_refused);
    ADD_TEST(tc, an_object_changed_since_indexing_is_named);
    ADD_TEST(tc, a_store_that_keeps_failing_gives_up_within_the_deadline);
    ADD_TEST(tc, stopping_ends_a_retrying_read_at_once_and_counts_no_failure);
    ADD_TEST(tc, a_store_refusing_connections_for_long_is_not_retried_to_the_deadline);
    ADD_TEST(tc, signed_requests_carry_sigv4_and_never_the_secret);
    ADD_TEST(tc, an_s3_prefix_is_listed_page_after_page);
    ADD_TEST(tc, fetchers_bring_the_next_ranges_in_order_within_their_budget);
    ADD_TEST(tc, a_range_goes_to_its_earliest_step_and_serves_every_part_until_retired);
    ADD_TEST(tc, a_failed_fetch_ahead_leaves_the_worker_to_fetch_and_name_it);
    ADD_TEST(tc, the_fetch_model_is_fitted_from_answered_requests);
    ADD_TEST(tc, the_local_cache_saves_fetches_within_its_budget);
    ADD_TEST(tc, a_cache_that_cannot_be_written_is_a_warning_not_a_failure);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
