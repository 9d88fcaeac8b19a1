/* The fast path's MAD decoder in C: FastDecoder.decode_at (fast/decoder.py) for the SA, CM
 * and classless MADs of the frames the pre-filter took as plain GSI datagrams (MadAt, IbMadAt).
 *
 * Format-agnostic, as _scan.c is: every offset, length and mask comes in a plan the Python
 * decoder builds from the layers (fast/decoder.py mad_decoder), and every value is the Python decoder's:
 * its flyweight tables, and the functions that make an entry on a miss (the compiled
 * extractors of fast/layout.py). What is left to this code is what the Python loop spent
 * its time on: cutting the keys, looking them up, checking the CRCs and building the tuples
 * the assembler takes. A frame it does not take (a CM message with a field of a kind it
 * does not read, a MAD class without a layer here, a plan entry it lacks) comes back as
 * None, and the Python decoder reads it.
 * tests/test_native_scan.py checks both give the same records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <arpa/inet.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_capture.h"
#include "_crc.h"
#include "_pyhelp.h"

enum { KEY_MAX = 96, MAX_RANGES = 8, MAX_IHL = 16, MAX_STEPS = 16 };
/* what the routes table says of a MAD class and attribute: fast/decoder.py ROUTE_* */
/* an SA MAD whose records record plan k reads has route ROUTE_SA_RECORDS + k */
enum { ROUTE_PYTHON = 0, ROUTE_SA_OTHER = 1, ROUTE_PLAIN = 2, ROUTE_SA_RECORDS = 3 };
/* the MAD header fields the route and the names are told by (Tables.mad_plan's which) */
enum { WHICH_METHOD, WHICH_CLASS, WHICH_ATTRIBUTE, WHICH_STATUS, WHICH_N };

typedef struct { Py_ssize_t at, off, len; } Range; /* len bytes at at_tuple[at] + off */
/* one field of a fixed layout (layout_model's step): nbytes at off, then shifted and masked */
typedef struct { Py_ssize_t off, nbytes, shift; uint64_t mask; int little; } Step;
typedef struct { Py_ssize_t n; Range r[MAX_RANGES]; } KeySpec;
typedef struct { Py_buffer t; uint32_t init, xorout; } Crc;
/* A record plan's reading in C (RecordPlan.c_steps): its fact's fields in order, each an
 * integer step or a 16-byte GID (gid: text as inet_ntop writes it), and its reserved
 * fields; the fact made by calling its class. n_steps -1: no C reading (the plan's make). */
typedef struct { Step st; int gid; } FactStep;
/* How a fact class's __new__ fills its slots (facts/records.py construction): the offsets
 * of the slots its parameters fill, in their order, then of those of its fixed fields, and
 * their values. new_fact stores there, as the Python __new__ does, without calling it. */
typedef struct {
    PyTypeObject *type; /* borrowed: the plan holds it */
    Py_ssize_t n_args, n_fixed;
    Py_ssize_t *off;
    PyObject **fixed;
} FactLayout;
/* A flyweight table's traffic since it was last emptied: lookups and hits; and how many
 * lookups still go past it. A table that fills up with fewer than one hit in FLY_HIT_SHARE
 * lookups is not asked for the next FLY_SKIP times its size: an SA storm's MAD headers
 * (unique TIDs) and PathRecords are nearly all new, and each miss costs a key made, hashed,
 * stored and, once the table is full, let go. */
typedef struct {
    Py_ssize_t lookups, hits, skip;
} Fly;
/* bench capture 3 decode (native IB, 200k frames): 0.87 -> 0.80 s CPU median of 5 (-8 %),
 * best 0.86 -> 0.77 (-10 %); bench/README.md */
enum { FLY_HIT_SHARE = 8, FLY_SKIP = 8 };

typedef struct {
    PyObject *table, *make, *fact; /* borrowed: self->record_plans holds them */
    Fly fly;
    Py_ssize_t size, n_steps, n_reserved;
    FactStep *steps;
    Step *reserved;
    FactLayout layout;
} RecordPlan;
/* A CM message's reading (fast/decoder.py cm_plan): its fact, made with the message's name
 * first, and for a REQ its paths' fact (req.n_steps -1: none). */
typedef struct {
    PyObject *name; /* borrowed: self->cm_plans holds it */
    RecordPlan msg, req;
} CmPlan;

typedef struct {
    PyObject_HEAD
    PyObject *mads, *rmpps, *sas, *wheres; /* flyweight tables */
    Fly mad_fly; /* the mads table's traffic */
    PyObject *make_rmpp, *make_sa, *make_where;
    /* per entry of the SA attribute table, (records table, make, record size): the
     * flyweight table of its records, what makes (fact, reserved) on a miss, its size */
    PyObject *record_plans;
    RecordPlan *plans;
    Py_ssize_t n_plans;
    PyObject *gids; /* GID text by its 16 bytes, shared with fast/layout.py's gid_text */
    Py_ssize_t gids_max;
    /* the Mad fact: its class, its fields' steps, its names (made by make_names on a miss),
     * and where the frame goes by its class and attribute (made by route_of on a miss) */
    PyObject *mad_class, *names, *make_names, *routes, *route_of;
    Step mad_steps[MAX_STEPS];
    Py_ssize_t n_mad_steps, which[WHICH_N];
    /* the names key and the route key pack those fields' values by their widths */
    int names_shift[WHICH_N], route_shift;
    /* an SA MAD's RMPP and SA header facts, its record count and stride (made by count and
     * stride on a miss), by its header bytes, route, remaining bytes and the MAD fields
     * count and stride read (count_reads) */
    PyObject *shapes, *count, *stride, *whole_python;
    Step count_reads[MAX_STEPS];
    Py_ssize_t n_count_reads;
    PyObject *madat, *ibmadat, *saparts;
    /* frame(): the test of an RMPP header whose MAD carries its own records (asked once per
     * shape), the record's class, its kind by MAD class, the route of PathRecords (a route of
     * records of another attribute puts them under sa_records) */
    PyObject *own_records, *mad_frame, *kinds, *kind_of;
    Py_ssize_t path_record_route;
    /* frame()'s RMPP DATA segments: the test of a segment's header (asked once per shape)
     * and the errors of records with reserved bits set (facts/assemble.py) */
    PyObject *segment_test, *reserved_errors;
    /* the CM messages read here, by route - route_cm (fast/decoder.py ROUTE_CM: the record
     * plans' routes stay below it) */
    Py_ssize_t route_cm;
    PyObject *cm_plans;
    CmPlan *cms;
    Py_ssize_t n_cms;
    PyObject *construction;
    FactLayout mad_layout, frame_layout;
    /* a RoCEv2 frame's where tuple (fast/decoder.py rocev2_where), made here on a miss: its
     * encapsulation's name, the address texts by their bytes (shared with _ip_text), and
     * where its destination and source QPs are (MadAt index, step) */
    PyObject *rocev2, *addrs;
    Py_ssize_t addrs_max, qp_at[2];
    Step qps[2];
    PyObject *errors[4]; /* no error, ICRC, VCRC, both */
    PyObject *mad_size_obj, *prefix, *ipv4_masks, *ipv6_mask;
    PyObject *local_mask, *global_mask, *global_short_mask;
    Py_ssize_t cache_max, mad_len, sa_start, data_start, mad_size;
    Py_ssize_t version_off, version_shift, version_mask, ipv4_version;
    Py_ssize_t ihl_off, ihl_shift, ihl_mask, lnh_off, lnh_shift, lnh_mask, lnh_global;
    Py_ssize_t grh_end, icrc_len, vcrc_len;
    KeySpec where_v4, where_v6, where_local, where_global;
    Crc icrc, vcrc;
    int crcs_held;
} MadDecoder;

/* the names frame() reads and calls by (add_mad_decoder) */
static PyObject *str_transaction_id, *str_attribute_id, *str_method, *str_segment_number,
    *str_rmpp_flags, *str_dropped, *str_rmpp_dropped, *str_problems, *str_add, *one;

/* -- the plan ------------------------------------------------------------------------------ */
static PyObject *plan_get(PyObject *plan, const char *name)
{
    return PyObject_GetAttrString(plan, name); /* new reference, or NULL with the error */
}

static int plan_int(PyObject *plan, const char *name, Py_ssize_t *out)
{
    PyObject *v = plan_get(plan, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int plan_obj(PyObject *plan, const char *name, PyObject **out)
{
    *out = plan_get(plan, name);
    return *out == NULL ? -1 : 0;
}

/* The plan's sequence `name` as a fast sequence (a new reference) of at most `most` items,
 * their count in *n; NULL with the error set. */
static PyObject *plan_seq(PyObject *plan, const char *name, Py_ssize_t most, Py_ssize_t *n)
{
    PyObject *v = plan_get(plan, name);
    PyObject *seq = v ? PySequence_Fast(v, name) : NULL;
    Py_XDECREF(v);
    if (seq != NULL && (*n = PySequence_Fast_GET_SIZE(seq)) > most) {
        PyErr_Format(PyExc_ValueError, "%s: more than %zd items", name, most);
        Py_CLEAR(seq);
    }
    return seq;
}

/* A key's ranges: a sequence of (at index, offset, length). */
static int plan_key(PyObject *plan, const char *name, KeySpec *spec)
{
    PyObject *seq = plan_seq(plan, name, MAX_RANGES, &spec->n);
    Py_ssize_t total = 1, i = 0;
    for (; seq != NULL && i < spec->n; i++) {
        Range *r = &spec->r[i];
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "nnn", &r->at, &r->off,
                              &r->len))
            break;
        if (r->at < 0 || r->off < 0 || r->len <= 0) {
            PyErr_Format(PyExc_ValueError, "%s: a range out of bounds", name);
            break;
        }
        total += r->len;
    }
    if (seq != NULL && i == spec->n && total > KEY_MAX)
        PyErr_Format(PyExc_ValueError, "%s: a key over %d bytes", name, KEY_MAX);
    Py_XDECREF(seq);
    return PyErr_Occurred() ? -1 : 0;
}

/* A fixed layout's steps: a sequence of (offset, nbytes, shift, mask, little-endian). */
static int plan_steps(PyObject *plan, const char *name, Step *steps, Py_ssize_t *n)
{
    PyObject *seq = plan_seq(plan, name, MAX_STEPS, n);
    for (Py_ssize_t i = 0; seq != NULL && i < *n; i++) {
        Step *st = &steps[i];
        unsigned long long mask;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "nnnKi", &st->off, &st->nbytes,
                              &st->shift, &mask, &st->little))
            break;
        st->mask = mask;
        if (st->off < 0 || st->nbytes < 1 || st->nbytes > 8 || st->shift < 0
                || st->shift >= 64) {
            PyErr_Format(PyExc_ValueError, "%s: a step out of bounds", name);
            break;
        }
    }
    Py_XDECREF(seq);
    return PyErr_Occurred() ? -1 : 0;
}

static int bits_of(uint64_t mask)
{
    int n = 0;
    while (mask) {
        n++;
        mask >>= 1;
    }
    return n;
}

/* Where each WHICH_* field goes in the names key (method, class, attribute, status, from
 * the top) and the class in the route key (above the attribute): 0, or -1 with the error
 * set when they do not fit 64 bits. */
