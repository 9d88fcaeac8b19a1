"""Netlink as nlmon captures it (LINKTYPE_NETLINK, 253) and the RDMA netlink local service
(NETLINK_RDMA, client RDMA_NL_LS): RESOLVE, SET_TIMEOUT and IP_RESOLVE.

A link-type-253 record is the 16-byte Linux cooked header (the SLL layout: pkttype, ARPHRD,
address length, 8 address bytes, protocol = the netlink family, all big-endian) followed by
the netlink message(s) of one skb. nlmsghdr and attribute headers are in host byte order,
little-endian on every machine ibpath records on.

Sources: Linux include/uapi/linux/netlink.h (nlmsghdr, nlattr, NLM_F_*, NETLINK_*),
include/uapi/linux/if_packet.h (PACKET_*), net/netlink/af_netlink.c
(__netlink_deliver_tap_skb: pkt_type PACKET_KERNEL/PACKET_USER, protocol = sk_protocol),
include/uapi/rdma/rdma_netlink.h (RDMA_NL_*, LS_*, RDMA_NLA_F_MANDATORY, struct
rdma_ls_resolve_header, struct rdma_ls_ip_resolve_header), drivers/infiniband/core/sa_query.c
(ib_nl_send_msg, ib_nl_set_path_rec_attrs), rdma-core ibacm/src/acm.c (acm_nl_send); the
tcpdump.org LINKTYPE_NETLINK page. wire-formats.md §6.2-6.4.
"""

from __future__ import annotations

from scapy.config import conf
from scapy.fields import (
    BitEnumField,
    BitField,
    ByteEnumField,
    ByteField,
    FlagsField,
    IP6Field,
    IPField,
    LEIntField,
    LEShortEnumField,
    LEShortField,
    PacketListField,
    ShortEnumField,
    ShortField,
    StrField,
    StrFixedLenField,
    XByteField,
    XLELongField,
    XLEShortField,
    XShortField,
)
from scapy.packet import Packet, Raw, bind_layers

from ..model.expr import And, Const, F, Remaining
from ..model.hints import LengthHint, ListHint, NextLayer, next_layer_by_hints
from .pathdata import PathRecData
from .sa import GIDField

LINKTYPE_NETLINK = 253
ARPHRD_NETLINK = 824
COOKED_HDR_SIZE = 16
NLMSG_HDRLEN = 16
NLA_HDRLEN = 4

# sll_pkttype values (include/uapi/linux/if_packet.h). The netlink tap marks a message
# PACKET_KERNEL when a kernel socket receives it and PACKET_USER when a user socket does
# (af_netlink.c __netlink_deliver_tap_skb). libpcap on an nlmon device stores
# PACKET_OUTGOING (4) instead, because the clone goes through dev_queue_xmit_nit.
PACKET_TYPES = {
    0: "host",
    1: "broadcast",
    2: "multicast",
    3: "otherhost",
    4: "outgoing",
    5: "loopback",
    6: "to user",
    7: "to kernel",
}
PACKET_OUTGOING = 4
PACKET_USER = 6
PACKET_KERNEL = 7

HATYPES = {ARPHRD_NETLINK: "Netlink"}

# Netlink protocol families (include/uapi/linux/netlink.h NETLINK_*).
NETLINK_FAMILIES = {
    0: "ROUTE",
    1: "UNUSED",
    2: "USERSOCK",
    3: "FIREWALL",
    4: "SOCK_DIAG",
    5: "NFLOG",
    6: "XFRM",
    7: "SELINUX",
    8: "ISCSI",
    9: "AUDIT",
    10: "FIB_LOOKUP",
    11: "CONNECTOR",
    12: "NETFILTER",
    13: "IP6_FW",
    14: "DNRTMSG",
    15: "KOBJECT_UEVENT",
    16: "GENERIC",
    18: "SCSITRANSPORT",
    19: "ECRYPTFS",
    20: "RDMA",
    21: "CRYPTO",
    22: "SMC",
}
NETLINK_ROUTE = 0
NETLINK_RDMA = 20

