/*
 * datahelix/client.h - a training process's side of datahelix/serve.h: attach
 * to the node's agent as one rank, take batches that view the agent's shared
 * memory (no tensor byte is copied), release them, report step times.
 * Part of the public C API; include <datahelix.h> for all of it.
 *
 * Thread-safety: dh_client_next and dh_client_state from one thread at a
 * time (a second thread's dh_client_next while one runs fails with
 * DH_EBUSY, saying so); dh_client_release, dh_client_report_step,
 * dh_client_detach and dh_client_abort from any thread (a garbage
 * collector may release a batch from wherever it runs; a detach while
 * another thread waits in dh_client_next makes that wait end at once).
 */
#ifndef DATAHELIX_CLIENT_H
#define DATAHELIX_CLIENT_H

#include "engine.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dh_client dh_client;

/* Initialise with dh_client_opts_default (it sets struct_size). */
typedef struct {
    uint32_t struct_size;
    const char *socket;      /* the agent's socket; NULL: dh_serve_default_socket(NULL) */
    int rank, world_size;    /* this process's global rank, and the job's world size (on
                              * several nodes too: each agent serves its node's ranks) */
    int64_t global_batch;    /* 0: do not check */
    uint64_t manifest_hash;  /* dh_manifest_hash of the trainer's manifest; 0: do not check */
    uint64_t spec_hash;      /* dh_spec_hash; 0: do not check */
    int timeout_ms;          /* connect, and the default of dh_client_next; 0: 60 s */
    int resume;              /* 1: the run starts at (epoch, step) below; all ranks must agree */
    int64_t epoch, step;
    /* Added in 0.2 (zero from an older caller: the old behaviour). */
    /* How long to wait for every rank to attach. 0: as long as the agent waits (it says
     * every second how many ranks are in, and gives up after its --attach-timeout), so the
     * first rank never gives up while the agent still waits for the last. */
    int attach_timeout_ms;
    /* Resuming a saved dh_client_state: its seed (checked when check_seed) and its global
     * batch (0: the agent's; another one is converted where the position allows). */
    int check_seed;
    uint64_t resume_seed;
    int64_t resume_global_batch;
    int64_t resume_shift;    /* the state's shift (dh_client_state.shift) */
    /* the state's global_step (-1, the default: unknown, taken from epoch and step): the
     * global steps of the resumed job go on from it, whatever its global batch */
    int64_t resume_global_step;
    /* The agent's stream to take batches from (datahelix serve ... --stream NAME ...), at
     * most 31 bytes; NULL or "": its first (main) stream. */
    const char *stream;
    /* Added in 0.3. While dh_client_connect waits for an agent to listen (a trainer started
     * before its agent, or given a socket nobody serves), on_wait gets a sentence saying so
     * after DH_CLIENT_WAIT_FIRST_S and then every DH_CLIENT_WAIT_EVERY_S: the trainer would
     * otherwise sit silent until its timeout. NULL: silent. */
    void (*on_wait)(void *user, const char *sentence);
    void *on_wait_user;
    /* Added in 0.3. Resuming a saved state: its order's kind (dh_client_order when it was
     * saved: DH_ORDER_UNIFORM or DH_ORDER_STRATIFIED), checked when check_order; the agent
     * refuses a state of the other order (a position in one is other samples in the other). */
    int check_order, resume_order;
} dh_client_opts;
#define DH_CLIENT_WAIT_FIRST_S 5
#define DH_CLIENT_WAIT_EVERY_S 15

DH_API void dh_client_opts_default(dh_client_opts *o);

/*
 * Connects and attaches (waits until every rank attached and the agent
 * started the run). On success *out owns the client (dh_client_close).
 * Refusals (rank taken, world size, global batch or hash mismatch) come
 * back as DH_EMISMATCH with the agent's sentence in errbuf.
 */
DH_API int dh_client_connect(const dh_client_opts *opts, dh_client **out, char *errbuf,
                             size_t errlen);

/*
 * What the agent runs, as it said when the run started. Steps count from the start of
 * training (a resumed job goes on counting): batch b->step is its global step; the run's
 * first epoch starts at start_step (a resume), the next ones at 0. Any thread.
 */
typedef struct {
    int64_t steps;            /* steps served from start_epoch/start_step; -1: until stopped */
    int64_t start_epoch, start_step; /* where this run started in the sample order */
    int64_t steps_per_epoch;  /* global batches in an epoch (the incomplete tail dropped) */
    int64_t global_batch;
    int32_t world_size, rank_lo, rank_hi; /* this agent serves ranks [rank_lo, rank_hi) */
    uint64_t manifest_hash, spec_hash, seed;
    int64_t step_base;        /* the global step of the run's first batch */
} dh_client_run;
DH_API int dh_client_run_get(const dh_client *c, dh_client_run *out);
/* Added in 0.2: how many batches the agent lets this rank hold at once (its --max-leases);
 * a next beyond them is DH_ELIMIT. A loop that keeps its batch until it takes the next
 * (Python's `for batch in loader`) needs 2. */
