/*
 * comm_msg.c - messages between nodes on the wire (comm_int.h): a 3-word
 * header (tag, length, the sender's chunk size), then the payload in chunks;
 * received into 64-byte-aligned buffers.
 *
 * DESIGN
 * - A header's chunks are received by receives posted at once: MPI keeps
 *   each sender's messages of one tag in order, so they match.
 * - Delivery is in order per sender: a message is handed to callers only
 *   when it is complete and every earlier message from its sender was
 *   handed over (a small message must not overtake an earlier large one,
 *   which completes later).
 * - A send whose posting failed half-way keeps its buffers until the
 *   requests that were posted complete: MPI may still read them.
 */
#include "comm_int.h"

#include <stdlib.h>
#include <string.h>

void dh__comm_msg_free(msg *m)
{
    if (!m)
        return;
    free(m->data);
    free(m->req);
    free(m);
}

void dh__comm_append(msg **head, msg **tail, msg *m)
{
    m->next = NULL;
    if (*tail)
        (*tail)->next = m;
    else
        *head = m;
    *tail = m;
}

static int nchunks(size_t len, size_t chunk)
{
    return (int)((len + chunk - 1) / chunk);
}

/* Posts m's header and chunks to m->peer; m->nreq counts the requests posted, so a failure
 * half-way leaves m to complete those before it is freed. 0 or an error. */
static int post_send(dh__comm *c, msg *m)
{
    int n = nchunks(m->len, m->chunk);
    m->req = calloc((size_t)n + 1, sizeof *m->req);
    m->nreq = 0;
    if (!m->req)
        return DH_ENOMEM;
    m->hdr[0] = (uint64_t)(uint32_t)m->tag;
    m->hdr[1] = m->len;
    m->hdr[2] = m->chunk;
    if (MPI_Isend(m->hdr, 3, MPI_UINT64_T, m->peer, TAG_HDR, c->comm, &m->req[0]) != MPI_SUCCESS)
        return DH_EIO;
    m->nreq = 1;
    for (int k = 0; k < n; k++) {
        size_t off = (size_t)k * m->chunk, len = DH_MIN(m->chunk, m->len - off);
        if (MPI_Isend(m->data + off, (int)len, MPI_BYTE, m->peer, TAG_DATA, c->comm,
                      &m->req[k + 1]) != MPI_SUCCESS)
            return DH_EIO;
        m->nreq++;
    }
    return 0;
}

/* Receives a header from src and posts its chunks' receives. */
static msg *post_recv(dh__comm *c, int src)
{
    msg *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    MPI_Recv(m->hdr, 3, MPI_UINT64_T, src, TAG_HDR, c->comm, MPI_STATUS_IGNORE);
    m->peer = src;
    m->tag = (int32_t)(uint32_t)m->hdr[0];
    m->len = (size_t)m->hdr[1];
    m->chunk = m->hdr[2] ? (size_t)m->hdr[2] : CHUNK_DEFAULT;
    int n = nchunks(m->len, m->chunk);
    m->data = aligned_alloc(64, (m->len + 63) / 64 * 64 + 64);
    m->req = calloc((size_t)n + 1, sizeof *m->req);
    m->nreq = n;
    if (!m->data || !m->req) { /* cannot keep it: take the chunks into nothing */
        dh__comm_msg_free(m);
        return NULL;
    }
    for (int k = 0; k < n; k++) {
        size_t off = (size_t)k * m->chunk, len = DH_MIN(m->chunk, m->len - off);
        MPI_Irecv(m->data + off, (int)len, MPI_BYTE, src, TAG_DATA, c->comm, &m->req[k]);
    }
    return m;
}

/* Whether every request of m completed. */
static int complete(msg *m)
{
    int flag = 1;
    if (m->nreq > 0)
        MPI_Testall(m->nreq, m->req, &flag, MPI_STATUSES_IGNORE);
    return flag;
}

int dh__comm_sends(dh__comm *c, msg *fresh, comm_pump *p)
{
    int moved = 0;
    while (fresh) { /* new sends: even one that failed half-way waits for what was posted */
        msg *m = fresh;
        fresh = m->next;
        if (post_send(c, m) && m->nreq == 0) { /* nothing posted: the peer times us out */
            dh__comm_msg_free(m);
            continue;
        }
        m->next = p->sending;
        p->sending = m;
        moved = 1;
    }
    for (msg **pp = &p->sending; *pp;) {
        msg *m = *pp;
        if (!complete(m)) {
            pp = &m->next;
            continue;
        }
        *pp = m->next;
        dh__comm_msg_free(m);
        moved = 1;
    }
    return moved;
}

int dh__comm_probe(dh__comm *c, comm_pump *p, double now)
{
    int moved = 0;
    for (int tag = TAG_HB; tag <= TAG_HDR; tag++) {
        int flag = 1;
        MPI_Status st;
        while (MPI_Iprobe(MPI_ANY_SOURCE, tag, c->comm, &flag, &st) == MPI_SUCCESS && flag) {
            int src = st.MPI_SOURCE;
            if (tag == TAG_HB) {
                uint8_t b;
                MPI_Recv(&b, 1, MPI_BYTE, src, TAG_HB, c->comm, MPI_STATUS_IGNORE);
            } else {
                msg *m = post_recv(c, src);
                if (m) { /* in arrival order: the in-order delivery reads it so */
                    msg **tail = &p->receiving;
                    while (*tail)
                        tail = &(*tail)->next;
                    m->next = NULL;
                    *tail = m;
                }
            }
            pthread_mutex_lock(&c->mu);
            c->last_seen[src] = now;
            pthread_mutex_unlock(&c->mu);
            moved |= tag != TAG_HB; /* a heartbeat is no work: the idle back-off goes on */
        }
    }
    return moved;
}

msg *dh__comm_take_in_order(dh__comm *c, comm_pump *p)
{
    msg *done = NULL, **dtail = &done;
    memset(p->blocked, 0, (size_t)c->size);
    for (msg **pp = &p->receiving; *pp;) {
        msg *m = *pp;
        if (p->blocked[m->peer] || !complete(m)) {
            p->blocked[m->peer] = 1; /* its sender's later messages wait for it */
            pp = &m->next;
            continue;
        }
        *pp = m->next;
        m->next = NULL;
        *dtail = m;
        dtail = &m->next;
    }
    return done;
}
