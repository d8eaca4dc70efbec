/*
 * datahelix/base.h - errors, version, the media vocabulary, limits and
 * diagnostics: what every other part of the API uses.
 *
 * Thread-safety: every function here is safe from any thread (they read static
 * tables or fill caller-owned structs).
 * Part of the public C API; include <datahelix.h> for all of it.
 */
#ifndef DATAHELIX_BASE_H
#define DATAHELIX_BASE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#if defined(DH_BUILDING_LIBRARY) && defined(__GNUC__)
#define DH_API __attribute__((visibility("default")))
#else
#define DH_API
#endif

#define DH_VERSION_MAJOR 0
#define DH_VERSION_MINOR 2
#define DH_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif
/* ------------------------------------------------------------------ errors */

/*
 * One X-macro table generates the enum, dh_strerror() and dh_err_name().
 * Errno-backed codes keep the system's value; project codes live in
 * [-10999, -10000] so they never collide with errno.
 */
#define DH_ERRNO_MAP(XX)                                                                           \
    XX(EINVAL, -EINVAL, "invalid argument")                                                        \
    XX(ENOMEM, -ENOMEM, "out of memory")                                                           \
    XX(ENOENT, -ENOENT, "no such file or directory")                                               \
    XX(EACCES, -EACCES, "permission denied")                                                       \
    XX(EIO, -EIO, "input/output error")                                                            \
    XX(ERANGE, -ERANGE, "value out of range")                                                      \
    XX(EEXIST, -EEXIST, "already exists")                                                          \
    XX(ENOTDIR, -ENOTDIR, "not a directory")                                                       \
    XX(ECANCELED, -ECANCELED, "stopped before it completed")                                       \
    XX(ETIMEDOUT, -ETIMEDOUT, "timed out")                                                         \
    XX(EBUSY, -EBUSY, "busy: in use by another thread")                                            \
    XX(EPARSE, -10000, "malformed input")                                                          \
    XX(ESCHEMA, -10001, "missing key or wrong type")                                               \
    XX(ELIMIT, -10002, "value over configured limit")                                              \
    XX(EDUP, -10003, "duplicate id")                                                               \
    XX(EPATH, -10004, "path escapes the manifest directory")                                       \
    XX(EDECODE, -10005, "decode failed")                                                           \
    XX(ECORRUPT, -10006, "corrupt or truncated media")                                             \
    XX(ENOTMEDIA, -10007, "not a media file")                                                      \
    XX(EUNSUPPORTED, -10008, "unsupported media or codec")                                         \
    XX(EMISMATCH, -10009, "mismatch: the two sides disagree (a state, a job, a world)")            \
    XX(EEMPTY, -10010, "nothing to do: empty input")                                              \
    XX(EPEER, -10011, "the process at the other end died or disconnected")                        \
    XX(EFAILED, -10012, "too many samples failed (--max-failed)")                             \
    XX(EREMOTE, -10013, "remote storage failed (HTTP or S3)")

typedef enum {
#define DH_ERR_ENUM(name, value, text) DH_##name = (value),
    DH_ERRNO_MAP(DH_ERR_ENUM)
#undef DH_ERR_ENUM
} dh_errno;

/* Human-readable text for an error code; never NULL, static storage. */
DH_API const char *dh_strerror(int err);
/* Symbolic name ("DH_ELIMIT"); never NULL, static storage. */
DH_API const char *dh_err_name(int err);

DH_API const char *dh_version_string(void);
/* The version as a number: major * 10000 + minor * 100 + patch (0.1.0 is 100). */
#define DH_VERSION_NUMBER (DH_VERSION_MAJOR * 10000 + DH_VERSION_MINOR * 100 + DH_VERSION_PATCH)
DH_API int dh_version(void);

/*
 * Silences FFmpeg's log output process-wide (unless DH_FFMPEG_LOG is set in
 * the environment). The library never does this by itself, since the log
 * level belongs to the host process; the datahelix CLI calls it. Call it
 * before starting threads that use FFmpeg.
 */
DH_API void dh_quiet_ffmpeg_logs(void);

/* --------------------------------------------------------- media vocabulary */

