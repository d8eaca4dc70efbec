/*
 * nodes_meet.c - the rounds every node takes part in before the steps, and
 * what the layer's files share to make any round (nodes_int.h): GREETING
 * (every node the same release, with records of the same size), HELLO (the
 * same job: refused naming the setting that differs) and BEGIN (the same
 * resume point). A leaf of the several-node layer: it calls only
 * nodes_wire.c and the engine's base.
 */
#include "nodes_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One round of `bytes` from mine into all, every node's (without e->mu). */
static int exchange(dh_engine *e, const void *mine, void *all, size_t bytes, char *err,
                    size_t errlen)
{
    err[0] = 0;
    int rc = e->run.cfg.exchange(e->run.cfg.exchange_user, mine, all, bytes, err, errlen);
    if (rc && !err[0])
        dh__msg(err, errlen, "the exchange between nodes failed: %s", dh_strerror(rc));
    return rc;
}

int dh__nodes_round(dh_engine *e, char *err, size_t errlen)
{
    struct dh__xchg *x = e->x;
    x->mine->node = e->node;
    int rc = exchange(e, x->mine, x->all, x->bytes, err, errlen);
    for (int k = 0; !rc && k < e->nodes; k++)
        rc = dh__wire_check_record(&x->lim, k, rec_of(x, k), err, errlen);
    return rc;
}

int dh__nodes_push(void **arr, int *n, int *cap, size_t size, const void *item)
{
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 8;
        void *p = realloc(*arr, (size_t)nc * size);
        if (!p)
            return DH_ENOMEM;
        *arr = p;
        *cap = nc;
    }
    memcpy((char *)*arr + (size_t)(*n)++ * size, item, size);
    return 0;
}

void dh__nodes_refuse(dh_engine *e, const char *fmt, ...)
{
    if (!e->x->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->x->err, sizeof e->x->err, fmt, ap);
        va_end(ap);
    }
    dh__eng_fail(e, DH_EPARSE);
}

/* ------------------------------------------------------------ greeting, hello */

static void fill_hello(dh_engine *e, xrec *m)
{
    const dh_run_config *c = &e->run.cfg;
    memset(m, 0, e->x->bytes);
    m->kind = X_HELLO;
    m->manifest_hash = dh_manifest_hash(e->run.m);
    m->spec_hash = e->spec ? dh_spec_hash(e->spec) : 0;
    m->seed = c->seed;
    m->ranks = c->ranks;
    m->workers = c->workers;
    m->batch = c->global_batch;
    m->steps = e->N;
    m->budget = c->memory_budget;
    dh_sampler_state where; /* where the order starts (a resumed job: every node alike) */
    dh_sampler_get_state(e->run.sampler, &where);
    m->start_epoch = where.epoch;
    m->start_step = where.step;
    m->order = (c->no_shuffle ? 1 : 0) | (c->keep_last ? 2 : 0) |
               (c->order == DH_ORDER_STRATIFIED ? 4 : 0);
    m->serving = e->shared > 0;
    m->leases = e->shared;
    m->resume = c->resume;
    m->rank_token_cap = c->rank_token_cap;
    m->rank_byte_cap = c->rank_byte_cap;
    m->cpu_scale = c->cpu_cost_scale;
    m->rho = c->rho;
    m->net_bandwidth = c->net_bandwidth;
    m->net_latency = c->net_latency;
    m->move_bandwidth = c->move_bandwidth;
    m->max_failed = c->max_failed_frac;
    m->sample_timeout = c->sample_timeout_s;
    snprintf(m->policy, sizeof m->policy, "%s", dh__policy_name(e->run.policy));
    snprintf(m->workload, sizeof m->workload, "%s", e->run.workload);
}

/*
 * The first setting in which node k's job differs from node 0's, or NULL. Settings a user
 * gives come before what is derived from them (the memory budget follows the workload, the
 * spec, the policy and the leases: a node started with another --spec is told so, not that
 * its budget differs).
 */
