/*
 * test_tar.c - tar members from their headers: archives written by Python's
 * tarfile (pax, GNU and ustar formats, long names, a name prefix), each
 * member's data found at its offset byte for byte; GNU base-256 sizes;
 * damaged archives (checksum, truncation, oversize names, a pax header with
 * no member) refused with the offset; WebDataset's key and suffix.
 */
#include "probe/tar.h"
#include "testutil.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *dir;

static void make_dir(void)
{
    dir = tu_mkdtemp();
}

static void drop_dir(void)
{
    tu_sh("rm -rf %s", dir);
    free(dir);
}

/* Writes DIR/NAME.tar with Python's tarfile in FORMAT (pax, gnu, ustar): members named
 * NAMES (space-separated), member k holding "data-k" repeated k * 300 times. */
static void write_tar(const char *name, const char *format, const char *names)
{
    ck_assert_int_eq(tu_sh("cd %s && /usr/bin/python3 - %s %s '%s' <<'EOF'\n"
                           "import io, sys, tarfile\n"
                           "fmt = {'pax': tarfile.PAX_FORMAT, 'gnu': tarfile.GNU_FORMAT,\n"
                           "       'ustar': tarfile.USTAR_FORMAT}[sys.argv[2]]\n"
                           "with tarfile.open(sys.argv[1] + '.tar', 'w', format=fmt) as t:\n"
                           "    for k, n in enumerate(sys.argv[3].split()):\n"
                           "        data = ('data-%%d' %% k).encode() * (k * 300)\n"
                           "        i = tarfile.TarInfo(n); i.size = len(data)\n"
                           "        t.addfile(i, io.BytesIO(data))\n"
                           "EOF",
                           dir, name, format, names),
                     0);
}

typedef struct {
    int fd, n;
    char names[8][DH__TAR_NAME_MAX];
    int64_t sizes[8], offsets[8];
    int data_ok;
} seen;

/* Checks that member m's data is what write_tar put there. */
static int collect(const dh__tar_member *m, void *user)
{
    seen *s = user;
    int k = s->n;
    if (k >= 8)
        return DH_ELIMIT;
    snprintf(s->names[k], sizeof s->names[k], "%s", m->name);
    s->sizes[k] = m->size;
    s->offsets[k] = m->offset;
    char want[16];
    int wl = snprintf(want, sizeof want, "data-%d", k);
    char *got = malloc((size_t)m->size + 1);
    ssize_t r = pread(s->fd, got, (size_t)m->size, (off_t)m->offset);
    int ok = r == m->size;
    for (int64_t j = 0; ok && j < m->size; j += wl)
        ok = !memcmp(got + j, want, (size_t)wl);
    s->data_ok &= ok && m->size == (int64_t)k * 300 * wl && m->type == '0';
    free(got);
    s->n++;
    return 0;
}

/* Walks DIR/NAME.tar into s; returns the walk's code, err its sentence. */
static int walk(const char *name, seen *s, char *err, size_t len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.tar", dir, name);
    memset(s, 0, sizeof *s);
    s->data_ok = 1;
    s->fd = open(path, O_RDONLY);
    ck_assert_int_ge(s->fd, 0);
    struct stat st;
    fstat(s->fd, &st);
    int rc = dh__tar_walk(s->fd, st.st_size, collect, s, err, len);
    close(s->fd);
    return rc;
}

START_TEST(members_of_every_format_are_found_at_their_offsets)
{
    /* a name past ustar's 100 bytes: pax path, GNU 'L', ustar's prefix */
    /* over ustar's 100 bytes, its base name under them: ustar splits it into its prefix */
    char longname[300];
    snprintf(longname, sizeof longname, "shard/part-0001/%060d/%080d.mp4", 5, 7);
    char names[512];
    snprintf(names, sizeof names, "a/000.mp4 a/000.txt a/000.json %s b/001.JPG", longname);
    const char *formats[] = {"pax", "gnu", "ustar"};
    for (int f = 0; f < 3; f++) {
        write_tar(formats[f], formats[f], names);
        seen s;
        char err[256] = "";
        ck_assert_msg(walk(formats[f], &s, err, sizeof err) == 0, "%s: %s", formats[f], err);
        ck_assert_int_eq(s.n, 5);
        ck_assert_msg(s.data_ok, "%s: a member's data is not at its offset", formats[f]);
        ck_assert_str_eq(s.names[0], "a/000.mp4");
        ck_assert_str_eq(s.names[2], "a/000.json");
        ck_assert_str_eq(s.names[3], longname);
        ck_assert_str_eq(s.names[4], "b/001.JPG");
    }
}
END_TEST

