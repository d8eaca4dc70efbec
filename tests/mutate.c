/*
 * mutate.c - seeded mutants of media files for the mutation test
 * (tests/mutants.sh) and its longer benchmark (bench/run_mutants.sh).
 *
 *   dh_mutate SEED COUNT OUTDIR FILE...
 *
 * Mutant k (m00000.EXT, ...) starts from FILE[k % nfiles] and gets one to
 * four edits: flipped bytes, a range overwritten with random bytes or zeros,
 * a truncation, or a chunk duplicated in place. The same seed gives the same
 * mutants, so a failure names a file anyone can rebuild.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* (a function, not a macro: its arguments draw random numbers and must be drawn once) */
static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = rng_state; /* xorshift64* */
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * UINT64_C(2685821657736338717);
}

static size_t below(size_t n)
{
    return n ? (size_t)(rnd() % n) : 0;
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = n > 0 ? malloc((size_t)n * 2 + 16) : NULL; /* room to duplicate */
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = b ? (size_t)n : 0;
    return b;
}

/* One edit of buf (len bytes, capacity cap); returns the new length. */
static size_t edit(unsigned char *buf, size_t len, size_t cap)
{
    size_t at = below(len), n;
    switch (rnd() % 5) {
    case 0: /* flip a few bytes */
        for (int k = 1 + (int)below(16); k > 0; k--)
            buf[below(len)] ^= (unsigned char)(1u << below(8));
        return len;
    case 1: /* random bytes over a range */
        n = min_size(1 + below(64), len - at);
        for (size_t i = 0; i < n; i++)
            buf[at + i] = (unsigned char)rnd();
        return len;
    case 2: /* zeros over a range */
        n = min_size(1 + below(256), len - at);
        memset(buf + at, 0, n);
        return len;
    case 3: /* truncate */
        return at > 0 ? at : len;
    default: /* duplicate a chunk in place */
        n = min_size(1 + below(512), len - at);
        if (len + n > cap)
            return len;
        memmove(buf + at + n, buf + at, len - at);
        return len + n;
    }
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: dh_mutate SEED COUNT OUTDIR FILE...\n");
        return 2;
    }
    rng_state = strtoull(argv[1], NULL, 10) * 2 + 1;
    long count = strtol(argv[2], NULL, 10);
    const char *out = argv[3];
    int nfiles = argc - 4;
    for (long k = 0; k < count; k++) {
        const char *src = argv[4 + k % nfiles];
        size_t len;
        unsigned char *buf = slurp(src, &len);
        if (!buf) {
            fprintf(stderr, "dh_mutate: cannot read %s\n", src);
            return 1;
        }
        size_t cap = len * 2 + 16;
        for (int e = 1 + (int)below(4); e > 0 && len > 0; e--)
            len = edit(buf, len, cap);
        const char *ext = strrchr(src, '.');
        char path[4096];
        snprintf(path, sizeof path, "%s/m%05ld%s", out, k, ext ? ext : "");
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "dh_mutate: cannot write %s\n", path);
            return 1;
        }
        free(buf);
    }
    return 0;
}
