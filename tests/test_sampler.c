/* test_sampler.c - the global order: determinism, coverage, padding, resume. */
#include "catalog/catalog.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dh_manifest *make_manifest(int n, const char *salt)
{
    dh_manifest *m;
    ck_assert_int_eq(dh_manifest_new("", NULL, &m), 0);
    char line[128];
    for (int i = 0; i < n; i++) {
        int len = snprintf(line, sizeof line, "{\"id\":\"%s%d\",\"text_tokens\":%d}", salt, i, i);
        ck_assert_int_eq(dh_manifest_parse_line(m, line, (size_t)len, i + 1, NULL, 0), 0);
    }
    return m;
}

static dh_sampler *make_sampler(const dh_manifest *m, int64_t g, uint64_t seed, int drop_last)
{
    dh_sampler_opts o = {.global_batch = g, .seed = seed, .shuffle = 1, .drop_last = drop_last};
    dh_sampler *s = NULL;
    ck_assert_int_eq(dh_sampler_new(m, &o, &s), 0);
    return s;
}

/* Draws `steps` batches of g into out (steps * g entries). */
static void draw(dh_sampler *s, int64_t g, int steps, int64_t *out)
{
    for (int k = 0; k < steps; k++)
        ck_assert_int_eq(dh_sampler_next(s, out + k * g, g), 0);
}

START_TEST(same_inputs_same_order)
{
    dh_manifest *m = make_manifest(1000, "s");
    dh_sampler *a = make_sampler(m, 32, 7, 1), *b = make_sampler(m, 32, 7, 1);
    int64_t x[32 * 100], y[32 * 100];
    draw(a, 32, 100, x);
    draw(b, 32, 100, y);
    ck_assert_mem_eq(x, y, sizeof x);
    /* A different seed or different content gives a different order. */
    dh_sampler *c = make_sampler(m, 32, 8, 1);
    draw(c, 32, 100, y);
    ck_assert(memcmp(x, y, sizeof x) != 0);
    dh_manifest *m2 = make_manifest(1000, "t");
    dh_sampler *d = make_sampler(m2, 32, 7, 1);
    draw(d, 32, 100, y);
    ck_assert(memcmp(x, y, sizeof x) != 0);
    dh_sampler_free(a);
    dh_sampler_free(b);
    dh_sampler_free(c);
    dh_sampler_free(d);
    dh_manifest_free(m);
    dh_manifest_free(m2);
}
END_TEST

START_TEST(each_epoch_is_a_permutation)
{
    dh_manifest *m = make_manifest(640, "s");
    dh_sampler *s = make_sampler(m, 64, 3, 1);
    ck_assert_int_eq(dh_sampler_steps_per_epoch(s), 10);
    int64_t e0[640], e1[640];
    draw(s, 64, 10, e0);
    draw(s, 64, 10, e1);
    int seen0[640] = {0}, seen1[640] = {0};
    for (int i = 0; i < 640; i++) {
        seen0[e0[i]]++;
        seen1[e1[i]]++;
    }
    for (int i = 0; i < 640; i++) {
        ck_assert_int_eq(seen0[i], 1);
        ck_assert_int_eq(seen1[i], 1);
    }
    ck_assert(memcmp(e0, e1, sizeof e0) != 0); /* epochs reshuffle */
    dh_sampler_state st;
    dh_sampler_get_state(s, &st);
    ck_assert_int_eq(st.epoch, 1);
    ck_assert_int_eq(st.step, 10);
    dh_sampler_free(s);
    dh_manifest_free(m);
}
END_TEST

