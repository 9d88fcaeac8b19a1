"""The rdma_cm character device (/dev/infiniband/rdma_cm): ucma commands as librdmacm writes
them, and what the kernel writes back into the caller's response buffer.

Every write() to the device is one command: `struct rdma_ucm_cmd_hdr` (cmd, in, out), then
`in` bytes of the command's struct. Commands that answer (CREATE_ID, QUERY, GET_EVENT, ...)
carry a user pointer `response` to `out` bytes the kernel fills before write() returns.

Capture form ("ibpath.ucma" exported PDU, written by ``ibpath record``): the bytes the
program wrote, followed by the response bytes the kernel wrote back (when the command has
one and the call succeeded), so that UcmaCmdHdr / <command> / <response> dissects one call.
The command structs have their current uapi sizes; the response follows the command's
struct. Every field is in host byte order (little-endian on x86_64, the machine the capture
was recorded on) except the sockaddr contents and the PathRecords, which are big-endian.

Sources: Linux include/uapi/rdma/rdma_user_cm.h (struct rdma_ucm_cmd_hdr, rdma_ucm_create_id,
rdma_ucm_resolve_ip, rdma_ucm_resolve_addr, rdma_ucm_resolve_route, rdma_ucm_query,
rdma_ucm_query_path_resp, rdma_ucm_conn_param, rdma_ucm_ud_param, rdma_ucm_connect,
rdma_ucm_get_event, rdma_ucm_event_resp, rdma_ucm_set_option, RDMA_USER_CM_CMD_*,
RDMA_OPTION_*; Linux 6.17: rdma_ucm_resolve_ib_service, rdma_ucm_ib_service,
rdma_ucm_query_ib_service_resp, with the reserved words of 6.18's ABI fix),
include/uapi/rdma/ib_user_sa.h (struct ib_user_service_rec), include/uapi/rdma/ib_user_verbs.h (struct ib_uverbs_ah_attr),
include/rdma/rdma_cm.h (enum rdma_cm_event_type), drivers/infiniband/core/ucma.c
(ucma_write, ucma_query_path: the kernel copies back 8 + num_paths * 72 bytes), rdma-core
librdmacm/cma.c (CMA_INIT_CMD_RESP, rdma_set_option: write() returning the command's size
is success).
"""

from __future__ import annotations

import ipaddress
import struct

from scapy.fields import (
    ByteField,
    FlagsField,
    LEIntEnumField,
    LEIntField,
    LEShortEnumField,
    LEShortField,
    PacketField,
    PacketListField,
    XByteField,
    XLEIntField,
    XLELongField,
    XStrFixedLenField,
)
from scapy.packet import Packet, bind_layers

from .ib import EXPORTED_PDU_DISSECTORS
from ..model.expr import Const, Remaining
from ..model.hints import ListHint
from .pathdata import RECORD_SIZE, PathRecData
from .sa import SERVICE_RECORD_SIZE, SERVICE_NAME_SIZE, GIDField, NameField, ServiceRecord

UCMA_DISSECTOR = "ibpath.ucma"

# enum { RDMA_USER_CM_CMD_* } (rdma_user_cm.h), in declaration order.
UCMA_COMMANDS = {
    0: "CREATE_ID", 1: "DESTROY_ID", 2: "BIND_IP", 3: "RESOLVE_IP", 4: "RESOLVE_ROUTE",
    5: "QUERY_ROUTE", 6: "CONNECT", 7: "LISTEN", 8: "ACCEPT", 9: "REJECT", 10: "DISCONNECT",
    11: "INIT_QP_ATTR", 12: "GET_EVENT", 13: "GET_OPTION", 14: "SET_OPTION", 15: "NOTIFY",
    16: "JOIN_IP_MCAST", 17: "LEAVE_MCAST", 18: "MIGRATE_ID", 19: "QUERY", 20: "BIND",
    21: "RESOLVE_ADDR", 22: "JOIN_MCAST",
    # Linux 6.17 (810f874eda8e, the ucma side of IB service resolution), then 6.18
    23: "RESOLVE_IB_SERVICE", 24: "WRITE_CM_EVENT",
}
CMD = {name: num for num, name in UCMA_COMMANDS.items()}

