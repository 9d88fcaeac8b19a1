"""Subnet Administration: SA header, ComponentMask, PathRecord and ServiceRecord (IBA Vol1
§15.2.1, §15.2.5.16, §15.2.5.14).

Sources: Linux drivers/infiniband/core/sa_query.c path_rec_table and service_rec_table,
include/rdma/ib_sa.h, OpenSM ib_types.h (ib_path_rec_t, ib_service_record_t),
rdma-core libibverbs/sa.h. See wire-formats.md §2-3.
"""

import socket

from scapy.fields import (
    BitField,
    ByteField,
    Field,
    FlagsField,
    FlagValue,
    IP6Field,
    ShortField,
    XBitField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
    XStrFixedLenField,
)
from scapy.packet import Packet, Raw, bind_layers

from ..model.expr import (And, Const, Expr, F, If, Max, Min, Not, Remaining, Under, Within,
                          evaluate_on)
from ..model.hints import ListHint
from .coded import (  # noqa: F401  (MTU_*/RATE_* re-exported: sa.py was their home)
    MTU_BYTES,
    MTU_CODES,
    PATH_RATE_CODES,
    CheckedBits,
    RATE_CODES,
    RATE_GBPS,
    LIDField,
    MTUField,
    RateField,
    SelectorField,
    TimeExponentField,
    time_exponent_seconds,
)
from .mad import (
    ATTR_PATH_RECORD,
    ATTR_SERVICE_RECORD,
    Computed,
    MAD,
    mad_title,
    MADPadding,
    METHOD_GET_TABLE_RESP,
    METHOD_RESP,
    RMPP,
    RMPP_ACTIVE,
    RMPP_FIRST,
    RMPP_LAST,
    RMPP_TYPE_DATA,
    SA_ATTRIBUTES,
)

SA_HDR_SIZE = 20  # SM_Key, AttributeOffset, Reserved, ComponentMask
SA_DATA_SIZE = 200
SA_MAD_HDR_SIZE = 56  # MAD 24 + RMPP 12 + SA 20
PATH_RECORD_SIZE = 64
SERVICE_RECORD_SIZE = 176
SERVICE_NAME_SIZE = 64

# Selectors (enum ib_sa_selector, OpenSM IB_PATH_SELECTOR_*; wire-formats.md §3): 3 is the
# best there is, the largest MTU or rate and the smallest PacketLifeTime.
SELECTORS = {0: "greater than", 1: "less than", 2: "exactly", 3: "largest available"}
LIFETIME_SELECTORS = {**SELECTORS, 3: "smallest available"}
SELECTOR_EXACTLY = 2


def packet_life_time_seconds(code: int) -> float:
    """PacketLifeTime is an exponent: 4.096 µs × 2^code (IBA Vol1 §15.2.5.16)."""
    return time_exponent_seconds(code)


def gid_text(packed: bytes) -> str:
    """A GID as every ibpath output writes it: RFC 5952 IPv6 text as inet_ntop() gives it,
    which Scapy and Wireshark print too (fe80::2:c903:0:1, an IPv4-mapped RoCE GID as
    ::ffff:192.168.2.25, whatever the Python version)."""
    return socket.inet_ntop(socket.AF_INET6, packed)


class GIDField(IP6Field):
    """A 128-bit IB GID, shown as IPv6 text (fe80::2:c903:0:1; see gid_text)."""


UNTERMINATED = "\\c"  # ends the text of a name no NUL ends (name_text)


def name_text(raw: bytes) -> str:
    r"""A NUL-terminated UTF-8 name (ServiceName, IBA 15.2.5.14) as every ibpath output shows
    it: its bytes up to the first NUL, as UTF-8 text, with a backslash written \\, and a byte
    that is not part of a valid UTF-8 sequence or is a control character (C0, DEL) written
    \xHH. A name that no NUL ends (all its bytes are the name) is followed by \c. Text is
    never ambiguous: every backslash in it starts an escape."""
    end = raw.find(b"\0")
    body = raw if end < 0 else raw[:end]
    out = []
    for ch in body.decode("utf-8", "surrogateescape"):
        o = ord(ch)
        if 0xDC80 <= o <= 0xDCFF:  # a byte of no valid sequence (surrogateescape)
            out.append(f"\\x{o - 0xDC00:02x}")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif ch == "\\":
            out.append("\\\\")
        else:
            out.append(ch)
    return "".join(out) + (UNTERMINATED if end < 0 else "")


