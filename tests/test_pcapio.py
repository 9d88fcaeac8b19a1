"""pcapio, the one reader of captures (classic pcap and pcapng, block-buffered; the Scapy path,
the fast path and the tshark engine's clock all read through it), against independent
readers, at every read-block boundary and every truncation.

Oracles: Scapy's RawPcapNgReader and RawPcapReader for the frames of intact files (data, link
type, timestamp, comment, interface name); tshark for sections, interface IDs and names and
if_tsoffset; for every truncated copy, the intact file's own frames (a prefix of them) and its
record and block boundaries, walked here (a cut there reads cleanly, any other cut is an
error naming the file, the frame being read, the reason and a byte offset inside the cut).
"""

from __future__ import annotations

import random
import re
import struct
import subprocess

import pytest
from scapy.utils import RawPcapNgReader, RawPcapReader

from ibpath_scapy.capture import pcapio
from ibpath_scapy.capture.pcapio import (
    CaptureError,
    Interface,
    Interfaces,
    RunTest,
    Term,
    classified_input,
    interfaces,
    read_frames,
)

from test_fastpath import assert_identical
from tshark_util import tshark_env


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


TSOFFSET = 3600


def varied_pcapng(endian: str, seed: int = 3) -> bytes:
    """Two sections, interfaces of three link types and time resolutions (one with if_name
    and if_tsoffset, one with if_name only), EPBs with and without comments, and the blocks
    that carry no frame (NRB, ISB)."""
    rnd = random.Random(seed)
    e = endian
    out = _shb(e)
    out += _block(e, 1, struct.pack(e + "HHI", 1, 0, 65535) + _opt(e, 2, b"roce0")
                  + _opt(e, 9, b"\x09") + _opt(e, 14, struct.pack(e + "q", TSOFFSET))
                  + _opt(e, 0, b""))
    out += _block(e, 1, struct.pack(e + "HHI", 197, 0, 65535))
    for i in range(12):
        out += _epb(e, i % 2, (1 << 32) * (i + 1) + i, rnd.randbytes(rnd.randrange(0, 90)),
                    b"set_option=0 frame %d" % i if i % 3 == 0 else None)
    out += _block(e, 4, b"\0" * 8)  # name resolution
    out += _block(e, 5, struct.pack(e + "III", 0, 1, 2))  # interface statistics
    out += _shb(e) + _block(e, 1, struct.pack(e + "HHI", 101, 0, 65535) + _opt(e, 2, b"ib0")
                             + _opt(e, 9, b"\x86") + _opt(e, 0, b""))
    out += _epb(e, 0, 123456789, b"\x45" + rnd.randbytes(40))
    return out


def varied_pcap(endian: str, nano: bool, seed: int = 5) -> bytes:
    """A classic pcap (byte order, micro- or nanoseconds): records of 0 to 90 bytes."""
    rnd = random.Random(seed)
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = struct.pack(endian + "IHHiIII", magic, 2, 4, 0, 0, 65535, 1)
    for i in range(14):
        data = rnd.randbytes(rnd.randrange(0, 90))
        frac = rnd.randrange(10 ** 9 if nano else 10 ** 6)
        out += struct.pack(endian + "IIII", 1_700_000_000 + i, frac, len(data), len(data) + 7)
        out += data
    return out


CAPTURES = {
    "pcapng-le": lambda: varied_pcapng("<"),
    "pcapng-be": lambda: varied_pcapng(">"),
    "pcap-le-us": lambda: varied_pcap("<", False),
    "pcap-be-ns": lambda: varied_pcap(">", True),
}


@pytest.fixture(params=list(CAPTURES))
def capture(request, tmp_path):
    name = request.param
    path = tmp_path / (f"{name}.pcapng" if name.startswith("pcapng") else f"{name}.pcap")
    path.write_bytes(CAPTURES[name]())
    return path


@pytest.fixture(params=["<", ">"], ids=["little-endian", "big-endian"])
def varied(request, tmp_path):
    path = tmp_path / f"varied{'le' if request.param == '<' else 'be'}.pcapng"
    path.write_bytes(varied_pcapng(request.param))
    return path


def _row(f) -> tuple:
    return f.number, f.linktype, f.data, f.wirelen, f.comment, f.time


def _frames(path) -> list[tuple]:
    return [_row(f) for f in read_frames(str(path))]


def _boundaries(data: bytes) -> dict[int, int]:
    """Where each record or block of a capture ends (and the file header, for pcap), with
    the number of frames before: the cuts that leave a file with nothing cut short. Walked
    from the lengths alone."""
    if data[:4] == b"\x0a\x0d\x0d\x0a":
        ends, pos, frames, e = {}, 0, 0, "<"
        while pos < len(data):
            if data[pos:pos + 4] == b"\x0a\x0d\x0d\x0a":
                e = "<" if data[pos + 8:pos + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            frames += struct.unpack(e + "I", data[pos:pos + 4])[0] == 6  # an EPB
            pos += struct.unpack(e + "I", data[pos + 4:pos + 8])[0]
            ends[pos] = frames
        return ends
    e = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    ends, pos = {24: 0}, 24
    while pos < len(data):
        pos += 16 + struct.unpack(e + "I", data[pos + 8:pos + 12])[0]
        ends[pos] = len(ends)
    return ends


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
                       capture_output=True, text=True, check=True, env=tshark_env())
    assert p.stdout.splitlines()[12].startswith("raw:ip")
    assert ours[12][1] == 101 and ours[12][5] == pytest.approx(123456789 / 64)