START_TEST(drop_last_and_padding)
{
    /* 10 samples, G = 4: drop_last gives 2 steps (8 distinct), padding gives 3 steps whose
     * last batch ends with the first two samples of the epoch's order. */
    dh_manifest *m = make_manifest(10, "s");
    dh_sampler *drop = make_sampler(m, 4, 1, 1), *pad = make_sampler(m, 4, 1, 0);
    ck_assert_int_eq(dh_sampler_steps_per_epoch(drop), 2);
    ck_assert_int_eq(dh_sampler_steps_per_epoch(pad), 3);
    int64_t d[8], p[12];
    draw(drop, 4, 2, d);
    draw(pad, 4, 3, p);
    ck_assert_mem_eq(d, p, sizeof d); /* same order, different tail handling */
    ck_assert_int_eq(p[10], p[0]);
    ck_assert_int_eq(p[11], p[1]);
    int seen[10] = {0};
    for (int i = 0; i < 10; i++)
        seen[p[i]]++;
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(seen[i], 1);
    /* G larger than the manifest: padding wraps; drop_last refuses (no batch would exist). */
    dh_sampler *big = make_sampler(m, 25, 1, 0);
    int64_t b[25];
    draw(big, 25, 1, b);
    ck_assert_int_eq(b[20], b[0]);
    dh_sampler_opts o = {.global_batch = 25, .seed = 1, .shuffle = 1, .drop_last = 1};
    dh_sampler *none;
    ck_assert_int_eq(dh_sampler_new(m, &o, &none), DH_ERANGE);
    dh_sampler_free(drop);
    dh_sampler_free(pad);
    dh_sampler_free(big);
    dh_manifest_free(m);
}
END_TEST

START_TEST(resume_reproduces_uninterrupted_run)
{
    /* Run 37 steps (crossing epoch boundaries: 5 steps per epoch), saving the state after
     * step 13; a fresh sampler restored from it must produce exactly steps 14..37. */
    dh_manifest *m = make_manifest(83, "s");
    dh_sampler *ref = make_sampler(m, 16, 99, 1);
    int64_t all[37 * 16];
    dh_sampler_state saved;
    for (int k = 0; k < 37; k++) {
        ck_assert_int_eq(dh_sampler_next(ref, all + k * 16, 16), 0);
        if (k == 12)
            dh_sampler_get_state(ref, &saved);
    }
    dh_manifest *again = make_manifest(83, "s"); /* a reload of the same content */
    dh_sampler *resumed = make_sampler(again, 16, 99, 1);
    ck_assert_int_eq(dh_sampler_set_state(resumed, &saved), 0);
    int64_t rest[24 * 16];
    draw(resumed, 16, 24, rest);
    ck_assert_mem_eq(rest, all + 13 * 16, sizeof rest);
    dh_sampler_free(ref);
    dh_sampler_free(resumed);
    dh_manifest_free(m);
    dh_manifest_free(again);
}
END_TEST

/* The next epoch's permutation is shuffled ahead, a share a step: every batch must be the
 * one a fresh sampler put at that (epoch, step) draws (its epoch shuffled whole), across
 * epochs, with padding, one step an epoch, and jumps of the state forward and back. */
START_TEST(an_epoch_shuffled_ahead_is_the_same_order)
{
    static const struct {
        int n, g, drop_last;
    } shapes[] = {{83, 16, 1}, {83, 16, 0}, {1000, 7, 1}, {5, 8, 0}, {40, 40, 1}, {41, 2, 0}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        int n = shapes[c].n, g = shapes[c].g;
        dh_manifest *m = make_manifest(n, "a");
        dh_sampler *run = make_sampler(m, g, 3, shapes[c].drop_last);
        int64_t per = dh_sampler_steps_per_epoch(run);
        int64_t got[64], want[64];
        for (int k = 0; k < 60; k++) {
            dh_sampler_state at;
            dh_sampler_get_state(run, &at);
            if (k == 25 || k == 40) { /* jump: into the next epoch, then back two */
                at.epoch += k == 25 ? 1 : -2;
                at.epoch = at.epoch < 0 ? 0 : at.epoch;
                at.step = k == 25 ? per / 2 : 0;
                ck_assert_int_eq(dh_sampler_set_state(run, &at), 0);
            }
            ck_assert_int_eq(dh_sampler_next(run, got, g), 0);
            dh_sampler *fresh = make_sampler(m, g, 3, shapes[c].drop_last);
            if (at.step == per) /* where `run` stood: past an epoch's last step */
                at.epoch++, at.step = 0;
            ck_assert_int_eq(dh_sampler_set_state(fresh, &at), 0);
            ck_assert_int_eq(dh_sampler_next(fresh, want, g), 0);
            ck_assert_msg(!memcmp(got, want, (size_t)g * sizeof *got),
                          "n %d g %d: step %d (epoch %lld, step %lld) differs", n, g, k,
                          (long long)at.epoch, (long long)at.step);
            dh_sampler_free(fresh);
        }
        dh_sampler_free(run);
        dh_manifest_free(m);
    }
}
END_TEST

