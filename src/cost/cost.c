/*
 * cost.c - CPU and GPU cost models, the per-sample cost table and online
 * calibration (see cost.h for the roles of prediction and truth).
 *
 * CPU starting constants are those of the docs/WORKLOADS.md for one core
 * with software decode: H.264 3.5 ns per decoded pixel (HEVC and VP9 1.5x,
 * AV1 2x), JPEG 8 ns per decoded source pixel (after DCT-domain scaling), PNG
 * 3x JPEG, resize and colour conversion 1 ns per output pixel, FLAC plus
 * log-mel 0.3 ms per second of audio, container open and each seek 1 ms.
 */
#include "cost.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dh__cpu_model_default(dh__cpu_model *m)
{
    memset(m, 0, sizeof *m);
    m->open_s = 1e-3;
    m->image_open_s = 0.2e-3;
    m->seek_s = 1e-3;
    for (int c = 0; c < DH_CODEC_COUNT; c++)
        m->decode_ns_per_px[c] = 3.5;
    m->decode_ns_per_px[DH_CODEC_HEVC] = 5.25;
    m->decode_ns_per_px[DH_CODEC_VP9] = 5.25;
    m->decode_ns_per_px[DH_CODEC_AV1] = 7.0;
    m->decode_ns_per_px[DH_CODEC_JPEG] = 8.0;
    m->decode_ns_per_px[DH_CODEC_PNG] = 24.0;
    m->resize_ns_per_px = 1.0;
    m->audio_s_per_s = 0.3e-3;
}

double dh__cpu_media_cost(const dh__cpu_model *m, const dh_media_info *mi,
                          const dh_media_derived *md)
{
    double decode = (double)md->decode_pixels * m->decode_ns_per_px[mi->codec] * 1e-9;
    double resize = (double)md->resize_pixels * m->resize_ns_per_px * 1e-9;
    switch (mi->type) {
    case DH_MEDIA_VIDEO:
        return m->open_s + md->seeks * m->seek_s + decode + resize;
    case DH_MEDIA_IMAGE:
        return m->image_open_s + decode + resize;
    default:
        return m->open_s + mi->duration_s * m->audio_s_per_s;
    }
}

