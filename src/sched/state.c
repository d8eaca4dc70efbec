/*
 * state.c - the scheduler's memory: creating and freeing it, and the step
 * window's rings (sched_int.h): growing them when more steps are in flight
 * than they hold, and retiring steps every rank is done with. Nothing here
 * depends on the run's length.
 */
#include "sched_int.h"

#include <stdlib.h>
#include <string.h>

#define INITIAL_STEP_SLOTS 8

/* ------------------------------------------------------------------ window */

/* Moves every live step into rings of cap `ncap` (a power of two). */
static int regrow(dh__sched *s, int64_t ncap)
{
    int64_t G = s->G, R = s->R;
    batch_rec *batch = dh__table_calloc((size_t)(ncap * R), sizeof *batch);
    int64_t *order = dh__table_alloc((size_t)(ncap * G) * sizeof *order);
    int32_t *rank_of = dh__table_alloc((size_t)(ncap * G) * sizeof *rank_of);
    int64_t *members = dh__table_alloc((size_t)(ncap * G) * sizeof *members);
    float *task_pred = dh__table_alloc((size_t)(ncap * G) * sizeof *task_pred);
    double *slot_gpu = dh__table_alloc((size_t)(ncap * G) * sizeof *slot_gpu);
    int64_t *slot_bytes = dh__table_alloc((size_t)(ncap * G) * sizeof *slot_bytes);
    uint8_t *slot_cls = dh__table_alloc((size_t)(ncap * G) * sizeof *slot_cls);
    int32_t *slot_segs = dh__table_calloc((size_t)(ncap * G), sizeof *slot_segs); /* 0 until read */
    int32_t *parts_left = dh__table_calloc((size_t)(ncap * G), sizeof *parts_left);
    float *revealed = dh__table_alloc((size_t)(ncap * G) * sizeof *revealed);
    uint8_t *done = dh__table_calloc((size_t)(ncap * G), 1);
    int32_t *orig_rank = dh__table_alloc((size_t)(ncap * G) * sizeof *orig_rank);
    double *step_start = dh__table_calloc((size_t)ncap, sizeof *step_start);
    int32_t *finished_ranks = dh__table_calloc((size_t)ncap, sizeof *finished_ranks);
    uint8_t *rank_finished = dh__table_calloc((size_t)(ncap * R), 1);
    int32_t *group = dh__table_alloc((size_t)ncap * DH_MOVE_GROUP * sizeof *group);
    uint8_t *settled = dh__table_calloc((size_t)ncap * (size_t)s->nodes, 1);
    int deals = s->nodes > 1 && s->ranks_per_node > 1; /* node_pos: only a deal fills it */
    int32_t *node_pos = dh__table_alloc((size_t)(deals ? ncap * G : 1) * sizeof *node_pos);
    int32_t *node_end = dh__table_calloc((size_t)ncap * (size_t)(s->nodes + 1), sizeof *node_end);
    int32_t *node_mem = dh__table_calloc((size_t)ncap * (size_t)s->nodes, sizeof *node_mem);
    size_t nn = (size_t)s->nodes;
    double *first_lead = dh__table_calloc((size_t)ncap * nn, sizeof *first_lead);
    uint64_t *leads_ver = dh__table_calloc((size_t)ncap * nn, sizeof *leads_ver);
    int ok = batch && order && rank_of && members && task_pred && slot_gpu && slot_bytes &&
             slot_cls && slot_segs && parts_left && revealed && done && orig_rank && step_start &&
             finished_ranks && rank_finished && group && settled && first_lead && leads_ver &&
             node_pos && node_end && node_mem;
    for (int64_t st = s->lo; ok && s->cap && st <= s->planned; st++) {
        int64_t o = st & (s->cap - 1), n = st & (ncap - 1);
        step_start[n] = s->step_start[o];
        if (st == s->planned)
            break;
        finished_ranks[n] = s->finished_ranks[o];
        memcpy(group + n * DH_MOVE_GROUP, s->group + o * DH_MOVE_GROUP,
               DH_MOVE_GROUP * sizeof *group);
        memcpy(settled + n * s->nodes, s->settled + o * s->nodes, (size_t)s->nodes);
        memcpy(node_end + n * (s->nodes + 1), s->node_end + o * (s->nodes + 1),
               (size_t)(s->nodes + 1) * sizeof *node_end);
        memcpy(node_mem + n * s->nodes, s->node_mem + o * s->nodes,
               (size_t)s->nodes * sizeof *node_mem);
        if (deals)
            memcpy(node_pos + n * G, s->node_pos + o * G, (size_t)G * sizeof *node_pos);
        memcpy(batch + n * R, s->batch + o * R, (size_t)R * sizeof *batch);
        memcpy(rank_finished + n * R, s->rank_finished + o * R, (size_t)R);
        memcpy(first_lead + n * (int64_t)nn, s->first_lead + o * (int64_t)nn, nn * sizeof *first_lead);
        memcpy(leads_ver + n * (int64_t)nn, s->leads_ver + o * (int64_t)nn, nn * sizeof *leads_ver);
#define MOVE(a) memcpy(a + n * G, s->a + o * G, (size_t)G * sizeof *a)
        MOVE(order);
        MOVE(rank_of);
        MOVE(members);
        MOVE(task_pred);
        MOVE(slot_gpu);
        MOVE(slot_bytes);
        MOVE(slot_cls);
        MOVE(slot_segs);
        MOVE(parts_left);
        MOVE(revealed);
        MOVE(done);
        MOVE(orig_rank);
#undef MOVE
    }
#define SWAP(a)                                                                                    \
    do {                                                                                           \
        void *t_ = s->a;                                                                           \
        s->a = ok ? a : s->a;                                                                      \
        free(ok ? t_ : (void *)a);                                                                 \
    } while (0)
    SWAP(batch);
    SWAP(order);
    SWAP(rank_of);
    SWAP(members);
    SWAP(task_pred);
    SWAP(slot_gpu);
    SWAP(slot_bytes);
    SWAP(slot_cls);
    SWAP(slot_segs);
    SWAP(parts_left);
    SWAP(revealed);
    SWAP(done);
    SWAP(orig_rank);
    SWAP(step_start);
    SWAP(finished_ranks);
    SWAP(rank_finished);
    SWAP(group);
    SWAP(settled);
    SWAP(node_pos);
    SWAP(node_end);
    SWAP(node_mem);
    SWAP(first_lead);
    SWAP(leads_ver);
#undef SWAP
    if (!ok)
        return DH_ENOMEM;
    s->cap = ncap;
    return 0;
}