START_TEST(a_shifted_epoch_continues_at_another_global_batch)
{
    /* 9 samples: at G 1 the epoch order is plain; at G 3, epoch 0 resumed after 4 samples
     * (step 2, shift -2) gives positions 4..6, then epoch 1 from its start, unshifted. */
    dh_manifest *m = make_manifest(9, "s");
    dh_sampler *one = make_sampler(m, 1, 5, 1), *three = make_sampler(m, 3, 5, 1);
    int64_t order[18], got[6];
    draw(one, 1, 18, order); /* epochs 0 and 1 */
    dh_sampler_state st = {dh_manifest_hash(m), 5, 0, 2};
    ck_assert_int_eq(dh_sampler_set_state(three, &st), 0);
    ck_assert_int_eq(dh__sampler_shift(three, -3), DH_EINVAL); /* |shift| < G */
    ck_assert_int_eq(dh__sampler_shift(three, 1), DH_EINVAL);  /* the last batch would pass 9 */
    ck_assert_int_eq(dh__sampler_shift(three, -2), 0);
    draw(three, 3, 2, got);
    ck_assert_mem_eq(got, order + 4, 3 * sizeof *got);
    ck_assert_mem_eq(got + 3, order + 9, 3 * sizeof *got);
    dh_sampler_free(one);
    dh_sampler_free(three);
    dh_manifest_free(m);
}
END_TEST

START_TEST(state_from_another_run_is_rejected)
{
    dh_manifest *m = make_manifest(50, "s"), *other = make_manifest(50, "x");
    dh_sampler *a = make_sampler(m, 5, 1, 1), *b = make_sampler(other, 5, 1, 1),
               *c = make_sampler(m, 5, 2, 1);
    dh_sampler_state st;
    dh_sampler_get_state(a, &st);
    ck_assert_int_eq(dh_sampler_set_state(b, &st), DH_EMISMATCH);
    ck_assert_int_eq(dh_sampler_set_state(c, &st), DH_EMISMATCH);
    st.step = 1000;
    ck_assert_int_eq(dh_sampler_set_state(a, &st), DH_EINVAL);
    dh_sampler_free(a);
    dh_sampler_free(b);
    dh_sampler_free(c);
    dh_manifest_free(m);
    dh_manifest_free(other);
}
END_TEST

START_TEST(no_shuffle_and_bad_arguments)
{
    dh_manifest *m = make_manifest(6, "s");
    dh_sampler_opts o = {.global_batch = 3, .shuffle = 0, .drop_last = 1};
    dh_sampler *s;
    ck_assert_int_eq(dh_sampler_new(m, &o, &s), 0);
    int64_t b[3];
    draw(s, 3, 1, b);
    ck_assert_int_eq(b[0], 0);
    ck_assert_int_eq(b[2], 2);
    ck_assert_int_eq(dh_sampler_next(s, b, 2), DH_EINVAL);
    dh_sampler_free(s);
    o.global_batch = 0;
    ck_assert_int_eq(dh_sampler_new(m, &o, &s), DH_EINVAL);
    dh_manifest *empty;
    dh_manifest_new("", NULL, &empty);
    o.global_batch = 1;
    ck_assert_int_eq(dh_sampler_new(empty, &o, &s), DH_EEMPTY);
    dh_manifest_free(empty);
    dh_manifest_free(m);
}
END_TEST