double dh__lognormal_noise(uint64_t seed, int64_t i, uint64_t stream, double sigma)
{
    if (sigma <= 0)
        return 1.0;
    dh__rng r;
    dh__rng_seed(&r, dh__mix64(seed ^ dh__mix64((uint64_t)i * 0x9e3779b97f4a7c15ULL + stream)));
    /* Box-Muller from two uniforms in (0, 1]. */
    double u1 = ((double)(dh__rng_next(&r) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(dh__rng_next(&r) >> 11) / 9007199254740992.0;
    double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
    return exp(sigma * z - 0.5 * sigma * sigma); /* mean 1 */
}

static int media_class(const dh_media_info *mi)
{
    if (mi->type == DH_MEDIA_VIDEO)
        return mi->codec == DH_CODEC_H264 ? DH_CLS_VIDEO_H264 : DH_CLS_VIDEO_OTHER;
    if (mi->type == DH_MEDIA_IMAGE)
        return mi->codec == DH_CODEC_JPEG ? DH_CLS_JPEG : DH_CLS_IMAGE_OTHER;
    return DH_CLS_AUDIO;
}

static int alloc_table(dh__samples *s, int64_t n)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    size_t k = (size_t)(n > 0 ? n : 1);
    s->row = dh__aligned_alloc(sizeof *s->row, k * sizeof *s->row);
    dh__huge_hint(s->row, k * sizeof *s->row); /* read at random by sample */
    s->segments = dh__table_alloc(k * sizeof *s->segments);
    s->tokens = dh__table_alloc(k * sizeof *s->tokens);
    if (!s->row || !s->segments || !s->tokens) {
        dh__samples_free(s);
        return DH_ENOMEM;
    }
    return 0;
}

/* Derives one sample's features and predicted CPU cost; returns 0 or an error. */
static int build_one(const dh_manifest *m, const dh_spec *spec, const dh__cpu_model *cpu,
                     int64_t i, dh__samples *s)
{
    dh_sample_info si;
    dh_sample_derived sd;
    dh_media_derived md[256];
    int rc = dh_derive_sample(spec, m, i, &sd, md);
    if (rc)
        return rc;
    dh_manifest_sample(m, i, &si);
    double cost = 0, top = -1, v = 0, v2 = 0;
    int cls = DH_CLS_TEXT, segments = 0;
    for (int32_t j = 0; j < si.media_count; j++) {
        dh_media_info mi;
        dh_manifest_media(m, i, j, &mi);
        double c = dh__cpu_media_cost(cpu, &mi, &md[j]);
        cost += c;
        if (c > top) {
            top = c;
            cls = media_class(&mi);
        }
        v += (double)md[j].latents;
        v2 += (double)md[j].latents * (double)md[j].latents;
        segments += md[j].seeks;
    }
    s->row[i] = (dh__sample_row){.feat = {.t = (float)sd.tokens,
                                          .t2 = (float)((double)sd.tokens * (double)sd.tokens),
                                          .v = (float)v,
                                          .v2 = (float)v2},
                                 .bytes = sd.out_bytes,
                                 .cpu_pred = (float)cost,
                                 .cls = (uint8_t)cls};
    s->segments[i] = segments > 0 ? segments : 1;
    s->tokens[i] = sd.tokens;
    return 0;
}

/* A range of the table built on one thread; the lowest sample that failed is kept. */
typedef struct {
    const dh_manifest *m;
    const dh_spec *spec;
    const dh__cpu_model *cpu;
    dh__samples *s;
    _Atomic int64_t bad; /* the first sample that failed (n: none) */
} build_job;

static void build_range(void *ctx, int64_t lo, int64_t hi)
{
    build_job *j = ctx;
    for (int64_t i = lo; i < hi && i < j->bad; i++) { /* past a failure below: no need */
        int rc = build_one(j->m, j->spec, j->cpu, i, j->s);
        if (!rc)
            continue;
        int64_t was = j->bad; /* keep the lowest: each range stops at its own first */
        while (i < was && !atomic_compare_exchange_weak(&j->bad, &was, i))
            ;
        return;
    }
}

/* Items per thread at least: a table of fewer is built on the caller's alone. */
#define BUILD_GRAIN 65536

int dh__samples_build(const dh_manifest *m, const dh_spec *spec, const dh__cpu_model *cpu,
                      dh__samples *s, char *err, size_t errlen)
{
    int64_t n = dh_manifest_count(m);
    int rc = alloc_table(s, n);
    if (rc)
        return dh__fail(err, errlen, rc, "out of memory for the cost table of %lld samples",
                        (long long)n);
    /* Each sample's row is its own: a large table is built on the CPUs the run has while
     * its workers are not yet started (a third of a large simulation's setup, on one). */
    build_job j = {.m = m, .spec = spec, .cpu = cpu, .s = s, .bad = n};
    dh__parallel_for(n, BUILD_GRAIN, build_range, &j);
    if (j.bad < n) {
        int64_t i = j.bad;
        rc = build_one(m, spec, cpu, i, s); /* its reason, again (a derivation is pure) */
        dh_sample_info si;
        dh_manifest_sample(m, i, &si);
        if (rc == DH_ELIMIT)
            dh__msg(err, errlen, "sample \"%s\": with this spec one of its media items "
                    "would be over %lld MiB of output: lower the spec's frames, resize or "
                    "tiles", si.id, (long long)(DH_MAX_ITEM_BYTES >> 20));
        else
            dh__msg(err, errlen, "sample \"%s\": cannot derive its costs: %s", si.id,
                    dh_strerror(rc));
        dh__samples_free(s);
        return rc;
    }
    return 0;
}

int dh_sample_cpu_cost(const dh_spec *spec, const dh_manifest *m, int64_t i, double *seconds)
{
    dh_sample_info si;
    dh_media_derived md[256];
    dh_sample_derived sd;
    int rc = dh_manifest_sample(m, i, &si);
    if (rc || !spec || !seconds)
        return rc ? rc : DH_EINVAL;
    if ((rc = dh_derive_sample(spec, m, i, &sd, md)))
        return rc;
    dh__cpu_model cpu;
    dh__cpu_model_default(&cpu);
    double total = 0;
    for (int32_t j = 0; j < si.media_count; j++) {
        dh_media_info mi;
        dh_manifest_media(m, i, j, &mi);
        total += dh__cpu_media_cost(&cpu, &mi, &md[j]);
    }
    *seconds = total;
    return 0;
}

int dh__cpu_drawn_cost(const dh__cpu_model *cpu, const dh_spec *spec, const dh_manifest *m,
                       int64_t i, uint64_t seed, int64_t epoch, double *seconds)
{
    dh_sample_info si;
    int rc = dh_manifest_sample(m, i, &si);
    double total = 0;
    for (int32_t j = 0; !rc && j < si.media_count; j++) {
        dh_media_info mi;
        dh_media_draw dr;
        dh_media_derived md;
        dh_manifest_media(m, i, j, &mi);
        if (!(rc = dh_media_draw_of(spec, &mi, seed, epoch, si.id, j, &dr)) &&
            !(rc = dh_derive_media_drawn(spec, &mi, &dr, &md)))
            total += dh__cpu_media_cost(cpu, &mi, &md);
    }
    *seconds = total;
    return rc;
}

void dh__samples_free(dh__samples *s)
{
    free(s->row);
    free(s->segments);
    free(s->tokens);
    memset(s, 0, sizeof *s);
}

void dh__gpu_scale_for_rho(dh__gpu_model *g, const dh__samples *s, int ranks, int workers,
                           int64_t global_batch, double rho)
{
    double cpu = 0, gpu = 0;
    for (int64_t i = 0; i < s->n; i++) {
        cpu += s->row[i].cpu_pred;
        gpu += dh__gpu_sample_cost(g, &s->row[i].feat);
    }
    if (s->n == 0 || gpu <= 0 || rho <= 0)
        return;
    double per_rank = (double)global_batch / ranks;
    double cpu_per_batch_per_worker = cpu / s->n * (double)global_batch / workers;
    double step_unscaled = 1.05 * per_rank * gpu / s->n; /* + 5% fixed step cost */
    double k = cpu_per_batch_per_worker / rho / step_unscaled;
    g->a_llm *= k;
    g->b_llm *= k;
    g->a_enc *= k;
    g->b_enc *= k;
    g->c0 = 0.05 * per_rank * gpu / s->n * k;
}

void dh__gpu_classes(const dh__gpu_model *g, const dh__samples *s, int classes, uint16_t *cls)
{
    uint64_t top = 0;
    for (int64_t i = 0; i < s->n; i++)
        top = DH_MAX(top, dh__cost_half_octave(dh__gpu_sample_cost(g, &s->row[i].feat)));
    for (int64_t i = 0; i < s->n; i++) {
        uint64_t h = dh__cost_half_octave(dh__gpu_sample_cost(g, &s->row[i].feat));
        cls[i] = (uint16_t)dh__cost_class(h, top, (uint64_t)classes);
    }
}

void dh__calib_init(dh__calib *c)
{
    memset(c, 0, sizeof *c);
    for (int k = 0; k < DH_CLS_COUNT; k++)
        c->cpu_scale[k] = 1.0; /* exp(0) */
    c->gpu_factor = 1.0;
}

/* EWMA weight: plain averaging for the first observations, then a window of ~64. */
static double ewma_weight(int64_t n)
{
    return n < 64 ? 1.0 / (double)(n + 1) : 1.0 / 64.0;
}

void dh__calib_cpu_observe(dh__calib *c, int cls, double predicted_raw, double measured)
{
    if (predicted_raw <= 0 || measured <= 0)
        return;
    double used = dh__calib_cpu(c, cls, predicted_raw);
    c->cpu_ape_sum += fabs(measured - used) / measured;
    c->cpu_ape_n++;
    double w = ewma_weight(c->cpu_n[cls]++);
    c->cpu_log_ratio[cls] += w * (log(measured / predicted_raw) - c->cpu_log_ratio[cls]);
    c->cpu_scale[cls] = exp(c->cpu_log_ratio[cls]); /* once here, not per prediction */
}

double dh__calib_gpu(const dh__calib *c, double predicted)
{
    return predicted * c->gpu_factor;
}

void dh__calib_gpu_observe(dh__calib *c, double predicted_raw, double measured)
{
    if (predicted_raw <= 0 || measured <= 0)
        return;
    double used = dh__calib_gpu(c, predicted_raw);
    c->gpu_ape_sum += fabs(measured - used) / measured;
    c->gpu_ape_n++;
    double w = ewma_weight(c->gpu_n++);
    c->gpu_factor += w * (measured / predicted_raw - c->gpu_factor);
}

double dh__calib_cpu_mape(const dh__calib *c)
{
    return c->cpu_ape_n ? c->cpu_ape_sum / (double)c->cpu_ape_n : 0.0;
}

double dh__calib_gpu_mape(const dh__calib *c)
{
    return c->gpu_ape_n ? c->gpu_ape_sum / (double)c->gpu_ape_n : 0.0;
}
