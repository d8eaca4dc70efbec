/*
 * vocab.c - names of media types and codecs, in both directions. Codec names
 * follow FFmpeg's (what ffprobe prints) with common aliases accepted.
 */
#include "../core/core.h"

#include <string.h>

static const char *const type_names[DH_MEDIA_TYPE_COUNT] = {"video", "image", "audio"};

static const char *const codec_names[DH_CODEC_COUNT] = {
    "other", "h264", "hevc", "vp9", "av1", "vp8", "mpeg4", "jpeg",
    "png",   "flac", "pcm",  "aac", "mp3", "opus", "vorbis",
};

static const struct {
    const char *alias;
    dh_codec codec;
} codec_aliases[] = {
    {"avc", DH_CODEC_H264},      {"h265", DH_CODEC_HEVC},      {"mjpeg", DH_CODEC_JPEG},
    {"jpg", DH_CODEC_JPEG},      {"pcm_s16le", DH_CODEC_PCM},  {"pcm_s24le", DH_CODEC_PCM},
    {"pcm_f32le", DH_CODEC_PCM}, {"pcm_s32le", DH_CODEC_PCM},  {"libdav1d", DH_CODEC_AV1},
    {"wav", DH_CODEC_PCM},       {"mp3float", DH_CODEC_MP3},
};

const char *dh_media_type_name(dh_media_type t)
{
    return (unsigned)t < DH_MEDIA_TYPE_COUNT ? type_names[t] : "unknown";
}

int dh_media_type_from_name(const char *name)
{
    for (int i = 0; name && i < DH_MEDIA_TYPE_COUNT; i++)
        if (!strcmp(name, type_names[i]))
            return i;
    return -1;
}

const char *dh_codec_name(dh_codec c)
{
    return (unsigned)c < DH_CODEC_COUNT ? codec_names[c] : "other";
}

dh_codec dh_codec_from_name(const char *name)
{
    if (!name)
        return DH_CODEC_OTHER;
    for (int i = 1; i < DH_CODEC_COUNT; i++)
        if (!strcmp(name, codec_names[i]))
            return (dh_codec)i;
    for (size_t i = 0; i < sizeof codec_aliases / sizeof codec_aliases[0]; i++)
        if (!strcmp(name, codec_aliases[i].alias))
            return codec_aliases[i].codec;
    return DH_CODEC_OTHER;
}

void dh_limits_default(dh_limits *lim)
{
    lim->max_pixels = (int64_t)16384 * 16384;
    lim->max_frames = 10 * 1000 * 1000;
    lim->max_duration_s = 24.0 * 3600.0;
    lim->max_bytes = (int64_t)1 << 40;
    lim->max_media = 256;
    lim->max_text_tokens = 10 * 1000 * 1000;
    lim->max_keyframes = 1 << 20;
    lim->max_line_bytes = 16 << 20;
    lim->max_text_bytes = 1 << 20;
}
