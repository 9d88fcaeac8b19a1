/* The chunks a replay writes to its Spill file (audit/spill.py, audit/replay.py
 * Replay._spill), written in C as pickle's text; the Python that pickles the rows of
 * ClosedTransaction.row remains the reference.
 *
 * RowsText(closed_class, path_record_class, path_record_fields, not_plain, kinds, pickled)
 * (entries) -> bytes | None. entries: up to a chunk's (previous, ts) pairs. The bytes are a
 * pickle (protocol 4 opcodes, no memo) that pickle.loads reads as the chunk Spill.write_chunk
 * pickles: [(kinds[0], previous, [t.row() for t in ts]), ...], or (kinds[1], previous,
 * pickled(ts)) for an entry where a row is not plain (not_plain raised, as row() raises it:
 * a query or record that is not exactly of path_record_class). A t of exactly closed_class
 * has its row written from its slots, its query and records as the tuples of their
 * path_record_fields (PathRecord._INIT); any other t is asked for t.row(). None where a value
 * is of a type written here by no opcode (an int subclass, a str with surrogates, a value
 * nested deeper than rows are, ...): the caller pickles that chunk itself. Tested equal,
 * after pickle.loads, to the Python chunks (tests/test_spill.py). One replay's writer: its
 * buffer and memo are in use while it asks Python (row(), pickled()), so it is not shared.
 *
 * Made with spill=(resolution_class, tally_class, chunk_entries), it also takes the steps of
 * Replay._spill_part for chunk after chunk: .spill(resolutions, write_text, python_part)
 * writes each chunk_entries resolutions' transactions as one chunk (write_text(text, n), the
 * Spill's, gives their references) and sets each resolution as _spill_part does (spilled,
 * spilled_count, folded: Tally.of(ts).merge(folded), transactions: ()). A chunk with a
 * resolution, a transaction or a count of a class other than these exactly, or whose text
 * this writer leaves to pickle, goes to python_part(part) untouched. Tested equal to
 * _spill_part, which remains the reference (tests/test_spill.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_buf.h"
#include "_pyhelp.h"

/* ClosedTransaction's slots read here, in the row's order (row() writes the query and the
 * records as values, the frames as bytes) */
static const char *const ROW_FIELDS[] = {"requester", "tid", "attribute_id", "answered",
                                         "completing_frame", "query", "status", "component_mask",
                                         "components", "first_frame", "request_count", "_frames",
                                         "records", "arrows", "_asks", "method"};
enum { W_ANSWERED = 3, W_QUERY = 5, W_FRAMES = 11, W_REQUEST_COUNT = 10, W_RECORDS = 12,
       W_ASKS = 14, W_N = 16 };
/* a Resolution's slots the spill sets, and Tally's, in its order (Tally.of's counts) */
static const char *const RES_FIELDS[] = {"transactions", "spilled", "spilled_count", "folded"};
enum { RS_TS, RS_SPILLED, RS_COUNT, RS_FOLDED, RS_N };
static const char *const TALLY_FIELDS[] = {"transactions", "requests", "retries", "answered",
                                           "reversible_asked"};
enum { TALLY_N = 5, MAX_CHUNK = 256 };
#define MAX_RECORD_FIELDS 64
#define MAX_DEPTH 16  /* nested tuples, lists and sets a value may have (rows have 3) */

/* what the writers return besides 0 (written) and -1 (error set) */
enum { UNWRITTEN = -2,   /* a value of a type without its opcode here: no error set */
       NOT_PLAIN = -3 }; /* the entry's rows are not plain: it goes pickled (kinds[1]) */

/* pickle's opcodes (Lib/pickle.py, Lib/pickletools.py) */
enum {
    MARK = '(', STOP = '.', NONE = 'N', NEWTRUE = 0x88, NEWFALSE = 0x89, BININT1 = 'K',
    BININT2 = 'M', BININT = 'J', LONG1 = 0x8a, BINFLOAT = 'G', SHORT_BINUNICODE = 0x8c,
    BINUNICODE = 'X', SHORT_BINBYTES = 'C', BINBYTES = 'B', EMPTY_TUPLE = ')', TUPLE1 = 0x85,
    TUPLE = 't', EMPTY_LIST = ']', APPENDS = 'e', FROZENSET = 0x91, PROTO = 0x80,
    MEMOIZE = 0x94, BINGET = 'h', LONG_BINGET = 'j',
};


