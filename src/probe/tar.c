/*
 * tar.c - a tar archive's members from their headers (see tar.h).
 *
 * DESIGN: one pass of pread()s over 512-byte blocks; a member's data is never
 * read, only skipped, except the data of pax and GNU long-name headers, which
 * describe the member after them (bounded: DH__TAR_PAX_MAX, DH__TAR_NAME_MAX).
 * Every number comes from the file and is checked before it is used: the
 * header checksum, sizes (octal or base-256, never negative), a member's end
 * against the file's size, pax record lengths against the record.
 */
#include "tar.h"

#include "../core/tarhdr.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK DH__TAR_BLOCK

/* A descriptor's pread as a reader. */
static ssize_t fd_read(void *ctx, void *buf, size_t n, int64_t off)
{
    for (;;) {
        ssize_t got = pread(*(int *)ctx, buf, n, (off_t)off);
        if (got >= 0 || errno != EINTR)
            return got < 0 ? -errno : got;
    }
}

/* Reads exactly len bytes at off; 0, DH_ECORRUPT (the file ends first) or the reader's
 * error. */
static int read_at(const dh__tar_reader *fd, void *buf, size_t len, int64_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = fd->read(fd->ctx, (char *)buf + got, len - got, off + (int64_t)got);
        if (n < 0)
            return (int)n;
        if (n == 0)
            return DH_ECORRUPT;
        got += (size_t)n;
    }
    return 0;
}

static int all_zero(const unsigned char *h)
{
    for (int k = 0; k < BLOCK; k++)
        if (h[k])
            return 0;
    return 1;
}

/* What pax and GNU headers say of the next member. */
typedef struct {
    char name[DH__TAR_NAME_MAX];
    int has_name;
    int64_t size; /* -1: none */
} pending;

/* Applies the records of a pax header ("LEN key=value\n" ...) to p; 0 or DH_ECORRUPT. */
static int pax_records(const char *buf, size_t len, pending *p, int64_t at, char *err,
                       size_t errlen)
{
    size_t k = 0;
    while (k < len) {
        size_t n = 0, j = k;
        while (j < len && isdigit((unsigned char)buf[j]) && n <= len) /* n > len: bad */
            n = n * 10 + (size_t)(buf[j++] - '0');
        if (j >= len || buf[j] != ' ' || n <= j - k + 1 || k + n > len || buf[k + n - 1] != '\n')
            return dh__fail(err, errlen, DH_ECORRUPT, "a malformed pax record at offset %lld",
                            (long long)(at + (int64_t)k));
        const char *key = buf + j + 1, *end = buf + k + n - 1;
        const char *eq = memchr(key, '=', (size_t)(end - key));
        if (!eq)
            return dh__fail(err, errlen, DH_ECORRUPT, "a pax record without '=' at offset %lld",
                            (long long)(at + (int64_t)k));
        size_t klen = (size_t)(eq - key), vlen = (size_t)(end - eq - 1);
        if (klen == 4 && !memcmp(key, "path", 4)) {
            if (vlen >= sizeof p->name || memchr(eq + 1, 0, vlen))
                return dh__fail(err, errlen, vlen >= sizeof p->name ? DH_ELIMIT : DH_ECORRUPT,
                                "a pax path of %zu bytes at offset %lld", vlen, (long long)at);
            memcpy(p->name, eq + 1, vlen);
            p->name[vlen] = 0;
            p->has_name = 1;
        } else if (klen == 4 && !memcmp(key, "size", 4)) {
            int64_t v = 0;
            for (size_t d = 0; d < vlen; d++) {
                char c = eq[1 + d];
                if (c < '0' || c > '9' || v > (INT64_MAX - 9) / 10)
                    return dh__fail(err, errlen, DH_ECORRUPT, "a malformed pax size at offset "
                                    "%lld", (long long)at);
                v = v * 10 + (c - '0');
            }
            if (!vlen)
                return dh__fail(err, errlen, DH_ECORRUPT, "an empty pax size at offset %lld",
                                (long long)at);
            p->size = v;
        }
        k += n;
    }
    return 0;
}