# enum rdma_cm_event_type (include/rdma/rdma_cm.h; rdma-core librdmacm/rdma_cma.h).
CM_EVENTS = {
    0: "ADDR_RESOLVED", 1: "ADDR_ERROR", 2: "ROUTE_RESOLVED", 3: "ROUTE_ERROR",
    4: "CONNECT_REQUEST", 5: "CONNECT_RESPONSE", 6: "CONNECT_ERROR", 7: "UNREACHABLE",
    8: "REJECTED", 9: "ESTABLISHED", 10: "DISCONNECTED", 11: "DEVICE_REMOVAL",
    12: "MULTICAST_JOIN", 13: "MULTICAST_ERROR", 14: "ADDR_CHANGE", 15: "TIMEWAIT_EXIT",
    # Linux 6.17: rdma_resolve_ib_service's outcome (RDMA_USER_CM_CMD_RESOLVE_IB_SERVICE)
    16: "ADDRINFO_RESOLVED", 17: "ADDRINFO_ERROR",
}

# enum rdma_ucm_port_space (rdma_user_cm.h).
PORT_SPACES = {0x0002: "IPOIB", 0x013F: "IB", 0x0106: "TCP", 0x0111: "UDP"}

# RDMA_USER_CM_QUERY_* (rdma_user_cm.h).
QUERY_OPTIONS = {0: "ADDR", 1: "PATH", 2: "GID", 3: "IB_SERVICE"}  # IB_SERVICE: Linux 6.17
RDMA_USER_CM_QUERY_PATH = 1
RDMA_USER_CM_QUERY_IB_SERVICE = 3

# struct rdma_ucm_ib_service flags (rdma_user_cm.h RDMA_USER_CM_IB_SERVICE_FLAG_*): which of
# service_id and service_name rdma_resolve_ib_service asks the SA for
IB_SERVICE_FLAGS = ["ID", "NAME"]  # FLAG_ID 1, FLAG_NAME 2
IB_SERVICE_FLAG_ID, IB_SERVICE_FLAG_NAME = 1, 2
RDMA_USER_CM_IB_SERVICE_NAME_SIZE = SERVICE_NAME_SIZE  # the ServiceRecord's ServiceName
QUERY_IB_SERVICE_RESP_HDR_SIZE = 8  # struct rdma_ucm_query_ib_service_resp without recs[]

# Option levels and names (rdma_user_cm.h).
OPTION_LEVELS = {0: "ID", 1: "IB"}
RDMA_OPTION_IB = 1
RDMA_OPTION_IB_PATH = 1
# optname is read against its level: ID options, then IB options.
OPTION_NAMES = {0: {0: "TOS", 1: "REUSEADDR", 2: "AFONLY", 3: "ACK_TIMEOUT"}, 1: {1: "PATH"}}

RDMA_MAX_PRIVATE_DATA = 256
SOCKADDR_IN6_SIZE = 28  # struct sockaddr_in6
SOCKADDR_STORAGE_SIZE = 128  # struct __kernel_sockaddr_storage
QUERY_PATH_RESP_HDR_SIZE = 8  # struct rdma_ucm_query_path_resp without path_data[]

AF_INET, AF_INET6, AF_IB = 2, 10, 27  # linux/socket.h
ADDRESS_FAMILIES = {0: "AF_UNSPEC", AF_INET: "AF_INET", AF_INET6: "AF_INET6", AF_IB: "AF_IB"}


def sockaddr_text(raw: bytes) -> str:
    """A sockaddr as text: 192.0.2.1:7471, [fe80::1]:7471, AF_IB <gid> sid 0x...; the family is
    host order, the port and addresses network order (linux/in.h, in6.h, rdma/ib.h sockaddr_ib)."""
    if len(raw) < 2:
        return raw.hex()
    family, = struct.unpack_from("<H", raw)
    if family == AF_INET and len(raw) >= 8:
        port, = struct.unpack_from("!H", raw, 2)
        return f"{ipaddress.IPv4Address(raw[4:8])}:{port}"
    if family == AF_INET6 and len(raw) >= 24:
        port, = struct.unpack_from("!H", raw, 2)
        return f"[{ipaddress.IPv6Address(raw[8:24])}]:{port}"
    if family == AF_IB and len(raw) >= 40:
        # struct sockaddr_ib: family, pkey (be16), flowinfo (be32), gid[16], sid (be64), ...
        pkey, = struct.unpack_from("!H", raw, 2)
        sid, = struct.unpack_from("!Q", raw, 24)
        return f"AF_IB {ipaddress.IPv6Address(raw[8:24])} pkey 0x{pkey:04x} sid 0x{sid:016x}"
    return ADDRESS_FAMILIES.get(family, f"family {family}")