/* Room for steps [lo, st] and the start of st + 1. */
int dh__sched_ensure_room(dh__sched *s, int64_t st)
{
    int64_t need = st + 2 - s->lo, ncap = s->cap;
    while (ncap < need)
        ncap *= 2;
    return ncap == s->cap ? 0 : regrow(s, ncap);
}

/* Steps every rank finished, before the latest taken one, leave the window. */
void dh__sched_retire(dh__sched *s)
{
    while (s->lo < s->planned && s->lo < s->cur_step &&
           s->finished_ranks[step_slot(s, s->lo)] == s->R)
        s->lo++;
}

/* --------------------------------------------------------------- lifecycle */

void dh__sched_free(dh__sched *s)
{
    if (!s)
        return;
    if (s->drawn_below) /* the order source stops carrying the table freed here */
        s->cfg.carry_bytes(s->cfg.order_ctx, NULL);
    free(s->batch);
    free(s->order);
    free(s->rank_of);
    free(s->members);
    free(s->task_pred);
    free(s->slot_gpu);
    free(s->slot_bytes);
    free(s->slot_cls);
    free(s->slot_segs);
    free(s->parts_left);
    free(s->revealed);
    free(s->done);
    free(s->orig_rank);
    free(s->step_start);
    free(s->finished_ranks);
    free(s->rank_finished);
    free(s->group);
    free(s->settled);
    free(s->node_pos);
    free(s->node_end);
    free(s->node_mem);
    free(s->reb_known);
    free(s->first_lead);
    free(s->leads_ver);
    free(s->lead_keys);
    free(s->rank_node);
    dh__part_ws_free(&s->part_ws);
    for (int n = 0; n < s->nodes; n++) {
        if (s->fifo)
            free(s->fifo[n].pos);
        if (s->queue)
            task_heap_qfree(&s->queue[n]);
    }
    free(s->fifo);
    free(s->queue);
    free(s->taken);
    free(s->worker_step);
    free(s->worker_free);
    free(s->plan_gpu);
    free(s->plan_cpu);
    free(s->plan_fill);
    free(s->plan_tokens);
    free(s->plan_bytes);
    free(s->share_ord);
    free(s->deal_class);
    free(s->deal_key);
    free(s->deal_hist);
    free(s->deal_turn);
    free(s->below);
    free(s->groups);
    free(s->share_rank);
    free(s->share_gpu);
    free(s->share_cpu);
    free(s->share_tokens);
    free(s->share_bytes);
    free(s->reb_i32);
    free(s->reb_f64);
    free(s->moved_list);
    free(s->moved);
    free(s->moved_pos);
    free(s->plan_pos);
    free(s->moved_mem);
    dh__lend_free(s);
    free(s);
}

