/* fuzz_manifest_line.c - any bytes as one manifest line: never crash, never leak. */
#include "datahelix.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static dh_manifest *m;
    static int uses;
    char err[512];
    if (!m || ++uses % 4096 == 0) { /* a fresh table now and then bounds memory */
        dh_manifest_free(m);
        dh_manifest_new("", NULL, &m);
    }
    int rc = dh_manifest_parse_line(m, (const char *)data, size, 1, err, sizeof err);
    if (rc == 0) {
        /* Whatever was accepted must read back and derive without error. */
        dh_spec *spec;
        dh_spec_builtin("omni-mix", &spec);
        int64_t i = dh_manifest_count(m) - 1;
        dh_sample_derived sd;
        dh_derive_sample(spec, m, i, &sd, NULL);
        dh_spec_free(spec);
    }
    return 0;
}
