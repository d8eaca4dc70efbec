/*
 * manifest_load.c - reading a manifest file line by line into the table, the
 * per-line accounting (loaded + skipped == lines), and read access to rows.
 *
 * Lines are read with a bounded reader: a line of any length within the limit
 * is handled, a longer one is skipped with its length and never held in
 * memory; CRLF endings and blank lines are tolerated. After loading, the
 * table's arrays are shrunk to their exact size so reported memory is what a
 * long-lived process holds.
 */
#include "catalog.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void dh_load_opts_default(dh_load_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    dh_limits_default(&opts->limits);
    opts->on_error = DH_ON_ERROR_SKIP;
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return strdup("");
    if (slash == path)
        return strdup("/");
    return strndup(path, (size_t)(slash - path));
}

static int is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
            return 0;
    return 1;
}

/* Shrinks every column to exactly the rows in use (failures keep the larger block). */
static void shrink_to_fit(dh_manifest *m)
{
    struct {
        void **p;
        size_t n, elem;
    } cols[] = {
        {(void **)&m->id_off, (size_t)m->n, 4},      {(void **)&m->line, (size_t)m->n, 4},
        {(void **)&m->text_tokens, (size_t)m->n, 4}, {(void **)&m->media_first, (size_t)m->n, 4},
        {(void **)&m->media_count, (size_t)m->n, 2}, {(void **)&m->sim_cpu_ms, (size_t)m->n, 4},
        {(void **)&m->sim_gpu_ms, (size_t)m->n, 4},  {(void **)&m->m_type, (size_t)m->nm, 1},
        {(void **)&m->m_codec, (size_t)m->nm, 1},    {(void **)&m->m_channels, (size_t)m->nm, 1},
        {(void **)&m->m_path_off, (size_t)m->nm, 4}, {(void **)&m->m_width, (size_t)m->nm, 4},
        {(void **)&m->m_height, (size_t)m->nm, 4},   {(void **)&m->m_fps, (size_t)m->nm, 4},
        {(void **)&m->m_frames, (size_t)m->nm, 4},   {(void **)&m->m_duration, (size_t)m->nm, 4},
        {(void **)&m->m_rate, (size_t)m->nm, 4},     {(void **)&m->m_bytes, (size_t)m->nm, 8},
        {(void **)&m->m_kf_off, (size_t)m->nm, 4},   {(void **)&m->m_kf_count, (size_t)m->nm, 4},
        {(void **)&m->kf, m->nkf, 4},                {(void **)&m->str, m->nstr, 1},
    };
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
        if (!*cols[i].p || cols[i].n == 0)
            continue;
        void *p = realloc(*cols[i].p, cols[i].n * cols[i].elem);
        if (p)
            *cols[i].p = p;
    }
    m->cap = (size_t)m->n;
    m->mcap = (size_t)m->nm;
    m->kfcap = m->nkf;
    m->strcap = m->nstr;
    /* Appending after this regrows geometrically from the exact sizes. */
}

static void report(const dh_load_opts *o, const char *file, int64_t lineno, int code,
                   const char *id, const char *msg)
{
    if (!o->diag)
        return;
    dh_diag d = {.file = file, .line = lineno, .sample_id = id, .code = code, .message = msg};
    o->diag(&d, o->diag_user);
}

/*
 * One line of f into *buf (without growing it past max + 1 bytes): its length, or -1 at
 * the end. A longer line is consumed to its newline without being kept; *over then holds
 * its length. getline() would first read the whole line, however long (a manifest path
 * naming /dev/zero grew to the address-space limit).
 */