/* Sample i's class in the stratified tests: a skewed mix of 6 classes. */
static uint16_t *classes_of(int64_t n)
{
    uint16_t *cls = malloc((size_t)n * sizeof *cls);
    ck_assert_ptr_nonnull(cls);
    for (int64_t i = 0; i < n; i++)
        cls[i] = (uint16_t)(dh__mix64((uint64_t)i) % 21 / 4 % 6); /* 0-4 of 4 values, 5 of 1 */
    return cls;
}

static dh_sampler *stratified(const dh_manifest *m, int64_t g, int drop_last, const uint16_t *cls)
{
    dh_sampler *s = make_sampler(m, g, 5, drop_last);
    ck_assert_int_eq(dh__sampler_stratify(s, cls, 6), 0);
    return s;
}

/*
 * Bytes carried with the uniform order (dh__sampler_carry: a replica's class of each sample,
 * in its permutation's entries): the same batches as without, across epochs, padding, a
 * resume, a shift and no shuffle, each step's bytes those of its samples in order; carrying
 * from the middle of a run changes nothing drawn; a stratified sampler carries none, and a
 * carrying one is not stratified; indices of more than 16 bits keep their bytes.
 */
START_TEST(carried_bytes_come_with_their_samples_and_change_no_batch)
{
    dh_manifest *m = make_manifest(1000, "s");
    uint8_t bytes[1000];
    for (int i = 0; i < 1000; i++)
        bytes[i] = (uint8_t)(dh__mix64((uint64_t)i) >> 56); /* 0 and 255 among them */
    for (int variant = 0; variant < 4; variant++) {
        /* 0: keep-last padding, 1: drop-last, 2: resumed mid-epoch and shifted, carried
         * after a step was drawn, 3: no shuffle */
        int64_t g = 96, steps = 40, plain[96 * 40], got[96];
        dh_sampler_opts o = {.global_batch = g, .seed = 3, .shuffle = variant != 3,
                             .drop_last = variant == 1};
        dh_sampler *a = NULL, *b = NULL;
        ck_assert_int_eq(dh_sampler_new(m, &o, &a), 0);
        ck_assert_int_eq(dh_sampler_new(m, &o, &b), 0);
        if (variant == 2) {
            dh_sampler_state st = {dh_manifest_hash(m), 3, 2, 4};
            ck_assert_int_eq(dh_sampler_set_state(a, &st), 0);
            ck_assert_int_eq(dh_sampler_set_state(b, &st), 0);
            ck_assert_int_eq(dh__sampler_shift(a, -7), 0);
            ck_assert_int_eq(dh__sampler_shift(b, -7), 0);
        }
        draw(a, g, (int)steps, plain);
        ck_assert_ptr_null(dh__sampler_drawn_bytes(b));
        for (int64_t st = 0; st < steps; st++) {
            if (st == (variant == 2 ? 1 : 0))
                ck_assert_int_eq(dh__sampler_carry(b, bytes), 0);
            ck_assert_int_eq(dh_sampler_next(b, got, g), 0);
            ck_assert_mem_eq(got, plain + st * g, sizeof got);
            const uint8_t *drawn = dh__sampler_drawn_bytes(b);
            if (!drawn) {
                ck_assert_int_eq(st, 0); /* not carried yet */
                continue;
            }
            for (int64_t k = 0; k < g; k++)
                ck_assert_msg(drawn[k] == bytes[got[k]], "variant %d step %lld: byte %d at %lld, "
                              "sample %lld's is %d", variant, (long long)st, drawn[k],
                              (long long)k, (long long)got[k], bytes[got[k]]);
        }
        dh_sampler_free(a);
        dh_sampler_free(b);
    }
    uint16_t *cls = classes_of(1000);
    dh_sampler *t = stratified(m, 96, 1, cls);
    ck_assert_int_eq(dh__sampler_carry(t, bytes), DH_EINVAL);
    ck_assert_int_eq(dh__sampler_carry(NULL, bytes), DH_EINVAL);
    ck_assert_ptr_null(dh__sampler_drawn_bytes(t));
    dh_sampler_free(t);
    dh_sampler *u = make_sampler(m, 96, 5, 1); /* carrying, then none; then stratified */
    int64_t one[96], two[96];
    ck_assert_int_eq(dh__sampler_carry(u, bytes), 0);
    draw(u, 96, 1, one);
    ck_assert_int_eq(dh__sampler_carry(u, NULL), 0);
    ck_assert_ptr_null(dh__sampler_drawn_bytes(u));
    draw(u, 96, 1, two); /* indices alone again */
    dh_sampler *v = make_sampler(m, 96, 5, 1);
    draw(v, 96, 1, one);
    draw(v, 96, 1, one);
    ck_assert_mem_eq(one, two, sizeof one);
    dh_sampler_free(v);
    ck_assert_int_eq(dh__sampler_carry(u, bytes), 0); /* its reader expects bytes a step */
    ck_assert_int_eq(dh__sampler_stratify(u, cls, 6), DH_EINVAL);
    ck_assert_int_eq(dh__sampler_carry(u, NULL), 0);
    ck_assert_int_eq(dh__sampler_stratify(u, cls, 6), 0);
    ck_assert_ptr_null(dh__sampler_drawn_bytes(u));
    dh_sampler_free(u);
    free(cls);
    dh_manifest_free(m);
    /* past 2^16 samples (an index of more than 16 bits beside its byte), across an epoch */
    enum { BIG = 70001, BG = 8192 };
    dh_manifest *big = make_manifest(BIG, "b");
    uint8_t *bb = malloc(BIG);
    int64_t *x = malloc(BG * sizeof *x), *y = malloc(BG * sizeof *y);
    ck_assert(bb && x && y);
    for (int i = 0; i < BIG; i++)
        bb[i] = (uint8_t)(i * 7 + (i >> 16) * 101);
    dh_sampler *p = make_sampler(big, BG, 9, 0), *q = make_sampler(big, BG, 9, 0);
    ck_assert_int_eq(dh__sampler_carry(q, bb), 0);
    for (int st = 0; st < 12; st++) { /* 9 steps an epoch: the second epoch shuffled ahead */
        draw(p, BG, 1, x);
        draw(q, BG, 1, y);
        ck_assert_mem_eq(x, y, BG * sizeof *x);
        const uint8_t *drawn = dh__sampler_drawn_bytes(q);
        for (int k = 0; k < BG; k++)
            ck_assert_int_eq(drawn[k], bb[y[k]]);
    }
    dh_sampler_free(p);
    dh_sampler_free(q);
    free(bb);
    free(x);
    free(y);
    dh_manifest_free(big);
}
END_TEST

