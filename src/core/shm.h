/*
 * shm.h - shared memory that other processes can map (internal).
 *
 * DESIGN: a region is an anonymous memfd (Linux): it has no name anywhere,
 * so a process killed at any moment leaves nothing behind, and it reaches
 * another process only as a file descriptor passed over a Unix socket
 * (SCM_RIGHTS). Reserving the pages up front (fallocate) turns "the pool
 * does not fit" into an error at start, naming the size, instead of a
 * SIGBUS in the middle of a run. The memfd is sealed against shrinking and
 * growing (no process holding it can truncate it under the agent: a SIGBUS),
 * and other processes get a read-only descriptor of it (ro_fd), which can be
 * mapped for reading only: a trainer cannot write into other ranks' batches.
 * This file is the one place that calls memfd_create and fallocate (Linux-only).
 */
#ifndef DH_SHM_H
#define DH_SHM_H

#include "core.h"

typedef struct {
    int fd;        /* -1 when the region is not shareable (plain anonymous memory) */
    int ro_fd;     /* shareable: a read-only descriptor of it, the one to hand out; else -1 */
    uint8_t *base;
    int64_t size;  /* bytes, a multiple of the page size */
} dh__shm;

/*
 * Creates and maps a region of at least `size` bytes. share: back it by a
 * memfd another process can map; reserve: allocate every page now (fails
 * with DH_ENOMEM and a message naming the size if they cannot be had);
 * populate: also fault them into this process. 0 or an error.
 */
int dh__shm_create(dh__shm *s, int64_t size, int share, int reserve, int populate, char *err,
                   size_t errlen);
/* Maps a region received as fd (read-only unless writable). 0 or an error. ro_fd is -1. */
int dh__shm_map(dh__shm *s, int fd, int64_t size, int writable);
/* Unmaps and closes. Safe on a zeroed or failed region. */
void dh__shm_destroy(dh__shm *s);

#endif
