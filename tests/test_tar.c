/*
 * test_tar.c - tar members from their headers: archives written by Python's
 * tarfile (pax, GNU and ustar formats, long names, a name prefix), each
 * member's data found at its offset byte for byte; GNU base-256 sizes;
 * damaged archives (checksum, truncation, oversize names, a pax header with
 * no member) refused with the offset; WebDataset's key and suffix; media
 * read in place as a member's byte range (probe and decode equal to the
 * loose file's; a range past the file refused).
 */
#include "codec/codec.h"
#include "codec/decode.h"
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

/* Records member m (name, size, offset) and checks that its data is what write_tar put
 * there (data_ok; other archives leave it 0). */
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

/* Walks the first `limit` bytes of DIR/NAME.tar (< 0: all of it) into s; returns the walk's
 * code, err its sentence. */
static int walk_to(const char *name, int64_t limit, seen *s, char *err, size_t len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.tar", dir, name);
    memset(s, 0, sizeof *s);
    s->data_ok = 1;
    s->fd = open(path, O_RDONLY);
    ck_assert_int_ge(s->fd, 0);
    struct stat st;
    fstat(s->fd, &st);
    int rc = dh__tar_walk(s->fd, limit < 0 ? st.st_size : limit, collect, s, err, len);
    close(s->fd);
    return rc;
}

