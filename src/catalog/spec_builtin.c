/*
 * spec_builtin.c - the preprocessing specs of the eleven workloads of the
 * docs/WORKLOADS.md suite, as JSON text parsed by spec.c (one meaning of a
 * spec, whichever way it arrives). Token counts follow the table: e.g.
 * llava-video-sft's 384 px frames with patch 14 give a 27x27 grid, pooled 2x2
 * (rounding up) to 14x14 = 196 tokens per frame.
 */
#include "catalog.h"

#include <string.h>

#define CROP(n) "{\"mode\":\"crop\",\"size\":" #n "}"

/* (name, JSON) pairs; an X-macro so names and texts come from one list. */
#define BUILTIN_SPECS(XX) \
    XX("default", "{}") \
    XX("kinetics-clips", \
     "{\"video\":{\"sampling\":\"uniform\",\"frames\":16,\"resize\":" CROP(224) \
     ",\"patch\":14,\"temporal_patch\":2}}") \
    XX("webvid-caption", \
     "{\"video\":{\"sampling\":\"uniform\",\"frames\":8,\"resize\":" CROP(224) \
     ",\"patch\":14,\"temporal_patch\":1}}") \
    XX("panda-hires", \
     "{\"video\":{\"sampling\":\"uniform\",\"frames\":32,\"resize\":" CROP(256) \
     ",\"patch\":16,\"temporal_patch\":2}}") \
    XX("native-res-video", \
     "{\"video\":{\"sampling\":\"fps\",\"fps\":2,\"max_frames\":64," \
     "\"resize\":{\"mode\":\"long_side\",\"max\":448,\"multiple\":14}," \
     "\"patch\":14,\"temporal_patch\":2}}") \
    XX("llava-video-sft", \
     "{\"video\":{\"sampling\":\"fps\",\"fps\":1,\"max_frames\":64," \
     "\"resize\":{\"mode\":\"fixed\",\"size\":384},\"patch\":14,\"pool\":2}}") \
    XX("laion-images", "{\"image\":{\"resize\":" CROP(224) ",\"patch\":14}}") \
    XX("anyres-images", \
     "{\"image\":{\"resize\":{\"mode\":\"fixed\",\"size\":336},\"patch\":14," \
     "\"tiles\":{\"size\":336,\"max\":5,\"base\":true}}}") \
    XX("interleaved-docs", "{\"image\":{\"resize\":" CROP(224) ",\"patch\":14,\"pool\":2}}") \
    XX("speech-asr", \
     "{\"audio\":{\"sample_rate\":16000,\"mel_bins\":80,\"mel_fps\":100,\"tokens_per_s\":25}}") \
    XX("omni-mix", \
     "{\"video\":{\"sampling\":\"uniform\",\"frames\":8,\"resize\":" CROP(224) \
     ",\"patch\":14},\"image\":{\"resize\":" CROP(224) \
     ",\"patch\":14},\"audio\":{\"sample_rate\":16000,\"mel_bins\":80,\"mel_fps\":100," \
     "\"tokens_per_s\":25}}") \
    XX("t2v-diffusion", \
     "{\"video\":{\"sampling\":\"consecutive\",\"frames\":49," \
     "\"resize\":{\"mode\":\"bucket\",\"buckets\":[[480,848],[720,1280]]}," \
     "\"vae\":{\"temporal\":4,\"spatial\":16}}}") \



#define SPEC_NAME(name, json) name,
#define SPEC_JSON(name, json) json,
static const char *const builtin_names[] = {BUILTIN_SPECS(SPEC_NAME) NULL};
static const char *const builtin_json[] = {BUILTIN_SPECS(SPEC_JSON)};
#define NBUILTIN (sizeof builtin_json / sizeof builtin_json[0])

const char *const *dh_spec_builtin_names(void)
{
    return builtin_names;
}

int dh_spec_builtin(const char *name, dh_spec **out)
{
    if (!name || !out)
        return DH_EINVAL;
    for (size_t i = 0; i < NBUILTIN; i++)
        if (!strcmp(name, builtin_names[i])) {
            int rc = dh_spec_parse(builtin_json[i], strlen(builtin_json[i]), out, NULL, 0);
            if (!rc)
                (*out)->given = 0; /* a workload's choices, which --augment may change */
            return rc;
        }
    *out = NULL;
    return DH_ENOENT;
}
