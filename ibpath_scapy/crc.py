"""Invariant and variant CRCs of InfiniBand packets (IBA Vol1 §7.8).

ICRC: CRC-32 (IEEE, reflected: zlib.crc32) over the packet with its variant fields taken as
all ones, stored little-endian. Variant fields: the LRH VL nibble for local packets, the whole
LRH when a GRH follows (routers rewrite it; RoCEv2 likewise puts 8 bytes of 0xFF in its place,
Linux rxe_icrc.c), GRH TClass/FlowLabel/HopLmt, BTH Resv8a.
VCRC: CRC-16, polynomial 0x100B, reflected, init and final XOR 0xFFFF, little-endian.
Both recipes were checked against every frame of the ibdump capture in
the external ibdump capture ib-erf-sminfo-cm.pcap (tests/test_crc.py).
"""

import struct
import zlib

import crcmod

VCRC_POLY = 0x100B


def masked_native(body: bytes) -> bytes:
    """LRH..payload of a native-IB packet with its variant fields set to ones."""
    b = bytearray(body)
    off = 8
    if len(b) >= 2 and b[1] & 0x03 == 3:
        b[0:8] = b"\xff" * 8
        if len(b) >= off + 40:
            b[off] |= 0x0F  # TClass high nibble (shares the byte with IPVer)
            b[off + 1:off + 4] = b"\xff\xff\xff"  # TClass low nibble, FlowLabel
            b[off + 7] = 0xFF  # HopLmt
        off += 40
    elif b:
        b[0] |= 0xF0  # VL
    if len(b) >= off + 5:
        b[off + 4] = 0xFF  # BTH Resv8a
    return bytes(b)


def native_icrc(lrh_to_icrc: bytes) -> bytes:
    """ICRC bytes of a native-IB packet given LRH..ICRC (its last 4 bytes are ignored)."""
    return struct.pack("<I", zlib.crc32(masked_native(lrh_to_icrc[:-4])) & 0xFFFFFFFF)


# crcmod's initCrc is the register's start value XORed with the final XOR (its docs): 0xFFFF ^
# 0xFFFF. Its C extension takes ~1 us a frame where a byte loop in Python took ~34 us, which
# was most of the native-IB fast path's time.
_vcrc = crcmod.mkCrcFun(0x10000 | VCRC_POLY, initCrc=0, rev=True, xorOut=0xFFFF)


def vcrc(lrh_to_icrc: bytes) -> int:
    """VCRC value over LRH..ICRC (store it little-endian)."""
    return _vcrc(lrh_to_icrc)


def rocev2_icrc(frame_from_ip: bytes) -> bytes:
    """ICRC of a RoCEv2 packet given IP..ICRC (last 4 bytes ignored); IPv4 or IPv6."""
    b = bytearray(frame_from_ip[:-4])
    if b[0] >> 4 == 4:
        ihl = (b[0] & 0x0F) * 4
        b[1] = 0xFF  # TOS
        b[8] = 0xFF  # TTL
        b[10:12] = b"\xff\xff"  # header checksum
        udp = ihl
    else:
        b[0] |= 0x0F
        b[1:4] = b"\xff\xff\xff"  # traffic class, flow label
        b[7] = 0xFF  # hop limit
        udp = 40
    b[udp + 6:udp + 8] = b"\xff\xff"  # UDP checksum
    b[udp + 8 + 4] = 0xFF  # BTH Resv8a
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF)
