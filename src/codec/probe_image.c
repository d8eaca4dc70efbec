/*
 * probe_image.c - JPEG and PNG dimensions from headers, never pixels.
 *
 * JPEG: TurboJPEG's tjDecompressHeader3 reads the markers up to the frame
 * header (SOF). Large EXIF/ICC segments can push SOF past the first read, so
 * the caller retries with the whole file when the prefix was not enough.
 * PNG: the IHDR chunk is fixed at bytes 8..32 by the PNG specification, so
 * reading it directly is both exact and cheaper than setting up libpng.
 */
#include "codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

static int check_pixels(int64_t w, int64_t h, const dh_limits *lim, char *err, size_t errlen)
{
    if (w <= 0 || h <= 0) {
        dh__msg(err, errlen, "image header has zero size (%lldx%lld)", (long long)w, (long long)h);
        return DH_ECORRUPT;
    }
    if (w * h > lim->max_pixels) {
        dh__msg(err, errlen, "image is %lldx%lld, over the limit of %lld pixels", (long long)w,
                (long long)h, (long long)lim->max_pixels);
        return DH_ELIMIT;
    }
    return 0;
}

int dh__probe_jpeg(const char *path, const unsigned char *buf, size_t len, int64_t file_bytes,
                   const dh_limits *lim, dh_probe_result *r, char *err, size_t errlen)
{
    (void)path;
    tjhandle tj = tjInitDecompress();
    if (!tj) {
        dh__msg(err, errlen, "cannot create a TurboJPEG decompressor");
        return DH_ENOMEM;
    }
    int w = 0, h = 0, subsamp = 0, colorspace = 0;
    int rc = tjDecompressHeader3(tj, buf, (unsigned long)len, &w, &h, &subsamp, &colorspace);
    if (rc != 0) {
        dh__msg(err, errlen, "JPEG header: %s", tjGetErrorStr2(tj));
        tjDestroy(tj);
        return DH_ECORRUPT;
    }
    tjDestroy(tj);
    if ((rc = check_pixels(w, h, lim, err, errlen)))
        return rc;
    r->info.type = DH_MEDIA_IMAGE;
    r->info.codec = DH_CODEC_JPEG;
    r->info.width = w;
    r->info.height = h;
    r->info.bytes = file_bytes;
    snprintf(r->format, sizeof r->format, "jpeg");
    snprintf(r->codec_name, sizeof r->codec_name, "jpeg");
    return 0;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int dh__probe_png(const unsigned char *buf, size_t len, int64_t file_bytes, const dh_limits *lim,
                  dh_probe_result *r, char *err, size_t errlen)
{
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (len < 33 || memcmp(buf, sig, 8) != 0) {
        dh__msg(err, errlen, "PNG file shorter than its header");
        return DH_ECORRUPT;
    }
    if (be32(buf + 8) != 13 || memcmp(buf + 12, "IHDR", 4) != 0) {
        dh__msg(err, errlen, "PNG does not start with an IHDR chunk");
        return DH_ECORRUPT;
    }
    uint32_t w = be32(buf + 16), h = be32(buf + 20);
    unsigned depth = buf[24], color = buf[25];
    /* Valid (colour type, bit depth) pairs from the PNG specification, table 11.1. */
    int ok = (color == 0 && (depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16)) ||
             (color == 3 && (depth == 1 || depth == 2 || depth == 4 || depth == 8)) ||
             ((color == 2 || color == 4 || color == 6) && (depth == 8 || depth == 16));
    if (!ok || w > 0x7fffffffu || h > 0x7fffffffu) {
        dh__msg(err, errlen, "PNG IHDR is invalid (colour type %u, bit depth %u)", color, depth);
        return DH_ECORRUPT;
    }
    int rc = check_pixels(w, h, lim, err, errlen);
    if (rc)
        return rc;
    r->info.type = DH_MEDIA_IMAGE;
    r->info.codec = DH_CODEC_PNG;
    r->info.width = (int32_t)w;
    r->info.height = (int32_t)h;
    r->info.channels = color == 0 ? 1 : color == 4 ? 2 : color == 6 ? 4 : 3;
    r->info.bytes = file_bytes;
    snprintf(r->format, sizeof r->format, "png");
    snprintf(r->codec_name, sizeof r->codec_name, "png");
    return 0;
}
