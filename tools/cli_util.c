/*
 * cli_util.c - option parsing, diagnostics and statistics shared by the
 * subcommands.
 */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

void cli_err(const char *fmt, ...)
{
    /* One write per line: the agents of several nodes share mpirun's stderr. */
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "datahelix: %s%s\n", line, n >= (int)sizeof line ? "..." : "");
}

/* Edits (insertions, deletions, substitutions, two neighbours swapped) from a[0, na) to
 * b[0, nb); both short (a typo's "--stpes" is one edit from --steps, two from --spec). */
static int edits(const char *a, size_t na, const char *b, size_t nb)
{
    int d[64][64];
    if (na >= 64 || nb >= 64)
        return 64;
    for (size_t i = 0; i <= na; i++)
        for (size_t j = 0; j <= nb; j++) {
            if (!i || !j) {
                d[i][j] = (int)(i + j);
                continue;
            }
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int gap = (d[i - 1][j] < d[i][j - 1] ? d[i - 1][j] : d[i][j - 1]) + 1;
            d[i][j] = sub < gap ? sub : gap;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < d[i][j])
                d[i][j] = d[i - 2][j - 2] + 1;
        }
    return d[na][nb];
}

/* Other loaders' names for what an option here is (a user trial typed --batch-size), each
 * with what ours means, offered where the command has that option; '_' reads as '-'. */
static const struct {
    const char *theirs, *ours, *means;
} other_names[] = {
    {"--batch-size", "--batch", "the global batch, every rank's samples of a step"},
    {"--num-workers", "--workers", "decoding threads on this node"},
    {"--world-size", "--ranks", "the job's trainer ranks"},
};

