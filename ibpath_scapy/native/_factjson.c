/* The JSON text of a layer fact (facts/records.py _layer_json: json.dumps of its plain()
 * dict), written in C from its slots; the Python remains the reference.
 *
 * FactJson(cls, fields, keys, nullable, text_field, python)(fact) -> str. fields: the slots
 * shown, in order; keys: each one's JSON text before its value (`"name": `, made by the
 * Python's encoder); nullable: whether a None is shown (null) or left out. The text is
 * json.dumps's with its default separators and ensure_ascii: ints, bools, None, floats (as
 * float.__repr__, NaN and Infinity as json writes them), strs, and lists and tuples of those.
 * It is kept in the fact's text_field slot (a flyweight fact is shown by many records) and
 * given from there once made. python(fact) makes the text where fact is not exactly of cls
 * or holds a value of another type (an int subclass, a nested fact, ...).
 * Tested equal to dumps(plain()) (tests/test_records.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_buf.h"
#include "_pyhelp.h"

#define MAX_FIELDS 128
#define MAX_DEPTH 8   /* lists in lists a value may have (a layer fact's have none) */
enum { UNWRITTEN = -2 }; /* a value of a type written here by nothing: no error set */

typedef struct {
    PyObject_HEAD
    PyTypeObject *cls;
    PyObject *python;
    Py_ssize_t n, off[MAX_FIELDS], text_off;
    PyObject *keys[MAX_FIELDS];  /* bytes: the ASCII text before each value */
    char nullable[MAX_FIELDS];
    Buf out;  /* kept between calls */
} FactJson;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* a str as json's encode_basestring_ascii writes it (Modules/_json.c ascii_escape_unichar) */
static int add_str(Buf *t, PyObject *s)
{
    static const char hex[] = "0123456789abcdef";
    Py_ssize_t len = PyUnicode_GET_LENGTH(s);
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    if (buf_room(t, 2 + len) < 0)  /* (the common case: nothing escaped) */
        return -1;
    t->p[t->n++] = '"';
    for (Py_ssize_t i = 0; i < len; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= ' ' && c <= '~' && c != '\\' && c != '"') {
            if (buf_room(t, 2) < 0)
                return -1;
            t->p[t->n++] = (char)c;
            continue;
        }
        char esc[12];
        int k = 0;
        esc[k++] = '\\';
        switch (c) {
        case '\\': esc[k++] = '\\'; break;
        case '"': esc[k++] = '"'; break;
        case '\b': esc[k++] = 'b'; break;
        case '\f': esc[k++] = 'f'; break;
        case '\n': esc[k++] = 'n'; break;
        case '\r': esc[k++] = 'r'; break;
        case '\t': esc[k++] = 't'; break;
        default:
            if (c >= 0x10000) {  /* a surrogate pair */
                Py_UCS4 v = c - 0x10000, hi = 0xd800 | ((v >> 10) & 0x3ff);
                esc[k++] = 'u';
                esc[k++] = hex[(hi >> 12) & 0xf];
                esc[k++] = hex[(hi >> 8) & 0xf];
                esc[k++] = hex[(hi >> 4) & 0xf];
                esc[k++] = hex[hi & 0xf];
                esc[k++] = '\\';
                c = 0xdc00 | (v & 0x3ff);
            }
            esc[k++] = 'u';
            esc[k++] = hex[(c >> 12) & 0xf];
            esc[k++] = hex[(c >> 8) & 0xf];
            esc[k++] = hex[(c >> 4) & 0xf];
            esc[k++] = hex[c & 0xf];
        }
        if (buf_add(t, esc, k) < 0)
            return -1;
    }
    if (buf_room(t, 1) < 0)
        return -1;
    t->p[t->n++] = '"';
    return 0;
}

/* an integer's decimal digits, after a '-' where neg */
static int add_digits(Buf *t, unsigned long long u, int neg)
{
    char buf[24];
    int k = sizeof buf;
    do {
        buf[--k] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (neg)
        buf[--k] = '-';
    return buf_add(t, buf + k, (Py_ssize_t)sizeof buf - k);
}

static int add_value(Buf *t, PyObject *v, int depth)
{
    if (v == Py_None)
        return buf_add(t, "null", 4);
    if (v == Py_True)
        return buf_add(t, "true", 4);
    if (v == Py_False)
        return buf_add(t, "false", 5);
    PyTypeObject *type = Py_TYPE(v);
    if (type == &PyLong_Type) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (overflow == 0)  /* (-x as unsigned: -2**63 too) */
            return add_digits(t, x < 0 ? 0 - (unsigned long long)x : (unsigned long long)x, x < 0);
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (!(u == (unsigned long long)-1 && PyErr_Occurred()))
                return add_digits(t, u, 0);
            if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                return -1;
            PyErr_Clear();
        }
        return UNWRITTEN;  /* (past 64 bits: the Python's int.__repr__) */
    }
    if (type == &PyUnicode_Type)
        return add_str(t, v);
    if (type == &PyFloat_Type) {
        double d = PyFloat_AS_DOUBLE(v);
        if (Py_IS_NAN(d))
            return buf_add(t, "NaN", 3);
        if (Py_IS_INFINITY(d))
            return d > 0 ? buf_add(t, "Infinity", 8) : buf_add(t, "-Infinity", 9);
        char *s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);  /* (float_repr) */
        if (s == NULL)
            return -1;
        int r = buf_add(t, s, (Py_ssize_t)strlen(s));
        PyMem_Free(s);
        return r;
    }
    if ((type == &PyList_Type || type == &PyTuple_Type) && depth < MAX_DEPTH) {
        /* (nothing here runs Python code that could change a list while it is read) */
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        if (buf_add(t, "[", 1) < 0)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            int r = i ? buf_add(t, ", ", 2) : 0;
            if (r == 0)
                r = add_value(t, PySequence_Fast_GET_ITEM(v, i), depth + 1);
            if (r < 0)
                return r;
        }
        return buf_add(t, "]", 1);
    }
    return UNWRITTEN;
}

