"""The second audit engine: the generated Wireshark plugin, run by tshark, read as facts.

``tshark_records(path)`` runs tshark once over a capture with the plugin this package ships
(``dissector/ibpath.lua``; ``wireshark.packaged_plugin()``), after checking that this tshark
loads it at all (``wireshark.Tshark.probe``), and yields, frame by frame, the same dicts
``decode.decode_file(path)`` yields: the facts ``audit.engine.audit_records`` consumes. Because
the audit rules see only these dicts, the two engines can be compared finding for finding.

Output format. ``tshark -T json`` with ``-J`` limited to ``frame``, ``pkt_comment``, ``ip``,
``ipv6``, ``udp``, ``netlink``, ``exported_pdu``, the plugin's own protocols (read from the
plugin's ``Proto(...)`` calls) and the engine's helper (``ibpath_engine``, below). JSON keeps
the protocol tree: repeated fields stay in order (objects are read as ordered key/value pairs,
duplicates included) and a field belongs to the node it sits in. ``-T fields`` and ``-T ek``
flatten the tree, which loses which LS attribute a value belongs to and which MAD of a frame
(segment or reassembled message) a field came from. tshark prints one packet object after
another, each opening with a line ``  {`` and closing with ``  }`` at two spaces of indent, so
the output is parsed one packet at a time as it streams; only one packet's text is held in
memory. ``-x`` (raw bytes and offsets of every field) would double tshark's run time and is
not used. tshark is run with subprocess, not pyshark: pyshark reads PDML or EK through
asyncio and drops tshark's stderr, which the Lua-error check needs.

How fields are attributed:

- MAD frames: the plugin adds one top-level protocol node per layer (``ibpath.lrh``,
  ``ibpath.bth``, ``ibpath.deth``, ``ibpath.mad``, ``ibpath.rmpp``, ``ibpath.sa``,
  ``ibpath.cm_req`` ...); PathRecords are children of their ``ibpath.sa`` node. On the frame
  that completes an RMPP transfer, the reassembled message (tvb "Reassembled RMPP") is
  dissected inside the segment's top-level ``ibpath.sa`` node: the ``ibpath.rmpp.segment``
  fields there are ``reassembled_from``, and its nested ``ibpath.mad``/``ibpath.rmpp``/
  ``ibpath.sa`` nodes (with the PathRecords of the whole answer) are the reassembled message.
  The top-level nodes are the segment's own fields (``mad``, ``rmpp``, ``sa``).
- RDMA netlink: Wireshark's netlink dissector hands every message of a record to the plugin,
  which adds ``ibpath.nl`` and the body node (``ibpath.ls_resolve_request`` ...) at top level,
  message after message. Inside a body, each ``ibpath.ls_attr`` node is followed by the node of
  its value (``ibpath.ls_sgid``, ``ibpath.pathdata`` ...).
- Blobs: the ``ibpath.blob`` node holds one ``ibpath.pathdata`` per record (each with its
  ``ibpath.pathrecord``) and ``ibpath.blob.trailing``.

Field names come from the layers through ``luagen.model.build_layer`` (what the generator
uses), values are converted by the field's kind (integers, GIDs as canonical IPv6 text, bytes
as hex), and the derived parts of a record (method and attribute names, status text, component
names, flag names, error texts, the kernel view) use the same tables and functions as
decode.py. Cross-frame state is kept the way decode.py keeps it: ``rmpp.Reassembler`` decides
(by decode.py's key) when an RMPP transfer completes and records its problems (repeated and
out-of-range segments, transfers never completed, reported at the end as decode.py does), and
LS requests are remembered by sequence number for their responses' ``path_use``.

What does not come from the plugin:

- ``time``: ``frame.time_epoch`` (seconds and nanoseconds as text), turned into the float
  pcapio computes (ticks × resolution) with the resolution of the file: the pcap magic, or the
  pcapng interface's ``if_tsresol`` (pcapio.Interfaces: the file is read, lazily, only as far
  as the interface's IDB).
- ``src``/``dst``: ``ip.src``/``ip.dst`` or ``ipv6.src``/``ipv6.dst`` (RoCEv2); the LRH's
  SLID/DLID and the GRH's GIDs come from the plugin (native IB).
- MAD length (the "MAD is N bytes" error, truncated MADs): the length of ``udp.payload``
  (RoCEv2); for native IB the LRH's PktLen (ERF records: the plugin dissects only records whose
  length matches it) or the capture length less the exported-PDU tags, minus the fixed headers
  and trailers.
- ``set_option_result``: ``frame.comment`` (pcapng packet comment).
- Netlink: a helper postdissector (``data/engine_helper.lua``, a second ``-X lua_script``) adds
  the cooked header's ``pkttype`` (hence ``direction``), which Wireshark 4.0 shows in no
  field; copies the ``netlink.hdr_*`` fields of the messages Wireshark dissects itself
  (header-only and control messages, which it does not hand to the plugin; ``-J`` would drop
  them); and has the plugin read a RESOLVE answer to the kernel that carries NLM_F_REQUEST
  (which the plugin, following the flag, dissected as a request) once more as a response,
  as decode.py reads it. Offsets of messages and attributes (for the "runs past the end"
  errors, ``value_length`` and the kernel's nla_parse verdict) follow from ``nlmsg_len``,
  ``nla_len`` and ``frame.cap_len``.
- Raw blob files (not a capture): tshark cannot read them, so the file is wrapped into a
  one-frame pcapng as an exported PDU "ibpath.blob" (the layers build the framing) and the
  plugin dissects that; the record says ``encap: raw``, time 0.0, as decode.py's does.

Known differences. None changes a finding on the captures of captures/, the external captures
or the crafted captures of tests/test_tshark_engine.py:

- ``time`` of ERF records: tshark's is the ERF header's timestamp (nanoseconds), decode.py's
  the pcap record's (microseconds). They differ by less than a microsecond; the only rule that
  reads times (RES-LS-UNANSWERED) compares delays in milliseconds.
- ``value_hex`` of an LS attribute whose value the plugin does not show (unknown type, value
  shorter than its type's) is missing: the plugin shows no raw value bytes. No rule reads it.
- tshark 4.0 cannot read pcap files of LINKTYPE_INFINIBAND (247), which decode.py reads: the
  engine raises TsharkEngineError for them ("network type 247 unknown or unsupported").
- Framing that Wireshark and Scapy read differently, all of it malformed or unusual input:
  bytes after the IP datagram (an Ethernet FCS, padding) or an IP/UDP length shorter than the
  frame: decode.py counts them into the MAD ("MAD is 260 bytes; ...", "ICRC mismatch"),
  Wireshark stops at the datagram's length; an ERF record whose length disagrees with its
  LRH's PktLen and an exported PDU with a cut tag list do not reach the plugin; a netlink
  record whose cooked header is not ARPHRD_NETLINK, or whose nlmsg_len runs far past the
  record, is not dissected by Wireshark; frames Scapy cannot dissect at all are reported by
  decode.py ("cannot dissect: ..."). Such frames give no record here, or another malformed
  one.
- A PATH_RECORD attribute of exactly 8 value bytes (flags and reserved word, no PathRecord):
  decode.py takes it as a record whose PathRecord has Scapy's default field values; the plugin
  shows no record.
- Wireshark 4.0 starts the next netlink message of a record right after ``nlmsg_len`` bytes,
  the kernel and Scapy at NLMSG_ALIGN(nlmsg_len): a record holding several messages whose
  lengths are not multiples of 4 is split differently (the kernel and ibacm align them).
- The plugin shows at most 4096 items of a list (MAX_LIST_ITEMS, expert
  ``ibpath.list_capped``): of a reassembled answer of more than 4096 PathRecords only the first
  4096 are reported.
- The plugin reassembles RMPP by (network source, destination, class, TID), decode.py by
  (source, destination, TID, attribute, method); they differ only when one TID carries two
  concurrent transfers of different attributes or methods. Completion follows decode.py's key
  (rmpp.Reassembler); the records and ``reassembled_from`` come from the plugin's reassembly
  on that frame (no records when it did not complete a transfer there).
- The plugin checks the RoCEv2 ICRC of IPv4 headers without options and of IPv6 headers whose
  next header is UDP; decode.py checks it behind any IP header.
- The plugin hooks UDP port 4791 in either direction (Wireshark's port table), Scapy's binding
  only the destination port.

Every tshark run is checked: "Lua Error" and "dissector bug" in the output of any packet, a
Lua loading error on stderr, or a non-zero exit raise TsharkEngineError (tshark exits 0 when a
Lua script fails), after the records of the frames before.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import os
import re
import subprocess
import tempfile
from collections import OrderedDict
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Iterator

from scapy.contrib.roce import BTH, GRH

# decode.py's private tables and helpers are shared on purpose: one definition of each text
from . import blobsniff
from . import decode as _decode
from .facts import Code, Problem, problem, public
from .facts import problems as P
from .decode import CM_REQ_FIELDS, KIND_BY_CLASS, PATH_RECORD_FIELDS, DecodeStats
from .kernelview import Blob, LsContext, ls_parse_error
from .layers import cm as cm_layers
from .layers import netlink as nl
from .layers.ib import LRH, ExportedPDU
from .layers.mad import ATTRIBUTES_BY_CLASS, MAD, MAD_SIZE, METHODS, MGMT_CLASSES, RMPP, status_text
from .layers.pathdata import (
    BLOB_DISSECTOR,
    RECORD_SIZE,
    PathArray,
    PathRecData,
    flag_names,
)
from .layers.roce import DETH
from .layers.sa import ATTR_PATH_RECORD, COMPONENT_MASK_NAMES, PathRecord, SAHeader, gid_text
from .luagen.model import build_layer
from .pcapio import (
    MAX_RAW_BLOB,
    PCAP_MAGICS,
    PCAPNG_SHB,
    CaptureError,
    Interfaces,
    PcapNgWriter,
    sniff_format,
)
from .rmpp import Reassembler
from .wireshark import Tshark, find_tshark, packaged_plugin

__all__ = ["TsharkEngineError", "tshark_records", "blob_from_records", "plugin_path"]


class TsharkEngineError(CaptureError):
    """tshark is missing, cannot read the file, or the plugin failed on it. The message is one
    line and names the file. A CaptureError, so that callers that handle unreadable inputs
    (exit status 2) handle this too."""


# --------------------------------------------------------------------------------------------
# tshark and the plugin
# --------------------------------------------------------------------------------------------


# Capture facts the plugin cannot give and tshark's JSON output would drop come from a helper
# postdissector loaded with a second -X lua_script: data/engine_helper.lua says which and why.
HELPER = resources.files(__package__).joinpath("data", "engine_helper.lua")
_HELPER_LUA = HELPER.read_text()
_GENERIC_MESSAGE = "Netlink message"

# Wireshark protocols whose fields the engine reads, besides the plugin's own.
_WIRESHARK_PROTOCOLS = ("frame", "pkt_comment", "ip", "ipv6", "udp", "netlink", "exported_pdu")
# A Lua error or a dissector bug is a tree item of its own: a key of the packet's JSON (with -J a
# {"filtered": ...} stand-in), "Lua Error: <file>:<line>: <msg>" or "[Dissector bug, ...]".
# Matching keys, not any text, keeps a packet comment that quotes them from failing a run.
_FAILURE = re.compile(r'^\s*"((?:Lua Error|\[?Dissector bug)[^"\n]*)"\s*:', re.M | re.I)


tshark_path = find_tshark


def plugin_path() -> Path:
    """The plugin this package ships, which matches its layers (a personal copy may lag)."""
    return packaged_plugin()


def _plugin_protocols(text: str) -> list[str]:
    return sorted(set(re.findall(r'Proto(?:\.new)?\(\s*"([^"]+)"', text)))


# --------------------------------------------------------------------------------------------
# Field names from the layers (the generator's own model) and value conversion
# --------------------------------------------------------------------------------------------

def _ipv6(text: str) -> str:
    return gid_text(ipaddress.IPv6Address(text).packed)  # as decode spells GIDs


def _int(text: str) -> int:
    return int(text, 16) if text[:2] in ("0x", "0X") else int(text)


def _hex(text: str) -> str:
    return text.replace(":", "").lower()


_CONVERT = {"ipv6": _ipv6, "ipv4": str, "bytes": _hex, "varbytes": _hex}


@dataclass(frozen=True)
class _LayerFields:
    node: str  # ibpath.<layer>: the protocol node
    fields: tuple  # (name, abbrev, convert) in wire order


_LAYER_CACHE: dict[type, _LayerFields] = {}


def _fields_of(cls: type) -> _LayerFields:
    lf = _LAYER_CACHE.get(cls)
    if lf is None:
        model = build_layer(cls, "ibpath", set())
        fields = tuple((s.name, s.item.abbrev, _CONVERT.get(s.kind, _int))
                       for s in model.steps if s.item is not None)
        lf = _LAYER_CACHE[cls] = _LayerFields(model.proto_name, fields)
    return lf


# --------------------------------------------------------------------------------------------
# The JSON tree: nodes are lists of (key, value) pairs (duplicate keys kept, in order)
# --------------------------------------------------------------------------------------------

def _pairs(node) -> list:
    return node if isinstance(node, list) else []


def _first(node, key):
    for k, v in _pairs(node):
        if k == key:
            return v
    return None


def _all(node, key) -> list:
    return [v for k, v in _pairs(node) if k == key]


def _values(node, cls: type, names: Iterable[str] | None = None) -> dict:
    """The layer's field values found directly in its node, converted, keyed by field name."""
    lf = _fields_of(cls)
    flat: dict = {}
    for k, v in _pairs(node):
        if isinstance(v, str) and k not in flat:
            flat[k] = v
    wanted = None if names is None else set(names)
    out = {}
    for name, abbrev, conv in lf.fields:
        if (wanted is None or name in wanted) and abbrev in flat:
            out[name] = conv(flat[abbrev])
    return out


