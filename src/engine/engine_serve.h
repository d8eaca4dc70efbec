/*
 * engine_serve.h - what a serving agent (src/dist) needs of the engine
 * beyond the public consumer API: the shared pools and where a batch lies
 * in them, and a way to stop the run with a reason. Internal.
 */
#ifndef DH_ENGINE_SERVE_H
#define DH_ENGINE_SERVE_H

#include "../core/core.h"

/*
 * dh_engine_start; with `shared` > 0 the batch pools are memfds (pages
 * reserved now, so a pool that does not fit fails here) with room for that
 * many batches kept by each rank, and the decoding threads wait for
 * dh__engine_begin.
 */
int dh__engine_start(const dh_run_config *cfg, int shared, dh_sample_error_cb on_error,
                     void *user, dh_engine **out, char *err, size_t errlen);
/* The memory budget dh__engine_start gives a serving engine of cfg when cfg->memory_budget
 * is 0 (bytes), or a negative error (cfg not runnable, the sentence in err). */
int64_t dh__engine_default_budget(const dh_run_config *cfg, int shared, char *err,
                                  size_t errlen);
/* Starts a shared engine's decoding, at (epoch, step) of the sample order when resume, that
 * epoch's batches shifted by `shift` samples (dh__sampler_shift), serving `steps` steps (what
 * remains of the job; ignored by an endless run). */
int dh__engine_begin(dh_engine *e, int resume, int64_t epoch, int64_t step, int64_t shift,
                     int64_t steps, char *err, size_t errlen);
/* Pool 0 (the ring) or 1 (the move arena): its memfd and size. 0 or DH_EINVAL. */
int dh__engine_pool(const dh_engine *e, int pool, int *fd, int64_t *size);
/* A trainer took (+1) or gave back (-1) a batch: the live figures' leases. Any thread. */
void dh__engine_count_lease(dh_engine *e, int delta);
/* Which pool holds a batch's data, and at what offset. 0 or DH_EINVAL. */
int dh__engine_locate(const dh_engine *e, const uint8_t *data, int32_t *pool, int64_t *offset);
/* An engine that will not begin (its ranks did not attach): on several nodes the others
 * learn why at their HELLO round instead of meeting a node that is gone. */
void dh__engine_refuse(dh_engine *e, int rc, const char *why);
/* A batch whose trainer died holding it: its memory is freed, but its rank never finished
 * it, so its step is not completed (not counted, not closed); the run is to stop. */
void dh__engine_reclaim(dh_engine *e, const dh_batch *b);
/* The run ends as its trainers meant, whatever the engine's code: they left together, or the
 * agent was stopped (a rank failing after that included). A run on several nodes then counts
 * the steps every rank took past the last closed one, as one node counts every step its
 * ranks all gave back (else they count only on a run that did not fail). Any thread. */
void dh__engine_count_taken(dh_engine *e);
/* Stops the run with error code rc (the first reason wins); every consumer wakes. */
void dh__engine_abort(dh_engine *e, int rc, const char *why);
/* On several nodes: why another node (or the exchange) stopped the run, or NULL. */
const char *dh__engine_peer_msg(dh_engine *e);
/* On several nodes: the sentence saying which other node was asked to stop, when every node
 * stopped with it (this one was not asked), or NULL. */
const char *dh__engine_stopped_by(dh_engine *e);
/* After dh_engine_finish, several nodes: another node's own fault that came before this
 * node's own (what the job's failure began with), or NULL. */
const char *dh__engine_earlier_msg(dh_engine *e);
/* Why the run stopped with DH_EFAILED (too many samples failed), or NULL. */
const char *dh__engine_fail_msg(dh_engine *e);
/* dh_engine_next_batch, except that when *wake comes back 1 the idle workers are
 * woken only by dh__engine_wake: call it once the batch has been answered (a
 * wake-up costs tens of microseconds on a VM, which the consumer need not wait
 * for). */
int dh__engine_next(dh_engine *e, int rank, dh_batch *out, int *wake);
void dh__engine_wake(dh_engine *e);
/* Before dh__engine_begin: the engine's workers decode only while holding a token of g
 * (shared with the other streams of the agent; gate.h). Not owned. */
struct dh__gate;
void dh__engine_set_gate(dh_engine *e, struct dh__gate *g);
/* Seconds this engine's workers waited for a token of its gate so far. */
double dh__engine_gate_wait(dh_engine *e);

#endif
