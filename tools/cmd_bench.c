/*
 * cmd_bench.c - `datahelix bench --mode sim`: every chosen workload under
 * every chosen policy in the simulator, a table like a paper's, and the
 * summary ratios of the docs/DESIGN.md contract (helix against local and pool).
 */
#include "cli.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: datahelix bench --mode sim|real [--workloads a,b|all] [--policies a,b] [--json F]\n"
    "                       [--data DIR] [--format files|wds] [--repeats N] [--run-seconds S]\n"
    "                       [options]\n"
    "\n"
    "sim: all figures simulated (ground truth from the workloads' cost models with noise);\n"
    "     defaults: all eleven workloads, R=8, W=32.\n"
    "real: the real engine on real media generated under --data DIR (default bench-data;\n"
    "     made with 'gen --scale mini' when missing: one epoch of min(steps, 12) global\n"
    "     batches, which longer runs go round again), R=4, W=2, G=16, at least 12 steps,\n"
    "     each run about 3 s, 3 repeats by default (see below);\n"
    "     CPU predictions are first calibrated on this machine (16 samples decoded; a given\n"
    "     --cpu-cost-scale is used instead, for runs that must share one GPU scale), and\n"
    "     each run is also simulated with that calibration to show the simulator's error.\n"
    "     Default workloads: kinetics-clips, webvid-caption, native-res-video,\n"
    "     anyres-images, speech-asr.\n"
    "Policies default to local,pool,helix (real: and torch, the PyTorch DataLoader itself:\n"
    "one process per rank, DataLoader + DistributedSampler, num_workers max(1, W/R),\n"
    "prefetch_factor 2, persistent workers, PyAV decoding the same frames and sizes, the same\n"
    "emulated compute; run by /usr/bin/python3 or $DH_PYTHON with Debian's python3-torch and\n"
    "python3-av, skipped with the reason when they are missing; its sim column is the\n"
    "simulator's local, our emulation of the DataLoader; memory not counted (0)).\n"
    "--format wds (real): the data as WebDataset shards (DIR/NAME-wds, made with 'gen\n"
    "--format wds', at least 2 shards per rank and DataLoader worker), read in place by our\n"
    "policies; the policies then default to local,pool,helix,wds, wds being the WebDataset\n"
    "way with PyTorch: an IterableDataset listing the shards, split by rank then by\n"
    "DataLoader worker, each tar streamed with Python's tarfile, a shuffle buffer of 1000,\n"
    "batches made in the workers, PyAV decoding the same frames and sizes\n"
    "(bench/torch_contender.py says exactly what it does).\n"
    "--augment: every policy's spec with the standard training augmentation (docs/SPEC.md);\n"
    "the torch and wds contenders do not augment, so real mode then leaves them out.\n"
    "--repeats N (real default 3, sim 1) runs every policy N times per workload, interleaved\n"
    "(A B C A B C ...),\n"
    "with one calibration per workload (sim: seeds S, S+1, ..., as the simulator repeats\n"
    "itself exactly); prints each policy's median and range of\n"
    "samples/s and says which differences are within that noise; the summary and the\n"
    "JSON's sim_predictions use each policy's median-throughput repeat (runs holds all).\n"
    "--run-seconds S (real, default 3; 0: exactly --steps): each workload's steps chosen so\n"
    "that a run lasts about S seconds (the simulator's prediction of helix after\n"
    "calibration; at least --steps, or 12), so fast and slow workloads get equally long,\n"
    "equally stable runs.\n"
    "--json F also writes F's report beside it (out/b.json: out/b.html; datahelix report).\n"
    "The table: miss% (batches not ready when their rank asked), p95 ms (input wait p95),\n"
    "samples/s, effic. (efficiency: bound_s / makespan), placem. (bound_s / placement_s: what\n"
    "placement loses; above 1 the CPU bound is the limit), ordered (efficiency_ordered: against\n"
    "the bound with the pipeline's fill and drain); the summary adds the step stalls.\n";

/* Real mode: the workload's data under data/NAME (wds: data/NAME-wds, as shards),
 * generated if missing, and calibrated. */
