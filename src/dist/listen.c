/*
 * listen.c - the agent's and the client's Unix sockets: naming, binding
 * (abstract "@name", or a filesystem path made 0600 with a stale socket of
 * a dead agent replaced), connecting with a timeout, and the peer's
 * credentials. Linux-only calls (abstract names, SO_PEERCRED) live here.
 */
#include "dist.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

int dh_serve_default_socket(const char *job, char *out, size_t len)
{
    if (!job || !job[0])
        job = getenv("DH_JOB");
    if (!job || !job[0])
        job = "default";
    int n = snprintf(out, len, "@datahelix-%u-%s", (unsigned)getuid(), job);
    return n < 0 || (size_t)n >= len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path)
               ? DH_ERANGE
               : 0;
}

/* Fills addr from a name ("@abstract" or a path); returns the address length, or < 0. */
static int make_addr(const char *name, struct sockaddr_un *addr, socklen_t *alen)
{
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    size_t n = strlen(name);
    if (n == 0 || n >= sizeof addr->sun_path)
        return DH_ERANGE;
    memcpy(addr->sun_path, name, n);
    if (name[0] == '@')
        addr->sun_path[0] = '\0'; /* abstract: no file, gone with the last descriptor */
    *alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    return 0;
}

/* A filesystem socket nobody listens on any more (its agent died): safe to replace. */
static int stale_socket(const char *path, const struct sockaddr_un *addr, socklen_t alen)
{
    struct stat st;
    if (lstat(path, &st) || !S_ISSOCK(st.st_mode))
        return 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int refused = connect(fd, (const struct sockaddr *)addr, alen) < 0 && errno == ECONNREFUSED;
    close(fd);
    return refused;
}

/* Closes fd and says why binding name failed (errno e); a name in use is DH_EEXIST. */
static int bind_failed(int fd, const char *name, int e, char *err, size_t errlen)
{
    close(fd);
    return dh__fail(err, errlen, e == EADDRINUSE ? DH_EEXIST : -e, "cannot listen on %s: %s%s",
                    name, strerror(e),
                    e == EADDRINUSE ? " (another agent serves this job, or a process of any "
                                      "user holds the name - trainers attach only to an agent "
                                      "of their own user: pick another --socket or DH_JOB)"
                                    : "");
}

int dh__listen(const char *name, int backlog, char *err, size_t errlen)
{
    struct sockaddr_un addr;
    socklen_t alen;
    if (make_addr(name, &addr, &alen))
        return dh__fail(err, errlen, DH_ERANGE, "socket name \"%s\" is empty or too long", name);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return dh__fail(err, errlen, -errno, "cannot create a socket: %s", strerror(errno));
    int is_path = name[0] != '@';
    if (is_path && stale_socket(name, &addr, alen))
        unlink(name);
    /* A path socket is bound under a temporary name, made 0600, then renamed into place:
     * the name never shows a socket with the umask's mode, even for an instant. */
    char tmp[sizeof addr.sun_path];
    struct sockaddr_un taddr;
    socklen_t talen;
    int staged = is_path &&
                 (size_t)snprintf(tmp, sizeof tmp, "%s.%ld", name, (long)getpid()) < sizeof tmp &&
                 !make_addr(tmp, &taddr, &talen);
    if (staged) {
        unlink(tmp);
        /* RENAME_NOREPLACE: a live agent's socket is never replaced (it is EEXIST); a
         * filesystem without it gets the same guarantee from link() + unlink(). */
        if (bind(fd, (struct sockaddr *)&taddr, talen) < 0 || chmod(tmp, 0600) < 0 ||
            (renameat2(AT_FDCWD, tmp, AT_FDCWD, name, RENAME_NOREPLACE) < 0 &&
             ((errno != EINVAL && errno != ENOSYS) || link(tmp, name) < 0 || unlink(tmp) < 0))) {
            int e = errno == EEXIST ? EADDRINUSE : errno;
            unlink(tmp);
            return bind_failed(fd, name, e, err, errlen);
        }
    } else if (bind(fd, (struct sockaddr *)&addr, alen) < 0) {
        return bind_failed(fd, name, errno, err, errlen);
    }
    if ((is_path && !staged && chmod(name, 0600) < 0) || listen(fd, backlog) < 0) {
        int e = errno;
        close(fd);
        if (is_path)
            unlink(name);
        return dh__fail(err, errlen, -e, "cannot listen on %s: %s", name, strerror(e));
    }
    return fd;
}

int dh__connect(const char *name, int timeout_ms, char *err, size_t errlen)
{
    return dh__connect_told(name, timeout_ms, NULL, NULL, err, errlen);
}

int dh__connect_told(const char *name, int timeout_ms, void (*on_wait)(void *, const char *),
                     void *user, char *err, size_t errlen)
{
    struct sockaddr_un addr;
    socklen_t alen;
    if (make_addr(name, &addr, &alen))
        return dh__fail(err, errlen, DH_ERANGE, "socket name \"%s\" is empty or too long", name);
    double t0 = dh__mono(), told = DH_CLIENT_WAIT_FIRST_S - DH_CLIENT_WAIT_EVERY_S;
    /* The agent may not listen yet, or its queue of connections is full (a non-blocking
     * connect then fails with EAGAIN instead of waiting past the timeout): retry until the
     * timeout. */
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            return dh__fail(err, errlen, -errno, "cannot create a socket: %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&addr, alen) == 0) {
            int fl = fcntl(fd, F_GETFL);
            if (fl >= 0 && fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == 0)
                return fd;
        }
        int e = errno;
        close(fd);
        if ((e != ENOENT && e != ECONNREFUSED && e != EAGAIN) ||
            (dh__mono() - t0) * 1e3 >= timeout_ms) {
            if (e == EAGAIN)
                return dh__fail(err, errlen, DH_ETIMEDOUT, "the agent on %s accepted no "
                                "connection within %d ms (its queue of connections stayed "
                                "full)", name, timeout_ms);
            if ((e == ENOENT || e == ECONNREFUSED) && timeout_ms > 0) /* waited for one */
                return dh__fail(err, errlen, DH_ETIMEDOUT, "no agent listened on %s within "
                                "%.1f s (%s): start `datahelix serve` first, with the same "
                                "--socket or DH_JOB", name, timeout_ms / 1e3, strerror(e));
            return dh__fail(err, errlen, e == ENOENT || e == ECONNREFUSED ? DH_EPEER : -e,
                            "no agent listens on %s (%s): start `datahelix serve` first, with "
                            "the same --socket or DH_JOB", name, strerror(e));
        }
        double waited = dh__mono() - t0;
        if (on_wait && e != EAGAIN && waited >= told + DH_CLIENT_WAIT_EVERY_S) {
            char line[400];
            snprintf(line, sizeof line, "waiting for an agent to listen on %s: %.0f s of %.0f "
                     "(is `datahelix serve` started, with the same --socket or DH_JOB?)",
                     name, waited, timeout_ms / 1e3);
            on_wait(user, line);
            told = waited;
        }
        poll(NULL, 0, 50);
    }
}

int dh__peer_uid(int fd, uint32_t *uid, int32_t *pid)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
        return -errno;
    *uid = cr.uid;
    *pid = cr.pid;
    return 0;
}
