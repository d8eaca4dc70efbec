/*
 * source.c - media sources: confined, regular-file-only opening, whole-file
 * reads, and FFmpeg reading through a custom AVIO context with a deadline
 * (see source.h).
 *
 * DESIGN: containment is the kernel's job, not string checks: openat2 with
 * RESOLVE_BENEATH resolves the path beneath the manifest's directory,
 * following symlinks only while they stay inside it. Where openat2 is not
 * available (kernels before 5.6, or a seccomp filter that refuses it) the
 * path is walked one component at a time with O_NOFOLLOW, which refuses every
 * symlink: stricter, never looser. Opening uses O_NONBLOCK so a FIFO cannot
 * block in open(); the type check comes before any read.
 */
#include "source.h"

#include "../core/tarhdr.h"
#include "../store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define AVIO_BUF (64 * 1024)
#define OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)

double dh__source_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The path walked one component at a time beneath dirfd, refusing symlinks and "..". */
static int open_walk(int dirfd, const char *path)
{
    char buf[4096];
    if (strlen(path) >= sizeof buf) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(buf, path);
    int cur = dirfd, owned = 0;
    char *save = NULL;
    char *comp = strtok_r(buf, "/", &save);
    while (comp) {
        char *next = strtok_r(NULL, "/", &save);
        if (!strcmp(comp, "..")) {
            errno = EXDEV;
            break;
        }
        int fd = openat(cur, comp, next ? O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
                                        : OPEN_FLAGS | O_NOFOLLOW);
        if (owned)
            close(cur);
        if (fd < 0)
            return -1;
        if (!next)
            return fd;
        cur = fd;
        owned = 1;
        comp = next;
    }
    if (owned)
        close(cur);
    if (!comp)
        errno = EISDIR; /* an empty path: the root itself */
    return -1;
}

