/* The replay's steps for SA frames and PathRecord transactions (audit/replay.py Replay.feed,
 * Replay._sa, Replay._close), in C; the Python methods remain the reference.
 *
 * SaIntake(replay, frame_class, mad_class, transaction_class, kind, method_resp, path_record,
 * frame_list_class, closed_class, components_of).feed(rec, keep) takes the
 * records an SA storm is made of, a frame_class record of the given kind with no umad side,
 * through the steps of Replay.feed and Replay._sa: the record counted and kept for the frame
 * rules (keep), its transaction found by (requester, TID, class) or opened, the frame on its
 * side, an answer that completes its transaction marking it answered, and once LINGER are
 * open the oldest answered ones out of the open table, CLOSE_BATCH at a time closed. Where
 * the replay keeps no closed transaction and draws no arrows, close() takes Replay._close's
 * steps for a PathRecord transaction whose frames are all frame_class records: sealed,
 * placed in its resolution (Replay._place_transaction, _resolution), judged (on_close),
 * summarised (a closed_class made as its __init__ makes it), marked, held, spilled past
 * HELD_TRANSACTIONS. Anything else goes to replay.feed or Replay._close unchanged, before any
 * step is taken. The rare steps are the replay's own methods, called from here: a new
 * transaction (_new_transaction), an eviction (_evict_oldest), an answer with an RMPP header
 * (_completes), a resolution past its history (_let_oldest_go), the spill (spill_held).
 * Fields are read where their slots are (the classes' member descriptors). The replay holds
 * no reference to its SaIntake: no cycle. Tested equal to the Python steps, transaction by
 * transaction and resolution by resolution (tests/test_intake.py, tools/covfuzz.py audit).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_pyhelp.h"

/* the record's fields read here, in this order (frame_class's slots) */
static const char *const REC_FIELDS[] = {"frame", "time", "kind", "src", "dst", "mad", "rmpp",
                                         "rmpp_control", "path_records", "umad", "sa_records",
                                         "sa"};
enum { R_FRAME, R_TIME, R_KIND, R_SRC, R_DST, R_MAD, R_RMPP, R_CONTROL, R_PRS, R_UMAD,
       R_OTHERS, R_SA, R_N };
static const char *const MAD_FIELDS[] = {"method", "transaction_id", "mgmt_class", "attribute_id",
                                         "status"};
enum { M_METHOD, M_TID, M_CLASS, M_ATTR, M_STATUS, M_N };
static const char *const T_FIELDS[] = {"attribute_id", "requests", "responses", "records",
                                       "answered", "completing_frame", "_sealed", "requester",
                                       "tid"};
enum { T_ATTR, T_REQUESTS, T_RESPONSES, T_RECORDS, T_ANSWERED, T_COMPLETING, T_SEALED,
       T_REQUESTER, T_TID, T_N };
/* ClosedTransaction's slots, every one filled by summary() */
static const char *const C_FIELDS[] = {"requester", "tid", "attribute_id", "records", "answered",
                                       "completing_frame", "query", "components",
                                       "component_mask", "status", "first_frame", "_frames",
                                       "arrows", "request_count", "method", "_asks"};
enum { C_REQUESTER, C_TID, C_ATTR, C_RECORDS, C_ANSWERED, C_COMPLETING, C_QUERY, C_COMPONENTS,
       C_MASK, C_STATUS, C_FIRST, C_FRAMES, C_ARROWS, C_COUNT, C_METHOD, C_ASKS, C_N };

typedef struct {
    PyObject_HEAD
    PyObject *replay, *fallback, *open, *answered, *popleft, *closing, *frame_records;
    PyObject *new_transaction, *evict, *completes, *kind, *path_record;
    PyTypeObject *frame_class, *mad_class, *transaction_class;
    /* close(): the Python close, the resolutions' steps, what a summary is made by */
    PyObject *python_close, *components_of, *resolution_of, *let_oldest_go, *marks, *holding;
    PyObject *spill_held;
    PyTypeObject *frame_list_class, *closed_class;
    Py_ssize_t history, held_max;
    int spills, closes;  /* closes: close_ takes its steps (else Replay._close does) */
    int opens;  /* open_transaction makes a new one (else Replay._new_transaction does) */
    Py_ssize_t rec_off[R_N], mad_off[M_N], t_off[T_N], c_off[C_N];
    PyObject *array;  /* array.array: a summary's frames */
    long method_resp;
    Py_ssize_t linger, max_open, close_batch;
} SaIntake;

static PyObject *str_component_mask, *str_reversible, *str_Q, *zero,
    *str_records, *str_append, *str_sa_count, *str_on_close, *str_held, *str_sgid,
    *str_dgid, *str_pkey, *str_transactions, *str_spilled_count, *str_marks, *one, *no_pkey;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

static Py_ssize_t size_attr(PyObject *o, const char *name)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (v == NULL)
        return -1;
    Py_ssize_t n = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return n;
}

static int true_attr(PyObject *o, const char *name)
{
    PyObject *v = PyObject_GetAttrString(o, name);
    if (v == NULL)
        return -1;
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    return r;
}

/* Whether open_transaction may make the replay's new transactions: where it keeps no closed
 * one (its sides are then FrameLists: Replay._new_transaction), the transaction class has
 * the slots T_FIELDS names and no other, nothing runs after its __init__, and a FrameList
 * is a list with no field of its own. 1 or 0, or -1 with the error set. */