static ssize_t read_line(FILE *f, char **buf, size_t *cap, size_t max, size_t *over)
{
    size_t n = 0;
    *over = 0;
    for (;;) {
        if (n + 2 > *cap) {
            size_t want = *cap ? *cap * 2 : 4096;
            if (want > max + 2)
                want = max + 2;
            if (want <= n + 1) { /* the line is over max: count and drop the rest */
                size_t total = n;
                int c;
                while ((c = getc_unlocked(f)) != EOF && c != '\n')
                    total++;
                *over = total;
                return (ssize_t)n;
            }
            char *p = realloc(*buf, want);
            if (!p)
                return -2;
            *buf = p;
            *cap = want;
        }
        if (!fgets(*buf + n, (int)DH_MIN(*cap - n, (size_t)INT32_MAX), f))
            return n ? (ssize_t)n : -1;
        n += strlen(*buf + n);
        if (n && (*buf)[n - 1] == '\n')
            return (ssize_t)n;
    }
}

/* Reads every line of f into m; returns 0, the first bad line's code (FAIL mode) or an I/O code. */
static int load_lines(dh_manifest *m, FILE *f, const char *path, const dh_load_opts *o,
                      dh_load_stats *st)
{
    char *buf = NULL;
    size_t bufcap = 0;
    ssize_t len;
    int64_t lineno = 0;
    int rc = 0;
    char msg[1200];
    size_t max = (size_t)DH_MAX(1, DH_MIN(m->limits.max_line_bytes, INT32_MAX - 2)), over;
    while ((len = read_line(f, &buf, &bufcap, max, &over)) >= 0) {
        lineno++;
        size_t n = (size_t)len;
        while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
            n--;
        if (!over && is_blank(buf, n)) {
            st->blank++;
            continue;
        }
        st->lines++;
        dh__line_error e;
        int lrc;
        if (over) { /* not kept: parse_line's length check reports it with the same words */
            e.id[0] = 0;
            snprintf(e.reason, sizeof e.reason, "line is %zu bytes, over the limit %lld", over,
                     (long long)m->limits.max_line_bytes);
            lrc = DH_ELIMIT;
        } else {
            lrc = dh__manifest_parse_line(m, buf, n, lineno, &e);
        }
        if (lrc == 0) {
            st->loaded++;
            continue;
        }
        st->skipped++;
        if (e.id[0])
            snprintf(msg, sizeof msg, "%s:%lld: sample \"%s\": %s", path, (long long)lineno, e.id,
                     e.reason);
        else
            snprintf(msg, sizeof msg, "%s:%lld: %s", path, (long long)lineno, e.reason);
        report(o, path, lineno, lrc, e.id[0] ? e.id : NULL, msg);
        if (lrc == DH_ENOMEM || o->on_error == DH_ON_ERROR_FAIL) {
            rc = lrc;
            break;
        }
    }
    if (!rc && len == -2)
        rc = DH_ENOMEM;
    if (!rc && ferror(f))
        rc = DH_EIO;
    free(buf);
    return rc;
}

int dh_manifest_load(const char *path, const dh_load_opts *opts, dh_manifest **out,
                     dh_load_stats *stats)
{
    dh_load_opts defaults;
    dh_load_stats local;
    if (!opts) {
        dh_load_opts_default(&defaults);
        opts = &defaults;
    }
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!path || !out)
        return DH_EINVAL;
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int rc = -errno;
        char msg[512];
        snprintf(msg, sizeof msg, "%s: cannot open manifest: %s", path, dh_strerror(rc));
        report(opts, path, 0, rc, NULL, msg);
        return rc;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
        /* a file or a pipe; a device (/dev/zero) would be read forever */
        int dir = S_ISDIR(st.st_mode);
        char msg[512];
        snprintf(msg, sizeof msg, "%s: is %s, not a manifest file (a regular file or a pipe)",
                 path, dir ? "a directory" : S_ISCHR(st.st_mode) ? "a character device"
                                           : S_ISBLK(st.st_mode) ? "a block device" : "a socket");
        report(opts, path, 0, dir ? -EISDIR : DH_EINVAL, NULL, msg);
        fclose(f);
        return dir ? -EISDIR : DH_EINVAL;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    char *dir = dir_of(path);
    dh_manifest *m = NULL;
    int rc = dir ? dh_manifest_new(dir, &opts->limits, &m) : DH_ENOMEM;
    free(dir);
    if (rc)
        goto fail;
    m->check_files = opts->check_files;
    rc = load_lines(m, f, path, opts, stats);
    if (rc)
        goto fail;
    fclose(f);
    shrink_to_fit(m);
    *out = m;
    return 0;
