/*
 * _datahelix.c - the CPython extension under the `datahelix` package: a thin
 * binding of the C client (datahelix/client.h); the module and Client here,
 * Batch in _batch.c. Python owns no tensor
 * memory: a Batch exposes the batch's bytes in the agent's shared memory
 * through the buffer protocol, so numpy.frombuffer / torch.frombuffer views
 * copy nothing.
 *
 * DESIGN: a Batch is given back to the agent exactly once, when both (a)
 * its owner is done with it - batch.release() was called or the Batch
 * object died - and (b) no buffer export is alive. Every view (and every
 * slice of a view) keeps its exporter alive and counted, so the memory is
 * never reused under a live view: release() with views alive only marks
 * the batch, and the last view's release gives it back. The client is kept
 * alive by every Batch it produced.
 */
#include "_datahelix.h"

mod_state *dhpy_state_of(PyObject *obj)
{
    PyObject *m = PyType_GetModuleByDef(Py_TYPE(obj), &dhpy_module);
    return m ? PyModule_GetState(m) : NULL;
}

PyObject *dhpy_raise(mod_state *st, int code, const char *msg)
{
    if (!st)
        return NULL; /* the lookup set the error */
    PyObject *e = PyObject_CallFunction(st->make_error, "iss", code, dh_err_name(code),
                                        msg && msg[0] ? msg : dh_strerror(code));
    if (e) {
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
    }
    return NULL;
}

/* ----------------------------------------------------------------- Client */

/* The connect's waiting sentences, on the trainer's stderr (called without the GIL). */
static void say_waiting(void *user, const char *sentence)
{
    (void)user;
    fprintf(stderr, "datahelix: %s\n", sentence);
}

static int client_init(ClientObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"socket", "rank", "world_size", "global_batch", "manifest_hash",
                             "spec_hash", "timeout_ms", "resume_epoch", "resume_step",
                             "attach_timeout_ms", "resume_seed", "resume_global_batch",
                             "resume_shift", "resume_global_step", "stream", "resume_order",
                             NULL};
    const char *sock = NULL, *stream = NULL, *order = NULL;
    dh_client_opts o;
    dh_client_opts_default(&o);
    long long G = 0, epoch = -1, step = -1, rG = 0, shift = 0, gstep = -1;
    unsigned long long mh = 0, sh = 0;
    PyObject *seed = Py_None;
    if (self->c)
        return dhpy_raise(dhpy_state_of((PyObject *)self), DH_EINVAL, "this Client is initialised "
                        "already: make a new one"), -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "zii|LKKiLLiOLLLzz", kwlist, &sock, &o.rank,
                                     &o.world_size, &G, &mh, &sh, &o.timeout_ms, &epoch, &step,
                                     &o.attach_timeout_ms, &seed, &rG, &shift, &gstep,
                                     &stream, &order))
        return -1;
    if (order) { /* a saved state's order: checked by the agent */
        if (strcmp(order, "uniform") && strcmp(order, "stratified"))
            return dhpy_raise(dhpy_state_of((PyObject *)self), DH_EINVAL, "resume_order must "
                              "be \"uniform\" or \"stratified\""), -1;
        o.check_order = 1;
        o.resume_order = order[0] == 's' ? DH_ORDER_STRATIFIED : DH_ORDER_UNIFORM;
    }
    o.socket = sock;
    o.stream = stream;
    o.on_wait = say_waiting;
    o.global_batch = G;
    o.manifest_hash = mh;
    o.spec_hash = sh;
    o.resume_global_batch = rG;
    o.resume_shift = shift;
    o.resume_global_step = gstep;
    if (seed != Py_None) {
        o.check_seed = 1;
        o.resume_seed = PyLong_AsUnsignedLongLongMask(seed);
        if (PyErr_Occurred())
            return -1;
    }
    if (epoch >= 0 && step >= 0)
        o.resume = 1, o.epoch = epoch, o.step = step;
    char err[320] = "";
    int rc;
    dh_client *c = NULL;
    Py_BEGIN_ALLOW_THREADS rc = dh_client_connect(&o, &c, err, sizeof err);
    Py_END_ALLOW_THREADS if (rc)
    {
        dhpy_raise(dhpy_state_of((PyObject *)self), rc, err);
        return -1;
    }
    if (self->c) { /* another thread initialised it meanwhile */
        Py_BEGIN_ALLOW_THREADS dh_client_close(c);
        Py_END_ALLOW_THREADS
        return dhpy_raise(dhpy_state_of((PyObject *)self), DH_EINVAL, "this Client is initialised "
                        "already: make a new one"), -1;
    }
    self->c = c;
    return 0;
}

