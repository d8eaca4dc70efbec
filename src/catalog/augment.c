/*
 * augment.c - what a spec's random keys choose for one media item (docs/SPEC.md, "Random
 * augmentation"): the clip a video's frames come from, the crop, the flip, an audio window.
 *
 * DESIGN: every choice is a draw of core/draw.c keyed by (seed, epoch, sample id, item), so
 * it is made when the sample is planned and made again, identical, wherever it is needed (the
 * cost model, the worker that decodes it, a resumed or re-planned run, another world size);
 * nothing is saved. A draw never changes an output shape: the clip's length, the number of
 * frames and the crop's output size are the spec's, only where they come from moves. The
 * plain draw puts every choice at its central value; derivation without a draw uses it, and
 * a spec without random keys gives exactly what it gave before they existed.
 */
#include "catalog.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int dh_spec_is_random(const dh_spec *s)
{
    if (!s || s->plain)
        return 0;
    return s->video.random_start || s->video.fps_jitter > 0 || s->video.aug.flip > 0 ||
           s->video.resize.mode >= DH_RESIZE_RANDOM_RESIZED_CROP || s->image.aug.flip > 0 ||
           s->image.resize.mode >= DH_RESIZE_RANDOM_RESIZED_CROP || s->audio.random_offset;
}

/* Flips, and a crop resize becomes a random resized crop of its size with torchvision's
 * ranges, unless the spec's own JSON gave the flip or the resize. */
static void augment_visual(dh__resize *r, dh__augment *a, int tiles, int flip_given,
                           int resize_given)
{
    if (!flip_given)
        a->flip = 0.5;
    if (r->mode != DH_RESIZE_CROP || tiles || resize_given)
        return;
    r->mode = DH_RESIZE_RANDOM_RESIZED_CROP;
    a->scale[0] = 0.08;
    a->scale[1] = 1.0;
    a->ratio[0] = 3.0 / 4.0;
    a->ratio[1] = 4.0 / 3.0;
}

int dh_spec_augment(dh_spec *s)
{
    if (!s)
        return DH_EINVAL;
    uint32_t g = s->given;
    augment_visual(&s->video.resize, &s->video.aug, 0, g & DH__GIVEN_VFLIP,
                   g & DH__GIVEN_VRESIZE);
    augment_visual(&s->image.resize, &s->image.aug, s->image.tile_size > 0, g & DH__GIVEN_IFLIP,
                   g & DH__GIVEN_IRESIZE);
    if (s->video.sampling == DH_SAMPLE_CONSECUTIVE) {
        s->video.random_start |= !(g & DH__GIVEN_START);
    } else if (s->video.sampling == DH_SAMPLE_UNIFORM) {
        if (!(g & DH__GIVEN_CLIP))
            s->video.clip_s = 4.0;
        if (s->video.clip_s > 0 && !(g & DH__GIVEN_START))
            s->video.random_start = 1;
        if (s->video.clip_s > 0 && !(g & DH__GIVEN_JITTER))
            s->video.fps_jitter = 0.2;
    }
    return 0;
}

int dh_spec_plain(dh_spec *s)
{
    if (!s)
        return DH_EINVAL;
    s->plain = 1;
    return 0;
}

/* Appends to the text in buf (len bytes in all), ", " first unless it is empty. */
static void add(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void add(char *buf, size_t len, const char *fmt, ...)
{
    size_t at = strlen(buf);
    if (at && at + 2 < len)
        memcpy(buf + at, ", ", 3), at += 2;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + at, len - at, fmt, ap);
    va_end(ap);
}

/* One visual section's random resize and flip. */
static void visual_text(char *buf, size_t len, const dh__resize *r, const dh__augment *a)
{
    if (r->mode == DH_RESIZE_RANDOM_RESIZED_CROP)
        add(buf, len, "random_resized_crop %dx%d (scale %g-%g, ratio %.3g-%.3g)", r->width,
            r->height, a->scale[0], a->scale[1], a->ratio[0], a->ratio[1]);
    else if (r->mode == DH_RESIZE_RANDOM_CROP)
        add(buf, len, "random_crop %dx%d (short side %d-%d)", r->width, r->height,
            a->short_side[0], a->short_side[1]);
    if (a->flip > 0)
        add(buf, len, "flip %g", a->flip);
}

