"""The layout model of every layer: Scapy layer classes read into ProtoFields and dissection steps
(offsets, widths, byte order, dispatch), the one model the Lua generator, the fast path and the
tshark engine all take their fields from.

Everything comes from introspection: field classes give the type, width, byte order and
display base; enum fields their value strings; FlagsField its bit names; bind_layers() the
dispatch. What Scapy can only say with a lambda must be declared on the layer as a hint
(ibpath_scapy.model.hints); a layer that needs one and lacks it is refused with a clear error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from scapy.fields import (
    ConditionalField,
    FlagsField,
    IP6Field,
    IPField,
    MACField,
    MultipleTypeField,
    PacketField,
    PacketListField,
    StrField,
    StrFixedLenField,
    StrLenField,
    ThreeBytesField,
    TrailerField,
    _BitField,
    _EnumField,
)
from scapy.packet import Packet

from .hints import ByteOrderHint, LengthHint, ListHint, NextLayer, WhenHint


class GeneratorError(Exception):
    """A layer cannot be turned into Lua; the message names the layer and field."""


_ACRONYMS = {"lid", "gid", "qpn", "psn", "sl", "mtu", "id", "tid", "guid", "vl", "crc", "icrc",
             "vcrc", "rmpp", "sa", "cm", "qp", "ca", "eecn", "rdc", "srq", "sap", "ari", "sm",
             "lnh", "bth", "deth", "grh", "lrh", "ip", "udp", "nla", "ls", "sgid", "dgid",
             "slid", "dlid", "ts", "msb", "lsb", "rnr", "ack", "ee", "psn", "pdu", "erf"}
_SPELLINGS = {"tclass": "TClass", "pkey": "P_Key", "qos": "QoS", "lver": "LVer",
              "dqpn": "Dest QP", "ackreq": "AckReq", "migreq": "MigReq", "fecn": "FECN",
              "becn": "BECN", "padcount": "PadCnt", "q": "Q", "nlmsg": "nlmsg"}
_FILTER_OK = re.compile(r"[^a-z0-9_.-]")


def label_for(name: str) -> str:
    """'primary_local_lid' → 'Primary Local LID'."""
    words = [w for w in name.split("_") if w]
    def word(w):
        lw = w.lower()
        if w.isupper() and len(w) > 1:
            return w  # the spec's own capitals (GMP, INBOUND)
        return _SPELLINGS.get(lw) or (w.upper() if lw in _ACRONYMS else w.capitalize())

    return " ".join(word(w) for w in words) or name


def filter_name(text: str) -> str:
    """A string usable in a display-filter name (lowercase letters, digits, _ - .)."""
    s = _FILTER_OK.sub("_", text.lower()).strip("._-")
    return s or "x"


@dataclass
class Item:
    """One ProtoField."""

    abbrev: str
    label: str
    ftype: str  # uint8 uint16 uint24 uint32 uint64 bool ipv4 ipv6 ether bytes
    base: str | None = None  # HEX, DEC or DEC_HEX for integers
    mask: int | None = None
    valuestring: dict | None = None
    bool_bits: int = 0  # for bool: width of the integer the mask applies to
    desc: str = ""


@dataclass
class Step:
    """One field of a layer, in wire order."""

    name: str
    kind: str  # int, bitint, ipv6, ether, bytes, flags, trailer, list, packet, varbytes
    offset: int | None  # bytes from the layer start when static, else None
    nbytes: int = 0  # bytes of the window read
    bit_off: int = 0  # bits from the window's MSB
    bits: int = 0
    little_endian: bool = False
    item: Item | None = None
    flags: list[tuple[Item, int, int]] = field(default_factory=list)  # (item, win off, win len)
    hint: object = None
    when: object = None  # WhenHint for a ConditionalField
    byte_order: object = None  # ByteOrderHint for an integer read in either byte order
    sub: type | None = None  # PacketField class
    wide_value: bool = False  # value wider than 32 bits (kept as UInt64 + number)
    text: bool = False  # bytes shown as a NUL-terminated UTF-8 name (layers.sa.name_text)
    # flags whose bits are named by another field's value (the SA ComponentMask by the MAD's
    # attribute): the Expr of that value, and (value, flags) pairs; `flags` where none matches
    flag_selector: object = None
    flag_sets: list = field(default_factory=list)


@dataclass
class LayerModel:
    cls: type
    key: str  # class name: the key the emitted code and Under() use
    layer: str  # the <layer> of ibpath.<layer>.<field>
    proto_name: str
    title: str
    steps: list[Step]
    fixed_len: int  # bytes before the first variable-length step
    static_len: int | None  # total length when every step is static
    bindings: list[tuple[dict, type]]
    next_hints: list[NextLayer]


def layer_name(cls: type) -> str:
    return getattr(cls, "lua_layer", None) or cls.__name__.lower()


def _enum_table(fld) -> dict | None:
    if isinstance(fld, _EnumField):
        table = {}
        for k, v in getattr(fld, "i2s", {}).items():
            if isinstance(k, int) and 0 <= k < 2 ** 53:
                table[k] = str(v)
        return table or None
    return None


def _base(fld) -> str:
    """Display base of an integer field: the field's own `lua_base` (LIDs: DEC_HEX), else
    HEX for Scapy's X*Fields, else DEC."""
    return getattr(fld, "lua_base", None) or ("HEX" if _is_hex(fld) else "DEC")


