/*
 * sampler.c - the global sample order and the fixed global batches.
 *
 * DESIGN: the order of an epoch is a Fisher-Yates permutation drawn from a
 * splitmix64 stream seeded by mix(manifest content hash, seed, epoch), so it
 * is a pure function of those three values: two processes (or a resumed run)
 * that agree on them agree on every batch. The state is four integers; no
 * history is needed to resume. Global batch s of an epoch is positions
 * [s*G, (s+1)*G) of the (padded or truncated) order. The permutation of the
 * current epoch is materialised (4 bytes per sample) when the epoch starts.
 */
#include "catalog.h"

#include <stdlib.h>
#include <string.h>

struct dh_sampler {
    dh_sampler_opts opts;
    uint64_t manifest_hash;
    int64_t n;
    int64_t epoch;
    int64_t step;
    int64_t perm_epoch; /* epoch whose permutation perm holds; -1 none */
    int64_t shift;      /* positions the current epoch's batches are shifted by (a resume) */
    uint32_t *perm;
};

static void build_perm(dh_sampler *s)
{
    for (int64_t i = 0; i < s->n; i++)
        s->perm[i] = (uint32_t)i;
    if (s->opts.shuffle) {
        dh__rng r;
        dh__rng_seed(&r, dh__mix64(s->manifest_hash ^ dh__mix64(s->opts.seed) ^
                                   dh__mix64((uint64_t)s->epoch + 0x243f6a8885a308d3ULL)));
        for (int64_t i = s->n - 1; i > 0; i--) {
            int64_t j = (int64_t)dh__rng_below(&r, (uint64_t)i + 1);
            uint32_t t = s->perm[i];
            s->perm[i] = s->perm[j];
            s->perm[j] = t;
        }
    }
    s->perm_epoch = s->epoch;
}

int dh_sampler_new(const dh_manifest *m, const dh_sampler_opts *opts, dh_sampler **out)
{
    if (!m || !opts || !out || opts->global_batch < 1)
        return DH_EINVAL;
    *out = NULL;
    if (m->n == 0)
        return DH_EEMPTY;
    if (opts->drop_last && m->n < opts->global_batch)
        return DH_ERANGE; /* no complete batch: the epoch would be empty forever */
    dh_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return DH_ENOMEM;
    s->perm = malloc((size_t)m->n * sizeof *s->perm);
    if (!s->perm) {
        free(s);
        return DH_ENOMEM;
    }
    s->opts = *opts;
    s->manifest_hash = m->hash;
    s->n = m->n;
    s->perm_epoch = -1;
    *out = s;
    return 0;
}

void dh_sampler_free(dh_sampler *s)
{
    if (!s)
        return;
    free(s->perm);
    free(s);
}

int64_t dh_sampler_steps_per_epoch(const dh_sampler *s)
{
    int64_t g = s->opts.global_batch;
    return s->opts.drop_last ? s->n / g : (s->n + g - 1) / g;
}

int dh_sampler_next(dh_sampler *s, int64_t *out, int64_t cap)
{
    if (!s || !out || cap < s->opts.global_batch)
        return DH_EINVAL;
    if (s->step >= dh_sampler_steps_per_epoch(s)) {
        s->epoch++;
        s->step = 0;
        s->shift = 0;
    }
    if (s->perm_epoch != s->epoch)
        build_perm(s);
    int64_t g = s->opts.global_batch, base = s->step * g + s->shift;
    /* Padding wraps to the start of this epoch's order, like DistributedSampler. */
    for (int64_t k = 0; k < g; k++)
        out[k] = s->perm[(base + k) % s->n];
    s->step++;
    return 0;
}

void dh_sampler_get_state(const dh_sampler *s, dh_sampler_state *st)
{
    st->manifest_hash = s->manifest_hash;
    st->seed = s->opts.seed;
    st->epoch = s->epoch;
    st->step = s->step;
}

int dh_sampler_set_state(dh_sampler *s, const dh_sampler_state *st)
{
    if (!s || !st || st->epoch < 0 || st->step < 0 || st->step > dh_sampler_steps_per_epoch(s))
        return DH_EINVAL;
    if (st->manifest_hash != s->manifest_hash || st->seed != s->opts.seed)
        return DH_EMISMATCH;
    s->epoch = st->epoch;
    s->step = st->step;
    s->shift = 0;
    return 0;
}

int dh__sampler_shift(dh_sampler *s, int64_t shift)
{
    int64_t g = s->opts.global_batch, last = dh_sampler_steps_per_epoch(s) - 1;
    if (shift <= -g || shift >= g || s->step * g + shift < 0 ||
        (s->opts.drop_last ? last * g + shift + g > s->n : last * g + shift >= s->n))
        return DH_EINVAL;
    s->shift = shift;
    return 0;
}
