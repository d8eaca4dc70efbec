/*
 * bench_torch.c - the `torch` contender of `datahelix bench --mode real`:
 * the PyTorch DataLoader (bench/torch_contender.py, run with Debian's
 * python3-torch and python3-av) on the same manifest, spec, ranks, workers
 * and emulated accelerator time as our runs. We hand it everything it must
 * do per sample (the frames, output sizes, tiles and audio parameters our
 * spec derives, the seconds our ranks sleep), read back its raw timings and
 * let the library turn them into a dh_result with our metrics' definitions.
 *
 * DESIGN: a child process (fork + exec, its own process group so a Ctrl-C
 * or a failure takes its ranks and DataLoader workers down with it), files
 * in a private temporary directory, a line format a C reader parses with
 * sscanf. The contender measures itself; nothing here times it.
 */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef DH_SOURCE_DIR
#define DH_SOURCE_DIR "."
#endif
#ifndef DH_DATA_DIR
#define DH_DATA_DIR "/usr/local/share/datahelix"
#endif

#define CONTENDER "torch_contender.py"

static const char *python(void)
{
    const char *p = getenv("DH_PYTHON");
    return p && *p ? p : "/usr/bin/python3"; /* Debian's torch and PyAV are installed for it */
}

/* The contender script: $DH_TORCH_CONTENDER, the source tree's, or the installed one. */
static const char *script(char *buf, size_t len)
{
    const char *env = getenv("DH_TORCH_CONTENDER");
    if (env && *env)
        return env;
    snprintf(buf, len, "%s/bench/" CONTENDER, DH_SOURCE_DIR);
    if (access(buf, R_OK) == 0)
        return buf;
    snprintf(buf, len, "%s/" CONTENDER, DH_DATA_DIR);
    return buf;
}

/* Runs argv (NULL-terminated) in its own process group; its exit status, 128 + signal, or
 * -1. A bench interrupted meanwhile (Ctrl-C) terminates the whole group. */
