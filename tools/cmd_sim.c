/*
 * cmd_sim.c - `datahelix sim`, `datahelix run` and `datahelix serve`: one
 * policy on a workload or manifest, in the discrete-event simulator (sim),
 * on the real engine decoding real media for emulated ranks (run), or on the
 * real engine serving trainer processes that attach over a Unix socket
 * (serve). All take the same run options and print the same
 * docs/DESIGN.md metrics; --json writes the result object of the contract.
 * They share this file because they differ only in the engine they call.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* Each command's usage line first in its own --help (serve's began "usage: datahelix sim"). */
static const char *const usage_of[] = {
    "datahelix sim (--workload NAME | --manifest M) --policy P [options]\n",
    "datahelix run --manifest M [--workload NAME] --policy P [options]\n",
    "datahelix serve --manifest M [--workload NAME] --ranks R --workers W --batch G\n"
    "                       [--socket NAME] [--epochs N | --steps N] [options]\n"
    "                       [--stream NAME --manifest M [options]]...\n"};

static const char help[] =
    "\n"
    "sim: simulated figures; durations come from ground truth (the manifest's sim fields,\n"
    "or the workload's cost models times seeded noise), not from this machine.\n"
    "run: the real engine decodes the manifest's media on this machine with W threads for\n"
    "R emulated ranks, which sleep each batch's ground-truth GPU time (as an accelerator\n"
    "would, using no CPU). Failed samples are reported and counted, never dropped.\n"
    "Several nodes: mpirun -np N datahelix run|serve ... starts one agent per node (each runs\n"
    "R/N ranks and W/N workers, every node the same command; node 0 prints the result; helix\n"
    "lends idle CPU between nodes, gated by --net-latency-us / --net-gbps). A node silent for\n"
    "$DH_NODE_TIMEOUT s (10) is dead; mpirun --enable-recovery lets the others report it.\n"
    "\n"
    "  --workload NAME         a built-in workload (datahelix sim --list)\n"
    "  --manifest M            run these samples instead (with --workload: its spec and GPU model)\n"
    "  --policy P              local | pool | helix | helix-nobalance | helix-fifo | helix-noreb\n"
    "                          (default helix)\n"
    "  --spec F                preprocessing spec (default: the workload's)\n"
    "  --json F                write the result object\n"
    "  --trace F               write a Chrome trace (open in Perfetto)\n"
    "  --calibrate N           decode the manifest's first N samples first and scale the CPU\n"
    "                          model to this machine (sets --cpu-cost-scale)\n"
    "  --list                  list workloads and policies\n"
    "  --metrics [ADDR:]PORT   run and serve: live figures for Prometheus at\n"
    "                          http://ADDR:PORT/metrics (ADDR default 127.0.0.1; 0.0.0.0: every\n"
    "                          interface; under mpirun node K listens on PORT + K;\n"
    "                          docs/METRICS.md); the endpoint stays up until the command ends\n"
    "\n"
    "serve: the per-node agent. It listens on --socket (default @datahelix-UID-JOB, an abstract\n"
    "socket named after $DH_JOB, or \"default\"), waits for --ranks trainer processes to attach,\n"
    "then decodes into shared memory they map (no tensor byte is copied). Ctrl-C stops it.\n"
    "  --socket NAME           \"@name\" (abstract, nothing on disk) or a filesystem path (0600);\n"
    "                          under mpirun, %n in NAME becomes the node's number (agents of\n"
    "                          several nodes on one host need distinct names)\n"
    "  --max-leases N          batches a rank may hold at once (default 4)\n"
    "  --attach-timeout S      seconds to wait for every rank to attach (default 300); a\n"
    "                          trainer's Loader waits as long as the agent does\n"
    "  --on-rank-exit stop|wait  a rank that dies or leaves early: stop the run (default), or\n"
    "                          tell the others and wait for the job's ranks to restart (an\n"
    "                          elastic launcher: torchrun --max_restarts N), which go on from\n"
    "                          a state they present, else from the last step all completed\n"
    "  --stream NAME ...       serve another stream from the same agent and socket, say val:\n"
    "                          the options after it (up to the next --stream) are that\n"
    "                          stream's: --manifest (required), --spec, --workload, --batch,\n"
    "                          --seed, --order, --no-shuffle, --keep-last, --policy,\n"
    "                          --memory-budget, --json, --trace, --steps/--epochs (default:\n"
    "                          endless, one pass per loop of its Loader); the rest is taken\n"
    "                          from the options before the first --stream (that stream is\n"
    "                          \"train\"). Trainers pick one with Loader(stream=\"val\"). The\n"
    "                          streams share the --workers (a stream whose rank waits for a\n"
    "                          batch goes first, then least slack) and, given before any\n"
    "                          --stream, --memory-budget (split in proportion to each one's\n"
    "                          default)\n";

static void list(FILE *out)
{
    fprintf(out, "workloads:");
    for (const char *const *n = dh_workload_names(); *n; n++)
        fprintf(out, " %s", *n);
    fprintf(out, "\npolicies:");
    for (const char *const *n = dh_policy_names(); *n; n++)
        fprintf(out, " %s", *n);
    fprintf(out, "\n");
}

