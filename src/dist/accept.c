/*
 * accept.c - the agent's acceptor: every new connection's attach is read,
 * checked against the peer's credentials and handed to the stream it names
 * (serve_int.h).
 *
 * DESIGN
 * - Connections are greeted together, not one after another: the acceptor
 *   polls the listening socket and every connection that has not yet said
 *   its attach, and reads whatever bytes each has sent without blocking. A
 *   connection that says nothing (or half an attach) delays no other; it is
 *   closed when its io_ms of silence are up, or, when GREETERS connections
 *   are being greeted at once, as the oldest when another one comes. Those
 *   are counted and told in one line every 5 s at most, not one each.
 * - The peer's uid is checked (SO_PEERCRED) before a byte is read.
 * - An attach of another protocol version is refused naming both versions.
 */
#include "serve_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define GREETERS 64 /* connections greeted at once; the oldest goes when one more comes */

/* A connection whose attach is being read. */
typedef struct {
    int fd;
    int32_t pid;
    double until; /* when its silence ends it */
    size_t got;
    unsigned char buf[sizeof(dh__msg_head) + sizeof(dh__attach)];
} greeter;

void dh__serve_say(const hub *h, const char *stream, const char *fmt, va_list ap)
{
    if (!h->on_event)
        return;
    char msg[1024]; /* a refusal names its reason whole */
    int k = h->n > 1 && stream ? snprintf(msg, sizeof msg, "stream %s: ", stream) : 0;
    vsnprintf(msg + k, sizeof msg - (size_t)k, fmt, ap);
    h->on_event(msg, h->event_user);
}

void dh__agent_event(agent *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dh__serve_say(a->hub, a->stream, fmt, ap);
    va_end(ap);
}

static void say(const hub *h, const char *stream, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void say(const hub *h, const char *stream, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    dh__serve_say(h, stream, fmt, ap);
    va_end(ap);
}

void dh__serve_refuse(hub *h, agent *a, int fd, int32_t pid, int rc, const char *why)
{
    /* the acceptor's own refusals (not an attach: junk, another user, another version) are
     * told 5 in a row at most, the rest counted in its next summary line */
    if (!a && ++h->refused_in_row > 5)
        h->refused_more++;
    else
        say(h, a ? a->stream : NULL, "refused an attach from pid %d: %s", (int)pid,
            why[0] ? why : dh_strerror(rc));
    if (why[0])
        dh__proto_send_error(fd, rc, why);
    close(fd);
}

/* The stream an attach names ("": the first), or NULL with the sentence in why. */
static agent *stream_named(hub *h, const char *name, char *why, size_t len)
{
    for (int k = 0; k < h->n; k++)
        if (!name[0] ? k == 0 : !strcmp(name, h->s[k].stream))
            return &h->s[k];
    char list[200] = "";
    for (int k = 0, n = 0; k < h->n; k++)
        n += snprintf(list + n, sizeof list - (size_t)DH_MIN(n, (int)sizeof list), "%s\"%s\"",
                      k ? ", " : "", h->s[k].stream), n = DH_MIN(n, (int)sizeof list - 1);
    dh__msg(why, len, "this agent serves no stream \"%s\"; its streams: %s (datahelix serve "
            "... --stream NAME ...)", name, list);
    return NULL;
}

/* Queues a complete attach for the stream it names (which the pipe wakes), or refuses it. */
static void hand_over(hub *h, int fd, int32_t pid, const dh__attach *req)
{
    h->refused_in_row = 0; /* a real attach: refusals are told again */
    pending in = {.fd = fd, .pid = pid, .req = *req};
    in.req.stream[sizeof in.req.stream - 1] = 0; /* the trainer's bytes: terminated here */
    char why[320] = "";
    int rc = 0;
    agent *a = stream_named(h, in.req.stream, why, sizeof why);
    if (!a)
        rc = DH_EMISMATCH;
    if (!rc) {
        pthread_mutex_lock(&h->mu);
        if (a->done)
            rc = dh__fail(why, sizeof why, a->end_code, "stream \"%s\" of this agent: %s",
                          a->stream, a->end_why);
        else if (!(rc = dh__grow((void **)&a->queue, &a->capq, a->nqueue + 1, sizeof *a->queue)))
            a->queue[a->nqueue++] = in;
        pthread_mutex_unlock(&h->mu);
        if (!rc && write(a->inbox[1], "", 1) < 0) {
            /* the pipe is full of wake-ups already: the stream will look */
        }
    }
    if (rc)
        dh__serve_refuse(h, a, fd, pid, rc, why);
}

/*
 * Reads what g's peer sent; 1 when g is done with (handed over or refused), else 0. A head
 * that is not an attach of this version is refused as soon as it is complete.
 */
static int greet(hub *h, greeter *g)
{
    ssize_t n;
    while ((n = recv(g->fd, g->buf + g->got, sizeof g->buf - g->got, MSG_DONTWAIT)) < 0 &&
           errno == EINTR)
        ;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n <= 0) { /* it went away before saying its attach */
        close(g->fd);
        h->quiet++;
        return 1;
    }
    g->got += (size_t)n;
    char why[200] = "";
    int rc = 0;
    dh__msg_head head;
    if (g->got >= sizeof head) {
        memcpy(&head, g->buf, sizeof head);
        if (head.magic != DH__PROTO_MAGIC || head.type != DH__MSG_ATTACH)
            rc = dh__fail(why, sizeof why, DH_EPARSE, "expected an attach message (a DataHelix "
                          "client connecting to this socket?)");
        else if (head.version != DH__PROTO_VERSION)
            rc = dh__fail(why, sizeof why, DH_EPARSE, "the client speaks protocol version %u, "
                          "this agent %u: trainers and agent must come from the same DataHelix "
                          "release", (unsigned)head.version, (unsigned)DH__PROTO_VERSION);
        else if (head.len != sizeof(dh__attach))
            rc = dh__fail(why, sizeof why, DH_EPARSE, "an attach of %u bytes, not %zu",
                          (unsigned)head.len, sizeof(dh__attach));
    }
    if (rc) {
        dh__serve_refuse(h, NULL, g->fd, g->pid, rc, why);
        return 1;
    }
    if (g->got < sizeof g->buf)
        return 0;
    dh__attach req;
    memcpy(&req, g->buf + sizeof head, sizeof req);
    hand_over(h, g->fd, g->pid, &req);
    return 1;
}

