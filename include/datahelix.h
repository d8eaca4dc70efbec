/*
 * datahelix.h - the public C API of DataHelix, as one include.
 *
 * DataHelix is a data plane for synchronous data-parallel training on video
 * and multimodal data. Everything starts from metadata descriptors: one per
 * sample, read from a JSON Lines manifest or probed from media headers.
 *
 *   datahelix/base.h       errors, version, media vocabulary, limits, diagnostics
 *   datahelix/catalog.h    manifests, specs, derivation, sampler, probing
 *   datahelix/workloads.h  the built-in workload suite
 *   datahelix/run.h        run configuration, results, policies, the simulator
 *   datahelix/engine.h     the real engine and its consumer API
 *   datahelix/serve.h      the per-node agent serving trainer processes
 *   datahelix/client.h     a trainer process's side of the agent
 *
 * Conventions (docs/ARCHITECTURE.md, "How the C is written"):
 * - every public symbol starts with dh_ / DH_; handles are opaque;
 * - functions that can fail return 0 on success or a negative error code:
 *   either a negated errno (DH_EINVAL == -EINVAL) or a project code from the
 *   reserved range; dh_strerror() and dh_err_name() describe both;
 * - ownership, lifetimes and thread-safety are stated above each function
 *   or at the top of its header;
 * - structs that will grow (dh_run_config, dh_result) start with struct_size:
 *   fill them with their init function, and older callers keep working.
 */
#ifndef DATAHELIX_H
#define DATAHELIX_H

#include "datahelix/base.h"
#include "datahelix/catalog.h"
#include "datahelix/workloads.h"
#include "datahelix/run.h"
#include "datahelix/engine.h"
#include "datahelix/serve.h"
#include "datahelix/client.h"
#include "datahelix/metrics.h"

#endif /* DATAHELIX_H */
