/*
 * comm_live.c - who is who and who is alive (comm_int.h): every node's host
 * and pid once after MPI_Init; a heartbeat to every node each
 * dh__comm_heartbeat(timeout) seconds (one in flight per peer); a node not
 * heard from (heartbeat, message or record) for the timeout is dead, and
 * every wait then ends with a sentence naming it.
 */
#include "comm_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Who is who: every node's host and pid, gathered once after MPI_Init (thread only). */
int dh__comm_learn_names(dh__comm *c)
{
    struct {
        int32_t pid;
        char host[64];
    } me = {(int32_t)getpid(), ""}, *all = calloc((size_t)c->size, sizeof *all);
    c->names = calloc((size_t)c->size, sizeof *c->names);
    c->last_seen = calloc((size_t)c->size, sizeof *c->last_seen);
    if (!all || !c->names || !c->last_seen) {
        free(all);
        return DH_ENOMEM;
    }
    gethostname(me.host, sizeof me.host - 1);
    int rc = MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, c->comm);
    for (int k = 0; k < c->size; k++)
        snprintf(c->names[k], sizeof c->names[k], "node %d (%.64s, pid %d)", k, all[k].host,
                 (int)all[k].pid);
    free(all);
    double now = dh__comm_mono();
    for (int k = 0; k < c->size; k++)
        c->last_seen[k] = now;
    return rc == MPI_SUCCESS ? 0 : DH_EIO;
}

void dh__comm_beat(dh__comm *c, comm_pump *p, double now)
{
    if (now - p->hb_at < dh__comm_heartbeat(c->timeout))
        return;
    static const uint8_t beat = 1;
    for (int k = 0; k < c->size; k++) {
        int done = 1;
        if (k == c->rank)
            continue;
        if (p->hb_req[k] != MPI_REQUEST_NULL)
            MPI_Test(&p->hb_req[k], &done, MPI_STATUS_IGNORE);
        if (done)
            MPI_Isend(&beat, 1, MPI_BYTE, k, TAG_HB, c->comm, &p->hb_req[k]);
    }
    p->hb_at = now;
}

void dh__comm_check_alive_locked(dh__comm *c, double now)
{
    for (int k = 0; k < c->size && c->dead < 0; k++)
        if (k != c->rank && now - c->last_seen[k] > c->timeout) {
            c->dead = k;
            snprintf(c->err, sizeof c->err, "%s stopped responding (nothing heard for %.1f s)",
                     c->names[k], now - c->last_seen[k]);
        }
}

int dh__comm_silent(dh__comm *c, double min_s, double *silent_s)
{
    double now = dh__comm_mono(), worst = 0;
    int who = -1;
    pthread_mutex_lock(&c->mu);
    for (int k = 0; k < c->size; k++)
        if (k != c->rank && now - c->last_seen[k] > worst)
            worst = now - c->last_seen[k], who = k;
    pthread_mutex_unlock(&c->mu);
    if (silent_s)
        *silent_s = worst;
    return worst > min_s ? who : -1;
}
