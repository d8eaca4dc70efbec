/*
 * test_engine.c - the real engine on real media made at test time: batches
 * delivered through the consumer API hold exactly what the decoders produce
 * for each item; every failure class is delivered, reported and counted;
 * memory stays within the pool; every policy completes.
 */
#include "codec/decode.h"
#include "engine/engine_int.h"
#include "engine/engine_serve.h"
#include "engine/nodes_wire.h"
#include "testutil.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static char *media;

static void make_media(void)
{
    media = tu_mkdtemp();
    const char *ff = tu_ffmpeg();
    /* x264 on one thread: with its threads, v1.mp4 came out 48 bytes longer about one time
     * in 15, which changed the manifest's hash, hence the sample order every test here sees */
    int rc = tu_sh(
        "cd %s && mkdir -p ok && cd ok && "
        "for i in 0 1 2 3; do %s -v error -y -nostdin -f lavfi -i testsrc2=size=$((160+i*32))x120:rate=25 "
        "-t 2 -c:v libx264 -threads 1 -g 25 -bf 2 -pix_fmt yuv420p v$i.mp4 || exit 1; done && "
        "for i in 0 1 2; do %s -v error -y -nostdin -f lavfi -i testsrc2=size=$((200+i*50))x150 "
        "-frames:v 1 i$i.jpg || exit 1; done && "
        "%s -v error -y -nostdin -f lavfi -i testsrc2=size=120x90 -frames:v 1 p.png && "
        "%s -v error -y -nostdin -f lavfi -i sine=sample_rate=16000 -t 2 a.flac",
        media, ff, ff, ff, ff);
    ck_assert_int_eq(rc, 0);
}

static void drop_media(void)
{
    tu_rmdir(&media);
}

/* A manifest of the good files (indexed), plus extra lines appended verbatim. */
static dh_manifest *manifest_with(const char *extra)
{
    char out[4096];
    snprintf(out, sizeof out, "%s/m.jsonl", media);
    dh_index_stats st;
    ck_assert_int_eq(dh_index_dir(media, out, NULL, &st), 0);
    ck_assert_int_eq(st.probed, 9);
    if (extra) {
        FILE *f = fopen(out, "a");
        fputs(extra, f);
        fclose(f);
    }
    dh_manifest *m;
    ck_assert_int_eq(dh_manifest_load(out, NULL, &m, NULL), 0);
    if (getenv("DH_TEST_VERBOSE"))
        fprintf(stderr, "manifest %s: hash %016llx\n", out,
                (unsigned long long)dh_manifest_hash(m));
    return m;
}

static dh_run_config config(const dh_manifest *m, const char *policy)
{
    dh_run_config c;
    dh_run_config_default(&c);
    c.manifest = m;
    c.policy = policy;
    c.ranks = 2;
    c.workers = 2;
    c.global_batch = 4;
    return c;
}

/* config() with R ranks, W workers, global batch G (0: config's) and a length. */
static dh_run_config config_of(const dh_manifest *m, const char *policy, int ranks, int workers,
                               int64_t g, int64_t steps)
{
    dh_run_config c = config(m, policy);
    c.ranks = ranks;
    c.workers = workers;
    c.global_batch = g ? g : c.global_batch;
    c.steps = steps;
    /* No per-sample time limit: these tests count failures exactly, and on a shared machine
     * under a sanitizer a good clip may take longer than the derived limit (10 s) and fail
     * (the likely cause of one count of 3 where 2 were expected, under TSan while another
     * build shared the 2 cores; not reproduced in 6 runs since). */
    c.sample_timeout_s = -1;
    return c;
}

typedef struct {
    int n;
    char last[512];
} errors;

static void on_error(const dh_sample_error *e, void *user)
{
    errors *x = user;
    x->n++;
    snprintf(x->last, sizeof x->last, "%s|%s|%s", e->id, e->path, e->message);
    if (getenv("DH_TEST_VERBOSE"))
        fprintf(stderr, "sample error: step %lld rank %d %s\n", (long long)e->step, e->rank,
                x->last);
}

/* The spec run c decodes with: c's (or the default), with --augment's keys when c asks. */
static dh_spec *spec_of(const dh_run_config *c)
{
    dh_spec *s = NULL;
    ck_assert_int_eq(dh_spec_builtin("default", &s), 0);
    ck_assert_ptr_null(c->spec); /* the tests' runs use the default spec */
    if (c->augment)
        dh_spec_augment(s);
    return s;
}

/* Item it of the batch of run c: its draw is the one (seed, epoch, sample id, item) gives,
 * and it equals, byte for byte, a direct decode of that draw. */
static void check_item(const dh_run_config *c, const dh_spec *spec, const dh_batch *b,
                       const dh_batch_item *it)
{
    const dh_manifest *m = c->manifest;
    dh_media_info mi;
    dh_sample_info si;
    dh_manifest_media(m, it->sample, it->media, &mi);
    dh_manifest_sample(m, it->sample, &si);
    int64_t per_epoch = dh_manifest_count(m) / c->global_batch; /* drop_last, no resume */
    dh_media_draw want;
    ck_assert_int_eq(dh_media_draw_of(spec, &mi, c->seed, b->step / per_epoch, si.id, it->media,
                                      &want), 0);
    ck_assert_ptr_nonnull(b->draws);
    ck_assert_mem_eq(&b->draws[it - b->items], &want, sizeof want);
    char path[4096], err[256];
    snprintf(path, sizeof path, "%s/%s", dh_manifest_dir(m), mi.path);
    uint8_t *ref = malloc((size_t)it->bytes);
    int rc = dh__decode_item(DH__SRC(path), spec, &mi, &want, 0, 1, ref, (size_t)it->bytes, NULL,
                             err, sizeof err);
    ck_assert_msg(rc == 0, "%s: %s", path, err);
    ck_assert_msg(memcmp(ref, b->data + it->offset, (size_t)it->bytes) == 0,
                  "%s: batch slot differs from a direct decode", path);
    ck_assert_int_eq(it->offset % 64, 0);
    free(ref);
}

START_TEST(batches_hold_exactly_what_the_decoders_produce)
{
    /* Plain, and with --augment's random crops, clips and flips (each item's draw checked). */
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config(m, "helix");
    c.augment = _i;
    dh_spec *spec = spec_of(&c);
    ck_assert_int_eq(dh_spec_is_random(spec), _i);
    dh_engine *e;
    char err[256];
    ck_assert_int_eq(dh_engine_start(&c, NULL, NULL, &e, err, sizeof err), 0);
    int64_t seen = 0;
    for (int64_t st = 0; st < 2; st++) {
        for (int r = 0; r < 2; r++) {
            dh_batch b;
            ck_assert_int_eq(dh_engine_next_batch(e, r, &b), 0);
            ck_assert_int_eq(b.step, st);
            ck_assert_int_eq(b.nfailed, 0);
            for (int32_t k = 0; k < b.nitems; k++)
                check_item(&c, spec, &b, &b.items[k]);
            seen += b.nsamples;
            dh_engine_release(e, &b, 0.001);
        }
    }
    dh_batch b;
    ck_assert_int_eq(dh_engine_next_batch(e, 0, &b), DH_EEMPTY);
    ck_assert_int_eq(seen, 8); /* 9 samples, G = 4: two complete steps */
    dh_result res = DH_RESULT_INIT;
    ck_assert_int_eq(dh_engine_finish(e, &res), 0);
    ck_assert_str_eq(res.engine, "real");
    ck_assert_int_eq(res.delivered, 8);
    ck_assert_int_eq(res.failed, 0);
    dh_engine_free(e);
    dh_spec_free(spec);
    dh_manifest_free(m);
}
END_TEST

START_TEST(failed_samples_are_delivered_reported_and_counted)
{
    /* A truncated video, a missing file and an image whose size contradicts its entry. */
    tu_sh("cd %s && head -c 2000 ok/v0.mp4 > cut.mp4", media);
    const char *extra =
        "{\"id\":\"cut\",\"media\":[{\"type\":\"video\",\"path\":\"cut.mp4\",\"width\":160,"
        "\"height\":120,\"fps\":25,\"frames\":50}]}\n"
        "{\"id\":\"gone\",\"media\":[{\"type\":\"image\",\"path\":\"ok/gone.jpg\",\"codec\":\"jpeg\","
        "\"width\":10,\"height\":10}]}\n"
        "{\"id\":\"liar\",\"media\":[{\"type\":\"image\",\"path\":\"ok/i0.jpg\",\"codec\":\"jpeg\","
        "\"width\":999,\"height\":150}]}\n";
    dh_manifest *m = manifest_with(extra);
    ck_assert_int_eq(dh_manifest_count(m), 12);
    dh_run_config c = config(m, "pool");
    c.steps = 3; /* all 12 samples */
    errors x = {0};
    dh_result res = DH_RESULT_INIT;
    char err[256];
    ck_assert_int_eq(dh_engine_run(&c, on_error, &x, &res, err, sizeof err), 0);
    ck_assert_int_eq(res.samples, 12);
    ck_assert_int_eq(res.failed, 3);
    ck_assert_int_eq(res.delivered + res.failed, res.samples);
    ck_assert_int_eq(x.n, 3);
    /* Failures end in microseconds; they must not teach the CPU model that decoding is
     * free (the MAPE read 850% with 4 missing files out of 64). The bound is loose: under
     * TSan on a loaded machine 9 honest samples' MAPE read 105%. */
    ck_assert_double_lt(res.cpu_mape, 5.0);
    ck_assert_msg(strstr(x.last, "|") != NULL, "%s", x.last);
    dh_manifest_free(m);
}
END_TEST

