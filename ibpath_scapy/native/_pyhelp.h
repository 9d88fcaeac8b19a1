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
