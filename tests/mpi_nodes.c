/*
 * mpi_nodes.c - the real engine on several nodes under mpirun (tests/mpi_run.sh),
 * through the public API and the agent's MPI layer only.
 *   mpi_nodes MANIFEST POLICY RANKS WORKERS BATCH STEPS LOG [heavy] [augment] [stratified]
 * Started by mpirun, each process is one node: it runs the engine with its
 * own ranks' consumers (as trainers attached to `serve` would) and writes one
 * line per delivered sample to LOG.nodeK: "step sample status crc", crc over
 * the bytes of the sample's items. Started alone it is one node writing LOG.
 * The script checks that the nodes' lines together are exactly the lines of
 * the one-node run: every sample of every step delivered once, on one node,
 * with the same bytes (and the one-node engine's bytes equal a direct decode:
 * test_engine). Prints "node K: steps S delivered D failed F nodes N ...".
 * "heavy": sample 0 costs 100 s of GPU time once prepared, every other 1 s,
 * and each consumer holds its batch 300 ms (the next step is prepared
 * meanwhile), so rebalancing moves samples off sample 0's rank, across nodes.
 * "augment": the spec with --augment's random crops, clips and flips; the crc then also
 * covers each item's draw, which must not depend on the node that decoded it.
 * "stratified": --order stratified (each step laid out by node, dealt as laid out).
 */
#include "mpi/comm.h"

#include <datahelix.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t crc32(const uint8_t *p, size_t n, uint32_t c)
{
    c = ~c;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

typedef struct {
    dh_engine *e;
    int rank;
    FILE *log;
    pthread_mutex_t *mu;
} consumer;

static int heavy; /* the "heavy" mode (above) */

static double heavy_cost(int64_t sample, const dh_batch_item *items, int32_t n,
                         const uint8_t *data, void *user)
{
    (void)items, (void)n, (void)data, (void)user;
    return sample == 0 ? 100.0 : 1.0;
}

static void *consume(void *p)
{
    consumer *c = p;
    dh_batch b;
    while (dh_engine_next_batch(c->e, c->rank, &b) == 0) {
        if (heavy)
            nanosleep(&(struct timespec){0, 300000000L}, NULL);
        for (int32_t k = 0; k < b.nsamples; k++) {
            uint32_t crc = 0;
            int status = 0;
            for (int32_t j = 0; j < b.nitems; j++)
                if (b.items[j].sample == b.samples[k]) {
                    crc = crc32(b.data + b.items[j].offset, (size_t)b.items[j].bytes, crc);
                    crc = crc32((const uint8_t *)&b.draws[j], sizeof b.draws[j], crc);
                    status = status ? status : b.items[j].status;
                }
            pthread_mutex_lock(c->mu);
            fprintf(c->log, "%lld %lld %d %08x\n", (long long)b.step, (long long)b.samples[k],
                    status, crc);
            pthread_mutex_unlock(c->mu);
        }
        dh_engine_release(c->e, &b, -1);
    }
    return NULL;
}

static int exchange(void *user, const void *mine, void *all, size_t bytes, char *err,
                    size_t errlen)
{
    return dh__comm_allgather(user, mine, all, bytes, 600, err, errlen);
}

static int send_msg(void *user, int to, const void *buf, size_t len)
{
    return dh__comm_send(user, to, 0, buf, len);
}

static int recv_msg(void *user, int *from, void **data, size_t *len, double timeout_s,
                    char *err, size_t errlen)
{
    dh__comm_msg m;
    int rc = dh__comm_recv(user, &m, timeout_s, err, errlen);
    if (!rc)
        *from = m.from, *data = m.data, *len = m.len;
    return rc;
}

int main(int argc, char **argv)
{
    int augment = 0, stratified = 0;
    for (int k = 8; k < argc; k++) {
        heavy |= !strcmp(argv[k], "heavy");
        augment |= !strcmp(argv[k], "augment");
        stratified |= !strcmp(argv[k], "stratified");
    }
    if (argc < 8 || argc - 8 != heavy + augment + stratified) {
        fprintf(stderr, "usage: mpi_nodes MANIFEST POLICY RANKS WORKERS BATCH STEPS LOG [heavy] "
                "[augment] [stratified]\n");
        return 2;
    }
    dh__comm *comm = NULL;
    char err[512] = "";
    const char *np = getenv("OMPI_COMM_WORLD_SIZE");
    if (np && atoi(np) > 1 && dh__comm_start(5.0, &comm, err, sizeof err)) {
        fprintf(stderr, "mpi_nodes: %s\n", err);
        return 1;
    }
    dh_manifest *m;
    if (dh_manifest_load(argv[1], NULL, &m, NULL)) {
        fprintf(stderr, "mpi_nodes: cannot load %s\n", argv[1]);
        return 1;
    }
    dh_run_config c;
    dh_run_config_default(&c);
    c.manifest = m;
    c.policy = argv[2];
    c.ranks = atoi(argv[3]);
    c.workers = atoi(argv[4]);
    c.global_batch = atoi(argv[5]);
    c.steps = atoi(argv[6]);
    if (heavy)
        c.sample_gpu_cost = heavy_cost;
    c.augment = augment;
    c.order = stratified ? DH_ORDER_STRATIFIED : DH_ORDER_UNIFORM;
    int node = 0;
    if (comm) {
        c.nodes = dh__comm_size(comm);
        c.node = node = dh__comm_rank(comm);
        c.exchange = exchange;
        c.send = send_msg; /* helix lends between nodes */
        c.recv = recv_msg;
        c.exchange_user = comm;
    }
    char path[4096];
    snprintf(path, sizeof path, comm ? "%s.node%d" : "%s", argv[7], node);
    FILE *log = fopen(path, "w");
    dh_engine *e;
    int rc = log ? dh_engine_start(&c, NULL, NULL, &e, err, sizeof err) : DH_EIO;
    if (rc) {
        fprintf(stderr, "mpi_nodes node %d: %s\n", node, err);
        return 1;
    }
    int per = c.ranks / (comm ? c.nodes : 1);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    consumer *cs = calloc((size_t)per, sizeof *cs);
    pthread_t *t = calloc((size_t)per, sizeof *t);
    for (int i = 0; i < per; i++) {
        cs[i] = (consumer){e, node * per + i, log, &mu};
        pthread_create(&t[i], NULL, consume, &cs[i]);
    }
    for (int i = 0; i < per; i++)
        pthread_join(t[i], NULL);
    dh_result r = DH_RESULT_INIT;
    rc = dh_engine_finish(e, &r);
    dh_engine_free(e);
    fclose(log);
    printf("node %d: steps %lld delivered %lld failed %lld nodes %d rc %d lent %lld moved %lld "
           "remote %lld\n", node, (long long)r.steps, (long long)r.delivered, (long long)r.failed,
           r.nodes, rc, (long long)r.lent, (long long)r.reb_moved, (long long)r.reb_remote);
    free(cs);
    free(t);
    dh_manifest_free(m);
    dh__comm_stop(comm);
    return rc ? 1 : 0;
}