/* Whether arg[0, n) is name, an underscore standing for a hyphen. */
static int same_name(const char *arg, size_t n, const char *name)
{
    if (strlen(name) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((arg[i] == '_' ? '-' : arg[i]) != name[i])
            return 0;
    return 1;
}

/* Whether help text t offers option o (followed by a space, a comma, '=' or its end). */
static int offers(const char *t, const char *o)
{
    size_t n = strlen(o);
    for (const char *p = strstr(t, o); p; p = strstr(p + 1, o))
        if (!p[n] || strchr(" ,=\n]", p[n]))
            return 1;
    return 0;
}

int cli_unexpected(const char *cmd, const char *arg, const char *const *help_texts)
{
    size_t alen = strcspn(arg, "="); /* --batch-size=64 as --batch-size */
    for (size_t k = 0; k < sizeof other_names / sizeof *other_names; k++) {
        if (!same_name(arg, alen, other_names[k].theirs))
            continue;
        for (int t = 0; help_texts && help_texts[t]; t++)
            if (offers(help_texts[t], other_names[k].ours)) {
                cli_err("%s: unexpected argument \"%s\" (did you mean %s? %s; see datahelix "
                        "%s --help)", cmd, arg, other_names[k].ours, other_names[k].means, cmd);
                return CLI_USAGE;
            }
    }
    const char *best = NULL;
    size_t best_len = 0;
    int best_d = 3; /* two edits at most */
    for (int t = 0; help_texts && help_texts[t]; t++)
        for (const char *p = strstr(help_texts[t], "--"); p; p = strstr(p + 2, "--")) {
            size_t n = 2 + strspn(p + 2, "abcdefghijklmnopqrstuvwxyz0123456789-");
            int d = n > 2 ? edits(arg, strlen(arg), p, n) : 3;
            if (d < best_d && d > 0) {
                best = p;
                best_len = n;
                best_d = d;
            }
        }
    if (arg[0] == '-' && best)
        cli_err("%s: unexpected argument \"%s\" (did you mean %.*s? see datahelix %s --help)",
                cmd, arg, (int)best_len, best, cmd);
    else
        cli_err("%s: unexpected argument \"%s\" (see datahelix %s --help)", cmd, arg, cmd);
    return CLI_USAGE;
}

int cli_int(const char *opt, const char *val, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = val ? strtoll(val, &end, 10) : 0;
    if (!val || errno || end == val || *end || x < min || x > max) {
        cli_err("%s expects an integer in [%lld, %lld], got \"%s\"", opt, (long long)min,
                (long long)max, val ? val : "(nothing)");
        return -1;
    }
    *out = x;
    return 0;
}

int cli_num(const char *opt, const char *val, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double x = val ? strtod(val, &end) : 0;
    if (!val || errno || end == val || *end || !(x >= min && x <= max)) {
        cli_err("%s expects a number in [%g, %g], got \"%s\"", opt, min, max,
                val ? val : "(nothing)");
        return -1;
    }
    *out = x;
    return 0;
}

int cli_not_a_shard(const char *manifest)
{
    if (!dh_index_shard_name(manifest))
        return 0;
    cli_err("%s is a tar shard, not a manifest: index the shards first (datahelix index DIR -o "
            "DIR/manifest.jsonl) and give that manifest", manifest);
    return 1;
}

const char cli_limits_help[] =
    "limits (bad descriptors over a limit are rejected with DH_ELIMIT):\n"
    "  --max-pixels N        pixels of one image or frame     (default 268435456)\n"
    "  --max-frames N        frames of one video              (default 10000000)\n"
    "  --max-duration S      seconds of one video or audio    (default 86400)\n"
    "  --max-bytes N         bytes of one media file          (default 2^40)\n"
    "  --max-media N         media items of one sample        (default 256, at most 256)\n"
    "  --max-text-tokens N   text tokens of one sample        (default 10000000)\n"
    "  --max-text-bytes N    bytes of one sample's text, and of its meta (default 1048576,\n"
    "                        at most 8388608)\n";

int cli_limit_option(int argc, char **argv, int *i, dh_limits *lim)
{
    const char *opt = argv[*i];
    const char *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    int64_t x;
    int rc;
    if (!strcmp(opt, "--max-pixels"))
        rc = cli_int(opt, val, 1, INT64_MAX, &lim->max_pixels);
    else if (!strcmp(opt, "--max-frames"))
        rc = cli_int(opt, val, 1, INT32_MAX, &lim->max_frames);
    else if (!strcmp(opt, "--max-duration"))
        rc = cli_num(opt, val, 0, 1e12, &lim->max_duration_s);
    else if (!strcmp(opt, "--max-bytes"))
        rc = cli_int(opt, val, 1, INT64_MAX, &lim->max_bytes);
    else if (!strcmp(opt, "--max-text-bytes"))
        rc = cli_int(opt, val, 0, DH_MAX_TEXT_BYTES, &lim->max_text_bytes);
    else if (!strcmp(opt, "--max-text-tokens"))
        rc = cli_int(opt, val, 0, INT32_MAX, &lim->max_text_tokens);
    else if (!strcmp(opt, "--max-media")) {
        rc = cli_int(opt, val, 0, 256, &x);
        lim->max_media = (int32_t)x;
    } else
        return 0;
    if (rc)
        return -1;
    (*i)++;
    return 1;
}

/* ---- diagnostics: the first ones in full, then a count per reason ---- */

static pthread_mutex_t diag_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t diag_shown, diag_limit = -1;
typedef struct {
    int code;
    int64_t n;
} diag_count;
static diag_count diag_hidden[32];
static int diag_kinds;
static int64_t diag_hidden_other;

static void progress_clear_locked(void);

void cli_diag(int code, const char *fmt, ...)
{
    pthread_mutex_lock(&diag_mu); /* engines report from worker threads */
    progress_clear_locked(); /* a message never lands in the middle of the progress line */
    if (diag_limit < 0) {
        const char *env = getenv("DH_MAX_ERRORS");
        diag_limit = env && *env ? strtoll(env, NULL, 10) : CLI_DIAG_DEFAULT;
        if (diag_limit <= 0)
            diag_limit = INT64_MAX;
    }
    if (diag_shown < diag_limit) {
        diag_shown++;
        va_list ap;
        va_start(ap, fmt);
        fputs("datahelix: ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fprintf(stderr, " [%s]\n", dh_err_name(code));
    } else {
        int k = 0;
        while (k < diag_kinds && diag_hidden[k].code != code)
            k++;
        if (k == diag_kinds && diag_kinds < (int)(sizeof diag_hidden / sizeof diag_hidden[0]))
            diag_hidden[diag_kinds++] = (diag_count){code, 0};
        if (k < diag_kinds)
            diag_hidden[k].n++;
        else
            diag_hidden_other++;
    }
    pthread_mutex_unlock(&diag_mu);
}

void cli_diag_flush(void)
{
    pthread_mutex_lock(&diag_mu);
    int64_t total = diag_hidden_other;
    for (int k = 0; k < diag_kinds; k++)
        total += diag_hidden[k].n;
    if (total > 0) {
        fprintf(stderr, "datahelix: %lld more errors not shown:", (long long)total);
        for (int k = 0; k < diag_kinds; k++)
            fprintf(stderr, "%s %s %lld", k ? "," : "", dh_err_name(diag_hidden[k].code),
                    (long long)diag_hidden[k].n);
        if (diag_hidden_other)
            fprintf(stderr, ", other %lld", (long long)diag_hidden_other);
        fprintf(stderr, " (the first %lld are above; DH_MAX_ERRORS=0 shows all)\n",
                (long long)diag_shown);
    }
    diag_kinds = 0;
    diag_hidden_other = 0;
    pthread_mutex_unlock(&diag_mu);
}

/* ---- progress: one redrawn line on a terminal, a plain line now and then elsewhere ---- */

static int progress_quiet, progress_tty = -1, progress_on_screen;
static double progress_start, progress_last, progress_every;
static int64_t progress_done = -1;

void cli_progress_quiet(void)
{
    progress_quiet = 1;
}

int cli_progress_is_quiet(void)
{
    return progress_quiet;
}

/* Erases the progress line a terminal shows; the caller holds diag_mu. */
static void progress_clear_locked(void)
{
    if (progress_on_screen)
        fputs("\r\033[K", stderr);
    progress_on_screen = 0;
}

double cli_progress_seconds(void)
{
    const char *env = getenv("DH_PROGRESS_SECONDS");
    char *end = NULL;
    double s = env && *env ? strtod(env, &end) : CLI_PROGRESS_SECONDS;
    return env && *env && !*end && s >= 0.05 ? s : CLI_PROGRESS_SECONDS;
}

void cli_progress_check_env(void)
{
    const char *env = getenv("DH_PROGRESS_SECONDS");
    char *end = NULL;
    double s = env ? strtod(env, &end) : 0;
    if (env && (!*env || *end || !(s >= 0.05)))
        fprintf(stderr, "datahelix: DH_PROGRESS_SECONDS=\"%s\" is not a number of seconds of "
                "0.05 or more: progress lines come every %.0f s (--quiet for none)\n", env,
                CLI_PROGRESS_SECONDS);
}

void cli_progress(int64_t done, int64_t total, void *user)
{
    const cli_progress_what *w = user;
    if (progress_quiet)
        return;
    pthread_mutex_lock(&diag_mu); /* the library may report from any of its threads */
    double now = cli_now();
    if (progress_tty < 0) {
        progress_tty = isatty(STDERR_FILENO);
        progress_every = cli_progress_seconds();
    }
    if (done < progress_done || progress_done < 0) /* a new piece of work */
        progress_start = progress_last = now;
    progress_done = done;
    char pct[32] = "";
    if (total > 0)
        snprintf(pct, sizeof pct, " (%.0f%%)", 100.0 * (double)done / (double)total);
    if (progress_tty) {
        if (total > 0 && done >= total) { /* what follows is the command's own summary */
            progress_clear_locked();
        } else if (now - progress_last >= 0.1 || !progress_on_screen) {
            if (total > 0)
                fprintf(stderr, "\r%s: %lld/%lld %s%s\033[K", w->what, (long long)done,
                        (long long)total, w->unit, pct);
            else
                fprintf(stderr, "\r%s: %lld %s (until interrupted)\033[K", w->what,
                        (long long)done, w->unit);
            progress_on_screen = 1;
            progress_last = now;
        }
    } else if (now - progress_last >= progress_every && (total <= 0 || done < total)) {
        if (total > 0)
            fprintf(stderr, "datahelix: %s: %lld/%lld %s%s after %.*f s\n", w->what,
                    (long long)done, (long long)total, w->unit, pct,
                    now - progress_start < 10 ? 1 : 0, now - progress_start);
        else
            fprintf(stderr, "datahelix: %s: %lld %s after %.*f s\n", w->what, (long long)done,
                    w->unit, now - progress_start < 10 ? 1 : 0, now - progress_start);
        progress_last = now;
    }
    pthread_mutex_unlock(&diag_mu);
}

void cli_print_diag(const dh_diag *d, void *user)
{
    cli_diag(d->code, "%s", d->message);
    if (user)
        (*(int64_t *)user)++;
}

double cli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v. */
static double rank(const double *v, int64_t n, double p)
{
    int64_t k = (int64_t)ceil(p / 100.0 * (double)n);
    return v[k < 1 ? 0 : k - 1];
}

void cli_distribution(double *v, int64_t n, cli_dist *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n == 0)
        return;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += v[i];
    out->min = v[0];
    out->max = v[n - 1];
    out->p50 = rank(v, n, 50);
    out->p95 = rank(v, n, 95);
    out->mean = sum / (double)n;
}

int64_t cli_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (int64_t)ru.ru_maxrss * 1024;
}