def name_unterminated(text: str) -> bool:
    """Whether name_text's text says that no NUL ended the name: it ends in the escape \\c
    (a backslash of the name is written doubled, so an even run of them precedes the escape)."""
    if not text.endswith(UNTERMINATED):
        return False
    body = text[:-len(UNTERMINATED)]
    return (len(body) - len(body.rstrip("\\"))) % 2 == 0


class NameField(XStrFixedLenField):
    """A fixed-size NUL-terminated UTF-8 name: the bytes on the wire, shown as name_text
    (every engine and the plugin). Set it with text (encoded UTF-8, NUL-padded) or bytes."""

    as_text = True

    def any2i(self, pkt, x):
        return super().any2i(pkt, x.encode("utf-8") if isinstance(x, str) else x)

    def text(self, pkt, x) -> str:
        """name_text of the bytes the build writes (NUL-padded to the field's size)."""
        size = self.length_from(pkt)
        return name_text(bytes(x or b"")[:size].ljust(size, b"\0"))

    def i2repr(self, pkt, x):
        return f'"{self.text(pkt, x)}"'


class PathRecord(CheckedBits, Packet):
    """PathRecord attribute 0x0035 (IBA Vol1 §15.2.5.16, 64 bytes, SA wire format).

    Layout: kernel sa_query.c path_rec_table; reserved fields are named by bit offset.
    """

    name = "PathRecord"
    fields_desc = [
        XLongField("service_id", 0),
        GIDField("dgid", "::"),
        GIDField("sgid", "::"),
        LIDField("dlid", 0),
        LIDField("slid", 0),
        BitField("raw_traffic", 0, 1),
        XBitField("reserved_353", 0, 3),
        XBitField("flow_label", 0, 20),
        ByteField("hop_limit", 0),
        XByteField("tclass", 0),
        BitField("reversible", 0, 1),
        BitField("numb_path", 0, 7),
        XShortField("pkey", 0xFFFF),
        XBitField("qos_class", 0, 12),
        BitField("sl", 0, 4),
        SelectorField("mtu_selector", SELECTOR_EXACTLY, SELECTORS),
        MTUField("mtu", 4, 6),
        SelectorField("rate_selector", SELECTOR_EXACTLY, SELECTORS),
        RateField("rate", 3, 6, PATH_RATE_CODES),
        SelectorField("packet_life_time_selector", SELECTOR_EXACTLY, LIFETIME_SELECTORS),
        TimeExponentField("packet_life_time", 18, 6),
        ByteField("preference", 0),
        XBitField("reserved_464", 0, 48),
    ]

    # ComponentMask bit of each component (ib_sa.h IB_SA_PATH_REC_*, OpenSM IB_PR_COMPMASK_*).
    # ServiceID takes two bits (OpenSM SERVICEID_MSB/_LSB); bits 7 and 23+ are reserved.
    COMPONENTS = {
        "service_id": (0, 1),
        "dgid": (2,),
        "sgid": (3,),
        "dlid": (4,),
        "slid": (5,),
        "raw_traffic": (6,),
        "flow_label": (8,),
        "hop_limit": (9,),
        "tclass": (10,),
        "reversible": (11,),
        "numb_path": (12,),
        "pkey": (13,),
        "qos_class": (14,),
        "sl": (15,),
        "mtu_selector": (16,),
        "mtu": (17,),
        "rate_selector": (18,),
        "rate": (19,),
        "packet_life_time_selector": (20,),
        "packet_life_time": (21,),
        "preference": (22,),
    }
    # The components OpenSM reads only with their selector (osm_sa_path_record.c
    # pr_rcv_get_path_parms: MTU, rate and PacketLifeTime are judged when both the value's and
    # the selector's bits are set; either alone is ignored): value field -> selector field.
    SELECTED = {"mtu": "mtu_selector", "rate": "rate_selector",
                "packet_life_time": "packet_life_time_selector"}

    def extract_padding(self, s):
        return b"", s

    def mysummary(self):
        """'PathRecord fe80::1 > fe80::2 slid 1 dlid 2 pkey 0xffff mtu 2048 rate 10 Gb/s'."""
        rev = " reversible" if self.reversible else ""
        return (f"PathRecord {self.sgid} > {self.dgid} slid {self.slid} dlid {self.dlid} "
                f"pkey 0x{self.pkey:04x} mtu {MTU_CODES.get(self.mtu, self.mtu)} "
                f"rate {PATH_RATE_CODES.get(self.rate, self.rate)}{rev}")


