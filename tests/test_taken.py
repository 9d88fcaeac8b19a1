"""The readers' runs of taken frames handed over whole (pcapio.Taken, classified_input's
runs=True) and the fast path's decode of them (FastDecoder.decode_taken, native/_mad.c's
MadDecoder.taken), against the frame-by-frame path that remains the reference: the same
frames (numbers, times, bytes, comments) and skipped counts from the readers, and the same
records, statistics and errors from the decoder, over the project's captures, the fuzz
inputs and the three bench captures in both encapsulations and containers, pcaps of both
byte orders and resolutions with epoch times, and a pcapng whose packet blocks carry comments."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from hypothesis import given, strategies as st

from ibpath_scapy.capture import pcapio
from ibpath_scapy.capture.pcapio import CaptureError, PcapNgWriter, Taken, read_frames
from ibpath_scapy.engines.fast import FULL, FastDecoder, decode_batches_fast, prefilter
from ibpath_scapy.engines.fast.reader import classified_frames
from ibpath_scapy.engines.scapy import blobsniff

from conftest import project_inputs

try:
    from ibpath_scapy.native import _scan
except ImportError:  # a build without a compiler: decode_taken's Python loop alone
    _scan = None

needs_c = pytest.mark.skipif(_scan is None, reason="the package was built without its C "
                             "decoder (no compiler or no Python headers)")


def _restamped(src: Path, dst: Path, endian: str, nano: bool, base: int = 1_733_400_000) -> Path:
    """src (a little-endian microsecond pcap) written in byte order `endian`, with nanosecond
    stamps or not, each frame at a second from `base` on (an epoch second: a time computed
    wrong in its last bits survives round(time, 9); 0: times below 2**24 s, which the C
    decoder rounds as Python does) and a fraction spread over the whole second; from the pcap
    header layout (pcap-savefile(5)), not from pcapio's writer."""
    raw = src.read_bytes()
    assert raw[:4] == b"\xd4\xc3\xb2\xa1", "a little-endian microsecond pcap expected"
    head = struct.unpack_from("<HHiIII", raw, 4)
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = [struct.pack(endian + "I", magic) + struct.pack(endian + "HHiIII", *head)]
    pos, i = 24, 0
    while pos < len(raw):
        incl, orig = struct.unpack_from("<II", raw, pos + 8)
        frac = (i * 999_983_771 + 7) % (10 ** 9 if nano else 10 ** 6)
        out.append(struct.pack(endian + "IIII", base + i // 100, frac, incl, orig))
        out.append(raw[pos + 16:pos + 16 + incl])
        pos, i = pos + 16 + incl, i + 1
    dst.write_bytes(b"".join(out))
    return dst


def _commented(src: Path, dst: Path) -> Path:
    """src as pcapng, every third packet block with a comment (options after the packet)."""
    with PcapNgWriter(str(dst)) as w:
        for f in read_frames(str(src)):
            w.write(f.data, f.linktype, f.time, comment=f"frame {f.number}" if f.number % 3 else None)
    return dst


@pytest.fixture(scope="module")
def inputs(bench_capture, tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("taken")
    bench = [bench_capture(k, 3000, encap=e, pcapng=n) for k in ("capture1", "capture2", "capture3")
             for e in ("rocev2", "ib") for n in (False, True)]
    c3 = bench_capture("capture3", 3000, encap="ib")
    stamped = [_restamped(c3, d / f"c3-{e}-{n}.pcap", e, n == "ns") for e in "<>"
               for n in ("us", "ns")] + [_restamped(c3, d / "c3-ns-from-0.pcap", "<", True, 0)]
    return project_inputs() + bench + stamped + [_commented(stamped[0], d / "c3-comments.pcapng")]


def _frames(path: Path, runs: bool) -> tuple:
    """(frames with their classification, skipped count, error) of the fast path's reader,
    runs expanded by Taken.frame."""
    got, skipped, error = [], [0], None
    try:
        for f, cl in classified_frames(str(path), prefilter(), blobsniff.plausible, skipped,
                                       runs=runs):
            for fr in ([f.frame(j) for j in range(len(f))] if f.__class__ is Taken else [f]):
                got.append((fr.number, fr.time, fr.linktype, fr.data, fr.wirelen, fr.comment,
                            repr(cl)))
    except CaptureError as exc:
        error = str(exc)
    return got, skipped[0], error


def _one_by_one(path: Path, decoder: FastDecoder) -> tuple:
    """The records decode_at and feed make of each frame (the reference), with the stats
    (compared as dataclasses: by_kind in any order, as a dict compares)."""
    records, skipped, error = [], [0], None
    try:
        for f, cl in classified_frames(str(path), prefilter(), blobsniff.plausible, skipped):
            rec = None if cl is FULL else decoder.decode_at(f, cl)
            records += decoder.feed(f) if rec is None else [rec]
    except CaptureError as exc:
        error = str(exc)
    decoder.stats.frames += skipped[0]
    records += decoder.finish()
    return records, decoder.stats, error


def _in_runs(path: Path, decoder: FastDecoder) -> tuple:
    records, error = [], None
    try:
        for batch in decode_batches_fast(str(path), decoder):
            records += batch
    except CaptureError as exc:
        error = str(exc)
    return records, decoder.stats, error


@pytest.mark.parametrize("native", [True, False], ids=["c-loops", "python-loops"])
def test_a_run_holds_the_frames_the_loop_took(inputs, native, monkeypatch):
    """Expanded, the runs are the frames classified_input gives one by one: numbers, times,
    bytes, original lengths, comments, classifications and the skipped count, whichever
    loops ran; and runs are there to compare (most of the bench captures' frames)."""
    if not native:
        monkeypatch.setattr(pcapio, "_native_scan", lambda: None)
    in_runs = 0
    for path in inputs:
        one, runs = _frames(path, False), _frames(path, True)
        assert runs == one, path
        in_runs += len(runs[0])
    assert in_runs > 30000


@pytest.mark.parametrize("native", [True, False], ids=["c-decoder", "python-decoder"])
def test_a_run_decodes_as_its_frames_one_by_one(inputs, native):
    """decode_batches_fast (runs through decode_taken), with the C decoder and without it,
    makes the records, statistics and errors the Python decoder makes frame by frame
    (decode_at and feed, the reference)."""
    if native and _scan is None:
        pytest.skip("the package was built without its C decoder")
    for path in inputs:
        a, b = FastDecoder(), FastDecoder()
        b._native = None
        if not native:
            a._native = None
        assert _in_runs(path, a) == _one_by_one(path, b), path


@needs_c
def test_the_c_run_decoder_refuses_what_is_not_a_run():
    """MadDecoder.taken checks its arguments and every position against the buffer before it
    reads: an error, never a read outside it."""
    d = FastDecoder()
    path = project_inputs()[0]
    at = next(cl for f, cl in classified_frames(str(path), prefilter(), blobsniff.plausible)
              if cl is not FULL)
    buf = bytes(64)
    args = (0, False, True, 1e-6, at, d.stats)
    for taken, why in (([0], "pairs"), ([0, 60], "outside the buffer"),
                       ([0, -1], "outside the buffer"), ([0, 0], "outside the buffer")):
        b = buf if taken != [0, 0] else struct.pack("<IIII", 0, 0, 1000, 1000) + buf
        with pytest.raises(ValueError, match=why):
            d._native.taken(b, taken, *args)
    with pytest.raises(TypeError):
        d._native.taken(bytearray(buf), [], *args)
    assert d._native.taken(buf, [], *args) == ([], [])


@needs_c
def test_the_c_record_headers_are_pcapio_s():
    """The C loops and the run decoder read a pcap record header and an EPB up to its packet
    by native/_capture.h; the module says its sizes, which are pcapio's."""
    assert (_scan.REC_HDR, _scan.EPB_DATA) == (pcapio._REC_HDR, pcapio._EPB_DATA)


@given(st.floats(allow_nan=False, allow_infinity=False, min_value=2.0 ** 24)
       | st.floats(allow_nan=False, allow_infinity=False, max_value=-2.0 ** 24)
       | st.sampled_from([2.0 ** 24, -2.0 ** 24, 2.0 ** 24 + 2.0 ** -28, 1_733_400_000.123456,
                          1.7e18, 2.0 ** 53 + 2.0]))
def test_a_time_of_2_24_seconds_or_more_is_its_own_rounding(x):
    """The C decoder's shortcut (native/_mad.c round9), held to Python's round itself: a
    float of magnitude 2**24 or more is what round(x, 9) gives. (Below, it is not: the
    pcaps stamped from second 0 above hold such times, where the C rounds as Python.)"""
    assert round(x, 9) == x
