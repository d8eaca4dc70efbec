/*
 * nodes_step.c - the STEP rounds after each step and the FINAL rounds at the
 * end (docs/MULTINODE.md; the layer's files: nodes_int.h).
 *
 * DESIGN
 * - After a STEP round each node applies the other nodes' ranks to its
 *   replica: their records (asked, ready, compute, longest task), batch taken
 *   and step done in the scheduler, and the step's releases, which close the
 *   step when every rank is in. So every node holds the whole run's records
 *   and computes the same result. A record of another step, or a HELLO, is a
 *   fault: the run stops naming the node (it stopped silently before).
 * - A STEP round that meets another node's FINAL record means that node
 *   stopped: the step is not applied (no node closes it) and this node stops
 *   too, so every node counts the same steps.
 * - Stopping is agreed: should_stop is read when a node builds its STEP
 *   record; after a round where any node asked, a CUTOFF round agrees the
 *   furthest step any rank of any node took, and every node serves its
 *   ranks up to it and stops (agree_cutoff).
 * - FINAL is repeated until every node's record is FINAL (its totals: CPU,
 *   memory, moves); the nodes' closed steps and failed samples must agree.
 */
#include "nodes_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ steps */

/*
 * Every rank of this node is done with step st: it released its batch, or it went on past
 * the next step (took the one after it, or released the next one). A trainer may keep a
 * batch's tensor as long as it likes; waiting for that release stopped every node's step
 * exchange, and with it every rank once its next step needed the nodes' plan (a user's
 * trial: a debug print kept step 0's batch, and all ranks stopped at the next epoch). The
 * usual loop (it takes the next batch, then releases the one before) is not affected.
 */
static int local_done(dh_engine *e, int64_t st)
{
    eng_step *s = dh__eng_step(e, st), *next = st + 1 < e->N ? dh__eng_step(e, st + 1) : NULL;
    if (!s)
        return 0;
    for (int r = e->rank_lo; r < e->rank_hi; r++) {
        int64_t took = e->next_step[r]; /* steps the rank took */
        int done = s->b[r].released_at > 0 || took > st + 2 ||
                   (took > st + 1 && next && next->b[r].released_at > 0);
        if (!done)
            return 0;
    }
    return 1;
}

/* A batch of step st its rank still keeps is done for the job when the rank took the next
 * step's: so every node records it, this one included (its release then only frees it). */
static void close_kept(dh_engine *e, int64_t st, int r)
{
    batch_slot *b = &dh__eng_step(e, st)->b[r];
    dh__rec_batch *rb = dh__records_batch(&e->rec, st, r);
    double done = dh__eng_step(e, st + 1)->b[r].taken;
    b->released_at = done;
    b->closed_early = 1;
    if (rb)
        rb->compute = DH_MAX(0.0, done - b->taken);
    dh__trace_span(&e->trace, DH_TRACE_RANKS, r, "compute", b->taken, done - b->taken, st, r, -1);
    dh__sched_step_done(e->sched, r, st, done, rb ? rb->compute : 0);
}

/*
 * The modelled truth of this node's batches of step st into its record: their GPU sum and
 * largest, their CPU (each sample as this step's draw made it). Every sample of the step is
 * in one node's batches (moves are made by now), so the N records add up to what one node
 * sums as it draws the step, read at random over the whole step on every node: 0.2-0.6 ms a
 * step at 1,024 nodes (bench/RESULTS.md), now G / N samples a node.
 */
static void node_truth(dh_engine *e, int64_t st, xrec *m)
{
    for (int r = e->rank_lo; r < e->rank_hi; r++) {
        int32_t n = dh__sched_batch_samples(e->sched, st, r, e->x->truth_buf, (int32_t)e->G);
        dh__run_add_truth(&e->run, st, e->x->truth_buf, n, &m->truth_gpu, &m->truth_gpu_max,
                          &m->truth_cpu);
    }
}

