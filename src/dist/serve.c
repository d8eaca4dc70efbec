/*
 * serve.c - the per-node agent (datahelix/serve.h): trainer processes attach
 * over a Unix socket, one per rank, and take batches that view the engine's
 * shared pools.
 *
 * DESIGN
 * - Phases: listen; wait until every rank attached (each attach validated
 *   and held unanswered); start the engine, its pools in memfds; answer
 *   every attach with the pools' descriptors; serve; finish.
 * - One thread per rank serves that rank's requests in order: NEXT blocks in
 *   dh_engine_next_batch, so a rank waiting for its batch holds only its own
 *   thread. The main thread watches should_stop and the threads' ends.
 * - While ranks attach, the agent tells each waiting one every second how
 *   many have attached (WAITING), so a client waits as long as the agent
 *   does; a waiting rank that goes away is dropped and its rank is free
 *   again, so the run never starts with a rank that is gone.
 * - A lease is a batch handed to a rank and not yet released; a rank holds
 *   at most max_leases. A rank that dies or disconnects before the run ended
 *   has its leases released and stops the run with DH_EPEER and a sentence
 *   naming it: every other rank's next request gets that sentence (a
 *   synchronous job cannot go on without it), never a hang.
 * - A rank that detaches cleanly before the run's end (its loop broke, its
 *   process was interrupted) leaves at step T: the others may still take
 *   the steps before T, a request for T or later gets the sentence naming
 *   it, and once no rank can take anything more the run stops. A finite
 *   run cut short so fails; an endless run (--steps 0) ended by its
 *   trainers leaving is a normal end.
 * - Steps on the wire are the engine's (0 = the run's first); the client
 *   adds the resume position, so trainers see steps counted from the start
 *   of training.
 * - Lock order: a.mu (agent state) is never held while calling the engine.
 */