@pytest.mark.parametrize("endian", ["<", ">"])
@pytest.mark.parametrize("nano", [False, True], ids=["usec", "nsec"])
def test_frames_equal_scapys_pcap_reader(tmp_path, endian, nano):
    path = tmp_path / "varied.pcap"
    path.write_bytes(varied_pcap(endian, nano))
    ours = list(read_frames(str(path)))
    with RawPcapReader(str(path)) as r:
        theirs = list(r)
        assert r.linktype == 1
    assert len(ours) == len(theirs) == 14
    res = 1e-9 if nano else 1e-6
    for n, (o, (data, meta)) in enumerate(zip(ours, theirs), 1):
        assert (o.number, o.linktype, o.data, o.wirelen) == (n, 1, data, meta.wirelen)
        assert o.time == meta.sec + meta.usec * res
    assert list(interfaces(str(path))) == [Interface(1, 65535, 10 ** 9 if nano else 10 ** 6, res)]


def test_interfaces_equal_tsharks_and_scapys(varied):
    """interfaces(): each IDB's section, ID, link type, clock and name, as tshark numbers and
    names them, with Scapy's ticks per second; tshark adds if_tsoffset to the time, pcapio
    keeps it apart (Frame.time is the stamp's own)."""
    got = list(interfaces(str(varied)))
    assert [(i.section, i.index, i.linktype, i.units, i.name, i.tsoffset) for i in got] == [
        (1, 0, 1, 10 ** 9, "roce0", TSOFFSET), (1, 1, 197, 10 ** 6, None, 0),
        (2, 0, 101, 64, "ib0", 0)]
    assert [i.resolution for i in got] == [1e-9, 1e-6, 2.0 ** -6]
    with RawPcapNgReader(str(varied)) as r:
        scapy = [(meta.linktype, meta.tsresol, meta.ifname) for _, meta in r][:12]
    frames = list(read_frames(str(varied)))
    fields = ["frame.section_number", "frame.interface_id", "frame.interface_name",
              "frame.time_epoch"]
    p = subprocess.run(["tshark", "-n", "-r", str(varied), "-T", "fields",
                        *[x for f in fields for x in ("-e", f)]],
                       capture_output=True, text=True, check=True, env=tshark_env())
    rows = [line.split("\t") for line in p.stdout.splitlines()]
    assert len(rows) == len(frames) == 13
    for n, (frame, (section, iface, name, epoch)) in enumerate(zip(frames, rows)):
        i = got[[(g.section, g.index) for g in got].index((int(section), int(iface)))]
        assert i.linktype == frame.linktype
        assert float(epoch) - frame.time == pytest.approx(i.tsoffset, abs=1e-6)
        if n < 12:  # the first section (tshark 4.0 names a later section's interfaces
            # after the first section's of the same ID; Scapy keeps the first section's)
            assert (i.name or "unknown") == name  # (tshark's word for none)
            assert scapy[n] == (i.linktype, i.units, i.name.encode() if i.name else None)


def test_interfaces_are_read_on_demand_and_leniently(tmp_path, monkeypatch):
    """Interfaces(): the file is read only as far as the interface asked for; one the file does
    not describe is None, as is any after damage, whose error is kept."""
    data = varied_pcapng("<")
    path = tmp_path / "v.pcapng"
    path.write_bytes(data)
    monkeypatch.setattr(pcapio, "READ_BLOCK", 64)
    with Interfaces(str(path)) as ifaces:
        assert ifaces.get(1, 0).name == "roce0"
        assert ifaces._input.pos < 200  # the SHB and the first IDB, not the frames after
        assert ifaces.get(1, 1).linktype == 197 and ifaces.get(1, 2) is None
        assert ifaces.get(2, 0).units == 64
        assert ifaces.get(3, 0) is None and ifaces.get(0, 0) is None
        assert ifaces.error is None
    second = data.index(_shb("<"), 1) + 28 + 10  # inside the second section's IDB
    path.write_bytes(data[:second])
    with Interfaces(str(path)) as ifaces:
        assert ifaces.get(1, 1).linktype == 197
        assert ifaces.get(2, 0) is None
        assert "truncated pcapng block" in str(ifaces.error)
    path.write_bytes(b"not a capture")
    with Interfaces(str(path)) as ifaces:
        assert ifaces.get() is None and "not a pcap or pcapng file" in str(ifaces.error)


