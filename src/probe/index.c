/*
 * index.c - a directory of media files -> a manifest, probing in parallel.
 *
 * DESIGN: the walk collects every regular file (hidden entries and the
 * output manifest excluded) and sorts the paths, so the manifest is the same
 * whatever the thread count or the file system's listing order. Worker
 * threads claim files through one atomic counter and write only their own
 * result slots; the calling thread reports progress while they run and, once
 * they are joined, writes the lines in path order and reports each skipped
 * file through the diag callback. The manifest is written to a temporary
 * file and renamed into place, so a failed run never leaves half a manifest.
 */
#include "probe.h"

#include "../codec/source.h"
#include "../store/store.h"

#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int rc;
    char *err;
    dh_probe_result res;
    int shard;             /* a .tar: its samples in sr instead */
    dh__shard_result sr;
} file_result;

typedef struct {
    char *root; /* canonical DIR */
    char prefix[PATH_MAX]; /* DIR as the manifest's directory sees it */
    char **rel; /* paths relative to root, sorted */
    size_t n, cap;
    dev_t skip_dev; /* the output manifest, if it already exists */
    ino_t skip_ino;
    file_result *results;
    atomic_size_t next;
    atomic_size_t done;
    pthread_mutex_t lock; /* guards nothing but the wait on all_done */
    pthread_cond_t all_done;
    const dh_index_opts *opts;
} index_job;

void dh_index_opts_default(dh_index_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    dh_limits_default(&opts->limits);
}

int dh_index_shard_name(const char *name)
{
    /* an object's URL: its path decides, not a query string (a presigned URL's) */
    size_t len = strstr(name, "://") ? strcspn(name, "?#") : strlen(name);
    static const char *const ends[] = {".tar", ".tar.gz", ".tgz", ".tar.zst", ".tar.zstd",
                                       ".tar.bz2", ".tar.xz"};
    for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
        size_t n = strlen(ends[k]);
        if (len > n && !strncasecmp(name + len - n, ends[k], n))
            return 1;
    }
    return 0;
}

static int add_path(index_job *j, const char *rel)
{
    if (dh__grow((void **)&j->rel, &j->cap, j->n + 1, sizeof *j->rel))
        return DH_ENOMEM;
    j->rel[j->n] = strdup(rel);
    return j->rel[j->n++] ? 0 : DH_ENOMEM;
}

/*
 * Recursive walk below root/rel. A symbolic link to a regular file is indexed
 * under the link's path (dataset caches are often links to blobs) when it
 * resolves inside the root (probing opens it as a run will, beneath the root:
 * a link that leaves it is skipped with that reason); links to directories
 * are not followed, so the walk cannot loop.
 */
/* A JSON Lines file (a manifest, say of an earlier index run): not media, not walked. */
static int is_manifest(const char *name)
{
    size_t n = strlen(name);
    return n > 6 && !strcasecmp(name + n - 6, ".jsonl");
}

