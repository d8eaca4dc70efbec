/*
 * encode.c - writing real media files for generated workloads: H.264 MP4
 * (libx264 through libavcodec, keyframes exactly every `gop` frames, two
 * B-frames), JPEG (TurboJPEG), PNG (libpng) and FLAC (libavcodec).
 *
 * Content is synthetic but not trivial - a moving gradient, drifting discs
 * and low-amplitude pseudo-random texture, different per seed - so that the
 * encoders produce realistic bit rates and decoding costs real work.
 */
#include "codec.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>


/*
 * The synthetic scene, one frame at a time: a separable moving gradient
 * (per-column and per-row tables), three drifting discs and pseudo-random
 * texture of amplitude 16.
 */
typedef struct {
    int w, h;
    double *col, *row;
} scene_tables;

static int scene_init(scene_tables *s, int w, int h)
{
    s->w = w;
    s->h = h;
    s->col = malloc((size_t)w * sizeof *s->col);
    s->row = malloc((size_t)h * sizeof *s->row);
    return s->col && s->row ? 0 : DH_ENOMEM;
}

static void scene_free(scene_tables *s)
{
    free(s->col);
    free(s->row);
}

static void scene_luma(scene_tables *s, uint64_t seed, int t, uint8_t *out, int stride)
{
    double phase = t * 0.05 + (double)(seed % 97);
    for (int x = 0; x < s->w; x++)
        s->col[x] = sin(6.0 * x / s->w + phase);
    for (int y = 0; y < s->h; y++)
        s->row[y] = cos(4.0 * y / s->h - 0.7 * phase);
    double cx[3], cy[3], r2[3];
    for (int k = 0; k < 3; k++) {
        cx[k] = (0.5 + 0.35 * sin(phase * (0.3 + 0.1 * k) + k)) * s->w;
        cy[k] = (0.5 + 0.3 * cos(phase * 0.2 + 2 * k)) * s->h;
        r2[k] = (0.01 + 0.005 * k) * s->w * s->h;
    }
    for (int y = 0; y < s->h; y++) {
        uint8_t *p = out + (size_t)y * stride;
        uint64_t n = dh__mix64(seed ^ ((uint64_t)y << 20) ^ (uint64_t)t);
        for (int x = 0; x < s->w; x++) {
            double g = 0.5 + 0.35 * s->col[x] * s->row[y];
            for (int k = 0; k < 3; k++)
                if ((x - cx[k]) * (x - cx[k]) + (y - cy[k]) * (y - cy[k]) < r2[k])
                    g = 0.15 + 0.3 * k;
            n = n * 6364136223846793005ULL + 1442695040888963407ULL; /* LCG texture */
            p[x] = (uint8_t)DH_MIN(255.0, g * 230.0 + (double)(n >> 60));
        }
    }
}

static void fill_yuv(AVFrame *f, scene_tables *s, uint64_t seed, int t)
{
    scene_luma(s, seed, t, f->data[0], f->linesize[0]);
    for (int y = 0; y < f->height / 2; y++)
        for (int x = 0; x < f->width / 2; x++) {
            f->data[1][y * f->linesize[1] + x] = (uint8_t)(128 + 40 * sin(0.05 * x + 0.02 * t));
            f->data[2][y * f->linesize[2] + x] = (uint8_t)(128 + 40 * cos(0.04 * y - 0.03 * t));
        }
}

/* Sends frame (NULL: flush) and writes every packet the encoder returns. */
static int write_packets(AVFormatContext *oc, AVCodecContext *c, AVStream *st, AVFrame *frame)
{
    int e = avcodec_send_frame(c, frame);
    if (e < 0)
        return e;
    AVPacket *pkt = av_packet_alloc();
    if (!pkt)
        return AVERROR(ENOMEM);
    while ((e = avcodec_receive_packet(c, pkt)) == 0) {
        av_packet_rescale_ts(pkt, c->time_base, st->time_base);
        pkt->stream_index = st->index;
        if ((e = av_interleaved_write_frame(oc, pkt)) < 0)
            break;
    }
    av_packet_free(&pkt);
    return e == AVERROR(EAGAIN) || e == AVERROR_EOF ? 0 : e;
}

