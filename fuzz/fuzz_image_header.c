/* fuzz_image_header.c - any bytes as a JPEG or PNG header (the prober's image readers). */
#include "codec/codec.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    dh_limits lim;
    dh_limits_default(&lim);
    dh_probe_result r;
    char err[256];
    memset(&r, 0, sizeof r);
    int rc = size >= 8 && !memcmp(data, "\x89PNG\r\n\x1a\n", 8)
                 ? dh__probe_png(data, size, (int64_t)size, &lim, &r, err, sizeof err)
                 : dh__probe_jpeg("fuzz", data, size, (int64_t)size, &lim, &r, err, sizeof err);
    /* An accepted header has a size the loader would accept. */
    if (rc == 0 && (r.info.width <= 0 || r.info.height <= 0 ||
                    (int64_t)r.info.width * r.info.height > lim.max_pixels))
        abort();
    if (rc == 0)
        dh_probe_result_clear(&r);
    return 0;
}