static int key_shifts(MadDecoder *self)
{
    int at = 0;
    for (int i = WHICH_N - 1; i >= 0; i--) {
        self->names_shift[i] = at;
        at += bits_of(self->mad_steps[self->which[i]].mask);
    }
    self->route_shift = bits_of(self->mad_steps[self->which[WHICH_ATTRIBUTE]].mask);
    if (at > 64 || self->route_shift + bits_of(self->mad_steps[self->which[WHICH_CLASS]].mask) > 64) {
        PyErr_SetString(PyExc_ValueError, "mad_which: the fields do not fit a 64-bit key");
        return -1;
    }
    return 0;
}

/* The positions, among the steps, of the fields WHICH_* names. */
static int plan_which(PyObject *plan, const char *name, Py_ssize_t *which, Py_ssize_t n)
{
    PyObject *v = plan_get(plan, name);
    if (v == NULL)
        return -1;
    int ok = PyArg_ParseTuple(v, "nnnn", &which[0], &which[1], &which[2], &which[3]) ? 0 : -1;
    Py_DECREF(v);
    for (int i = 0; ok == 0 && i < WHICH_N; i++)
        if (which[i] < 0 || which[i] >= n) {
            PyErr_Format(PyExc_ValueError, "%s: a field beyond the steps", name);
            ok = -1;
        }
    return ok;
}

static int plan_crc(PyObject *plan, const char *name, Crc *c)
{
    PyObject *v = plan_get(plan, name);
    PyObject *tables;
    unsigned long init, xorout;
    int ok = -1;
    if (v == NULL)
        return -1;
    if (PyArg_ParseTuple(v, "Okk", &tables, &init, &xorout)
            && PyObject_GetBuffer(tables, &c->t, PyBUF_SIMPLE) == 0) {
        if (c->t.len != CRC_TABLE_WORDS * (Py_ssize_t)sizeof(uint32_t)
                || (uintptr_t)c->t.buf % sizeof(uint32_t)) {
            PyBuffer_Release(&c->t);
            PyErr_Format(PyExc_ValueError, "%s: eight aligned 256-word tables", name);
        } else {
            c->init = (uint32_t)init;
            c->xorout = (uint32_t)xorout;
            ok = 0;
        }
    }
    Py_DECREF(v);
    return ok;
}

/* One step of a plan's sequence: (offset, nbytes, shift, mask, little-endian), bounded by
 * `size` bytes. */
static int parse_step(PyObject *item, Step *st, Py_ssize_t size)
{
    unsigned long long mask;
    if (!PyArg_ParseTuple(item, "nnnKi", &st->off, &st->nbytes, &st->shift, &mask, &st->little))
        return -1;
    st->mask = mask;
    if (st->off < 0 || st->nbytes < 1 || st->nbytes > 8 || st->shift < 0 || st->shift >= 64
            || st->off + st->nbytes > size) {
        PyErr_SetString(PyExc_ValueError, "record plan: a step out of bounds");
        return -1;
    }
    return 0;
}

static uint64_t step_value(const Step *st, const unsigned char *p);
static PyObject *addr_text(PyObject *table, Py_ssize_t most, const unsigned char *p,
                           Py_ssize_t len);

/* rocev2_qps: ((MadAt index, step) of the destination QP, and of the source QP). */
static int plan_qps(PyObject *plan, MadDecoder *self)
{
    Py_ssize_t n;
    PyObject *seq = plan_seq(plan, "rocev2_qps", 2, &n);
    int ok = seq != NULL && n == 2;
    for (Py_ssize_t i = 0; ok && i < 2; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *step;
        ok = PyArg_ParseTuple(item, "nO", &self->qp_at[i], &step)
             && parse_step(step, &self->qps[i], 64) == 0 && self->qp_at[i] >= 0
             && self->qp_at[i] < 6;
    }
    Py_XDECREF(seq);
    if (!ok && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "MadDecoder: rocev2_qps: two (index, step) expected");
    return ok ? 0 : -1;
}

/* The layout of fact class cls (construction(cls): its parameters, then its fixed fields),
 * to be made from n_args values: 0, or -1 with a ValueError where the class is not a fact
 * of slots alone, each filled by exactly one parameter or fixed field. */
static int fact_layout(PyObject *construction, PyObject *cls, Py_ssize_t n_args, FactLayout *l)
{
    PyObject *how = NULL, *params, *fixed;
    int ok = 0;
    memset(l, 0, sizeof *l);
    if (!PyType_Check(cls) || (how = PyObject_CallOneArg(construction, cls)) == NULL)
        goto out;
    PyTypeObject *t = (PyTypeObject *)cls;
    if (!PyTuple_Check(how) || PyTuple_GET_SIZE(how) != 2
            || !PyTuple_Check(params = PyTuple_GET_ITEM(how, 0))
            || !PyTuple_Check(fixed = PyTuple_GET_ITEM(how, 1))
            || PyTuple_GET_SIZE(params) != n_args || t->tp_dictoffset || t->tp_weaklistoffset
            || t->tp_itemsize || t->tp_alloc == NULL)
        goto out;
    Py_ssize_t n = n_args + PyTuple_GET_SIZE(fixed);
    if (t->tp_basicsize != (Py_ssize_t)sizeof(PyObject) + n * (Py_ssize_t)sizeof(PyObject *))
        goto out;
    l->type = t;
    l->n_args = n_args;
    l->n_fixed = n - n_args;
    l->off = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    l->fixed = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    if (l->off == NULL || l->fixed == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(i < n_args ? params : fixed, i < n_args ? i : i - n_args);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2)
            goto out;
        if ((l->off[i] = slot_offset(cls, PyTuple_GET_ITEM(item, 0))) == -2)
            goto out;
        if (l->off[i] < (Py_ssize_t)sizeof(PyObject) || l->off[i] >= t->tp_basicsize)
            goto out;
        for (Py_ssize_t j = 0; j < i; j++)
            if (l->off[j] == l->off[i])
                goto out;
        if (i >= n_args) {
            l->fixed[i - n_args] = PyTuple_GET_ITEM(item, 1);
            Py_INCREF(l->fixed[i - n_args]);
        }
    }
    ok = 1;
out:
    Py_XDECREF(how);
    if (!ok && !PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "MadDecoder: %R is not a fact of %zd slots it can fill",
                     cls, n_args);
    return ok ? 0 : -1;
}

static void fact_layout_clear(FactLayout *l)
{
    for (Py_ssize_t i = 0; l->fixed != NULL && i < l->n_fixed; i++)
        Py_XDECREF(l->fixed[i]);
    PyMem_Free(l->fixed);
    PyMem_Free(l->off);
    memset(l, 0, sizeof *l);
}

/* A new fact of layout l from its parameters' values (borrowed), as its Python __new__
 * makes it: NULL with the error set. */
/* bench capture 3 decode (native IB, 200k frames): 1.31 -> 1.05 s CPU (-20 %), bench/README.md */
static PyObject *new_fact(const FactLayout *l, PyObject *const *args)
{
    PyObject *o = l->type->tp_alloc(l->type, 0);
    if (o == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < l->n_args + l->n_fixed; i++) {
        PyObject *v = i < l->n_args ? args[i] : l->fixed[i - l->n_args];
        Py_INCREF(v);
        *(PyObject **)((char *)o + l->off[i]) = v;
    }
    return o;
}

/* Fill rp's steps, reserved steps and fact layout (rp->size set: the bytes they read
 * within) from a plan's fact class, steps ((offset, nbytes, shift, mask, little, gid)
 * each) and reserved steps; `lead` arguments come before the steps' values (a CM message's
 * name). 0, or -1 with the error set. */
static int fact_steps(MadDecoder *self, PyObject *fact, PyObject *steps, PyObject *reserved,
                      Py_ssize_t lead, RecordPlan *rp)
{
    if (!PyCallable_Check(fact) || !PyTuple_Check(steps) || !PyTuple_Check(reserved))
        goto bad;
    rp->fact = fact;
    Py_ssize_t n = PyTuple_GET_SIZE(steps), r = PyTuple_GET_SIZE(reserved);
    rp->steps = PyMem_Calloc(n ? n : 1, sizeof(FactStep));
    rp->reserved = PyMem_Calloc(r ? r : 1, sizeof(Step));
    if (rp->steps == NULL || rp->reserved == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyTuple_GET_ITEM(steps, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) != 6)
            goto bad;
        FactStep *fs = &rp->steps[i];
        fs->gid = PyObject_IsTrue(PyTuple_GET_ITEM(s, 5));
        if (fs->gid) {  /* a GID: 16 bytes at the offset */
            fs->st.off = PyLong_AsSsize_t(PyTuple_GET_ITEM(s, 0));
            if (fs->st.off < 0 || fs->st.off + 16 > rp->size)
                goto bad;
            continue;
        }
        PyObject *head = PyTuple_GetSlice(s, 0, 5);
        int bad_step = head == NULL || parse_step(head, &fs->st, rp->size) < 0;
        Py_XDECREF(head);
        if (bad_step)
            return -1;
    }
    for (Py_ssize_t i = 0; i < r; i++)
        if (parse_step(PyTuple_GET_ITEM(reserved, i), &rp->reserved[i], rp->size) < 0)
            return -1;
    if (fact_layout(self->construction, fact, lead + n, &rp->layout) < 0)
        return -1;
    rp->n_steps = n;
    rp->n_reserved = r;
    return 0;
bad:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "MadDecoder: a fact's steps of the wrong kind");
    return -1;
}

/* record_plans: a tuple of (dict, make, size > 0, fact class or None, steps or None,
 * reserved steps or None); steps: (offset, nbytes, shift, mask, little, gid). Parsed into
 * self->plans; -1 with the error set. */
static int parse_record_plans(MadDecoder *self)
{
    PyObject *plans = self->record_plans;
    if (!PyTuple_Check(plans) || self->route_cm > 255 || self->route_cm <= ROUTE_SA_RECORDS
            || PyTuple_GET_SIZE(plans) > self->route_cm - ROUTE_SA_RECORDS)
        goto bad;
    self->n_plans = PyTuple_GET_SIZE(plans);
    self->plans = PyMem_Calloc(self->n_plans ? self->n_plans : 1, sizeof(RecordPlan));
    if (self->plans == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < self->n_plans; k++) {
        PyObject *p = PyTuple_GET_ITEM(plans, k);
        RecordPlan *rp = &self->plans[k];
        if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 6
                || !PyDict_CheckExact(PyTuple_GET_ITEM(p, 0))
                || !PyCallable_Check(PyTuple_GET_ITEM(p, 1))
                || !PyLong_Check(PyTuple_GET_ITEM(p, 2)))
            goto bad;
        rp->table = PyTuple_GET_ITEM(p, 0);
        rp->make = PyTuple_GET_ITEM(p, 1);
        rp->size = PyLong_AsSsize_t(PyTuple_GET_ITEM(p, 2));
        rp->n_steps = -1;
        if (rp->size < 1)
            goto bad;
        PyObject *fact = PyTuple_GET_ITEM(p, 3), *steps = PyTuple_GET_ITEM(p, 4),
                 *reserved = PyTuple_GET_ITEM(p, 5);
        if (fact == Py_None)
            continue;
        if (fact_steps(self, fact, steps, reserved, 0, rp) < 0)
            return -1;
    }
    return 0;
bad:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "MadDecoder: a record plan of the wrong kind");
    return -1;
}

/* cm_plans: a tuple of (name, fact class, steps, paths' fact class or None, its steps or
 * None), steps as a record plan's, within a CM message (size: the MAD after its header).
 * Parsed into self->cms; -1 with the error set. */