static int opens_here(SaIntake *self, int keeps)
{
    PyTypeObject *tc = self->transaction_class, *fl = self->frame_list_class;
    if (keeps || tc->tp_dictoffset || tc->tp_weaklistoffset || tc->tp_itemsize
            || tc->tp_alloc == NULL
            || tc->tp_basicsize != (Py_ssize_t)(sizeof(PyObject) + T_N * sizeof(PyObject *))
            || !PyType_IsSubtype(fl, &PyList_Type) || fl->tp_dictoffset
            || fl->tp_basicsize != (Py_ssize_t)sizeof(PyListObject) || fl->tp_alloc == NULL)
        return 0;
    int post = PyObject_HasAttrString((PyObject *)tc, "__post_init__");
    return !post;
}

static int init(SaIntake *self, PyObject *args, PyObject *kw)
{
    PyObject *replay, *fc, *mc, *tc, *kind, *path_record, *fl, *cc, *components_of;
    long resp;
    if (!PyArg_ParseTuple(args, "OO!O!O!UlOO!O!O", &replay, &PyType_Type, &fc, &PyType_Type,
                          &mc, &PyType_Type, &tc, &kind, &resp, &path_record, &PyType_Type, &fl,
                          &PyType_Type, &cc, &components_of))
        return -1;
    self->frame_class = (PyTypeObject *)Py_NewRef(fc);
    self->mad_class = (PyTypeObject *)Py_NewRef(mc);
    self->transaction_class = (PyTypeObject *)Py_NewRef(tc);
    self->kind = Py_NewRef(kind);
    self->path_record = Py_NewRef(path_record);
    self->method_resp = resp;
    self->replay = Py_NewRef(replay);
    if (slot_offsets(self->frame_class, REC_FIELDS, R_N, self->rec_off, "SaIntake")
            || slot_offsets(self->mad_class, MAD_FIELDS, M_N, self->mad_off, "SaIntake")
            || slot_offsets(self->transaction_class, T_FIELDS, T_N, self->t_off, "SaIntake"))
        return -1;
    if ((self->fallback = PyObject_GetAttrString(replay, "feed")) == NULL
            || (self->open = PyObject_GetAttrString(replay, "transactions")) == NULL
            || (self->answered = PyObject_GetAttrString(replay, "_answered")) == NULL
            || (self->popleft = PyObject_GetAttrString(self->answered, "popleft")) == NULL
            || (self->closing = PyObject_GetAttrString(replay, "_closing")) == NULL
            || (self->frame_records = PyObject_GetAttrString(replay, "frame_records")) == NULL
            || (self->new_transaction = PyObject_GetAttrString(replay, "_new_transaction")) == NULL
            || (self->evict = PyObject_GetAttrString(replay, "_evict_oldest")) == NULL
            || (self->completes = PyObject_GetAttrString(replay, "_completes")) == NULL)
        return -1;
    if (!PyDict_CheckExact(self->open) || !PyList_CheckExact(self->closing)
            || !PyList_CheckExact(self->frame_records)) {
        PyErr_SetString(PyExc_TypeError, "SaIntake: the replay's tables are not a dict and lists");
        return -1;
    }
    if ((self->linger = size_attr(replay, "LINGER")) < 0
            || (self->max_open = size_attr(replay, "MAX_OPEN_TRANSACTIONS")) < 0
            || (self->close_batch = size_attr(replay, "CLOSE_BATCH")) < 0
            || (self->history = size_attr(replay, "RESOLUTION_HISTORY")) < 0
            || (self->held_max = size_attr(replay, "HELD_TRANSACTIONS")) < 0)
        return -1;
    if ((self->spills = true_attr(replay, "spills")) < 0)
        return -1;
    int keeps = true_attr(replay, "keep_closed"), draws = true_attr(replay, "arrows");
    if (keeps < 0 || draws < 0)
        return -1;
    self->closes = !keeps && !draws;
    self->frame_list_class = (PyTypeObject *)Py_NewRef(fl);
    self->closed_class = (PyTypeObject *)Py_NewRef(cc);
    PyTypeObject *ct = self->closed_class;
    if (slot_offsets(ct, C_FIELDS, C_N, self->c_off, "SaIntake"))
        return -1;
    if (ct->tp_dictoffset || ct->tp_weaklistoffset || ct->tp_itemsize || ct->tp_alloc == NULL
            || ct->tp_basicsize != (Py_ssize_t)(sizeof(PyObject) + C_N * sizeof(PyObject *))) {
        PyErr_Format(PyExc_ValueError, "SaIntake: %R has slots summary() does not fill", ct);
        return -1;
    }
    if ((self->opens = opens_here(self, keeps)) < 0)
        return -1;
    PyObject *mod = PyImport_ImportModule("array");
    if (mod == NULL)
        return -1;
    self->array = PyObject_GetAttrString(mod, "array");
    Py_DECREF(mod);
    if (self->array == NULL)
        return -1;
    self->components_of = Py_NewRef(components_of);
    if ((self->python_close = PyObject_GetAttrString(replay, "_close")) == NULL
            || (self->resolution_of = PyObject_GetAttrString(replay, "_resolution")) == NULL
            || (self->let_oldest_go = PyObject_GetAttrString(replay, "_let_oldest_go")) == NULL
            || (self->marks = PyObject_GetAttrString(replay, "transaction_marks")) == NULL
            || (self->holding = PyObject_GetAttrString(replay, "_holding")) == NULL
            || (self->spill_held = PyObject_GetAttrString(replay, "spill_held")) == NULL)
        return -1;
    if (!PyTuple_Check(self->marks) || !PyDict_CheckExact(self->holding)) {
        PyErr_SetString(PyExc_TypeError, "SaIntake: transaction_marks a tuple, _holding a dict");
        return -1;
    }
    return 0;
}

