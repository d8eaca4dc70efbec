/* scale.h - crop + scale + convert to RGB24 with libswscale (internal, src/codec only). */
#ifndef DH_SCALE_H
#define DH_SCALE_H

#include "decode.h"

#include <libswscale/swscale.h>

/*
 * libswscale's SIMD paths read past the last pixel of a source picture (32
 * bytes measured for packed RGB24 at 333x251 -> 336x336): a picture we
 * allocate ourselves gets this many spare bytes after it. Without them a
 * picture ending at a page boundary crashed the process (anyres-images).
 */
#define DH_SCALE_PAD 64

/*
 * Scales rectangle r of a picture (planes data/linesize, AVPixelFormat
 * pix_fmt) to ow x oh RGB24 at dst (stride 3 * ow). *cache is reused across
 * calls and freed by the caller with sws_freeContext().
 */
int dh__scale_rgb(struct SwsContext **cache, const uint8_t *const data[4], const int linesize[4],
                  int pix_fmt, dh__rect r, int ow, int oh, uint8_t *dst);

#endif
