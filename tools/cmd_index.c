/*
 * cmd_index.c - `datahelix index DIR -o MANIFEST`: probe every file under DIR
 * from its headers and write the manifest. Skipped files are listed on stderr
 * with the reason; the summary line accounts for every file found.
 */
#include "cli.h"

#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: datahelix index DIR -o MANIFEST [options]\n"
    "\n"
    "Probes every regular file under DIR (recursively; hidden entries skipped) from its\n"
    "headers only and writes one manifest line per media file, in path order. MANIFEST\n"
    "must lie in DIR or in a directory above it (manifest paths are relative to it).\n"
    "\n"
    "  -o, --output MANIFEST   where to write the manifest (required)\n"
    "  -j, --threads N         probing threads (default: one per CPU)\n"
    "  --on-error skip|fail    skip unprobeable files (default) or fail the run\n"
    "  -q, --quiet             no progress line\n";

static void progress(int64_t done, int64_t total, void *user)
{
    (void)user;
    fprintf(stderr, "\rindex: %lld/%lld files", (long long)done, (long long)total);
    if (done == total)
        fputc('\n', stderr);
}

int cli_index(int argc, char **argv)
{
    dh_index_opts opts;
    dh_index_opts_default(&opts);
    const char *dir = NULL, *out = NULL;
    int fail_on_error = 0, quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        int lim = cli_limit_option(argc, argv, &i, &opts.limits);
        if (lim < 0)
            return CLI_USAGE;
        if (lim > 0)
            continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            fputs(cli_limits_help, stdout);
            return 0;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!val) {
                cli_err("%s needs a file name", a);
                return CLI_USAGE;
            }
            out = argv[++i];
        } else if (!strcmp(a, "-j") || !strcmp(a, "--threads")) {
            if (cli_int(a, val, 1, 256, &x))
                return CLI_USAGE;
            opts.threads = (int)x;
            i++;
        } else if (!strcmp(a, "--on-error")) {
            if (!val || (strcmp(val, "skip") && strcmp(val, "fail"))) {
                cli_err("--on-error expects skip or fail");
                return CLI_USAGE;
            }
            fail_on_error = !strcmp(val, "fail");
            i++;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (a[0] == '-' || dir) {
            cli_err("index: unexpected argument \"%s\" (see datahelix index --help)", a);
            return CLI_USAGE;
        } else {
            dir = a;
        }
    }
    if (!dir || !out) {
        cli_err("index needs DIR and -o MANIFEST (see datahelix index --help)");
        return CLI_USAGE;
    }
    int64_t reported = 0;
    opts.diag = cli_print_diag;
    opts.diag_user = &reported;
    if (!quiet && isatty(STDERR_FILENO))
        opts.progress = progress;
    dh_index_stats st;
    double t0 = cli_now();
    int rc = dh_index_dir(dir, out, &opts, &st);
    double secs = cli_now() - t0;
    if (rc == DH_EPATH) {
        cli_err("index: %s must be inside %s or a directory above it, so that manifest paths "
                "stay inside the manifest's directory", out, dir);
        return 1;
    }
    if (rc) {
        cli_err("index %s -> %s: %s", dir, out, dh_strerror(rc));
        return 1;
    }
    printf("index: %lld files: %lld probed + %lld skipped", (long long)st.files,
           (long long)st.probed, (long long)st.skipped);
    if (st.shards)
        printf(" + %lld tar shards: %lld samples + %lld skipped", (long long)st.shards,
               (long long)st.shard_samples, (long long)st.shard_skipped);
    if (st.scanned)
        printf(" (%lld without a container frame index: packets scanned, not decoded)",
               (long long)st.scanned);
    if (st.media_bytes > 0)
        printf(" (read %.1f MiB for %.1f MiB of media: %.2f%%)", st.bytes_read / 1048576.0,
               st.media_bytes / 1048576.0, 100.0 * (double)st.bytes_read / (double)st.media_bytes);
    int64_t units = st.probed + st.skipped + st.shard_samples + st.shard_skipped;
    printf(" in %.2f s (%.0f %s/s) -> %s\n", secs, secs > 0 ? units / secs : 0.0,
           st.shards ? "samples" : "files", out);
    return fail_on_error && (st.skipped || st.shard_skipped) ? 1 : 0;
}
