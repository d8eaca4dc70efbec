/*
 * bench_decode.c - DataHelix's video decoder on whole files: every frame
 * decoded and converted to RGB24 at native size, one thread, CPU time.
 *   usage: bench_decode FILE...
 * Compare with the ffmpeg tool on the same work:
 *   ffmpeg -threads 1 -i FILE -vf format=rgb24 -f null -
 */
#include "bench_clock.h"
#include "codec/decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    const char *text = "{\"video\":{\"frames\":100000,\"resize\":{\"mode\":\"native\"}}}";
    dh_spec *spec;
    char err[512];
    if (argc < 2 || dh_spec_parse(text, strlen(text), &spec, err, sizeof err))
        return 2;
    double total = 0;
    int64_t frames = 0;
    for (int i = 1; i < argc; i++) {
        dh_probe_result pr;
        if (dh_probe_file(argv[i], NULL, &pr, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", argv[i], err);
            return 1;
        }
        dh_media_derived md;
        dh_derive_media(spec, &pr.info, &md);
        uint8_t *buf = malloc((size_t)md.out_bytes);
        memset(buf, 1, (size_t)md.out_bytes); /* pre-fault: the engine's pool pages are warm */
        dh__decode_stats st;
        double t0 = bench_seconds(CLOCK_PROCESS_CPUTIME_ID);
        int rc = dh__decode_video(DH__SRC(argv[i]), spec, &pr.info, buf, (size_t)md.out_bytes, &st, err, sizeof err);
        double dt = bench_seconds(CLOCK_PROCESS_CPUTIME_ID) - t0;
        if (rc) {
            fprintf(stderr, "%s: %s\n", argv[i], err);
            return 1;
        }
        printf("%s: %lld frames %dx%d in %.3f s CPU (%.1f frames/s)\n", argv[i],
               (long long)md.sampled_frames, pr.info.width, pr.info.height, dt,
               md.sampled_frames / dt);
        total += dt;
        frames += md.sampled_frames;
        free(buf);
        dh_probe_result_clear(&pr);
    }
    printf("datahelix: %lld frames in %.3f s CPU: %.1f frames/s\n", (long long)frames, total,
           frames / total);
    dh_spec_free(spec);
    return 0;
}
