/*
 * comm_base.c - what every file of the communication layer uses (comm_int.h):
 * error sentences, the monotonic clock, a bounded wait on the layer's
 * condition variable, and the node-died check. A leaf: it calls none of
 * the layer's other files.
 */
#include "comm_int.h"

int dh__comm_fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

double dh__comm_mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int dh__comm_wait_until(dh__comm *c, double deadline)
{
    double left = deadline - dh__comm_mono();
    if (left <= 0)
        return 1;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double at = (double)t.tv_sec + (double)t.tv_nsec * 1e-9 + DH_MIN(left, 0.05);
    t.tv_sec = (time_t)at;
    t.tv_nsec = (long)((at - (double)t.tv_sec) * 1e9);
    pthread_cond_timedwait(&c->cv, &c->mu, &t);
    return 0;
}

int dh__comm_dead_locked(dh__comm *c, char *err, size_t errlen)
{
    if (c->dead < 0)
        return 0;
    return dh__comm_fail(err, errlen, DH_EPEER, "%s", c->err);
}