typedef struct {
    const char *manifest, *spec, *json;
    const char *metrics; /* --metrics ADDR:PORT */
    int64_t calibrate; /* samples to decode for --calibrate; 0: none */
    dh_serve_opts serve;
    dh_limits limits;  /* the manifest's (as index and inspect take them) */
    int ranks_given;   /* --ranks was given (a stream's: before its --stream) */
} sim_files;

enum { MODE_SIM, MODE_RUN, MODE_SERVE };
static const char *const mode_name[] = {"sim", "run", "serve"};

/* serve's own options; 1 consumed, 0 not one, -1 bad value. */
static int serve_option(int argc, char **argv, int *i, sim_files *f)
{
    const char *o = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    int64_t x;
    if (!strcmp(o, "--socket")) {
        if (!val || !val[0]) {
            cli_err("--socket needs a name");
            return -1;
        }
        f->serve.socket = val;
    } else if (!strcmp(o, "--max-leases")) {
        if (cli_int(o, val, 1, 64, &x))
            return -1;
        f->serve.max_leases = (int)x;
    } else if (!strcmp(o, "--on-rank-exit")) {
        if (!val || (strcmp(val, "stop") && strcmp(val, "wait"))) {
            cli_err("--on-rank-exit: expected stop or wait, not \"%s\"", val ? val : "");
            return -1;
        }
        f->serve.on_rank_exit = strcmp(val, "wait") ? DH_ON_RANK_EXIT_STOP : DH_ON_RANK_EXIT_WAIT;
    } else if (!strcmp(o, "--attach-timeout")) {
        if (cli_int(o, val, 1, 86400, &x))
            return -1;
        f->serve.attach_timeout_ms = (int)(x * 1000);
    } else {
        return 0;
    }
    (*i)++;
    return 1;
}

/* 1 when `name` is a built-in workload. */
static int known_workload(const char *name)
{
    for (const char *const *n = dh_workload_names(); *n; n++)
        if (!strcmp(*n, name))
            return 1;
    return 0;
}

static int parse(int argc, char **argv, dh_run_config *cfg, dh_stress *stress, sim_files *f,
                 const char *cmd)
{
    int steps_given = 0, epochs_given = 0;
    for (int i = 1; i < argc; i++) {
        steps_given |= !strcmp(argv[i], "--steps");
        epochs_given |= !strcmp(argv[i], "--epochs");
        f->ranks_given |= !strcmp(argv[i], "--ranks");
        const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int r = cli_run_option(argc, argv, &i, cfg, stress);
        if (r == 0)
            r = cli_limit_option(argc, argv, &i, &f->limits);
        if (r < 0)
            return CLI_USAGE;
        if (r > 0)
            continue;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            for (int m = 0, own = !strcmp(cmd, "run") ? 1 : !strcmp(cmd, "serve") ? 2 : 0; m < 3;
                 m++) /* its own first, then the two that share its options */
                printf("%s%s", m ? "       " : "usage: ", usage_of[m ? (own + m) % 3 : own]);
            fputs(help, stdout);
            fputs(cli_run_help, stdout);
            fputs(cli_limits_help, stdout);
            return -1;
        }
        if (!strcmp(o, "--list")) {
            list(stdout);
            return -1;
        }
        if (!strcmp(o, "--calibrate")) {
            if (cli_int(o, val, 1, 100000, &f->calibrate))
                return CLI_USAGE;
            i++;
            continue;
        }
        if ((r = serve_option(argc, argv, &i, f)) != 0) {
            if (r < 0)
                return CLI_USAGE;
            continue;
        }
        const char **slot = !strcmp(o, "--workload") ? &cfg->workload
                            : !strcmp(o, "--manifest") ? &f->manifest
                            : !strcmp(o, "--policy")   ? &cfg->policy
                            : !strcmp(o, "--spec")     ? &f->spec
                            : !strcmp(o, "--json")     ? &f->json
                            : !strcmp(o, "--trace")    ? &cfg->trace_path
                            : !strcmp(o, "--metrics")  ? &f->metrics
                                                       : NULL;
        if (!slot) {
            return cli_unexpected(cmd, o, (const char *const[]){help, cli_run_help,
                                                                 cli_limits_help, NULL});
        }
        if (!val) {
            cli_err("%s needs a value", o);
            return CLI_USAGE;
        }
        *slot = val;
        i++;
    }
    if (f->metrics && !strcmp(cmd, "sim")) {
        cli_err("sim: --metrics serves a real engine's live figures (run or serve); the "
                "simulator's are in its result (--json)");
        return CLI_USAGE;
    }
    if (!f->manifest && strcmp(cmd, "sim")) {
        cli_err("%s needs --manifest M of real media (datahelix index DIR -o M makes one)", cmd);
        return CLI_USAGE;
    }
    if (!cfg->workload && !f->manifest) {
        cli_err("sim needs --workload NAME or --manifest M (see datahelix sim --help)");
        return CLI_USAGE;
    }
    if (steps_given && epochs_given && cfg->steps != DH_STEPS_FOREVER) {
        /* one length: --steps won silently (--steps 0, endless, is left as it was) */
        cli_err("%s: give --steps N or --epochs N, not both", cmd);
        return CLI_USAGE;
    }
    if (cfg->workload && !known_workload(cfg->workload)) {
        cli_err("%s: unknown workload \"%s\"; built-in:", cmd, cfg->workload);
        list(stderr);
        return CLI_USAGE;
    }
    if (cfg->global_batch && cfg->global_batch < cfg->ranks) {
        cli_err("%s: --batch %lld is below --ranks %d%s: every rank needs at least one sample a "
                "step", cmd, (long long)cfg->global_batch, cfg->ranks,
                f->ranks_given ? "" : " (the default; give --ranks R, the job's trainer processes)");
        return CLI_USAGE;
    }
    return 0;
}

