"""The plugin's fields as layer facts, from the nodes tshark shows, handed to the one
assembler (assemble.py): the same records decode.decode_file yields."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Iterator

from scapy.contrib.roce import BTH, GRH

from ..scapy import decode as _decode
from ...facts.assemble import (
    ICRC_MISMATCH,
    VCRC_MISMATCH,
    Assembler,
    SaParts,
    blob_record,
    mad_fact,
    reserved_errors,
    sa_fact,
)
from ...facts import Code, problem, problems as P
from ...facts.records import (CM_FACTS, CM_REQ_FIELDS, PATH_RECORD_FIELDS, CmReqPaths, Rmpp,
                               sa_record_fact)
from ...facts.records import PathRecord as PathRecordFact
from ...facts.kernelview import Blob, LsContext, ls_parse_error
from ...layers import cm as cm_layers, netlink as nl
from ...layers.ib import LNH_IBA_GLOBAL, LRH
from ...layers.mad import MAD, MAD_SIZE, MGMT_CLASS_SA, RMPP
from ...layers.pathdata import PathArray, PathRecData, RECORD_SIZE
from ...layers.roce import DETH, UD_SEND_ONLY
from ...layers.sa import SA_RECORD_CLASSES, PathRecord, SAHeader, ServiceRecord
from ...facts.assemble_process import (
    COMMAND_FIELDS,
    IB_SERVICE_FIELDS,
    COMMAND_LAYERS,
    RESPONSE_FIELDS,
    RESPONSE_LAYERS,
    acm_endpoint,
    acm_entry,
    acm_frame,
    recorder_note,
    struct_size,
    ucma_frame,
    umad_fact,
)
from ...capture.comment import NOTE_COLUMN, NOTE_DISSECTOR
from ...facts.process import ACM_ENDPOINT_FIELDS
from ...layers.acm import (
    AcmCounter,
    AcmEpAddrData,
    AcmEpAddress,
    AcmEpConfigData,
    AcmPerfData,
    AcmResolve,
)
from ...layers.ucma import (UcmaCmdHdr, UcmaIbService, UcmaQueryIbServiceResp,
                            UcmaQueryPathResp, UcmaResolveIbService)
from ...layers.umad import UMAD_DISSECTOR, UMAD_HDR_SIZE, UserMad, umad_headers_size
from ...model.layout import build_layer, header_layout, static_length
from .tree import _Frame, _all, _fields_of, _first, _int, _pairs, _public, _reserved_set, _values


# --------------------------------------------------------------------------------------------
# Kernel view facts from decoded record dicts (a pure function; kernelview.py builds them
# from Scapy packets)
# --------------------------------------------------------------------------------------------

# the node Wireshark's own netlink dissector shows for a message the plugin did not dissect
_GENERIC_MESSAGE = "Netlink message"


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
# headers before a native-IB MAD (and a GRH's with LNH "IBA global"), the CRCs after it
_LRH_BTH_DETH = sum(map(static_length, (LRH, BTH, DETH)))
_GRH_SIZE = static_length(GRH)
_CRC_TRAILERS = sum(f.nbytes for c in (BTH, LRH) for f in header_layout(c).fields.values()
                    if f.trailer)  # ICRC and VCRC


def _pdu_payload(pdu) -> tuple[str | None, str | None, str | None]:
    """An exported PDU's dissector name, protocol column text and payload (as tshark shows
    bytes: aa:bb:...)."""
    name = column = None
    for tree in _all(pdu, "exported_pdu.tag_tree"):
        name = name or _first(tree, "exported_pdu.prot_name")
        column = column or _first(tree, "exported_pdu.col_proto_str")
    return name, column, _first(pdu, "exported_pdu.exported_pdu")


def _node_values(top, cls: type, names) -> dict | None:
    """The values of `names` in the layer's top-level node (None: no node)."""
    node = _first(top, _fields_of(cls).node)
    return _values(node, cls, names) if node is not None else None


def _hex_len(text: str | None) -> int:
    """Bytes of a bytes field as tshark shows it (aa:bb:...)."""
    return (len(text) + 1) // 3 if text else 0