static PyObject *client_next(ClientObject *self, PyObject *args)
{
    int timeout_ms = -1;
    if (!PyArg_ParseTuple(args, "|i", &timeout_ms))
        return NULL;
    mod_state *st = dhpy_state_of((PyObject *)self);
    if (!st)
        return NULL;
    if (!self->c || self->closed)
        return dhpy_raise(st, DH_EINVAL, "the client is closed");
    BatchObject *b = PyObject_New(BatchObject, st->batch_type);
    if (!b)
        return NULL;
    b->client = NULL;
    b->exports = 0;
    b->want_release = b->released = 1; /* nothing to give back until we have a batch */
    char err[320] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = dh_client_next(self->c, timeout_ms, &b->b, err, sizeof err);
    Py_END_ALLOW_THREADS if (rc)
    {
        Py_DECREF(b);
        if (rc == DH_EEMPTY)
            Py_RETURN_NONE; /* the run's end */
        return dhpy_raise(st, rc, err);
    }
    Py_INCREF(self);
    b->client = self;
    b->want_release = b->released = 0;
    return (PyObject *)b;
}

static PyObject *client_report_step(ClientObject *self, PyObject *args)
{
    long long step;
    double seconds;
    if (!PyArg_ParseTuple(args, "Ld", &step, &seconds))
        return NULL;
    if (!self->c || self->closed)
        return dhpy_raise(dhpy_state_of((PyObject *)self), DH_EINVAL, "the client is closed");
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = dh_client_report_step(self->c, step, seconds);
    Py_END_ALLOW_THREADS if (rc == DH_EPEER) return dhpy_raise(
        dhpy_state_of((PyObject *)self), rc,
        "cannot report the step time: the agent died or closed the connection (see the "
        "agent's output)");
    return rc ? dhpy_raise(dhpy_state_of((PyObject *)self), rc, "cannot report the step time")
              : (Py_INCREF(Py_None), Py_None);
}

/* (epoch, epoch_step) of a global step of this run (dh_client_step_position). */
static PyObject *client_position(ClientObject *self, PyObject *args)
{
    long long step;
    if (!PyArg_ParseTuple(args, "L", &step))
        return NULL;
    int64_t epoch, epoch_step;
    if (!self->c || dh_client_step_position(self->c, step, &epoch, &epoch_step))
        return dhpy_raise(dhpy_state_of((PyObject *)self), DH_EINVAL, "not a step of this run");
    return Py_BuildValue("(LL)", (long long)epoch, (long long)epoch_step);
}

/* What the agent runs (dh_client_run) as a dict. */
/* The agent's order as a saved state says it. */
static const char *order_name(const dh_client *c)
{
    return dh_client_order(c) == DH_ORDER_STRATIFIED ? "stratified" : "uniform";
}

