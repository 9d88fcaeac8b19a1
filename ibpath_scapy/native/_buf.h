/* A growing byte buffer: what the C writers of text build their output in before it becomes
 * one Python object (_rows.c, pickle's text of a Spill chunk; _factjson.c, a fact's JSON).
 * A writer keeps its buffer between calls, so that it grows once. */
#ifndef IBPATH_BUF_H
#define IBPATH_BUF_H

#include <Python.h>
#include <string.h>

typedef struct {
    char *p;
    Py_ssize_t n, cap;  /* bytes written, bytes allocated */
} Buf;

/* room for `more` bytes after the n written: 0, or -1 with MemoryError set */
static inline int buf_room(Buf *b, Py_ssize_t more)
{
    if (b->n + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + more)
        cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_add(Buf *b, const void *d, Py_ssize_t n)
{
    if (buf_room(b, n) < 0)
        return -1;
    memcpy(b->p + b->n, d, n);
    b->n += n;
    return 0;
}

static inline int buf_add1(Buf *b, int c)
{
    if (buf_room(b, 1) < 0)
        return -1;
    b->p[b->n++] = (char)c;
    return 0;
}

/* emptied, and its memory given back where a call made it larger than `keep` bytes */
static inline void buf_reset(Buf *b, Py_ssize_t keep)
{
    b->n = 0;
    if (b->cap > keep) {
        PyMem_Free(b->p);
        b->p = NULL;
        b->cap = 0;
    }
}

#endif
