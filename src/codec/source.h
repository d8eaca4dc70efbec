/*
 * source.h - where a decoder or the probe reads a media file from (internal).
 *
 * Every media read goes through a dh__source: a regular file opened beneath
 * the manifest's directory by the kernel (openat2 with RESOLVE_BENEATH, so a
 * symlink or ".." cannot lead outside it), or a buffer in memory (the fuzz
 * targets). FIFOs, devices, sockets and directories are refused before any
 * read, so no file can block a worker in open() or feed it an endless stream.
 * A source may be a byte range of its file (a member of a tar shard): every
 * read and seek stays inside it, so a demuxer sees only that member.
 * FFmpeg reads through a custom AVIO context over the descriptor, with an
 * interrupt callback that ends any read or demux past the source's deadline:
 * a sample that takes longer than its time limit fails with DH_ETIMEDOUT and
 * its own message instead of holding its worker.
 */
#ifndef DH_SOURCE_H
#define DH_SOURCE_H

#include "codec.h"
#include "../store/store.h"

#include <libavformat/avformat.h>
#include <sys/types.h>

/*
 * A worker's open shards: the descriptors of the last few files read as byte ranges (tar
 * shards), each opened beneath its root like any file, so that a worker decoding sample
 * after sample of the same shards does not open and check the shard for every item. One per
 * worker thread (not shared); the least recently used is closed when it is full.
 */
typedef struct dh__fd_cache dh__fd_cache;
dh__fd_cache *dh__fd_cache_new(int capacity);
void dh__fd_cache_free(dh__fd_cache *c);

/* What to open: a path (relative to root when root is set) or memory. */
typedef struct dh__media_src {
    const char *root;   /* the directory paths are confined to; NULL: the path as given */
    const char *path;   /* relative to root (or as given); shown in errors */
    const uint8_t *mem; /* in-memory media instead of a file (path may name it) */
    size_t memlen;
    double limit_s;     /* time allowed to read and decode it; 0: none */
    double started;     /* dh__source_now() when that time began (a sample's several items
                         * share one limit); 0: when the source is opened */
    /* A byte range of the file (a tar member's data): the media is bytes [range_off,
     * range_off + range_len) and nothing outside them is read; range_len 0: the whole file. */
    int64_t range_off, range_len;
    int64_t file_bytes;  /* > 0: the file must still be this size (a shard pinned at index) */
    int64_t object_bytes; /* an object's size as indexed (> 0: no request asks it again) */
    const char *member;  /* with a range: the tar member it is; its header, just before the
                          * range, must still name it (a shard rewritten to the same size) */
    dh__fd_cache *cache; /* a byte range's file kept open here (NULL: opened and closed); an
                          * object's connection kept here too */
    const char *etag;    /* an object's ETag pinned at index (NULL: not pinned) */
} dh__media_src;

/* CLOCK_MONOTONIC seconds, the clock of dh__media_src.started. */
double dh__source_now(void);

/* A worker's connection to the object stores, made on first use (NULL with err when the
 * environment's configuration is wrong); its fetch counters. */
struct dh__remote *dh__fd_cache_remote(dh__fd_cache *c, char *err, size_t errlen);
dh__fetch_stats dh__fd_cache_fetched(const dh__fd_cache *c);
/* The worker's connection takes what the node's fetchers brought (p may be NULL), and ends
 * its requests and retries at once (DH_ECANCELED) once *stop (atomic; may be NULL) is set. */
void dh__fd_cache_use_prefetch(dh__fd_cache *c, dh__prefetch *p, const int *stop);

/* A path as given, no root, no time limit (tests, tools). */
#define DH__SRC(p) (&(dh__media_src){.path = (p)})
/* The source of a manifest's media item mi, at path (beneath root when not NULL): its
 * byte range when mi is a shard's member. */
#define DH__ITEM_SRC(rt, p, mi)                                                                   \
    ((dh__media_src){.root = (rt), .path = (p), .range_off = (mi)->offset > 0 ? (mi)->offset : 0, \
                     .range_len = (mi)->offset > 0 ? (mi)->bytes : 0,                           \
                     .file_bytes = (mi)->offset > 0 ? (mi)->file_bytes : 0,             \
                     .member = (mi)->offset > 0 ? (mi)->member : NULL, .etag = (mi)->etag, \
                     .object_bytes = (mi)->offset > 0 ? (mi)->file_bytes : (mi)->bytes})

typedef struct dh__source {
    int fd;             /* -1 for memory */
    const uint8_t *mem;
    int64_t base;       /* where the media starts in the file (a range's offset) */
    int64_t size, pos;  /* of the media (the range), and the read position in it */
    double deadline;    /* CLOCK_MONOTONIC seconds; 0: none */
    double limit_s;
    int64_t read_bytes; /* bytes read through it so far */
    int avio_buf;       /* FFmpeg's read size through it (0: 64 KiB, for decoding); probing
                         * reads headers only, in smaller steps */
    int borrowed;       /* fd belongs to a dh__fd_cache: not closed with the source */
    /* An object (path http://, https://, s3://): read through remote by range. */
    struct dh__remote *remote;
    int owns_remote;    /* made for this source alone (no cache): freed with it */
    char *object;       /* its path, and its ETag ("" when not pinned) */
    char etag[128];
    int64_t object_size; /* the whole object's size */
    int err_code;       /* the last remote read's failure (AVIO passes only a code): its */
    char err[480];      /* code and sentence, which a decoder's error repeats */
} dh__source;

/*
 * Opens src: confined beneath src->root by the kernel, a regular file only,
 * never blocking in open; an object (a URL) through the worker's connection, its size
 * from the manifest or asked from the store. Errors: DH_EPATH (outside the root, through a
 * symlink that leaves it), DH_ENOTMEDIA (not a regular file: names what it
 * is), -errno (missing, permission), each with a sentence in err.
 */
int dh__source_open(dh__source *s, const dh__media_src *src, char *err, size_t errlen);
void dh__source_close(dh__source *s);

/* Reads the whole source (at most max bytes) into a new buffer. */
int dh__source_read_all(dh__source *s, int64_t max, uint8_t **buf, size_t *len, char *err,
                        size_t errlen);

/* Up to n bytes at offset off (no position change); 0 at the end, -errno on error. */
ssize_t dh__source_read_at(dh__source *s, void *buf, size_t n, int64_t off);

/* When a read of the source failed remotely: its sentence into err and its code (the
 * decoders' errors say what the store said, not what FFmpeg made of it); 0 otherwise. */
int dh__source_fault(const dh__source *s, char *err, size_t errlen);

/* 1 once the source's deadline has passed. */
int dh__source_expired(const dh__source *s);
/* The error for an expired source, in err. */
int dh__source_timeout(const dh__source *s, char *err, size_t errlen);

/*
 * avformat_open_input over the source (custom AVIO context; the interrupt
 * callback honours the deadline). Close with dh__source_avclose, which also
 * frees the AVIO context. Returns 0 or an AVERROR.
 */
int dh__source_avopen(dh__source *s, AVFormatContext **fmt);
void dh__source_avclose(AVFormatContext **fmt);

#endif
