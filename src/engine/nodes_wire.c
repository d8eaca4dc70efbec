/*
 * nodes_wire.c - checks of what another node sent (nodes_wire.h): nothing
 * received is read before its length and counts were checked here.
 */
#include "engine_int.h"
#include "nodes_wire.h"

#include <math.h>
#include <string.h>

size_t dh__wire_result_header(void)
{
    return dh__align_up(sizeof(m_result), ITEM_ALIGN);
}

size_t dh__wire_move_header(int32_t nitems)
{
    return dh__align_up(sizeof(m_move) + (size_t)nitems * sizeof(int32_t), ITEM_ALIGN);
}

/* A TASK: whole, its counts in range, its item sizes summing to at most a batch. */
static int check_task(const dh__wire_limits *lim, const uint8_t *data, size_t len, char *why,
                      size_t whylen)
{
    dh__lend_msg m;
    if (len < sizeof m)
        return dh__fail(why, whylen, DH_EPARSE, "a task of %zu bytes, under its header", len);
    memcpy(&m, data, sizeof m);
    if (m.nitems < 1 || m.nitems > DH__WIRE_MAX_ITEMS ||
        len != sizeof m + (size_t)m.nitems * sizeof(int64_t))
        return dh__fail(why, whylen, DH_EPARSE, "a task claiming %d items in %zu bytes",
                        (int)m.nitems, len);
    if (m.sample < 0 || m.sample >= lim->samples || m.pos < 0 || m.step < 0 ||
        m.nparts < 1 || m.nparts > lim->max_parts || m.part < 0 || m.part >= m.nparts ||
        m.rank < 0 || m.rank >= lim->nodes * lim->ranks_per_node || !(m.pred_cost >= 0))
        return dh__fail(why, whylen, DH_EPARSE, "a task of sample %lld, part %d of %d, rank %d: "
                        "outside the job", (long long)m.sample, (int)m.part, (int)m.nparts,
                        (int)m.rank);
    int64_t total = 0;
    for (int32_t j = 0; j < m.nitems; j++) {
        int64_t b;
        memcpy(&b, data + sizeof m + (size_t)j * sizeof b, sizeof b);
        if (b < 0 || b > lim->max_bytes - total)
            return dh__fail(why, whylen, DH_EPARSE, "a task whose items exceed a batch (%lld "
                            "bytes at most)", (long long)lim->max_bytes);
        total += b;
    }
    return 0;
}

/* A RESULT: its header whole, its payload inside the message and at most a batch. */
static int check_result(const dh__wire_limits *lim, const uint8_t *data, size_t len, char *why,
                        size_t whylen)
{
    m_result r;
    if (len < sizeof r)
        return dh__fail(why, whylen, DH_EPARSE, "a result of %zu bytes, under its header", len);
    memcpy(&r, data, sizeof r);
    size_t head = dh__wire_result_header();
    if (r.payload < 0 || r.payload > lim->max_bytes ||
        (r.payload > 0 ? len != head + (size_t)r.payload : len != sizeof r && len != head))
        return dh__fail(why, whylen, DH_EPARSE, "a result declaring %lld bytes in a message of "
                        "%zu", (long long)r.payload, len);
    if (r.status > 0 || r.pos < 0 || r.part < 0 || r.part >= lim->max_parts)
        return dh__fail(why, whylen, DH_EPARSE, "a result of part %d at position %lld, status "
                        "%d", (int)r.part, (long long)r.pos, (int)r.status);
    return 0;
}

/* A MOVE: its statuses and items inside the message, its step position in range. */
static int check_move(const dh__wire_limits *lim, const uint8_t *data, size_t len, char *why,
                      size_t whylen)
{
    m_move h;
    if (len < sizeof h)
        return dh__fail(why, whylen, DH_EPARSE, "a moved sample of %zu bytes, under its header",
                        len);
    memcpy(&h, data, sizeof h);
    if (h.nitems < 0 || h.nitems > DH__WIRE_MAX_ITEMS || len < dh__wire_move_header(h.nitems) ||
        h.payload < 0 || (uint64_t)h.payload != len - dh__wire_move_header(h.nitems) ||
        h.payload > lim->max_bytes)
        return dh__fail(why, whylen, DH_EPARSE, "a moved sample claiming %d items and %lld "
                        "bytes in %zu", (int)h.nitems, (long long)h.payload, len);
    if (h.step < 0 || h.k < 0 || h.k >= lim->global_batch || h.sample < 0 ||
        h.sample >= lim->samples)
        return dh__fail(why, whylen, DH_EPARSE, "a moved sample at step %lld, position %lld "
                        "(sample %lld): outside the job", (long long)h.step, (long long)h.k,
                        (long long)h.sample);
    return 0;
}

