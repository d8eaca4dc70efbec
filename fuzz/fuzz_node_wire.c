/* fuzz_node_wire.c - any bytes as what another node sent (src/engine/nodes_wire.h): a
 * message, an exchange record, or a round of greetings. The check ends with 0 or DH_EPARSE
 * and a sentence; what it accepts holds exactly what its fields declare, within the job. */
#include "engine/engine_int.h"
#include "engine/nodes_wire.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const dh__wire_limits lim = {4, 2, 100, 16, 1 << 20, 8, 0, 64};

static void message(int from, const uint8_t *m, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1); /* aligned, as a received message is */
    memcpy(copy, m, len);
    char why[300] = "";
    int32_t kind = -1;
    int rc = dh__wire_check_msg(&lim, from, copy, len, &kind, why, sizeof why);
    if (rc && (rc != DH_EPARSE || !why[0]))
        abort();
    if (!rc) {
        m_head h;
        memcpy(&h, copy, sizeof h);
        if (h.node != from || from < 0 || from >= lim.nodes || kind != h.kind)
            abort();
        if (kind == M_TASK) {
            dh__lend_msg t;
            memcpy(&t, copy, sizeof t);
            if (t.nitems < 1 || len != sizeof t + (size_t)t.nitems * 8 || t.sample < 0 ||
                t.sample >= lim.samples || t.part < 0 || t.part >= t.nparts)
                abort();
            int64_t sum = 0;
            for (int32_t j = 0; j < t.nitems; j++) {
                int64_t b;
                memcpy(&b, copy + sizeof t + (size_t)j * 8, 8);
                if (b < 0)
                    abort();
                sum += b;
            }
            if (sum > lim.max_bytes)
                abort();
        } else if (kind == M_RESULT) {
            m_result r;
            memcpy(&r, copy, sizeof r);
            if (r.payload < 0 || (r.payload && dh__wire_result_header() + (size_t)r.payload != len))
                abort();
        } else if (kind == M_MOVE) {
            m_move mv;
            memcpy(&mv, copy, sizeof mv);
            if (mv.nitems < 0 || dh__wire_move_header(mv.nitems) + (size_t)mv.payload != len ||
                mv.k < 0 || mv.k >= lim.global_batch)
                abort();
        } else if (len != sizeof h) {
            abort();
        }
    }
    free(copy);
}

static void record(int k, const uint8_t *m, size_t len)
{
    size_t bytes = sizeof(xrec) + 2 * sizeof(xrank);
    xrec *r = calloc(1, bytes);
    memcpy(r, m, len < bytes ? len : bytes);
    char why[300] = "";
    int rc = dh__wire_check_record(&lim, k, r, why, sizeof why);
    if (rc && !why[0])
        abort();
    if (!rc && (r->node != k || r->kind < X_HELLO || r->kind > X_CUTOFF ||
                !memchr(r->msg, 0, sizeof r->msg) || !memchr(r->policy, 0, sizeof r->policy)))
        abort();
    if (!rc && r->kind == X_CUTOFF && (r->step < -1 || r->step >= lim.steps))
        abort();
    free(r);
}

static void greetings(const uint8_t *m, size_t len)
{
    int n = (int)(len / sizeof(dh__wire_greeting));
    if (n < 1 || n > 8)
        return;
    dh__wire_greeting *all = malloc((size_t)n * sizeof *all);
    memcpy(all, m, (size_t)n * sizeof *all);
    char why[300] = "";
    dh__wire_greeting mine = {DH__WIRE_MAGIC, DH__WIRE_VERSION, 960, 0, 8, 64};
    int rc = dh__wire_check_greetings(all, n, &mine, why, sizeof why);
    if (rc && !why[0])
        abort();
    for (int k = 0; !rc && k < n; k++)
        if (all[k].magic != DH__WIRE_MAGIC || all[k].version != DH__WIRE_VERSION ||
            all[k].node != k || all[k].record_bytes != 960)
            abort();
    free(all);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int mode = data[0] % 3, who = data[1] % 5 - (data[1] >= 250); /* -1 .. 4 */
    if (mode == 0)
        message(who, data + 2, size - 2);
    else if (mode == 1)
        record(who, data + 2, size - 2);
    else
        greetings(data + 2, size - 2);
    return 0;
}
