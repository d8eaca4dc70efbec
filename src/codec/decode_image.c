/*
 * decode_image.c - one JPEG or PNG image decoded and resized straight into
 * its slot: H x W x 3 uint8, or tiles x S x S x 3 for any-res tiling.
 *
 * JPEG: TurboJPEG decodes at the smallest DCT scale M/8 that still covers
 * the resize target (dh__jpeg_scale_m, the same choice dh_derive_media()
 * counts), so a 4000 px photo bound for 224 px never materialises at full
 * size. PNG: libpng's transforms bring every colour type to 8-bit RGB
 * (palette and low-depth grey expanded, 16-bit reduced to its high byte,
 * grey replicated, alpha stripped as PIL's convert("RGB") does). The resize
 * itself is scale.c's, shared with video. Any-res tiling: the base tile (the
 * whole image at S x S) first, then the cols x rows grid row by row, each
 * tile scaled from its share of the image.
 */
#include "../catalog/catalog.h"
#include "scale.h"

#include <libavutil/pixfmt.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>

#define MAX_IMAGE_FILE (1LL << 31)

typedef struct {
    uint8_t *rgb; /* decoded image, tightly packed RGB24 */
    int w, h;     /* decoded (possibly DCT-scaled) size */
} picture;


static int check_size(int w, int h, const dh_media_info *mi, char *err, size_t errlen)
{
    if (w != mi->width || h != mi->height)
        return dh__fail(err, errlen, DH_ECORRUPT, "the file is %dx%d but its manifest entry says %dx%d",
                     w, h, mi->width, mi->height);
    return 0;
}

static int decode_jpeg(const uint8_t *buf, size_t len, const dh_spec *spec, const dh_media_info *mi,
                       const dh_media_draw *dr, picture *p, char *err, size_t errlen)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        return DH_ENOMEM;
    int w, h, sub, cs, rc;
    if (tjDecompressHeader3(tj, buf, (unsigned long)len, &w, &h, &sub, &cs) != 0) {
        rc = dh__fail(err, errlen, DH_ECORRUPT, "JPEG header: %s", tjGetErrorStr2(tj));
    } else if (!(rc = check_size(w, h, mi, err, errlen))) {
        tjscalingfactor sf = {dh__jpeg_scale_m(spec, w, h, dr), 8};
        p->w = TJSCALED(w, sf);
        p->h = TJSCALED(h, sf);
        p->rgb = malloc((size_t)p->w * p->h * 3 + DH_SCALE_PAD);
        if (!p->rgb)
            rc = DH_ENOMEM;
        else if (tjDecompress2(tj, buf, (unsigned long)len, p->rgb, p->w, 0, p->h, TJPF_RGB, 0) != 0)
            rc = dh__fail(err, errlen, DH_EDECODE, "JPEG data: %s", tjGetErrorStr2(tj));
    }
    tjDestroy(tj);
    return rc;
}

typedef struct {
    const uint8_t *buf;
    size_t len, off;
} png_src;

static void png_read_mem(png_structp png, png_bytep out, png_size_t n)
{
    png_src *s = png_get_io_ptr(png);
    if (n > s->len - s->off)
        png_error(png, "truncated PNG");
    memcpy(out, s->buf + s->off, n);
    s->off += n;
}

