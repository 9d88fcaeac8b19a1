"""The declared shape of every decoded record: frozen, slotted dataclasses.

What the decoders establish and the rules read, one class per thing: a layer's values (Mad,
Rmpp, SaHeader, PathRecord, the CM messages, generated from the layers' fields_desc so that a
field added to a layer is a fact here with no other edit) and the records of a frame (MadFrame,
BlobFrame, NetlinkFrame, and the problem records). The one assembler (ibpath_scapy.facts.assemble)
makes them; facts.public() turns them into JSON at the edge.

A fact reads like the dict it replaces (`rec["mad"]["method"]`, `rec.get("errors", [])`,
`"rmpp_control" in rec`, `dict(rec)`), in the order of its fields, which is the order of the
JSON keys (interfaces.md). A field left at None is absent: not a key, not in the JSON,
except the NULLABLE ones, which the JSON shows as null (a MAD's unknown attribute name).
A fact equals a dict with the same keys and values (collections.abc.Mapping's ==).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields, make_dataclass
from typing import Any, ClassVar, Iterable

from .kernelview import kernel_view_dict
from ..layers import cm as cm_layers
from ..layers.mad import MAD, RMPP
from ..layers.sa import PathRecord as PathRecordLayer
from ..layers.sa import SA_RECORD_CLASSES, SAHeader
from ..layers.umad import UserMad
from ..native import extension
from .problems import Problem

# frozen dataclasses set their fields through object.__setattr__; caches on a fact do too
_set = object.__setattr__


class Fact:
    """Base of every fact: read-only Mapping access over the fields that are present.

    A registered collections.abc.Mapping, not a subclass: Mapping's ABCMeta would make every
    isinstance(x, Fact) an ABC check, and the audit asks it per record."""

    __slots__ = ()
    KEYS: ClassVar[tuple[str, ...]] = ()
    KEYSET: ClassVar[frozenset] = frozenset()
    NULLABLE: ClassVar[frozenset] = frozenset()  # present (JSON null) even when None

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls._declare()

    @classmethod
    def _declare(cls) -> None:
        """Fix KEYS from the dataclass fields (called again once the dataclass is made)."""
        if "__dataclass_fields__" in cls.__dict__:
            cls.KEYS = tuple(f.name for f in fields(cls) if not f.name.startswith("_"))
            cls.KEYSET = frozenset(cls.KEYS)
            cls._INIT = tuple(f.name for f in fields(cls) if f.init)
            cls._REPR = tuple(f.name for f in fields(cls) if f.repr)

    def __getitem__(self, key: str):
        if key in self.KEYSET:
            v = getattr(self, key)
            if v is not None or key in self.NULLABLE:
                return v
        raise KeyError(key)

    def get(self, key: str, default=None):
        v = getattr(self, key, None) if key in self.KEYSET else None
        if v is None and key not in self.NULLABLE:
            return default
        return v

    def __contains__(self, key) -> bool:
        return key in self.KEYSET and (key in self.NULLABLE or getattr(self, key) is not None)

    def __iter__(self):
        nullable = self.NULLABLE
        return (k for k in self.KEYS if k in nullable or getattr(self, k) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:
        return True  # a fact is never an empty record

    def keys(self):
        return list(self)

    def items(self):
        return [(k, self[k]) for k in self]

    def values(self):
        return [self[k] for k in self]

    def __eq__(self, other):
        """Equal to any Mapping with the same keys and values (Mapping's ==)."""
        if not isinstance(other, Mapping):
            return NotImplemented
        return dict(self.items()) == dict(other.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        """The dataclass's repr (not generated per class: see _fact)."""
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._REPR)
        return f"{type(self).__qualname__}({args})"

    def __getnewargs_ex__(self):
        """pickle and copy make a fact again through its __new__ (_fast_init), which takes
        its fields."""
        return (), {k: getattr(self, k) for k in self._INIT}


Mapping.register(Fact)


def _on_first_use(cls: type, name: str, make, static: bool = False) -> None:
    """Give cls a stand-in `name` that makes the real method (make(cls) compiles and sets
    it) at its first call: an audit uses a few of the fact classes, and compiling every
    class's methods at import was most of the import's time."""
    if static:
        def first(klass, *args, **kw):
            return make(cls)(klass, *args, **kw)
        setattr(cls, name, staticmethod(first))
    else:
        def first(self, *args, **kw):
            return make(cls)(self, *args, **kw)
        setattr(cls, name, first)


def _fast_init(cls: type) -> type:
    """Give a frozen dataclass a fast constructor, with the same parameters and defaults
    (made at its first call, _on_first_use).

    Python 3.11's generated __init__ goes through object.__setattr__ per field, and a slot's
    descriptor called per field (`desc.__set__(self, v)`) still makes an argument tuple each:
    the fast path makes a record per frame of an SA storm, ~20 fields. So __new__ fills the
    slots of an instance of a mutable twin class (the same bases and __slots__, no frozen
    __setattr__), where `self.x = v` is the interpreter's specialised slot store, then gives
    it its class (__class__ assignment, checked by CPython: the same layout). The instance
    is of cls from then on, as frozen as any other; the twin has no other use."""
    _on_first_use(cls, "__new__", _make_new, static=True)
    return cls


def construction(cls: type) -> tuple[tuple, tuple]:
    """How a fact's __new__ (_make_new) fills its slots: its parameters as (name, default) in
    their positional order (the required ones first; dataclasses.MISSING: no default), and
    (name, value) of the fields no parameter sets. native/_mad.c fills slots by this too."""
    params, fixed = [], []
    for f in fields(cls):
        (params if f.init else fixed).append((f.name, f.default))
    # required parameters first (they are keyword arguments in every call)
    params.sort(key=lambda p: p[1] is not MISSING)
    return tuple(params), tuple(fixed)


def _make_new(cls: type):
    slots = cls.__dict__.get("__slots__", ())
    twin = type(f"_{cls.__name__}Builder", cls.__bases__,
                {"__slots__": slots, "__module__": cls.__module__,
                 "__setattr__": object.__setattr__, "__delattr__": object.__delattr__})
    params, sets, ns = [], [], {"_twin": twin, "_cls": cls, "_new": object.__new__,
                                "_retype": object.__setattr__}
    taken, fixed = construction(cls)
    for name, default in taken:
        if default is MISSING:
            params.append(name)
        else:
            ns[f"_d_{name}"] = default
            params.append(f"{name}=_d_{name}")
        sets.append(f"    self.{name} = {name}\n")
    for name, value in fixed:
        ns[f"_d_{name}"] = value
        sets.append(f"    self.{name} = _d_{name}\n")
    src = (f"def __new__(cls, {', '.join(params)}):\n    self = _new(_twin)\n" + "".join(sets)
           + "    _retype(self, '__class__', _cls)\n    return self\n")
    # exec and __class__ swap: bench/suite.py capture 2 decode (native IB), 145.0k -> 190.4k instructions a frame plain (+31 %)
    exec(compile(src, f"<fact {cls.__name__}>", "exec"), ns)
    new = ns["__new__"]
    new.__qualname__ = f"{cls.__qualname__}.__new__"
    cls.__new__ = staticmethod(new)
    return new


def plain(v):
    """A value of a fact as JSON wants it: facts as dicts, problems as their sentences."""
    t = type(v)
    if t is list or t is tuple:
        return [plain(x) for x in v]
    if t is Problem:
        return str(v)
    to_plain = getattr(v, "plain", None)
    return to_plain() if to_plain is not None else v


# -- the JSON form: plain(), and its text ------------------------------------------------------
# json.dumps of a plain value, without its per-call set-up (the encoder json.dumps makes for
# each call, made once; no check for circular references: facts are frozen trees)
_ENCODER = json.JSONEncoder()
_esc = json.encoder.encode_basestring_ascii
if json.encoder.c_make_encoder is not None:
    _c_encoder = json.encoder.c_make_encoder(None, _ENCODER.default, _esc, None, ": ", ", ",
                                             False, False, True)

    def dumps(v) -> str:
        """json.dumps(v), the same text."""
        return "".join(_c_encoder(v, 0))
else:  # pragma: no cover - CPython has the C encoder
    dumps = _ENCODER.encode

# a value that plain() keeps as it is
_LEAF = frozenset({str, int, float, bool})
_INF = float("inf")


def _float_json(v: float) -> str:
    if -_INF < v < _INF:
        return float.__repr__(v)
    return dumps(v)  # NaN, Infinity, -Infinity


def _list_json(v) -> str:
    return "[" + ", ".join([json_text(x) for x in v]) + "]"


def _slow_json(v) -> str:
    """json_text of a value of another type than _JSON's: a fact whose to_json is not made
    yet, or what plain() keeps as it is (an int subclass such as an IntEnum, ...)."""
    if isinstance(v, Fact):
        return v.to_json()
    return dumps(plain(v))


# the JSON text of a value by its type: what dumps(plain(v)) gives, with a fact's text made
# by its own to_json (fact classes are added as their to_json is made)
_JSON: dict[type, Any] = {
    str: _esc, int: int.__repr__, float: _float_json, bool: {True: "true", False: "false"}.get,
    type(None): lambda v: "null", list: _list_json, tuple: _list_json, dict: dumps,
    Problem: lambda p: _esc(str(p)),
}
_json_get = _JSON.get


def json_text(v) -> str:
    """The JSON text of a fact (or any value): the text json.dumps(plain(v)) gives, made
    without the intermediate dicts, each distinct layer fact's text once."""
    return _json_get(type(v), _slow_json)(v)


def _layer_json(self) -> str:
    """to_json of a layer fact: dumps of its plain() dict, kept in `_text`: the fast path
    shares one fact between the records that have the same bytes (flyweights), so that a
    fact's text is made once."""
    text = self._text
    if text is None:
        text = dumps(self.plain())
        _set(self, "_text", text)
    return text


def _layer_writer(cls: type):
    """json_text's maker of a layer fact's text: the C extension's (native/_factjson.c,
    which keeps it in `_text` as _layer_json does, and asks _layer_json for what it does not
    write), or _layer_json where there is none."""
    native = extension()
    shown = _shown(cls, True)
    if native is None or any(conv for _, _, conv, _ in shown):
        return _layer_json
    return native.FactJson(cls, tuple(k for k, _, _, _ in shown),
                           tuple((_esc(key) + ": ").encode() for _, key, _, _ in shown),
                           tuple(nullable for _, _, _, nullable in shown), "_text", _layer_json)


def _render_methods(cls: type, scalar: bool) -> None:
    """Give cls plain(), the fact as a JSON-ready dict in field order, and to_json(), the
    JSON text of that dict. A scalar fact (a layer's values) keeps its dict in `_json`, made
    once, and its text in `_text`: flyweight facts are shared by many records. Both of a
    record class are compiled at their first call from the same list of what it shows
    (_shown): `ibpath decode` makes one per frame."""
    _on_first_use(cls, "plain", lambda c: _make_plain(c, scalar))
    if scalar:
        cls.to_json = _layer_json
        _JSON[cls] = _layer_writer(cls)
    else:
        _on_first_use(cls, "to_json", _make_json)


# a field shown under another key, converted: a kernel-bound path array's kernel_blob is
# shown as each kernel profile's choice
_SHOWN_AS = {"kernel_blob": ("kernel_view", "_kv")}
_RENDER_NS = {"_kv": kernel_view_dict, "_set": _set, "_plain": plain, "_leaf": _LEAF,
              "_json": _json_get, "_slow": _slow_json, "_dumps": dumps}


def _shown(cls: type, scalar: bool) -> list[tuple[str, str, str | None, bool]]:
    """What a fact shows, in field order: (field, key, converter, nullable); converter, the
    name of a function of _RENDER_NS that makes the shown value, None for plain()'s own."""
    return [(k, *_SHOWN_AS.get(k, (k, "" if scalar else None)), k in cls.NULLABLE)
            for k in cls.KEYS]


def _compiled(cls: type, name: str, lines: list[str]):
    ns = dict(_RENDER_NS)
    # exec: bench/suite.py capture 2 decode (native IB), 145.0k -> 163.6k instructions a frame plain (+13 %)
    exec(compile("\n".join(lines) + "\n", f"<fact {cls.__name__}.{name}>", "exec"), ns)
    setattr(cls, name, ns[name])
    return ns[name]


def _make_plain(cls: type, scalar: bool):
    lines = ["def plain(self):"]
    if scalar:
        lines += ["    d = self._json", "    if d is not None:", "        return d"]
    lines.append("    d = {}")
    for k, key, conv, nullable in _shown(cls, scalar):
        # a value plain() keeps as it is (_leaf) needs no call
        value = f"{conv}(v)" if conv is not None else "v if type(v) in _leaf else _plain(v)"
        lines.append(f"    v = self.{k}")
        if nullable:
            lines.append(f"    d[{key!r}] = {value}")
        else:
            lines += ["    if v is not None:", f"        d[{key!r}] = {value}"]
    if scalar:
        lines.append("    _set(self, '_json', d)")
    lines.append("    return d")
    return _compiled(cls, "plain", lines)


def _make_json(cls: type):
    """to_json of a record class: dumps(self.plain()), each value's text as json_text makes it."""
    lines = ["def to_json(self):", "    out = []", "    add = out.append"]
    for k, key, conv, nullable in _shown(cls, False):
        value = f"_dumps({conv}(v))" if conv else "_json(type(v), _slow)(v)"
        lines.append(f"    v = self.{k}")
        if not nullable:
            lines.append("    if v is not None:")
        lines.append(f"{'    ' * (1 + (not nullable))}add({_esc(key) + ': '!r} + {value})")
    lines.append("    return '{' + ', '.join(out) + '}'")
    made = _compiled(cls, "to_json", lines)
    _JSON[cls] = made
    return made


def _fact(cls=None, /, **kw):
    """@_fact: a frozen, slotted, keyword-only dataclass over Fact. Its __init__ and
    __repr__ are not generated (each a compile at import): _fast_init gives its constructor,
    Fact its repr."""

    def wrap(c):
        c = dataclass(frozen=True, slots=True, kw_only=True, eq=False, init=False, repr=False,
                      **kw)(c)
        c._declare()
        _render_methods(c, scalar=False)
        return _fast_init(c)

    return wrap if cls is None else wrap(cls)


def public_names(layer: type) -> list[str]:
    """The fields of a layer a record shows: all but the reserved ones and record lists."""
    return [f.name for f in layer.fields_desc
            if f.name != "records" and not f.name.startswith("reserved")]


def layer_fact(name: str, layer: type, names: Iterable[str] | None = None,
               derived: Iterable[str] = (), doc: str = "") -> type[Fact]:
    """A fact class whose fields are the layer's public fields (or `names`), then `derived`
    (values the assembler computes, always shown, null included)."""
    names, derived = list(names if names is not None else public_names(layer)), list(derived)
    cls = make_dataclass(name, [(n, Any, field(default=None)) for n in names + derived]
                         + [("_json", Any, field(default=None, init=False, repr=False)),
                            ("_text", Any, field(default=None, init=False, repr=False))],
                         bases=(Fact,), frozen=True, slots=True, kw_only=True, eq=False,
                         init=False, repr=False, namespace={"__module__": __name__})
    cls.NULLABLE = frozenset(derived)
    cls.__doc__ = doc or f"The values of one {layer.__name__} layer."
    cls._declare()
    _render_methods(cls, scalar=True)
    return _fast_init(cls)


# -- layers ------------------------------------------------------------------------------
Mad = layer_fact("Mad", MAD, derived=("method_name", "attribute_name", "status_text"),
                 doc="A MAD header: its fields, and the names of its method, attribute and "
                     "status.")
Rmpp = layer_fact("Rmpp", RMPP)
PATH_RECORD_FIELDS = public_names(PathRecordLayer)
PathRecord = layer_fact("PathRecord", PathRecordLayer)
# The fact class of each SA record class (layers.sa's attribute table), made on first use
_SA_RECORD_FACTS: dict[type, type[Fact]] = {PathRecordLayer: PathRecord}


def sa_record_fact(layer: type) -> type[Fact]:
    """The fact class of the records of an SA attribute's layer class: PathRecord's for the
    PathRecord, one made from the layer's public fields for any other."""
    fact = _SA_RECORD_FACTS.get(layer)
    if fact is None:
        fact = _SA_RECORD_FACTS[layer] = layer_fact(layer.__name__, layer)
        # a module attribute by its qualified name, so that pickle finds the class (records
        # cross process boundaries: --jobs, the Dask cluster)
        fact.__qualname__ = f"sa_record_{layer.__name__}"
        globals()[fact.__qualname__] = fact
    return fact


# made now for the attributes the layers register, so that a process that unpickles records
# (the --jobs parent, a Dask client) has their classes before it has decoded any
for _layer in list(SA_RECORD_CLASSES.values()):
    sa_record_fact(_layer)
SaHeader = layer_fact("SaHeader", SAHeader, derived=("components",),
                      doc="The SA header: SM_Key, AttributeOffset, ComponentMask and the names "
                          "of the ComponentMask bits set.")

CM_REQ_PATH_FIELDS = [
    "local_lid", "remote_lid", "local_gid", "remote_gid", "flow_label", "packet_rate",
    "traffic_class", "hop_limit", "sl", "subnet_local", "local_ack_timeout",
]
CM_REQ_FIELDS = (
    [f"primary_{f}" for f in CM_REQ_PATH_FIELDS]
    + [f"alternate_{f}" for f in CM_REQ_PATH_FIELDS]
    + ["service_id", "pkey", "path_packet_payload_mtu", "local_comm_id"]
)
CmReqPaths = layer_fact("CmReqPaths", cm_layers.CMReq, CM_REQ_FIELDS,
                        doc="The paths a CM REQ asks for, and its service, P_Key and MTU.")


def _cm_fact(cls: type) -> type[Fact]:
    short = cls._name.split()[-1]
    names = ["message"] + [n for n in public_names(cls) if n != "private_data"]
    return layer_fact("Cm" + short.capitalize(), cls, names,
                      doc=f"A CM {short} message (its private data left out).")


# the fact class of each CM message layer; "message" is its short name (REQ, REP, ...)
CM_FACTS: dict[type, type[Fact]] = {c: _cm_fact(c) for c in cm_layers.CM_MESSAGE_CLASSES.values()}
globals().update({f.__name__: f for f in CM_FACTS.values()})  # pickle finds them by name


@_fact
class BlobRecord(Fact):
    """One struct ib_path_rec_data of a blob or LS answer."""

    flags: int
    flag_names: list
    reserved: int
    path_record: Fact
    NULLABLE = frozenset({"flags", "flag_names", "reserved", "path_record"})


@_fact
class BlobInfo(Fact):
    """A blob's size: bytes, whole records, bytes past the last whole record; the result of
    the rdma_set_option call that handed it over, when the capture says."""

    length: int
    records: int
    trailing_bytes: int
    set_option_result: Any = None


# -- RDMA netlink ---------------------------------------------------------------------------
@_fact
class NlHeader(Fact):
    """An RDMA netlink message header (nlmsg_type split into client and op)."""

    nlmsg_len: int
    nlmsg_type: int
    nlmsg_flags: int
    nlmsg_seq: int
    nlmsg_pid: int
    rdma_client: int
    rdma_op: int


@_fact
class NlClientHeader(NlHeader):
    """The header of a message of another RDMA netlink client than LS, with its name."""

    client_name: Any = None
    NULLABLE = frozenset({"client_name"})


@_fact
class LsAttribute(Fact):
    """An LS attribute: header fields, and its value, its blob record index (PATH_RECORD of
    an answer) or its bytes."""

    index: int
    type: int
    type_name: str
    nla_type: int
    nla_len: int
    mandatory: bool
    value: Any = None
    blob_record: Any = None
    value_hex: Any = None


@_fact
class LsMessage(Fact):
    """An RDMA_NL_LS message: op, sequence, flags; a RESOLVE request's device, port and
    path use; an IP_RESOLVE request's ifindex; its attributes; for an answer, the request it
    answers (by sequence number) and that request's path use."""

    op: str
    op_code: int
    seq: int
    flags: int
    request: bool
    error: bool
    device_name: Any = None
    port_num: Any = None
    path_use: Any = None
    path_use_name: Any = None
    ifindex: Any = None
    attributes: Any = None
    request_frame: Any = None
    request_path_use: Any = None


# -- umad ------------------------------------------------------------------------------------
UmadHeader = layer_fact("UmadHeader", UserMad,
                        doc="struct ib_user_mad_hdr: how a process addressed a MAD to the "
                            "kernel, or how the kernel handed one over.")


@_fact
class Umad(Fact):
    """A MAD as a process wrote it to a umad fd or read it from one (ibpath record): the
    direction ("write", "read"; None where no comment says), the umad header, the call; for
    an answer read, the request frame written with the same low 32 TID bits on the same fd
    and agent, and the TID it was written with when the kernel gave it other upper bits
    (user_mad.c ib_umad_write puts the agent's hi_tid there)."""

    direction: Any = None
    header: Any = None
    call: Any = None
    request_frame: Any = None
    written_tid: Any = None


# -- the records of a frame ------------------------------------------------------------------
class Record(Fact):
    """A decoded record: one per MAD, netlink message or blob, or one problem; each has
    "frame" and "kind"."""

    __slots__ = ()


@_fact
class MadFrame(Record):
    """A frame that carries a MAD: where it came from, the MAD header, and by class the
    RMPP and SA headers and PathRecords, or the CM message; its problems."""

    frame: int
    time: float
    kind: str
    encap: Any = None
    src: Any = None
    dst: Any = None
    src_gid: Any = None
    dst_gid: Any = None
    dst_qp: Any = None
    src_qp: Any = None
    mad: Any = None
    error: Any = None  # a MAD cut short (kind "malformed"): its first problem
    rmpp: Any = None
    sa: Any = None
    rmpp_dropped: Any = None  # why the receiving kernel drops this RMPP segment
    rmpp_control: Any = None
    reassembled_from: Any = None
    path_records: Any = None
    cm: Any = None
    cm_req: Any = None
    errors: Any = None
    umad: Any = None  # a MAD of ibpath record's umad source: the umad side (Umad)
    # the records of an SA attribute other than PathRecord (layers.sa's attribute table),
    # facts of sa_record_fact(its layer class); PathRecords are path_records
    sa_records: Any = None
    # the fields an SA MAD adds (the rest are the frame's place, its MAD header, its problems)
    SA_FIELDS: ClassVar[tuple] = ("rmpp", "sa", "rmpp_dropped", "rmpp_control",
                                  "reassembled_from", "path_records", "sa_records")


@_fact
class BlobFrame(Record):
    """A path array handed to the kernel (rdma_set_option optval): its records and what the
    kernel reads of it (kernel_blob, judged by the audit)."""

    frame: int
    time: float
    kind: str
    encap: str
    blob: BlobInfo
    blob_records: list
    kernel_blob: Any
    errors: Any = None
    _view: Any = field(default=None, init=False, repr=False)  # audit.kernel's judgement, once made


@_fact
class NetlinkFrame(Record):
    """An RDMA netlink message (or a netlink record with none): header, and for LS its
    message; an LS RESOLVE answer's blob records and what the kernel reads of them."""

    frame: int
    time: float
    encap: str
    direction: str
    pkttype: Any = None
    netlink: Any = None
    kind: str
    ls: Any = None
    blob_records: Any = None
    kernel_blob: Any = None
    malformed: Any = None
    errors: Any = None
    error: Any = None
    _view: Any = field(default=None, init=False, repr=False)
    NULLABLE = frozenset({"pkttype"})


@_fact
class Malformed(Record):
    """A frame that should carry a MAD or a path array but cannot be read."""

    frame: int
    kind: str = "malformed"
    error: Any


@_fact
class FrameLimit(Record):
    """A frame too large to dissect (DECODE-LIMIT)."""

    frame: int
    kind: str = "malformed"
    limit: str
    error: Any


@_fact
class Unfinished(Record):
    """An RMPP transfer never completed, at the end of the file."""

    frame: int
    kind: str = "malformed"
    frames: list
    error: Any
    limit: Any = None


@_fact
class Unsupported(Record):
    """The frames of one link type no layer reads, counted."""

    frame: int
    kind: str = "unsupported"
    linktype: int
    count: int
    error: Any


@_fact
class CrcCensus(Record):
    """Zero ICRCs: every one of the capture (a note), or some of them (mismatches)."""

    frame: int
    kind: str = "crc"
    frames: list
    icrc_zero: int
    note: Any = None
    error: Any = None


def remember(fact: Fact, attr: str, value) -> None:
    """Keep a judgement made of a fact on it (audit.kernel's kernel view): a cache, not a
    fact, so it is not a key and never in the JSON."""
    _set(fact, attr, value)