def _public(values: dict, cls: type) -> dict:
    """decode.layer_dict's choice of fields: every field but the reserved ones, in order."""
    return {f.name: values[f.name] for f in cls.fields_desc
            if f.name != "records" and not f.name.startswith("reserved") and f.name in values}


def _reserved_set(values: dict) -> bool:
    return any(v for k, v in values.items() if k.startswith("reserved"))


# --------------------------------------------------------------------------------------------
# Kernel view facts from decoded record dicts (a pure function; kernelview.py builds them
# from Scapy packets)
# --------------------------------------------------------------------------------------------

class _AttrFacts:
    """An LS attribute as kernelview.ls_parse_error and decode._attr_problem read one: the
    header fields, and how many of its bytes the message holds (``original`` only needs a
    length)."""

    __slots__ = ("nla_len", "nla_type", "nested", "net_byteorder", "mandatory", "original")

    def __init__(self, nla_len: int, raw_type: int, available: int | None = None):
        self.nla_len = nla_len
        self.nla_type = raw_type & nl.RDMA_NLA_TYPE_MASK
        self.nested = int(bool(raw_type & nl.NLA_F_NESTED))
        self.net_byteorder = int(bool(raw_type & nl.NLA_F_NET_BYTEORDER))
        self.mandatory = int(bool(raw_type & nl.RDMA_NLA_F_MANDATORY))
        self.original = range(nla_len if available is None else available)

    def raw_type(self) -> int:
        return ((self.nested << 15) | (self.net_byteorder << 14) | (self.mandatory << 13)
                | self.nla_type)

    def value_length(self) -> int:
        want = max(0, self.nla_len - nl.NLA_HDRLEN)
        return max(0, min(want, len(self.original) - nl.NLA_HDRLEN))

    def truncated(self) -> bool:
        return self.nla_len > len(self.original)