/* the objects a chunk's text wrote and memoized, by address (pickle's memo, of the strings,
 * sets and PathRecords, which the transactions share: written once, then fetched). Each is
 * held until the chunk is written, so that no other object takes its address meanwhile. */
enum { MEMO_SLOTS = 1024, MEMO_MAX = MEMO_SLOTS / 2 };
typedef struct {
    PyObject *obj;
    Py_ssize_t index;
} MemoSlot;

typedef struct {
    PyObject_HEAD
    PyTypeObject *closed_class, *record_class;
    PyObject *not_plain, *kind_rows, *kind_objects, *pickled;
    Py_ssize_t off[W_N], record_off[MAX_RECORD_FIELDS], n_record;
    Buf buf;  /* kept between calls: a chunk's text is ~4 KB */
    MemoSlot memo[MEMO_SLOTS];
    Py_ssize_t memo_n, used[MEMO_MAX];  /* memoized so far; their slots */
    /* spill()'s: NULL where made without them */
    PyTypeObject *res_class, *tally_class;
    Py_ssize_t res_off[RS_N], tally_off[TALLY_N], chunk_entries;
} RowsText;

static PyObject *str_row;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* op, then the low n bytes of v, little-endian (pickle's integer arguments) */
static int put_le(Buf *b, int op, unsigned long long v, int n)
{
    if (buf_room(b, 1 + n) < 0)
        return -1;
    b->p[b->n++] = (char)op;
    for (int i = 0; i < n; i++, v >>= 8)
        b->p[b->n++] = (char)(v & 0xFF);
    return 0;
}

/* an int past 64 bits (or below -2**63), as LONG1: the rare path, by int's own methods */
static int put_big(Buf *b, PyObject *v)
{
    PyObject *bits = PyObject_CallMethod(v, "bit_length", NULL);
    if (bits == NULL)
        return -1;
    Py_ssize_t n = PyLong_AsSsize_t(bits) / 8 + 1;  /* (room for the sign) */
    Py_DECREF(bits);
    if (n > 0xFF)
        return UNWRITTEN;  /* (LONG4's: no row has one) */
    PyObject *to_bytes = PyObject_GetAttrString(v, "to_bytes"), *d = NULL;
    PyObject *args = Py_BuildValue("(ns)", n, "little"), *kw = Py_BuildValue("{sO}", "signed", Py_True);
    if (to_bytes != NULL && args != NULL && kw != NULL)
        d = PyObject_Call(to_bytes, args, kw);
    Py_XDECREF(to_bytes);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    if (d == NULL)
        return -1;
    int r = put_le(b, LONG1, (unsigned long long)n, 1) < 0 ? -1
            : buf_add(b, PyBytes_AS_STRING(d), PyBytes_GET_SIZE(d));
    Py_DECREF(d);
    return r;
}

/* an int as pickle.Pickler.save_long writes it at protocol 2 and later (LONG1 with the
 * fewest bytes of its two's complement past 32 bits) */
static int put_int(Buf *b, PyObject *v)
{
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow != 0)
        return put_big(b, v);
    if (x >= 0 && x <= 0xFF)
        return put_le(b, BININT1, (unsigned long long)x, 1);
    if (x >= 0 && x <= 0xFFFF)
        return put_le(b, BININT2, (unsigned long long)x, 2);
    if (x >= INT32_MIN && x <= INT32_MAX)
        return put_le(b, BININT, (unsigned long long)x, 4);
    int n = 5;
    while (n < 8 && !(x >= -(1LL << (8 * n - 1)) && x < (1LL << (8 * n - 1))))
        n++;
    if (put_le(b, LONG1, (unsigned long long)n, 1) < 0 || buf_room(b, n) < 0)
        return -1;
    unsigned long long u = (unsigned long long)x;
    for (int i = 0; i < n; i++, u >>= 8)
        b->p[b->n++] = (char)(u & 0xFF);
    return 0;
}

