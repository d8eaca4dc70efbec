/*
 * decode_video.c - sampled frames of one video, decoded and resized straight
 * into the caller's slot (T x H x W x 3 uint8).
 *
 * Frame choice is by presentation time, so B-frames and variable frame rate
 * are handled: sampled frame index i (dh_video_sample_frames) becomes the
 * target time (i + 0.5) / fps, and the frame shown at that time - the last
 * one whose timestamp is <= the target - is taken. Decoders emit frames in
 * presentation order; one frame of lookahead tells when the frame shown at
 * the target has been reached. Seeking follows the derivation rule of
 * derive.c: seek to the keyframe before the target only when that keyframe
 * lies after the frame the decoder already holds; otherwise decode forward.
 *
 * Resize: crop modes cut the centred source rectangle that covers the output
 * aspect (dh__cover_crop) and scale it; random crops cut their drawn rectangle
 * (dh_media_draw, which also chose the clip the frames come from); other modes
 * scale the whole frame. libswscale converts to RGB24 in the same call
 * (bilinear), writing directly into the slot; a drawn flip then mirrors the
 * output frame's rows.
 */
#include "scale.h"

#include "../catalog/catalog.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Error with a message into the decoder's error buffer. */
#define vfail(v, code, ...) dh__fail((v)->err, (v)->errlen, (code), __VA_ARGS__)

typedef struct {
    dh__source src;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    AVStream *st;
    AVPacket *pkt;
    AVFrame *cur, *next; /* shown frame so far; one frame of lookahead */
    int have_cur, have_next, eof;
    struct SwsContext *sws;
    double start; /* stream start time, seconds */
    dh__decode_stats *stats;
    char *err;
    size_t errlen;
} vdec;

static int averr(vdec *v, int e, const char *what)
{
    if (dh__source_expired(&v->src))
        return dh__source_timeout(&v->src, v->err, v->errlen);
    int fault = dh__source_fault(&v->src, v->err, v->errlen);
    if (fault)
        return fault;
    char text[AV_ERROR_MAX_STRING_SIZE];
    av_strerror(e, text, sizeof text);
    return vfail(v, e == AVERROR(ENOENT) ? DH_ENOENT : e == AVERROR(ENOMEM) ? DH_ENOMEM : DH_EDECODE,
                 "%s: %s", what, text);
}

static void vdec_close(vdec *v)
{
    av_frame_free(&v->cur);
    av_frame_free(&v->next);
    av_packet_free(&v->pkt);
    avcodec_free_context(&v->dec);
    dh__source_avclose(&v->fmt);
    dh__source_close(&v->src);
    sws_freeContext(v->sws);
}

