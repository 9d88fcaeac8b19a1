"""Invariant and variant CRCs of InfiniBand packets (IBA Vol1 §7.8), computed from their
declaration in crcspec (parameters, variant fields), which the Lua plugin's checks read too.

ICRC: CRC-32 over the packet with its variant fields taken as all ones, stored
little-endian. Variant fields: the LRH VL nibble for local packets, the whole LRH when a GRH
follows (routers rewrite it; RoCEv2 likewise puts 8 bytes of 0xFF in its place, Linux
rxe_icrc.c), GRH TClass/FlowLabel/HopLmt, BTH Resv8a.
VCRC: CRC-16, polynomial 0x100B, reflected, init and final XOR 0xFFFF, little-endian.
Both recipes were checked against every frame of the ibdump capture in
the external ibdump capture ib-erf-sminfo-cm.pcap (tests/test_crc.py).
"""

from __future__ import annotations

import struct
import zlib
from array import array
from dataclasses import dataclass
from functools import cache, partial

import crcmod

from . import crcspec
from ..native import extension as native_extension
from .crcspec import ICRC, VCRC, CrcParams

VCRC_POLY = VCRC.poly
_ICRC_LEN, _VCRC_LEN = ICRC.width // 8, VCRC.width // 8
_ICRC_PACK = "<" + {32: "I", 16: "H"}[ICRC.width]


def crc_function(p: CrcParams, prefer_zlib: bool = True):
    """bytes → int for p. crcmod's initCrc is the register's start value XORed with the final
    XOR (its docs). Its C extension takes ~1 us a frame where a byte loop in Python took
    ~34 us, which was most of the native-IB fast path's time; zlib's CRC-32, when p is that
    CRC, is faster still (~0.6 us against ~2.4 us for a 300-byte packet)."""
    if prefer_zlib and (p.width, p.poly, p.init, p.xorout, p.reflected) == (
            32, 0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF, True):
        return zlib.crc32
    return crcmod.mkCrcFun(p.modulus | p.poly, initCrc=p.init ^ p.xorout, rev=p.reflected,
                           xorOut=p.xorout)


def crc_table(p: CrcParams) -> array:
    """A reflected CRC's slicing-by-8 tables, 8 x 256 words (native/_scan.c's crc runs them):
    the byte-at-a-time table, then for k = 1..7 what k more zero bytes make of its entries."""
    assert p.reflected and p.width <= 32, p
    t = array("I")
    assert t.itemsize == 4
    poly = p.poly_reflected
    for byte in range(256):
        reg = byte
        for _ in range(8):
            reg = (reg >> 1) ^ poly if reg & 1 else reg >> 1
        t.append(reg)
    for k in range(1, 8):
        t.extend((t[(k - 1) * 256 + i] >> 8) ^ t[t[(k - 1) * 256 + i] & 0xFF] for i in range(256))
    return t


@cache
def engine_plan(p: CrcParams) -> tuple[array, int, int]:
    """(slicing-by-8 tables, init, final XOR): what the C code takes of p (made once: crc's
    engines and every fast decoder's plan share them, read-only)."""
    return crc_table(p), p.init, p.xorout


def crc_engine(p: CrcParams, ext=None):
    """(prefix, mask, data, start, end) -> the CRC p of prefix + data[start:end], mask ORed
    into the latter's first bytes (the variant fields as ones): native/_scan.c's crc, one call
    and no copy of the packet, or with ext None its Python twin (zlib or crcmod over a
    masked copy)."""
    if ext is not None:
        return partial(ext.crc, *engine_plan(p))
    fun = crc_function(p)

    def twin(prefix: bytes, mask: bytes, data: bytes, start: int, end: int) -> int:
        if not 0 <= start <= end <= len(data):
            raise ValueError("crc: 0 <= start <= end <= len(data)")  # what the C one checks
        body = data[start:end]
        return fun(prefix + (_or_head_python(body, mask) if mask else body))

    return twin


@dataclass(frozen=True)
class _Recipe:
    """crcspec resolved against the headers' layouts: for each shape of packet, the bits its
    variant fields set, as a mask of bytes from its first header on, built from (byte offset,
    bits set to one) plans (resolved on first use: see crcspec)."""

    grh_end: int
    lnh: object  # FieldLayout of LRH LNH: LNH_IBA_GLOBAL when a GRH follows
    lnh_global: int
    ipv4: tuple
    udp_bth: tuple  # from the UDP header on
    version: object  # FieldLayout of the IP version (IPv4's and IPv6's share the nibble)
    ihl: object
    ipv4_version: int
    prefix: bytes
    native_local_mask: bytes  # LRH (VL) and BTH
    native_global_mask: bytes  # LRH, GRH and BTH
    native_global_short_mask: bytes  # LRH and BTH, the packet too short for a GRH
    ipv6_mask: bytes  # RoCEv2 over IPv6, IP to BTH
    ipv4_masks: dict  # RoCEv2 over IPv4: IP header length -> the mask, made on first use
    icrc: object  # crc_engine(ICRC), C or Python
    vcrc: object  # crc_engine(VCRC)

    def ipv4_mask(self, udp: int) -> bytes:
        """The mask of RoCEv2 over IPv4 whose UDP header starts `udp` bytes in."""
        mask = self.ipv4_masks.get(udp)
        if mask is None:
            mask = self.ipv4_masks[udp] = _mask(self.ipv4 + _shift(self.udp_bth, udp))
        return mask


_R: _Recipe | None = None


def recipe() -> _Recipe:
    """crcspec resolved against the layers (the masks, the fields that choose one)."""
    return _R or _resolve()