static int prepare_real(const char *data, const char *name, const dh_run_config *cfg, int wds,
                        dh_manifest **m, double *scale)
{
    char dir[4096], path[4200], err[512] = "";
    snprintf(dir, sizeof dir, "%s/%s%s", data, name, wds ? "-wds" : "");
    snprintf(path, sizeof path, "%s/manifest.jsonl", dir);
    dh_load_opts lo;
    dh_load_opts_default(&lo);
    lo.diag = cli_print_diag;
    if (access(path, R_OK) != 0 || dh_manifest_load(path, &lo, m, NULL) != 0) {
        /* One epoch of at most 12 steps: longer runs go round it again (as training does
         * epochs), so a long bench does not spend its time encoding media. */
        int64_t need = (cfg->steps < 12 ? cfg->steps : 12) * cfg->global_batch;
        /* shards: two per rank and DataLoader worker at least, so that the WebDataset
         * pipeline's split by rank and worker gives every worker data */
        int64_t parts = 2 * (int64_t)cfg->ranks * (cfg->workers / cfg->ranks > 1
                                                       ? cfg->workers / cfg->ranks : 1);
        int64_t per_shard = wds ? (need / parts > 1 ? need / parts : 1) : 0;
        printf("generating %lld samples of %s under %s%s ...\n", (long long)need, name, dir,
               wds ? " as shards" : "");
        fflush(stdout);
        int rc = dh_workload_write_shards(name, dir, need, cfg->seed, "mini", per_shard, NULL,
                                          NULL, NULL, err, sizeof err);
        if (rc || (rc = dh_manifest_load(path, &lo, m, NULL))) {
            cli_err("bench: preparing %s: %s", name, err[0] ? err : dh_strerror(rc));
            return 1;
        }
    }
    if (cfg->cpu_cost_scale > 0) { /* given: runs that must share one GPU scale (rho) */
        *scale = cfg->cpu_cost_scale;
        printf("%s: CPU cost on this machine = %.2f x the starting model (given)\n", name, *scale);
        return 0;
    }
    dh_spec *spec;
    if (dh_spec_builtin(name, &spec))
        return 1;
    int rc = dh_measure_cpu_scale(*m, spec, 16, scale, err, sizeof err);
    dh_spec_free(spec);
    if (rc)
        cli_err("bench: calibrating %s: %s", name, err);
    else
        printf("%s: CPU cost on this machine = %.2f x the starting model (16 samples)\n", name,
               *scale);
    return rc ? 1 : 0;
}

/* Steps for runs of about `seconds` on workload wl: the simulator's helix throughput with
 * this machine's calibration; at least cfg's steps. */
static int64_t steps_for(const dh_run_config *cfg, const char *wl, const dh_manifest *m,
                         double scale, double seconds)
{
    dh_run_config c = *cfg;
    c.workload = wl;
    c.policy = "helix";
    c.manifest = m;
    c.cpu_cost_scale = scale;
    c.should_stop = NULL;
    dh_result r = DH_RESULT_INIT;
    if (dh_sim_run(&c, &r, NULL, 0) != 0 || !(r.throughput_sps > 0))
        return cfg->steps;
    double steps = ceil(seconds * r.throughput_sps / (double)cfg->global_batch);
    int64_t n = steps > (double)cfg->steps ? (int64_t)fmin(steps, 1e6) : cfg->steps;
    printf("%s: %lld steps per run (about %.3g s each, simulated)\n", wl, (long long)n, seconds);
    return n;
}

#define MAX_ITEMS 32

/* Splits a comma list into items (in place); "all" expands to the defaults. */
static int split(char *list, const char **items, const char *const *all)
{
    int n = 0;
    if (!strcmp(list, "all")) {
        for (; all[n] && n < MAX_ITEMS; n++)
            items[n] = all[n];
        return n;
    }
    for (char *tok = strtok(list, ","); tok && n < MAX_ITEMS; tok = strtok(NULL, ","))
        items[n++] = tok;
    return n;
}

static int find(const char **items, int n, const char *name)
{
    for (int k = 0; k < n; k++)
        if (!strcmp(items[k], name))
            return k;
    return -1;
}

/* 1 - ours / theirs as text ("%+.1f%%") and JSON; relative to a baseline that never
 * waited it is undefined: "n/a", null. */
static void reduction(double ours, double theirs, char text[32], char json[32])
{
    if (theirs > 0) {
        snprintf(text, 32, "%+.1f%%", 100 * (1 - ours / theirs));
        snprintf(json, 32, "%.6f", 1 - ours / theirs);
    } else {
        snprintf(text, 32, "n/a");
        snprintf(json, 32, "null");
    }
}

