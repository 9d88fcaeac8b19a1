"""pcapio's pcapng reader (block-buffered, shared by the Scapy path and the fast path) against
an independent reader, at every read-block boundary and every truncation.

Oracles: Scapy's RawPcapNgReader for the frames of intact files (data, link type, timestamp,
comment); the reader's own frames of the intact file for every truncated copy (a prefix of
them, then an error that names the file, the frame and a byte offset inside the file).
"""

from __future__ import annotations

import random
import struct
import subprocess

import pytest
from scapy.utils import RawPcapNgReader

from ibpath_scapy import pcapio
from ibpath_scapy.pcapio import CaptureError, read_frames

from test_fastpath import assert_identical


def _block(e: str, btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack(e + "II", btype, n) + body + struct.pack(e + "I", n)


def _shb(e: str) -> bytes:
    body = struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1)
    n = len(body) + 12
    return b"\x0a\x0d\x0d\x0a" + struct.pack(e + "I", n) + body + struct.pack(e + "I", n)


def _opt(e: str, code: int, value: bytes) -> bytes:
    return struct.pack(e + "HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def _epb(e: str, iface: int, ts: int, data: bytes, comment: bytes | None = None) -> bytes:
    opts = (_opt(e, 1, comment) + _opt(e, 0, b"")) if comment else b""
    return _block(e, 6, struct.pack(e + "IIIII", iface, ts >> 32, ts & 0xFFFFFFFF, len(data),
                                     len(data) + 4) + data + b"\0" * (-len(data) % 4) + opts)


def varied_pcapng(endian: str, seed: int = 3) -> bytes:
    """Two sections, interfaces of three link types and time resolutions, EPBs with and
    without comments, and the blocks that carry no frame (NRB, ISB)."""
    rnd = random.Random(seed)
    e = endian
    out = _shb(e)
    out += _block(e, 1, struct.pack(e + "HHI", 1, 0, 65535) + _opt(e, 9, b"\x09") + _opt(e, 0, b""))
    out += _block(e, 1, struct.pack(e + "HHI", 197, 0, 65535))
    for i in range(12):
        out += _epb(e, i % 2, (1 << 32) * (i + 1) + i, rnd.randbytes(rnd.randrange(0, 90)),
                    b"set_option=0 frame %d" % i if i % 3 == 0 else None)
    out += _block(e, 4, b"\0" * 8)  # name resolution
    out += _block(e, 5, struct.pack(e + "III", 0, 1, 2))  # interface statistics
    out += _shb(e) + _block(e, 1, struct.pack(e + "HHI", 101, 0, 65535)
                             + _opt(e, 9, b"\x86") + _opt(e, 0, b""))
    out += _epb(e, 0, 123456789, b"\x45" + rnd.randbytes(40))
    return out


@pytest.fixture(params=["<", ">"], ids=["little-endian", "big-endian"])
def varied(request, tmp_path):
    path = tmp_path / f"varied{'le' if request.param == '<' else 'be'}.pcapng"
    path.write_bytes(varied_pcapng(request.param))
    return path


def _frames(path) -> list[tuple]:
    return [(f.number, f.linktype, f.data, f.wirelen, f.comment, f.time) for f in read_frames(str(path))]


def test_frames_equal_scapys_pcapng_reader(varied):
    ours = _frames(varied)
    theirs = []
    with RawPcapNgReader(str(varied)) as r:
        for data, meta in r:
            comment = meta.comments[0].decode() if getattr(meta, "comments", None) else None
            theirs.append((data, meta.linktype, meta.wirelen, comment,
                           ((meta.tshigh << 32) | meta.tslow) / meta.tsresol))
    assert len(ours) == len(theirs) == 13
    # the first section; in the second, Scapy keeps the first section's interfaces, where
    # interface IDs count per section (pcapng spec, and tshark below)
    for o, t in zip(ours[:12], theirs):
        assert (o[2], o[1], o[3], o[4]) == t[:4]
        assert o[5] == pytest.approx(t[4], rel=1e-12)
    p = subprocess.run(["tshark", "-n", "-r", str(varied), "-T", "fields", "-e", "frame.protocols"],
                       capture_output=True, text=True, check=True)
    assert p.stdout.splitlines()[12].startswith("raw:ip")
    assert ours[12][1] == 101 and ours[12][5] == pytest.approx(123456789 / 64)


@pytest.mark.parametrize("block", [1, 7, 64, 4096])
def test_read_block_boundaries_change_nothing(varied, monkeypatch, block):
    want = _frames(varied)
    monkeypatch.setattr(pcapio, "READ_BLOCK", block)
    assert _frames(varied) == want


def test_every_truncation_yields_the_frames_before_it_and_names_the_damage(varied, tmp_path):
    whole = _frames(varied)
    data = varied.read_bytes()
    cut_path = tmp_path / "cut.pcapng"
    errors = 0
    for cut in range(4, len(data)):  # (fewer than 4 bytes: not a capture at all)
        cut_path.write_bytes(data[:cut])
        got = []
        try:
            for f in read_frames(str(cut_path)):
                got.append((f.number, f.linktype, f.data, f.wirelen, f.comment, f.time))
        except CaptureError as exc:
            msg = str(exc)
            assert msg.startswith(f"{cut_path}: ") and "byte offset" in msg, msg
            offset = int(msg.split("byte offset ")[1].split()[0])
            assert 0 <= offset <= cut, msg
            errors += 1
        assert got == whole[:len(got)], cut
    assert errors > len(data) * 0.9  # only cuts at a block boundary read cleanly


@pytest.mark.parametrize("cut", [30, 200, 333, 611, -17])
def test_fast_path_reads_pcapng_like_the_scapy_path(tmp_path, cut):
    """The fast path classifies pcapng packets in the read buffer: records, errors and counts
    equal the Scapy path's on a capture of every kind of frame, whole and cut short."""
    from test_fastpath import edge_frames, ib_edge_frames
    from ibpath_scapy.pcapio import PcapNgWriter
    path = tmp_path / "mixed.pcapng"
    with PcapNgWriter(str(path)) as w:
        for i, f in enumerate(edge_frames()):
            w.write(f, 1, i * 1e-3, comment="c%d" % i if i % 5 == 0 else None)
        for i, (lt, f) in enumerate(ib_edge_frames()):
            w.write(f, lt, 1 + i * 1e-3)
    assert_identical(path)
    data = path.read_bytes()
    cut_path = tmp_path / "cut.pcapng"
    cut_path.write_bytes(data[:cut])
    assert_identical(cut_path)


@pytest.mark.parametrize("block", [None, 1000])
def test_fast_path_skips_runs_of_data_blocks_like_the_scapy_path(tmp_path, monkeypatch, block):
    """Capture 1 of the bench (RC data with a MAD every 20th frame), RoCEv2 and native IB, as
    pcapng (two interfaces, so that runs of data blocks alternate between them): the fast
    path skips runs of data blocks in one loop and counts and decodes as the Scapy path does,
    with any read-block size."""
    import sys
    from conftest import ROOT
    sys.path.insert(0, str(ROOT / "bench"))
    from corpus import write_capture1
    from ibpath_scapy.fast import FastDecoder, decode_file_fast
    from ibpath_scapy.pcapio import PcapNgWriter
    if block:
        monkeypatch.setattr(pcapio, "READ_BLOCK", block)
    frames = []
    for encap, lt in (("rocev2", 1), ("ib", 197)):
        src = write_capture1(tmp_path / f"c1-{encap}.pcap", 1000, encap=encap)
        frames.append([(lt, f.data) for f in read_frames(str(src))])
    path = tmp_path / "c1.pcapng"
    with PcapNgWriter(str(path)) as w:
        for i in range(1000):  # 40 of one interface, then 40 of the other
            lt, data = frames[(i // 40) % 2][i]
            w.write(data, lt, i * 1e-6)
    recs = assert_identical(path)
    assert len(recs) == 50
    d = FastDecoder()
    list(decode_file_fast(str(path), d))
    assert d.skipped == 950 and d.stats.frames == 1000
