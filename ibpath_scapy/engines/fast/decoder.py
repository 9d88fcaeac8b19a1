"""The decoder's fast path: GSI datagrams decoded by extractors compiled from the layers.

FastDecoder is a decode.Decoder (the same assembler: RMPP reassembler, LS memory and
statistics) whose decode_at() takes the frames the pre-filter recognised as plain RoCEv2 or
native-IB MADs and reads their layer facts without Scapy; every other frame goes through
Decoder.feed unchanged. The assembler builds the records of both, so they are the same
(tests/test_fastpath.py compares both over every capture of the project and the bench
corpora). Where the package has its C extension, native/_mad.c does decode_at's work for SA
and classless MADs from a plan of the same layers (mad_plan), over the same flyweight tables
(Tables); the Python code here remains the reference (tests/test_native_decoder.py).
"""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Callable, NamedTuple

from scapy.contrib.roce import BTH, GRH
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.pton_ntop import inet_ntop

from ...model import crc, crcspec
from ... import native
from ...facts.assemble import (
    ICRC_MISMATCH,
    MAD_NAMED_BY,
    MAD_VALUE_FIELDS,
    VCRC_MISMATCH,
    SaParts,
    header_expr,
    mad_fact_of,
    mad_names,
    native_record_plan,
    sa_fact,
)
from ..scapy.decode import Decoder
from ...model.exprc import split_name
from ...facts.records import CM_FACTS, PATH_RECORD_FIELDS, CmReqPaths, Mad, Rmpp, \
    construction, public_names, sa_record_fact
from ...facts.records import PathRecord as PathRecordFact
from ...layers import cm as cm_layers
from ...layers.ib import LRH
from ...layers.mad import ATTR_PATH_RECORD, MAD, MAD_SIZE, RMPP
from ...layers.roce import DETH
from ...layers.sa import SAHeader, sa_table_generation
from ...model.layout import build_layer
from ...capture.pcapio import Frame, Taken
from .layout import (
    _GID_CACHE,
    _GID_CACHE_MAX,
    compile_extractor,
    compile_nonzero,
    compile_reader,
    compile_readers,
    NotCompilable,
    gid_text,
    layer_steps,
    prefix_offsets,
    static_length,
)
from .prefilter import Bindings, IbMadAt, MadAt

_new_tuple = tuple.__new__

_MAD_LEN = static_length(MAD)
_RMPP_LEN = static_length(RMPP)
_SA_FIXED = build_layer(SAHeader, "fast").fixed_len  # SAHeader's bytes before its records
_SA_FIELDS = {f.name for f in SAHeader.fields_desc if f.name != "records"}
_SA_START = _MAD_LEN + _RMPP_LEN  # SAHeader's offset in a MAD
_DATA_START = _SA_START + _SA_FIXED


class RecordPlan(NamedTuple):
    """How the fast path reads the records of one entry of the SA attribute table
    (layers.sa.SA_RECORD_CLASSES): the layer class, its fact class, its size, the extractor
    of the fact's values and the test of its reserved bits, both compiled from its layout."""

    attribute_id: int
    layer: type
    fact: type
    size: int
    extract: Callable  # (bytes, start) -> the fact's values, in its field order
    reserved: Callable  # (bytes, start) -> whether a reserved field is not zero
    # the same for native/_mad.c: per fact field (offset, bytes, shift, mask, little-endian,
    # GID), per reserved field a step; None where a field is of a kind C does not read
    c_steps: tuple | None
    c_reserved: tuple | None


def record_plan(attribute_id: int, layer: type) -> RecordPlan:
    """The RecordPlan of an SA attribute's record class."""
    fact = sa_record_fact(layer)
    names = PATH_RECORD_FIELDS if fact is PathRecordFact else public_names(layer)
    assert tuple(names) == tuple(fact._INIT), (layer, names)
    reserved = [f.name for f in layer.fields_desc if f.name.startswith("reserved")]
    try:
        c_steps = c_fact_steps(layer, fact._INIT)
        steps = layer_steps(layer)
        c_reserved = tuple(_step(steps[n]) for n in reserved)
    except NotCompilable:
        c_steps = c_reserved = None
    return RecordPlan(attribute_id, layer, fact, static_length(layer),
                      compile_extractor(layer, fact._INIT, as_tuple=True),
                      compile_nonzero(layer, reserved), c_steps, c_reserved)