#include "serve_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void dh_serve_opts_default(dh_serve_opts *o)
{
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

static int start_ranks(agent *a, char *err, size_t errlen)
{
    for (int r = a->lo; r < a->hi; r++)
        a->conns[r].took_at = dh__mono(); /* a rank that takes nothing is idle from here */
    for (int r = a->lo; r < a->hi; r++) {
        int rc = dh__thread_create(&a->conns[r].thread, dh__agent_rank_main, &a->conns[r]);
        if (rc) {
            dh_engine_stop(a->e); /* the ranks that started must not wait for this one */
            return dh__fail(err, errlen, rc, "cannot start the thread of rank %d", r);
        }
        pthread_mutex_lock(&a->mu); /* the started ranks' threads read it (blame_first) */
        a->conns[r].started = 1;
        pthread_mutex_unlock(&a->mu);
    }
    return 0;
}

/* What the agent needs before listening: hashes of what trainers must match. */
static int agent_init(agent *a, hub *h, const dh_serve_stream *st, const dh_serve_opts *opts,
                      char *err, size_t errlen)
{
    memset(a, 0, sizeof *a); /* from here agent_free cleans up whatever follows */
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->changed, NULL);
    a->inbox[0] = a->inbox[1] = -1;
    a->hub = h;
    a->stream = st->name && st->name[0] ? st->name : "train";
    a->on_error = st->on_error;
    a->user = st->user;
    a->out = st->out;
    dh_run_config_default(&a->run);
    const dh_run_config *cfg = st->cfg;
    if (!cfg || cfg->struct_size < sizeof(uint32_t) || cfg->struct_size > sizeof a->run)
        return dh__fail(err, errlen, DH_EINVAL, "initialise the run configuration with "
                                                "dh_run_config_default");
    memcpy(&a->run, cfg, cfg->struct_size);
    a->run.struct_size = sizeof a->run;
    a->cfg = cfg = &a->run;
    if (!a->run.metrics_stream) /* its live figures go by its name */
        a->run.metrics_stream = a->stream;
    if (pipe2(a->inbox, O_NONBLOCK | O_CLOEXEC))
        return dh__fail(err, errlen, -errno, "cannot create a pipe: %s", strerror(errno));
    a->R = cfg->ranks;
    int nodes = cfg->exchange && cfg->nodes > 1 ? cfg->nodes : 1;
    a->lo = nodes > 1 ? cfg->node * (a->R / nodes) : 0;
    a->hi = nodes > 1 ? a->lo + a->R / nodes : a->R;
    dh_serve_opts_default(&a->o);
    if (opts)
        memcpy(&a->o, opts, DH_MIN((size_t)opts->struct_size, sizeof a->o));
    a->o.max_leases = a->o.max_leases > 0 ? DH_MIN(a->o.max_leases, MAX_LEASES) : 4;
    a->o.attach_timeout_ms = a->o.attach_timeout_ms > 0 ? a->o.attach_timeout_ms : 300000;
    a->o.io_timeout_ms = a->o.io_timeout_ms > 0 ? a->o.io_timeout_ms : 30000;
    if (a->o.on_rank_exit == DH_ON_RANK_EXIT_WAIT && nodes > 1)
        return dh__fail(err, errlen, DH_EINVAL, "waiting for ranks to restart works on one "
                        "node only (several nodes restart together under their launcher)");
    if (a->o.on_rank_exit != DH_ON_RANK_EXIT_STOP && a->o.on_rank_exit != DH_ON_RANK_EXIT_WAIT)
        return dh__fail(err, errlen, DH_EINVAL, "on_rank_exit %d: expected stop (0) or wait "
                        "(1)", a->o.on_rank_exit);
    if (!cfg->manifest || cfg->ranks < 1 || cfg->global_batch < cfg->ranks)
        return dh__fail(err, errlen, DH_EINVAL, "serve needs a manifest, ranks >= 1 and a "
                                                "global batch of at least one sample per rank");
    dh_spec *own = NULL; /* the run's spec when it is not cfg->spec: the workload's, augmented */
    if (!cfg->spec && dh_spec_builtin(cfg->workload ? cfg->workload : "default", &own))
        return dh__fail(err, errlen, DH_ENOENT, "unknown workload \"%s\"", cfg->workload);
    if (cfg->spec && (cfg->augment || cfg->no_augment) && !(own = dh__spec_dup(cfg->spec)))
        return DH_ENOMEM;
    if (cfg->augment)
        dh_spec_augment(own);
    if (cfg->no_augment)
        dh_spec_plain(own);
    a->spec_hash = dh_spec_hash(own ? own : cfg->spec);
    dh_spec_random_text(own ? own : cfg->spec, a->augment_text, sizeof a->augment_text);
    dh_spec_free(own);
    a->manifest_hash = dh_manifest_hash(cfg->manifest);
    a->samples = dh_manifest_count(cfg->manifest);
    int64_t G = cfg->global_batch;
    a->pad_epoch = -1;
    /* The agent's own copy of the job's order: its epochs' length, and padding to mark. */
    dh_sampler_opts so = {.global_batch = G, .seed = cfg->seed, .shuffle = !cfg->no_shuffle,
                          .drop_last = !cfg->keep_last};
    int rc = dh_sampler_new(cfg->manifest, &so, &a->order);
    if (rc)
        return dh__fail(err, errlen, rc, "%lld samples cannot make an epoch of global batches "
                        "of %lld: %s", (long long)a->samples, (long long)G, dh_strerror(rc));
    a->steps_per_epoch = dh_sampler_steps_per_epoch(a->order);
    if (cfg->keep_last && !(a->last = dh__calloc((size_t)G, sizeof *a->last)))
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    a->left_at = INT64_MAX;
    a->conns = dh__calloc((size_t)a->R, sizeof *a->conns);
    a->pf = dh__calloc((size_t)a->R + 1, sizeof *a->pf);
    if (!a->conns || !a->pf)
        return dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    for (int r = 0; r < a->R; r++)
        a->conns[r].fd = -1;
    return 0;
}