typedef enum {
    DH_MEDIA_VIDEO = 0,
    DH_MEDIA_IMAGE = 1,
    DH_MEDIA_AUDIO = 2,
    DH_MEDIA_TYPE_COUNT
} dh_media_type;

typedef enum {
    DH_CODEC_OTHER = 0, /* a codec string we do not model; kept, costed generically */
    DH_CODEC_H264,
    DH_CODEC_HEVC,
    DH_CODEC_VP9,
    DH_CODEC_AV1,
    DH_CODEC_VP8,
    DH_CODEC_MPEG4,
    DH_CODEC_JPEG,
    DH_CODEC_PNG,
    DH_CODEC_FLAC,
    DH_CODEC_PCM,
    DH_CODEC_AAC,
    DH_CODEC_MP3,
    DH_CODEC_OPUS,
    DH_CODEC_VORBIS,
    DH_CODEC_COUNT
} dh_codec;

DH_API const char *dh_media_type_name(dh_media_type t);
/* Returns -1 for an unknown type name. */
DH_API int dh_media_type_from_name(const char *name);
DH_API const char *dh_codec_name(dh_codec c);
/* Unknown names (including NULL) map to DH_CODEC_OTHER. Aliases: h265, mjpeg... */
DH_API dh_codec dh_codec_from_name(const char *name);

/*
 * One media item of a sample, as described by the manifest or the prober.
 * Unknown numeric fields are 0. keyframes (frame indices, ascending) is
 * borrowed: valid as long as the object it came from.
 */
typedef struct {
    dh_media_type type;
    dh_codec codec;
    const char *path; /* relative to the manifest directory */
    int32_t width, height;
    double fps;
    int64_t frames;
    double duration_s;
    int32_t sample_rate;
    int32_t channels;
    int64_t bytes;
    const int32_t *keyframes;
    int32_t keyframe_count;
    /* Added in 0.2. offset > 0: the item is bytes [offset, offset + bytes) of path (a member
     * of a tar shard, read in place), member its name in the shard (may be NULL); 0: the
     * whole file. */
    int64_t offset;
    const char *member;
    int64_t file_bytes; /* with offset: the whole file's size when indexed (0: not pinned) */
    /* Added in 0.2 (object storage): an object's ETag when it was indexed (path http://, https:// or s3://):
     * reads ask for that version and fail, named, if the object changed; NULL: not pinned. */
    const char *etag;
} dh_media_info;

/* --------------------------------------------------------------- limits */

/*
 * Upper bounds applied to untrusted sizes before anything is allocated or
 * derived from them. A value over a limit is a DH_ELIMIT error for that line.
 */
typedef struct {
    int64_t max_pixels;      /* width * height of one image or frame */
    int64_t max_frames;      /* frames of one video */
    double max_duration_s;   /* duration of one video or audio item */
    int64_t max_bytes;       /* bytes of one media file */
    int32_t max_media;       /* media items in one sample */
    int64_t max_text_tokens; /* text tokens of one sample */
    int32_t max_keyframes;   /* keyframe list length of one video */
    int64_t max_line_bytes;  /* length of one manifest line */
    int64_t max_text_bytes;  /* added in 0.2: bytes of one sample's text, and of its meta as
                              * compact JSON (at most DH_MAX_TEXT_BYTES) */
} dh_limits;

/* The largest max_text_bytes: a batch's texts and metas travel in one message. */
#define DH_MAX_TEXT_BYTES (8 << 20)

/* Fills sane defaults (16k x 16k pixels, 10M frames, 24 h, 1 TiB ...). */
DH_API void dh_limits_default(dh_limits *lim);

/* --------------------------------------------------------- diagnostics */

/*
 * A diagnostic about one line, sample or file. Strings are borrowed and valid
 * only during the callback.
 */
typedef struct {
    const char *file;      /* manifest or media file */
    int64_t line;          /* 1-based manifest line, 0 when not applicable */
    const char *sample_id; /* NULL when unknown (e.g. the line did not parse) */
    int code;              /* negative error code */
    const char *message;   /* full sentence: what is wrong and where */
} dh_diag;

typedef void (*dh_diag_cb)(const dh_diag *diag, void *user);

#ifdef __cplusplus
}
#endif
#endif /* DATAHELIX_BASE_H */