/* The value of series `name` (labels included) in an exposition; -1 when absent. */
static double series(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = text; (p = strstr(p, name)); p += n)
        if ((p == text || p[-1] == '\n') && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

START_TEST(live_metrics_are_the_run_accounting)
{
    tu_sh("cd %s && head -c 2000 ok/v0.mp4 > cut.mp4", media);
    dh_manifest *m = manifest_with("{\"id\":\"cut\",\"media\":[{\"type\":\"video\",\"path\":"
                                   "\"cut.mp4\",\"width\":160,\"height\":120,\"fps\":25,"
                                   "\"frames\":50}]}\n");
    dh_metrics *mx = NULL;
    char err[256] = "";
    ck_assert_int_eq(dh_metrics_start("127.0.0.1:0", &mx, err, sizeof err), 0);
    ck_assert_int_gt(dh_metrics_port(mx), 0);
    dh_run_config c = config(m, "helix");
    c.steps = 6;
    c.metrics = mx;
    dh_result res = DH_RESULT_INIT;
    errors x = {0};
    ck_assert_int_eq(dh_engine_run(&c, on_error, &x, &res, err, sizeof err), 0);
    size_t len = 0;
    char *t = dh__metrics_render(mx, &len);
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(strlen(t), len);
    ck_assert_double_eq(series(t, "datahelix_running{stream=\"train\"}"), 0);
    ck_assert_double_eq(series(t, "datahelix_steps_total{stream=\"train\"}"), (double)res.steps);
    ck_assert_double_eq(series(t, "datahelix_samples_delivered_total{stream=\"train\"}"),
                        (double)res.delivered);
    ck_assert_double_eq(series(t, "datahelix_samples_failed_total{stream=\"train\"}"),
                        (double)res.failed);
    ck_assert_int_ge(res.failed, 1);
    ck_assert_double_ge(series(t, "datahelix_sample_failures_total{stream=\"train\",reason="
                                  "\"DH_EDECODE\"}"), (double)res.failed);
    /* one wait per rank and step after the first, cumulative buckets ending at the count */
    char name[160];
    double waits = 0;
    for (int r = 0; r < c.ranks; r++) {
        snprintf(name, sizeof name, "datahelix_input_wait_seconds_count{stream=\"train\",rank="
                 "\"%d\"}", r);
        waits += series(t, name);
        double prev = 0;
        for (const char *le = "0.001\0" "0.01\0" "0.1\0" "1\0" "10\0" "+Inf\0"; *le;
             le += strlen(le) + 1) {
            snprintf(name, sizeof name, "datahelix_input_wait_seconds_bucket{stream=\"train\","
                     "rank=\"%d\",le=\"%s\"}", r, le);
            double v = series(t, name);
            ck_assert_double_ge(v, prev);
            prev = v;
        }
        snprintf(name, sizeof name, "datahelix_input_wait_seconds_count{stream=\"train\",rank="
                 "\"%d\"}", r);
        ck_assert_double_eq(prev, series(t, name));
    }
    ck_assert_double_eq(waits, (double)((res.steps - 1) * c.ranks));
    ck_assert_double_eq(series(t, "datahelix_step_stall_seconds_count{stream=\"train\"}"),
                        (double)(res.steps - 1));
    ck_assert_double_gt(series(t, "datahelix_worker_busy_seconds_total{stream=\"train\"}"), 0);
    /* every sample delivered fine was prepared here (more may be, ahead of their steps) */
    double prepared = 0;
    for (const char *k = "video\0image\0audio\0text\0"; *k; k += strlen(k) + 1) {
        snprintf(name, sizeof name, "datahelix_samples_prepared_total{stream=\"train\","
                 "modality=\"%s\"}", k);
        prepared += series(t, name);
    }
    ck_assert_double_ge(prepared, (double)res.delivered);
    ck_assert_double_eq(series(t, "datahelix_pool_budget_bytes{stream=\"train\"}"),
                        (double)res.memory_budget);
    free(t);
    /* the same stream again (a restart) counts on; other ranks under its name are refused */
    ck_assert_int_eq(dh_engine_run(&c, on_error, &x, &res, err, sizeof err), 0);
    t = dh__metrics_render(mx, &len);
    ck_assert_double_eq(series(t, "datahelix_steps_total{stream=\"train\"}"), 12);
    free(t);
    c.ranks = 1;
    c.workers = 1;
    ck_assert_int_eq(dh_engine_run(&c, on_error, &x, &res, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "stream \"train\" is published with other ranks"), "%s", err);
    dh_metrics_stop(mx);
    dh_manifest_free(m);
}
END_TEST

START_TEST(metrics_endpoints_refuse_what_does_not_parse)
{
    static const char *const bad[] = {"", "70000", "x:80", "127.0.0.1:", "1.2.3.4.5:80",
                                      "127.0.0.1:8o", " 80", "127.0.0.1: 80", "-1"};
    char err[256];
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        dh_metrics *mx = (dh_metrics *)1;
        err[0] = 0;
        ck_assert_int_eq(dh_metrics_start(bad[k], &mx, err, sizeof err), DH_EINVAL);
        ck_assert_ptr_null(mx);
        ck_assert_msg(strstr(err, "metrics:"), "%s: %s", bad[k], err);
    }
    dh_metrics *a = NULL, *b = NULL;
    ck_assert_int_eq(dh_metrics_start(":0", &a, err, sizeof err), 0);
    char taken[32];
    snprintf(taken, sizeof taken, "%d", dh_metrics_port(a));
    ck_assert_int_eq(dh_metrics_start(taken, &b, err, sizeof err), DH_EIO); /* in use */
    ck_assert_msg(strstr(err, "cannot listen") && strstr(err, "in use"), "%s", err);
    ck_assert_int_eq(dh_metrics_scrapes(a), 0);
    dh_metrics_stop(a);
    dh_metrics_stop(NULL);
}
END_TEST

START_TEST(failed_items_are_zeroed_and_marked)
{
    const char *extra = "{\"id\":\"gone\",\"media\":[{\"type\":\"image\",\"path\":\"ok/none.png\","
                        "\"codec\":\"png\",\"width\":20,\"height\":20}]}\n";
    dh_manifest *m = manifest_with(extra);
    dh_run_config c = config(m, "pool");
    c.ranks = 1;
    c.global_batch = 10; /* every sample in one batch */
    c.steps = 1;
    dh_engine *e;
    char err[256];
    errors x = {0};
    ck_assert_int_eq(dh_engine_start(&c, on_error, &x, &e, err, sizeof err), 0);
    dh_batch b;
    ck_assert_int_eq(dh_engine_next_batch(e, 0, &b), 0);
    ck_assert_int_eq(b.nfailed, 1);
    int marked = 0;
    for (int32_t k = 0; k < b.nitems; k++) {
        if (b.items[k].status == 0)
            continue;
        marked++;
        ck_assert_int_eq(b.items[k].status, DH_ENOENT);
        for (int64_t i = 0; i < b.items[k].bytes; i++)
            ck_assert_int_eq(b.data[b.items[k].offset + i], 0);
    }
    ck_assert_int_eq(marked, 1);
    ck_assert_msg(strstr(x.last, "gone|") == x.last && strstr(x.last, "none.png"), "%s", x.last);
    dh_engine_release(e, &b, -1);
    dh_result res = DH_RESULT_INIT;
    dh_engine_finish(e, &res);
    ck_assert_int_eq(res.failed, 1);
    dh_engine_free(e);
    dh_manifest_free(m);
}
END_TEST

START_TEST(every_policy_completes_within_the_pool)
{
    dh_manifest *m = manifest_with(NULL);
    const char *const *pol = dh_policy_names();
    /* The shapes users run: ranks equal to, above (the demo's 4 on 2) and below workers;
     * the suite runs this under ASan and TSan too. */
    static const int shapes[][2] = {{2, 2}, {4, 2}, {1, 3}};
    for (int p = 0; pol[p]; p++) {
        for (int k = 0; k < 3; k++) {
            dh_run_config c = config(m, pol[p]);
            c.ranks = shapes[k][0];
            c.workers = shapes[k][1];
            c.steps = 6; /* several epochs of the 9 samples: the pool is reused */
            dh_result res = DH_RESULT_INIT;
            char err[256];
            ck_assert_msg(dh_engine_run(&c, NULL, NULL, &res, err, sizeof err) == 0,
                          "%s R=%d W=%d: %s", pol[p], c.ranks, c.workers, err);
            ck_assert_int_eq(res.delivered, 24);
            ck_assert_int_eq(res.failed, 0);
            /* the bound is one by construction: measured CPU of the counted steps over W
             * threads, and the emulated ranks' slept compute (issue 26: 1.03-1.17 was read) */
            ck_assert_msg(res.efficiency > 0 && res.efficiency <= 1.0, "%s R=%d W=%d: "
                          "efficiency %g (bound gpu %g cpu %g, makespan %g)", pol[p], c.ranks,
                          c.workers, res.efficiency, res.bound_gpu_s, res.bound_cpu_s,
                          res.makespan_s);
            ck_assert_double_gt(res.bound_cpu_s, 0);
            ck_assert_double_gt(res.model_bound_s, 0); /* the models' view, kept apart */
            ck_assert_msg(res.efficiency_ordered >= res.efficiency &&
                              res.efficiency_ordered <= 1.0, "%s R=%d W=%d: ordered %g",
                          pol[p], c.ranks, c.workers, res.efficiency_ordered);
            ck_assert_int_gt(res.memory_peak, 0);
            /* one memory budget: the pool, its slack and the move arena all inside it */
            ck_assert_msg(res.memory_peak <= res.memory_budget, "%s R=%d W=%d: peak %lld > %lld",
                          pol[p], c.ranks, c.workers, (long long)res.memory_peak,
                          (long long)res.memory_budget);
        }
    }
    dh_manifest_free(m);
}
END_TEST