# Control message types below NLMSG_MIN_TYPE (0x10), in every family (netlink.h).
NLMSG_CONTROL_TYPES = {1: "NOOP", 2: "ERROR", 3: "DONE", 4: "OVERRUN"}

# nlmsg_flags (netlink.h NLM_F_*). Bits 8-11 mean ROOT/MATCH/ATOMIC for GET requests,
# REPLACE/EXCL/CREATE/APPEND for NEW requests and CAPPED/ACK_TLVS for acks; the GET names
# are shown, as Wireshark does for dumps.
NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_ACK = 0x04
NLM_FLAG_NAMES = [
    "REQUEST", "MULTI", "ACK", "ECHO", "DUMP_INTR", "DUMP_FILTERED", "bit6", "bit7",
    "ROOT", "MATCH", "ATOMIC", "APPEND", "bit12", "bit13", "bit14", "bit15",
]

# RDMA netlink clients (rdma_netlink.h; RDMA_CM = 1 existed in older headers only).
RDMA_NL_CLIENTS = {1: "RDMA_CM", 2: "IWCM", 3: "RSVD", 4: "LS", 5: "NLDEV"}
RDMA_NL_LS = 4

# RDMA_NL_LS operations; nlmsg_type = RDMA_NL_GET_TYPE(client, op) = client << 10 | op.
LS_OPS = {0: "RESOLVE", 1: "SET_TIMEOUT", 2: "IP_RESOLVE"}
RDMA_NL_LS_OP_RESOLVE = 0
RDMA_NL_LS_OP_SET_TIMEOUT = 1
RDMA_NL_LS_OP_IP_RESOLVE = 2
RDMA_NL_OPS = {RDMA_NL_LS: LS_OPS}

# In the RDMA family, bit 8 of nlmsg_flags is RDMA_NL_LS_F_ERR on local-service responses.
RDMA_NL_LS_F_ERR = 0x0100
RDMA_NLM_FLAG_NAMES = NLM_FLAG_NAMES[:8] + ["LS_F_ERR"] + NLM_FLAG_NAMES[9:]

# Multicast groups (rdma_netlink.h RDMA_NL_GROUP_*); ibacm binds 1 << (LS - 1).
RDMA_NL_GROUPS = {2: "IWPM", 3: "LS"}
RDMA_NL_GROUP_LS = 3

# How the kernel will use the path(s) (rdma_netlink.h LS_RESOLVE_PATH_USE_*).
PATH_USE = {0: "ALL", 1: "UNIDIRECTIONAL", 2: "GMP"}
LS_RESOLVE_PATH_USE_ALL = 0
LS_RESOLVE_PATH_USE_UNIDIRECTIONAL = 1
LS_RESOLVE_PATH_USE_GMP = 2
LS_DEVICE_NAME_MAX = 64

# Local service attribute types (rdma_netlink.h LS_NLA_TYPE_*) and their payload sizes, from
# the header's table: "PATH_RECORD struct ib_path_rec_data; TIMEOUT u32 cpu; SERVICE_ID u64
# cpu; DGID/SGID u8[16] BE; TCLASS u8; PKEY u16 cpu; QOS_CLASS u16 cpu; IPV4 u32 BE; IPV6
# u8[16] BE".
LS_NLA_TYPES = {
    0: "UNSPEC",
    1: "PATH_RECORD",
    2: "TIMEOUT",
    3: "SERVICE_ID",
    4: "DGID",
    5: "SGID",
    6: "TCLASS",
    7: "PKEY",
    8: "QOS_CLASS",
    9: "IPV4",
    10: "IPV6",
}
LS_NLA_TYPE_PATH_RECORD = 1
LS_NLA_TYPE_TIMEOUT = 2
LS_NLA_TYPE_SERVICE_ID = 3
LS_NLA_TYPE_DGID = 4
LS_NLA_TYPE_SGID = 5
LS_NLA_TYPE_TCLASS = 6
LS_NLA_TYPE_PKEY = 7
LS_NLA_TYPE_QOS_CLASS = 8
LS_NLA_TYPE_IPV4 = 9
LS_NLA_TYPE_IPV6 = 10
LS_NLA_VALUE_SIZES = {1: 72, 2: 4, 3: 8, 4: 16, 5: 16, 6: 1, 7: 2, 8: 2, 9: 4, 10: 16}