def _is_hex(fld) -> bool:
    return type(fld).__name__.startswith("X") or any(
        c.__name__.startswith("X") for c in type(fld).__mro__[1:4])


def _int_ftype(nbytes: int) -> str:
    return {1: "uint8", 2: "uint16", 3: "uint24", 4: "uint32"}.get(nbytes, "uint64")


def _fixed_bytes(fld) -> int | None:
    """Byte length of a fixed-size non-bit field, or None when it varies."""
    if isinstance(fld, ThreeBytesField) or type(fld).__name__ in ("LEThreeBytesField",
                                                                  "XLE3BytesField"):
        return 3
    if isinstance(fld, StrFixedLenField):
        try:
            return int(fld.length_from(None))
        except Exception:  # a length that depends on the packet
            return None
    if isinstance(fld, (StrField, StrLenField, PacketListField, PacketField)) or getattr(fld, "islist", 0):
        return None  # (StrFixedLenField, a StrField too, returned above)
    sz = getattr(fld, "sz", None)
    return sz if isinstance(sz, int) and sz > 0 else None


class _Partial(Exception):
    """build_layer(partial=True) stops at the first field it cannot model."""


def build_layer(cls: type, prefix: str, names_seen: set[str] | None = None,
                partial: bool = False) -> LayerModel:
    """Model one Scapy layer class. With partial, a field that needs a hint the layer lacks
    (a Scapy layer ibpath does not own: IP's options, say) ends the model instead of being
    refused: the fields before it keep their offsets (what layer_layout reads)."""
    if not (isinstance(cls, type) and issubclass(cls, Packet)):
        raise GeneratorError(f"{cls!r} is not a Scapy Packet class")
    layer = filter_name(layer_name(cls))
    proto_name = f"{prefix}.{layer}"
    hints = getattr(cls, "field_hints", {}) or {}
    used: set[str] = set() if names_seen is None else names_seen
    steps: list[Step] = []
    le_group: tuple[int, int] | None = None  # (start bit, bytes) of a little-endian bit group
    bitpos: int | None = 0  # bits from the layer start; None once a variable step passed
    fixed_len = None

    def refuse(message: str):
        raise _Partial() if partial else GeneratorError(message)

    def item(name, ftype, **kw):
        abbrev = f"{proto_name}.{filter_name(name)}"
        base_abbrev, n = abbrev, 2
        while abbrev in used:
            abbrev, n = f"{base_abbrev}_{n}", n + 1
        used.add(abbrev)
        return Item(abbrev=abbrev, label=label_for(name), ftype=ftype, **kw)

    try:
        for raw_fld in cls.fields_desc:
            when = order = None
            fld = raw_fld
            if isinstance(fld, MultipleTypeField):
                order = hints.get(fld.name)
                if not isinstance(order, ByteOrderHint):
                    refuse(f"{cls.__name__}.{fld.name}: a MultipleTypeField needs a ByteOrderHint "
                           f"in {cls.__name__}.field_hints (its conditions are Python lambdas)")
                fld = _either_order(fld)
                if fld is None:
                    refuse(f"{cls.__name__}.{raw_fld.name}: a MultipleTypeField is modelled "
                           "only as one integer in both byte orders")
            if isinstance(fld, ConditionalField):
                when = hints.get(fld.name)
                if not isinstance(when, WhenHint):
                    refuse(
                        f"{cls.__name__}.{fld.name}: a ConditionalField needs a WhenHint in "
                        f"{cls.__name__}.field_hints (its condition is a Python lambda)")
                fld = fld.fld
            if isinstance(fld, TrailerField):
                inner = fld.fld
                nb = inner.sz
                steps.append(Step(fld.name, "trailer", None, nbytes=nb,
                                  little_endian=inner.fmt[0] == "<",
                                  item=item(fld.name, _int_ftype(nb), base="HEX")))
                continue
            offset = bitpos // 8 if bitpos is not None and bitpos % 8 == 0 else None
            if isinstance(fld, _BitField):
                if bitpos is None:
                    raise GeneratorError(f"{cls.__name__}.{fld.name}: bit field after a variable-length field")
                if le_group is None and fld.rev:
                    # scapy: a little-endian group of tot_size bytes is byte-reversed, then read
                    # MSB first (tot_size=-N on its first field, end_tot_size=-N on its last)
                    if bitpos % 8 or fld.tot_size < 1:
                        raise GeneratorError(f"{cls.__name__}.{fld.name}: little-endian bit group "
                                             "must start on a byte boundary")
                    le_group = (bitpos, fld.tot_size)
                steps.append(_bit_step(cls, fld, bitpos, item, when, le_group))
                bitpos += fld.size
                if le_group and bitpos >= le_group[0] + 8 * le_group[1]:
                    le_group = None
                continue
            if bitpos is not None and bitpos % 8:
                raise GeneratorError(f"{cls.__name__}.{fld.name}: the bit fields before it end mid-byte")
            nb = _fixed_bytes(fld)
            if isinstance(fld, IP6Field):
                step = Step(fld.name, "ipv6", offset, nbytes=16, item=item(fld.name, "ipv6"))
            elif isinstance(fld, IPField):
                step = Step(fld.name, "ipv4", offset, nbytes=4, item=item(fld.name, "ipv4"))
            elif isinstance(fld, MACField):
                step = Step(fld.name, "ether", offset, nbytes=6, item=item(fld.name, "ether"))
            elif isinstance(fld, PacketField) and not isinstance(fld, PacketListField):
                sub = fld.cls
                step = Step(fld.name, "packet", offset, sub=sub)
            elif getattr(fld, "holds_packets", 0) or isinstance(fld, PacketListField):
                h = hints.get(fld.name)
                if not isinstance(h, ListHint):
                    refuse(
                        f"{cls.__name__}.{fld.name}: a packet list needs a ListHint in "
                        f"{cls.__name__}.field_hints (count/stride/item class)")
                step = Step(fld.name, "list", offset, hint=h)
            elif nb is None:
                h = hints.get(fld.name)
                if not isinstance(h, LengthHint):
                    refuse(
                        f"{cls.__name__}.{fld.name}: a variable-length field needs a LengthHint in "
                        f"{cls.__name__}.field_hints")
                step = Step(fld.name, "varbytes", offset, hint=h, item=item(fld.name, "bytes"))
            elif isinstance(fld, (StrFixedLenField,)) or not hasattr(fld, "fmt") or fld.fmt[-1] in "sp":
                step = Step(fld.name, "bytes", offset, nbytes=nb, item=item(fld.name, "bytes"),
                            text=bool(getattr(fld, "as_text", False)))
            else:
                le = fld.fmt[0] == "<"
                step = Step(fld.name, "int", offset, nbytes=nb, bits=nb * 8, little_endian=le,
                            wide_value=nb > 4,
                            item=item(fld.name, _int_ftype(nb), base=_base(fld),
                                      valuestring=_enum_table(fld)))
            step.when = when
            step.byte_order = order
            steps.append(step)
            if step.kind in ("list", "varbytes") or when is not None or (
                    step.kind == "packet" and static_length(step.sub) is None):
                if fixed_len is None:
                    fixed_len = (bitpos or 0) // 8
                bitpos = None
            elif bitpos is not None:
                size = static_length(step.sub) if step.kind == "packet" else step.nbytes
                bitpos += size * 8
    except _Partial:  # (partial only) the fields so far are the model
        if fixed_len is None:
            fixed_len = (bitpos or 0) // 8
        bitpos = None
    if bitpos is not None and bitpos % 8:
        raise GeneratorError(f"{cls.__name__}: its bit fields end mid-byte")
    static = None if bitpos is None else bitpos // 8
    bindings = [(dict(fv), sub) for sub, fv in _bindings(cls)]
    return LayerModel(cls=cls, key=cls.__name__, layer=layer, proto_name=proto_name,
                      title=str(getattr(cls, "_name", None) or cls.__name__), steps=steps,
                      fixed_len=fixed_len if fixed_len is not None else (static or 0),
                      static_len=static, bindings=bindings,
                      next_hints=list(getattr(cls, "payload_hints", []) or []))


