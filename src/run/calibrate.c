/*
 * calibrate.c - measuring this machine: decode a few samples on the calling
 * thread and compare the CPU time with the cost model's prediction. The
 * factor (dh_run_config.cpu_cost_scale) moves the model's starting
 * constants to this machine before a run; online calibration refines it.
 */
#include "../codec/decode.h"
#include "../cost/cost.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CALIBRATION_PASSES 2

static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Decodes media item mi of one sample into a scratch buffer; 0 or the decoder's error. */
static int decode_item(const char *path, const dh_spec *spec, const dh_media_info *mi,
                       const dh_media_derived *md)
{
    uint8_t *buf = malloc((size_t)DH_MAX(md->out_bytes, 1));
    if (!buf)
        return DH_ENOMEM;
    size_t n = (size_t)md->out_bytes;
    dh__media_src src = DH__ITEM_SRC(NULL, path, mi);
    int rc = mi->type == DH_MEDIA_VIDEO   ? dh__decode_video(&src, spec, mi, buf, n, NULL, NULL, 0)
             : mi->type == DH_MEDIA_IMAGE ? dh__decode_image(&src, spec, mi, buf, n, NULL, NULL, 0)
                                          : dh__decode_audio(&src, spec, mi, buf, n, NULL, NULL, 0);
    free(buf);
    return rc;
}

/* Decodes sample i; *pred gets its predicted CPU seconds. 0, or why it did not decode. */
static int decode_sample(const dh_manifest *m, const dh_spec *spec, const dh__cpu_model *cpu,
                         int64_t i, double *pred)
{
    dh_sample_derived sd;
    dh_media_derived md[256];
    dh_sample_info si;
    dh_manifest_sample(m, i, &si);
    int rc = si.media_count > 256 ? DH_ELIMIT : dh_derive_sample(spec, m, i, &sd, md);
    char path[4096];
    *pred = 0;
    for (int32_t j = 0; j < si.media_count && !rc; j++) {
        dh_media_info mi;
        dh_manifest_media(m, i, j, &mi);
        *pred += dh__cpu_media_cost(cpu, &mi, &md[j]);
        const char *dir = dh_manifest_dir(m);
        snprintf(path, sizeof path, "%s%s%s", dir, dir[0] ? "/" : "", mi.path);
        rc = decode_item(path, spec, &mi, &md[j]);
    }
    return rc;
}

int dh_measure_cpu_scale(const dh_manifest *m, const dh_spec *spec, int64_t count, double *scale,
                         char *err, size_t errlen)
{
    if (!m || !spec || !scale || count < 1)
        return DH_EINVAL;
    dh__cpu_model cpu;
    dh__cpu_model_default(&cpu);
    int64_t n = DH_MIN(count, dh_manifest_count(m));
    /* Two passes, the lower factor kept: the first pays cold caches and whatever else the
     * machine was doing for a moment (on a shared 2-core VM one pass moved by 30%). */
    double best = 0;
    for (int pass = 0; pass < CALIBRATION_PASSES; pass++) {
        double predicted = 0, measured = 0;
        int64_t used = 0;
        for (int64_t i = 0; i < n; i++) {
            double before = thread_cpu(), pred = 0;
            int rc = decode_sample(m, spec, &cpu, i, &pred);
            if (rc == DH_ENOMEM)
                return dh__fail(err, errlen, rc, "out of memory while calibrating");
            if (rc || pred <= 0)
                continue; /* a failing sample says nothing about decode speed */
            measured += thread_cpu() - before;
            predicted += pred;
            used++;
        }
        if (!used || predicted <= 0)
            return dh__fail(err, errlen, DH_EDECODE,
                            "no sample of the first %lld decoded: cannot calibrate",
                            (long long)n);
        double f = measured / predicted;
        best = pass == 0 || f < best ? f : best;
    }
    *scale = best;
    return 0;
}
