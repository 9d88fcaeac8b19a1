"""Frame-by-frame decoding of captures into plain, JSON-ready records.

One Decoder per file: it dissects each frame with the layers, checks lengths and CRCs,
reassembles RMPP transfers, and yields one dict per frame that carries a MAD, per RDMA netlink
message (link type 253) and per blob (exported PDU "ibpath.blob", or a raw blob file), the
contract of `ibpath decode --format json` (interfaces.md). Frames that should carry a MAD but
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
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from scapy.config import conf
from scapy.contrib.roce import BTH, GRH
from scapy.fields import FlagsField, IP6Field
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Ether
from scapy.packet import Packet, Padding

from . import blobsniff, crc
from .facts import Code, Problem, problem, public
from .facts import problems as P
from .kernelview import (
    blob_from_array,
    blob_from_ls_response,
    path_record_attributes,
)
from .layers import cm as cm_layers
from .layers import netlink as nl
from .layers.ib import ERF, LRH, ExportedPDU
from .layers.mad import (
    ATTRIBUTES_BY_CLASS,
    MAD,
    MAD_SIZE,
    METHODS,
    METHOD_RESP,
    MGMT_CLASSES,
    RMPP,
    RMPP_TYPE_DATA,
    status_text,
)
from .layers.pathdata import (
    RECORD_SIZE,
    PathArray,
    PathRecData,
    flag_names,
    parse_set_option_comment,
)
from .layers.roce import DETH
from .layers.sa import COMPONENT_MASK_NAMES, PathRecord, SAHeader, gid_text
from .pcapio import RAW_BLOB_LINKTYPE, Frame, Input, read_input
from .rmpp import Reassembler

conf.debug_dissector = False

LINKTYPE_LAYERS: dict[int, type[Packet]] = {
    1: Ether,
    113: CookedLinux,
    197: ERF,
    247: LRH,
    252: ExportedPDU,
    nl.LINKTYPE_NETLINK: nl.NetlinkCooked,
    276: CookedLinuxV2,
    RAW_BLOB_LINKTYPE: PathArray,
}
_RAW_IP_LINKTYPES = {101, 228, 229}
SUPPORTED_LINKTYPES = frozenset(LINKTYPE_LAYERS) | _RAW_IP_LINKTYPES

# Frames larger than these (bytes) are reported (DECODE-LIMIT) instead of dissected: Scapy
# walks netlink attribute and blob record lists at seconds per 64 KiB, and the native IB VCRC
# is computed in Python. 262144 is Wireshark's own frame limit (WTAP_MAX_PACKET_SIZE_STANDARD);
# nlmon records and rdma_set_option optvals stay far below 64 KiB.
MAX_FRAME_BYTES = 262144
MAX_LIST_FRAME_BYTES = 65536
_LIST_LINKTYPES = {252, nl.LINKTYPE_NETLINK, RAW_BLOB_LINKTYPE}


def size_limit_record(frame_no: int, size: int, list_framed: bool,
                      stats: "DecodeStats") -> dict | None:
    """The DECODE-LIMIT record of a frame too large to dissect, or None. list_framed: a netlink,
    exported-PDU or raw blob frame (attribute and record lists). Both engines use it."""
    limit = MAX_LIST_FRAME_BYTES if list_framed else MAX_FRAME_BYTES
    if size <= limit:
        return None
    stats.malformed += 1
    return {"frame": frame_no, "kind": "malformed", "limit": "frame size",
            "error": problem(Code.FRAME_TOO_LARGE, size, limit, list_framed)}

ICRC_MISMATCH, VCRC_MISMATCH = P.ICRC_MISMATCH, P.VCRC_MISMATCH

KIND_BY_CLASS = {0x03: "sa", 0x07: "cm", 0x01: "smp", 0x81: "smp", 0x04: "perf"}

PATH_RECORD_FIELDS = [
    "service_id", "dgid", "sgid", "dlid", "slid", "raw_traffic", "flow_label", "hop_limit",
    "tclass", "reversible", "numb_path", "pkey", "qos_class", "sl", "mtu_selector", "mtu",
    "rate_selector", "rate", "packet_life_time_selector", "packet_life_time", "preference",
]
CM_REQ_PATH_FIELDS = [
    "local_lid", "remote_lid", "local_gid", "remote_gid", "flow_label", "packet_rate",
    "traffic_class", "hop_limit", "sl", "subnet_local", "local_ack_timeout",
]
CM_REQ_FIELDS = (
    [f"primary_{f}" for f in CM_REQ_PATH_FIELDS]
    + [f"alternate_{f}" for f in CM_REQ_PATH_FIELDS]
    + ["service_id", "pkey", "path_packet_payload_mtu", "local_comm_id"]
)


def field_value(pkt: Packet, name: str):
    """A field's value in JSON form: GIDs as IPv6 text, flags and ints as ints, bytes as hex."""
    fld, val = pkt.get_field(name), pkt.getfieldval(name)
    if isinstance(fld, IP6Field):
        return gid_text(ipaddress.IPv6Address(val).packed)
    if isinstance(fld, FlagsField) or hasattr(val, "value"):
        return int(val)
    if isinstance(val, bytes):
        return val.hex()
    return val


