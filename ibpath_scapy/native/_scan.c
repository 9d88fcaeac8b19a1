/* The pcap and pcapng readers' loops over runs of skipped and taken frames
 * (pcapio._SCAN_SOURCE), in C, and the CRCs with their variant fields as ones (crc.py).
 *
 * Format-agnostic: what a frame is tested for comes in as programs, the terms of the
 * pre-filter's RunTest and TakeTest (pcapio.Term, packed by pcapio._program) that the fast
 * path derives from the Scapy layers; the Python loops run the same terms. Each loop checks
 * what its Python twin checks, in the same order, and stops where that one stops, so the
 * readers see the same (pos, k, taken) whichever ran (tests/test_native_scan.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_capture.h"
#include "_crc.h"

enum { KIND_EQUALS = 0, KIND_LEN_MINUS = 1, KIND_NOT_IN = 2, KIND_IN = 3, TERM_WORDS = 8 };

static inline int64_t field(const unsigned char *p, int64_t size)
{
    switch (size) {
    case 1: return p[0];
    case 2: return (int64_t)p[0] << 8 | p[1];
    default: return (int64_t)u32(p, 0);
    }
}

/* Whether the frame at f, len bytes, passes every term (the RunTest's least already
 * guarantees every field lies within it: RunTest refuses a shorter least). */
static int passes(const unsigned char *f, int64_t len, const int64_t *prog)
{
    int64_t nterms = prog[0];
    for (int64_t i = 0; i < nterms; i++) {
        const int64_t *t = prog + 1 + TERM_WORDS * i;
        int64_t v = field(f + t[0], t[1]);
        if (t[3] >= 0)
            v = (v >> t[2]) & t[3];
        switch (t[4]) {
        case KIND_EQUALS:
            if (v != t[5]) return 0;
            break;
        case KIND_LEN_MINUS:
            if (v != len - t[5]) return 0;
            break;
        case KIND_NOT_IN:
            for (int64_t j = 0; j < t[7]; j++)
                if (prog[t[6] + j] == v) return 0;
            break;
        default: { /* KIND_IN */
            int64_t j = 0;
            while (j < t[7] && prog[t[6] + j] != v)
                j++;
            if (j == t[7]) return 0;
        }
        }
    }
    return 1;
}

/* The program's words, checked once per call: every term and set within it. */
static const int64_t *program(Py_buffer *pb)
{
    const int64_t *prog = pb->buf;
    Py_ssize_t words = pb->len / (Py_ssize_t)sizeof(int64_t);
    if (pb->len % (Py_ssize_t)sizeof(int64_t) || words < 1 || prog[0] < 0
            || prog[0] > (words - 1) / TERM_WORDS)
        goto bad;
    for (int64_t i = 0; i < prog[0]; i++) {
        const int64_t *t = prog + 1 + TERM_WORDS * i;
        if (t[0] < 0 || (t[1] != 1 && t[1] != 2 && t[1] != 4) || t[2] < 0 || t[2] > 31
                || t[4] < KIND_EQUALS || t[4] > KIND_IN || t[6] < 0 || t[7] < 0
                || t[6] + t[7] > words)
            goto bad;
    }
    return prog;
bad:
    PyErr_SetString(PyExc_ValueError, "malformed scan program");
    return NULL;
}

/* Farthest byte any term reads: the frames' least length must cover it. */
static int64_t reach(const int64_t *prog)
{
    int64_t most = 0;
    for (int64_t i = 0; i < prog[0]; i++) {
        const int64_t *t = prog + 1 + TERM_WORDS * i;
        if (t[0] + t[1] > most) most = t[0] + t[1];
    }
    return most;
}

/* What a loop runs: the skip test's program and frame lengths, and the take test's (tprog
 * NULL when there is none), with the most frames it takes before it returns. */
typedef struct {
    Py_buffer pb, tb, bb;
    const int64_t *prog, *tprog;
    long long least, most, tleast, tmost;
    Py_ssize_t take_most;
} Loop;

/* Check the programs, their reach (the frames' least lengths must cover it) and pos..n
 * within the buffer: 0, or -1 with the error set. */