static void fill_step(dh_engine *e, int64_t st, int stop)
{
    xrec *m = e->x->mine;
    memset(m, 0, e->x->bytes);
    m->kind = X_STEP;
    m->step = st;
    m->stop = stop;
    dh__rec_step *sp = dh__records_step(&e->rec, st);
    m->first_start = sp ? sp->start : -1;
    m->failed = sp ? sp->failed : 0;
    m->late = dh__sched_backlog_lateness(e->sched, dh__eng_elapsed(e), &m->late_bytes);
    eng_step *s = dh__eng_step(e, st);
    for (int i = 0; i < rpn(e); i++) {
        int r = e->rank_lo + i;
        if (s && !(s->b[r].released_at > 0))
            close_kept(e, st, r);
        dh__rec_batch *rb = dh__records_batch(&e->rec, st, r);
        if (rb)
            m->r[i] = (xrank){rb->deadline, rb->ready, rb->compute, rb->longest_task, 0, 0};
        if (s)
            m->r[i].taken = s->b[r].taken, m->r[i].released = s->b[r].released_at;
    }
    node_truth(e, st, m);
    if (e->x->moving)
        dh__nodes_offer(e, m, st + 1);
}

/* How apply_step ends: the run goes on; a stop was agreed (every node's record asked it or
 * not, all of step st); or another node stopped (its FINAL) or is out of step. */
enum { STEP_ON, STEP_STOP, STEP_ENDED };

/* A round that met node k's FINAL record: that node stopped, so this one does (naming its
 * reason when it failed). Under e->mu. */
static void node_ended(dh_engine *e, int k)
{
    struct dh__xchg *x = e->x;
    const xrec *o = rec_of(x, k);
    if (o->error && !x->err[0])
        dh__msg(x->err, sizeof x->err, "node %d stopped the run: %s", k,
                o->msg[0] ? o->msg : dh_strerror(o->error));
    if (o->error && !e->error)
        e->error = DH_EPEER;
}

/* Applies the other nodes' step st (STEP_ON, STEP_STOP or STEP_ENDED: above). */
static int apply_step(dh_engine *e, int64_t st)
{
    struct dh__xchg *x = e->x;
    int stop = 0;
    for (int k = 0; k < e->nodes; k++) {
        const xrec *o = rec_of(x, k);
        if (o->kind == X_STEP && o->step == st) {
            stop |= o->stop != 0;
            e->count_taken |= o->stop != 0; /* a rank failing after the stop follows it */
            if (o->stop && !rec_of(x, e->node)->stop && x->stop_from < 0)
                x->stop_from = k; /* told once the cutoff is agreed (agree_cutoff) */
            continue;
        }
        if (o->kind != X_FINAL) { /* a HELLO now, or another step's record: out of step */
            if (!x->err[0])
                dh__msg(x->err, sizeof x->err, "node %d sent the %s of step %lld in the "
                        "exchange of step %lld: the nodes are out of step (a fault, or "
                        "another DataHelix version)", k, o->kind == X_STEP ? "record" : "hello",
                        (long long)o->step, (long long)st);
            e->error = e->error ? e->error : DH_EPARSE;
            return STEP_ENDED;
        }
        node_ended(e, k);
        return STEP_ENDED; /* node k stopped: step st closes nowhere */
    }
    dh__rec_step *sp = dh__records_step(&e->rec, st);
    for (int k = 0; sp && k < e->nodes; k++) { /* every record first: the releases close it */
        const xrec *o = rec_of(x, k);
        if (k == e->node)
            continue;
        if (o->first_start >= 0 && (sp->start < 0 || o->first_start < sp->start))
            sp->start = o->first_start;
        sp->failed += o->failed;
        /* (step st is open, sp its record: writing its batches opens nothing, so sp stays
         * where it is) */
        dh__records_ranks(&e->rec, st, k * rpn(e), rpn(e), &o->r[0].asked, &o->r[0].ready,
                          &o->r[0].compute, &o->r[0].longest, sizeof o->r[0]);
    }
    for (int k = 0; sp && k < e->nodes; k++) { /* the step's truth: every node's, this one's too */
        const xrec *o = rec_of(x, k);
        sp->gpu_sum += o->truth_gpu;
        sp->gpu_max = DH_MAX(sp->gpu_max, o->truth_gpu_max);
        sp->cpu_sum += o->truth_cpu;
        e->rec.cpu_true_sum += o->truth_cpu;
    }
    for (int k = 0; k < e->nodes; k++) { /* what lending reads, until the next round */
        x->late[k] = rec_of(x, k)->late;
        x->late_bytes[k] = rec_of(x, k)->late_bytes;
        x->skip[k] = 0;
    }
    for (int k = 0; k < e->nodes; k++) {
        const xrec *o = rec_of(x, k);
        if (k == e->node)
            continue;
        dh__sched_ranks_stepped(e->sched, st, k * rpn(e), rpn(e), &o->r[0].taken,
                                &o->r[0].released, &o->r[0].compute, sizeof o->r[0]);
        for (int i = 0; i < rpn(e); i++)
            e->next_step[k * rpn(e) + i] = st + 1;
        dh__eng_steps_released(e, st, rpn(e)); /* (a node's ranks at once) */
    }
    return stop ? STEP_STOP : STEP_ON;
}