/* The data of a pax or GNU header (bounded by max), NUL-terminated into a new buffer. */
static int read_meta(const dh__tar_reader *fd, int64_t off, int64_t size, int64_t max, char **out)
{
    if (size > max)
        return DH_ELIMIT;
    char *buf = dh__malloc((size_t)size + 1);
    if (!buf)
        return DH_ENOMEM;
    int rc = read_at(fd, buf, (size_t)size, off);
    if (rc) {
        free(buf);
        return rc;
    }
    buf[size] = 0;
    *out = buf;
    return 0;
}

/* The member's name from its ustar header (prefix "/" name), unless pax or GNU named it. */
static void header_name(const unsigned char *h, const pending *p, char *name, size_t len)
{
    if (p->has_name) {
        snprintf(name, len, "%s", p->name);
        return;
    }
    int ustar = !memcmp(h + 257, "ustar", 5);
    char base[101], prefix[156];
    memcpy(base, h, 100), base[100] = 0;
    memcpy(prefix, h + 345, 155), prefix[155] = 0;
    if (ustar && prefix[0] && memcmp(h + 257, "ustar ", 6)) /* GNU's field there is not a prefix */
        snprintf(name, len, "%s/%s", prefix, base);
    else
        snprintf(name, len, "%s", base);
}

/* One header block at off: a member (reported), a pax/GNU header (kept in p) or the end. */
static int one_header(const dh__tar_reader *fd, int64_t file_size, int64_t *off, pending *p, int64_t *first,
                      int (*each)(const dh__tar_member *, void *), void *user, int *done,
                      char *broken, size_t blen, char *err, size_t errlen)
{
    unsigned char h[BLOCK];
    if (*off + BLOCK > file_size)
        return dh__fail(err, errlen, DH_ECORRUPT, "the archive ends inside a header at offset "
                        "%lld (%lld bytes)", (long long)*off, (long long)file_size);
    int rc = read_at(fd, h, BLOCK, *off);
    if (rc)
        return dh__fail(err, errlen, rc, "cannot read the header at offset %lld: %s",
                        (long long)*off, dh_strerror(rc));
    if (all_zero(h)) {
        *done = 1;
        return 0;
    }
    if (!dh__tar_checksum_ok(h))
        return dh__fail(err, errlen, DH_ECORRUPT, "a bad header checksum at offset %lld (not "
                        "a tar archive, or a damaged one)", (long long)*off);
    int64_t size = dh__tar_size(h + 124, 12), data = *off + BLOCK;
    char type = (char)(h[156] ? h[156] : '0');
    if (type != 'x' && type != 'g' && type != 'L' && type != 'K' && p->size >= 0)
        size = p->size;
    if (size < 0 || size > file_size - data) {
        char name[DH__TAR_NAME_MAX];
        header_name(h, p, name, sizeof name);
        if (broken && type != 'x' && type != 'g' && type != 'L' && type != 'K')
            snprintf(broken, blen, "%s", name);
        return dh__fail(err, errlen, DH_ECORRUPT, "the member at offset %lld (\"%.200s\") has "
                        "%s (the archive has %lld bytes)", (long long)*off, name,
                        size < 0 ? "a malformed size" : "data past the end of the file",
                        (long long)file_size);
    }
    if (*first < 0)
        *first = *off;
    if (type == 'x' || type == 'L') {
        char *meta = NULL;
        rc = read_meta(fd, data, size, type == 'x' ? DH__TAR_PAX_MAX : DH__TAR_NAME_MAX - 1,
                       &meta);
        if (rc)
            return dh__fail(err, errlen, rc, "the %s header at offset %lld: %s",
                            type == 'x' ? "pax" : "GNU long-name", (long long)*off,
                            dh_strerror(rc));
        if (type == 'x') {
            rc = pax_records(meta, (size_t)size, p, data, err, errlen);
        } else {
            snprintf(p->name, sizeof p->name, "%s", meta);
            p->has_name = 1;
        }
        free(meta);
    } else if (type != 'g' && type != 'K') {
        dh__tar_member m = {.type = type, .header = *first, .offset = data, .size = size};
        header_name(h, p, m.name, sizeof m.name);
        rc = each(&m, user);
        *p = (pending){.size = -1};
        *first = -1;
    }
    *off = data + (size + BLOCK - 1) / BLOCK * BLOCK;
    return rc;
}