/* The docs/DESIGN.md summary: helix against each baseline present. */
static void summary(FILE *jf, const dh_result *res, int nw, const char **pol,
                    int np)
{
    int h = find(pol, np, "helix");
    double min_eff = INFINITY;
    printf("\nsummary (helix vs baseline):\n");
    for (int w = 0; h >= 0 && w < nw; w++)
        min_eff = fmin(min_eff, res[w * np + h].efficiency);
    if (jf)
        fprintf(jf, "\"summary\":{\"min_efficiency\":%.6f", h >= 0 ? min_eff : 0.0);
    const char *base[] = {"local", "pool", "torch", "wds"};
    for (int k = 0; k < 4; k++) {
        int b = find(pol, np, base[k]);
        if (h < 0 || b < 0)
            continue;
        double lt = 0, lh = 0, mh = 0, mb = 0, ph = 0, pb = 0, sh = 0, sb = 0, lsh = 0, lsb = 0;
        for (int w = 0; w < nw; w++) {
            const dh_result *x = &res[w * np + h], *y = &res[w * np + b];
            lt += log(x->throughput_sps / y->throughput_sps);
            lh += log(((double)y->samples / y->bound_s) / y->throughput_sps);
            mh += x->miss_rate, mb += y->miss_rate;
            ph += x->wait_p95_ms, pb += y->wait_p95_ms;
            sh += x->stall_p95_ms, sb += y->stall_p95_ms;
            lsh += x->late_step_frac, lsb += y->late_step_frac;
        }
        double tput = exp(lt / nw), head = exp(lh / nw);
        char miss[32], p95[32], jmiss[32], jp95[32], stall[32], jstall[32], late[32], jlate[32];
        reduction(mh, mb, miss, jmiss);
        reduction(ph, pb, p95, jp95);
        reduction(sh, sb, stall, jstall);
        reduction(lsh, lsb, late, jlate);
        printf("  vs %-5s throughput x%.2f (geomean; headroom x%.2f)  miss reduction %s  "
               "p95 reduction %s\n           step stall p95 reduction %s  late steps "
               "reduction %s\n",
               base[k], tput, head, miss, p95, stall, late);
        if (jf)
            fprintf(jf,
                    ",\"tput_geomean_vs_%s\":%.6f,\"miss_reduction_vs_%s\":%s,"
                    "\"p95_reduction_vs_%s\":%s,\"headroom_vs_%s\":%.6f,"
                    "\"stall_p95_reduction_vs_%s\":%s,\"late_step_reduction_vs_%s\":%s",
                    base[k], tput, base[k], jmiss, base[k], jp95, base[k], head, base[k],
                    jstall, base[k], jlate);
    }
    if (h >= 0)
        printf("  helix min efficiency %.3f\n", min_eff);
    if (jf)
        fprintf(jf, "}");
}

typedef struct {
    dh_run_config cfg;
    dh_stress stress;
    char wl_buf[1024], pol_buf[256];
    const char *mode, *json, *data;
    int repeats, pol_given, repeats_given, seconds_given, wds;
    double run_seconds;
} bench_opts;