def c_fact_steps(layer: type, names) -> tuple:
    """native/_mad.c's reading of the fields `names` of a fixed layout: per field (offset,
    bytes, shift, mask, little-endian, GID), a GID as its 16 bytes; NotCompilable where a
    field is of another kind."""
    steps = layer_steps(layer)
    return tuple((steps[n].offset, 16, 0, 0, 0, 1) if steps[n].kind == "ipv6"
                 else (*_step(steps[n]), 0) for n in names)


class CmPlan(NamedTuple):
    """How the C decoder reads a CM message (native/_mad.c CmPlan): the message's name, its
    fact (made with the name first, then the fields c_fact_steps reads) and, for a REQ,
    the fact of its paths (CmReqPaths) and its steps (None: none)."""

    layer: type
    name: str
    fact: type
    steps: tuple
    paths: type | None
    path_steps: tuple | None


class _Compiled:
    """Everything the fast path reads, compiled once from the layers (again when the SA
    attribute table changes)."""

    def __init__(self):
        self.generation = sa_table_generation()
        # extractors that give a fact's values in its field order, for a positional call
        self.mad = compile_extractor(MAD, MAD_VALUE_FIELDS, as_tuple=True)
        self.mad_dispatch = compile_readers(MAD, ("mgmt_class", "attribute_id"))  # mad_next's key
        self.dqpn = compile_reader(BTH, "dqpn")
        self.src_qp = compile_reader(DETH, "src_qp")
        ip4, ip6 = prefix_offsets(IP), prefix_offsets(IPv6)
        self.addr = {4: (ip4["src"][0], ip4["dst"][0], ip4["src"][2] // 8),
                     6: (ip6["src"][0], ip6["dst"][0], ip6["src"][2] // 8)}
        self.slid = compile_reader(LRH, "slid")
        self.dlid = compile_reader(LRH, "dlid")
        grh = prefix_offsets(GRH)
        self.gids = (grh["sgid"][0], grh["dgid"][0], grh["sgid"][2] // 8)
        self.mad_next = Bindings(MAD, ("mgmt_class", "attribute_id"))
        self.rmpp = compile_extractor(RMPP, Rmpp._INIT, as_tuple=True)
        self.sa = compile_extractor(SAHeader, ["sm_key", "attribute_offset", "component_mask"])
        self.sa_attribute = compile_reader(MAD, "attribute_id")
        hint = SAHeader.field_hints["records"]
        self.record_classes = hint.classes
        self.count = header_expr(hint.count)
        self.stride = header_expr(hint.stride)
        # one plan per entry of the SA attribute table, in a fixed order: the C decoder's
        # route of an attribute with records is ROUTE_SA_RECORDS + its plan's index
        self.record_plans = tuple(record_plan(a, cls) for a, cls in sorted(self.record_classes.items()))
        self.plan_index = {p.attribute_id: k for k, p in enumerate(self.record_plans)}
        self.cm = {}
        # the CM messages the C decoder reads too (those of integer and GID fields only): its
        # route of one is ROUTE_CM + its plan's index
        self.cm_plans: list[CmPlan] = []
        for cls in cm_layers.CM_MESSAGE_CLASSES.values():
            fact = CM_FACTS[cls]  # "message", then the layer's fields (private data not)
            assert fact._INIT[0] == "message", fact._INIT
            name, req = cls._name.split()[-1], cls is cm_layers.CMReq
            self.cm[cls] = (name, fact, compile_extractor(cls, fact._INIT[1:], as_tuple=True),
                            compile_extractor(cls, CmReqPaths._INIT, as_tuple=True)
                            if req else None)
            try:
                self.cm_plans.append(CmPlan(
                    cls, name, fact, c_fact_steps(cls, fact._INIT[1:]),
                    CmReqPaths if req else None,
                    c_fact_steps(cls, CmReqPaths._INIT) if req else None))
            except NotCompilable:
                pass
        assert len(self.record_plans) < ROUTE_CM - ROUTE_SA_RECORDS
        self.cm_index = {p.layer: k for k, p in enumerate(self.cm_plans)}


_C: _Compiled | None = None


def compiled() -> _Compiled:
    global _C
    if _C is None or _C.generation != sa_table_generation():
        _C = _Compiled()
    return _C


_ADDR_CACHE: dict[bytes, str] = {}
_ADDR_CACHE_MAX = 65536
ROCEV2 = "rocev2"  # a RoCEv2 frame's encapsulation (assemble.ADDRESS_KEYS' first)


def _ip_text(raw: bytes) -> str:
    """An address as Scapy's IP/IPv6 fields show it (the Scapy path's str(ip.src))."""
    s = _ADDR_CACHE.get(raw)
    if s is None:
        if len(_ADDR_CACHE) >= _ADDR_CACHE_MAX:
            _ADDR_CACHE.clear()
        s = _ADDR_CACHE[raw] = (inet_ntop(socket.AF_INET6, raw) if len(raw) == 16
                                else socket.inet_ntoa(raw))
    return s


# Entries per flyweight table: the frames that repeat a header (the segments of one answer,
# retries) or a PathRecord (the same pair asked again) come close together; a table holds
# ~1 KB a entry, so it is small enough for the audit's memory not to depend on it (a storm of
# unique transaction IDs filled 65,536 MAD headers: ~60 MB).
_FLYWEIGHTS = 8192


def _remember(cache: dict, key: bytes, value):
    if len(cache) >= _FLYWEIGHTS:
        cache.clear()
    cache[key] = value
    return value


# What the C decoder is to do with a MAD header (Tables.route): hand the frame back (a class
# with a layer it does not read, a CM message with a field it does not read), an SA MAD of an
# attribute without records, a MAD with no layer above it, an SA MAD whose records plan k
# reads (ROUTE_SA_RECORDS + k), or a CM message its plan k reads (ROUTE_CM + k).
# native/_mad.c's ROUTE_*.
ROUTE_PYTHON, ROUTE_SA_OTHER, ROUTE_PLAIN, ROUTE_SA_RECORDS = range(4)
ROUTE_CM = 128  # a CM message the C decoder reads by plan k: ROUTE_CM + k
_ROUTE_BYTES = [bytes([r]) for r in range(256)]


class Tables:
    """A decoder's flyweight tables, and what fills them on a miss: records share the facts
    of identical header and PathRecord bytes (an SA storm repeats the same few paths and
    headers), which saves most of the replay's memory; facts are immutable. Bounded: each is
    emptied when full. Both decode paths, Python and C (native/_mad.c), read and fill the same
    tables; they hold nothing that holds the decoder (no reference cycle: gcpace)."""

    def __init__(self, c: _Compiled):
        self.c = c
        self.mads: dict[bytes, object] = {}
        self.rmpps: dict[bytes, object] = {}
        self.sas: dict[bytes, object] = {}
        # per record plan, (fact, reserved bits set) by the record's bytes
        self.records: tuple[dict[bytes, tuple], ...] = tuple({} for _ in c.record_plans)
        self.make_records = tuple(self._maker(p) for p in c.record_plans)
        # the C decoder's: ROUTE_* by class and attribute, a MAD's names by method, class,
        # attribute and status (packed into integers), where tuples by address bytes
        self.routes: dict[int, int] = {}
        self.names: dict[int, tuple] = {}
        # an SA MAD's (RMPP fact, SA header fact, record count, stride) by its header shape
        self.shapes: dict[bytes, tuple] = {}
        self.wheres: dict[bytes, tuple] = {}

    def mad(self, b: bytes, o: int):
        """The Mad fact of the MAD header at b[o:]."""
        key = b[o:o + _MAD_LEN]
        m = self.mads.get(key)
        if m is None:
            m = _remember(self.mads, key, mad_fact_of(self.c.mad(b, o)))
        return m

    def make_rmpp(self, b: bytes, s: int):
        return Rmpp(*self.c.rmpp(b, s))

    def make_sa(self, b: bytes, s: int):
        """The SaHeader fact of the SA header at b[s:] (its MAD header before it)."""
        return sa_fact(**self.c.sa(b, s), attribute_id=self.c.sa_attribute(b, s - _SA_START))

    @staticmethod
    def _maker(plan: RecordPlan) -> Callable:
        """(bytes, start) -> (the record's fact, whether its reserved bits are set)."""
        fact, extract, reserved = plan.fact, plan.extract, plan.reserved

        def make(b: bytes, s: int) -> tuple:
            return fact(*extract(b, s)), reserved(b, s)

        return make

    def route_of(self, mgmt_class: int, attribute_id: int) -> int:
        """ROUTE_* of a MAD of this class and attribute, for the C decoder's table."""
        c = self.c
        nxt = c.mad_next.resolve((mgmt_class, attribute_id))
        if nxt is RMPP:
            k = c.plan_index.get(attribute_id)
            return ROUTE_SA_OTHER if k is None else ROUTE_SA_RECORDS + k
        if nxt is None:
            return ROUTE_PLAIN
        k = c.cm_index.get(nxt)
        return ROUTE_PYTHON if k is None else ROUTE_CM + k

    def sa(self, b: bytes, o: int, end: int, m) -> tuple:
        """(RMPP fact, SA header fact, record facts, reserved) of the SA MAD at b[o:end]:
        the records None when its attribute has no entry in the SA attribute table;
        reserved, per record whether its reserved bits are set, () when none is. The facts
        are flyweights; a record's reserved verdict is kept with its fact (the same bytes,
        the same verdict). One reader for a frame's MAD and a reassembled message: a call
        per SA frame."""
        c = self.c
        key = b[o + _MAD_LEN:o + _SA_START]
        r = self.rmpps.get(key)
        if r is None:
            r = _remember(self.rmpps, key, self.make_rmpp(b, o + _MAD_LEN))
        k = c.plan_index.get(m.attribute_id)
        # the header's fact names its ComponentMask by the attribute's record class: keyed
        # by its bytes and the route, as the C decoder keys it
        key = b[o + _SA_START:o + _DATA_START] + _ROUTE_BYTES[
            ROUTE_SA_OTHER if k is None else ROUTE_SA_RECORDS + k]
        h = self.sas.get(key)
        if h is None:
            h = _remember(self.sas, key, self.make_sa(b, o + _SA_START))
        if k is None:
            return r, h, None, ()
        data = o + _DATA_START
        n = c.count(m, r, h, max(end - data, 0))
        records, reserved = [], ()
        if not n:
            return r, h, records, reserved
        table, size, make = self.records[k], c.record_plans[k].size, self.make_records[k]
        stride = c.stride(m, r, h) if n > 1 else 0  # (one record: no stride to compute)
        for i in range(n):
            s = data + i * stride
            key = b[s:s + size]
            known = table.get(key)
            if known is None:
                known = _remember(table, key, make(b, s))
            if known[1]:
                if not reserved:
                    reserved = [False] * n
                reserved[len(records)] = True
            records.append(known[0])
        return r, h, records, reserved

    def whole(self, message: bytes) -> tuple[list, list]:
        """The records of a reassembled message (decode.py: MAD(message)[SAHeader].records).
        rmpp.reassemble() never makes a message shorter than the SA MAD header."""
        _, _, records, reserved = self.sa(message, 0, len(message), self.mad(message, 0))
        return (records, reserved) if records is not None else ([], ())


def rocev2_where(data: bytes, at: MadAt) -> tuple:
    """The addresses of a RoCEv2 MAD frame, in assemble.ADDRESS_KEYS order (no GIDs)."""
    c = compiled()
    src, dst, n = c.addr[at.ip_version]
    ip = at.ip
    return (ROCEV2, _ip_text(data[ip + src:ip + src + n]), _ip_text(data[ip + dst:ip + dst + n]),
            None, None, c.dqpn(data, at.bth), c.src_qp(data, at.deth))


def native_where(data: bytes, at: IbMadAt) -> tuple:
    """The addresses of a native-IB MAD frame (decode._addresses), in ADDRESS_KEYS order."""
    c = compiled()
    src_gid = dst_gid = None
    if at.grh >= 0:
        sgid, dgid, n = c.gids
        src_gid = gid_text(data[at.grh + sgid:at.grh + sgid + n])
        dst_gid = gid_text(data[at.grh + dgid:at.grh + dgid + n])
    return ("ib", f"LID {c.slid(data, at.lrh)}", f"LID {c.dlid(data, at.lrh)}", src_gid,
            dst_gid, c.dqpn(data, at.bth), c.src_qp(data, at.deth))


def where(data: bytes, at: MadAt | IbMadAt) -> tuple:
    """The addresses of a fast-path MAD frame (the C decoder's wheres table fills so)."""
    return rocev2_where(data, at) if at.__class__ is MadAt else native_where(data, at)


class FastDecoder(Decoder):
    """decode.Decoder plus decode_at() for the frames the pre-filter hands over."""

    def __init__(self):
        super().__init__()
        self.c = compiled()
        self.skipped = 0  # frames the pre-filter dropped (counted in stats.frames too)
        self.tables = Tables(self.c)
        self._native = mad_decoder(self.tables)  # native/_mad.c, or None

    def decode_at(self, frame: Frame, at: MadAt | IbMadAt):
        """The one record of a frame the pre-filter classified as a plain RoCEv2 or native-IB
        MAD, or None when the compiled decoder does not know its MAD payload: then the frame
        goes to feed() (the Scapy path). The C decoder reads what it can; the rest, here."""
        if self._native is not None:
            # (the RMPP reassembler given each time, as stats: a reset assembler makes new ones)
            got = self._native.frame(frame.data, at, frame.number, frame.time, self.stats,
                                     self.rmpp)
            if got is not None:
                if got.__class__ is not tuple:  # the record, made and counted in C
                    return got
                return self._finish(frame.number, frame.time, got)
        return self._python_at(frame, at)

    def decode_taken(self, run: Taken, at: MadAt | IbMadAt) -> list:
        """The records of a run of frames a reader's loop took (pcapio.Taken), in order, as
        decode_at (or feed, where it gives None) makes them frame by frame. The C decoder
        reads the run's records from the read buffer itself; a Frame is made only for the
        frames it leaves to Python."""
        if self._native is None:  # every frame left to Python, as the C leaves some
            records, rest = [None] * len(run), [(j, None, None, None) for j in range(len(run))]
        else:
            records, rest = self._native.taken(run.buf, run.taken, run.number, run.epb,
                                               run.little, run.res, at, self.stats, self.rmpp)
        fed = None
        for j, number, time, got in rest:
            if got is not None:
                records[j] = self._finish(number, time, got)
                continue
            frame = run.frame(j)
            rec = self._python_at(frame, at)
            if rec is None:
                fed = fed or {}
                fed[j] = self.feed(frame)
            else:
                records[j] = rec
        if fed:  # what feed gave: any number of records in the frame's place
            out = []
            for j, rec in enumerate(records):
                if j in fed:
                    out += fed[j]
                else:
                    out.append(rec)
            return out
        return records

    def _finish(self, number: int, time: float, got: tuple):
        """The record of a frame the C decoder read the parts of (decode's tuple)."""
        self.stats.frames += 1
        rec = self.mad_frame_at(number, time, *got)
        by_kind = self.stats.by_kind
        by_kind[rec.kind] = by_kind.get(rec.kind, 0) + 1
        return rec

    def _python_at(self, frame: Frame, at: MadAt | IbMadAt):
        """decode_at in Python: the frames the C decoder does not take, and all of them
        without it."""
        c = self.c
        data = frame.data
        o = at.mad
        nxt = c.mad_next.resolve(c.mad_dispatch(data, o))
        if nxt is not RMPP and nxt is not None and nxt not in c.cm:
            return None
        self.stats.frames += 1
        tables = self.tables
        mad = tables.mad(data, o)
        if at.__class__ is MadAt:
            where = rocev2_where(data, at)
            ip_bytes = data[at.ip:]
            icrc = ip_bytes[-4:]
            errors = [] if crc.rocev2_icrc(ip_bytes) == icrc else [ICRC_MISMATCH]
        else:
            where, errors, icrc = self._native_ib(data, at)
        sa = cm = cm_req = None
        if nxt is RMPP:
            end = o + MAD_SIZE
            # SaParts made by tuple.__new__ (what its _make does): not its Python __new__
            sa = _new_tuple(SaParts, (*tables.sa(data, o, end, mad), data[o:end], tables.whole))
        elif nxt is not None:
            name, fact, extract, req = c.cm[nxt]
            cm = fact(name, *extract(data, o + _MAD_LEN))
            if req is not None:
                cm_req = CmReqPaths(*req(data, o + _MAD_LEN))
        rec = self.mad_frame_at(frame.number, frame.time, where, mad, MAD_SIZE, errors, icrc,
                                sa, cm, cm_req)
        by_kind = self.stats.by_kind
        by_kind[rec.kind] = by_kind.get(rec.kind, 0) + 1
        return rec

    def _native_ib(self, data: bytes, at: IbMadAt) -> tuple[tuple, list, bytes]:
        """decode._addresses and decode._crc_errors of a native-IB datagram (its VCRC ends the
        frame): the addresses (assemble.ADDRESS_KEYS), the errors found and the ICRC."""
        icrc, icrc_ok, vcrc_ok = crc.native_crc_check(data, at.lrh)
        errors = [] if icrc_ok else [ICRC_MISMATCH]
        if not vcrc_ok:
            errors.append(VCRC_MISMATCH)
        return native_where(data, at), errors, icrc


def _step(s) -> tuple[int, int, int, int, int]:
    """(offset, bytes, shift, mask, little-endian) of an integer field's layout step: what
    native/_mad.c reads a fixed layout's fields by."""
    if s.kind not in ("int", "bitint", "flags") or s.when is not None or s.offset is None:
        raise NotCompilable(f"{s.name}: not a fixed integer field")
    return (s.offset, s.nbytes, s.nbytes * 8 - s.bit_off - s.bits, (1 << s.bits) - 1,
            int(s.little_endian))


def _count_reads() -> list[str]:
    """The MAD header fields SAHeader's record count and stride read (its other reads are the
    RMPP and SA headers' own fields, all in the C decoder's shape key)."""
    hint = SAHeader.field_hints["records"]
    refs = hint.count.refs() + hint.stride.refs()
    assert {f.layer for f in refs} <= {"MAD", "RMPP", "SAHeader", None}, refs
    assert all(split_name(f.name)[0] in _SA_FIELDS for f in refs if f.layer in ("SAHeader", None))
    return sorted({split_name(f.name)[0] for f in refs if f.layer == "MAD"})


def _span(byte: int, bit: int, bits: int) -> tuple[int, int]:
    """(offset, length) of the bytes a field of `bits` bits at byte + bit lies in."""
    return byte, (bit + bits + 7) // 8


def mad_decoder(tables: Tables):
    """The C decoder (native/_mad.c's MadDecoder) over `tables`, or None where the package has
    no C extension (or IBPATH_NATIVE_SCAN=0): then decode_at reads every frame in Python."""
    ext = native.extension()
    if ext is None or not hasattr(ext, "MadDecoder"):
        return None
    return ext.MadDecoder(mad_plan(tables))


def mad_plan(tables: Tables) -> SimpleNamespace:
    """What the C decoder reads frames by, from the layers (offsets, lengths, the MAD header's
    steps, the CRCs' masks), and the tables and functions of the Python decoder it shares."""
    c = tables.c
    r = crc.recipe()
    ip4, ip6 = prefix_offsets(IP), prefix_offsets(IPv6)
    grh, bth, deth, lrh = prefix_offsets(GRH), layer_steps(BTH), layer_steps(DETH), layer_steps(LRH)

    def span(s) -> tuple[int, int]:  # a layout step's bytes
        return _span(s.offset, s.bit_off, s.bits) if s.kind in ("bitint", "flags") \
            else (s.offset, s.nbytes)

    qps = [(MadAt._fields.index("bth"), *span(bth["dqpn"])),
           (MadAt._fields.index("deth"), *span(deth["src_qp"]))]
    ib_qps = [(IbMadAt._fields.index("bth"), *span(bth["dqpn"])),
              (IbMadAt._fields.index("deth"), *span(deth["src_qp"]))]
    ip, lrh_at, grh_at = MadAt._fields.index("ip"), IbMadAt._fields.index("lrh"), \
        IbMadAt._fields.index("grh")
    local = [(lrh_at, *span(lrh["slid"])), (lrh_at, *span(lrh["dlid"])), *ib_qps]
    mad = layer_steps(MAD)
    assert c.mad_next.fields == ("mgmt_class", "attribute_id"), c.mad_next.fields
    pr_plan = c.plan_index.get(ATTR_PATH_RECORD)
    return SimpleNamespace(
        mads=tables.mads, rmpps=tables.rmpps, sas=tables.sas,
        record_plans=tuple((table, make, p.size, p.fact if p.c_steps is not None else None,
                            p.c_steps, p.c_reserved)
                           for table, make, p in zip(tables.records, tables.make_records,
                                                     c.record_plans)),
        gids=_GID_CACHE, gids_max=_GID_CACHE_MAX,
        wheres=tables.wheres, mad_class=Mad, names=tables.names, make_names=mad_names,
        mad_steps=[_step(mad[f]) for f in MAD_VALUE_FIELDS], mad_which=MAD_NAMED_BY,
        routes=tables.routes, route_of=tables.route_of, make_rmpp=tables.make_rmpp,
        make_sa=tables.make_sa, make_where=where,
        shapes=tables.shapes, count_reads=[_step(mad[f]) for f in _count_reads()],
        count=c.count, stride=c.stride, whole_python=tables.whole, madat=MadAt, ibmadat=IbMadAt,
        saparts=SaParts, errors=((), (ICRC_MISMATCH,), (VCRC_MISMATCH,),
                                 (ICRC_MISMATCH, VCRC_MISMATCH)),
        # MadDecoder.frame's: the record and how facts are made, the route of PathRecords
        # (-1: none), the RoCEv2 where tuple's parts
        **native_record_plan(), construction=construction,
        path_record_route=-1 if pr_plan is None else ROUTE_SA_RECORDS + pr_plan,
        route_cm=ROUTE_CM,
        cm_plans=tuple((p.name, p.fact, p.steps, p.paths, p.path_steps) for p in c.cm_plans),
        rocev2=ROCEV2, addrs=_ADDR_CACHE, addrs_max=_ADDR_CACHE_MAX,
        rocev2_qps=[(MadAt._fields.index("bth"), _step(bth["dqpn"])),
                    (MadAt._fields.index("deth"), _step(deth["src_qp"]))],
        cache_max=_FLYWEIGHTS, mad_len=_MAD_LEN, sa_start=_SA_START, data_start=_DATA_START,
        mad_size=MAD_SIZE,
        where_v4=[(ip, *_span(*ip4["src"])), (ip, *_span(*ip4["dst"])), *qps],
        where_v6=[(ip, *_span(*ip6["src"])), (ip, *_span(*ip6["dst"])), *qps],
        where_local=local,
        where_global=[*local, (grh_at, *_span(*grh["sgid"])), (grh_at, *_span(*grh["dgid"]))],
        icrc=crc.engine_plan(crcspec.ICRC), vcrc=crc.engine_plan(crcspec.VCRC),
        prefix=r.prefix, ipv4_masks=tuple(r.ipv4_mask(ihl * 4) if ihl >= 5 else None
                                          for ihl in range(16)),
        ipv6_mask=r.ipv6_mask, local_mask=r.native_local_mask, global_mask=r.native_global_mask,
        global_short_mask=r.native_global_short_mask,
        version_off=r.version.off, version_shift=r.version.shift, version_mask=r.version.mask,
        ipv4_version=r.ipv4_version, ihl_off=r.ihl.off, ihl_shift=r.ihl.shift,
        ihl_mask=r.ihl.mask, lnh_off=r.lnh.off, lnh_shift=r.lnh.shift, lnh_mask=r.lnh.mask,
        lnh_global=r.lnh_global, grh_end=r.grh_end, icrc_len=crcspec.ICRC.width // 8,
        vcrc_len=crcspec.VCRC.width // 8)