/* bench capture 1 audit (native IB, 1M frames): 1.36 -> 0.84 s CPU (-38 %), bench/README.md */
static int parse_cm_plans(MadDecoder *self)
{
    PyObject *plans = self->cm_plans, *none = PyTuple_New(0);
    if (none == NULL)
        return -1;
    int r = -1;
    if (!PyTuple_Check(plans) || PyTuple_GET_SIZE(plans) > 256 - self->route_cm)
        goto bad;
    self->n_cms = PyTuple_GET_SIZE(plans);
    self->cms = PyMem_Calloc(self->n_cms ? self->n_cms : 1, sizeof(CmPlan));
    if (self->cms == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t j = 0; j < self->n_cms; j++) {
        PyObject *p = PyTuple_GET_ITEM(plans, j);
        CmPlan *cp = &self->cms[j];
        cp->msg.n_steps = cp->req.n_steps = -1;
        cp->msg.size = cp->req.size = self->mad_size - self->mad_len;
        if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 5 || !PyUnicode_Check(PyTuple_GET_ITEM(p, 0)))
            goto bad;
        cp->name = PyTuple_GET_ITEM(p, 0);
        if (fact_steps(self, PyTuple_GET_ITEM(p, 1), PyTuple_GET_ITEM(p, 2), none, 1, &cp->msg) < 0)
            goto out;
        if (PyTuple_GET_ITEM(p, 3) != Py_None
                && fact_steps(self, PyTuple_GET_ITEM(p, 3), PyTuple_GET_ITEM(p, 4), none, 0,
                              &cp->req) < 0)
            goto out;
    }
    r = 0;
    goto out;
bad:
    PyErr_SetString(PyExc_ValueError, "MadDecoder: a CM plan of the wrong kind");
out:
    Py_DECREF(none);
    return r;
}

/* Whether a route reads records (and of a plan there is), an SA MAD without records, or a
 * MAD with no layer above it: the routes this code takes. */
static int route_taken(MadDecoder *self, long route)
{
    return route == ROUTE_SA_OTHER || route == ROUTE_PLAIN
        || (route >= ROUTE_SA_RECORDS && route - ROUTE_SA_RECORDS < self->n_plans)
        || (route >= self->route_cm && route - self->route_cm < self->n_cms);
}

static int init(MadDecoder *self, PyObject *args, PyObject *kw)
{
    PyObject *plan, *errors = NULL;
    if (!PyArg_ParseTuple(args, "O", &plan))
        return -1;
    if (plan_obj(plan, "mads", &self->mads) || plan_obj(plan, "rmpps", &self->rmpps)
            || plan_obj(plan, "sas", &self->sas)
            || plan_obj(plan, "construction", &self->construction)
            || plan_obj(plan, "rocev2", &self->rocev2)
            || plan_obj(plan, "addrs", &self->addrs)
            || plan_int(plan, "addrs_max", &self->addrs_max)
            || plan_qps(plan, self)
            || plan_int(plan, "route_cm", &self->route_cm)
            || plan_obj(plan, "record_plans", &self->record_plans)
            || parse_record_plans(self)
            || plan_obj(plan, "gids", &self->gids)
            || plan_int(plan, "gids_max", &self->gids_max)
            || plan_obj(plan, "wheres", &self->wheres)
            || plan_obj(plan, "mad_class", &self->mad_class)
            || plan_obj(plan, "names", &self->names)
            || plan_obj(plan, "make_names", &self->make_names)
            || plan_obj(plan, "routes", &self->routes)
            || plan_obj(plan, "route_of", &self->route_of)
            || plan_steps(plan, "mad_steps", self->mad_steps, &self->n_mad_steps)
            || plan_which(plan, "mad_which", self->which, self->n_mad_steps)
            || key_shifts(self)
            || plan_obj(plan, "make_rmpp", &self->make_rmpp)
            || plan_obj(plan, "make_sa", &self->make_sa)
            || plan_obj(plan, "make_where", &self->make_where)
            || plan_obj(plan, "shapes", &self->shapes)
            || plan_steps(plan, "count_reads", self->count_reads, &self->n_count_reads)
            || plan_obj(plan, "count", &self->count) || plan_obj(plan, "stride", &self->stride)
            || plan_obj(plan, "whole_python", &self->whole_python)
            || plan_obj(plan, "madat", &self->madat)
            || plan_obj(plan, "ibmadat", &self->ibmadat)
            || plan_obj(plan, "saparts", &self->saparts)
            || plan_obj(plan, "own_records", &self->own_records)
            || plan_obj(plan, "segment", &self->segment_test)
            || plan_obj(plan, "kind_of", &self->kind_of)
            || plan_obj(plan, "reserved_errors", &self->reserved_errors)
            || plan_obj(plan, "mad_frame", &self->mad_frame)
            || plan_obj(plan, "kinds", &self->kinds)
            || plan_int(plan, "path_record_route", &self->path_record_route)
            || plan_obj(plan, "prefix", &self->prefix)
            || plan_obj(plan, "ipv4_masks", &self->ipv4_masks)
            || plan_obj(plan, "ipv6_mask", &self->ipv6_mask)
            || plan_obj(plan, "local_mask", &self->local_mask)
            || plan_obj(plan, "global_mask", &self->global_mask)
            || plan_obj(plan, "global_short_mask", &self->global_short_mask)
            || plan_int(plan, "cache_max", &self->cache_max)
            || plan_int(plan, "mad_len", &self->mad_len)
            || plan_int(plan, "sa_start", &self->sa_start)
            || plan_int(plan, "data_start", &self->data_start)
            || plan_int(plan, "mad_size", &self->mad_size)
            || plan_obj(plan, "cm_plans", &self->cm_plans)
            || parse_cm_plans(self)
            || plan_int(plan, "version_off", &self->version_off)
            || plan_int(plan, "version_shift", &self->version_shift)
            || plan_int(plan, "version_mask", &self->version_mask)
            || plan_int(plan, "ipv4_version", &self->ipv4_version)
            || plan_int(plan, "ihl_off", &self->ihl_off)
            || plan_int(plan, "ihl_shift", &self->ihl_shift)
            || plan_int(plan, "ihl_mask", &self->ihl_mask)
            || plan_int(plan, "lnh_off", &self->lnh_off)
            || plan_int(plan, "lnh_shift", &self->lnh_shift)
            || plan_int(plan, "lnh_mask", &self->lnh_mask)
            || plan_int(plan, "lnh_global", &self->lnh_global)
            || plan_int(plan, "grh_end", &self->grh_end)
            || plan_int(plan, "icrc_len", &self->icrc_len)
            || plan_int(plan, "vcrc_len", &self->vcrc_len)
            || plan_key(plan, "where_v4", &self->where_v4)
            || plan_key(plan, "where_v6", &self->where_v6)
            || plan_key(plan, "where_local", &self->where_local)
            || plan_key(plan, "where_global", &self->where_global)
            || plan_obj(plan, "errors", &errors))
        goto fail;
    if (!PyDict_CheckExact(self->mads) || !PyDict_CheckExact(self->rmpps)
            || !PyDict_CheckExact(self->sas) || !PyDict_CheckExact(self->gids) || self->gids_max < 1
            || !PyDict_CheckExact(self->wheres) || !PyDict_CheckExact(self->names)
            || !PyDict_CheckExact(self->routes) || !PyType_Check(self->mad_class)
            || !PyDict_CheckExact(self->shapes)
            || self->data_start - self->mad_len + 1 + 8 * (1 + self->n_count_reads) > KEY_MAX
            || !PyType_Check(self->madat)
            || !PyType_Check(self->ibmadat) || !PyType_Check(self->saparts)
            || !PyType_IsSubtype((PyTypeObject *)self->saparts, &PyTuple_Type)
            || !PyCallable_Check(self->own_records) || !PyType_Check(self->mad_frame)
            || !PyCallable_Check(self->segment_test) || !PyCallable_Check(self->reserved_errors)
            || !PyCallable_Check(self->kind_of)
            || !PyDict_CheckExact(self->kinds) || !PyDict_CheckExact(self->addrs)
            || self->addrs_max < 1
            || !PyBytes_Check(self->prefix) || !PyTuple_Check(self->ipv4_masks)
            || PyTuple_GET_SIZE(self->ipv4_masks) != MAX_IHL || !PyBytes_Check(self->ipv6_mask)
            || !PyBytes_Check(self->local_mask) || !PyBytes_Check(self->global_mask)
            || !PyBytes_Check(self->global_short_mask) || !PyTuple_Check(errors)
            || PyTuple_GET_SIZE(errors) != 4 || self->cache_max < 1
            || (self->icrc_len != 4 && self->icrc_len != 2)
            || (self->vcrc_len != 4 && self->vcrc_len != 2)) {
        PyErr_SetString(PyExc_ValueError, "MadDecoder: a plan entry of the wrong kind");
        goto fail;
    }
    for (int i = 0; i < 4; i++) {
        self->errors[i] = PyTuple_GET_ITEM(errors, i);
        Py_INCREF(self->errors[i]);
    }
    Py_CLEAR(errors);
    if (plan_crc(plan, "icrc", &self->icrc))
        goto fail;
    if (plan_crc(plan, "vcrc", &self->vcrc)) {
        PyBuffer_Release(&self->icrc.t);
        goto fail;
    }
    self->crcs_held = 1;
    if (fact_layout(self->construction, self->mad_class, self->n_mad_steps + 3, &self->mad_layout)
            || fact_layout(self->construction, self->mad_frame, 23, &self->frame_layout))
        return -1;
    self->mad_size_obj = PyLong_FromSsize_t(self->mad_size);
    return self->mad_size_obj == NULL ? -1 : 0;
fail:
    Py_XDECREF(errors);
    return -1;
}

