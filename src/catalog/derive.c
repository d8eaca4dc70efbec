/*
 * derive.c - what a sample becomes under a spec, from its descriptor alone.
 *
 * Nothing is decoded here: output shapes and bytes, encoder latents, tokens,
 * and the decode work (frames the video decoder must produce given the
 * keyframe positions, source pixels after JPEG DCT-domain scaling) all follow
 * from metadata. The schedulers and cost models read these numbers long
 * before any worker opens a file.
 *
 * Video decode rule: frames are produced in order from a keyframe. For each
 * sampled frame t (ascending), let k be the last keyframe at or before t. If
 * the decoder already sits at or after k (and before t) it decodes forward
 * t - cur frames; otherwise it seeks to k and decodes t - k + 1 frames. So
 * samples closer together than the keyframe interval decode straight through,
 * and distant ones seek. Without a keyframe list only frame 0 is assumed to
 * be a keyframe (the worst case: one pass from the start).
 */
#include "catalog.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/*
 * Output size of a resize policy, and the intermediate size the source is
 * scaled to before any crop (what a DCT-domain downscale must still cover).
 */
void dh__resize_dims(const dh__resize *r, int64_t w, int64_t h, int64_t *ow, int64_t *oh,
                     int64_t *iw, int64_t *ih)
{
    double scale;
    switch (r->mode) {
    case DH_RESIZE_FIXED:
        *ow = *iw = r->width;
        *oh = *ih = r->height;
        return;
    case DH_RESIZE_LONG_SIDE: {
        scale = DH_MIN(1.0, (double)r->max_side / (double)DH_MAX(w, h));
        int64_t mult = r->multiple;
        *ow = DH_MAX(mult, llround(w * scale / mult) * mult);
        *oh = DH_MAX(mult, llround(h * scale / mult) * mult);
        *iw = *ow;
        *ih = *oh;
        return;
    }
    case DH_RESIZE_BUCKET: {
        /* Nearest aspect ratio in log space, then cover + centre crop. */
        double src = log((double)w / (double)h), best = INFINITY;
        for (int i = 0; i < r->nbuckets; i++) {
            double d = fabs(log((double)r->buckets[i][1] / r->buckets[i][0]) - src);
            if (d < best) {
                best = d;
                *oh = r->buckets[i][0];
                *ow = r->buckets[i][1];
            }
        }
        break;
    }
    case DH_RESIZE_CROP:
    case DH_RESIZE_RANDOM_RESIZED_CROP: /* the crop's intermediate: see image_need */
    case DH_RESIZE_RANDOM_CROP:
        *ow = r->width;
        *oh = r->height;
        break;
    case DH_RESIZE_NATIVE:
    default:
        *ow = *iw = w;
        *oh = *ih = h;
        return;
    }
    scale = DH_MAX((double)*ow / w, (double)*oh / h);
    *iw = DH_MAX(*ow, (int64_t)ceil(w * scale - 1e-9));
    *ih = DH_MAX(*oh, (int64_t)ceil(h * scale - 1e-9));
}

/*
 * libjpeg-turbo can decode at M/8 scale (M = 1..8 when shrinking). The
 * smallest M whose output still covers the resize intermediate is chosen,
 * as the real decoder does (decode_image.c calls dh__jpeg_scale_m()).
 */
static int jpeg_scale_for(int64_t w, int64_t h, int64_t need_w, int64_t need_h)
{
    for (int m = 1; m <= 8; m++)
        if (ceil_div(w * m, 8) >= need_w && ceil_div(h * m, 8) >= need_h)
            return m;
    return 8;
}

static int64_t grid_tokens(int64_t w, int64_t h, int32_t patch, int32_t pool)
{
    return ceil_div(DH_MAX(1, h / patch), pool) * ceil_div(DH_MAX(1, w / patch), pool);
}

