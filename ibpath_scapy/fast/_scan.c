/* The pcap and pcapng readers' loops over runs of skipped frames (pcapio._SCAN_SOURCE), in C,
 * and the CRCs with their variant fields as ones (crc.py).
 *
 * Format-agnostic: what a frame is tested for comes in as a program, the terms of the
 * pre-filter's RunTest (pcapio.Term, packed by pcapio._program) that the fast path derives
 * from the Scapy layers; the Python loops run the same terms. Each loop checks what its
 * Python twin checks, in the same order, and stops where that one stops, so the readers
 * see the same (pos, k) whichever ran (tests/test_native_scan.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_crc.h"

enum { KIND_EQUALS = 0, KIND_LEN_MINUS = 1, KIND_NOT_IN = 2, TERM_WORDS = 8 };

static inline uint32_t u32(const unsigned char *p, int little)
{
    return little ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
                  : (uint32_t)p[3] | (uint32_t)p[2] << 8 | (uint32_t)p[1] << 16 | (uint32_t)p[0] << 24;
}

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
        default:
            for (int64_t j = 0; j < t[7]; j++)
                if (prog[t[6] + j] == v) return 0;
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
                || t[4] < KIND_EQUALS || t[4] > KIND_NOT_IN || t[6] < 0 || t[7] < 0
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

/* The program, or NULL with the error set when it is malformed, its terms reach past the
 * least frame length, or pos..n is not within the buffer. */
static const int64_t *checked(Py_buffer *pb, Py_buffer *bb, long long least, Py_ssize_t pos,
                              Py_ssize_t n)
{
    const int64_t *prog = program(pb);
    if (prog && (least < reach(prog) || n > bb->len || pos < 0)) {
        PyErr_SetString(PyExc_ValueError, "scan bounds outside the buffer or the frames");
        return NULL;
    }
    return prog;
}

/* (pos, k), or NULL when the program was refused; the buffers released either way. */
static PyObject *done(Py_buffer *pb, Py_buffer *bb, const int64_t *prog, Py_ssize_t pos,
                      Py_ssize_t k)
{
    PyBuffer_Release(pb);
    PyBuffer_Release(bb);
    return prog ? Py_BuildValue("(nn)", pos, k) : NULL;
}

/* pcap(little, least, most, prog, buf, pos, n) -> (pos, k): records of 16-byte headers
 * (seconds, fraction, captured length, original length) and their packets. */
static PyObject *scan_pcap(PyObject *self, PyObject *args)
{
    int little;
    long long least, most;
    Py_buffer pb, bb;
    Py_ssize_t pos, n;
    if (!PyArg_ParseTuple(args, "pLLy*y*nn", &little, &least, &most, &pb, &bb, &pos, &n))
        return NULL;
    const int64_t *prog = checked(&pb, &bb, least, pos, n);
    Py_ssize_t k = 0;
    if (prog) {
        const unsigned char *b = bb.buf;
        while (pos + 16 <= n) {
            int64_t s = pos + 16, len = u32(b + pos + 8, little), e = s + len;
            if (e > n || len < least || len > most || !passes(b + s, len, prog))
                break;
            pos = e;
            k++;
        }
    }
    return done(&pb, &bb, prog, pos, k);
}

/* epb(little, iface, least, most, max_block, block_type, prog, buf, pos, n) -> (pos, k):
 * enhanced packet blocks of one interface (type, total length, interface, timestamp in two
 * words, captured length, original length, then the packet). */
static PyObject *scan_epb(PyObject *self, PyObject *args)
{
    int little;
    long long iface, least, most, max_block, block_type;
    Py_buffer pb, bb;
    Py_ssize_t pos, n;
    if (!PyArg_ParseTuple(args, "pLLLLLy*y*nn", &little, &iface, &least, &most, &max_block,
                          &block_type, &pb, &bb, &pos, &n))
        return NULL;
    const int64_t *prog = checked(&pb, &bb, least, pos, n);
    Py_ssize_t k = 0;
    if (prog) {
        const unsigned char *b = bb.buf;
        while (pos + 28 <= n) {
            int64_t bt = u32(b + pos, little), bl = u32(b + pos + 4, little);
            int64_t ifc = u32(b + pos + 8, little), incl = u32(b + pos + 20, little);
            if (bt != block_type || ifc != iface || (bl & 3) || bl < 32 || bl > max_block
                    || pos + bl > n || 20 + incl > bl - 12)
                break;
            if (incl < least || incl > most || !passes(b + pos + 28, incl, prog))
                break;
            pos += bl;
            k++;
        }
    }
    return done(&pb, &bb, prog, pos, k);
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
     "pcap(little, least, most, prog, buf, pos, n) -> (pos, k): skip the k pcap records "
     "from pos whose frames pass prog."},
    {"epb", scan_epb, METH_VARARGS,
     "epb(little, iface, least, most, max_block, block_type, prog, buf, pos, n) -> (pos, k): "
     "skip the k enhanced packet blocks of iface from pos whose frames pass prog."},
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

PyMODINIT_FUNC PyInit__scan(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && add_mad_decoder(m) < 0)
        Py_CLEAR(m);
    return m;
}
