/*
 * workloads.c - the eleven workloads of the docs/WORKLOADS.md as seeded
 * descriptor generators, each with its GPU model shape, load factor rho and
 * global batch. Samples are built in memory and handed to the manifest's
 * builder (dh__manifest_add_built), which checks them by the rules a parsed
 * line meets and commits them as a line is committed: generated and
 * user-supplied manifests share one validated table, without printing and
 * scanning JSON for every generated sample (that was two thirds of a large
 * simulation's setup). Distributions follow the docs/WORKLOADS.md table; where it is
 * silent (keyframe interval of some corpora, resolution mix of llava) the
 * choice is stated next to the generator.
 *
 * GPU shapes are relative: dh__gpu_scale_for_rho() later scales them so the
 * workload's rho holds on the run's ranks, workers and global batch. A
 * quadratic coefficient b = a / x0 makes the quadratic term equal the linear
 * one at x0 tokens or latents.
 */
#include "workloads.h"
#include "../catalog/catalog.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEN_MAX_MEDIA 12 /* interleaved-docs' cap */

struct gen_ctx {
    dh__rng *r;
    int64_t i;
    int64_t text_tokens;
    int nmedia;
    dh__built_media media[GEN_MAX_MEDIA];
    size_t kf_first[GEN_MAX_MEDIA]; /* into kf */
    char path[GEN_MAX_MEDIA][48];
    int64_t *kf; /* the sample's keyframes, all media */
    size_t nkf, kfcap;
    int oom;
};

static double unif(dh__rng *r, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(dh__rng_next(r) >> 11) / 9007199254740992.0);
}

static double lognormal_clip(dh__rng *r, double median, double sigma, double lo, double hi)
{
    double z = dh__lognormal_noise(dh__rng_next(r), 0, 0, 1.0); /* exp(Z - 1/2) */
    double x = median * pow(z * exp(0.5), sigma);               /* median * exp(sigma Z) */
    return DH_MIN(hi, DH_MAX(lo, x));
}

/* Index into weights (summing to 1). */
static int pick(dh__rng *r, const double *w, int n)
{
    double u = unif(r, 0, 1), acc = 0;
    for (int k = 0; k < n; k++)
        if (u < (acc += w[k]))
            return k;
    return n - 1;
}

/* v >= 0 in decimal at p, zero-padded to at least width digits; returns the end (names are
 * made for every generated sample: printf's parsing of its format was a tenth of the cost). */
static char *put_dec(char *p, int64_t v, int width)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0 || n < width);
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char *put_str(char *p, const char *s)
{
    size_t n = strlen(s);
    memcpy(p, s, n);
    return p + n;
}

/* The sample's next media item, its path dir/<sample>[_k]ext (k < 0: none); NULL past the
 * cap. */
static dh__built_media *add_media(gen_ctx *g, dh_media_type type, dh_codec codec,
                                  const char *dir, int k, const char *ext)
{
    if (g->nmedia == GEN_MAX_MEDIA)
        return NULL;
    int j = g->nmedia++;
    dh__built_media *b = &g->media[j];
    *b = (dh__built_media){.type = type, .codec = codec, .path = g->path[j]};
    char *p = put_dec(put_str(g->path[j], dir), g->i, 1);
    if (k >= 0)
        p = put_dec(put_str(p, "_"), k, 1);
    *put_str(p, ext) = 0;
    g->kf_first[j] = g->nkf;
    return b;
}

/* A video media object with keyframes every gop frames. fps is a whole number of frames a
 * second in every generator (a manifest line printed it exactly). */
static void video(gen_ctx *g, dh_codec codec, int w, int h, double fps, double secs, int gop)
{
    dh__built_media *b = add_media(g, DH_MEDIA_VIDEO, codec, "v/", -1, ".mp4");
    if (!b)
        return;
    b->width = w;
    b->height = h;
    b->fps = fps;
    b->frames = DH_MAX(1, llround(secs * fps));
    for (int64_t k = 0; k < b->frames && k < 100000L * gop; k += gop) {
        if (dh__grow((void **)&g->kf, &g->kfcap, g->nkf + 1, sizeof *g->kf)) {
            g->oom = 1;
            return;
        }
        g->kf[g->nkf++] = k;
    }
    b->nkeyframes = g->nkf - g->kf_first[g->nmedia - 1];
}

