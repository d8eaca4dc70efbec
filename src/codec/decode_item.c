/*
 * decode_item.c - one media item as its draw says: the entry the engine's workers use, which
 * sends each type to its decoder with the draw of random augmentation (catalog.h), and the
 * flip the image and video decoders share.
 */
#include "decode.h"

#include <string.h>

void dh__flip_rgb(uint8_t *px, int w, int rows)
{
    for (int y = 0; y < rows; y++) {
        uint8_t *a = px + (size_t)y * w * 3, *b = a + (size_t)(w - 1) * 3;
        for (; a < b; a += 3, b -= 3)
            for (int c = 0; c < 3; c++) {
                uint8_t t = a[c];
                a[c] = b[c];
                b[c] = t;
            }
    }
}

int dh__decode_item(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                    const dh_media_draw *draw, int part, int nparts, uint8_t *dst, size_t cap,
                    dh__decode_stats *st, char *err, size_t errlen)
{
    dh_media_draw plain;
    if (!draw) {
        int rc = dh_media_draw_plain(spec, mi, &plain);
        if (rc)
            return dh__fail(err, errlen, rc, "cannot derive the output shape");
        draw = &plain;
    }
    if (mi->type == DH_MEDIA_VIDEO)
        return dh__decode_video_part(src, spec, mi, draw, part, nparts, dst, cap, st, err, errlen);
    if (part > 0) { /* only videos split; other items belong to part 0 */
        if (st)
            memset(st, 0, sizeof *st);
        return 0;
    }
    if (mi->type == DH_MEDIA_IMAGE)
        return dh__decode_image_drawn(src, spec, mi, draw, dst, cap, st, err, errlen);
    return dh__decode_audio_drawn(src, spec, mi, draw, dst, cap, st, err, errlen);
}
