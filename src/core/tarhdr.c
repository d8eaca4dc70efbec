/*
 * tarhdr.c - the fields of one tar header block (see tarhdr.h).
 */
#include "tarhdr.h"

#include <string.h>

int64_t dh__tar_octal(const unsigned char *f, size_t len)
{
    size_t k = 0;
    while (k < len && (f[k] == ' ' || f[k] == 0))
        k++;
    int64_t v = 0;
    int digits = 0;
    for (; k < len && f[k] >= '0' && f[k] <= '7'; k++, digits++) {
        if (v > (INT64_MAX >> 3))
            return -1;
        v = v * 8 + (f[k] - '0');
    }
    for (; k < len; k++) /* only terminators may follow */
        if (f[k] != ' ' && f[k] != 0)
            return -1;
    return digits ? v : (len ? 0 : -1);
}

int64_t dh__tar_size(const unsigned char *f, size_t len)
{
    if (!(f[0] & 0x80))
        return dh__tar_octal(f, len);
    if (f[0] != 0x80) /* 0xff: negative; other high bits: not a size */
        return -1;
    int64_t v = 0;
    for (size_t k = 1; k < len; k++) {
        if (v > (INT64_MAX >> 8))
            return -1;
        v = (v << 8) | f[k];
    }
    return v;
}

int dh__tar_checksum_ok(const unsigned char *h)
{
    int64_t want = dh__tar_octal(h + 148, 8);
    int64_t sum = 0, ssum = 0; /* some old tars summed signed chars */
    for (int k = 0; k < DH__TAR_BLOCK; k++) {
        unsigned char c = k >= 148 && k < 156 ? ' ' : h[k];
        sum += c;
        ssum += (signed char)c;
    }
    return want >= 0 && (want == sum || want == ssum);
}

int dh__tar_header_is(const unsigned char *h, const char *member, int64_t size, char *why,
                      size_t len)
{
    if (!dh__tar_checksum_ok(h))
        return !dh__fail(why, len, DH_ECORRUPT, "no tar header before it");
    if (h[156] != '0' && h[156] != 0 && h[156] != '7')
        return !dh__fail(why, len, DH_ECORRUPT, "the header before it is not a file's");
    int64_t field = dh__tar_size(h + 124, 12);
    if (field != size && field > 0)
        return !dh__fail(why, len, DH_ECORRUPT, "the header before it gives %lld bytes, not "
                         "%lld", (long long)field, (long long)size);
    size_t n = strlen(member);
    int ascii = 1;
    for (size_t k = 0; k < n; k++)
        ascii &= (unsigned char)member[k] < 0x80;
    if (ascii && n <= 100 && !h[345] && /* no ustar prefix: the name field is the name */
        (strncmp((const char *)h, member, 100) || (n < 100 && h[n])))
        return !dh__fail(why, len, DH_ECORRUPT, "the header before it names \"%.100s\"",
                         (const char *)h);
    return 1;
}
