/*
 * _datahelix.h - what the files of the CPython extension share (_datahelix.c:
 * the module and Client; _batch.c: Batch).
 */
#ifndef DH_PY_DATAHELIX_H
#define DH_PY_DATAHELIX_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "datahelix.h"

/* The module's state (multi-phase init: each interpreter has its own). */
typedef struct {
    PyTypeObject *client_type, *batch_type;
    PyObject *make_error; /* datahelix._errors.make(code, name, message) */
    PyObject *type_names[3]; /* interned "video", "image", "audio" */
} mod_state;

typedef struct {
    PyObject_HEAD
    dh_client *c;
    int closed; /* detached: no more batches, the mappings stay for live views */
} ClientObject;

typedef struct {
    PyObject_HEAD
    ClientObject *client;
    dh_batch b;
    Py_ssize_t exports;
    int want_release, released;
} BatchObject;

extern struct PyModuleDef dhpy_module;
extern PyType_Spec dhpy_batch_spec;

/* The state of the module that defined obj's type (a subclass's too). */
mod_state *dhpy_state_of(PyObject *obj);
/* Raises the DataHelixError (or its subclass) of code with a sentence; NULL. */
PyObject *dhpy_raise(mod_state *st, int code, const char *msg);

#endif