def _resolve() -> _Recipe:
    global _R

    lay, masks = crcspec.layouts(), crcspec.variant_masks()

    def plan(*parts):  # (mask name, offset of its header)
        return sum((_shift(masks[name], at) for name, at in parts), ())

    lrh, grh, udp = lay["LRH"].fixed_len, lay["GRH"].fixed_len, lay["UDP"].fixed_len
    ip = lay["IP"].fields
    assert ip["version"] == lay["IPv6"].fields["version"] and ip["version"].nbytes == ip["ihl"].nbytes == 1
    native_local = plan(("LRH_LOCAL", 0), ("BTH", lrh))
    native_global = plan(("LRH_GLOBAL", 0), ("GRH", lrh), ("BTH", lrh + grh))
    native_global_short = plan(("LRH_GLOBAL", 0), ("BTH", lrh + grh))
    ipv6, ipv6_len, udp_bth = plan(("IPv6", 0)), lay["IPv6"].fixed_len, plan(("UDP", 0), ("BTH", udp))
    _R = _Recipe(
        grh_end=lrh + grh, lnh=lay["LRH"].fields["lnh"], lnh_global=crcspec.lrh().lnh_global,
        ipv4=plan(("IP", 0)), udp_bth=udp_bth, version=ip["version"], ihl=ip["ihl"],
        ipv4_version=crcspec.header_classes()["IP"]().version, prefix=crcspec.rocev2_prefix(),
        native_local_mask=_mask(native_local), native_global_mask=_mask(native_global),
        native_global_short_mask=_mask(native_global_short),
        ipv6_mask=_mask(ipv6 + _shift(udp_bth, ipv6_len)), ipv4_masks={},
        icrc=crc_engine(ICRC, native_extension()), vcrc=crc_engine(VCRC, native_extension()))
    return _R


def _shift(plan: tuple, by: int) -> tuple:
    """plan for its header placed by bytes further on."""
    return tuple((at + by, bits) for at, bits in plan)


def _mask(plan: tuple) -> bytes:
    """The bits a plan sets, as bytes up to the last one it touches."""
    m = bytearray(max(at for at, _ in plan) + 1)
    for at, bits in plan:
        m[at] |= bits
    return bytes(m)


def _or_head_python(b: bytes, mask: bytes) -> bytes:
    """b with mask ORed into its first bytes (as many as both have): what native/_scan.c's crc
    reads. One OR of two integers, not a loop over the bytes (a frame's mask is up to 53
    bytes)."""
    k = min(len(b), len(mask))
    head = int.from_bytes(b[:k], "big") | int.from_bytes(mask[:k], "big")
    return head.to_bytes(k, "big") + b[k:]


def _native_mask(r: _Recipe, b: bytes, start: int, end: int) -> bytes:
    """The variant-field mask of the native-IB packet whose LRH starts at b[start] and whose
    CRC'd bytes end at b[end]."""
    lnh = r.lnh
    if end - start > lnh.off and (b[start + lnh.off] >> lnh.shift) & lnh.mask == r.lnh_global:
        return r.native_global_mask if end - start >= r.grh_end else r.native_global_short_mask
    return r.native_local_mask


def native_icrc(lrh_to_icrc: bytes) -> bytes:
    """ICRC bytes of a native-IB packet given LRH..ICRC (its last 4 bytes are ignored)."""
    r = _R or _resolve()
    end = len(lrh_to_icrc) - 4
    return struct.pack(_ICRC_PACK, r.icrc(b"", _native_mask(r, lrh_to_icrc, 0, end),
                                          lrh_to_icrc, 0, end))


def vcrc(lrh_to_icrc: bytes) -> int:
    """VCRC value over LRH..ICRC (store it little-endian)."""
    r = _R or _resolve()
    return r.vcrc(b"", b"", lrh_to_icrc, 0, len(lrh_to_icrc))


def native_crc_check(data: bytes, lrh: int) -> tuple[bytes, bool, bool]:
    """(ICRC field, whether it is right, whether the VCRC is) of the native-IB packet
    data[lrh:], which its VCRC ends, the ICRC before it, both little-endian: one pass of
    each CRC over the frame, no copy of it."""
    r = _R or _resolve()
    vcrc_at = len(data) - _VCRC_LEN
    icrc_at = vcrc_at - _ICRC_LEN
    icrc = data[icrc_at:vcrc_at]
    return (icrc,
            r.icrc(b"", _native_mask(r, data, lrh, icrc_at), data, lrh, icrc_at)
            == int.from_bytes(icrc, "little"),
            r.vcrc(b"", b"", data, lrh, vcrc_at) == int.from_bytes(data[vcrc_at:], "little"))


def rocev2_icrc(frame_from_ip: bytes) -> bytes:
    """ICRC of a RoCEv2 packet given IP..ICRC (last 4 bytes ignored); IPv4 or IPv6."""
    r = _R or _resolve()
    b = frame_from_ip
    v = r.version
    if (b[v.off] >> v.shift) & v.mask == r.ipv4_version:
        # IHL counts 32-bit words; one mask per header length
        mask = r.ipv4_mask(((b[r.ihl.off] >> r.ihl.shift) & r.ihl.mask) * 4)
    else:
        mask = r.ipv6_mask
    end = len(b) - _ICRC_LEN
    if end < len(mask):
        raise IndexError(f"a RoCEv2 packet of {end} bytes ends before its BTH")
    return struct.pack(_ICRC_PACK, r.icrc(r.prefix, mask, b, 0, end))
