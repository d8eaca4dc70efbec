/*
 * run.h - what every run needs before its engine starts (internal): the
 * samples and their prediction table, the truth and stress (for engines),
 * the GPU models, the sampler that streams the sample order, and the memory
 * budget. Engine-independent, so the simulator and the real engine prepare
 * runs identically; the scheduler is handed predictions only.
 */
#ifndef DH_RUN_H
#define DH_RUN_H

#include "../metrics/metrics.h"
#include "../sched/sched.h"
#include "../truth/truth.h"

typedef struct {
    dh_run_config cfg;        /* with defaults filled in; steps 0: until stopped */
    dh_manifest *owned;       /* generated manifest, if any */
    const dh_manifest *m;
    dh_spec *spec;
    const dh_spec *use_spec;  /* cfg.spec, or the workload's */
    dh__samples samples;      /* predictions */
    int64_t bytes_max;        /* the largest sample's output bytes, and the mean (the */
    double bytes_mean;        /* budgets' inputs: once, not a pass over every row each) */
    dh__truth truth;          /* engines only */
    dh__gpu_model gpu;        /* scaled to rho: the truth model and the policy's start */
    dh_sampler *sampler;      /* the global order, drawn step by step */
    int64_t drawn;            /* steps drawn from the sampler so far */
    int64_t epoch0, step0;    /* where the sampler began (step 0 of the run) */
    int random;               /* the spec has random keys: costs follow each step's draws */
    int by_node;              /* the order lays each step out node by node (stratified, on
                               * several nodes of several ranks): the scheduler's deal */
    dh__records *rec;         /* where drawn steps' truth goes (set by the engine) */
    int truth_by_nodes;       /* several nodes: each node sums its own batches' truth into
                               * its STEP record (nodes_step.c), not every draw's */
    /* The simulator's ring of drawn steps' truth by position: step d's G entries in slot
     * d % DH__POS_TRUTH_STEPS, pos_truth_step[slot] the step they are (-1: none, as with
     * random keys, whose CPU truth follows each draw). Filled as the draw reads each
     * sample's truth for the records, so a task's start reads its position's entry, fetched
     * ahead, not its sample's at random in the whole dataset's (NULL: engines). */
    dh__truth_of *pos_truth;
    int64_t *pos_truth_step;
    dh__policy policy;
    char workload[64];
} dh__run;

#define DH__POS_TRUTH_STEPS 8 /* a power of two */
/* Test hook: set, the simulator keeps no such ring (the same results, read the slow way). */
extern _Atomic int dh__pos_truth_off;

/* The ring's slot of step st, and its entry for position pos of st when the ring holds that
 * step (else NULL). */
static inline int64_t dh__pos_truth_slot(int64_t st)
{
    return st & (DH__POS_TRUTH_STEPS - 1);
}

static inline const dh__truth_of *dh__run_pos_truth(const dh__run *run, int64_t st, int64_t pos)
{
    int64_t slot = dh__pos_truth_slot(st), G = run->cfg.global_batch;
    return run->pos_truth && run->pos_truth_step[slot] == st ? &run->pos_truth[slot * G + pos % G]
                                                              : NULL;
}

int dh__run_setup(const dh_run_config *cfg, dh__run *run, char *err, size_t errlen);

/*
 * Random augmentation (src/run/augment.c). The epoch of the run's step `step` (0: the
 * first the sampler gave); dh__run_begin_at records where the sampler begins. The draw of
 * item j of sample i in that step; sample i's raw predicted CPU seconds as drawn there
 * (scaled to this machine like the table); and its true CPU seconds (the truth of the
 * plain sample scaled by the drawn prediction over the plain one: simulated).
 */
void dh__run_begin_at(dh__run *run, int64_t epoch, int64_t step);
int64_t dh__run_epoch_of(const dh__run *run, int64_t step);
int dh__run_draw(const dh__run *run, int64_t step, int64_t i, int32_t j, dh_media_draw *out);
double dh__run_drawn_cpu(const dh__run *run, int64_t step, int64_t i);
double dh__run_true_cpu(const dh__run *run, int64_t step, int64_t i);
/* The same for a drawn prediction already made (the order source's). */
double dh__run_true_of(const dh__run *run, int64_t i, double drawn);
/* Adds the modelled truth of samples[0, n) of step `step` (as its draw made them) to *gpu,
 * *gpu_max and *cpu: a node's share of a step's records (truth_by_nodes). */
void dh__run_add_truth(const dh__run *run, int64_t step, const int64_t *samples, int32_t n,
                       double *gpu, double *gpu_max, double *cpu);
/* "uniform" or "stratified" (dh_run_config.order, --order). */
const char *dh__order_name(int order);
void dh__run_free(dh__run *run);
/* Every result field both engines fill alike (metrics, calibration, counters); out is whole. */
void dh__run_fill_result(const dh__run *run, const dh__sched *sched, dh__records *rec,
                         const char *engine, dh_result *out);

/*
 * The scheduler config of this run (predictions only). Its order source
 * draws from run->sampler and, when run->rec is set, records each drawn
 * step's true costs there (the bound's inputs).
 */
/* The scheduler's config; it admits dh__run_admission_budget(run, leases). */
void dh__run_sched_config(dh__run *run, int leases, dh__sched_config *sc);

/*
 * One memory budget (cfg.memory_budget) holds everything a run keeps: admitted batches,
 * the pool's slack (two of the largest batches, so out-of-order releases and
 * fragmentation never starve admission; plus `leases` batches per rank that trainers may
 * keep when serving) and, for rebalancing policies, the move arena. Admissions get what
 * is left. dh__run_check_budget: DH_EINVAL with the size needed when a budget cannot
 * hold one largest batch besides the rest.
 */
int64_t dh__run_pool_slack(const dh__run *run, int leases);
int64_t dh__run_arena_bytes(const dh__run *run); /* 0 without rebalancing */
int64_t dh__run_admission_budget(const dh__run *run, int leases);
int64_t dh__run_min_budget(const dh__run *run, int leases); /* the smallest it accepts */
/* One node's share of the run's budget on cfg.nodes nodes: asked / nodes, or (asked 0) its
 * share of the default admissions plus its own pool slack and move arena. */
int64_t dh__run_node_budget(const dh__run *run, int64_t asked, int leases);
int dh__run_check_budget(const dh__run *run, int leases, char *err, size_t errlen);

/*
 * Where every run entry point starts: clears err, then 0 when out is an
 * initialised result the library may write, else DH_EINVAL and a message.
 */
int dh__result_check(const dh_result *out, char *err, size_t errlen);
/* Copies full into out, as many bytes as the caller's struct has. */
void dh__result_give(dh_result *out, const dh_result *full);

/* 1 when cfg.should_stop says the run must end now. */
int dh__run_should_stop(const dh__run *run);

#endif
