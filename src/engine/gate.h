/*
 * gate.h - CPU tokens shared by the engines of one agent's streams (internal).
 *
 * DESIGN: an agent serving several streams (train, val) runs one engine per
 * stream, each with its own scheduler and worker threads, but the node has
 * one set of cores: a gate holds W tokens and a worker must hold one while
 * it decodes. A freed token goes to the waiting task whose stream has a rank
 * waiting for a batch right now (exposed wait first), then to a stream whose
 * trainers are taking batches (active) before one they left for now (a
 * validation stream during training: its deadlines are stale, its work is
 * prefetch), then to the least slack (its step's estimated deadline minus
 * now minus its predicted cost, each engine's scheduler's own estimate),
 * then the oldest.
 * One engine alone needs no gate (NULL): its scheduler already orders its
 * tasks and its W threads are the node's W.
 */
#ifndef DH_GATE_H
#define DH_GATE_H

#include "../core/core.h"

#include <stdatomic.h>

typedef struct dh__gate dh__gate;

/* A gate of `tokens` (>= 1) tokens. 0 or DH_ENOMEM. */
int dh__gate_new(int tokens, dh__gate **out);
void dh__gate_free(dh__gate *g);
/* Takes a token, waiting for it if none is free. urgent: > 0 while a rank of the caller's
 * stream waits for a batch (read at every hand-over, so it may change while waiting);
 * active: its trainers are taking batches; slack: the task's, in seconds. Returns the
 * seconds waited. */
double dh__gate_enter(dh__gate *g, const atomic_int *urgent, int active, double slack);
/* Between two tasks of a worker that holds a token: keeps it unless a waiter goes before
 * the caller's next task (priority as for enter), which then gets it while the caller
 * waits its turn. A worker keeps its token from task to task this way, so a stream whose
 * workers are busy is not interrupted by a lesser one each time a task ends. Returns the
 * seconds waited. */
double dh__gate_renew(dh__gate *g, const atomic_int *urgent, int active, double slack);
/* Gives a token back (to the best waiter, if any). */
void dh__gate_leave(dh__gate *g);
/* How many times a task had to wait for a token. */
int64_t dh__gate_waits(dh__gate *g);

#endif
