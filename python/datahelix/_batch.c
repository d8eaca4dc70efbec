/*
 * _batch.c - the Batch type of the CPython extension (_datahelix.h): a batch
 * in the agent's shared memory, exposed through the buffer protocol.
 *
 * DESIGN: a Batch is given back to the agent exactly once, when both (a)
 * its owner is done with it - batch.release() was called or the Batch
 * object died - and (b) no buffer export is alive. Every view (and every
 * slice of a view) keeps its exporter alive and counted, so the memory is
 * never reused under a live view.
 */
#include "_datahelix.h"

/* Gives the batch back once its owner is done and no view is alive. */
static void maybe_give_back(BatchObject *self)
{
    if (self->released || !self->want_release || self->exports > 0 || !self->client ||
        !self->client->c)
        return;
    self->released = 1; /* from here no view can be made: the GIL may go */
    dh_client *c = self->client->c;
    Py_BEGIN_ALLOW_THREADS dh_client_release(c, &self->b);
    Py_END_ALLOW_THREADS
}

static int batch_getbuffer(BatchObject *self, Py_buffer *view, int flags)
{
    if (self->released) {
        PyErr_SetString(PyExc_ValueError, "this batch was released: its memory is not ours");
        return -1;
    }
    void *data = (void *)self->b.data;
    static char empty;
    /* read-only: the agent maps the pool for this process read-only (a write would be a
     * SIGSEGV; asking for a writable buffer is a BufferError instead) */
    if (PyBuffer_FillInfo(view, (PyObject *)self, data ? data : &empty, self->b.bytes, 1, flags))
        return -1;
    self->exports++;
    return 0;
}

static void batch_releasebuffer(BatchObject *self, Py_buffer *view)
{
    (void)view;
    self->exports--;
    maybe_give_back(self);
}

static void batch_dealloc(BatchObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    self->want_release = 1; /* no view can be alive: each holds a reference */
    maybe_give_back(self);
    Py_XDECREF(self->client);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp); /* a heap type: its instances hold it */
}

static PyObject *batch_release(BatchObject *self, PyObject *unused)
{
    (void)unused;
    self->want_release = 1;
    maybe_give_back(self);
    return PyBool_FromLong(self->released);
}

static PyObject *item_dict(const dh_batch_item *it)
{
    PyObject *shape = PyTuple_New(it->ndim);
    for (int d = 0; shape && d < it->ndim; d++)
        PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(it->shape[d]));
    if (!shape)
        return NULL;
    static const char *const types[] = {"video", "image", "audio"};
    return Py_BuildValue("{s:L,s:i,s:s,s:N,s:s,s:L,s:L,s:i}", "sample", (long long)it->sample,
                         "media", it->media,
                         "type", it->type >= 0 && it->type < 3 ? types[it->type] : "?",
                         "shape", shape, "dtype", it->elem_bytes == 4 ? "float32" : "uint8",
                         "offset", (long long)it->offset, "bytes", (long long)it->bytes,
                         "status", it->status);
}

/* The batch's sample indices, ids and token counts into three lists of nsamples. */
static int fill_samples(BatchObject *self, PyObject *samples, PyObject *ids, PyObject *tokens)
{
    const dh_batch *b = &self->b;
    for (int32_t k = 0; k < b->nsamples; k++) {
        const char *id = dh_client_sample_id(self->client->c, b, k);
        PyObject *s = PyLong_FromLongLong(b->samples[k]), *t = PyLong_FromLongLong(b->tokens[k]);
        PyObject *i = PyUnicode_DecodeUTF8(id ? id : "", id ? (Py_ssize_t)strlen(id) : 0,
                                           "replace");
        if (!s || !t || !i) {
            Py_XDECREF(s);
            Py_XDECREF(t);
            Py_XDECREF(i);
            return -1;
        }
        PyList_SET_ITEM(samples, k, s);
        PyList_SET_ITEM(tokens, k, t);
        PyList_SET_ITEM(ids, k, i);
    }
    return 0;
}

/* A str of UTF-8 bytes, or None for NULL; a new reference (NULL on error). */
static PyObject *str_or_none(const char *t)
{
    if (!t)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(t, (Py_ssize_t)strlen(t), "strict");
}

/* (texts, labels, metas): per sample its text (str, or None), label (int, or None) and
 * meta object as JSON text (str, or None). */