START_TEST(gen_writes_real_media_and_a_measured_manifest)
{
    /* interleaved-docs (several JPEGs per sample) and native-res (H.264 with keyframes):
     * the manifest loads fully, files exist, probed sizes are the scaled descriptors'. */
    char dir[2048], path[4096];
    snprintf(dir, sizeof dir, "%s/gen", media);
    dh_gen_stats st;
    char err[256] = "";
    ck_assert_msg(dh_workload_write("interleaved-docs", dir, 6, 3, "mini", NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(st.samples, 6);
    ck_assert_int_gt(st.files, 6);
    snprintf(path, sizeof path, "%s/manifest.jsonl", dir);
    dh_load_opts o;
    dh_load_opts_default(&o);
    o.check_files = 1;
    o.on_error = DH_ON_ERROR_FAIL;
    dh_manifest *m;
    dh_load_stats ls;
    ck_assert_int_eq(dh_manifest_load(path, &o, &m, &ls), 0);
    ck_assert_int_eq(ls.loaded, 6);
    dh_manifest *want;
    ck_assert_int_eq(dh_workload_generate("interleaved-docs", 6, 3, &want), 0);
    for (int64_t i = 0; i < 6; i++) {
        dh_sample_info a, b;
        dh_manifest_sample(m, i, &a);
        dh_manifest_sample(want, i, &b);
        ck_assert_int_eq(a.media_count, b.media_count);
        ck_assert_int_eq(a.text_tokens, b.text_tokens);
        dh_media_info x, y;
        dh_manifest_media(m, i, 0, &x);
        dh_manifest_media(want, i, 0, &y);
        ck_assert_int_le(abs(x.width - y.width / 4), 1); /* mini: a quarter, rounded even */
    }
    dh_manifest_free(want);
    dh_manifest_free(m);
    snprintf(dir, sizeof dir, "%s/gen-video", media);
    ck_assert_msg(dh_workload_write("native-res-video", dir, 2, 5, "mini", NULL, NULL, &st, err, sizeof err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/manifest.jsonl", dir);
    ck_assert_int_eq(dh_manifest_load(path, &o, &m, &ls), 0);
    dh_media_info v;
    dh_manifest_media(m, 0, 0, &v);
    ck_assert_int_eq(v.type, DH_MEDIA_VIDEO);
    ck_assert_int_eq(v.codec, DH_CODEC_H264);
    ck_assert_int_ge(v.keyframe_count, 2); /* 5 s keyframe interval / 4, over a clip >= 3 s / 4 */
    dh_manifest_free(m);
    ck_assert_int_eq(dh_workload_write("no-such", dir, 2, 5, "mini", NULL, NULL, &st, err, sizeof err), DH_ENOENT);
    ck_assert_int_eq(dh_workload_write("laion-images", dir, 2, 5, "huge", NULL, NULL, &st, err, sizeof err), DH_EINVAL);
}
END_TEST

/* ------------------------------------------------------------ rebalancing */

/*
 * The exact-cost hook of the rebalancing tests: the PNG's sample truly costs
 * 100 s, every other 1 s. Counts calls and lets the test wait until the
 * whole step is prepared (so no batch is frozen when the plan is made).
 */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const dh_manifest *m;
    int64_t heavy;
    int calls, errors, bad_items;
} reveal_ctx;

static double reveal_cost(int64_t sample, const dh_batch_item *items, int32_t n,
                          const uint8_t *data, void *user)
{
    reveal_ctx *x = user;
    dh_sample_info si;
    dh_manifest_sample(x->m, sample, &si);
    pthread_mutex_lock(&x->mu);
    x->calls++;
    x->bad_items += n != si.media_count || !data;
    for (int32_t k = 0; k < n; k++)
        x->bad_items += items[k].sample != sample || items[k].media != k || items[k].status;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
    return sample == x->heavy ? 100.0 : 1.0;
}

static void reveal_error(const dh_sample_error *e, void *user)
{
    (void)e;
    reveal_ctx *x = user;
    pthread_mutex_lock(&x->mu);
    x->errors++;
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
}

/*
 * One step of all 10 samples (9 good, one missing file) over 2 ranks: waits
 * until every sample is prepared, takes both batches and checks them: each
 * sample exactly once, items packed and described from the descriptors,
 * every good item byte-equal to a direct decode, the failed one zeroed and
 * marked. Returns the number of good samples on the heavy sample's rank
 * (the failed one has no exact cost and stays where it was placed).
 */
static int run_heavy_step(const dh_manifest *m, dh_run_config *c, reveal_ctx *x, dh_result *res)
{
    dh_spec *spec = spec_of(c);
    c->sample_gpu_cost = reveal_cost;
    c->sample_gpu_cost_user = x;
    dh_engine *e;
    char err[256];
    ck_assert_msg(dh_engine_start(c, reveal_error, x, &e, err, sizeof err) == 0, "%s", err);
    pthread_mutex_lock(&x->mu);
    while (x->calls + x->errors < 10)
        pthread_cond_wait(&x->cv, &x->mu);
    pthread_mutex_unlock(&x->mu);
    dh_batch b[2];
    int seen[10] = {0}, heavy_rank = -1;
    for (int r = 0; r < 2; r++) {
        ck_assert_int_eq(dh_engine_next_batch(e, r, &b[r]), 0);
        int32_t k = 0, failed = 0;
        for (int32_t s = 0; s < b[r].nsamples; s++) {
            int64_t i = b[r].samples[s];
            seen[i]++;
            heavy_rank = i == x->heavy ? r : heavy_rank;
            dh_sample_info si;
            dh_manifest_sample(m, i, &si);
            for (int32_t j = 0; j < si.media_count; j++, k++) {
                const dh_batch_item *it = &b[r].items[k];
                ck_assert_int_eq(it->sample, i);
                ck_assert_int_eq(it->media, j);
                dh_media_info mi;
                dh_media_derived md;
                dh_manifest_media(m, i, j, &mi);
                ck_assert_int_eq(dh_derive_media(spec, &mi, &md), 0);
                ck_assert_int_eq(it->bytes, md.out_bytes);
                ck_assert_int_eq(it->shape[0], md.shape[0]);
                if (it->status) {
                    ck_assert_int_eq(it->status, DH_ENOENT);
                    failed++;
                    for (int64_t q = 0; q < it->bytes; q++)
                        ck_assert_int_eq(b[r].data[it->offset + q], 0);
                } else {
                    check_item(c, spec, &b[r], it);
                }
            }
        }
        int64_t off = 0; /* packed, 64-byte aligned, a type's items together in batch order */
        for (int t = DH_MEDIA_VIDEO; t <= DH_MEDIA_AUDIO; t++)
            for (int32_t q = 0; q < b[r].nitems; q++)
                if (b[r].items[q].type == t) {
                    ck_assert_int_eq(b[r].items[q].offset, off);
                    off = (off + b[r].items[q].bytes + 63) / 64 * 64;
                }
        ck_assert_int_eq(k, b[r].nitems);
        ck_assert_int_eq(off, b[r].bytes);
        ck_assert_int_eq(failed, b[r].nfailed);
    }
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(seen[i], 1);
    int on_heavy = b[heavy_rank].nsamples - b[heavy_rank].nfailed;
    for (int r = 0; r < 2; r++)
        dh_engine_release(e, &b[r], -1);
    ck_assert_int_eq(dh_engine_finish(e, res), 0);
    ck_assert_int_eq(res->delivered + res->failed, 10);
    ck_assert_int_eq(res->failed, 1);
    ck_assert_int_eq(x->bad_items, 0);
    ck_assert_int_eq(x->calls, 9); /* once per prepared sample, never for the failed one */
    dh_engine_free(e);
    dh_spec_free(spec);
    return on_heavy;
}

/* The media with the heavy sample marked in x, and `extra` manifest lines (may be NULL). */
static dh_manifest *heavy_manifest_with(reveal_ctx *x, const char *extra)
{
    dh_manifest *m = manifest_with(extra);
    memset(x, 0, sizeof *x);
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
    x->m = m;
    x->heavy = -1;
    for (int64_t i = 0; i < dh_manifest_count(m); i++) {
        dh_media_info mi;
        dh_manifest_media(m, i, 0, &mi);
        if (strstr(mi.path, "p.png"))
            x->heavy = i; /* the lightest prediction: never alone on a rank at first */
    }
    ck_assert_int_ge(x->heavy, 0);
    return m;
}

/* ... with a missing file: 10 samples, one of which fails. */
static dh_manifest *heavy_manifest(reveal_ctx *x)
{
    return heavy_manifest_with(x, "{\"id\":\"gone\",\"media\":[{\"type\":\"image\",\"path\":"
                                  "\"ok/none.jpg\",\"codec\":\"jpeg\",\"width\":64,\"height\":48}]}\n");
}

START_TEST(rebalancing_moves_decoded_samples_and_keeps_batches_valid)
{
    reveal_ctx x;
    dh_manifest *m = heavy_manifest(&x);
    dh_run_config c = config(m, "helix");
    c.global_batch = 10;
    dh_result res = DH_RESULT_INIT;
    /* Optimal: the 100 s sample alone (100 | 8); the gate passes (gain >= 1 s, cost ~us). */
    ck_assert_int_eq(run_heavy_step(m, &c, &x, &res), 1);
    ck_assert_int_gt(res.reb_moved, 0);
    ck_assert_int_gt(res.reb_bytes, 0);
    ck_assert_int_eq(res.reb_gated, 0);
    ck_assert_double_ge(res.reb_predicted_gain_s, 1.0);
    ck_assert_double_ge(res.reb_realised_gain_s, 1.0);
    dh_manifest_free(m);
}
END_TEST

START_TEST(rebalancing_is_gated_by_transfer_cost_and_off_for_noreb)
{
    reveal_ctx x;
    dh_manifest *m = heavy_manifest(&x);
    dh_run_config c = config(m, "helix");
    c.global_batch = 10;
    c.move_bandwidth = 1.0; /* 1 byte/s: every move costs more than it gains */
    dh_result res = DH_RESULT_INIT;
    ck_assert_int_gt(run_heavy_step(m, &c, &x, &res), 1);
    ck_assert_int_eq(res.reb_moved, 0);
    ck_assert_int_gt(res.reb_gated, 0);
    dh_manifest_free(m);
    m = heavy_manifest(&x);
    c = config(m, "helix-noreb");
    c.global_batch = 10;
    ck_assert_int_gt(run_heavy_step(m, &c, &x, &res), 1);
    ck_assert_int_eq(res.reb_considered, 0);
    dh_manifest_free(m);
}
END_TEST

typedef struct {
    dh_engine *e;
    int rc;
} consumer_arg;

static void *take_forever(void *p)
{
    consumer_arg *a = p;
    dh_batch b;
    for (;;) { /* rank 0 consumes; rank 1 never asks, so the run cannot go far */
        int rc = dh_engine_next_batch(a->e, 0, &b);
        if (rc) {
            a->rc = rc;
            return NULL;
        }
        dh_engine_release(a->e, &b, 0.001);
    }
}

/* A consumer waiting for its batch while workers plan steps far ahead: the records'
 * ring regrows meanwhile and moves every record; the request must not touch the record it
 * looked up before waiting (TSan/ASan saw a use after free in dh__engine_next). */
START_TEST(a_waiting_request_survives_the_records_regrowing)
{
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config(m, "pool");
    c.ranks = 1;
    c.global_batch = 1; /* 9 steps an epoch: 40 steps open records well past the first 8 */
    c.steps = 40;
    c.memory_budget = INT64_C(1) << 30;
    dh_engine *e;
    char err[256] = "";
    ck_assert_msg(dh_engine_start(&c, NULL, NULL, &e, err, sizeof err) == 0, "%s", err);
    for (int64_t st = 0; st < 40; st++) {
        dh_batch b;
        ck_assert_int_eq(dh_engine_next_batch(e, 0, &b), 0);
        ck_assert_int_eq(b.step, st);
        dh_engine_release(e, &b, 0.0);
    }
    dh_result r = DH_RESULT_INIT;
    ck_assert_int_eq(dh_engine_finish(e, &r), 0);
    ck_assert_int_eq(r.delivered, 40);
    dh_engine_free(e);
    dh_manifest_free(m);
}
END_TEST

START_TEST(stop_wakes_a_blocked_consumer_and_streams_without_a_length)
{
    /* A run without a length (DH_STEPS_FOREVER) over 9 samples goes round epoch after
     * epoch; rank 1 never releases, so rank 0 soon blocks on a batch the memory budget
     * cannot admit. dh_engine_stop must wake it with DH_ECANCELED, not leave it hanging. */
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config(m, "pool");
    c.steps = DH_STEPS_FOREVER;
    dh_engine *e;
    char err[256] = "";
    /* One memory budget (issue 11): a budget that cannot hold one batch besides the pool's
     * slack is refused with the size needed (1 byte was accepted, and exceeded). */
    c.memory_budget = 1;
    ck_assert_int_eq(dh_engine_start(&c, NULL, NULL, &e, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "MiB) this run needs"), "%s", err);
    c.memory_budget = tu_min_budget(&c, 0); /* one batch at a time */
    ck_assert_msg(dh_engine_start(&c, NULL, NULL, &e, err, sizeof err) == 0, "%s", err);
    consumer_arg a = {e, 0};
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, take_forever, &a), 0);
    usleep(300000);
    dh_engine_stop(e);
    pthread_join(t, NULL);
    ck_assert_int_eq(a.rc, DH_ECANCELED);
    dh_result r = DH_RESULT_INIT;
    dh_engine_finish(e, &r);
    ck_assert_int_eq(r.steps, 0); /* no step was finished by both ranks */
    ck_assert_int_eq(r.delivered + r.failed, r.samples);
    dh_engine_free(e);
    dh_manifest_free(m);
}
END_TEST

/* should_stop once 3 steps completed (it is asked per step and, on one node, every 0.2 s
 * while the ranks run: a count of calls is not a count of steps). */
static void count_steps(int64_t done, int64_t steps, void *user)
{
    (void)steps;
    __atomic_store_n((int64_t *)user, done, __ATOMIC_RELEASE);
}

static int stop_after_3_steps(void *user)
{
    return __atomic_load_n((int64_t *)user, __ATOMIC_ACQUIRE) >= 3;
}

/* should_stop at its third call (several nodes: only the exchange thread asks, per step) */
static int stop_after_3(void *user)
{
    int *calls = user;
    return ++*calls >= 3;
}

START_TEST(should_stop_ends_an_endless_run_with_its_accounting)
{
    /* Emulated ranks, no length, one missing file: should_stop ends the run after the third
     * completed step; the accounting covers exactly the completed steps, failures counted
     * per scheduled occurrence (the missing file fails again in every epoch). */
    dh_manifest *m = manifest_with("{\"id\":\"gone\",\"media\":[{\"type\":\"image\",\"path\":"
                                   "\"nope.png\",\"codec\":\"png\",\"width\":8,\"height\":8}]}\n");
    dh_run_config c = config(m, "helix");
    c.steps = DH_STEPS_FOREVER;
    int64_t done = 0;
    c.progress = count_steps;
    c.progress_user = &done;
    c.should_stop = stop_after_3_steps;
    c.should_stop_user = &done;
    dh_result r = DH_RESULT_INIT;
    char err[256] = "";
    ck_assert_msg(dh_engine_run(&c, NULL, NULL, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_ge(r.steps, 3);
    ck_assert_int_eq(r.samples, r.steps * 4);
    ck_assert_int_eq(r.delivered + r.failed, r.samples);
    /* the CPU of steps prepared ahead and never completed is not in the bound */
    ck_assert_msg(r.efficiency > 0 && r.efficiency <= 1.0, "efficiency %g", r.efficiency);
    ck_assert_msg(r.efficiency_ordered >= r.efficiency && r.efficiency_ordered <= 1.0,
                  "ordered %g", r.efficiency_ordered);
    dh_manifest_free(m);
}
END_TEST

START_TEST(allocation_failures_stop_the_real_engine_cleanly)
{
    /* The n-th allocation of the run-time modules fails (and all after it) while decoding
     * threads and rank threads run: every run must end - with an error and a message, or
     * complete with exact accounting - and never hang or crash. */
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config(m, "helix");
    c.steps = 3;
    dh_result r = DH_RESULT_INIT;
    char err[256] = "";
    dh__alloc_fail_at(INT64_MAX, 0);
    ck_assert_msg(dh_engine_run(&c, NULL, NULL, &r, err, sizeof err) == 0, "%s", err);
    int64_t total = dh__alloc_fail_at(0, 0), failures = 0;
    ck_assert_int_gt(total, 10);
    for (int64_t n = 1; n <= total; n += 1 + total / 40) {
        err[0] = 0;
        dh_result_init(&r);
        dh__alloc_fail_at(n, 1);
        int rc = dh_engine_run(&c, NULL, NULL, &r, err, sizeof err);
        dh__alloc_fail_at(0, 0);
        if (rc) {
            failures++;
            ck_assert_msg(rc < 0 && err[0], "allocation %lld: rc %d without a message",
                          (long long)n, rc);
        } else {
            ck_assert_int_eq(r.delivered + r.failed, r.samples);
        }
    }
    ck_assert_int_gt(failures, 0);
    dh_manifest_free(m);
}
END_TEST

START_TEST(threads_that_cannot_start_unwind_cleanly)
{
    /* The second decoding thread cannot start: dh_engine_start fails with a message and
     * joins only the thread that did start. A rank thread that cannot start: the ranks that
     * did start must not wait for it at the step barrier (this deadlocked). */
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config(m, "pool");
    c.steps = 3;
    dh_engine *e = NULL;
    char err[256] = "";
    dh__thread_fail_at(2);
    int rc = dh_engine_start(&c, NULL, NULL, &e, err, sizeof err);
    dh__thread_fail_at(0);
    ck_assert_int_eq(rc, -EAGAIN);
    ck_assert_ptr_null(e);
    ck_assert_msg(strstr(err, "cannot start the engine"), "%s", err);
    /* W = 2 workers start first (creations 1, 2), then ranks 0 and 1 (3, 4). */
    for (int at = 3; at <= 4; at++) {
        dh_result r = DH_RESULT_INIT;
        err[0] = 0;
        dh__thread_fail_at(at);
        rc = dh_engine_run(&c, NULL, NULL, &r, err, sizeof err);
        dh__thread_fail_at(0);
        ck_assert_int_lt(rc, 0);
        ck_assert_msg(strstr(err, "rank threads"), "%s", err);
    }
    dh_manifest_free(m);
}
END_TEST

START_TEST(a_failing_sample_fails_in_every_epoch_it_is_scheduled)
{
    /* One good PNG and one missing file, G = 2, 5 steps: every step holds both samples.
     * The missing one must fail (and be counted) in each of the 5 steps; it used to be
     * failed once per run, and from the second epoch on came back "OK" holding stale data. */
    char path[4096];
    snprintf(path, sizeof path, "%s/two.jsonl", media);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"id\":\"good\",\"media\":[{\"type\":\"image\",\"path\":\"ok/p.png\",\"codec\":\"png\","
          "\"width\":120,\"height\":90}]}\n"
          "{\"id\":\"gone\",\"media\":[{\"type\":\"image\",\"path\":\"ok/nope.png\",\"codec\":"
          "\"png\",\"width\":120,\"height\":90}]}\n", f);
    fclose(f);
    dh_manifest *m;
    ck_assert_int_eq(dh_manifest_load(path, NULL, &m, NULL), 0);
    dh_run_config c = config(m, "pool");
    c.ranks = 1;
    c.global_batch = 2;
    c.steps = 5;
    dh_engine *e;
    errors errs = {0};
    char err[256] = "";
    ck_assert_msg(dh_engine_start(&c, on_error, &errs, &e, err, sizeof err) == 0, "%s", err);
    int64_t gone = dh_manifest_find(m, "gone");
    for (int st = 0; st < 5; st++) {
        dh_batch b;
        ck_assert_int_eq(dh_engine_next_batch(e, 0, &b), 0);
        ck_assert_int_eq(b.nfailed, 1);
        for (int32_t k = 0; k < b.nitems; k++) {
            if (b.items[k].sample == gone) {
                ck_assert_int_eq(b.items[k].status, DH_ENOENT);
                for (int64_t x = 0; x < b.items[k].bytes; x++) /* zeroed, not stale */
                    ck_assert_int_eq(b.data[b.items[k].offset + x], 0);
            } else {
                ck_assert_int_eq(b.items[k].status, 0);
            }
        }
        dh_engine_release(e, &b, 0.001);
    }
    dh_result r = DH_RESULT_INIT;
    ck_assert_int_eq(dh_engine_finish(e, &r), 0);
    ck_assert_int_eq(r.failed, 5);
    ck_assert_int_eq(r.delivered, 5);
    ck_assert_int_eq(errs.n, 5);
    dh_engine_free(e);
    dh_manifest_free(m);
}
END_TEST

START_TEST(real_engine_refuses_several_nodes_without_an_exchange)
{
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config(m, "helix");
    c.nodes = 2;
    dh_result res = DH_RESULT_INIT;
    char err[256] = "";
    ck_assert_int_eq(dh_engine_run(&c, NULL, NULL, &res, err, sizeof err), DH_EINVAL);
    ck_assert_msg(strstr(err, "mpirun") != NULL, "%s", err);
    dh_manifest_free(m);
}
END_TEST

/* ------------------------------------------------------------ several nodes */

/*
 * The step exchange of several nodes, in one process: an allgather over threads (the
 * agent's is MPI). A node told to die stops taking part; the others' waits then fail with
 * DH_EPEER naming it, as the agent's heartbeats make them.
 */
typedef struct hub_msg {
    struct hub_msg *next;
    int from;
    size_t len;
    void *data;
} hub_msg;

#define HUB_NODES 8 /* the most nodes a test runs */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, arrived, dead;
    int64_t gen;
    size_t bytes; /* of the round being gathered */
    unsigned char *in, *out;
    hub_msg *box[HUB_NODES]; /* per node, in arrival order (lending's messages) */
} hub;

typedef struct {
    hub *h;
    int node, calls, die_at; /* die_at >= 0: this node dies at its die_at-th exchange */
    int die_on_loan;         /* this node dies when it is handed another node's task */
    dh_run_config cfg;
    dh_result res;
    int rc, consume; /* consume: the test's consumers (checking every item), not emulated ranks */
    int served;      /* 1: an agent's engine, begun; 2: one whose ranks never came (refused) */
    char err[512];
    int64_t *seen; /* consume: per step, the sample indices delivered, G slots */
    int64_t seen_n;
    const dh_spec *spec;
    errors errs;
} hub_node;

/* What the hub spoils: 1 node 1's greeting, 2 its record of step 1, 3 node 1's first
 * message becomes a TASK of node 0 claiming 1000 items, 4 node 1's record of step 1 claims
 * more failed samples than a step has, 5 its truth is no number, 6 its cutoff record after
 * a stop claims step 1000, 7 its load of the next step is no number (0: nothing). */
static int corrupt;

static int hub_exchange(void *user, const void *mine, void *all, size_t bytes, char *err,
                        size_t errlen)
{
    hub_node *me = user;
    hub *h = me->h;
    pthread_mutex_lock(&h->mu);
    if (me->die_at >= 0 && me->calls >= me->die_at)
        h->dead = me->node;
    me->calls++;
    if (h->dead >= 0) {
        snprintf(err, errlen, "node %d (test) stopped responding", h->dead);
        pthread_cond_broadcast(&h->cv);
        pthread_mutex_unlock(&h->mu);
        return DH_EPEER;
    }
    if (!h->arrived && bytes != h->bytes) { /* a round of another size (the greeting's) */
        free(h->in);
        h->in = calloc((size_t)h->n, bytes);
        h->bytes = bytes;
    }
    memcpy(h->in + (size_t)me->node * bytes, mine, bytes);
    if (corrupt == 1 && me->node == 1 && me->calls == 1) /* its greeting: another version */
        ((dh__wire_greeting *)(h->in + bytes))->version = 99;
    if (corrupt == 2 && me->node == 1 && me->calls == 5) /* its record of step 1: step 7 */
        ((xrec *)(h->in + bytes))->step = 7;
    if (corrupt == 4 && me->node == 1 && me->calls == 5)
        ((xrec *)(h->in + bytes))->failed = 1000000;
    if (corrupt == 5 && me->node == 1 && me->calls == 5) /* its share of the step's truth */
        ((xrec *)(h->in + bytes))->truth_cpu = NAN;
    if (corrupt == 7 && me->node == 1 && me->calls == 5) /* its load of step 2 */
        ((xrec *)(h->in + bytes))->mv_load = NAN;
    if (corrupt == 6 && me->node == 1 && ((xrec *)(h->in + bytes))->kind == X_CUTOFF)
        ((xrec *)(h->in + bytes))->step = 1000; /* after a stop: a step past the run's */
    int64_t gen = h->gen;
    if (++h->arrived == h->n) {
        h->arrived = 0;
        h->gen++;
        /* every node copied the last round's out: each of them has called this one */
        free(h->out);
        h->out = malloc((size_t)h->n * bytes);
        memcpy(h->out, h->in, (size_t)h->n * bytes);
        pthread_cond_broadcast(&h->cv);
    }
    while (gen == h->gen && h->dead < 0)
        pthread_cond_wait(&h->cv, &h->mu);
    int ok = gen != h->gen; /* out stays until every node (this one too) gave the next round */
    if (ok)
        memcpy(all, h->out, (size_t)h->n * bytes);
    else
        snprintf(err, errlen, "node %d (test) stopped responding", h->dead);
    pthread_mutex_unlock(&h->mu);
    return ok ? 0 : DH_EPEER;
}

static int hub_send(void *user, int to, const void *buf, size_t len)
{
    hub_node *me = user;
    hub *h = me->h;
    hub_msg *m = calloc(1, sizeof *m);
    if (!m || posix_memalign(&m->data, 64, len ? len : 1)) {
        free(m);
        return DH_ENOMEM;
    }
    memcpy(m->data, buf, len);
    m->len = len;
    m->from = me->node;
    pthread_mutex_lock(&h->mu);
    hub_msg **p = &h->box[to];
    while (*p)
        p = &(*p)->next;
    *p = m;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return 0;
}

static int bogus_move_to = -1; /* this node's first message is a malformed MOVE, or -1 */

static int hub_recv(void *user, int *from, void **data, size_t *len, double timeout_s,
                    char *err, size_t errlen)
{
    hub_node *me = user;
    hub *h = me->h;
    pthread_mutex_lock(&h->mu);
    int bogus = me->node == bogus_move_to;
    if (bogus)
        bogus_move_to = -1;
    pthread_mutex_unlock(&h->mu);
    if (corrupt == 3 && me->node == 1) {
        dh__lend_msg *t = calloc(1, sizeof *t + 8);
        *t = (dh__lend_msg){M_TASK, 0, 0, 0, 1, 1000, 0, 0, 0, 0.0};
        *from = 0;
        *data = t;
        *len = sizeof *t + 8;
        return 0;
    }
    if (bogus) { /* kind MOVE, from node 0, one item, cut short */
        int32_t *m = calloc(12, sizeof *m);
        m[0] = M_RESULT + 1;
        m[2] = 1;
        *from = 0;
        *data = m;
        *len = 12 * sizeof *m;
        return 0;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += (long)(timeout_s * 1e9);
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&h->mu);
    while (!h->box[me->node] && h->dead < 0 &&
           pthread_cond_timedwait(&h->cv, &h->mu, &until) == 0)
        ;
    hub_msg *m = h->box[me->node];
    if (m)
        h->box[me->node] = m->next;
    if (m && me->die_on_loan && *(const int32_t *)m->data == M_TASK) {
        h->dead = me->node; /* dies holding the task: its owner waits for it in vain */
        pthread_cond_broadcast(&h->cv);
        free(m->data);
        free(m);
        m = NULL;
    }
    int dead = h->dead;
    pthread_mutex_unlock(&h->mu);
    if (!m && dead >= 0)
        snprintf(err, errlen, "node %d (test) stopped responding", dead);
    if (!m)
        return dead >= 0 ? DH_EPEER : DH_ETIMEDOUT;
    *from = m->from;
    *data = m->data;
    *len = m->len;
    free(m);
    return 0;
}

typedef struct {
    hub_node *n;
    dh_engine *e;
    int rank;
} node_consumer;

/* A trainer's loop on one rank of one node: every item checked against a direct decode. */
static int die_on_loan_node = -1; /* the node that dies when handed a loan, or -1 */
static int slow_node_ms[HUB_NODES];       /* per node: its consumers hold each batch this long */
/* Moves between nodes: consumers hold batch st until their node's batches of st + 1 are
 * prepared (so the plan made at st's exchange has every batch of st + 1 open to it), and
 * note how many samples share a batch with the heavy one in each step. */
static reveal_ctx *hold_until_prepared;
static int heavy_batch_n[16];
static int take_before_release; /* consumers release batch st only once they took st + 1 */
/* A stop racing a take (several nodes): node 0's trainer takes st + 1 before it releases st,
 * and asks for st only once st - 2 was exchanged (a synchronous job keeps it that close);
 * node 1's releases at once and asks for step 3 only once step 2 was exchanged, which is
 * when the stop node 1 asked at step 2's record is applied. */
static int stop_race;

static void *consume_rank(void *p)
{
    node_consumer *c = p;
    dh_batch prev;
    int held = 0;
    for (int64_t taken = 0;; taken++) {
        if (stop_race && c->n->node == 0 && taken >= 2)
            c->e->nops->wait_exchanged(c->e, taken - 2);
        if (stop_race && c->n->node == 1 && taken == 3)
            c->e->nops->wait_exchanged(c->e, 2);
        dh_batch b;
        int rc = dh_engine_next_batch(c->e, c->rank, &b);
        if (held) /* a Python trainer's batch, released when the next one replaced it */
            dh_engine_release(c->e, &prev, -1);
        held = 0;
        if (rc)
            break;
        for (int32_t k = 0; k < b.nitems; k++)
            if (b.items[k].status == 0)
                check_item(&c->n->cfg, c->n->spec, &b, &b.items[k]);
        pthread_mutex_lock(&c->n->h->mu);
        for (int32_t k = 0; k < b.nsamples; k++)
            c->n->seen[c->n->seen_n++] = b.step * 1000000 + b.samples[k];
        pthread_mutex_unlock(&c->n->h->mu);
        if (slow_node_ms[c->n->node]) /* a slow trainer: its node's workers run dry */
            nanosleep(&(struct timespec){0, slow_node_ms[c->n->node] * 1000000L}, NULL);
        reveal_ctx *x = hold_until_prepared;
        if (x) {
            pthread_mutex_lock(&x->mu);
            for (int32_t k = 0; k < b.nsamples; k++)
                if (b.samples[k] == x->heavy && b.step < 16)
                    heavy_batch_n[b.step] = b.nsamples;
            pthread_mutex_unlock(&x->mu);
            int per = c->n->cfg.ranks / c->n->cfg.nodes, ready = 0;
            for (int t = 0; !ready && t < 60000; t++) { /* never a hang: at most 60 s */
                pthread_mutex_lock(&c->e->mu);
                ready = 1;
                for (int r = c->n->node * per; r < (c->n->node + 1) * per; r++)
                    ready &= b.step + 1 >= c->n->cfg.steps ||
                             dh__sched_batch_ready(c->e->sched, b.step + 1, r);
                pthread_mutex_unlock(&c->e->mu);
                if (!ready)
                    nanosleep(&(struct timespec){0, 1000000L}, NULL);
            }
        }
        if (take_before_release || (stop_race && c->n->node == 0)) {
            prev = b;
            held = 1;
        } else {
            dh_engine_release(c->e, &b, -1);
        }
    }
    return NULL;
}

static void *run_node(void *p)
{
    hub_node *n = p;
    if (n->served) { /* an agent's engine: begins once its ranks are there, or never */
        dh_engine *e;
        n->rc = dh__engine_start(&n->cfg, 1, on_error, &n->errs, &e, n->err, sizeof n->err);
        if (n->rc)
            return NULL;
        if (n->served == 2)
            dh__engine_refuse(e, DH_ETIMEDOUT, "only 0 of 1 ranks attached in time");
        else
            n->rc = dh__engine_begin(e, 0, 0, 0, 0, -1, n->err, sizeof n->err);
        dh_engine_stop(e);
        int frc = dh_engine_finish(e, &n->res);
        n->rc = n->rc ? n->rc : frc;
        dh_engine_free(e);
        return NULL;
    }
    if (!n->consume) {
        n->rc = dh_engine_run(&n->cfg, on_error, &n->errs, &n->res, n->err, sizeof n->err);
        return NULL;
    }
    dh_engine *e;
    n->rc = dh_engine_start(&n->cfg, on_error, &n->errs, &e, n->err, sizeof n->err);
    if (n->rc)
        return NULL;
    int per = n->cfg.ranks / n->cfg.nodes;
    node_consumer cs[8];
    pthread_t t[8];
    for (int i = 0; i < per; i++) {
        cs[i] = (node_consumer){n, e, n->node * per + i};
        pthread_create(&t[i], NULL, consume_rank, &cs[i]);
    }
    for (int i = 0; i < per; i++)
        pthread_join(t[i], NULL);
    n->rc = dh_engine_finish(e, &n->res);
    snprintf(n->err, sizeof n->err, "%s", e->nops->error(e)); /* another node's doing */
    dh_engine_free(e);
    return NULL;
}


static int served_as[HUB_NODES]; /* hub_node.served of each node run_nodes starts */

/* Runs base on `nodes` nodes (threads of this process); node `die` dies at its die_at-th
 * exchange (die -1: none); tweak (may be NULL) changes node k's config. */
static void run_nodes(const dh_run_config *base, int nodes, int consume, int die, int die_at,
                      hub_node *out, void (*tweak)(int node, dh_run_config *c))
{
    ck_assert_int_le(nodes, HUB_NODES);
    hub h = {.n = nodes, .dead = -1};
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cv, NULL);
    pthread_t t[HUB_NODES];
    for (int k = 0; k < nodes; k++) {
        out[k] = (hub_node){.h = &h, .node = k, .die_at = k == die ? die_at : -1,
                            .die_on_loan = k == die_on_loan_node, .cfg = *base,
                            .consume = consume, .served = served_as[k]};
        dh_result_init(&out[k].res);
        out[k].cfg.nodes = nodes;
        out[k].cfg.node = k;
        out[k].cfg.exchange = hub_exchange;
        out[k].cfg.send = hub_send;
        out[k].cfg.recv = hub_recv;
        out[k].cfg.exchange_user = &out[k];
        if (tweak)
            tweak(k, &out[k].cfg);
        if (consume)
            out[k].seen = calloc((size_t)(base->steps * base->global_batch), sizeof *out[k].seen);
        out[k].spec = spec_of(base);
        pthread_create(&t[k], NULL, run_node, &out[k]);
    }
    for (int k = 0; k < nodes; k++)
        pthread_join(t[k], NULL);
    for (int k = 0; k < nodes; k++)
        for (hub_msg *m = h.box[k], *nx; m; m = nx) {
            nx = m->next;
            free(m->data);
            free(m);
        }
    free(h.in);
    free(h.out);
    pthread_mutex_destroy(&h.mu);
    pthread_cond_destroy(&h.cv);
}

