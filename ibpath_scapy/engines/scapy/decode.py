"""Frame-by-frame decoding of captures into records, through the Scapy layers.

One Decoder per file: it dissects each frame with the layers, checks lengths and CRCs, and
hands the layer facts to the assembler (assemble.py: RMPP reassembly, the records), which
yields one record (facts.records) per frame that carries a MAD, per RDMA netlink message
(link type 253) and per blob (exported PDU "ibpath.blob", or a raw blob file); facts.public
makes the JSON of `ibpath decode --format json` (interfaces.md). Frames that should carry a MAD but
cannot be decoded come out as kind "malformed" with the reason; nothing is dropped silently.

A file that is neither pcap nor pcapng is a raw blob when blobsniff.plausible() accepts it
(a flags word below 0x100, or whole records whose PathRecords read as resolved paths), or
whatever its content when the caller says it is one (`--as blob`, `--blob`). Text and other
binary formats fail that test and are "not a capture or blob file".

Frames of a link type no layer here reads are counted per link type and reported once at the
end of the file (kind "unsupported"); RMPP segments the receiving kernel would drop
(rmpp.Reassembler) are marked "rmpp_dropped" and counted, not errors.
"""

from __future__ import annotations

import ipaddress
from typing import Iterable, Iterator

from scapy.config import conf
from scapy.data import DLT_EN10MB, DLT_IPV4, DLT_IPV6, DLT_LINUX_SLL, DLT_LINUX_SLL2, DLT_RAW_ALT
from scapy.contrib.roce import BTH, GRH
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Ether
from scapy.packet import Packet, Padding

from . import blobsniff
from ...model import crc
from ...facts.assemble import (
    ICRC_MISMATCH,
    MAX_FRAME_BYTES,
    MAX_LIST_FRAME_BYTES,
    VCRC_MISMATCH,
    Assembler,
    DecodeStats,
    SaParts,
    blob_record,
    joined,
    mad_fact,
    reserved_errors,
    sa_fact,
)
from ...facts import Code, Problem, problem, public
from .gcpace import scapy_frame
from ...facts import problems as P
from ...facts.records import (CM_FACTS, CM_REQ_FIELDS, PATH_RECORD_FIELDS, CmReqPaths, Fact, Rmpp,
                               public_names, sa_record_fact)
from ...facts.records import PathRecord as PathRecordFact
from ...facts.values import field_value, layer_dict, path_record_fact, reserved_nonzero
from ...facts.kernelview import blob_from_array, blob_from_ls_response, path_record_attributes
from ...layers import cm as cm_layers
from ...layers import netlink as nl
from ...layers.ib import (
    EXP_PDU_TAG_COL_PROT_TEXT,
    ERF,
    LINKTYPE_ERF,
    LINKTYPE_INFINIBAND,
    LINKTYPE_WIRESHARK_UPPER_PDU,
    LRH,
    ExportedPDU,
)
from ...layers.mad import MAD, MAD_SIZE, RMPP
from ...layers.pathdata import RECORD_SIZE, PathArray, PathRecData
from ...layers.acm import ACM_DISSECTOR, AcmEpConfigData, AcmHdr, AcmPerfData, AcmResolve
from ...layers.roce import DETH, UD_SEND_ONLY
from ...layers.ucma import (UCMA_DISSECTOR, UcmaCmdHdr, UcmaQueryIbServiceResp,
                            UcmaQueryPathResp, UcmaResolveIbService)
