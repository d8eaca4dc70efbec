/*
 * probe.c - one file -> one media descriptor, by content, not by extension.
 *
 * The first bytes decide the reader: JPEG and PNG signatures go to the image
 * header readers, anything else to libavformat. A file libavformat cannot
 * open, or that has no video or audio stream, is "not a media file"; every
 * failure carries the path and the reason. Files are opened as media
 * sources (source.h): regular files only, so a FIFO or a device is refused
 * before any read instead of blocking or streaming forever.
 */
#include "../codec/codec.h"
#include "../codec/source.h"
#include "probe.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX_BYTES (64 * 1024) /* of a JPEG: its frame header is rarely further */

void dh_probe_result_clear(dh_probe_result *r)
{
    if (!r)
        return;
    free((void *)r->info.path);
    free((void *)r->info.keyframes);
    memset(r, 0, sizeof *r);
}

/* Reads up to cap bytes from the start of the source; -errno on error. */
static ssize_t read_prefix(dh__source *src, unsigned char *buf, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        ssize_t n = dh__source_read_at(src, buf + got, cap - got, (int64_t)got);
        if (n < 0)
            return n;
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

static int probe_jpeg_file(const char *path, dh__source *src, unsigned char *buf, size_t got,
                           const dh_limits *lim, dh_probe_result *r, char *err, size_t errlen)
{
    int64_t size = src->size;
    int rc = dh__probe_jpeg(path, buf, got, size, lim, r, err, errlen);
    if (rc != DH_ECORRUPT || (int64_t)got >= size)
        return rc;
    /* The frame header may sit behind large metadata segments: read it all. */
    unsigned char *all = malloc((size_t)size);
    if (!all)
        return DH_ENOMEM;
    ssize_t n = read_prefix(src, all, (size_t)size);
    rc = n < 0 ? (int)n : dh__probe_jpeg(path, all, (size_t)n, size, lim, r, err, errlen);
    free(all);
    return rc;
}

/* The first bytes say which prober reads the headers; each reads only what it needs (a
 * shard's member is indexed from a few KB of its bytes, not from its start's 256 KB). */
static int probe_source(const char *path, dh__source *src, const dh_limits *lim,
                        dh_probe_result *r, char *err, size_t errlen)
{
    unsigned char magic[8];
    ssize_t got = read_prefix(src, magic, sizeof magic);
    if (got < 0) {
        if (!dh__source_fault(src, err, errlen))
            dh__msg(err, errlen, "read failed: %s", dh_strerror((int)got));
        return (int)got;
    }
    int jpeg = got >= 3 && magic[0] == 0xFF && magic[1] == 0xD8 && magic[2] == 0xFF;
    int png = got >= 8 && !memcmp(magic, "\x89PNG\r\n\x1a\n", 8);
    if (!jpeg && !png)
        return dh__probe_av(src, lim, r, err, errlen);
    size_t cap = jpeg ? PREFIX_BYTES : 4096; /* a JPEG's frame header, a PNG's IHDR */
    unsigned char *buf = malloc(cap);
    if (!buf)
        return DH_ENOMEM;
    got = read_prefix(src, buf, cap);
    int rc;
    if (got < 0) {
        rc = (int)got;
        dh__msg(err, errlen, "read failed: %s", dh_strerror(rc));
    } else if (jpeg) {
        rc = probe_jpeg_file(path, src, buf, (size_t)got, lim, r, err, errlen);
    } else {
        rc = dh__probe_png(buf, (size_t)got, src->size, lim, r, err, errlen);
    }
    free(buf);
    return rc;
}

int dh__probe_src(const dh__media_src *msrc, const dh_limits *limits, dh_probe_result *out,
                  char *err, size_t errlen)
{
    dh_limits deflim;
    if (!msrc || !out)
        return DH_EINVAL;
    memset(out, 0, sizeof *out);
    if (!limits) {
        dh_limits_default(&deflim);
        limits = &deflim;
    }
    dh__source src;
    int rc = dh__source_open(&src, msrc, err, errlen); /* regular files only, never blocks */
    if (rc)
        return rc;
    if (src.size == 0) {
        rc = DH_ENOTMEDIA;
        dh__msg(err, errlen, "empty file");
    } else if (src.size > limits->max_bytes) {
        rc = DH_ELIMIT;
        dh__msg(err, errlen, "file is %lld bytes, over the limit %lld", (long long)src.size,
                (long long)limits->max_bytes);
    } else {
        rc = probe_source(msrc->path, &src, limits, out, err, errlen);
    }
    if (rc && dh__source_fault(&src, NULL, 0)) /* the store failed: what it said */
        rc = dh__source_fault(&src, err, errlen);
    int64_t bytes = src.size, read = src.read_bytes;
    if (src.remote)
        snprintf(out->etag, sizeof out->etag, "%s", src.etag);
    dh__source_close(&src);
    if (rc == 0) {
        out->info.bytes = bytes;
        out->bytes_read = read;
        out->info.path = strdup(msrc->path ? msrc->path : "");
        if (!out->info.path)
            rc = DH_ENOMEM;
    }
    if (rc)
        dh_probe_result_clear(out);
    return rc;
}

int dh_probe_file(const char *path, const dh_limits *limits, dh_probe_result *out, char *err,
                  size_t errlen)
{
    return path ? dh__probe_src(DH__SRC(path), limits, out, err, errlen) : DH_EINVAL;
}

json_t *dh__media_json(const dh_probe_result *r, const char *path)
{
    const dh_media_info *mi = &r->info;
    json_t *m = json_object();
    json_object_set_new(m, "type", json_string(dh_media_type_name(mi->type)));
    json_object_set_new(m, "path", json_string(path));
    json_object_set_new(m, "codec", json_string(r->codec_name));
    if (mi->type != DH_MEDIA_AUDIO) {
        json_object_set_new(m, "width", json_integer(mi->width));
        json_object_set_new(m, "height", json_integer(mi->height));
    }
    if (mi->type == DH_MEDIA_VIDEO) {
        json_object_set_new(m, "fps", json_real(mi->fps));
        json_object_set_new(m, "frames", json_integer(mi->frames));
        json_t *kf = json_array();
        for (int32_t k = 0; k < mi->keyframe_count; k++)
            json_array_append_new(kf, json_integer(mi->keyframes[k]));
        json_object_set_new(m, "keyframes", kf);
    }
    if (mi->type != DH_MEDIA_IMAGE)
        json_object_set_new(m, "duration", json_real(mi->duration_s));
    if (mi->type == DH_MEDIA_AUDIO) {
        json_object_set_new(m, "sample_rate", json_integer(mi->sample_rate));
        json_object_set_new(m, "channels", json_integer(mi->channels));
    }
    json_object_set_new(m, "bytes", json_integer(mi->bytes));
    if (r->etag[0])
        json_object_set_new(m, "etag", json_string(r->etag));
    return m;
}
