/*
 * datahelix/run.h - what a run is (dh_run_config), what it measured
 * (dh_result, the JSON result contract), the policies, and the simulator.
 * Part of the public C API; include <datahelix.h> for all of it.
 */
#ifndef DATAHELIX_RUN_H
#define DATAHELIX_RUN_H

#include "catalog.h"

#ifdef __cplusplus
extern "C" {
#endif
/* ------------------------------------------------------------------ runs */

struct dh_batch_item; /* an item of a prepared batch (datahelix/engine.h) */

/*
 * Stress of the ground truth, for tests and benchmarks of the mechanisms
 * (never for production runs): truth moves away from what descriptors and
 * predictions say, and policies must cope. Both engines honour it (the real
 * engine's emulated ranks take their compute time from the truth).
 */
typedef struct {
    /* this fraction of samples (seeded) truly carries understate_factor x the tokens and
     * latents their descriptors say; policies still see the descriptors */
    double understate_fraction, understate_factor;
    int understate_told; /* the same heavier samples, described truthfully (the reference) */
    double cpu_noise_sigma; /* log-normal sigma of CPU truth around the model; 0: 0.25 */
    /* this fraction of samples truly costs cpu_heavy_factor x its predicted CPU */
    double cpu_heavy_fraction, cpu_heavy_factor;
} dh_stress;

/* The largest factor a stress may apply (larger values are refused: DH_EINVAL). */
#define DH_STRESS_MAX_FACTOR 1000.0
/* The largest memory budget a run accepts (1 PiB): sums of batch sizes stay far from overflow. */
#define DH_MAX_MEMORY_BUDGET (INT64_C(1) << 50)

/*
 * One run of a policy over a manifest, in the simulator (engine "sim") or
 * the real engine ("real"). Initialise with dh_run_config_default (it sets
 * struct_size, so a caller built against an older, smaller struct keeps
 * working: fields it does not know take their defaults). Zero fields take
 * defaults: global_batch from the workload (or 64), steps = one epoch of
 * complete batches, memory_budget = what the DataLoader baseline holds (2
 * batches per worker). Lifetimes: manifest, spec, stress and the strings
 * must outlive the run (for the real engine, until dh_engine_free).
 */
typedef struct {
    uint32_t struct_size;    /* sizeof(dh_run_config) of the caller; set by the init function */
    const char *workload;    /* built-in workload (spec, GPU model, rho); NULL with a manifest */
    const dh_manifest *manifest; /* run these samples; NULL: generate the workload */
    const dh_spec *spec;     /* overrides the workload's spec; may be NULL */
    const char *policy;      /* local | pool | helix | helix-nobalance | helix-fifo | helix-noreb */
    int ranks, workers;
    int64_t global_batch;
    int64_t steps;
    uint64_t seed;
    int64_t memory_budget;   /* bytes of prepared + in-preparation batches */
    double rho;              /* 0: the workload's load factor (1.0 for a plain manifest) */
    double cpu_cost_scale;   /* measured / predicted CPU cost on this machine; 0: 1 */
    int nodes;               /* ranks and workers split evenly over nodes; 0: 1 */
    double net_bandwidth;    /* bytes/s between nodes; 0: 100 Gb/s */
    double net_latency;      /* seconds per transfer between nodes; 0: 20 us */
    int64_t rank_token_cap;  /* helix placement: tokens per rank per step; 0: none */
    int64_t rank_byte_cap;   /* helix placement: output bytes per rank per step; 0: none */
    const char *trace_path;  /* Chrome trace (Perfetto) of the run, or NULL */
    /* Real engine (emulated ranks): called after each completed step, from a rank thread;
     * steps is -1 for a run without a length. May be NULL. */
    void (*progress)(int64_t step_done, int64_t steps, void *user);
    void *progress_user;
    /* bytes/s of handing a prepared sample to another rank of the same node (rebalancing's
     * transfer cost); 0: 20 GB/s, a shared-memory copy */
    double move_bandwidth;
    /*
     * Real engine: the exact GPU seconds of a prepared sample, read from its decoded items
     * (what the model really sees, e.g. tokens after dropping padding), or < 0 if unknown.
     * Called once per prepared sample, from the worker thread that completes it, with the
     * engine's lock held: keep it cheap. NULL: the emulated ranks' per-sample time.
     * Rebalancing (helix) moves prepared samples between the ranks of a step on these costs.
     */
    double (*sample_gpu_cost)(int64_t sample, const struct dh_batch_item *items, int32_t nitems,
                              const uint8_t *data, void *user);
    void *sample_gpu_cost_user;
    /*
     * Run length (with `steps` above): steps > 0 runs that many global batches; steps ==
     * DH_STEPS_FOREVER goes on epoch after epoch until stopped (dh_engine_stop, or
     * should_stop); steps == 0 runs `epochs` whole epochs (0: one epoch; a workload run
     * without a manifest: 200 steps).
     */
    int64_t epochs;
    /* Polled by the engines (once per step) and the agent (every 200 ms), possibly from
     * several threads at once: keep it thread-safe and cheap (an atomic or sig_atomic_t
     * flag). Nonzero ends the run after the steps in flight, with the accounting of what
     * was done; while a workload's dataset is generated (asked every 4,096 samples), it
     * ends the run before it starts, with DH_ECANCELED. May be NULL. */
    int (*should_stop)(void *user);
    void *should_stop_user;
    /* Samples a workload run generates (its dataset; epochs go round it); 0: the samples
     * of min(steps, 1000) global batches (200 batches when steps is 0). */
    int64_t workload_samples;
    const dh_stress *stress; /* tests and benchmarks only; NULL: the truth as it is */
    /* Resume: step 0 of this run is global batch start_step of epoch start_epoch of the
     * sampler's order (what an uninterrupted run would have reached); used when resume. */
    int resume;
    int64_t start_epoch, start_step;
    /* Real engine: seconds a worker may spend reading and decoding one sample (or one part
     * of a split one) before abandoning it with DH_ETIMEDOUT, so no file holds a worker
     * forever. 0: per task, 20x its predicted CPU time, at least 10 s and at most 300 s;
     * < 0: no limit. */
    double sample_timeout_s;
    /*
     * Real engine on several nodes (the agent under mpirun; docs/MULTINODE.md). With
     * nodes > 1 and exchange set, this process is node `node` (0 .. nodes - 1): it runs
     * ranks [node * R / nodes, (node + 1) * R / nodes) and W / nodes workers, plans every
     * step as every other node does, and calls exchange when it starts, after each step and
     * when it ends. exchange is an allgather: every node gives `bytes` bytes of mine and all
     * receives nodes * bytes, node by node; it returns when every node has called it, 0 or a
     * negative error (DH_EPEER: a node died) with a sentence in err. Each node holds
     * memory_budget / nodes. Called from an engine thread, never with the engine's lock.
     */
    int node;
    int (*exchange)(void *user, const void *mine, void *all, size_t bytes, char *err,
                    size_t errlen);
    void *exchange_user;
    /*
     * Several nodes, optional: messages between nodes, for CPU lending (helix: an idle node
     * prepares another node's late samples and ships them back). Both NULL: no lending. send
     * queues len bytes of buf (copied) for node `to` and returns at once: 0 or an error.
     * recv waits up to timeout_s for the next message to this node: 0 with *from, *data
     * (allocated with malloc-compatible memory; the engine frees it with free()) and *len;
     * DH_ETIMEDOUT; or another error (a node died: the run stops with the sentence in err).
     * Same user pointer as exchange.
     */
    int (*send)(void *user, int to, const void *buf, size_t len);
    int (*recv)(void *user, int *from, void **data, size_t *len, double timeout_s, char *err,
                size_t errlen);
    /* Added in 0.2. The sample order: no_shuffle keeps the manifest's order in every epoch
     * (validation); keep_last keeps the incomplete last batch of an epoch, filled up with
     * samples from the epoch's start, which the agent marks as padding (a trainer's
     * batch["pad"]), so every sample of an epoch is delivered exactly once unpadded. */
    int no_shuffle, keep_last;
    /* Added in 0.2. Real engine: the run stops with DH_EFAILED once at least 16 samples
     * failed and they are more than this fraction of the samples with media finished so far
     * (files that moved, a store that is down: no job should train on zeros for hours); a
     * run in which no sample with media was read fails at its end. 0: the default, 0.5; 1:
     * never stop. */
    double max_failed_frac;
    /* Added in 0.2. 1: the run's spec (spec, or the workload's) with the standard training
     * augmentation added (dh_spec_augment, `--augment`); the caller's spec is not changed. */
    int augment;
    /* Added in 0.2 (docs/STORAGE.md). Real engine, media on object stores: threads per
     * node that fetch the samples the schedule says come next while workers decode others
     * (0: the default, 16; -1: none, a worker fetches a sample's bytes when it starts it),
     * and the bytes fetched ahead and not yet decoded, at most (0: the default, 256 MiB). */
    int fetchers;
    int64_t fetch_ahead_bytes;
    /* Added in 0.2. Simulator: every sample's media are on an object store, fetched over a
     * link of fetch_bandwidth bytes/s per node (0: 10 Gb/s) with fetch_latency_s per request
     * (blocks of 256 KiB), by the fetchers ahead of the schedule or by the worker that starts
     * the sample (fetchers -1); both 0: local media, nothing fetched. A sample's stored size
     * is its media's "bytes", else an estimate from its descriptor (docs/STORAGE.md). */
    double fetch_latency_s, fetch_bandwidth;
    /* Added in 0.3. Real engine: publish live figures at this endpoint (datahelix/metrics.h)
     * under the label stream=metrics_stream (NULL: "train"; dh_serve_streams: the stream's
     * name) while the run goes on. NULL: none. */
    struct dh_metrics *metrics;
    const char *metrics_stream;
    /* Added in 0.3. 1: every item takes its plain draw (dh_spec_plain, `--no-augment`), over
     * augment and the spec's own random keys: a validation stream beside training. */
    int no_augment;
    /* Added in 0.3. The order's kind (`--order`): DH_ORDER_UNIFORM (0), each epoch a uniform
     * shuffle; DH_ORDER_STRATIFIED (experimental: a later release may retire it, and take
     * it for uniform), each epoch interleaves classes of predicted GPU cost
     * evenly (every step holds each class in proportion) and, on several nodes of several
     * ranks, each node's share of a step is fixed by the order itself, so no replica sorts
     * and deals the step (docs/MULTINODE.md). A resumed job keeps its order's kind. */
    int order;
} dh_run_config;

enum { DH_ORDER_UNIFORM = 0, DH_ORDER_STRATIFIED = 1 };

/* steps value of a run that goes on until it is stopped. */
#define DH_STEPS_FOREVER (-1)

/* Fills cfg with defaults (helix, 8 ranks, 32 workers, seed 1) and its struct_size. */
DH_API void dh_run_config_default(dh_run_config *cfg);
DH_API const char *const *dh_policy_names(void); /* NULL-terminated, static; any thread */

/*
 * The result contract (docs/DESIGN.md, "Metrics"): every metric of one run.
 * Initialise with dh_result_init (or DH_RESULT_INIT) before passing it to a
 * run: the library writes only the struct_size bytes the caller has.
 */
typedef struct {
    uint32_t struct_size;   /* sizeof(dh_result) of the caller; set by the init function */
    char workload[64], policy[32], engine[8];
    int ranks, workers;
    int64_t steps, samples, delivered, failed;
    double makespan_s, throughput_sps, bound_s, efficiency, miss_rate;
    double fill_wait_ms, wait_mean_ms, wait_p50_ms, wait_p95_ms, wait_p99_ms, gpu_idle_frac;
    double cpu_mape, gpu_mape; /* running prediction error of the calibrated models */
    double bound_gpu_s, bound_cpu_s; /* the two terms of the bound */
    /* sum over steps of o + the slowest rank's true compute under the chosen placement:
     * the makespan with zero input wait. bound <= placement <= makespan splits the loss
     * into placement (integrality, prediction error) and input wait (scheduling). */
    double placement_s;
    int64_t memory_budget, memory_peak;
    int64_t cap_violations; /* samples placed over a per-rank cap no rank could meet */
    double framework_overhead; /* real engine: worker CPU not spent decoding, as a fraction */
    /* collective rebalancing (helix): candidate moves, applied, refused by the gate */
    int64_t reb_considered, reb_moved, reb_gated, reb_bytes;
    double reb_predicted_gain_s, reb_realised_gain_s;
    /* CPU readiness across nodes: remote late samples considered, prepared elsewhere, gated */
    int64_t lend_considered, lent, lend_gated, bytes_shipped;
    double wall_s; /* time the simulator itself took */
    /* moves of plans that passed the gate but were not carried out (a per-rank cap, or the
     * real engine had no buffer room to receive them) */
    int64_t reb_refused;
    /* real engine: seconds spent moving decoded data for rebalancing, and the gate's
     * calibrated transfer cost (measured / modelled; 1 in the simulator) */
    double reb_move_s, reb_move_factor;
    /* of the input wait (steps >= 1), the fraction a single task explains: the batch's
     * longest task (or split part), started when its step's first task did, would still
     * end that late, so no placement or lending hides it (only finer splitting could) */
    double wait_single_frac;
    /* Step stalls (steps >= 1): a synchronous step waits for its slowest rank, so a step's
     * stall is the longest input wait among its ranks, what the collective really loses.
     * late_step_frac: steps with any rank late. */
    double stall_mean_ms, stall_p95_ms, stall_p99_ms, late_step_frac;
    /* Several nodes (real engine): nodes of the run (1 otherwise); per step, the mean and
     * largest seconds a node spent in the step exchange (the allgather, including waiting for
     * the slowest node), and the mean seconds it held the engine's lock to build its record
     * and apply the others' (the control plane's own cost). */
    int nodes;
    double exchange_mean_s, exchange_max_s, control_mean_s;
    /* of reb_moved: samples moved to a rank of another node (their bytes over the network) */
    int64_t reb_remote, reb_remote_bytes;
    /* between nodes, the gates' network model scaled by what transfers measured (moves and
     * lent samples; the largest of the nodes'; 1 in the simulator) */
    double net_factor;
    /* Objects read from HTTP(S)/S3 stores by the workers (docs/STORAGE.md; 0 for local
     * files and in the simulator): body bytes, requests, retries of transient failures,
     * reads that failed after them, and seconds workers spent waiting on those requests
     * (backoff included), summed over workers and nodes. */
    int64_t fetch_bytes, fetch_requests, fetch_retries, fetch_failures;
    double fetch_wait_s;
    /* Of those, the fetchers' (fetching ahead): ranges a worker found ready, found in
     * flight and waited for, found nowhere (fetched itself), and dropped unused. */
    int64_t fetch_ahead_ready, fetch_ahead_waited, fetch_ahead_missed, fetch_ahead_dropped;
    /* The fetch cost model calibrated from the run's answered requests: seconds per request
     * and bytes/s (t = latency + bytes / bandwidth, least squares; 0: too few requests, or
     * bandwidth 0 when their sizes did not vary enough). What sim --fetch-latency-ms and
     * --fetch-gbps take to replay this store. */
    double fetch_latency_s, fetch_bandwidth;
    /* ranges read from the local fetch cache (DH_FETCH_CACHE) instead of the store */
    int64_t fetch_cache_hits, fetch_cache_bytes;
    /* Added in 0.2. Simulator: of wall_s, the seconds spent building the run before the first
     * event (the workload's descriptors, cost models, sampler); wall_s - setup_s is the event
     * loop, the scheduler's decisions included. 0 in the real engine. */
    double setup_s;
    /* Added in 0.3. The bound from the cost models instead of what was measured: for the
     * real engine, the calibrated CPU model's cost of the completed steps' samples in place
     * of the CPU they measured (what the simulator would bound the run by; it can exceed the
     * makespan when the model overestimates this machine); equal to bound_s in the
     * simulator; 0 for loaders outside the library (no model of theirs). */
    double model_bound_s;
    /* Added in 0.3. A tighter lower bound than bound_s, with the pipeline's fill and drain:
     * ranks compute the steps in order and start one only with its batch prepared, so the
     * last rank to start step k cannot before all CPU of steps 0..k is done on the W
     * workers; max over k of that, the smallest batch of step k in this run's placement,
     * the step's fixed cost and the later steps' GPU terms (docs/DESIGN.md). At least
     * bound_s; from the same costs (true in the simulator, measured in the real engine).
     * efficiency_ordered = bound_ordered_s / makespan_s: how near the run came to what any
     * schedule of these batches could (another placement has its own bound). */
    double bound_ordered_s, efficiency_ordered;
    /* Added in 0.3. The sample order's kind (--order): "uniform" or "stratified". */
    char order[16];
} dh_result;

#define DH_RESULT_INIT {.struct_size = sizeof(dh_result)}
DH_API void dh_result_init(dh_result *r);

/*
 * Runs cfg in the discrete-event simulator and fills *out (initialised with
 * dh_result_init). A run needs a length (steps or epochs), or should_stop.
 * errbuf (may be NULL) gets a sentence on failure. Thread-safety: runs on the
 * calling thread; concurrent runs on different configs are independent.
 */
DH_API int dh_sim_run(const dh_run_config *cfg, dh_result *out, char *errbuf, size_t errlen);
/*
 * Loaders outside the library (the bench's PyTorch DataLoader contender), measured with
 * the same metrics. dh_run_emulated_gpu fills gpu_s[i] (n = the run's samples, manifest
 * order) with the seconds the real engine's emulated ranks compute for sample i under cfg,
 * and *step_fixed_s with the fixed cost each step pays after its barrier.
 */
DH_API int dh_run_emulated_gpu(const dh_run_config *cfg, double *gpu_s, int64_t n,
                               double *step_fixed_s, char *err, size_t errlen);

/* One (step, rank) of an outside run; seconds since the run started. */
typedef struct {
    double asked;            /* the rank asked for its batch (its deadline) */
    double ready;            /* it had the batch */
    double compute;          /* the (emulated) compute it then did */
    double first_task_start; /* when the step's first sample began to be prepared, or -1 */
    double longest_task;     /* the batch's longest single sample preparation */
} dh_external_batch;

/* One step of an outside run: the true costs of its samples (the bound's inputs). */
typedef struct {
    double gpu_sum, gpu_max; /* emulated compute of its samples: sum and largest */
    double cpu_sum;          /* measured CPU seconds of preparing its samples */
    int64_t failed;          /* its samples that could not be prepared */
} dh_external_step;

typedef struct {
    const char *workload, *policy, *engine; /* names for the result; engine NULL: "real" */
    int ranks, workers;
    int64_t global_batch, steps;
    const dh_external_batch *batches; /* steps * ranks, step-major */
    const dh_external_step *step_info; /* steps */
    double step_fixed_s, makespan_s;
    int64_t memory_budget, memory_peak; /* as the caller measured them; 0: not measured */
    double framework_overhead;
} dh_external_run;

/* Fills *out (initialised with dh_result_init) from an outside run's timings. */
DH_API int dh_result_from_steps(const dh_external_run *run, dh_result *out, char *err,
                                size_t errlen);

/* Writes one result as a JSON object (no trailing newline). Any thread. */
DH_API int dh_result_write_json(const dh_result *r, void *file /* FILE * */);

#ifdef __cplusplus
}
#endif
#endif /* DATAHELIX_RUN_H */