static void agent_free(agent *a)
{
    for (int r = 0; a->conns && r < a->R; r++) {
        if (a->conns[r].started)
            pthread_join(a->conns[r].thread, NULL);
        if (a->conns[r].fd >= 0)
            close(a->conns[r].fd);
    }
    for (size_t k = 0; k < a->nqueue; k++)
        close(a->queue[k].fd);
    free(a->queue);
    for (int k = 0; k < 2; k++)
        if (a->inbox[k] >= 0)
            close(a->inbox[k]);
    dh_engine_free(a->e);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->changed);
    free(a->conns);
    free(a->pf);
    free(a->last);
    dh_sampler_free(a->order);
}

/* Tells every held attach why the run could not start. */
static void refuse_all(agent *a, int rc, const char *why)
{
    for (int r = a->lo; r < a->hi; r++)
        if (a->conns[r].fd >= 0)
            dh__proto_send_error(a->conns[r].fd, rc, why);
}

/*
 * One generation of the job: an engine with its pools, every rank attached, served until the
 * run ends; its accounting into out. 0, or why it ended otherwise (DH_EPEER: ranks died or
 * left early).
 */
static int serve_generation(agent *a, dh_sample_error_cb on_error, void *user, dh_result *out,
                            char *err, size_t errlen)
{
    /* The engine and its pools first: a pool that does not fit fails before anyone waits. */
    int rc = dh__engine_start(a->cfg, a->o.max_leases, on_error, user, &a->e, err, errlen);
    if (!rc && a->hub->gate)
        dh__engine_set_gate(a->e, a->hub->gate);
    if (!rc) {
        int64_t tail = a->cfg->keep_last ? 0 : a->samples % a->cfg->global_batch;
        if (!a->gen)
            event(a, "listening on %s for %d rank%s (%d..%d)", a->hub->name, a->hi - a->lo,
                  a->hi - a->lo == 1 ? "" : "s", a->lo, a->hi - 1);
        if (!a->gen)
            event(a, "random augmentation: %s%s", a->augment_text,
                  a->cfg->augment && !a->cfg->no_augment ? " (--augment)" : "");
        if (!a->gen && a->o.max_leases < 2)
            event(a, "--max-leases %d: a Python Loader refuses it (`for batch in loader` holds "
                  "its batch while it takes the next: it needs 2)", a->o.max_leases);
        if (!a->gen && tail)
            event(a, "an epoch of %lld samples in global batches of %lld uses %lld: the last "
                  "%lld of each epoch's order are dropped%s", (long long)a->samples,
                  (long long)a->cfg->global_batch, (long long)(a->samples - tail),
                  (long long)tail, a->cfg->order == DH_ORDER_UNIFORM ? " (--keep-last keeps them)"
                                                                     : "");
        a->refused = 0; /* this generation's */
        if ((rc = dh__agent_wait_for_ranks(a))) {
            char why[1024]; /* the counts, the missing ranks and a whole refusal (it cut one) */
            int k = snprintf(why, sizeof why, rc == DH_ETIMEDOUT
                                                  ? "only %d of %d ranks attached in time"
                                                  : "stopped (Ctrl-C, SIGTERM or its caller) "
                                                    "with %d of %d ranks attached",
                             a->attached, a->hi - a->lo);
            /* which ranks never came (a user's trial: "only 1 of 2" named none) */
            int missing = a->hi - a->lo - a->attached, named = 0;
            for (int r = a->lo; r < a->hi && named <= 3 && k > 0 && (size_t)k < sizeof why; r++)
                if (a->conns[r].fd < 0)
                    k += snprintf(why + k, sizeof why - (size_t)k, "%s%d",
                                  named++ ? ", " : missing == 1 ? " (missing: rank "
                                                                : " (missing: ranks ", r);
            if (named && k > 0 && (size_t)k < sizeof why)
                k += snprintf(why + k, sizeof why - (size_t)k, "%s)", named < missing ? ", ..." : "");
            if (a->refused && k > 0 && (size_t)k < sizeof why)
                snprintf(why + k, sizeof why - (size_t)k, " (%d attach%s refused, the last: %s)",
                         a->refused, a->refused == 1 ? "" : "es", a->last_refused);
            dh__msg(err, errlen, "%s", why);
            dh__engine_refuse(a->e, rc, why);
            refuse_all(a, rc, why);
        }
    }
    a->e_began = 0;
    if (!rc) {
        dh__agent_fill_info(a);
        a->e_began = 1;
        pthread_mutex_lock(&a->hub->mu);
        a->ran = 1;
        pthread_mutex_unlock(&a->hub->mu);
        int resume = a->gen || a->conns[a->lo].req.resume;
        if (resume) /* where it goes on, and from what */
            event(a, "%s at step %lld (epoch %lld, step %lld of it), %s", a->gen ? "the job "
                  "restarts" : "the job resumes", (long long)a->info.step_base,
                  (long long)a->info.epoch, (long long)a->info.step,
                  a->conns[a->lo].req.resume ? "from the saved state its ranks presented"
                                             : "after the last step every rank gave back");
        dh__agent_teller t;
        int nodes = a->cfg->exchange && a->cfg->nodes > 1;
        if (nodes) {
            event(a, "every rank of this node attached; waiting for the other nodes' ranks "
                     "(each node waits --attach-timeout for its own)");
            if (dh__agent_teller_start(a, &t))
                event(a, "cannot start the thread that tells the ranks the agent waits: a "
                         "rank may give up after 15 s if another node's ranks attach later");
        }
        rc = dh__engine_begin(a->e, resume, a->info.epoch, a->info.step, a->info.shift, a->N,
                              err, errlen);
        if (nodes)
            dh__agent_teller_stop(&t);
        if (rc)
            refuse_all(a, rc, err && errlen ? err : "the agent could not begin");
    }
    if (!rc && !(rc = dh__agent_answer(a)) && !(rc = start_ranks(a, err, errlen)))
        dh__agent_watch(a);
    int frc = a->e ? dh_engine_finish(a->e, out) : 0;
    double waited = a->e && a->hub->gate ? dh__engine_gate_wait(a->e) : 0;
    if (waited >= 0.1) /* what sharing the CPU cost this stream */
        event(a, "its workers waited %.1f s in all for CPU the other streams held", waited);
    const char *by = a->e ? dh__engine_stopped_by(a->e) : NULL;
    if (by) /* this node's trainers were told so; its log says so too */
        event(a, "%s", by);
    if (frc == DH_ECANCELED)
        frc = 0;
    if (!a->died && a->left_at < INT64_MAX) /* ranks left: a finite run was cut short */
        frc = a->N > 0 ? DH_EPEER : 0;
    /* Several nodes: another node's fault this node heard of first (peer), or one that came
     * first though this node's own was told before it was heard (earlier). */
    const char *peer = frc == DH_EPEER && a->e ? dh__engine_peer_msg(a->e) : NULL;
    const char *earlier = frc == DH_EPEER && a->e ? dh__engine_earlier_msg(a->e) : NULL;
    if (!rc && frc == DH_EPEER && a->fault[0] && (earlier || peer)) /* this one followed */
        rc = dh__fail(err, errlen, frc, "%s; then on this node: %s", earlier ? earlier : peer,
                      a->fault);
    else if (!rc && frc == DH_EPEER)
        rc = dh__fail(err, errlen, frc, "%s", a->fault[0] ? a->fault
                                             : peer ? peer : dh_strerror(frc));
    else if (!rc && frc && frc != DH_ECANCELED)
        rc = dh__fail(err, errlen, frc, "the run failed: %s",
                      frc == DH_EFAILED && dh__engine_fail_msg(a->e) ? dh__engine_fail_msg(a->e)
                                                                      : dh_strerror(frc));
    else if (!rc && by) /* another node's agent was stopped: this job did not end by itself */
        rc = dh__fail(err, errlen, DH_ECANCELED, "%s", by);
    return rc;
}

