/*
 * probe_av.c - video and audio metadata through libavformat, headers only.
 *
 * avformat_open_input() reads the container header; for MP4/MOV that
 * includes the sample tables (frame count, keyframe table), so the stream's
 * index entries give every frame and its keyframe flag without touching a
 * packet. avformat_find_stream_info() is avoided when the header already
 * gave dimensions or a sample rate, because it may decode frames. When the
 * container has no complete index (Matroska cues list only some keyframes;
 * raw elementary streams have none) packets are read - demuxed, never
 * decoded - to count frames and keyframes, and the result says so.
 *
 * Keyframe positions are frame indices in decode (packet) order, which equals
 * display order for the closed GOPs our encoders and most training corpora
 * use; each IDR frame is the first displayed frame of its GOP.
 */
#include "codec.h"
#include "source.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/*
 * The library never changes FFmpeg's process-wide log level on its own: a
 * trainer embedding it keeps its own settings. Programs that want FFmpeg
 * quiet (the CLI) ask for it here. Every FFmpeg error we act on is mapped
 * into our own error codes and messages anyway.
 */
void dh_quiet_ffmpeg_logs(void)
{
    if (!getenv("DH_FFMPEG_LOG"))
        av_log_set_level(AV_LOG_QUIET);
}

void dh__codec_init(void)
{
}

static int map_averror(int averr)
{
    if (averr == AVERROR(ENOENT))
        return DH_ENOENT;
    if (averr == AVERROR(EACCES))
        return DH_EACCES;
    if (averr == AVERROR(ENOMEM))
        return DH_ENOMEM;
    if (averr == AVERROR_INVALIDDATA)
        return DH_ENOTMEDIA;
    if (averr == AVERROR_DECODER_NOT_FOUND || averr == AVERROR_DEMUXER_NOT_FOUND)
        return DH_EUNSUPPORTED;
    if (averr == AVERROR_EOF)
        return DH_ECORRUPT;
    return averr < 0 && averr > -4096 ? averr : DH_ECORRUPT;
}

static int av_fail(int averr, const char *what, char *err, size_t errlen)
{
    char text[AV_ERROR_MAX_STRING_SIZE];
    av_strerror(averr, text, sizeof text);
    dh__msg(err, errlen, "%s: %s", what, text);
    return map_averror(averr);
}

static double stream_duration(const AVFormatContext *fmt, const AVStream *st)
{
    if (st->duration != AV_NOPTS_VALUE && st->duration > 0)
        return (double)st->duration * av_q2d(st->time_base);
    if (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0)
        return (double)fmt->duration / AV_TIME_BASE;
    return 0.0;
}

static int push_keyframe(dh_probe_result *r, size_t *cap, int64_t frame, const dh_limits *lim,
                         char *err, size_t errlen)
{
    if (r->info.keyframe_count >= lim->max_keyframes) {
        dh__msg(err, errlen, "more than %d keyframes", lim->max_keyframes);
        return DH_ELIMIT;
    }
    int32_t *kf = (int32_t *)r->info.keyframes;
    if (dh__grow((void **)&kf, cap, (size_t)r->info.keyframe_count + 1, sizeof *kf))
        return DH_ENOMEM;
    kf[r->info.keyframe_count++] = (int32_t)frame;
    r->info.keyframes = kf;
    return 0;
}

/*
 * Keyframes from a complete index (one entry per frame), as MP4 provides.
 * Entries an edit list cuts off (AVINDEX_DISCARD_FRAME: libx264's last
 * frame past the track duration, for one) are never shown, so they are not
 * frames: counting them would describe a frame no decoder returns.
 */
static int keyframes_from_index(AVStream *st, dh_probe_result *r, const dh_limits *lim, char *err,
                                size_t errlen)
{
    int n = avformat_index_get_entries_count(st);
    size_t cap = 0;
    int64_t shown = 0;
    for (int i = 0; i < n; i++) {
        const AVIndexEntry *e = avformat_index_get_entry(st, i);
        if (!e || (e->flags & AVINDEX_DISCARD_FRAME))
            continue;
        if (e->flags & AVINDEX_KEYFRAME) {
            int rc = push_keyframe(r, &cap, shown, lim, err, errlen);
            if (rc)
                return rc;
        }
        shown++;
    }
    r->info.frames = shown;
    return 0;
}