void cli_print_result(const dh_result *r)
{
    char nodes[32] = "";
    if (r->nodes > 1)
        snprintf(nodes, sizeof nodes, " on %d nodes", r->nodes);
    int strat = !strcmp(r->order, "stratified"); /* the default order is not said */
    printf("%s / %s (%s): R=%d W=%d%s, %lld step%s, %lld samples%s\n", r->workload, r->policy,
           strcmp(r->engine, "real") ? "sim: simulated figures" : "real: measured on this machine",
           r->ranks, r->workers, nodes, (long long)r->steps, r->steps == 1 ? "" : "s",
           (long long)r->samples, strat ? ", stratified order" : "");
    /* a run that took no time (a text-only manifest in the simulator: its GPU time is scaled
     * to CPU time, and text costs none) has no efficiency to read: the JSON keeps 0 */
    char eff[32] = "n/a (nothing to compute)", eff_o[32] = "n/a";
    if (r->makespan_s > 0) {
        snprintf(eff, sizeof eff, "%.3f", r->efficiency);
        snprintf(eff_o, sizeof eff_o, "%.3f", r->efficiency_ordered);
    }
    printf("  makespan %.3f s  throughput %.1f samples/s  bound %.3f s (gpu %.3f, cpu %.3f)  "
           "efficiency %s\n",
           r->makespan_s, r->throughput_sps, r->bound_s, r->bound_gpu_s, r->bound_cpu_s, eff);
    if (r->makespan_s <= 0 && r->samples > 0 && !strcmp(r->engine, "sim"))
        printf("  (the simulator scales GPU time to the samples' CPU time, rho in "
               "docs/WORKLOADS.md; these samples cost no CPU, so nothing takes time: "
               "`run` or `serve` measures them)\n");
    if (r->bound_ordered_s > 0)
        printf("  ordered bound (the fill and the drain, this placement) %.3f s  "
               "efficiency_ordered %s  (the most efficiency can read with it: %.3f)\n",
               r->bound_ordered_s, eff_o, r->bound_s / r->bound_ordered_s);
    if (!strcmp(r->engine, "real")) /* the bound above is from measured costs */
        printf("  bound from measured costs; from the cost models instead: %.3f s (model "
               "efficiency %.3f)\n", r->model_bound_s,
               r->makespan_s > 0 ? r->model_bound_s / r->makespan_s : 0);
    /* bound/placement is what placement loses; above 1 the CPU bound is above every step's
     * slowest batch, and placement loses nothing */
    double bp = r->placement_s > 0 ? r->bound_s / r->placement_s : 0;
    printf("  placement %.3f s: bound/placement %.3f (%s), placement/makespan %.3f "
           "(input wait)\n",
           r->placement_s, bp, bp > 1 ? "above 1: the CPU bound is the limit, not placement"
                                      : "placement",
           r->makespan_s > 0 ? r->placement_s / r->makespan_s : 0);
    printf("  deadline misses %.1f%%  input wait ms: mean %.2f p50 %.2f p95 %.2f p99 %.2f "
           "(fill %.1f)  GPU idle %.1f%%\n",
           100 * r->miss_rate, r->wait_mean_ms, r->wait_p50_ms, r->wait_p95_ms, r->wait_p99_ms,
           r->fill_wait_ms, 100 * r->gpu_idle_frac);
    printf("  prediction MAPE cpu %.1f%% gpu %.1f%%  memory peak %.1f MiB (budget %.1f)  "
           "delivered %lld + failed %lld = %lld  (%.2f s %s)\n",
           100 * r->cpu_mape, 100 * r->gpu_mape, r->memory_peak / 1048576.0,
           r->memory_budget / 1048576.0, (long long)r->delivered, (long long)r->failed,
           (long long)r->samples, r->wall_s, strcmp(r->engine, "real") ? "to simulate" : "wall");
    printf("  step stalls (a step waits for its slowest rank) ms: mean %.2f p95 %.2f p99 %.2f  "
           "late steps %.1f%%\n",
           r->stall_mean_ms, r->stall_p95_ms, r->stall_p99_ms, 100 * r->late_step_frac);
    if (r->wait_mean_ms > 0)
        printf("  of the input wait, %.0f%% is single tasks longer than their step allows "
               "(no placement hides them)\n", 100 * r->wait_single_frac);
    if (r->reb_considered)
        printf("  rebalancing: %lld moves considered, %lld made, %lld refused by the gate, "
               "%lld refused (cap or no room), %.1f MiB moved, predicted gain %.3f s, "
               "realised %.3f s\n",
               (long long)r->reb_considered, (long long)r->reb_moved, (long long)r->reb_gated,
               (long long)r->reb_refused,
               r->reb_bytes / 1048576.0, r->reb_predicted_gain_s, r->reb_realised_gain_s);
    if (r->reb_remote)
        printf("  of the moves, %lld went to a rank of another node (%.1f MiB over the "
               "network)\n", (long long)r->reb_remote, r->reb_remote_bytes / 1048576.0);
    if (r->nodes > 1 && r->net_factor > 0 && r->net_factor != 1)
        printf("  transfers between nodes measured %.2f x the network model (both gates use "
               "it)\n", r->net_factor);
    if (r->reb_move_s > 0)
        printf("  moving decoded data took %.3f s; transfer cost calibrated to %.2f x the model\n",
               r->reb_move_s, r->reb_move_factor);
    if (r->fetch_cache_hits > 0)
        printf("  fetch cache: %lld ranges (%.2f MiB) read from the local cache, not fetched\n",
               (long long)r->fetch_cache_hits, r->fetch_cache_bytes / 1048576.0);
    if (r->fetch_requests > 0)
        printf("  %s: %.2f MiB fetched in %lld requests, %lld retried, %lld reads failed; "
               "workers waited %.3f s on the network\n",
               strcmp(r->engine, "sim") ? "storage" : "storage (simulated)", r->fetch_bytes / 1048576.0,
               (long long)r->fetch_requests, (long long)r->fetch_retries,
               (long long)r->fetch_failures, r->fetch_wait_s);
    if (r->fetch_latency_s > 0 && r->fetch_bandwidth > 0 && strcmp(r->engine, "sim"))
        printf("  fetch model (calibrated from the run's requests): %.1f ms per request + "
               "bytes at %.1f MB/s; sim --fetch-latency-ms %.1f --fetch-gbps %.3g replays it\n",
               r->fetch_latency_s * 1e3, r->fetch_bandwidth / 1e6, r->fetch_latency_s * 1e3,
               r->fetch_bandwidth * 8 / 1e9);
    else if (r->fetch_latency_s > 0 && strcmp(r->engine, "sim"))
        printf("  fetch model (calibrated from the run's requests): %.1f ms per request (their "
               "sizes too alike to tell the bandwidth)\n", r->fetch_latency_s * 1e3);
    if (r->fetch_ahead_ready + r->fetch_ahead_waited + r->fetch_ahead_missed > 0)
        printf("  fetched ahead: %lld ranges ready when a worker wanted them, %lld still in "
               "flight (waited for), %lld not fetched ahead (the worker fetched), %lld dropped "
               "unused\n", (long long)r->fetch_ahead_ready, (long long)r->fetch_ahead_waited,
               (long long)r->fetch_ahead_missed, (long long)r->fetch_ahead_dropped);
    if (r->lend_considered)
        printf("  across nodes: %lld late remote samples considered, %lld prepared by an idle node, "
               "%lld refused by the gate, %.1f MiB shipped\n",
               (long long)r->lend_considered, (long long)r->lent, (long long)r->lend_gated,
               r->bytes_shipped / 1048576.0);
    if (r->nodes > 1 && r->exchange_mean_s > 0)
        printf("  step exchange between nodes: %.3f ms per step (largest %.3f, waiting for the "
               "slowest node included); records built and applied in %.1f us per step\n",
               1e3 * r->exchange_mean_s, 1e3 * r->exchange_max_s, 1e6 * r->control_mean_s);
    if (r->cap_violations)
        printf("  %lld samples could not be placed within the per-rank caps (placed on the least "
               "loaded rank)\n",
               (long long)r->cap_violations);
}

