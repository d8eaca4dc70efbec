/*
 * codec.h - the narrow internal interface to foreign media libraries.
 * Everything that includes an FFmpeg, TurboJPEG or libpng header lives in
 * src/codec/; the rest of DataHelix sees only these functions and the public
 * dh_ types. Each reader fills a dh_probe_result from headers only.
 */
#ifndef DH_CODEC_H
#define DH_CODEC_H

#include "../core/core.h"

/*
 * Once per process: FFmpeg logs to stderr by default; our errors carry the
 * reason instead, so its log is silenced unless DH_FFMPEG_LOG is set.
 */
void dh__codec_init(void);

struct dh__source;
struct dh__media_src;
/* libavformat: containers with video and/or audio streams, read from an open source. */
int dh__probe_av(struct dh__source *src, const dh_limits *lim, dh_probe_result *r, char *err,
                 size_t errlen);
/* dh_probe_file for a media source (source.h): confined beneath a root, or in memory. */
int dh__probe_src(const struct dh__media_src *src, const dh_limits *lim, dh_probe_result *out,
                  char *err, size_t errlen);
/* JPEG via the TurboJPEG header reader; buf holds the first len bytes of the file. */
int dh__probe_jpeg(const char *path, const unsigned char *buf, size_t len, int64_t file_bytes,
                   const dh_limits *lim, dh_probe_result *r, char *err, size_t errlen);
/* PNG via its IHDR chunk (the first 33 bytes). */
int dh__probe_png(const unsigned char *buf, size_t len, int64_t file_bytes, const dh_limits *lim,
                  dh_probe_result *r, char *err, size_t errlen);

/* Media writers for generated workloads (encode.c); seed varies the content. */
int dh__encode_video(const char *path, int w, int h, double fps, int64_t frames, int gop,
                     uint64_t seed, char *err, size_t errlen);
int dh__encode_flac(const char *path, int rate, double seconds, uint64_t seed, char *err,
                    size_t errlen);
int dh__encode_jpeg(const char *path, int w, int h, uint64_t seed, char *err, size_t errlen);
int dh__encode_png(const char *path, int w, int h, uint64_t seed, char *err, size_t errlen);

#endif
