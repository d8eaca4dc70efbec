/*
 * dist.h - what the agent (serve.c) and the client (client.c) share, beside
 * the wire format (proto.h): sockets (listen.c). Internal to src/dist.
 */
#ifndef DH_DIST_H
#define DH_DIST_H

#include "proto.h"

/* A listening socket on name ("@abstract" or a 0600 path); the fd, or < 0 with a message. */
int dh__listen(const char *name, int backlog, char *err, size_t errlen);
/* A connected socket to name, retrying until timeout_ms while nobody listens yet (on_wait,
 * if not NULL, told so now and then: dh_client_opts.on_wait). */
int dh__connect(const char *name, int timeout_ms, char *err, size_t errlen);
int dh__connect_told(const char *name, int timeout_ms, void (*on_wait)(void *, const char *),
                     void *user, char *err, size_t errlen);
/* The connected peer's user and process ids. 0 or an error. */
int dh__peer_uid(int fd, uint32_t *uid, int32_t *pid);

/* segv_hint.c: a pool a trainer maps read-only, named on stderr when a write into it faults
 * (a handler installed once per process, chained to the one before; DH_SEGV_HINT=0: none). */
void dh__segv_hint_add(const void *base, size_t len, int rank);
void dh__segv_hint_remove(const void *base);
/* Tests only: how often the agent's watch looks at ranks blocked in the engine (20 ms). */
void dh__serve_test_watch_ms(long ms);
/* Tests only: the agent reports a rank that waits so many seconds for its batch (10). */
void dh__serve_test_stall(double seconds);

#endif