/* No plan of moves is coming for a step after this one: batches offered to it go out as they
 * are. Under e->mu. */
static void no_plan_coming(dh_engine *e)
{
    for (int64_t st = e->lo; e->x->moving && st < e->hi; st++)
        for (int r = e->rank_lo; r < e->rank_hi; r++)
            dh__eng_step(e, st)->b[r].agreeing = 0;
}

/* 1 when every rank of this node took step st. Under e->mu. */
static int all_took(const dh_engine *e, int64_t st)
{
    for (int r = e->rank_lo; r < e->rank_hi; r++)
        if (e->next_step[r] <= st)
            return 0;
    return 1;
}

/* What this node's trainers are told when another node's stop ends the run, with the steps
 * every node served (cut + 1; cut < 0: not agreed). Written once, under e->mu: it is read
 * without it (dh__engine_stopped_by). */
static void tell_stop(dh_engine *e, int64_t cut)
{
    struct dh__xchg *x = e->x;
    if (x->stop_from < 0 || x->stopped_by[0])
        return;
    char how[96] = "stops serving new batches";
    if (cut >= 0)
        dh__msg(how, sizeof how, "served %lld steps, as far as any rank had gone, and stopped",
                (long long)cut + 1);
    dh__msg(x->stopped_by, sizeof x->stopped_by, "node %d's agent was stopped (Ctrl-C, SIGTERM "
            "or its caller): every node %s", x->stop_from, how);
}

/*
 * A stop agreed at step st's exchange ends on every node after the same step: the furthest
 * any rank of any node took (the cutoff). A stop is applied as each node completes the STEP
 * round, and its ranks may be ahead of the exchange, so a rank asking for its next step just
 * then was served on one node and refused on another; under DDP its peers then failed in
 * their collective (a trial: 3 Ctrl-Cs in 8). Here every node first holds back every new
 * step (dh__nodes_held), so what its ranks took is final when it says so in a CUTOFF round;
 * then its ranks may take up to the furthest step any node's took, and this node stops once
 * every one of them did (or the run stopped otherwise: a rank left, a fault). Under e->mu
 * (dropped for the round).
 */
static void agree_cutoff(dh_engine *e, int64_t st)
{
    struct dh__xchg *x = e->x;
    x->cutting = CUT_AGREEING;
    no_plan_coming(e); /* none is made after a stop */
    int64_t took = -1;
    for (int r = e->rank_lo; r < e->rank_hi; r++)
        took = DH_MAX(took, e->next_step[r] - 1);
    memset(x->mine, 0, x->bytes);
    x->mine->kind = X_CUTOFF;
    x->mine->step = took;
    char err[384];
    pthread_mutex_unlock(&e->mu);
    int rc = dh__nodes_round(e, err, sizeof err);
    pthread_mutex_lock(&e->mu);
    if (rc) {
        dh__msg(x->err, sizeof x->err, "%s", err);
        dh__eng_fail(e, rc);
        return;
    }
    int64_t cut = took;
    for (int k = 0; k < e->nodes; k++) {
        const xrec *o = rec_of(x, k);
        if (o->kind == X_FINAL) { /* it stopped before it could say: so does this node */
            node_ended(e, k);
            tell_stop(e, -1);
            return;
        }
        if (o->kind != X_CUTOFF) { /* its step was checked against the run (nodes_wire.c) */
            if (!x->err[0])
                dh__msg(x->err, sizeof x->err, "node %d sent a record of kind %d (step %lld) "
                        "where every node says the last step its ranks took after the stop "
                        "agreed at step %lld: the nodes are out of step", k, (int)o->kind,
                        (long long)o->step, (long long)st);
            dh__eng_fail(e, DH_EPARSE);
            return;
        }
        cut = DH_MAX(cut, o->step);
    }
    x->cut = cut;
    x->cutting = CUT_AGREED;
    tell_stop(e, cut);
    pthread_cond_broadcast(&e->ready);
    while (!e->stop && !all_took(e, cut))
        pthread_cond_wait(&x->cv, &e->mu);
}