static PyObject *batch_texts(BatchObject *self, PyObject *unused)
{
    (void)unused;
    const dh_batch *b = &self->b;
    PyObject *texts = PyList_New(b->nsamples), *labels = PyList_New(b->nsamples);
    PyObject *metas = PyList_New(b->nsamples);
    if (!texts || !labels || !metas)
        goto fail;
    for (int32_t k = 0; k < b->nsamples; k++) {
        int64_t label = 0;
        int has = dh_client_sample_label(self->client->c, b, k, &label) == 1;
        PyObject *tv = str_or_none(dh_client_sample_text(self->client->c, b, k));
        PyObject *mv = str_or_none(dh_client_sample_meta(self->client->c, b, k));
        PyObject *lv = has ? PyLong_FromLongLong(label) : (Py_INCREF(Py_None), Py_None);
        if (!tv || !lv || !mv) {
            Py_XDECREF(tv);
            Py_XDECREF(lv);
            Py_XDECREF(mv);
            goto fail;
        }
        PyList_SET_ITEM(texts, k, tv);
        PyList_SET_ITEM(labels, k, lv);
        PyList_SET_ITEM(metas, k, mv);
    }
    return Py_BuildValue("(NNN)", texts, labels, metas);
fail:
    Py_XDECREF(texts);
    Py_XDECREF(labels);
    Py_XDECREF(metas);
    return NULL;
}

/* The batch's layout in the cheapest form to turn into views (the Loader's hot path):
 * (step, items, samples, ids, tokens, status, emulated_compute_s, pad); items are
 * (type, offset, bytes, is_float32, shape) tuples; status is per sample (0 or the
 * negative code of its first failed item). describe() is the readable form. */
static PyObject *batch_layout(BatchObject *self, PyObject *unused)
{
    (void)unused;
    const dh_batch *b = &self->b;
    PyObject *items = PyTuple_New(b->nitems), *samples = PyList_New(b->nsamples);
    PyObject *ids = PyList_New(b->nsamples), *tokens = PyList_New(b->nsamples);
    PyObject *status = PyList_New(b->nsamples), *pad = PyList_New(b->nsamples);
    int32_t *st = NULL;
    mod_state *ms = dhpy_state_of((PyObject *)self);
    if (!ms || !items || !samples || !ids || !tokens || !status || !pad)
        goto fail;
    if (fill_samples(self, samples, ids, tokens))
        goto fail;
    st = PyMem_Calloc((size_t)b->nsamples + 1, sizeof *st);
    if (!st)
        goto fail;
    for (int32_t k = 0, j = 0; k < b->nitems; k++) {
        const dh_batch_item *it = &b->items[k];
        PyObject *shape = PyTuple_New(it->ndim);
        for (int d = 0; shape && d < it->ndim; d++)
            PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(it->shape[d]));
        PyObject *type = it->type >= 0 && it->type < 3 ? ms->type_names[it->type] : Py_None;
        /* Items are grouped by sample in the batch's sample order: follow with a cursor
         * (a manifest sample can occur twice in a small dataset's batch). */
        while (j < b->nsamples && b->samples[j] != it->sample)
            j++;
        if (j == b->nsamples)
            for (j = 0; j < b->nsamples && b->samples[j] != it->sample; j++)
                ;
        PyObject *t = shape ? Py_BuildValue("(OLLiNi)", type, (long long)it->offset,
                                            (long long)it->bytes, it->elem_bytes == 4, shape, j)
                            : NULL;
        if (!t)
            goto fail;
        PyTuple_SET_ITEM(items, k, t);
        if (it->status && j < b->nsamples && !st[j])
            st[j] = it->status;
    }
    for (int32_t k = 0; k < b->nsamples; k++) {
        PyObject *v = PyLong_FromLong(st[k]);
        if (!v)
            goto fail;
        PyList_SET_ITEM(status, k, v);
        PyObject *p = PyBool_FromLong(dh_client_sample_pad(self->client->c, b, k) == 1);
        PyList_SET_ITEM(pad, k, p);
    }
    PyMem_Free(st);
    return Py_BuildValue("(LNNNNNdN)", (long long)b->step, items, samples, ids, tokens, status,
                         dh_client_emulated_seconds(self->client->c, b), pad);
fail:
    Py_XDECREF(pad);
    PyMem_Free(st);
    Py_XDECREF(items);
    Py_XDECREF(samples);
    Py_XDECREF(ids);
    Py_XDECREF(tokens);
    Py_XDECREF(status);
    return NULL;
}