const char cli_run_help[] =
    "  --ranks R               training ranks (default 8)\n"
    "  --workers W             CPU workers in total (default 32)\n"
    "  --batch G               global batch, all ranks together (default: the workload's)\n"
    "  --steps N               steps to run (default: 200 for a workload, one epoch for a manifest);\n"
    "                          0: epoch after epoch until interrupted (Ctrl-C prints the accounting)\n"
    "  --epochs N              run N whole epochs of the manifest (or the workload's dataset)\n"
    "  --seed S                seed of data, noise and sampler order (default 1)\n"
    "  --no-shuffle            every epoch in the manifest's order (validation)\n"
    "  --order uniform|stratified\n"
    "                          the sample order: uniform, each epoch a shuffle (default); or\n"
    "                          stratified (experimental: a later release may retire it),\n"
    "                          each step holding every class of GPU cost in proportion and,\n"
    "                          on several nodes, each node's share fixed by the order (no\n"
    "                          replica sorts the step: docs/MULTINODE.md); a saved state\n"
    "                          resumes only with its own order\n"
    "  --keep-last             keep an epoch's incomplete last batch, filled up with samples\n"
    "                          from the epoch's start, marked as padding in served batches\n"
    "                          (default: dropped)\n"
    "  --augment               add the standard training augmentation to the spec: flips,\n"
    "                          random resized crops, random 4 s clips (docs/SPEC.md)\n"
    "  --no-augment            every item its plain draw (centred clip, the resize's own\n"
    "                          crop, no flip), over --augment and the spec's random keys:\n"
    "                          a validation --stream beside augmented training\n"
    "  --rho X                 load factor to scale GPU costs to (default: the workload's)\n"
    "  --memory-budget BYTES   all the batch memory a run holds: admitted batches, the pool's\n"
    "                          slack and helix's move arena (default: what the DataLoader\n"
    "                          holds plus that slack and arena; too small is refused)\n"
    "  --cpu-cost-scale X      measured / predicted CPU cost on this machine (bench --mode real\n"
    "                          measures it; default 1)\n"
    "  --understate F:K        stress: a fraction F of samples truly has K x the tokens their\n"
    "                          descriptors say (policies see the descriptors)\n"
    "  --understate-told       the same samples described truthfully (the reference run)\n"
    "  --workload-samples N    a built-in workload's dataset: N samples (epochs go round it;\n"
    "                          default: min(steps, 1000) global batches)\n"
    "  --nodes N               split ranks and workers evenly over N nodes (default 1)\n"
    "  --net-gbps X            bandwidth between nodes in Gbit/s (default 100)\n"
    "  --net-latency-us X      latency between nodes in microseconds (default 20)\n"
    "  --move-gbps X           handoff bandwidth between ranks of a node in Gbit/s (default 160)\n"
    "  --cpu-sigma X           log-normal sigma of CPU truth around the model (default 0.25)\n"
    "  --cpu-heavy F:K         stress: a fraction F of samples truly costs K x its prediction\n"
    "  --rank-token-cap N      helix placement: at most N tokens per rank per step\n"
    "  --rank-byte-cap BYTES   helix placement: at most BYTES of output per rank per step\n"
    "  --sample-timeout S      real engine: a sample taking over S seconds to read and decode\n"
    "                          fails with its own error (default: 20x its predicted time,\n"
    "                          10 s to 300 s; 0: no limit)\n"
    "  --max-failed F          real engine: stop the run once at least 16 samples failed and\n"
    "                          they are over the share F (0.001 to 1) of those with media\n"
    "                          finished (default 0.5; 1: never); a run in which no sample\n"
    "                          with media was read fails at its end\n"
    "  --fetchers N            real engine, media on object stores: threads that fetch the\n"
    "                          samples the schedule says come next while workers decode\n"
    "                          (default 16; 0: a worker fetches a sample when it starts it)\n"
    "  --fetch-ahead-mib N     bytes fetched ahead and not yet decoded, at most (default 256)\n"
    "  --fetch-latency-ms X    simulator: the media are on an object store, X ms per request\n"
    "  --fetch-gbps X          simulator: the store's link per node in Gbit/s (default 10)\n"
    "  -q, --quiet             no progress: the real engine's steps and a dataset's making\n"
    "                          show as a line on a terminal, elsewhere a line every 30 s\n"
    "                          ($DH_PROGRESS_SECONDS)\n";