static void image(gen_ctx *g, dh_codec codec, int w, int h, int k)
{
    dh__built_media *b = add_media(g, DH_MEDIA_IMAGE, codec, "i/", k,
                                   codec == DH_CODEC_JPEG ? ".jpg" : ".png");
    if (b) {
        b->width = w;
        b->height = h;
    }
}

/* Width and height from a short side and an aspect ratio (w/h), even sizes. */
static void aspect_dims(double short_side, double aspect, int *w, int *h)
{
    double ws = aspect >= 1 ? short_side * aspect : short_side;
    double hs = aspect >= 1 ? short_side : short_side / aspect;
    *w = 2 * (int)lround(ws / 2);
    *h = 2 * (int)lround(hs / 2);
}

static void begin(gen_ctx *g, int64_t text_tokens)
{
    g->text_tokens = text_tokens;
}

static void gen_kinetics(gen_ctx *g)
{
    static const int res[][2] = {{340, 256}, {640, 360}, {1280, 720}, {1920, 1080}};
    static const double w[] = {0.40, 0.25, 0.30, 0.05};
    const int *wh = res[pick(g->r, w, 4)];
    double secs = unif(g->r, 0, 1) < 0.8 ? 10.0 : unif(g->r, 2, 10);
    double fps = unif(g->r, 0, 1) < 0.5 ? 25 : 30;
    begin(g, 0);
    video(g, DH_CODEC_H264, wh[0], wh[1], fps, secs, 250);
}

/* WebVid: 596x336, keyframes every 2-5 s. */
static void webvid_video(gen_ctx *g)
{
    double secs = lognormal_clip(g->r, 15, 0.6, 4, 60);
    video(g, DH_CODEC_H264, 596, 336, 30, secs, (int)(30 * unif(g->r, 2, 5)));
}

static void gen_webvid(gen_ctx *g)
{
    begin(g, (int64_t)unif(g->r, 10, 41));
    webvid_video(g);
}

/* Keyframes every 2 s (not stated in docs/WORKLOADS.md; a common encoder setting). */
static void gen_panda(gen_ctx *g)
{
    static const int res[][2] = {{1920, 1080}, {1280, 720}, {3840, 2160}};
    static const double w[] = {0.60, 0.35, 0.05};
    const int *wh = res[pick(g->r, w, 3)];
    begin(g, (int64_t)unif(g->r, 20, 81));
    video(g, DH_CODEC_H264, wh[0], wh[1], 30, unif(g->r, 2, 20), 60);
}

/* Keyframes every 5 s; short side 240-1080, aspect 9:16 .. 21:9. */
static void gen_native(gen_ctx *g)
{
    static const double shorts[] = {240, 360, 480, 720, 1080};
    static const double w[] = {0.15, 0.25, 0.25, 0.25, 0.10};
    int wd, ht;
    aspect_dims(shorts[pick(g->r, w, 5)], unif(g->r, 0, 1) < 0.2 ? 9.0 / 16 : unif(g->r, 1.0, 2.33),
                &wd, &ht);
    begin(g, 0);
    video(g, DH_CODEC_H264, wd, ht, 30, lognormal_clip(g->r, 20, 0.7, 3, 120), 150);
}

/* Resolution mix 480p/720p/1080p (20/60/20%: not stated in docs/WORKLOADS.md). */
static void gen_llava(gen_ctx *g)
{
    static const int res[][2] = {{854, 480}, {1280, 720}, {1920, 1080}};
    static const double w[] = {0.2, 0.6, 0.2};
    const int *wh = res[pick(g->r, w, 3)];
    begin(g, (int64_t)lognormal_clip(g->r, 300, 0.8, 50, 2000));
    video(g, DH_CODEC_H264, wh[0], wh[1], 30, lognormal_clip(g->r, 40, 0.6, 10, 180), 250);
}