static int walk(index_job *j, const char *rel)
{
    char dirpath[PATH_MAX];
    snprintf(dirpath, sizeof dirpath, "%s%s%s", j->root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(dirpath);
    if (!d)
        return -errno;
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char child[PATH_MAX], full[PATH_MAX];
        int n1 = snprintf(child, sizeof child, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
        int n2 = snprintf(full, sizeof full, "%s/%s", j->root, child);
        if (n1 >= (int)sizeof child || n2 >= (int)sizeof full)
            continue;
        struct stat st;
        if (lstat(full, &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode) && (stat(full, &st) != 0 || !S_ISREG(st.st_mode)))
            continue;
        if (S_ISDIR(st.st_mode))
            rc = walk(j, child);
        else if (S_ISREG(st.st_mode) && !(st.st_dev == j->skip_dev && st.st_ino == j->skip_ino) &&
                 !is_manifest(e->d_name))
            rc = add_path(j, child);
    }
    closedir(d);
    return rc;
}

/* How input i is named in messages: its path, or an object's URL without credentials. */
static void full_name(const index_job *j, size_t i, char *out, size_t len)
{
    if (dh__is_remote(j->rel[i]))
        dh__store_display(j->rel[i], out, len);
    else
        snprintf(out, len, "%s/%s", j->root, j->rel[i]);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void *probe_worker(void *arg)
{
    index_job *j = arg;
    char full[PATH_MAX], err[512];
    for (;;) {
        size_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n)
            break;
        full_name(j, i, full, sizeof full);
        err[0] = 0;
        file_result *fr = &j->results[i];
        if (dh_index_shard_name(j->rel[i])) { /* a WebDataset shard (a compressed one is named) */
            fr->shard = 1;
            fr->rc = dh__index_shard(j->root, j->rel[i], j->prefix, &j->opts->limits,
                                    j->opts->suffixes, &fr->sr);
            if (fr->rc)
                fr->err = strdup(dh_strerror(fr->rc));
            goto done;
        }
        /* Beneath the root, as a run will open it: a link that leaves DIR is skipped. */
        dh__media_src src = {.root = j->root, .path = j->rel[i]};
        fr->rc = dh__probe_src(&src, &j->opts->limits, &fr->res, err, sizeof err);
        if (fr->rc)
            fr->err = strdup(err[0] ? err : dh_strerror(fr->rc));
    done:
        if (atomic_fetch_add(&j->done, 1) + 1 == j->n) {
            pthread_mutex_lock(&j->lock);
            pthread_cond_signal(&j->all_done);
            pthread_mutex_unlock(&j->lock);
        }
    }
    return NULL;
}

static int write_line(FILE *f, const char *id, const dh_probe_result *r, const char *path)
{
    json_t *line = json_object();
    json_t *media = json_array();
    json_object_set_new(line, "id", json_string(id));
    json_array_append_new(media, dh__media_json(r, path));
    json_object_set_new(line, "media", media);
    char *text = json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    json_decref(line);
    if (!text)
        return DH_ENOMEM;
    int ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    free(text);
    return ok ? 0 : DH_EIO;
}

static void run_workers(index_job *j, int threads)
{
    pthread_t tid[256];
    int started = 0;
    threads = DH_MAX(1, DH_MIN(threads, 256));
    for (int t = 0; t < threads; t++)
        if (dh__thread_create(&tid[started], probe_worker, j) == 0)
            started++;
    if (started == 0)
        probe_worker(j); /* no thread could start: probe on the caller's thread */
    /* Progress every 100 ms; the last worker's signal ends the wait at once. */
    while (started > 0 && atomic_load(&j->done) < j->n) {
        if (j->opts->progress)
            j->opts->progress((int64_t)atomic_load(&j->done), (int64_t)j->n,
                              j->opts->progress_user);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 100 * 1000 * 1000;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&j->lock);
        if (atomic_load(&j->done) < j->n)
            pthread_cond_timedwait(&j->all_done, &j->lock, &until);
        pthread_mutex_unlock(&j->lock);
    }
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    if (j->opts->progress)
        j->opts->progress((int64_t)j->n, (int64_t)j->n, j->opts->progress_user);
}

/* A shard's lines and diagnostics, in member order. */
static int write_shard(index_job *j, FILE *f, size_t i, dh_index_stats *st)
{
    const dh__shard_result *r = &j->results[i].sr;
    char full[PATH_MAX];
    full_name(j, i, full, sizeof full);
    for (size_t k = 0; j->opts->diag && k < r->ndiags; k++) {
        dh_diag d = {.file = full, .code = r->diags[k].code, .message = r->diags[k].message};
        j->opts->diag(&d, j->opts->diag_user);
    }
    for (size_t k = 0; k < r->nlines; k++)
        if (fputs(r->lines[k], f) < 0 || fputc('\n', f) == EOF)
            return DH_EIO;
    st->shards++;
    st->shards_unread += r->failed;
    st->shard_samples += r->samples;
    st->shard_skipped += r->skipped;
    st->bytes_read += r->bytes_read;
    st->media_bytes += r->media_bytes;
    st->members_ignored += r->ignored;
    for (const char *q = r->ignored_suffixes; *q;) { /* merged, each once, while room lasts */
        size_t n = strcspn(q, ",");
        dh__list_add_once(st->ignored_suffixes, sizeof st->ignored_suffixes, q, n);
        q += n + (q[n] == ',');
    }
    return 0;
}