static void dealloc(MadDecoder *self)
{
    PyObject **objs[] = {
        &self->mads, &self->rmpps, &self->sas, &self->record_plans, &self->gids, &self->wheres,
        &self->mad_class,
        &self->names, &self->make_names, &self->routes, &self->route_of, &self->make_rmpp, &self->make_sa,
        &self->make_where, &self->shapes, &self->count,
        &self->stride, &self->whole_python, &self->madat, &self->ibmadat, &self->saparts,
        &self->own_records, &self->mad_frame, &self->kinds, &self->construction,
        &self->segment_test, &self->reserved_errors,
        &self->kind_of,
        &self->rocev2, &self->addrs, &self->cm_plans,
        &self->errors[0], &self->errors[1], &self->errors[2], &self->errors[3],
        &self->mad_size_obj, &self->prefix, &self->ipv4_masks, &self->ipv6_mask,
        &self->local_mask, &self->global_mask, &self->global_short_mask,
    };
    for (Py_ssize_t k = 0; self->plans != NULL && k < self->n_plans; k++) {
        PyMem_Free(self->plans[k].steps);
        PyMem_Free(self->plans[k].reserved);
        fact_layout_clear(&self->plans[k].layout);
    }
    for (Py_ssize_t j = 0; self->cms != NULL && j < self->n_cms; j++) {
        RecordPlan *rps[2] = {&self->cms[j].msg, &self->cms[j].req};
        for (int i = 0; i < 2; i++) {
            PyMem_Free(rps[i]->steps);
            PyMem_Free(rps[i]->reserved);
            fact_layout_clear(&rps[i]->layout);
        }
    }
    fact_layout_clear(&self->mad_layout);
    fact_layout_clear(&self->frame_layout);
    PyMem_Free(self->plans);
    self->plans = NULL;
    PyMem_Free(self->cms);
    self->cms = NULL;
    for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++)
        Py_CLEAR(*objs[i]);
    if (self->crcs_held) {
        PyBuffer_Release(&self->icrc.t);
        PyBuffer_Release(&self->vcrc.t);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* -- per frame ------------------------------------------------------------------------------- */
/* table[key] = v (a new reference, taken), the table emptied first when it holds `most`, as
 * the Python decoder's _remember does: v, or NULL with the error set. */
static PyObject *remember(PyObject *table, Py_ssize_t most, PyObject *key, PyObject *v)
{
    if (v == NULL)
        return NULL;
    if (PyDict_GET_SIZE(table) >= most)
        PyDict_Clear(table);
    if (PyDict_SetItem(table, key, v) < 0)
        Py_CLEAR(v);
    return v;
}

/* Whether the flyweight table of traffic f is to be asked this time (see Fly). */
static int fly_ask(Fly *f)
{
    if (f->skip > 0) {
        f->skip--;
        return 0;
    }
    f->lookups++;
    return 1;
}

/* remember(table, most, key, v) for a table whose traffic is f: a table found full is
 * emptied, and skipped for a while if it hit too seldom. */
static PyObject *fly_remember(Fly *f, PyObject *table, Py_ssize_t most, PyObject *key,
                              PyObject *v)
{
    if (v != NULL && PyDict_GET_SIZE(table) >= most) {
        if (f->hits * FLY_HIT_SHARE < f->lookups)
            f->skip = FLY_SKIP * most;
        f->lookups = f->hits = 0;
    }
    return remember(table, most, key, v);
}

/* table[key], made by make(arg, at) on a miss (remember). A new reference, or NULL with an
 * error set. */
static PyObject *flyweight(MadDecoder *self, PyObject *table, PyObject *key, PyObject *make,
                           PyObject *arg, PyObject *at)
{
    PyObject *v = PyDict_GetItemWithError(table, key);
    if (v != NULL) {
        Py_INCREF(v);
        return v;
    }
    if (PyErr_Occurred())
        return NULL;
    return remember(table, self->cache_max, key, PyObject_CallFunctionObjArgs(make, arg, at, NULL));
}

/* table[data[at:at+len]], made by make(data, at) on a miss. */
static PyObject *flyweight_at(MadDecoder *self, PyObject *table, PyObject *make, PyObject *data,
                              const char *b, Py_ssize_t at, Py_ssize_t len)
{
    PyObject *key = PyBytes_FromStringAndSize(b + at, len);
    if (key == NULL)
        return NULL;
    PyObject *pos = PyLong_FromSsize_t(at);
    PyObject *v = pos == NULL ? NULL : flyweight(self, table, key, make, data, pos);
    Py_XDECREF(pos);
    Py_DECREF(key);
    return v;
}

static uint32_t le(const unsigned char *p, Py_ssize_t n)
{
    return n == 4 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                        | (uint32_t)p[3] << 24
                  : (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t crc_of(const Crc *c, PyObject *prefix, PyObject *mask, const unsigned char *d,
                       Py_ssize_t n)
{
    return crc_masked(c->t.buf, c->init, c->xorout,
                      prefix ? (const unsigned char *)PyBytes_AS_STRING(prefix) : NULL,
                      prefix ? PyBytes_GET_SIZE(prefix) : 0,
                      mask ? (const unsigned char *)PyBytes_AS_STRING(mask) : NULL,
                      mask ? PyBytes_GET_SIZE(mask) : 0, d, n);
}

/* The at-tuple's offsets, as C integers; -1 with no error where an item is not an int. */
static int offsets(PyObject *at, Py_ssize_t *out, Py_ssize_t n)
{
    if (PyTuple_GET_SIZE(at) != n)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(at, i));
        if (out[i] == -1 && PyErr_Occurred())
            return -1;
    }
    return 0;
}

/* The where tuple of a RoCEv2 frame b (n bytes) whose key spec (source and destination
 * addresses, then the QPs) spec read, as fast/decoder.py rocev2_where makes it: a new
 * reference, or NULL with the error set. */
/* bench capture 3 decode (RoCEv2, 200k frames): 1.26 -> 0.95 s CPU (-25 %), bench/README.md */
static PyObject *rocev2_where(MadDecoder *self, const unsigned char *b, Py_ssize_t n,
                              const KeySpec *spec, const Py_ssize_t *offs)
{
    PyObject *v = NULL, *item[4] = {NULL};
    if (spec->n < 2 || (spec->r[0].len != 4 && spec->r[0].len != 16)
            || spec->r[1].len != spec->r[0].len) {
        PyErr_SetString(PyExc_ValueError, "MadDecoder: a RoCEv2 where key without addresses");
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        const Range *r = &spec->r[i];
        if ((item[i] = addr_text(self->addrs, self->addrs_max, b + offs[r->at] + r->off,
                                 r->len)) == NULL)
            goto out;
        Py_ssize_t at = offs[self->qp_at[i]];
        if (at < 0 || at + self->qps[i].off + self->qps[i].nbytes > n) {
            PyErr_SetString(PyExc_ValueError, "MadDecoder: a QP past the frame");
            goto out;
        }
        if ((item[2 + i] = PyLong_FromUnsignedLongLong(step_value(&self->qps[i], b + at))) == NULL)
            goto out;
    }
    v = PyTuple_Pack(7, self->rocev2, item[0], item[1], Py_None, Py_None, item[2], item[3]);
out:
    for (int i = 0; i < 4; i++)
        Py_XDECREF(item[i]);
    return v;
}

/* The where tuple (assemble.ADDRESS_KEYS) of the frame: the wheres table by the bytes its
 * values are read from, made on a miss here (RoCEv2: an SA storm's pairs miss the table) or
 * by make_where(data, at). */
static PyObject *where_of(MadDecoder *self, PyObject *data, PyObject *at, const KeySpec *spec,
                          const Py_ssize_t *offs, Py_ssize_t noffs, int which)
{
    unsigned char key[KEY_MAX];
    const char *b = PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), k = 1;
    key[0] = (unsigned char)which; /* the shape: keys of two shapes never meet */
    for (Py_ssize_t i = 0; i < spec->n; i++) {
        const Range *r = &spec->r[i];
        if (r->at >= noffs || offs[r->at] < 0 || offs[r->at] + r->off + r->len > n)
            return Py_None; /* borrowed sentinel: the Python decoder reads this frame */
        memcpy(key + k, b + offs[r->at] + r->off, r->len);
        k += r->len;
    }
    PyObject *kb = PyBytes_FromStringAndSize((const char *)key, k);
    if (kb == NULL)
        return NULL;
    PyObject *v;
    if (which > 1) { /* native IB: LIDs, QPs and GIDs, which a storm repeats */
        v = flyweight(self, self->wheres, kb, self->make_where, data, at);
    } else if ((v = PyDict_GetItemWithError(self->wheres, kb)) != NULL) {
        Py_INCREF(v);
    } else if (!PyErr_Occurred()) { /* RoCEv2 (IPv4, IPv6) */
        v = remember(self->wheres, self->cache_max, kb,
                     rocev2_where(self, (const unsigned char *)b, n, spec, offs));
    }
    Py_DECREF(kb);
    return v;
}

static uint64_t step_value(const Step *st, const unsigned char *p)
{
    uint64_t v = 0;
    p += st->off;
    for (Py_ssize_t i = 0; i < st->nbytes; i++)
        v |= (uint64_t)p[i] << (8 * (st->little ? i : st->nbytes - 1 - i));
    return (v >> st->shift) & st->mask;
}

/* table[key] for an integer key, made by make(*args) on a miss. */
static PyObject *by_int(MadDecoder *self, PyObject *table, uint64_t k, PyObject *make,
                        PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *key = PyLong_FromUnsignedLongLong(k);
    if (key == NULL)
        return NULL;
    PyObject *v = PyDict_GetItemWithError(table, key);
    if (v != NULL) {
        Py_INCREF(v);
    } else if (!PyErr_Occurred()) {
        v = remember(table, self->cache_max, key, PyObject_Vectorcall(make, args, nargs, NULL));
    }
    Py_DECREF(key);
    return v;
}

/* The Mad fact of the MAD header at p: its fields by the steps, then its names (the names
 * table by method, class, attribute and status), made as assemble.mad_fact_of makes it. */
static PyObject *make_mad(MadDecoder *self, const unsigned char *p)
{
    PyObject *args[MAX_STEPS + 3] = {NULL};
    PyObject *out = NULL, *names = NULL;
    uint64_t which[WHICH_N];
    Py_ssize_t n = self->n_mad_steps;
    for (Py_ssize_t i = 0; i < n; i++)
        if ((args[i] = PyLong_FromUnsignedLongLong(step_value(&self->mad_steps[i], p))) == NULL)
            goto out;
    for (int i = 0; i < WHICH_N; i++)
        which[i] = step_value(&self->mad_steps[self->which[i]], p);
    PyObject *named[WHICH_N] = {args[self->which[0]], args[self->which[1]],
                                args[self->which[2]], args[self->which[3]]};
    uint64_t key = 0;
    for (int i = 0; i < WHICH_N; i++)
        key |= which[i] << self->names_shift[i];
    names = by_int(self, self->names, key, self->make_names, named, WHICH_N);
    if (names == NULL)
        goto out;
    if (!PyTuple_Check(names) || PyTuple_GET_SIZE(names) != 3) {
        PyErr_SetString(PyExc_TypeError, "make_names: three names expected");
        goto out;
    }
    for (int i = 0; i < 3; i++) {
        args[n + i] = PyTuple_GET_ITEM(names, i);
        Py_INCREF(args[n + i]);
    }
    out = new_fact(&self->mad_layout, args);
out:
    for (Py_ssize_t i = 0; i < n + 3; i++)
        Py_XDECREF(args[i]);
    Py_XDECREF(names);
    return out;
}

/* (RMPP fact, SA header fact, record count, stride, own records, segment) of the SA MAD at b[o:],
 * from the shapes table: what the Python decoder's Tables.sa makes of the same bytes, its
 * header_expr functions called only on a miss (an SA storm repeats a few header shapes);
 * own records: own_records_on_wire of its RMPP header (frame() finishes its record);
 * segment: segment_on_wire of it (frame() hands it to the reassembler). */
