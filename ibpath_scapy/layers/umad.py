"""The user MAD device (/dev/infiniband/umad*): struct ib_user_mad as libibumad writes and
reads it, the 64-byte header (ABI 5 with pkey_index, enabled by IB_USER_MAD_ENABLE_PKEY)
followed by the MAD.

The header carries the MAD's addressing (remote LID, SL, QPN, Q_Key, GRH fields), so a
recorded umad keeps what a wire capture would show of the peer. agent_id, status,
timeout_ms, retries, length and pkey_index are host order (little-endian on x86_64, the
machine the capture was recorded on); qpn, qkey, lid, gid and flow_label are network order.

Capture form: an "ibpath.umad" exported PDU per MAD written or read, written by
``ibpath record``.

Sources: Linux include/uapi/rdma/ib_user_mad.h (struct ib_user_mad_hdr, struct ib_user_mad,
IB_USER_MAD_ABI_VERSION 5), drivers/infiniband/core/user_mad.c (hdr_size: the 64-byte
header once pkey_index is enabled), rdma-core libibumad/umad.h (ib_mad_addr_t).
"""

from __future__ import annotations

from scapy.fields import (
    ByteField,
    IntField,
    LEIntField,
    LEShortField,
    XIntField,
    XLEIntField,
    XStrFixedLenField,
)
from scapy.packet import Packet, bind_layers

from .coded import LIDField
from .ib import EXPORTED_PDU_DISSECTORS
from .mad import MAD, MAD_HDR_SIZE, MGMT_CLASS_SA, RMPP_HDR_SIZE
from .roce import GSI_QKEY
from .sa import SA_MAD_HDR_SIZE, GIDField

UMAD_DISSECTOR = "ibpath.umad"
UMAD_HDR_SIZE = 64  # sizeof(struct ib_user_mad_hdr), ABI 5 with pkey_index
# ib_umad_write refuses (EINVAL) a write of fewer MAD bytes than the MAD and RMPP headers
# (user_mad.c: count < hdr_size(file) + IB_MGMT_RMPP_HDR)
UMAD_WRITE_MIN = MAD_HDR_SIZE + RMPP_HDR_SIZE
# The TID bits a process owns on umad: ib_umad_write puts the agent's hi_tid in the upper 32
# bits of a request's TID, and the answer the process reads carries it
UMAD_TID_LOW = 0xFFFFFFFF


def umad_headers_size(mgmt_class: int) -> int:
    """The bytes a umad message of a class holds at least: the SA's three headers (what
    ib_get_mad_data_offset gives the SA class: the data starts after them), else what
    ib_umad_write takes at least. A umad message has no other length rule: the kernel hands
    a process an RMPP answer whole and unpadded, and segments what it writes."""
    return SA_MAD_HDR_SIZE if mgmt_class == MGMT_CLASS_SA else UMAD_WRITE_MIN


class UserMad(Packet):
    """struct ib_user_mad_hdr (ib_user_mad.h), 64 bytes; the MAD is the payload. The C name
    of agent_id is id; libibumad calls it agent_id (umad.h)."""

    name = "UserMad"
    lua_layer = "umad"
    fields_desc = [
        LEIntField("agent_id", 0),
        XLEIntField("status", 0),
        LEIntField("timeout_ms", 0),
        LEIntField("retries", 0),
        LEIntField("length", 0),
        XIntField("qpn", 1),
        XIntField("qkey", GSI_QKEY),
        LIDField("lid", 0),
        ByteField("sl", 0),
        ByteField("path_bits", 0),
        ByteField("grh_present", 0),
        ByteField("gid_index", 0),
        ByteField("hop_limit", 0),
        ByteField("traffic_class", 0),
        GIDField("gid", "::"),
        IntField("flow_label", 0),
        LEShortField("pkey_index", 0),
        XStrFixedLenField("reserved", b"\0" * 6, 6),
    ]

    def mysummary(self):
        return self.sprintf("umad agent %UserMad.agent_id% lid %UserMad.lid% qpn %UserMad.qpn%")


EXPORTED_PDU_DISSECTORS[UMAD_DISSECTOR] = UserMad

bind_layers(UserMad, MAD)