/* Writes all results in path order; skipped files go to the diag callback. */
static int write_manifest(index_job *j, FILE *f, const char *prefix, dh_index_stats *st)
{
    char full[PATH_MAX], path[PATH_MAX];
    for (size_t i = 0; i < j->n; i++) {
        file_result *fr = &j->results[i];
        if (fr->shard && !fr->rc) {
            int rc = write_shard(j, f, i, st);
            if (rc)
                return rc;
            continue;
        }
        if (fr->rc) {
            st->skipped++;
            if (j->opts->diag) {
                char msg[PATH_MAX + 600];
                full_name(j, i, full, sizeof full);
                snprintf(msg, sizeof msg, "%s: skipped: %s", full, fr->err ? fr->err : "?");
                dh_diag d = {.file = full, .code = fr->rc, .message = msg};
                j->opts->diag(&d, j->opts->diag_user);
            }
            continue;
        }
        snprintf(path, sizeof path, "%s%s", dh__is_remote(j->rel[i]) ? "" : prefix, j->rel[i]);
        char id[PATH_MAX]; /* an object's: its URL without a query string or credentials */
        full_name(j, i, id, sizeof id);
        int rc = write_line(f, dh__is_remote(j->rel[i]) ? id : j->rel[i], &fr->res, path);
        if (rc)
            return rc;
        st->probed++;
        st->scanned += fr->res.scanned;
        st->bytes_read += fr->res.bytes_read;
        st->media_bytes += fr->res.info.bytes;
    }
    return 0;
}

/*
 * The manifest's paths are relative to its own directory, which must contain
 * DIR (paths may not climb out of the manifest directory). *prefix receives
 * DIR relative to it, with a trailing slash, or "".
 */