class SockAddrField(XStrFixedLenField):
    """A fixed-size sockaddr buffer, shown as its address (sockaddr_text)."""

    def i2repr(self, pkt, x):
        return sockaddr_text(bytes(x or b""))


class UcmaCmdHdr(Packet):
    """struct rdma_ucm_cmd_hdr (rdma_user_cm.h): the command, then `in` bytes of its struct
    after this header and the size `out` of the response buffer (fields in, out)."""

    name = "UcmaCmdHdr"
    lua_layer = "ucma"
    fields_desc = [
        LEIntEnumField("cmd", 0, UCMA_COMMANDS),
        LEShortField("in_len", None),
        LEShortField("out_len", 0),
    ]

    def post_build(self, p, pay):
        if self.in_len is None:
            body = len(self.payload.self_build()) if self.payload else 0
            p = p[:4] + struct.pack("<H", body) + p[6:]
        return p + pay

    def mysummary(self):
        return self.sprintf("ucma %UcmaCmdHdr.cmd%")


class UcmaCreateId(Packet):
    """struct rdma_ucm_create_id (rdma_user_cm.h), 24 bytes."""

    name = "UcmaCreateId"
    lua_layer = "ucma_create_id"
    fields_desc = [
        XLELongField("uid", 0),
        XLELongField("response", 0),
        LEShortEnumField("ps", 0x0106, PORT_SPACES),
        ByteField("qp_type", 0),
        XStrFixedLenField("reserved", b"\0" * 5, 5),
    ]


class UcmaCreateIdResp(Packet):
    """struct rdma_ucm_create_id_resp (rdma_user_cm.h): the new cm_id's id."""

    name = "UcmaCreateIdResp"
    lua_layer = "ucma_create_id_resp"
    fields_desc = [LEIntField("id", 0)]

    def mysummary(self):
        return f"id {self.id}"


class UcmaResolveIp(Packet):
    """struct rdma_ucm_resolve_ip (rdma_user_cm.h), 64 bytes (two sockaddr_in6)."""

    name = "UcmaResolveIp"
    lua_layer = "ucma_resolve_ip"
    fields_desc = [
        SockAddrField("src_addr", b"\0" * SOCKADDR_IN6_SIZE, SOCKADDR_IN6_SIZE),
        SockAddrField("dst_addr", b"\0" * SOCKADDR_IN6_SIZE, SOCKADDR_IN6_SIZE),
        LEIntField("id", 0),
        LEIntField("timeout_ms", 0),
    ]

    def mysummary(self):
        return f"id {self.id} {sockaddr_text(self.src_addr)} -> {sockaddr_text(self.dst_addr)}"


class UcmaResolveAddr(Packet):
    """struct rdma_ucm_resolve_addr (rdma_user_cm.h), 272 bytes (two sockaddr_storage)."""

    name = "UcmaResolveAddr"
    lua_layer = "ucma_resolve_addr"
    fields_desc = [
        LEIntField("id", 0),
        LEIntField("timeout_ms", 0),
        LEShortField("src_size", 0),
        LEShortField("dst_size", 0),
        XLEIntField("reserved", 0),
        SockAddrField("src_addr", b"\0" * SOCKADDR_STORAGE_SIZE, SOCKADDR_STORAGE_SIZE),
        SockAddrField("dst_addr", b"\0" * SOCKADDR_STORAGE_SIZE, SOCKADDR_STORAGE_SIZE),
    ]

    def mysummary(self):
        return f"id {self.id} {sockaddr_text(self.src_addr)} -> {sockaddr_text(self.dst_addr)}"


class UcmaResolveRoute(Packet):
    """struct rdma_ucm_resolve_route (rdma_user_cm.h): the kernel resolves the route itself
    (SA query or netlink local service)."""

    name = "UcmaResolveRoute"
    lua_layer = "ucma_resolve_route"
    fields_desc = [LEIntField("id", 0), LEIntField("timeout_ms", 0)]

    def mysummary(self):
        return f"id {self.id} timeout {self.timeout_ms} ms"


