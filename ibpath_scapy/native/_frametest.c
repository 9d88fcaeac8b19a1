/* The audit's frame-finding test over a batch of records (audit/engine.py
 * _frame_finding_test), in C; the Python test remains the reference.
 *
 * FrameTest(frame_class, sa_kind, header_reads, record_reads, guard_kinds, guard_keys,
 * has_finding, packet_rule_hits)(records) -> [bool(has_finding(rec)) for rec in records].
 * A record of exactly frame_class whose kind is not in guard_kinds and whose guard_keys are
 * all None can only have a finding of a packet rule: for one of sa_kind, the packet rules'
 * verdict is looked up by the values their conditions read (header_reads: (view, field)
 * pairs, a field "__class__" the view's class; record_reads: the fields of each of its
 * path_records), as rules/frame.py's memo does, and asked of packet_rule_hits once per
 * distinct values; any other kind has none. Every other record is asked of has_finding.
 * Tested equal to has_finding (tests/test_intake.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_pyhelp.h"

enum { MEMO_MAX = 4096 };

typedef struct {
    PyObject_HEAD
    PyTypeObject *frame_class;
    PyObject *sa_kind, *views, *fields, *record_reads, *guard_kinds, *guard_keys;
    PyObject *has_finding, *hits, *memo;
    /* the reads of a record, by slot (_pyhelp.h): its kind, path_records and guard keys;
     * each header read's view of it and field of that; each field of its path records */
    /* bench/native_twins.py frame-finding test (capture 3 native IB 200k): 0.091 -> 0.051 s */
    SlotReader *rd_kind, *rd_recs, *rd_guard, *rd_view, *rd_field, *rd_record;
    Py_ssize_t n_guard, n_reads, n_record;
} FrameTest;

static PyObject *str_kind, *str_path_records, *str_class;

static void readers_free(FrameTest *self)
{
    slot_readers_free(self->rd_kind, 1);
    slot_readers_free(self->rd_recs, 1);
    slot_readers_free(self->rd_guard, self->n_guard);
    slot_readers_free(self->rd_view, self->n_reads);
    slot_readers_free(self->rd_field, self->n_reads);
    slot_readers_free(self->rd_record, self->n_record);
    self->rd_kind = self->rd_recs = self->rd_guard = NULL;
    self->rd_view = self->rd_field = self->rd_record = NULL;
}

static int init(FrameTest *self, PyObject *args, PyObject *kw)
{
    PyObject *fc, *kind, *header_reads, *record_reads, *guard_kinds, *guard_keys, *hf, *hits;
    if (!PyArg_ParseTuple(args, "O!UO!O!O!O!OO", &PyType_Type, &fc, &kind, &PyTuple_Type,
                          &header_reads, &PyTuple_Type, &record_reads, &PyFrozenSet_Type,
                          &guard_kinds, &PyTuple_Type, &guard_keys, &hf, &hits))
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(header_reads);
    PyObject *views = PyTuple_New(n), *fields = PyTuple_New(n);
    if (views == NULL || fields == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(header_reads, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2
                || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 0))
                || !PyUnicode_Check(PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "FrameTest: header reads are (view, field) names");
            goto fail;
        }
        PyObject *field = PyTuple_GET_ITEM(pair, 1);
        PyTuple_SET_ITEM(views, i, Py_NewRef(PyTuple_GET_ITEM(pair, 0)));
        /* (None: the view's class, read without a lookup) */
        PyTuple_SET_ITEM(fields, i,
                         Py_NewRef(PyUnicode_Compare(field, str_class) ? field : Py_None));
    }
    Py_XSETREF(self->frame_class, (PyTypeObject *)Py_NewRef(fc));
    Py_XSETREF(self->sa_kind, Py_NewRef(kind));
    Py_XSETREF(self->views, views);
    Py_XSETREF(self->fields, fields);
    Py_XSETREF(self->record_reads, Py_NewRef(record_reads));
    Py_XSETREF(self->guard_kinds, Py_NewRef(guard_kinds));
    Py_XSETREF(self->guard_keys, Py_NewRef(guard_keys));
    Py_XSETREF(self->has_finding, Py_NewRef(hf));
    Py_XSETREF(self->hits, Py_NewRef(hits));
    Py_XSETREF(self->memo, PyDict_New());
    if (self->memo == NULL)
        return -1;
    readers_free(self);
    PyObject *names = PyTuple_Pack(2, str_kind, str_path_records);
    if (names == NULL)
        return -1;
    self->n_guard = PyTuple_GET_SIZE(guard_keys);
    self->n_reads = n;
    self->n_record = PyTuple_GET_SIZE(record_reads);
    int ok = (self->rd_kind = slot_readers(names, 0, 1)) != NULL
             && (self->rd_recs = slot_readers(names, 1, 1)) != NULL
             && (self->rd_guard = slot_readers(guard_keys, 0, self->n_guard)) != NULL
             && (self->rd_view = slot_readers(self->views, 0, n)) != NULL
             && (self->rd_field = slot_readers(self->fields, 0, n)) != NULL
             && (self->rd_record = slot_readers(record_reads, 0, self->n_record)) != NULL;
    Py_DECREF(names);
    return ok ? 0 : -1;
