/*
 * ring.h - the batch buffer pool (internal): one shared region from which
 * batches take 64-byte aligned blocks.
 *
 * DESIGN: batches are mostly freed in the order they were allocated, but
 * not always: a trainer may keep a tensor (and so its batch) for as long as
 * it likes, and rebalanced batches live in their own order. Free space is
 * therefore kept as a sorted list of extents, first fit, merged on free, so
 * a block held for long costs only its own bytes and never stalls the
 * allocations behind it (a strict ring would wait for it at every wrap).
 * The region is shared memory (core/shm.h): with DH_RING_SHARE a memfd that
 * trainer processes map. Allocation blocks while there is no room
 * (backpressure): memory stays flat however long the run. (The name is
 * historical: it began as a ring.)
 */
#ifndef DH_RING_H
#define DH_RING_H

#include "../core/shm.h"

#include <pthread.h>

typedef struct {
    int64_t off, len;
} dh__extent;

typedef struct {
    dh__shm shm;
    uint8_t *base;          /* shm.base */
    int64_t size;
    dh__extent *free_ext;   /* free space, sorted by offset, never adjacent */
    int64_t nfree;
    int64_t *blk_off, *blk_len; /* per block id; blk_len < 0: id unused */
    int64_t *free_ids;      /* stack of unused block ids */
    int64_t nfree_ids, cap; /* cap: most blocks allocated at once */
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
/* Room now: the largest free extent and the block ids left. Allocations whose aligned sizes
 * sum to at most *largest, *ids of them, all succeed while nothing else allocates (first fit
 * takes from an extent at least as large as each one needs, the largest one if no other). */
void dh__ring_room(dh__ring *r, int64_t *largest, int64_t *ids);
/* The bytes an allocation of `bytes` takes (its aligned size). */
int64_t dh__ring_aligned(int64_t bytes);
/* Wakes every waiter; later allocations fail. */
void dh__ring_close(dh__ring *r);

#endif