void dh_spec_random_text(const dh_spec *s, char *buf, size_t len)
{
    if (!buf || !len)
        return;
    if (s && s->plain) {
        snprintf(buf, len, "off (--no-augment: every item its plain draw)");
        return;
    }
    char v[256] = "", im[256] = "", au[128] = "";
    if (s && s->video.sampling == DH_SAMPLE_CONSECUTIVE && s->video.random_start)
        add(v, sizeof v, "its %lld frames at a random start", (long long)s->video.frames);
    else if (s && (s->video.random_start || s->video.fps_jitter > 0))
        add(v, sizeof v, "a %g s clip at a %s start", s->video.clip_s,
            s->video.random_start ? "random" : "centred");
    if (s && s->video.fps_jitter > 0)
        add(v, sizeof v, "fps jitter %g", s->video.fps_jitter);
    if (s) {
        visual_text(v, sizeof v, &s->video.resize, &s->video.aug);
        visual_text(im, sizeof im, &s->image.resize, &s->image.aug);
    }
    if (s && s->audio.random_offset)
        add(au, sizeof au, "a %g s window at a random offset", s->audio.clip_s);
    snprintf(buf, len, "%s%s%s%s%s%s%s%s%s", v[0] ? "video: " : "", v,
             v[0] && (im[0] || au[0]) ? "; " : "", im[0] ? "image: " : "", im,
             im[0] && au[0] ? "; " : "", au[0] ? "audio: " : "", au,
             v[0] || im[0] || au[0] ? "" : "off");
}

dh__rect dh__cover_crop(int w, int h, int ow, int oh)
{
    double scale = fmax((double)ow / w, (double)oh / h);
    int cw = (int)lround(ow / scale), ch = (int)lround(oh / scale);
    cw = DH_MAX(2, DH_MIN(cw, w)) & ~1;
    ch = DH_MAX(2, DH_MIN(ch, h)) & ~1;
    dh__rect r = {((w - cw) / 2) & ~1, ((h - ch) / 2) & ~1, cw, ch};
    return r;
}

/* A video's frame range [a, b) under start_s/end_s, the clip's length and the frame count. */
typedef struct {
    int64_t a, b, len, count;
} vclip;

static int video_clip(const dh_spec *s, const dh_media_info *v, vclip *c)
{
    if (v->type != DH_MEDIA_VIDEO || v->frames <= 0 || v->fps <= 0)
        return DH_EINVAL;
    int64_t n = v->frames;
    int64_t a = (int64_t)floor(s->video.start_s * v->fps);
    int64_t b = s->video.end_s > 0 ? (int64_t)ceil(s->video.end_s * v->fps) : n;
    /* The range is clipped to the video; an empty remainder keeps the last frame. */
    c->a = a = DH_MIN(DH_MAX(a, 0), n - 1);
    c->b = b = DH_MAX(DH_MIN(b, n), a + 1);
    int64_t span = b - a, len = span, count;
    if (s->video.clip_s > 0)
        len = DH_MIN(DH_MAX(llround(s->video.clip_s * v->fps), 1), span);
    if (s->video.sampling == DH_SAMPLE_FPS) {
        count = (int64_t)floor((double)len / v->fps * s->video.fps + 1e-9);
        count = DH_MIN(DH_MAX(count, 1), s->video.max_frames);
    } else {
        count = s->video.frames;
    }
    c->count = DH_MIN(count, len);
    c->len = s->video.sampling == DH_SAMPLE_CONSECUTIVE ? c->count : len;
    return 0;
}

