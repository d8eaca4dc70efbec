/* fuzz_serve_wire.c - any bytes as a BATCH message the agent sent a trainer (the client
 * trusts nothing in it: src/dist/proto.h). Accepted, every view it describes lies inside its
 * pool, and ids, texts and metas are exactly one terminated string per sample. */
#include "dist/proto.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int count_strings(const char *s, uint32_t len)
{
    int n = 0;
    for (uint32_t k = 0; k < len; k++)
        n += s[k] == 0;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > UINT32_MAX)
        return 0;
    uint8_t *p = malloc(size ? size : 1); /* 8-aligned, as a received payload is */
    memcpy(p, data, size);
    const int64_t pools[2] = {1 << 20, 4096};
    dh__batch_parts b;
    if (dh__proto_batch_parts(p, (uint32_t)size, pools, &b) == 0) {
        const dh__batch_head *h = &b.head;
        int64_t pool = h->pool >= 0 ? pools[h->pool] : 0;
        if (h->nsamples < 0 || h->nitems < 0 || h->bytes < 0 ||
            (h->pool >= 0 && (h->offset < 0 || h->offset + h->bytes > pool)) ||
            (h->pool < 0 && h->nitems))
            abort();
        for (int32_t k = 0; k < h->nitems; k++) {
            const dh_batch_item *it = &b.items[k];
            if (it->offset < 0 || it->bytes < 0 || it->offset + it->bytes > h->bytes)
                abort();
        }
        if (count_strings(b.ids, h->ids_bytes) != h->nsamples ||
            count_strings(b.texts, h->text_bytes) != h->nsamples ||
            count_strings(b.metas, h->meta_bytes) != h->nsamples)
            abort();
        if ((const uint8_t *)b.metas + h->meta_bytes != p + size)
            abort(); /* every byte accounted for */
    }
    free(p);
    return 0;
}