class ServiceRecord(CheckedBits, Packet):
    """ServiceRecord attribute 0x0031 (IBA Vol1 §15.2.5.14, 176 bytes, SA wire format).

    Layout: OpenSM ib_types.h ib_service_record_t, kernel sa_query.c service_rec_table. The
    ServiceData arrays are one field an element, numbered from 0 as the ComponentMask names
    them (ib_sa.h IB_SA_SERVICE_REC_SERVICE_DATA8_0, OpenSM IB_SR_COMPMASK_SDATA8_0).
    """

    name = "ServiceRecord"
    fields_desc = [
        XLongField("service_id", 0),
        GIDField("service_gid", "::"),
        XShortField("service_pkey", 0xFFFF),
        XShortField("reserved_208", 0),
        XIntField("service_lease", 0xFFFFFFFF),
        XStrFixedLenField("service_key", b"\0" * 16, 16),
        NameField("service_name", b"", SERVICE_NAME_SIZE),
        *[XByteField(f"service_data8_{i}", 0) for i in range(16)],
        *[XShortField(f"service_data16_{i}", 0) for i in range(8)],
        *[XIntField(f"service_data32_{i}", 0) for i in range(4)],
        *[XLongField(f"service_data64_{i}", 0) for i in range(2)],
    ]

    # ComponentMask bit of each component (ib_sa.h IB_SA_SERVICE_REC_*, OpenSM
    # IB_SR_COMPMASK_*): one an element of the ServiceData arrays; bit 3 is the reserved
    # field's, 37 and up are reserved.
    COMPONENTS = {
        "service_id": (0,),
        "service_gid": (1,),
        "service_pkey": (2,),
        "service_lease": (4,),
        "service_key": (5,),
        "service_name": (6,),
        **{f"service_data8_{i}": (7 + i,) for i in range(16)},
        **{f"service_data16_{i}": (23 + i,) for i in range(8)},
        **{f"service_data32_{i}": (31 + i,) for i in range(4)},
        **{f"service_data64_{i}": (35 + i,) for i in range(2)},
    }

    def extract_padding(self, s):
        return b"", s

    def mysummary(self):
        """'ServiceRecord 0x1000000000000001 "ibpath.test" fe80::2 pkey 0xffff lease 0xffffffff'."""
        name = self.get_field("service_name").i2repr(self, self.service_name)
        return (f"ServiceRecord 0x{self.service_id:016x} {name} "
                f"{self.service_gid} pkey 0x{self.service_pkey:04x} lease 0x{self.service_lease:08x}")


def component_names(record_cls=PathRecord) -> list[str]:
    """The name of each of the 64 ComponentMask bits of a query of record_cls: its
    components (a component of two bits, PathRecord's ServiceID, as <field>_msb and
    <field>_lsb), reserved_<bit> for the others. None (an attribute ibpath has no record
    class for, whose components it does not know): bit<n> for every bit."""
    if record_cls is None:
        return [f"bit{bit}" for bit in range(64)]
    names = [f"reserved_{bit}" for bit in range(64)]
    for field, bits in getattr(record_cls, "COMPONENTS", {}).items():
        if len(bits) == 2:
            names[bits[0]] = f"{field}_msb"
            names[bits[1]] = f"{field}_lsb"
        else:
            names[bits[0]] = field
    return names


def reserved_component_bits(record_cls=PathRecord) -> tuple[int, ...]:
    """The ComponentMask bits no component of record_cls has."""
    return tuple(i for i, n in enumerate(component_names(record_cls)) if n.startswith("reserved"))


COMPONENT_MASK_NAMES = component_names(PathRecord)
RESERVED_COMPONENT_BITS = reserved_component_bits(PathRecord)


def selector_pairs(record_cls=PathRecord) -> list[tuple[str, str, int, int]]:
    """(value field, selector field, value bit, selector bit) of each component OpenSM reads
    only with its selector (PathRecord.SELECTED)."""
    comps = record_cls.COMPONENTS
    return [(v, s, comps[v][0], comps[s][0]) for v, s in getattr(record_cls, "SELECTED", {}).items()]