static const char *job_differs(const xrec *a, const xrec *b)
{
    return a->serving != b->serving
               ? "the command: one node serves trainers (datahelix serve), another runs "
                 "emulated ranks (datahelix run)"
           : a->manifest_hash != b->manifest_hash ? "the manifest (its hash)"
           : strcmp(a->workload, b->workload)     ? "--workload"
           : a->spec_hash != b->spec_hash         ? "the preprocessing spec (--spec or --augment)"
           : strcmp(a->policy, b->policy)         ? "--policy"
           : a->seed != b->seed                   ? "--seed"
           : a->ranks != b->ranks                 ? "--ranks"
           : a->workers != b->workers             ? "--workers"
           : a->batch != b->batch                 ? "--batch"
           : a->steps != b->steps                 ? "the run's length (--steps, --epochs)"
           : (a->order ^ b->order) & 4 ? (a->order & 4 ? "--order (stratified on node 0, uniform "
                                                         "on the other)"
                                                       : "--order (uniform on node 0, stratified "
                                                         "on the other)")
           : (a->order ^ b->order) & 1 ? "--no-shuffle (given to one node, not the other)"
           : (a->order ^ b->order) & 2 ? "--keep-last (given to one node, not the other)"
           : a->leases != b->leases               ? "--max-leases"
           : a->cpu_scale != b->cpu_scale         ? "the CPU calibration (--cpu-cost-scale, "
                                                    "--calibrate)"
           : a->rho != b->rho                     ? "--rho"
           : a->net_bandwidth != b->net_bandwidth || a->net_latency != b->net_latency
               ? "the network model (--net-gbps, --net-latency-us)"
           : a->move_bandwidth != b->move_bandwidth ? "the move bandwidth"
           : a->rank_token_cap != b->rank_token_cap || a->rank_byte_cap != b->rank_byte_cap
               ? "the per-rank caps"
           : a->max_failed != b->max_failed       ? "--max-failed"
           : a->sample_timeout != b->sample_timeout ? "the per-sample time limit"
           : a->budget != b->budget               ? "--memory-budget"
                                                  : NULL;
}

/* Where node k's run starts, if not where node 0's does (every rank must restore the same
 * checkpoint), or NULL. */
static const char *start_differs(const xrec *a, const xrec *b)
{
    return a->resume != b->resume || a->start_epoch != b->start_epoch ||
                   a->start_step != b->start_step
               ? "the resume point (every rank must restore the same checkpoint)"
               : NULL;
}

int dh__nodes_greet(dh_engine *e, char *err, size_t errlen)
{
    struct dh__xchg *x = e->x;
    dh__wire_greeting mine = {DH__WIRE_MAGIC, DH__WIRE_VERSION, x->bytes, e->node, e->R,
                              (uint64_t)e->G};
    dh__wire_greeting *all = dh__calloc((size_t)e->nodes, sizeof *all);
    if (!all)
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    int rc = exchange(e, &mine, all, sizeof mine, err, errlen);
    if (!rc)
        rc = dh__wire_check_greetings(all, e->nodes, &mine, err, errlen);
    x->greeted = rc ? -1 : 1; /* every node read the same greetings: they decide alike */
    free(all);
    return rc;
}

/* One HELLO (identity) or BEGIN (where the run starts) round: a node that gave up before is
 * named with its reason, a node of another job with the setting that differs. */
int dh__nodes_meet(dh_engine *e, int kind, char *err, size_t errlen)
{
    struct dh__xchg *x = e->x;
    fill_hello(e, x->mine);
    x->mine->kind = kind;
    int rc = dh__nodes_round(e, err, errlen);
    for (int k = 0; !rc && k < e->nodes; k++) /* a node that gave up before it began */
        if (rec_of(x, k)->kind == X_FINAL)
            rc = dh__fail(err, errlen, DH_EPEER, "node %d stopped before the run began: %s", k,
                          rec_of(x, k)->msg[0] ? rec_of(x, k)->msg
                                               : dh_strerror(rec_of(x, k)->error));
    for (int k = 0; !rc && k < e->nodes; k++)
        if (rec_of(x, k)->kind != kind)
            rc = dh__fail(err, errlen, DH_EPARSE, "node %d is out of step at the %s round", k,
                          kind == X_HELLO ? "HELLO" : "BEGIN");
    for (int k = 1; !rc && k < e->nodes; k++) {
        const char *what = kind == X_HELLO ? job_differs(rec_of(x, 0), rec_of(x, k))
                                           : start_differs(rec_of(x, 0), rec_of(x, k));
        if (what)
            rc = dh__fail(err, errlen, DH_EINVAL, "node %d was started on another job than "
                          "node 0: %s differs; every node must run the same command", k, what);
    }
    return rc;
}

int dh__nodes_hello(dh_engine *e, char *err, size_t errlen)
{
    int rc = dh__nodes_greet(e, err, errlen);
    return rc ? rc : dh__nodes_meet(e, X_HELLO, err, errlen);
}