/* Parses bench's options; 0, -1 after --help, or CLI_USAGE. */
static int parse_bench(int argc, char **argv, bench_opts *o)
{
    dh_run_config_default(&o->cfg);
    snprintf(o->pol_buf, sizeof o->pol_buf, "local,pool,helix");
    o->data = "bench-data";
    o->repeats = 1;
    o->cfg.ranks = o->cfg.workers = 0; /* defaults depend on the mode */
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int r = cli_run_option(argc, argv, &i, &o->cfg, &o->stress);
        if (r < 0)
            return CLI_USAGE;
        if (r > 0)
            continue;
        if (!strcmp(opt, "--help") || !strcmp(opt, "-h")) {
            fputs(help, stdout);
            fputs(cli_run_help, stdout);
            return -1;
        }
        if (!strcmp(opt, "--run-seconds")) {
            if (cli_num(opt, val, 0, 3600, &o->run_seconds))
                return CLI_USAGE;
            o->seconds_given = 1;
            i++;
            continue;
        }
        if (!strcmp(opt, "--repeats")) {
            int64_t n;
            if (cli_int(opt, val, 1, 100, &n))
                return CLI_USAGE;
            o->repeats = (int)n;
            o->repeats_given = 1;
            i++;
            continue;
        }
        if (!strcmp(opt, "--format")) {
            if (!val || (strcmp(val, "files") && strcmp(val, "wds"))) {
                cli_err("bench: --format expects files or wds");
                return CLI_USAGE;
            }
            o->wds = !strcmp(val, "wds");
            i++;
            continue;
        }
        if (!val || (strcmp(opt, "--mode") && strcmp(opt, "--workloads") &&
                     strcmp(opt, "--policies") && strcmp(opt, "--json") && strcmp(opt, "--data"))) {
            return cli_unexpected("bench", opt, (const char *const[]){help, NULL});
        }
        i++;
        if (!strcmp(opt, "--mode"))
            o->mode = val;
        else if (!strcmp(opt, "--json"))
            o->json = val;
        else if (!strcmp(opt, "--data"))
            o->data = val;
        else if (!strcmp(opt, "--workloads"))
            snprintf(o->wl_buf, sizeof o->wl_buf, "%s", val);
        else
            snprintf(o->pol_buf, sizeof o->pol_buf, "%s", val), o->pol_given = 1;
    }
    if (!o->mode || (strcmp(o->mode, "sim") && strcmp(o->mode, "real"))) {
        cli_err("bench needs --mode sim or --mode real");
        return CLI_USAGE;
    }
    return 0;
}

/* Runs one (workload, policy) pair and prints its row; 0 or 1 (failed). */
static int bench_one(const dh_run_config *c, int real, dh_result *r, dh_result *simr, FILE *jf,
                     int first)
{
    char err[512] = "";
    dh_result_init(r);
    int torch = !strcmp(c->policy, "torch") || !strcmp(c->policy, "wds"), rc;
    if (torch && bench_torch(c, r))
        return 1;
    char what[160];
    snprintf(what, sizeof what, "bench %s / %s", c->workload, c->policy);
    cli_progress_what shown = {what, "steps"};
    dh_run_config rc_cfg = *c; /* a real run shows its steps as it goes */
    rc_cfg.progress = cli_progress;
    rc_cfg.progress_user = &shown;
    rc = torch  ? 0
         : real ? dh_engine_run(&rc_cfg, NULL, NULL, r, err, sizeof err)
                : dh_sim_run(c, r, err, sizeof err);
    if (!rc && real) { /* the simulator's prediction of the same run (torch: of local, our
                        * emulation of the DataLoader) */
        dh_run_config sc = *c;
        sc.policy = torch ? "local" : c->policy;
        dh_result_init(simr);
        rc = dh_sim_run(&sc, simr, err, sizeof err);
    }
    if (rc) {
        cli_err("bench %s / %s: %s", c->workload, c->policy, err[0] ? err : dh_strerror(rc));
        return 1;
    }
    printf("%-18s %-16s %8.1f %10.2f %12.1f %8.3f %8.3f %8.3f", c->workload, c->policy,
           100 * r->miss_rate, r->wait_p95_ms, r->throughput_sps, r->efficiency,
           r->placement_s > 0 ? r->bound_s / r->placement_s : 0, r->efficiency_ordered);
    if (real) /* torch: the simulator's local, our emulation of the DataLoader, against it */
        printf("  %7.1f%%  %10.1f (%+.1f%%%s)", 100 * r->framework_overhead,
               simr->throughput_sps, 100 * (simr->throughput_sps / r->throughput_sps - 1),
               torch ? ", simulated local" : "");
    printf("\n");
    fflush(stdout);
    if (jf) {
        fprintf(jf, "%s\n", first ? "" : ",");
        dh_result_write_json(r, jf);
    }
    return 0;
}

static int cmp_tput(const void *a, const void *b)
{
    double x = (*(const dh_result *const *)a)->throughput_sps;
    double y = (*(const dh_result *const *)b)->throughput_sps;
    return (x > y) - (x < y);
}

/*
 * One workload's repeats (rows[rep * np + p]): each policy's median-throughput repeat into
 * med[p] (and its simulation into medsim[p]); with several repeats, prints the median and
 * range per policy and whether each policy's difference from the best is within noise
 * (their ranges overlap).
 */