static int put_sized(Buf *b, int short_op, int op, const char *d, Py_ssize_t n)
{
    if (n <= 0xFF) {
        if (put_le(b, short_op, (unsigned long long)n, 1) < 0)
            return -1;
    } else if (n <= 0xFFFFFFFFLL) {
        if (put_le(b, op, (unsigned long long)n, 4) < 0)
            return -1;
    } else {
        return UNWRITTEN;
    }
    return buf_add(b, d, n);
}

/* where obj's memo slot is, or the empty slot it would take */
static MemoSlot *memo_slot(RowsText *self, PyObject *obj)
{
    size_t i = ((size_t)obj >> 4) & (MEMO_SLOTS - 1);
    while (self->memo[i].obj != NULL && self->memo[i].obj != obj)
        i = (i + 1) & (MEMO_SLOTS - 1);
    return &self->memo[i];
}

/* obj fetched from the memo where it was written before in this chunk: 1, or 0 */
static int put_fetched(RowsText *self, PyObject *obj, int *r)
{
    MemoSlot *m = memo_slot(self, obj);
    if (m->obj == NULL)
        return 0;
    *r = m->index <= 0xFF ? put_le(&self->buf, BINGET, (unsigned long long)m->index, 1)
         : put_le(&self->buf, LONG_BINGET, (unsigned long long)m->index, 4);
    return 1;
}

/* obj, just written, memoized (while the memo has room) */
static int memoize(RowsText *self, PyObject *obj)
{
    if (self->memo_n >= MEMO_MAX)
        return 0;
    MemoSlot *m = memo_slot(self, obj);
    m->obj = Py_NewRef(obj);
    m->index = self->memo_n;
    self->used[self->memo_n++] = m - self->memo;
    return buf_add1(&self->buf, MEMOIZE);
}

/* the memo as it was with `keep` objects (the last ones memoized go first: the slots of
 * those before are then as they were) */
static void memo_truncate(RowsText *self, Py_ssize_t keep)
{
    while (self->memo_n > keep) {
        MemoSlot *m = &self->memo[self->used[--self->memo_n]];
        Py_CLEAR(m->obj);
    }
}

static int put_value(RowsText *self, PyObject *v, int depth);

/* the items of a tuple, list or frozenset (a fast sequence) */
static int put_items(RowsText *self, PyObject *seq, int depth)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        int r = put_value(self, PySequence_Fast_GET_ITEM(seq, i), depth + 1);
        if (r < 0)
            return r;
    }
    return 0;
}

static int put_tuple_end(Buf *b, Py_ssize_t n)
{
    return n <= 3 ? buf_add1(b, TUPLE1 - 1 + (int)n) : buf_add1(b, TUPLE);
}

/* v as pickle writes it, for the plain types of a row; UNWRITTEN for any other */
static int put_value(RowsText *self, PyObject *v, int depth)
{
    Buf *b = &self->buf;
    int r = 0;
    if (depth > MAX_DEPTH)
        return UNWRITTEN;
    if (v == Py_None)
        return buf_add1(b, NONE);
    if (v == Py_True || v == Py_False)
        return buf_add1(b, v == Py_True ? NEWTRUE : NEWFALSE);
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyLong_Type)
        return put_int(b, v);
    if (t == &PyUnicode_Type) {
        if (put_fetched(self, v, &r))
            return r;
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(v, &n);
        if (s == NULL) {  /* (surrogates: pickle writes them, with surrogatepass) */
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
                return -1;
            PyErr_Clear();
            return UNWRITTEN;
        }
        r = put_sized(b, SHORT_BINUNICODE, BINUNICODE, s, n);
        return r < 0 ? r : memoize(self, v);
    }
    if (t == &PyBytes_Type)
        return put_sized(b, SHORT_BINBYTES, BINBYTES, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    if (t == &PyFloat_Type) {
        char d[8];
        if (PyFloat_Pack8(PyFloat_AS_DOUBLE(v), d, 0) < 0)  /* (big-endian, as BINFLOAT) */
            return -1;
        return buf_add1(b, BINFLOAT) < 0 ? -1 : buf_add(b, d, 8);
    }
    if (t == &PyTuple_Type) {
        Py_ssize_t n = PyTuple_GET_SIZE(v);
        if (n == 0)
            return buf_add1(b, EMPTY_TUPLE);
        if (n > 3 && buf_add1(b, MARK) < 0)
            return -1;
        r = put_items(self, v, depth);  /* (a tuple is its own fast sequence) */
        return r < 0 ? r : put_tuple_end(b, n);
    }
    if (t == &PyList_Type || t == &PyFrozenSet_Type) {
        if (t == &PyFrozenSet_Type && put_fetched(self, v, &r))
            return r;
        /* (a list is read as it is now: nothing here runs Python code that could change it) */
        PyObject *seq = PySequence_Fast(v, "a row's list or set");
        if (seq == NULL)
            return -1;
        if (t == &PyList_Type) {
            r = buf_add1(b, EMPTY_LIST);
            if (r == 0 && PySequence_Fast_GET_SIZE(seq) > 0) {
                r = buf_add1(b, MARK);
                r = r < 0 ? r : put_items(self, seq, depth);
                r = r < 0 ? r : buf_add1(b, APPENDS);
            }
        } else {
            r = buf_add1(b, MARK);
            r = r < 0 ? r : put_items(self, seq, depth);
            r = r < 0 ? r : buf_add1(b, FROZENSET);
            r = r < 0 ? r : memoize(self, v);
        }
        Py_DECREF(seq);
        return r;
    }
    return UNWRITTEN;
}