static void free_nodes(hub_node *n, int nodes)
{
    for (int k = 0; k < nodes; k++) {
        free(n[k].seen);
        dh_spec_free((dh_spec *)n[k].spec);
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The nodes' deliveries together (each node's seen: step and sample, each sample's bytes
 * checked as it came) are one node's, total of them: each sample of each step once. */
static void nodes_deliver_what_one_does(hub_node *one, hub_node *n, int nodes, int64_t total)
{
    int64_t *all = malloc((size_t)total * sizeof *all), k = 0;
    for (int x = 0; x < nodes; x++)
        for (int64_t i = 0; i < n[x].seen_n && k < total; i++)
            all[k++] = n[x].seen[i];
    ck_assert_int_eq(k, total);
    ck_assert_int_eq(one->seen_n, total);
    qsort(all, (size_t)k, sizeof *all, cmp_i64);
    qsort(one->seen, (size_t)total, sizeof *all, cmp_i64);
    for (int64_t i = 0; i < total; i++)
        ck_assert_int_eq(all[i], one->seen[i]);
    free(all);
}

START_TEST(several_nodes_deliver_every_sample_once_byte_equal)
{
    /* Each node decodes only its own ranks' batches; together they deliver exactly what one
     * node delivers (the same samples in every step), each once, each byte-equal to a
     * direct decode; every node reports the same whole-run accounting. With --augment
     * (_i 1) every item carries the draw of its (seed, epoch, id, item), wherever it was
     * decoded, lent or moved. */
    dh_manifest *m = manifest_with(NULL);
    const char *pols[] = {"helix", "pool", "local"};
    for (int p = 0; p < 3; p++) {
        for (int nodes = 2; nodes <= 4; nodes += 2) {
            dh_run_config c = config_of(m, pols[p], 4, 4, 8, 5);
            c.augment = _i;
            hub_node one[1], n[4];
            run_nodes(&c, 1, 1, -1, 0, one, NULL); /* nodes = 1: the plain engine */
            ck_assert_msg(one[0].rc == 0, "%s", one[0].err);
            run_nodes(&c, nodes, 1, -1, 0, n, NULL);
            for (int x = 0; x < nodes; x++) {
                ck_assert_msg(n[x].rc == 0, "%s on %d nodes, node %d: %s", pols[p], nodes, x,
                              n[x].err);
                ck_assert_int_eq(n[x].res.nodes, nodes);
                ck_assert_int_eq(n[x].res.steps, 5);
                ck_assert_int_eq(n[x].res.delivered, 40);
                ck_assert_int_eq(n[x].res.failed, 0);
                ck_assert_double_eq(n[x].res.wait_p95_ms, n[0].res.wait_p95_ms);
                ck_assert_double_eq(n[x].res.makespan_s, n[0].res.makespan_s);
                ck_assert_int_eq(n[x].res.memory_peak, n[0].res.memory_peak);
                ck_assert_double_gt(n[x].res.exchange_mean_s, 0);
                /* the bound from the steps' truth, each node summing its own batches': the
                 * same on every node, and what one node summing every draw gets */
                ck_assert_double_eq(n[x].res.bound_gpu_s, n[0].res.bound_gpu_s);
                ck_assert_double_eq(n[x].res.model_bound_s, n[0].res.model_bound_s);
                ck_assert_double_eq_tol(n[x].res.bound_gpu_s, one[0].res.bound_gpu_s,
                                        1e-9 * one[0].res.bound_gpu_s);
                ck_assert_double_eq_tol(n[x].res.model_bound_s, one[0].res.model_bound_s,
                                        1e-9 * one[0].res.model_bound_s);
            }
            nodes_deliver_what_one_does(one, n, nodes, 40);
            free_nodes(one, 1);
            free_nodes(n, nodes);
        }
    }
    dh_manifest_free(m);
}
END_TEST

START_TEST(a_stratified_order_on_several_nodes_delivers_what_one_node_does)
{
    /* --order stratified: each step comes laid out by node and the deal is that layout (no
     * sort or snake on any replica); 2 nodes of 2 ranks deliver, step by step, the samples
     * one node delivers with the same order (each step's, once, byte-equal), and every node
     * reports the same accounting and its order. */
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config_of(m, "helix", 4, 4, 8, 5);
    c.order = DH_ORDER_STRATIFIED;
    hub_node one[1], n[2];
    run_nodes(&c, 1, 1, -1, 0, one, NULL);
    ck_assert_msg(one[0].rc == 0, "%s", one[0].err);
    run_nodes(&c, 2, 1, -1, 0, n, NULL);
    for (int x = 0; x < 2; x++) {
        ck_assert_msg(n[x].rc == 0, "node %d: %s", x, n[x].err);
        ck_assert_int_eq(n[x].res.delivered, 40);
        ck_assert_int_eq(n[x].res.failed, 0);
        ck_assert_str_eq(n[x].res.order, "stratified");
        ck_assert_double_eq(n[x].res.makespan_s, n[0].res.makespan_s);
    }
    nodes_deliver_what_one_does(one, n, 2, 40);
    free_nodes(one, 1);
    free_nodes(n, 2);
    dh_manifest_free(m);
}
END_TEST

START_TEST(several_nodes_run_every_policy_with_failures_counted_once)
{
    /* Emulated ranks on 2 nodes (the all-reduce is the step exchange), a missing file: reported
     * once per occurrence, by the node that prepared it. 20 samples of 10 with the tail of each
     * epoch dropped span 2.5 epochs: the missing one comes 1 to 3 times, as the order (seeded
     * by the manifest's content, whose encoded media sizes can vary from one generation to
     * the next) has it; the run's own sampler counts them. */
    dh_manifest *m = manifest_with("{\"id\":\"gone\",\"media\":[{\"type\":\"image\",\"path\":"
                                   "\"nope.png\",\"codec\":\"png\",\"width\":8,\"height\":8}]}\n");
    int64_t gone = dh_manifest_find(m, "gone"), expect = 0;
    const char *const *pol = dh_policy_names();
    for (int p = 0; pol[p]; p++) {
        dh_run_config c = config_of(m, pol[p], 4, 2, 0, 5);
        if (p == 0) {
            dh_sampler *s;
            dh_sampler_opts so = {.global_batch = c.global_batch, .seed = c.seed,
                                  .shuffle = !c.no_shuffle, .drop_last = !c.keep_last};
            ck_assert_int_eq(dh_sampler_new(m, &so, &s), 0);
            for (int st = 0; st < c.steps; st++) {
                int64_t idx[64];
                ck_assert_int_eq(dh_sampler_next(s, idx, 64), 0);
                for (int64_t k = 0; k < c.global_batch; k++)
                    expect += idx[k] == gone;
            }
            dh_sampler_free(s);
            ck_assert_int_ge(expect, 1);
        }
        hub_node n[2];
        run_nodes(&c, 2, 0, -1, 0, n, NULL);
        for (int x = 0; x < 2; x++) {
            ck_assert_msg(n[x].rc == 0, "%s node %d: %s", pol[p], x, n[x].err);
            ck_assert_int_eq(n[x].res.samples, 20);
            ck_assert_msg(n[x].res.failed == expect, "%s node %d: failed %lld of %lld expected "
                          "(errors %d, %d; last %s / %s)", pol[p], x, (long long)n[x].res.failed,
                          (long long)expect, n[0].errs.n, n[1].errs.n, n[0].errs.last,
                          n[1].errs.last);
            ck_assert_int_eq(n[x].res.delivered + n[x].res.failed, 20);
            ck_assert_msg(n[x].res.memory_peak <= n[x].res.memory_budget, "%s", pol[p]);
        }
        ck_assert_int_eq(n[0].errs.n + n[1].errs.n, expect);
        free_nodes(n, 2);
    }
    dh_manifest_free(m);
}
END_TEST

/* The moves tests' job on `nodes` nodes, one rank and one worker each: the heavy sample
 * costs 100 s once prepared, consumers hold each batch until their node's next batches are
 * prepared. net_bandwidth 0: the default network. Returns the manifest (*G: one epoch a
 * step). */
static dh_manifest *run_heavy_nodes(reveal_ctx *x, int nodes, int64_t steps,
                                    double net_bandwidth, hub_node *n, int64_t *G)
{
    dh_manifest *m = heavy_manifest_with(x, NULL);
    *G = dh_manifest_count(m);
    dh_run_config c = config_of(m, "helix", nodes, nodes, *G, steps);
    c.sample_gpu_cost = reveal_cost;
    c.sample_gpu_cost_user = x;
    c.net_bandwidth = net_bandwidth;
    memset(heavy_batch_n, 0, sizeof heavy_batch_n);
    hold_until_prepared = x;
    run_nodes(&c, nodes, 1, -1, 0, n, NULL);
    hold_until_prepared = NULL;
    return m;
}

/* The nodes' deliveries together: every step's G samples, each once (moved, never lost nor
 * doubled). */
static void each_step_delivered_once(const hub_node *n, int nodes, int steps, int64_t G)
{
    int64_t per_step[16] = {0};
    for (int k = 0; k < nodes; k++)
        for (int64_t i = 0; i < n[k].seen_n; i++)
            per_step[n[k].seen[i] / 1000000]++;
    for (int st = 0; st < steps; st++)
        ck_assert_int_eq(per_step[st], G);
}

/* What every moves test on `nodes` nodes checks after 4 steps: every node ran, delivered
 * every sample and counts the same moves (counted once); every sample once a step,
 * byte-equal. */
static void moved_and_delivered_once(const hub_node *n, int nodes, int64_t G,
                                     const reveal_ctx *x)
{
    for (int k = 0; k < nodes; k++) {
        ck_assert_msg(n[k].rc == 0, "%d nodes, node %d: %s", nodes, k, n[k].err);
        ck_assert_int_eq(n[k].res.delivered, 4 * G);
        ck_assert_int_eq(n[k].res.reb_moved, n[0].res.reb_moved);
    }
    ck_assert_int_gt(n[0].res.reb_moved, 0);
    each_step_delivered_once(n, nodes, 4, G);
    ck_assert_int_eq(x->bad_items, 0);
}

START_TEST(several_nodes_move_prepared_samples_between_nodes)
{
    /* One rank per node, so every move crosses nodes. The heavy sample's exact cost is 100 s,
     * every other 1 s, and it starts with other samples on its rank: from step 1 on, the
     * plan agreed at the previous step's exchange moves the others off its rank, over the
     * wire. Every sample is delivered once per step, byte-equal (consume_rank checks each
     * item), each node reports the same totals, and the heavy sample ends alone. */
    for (int nodes = 2; nodes <= 4; nodes += 2) {
        reveal_ctx x;
        hub_node n[4];
        int64_t G;
        dh_manifest *m = run_heavy_nodes(&x, nodes, 4, 0, n, &G);
        for (int k = 0; k < nodes; k++) {
            ck_assert_msg(n[k].rc == 0, "%d nodes, node %d: %s", nodes, k, n[k].err);
            ck_assert_int_eq(n[k].res.delivered, 4 * G);
            ck_assert_int_eq(n[k].res.failed, 0);
            ck_assert_int_gt(n[k].res.reb_remote, 0);
            ck_assert_int_eq(n[k].res.reb_remote, n[k].res.reb_moved); /* one rank per node */
            ck_assert_int_gt(n[k].res.reb_remote_bytes, 0);
            ck_assert_int_eq(n[k].res.reb_moved, n[0].res.reb_moved); /* counted once */
            ck_assert_int_eq(n[k].res.reb_refused, 0);
            ck_assert_double_ge(n[k].res.reb_predicted_gain_s, 1.0);
        }
        each_step_delivered_once(n, nodes, 4, G);
        for (int st = 1; st < 4; st++)
            ck_assert_msg(heavy_batch_n[st] == 1, "%d nodes, step %d: the heavy sample shares "
                          "its batch with %d others", nodes, st, heavy_batch_n[st] - 1);
        ck_assert_int_eq(x.bad_items, 0);
        free_nodes(n, nodes);
        dh_manifest_free(m);
    }
    /* Records that carry only 2 exact costs per node (at many nodes a record carries about
     * twice a node's share): the samples past them are planned as unknown by every node,
     * their own included, so the nodes still agree: every sample once per step, no hang. */
    reveal_ctx x;
    hub_node n[2];
    int64_t G;
    dh__eng_test_cost_cap(2);
    dh_manifest *m = run_heavy_nodes(&x, 2, 4, 0, n, &G);
    dh__eng_test_cost_cap(-1);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(n[k].rc == 0, "capped costs, node %d: %s", k, n[k].err);
        ck_assert_int_eq(n[k].res.delivered, 4 * G);
        ck_assert_int_eq(n[k].res.reb_moved, n[0].res.reb_moved);
    }
    each_step_delivered_once(n, 2, 4, G);
    ck_assert_int_eq(x.bad_items, 0);
    free_nodes(n, 2);
    dh_manifest_free(m);
}
END_TEST