static void laion_image(gen_ctx *g, int k)
{
    int w, h;
    aspect_dims(lognormal_clip(g->r, 512, 0.45, 256, 2048), unif(g->r, 0.5, 2.0), &w, &h);
    image(g, DH_CODEC_JPEG, w, h, k);
}

static void gen_laion(gen_ctx *g)
{
    begin(g, (int64_t)unif(g->r, 5, 78));
    laion_image(g, 0);
}

static void gen_anyres(gen_ctx *g)
{
    double long_side = exp(unif(g->r, log(300), log(3000)));
    double aspect = unif(g->r, 0.5, 2.0);
    int w = (int)(aspect >= 1 ? long_side : long_side * aspect);
    int h = (int)(aspect >= 1 ? long_side / aspect : long_side);
    begin(g, (int64_t)lognormal_clip(g->r, 200, 0.9, 30, 1500));
    image(g, unif(g->r, 0, 1) < 0.7 ? DH_CODEC_JPEG : DH_CODEC_PNG, DH_MAX(w, 16), DH_MAX(h, 16), 0);
}

static void gen_interleaved(gen_ctx *g)
{
    int n = 1;
    while (n < 12 && unif(g->r, 0, 1) > 1.0 / 3.0) /* geometric, mean 3, capped at 12 */
        n++;
    begin(g, (int64_t)lognormal_clip(g->r, 1000, 0.7, 200, 4000));
    for (int k = 0; k < n; k++) {
        int w, h;
        aspect_dims(unif(g->r, 256, 1500), unif(g->r, 0.6, 1.8), &w, &h);
        image(g, DH_CODEC_JPEG, w, h, k);
    }
}

/*
 * secs kept to the millisecond: the value a line with "%.3f" gave (strtod's, which the
 * manifest's scanner returns for such a number), without printing and reading it back (a
 * tenth of omni-mix's generation). printf rounds the exact binary value to the nearest
 * thousandth, ties to even; fma gives secs * 1000 - n exactly (for secs >= 1 it is a multiple
 * of 2^-52 under 1), so n is that thousandth; n / 1000, rounded once, is the double nearest
 * the decimal, which is strtod's. (Checked against printf and strtod on 20 million values,
 * ties and near-ties included.)
 */
static double to_ms(double secs)
{
    double n = nearbyint(secs * 1000), e = fma(secs, 1000, -n);
    if (e > 0.5 || (e == 0.5 && fmod(n, 2) != 0))
        n += 1;
    else if (e < -0.5 || (e == -0.5 && fmod(n, 2) != 0))
        n -= 1;
    return n / 1000;
}

static void speech_audio(gen_ctx *g, double secs)
{
    dh__built_media *b = add_media(g, DH_MEDIA_AUDIO, DH_CODEC_FLAC, "a/", -1, ".flac");
    if (!b)
        return;
    b->rate = 16000;
    b->channels = 1;
    b->duration = to_ms(secs); /* (secs >= 1: gen_speech clips it) */
}

static void gen_speech(gen_ctx *g)
{
    double secs = lognormal_clip(g->r, 10, 0.6, 1, 35);
    begin(g, (int64_t)(3 * secs));
    speech_audio(g, secs);
}

static void gen_omni(gen_ctx *g)
{
    double u = unif(g->r, 0, 1);
    if (u < 0.5)
        gen_laion(g);
    else if (u < 0.8)
        gen_webvid(g);
    else
        gen_speech(g);
}

static void gen_t2v(gen_ctx *g)
{
    static const int res[][2] = {{854, 480}, {1280, 720}, {1920, 1080}};
    static const double w[] = {0.40, 0.45, 0.15};
    const int *wh = res[pick(g->r, w, 3)];
    double fps = unif(g->r, 0, 1) < 0.5 ? 24 : 30;
    begin(g, (int64_t)unif(g->r, 20, 201));
    video(g, DH_CODEC_H264, wh[0], wh[1], fps, unif(g->r, 5, 10), (int)(2 * fps));
}