/* a PathRecord fact's values (row()'s _pr_values) as a tuple; NOT_PLAIN where rec is of
 * another class */
static int put_record(RowsText *self, PyObject *rec)
{
    if (Py_TYPE(rec) != self->record_class)
        return NOT_PLAIN;
    Buf *b = &self->buf;
    int r = 0;
    if (put_fetched(self, rec, &r))
        return r;
    if (buf_add1(b, MARK) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < self->n_record; i++) {
        PyObject *v = SLOT(rec, self->record_off[i]);
        if (v == NULL) {  /* (a fact has every slot filled: as attrgetter would) */
            PyErr_SetString(PyExc_AttributeError, "a PathRecord fact without a field");
            return -1;
        }
        if ((r = put_value(self, v, 1)) < 0)
            return r;
    }
    return buf_add1(b, TUPLE) < 0 ? -1 : memoize(self, rec);
}

/* ClosedTransaction.row() of t, an instance of exactly closed_class */
static int put_row(RowsText *self, PyObject *t)
{
    Buf *b = &self->buf;
    if (buf_add1(b, MARK) < 0)
        return -1;
    for (int i = 0; i < W_N; i++) {
        PyObject *v = SLOT(t, self->off[i]);
        int r;
        if (v == NULL) {
            PyErr_Format(PyExc_AttributeError, "ClosedTransaction without %s", ROW_FIELDS[i]);
            return -1;
        }
        if (i == W_QUERY && v != Py_None) {
            r = put_record(self, v);
        } else if (i == W_FRAMES) {
            Py_buffer view;
            if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0)
                return -1;
            r = put_sized(b, SHORT_BINBYTES, BINBYTES, view.buf, view.len);  /* (tobytes) */
            PyBuffer_Release(&view);
        } else if (i == W_RECORDS) {
            PyObject *recs = PySequence_Fast(v, "records");
            if (recs == NULL)
                return -1;
            Py_ssize_t n = PySequence_Fast_GET_SIZE(recs);
            r = n == 0 ? buf_add1(b, EMPTY_TUPLE) : n > 3 ? buf_add1(b, MARK) : 0;
            for (Py_ssize_t k = 0; r == 0 && k < n; k++)
                r = put_record(self, PySequence_Fast_GET_ITEM(recs, k));
            if (r == 0 && n > 0)
                r = put_tuple_end(b, n);
            Py_DECREF(recs);
        } else {
            r = put_value(self, v, 1);
        }
        if (r < 0)
            return r;
    }
    return buf_add1(b, TUPLE);
}

/* t.row(), asked of t (not exactly closed_class) and written */
static int put_asked_row(RowsText *self, PyObject *t)
{
    PyObject *row = PyObject_CallMethodNoArgs(t, str_row);
    if (row == NULL) {
        if (!PyErr_ExceptionMatches(self->not_plain))
            return -1;
        PyErr_Clear();
        return NOT_PLAIN;
    }
    int r = put_value(self, row, 0);
    Py_DECREF(row);
    return r;
}

/* one entry: (kinds[0], previous, rows), or (kinds[1], previous, pickled(ts)) where a row
 * is not plain */
