/*
 * cmd_gen.c - `datahelix gen --workload NAME --out DIR`: real media files
 * shaped like a workload, encoded with real encoders, and DIR/manifest.jsonl
 * from probing them.
 */
#include "cli.h"

#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: datahelix gen --workload NAME --out DIR [--samples N] [--seed S] [--scale mini|small|full]\n"
    "                     [--format files|wds] [--per-shard N] [-q|--quiet]\n"
    "\n"
    "Writes N samples (default: 4 global batches of the workload) as H.264 MP4, JPEG, PNG\n"
    "and FLAC files under DIR, scaled down by --scale (mini: resolution, duration and\n"
    "keyframe interval / 4, the default; small: / 2; full: as the workload), then probes\n"
    "every file and writes DIR/manifest.jsonl from what it measured.\n"
    "--format wds writes WebDataset shards instead (DIR/shards/00000.tar, ..., --per-shard\n"
    "samples each, default 100): per sample its media, a caption of the workload's text\n"
    "length (KEY.txt), a label (KEY.cls) and metadata (KEY.json: key, status, url); the\n"
    "manifest reads each member in place.\n"
    "Progress shows as a line on a terminal, elsewhere as a line every 30 s\n"
    "($DH_PROGRESS_SECONDS); --quiet silences it.\n";

static const cli_progress_what samples_made = {"gen", "samples"};

int cli_gen(int argc, char **argv)
{
    const char *workload = NULL, *out = NULL, *scale = "mini";
    int64_t samples = 0, seed = 1, per_shard = 100;
    const char *format = "files";
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            fputs(help, stdout);
            return 0;
        }
        if (!strcmp(o, "-q") || !strcmp(o, "--quiet")) {
            cli_progress_quiet();
            continue;
        }
        static const char *const known[] = {"--workload", "--out", "--scale", "--format",
                                            "--per-shard", "--samples", "--seed"};
        int ok = 0;
        for (size_t k = 0; k < sizeof known / sizeof *known; k++)
            ok |= !strcmp(o, known[k]);
        if (!ok) { /* an unknown option is named as such, with or without a value after it */
            return cli_unexpected("gen", o, (const char *const[]){help, NULL});
        }
        if (!val) {
            cli_err("gen: %s needs a value (see datahelix gen --help)", o);
            return CLI_USAGE;
        }
        i++;
        if (!strcmp(o, "--workload"))
            workload = val;
        else if (!strcmp(o, "--out"))
            out = val;
        else if (!strcmp(o, "--scale"))
            scale = val;
        else if (!strcmp(o, "--format"))
            format = val;
        else if (!strcmp(o, "--per-shard")) {
            if (cli_int(o, val, 1, 1000000, &per_shard))
                return CLI_USAGE;
        }
        else if (!strcmp(o, "--samples")) {
            if (cli_int(o, val, 1, 10000000, &samples))
                return CLI_USAGE;
        } else if (!strcmp(o, "--seed")) {
            if (cli_int(o, val, 0, INT64_MAX, &seed))
                return CLI_USAGE;
        } else {
            return cli_unexpected("gen", o, (const char *const[]){help, NULL});
        }
    }
    if (strcmp(format, "files") && strcmp(format, "wds")) {
        cli_err("gen: --format files or wds, not \"%s\"", format);
        return CLI_USAGE;
    }
    if (!workload || !out) {
        cli_err("gen needs --workload NAME and --out DIR (see datahelix gen --help)");
        return CLI_USAGE;
    }
    int64_t g = dh_workload_global_batch(workload);
    if (g < 0) {
        cli_err("unknown workload \"%s\" (datahelix sim --list)", workload);
        return CLI_USAGE;
    }
    if (!samples)
        samples = 4 * g;
    dh_gen_stats st;
    char err[512] = "";
    double t0 = cli_now();
    int rc = dh_workload_write_shards(workload, out, samples, (uint64_t)seed, scale,
                                      strcmp(format, "wds") ? 0 : per_shard,
                                      cli_progress, (void *)&samples_made, &st, err,
                                      sizeof err);
    if (rc) {
        cli_err("gen: %s [%s]", err[0] ? err : dh_strerror(rc), dh_err_name(rc));
        return rc == DH_EINVAL ? CLI_USAGE : 1;
    }
    int64_t shards = strcmp(format, "wds") ? 0 : (st.samples + per_shard - 1) / per_shard;
    printf("gen: %s (%s scale): %lld samples, %lld %s, %.1f MiB in %.1f s -> %s/manifest.jsonl\n",
           workload, scale, (long long)st.samples, (long long)(shards ? st.files : st.files),
           shards ? "media members in shards/" : "files", st.bytes / 1048576.0, cli_now() - t0,
           out);
    return 0;
}