static void pick_medians(const dh_result *rows, const dh_result *sims, int nrep, int np,
                         const char **pol, dh_result *med, dh_result *medsim)
{
    double lo[MAX_ITEMS], hi[MAX_ITEMS], mid[MAX_ITEMS];
    int best = 0;
    for (int p = 0; p < np; p++) {
        const dh_result *sorted[100];
        for (int rep = 0; rep < nrep; rep++)
            sorted[rep] = &rows[rep * np + p];
        qsort(sorted, (size_t)nrep, sizeof *sorted, cmp_tput);
        const dh_result *m = sorted[(nrep - 1) / 2];
        med[p] = *m;
        medsim[p] = sims[m - rows];
        lo[p] = sorted[0]->throughput_sps;
        hi[p] = sorted[nrep - 1]->throughput_sps;
        mid[p] = m->throughput_sps;
        if (mid[p] > mid[best])
            best = p;
    }
    if (nrep < 2)
        return;
    for (int p = 0; p < np; p++) {
        double spread = mid[p] > 0 ? 100 * (hi[p] - lo[p]) / mid[p] : 0;
        char verdict[96];
        if (p == best)
            snprintf(verdict, sizeof verdict, "  best");
        else if (lo[best] <= hi[p])
            snprintf(verdict, sizeof verdict, "  within noise of the best (ranges overlap)");
        else
            snprintf(verdict, sizeof verdict, "  %.1f%% below the best, beyond the noise",
                     100 * (1 - mid[p] / mid[best]));
        printf("  %-16s median %10.1f samples/s  range %.1f-%.1f (%.1f%% of the median)%s\n",
               pol[p], mid[p], lo[p], hi[p], spread, verdict);
    }
}

/* The JSON's tail: the simulator's predictions (real mode), the summary. */
static int bench_finish(FILE *jf, int real, int failed, const dh_result *res,
                        const dh_result *simres, int nw, const char **pol, int np)
{
    if (jf)
        fprintf(jf, "\n],");
    if (jf && real && !failed) { /* the simulator's predictions of the same runs */
        fprintf(jf, "\"sim_predictions\":[");
        for (int k = 0; k < nw * np; k++) {
            fprintf(jf, "%s\n", k ? "," : "");
            dh_result_write_json(&simres[k], jf);
        }
        fprintf(jf, "\n],");
    }
    if (!failed)
        summary(jf, res, nw, pol, np);
    if (jf)
        fprintf(jf, "}\n");
    return failed;
}