static void dealloc(SaIntake *self)
{
    Py_XDECREF(self->replay);
    Py_XDECREF(self->fallback);
    Py_XDECREF(self->open);
    Py_XDECREF(self->answered);
    Py_XDECREF(self->popleft);
    Py_XDECREF(self->closing);
    Py_XDECREF(self->frame_records);
    Py_XDECREF(self->new_transaction);
    Py_XDECREF(self->evict);
    Py_XDECREF(self->completes);
    Py_XDECREF(self->kind);
    Py_XDECREF(self->path_record);
    Py_XDECREF(self->frame_class);
    Py_XDECREF(self->mad_class);
    Py_XDECREF(self->transaction_class);
    Py_XDECREF(self->python_close);
    Py_XDECREF(self->components_of);
    Py_XDECREF(self->resolution_of);
    Py_XDECREF(self->let_oldest_go);
    Py_XDECREF(self->marks);
    Py_XDECREF(self->holding);
    Py_XDECREF(self->spill_held);
    Py_XDECREF(self->frame_list_class);
    Py_XDECREF(self->closed_class);
    Py_XDECREF(self->array);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *close_(SaIntake *self, PyObject *t);

/* Replay._close_answered(n): up to n of the transactions answered longest ago out of the
 * open table, closed close_batch at a time (Replay._flush_closing's steps). 0, or -1 with
 * the error set. */
static int close_answered(SaIntake *self, Py_ssize_t n)
{
    while (n > 0 && PyObject_Length(self->answered) > 0) {
        PyObject *entry = PyObject_CallNoArgs(self->popleft);
        if (entry == NULL)
            return -1;
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 3) {
            Py_DECREF(entry);
            PyErr_SetString(PyExc_TypeError, "SaIntake: an answered entry of 3 expected");
            return -1;
        }
        PyObject *key = PyTuple_GET_ITEM(entry, 0), *t = PyTuple_GET_ITEM(entry, 1);
        PyObject *now = PyDict_GetItemWithError(self->open, key);
        int r = 0;
        if (now == NULL && PyErr_Occurred())
            r = -1;
        else if (now == t) {
            Py_INCREF(t);
            r = PyDict_DelItem(self->open, key) || PyList_Append(self->closing, t) ? -1 : 0;
            Py_DECREF(t);
            n--;
        }
        Py_DECREF(entry);
        if (r < 0)
            return -1;
    }
    if (PyList_GET_SIZE(self->closing) >= self->close_batch) {
        /* (the list is not changed while its transactions close: nothing opens one then) */
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(self->closing); i++) {
            PyObject *r = close_(self, PyList_GET_ITEM(self->closing, i));
            if (r == NULL)
                return -1;
            Py_DECREF(r);
        }
        if (PyList_SetSlice(self->closing, 0, PyList_GET_SIZE(self->closing), NULL) < 0)
            return -1;
    }
    return 0;
}

/* t's slot at off set to v (a new reference taken). */
static void set_slot(PyObject *t, Py_ssize_t off, PyObject *v)
{
    Py_XSETREF(SLOT(t, off), v);
}

/* A new instance of cls (its tp_alloc) whose n slots at off[] hold v[] (the references
 * taken over), or NULL with the error set where a v[i] is NULL (an error set by what made
 * it) or cls makes none; v[] emptied either way. */
static PyObject *filled(PyTypeObject *cls, const Py_ssize_t *off, PyObject **v, int n)
{
    PyObject *o = NULL;
    int whole = 1;
    for (int i = 0; i < n; i++)
        whole &= v[i] != NULL;
    if (whole && (o = cls->tp_alloc(cls, 0)) != NULL)
        for (int i = 0; i < n; i++) {
            SLOT(o, off[i]) = v[i];
            v[i] = NULL;
        }
    for (int i = 0; i < n; i++)
        Py_CLEAR(v[i]);
    return o;
}

/* Replay._new_transaction(requester, tid, attribute_id) where the replay keeps no closed
 * transaction (opens_here): the transaction made as its dataclass __init__ makes it, with a
 * FrameList on each side. A new reference, or NULL with the error set. */
/* python_floor --parts, capture 3 native IB 200k, replay alone: 0.82 -> 0.68 s (-17 %) with
 * feed_all */
static PyObject *open_transaction(SaIntake *self, PyObject *requester, PyObject *tid,
                                  PyObject *attribute_id)
{
    PyTypeObject *fl = self->frame_list_class;
    PyObject *v[T_N] = {NULL};
    v[T_REQUESTER] = Py_NewRef(requester);
    v[T_TID] = Py_NewRef(tid);
    v[T_ATTR] = Py_NewRef(attribute_id);
    v[T_ANSWERED] = Py_NewRef(Py_False);
    v[T_COMPLETING] = Py_NewRef(Py_None);
    v[T_SEALED] = Py_NewRef(Py_None);
    if ((v[T_REQUESTS] = fl->tp_alloc(fl, 0)) != NULL
            && (v[T_RESPONSES] = fl->tp_alloc(fl, 0)) != NULL)
        v[T_RECORDS] = PyList_New(0);
    return filled(self->transaction_class, self->t_off, v, T_N);
}

