/*
 * policy.c - the policies as data: one row of capabilities each (placement,
 * CPU service order, splitting, rebalancing, lending). The baselines are
 * rows too: `local` is PyTorch's DataLoader with DistributedSampler, `pool`
 * a Ray-style shared actor pool; the helix-* rows are helix with one
 * mechanism taken out, so each mechanism's share of the result shows.
 */
#include "sched.h"

#include <string.h>

static const dh__policy_caps policy_table[DH_POL_COUNT] = {
    [DH_POL_LOCAL] = {"local", DH_PLACE_STRIDE, DH_SERVE_LOCAL, 0, 0, 0},
    [DH_POL_POOL] = {"pool", DH_PLACE_STRIDE, DH_SERVE_FIFO, 0, 0, 0},
    [DH_POL_HELIX] = {"helix", DH_PLACE_BALANCED, DH_SERVE_LEAST_SLACK, 1, 1, 1},
    [DH_POL_HELIX_NOBALANCE] = {"helix-nobalance", DH_PLACE_STRIDE, DH_SERVE_LEAST_SLACK, 1, 0, 0},
    [DH_POL_HELIX_FIFO] = {"helix-fifo", DH_PLACE_BALANCED, DH_SERVE_FIFO, 0, 0, 0},
    [DH_POL_HELIX_NOREB] = {"helix-noreb", DH_PLACE_BALANCED, DH_SERVE_LEAST_SLACK, 1, 0, 0},
};

static const char *const policy_names[DH_POL_COUNT + 1] = {
    "local", "pool", "helix", "helix-nobalance", "helix-fifo", "helix-noreb", NULL};

const dh__policy_caps *dh__policy_caps_of(dh__policy p)
{
    return (unsigned)p < DH_POL_COUNT ? &policy_table[p] : NULL;
}

int dh__policy_from_name(const char *name)
{
    for (int p = 0; name && p < DH_POL_COUNT; p++)
        if (!strcmp(name, policy_table[p].name))
            return p;
    return -1;
}

const char *dh__policy_name(dh__policy p)
{
    return (unsigned)p < DH_POL_COUNT ? policy_table[p].name : "?";
}

const char *dh__policy_list(void)
{
    return "local, pool, helix, helix-nobalance, helix-fifo, helix-noreb";
}

const char *const *dh_policy_names(void)
{
    return policy_names;
}