DH_API int dh_client_max_leases(const dh_client *c);
/* Added in 0.3: the agent's sample order (its --order): DH_ORDER_UNIFORM or
 * DH_ORDER_STRATIFIED; a saved state keeps it to resume with (dh_client_opts.resume_order). */
DH_API int dh_client_order(const dh_client *c);
/* The epoch of global step `step` of this run (>= its first) and the step within it: the
 * run's first epoch may start part-way (a resume), the next ones at 0. Any thread. */
DH_API int dh_client_step_position(const dh_client *c, int64_t step, int64_t *epoch,
                                   int64_t *epoch_step);

/*
 * The rank's next batch, within timeout_ms (< 0: the connect timeout).
 * out->data points into the shared pool and every pointer in *out stays
 * valid until dh_client_release(out) or dh_client_close. DH_EEMPTY after the
 * run's last step; DH_EPEER when the agent or another rank died (errbuf
 * says which); DH_ETIMEDOUT; DH_ELIMIT when the rank holds too many leases.
 */
DH_API int dh_client_next(dh_client *c, int timeout_ms, dh_batch *out, char *errbuf,
                          size_t errlen);
/*
 * The batch's modelled compute time in seconds (the workload's GPU model, or
 * the manifest's sim.gpu_ms): what an emulated accelerator sleeps on a
 * machine without one; -1 for a batch this client does not hold. Any thread.
 */
DH_API double dh_client_emulated_seconds(dh_client *c, const dh_batch *b);
/* The id of sample k of a batch taken by this client (valid as long as the batch). */
DH_API const char *dh_client_sample_id(const dh_client *c, const dh_batch *b, int32_t k);
/*
 * 1 when sample k of a batch this client holds is padding: a duplicate of one of its
 * epoch's first samples filling up the epoch's last batch (the agent's --keep-last), which
 * an evaluation should not count; 0 when not; DH_EINVAL for a batch it does not hold. Any
 * thread.
 */
DH_API int dh_client_sample_pad(dh_client *c, const dh_batch *b, int32_t k);
/* Added in 0.2. The text of sample k (UTF-8, from the manifest's "text" or a shard's .txt
 * member; valid as long as the batch), or NULL when it has none or the batch is not held.
 * Any thread. */
DH_API const char *dh_client_sample_text(dh_client *c, const dh_batch *b, int32_t k);
/* Added in 0.2. The meta object of sample k as compact JSON (the manifest's "meta", a shard's
 * .json member), or NULL when it has none; valid until the batch is released. */
DH_API const char *dh_client_sample_meta(dh_client *c, const dh_batch *b, int32_t k);
/* Added in 0.2. The label of sample k into *label: 1 when it has one (the manifest's
 * "label", a shard's .cls member), 0 when not (*label = 0), DH_EINVAL for a batch this
 * client does not hold. Any thread. */
DH_API int dh_client_sample_label(dh_client *c, const dh_batch *b, int32_t k, int64_t *label);
/*
 * Gives a batch back; its memory may be reused from here, so nothing may
 * view it any more. The step time reported for it (or, without a report,
 * the time since it was taken) feeds the agent's GPU model and deadlines.
 */
DH_API int dh_client_release(dh_client *c, const dh_batch *b);
/* The compute time this rank measured for step `step` (seconds). */
DH_API int dh_client_report_step(dh_client *c, int64_t step, double seconds);

/* Where a resumed run would start to continue exactly after this rank's last batch, and
 * what it must match (refused otherwise): manifest, spec, seed. The world size is
 * informative: the global order depends only on the global batch, so a state resumes at
 * any world size. */
typedef struct {
    uint64_t manifest_hash, spec_hash, seed;
    int32_t world_size;
    int64_t global_batch;
    int64_t epoch, step; /* the next global batch this rank has not taken */
    /* Added in 0.2: that epoch's batches are shifted by so many samples (a job resumed at
     * another global batch); the samples consumed of the epoch are step * global_batch +
     * shift. */
    int64_t shift;
    int64_t global_step; /* the steps trained so far: the next batch's global step */
} dh_client_state;
DH_API int dh_client_state_get(dh_client *c, dh_client_state *st);

/*
 * Detaches from the agent (it takes back every batch still leased and may
 * reuse their memory) but keeps the pools mapped, so views that outlive the
 * connection never fault; dh_client_next fails from here. Any thread.
 */
DH_API void dh_client_detach(dh_client *c);
/*
 * Leaves as a failed rank: the agent treats this rank as dead (the run stops, or waits for
 * a restart) rather than as one that finished; for a trainer leaving on an exception.
 * dh_client_fail tells the agent why (printed in its events and in the other ranks'
 * errors; at most 200 bytes, non-printable bytes shown as '?'); dh_client_abort says
 * nothing. The pools stay mapped. Any thread.
 */
DH_API void dh_client_fail(dh_client *c, const char *why);
DH_API void dh_client_abort(dh_client *c);
/* Detaches (if not done yet), unmaps and frees: every batch pointer dies. Safe with NULL. */
DH_API void dh_client_close(dh_client *c);

#ifdef __cplusplus
}
#endif
#endif /* DATAHELIX_CLIENT_H */