/* Replay._sa's steps for rec, whose MAD header is mad: 0, or -1 with the error set. */
static int sa(SaIntake *self, PyObject *rec, PyObject *mad)
{
    PyObject *method = SLOT(mad, self->mad_off[M_METHOD]);
    long m = PyLong_AsLong(method);
    if (m == -1 && PyErr_Occurred())
        return -1;
    int is_resp = (m & self->method_resp) != 0;
    PyObject *requester = SLOT(rec, self->rec_off[is_resp ? R_DST : R_SRC]);
    PyObject *tid = SLOT(mad, self->mad_off[M_TID]);
    PyObject *control = SLOT(rec, self->rec_off[R_CONTROL]);
    int is_control = PyObject_IsTrue(control);
    if (is_control < 0)
        return -1;
    PyObject *key = PyTuple_Pack(3, requester, tid, SLOT(mad, self->mad_off[M_CLASS]));
    if (key == NULL)
        return -1;
    int r = -1;
    PyObject *t = PyDict_GetItemWithError(self->open, key);
    if (t == NULL) {
        if (PyErr_Occurred())
            goto out;
        if (is_resp && is_control) {  /* an ACK for a transfer never seen from its start */
            r = 0;
            goto out;
        }
        PyObject *args[3] = {requester, tid, SLOT(mad, self->mad_off[M_ATTR])};
        t = self->opens ? open_transaction(self, requester, tid, args[2])
                        : PyObject_Vectorcall(self->new_transaction, args, 3, NULL);
        if (t == NULL)
            goto out;
        if (Py_TYPE(t) != self->transaction_class) {
            PyErr_SetString(PyExc_TypeError, "SaIntake: _new_transaction made another class");
            Py_DECREF(t);
            goto out;
        }
        /* (t held here too: the steps below may take it out of the open table) */
        if (PyDict_SetItem(self->open, key, t) < 0)
            goto out_t;
        Py_ssize_t open_now = PyDict_GET_SIZE(self->open);
        if (open_now > self->linger && close_answered(self, open_now - self->linger) < 0)
            goto out_t;
        if (PyDict_GET_SIZE(self->open) > self->max_open) {
            PyObject *e = PyObject_CallNoArgs(self->evict);
            if (e == NULL)
                goto out_t;
            Py_DECREF(e);
        }
    } else
        Py_INCREF(t);
    if (Py_TYPE(t) != self->transaction_class) {
        PyErr_SetString(PyExc_TypeError, "SaIntake: an open transaction of another class");
        goto out_t;
    }
    PyObject *side = SLOT(t, self->t_off[is_resp || is_control ? T_RESPONSES : T_REQUESTS]);
    if (side == NULL || SLOT(t, self->t_off[T_ATTR]) == NULL
            || SLOT(t, self->t_off[T_ANSWERED]) == NULL) {
        PyErr_SetString(PyExc_AttributeError, "SaIntake: a transaction without its frames");
        goto out_t;
    }
    PyObject *a = PyObject_CallMethodOneArg(side, str_append, rec);
    if (a == NULL)
        goto out_t;
    Py_DECREF(a);
    if (is_resp && !is_control) {
        int completes = 1;  /* with no RMPP header: carries_whole_message */
        if (SLOT(rec, self->rec_off[R_RMPP]) != Py_None) {
            PyObject *c = PyObject_CallOneArg(self->completes, rec);
            if (c == NULL)
                goto out_t;
            completes = PyObject_IsTrue(c);
            Py_DECREF(c);
            if (completes < 0)
                goto out_t;
        }
        if (completes) {
            int was = PyObject_IsTrue(SLOT(t, self->t_off[T_ANSWERED]));
            if (was < 0)
                goto out_t;
            if (!was) {
                PyObject *entry = PyTuple_Pack(3, key, t, SLOT(rec, self->rec_off[R_TIME]));
                if (entry == NULL)
                    goto out_t;
                PyObject *ap = PyObject_CallMethodOneArg(self->answered, str_append, entry);
                Py_DECREF(entry);
                if (ap == NULL)
                    goto out_t;
                Py_DECREF(ap);
            }
            set_slot(t, self->t_off[T_ANSWERED], Py_NewRef(Py_True));
            set_slot(t, self->t_off[T_COMPLETING], Py_NewRef(SLOT(rec, self->rec_off[R_FRAME])));
            PyObject *attr = SLOT(t, self->t_off[T_ATTR]);
            int eq = PyObject_RichCompareBool(attr, self->path_record, Py_EQ);
            if (eq < 0)
                goto out_t;
            PyObject *got = SLOT(rec, self->rec_off[eq ? R_PRS : R_OTHERS]);
            int truth = PyObject_IsTrue(got);
            if (truth < 0)
                goto out_t;
            PyObject *list = truth ? PySequence_List(got) : PyList_New(0);
            if (list == NULL)
                goto out_t;
            set_slot(t, self->t_off[T_RECORDS], list);
        }
    }
    r = 0;
out_t:
    Py_DECREF(t);
out:
    Py_DECREF(key);
    return r;
}

