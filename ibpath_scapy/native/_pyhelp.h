/* What the extension's C files share of the Python API: where a class keeps a slot, and an
 * attribute's value counted up. */
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
