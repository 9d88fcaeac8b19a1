"""Frame-by-frame decoding of captures into plain, JSON-ready records.

One Decoder per file: it dissects each frame with the layers, checks lengths and CRCs,
reassembles RMPP transfers, and yields one dict per frame that carries a MAD (the contract of
`ibpath decode --format json`, interfaces.md). Frames that should carry a MAD but cannot be
decoded come out as kind "malformed" with the reason; nothing is dropped silently.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from scapy.config import conf
from scapy.contrib.roce import BTH, GRH
from scapy.fields import FlagsField, IP6Field
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import CookedLinux, CookedLinuxV2, Ether
from scapy.packet import Packet, Raw

from . import crc
from .layers import cm as cm_layers
from .layers.ib import ERF, LRH, ExportedPDU
from .layers.mad import (
    ATTRIBUTES_BY_CLASS,
    MAD,
    MAD_SIZE,
    METHODS,
    MGMT_CLASSES,
    RMPP,
    RMPP_TYPE_DATA,
    status_text,
)
from .layers.roce import DETH
from .layers.sa import COMPONENT_MASK_NAMES, PathRecord, SAHeader
from .pcapio import Frame, read_frames
from .rmpp import Reassembler

conf.debug_dissector = False

LINKTYPE_LAYERS: dict[int, type[Packet]] = {
    1: Ether,
    113: CookedLinux,
    197: ERF,
    247: LRH,
    252: ExportedPDU,
    276: CookedLinuxV2,
}
_RAW_IP_LINKTYPES = {101, 228, 229}

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
        return str(ipaddress.IPv6Address(val))
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


def reserved_nonzero(pkt: Packet) -> list[str]:
    return [f.name for f in pkt.fields_desc
            if f.name.startswith("reserved") and pkt.getfieldval(f.name)]


@dataclass
class DecodeStats:
    frames: int = 0
    mad_frames: int = 0
    malformed: int = 0
    by_kind: dict = field(default_factory=dict)


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

    def __init__(self):
        self.rmpp = Reassembler()
        self.stats = DecodeStats()

    def feed(self, frame: Frame) -> Iterator[dict]:
        self.stats.frames += 1
        try:
            pkt = dissect(frame)
        except Exception as exc:  # scapy raises assorted errors on hostile bytes
            yield self._malformed(frame, f"cannot dissect: {exc}")
            return
        if pkt is None:
            return
        for rec in self._frame_records(frame, pkt):
            self.stats.by_kind[rec["kind"]] = self.stats.by_kind.get(rec["kind"], 0) + 1
            yield rec

    def finish(self) -> Iterator[dict]:
        for key, t in self.rmpp.pending():
            frames = sorted(t.frames.values())
            missing = [k for k in range(1, (t.last or max(t.segments)) + 1) if k not in t.segments]
            why = "no LAST segment" if t.last is None else f"segments {missing} missing"
            yield {"frame": frames[-1], "kind": "malformed", "frames": frames,
                   "error": f"RMPP transfer tid=0x{key[2]:016x} never completed ({why})"}
            self.stats.malformed += 1

    # ------------------------------------------------------------------------------------
    def _malformed(self, frame: Frame, reason: str) -> dict:
        self.stats.malformed += 1
        return {"frame": frame.number, "kind": "malformed", "error": reason}

    def _frame_records(self, frame: Frame, pkt: Packet) -> Iterator[dict]:
        mad = pkt.getlayer(MAD)
        deth = pkt.getlayer(DETH)
        bth = pkt.getlayer(BTH)
        if mad is None:
            if deth is not None and (deth.src_qp in (0, 1) or bth.dqpn in (0, 1)):
                yield self._malformed(frame, "GSI datagram without a complete MAD header "
                                      f"({len(bytes(deth.payload))} bytes after DETH)")
            elif bth is not None and bth.opcode == 0x64 and deth is None:
                yield self._malformed(frame, "UD SEND without a complete DETH")
            return
        self.stats.mad_frames += 1
        mad_bytes = bytes(mad)
        rec = {"frame": frame.number, "time": round(frame.time, 9),
               "kind": KIND_BY_CLASS.get(mad.mgmt_class,
                                         MGMT_CLASSES.get(mad.mgmt_class, "mad").lower())}
        rec.update(_addresses(pkt))
        errors = []
        if len(mad_bytes) != MAD_SIZE:
            errors.append(f"MAD is {len(mad_bytes)} bytes; IB MADs are {MAD_SIZE}")
        errors += _crc_errors(frame.data, pkt)
        rec["mad"] = _mad_dict(mad)
        if len(mad_bytes) < MAD_SIZE:
            rec["kind"] = "malformed"
            rec["error"] = errors[0]
            self.stats.malformed += 1
            yield rec
            return
        if mad.haslayer(SAHeader):
            yield from self._sa(frame, rec, mad, errors)
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

    def _sa(self, frame: Frame, rec: dict, mad: Packet, errors: list[str]) -> Iterator[dict]:
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
            done = self.rmpp.add(key, rmpp.segment_number, int(rmpp.rmpp_flags), bytes(mad), frame.number)
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
        if sa.record_class() is PathRecord:
            rec["path_records"] = [path_record_dict(r) for r in records]
            bad = [i for i, r in enumerate(records) if reserved_nonzero(r)]
            if bad:
                errors.append(f"reserved PathRecord bits set in record(s) {bad}")
        if errors:
            rec["errors"] = errors
        yield rec


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
            out["src_gid"] = str(ipaddress.IPv6Address(grh.sgid))
            out["dst_gid"] = str(ipaddress.IPv6Address(grh.dgid))
    if pkt.haslayer(ExportedPDU):
        out["encap"] = "exported_pdu/" + out.get("encap", "?")
    bth, deth = pkt.getlayer(BTH), pkt.getlayer(DETH)
    if bth is not None:
        out["dst_qp"] = bth.dqpn
    if deth is not None:
        out["src_qp"] = deth.src_qp
    return out


def _crc_errors(data: bytes, pkt: Packet) -> list[str]:
    """Check ICRC (RoCEv2, native) and VCRC (native) against the frame's own bytes."""
    errs = []
    bth = pkt.getlayer(BTH)
    if bth is None or bth.icrc is None:
        return errs
    udp = pkt.getlayer(UDP)
    if udp is not None:
        ip = udp.underlayer
        ip_bytes = data[len(data) - len(bytes(ip)):]
        if ip_bytes and crc.rocev2_icrc(ip_bytes) != ip_bytes[-4:]:
            errs.append("ICRC mismatch")
        return errs
    lrh = pkt.getlayer(LRH)
    if lrh is not None:
        lrh_bytes = data[len(data) - len(bytes(lrh)):]
        body = lrh_bytes[:-2]
        if crc.native_icrc(body) != body[-4:]:
            errs.append("ICRC mismatch")
        if crc.vcrc(body) != lrh.vcrc:
            errs.append("VCRC mismatch")
    return errs


def decode_file(path: str, decoder: Decoder | None = None) -> Iterator[dict]:
    """Decode every frame of a capture, streaming. Raises pcapio.CaptureError on a bad file
    after yielding everything before the damage."""
    decoder = decoder or Decoder()
    for frame in read_frames(path):
        yield from decoder.feed(frame)
    yield from decoder.finish()