fail:
    fclose(f);
    dh_manifest_free(m);
    return rc;
}

int64_t dh_manifest_count(const dh_manifest *m)
{
    return m ? m->n : 0;
}

uint64_t dh_manifest_hash(const dh_manifest *m)
{
    return m ? m->hash : 0;
}

const char *dh_manifest_dir(const dh_manifest *m)
{
    return m ? m->dir : NULL;
}

size_t dh_manifest_memory(const dh_manifest *m)
{
    if (!m)
        return 0;
    size_t per_sample = 4 + 4 + 4 + 4 + 2 + 4 + 4 + (m->text_off ? 4 : 0) + (m->meta_off ? 4 : 0) +
                        (m->label ? 8 : 0);
    size_t per_media = 1 + 1 + 1 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 8 + 4 + 4 + (m->m_offset ? 8 : 0) +
                       (m->m_member_off ? 4 : 0) + (m->m_file_bytes ? 8 : 0) + (m->m_etag_off ? 4 : 0);
    return sizeof *m + strlen(m->dir) + 1 + m->cap * per_sample + m->mcap * per_media +
           m->kfcap * sizeof(int32_t) + m->strcap + m->idx_cap * sizeof *m->idx;
}

int dh_manifest_sample(const dh_manifest *m, int64_t i, dh_sample_info *out)
{
    if (!m || !out || i < 0 || i >= m->n)
        return DH_EINVAL;
    out->id = dh__str(m, m->id_off[i]);
    out->line = m->line[i];
    out->text_tokens = m->text_tokens[i];
    out->media_count = m->media_count[i];
    out->sim_cpu_ms = m->sim_cpu_ms[i];
    out->sim_gpu_ms = m->sim_gpu_ms[i];
    out->text = !m->text_off || m->text_off[i] == DH__NO_STR ? NULL : dh__str(m, m->text_off[i]);
    out->meta = !m->meta_off || m->meta_off[i] == DH__NO_STR ? NULL : dh__str(m, m->meta_off[i]);
    out->has_label = m->label && m->label[i] != DH__NO_LABEL;
    out->label = out->has_label ? m->label[i] : 0;
    return 0;
}

int dh_manifest_media(const dh_manifest *m, int64_t i, int32_t j, dh_media_info *out)
{
    if (!m || !out || i < 0 || i >= m->n || j < 0 || j >= m->media_count[i])
        return DH_EINVAL;
    int64_t k = (int64_t)m->media_first[i] + j;
    out->type = (dh_media_type)m->m_type[k];
    out->codec = (dh_codec)m->m_codec[k];
    out->path = dh__str(m, m->m_path_off[k]);
    out->width = m->m_width[k];
    out->height = m->m_height[k];
    out->fps = m->m_fps[k];
    out->frames = m->m_frames[k];
    out->duration_s = m->m_duration[k];
    out->sample_rate = m->m_rate[k];
    out->channels = m->m_channels[k];
    out->bytes = m->m_bytes[k];
    out->keyframe_count = (int32_t)m->m_kf_count[k];
    out->keyframes = m->m_kf_count[k] ? m->kf + m->m_kf_off[k] : NULL;
    out->offset = m->m_offset ? m->m_offset[k] : 0;
    out->file_bytes = m->m_file_bytes ? m->m_file_bytes[k] : 0;
    out->member = !m->m_member_off || m->m_member_off[k] == DH__NO_STR
                      ? NULL
                      : dh__str(m, m->m_member_off[k]);
    out->etag = !m->m_etag_off || m->m_etag_off[k] == DH__NO_STR ? NULL
                                                                 : dh__str(m, m->m_etag_off[k]);
    return 0;
}
