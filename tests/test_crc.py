"""ICRC and VCRC against external vectors: scapy's roce.uts frames and a real ibdump capture."""

import dataclasses
import struct

import pytest
from scapy.utils import RawPcapReader

from ibpath_scapy.model import crc, crcspec
from ibpath_scapy import native
from ibpath_scapy.layers import ERF, LRH

# scapy test/contrib/roce.uts "RoCE CNP captured on ConnectX-4 Lx" (wire-formats.md §4.1).
CNP_FRAME = bytes.fromhex(
    "e41d2dab2bc27cfe90643b320800"
    "45c2003c718c400040119161" "0a001101" "0a001201"
    "000012b700280000"
    "8100ffff400001180000000000000000000000000000000000000000"
    "82fd002a")


@pytest.fixture(params=["c", "python"])
def engine(request, monkeypatch):
    """The CRCs computed by native/_scan.c's crc and by its Python twin (zlib, crcmod): each
    must give the external vectors' CRCs."""
    r = crc._R or crc._resolve()
    if request.param == "c":
        ext = native.extension()
        if ext is None:
            pytest.skip("the package was built without its C extension: the Python twin runs")
    else:
        ext = None
    monkeypatch.setattr(crc, "_R", dataclasses.replace(
        r, icrc=crc.crc_engine(crcspec.ICRC, ext), vcrc=crc.crc_engine(crcspec.VCRC, ext),
        ipv4_masks={}))
    return request.param


def test_rocev2_icrc_matches_connectx4_cnp(engine):
    assert crc.rocev2_icrc(CNP_FRAME[14:]) == bytes.fromhex("82fd002a")


def test_pseudo_lrh_seed():
    # rxe seeds its CRC with 0xdebb20e3, the state after 8 bytes of 0xFF.
    import zlib
    assert ~zlib.crc32(b"\xff" * 8) & 0xFFFFFFFF == 0xDEBB20E3


def test_native_icrc_and_vcrc_hold_on_every_frame_of_real_ibdump_capture(external, engine):
    n = grh = 0
    for data, _ in RawPcapReader(str(external / "ib-erf-sminfo-cm.pcap")):
        pkt = data[16:]  # ERF header
        body, vcrc = pkt[:-2], struct.unpack("<H", pkt[-2:])[0]
        assert crc.native_icrc(body) == body[-4:]
        assert crc.vcrc(body) == vcrc
        assert crc.native_crc_check(data, 16) == (body[-4:], True, True)
        bad = bytearray(data)
        bad[-1] ^= 0x40  # the VCRC
        assert crc.native_crc_check(bytes(bad), 16)[1:] == (True, False)
        bad = bytearray(body)
        bad[-1] ^= 0x40  # the ICRC, and the VCRC over it made right again
        bad = data[:16] + bytes(bad) + struct.pack("<H", crc.vcrc(bytes(bad)))
        assert crc.native_crc_check(bad, 16)[1:] == (False, True)
        n += 1
        grh += pkt[1] & 3 == 3
    assert n == 43 and grh >= 3  # both local and global-route packets are covered


def test_built_native_frames_carry_valid_crcs(external):
    for data, _ in RawPcapReader(str(external / "ib-erf-sminfo-cm.pcap")):
        pkt = ERF(data)
        pkt[LRH].vcrc = None
        pkt[LRH].pkt_len = None
        if pkt.haslayer("BTH"):
            pkt["BTH"].icrc = None
        assert bytes(pkt) == data  # rebuilt with computed CRCs and PktLen: byte-identical


# -- the declaration (crcspec) both crc.py and the Lua plugin compute from -------------------

def _reflected_crc(data: bytes, width: int, poly: int, init: int, xorout: int) -> int:
    """A bit-at-a-time reflected CRC, the textbook way (the oracle for crc.crc_function)."""
    rpoly = int(f"{poly:0{width}b}"[::-1], 2)
    reg = init
    for byte in data:
        reg ^= byte
        for _ in range(8):
            reg = (reg >> 1) ^ rpoly if reg & 1 else reg >> 1
    return reg ^ xorout


def test_crc_parameters_give_the_known_crcs():
    check = b"123456789"
    for prefer_zlib in (True, False):
        assert crc.crc_function(crcspec.ICRC, prefer_zlib)(check) == 0xCBF43926  # CRC-32 check value
    frames = [check, bytes(range(256)), CNP_FRAME]
    for data in frames:
        assert crc.vcrc(data) == _reflected_crc(data, 16, 0x100B, 0xFFFF, 0xFFFF)
        assert crc.crc_function(crcspec.ICRC, False)(data) == _reflected_crc(
            data, 32, 0x04C11DB7, 0xFFFFFFFF, 0xFFFFFFFF)
    assert crcspec.ICRC.poly_reflected == 0xEDB88320 and crcspec.VCRC.poly_reflected == 0xD008


def test_variant_masks_are_the_iba_and_rxe_ones():
    """crcspec names fields; resolved through the layers' layouts they must be the bytes IBA
    Vol1 §7.8.1 and rxe_icrc.c set to ones (wire-formats.md §4.1-4.2)."""
    assert crcspec.variant_masks() == {
        "LRH_LOCAL": ((0, 0xF0),),  # VL
        "LRH_GLOBAL": tuple((i, 0xFF) for i in range(8)),  # the whole LRH
        "GRH": ((0, 0x0F), (1, 0xFF), (2, 0xFF), (3, 0xFF), (7, 0xFF)),  # TClass, FlowLabel, HopLmt
        "BTH": ((4, 0xFF),),  # Resv8a
        "IP": ((1, 0xFF), (8, 0xFF), (10, 0xFF), (11, 0xFF)),  # TOS, TTL, header checksum
        "IPv6": ((0, 0x0F), (1, 0xFF), (2, 0xFF), (3, 0xFF), (7, 0xFF)),  # TC, flow label, hop limit
        "UDP": ((6, 0xFF), (7, 0xFF)),  # checksum
    }
    assert crcspec.rocev2_prefix() == b"\xff" * 8


def test_rocev2_icrc_over_ipv6_and_ipv4_options(engine):
    """The IPv6 and IPv4-with-options paths against scapy's own RoCEv2 ICRC
    (scapy.contrib.roce.BTH.compute_icrc), an implementation of its own."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.contrib.roce import BTH
    for ip in (IPv6(src="fe80::1", dst="fe80::2", tc=0x56, fl=0x12345, hlim=3),
               IP(src="10.0.0.1", dst="10.0.0.2", tos=3, ttl=9, options=[b"\x01\x01\x01\x00"])):
        b = bytes(ip / UDP(sport=0xC000, dport=4791) / BTH(opcode=0x64, dqpn=1, fecn=1) / (b"\x00" * 40))
        assert crc.rocev2_icrc(b) == b[-4:]