static void print_sample_error(const dh_sample_error *e, void *user)
{
    (*(int64_t *)user)++; /* the engine's thread that prepared the sample */
    cli_diag(e->code, "sample \"%s\" (step %lld, rank %d) %s: %s", e->id, (long long)e->step,
             e->rank, e->path, e->message);
}

/* Scales the CPU model to this machine by decoding f->calibrate samples; 0 or 1. */
static int calibrate(dh_run_config *cfg, const sim_files *f, const dh_manifest *m,
                     dh_spec *spec)
{
    char err[512] = "";
    dh_spec *cs = spec;
    if (!cs && dh_spec_builtin(cfg->workload ? cfg->workload : "default", &cs)) {
        cli_err("no spec for calibration");
        return 1;
    }
    int rc = dh_measure_cpu_scale(m, cs, f->calibrate, &cfg->cpu_cost_scale, err, sizeof err);
    if (cs != spec)
        dh_spec_free(cs);
    if (rc) {
        cli_err("calibration: %s", err);
        return 1;
    }
    printf("calibrated: CPU cost on this machine = %.2f x the starting model (%lld samples)\n",
           cfg->cpu_cost_scale, (long long)f->calibrate);
    return 0;
}

/* The loader's diagnostics, printed, the first kept: what the other nodes are told. */
typedef struct {
    int64_t said;
    char *first;
    size_t len;
} load_said;

static void keep_diag(const dh_diag *d, void *user)
{
    load_said *l = user;
    if (!l->said && l->len)
        snprintf(l->first, l->len, "%s", d->message);
    cli_print_diag(d, &l->said);
}

/* Loads the manifest and spec the options name into cfg; 0 or 1 (reported here, and in why:
 * the cause the other nodes of the job are told; a user trial saw node 0 say only that node
 * 1 "stopped before the run (its messages say why)" for a manifest node 1 could not open). */
