/*
 * scale.c - crop a source picture and scale it into an RGB24 slot with
 * libswscale (bilinear; conversion to RGB24 in the same pass). Shared by the
 * video and image decoders so that both produce identical resizes.
 */
#include "scale.h"

#include <libavutil/imgutils.h>
#include <libavutil/pixdesc.h>

int dh__scale_rgb(struct SwsContext **cache, const uint8_t *const data[4], const int linesize[4],
                  int pix_fmt, dh__rect r, int ow, int oh, uint8_t *dst)
{
    *cache = sws_getCachedContext(*cache, r.w, r.h, pix_fmt, ow, oh, AV_PIX_FMT_RGB24,
                                  SWS_BILINEAR, NULL, NULL, NULL);
    if (!*cache)
        return DH_EUNSUPPORTED;
    const AVPixFmtDescriptor *d = av_pix_fmt_desc_get(pix_fmt);
    int steps[4];
    av_image_fill_max_pixsteps(steps, NULL, d);
    const uint8_t *src[4] = {0};
    for (int p = 0; p < 4 && data[p]; p++) {
        int chroma = p == 1 || p == 2;
        int sx = chroma ? d->log2_chroma_w : 0, sy = chroma ? d->log2_chroma_h : 0;
        src[p] = data[p] + (ptrdiff_t)(r.y >> sy) * linesize[p] + (ptrdiff_t)(r.x >> sx) * steps[p];
    }
    uint8_t *out[4] = {dst, NULL, NULL, NULL};
    int out_stride[4] = {3 * ow, 0, 0, 0};
    sws_scale(*cache, src, linesize, 0, r.h, out, out_stride);
    return 0;
}