int cli_run_option(int argc, char **argv, int *i, dh_run_config *cfg, dh_stress *stress)
{
    const char *opt = argv[*i];
    const char *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    int64_t x = 0;
    int rc;
    if (!strcmp(opt, "--ranks") || !strcmp(opt, "--workers")) {
        rc = cli_int(opt, val, 1, 1 << 20, &x);
        *(opt[2] == 'r' ? &cfg->ranks : &cfg->workers) = (int)x;
    } else if (!strcmp(opt, "--batch")) {
        rc = cli_int(opt, val, 1, INT32_MAX, &cfg->global_batch);
    } else if (!strcmp(opt, "--steps")) {
        rc = cli_int(opt, val, 0, INT64_MAX / 4, &cfg->steps);
        if (!rc && cfg->steps == 0)
            cfg->steps = DH_STEPS_FOREVER;
    } else if (!strcmp(opt, "--epochs")) {
        rc = cli_int(opt, val, 1, INT32_MAX, &cfg->epochs);
    } else if (!strcmp(opt, "--workload-samples")) {
        rc = cli_int(opt, val, 1, INT32_MAX, &cfg->workload_samples);
    } else if (!strcmp(opt, "--seed")) {
        rc = cli_int(opt, val, 0, INT64_MAX, &x);
        cfg->seed = (uint64_t)x;
    } else if (!strcmp(opt, "--rho")) {
        rc = cli_num(opt, val, 1e-3, 1e3, &cfg->rho);
    } else if (!strcmp(opt, "--memory-budget")) {
        rc = cli_int(opt, val, 1, INT64_MAX, &cfg->memory_budget);
    } else if (!strcmp(opt, "--cpu-cost-scale")) {
        rc = cli_num(opt, val, 1e-6, 1e6, &cfg->cpu_cost_scale);
    } else if (!strcmp(opt, "--nodes")) {
        rc = cli_int(opt, val, 1, 1 << 16, &x);
        cfg->nodes = (int)x;
    } else if (!strcmp(opt, "--net-gbps")) {
        rc = cli_num(opt, val, 1e-6, 1e6, &cfg->net_bandwidth);
        cfg->net_bandwidth *= 1e9 / 8;
    } else if (!strcmp(opt, "--move-gbps")) {
        rc = cli_num(opt, val, 1e-9, 1e6, &cfg->move_bandwidth);
        cfg->move_bandwidth *= 1e9 / 8;
    } else if (!strcmp(opt, "--net-latency-us")) {
        rc = cli_num(opt, val, 0, 1e9, &cfg->net_latency);
        cfg->net_latency = cfg->net_latency > 0 ? cfg->net_latency * 1e-6 : 1e-12;
    } else if (!strcmp(opt, "--cpu-sigma")) {
        rc = cli_num(opt, val, 1e-6, 10, &stress->cpu_noise_sigma);
    } else if (!strcmp(opt, "--cpu-heavy")) {
        char *end = NULL;
        stress->cpu_heavy_fraction = val ? strtod(val, &end) : -1;
        stress->cpu_heavy_factor = end && *end == ':' ? strtod(end + 1, NULL) : -1;
        rc = stress->cpu_heavy_fraction > 0 && stress->cpu_heavy_fraction <= 1 &&
                     stress->cpu_heavy_factor > 0 && stress->cpu_heavy_factor <= DH_STRESS_MAX_FACTOR
                 ? 0
                 : (cli_err("--cpu-heavy expects F:K with 0 < F <= 1 and 0 < K <= %g",
                            DH_STRESS_MAX_FACTOR), -1);
    } else if (!strcmp(opt, "-q") || !strcmp(opt, "--quiet")) {
        cli_progress_quiet();
        return 1;
    } else if (!strcmp(opt, "--order")) {
        if (!val || (strcmp(val, "uniform") && strcmp(val, "stratified"))) {
            cli_err("--order expects uniform or stratified, got \"%s\"",
                    val ? val : "(nothing)");
            return -1;
        }
        cfg->order = val[0] == 's' ? DH_ORDER_STRATIFIED : DH_ORDER_UNIFORM;
        rc = 0;
    } else if (!strcmp(opt, "--no-shuffle") || !strcmp(opt, "--keep-last")) {
        *(opt[2] == 'n' ? &cfg->no_shuffle : &cfg->keep_last) = 1;
        return 1;
    } else if (!strcmp(opt, "--augment")) {
        cfg->augment = 1;
        return 1;
    } else if (!strcmp(opt, "--no-augment")) {
        cfg->no_augment = 1;
        return 1;
    } else if (!strcmp(opt, "--understate-told")) {
        stress->understate_told = 1;
        cfg->stress = stress;
        return 1;
    } else if (!strcmp(opt, "--understate")) {
        char *end = NULL;
        stress->understate_fraction = val ? strtod(val, &end) : -1;
        stress->understate_factor = end && *end == ':' ? strtod(end + 1, NULL) : -1;
        rc = stress->understate_fraction > 0 && stress->understate_fraction <= 1 &&
                     stress->understate_factor > 0 &&
                     stress->understate_factor <= DH_STRESS_MAX_FACTOR
                 ? 0
                 : (cli_err("--understate expects F:K with 0 < F <= 1 and 0 < K <= %g, got \"%s\"",
                            DH_STRESS_MAX_FACTOR, val ? val : ""),
                    -1);
    } else if (!strcmp(opt, "--rank-token-cap")) {
        rc = cli_int(opt, val, 1, INT64_MAX, &cfg->rank_token_cap);
    } else if (!strcmp(opt, "--sample-timeout")) {
        rc = cli_num(opt, val, 0, 86400, &cfg->sample_timeout_s);
        if (!rc && cfg->sample_timeout_s == 0)
            cfg->sample_timeout_s = -1; /* no limit */
    } else if (!strcmp(opt, "--fetchers")) {
        int64_t n = 0;
        rc = cli_int(opt, val, 0, 256, &n);
        cfg->fetchers = n ? (int)n : -1; /* 0: none */
    } else if (!strcmp(opt, "--fetch-latency-ms")) {
        rc = cli_num(opt, val, 0, 60000, &cfg->fetch_latency_s);
        cfg->fetch_latency_s /= 1e3;
    } else if (!strcmp(opt, "--fetch-gbps")) {
        rc = cli_num(opt, val, 1e-6, 1e6, &cfg->fetch_bandwidth);
        cfg->fetch_bandwidth *= 1e9 / 8;
    } else if (!strcmp(opt, "--fetch-ahead-mib")) {
        int64_t n = 0;
        rc = cli_int(opt, val, 1, 1 << 20, &n);
        cfg->fetch_ahead_bytes = n << 20;
    } else if (!strcmp(opt, "--max-failed")) {
        rc = cli_num(opt, val, 0.001, 1, &cfg->max_failed_frac);
    } else if (!strcmp(opt, "--rank-byte-cap")) {
        rc = cli_int(opt, val, 1, INT64_MAX, &cfg->rank_byte_cap);
    } else {
        return 0;
    }
    if (rc)
        return -1;
    if (!strncmp(opt, "--cpu-", 6) && strcmp(opt, "--cpu-cost-scale"))
        cfg->stress = stress;
    if (!strcmp(opt, "--understate"))
        cfg->stress = stress;
    (*i)++;
    return 1;
}