/* After a generation lost ranks: where the next starts (the last step every rank had given
 * back), and a clean slate of connections and engine. */
static void prepare_restart(agent *a, const dh_result *done)
{
    int64_t common = INT64_MAX;
    for (int r = a->lo; r < a->hi; r++) {
        conn *c = &a->conns[r];
        if (c->started)
            pthread_join(c->thread, NULL);
        if (c->fd >= 0)
            close(c->fd);
        common = DH_MIN(common, c->released);
        *c = (conn){.a = a, .fd = -1, .rank = r};
    }
    common = common == INT64_MAX ? 0 : common;
    start_point *p = &a->restart;
    dh__run_position(&a->info, common, &p->epoch, &p->step, &p->shift);
    p->base = dh__agent_step(a, common);
    event(a, "the job restarts at step %lld (epoch %lld, step %lld of it), the first step "
          "some rank did not give back, unless its ranks present a saved state: waiting %d s "
          "for them (the ranks that stopped were handed %lld samples, %lld failed; from step "
          "%lld on, everything is served again)", (long long)p->base, (long long)p->epoch,
          (long long)p->step, a->o.attach_timeout_ms / 1000, (long long)done->delivered,
          (long long)done->failed, (long long)p->base);
    dh_engine_free(a->e);
    a->e = NULL;
    a->attached = 0;
    a->fault_code = 0;
    a->died = 0;
    a->left_at = INT64_MAX;
    a->gen++;
}