START_TEST(trainers_that_take_before_releasing_still_rebalance_within_their_node)
{
    /* Trainers that release a batch only once they took the next (Python's garbage
     * collection) take step s before the exchange of s - 1, so no plan of s can be agreed:
     * each node then plans s alone over its own batches, when its first rank asks. Two ranks
     * per node: the heavy sample's rank gives its other samples to its neighbour, never
     * across nodes; every sample still once per step, byte-equal. */
    reveal_ctx x;
    dh_manifest *m = heavy_manifest_with(&x, NULL);
    int64_t G = dh_manifest_count(m);
    dh_run_config c = config_of(m, "helix", 4, 2, G, 4);
    c.sample_gpu_cost = reveal_cost;
    c.sample_gpu_cost_user = &x;
    hub_node n[2];
    memset(heavy_batch_n, 0, sizeof heavy_batch_n);
    hold_until_prepared = &x;
    take_before_release = 1;
    run_nodes(&c, 2, 1, -1, 0, n, NULL);
    take_before_release = 0;
    hold_until_prepared = NULL;
    moved_and_delivered_once(n, 2, G, &x);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(n[k].res.reb_remote, 0);
    free_nodes(n, 2);
    dh_manifest_free(m);
}
END_TEST

START_TEST(several_nodes_of_several_ranks_move_by_groups_of_nodes)
{
    /* 6 nodes of 2 ranks: moves are planned by 2 groups of 3 nodes, each node planning its
     * group's alone (rebalance.c). The heavy sample (100 s once prepared) makes its node's
     * group move samples (between its nodes when the plan is agreed before the trainers
     * take the step, which their timing decides: CI saw a run with moves within nodes
     * only; test_sched checks the groups' moves across nodes); every sample is delivered
     * once per step, byte-equal (a plan carried out by one node of a group and not another would leave a
     * sample undelivered or a batch waiting); every node reports the same totals.
     * (Consumers that hold a batch until their node's next ones are prepared, as the
     * one-rank tests' do, were seen to wait out their 60 s cap here, before groups too:
     * the run took 70 s.) */
    reveal_ctx x;
    char extra[4096] = "";
    for (int i = 0; i < 15; i++) /* 24 samples: two a rank */
        snprintf(extra + strlen(extra), sizeof extra - strlen(extra),
                 "{\"id\":\"again%d\",\"media\":[{\"type\":\"image\",\"path\":\"ok/i%d.jpg\","
                 "\"codec\":\"jpeg\",\"width\":%d,\"height\":150}]}\n", i, i % 3,
                 200 + i % 3 * 50);
    dh_manifest *m = heavy_manifest_with(&x, extra);
    int64_t G = dh_manifest_count(m);
    ck_assert_int_eq(G, 24);
    dh_run_config c = config_of(m, "helix", 12, 6, G, 4);
    c.sample_gpu_cost = reveal_cost;
    c.sample_gpu_cost_user = &x;
    hub_node n[6];
    run_nodes(&c, 6, 1, -1, 0, n, NULL);
    moved_and_delivered_once(n, 6, G, &x);
    for (int k = 0; k < 6; k++) {
        ck_assert_int_eq(n[k].res.failed, 0);
        ck_assert_int_eq(n[k].res.reb_refused, 0);
    }
    free_nodes(n, 6);
    dh_manifest_free(m);
}
END_TEST

