/*
 * proto.h - the wire between a serving agent and its trainer processes
 * (internal to src/dist).
 *
 * DESIGN: a Unix stream socket carries framed messages: a 16-byte head
 * (magic, version, type, payload length) and the payload, in host byte
 * order (both ends are on one machine). File descriptors (the batch pools)
 * travel once, with the ATTACHED message, as SCM_RIGHTS. Tensor bytes never
 * travel: a BATCH message describes where the batch lies in a pool both
 * sides have mapped. Every receive has a timeout; a closed peer is
 * DH_EPEER, a timeout DH_ETIMEDOUT; a send that the peer does not take
 * for DH__SEND_MS is DH_ETIMEDOUT too. Messages over DH__PROTO_MAX are refused
 * before anything is allocated.
 */
#ifndef DH_PROTO_H
#define DH_PROTO_H

#include "../core/core.h"

#define DH__PROTO_MAGIC 0x584c4844u /* "DHLX" */
#define DH__PROTO_VERSION 6 /* 2: resume checks, WAITING, global steps; 3: streams; 4: meta;
                            * 5: each item's draw; 6: the order's kind */
#define DH__STREAM_NAME 32 /* a stream's name, NUL included */
#define DH__PROTO_MAX (64u << 20)
#define DH__SEND_MS 5000 /* a peer that takes no byte of a message for so long is stuck */

enum {
    DH__MSG_ATTACH = 1, /* client: dh__attach */
    DH__MSG_ATTACHED,   /* agent: dh__attached + 2 fds (ring, arena) */
    DH__MSG_NEXT,       /* client: int32 timeout_ms */
    DH__MSG_BATCH,      /* agent: dh__batch_head + samples, tokens, items, draws, ids,
                         * flags, labels, texts, metas */
    DH__MSG_RELEASE,    /* client: dh__release (one-way) */
    DH__MSG_REPORT,     /* client: dh__report (one-way) */
    DH__MSG_DETACH,     /* client: empty (one-way) */
    DH__MSG_ERROR,      /* agent: int32 code + message text */
    DH__MSG_WAITING,    /* agent, while ranks attach: dh__waiting, every second */
    DH__MSG_ABORT       /* client: why, text of at most DH__ABORT_TEXT bytes (one-way): the
                         * rank leaves as a failed one (an agent before it: a broken peer,
                         * the same outcome without the reason) */
};
#define DH__ABORT_TEXT 200

typedef struct {
    uint32_t magic;
    uint16_t version, type;
    uint32_t len;
    uint32_t reserved;
} dh__msg_head;

typedef struct {
    int32_t rank, world_size;
    int64_t global_batch;
    uint64_t manifest_hash, spec_hash; /* 0: do not check */
    int32_t pid;
    int32_t resume;                    /* 1: start at (epoch, step) below */
    int64_t epoch, step;
    /* A resumed state's job: the agent refuses another seed, and converts (epoch, step)
     * of another global batch when the position falls on one of its step boundaries. */
    uint64_t resume_seed;
    int64_t resume_global_batch;       /* 0: the agent's */
    int32_t check_seed;
    int32_t resume_order;              /* the state's order (DH_ORDER_*) + 1; 0: not said */
    int64_t resume_shift;              /* the state's epoch shifted by so many samples */
    int64_t resume_global_step;        /* the state's steps trained so far; -1: unknown */
    char stream[DH__STREAM_NAME];      /* the stream to attach to; "": the agent's first */
} dh__attach;

typedef struct {
    int32_t attached, needed;          /* ranks attached to this agent, and its ranks */
    double seconds_left;               /* of the agent's attach timeout */
} dh__waiting;

typedef struct {
    int64_t ring_size, arena_size;
    int64_t steps;                     /* of the run, or -1: until stopped */
    uint64_t manifest_hash, spec_hash, seed;
    int32_t world_size, max_leases;
    int64_t global_batch;
    int64_t epoch, step;               /* where step 0 of the run lies in the sample order */
    int64_t steps_per_epoch;
    int32_t rank_lo, rank_hi;          /* the ranks this agent serves */
    int64_t shift;                     /* the first epoch's batches shifted (a resume) */
    int64_t step_base;                 /* the global step of the run's step 0 */
    int32_t order, reserved;           /* the run's order (DH_ORDER_*) */
} dh__attached;