/* One stream, from its first set of ranks to its end (restarts included): a->rc, a->err. */
static void *stream_main(void *arg)
{
    agent *a = arg;
    dh_result *out = a->out;
    char *err = a->err;
    size_t errlen = sizeof a->err;
    dh_result last; /* the accounting of the last set of ranks that ran (out's size) */
    memcpy(&last, out, out->struct_size);
    int rc = 0;
    while (!rc) {
        rc = serve_generation(a, a->on_error, a->user, out, err, errlen);
        const dh_run_config *cfg = a->cfg;
        int stopped = a->stopping || (cfg->should_stop && cfg->should_stop(cfg->should_stop_user));
        if (a->unused) {
            memcpy(out, &last, out->struct_size); /* as it came: nothing ran */
            int endless = cfg->steps < 0;
            event(a, "no trainer attached while the other streams ran: not started%s",
                  endless ? "" : ", though its job was finite");
            rc = endless ? 0 : dh__fail(err, errlen, DH_ETIMEDOUT, "no trainer attached while the "
                                        "other streams ran, and its job (--epochs/--steps) was "
                                        "finite: it did not run");
            break;
        }
        if (a->gen && !a->e_began) { /* no restart came: the accounting is the last set's */
            memcpy(out, &last, out->struct_size);
            if (rc == DH_ECANCELED)
                dh__msg(err, errlen, "stopped (Ctrl-C, SIGTERM or its caller) while waiting for "
                        "the job to restart after: %s", a->fault);
            else
                dh__msg(err, errlen, "no restart of the job within %d s (%s) after: %s",
                        a->o.attach_timeout_ms / 1000, dh_strerror(rc), a->fault);
            rc = DH_EPEER;
        }
        if (rc != DH_EPEER || a->o.on_rank_exit != DH_ON_RANK_EXIT_WAIT || stopped || !a->e_began)
            break;
        memcpy(&last, out, out->struct_size);
        prepare_restart(a, out);
        rc = 0;
    }
    a->rc = rc;
    const dh_run_config *cfg = a->cfg;
    int stopped = a->stopping || (cfg->should_stop && cfg->should_stop(cfg->should_stop_user));
    pthread_mutex_lock(&a->hub->mu);
    a->end_code = stopped ? DH_ECANCELED : DH_EMISMATCH;
    a->end_why = stopped ? "the agent was stopped (Ctrl-C, SIGTERM or its caller)"
                         : "this stream's run has ended";
    a->done = 1; /* the acceptor refuses its attaches from here */
    pthread_mutex_unlock(&a->hub->mu);
    dh__agent_take_queued(a, a->end_code, a->end_why);
    return NULL;
}