static int load_inputs(dh_run_config *cfg, const sim_files *f, dh_manifest **m, dh_spec **spec,
                       char *why, size_t whylen)
{
    char err[512] = "";
    int rc;
    if (f->manifest && cli_not_a_shard(f->manifest)) {
        snprintf(why, whylen, "%s is a tar shard, not a manifest", f->manifest);
        return 1;
    }
    if (f->manifest) {
        dh_load_opts lo;
        dh_load_opts_default(&lo);
        char first[1024] = "";
        load_said said = {0, first, sizeof first};
        lo.diag = keep_diag;
        lo.diag_user = &said;
        lo.limits = f->limits;
        if ((rc = dh_manifest_load(f->manifest, &lo, m, NULL))) {
            if (!said.said) /* a manifest that cannot be opened is said once, by the loader */
                cli_err("%s: %s", f->manifest, dh_strerror(rc));
            if (first[0]) /* the loader's first word names the file (and line) */
                snprintf(why, whylen, "%s [%s]", first, dh_err_name(rc));
            else
                snprintf(why, whylen, "%s: %s [%s]", f->manifest, dh_strerror(rc),
                         dh_err_name(rc));
            return 1;
        }
        cfg->manifest = *m;
    }
    if (f->spec && dh_spec_load(f->spec, spec, err, sizeof err)) {
        cli_err("%s", err);
        snprintf(why, whylen, "%s", err);
        return 1;
    }
    cfg->spec = *spec;
    return f->calibrate && *m ? calibrate(cfg, f, *m, *spec) : 0;
}

/* Prints the result and completes --json (opened before the run); 0 or 1. */
static int report_result(const dh_run_config *cfg, cli_out *json, const dh_result *res,
                         const cli_node *node)
{
    if (cli_interrupted()) /* on several nodes, node 0's: named as the others name theirs */
        fprintf(stderr, "\rdatahelix: %s%sinterrupted: the accounting covers the %lld complete "
                "steps\n", node ? cli_node_name(node) : "", node ? ": " : "",
                (long long)res->steps);
    cli_print_result(res);
    if (json->f) {
        dh_result_write_json(res, json->f);
        fputc('\n', json->f);
    }
    int rc = cli_out_commit(json);
    if (cfg->trace_path)
        printf("  trace: %s\n", cfg->trace_path);
    return rc;
}

/* user: on several nodes, this node's name (their lines share mpirun's stderr) */
static void print_event(const char *message, void *user)
{
    if (cli_progress_is_quiet() &&
        !strncmp(message, DH_SERVE_WAITING_EVENT, strlen(DH_SERVE_WAITING_EVENT)))
        return; /* --quiet: no progress */
    fprintf(stderr, "serve: %s%s%s\n", user ? (const char *)user : "", user ? ": " : "",
            message);
}

/* One run of the command: the main one, or a stream of serve's (--stream NAME ...). */
typedef struct {
    const char *name; /* NULL: the main run (serve: stream "train") */
    dh_run_config cfg;
    dh_stress stress;
    sim_files f;
    dh_manifest *m;
    dh_spec *spec;
    cli_out json;
    dh_result res;
    int64_t sample_errors;
} one_run;

static int run_mode(int mode, one_run *runs, int n, const cli_node *node, char *err,
                    size_t errlen)
{
    dh_run_config *cfg = &runs[0].cfg;
    if (mode == MODE_SIM)
        return dh_sim_run(cfg, &runs[0].res, err, errlen);
    if (mode == MODE_RUN)
        return dh_engine_run(cfg, print_sample_error, &runs[0].sample_errors, &runs[0].res, err,
                             errlen);
    dh_serve_stream ss[DH_SERVE_MAX_STREAMS];
    for (int k = 0; k < n; k++) {
        dh_serve_stream_default(&ss[k]);
        ss[k] = (dh_serve_stream){ss[k].struct_size, runs[k].name, &runs[k].cfg,
                                  print_sample_error, &runs[k].sample_errors, &runs[k].res};
    }
    dh_serve_opts *o = &runs[0].f.serve;
    o->on_event = print_event;
    o->event_user = node ? (void *)cli_node_name(node) : NULL;
    return dh_serve_streams(ss, n, o, err, errlen);
}


/* Prints why the run failed, and the accounting of what every node completed. */
static void report_failure(int mode, const cli_node *node, const char *err, int rc,
                           const dh_result *res)
{
    cli_err("%s%s%s: %s [%s]", mode_name[mode], node ? ": " : "", node ? cli_node_name(node) : "",
            err[0] ? err : dh_strerror(rc), dh_err_name(rc));
    if (res->engine[0] && res->steps == 0) { /* a page of zeros said nothing */
        cli_err("%s: %s: nothing delivered, nothing to account",
                node ? cli_node_name(node) : mode_name[mode],
                node ? "the nodes completed no step together" : "no step was completed");
    } else if (node && res->engine[0]) { /* the survivors of a lost node account for the steps */
        cli_err("%s: the accounting of the %lld steps this node saw every node complete%s:",
                cli_node_name(node), (long long)res->steps,
                strstr(err, "stopped responding") ? " (one in flight when a node died may be "
                                                    "counted by some survivors only)" : "");
        cli_print_result(res);
    } else if (res->engine[0]) { /* a run cut short still accounts for what it completed */
        cli_err("%s: the accounting of the %lld completed steps (the samples of steps "
                "prepared ahead and left unfinished are in none of its counts, though their "
                "failures were named above too):",
                mode_name[mode], (long long)res->steps);
        cli_print_result(res);
    }
}

