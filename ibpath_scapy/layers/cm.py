"""Communication Management messages REQ, REP, RTU, REJ, DREQ, DREP, MRA (IBA Vol1 §12.6).

Layout: Linux include/rdma/ibta_vol1_c12.h (Tables 106-113); offsets count from the end of the
24-byte MAD header. Wireshark 4.0 misreads the REQ flow label and packet rate (landscape.md A.6).
"""

from scapy.fields import (
    BitEnumField,
    BitField,
    ByteField,
    ShortEnumField,
    StrFixedLenField,
    X3BytesField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.packet import Packet, bind_layers

from .mad import MAD, MGMT_CLASS_CM, mad_title
from .coded import CheckedBits, LIDField, MTUField, RateField, TimeExponentField
from .sa import GIDField

CM_DATA_SIZE = 232

TRANSPORT_SERVICE_TYPES = {0: "RC", 1: "UC", 2: "RD", 3: "reserved"}
MESSAGE_REJECTED = {0: "REQ", 1: "REP", 2: "other"}
FAILOVER_ACCEPTED = {0: "accepted", 1: "rejected (not supported)", 2: "rejected", 3: "reserved"}
# IBA Vol1 Table 109 "REJ reason"; values from Linux enum ib_cm_rej_reason.
REJ_REASONS = {
    1: "no QP",
    2: "no EEC",
    3: "no resources",
    4: "timeout",
    5: "unsupported",
    6: "invalid comm ID",
    7: "invalid comm instance",
    8: "invalid service ID",
    9: "invalid transport type",
    10: "stale conn",
    11: "RDC not exist",
    12: "invalid GID",
    13: "invalid LID",
    14: "invalid SL",
    15: "invalid traffic class",
    16: "invalid hop limit",
    17: "invalid packet rate",
    18: "invalid alt GID",
    19: "invalid alt LID",
    20: "invalid alt SL",
    21: "invalid alt traffic class",
    22: "invalid alt hop limit",
    23: "invalid alt packet rate",
    24: "port CM redirect",
    25: "port redirect",
    26: "invalid MTU",
    27: "insufficient resp resources",
    28: "consumer defined",
    29: "invalid RNR retry",
    30: "duplicate local comm ID",
    31: "invalid class version",
    32: "invalid flow label",
    33: "invalid alt flow label",
    35: "VENDOR_OPTION_NOT_SUPPORTED",
}


def _path_fields(prefix: str, base: int) -> list:
    """The 44-byte primary (base 52) or alternate (base 96) path block of a REQ.

    Reserved fields are named by their bit offset in the REQ message.
    """
    bit = base * 8
    return [
        LIDField(f"{prefix}_local_lid", 0),
        LIDField(f"{prefix}_remote_lid", 0),
        GIDField(f"{prefix}_local_gid", "::"),
        GIDField(f"{prefix}_remote_gid", "::"),
        XBitField(f"{prefix}_flow_label", 0, 20),
        XBitField(f"reserved_{bit + 308}", 0, 6),
        RateField(f"{prefix}_packet_rate", 0, 6),
        XByteField(f"{prefix}_traffic_class", 0),
        ByteField(f"{prefix}_hop_limit", 0),
        BitField(f"{prefix}_sl", 0, 4),
        BitField(f"{prefix}_subnet_local", 0, 1),
        XBitField(f"reserved_{bit + 341}", 0, 3),
        TimeExponentField(f"{prefix}_local_ack_timeout", 0, 5),
        (
            BitField("sap_supported", 0, 1)
            if prefix == "alternate"
            else XBitField(f"reserved_{bit + 349}", 0, 1)
        ),
        XBitField(f"reserved_{bit + 350}", 0, 2),
    ]


class CMReq(CheckedBits, Packet):
    """CM REQ (IBA Vol1 §12.6.5, Table 106)."""

    name = "CM REQ"
    lua_layer = "cm_req"
    fields_desc = [
        XIntField("local_comm_id", 0),
        XIntField("reserved_32", 0),
        XLongField("service_id", 0),
        XLongField("local_ca_guid", 0),
        XIntField("reserved_192", 0),
        XIntField("local_q_key", 0),
        X3BytesField("local_qpn", 0),
        ByteField("responder_resources", 0),
        X3BytesField("local_eecn", 0),
        ByteField("initiator_depth", 0),
        X3BytesField("remote_eecn", 0),
        TimeExponentField("remote_cm_response_timeout", 0, 5),
        BitEnumField("transport_service_type", 0, 2, TRANSPORT_SERVICE_TYPES),
        BitField("end_to_end_flow_control", 0, 1),
        X3BytesField("starting_psn", 0),
        TimeExponentField("local_cm_response_timeout", 0, 5),
        BitField("retry_count", 0, 3),
        XShortField("pkey", 0xFFFF),
        MTUField("path_packet_payload_mtu", 0, 4),
        BitField("rdc_exists", 0, 1),
        BitField("rnr_retry_count", 0, 3),
        BitField("max_cm_retries", 0, 4),
        BitField("srq", 0, 1),
        BitField("extended_transport_type", 0, 3),
        *_path_fields("primary", 52),
        *_path_fields("alternate", 96),
        StrFixedLenField("private_data", b"", 92),
    ]

    def mysummary(self):
        """'CM Send(REQ) comm_id=0x1234 sid=0x... fe80::1 > fe80::2'."""
        mad = self.underlayer
        title = (mad_title(mad.mgmt_class, mad.method, mad.attribute_id)
                 if isinstance(mad, MAD) else "REQ")
        return self.sprintf(
            f"CM {title} comm_id=%CMReq.local_comm_id% sid=%CMReq.service_id% "
            "%CMReq.primary_local_gid% > %CMReq.primary_remote_gid%"
        )


class CMMra(CheckedBits, Packet):
    """CM MRA (IBA Vol1 §12.6.6, Table 107)."""

    name = "CM MRA"
    lua_layer = "cm_mra"
    fields_desc = [
        XIntField("local_comm_id", 0),
        XIntField("remote_comm_id", 0),
        BitEnumField("message_mraed", 0, 2, MESSAGE_REJECTED),
        XBitField("reserved_66", 0, 6),
        TimeExponentField("service_timeout", 0, 5),
        XBitField("reserved_77", 0, 3),
        StrFixedLenField("private_data", b"", 222),
    ]


class CMRej(CheckedBits, Packet):
    """CM REJ (IBA Vol1 §12.6.7, Table 108)."""

    name = "CM REJ"
    lua_layer = "cm_rej"
    fields_desc = [
        XIntField("local_comm_id", 0),
        XIntField("remote_comm_id", 0),
        BitEnumField("message_rejected", 0, 2, MESSAGE_REJECTED),
        XBitField("reserved_66", 0, 6),
        BitField("reject_info_length", 0, 7),
        XBitField("reserved_79", 0, 1),
        ShortEnumField("reason", 0, REJ_REASONS),
        StrFixedLenField("ari", b"", 72),
        StrFixedLenField("private_data", b"", 148),
    ]


class CMRep(CheckedBits, Packet):
    """CM REP (IBA Vol1 §12.6.8, Table 110)."""

    name = "CM REP"
    lua_layer = "cm_rep"
    fields_desc = [
        XIntField("local_comm_id", 0),
        XIntField("remote_comm_id", 0),
        XIntField("local_q_key", 0),
        X3BytesField("local_qpn", 0),
        XByteField("reserved_120", 0),
        X3BytesField("local_ee_context_number", 0),
        XByteField("reserved_152", 0),
        X3BytesField("starting_psn", 0),
        XByteField("reserved_184", 0),
        ByteField("responder_resources", 0),
        ByteField("initiator_depth", 0),
        TimeExponentField("target_ack_delay", 0, 5),
        BitEnumField("failover_accepted", 0, 2, FAILOVER_ACCEPTED),
        BitField("end_to_end_flow_control", 0, 1),
        BitField("rnr_retry_count", 0, 3),
        BitField("srq", 0, 1),
        XBitField("reserved_220", 0, 4),
        XLongField("local_ca_guid", 0),
        StrFixedLenField("private_data", b"", 196),
    ]


class CMRtu(CheckedBits, Packet):
    """CM RTU (IBA Vol1 §12.6.9, Table 111)."""

    name = "CM RTU"
    lua_layer = "cm_rtu"
    fields_desc = [
        XIntField("local_comm_id", 0),
        XIntField("remote_comm_id", 0),
        StrFixedLenField("private_data", b"", 224),
    ]


class CMDreq(CheckedBits, Packet):
    """CM DREQ (IBA Vol1 §12.6.10, Table 112)."""

    name = "CM DREQ"
    lua_layer = "cm_dreq"
    fields_desc = [
        XIntField("local_comm_id", 0),
        XIntField("remote_comm_id", 0),
        X3BytesField("remote_qpn_eecn", 0),
        XByteField("reserved_88", 0),
        StrFixedLenField("private_data", b"", 220),
    ]


class CMDrep(CheckedBits, Packet):
    """CM DREP (IBA Vol1 §12.6.11, Table 113)."""

    name = "CM DREP"
    lua_layer = "cm_drep"
    fields_desc = [
        XIntField("local_comm_id", 0),
        XIntField("remote_comm_id", 0),
        StrFixedLenField("private_data", b"", 224),
    ]


CM_MESSAGE_CLASSES = {
    0x0010: CMReq,
    0x0011: CMMra,
    0x0012: CMRej,
    0x0013: CMRep,
    0x0014: CMRtu,
    0x0015: CMDreq,
    0x0016: CMDrep,
}

for _attr, _cls in CM_MESSAGE_CLASSES.items():
    bind_layers(MAD, _cls, mgmt_class=MGMT_CLASS_CM, attribute_id=_attr)