/* ---- output files and interrupts ---- */

int cli_out_open(cli_out *o, const char *path)
{
    o->f = NULL;
    o->path = path;
    if (!path)
        return 0;
    if ((size_t)snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", path, (long)getpid()) >=
        sizeof o->tmp) {
        cli_err("cannot write %s: path too long", path);
        return 1;
    }
    if (!(o->f = fopen(o->tmp, "w"))) {
        cli_err("cannot write %s: %s", path, strerror(errno));
        return 1;
    }
    return 0;
}

int cli_out_commit(cli_out *o)
{
    if (!o->f)
        return 0;
    int bad = ferror(o->f);
    bad |= fclose(o->f) != 0;
    o->f = NULL;
    if (bad || rename(o->tmp, o->path) != 0) {
        cli_err("cannot write %s: %s", o->path, strerror(bad ? EIO : errno));
        unlink(o->tmp);
        return 1;
    }
    return 0;
}

void cli_out_abort(cli_out *o)
{
    if (!o->f)
        return;
    fclose(o->f);
    o->f = NULL;
    unlink(o->tmp);
}

/* Read by engine threads (should_stop) while a handler may write it: a lock-free atomic,
 * which a signal handler may store to (volatile sig_atomic_t is for one thread only). */
static atomic_int caught_signal;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may only store lock-free atomics");

static void on_signal(int sig)
{
    atomic_store(&caught_signal, sig);
}

void cli_catch_interrupts(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int cli_should_stop(void *user)
{
    (void)user;
    return atomic_load(&caught_signal) != 0;
}

int cli_interrupted(void)
{
    int sig = atomic_load(&caught_signal);
    return sig ? 128 + sig : 0;
}
