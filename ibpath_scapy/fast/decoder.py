"""The decoder's fast path: GSI datagrams decoded by extractors compiled from the layers.

FastDecoder is a decode.Decoder (same RMPP reassembler, LS memory and statistics) whose
decode_at() takes the frames the pre-filter recognised as plain RoCEv2 or native-IB MADs and
builds their records without Scapy; every other frame goes through Decoder.feed unchanged. The records are
the ones decode.py's Scapy path builds, key for key and in the same order (tests/
test_fastpath.py compares both over every capture of the project and the bench corpora).
"""

from __future__ import annotations

import socket

from scapy.contrib.roce import BTH, GRH
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.pton_ntop import inet_ntop

from .. import crc
from ..facts import Code
from ..decode import (
    CM_REQ_FIELDS,
    ICRC_MISMATCH,
    KIND_BY_CLASS,
    PATH_RECORD_FIELDS,
    VCRC_MISMATCH,
    Decoder,
    note_crc,
    note_rmpp_drop,
    reserved_errors,
    rmpp_control_key,
)
from ..layers import cm as cm_layers
from ..layers.ib import LRH
from ..layers.mad import (
    ATTRIBUTES_BY_CLASS,
    MAD,
    MAD_SIZE,
    METHODS,
    MGMT_CLASSES,
    RMPP,
    RMPP_TYPE_DATA,
    status_text,
)
from ..layers.roce import DETH
from ..layers.sa import COMPONENT_MASK_NAMES, IS_SEGMENT, PathRecord, SAHeader
from ..layout_model import build_layer
from ..pcapio import Frame
from .exprc import compile_expr, part_src, split_name
from .layout import (
    compile_extractor,
    compile_nonzero,
    compile_reader,
    compile_readers,
    default_names,
    gid_text,
    layer_steps,
    prefix_offsets,
    static_length,
)
from .prefilter import Bindings, IbMadAt, MadAt

_MAD_LEN = static_length(MAD)
_RMPP_LEN = static_length(RMPP)
_SA_FIXED = build_layer(SAHeader, "fast").fixed_len  # SAHeader's bytes before its records
_SA_START = _MAD_LEN + _RMPP_LEN  # SAHeader's offset in a MAD
_DATA_START = _SA_START + _SA_FIXED


def _layer_expr(e, args: str = "m, r, h, remaining=0"):
    """Compile an Expr of SAHeader's hints: Under("MAD") → m, Under("RMPP") → r, the
    SAHeader's own fields → h (dicts of raw field values)."""
    spell = {"MAD": "m", "RMPP": "r", None: "h", "SAHeader": "h"}

    def field(f):
        name, part = split_name(f.name)
        return part_src(f"{spell[f.layer]}[{name!r}]", part)

    return compile_expr(e, field, args)


