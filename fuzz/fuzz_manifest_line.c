/* fuzz_manifest_line.c - any bytes as one manifest line: never crash, never leak, and an
 * accepted line derives under every built-in spec. */
#include "datahelix.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
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
        /* Whatever was accepted must read back and derive without error under every
         * built-in spec, within the per-item output limit (the invariant the commands rely
         * on: an accepted line never sinks inspect, run or sim). */
        static dh_spec *specs[16];
        static int nspecs = -1;
        if (nspecs < 0) {
            const char *const *names = dh_workload_names();
            for (nspecs = 0; names[nspecs] && nspecs < 16; nspecs++)
                if (dh_spec_builtin(names[nspecs], &specs[nspecs]))
                    abort();
        }
        int64_t i = dh_manifest_count(m) - 1;
        dh_sample_info si;
        if (dh_manifest_sample(m, i, &si))
            abort();
        for (int k = 0; k < nspecs; k++) {
            dh_sample_derived sd;
            int drc = dh_derive_sample(specs[k], m, i, &sd, NULL);
            if (drc || sd.out_bytes < 0 || sd.tokens < 0) {
                fprintf(stderr, "invariant broken: accepted line does not derive under spec %d: "
                        "%s\n", k, dh_err_name(drc));
                abort();
            }
        }
    }
    return 0;
}
