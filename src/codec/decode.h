/*
 * decode.h - decoding one media item straight into its slot of a batch
 * buffer (internal). The output layout is the one dh_derive_media() gives
 * for the same spec and descriptor, so a batch can be laid out before any
 * decoding: video T x H x W x 3 uint8, image [tiles x] H x W x 3 uint8, audio
 * float32 samples or mel_bins x frames.
 *
 * Decoders run single-threaded (the worker pool owns parallelism) and never
 * write past dst + cap. They read through a dh__source (source.h): confined
 * to the manifest's directory, regular files only, within the source's time
 * limit (DH_ETIMEDOUT past it). A file that contradicts its descriptor (other size,
 * fewer frames) is an error naming what differs.
 */
#ifndef DH_DECODE_H
#define DH_DECODE_H

#include "../catalog/catalog.h"
#include "codec.h"
#include "source.h"

typedef struct {
    int64_t frames_decoded; /* video: frames the decoder produced */
    int32_t seeks;          /* video: seeks performed */
    int64_t bytes_written;
} dh__decode_stats;

/*
 * Decodes sampled frames [first, end) of the video (end < 0: all) into their
 * places in the slot dst (which is always the whole item's slot): a split
 * sample's parts each decode their share, each starting from its keyframe.
 * draw: what random augmentation chose (catalog.h; NULL: the plain draw).
 */
int dh__decode_video_range(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                           const dh_media_draw *draw, int64_t first, int64_t end, uint8_t *dst,
                           size_t cap, dh__decode_stats *st, char *err, size_t errlen);
int dh__decode_video(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                     uint8_t *dst, size_t cap, dh__decode_stats *st, char *err, size_t errlen);
/*
 * Part `part` of `nparts` of a split video: whole keyframe segments (runs of
 * sampled frames that start with a seek under the derivation's rule), shared
 * out in order, so no frame is decoded by two parts.
 */
int dh__decode_video_part(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                          const dh_media_draw *draw, int part, int nparts, uint8_t *dst,
                          size_t cap, dh__decode_stats *st, char *err, size_t errlen);

/* The bytes of a video's item that part `part` of `nparts` writes: [*off, *off + *len). */
int dh__video_part_bytes(const dh_spec *spec, const dh_media_info *mi, const dh_media_draw *draw,
                         int part, int nparts, int64_t *off, int64_t *len);

int dh__decode_image(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                     uint8_t *dst, size_t cap, dh__decode_stats *st, char *err, size_t errlen);

int dh__decode_audio(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                     uint8_t *dst, size_t cap, dh__decode_stats *st, char *err, size_t errlen);

/*
 * Any media item as its draw says (NULL: the plain draw; the three above decode the plain
 * draw): part `part` of `nparts` (only a video splits; other items are part 0's, and a
 * later part of one writes nothing). Random crops are a rectangle of the decoded picture
 * scaled once to the output; a flip mirrors the output's rows (a tiled image's picture,
 * before it is tiled); a clip decides which packets are decoded; an audio window is cut
 * from the decoded stream.
 */
int dh__decode_item(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                    const dh_media_draw *draw, int part, int nparts, uint8_t *dst, size_t cap,
                    dh__decode_stats *st, char *err, size_t errlen);

/* The image and audio decoders for one draw (never NULL): dh__decode_item's. */
int dh__decode_image_drawn(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                           const dh_media_draw *draw, uint8_t *dst, size_t cap,
                           dh__decode_stats *st, char *err, size_t errlen);
int dh__decode_audio_drawn(const dh__media_src *src, const dh_spec *spec, const dh_media_info *mi,
                           const dh_media_draw *draw, uint8_t *dst, size_t cap,
                           dh__decode_stats *st, char *err, size_t errlen);

/* Mirrors each of `rows` rows of `w` RGB24 pixels left to right, in place. */
void dh__flip_rgb(uint8_t *px, int w, int rows);

#endif