fail:
    Py_XDECREF(views);
    Py_XDECREF(fields);
    return -1;
}

static void dealloc(FrameTest *self)
{
    readers_free(self);
    Py_XDECREF(self->frame_class);
    Py_XDECREF(self->sa_kind);
    Py_XDECREF(self->views);
    Py_XDECREF(self->fields);
    Py_XDECREF(self->record_reads);
    Py_XDECREF(self->guard_kinds);
    Py_XDECREF(self->guard_keys);
    Py_XDECREF(self->has_finding);
    Py_XDECREF(self->hits);
    Py_XDECREF(self->memo);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* bool(f(rec)): 1, 0, or -1 with the error set. */
static int ask(PyObject *f, PyObject *rec)
{
    PyObject *r = PyObject_CallOneArg(f, rec);
    if (r == NULL)
        return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

/* The values the packet rules' conditions read of rec (a new tuple), NULL with no error set
 * where a view is missing where a field is read (rules/frame.py keys such a record
 * otherwise: it is asked of packet_rule_hits unmemoised), or NULL with the error set. */
static PyObject *key_of(FrameTest *self, PyObject *rec)
{
    Py_ssize_t n = self->n_reads, nr = self->n_record;
    PyObject *recs = slot_read(self->rd_recs, rec), *seq = NULL, *key = NULL;
    if (recs == NULL)
        return NULL;
    Py_ssize_t m = 0;
    if (recs != Py_None) {
        if ((seq = PySequence_Fast(recs, "path_records")) == NULL)
            goto out;
        m = PySequence_Fast_GET_SIZE(seq);
    }
    if ((key = PyTuple_New(n + m * nr + 1)) == NULL)
        goto out;
    PyObject *v_count;
    PyObject *view = NULL, *view_name = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(self->views, i);
        PyObject *field = PyTuple_GET_ITEM(self->fields, i);
        if (name != view_name) {  /* (the reads come grouped by view) */
            Py_XDECREF(view);
            if ((view = slot_read(&self->rd_view[i], rec)) == NULL)
                goto missing;
            view_name = name;
        }
        PyObject *v = field == Py_None ? Py_NewRef((PyObject *)Py_TYPE(view))  /* __class__ */
                                       : slot_read(&self->rd_field[i], view);
        if (v == NULL) {
            Py_DECREF(view);
            goto missing;
        }
        PyTuple_SET_ITEM(key, i, v);
    }
    Py_XDECREF(view);
    for (Py_ssize_t k = 0; k < m; k++)
        for (Py_ssize_t j = 0; j < nr; j++) {
            PyObject *v = slot_read(&self->rd_record[j], PySequence_Fast_GET_ITEM(seq, k));
            if (v == NULL)
                goto missing;
            PyTuple_SET_ITEM(key, n + k * nr + j, v);
        }
    /* (and how many records: a condition on a record that reads none of its fields) */
    if ((v_count = PyLong_FromSsize_t(m)) == NULL)
        goto missing;
    PyTuple_SET_ITEM(key, n + m * nr, v_count);
    goto out;
missing:
    if (PyErr_ExceptionMatches(PyExc_AttributeError))
        PyErr_Clear();
    Py_CLEAR(key);
out:
    Py_XDECREF(seq);
    Py_DECREF(recs);
    return key;
}

/* Whether rec can have a frame finding: 1, 0, or -1 with the error set. */
static int test(FrameTest *self, PyObject *rec)
{
    if (Py_TYPE(rec) != self->frame_class)
        return ask(self->has_finding, rec);
    PyObject *kind = slot_read(self->rd_kind, rec);
    if (kind == NULL)
        return -1;
    int guarded = PySet_Contains(self->guard_kinds, kind);
    for (Py_ssize_t i = 0; guarded == 0 && i < self->n_guard; i++) {
        PyObject *v = slot_read(&self->rd_guard[i], rec);
        guarded = v == NULL ? -1 : v != Py_None;
        Py_XDECREF(v);
    }
    int sa = guarded ? 0 : PyObject_RichCompareBool(kind, self->sa_kind, Py_EQ);
    Py_DECREF(kind);
    if (guarded < 0 || sa < 0)
        return -1;
    if (guarded)
        return ask(self->has_finding, rec);
    if (!sa)
        return 0;  /* (packet_rule_hits holds of SA frames only) */
    PyObject *key = key_of(self, rec);
    if (key == NULL)
        return PyErr_Occurred() ? -1 : ask(self->hits, rec);
    PyObject *known = PyDict_GetItemWithError(self->memo, key);
    int r;
    if (known != NULL) {
        r = known == Py_True;
    } else if (PyErr_Occurred() || (r = ask(self->hits, rec)) < 0) {
        r = -1;
    } else {
        if (PyDict_GET_SIZE(self->memo) >= MEMO_MAX)
            PyDict_Clear(self->memo);
        if (PyDict_SetItem(self->memo, key, r ? Py_True : Py_False) < 0)
            r = -1;
    }
    Py_DECREF(key);
    return r;
}

/* bool(has_finding(rec)), or NULL with the error set. */
static PyObject *verdict(PyObject *self, PyObject *rec)
{
    int r = test((FrameTest *)self, rec);
    return r < 0 ? NULL : Py_NewRef(r ? Py_True : Py_False);
}

/* FrameTest(...)(records) (see the file's comment). */
/* bench/native_twins.py, capture 3 native IB 200k, frame-finding test: 0.268 -> 0.075 s (-72 %) */
static PyObject *call(FrameTest *self, PyObject *args, PyObject *kw)
{
    PyObject *records;
    if (!PyArg_ParseTuple(args, "O:FrameTest", &records))
        return NULL;
    return map_list(records, "FrameTest(records): a sequence of records", verdict,
                    (PyObject *)self);
}

static PyTypeObject FrameTestType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ibpath_scapy.native._scan.FrameTest",
    .tp_doc = "FrameTest(frame_class, sa_kind, header_reads, record_reads, guard_kinds, "
              "guard_keys, has_finding, packet_rule_hits)(records): the frame-finding test "
              "of each record, in C (audit/engine.py).",
    .tp_basicsize = sizeof(FrameTest),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)init,
    .tp_dealloc = (destructor)dealloc,
    .tp_call = (ternaryfunc)call,
};

int add_frame_test(PyObject *module)
{
    if ((str_kind = PyUnicode_InternFromString("kind")) == NULL
            || (str_path_records = PyUnicode_InternFromString("path_records")) == NULL
            || (str_class = PyUnicode_InternFromString("__class__")) == NULL)
        return -1;
    return add_type(module, &FrameTestType, "FrameTest");
}