def layer_dict(pkt: Packet, names: Iterable[str] | None = None, reserved: bool = False) -> dict:
    names = names if names is not None else [
        f.name for f in pkt.fields_desc
        if f.name != "records" and (reserved or not f.name.startswith("reserved"))
    ]
    return {n: field_value(pkt, n) for n in names}


def path_record_dict(rec: PathRecord) -> dict:
    return layer_dict(rec, PATH_RECORD_FIELDS)


def blob_record_dict(rec: PathRecData) -> dict:
    """A blob record as interfaces.md defines it."""
    flags = int(rec.flags)
    return {"flags": flags, "flag_names": flag_names(flags), "reserved": rec.reserved,
            "path_record": path_record_dict(rec.path_record)}


def reserved_nonzero(pkt: Packet) -> list[str]:
    return [f.name for f in pkt.fields_desc
            if f.name.startswith("reserved") and pkt.getfieldval(f.name)]


def file_end_records(rmpp: Reassembler, stats: "DecodeStats") -> Iterator[dict]:
    """The records made at the end of a file (both engines): RMPP transfers never completed,
    link types not decoded, a capture whose ICRCs are all zero."""
    yield from unfinished_transfers(rmpp, stats)
    yield from unsupported_records(stats)
    yield from crc_records(stats)


def note_rmpp_drop(rmpp: Reassembler, rec: dict, stats: "DecodeStats") -> None:
    """After Reassembler.add: mark a segment the receiving kernel drops (both engines)."""
    if rmpp.dropped:
        rec["rmpp_dropped"] = rmpp.dropped
        stats.rmpp_dropped += 1


def rmpp_control_key(rec: dict, tid: int, attribute_id: int, method: int) -> tuple:
    """The reassembly key of the DATA transfer an RMPP ACK/STOP/ABORT answers: it travels the
    other way, and its method is the data's without the R bit (mad_rmpp.c format_ack and
    nack_recv flip IB_MGMT_METHOD_RESP)."""
    return (rec.get("dst"), rec.get("src"), tid, attribute_id, method ^ METHOD_RESP)


def unfinished_transfers(rmpp: Reassembler, stats: "DecodeStats") -> Iterator[dict]:
    """One malformed record per RMPP transfer never completed (call at the end of a file)."""
    for key, t in rmpp.pending():
        frames = t.all_frames()
        stats.malformed += 1
        rec = {"frame": frames[-1], "kind": "malformed", "frames": frames,
               "error": problem(Code.RMPP_UNFINISHED, key[2], t.why_unfinished())}
        if t.limit:
            rec["limit"] = t.limit
        yield rec


@dataclass
class DecodeStats:
    frames: int = 0
    mad_frames: int = 0
    netlink_frames: int = 0
    blob_frames: int = 0
    malformed: int = 0
    by_kind: dict = field(default_factory=dict)
    rmpp_dropped: int = 0  # segments the receiving kernel drops (retransmissions, strays)
    # frames of link types no layer reads: link type -> [first frame, count]
    unsupported: dict = field(default_factory=dict)
    crc_errors: int = 0  # frames whose ICRC or VCRC does not match
    icrc_frames: int = 0  # frames with an ICRC checked ...
    icrc_zero: int = 0  # ... of which the ICRC is zero
    icrc_zero_frames: list = field(default_factory=list)  # the first few of those


def note_unsupported(stats: DecodeStats, linktype: int, frame_no: int) -> None:
    """Count a frame of a link type no layer reads (both engines)."""
    seen = stats.unsupported.get(linktype)
    if seen is None:
        stats.unsupported[linktype] = [frame_no, 1]
    else:
        seen[1] += 1