class UcmaConnParam(Packet):
    """struct rdma_ucm_conn_param (rdma_user_cm.h), 272 bytes."""

    name = "UcmaConnParam"
    lua_layer = "ucma_conn_param"
    fields_desc = [
        XLEIntField("qp_num", 0),
        XLEIntField("qkey", 0),
        XStrFixedLenField("private_data", b"\0" * RDMA_MAX_PRIVATE_DATA, RDMA_MAX_PRIVATE_DATA),
        ByteField("private_data_len", 0),
        ByteField("srq", 0),
        ByteField("responder_resources", 0),
        ByteField("initiator_depth", 0),
        ByteField("flow_control", 0),
        ByteField("retry_count", 0),
        ByteField("rnr_retry_count", 0),
        ByteField("valid", 0),
    ]

    def extract_padding(self, s):
        return b"", s


class UcmaAhAttr(Packet):
    """struct ib_uverbs_ah_attr with its struct ib_uverbs_global_route (ib_user_verbs.h),
    32 bytes."""

    name = "UcmaAhAttr"
    lua_layer = "ucma_ah_attr"
    fields_desc = [
        GIDField("dgid", "::"),
        XLEIntField("flow_label", 0),
        ByteField("sgid_index", 0),
        ByteField("hop_limit", 0),
        ByteField("traffic_class", 0),
        XByteField("reserved_27", 0),
        LEShortField("dlid", 0),
        ByteField("sl", 0),
        ByteField("src_path_bits", 0),
        ByteField("static_rate", 0),
        ByteField("is_global", 0),
        ByteField("port_num", 0),
        XByteField("reserved_39", 0),
    ]

    def extract_padding(self, s):
        return b"", s


class UcmaUdParam(Packet):
    """struct rdma_ucm_ud_param (rdma_user_cm.h), 304 bytes: the larger member of
    rdma_ucm_event_resp's param union."""

    name = "UcmaUdParam"
    lua_layer = "ucma_ud_param"
    fields_desc = [
        XLEIntField("qp_num", 0),
        XLEIntField("qkey", 0),
        PacketField("ah_attr", UcmaAhAttr(), UcmaAhAttr),
        XStrFixedLenField("private_data", b"\0" * RDMA_MAX_PRIVATE_DATA, RDMA_MAX_PRIVATE_DATA),
        ByteField("private_data_len", 0),
        XStrFixedLenField("reserved", b"\0" * 7, 7),
    ]

    def extract_padding(self, s):
        return b"", s


class UcmaEce(Packet):
    """struct rdma_ucm_ece (rdma_user_cm.h): Enhanced Connection Establishment."""

    name = "UcmaEce"
    lua_layer = "ucma_ece"
    fields_desc = [XLEIntField("vendor_id", 0), XLEIntField("attr_mod", 0)]

    def extract_padding(self, s):
        return b"", s


class UcmaConnect(Packet):
    """struct rdma_ucm_connect (rdma_user_cm.h), 288 bytes: the CM REQ's parameters."""

    name = "UcmaConnect"
    lua_layer = "ucma_connect"
    fields_desc = [
        PacketField("conn_param", UcmaConnParam(), UcmaConnParam),
        LEIntField("id", 0),
        XLEIntField("reserved", 0),
        PacketField("ece", UcmaEce(), UcmaEce),
    ]

    def mysummary(self):
        return f"id {self.id} qp_num 0x{self.conn_param.qp_num:x}"


class UcmaQuery(Packet):
    """struct rdma_ucm_query (rdma_user_cm.h); RDMA_USER_CM_QUERY_PATH asks for the paths the
    kernel holds for the cm_id (the response: UcmaQueryPathResp)."""

    name = "UcmaQuery"
    lua_layer = "ucma_query"
    fields_desc = [
        XLELongField("response", 0),
        LEIntField("id", 0),
        LEIntEnumField("option", RDMA_USER_CM_QUERY_PATH, QUERY_OPTIONS),
    ]

    def mysummary(self):
        return self.sprintf("id %UcmaQuery.id% %UcmaQuery.option%")


def _next_path(pkt, lst, cur, remain):
    return PathRecData if len(remain) >= RECORD_SIZE else None


