/*
 * bench_comm.c - the wire between agents, as the multi-node engine will
 * see it: one-way time of a message through the communication thread
 * (src/mpi/comm.c) from 0 B to 64 MiB, ping-pong between nodes 0 and 1
 * (the first 0 B row warms the connection up), and the fitted latency +
 * bandwidth (what the simulator's network model takes as --net-latency-us
 * and --net-gbps). Each received message lands in a fresh buffer, as
 * dh__comm_recv gives them: above 32 MiB glibc maps new pages for it, and
 * their first touch is part of the figure. Run under mpirun with 2
 * processes: bash bench/run_comm.sh build/release
 */
#include "bench_clock.h"
#include "mpi/comm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 40;
    dh__comm *c;
    char err[320];
    if (dh__comm_start(30, &c, err, sizeof err)) {
        fprintf(stderr, "bench_comm: %s\n", err);
        return 1;
    }
    int me = dh__comm_rank(c);
    if (getenv("DH_CHUNK"))
        dh__comm_set_chunk(c, (size_t)atol(getenv("DH_CHUNK")));
    if (dh__comm_size(c) != 2) {
        fprintf(stderr, "bench_comm: run it with 2 processes (mpirun -np 2)\n");
        dh__comm_stop(c);
        return 2;
    }
    static const size_t sizes[] = {0, 0, 1024, 65536, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    uint8_t *buf = calloc(1, sizes[NS - 1]);
    double one_way[NS];
    if (me == 0)
        printf("%12s %14s %14s\n", "bytes", "one-way us", "GB/s");
    for (int k = 0; k < NS && buf; k++) {
        double best = INFINITY;
        for (int r = 0; r < reps; r++) {
            double t0 = bench_seconds(CLOCK_MONOTONIC);
            dh__comm_msg m;
            if (me == 0) {
                dh__comm_send(c, 1, k, buf, sizes[k]);
                if (dh__comm_recv(c, &m, 30, err, sizeof err))
                    break;
            } else {
                if (dh__comm_recv(c, &m, 30, err, sizeof err))
                    break;
                dh__comm_send(c, 0, k, buf, sizes[k]);
            }
            free(m.data);
            best = fmin(best, (bench_seconds(CLOCK_MONOTONIC) - t0) / 2);
        }
        one_way[k] = best;
        if (me == 0)
            printf("%12zu %14.1f %14.2f\n", sizes[k], best * 1e6,
                   sizes[k] ? (double)sizes[k] / best / 1e9 : 0.0);
    }
    if (me == 0) { /* latency + bytes / bandwidth, from 1 KiB and 16 MiB (row 0 warms up; an
                    * empty message to an idle node waits for its poll; 64 MiB messages land
                    * in fresh mmap'd memory, whose page faults dominate here) */
        double lat = one_way[2],
               bw = (double)(sizes[NS - 2] - sizes[2]) / (one_way[NS - 2] - lat);
        printf("fit: latency %.1f us, bandwidth %.2f GB/s (%.1f Gb/s): "
               "datahelix sim --net-latency-us %.0f --net-gbps %.1f\n",
               lat * 1e6, bw / 1e9, bw * 8 / 1e9, lat * 1e6, bw * 8 / 1e9);
    }
    free(buf);
    dh__comm_stop(c);
    return 0;
}
