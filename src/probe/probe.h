/* probe.h - manifest line pieces shared by index and gen (internal). */
#ifndef DH_PROBE_H
#define DH_PROBE_H

#include "../core/core.h"

#include <jansson.h>

/* The manifest JSON of one probed media item stored at `path` (new reference). */
json_t *dh__media_json(const dh_probe_result *r, const char *path);

#endif