void dh_serve_stream_default(dh_serve_stream *s)
{
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
}

/* Splits opts->memory_budget over the streams that name no budget of their own, in
 * proportion to what each would take by default. 0 or an error. */
static int share_memory(hub *h, int64_t total, char *err, size_t errlen)
{
    int64_t fixed = 0, want[DH_SERVE_MAX_STREAMS] = {0}, wanted = 0;
    for (int k = 0; k < h->n; k++) {
        agent *a = &h->s[k];
        if (a->run.memory_budget) {
            fixed += a->run.memory_budget;
            continue;
        }
        char why[256] = "";
        want[k] = dh__engine_default_budget(a->cfg, a->o.max_leases, why, sizeof why);
        if (want[k] < 0)
            return dh__fail(err, errlen, (int)want[k], "stream %s: %s", a->stream, why);
        wanted += want[k];
    }
    if (total < fixed + (wanted ? 1 : 0))
        return dh__fail(err, errlen, DH_EINVAL, "the agent's memory budget (%.1f MiB) is below "
                        "what the streams with their own budget take (%.1f MiB)",
                        total / 1048576.0, fixed / 1048576.0);
    for (int k = 0; k < h->n; k++)
        if (want[k])
            h->s[k].run.memory_budget =
                (int64_t)((double)(total - fixed) * ((double)want[k] / (double)wanted));
    return 0;
}

/* The streams an agent is asked to serve, checked: 0, or DH_EINVAL with the sentence. */
static int check_streams(const dh_serve_stream *streams, int n, char *err, size_t errlen)
{
    if (!streams || n < 1 || n > DH_SERVE_MAX_STREAMS)
        return dh__fail(err, errlen, DH_EINVAL, "an agent serves 1 to %d streams, not %d",
                        DH_SERVE_MAX_STREAMS, n);
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        const dh_serve_stream *s = &streams[k];
        const char *nm = s->name ? s->name : "";
        if (s->struct_size < sizeof(uint32_t) || s->struct_size > sizeof *s || !s->cfg || !s->out)
            rc = dh__fail(err, errlen, DH_EINVAL, "stream %d: initialise it with "
                          "dh_serve_stream_default and give it cfg and out", k);
        else if (strlen(nm) >= DH__STREAM_NAME || (k && !nm[0]) || strchr(nm, '"'))
            rc = dh__fail(err, errlen, DH_EINVAL, "stream %d: a name of 1 to %d bytes without "
                          "quotes, not \"%s\"", k, DH__STREAM_NAME - 1, nm);
        else if (n > 1 && s->cfg->exchange && s->cfg->nodes > 1)
            rc = dh__fail(err, errlen, DH_EINVAL, "several streams are served on one node only "
                          "(on several nodes, run an agent per stream)");
        for (int j = 0; j < k && !rc; j++)
            if (!strcmp(nm[0] ? nm : "train", streams[j].name && streams[j].name[0]
                                                   ? streams[j].name : "train"))
                rc = dh__fail(err, errlen, DH_EINVAL, "two streams are named \"%s\"", nm);
        if (!rc)
            rc = dh__result_check(s->out, err, errlen);
    }
    return rc;
}

