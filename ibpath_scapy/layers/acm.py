"""ACM messages between librdmacm and ibacm (the unix socket /run/ibacm-unix.sock or
/run/ibacm.sock, or TCP port 6125 in ibacm's server mode).

A message is `struct acm_msg`: the 16-byte `struct acm_hdr`, then (for RESOLVE, request and
response) up to 8 x 72-byte `struct acm_ep_addr_data` entries. acm.h: "Message fields in this
case are not byte swapped, but note that the acm_ep_info data is in network order": the
header and the entries' flags and type are host order (little-endian on x86_64, the machine
the capture was recorded on); info is an address, a name or a PathRecord in MAD format
(struct ibv_path_record, big-endian). PERF_QUERY and EP_QUERY bodies are in network order
(acm.h); they are kept as bytes. A response sets ACM_OP_ACK (0x80) in opcode. The response's
path entries become rdma_getaddrinfo's ai_route, the path array librdmacm hands to
rdma_set_option (librdmacm/acm.c ucma_ib_save_resp).

Capture form: an "ibpath.acm" exported PDU per message, written by ``ibpath record``.

Sources: rdma-core librdmacm/acm.h (struct acm_hdr, union acm_ep_info, struct
acm_ep_addr_data, struct acm_msg, ACM_OP_*, ACM_STATUS_*, ACM_EP_INFO_*, ACM_EP_FLAG_*,
ACM_FLAGS_*), librdmacm/acm.c (ucma_ib_resolve, ucma_ib_save_resp).
"""

from __future__ import annotations

import ipaddress
import struct

from scapy.fields import (
    ByteEnumField,
    ByteField,
    ConditionalField,
    FlagsField,
    LEShortEnumField,
    LEShortField,
    PacketField,
    PacketListField,
    StrField,
    XLELongField,
    XLEShortField,
    XStrFixedLenField,
)
from scapy.packet import Packet, bind_layers

from ..expr import Const, F, Remaining, evaluate_on
from ..hints import LengthHint, ListHint, WhenHint
from .ib import EXPORTED_PDU_DISSECTORS
from .sa import PathRecord

ACM_DISSECTOR = "ibpath.acm"

ACM_VERSION = 1
ACM_MSG_HDR_LENGTH = 16
ACM_MSG_EP_LENGTH = 72
ACM_MAX_ADDRESS = 64
ACM_MSG_DATA_LENGTH = ACM_MSG_EP_LENGTH * 8
ACM_OP_MASK = 0x0F
ACM_OP_ACK = 0x80
ACM_OP_RESOLVE = 0x01

_OPS = {0x01: "RESOLVE", 0x02: "PERF_QUERY", 0x03: "EP_QUERY"}
ACM_OPCODES = {**_OPS, **{op | ACM_OP_ACK: f"{name}|ACK" for op, name in _OPS.items()}}

ACM_STATUS = {
    0: "SUCCESS", 1: "ENOMEM", 2: "EINVAL", 3: "ENODATA", 5: "ENOTCONN", 6: "ETIMEDOUT",
    7: "ESRCADDR", 8: "ESRCTYPE", 9: "EDESTADDR", 10: "EDESTTYPE",
}

ACM_EP_INFO_NAME = 0x0001
ACM_EP_INFO_ADDRESS_IP = 0x0002
ACM_EP_INFO_ADDRESS_IP6 = 0x0003
ACM_EP_INFO_PATH = 0x0010
ACM_EP_INFO_TYPES = {ACM_EP_INFO_NAME: "NAME", ACM_EP_INFO_ADDRESS_IP: "ADDRESS_IP",
                     ACM_EP_INFO_ADDRESS_IP6: "ADDRESS_IP6", ACM_EP_INFO_PATH: "PATH"}

# acm_ep_addr_data.flags: ACM_EP_FLAG_SOURCE (1<<0), ACM_EP_FLAG_DEST (1<<1),
# ACM_FLAGS_NODELAY (1<<30), ACM_FLAGS_QUERY_SA (1<<31).
_EP_FLAG_NAMES = ["SOURCE", "DEST"] + [f"bit{n}" for n in range(2, 30)] + ["NODELAY", "QUERY_SA"]