NLA_F_NESTED = 0x8000
NLA_F_NET_BYTEORDER = 0x4000
RDMA_NLA_F_MANDATORY = 0x2000
RDMA_NLA_TYPE_MASK = 0x1FFF  # ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER | RDMA_NLA_F_MANDATORY)


def nlmsg_align(n: int) -> int:
    """NLMSG_ALIGN / NLA_ALIGN: round up to 4 bytes."""
    return (n + 3) & ~3


def rdma_nl_type(client: int, op: int) -> int:
    """RDMA_NL_GET_TYPE(client, op)."""
    return (client << 10) + op


# -- attributes -------------------------------------------------------------------------------

class LsAttr(Packet):
    """struct nlattr of a local-service attribute; the value follows as the payload.

    nla_type carries NLA_F_NESTED, NLA_F_NET_BYTEORDER and RDMA_NLA_F_MANDATORY in its top
    three bits; the type proper is nla_type & RDMA_NLA_TYPE_MASK. nla_len counts the 4-byte
    header and the value, not the padding to 4 bytes.
    """

    name = "LS attribute"
    fields_desc = [
        LEShortField("nla_len", None),
        BitField("nested", 0, 1, tot_size=-2),
        BitField("net_byteorder", 0, 1),
        BitField("mandatory", 0, 1),
        BitEnumField("nla_type", 0, 13, LS_NLA_TYPES, end_tot_size=-2),
    ]

    # nla_len counts the header and the value; the next attribute starts NLA_ALIGN'ed
    length_hint = F("nla_len")
    length_align = 4

    def extract_padding(self, s):
        want = max(0, (self.nla_len or NLA_HDRLEN) - NLA_HDRLEN)
        return s[:want], s[nlmsg_align(want):]

    def post_build(self, p, pay):
        if self.nla_len is None:
            p = (NLA_HDRLEN + len(pay)).to_bytes(2, "little") + p[2:]
        return p + pay + b"\x00" * (-len(pay) % 4)

    def raw_type(self) -> int:
        """nla_type as the kernel compares it (flags included)."""
        return (self.nested << 15) | (self.net_byteorder << 14) | (self.mandatory << 13) | self.nla_type

    def value_length(self) -> int:
        """Value bytes present: nla_len - 4, or fewer when the attribute runs past the end."""
        want = max(0, (self.nla_len or NLA_HDRLEN) - NLA_HDRLEN)
        if self.original is None:
            return want
        return max(0, min(want, len(self.original) - NLA_HDRLEN))

    def truncated(self) -> bool:
        """True when nla_len runs past the end of the message."""
        return self.original is not None and (self.nla_len or 0) > len(self.original)

    def mysummary(self):
        flag = " MANDATORY" if self.mandatory else ""
        return f"LS attr {LS_NLA_TYPES.get(self.nla_type, self.nla_type)}{flag} len={self.nla_len}"


class LsTimeout(Packet):
    name = "LS TIMEOUT"
    fields_desc = [LEIntField("timeout_ms", 0)]


class LsServiceId(Packet):
    name = "LS SERVICE_ID"
    fields_desc = [XLELongField("service_id", 0)]  # cpu order: be64_to_cpu(sa_rec->service_id)


class LsDgid(Packet):
    name = "LS DGID"
    fields_desc = [GIDField("dgid", "::")]


class LsSgid(Packet):
    name = "LS SGID"
    fields_desc = [GIDField("sgid", "::")]


class LsTclass(Packet):
    name = "LS TCLASS"
    fields_desc = [XByteField("tclass", 0)]


class LsPkey(Packet):
    name = "LS PKEY"
    fields_desc = [XLEShortField("pkey", 0xFFFF)]  # cpu order


class LsQosClass(Packet):
    name = "LS QOS_CLASS"
    fields_desc = [LEShortField("qos_class", 0)]  # cpu order