/* Opens the output file and its single stream with encoder codec. */
static int open_output(const char *path, const AVCodec *codec, AVFormatContext **oc,
                       AVCodecContext **c, AVStream **st)
{
    int e = avformat_alloc_output_context2(oc, NULL, NULL, path);
    if (e < 0)
        return e;
    *st = avformat_new_stream(*oc, NULL);
    *c = avcodec_alloc_context3(codec);
    return *st && *c ? 0 : AVERROR(ENOMEM);
}

static int finish_output(AVFormatContext *oc, AVCodecContext *c, AVStream *st, const char *path)
{
    int e = avcodec_parameters_from_context(st->codecpar, c);
    if (e >= 0 && !(oc->oformat->flags & AVFMT_NOFILE))
        e = avio_open(&oc->pb, path, AVIO_FLAG_WRITE);
    return e < 0 ? e : avformat_write_header(oc, NULL);
}

static void close_output(AVFormatContext *oc, AVCodecContext *c, int wrote_header)
{
    if (oc && wrote_header)
        av_write_trailer(oc);
    if (oc && oc->pb && !(oc->oformat->flags & AVFMT_NOFILE))
        avio_closep(&oc->pb);
    avformat_free_context(oc);
    avcodec_free_context(&c);
}

/* Flushes the encoder (unless e already failed), closes the file, maps the outcome. */
static int finish_encode(AVFormatContext *oc, AVCodecContext *c, AVStream *st, AVFrame *f,
                         int header, int e, const char *path, char *err, size_t errlen)
{
    if (e >= 0)
        e = write_packets(oc, c, st, NULL);
    av_frame_free(&f);
    close_output(oc, c, header);
    if (e < 0) {
        char text[AV_ERROR_MAX_STRING_SIZE];
        av_strerror(e, text, sizeof text);
        return dh__fail(err, errlen, DH_EIO, "writing %s: %s", path, text);
    }
    return 0;
}

int dh__encode_video(const char *path, int w, int h, double fps, int64_t frames, int gop,
                     uint64_t seed, char *err, size_t errlen)
{
    dh__codec_init();
    const AVCodec *codec = avcodec_find_encoder_by_name("libx264");
    if (!codec)
        return dh__fail(err, errlen, DH_EUNSUPPORTED, "no libx264 encoder in this FFmpeg");
    AVFormatContext *oc = NULL;
    AVCodecContext *c = NULL;
    AVStream *st = NULL;
    AVFrame *f = NULL;
    scene_tables sc = {0};
    int header = 0, e = open_output(path, codec, &oc, &c, &st);
    if (e >= 0) {
        c->width = w & ~1;
        c->height = h & ~1;
        c->pix_fmt = AV_PIX_FMT_YUV420P;
        c->framerate = av_d2q(fps, 100000);
        c->time_base = av_inv_q(c->framerate);
        st->time_base = c->time_base;
        c->gop_size = gop;
        c->keyint_min = gop;
        c->max_b_frames = 2;
        if (oc->oformat->flags & AVFMT_GLOBALHEADER)
            c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
        av_opt_set(c->priv_data, "preset", "veryfast", 0);
        av_opt_set(c->priv_data, "x264-params", "scenecut=0:log=-1", 0);
        e = avcodec_open2(c, codec, NULL);
    }
    if (e >= 0 && (e = finish_output(oc, c, st, path)) >= 0)
        header = 1;
    if (e >= 0 && !(f = av_frame_alloc()))
        e = AVERROR(ENOMEM);
    if (e >= 0) {
        f->format = c->pix_fmt;
        f->width = c->width;
        f->height = c->height;
        e = av_frame_get_buffer(f, 0);
    }
    if (e >= 0 && scene_init(&sc, c->width, c->height))
        e = AVERROR(ENOMEM);
    for (int64_t t = 0; e >= 0 && t < frames; t++) {
        if ((e = av_frame_make_writable(f)) < 0)
            break;
        fill_yuv(f, &sc, seed, (int)t);
        f->pts = t;
        e = write_packets(oc, c, st, f);
    }
    scene_free(&sc);
    return finish_encode(oc, c, st, f, header, e, path, err, errlen);
}

