/* fuzz_image_header.c - any bytes as a JPEG or PNG header (the prober's image readers). */
#include "codec/codec.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dh_limits lim;
    dh_limits_default(&lim);
    dh_probe_result r;
    char err[256];
    memset(&r, 0, sizeof r);
    if (size >= 8 && !memcmp(data, "\x89PNG\r\n\x1a\n", 8))
        dh__probe_png(data, size, (int64_t)size, &lim, &r, err, sizeof err);
    else
        dh__probe_jpeg("fuzz", data, size, (int64_t)size, &lim, &r, err, sizeof err);
    return 0;
}