def unsupported_records(stats: DecodeStats) -> Iterator[dict]:
    """At the end of a file: one record per link type that was not decoded."""
    for linktype, (first, count) in sorted(stats.unsupported.items()):
        yield {"frame": first, "kind": "unsupported", "linktype": linktype, "count": count,
               "error": problem(Code.LINKTYPE_UNSUPPORTED, linktype, count, first)}


_ZERO_ICRC = bytes(4)
# frames listed in the one record of a capture whose ICRCs are all zero (the rest are counted)
_ZERO_ICRC_FRAMES = 20


def note_crc(stats: DecodeStats, frame_no: int, errors: list[str], icrc: bytes | None) -> None:
    """Count a frame's CRC verdict (both engines): icrc is its ICRC field (None if it has
    none). A zero ICRC that does not match is taken out of the frame's errors: whether it is
    a mismatch depends on the other frames (crc_records, at the end of the file)."""
    if icrc is None:
        return
    stats.icrc_frames += 1
    if not errors:  # the common case, on every frame of the fast path
        return
    if icrc == _ZERO_ICRC and ICRC_MISMATCH in errors:
        stats.icrc_zero += 1
        if len(stats.icrc_zero_frames) < _ZERO_ICRC_FRAMES:
            stats.icrc_zero_frames.append(frame_no)
        errors.remove(ICRC_MISMATCH)
    if ICRC_MISMATCH in errors or VCRC_MISMATCH in errors:
        stats.crc_errors += 1


def crc_records(stats: DecodeStats) -> Iterator[dict]:
    """At the end of a file: when every ICRC was zero (a capture path that zeroes or does not
    compute it), one record saying so; when only some were, they are mismatches."""
    if not stats.icrc_zero:
        return
    frames = stats.icrc_zero_frames
    if stats.icrc_zero == stats.icrc_frames:
        yield {"frame": frames[0], "kind": "crc", "frames": frames, "icrc_zero": stats.icrc_zero,
               "note": f"every ICRC of the capture is zero ({stats.icrc_zero} frames): the "
                       "capture path zeroed or did not compute it, so no ICRC was checked"}
    else:
        stats.crc_errors += stats.icrc_zero
        yield {"frame": frames[-1], "kind": "crc", "frames": frames, "icrc_zero": stats.icrc_zero,
               "error": problem(Code.ICRC_ZERO_SOME, stats.icrc_zero, stats.icrc_frames)}


def dissect(frame: Frame) -> Packet | None:
    """The frame as a Scapy packet, or None for a link type without a MAD-carrying layer."""
    if frame.linktype in _RAW_IP_LINKTYPES:
        if not frame.data:
            return None
        return (IPv6 if frame.data[0] >> 4 == 6 else IP)(frame.data)
    cls = LINKTYPE_LAYERS.get(frame.linktype)
    return cls(frame.data) if cls is not None else None