static void png_on_error(png_structp png, png_const_charp msg)
{
    char *err = png_get_error_ptr(png);
    snprintf(err, 200, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg; /* warnings (e.g. bad iCCP) do not fail a sample */
}

/* Reads an 8-bit RGB version of the PNG into p; errors via longjmp land in the caller. */
static int decode_png(const uint8_t *buf, size_t len, const dh_media_info *mi, picture *p,
                      char *err, size_t errlen)
{
    char perr[200] = "";
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, perr, png_on_error,
                                             png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    png_bytep *volatile rows = NULL;
    volatile int rc = 0;
    png_src src = {buf, len, 0};
    if (!png || !info) {
        rc = DH_ENOMEM;
        goto done;
    }
    if (setjmp(png_jmpbuf(png))) {
        rc = dh__fail(err, errlen, DH_EDECODE, "PNG data: %s", perr);
        goto done;
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_read_info(png, info);
    int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
    if ((rc = check_size(w, h, mi, err, errlen)))
        goto done;
    png_set_expand(png);           /* palette -> RGB, grey < 8 bits -> 8, tRNS -> alpha */
    png_set_strip_16(png);         /* 16-bit -> its high byte */
    png_set_strip_alpha(png);      /* alpha dropped, as PIL's convert("RGB") */
    png_set_gray_to_rgb(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 3) {
        rc = dh__fail(err, errlen, DH_EUNSUPPORTED, "PNG layout did not reduce to RGB24");
        goto done;
    }
    p->w = w;
    p->h = h;
    p->rgb = malloc((size_t)w * h * 3 + DH_SCALE_PAD);
    rows = malloc((size_t)h * sizeof *rows);
    if (!p->rgb || !rows) {
        rc = DH_ENOMEM;
        goto done;
    }
    for (int y = 0; y < h; y++)
        rows[y] = p->rgb + (size_t)y * w * 3;
    png_read_image(png, rows);
done:
    free(rows);
    png_destroy_read_struct(png ? &png : NULL, info ? &info : NULL, NULL);
    return rc;
}

static int scale_into(struct SwsContext **sws, const picture *p, dh__rect r, int ow, int oh,
                      uint8_t *dst)
{
    const uint8_t *data[4] = {p->rgb, NULL, NULL, NULL};
    int linesize[4] = {p->w * 3, 0, 0, 0};
    return dh__scale_rgb(sws, data, linesize, AV_PIX_FMT_RGB24, r, ow, oh, dst);
}

/* Base tile then the grid, each S x S. */
static int write_tiles(struct SwsContext **sws, const dh_spec *spec, const dh_media_info *mi,
                       const picture *p, uint8_t *dst)
{
    int S = spec->image.tile_size;
    size_t tile = (size_t)S * S * 3;
    int64_t cols, rows;
    dh__image_grid(spec, mi->width, mi->height, &cols, &rows);
    int rc = 0;
    if (spec->image.base_tile) {
        rc = scale_into(sws, p, (dh__rect){0, 0, p->w, p->h}, S, S, dst);
        dst += tile;
    }
    for (int64_t r = 0; r < rows && !rc; r++) {
        for (int64_t c = 0; c < cols && !rc; c++) {
            int x0 = (int)(c * p->w / cols), x1 = (int)((c + 1) * p->w / cols);
            int y0 = (int)(r * p->h / rows), y1 = (int)((r + 1) * p->h / rows);
            rc = scale_into(sws, p, (dh__rect){x0, y0, x1 - x0, y1 - y0}, S, S, dst);
            dst += tile;
        }
    }
    return rc;
}

/* The drawn rectangle of a random crop, in the decoded (maybe DCT-scaled) picture's pixels. */
static dh__rect drawn_rect(const dh_media_draw *dr, const dh_media_info *mi, const picture *p)
{
    int x = (int)((int64_t)dr->crop_x * p->w / mi->width);
    int y = (int)((int64_t)dr->crop_y * p->h / mi->height);
    int w = (int)(((int64_t)dr->crop_w * p->w + mi->width / 2) / mi->width);
    int h = (int)(((int64_t)dr->crop_h * p->h + mi->height / 2) / mi->height);
    return (dh__rect){x, y, DH_MAX(1, DH_MIN(w, p->w - x)), DH_MAX(1, DH_MIN(h, p->h - y))};
}

int dh__decode_image(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi, uint8_t *dst,
                     size_t cap, dh__decode_stats *st, char *err, size_t errlen)
{
    return dh__decode_item(src, spec, mi, NULL, 0, 1, dst, cap, st, err, errlen);
}

int dh__decode_image_drawn(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                           const dh_media_draw *dr, uint8_t *dst, size_t cap,
                           dh__decode_stats *st, char *err, size_t errlen)
{
    dh__decode_stats local;
    st = st ? st : &local;
    memset(st, 0, sizeof *st);
    dh_media_derived md;
    int rc = dh_derive_media_drawn(spec, mi, dr, &md);
    if (rc)
        return dh__fail(err, errlen, rc, "cannot derive the output shape");
    if ((size_t)md.out_bytes > cap)
        return dh__fail(err, errlen, DH_ERANGE, "slot holds %zu bytes, the image needs %lld", cap,
                     (long long)md.out_bytes);
    uint8_t *buf = NULL;
    size_t len = 0;
    picture p = {0};
    struct SwsContext *sws = NULL;
    dh__source in;
    if ((rc = dh__source_open(&in, src, err, errlen)))
        goto done;
    rc = dh__source_read_all(&in, MAX_IMAGE_FILE, &buf, &len, err, errlen);
    dh__source_close(&in);
    if (rc)
        goto done;
    if (len >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF)
        rc = decode_jpeg(buf, len, spec, mi, dr, &p, err, errlen);
    else if (len >= 8 && !memcmp(buf, "\x89PNG\r\n\x1a\n", 8))
        rc = decode_png(buf, len, mi, &p, err, errlen);
    else
        rc = dh__fail(err, errlen, DH_EUNSUPPORTED, "not a JPEG or PNG file (codec %s in the manifest)",
                   dh_codec_name(mi->codec));
    if (rc)
        goto done;
    st->frames_decoded = 1;
    if (spec->image.tile_size > 0) {
        if (dr->flip) /* the image mirrored, then tiled: the grid's columns swap too */
            dh__flip_rgb(p.rgb, p.w, p.h);
        rc = write_tiles(&sws, spec, mi, &p, dst);
    } else {
        dh__rect r = {0, 0, p.w, p.h};
        if (spec->image.resize.mode == DH_RESIZE_CROP || spec->image.resize.mode == DH_RESIZE_BUCKET)
            r = dh__cover_crop(p.w, p.h, md.out_width, md.out_height);
        else if (spec->image.resize.mode >= DH_RESIZE_RANDOM_RESIZED_CROP)
            r = drawn_rect(dr, mi, &p);
        rc = scale_into(&sws, &p, r, md.out_width, md.out_height, dst);
        if (!rc && dr->flip)
            dh__flip_rgb(dst, md.out_width, md.out_height);
    }
    if (rc)
        rc = dh__fail(err, errlen, rc, "resize failed");
    else
        st->bytes_written = md.out_bytes;
done:
    sws_freeContext(sws);
    free(p.rgb);
    free(buf);
    return rc;
}