/* Options of the agent as a whole, which a stream may not set. */
static const char *const agent_options[] = {
    "--ranks", "--workers", "--socket", "--max-leases", "--attach-timeout", "--on-rank-exit",
    "--nodes", "--calibrate", "--cpu-cost-scale", "--metrics", NULL};

/* A stratified order with --no-shuffle or --keep-last is a usage error, said before anything
 * starts (stream: NULL for the main run; inherited: its --order came from before the first
 * --stream). 0 or CLI_USAGE. */
static int order_fits(const dh_run_config *c, const char *stream, int inherited)
{
    if (c->order != DH_ORDER_STRATIFIED || (!c->no_shuffle && !c->keep_last))
        return 0;
    const char *what = c->no_shuffle ? "--no-shuffle" : "--keep-last";
    if (inherited)
        cli_err("--stream %s: %s needs the uniform order, and the --order stratified given "
                "before the first --stream applies to it too: add --order uniform after "
                "--stream %s", stream, what, stream);
    else
        cli_err("%s%s%s--order stratified does not go with %s: it reorders every epoch by cost "
                "(a validation stream takes --order uniform)", stream ? "--stream " : "",
                stream ? stream : "", stream ? ": " : "", what);
    return CLI_USAGE;
}

/*
 * serve ... --stream NAME [options] ...: each --stream starts another stream's options,
 * which default to the main run's except its inputs (--manifest, --spec, --json, --trace),
 * its memory and its length (endless: a pass per loop of its Loader, as long as the agent
 * runs). Fills runs[1..]; returns the number of runs, or -CLI_USAGE.
 */
static int parse_streams(int argc, char **argv, int first, one_run *runs)
{
    int n = 1;
    for (int i = first; i < argc;) {
        int end = i + 1;
        while (end < argc && strcmp(argv[end], "--stream"))
            end++;
        if (n == DH_SERVE_MAX_STREAMS || i + 1 >= end || argv[i + 1][0] == '-') {
            cli_err(n == DH_SERVE_MAX_STREAMS ? "an agent serves at most %d streams"
                                              : "--stream needs a name (--stream val --manifest "
                                                "V ...)", DH_SERVE_MAX_STREAMS);
            return -CLI_USAGE;
        }
        for (int k = 0; k < n; k++)
            if (!strcmp(argv[i + 1], runs[k].name ? runs[k].name : "train")) {
                cli_err("--stream %s: %s", argv[i + 1], k ? "a stream of that name comes "
                        "earlier" : "\"train\" is the name of the stream the options before "
                        "the first --stream describe: pick another");
                return -CLI_USAGE;
            }
        int has_manifest = 0;
        for (int k = i + 2; k < end; k++)
            has_manifest |= !strcmp(argv[k], "--manifest");
        if (!has_manifest) {
            cli_err("--stream %s needs its own --manifest M", argv[i + 1]);
            return -CLI_USAGE;
        }
        for (int k = i + 2; k < end; k++)
            for (const char *const *o = agent_options; *o; o++)
                if (!strcmp(argv[k], *o)) {
                    cli_err("--stream %s: %s is the agent's, for every stream: give it before "
                            "the first --stream", argv[i + 1], *o);
                    return -CLI_USAGE;
                }
        one_run *r = &runs[n++];
        r->name = argv[i + 1];
        r->cfg = runs[0].cfg;
        r->cfg.trace_path = NULL;
        r->cfg.memory_budget = 0;
        r->cfg.steps = DH_STEPS_FOREVER;
        r->cfg.epochs = 0;
        r->cfg.stress = NULL;
        r->f.serve = runs[0].f.serve;
        r->f.limits = runs[0].f.limits;
        r->f.spec = runs[0].f.spec; /* the options before it, its own given after --stream */
        r->f.ranks_given = runs[0].f.ranks_given;
        int rc = parse(end - (i + 1), argv + i + 1, &r->cfg, &r->stress, &r->f, "serve");
        if (rc)
            return rc < 0 ? -CLI_USAGE : -rc;
        int own_order = 0;
        for (int k = i + 2; k < end; k++)
            own_order |= !strcmp(argv[k], "--order");
        if ((rc = order_fits(&r->cfg, r->name, !own_order)))
            return -rc;
        if (r->cfg.epochs && r->cfg.steps == DH_STEPS_FOREVER)
            r->cfg.steps = 0; /* --epochs N given: that many */
        int own_augment = 0;
        for (int k = i + 2; k < end; k++)
            own_augment |= !strcmp(argv[k], "--augment");
        if (r->cfg.augment && !own_augment && !r->cfg.no_augment && r->cfg.no_shuffle &&
            r->cfg.keep_last) /* a user trial's val stream was augmented, unseen */
            fprintf(stderr, "datahelix: warning: --stream %s: the --augment given before it "
                    "applies to it too, and with --no-shuffle --keep-last it reads like a "
                    "validation stream: add --no-augment after --stream %s for its items' "
                    "plain draw (or --augment there to keep it quiet)\n", r->name, r->name);
        i = end;
    }
    if (n > 1 && runs[0].cfg.memory_budget) { /* the main --memory-budget: every stream's */
        runs[0].f.serve.memory_budget = runs[0].cfg.memory_budget;
        runs[0].cfg.memory_budget = 0;
    }
    return n;
}

