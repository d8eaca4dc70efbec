/*
 * cache.c - the optional local cache of fetched ranges (DH_FETCH_CACHE=DIR, a byte budget
 * DH_FETCH_CACHE_MIB; see store.h and docs/STORAGE.md).
 *
 * DESIGN: a range is a file in DIR named by the hash of (object, ETag, start, end): an
 * object that changed has another ETag, so its old ranges are never read again (they age
 * out); an object without an ETag is never cached, as nothing would tell that it changed.
 * A file is written under a temporary name and renamed into place, so a reader (another
 * thread, another agent on the host) sees it whole or not at all, and its size is checked
 * when read. One index per process (the files DIR held at start, then what it wrote),
 * least recently used first out when over the budget. A cache that cannot be written is
 * one warning on stderr, then the run goes on without it: it saves fetches, it never fails
 * a sample.
 */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    uint64_t key;
    int64_t bytes;
    uint64_t used;
} cached;

static struct {
    pthread_mutex_t mu;
    int state;            /* 0: not set up, 1: on, -1: off (unset, or it failed) */
    char dir[1024];
    int64_t budget, held;
    cached *e;
    size_t n, cap;
    uint64_t tick;
} C = {PTHREAD_MUTEX_INITIALIZER, 0, "", 0, 0, NULL, 0, 0, 0};

static void warn_off(const char *what, int e)
{
    fprintf(stderr, "datahelix: fetch cache %s: %s %s: going on without it\n", C.dir, what,
            strerror(e));
    C.state = -1;
}

static void path_of(uint64_t key, char *out, size_t len)
{
    snprintf(out, len, "%s/%016llx.dhr", C.dir, (unsigned long long)key);
}

static cached *find(uint64_t key)
{
    for (size_t k = 0; k < C.n; k++)
        if (C.e[k].key == key)
            return &C.e[k];
    return NULL;
}

/* Drops entry k (its file too) from the index. */
static void evict(size_t k)
{
    char p[1100];
    path_of(C.e[k].key, p, sizeof p);
    unlink(p);
    C.held -= C.e[k].bytes;
    C.e[k] = C.e[--C.n];
}

static int add(uint64_t key, int64_t bytes, uint64_t used)
{
    if (C.n == C.cap) {
        size_t cap = C.cap ? 2 * C.cap : 256;
        cached *e = realloc(C.e, cap * sizeof *e);
        if (!e)
            return -1;
        C.e = e, C.cap = cap;
    }
    C.e[C.n++] = (cached){key, bytes, used};
    C.held += bytes;
    return 0;
}

/* Under C.mu: the cache from the environment, the files DIR holds indexed by age. */
static void setup(void)
{
    const char *d = getenv("DH_FETCH_CACHE"), *mib = getenv("DH_FETCH_CACHE_MIB");
    C.state = -1;
    if (!d || !*d)
        return;
    snprintf(C.dir, sizeof C.dir, "%s", d);
    char *end = NULL;
    long long m = mib && *mib ? strtoll(mib, &end, 10) : 10240;
    if (mib && *mib && (*end || m <= 0)) {
        fprintf(stderr, "datahelix: DH_FETCH_CACHE_MIB=\"%.40s\": expected a positive number "
                "of MiB; the fetch cache is off\n", mib);
        return;
    }
    C.budget = (int64_t)m << 20;
    if (mkdir(C.dir, 0700) != 0 && errno != EEXIST) {
        warn_off("cannot be made:", errno);
        return;
    }
    DIR *dir = opendir(C.dir);
    if (!dir) {
        warn_off("cannot be read:", errno);
        return;
    }
    C.state = 1;
    for (struct dirent *de; (de = readdir(dir));) {
        unsigned long long key;
        char tail[8] = "";
        struct stat st;
        char p[1400];
        if (sscanf(de->d_name, "%16llx.%4s", &key, tail) != 2 || strcmp(tail, "dhr"))
            continue;
        snprintf(p, sizeof p, "%s/%s", C.dir, de->d_name);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
            add(key, st.st_size, (uint64_t)st.st_mtime); /* older files go first */
    }
    closedir(dir);
    for (size_t k = 0; k < C.n; k++) /* ticks continue after the files' times */
        C.tick = C.e[k].used > C.tick ? C.e[k].used : C.tick;
}

static int on(void)
{
    if (!C.state)
        setup();
    return C.state > 0;
}

uint64_t dh__cache_key(const char *path, const char *etag, int64_t start, int64_t end)
{
    uint64_t h = dh__hash_bytes(path, strlen(path), 0xcac4e);
    h = dh__hash_bytes(etag, strlen(etag), h);
    int64_t r[2] = {start, end};
    return dh__hash_bytes(r, sizeof r, h);
}

int dh__cache_get(const char *etag, uint64_t key, uint8_t *buf, int64_t len)
{
    if (!etag || !etag[0])
        return 0;
    pthread_mutex_lock(&C.mu);
    cached *e = on() ? find(key) : NULL;
    if (e)
        e->used = ++C.tick;
    char p[1100];
    path_of(key, p, sizeof p);
    pthread_mutex_unlock(&C.mu);
    if (!e)
        return 0;
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    struct stat st;
    int ok = fd >= 0 && fstat(fd, &st) == 0 && st.st_size == len;
    for (int64_t got = 0; ok && got < len;) {
        ssize_t n = pread(fd, buf + got, (size_t)(len - got), got);
        ok = n > 0;
        got += n > 0 ? n : 0;
    }
    if (fd >= 0)
        close(fd);
    if (!ok) { /* gone (another agent evicted it) or not what it should be: forgotten */
        pthread_mutex_lock(&C.mu);
        if ((e = find(key)))
            evict((size_t)(e - C.e));
        pthread_mutex_unlock(&C.mu);
    }
    return ok;
}

void dh__cache_put(const char *etag, uint64_t key, const uint8_t *buf, int64_t len)
{
    if (!etag || !etag[0] || len <= 0)
        return;
    pthread_mutex_lock(&C.mu);
    if (!on() || find(key) || len > C.budget) {
        pthread_mutex_unlock(&C.mu);
        return;
    }
    while (C.n && C.held + len > C.budget) { /* the least recently used go */
        size_t lru = 0;
        for (size_t k = 1; k < C.n; k++)
            if (C.e[k].used < C.e[lru].used)
                lru = k;
        evict(lru);
    }
    char p[1100], tmp[1200];
    path_of(key, p, sizeof p);
    snprintf(tmp, sizeof tmp, "%s.%d.%llu.tmp", p, (int)getpid(),
             (unsigned long long)++C.tick);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int64_t put = 0;
    while (fd >= 0 && put < len) {
        ssize_t n = write(fd, buf + put, (size_t)(len - put));
        if (n <= 0)
            break;
        put += n;
    }
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && put == len)
        put = -1, e = errno;
    if (fd < 0 || put != len || rename(tmp, p) != 0) {
        e = fd < 0 || put != len ? e : errno;
        unlink(tmp);
        warn_off("cannot be written:", e ? e : EIO);
    } else if (add(key, len, ++C.tick)) {
        unlink(p);
    }
    pthread_mutex_unlock(&C.mu);
}