/* path beneath root: openat2(RESOLVE_BENEATH), else the strict walk. */
static int open_beneath(const char *root, const char *path)
{
    int dirfd = open(root[0] ? root : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return -1;
    struct open_how how = {.flags = OPEN_FLAGS,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS};
    int fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    if (fd < 0 && (errno == ENOSYS || errno == EPERM))
        fd = open_walk(dirfd, path);
    int saved = errno;
    close(dirfd);
    errno = saved;
    return fd;
}

static const char *file_kind(mode_t m)
{
    return S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISSOCK(m) ? "a socket" : S_ISDIR(m) ? "a directory" : "not a regular file";
}

/* Narrows an opened source to src's byte range, which must lie inside the file. */
static int apply_range(dh__source *s, const dh__media_src *src, char *err, size_t errlen)
{
    if (!src->range_len && !src->range_off)
        return 0;
    if (src->file_bytes > 0 && s->size != src->file_bytes)
        return dh__fail(err, errlen, DH_ECORRUPT, "the file is %lld bytes, %lld when it was "
                        "indexed: it changed since (index it again)", (long long)s->size,
                        (long long)src->file_bytes);
    if (src->range_off < 0 || src->range_len <= 0 || src->range_off > s->size ||
        src->range_len > s->size - src->range_off)
        return dh__fail(err, errlen, DH_ECORRUPT, "bytes %lld..%lld are not inside the file "
                        "(%lld bytes): the archive changed since it was indexed?",
                        (long long)src->range_off, (long long)(src->range_off + src->range_len),
                        (long long)s->size);
    unsigned char h[DH__TAR_BLOCK];
    char why[200] = "its header cannot be read";
    if (src->member && (s->fd >= 0 || (s->remote && !s->etag[0])) &&
        src->range_off >= DH__TAR_BLOCK &&
        (dh__source_read_at(s, h, sizeof h, src->range_off - DH__TAR_BLOCK) != (ssize_t)sizeof h ||
         !dh__tar_header_is(h, src->member, src->range_len, why, sizeof why)))
        return dh__fail(err, errlen, DH_ECORRUPT, "member %s: %s: the shard changed since it "
                        "was indexed (index it again)", src->member, why);
    s->base = src->range_off;
    s->size = src->range_len;
    return 0;
}

struct dh__fd_cache {
    dh__remote *remote; /* the worker's connection to object stores, made on first use */
    dh__prefetch *pf;   /* the node's fetchers it takes ranges from (NULL: none) */
    const int *stop;    /* atomic: set, the connection's requests end at once (or NULL) */
    int n, cap;
    uint64_t tick;
    struct {
        const char *root;
        char *path;
        int fd;
        int64_t size;
        uint64_t used;
    } e[];
};

dh__fd_cache *dh__fd_cache_new(int capacity)
{
    capacity = capacity > 0 ? capacity : 1;
    dh__fd_cache *c = dh__calloc(1, sizeof *c + (size_t)capacity * sizeof c->e[0]);
    if (c)
        c->cap = capacity;
    return c;
}

dh__remote *dh__fd_cache_remote(dh__fd_cache *c, char *err, size_t errlen)
{
    if (c && !c->remote && (c->remote = dh__remote_new(NULL, err, errlen))) {
        dh__remote_use_prefetch(c->remote, c->pf);
        dh__remote_set_abort(c->remote, c->stop);
    }
    return c ? c->remote : NULL;
}

void dh__fd_cache_use_prefetch(dh__fd_cache *c, dh__prefetch *p, const int *stop)
{
    c->pf = p;
    c->stop = stop;
    if (c->remote) {
        dh__remote_use_prefetch(c->remote, p);
        dh__remote_set_abort(c->remote, stop);
    }
}

dh__fetch_stats dh__fd_cache_fetched(const dh__fd_cache *c)
{
    return dh__remote_stats(c ? c->remote : NULL);
}

void dh__fd_cache_free(dh__fd_cache *c)
{
    if (c)
        dh__remote_free(c->remote);
    for (int k = 0; c && k < c->n; k++) {
        close(c->e[k].fd);
        free(c->e[k].path);
    }
    free(c);
}

/* Opens path beneath root: a regular file's descriptor and size, or the refusal. */
static int open_checked(const char *root, const char *path, int *out, int64_t *size, char *err,
                        size_t errlen)
{
    int fd = root ? open_beneath(root, path) : open(path, OPEN_FLAGS);
    if (fd < 0) {
        int e = errno;
        if (e == EXDEV)
            return dh__fail(err, errlen, DH_EPATH, "resolves outside the manifest's directory "
                            "(through \"..\" or a symlink)");
        if (e == ELOOP)
            return dh__fail(err, errlen, DH_EPATH, "a symlink that cannot be followed safely");
        return dh__fail(err, errlen, -e, "cannot open: %s", strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return dh__fail(err, errlen, -e, "cannot stat: %s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dh__fail(err, errlen, DH_ENOTMEDIA, "%s, not a regular file: refused",
                        file_kind(st.st_mode));
    }
    fcntl(fd, F_SETFL, O_RDONLY); /* regular files never block; clear O_NONBLOCK all the same */
    *out = fd;
    *size = st.st_size;
    return 0;
}

/* A cached descriptor of (root, path), opened on a miss (the least recently used one
 * closed when the cache is full). */
static int open_cached(dh__fd_cache *c, const char *root, const char *path, int *fd,
                       int64_t *size, char *err, size_t errlen)
{
    int lru = 0;
    for (int k = 0; k < c->n; k++) {
        if (c->e[k].root == root && !strcmp(c->e[k].path, path)) {
            c->e[k].used = ++c->tick;
            *fd = c->e[k].fd;
            *size = c->e[k].size;
            return 0;
        }
        if (c->e[k].used < c->e[lru].used)
            lru = k;
    }
    char *copy = strdup(path);
    if (!copy)
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    int rc = open_checked(root, path, fd, size, err, errlen);
    if (rc) {
        free(copy);
        return rc;
    }
    int k = lru;
    if (c->n < c->cap) {
        k = c->n++;
    } else { /* full: the least recently used goes */
        close(c->e[k].fd);
        free(c->e[k].path);
    }
    c->e[k].root = root;
    c->e[k].path = copy;
    c->e[k].fd = *fd;
    c->e[k].size = *size;
    c->e[k].used = ++c->tick;
    return 0;
}

/* An object: the worker's connection (or one of its own), its size as indexed or asked. */
static int open_remote(dh__source *s, const dh__media_src *src, char *err, size_t errlen)
{
    s->remote = src->cache ? dh__fd_cache_remote(src->cache, err, errlen)
                           : dh__remote_new(NULL, err, errlen);
    s->owns_remote = !src->cache;
    if (!s->remote)
        return DH_EINVAL; /* the environment's configuration, named in err */
    if (!(s->object = strdup(src->path)))
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    snprintf(s->etag, sizeof s->etag, "%s", src->etag ? src->etag : "");
    if (src->object_bytes > 0) {
        s->size = src->object_bytes;
    } else {
        dh__object o;
        int rc = dh__remote_stat(s->remote, src->path, s->deadline, &o, err, errlen);
        if (rc)
            return rc;
        s->size = o.size;
        if (!s->etag[0])
            snprintf(s->etag, sizeof s->etag, "%s", o.etag);
    }
    s->object_size = s->size;
    return 0;
}

int dh__source_open(dh__source *s, const dh__media_src *src, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->limit_s = src->limit_s > 0 ? src->limit_s : 0;
    s->deadline = s->limit_s > 0 ? (src->started > 0 ? src->started : dh__source_now()) + s->limit_s
                                 : 0;
    if (dh__source_expired(s)) /* an earlier item of the sample used the time up */
        return dh__source_timeout(s, err, errlen);
    if (src->mem) {
        s->mem = src->mem;
        s->size = (int64_t)src->memlen;
        return apply_range(s, src, err, errlen);
    }
    if (!src->path || !src->path[0])
        return dh__fail(err, errlen, DH_EINVAL, "no path");
    if (dh__is_remote(src->path)) {
        int rc = open_remote(s, src, err, errlen);
        rc = rc ? rc : apply_range(s, src, err, errlen);
        if (rc)
            dh__source_close(s);
        return rc;
    }
    int fd = -1;
    int64_t size = 0;
    int shard = src->cache && (src->range_off || src->range_len);
    int rc = shard ? open_cached(src->cache, src->root, src->path, &fd, &size, err, errlen)
                   : open_checked(src->root, src->path, &fd, &size, err, errlen);
    if (rc)
        return rc;
    s->fd = fd;
    s->size = size;
    s->borrowed = shard;
    rc = apply_range(s, src, err, errlen);
    if (rc)
        dh__source_close(s);
    return rc;
}

void dh__source_close(dh__source *s)
{
    if (s->owns_remote)
        dh__remote_free(s->remote);
    s->remote = NULL;
    s->owns_remote = 0;
    free(s->object);
    s->object = NULL;
    if (s->fd >= 0 && !s->borrowed)
        close(s->fd);
    s->fd = -1;
}

int dh__source_fault(const dh__source *s, char *err, size_t errlen)
{
    if (!s->err_code)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "%s", s->err);
    return s->err_code;
}

int dh__source_expired(const dh__source *s)
{
    return s->deadline > 0 && dh__source_now() > s->deadline;
}

int dh__source_timeout(const dh__source *s, char *err, size_t errlen)
{
    return dh__fail(err, errlen, DH_ETIMEDOUT, "over its time limit of %.1f s: abandoned "
                    "(--sample-timeout)", s->limit_s);
}

ssize_t dh__source_read_at(dh__source *s, void *buf, size_t n, int64_t off)
{
    if (off < 0 || off >= s->size)
        return 0;
    if ((int64_t)n > s->size - off)
        n = (size_t)(s->size - off);
    if (s->mem) {
        memcpy(buf, s->mem + s->base + off, n);
        return (ssize_t)n;
    }
    if (s->remote) {
        dh__object_ref o = {s->object, s->etag, s->object_size, s->base, s->base + s->size};
        ssize_t got = dh__remote_read(s->remote, &o, buf, n, s->base + off, s->deadline, s->err,
                                      sizeof s->err);
        if (got < 0)
            s->err_code = (int)got;
        s->read_bytes += got > 0 ? got : 0;
        return got;
    }
    for (;;) {
        ssize_t got = pread(s->fd, buf, n, s->base + off);
        if (got < 0 && errno == EINTR)
            continue;
        s->read_bytes += got > 0 ? got : 0;
        return got < 0 ? -errno : got;
    }
}

/* Up to n bytes at s->pos, advancing it; 0 at the end, -errno on error. */
static ssize_t source_read(dh__source *s, uint8_t *buf, size_t n)
{
    ssize_t got = dh__source_read_at(s, buf, n, s->pos);
    if (got > 0)
        s->pos += got;
    return got;
}

int dh__source_read_all(dh__source *s, int64_t max, uint8_t **buf, size_t *len, char *err,
                        size_t errlen)
{
    *buf = NULL;
    *len = 0;
    if (s->size <= 0)
        return dh__fail(err, errlen, DH_ECORRUPT, "empty file");
    if (s->size > max)
        return dh__fail(err, errlen, DH_ELIMIT, "file of %lld bytes, over the limit of %lld",
                        (long long)s->size, (long long)max);
    uint8_t *b = dh__malloc((size_t)s->size);
    if (!b)
        return dh__fail(err, errlen, DH_ENOMEM, "no memory for a %lld-byte file",
                        (long long)s->size);
    size_t got = 0;
    s->pos = 0;
    while (got < (size_t)s->size) {
        ssize_t n = source_read(s, b + got, (size_t)s->size - got);
        if (n <= 0) {
            free(b);
            return n < 0 && s->err_code ? dh__source_fault(s, err, errlen)
                 : n < 0 ? dh__fail(err, errlen, (int)n, "read failed: %s", strerror((int)-n))
                         : dh__fail(err, errlen, DH_EIO, "the file shrank while read");
        }
        got += (size_t)n;
    }
    *buf = b;
    *len = got;
    return 0;
}

/* ----------------------------------------------------------- FFmpeg AVIO */

static int avio_read_cb(void *opaque, uint8_t *buf, int n)
{
    dh__source *s = opaque;
    if (dh__source_expired(s))
        return AVERROR_EXIT;
    ssize_t got = source_read(s, buf, (size_t)n);
    return got < 0 ? AVERROR((int)-got) : got == 0 ? AVERROR_EOF : (int)got;
}

static int64_t avio_seek_cb(void *opaque, int64_t off, int whence)
{
    dh__source *s = opaque;
    whence &= ~AVSEEK_FORCE;
    if (whence == AVSEEK_SIZE)
        return s->size;
    int64_t to = whence == SEEK_SET ? off : whence == SEEK_CUR ? s->pos + off
               : whence == SEEK_END ? s->size + off : -1;
    if (to < 0)
        return AVERROR(EINVAL);
    s->pos = to;
    return to;
}

static int interrupt_cb(void *opaque)
{
    return dh__source_expired(opaque);
}

int dh__source_avopen(dh__source *s, AVFormatContext **fmt)
{
    *fmt = NULL;
    s->pos = 0;
    int size = s->avio_buf > 0 ? s->avio_buf : AVIO_BUF;
    uint8_t *buf = av_malloc((size_t)size);
    AVIOContext *pb = buf ? avio_alloc_context(buf, size, 0, s, avio_read_cb, NULL, avio_seek_cb)
                          : NULL;
    AVFormatContext *f = pb ? avformat_alloc_context() : NULL;
    if (!f) {
        if (pb)
            av_freep(&pb->buffer);
        else
            av_free(buf);
        avio_context_free(&pb);
        return AVERROR(ENOMEM);
    }
    f->pb = pb;
    f->flags |= AVFMT_FLAG_CUSTOM_IO;
    f->interrupt_callback = (AVIOInterruptCB){interrupt_cb, s};
    int e = avformat_open_input(&f, "", NULL, NULL); /* frees f on failure, never pb */
    if (e < 0) {
        av_freep(&pb->buffer);
        avio_context_free(&pb);
        return e;
    }
    *fmt = f;
    return 0;
}

void dh__source_avclose(AVFormatContext **fmt)
{
    if (!*fmt)
        return;
    AVIOContext *pb = (*fmt)->pb;
    avformat_close_input(fmt);
    if (pb) {
        av_freep(&pb->buffer);
        avio_context_free(&pb);
    }
}