static const dh__workload suite[] = {
    /* name, rho, G, {a_llm, b_llm, a_enc, b_enc, c0}, generator */
    {"kinetics-clips", 0.9, 64, {0, 0, 1, 0, 0}, gen_kinetics},
    {"webvid-caption", 1.0, 128, {0.5, 0, 1, 0, 0}, gen_webvid},
    {"panda-hires", 1.2, 32, {0, 0, 1, 1.0 / 20000, 0}, gen_panda},
    {"native-res-video", 0.8, 32, {0, 0, 1, 1.0 / 5000, 0}, gen_native},
    {"llava-video-sft", 0.7, 32, {1, 1.0 / 8000, 0.1, 0, 0}, gen_llava},
    {"laion-images", 0.9, 256, {0.2, 0, 1, 0, 0}, gen_laion},
    {"anyres-images", 0.8, 64, {1, 1.0 / 8000, 0.5, 0, 0}, gen_anyres},
    {"interleaved-docs", 0.8, 32, {1, 1.0 / 4000, 0.2, 0, 0}, gen_interleaved},
    {"speech-asr", 0.6, 128, {0.3, 0, 1, 1.0 / 300, 0}, gen_speech},
    {"omni-mix", 1.0, 128, {1, 1.0 / 8000, 0.5, 0, 0}, gen_omni},
    {"t2v-diffusion", 1.0, 16, {0.05, 0, 1, 1.0 / 10000, 0}, gen_t2v},
};
#define NSUITE (sizeof suite / sizeof suite[0])

const dh__workload *dh__workload_find(const char *name)
{
    for (size_t k = 0; name && k < NSUITE; k++)
        if (!strcmp(suite[k].name, name))
            return &suite[k];
    return NULL;
}

const char *const *dh_workload_names(void)
{
    static const char *const names[] = {
        "kinetics-clips", "webvid-caption",   "panda-hires", "native-res-video",
        "llava-video-sft", "laion-images",    "anyres-images", "interleaved-docs",
        "speech-asr",     "omni-mix",         "t2v-diffusion", NULL};
    return names;
}

int64_t dh_workload_global_batch(const char *name)
{
    const dh__workload *w = dh__workload_find(name);
    return w ? w->global_batch : DH_ENOENT;
}

int dh_workload_generate(const char *name, int64_t samples, uint64_t seed, dh_manifest **out)
{
    return dh__workload_generate_until(name, samples, seed, NULL, NULL, out);
}

/*
 * Generating runs as a pipeline of two: one thread draws the samples (the workload's one
 * seeded stream, in sample order) into blocks, the caller's checks and commits them (the
 * manifest's rules, its strings, hash and tables). The two were about 2 : 3 of a large
 * simulation's generation on one core. The blocks carry what the draw made, so the
 * manifest is the same with or without the second thread; a small dataset, or a process
 * with one CPU, draws each block before committing it on the caller's thread.
 */
#define GEN_BLOCK 1024 /* samples a block */
#define GEN_RING 4     /* blocks drawn ahead of the commits */
#define GEN_GRAIN 65536 /* a dataset of fewer than two of these is made on one thread */

typedef struct {
    dh__built_media b; /* path and keyframes not set: at path_off and kf_off of its block */
    size_t path_off, kf_off;
} gen_item;

typedef struct {
    int64_t first, n;    /* samples [first, first + n) */
    int64_t oom_at;      /* a sample the block could not hold (its last; -1: none) */
    int64_t text_tokens[GEN_BLOCK];
    int nmedia[GEN_BLOCK];
    gen_item *item;
    size_t nitem, item_cap;
    char *path;
    size_t npath, path_cap;
    int64_t *kf;
    size_t nkf, kf_cap;
} gen_block;

#define GEN_SPANS 24
#define GEN_STR_PER_SAMPLE 32 /* bytes of ids and paths reserved a sample */
#define GEN_POPULATE 65536 /* rows the drawing thread makes present at a time, ahead */

