/*
 * comm_ag.c - the per-step exchange of one record per node (comm_int.h).
 *
 * DESIGN: up to AG_P2P_MAX nodes the exchange is point to point: each node
 * sends its record to every other (small: MPI delivers it eagerly, with no
 * call on the receiving side) and collects theirs, one message per node per
 * round, in order per sender. It completes as soon as the last record
 * lands, where a nonblocking allgather's rounds each wait for both sides to
 * call MPI (1.3 ms per exchange here on 2 nodes polled every 200 us,
 * against 70 us spun on). Above it, MPI_Iallgather (N log N messages
 * instead of N^2). One exchange at a time, in the comm's own buffers: a
 * caller that gives up never leaves MPI writing into its memory.
 */
#include "comm_int.h"

#include <stdlib.h>
#include <string.h>

int dh__comm_ag_progress(dh__comm *c, int ask, double now)
{
    size_t len = c->ag_len;
    if (ask) {
        c->ag_active = 1;
        if (c->size > AG_P2P_MAX || !c->ag_sreq || !c->ag_have) {
            MPI_Iallgather(c->ag_mine, (int)len, MPI_BYTE, c->ag_all, (int)len, MPI_BYTE, c->comm,
                           &c->ag_req);
        } else {
            memcpy(c->ag_all + (size_t)c->rank * len, c->ag_mine, len);
            memset(c->ag_have, 0, (size_t)c->size);
            c->ag_have[c->rank] = 1;
            c->ag_got = 1;
            for (int k = 0; k < c->size; k++)
                c->ag_sreq[k] = MPI_REQUEST_NULL;
            for (int k = 0; k < c->size; k++)
                if (k != c->rank)
                    MPI_Isend(c->ag_mine, (int)len, MPI_BYTE, k, TAG_AG, c->comm, &c->ag_sreq[k]);
        }
    }
    if (!c->ag_active)
        return 0;
    int done = 0;
    if (c->ag_req != MPI_REQUEST_NULL) {
        MPI_Test(&c->ag_req, &done, MPI_STATUS_IGNORE);
    } else {
        for (int k = 0; k < c->size; k++) { /* the next record from each sender is this round's */
            int flag = 0;
            if (c->ag_have[k] ||
                MPI_Iprobe(k, TAG_AG, c->comm, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS || !flag)
                continue;
            MPI_Recv(c->ag_all + (size_t)k * len, (int)len, MPI_BYTE, k, TAG_AG, c->comm,
                     MPI_STATUS_IGNORE);
            c->ag_have[k] = 1;
            c->ag_got++;
            pthread_mutex_lock(&c->mu);
            c->last_seen[k] = now;
            pthread_mutex_unlock(&c->mu);
        }
        if (c->ag_got == c->size)
            MPI_Testall(c->size, c->ag_sreq, &done, MPI_STATUSES_IGNORE);
    }
    c->ag_active = !done;
    return done;
}

int dh__comm_allgather(dh__comm *c, const void *mine, void *all, size_t len, double timeout_s,
                       char *err, size_t errlen)
{
    if (!len || len > INT32_MAX / (size_t)c->size)
        return dh__comm_fail(err, errlen, DH_EINVAL, "an exchanged record must be 1 to %d bytes",
                        (int)(INT32_MAX / c->size));
    double deadline = dh__comm_mono() + timeout_s;
    pthread_mutex_lock(&c->mu);
    int rc = dh__comm_dead_locked(c, err, errlen);
    if (!rc && c->ag != AG_IDLE)
        rc = dh__comm_fail(err, errlen, DH_EPEER, "the previous exchange never completed");
    if (!rc && c->ag_len != len) {
        free(c->ag_mine);
        free(c->ag_all);
        c->ag_mine = malloc(len);
        c->ag_all = malloc(len * (size_t)c->size);
        c->ag_len = c->ag_mine && c->ag_all ? len : 0;
        if (!c->ag_len)
            rc = dh__comm_fail(err, errlen, DH_ENOMEM, "out of memory");
    }
    if (!rc) {
        memcpy(c->ag_mine, mine, len);
        c->ag = AG_ASKED;
        pthread_cond_signal(&c->wake);
        while (c->ag != AG_DONE && !(rc = dh__comm_dead_locked(c, err, errlen)))
            if (dh__comm_wait_until(c, deadline)) {
                rc = dh__comm_fail(err, errlen, DH_ETIMEDOUT,
                              "the per-step exchange did not complete within %.1f s", timeout_s);
                break;
            }
        if (!rc) {
            memcpy(all, c->ag_all, len * (size_t)c->size);
            c->ag = AG_IDLE;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}