int64_t dh_video_frames_drawn(const dh_spec *s, const dh_media_info *v, const dh_media_draw *d,
                              int64_t *out, int64_t cap)
{
    dh_media_draw plain;
    vclip c;
    if (!s || !v || (cap > 0 && !out))
        return DH_EINVAL;
    int rc = video_clip(s, v, &c);
    if (!rc && !d)
        rc = dh_media_draw_plain(s, v, &plain);
    if (rc)
        return rc;
    d = d ? d : &plain;
    int64_t first = d->first_frame, span = d->frame_span;
    if (first < c.a || span < c.count || first + span > c.b)
        return DH_EINVAL; /* not a draw of this video under this spec */
    if (s->video.sampling == DH_SAMPLE_CONSECUTIVE && span != c.count)
        return DH_EINVAL;
    /* the centre of each of count equal segments: distinct since count <= span (consecutive:
     * span is count, so frame k is first + k) */
    return dh_draw_frames(d, c.count, out, cap);
}

int64_t dh_draw_frames(const dh_media_draw *d, int64_t count, int64_t *out, int64_t cap)
{
    if (!d || count < 1 || d->frame_span < count || (cap > 0 && !out))
        return DH_EINVAL;
    for (int64_t k = 0; k < count && k < cap; k++)
        out[k] = d->first_frame + (2 * k + 1) * d->frame_span / (2 * count);
    return count;
}

int64_t dh_video_sample_frames(const dh_spec *s, const dh_media_info *v, int64_t *out, int64_t cap)
{
    return dh_video_frames_drawn(s, v, NULL, out, cap);
}

/* The clip: its first frame and span (plain: centred, the spec's length). */
static void draw_clip(const dh_spec *s, const dh_media_info *v, const vclip *cl,
                      const dh__draws *r, dh_media_draw *d)
{
    vclip c = *cl;
    int64_t span = c.b - c.a, len = c.len;
    if (r && s->video.fps_jitter > 0) {
        double f = dh__draw_range(r, DH__DRAW_JITTER, 1 - s->video.fps_jitter,
                                  1 + s->video.fps_jitter);
        len = DH_MIN(DH_MAX(llround((double)len * f), c.count), span);
    }
    d->frame_span = len;
    uint64_t room = (uint64_t)(span - len + 1);
    d->first_frame = c.a + (r && s->video.random_start
                                ? (int64_t)dh__draw_below(r, DH__DRAW_START, room)
                                : (span - len) / 2);
    d->start_s = (double)d->first_frame / v->fps;
    d->span_s = (double)len / v->fps;
}

/* torchvision's RandomResizedCrop: ten tries at a random area and aspect, then the fallback
 * (plain: straight to it), the whole image clamped to the aspect range, centred. */
static dh__rect resized_crop(const dh__augment *a, int W, int H, const dh__draws *r)
{
    double area = (double)W * H, lr0 = log(a->ratio[0]), lr1 = log(a->ratio[1]);
    for (uint32_t t = 0; r && t < 10; t++) {
        uint32_t n = DH__DRAW_RRC + 4 * t;
        double target = area * dh__draw_range(r, n, a->scale[0], a->scale[1]);
        double aspect = exp(dh__draw_range(r, n + 1, lr0, lr1));
        long w = lround(sqrt(target * aspect)), h = lround(sqrt(target / aspect));
        if (w > 0 && w <= W && h > 0 && h <= H)
            return (dh__rect){(int)dh__draw_below(r, n + 3, (uint64_t)(W - w + 1)),
                              (int)dh__draw_below(r, n + 2, (uint64_t)(H - h + 1)), (int)w, (int)h};
    }
    double in = (double)W / H;
    int w = W, h = H;
    if (in < a->ratio[0])
        h = (int)DH_MAX(1, lround(w / a->ratio[0]));
    else if (in > a->ratio[1])
        w = (int)DH_MAX(1, lround(h * a->ratio[1]));
    return (dh__rect){(W - w) / 2, (H - h) / 2, w, h};
}

/* Short side scaled to a random length in the range (at least covering the output), then a
 * random crop of the output's size (plain: the shortest side, centred). */