class LsIpv4(Packet):
    name = "LS IPV4"
    fields_desc = [IPField("ipv4", "0.0.0.0")]


class LsIpv6(Packet):
    name = "LS IPV6"
    fields_desc = [IP6Field("ipv6", "::")]


def _next_attr(pkt, lst, cur, remain):
    """Another attribute follows if a whole nlattr header with nla_len >= 4 is left (the
    kernel's nla_ok(); shorter leftovers stay in the message's trailing bytes)."""
    if len(remain) < NLA_HDRLEN:
        return None
    _, nla_len = LsAttr.fields_desc[0].getfield(None, remain[:2])
    return LsAttr if nla_len >= NLA_HDRLEN else None


def _attributes():
    return PacketListField("attributes", [], LsAttr, next_cls_cb=_next_attr, max_count=1 << 20)


# -- local-service message bodies -------------------------------------------------------------

class LsResolveRequest(Packet):
    """RDMA_NL_LS_OP_RESOLVE request, kernel → resolver (sa_query.c ib_nl_send_msg):
    struct rdma_ls_resolve_header padded to NLMSG_ALIGN (68 bytes), then attributes, each
    with RDMA_NLA_F_MANDATORY."""

    name = "LS RESOLVE request"
    fields_desc = [
        StrFixedLenField("device_name", b"", LS_DEVICE_NAME_MAX),
        ByteField("port_num", 1),
        ByteEnumField("path_use", LS_RESOLVE_PATH_USE_GMP, PATH_USE),
        XShortField("reserved_528", 0),
        _attributes(),
        StrField("trailing", b""),
    ]


class LsResolveResponse(Packet):
    """RDMA_NL_LS_OP_RESOLVE response, resolver → kernel (ibacm acm_nl_send): attributes right
    after nlmsghdr, no family header; PATH_RECORD attributes carry struct ib_path_rec_data."""

    name = "LS RESOLVE response"
    fields_desc = [
        _attributes(),
        StrField("trailing", b""),
    ]


class LsSetTimeout(Packet):
    """RDMA_NL_LS_OP_SET_TIMEOUT, resolver → kernel (sa_query.c ib_nl_handle_set_timeout):
    a TIMEOUT attribute in ms, no family header."""

    name = "LS SET_TIMEOUT"
    fields_desc = [
        _attributes(),
        StrField("trailing", b""),
    ]


class LsIpResolveRequest(Packet):
    """RDMA_NL_LS_OP_IP_RESOLVE request, kernel → resolver (addr.c ib_nl_ip_send_msg):
    struct rdma_ls_ip_resolve_header (ifindex, cpu order), then an IPV4 or IPV6 attribute."""

    name = "LS IP_RESOLVE request"
    fields_desc = [
        LEIntField("ifindex", 0),
        _attributes(),
        StrField("trailing", b""),
    ]


class LsIpResolveResponse(Packet):
    """RDMA_NL_LS_OP_IP_RESOLVE response, resolver → kernel (addr.c ib_nl_process_good_ip_rsep):
    a DGID attribute, no family header."""

    name = "LS IP_RESOLVE response"
    fields_desc = [
        _attributes(),
        StrField("trailing", b""),
    ]


# -- message headers --------------------------------------------------------------------------

class _NLMsg(Packet):
    """Behaviour shared by the nlmsghdr layers: the body is nlmsg_len - 16 bytes and the next
    message starts at NLMSG_ALIGN(nlmsg_len)."""

    length_hint = F("nlmsg_len")
    length_align = 4

    def extract_padding(self, s):
        want = max(0, (self.nlmsg_len or NLMSG_HDRLEN) - NLMSG_HDRLEN)
        return s[:want], s[nlmsg_align(want):]

    def post_build(self, p, pay):
        if self.nlmsg_len is None:
            p = (len(p) + len(pay)).to_bytes(4, "little") + p[4:]
        return p + pay + b"\x00" * (-len(pay) % 4)

    def truncated(self) -> bool:
        """True when nlmsg_len runs past the end of the record."""
        return self.original is not None and (self.nlmsg_len or 0) > len(self.original)