START_TEST(a_stratified_order_resumes_and_shifts_as_the_plain_one)
{
    dh_manifest *m = make_manifest(1000, "s");
    uint16_t *cls = classes_of(1000);
    for (int drop_last = 0; drop_last <= 1; drop_last++) {
        int64_t g = 96, per = drop_last ? 1000 / 96 : (1000 + 95) / 96, all[96 * 40];
        dh_sampler *s = stratified(m, g, drop_last, cls);
        draw(s, g, 40, all);
        /* every epoch holds every sample, each class in proportion in every step */
        int seen[1000] = {0};
        for (int64_t k = 0; k < per * g; k++)
            seen[all[k]]++;
        for (int i = 0; i < 1000; i++)
            ck_assert(drop_last ? seen[i] <= 1 : seen[i] >= 1);
        /* resumed at every step of the first three epochs: the same batches after it */
        for (int64_t at = 1; at < 3 * per; at++) {
            dh_sampler *r = stratified(m, g, drop_last, cls);
            dh_sampler_state st = {dh_manifest_hash(m), 5, at / per, at % per};
            ck_assert_int_eq(dh_sampler_set_state(r, &st), 0);
            int64_t got[96];
            draw(r, g, 1, got);
            ck_assert_mem_eq(got, all + at * g, sizeof got);
            dh_sampler_free(r);
        }
        /* shifted by -5: batch s is the stratified epoch's positions s * G - 5 ... */
        dh_sampler *sh = stratified(m, g, drop_last, cls);
        dh_sampler_state st = {dh_manifest_hash(m), 5, 1, 2};
        ck_assert_int_eq(dh_sampler_set_state(sh, &st), 0);
        ck_assert_int_eq(dh__sampler_shift(sh, -5), 0);
        dh__strata *t = NULL;
        ck_assert_int_eq(dh__strata_new(cls, 1000, 6, 0, &t), 0);
        int64_t got[96], want_cls[6] = {0}, got_cls[6] = {0}, lo[6], hi[6];
        draw(sh, g, 1, got);
        dh__strata_counts(t, 2 * g - 5, lo);
        dh__strata_counts(t, 3 * g - 5, hi);
        for (int c = 0; c < 6; c++)
            want_cls[c] = hi[c] - lo[c];
        for (int k = 0; k < g; k++)
            got_cls[cls[got[k]]]++;
        ck_assert_mem_eq(got_cls, want_cls, sizeof got_cls);
        dh__strata_free(t);
        dh_sampler_free(sh);
        dh_sampler_free(s);
    }
    free(cls);
    dh_manifest_free(m);
}
END_TEST