static int vdec_open(vdec *v, const dh__media_src *src, const dh_media_info *mi)
{
    int rc = dh__source_open(&v->src, src, v->err, v->errlen);
    if (rc)
        return rc;
    int e = dh__source_avopen(&v->src, &v->fmt);
    if (e < 0)
        return averr(v, e, "cannot open the video");
    int sidx = av_find_best_stream(v->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    /* Stream info may decode frames; only probe it when the header lacks sizes. */
    if ((sidx < 0 || v->fmt->streams[sidx]->codecpar->width <= 0) &&
        (e = avformat_find_stream_info(v->fmt, NULL)) < 0)
        return averr(v, e, "cannot read stream info");
    sidx = av_find_best_stream(v->fmt, AVMEDIA_TYPE_VIDEO, -1, -1, NULL, 0);
    if (sidx < 0)
        return vfail(v, DH_ECORRUPT, "no video stream (the manifest says video)");
    v->st = v->fmt->streams[sidx];
    const AVCodecParameters *par = v->st->codecpar;
    if (par->width != mi->width || par->height != mi->height)
        return vfail(v, DH_ECORRUPT, "the file is %dx%d but its manifest entry says %dx%d",
                     par->width, par->height, mi->width, mi->height);
    const AVCodec *codec = avcodec_find_decoder(par->codec_id);
    if (!codec)
        return vfail(v, DH_EUNSUPPORTED, "no decoder for codec %s",
                     avcodec_get_name(par->codec_id));
    v->dec = avcodec_alloc_context3(codec);
    v->pkt = av_packet_alloc();
    v->cur = av_frame_alloc();
    v->next = av_frame_alloc();
    if (!v->dec || !v->pkt || !v->cur || !v->next)
        return DH_ENOMEM;
    if ((e = avcodec_parameters_to_context(v->dec, par)) < 0)
        return averr(v, e, "decoder parameters");
    v->dec->thread_count = 1; /* the worker pool owns parallelism */
    if ((e = avcodec_open2(v->dec, codec, NULL)) < 0)
        return averr(v, e, "cannot open the decoder");
    v->start = v->st->start_time != AV_NOPTS_VALUE ? v->st->start_time * av_q2d(v->st->time_base) : 0;
    return 0;
}

static double frame_time(const vdec *v, const AVFrame *f)
{
    int64_t ts = f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp : f->pts;
    return ts == AV_NOPTS_VALUE ? 0.0 : ts * av_q2d(v->st->time_base) - v->start;
}

/* Decodes the next frame into v->next. 0: got one; 1: end of stream; < 0: error. */
static int decode_next(vdec *v)
{
    for (;;) {
        int e = avcodec_receive_frame(v->dec, v->next);
        if (e == 0) {
            v->stats->frames_decoded++;
            return 0;
        }
        if (e == AVERROR_EOF)
            return 1;
        if (e != AVERROR(EAGAIN))
            return averr(v, e, "decoding");
        if (v->eof)
            return 1;
        if (dh__source_expired(&v->src)) /* checked between frames: decoding is no read */
            return dh__source_timeout(&v->src, v->err, v->errlen);
        e = av_read_frame(v->fmt, v->pkt);
        if (e == AVERROR_EOF) {
            v->eof = 1;
            avcodec_send_packet(v->dec, NULL); /* drain */
            continue;
        }
        if (e < 0)
            return averr(v, e, "reading packets");
        if (v->pkt->stream_index == v->st->index)
            e = avcodec_send_packet(v->dec, v->pkt);
        av_packet_unref(v->pkt);
        if (e < 0 && e != AVERROR(EAGAIN))
            return averr(v, e, "decoding");
    }
}

static int seek_to(vdec *v, double t)
{
    int64_t ts = (int64_t)floor((t + v->start) / av_q2d(v->st->time_base));
    int e = av_seek_frame(v->fmt, v->st->index, ts, AVSEEK_FLAG_BACKWARD);
    if (e < 0)
        return averr(v, e, "seeking");
    avcodec_flush_buffers(v->dec);
    v->have_cur = v->have_next = v->eof = 0;
    v->stats->seeks++;
    return 0;
}

/* Advances until v->cur is the frame shown at time t. */
static int reach(vdec *v, double t, double frame_s)
{
    for (;;) {
        if (!v->have_next) {
            int rc = decode_next(v);
            if (rc < 0)
                return rc;
            if (rc == 1)
                break;
            v->have_next = 1;
        }
        if (frame_time(v, v->next) > t + 1e-6)
            break;
        AVFrame *tmp = v->cur; /* next becomes cur */
        v->cur = v->next;
        v->next = tmp;
        v->have_cur = 1;
        v->have_next = 0;
    }
    if (!v->have_cur && v->have_next) { /* the stream starts after t: its first frame */
        AVFrame *tmp = v->cur;
        v->cur = v->next;
        v->next = tmp;
        v->have_cur = 1;
        v->have_next = 0;
    }
    if (!v->have_cur)
        return vfail(v, DH_ECORRUPT, "no frame decodes at %.3f s", t);
    if (v->eof && !v->have_next && t > frame_time(v, v->cur) + 1.5 * frame_s)
        return vfail(v, DH_ECORRUPT,
                     "the video ends at %.3f s, before the sampled time %.3f s: fewer frames "
                     "than its manifest entry says",
                     frame_time(v, v->cur), t);
    return 0;
}

/* Crop + scale + RGB conversion of v->cur into one output frame, mirrored when drawn so. */
static int convert(vdec *v, const dh_spec *spec, const dh_media_draw *dr, int ow, int oh,
                   uint8_t *out)
{
    AVFrame *f = v->cur;
    if (f->width != v->st->codecpar->width || f->height != v->st->codecpar->height)
        return vfail(v, DH_ECORRUPT, "frame size changed mid-stream (%dx%d)", f->width, f->height);
    dh__rect r = {0, 0, f->width, f->height};
    if (spec->video.resize.mode == DH_RESIZE_CROP || spec->video.resize.mode == DH_RESIZE_BUCKET)
        r = dh__cover_crop(f->width, f->height, ow, oh);
    else if (spec->video.resize.mode >= DH_RESIZE_RANDOM_RESIZED_CROP)
        r = (dh__rect){dr->crop_x, dr->crop_y, dr->crop_w, dr->crop_h};
    if (dh__scale_rgb(&v->sws, (const uint8_t *const *)f->data, f->linesize, f->format, r, ow, oh,
                      out))
        return vfail(v, DH_EUNSUPPORTED, "cannot convert pixel format %s",
                     av_get_pix_fmt_name(f->format));
    if (dr->flip)
        dh__flip_rgb(out, ow, oh);
    return 0;
}

static double keyframe_time(const dh_media_info *mi, int64_t idx)
{
    double best = 0;
    for (int32_t k = 0; k < mi->keyframe_count && mi->keyframes[k] <= idx; k++)
        best = mi->keyframes[k] / mi->fps;
    return best;
}

static int decode_targets(vdec *v, const dh_spec *spec, const dh_media_info *mi,
                          const dh_media_draw *dr, const dh_media_derived *md, const int64_t *idx,
                          int64_t first, int64_t end, uint8_t *dst)
{
    int ow = md->out_width, oh = md->out_height;
    size_t frame_bytes = (size_t)ow * oh * 3;
    double frame_s = 1.0 / mi->fps;
    for (int64_t k = first; k < end; k++) {
        double t = (idx[k] + 0.5) * frame_s, key = keyframe_time(mi, idx[k]);
        double held = v->have_cur ? frame_time(v, v->cur) : -1.0;
        if (key > held + 0.5 * frame_s && (v->have_cur || key > 0)) {
            int rc = seek_to(v, key);
            if (rc)
                return rc;
        }
        int rc = reach(v, t, frame_s);
        if (!rc)
            rc = convert(v, spec, dr, ow, oh, dst + k * frame_bytes);
        if (rc)
            return rc;
    }
    v->stats->bytes_written = (int64_t)((end - first) * frame_bytes);
    return 0;
}

int dh__decode_video(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                     uint8_t *dst, size_t cap, dh__decode_stats *st, char *err, size_t errlen)
{
    return dh__decode_video_range(src, spec, mi, NULL, 0, -1, dst, cap, st, err, errlen);
}

int dh__decode_video_range(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                           const dh_media_draw *draw, int64_t first, int64_t end, uint8_t *dst,
                           size_t cap, dh__decode_stats *st, char *err, size_t errlen)
{
    dh__decode_stats local;
    memset(st ? st : &local, 0, sizeof local);
    vdec v = {.src.fd = -1, .stats = st ? st : &local, .err = err, .errlen = errlen};
    dh__codec_init();
    dh_media_derived md;
    dh_media_draw plain;
    int rc = draw ? 0 : dh_media_draw_plain(spec, mi, &plain);
    draw = draw ? draw : &plain;
    if (!rc)
        rc = dh_derive_media_drawn(spec, mi, draw, &md);
    if (rc)
        return vfail(&v, rc, "cannot derive the output shape%s",
                     rc == DH_EINVAL ? " (or the drawn clip is not one of this video)" : "");
    if ((size_t)md.out_bytes > cap)
        return vfail(&v, DH_ERANGE, "slot holds %zu bytes, the video needs %lld", cap,
                     (long long)md.out_bytes);
    int64_t *idx = malloc((size_t)md.sampled_frames * sizeof *idx);
    if (!idx)
        return DH_ENOMEM;
    dh_video_frames_drawn(spec, mi, draw, idx, md.sampled_frames);
    if (end < 0 || end > md.sampled_frames)
        end = md.sampled_frames;
    first = DH_MAX(0, DH_MIN(first, end));
    rc = vdec_open(&v, src, mi);
    if (!rc)
        rc = decode_targets(&v, spec, mi, draw, &md, idx, first, end, dst);
    vdec_close(&v);
    free(idx);
    return rc;
}

/*
 * Sampled-frame range [*first, *end) of part `part`: the seek points of the
 * derivation's rule (derive.c) cut the targets into keyframe segments, and
 * each part takes a contiguous share of whole segments.
 */
static int part_range(const dh_spec *spec, const dh_media_info *mi, const dh_media_draw *draw,
                      int part, int nparts, int64_t *first, int64_t *end)
{
    dh_media_derived md;
    int rc = dh_derive_media_drawn(spec, mi, draw, &md);
    if (rc)
        return rc;
    int64_t n = md.sampled_frames, *idx = malloc((size_t)DH_MAX(n, 1) * sizeof *idx);
    int64_t *seek_at = malloc((size_t)DH_MAX(n, 1) * sizeof *seek_at), segs = 0, cur = -1;
    if (!idx || !seek_at) {
        free(idx);
        free(seek_at);
        return DH_ENOMEM;
    }
    dh_video_frames_drawn(spec, mi, draw, idx, n);
    for (int64_t k = 0; k < n; k++) {
        int64_t key = 0;
        for (int32_t j = 0; j < mi->keyframe_count && mi->keyframes[j] <= idx[k]; j++)
            key = mi->keyframes[j];
        if (!(cur >= key && cur < idx[k]))
            seek_at[segs++] = k;
        cur = idx[k];
    }
    int64_t a = segs * part / nparts, b = segs * (part + 1) / nparts;
    *first = a < segs ? seek_at[a] : n;
    *end = b < segs ? seek_at[b] : n;
    free(idx);
    free(seek_at);
    return 0;
}

int dh__video_part_bytes(const dh_spec *spec, const dh_media_info *mi, const dh_media_draw *draw,
                         int part, int nparts, int64_t *off, int64_t *len)
{
    dh_media_derived md;
    int64_t first = 0, end = 0;
    int rc = dh_derive_media_drawn(spec, mi, draw, &md);
    if (!rc)
        rc = part_range(spec, mi, draw, part, nparts, &first, &end);
    if (rc)
        return rc;
    int64_t fb = md.sampled_frames > 0 ? md.out_bytes / md.sampled_frames : 0;
    *off = first * fb;
    *len = end > first ? (end - first) * fb : 0;
    return 0;
}

int dh__decode_video_part(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                          const dh_media_draw *draw, int part, int nparts, uint8_t *dst,
                          size_t cap, dh__decode_stats *st, char *err, size_t errlen)
{
    int64_t first = 0, end = -1;
    if (nparts > 1) {
        int rc = part_range(spec, mi, draw, part, nparts, &first, &end);
        if (rc)
            return rc;
        if (first >= end) { /* more parts than segments: nothing for this one */
            if (st)
                memset(st, 0, sizeof *st);
            return 0;
        }
    }
    return dh__decode_video_range(src, spec, mi, draw, first, end, dst, cap, st, err, errlen);
}
