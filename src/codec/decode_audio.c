/*
 * decode_audio.c - one audio item decoded, downmixed and resampled to mono
 * float32 at the spec's rate (libswresample), straight into its slot; or,
 * when the spec asks for mel bins, its log-mel spectrogram (mel_bins x
 * frames, float32).
 *
 * The slot holds ceil(duration * rate) samples as dh_derive_media() says (of
 * the window's duration when the spec cuts one: the whole item is decoded and
 * the drawn window taken from it, in memory sized up front by the duration
 * claimed up to PCM_RESERVE and beyond that only by the samples decoded). A
 * stream a little shorter than its descriptor (container rounding) is padded
 * with silence; one more than 2% + 50 ms shorter contradicts its manifest
 * entry and is an error. Log-mel: 25 ms Hann windows centred every
 * 1/mel_fps s, a 2^k-point FFT (libavutil's av_tx), HTK mel filters up to
 * rate/2, natural log of power floored at 1e-10.
 */
#include "../catalog/catalog.h"
#include "decode.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/tx.h>
#include <libswresample/swresample.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Samples reserved before decoding when they do not go straight to the slot
 * (16 MiB, 4.4 minutes at 16 kHz): one allocation for any usual clip, as
 * growing from nothing cost this machine 20% more CPU an audio sample (short
 * clips); a longer claim grows with the samples actually decoded.
 */
#define PCM_RESERVE ((int64_t)1 << 22)

/* Error with a message into the decoder's error buffer. */
#define afail(a, code, ...) dh__fail((a)->err, (a)->errlen, (code), __VA_ARGS__)

typedef struct {
    dh__source src;
    AVFormatContext *fmt;
    AVCodecContext *dec;
    SwrContext *swr;
    AVPacket *pkt;
    AVFrame *frame;
    float *tmp; /* resampler output, sized for a whole frame */
    size_t tmpcap;
    float *pcm; /* the decoded samples when they do not go straight to the slot */
    size_t pcmcap;
    int sidx;
    char *err;
    size_t errlen;
} adec;


static int aaverr(adec *a, int e, const char *what)
{
    if (dh__source_expired(&a->src))
        return dh__source_timeout(&a->src, a->err, a->errlen);
    int fault = dh__source_fault(&a->src, a->err, a->errlen);
    if (fault)
        return fault;
    char text[AV_ERROR_MAX_STRING_SIZE];
    av_strerror(e, text, sizeof text);
    return afail(a, e == AVERROR(ENOENT) ? DH_ENOENT : DH_EDECODE, "%s: %s", what, text);
}

static void adec_close(adec *a)
{
    free(a->tmp);
    free(a->pcm);
    av_frame_free(&a->frame);
    av_packet_free(&a->pkt);
    swr_free(&a->swr);
    avcodec_free_context(&a->dec);
    dh__source_avclose(&a->fmt);
    dh__source_close(&a->src);
}

static int adec_open(adec *a, const dh__media_src *src, const dh_media_info *mi, int rate)
{
    int rc = dh__source_open(&a->src, src, a->err, a->errlen);
    if (rc)
        return rc;
    int e = dh__source_avopen(&a->src, &a->fmt);
    if (e < 0)
        return aaverr(a, e, "cannot open the audio");
    a->sidx = av_find_best_stream(a->fmt, AVMEDIA_TYPE_AUDIO, -1, -1, NULL, 0);
    if (a->sidx < 0 && (e = avformat_find_stream_info(a->fmt, NULL)) >= 0)
        a->sidx = av_find_best_stream(a->fmt, AVMEDIA_TYPE_AUDIO, -1, -1, NULL, 0);
    if (a->sidx < 0)
        return afail(a, DH_ECORRUPT, "no audio stream (the manifest says audio)");
    const AVCodecParameters *par = a->fmt->streams[a->sidx]->codecpar;
    if (mi->sample_rate > 0 && par->sample_rate != mi->sample_rate)
        return afail(a, DH_ECORRUPT, "the file is %d Hz but its manifest entry says %d Hz",
                     par->sample_rate, mi->sample_rate);
    const AVCodec *codec = avcodec_find_decoder(par->codec_id);
    if (!codec)
        return afail(a, DH_EUNSUPPORTED, "no decoder for codec %s", avcodec_get_name(par->codec_id));
    a->dec = avcodec_alloc_context3(codec);
    a->pkt = av_packet_alloc();
    a->frame = av_frame_alloc();
    if (!a->dec || !a->pkt || !a->frame)
        return DH_ENOMEM;
    if ((e = avcodec_parameters_to_context(a->dec, par)) < 0 ||
        (a->dec->thread_count = 1, e = avcodec_open2(a->dec, codec, NULL)) < 0)
        return aaverr(a, e, "cannot open the decoder");
    AVChannelLayout mono = AV_CHANNEL_LAYOUT_MONO;
    if (a->dec->ch_layout.order == AV_CHANNEL_ORDER_UNSPEC)
        av_channel_layout_default(&a->dec->ch_layout, a->dec->ch_layout.nb_channels);
    e = swr_alloc_set_opts2(&a->swr, &mono, AV_SAMPLE_FMT_FLT, rate, &a->dec->ch_layout,
                            a->dec->sample_fmt, a->dec->sample_rate, 0, NULL);
    if (e < 0 || (e = swr_init(a->swr)) < 0)
        return aaverr(a, e, "cannot set up resampling");
    return 0;
}

