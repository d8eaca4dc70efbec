/*
 * segv_hint.c - a trainer maps the agent's batch pools read-only (a trainer
 * cannot corrupt another rank's batches), so writing into a batch's tensor
 * kills it with SIGSEGV. That is documented, but a bare "Segmentation
 * fault" names no cause: this prints one line saying what happened first.
 *
 * DESIGN: the client registers each pool it maps (up to HINT_RANGES, slots
 * claimed lock-free) and installs, once per process, a SIGSEGV handler. On
 * a fault the handler writes the line (write(2) only: async-signal-safe) if
 * the address lies in a registered pool, puts the previous handler back and
 * returns: the faulting write runs again and meets that handler (the
 * default one dumps core; Python's faulthandler, ASan's, a runtime's own run
 * as before). DH_SEGV_HINT=0 leaves SIGSEGV alone. Linux-only (siginfo's
 * si_addr; docs/ARCHITECTURE.md lists where such calls live).
 */
#include "dist.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HINT_RANGES 64

static _Atomic uintptr_t range_lo[HINT_RANGES], range_hi[HINT_RANGES];
static char hint[HINT_RANGES][320]; /* each range's line, written before the range is */
static size_t hint_len[HINT_RANGES];
static struct sigaction previous;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

static void on_segv(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)ctx;
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int k = 0; k < HINT_RANGES; k++) {
        uintptr_t lo = atomic_load(&range_lo[k]), hi = atomic_load(&range_hi[k]);
        if (lo && a >= lo && a < hi) {
            ssize_t n = write(STDERR_FILENO, hint[k], hint_len[k]);
            (void)n;
            break;
        }
    }
    sigaction(SIGSEGV, &previous, NULL); /* the write faults again, into it */
}

static void install(void)
{
    const char *env = getenv("DH_SEGV_HINT");
    if (env && !strcmp(env, "0"))
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous);
}

void dh__segv_hint_add(const void *base, size_t len, int rank)
{
    if (!base || !len)
        return;
    pthread_once(&installed, install);
    for (int k = 0; k < HINT_RANGES; k++) {
        uintptr_t none = 0;
        if (atomic_compare_exchange_strong(&range_lo[k], &none, (uintptr_t)base)) {
            int n = snprintf(hint[k], sizeof hint[k],
                             "datahelix: rank %d (pid %d) wrote into a batch, whose memory "
                             "trainers map read-only (its tensors view the agent's shared "
                             "memory): write into a copy (x.clone(), x.float(), np.array(x)); "
                             "it now dies of SIGSEGV\n", rank, (int)getpid());
            hint_len[k] = n > 0 ? DH_MIN((size_t)n, sizeof hint[k] - 1) : 0;
            atomic_store(&range_hi[k], (uintptr_t)base + len); /* the line is there now */
            return;
        }
    }
    /* more pools mapped at once than slots: those go without the hint */
}

void dh__segv_hint_remove(const void *base)
{
    for (int k = 0; base && k < HINT_RANGES; k++)
        if (atomic_load(&range_lo[k]) == (uintptr_t)base) {
            atomic_store(&range_hi[k], 0);
            atomic_store(&range_lo[k], 0);
            return;
        }
}