/* Replay._place_transaction(t) of a sealed t whose query and components are given: a new
 * reference to its resolution, Py_None (no resolution) or NULL with the error set. */
static PyObject *place(SaIntake *self, PyObject *t, PyObject *q, PyObject *components)
{
    int has;
    if (q == Py_None)
        Py_RETURN_NONE;
    if ((has = PySet_Contains(components, str_sgid)) <= 0
            || (has = PySet_Contains(components, str_dgid)) <= 0) {
        if (has < 0)
            return NULL;
        Py_RETURN_NONE;  /* not a point-to-point path query */
    }
    PyObject *pkey;
    if ((has = PySet_Contains(components, str_pkey)) < 0)
        return NULL;
    if (has)
        pkey = PyObject_GetAttr(q, str_pkey);
    else {  /* the P_Key the SA chose, which is what a blob built from the answer carries */
        PyObject *recs = SLOT(t, self->t_off[T_RECORDS]);
        int any = recs == NULL ? -1 : PyObject_IsTrue(recs);
        if (any < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_AttributeError, "SaIntake: a transaction without records");
            return NULL;
        }
        if (any) {
            PyObject *first = PySequence_GetItem(recs, 0);
            pkey = first == NULL ? NULL : PyObject_GetAttr(first, str_pkey);
            Py_XDECREF(first);
        } else
            pkey = Py_NewRef(no_pkey);
    }
    if (pkey == NULL)
        return NULL;
    /* (Replay._resolution made in C: -4.5 % of replay alone, under the 10 % bar) */
    PyObject *args[3] = {PyObject_GetAttr(q, str_sgid), PyObject_GetAttr(q, str_dgid), pkey};
    PyObject *res = NULL;
    if (args[0] != NULL && args[1] != NULL)
        res = PyObject_Vectorcall(self->resolution_of, args, 3, NULL);
    Py_XDECREF(args[0]);
    Py_XDECREF(args[1]);
    Py_DECREF(pkey);
    if (res == NULL || res == Py_None)
        return res;
    PyObject *ts = PyObject_GetAttr(res, str_transactions), *count;
    if (ts == NULL)
        goto fail;
    if (PyTuple_CheckExact(ts)) {  /* spilled or never held one */
        Py_SETREF(ts, PyList_New(0));
        if (ts == NULL || PyObject_SetAttr(res, str_transactions, ts) < 0)
            goto fail_ts;
    }
    if (!PyList_Check(ts)) {
        PyErr_SetString(PyExc_TypeError, "SaIntake: a resolution's transactions not a list");
        goto fail_ts;
    }
    if (PyList_Append(ts, t) < 0 || (count = PyObject_GetAttr(res, str_spilled_count)) == NULL)
        goto fail_ts;
    Py_ssize_t spilled = PyLong_AsSsize_t(count);
    Py_DECREF(count);
    if (spilled == -1 && PyErr_Occurred())
        goto fail_ts;
    if (PyList_GET_SIZE(ts) + spilled > self->history) {
        PyObject *r = PyObject_CallOneArg(self->let_oldest_go, res);
        if (r == NULL)
            goto fail_ts;
        Py_DECREF(r);
    }
    Py_DECREF(ts);
    return res;
fail_ts:
    Py_XDECREF(ts);
fail:
    Py_DECREF(res);
    return NULL;
}

/* Replay._mark(res, summary): res.marks |= 1 << i for each transaction_marks[i] passed. */
static int mark(SaIntake *self, PyObject *res, PyObject *summary)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->marks); i++) {
        PyObject *r = PyObject_CallOneArg(PyTuple_GET_ITEM(self->marks, i), summary);
        if (r == NULL)
            return -1;
        int passed = PyObject_IsTrue(r);
        Py_DECREF(r);
        if (passed < 0)
            return -1;
        if (passed) {
            PyObject *m = PyObject_GetAttr(res, str_marks), *bit = PyLong_FromSsize_t(i), *v = NULL;
            PyObject *shifted = m && bit ? PyNumber_Lshift(one, bit) : NULL;
            if (shifted != NULL)
                v = PyNumber_Or(m, shifted);
            Py_XDECREF(m);
            Py_XDECREF(bit);
            Py_XDECREF(shifted);
            if (v == NULL)
                return -1;
            int set = PyObject_SetAttr(res, str_marks, v);
            Py_DECREF(v);
            if (set < 0)
                return -1;
        }
    }
    return 0;
}

/* The sorted, distinct frame numbers of a transaction's FrameLists (Transaction.frames) as
 * array('Q'): a new reference, or NULL with the error set. */
