/*
 * datahelix/engine.h - the real engine: decoding threads that prepare
 * batches into one buffer pool, the consumer API for ranks, emulated ranks,
 * and measuring this machine's decode speed.
 * Part of the public C API; include <datahelix.h> for all of it.
 */
#ifndef DATAHELIX_ENGINE_H
#define DATAHELIX_ENGINE_H

#include "run.h"

#ifdef __cplusplus
extern "C" {
#endif
/* ------------------------------------------------------------ real engine */

/*
 * One prepared batch of rank r for step s: a contiguous buffer whose layout
 * was fixed from the descriptors before decoding (and laid out afresh if
 * rebalancing moved prepared samples in or out before the step began). Each media item of each
 * sample has its slot (64-byte aligned, packed, not padded); a sample that
 * failed has status < 0 on its items and zero-filled slots, and is counted
 * in nfailed. Valid until dh_engine_release().
 */
typedef struct dh_batch_item {
    int64_t sample;      /* index in the manifest */
    int32_t media;       /* media item within the sample */
    int32_t type;        /* dh_media_type */
    int32_t ndim;
    int32_t elem_bytes;  /* 1: uint8, 4: float32 */
    int64_t shape[4];
    int64_t offset;      /* from data */
    int64_t bytes;
    int32_t status;      /* 0, or the negative error code of its sample */
} dh_batch_item;

typedef struct {
    int64_t step;
    int32_t rank;
    int32_t nsamples, nitems, nfailed;
    const int64_t *samples;       /* manifest indices, nsamples */
    const int64_t *tokens;        /* tokens per sample (text + media), nsamples */
    const dh_batch_item *items;   /* nitems, grouped by sample (their memory: by type) */
    const uint8_t *data;
    int64_t bytes;
    /* nitems: what the spec's random augmentation drew for each item (the plain draw
     * without random keys): the clip, crop rectangle, flip, audio window (catalog.h) */
    const dh_media_draw *draws;
} dh_batch;

/* A per-sample failure: which sample and file, and why. Strings valid during the callback. */
typedef struct {
    int64_t step;
    int32_t rank;
    int64_t sample;
    const char *id;
    const char *path;
    int code;
    const char *message;
} dh_sample_error;

/* Called from a worker thread, with the engine's lock held: do not call back into the engine. */
typedef void (*dh_sample_error_cb)(const dh_sample_error *e, void *user);

/*
 * The engine as a service for real consumers: start it, then each rank's
 * consumer takes batches with dh_engine_next_batch and gives each back with
 * dh_engine_release; dh_engine_stop ends a run early; dh_engine_finish waits
 * for the workers and fills the result; dh_engine_free releases everything.
 */
typedef struct dh_engine dh_engine;

/*
 * Starts W decoding threads for cfg (cfg->manifest of real media required).
 * On success *out owns the engine (free with dh_engine_free). cfg's manifest,
 * spec, stress and strings must outlive the engine; cfg itself is copied.
 * on_error (may be NULL) is called for every failed sample. On failure
 * nothing is left running and errbuf (may be NULL) says why.
 */
DH_API int dh_engine_start(const dh_run_config *cfg, dh_sample_error_cb on_error, void *user,
                           dh_engine **out, char *errbuf, size_t errlen);
/*
 * Blocks until batch (next step, rank) is ready and describes it in *out,
 * valid until dh_engine_release of that batch. Returns DH_EEMPTY after the
 * run's last step, DH_ECANCELED once the run was stopped (dh_engine_stop,
 * should_stop), or the error that stopped the engine. Thread-safety: any
 * thread, one caller per rank at a time; ranks are independent.
 */
DH_API int dh_engine_next_batch(dh_engine *e, int rank, dh_batch *out);
/*
 * Ends rank b->rank's step b->step: its buffer may be reused from here.
 * gpu_seconds is the compute time the rank observed (< 0: unknown); it
 * recalibrates the GPU model and the deadlines. Releasing twice is ignored.
 * Any thread.
 */
DH_API void dh_engine_release(dh_engine *e, const dh_batch *b, double gpu_seconds);
/*
 * Stops the run: workers finish their current task and exit, every consumer
 * blocked in dh_engine_next_batch returns DH_ECANCELED (a batch that is
 * already complete may still be taken). Safe from any thread, and from a
 * progress or should_stop callback; not from a signal handler (set a flag
 * that should_stop reads instead). Then call dh_engine_finish.
 */
DH_API void dh_engine_stop(dh_engine *e);
/*
 * Stops the workers (as dh_engine_stop), joins them and fills *out (may be
 * NULL; initialised with dh_result_init) with the run's result: steps every
 * rank completed, delivered + failed = samples of those steps. Returns 0, or
 * the error that stopped the run. Call once, after every consumer returned.
 */
DH_API int dh_engine_finish(dh_engine *e, dh_result *out);
/* Frees the engine (after dh_engine_finish); every batch pointer becomes invalid. */
DH_API void dh_engine_free(dh_engine *e);
/*
 * Decodes the first `count` samples of m under spec on this thread, twice,
 * and returns the lower of the two passes' measured / predicted CPU time in
 * *scale: the factor that brings docs/WORKLOADS.md's starting constants to
 * this machine (the lower pass, as a moment of contention or cold caches
 * only ever inflate it). Any thread; m and spec are only read.
 */
DH_API int dh_measure_cpu_scale(const dh_manifest *m, const dh_spec *spec, int64_t count,
                                double *scale, char *errbuf, size_t errlen);

/* The true GPU seconds of a batch (the emulated ranks sleep this long). Any thread. */
DH_API double dh_engine_batch_gpu_seconds(const dh_engine *e, const dh_batch *b);

/*
 * Runs cfg on the real engine: W decoding threads on this machine feeding R
 * emulated ranks that sleep each batch's ground-truth GPU time (the
 * workload's model, or sim.gpu_ms) and meet at a barrier per step. cfg must
 * carry a manifest of real media. Per-sample failures go to on_error (may
 * be NULL) and are counted: delivered + failed = samples. Blocks the calling
 * thread for the run; should_stop (polled once per completed step, and on
 * one node every 0.2 s on the calling thread, so a step that does not end
 * does not hold it; never two calls at once) ends it early with the
 * accounting of the completed steps.
 */
DH_API int dh_engine_run(const dh_run_config *cfg, dh_sample_error_cb on_error, void *user,
                         dh_result *out, char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* DATAHELIX_ENGINE_H */
