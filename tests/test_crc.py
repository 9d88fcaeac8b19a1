"""ICRC and VCRC against external vectors: scapy's roce.uts frames and a real ibdump capture."""

import struct

from scapy.utils import RawPcapReader

from ibpath_scapy import crc
from ibpath_scapy.layers import ERF, LRH

# scapy test/contrib/roce.uts "RoCE CNP captured on ConnectX-4 Lx" (wire-formats.md §4.1).
CNP_FRAME = bytes.fromhex(
    "e41d2dab2bc27cfe90643b320800"
    "45c2003c718c400040119161" "0a001101" "0a001201"
    "000012b700280000"
    "8100ffff400001180000000000000000000000000000000000000000"
    "82fd002a")


def test_rocev2_icrc_matches_connectx4_cnp():
    assert crc.rocev2_icrc(CNP_FRAME[14:]) == bytes.fromhex("82fd002a")


def test_pseudo_lrh_seed():
    # rxe seeds its CRC with 0xdebb20e3, the state after 8 bytes of 0xFF.
    import zlib
    assert ~zlib.crc32(b"\xff" * 8) & 0xFFFFFFFF == 0xDEBB20E3


def test_native_icrc_and_vcrc_hold_on_every_frame_of_real_ibdump_capture(external):
    n = grh = 0
    for data, _ in RawPcapReader(str(external / "ib-erf-sminfo-cm.pcap")):
        pkt = data[16:]  # ERF header
        body, vcrc = pkt[:-2], struct.unpack("<H", pkt[-2:])[0]
        assert crc.native_icrc(body) == body[-4:]
        assert crc.vcrc(body) == vcrc
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