static PyObject *frames_of(SaIntake *self, PyObject *requests, PyObject *responses)
{
    PyObject *all = PyList_New(0), *out = NULL;
    if (all == NULL)
        return NULL;
    PyObject *sides[2] = {requests, responses};
    for (int k = 0; k < 2; k++)
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sides[k]); i++)
            if (PyList_Append(all, SLOT(PyList_GET_ITEM(sides[k], i), self->rec_off[R_FRAME])) < 0)
                goto out;
    if (PyList_Sort(all) < 0)
        goto out;
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(all); i++) {
        PyObject *f = PyList_GET_ITEM(all, i);
        int same = 0;
        if (n && (same = PyObject_RichCompareBool(PyList_GET_ITEM(all, n - 1), f, Py_EQ)) < 0)
            goto out;
        if (!same) {
            Py_INCREF(f);
            Py_SETREF(PyList_GET_ITEM(all, n), f);  /* (i >= n: a place already read) */
            n++;
        }
    }
    if (PyList_SetSlice(all, n, PyList_GET_SIZE(all), NULL) < 0)
        goto out;
    PyObject *args[2] = {str_Q, all};
    out = PyObject_Vectorcall(self->array, args, 2, NULL);
out:
    Py_DECREF(all);
    return out;
}

/* ClosedTransaction(t) of a sealed t (its request, query and components given), its slots
 * filled here as its __init__ fills them: a new reference, or NULL with the error set. The
 * caller checked that every frame of t is a frame_class record with a mad_class header. */
/* python_floor --parts, capture 3 native IB 200k, replay alone: 0.85 -> 0.69 s (-18 %) */
static PyObject *summary(SaIntake *self, PyObject *t, PyObject *request, PyObject *query,
                         PyObject *components)
{
    PyObject *requests = SLOT(t, self->t_off[T_REQUESTS]);
    PyObject *responses = SLOT(t, self->t_off[T_RESPONSES]);
    PyObject *v[C_N] = {NULL};
    v[C_REQUESTER] = Py_NewRef(SLOT(t, self->t_off[T_REQUESTER]));
    v[C_TID] = Py_NewRef(SLOT(t, self->t_off[T_TID]));
    v[C_ATTR] = Py_NewRef(SLOT(t, self->t_off[T_ATTR]));
    v[C_ANSWERED] = Py_NewRef(SLOT(t, self->t_off[T_ANSWERED]));
    v[C_COMPLETING] = Py_NewRef(SLOT(t, self->t_off[T_COMPLETING]));
    v[C_QUERY] = Py_NewRef(query);
    v[C_COMPONENTS] = Py_NewRef(components);
    v[C_ARROWS] = Py_NewRef(Py_None);
    if ((v[C_RECORDS] = PySequence_Tuple(SLOT(t, self->t_off[T_RECORDS]))) == NULL
            || (v[C_COUNT] = PyLong_FromSsize_t(PyList_GET_SIZE(requests))) == NULL
            || (v[C_FRAMES] = frames_of(self, requests, responses)) == NULL)
        goto out;
    /* Transaction.status: the first response's; component_mask and method: the request's */
    v[C_STATUS] = Py_NewRef(PyList_GET_SIZE(responses)
        ? SLOT(SLOT(PyList_GET_ITEM(responses, 0), self->rec_off[R_MAD]), self->mad_off[M_STATUS])
        : Py_None);
    if (request == Py_None) {
        v[C_MASK] = Py_NewRef(zero);
        v[C_METHOD] = Py_NewRef(Py_None);
    } else {
        PyObject *sa = SLOT(request, self->rec_off[R_SA]);
        v[C_MASK] = sa == Py_None ? Py_NewRef(zero) : PyObject_GetAttr(sa, str_component_mask);
        v[C_METHOD] = Py_NewRef(SLOT(SLOT(request, self->rec_off[R_MAD]), self->mad_off[M_METHOD]));
        if (v[C_MASK] == NULL)
            goto out;
    }
    /* Transaction.first_frame: the first request's, else the first frame */
    if (PyList_GET_SIZE(requests))
        v[C_FIRST] = Py_NewRef(SLOT(PyList_GET_ITEM(requests, 0), self->rec_off[R_FRAME]));
    else if ((v[C_FIRST] = PySequence_GetItem(v[C_FRAMES], 0)) == NULL)
        goto out;
    /* Transaction.asks_reversible: the query asks for a reversible path */
    int asks = 0;
    if (query != Py_None && (asks = PySet_Contains(components, str_reversible)) > 0) {
        PyObject *rev = PyObject_GetAttr(query, str_reversible);
        if (rev == NULL)
            goto out;
        asks = PyObject_RichCompareBool(rev, one, Py_EQ);
        Py_DECREF(rev);
    }
    if (asks < 0)
        goto out;
    v[C_ASKS] = Py_NewRef(asks ? Py_True : Py_False);
out:  /* (a step that failed left its v[] NULL) */
    return filled(self->closed_class, self->c_off, v, C_N);
}

/* close(t): Replay._close(t), its steps taken here where the replay keeps no closed
 * transaction and draws no arrows and t is a PathRecord transaction whose frames are
 * FrameLists of frame_class records; otherwise Replay._close's own. */
/* python_floor --parts, capture 3 native IB 200k, replay alone: 1.09 -> 0.85 s (-22 %) with
 * feed */