static int spawn_wait(char *const argv[], int quiet)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        setpgid(0, 0);
        if (quiet) {
            FILE *devnull = freopen("/dev/null", "w", stderr);
            (void)devnull;
        }
        execv(argv[0], argv);
        fprintf(stderr, "datahelix: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    int status = 0, killed = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR)
            return -1;
        if (!killed && cli_should_stop(NULL)) {
            kill(-pid, SIGTERM);
            killed = 1;
        }
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    kill(-pid, SIGKILL); /* DataLoader workers left behind by a crashed rank */
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int bench_torch_available(char *why, size_t len)
{
    char buf[4096];
    const char *s = script(buf, sizeof buf);
    if (access(s, R_OK) != 0) {
        snprintf(why, len, "%s not found (set DH_TORCH_CONTENDER)", s);
        return 0;
    }
    char *argv[] = {(char *)python(), "-c", "import numpy, torch, av", NULL};
    int rc = spawn_wait(argv, 1);
    if (rc != 0) {
        snprintf(why, len,
                 "%s cannot import torch, av and numpy (apt-get install python3-torch "
                 "python3-av python3-numpy; DH_PYTHON chooses the interpreter)",
                 python());
        return 0;
    }
    return 1;
}

/* A JSON string of s (quotes, backslashes and control characters escaped). */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* One media item's work order; 0, or an error with its reason in err. wds: the pipeline
 * reads shards, so the item must be a shard's member. */
static int write_media(FILE *f, const dh_spec *spec, const dh_manifest *m, int64_t i, int32_t j,
                       int wds, char *err, size_t errlen)
{
    dh_media_info mi;
    dh_media_derived d;
    dh_media_recipe rc;
    int r = dh_manifest_media(m, i, j, &mi);
    if (!r)
        r = dh_derive_media(spec, &mi, &d);
    if (!r)
        r = dh_media_recipe_of(spec, &mi, &rc);
    if (r) {
        snprintf(err, errlen, "sample %lld media %d: %s", (long long)i, j, dh_strerror(r));
        return r;
    }
    if (wds && !(mi.offset > 0 && mi.member)) {
        snprintf(err, errlen, "the wds contender reads WebDataset shards, and %s is a loose "
                 "file (bench --format wds makes shards)", mi.path);
        return DH_EINVAL;
    }
    char path[8192];
    snprintf(path, sizeof path, "%s%s%s", mi.path[0] == '/' ? "" : dh_manifest_dir(m),
             mi.path[0] == '/' ? "" : "/", mi.path);
    const char *type = mi.type == DH_MEDIA_VIDEO   ? "video"
                       : mi.type == DH_MEDIA_IMAGE ? "image"
                                                   : "audio";
    fprintf(f, "%s{\"type\":\"%s\",\"path\":", j ? "," : "", type);
    json_str(f, path);
    fprintf(f, ",\"resize\":\"%s\",\"out_w\":%d,\"out_h\":%d", rc.resize, d.out_width,
            d.out_height);
    if (mi.offset > 0) { /* a shard's member: where its bytes are, and its name */
        fprintf(f, ",\"offset\":%lld,\"bytes\":%lld,\"member\":", (long long)mi.offset,
                (long long)mi.bytes);
        json_str(f, mi.member ? mi.member : "");
    }
    if (mi.type == DH_MEDIA_VIDEO) {
        int64_t cap = d.sampled_frames > 0 ? d.sampled_frames : 1;
        int64_t *fr = malloc((size_t)cap * sizeof *fr);
        int64_t n = fr ? dh_video_sample_frames(spec, &mi, fr, cap) : DH_ENOMEM;
        if (n <= 0) {
            free(fr);
            snprintf(err, errlen, "sample %lld: no frames to sample (%s)", (long long)i,
                     n < 0 ? dh_strerror((int)n) : "empty");
            return n < 0 ? (int)n : DH_EINVAL;
        }
        fprintf(f, ",\"frames\":[");
        for (int64_t k = 0; k < n; k++)
            fprintf(f, "%s%lld", k ? "," : "", (long long)fr[k]);
        fprintf(f, "]");
        free(fr);
    } else if (mi.type == DH_MEDIA_IMAGE) {
        fprintf(f, ",\"tile_cols\":%lld,\"tile_rows\":%lld,\"base_tile\":%d",
                (long long)rc.tile_cols, (long long)rc.tile_rows, rc.base_tile);
    } else {
        fprintf(f, ",\"sample_rate\":%d,\"mel_bins\":%d,\"mel_fps\":%d,\"mel_frames\":%lld",
                rc.sample_rate, rc.mel_bins, rc.mel_fps,
                (long long)(d.ndim >= 2 ? d.shape[1] : d.shape[0]));
    }
    fprintf(f, "}");
    return 0;
}

/* The contender's task file; 0 or 1 (error printed). */
static int write_task(const char *path, const dh_run_config *c, const dh_spec *spec,
                      const double *gpu, double c0, int wds)
{
    const dh_manifest *m = c->manifest;
    int64_t n = dh_manifest_count(m);
    FILE *f = fopen(path, "w");
    if (!f) {
        cli_err("bench torch: cannot write %s: %s", path, strerror(errno));
        return 1;
    }
    fprintf(f, "{\"pipeline\":\"%s\",\"workload\":", wds ? "wds" : "map");
    json_str(f, c->workload);
    fprintf(f, ",\"ranks\":%d,\"workers\":%d,\"global_batch\":%lld,\"steps\":%lld,"
            "\"seed\":%llu,\"step_fixed_s\":%.9g,\"gpu_s\":[",
            c->ranks, c->workers, (long long)c->global_batch, (long long)c->steps,
            (unsigned long long)c->seed, c0);
    for (int64_t i = 0; i < n; i++)
        fprintf(f, "%s%.9g", i ? "," : "", gpu[i]);
    fprintf(f, "],\"samples\":[");
    char err[512] = "";
    int rc = 0;
    for (int64_t i = 0; i < n && !rc; i++) {
        dh_sample_info si;
        rc = dh_manifest_sample(m, i, &si);
        fprintf(f, "%s\n{\"id\":", i ? "," : "");
        json_str(f, rc ? "" : si.id);
        fprintf(f, ",\"media\":[");
        for (int32_t j = 0; !rc && j < si.media_count; j++)
            rc = write_media(f, spec, m, i, j, wds, err, sizeof err);
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    if (fclose(f) != 0 && !rc) {
        cli_err("bench torch: writing %s: %s", path, strerror(errno));
        return 1;
    }
    if (rc)
        cli_err("bench torch: %s", err[0] ? err : dh_strerror(rc));
    return rc ? 1 : 0;
}

/* Reads the contender's timings into x (arrays allocated here); 0 or 1 (error printed). */
static int read_timings(const char *path, const dh_run_config *c, const double *gpu,
                        dh_external_run *x)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        cli_err("bench torch: the contender left no timings (%s: %s)", path, strerror(errno));
        return 1;
    }
    int64_t S = c->steps, R = c->ranks, n = dh_manifest_count(c->manifest), lineno = 0;
    dh_external_batch *b = calloc((size_t)(S * R), sizeof *b);
    dh_external_step *st = calloc((size_t)S, sizeof *st);
    int64_t *seen = calloc((size_t)(S * R), sizeof *seen);
    double makespan = -1;
    char line[512];
    double *first = malloc((size_t)S * sizeof *first); /* each step's first task start */
    int bad = !b || !st || !seen || !first;
    for (int64_t k = 0; !bad && k < S * R; k++)
        b[k].asked = -1;
    for (int64_t k = 0; !bad && k < S; k++)
        first[k] = -1;
    while (!bad && fgets(line, sizeof line, f)) {
        lineno++;
        long long s, r, idx;
        int ok;
        double t1, t2, t3, t4;
        if (sscanf(line, "batch %lld %lld %lf %lf %lf", &s, &r, &t1, &t2, &t3) == 5 &&
            s >= 0 && s < S && r >= 0 && r < R) {
            dh_external_batch *e = &b[s * R + r];
            e->asked = t1, e->ready = t2, e->compute = t3;
        } else if (sscanf(line, "sample %lld %lld %lld %lf %lf %lf %d", &s, &r, &idx, &t1, &t2,
                          &t3, &ok) == 7 &&
                   s >= 0 && s < S && r >= 0 && r < R && idx >= 0 && idx < n) {
            dh_external_step *e = &st[s];
            dh_external_batch *eb = &b[s * R + r];
            e->gpu_sum += gpu[idx];
            e->gpu_max = gpu[idx] > e->gpu_max ? gpu[idx] : e->gpu_max;
            e->cpu_sum += t3;
            e->failed += !ok;
            eb->longest_task = t2 > eb->longest_task ? t2 : eb->longest_task;
            seen[s * R + r]++;
            if (first[s] < 0 || t1 < first[s])
                first[s] = t1;
        } else if (sscanf(line, "end %lf", &t4) == 1) {
            makespan = t4;
        } else {
            cli_err("bench torch: %s:%lld: unexpected line: %.80s", path, (long long)lineno,
                    line);
            bad = 1;
        }
    }
    fclose(f);
    for (int64_t k = 0; !bad && k < S * R; k++)
        if (b[k].asked < 0 || seen[k] != c->global_batch / R) {
            cli_err("bench torch: step %lld rank %lld: %s", (long long)(k / R),
                    (long long)(k % R),
                    b[k].asked < 0 ? "no batch recorded" : "a batch of the wrong size");
            bad = 1;
        }
    if (!bad && makespan <= 0) {
        cli_err("bench torch: the contender's timings have no end");
        bad = 1;
    }
    for (int64_t k = 0; !bad && k < S * R; k++) /* seen by every rank of its step */
        b[k].first_task_start = first[k / R];
    free(seen);
    free(first);
    if (bad) {
        free(b);
        free(st);
        return 1;
    }
    x->batches = b;
    x->step_info = st;
    x->makespan_s = makespan;
    return 0;
}