class UcmaQueryPathResp(Packet):
    """struct rdma_ucm_query_path_resp (rdma_user_cm.h): num_paths, reserved, then
    path_data[] (struct ib_path_rec_data, layers/pathdata.py PathRecData): the paths the
    kernel holds for the cm_id, its readback, not a path array handed to it (so no
    "ibpath.blob"). ucma_query_path (ucma.c) copies 8 + 72 bytes a path it reports, fewer
    paths than num_paths when `out` is too small: path_data is the whole records that follow."""

    name = "UcmaQueryPathResp"
    lua_layer = "ucma_query_path_resp"
    fields_desc = [
        LEIntField("num_paths", None),
        XLEIntField("reserved", 0),
        PacketListField("path_data", [], PathRecData, next_cls_cb=_next_path,
                        max_count=1 << 16),
    ]
    field_hints = {
        "path_data": ListHint(count=Remaining() // RECORD_SIZE, stride=Const(RECORD_SIZE),
                              selector=Const(0), classes={0: PathRecData}),
    }

    def post_build(self, p, pay):
        if self.num_paths is None:
            p = struct.pack("<I", len(self.path_data)) + p[4:]
        return p + pay

    def mysummary(self):
        return f"{self.num_paths} path(s)"


class UcmaIbService(Packet):
    """struct rdma_ucm_ib_service (rdma_user_cm.h, Linux 6.17), 80 bytes: the service
    rdma_resolve_ib_service asks the SA for, by ServiceID (flag ID), ServiceName (flag NAME)
    or both. service_id is host order (__aligned_u64), unlike the ServiceRecord's."""

    name = "UcmaIbService"
    lua_layer = "ucma_ib_service"
    fields_desc = [
        XLELongField("service_id", 0),
        NameField("service_name", b"", RDMA_USER_CM_IB_SERVICE_NAME_SIZE),
        FlagsField("flags", 0, -32, IB_SERVICE_FLAGS),
        XLEIntField("reserved", 0),
    ]

    def extract_padding(self, s):
        return b"", s


class UcmaResolveIbService(Packet):
    """struct rdma_ucm_resolve_ib_service (rdma_user_cm.h, Linux 6.17), 88 bytes: the
    cm_id, then the service; the outcome is an ADDRINFO_RESOLVED or ADDRINFO_ERROR event
    (ucma.c ucma_resolve_ib_service, cma.c rdma_resolve_ib_service)."""

    name = "UcmaResolveIbService"
    lua_layer = "ucma_resolve_ib_service"
    fields_desc = [
        LEIntField("id", 0),
        XLEIntField("reserved", 0),
        PacketField("ibs", UcmaIbService(), UcmaIbService),
    ]

    def mysummary(self):
        ibs = self.ibs
        return (f"id {self.id} sid 0x{ibs.service_id:016x} "
                f"name {ibs.get_field('service_name').i2repr(ibs, ibs.service_name)} "
                f"flags {ibs.sprintf('%UcmaIbService.flags%')}")


def _next_service(pkt, lst, cur, remain):
    return ServiceRecord if len(remain) >= SERVICE_RECORD_SIZE else None


class UcmaQueryIbServiceResp(Packet):
    """struct rdma_ucm_query_ib_service_resp (rdma_user_cm.h, Linux 6.17): num_service_recs
    (how many the kernel holds for the cm_id), reserved, then recs[] (struct
    ib_user_service_rec, ib_user_sa.h: the ServiceRecord in SA wire layout, 176 bytes).
    ucma_query_ib_service (ucma.c) copies as many records as `out` has room for, at most
    num_service_recs: recs is the whole records that follow. librdmacm asks room for 6 and
    asks again with the kernel's count when it holds more."""

    name = "UcmaQueryIbServiceResp"
    lua_layer = "ucma_query_ib_service_resp"
    fields_desc = [
        LEIntField("num_service_recs", None),
        XLEIntField("reserved", 0),
        PacketListField("recs", [], ServiceRecord, next_cls_cb=_next_service,
                        max_count=1 << 16),
    ]
    field_hints = {
        "recs": ListHint(count=Remaining() // SERVICE_RECORD_SIZE,
                         stride=Const(SERVICE_RECORD_SIZE), selector=Const(0),
                         classes={0: ServiceRecord}),
    }

    def post_build(self, p, pay):
        if self.num_service_recs is None:
            p = struct.pack("<I", len(self.recs)) + p[4:]
        return p + pay

    def mysummary(self):
        return f"{self.num_service_recs} service record(s), {len(self.recs)} copied"


class UcmaGetEvent(Packet):
    """struct rdma_ucm_get_event (rdma_user_cm.h): the response pointer for the event."""

    name = "UcmaGetEvent"
    lua_layer = "ucma_get_event"
    fields_desc = [XLELongField("response", 0)]


