/* fuzz_spec.c - any bytes as a preprocessing spec; accepted specs derive a fixed sample. */
#include "datahelix.h"

#include <stddef.h>
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
        dh_media_derived d;
        dh_derive_media(s, &v, &d);
        dh_derive_media(s, &im, &d);
        dh_derive_media(s, &a, &d);
        dh_spec_free(s);
    }
    return 0;
}