int dh__tar_walk(int fd, int64_t file_size, int (*each)(const dh__tar_member *m, void *user),
                 void *user, char *err, size_t errlen)
{
    dh__tar_reader rd = {fd_read, &fd};
    return dh__tar_walk_at(&rd, file_size, each, user, NULL, 0, err, errlen);
}

int dh__tar_walk_at(const dh__tar_reader *fd, int64_t file_size, int (*each)(const dh__tar_member *m, void *user),
                    void *user, char *broken, size_t blen, char *err, size_t errlen)
{
    if (broken && blen)
        broken[0] = 0;
    pending *p = dh__malloc(sizeof *p);
    if (!p)
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    *p = (pending){.size = -1};
    int64_t off = 0, first = -1;
    int rc = 0, done = 0;
    while (!rc && !done && off < file_size)
        rc = one_header(fd, file_size, &off, p, &first, each, user, &done, broken, blen, err,
                        errlen);
    if (!rc && first >= 0) /* a pax or long-name header with no member after it */
        rc = dh__fail(err, errlen, DH_ECORRUPT, "the archive ends after the header at offset "
                      "%lld, before the member it describes", (long long)first);
    if (!rc && !done && off > file_size) /* cut inside the padding after a member's data */
        rc = dh__fail(err, errlen, DH_ECORRUPT, "the archive is cut short at byte %lld, inside "
                      "the padding after a member's data: what followed is lost",
                      (long long)file_size);
    free(p);
    return rc;
}

size_t dh__wds_split(const char *name, char *suffix, size_t suffix_len)
{
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strchr(base, '.');
    size_t key = dot ? (size_t)(dot - name) : strlen(name);
    size_t k = 0;
    for (const char *s = dot ? dot + 1 : ""; *s && k + 1 < suffix_len; s++)
        suffix[k++] = (char)tolower((unsigned char)*s);
    if (suffix_len)
        suffix[k] = 0;
    return key;
}

int dh__tar_add(dh__tar_writer *w, const char *name, const void *data, size_t len,
                int64_t *data_off)
{
    size_t n = strlen(name);
    if (n == 0 || n > 100)
        return DH_EINVAL;
    unsigned char h[BLOCK] = {0};
    memcpy(h, name, n);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011llo", (unsigned long long)len);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int k = 0; k < BLOCK; k++)
        sum += h[k];
    snprintf((char *)h + 148, 8, "%06o", sum);
    static const unsigned char zeros[BLOCK];
    size_t pad = (BLOCK - len % BLOCK) % BLOCK;
    if (fwrite(h, 1, BLOCK, w->f) != BLOCK || (len && fwrite(data, 1, len, w->f) != len) ||
        (pad && fwrite(zeros, 1, pad, w->f) != pad))
        return DH_EIO;
    if (data_off)
        *data_off = w->off + BLOCK;
    w->off += BLOCK + (int64_t)(len + pad);
    return 0;
}

int dh__tar_finish(dh__tar_writer *w)
{
    static const unsigned char zeros[2 * BLOCK];
    if (fwrite(zeros, 1, sizeof zeros, w->f) != sizeof zeros)
        return DH_EIO;
    w->off += (int64_t)sizeof zeros;
    return 0;
}