class UcmaEventResp(Packet):
    """struct rdma_ucm_event_resp (rdma_user_cm.h), 336 bytes: the cm_id, the event and its
    status (0, a negative errno or a CM reject reason). The param union is read as its
    rdma_ucm_conn_param member (connected QPs); param_rest is the rest of the union (its ud
    member, rdma_ucm_ud_param, is 304 bytes)."""

    name = "UcmaEventResp"
    lua_layer = "ucma_event_resp"
    fields_desc = [
        XLELongField("uid", 0),
        LEIntField("id", 0),
        LEIntEnumField("event", 0, CM_EVENTS),
        LEIntField("status", 0),  # __u32: a negative errno arrives as 2^32 - errno
        PacketField("param", UcmaConnParam(), UcmaConnParam),
        XStrFixedLenField("param_rest", b"\0" * 32, 32),
        XLEIntField("reserved", 0),
        PacketField("ece", UcmaEce(), UcmaEce),
    ]

    def signed_status(self) -> int:
        """status as the kernel meant it (an int: 0, -errno or a reject reason)."""
        return signed_status(self.status)

    def mysummary(self):
        return self.sprintf("id %UcmaEventResp.id% %UcmaEventResp.event%") + \
            f" status {self.signed_status()}"


def signed_status(status: int) -> int:
    """rdma_ucm_event_resp.status (__u32) as the kernel meant it: 0, -errno or a reason."""
    return status - (1 << 32) if status >= 1 << 31 else status


class _OptNameField(LEIntField):
    def i2repr(self, pkt, x):
        names = OPTION_NAMES.get(getattr(pkt, "level", None), {})
        return f"{names[x]} ({x})" if x in names else repr(x)


class UcmaSetOption(Packet):
    """struct rdma_ucm_set_option (rdma_user_cm.h), 24 bytes. optval is a pointer into the
    caller's memory: for level IB, optname PATH its optlen bytes are the path array (recorded
    as its own "ibpath.blob" frame)."""

    name = "UcmaSetOption"
    lua_layer = "ucma_set_option"
    fields_desc = [
        XLELongField("optval", 0),
        LEIntField("id", 0),
        LEIntEnumField("level", RDMA_OPTION_IB, OPTION_LEVELS),
        _OptNameField("optname", RDMA_OPTION_IB_PATH),
        LEIntField("optlen", 0),
    ]

    def is_ib_path(self) -> bool:
        return self.level == RDMA_OPTION_IB and self.optname == RDMA_OPTION_IB_PATH

    def mysummary(self):
        return self.sprintf("id %UcmaSetOption.id% %UcmaSetOption.level%/") + \
            f"{self.fields_desc[3].i2repr(self, self.optname)} optlen {self.optlen}"


EXPORTED_PDU_DISSECTORS[UCMA_DISSECTOR] = UcmaCmdHdr

bind_layers(UcmaCmdHdr, UcmaCreateId, cmd=CMD["CREATE_ID"])
bind_layers(UcmaCmdHdr, UcmaResolveIp, cmd=CMD["RESOLVE_IP"])
bind_layers(UcmaCmdHdr, UcmaResolveRoute, cmd=CMD["RESOLVE_ROUTE"])
bind_layers(UcmaCmdHdr, UcmaConnect, cmd=CMD["CONNECT"])
bind_layers(UcmaCmdHdr, UcmaGetEvent, cmd=CMD["GET_EVENT"])
bind_layers(UcmaCmdHdr, UcmaSetOption, cmd=CMD["SET_OPTION"])
bind_layers(UcmaCmdHdr, UcmaQuery, cmd=CMD["QUERY"])
bind_layers(UcmaCmdHdr, UcmaResolveAddr, cmd=CMD["RESOLVE_ADDR"])
bind_layers(UcmaCmdHdr, UcmaResolveIbService, cmd=CMD["RESOLVE_IB_SERVICE"])
bind_layers(UcmaCreateId, UcmaCreateIdResp)
bind_layers(UcmaQuery, UcmaQueryPathResp, option=RDMA_USER_CM_QUERY_PATH)
bind_layers(UcmaQuery, UcmaQueryIbServiceResp, option=RDMA_USER_CM_QUERY_IB_SERVICE)
bind_layers(UcmaGetEvent, UcmaEventResp)