def _either_order(fld: MultipleTypeField):
    """The one field a MultipleTypeField stands for when it is an integer in both byte orders
    (its default), else None: other alternatives are not modelled."""
    fields = [f for f, _cond in fld.flds] + [fld.dflt]
    orders = sorted(str(getattr(f, "fmt", " "))[0] for f in fields)
    sizes = {getattr(f, "sz", None) for f in fields}
    if (len(fields) != 2 or orders not in (["!", "<"], ["<", ">"]) or len(sizes) != 1
            or any(isinstance(f, (_BitField, ConditionalField)) for f in fields)):
        return None
    return fld.dflt


def _bindings(cls):
    """(class, field values) pairs bind_layers() registered on cls, in Scapy's order."""
    out = []
    for fv, sub in getattr(cls, "payload_guess", []):
        out.append((sub, fv))
    return out


def _bit_step(cls, fld, bitpos: int, item, when, group: tuple[int, int] | None = None) -> Step:
    w = fld.size
    base = _base(fld)
    if group is not None:
        # inside a little-endian group: masks apply to the group read as an LE integer
        nbytes, rel, start = group[1], bitpos - group[0], group[0] // 8
        if nbytes > 4:
            raise GeneratorError(f"{cls.__name__}.{fld.name}: little-endian bit group wider than 32 bits")
        if isinstance(fld, FlagsField):
            return _flags_step(cls, fld, start, rel, nbytes, item, little_endian=True)
        mask = ((1 << w) - 1) << (nbytes * 8 - rel - w)
        it = item(fld.name, _int_ftype(nbytes), base=base,
                  mask=None if mask == (1 << nbytes * 8) - 1 else mask, valuestring=_enum_table(fld))
        return Step(fld.name, "bitint", start, nbytes=nbytes, bit_off=rel, bits=w, item=it,
                    when=when, little_endian=True)
    start, end = bitpos // 8, (bitpos + w - 1) // 8
    nbytes = end - start + 1
    bit_off = bitpos % 8
    if isinstance(fld, FlagsField):
        if bit_off and bit_off + w > 32:
            raise GeneratorError(f"{cls.__name__}.{fld.name}: unaligned flags wider than a word")
        return _flags_step(cls, fld, start, bit_off, (bit_off + w + 7) // 8, item)
    if nbytes <= 4:
        mask = ((1 << w) - 1) << (nbytes * 8 - bit_off - w)
        if mask == (1 << (nbytes * 8)) - 1:
            mask = None
        it = item(fld.name, _int_ftype(nbytes), base=base, mask=mask,
                  valuestring=_enum_table(fld))
        return Step(fld.name, "bitint", start, nbytes=nbytes, bit_off=bit_off, bits=w, item=it,
                    when=when)
    if bit_off == 0 and w % 8 == 0:
        # byte-aligned: a plain integer read (no mask needed); an aligned 128-bit field is a
        # GID / IPv6 address in every layer that has one (GRH SGID/DGID)
        if w == 128:
            return Step(fld.name, "ipv6", start, nbytes=16, item=item(fld.name, "ipv6"), when=when)
        if w <= 64:
            it = item(fld.name, _int_ftype(nbytes), base=base,
                      valuestring=_enum_table(fld))
            return Step(fld.name, "int", start, nbytes=nbytes, bits=w, item=it, when=when,
                        wide_value=nbytes > 4)
        return Step(fld.name, "bytes", start, nbytes=nbytes, item=item(fld.name, "bytes"), when=when)
    if w > 64:
        raise GeneratorError(f"{cls.__name__}.{fld.name}: unaligned bit field wider than 64 bits")
    # wider than a 32-bit window: no ProtoField mask can express it (masks stop at 32 bits);
    # the value is computed with TvbRange:bitfield and added explicitly.
    it = item(fld.name, "uint64", base=base, valuestring=_enum_table(fld))
    return Step(fld.name, "bitint", start, nbytes=nbytes, bit_off=bit_off, bits=w, item=it,
                when=when, wide_value=True)


def _flags_step(cls, fld, start: int, bit_off: int, nbytes: int, item,
                little_endian: bool = False) -> Step:
    """A FlagsField: the whole value, then one bool per named bit (masks on 32-bit windows:
    ProtoField ignores masks above 32 bits)."""
    w = fld.size
    wide = nbytes > 4
    if wide:
        parent = item(fld.name, "uint64", base="HEX")
    else:
        mask = ((1 << w) - 1) << (nbytes * 8 - bit_off - w)
        parent = item(fld.name, _int_ftype(nbytes), base="HEX",
                      mask=None if mask == (1 << nbytes * 8) - 1 else mask)
    step = Step(fld.name, "flags", start, nbytes=nbytes, bit_off=bit_off, bits=w,
                little_endian=little_endian, item=parent, wide_value=wide)

    def bools(named: list[tuple[int, str]]) -> list:
        out = []
        for n, name in named:
            abbrev = f"{fld.name}.{name}"
            if wide:
                k = n // 32
                win_off = start + nbytes - 4 * (k + 1)
                it = item(abbrev, "bool", mask=1 << (n % 32), bool_bits=32)
                out.append((it, win_off, 4))
            else:
                shift = nbytes * 8 - bit_off - w + n
                it = item(abbrev, "bool", mask=1 << shift, bool_bits=nbytes * 8)
                out.append((it, start, nbytes))
            it.label = label_for(name)
        return out

    step.flags = bools(flag_items(fld))
    sets = getattr(fld, "name_sets", None)
    if sets is not None:  # (selector Expr, {value: bit names}): model.layout's flag_sets
        step.flag_selector, by_value = sets()
        step.flag_sets = [(value, bools(flag_items(fld, names)))
                          for value, names in sorted(by_value.items())]
    return step


def flag_items(fld, names=None) -> list[tuple[int, str]]:
    """(bit, name) of the flags that get an item of their own. Names a layer gives undefined
    bits (bit12, reserved_7) get none: the whole value shows them, and rules flag them."""
    names = names if names is not None else fld.names
    names = list(names) if isinstance(names, (list, tuple, str)) else []
    return [(n, name) for n, name in enumerate(names)
            if name and not re.fullmatch(r"(bit|reserved_?)\d+", name)]


_STATIC: dict[type, int | None] = {}


def static_length(cls: type) -> int | None:
    """Bytes of a layer whose every field has a fixed size, else None."""
    if cls not in _STATIC:
        _STATIC[cls] = None
        try:
            _STATIC[cls] = build_layer(cls, "x").static_len
        except GeneratorError:
            _STATIC[cls] = None
    return _STATIC[cls]


@dataclass(frozen=True)
class FieldLayout:
    """Where one field of a header lies: a window of `nbytes` bytes at byte `off` from the
    header's start (read big-endian unless little_endian), and for a field narrower than
    its window, `bits` wide at `shift` bits above the window's least significant bit. A
    trailer (ICRC, VCRC) has no offset: it ends the packet."""

    name: str
    off: int | None
    nbytes: int
    bits: int | None = None
    shift: int = 0
    little_endian: bool = False
    trailer: bool = False

    @property
    def mask(self) -> int | None:
        """The field's value mask after the shift, or None for a whole window."""
        return None if self.bits is None else (1 << self.bits) - 1

    @property
    def bit_range(self) -> tuple[int, int]:
        """(first bit, bits) of the field counted from the header's first bit, MSB first
        (big-endian windows only)."""
        if self.off is None or self.little_endian:
            raise GeneratorError(f"{self.name}: no big-endian bit position")
        width = self.nbytes * 8 if self.bits is None else self.bits
        return self.off * 8 + self.nbytes * 8 - self.shift - width, width


@dataclass(frozen=True)
class HeaderLayout:
    """The fixed part of a header: its fields by name, in wire order, and its length (all
    of it for a fixed-size header, else the bytes before the first variable field)."""

    key: str
    fields: dict[str, FieldLayout]
    fixed_len: int


def header_layout(cls: type) -> HeaderLayout:
    """The layout of a header from its fields_desc through build_layer: every field at a
    static position; what follows a field the model cannot place (IP's options, a
    length-prefixed value) is left out."""
    m = build_layer(cls, "layout", partial=True)
    out: dict[str, FieldLayout] = {}
    for s in m.steps:
        if s.kind == "trailer":
            out[s.name] = FieldLayout(s.name, None, s.nbytes, little_endian=s.little_endian,
                                      trailer=True)
            continue
        if s.when is not None or s.byte_order is not None or s.offset is None or s.nbytes == 0:
            continue  # (a byte order decided on the wire has no one window either)
        if s.kind not in ("int", "bitint", "flags", "ipv4", "ipv6", "ether", "bytes"):
            continue
        whole = s.kind not in ("bitint", "flags") or s.bits == s.nbytes * 8
        out[s.name] = FieldLayout(
            s.name, s.offset, s.nbytes, bits=None if whole else s.bits,
            shift=0 if whole else s.nbytes * 8 - s.bit_off - s.bits,
            little_endian=s.little_endian)
    return HeaderLayout(m.key, out, m.static_len if m.static_len is not None else m.fixed_len)


def field_offset(cls: type, name: str) -> int:
    """The byte a field of a header starts in, from its layout (a bit field: the byte of
    its window): the one place code that reads raw bytes takes an offset from."""
    return header_layout(cls).fields[name].off