/*
 * Converts one decoded frame - or, with f == NULL, flushes the resampler -
 * and appends up to cap samples to out, or with out == NULL to a->pcm, which
 * grows with what is decoded: a header may claim hours that the file does not
 * hold, and memory must follow the samples, not the claim. The resampler's
 * buffer is sized from swr_get_out_samples() so one call takes the whole frame.
 */
static int append(adec *a, const AVFrame *f, float *out, int64_t *n, int64_t cap)
{
    int in_n = f ? f->nb_samples : 0;
    for (;;) {
        int room = swr_get_out_samples(a->swr, in_n);
        if (room < 0)
            return aaverr(a, room, "resampling");
        if (dh__grow((void **)&a->tmp, &a->tmpcap, (size_t)room + 1, sizeof *a->tmp))
            return DH_ENOMEM;
        uint8_t *o[1] = {(uint8_t *)a->tmp};
        int got = swr_convert(a->swr, o, room + 1, f ? (const uint8_t **)f->extended_data : NULL,
                              in_n);
        if (got < 0)
            return aaverr(a, got, "resampling");
        int64_t take = DH_MAX(0, DH_MIN((int64_t)got, cap - *n));
        if (take > 0) { /* a->pcm is NULL until the first sample */
            if (!out && dh__grow((void **)&a->pcm, &a->pcmcap, (size_t)(*n + take), sizeof *a->pcm))
                return DH_ENOMEM;
            memcpy((out ? out : a->pcm) + *n, a->tmp, (size_t)take * sizeof *a->tmp);
            *n += take;
        }
        if (f || got == 0)
            return 0;
    }
}

/* Decodes the whole stream into out or a->pcm (at most cap samples); *n gets the count. */
static int decode_all(adec *a, float *out, int64_t cap, int64_t *n)
{
    *n = 0;
    int e, eof = 0;
    while (!eof) {
        if (dh__source_expired(&a->src))
            return dh__source_timeout(&a->src, a->err, a->errlen);
        e = av_read_frame(a->fmt, a->pkt);
        if (e == AVERROR_EOF) {
            eof = 1;
            e = avcodec_send_packet(a->dec, NULL);
        } else if (e < 0) {
            return aaverr(a, e, "reading packets");
        } else {
            e = a->pkt->stream_index == a->sidx ? avcodec_send_packet(a->dec, a->pkt) : 0;
            av_packet_unref(a->pkt);
        }
        if (e < 0 && e != AVERROR(EAGAIN))
            return aaverr(a, e, "decoding");
        while ((e = avcodec_receive_frame(a->dec, a->frame)) == 0) {
            int rc = append(a, a->frame, out, n, cap);
            if (rc)
                return rc;
        }
        if (e != AVERROR(EAGAIN) && e != AVERROR_EOF)
            return aaverr(a, e, "decoding");
    }
    return append(a, NULL, out, n, cap);
}

static double hz_to_mel(double hz)
{
    return 2595.0 * log10(1.0 + hz / 700.0);
}

static double mel_to_hz(double mel)
{
    return 700.0 * (pow(10.0, mel / 2595.0) - 1.0);
}