def blob_from_records(records: list[dict], *, length: int | None = None,
                      nlmsg_flags: int | None = None, attributes: list[dict] | None = None,
                      path_use: int | None = None) -> Blob:
    """kernelview.Blob from decoded record dicts: ``records`` are ``blob_records`` (their
    ``flags``). For an rdma_set_option optval give ``length`` (bytes); for an LS RESOLVE
    response give ``nlmsg_flags``, the message's ``attributes`` (decode.py's attribute dicts:
    ``nla_type`` raw, ``nla_len``, ``blob_record`` on PATH_RECORD attributes; optionally
    ``available``, the bytes of the attribute the message holds when it runs past the end)
    and the matched request's ``path_use``. Same facts as kernelview.blob_from_array /
    blob_from_ls_response build from packets."""
    flags = tuple(int(r["flags"]) for r in records)
    if nlmsg_flags is None:
        return Blob(flags, length)
    attrs = attributes or []
    facts = [_AttrFacts(a["nla_len"], a["nla_type"], a.get("available")) for a in attrs]
    paths = sorted((a for a in attrs if a.get("blob_record") is not None),
                   key=lambda a: a["blob_record"])
    types = tuple(a["nla_type"] for a in paths)
    ls = LsContext(path_use=path_use, nlmsg_flags=nlmsg_flags, parse_error=ls_parse_error(facts),
                   nla_types=types if len(types) == len(flags) else None)
    return Blob(flags, None, ls)


# --------------------------------------------------------------------------------------------
# Time: the float pcapio computes, from tshark's seconds.nanoseconds
# --------------------------------------------------------------------------------------------