int cli_bench(int argc, char **argv)
{
    bench_opts o = {0};
    int rc = parse_bench(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    dh_run_config cfg = o.cfg;
    int real = !strcmp(o.mode, "real");
    cfg.ranks = cfg.ranks ? cfg.ranks : real ? 4 : 8;
    cfg.workers = cfg.workers ? cfg.workers : real ? 2 : 32;
    if (real) { /* verdicts that hold: 3 interleaved repeats of runs of about 3 s */
        cfg.global_batch = cfg.global_batch ? cfg.global_batch : 16;
        cfg.steps = cfg.steps ? cfg.steps : 12;
        o.repeats = o.repeats_given ? o.repeats : 3;
        o.run_seconds = o.seconds_given ? o.run_seconds : 3;
    }
    if (!o.wl_buf[0])
        snprintf(o.wl_buf, sizeof o.wl_buf, "%s",
                 real ? "kinetics-clips,webvid-caption,native-res-video,anyres-images,speech-asr"
                      : "all");
    const char *wl[MAX_ITEMS], *pol[MAX_ITEMS];
    static const char *const default_pol[] = {"local", "pool", "helix", NULL};
    if (real && !o.pol_given && !o.cfg.augment) /* the contenders decode plainly: with
                                                 * --augment they would not be like for like */
        snprintf(o.pol_buf, sizeof o.pol_buf, "local,pool,helix,%s", o.wds ? "wds" : "torch");
    int nw = split(o.wl_buf, wl, dh_workload_names()), np = split(o.pol_buf, pol, default_pol);
    if (o.wds && !real) {
        cli_err("bench: --format wds is for --mode real (the simulator reads no media)");
        return CLI_USAGE;
    }
    if (find(pol, np, "wds") >= 0 && !o.wds) {
        cli_err("bench: the wds contender reads WebDataset shards: add --format wds");
        return CLI_USAGE;
    }
    static const char *const contenders[] = {"torch", "wds"};
    for (int k = 0; k < 2; k++) {
        int t = find(pol, np, contenders[k]);
        if (t >= 0 && !real) {
            cli_err("bench: the %s contender runs real decoding; use it with --mode real",
                    contenders[k]);
            return CLI_USAGE;
        }
        if (t >= 0 && o.cfg.augment) {
            cli_err("bench: the %s contender decodes without augmentation: against --augment "
                    "it would not be like for like (leave it out, or --augment)", contenders[k]);
            return CLI_USAGE;
        }
        char why[512];
        if (t >= 0 && !bench_torch_available(why, sizeof why)) { /* the others still run */
            printf("%s contender skipped: %s\n", contenders[k], why);
            memmove(&pol[t], &pol[t + 1], (size_t)(np - t - 1) * sizeof *pol);
            np--;
        }
    }
    int nrep = o.repeats;
    /* every repeat's results: all[((w * nrep) + rep) * np + p]; res/simres: the median */
    dh_result *all = calloc((size_t)(nw * np * nrep + 1), sizeof *all);
    dh_result *allsim = calloc((size_t)(nw * np * nrep + 1), sizeof *allsim);
    dh_result *res = calloc((size_t)(nw * np + 1), sizeof *res);
    dh_result *simres = calloc((size_t)(nw * np + 1), sizeof *simres);
    if (!all || !allsim) {
        free(res);
        free(simres);
        res = simres = NULL; /* reported as out of memory below */
    }
    cli_out out;
    if (!res || !simres || cli_out_open(&out, o.json)) {
        if (!res || !simres)
            cli_err("bench: out of memory");
        free(res);
        free(simres);
        return 1;
    }
    FILE *jf = out.f;
    cli_catch_interrupts();
    cfg.should_stop = cli_should_stop;
    printf("%-18s %-16s %8s %10s %12s %8s %8s %8s%s\n", "workload", "policy", "miss%", "p95 ms",
           "samples/s", "effic.", "placem.", "ordered",
           real ? "  overhead  sim samples/s (error)" : "");
    if (jf)
        fprintf(jf, "{\"runs\":[");
    int failed = 0;
    for (int w = 0; w < nw && !cli_interrupted(); w++) {
        dh_manifest *m = NULL;
        double scale = 0;
        if (real && prepare_real(o.data, wl[w], &cfg, o.wds, &m, &scale)) {
            failed = 1;
            continue;
        }
        int wfailed = 0;
        int64_t steps = real && o.run_seconds > 0 ? steps_for(&cfg, wl[w], m, scale, o.run_seconds)
                                                  : cfg.steps;
        for (int rep = 0; rep < nrep && !cli_interrupted(); rep++)
            for (int p = 0; p < np && !cli_interrupted(); p++) {
                dh_run_config c = cfg;
                c.workload = wl[w];
                c.policy = pol[p];
                c.manifest = m;
                c.cpu_cost_scale = scale; /* one calibration per workload, for every run */
                c.steps = steps;
                if (!real) /* the simulator repeats itself exactly: vary the seed instead */
                    c.seed = cfg.seed + (uint64_t)rep;
                int k = (w * nrep + rep) * np + p;
                wfailed |= bench_one(&c, real, &all[k], &allsim[k], jf, !(w + rep + p));
            }
        failed |= wfailed;
        if (!wfailed && !cli_interrupted())
            pick_medians(all + w * nrep * np, allsim + w * nrep * np, nrep, np, pol,
                         res + w * np, simres + w * np);
        dh_manifest_free(m);
    }
    if (cli_interrupted()) { /* the rows printed so far stand; no partial JSON is left */
        fprintf(stderr, "\rdatahelix: bench interrupted: the table covers the runs above; "
                "--json not written\n");
        cli_out_abort(&out);
        free(all);
        free(allsim);
        free(res);
        free(simres);
        return cli_interrupted();
    }
    failed = bench_finish(jf, real, failed, res, simres, nw, pol, np);
    failed |= cli_out_commit(&out);
    if (!failed && o.json) /* the same results drawn, next to them */
        failed |= cli_report_beside(o.json, NULL);
    free(all);
    free(allsim);
    free(res);
    free(simres);
    return failed ? 1 : 0;
}
