/*
 * ring.c - the batch buffer pool (see ring.h for the design): first-fit
 * extents over one shared region, merged on free.
 */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

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
    r->size = r->shm.size & ~(int64_t)(ALIGN - 1);
    r->cap = max_blocks;
    size_t n = (size_t)max_blocks;
    r->free_ext = dh__malloc((n + 2) * sizeof *r->free_ext);
    r->blk_off = dh__malloc(n * sizeof *r->blk_off);
    r->blk_len = dh__malloc(n * sizeof *r->blk_len);
    r->free_ids = dh__malloc(n * sizeof *r->free_ids);
    if (!r->free_ext || !r->blk_off || !r->blk_len || !r->free_ids) {
        dh__ring_destroy(r);
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory for the pool's block table");
    }
    for (int64_t i = 0; i < max_blocks; i++) {
        r->blk_len[i] = -1;
        r->free_ids[i] = max_blocks - 1 - i; /* id 0 on top */
    }
    r->nfree_ids = max_blocks;
    r->free_ext[0] = (dh__extent){0, r->size};
    r->nfree = 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->room, NULL);
    return 0;
}

void dh__ring_destroy(dh__ring *r)
{
    dh__shm_destroy(&r->shm);
    if (r->blk_off && r->free_ext && r->blk_len && r->free_ids) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->room);
    }
    free(r->free_ext);
    free(r->blk_off);
    free(r->blk_len);
    free(r->free_ids);
    memset(r, 0, sizeof *r);
}

/* The first free extent that holds n bytes, or -1. */
static int64_t first_fit(const dh__ring *r, int64_t n)
{
    for (int64_t k = 0; k < r->nfree; k++)
        if (r->free_ext[k].len >= n)
            return k;
    return -1;
}

int64_t dh__ring_aligned(int64_t bytes)
{
    return (int64_t)dh__align_up((uint64_t)DH_MAX(bytes, 1), ALIGN);
}

void dh__ring_room(dh__ring *r, int64_t *largest, int64_t *ids)
{
    *largest = *ids = 0;
    if (!r->free_ids)
        return;
    pthread_mutex_lock(&r->mu);
    for (int64_t k = 0; !r->closed && k < r->nfree; k++)
        *largest = DH_MAX(*largest, r->free_ext[k].len);
    *ids = r->closed ? 0 : r->nfree_ids;
    pthread_mutex_unlock(&r->mu);
}

static int64_t ring_alloc(dh__ring *r, int64_t bytes, int64_t *block, int wait)
{
    int64_t n = dh__ring_aligned(bytes);
    if (n > r->size)
        return -1;
    pthread_mutex_lock(&r->mu);
    int64_t k = -1;
    while (!r->closed && ((k = first_fit(r, n)) < 0 || !r->nfree_ids) && wait)
        pthread_cond_wait(&r->room, &r->mu);
    if (r->closed || k < 0 || !r->nfree_ids) {
        pthread_mutex_unlock(&r->mu);
        return -1;
    }
    dh__extent *e = &r->free_ext[k];
    int64_t off = e->off, id = r->free_ids[--r->nfree_ids];
    e->off += n;
    e->len -= n;
    if (!e->len) { /* used up: drop it, keeping the order */
        memmove(e, e + 1, (size_t)(r->nfree - k - 1) * sizeof *e);
        r->nfree--;
    }
    r->blk_off[id] = off;
    r->blk_len[id] = n;
    r->in_use += n;
    r->peak = DH_MAX(r->peak, r->in_use);
    *block = id;
    pthread_mutex_unlock(&r->mu);
    return off;
}

int64_t dh__ring_alloc(dh__ring *r, int64_t bytes, int64_t *block)
{
    return ring_alloc(r, bytes, block, 1);
}

int64_t dh__ring_try_alloc(dh__ring *r, int64_t bytes, int64_t *block)
{
    return ring_alloc(r, bytes, block, 0);
}

/* Returns [off, off + len) to the free list, merged with its neighbours. */
static void give_back(dh__ring *r, int64_t off, int64_t len)
{
    int64_t lo = 0, hi = r->nfree; /* the first extent after off */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (r->free_ext[mid].off < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    dh__extent *x = r->free_ext;
    int prev = lo > 0 && x[lo - 1].off + x[lo - 1].len == off;
    int next = lo < r->nfree && off + len == x[lo].off;
    if (prev && next) {
        x[lo - 1].len += len + x[lo].len;
        memmove(&x[lo], &x[lo + 1], (size_t)(r->nfree - lo - 1) * sizeof *x);
        r->nfree--;
    } else if (prev) {
        x[lo - 1].len += len;
    } else if (next) {
        x[lo].off = off;
        x[lo].len += len;
    } else {
        memmove(&x[lo + 1], &x[lo], (size_t)(r->nfree - lo) * sizeof *x);
        x[lo] = (dh__extent){off, len};
        r->nfree++;
    }
}

void dh__ring_free(dh__ring *r, int64_t block)
{
    pthread_mutex_lock(&r->mu);
    if (block >= 0 && block < r->cap && r->blk_len[block] >= 0) { /* a double free is ignored */
        give_back(r, r->blk_off[block], r->blk_len[block]);
        r->in_use -= r->blk_len[block];
        r->blk_len[block] = -1;
        r->free_ids[r->nfree_ids++] = block;
    }
    pthread_cond_broadcast(&r->room);
    pthread_mutex_unlock(&r->mu);
}

void dh__ring_close(dh__ring *r)
{
    if (!r->free_ids)
        return; /* never initialised (the engine failed before it) */
    pthread_mutex_lock(&r->mu);
    r->closed = 1;
    pthread_cond_broadcast(&r->room);
    pthread_mutex_unlock(&r->mu);
}