/* --metrics: the endpoint (node K of several: PORT + K), said on stderr; 0 or 1. */
static int start_metrics(const char *where, cli_node *node, dh_metrics **out)
{
    char at[128], err[512] = "";
    const char *colon = strrchr(where, ':');
    long port = strtol(colon ? colon + 1 : where, NULL, 10);
    if (node && port > 0 && port + cli_node_rank(node) <= 65535) {
        snprintf(at, sizeof at, "%.*s%ld", colon ? (int)(colon - where + 1) : 0, where,
                 port + cli_node_rank(node));
        where = at;
    }
    int rc = dh_metrics_start(where, out, err, sizeof err);
    if (rc) {
        cli_err("%s [%s]", err, dh_err_name(rc));
        return rc == DH_EINVAL ? CLI_USAGE : 1;
    }
    char host[256] = "127.0.0.1";
    const char *every = "";
    if (colon && colon > where && colon - where < (long)sizeof host)
        snprintf(host, sizeof host, "%.*s", (int)(colon - where), where);
    if (!strcmp(host, "0.0.0.0")) { /* a URL one can open: this machine's name */
        every = " (every interface)";
        if (gethostname(host, sizeof host - 1))
            snprintf(host, sizeof host, "localhost");
    }
    fprintf(stderr, "datahelix: %s%smetrics at http://%s:%d/metrics%s\n",
            node ? cli_node_name(node) : "", node ? ": " : "", host, dh_metrics_port(*out), every);
    return 0;
}