static int config_valid(const dh__sched_config *cfg)
{
    return cfg->ranks >= 1 && cfg->workers >= 1 && cfg->global_batch >= 1 &&
           cfg->global_batch <= INT32_MAX && cfg->steps >= 0 && dh__policy_caps_of(cfg->policy) &&
           cfg->next_order && cfg->pred.n > 0 && cfg->nodes >= 0 &&
           (cfg->nodes <= 1 || (cfg->ranks % cfg->nodes == 0 && cfg->workers % cfg->nodes == 0)) &&
           (!cfg->node_local || (cfg->node >= 0 && cfg->node < DH_MAX(1, cfg->nodes)));
}

static void fill_defaults(dh__sched *s)
{
    if (!s->cfg.move_bandwidth)
        s->cfg.move_bandwidth = 20e9;
    if (!s->cfg.move_latency)
        s->cfg.move_latency = 5e-6;
    s->reb.move_factor = 1.0;
    s->reb.net_factor = 1.0;
    if (!s->cfg.net_bandwidth)
        s->cfg.net_bandwidth = 100e9 / 8;
    if (!s->cfg.net_latency)
        s->cfg.net_latency = 20e-6;
}

static int alloc_fixed(dh__sched *s)
{
    size_t R = (size_t)s->R, G = (size_t)s->G, nodes = (size_t)s->nodes, gr = DH_MAX(G, R);
    s->fifo = dh__calloc(nodes, sizeof *s->fifo);
    s->queue = dh__calloc(nodes, sizeof *s->queue);
    /* lending's lateness reads a queue's heap as it lies (lend.c): its runs keep one heap, so
     * they place as they did */
    for (size_t n = 0; s->queue && n < nodes; n++)
        s->queue[n].tiered = !(s->caps->lend && s->nodes > 1);
    s->taken = dh__calloc(R, sizeof *s->taken);
    s->worker_step = dh__malloc((size_t)s->nworkers * sizeof *s->worker_step);
    s->worker_free = dh__calloc((size_t)s->nworkers, sizeof *s->worker_free);
    s->plan_gpu = dh__malloc(gr * sizeof *s->plan_gpu);
    s->plan_cpu = dh__malloc(gr * sizeof *s->plan_cpu);
    s->plan_fill = dh__malloc(R * sizeof *s->plan_fill);
    s->plan_tokens = dh__malloc(G * sizeof *s->plan_tokens);
    s->plan_bytes = dh__malloc(G * sizeof *s->plan_bytes);
    s->reb_i32 = dh__malloc((3 * G + 3 * R + nodes) * sizeof *s->reb_i32);
    s->reb_f64 = dh__malloc(2 * R * sizeof *s->reb_f64);
    s->moved_list = dh__malloc(R * sizeof *s->moved_list);
    s->moved = dh__calloc(R, sizeof *s->moved);
    s->moved_pos = dh__malloc(G * sizeof *s->moved_pos);
    s->plan_pos = dh__malloc(G * sizeof *s->plan_pos);
    s->moved_mem = dh__malloc(G * sizeof *s->moved_mem);
    s->lead_keys = dh__malloc((size_t)s->ranks_per_node * sizeof *s->lead_keys);
    s->rank_node = dh__malloc(R * sizeof *s->rank_node);
    for (size_t r = 0; s->rank_node && r < R; r++)
        s->rank_node[r] = (int32_t)(r / (size_t)s->ranks_per_node);
    if (s->nodes > 1 && !(s->reb_known = dh__malloc(G * sizeof *s->reb_known)))
        return DH_ENOMEM;
    if (s->nodes > 1 && s->ranks_per_node > 1) {
        s->share_ord = dh__malloc(G * sizeof *s->share_ord);
        s->deal_class = dh__malloc(G * sizeof *s->deal_class);
        s->deal_key = dh__malloc(G * sizeof *s->deal_key);
        s->deal_hist = dh__malloc(DH_HALF_OCTAVES * sizeof *s->deal_hist);
        s->deal_turn = dh__malloc(nodes * sizeof *s->deal_turn);
        s->groups = dh__malloc((3 * nodes + 1) * sizeof *s->groups);
        s->groups_step = -1;
        s->share_rank = dh__malloc(G * sizeof *s->share_rank);
        s->share_gpu = dh__malloc(G * sizeof *s->share_gpu);
        s->share_cpu = dh__malloc(G * sizeof *s->share_cpu);
        s->share_tokens = dh__malloc(G * sizeof *s->share_tokens);
        s->share_bytes = dh__malloc(G * sizeof *s->share_bytes);
        if (!s->share_ord || !s->deal_class || !s->deal_key || !s->deal_hist || !s->deal_turn || !s->groups ||
            !s->share_rank ||
            !s->share_gpu || !s->share_cpu || !s->share_tokens || !s->share_bytes)
            return DH_ENOMEM;
    }
    if (rows_lazy(s) && !s->cfg.order_by_node) { /* the deal's input, once for the dataset:
                                                  * a byte a sample read a step, not a row */
        if (!(s->below = dh__malloc((size_t)s->cfg.pred.n)))
            return DH_ENOMEM;
        s->half_top = 0;
        for (int64_t i = 0; i < s->cfg.pred.n; i++)
            s->half_top = DH_MAX(s->half_top, (int)dh__cost_half_octave(sample_gpu(s, i)));
        for (int64_t i = 0; i < s->cfg.pred.n; i++) /* no cost: the last class, as clipped */
            s->below[i] = (uint8_t)dh__cost_class(dh__cost_half_octave(sample_gpu(s, i)),
                                                  (uint64_t)s->half_top, BELOW_CLIP + 1);
        for (int b = 0; b <= BELOW_CLIP; b++)
            s->half_of[b] = (uint16_t)DH_MAX(0, s->half_top - b);
        if (s->cfg.carry_bytes)
            s->drawn_below = s->cfg.carry_bytes(s->cfg.order_ctx, s->below);
    }
    if (!s->lead_keys || !s->rank_node || !s->fifo || !s->queue || !s->taken || !s->worker_step ||
        !s->worker_free || !s->plan_gpu || !s->plan_cpu || !s->plan_fill || !s->plan_tokens ||
        !s->plan_bytes || !s->reb_i32 || !s->reb_f64 || !s->moved_list || !s->moved ||
        !s->moved_pos || !s->moved_mem || !s->plan_pos)
        return DH_ENOMEM;
    return dh__lend_init(s);
}