class Decoder:
    """Turns frames into decoded records; call feed() per frame and finish() at the end."""

    # LS requests remembered for their responses (path_use by nlmsg_seq); bounded so that a
    # long capture of unanswered requests cannot grow without limit.
    LS_REQUEST_MEMORY = 65536

    def __init__(self):
        self.rmpp = Reassembler()
        self.stats = DecodeStats()
        self.ls_requests: OrderedDict[int, tuple[int, int]] = OrderedDict()

    def feed(self, frame: Frame) -> Iterator[dict]:
        self.stats.frames += 1
        rec = size_limit_record(frame.number, len(frame.data), frame.linktype in _LIST_LINKTYPES,
                                self.stats)
        if rec is not None:
            yield rec
            return
        try:
            pkt = dissect(frame)
        except Exception as exc:  # scapy raises assorted errors on hostile bytes
            yield self._malformed(frame, problem(Code.CANNOT_DISSECT, str(exc)))
            return
        if pkt is None:
            if frame.linktype not in SUPPORTED_LINKTYPES:
                note_unsupported(self.stats, frame.linktype, frame.number)
            return
        for rec in self._frame_records(frame, pkt):
            self.stats.by_kind[rec["kind"]] = self.stats.by_kind.get(rec["kind"], 0) + 1
            yield rec

    def finish(self) -> Iterator[dict]:
        yield from file_end_records(self.rmpp, self.stats)

    # ------------------------------------------------------------------------------------
    def _malformed(self, frame: Frame, reason: Problem) -> dict:
        self.stats.malformed += 1
        return {"frame": frame.number, "kind": "malformed", "error": reason}

    def _frame_records(self, frame: Frame, pkt: Packet) -> Iterator[dict]:
        if isinstance(pkt, nl.NetlinkCooked):
            yield from self._netlink(frame, pkt)
            return
        array = pkt if isinstance(pkt, PathArray) else None
        if isinstance(pkt, ExportedPDU) and isinstance(pkt.payload, PathArray):
            array = pkt.payload
        elif isinstance(pkt, ExportedPDU) and not pkt.payload and pkt.dissector_name() == "ibpath.blob":
            array = PathArray(b"")  # an empty optval (EINVAL) is still a blob frame
        if array is not None:
            yield self._blob(frame, array)
            return
        mad = pkt.getlayer(MAD)
        deth = pkt.getlayer(DETH)
        bth = pkt.getlayer(BTH)
        if mad is None:
            if deth is not None and (deth.src_qp in (0, 1) or bth.dqpn in (0, 1)):
                yield self._malformed(frame, problem(Code.GSI_SHORT, len(bytes(deth.payload))))
            elif bth is not None and bth.opcode == 0x64 and deth is None:
                yield self._malformed(frame, P.UD_NO_DETH)
            return
        self.stats.mad_frames += 1
        mad_bytes = bytes(mad)
        mad_bytes = mad_bytes[:len(mad_bytes) - padding_len(mad)]
        rec = {"frame": frame.number, "time": round(frame.time, 9),
               "kind": KIND_BY_CLASS.get(mad.mgmt_class,
                                         MGMT_CLASSES.get(mad.mgmt_class, "mad").lower())}
        rec.update(_addresses(pkt))
        errors = []
        if len(mad_bytes) != MAD_SIZE:
            errors.append(problem(Code.MAD_LENGTH, len(mad_bytes)))
        crc_errs, icrc = _crc_errors(frame.data, pkt)
        errors += crc_errs
        # the zero-ICRC census counts whole MADs only (a cut frame's "ICRC" is any 4 bytes)
        note_crc(self.stats, frame.number, errors, icrc if len(mad_bytes) == MAD_SIZE else None)
        rec["mad"] = _mad_dict(mad)
        if len(mad_bytes) < MAD_SIZE:
            rec["kind"] = "malformed"
            rec["error"] = errors[0]
            self.stats.malformed += 1
            yield rec
            return
        if mad.haslayer(SAHeader):
            yield from self._sa(frame, rec, mad, mad_bytes, errors)
            return
        msg = next((mad.getlayer(c) for c in cm_layers.CM_MESSAGE_CLASSES.values()
                    if mad.haslayer(c)), None)
        if msg is not None:
            rec["cm"] = {"message": msg.name.split()[-1], **layer_dict(msg)}
            rec["cm"].pop("private_data", None)
            if isinstance(msg, cm_layers.CMReq):
                rec["cm_req"] = layer_dict(msg, CM_REQ_FIELDS)
        if errors:
            rec["errors"] = errors
        yield rec

    def _sa(self, frame: Frame, rec: dict, mad: Packet, mad_bytes: bytes,
            errors: list[str]) -> Iterator[dict]:
        rmpp, sa = mad[RMPP], mad[SAHeader]
        rec["rmpp"] = layer_dict(rmpp)
        rec["sa"] = {
            "sm_key": sa.sm_key,
            "attribute_offset": sa.attribute_offset,
            "component_mask": int(sa.component_mask),
            "components": [COMPONENT_MASK_NAMES[b] for b in range(64) if int(sa.component_mask) >> b & 1],
        }
        records = list(sa.records)
        if sa.is_segment():
            key = (rec.get("src"), rec.get("dst"), mad.transaction_id, mad.attribute_id, mad.method)
            done = self.rmpp.add(key, rmpp.segment_number, int(rmpp.rmpp_flags), mad_bytes,
                                 frame.number, frame.time)
            note_rmpp_drop(self.rmpp, rec, self.stats)
            if done is None:
                records = []
            else:
                message, transfer = done
                whole = MAD(message)
                records = list(whole[SAHeader].records) if whole.haslayer(SAHeader) else []
                rec["reassembled_from"] = [transfer.frames[k] for k in sorted(transfer.frames)]
                errors += transfer.problems
        elif rmpp.rmpp_type not in (0, RMPP_TYPE_DATA) and rmpp.is_active():
            rec["rmpp_control"] = True
            self.rmpp.control(rmpp_control_key(rec, mad.transaction_id, mad.attribute_id,
                                               mad.method), rmpp.rmpp_type, frame.number)
        if sa.record_class() is PathRecord:
            rec["path_records"] = [path_record_dict(r) for r in records]
            errors += reserved_errors(Code.PR_RESERVED, map(reserved_nonzero, records))
        if errors:
            rec["errors"] = errors
        yield rec

    # -- blobs ------------------------------------------------------------------------------
    def _blob(self, frame: Frame, array: PathArray) -> dict:
        self.stats.blob_frames += 1
        records = [r for r in array.records if isinstance(r, PathRecData)]
        length = len(records) * RECORD_SIZE + len(array.trailing)
        raw = frame.linktype == RAW_BLOB_LINKTYPE
        bad = [i for i, r in enumerate(records) if reserved_nonzero(r.path_record)]
        return blob_frame_record(
            frame.number, frame.time, raw, length, len(array.trailing), frame.comment,
            [blob_record_dict(r) for r in records], blob_from_array(array, length), bad)

    # -- RDMA netlink -------------------------------------------------------------------------
    def _netlink(self, frame: Frame, pkt: nl.NetlinkCooked) -> Iterator[dict]:
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
            self.stats.malformed += 1
            yield {**base, "kind": "malformed",
                   "error": joined(problems)}
            return
        for i, msg in enumerate(msgs):
            rec = self._rdma_message(frame, dict(base), msg)
            if i == len(msgs) - 1 and problems:
                add_record_problems(self.stats, rec, problems)
            yield rec

    def _rdma_message(self, frame: Frame, rec: dict, msg: Packet) -> dict:
        if not isinstance(msg, nl.RdmaNLMsgHdr):
            self.stats.malformed += 1
            return {**rec, "kind": "malformed", "error": P.NL_UNDISSECTABLE}
        flags = int(msg.nlmsg_flags)
        rec["netlink"] = {
            "nlmsg_len": msg.nlmsg_len, "nlmsg_type": msg.nlmsg_type, "nlmsg_flags": flags,
            "nlmsg_seq": msg.nlmsg_seq, "nlmsg_pid": msg.nlmsg_pid,
            "rdma_client": msg.rdma_client, "rdma_op": msg.rdma_op,
        }
        errors, structural = [], []
        if msg.truncated():
            structural.append(problem(Code.NL_LEN_PAST_END, msg.nlmsg_len, len(msg.original)))
        if msg.rdma_client != nl.RDMA_NL_LS:
            rec["kind"] = "rdma_netlink"
            rec["netlink"]["client_name"] = nl.RDMA_NL_CLIENTS.get(msg.rdma_client)
            return self._finish(rec, errors, structural)
        rec["kind"] = "ls"
        request = msg.is_request()
        ls = {"op": nl.LS_OPS.get(msg.rdma_op, f"op {msg.rdma_op}"), "op_code": msg.rdma_op,
              "seq": msg.nlmsg_seq, "flags": flags, "request": request,
              "error": bool(flags & nl.RDMA_NL_LS_F_ERR)}
        rec["ls"] = ls
        body = msg.payload
        is_response = msg.rdma_op == nl.RDMA_NL_LS_OP_RESOLVE and not request
        if (msg.rdma_op == nl.RDMA_NL_LS_OP_RESOLVE and request
                and rec.get("pkttype") == nl.PACKET_KERNEL):
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
            self.ls_requests[msg.nlmsg_seq] = (body.path_use, frame.number)
            if len(self.ls_requests) > self.LS_REQUEST_MEMORY:
                self.ls_requests.popitem(last=False)
        elif isinstance(body, nl.LsIpResolveRequest):
            ls["ifindex"] = body.ifindex
        attributes = list(getattr(body, "attributes", []) or [])
        trailing = getattr(body, "trailing", b"") or b""
        if trailing:
            structural.append(problem(Code.LS_ATTR_TRAILING, len(trailing)))
        if is_response:
            self._ls_response(rec, ls, msg, attributes, errors)
        else:
            ls["attributes"] = [_attr_dict(i, a) for i, a in enumerate(attributes)]
        for i, attr in enumerate(attributes):
            found = _attr_problem(i, attr, request)
            if found:
                (structural if attr.truncated() else errors).append(found)
        return self._finish(rec, errors, structural)

    def _ls_response(self, rec: dict, ls: dict, msg: Packet, attributes: list, errors: list) -> None:
        pairs = path_record_attributes(attributes)
        index = {id(a): k for k, (a, _) in enumerate(pairs)}
        ls["attributes"] = [_attr_dict(i, a, index.get(id(a))) for i, a in enumerate(attributes)]
        rec["blob_records"] = [blob_record_dict(r) for _, r in pairs]
        errors += _reserved_errors([r for _, r in pairs])
        path_use = link_ls_request(self.ls_requests, msg.nlmsg_seq, ls)
        rec["kernel_blob"] = blob_from_ls_response(int(msg.nlmsg_flags), attributes, path_use)

    def _finish(self, rec: dict, errors: list, structural: list) -> dict:
        return finish_message(self.stats, rec, errors, structural)


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