class NLMsgHdr(_NLMsg):
    """struct nlmsghdr (include/uapi/linux/netlink.h), 16 bytes, host byte order."""

    name = "nlmsghdr"
    fields_desc = [
        LEIntField("nlmsg_len", None),
        LEShortEnumField("nlmsg_type", 0, NLMSG_CONTROL_TYPES),
        FlagsField("nlmsg_flags", 0, -16, NLM_FLAG_NAMES),
        LEIntField("nlmsg_seq", 0),
        LEIntField("nlmsg_pid", 0),
    ]


class _RdmaOpField(BitField):
    """The operation bits of an RDMA nlmsg_type, named per client."""

    def i2repr(self, pkt, x):
        names = RDMA_NL_OPS.get(getattr(pkt, "rdma_client", None), {})
        return f"{names[x]} ({x})" if x in names else super().i2repr(pkt, x)


class RdmaNLMsgHdr(_NLMsg):
    """struct nlmsghdr of the RDMA family (NETLINK_RDMA, 20): nlmsg_type is
    RDMA_NL_GET_TYPE(client, op) = client << 10 | op (rdma_netlink.h RDMA_NL_GET_CLIENT/OP)."""

    name = "RDMA nlmsghdr"
    fields_desc = [
        LEIntField("nlmsg_len", None),
        BitEnumField("rdma_client", RDMA_NL_LS, 6, RDMA_NL_CLIENTS, tot_size=-2),
        _RdmaOpField("rdma_op", RDMA_NL_LS_OP_RESOLVE, 10, end_tot_size=-2),
        FlagsField("nlmsg_flags", 0, -16, RDMA_NLM_FLAG_NAMES),
        LEIntField("nlmsg_seq", 0),
        LEIntField("nlmsg_pid", 0),
    ]

    @property
    def nlmsg_type(self) -> int:
        return rdma_nl_type(self.rdma_client, self.rdma_op)

    def is_request(self) -> bool:
        return bool(int(self.nlmsg_flags) & NLM_F_REQUEST)

    def guess_payload_class(self, payload):
        return next_layer_by_hints(self, Raw)

    def mysummary(self):
        op = RDMA_NL_OPS.get(self.rdma_client, {}).get(self.rdma_op, self.rdma_op)
        client = RDMA_NL_CLIENTS.get(self.rdma_client, self.rdma_client)
        kind = "request" if self.is_request() else "response"
        err = " ERR" if int(self.nlmsg_flags) & RDMA_NL_LS_F_ERR else ""
        return f"RDMA {client} {op} {kind} seq={self.nlmsg_seq}{err}"


def _next_message(pkt, lst, cur, remain):
    if len(remain) < NLMSG_HDRLEN:
        return None
    _, nlmsg_len = NLMsgHdr.fields_desc[0].getfield(None, remain[:4])
    if nlmsg_len < NLMSG_HDRLEN:
        return None
    return NLMSG_CLASSES.get(pkt.protocol, NLMsgHdr)


class NetlinkCooked(Packet):
    """LINKTYPE_NETLINK (253) record: the Linux cooked header nlmon writes (16 bytes, big-endian:
    pkttype, ARPHRD_NETLINK 824, address length 0, 8 address bytes, protocol = netlink family),
    then the netlink messages of one skb. Bytes that cannot start another message (fewer than
    16, or nlmsg_len below 16) stay in trailing."""

    name = "Netlink cooked"
    fields_desc = [
        ShortEnumField("pkttype", PACKET_KERNEL, PACKET_TYPES),
        ShortEnumField("hatype", ARPHRD_NETLINK, HATYPES),
        ShortField("halen", 0),
        StrFixedLenField("addr", b"\x00" * 8, 8),
        ShortEnumField("protocol", NETLINK_RDMA, NETLINK_FAMILIES),
        PacketListField("messages", [], NLMsgHdr, next_cls_cb=_next_message, max_count=1 << 20),
        StrField("trailing", b""),
    ]

    def mysummary(self):
        fam = NETLINK_FAMILIES.get(self.protocol, self.protocol)
        return f"Netlink {fam} {PACKET_TYPES.get(self.pkttype, self.pkttype)} {len(self.messages)} message(s)"