/* fact's text (see the file's comment) */
/* bench/suite.py capture 3 native IB 200k, ibpath decode json: 4.69 -> 2.82 s (-40 %) */
static PyObject *call(FactJson *self, PyObject *args, PyObject *kw)
{
    PyObject *fact;
    if (!PyArg_ParseTuple(args, "O:FactJson", &fact))
        return NULL;
    if (Py_TYPE(fact) != self->cls)
        return PyObject_CallOneArg(self->python, fact);
    PyObject *kept = SLOT(fact, self->text_off);
    if (kept != NULL && kept != Py_None)
        return Py_NewRef(kept);
    Buf *t = &self->out;
    t->n = 0;
    int r = buf_add(t, "{", 1), shown = 0;
    for (Py_ssize_t i = 0; r == 0 && i < self->n; i++) {
        PyObject *v = SLOT(fact, self->off[i]);
        if (v == NULL) {
            PyErr_SetString(PyExc_AttributeError, "FactJson: a fact without a field");
            return NULL;
        }
        if (v == Py_None && !self->nullable[i])
            continue;
        if (shown++)
            r = buf_add(t, ", ", 2);
        PyObject *key = self->keys[i];
        r = r < 0 ? r : buf_add(t, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        r = r < 0 ? r : add_value(t, v, 0);
    }
    r = r < 0 ? r : buf_add(t, "}", 1);
    if (r == UNWRITTEN)
        return PyObject_CallOneArg(self->python, fact);
    if (r < 0)
        return NULL;
    PyObject *text = PyUnicode_New(t->n, 127);  /* (ASCII: every other char escaped) */
    if (text == NULL)
        return NULL;
    memcpy(PyUnicode_DATA(text), t->p, t->n);
    Py_XSETREF(SLOT(fact, self->text_off), Py_NewRef(text));
    return text;
}

static int init(FactJson *self, PyObject *args, PyObject *kw)
{
    PyObject *cls, *fields, *keys, *nullable, *text_field, *python;
    if (!PyArg_ParseTuple(args, "O!O!O!O!UO", &PyType_Type, &cls, &PyTuple_Type, &fields,
                          &PyTuple_Type, &keys, &PyTuple_Type, &nullable, &text_field, &python))
        return -1;
    if (!PyCallable_Check(python)) {
        PyErr_SetString(PyExc_TypeError, "FactJson: python is callable");
        return -1;
    }
    Py_XSETREF(self->python, Py_NewRef(python));
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    if (n > MAX_FIELDS || PyTuple_GET_SIZE(keys) != n || PyTuple_GET_SIZE(nullable) != n) {
        PyErr_SetString(PyExc_ValueError, "FactJson: fields, keys and nullable, as many "
                        "of each (at most 128)");
        return -1;
    }
    Py_XSETREF(self->cls, (PyTypeObject *)Py_NewRef(cls));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyTuple_GET_ITEM(keys, i);
        if (!PyBytes_CheckExact(key)) {
            PyErr_SetString(PyExc_TypeError, "FactJson: keys are bytes");
            return -1;
        }
        Py_XSETREF(self->keys[i], Py_NewRef(key));
        int truth = PyObject_IsTrue(PyTuple_GET_ITEM(nullable, i));
        if (truth < 0)
            return -1;
        self->nullable[i] = (char)truth;
    }
    if (slot_offsets_named(self->cls, fields, MAX_FIELDS, self->off, "FactJson") < 0
            || (self->text_off = slot_offset_of(self->cls, text_field, "FactJson")) < 0)
        return -1;
    self->n = n;
    return 0;
}

static void dealloc(FactJson *self)
{
    Py_XDECREF(self->cls);
    Py_XDECREF(self->python);
    for (Py_ssize_t i = 0; i < MAX_FIELDS; i++)
        Py_XDECREF(self->keys[i]);
    PyMem_Free(self->out.p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject FactJsonType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ibpath_scapy.native._scan.FactJson",
    .tp_doc = "FactJson(cls, fields, keys, nullable, text_field, python)(fact): a layer "
              "fact's JSON text (facts/records.py _layer_json).",
    .tp_basicsize = sizeof(FactJson),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)init,
    .tp_dealloc = (destructor)dealloc,
    .tp_call = (ternaryfunc)call,
};

int add_fact_json(PyObject *module)
{
    return add_type(module, &FactJsonType, "FactJson");
}