def joined(problems: list[Problem]) -> Problem:
    """The one "error" of a netlink record that holds no message: its problems together."""
    return problem(Code.JOINED, tuple(problems)) if problems else P.NL_NO_MESSAGE


def link_ls_request(requests: dict, seq: int, ls: dict) -> int | None:
    """Tie an LS response to the request of its sequence number: its frame and path_use."""
    matched = requests.get(seq)
    if matched is None:
        return None
    path_use, ls["request_frame"] = matched
    ls["request_path_use"] = path_use
    return path_use


def add_record_problems(stats: "DecodeStats", rec: dict, problems: list[str]) -> None:
    """Problems of a netlink record as a whole (cooked header, trailing bytes) go on its last
    message, which they make malformed."""
    rec.setdefault("errors", []).extend(problems)
    if not rec.get("malformed"):
        rec["malformed"] = True
        stats.malformed += 1


def finish_message(stats: "DecodeStats", rec: dict, errors: list, structural: list) -> dict:
    """Attach a netlink message's errors; structural ones (lengths past the end) make it
    malformed."""
    if structural:
        rec["malformed"] = True
        stats.malformed += 1
    if structural or errors:
        rec["errors"] = structural + errors
    return rec


def blob_frame_record(number: int, time: float, raw: bool, length: int, trailing: int,
                      comment: str | None, blob_records: list[dict], blob, reserved: list[int]) -> dict:
    """The decoded record of a blob frame (both engines build it here)."""
    rec = {"frame": number, "time": round(time, 9), "kind": "blob",
           "encap": "raw" if raw else "exported_pdu",
           "blob": {"length": length, "records": len(blob_records), "trailing_bytes": trailing}}
    result = parse_set_option_comment(comment)
    if result is not None:
        rec["blob"]["set_option_result"] = result
    rec["blob_records"] = blob_records
    rec["kernel_blob"] = blob  # what the kernel reads of it; the audit judges it (kernelview)
    errors = []
    if length % RECORD_SIZE:
        errors.append(problem(Code.BLOB_LENGTH, length, trailing))
    if not blob_records:
        errors.append(P.BLOB_EMPTY)
    if reserved:
        errors.append(problem(Code.BLOB_RESERVED, tuple(reserved)))
    if errors:
        rec["errors"] = errors
    return rec


def _reserved_errors(records: list) -> list[Problem]:
    return reserved_errors(Code.BLOB_RESERVED, (reserved_nonzero(r.path_record) for r in records))


def reserved_errors(code: Code, reserved: Iterable) -> list[Problem]:
    """The problem (PR_RESERVED: an SA MAD's PathRecords, BLOB_RESERVED: a blob's or LS
    answer's records) of records with reserved bits set; reserved: per record, in order,
    whether it has (every engine's decoders use it)."""
    bad = tuple(i for i, r in enumerate(reserved) if r)
    return [problem(code, bad)] if bad else []


def _mad_dict(mad: Packet) -> dict:
    d = layer_dict(mad)
    d["method_name"] = METHODS.get(mad.method, f"0x{mad.method:02x}")
    d["attribute_name"] = ATTRIBUTES_BY_CLASS.get(mad.mgmt_class, {}).get(mad.attribute_id)
    d["status_text"] = status_text(mad.status, mad.mgmt_class)
    return d


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