int dh__wire_check_msg(const dh__wire_limits *lim, int from, const void *data, size_t len,
                       int32_t *kind, char *why, size_t whylen)
{
    m_head h = {0, 0};
    *kind = 0;
    if (from < 0 || from >= lim->nodes)
        return dh__fail(why, whylen, DH_EPARSE, "a message from node %d of %d", from, lim->nodes);
    if (!data || len < sizeof h)
        return dh__fail(why, whylen, DH_EPARSE, "node %d sent a message of %zu bytes", from,
                        len);
    memcpy(&h, data, sizeof h);
    if (h.node != from)
        return dh__fail(why, whylen, DH_EPARSE, "node %d sent a message signed by node %d",
                        from, (int)h.node);
    char what[200] = "";
    int rc = 0;
    switch (h.kind) {
    case M_STEAL:
    case M_NOTASK:
        if (len != sizeof h)
            rc = dh__fail(what, sizeof what, DH_EPARSE, "a %zu-byte request", len);
        break;
    case M_TASK:
        rc = check_task(lim, data, len, what, sizeof what);
        break;
    case M_RESULT:
        rc = check_result(lim, data, len, what, sizeof what);
        break;
    case M_MOVE:
        rc = check_move(lim, data, len, what, sizeof what);
        break;
    default:
        rc = dh__fail(what, sizeof what, DH_EPARSE, "a message of unknown kind %d",
                      (int)h.kind);
    }
    if (rc)
        return dh__fail(why, whylen, rc, "node %d sent %s (another DataHelix version, or a "
                        "fault)", from, what);
    *kind = h.kind;
    return 0;
}

int dh__wire_check_record(const dh__wire_limits *lim, int k, xrec *r, char *why, size_t whylen)
{
    if (r->node != k || r->kind < X_HELLO || r->kind > X_CUTOFF)
        return dh__fail(why, whylen, DH_EPARSE, "node %d sent a malformed exchange record (kind "
                        "%d, signed node %d)", k, (int)r->kind, (int)r->node);
    r->policy[sizeof r->policy - 1] = 0; /* strings another node wrote: terminated here */
    r->workload[sizeof r->workload - 1] = 0;
    r->msg[sizeof r->msg - 1] = 0;
    if (r->kind == X_STEP &&
        (r->step < 0 || r->mv_room < 0 || r->mv_ids < 0 || r->failed < 0 ||
         r->failed > lim->global_batch || r->late_bytes < 0 || r->late_bytes > lim->max_bytes ||
         !(r->truth_gpu >= 0 && r->truth_gpu_max >= 0 && r->truth_cpu >= 0) ||
         !isfinite(r->truth_gpu + r->truth_gpu_max + r->truth_cpu) || !isfinite(r->mv_load)))
        return dh__fail(why, whylen, DH_EPARSE, "node %d sent a malformed step record (step "
                        "%lld, %lld failed samples of %lld, a late task of %lld bytes, truth "
                        "%g / %g / %g, load %g)", k, (long long)r->step, (long long)r->failed,
                        (long long)lim->global_batch, (long long)r->late_bytes, r->truth_gpu,
                        r->truth_gpu_max, r->truth_cpu, r->mv_load);
    if (r->kind == X_CUTOFF && (r->step < -1 || r->step >= lim->steps))
        return dh__fail(why, whylen, DH_EPARSE, "node %d sent a malformed cutoff record (its "
                        "ranks took step %lld in a run of %lld steps)", k, (long long)r->step,
                        (long long)lim->steps);
    int more_ok = r->kind != X_FINAL || (r->more_steps >= 0 && r->more_steps <= DH__MORE_STEPS);
    for (int64_t j = 0; more_ok && r->kind == X_FINAL && j < r->more_steps; j++)
        more_ok = r->more_failed[j] >= 0 && r->more_failed[j] <= lim->global_batch;
    if (!more_ok)
        return dh__fail(why, whylen, DH_EPARSE, "node %d sent a malformed final record (%lld "
                        "steps past the closed ones, or their failed samples)", k,
                        (long long)r->more_steps);
    return 0;
}

int dh__wire_check_greetings(const dh__wire_greeting *all, int nodes,
                             const dh__wire_greeting *mine, char *why, size_t whylen)
{
    uint64_t record_bytes = mine->record_bytes;
    for (int k = 0; k < nodes; k++) {
        const dh__wire_greeting *g = &all[k];
        if (g->magic != DH__WIRE_MAGIC)
            return dh__fail(why, whylen, DH_EPARSE, "node %d is not a DataHelix agent of a "
                            "compatible release (its first record is not a greeting)", k);
        if (g->version != DH__WIRE_VERSION)
            return dh__fail(why, whylen, DH_EPARSE, "node %d speaks node protocol version %u, "
                            "this node %u: every node must run the same DataHelix release", k,
                            (unsigned)g->version, (unsigned)DH__WIRE_VERSION);
        if (g->node != k)
            return dh__fail(why, whylen, DH_EPARSE, "the greeting of node %d says node %d", k,
                            (int)g->node);
        /* named whether or not their records' sizes differ (an aligned size may not) */
        if (g->ranks && g->ranks != mine->ranks)
            return dh__fail(why, whylen, DH_EINVAL, "node %d was started with --ranks %d, this "
                            "node with %d (every node must run the same command)", k,
                            (int)g->ranks, (int)mine->ranks);
        if (g->global_batch && g->global_batch != mine->global_batch)
            return dh__fail(why, whylen, DH_EINVAL, "node %d was started with --batch %llu, "
                            "this node with %llu (every node must run the same command)", k,
                            (unsigned long long)g->global_batch,
                            (unsigned long long)mine->global_batch);
        if (g->record_bytes != record_bytes)
            return dh__fail(why, whylen, DH_EINVAL, "node %d exchanges records of %llu bytes, "
                            "this node %llu: the nodes were started with different --ranks, "
                            "--batch or --policy (every node must run the same command)", k,
                            (unsigned long long)g->record_bytes,
                            (unsigned long long)record_bytes);
    }
    return 0;
}
