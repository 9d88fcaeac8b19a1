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
from dataclasses import dataclass

import crcmod

from . import crcspec
from .crcspec import ICRC, VCRC, CrcParams

VCRC_POLY = VCRC.poly


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


_icrc = crc_function(ICRC)
_vcrc = crc_function(VCRC)
_ICRC_PACK = "<" + {32: "I", 16: "H"}[ICRC.width]


@dataclass(frozen=True)
class _Recipe:
    """crcspec resolved against the headers' layouts, as (byte offset, bits set to one) plans
    for each shape of packet (resolved on first use: see crcspec)."""

    native_local: tuple  # LRH (VL) and BTH
    native_global: tuple  # LRH, GRH and BTH
    native_global_short: tuple  # LRH and BTH, the packet too short for a GRH
    grh_end: int
    lnh: object  # FieldLayout of LRH LNH: LNH_IBA_GLOBAL when a GRH follows
    lnh_global: int
    ipv4: tuple
    ipv6: tuple
    udp_bth: tuple  # from the UDP header on
    ipv6_len: int
    version: object  # FieldLayout of the IP version (IPv4's and IPv6's share the nibble)
    ihl: object
    ipv4_version: int
    prefix: bytes


_R: _Recipe | None = None


def _resolve() -> _Recipe:
    global _R
    from .layers.ib import LNH_IBA_GLOBAL

    lay, masks = crcspec.layouts(), crcspec.variant_masks()

    def plan(*parts):  # (mask name, offset of its header)
        return tuple((at + off, bits) for name, at in parts for off, bits in masks[name])

    lrh, grh, udp = lay["LRH"].fixed_len, lay["GRH"].fixed_len, lay["UDP"].fixed_len
    ip = lay["IP"].fields
    assert ip["version"] == lay["IPv6"].fields["version"] and ip["version"].nbytes == ip["ihl"].nbytes == 1
    _R = _Recipe(
        native_local=plan(("LRH_LOCAL", 0), ("BTH", lrh)),
        native_global=plan(("LRH_GLOBAL", 0), ("GRH", lrh), ("BTH", lrh + grh)),
        native_global_short=plan(("LRH_GLOBAL", 0), ("BTH", lrh + grh)),
        grh_end=lrh + grh, lnh=lay["LRH"].fields["lnh"], lnh_global=LNH_IBA_GLOBAL,
        ipv4=plan(("IP", 0)), ipv6=plan(("IPv6", 0)), udp_bth=plan(("UDP", 0), ("BTH", udp)),
        ipv6_len=lay["IPv6"].fixed_len, version=ip["version"], ihl=ip["ihl"],
        ipv4_version=crcspec.header_classes()["IP"]().version, prefix=crcspec.rocev2_prefix())
    return _R


def masked_native(body: bytes) -> bytes:
    """LRH..payload of a native-IB packet with its variant fields set to ones."""
    r = _R or _resolve()
    b = bytearray(body)
    n = len(b)
    lnh = r.lnh
    if n > lnh.off and (b[lnh.off] >> lnh.shift) & lnh.mask == r.lnh_global:
        plan = r.native_global if n >= r.grh_end else r.native_global_short
    else:
        plan = r.native_local
    for at, bits in plan:
        if at < n:  # (bytes past the end are left alone)
            b[at] |= bits
    return bytes(b)


def native_icrc(lrh_to_icrc: bytes) -> bytes:
    """ICRC bytes of a native-IB packet given LRH..ICRC (its last 4 bytes are ignored)."""
    return struct.pack(_ICRC_PACK, _icrc(masked_native(lrh_to_icrc[:-4])))


def vcrc(lrh_to_icrc: bytes) -> int:
    """VCRC value over LRH..ICRC (store it little-endian)."""
    return _vcrc(lrh_to_icrc)


def rocev2_icrc(frame_from_ip: bytes) -> bytes:
    """ICRC of a RoCEv2 packet given IP..ICRC (last 4 bytes ignored); IPv4 or IPv6."""
    r = _R or _resolve()
    b = bytearray(frame_from_ip[:-4])
    v = r.version
    if (b[v.off] >> v.shift) & v.mask == r.ipv4_version:
        plan = r.ipv4
        udp = ((b[r.ihl.off] >> r.ihl.shift) & r.ihl.mask) * 4  # IHL counts 32-bit words
    else:
        plan, udp = r.ipv6, r.ipv6_len
    for at, bits in plan:
        b[at] |= bits
    for at, bits in r.udp_bth:  # (a packet too short for its UDP and BT headers raises)
        b[udp + at] |= bits
    return struct.pack(_ICRC_PACK, _icrc(r.prefix + bytes(b)))
