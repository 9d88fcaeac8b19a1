"""ACM messages between librdmacm and ibacm (the unix socket /run/ibacm-unix.sock or
/run/ibacm.sock, or TCP port 6125 in ibacm's server mode).

A message is `struct acm_msg`: the 16-byte `struct acm_hdr`, then a body by opcode; a
response sets ACM_OP_ACK (0x80) in opcode.

- RESOLVE (request and response): up to 8 x 72-byte `struct acm_ep_addr_data` entries. acm.h:
  "Message fields in this case are not byte swapped, but note that the acm_ep_info data is in
  network order": the header's length and the entries' flags and type are host order
  (little-endian on x86_64, the machine the captures were recorded on); info is an address, a
  name or a PathRecord in MAD format (struct ibv_path_record, big-endian). The response's
  path entries become rdma_getaddrinfo's ai_route, the path array librdmacm hands to
  rdma_set_option (librdmacm/acm.c ucma_ib_save_resp).
- PERF_QUERY and EP_QUERY: acm.h "Performance messages are sent/received in network byte
  order", "Endpoint query messages are sent/received in network byte order": the header's
  length is big-endian (libacm ib_acm_query_perf, ib_acm_enum_ep: htobe16; ibacm
  acm_msg_length reads it with be16toh for every opcode but RESOLVE). A PERF_QUERY request
  is the header alone, or with the source address of one endpoint as an entry (libacm
  ib_acm_query_perf_ep_addr: flags and type as RESOLVE's); its answer is hdr.src_out 64-bit
  counters (AcmPerfData). An EP_QUERY request is the header alone (src_out: the endpoint's
  index from 1, src_index: its port); its answer is `struct acm_ep_config_data`
  (AcmEpConfigData).

Capture form: an "ibpath.acm" exported PDU per message, written by ``ibpath record``.

Sources: rdma-core librdmacm/acm.h (struct acm_hdr, union acm_ep_info, struct
acm_ep_addr_data, struct acm_msg, struct acm_perf_msg, struct acm_ep_config_data, ACM_OP_*,
ACM_STATUS_*, ACM_EP_INFO_*, ACM_EP_FLAG_*, ACM_FLAGS_*, ACM_CNTR_*), librdmacm/acm.c
(ucma_ib_resolve, ucma_ib_save_resp), ibacm/src/acm.c (acm_msg_length, acm_svr_perf_query,
acm_svr_ep_query), ibacm/src/libacm.c (ib_acm_query_perf, ib_acm_query_perf_ep_addr,
ib_acm_enum_ep, ib_acm_cntr_name).
"""

from __future__ import annotations

import ipaddress

from scapy.fields import (
    ByteEnumField,
    ByteField,
    ConditionalField,
    FieldLenField,
    FlagsField,
    LEShortEnumField,
    LEShortField,
    LongField,
    MultipleTypeField,
    PacketField,
    PacketListField,
    ShortField,
    StrField,
    StrFixedLenField,
    XLELongField,
    XLEShortField,
    XLongField,
    XShortField,
    XStrFixedLenField,
)
from scapy.packet import Packet, bind_layers

from ..model.expr import And, Const, F, Min, Remaining, Under, evaluate_on
from ..model.hints import (
    ByteOrderHint,
    LengthHint,
    ListHint,
    NextLayer,
    WhenHint,
    next_layer_by_hints,
)
from .ib import EXPORTED_PDU_DISSECTORS
from .sa import PathRecord

ACM_DISSECTOR = "ibpath.acm"

ACM_VERSION = 1
ACM_MSG_HDR_LENGTH = 16
ACM_LENGTH_OFFSET = 6  # acm_hdr.length: after version, opcode, status and data[3]
ACM_MSG_EP_LENGTH = 72
ACM_MAX_ADDRESS = 64
ACM_MSG_DATA_LENGTH = ACM_MSG_EP_LENGTH * 8
ACM_MAX_PROV_NAME = 64
ACM_OP_MASK = 0x0F
ACM_OP_ACK = 0x80
ACM_OP_RESOLVE = 0x01
ACM_OP_PERF_QUERY = 0x02
ACM_OP_EP_QUERY = 0x03

_OPS = {ACM_OP_RESOLVE: "RESOLVE", ACM_OP_PERF_QUERY: "PERF_QUERY", ACM_OP_EP_QUERY: "EP_QUERY"}
ACM_OPCODES = {**_OPS, **{op | ACM_OP_ACK: f"{name}|ACK" for op, name in _OPS.items()}}

ACM_STATUS_SUCCESS = 0
ACM_STATUS_EINVAL = 2
ACM_STATUS_ENODATA = 3
ACM_STATUS_ETIMEDOUT = 6
ACM_STATUS_ESRCADDR = 7
ACM_STATUS_EDESTADDR = 9
ACM_STATUS = {
    ACM_STATUS_SUCCESS: "SUCCESS", 1: "ENOMEM", ACM_STATUS_EINVAL: "EINVAL",
    ACM_STATUS_ENODATA: "ENODATA", 5: "ENOTCONN", ACM_STATUS_ETIMEDOUT: "ETIMEDOUT",
    ACM_STATUS_ESRCADDR: "ESRCADDR", 8: "ESRCTYPE", ACM_STATUS_EDESTADDR: "EDESTADDR", 10: "EDESTTYPE",
}