@pytest.mark.parametrize("block", [1, 7, 64, 4096])
def test_read_block_boundaries_change_nothing(capture, monkeypatch, block):
    want = _frames(capture)
    want_ifaces = list(interfaces(str(capture)))
    monkeypatch.setattr(pcapio, "READ_BLOCK", block)
    assert _frames(capture) == want
    assert list(interfaces(str(capture))) == want_ifaces
    assert _classified(capture)[:2] == _odd_first_byte(want)


class _OddFirstByte:
    """A classifier: keeps the frames whose first byte is odd (classified by their bytes),
    skips the others, runs of them in the readers' compiled loops (RunTest) as the fast
    path's pre-filter does."""

    _test = RunTest([Term("b0", 0, 1, mask=1, equals=0)], 1, 1 << 30)

    @staticmethod
    def classifier(linktype):
        return lambda b, s, e: bytes(b[s:e]) if e > s and b[s] & 1 else None

    @classmethod
    def run_test(cls, linktype):
        return cls._test


def _odd_first_byte(frames: list[tuple]) -> tuple[list, int]:
    kept = [f for f in frames if f[2] and f[2][0] & 1]
    return kept, len(frames) - len(kept)


def _classified(path) -> tuple[list, int, str | None]:
    """classified_input's frames, skipped count and error."""
    got, skipped, error = [], [0], None
    try:
        for f, cl in classified_input(str(path), _OddFirstByte, skipped):
            assert cl == f.data
            got.append(_row(f))
    except CaptureError as exc:
        error = str(exc)
    return got, skipped[0], error


def _read(fn, path) -> tuple[list, str | None]:
    got, error = [], None
    try:
        for x in fn(str(path)):
            got.append(x)
    except CaptureError as exc:
        error = str(exc)
    return got, error


def test_every_cut_reads_cleanly_or_names_file_frame_and_reason(capture, tmp_path):
    """Every cut of each capture (every length from 4 bytes, fewer are no capture at all),
    checked once, by every entry point of the one reader: read_frames gives a prefix of the
    intact file's frames, then ends cleanly where the cut is a record or block boundary, else
    raises an error naming the file, the frame being read (0: the file header), a truncation
    and a byte offset in the record or block cut short; classified_input gives the frames of
    that prefix its classifier keeps, counts the others, and raises the same error;
    interfaces() gives the interfaces described before the cut, and the same error."""
    data = capture.read_bytes()
    whole = _frames(capture)
    whole_ifaces = list(interfaces(str(capture)))
    ends = _boundaries(data)
    assert max(ends) == len(data) and ends[len(data)] == len(whole)
    pcap = capture.suffix == ".pcap"
    cut_path = tmp_path / f"cut{capture.suffix}"
    for cut in range(4, len(data) + 1):
        cut_path.write_bytes(data[:cut])
        got, error = _read(lambda p: map(_row, read_frames(p)), cut_path)
        assert got == whole[:len(got)], cut
        if cut in ends:
            assert error is None and len(got) == ends[cut], (cut, error)
        else:
            m = re.fullmatch(rf"{re.escape(str(cut_path))}: frame (\d+): (truncated .+)",
                             error or "")
            assert m, (cut, error)
            frame, reason = int(m.group(1)), m.group(2)
            assert frame == len(got) + 1 or (frame == 0 and not got and "file header" in reason), \
                error
            offset = int(reason.split("byte offset ")[1].split()[0])
            # in the record or block cut short (from its first byte to the cut)
            assert max([0] + [end for end in ends if end < cut]) <= offset <= cut, error
        kept, skipped = _odd_first_byte(got)
        assert _classified(cut_path) == (kept, skipped, error), cut
        ifaces, ierror = _read(interfaces, cut_path)
        assert ifaces == whole_ifaces[:len(ifaces)], cut
        # (a pcap's one interface is its header: the records after are not read)
        assert ierror == (error if not pcap or cut < 24 else None), cut
    assert len(whole) == (14 if pcap else 13) and len(whole_ifaces) == (1 if pcap else 3)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """A pcapng of every kind of frame of test_fastpath's edge cases."""
    from test_fastpath import edge_frames, ib_edge_frames
    from ibpath_scapy.capture.pcapio import PcapNgWriter
    path = tmp_path_factory.mktemp("mixed") / "mixed.pcapng"
    with PcapNgWriter(str(path)) as w:
        for i, f in enumerate(edge_frames()):
            w.write(f, 1, i * 1e-3, comment="c%d" % i if i % 5 == 0 else None)
        for i, (lt, f) in enumerate(ib_edge_frames()):
            w.write(f, lt, 1 + i * 1e-3)
    return path


@pytest.mark.parametrize("cut", [None, 30, 200, 333, 611, -17])
def test_fast_path_reads_pcapng_like_the_scapy_path(mixed, tmp_path, cut):
    """The fast path classifies pcapng packets in the read buffer: records, errors and counts
    equal the Scapy path's on a capture of every kind of frame, whole (cut None) and cut
    short (each file checked once)."""
    path = mixed
    if cut is not None:
        path = tmp_path / "cut.pcapng"
        path.write_bytes(mixed.read_bytes()[:cut])
    assert_identical(path)


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
    from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast
    from ibpath_scapy.capture.pcapio import PcapNgWriter
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