static int put_entry(RowsText *self, PyObject *previous, PyObject *ts)
{
    Buf *b = &self->buf;
    Py_ssize_t start = b->n, memoized = self->memo_n;
    PyObject *seq = PySequence_Fast(ts, "RowsText: an entry's transactions");
    if (seq == NULL)
        return -1;
    int r = put_value(self, self->kind_rows, 0);
    r = r < 0 ? r : put_value(self, previous, 0);
    r = r < 0 ? r : buf_add1(b, EMPTY_LIST);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (r == 0 && n > 0)
        r = buf_add1(b, MARK);
    for (Py_ssize_t i = 0; r == 0 && i < n; i++) {
        PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
        r = Py_TYPE(t) == self->closed_class ? put_row(self, t) : put_asked_row(self, t);
    }
    if (r == 0 && n > 0)
        r = buf_add1(b, APPENDS);
    if (r == NOT_PLAIN) {  /* the entry again, its transactions pickled as they are */
        b->n = start;
        memo_truncate(self, memoized);
        PyObject *text = PyObject_CallOneArg(self->pickled, ts);
        if (text == NULL) {
            r = -1;
        } else if (!PyBytes_CheckExact(text)) {
            PyErr_SetString(PyExc_TypeError, "RowsText: pickled(ts) gives bytes");
            r = -1;
        } else {
            r = put_value(self, self->kind_objects, 0);
            r = r < 0 ? r : put_value(self, previous, 0);
            r = r < 0 ? r : put_value(self, text, 0);
        }
        Py_XDECREF(text);
    }
    Py_DECREF(seq);
    return r < 0 ? r : buf_add1(b, TUPLE1 + 2);  /* (TUPLE3) */
}

/* a chunk of n entries begun: pickle's protocol, the list and its MARK */
static int chunk_open(RowsText *self, Py_ssize_t n)
{
    Buf *b = &self->buf;
    b->n = 0;
    int r = put_le(b, PROTO, 4, 1);
    r = r < 0 ? r : buf_add1(b, EMPTY_LIST);
    return r == 0 && n > 0 ? buf_add1(b, MARK) : r;
}

/* the chunk ended (r: how its entries went): its text, None (UNWRITTEN), or NULL with the
 * error set */
static PyObject *chunk_close(RowsText *self, Py_ssize_t n, int r)
{
    Buf *b = &self->buf;
    if (r == 0 && n > 0)
        r = buf_add1(b, APPENDS);
    r = r < 0 ? r : buf_add1(b, STOP);
    memo_truncate(self, 0);
    PyObject *out = r == 0 ? PyBytes_FromStringAndSize(b->p, b->n)
                    : r == UNWRITTEN ? Py_NewRef(Py_None) : NULL;
    buf_reset(b, 1 << 20);  /* (an odd chunk's buffer is not kept) */
    return out;
}

/* text(entries): the chunk's pickle text, or None (see the file's comment) */
/* bench/native_twins.py, capture 3 native IB 200k, spill chunks: 0.375 -> 0.108 s (-71 %) */
static PyObject *call(RowsText *self, PyObject *args, PyObject *kw)
{
    PyObject *entries;
    if (!PyArg_ParseTuple(args, "O:RowsText", &entries))
        return NULL;
    PyObject *seq = PySequence_Fast(entries, "RowsText(entries): a sequence of entries");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int r = chunk_open(self, n);
    for (Py_ssize_t i = 0; r == 0 && i < n; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 2) {
            PyErr_SetString(PyExc_TypeError, "RowsText: an entry is (previous, transactions)");
            r = -1;
        } else {
            r = put_entry(self, PyTuple_GET_ITEM(e, 0), PyTuple_GET_ITEM(e, 1));
        }
    }
    Py_DECREF(seq);
    return chunk_close(self, n, r);
}