static int checked(Loop *L, Py_ssize_t pos, Py_ssize_t n)
{
    L->prog = program(&L->pb);
    if (L->prog == NULL)
        return -1;
    L->tprog = NULL;
    if (L->tb.len) {
        L->tprog = program(&L->tb);
        if (L->tprog == NULL)
            return -1;
    }
    if (L->least < reach(L->prog) || (L->tprog && L->tleast < reach(L->tprog))
            || n > L->bb.len || pos < 0 || L->take_most < 0) {
        PyErr_SetString(PyExc_ValueError, "scan bounds outside the buffer or the frames");
        return -1;
    }
    return 0;
}

/* 1: the frame of len bytes at f is skipped; 2: taken; 0: neither. */
static int judge(const Loop *L, const unsigned char *f, int64_t len)
{
    if (len >= L->least && len <= L->most && passes(f, len, L->prog))
        return 1;
    if (L->tprog && len >= L->tleast && len <= L->tmost && passes(f, len, L->tprog))
        return 2;
    return 0;
}

/* (pos, k, taken), or NULL when a program was refused; the buffers released either way. */
static PyObject *done(Loop *L, int ok, Py_ssize_t pos, Py_ssize_t k, PyObject *taken)
{
    PyBuffer_Release(&L->pb);
    PyBuffer_Release(&L->tb);
    PyBuffer_Release(&L->bb);
    PyObject *out = ok ? Py_BuildValue("(nnO)", pos, k, taken) : NULL;
    Py_XDECREF(taken);
    return out;
}

/* Append (k, pos) to taken: 0, or -1 with the error set. */
static int take(PyObject *taken, Py_ssize_t k, Py_ssize_t pos)
{
    PyObject *a = PyLong_FromSsize_t(k), *b = PyLong_FromSsize_t(pos);
    int ok = a && b && PyList_Append(taken, a) == 0 && PyList_Append(taken, b) == 0;
    Py_XDECREF(a);
    Py_XDECREF(b);
    return ok ? 0 : -1;
}

/* pcap(little, least, most, prog, tleast, tmost, tprog, take_most, buf, pos, n)
 * -> (pos, k, taken): records of 16-byte headers (seconds, fraction, captured length,
 * original length) and their packets. */
static PyObject *scan_pcap(PyObject *self, PyObject *args)
{
    int little;
    Loop L;
    Py_ssize_t pos, n, k = 0;
    if (!PyArg_ParseTuple(args, "pLLy*LLy*ny*nn", &little, &L.least, &L.most, &L.pb, &L.tleast,
                          &L.tmost, &L.tb, &L.take_most, &L.bb, &pos, &n))
        return NULL;
    PyObject *taken = PyList_New(0);
    int ok = taken != NULL && checked(&L, pos, n) == 0;
    if (ok) {
        const unsigned char *b = L.bb.buf;
        while (pos + REC_HDR <= n) {
            int64_t s = pos + REC_HDR, len = u32(b + pos + REC_INCL, little), e = s + len;
            if (e > n)
                break;
            int j = judge(&L, b + s, len);
            if (j == 0)
                break;
            if (j == 2 && take(taken, k, pos) < 0) {
                ok = 0;
                break;
            }
            pos = e;
            k++;
            if (j == 2 && PyList_GET_SIZE(taken) >= 2 * L.take_most)
                break;
        }
    }
    return done(&L, ok, pos, k, taken);
}

/* epb(little, iface, least, most, max_block, block_type, prog, tleast, tmost, tprog,
 * take_most, buf, pos, n) -> (pos, k, taken): enhanced packet blocks of one interface (type,
 * total length, interface, timestamp in two words, captured length, original length, then
 * the packet). */