typedef struct {
    const dh__workload *w;
    gen_ctx g;
    int64_t samples;
    dh__manifest_span span[GEN_SPANS]; /* the table's columns as reserved */
    int nspan;
    gen_block ring[GEN_RING];
    int64_t made, taken; /* blocks */
    int stop;            /* the commits gave up: the draw ends */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} gen_pipe;

/* Copies the sample the context holds into block b; 0 or DH_ENOMEM. */
static int block_keep(gen_block *b, const gen_ctx *g)
{
    int64_t k = b->n;
    b->text_tokens[k] = g->text_tokens;
    b->nmedia[k] = g->nmedia;
    if (dh__grow((void **)&b->item, &b->item_cap, b->nitem + (size_t)g->nmedia, sizeof *b->item) ||
        dh__grow((void **)&b->kf, &b->kf_cap, b->nkf + g->nkf, sizeof *b->kf) ||
        dh__grow((void **)&b->path, &b->path_cap, b->npath + (size_t)g->nmedia * 48, 1))
        return DH_ENOMEM;
    for (int j = 0; j < g->nmedia; j++) {
        gen_item *it = &b->item[b->nitem++];
        size_t len = strlen(g->path[j]) + 1;
        it->b = g->media[j];
        it->path_off = b->npath;
        it->kf_off = b->nkf + g->kf_first[j];
        memcpy(b->path + b->npath, g->path[j], len);
        b->npath += len;
    }
    if (g->nkf)
        memcpy(b->kf + b->nkf, g->kf, g->nkf * sizeof *g->kf);
    b->nkf += g->nkf;
    return 0;
}

/* Draws samples [first, first + GEN_BLOCK) (or to the end) into b; stops at one it cannot
 * hold (b->oom_at). */
static void block_draw(gen_pipe *p, gen_block *b, int64_t first)
{
    b->first = first;
    b->n = 0;
    b->oom_at = -1;
    b->nitem = b->npath = b->nkf = 0;
    gen_ctx *g = &p->g;
    for (int64_t i = first; i < p->samples && b->n < GEN_BLOCK; i++) {
        g->i = i;
        g->nmedia = 0;
        g->nkf = 0;
        p->w->generate(g);
        if (g->oom || block_keep(b, g)) {
            b->oom_at = i;
            b->n++;
            return;
        }
        b->n++;
    }
}

/* The drawing thread makes the table's pages for samples [lo, hi) present before the
 * commits write them (media items reckoned at their reservation's rate, one a sample):
 * their first touch's zeroing was an eighth of the committing thread's time. */
static void populate_rows(const gen_pipe *p, int64_t lo, int64_t hi)
{
    for (int k = 0; k < p->nspan; k++) {
        const dh__manifest_span *sp = &p->span[k];
        size_t a = (size_t)lo, b = DH_MIN((size_t)hi, sp->rows); /* a row a sample */
        if (a < b)
            dh__populate((const char *)sp->base + a * sp->elem, (b - a) * sp->elem);
    }
}

static void *draw_main(void *arg)
{
    gen_pipe *p = arg;
    for (int64_t first = 0; first < p->samples; first += GEN_BLOCK) {
        if (first % GEN_POPULATE == 0)
            populate_rows(p, first, DH_MIN(p->samples, first + GEN_POPULATE));
        pthread_mutex_lock(&p->mu);
        while (p->made - p->taken == GEN_RING && !p->stop)
            pthread_cond_wait(&p->cv, &p->mu);
        int stop = p->stop;
        gen_block *b = &p->ring[p->made % GEN_RING];
        pthread_mutex_unlock(&p->mu);
        if (stop)
            break;
        block_draw(p, b, first);
        pthread_mutex_lock(&p->mu);
        p->made++;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (b->oom_at >= 0)
            break; /* the commits stop there */
    }
    return NULL;
}

