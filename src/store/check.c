/*
 * check.c - are a manifest's objects still there, readable and as indexed? (`inspect
 * --check-files` on a manifest of objects; docs/STORAGE.md).
 *
 * DESIGN: every distinct object the manifest names (a shard's samples share one) is asked
 * once, for its size and ETag (dh__remote_stat: a 1-byte ranged GET), by up to CHECKERS
 * threads with a connection each, taking objects from a shared counter. The answers are
 * compared with what the manifest pinned (the object's size; its ETag when it has one) and
 * each object that fails is reported after all were asked, in manifest order, with the
 * line and id of the first sample that names it.
 */
#include "store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define CHECKERS 16

typedef struct {
    const char *path, *etag, *id; /* borrowed from the manifest */
    int64_t size, line, sample;
    int code;
    char *reason; /* malloc'ed when the object failed */
} object;

typedef struct {
    object *obj;
    int64_t n;
    atomic_llong next, done;
    dh__store_conf conf;
    void (*progress)(int64_t done, int64_t total, void *user);
    void *user;
    pthread_mutex_t mu; /* progress calls, one at a time */
} job;

static int by_path_then_sample(const void *a, const void *b)
{
    const object *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : (x->sample > y->sample) - (x->sample < y->sample);
}

static int by_sample(const void *a, const void *b)
{
    const object *x = a, *y = b;
    return (x->sample > y->sample) - (x->sample < y->sample);
}

/* One object asked and compared with what the manifest says of it. */
static void check_one(dh__remote *r, object *o)
{
    char err[1200];
    dh__object got;
    int rc = dh__remote_stat(r, o->path, 0, &got, err, sizeof err);
    if (!rc && o->size > 0 && got.size != o->size) {
        rc = dh__fail(err, sizeof err, DH_ECORRUPT, "changed since it was indexed: %lld bytes "
                      "now, %lld indexed (index it again)", (long long)got.size,
                      (long long)o->size);
    } else if (!rc && o->etag && o->etag[0] && strcmp(got.etag, o->etag)) {
        rc = dh__fail(err, sizeof err, DH_ECORRUPT, "changed since it was indexed: ETag %s "
                      "now, %s indexed (index it again)", got.etag[0] ? got.etag : "(none)",
                      o->etag);
    }
    o->code = rc;
    o->reason = rc ? strdup(err) : NULL;
    if (rc && !o->reason)
        o->code = DH_ENOMEM;
}

static void *checker(void *arg)
{
    job *j = arg;
    char err[400];
    dh__remote *r = dh__remote_new(&j->conf, err, sizeof err);
    for (int64_t k; (k = atomic_fetch_add(&j->next, 1)) < j->n;) {
        if (r) {
            check_one(r, &j->obj[k]);
        } else {
            j->obj[k].code = DH_ENOMEM;
            j->obj[k].reason = strdup(err);
        }
        int64_t done = atomic_fetch_add(&j->done, 1) + 1;
        if (j->progress) {
            pthread_mutex_lock(&j->mu);
            j->progress(done, j->n, j->user);
            pthread_mutex_unlock(&j->mu);
        }
    }
    dh__remote_free(r);
    return NULL;
}

/* The distinct objects m names, each with its first sample, in manifest order; -1 when
 * out of memory. */
static int64_t objects_of(const dh_manifest *m, object **out)
{
    int64_t n = 0, cap = 0, ns = dh_manifest_count(m);
    object *v = NULL;
    for (int64_t i = 0; i < ns; i++) {
        dh_sample_info si;
        dh_manifest_sample(m, i, &si);
        for (int j = 0; j < si.media_count; j++) {
            dh_media_info mi;
            dh_manifest_media(m, i, j, &mi);
            if (!dh__is_remote(mi.path))
                continue;
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                object *g = realloc(v, (size_t)cap * sizeof *g);
                if (!g) {
                    free(v);
                    return -1;
                }
                v = g;
            }
            v[n++] = (object){.path = mi.path, .etag = mi.etag, .id = si.id, .sample = i,
                              .line = si.line,
                              .size = mi.offset > 0 ? mi.file_bytes : mi.bytes};
        }
    }
    if (n > 1) { /* one per object: its first sample's */
        qsort(v, (size_t)n, sizeof *v, by_path_then_sample);
        int64_t u = 1;
        for (int64_t k = 1; k < n; k++)
            if (strcmp(v[k].path, v[u - 1].path))
                v[u++] = v[k];
        n = u;
        qsort(v, (size_t)n, sizeof *v, by_sample);
    }
    *out = v;
    return n;
}

int64_t dh_manifest_check_objects(const dh_manifest *m,
                                  void (*on_bad)(const dh_object_problem *p, void *user),
                                  void *user,
                                  void (*progress)(int64_t done, int64_t total, void *user),
                                  void *progress_user, int64_t *checked, char *err,
                                  size_t errlen)
{
    if (checked)
        *checked = 0;
    if (!m)
        return dh__fail(err, errlen, DH_EINVAL, "no manifest");
    job j = {.progress = progress, .user = progress_user};
    int rc = dh__store_conf_env(&j.conf, err, errlen);
    j.n = rc ? 0 : objects_of(m, &j.obj);
    if (rc || j.n <= 0) /* settings wrong, no objects, or out of memory */
        return rc ? rc : j.n < 0 ? dh__fail(err, errlen, DH_ENOMEM, "out of memory") : 0;
    pthread_mutex_init(&j.mu, NULL);
    int nt = (int)DH_MIN((int64_t)CHECKERS, j.n), started = 0;
    pthread_t t[CHECKERS];
    for (int k = 0; k < nt; k++)
        started += dh__thread_create(&t[started], checker, &j) == 0;
    if (!started) /* this thread asks alone */
        checker(&j);
    for (int k = 0; k < started; k++)
        pthread_join(t[k], NULL);
    pthread_mutex_destroy(&j.mu);
    int64_t bad = 0;
    for (int64_t k = 0; k < j.n; k++) {
        object *o = &j.obj[k];
        if (o->code) {
            bad++;
            char shown[1024];
            dh__store_display(o->path, shown, sizeof shown);
            dh_object_problem p = {shown, o->line, o->id, o->code,
                                   o->reason ? o->reason : dh_strerror(o->code)};
            if (on_bad)
                on_bad(&p, user);
        }
        free(o->reason);
    }
    if (checked)
        *checked = j.n;
    free(j.obj);
    return bad;
}