# Body class of an RDMA_NL_LS message by (op, NLM_F_REQUEST set): requests come from the
# kernel (RESOLVE, IP_RESOLVE) or go to it (SET_TIMEOUT); responses never carry NLM_F_REQUEST
# (the kernel drops them with EPERM, ib_nl_handle_resolve_resp).
LS_BODIES = {
    (RDMA_NL_LS_OP_RESOLVE, True): LsResolveRequest,
    (RDMA_NL_LS_OP_RESOLVE, False): LsResolveResponse,
    (RDMA_NL_LS_OP_SET_TIMEOUT, True): LsSetTimeout,
    (RDMA_NL_LS_OP_SET_TIMEOUT, False): LsSetTimeout,
    (RDMA_NL_LS_OP_IP_RESOLVE, True): LsIpResolveRequest,
    (RDMA_NL_LS_OP_IP_RESOLVE, False): LsIpResolveResponse,
}

# nlmsghdr layer by netlink family.
NLMSG_CLASSES = {NETLINK_RDMA: RdmaNLMsgHdr}

bind_layers(LsAttr, PathRecData, nla_type=LS_NLA_TYPE_PATH_RECORD)
bind_layers(LsAttr, LsTimeout, nla_type=LS_NLA_TYPE_TIMEOUT)
bind_layers(LsAttr, LsServiceId, nla_type=LS_NLA_TYPE_SERVICE_ID)
bind_layers(LsAttr, LsDgid, nla_type=LS_NLA_TYPE_DGID)
bind_layers(LsAttr, LsSgid, nla_type=LS_NLA_TYPE_SGID)
bind_layers(LsAttr, LsTclass, nla_type=LS_NLA_TYPE_TCLASS)
bind_layers(LsAttr, LsPkey, nla_type=LS_NLA_TYPE_PKEY)
bind_layers(LsAttr, LsQosClass, nla_type=LS_NLA_TYPE_QOS_CLASS)
bind_layers(LsAttr, LsIpv4, nla_type=LS_NLA_TYPE_IPV4)
bind_layers(LsAttr, LsIpv6, nla_type=LS_NLA_TYPE_IPV6)

conf.l2types.register(LINKTYPE_NETLINK, NetlinkCooked)


# The body of an RDMA message by client, op and NLM_F_REQUEST, as hints the Lua generator
# reads too (RdmaNLMsgHdr.guess_payload_class uses them).
RdmaNLMsgHdr.payload_hints = [
    NextLayer(And(F("rdma_client") == RDMA_NL_LS, F("rdma_op") == op,
                  (F("nlmsg_flags") & NLM_F_REQUEST) == (NLM_F_REQUEST if request else 0)), body)
    for (op, request), body in LS_BODIES.items()
]
_ATTRIBUTE_HINTS = {
    "attributes": ListHint(count=None, stride=None, selector=Const(0), classes={0: LsAttr}),
    "trailing": LengthHint(Remaining()),
}
for _body in set(LS_BODIES.values()):
    _body.field_hints = _ATTRIBUTE_HINTS

# Display-filter names in the plugin: ibpath.<layer>.<field>
for _cls, _layer in {
    RdmaNLMsgHdr: "nl", LsAttr: "ls_attr", LsResolveRequest: "ls_resolve_request",
    LsResolveResponse: "ls_resolve_response", LsSetTimeout: "ls_set_timeout",
    LsIpResolveRequest: "ls_ip_resolve_request", LsIpResolveResponse: "ls_ip_resolve_response",
    LsTimeout: "ls_timeout", LsServiceId: "ls_service_id", LsDgid: "ls_dgid", LsSgid: "ls_sgid",
    LsTclass: "ls_tclass", LsPkey: "ls_pkey", LsQosClass: "ls_qos_class", LsIpv4: "ls_ipv4",
    LsIpv6: "ls_ipv6",
}.items():
    _cls.lua_layer = _layer