def component_mask_for(record: Packet) -> int:
    """ComponentMask for the fields a user set explicitly on a query record. A value OpenSM
    reads only with its selector (MTU, rate, PacketLifeTime) brings its selector's bit, and a
    selector its value's: the pair is one question, asked with the selector field's value
    ("exactly" unless set) about the value field's (the default unless set)."""
    comps = getattr(record, "COMPONENTS", {})
    partner = {}
    for value, selector in getattr(record, "SELECTED", {}).items():
        partner[value], partner[selector] = selector, value
    mask = 0
    for field in record.fields:
        for name in (field, partner.get(field)):
            for bit in comps.get(name, ()):
                mask |= 1 << bit
    return mask


def component_fields(mask: int, record_cls=PathRecord) -> list[str]:
    """Names of the record fields a ComponentMask selects (ServiceID only when both bits are set)."""
    out = []
    for field, bits in getattr(record_cls, "COMPONENTS", {}).items():
        if all(mask >> b & 1 for b in bits):
            out.append(field)
    return out


class ComponentMask(FlagValue):
    """A ComponentMask value: names its bits like any FlagValue, and is an integer wherever
    Python wants one (hex(), format(), slicing), as the README's examples use it."""

    def __index__(self) -> int:
        return self.value


class ComponentMaskField(Computed, FlagsField):
    """64-bit ComponentMask; bit n = value 1 << n (IB_SA_COMP_MASK(n)). None = computed.
    Its bits are named by the record class of the MAD's attribute (component_names;
    PathRecord's where the SA header stands alone)."""

    def __init__(self, name, default):
        super().__init__(name, default, 64, COMPONENT_MASK_NAMES)

    @staticmethod
    def _record_class(pkt):
        return pkt.record_class() if isinstance(pkt, SAHeader) else PathRecord

    @staticmethod
    def name_sets():
        """(the MAD's AttributeID, {attribute: bit names}) for the attributes of the SA
        table whose record class is not PathRecord (whose names the field has): how the
        plugin names the bits (model.layout Step.flag_sets)."""
        return _mad.attribute_id, {a: component_names(c) for a, c in SA_RECORD_CLASSES.items()
                                   if c is not PathRecord}

    def _fixup_val(self, x):
        v = super()._fixup_val(x)
        return ComponentMask(v.value, v.names) if type(v) is FlagValue else v

    def _named(self, pkt, v):
        if isinstance(v, FlagValue):
            cls = self._record_class(pkt)
            if cls is not PathRecord:
                return ComponentMask(v.value, component_names(cls))
        return v

    def m2i(self, pkt, x):
        return self._named(pkt, super().m2i(pkt, x))

    def any2i(self, pkt, x):
        return self._named(pkt, super().any2i(pkt, x))

    def i2repr(self, pkt, x):
        return super().i2repr(pkt, self._named(pkt, x))

    def computed_repr(self, pkt) -> str:
        mask = pkt.built_component_mask()
        fields = component_fields(mask, self._record_class(pkt))
        return f"0x{mask:x} ({' '.join(fields) or 'none'})"


class AttributeOffsetField(Computed, ShortField):
    """AttributeOffset (record stride in 8-byte words); None is computed by the build."""

    def computed_repr(self, pkt) -> str:
        return str(pkt.built_attribute_offset())


# The SA attribute table: the record class of each SA AttributeID whose records ibpath reads
# (records of other attributes stay raw bytes). Every engine reads its records through this
# table (the Scapy layers, the fast path and its C decoder, the plugin, the renderer): a new
# attribute is a layer class and a register_sa_record call.
SA_RECORD_CLASSES: dict[int, type] = {}


def register_sa_record(attribute_id: int, cls: type, name: str | None = None) -> None:
    """Read the records of SA attribute `attribute_id` as `cls` (a fixed-size layer), named
    `name` in MAD titles (default: the class's name). Engines that compile plans from the
    table compile them again after a change (sa_table_generation)."""
    _NAMES_BEFORE.setdefault(attribute_id, SA_ATTRIBUTES.get(attribute_id))
    SA_RECORD_CLASSES[attribute_id] = cls
    SA_ATTRIBUTES[attribute_id] = name or SA_ATTRIBUTES.get(attribute_id) or cls.__name__
    _rebuild_records_hint()


