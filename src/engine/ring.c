/*
 * ring.c - the batch buffer pool (see ring.h for the design).
 *
 * Blocks never wrap: an allocation that does not fit before the end of the
 * region skips to its start (the skipped bytes belong to that block), so
 * every slot is contiguous. Lock order: only r->mu, never held while
 * calling out.
 */
#include "ring.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define ALIGN 64

int dh__ring_init(dh__ring *r, int64_t size, int64_t max_blocks, int flags, char *err,
                  size_t errlen)
{
    memset(r, 0, sizeof *r);
    int share = (flags & DH_RING_SHARE) != 0;
    int rc = dh__shm_create(&r->shm, size, share, share, (flags & DH_RING_POPULATE) != 0, err,
                            errlen);
    if (rc)
        return rc;
    r->base = r->shm.base;
    r->size = r->shm.size;
    r->cap = max_blocks;
    r->blocks = dh__malloc((size_t)max_blocks * sizeof *r->blocks);
    r->freed = dh__calloc((size_t)max_blocks, 1);
    if (!r->blocks || !r->freed) {
        dh__ring_destroy(r);
        return DH_ENOMEM;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->room, NULL);
    return 0;
}

void dh__ring_destroy(dh__ring *r)
{
    dh__shm_destroy(&r->shm);
    if (r->blocks) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->room);
    }
    free(r->blocks);
    free(r->freed);
    memset(r, 0, sizeof *r);
}

/* Where a block of n bytes would start, or -1 if it does not fit now. */
static int64_t place(const dh__ring *r, int64_t n)
{
    int64_t start = r->head, off = start % r->size;
    if (off + n > r->size) /* skip to the start of the region */
        start += r->size - off;
    return start + n - r->tail <= r->size ? start : -1;
}

static int64_t ring_alloc(dh__ring *r, int64_t bytes, int64_t *block, int wait)
{
    int64_t n = (DH_MAX(bytes, 1) + ALIGN - 1) & ~(int64_t)(ALIGN - 1);
    if (n > r->size)
        return -1;
    pthread_mutex_lock(&r->mu);
    int64_t start = -1;
    while (!r->closed && ((start = place(r, n)) < 0 || r->nblocks == r->cap) && wait)
        pthread_cond_wait(&r->room, &r->mu);
    if (r->closed || start < 0 || r->nblocks == r->cap) {
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    int64_t id = (r->first + r->nblocks++) % r->cap;
    r->blocks[id] = start + n;
    r->freed[id] = 0;
    r->in_use += start + n - r->head;
    r->peak = DH_MAX(r->peak, r->in_use);
    r->head = start + n;
    *block = id;
    pthread_mutex_unlock(&r->mu);
    return start % r->size;
}

int64_t dh__ring_alloc(dh__ring *r, int64_t bytes, int64_t *block)
{
    return ring_alloc(r, bytes, block, 1);
}

int64_t dh__ring_try_alloc(dh__ring *r, int64_t bytes, int64_t *block)
{
    return ring_alloc(r, bytes, block, 0);
}

void dh__ring_free(dh__ring *r, int64_t block)
{
    pthread_mutex_lock(&r->mu);
    r->freed[block] = 1;
    while (r->nblocks > 0 && r->freed[r->first]) { /* reclaim in allocation order */
        r->in_use -= r->blocks[r->first] - r->tail;
        r->tail = r->blocks[r->first];
        r->first = (r->first + 1) % r->cap;
        r->nblocks--;
    }
    pthread_cond_broadcast(&r->room);
    pthread_mutex_unlock(&r->mu);
}

void dh__ring_close(dh__ring *r)
{
    if (!r->blocks)
        return; /* never initialised (the engine failed before it) */
    pthread_mutex_lock(&r->mu);
    r->closed = 1;
    pthread_cond_broadcast(&r->room);
    pthread_mutex_unlock(&r->mu);
}