static dh__rect short_side_crop(const dh__augment *a, int W, int H, int ow, int oh,
                                const dh__draws *r)
{
    double side = a->short_side[0];
    if (r && a->short_side[1] > a->short_side[0])
        side += (double)dh__draw_below(r, DH__DRAW_SHORT,
                                       (uint64_t)(a->short_side[1] - a->short_side[0] + 1));
    double scale = fmax(side / DH_MIN(W, H), fmax((double)ow / W, (double)oh / H));
    int cw = (int)DH_MIN(W, DH_MAX(1, lround(ow / scale)));
    int ch = (int)DH_MIN(H, DH_MAX(1, lround(oh / scale)));
    int x = r ? (int)dh__draw_below(r, DH__DRAW_CROP_X, (uint64_t)(W - cw + 1)) : (W - cw) / 2;
    int y = r ? (int)dh__draw_below(r, DH__DRAW_CROP_Y, (uint64_t)(H - ch + 1)) : (H - ch) / 2;
    return (dh__rect){x, y, cw, ch};
}

/* The source rectangle of a visual item (the whole image for tiles and modes without crop). */
static dh__rect draw_crop(const dh__resize *rz, const dh__augment *a, int W, int H, int tiles,
                          const dh__draws *r)
{
    int64_t ow, oh, iw, ih;
    dh__resize_dims(rz, W, H, &ow, &oh, &iw, &ih);
    if (tiles)
        return (dh__rect){0, 0, W, H};
    switch (rz->mode) {
    case DH_RESIZE_CROP:
    case DH_RESIZE_BUCKET:
        return dh__cover_crop(W, H, (int)ow, (int)oh);
    case DH_RESIZE_RANDOM_RESIZED_CROP:
        return resized_crop(a, W, H, r);
    case DH_RESIZE_RANDOM_CROP:
        return short_side_crop(a, W, H, (int)ow, (int)oh, r);
    default:
        return (dh__rect){0, 0, W, H};
    }
}

static int draw_item(const dh_spec *s, const dh_media_info *v, const dh__draws *r,
                     dh_media_draw *d)
{
    if (!s || !v || !d)
        return DH_EINVAL;
    memset(d, 0, sizeof *d);
    const dh__resize *rz = NULL;
    const dh__augment *a = NULL;
    if (v->type == DH_MEDIA_VIDEO) {
        vclip c;
        int rc = video_clip(s, v, &c);
        if (rc)
            return rc;
        draw_clip(s, v, &c, r, d);
        rz = &s->video.resize;
        a = &s->video.aug;
    } else if (v->type == DH_MEDIA_IMAGE) {
        rz = &s->image.resize;
        a = &s->image.aug;
    } else if (v->type == DH_MEDIA_AUDIO) {
        double dur = DH_MAX(0.0, v->duration_s);
        d->span_s = s->audio.clip_s > 0 ? DH_MIN(s->audio.clip_s, dur) : dur;
        d->start_s = r && s->audio.random_offset
                         ? dh__draw_range(r, DH__DRAW_START, 0, dur - d->span_s)
                         : (dur - d->span_s) / 2;
        return 0;
    } else {
        return DH_EINVAL;
    }
    if (v->width <= 0 || v->height <= 0)
        return DH_EINVAL;
    int tiles = v->type == DH_MEDIA_IMAGE && s->image.tile_size > 0;
    dh__rect c = draw_crop(rz, a, v->width, v->height, tiles, r);
    if (v->type == DH_MEDIA_VIDEO && rz->mode >= DH_RESIZE_RANDOM_RESIZED_CROP) {
        c.x &= ~1; /* 4:2:0 chroma: even offsets and sizes keep colour aligned with luma */
        c.y &= ~1;
        c.w = DH_MAX(2, c.w & ~1);
        c.h = DH_MAX(2, c.h & ~1);
    }
    d->crop_x = c.x;
    d->crop_y = c.y;
    d->crop_w = c.w;
    d->crop_h = c.h;
    d->flip = r && a->flip > 0 && dh__draw_unit(r, DH__DRAW_FLIP) < a->flip;
    return 0;
}

int dh_media_draw_plain(const dh_spec *s, const dh_media_info *v, dh_media_draw *d)
{
    return draw_item(s, v, NULL, d);
}

int dh_media_draw_of(const dh_spec *s, const dh_media_info *v, uint64_t seed, int64_t epoch,
                     const char *sample_id, int32_t item, dh_media_draw *d)
{
    dh__draws r = dh__draws_of(seed, epoch, sample_id, item);
    return draw_item(s, v, dh_spec_is_random(s) ? &r : NULL, d);
}