static PyObject *shape_of(MadDecoder *self, PyObject *data, Py_ssize_t o, PyObject *m,
                          int route, Py_ssize_t remaining)
{
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(data);
    unsigned char key[KEY_MAX];
    Py_ssize_t k = self->data_start - self->mad_len;
    memcpy(key, b + o + self->mad_len, k);
    key[k++] = (unsigned char)route;
    uint64_t vals[1 + MAX_STEPS];
    vals[0] = (uint64_t)remaining;
    for (Py_ssize_t i = 0; i < self->n_count_reads; i++)
        vals[1 + i] = step_value(&self->count_reads[i], b + o);
    memcpy(key + k, vals, 8 * (1 + self->n_count_reads));
    k += 8 * (1 + self->n_count_reads);
    PyObject *kb = PyBytes_FromStringAndSize((const char *)key, k);
    if (kb == NULL)
        return NULL;
    PyObject *shape = PyDict_GetItemWithError(self->shapes, kb);
    if (shape != NULL || PyErr_Occurred()) {
        Py_XINCREF(shape);
        Py_DECREF(kb);
        return shape;
    }
    const char *c = (const char *)b;
    PyObject *r = NULL, *h = NULL, *n = NULL, *stride = NULL, *rem = NULL, *own = NULL;
    r = flyweight_at(self, self->rmpps, self->make_rmpp, data, c, o + self->mad_len,
                     self->sa_start - self->mad_len);
    if (r == NULL)
        goto out;
    {   /* the SA header's fact names its ComponentMask by the record class of the MAD's
         * attribute: keyed by its bytes and the route (Tables.sa's key) */
        Py_ssize_t hl = self->data_start - self->sa_start;
        PyObject *hk = PyBytes_FromStringAndSize(NULL, hl + 1);
        PyObject *pos = hk == NULL ? NULL : PyLong_FromSsize_t(o + self->sa_start);
        if (pos != NULL) {
            memcpy(PyBytes_AS_STRING(hk), c + o + self->sa_start, hl);
            PyBytes_AS_STRING(hk)[hl] = (char)route;
            h = flyweight(self, self->sas, hk, self->make_sa, data, pos);
        }
        Py_XDECREF(pos);
        Py_XDECREF(hk);
    }
    if (h == NULL)
        goto out;
    if (route == ROUTE_SA_OTHER) {
        n = PyLong_FromLong(0); /* no records to read (Tables.sa: None) */
    } else if ((rem = PyLong_FromSsize_t(remaining)) != NULL) {
        n = PyObject_CallFunctionObjArgs(self->count, m, r, h, rem, NULL);
    }
    if (n == NULL)
        goto out;
    Py_ssize_t count = PyLong_AsSsize_t(n);
    if (count == -1 && PyErr_Occurred())
        goto out;
    /* (one record: no stride to compute, as Tables.sa) */
    stride = count > 1 ? PyObject_CallFunctionObjArgs(self->stride, m, r, h, NULL)
                       : PyLong_FromLong(0);
    if (stride == NULL)
        goto out;
    own = PyObject_CallOneArg(self->own_records, r);
    int is_own = own == NULL ? -1 : PyObject_IsTrue(own);
    if (is_own < 0)
        goto out;
    Py_SETREF(own, PyObject_CallOneArg(self->segment_test, r));
    int is_segment = own == NULL ? -1 : PyObject_IsTrue(own);
    if (is_segment < 0)
        goto out;
    shape = remember(self->shapes, self->cache_max, kb,
                     PyTuple_Pack(6, r, h, n, stride, is_own ? Py_True : Py_False,
                                  is_segment ? Py_True : Py_False));
out:
    Py_XDECREF(r);
    Py_XDECREF(h);
    Py_XDECREF(n);
    Py_XDECREF(stride);
    Py_XDECREF(rem);
    Py_XDECREF(own);
    Py_DECREF(kb);
    return shape;
}

/* The text of the address of len (4 or 16) bytes at p, from `table` (made with inet_ntop on
 * a miss, as layers.sa.gid_text and fast/decoder.py _ip_text make it; the table emptied
 * first when it holds `most`): a new reference, or NULL with the error set. */
static PyObject *addr_text(PyObject *table, Py_ssize_t most, const unsigned char *p,
                           Py_ssize_t len)
{
    PyObject *key = PyBytes_FromStringAndSize((const char *)p, len);
    if (key == NULL)
        return NULL;
    PyObject *v = PyDict_GetItemWithError(table, key);
    if (v != NULL) {
        Py_INCREF(v);
    } else if (!PyErr_Occurred()) {
        char text[INET6_ADDRSTRLEN];
        if (inet_ntop(len == 4 ? AF_INET : AF_INET6, p, text, sizeof text) == NULL)
            PyErr_SetFromErrno(PyExc_OSError);
        else
            v = remember(table, most, key, PyUnicode_FromString(text));
    }
    Py_DECREF(key);
    return v;
}

/* The text of the GID at p, from the gids table. */
static PyObject *gid_of(MadDecoder *self, const unsigned char *p)
{
    return addr_text(self->gids, self->gids_max, p, 16);
}

/* The fact of the plan's fields at p, read by its steps (lead, if not NULL, its first
 * argument), made as its class's __new__ makes it: a new reference, or NULL with the error
 * set. */
static PyObject *make_fact(MadDecoder *self, const RecordPlan *rp, const unsigned char *p,
                           PyObject *lead)
{
    PyObject *small[48] = {NULL}, **args = small, *fact = NULL;
    Py_ssize_t k = lead != NULL, n = rp->n_steps + k, made = k;
    if (n > 48 && (args = PyMem_Malloc(n * sizeof(PyObject *))) == NULL)
        return PyErr_NoMemory();
    if (lead != NULL)
        args[0] = Py_NewRef(lead);
    for (; made < n; made++) {
        const FactStep *fs = &rp->steps[made - k];
        args[made] = fs->gid ? gid_of(self, p + fs->st.off)
                             : PyLong_FromUnsignedLongLong(step_value(&fs->st, p));
        if (args[made] == NULL)
            goto out;
    }
    fact = new_fact(&rp->layout, args);
out:
    for (Py_ssize_t i = 0; i < made; i++)
        Py_DECREF(args[i]);
    if (args != small)
        PyMem_Free(args);
    return fact;
}

/* (fact, reserved bits set) of the record at p, as the plan's make makes it: the fact's
 * values read by its steps and its class called with them. */
static PyObject *make_record(MadDecoder *self, const RecordPlan *rp, const unsigned char *p)
{
    PyObject *fact = make_fact(self, rp, p, NULL);
    if (fact == NULL)
        return NULL;
    int reserved = 0;
    for (Py_ssize_t i = 0; i < rp->n_reserved && !reserved; i++)
        reserved = step_value(&rp->reserved[i], p) != 0;
    PyObject *out = PyTuple_Pack(2, fact, reserved ? Py_True : Py_False);
    Py_DECREF(fact);
    return out;
}

/* The plan's (fact, reserved) of the record at b[at:at + size], from its table: made in C
 * on a miss where the plan has C steps, else by its make. */
static PyObject *record_at(MadDecoder *self, RecordPlan *rp, PyObject *data,
                           const char *b, Py_ssize_t at)
{
    if (rp->n_steps < 0)
        return flyweight_at(self, rp->table, rp->make, data, b, at, rp->size);
    Fly *f = &rp->fly;
    if (!fly_ask(f))
        return make_record(self, rp, (const unsigned char *)b + at);
    PyObject *key = PyBytes_FromStringAndSize(b + at, rp->size);
    if (key == NULL)
        return NULL;
    PyObject *v = PyDict_GetItemWithError(rp->table, key);
    if (v != NULL) {
        Py_INCREF(v);
        f->hits++;
    } else if (!PyErr_Occurred()) {
        v = fly_remember(f, rp->table, self->cache_max, key,
                         make_record(self, rp, (const unsigned char *)b + at));
    }
    Py_DECREF(key);
    return v;
}

/* The record facts of `shape` (shape_of's) in b[start:end], read by the record plan of
 * `route`, and whether each has reserved bits set (an empty tuple when none has), from the
 * plan's table: 1, 0 when the records do not fit (the Python decoder reads them), -1 with
 * the error set. */
static int records_of(MadDecoder *self, PyObject *data, PyObject *shape, int route,
                      Py_ssize_t start, Py_ssize_t end, PyObject **records, PyObject **reserved)
{
    const char *b = PyBytes_AS_STRING(data);
    RecordPlan *rp = &self->plans[route - ROUTE_SA_RECORDS];
    Py_ssize_t size = rp->size;
    Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, 2));
    Py_ssize_t stride = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, 3));
    *records = *reserved = NULL;
    if ((n == -1 || stride == -1) && PyErr_Occurred())
        return -1;
    if (n < 0 || stride < 0 || (n > 0 && start + (n - 1) * stride + size > end))
        return 0;
    if ((*reserved = PyTuple_New(0)) == NULL || (*records = PyList_New(n)) == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *known = record_at(self, rp, data, b, start + i * stride);
        if (known == NULL)
            goto fail;
        if (!PyTuple_Check(known) || PyTuple_GET_SIZE(known) != 2) {
            Py_DECREF(known);
            PyErr_SetString(PyExc_TypeError, "record plan: (fact, reserved) expected");
            goto fail;
        }
        PyObject *fact = PyTuple_GET_ITEM(known, 0);
        int bits = PyObject_IsTrue(PyTuple_GET_ITEM(known, 1));
        Py_INCREF(fact);
        PyList_SET_ITEM(*records, i, fact);
        Py_DECREF(known);
        if (bits < 0)
            goto fail;
        if (bits) {
            if (!PyList_Check(*reserved)) { /* the first record with reserved bits */
                Py_DECREF(*reserved);
                if ((*reserved = PyList_New(n)) == NULL)
                    goto fail;
                for (Py_ssize_t j = 0; j < n; j++) {
                    Py_INCREF(Py_False);
                    PyList_SET_ITEM(*reserved, j, Py_False);
                }
            }
            Py_INCREF(Py_True);
            Py_SETREF(PyList_GET_ITEM(*reserved, i), Py_True);
        }
    }
    return 1;
fail:
    Py_CLEAR(*records);
    Py_CLEAR(*reserved);
    return -1;
}

/* SaParts of the SA MAD at b[o:o + mad_size]: its RMPP and SA headers, records (route
 * ROUTE_SA_RECORDS + k: plan k's records) and their reserved flags, its bytes and the reader of a whole message (this
 * decoder: see whole). */
static PyObject *sa_parts(MadDecoder *self, PyObject *data, Py_ssize_t o, PyObject *m,
                          int route, int *own, int *is_segment)
{
    PyObject *shape, *records = NULL, *reserved = NULL, *segment = NULL, *out = NULL;
    Py_ssize_t end = o + self->mad_size, start = o + self->data_start;
    shape = shape_of(self, data, o, m, route, end > start ? end - start : 0);
    if (shape == NULL)
        return NULL;
    *own = PyTuple_GET_ITEM(shape, 4) == Py_True;
    *is_segment = PyTuple_GET_ITEM(shape, 5) == Py_True;
    if (route == ROUTE_SA_OTHER) {
        records = Py_None;
        Py_INCREF(records);
        if ((reserved = PyTuple_New(0)) == NULL)
            goto out;
    } else if (*is_segment) {
        /* a segment's own records are nobody's: mad_frame_at asks only whether they are
         * None (its transfer's are read once it completes) */
        if ((records = PyList_New(0)) == NULL || (reserved = PyTuple_New(0)) == NULL)
            goto out;
    } else {
        int got = records_of(self, data, shape, route, start, end, &records, &reserved);
        if (got <= 0) {
            if (got == 0) { /* not a shape this code takes: the Python decoder reads it */
                out = Py_None;
                Py_INCREF(out);
            }
            goto out;
        }
    }
    segment = PyBytes_FromStringAndSize(PyBytes_AS_STRING(data) + o, self->mad_size);
    if (segment == NULL)
        goto out;
    PyTypeObject *t = (PyTypeObject *)self->saparts;
    out = t->tp_alloc(t, 6);
    if (out == NULL)
        goto out;
    PyObject *items[6] = {PyTuple_GET_ITEM(shape, 0), PyTuple_GET_ITEM(shape, 1), records,
                          reserved, segment, (PyObject *)self};
    for (int i = 0; i < 6; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(out, i, items[i]);
    }
out:
    Py_DECREF(shape);
    Py_XDECREF(records);
    Py_XDECREF(reserved);
    Py_XDECREF(segment);
    return out;
}

