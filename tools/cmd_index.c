/*
 * cmd_index.c - `datahelix index DIR -o MANIFEST`: probe every file under DIR
 * from its headers and write the manifest. Skipped files are listed on stderr
 * with the reason; the summary line accounts for every file found.
 */
#include "cli.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static const char help[] =
    "usage: datahelix index DIR -o MANIFEST [options]\n"
    "       datahelix index SHARDS... -o MANIFEST [options]\n"
    "\n"
    "Probes every regular file under DIR (recursively; hidden entries skipped) from its\n"
    "headers only and writes one manifest line per media file, in path order. MANIFEST\n"
    "must lie in DIR or in a directory above it (manifest paths are relative to it).\n"
    "A .tar file is a WebDataset shard: one line per sample, read in place.\n"
    "Instead of DIR: shards (or media files) in the order given, as paths, brace patterns\n"
    "as WebDataset writes them ('data/{00000..00099}.tar', 'a/{x,y}.tar'), or list files\n"
    "(.txt, .list, .lst: one path per line, relative to the list's directory; blanks\n"
    "around a path, blank lines and # comments ignored).\n"
    "Shards and files on object storage are read by range, where they are: URLs\n"
    "http://..., https://... and s3://BUCKET/KEY (docs/STORAGE.md: endpoint, region and\n"
    "credentials from the AWS_* environment); the manifest names them by URL and pins\n"
    "each object's ETag. An S3 prefix ending in '/' (s3://BUCKET/PREFIX/, or s3://BUCKET)\n"
    "is listed: every object under it, at any depth, in key order.\n"
    "\n"
    "  -o, --output MANIFEST   where to write the manifest (required)\n"
    "  -j, --threads N         probing threads (default: one per CPU)\n"
    "  --on-error skip|fail    skip unprobeable files (default) or fail the run\n"
    "  --suffix EXT=KIND       a shard member suffix's kind, beyond or over the defaults\n"
    "                          (KIND: video, image, audio, text, label, meta, ignore;\n"
    "                          repeatable; e.g. --suffix gif=image --suffix json=ignore)\n"
    "  -q, --quiet             no progress (a line on a terminal, else one every 30 s)\n";

typedef struct {
    char **v;
    size_t n, cap;
} strs;

static int push(strs *l, const char *s, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v, l->cap = cap;
    }
    l->v[l->n] = strndup(s, len);
    return l->v[l->n] ? (int)(l->n++, 0) : -1;
}

/* 1 when a and b name one existing file. */
static int same_file(const char *a, const char *b)
{
    struct stat x, y;
    return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* Frees the lists and returns rc (every way out of index after they filled). */
static int drop(strs *a, strs *b, int rc)
{
    strs *l[] = {a, b};
    for (int k = 0; k < 2; k++) {
        for (size_t j = 0; j < l[k]->n; j++)
            free(l[k]->v[j]);
        free(l[k]->v);
        *l[k] = (strs){0};
    }
    return rc;
}

/*
 * Expands the first brace group of pattern ({A..B} with the width of A when it starts
 * with 0, descending when B < A, or {x,y,z}) and recurses on the rest; no group: the pattern itself. 0, or -1
 * with the error printed (a malformed group, over a million names).
 */
static int expand(const char *pat, strs *out)
{
    const char *open = strchr(pat, '{'), *close = open ? strchr(open, '}') : NULL;
    if (!open)
        return push(out, pat, strlen(pat));
    if (!close) {
        cli_err("index: \"%s\": a { without its }", pat);
        return -1;
    }
    char body[256], buf[4096];
    size_t blen = (size_t)(close - open - 1);
    if (blen >= sizeof body) {
        cli_err("index: \"%s\": a brace group over %zu bytes", pat, sizeof body);
        return -1;
    }
    memcpy(body, open + 1, blen);
    body[blen] = 0;
    char *dots = strstr(body, "..");
    if (dots) {
        char *end = NULL;
        *dots = 0;
        long long a = strtoll(body, &end, 10), b;
        int width = body[0] == '0' ? (int)strlen(body) : 0;
        int ok = end && !*end && body[0];
        b = strtoll(dots + 2, &end, 10);
        unsigned long long span = b >= a ? (unsigned long long)b - (unsigned long long)a
                                         : (unsigned long long)a - (unsigned long long)b;
        ok = ok && end && !*end && dots[2] && span < 1000000; /* no overflow: unsigned */
        if (!ok) {
            cli_err("index: \"%s\": expected {A..B} with integers A and B at most a million "
                    "apart", pat);
            return -1;
        }
        for (long long k = a, step = b >= a ? 1 : -1;; k += step) { /* descending too */
            snprintf(buf, sizeof buf, "%.*s%0*lld%s", (int)(open - pat), pat, width, k,
                     close + 1);
            if (expand(buf, out))
                return -1;
            if (k == b)
                break;
        }
        return 0;
    }
    for (char *save = NULL, *alt = strtok_r(body, ",", &save); alt;
         alt = strtok_r(NULL, ",", &save)) {
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(open - pat), pat, alt, close + 1);
        if (expand(buf, out))
            return -1;
    }
    return 0;
}

