/*
 * main.c - the datahelix command line: dispatches to one file per subcommand.
 */
#include "cli.h"

#include <malloc.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: datahelix <command> [options]\n"
    "\n"
    "commands:\n"
    "  index DIR -o MANIFEST      probe media headers under DIR, write a JSON Lines manifest\n"
    "  inspect MANIFEST           distributions and derived sizes of a manifest\n"
    "  sim                        simulate one policy on a workload or manifest\n"
    "  run --manifest M           the real engine: decode real media for emulated ranks\n"
    "  serve --manifest M         the per-node agent: serve trainer processes over shared memory\n"
    "  gen --workload W --out D   real media shaped like a workload, and its manifest\n"
    "  bench --mode real          the same comparison on the real engine, real media\n"
    "  demo                       the main job: real workloads, three policies, table and trace\n"
    "  bench --mode sim           every workload x policy in the simulator, with summary ratios\n"
    "  report RESULT.json -o R    one HTML page of charts from results (and a trace)\n"
    "  version                    print the version\n"
    "\n"
    "Run 'datahelix <command> --help' for a command's options.\n";

int main(int argc, char **argv)
{
    /* A data plane allocates and frees decoded frames and fetched ranges all day on many
     * threads: glibc's default gives freed memory back to the kernel at 128 KiB of slack
     * per arena and faults it in again on the next sample, which cost a run from an object
     * store (16 fetcher threads, each an arena) 25% of its throughput on 2 cores
     * (bench/RESULTS.md). Kept up to 64 MiB of slack per arena, unless the environment
     * says otherwise. */
    if (!getenv("MALLOC_TRIM_THRESHOLD_"))
        mallopt(M_TRIM_THRESHOLD, 64 << 20);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : 0;
    }
    const char *cmd = argv[1];
    dh_quiet_ffmpeg_logs(); /* the CLI reports decode errors itself */
    atexit(cli_diag_flush);  /* the count of errors past the first ones shown */
    cli_progress_check_env();
    if (!strcmp(cmd, "index"))
        return cli_index(argc - 1, argv + 1);
    if (!strcmp(cmd, "inspect"))
        return cli_inspect(argc - 1, argv + 1);
    if (!strcmp(cmd, "sim"))
        return cli_sim(argc - 1, argv + 1);
    if (!strcmp(cmd, "run"))
        return cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve"))
        return cli_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "gen"))
        return cli_gen(argc - 1, argv + 1);
    if (!strcmp(cmd, "demo"))
        return cli_demo(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench"))
        return cli_bench(argc - 1, argv + 1);
    if (!strcmp(cmd, "report"))
        return cli_report(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("datahelix %s\n", dh_version_string());
        return 0;
    }
    cli_err("unknown command \"%s\"", cmd);
    fputs(usage, stderr);
    return CLI_USAGE;
}
