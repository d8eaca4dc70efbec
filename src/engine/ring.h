/*
 * ring.h - the batch buffer pool (internal): one shared mapping handed out
 * in allocation order and reclaimed in that order.
 *
 * DESIGN: batches are allocated in (roughly) the order they enter the
 * window and freed when their rank finishes the step, so a ring fits: the
 * head moves on allocation, the tail moves over blocks once they are freed,
 * and a block freed out of order waits for those before it. The region is
 * mmap(MAP_SHARED | MAP_ANONYMOUS), so a later version can back it with
 * shm_open and let trainer processes map it. Allocation blocks while there
 * is no room (backpressure): memory stays flat however long the run.
 */
#ifndef DH_RING_H
#define DH_RING_H

#include "../core/core.h"

#include <pthread.h>

typedef struct {
    uint8_t *base;
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

/* populate: fault every page in now (a pool whose first use sits on a critical path). */
int dh__ring_init(dh__ring *r, int64_t size, int64_t max_blocks, int populate);
void dh__ring_destroy(dh__ring *r);
/* Blocks until bytes fit; returns the offset and its block id, or -1 if closed or too big. */
int64_t dh__ring_alloc(dh__ring *r, int64_t bytes, int64_t *block);
/* The same without waiting: -1 when there is no room now. */
int64_t dh__ring_try_alloc(dh__ring *r, int64_t bytes, int64_t *block);
void dh__ring_free(dh__ring *r, int64_t block);
/* Wakes every waiter; later allocations fail. */
void dh__ring_close(dh__ring *r);

#endif
