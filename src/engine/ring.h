/*
 * ring.h - the batch buffer pool (internal): one shared mapping handed out
 * in allocation order and reclaimed in that order.
 *
 * DESIGN: batches are allocated in (roughly) the order they enter the
 * window and freed when their rank finishes the step, so a ring fits: the
 * head moves on allocation, the tail moves over blocks once they are freed,
 * and a block freed out of order waits for those before it. The region is
 * shared memory (core/shm.h): with DH_RING_SHARE a memfd that trainer
 * processes map. Allocation blocks while there is no room (backpressure):
 * memory stays flat however long the run.
 */
#ifndef DH_RING_H
#define DH_RING_H

#include "../core/shm.h"

#include <pthread.h>

typedef struct {
    dh__shm shm;
    uint8_t *base;          /* shm.base */
    int64_t size;
    int64_t head, tail;   /* monotonically increasing byte positions */
    int64_t *blocks;      /* ring of allocated block ends, in allocation order */
    uint8_t *freed;
    int64_t nblocks, first, cap;
    int64_t in_use, peak;
    pthread_mutex_t mu;
    pthread_cond_t room;
    int closed;
} dh__ring;

enum {
    DH_RING_POPULATE = 1, /* fault every page in now (a pool whose first use is on a critical path) */
    DH_RING_SHARE = 2     /* a memfd other processes can map, its pages reserved now */
};
/* 0, or an error with a message in err (which may be NULL). */
int dh__ring_init(dh__ring *r, int64_t size, int64_t max_blocks, int flags, char *err,
                  size_t errlen);
void dh__ring_destroy(dh__ring *r);
/* Blocks until bytes fit; returns the offset and its block id, or -1 if closed or too big. */
int64_t dh__ring_alloc(dh__ring *r, int64_t bytes, int64_t *block);
/* The same without waiting: -1 when there is no room now. */
int64_t dh__ring_try_alloc(dh__ring *r, int64_t bytes, int64_t *block);
void dh__ring_free(dh__ring *r, int64_t block);
/* Wakes every waiter; later allocations fail. */
void dh__ring_close(dh__ring *r);

#endif
