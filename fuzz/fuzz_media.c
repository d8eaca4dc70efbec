/*
 * fuzz_media.c - any bytes as a media file in memory: probed by content
 * (libavformat through the custom AVIO context, or the JPEG/PNG header
 * readers), then, when the probe accepts it, decoded with a small spec by the
 * decoder its type names (FFmpeg, TurboJPEG, libpng), straight into a slot of
 * exactly the derived size. Never crashes, hangs or leaks (libFuzzer and
 * ASan check those), and asserts the invariants the engine relies on:
 *   - an accepted probe describes media the manifest loader would accept
 *     (sizes positive and within the default limits, a usable frame rate and
 *     duration that agree with the frame count, keyframes ascending and
 *     inside the frame count);
 *   - what the probe describes derives under the spec;
 *   - a decoder returns 0 or one of the library's negative codes, with a
 *     message when it fails, and writes nothing past its slot;
 *   - the same under random augmentation (every other input by its size):
 *     a drawn clip, random resized crop, flip and audio window derive and
 *     decode alike.
 * The time limit on the source bounds a slow input like a real worker's.
 */
#include "codec/decode.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(ok, ...)                                                                             \
    do {                                                                                           \
        if (!(ok)) {                                                                               \
            fprintf(stderr, "invariant broken: " __VA_ARGS__);                                     \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static dh_spec *spec_of(const char *json)
{
    dh_spec *s = NULL;
    char err[256];
    CHECK(dh_spec_parse(json, strlen(json), &s, err, sizeof err) == 0, "spec: %s", err);
    return s;
}

/* A negative errno, or one of the library's own codes. */
static int known_code(int rc)
{
    return rc < 0 && (rc > -4096 || strcmp(dh_err_name(rc), "DH_EUNKNOWN") != 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static dh_spec *plain, *aug;
    if (!plain) {
        dh_quiet_ffmpeg_logs();
        plain = spec_of("{\"video\":{\"frames\":3,\"resize\":{\"mode\":\"fixed\",\"size\":32}},"
                        "\"image\":{\"resize\":{\"mode\":\"fixed\",\"size\":32}},"
                        "\"audio\":{\"sample_rate\":8000,\"mel_bins\":8,\"mel_fps\":50}}");
        aug = spec_of("{\"video\":{\"frames\":3,\"clip_s\":0.5,\"random_start\":true,"
                      "\"fps_jitter\":0.5,\"flip\":0.5,\"resize\":{\"mode\":"
                      "\"random_resized_crop\",\"size\":32}},\"image\":{\"flip\":0.5,"
                      "\"resize\":{\"mode\":\"random_crop\",\"size\":32}},\"audio\":{"
                      "\"sample_rate\":8000,\"mel_bins\":8,\"mel_fps\":50,\"clip_s\":0.3,"
                      "\"random_offset\":true}}");
    }
    dh_limits lim;
    dh_limits_default(&lim);
    lim.max_frames = 100000; /* keep a hostile frame count from decoding for minutes */
    dh__media_src src = {.path = "fuzz", .mem = data, .memlen = size, .limit_s = 2.0};
    dh_probe_result r;
    char err[512] = "";
    int rc = dh__probe_src(&src, &lim, &r, err, sizeof err);
    if (rc) {
        CHECK(known_code(rc), "probe returned %d", rc);
        return 0;
    }
    const dh_media_info *mi = &r.info;
    if (mi->type != DH_MEDIA_AUDIO)
        CHECK(mi->width > 0 && mi->height > 0 &&
                  (int64_t)mi->width * mi->height <= lim.max_pixels,
              "probe accepted %dx%d", mi->width, mi->height);
    if (mi->type == DH_MEDIA_VIDEO) {
        CHECK(mi->frames > 0 && mi->frames <= lim.max_frames && mi->fps >= 0.001 &&
                  mi->duration_s > 0 &&
                  fabs((double)mi->frames / mi->fps - mi->duration_s) <=
                      0.25 * mi->duration_s + 1.0,
              "probe accepted %lld frames at %g fps lasting %g s", (long long)mi->frames,
              mi->fps, mi->duration_s);
        for (int32_t k = 0; k < mi->keyframe_count; k++)
            CHECK(mi->keyframes[k] >= 0 && mi->keyframes[k] < mi->frames &&
                      (k == 0 || mi->keyframes[k] > mi->keyframes[k - 1]),
                  "keyframe %d of %d is %d (frames %lld)", k, mi->keyframe_count,
                  mi->keyframes[k], (long long)mi->frames);
    }
    if (mi->type == DH_MEDIA_AUDIO)
        CHECK(mi->duration_s > 0 && mi->duration_s <= lim.max_duration_s,
              "probe accepted %g s of audio", mi->duration_s);
    const dh_spec *spec = size & 1 ? aug : plain;
    dh_media_draw d;
    rc = dh_media_draw_of(spec, mi, size, (int64_t)(size >> 1), "fuzz", 0, &d);
    CHECK(rc == 0, "an accepted probe draws nothing: %d", rc);
    dh_media_derived md;
    rc = dh_derive_media_drawn(spec, mi, &d, &md);
    CHECK(rc == 0 || rc == DH_ELIMIT, "an accepted probe does not derive: %d", rc);
    if (rc == 0 && md.out_bytes <= (64 << 20)) {
        uint8_t *slot = malloc((size_t)md.out_bytes ? (size_t)md.out_bytes : 1);
        size_t cap = (size_t)md.out_bytes; /* exactly: ASan sees any write past it */
        err[0] = 0;
        rc = dh__decode_item(&src, spec, mi, &d, 0, 1, slot, cap, NULL, err, sizeof err);
        CHECK(rc == 0 || (known_code(rc) && err[0]), "decode returned %d with \"%s\"", rc, err);
        free(slot);
    }
    dh_probe_result_clear(&r);
    return 0;
}
