"""The InfiniBand CRCs as data (IBA Vol1 §7.8): their parameters and the variant fields the
invariant CRC takes as all ones, declared once. crc.py computes from this declaration, and
the Lua generator emits the same declaration into the plugin (luagen.plugin), whose ICRC and
VCRC checks read it.

The variant fields are named by header and field; their byte masks come from the headers'
layouts (model.layout.header_layout over each layer's fields_desc), resolved on first use.
Scapy's own headers are imported here; the LRH is this package's, and layers.ib, which
computes its CRCs with crc.py, hands it in with register_lrh (the model sits below the layers
and never imports them).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True)
class CrcParams:
    """A CRC in the usual catalogue terms: width, polynomial (normal, MSB-first form), the
    register's start value, the final XOR, and whether bytes are fed LSB first."""

    name: str
    width: int
    poly: int
    init: int
    xorout: int
    reflected: bool = True

    @property
    def modulus(self) -> int:
        return 1 << self.width

    @property
    def poly_reflected(self) -> int:
        """The polynomial bit-reversed: what a table-driven reflected CRC shifts in."""
        return int(f"{self.poly:0{self.width}b}"[::-1], 2)


# ICRC: CRC-32 as IEEE 802.3 (zlib.crc32), stored little-endian after the payload.
ICRC = CrcParams("ICRC", 32, 0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF)
# VCRC: CRC-16 with polynomial 0x100B, reflected, stored little-endian after the ICRC.
VCRC = CrcParams("VCRC", 16, 0x100B, 0xFFFF, 0xFFFF)

ALL = "*"  # every field of the header (its trailer excepted)

# The ICRC's variant fields, taken as all ones before it is computed: name → (header, fields).
# Native IB (checked against a real ibdump capture, tests/test_crc.py): the LRH VL nibble of a
# local packet, or the whole LRH when a GRH follows (routers rewrite it), GRH
# TClass/FlowLabel/HopLmt, BTH Resv8a. RoCEv2 (Linux rxe_icrc.c): the LRH's 8 bytes as ones in
# front of the IP header, IPv4 TOS/TTL/checksum or IPv6 traffic class/flow label/hop limit,
# the UDP checksum, BTH Resv8a.
VARIANT_FIELDS: dict[str, tuple[str, tuple[str, ...] | str]] = {
    "LRH_LOCAL": ("LRH", ("vl",)),
    "LRH_GLOBAL": ("LRH", ALL),
    "GRH": ("GRH", ("tclass", "flowlabel", "hoplmt")),
    # the byte IBA 1.2 calls Resv8a: scapy names its bits FECN, BECN, Resv6 (Annex A10)
    "BTH": ("BTH", ("fecn", "becn", "resv6")),
    "IP": ("IP", ("tos", "ttl", "chksum")),
    "IPv6": ("IPv6", ("tc", "fl", "hlim")),
    "UDP": ("UDP", ("chksum",)),
}
# RoCEv2 has no LRH: the CRC starts with the all-ones form of one (rxe_icrc.c).
ROCEV2_PSEUDO_LRH = "LRH_GLOBAL"


@dataclass(frozen=True)
class Lrh:
    """The LRH as layers.ib declares it: its class and the LNH value that says a GRH follows
    (the ICRC then takes the whole LRH as variant)."""

    cls: type
    lnh_global: int


_LRH: list[Lrh] = []


def register_lrh(cls: type, lnh_global: int) -> None:
    """Called once by layers.ib, below its LRH class."""
    _LRH[:] = [Lrh(cls, lnh_global)]


def lrh() -> Lrh:
    """The registered LRH (importing ibpath_scapy imports the layers, which register it)."""
    if not _LRH:
        raise RuntimeError("crcspec: no LRH registered; import ibpath_scapy.layers first")
    return _LRH[0]


def header_classes() -> dict:
    """The layer class of every header VARIANT_FIELDS names."""
    from scapy.contrib.roce import BTH, GRH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6

    return {"LRH": lrh().cls, "GRH": GRH, "BTH": BTH, "IP": IP, "IPv6": IPv6, "UDP": UDP}


@functools.cache
def layouts() -> dict:
    """HeaderLayout (model.layout) of every header VARIANT_FIELDS names, by name."""
    from .layout import header_layout

    return {name: header_layout(cls) for name, cls in header_classes().items()}


Mask = tuple[tuple[int, int], ...]  # (byte offset from the header's start, bits set to one)


@functools.cache
def variant_masks() -> dict[str, Mask]:
    """VARIANT_FIELDS as byte masks, from the headers' layouts."""
    out = {}
    for key, (header, names) in VARIANT_FIELDS.items():
        lay = layouts()[header]
        fields = [f for f in lay.fields.values() if not f.trailer] if names == ALL else [
            lay.fields[n] for n in names]
        bits: dict[int, int] = {}
        for f in fields:
            first, width = f.bit_range
            for b in range(first, first + width):
                bits[b // 8] = bits.get(b // 8, 0) | 0x80 >> (b % 8)
        out[key] = tuple(sorted(bits.items()))
    return out


def rocev2_prefix() -> bytes:
    """What stands for the LRH at the start of a RoCEv2 ICRC (8 bytes of ones)."""
    lrh = bytearray(layouts()["LRH"].fixed_len)
    for off, bits in variant_masks()[ROCEV2_PSEUDO_LRH]:
        lrh[off] |= bits
    return bytes(lrh)