class _Compiled:
    """Everything the fast path reads, compiled once from the layers."""

    def __init__(self):
        self.mad = compile_extractor(MAD)
        self.mad_dispatch = compile_readers(MAD, ("mgmt_class", "attribute_id"))  # mad_next's key
        self.dqpn = compile_reader(BTH, "dqpn")
        self.src_qp = compile_reader(DETH, "src_qp")
        ip4, ip6 = prefix_offsets(IP), prefix_offsets(IPv6)
        self.addr = {4: (ip4["src"][0], ip4["dst"][0], ip4["src"][2] // 8),
                     6: (ip6["src"][0], ip6["dst"][0], ip6["src"][2] // 8)}
        self.slid = compile_reader(LRH, "slid")
        self.dlid = compile_reader(LRH, "dlid")
        self.vcrc_len = layer_steps(LRH)["vcrc"].nbytes
        grh = prefix_offsets(GRH)
        self.gids = (grh["sgid"][0], grh["dgid"][0], grh["sgid"][2] // 8)
        self.mad_next = Bindings(MAD, ("mgmt_class", "attribute_id"))
        self.rmpp = compile_extractor(RMPP)
        self.sa = compile_extractor(SAHeader, ["sm_key", "attribute_offset", "component_mask"])
        hint = SAHeader.field_hints["records"]
        self.record_classes = hint.classes
        self.count = _layer_expr(hint.count)
        self.stride = _layer_expr(hint.stride)
        self.is_segment = _layer_expr(IS_SEGMENT)
        self.path_record = compile_extractor(PathRecord, PATH_RECORD_FIELDS)
        self.pr_len = static_length(PathRecord)
        self.pr_reserved = compile_nonzero(
            PathRecord, [f.name for f in PathRecord.fields_desc if f.name.startswith("reserved")])
        self.cm = {}
        for attr, cls in cm_layers.CM_MESSAGE_CLASSES.items():
            names = [n for n in default_names(cls) if n != "private_data"]  # decode.py drops it
            self.cm[cls] = (cls._name.split()[-1], compile_extractor(cls, names),
                            compile_extractor(cls, CM_REQ_FIELDS)
                            if cls is cm_layers.CMReq else None)
        self.components = COMPONENT_MASK_NAMES


_C: _Compiled | None = None


def compiled() -> _Compiled:
    global _C
    if _C is None:
        _C = _Compiled()
    return _C


_ADDR_CACHE: dict[bytes, str] = {}


def _ip_text(raw: bytes) -> str:
    """An address as Scapy's IP/IPv6 fields show it (the Scapy path's str(ip.src))."""
    s = _ADDR_CACHE.get(raw)
    if s is None:
        if len(_ADDR_CACHE) >= 65536:
            _ADDR_CACHE.clear()
        s = _ADDR_CACHE[raw] = (inet_ntop(socket.AF_INET6, raw) if len(raw) == 16
                                else socket.inet_ntoa(raw))
    return s


# Entries per flyweight table: the frames that repeat a header (the segments of one answer,
# retries) or a PathRecord (the same pair asked again) come close together; a table holds
# ~1 KB a entry, so it is small enough for the audit's memory not to depend on it (a storm of
# unique transaction IDs filled 65,536 MAD headers: ~60 MB).
_FLYWEIGHTS = 8192


def _remember(cache: dict, key: bytes, value: dict) -> dict:
    if len(cache) >= _FLYWEIGHTS:
        cache.clear()
    cache[key] = value
    return value


class FastDecoder(Decoder):
    """decode.Decoder plus decode_at() for the frames the pre-filter hands over."""

    def __init__(self):
        super().__init__()
        self.c = compiled()
        self.skipped = 0  # frames the pre-filter dropped (counted in stats.frames too)
        self._names: dict[tuple, tuple] = {}
        self._comps: dict[int, list[str]] = {}
        # Records share the dicts of identical header and PathRecord bytes (flyweights: an SA
        # storm repeats the same few paths and headers), which saves most of the replay's
        # memory; records are read-only to the audit. Bounded: each is emptied when full.
        self._mads: dict[bytes, dict] = {}
        self._rmpps: dict[bytes, dict] = {}
        self._sas: dict[bytes, dict] = {}
        self._prs: dict[bytes, dict] = {}

    def decode_at(self, frame: Frame, at: MadAt | IbMadAt) -> dict | None:
        """The one record of a frame the pre-filter classified as a plain RoCEv2 or native-IB
        MAD, or None when the compiled decoder does not know its MAD payload: then the frame
        goes to feed() (the Scapy path)."""
        c = self.c
        data = frame.data
        o = at.mad
        nxt = c.mad_next.resolve(c.mad_dispatch(data, o))
        if nxt is RMPP:
            kind_path = "sa"
        elif nxt in c.cm:
            kind_path = "cm"
        elif nxt is None:
            kind_path = "mad"
        else:
            return None
        self.stats.frames += 1
        self.stats.mad_frames += 1
        key = data[o:o + _MAD_LEN]
        mad = self._mads.get(key)
        if mad is None:
            mad = self._fast_mad(data, o, key)
        mc = mad["mgmt_class"]
        kind = KIND_BY_CLASS.get(mc)
        if kind is None:
            kind = MGMT_CLASSES.get(mc, "mad").lower()
        rec = {"frame": frame.number, "time": round(frame.time, 9), "kind": kind}
        if at.__class__ is MadAt:
            rec["encap"] = "rocev2"
            src, dst, n = c.addr[at.ip_version]
            rec["src"] = _ip_text(data[at.ip + src:at.ip + src + n])
            rec["dst"] = _ip_text(data[at.ip + dst:at.ip + dst + n])
            rec["dst_qp"] = c.dqpn(data, at.bth)
            rec["src_qp"] = c.src_qp(data, at.deth)
            ip_bytes = data[at.ip:]
            icrc = ip_bytes[-4:]
            errors = [] if crc.rocev2_icrc(ip_bytes) == icrc else [ICRC_MISMATCH]
        else:
            errors, icrc = self._native_ib(rec, data, at)
        note_crc(self.stats, frame.number, errors, icrc)
        rec["mad"] = mad
        if kind_path == "sa":
            self._fast_sa(frame, rec, data, o, mad, errors)
        elif kind_path == "cm":
            name, extract, req = c.cm[nxt]
            cm = {"message": name, **extract(data, o + _MAD_LEN)}
            cm.pop("private_data", None)
            rec["cm"] = cm
            if req is not None:
                rec["cm_req"] = req(data, o + _MAD_LEN)
        if errors:
            rec["errors"] = errors
        by_kind = self.stats.by_kind
        by_kind[rec["kind"]] = by_kind.get(rec["kind"], 0) + 1
        return rec

    def _native_ib(self, rec: dict, data: bytes, at: IbMadAt) -> tuple[list[str], bytes]:
        """decode._addresses and decode._crc_errors of a native-IB datagram (its VCRC ends the
        frame); the errors found and the ICRC."""
        c = self.c
        rec["encap"] = "ib"
        rec["src"] = f"LID {c.slid(data, at.lrh)}"
        rec["dst"] = f"LID {c.dlid(data, at.lrh)}"
        if at.grh >= 0:
            sgid, dgid, n = c.gids
            rec["src_gid"] = gid_text(data[at.grh + sgid:at.grh + sgid + n])
            rec["dst_gid"] = gid_text(data[at.grh + dgid:at.grh + dgid + n])
        rec["dst_qp"] = c.dqpn(data, at.bth)
        rec["src_qp"] = c.src_qp(data, at.deth)
        end = len(data) - c.vcrc_len
        body = data[at.lrh:end]
        errors = [] if crc.native_icrc(body) == body[-4:] else [ICRC_MISMATCH]
        if crc.vcrc(body) != int.from_bytes(data[end:], "little"):
            errors.append(VCRC_MISMATCH)
        return errors, body[-4:]

    def _fast_mad(self, b: bytes, o: int, key: bytes) -> dict:
        """decode._mad_dict of the MAD header at b[o:], kept for the next MAD with the same
        header bytes (the segments of one transfer, retries)."""
        mad = self.c.mad(b, o)
        which = (mad["method"], mad["mgmt_class"], mad["attribute_id"], mad["status"])
        names = self._names.get(which)
        if names is None:
            names = self._fast_mad_names(*which)
        mad["method_name"], mad["attribute_name"], mad["status_text"] = names
        return _remember(self._mads, key, mad)

    def _fast_mad_names(self, method: int, mc: int, attr: int, status: int) -> tuple:
        """decode._mad_dict's names of a MAD's method, attribute and status (memoised: a
        capture has few distinct combinations)."""
        names = (METHODS.get(method, f"0x{method:02x}"), ATTRIBUTES_BY_CLASS.get(mc, {}).get(attr),
                 status_text(status, mc))
        if len(self._names) < 4096:
            self._names[(method, mc, attr, status)] = names
        return names

    def _fast_components(self, mask: int) -> list[str]:
        """Names of the ComponentMask bits set (memoised per mask; each record gets its own
        list)."""
        names = self._comps.get(mask)
        if names is None:
            comps = self.c.components
            names = [comps[i] for i in range(64) if mask >> i & 1]
            if len(self._comps) < 4096:
                self._comps[mask] = names
        return list(names)

    def _fast_records(self, b: bytes, o: int, end: int, m: dict, r: dict,
                      h: dict) -> list[int] | None:
        """Offsets of the PathRecords of an SA MAD at b[o:end] (None: not a PathRecord
        attribute)."""
        c = self.c
        if c.record_classes.get(m["attribute_id"]) is not PathRecord:
            return None
        data = o + _DATA_START
        n = c.count(m, r, h, max(end - data, 0))
        if not n:
            return []
        stride = c.stride(m, r, h)
        return [data + i * stride for i in range(n)]

    def _fast_sa(self, frame: Frame, rec: dict, b: bytes, o: int, mad: dict, errors: list) -> None:
        c = self.c
        key = b[o + _MAD_LEN:o + _SA_START]
        r = self._rmpps.get(key)
        if r is None:
            r = _remember(self._rmpps, key, c.rmpp(b, o + _MAD_LEN))
        key = b[o + _SA_START:o + _DATA_START]
        sa = self._sas.get(key)
        if sa is None:
            h = c.sa(b, o + _SA_START)
            cmask = h["component_mask"]
            sa = _remember(self._sas, key, {
                "sm_key": h["sm_key"], "attribute_offset": h["attribute_offset"],
                "component_mask": cmask, "components": self._fast_components(cmask)})
        h = sa
        rec["rmpp"] = r
        rec["sa"] = sa
        end = o + MAD_SIZE
        rb, starts = b, self._fast_records(b, o, end, mad, r, h)
        if c.is_segment(mad, r, h):
            key = (rec.get("src"), rec.get("dst"), mad["transaction_id"], mad["attribute_id"],
                   mad["method"])
            done = self.rmpp.add(key, r["segment_number"], r["rmpp_flags"], b[o:end],
                                 frame.number, frame.time)
            note_rmpp_drop(self.rmpp, rec, self.stats)
            if done is None:
                starts = [] if starts is not None else None
            else:
                message, transfer = done
                if starts is not None:
                    starts = self._fast_whole_records(message)
                rb = message
                rec["reassembled_from"] = [transfer.frames[k] for k in sorted(transfer.frames)]
                errors += transfer.problems
        elif r["rmpp_type"] not in (0, RMPP_TYPE_DATA) and r["rmpp_flags"] & 1:
            rec["rmpp_control"] = True
            self.rmpp.control(rmpp_control_key(rec, mad["transaction_id"], mad["attribute_id"],
                                               mad["method"]), r["rmpp_type"], frame.number)
        if starts is not None:
            prs = self._prs
            out = []
            for s in starts:
                key = rb[s:s + c.pr_len]
                pr = prs.get(key)
                if pr is None:
                    pr = _remember(prs, key, c.path_record(rb, s))
                out.append(pr)
            rec["path_records"] = out
            errors += reserved_errors(Code.PR_RESERVED, (c.pr_reserved(rb, s) for s in starts))

    def _fast_whole_records(self, message: bytes) -> list[int]:
        """Record offsets in a reassembled message (decode.py: MAD(message)[SAHeader].records).
        rmpp.reassemble() never makes a message shorter than the SA MAD header."""
        c = self.c
        m = c.mad(message, 0)
        r = c.rmpp(message, _MAD_LEN)
        h = c.sa(message, _SA_START)
        return self._fast_records(message, 0, len(message), m, r, h) or []