/* The directory out_path is in ("." for a bare name). */
static void out_dir(const char *out_path, char *dir, size_t len)
{
    snprintf(dir, len, "%s", out_path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = 0;
    else
        snprintf(dir, len, ".");
}

static int manifest_prefix(const char *root, const char *out_path, char *prefix, size_t len)
{
    char outdir[PATH_MAX], canon[PATH_MAX];
    out_dir(out_path, outdir, sizeof outdir);
    if (!realpath(outdir, canon))
        return -errno;
    size_t n = strlen(canon);
    if (!strcmp(canon, root)) {
        prefix[0] = 0;
        return 0;
    }
    if (!strcmp(canon, "/"))
        n = 0;
    if (strncmp(root, canon, n) != 0 || root[n] != '/')
        return DH_EPATH;
    snprintf(prefix, len, "%s/", root + n + 1);
    return 0;
}

static void job_free(index_job *j)
{
    for (size_t i = 0; i < j->n; i++) {
        free(j->rel[i]);
        if (j->results) {
            free(j->results[i].err);
            if (j->results[i].shard)
                dh__shard_result_clear(&j->results[i].sr);
            else
                dh_probe_result_clear(&j->results[i].res);
        }
    }
    free(j->rel);
    free(j->results);
    free(j->root);
}

/* Probes j's files (j->rel below j->root) and writes the manifest; 0 or an error. */
static int index_run(index_job *j, const char *out_path, dh_index_stats *stats)
{
    stats->files = (int64_t)j->n;
    j->results = calloc(j->n ? j->n : 1, sizeof *j->results);
    if (!j->results)
        return DH_ENOMEM;
    run_workers(j, j->opts->threads > 0 ? j->opts->threads : dh__cpu_count());
    char tmp[PATH_MAX];
    FILE *f = dh__out_open(out_path, tmp, sizeof tmp);
    if (!f)
        return -errno;
    int rc = write_manifest(j, f, j->prefix, stats);
    int crc = dh__out_close(f, tmp, out_path, !rc);
    return rc ? rc : crc;
}

/* Fills opts and stats defaults; NULL arguments get local storage. */
static void index_defaults(const dh_index_opts **opts, dh_index_opts *defopts,
                           dh_index_stats **stats, dh_index_stats *local)
{
    if (!*opts) {
        dh_index_opts_default(defopts);
        *opts = defopts;
    }
    if (!*stats)
        *stats = local;
    memset(*stats, 0, sizeof **stats);
}

int dh_index_dir(const char *dir, const char *out_path, const dh_index_opts *opts,
                 dh_index_stats *stats)
{
    dh_index_opts defopts;
    dh_index_stats local;
    index_defaults(&opts, &defopts, &stats, &local);
    if (!dir || !out_path || dh_index_suffixes_check(opts->suffixes, NULL, 0))
        return DH_EINVAL;
    index_job j = {.opts = opts,
                   .lock = PTHREAD_MUTEX_INITIALIZER,
                   .all_done = PTHREAD_COND_INITIALIZER};
    int rc;
    j.root = realpath(dir, NULL);
    if (!j.root)
        return -errno;
    struct stat st;
    if (stat(j.root, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = DH_ENOTDIR;
        goto done;
    }
    if ((rc = manifest_prefix(j.root, out_path, j.prefix, sizeof j.prefix)))
        goto done;
    if (stat(out_path, &st) == 0) {
        j.skip_dev = st.st_dev;
        j.skip_ino = st.st_ino;
    }
    if ((rc = walk(&j, "")))
        goto done;
    if (j.n) /* an empty directory: no list to sort (qsort of NULL is undefined) */
        qsort(j.rel, j.n, sizeof *j.rel, cmp_str);
    rc = index_run(&j, out_path, stats);
done:
    job_free(&j);
    return rc;
}

/* 1 when path is the existing file out (index never reads what it writes over). */
static int is_output(const char *path, const char *out)
{
    struct stat a, b;
    return !stat(path, &a) && !stat(out, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int dh_index_paths(const char *const *paths, size_t n, const char *out_path,
                   const dh_index_opts *opts, dh_index_stats *stats)
{
    dh_index_opts defopts;
    dh_index_stats local;
    index_defaults(&opts, &defopts, &stats, &local);
    if (!paths || !out_path || dh_index_suffixes_check(opts->suffixes, NULL, 0))
        return DH_EINVAL;
    index_job j = {.opts = opts,
                   .lock = PTHREAD_MUTEX_INITIALIZER,
                   .all_done = PTHREAD_COND_INITIALIZER};
    /* Paths are relative to the manifest's directory, which must hold every one of them. */
    char outdir[PATH_MAX];
    out_dir(out_path, outdir, sizeof outdir);
    int rc = 0;
    if (!(j.root = realpath(outdir, NULL)))
        return -errno;
    size_t rootlen = strlen(j.root);
    int conf_checked = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        char canon[PATH_MAX];
        const char *why = NULL;
        int code = 0;
        if (dh__is_remote(paths[k])) { /* an object: read from its store, named as given */
            dh__store_conf conf; /* the store's settings checked once, not per object */
            char bad[400];
            if (!conf_checked && (rc = dh__store_conf_env(&conf, bad, sizeof bad))) {
                if (opts->diag) {
                    dh_diag d = {.file = "", .code = rc, .message = bad};
                    opts->diag(&d, opts->diag_user);
                }
                break;
            }
            conf_checked = 1;
            rc = add_path(&j, paths[k]);
            continue;
        }
        if (!realpath(paths[k], canon))
            code = -errno, why = strerror(errno);
        else if (strncmp(canon, j.root, rootlen) || (canon[rootlen] != '/' && rootlen > 1))
            code = DH_EPATH, why = "outside the manifest's directory (write the manifest in a "
                                   "directory above it)";
        else if (is_output(paths[k], out_path))
            code = DH_EEXIST, why = "it is the manifest being written (it would be overwritten)";
        if (code) { /* named and left out, as a file index could not read */
            stats->skipped++;
            if (opts->diag) {
                char msg[PATH_MAX + 200];
                snprintf(msg, sizeof msg, "%s: skipped: %s", paths[k], why);
                dh_diag d = {.file = paths[k], .code = code, .message = msg};
                opts->diag(&d, opts->diag_user);
            }
            continue;
        }
        rc = add_path(&j, canon + rootlen + (rootlen > 1));
    }
    int64_t left_out = stats->skipped;
    if (!rc)
        rc = index_run(&j, out_path, stats);
    stats->files += left_out; /* every path given is accounted for */
    job_free(&j);
    return rc;
}
