/* The rows a replay writes to its Spill file (audit/replay.py ClosedTransaction.row), in C;
 * the Python method remains the reference.
 *
 * Rows(closed_class, path_record_class, path_record_fields, not_plain)(ts) -> the list of
 * t.row() for each t of the list ts. A t of exactly closed_class has its row made here from
 * its slots, its query and records (facts of exactly path_record_class) as the tuples of
 * their path_record_fields (PathRecord._INIT); any other t is asked for t.row(). A query or
 * record of another class raises not_plain(its class name), as row() does. Tested equal to
 * row() (tests/test_intake.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_pyhelp.h"

/* ClosedTransaction's slots read here, in the row's order (row() writes the query and the
 * records as values, the frames as bytes) */
static const char *const ROW_FIELDS[] = {"requester", "tid", "attribute_id", "answered",
                                         "completing_frame", "query", "status", "component_mask",
                                         "components", "first_frame", "request_count", "_frames",
                                         "records", "arrows", "_asks", "method"};
enum { W_QUERY = 5, W_FRAMES = 11, W_RECORDS = 12, W_N = 16 };
#define MAX_RECORD_FIELDS 64

typedef struct {
    PyObject_HEAD
    PyTypeObject *closed_class, *record_class;
    PyObject *not_plain;
    Py_ssize_t off[W_N], record_off[MAX_RECORD_FIELDS], n_record;
} Rows;

static PyObject *str_row;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static int init(Rows *self, PyObject *args, PyObject *kw)
{
    PyObject *cc, *rc, *fields, *not_plain;
    if (!PyArg_ParseTuple(args, "O!O!O!O", &PyType_Type, &cc, &PyType_Type, &rc,
                          &PyTuple_Type, &fields, &not_plain))
        return -1;
    Py_XSETREF(self->closed_class, (PyTypeObject *)Py_NewRef(cc));
    Py_XSETREF(self->record_class, (PyTypeObject *)Py_NewRef(rc));
    Py_XSETREF(self->not_plain, Py_NewRef(not_plain));
    if (slot_offsets(self->closed_class, ROW_FIELDS, W_N, self->off, "Rows") < 0)
        return -1;
    self->n_record = PyTuple_GET_SIZE(fields);
    if (self->n_record > MAX_RECORD_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "Rows: too many record fields");
        return -1;
    }
    const char *names[MAX_RECORD_FIELDS];
    for (Py_ssize_t i = 0; i < self->n_record; i++) {
        PyObject *name = PyTuple_GET_ITEM(fields, i);
        if (!PyUnicode_Check(name) || (names[i] = PyUnicode_AsUTF8(name)) == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "Rows: record fields are names");
            return -1;
        }
    }
    return slot_offsets(self->record_class, names, self->n_record, self->record_off, "Rows");
}

static void dealloc(Rows *self)
{
    Py_XDECREF(self->closed_class);
    Py_XDECREF(self->record_class);
    Py_XDECREF(self->not_plain);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* A PathRecord fact's values (row()'s _pr_values), or NULL with not_plain raised where rec
 * is of another class. */
static PyObject *values(Rows *self, PyObject *rec)
{
    if (Py_TYPE(rec) != self->record_class) {
        PyObject *name = PyType_GetName(Py_TYPE(rec));  /* (NotPlain(type(r).__name__)) */
        if (name != NULL) {
            PyErr_SetObject(self->not_plain, name);
            Py_DECREF(name);
        }
        return NULL;
    }
    PyObject *out = PyTuple_New(self->n_record);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < self->n_record; i++) {
        PyObject *v = SLOT(rec, self->record_off[i]);
        if (v == NULL) {  /* (a fact has every slot filled: as attrgetter would) */
            Py_DECREF(out);
            PyErr_SetString(PyExc_AttributeError, "a PathRecord fact without a field");
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, Py_NewRef(v));
    }
    return out;
}

/* ClosedTransaction.row() of t, an instance of exactly closed_class. */
static PyObject *row(Rows *self, PyObject *t)
{
    PyObject *out = PyTuple_New(W_N), *v;
    if (out == NULL)
        return NULL;
    for (int i = 0; i < W_N; i++) {
        if ((v = SLOT(t, self->off[i])) == NULL) {
            PyErr_Format(PyExc_AttributeError, "ClosedTransaction without %s", ROW_FIELDS[i]);
            goto fail;
        }
        if (i == W_QUERY) {
            v = v == Py_None ? Py_NewRef(v) : values(self, v);
        } else if (i == W_FRAMES) {
            Py_buffer view;
            if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0)
                goto fail;
            v = PyBytes_FromStringAndSize(view.buf, view.len);  /* (array.tobytes) */
            PyBuffer_Release(&view);
        } else if (i == W_RECORDS) {
            PyObject *recs = PySequence_Fast(v, "records");
            if (recs == NULL)
                goto fail;
            Py_ssize_t n = PySequence_Fast_GET_SIZE(recs);
            v = PyTuple_New(n);
            for (Py_ssize_t k = 0; v != NULL && k < n; k++) {
                PyObject *w = values(self, PySequence_Fast_GET_ITEM(recs, k));
                if (w == NULL)
                    Py_CLEAR(v);
                else
                    PyTuple_SET_ITEM(v, k, w);
            }
            Py_DECREF(recs);
        } else {
            Py_INCREF(v);
        }
        if (v == NULL)
            goto fail;
        PyTuple_SET_ITEM(out, i, v);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* t.row(), made here where t is of exactly closed_class. */
static PyObject *row_of(PyObject *self, PyObject *t)
{
    Rows *r = (Rows *)self;
    return Py_TYPE(t) == r->closed_class ? row(r, t) : PyObject_CallMethodNoArgs(t, str_row);
}

/* rows(ts): [t.row() for t in ts] (see the file's comment). */
/* bench/native_twins.py, capture 3 native IB 200k, spill rows: 0.180 -> 0.076 s (-58 %) */
static PyObject *call(Rows *self, PyObject *args, PyObject *kw)
{
    PyObject *ts;
    if (!PyArg_ParseTuple(args, "O:Rows", &ts))
        return NULL;
    return map_list(ts, "Rows(ts): a sequence of transactions", row_of, (PyObject *)self);
}

static PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ibpath_scapy.native._scan.Rows",
    .tp_doc = "Rows(closed_class, path_record_class, path_record_fields, not_plain)(ts): "
              "[t.row() for t in ts], ClosedTransaction.row in C (audit/replay.py).",
    .tp_basicsize = sizeof(Rows),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)init,
    .tp_dealloc = (destructor)dealloc,
    .tp_call = (ternaryfunc)call,
};

int add_rows(PyObject *module)
{
    if ((str_row = PyUnicode_InternFromString("row")) == NULL)
        return -1;
    return add_type(module, &RowsType, "Rows");
}