/* v as a Py_ssize_t in *out where v is exactly an int that fits: 1, else 0 */
static int exact_size(PyObject *v, Py_ssize_t *out)
{
    if (v == NULL || !PyLong_CheckExact(v))
        return 0;
    *out = PyLong_AsSsize_t(v);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* What _spill_part makes of resolution r: its new tally's values in tally[] (Tally.of of
 * its transactions merged with its folded one) and its spilled_count in *count. 1; 0 where r
 * is not as spill() takes it (Python's steps then); -1 with the error set. Nothing changed. */
static int spill_values(RowsText *self, PyObject *r, Py_ssize_t tally[TALLY_N],
                        Py_ssize_t *count)
{
    if (Py_TYPE(r) != self->res_class)
        return 0;
    for (int i = 0; i < RS_N; i++)
        if (SLOT(r, self->res_off[i]) == NULL)
            return 0;
    PyObject *ts = SLOT(r, self->res_off[RS_TS]), *folded = SLOT(r, self->res_off[RS_FOLDED]);
    /* (spilled, a reference, is written as any value: it may be past 64 bits) */
    if (!(PyList_CheckExact(ts) || PyTuple_CheckExact(ts))
            || !exact_size(SLOT(r, self->res_off[RS_COUNT]), count))
        return 0;
    if (folded == Py_None) {
        for (int j = 0; j < TALLY_N; j++)
            tally[j] = 0;
    } else {
        if (Py_TYPE(folded) != self->tally_class)
            return 0;
        for (int j = 0; j < TALLY_N; j++)
            if (!exact_size(SLOT(folded, self->tally_off[j]), &tally[j]))
                return 0;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ts);
    for (Py_ssize_t i = 0; i < n; i++) {  /* Tally.of: count() of each */
        PyObject *t = PySequence_Fast_GET_ITEM(ts, i), *answered, *asks;
        Py_ssize_t sent;
        if (Py_TYPE(t) != self->closed_class
                || !exact_size(SLOT(t, self->off[W_REQUEST_COUNT]), &sent)
                || (answered = SLOT(t, self->off[W_ANSWERED])) == NULL
                || (asks = SLOT(t, self->off[W_ASKS])) == NULL)
            return 0;
        int a = PyObject_IsTrue(answered), rev = a < 0 ? -1 : PyObject_IsTrue(asks);
        if (rev < 0)
            return -1;
        tally[1] += sent;
        tally[2] += sent > 1 ? sent - 1 : 0;
        tally[3] += a;
        tally[4] += rev;
    }
    tally[0] += n;
    *count += n;
    return 1;
}

/* a new Tally holding these counts (its slots filled as its __init__ would) */
static PyObject *new_tally(RowsText *self, const Py_ssize_t tally[TALLY_N])
{
    PyObject *v[TALLY_N];
    for (int j = 0; j < TALLY_N; j++)
        if ((v[j] = PyLong_FromSsize_t(tally[j])) == NULL) {
            while (j--)
                Py_DECREF(v[j]);
            return NULL;
        }
    PyObject *o = self->tally_class->tp_alloc(self->tally_class, 0);
    for (int j = 0; j < TALLY_N; j++) {
        if (o != NULL)
            SLOT(o, self->tally_off[j]) = v[j];
        else
            Py_DECREF(v[j]);
    }
    return o;
}

/* the k resolutions at res spilled as one chunk: 0; UNWRITTEN where one is not as spill()
 * takes it, or the chunk's text is left to pickle (nothing changed); -1 with the error set */
static int spill_part(RowsText *self, PyObject *const *res, Py_ssize_t k, PyObject *write_text)
{
    Py_ssize_t tally[MAX_CHUNK][TALLY_N], count[MAX_CHUNK];
    for (Py_ssize_t i = 0; i < k; i++) {
        int ok = spill_values(self, res[i], tally[i], &count[i]);
        if (ok <= 0)
            return ok < 0 ? -1 : UNWRITTEN;
    }
    int r = chunk_open(self, k);
    for (Py_ssize_t i = 0; r == 0 && i < k; i++)
        r = put_entry(self, SLOT(res[i], self->res_off[RS_SPILLED]),
                      SLOT(res[i], self->res_off[RS_TS]));
    PyObject *text = chunk_close(self, k, r);
    if (text == NULL || text == Py_None) {
        Py_XDECREF(text);
        return text == NULL ? -1 : UNWRITTEN;
    }
    PyObject *n = PyLong_FromSsize_t(k), *refs = NULL;
    if (n != NULL) {
        PyObject *args[2] = {text, n};
        refs = PyObject_Vectorcall(write_text, args, 2, NULL);
        Py_DECREF(n);
    }
    Py_DECREF(text);
    if (refs == NULL)
        return -1;
    if (!PyList_CheckExact(refs) || PyList_GET_SIZE(refs) != k) {
        PyErr_SetString(PyExc_TypeError, "RowsText.spill: write_text gives a reference each");
        Py_DECREF(refs);
        return -1;
    }
    r = 0;
    for (Py_ssize_t i = 0; r == 0 && i < k; i++) {  /* _spill_part's steps, in its order */
        PyObject *o = res[i], *spilled_count = PyLong_FromSsize_t(count[i]);
        PyObject *folded = spilled_count == NULL ? NULL : new_tally(self, tally[i]);
        if (folded == NULL) {
            Py_XDECREF(spilled_count);
            r = -1;
            break;
        }
        Py_SETREF(SLOT(o, self->res_off[RS_SPILLED]), Py_NewRef(PyList_GET_ITEM(refs, i)));
        Py_SETREF(SLOT(o, self->res_off[RS_COUNT]), spilled_count);
        Py_SETREF(SLOT(o, self->res_off[RS_FOLDED]), folded);
        Py_SETREF(SLOT(o, self->res_off[RS_TS]), PyTuple_New(0));
    }
    Py_DECREF(refs);
    return r;
}

/* spill(resolutions, write_text, python_part): see the file's comment */
/* bench/native_twins.py, capture 3 native IB 200k, spill steps: 0.187 -> 0.119 s (-36 %) */
static PyObject *spill(RowsText *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError,
                        "RowsText.spill(resolutions, write_text, python_part) takes 3 arguments");
        return NULL;
    }
    if (self->res_class == NULL) {
        PyErr_SetString(PyExc_TypeError, "RowsText.spill: made without spill=(...)");
        return NULL;
    }
    /* (a tuple of its own: the Python it calls cannot change what it walks) */
    PyObject *all = PySequence_Tuple(args[0]);
    if (all == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(all);
    for (Py_ssize_t start = 0; start < n; start += self->chunk_entries) {
        Py_ssize_t k = n - start < self->chunk_entries ? n - start : self->chunk_entries;
        int r = spill_part(self, &PyTuple_GET_ITEM(all, start), k, args[1]);
        if (r == UNWRITTEN) {
            PyObject *part = PyTuple_GetSlice(all, start, start + k), *done = NULL;
            PyObject *as_list = part == NULL ? NULL : PySequence_List(part);
            if (as_list != NULL)
                done = PyObject_CallOneArg(args[2], as_list);
            Py_XDECREF(part);
            Py_XDECREF(as_list);
            r = done == NULL ? -1 : 0;
            Py_XDECREF(done);
        }
        if (r < 0) {
            Py_DECREF(all);
            return NULL;
        }
    }
    Py_DECREF(all);
    Py_RETURN_NONE;
}