static PyObject *client_run(ClientObject *self, PyObject *unused)
{
    (void)unused;
    dh_client_run r;
    if (!self->c || dh_client_run_get(self->c, &r))
        return dhpy_raise(dhpy_state_of((PyObject *)self), DH_EINVAL, "the client is closed");
    return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:i,s:i,s:i,s:K,s:K,s:K,s:L,s:i,s:s}", "steps",
                         (long long)r.steps, "start_epoch", (long long)r.start_epoch,
                         "start_step", (long long)r.start_step, "steps_per_epoch",
                         (long long)r.steps_per_epoch, "global_batch", (long long)r.global_batch,
                         "world_size", r.world_size, "rank_lo", r.rank_lo, "rank_hi", r.rank_hi,
                         "manifest_hash", (unsigned long long)r.manifest_hash, "spec_hash",
                         (unsigned long long)r.spec_hash, "seed", (unsigned long long)r.seed,
                         "step_base", (long long)r.step_base, "max_leases",
                         dh_client_max_leases(self->c), "order", order_name(self->c));
}

static PyObject *client_state(ClientObject *self, PyObject *unused)
{
    (void)unused;
    dh_client_state st;
    if (!self->c || dh_client_state_get(self->c, &st))
        return dhpy_raise(dhpy_state_of((PyObject *)self), DH_EINVAL, "the client is closed");
    return Py_BuildValue("{s:K,s:K,s:K,s:i,s:L,s:L,s:L,s:L,s:L,s:s}", "manifest_hash",
                         (unsigned long long)st.manifest_hash, "spec_hash",
                         (unsigned long long)st.spec_hash, "seed", (unsigned long long)st.seed,
                         "world_size", st.world_size, "global_batch", (long long)st.global_batch,
                         "epoch", (long long)st.epoch, "step", (long long)st.step, "shift",
                         (long long)st.shift, "global_step", (long long)st.global_step, "order",
                         order_name(self->c));
}

