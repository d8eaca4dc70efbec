/* fuzz_spec.c - any bytes as a preprocessing spec; accepted specs derive a fixed sample. */
#include "datahelix.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dh_spec *s = NULL;
    char err[256];
    if (dh_spec_parse((const char *)data, size, &s, err, sizeof err) == 0) {
        static const int32_t kf[] = {0, 30, 60};
        dh_media_info v = {.type = DH_MEDIA_VIDEO, .width = 1920, .height = 1080, .fps = 30,
                           .frames = 90, .duration_s = 3, .keyframes = kf, .keyframe_count = 3};
        dh_media_info im = {.type = DH_MEDIA_IMAGE, .codec = DH_CODEC_JPEG, .width = 3000,
                            .height = 17};
        dh_media_info a = {.type = DH_MEDIA_AUDIO, .duration_s = 35, .sample_rate = 16000};
        const dh_media_info *all[] = {&v, &im, &a};
        for (int k = 0; k < 3; k++) {
            dh_media_derived d;
            int rc = dh_derive_media(s, all[k], &d);
            /* An accepted spec derives, or says the output is over the item limit; what it
             * derives is a real, bounded shape. */
            if (rc == DH_ELIMIT)
                continue;
            int64_t bytes = d.elem_bytes;
            for (int i = 0; i < d.ndim; i++)
                bytes *= d.shape[i];
            if (rc || d.out_bytes != bytes || d.out_bytes <= 0 || d.out_bytes > DH_MAX_ITEM_BYTES ||
                d.tokens < 0) {
                fprintf(stderr, "invariant broken: media %d: rc %d, %lld bytes\n", k, rc,
                        (long long)d.out_bytes);
                abort();
            }
        }
        if (dh_spec_hash(s) != dh_spec_hash(s))
            abort();
        dh_spec_free(s);
    }
    return 0;
}