/* The tally class's slots are exactly Tally's counts, in their order (new_tally fills
 * them all): 0, or -1 with the error set. */
static int tally_slots(RowsText *self)
{
    PyObject *slots = PyObject_GetAttrString((PyObject *)self->tally_class, "__slots__");
    if (slots == NULL)
        return -1;
    PyObject *seq = PySequence_Fast(slots, "RowsText: the tally class's __slots__");
    Py_DECREF(slots);
    if (seq == NULL)
        return -1;
    int ok = PySequence_Fast_GET_SIZE(seq) == TALLY_N
             && self->tally_class->tp_base == &PyBaseObject_Type;
    for (int j = 0; ok && j < TALLY_N; j++) {
        PyObject *name = PySequence_Fast_GET_ITEM(seq, j);
        ok = PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, TALLY_FIELDS[j]) == 0;
    }
    Py_DECREF(seq);
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "RowsText: %R is not a Tally (its slots are %s, ...)",
                     self->tally_class, TALLY_FIELDS[0]);
        return -1;
    }
    return slot_offsets(self->tally_class, TALLY_FIELDS, TALLY_N, self->tally_off, "RowsText");
}

static int init(RowsText *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"closed_class", "path_record_class", "path_record_fields",
                            "not_plain", "kinds", "pickled", "spill", NULL};
    PyObject *cc, *rc, *fields, *not_plain, *kinds, *pickled, *spill_ = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!O!OO!O|$O", names, &PyType_Type, &cc,
                                     &PyType_Type, &rc, &PyTuple_Type, &fields, &not_plain,
                                     &PyTuple_Type, &kinds, &pickled, &spill_))
        return -1;
    if (PyTuple_GET_SIZE(kinds) != 2 || !PyBytes_CheckExact(PyTuple_GET_ITEM(kinds, 0))
            || !PyBytes_CheckExact(PyTuple_GET_ITEM(kinds, 1))) {
        PyErr_SetString(PyExc_TypeError, "RowsText: kinds are (rows, objects), two bytes");
        return -1;
    }
    if (!PyCallable_Check(pickled)) {
        PyErr_SetString(PyExc_TypeError, "RowsText: pickled is callable");
        return -1;
    }
    Py_XSETREF(self->closed_class, (PyTypeObject *)Py_NewRef(cc));
    Py_XSETREF(self->record_class, (PyTypeObject *)Py_NewRef(rc));
    Py_XSETREF(self->not_plain, Py_NewRef(not_plain));
    Py_XSETREF(self->kind_rows, Py_NewRef(PyTuple_GET_ITEM(kinds, 0)));
    Py_XSETREF(self->kind_objects, Py_NewRef(PyTuple_GET_ITEM(kinds, 1)));
    Py_XSETREF(self->pickled, Py_NewRef(pickled));
    if (slot_offsets(self->closed_class, ROW_FIELDS, W_N, self->off, "RowsText") < 0)
        return -1;
    self->n_record = slot_offsets_named(self->record_class, fields, MAX_RECORD_FIELDS,
                                        self->record_off, "RowsText");
    if (self->n_record < 0)
        return -1;
    Py_CLEAR(self->res_class);
    Py_CLEAR(self->tally_class);
    if (spill_ == Py_None)
        return 0;
    PyObject *res_class, *tally_class;
    if (!PyArg_ParseTuple(spill_, "O!O!n:RowsText spill=(resolution_class, tally_class, "
                          "chunk_entries)", &PyType_Type, &res_class, &PyType_Type,
                          &tally_class, &self->chunk_entries))
        return -1;
    if (self->chunk_entries < 1 || self->chunk_entries > MAX_CHUNK) {
        PyErr_Format(PyExc_ValueError, "RowsText: chunk_entries 1 to %d", MAX_CHUNK);
        return -1;
    }
    self->res_class = (PyTypeObject *)Py_NewRef(res_class);
    self->tally_class = (PyTypeObject *)Py_NewRef(tally_class);
    if (slot_offsets(self->res_class, RES_FIELDS, RS_N, self->res_off, "RowsText") < 0
            || tally_slots(self) < 0) {
        Py_CLEAR(self->res_class);
        Py_CLEAR(self->tally_class);
        return -1;
    }
    return 0;
}