/* Adds the paths a list file names (relative to its own directory). 0 or -1 (printed). */
static int read_list(const char *list, strs *out)
{
    FILE *f = fopen(list, "r");
    if (!f) {
        cli_err("index: %s: %s", list, strerror(errno));
        return -1;
    }
    const char *slash = strrchr(list, '/');
    int dirlen = slash ? (int)(slash - list + 1) : 0;
    char line[4096], path[8300];
    int rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        size_t n = strcspn(line, "\r\n");
        while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t')) /* trailing blanks */
            n--;
        line[n] = 0;
        const char *p = line + strspn(line, " \t");
        if (!*p || *p == '#')
            continue;
        /* an object's URL as it is; a path relative to the list's directory */
        snprintf(path, sizeof path, "%.*s%s", *p == '/' || strstr(p, "://") ? 0 : dirlen, list,
                 p);
        rc = push(out, path, strlen(path));
    }
    fclose(f);
    return rc;
}

/* The objects under an S3 prefix, appended to paths; 0, or -2 (said: the store's answer,
 * not a usage mistake). */
static int list_prefix(const char *prefix, int quiet, strs *paths)
{
    char **urls = NULL, err[1024] = "";
    size_t n = 0;
    int rc = dh_store_list(prefix, &urls, &n, err, sizeof err);
    if (rc) {
        cli_err("index: cannot list %s: %s [%s]", prefix, err[0] ? err : dh_strerror(rc),
                dh_err_name(rc));
        return -2;
    }
    for (size_t k = 0; !rc && k < n; k++)
        rc = push(paths, urls[k], strlen(urls[k]));
    dh_store_list_free(urls, n);
    if (!rc && !n) {
        cli_err("index: %s: no objects under this prefix (keys start with it exactly: is it "
                "spelled as the bucket holds it?)", prefix);
        return -2;
    }
    if (!rc && !quiet)
        fprintf(stderr, "index: %s: %zu objects listed\n", prefix, n);
    return rc ? -2 : 0;
}