# acm.h enum ACM_CNTR_*, in order, by the names libacm's ib_acm_cntr_name gives them
ACM_COUNTERS = ("Error Count", "Resolve Count", "No Data", "Addr Query Count",
                "Addr Cache Count", "Route Query Count", "Route Cache Count")
ACM_CNTR_ERROR, ACM_CNTR_RESOLVE, ACM_CNTR_NODATA = 0, 1, 2
ACM_MAX_COUNTER = len(ACM_COUNTERS)
ACM_COUNTER_SIZE = 8  # uint64_t, network order

# Every message but RESOLVE is in network order, its length included (acm.h; ibacm
# acm_msg_length). ibacm tests `opcode == ACM_OP_RESOLVE` on the requests it reads; the
# answers keep the request's order (librdmacm reads RESOLVE|ACK's length in host order,
# libacm PERF_QUERY|ACK's and EP_QUERY|ACK's with be16toh), hence the mask.
NETWORK_ORDER = (F("opcode") & ACM_OP_MASK) != ACM_OP_RESOLVE

ACM_EP_INFO_NAME = 0x0001
ACM_EP_INFO_ADDRESS_IP = 0x0002
ACM_EP_INFO_ADDRESS_IP6 = 0x0003
ACM_EP_INFO_PATH = 0x0010
ACM_EP_INFO_TYPES = {ACM_EP_INFO_NAME: "NAME", ACM_EP_INFO_ADDRESS_IP: "ADDRESS_IP",
                     ACM_EP_INFO_ADDRESS_IP6: "ADDRESS_IP6", ACM_EP_INFO_PATH: "PATH"}

# acm_ep_addr_data.flags: ACM_EP_FLAG_SOURCE (1<<0), ACM_EP_FLAG_DEST (1<<1),
# ACM_FLAGS_NODELAY (1<<30), ACM_FLAGS_QUERY_SA (1<<31).
ACM_EP_FLAG_SOURCE, ACM_EP_FLAG_DEST = 1 << 0, 1 << 1
_EP_FLAG_NAMES = ["SOURCE", "DEST"] + [f"bit{n}" for n in range(2, 30)] + ["NODELAY", "QUERY_SA"]


class AcmHdr(Packet):
    """struct acm_hdr (acm.h), 16 bytes; data[] is src_out, src_index, dst_index; length
    counts the whole message, this header included: host order for RESOLVE, network order
    for every other opcode (NETWORK_ORDER). tid is returned as sent, and no ACM program
    swaps it: it is read in host order."""

    name = "AcmHdr"
    lua_layer = "acm"
    fields_desc = [
        ByteField("version", ACM_VERSION),
        ByteEnumField("opcode", ACM_OP_RESOLVE, ACM_OPCODES),
        ByteEnumField("status", 0, ACM_STATUS),
        ByteField("src_out", 0),
        ByteField("src_index", 0),
        ByteField("dst_index", 0),
        MultipleTypeField([(ShortField("length", None),
                            lambda pkt: evaluate_on(NETWORK_ORDER, pkt))],
                          LEShortField("length", None)),
        XLELongField("tid", 0),
    ]
    field_hints = {"length": ByteOrderHint(NETWORK_ORDER)}

    length_hint = F("length")  # the plugin ends the message where Scapy does

    def post_build(self, p, pay):
        if self.length is None:
            at = ACM_LENGTH_OFFSET
            p = p[:at] + self.get_field("length").addfield(self, b"", len(p) + len(pay)) \
                + p[at + 2:]
        return p + pay

    def guess_payload_class(self, payload):
        return next_layer_by_hints(self, super().guess_payload_class(payload))

    def network_order(self) -> bool:
        """True when the message is in network order (every opcode but RESOLVE)."""
        return bool(evaluate_on(NETWORK_ORDER, self))

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
    """struct acm_resolve_msg's data[] (acm.h): the entries of a RESOLVE request or response,
    or of a PERF_QUERY for one endpoint (its source address, msg.resolve_data[0] in libacm's
    ib_acm_query_perf_ep_addr); bytes past the last whole entry are kept in trailing."""

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


class AcmCounter(Packet):
    """One counter of a PERF_QUERY answer: a uint64_t in network order."""

    name = "AcmCounter"
    lua_layer = "acm_counter"
    fields_desc = [LongField("value", 0)]

    def extract_padding(self, s):
        return b"", s