int dh__encode_flac(const char *path, int rate, double seconds, uint64_t seed, char *err,
                    size_t errlen)
{
    dh__codec_init();
    const AVCodec *codec = avcodec_find_encoder(AV_CODEC_ID_FLAC);
    if (!codec)
        return dh__fail(err, errlen, DH_EUNSUPPORTED, "no FLAC encoder in this FFmpeg");
    AVFormatContext *oc = NULL;
    AVCodecContext *c = NULL;
    AVStream *st = NULL;
    AVFrame *f = NULL;
    int header = 0, e = open_output(path, codec, &oc, &c, &st);
    if (e >= 0) {
        c->sample_fmt = AV_SAMPLE_FMT_S16;
        c->sample_rate = rate;
        av_channel_layout_default(&c->ch_layout, 1);
        c->time_base = (AVRational){1, rate};
        st->time_base = c->time_base;
        e = avcodec_open2(c, codec, NULL);
    }
    if (e >= 0 && (e = finish_output(oc, c, st, path)) >= 0)
        header = 1;
    int frame = c && c->frame_size > 0 ? c->frame_size : 4096;
    if (e >= 0 && !(f = av_frame_alloc()))
        e = AVERROR(ENOMEM);
    if (e >= 0) {
        f->format = c->sample_fmt;
        f->nb_samples = frame;
        av_channel_layout_copy(&f->ch_layout, &c->ch_layout);
        e = av_frame_get_buffer(f, 0);
    }
    int64_t total = (int64_t)llround(seconds * rate);
    double hz = 200.0 + (double)(seed % 400);
    for (int64_t at = 0; e >= 0 && at < total; at += frame) {
        if ((e = av_frame_make_writable(f)) < 0)
            break;
        f->nb_samples = (int)DH_MIN((int64_t)frame, total - at);
        int16_t *s = (int16_t *)f->data[0];
        for (int i = 0; i < f->nb_samples; i++) { /* a wandering tone plus noise, speech-like levels */
            double t = (double)(at + i) / rate;
            uint64_t n = dh__mix64(seed + (uint64_t)(at + i));
            s[i] = (int16_t)(6000 * sin(2 * M_PI * hz * t * (1 + 0.1 * sin(t))) + (int)(n % 801) - 400);
        }
        f->pts = at;
        e = write_packets(oc, c, st, f);
    }
    return finish_encode(oc, c, st, f, header, e, path, err, errlen);
}

static uint8_t *rgb_scene(int w, int h, uint64_t seed)
{
    uint8_t *rgb = malloc((size_t)w * h * 3), *luma = malloc((size_t)w * h);
    scene_tables sc = {0};
    if (!rgb || !luma || scene_init(&sc, w, h)) {
        free(rgb);
        free(luma);
        scene_free(&sc);
        return NULL;
    }
    scene_luma(&sc, seed, 0, luma, w);
    scene_free(&sc);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t l = luma[(size_t)y * w + x];
            uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            p[0] = l;
            p[1] = (uint8_t)(l / 2 + 60 * (1 + sin(0.03 * x)));
            p[2] = (uint8_t)(255 - l / 2 - 50 * (1 + cos(0.02 * y)));
        }
    free(luma);
    return rgb;
}

int dh__encode_jpeg(const char *path, int w, int h, uint64_t seed, char *err, size_t errlen)
{
    uint8_t *rgb = rgb_scene(w, h, seed), *jpeg = NULL;
    unsigned long size = 0;
    tjhandle tj = tjInitCompress();
    int rc = 0;
    if (!rgb || !tj)
        rc = DH_ENOMEM;
    else if (tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jpeg, &size, TJSAMP_420, 90, 0) != 0)
        rc = dh__fail(err, errlen, DH_EIO, "JPEG compression: %s", tjGetErrorStr2(tj));
    FILE *f = rc ? NULL : fopen(path, "wb");
    if (!rc && (!f || fwrite(jpeg, 1, size, f) != size))
        rc = dh__fail(err, errlen, DH_EIO, "writing %s", path);
    if (f && fclose(f) != 0 && !rc)
        rc = dh__fail(err, errlen, DH_EIO, "writing %s", path);
    tjFree(jpeg);
    if (tj)
        tjDestroy(tj);
    free(rgb);
    return rc;
}

int dh__encode_png(const char *path, int w, int h, uint64_t seed, char *err, size_t errlen)
{
    uint8_t *rgb = rgb_scene(w, h, seed);
    if (!rgb)
        return DH_ENOMEM;
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = PNG_FORMAT_RGB;
    int ok = png_image_write_to_file(&img, path, 0, rgb, 0, NULL);
    free(rgb);
    if (!ok)
        return dh__fail(err, errlen, DH_EIO, "writing %s: %s", path, img.message);
    return 0;
}