START_TEST(moves_between_nodes_are_gated_by_the_network_or_refused_alike)
{
    /* The same job with a 1 byte/s network: every move is gated, none made, on every node.
     * Then with the network as it is but every node publishing no room in its move arena:
     * every plan passes the gate and is refused by every node alike (a node cannot refuse
     * alone: the others would wait for samples it never sends). */
    for (int room = 0; room <= 1; room++) {
        reveal_ctx x;
        hub_node n[2];
        int64_t G;
        if (room)
            dh__eng_test_move_room(0);
        dh_manifest *m = run_heavy_nodes(&x, 2, 3, room ? 0 : 1.0, n, &G);
        dh__eng_test_move_room(-1);
        for (int k = 0; k < 2; k++) {
            ck_assert_msg(n[k].rc == 0, "node %d: %s", k, n[k].err);
            ck_assert_int_eq(n[k].res.delivered, 3 * G);
            ck_assert_int_eq(n[k].res.reb_moved, 0);
            int64_t stopped = room ? n[k].res.reb_refused : n[k].res.reb_gated;
            ck_assert_int_gt(stopped, 0);
            ck_assert_int_eq(stopped, room ? n[0].res.reb_refused : n[0].res.reb_gated);
        }
        free_nodes(n, 2);
        dh_manifest_free(m);
    }
}
END_TEST