START_TEST(node_shares_of_a_stratified_order_make_its_steps)
{
    dh_manifest *m = make_manifest(1000, "s");
    uint16_t *cls = classes_of(1000);
    int64_t g = 96;
    dh_sampler *whole = stratified(m, g, 0, cls), *by_node = stratified(m, g, 0, cls), *node[4];
    for (int k = 0; k < 4; k++)
        node[k] = stratified(m, g, 0, cls);
    for (int step = 0; step < 25; step++) { /* two epochs and a half, padding included */
        int64_t want[96], got[96], laid[96];
        draw(whole, g, 1, want);
        for (int k = 0; k < 4; k++)
            ck_assert_int_eq(dh__sampler_next_share(node[k], 4, k, got + k * 24), 0);
        /* the step laid out by node: the shares one after the other */
        ck_assert_int_eq(dh__sampler_next_by_node(by_node, 4, laid), 0);
        ck_assert_mem_eq(laid, got, sizeof got);
        /* the same samples: each of the step's, as many times */
        for (int k = 0; k < 96; k++) {
            int a = 0, b = 0;
            for (int j = 0; j < 96; j++) {
                a += want[j] == want[k];
                b += got[j] == want[k];
            }
            ck_assert_int_eq(a, b);
        }
    }
    int64_t out[96];
    ck_assert_int_eq(dh__sampler_next_share(node[0], 5, 0, out), DH_EINVAL); /* 5 of 96 */
    ck_assert_int_eq(dh__sampler_next_share(node[0], 4, 4, out), DH_EINVAL);
    dh_sampler *plain = make_sampler(m, g, 5, 0);
    ck_assert_int_eq(dh__sampler_next_share(plain, 4, 0, out), DH_EINVAL); /* not stratified */
    ck_assert_int_eq(dh__sampler_next_by_node(plain, 4, out), DH_EINVAL);
    ck_assert_int_eq(dh__sampler_next_by_node(by_node, 5, out), DH_EINVAL);
    dh_sampler *big = make_sampler(m, 1001, 5, 0);
    ck_assert_int_eq(dh__sampler_stratify(big, cls, 6), DH_ERANGE);
    ck_assert_int_eq(dh__sampler_stratify(plain, cls, 5), DH_EINVAL); /* class 5 of 5 */
    draw(plain, g, 1, out); /* a refused stratification leaves the order as it was */
    dh_sampler_free(big);
    dh_sampler_free(plain);
    for (int k = 0; k < 4; k++)
        dh_sampler_free(node[k]);
    dh_sampler_free(by_node);
    dh_sampler_free(whole);
    free(cls);
    dh_manifest_free(m);
}
END_TEST