/* The Mad fact of the header at b[o:], from the mads table (made in C on a miss). */
static PyObject *mad_of(MadDecoder *self, const unsigned char *b, Py_ssize_t o)
{
    if (!fly_ask(&self->mad_fly))
        return make_mad(self, b + o);
    PyObject *key = PyBytes_FromStringAndSize((const char *)b + o, self->mad_len);
    if (key == NULL)
        return NULL;
    PyObject *mad = PyDict_GetItemWithError(self->mads, key);
    if (mad != NULL) {
        Py_INCREF(mad);
        self->mad_fly.hits++;
    } else if (!PyErr_Occurred()) {
        mad = fly_remember(&self->mad_fly, self->mads, self->cache_max, key,
                           make_mad(self, b + o));
    }
    Py_DECREF(key);
    return mad;
}

/* ROUTE_* of the MAD at b[o:], by its class and attribute; -1 with the error set. */
static long route_at(MadDecoder *self, const unsigned char *b, Py_ssize_t o)
{
    uint64_t mgmt_class = step_value(&self->mad_steps[self->which[WHICH_CLASS]], b + o);
    uint64_t attribute = step_value(&self->mad_steps[self->which[WHICH_ATTRIBUTE]], b + o);
    PyObject *dispatch[2] = {PyLong_FromUnsignedLongLong(mgmt_class),
                             PyLong_FromUnsignedLongLong(attribute)};
    PyObject *r = NULL;
    if (dispatch[0] && dispatch[1])
        r = by_int(self, self->routes, mgmt_class << self->route_shift | attribute,
                   self->route_of, dispatch, 2);
    Py_XDECREF(dispatch[0]);
    Py_XDECREF(dispatch[1]);
    if (r == NULL)
        return -1;
    long route = PyLong_AsLong(r);
    Py_DECREF(r);
    return route;
}

/* decoder(message) -> (records, reserved): the records of a reassembled SA answer, as
 * Tables.whole reads them (SaParts.whole); where this code does not take the message, what
 * the plan's whole_python makes of it. */
static PyObject *whole_of(MadDecoder *self, PyObject *msg)
{
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(msg);
    Py_ssize_t n = PyBytes_GET_SIZE(msg);
    if (n < self->data_start)
        return PyObject_CallOneArg(self->whole_python, msg);
    long route = route_at(self, b, 0);
    if (route == -1 && PyErr_Occurred())
        return NULL;
    if (!route_taken(self, route) || route == ROUTE_PLAIN || route >= self->route_cm)
        return PyObject_CallOneArg(self->whole_python, msg);
    if (route == ROUTE_SA_OTHER)
        return Py_BuildValue("([]())");  /* Tables.whole: no records */
    PyObject *m = mad_of(self, b, 0), *shape = NULL, *records, *reserved, *out = NULL;
    if (m == NULL)
        return NULL;
    shape = shape_of(self, msg, 0, m, (int)route, n - self->data_start);
    if (shape != NULL) {
        int got = records_of(self, msg, shape, (int)route, self->data_start, n, &records,
                             &reserved);
        if (got > 0) {
            out = PyTuple_Pack(2, records, reserved);
            Py_DECREF(records);
            Py_DECREF(reserved);
        } else if (got == 0) {
            out = PyObject_CallOneArg(self->whole_python, msg);
        }
    }
    Py_XDECREF(shape);
    Py_DECREF(m);
    return out;
}

static PyObject *whole(MadDecoder *self, PyObject *args, PyObject *kw)
{
    PyObject *msg;
    if (!PyArg_ParseTuple(args, "S", &msg))
        return NULL;
    return whole_of(self, msg);
}

/* What decode_parts reads of a frame: the values decode() hands over, and for frame() the
 * route and whether an SA MAD carries its own records (its shape's own records). */
typedef struct {
    PyObject *where, *mad, *errors, *icrc, *sa, *cm, *cm_req;
    long route;
    int own, segment;
} Parts;

static void parts_clear(Parts *p)
{
    Py_CLEAR(p->where);
    Py_CLEAR(p->mad);
    Py_CLEAR(p->errors);
    Py_CLEAR(p->icrc);
    Py_CLEAR(p->sa);
    Py_CLEAR(p->cm);
    Py_CLEAR(p->cm_req);
}

/* The parts of the frame `data` at `at` (new references in *p): 1, 0 when this code does not
 * take the frame (the Python decoder reads it), -1 with the error set. */
static int decode_parts(MadDecoder *self, PyObject *data, PyObject *at, Parts *p)
{
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data), offs[6], o;
    int native = Py_TYPE(at) == (PyTypeObject *)self->ibmadat;
    memset(p, 0, sizeof *p);
    if (!native && Py_TYPE(at) != (PyTypeObject *)self->madat)
        return 0;
    if (offsets(at, offs, native ? 5 : 6) < 0)
        return PyErr_Occurred() ? -1 : 0;
    o = offs[native ? 4 : 5];
    if (o < 0 || o + self->mad_size > n)
        return 0;

    /* where the frame goes, by its class and attribute: the MAD's own to read, or Python's */
    long route = route_at(self, b, o);
    if (route == -1 && PyErr_Occurred())
        return -1;
    if (!route_taken(self, route))
        return 0;
    p->route = route;
    /* the Mad fact, shared by the frames of one header (the segments of an answer) */
    if ((p->mad = mad_of(self, b, o)) == NULL)
        return -1;

    /* the addresses and the CRC verdicts */
    if (native) {
        Py_ssize_t lrh = offs[0], vcrc_at = n - self->vcrc_len, icrc_at = vcrc_at - self->icrc_len;
        if (lrh < 0 || icrc_at < lrh)
            goto python;
        p->where = where_of(self, data, at,
                            offs[1] >= 0 ? &self->where_global : &self->where_local,
                            offs, 5, offs[1] >= 0 ? 3 : 2);
        if (p->where == NULL)
            goto fail;
        if (p->where == Py_None)
            goto python;
        PyObject *mask = self->local_mask;
        Py_ssize_t len = icrc_at - lrh;
        if (len > self->lnh_off
                && ((b[lrh + self->lnh_off] >> self->lnh_shift) & self->lnh_mask) == self->lnh_global)
            mask = len >= self->grh_end ? self->global_mask : self->global_short_mask;
        int bad_i = crc_of(&self->icrc, NULL, mask, b + lrh, len) != le(b + icrc_at, self->icrc_len);
        int bad_v = crc_of(&self->vcrc, NULL, NULL, b + lrh, vcrc_at - lrh)
                    != le(b + vcrc_at, self->vcrc_len);
        p->errors = self->errors[bad_i | bad_v << 1];
        Py_INCREF(p->errors);
        p->icrc = PyBytes_FromStringAndSize((const char *)b + icrc_at, self->icrc_len);
    } else {
        Py_ssize_t ip = offs[0], version = offs[1], icrc_at = n - self->icrc_len;
        PyObject *mask;
        if (ip < 0 || ip + self->ihl_off >= n || ip + self->version_off >= n)
            goto python;
        if (((b[ip + self->version_off] >> self->version_shift) & self->version_mask)
                == self->ipv4_version) {
            Py_ssize_t ihl = (b[ip + self->ihl_off] >> self->ihl_shift) & self->ihl_mask;
            mask = PyTuple_GET_ITEM(self->ipv4_masks, ihl & (MAX_IHL - 1));
        } else {
            mask = self->ipv6_mask;
        }
        if (mask == Py_None || icrc_at - ip < PyBytes_GET_SIZE(mask))
            goto python;
        p->where = where_of(self, data, at, version == 4 ? &self->where_v4 : &self->where_v6,
                            offs, 6, version == 4 ? 0 : 1);
        if (p->where == NULL)
            goto fail;
        if (p->where == Py_None)
            goto python;
        int bad = crc_of(&self->icrc, self->prefix, mask, b + ip, icrc_at - ip)
                  != le(b + icrc_at, self->icrc_len);
        p->errors = self->errors[bad];
        Py_INCREF(p->errors);
        p->icrc = PyBytes_FromStringAndSize((const char *)b + icrc_at, self->icrc_len);
    }
    if (p->icrc == NULL)
        goto fail;

    if (route == ROUTE_PLAIN || route >= self->route_cm) {
        p->sa = Py_NewRef(Py_None);
        if (route >= self->route_cm) { /* the message after the MAD header (a REQ's paths) */
            const CmPlan *cp = &self->cms[route - self->route_cm];
            if ((p->cm = make_fact(self, &cp->msg, b + o + self->mad_len, cp->name)) == NULL)
                goto fail;
            if (cp->req.n_steps >= 0
                    && (p->cm_req = make_fact(self, &cp->req, b + o + self->mad_len, NULL)) == NULL)
                goto fail;
        }
        return 1;
    }
    p->sa = sa_parts(self, data, o, p->mad, (int)route, &p->own, &p->segment);
    if (p->sa == NULL)
        goto fail;
    if (p->sa == Py_None)
        goto python;
    return 1;
python:
    parts_clear(p);
    return 0;
fail:
    parts_clear(p);
    return -1;
}

/* decode's tuple of the parts (taking their references), or NULL with the error set. */
static PyObject *parts_tuple(MadDecoder *self, Parts *p)
{
    PyObject *out = PyTuple_New(8);
    if (out == NULL) {
        parts_clear(p);
        return NULL;
    }
    Py_INCREF(self->mad_size_obj);
    PyObject *items[8] = {p->where, p->mad, self->mad_size_obj, p->errors, p->icrc, p->sa,
                          p->cm ? p->cm : Py_NewRef(Py_None),
                          p->cm_req ? p->cm_req : Py_NewRef(Py_None)};
    for (int i = 0; i < 8; i++)
        PyTuple_SET_ITEM(out, i, items[i]);
    memset(p, 0, sizeof *p);
    return out;
}

