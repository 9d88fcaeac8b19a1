"""MAD common header and RMPP header (IBA Vol1 §13.4.3, §13.6.2).

Sources: Linux include/rdma/ib_mad.h (struct ib_mad_hdr, struct ib_rmpp_hdr), OpenSM ib_types.h.
See wire-formats.md §1-2.
"""

from scapy.fields import (
    BitField,
    ByteEnumField,
    ByteField,
    FlagsField,
    IntField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.packet import Packet, Raw

from .coded import CheckedBits

MAD_SIZE = 256
MAD_HDR_SIZE = 24
RMPP_HDR_SIZE = 12
RMPP_DATA_SIZE = MAD_SIZE - MAD_HDR_SIZE - RMPP_HDR_SIZE  # 220: what PayloadLength counts per segment

# Management classes (ib_mad.h IB_MGMT_CLASS_*).
MGMT_CLASSES = {
    0x01: "SubnMgt",
    0x81: "SubnMgtDirectedRoute",
    0x03: "SubnAdm",
    0x04: "PerfMgt",
    0x05: "BM",
    0x06: "DevMgt",
    0x07: "CM",
    0x08: "SNMP",
    0x10: "DevAdm",
    0x12: "BIS",
    0x21: "CongestionMgt",
    0x2C: "ibacm",
}
MAD_BASE_VERSION = 1  # IB_MGMT_BASE_VERSION
SA_CLASS_VERSION = 2  # IB_SA_CLASS_VERSION (the SA's, the MAD's default)
MGMT_CLASS_SMP, MGMT_CLASS_SMP_DR, MGMT_CLASS_SA, MGMT_CLASS_PERF, MGMT_CLASS_CM = (
    0x01, 0x81, 0x03, 0x04, 0x07)

# Methods (ib_mad.h IB_MGMT_METHOD_*, ib_sa.h IB_SA_METHOD_*); bit 7 is the R (response) bit.
METHODS = {
    0x01: "Get",
    0x02: "Set",
    0x03: "Send",
    0x05: "Trap",
    0x06: "Report",
    0x07: "TrapRepress",
    0x12: "GetTable",
    0x13: "GetTraceTable",
    0x14: "GetMulti",
    0x15: "Delete",
    0x81: "GetResp",
    0x86: "ReportResp",
    0x92: "GetTableResp",
    0x94: "GetMultiResp",
    0x95: "DeleteResp",
}
METHOD_RESP = 0x80
METHOD_GET = 0x01
METHOD_GET_RESP = 0x81
METHOD_GET_TABLE = 0x12
METHOD_GET_TABLE_RESP = 0x92

# Status: common bits (IB_MGMT_MAD_STATUS_*) and SA class-specific codes in bits 8-15
# (OpenSM IB_SA_MAD_STATUS_*; wire value = code << 8).
MAD_STATUS = {
    0x0000: "success",
    0x0001: "busy",
    0x0002: "redirect required",
    0x0004: "bad class version",
    0x0008: "method not supported",
    0x000C: "method/attribute combination not supported",
    0x001C: "invalid attribute or attribute modifier",
}
SA_STATUS = {
    0x0100: "NO_RESOURCES",
    0x0200: "REQ_INVALID",
    0x0300: "NO_RECORDS",
    0x0400: "TOO_MANY_RECORDS",
    0x0500: "INVALID_GID",
    0x0600: "INSUF_COMPS",
    0x0700: "DENIED",
    0x0800: "PRIO_SUGGESTED",
}

# Attribute IDs per class (ib_sa.h / umad_sa.h for SA; ibta_vol1_c12.h for CM).
SA_ATTRIBUTES = {
    0x0001: "ClassPortInfo",
    0x0002: "Notice",
    0x0003: "InformInfo",
    0x0011: "NodeRecord",
    0x0012: "PortInfoRecord",
    0x0013: "SLtoVLMappingTableRecord",
    0x0014: "SwitchInfoRecord",
    0x0015: "LinearForwardingTableRecord",
    0x0016: "RandomForwardingTableRecord",
    0x0017: "MulticastForwardingTableRecord",
    0x0018: "SMInfoRecord",
    0x0019: "LinkSpeedWidthPairsTableRecord",
    0x0020: "LinkRecord",
    0x0030: "GuidInfoRecord",
    0x0031: "ServiceRecord",
    0x0033: "P_KeyTableRecord",
    0x0035: "PathRecord",
    0x0036: "VLArbitrationTableRecord",
    0x0038: "MCMemberRecord",
    0x0039: "TraceRecord",
    0x003A: "MultiPathRecord",
    0x003B: "ServiceAssociationRecord",
    0x00F3: "InformInfoRecord",
}
CM_ATTRIBUTES = {
    0x0001: "ClassPortInfo",
    0x0010: "REQ",
    0x0011: "MRA",
    0x0012: "REJ",
    0x0013: "REP",
    0x0014: "RTU",
    0x0015: "DREQ",
    0x0016: "DREP",
    0x0017: "SIDR_REQ",
    0x0018: "SIDR_REP",
    0x0019: "LAP",
    0x001A: "APR",
}
SMP_ATTRIBUTES = {
    0x0002: "Notice",
    0x0010: "NodeDescription",
    0x0011: "NodeInfo",
    0x0012: "SwitchInfo",
    0x0014: "GUIDInfo",
    0x0015: "PortInfo",
    0x0016: "P_KeyTable",
    0x0017: "SLtoVLMappingTable",
    0x0018: "VLArbitrationTable",
    0x0019: "LinearForwardingTable",
    0x001A: "RandomForwardingTable",
    0x001B: "MulticastForwardingTable",
    0x0020: "SMInfo",
    0xFF90: "VendorDiag",
}
ATTRIBUTES_BY_CLASS = {
    0x01: SMP_ATTRIBUTES,
    0x81: SMP_ATTRIBUTES,
    0x03: SA_ATTRIBUTES,
    0x07: CM_ATTRIBUTES,
}
ATTR_PATH_RECORD = 0x0035
ATTR_SERVICE_RECORD = 0x0031

RMPP_TYPE_DATA, RMPP_TYPE_ACK, RMPP_TYPE_STOP, RMPP_TYPE_ABORT = 1, 2, 3, 4
RMPP_TYPES = {0: "none", RMPP_TYPE_DATA: "DATA", RMPP_TYPE_ACK: "ACK", RMPP_TYPE_STOP: "STOP",
              RMPP_TYPE_ABORT: "ABORT"}
RMPP_VERSION = 1  # IB_MGMT_RMPP_VERSION: the only version the kernel's RMPP layer accepts
RMPP_STATUS = {
    0: "OK",
    1: "RESX",
    118: "T2L",
    119: "BAD_LEN",
    120: "BAD_SEG",
    121: "BADT",
    122: "W2S",
    123: "S2B",
    124: "BAD_STATUS",
    125: "UNV",
    126: "TMR",
    127: "UNSPEC",
}
# Bit 0 = Active, bit 1 = First, bit 2 = Last (IB_MGMT_RMPP_FLAG_*).
RMPP_FLAG_NAMES = ["active", "first", "last"]
RMPP_ACTIVE, RMPP_FIRST, RMPP_LAST = 0x01, 0x02, 0x04
RMPP_NO_RESPTIME = 0x1F


def mad_title(mgmt_class: int, method: int, attribute_id: int) -> str:
    """Method and attribute by their IBA names, as summaries show them: 'GetTableResp(PathRecord)'."""
    meth = METHODS.get(method, f"0x{method:02x}")
    attr = ATTRIBUTES_BY_CLASS.get(mgmt_class, {}).get(attribute_id, f"0x{attribute_id:04x}")
    return f"{meth}({attr})"


def status_text(status: int, mgmt_class: int | None = None) -> str:
    """Decode a MAD status word into words, e.g. 0x0300 → 'NO_RECORDS'."""
    parts = []
    if mgmt_class == 0x81:  # directed-route SMP: bit 15 is D (direction), not status
        if status & 0x8000:
            parts.append("D=returning")
        status &= 0x7FFF
    common = status & 0x00FF
    if common:
        parts.append(MAD_STATUS.get(common, f"common 0x{common:02x}"))
    cls = status & 0xFF00
    if cls:
        table = SA_STATUS if mgmt_class in (None, MGMT_CLASS_SA) else {}
        parts.append(table.get(cls, f"class-specific 0x{cls >> 8:02x}"))
    if not (status & 0x00FF or status & 0xFF00):
        parts.append("success")
    return ", ".join(parts)


class _ClassAttributeField(XShortField):
    """AttributeID, named according to the MAD's management class."""

    def i2repr(self, pkt, x):
        names = ATTRIBUTES_BY_CLASS.get(getattr(pkt, "mgmt_class", None), {})
        if x in names:
            return f"{names[x]} (0x{x:04x})"
        return super().i2repr(pkt, x)


class _StatusField(XShortField):
    def i2repr(self, pkt, x):
        if x is None:
            return super().i2repr(pkt, x)
        return f"0x{x:04x} ({status_text(x, getattr(pkt, 'mgmt_class', None))})"


class MAD(Packet):
    """MAD common header (IBA Vol1 §13.4.3, 24 bytes); a built MAD is padded to 256 bytes."""

    name = "MAD"
    fields_desc = [
        ByteField("base_version", MAD_BASE_VERSION),
        ByteEnumField("mgmt_class", MGMT_CLASS_SA, MGMT_CLASSES),
        ByteField("class_version", SA_CLASS_VERSION),
        ByteEnumField("method", METHOD_GET, METHODS),
        _StatusField("status", 0),
        XShortField("class_specific", 0),
        XLongField("transaction_id", 0),
        _ClassAttributeField("attribute_id", ATTR_PATH_RECORD),
        XShortField("reserved_144", 0),
        XIntField("attribute_modifier", 0),
    ]

    def post_build(self, p, pay):
        p += pay
        if len(p) < MAD_SIZE:
            p += b"\x00" * (MAD_SIZE - len(p))
        return p

    def is_response(self) -> bool:
        return bool(self.method & METHOD_RESP)

    def hashret(self):
        return self.transaction_id.to_bytes(8, "big")

    def answers(self, other):
        return (
            isinstance(other, MAD)
            and other.transaction_id == self.transaction_id
            and self.method == other.method | METHOD_RESP
        )

    def mysummary(self):
        """'MAD CM Send(REP) tid=0x...' (layers above with a summary of their own, SA and CM
        REQ, name the method and attribute themselves)."""
        cls = MGMT_CLASSES.get(self.mgmt_class, f"class 0x{self.mgmt_class:02x}")
        title = mad_title(self.mgmt_class, self.method, self.attribute_id)
        return f"MAD {cls} {title} tid=0x{self.transaction_id:016x}"


class Computed:
    """A field whose None (the default) the build fills in: show() and summary() say
    `computed: <what the build puts there>` (computed_repr), as Scapy does for lengths and
    checksums. Mixed in before the Scapy field class."""

    __slots__ = ()

    def computed_repr(self, pkt) -> str:
        raise AttributeError(f"{type(self).__name__} defines no computed_repr")

    def i2repr(self, pkt, x):
        if x is None and isinstance(pkt, Packet):
            return f"computed: {self.computed_repr(pkt)}"
        return super().i2repr(pkt, x)


class WhenActiveField(Computed, ByteEnumField):
    """An RMPP header byte whose None (the default) the build fills from the flags: `active`
    (the value an active MAD needs) when the Active flag is set, else 0. An explicit value,
    right or wrong, is kept."""

    __slots__ = ["active"]

    def __init__(self, name, active, enum=None):
        super().__init__(name, None, enum or {})
        self.active = active

    def effective(self, pkt) -> int:
        x = getattr(pkt, self.name)
        if x is not None:
            return x
        return self.active if int(pkt.rmpp_flags) & RMPP_ACTIVE else 0

    def computed_repr(self, pkt) -> str:
        return ByteEnumField.i2repr(self, pkt, self.effective(pkt))


class SegmentNumberField(Computed, IntField):
    """RMPP SegmentNumber; None (the default) is 1 on an active DATA MAD, the number the
    kernel's RMPP sender gives a transfer's first segment (mad_rmpp.c send_next_seg counts
    from 1, as rmpp.segment() does), else 0. An explicit value is always kept."""

    def effective(self, pkt) -> int:
        x = getattr(pkt, self.name)
        if x is not None:
            return x
        data = pkt.get_field("rmpp_type").effective(pkt) == RMPP_TYPE_DATA
        return 1 if data and int(pkt.rmpp_flags) & RMPP_ACTIVE else 0

    def computed_repr(self, pkt) -> str:
        return str(self.effective(pkt))


class PayloadLengthField(Computed, IntField):
    """RMPP PayloadLength; None (the default) is computed by RMPP.post_build."""

    def computed_repr(self, pkt) -> str:
        return str(pkt.built_payload_length())


class RMPP(CheckedBits, Packet):
    """RMPP header (IBA Vol1 §13.6.2.1, 12 bytes): 5-bit RRespTime above 3 flag bits.

    rmpp_version and rmpp_type left unset are 1 and DATA on an active MAD (what the kernel's
    RMPP layer requires of one), 0 otherwise; segment_number left unset is 1 on an active
    DATA MAD (a transfer's first segment, or its only one), 0 otherwise. For ACK segments
    payload_length carries
    NewWindowLast. payload_length=None is computed
    for an active DATA MAD as the kernel's RMPP sender fills it (mad_rmpp.c send_next_seg,
    wire-formats.md §2), from the class header and data above this header (MAD padding not
    counted): with FIRST set, the whole message's `20 × segments + data` (what the first
    segment of rmpp.segment() carries; a lone FIRST|LAST MAD is `20 + data`); LAST alone, `20
    + data` of its own slice (= 220 - pad); a middle segment 0; anything else (RMPP inactive,
    ACK, STOP, ABORT) 0. Give the first segment the whole message, or the value, when
    building segments one by one. An explicit value is always kept, malformed or not.
    """

    name = "RMPP"
    fields_desc = [
        WhenActiveField("rmpp_version", RMPP_VERSION),
        WhenActiveField("rmpp_type", RMPP_TYPE_DATA, RMPP_TYPES),
        BitField("r_resp_time", 0, 5),
        FlagsField("rmpp_flags", 0, 3, RMPP_FLAG_NAMES),
        ByteEnumField("rmpp_status", 0, RMPP_STATUS),
        SegmentNumberField("segment_number", None),
        PayloadLengthField("payload_length", None),
    ]

    @property
    def new_window_last(self) -> int:
        return self.payload_length

    def is_active(self) -> bool:
        return bool(int(self.rmpp_flags) & RMPP_ACTIVE)

    def built_payload_length(self, pay: bytes | None = None) -> int:
        """The PayloadLength the build writes (see the class docstring); `pay` is the built
        payload when known."""
        if self.payload_length is not None:
            return self.payload_length
        flags = int(self.rmpp_flags)
        if not flags & RMPP_ACTIVE or self.get_field("rmpp_type").effective(self) != RMPP_TYPE_DATA:
            return 0
        if not flags & (RMPP_FIRST | RMPP_LAST):
            return 0
        if pay is None:
            pay = bytes(self.payload)
        padding = 0
        layer = self.payload
        while layer:  # MAD padding a dissected MAD carries is no data of the message
            if isinstance(layer, MADPadding):
                padding += len(layer.load)
            layer = layer.payload
        class_hdr = getattr(self.payload, "RMPP_CLASS_HDR_SIZE", 0)
        data_len = max(len(pay) - padding - class_hdr, 0)
        if not flags & RMPP_FIRST:
            return class_hdr + data_len  # LAST: its own slice
        seg_size = RMPP_DATA_SIZE - class_hdr
        segments = max(1, -(-data_len // seg_size))
        return class_hdr * segments + data_len

    def post_build(self, p, pay):
        if self.rmpp_version is None or self.rmpp_type is None:
            p = bytes([self.get_field("rmpp_version").effective(self),
                       self.get_field("rmpp_type").effective(self)]) + p[2:]
        if self.segment_number is None:
            p = p[:4] + self.get_field("segment_number").effective(self).to_bytes(4, "big") + p[8:]
        if self.payload_length is None:
            p = p[:8] + self.built_payload_length(pay).to_bytes(4, "big") + p[12:]
        return p + pay


class MADPadding(Raw):
    """Unused bytes at the end of a MAD's data area (kept in place, unlike scapy's Padding,
    which a rebuild moves behind the ICRC/VCRC trailers)."""

    name = "MAD padding"
    show_summary = False  # every MAD has it: summary() names the layers that say something