int cli_index(int argc, char **argv)
{
    dh_index_opts opts;
    dh_index_opts_default(&opts);
    const char *dir = NULL, *out = NULL;
    strs args = {0}, paths = {0};
    int fail_on_error = 0, quiet = 0;
    char suffixes[1024] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
        int lim = cli_limit_option(argc, argv, &i, &opts.limits);
        if (lim < 0)
            return drop(&args, &paths, CLI_USAGE);
        if (lim > 0)
            continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(help, stdout);
            fputs(cli_limits_help, stdout);
            return drop(&args, &paths, 0);
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!val) {
                cli_err("%s needs a file name", a);
                return drop(&args, &paths, CLI_USAGE);
            }
            out = argv[++i];
        } else if (!strcmp(a, "-j") || !strcmp(a, "--threads")) {
            if (cli_int(a, val, 1, 256, &x))
                return drop(&args, &paths, CLI_USAGE);
            opts.threads = (int)x;
            i++;
        } else if (!strcmp(a, "--on-error")) {
            if (!val || (strcmp(val, "skip") && strcmp(val, "fail"))) {
                cli_err("--on-error expects skip or fail");
                return drop(&args, &paths, CLI_USAGE);
            }
            fail_on_error = !strcmp(val, "fail");
            i++;
        } else if (!strcmp(a, "--suffix")) {
            char why[300];
            size_t have = strlen(suffixes);
            if (!val || strchr(val, ',') || dh_index_suffixes_check(val, why, sizeof why) ||
                have + strlen(val) + 2 > sizeof suffixes) {
                cli_err("--suffix: %s", !val ? "expects EXT=KIND" : strchr(val, ',') ?
                        "one EXT=KIND per --suffix" : have + strlen(val) + 2 > sizeof suffixes ?
                        "too many rules" : why);
                return drop(&args, &paths, CLI_USAGE);
            }
            snprintf(suffixes + have, sizeof suffixes - have, "%s%s", have ? "," : "", val);
            opts.suffixes = suffixes;
            i++;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (a[0] == '-') {
            return drop(&args, &paths,
                        cli_unexpected("index", a, (const char *const[]){help, NULL}));
        } else if (push(&args, a, strlen(a))) {
            return drop(&args, &paths, 1);
        }
    }
    if (!args.n || !out) {
        cli_err("index needs DIR (or shards) and -o MANIFEST (see datahelix index --help)");
        return drop(&args, &paths, CLI_USAGE);
    }
    if (dh_index_shard_name(out)) { /* a manifest named like a shard would be read as one next time */
        cli_err("index: -o %s: a manifest, not a shard: name it .jsonl (it would overwrite a "
                "shard, or be read as one)", out);
        return drop(&args, &paths, CLI_USAGE);
    }
    struct stat dst;
    if (args.n == 1 && stat(args.v[0], &dst) == 0 && S_ISDIR(dst.st_mode)) {
        dir = args.v[0];
    } else {
        for (size_t k = 0; k < args.n; k++) {
            strs one = {0};
            int rc = expand(args.v[k], &one);
            for (size_t j = 0; !rc && j < one.n; j++) {
                size_t l = strlen(one.v[j]);
                int list = (l > 4 && (!strcasecmp(one.v[j] + l - 4, ".txt") ||
                                      !strcasecmp(one.v[j] + l - 4, ".lst"))) ||
                           (l > 5 && !strcasecmp(one.v[j] + l - 5, ".list"));
                struct stat fst;
                int folder = l > 0 && one.v[j][l - 1] == '/';
                if (!strncasecmp(one.v[j], "s3://", 5) &&
                    (folder || !strchr(one.v[j] + 5, '/'))) {
                    rc = list_prefix(one.v[j], quiet, &paths);
                } else if (folder && strstr(one.v[j], "://")) {
                    cli_err("index: %s: an HTTP directory cannot be listed: name its shards "
                            "(a brace pattern such as '%s{00000..00099}.tar') or give a list "
                            "file of URLs; an S3 prefix (s3://BUCKET/PREFIX/) is listed",
                            one.v[j], one.v[j]);
                    rc = -1;
                } else if (!list && stat(one.v[j], &fst) == 0 && S_ISDIR(fst.st_mode)) {
                    cli_err("index: %s is a directory: give one directory alone, or shards",
                            one.v[j]);
                    rc = -1;
                } else {
                    rc = list ? read_list(one.v[j], &paths) : push(&paths, one.v[j], l);
                }
                if (!list && strpbrk(one.v[j], "*?[") && !strstr(one.v[j], "://") &&
                    access(one.v[j], F_OK) != 0)
                    cli_err("index: %s: no such file; a wildcard is the shell's to expand "
                            "(leave it unquoted); index itself expands brace patterns only",
                            one.v[j]);
            }
            for (size_t j = 0; j < one.n; j++)
                free(one.v[j]);
            free(one.v);
            if (rc)
                return drop(&args, &paths, rc == -2 ? 1 : CLI_USAGE);
        }
    }
    for (size_t k = 0; k < args.n + paths.n; k++) { /* never write over what is read */
        const char *in = k < args.n ? args.v[k] : paths.v[k - args.n];
        if (same_file(in, out)) {
            cli_err("index: -o %s is an input (%s): it would be overwritten; write the manifest "
                    "to another file", out, in);
            return drop(&args, &paths, CLI_USAGE);
        }
    }
    char parent[4096]; /* -o's directory must exist: the failure named only -o (a trial) */
    snprintf(parent, sizeof parent, "%s", out);
    char *slash = strrchr(parent, '/');
    if (slash)
        slash[slash == parent] = '\0'; /* "/m.jsonl": "/" */
    struct stat pst;
    if (slash && (stat(parent, &pst) != 0 || !S_ISDIR(pst.st_mode))) {
        const char *missing = NULL; /* an input that is not there either, named too */
        for (size_t k = 0; k < args.n && !missing; k++)
            if (strncasecmp(args.v[k], "s3://", 5) && access(args.v[k], F_OK) != 0)
                missing = args.v[k];
        cli_err("index: cannot write %s: no directory %s%s%s%s", out, parent,
                missing ? " (and the input " : "", missing ? missing : "",
                missing ? " does not exist either)" : "");
        return drop(&args, &paths, 1);
    }
    char prefix_hint[512] = ""; /* an s3:// input like a prefix without its '/' */
    for (size_t k = 0; k < args.n && !prefix_hint[0]; k++) {
        const char *a = args.v[k], *last = strrchr(a, '/');
        if (!strncasecmp(a, "s3://", 5) && strchr(a + 5, '/') && last[1] && !strchr(last, '.'))
            snprintf(prefix_hint, sizeof prefix_hint, "%s", a);
    }
    int64_t reported = 0;
    opts.diag = cli_print_diag;
    opts.diag_user = &reported;
    static const cli_progress_what files = {"index", "files"};
    if (quiet)
        cli_progress_quiet();
    opts.progress = cli_progress;
    opts.progress_user = (void *)&files;
    dh_index_stats st;
    double t0 = cli_now();
    int rc = dir ? dh_index_dir(dir, out, &opts, &st)
                 : dh_index_paths((const char *const *)paths.v, paths.n, out, &opts, &st);
    double secs = cli_now() - t0;
    if (rc == DH_EPATH)
        cli_err("index: %s must be inside %s or a directory above it, so that manifest paths "
                "stay inside the manifest's directory", out, dir ? dir : "every shard");
    else if (rc)
        cli_err("index %s -> %s: %s", dir ? dir : args.n == 1 ? args.v[0] : "(its inputs)", out,
                dh_strerror(rc));
    char where[4096]; /* DIR's name outlives the arguments dropped here */
    snprintf(where, sizeof where, "%s", dir ? dir : "the input");
    if (drop(&args, &paths, rc))
        return 1;
    printf("index: %lld file%s: %lld probed + %lld skipped", (long long)st.files,
           st.files == 1 ? "" : "s", (long long)st.probed, (long long)st.skipped);
    if (st.shards)
        printf(" + %lld tar shards: %lld samples + %lld skipped", (long long)st.shards,
               (long long)st.shard_samples, (long long)st.shard_skipped);
    if (st.shards_unread)
        printf(" (%lld shards not read at all)", (long long)st.shards_unread);
    if (st.scanned)
        printf(" (%lld without a container frame index: packets scanned, not decoded)",
               (long long)st.scanned);
    if (st.members_ignored)
        printf(" (%lld shard members of no known kind ignored: .%s; --suffix EXT=KIND gives one)",
               (long long)st.members_ignored, st.ignored_suffixes);
    if (st.media_bytes >= (16 << 20)) /* a share of the media only means something at size */
        printf(" (read %.1f MiB for %.1f MiB of media: %.2f%%)", st.bytes_read / 1048576.0,
               st.media_bytes / 1048576.0, 100.0 * (double)st.bytes_read / (double)st.media_bytes);
    else if (st.media_bytes > 0)
        printf(" (read %.0f KiB of headers for %.0f KiB of media)", st.bytes_read / 1024.0,
               st.media_bytes / 1024.0);
    int64_t units = st.probed + st.skipped + st.shard_samples + st.shard_skipped;
    int none = st.probed + st.shard_samples == 0; /* an empty manifest only fails later */
    int refused = (fail_on_error && (st.skipped || st.shard_skipped || st.shards_unread)) || none;
    printf(" in %.2f s (%.0f %s/s) %s %s\n", secs, secs > 0 ? units / secs : 0.0,
           st.shards ? "samples" : "files", refused ? "- not written:" : "->", out);
    if (none) {
        unlink(out); /* an empty manifest would only fail later, further from the cause */
        if (st.skipped || st.shard_skipped || st.shards_unread)
            cli_err("index: nothing indexed: every input was skipped (see the reasons above); "
                    "%s not written", out);
        else if (st.shards)
            cli_err("index: nothing indexed: the %lld tar shard%s hold%s no member; %s not "
                    "written", (long long)st.shards, st.shards == 1 ? "" : "s",
                    st.shards == 1 ? "s" : "", out);
        else
            cli_err("index: nothing indexed: %s holds no file to probe (hidden entries and "
                    ".jsonl manifests are not walked); %s not written", where, out);
        if (prefix_hint[0]) /* s3://b/train meant as a prefix? */
            cli_err("index: %s: a prefix to list ends in '/' (%s/)", prefix_hint, prefix_hint);
        return 1;
    }
    if (fail_on_error && (st.skipped || st.shard_skipped || st.shards_unread)) {
        unlink(out); /* nothing half-usable is left behind */
        cli_err("index: --on-error fail: %s not written (every input must be read)", out);
        return 1;
    }
    return 0;
}
