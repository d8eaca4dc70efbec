/*
 * nodes_msg.c - the message thread of a several-node run (the layer's files:
 * nodes_int.h): it receives every message, checks it whole against the job
 * (nodes_wire.c: a malformed one stops the run naming its node, it is never
 * read), and hands it to lending or to the agreed moves.
 */
#include "nodes_int.h"

#include <stdlib.h>

void *dh__nodes_message_main(void *arg)
{
    dh_engine *e = arg;
    struct dh__xchg *x = e->x;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        int stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop)
            break;
        int from = -1;
        void *data = NULL;
        size_t len = 0;
        char err[384] = "";
        int rc = e->run.cfg.recv(e->run.cfg.exchange_user, &from, &data, &len, 0.05, err,
                                 sizeof err);
        if (rc == DH_ETIMEDOUT)
            continue;
        int32_t kind = 0;
        if (!rc && (rc = dh__wire_check_msg(&x->lim, from, data, len, &kind, err, sizeof err))) {
            free(data);
            data = NULL;
        }
        if (rc) { /* a node died, or sent what cannot be read: the run stops, naming it */
            pthread_mutex_lock(&e->mu);
            if (!x->err[0])
                dh__msg(x->err, sizeof x->err, "%s", err[0] ? err : dh_strerror(rc));
            dh__eng_fail(e, rc);
            pthread_mutex_unlock(&e->mu);
            break;
        }
        if (kind == M_STEAL) {
            dh__nodes_on_steal(e, from);
        } else if (kind == M_RESULT) {
            dh__nodes_on_result(e, from, data, len);
        } else if (kind == M_TASK) {
            dh__nodes_on_task(e, data);
            data = NULL;
        } else if (kind == M_MOVE) {
            if (dh__nodes_on_move(e, from, data, len))
                data = NULL; /* parked until this node makes the plan it belongs to */
        } else if (kind == M_NOTASK) {
            dh__nodes_on_notask(e, from);
        }
        free(data);
    }
    return NULL;
}
