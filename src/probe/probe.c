/*
 * probe.c - one file -> one media descriptor, by content, not by extension.
 *
 * The first bytes decide the reader: JPEG and PNG signatures go to the image
 * header readers, anything else to libavformat. A file libavformat cannot
 * open, or that has no video or audio stream, is "not a media file"; every
 * failure carries the path and the reason.
 */
#include "../codec/codec.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX_BYTES (256 * 1024)

void dh_probe_result_clear(dh_probe_result *r)
{
    if (!r)
        return;
    free((void *)r->info.path);
    free((void *)r->info.keyframes);
    memset(r, 0, sizeof *r);
}

/* Reads up to cap bytes from the start of fd. */
static ssize_t read_prefix(int fd, unsigned char *buf, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        ssize_t n = pread(fd, buf + got, cap - got, (off_t)got);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

static int probe_jpeg_file(const char *path, int fd, unsigned char *buf, size_t got,
                           int64_t size, const dh_limits *lim, dh_probe_result *r, char *err,
                           size_t errlen)
{
    int rc = dh__probe_jpeg(path, buf, got, size, lim, r, err, errlen);
    if (rc != DH_ECORRUPT || (int64_t)got >= size)
        return rc;
    /* The frame header may sit behind large metadata segments: read it all. */
    if (size > lim->max_bytes) {
        dh__msg(err, errlen, "file is %lld bytes, over the limit %lld", (long long)size,
                (long long)lim->max_bytes);
        return DH_ELIMIT;
    }
    unsigned char *all = malloc((size_t)size);
    if (!all)
        return DH_ENOMEM;
    ssize_t n = read_prefix(fd, all, (size_t)size);
    rc = n < 0 ? -errno : dh__probe_jpeg(path, all, (size_t)n, size, lim, r, err, errlen);
    free(all);
    return rc;
}

static int probe_fd(const char *path, int fd, int64_t size, const dh_limits *lim,
                    dh_probe_result *r, char *err, size_t errlen)
{
    unsigned char *buf = malloc(PREFIX_BYTES);
    if (!buf)
        return DH_ENOMEM;
    ssize_t got = read_prefix(fd, buf, PREFIX_BYTES);
    int rc;
    if (got < 0) {
        rc = -errno;
        dh__msg(err, errlen, "read failed: %s", dh_strerror(rc));
    } else if (got >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) {
        rc = probe_jpeg_file(path, fd, buf, (size_t)got, size, lim, r, err, errlen);
    } else if (got >= 8 && !memcmp(buf, "\x89PNG\r\n\x1a\n", 8)) {
        rc = dh__probe_png(buf, (size_t)got, size, lim, r, err, errlen);
    } else {
        rc = dh__probe_av(path, lim, r, err, errlen);
    }
    free(buf);
    return rc;
}

int dh_probe_file(const char *path, const dh_limits *limits, dh_probe_result *out, char *err,
                  size_t errlen)
{
    dh_limits deflim;
    if (!path || !out)
        return DH_EINVAL;
    memset(out, 0, sizeof *out);
    if (!limits) {
        dh_limits_default(&deflim);
        limits = &deflim;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        dh__msg(err, errlen, "cannot open: %s", dh_strerror(rc));
        return rc;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        dh__msg(err, errlen, "cannot stat: %s", dh_strerror(rc));
    } else if (!S_ISREG(st.st_mode)) {
        rc = DH_ENOTMEDIA;
        dh__msg(err, errlen, "not a regular file");
    } else if (st.st_size == 0) {
        rc = DH_ENOTMEDIA;
        dh__msg(err, errlen, "empty file");
    } else if (st.st_size > limits->max_bytes) {
        rc = DH_ELIMIT;
        dh__msg(err, errlen, "file is %lld bytes, over the limit %lld", (long long)st.st_size,
                (long long)limits->max_bytes);
    } else {
        rc = probe_fd(path, fd, st.st_size, limits, out, err, errlen);
    }
    close(fd);
    if (rc == 0) {
        out->info.bytes = st.st_size;
        out->info.path = strdup(path);
        if (!out->info.path)
            rc = DH_ENOMEM;
    }
    if (rc)
        dh_probe_result_clear(out);
    return rc;
}