static void dealloc(RowsText *self)
{
    Py_XDECREF(self->closed_class);
    Py_XDECREF(self->record_class);
    Py_XDECREF(self->not_plain);
    Py_XDECREF(self->kind_rows);
    Py_XDECREF(self->kind_objects);
    Py_XDECREF(self->pickled);
    Py_XDECREF(self->res_class);
    Py_XDECREF(self->tally_class);
    memo_truncate(self, 0);
    PyMem_Free(self->buf.p);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef methods[] = {
    {"spill", (PyCFunction)(void (*)(void))spill, METH_FASTCALL,
     "spill(resolutions, write_text, python_part): Replay._spill_part's steps, chunk after "
     "chunk (see native/_rows.c)."},
    {NULL},
};

static PyTypeObject RowsTextType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ibpath_scapy.native._scan.RowsText",
    .tp_doc = "RowsText(closed_class, path_record_class, path_record_fields, not_plain, kinds, "
              "pickled, *, spill=None)(entries): a Spill chunk's pickle text, or None "
              "(audit/spill.py).",
    .tp_basicsize = sizeof(RowsText),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)init,
    .tp_dealloc = (destructor)dealloc,
    .tp_call = (ternaryfunc)call,
    .tp_methods = methods,
};

int add_rows(PyObject *module)
{
    if ((str_row = PyUnicode_InternFromString("row")) == NULL)
        return -1;
    return add_type(module, &RowsTextType, "RowsText");
}