_ACM_TRAILING = next(a for n, a, _ in _fields_of(AcmResolve).fields if n == "trailing")


@functools.lru_cache(maxsize=None)
def _body_header_size(cls: type) -> int:
    """Bytes of an LS body before its attributes (68 for a RESOLVE request)."""
    return build_layer(cls, "ibpath", set()).fixed_len


@dataclass
class _Message:
    hdr: dict
    bodies: list = field(default_factory=list)  # (node name, node)


class _Builder(Assembler):
    """The plugin's fields as layer facts, handed to the assembler."""

    def __init__(self, raw_blob: bool = False):
        super().__init__()
        self.raw_blob = raw_blob
        self._dummy = bytes(MAD_SIZE)

    # -- per frame ---------------------------------------------------------------------------
    def feed(self, fr: _Frame) -> Iterator:
        self.stats.frames += 1
        if fr.linktype is not None and fr.linktype not in _decode.SUPPORTED_LINKTYPES:
            self.note_unsupported(fr.linktype, fr.number)
            return
        for rec in self._frame_records(fr):
            self.stats.by_kind[rec["kind"]] = self.stats.by_kind.get(rec["kind"], 0) + 1
            yield rec

    def _frame_records(self, fr: _Frame) -> Iterator:
        top = fr.layers
        list_framed = self.raw_blob or any(_first(top, k) is not None
                                           for k in ("netlink", "exported_pdu"))
        too_big = self.size_limit(fr.number, fr.cap_len, list_framed)
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
        pdu = _first(top, "exported_pdu")
        if pdu is not None:
            name, column, payload = _pdu_payload(pdu)
            if name in _decode._PROCESS_DISSECTORS:
                yield self._process(fr, name, _hex_len(payload))
                return
            if name == UMAD_DISSECTOR:
                yield self._umad(fr, _hex_len(payload))
                return
            if name == NOTE_DISSECTOR and column == NOTE_COLUMN:
                yield recorder_note(fr.number, fr.time,
                                    bytes.fromhex(payload.replace(":", "")) if payload else b"")
                return
        yield from self._mad_frame(fr)

    # -- what a process did (ibpath record) ----------------------------------------------------
    def _process(self, fr: _Frame, name: str, size: int):
        """decode.Decoder._process over the plugin's nodes."""
        top = fr.layers
        layer = _decode._PROCESS_DISSECTORS[name]
        node = _first(top, _fields_of(layer).node)
        head = _values(node, layer) if node is not None else {}
        if len(head) < len(_fields_of(layer).fields):
            return self.malformed(fr.number, problem(
                Code.CANNOT_DISSECT, f"{name}: {size} bytes, shorter than {layer.__name__} "
                f"({struct_size(layer)} bytes)"))
        if layer is UcmaCmdHdr:
            command = response = paths = service = services = None
            cmd_layer = COMMAND_LAYERS.get(head["cmd"])
            if cmd_layer is not None:
                command = _node_values(top, cmd_layer, COMMAND_FIELDS)
            if cmd_layer is UcmaResolveIbService:
                node = _first(top, _fields_of(cmd_layer).node)
                service = _node_values(node, UcmaIbService, IB_SERVICE_FIELDS)
            for resp_layer in RESPONSE_LAYERS:
                response = _node_values(top, resp_layer, RESPONSE_FIELDS)
                if response is not None:
                    if resp_layer is UcmaQueryPathResp:
                        paths = [r for r, _ in filter(None, map(
                            self._pathdata, _all(_first(top, _fields_of(resp_layer).node),
                                                 _PATHDATA)))]
                    if resp_layer is UcmaQueryIbServiceResp:
                        fact = sa_record_fact(ServiceRecord)
                        node = _first(top, _fields_of(resp_layer).node)
                        values = [_values(r, ServiceRecord)
                                  for r in _all(node, _fields_of(ServiceRecord).node)]
                        services = [fact(**{n: v[n] for n in fact._INIT}) for v in values
                                    if all(n in v for n in fact._INIT)]
                    break
            return ucma_frame(fr.number, fr.time, fr.comment, head["cmd"],
                              size - struct_size(UcmaCmdHdr), command, response, paths,
                              service, services)
        entries, trailing = None, 0
        resolve = _first(top, _fields_of(AcmResolve).node)
        if resolve is not None:
            entries = []
            for i, e in enumerate(_all(resolve, _fields_of(AcmEpAddrData).node)):
                pr = _first(e, _PATHRECORD)
                pr = _values(pr, PathRecord) if pr is not None else None
                entries.append(acm_entry(
                    i, _values(e, AcmEpAddrData, ("flags", "type", "info")),
                    PathRecordFact(**{n: pr[n] for n in PATH_RECORD_FIELDS}) if pr else None))
            trailing = _hex_len(_first(resolve, _ACM_TRAILING))
        counters = endpoint = None
        perf = _first(top, _fields_of(AcmPerfData).node)
        if perf is not None:
            counters = [_values(c, AcmCounter)["value"]
                        for c in _all(perf, _fields_of(AcmCounter).node)]
        ep = _first(top, _fields_of(AcmEpConfigData).node)
        if ep is not None:
            addrs = [_values(a, AcmEpAddress)["address"]
                     for a in _all(ep, _fields_of(AcmEpAddress).node)]
            endpoint = acm_endpoint(_values(ep, AcmEpConfigData,
                                            ACM_ENDPOINT_FIELDS + ("prov_name",)), addrs)
        return acm_frame(fr.number, fr.time, fr.comment, _public(head, layer), size, entries,
                         trailing, counters=counters, endpoint=endpoint)

    # -- MADs --------------------------------------------------------------------------------
    def _mad_frame(self, fr: _Frame) -> Iterator:
        top = fr.layers
        mad_node = _first(top, _MAD_NODE)
        mad = _values(mad_node, MAD) if mad_node is not None else {}
        bth = _values(_first(top, _fields_of(BTH).node), BTH)
        deth = _values(_first(top, _fields_of(DETH).node), DETH)
        if "transaction_id" not in mad:
            if "src_qp" in deth and (deth["src_qp"] in (0, 1) or bth.get("dqpn") in (0, 1)):
                n = self._mad_length(fr)
                yield self.malformed(fr.number, problem(Code.GSI_SHORT,
                                                        max(n, 0) if n is not None else "?"))
            elif bth.get("opcode") == UD_SEND_ONLY and "src_qp" not in deth:
                yield self.malformed(fr.number, P.UD_NO_DETH)
            return
        length = self._mad_length(fr)
        crc_errs, icrc = self._crc_errors(fr)
        sa, cm, cm_req = self._mad_parts(fr, mad, length is None or length >= MAD_SIZE)
        yield self.mad_frame(fr.number, fr.time, self._addresses(fr, bth, deth),
                             mad_fact(_public(mad, MAD)), length, crc_errs, icrc,
                             sa=sa, cm=cm, cm_req=cm_req)

    def _mad_parts(self, fr: _Frame, mad: dict, whole: bool) -> tuple:
        """(SaParts, CM message fact, CM REQ paths) of a MAD the plugin read (decode's
        _mad_parts); whole: the MAD holds what its kind needs (else all None)."""
        sa = cm = cm_req = None
        if not whole:
            return sa, cm, cm_req
        if mad["mgmt_class"] == MGMT_CLASS_SA:
            return self._sa(fr, mad), cm, cm_req
        for name, cls in _CM_BY_NODE.items():
            node = _first(fr.layers, name)
            if node is None:
                continue
            values = _public(_values(node, cls), cls)
            values.pop("private_data", None)
            cm = CM_FACTS[cls](message=cls._name.split()[-1], **values)
            if cls is cm_layers.CMReq:
                cm_req = CmReqPaths(**{n: values[n] for n in CM_REQ_FIELDS if n in values})
            break
        return sa, cm, cm_req

    def _umad(self, fr: _Frame, size: int):
        """decode.Decoder._umad over the plugin's nodes: size, the bytes of the exported
        PDU's payload (struct ib_user_mad_hdr and the message)."""
        top = fr.layers
        node = _first(top, _fields_of(UserMad).node)
        head = _values(node, UserMad) if node is not None else {}
        mad_node = _first(top, _MAD_NODE)
        mad = _values(mad_node, MAD) if mad_node is not None else {}
        if len(head) < len(_fields_of(UserMad).fields) or "transaction_id" not in mad:
            return self.malformed(fr.number, _decode.umad_unreadable(size))
        length = size - UMAD_HDR_SIZE
        sa, cm, cm_req = self._mad_parts(fr, mad, length >= umad_headers_size(mad["mgmt_class"]))
        return self.umad_frame(fr.number, fr.time, umad_fact(_public(head, UserMad), fr.comment),
                               mad_fact(_public(mad, MAD)), length, sa, cm, cm_req)

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
        grh = _GRH_SIZE if lrh.get("lnh") == LNH_IBA_GLOBAL else 0
        return span - _CRC_TRAILERS - _LRH_BTH_DETH - grh

    @staticmethod
    def _crc_errors(fr: _Frame) -> tuple[list, bytes | None]:
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
            errs.append(ICRC_MISMATCH)
        if checks.get("ibpath.check.vcrc") == "0":
            errs.append(VCRC_MISMATCH)
        icrc = checks.get(_ICRC_FIELD)
        return errs, (None if icrc is None or "ibpath.check.icrc" not in checks
                      else _int(icrc).to_bytes(4, "big"))

    def _sa(self, fr: _Frame, mad: dict) -> SaParts:
        """The SA parts of an SA MAD: the reassembly is the plugin's (its nested message holds
        the records of the whole answer); the assembler's Reassembler decides, as in the
        other engines, which segments the kernel keeps."""
        top = fr.layers
        rmpp = _values(_first(top, _RMPP_NODE), RMPP)
        sa_node = _first(top, _SA_NODE)
        sa = _values(sa_node, SAHeader)
        header = sa_fact(sa.get("sm_key", 0), sa.get("attribute_offset", 0),
                         sa.get("component_mask", 0), mad["attribute_id"])
        layer = SA_RECORD_CLASSES.get(mad["attribute_id"])  # the SA attribute table's entry

        def records_of(node) -> tuple[list, list] | tuple[None, tuple]:
            if layer is None:
                return None, ()
            fact = sa_record_fact(layer)
            names = fact._INIT
            values = [_values(r, layer) for r in _all(node, _fields_of(layer).node)]
            return ([fact(**{n: v[n] for n in names}) for v in values
                     if all(n in v for n in names)],
                    [_reserved_set(v) for v in values])

        def whole(_message: bytes) -> tuple[list, list]:
            nested = _first(sa_node, _SA_NODE)
            return records_of(nested) if nested is not None else ([], [])

        records, reserved = records_of(sa_node)
        return SaParts(Rmpp(**_public(rmpp, RMPP)), header, records, reserved, self._dummy,
                       whole)

    # -- blobs -------------------------------------------------------------------------------
    def _blob(self, fr: _Frame, node):
        records = [self._pathdata(p) for p in _all(node, _PATHDATA)]
        records = [r for r in records if r is not None]
        trailing = _first(node, _fields_of(PathArray).fields[0][1])
        n_trailing = (len(trailing) + 1) // 3 if trailing else 0
        length = len(records) * RECORD_SIZE + n_trailing
        blob_records = [r for r, _ in records]
        bad = [k for k, (_, reserved) in enumerate(records) if reserved]
        return self.blob_frame(
            fr.number, fr.time, self.raw_blob, length, n_trailing, fr.comment, blob_records,
            blob_from_records(blob_records, length=length), bad)

    @staticmethod
    def _pathdata(node) -> tuple | None:
        """(blob record fact, reserved PathRecord bits set) of a complete ibpath.pathdata node."""
        head = _values(node, PathRecData)
        pr = _values(_first(node, _PATHRECORD), PathRecord)
        if "flags" not in head or not all(n in pr for n in PATH_RECORD_FIELDS):
            return None
        path_record = PathRecordFact(**{n: pr[n] for n in PATH_RECORD_FIELDS})
        return blob_record(head["flags"], head.get("reserved", 0), path_record), _reserved_set(pr)

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
            yield self.netlink_empty(base, problems)
            return
        rereads = iter(self._messages(_pairs(helper), None))  # misflagged answers (helper)
        for i, (m, moff) in enumerate(zip(msgs, offsets)):
            yield self._rdma_message(fr, base, m, record_len - moff, rereads,
                                     problems if i == len(msgs) - 1 else ())

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

    def _rdma_message(self, fr: _Frame, base: dict, m: _Message, left: int,
                      rereads: Iterator[_Message], record_problems):
        h = m.hdr
        flags = h.get("nlmsg_flags", 0)
        client, op, seq = h.get("rdma_client", 0), h.get("rdma_op", 0), h.get("nlmsg_seq", 0)
        nlhdr = {
            "nlmsg_len": h["nlmsg_len"], "nlmsg_type": nl.rdma_nl_type(client, op),
            "nlmsg_flags": flags, "nlmsg_seq": seq, "nlmsg_pid": h.get("nlmsg_pid", 0),
            "rdma_client": client, "rdma_op": op,
        }
        errors, structural = [], []
        if h["nlmsg_len"] > left:
            structural.append(problem(Code.NL_LEN_PAST_END, h["nlmsg_len"], left))
        if client != nl.RDMA_NL_LS:
            return self.netlink_message(base, nlhdr, "rdma_netlink", None, None, errors,
                                        structural, record_problems,
                                        client_name=nl.RDMA_NL_CLIENTS.get(client))
        request = bool(flags & nl.NLM_F_REQUEST)
        ls = {"op": nl.LS_OPS.get(op, f"op {op}"), "op_code": op, "seq": seq, "flags": flags,
              "request": request, "error": bool(flags & nl.RDMA_NL_LS_F_ERR)}
        body_len = max(0, min(h["nlmsg_len"], left) - nl.NLMSG_HDRLEN)
        body_key, body = m.bodies[0] if m.bodies else (None, None)
        cls = _LS_BODY_BY_NODE.get(body_key)
        is_response = op == nl.RDMA_NL_LS_OP_RESOLVE and not request
        misflagged = (op == nl.RDMA_NL_LS_OP_RESOLVE and request
                      and base.get("pkttype") == nl.PACKET_KERNEL)
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
                self.remember_ls_request(seq, values.get("path_use"), fr.number)
            elif cls is nl.LsIpResolveRequest:
                ls["ifindex"] = values.get("ifindex")
            attrs, facts = self._attributes(body, body_len - header)
            trail = _first(body, _fields_of(cls).fields[-1][1])
            trailing = (len(trail) + 1) // 3 if trail else 0
        if trailing:
            structural.append(problem(Code.LS_ATTR_TRAILING, trailing))
        blob_records = kernel_blob = None
        if is_response:
            blob_records, kernel_blob = self._ls_response(ls, flags, seq, attrs, facts, errors)
        for i, (a, f) in enumerate(zip(attrs, facts)):
            found = _decode._attr_problem(i, f, request)
            if found:
                (structural if f.truncated() else errors).append(found)
        return self.netlink_message(base, nlhdr, "ls", ls, [a["dict"] for a in attrs], errors,
                                    structural, record_problems, blob_records, kernel_blob)

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

    def _ls_response(self, ls: dict, flags: int, seq: int, attrs: list[dict],
                     facts: list[_AttrFacts], errors: list) -> tuple[list, Blob]:
        """An LS RESOLVE answer's blob records and what the kernel reads of them; marks its
        PATH_RECORD attributes with their record index and ties it to its request."""
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
        records = [got for _, got in pairs]
        blob_records = [r for r, _ in records]
        errors += reserved_errors(Code.BLOB_RESERVED, (reserved for _, reserved in records))
        path_use = self.link_ls_request(seq, ls)
        attr_dicts = [{**a["dict"], "available": len(f.original)} for a, f in zip(attrs, facts)]
        return blob_records, blob_from_records(blob_records, nlmsg_flags=flags,
                                               attributes=attr_dicts, path_use=path_use)


