/*
 * bench_augment.c - what random augmentation costs to decode, and what the CPU model
 * predicts for it: every sample of a manifest decoded on one thread under each spec given,
 * `epochs` times (each epoch its own draws), CPU time per sample measured; beside it the
 * model's prediction of the same draws (derive.c's work with the default constants).
 *   usage: bench_augment MANIFEST EPOCHS SPEC...
 * Each sample is decoded under every spec back to back (in a rotating order), so the
 * machine's drift and the first decode's colder caches hit them alike. Prints per spec: measured CPU ms per sample and its change against the first
 * spec, the same predicted, and the measured/predicted ratio's spread (the model's error
 * once one scale factor is fitted, as calibration does).
 */
#include "bench_clock.h"
#include "codec/decode.h"
#include "cost/cost.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Decodes sample i under spec as epoch `epoch` drew it; its CPU seconds, or < 0. */
static double decode_sample(const dh_manifest *m, const dh_spec *spec, int64_t i, int64_t epoch,
                            uint8_t **buf, size_t *cap)
{
    dh_sample_info si;
    dh_manifest_sample(m, i, &si);
    double spent = 0;
    for (int32_t j = 0; j < si.media_count; j++) {
        dh_media_info mi;
        dh_media_draw d;
        dh_media_derived md;
        char path[4096], err[512] = "";
        dh_manifest_media(m, i, j, &mi);
        if (dh_media_draw_of(spec, &mi, 1, epoch, si.id, j, &d) ||
            dh_derive_media_drawn(spec, &mi, &d, &md))
            return -1;
        if ((size_t)md.out_bytes > *cap) {
            free(*buf);
            *cap = (size_t)md.out_bytes;
            *buf = malloc(*cap);
            memset(*buf, 1, *cap); /* pre-fault: the engine's pool pages are warm */
        }
        const char *dir = dh_manifest_dir(m);
        snprintf(path, sizeof path, "%s%s%s", dir, dir[0] ? "/" : "", mi.path);
        dh__media_src src = DH__ITEM_SRC(dir, mi.path, &mi);
        double t0 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
        int rc = dh__decode_item(&src, spec, &mi, &d, 0, 1, *buf, *cap, NULL, err, sizeof err);
        spent += bench_seconds(CLOCK_THREAD_CPUTIME_ID) - t0;
        if (rc) {
            fprintf(stderr, "%s: %s\n", path, err);
            return -1;
        }
    }
    return spent;
}

#define MAX_SPECS 8

int main(int argc, char **argv)
{
    dh_manifest *m = NULL;
    if (argc < 4 || argc - 3 > MAX_SPECS || dh_manifest_load(argv[1], NULL, &m, NULL)) {
        fprintf(stderr, "usage: bench_augment MANIFEST EPOCHS SPEC... (at most %d)\n", MAX_SPECS);
        return 2;
    }
    int64_t epochs = atoll(argv[2]), n = dh_manifest_count(m);
    int ns = argc - 3;
    dh_spec *spec[MAX_SPECS];
    for (int a = 0; a < ns; a++) {
        char err[512];
        if (dh_spec_load(argv[3 + a], &spec[a], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 2;
        }
    }
    dh__cpu_model cpu;
    dh__cpu_model_default(&cpu);
    uint8_t *buf = NULL;
    size_t cap = 0;
    double meas[MAX_SPECS] = {0}, pred[MAX_SPECS] = {0}, lr[MAX_SPECS] = {0}, lr2[MAX_SPECS] = {0};
    /* Each sample under every spec back to back: the machine's drift hits them alike. */
    for (int64_t e = 0; e < epochs; e++)
        for (int64_t i = 0; i < n; i++)
            for (int j = 0; j < ns; j++) {
                int a = (int)((i + e + j) % ns); /* each spec first as often as the others */
                double p, c = decode_sample(m, spec[a], i, e, &buf, &cap);
                if (c < 0 || dh__cpu_drawn_cost(&cpu, spec[a], m, i, 1, e, &p))
                    return 1;
                meas[a] += c;
                pred[a] += p;
                lr[a] += log(c / p);
                lr2[a] += log(c / p) * log(c / p);
            }
    double k = (double)(n * epochs);
    for (int a = 0; a < ns; a++) {
        double mean = lr[a] / k, sd = sqrt(fmax(0, lr2[a] / k - mean * mean));
        printf("%s: %lld samples x %lld epochs: measured %.3f ms/sample (%+.1f%% vs the first), "
               "predicted %.3f ms/sample (%+.1f%%), log(measured/predicted) sd %.3f\n",
               argv[3 + a], (long long)n, (long long)epochs, 1e3 * meas[a] / k,
               100 * (meas[a] / meas[0] - 1), 1e3 * pred[a] / k, 100 * (pred[a] / pred[0] - 1),
               sd);
        dh_spec_free(spec[a]);
    }
    free(buf);
    dh_manifest_free(m);
    return 0;
}
