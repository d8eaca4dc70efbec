/*
 * datahelix/serve.h - the per-node agent: one process owns the node's CPU
 * workers, the scheduler and the batch buffers, and serves batches to the
 * node's training processes (its ranks) over a Unix socket, zero-copy: the
 * buffers are shared memory each trainer maps (datahelix/client.h).
 * Part of the public C API; include <datahelix.h> for all of it.
 */
#ifndef DATAHELIX_SERVE_H
#define DATAHELIX_SERVE_H

#include "engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * How the agent serves. Initialise with dh_serve_opts_default (it sets
 * struct_size). Strings must outlive dh_serve.
 */
typedef struct {
    uint32_t struct_size;
    /*
     * Where to listen: "@NAME" is a Linux abstract socket (nothing on disk, so a
     * killed agent leaves nothing behind; only processes of the same user are
     * accepted), anything else a filesystem path (created mode 0600, a stale
     * one from a dead agent is replaced). NULL: dh_serve_default_socket(NULL).
     */
    const char *socket;
    int max_leases;        /* batches a rank may hold at once; 0: 4 */
    int attach_timeout_ms; /* how long to wait for every rank to attach; 0: 300 s */
    int io_timeout_ms;     /* a handshake or a message once begun; 0: 30 s */
    /* Attach, detach and fault events as sentences (from agent threads); may be NULL. While
     * the agent waits for its ranks it also says how many came, every $DH_PROGRESS_SECONDS
     * (default 30), in a sentence that starts with DH_SERVE_WAITING_EVENT (progress, which
     * a quiet caller may drop). */
    void (*on_event)(const char *message, void *user);
    void *event_user;
    /* Added in 0.2. What a rank's death (or early leaving) does: DH_ON_RANK_EXIT_STOP ends
     * the run (every other rank is told who died); DH_ON_RANK_EXIT_WAIT tells the others the
     * same, takes every lease back and waits (attach_timeout_ms) for a new set of ranks, as
     * an elastic launcher (torchrun --max_restarts) starts them: they resume from a state
     * they present, else from the last step every rank had completed. One node only. */
    int on_rank_exit;
    /* Added in 0.2. dh_serve_streams: the batch memory of all the streams together, split
     * over those whose cfg names no memory_budget in proportion to what each would take by
     * default; 0: each stream its own (cfg's, or its default). */
    int64_t memory_budget;
} dh_serve_opts;

enum { DH_ON_RANK_EXIT_STOP = 0, DH_ON_RANK_EXIT_WAIT = 1 };
#define DH_SERVE_WAITING_EVENT "waiting for ranks:"

DH_API void dh_serve_opts_default(dh_serve_opts *o);

/*
 * The default socket of a job: "@datahelix-UID-JOB", JOB from the argument,
 * else $DH_JOB, else "default". Writes at most len bytes. 0 or DH_ERANGE.
 */
DH_API int dh_serve_default_socket(const char *job, char *out, size_t len);

/*
 * Runs the agent: listens, waits for cfg->ranks trainers to attach (each
 * names its rank, the world size, the global batch and the hashes of its
 * manifest and spec; a mismatch is refused with a sentence saying what
 * differs), starts the engine with its batch pools in shared memory, and
 * serves until the run's last step is consumed, every rank has detached,
 * cfg->should_stop says so, or a rank dies (then every other rank's next
 * request fails with an error naming the dead rank and its pid; with
 * DH_ON_RANK_EXIT_WAIT the agent then waits for the ranks to come back). The
 * run's length (cfg->steps, cfg->epochs) counts from the start of training:
 * a job resumed from a saved state serves what remains of it. Fills *out
 * (initialised with dh_result_init) with the accounting of the completed
 * steps (after restarts: of the last set of ranks). 0 when the run did what
 * was asked; DH_EPEER when ranks died or a finite run was cut short by a
 * rank leaving before its end; on several nodes, DH_ECANCELED (errbuf naming
 * it) when another node's agent was stopped and every node with it (*out
 * filled). Blocks the calling thread; on_error as for
 * dh_engine_run.
 */
DH_API int dh_serve(const dh_run_config *cfg, const dh_serve_opts *opts,
                    dh_sample_error_cb on_error, void *user, dh_result *out, char *errbuf,
                    size_t errlen);

/*
 * Added in 0.2: one agent serving several named streams (say "train" and "val"), each its
 * own run (manifest, spec, shuffling, global batch, length) for the same trainer
 * processes, on one socket: a trainer names its stream in dh_client_opts.stream ("" or
 * NULL: the first). The streams share the node's CPU: their engines decode only while
 * holding one of W tokens, W the first stream's workers, handed first to a stream with a
 * rank waiting for a batch, then to the task with the least slack; and one memory budget
 * (dh_serve_opts.memory_budget). Initialise each with dh_serve_stream_default.
 */
#define DH_SERVE_MAX_STREAMS 8

typedef struct {
    uint32_t struct_size;
    const char *name;              /* 1 to 31 bytes; NULL or "" (first stream only): "train" */
    const dh_run_config *cfg;      /* one node only when there are several streams */
    dh_sample_error_cb on_error;   /* as for dh_serve; may be NULL */
    void *user;
    dh_result *out;                /* this stream's accounting (dh_result_init) */
} dh_serve_stream;

DH_API void dh_serve_stream_default(dh_serve_stream *s);

/*
 * Runs the agent for n streams (1 .. DH_SERVE_MAX_STREAMS) on opts' socket: each stream
 * as dh_serve runs its cfg, with its own ranks attaching (the same processes, one Loader
 * per stream), restarts and accounting in its out. A stream no trainer attached to while
 * the others ran ends without running (its out untouched, not a failure). Returns when
 * every stream ended: 0 when each did what was asked, else the first failure's code with
 * "stream NAME: why" in errbuf.
 */
DH_API int dh_serve_streams(const dh_serve_stream *streams, int n, const dh_serve_opts *opts,
                            char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* DATAHELIX_SERVE_H */