static PyObject *scan_epb(PyObject *self, PyObject *args)
{
    int little;
    long long iface, max_block, block_type;
    Loop L;
    Py_ssize_t pos, n, k = 0;
    if (!PyArg_ParseTuple(args, "pLLLLLy*LLy*ny*nn", &little, &iface, &L.least, &L.most,
                          &max_block, &block_type, &L.pb, &L.tleast, &L.tmost, &L.tb,
                          &L.take_most, &L.bb, &pos, &n))
        return NULL;
    PyObject *taken = PyList_New(0);
    int ok = taken != NULL && checked(&L, pos, n) == 0;
    if (ok) {
        const unsigned char *b = L.bb.buf;
        while (pos + EPB_DATA <= n) {
            int64_t bt = u32(b + pos + EPB_TYPE, little), bl = u32(b + pos + EPB_LEN, little);
            int64_t ifc = u32(b + pos + EPB_IFACE, little), incl = u32(b + pos + EPB_INCL, little);
            if (bt != block_type || ifc != iface || (bl & 3) || bl < 32 || bl > max_block
                    || pos + bl > n || 20 + incl > bl - 12)
                break;
            int j = judge(&L, b + pos + EPB_DATA, incl);
            if (j == 0)
                break;
            if (j == 2 && take(taken, k, pos) < 0) {
                ok = 0;
                break;
            }
            pos += bl;
            k++;
            if (j == 2 && PyList_GET_SIZE(taken) >= 2 * L.take_most)
                break;
        }
    }
    return done(&L, ok, pos, k, taken);
}

/* crc(tables, init, xorout, prefix, mask, data, start, end) -> int: a reflected CRC of up
 * to 32 bits over prefix, then data[start:end] with mask ORed into its first bytes (the
 * variant fields set to ones), without copying the packet (_crc.h). */
static PyObject *crc(PyObject *self, PyObject *args)
{
    Py_buffer tb, pb, mb, db;
    unsigned long init, xorout;
    Py_ssize_t start, end;
    if (!PyArg_ParseTuple(args, "y*kky*y*y*nn", &tb, &init, &xorout, &pb, &mb, &db, &start,
                          &end))
        return NULL;
    PyObject *out = NULL;
    if (tb.len != CRC_TABLE_WORDS * (Py_ssize_t)sizeof(uint32_t)
            || (uintptr_t)tb.buf % sizeof(uint32_t) || start < 0 || end < start
            || end > db.len) {
        PyErr_SetString(PyExc_ValueError, "crc: eight aligned 256-word tables and "
                        "0 <= start <= end <= len(data)");
    } else {
        out = PyLong_FromUnsignedLong(crc_masked(
            tb.buf, (uint32_t)init, (uint32_t)xorout, pb.buf, pb.len, mb.buf, mb.len,
            (const unsigned char *)db.buf + start, end - start));
    }
    PyBuffer_Release(&tb);
    PyBuffer_Release(&pb);
    PyBuffer_Release(&mb);
    PyBuffer_Release(&db);
    return out;
}

static PyMethodDef methods[] = {
    {"pcap", scan_pcap, METH_VARARGS,
     "pcap(little, least, most, prog, tleast, tmost, tprog, take_most, buf, pos, n) -> "
     "(pos, k, taken): pass the k pcap records from pos whose frames pass prog (skipped) or "
     "tprog (taken: (index, position) of each in taken, flat), at most take_most taken."},
    {"epb", scan_epb, METH_VARARGS,
     "epb(little, iface, least, most, max_block, block_type, prog, tleast, tmost, tprog, "
     "take_most, buf, pos, n) -> (pos, k, taken): the same over the enhanced packet blocks of "
     "iface."},
    {"crc", crc, METH_VARARGS,
     "crc(tables, init, xorout, prefix, mask, data, start, end) -> int: a reflected CRC by "
     "its slicing-by-8 tables over prefix and data[start:end], mask ORed into the latter's "
     "first bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan",
    "The pcap/pcapng readers' loops over runs of skipped frames (pcapio._scanners) and the "
    "CRCs with their variant-field mask (crc.py), in C.",
    -1, methods,
};

int add_mad_decoder(PyObject *module); /* _mad.c */
int add_sa_intake(PyObject *module); /* _intake.c */
int add_rows(PyObject *module); /* _rows.c */
int add_frame_test(PyObject *module); /* _frametest.c */
int add_fact_json(PyObject *module); /* _factjson.c */

PyMODINIT_FUNC PyInit__scan(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (PyModule_AddIntConstant(m, "REC_HDR", REC_HDR) < 0
                      || PyModule_AddIntConstant(m, "EPB_DATA", EPB_DATA) < 0
                      || add_mad_decoder(m) < 0 || add_sa_intake(m) < 0
                      || add_rows(m) < 0 || add_frame_test(m) < 0 || add_fact_json(m) < 0))
        Py_CLEAR(m);
    return m;
}