/* Accepts one connection into gs (the oldest greeter goes when there is no room). */
static void welcome(hub *h, greeter *gs, int *n, int io_ms)
{
    int fd = accept4(h->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    uint32_t uid = 0;
    int32_t pid = 0;
    char why[200] = "";
    int rc = dh__peer_uid(fd, &uid, &pid);
    if (!rc && uid != getuid())
        rc = dh__fail(why, sizeof why, DH_EACCES, "user %u may not attach to an agent of user "
                      "%u", uid, (unsigned)getuid());
    if (rc) {
        dh__serve_refuse(h, NULL, fd, pid, rc, why);
        return;
    }
    if (*n == GREETERS) { /* the oldest silent one goes */
        close(gs[0].fd);
        h->quiet++;
        memmove(gs, gs + 1, (size_t)(--*n) * sizeof *gs);
    }
    gs[(*n)++] = (greeter){.fd = fd, .pid = pid, .until = dh__mono() + io_ms / 1e3};
}

/* Whether any stream has not ended. */
static int streams_running(hub *h)
{
    int running = 0;
    pthread_mutex_lock(&h->mu);
    for (int k = 0; k < h->n; k++)
        running += !h->s[k].done;
    pthread_mutex_unlock(&h->mu);
    return running;
}

void dh__serve_accept(hub *h, int io_ms)
{
    greeter gs[GREETERS];
    struct pollfd pf[GREETERS + 1];
    int n = 0;
    double said = 0;
    while (streams_running(h)) {
        pf[0] = (struct pollfd){.fd = h->listen_fd, .events = POLLIN};
        for (int k = 0; k < n; k++)
            pf[k + 1] = (struct pollfd){.fd = gs[k].fd, .events = POLLIN};
        int ready = poll(pf, (nfds_t)n + 1, 200);
        double now = dh__mono();
        int kept = 0;
        for (int k = 0; k < n; k++) {
            int done = 0;
            if (ready > 0 && (pf[k + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                done = greet(h, &gs[k]);
            if (!done && now > gs[k].until) {
                close(gs[k].fd);
                h->quiet++;
                done = 1;
            }
            if (!done)
                gs[kept++] = gs[k];
        }
        n = kept;
        if (ready > 0 && (pf[0].revents & POLLIN))
            welcome(h, gs, &n, io_ms);
        if ((h->quiet || h->refused_more) && now - said >= 5.0) { /* a flood: one line */
            if (h->quiet)
                say(h, NULL, "closed %lld connection%s that said no attach (went away, silent "
                    "for %d s, or the oldest of %d waiting)", (long long)h->quiet,
                    h->quiet == 1 ? "" : "s", io_ms / 1000, GREETERS);
            if (h->refused_more)
                say(h, NULL, "refused %lld more connection%s that were not attaches of this "
                    "DataHelix (the first 5 in a row are above)", (long long)h->refused_more,
                    h->refused_more == 1 ? "" : "s");
            h->quiet = h->refused_more = 0;
            said = now;
        }
    }
    for (int k = 0; k < n; k++)
        close(gs[k].fd);
}