/* decode(data, at) -> (where, mad, length, crc_errors, icrc, sa, cm, cm_req) | None */
static PyObject *decode(MadDecoder *self, PyObject *args)
{
    PyObject *data, *at;
    Parts p;
    if (!PyArg_ParseTuple(args, "SO!", &data, &PyTuple_Type, &at))
        return NULL;
    int got = decode_parts(self, data, at, &p);
    if (got <= 0) {
        if (got < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    return parts_tuple(self, &p);
}

static PyObject *str_frames, *str_mad_frames, *str_icrc_frames, *str_by_kind, *str_mgmt_class,
    *str_round, *nine;

/* What the records frame_of made add to the assembler's DecodeStats: each made one is a
 * frame, a MAD frame and an ICRC frame, and one of its kind. Added in one go at the end of a
 * call (counts_flush); a few kinds are held, more flush early. */
enum { KIND_SLOTS = 8 };
typedef struct {
    Py_ssize_t made;
    PyObject *kind[KIND_SLOTS]; /* strong references */
    Py_ssize_t count[KIND_SLOTS];
    int kinds;
} Counts;

static void counts_clear(Counts *c)
{
    for (int i = 0; i < c->kinds; i++)
        Py_CLEAR(c->kind[i]);
    c->kinds = 0;
    c->made = 0;
}

/* stats.frames, .mad_frames, .icrc_frames += made and stats.by_kind[kind] += count, the
 * counts cleared: 0, or -1 with the error set. */
static int counts_flush(Counts *c, PyObject *stats)
{
    int r = 0;
    if (c->made) {
        PyObject *made = PyLong_FromSsize_t(c->made), *d = NULL;
        r = made == NULL || add_to(stats, str_frames, made) || add_to(stats, str_mad_frames, made)
            || add_to(stats, str_icrc_frames, made) ? -1 : 0;
        Py_XDECREF(made);
        if (r == 0 && (d = PyObject_GetAttr(stats, str_by_kind)) == NULL)
            r = -1;
        if (r == 0 && !PyDict_Check(d)) {
            PyErr_SetString(PyExc_TypeError, "stats.by_kind: a dict expected");
            r = -1;
        }
        for (int i = 0; r == 0 && i < c->kinds; i++) {
            PyObject *v = PyDict_GetItemWithError(d, c->kind[i]), *by, *w = NULL;
            if (v == NULL && PyErr_Occurred())
                r = -1;
            else if ((by = PyLong_FromSsize_t(c->count[i])) == NULL)
                r = -1;
            else {
                w = v == NULL ? Py_NewRef(by) : PyNumber_Add(v, by);
                Py_DECREF(by);
                r = w == NULL || PyDict_SetItem(d, c->kind[i], w) < 0 ? -1 : 0;
                Py_XDECREF(w);
            }
        }
        Py_XDECREF(d);
    }
    counts_clear(c);
    return r;
}

/* One more record made, of kind: 0, or -1 with the error set. */
static int counts_add(Counts *c, PyObject *stats, PyObject *kind)
{
    int i = 0;
    while (i < c->kinds && c->kind[i] != kind)
        i++;
    if (i == c->kinds) {
        if (i == KIND_SLOTS) {
            if (counts_flush(c, stats) < 0)
                return -1;
            i = 0;
        }
        c->kind[i] = Py_NewRef(kind);
        c->count[i] = 0;
        c->kinds = i + 1;
    }
    c->count[i]++;
    c->made++;
    return 0;
}

/* round(time, 9), as mad_frame_at rounds a frame's time. A finite float of magnitude 2**24
 * or more is its own rounding: the doubles beside it lie 2**-29 or more away, over twice
 * the 0.5e-9 a rounding to nine places moves it (tests/test_taken.py holds it to round());
 * so an epoch-stamped capture's frames skip float.__round__'s exact decimal conversion. */
/* capture 3 decode at epoch times (native IB, 200k): 0.89 -> 0.78 s CPU (-12 %), bench/README.md */
static PyObject *round9(PyObject *time)
{
    if (PyFloat_CheckExact(time)) {
        double x = PyFloat_AS_DOUBLE(time);
        if (isfinite(x) && fabs(x) >= 16777216.0)
            return Py_NewRef(time);
    }
    return PyObject_CallMethodOneArg(time, str_round, nine);
}

/* `v or 0` of an attribute value v (a new reference), or NULL with the error set. */
static PyObject *or_zero(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    int t = v == NULL ? -1 : PyObject_IsTrue(v);
    if (t < 0) {
        Py_XDECREF(v);
        return NULL;
    }
    return t ? v : (Py_DECREF(v), PyLong_FromLong(0));
}

/* Assembler.mad_frame_at's step of the RMPP DATA segment p off the wire, at `time` (rounded),
 * in C: the assembler's reassembler's add(), then, where that completed its transfer, the records of the
 * message (whole()) and the frames that made it. has_records: whether the segment's records
 * are not None. *records, *dropped, *reassembled and *errors (a list, maybe empty): new
 * references. 0, or -1 with the error set. */
/* bench/native_twins.py decode, segments, native IB 200k: capture 2 0.818 -> 0.673 s
 * (-17.7 %); capture 3 0.796 -> 0.722 s (-9.3 %), best of 7 (2026-12-06) */
static int segment_step(MadDecoder *self, Parts *p, PyObject *number, PyObject *time,
                        PyObject *stats, PyObject *reassembler, int has_records,
                        PyObject **records,
                        PyObject **dropped, PyObject **reassembled, PyObject **errors)
{
    PyObject *w = p->where, *rmpp = PyTuple_GET_ITEM(p->sa, 0);
    PyObject *key = PyTuple_New(5), *args[7] = {NULL}, *done = NULL, *reserved = NULL;
    int r = -1;
    *records = *dropped = *reassembled = *errors = NULL;
    if (key == NULL)
        goto out;
    /* (src, dst, TID, attribute, method): the transfer's key */
    PyTuple_SET_ITEM(key, 0, Py_NewRef(PyTuple_GET_ITEM(w, 1)));
    PyTuple_SET_ITEM(key, 1, Py_NewRef(PyTuple_GET_ITEM(w, 2)));
    PyObject *names[3] = {str_transaction_id, str_attribute_id, str_method};
    for (int i = 0; i < 3; i++) {
        PyObject *v = PyObject_GetAttr(p->mad, names[i]);
        if (v == NULL)
            goto out;
        PyTuple_SET_ITEM(key, 2 + i, v);
    }
    args[0] = Py_NewRef(reassembler);
    args[1] = Py_NewRef(key);
    if ((args[2] = or_zero(rmpp, str_segment_number)) == NULL
            || (args[3] = or_zero(rmpp, str_rmpp_flags)) == NULL)
        goto out;
    args[4] = Py_NewRef(PyTuple_GET_ITEM(p->sa, 4));
    args[5] = Py_NewRef(number);
    args[6] = Py_NewRef(time);
    if ((done = PyObject_VectorcallMethod(str_add, args, 7, NULL)) == NULL
            || (*dropped = PyObject_GetAttr(reassembler, str_dropped)) == NULL)
        goto out;
    int drop = PyObject_IsTrue(*dropped);
    if (drop < 0 || (drop && add_to(stats, str_rmpp_dropped, one) < 0))
        goto out;
    if (!drop)
        Py_SETREF(*dropped, Py_NewRef(Py_None));
    if ((*errors = PyList_New(0)) == NULL)
        goto out;
    if (done == Py_None) {
        *records = has_records ? PyList_New(0) : Py_NewRef(Py_None);
        *reassembled = Py_NewRef(Py_None);
        r = *records == NULL ? -1 : 0;
        goto out;
    }
    if (!PyTuple_Check(done) || PyTuple_GET_SIZE(done) != 2
            || !PyBytes_Check(PyTuple_GET_ITEM(done, 0))) {
        PyErr_SetString(PyExc_TypeError, "MadDecoder: the reassembler's (message, transfer) expected");
        goto out;
    }
    PyObject *transfer = PyTuple_GET_ITEM(done, 1), *frames, *problems, *ks;
    if (has_records) {
        PyObject *got = whole_of(self, PyTuple_GET_ITEM(done, 0));
        if (got == NULL)
            goto out;
        if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2) {
            Py_DECREF(got);
            PyErr_SetString(PyExc_TypeError, "MadDecoder: whole(): (records, reserved) expected");
            goto out;
        }
        *records = Py_NewRef(PyTuple_GET_ITEM(got, 0));
        reserved = Py_NewRef(PyTuple_GET_ITEM(got, 1));
        Py_DECREF(got);
    } else
        *records = Py_NewRef(Py_None);
    /* [transfer.frames[k] for k in sorted(transfer.frames)] */
    if ((frames = PyObject_GetAttr(transfer, str_frames)) == NULL)
        goto out;
    ks = PyDict_Check(frames) ? PyDict_Keys(frames) : NULL;
    if (ks == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "MadDecoder: a transfer's frames not a dict");
    if (ks != NULL && PyList_Sort(ks) == 0 && (*reassembled = PyList_New(PyList_GET_SIZE(ks))) != NULL)
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ks); i++) {
            PyObject *f = PyDict_GetItemWithError(frames, PyList_GET_ITEM(ks, i));
            if (f == NULL) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_KeyError, "MadDecoder: a transfer's frame");
                Py_CLEAR(*reassembled);
                break;
            }
            PyList_SET_ITEM(*reassembled, i, Py_NewRef(f));
        }
    Py_XDECREF(ks);
    Py_DECREF(frames);
    if (*reassembled == NULL)
        goto out;
    /* errors += transfer.problems, then the records' reserved bits */
    if ((problems = PyObject_GetAttr(transfer, str_problems)) == NULL)
        goto out;
    PyObject *ext = _PyList_Extend((PyListObject *)*errors, problems);
    Py_DECREF(problems);
    if (ext == NULL)
        goto out;
    Py_DECREF(ext);
    int any = 0;
    if (reserved != NULL && (any = PyObject_IsTrue(reserved)) > 0) {
        PyObject *it = PyObject_GetIter(reserved), *x;
        any = it == NULL ? -1 : 0;
        while (any == 0 && it != NULL && (x = PyIter_Next(it)) != NULL) {
            any = PyObject_IsTrue(x);
            Py_DECREF(x);
        }
        Py_XDECREF(it);
        if (any == 0 && PyErr_Occurred())
            any = -1;
    }
    if (any < 0)
        goto out;
    if (any) {
        PyObject *more = PyObject_CallFunctionObjArgs(self->reserved_errors, p->mad, reserved, NULL);
        if (more == NULL)
            goto out;
        ext = _PyList_Extend((PyListObject *)*errors, more);
        Py_DECREF(more);
        if (ext == NULL)
            goto out;
        Py_DECREF(ext);
    }
    r = 0;
out:
    if (r < 0) {
        Py_CLEAR(*records);
        Py_CLEAR(*dropped);
        Py_CLEAR(*reassembled);
        Py_CLEAR(*errors);
    }
    for (int i = 0; i < 7; i++)
        Py_XDECREF(args[i]);
    Py_XDECREF(key);
    Py_XDECREF(done);
    Py_XDECREF(reserved);
    return r;
}

/* The frame `data` at `at` as frame() hands it over (a new reference: the MadFrame, with
 * its counts added to c; decode's tuple; None), or NULL with the error set. An RMPP DATA
 * segment goes to reassembler (None: left to Python) here, not where an earlier frame of
 * a run was left to Python (segments 0): that one goes to it after the run. */