static PyObject *client_close(ClientObject *self, PyObject *unused)
{
    (void)unused;
    /* Detach only: the pools stay mapped until the last Batch (and so every view) is gone. */
    self->closed = 1;
    Py_BEGIN_ALLOW_THREADS dh_client_detach(self->c);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *client_abort(ClientObject *self, PyObject *args)
{
    const char *why = NULL;
    if (!PyArg_ParseTuple(args, "|z", &why))
        return NULL;
    self->closed = 1;
    Py_BEGIN_ALLOW_THREADS dh_client_fail(self->c, why);
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static void client_dealloc(ClientObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    dh_client *c = self->c;
    self->c = NULL;
    Py_BEGIN_ALLOW_THREADS dh_client_close(c); /* its detach may wait on the socket */
    Py_END_ALLOW_THREADS
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef client_methods[] = {
    {"next", (PyCFunction)client_next, METH_VARARGS,
     "next(timeout_ms=-1) -> Batch, or None after the run's last step."},
    {"report_step", (PyCFunction)client_report_step, METH_VARARGS,
     "report_step(step, seconds): the compute time measured for a step."},
    {"state", (PyCFunction)client_state, METH_NOARGS, "Where a resumed run would continue."},
    {"position", (PyCFunction)client_position, METH_VARARGS,
     "position(step) -> (epoch, epoch_step) of a global step of this run."},
    {"run", (PyCFunction)client_run, METH_NOARGS,
     "What the agent runs: steps, start_epoch, start_step, steps_per_epoch, ..."},
    {"close", (PyCFunction)client_close, METH_NOARGS, "Detach from the agent."},
    {"abort", (PyCFunction)client_abort, METH_VARARGS,
     "abort(why=None): leave as a failed rank (the agent treats it as dead, not as "
     "finished), telling the agent why."},
    {NULL, NULL, 0, NULL}};

static PyType_Slot client_slots[] = {
    {Py_tp_dealloc, client_dealloc},
    {Py_tp_doc, "Client(socket, rank, world_size, ...): one rank attached to a datahelix agent. "
                "One thread at a time takes its batches (another's next() raises DH_EBUSY); "
                "batches may be released, and the client closed, from any thread."},
    {Py_tp_methods, client_methods},
    {Py_tp_init, client_init},
    {Py_tp_new, PyType_GenericNew},
    {0, NULL}};

static PyType_Spec client_spec = {"datahelix._datahelix.Client", sizeof(ClientObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, client_slots};

static PyObject *default_socket(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *job = NULL;
    if (!PyArg_ParseTuple(args, "|z", &job))
        return NULL;
    char name[128];
    if (dh_serve_default_socket(job, name, sizeof name))
        return dhpy_raise(PyModule_GetState(mod), DH_ERANGE, "job name too long");
    return PyUnicode_FromString(name);
}

/* error_name(code) -> "DH_EDECODE", ...: the name of a batch["status"] code or an error's. */
static PyObject *error_name(PyObject *mod, PyObject *args)
{
    (void)mod;
    int code = 0;
    if (!PyArg_ParseTuple(args, "i", &code))
        return NULL;
    return Py_BuildValue("(ss)", dh_err_name(code), dh_strerror(code));
}

/* error_code(name) -> the code of "DH_EPEER", ... (the C library's value). */
static PyObject *error_code(PyObject *mod, PyObject *args)
{
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
#define DH_ERR_NAMED(n, value, text)                                                              \
    if (!strcmp(name, "DH_" #n))                                                                   \
        return PyLong_FromLong(DH_##n);
    DH_ERRNO_MAP(DH_ERR_NAMED)
#undef DH_ERR_NAMED
    if (!strcmp(name, "DH_OK"))
        return PyLong_FromLong(0);
    return dhpy_raise(PyModule_GetState(mod), DH_EINVAL, "no such error name");
}

static PyMethodDef module_methods[] = {
    {"default_socket", default_socket, METH_VARARGS, "The agent's default socket for a job."},
    {"error_name", error_name, METH_VARARGS,
     "error_name(code) -> (name, sentence) of an error code (a batch[\"status\"] entry)."},
    {"error_code", error_code, METH_VARARGS,
     "error_code(name) -> the code of an error name (\"DH_EPEER\": e.code of a PeerLost)."},
    {NULL, NULL, 0, NULL}};

/* Fills the module: its types and what its state holds. 0 or -1 with an exception. */
static int module_exec(PyObject *m)
{
    mod_state *st = PyModule_GetState(m);
    static const char *const names[] = {"video", "image", "audio"};
    for (int k = 0; k < 3; k++)
        if (!(st->type_names[k] = PyUnicode_InternFromString(names[k])))
            return -1;
    PyObject *errors = PyImport_ImportModule("datahelix._errors");
    if (!errors)
        return -1;
    st->make_error = PyObject_GetAttrString(errors, "make");
    PyObject *base = PyObject_GetAttrString(errors, "DataHelixError");
    Py_DECREF(errors);
    if (!st->make_error || !base || PyModule_AddObject(m, "DataHelixError", base)) {
        Py_XDECREF(base);
        return -1;
    }
    st->client_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &client_spec, NULL);
    st->batch_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &dhpy_batch_spec, NULL);
    if (!st->client_type || !st->batch_type ||
        PyModule_AddType(m, st->client_type) || PyModule_AddType(m, st->batch_type))
        return -1;
    return 0;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    mod_state *st = PyModule_GetState(m);
    Py_VISIT(st->client_type);
    Py_VISIT(st->batch_type);
    Py_VISIT(st->make_error);
    return 0;
}

static int module_clear(PyObject *m)
{
    mod_state *st = PyModule_GetState(m);
    Py_CLEAR(st->client_type);
    Py_CLEAR(st->batch_type);
    Py_CLEAR(st->make_error);
    for (int k = 0; k < 3; k++)
        Py_CLEAR(st->type_names[k]);
    return 0;
}

static void module_free(void *m)
{
    module_clear(m);
}

static PyModuleDef_Slot module_slots[] = {{Py_mod_exec, module_exec}, {0, NULL}};

struct PyModuleDef dhpy_module = {PyModuleDef_HEAD_INIT, "_datahelix",
                                    "Binding of the datahelix C client.", sizeof(mod_state),
                                    module_methods, module_slots, module_traverse,
                                    module_clear, module_free};

PyMODINIT_FUNC PyInit__datahelix(void)
{
    return PyModuleDef_Init(&dhpy_module);
}
