/*
 * proto.c - framed messages over a Unix stream socket (see proto.h). Every
 * wait goes through poll with the caller's timeout; EINTR is retried with
 * the time left.
 */
#include "proto.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Waits until fd is readable; 0, DH_ETIMEDOUT or an error. deadline < 0: none. */
/* Milliseconds on the monotonic clock. */
static int64_t now_ms(void)
{
    return (int64_t)(dh__mono() * 1e3);
}

static int wait_readable(int fd, int64_t deadline)
{
    for (;;) {
        int left = deadline < 0 ? -1 : (int)DH_MAX(0, deadline - now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, left);
        if (n > 0)
            return 0;
        if (n == 0)
            return DH_ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

/*
 * Sends all of m; a peer that takes no byte for DH__SEND_MS (its socket buffer full: it
 * stopped reading) is DH_ETIMEDOUT, so no sender waits on a stuck peer for ever.
 */
static int send_all(int fd, struct msghdr *m)
{
    while (m->msg_iovlen > 0) {
        ssize_t n = sendmsg(fd, m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int64_t until = now_ms() + DH__SEND_MS;
            int ready;
            while ((ready = poll(&p, 1, (int)DH_MAX(0, until - now_ms()))) < 0 && errno == EINTR)
                ;
            if (ready == 0)
                return DH_ETIMEDOUT;
            continue;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EPIPE || errno == ECONNRESET ? DH_EPEER : -errno;
        }
        m->msg_control = NULL; /* fds go with the first bytes only */
        m->msg_controllen = 0;
        while (m->msg_iovlen > 0 && (size_t)n >= m->msg_iov->iov_len) {
            n -= (ssize_t)m->msg_iov->iov_len;
            m->msg_iov++;
            m->msg_iovlen--;
        }
        if (m->msg_iovlen > 0) {
            m->msg_iov->iov_base = (char *)m->msg_iov->iov_base + n;
            m->msg_iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

static int send_parts(int fd, int type, const void *a, uint32_t alen, const void *b,
                      uint32_t blen, const int *fds, int nfds)
{
    if ((uint64_t)alen + blen > DH__PROTO_MAX)
        return DH_ELIMIT;
    if (nfds < 0 || nfds > 4)
        return DH_EINVAL; /* never drop descriptors silently */
    dh__msg_head h = {DH__PROTO_MAGIC, DH__PROTO_VERSION, (uint16_t)type, alen + blen, 0};
    struct iovec iov[3] = {{&h, sizeof h}, {(void *)a, alen}, {(void *)b, blen}};
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 1 + (alen > 0) + (blen > 0)};
    if (!alen && blen)
        iov[1] = iov[2];
    if (nfds > 0) {
        memset(&ctl, 0, sizeof ctl);
        m.msg_control = ctl.buf;
        m.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, (size_t)nfds * sizeof(int));
    }
    return send_all(fd, &m);
}

int dh__proto_send(int fd, int type, const void *payload, uint32_t len, const int *fds, int nfds)
{
    return send_parts(fd, type, payload, len, NULL, 0, fds, nfds);
}

void dh__run_position(const dh__attached *info, int64_t st, int64_t *epoch, int64_t *epoch_step,
                      int64_t *shift)
{
    int64_t spe = DH_MAX(info->steps_per_epoch, 1), first = spe - info->step;
    if (st < first) {
        *epoch = info->epoch;
        *epoch_step = info->step + st;
    } else {
        *epoch = info->epoch + 1 + (st - first) / spe;
        *epoch_step = (st - first) % spe;
    }
    if (shift)
        *shift = st < first ? info->shift : 0;
}

int dh__proto_send2(int fd, int type, const void *a, uint32_t alen, const void *b, uint32_t blen)
{
    return send_parts(fd, type, a, alen, b, blen, NULL, 0);
}

int dh__proto_send_error(int fd, int code, const char *text)
{
    int32_t c = code;
    return dh__proto_send2(fd, DH__MSG_ERROR, &c, sizeof c, text, (uint32_t)strlen(text) + 1);
}

/* Reads exactly len bytes (the head's first read may carry fds). */
static int recv_exact(int fd, void *buf, size_t len, int64_t deadline, int *fds, int *nfds)
{
    size_t got = 0;
    int maxfds = nfds ? *nfds : 0;
    if (nfds)
        *nfds = 0;
    while (got < len) {
        int rc = wait_readable(fd, deadline);
        if (rc)
            return rc;
        union {
            char buf[CMSG_SPACE(4 * sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {(char *)buf + got, len - got};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                           .msg_controllen = sizeof ctl.buf};
        ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == ECONNRESET ? DH_EPEER : -errno;
        if (n == 0)
            return DH_EPEER;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            for (int i = 0; i < k; i++) {
                int f;
                memcpy(&f, CMSG_DATA(c) + (size_t)i * sizeof(int), sizeof f);
                if (nfds && *nfds < maxfds)
                    fds[(*nfds)++] = f;
                else
                    close(f); /* more than the caller expects: never leak them */
            }
        }
        got += (size_t)n;
    }
    return 0;
}

int dh__proto_recv(int fd, int timeout_ms, dh__msg_head *h, void **payload, int *fds, int *nfds)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    *payload = NULL;
    int rc = recv_exact(fd, h, sizeof *h, deadline, fds, nfds);
    if (rc)
        return rc;
    if (h->magic != DH__PROTO_MAGIC || h->version != DH__PROTO_VERSION || h->len > DH__PROTO_MAX)
        return DH_EPARSE;
    if (!h->len)
        return 0;
    if (!(*payload = dh__malloc(h->len)))
        return DH_ENOMEM;
    rc = recv_exact(fd, *payload, h->len, deadline, NULL, NULL);
    if (rc) {
        free(*payload);
        *payload = NULL;
    }
    return rc;
}

/* 1 when an item describes a real tensor inside a batch of batch_bytes: every bound checked
 * without overflowing (the agent is trusted for nothing a view is built from). */
static int item_ok(const dh_batch_item *it, int64_t batch_bytes)
{
    if (it->ndim < 1 || it->ndim > 4 || (it->elem_bytes != 1 && it->elem_bytes != 4) ||
        it->offset < 0 || it->bytes < 0 || it->bytes > batch_bytes ||
        it->offset > batch_bytes - it->bytes)
        return 0;
    int64_t n = it->elem_bytes;
    for (int d = 0; d < it->ndim; d++) {
        if (it->shape[d] < 0 || (it->shape[d] && n > it->bytes / it->shape[d]))
            return 0;
        n *= it->shape[d];
    }
    return n == it->bytes;
}

/* 1 when a region holds exactly n NUL-terminated strings. */
static int strings_ok(const uint8_t *s, uint32_t len, uint64_t n)
{
    uint64_t nuls = 0;
    for (uint32_t k = 0; k < len; k++)
        nuls += s[k] == 0;
    return nuls == n && (!len || s[len - 1] == 0);
}

int dh__proto_batch_parts(const uint8_t *p, uint32_t len, const int64_t pool_size[2],
                          dh__batch_parts *out)
{
    dh__batch_head bh;
    if (len < sizeof bh)
        return DH_EPARSE;
    memcpy(&bh, p, sizeof bh);
    uint64_t ns = (uint64_t)(uint32_t)bh.nsamples, ni = (uint64_t)(uint32_t)bh.nitems;
    uint64_t need = sizeof bh + 16 * ns + ni * (sizeof(dh_batch_item) + sizeof(dh_media_draw)) +
                    bh.ids_bytes + ns + 8 * ns + (uint64_t)bh.text_bytes + bh.meta_bytes;
    if (bh.nsamples < 0 || bh.nitems < 0 || need != len || bh.pool < -1 || bh.pool > 1 ||
        bh.nfailed < 0 || bh.nfailed > bh.nsamples)
        return DH_EPARSE;
    int64_t size = bh.pool >= 0 ? pool_size[bh.pool] : 0;
    if (bh.bytes < 0 || (bh.pool >= 0 && (bh.offset < 0 || bh.bytes > size ||
                                          bh.offset > size - bh.bytes)))
        return DH_EPARSE; /* never hand out a view past the mapping */
    if (bh.pool < 0 && ni)
        return DH_EPARSE; /* items with no memory to view */
    const uint8_t *q = p + sizeof bh;
    const dh_batch_item *items = (const void *)(q + 16 * ns);
    for (uint64_t k = 0; k < ni; k++)
        if (!item_ok(&items[k], bh.bytes))
            return DH_EPARSE;
    const dh_media_draw *draws = (const void *)(items + ni);
    const uint8_t *ids = (const uint8_t *)(draws + ni);
    const uint8_t *flags = ids + bh.ids_bytes, *labels = flags + ns;
    const uint8_t *texts = labels + 8 * ns, *metas = texts + bh.text_bytes;
    if (!strings_ok(ids, bh.ids_bytes, ns) || !strings_ok(texts, bh.text_bytes, ns) ||
        dh__utf8_check((const char *)texts, bh.text_bytes) != bh.text_bytes ||
        !strings_ok(metas, bh.meta_bytes, ns) ||
        dh__utf8_check((const char *)metas, bh.meta_bytes) != bh.meta_bytes)
        return DH_EPARSE; /* each id, text and meta NUL-terminated, texts and metas UTF-8 */
    *out = (dh__batch_parts){bh, (const int64_t *)q, (const int64_t *)(q + 8 * ns), items,
                             draws, (const char *)ids, flags, labels, (const char *)texts,
                             (const char *)metas};
    return 0;
}
