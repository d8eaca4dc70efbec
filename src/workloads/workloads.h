/*
 * workloads.h - the built-in workload table (internal): generator, GPU model
 * shape, load factor and global batch of each workload of docs/WORKLOADS.md.
 */
#ifndef DH_WORKLOADS_H
#define DH_WORKLOADS_H

#include "../cost/cost.h"

#define DH_WORKLOAD_LINE_MAX 16384

typedef struct gen_ctx gen_ctx;

typedef struct {
    const char *name; /* also the name of its built-in spec */
    double rho;
    int64_t global_batch;
    dh__gpu_model gpu; /* relative shape; scaled to rho per run */
    void (*generate)(gen_ctx *g);
} dh__workload;

const dh__workload *dh__workload_find(const char *name);

#endif
