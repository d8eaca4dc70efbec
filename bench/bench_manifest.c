/*
 * bench_manifest.c - manifest load rate and descriptor memory.
 *
 *   bench_manifest gen FILE N [SEED]   write an N-line synthetic manifest
 *   bench_manifest load FILE           load it, print lines/s and bytes/sample
 *   bench_manifest jansson FILE        baseline: only json_loadb + json_decref per line
 *
 * The synthetic lines mimic a video corpus (one video per sample, 2-5
 * keyframes, sim truth), about 240 bytes each, like docs/DESIGN.md's example.
 */
#include "bench_clock.h"
#include "datahelix.h"

#include <jansson.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static int gen(const char *path, long n, unsigned seed)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    srand(seed);
    static const int res[][2] = {{340, 256}, {640, 360}, {1280, 720}, {1920, 1080}};
    for (long i = 0; i < n; i++) {
        const int *r = res[rand() % 4];
        int fps = rand() % 2 ? 25 : 30, secs = 2 + rand() % 9, frames = fps * secs;
        fprintf(f,
                "{\"id\":\"s%07ld\",\"text_tokens\":%d,\"media\":[{\"type\":\"video\","
                "\"path\":\"v/%07ld.mp4\",\"codec\":\"h264\",\"width\":%d,\"height\":%d,"
                "\"fps\":%d,\"frames\":%d,\"duration\":%d.0,\"keyframes\":[0,%d],"
                "\"bytes\":%d}],\"sim\":{\"cpu_ms\":%.1f,\"gpu_ms\":%.1f}}\n",
                i, 10 + rand() % 400, i, r[0], r[1], fps, frames, secs, frames / 2,
                100000 + rand() % 5000000, (rand() % 1000) / 10.0, (rand() % 300) / 10.0);
    }
    return fclose(f) != 0;
}

static int load(const char *path)
{
    dh_load_opts opts;
    dh_load_opts_default(&opts);
    dh_manifest *m = NULL;
    dh_load_stats st;
    double t0 = bench_seconds(CLOCK_MONOTONIC);
    int rc = dh_manifest_load(path, &opts, &m, &st);
    double secs = bench_seconds(CLOCK_MONOTONIC) - t0;
    if (rc) {
        fprintf(stderr, "load failed: %s\n", dh_strerror(rc));
        return 1;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("lines %lld loaded %lld skipped %lld in %.3f s: %.0f lines/s\n", (long long)st.lines,
           (long long)st.loaded, (long long)st.skipped, secs, st.lines / secs);
    printf("descriptor table %.1f bytes/sample; peak RSS %.1f MiB = %.1f bytes/sample\n",
           (double)dh_manifest_memory(m) / st.loaded, ru.ru_maxrss / 1024.0,
           ru.ru_maxrss * 1024.0 / st.loaded);
    dh_manifest_free(m);
    return 0;
}

/* What parsing every line with jansson alone costs (no validation, no table). */
static int jansson_only(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long lines = 0, bad = 0;
    double t0 = bench_seconds(CLOCK_MONOTONIC);
    while ((n = getline(&line, &cap, f)) > 0) {
        json_error_t e;
        json_t *j = json_loadb(line, (size_t)n, JSON_REJECT_DUPLICATES, &e);
        bad += !j;
        json_decref(j);
        lines++;
    }
    double secs = bench_seconds(CLOCK_MONOTONIC) - t0;
    free(line);
    fclose(f);
    printf("jansson only: %ld lines (%ld invalid) in %.3f s: %.0f lines/s\n", lines, bad, secs,
           lines / secs);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "gen"))
        return gen(argv[2], atol(argv[3]), argc > 4 ? (unsigned)atoi(argv[4]) : 1);
    if (argc == 3 && !strcmp(argv[1], "load"))
        return load(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "jansson"))
        return jansson_only(argv[2]);
    fprintf(stderr, "usage: bench_manifest gen FILE N [SEED] | load FILE | jansson FILE\n");
    return 2;
}