# hdr.src_out counters, as many as the message holds
_COUNTERS = Min(Under("AcmHdr").src_out, Remaining() // ACM_COUNTER_SIZE)


def _next_counter(pkt, lst, cur, remain):
    left = len(remain) + ACM_COUNTER_SIZE * len(lst)  # Remaining() where the list starts
    return AcmCounter if len(lst) < evaluate_on(_COUNTERS, pkt, left) else None


class AcmPerfData(Packet):
    """struct acm_perf_msg's data[] (acm.h), a PERF_QUERY answer's body: hdr.src_out 64-bit
    counters in network order, in ACM_CNTR_* order (ibacm acm_svr_perf_query: the service's
    own, or an endpoint's from its provider; libacm ib_acm_query_perf reads src_out of
    them); bytes past them are kept in trailing."""

    name = "AcmPerfData"
    lua_layer = "acm_perf"
    fields_desc = [
        PacketListField("counters", [], AcmCounter, next_cls_cb=_next_counter),
        StrField("trailing", b""),
    ]
    field_hints = {
        "counters": ListHint(count=_COUNTERS, stride=Const(ACM_COUNTER_SIZE), selector=Const(0),
                             classes={0: AcmCounter}),
        "trailing": LengthHint(Remaining()),
    }

    def values(self) -> list[int]:
        """The counters, in order."""
        return [c.value for c in self.counters]

    def mysummary(self):
        names = ACM_COUNTERS + tuple(f"counter {i}" for i in range(ACM_MAX_COUNTER, 256))
        return ", ".join(f"{n} {v}" for n, v in zip(names, self.values()))


class AcmEpAddress(Packet):
    """One of an endpoint's addresses in an EP_QUERY answer: union acm_ep_info as ibacm fills
    ep_data.addrs[], the address as text (acm_svr_ep_query copies the address's string_buf:
    an IP address as inet_ntop writes it, or a name from ibacm_addr.cfg), NUL-padded."""

    name = "AcmEpAddress"
    lua_layer = "acm_ep_address"
    # the union's `name` member (a field named "name" would hide Packet.name)
    fields_desc = [StrFixedLenField("address", b"", ACM_MAX_ADDRESS)]

    def extract_padding(self, s):
        return b"", s

    def text(self) -> str:
        return self.address.rstrip(b"\0").decode("ascii", "replace")


_ADDRESSES = Min(F("addr_cnt"), Remaining() // ACM_MAX_ADDRESS)


def _next_address(pkt, lst, cur, remain):
    left = len(remain) + ACM_MAX_ADDRESS * len(lst)
    return AcmEpAddress if len(lst) < evaluate_on(_ADDRESSES, pkt, left) else None


class AcmEpConfigData(Packet):
    """struct acm_ep_config_data (acm.h), an EP_QUERY answer's body, network order: the
    endpoint's device GUID (ibv_get_device_guid, already big-endian), its port and the
    device's port count, its P_Key, its provider's name and addr_cnt addresses (ibacm
    acm_svr_ep_query; libacm ib_acm_enum_ep swaps dev_guid, pkey and addr_cnt); bytes past
    them are kept in trailing."""

    name = "AcmEpConfigData"
    lua_layer = "acm_ep_config"
    fields_desc = [
        XLongField("dev_guid", 0),
        ByteField("port_num", 1),
        ByteField("phys_port_cnt", 1),
        XShortField("reserved", 0),  # rsvd[2]
        XShortField("pkey", 0xFFFF),
        FieldLenField("addr_cnt", None, count_of="addrs", fmt="!H"),
        StrFixedLenField("prov_name", b"", ACM_MAX_PROV_NAME),
        PacketListField("addrs", [], AcmEpAddress, next_cls_cb=_next_address),
        StrField("trailing", b""),
    ]
    field_hints = {
        "addrs": ListHint(count=_ADDRESSES, stride=Const(ACM_MAX_ADDRESS), selector=Const(0),
                          classes={0: AcmEpAddress}),
        "trailing": LengthHint(Remaining()),
    }

    def provider(self) -> str:
        return self.prov_name.rstrip(b"\0").decode("ascii", "replace")

    def addresses(self) -> list[str]:
        return [a.text() for a in self.addrs]

    def mysummary(self):
        return (f"guid 0x{self.dev_guid:016x} port {self.port_num}/{self.phys_port_cnt} "
                f"pkey 0x{self.pkey:04x} {self.provider()}: {', '.join(self.addresses())}")


EXPORTED_PDU_DISSECTORS[ACM_DISSECTOR] = AcmHdr

bind_layers(AcmHdr, AcmResolve, opcode=ACM_OP_RESOLVE)
bind_layers(AcmHdr, AcmResolve, opcode=ACM_OP_RESOLVE | ACM_OP_ACK)
bind_layers(AcmHdr, AcmResolve, opcode=ACM_OP_PERF_QUERY)
bind_layers(AcmHdr, AcmPerfData, opcode=ACM_OP_PERF_QUERY | ACM_OP_ACK)
# An EP_QUERY answer has a body only when its length says so: an error answer is the header
# alone (acm_svr_ep_query), which the plugin must not call truncated (bind_layers would).
AcmHdr.payload_hints = [NextLayer(And(F("opcode") == ACM_OP_EP_QUERY | ACM_OP_ACK,
                                      F("length") > ACM_MSG_HDR_LENGTH), AcmEpConfigData)]