static int walk(const char *name, seen *s, char *err, size_t len)
{
    return walk_to(name, -1, s, err, len);
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

/* Probes and decodes member `k` of DIR/media.tar in place and the loose file DIR/NAME; both
 * must agree byte for byte. */
static void same_in_place(const seen *s, int k, const char *name)
{
    char tar[4200], loose[4200], err[256] = "";
    snprintf(tar, sizeof tar, "%s/media.tar", dir);
    snprintf(loose, sizeof loose, "%s/%s", dir, name);
    dh__media_src in = {.path = tar, .range_off = s->offsets[k], .range_len = s->sizes[k]};
    dh_probe_result a, b;
    ck_assert_msg(dh__probe_src(&in, NULL, &a, err, sizeof err) == 0, "%s: %s", name, err);
    ck_assert_int_eq(dh__probe_src(DH__SRC(loose), NULL, &b, err, sizeof err), 0);
    ck_assert_int_eq(a.info.width, b.info.width);
    ck_assert_int_eq(a.info.frames, b.info.frames);
    ck_assert_int_eq(a.info.bytes, b.info.bytes);
    dh_spec *spec;
    ck_assert_int_eq(dh_spec_builtin("default", &spec), 0);
    dh_media_derived d;
    ck_assert_int_eq(dh_derive_media(spec, &b.info, &d), 0);
    uint8_t *x = malloc((size_t)d.out_bytes), *y = malloc((size_t)d.out_bytes);
    int video = b.info.type == DH_MEDIA_VIDEO;
    int rx = video ? dh__decode_video(&in, spec, &a.info, x, (size_t)d.out_bytes, NULL, err,
                                      sizeof err)
                   : dh__decode_image(&in, spec, &a.info, x, (size_t)d.out_bytes, NULL, err,
                                      sizeof err);
    ck_assert_msg(rx == 0, "%s in place: %s", name, err);
    int ry = video ? dh__decode_video(DH__SRC(loose), spec, &b.info, y, (size_t)d.out_bytes,
                                      NULL, err, sizeof err)
                   : dh__decode_image(DH__SRC(loose), spec, &b.info, y, (size_t)d.out_bytes,
                                      NULL, err, sizeof err);
    ck_assert_int_eq(ry, 0);
    ck_assert_int_eq(memcmp(x, y, (size_t)d.out_bytes), 0);
    free(x), free(y);
    dh_spec_free(spec);
    dh_probe_result_clear(&a);
    dh_probe_result_clear(&b);
}

START_TEST(media_are_read_in_place_as_byte_ranges)
{
    const char *ff = tu_ffmpeg();
    ck_assert_int_eq(tu_sh("cd %s && %s -v error -y -nostdin -f lavfi -i testsrc2=size=160x96 "
                           "-frames:v 1 k.jpg && %s -v error -y -nostdin -f lavfi -i "
                           "testsrc2=size=128x72:rate=25 -t 1 -c:v libx264 -g 10 -pix_fmt "
                           "yuv420p k.mp4 && echo caption > k.txt", dir, ff, ff), 0);
    ck_assert_int_eq(tu_sh("cd %s && /usr/bin/python3 -c \"import tarfile\n"
                           "with tarfile.open('media.tar', 'w') as t:\n"
                           "    [t.add(n) for n in ('k.txt', 'k.jpg', 'k.mp4')]\"", dir), 0);
    seen s;
    char path[4200], err[256] = "";
    snprintf(path, sizeof path, "%s/media.tar", dir);
    ck_assert_int_eq(walk("media", &s, err, sizeof err), 0);
    ck_assert_int_eq(s.n, 3);
    struct stat st;
    stat(path, &st);
    same_in_place(&s, 1, "k.jpg");
    same_in_place(&s, 2, "k.mp4");
    /* a range that passes the file's end (the shard changed): refused, saying so */
    dh__media_src bad = {.path = path, .range_off = s.offsets[2], .range_len = st.st_size};
    dh_probe_result r;
    ck_assert_int_eq(dh__probe_src(&bad, NULL, &r, err, sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "not inside the file"), "%s", err);
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

typedef struct {
    int n;
    char text[16][700];
} diags;

static void keep_diag(const dh_diag *d, void *user)
{
    diags *l = user;
    if (l->n < 16)
        snprintf(l->text[l->n], sizeof l->text[0], "%s [%s]", d->message, dh_err_name(d->code));
    l->n++;
}

/* Index options whose diagnostics are kept in l. */
static dh_index_opts keeping_diags(diags *l)
{
    dh_index_opts o;
    dh_index_opts_default(&o);
    o.diag = keep_diag;
    o.diag_user = l;
    return o;
}

/* 1 when one of the diagnostics holds every needle (NULL-terminated). */
static int has_diag(const diags *l, const char *a, const char *b, const char *c)
{
    for (int k = 0; k < l->n && k < 16; k++)
        if (strstr(l->text[k], a) && (!b || strstr(l->text[k], b)) && (!c || strstr(l->text[k], c)))
            return 1;
    return 0;
}

/*
 * index on a directory of shards as WebDataset writers make them (Python's tarfile, pax and
 * GNU): samples grouped by adjacent keys with their text and label, media read in place;
 * each bad member costs its sample only, named with shard, member and reason; a compressed
 * or truncated shard is named, the samples before a truncation kept.
 */
START_TEST(index_makes_one_line_per_sample_of_each_shard)
{
    const char *ff = tu_ffmpeg();
    ck_assert_int_eq(tu_sh("mkdir -p %s/ds && cd %s/ds && %s -v error -y -nostdin -f lavfi -i "
                           "testsrc2=size=96x64 -frames:v 1 x.jpg && %s -v error -y -nostdin -f "
                           "lavfi -i testsrc2=size=128x72:rate=25 -t 1 -c:v libx264 -g 10 "
                           "-pix_fmt yuv420p x.mp4", dir, dir, ff, ff), 0);
    ck_assert_int_eq(tu_sh("cd %s/ds && /usr/bin/python3 - <<'EOF'\n"
        "import gzip, io, shutil, tarfile\n"
        "def add(t, name, data=None, path=None, kind=tarfile.REGTYPE):\n"
        "    if path: data = open(path, 'rb').read()\n"
        "    i = tarfile.TarInfo(name); i.type = kind\n"
        "    if kind == tarfile.SYMTYPE: i.linkname = 'x.jpg'; t.addfile(i); return\n"
        "    i.size = len(data); t.addfile(i, io.BytesIO(data))\n"
        "with tarfile.open('s0.tar', 'w') as t:  # pax, Python's default\n"
        "    add(t, 'a.jpg', path='x.jpg'); add(t, 'a.txt', 'a red \\u00e9 square'.encode())\n"
        "    add(t, 'a.cls', b'3\\n')\n"
        "    add(t, 'dir/b.mp4', path='x.mp4'); add(t, 'dir/b.txt', b'a clip\\n')\n"
        "    add(t, 'c.jpg', path='x.jpg'); add(t, 'c.jpg', path='x.jpg')\n"
        "    add(t, 'd.txt', b'text only')\n"
        "    add(t, 'd.json', '{\"url\": \"http://x/\\u00e9\", \"video_metadata\": {\"w\": 96},'\n"
        "                     ' \"n\": 1.5}'.encode())\n"
        "    add(t, 'a.jpg', path='x.jpg')\n"
        "with tarfile.open('s1.tar', 'w', format=tarfile.GNU_FORMAT) as t:\n"
        "    add(t, 'e.jpg', path='x.jpg'); add(t, 'e.txt', b'bad \\xff byte')\n"
        "    add(t, 'f.jpg', path='x.jpg'); add(t, 'f.cls', b'seven')\n"
        "    add(t, 'g.jpg', kind=tarfile.SYMTYPE)\n"
        "    add(t, 'h.jpg', b'not a jpeg at all')\n"
        "    add(t, 'i.png', path='x.jpg'); add(t, 'i.txt', b'fine')\n"
        "    add(t, 'j.jpg', path='x.jpg'); add(t, 'j.json', b'[1, 2]')\n"
        "    add(t, 'k.jpg', path='x.jpg'); add(t, 'k.json', b'{\"a\": ')\n"
        "shutil.copy('s0.tar', 'cut.tar')\n"
        "with open('s0.tar', 'rb') as f, gzip.open('z.tar', 'wb') as g: g.write(f.read())\n"
        "EOF", dir), 0);
    /* cut.tar: s0.tar cut inside b.mp4's data */
    ck_assert_int_eq(tu_sh("cd %s/ds && rm x.jpg x.mp4 && truncate -s 6000 cut.tar", dir), 0);
    char out[4200];
    snprintf(out, sizeof out, "%s/ds/m.jsonl", dir);
    diags l = {0};
    dh_index_opts o = keeping_diags(&l);
    dh_index_stats st;
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/ds", dir);
    ck_assert_int_eq(dh_index_dir(sub, out, &o, &st), 0);
    ck_assert_int_eq(st.files, 4);
    ck_assert_int_eq(st.shards, 4);
    /* s0: a, dir/b, d, a#2 (c: a suffix twice); s1: i (e, f, g, h, j, k bad); cut: a (dir/b
     * cut); z: none (its samples cannot be counted) */
    ck_assert_int_eq(st.shard_samples, 6);
    ck_assert_int_eq(st.shard_skipped, 1 + 6 + 1);
    ck_assert(has_diag(&l, "sample \"j\": member j.json: JSON, but not an object", NULL, NULL));
    ck_assert(has_diag(&l, "sample \"k\": member k.json: malformed JSON at line 1", NULL, NULL));
    ck_assert_msg(has_diag(&l, "s0.tar: sample \"c\": member c.jpg: suffix \"jpg\" twice",
                           "DH_EDUP", NULL), "%s", l.text[0]);
    ck_assert(has_diag(&l, "s1.tar: sample \"e\": member e.txt: not valid UTF-8 at byte 4",
                       NULL, NULL));
    ck_assert(has_diag(&l, "sample \"f\": member f.cls: not an integer label: \"seven\"", NULL,
                       NULL));
    ck_assert(has_diag(&l, "sample \"g\": member g.jpg: a link, not a regular file", NULL, NULL));
    ck_assert(has_diag(&l, "sample \"h\": member h.jpg:", NULL, NULL));
    ck_assert(has_diag(&l, "z.tar: shard skipped: a gzip-compressed file", NULL, NULL));
    ck_assert(has_diag(&l, "cut.tar: damaged after member a.cls: the member at offset",
                       "(\"dir/b.mp4\") has data past the end of the file", NULL));

    dh_manifest *m;
    ck_assert_int_eq(dh_manifest_load(out, NULL, &m, NULL), 0);
    ck_assert_int_eq(dh_manifest_count(m), 6);
    int64_t a = dh_manifest_find(m, "s0.tar:a"), b = dh_manifest_find(m, "s0.tar:dir/b"),
            d = dh_manifest_find(m, "s0.tar:d"), a2 = dh_manifest_find(m, "s0.tar:a#2");
    ck_assert(a >= 0 && b >= 0 && d >= 0 && a2 >= 0);
    ck_assert(dh_manifest_find(m, "cut.tar:a") >= 0 && dh_manifest_find(m, "s1.tar:i") >= 0);
    dh_sample_info si;
    dh_manifest_sample(m, a, &si);
    ck_assert_str_eq(si.text, "a red \xc3\xa9 square");
    ck_assert(si.has_label && si.label == 3);
    ck_assert_int_eq(si.text_tokens, -1); /* the spec counts them */
    ck_assert_ptr_null(si.meta);
    dh_manifest_sample(m, d, &si);
    ck_assert_int_eq(si.media_count, 0);
    ck_assert_str_eq(si.text, "text only");
    /* the .json member as the sample's meta, compact, its key order kept */
    ck_assert_str_eq(si.meta, "{\"url\":\"http://x/\xc3\xa9\",\"video_metadata\":{\"w\":96},"
                              "\"n\":1.5}");
    dh_manifest_sample(m, b, &si);
    ck_assert_int_eq(si.media_count, 1);
    ck_assert_str_eq(si.text, "a clip\n"); /* as stored: a caption's newline kept (WebDataset's) */
    dh_media_info mi;
    dh_manifest_media(m, b, 0, &mi);
    ck_assert_int_eq(mi.type, DH_MEDIA_VIDEO);
    ck_assert_str_eq(mi.path, "s0.tar");
    ck_assert_str_eq(mi.member, "dir/b.mp4");
    ck_assert(mi.offset > 0 && mi.offset % 512 == 0 && mi.frames == 25);
    ck_assert_int_gt(mi.file_bytes, mi.offset); /* the shard's size when indexed, pinned */
    /* its decode from the shard equals the decode of the member's bytes as a file */
    ck_assert_int_eq(tu_sh("cd %s/ds && dd if=s0.tar of=b.mp4 bs=1 skip=%lld count=%lld "
                           "status=none", dir, (long long)mi.offset, (long long)mi.bytes), 0);
    dh_spec *spec;
    ck_assert_int_eq(dh_spec_builtin("default", &spec), 0);
    dh_sample_derived sd;
    dh_media_derived md;
    ck_assert_int_eq(dh_derive_sample(spec, m, d, &sd, &md), 0);
    ck_assert_int_eq(sd.tokens, 3); /* "text only": 9 bytes, 4 a token by default */
    ck_assert_int_eq(dh_derive_sample(spec, m, b, &sd, &md), 0);
    uint8_t *x = malloc((size_t)md.out_bytes), *y = malloc((size_t)md.out_bytes);
    char shard[4200], loose[4200], err[300] = "";
    snprintf(shard, sizeof shard, "%s/ds/s0.tar", dir);
    snprintf(loose, sizeof loose, "%s/ds/b.mp4", dir);
    dh__media_src in_place = DH__ITEM_SRC(NULL, shard, &mi);
    ck_assert_int_eq(dh__decode_video(&in_place, spec, &mi, x, (size_t)md.out_bytes, NULL, err,
                                      sizeof err), 0);
    ck_assert_int_eq(dh__decode_video(DH__SRC(loose), spec, &mi, y, (size_t)md.out_bytes, NULL,
                                      err, sizeof err), 0);
    ck_assert(!memcmp(x, y, (size_t)md.out_bytes));
    /* the shard changed since it was indexed (it grew): named as such, not as a bad video */
    ck_assert_int_eq(tu_sh("printf 'x' >> %s", shard), 0);
    in_place = DH__ITEM_SRC(NULL, shard, &mi);
    ck_assert_int_eq(dh__decode_video(&in_place, spec, &mi, x, (size_t)md.out_bytes, NULL, err,
                                      sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "when it was indexed: it changed since (index it again)"), "%s",
                  err);
    /* rewritten to the same size, another member where b.mp4 was (a's image header copied
     * over b's): named as a changed shard too (it decoded whatever lay there before) */
    ck_assert_int_eq(tu_sh("truncate -s -1 %s", shard), 0);
    dh_media_info ai;
    dh_manifest_media(m, a, 0, &ai);
    ck_assert_int_eq(tu_sh("dd if=%s of=%s bs=512 skip=%lld seek=%lld count=1 conv=notrunc "
                           "status=none", shard, shard, (long long)(ai.offset / 512 - 1),
                           (long long)(mi.offset / 512 - 1)), 0);
    in_place = DH__ITEM_SRC(NULL, shard, &mi);
    ck_assert_int_eq(dh__decode_video(&in_place, spec, &mi, x, (size_t)md.out_bytes, NULL, err,
                                      sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "member dir/b.mp4: the header before it gives") &&
                  strstr(err, "the shard changed since it was indexed"), "%s", err);
    free(x);
    free(y);
    dh_spec_free(spec);
    dh_manifest_free(m);
}
END_TEST

/* Descriptors open in this process. */
/* This process's descriptors open on the test's shards (lru/s*.tar): all its descriptors,
 * counted before, read one more now and then (CI once: 11 against at most 10, with two
 * shards open as they should be), from something else of the process. */
static int open_shards(void)
{
    char *n = tu_capture("ls -l /proc/%d/fd | grep -c '/lru/s[0-9]*\\.tar'", (int)getpid());
    int k = n ? atoi(n) : -1;
    free(n);
    return k;
}

/* A worker's open shards: members of cached shards read as from a fresh open, at most
 * `capacity` descriptors open however many shards, a vanished shard still named. */
START_TEST(a_worker_keeps_a_few_shards_open)
{
    const char *ff = tu_ffmpeg();
    ck_assert_int_eq(tu_sh("mkdir -p %s/lru && cd %s/lru && %s -v error -y -nostdin -f lavfi "
                           "-i testsrc2=size=64x48 -frames:v 1 x.jpg && /usr/bin/python3 -c "
                           "\"import tarfile\nfor k in range(5):\n"
                           "    with tarfile.open('s%%d.tar' %% k, 'w') as t: t.add('x.jpg')\"",
                           dir, dir, ff), 0);
    char root[4200], err[300] = "";
    snprintf(root, sizeof root, "%s/lru", dir);
    seen s;
    ck_assert_int_eq(walk("lru/s0", &s, err, sizeof err), 0);
    dh__fd_cache *c = dh__fd_cache_new(2);
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < 5; k++) {
            char rel[16];
            snprintf(rel, sizeof rel, "s%d.tar", k);
            dh__media_src src = {.root = root, .path = rel, .range_off = s.offsets[0],
                                 .range_len = s.sizes[0], .cache = c};
            dh_probe_result r;
            ck_assert_msg(dh__probe_src(&src, NULL, &r, err, sizeof err) == 0, "%s", err);
            ck_assert_int_eq(r.info.width, 64);
            dh_probe_result_clear(&r);
            int open = open_shards();
            ck_assert_msg(open >= 1 && open <= 2, "%d shards open", open); /* capacity 2 */
        }
    /* s0 was closed to make room: gone from disk, it is named as missing (a shard still
     * open reads on from its descriptor, as an open file does) */
    ck_assert_int_eq(tu_sh("rm %s/s0.tar", root), 0);
    dh__media_src gone = {.root = root, .path = "s0.tar", .range_off = s.offsets[0],
                          .range_len = s.sizes[0], .cache = c};
    dh_probe_result r;
    ck_assert_int_eq(dh__probe_src(&gone, NULL, &r, err, sizeof err), DH_ENOENT);
    ck_assert_msg(strstr(err, "cannot open"), "%s", err);
    dh__fd_cache_free(c);
    ck_assert_int_eq(open_shards(), 0);
}
END_TEST

/* Suffix rules extend and override the default kinds: an unknown suffix becomes a text or
 * a label, a .json that is not JSON is ignored when asked; malformed rules are refused. */
START_TEST(suffix_rules_extend_the_defaults)
{
    ck_assert_int_eq(tu_sh("mkdir -p %s/rules", dir), 0);
    write_tar("rules/s", "pax", "a.caption a.json b.caption b.weird");
    char root[4200], out[4200], why[300] = "";
    snprintf(root, sizeof root, "%s/rules", dir);
    snprintf(out, sizeof out, "%s/rules/m.jsonl", dir);
    diags l = {0};
    dh_index_opts o = keeping_diags(&l);
    dh_index_stats st;
    /* by default: .caption is unknown (no sample has media or text), a.json is bad JSON */
    ck_assert_int_eq(dh_index_dir(root, out, &o, &st), 0);
    ck_assert_int_eq(st.shard_samples, 0);
    ck_assert(has_diag(&l, "sample \"a\": member a.json: malformed JSON", NULL, NULL));
    ck_assert_int_eq(st.members_ignored, 3); /* said, not silently dropped */
    ck_assert_str_eq(st.ignored_suffixes, "caption,weird");
    memset(&l, 0, sizeof l);
    o.suffixes = "caption=text,JSON=ignore,weird=label";
    ck_assert_int_eq(dh_index_dir(root, out, &o, &st), 0);
    ck_assert_int_eq(st.shard_samples, 1);
    ck_assert_int_eq(st.shard_skipped, 1);
    ck_assert_msg(has_diag(&l, "sample \"b\": member b.weird: 5400 bytes, over the limit 64",
                           NULL, NULL),
                  "%s", l.text[0]);
    dh_manifest *m;
    ck_assert_int_eq(dh_manifest_load(out, NULL, &m, NULL), 0);
    dh_sample_info si;
    dh_manifest_sample(m, dh_manifest_find(m, "s.tar:a"), &si);
    ck_assert_str_eq(si.text, "");
    ck_assert_ptr_null(si.meta);
    dh_manifest_free(m);
    ck_assert_int_eq(st.members_ignored, 0);
    /* the last rule for a suffix wins, as later options do */
    o.suffixes = "caption=ignore,json=ignore,caption=text";
    ck_assert_int_eq(dh_index_dir(root, out, &o, &st), 0);
    ck_assert_int_eq(st.shard_samples, 2);
    const char *bad[] = {"gif", "gif=picture", "a.b=image", "=image", "gif=image,", NULL};
    for (int k = 0; bad[k]; k++) {
        int rc = dh_index_suffixes_check(bad[k], why, sizeof why);
        ck_assert_msg(rc == (k == 4 ? 0 : DH_EINVAL), "%s: %d", bad[k], rc);
        ck_assert(k == 4 || strstr(why, "expected EXT=KIND"));
        o.suffixes = bad[k];
        ck_assert_int_eq(dh_index_dir(root, out, &o, &st), k == 4 ? 0 : DH_EINVAL);
    }
}
END_TEST

/* A shard cut inside the padding after a member's data lost what followed: said so (it
 * read as a complete archive before, and the samples after the cut vanished silently). */
START_TEST(a_cut_inside_padding_is_named)
{
    write_tar("padcut", "ustar", "a.jpg a.txt b.jpg");
    char err[256] = "";
    seen s;
    ck_assert_int_eq(walk("padcut", &s, err, sizeof err), 0);
    int64_t cut = s.offsets[1] + s.sizes[1] + 10; /* a.txt's data whole, its padding cut */
    ck_assert_int_eq(s.sizes[1] % 512 != 0, 1);
    ck_assert_int_eq(walk_to("padcut", cut, &s, err, sizeof err), DH_ECORRUPT);
    ck_assert_msg(strstr(err, "cut short at byte") && strstr(err, "inside the padding"), "%s",
                  err);
    ck_assert_int_eq(s.n, 2); /* the members before the cut were seen */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tar");
    TCase *tc = tcase_create("tar");
    tcase_add_unchecked_fixture(tc, make_dir, drop_dir);
    tcase_set_timeout(tc, 60);
    ADD_TEST(tc, members_of_every_format_are_found_at_their_offsets);
    ADD_TEST(tc, gnu_base256_sizes_are_read);
    ADD_TEST(tc, damaged_archives_are_refused_with_the_offset);
    ADD_TEST(tc, webdataset_keys_and_suffixes);
    ADD_TEST(tc, media_are_read_in_place_as_byte_ranges);
    ADD_TEST(tc, index_makes_one_line_per_sample_of_each_shard);
    ADD_TEST(tc, a_worker_keeps_a_few_shards_open);
    ADD_TEST(tc, a_cut_inside_padding_is_named);
    ADD_TEST(tc, suffix_rules_extend_the_defaults);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