/* What random augmentation drew for each item: (first_frame, frame_span, start_s, span_s,
 * (crop_x, crop_y, crop_w, crop_h), flip) tuples, in the items' order. */
static PyObject *batch_draws(BatchObject *self, PyObject *unused)
{
    (void)unused;
    const dh_batch *b = &self->b;
    if (self->released) {
        PyErr_SetString(PyExc_ValueError, "this batch was released: its draws went with it");
        return NULL;
    }
    PyObject *out = PyTuple_New(b->nitems);
    for (int32_t k = 0; out && k < b->nitems; k++) {
        const dh_media_draw *d = &b->draws[k];
        PyObject *t = Py_BuildValue("(LLdd(iiii)O)", (long long)d->first_frame,
                                    (long long)d->frame_span, d->start_s, d->span_s, d->crop_x,
                                    d->crop_y, d->crop_w, d->crop_h,
                                    d->flip ? Py_True : Py_False);
        if (!t)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, k, t);
    }
    return out;
}

/* The batch's description: items, sample indices, ids, tokens, statuses. */
static PyObject *batch_describe(BatchObject *self, PyObject *unused)
{
    (void)unused;
    const dh_batch *b = &self->b;
    PyObject *items = PyList_New(b->nitems), *samples = PyList_New(b->nsamples);
    PyObject *ids = PyList_New(b->nsamples), *tokens = PyList_New(b->nsamples);
    if (!items || !samples || !ids || !tokens)
        goto fail;
    for (int32_t k = 0; k < b->nitems; k++) {
        PyObject *d = item_dict(&b->items[k]);
        if (!d)
            goto fail;
        PyList_SET_ITEM(items, k, d);
    }
    if (fill_samples(self, samples, ids, tokens))
        goto fail;
    return Py_BuildValue("{s:L,s:i,s:N,s:N,s:N,s:N,s:i,s:L,s:d}", "step", (long long)b->step,
                         "rank", b->rank, "items", items, "samples", samples, "ids", ids,
                         "tokens", tokens, "nfailed", b->nfailed, "bytes", (long long)b->bytes,
                         "emulated_compute_s",
                         dh_client_emulated_seconds(self->client->c, b));
fail:
    Py_XDECREF(items);
    Py_XDECREF(samples);
    Py_XDECREF(ids);
    Py_XDECREF(tokens);
    return NULL;
}

static PyObject *batch_address(BatchObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromVoidPtr((void *)self->b.data);
}

static PyObject *batch_get_step(BatchObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(self->b.step);
}

static PyObject *batch_get_released(BatchObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->released);
}

static PyMethodDef batch_methods[] = {
    {"release", (PyCFunction)batch_release, METH_NOARGS,
     "Give the batch back (deferred while a view of it is alive). Returns True if given back."},
    {"describe", (PyCFunction)batch_describe, METH_NOARGS, "Items, samples, ids, tokens."},
    {"texts", (PyCFunction)batch_texts, METH_NOARGS,
     "(texts, labels, metas): each sample's text (str or None), label (int or None) "
     "and meta object as JSON text (str or None)."},
    {"layout", (PyCFunction)batch_layout, METH_NOARGS,
     "(step, items, samples, ids, tokens, status, emulated_compute_s, pad): the fast form."},
    {"address", (PyCFunction)batch_address, METH_NOARGS, "Address of the batch's first byte."},
    {"draws", (PyCFunction)batch_draws, METH_NOARGS,
     "Per item, what random augmentation drew: (first_frame, frame_span, start_s, span_s, "
     "(crop_x, crop_y, crop_w, crop_h), flip)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef batch_getset[] = {
    {"step", (getter)batch_get_step, NULL, "the global step", NULL},
    {"released", (getter)batch_get_released, NULL, "given back to the agent", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot batch_slots[] = {
    {Py_tp_dealloc, batch_dealloc},
    {Py_bf_getbuffer, batch_getbuffer},
    {Py_bf_releasebuffer, batch_releasebuffer},
    {Py_tp_doc, "One batch, viewing the agent's shared memory (buffer protocol)."},
    {Py_tp_methods, batch_methods},
    {Py_tp_getset, batch_getset},
    {0, NULL}};

PyType_Spec dhpy_batch_spec = {"datahelix._datahelix.Batch", sizeof(BatchObject), 0,
                                 Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                                 batch_slots};