def unregister_sa_record(attribute_id: int) -> None:
    """Undo register_sa_record (a test's toy attribute)."""
    SA_RECORD_CLASSES.pop(attribute_id, None)
    before = _NAMES_BEFORE.pop(attribute_id, None)
    if before is None:
        SA_ATTRIBUTES.pop(attribute_id, None)
    else:
        SA_ATTRIBUTES[attribute_id] = before
    _rebuild_records_hint()


_NAMES_BEFORE: dict[int, str | None] = {}

_GENERATION = [0]


def sa_table_generation() -> int:
    """A number that changes with every change of the SA attribute table."""
    return _GENERATION[0]


class SARecordListField(Field):
    """The records of an SA MAD: N records at a stride of AttributeOffset × 8 bytes.

    How many records the data holds depends on the method and RMPP state
    (wire-formats.md §2); SAHeader.record_count() decides, so the rule lives in one place.
    """

    islist = 1
    holds_packets = 1

    def __init__(self, name):
        super().__init__(name, None)

    def i2m(self, pkt, val):
        return val

    def getfield(self, pkt, s):
        cls = pkt.record_class()
        count = pkt.record_count(len(s))
        if cls is None or not count:
            return s, []
        stride = pkt.record_stride(cls)
        out = []
        for i in range(count):
            chunk = s[i * stride:(i + 1) * stride]
            out.append(cls(chunk))
        return s[count * stride:], out

    def addfield(self, pkt, s, val):
        if not val:
            return s
        stride = pkt.record_stride(type(val[0]))
        for rec in val:
            b = bytes(rec)
            s += b + b"\x00" * (stride - len(b)) if len(b) < stride else b
        return s

    def i2repr(self, pkt, x):
        return f"[{len(x or [])} record(s)]"

    def any2i(self, pkt, x):
        return list(x) if x is not None else []


_mad, _rmpp = Under("MAD"), Under("RMPP")
_FIRST_LAST = RMPP_FIRST | RMPP_LAST
# A MAD under struct ib_user_mad (layers/umad.py) is a umad message, not a wire MAD: the
# kernel's RMPP layer segments what a process writes and hands a process each answer whole,
# the first segment's headers followed by all the data, unpadded (user_mad.c copy_recv_mad;
# mad_rmpp.c get_mad_len). Its RMPP header is never one segment of many.
IN_UMAD = Within("UserMad")
IS_SEGMENT = And(Not(IN_UMAD), _rmpp.rmpp_flags & RMPP_ACTIVE, _rmpp.rmpp_type == RMPP_TYPE_DATA,
                 (_rmpp.rmpp_flags & _FIRST_LAST) != _FIRST_LAST)


def record_size() -> Expr:
    """The size of the record class the MAD's attribute selects (0: none), from the table."""
    size: Expr = Const(0)
    for attr, cls in sorted(SA_RECORD_CLASSES.items(), reverse=True):
        size = If(_mad.attribute_id == attr, len(cls()), size)
    return size


def record_stride() -> Expr:
    """Records lie AttributeOffset × 8 bytes apart, never closer than their own size (a query
    or GetResp says AttributeOffset 0)."""
    return Max(F("attribute_offset") * 8, record_size())