class _Clock:
    """Timestamps as pcapio.read_frames gives them (decode.py rounds them to 9 places), from
    the interfaces pcapio reads (pcapio.Interfaces: a pcap's header, a pcapng's IDBs on
    demand; sections count from 1 and interfaces from 0 in each section, as tshark's
    frame.section_number/interface_id do)."""

    def __init__(self, path: str, head: bytes):
        self.kind = sniff_format(head)
        self.res = PCAP_MAGICS[head[:4]][1] if self.kind == "pcap" else None
        self._ng = Interfaces(path) if self.kind == "pcapng" else None
        self._pcap_linktype = None
        if self.kind == "pcap":
            with Interfaces(path) as interfaces:
                pcap = interfaces.get()
            self._pcap_linktype = pcap.linktype if pcap is not None else None

    def linktype(self, section: int, iface: int) -> int | None:
        """The link type pcapio gives the frame (None where the file does not say)."""
        if self._ng is not None:
            known = self._ng.get(section, iface)
            return known.linktype if known is not None else None
        return self._pcap_linktype

    def time(self, epoch: str, section: int, iface: int) -> float:
        sec_text, _, frac = epoch.partition(".")
        sec, ns = int(sec_text), int((frac + "000000000")[:9])
        if self.kind == "pcap":
            return sec + (ns // 1000 if self.res == 1e-6 else ns) * self.res
        if self._ng is not None:
            known = self._ng.get(section, iface)
            units, res = (known.units, known.resolution) if known is not None else (10 ** 6, 1e-6)
            if units <= 10 ** 9:
                ticks = sec * units + -(-ns * units // 10 ** 9)
            else:
                ticks = sec * units + ns * units // 10 ** 9
            return ticks * res
        return sec + ns * 1e-9

    def close(self) -> None:
        if self._ng is not None:
            self._ng.close()


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------

_CM_BY_NODE = {_fields_of(c).node: c for c in cm_layers.CM_MESSAGE_CLASSES.values()}
_LS_BODY_BY_NODE = {_fields_of(c).node: c for c in set(nl.LS_BODIES.values())}
_LS_VALUE_BY_NODE = {_fields_of(c).node: c for c in _decode._LS_VALUE_FIELDS}
_PATHDATA = _fields_of(PathRecData).node
_PATHRECORD = _fields_of(PathRecord).node
_LS_ATTR = _fields_of(nl.LsAttr).node
_NL = _fields_of(nl.RdmaNLMsgHdr).node
_MAD_NODE, _RMPP_NODE = _fields_of(MAD).node, _fields_of(RMPP).node
_SA_NODE = _fields_of(SAHeader).node
_BLOB_NODE = _fields_of(PathArray).node
_ICRC_FIELD = "ibpath.bth.icrc"
_WTAP_ENCAP_ERF = 98
_LRH_BTH_DETH = 8 + 12 + 8  # headers before a native-IB MAD (plus 40 with a GRH)
_CRC_TRAILERS = 4 + 2  # ICRC and VCRC


@functools.lru_cache(maxsize=None)
def _body_header_size(cls: type) -> int:
    """Bytes of an LS body before its attributes (68 for a RESOLVE request)."""
    return build_layer(cls, "ibpath", set()).fixed_len


@dataclass
class _Frame:
    number: int
    time: float
    cap_len: int
    encap_type: int
    comment: str | None
    layers: list  # top-level (key, node) pairs
    linktype: int | None = None  # the file's link type for the frame (pcap or pcapng IDB)


@dataclass
class _Message:
    hdr: dict
    bodies: list = field(default_factory=list)  # (node name, node)


class _Builder:
    """decode.Decoder's record logic over the plugin's fields."""

    def __init__(self, raw_blob: bool = False):
        self.rmpp = Reassembler()
        self.stats = DecodeStats()
        self.ls_requests: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self.raw_blob = raw_blob
        self._dummy = bytes(MAD_SIZE)

    # -- per frame ---------------------------------------------------------------------------
    def feed(self, fr: _Frame) -> Iterator[dict]:
        self.stats.frames += 1
        if fr.linktype is not None and fr.linktype not in _decode.SUPPORTED_LINKTYPES:
            _decode.note_unsupported(self.stats, fr.linktype, fr.number)
            return
        for rec in self._frame_records(fr):
            self.stats.by_kind[rec["kind"]] = self.stats.by_kind.get(rec["kind"], 0) + 1
            yield rec

    def finish(self) -> Iterator[dict]:
        yield from _decode.file_end_records(self.rmpp, self.stats)

    def _malformed(self, fr: _Frame, reason: Problem) -> dict:
        self.stats.malformed += 1
        return {"frame": fr.number, "kind": "malformed", "error": reason}

    def _frame_records(self, fr: _Frame) -> Iterator[dict]:
        top = fr.layers
        list_framed = self.raw_blob or any(_first(top, k) is not None
                                           for k in ("netlink", "exported_pdu"))
        too_big = _decode.size_limit_record(fr.number, fr.cap_len, list_framed, self.stats)
        if too_big is not None:
            yield too_big
            return
        netlink = _first(top, "netlink")
        if netlink is not None:
            yield from self._netlink(fr, netlink)
            return
        blob = _first(top, _BLOB_NODE)
        if blob is not None:
            yield self._blob(fr, blob)  # an empty optval (EINVAL) is a blob frame too
            return
        yield from self._mad_frame(fr)

    # -- MADs --------------------------------------------------------------------------------
    def _mad_frame(self, fr: _Frame) -> Iterator[dict]:
        top = fr.layers
        mad_node = _first(top, _MAD_NODE)
        mad = _values(mad_node, MAD) if mad_node is not None else {}
        bth = _values(_first(top, _fields_of(BTH).node), BTH)
        deth = _values(_first(top, _fields_of(DETH).node), DETH)
        if "transaction_id" not in mad:
            if "src_qp" in deth and (deth["src_qp"] in (0, 1) or bth.get("dqpn") in (0, 1)):
                n = self._mad_length(fr)
                yield self._malformed(fr, problem(Code.GSI_SHORT,
                                                  max(n, 0) if n is not None else "?"))
            elif bth.get("opcode") == 0x64 and "src_qp" not in deth:
                yield self._malformed(fr, P.UD_NO_DETH)
            return
        self.stats.mad_frames += 1
        rec = {"frame": fr.number, "time": round(fr.time, 9),
               "kind": KIND_BY_CLASS.get(mad["mgmt_class"],
                                         MGMT_CLASSES.get(mad["mgmt_class"], "mad").lower())}
        rec.update(self._addresses(fr, bth, deth))
        errors = []
        length = self._mad_length(fr)
        if length is not None and length != MAD_SIZE:
            errors.append(problem(Code.MAD_LENGTH, length))
        crc_errs, icrc = self._crc_errors(fr)
        errors += crc_errs
        _decode.note_crc(self.stats, fr.number, errors, icrc if length == MAD_SIZE else None)
        rec["mad"] = self._mad_dict(mad)
        if length is not None and length < MAD_SIZE:
            rec["kind"] = "malformed"
            rec["error"] = errors[0]
            self.stats.malformed += 1
            yield rec
            return
        if mad["mgmt_class"] == 0x03:
            yield from self._sa(fr, rec, mad, errors)
            return
        for name, cls in _CM_BY_NODE.items():
            node = _first(top, name)
            if node is None:
                continue
            values = _values(node, cls)
            rec["cm"] = {"message": cls._name.split()[-1], **_public(values, cls)}
            rec["cm"].pop("private_data", None)
            if cls is cm_layers.CMReq:
                rec["cm_req"] = {n: values[n] for n in CM_REQ_FIELDS if n in values}
            break
        if errors:
            rec["errors"] = errors
        yield rec

    @staticmethod
    def _mad_dict(mad: dict) -> dict:
        d = _public(mad, MAD)
        d["method_name"] = METHODS.get(mad["method"], f"0x{mad['method']:02x}")
        names = ATTRIBUTES_BY_CLASS.get(mad["mgmt_class"], {})
        d["attribute_name"] = names.get(mad["attribute_id"])
        d["status_text"] = status_text(mad["status"], mad["mgmt_class"])
        return d

    def _addresses(self, fr: _Frame, bth: dict, deth: dict) -> dict:
        top = fr.layers
        out = {}
        ip = _first(top, "ip")
        ip6 = _first(top, "ipv6")
        lrh_node = _first(top, _fields_of(LRH).node)
        if ip is not None or ip6 is not None:
            out["encap"] = "rocev2"
            if ip is not None:
                out["src"], out["dst"] = _first(ip, "ip.src"), _first(ip, "ip.dst")
            else:
                out["src"], out["dst"] = _first(ip6, "ipv6.src"), _first(ip6, "ipv6.dst")
        elif lrh_node is not None:
            lrh = _values(lrh_node, LRH, ("slid", "dlid"))
            out["encap"] = "ib"
            out["src"], out["dst"] = f"LID {lrh.get('slid')}", f"LID {lrh.get('dlid')}"
            grh_node = _first(top, _fields_of(GRH).node)
            if grh_node is not None:
                grh = _values(grh_node, GRH, ("sgid", "dgid"))
                if "sgid" in grh:
                    out["src_gid"], out["dst_gid"] = grh["sgid"], grh["dgid"]
        if _first(top, "exported_pdu") is not None:
            out["encap"] = "exported_pdu/" + out.get("encap", "?")
        if "dqpn" in bth:
            out["dst_qp"] = bth["dqpn"]
        if "src_qp" in deth:
            out["src_qp"] = deth["src_qp"]
        return out

    def _mad_length(self, fr: _Frame) -> int | None:
        """Bytes between the DETH and the ICRC (decode.py: len(bytes(mad)))."""
        top = fr.layers
        udp = _first(top, "udp")
        if udp is not None and (_first(top, "ip") is not None or _first(top, "ipv6") is not None):
            payload = _first(udp, "udp.payload")
            if payload is None:
                n = _int(_first(udp, "udp.length") or "8") - 8
            else:
                n = (len(payload) + 1) // 3
            return n - 12 - 8 - 4
        lrh_node = _first(top, _fields_of(LRH).node)
        if lrh_node is None:
            return None
        lrh = _values(lrh_node, LRH, ("lnh", "pkt_len"))
        epdu = _first(top, "exported_pdu")
        if epdu is not None:
            hdr = sum(4 + _int(_first(t, "exported_pdu.tag_len") or "0")
                      for t in _all(epdu, "exported_pdu.tag_tree"))
            span = fr.cap_len - hdr
        elif fr.encap_type == _WTAP_ENCAP_ERF and "pkt_len" in lrh:
            span = lrh["pkt_len"] * 4 + 2
        else:
            span = fr.cap_len
        grh = 40 if lrh.get("lnh") == 3 else 0
        return span - _CRC_TRAILERS - _LRH_BTH_DETH - grh

    @staticmethod
    def _crc_errors(fr: _Frame) -> tuple[list[str], bytes | None]:
        """The CRC errors the plugin found, and the ICRC field (None if it showed none)."""
        errs = []
        checks: dict[str, str] = {}
        # the plugin shows both checks under the BTH (RoCEv2 too: its entry sees the frame)
        for node in _all(fr.layers, _fields_of(BTH).node):
            for key in ("ibpath.check.icrc", "ibpath.check.vcrc", _ICRC_FIELD):
                v = _first(node, key)
                if v is not None:
                    checks.setdefault(key, v)
        if checks.get("ibpath.check.icrc") == "0":
            errs.append(_decode.ICRC_MISMATCH)
        if checks.get("ibpath.check.vcrc") == "0":
            errs.append(_decode.VCRC_MISMATCH)
        icrc = checks.get(_ICRC_FIELD)
        return errs, (None if icrc is None or "ibpath.check.icrc" not in checks
                      else _int(icrc).to_bytes(4, "big"))

    def _sa(self, fr: _Frame, rec: dict, mad: dict, errors: list[str]) -> Iterator[dict]:
        top = fr.layers
        rmpp = _values(_first(top, _RMPP_NODE), RMPP)
        sa_node = _first(top, _SA_NODE)
        sa = _values(sa_node, SAHeader)
        rec["rmpp"] = _public(rmpp, RMPP)
        mask = sa.get("component_mask", 0)
        rec["sa"] = {
            "sm_key": sa.get("sm_key", 0),
            "attribute_offset": sa.get("attribute_offset", 0),
            "component_mask": mask,
            "components": [COMPONENT_MASK_NAMES[b] for b in range(64) if mask >> b & 1],
        }
        flags = rmpp.get("rmpp_flags", 0)
        rtype = rmpp.get("rmpp_type", 0)
        records = _all(sa_node, _PATHRECORD)
        if flags & 1 and rtype == 1 and flags & 6 != 6:  # one segment of a transfer
            key = (rec.get("src"), rec.get("dst"), mad["transaction_id"], mad["attribute_id"],
                   mad["method"])
            done = self.rmpp.add(key, rmpp.get("segment_number", 0), flags, self._dummy,
                                 fr.number, fr.time)
            _decode.note_rmpp_drop(self.rmpp, rec, self.stats)
            records = []
            if done is not None:
                _, transfer = done
                # the segments the kernel keeps (the Reassembler's: the first of repeated
                # ones, where the plugin's ibpath.rmpp.segment list names the last), and the
                # plugin's nested message with the records of the whole answer
                rec["reassembled_from"] = [transfer.frames[k] for k in sorted(transfer.frames)]
                whole = _first(sa_node, _SA_NODE)
                if whole is not None:
                    records = _all(whole, _PATHRECORD)
                errors += transfer.problems
        elif rtype not in (0, 1) and flags & 1:
            rec["rmpp_control"] = True
            self.rmpp.control(_decode.rmpp_control_key(rec, mad["transaction_id"],
                                                       mad["attribute_id"], mad["method"]),
                              rtype, fr.number)
        if mad["attribute_id"] == ATTR_PATH_RECORD:
            values = [_values(r, PathRecord) for r in records]
            rec["path_records"] = [{n: v[n] for n in PATH_RECORD_FIELDS} for v in values
                                   if all(n in v for n in PATH_RECORD_FIELDS)]
            bad = [i for i, v in enumerate(values) if _reserved_set(v)]
            if bad:
                errors.append(problem(Code.PR_RESERVED, tuple(bad)))
        if errors:
            rec["errors"] = errors
        yield rec

    # -- blobs -------------------------------------------------------------------------------
    def _blob(self, fr: _Frame, node) -> dict:
        self.stats.blob_frames += 1
        records = [self._pathdata(p) for p in _all(node, _PATHDATA)]
        records = [r for r in records if r is not None]
        trailing = _first(node, _fields_of(PathArray).fields[0][1])
        n_trailing = (len(trailing) + 1) // 3 if trailing else 0
        length = len(records) * RECORD_SIZE + n_trailing
        blob_records = [r for r, _ in records]
        bad = [k for k, (_, reserved) in enumerate(records) if reserved]
        return _decode.blob_frame_record(
            fr.number, fr.time, self.raw_blob, length, n_trailing, fr.comment, blob_records,
            blob_from_records(blob_records, length=length), bad)

    @staticmethod
    def _pathdata(node) -> tuple[dict, bool] | None:
        """(blob record dict, reserved PathRecord bits set) of a complete ibpath.pathdata node."""
        head = _values(node, PathRecData)
        pr = _values(_first(node, _PATHRECORD), PathRecord)
        if "flags" not in head or not all(n in pr for n in PATH_RECORD_FIELDS):
            return None
        flags = head["flags"]
        return ({"flags": flags, "flag_names": flag_names(flags),
                 "reserved": head.get("reserved", 0),
                 "path_record": {n: pr[n] for n in PATH_RECORD_FIELDS}}, _reserved_set(pr))

    # -- RDMA netlink ------------------------------------------------------------------------
    def _netlink(self, fr: _Frame, node) -> Iterator[dict]:
        family = _first(node, "netlink.family")
        if family is None or _int(family) != nl.NETLINK_RDMA:
            return
        self.stats.netlink_frames += 1
        helper = _first(fr.layers, "ibpath_engine")
        pk = _first(helper, "ibpath_engine.nl_pkttype")
        pk = _int(pk) if pk is not None else None
        base = {"frame": fr.number, "time": round(fr.time, 9), "encap": "netlink",
                "direction": _decode._DIRECTIONS.get(pk, "unknown"), "pkttype": pk}
        problems = []
        hatype = _first(node, "netlink.hatype")
        if hatype is not None and _int(hatype) != nl.ARPHRD_NETLINK:
            problems.append(problem(Code.NL_ARPHRD, _int(hatype)))
        msgs = self._messages(fr.layers, helper)
        record_len = fr.cap_len - nl.COOKED_HDR_SIZE
        # message offsets in the record, as Scapy's PacketListField walks them
        offsets, off = [], 0
        for m in msgs:
            offsets.append(off)
            off += nl.nlmsg_align(m.hdr.get("nlmsg_len", nl.NLMSG_HDRLEN))
        trailing = max(0, record_len - off) if msgs else max(0, record_len)
        if trailing:
            problems.append(problem(Code.NL_TRAILING, trailing))
        if not msgs:
            self.stats.malformed += 1
            yield {**base, "kind": "malformed",
                   "error": _decode.joined(problems)}
            return
        rereads = iter(self._messages(_pairs(helper), None))  # misflagged answers (helper)
        for i, (m, moff) in enumerate(zip(msgs, offsets)):
            rec = self._rdma_message(fr, dict(base), m, record_len - moff, rereads)
            if i == len(msgs) - 1 and problems:
                _decode.add_record_problems(self.stats, rec, problems)
            yield rec

    @staticmethod
    def _messages(top: list, helper=None) -> list[_Message]:
        """The record's messages in order: those the plugin dissected (ibpath.nl and the body
        nodes after it) and those Wireshark dissected itself (a "Netlink message" stand-in;
        its header fields come from the helper, in the same order)."""
        columns = [[_int(v) for v in _all(helper, f"ibpath_engine.nlmsg_{k}")]
                   for k in ("offset", "len", "type", "flags", "seq", "pid")]
        generic, end = [], 0
        for row in zip(*columns):
            if row[0] >= end:  # not the copy of a request header inside an NLMSG_ERROR
                generic.append(row[1:])
                end = row[0] + max(row[1], nl.NLMSG_HDRLEN)
        out: list[_Message] = []
        g = 0
        for key, node in top:
            if key == _NL:
                out.append(_Message(_values(node, nl.RdmaNLMsgHdr)))
            elif key == _GENERIC_MESSAGE:
                if g < len(generic):
                    length, typ, flags, seq, pid = generic[g]
                    out.append(_Message({"nlmsg_len": length, "rdma_client": typ >> 10,
                                         "rdma_op": typ & 0x3FF, "nlmsg_flags": flags,
                                         "nlmsg_seq": seq, "nlmsg_pid": pid}))
                g += 1
            elif out and key in _LS_BODY_BY_NODE:
                out[-1].bodies.append((key, node))
        return [m for m in out if "nlmsg_len" in m.hdr]

    def _rdma_message(self, fr: _Frame, rec: dict, m: _Message, left: int,
                      rereads: Iterator[_Message]) -> dict:
        h = m.hdr
        flags = h.get("nlmsg_flags", 0)
        client, op, seq = h.get("rdma_client", 0), h.get("rdma_op", 0), h.get("nlmsg_seq", 0)
        rec["netlink"] = {
            "nlmsg_len": h["nlmsg_len"], "nlmsg_type": nl.rdma_nl_type(client, op),
            "nlmsg_flags": flags, "nlmsg_seq": seq, "nlmsg_pid": h.get("nlmsg_pid", 0),
            "rdma_client": client, "rdma_op": op,
        }
        errors, structural = [], []
        if h["nlmsg_len"] > left:
            structural.append(problem(Code.NL_LEN_PAST_END, h["nlmsg_len"], left))
        if client != nl.RDMA_NL_LS:
            rec["kind"] = "rdma_netlink"
            rec["netlink"]["client_name"] = nl.RDMA_NL_CLIENTS.get(client)
            return self._finish(rec, errors, structural)
        rec["kind"] = "ls"
        request = bool(flags & nl.NLM_F_REQUEST)
        ls = {"op": nl.LS_OPS.get(op, f"op {op}"), "op_code": op, "seq": seq, "flags": flags,
              "request": request, "error": bool(flags & nl.RDMA_NL_LS_F_ERR)}
        rec["ls"] = ls
        body_len = max(0, min(h["nlmsg_len"], left) - nl.NLMSG_HDRLEN)
        body_key, body = m.bodies[0] if m.bodies else (None, None)
        cls = _LS_BODY_BY_NODE.get(body_key)
        is_response = op == nl.RDMA_NL_LS_OP_RESOLVE and not request
        misflagged = (op == nl.RDMA_NL_LS_OP_RESOLVE and request
                      and rec.get("pkttype") == nl.PACKET_KERNEL)
        if misflagged:
            # Only resolvers send RESOLVE to the kernel: this is an answer, wrongly flagged. The
            # plugin followed the flag; the helper had it read the answer as a response.
            errors.append(P.LS_ANSWER_AS_REQUEST)
            reread = next(rereads, None)
            body_key, body = (reread.bodies[0] if reread is not None and reread.bodies
                              else (None, None))
            cls = _LS_BODY_BY_NODE.get(body_key)
            is_response = True
        expected = nl.LsResolveResponse if is_response else nl.LS_BODIES.get((op, request))
        header = _body_header_size(expected) if expected is not None else 0
        # the plugin dissected the body (a fixed header shows fields; ib_short shows none)
        dissected = (cls is not None and cls is expected
                     and (header == 0 or bool(_values(body, cls))))
        if expected is None:
            errors.append(problem(Code.LS_UNKNOWN_OP, op))
        elif body_len and not dissected:
            structural.append(problem(Code.LS_BODY_UNDISSECTABLE, expected._name, body_len))
        attrs: list[dict] = []
        facts: list[_AttrFacts] = []
        trailing = 0
        if dissected:
            values = _values(body, cls)
            if cls is nl.LsResolveRequest:
                name = bytes.fromhex(values.get("device_name", ""))
                ls.update(device_name=name.rstrip(b"\x00").decode("ascii", "replace"),
                          port_num=values.get("port_num"), path_use=values.get("path_use"),
                          path_use_name=nl.PATH_USE.get(values.get("path_use"),
                                                        str(values.get("path_use"))))
                self.ls_requests[seq] = (values.get("path_use"), fr.number)
                if len(self.ls_requests) > _decode.Decoder.LS_REQUEST_MEMORY:
                    self.ls_requests.popitem(last=False)
            elif cls is nl.LsIpResolveRequest:
                ls["ifindex"] = values.get("ifindex")
            attrs, facts = self._attributes(body, body_len - header)
            trail = _first(body, _fields_of(cls).fields[-1][1])
            trailing = (len(trail) + 1) // 3 if trail else 0
        if trailing:
            structural.append(problem(Code.LS_ATTR_TRAILING, trailing))
        if is_response:
            self._ls_response(rec, ls, flags, seq, attrs, facts, errors)
        else:
            ls["attributes"] = [a["dict"] for a in attrs]
        for i, (a, f) in enumerate(zip(attrs, facts)):
            found = _decode._attr_problem(i, f, request)
            if found:
                (structural if f.truncated() else errors).append(found)
        return self._finish(rec, errors, structural)

    @staticmethod
    def _attributes(body, space: int) -> tuple[list[dict], list[_AttrFacts]]:
        """The attributes of a message body: {"dict": decode._attr_dict's dict (completed in
        _ls_response), "node": (name, node) of its value layer} and their facts; ``space`` is
        the bytes the attribute list has (for the offsets: what each attribute has left)."""
        attrs: list[dict] = []
        facts: list[_AttrFacts] = []
        off = 0
        current = None
        for key, node in _pairs(body):
            if key == _LS_ATTR:
                hdr = _values(node, nl.LsAttr)
                if hdr.get("nla_len", 0) < nl.NLA_HDRLEN:
                    break  # shown, but no attribute (nla_ok() fails): the rest is trailing
                raw = ((hdr.get("nested", 0) << 15) | (hdr.get("net_byteorder", 0) << 14)
                       | (hdr.get("mandatory", 0) << 13) | hdr.get("nla_type", 0))
                f = _AttrFacts(hdr["nla_len"], raw, max(0, space - off))
                current = {"dict": {"index": len(attrs), "type": f.nla_type,
                                    "type_name": nl.LS_NLA_TYPES.get(f.nla_type,
                                                                     f"unknown {f.nla_type}"),
                                    "nla_type": raw, "nla_len": f.nla_len,
                                    "mandatory": bool(f.mandatory)},
                           "node": None}
                attrs.append(current)
                facts.append(f)
                off += nl.nlmsg_align(hdr["nla_len"])
            elif current is not None and current["node"] is None and (
                    key in _LS_VALUE_BY_NODE or key == _PATHDATA):
                current["node"] = (key, node)  # the value layer follows its nlattr
        for a in attrs:
            if a["node"] is None:
                continue
            key, node = a["node"]
            cls = _LS_VALUE_BY_NODE.get(key)
            if cls is not None:
                fname = _decode._LS_VALUE_FIELDS[cls]
                v = _values(node, cls, (fname,))
                if fname in v:
                    a["dict"]["value"] = v[fname]
        return attrs, facts

    def _ls_response(self, rec: dict, ls: dict, flags: int, seq: int, attrs: list[dict],
                     facts: list[_AttrFacts], errors: list) -> None:
        pairs = []  # (attribute, blob record, reserved bits set)
        for a, f in zip(attrs, facts):
            if f.truncated():
                break
            if f.nla_type == nl.LS_NLA_TYPE_PATH_RECORD and a["node"] is not None \
                    and a["node"][0] == _PATHDATA:
                got = self._pathdata(a["node"][1])
                if got is not None:
                    pairs.append((a, got))
        for k, (a, _) in enumerate(pairs):
            a["dict"]["blob_record"] = k
        ls["attributes"] = [a["dict"] for a in attrs]
        records = [got for _, got in pairs]
        rec["blob_records"] = [r for r, _ in records]
        errors += _decode.reserved_blob_errors([reserved for _, reserved in records])
        path_use = _decode.link_ls_request(self.ls_requests, seq, ls)
        attr_dicts = [{**a["dict"], "available": len(f.original)} for a, f in zip(attrs, facts)]
        rec["kernel_blob"] = blob_from_records(
            rec["blob_records"], nlmsg_flags=flags, attributes=attr_dicts, path_use=path_use)

    def _finish(self, rec: dict, errors: list, structural: list) -> dict:
        return _decode.finish_message(self.stats, rec, errors, structural)


# --------------------------------------------------------------------------------------------
# Running tshark
# --------------------------------------------------------------------------------------------

def _packets(stream) -> Iterator[str]:
    """The text of each packet object of `tshark -T json` output, as it streams."""
    buf: list[str] | None = None
    for line in stream:
        if buf is None:
            if line.startswith("  {"):
                buf = [line]
            continue
        if line.startswith("  }"):
            buf.append("}")
            yield "".join(buf)
            buf = None
        else:
            buf.append(line)


def _frame_of(layers: list, clock: _Clock) -> _Frame:
    frame = _first(layers, "frame")
    number = _int(_first(frame, "frame.number"))
    epoch = _first(frame, "frame.time_epoch") or "0.0"
    section = _int(_first(frame, "frame.section_number") or "1")
    iface = _int(_first(frame, "frame.interface_id") or "0")
    comment = None
    for c in _all(layers, "pkt_comment"):
        comment = _first(c, "frame.comment")
        if comment is not None:
            break
    return _Frame(number=number, time=clock.time(epoch, section, iface),
                  cap_len=_int(_first(frame, "frame.cap_len") or "0"),
                  encap_type=_int(_first(frame, "frame.encap_type") or "0"),
                  comment=comment, layers=layers, linktype=clock.linktype(section, iface))


def _raw_blob_capture(path: str, tmpdir: str, as_blob: bool = False) -> str:
    """A raw blob file as a one-frame pcapng (exported PDU "ibpath.blob"), or CaptureError as
    decode.py raises it for a file that is neither a capture nor a blob."""
    with open(path, "rb") as f:
        data = f.read(MAX_RAW_BLOB + 1)
    if not data:
        raise TsharkEngineError(f"{path}: not a capture or blob file (empty)")
    if len(data) > MAX_RAW_BLOB or not (as_blob or blobsniff.plausible(data)):
        raise TsharkEngineError(f"{path}: not a capture or blob file "
                                f"(starts with {data[:8].hex()} at byte offset 0)")
    out = os.path.join(tmpdir, "blob.pcapng")
    with PcapNgWriter(out) as w:
        w.write(bytes(ExportedPDU.for_dissector(BLOB_DISSECTOR)) + data, 252, 0.0)
    return out


def tshark_records(path: str, *, stats: DecodeStats | None = None, tshark: str | None = None,
                   plugin: str | os.PathLike | None = None,
                   as_blob: bool = False, render: bool = False) -> Iterator[dict]:
    """Decoded records of every frame of a capture (or of a raw blob file; of any file with
    as_blob), from tshark and the
    ibpath plugin, in the format of decode.decode_file (see the module docstring for how and
    where they differ). Streams: tshark runs once, and its output is read packet by packet.

    stats, when given, is filled as decode.Decoder fills its own (frames, kinds, malformed).
    Raises TsharkEngineError (a pcapio.CaptureError) when tshark is missing, the plugin fails,
    or tshark cannot read the file to its end, after the records of the frames before.
    render=True gives the records' problems as sentences (facts.public), not facts.Problem."""
    edge = public if render else (lambda rec: rec)
    tshark = tshark or tshark_path()
    if not tshark:
        raise TsharkEngineError(f"{path}: tshark not found (install Wireshark's tshark, or set "
                                "$TSHARK); the tshark engine needs it")
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise TsharkEngineError(f"{path}: {exc.strerror or exc}") from None
    with tempfile.TemporaryDirectory(prefix="ibpath-tshark-") as tmp:
        capture, raw_blob = path, as_blob or sniff_format(head) == "other"
        if raw_blob:
            capture = _raw_blob_capture(path, tmp, as_blob)
            head = PCAPNG_SHB
        plugin_file = Path(plugin) if plugin else plugin_path()
        helper = Path(tmp) / "ibpath_engine.lua"
        helper.write_text(_HELPER_LUA)
        protocols = _plugin_protocols(plugin_file.read_text()) + ["ibpath_engine"]
        home = Path(tmp) / "home"
        home.mkdir()
        env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
                   XDG_DATA_HOME=str(home / ".local" / "share"), LC_ALL="C")
        env.pop("WIRESHARK_CONFIG_DIR", None)
        _require_plugin(path, tshark, plugin_file, env)
        cmd = [tshark, "-n", "-r", capture, "-X", f"lua_script:{plugin_file}",
               "-X", f"lua_script:{helper}", "-T", "json",
               "-J", " ".join(list(_WIRESHARK_PROTOCOLS) + protocols)]
        builder = _Builder(raw_blob=raw_blob)
        if stats is not None:
            builder.stats = stats
        clock = _Clock(capture, head)
        errfile = open(Path(tmp) / "stderr", "w+")
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errfile, env=env,
                                    text=True, encoding="utf-8", errors="replace")
        except OSError as exc:
            errfile.close()
            clock.close()
            raise TsharkEngineError(f"{path}: cannot run {tshark}: {exc.strerror or exc}") from None
        def stderr_text() -> str:
            errfile.seek(0)
            return errfile.read()

        try:
            first = True
            for text in _packets(proc.stdout):
                if first:  # a script that fails to load says so before the first packet
                    _check_stderr(path, stderr_text(), 0)
                    first = False
                bad = _FAILURE.search(text)
                if bad:
                    m = re.search(r'"frame\.number":\s*"(\d+)"', text)
                    raise TsharkEngineError(
                        f"{path}: frame {m.group(1) if m else '?'}: the ibpath plugin failed "
                        f"in tshark ({bad.group(1)})")
                try:
                    layers = _first(_first(json.loads(text, object_pairs_hook=list),
                                           "_source"), "layers")
                    fr = _frame_of(layers, clock)
                except (ValueError, TypeError) as exc:
                    raise TsharkEngineError(f"{path}: tshark's JSON output cannot be read "
                                            f"({exc})") from None
                if raw_blob:
                    fr.time = 0.0
                yield from map(edge, builder.feed(fr))
            proc.wait()
            _check_stderr(path, stderr_text(), proc.returncode)
            yield from map(edge, builder.finish())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            errfile.close()
            clock.close()