/* A stratified order shuffles each class alone: over 100 m epochs of two classes of m
 * (ids alternate), where a sample of class 0 lands in its class's part of the step is
 * uniform over its m places, and how far after sample 0 its neighbour in the class (sample
 * 2) lands is uniform over the m - 1 others (chi-square under mean + 6 sd). A keyed 4-round
 * Feistel network, the classes' first order, failed the second (z = 8 at m = 48). */
START_TEST(a_stratified_class_puts_a_sample_anywhere_alike)
{
    static const int sizes[] = {48, 100};
    for (size_t i = 0; i < 2; i++) {
        int m = sizes[i], epochs = 100 * m;
        dh_manifest *mf = make_manifest(2 * m, "c");
        uint16_t cls[200];
        for (int k = 0; k < 2 * m; k++)
            cls[k] = (uint16_t)(k % 2);
        dh_sampler *s = make_sampler(mf, 2 * m, 3, 1);
        ck_assert_int_eq(dh__sampler_stratify(s, cls, 2), 0);
        int64_t out[200], at[4][100] = {{0}}, apart[100] = {0};
        for (int e = 0; e < epochs; e++) {
            draw(s, 2 * m, 1, out); /* an epoch: class 0's m samples, then class 1's */
            int where[2] = {0, 0};
            for (int p = 0; p < m; p++) {
                if (out[p] % 2 || out[m + p] % 2 == 0) /* (no ck_assert a sample: a write) */
                    ck_abort_msg("epoch %d: place %d holds another class's sample", e, p);
                if (out[p] < 8)
                    at[out[p] / 2][p]++;
                if (out[p] < 4)
                    where[out[p] / 2] = p;
            }
            apart[(where[1] - where[0] + m) % m]++;
        }
        for (int k = 0; k < 4; k++) {
            double chi2 = 0, want = (double)epochs / m;
            for (int p = 0; p < m; p++)
                chi2 += (at[k][p] - want) * (at[k][p] - want) / want;
            ck_assert_msg(chi2 < (m - 1) + 6 * sqrt(2.0 * (m - 1)),
                          "m %d: sample %d's place has chi-square %.1f", m, 2 * k, chi2);
        }
        double chi2 = 0, want = (double)epochs / (m - 1);
        for (int d = 1; d < m; d++)
            chi2 += (apart[d] - want) * (apart[d] - want) / want;
        ck_assert_msg(chi2 < (m - 2) + 6 * sqrt(2.0 * (m - 2)),
                      "m %d: how far sample 2 lands after sample 0 has chi-square %.1f", m, chi2);
        dh_sampler_free(s);
        dh_manifest_free(mf);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("sampler");
    ADD_TEST(tc, same_inputs_same_order);
    ADD_TEST(tc, each_epoch_is_a_permutation);
    ADD_TEST(tc, drop_last_and_padding);
    ADD_TEST(tc, resume_reproduces_uninterrupted_run);
    ADD_TEST(tc, an_epoch_shuffled_ahead_is_the_same_order);
    ADD_TEST(tc, a_shifted_epoch_continues_at_another_global_batch);
    ADD_TEST(tc, state_from_another_run_is_rejected);
    ADD_TEST(tc, no_shuffle_and_bad_arguments);
    ADD_TEST(tc, a_stratified_order_resumes_and_shifts_as_the_plain_one);
    ADD_TEST(tc, carried_bytes_come_with_their_samples_and_change_no_batch);
    ADD_TEST(tc, node_shares_of_a_stratified_order_make_its_steps);
    ADD_TEST(tc, a_stratified_class_puts_a_sample_anywhere_alike);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