int dh__nodes_held(const dh_engine *e, int64_t st)
{
    const struct dh__xchg *x = e->x;
    return x->cutting == CUT_AGREEING || (x->cutting == CUT_AGREED && st > x->cut);
}

void *dh__nodes_exchange_main(void *arg)
{
    dh_engine *e = arg;
    struct dh__xchg *x = e->x;
    char err[384];
    pthread_mutex_lock(&e->mu);
    for (int64_t st = 0; st < e->N; st = x->exchanged) {
        while (!e->stop && !local_done(e, st))
            pthread_cond_wait(&x->cv, &e->mu);
        /* Stopped here: the FINAL round tells the others. A step whose releases are all in
         * is still exchanged (a consumer stops the engine right after its last release). */
        if (!local_done(e, st) || e->error)
            break;
        double t0 = dh__eng_elapsed(e);
        fill_step(e, st, dh__run_should_stop(&e->run));
        double held = dh__eng_elapsed(e) - t0;
        pthread_mutex_unlock(&e->mu);
        double t1 = dh__eng_elapsed(e);
        int rc = dh__nodes_round(e, err, sizeof err);
        double t2 = dh__eng_elapsed(e);
        pthread_mutex_lock(&e->mu);
        x->sum += t2 - t1;
        x->max = DH_MAX(x->max, t2 - t1);
        x->n++;
        if (rc) {
            dh__msg(x->err, sizeof x->err, "%s", err);
            dh__eng_fail(e, rc);
            break;
        }
        double t3 = dh__eng_elapsed(e), carried = x->carry_s;
        int stop = apply_step(e, st);
        if (stop == STEP_ON && x->moving)
            dh__nodes_agree(e, st + 1);
        /* the control plane's own cost: copying moved data is the data plane's (reb_move_s) */
        x->ctrl += held + dh__eng_elapsed(e) - t3 - (x->carry_s - carried);
        x->exchanged = st + 1;
        if (x->moving)
            dh__nodes_apply_parked(e); /* moves of st + 1 that came before this node's plan */
        pthread_cond_broadcast(&x->cv);
        pthread_cond_broadcast(&e->ready);
        if (x->nout) {
            pthread_mutex_unlock(&e->mu);
            rc = dh__nodes_send_moves(e);
            pthread_mutex_lock(&e->mu);
            if (rc) {
                dh__eng_fail(e, rc);
                break;
            }
        }
        if (stop == STEP_STOP)
            agree_cutoff(e, st);
        if (stop) {
            if (e->error)
                dh__eng_fail(e, e->error);
            else
                dh__eng_stop_locked(e);
            break;
        }
    }
    no_plan_coming(e);
    x->done = 1;
    pthread_cond_broadcast(&x->cv);
    pthread_cond_broadcast(&e->ready);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

void dh__nodes_drain(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    pthread_mutex_lock(&e->mu);
    int done = 1; /* did every local rank take every step? (else this node stops early) */
    for (int r = e->rank_lo; r < e->rank_hi; r++)
        done &= e->next_step[r] >= e->N;
    while (done && !e->stop && !x->done && x->exchanged < e->N)
        pthread_cond_wait(&x->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
}

int dh__nodes_wait_exchanged(dh_engine *e, int64_t st)
{
    struct dh__xchg *x = e->x;
    pthread_mutex_lock(&e->mu);
    while (!e->stop && !x->done && x->exchanged <= st)
        pthread_cond_wait(&x->cv, &e->mu);
    int ok = x->exchanged > st;
    pthread_mutex_unlock(&e->mu);
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------------ final */

static void fill_final(dh_engine *e, xrec *m)
{
    struct dh__xchg *x = e->x;
    const dh__reb_stats *reb = dh__sched_reb_stats(e->sched);
    memset(m, 0, x->bytes);
    m->kind = X_FINAL;
    /* a peer's failure is its own; a node that never began says why (dh__engine_refuse) */
    m->error = e->error == DH_EPEER && x->err[0] && x->began && !x->own ? 0 : e->error;
    if (m->error)
        dh__msg(m->msg, sizeof m->msg, "%s", x->err[0] ? x->err : dh_strerror(e->error));
    m->err_at = x->own ? x->err_at : 0;
    m->tot = (dh__node_totals){
        .cpu_sum = e->cpu_sum, .worker_cpu = e->worker_cpu, .cpu_counted = e->rec.cpu_spent,
        .makespan = e->rec.makespan > 0 ? e->rec.makespan : dh__eng_elapsed(e),
        .move_s = reb->move_s, .pred_gain = reb->predicted_gain_s,
        .real_gain = reb->realised_gain_s, .xsum = x->sum, .xmax = x->max, .ctrl = x->ctrl,
        .net_factor = reb->net_factor, .xn = x->n, .peak = e->ring.peak + e->arena.peak,
        .considered = reb->considered, .moved = reb->moved, .gated = reb->gated,
        .refused = reb->refused, .moved_bytes = reb->bytes_moved, .remote = reb->moved_remote,
        .remote_bytes = reb->remote_bytes, .lend_considered = reb->lend_considered,
        .lent = reb->lent, .lend_gated = reb->lend_gated, .shipped = reb->bytes_shipped,
        DH__FETCH_TOTALS(e->fetched)};
    m->closed_steps = e->rec.steps;
    m->closed_failed = e->rec.failed;
    /* Steps past the last closed one that every rank here took: a stop is agreed at a
     * step's exchange, which follows its ranks taking the next step (local_done), so the
     * trainers may hold one or two steps more, and trainers that leave together end the run
     * before their last step is exchanged; those steps count as the one-node engine counts
     * them (users' trials: 3 steps accounted, 5 trained; 7 accounted, 8 taken). Not when the
     * run failed other than as its trainers meant (a rank died holding its step). From the
     * first step not closed: every node closed the same ones, while a round that met another
     * node's FINAL counts as exchanged on some nodes only. */
    int counts = (!e->error || e->count_taken) && e->next_step && e->rank_hi > e->rank_lo;
    for (int64_t st = e->rec.lo; counts && m->more_steps < DH__MORE_STEPS && st < e->N; st++) {
        int all = 1;
        for (int r = e->rank_lo; r < e->rank_hi; r++)
            all &= e->next_step[r] > st;
        if (!all)
            break;
        const dh__rec_step *sp = dh__records_step(&e->rec, st);
        m->more_failed[m->more_steps++] = sp ? sp->failed : 0;
    }
}

/* A fault of this node's own that followed another node's (a trainer of its failing in a
 * collective after a rank of that node died): the earliest is kept as the run's first cause.
 * After the FINAL rounds. */
static void note_earlier(dh_engine *e)
{
    struct dh__xchg *x = e->x;
    int first = -1;
    for (int k = 0; k < e->nodes; k++) {
        const xrec *o = rec_of(x, k);
        if (k != e->node && o->error && o->err_at > 0 && o->err_at < x->err_at &&
            (first < 0 || o->err_at < rec_of(x, first)->err_at))
            first = k;
    }
    if (first >= 0)
        dh__msg(x->first, sizeof x->first, "node %d went first (%.2f s before): %s", first,
                x->err_at - rec_of(x, first)->err_at, rec_of(x, first)->msg);
}

/* Every node's totals (only this node's if another could not be reached), summed into t. */
void dh__nodes_finish(dh_engine *e, dh__node_totals *t)
{
    struct dh__xchg *x = e->x;
    if (!x) /* its allocation failed: this node's totals */
        return;
    if (x->finished) { /* a second finish: the rounds are over, their totals kept */
        *t = x->totals;
        return;
    }
    x->finished = 1;
    if (x->started)
        pthread_join(x->thread, NULL);
    x->started = 0;
    if (x->mstarted)
        pthread_join(x->mthread, NULL);
    x->mstarted = 0;
    char err[384] = "";
    int rc = x->greeted ? 0 : dh__nodes_greet(e, err, sizeof err), all_final = 0;
    /* nodes of another release (or record size) get no FINAL */
    int talk = x->greeted > 0 && x->mine && x->all;
    xrec *mine = dh__malloc(x->bytes);
    if (!mine)
        rc = rc ? rc : DH_ENOMEM;
    else
        fill_final(e, mine);
    /* A node still in a STEP round sees this FINAL, stops, and sends its own next round. */
    for (int round = 0; talk && !rc && !all_final && round < 1000; round++) {
        memcpy(x->mine, mine, x->bytes);
        rc = dh__nodes_round(e, err, sizeof err);
        all_final = 1;
        for (int k = 0; !rc && k < e->nodes; k++)
            all_final &= rec_of(x, k)->kind == X_FINAL;
    }
    if (rc && !x->err[0])
        dh__msg(x->err, sizeof x->err, "%s", err);
    if (rc && !e->error)
        e->error = rc;
    const xrec *me = mine;
    *t = (dh__node_totals){0};
    /* The steps every rank of every node took past the last closed one count too, with the
     * samples of theirs that failed on any node (a node whose run failed, not as its trainers
     * meant, counts none: fill_final). */
    int64_t more = me && all_final && !rc ? me->more_steps : 0;
    for (int k = 0; more > 0 && k < e->nodes; k++)
        more = DH_MIN(more, rec_of(x, k)->more_steps);
    x->more_steps = more;
    x->more_failed = 0;
    for (int k = 0; k < e->nodes && more; k++)
        for (int64_t j = 0; j < more; j++)
            x->more_failed += rec_of(x, k)->more_failed[j];
    for (int k = 0; me && k < e->nodes; k++) {
        const xrec *o = all_final && !rc ? rec_of(x, k) : k == e->node ? me : NULL;
        if (!o)
            continue;
        if (o->closed_steps != me->closed_steps || o->closed_failed != me->closed_failed) {
            dh__msg(x->err, sizeof x->err, "node %d closed %lld steps with %lld failed "
                     "samples, node %d %lld with %lld: the nodes' accounting disagrees", k,
                     (long long)o->closed_steps, (long long)o->closed_failed, e->node,
                     (long long)me->closed_steps, (long long)me->closed_failed);
            if (!e->error)
                e->error = DH_EMISMATCH;
        }
#define SUM(a, b) a += b;
#define MAX(a, b) a = DH_MAX(a, b);
#define FOLD(type, name, how) how(t->name, o->tot.name)
        DH__NODE_TOTALS(FOLD)
#undef FOLD
#undef MAX
#undef SUM
    }
    free(mine);
    x->totals = *t;
    if (all_final && !rc && x->own)
        note_earlier(e);
}

void dh__nodes_result(const dh_engine *e, const dh__node_totals *t, dh_result *full)
{
    full->nodes = e->nodes;
    full->memory_budget *= e->nodes; /* each node held its share */
    full->steps += e->x ? e->x->more_steps : 0; /* steps every rank took past the last */
    full->samples += e->x ? e->x->more_steps * e->rec.G : 0; /* closed one (FINAL) */
    full->failed += e->x ? e->x->more_failed : 0;
    full->delivered = full->samples - full->failed;
    full->reb_considered = t->considered;
    full->reb_moved = t->moved;
    full->reb_gated = t->gated;
    full->reb_refused = t->refused;
    full->reb_bytes = t->moved_bytes;
    full->reb_remote = t->remote;
    full->reb_remote_bytes = t->remote_bytes;
    full->lend_considered = t->lend_considered;
    full->lent = t->lent;
    full->lend_gated = t->lend_gated;
    full->bytes_shipped = t->shipped;
    full->reb_move_s = t->move_s;
    full->net_factor = t->net_factor;
    full->reb_predicted_gain_s = t->pred_gain;
    full->reb_realised_gain_s = t->real_gain;
    full->exchange_mean_s = t->xn ? t->xsum / (double)t->xn : 0;
    full->exchange_max_s = t->xmax;
    full->control_mean_s = t->xn ? t->ctrl / (double)t->xn : 0;
}