static PyObject *close_(SaIntake *self, PyObject *t)
{
    if (!self->closes || Py_TYPE(t) != self->transaction_class)
        return PyObject_CallOneArg(self->python_close, t);
    for (int i = 0; i < T_N; i++)
        if (SLOT(t, self->t_off[i]) == NULL)
            return PyObject_CallOneArg(self->python_close, t);
    PyObject *requests = SLOT(t, self->t_off[T_REQUESTS]);
    if (Py_TYPE(requests) != self->frame_list_class
            || Py_TYPE(SLOT(t, self->t_off[T_RESPONSES])) != self->frame_list_class)
        return PyObject_CallOneArg(self->python_close, t);
    int pr = PyObject_RichCompareBool(SLOT(t, self->t_off[T_ATTR]), self->path_record, Py_EQ);
    if (pr < 0)
        return NULL;
    if (!pr)
        return PyObject_CallOneArg(self->python_close, t);
    /* (every frame a frame_class record with its slots and a mad_class header: summary()) */
    PyObject *sides[2] = {requests, SLOT(t, self->t_off[T_RESPONSES])};
    for (int k = 0; k < 2; k++)
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sides[k]); i++) {
            PyObject *f = PyList_GET_ITEM(sides[k], i), *m;
            if (Py_TYPE(f) != self->frame_class || SLOT(f, self->rec_off[R_FRAME]) == NULL
                    || SLOT(f, self->rec_off[R_PRS]) == NULL || SLOT(f, self->rec_off[R_SA]) == NULL
                    || (m = SLOT(f, self->rec_off[R_MAD])) == NULL || Py_TYPE(m) != self->mad_class)
                return PyObject_CallOneArg(self->python_close, t);
        }
    PyObject *request = PyList_GET_SIZE(requests) ? PyList_GET_ITEM(requests, 0) : Py_None;
    /* t.seal(): a FrameList's seal does nothing; the request, its query, its components */
    Py_INCREF(request);
    PyObject *query = Py_None, *components = NULL, *sealed = NULL, *res = NULL, *out = NULL;
    if (request != Py_None) {
        PyObject *recs = SLOT(request, self->rec_off[R_PRS]);
        int any = PyObject_IsTrue(recs);
        if (any < 0)
            goto done;
        if (any && (query = PySequence_GetItem(recs, 0)) == NULL)
            goto done;
        if (!any)
            Py_INCREF(query);
    } else
        Py_INCREF(query);
    if ((components = PyObject_CallOneArg(self->components_of, request)) == NULL
            || (sealed = PyTuple_Pack(3, request, query, components)) == NULL)
        goto done;
    set_slot(t, self->t_off[T_SEALED], sealed);
    if (add_to(self->replay, str_sa_count, one) < 0
            || (res = place(self, t, query, components)) == NULL)
        goto done;
    PyObject *on_close = PyObject_GetAttr(self->replay, str_on_close);
    if (on_close == NULL)
        goto done;
    if (on_close != Py_None) {
        PyObject *args[2] = {t, res};
        PyObject *r = PyObject_Vectorcall(on_close, args, 2, NULL);
        Py_DECREF(on_close);
        if (r == NULL)
            goto done;
        Py_DECREF(r);
    } else
        Py_DECREF(on_close);
    if (res != Py_None) {  /* judged: the resolution keeps what its rules read */
        PyObject *summary_ = summary(self, t, request, query, components);
        if (summary_ == NULL)
            goto done;
        PyObject *ts = PyObject_GetAttr(res, str_transactions);
        int ok = ts != NULL && PyList_Check(ts) && PyList_GET_SIZE(ts) > 0;
        if (ok) {
            Py_INCREF(summary_);
            PyList_SET_ITEM(ts, PyList_GET_SIZE(ts) - 1, summary_);
            Py_DECREF(t);  /* (the reference the list held) */
            /* (t stays alive: the caller holds it) */
        } else if (ts != NULL)
            PyErr_SetString(PyExc_TypeError, "SaIntake: a resolution without its transaction");
        Py_XDECREF(ts);
        if (!ok || mark(self, res, summary_) < 0) {
            Py_DECREF(summary_);
            goto done;
        }
        Py_DECREF(summary_);
        PyObject *id = PyLong_FromVoidPtr(res);
        int set = id == NULL ? -1 : PyDict_SetItem(self->holding, id, res);
        Py_XDECREF(id);
        if (set < 0 || add_to(self->replay, str_held, one) < 0)
            goto done;
        PyObject *held = PyObject_GetAttr(self->replay, str_held);
        if (held == NULL)
            goto done;
        Py_ssize_t n = PyLong_AsSsize_t(held);
        Py_DECREF(held);
        if (n == -1 && PyErr_Occurred())
            goto done;
        if (n > self->held_max && self->spills) {
            PyObject *r = PyObject_CallNoArgs(self->spill_held);
            if (r == NULL)
                goto done;
            Py_DECREF(r);
        }
    }
    out = Py_NewRef(Py_None);
done:
    Py_DECREF(request);
    Py_XDECREF(query);
    Py_XDECREF(components);
    Py_XDECREF(res);
    return out;
}

/* Replay.feed(rec, keep) (see the file's comment), the records it counts added to *counted
 * (the caller adds them to the replay's): 0, or -1 with the error set. */
