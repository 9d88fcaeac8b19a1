/* What the extension's C files share of the Python API: where a class keeps its slots, a
 * function mapped over a sequence, a type added to the module, and an attribute's value
 * counted up. */
#ifndef IBPATH_PYHELP_H
#define IBPATH_PYHELP_H

#include <Python.h>
#include <structmember.h>

/* The offset in cls's instances of the object slot `name` (a member descriptor of
 * T_OBJECT_EX, as __slots__ makes), -1 where name is something else, -2 with the error set
 * where cls has no such attribute. */
static inline Py_ssize_t slot_offset(PyObject *cls, PyObject *name)
{
    PyObject *d = PyObject_GetAttr(cls, name);
    if (d == NULL)
        return -2;
    Py_ssize_t off = Py_IS_TYPE(d, &PyMemberDescr_Type)
                     && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX
                     ? ((PyMemberDescrObject *)d)->d_member->offset : -1;
    Py_DECREF(d);
    return off;
}

/* A reader of the attribute `name`: from its slot where the object is of the type the
 * reader last met (the slot's offset looked up once per type met), else by
 * PyObject_GetAttr. A storm's records are facts of a few slotted classes read by the
 * million, and PyObject_GetAttr looks each name up in the class's dictionaries. */
typedef struct {
    PyObject *name;     /* strong */
    PyTypeObject *type; /* strong, or NULL: none met yet */
    Py_ssize_t off;     /* the slot's offset in type's instances, 0: none (GetAttr) */
} SlotReader;

/* obj.<name> (a new reference), or NULL with the error set. */
static inline PyObject *slot_read(SlotReader *r, PyObject *obj)
{
    PyTypeObject *t = Py_TYPE(obj);
    if (t != r->type) {
        Py_ssize_t off = slot_offset((PyObject *)t, r->name);
        if (off == -2)
            PyErr_Clear(); /* (no such attribute: GetAttr below says so of obj) */
        Py_XSETREF(r->type, (PyTypeObject *)Py_NewRef((PyObject *)t));
        r->off = off >= (Py_ssize_t)sizeof(PyObject) && off < t->tp_basicsize ? off : 0;
    }
    if (r->off) {
        PyObject *v = *(PyObject **)((char *)obj + r->off);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, r->name);
}

/* n readers of the names in the tuple `names` (from index `from`), in a new array: NULL
 * with the error set. */
static inline SlotReader *slot_readers(PyObject *names, Py_ssize_t from, Py_ssize_t n)
{
    SlotReader *r = PyMem_Calloc(n ? n : 1, sizeof(SlotReader));
    if (r == NULL)
        return (SlotReader *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++)
        r[i].name = Py_NewRef(PyTuple_GET_ITEM(names, from + i));
    return r;
}

/* The n readers of r let go (r may be NULL). */
static inline void slot_readers_free(SlotReader *r, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; r != NULL && i < n; i++) {
        Py_CLEAR(r[i].name);
        Py_CLEAR(r[i].type);
    }
    PyMem_Free(r);
}

/* slot_offset(cls, name), or -1 with the error set: a ValueError naming `who` where name is
 * no object slot of cls. */
static inline Py_ssize_t slot_offset_of(PyTypeObject *cls, PyObject *name, const char *who)
{
    Py_ssize_t off = slot_offset((PyObject *)cls, name);
    if (off == -2)
        return -1;
    if (off < (Py_ssize_t)sizeof(PyObject) || off >= cls->tp_basicsize) {
        PyErr_Format(PyExc_ValueError, "%s: %S of %R is not a slot", who, name, cls);
        return -1;
    }
    return off;
}

/* The offsets of the object slots `names` (n of them) in cls's instances: 0, or -1 with the
 * error set (a ValueError naming `who` where a name is no slot there). */
static inline int slot_offsets(PyTypeObject *cls, const char *const *names, Py_ssize_t n,
                               Py_ssize_t *off, const char *who)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (name == NULL)
            return -1;
        off[i] = slot_offset_of(cls, name, who);
        Py_DECREF(name);
        if (off[i] < 0)
            return -1;
    }
    return 0;
}

/* slot_offsets of the names in the tuple `names` (strs, at most `most` of them): how many,
 * or -1 with the error set. */
static inline Py_ssize_t slot_offsets_named(PyTypeObject *cls, PyObject *names, Py_ssize_t most,
                                            Py_ssize_t *off, const char *who)
{
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (n > most) {
        PyErr_Format(PyExc_ValueError, "%s: more than %zd fields", who, most);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_Check(name)) {
            PyErr_Format(PyExc_TypeError, "%s: fields are names", who);
            return -1;
        }
        if ((off[i] = slot_offset_of(cls, name, who)) < 0)
            return -1;
    }
    return n;
}

/* [f(self, item) for item in items] as a new list, f giving a new reference or NULL with the
 * error set; NULL with the error set (a TypeError saying `what` where items is no sequence). */
static inline PyObject *map_list(PyObject *items, const char *what,
                                 PyObject *(*f)(PyObject *, PyObject *), PyObject *self)
{
    PyObject *seq = PySequence_Fast(items, what);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *v = f(self, PySequence_Fast_GET_ITEM(seq, i));
        if (v == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, v);
    }
    Py_DECREF(seq);
    return out;
}

/* The type made ready and added to module under name: 0, or -1 with the error set. */
static inline int add_type(PyObject *module, PyTypeObject *type, const char *name)
{
    if (PyType_Ready(type) < 0)
        return -1;
    Py_INCREF(type);
    if (PyModule_AddObject(module, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

/* obj.<name> += by: 0, or -1 with the error set. */
static inline int add_to(PyObject *obj, PyObject *name, PyObject *by)
{
    PyObject *v = PyObject_GetAttr(obj, name), *w;
    if (v == NULL)
        return -1;
    w = PyNumber_Add(v, by);
    Py_DECREF(v);
    if (w == NULL)
        return -1;
    int r = PyObject_SetAttr(obj, name, w);
    Py_DECREF(w);
    return r;
}

#endif