int dh_serve_streams(const dh_serve_stream *streams, int n, const dh_serve_opts *opts,
                     char *err, size_t errlen)
{
    int rc = check_streams(streams, n, err, errlen);
    if (rc)
        return rc;
    hub h = {.listen_fd = -1, .n = n};
    pthread_mutex_init(&h.mu, NULL);
    h.s = dh__calloc((size_t)n, sizeof *h.s);
    if (!h.s)
        rc = dh__fail(err, errlen, DH_ENOMEM, "out of memory");
    int inited = 0, started = 0;
    dh_serve_opts o;
    dh_serve_opts_default(&o);
    if (opts)
        memcpy(&o, opts, DH_MIN((size_t)opts->struct_size, sizeof o));
    h.on_event = o.on_event; /* before the streams: they may tell something at once */
    h.event_user = o.event_user;
    for (; !rc && inited < n; inited++) {
        char why[300] = "";
        rc = agent_init(&h.s[inited], &h, &streams[inited], opts, why, sizeof why);
        if (rc)
            dh__msg(err, errlen, "%s%s%s", n > 1 ? "stream " : "",
                    n > 1 ? h.s[inited].stream : "", n > 1 ? ": " : "");
        if (rc)
            dh__msg(err + strlen(err), errlen - strlen(err), "%s", why);
    }
    if (!rc && n > 1 && o.memory_budget > 0)
        rc = share_memory(&h, o.memory_budget, err, errlen);
    if (!rc && n > 1)
        rc = dh__gate_new(DH_MAX(1, h.s[0].run.workers), &h.gate);
    char name[108];
    h.name = o.socket;
    if (!rc && !h.name && !(rc = dh_serve_default_socket(NULL, name, sizeof name)))
        h.name = name;
    int ranks = 0;
    for (int k = 0; !rc && k < n; k++)
        ranks += h.s[k].R;
    if (!rc && (h.listen_fd = dh__listen(h.name, ranks + 8, err, errlen)) < 0)
        rc = h.listen_fd;
    for (; !rc && started < n; started++)
        if ((rc = dh__thread_create(&h.s[started].thread, stream_main, &h.s[started])))
            dh__fail(err, errlen, rc, "cannot start the thread of a stream");
    if (rc) /* the streams that started must end: none gets an attach */
        atomic_store(&h.quit, 1);
    if (!rc)
        dh__serve_accept(&h, h.s[0].o.io_timeout_ms);
    for (int k = 0; k < started; k++)
        pthread_join(h.s[k].thread, NULL);
    /* The first stream that failed says why; one that failed only because the others ended
     * before any trainer came for it (unused) comes after those that failed on their own (a
     * validation stream that could not start ended the job's, whose "no trainer attached"
     * hid the cause) */
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int k = 0; k < started && !rc; k++)
            if (h.s[k].rc && h.s[k].unused == pass) {
                rc = h.s[k].rc;
                dh__msg(err, errlen, "%s%s%s%s", n > 1 ? "stream " : "",
                        n > 1 ? h.s[k].stream : "", n > 1 ? ": " : "", h.s[k].err);
            }
    if (h.listen_fd >= 0) {
        close(h.listen_fd);
        if (h.name[0] != '@')
            unlink(h.name);
    }
    for (int k = 0; k < inited; k++)
        agent_free(&h.s[k]);
    free(h.s);
    dh__gate_free(h.gate);
    pthread_mutex_destroy(&h.mu);
    return rc;
}

int dh_serve(const dh_run_config *cfg, const dh_serve_opts *opts, dh_sample_error_cb on_error,
             void *user, dh_result *out, char *err, size_t errlen)
{
    if (!cfg || !out)
        return DH_EINVAL;
    dh_serve_stream s;
    dh_serve_stream_default(&s);
    s.cfg = cfg;
    s.on_error = on_error;
    s.user = user;
    s.out = out;
    return dh_serve_streams(&s, 1, opts, err, errlen);
}