/* Commits block b's samples in order; 0 or the first error. */
static int block_commit(dh_manifest *m, const gen_block *b, int (*stop)(void *), void *user)
{
    const gen_item *it = b->item;
    for (int64_t k = 0; k < b->n; k++) {
        int64_t i = b->first + k;
        if (stop && i > 0 && (i & 4095) == 0 && stop(user))
            return DH_ECANCELED;
        if (i == b->oom_at)
            return DH_ENOMEM;
        dh__built_media media[GEN_MAX_MEDIA];
        for (int j = 0; j < b->nmedia[k]; j++, it++) {
            media[j] = it->b;
            media[j].path = b->path + it->path_off;
            media[j].keyframes = b->kf + it->kf_off;
        }
        char id[32], err[512];
        *put_dec(put_str(id, "s"), i, 8) = 0;
        dh__built_sample bs = {.id = id, .text_tokens = b->text_tokens[k],
                               .nmedia = b->nmedia[k], .media = media};
        int rc = dh__manifest_add_built(m, &bs, i + 1, err, sizeof err);
        if (rc)
            return rc;
    }
    return 0;
}

/* The blocks in order, drawn by the thread (threaded) or here before each is committed. */
static int pipe_run(gen_pipe *p, dh_manifest *m, int threaded, int (*stop)(void *), void *user)
{
    int rc = 0;
    for (int64_t first = 0; first < p->samples && !rc; first += GEN_BLOCK) {
        gen_block *b = &p->ring[0];
        if (threaded) {
            pthread_mutex_lock(&p->mu);
            while (p->made == p->taken)
                pthread_cond_wait(&p->cv, &p->mu);
            b = &p->ring[p->taken % GEN_RING];
            pthread_mutex_unlock(&p->mu);
        } else {
            block_draw(p, b, first);
        }
        rc = block_commit(m, b, stop, user);
        if (threaded) {
            pthread_mutex_lock(&p->mu);
            p->taken++;
            p->stop = rc != 0;
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return rc;
}

int dh__workload_generate_until(const char *name, int64_t samples, uint64_t seed,
                                int (*stop)(void *), void *user, dh_manifest **out)
{
    const dh__workload *w = dh__workload_find(name);
    if (!out || samples < 0)
        return DH_EINVAL;
    *out = NULL;
    if (!w)
        return DH_ENOENT;
    dh_manifest *m;
    int rc = dh_manifest_new("", NULL, &m);
    if (rc)
        return rc;
    gen_pipe *p = calloc(1, sizeof *p);
    if (!p) {
        dh_manifest_free(m);
        return DH_ENOMEM;
    }
    dh__rng r;
    dh__rng_seed(&r, dh__mix64(seed ^ dh__hash_bytes(name, strlen(name), 7)));
    p->w = w;
    p->g.r = &r;
    p->samples = samples;
    /* A sample's id and path take under 32 bytes; most samples have one media item. */
    int64_t str = samples < INT64_MAX / GEN_STR_PER_SAMPLE ? GEN_STR_PER_SAMPLE * samples : 0;
    rc = dh__manifest_reserve(m, samples, samples, str);
    pthread_t tid;
    int threaded = 0;
    if (!rc && dh__parallel_threads(samples, GEN_GRAIN) > 1) {
        p->nspan = dh__manifest_spans(m, p->span, GEN_SPANS);
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cv, NULL);
        threaded = dh__thread_create(&tid, draw_main, p) == 0;
        if (!threaded) {
            pthread_cond_destroy(&p->cv);
            pthread_mutex_destroy(&p->mu);
        }
    }
    if (!rc)
        rc = pipe_run(p, m, threaded, stop, user);
    if (threaded) {
        pthread_join(tid, NULL);
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
    }
    for (int k = 0; k < GEN_RING; k++) {
        free(p->ring[k].item);
        free(p->ring[k].path);
        free(p->ring[k].kf);
    }
    free(p->g.kf);
    free(p);
    if (rc) {
        dh_manifest_free(m);
        return rc;
    }
    *out = m;
    return 0;
}