/* Log-mel of pcm[0..n) into out (bins x frames, row-major by bin). */
static int log_mel(const float *pcm, int64_t n, int rate, int bins, int fps, int64_t frames,
                   float *out)
{
    int win = (int)lround(0.025 * rate), hop = rate / fps, nfft = 1;
    while (nfft < win)
        nfft <<= 1;
    int nbin = nfft / 2 + 1;
    AVTXContext *tx = NULL;
    av_tx_fn fft;
    float scale = 1.0f;
    /* av_tx's SIMD code needs av_malloc's alignment. */
    AVComplexFloat *in = av_malloc((size_t)nfft * sizeof *in);
    AVComplexFloat *spec = av_malloc((size_t)nfft * sizeof *spec);
    float *fb = calloc((size_t)bins * nbin, sizeof *fb), *power = malloc((size_t)nbin * sizeof *power);
    int rc = (!in || !spec || !fb || !power) ? DH_ENOMEM : 0;
    if (!rc && av_tx_init(&tx, &fft, AV_TX_FLOAT_FFT, 0, nfft, &scale, 0) < 0)
        rc = DH_ENOMEM;
    double lo = hz_to_mel(0), hi = hz_to_mel(rate / 2.0);
    for (int m = 0; !rc && m < bins; m++) { /* triangular filters between mel points m..m+2 */
        double f0 = mel_to_hz(lo + (hi - lo) * m / (bins + 1));
        double f1 = mel_to_hz(lo + (hi - lo) * (m + 1) / (bins + 1));
        double f2 = mel_to_hz(lo + (hi - lo) * (m + 2) / (bins + 1));
        for (int k = 0; k < nbin; k++) {
            double f = (double)k * rate / nfft;
            double w = f < f0 || f > f2 ? 0 : f <= f1 ? (f - f0) / (f1 - f0) : (f2 - f) / (f2 - f1);
            fb[(size_t)m * nbin + k] = (float)w;
        }
    }
    for (int64_t t = 0; !rc && t < frames; t++) {
        int64_t start = t * hop - win / 2; /* centred window, zero outside the signal */
        for (int i = 0; i < nfft; i++) {
            int64_t j = start + i;
            float x = i < win && j >= 0 && j < n ? pcm[j] : 0.0f;
            float hann = (float)(0.5 - 0.5 * cos(2.0 * M_PI * i / win));
            in[i] = (AVComplexFloat){i < win ? x * hann : 0.0f, 0.0f};
        }
        fft(tx, spec, in, sizeof(AVComplexFloat));
        for (int k = 0; k < nbin; k++)
            power[k] = spec[k].re * spec[k].re + spec[k].im * spec[k].im;
        for (int m = 0; m < bins; m++) {
            double e = 0;
            for (int k = 0; k < nbin; k++)
                e += fb[(size_t)m * nbin + k] * power[k];
            out[(size_t)m * frames + t] = (float)log(fmax(e, 1e-10));
        }
    }
    av_tx_uninit(&tx);
    av_free(in);
    av_free(spec);
    free(fb);
    free(power);
    return rc;
}

int dh__decode_audio(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi, uint8_t *dst,
                     size_t cap, dh__decode_stats *st, char *err, size_t errlen)
{
    return dh__decode_item(src, spec, mi, NULL, 0, 1, dst, cap, st, err, errlen);
}

int dh__decode_audio_drawn(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                           const dh_media_draw *dr, uint8_t *dst, size_t cap,
                           dh__decode_stats *st, char *err, size_t errlen)
{
    dh__decode_stats local;
    st = st ? st : &local;
    memset(st, 0, sizeof *st);
    adec a = {.src.fd = -1, .err = err, .errlen = errlen};
    dh__codec_init();
    dh_media_derived md;
    int rc = dh_derive_media_drawn(spec, mi, dr, &md);
    if (rc)
        return afail(&a, rc, "cannot derive the output shape");
    if ((size_t)md.out_bytes > cap)
        return afail(&a, DH_ERANGE, "slot holds %zu bytes, the audio needs %lld", cap,
                     (long long)md.out_bytes);
    int rate = spec->audio.sample_rate;
    int64_t want = (int64_t)ceil(mi->duration_s * rate - 1e-9), got = 0;
    /* The window (the whole item unless the spec cuts one): its samples start at off. */
    int64_t wlen = (int64_t)ceil(dr->span_s * rate - 1e-9);
    int64_t off = DH_MIN(DH_MAX(0, llround(dr->start_s * rate)), DH_MAX(0, want - wlen));
    wlen = DH_MIN(wlen, want);
    int mel = spec->audio.mel_bins > 0, whole = wlen == want;
    float *pcm = mel || !whole ? NULL : (float *)dst; /* NULL: into a.pcm as decoded */
    if (!pcm) { /* what the header claims, up to PCM_RESERVE; more only as it is decoded */
        a.pcmcap = (size_t)DH_MAX(1, DH_MIN(want, PCM_RESERVE));
        if (!(a.pcm = malloc(a.pcmcap * sizeof *a.pcm)))
            return DH_ENOMEM;
    }
    if (!(rc = adec_open(&a, src, mi, rate)))
        rc = decode_all(&a, pcm, want, &got);
    if (!rc && want - got > 0.02 * want + 0.05 * rate)
        rc = afail(&a, DH_ECORRUPT,
                   "the audio lasts %.3f s but its manifest entry says %.3f s: fewer samples",
                   (double)got / rate, mi->duration_s);
    if (!rc && !pcm) { /* the few samples of container rounding, at most 2% + 50 ms more */
        if (dh__grow((void **)&a.pcm, &a.pcmcap, (size_t)DH_MAX(want, 1), sizeof *a.pcm))
            rc = DH_ENOMEM;
        pcm = a.pcm;
    }
    if (!rc) {
        memset(pcm + got, 0, (size_t)(want - got) * sizeof *pcm); /* container rounding */
        st->frames_decoded = got;
        if (mel)
            rc = log_mel(pcm + off, wlen, rate, spec->audio.mel_bins, spec->audio.mel_fps,
                         md.shape[1], (float *)dst);
        else if (!whole)
            memcpy(dst, pcm + off, (size_t)wlen * sizeof *pcm);
        st->bytes_written = rc ? 0 : md.out_bytes;
    }
    adec_close(&a);
    return rc;
}