static int feed_one(SaIntake *self, PyObject *rec, PyObject *keep, Py_ssize_t *counted)
{
    PyObject *mad, *args[2] = {rec, keep};
    if (Py_TYPE(rec) != self->frame_class || (keep != Py_True && keep != Py_False))
        goto python;
    for (int i = 0; i < R_N; i++)
        if (SLOT(rec, self->rec_off[i]) == NULL)  /* (a fact has every slot filled) */
            goto python;
    if (SLOT(rec, self->rec_off[R_UMAD]) != Py_None
            || (mad = SLOT(rec, self->rec_off[R_MAD])) == NULL || Py_TYPE(mad) != self->mad_class)
        goto python;
    PyObject *kind = SLOT(rec, self->rec_off[R_KIND]);
    if (kind != self->kind) {
        int eq = kind == NULL ? 0 : PyObject_RichCompareBool(kind, self->kind, Py_EQ);
        if (eq < 0)
            return -1;
        if (!eq)
            goto python;
    }
    ++*counted;  /* self.records += 1 */
    if (keep == Py_True && PyList_Append(self->frame_records, rec) < 0)
        return -1;
    return sa(self, rec, mad);
python:;
    PyObject *r = PyObject_Vectorcall(self->fallback, args, 2, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* replay.records += n: 0, or -1 with the error set (kept where one was set already). */
static int count_records(SaIntake *self, Py_ssize_t n, int failed)
{
    if (n == 0)
        return failed ? -1 : 0;
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    if (failed)
        PyErr_Fetch(&type, &value, &tb);
    PyObject *by = PyLong_FromSsize_t(n);
    int r = by == NULL ? -1 : add_to(self->replay, str_records, by);
    Py_XDECREF(by);
    if (failed) {
        if (r < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return -1;
    }
    return r;
}

/* feed(rec, keep): Replay.feed(rec, keep) (see the file's comment). */
/* python_floor --parts, capture 3 native IB 200k, replay alone: 1.09 -> 0.85 s (-22 %) with
 * close */
static PyObject *feed(SaIntake *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "feed(rec, keep)");
        return NULL;
    }
    Py_ssize_t counted = 0;
    int failed = feed_one(self, args[0], args[1], &counted) < 0;
    if (count_records(self, counted, failed) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* feed_all(records, keep): feed(rec, k) for each record and its keep, in order; the records
 * counted once. */
/* python_floor --parts, capture 3 native IB 200k, replay alone: 0.82 -> 0.68 s (-17 %) with
 * open_transaction */
static PyObject *feed_all(SaIntake *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "feed_all(records, keep)");
        return NULL;
    }
    PyObject *recs = PySequence_Fast(args[0], "feed_all: records must be a sequence");
    if (recs == NULL)
        return NULL;
    PyObject *keep = PySequence_Fast(args[1], "feed_all: keep must be a sequence");
    if (keep == NULL) {
        Py_DECREF(recs);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(recs), counted = 0;
    int failed = 0;
    if (PySequence_Fast_GET_SIZE(keep) != n) {
        PyErr_SetString(PyExc_ValueError, "feed_all: a keep for each record expected");
        failed = 1;
    }
    for (Py_ssize_t i = 0; !failed && i < n; i++)
        failed = feed_one(self, PySequence_Fast_GET_ITEM(recs, i),
                          PySequence_Fast_GET_ITEM(keep, i), &counted) < 0;
    Py_DECREF(recs);
    Py_DECREF(keep);
    if (count_records(self, counted, failed) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef intake_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))feed, METH_FASTCALL,
     "feed(rec, keep): Replay.feed(rec, keep), an SA frame's steps taken here."},
    {"feed_all", (PyCFunction)(void (*)(void))feed_all, METH_FASTCALL,
     "feed_all(records, keep): feed(rec, k) for each record and its keep (Replay.feed_all)."},
    {"close", (PyCFunction)close_, METH_O,
     "close(t): Replay._close(t), a PathRecord transaction's steps taken here where the "
     "replay keeps no closed transaction and draws no arrows (the batches feed closes)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SaIntakeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ibpath_scapy.native._scan.SaIntake",
    .tp_doc = "SaIntake(replay, frame_class, mad_class, transaction_class, kind, method_resp, "
              "path_record): Replay.feed's SA frames taken in C (audit/replay.py intake).",
    .tp_basicsize = sizeof(SaIntake),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)init,
    .tp_dealloc = (destructor)dealloc,
    .tp_methods = intake_methods,
};

int add_sa_intake(PyObject *module)
{
    if ((str_records = PyUnicode_InternFromString("records")) == NULL
            || (str_append = PyUnicode_InternFromString("append")) == NULL
            || (str_sa_count = PyUnicode_InternFromString("sa_count")) == NULL
            || (str_on_close = PyUnicode_InternFromString("on_close")) == NULL
            || (str_held = PyUnicode_InternFromString("_held")) == NULL
            || (str_sgid = PyUnicode_InternFromString("sgid")) == NULL
            || (str_dgid = PyUnicode_InternFromString("dgid")) == NULL
            || (str_pkey = PyUnicode_InternFromString("pkey")) == NULL
            || (str_transactions = PyUnicode_InternFromString("transactions")) == NULL
            || (str_spilled_count = PyUnicode_InternFromString("spilled_count")) == NULL
            || (str_marks = PyUnicode_InternFromString("marks")) == NULL
            || (no_pkey = PyLong_FromLong(0xFFFF)) == NULL
            || (str_component_mask = PyUnicode_InternFromString("component_mask")) == NULL
            || (str_reversible = PyUnicode_InternFromString("reversible")) == NULL
            || (str_Q = PyUnicode_InternFromString("Q")) == NULL
            || (zero = PyLong_FromLong(0)) == NULL
            || (one = PyLong_FromLong(1)) == NULL)
        return -1;
    return add_type(module, &SaIntakeType, "SaIntake");
}