static int sim_or_run(int argc, char **argv, int mode)
{
    static one_run runs[DH_SERVE_MAX_STREAMS];
    memset(runs, 0, sizeof runs);
    dh_run_config *cfg = &runs[0].cfg;
    dh_run_config_default(cfg);
    sim_files *f = &runs[0].f;
    dh_serve_opts_default(&f->serve);
    dh_limits_default(&f->limits);
    int first = argc, usage = 0, peer_stop = 0; /* serve: where the first --stream starts */
    for (int i = 1; mode == MODE_SERVE && i < argc && first == argc; i++)
        first = strcmp(argv[i], "--stream") ? argc : i;
    int rc = parse(first, argv, cfg, &runs[0].stress, f, mode_name[mode]);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = order_fits(cfg, NULL, 0)))
        return rc;
    if (mode == MODE_SERVE && !cfg->global_batch) { /* the library's refusal named no flag */
        int later = 0; /* given after --stream: that stream's */
        for (int i = first; i < argc; i++)
            later |= !strcmp(argv[i], "--batch");
        cli_err("serve needs --batch G: the global batch, samples a step over every rank of "
                "the job%s", later ? " (a --batch after --stream NAME is that stream's: give "
                                     "the agent's before the first --stream)"
                                   : " (see datahelix serve --help)");
        return CLI_USAGE;
    }
    int n = parse_streams(argc, argv, first, runs);
    if (n < 0)
        return -n;
    /* Under mpirun: one agent per node (without it, one node: nothing changes). */
    cli_node *node = NULL;
    if (mode != MODE_SIM && (rc = cli_node_start(cfg, &node)))
        return rc;
    if (n > 1 && cfg->nodes > 1) { /* a usage error, said before any agent listens */
        cli_err("serve: --stream: several streams are served on one node only (on several "
                "nodes, run an agent per stream, each under its own mpirun, on its own "
                "--socket)");
        cli_node_fail(node, "serve: --stream on several nodes");
        cli_node_stop(node);
        return CLI_USAGE;
    }
    int lead = cli_node_rank(node) == 0; /* node 0 prints the result and writes --json */
    char trace[4200];
    if (!lead && cfg->trace_path) { /* one trace per node */
        snprintf(trace, sizeof trace, "%s.node%d", cfg->trace_path, cli_node_rank(node));
        cfg->trace_path = trace;
    }
    char sock[256];
    const char *pct = f->serve.socket ? strstr(f->serve.socket, "%n") : NULL;
    if (pct) { /* several agents on one host: --socket NAME%n, one name per node */
        snprintf(sock, sizeof sock, "%.*s%d%s", (int)(pct - f->serve.socket), f->serve.socket,
                 cli_node_rank(node), pct + 2);
        f->serve.socket = sock;
    }
    dh_metrics *metrics = NULL;
    if (f->metrics && (rc = start_metrics(f->metrics, node, &metrics))) {
        cli_node_fail(node, "its --metrics endpoint could not start (its own message says why)");
        cli_node_stop(node);
        return rc;
    }
    for (int k = 0; k < n; k++)
        runs[k].cfg.metrics = metrics;
    static const cli_progress_what steps = {"run", "steps"};
    if (mode == MODE_RUN && lead) {
        cfg->progress = cli_progress;
        cfg->progress_user = (void *)&steps;
    }
    cli_catch_interrupts();
    for (int k = 0; k < n; k++) {
        runs[k].cfg.should_stop = cli_should_stop;
        runs[k].res = (dh_result)DH_RESULT_INIT;
    }
    /* an unwritable --json fails before the run */
    for (int k = 0; k < n && !rc; k++)
        rc = cli_out_open(&runs[k].json, lead ? runs[k].f.json : NULL);
    char why[2100] = ""; /* a failure the other nodes are told of */
    for (int k = 0; k < n && !rc; k++)
        rc = load_inputs(&runs[k].cfg, &runs[k].f, &runs[k].m, &runs[k].spec, why, sizeof why);
    for (int k = 0; k < n && !rc && lead && mode != MODE_SIM; k++) /* say what decodes */
        if (!runs[k].f.spec && !runs[k].cfg.workload)
            cli_err("%s%s%s: no --spec or --workload: samples are decoded by the default spec "
                    "(`datahelix inspect M` shows its output; docs/SPEC.md)",
                    mode_name[mode], runs[k].name ? ": stream " : "",
                    runs[k].name ? runs[k].name : "");
    if (!rc && node && f->calibrate) { /* every node plans with the same CPU model */
        rc = cli_node_agree_mean(node, &cfg->cpu_cost_scale);
        if (!rc && lead)
            printf("calibrated on %d nodes: CPU cost = %.2f x the starting model (their mean)\n",
                   cfg->nodes, cfg->cpu_cost_scale);
    }
    for (int k = 1; k < n; k++)
        runs[k].cfg.cpu_cost_scale = cfg->cpu_cost_scale;
    double comm0 = cli_node_comm_cpu(node); /* MPI's start-up is not the run's */
    if (!rc) {
        char err[2048] = "";
        rc = run_mode(mode, runs, n, node, err, sizeof err);
        size_t len = strlen(err);
        if (rc == DH_EEXIST && mode == MODE_SERVE && node && !pct) /* the likely cause */
            snprintf(err + len, sizeof err - len, "; under mpirun, agents of several nodes on "
                     "one host need distinct names: --socket @NAME%%n");
        if (rc)
            snprintf(why, sizeof why, "%s [%s]", err[0] ? err : dh_strerror(rc),
                     dh_err_name(rc));
        /* another node's agent was stopped, every node with it: interrupted, as that node is
         * (it exited 0 here, as if the endless job had ended by itself: a trial) */
        if (rc == DH_ECANCELED && node && n == 1 && runs[0].res.engine[0] && !cli_interrupted()) {
            fprintf(stderr, "\rdatahelix: %s: interrupted: %s\n", cli_node_name(node), err);
            peer_stop = CLI_PEER_STOPPED;
            rc = 0;
        }
        if (rc)
            report_failure(mode, node, err, rc, n == 1 ? &runs[0].res : &(dh_result){0});
        /* a configuration the library refused before any step (--batch 4 --ranks 8) is a
         * usage error, as the CLI's own checks are; serve's trainers may be refused with
         * DH_EINVAL too, so serve keeps 1 */
        usage = rc == DH_EINVAL && mode != MODE_SERVE && !runs[0].res.engine[0];
        int any = 0;
        for (int k = 0; k < n; k++)
            any |= runs[k].res.engine[0] != 0;
        for (int k = 0; n > 1 && any && k < n; k++) { /* each stream's accounting */
            dh_result *res = &runs[k].res;
            printf("stream %s:%s\n", runs[k].name ? runs[k].name : "train",
                   res->engine[0] ? "" : " not run (no trainer attached)");
            if (res->engine[0] && rc && res->steps == 0) /* as one stream says it (a trial) */
                printf("  no step was completed: nothing delivered, nothing to account\n");
            else if (res->engine[0] && rc)
                cli_print_result(res);
            else if (res->engine[0])
                rc = report_result(&runs[k].cfg, &runs[k].json, res, node);
        }
        if (!rc && n == 1 && lead)
            rc = report_result(cfg, &runs[0].json, &runs[0].res, node);
        if (!lead && (cli_interrupted() || peer_stop)) /* node 0 prints the job's accounting */
            fprintf(stderr, "\rdatahelix: %s: interrupted%s: every node stopped after the "
                    "same %lld complete steps; node 0 prints the accounting\n",
                    cli_node_name(node), peer_stop ? "" : " (Ctrl-C or SIGTERM here)",
                    (long long)runs[0].res.steps);
        if (!rc && lead && node && runs[0].res.wall_s > 0) /* the control plane's own CPU */
            printf("  node 0's communication thread: %.1f ms of CPU during the run, %.2f%% of "
                   "a core\n", 1e3 * (cli_node_comm_cpu(node) - comm0),
                   100 * (cli_node_comm_cpu(node) - comm0) / runs[0].res.wall_s);
    }
    for (int k = 0; k < n; k++) {
        cli_out_abort(&runs[k].json); /* not committed: nothing left under a temporary name */
        dh_manifest_free(runs[k].m);
        dh_spec_free(runs[k].spec);
    }
    if (rc && !runs[0].res.engine[0] && !cli_interrupted()) /* failed before any step */
        cli_node_fail(node, why[0] ? why : "it stopped before the run (its messages say why)");
    cli_node_stop(node);
    dh_metrics_stop(metrics);
    /* Interrupted: the accounting of the completed steps is printed (and written), and the
     * exit status says the run did not end by itself. */
    return cli_interrupted() ? cli_interrupted() : peer_stop ? peer_stop : usage ? CLI_USAGE
                                                                         : rc ? 1 : 0;
}

int cli_sim(int argc, char **argv)
{
    return sim_or_run(argc, argv, MODE_SIM);
}

int cli_run(int argc, char **argv)
{
    return sim_or_run(argc, argv, MODE_RUN);
}

int cli_serve(int argc, char **argv)
{
    return sim_or_run(argc, argv, MODE_SERVE);
}