void dh__sched_set_steps(dh__sched *s, int64_t steps)
{
    s->N = steps;
    s->cfg.steps = steps;
}

int dh__sched_new(const dh__sched_config *cfg, dh__sched **out)
{
    if (!cfg || !out || !config_valid(cfg))
        return DH_EINVAL;
    dh__sched *s = dh__calloc(1, sizeof *s);
    if (!s)
        return DH_ENOMEM;
    s->cfg = *cfg;
    s->caps = dh__policy_caps_of(cfg->policy);
    s->G = cfg->global_batch;
    s->N = cfg->steps ? cfg->steps : DH__STEPS_UNBOUNDED;
    s->R = cfg->ranks;
    s->W = cfg->workers;
    s->k_local = DH_MAX(1, s->W / s->R);
    s->nodes = cfg->nodes > 0 ? cfg->nodes : 1;
    s->ranks_per_node = s->R / s->nodes;
    s->workers_per_node = DH_MAX(1, s->W / s->nodes);
    s->nworkers = s->caps->service == DH_SERVE_LOCAL ? s->R * s->k_local : s->W;
    dh__calib_init(&s->calib);
    dh__calib_init(&s->plan_calib);
    fill_defaults(s);
    int rc = alloc_fixed(s);
    if (!rc)
        rc = regrow(s, INITIAL_STEP_SLOTS);
    if (rc) {
        dh__sched_free(s);
        return rc;
    }
    for (int w = 0; w < s->nworkers; w++)
        s->worker_step[w] = w % s->k_local;
    *out = s;
    return 0;
}