START_TEST(a_malformed_move_stops_the_run_with_its_reason)
{
    /* Bad input on the wire: a MOVE no plan asked for, and too short for its one item. The
     * receiving node stops naming it (no crash, no copy); the other stops with it. */
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config_of(m, "helix", 2, 2, 0, 6);
    hub_node n[2];
    bogus_move_to = 1;
    run_nodes(&c, 2, 0, -1, 0, n, NULL);
    bogus_move_to = -1;
    ck_assert_int_eq(n[1].rc, DH_EPARSE);
    ck_assert_msg(strstr(n[1].err, "node 0 sent a moved sample claiming 1 items") != NULL,
                  "%s", n[1].err);
    ck_assert_int_ne(n[0].rc, 0);
    for (int k = 0; k < 2; k++)
        ck_assert_int_eq(n[k].res.delivered + n[k].res.failed, n[k].res.samples);
    free_nodes(n, 2);
    dh_manifest_free(m);
}
END_TEST

START_TEST(a_dead_node_stops_every_node_with_its_name)
{
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config_of(m, "helix", 4, 2, 0, 8);
    hub_node n[2];
    /* node 1 dies at its 6th exchange (greeting, hello, begin + 3 steps) */
    run_nodes(&c, 2, 0, 1, 6, n, NULL);
    ck_assert_int_eq(n[0].rc, DH_EPEER);
    ck_assert_msg(strstr(n[0].err, "node 1 (test) stopped responding") != NULL, "%s", n[0].err);
    /* the survivor's accounting: the steps every node closed, exact */
    ck_assert_int_eq(n[0].res.steps, 3);
    ck_assert_int_eq(n[0].res.delivered + n[0].res.failed, n[0].res.samples);
    ck_assert_int_eq(n[0].res.samples, 12);
    free_nodes(n, 2);
    dh_manifest_free(m);
}
END_TEST

START_TEST(a_node_that_dies_holding_a_loan_stops_its_owner)
{
    /* Node 0 (fast trainers, often idle and asking) dies as it is handed a task of node 1
     * (slow trainers, so behind: its exchange thread may be waiting for its own ranks, not
     * in a round where the death would show). Node 1's batch then waits for that sample in
     * vain unless the lost peer, seen by its lending thread, stops it: it used to hang there
     * (found under ASan). Whether a loan is made, and whether node 1 is in a round when node
     * 0 dies, is timing, so this test catches the hang only when both fall right; what it
     * always checks: both nodes end, a node that saw the death names it, and each
     * accounting is exact. */
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config_of(m, "helix", 4, 2, 8, 10);
    hub_node n[2];
    dh__eng_test_lend_always(1);
    die_on_loan_node = 0;
    slow_node_ms[1] = 50;
    int died = 0;
    for (int attempt = 0; attempt < 4 && !died; attempt++) { /* until a loan is made */
        run_nodes(&c, 2, 1, -1, 0, n, NULL);
        died = n[1].rc != 0;
        for (int x = 0; x < 2; x++) {
            ck_assert_msg(n[x].rc == 0 || n[x].rc == DH_EPEER, "node %d: %d (%s)", x, n[x].rc,
                          n[x].err);
            ck_assert_int_eq(n[x].res.delivered + n[x].res.failed, n[x].res.samples);
        }
        if (died)
            ck_assert_msg(strstr(n[1].err, "node 0 (test) stopped responding") != NULL, "%s",
                          n[1].err);
        free_nodes(n, 2);
    }
    slow_node_ms[1] = 0;
    die_on_loan_node = -1;
    dh__eng_test_lend_always(0);
    if (!died) /* timing (under TSan it happened in none of 4 runs): nothing more to check */
        fprintf(stderr, "a_node_that_dies_holding_a_loan: no loan was made in 4 runs\n");
    dh_manifest_free(m);
}
END_TEST

static int node_1_polls; /* on several nodes only the exchange thread polls should_stop */

static void node_1_is_stopped(int node, dh_run_config *c)
{
    c->should_stop = node == 1 ? stop_after_3 : NULL;
    c->should_stop_user = &node_1_polls;
}

static void prohibitive_network(int node, dh_run_config *c)
{
    (void)node;
    c->net_latency = 1000; /* seconds per transfer: no loan is worth it */
}

START_TEST(idle_nodes_prepare_late_samples_of_other_nodes)
{
    /* helix on 2 nodes of 1 worker each: a node whose queue ran dry prepares the other's
     * samples (whole, or a keyframe part of a split video) and ships them back, which the
     * owner copies into its batch. Whether a backlog is late is a matter of timing, so the
     * test makes lenders ask whenever idle (dh__eng_test_lend_always) and node 0's trainers
     * slow (its worker runs dry while node 1's has a queue); every sample must still arrive
     * once, byte-equal to the one-node run's. A prohibitive network lends none. */
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config_of(m, "helix", 4, 2, 8, 10);
    hub_node one[1], n[2];
    run_nodes(&c, 1, 1, -1, 0, one, NULL);
    ck_assert_msg(one[0].rc == 0, "%s", one[0].err);
    qsort(one[0].seen, (size_t)one[0].seen_n, sizeof *one[0].seen, cmp_i64);
    dh__eng_test_lend_always(1);
    slow_node_ms[0] = 50;
    int64_t lent = 0, considered = 0;
    for (int attempt = 0; attempt < 3 && !lent; attempt++) { /* 4-13 loans a run here */
        run_nodes(&c, 2, 1, -1, 0, n, NULL);
        int64_t all[80], k = 0;
        for (int x = 0; x < 2; x++) {
            ck_assert_msg(n[x].rc == 0, "node %d: %s", x, n[x].err);
            ck_assert_int_eq(n[x].res.delivered, 80);
            ck_assert_int_eq(n[x].res.lent, n[0].res.lent); /* every node reports the total */
            for (int64_t i = 0; i < n[x].seen_n; i++)
                all[k++] = n[x].seen[i];
        }
        ck_assert_int_eq(k, 80);
        qsort(all, (size_t)k, sizeof *all, cmp_i64);
        for (int i = 0; i < 80; i++)
            ck_assert_int_eq(all[i], one[0].seen[i]);
        ck_assert_int_eq(n[0].res.lent > 0, n[0].res.bytes_shipped > 0);
        lent += n[0].res.lent;
        considered += n[0].res.lend_considered;
        free_nodes(n, 2);
    }
    if (getenv("DH_TEST_VERBOSE"))
        fprintf(stderr, "lent %lld of %lld considered\n", (long long)lent, (long long)considered);
    ck_assert_msg(lent > 0, "no loan in 3 runs (%lld considered)", (long long)considered);
    run_nodes(&c, 2, 1, -1, 0, n, prohibitive_network);
    dh__eng_test_lend_always(0);
    slow_node_ms[0] = 0;
    for (int x = 0; x < 2; x++) {
        ck_assert_msg(n[x].rc == 0, "node %d: %s", x, n[x].err);
        ck_assert_int_eq(n[x].res.lent, 0);
        ck_assert_int_eq(n[x].res.bytes_shipped, 0);
        ck_assert_int_eq(n[x].res.lend_gated, n[x].res.lend_considered);
    }
    ck_assert_int_gt(n[0].res.lend_considered, 0);
    free_nodes(n, 2);
    free_nodes(one, 1);
    dh_manifest_free(m);
}
END_TEST

static void node_1_has_another_seed(int node, dh_run_config *c)
{
    c->seed = 1 + (uint64_t)node;
}

/* The highest step node k's consumers were served, or -1. */
static int64_t last_step_seen(const hub_node *n)
{
    int64_t last = -1;
    for (int64_t i = 0; i < n->seen_n; i++)
        last = DH_MAX(last, n->seen[i] / 1000000);
    return last;
}

START_TEST(a_stop_ends_every_node_after_the_same_step)
{
    /* Node 1 is stopped at step 2's record while node 0's trainer already took step 3 (it
     * takes the next batch before it releases one). A stop applied as each node completed
     * the round served step 3 on node 0 and refused it on node 1 (under DDP node 0's trainer
     * then failed in its collective): now the nodes agree on the furthest step any rank
     * took, serve it everywhere and stop after it, with the same accounting. */
    dh_manifest *m = manifest_with(NULL);
    const char *pols[] = {"pool", "helix"}; /* helix: moves agreed at the exchange too */
    for (int p = 0; p < 2; p++) {
        dh_run_config c = config_of(m, pols[p], 2, 2, 4, 10);
        hub_node n[2];
        stop_race = 1;
        node_1_polls = 0;
        run_nodes(&c, 2, 1, -1, 0, n, node_1_is_stopped);
        stop_race = 0;
        for (int k = 0; k < 2; k++) {
            ck_assert_msg(n[k].rc == 0, "%s, node %d: %s", pols[p], k, n[k].err);
            ck_assert_msg(last_step_seen(&n[k]) == 3, "%s: node %d's trainer got steps up to "
                          "%lld", pols[p], k, (long long)last_step_seen(&n[k]));
            ck_assert_int_eq(n[k].res.steps, 4);
            ck_assert_int_eq(n[k].res.delivered + n[k].res.failed, n[k].res.samples);
            ck_assert_int_eq(n[k].res.samples, 16);
        }
        free_nodes(n, 2);
    }
    dh_manifest_free(m);
}
END_TEST