/* Counts the stream's packets and their keyframe flags; demux only. */
static int scan_packets(AVFormatContext *fmt, int sidx, dh_probe_result *r, const dh_limits *lim,
                        char *err, size_t errlen)
{
    AVPacket *pkt = av_packet_alloc();
    if (!pkt)
        return DH_ENOMEM;
    size_t cap = 0;
    int64_t frames = 0;
    int rc = 0, ret;
    while ((ret = av_read_frame(fmt, pkt)) >= 0) {
        if (pkt->stream_index == sidx && !(pkt->flags & AV_PKT_FLAG_DISCARD)) {
            if ((pkt->flags & AV_PKT_FLAG_KEY) &&
                (rc = push_keyframe(r, &cap, frames, lim, err, errlen)))
                break;
            if (++frames > lim->max_frames) {
                dh__msg(err, errlen, "more than %lld frames", (long long)lim->max_frames);
                rc = DH_ELIMIT;
                break;
            }
        }
        av_packet_unref(pkt);
    }
    av_packet_free(&pkt);
    if (!rc && ret != AVERROR_EOF)
        rc = av_fail(ret, "reading packets", err, errlen);
    r->info.frames = frames;
    r->scanned = 1;
    return rc;
}

static int probe_video(AVFormatContext *fmt, AVStream *st, dh_probe_result *r,
                       const dh_limits *lim, char *err, size_t errlen)
{
    const AVCodecParameters *par = st->codecpar;
    dh_media_info *mi = &r->info;
    mi->type = DH_MEDIA_VIDEO;
    mi->width = par->width;
    mi->height = par->height;
    /*
     * avg_frame_rate is frames / duration, and MP4 edit lists for B-frame
     * delay shorten that duration: a 25 fps clip reads 25.4. When the nominal
     * r_frame_rate agrees within 5% the stream is constant-rate and the
     * nominal rate is exact; variable-rate streams keep the average.
     */
    double avg = st->avg_frame_rate.num > 0 && st->avg_frame_rate.den > 0 ? av_q2d(st->avg_frame_rate) : 0;
    double nominal = st->r_frame_rate.num > 0 && st->r_frame_rate.den > 0 ? av_q2d(st->r_frame_rate) : 0;
    mi->fps = nominal > 0 && (avg <= 0 || fabs(avg - nominal) < 0.05 * nominal) ? nominal : avg;
    mi->duration_s = stream_duration(fmt, st);
    if ((int64_t)mi->width * mi->height > lim->max_pixels) {
        dh__msg(err, errlen, "video is %dx%d, over the limit of %lld pixels", mi->width,
                mi->height, (long long)lim->max_pixels);
        return DH_ELIMIT;
    }
    if (mi->duration_s > lim->max_duration_s) {
        dh__msg(err, errlen, "video lasts %.1f s, over the limit of %.1f s", mi->duration_s,
                lim->max_duration_s);
        return DH_ELIMIT;
    }
    if (st->nb_frames > lim->max_frames) {
        dh__msg(err, errlen, "video has %lld frames, over the limit of %lld",
                (long long)st->nb_frames, (long long)lim->max_frames);
        return DH_ELIMIT;
    }
    int rc;
    if (st->nb_frames > 0 && avformat_index_get_entries_count(st) == st->nb_frames)
        rc = keyframes_from_index(st, r, lim, err, errlen);
    else
        rc = scan_packets(fmt, st->index, r, lim, err, errlen);
    if (rc)
        return rc;
    if (mi->frames <= 0) {
        dh__msg(err, errlen, "video stream has no frames");
        return DH_ECORRUPT;
    }
    if (!(mi->fps > 0) || !isfinite(mi->fps))
        mi->fps = 0;
    if (mi->fps <= 0 && mi->duration_s > 0)
        mi->fps = (double)mi->frames / mi->duration_s;
    if (mi->duration_s <= 0 && mi->fps > 0)
        mi->duration_s = (double)mi->frames / mi->fps;
    /* What the manifest loader accepts, or the file is refused here (a fuzzed file had one
     * frame, no rate and no duration: index wrote a line its own loader refused). A rate
     * that contradicts the frame count and duration yields to them (the decoder samples by
     * presentation time; the count and the duration are measured). */
    if (mi->fps > 0 && mi->duration_s > 0 &&
        fabs((double)mi->frames / mi->fps - mi->duration_s) > 0.25 * mi->duration_s + 1.0)
        mi->fps = (double)mi->frames / mi->duration_s;
    /* checked after that: a fuzzed file's 4 frames over a 26214 s duration made the rate
     * 0.00015 fps, which the loader refuses */
    if (!(mi->fps >= 0.001) || !(mi->duration_s > 0)) {
        dh__msg(err, errlen, "video has %lld frames but no usable frame rate or duration",
                (long long)mi->frames);
        return DH_ECORRUPT;
    }
    return 0;
}