/* Copies DIR/SRC.tar to DIR/DST.tar and returns its bytes (read into memory). */
static unsigned char *load(const char *src, const char *dst, long *len)
{
    ck_assert_int_eq(tu_sh("cp %s/%s.tar %s/%s.tar", dir, src, dir, dst), 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.tar", dir, dst);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    rewind(f);
    unsigned char *buf = malloc((size_t)*len);
    ck_assert_int_eq(fread(buf, 1, (size_t)*len, f), (size_t)*len);
    fclose(f);
    return buf;
}

static void store(const char *dst, const unsigned char *buf, long len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.tar", dir, dst);
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, (size_t)len, f);
    fclose(f);
}

/* Rewrites the checksum of the header block at off. */
static void fix_checksum(unsigned char *h)
{
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int k = 0; k < 512; k++)
        sum += h[k];
    snprintf((char *)h + 148, 8, "%06o", sum);
}

START_TEST(gnu_base256_sizes_are_read)
{
    write_tar("plain", "ustar", "x/0.txt x/1.bin");
    long len;
    unsigned char *b = load("plain", "b256", &len);
    /* member 1 (x/1.bin, 1800 bytes) is the second header: after member 0's empty data */
    unsigned char *h = b + 512;
    memset(h + 124, 0, 12);
    h[124] = 0x80;
    h[134] = 1800 >> 8, h[135] = 1800 & 0xff;
    fix_checksum(h);
    store("b256", b, len);
    seen s;
    char err[256] = "";
    ck_assert_msg(walk("b256", &s, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.n, 2);
    ck_assert_int_eq(s.sizes[1], 1800);
    ck_assert(s.data_ok);
    free(b);
}
END_TEST

START_TEST(damaged_archives_are_refused_with_the_offset)
{
    write_tar("good", "pax", "k/0.mp4 k/0.txt k/1.mp4");
    long len;
    seen s;
    char err[256] = "";
    /* a flipped byte in the second member's header */
    unsigned char *b = load("good", "sum", &len);
    int64_t second = -1;
    for (long off = 512; off < len && second < 0; off += 512)
        if (!memcmp(b + off, "k/0.txt", 7))
            second = off;
    ck_assert_int_ge(second, 0);
    b[second + 1] ^= 0x20;
    store("sum", b, len);
    ck_assert_int_eq(walk("sum", &s, err, sizeof err), DH_ECORRUPT);
    char want[96];
    snprintf(want, sizeof want, "a bad header checksum at offset %lld", (long long)second);
    ck_assert_msg(strstr(err, want), "%s", err);
    /* cut inside the last member's data */
    free(b);
    ck_assert_int_eq(walk("good", &s, err, sizeof err), 0);
    b = load("good", "cut", &len);
    store("cut", b, (long)s.offsets[2] + 100);
    ck_assert_int_eq(walk("cut", &s, err, sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "data past the end of the file"), "%s", err);
    /* a pax header and then nothing */
    store("orphan", b, 1024);
    ck_assert_int_eq(walk("orphan", &s, err, sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "before the member it describes") || strstr(err, "past the end"),
                  "%s", err);
    free(b);
    /* not a tar at all */
    ck_assert_int_eq(tu_sh("head -c 2048 /dev/urandom > %s/noise.tar", dir), 0);
    ck_assert_int_eq(walk("noise", &s, err, sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "checksum at offset 0"), "%s", err);
    /* a name longer than the limit */
    char huge[5200];
    memset(huge, 'n', sizeof huge - 1);
    huge[sizeof huge - 1] = 0;
    write_tar("huge", "pax", huge);
    ck_assert_int_eq(walk("huge", &s, err, sizeof err), DH_ELIMIT);
}
END_TEST

START_TEST(webdataset_keys_and_suffixes)
{
    char suf[32];
    size_t k = dh__wds_split("shard/abc.def/000123.MP4", suf, sizeof suf);
    ck_assert_int_eq(k, strlen("shard/abc.def/000123"));
    ck_assert_str_eq(suf, "mp4");
    k = dh__wds_split("x/s01.seg.json", suf, sizeof suf);
    ck_assert_int_eq(k, strlen("x/s01"));
    ck_assert_str_eq(suf, "seg.json");
    k = dh__wds_split("README", suf, sizeof suf);
    ck_assert_int_eq(k, 6);
    ck_assert_str_eq(suf, "");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tar");
    TCase *tc = tcase_create("tar");
    tcase_add_unchecked_fixture(tc, make_dir, drop_dir);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, members_of_every_format_are_found_at_their_offsets);
    tcase_add_test(tc, gnu_base256_sizes_are_read);
    tcase_add_test(tc, damaged_archives_are_refused_with_the_offset);
    tcase_add_test(tc, webdataset_keys_and_suffixes);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