from ...layers.umad import UMAD_DISSECTOR, UMAD_HDR_SIZE, UserMad, umad_headers_size
from ...layers.sa import PathRecord, SAHeader, ServiceRecord, gid_text
from ...facts.assemble_process import (
    COMMAND_FIELDS,
    COMMAND_LAYERS,
    IB_SERVICE_FIELDS,
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
from ...capture.pcapio import RAW_BLOB_LINKTYPE, Frame, Input, read_input

conf.debug_dissector = False

LINKTYPE_LAYERS: dict[int, type[Packet]] = {
    DLT_EN10MB: Ether,
    DLT_LINUX_SLL: CookedLinux,
    LINKTYPE_ERF: ERF,
    LINKTYPE_INFINIBAND: LRH,
    LINKTYPE_WIRESHARK_UPPER_PDU: ExportedPDU,
    nl.LINKTYPE_NETLINK: nl.NetlinkCooked,
    DLT_LINUX_SLL2: CookedLinuxV2,
    RAW_BLOB_LINKTYPE: PathArray,
}
_RAW_IP_LINKTYPES = {DLT_RAW_ALT, DLT_IPV4, DLT_IPV6}
SUPPORTED_LINKTYPES = frozenset(LINKTYPE_LAYERS) | _RAW_IP_LINKTYPES
_LIST_LINKTYPES = {LINKTYPE_WIRESHARK_UPPER_PDU, nl.LINKTYPE_NETLINK, RAW_BLOB_LINKTYPE}
# exported PDUs of ibpath record that carry what a process did (facts.process)
_PROCESS_DISSECTORS = {UCMA_DISSECTOR: UcmaCmdHdr, ACM_DISSECTOR: AcmHdr}


def _is_recorder_note(pdu: ExportedPDU) -> bool:
    """One of ibpath record's notes: the "data" dissector, "ibpath note" in the column."""
    return pdu.dissector_name() == NOTE_DISSECTOR and any(
        t.tag == EXP_PDU_TAG_COL_PROT_TEXT and t.text() == NOTE_COLUMN for t in pdu.tags)


def _some(pkt: Packet | None, names: Iterable[str]) -> dict | None:
    """The values of those of `names` the layer has (None: no layer)."""
    if pkt is None:
        return None
    return layer_dict(pkt, [n for n in names if n in pkt.fields])


def blob_record_fact(rec: PathRecData) -> Fact:
    """A blob record as interfaces.md defines it."""
    return blob_record(int(rec.flags), rec.reserved, path_record_fact(rec.path_record))


def dissect(frame: Frame) -> Packet | None:
    """The frame as a Scapy packet, or None for a link type without a MAD-carrying layer."""
    if frame.linktype in _RAW_IP_LINKTYPES:
        if not frame.data:
            return None
        return (IPv6 if frame.data[0] >> 4 == 6 else IP)(frame.data)
    cls = LINKTYPE_LAYERS.get(frame.linktype)
    return cls(frame.data) if cls is not None else None


def _sa_records(sa: Packet) -> tuple[list, list]:
    """(record facts, reserved bits set per record) of an SA header's records, each a fact
    of its attribute's class (sa_record_fact)."""
    records = list(sa.records)
    if not records:
        return [], []
    fact = sa_record_fact(type(records[0]))
    names = PATH_RECORD_FIELDS if fact is PathRecordFact else public_names(type(records[0]))
    return ([fact(**layer_dict(r, names)) for r in records],
            [bool(reserved_nonzero(r)) for r in records])


def _whole_records(message: bytes) -> tuple[list, list]:
    """The records of a reassembled SA answer."""
    whole = MAD(message)
    return _sa_records(whole[SAHeader]) if whole.haslayer(SAHeader) else ([], [])


class Decoder(Assembler):
    """Turns frames into decoded records through the Scapy layers; call feed() per frame and
    finish() at the end (assemble.Assembler builds the records)."""

    def feed(self, frame: Frame) -> Iterator[Fact]:
        self.stats.frames += 1
        rec = self.size_limit(frame.number, len(frame.data), frame.linktype in _LIST_LINKTYPES)
        if rec is not None:
            yield rec
            return
        scapy_frame()  # its packet's cycles are collected with the next frames' (gcpace)
        try:
            pkt = dissect(frame)
        except Exception as exc:  # scapy raises assorted errors on hostile bytes
            yield self.malformed(frame.number, problem(Code.CANNOT_DISSECT, str(exc)))
            return
        if pkt is None:
            if frame.linktype not in SUPPORTED_LINKTYPES:
                self.note_unsupported(frame.linktype, frame.number)
            return
        for rec in self._frame_records(frame, pkt):
            self.stats.by_kind[rec["kind"]] = self.stats.by_kind.get(rec["kind"], 0) + 1
            yield rec

    # ------------------------------------------------------------------------------------
    def _frame_records(self, frame: Frame, pkt: Packet) -> Iterator[Fact]:
        if isinstance(pkt, nl.NetlinkCooked):
            yield from self._netlink(frame, pkt)
            return
        if isinstance(pkt, ExportedPDU) and pkt.dissector_name() in _PROCESS_DISSECTORS:
            yield self._process(frame, pkt)
            return
        if isinstance(pkt, ExportedPDU) and _is_recorder_note(pkt):
            yield recorder_note(frame.number, frame.time, bytes(pkt.payload))
            return
        array = pkt if isinstance(pkt, PathArray) else None
        if isinstance(pkt, ExportedPDU) and isinstance(pkt.payload, PathArray):
            array = pkt.payload
        elif isinstance(pkt, ExportedPDU) and not pkt.payload and pkt.dissector_name() == "ibpath.blob":
            array = PathArray(b"")  # an empty optval (EINVAL) is still a blob frame
        if array is not None:
            yield self._blob(frame, array)
            return
        if isinstance(pkt, ExportedPDU) and pkt.dissector_name() == UMAD_DISSECTOR:
            yield self._umad(frame, pkt.payload)
            return
        mad = pkt.getlayer(MAD)
        deth = pkt.getlayer(DETH)
        bth = pkt.getlayer(BTH)
        if mad is None:
            if deth is not None and (deth.src_qp in (0, 1) or bth.dqpn in (0, 1)):
                yield self.malformed(frame.number,
                                     problem(Code.GSI_SHORT, len(bytes(deth.payload))))
            elif bth is not None and bth.opcode == UD_SEND_ONLY and deth is None:
                yield self.malformed(frame.number, P.UD_NO_DETH)
            return
        mad_bytes = bytes(mad)
        mad_bytes = mad_bytes[:len(mad_bytes) - padding_len(mad)]
        crc_errs, icrc = _crc_errors(frame.data, pkt)
        sa, cm, cm_req = _mad_parts(mad, mad_bytes, MAD_SIZE)
        yield self.mad_frame(frame.number, frame.time, _addresses(pkt),
                             mad_fact(layer_dict(mad)), len(mad_bytes), crc_errs, icrc,
                             sa=sa, cm=cm, cm_req=cm_req)

    def _umad(self, frame: Frame, hdr: Packet) -> Fact:
        """A MAD ibpath record took from a umad fd: struct ib_user_mad_hdr, then the message
        as the process wrote or read it (assemble.Assembler.umad_frame)."""
        mad = hdr.getlayer(MAD) if isinstance(hdr, UserMad) else None
        if mad is None:
            return self.malformed(frame.number, umad_unreadable(len(bytes(hdr))))
        mad_bytes = bytes(mad)
        side = umad_fact(layer_dict(hdr), frame.comment)
        sa, cm, cm_req = _mad_parts(mad, mad_bytes, umad_headers_size(mad.mgmt_class))
        return self.umad_frame(frame.number, frame.time, side, mad_fact(layer_dict(mad)),
                               len(mad_bytes), sa, cm, cm_req)

    # -- what a process did (ibpath record) ----------------------------------------------------
    def _process(self, frame: Frame, pkt: ExportedPDU) -> Fact:
        """The record of a ucma command or an ACM message (assemble_process)."""
        name, msg = pkt.dissector_name(), pkt.payload
        layer = _PROCESS_DISSECTORS[name]
        if not isinstance(msg, layer):
            return self.malformed(frame.number, problem(
                Code.CANNOT_DISSECT, f"{name}: {len(bytes(msg))} bytes, shorter than "
                f"{layer.__name__} ({struct_size(layer)} bytes)"))
        if layer is UcmaCmdHdr:
            cmd_layer = COMMAND_LAYERS.get(msg.cmd)
            command = msg.getlayer(cmd_layer) if cmd_layer is not None else None
            response = next((msg.getlayer(c) for c in RESPONSE_LAYERS if msg.haslayer(c)), None)
            paths = services = service = None
            if isinstance(response, UcmaQueryPathResp):
                paths = [blob_record_fact(r) for r in response.path_data
                         if isinstance(r, PathRecData)]
            if isinstance(response, UcmaQueryIbServiceResp):
                fact = sa_record_fact(ServiceRecord)
                services = [fact(**layer_dict(r, fact._INIT)) for r in response.recs
                            if isinstance(r, ServiceRecord)]
            if isinstance(command, UcmaResolveIbService):
                service = _some(command.ibs, IB_SERVICE_FIELDS)
            return ucma_frame(frame.number, frame.time, frame.comment, msg.cmd,
                              len(bytes(msg.payload)), _some(command, COMMAND_FIELDS),
                              _some(response, RESPONSE_FIELDS), paths, service, services)
        entries, trailing = None, 0
        resolve = msg.getlayer(AcmResolve)
        if resolve is not None:
            entries = [acm_entry(i, _some(e, ("flags", "type", "info")),
                                 path_record_fact(e.path) if e.path is not None else None)
                       for i, e in enumerate(resolve.resolve_data)]
            trailing = len(resolve.trailing)
        perf, ep = msg.getlayer(AcmPerfData), msg.getlayer(AcmEpConfigData)
        return acm_frame(frame.number, frame.time, frame.comment, layer_dict(msg),
                         len(bytes(msg)), entries, trailing,
                         counters=perf.values() if perf is not None else None,
                         endpoint=acm_endpoint(layer_dict(ep), [a.address for a in ep.addrs])
                         if ep is not None else None)

    # -- blobs ------------------------------------------------------------------------------
    def _blob(self, frame: Frame, array: PathArray) -> Fact:
        records = [r for r in array.records if isinstance(r, PathRecData)]
        length = len(records) * RECORD_SIZE + len(array.trailing)
        raw = frame.linktype == RAW_BLOB_LINKTYPE
        bad = [i for i, r in enumerate(records) if reserved_nonzero(r.path_record)]
        return self.blob_frame(
            frame.number, frame.time, raw, length, len(array.trailing), frame.comment,
            [blob_record_fact(r) for r in records], blob_from_array(array, length), bad)

    # -- RDMA netlink -------------------------------------------------------------------------
    def _netlink(self, frame: Frame, pkt: nl.NetlinkCooked) -> Iterator[Fact]:
        if pkt.protocol != nl.NETLINK_RDMA:
            return  # other families (route, sock_diag, ...) are not path resolution
        self.stats.netlink_frames += 1
        base = {"frame": frame.number, "time": round(frame.time, 9), "encap": "netlink",
                "direction": _DIRECTIONS.get(pkt.pkttype, "unknown"), "pkttype": pkt.pkttype}
        problems = []
        if pkt.hatype != nl.ARPHRD_NETLINK:
            problems.append(problem(Code.NL_ARPHRD, pkt.hatype))
        if pkt.trailing:
            problems.append(problem(Code.NL_TRAILING, len(pkt.trailing)))
        msgs = list(pkt.messages)
        if not msgs:
            yield self.netlink_empty(base, problems)
            return
        for i, msg in enumerate(msgs):
            yield self._rdma_message(frame, base, msg, problems if i == len(msgs) - 1 else ())

    def _rdma_message(self, frame: Frame, base: dict, msg: Packet, record_problems) -> Fact:
        if not isinstance(msg, nl.RdmaNLMsgHdr):
            return self.netlink_undissectable(base)
        flags = int(msg.nlmsg_flags)
        header = {
            "nlmsg_len": msg.nlmsg_len, "nlmsg_type": msg.nlmsg_type, "nlmsg_flags": flags,
            "nlmsg_seq": msg.nlmsg_seq, "nlmsg_pid": msg.nlmsg_pid,
            "rdma_client": msg.rdma_client, "rdma_op": msg.rdma_op,
        }
        errors, structural = [], []
        if msg.truncated():
            structural.append(problem(Code.NL_LEN_PAST_END, msg.nlmsg_len, len(msg.original)))
        if msg.rdma_client != nl.RDMA_NL_LS:
            return self.netlink_message(base, header, "rdma_netlink", None, None, errors,
                                        structural, record_problems,
                                        client_name=nl.RDMA_NL_CLIENTS.get(msg.rdma_client))
        request = msg.is_request()
        ls = {"op": nl.LS_OPS.get(msg.rdma_op, f"op {msg.rdma_op}"), "op_code": msg.rdma_op,
              "seq": msg.nlmsg_seq, "flags": flags, "request": request,
              "error": bool(flags & nl.RDMA_NL_LS_F_ERR)}
        body = msg.payload
        is_response = msg.rdma_op == nl.RDMA_NL_LS_OP_RESOLVE and not request
        if (msg.rdma_op == nl.RDMA_NL_LS_OP_RESOLVE and request
                and base.get("pkttype") == nl.PACKET_KERNEL):
            # Only resolvers send RESOLVE to the kernel: this is an answer, wrongly flagged.
            errors.append(P.LS_ANSWER_AS_REQUEST)
            body = nl.LsResolveResponse(bytes(body)) if body else body
            is_response = True
        expected = nl.LsResolveResponse if is_response else nl.LS_BODIES.get((msg.rdma_op, request))
        if expected is None:
            errors.append(problem(Code.LS_UNKNOWN_OP, msg.rdma_op))
        elif body and not isinstance(body, expected):
            structural.append(problem(Code.LS_BODY_UNDISSECTABLE, expected._name, len(bytes(body))))
        if isinstance(body, nl.LsResolveRequest):
            ls.update(device_name=body.device_name.rstrip(b"\x00").decode("ascii", "replace"),
                      port_num=body.port_num, path_use=body.path_use,
                      path_use_name=nl.PATH_USE.get(body.path_use, str(body.path_use)))
            self.remember_ls_request(msg.nlmsg_seq, body.path_use, frame.number)
        elif isinstance(body, nl.LsIpResolveRequest):
            ls["ifindex"] = body.ifindex
        attributes = list(getattr(body, "attributes", []) or [])
        trailing = getattr(body, "trailing", b"") or b""
        if trailing:
            structural.append(problem(Code.LS_ATTR_TRAILING, len(trailing)))
        blob_records = kernel_blob = None
        if is_response:
            pairs = path_record_attributes(attributes)
            index = {id(a): k for k, (a, _) in enumerate(pairs)}
            attrs = [_attr_dict(i, a, index.get(id(a))) for i, a in enumerate(attributes)]
            blob_records = [blob_record_fact(r) for _, r in pairs]
            errors += reserved_errors(Code.BLOB_RESERVED,
                                      (reserved_nonzero(r.path_record) for _, r in pairs))
            path_use = self.link_ls_request(msg.nlmsg_seq, ls)
            kernel_blob = blob_from_ls_response(flags, attributes, path_use)
        else:
            attrs = [_attr_dict(i, a) for i, a in enumerate(attributes)]
        for i, attr in enumerate(attributes):
            found = _attr_problem(i, attr, request)
            if found:
                (structural if attr.truncated() else errors).append(found)
        return self.netlink_message(base, header, "ls", ls, attrs, errors, structural,
                                    record_problems, blob_records, kernel_blob)


_DIRECTIONS = {nl.PACKET_KERNEL: "to_kernel", nl.PACKET_USER: "to_user",
               nl.PACKET_OUTGOING: "unknown (nlmon outgoing)"}

# Field of the value layer that holds each LS attribute's value.
_LS_VALUE_FIELDS = {
    nl.LsTimeout: "timeout_ms", nl.LsServiceId: "service_id", nl.LsDgid: "dgid",
    nl.LsSgid: "sgid", nl.LsTclass: "tclass", nl.LsPkey: "pkey", nl.LsQosClass: "qos_class",
    nl.LsIpv4: "ipv4", nl.LsIpv6: "ipv6",
}


def _attr_dict(i: int, attr: Packet, blob_index: int | None = None) -> dict:
    d = {"index": i, "type": attr.nla_type,
         "type_name": nl.LS_NLA_TYPES.get(attr.nla_type, f"unknown {attr.nla_type}"),
         "nla_type": attr.raw_type(), "nla_len": attr.nla_len, "mandatory": bool(attr.mandatory)}
    value = attr.payload
    fname = _LS_VALUE_FIELDS.get(type(value))
    if fname is not None:
        v = field_value(value, fname)
        d["value"] = str(v) if fname == "ipv4" else v
    elif blob_index is not None:
        d["blob_record"] = blob_index
    elif value:
        d["value_hex"] = bytes(value).hex()
    return d


def _attr_problem(i: int, attr, request: bool) -> Problem | None:
    """The problem of LS attribute i (None if it has none); attr: a netlink layer's NLAttr, or
    what the tshark engine knows of one (nla_type, nla_len, mandatory, nested, net_byteorder,
    raw_type(), value_length(), truncated(), original)."""
    name = nl.LS_NLA_TYPES.get(attr.nla_type)
    label = f"attribute {i} ({name or f'type {attr.nla_type}'})"
    if attr.truncated():
        return problem(Code.ATTR_PAST_END, label, attr.nla_len, len(attr.original))
    problems = []
    if name is None or attr.nla_type == 0:
        problems.append(problem(Code.ATTR_UNKNOWN_TYPE, attr.nla_type,
                                bool(attr.mandatory and request)))
    else:
        want, got = nl.LS_NLA_VALUE_SIZES[attr.nla_type], attr.value_length()
        if got != want:
            problems.append(problem(Code.ATTR_VALUE_SIZE, got, name, want))
    if attr.nested or attr.net_byteorder:
        problems.append(problem(Code.ATTR_FLAGS, attr.raw_type()))
    return problem(Code.ATTR_BAD, label, tuple(problems)) if problems else None


def umad_unreadable(size: int) -> Problem:
    """The problem of a umad frame of `size` bytes with no whole MAD header after struct
    ib_user_mad_hdr."""
    return problem(Code.CANNOT_DISSECT, f"{UMAD_DISSECTOR}: {size} bytes, no MAD header after "
                   f"struct ib_user_mad_hdr ({UMAD_HDR_SIZE} bytes)")


def _mad_parts(mad: Packet, mad_bytes: bytes, whole: int) -> tuple:
    """(SaParts, CM message fact, CM REQ paths) of a MAD layer of `whole` bytes or more
    (None where it is not of that kind or is shorter)."""
    sa = cm = cm_req = None
    if len(mad_bytes) < whole:
        return sa, cm, cm_req
    if mad.haslayer(SAHeader):
        hdr = mad[SAHeader]
        records, reserved = (_sa_records(hdr) if hdr.record_class() is not None
                             else (None, ()))
        sa = SaParts(Rmpp(**layer_dict(mad[RMPP])),
                     sa_fact(hdr.sm_key, hdr.attribute_offset, int(hdr.component_mask),
                             mad.attribute_id),
                     records, reserved, mad_bytes, _whole_records)
        return sa, cm, cm_req
    msg = next((mad.getlayer(c) for c in cm_layers.CM_MESSAGE_CLASSES.values()
                if mad.haslayer(c)), None)
    if msg is not None:
        values = layer_dict(msg)
        values.pop("private_data", None)
        cm = CM_FACTS[type(msg)](message=msg.name.split()[-1], **values)
        if isinstance(msg, cm_layers.CMReq):
            cm_req = CmReqPaths(**layer_dict(msg, CM_REQ_FIELDS))
    return sa, cm, cm_req


def _addresses(pkt: Packet) -> dict:
    out = {}
    ip = pkt.getlayer(IP) or pkt.getlayer(IPv6)
    if ip is not None:
        out["encap"] = "rocev2"
        out["src"], out["dst"] = str(ip.src), str(ip.dst)
    elif pkt.haslayer(LRH):
        lrh = pkt[LRH]
        out["encap"] = "ib"
        out["src"], out["dst"] = f"LID {lrh.slid}", f"LID {lrh.dlid}"
        if pkt.haslayer(GRH):
            grh = pkt[GRH]
            out["src_gid"] = gid_text(ipaddress.IPv6Address(grh.sgid).packed)
            out["dst_gid"] = gid_text(ipaddress.IPv6Address(grh.dgid).packed)
    if pkt.haslayer(ExportedPDU):
        out["encap"] = "exported_pdu/" + out.get("encap", "?")
    bth, deth = pkt.getlayer(BTH), pkt.getlayer(DETH)
    if bth is not None:
        out["dst_qp"] = bth.dqpn
    if deth is not None:
        out["src_qp"] = deth.src_qp
    return out


def padding_len(pkt: Packet) -> int:
    """Bytes past the packet that the length fields of its layers leave over (an Ethernet FCS
    or trailer past the IP length, ERF record padding past wlen): Scapy hangs them as a
    Padding layer at the end of the frame, which bytes() of every layer above includes."""
    last = pkt.lastlayer()  # not getlayer(Padding): MADPadding (the MAD's own fill) is one
    return len(last.load) if type(last) is Padding else 0


def _crc_errors(data: bytes, pkt: Packet) -> tuple[list[str], bytes | None]:
    """Check ICRC (RoCEv2, native) and VCRC (native) against the frame's own bytes: the
    errors, and the ICRC field (None where the frame has none)."""
    errs = []
    bth = pkt.getlayer(BTH)
    if bth is None or bth.icrc is None:
        return errs, None
    udp = pkt.getlayer(UDP)
    if udp is not None:
        ip = udp.underlayer
        ip_bytes = data[len(data) - len(bytes(ip)):len(data) - padding_len(ip)]
        if not ip_bytes:
            return errs, None
        if crc.rocev2_icrc(ip_bytes) != ip_bytes[-4:]:
            errs.append(ICRC_MISMATCH)
        return errs, ip_bytes[-4:]
    lrh = pkt.getlayer(LRH)
    if lrh is not None:
        body = data[len(data) - len(bytes(lrh)):len(data) - padding_len(lrh) - 2]
        if crc.native_icrc(body) != body[-4:]:
            errs.append(ICRC_MISMATCH)
        if crc.vcrc(body) != lrh.vcrc:
            errs.append(VCRC_MISMATCH)
        return errs, body[-4:]
    return errs, None


def decode_file(src: "str | Input", decoder: Decoder | None = None,
                as_blob: bool = False, render: bool = False) -> Iterator[dict]:
    """Decode every frame of a capture (or the one frame of a raw blob file; every file is
    one with as_blob), streaming; src is a path or a pcapio.Input (a stream too). Raises
    pcapio.CaptureError on a bad file after yielding everything before the damage.
    Their problems are facts.Problem, what the audit reads; render=True gives them as the
    sentences of `ibpath decode --format json` (facts.public)."""
    decoder = decoder or Decoder()
    records = _records(src, decoder, as_blob)
    return map(public, records) if render else records


def _records(src, decoder: Decoder, as_blob: bool) -> Iterator[dict]:
    for frame in read_input(src, blobsniff.plausible, as_blob=as_blob):
        yield from decoder.feed(frame)
    yield from decoder.finish()