START_TEST(several_nodes_agree_on_stopping_and_on_the_job)
{
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config(m, "pool");
    c.steps = DH_STEPS_FOREVER;
    hub_node n[2];
    /* Only node 1 is asked to stop: both stop after the same step, with the same count. */
    run_nodes(&c, 2, 0, -1, 0, n, node_1_is_stopped);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(n[k].rc == 0, "node %d: %s", k, n[k].err);
        ck_assert_int_ge(n[k].res.steps, 3);
        ck_assert_int_eq(n[k].res.steps, n[0].res.steps);
        ck_assert_int_eq(n[k].res.delivered, n[k].res.steps * 4);
    }
    free_nodes(n, 2);
    /* A node whose trainers never attached says so to the others at the first round (it
     * read as "another job: the manifest differs" before). */
    c.steps = 4;
    served_as[0] = 1, served_as[1] = 2; /* agents' engines; node 1's ranks never attach */
    run_nodes(&c, 2, 0, -1, 0, n, NULL);
    served_as[0] = served_as[1] = 0;
    ck_assert_int_eq(n[0].rc, DH_EPEER);
    ck_assert_msg(strstr(n[0].err, "node 1 stopped before the run began: only 0 of 1 ranks "
                                   "attached in time"), "%s", n[0].err);
    ck_assert_int_eq(n[1].rc, DH_ETIMEDOUT);
    free_nodes(n, 2);
    /* A node started on another job (another seed) is refused by every node. */
    run_nodes(&c, 2, 0, -1, 0, n, node_1_has_another_seed);
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(n[k].rc, DH_EINVAL);
        ck_assert_msg(strstr(n[k].err, "node 1 was started on another job than node 0: --seed"),
                      "%s", n[k].err);
    }
    free_nodes(n, 2);
    dh_manifest_free(m);
}
END_TEST

static dh_spec *other_spec; /* node 1's, in node_1_has_another_spec */

static void node_1_has_another_spec(int node, dh_run_config *c)
{
    if (node == 1)
        c->spec = other_spec;
}

static void node_1_has_another_network(int node, dh_run_config *c)
{
    c->net_latency = node ? 1e-3 : 0;
}

static void node_1_has_another_order(int node, dh_run_config *c)
{
    c->order = node ? DH_ORDER_STRATIFIED : DH_ORDER_UNIFORM;
}

/* Defect 7 of issue 22: every setting that changes data or scheduling is part of the job the
 * nodes compare, and the refusal names it (another --spec was not refused: lent samples were
 * decoded under the other node's spec; other settings read "--memory-budget differs", and
 * serve against run too). */
START_TEST(nodes_of_another_job_are_refused_naming_the_setting)
{
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config(m, "helix");
    c.steps = 4;
    hub_node n[2];
    const char *js = "{\"image\": {\"resize\": {\"mode\": \"crop\", \"size\": 112}}}";
    char why[256] = "";
    ck_assert_msg(dh_spec_parse(js, strlen(js), &other_spec, why, sizeof why) == 0, "%s", why);
    struct {
        void (*tweak)(int, dh_run_config *);
        int served0, served1;
        const char *what;
    } cases[] = {
        {node_1_has_another_spec, 0, 0, "the preprocessing spec (--spec or --augment)"},
        {node_1_has_another_network, 0, 0, "the network model"},
        {node_1_has_another_order, 0, 0, "--order (uniform on node 0, stratified on the "
                                         "other)"},
        {NULL, 1, 0, "the command: one node serves trainers (datahelix serve), another runs "
                     "emulated ranks (datahelix run)"},
        /* agents: refused when they start, before they wait for trainers (user trial 2) */
        {node_1_has_another_spec, 1, 1, "the preprocessing spec (--spec or --augment)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        served_as[0] = cases[i].served0, served_as[1] = cases[i].served1;
        run_nodes(&c, 2, 0, -1, 0, n, cases[i].tweak);
        served_as[0] = served_as[1] = 0;
        for (int k = 0; k < 2; k++) {
            ck_assert_msg(n[k].rc == DH_EINVAL, "case %zu node %d: %d %s", i, k, n[k].rc,
                          n[k].err);
            char want[300];
            snprintf(want, sizeof want, "node 1 was started on another job than node 0: %s",
                     cases[i].what);
            ck_assert_msg(strstr(n[k].err, want), "case %zu node %d: %s", i, k, n[k].err);
            if (cases[i].served0 && cases[i].served1) /* from dh__engine_start */
                ck_assert_msg(strstr(n[k].err, "cannot start the engine: node 1"), "%s",
                              n[k].err);
        }
        free_nodes(n, 2);
    }
    dh_spec_free(other_spec);
    dh_manifest_free(m);
}
END_TEST

/* Defect 13 of issue 22: what another node sends is checked whole before it is read. A
 * greeting of another version, a step record of another step (both nodes stopped with exit 0
 * and no word), a TASK claiming more items than it carries (the lending node read past it and
 * crashed): each stops the run naming the node and the fault. */
START_TEST(a_node_that_sends_what_cannot_be_read_is_named)
{
    dh_manifest *m = manifest_with(NULL);
    dh_run_config c = config_of(m, "helix", 2, 2, 0, 6);
    hub_node n[2];
    struct {
        int what;
        const char *says;
    } cases[] = {
        {1, "node 1 speaks node protocol version 99, this node"},
        {2, "node 1 sent the record of step 7 in the exchange of step 1"},
        {3, "node 0 sent a task claiming 1000 items in"},
        {4, "node 1 sent a malformed step record (step 1, 1000000 failed samples"},
        {5, " / nan, load"}, /* a malformed step record: its truth is no number */
        {7, ", load nan)"},  /* ...its load of the next step */
        {6, "node 1 sent a malformed cutoff record (its ranks took step 1000 in a run of 6 steps)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        corrupt = cases[i].what;
        node_1_polls = 0; /* case 6: node 1 is stopped at step 2 */
        run_nodes(&c, 2, 0, -1, 0, n, cases[i].what == 6 ? node_1_is_stopped : NULL);
        corrupt = 0;
        int named = 0;
        for (int k = 0; k < 2; k++) {
            ck_assert_msg(n[k].rc != 0, "case %zu node %d ran", i, k);
            named |= strstr(n[k].err, cases[i].says) != NULL;
            ck_assert_int_eq(n[k].res.delivered + n[k].res.failed, n[k].res.samples);
        }
        ck_assert_msg(named, "case %zu: %s | %s", i, n[0].err, n[1].err);
        free_nodes(n, 2);
    }
    dh_manifest_free(m);
}
END_TEST

/* Nodes started with another --batch or --ranks are named with both values, also when their
 * records have the same size (a FINAL field made 8 and 6 samples' records alike). */
START_TEST(greetings_name_a_differing_batch_or_ranks)
{
    dh__wire_greeting g[2] = {{DH__WIRE_MAGIC, DH__WIRE_VERSION, 4096, 0, 2, 8},
                              {DH__WIRE_MAGIC, DH__WIRE_VERSION, 4096, 1, 2, 6}};
    char why[256];
    ck_assert_int_eq(dh__wire_check_greetings(g, 2, &g[0], why, sizeof why), DH_EINVAL);
    ck_assert_msg(strstr(why, "node 1 was started with --batch 6, this node with 8"), "%s", why);
    g[1] = (dh__wire_greeting){DH__WIRE_MAGIC, DH__WIRE_VERSION, 4096, 1, 4, 8};
    ck_assert_int_eq(dh__wire_check_greetings(g, 2, &g[0], why, sizeof why), DH_EINVAL);
    ck_assert_msg(strstr(why, "node 1 was started with --ranks 4, this node with 2"), "%s", why);
    g[1].ranks = 2;
    ck_assert_int_eq(dh__wire_check_greetings(g, 2, &g[0], why, sizeof why), 0);
}
END_TEST

START_TEST(run_needs_a_manifest)
{
    dh_run_config c;
    dh_run_config_default(&c);
    c.workload = "laion-images";
    dh_result res = DH_RESULT_INIT;
    char err[256];
    ck_assert_int_eq(dh_engine_run(&c, NULL, NULL, &res, err, sizeof err), DH_EINVAL);
    ck_assert(strstr(err, "manifest") != NULL);
}
END_TEST


int main(void)
{
    Suite *s = suite_create("engine");
    TCase *tc = tcase_create("engine");
    tcase_add_unchecked_fixture(tc, make_media, drop_media);
    tcase_set_timeout(tc, 120);
    ADD_LOOP_TEST(tc, batches_hold_exactly_what_the_decoders_produce, 0, 2);
    ADD_TEST(tc, failed_samples_are_delivered_reported_and_counted);
    ADD_TEST(tc, live_metrics_are_the_run_accounting);
    ADD_TEST(tc, metrics_endpoints_refuse_what_does_not_parse);
    ADD_TEST(tc, failed_items_are_zeroed_and_marked);
    ADD_TEST(tc, every_policy_completes_within_the_pool);
    ADD_TEST(tc, run_needs_a_manifest);
    ADD_TEST(tc, rebalancing_moves_decoded_samples_and_keeps_batches_valid);
    ADD_TEST(tc, rebalancing_is_gated_by_transfer_cost_and_off_for_noreb);
    ADD_TEST(tc, real_engine_refuses_several_nodes_without_an_exchange);
    ADD_TEST(tc, a_failing_sample_fails_in_every_epoch_it_is_scheduled);
    ADD_TEST(tc, threads_that_cannot_start_unwind_cleanly);
    ADD_TEST(tc, allocation_failures_stop_the_real_engine_cleanly);
    ADD_TEST(tc, a_waiting_request_survives_the_records_regrowing);
    ADD_TEST(tc, stop_wakes_a_blocked_consumer_and_streams_without_a_length);
    ADD_TEST(tc, should_stop_ends_an_endless_run_with_its_accounting);
    ADD_LOOP_TEST(tc, several_nodes_deliver_every_sample_once_byte_equal, 0, 2);
    ADD_TEST(tc, several_nodes_run_every_policy_with_failures_counted_once);
    ADD_TEST(tc, idle_nodes_prepare_late_samples_of_other_nodes);
    ADD_TEST(tc, a_node_that_dies_holding_a_loan_stops_its_owner);
    ADD_TEST(tc, several_nodes_move_prepared_samples_between_nodes);
    ADD_TEST(tc, several_nodes_of_several_ranks_move_by_groups_of_nodes);
    ADD_TEST(tc, moves_between_nodes_are_gated_by_the_network_or_refused_alike);
    ADD_TEST(tc, trainers_that_take_before_releasing_still_rebalance_within_their_node);
    ADD_TEST(tc, a_malformed_move_stops_the_run_with_its_reason);
    ADD_TEST(tc, a_dead_node_stops_every_node_with_its_name);
    ADD_TEST(tc, several_nodes_agree_on_stopping_and_on_the_job);
    ADD_TEST(tc, a_stop_ends_every_node_after_the_same_step);
    ADD_TEST(tc, nodes_of_another_job_are_refused_naming_the_setting);
    ADD_TEST(tc, a_stratified_order_on_several_nodes_delivers_what_one_node_does);
    ADD_TEST(tc, a_node_that_sends_what_cannot_be_read_is_named);
    ADD_TEST(tc, greetings_name_a_differing_batch_or_ranks);
    ADD_TEST(tc, gen_writes_real_media_and_a_measured_manifest); /* adds files: last */
    suite_add_tcase(s, tc);
    return tu_run(s);
}