/* Last keyframe at or before t (binary search); 0 when none is known. */
static int64_t keyframe_before(const dh_media_info *v, int64_t t)
{
    int32_t lo = 0, hi = v->keyframe_count - 1;
    int64_t best = 0;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (v->keyframes[mid] <= t) {
            best = v->keyframes[mid];
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return best;
}

static int derive_video(const dh_spec *s, const dh_media_info *v, const dh_media_draw *dr,
                        dh_media_derived *d)
{
    int64_t buf[512], *idx = buf;
    int64_t count = dh_video_frames_drawn(s, v, dr, buf, 512);
    if (count < 0)
        return (int)count;
    if (count > 512) {
        idx = malloc((size_t)count * sizeof *idx);
        if (!idx)
            return DH_ENOMEM;
        dh_video_frames_drawn(s, v, dr, idx, count);
    }
    int64_t cur = -1, decoded = 0;
    int32_t seeks = 0;
    for (int64_t k = 0; k < count; k++) {
        int64_t t = idx[k], key = keyframe_before(v, t);
        if (cur >= key && cur < t) {
            decoded += t - cur;
        } else {
            decoded += t - key + 1;
            seeks++;
        }
        cur = t;
    }
    if (idx != buf)
        free(idx);
    int64_t ow, oh, iw, ih;
    dh__resize_dims(&s->video.resize, v->width, v->height, &ow, &oh, &iw, &ih);
    d->ndim = 4;
    d->shape[0] = count;
    d->shape[1] = oh;
    d->shape[2] = ow;
    d->shape[3] = 3;
    d->elem_bytes = 1;
    d->sampled_frames = count;
    d->decoded_frames = decoded;
    d->seeks = seeks;
    d->decode_pixels = decoded * (int64_t)v->width * v->height;
    d->resize_pixels = count * ow * oh;
    if (s->video.vae_temporal > 0)
        d->latents = (1 + (count - 1) / s->video.vae_temporal) * (oh / s->video.vae_spatial) *
                     (ow / s->video.vae_spatial);
    else
        d->latents = ceil_div(count, s->video.temporal_patch) *
                     grid_tokens(ow, oh, s->video.patch, s->video.pool);
    d->out_width = (int32_t)ow;
    d->out_height = (int32_t)oh;
    return 0;
}

/* Any-res tiling: a grid covering the image, shrunk until it fits max tiles. */
void dh__image_grid(const dh_spec *s, int64_t w, int64_t h, int64_t *cols, int64_t *rows)
{
    *cols = ceil_div(w, s->image.tile_size);
    *rows = ceil_div(h, s->image.tile_size);
    while (*cols * *rows > s->image.max_tiles) {
        if (*cols >= *rows)
            (*cols)--;
        else
            (*rows)--;
    }
}

static int64_t image_tiles(const dh_spec *s, int64_t w, int64_t h)
{
    int64_t cols, rows;
    dh__image_grid(s, w, h, &cols, &rows);
    return cols * rows + (s->image.base_tile ? 1 : 0);
}

/* Size the decoded image must still cover: the resize intermediate, or all of it for tiles;
 * for a random crop, the size at which its rectangle still covers the output. */
static void image_need(const dh_spec *s, int64_t w, int64_t h, const dh_media_draw *dr,
                       int64_t *nw, int64_t *nh)
{
    int64_t ow, oh;
    if (s->image.tile_size > 0) {
        *nw = w;
        *nh = h;
        return;
    }
    dh__resize_dims(&s->image.resize, w, h, &ow, &oh, nw, nh);
    if (s->image.resize.mode >= DH_RESIZE_RANDOM_RESIZED_CROP && dr && dr->crop_w > 0 &&
        dr->crop_h > 0) {
        *nw = ceil_div(w * ow, dr->crop_w);
        *nh = ceil_div(h * oh, dr->crop_h);
    }
    *nw = DH_MIN(*nw, w);
    *nh = DH_MIN(*nh, h);
}

int dh__jpeg_scale_m(const dh_spec *s, int64_t w, int64_t h, const dh_media_draw *dr)
{
    int64_t nw, nh;
    image_need(s, w, h, dr, &nw, &nh);
    return jpeg_scale_for(w, h, nw, nh);
}

static void derive_image(const dh_spec *s, const dh_media_info *v, const dh_media_draw *dr,
                         dh_media_derived *d)
{
    int64_t ow, oh, iw, ih;
    if (s->image.tile_size > 0) {
        ow = oh = s->image.tile_size;
        int64_t tiles = image_tiles(s, v->width, v->height);
        d->ndim = 4;
        d->shape[0] = tiles;
        d->latents = tiles * grid_tokens(ow, oh, s->image.patch, s->image.pool);
        d->resize_pixels = tiles * ow * oh;
    } else {
        dh__resize_dims(&s->image.resize, v->width, v->height, &ow, &oh, &iw, &ih);
        d->ndim = 3;
        d->latents = grid_tokens(ow, oh, s->image.patch, s->image.pool);
        d->resize_pixels = ow * oh;
    }
    int off = d->ndim == 4 ? 1 : 0;
    d->shape[off] = oh;
    d->shape[off + 1] = ow;
    d->shape[off + 2] = 3;
    d->elem_bytes = 1;
    d->sampled_frames = 1;
    d->decoded_frames = 1;
    /* JPEG decodes at the DCT scale that still covers the resize (whole image for tiles). */
    int m = v->codec == DH_CODEC_JPEG ? dh__jpeg_scale_m(s, v->width, v->height, dr) : 8;
    d->decode_pixels = ceil_div((int64_t)v->width * m, 8) * ceil_div((int64_t)v->height * m, 8);
    d->out_width = (int32_t)ow;
    d->out_height = (int32_t)oh;
}

static void derive_audio(const dh_spec *s, const dh_media_info *v, dh_media_derived *d)
{
    double dur = s->audio.clip_s > 0 ? DH_MIN(s->audio.clip_s, v->duration_s) : v->duration_s;
    d->elem_bytes = 4;
    if (s->audio.mel_bins > 0) {
        d->ndim = 2;
        d->shape[0] = s->audio.mel_bins;
        d->shape[1] = (int64_t)ceil(dur * s->audio.mel_fps - 1e-9);
    } else {
        d->ndim = 1;
        d->shape[0] = (int64_t)ceil(dur * s->audio.sample_rate - 1e-9);
    }
    d->latents = (int64_t)ceil(dur * s->audio.tokens_per_s - 1e-9);
}

int dh_derive_media(const dh_spec *spec, const dh_media_info *media, dh_media_derived *d)
{
    return dh_derive_media_drawn(spec, media, NULL, d);
}

int dh_derive_media_drawn(const dh_spec *spec, const dh_media_info *media,
                          const dh_media_draw *draw, dh_media_derived *d)
{
    if (!spec || !media || !d)
        return DH_EINVAL;
    memset(d, 0, sizeof *d);
    dh_media_draw plain;
    if (!draw && media->type == DH_MEDIA_IMAGE && dh_media_draw_plain(spec, media, &plain) == 0)
        draw = &plain; /* a random crop's plain rectangle decides the JPEG scale */
    switch (media->type) {
    case DH_MEDIA_VIDEO: {
        int rc = derive_video(spec, media, draw, d);
        if (rc)
            return rc;
        break;
    }
    case DH_MEDIA_IMAGE:
        if (media->width <= 0 || media->height <= 0)
            return DH_EINVAL;
        derive_image(spec, media, draw, d);
        break;
    case DH_MEDIA_AUDIO:
        derive_audio(spec, media, d);
        break;
    default:
        return DH_EINVAL;
    }
    /* Media tokens are the encoder latents projected one to one. */
    d->tokens = d->latents;
    d->out_bytes = d->elem_bytes;
    for (int i = 0; i < d->ndim; i++)
        if (__builtin_mul_overflow(d->out_bytes, d->shape[i], &d->out_bytes) ||
            d->out_bytes > DH_MAX_ITEM_BYTES)
            return DH_ELIMIT; /* the spec asks for more than an item may hold */
    return 0;
}

int64_t dh__text_tokens(const dh_spec *spec, const char *text)
{
    if (!text)
        return 0;
    double n;
    if (spec->text.tokens_per_word > 0) {
        int64_t words = 0;
        for (const char *p = text; *p; p++) /* ASCII whitespace separates words */
            words += !isspace((unsigned char)*p) && (p == text || isspace((unsigned char)p[-1]));
        n = (double)words * spec->text.tokens_per_word;
    } else {
        n = (double)strlen(text) / spec->text.bytes_per_token;
    }
    return (int64_t)ceil(n - 1e-9);
}

int dh_derive_sample(const dh_spec *spec, const dh_manifest *m, int64_t i, dh_sample_derived *out,
                     dh_media_derived *per_media)
{
    dh_sample_info si;
    int rc = dh_manifest_sample(m, i, &si);
    if (rc || !spec || !out)
        return rc ? rc : DH_EINVAL;
    memset(out, 0, sizeof *out);
    int64_t text = si.text_tokens >= 0 ? si.text_tokens : dh__text_tokens(spec, si.text);
    if (spec->text.max_tokens > 0)
        text = DH_MIN(text, spec->text.max_tokens);
    out->tokens = text;
    out->out_bytes = text * 4;
    out->media_count = si.media_count;
    for (int32_t j = 0; j < si.media_count; j++) {
        dh_media_info mi;
        dh_media_derived md;
        dh_manifest_media(m, i, j, &mi);
        if ((rc = dh_derive_media(spec, &mi, &md)))
            return rc;
        out->tokens += md.tokens;
        out->latents += md.latents;
        out->out_bytes += md.out_bytes;
        out->decoded_frames += md.decoded_frames;
        out->decode_pixels += md.decode_pixels;
        if (per_media)
            per_media[j] = md;
    }
    return 0;
}

int dh_media_recipe_of(const dh_spec *spec, const dh_media_info *media, dh_media_recipe *out)
{
    if (!spec || !media || !out)
        return DH_EINVAL;
    static const char *const names[] = {"native", "fixed", "crop", "long_side", "bucket",
                                        "random_resized_crop", "random_crop"};
    memset(out, 0, sizeof *out);
    const dh__resize *rz = media->type == DH_MEDIA_VIDEO   ? &spec->video.resize
                           : media->type == DH_MEDIA_IMAGE ? &spec->image.resize
                                                           : NULL;
    out->resize = rz && rz->mode >= 0 && rz->mode <= DH_RESIZE_RANDOM_CROP ? names[rz->mode] : "native";
    if (media->type == DH_MEDIA_IMAGE && spec->image.tile_size > 0) {
        dh__image_grid(spec, media->width, media->height, &out->tile_cols, &out->tile_rows);
        out->base_tile = spec->image.base_tile != 0;
    }
    if (media->type == DH_MEDIA_AUDIO) {
        out->sample_rate = spec->audio.sample_rate;
        out->mel_bins = spec->audio.mel_bins;
        out->mel_fps = spec->audio.mel_fps;
    }
    return 0;
}

int64_t dh__stored_bytes(const dh_media_info *mi)
{
    if (mi->bytes > 0)
        return mi->bytes;
    double px = (double)mi->width * (double)mi->height, b;
    if (mi->type == DH_MEDIA_VIDEO) {
        double frames = mi->frames > 0 ? (double)mi->frames : mi->duration_s * mi->fps;
        b = px * frames * 0.1 / 8;
    } else if (mi->type == DH_MEDIA_IMAGE) {
        b = px * (mi->codec == DH_CODEC_PNG ? 12.0 : 2.0) / 8;
    } else {
        b = mi->duration_s * (mi->sample_rate > 0 ? mi->sample_rate : 16000) *
            (mi->channels > 0 ? mi->channels : 1) * 10.0 / 8;
    }
    return b >= 1 ? (int64_t)b : 1;
}