static int probe_audio(AVFormatContext *fmt, AVStream *st, dh_probe_result *r,
                       const dh_limits *lim, char *err, size_t errlen)
{
    dh_media_info *mi = &r->info;
    mi->type = DH_MEDIA_AUDIO;
    mi->sample_rate = st->codecpar->sample_rate;
    mi->channels = st->codecpar->ch_layout.nb_channels;
    mi->duration_s = stream_duration(fmt, st);
    if (mi->duration_s <= 0) {
        dh__msg(err, errlen, "audio stream has no duration in its header");
        return DH_ECORRUPT;
    }
    if (mi->duration_s > lim->max_duration_s) {
        dh__msg(err, errlen, "audio lasts %.1f s, over the limit of %.1f s", mi->duration_s,
                lim->max_duration_s);
        return DH_ELIMIT;
    }
    return 0;
}

/* The main video stream (cover art excluded), else the first audio stream; -1 if none. */
static int pick_stream(const AVFormatContext *fmt, int *is_video)
{
    int audio = -1;
    for (unsigned i = 0; i < fmt->nb_streams; i++) {
        const AVStream *st = fmt->streams[i];
        enum AVMediaType t = st->codecpar->codec_type;
        if (t == AVMEDIA_TYPE_VIDEO && !(st->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
            *is_video = 1;
            return (int)i;
        }
        if (t == AVMEDIA_TYPE_AUDIO && audio < 0)
            audio = (int)i;
    }
    *is_video = 0;
    return audio;
}

/* True when the header left out what we need and stream info must be probed. */
static int header_incomplete(const AVStream *st)
{
    const AVCodecParameters *p = st->codecpar;
    if (p->codec_type == AVMEDIA_TYPE_VIDEO)
        return p->width <= 0 || p->height <= 0;
    return p->sample_rate <= 0;
}

int dh__probe_av(dh__source *src, const dh_limits *lim, dh_probe_result *r, char *err,
                 size_t errlen)
{
    dh__codec_init();
    AVFormatContext *fmt = NULL;
    src->avio_buf = 8192; /* headers only: an MP4 with its moov at the end costs 8 KB + moov */
    int ret = dh__source_avopen(src, &fmt);
    if (ret < 0) {
        int rc = av_fail(ret, "not a readable media container", err, errlen);
        return rc;
    }
    int is_video = 0, rc = 0;
    int sidx = pick_stream(fmt, &is_video);
    if (sidx >= 0 && header_incomplete(fmt->streams[sidx])) {
        if ((ret = avformat_find_stream_info(fmt, NULL)) < 0) {
            rc = av_fail(ret, "reading stream info", err, errlen);
            goto done;
        }
        sidx = pick_stream(fmt, &is_video);
    }
    if (sidx < 0) {
        dh__msg(err, errlen, "no video or audio stream (container %s)", fmt->iformat->name);
        rc = DH_ENOTMEDIA;
        goto done;
    }
    AVStream *st = fmt->streams[sidx];
    if (header_incomplete(st)) {
        dh__msg(err, errlen, "stream %d has no %s in its headers", sidx,
                is_video ? "dimensions" : "sample rate");
        rc = DH_ECORRUPT;
        goto done;
    }
    const char *codec = avcodec_get_name(st->codecpar->codec_id);
    r->info.codec = dh_codec_from_name(codec);
    snprintf(r->codec_name, sizeof r->codec_name, "%s", codec);
    snprintf(r->format, sizeof r->format, "%s", fmt->iformat->name);
    int64_t size = fmt->pb ? avio_size(fmt->pb) : -1;
    r->info.bytes = size > 0 ? size : 0;
    rc = is_video ? probe_video(fmt, st, r, lim, err, errlen)
                  : probe_audio(fmt, st, r, lim, err, errlen);
done:
    dh__source_avclose(&fmt);
    if (rc && dh__source_fault(src, NULL, 0)) /* the store failed: say what it said */
        rc = dh__source_fault(src, err, errlen);
    return rc;
}