def record_count(stride: Expr) -> Expr:
    """How many records an SA MAD carries (wire-formats.md §2): none on an error response; a
    umad message with RMPP active is whole: every record its data holds; on the wire, with
    RMPP active, what PayloadLength covers of a whole (FIRST|LAST) DATA transfer, none on a
    lone segment; a non-RMPP GetTableResp is not IBA-conformant: its first record is shown
    when AttributeOffset is set; otherwise one record (a query template or GetResp)."""
    return If(
        And(_mad.method & METHOD_RESP, _mad.status != 0), 0,
        If(_rmpp.rmpp_flags & RMPP_ACTIVE,
           If(IN_UMAD, Remaining() // stride,
              If(And(_rmpp.rmpp_type == RMPP_TYPE_DATA,
                     (_rmpp.rmpp_flags & _FIRST_LAST) == _FIRST_LAST),
                 Min(Max(_rmpp.payload_length - SA_HDR_SIZE, 0), Remaining()) // stride, 0)),
           If(_mad.method == METHOD_GET_TABLE_RESP,
              If(And(Remaining() >= stride, F("attribute_offset") != 0), 1, 0),
              If(Remaining() >= stride, 1, 0))))


def records_hint() -> ListHint:
    """SAHeader's `records`: counted, strided and chosen by the SA attribute table."""
    stride = record_stride()
    return ListHint(count=record_count(stride), stride=stride, selector=_mad.attribute_id,
                    classes=SA_RECORD_CLASSES)


class SAHeader(Packet):
    """SA header (IBA Vol1 §15.2.1.1) followed by the SA records of the MAD's attribute.

    component_mask=None is computed from the fields set on the first record;
    attribute_offset=None is the record size in 8-byte words on a response with records, else 0.
    """

    name = "SA"
    lua_layer = "sa"
    RMPP_CLASS_HDR_SIZE = SA_HDR_SIZE  # counted by RMPP PayloadLength once per segment
    fields_desc = [
        XLongField("sm_key", 0),
        AttributeOffsetField("attribute_offset", None),
        XShortField("reserved_80", 0),
        ComponentMaskField("component_mask", None),
        SARecordListField("records"),
    ]
    field_hints = {"records": None}  # records_hint(), made when the table changes

    # -- context from the layers below --------------------------------------------------
    def _mad(self):
        p = self.underlayer
        while p is not None and not isinstance(p, MAD):
            p = p.underlayer
        return p

    def _rmpp(self):
        p = self.underlayer
        return p if isinstance(p, RMPP) else None

    def record_class(self):
        mad = self._mad()
        hint = self.field_hints["records"]
        return hint.classes.get(mad.attribute_id if mad is not None else ATTR_PATH_RECORD)

    def record_stride(self, cls) -> int:
        return evaluate_on(self.field_hints["records"].stride, self)

    def record_count(self, data_len: int) -> int:
        """How many records the data area holds (wire-formats.md §2)."""
        if self.record_class() is None:
            return 0
        return evaluate_on(self.field_hints["records"].count, self, data_len)

    def is_segment(self) -> bool:
        """True when this MAD is one segment of a multi-segment RMPP transfer."""
        return bool(evaluate_on(IS_SEGMENT, self))

    # -- building ----------------------------------------------------------------------------
    def built_component_mask(self) -> int:
        """The ComponentMask the build writes: the field when set, else the components set
        explicitly on the first record."""
        if self.component_mask is not None:
            return int(self.component_mask)
        return component_mask_for(self.records[0]) if self.records else 0

    def built_attribute_offset(self) -> int:
        """The AttributeOffset the build writes: the field when set, else the record size in
        8-byte words on a response that carries records, else 0."""
        if self.attribute_offset is not None:
            return self.attribute_offset
        mad = self._mad()
        if self.records and mad is not None and mad.method & METHOD_RESP:
            return len(bytes(self.records[0])) // 8
        return 0

    def post_build(self, p, pay):
        if self.component_mask is None:
            p = p[:12] + self.built_component_mask().to_bytes(8, "big") + p[20:]
        if self.attribute_offset is None:
            p = p[:8] + self.built_attribute_offset().to_bytes(2, "big") + p[10:]
        return p + pay

    def guess_payload_class(self, payload):
        if self.is_segment() or self.record_class() is None:
            return Raw
        return MADPadding

    def mysummary(self):
        """'SA GetTableResp(PathRecord) 4 records', 'SA Get(PathRecord) 1 record
        comp_mask=0x380f (computed)', 'SA GetTableResp(PathRecord) RMPP segment 2'."""
        mad = self._mad()
        out = "SA " + (mad_title(mad.mgmt_class, mad.method, mad.attribute_id) if mad else "")
        rmpp = self._rmpp()
        if self.is_segment():
            return f"{out} RMPP segment {rmpp.get_field('segment_number').effective(rmpp)}"
        if self.record_class() is None:
            out += " (records not decoded)"
        else:
            n = len(self.records)
            out += f" {n} record{'' if n == 1 else 's'}"
        if mad is None or not mad.method & METHOD_RESP:
            computed = " (computed)" if self.component_mask is None else ""
            out += f" comp_mask=0x{self.built_component_mask():x}{computed}"
        elif mad.status:
            out += f" status 0x{mad.status:04x}"
        return out


def _rebuild_records_hint() -> None:
    SAHeader.field_hints = {**SAHeader.field_hints, "records": records_hint()}
    _GENERATION[0] += 1


register_sa_record(ATTR_PATH_RECORD, PathRecord)
register_sa_record(ATTR_SERVICE_RECORD, ServiceRecord)

bind_layers(MAD, RMPP, mgmt_class=0x03)
bind_layers(RMPP, SAHeader)