typedef struct {
    int64_t step;
    int32_t rank, pool;                /* pool 0: the ring, 1: the move arena */
    int64_t offset, bytes;             /* of the batch in its pool */
    int32_t nsamples, nitems, nfailed;
    uint32_t ids_bytes;                /* NUL-separated sample ids after the items and their
                                        * draws (a dh_media_draw each), then
                                        * one byte of DH__SAMPLE_* flags per sample, then an
                                        * int64 label per sample, then text_bytes of texts,
                                        * then meta_bytes of metas */
    double emulated_s;                 /* the batch's modelled compute time (emulation only) */
    uint32_t text_bytes;               /* the samples' texts, each NUL-terminated ("" when
                                        * it has none); texts travel here, as ids do: a few
                                        * KB a batch beside its MBs of views */
    uint32_t meta_bytes;               /* the samples' meta objects as compact JSON, each
                                        * NUL-terminated ("" when it has none) */
} dh__batch_head;

#define DH__SAMPLE_PAD 1   /* a duplicate filling up an epoch's last batch (keep_last) */
#define DH__SAMPLE_TEXT 2  /* the sample has a text */
#define DH__SAMPLE_LABEL 4 /* the sample has a label */
#define DH__SAMPLE_META 8  /* the sample has a meta object */

typedef struct {
    int64_t step;
} dh__release;

typedef struct {
    int64_t step;
    double seconds;
} dh__report;

/* A BATCH message's parts, pointing into it. */
typedef struct {
    dh__batch_head head;
    const int64_t *samples, *tokens;
    const dh_batch_item *items;
    const dh_media_draw *draws; /* nitems */
    const char *ids;      /* nsamples NUL-terminated ids */
    const uint8_t *flags; /* per sample: DH__SAMPLE_* */
    const uint8_t *labels; /* per sample: an int64 (unaligned) */
    const char *texts, *metas; /* nsamples NUL-terminated UTF-8 strings each */
} dh__batch_parts;

/*
 * Checks a BATCH message of len bytes whole, trusting nothing in it: every count against
 * the length (without overflow), every item a tensor inside the batch, the batch inside its
 * pool (pool_size[0] the ring's, [1] the arena's), ids, texts and metas exactly nsamples
 * terminated strings, texts and metas UTF-8. 0 with *out, or DH_EPARSE (fuzz_serve_wire.c).
 * p must be 8-byte aligned (a malloc'd payload).
 */
int dh__proto_batch_parts(const uint8_t *p, uint32_t len, const int64_t pool_size[2],
                          dh__batch_parts *out);

/*
 * Epoch and step within it of the run's step st (the run's first epoch may start part-way:
 * a resume at info->epoch, info->step), and that epoch's batch shift (info->shift in the
 * run's first epoch, else 0; may be NULL); its global step is info->step_base + st. The one
 * reading of a run's steps, for the agent and its clients alike.
 */
void dh__run_position(const dh__attached *info, int64_t st, int64_t *epoch, int64_t *epoch_step,
                      int64_t *shift);

/* Sends one message (and fds, if nfds > 0). 0, DH_EPEER, DH_ETIMEDOUT (the peer took
 * nothing for DH__SEND_MS) or an error. */
int dh__proto_send(int fd, int type, const void *payload, uint32_t len, const int *fds, int nfds);
/* Sends head + two payload parts (no copy into one buffer). */
int dh__proto_send2(int fd, int type, const void *a, uint32_t alen, const void *b, uint32_t blen);
/*
 * Receives one message within timeout_ms (< 0: no limit). *payload is
 * malloc'd (free it; NULL when empty); up to *nfds fds are stored in fds
 * (*nfds becomes the count received). 0, DH_ETIMEDOUT, DH_EPEER, DH_EPARSE.
 */
int dh__proto_recv(int fd, int timeout_ms, dh__msg_head *h, void **payload, int *fds, int *nfds);
/* Sends an ERROR message with a code and a sentence. */
int dh__proto_send_error(int fd, int code, const char *text);

#endif