static void remove_dir(const char *dir, const char *const *files)
{
    char p[4200];
    for (; *files; files++) {
        snprintf(p, sizeof p, "%s/%s", dir, *files);
        unlink(p);
    }
    rmdir(dir);
}

int bench_torch(const dh_run_config *c, dh_result *r)
{
    int wds = !strcmp(c->policy, "wds");
    if (!c->manifest || c->global_batch % c->ranks) {
        cli_err("bench torch: needs a manifest and a global batch that the ranks divide");
        return 1;
    }
    dh_spec *spec = NULL;
    if (!c->spec && dh_spec_builtin(c->workload, &spec)) {
        cli_err("bench torch: no spec for %s", c->workload);
        return 1;
    }
    int64_t n = dh_manifest_count(c->manifest);
    double *gpu = calloc((size_t)(n ? n : 1), sizeof *gpu), c0 = 0;
    const char *tmpdir = getenv("TMPDIR");
    char err[512] = "", dir[4096], task[4200], out[4200], sbuf[4096];
    snprintf(dir, sizeof dir, "%s/dh-bench-torch-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    dh_run_config lc = *c; /* the emulated time our ranks sleep (any policy gives the same) */
    lc.policy = "local";
    int rc = gpu ? dh_run_emulated_gpu(&lc, gpu, n, &c0, err, sizeof err) : DH_ENOMEM;
    if (rc) {
        cli_err("bench torch: %s", err[0] ? err : dh_strerror(rc));
        free(gpu);
        dh_spec_free(spec);
        return 1;
    }
    if (!mkdtemp(dir)) {
        cli_err("bench torch: cannot create a temporary directory: %s", strerror(errno));
        free(gpu);
        dh_spec_free(spec);
        return 1;
    }
    snprintf(task, sizeof task, "%s/task.json", dir);
    snprintf(out, sizeof out, "%s/timings.txt", dir);
    int failed = write_task(task, c, c->spec ? c->spec : spec, gpu, c0, wds);
    dh_spec_free(spec);
    if (!failed) {
        char *argv[] = {(char *)python(), (char *)script(sbuf, sizeof sbuf), task, out, NULL};
        int st = spawn_wait(argv, 0);
        if (st != 0 && !cli_interrupted()) {
            cli_err("bench torch: %s %s exited with status %d%s", argv[0], argv[1], st,
                    st == 3 ? " (torch, PyAV or numpy missing)" : "");
        }
        failed = st != 0;
    }
    dh_external_run x = {.workload = c->workload, .policy = wds ? "wds" : "torch",
                         .ranks = c->ranks,
                         .workers = c->workers, .global_batch = c->global_batch,
                         .steps = c->steps, .step_fixed_s = c0};
    if (!failed)
        failed = read_timings(out, c, gpu, &x);
    if (!failed) {
        dh_result_init(r);
        rc = dh_result_from_steps(&x, r, err, sizeof err);
        if (rc) {
            cli_err("bench torch: %s", err[0] ? err : dh_strerror(rc));
            failed = 1;
        }
    }
    free((void *)x.batches);
    free((void *)x.step_info);
    free(gpu);
    static const char *const files[] = {"task.json", "timings.txt", "timings.txt.tmp", NULL};
    if (failed && getenv("DH_BENCH_KEEP")) /* for debugging the contender */
        fprintf(stderr, "datahelix: bench torch: kept %s\n", dir);
    else
        remove_dir(dir, files);
    return failed;
}