class AcmHdr(Packet):
    """struct acm_hdr (acm.h), 16 bytes; data[] is src_out, src_index, dst_index; length
    counts the whole message, this header included."""

    name = "AcmHdr"
    lua_layer = "acm"
    fields_desc = [
        ByteField("version", ACM_VERSION),
        ByteEnumField("opcode", ACM_OP_RESOLVE, ACM_OPCODES),
        ByteEnumField("status", 0, ACM_STATUS),
        ByteField("src_out", 0),
        ByteField("src_index", 0),
        ByteField("dst_index", 0),
        LEShortField("length", None),
        XLELongField("tid", 0),
    ]

    length_hint = F("length")  # the plugin ends the message where Scapy does

    def post_build(self, p, pay):
        if self.length is None:
            p = p[:6] + struct.pack("<H", len(p) + len(pay)) + p[8:]
        return p + pay

    def extract_padding(self, s):
        # bytes past `length` (a reader's buffer) are not part of the message
        if self.length is None:
            return s, b""
        body = max(evaluate_on(self.length_hint, self) - ACM_MSG_HDR_LENGTH, 0)
        return s[:body], s[body:]

    def is_response(self) -> bool:
        return bool(self.opcode & ACM_OP_ACK)

    def mysummary(self):
        return self.sprintf("ACM %AcmHdr.opcode% status %AcmHdr.status% tid %AcmHdr.tid%")


def info_text(info_type: int, info: bytes) -> str:
    """An entry's info as text by its type: an IPv4 or IPv6 address, or a name."""
    if info_type == ACM_EP_INFO_ADDRESS_IP:
        return str(ipaddress.IPv4Address(info[:4]))
    if info_type == ACM_EP_INFO_ADDRESS_IP6:
        return str(ipaddress.IPv6Address(info[:16]))
    return info.rstrip(b"\0").decode("ascii", "replace")


_IS_PATH = WhenHint(F("type") == ACM_EP_INFO_PATH)
_IS_ADDRESS = WhenHint(F("type") != ACM_EP_INFO_PATH)


class AcmEpAddrData(Packet):
    """struct acm_ep_addr_data (acm.h), 72 bytes: flags and type in host order, then the
    64-byte union acm_ep_info, network order: a PathRecord (path) for ACM_EP_INFO_PATH, else
    an address or a name (info)."""

    name = "AcmEpAddrData"
    lua_layer = "acm_ep_addr_data"
    fields_desc = [
        FlagsField("flags", 0, -32, _EP_FLAG_NAMES),
        LEShortEnumField("type", ACM_EP_INFO_PATH, ACM_EP_INFO_TYPES),
        XLEShortField("reserved", 0),
        # no default PathRecord: an address entry holds no path, not an empty one
        ConditionalField(PacketField("path", None, PathRecord),
                         lambda pkt: evaluate_on(_IS_PATH.condition, pkt)),
        ConditionalField(XStrFixedLenField("info", b"\0" * ACM_MAX_ADDRESS, ACM_MAX_ADDRESS),
                         lambda pkt: evaluate_on(_IS_ADDRESS.condition, pkt)),
    ]
    field_hints = {"path": _IS_PATH, "info": _IS_ADDRESS}

    def extract_padding(self, s):
        return b"", s

    def address_text(self) -> str:
        """info as text: an IPv4 or IPv6 address, or a name."""
        return info_text(self.type, self.info)

    def mysummary(self):
        what = self.path.mysummary() if self.type == ACM_EP_INFO_PATH else self.address_text()
        return self.sprintf("%AcmEpAddrData.type% %AcmEpAddrData.flags% ") + what


def _next_entry(pkt, lst, cur, remain):
    return AcmEpAddrData if len(remain) >= ACM_MSG_EP_LENGTH else None


class AcmResolve(Packet):
    """struct acm_resolve_msg's data[] (acm.h): the entries of a RESOLVE request or response;
    bytes past the last whole entry are kept in trailing."""

    name = "AcmResolve"
    lua_layer = "acm_resolve"
    fields_desc = [
        PacketListField("resolve_data", [], AcmEpAddrData, next_cls_cb=_next_entry,
                        max_count=ACM_MSG_DATA_LENGTH // ACM_MSG_EP_LENGTH),
        StrField("trailing", b""),
    ]
    field_hints = {
        "resolve_data": ListHint(count=Remaining() // ACM_MSG_EP_LENGTH,
                                 stride=Const(ACM_MSG_EP_LENGTH), selector=Const(0),
                                 classes={0: AcmEpAddrData}),
        "trailing": LengthHint(Remaining()),
    }

    def path_records(self) -> list[PathRecord]:
        """The PathRecords of the ACM_EP_INFO_PATH entries, in order."""
        return [e.path for e in self.resolve_data if e.type == ACM_EP_INFO_PATH]

    def mysummary(self):
        return f"{len(self.resolve_data)} entr(ies), {len(self.path_records())} path(s)"


EXPORTED_PDU_DISSECTORS[ACM_DISSECTOR] = AcmHdr

bind_layers(AcmHdr, AcmResolve, opcode=ACM_OP_RESOLVE)
bind_layers(AcmHdr, AcmResolve, opcode=ACM_OP_RESOLVE | ACM_OP_ACK)