def _require_plugin(path: str, tshark: str, plugin: Path, env: dict) -> None:
    """TsharkEngineError naming why this tshark loads no ibpath protocol (root on Wireshark
    4.4 and later, no Lua, a plugin that fails), before the capture is blamed for it."""
    try:
        problem = Tshark.at(tshark).probe(plugin, env=env)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        problem = f"cannot ask {tshark} its version ({exc})"
    if problem:
        raise TsharkEngineError(f"{path}: the tshark engine cannot use {tshark}: {problem}; "
                                "the capture was not read (use the default engine, or run as a "
                                "regular user)")


_STDERR_NOISE = re.compile(
    r'^Running as user "[^"]*" and group "[^"]*"\. This could be dangerous\.$')


def _check_stderr(path: str, err: str, returncode: int) -> None:
    """A Lua script that failed to load (tshark goes on without it and exits 0), or tshark's
    own complaint when it exits non-zero (a file cut short, an unsupported link type)."""
    lines = [ln.strip() for ln in err.splitlines()
             if ln.strip() and not _STDERR_NOISE.match(ln.strip())]
    for ln in lines:
        if "Lua" in ln and "rror" in ln:
            raise TsharkEngineError(f"{path}: a Lua script failed to load in tshark: "
                                    f"{ln.removeprefix('tshark: ')}")
    if returncode != 0:
        first = next((i for i, ln in enumerate(lines) if ln.startswith("tshark:")), None)
        if first is None:
            why = lines[0] if lines else f"exit status {returncode}"
        else:
            why = lines[first].removeprefix("tshark: ")
            if first + 1 < len(lines) and lines[first + 1].startswith("("):
                why += " " + lines[first + 1]
        raise TsharkEngineError(f"{path}: tshark cannot read it: {why}")
