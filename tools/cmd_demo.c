/*
 * cmd_demo.c - `datahelix demo`: the main job, end to end on this machine.
 * Generates three small real workloads (H.264 clips, native-resolution
 * video, any-res JPEG/PNG), runs local, pool and helix on each with the real
 * engine (R=4 emulated ranks, W=2 workers), prints the comparison table, and
 * writes the JSON results and a Chrome trace of one helix run.
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char help[] =
    "usage: datahelix demo [--out DIR] [--steps N] [--repeats N] [--run-seconds S]\n"
    "\n"
    "Generates kinetics-clips, native-res-video and anyres-images as real media under\n"
    "DIR/data (default DIR: demo-out), runs local, pool and helix on each with the real\n"
    "engine (each policy --repeats times, default 3, interleaved, one calibration per\n"
    "workload; each run about --run-seconds, default 3, but at least --steps, default 12),\n"
    "prints the table with each policy's median and range and which\n"
    "differences are within that noise, and writes DIR/bench-real.json (and its report,\n"
    "DIR/bench-real.html), DIR/trace.json and DIR/report.html: the bench and the traced run\n"
    "drawn on one page (datahelix report).\n";

int cli_demo(int argc, char **argv)
{
    const char *out = "demo-out", *steps = "12", *repeats = "3", *secs = "3";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(help, stdout);
            return 0;
        }
        if (i + 1 < argc && !strcmp(argv[i], "--out"))
            out = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--steps"))
            steps = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--repeats"))
            repeats = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--run-seconds"))
            secs = argv[++i];
        else {
            return cli_unexpected("demo", argv[i], (const char *const[]){help, NULL});
        }
    }
    if (mkdir(out, 0777) != 0 && errno != EEXIST) {
        cli_err("demo: cannot create %s: %s", out, strerror(errno));
        return 1;
    }
    char data[2048], json[4096], trace[4096], manifest[4096], run_json[4096];
    snprintf(data, sizeof data, "%s/data", out);
    snprintf(json, sizeof json, "%s/bench-real.json", out);
    snprintf(trace, sizeof trace, "%s/trace.json", out);
    snprintf(run_json, sizeof run_json, "%s/helix-run.json", out);
    snprintf(manifest, sizeof manifest, "%s/native-res-video/manifest.jsonl", data);
    printf("DataHelix demo: real media decoded on this machine by 2 worker threads for 4 emulated\n"
           "GPU ranks (they sleep each batch's modelled compute time). Policies: local (PyTorch\n"
           "DataLoader per rank), pool (shared actor pool, FIFO), helix (balanced + least slack).\n\n");
    fflush(stdout);
    char *bench_argv[] = {"bench", "--mode", "real", "--workloads",
                          "kinetics-clips,native-res-video,anyres-images", "--policies",
                          "local,pool,helix", "--data", data, "--steps", (char *)steps,
                          "--repeats", (char *)repeats, "--run-seconds", (char *)secs,
                          "--json", json, NULL};
    int rc = cli_bench(17, bench_argv); /* Ctrl-C: its accounting, then 130 from here */
    if (rc)
        return rc;
    printf("\none helix run, traced:\n");
    fflush(stdout);
    char *run_argv[] = {"run", "--manifest", manifest, "--workload", "native-res-video",
                        "--policy", "helix", "--ranks", "4", "--workers", "2", "--batch", "16",
                        "--steps", (char *)steps, "--trace", trace, "--json", run_json,
                        "--calibrate", "16", NULL};
    rc = cli_run(21, run_argv);
    char report[4200];
    snprintf(report, sizeof report, "%s/report.html", out);
    const char *results[] = {json, run_json};
    if (!rc && !(rc = cli_report_write(results, 2, trace, report)))
        printf("\nresults: %s (all runs), %s (the traced run)\nChrome trace (open in Perfetto): "
               "%s\nreport (open in a browser): %s\nmedia and manifests: %s/*/\n",
               json, run_json, trace, report, data);
    return rc;
}
