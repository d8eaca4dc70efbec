/*
 * workloads.h - the built-in workload table (internal): generator, GPU model
 * shape, load factor and global batch of each workload of docs/WORKLOADS.md.
 */
#ifndef DH_WORKLOADS_H
#define DH_WORKLOADS_H

#include "../cost/cost.h"

typedef struct gen_ctx gen_ctx;

typedef struct {
    const char *name; /* also the name of its built-in spec */
    double rho;
    int64_t global_batch;
    dh__gpu_model gpu; /* relative shape; scaled to rho per run */
    void (*generate)(gen_ctx *g);
} dh__workload;

const dh__workload *dh__workload_find(const char *name);
/* dh_workload_generate, asking stop(user) after every 4,096 samples (may be NULL; a dataset
 * under 4,097 samples never asks): DH_ECANCELED once it says so (a run's should_stop:
 * Ctrl-C while a large dataset is generated). */
int dh__workload_generate_until(const char *name, int64_t samples, uint64_t seed,
                                int (*stop)(void *), void *user, dh_manifest **out);

#endif