static PyObject *frame_of(MadDecoder *self, PyObject *data, PyObject *at, PyObject *number,
                          PyObject *time, PyObject *stats, PyObject *reassembler, Counts *c,
                          int segments)
{
    Parts p;
    int got = decode_parts(self, data, at, &p);
    if (got <= 0) {
        if (got < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *records = Py_None, *others = Py_None, *rmpp = Py_None, *hdr = Py_None;
    PyObject *dropped = NULL, *reassembled = NULL, *errors = NULL, *made = NULL;
    if (p.errors != self->errors[0])
        return parts_tuple(self, &p);
    int segment = 0;
    if (p.sa != Py_None) {
        PyObject *reserved = PyTuple_GET_ITEM(p.sa, 3);
        segment = !p.own && p.segment && segments && reassembler != Py_None;
        if (!segment && (!p.own || !PyTuple_Check(reserved) || PyTuple_GET_SIZE(reserved) != 0))
            return parts_tuple(self, &p);
        rmpp = PyTuple_GET_ITEM(p.sa, 0);
        hdr = PyTuple_GET_ITEM(p.sa, 1);
        records = PyTuple_GET_ITEM(p.sa, 2);
    }
    PyObject *cls = PyObject_GetAttr(p.mad, str_mgmt_class), *kind = NULL, *t = NULL, *out = NULL;
    if (cls == NULL)
        goto fail;
    PyObject *known = PyDict_GetItemWithError(self->kinds, cls);
    if (known != NULL && PyUnicode_Check(known) && PyUnicode_GET_LENGTH(known) > 0)
        kind = Py_NewRef(known); /* (held: __round__ below may run Python code) */
    else if (!PyErr_Occurred())  /* (mad_frame_at's `or kind_of`: it names the class first) */
        kind = PyObject_CallOneArg(self->kind_of, cls);
    Py_DECREF(cls);
    if (kind == NULL)
        goto fail;
    if (!PyUnicode_Check(kind)) {
        PyErr_SetString(PyExc_TypeError, "MadDecoder: kind_of() gave no str");
        goto fail;
    }
    if ((t = round9(time)) == NULL)
        goto fail;
    PyObject *w = p.where;
    if (!PyTuple_Check(w) || PyTuple_GET_SIZE(w) != 7) {
        PyErr_SetString(PyExc_TypeError, "frame: a where tuple of 7 expected");
        goto fail;
    }
    if (segment) {
        if (segment_step(self, &p, number, t, stats, reassembler, records != Py_None, &made,
                         &dropped, &reassembled, &errors) < 0)
            goto fail;
        records = made;
        if (PyList_GET_SIZE(errors) == 0)
            Py_SETREF(errors, Py_NewRef(Py_None));
    }
    if (records != Py_None && p.route != self->path_record_route) {
        others = records; /* another attribute of the SA table */
        records = Py_None;
    }
    /* positional, in MadFrame's field order, as mad_frame_at makes it */
    PyObject *fields[23] = {
        number, t, kind,
        PyTuple_GET_ITEM(w, 0), PyTuple_GET_ITEM(w, 1), PyTuple_GET_ITEM(w, 2),
        PyTuple_GET_ITEM(w, 3), PyTuple_GET_ITEM(w, 4), PyTuple_GET_ITEM(w, 5),
        PyTuple_GET_ITEM(w, 6),
        p.mad, Py_None, rmpp, hdr, dropped ? dropped : Py_None, Py_None,
        reassembled ? reassembled : Py_None, records,
        p.cm ? p.cm : Py_None, p.cm_req ? p.cm_req : Py_None, errors ? errors : Py_None,
        Py_None, others,
    };
    out = new_fact(&self->frame_layout, fields);
    if (out != NULL && counts_add(c, stats, kind) < 0)
        Py_CLEAR(out);
fail:
    Py_XDECREF(made);
    Py_XDECREF(dropped);
    Py_XDECREF(reassembled);
    Py_XDECREF(errors);
    Py_XDECREF(kind);
    Py_XDECREF(t);
    parts_clear(&p);
    return out;
}

/* frame(data, at, number, time, stats[, reassembler]) -> MadFrame | decode's tuple | None.
 * Assembler.mad_frame_at's record of a frame off the wire made here where it needs nothing
 * but the parts and the assembler's RMPP reassembler (None or none given: left to Python):
 * no CRC error, and no SA header or one whose MAD carries its own records none with
 * reserved bits set or is an RMPP DATA segment (not a control message); stats counted as
 * decode_at and mad_frame_at count them. Otherwise decode's tuple, which mad_frame_at
 * finishes, or None as decode. */
/* bench capture 3 decode (native IB, 200k frames): 1.34 -> 1.03 s CPU (-23 %), bench/README.md */
static PyObject *frame(MadDecoder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if ((nargs != 5 && nargs != 6) || !PyBytes_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "frame(data: bytes, at: tuple, number, time, stats[, reassembler])");
        return NULL;
    }
    Counts c = {0};
    PyObject *out = frame_of(self, args[0], args[1], args[2], args[3], args[4],
                             nargs > 5 ? args[5] : Py_None, &c, 1);
    if (counts_flush(&c, args[4]) < 0)
        Py_CLEAR(out);
    return out;
}

/* taken(buf, taken, number, epb, little, res, at, stats[, reassembler]) -> (records, rest).
 * frame() of each frame of a run a reader's loop took (pcapio.Taken): its records or EPBs
 * at the positions in taken (flat (index in the run, position) pairs, as the loops return
 * them), numbered and timed as pcapio makes Frames, read from buf without a Frame made.
 * records: one per taken frame, None where frame() gave decode's tuple or None; rest:
 * (index, number, time, what frame() gave) of those, for the Python decoder to finish. */
/* bench capture 3 decode (native IB, 200k frames): 0.98 -> 0.77 s CPU (-22 %), bench/README.md */
static PyObject *taken(MadDecoder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if ((nargs != 8 && nargs != 9) || !PyBytes_Check(args[0]) || !PyList_Check(args[1])
            || !PyTuple_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError, "taken(buf: bytes, taken: list, number, epb, little, "
                        "res, at: tuple, stats[, reassembler])");
        return NULL;
    }
    PyObject *buf = args[0], *list = args[1], *at = args[6], *stats = args[7];
    PyObject *reassembler = nargs > 8 ? args[8] : Py_None;
    Py_ssize_t before = PyLong_AsSsize_t(args[2]);
    int epb = PyObject_IsTrue(args[3]), little = PyObject_IsTrue(args[4]);
    double res = PyFloat_AsDouble(args[5]);
    if ((before == -1 || res == -1.0 || epb < 0 || little < 0) && PyErr_Occurred())
        return NULL;
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(buf);
    Py_ssize_t size = PyBytes_GET_SIZE(buf), n = PyList_GET_SIZE(list) / 2;
    if (PyList_GET_SIZE(list) % 2) {
        PyErr_SetString(PyExc_ValueError, "taken: (index, position) pairs expected");
        return NULL;
    }
    PyObject *records = PyList_New(n), *rest = PyList_New(0), *out = NULL;
    Counts c = {0};
    int deferred = 0; /* a frame left to Python: its segments come after this run's */
    if (records == NULL || rest == NULL)
        goto done;
    for (Py_ssize_t j = 0; j < n; j++) {
        /* (the list may change under a callback: its items are read again each time) */
        if (PyList_GET_SIZE(list) < 2 * n) {
            PyErr_SetString(PyExc_RuntimeError, "taken: the list changed during the call");
            goto done;
        }
        Py_ssize_t k = PyLong_AsSsize_t(PyList_GET_ITEM(list, 2 * j));
        Py_ssize_t pos = PyLong_AsSsize_t(PyList_GET_ITEM(list, 2 * j + 1));
        if ((k == -1 || pos == -1) && PyErr_Occurred())
            goto done;
        Py_ssize_t hdr = epb ? EPB_DATA : REC_HDR;
        if (k < 0 || pos < 0 || pos > size - hdr) {
            PyErr_SetString(PyExc_ValueError, "taken: a position outside the buffer");
            goto done;
        }
        const unsigned char *r = b + pos;
        Py_ssize_t incl = u32(r + (epb ? EPB_INCL : REC_INCL), little);
        if (incl > size - pos - hdr) {
            PyErr_SetString(PyExc_ValueError, "taken: a packet outside the buffer");
            goto done;
        }
        /* pcapio's arithmetic, in the same order (volatile: no fused multiply-add) */
        volatile double scaled;
        double t;
        if (epb) {
            scaled = (double)((uint64_t)u32(r + EPB_TS_HI, little) << 32
                              | u32(r + EPB_TS_LO, little)) * res;
            t = scaled;
        } else {
            scaled = (double)u32(r + REC_FRAC, little) * res;
            t = (double)u32(r + REC_SEC, little) + scaled;
        }
        PyObject *data = PyBytes_FromStringAndSize((const char *)r + hdr, incl);
        PyObject *number = PyLong_FromSsize_t(before + k + 1), *time = PyFloat_FromDouble(t);
        PyObject *got = data && number && time
                        ? frame_of(self, data, at, number, time, stats, reassembler, &c,
                                   !deferred) : NULL;
        Py_XDECREF(data);
        if (got == NULL || Py_IS_TYPE(got, &PyTuple_Type) || got == Py_None) {
            PyObject *item = got ? Py_BuildValue("(nOOO)", j, number, time, got) : NULL;
            Py_XDECREF(got);
            got = NULL;
            if (item == NULL || PyList_Append(rest, item) < 0) {
                Py_XDECREF(item);
                Py_XDECREF(number);
                Py_XDECREF(time);
                goto done;
            }
            Py_DECREF(item);
            got = Py_NewRef(Py_None);
            deferred = 1;
        }
        Py_XDECREF(number);
        Py_XDECREF(time);
        PyList_SET_ITEM(records, j, got);
    }
    out = PyTuple_Pack(2, records, rest);
done:
    if (counts_flush(&c, stats) < 0)
        Py_CLEAR(out);
    Py_XDECREF(records);
    Py_XDECREF(rest);
    return out;
}

static PyMethodDef decoder_methods[] = {
    {"decode", (PyCFunction)decode, METH_VARARGS,
     "decode(data, at) -> (where, mad, length, crc_errors, icrc, sa, cm, cm_req), what the "
     "assembler's mad_frame_at takes after the frame number and time, or None: the Python decoder "
     "reads the frame."},
    {"frame", (PyCFunction)(void (*)(void))frame, METH_FASTCALL,
     "frame(data, at, number, time, stats[, reassembler]) -> the frame's MadFrame, as the "
     "assembler's mad_frame_at makes it and with stats counted, where it has no error and "
     "needs no RMPP state but the assembler's reassembler (an RMPP DATA segment goes to its "
     "add()); else what decode(data, at) returns."},
    {"taken", (PyCFunction)(void (*)(void))taken, METH_FASTCALL,
     "taken(buf, taken, number, epb, little, res, at, stats[, reassembler]) -> (records, "
     "rest): frame() of each frame of a run a reader's loop took (pcapio.Taken), read from "
     "buf; None in records where rest has (index, number, time, what frame() gave) for Python "
     "to finish (and, after the first of those, the run's RMPP segments too)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject MadDecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ibpath_scapy.native._scan.MadDecoder",
    .tp_doc = "MadDecoder(plan): FastDecoder.decode_at in C, from a plan of the layers "
              "(fast/decoder.py mad_decoder).",
    .tp_basicsize = sizeof(MadDecoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)init,
    .tp_dealloc = (destructor)dealloc,
    .tp_methods = decoder_methods,
    .tp_call = (ternaryfunc)whole,
};

int add_mad_decoder(PyObject *module)
{
    if ((str_frames = PyUnicode_InternFromString("frames")) == NULL
            || (str_mad_frames = PyUnicode_InternFromString("mad_frames")) == NULL
            || (str_icrc_frames = PyUnicode_InternFromString("icrc_frames")) == NULL
            || (str_by_kind = PyUnicode_InternFromString("by_kind")) == NULL
            || (str_mgmt_class = PyUnicode_InternFromString("mgmt_class")) == NULL
            || (str_round = PyUnicode_InternFromString("__round__")) == NULL
            || (str_transaction_id = PyUnicode_InternFromString("transaction_id")) == NULL
            || (str_attribute_id = PyUnicode_InternFromString("attribute_id")) == NULL
            || (str_method = PyUnicode_InternFromString("method")) == NULL
            || (str_segment_number = PyUnicode_InternFromString("segment_number")) == NULL
            || (str_rmpp_flags = PyUnicode_InternFromString("rmpp_flags")) == NULL
            || (str_dropped = PyUnicode_InternFromString("dropped")) == NULL
            || (str_rmpp_dropped = PyUnicode_InternFromString("rmpp_dropped")) == NULL
            || (str_problems = PyUnicode_InternFromString("problems")) == NULL
            || (str_add = PyUnicode_InternFromString("add")) == NULL
            || (one = PyLong_FromLong(1)) == NULL
            || (nine = PyLong_FromLong(9)) == NULL)
        return -1;
    return add_type(module, &MadDecoderType, "MadDecoder");
}
