/*
 * agent_mpi.c - the agent as one node of an mpirun job: `mpirun -np NODES
 * datahelix run|serve ...` starts one agent per node; this file joins them
 * with the OpenMPI layer (src/mpi, linked into the agent only, never into
 * libdatahelix) and hands the engine its step exchange (dh_run_config's
 * exchange callback). The one place the CLI reaches past the public API:
 * the MPI layer is the agent's, not the library's (docs/MULTINODE.md).
 *
 * Built only with OpenMPI (DH_HAVE_MPI); without it an agent started as one of
 * several MPI processes refuses with the reason.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

#ifdef DH_HAVE_MPI
#include "mpi/comm.h"
#endif

/* Processes in the MPI job that started us (OpenMPI's, or the PMI launchers'), or 1. */
static int mpi_processes(void)
{
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++) {
        const char *v = getenv(vars[k]);
        long n = v ? strtol(v, NULL, 10) : 0;
        if (n > 1)
            return n > 1000000 ? 1000000 : (int)n;
    }
    return 1;
}

/* Seconds a node may stay silent before the others call it dead ($DH_NODE_TIMEOUT). */
static double node_timeout(void)
{
    const char *v = getenv("DH_NODE_TIMEOUT");
    double t = v ? strtod(v, NULL) : 0;
    return t > 0 && t < 86400 ? t : 10.0;
}

#ifdef DH_HAVE_MPI

struct cli_node {
    dh__comm *comm;
};

/* A step exchange waits for the slowest node's step, however long; a dead node is found by
 * its silence (node_timeout), not by this. */
#define EXCHANGE_WAIT_S (7 * 86400.0)

static int exchange(void *user, const void *mine, void *all, size_t bytes, char *err,
                    size_t errlen)
{
    cli_node *n = user;
    return dh__comm_allgather(n->comm, mine, all, bytes, EXCHANGE_WAIT_S, err, errlen);
}

static int send_msg(void *user, int to, const void *buf, size_t len)
{
    cli_node *n = user;
    return dh__comm_send(n->comm, to, 0, buf, len);
}

static int recv_msg(void *user, int *from, void **data, size_t *len, double timeout_s,
                    char *err, size_t errlen)
{
    cli_node *n = user;
    dh__comm_msg m;
    int rc = dh__comm_recv(n->comm, &m, timeout_s, err, errlen);
    if (!rc) {
        *from = m.from;
        *data = m.data;
        *len = m.len;
    }
    return rc;
}

int cli_node_start(dh_run_config *cfg, cli_node **out)
{
    *out = NULL;
    int procs = mpi_processes();
    if (procs == 1)
        return 0;
    if (cfg->nodes > 1 && cfg->nodes != procs) {
        cli_err("--nodes %d, but mpirun started %d processes: one agent per node (drop "
                "--nodes, or make them agree)", cfg->nodes, procs);
        return CLI_USAGE;
    }
    cli_node *n = calloc(1, sizeof *n);
    char err[512] = "";
    if (!n || dh__comm_start(node_timeout(), &n->comm, err, sizeof err)) {
        cli_err("cannot join the other nodes: %s", err[0] ? err : "out of memory");
        free(n);
        return 1;
    }
    cfg->nodes = dh__comm_size(n->comm);
    cfg->node = dh__comm_rank(n->comm);
    cfg->exchange = exchange;
    cfg->send = send_msg; /* lending: prepared samples between nodes */
    cfg->recv = recv_msg;
    cfg->exchange_user = n;
    *out = n;
    return 0;
}

int cli_node_rank(const cli_node *n)
{
    return n ? dh__comm_rank(n->comm) : 0;
}

const char *cli_node_name(const cli_node *n)
{
    return n ? dh__comm_name(n->comm, dh__comm_rank(n->comm)) : "";
}

int cli_node_agree_mean(cli_node *n, double *value)
{
    if (!n)
        return 0;
    int size = dh__comm_size(n->comm);
    double *all = calloc((size_t)size, sizeof *all);
    char err[512] = "";
    int rc = all ? dh__comm_allgather(n->comm, value, all, sizeof *value, EXCHANGE_WAIT_S, err,
                                      sizeof err)
                 : DH_ENOMEM;
    if (rc) {
        cli_err("cannot agree with the other nodes: %s", err[0] ? err : dh_strerror(rc));
        free(all);
        return 1;
    }
    double sum = 0;
    for (int k = 0; k < size; k++)
        sum += all[k];
    *value = sum / size; /* every node computes the same mean from the same values */
    free(all);
    return 0;
}

double cli_node_comm_cpu(cli_node *n)
{
    return n ? dh__comm_cpu(n->comm) : 0;
}

void cli_node_fail(cli_node *n, const char *why)
{
    if (n)
        dh__comm_farewell(n->comm, why);
}

void cli_node_stop(cli_node *n)
{
    if (!n)
        return;
    dh__comm_stop(n->comm);
    free(n);
}

#else /* built without OpenMPI */

int cli_node_start(dh_run_config *cfg, cli_node **out)
{
    (void)cfg;
    *out = NULL;
    if (mpi_processes() == 1)
        return 0;
    cli_err("started as one of %d MPI processes, but this datahelix was built without OpenMPI "
            "(apt-get install libopenmpi-dev, then rebuild): each process would run the whole "
            "job", mpi_processes());
    return CLI_USAGE;
}

int cli_node_rank(const cli_node *n)
{
    (void)n;
    return 0;
}

const char *cli_node_name(const cli_node *n)
{
    (void)n;
    return "";
}

int cli_node_agree_mean(cli_node *n, double *value)
{
    (void)n;
    (void)value;
    return 0;
}

double cli_node_comm_cpu(cli_node *n)
{
    (void)n;
    return 0;
}

void cli_node_fail(cli_node *n, const char *why)
{
    (void)n;
    (void)why;
}

void cli_node_stop(cli_node *n)
{
    (void)n;
}

#endif
