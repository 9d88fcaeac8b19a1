"""The readers' loops over runs of skipped frames in C (ibpath_scapy/native/_scan.c) against the
same loops in Python (pcapio._SCAN_SOURCE), which remain the reference: the same (pos, k)
from any buffer, and the same frames, records and findings over the project's captures, the
fuzz inputs and both bench captures, whichever runs. Also its crc, the CRCs with their
variant fields as ones, against crc's Python twin and a textbook CRC (the external vectors
through both: tests/test_crc.py)."""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from ibpath_scapy.engines.scapy import blobsniff
from ibpath_scapy.model import crc
from ibpath_scapy.capture import pcapio
from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast, prefilter
from ibpath_scapy.engines.fast.prefilter import IbMadAt, MadAt
from ibpath_scapy.engines.fast.reader import classified_frames
from ibpath_scapy.layers.ib import LINKTYPE_ERF
from ibpath_scapy.capture.pcapio import CaptureError, RunTest, TakeTest, Term

from conftest import CAPTURES, project_inputs

try:
    from ibpath_scapy.native import _scan
except ImportError:  # a build without a compiler: the Python loops run, nothing to compare
    _scan = None

_can_build = bool(shutil.which("gcc")) and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()
needs_c = pytest.mark.skipif(_scan is None, reason="the package was built without its C loops "
                             "(no compiler or no Python headers): the Python loops run alone")


def test_the_c_loops_are_built_where_a_compiler_is():
    """tools/install.sh installs gcc and the Python headers: the package build must then have
    compiled the C loops, and the readers must pick them."""
    if not _can_build:
        pytest.skip("no gcc or no Python.h on this machine: the pure-Python loops are the build")
    assert _scan is not None, "ibpath_scapy.native._scan was not built (pip install -e . again)"
    assert pcapio._native_scan() is _scan


def _both(test: RunTest, kind: str, *args, take: TakeTest | None = None):
    """The C and the Python scanner of one RunTest (and TakeTest)."""
    c = pcapio._scanners(test, kind, *args, take=take)
    saved = pcapio._native_scan
    pcapio._native_scan = lambda: None
    try:
        py = pcapio._scanners(test, kind, *args, take=take)
    finally:
        pcapio._native_scan = saved
    return c, py


def _synthetic() -> tuple[RunTest, TakeTest]:
    """Every kind of term, 4-byte fields and shifts included; a take test that shares field
    names with the run test (each runs in its own names) and reads one of another length."""
    run = RunTest([Term("f1", 0, 1, shift=2, mask=3, equals=1),
                   Term("f2", 1, 2, len_minus=3),
                   Term("f3", 3, 4, not_in=frozenset({0, 7, 0xFFFFFFFF})),
                   Term("f4", 9, 4, mask=0xF0F0, equals=0x10)], 13, 60)
    take = TakeTest([Term("f1", 0, 1, shift=2, mask=3, equals=2),
                     Term("g2", 1, 2, len_minus=5),
                     Term("g3", 3, 4, mask=0xFFFFFF, is_in=frozenset({1, 0x10000, 0xFFFFFF}))],
                    16, 70, "taken")
    return run, take


def _tests() -> dict[str, tuple[RunTest, TakeTest | None]]:
    pf = prefilter()
    tests = {"ether": (pf.run_test(1), pf.take_test(1)),
             "erf": (pf.run_test(LINKTYPE_ERF), pf.take_test(LINKTYPE_ERF)),
             "synthetic": _synthetic()}
    assert all(isinstance(r, RunTest) and isinstance(t, TakeTest) for r, t in tests.values())
    return tests


def _template(test: RunTest, rnd: random.Random, size: int) -> bytearray:
    """A frame of `size` bytes that passes `test` (random bytes elsewhere)."""
    f = bytearray(rnd.randbytes(size))
    for t in test.terms:
        if t.not_in is not None:
            v = next(x for x in range(1 << 8 * t.size) if x not in t.not_in)
        else:
            want = (t.equals if t.equals is not None else rnd.choice(sorted(t.is_in))
                    if t.is_in is not None else size - t.len_minus)
            if t.mask is None:
                v = want
            else:
                old = int.from_bytes(f[t.offset:t.offset + t.size], "big")
                v = (old & ~(t.mask << t.shift)) | (want << t.shift)
        f[t.offset:t.offset + t.size] = (v % (1 << 8 * t.size)).to_bytes(t.size, "big")
    return f


def _stream(tests: tuple[RunTest, TakeTest | None], seed: int, kind: str, endian: str) -> bytes:
    """Records or enhanced packet blocks of frames that mostly pass the run or the take test,
    some mutated at a term's bytes, some of another length, one perhaps truncated at the end."""
    rnd = random.Random(seed)
    out = bytearray()
    for _ in range(rnd.randint(0, 40)):
        test = tests[1] if tests[1] is not None and rnd.random() < 0.4 else tests[0]
        odd = rnd.random() < 0.06  # a frame too short or too long for the test
        size = (rnd.choice([max(test.least - 1, 0), test.most + 1 if test.most < 100 else 0])
                if odd else test.least + rnd.choice([0, rnd.randint(0, test.most - test.least)
                                                     if test.most < 100 else 40]))
        f = _template(test, rnd, size) if size >= test.least else bytearray(rnd.randbytes(size))
        if rnd.random() < 0.06 and test.terms and len(f) >= test.least:
            t = rnd.choice(test.terms)
            f[t.offset + rnd.randrange(t.size)] ^= 1 << rnd.randrange(8)
        if kind == "pcap":
            incl = len(f) if rnd.random() > 0.05 else len(f) + rnd.randint(1, 9)
            out += struct.pack(endian + "IIII", 0, 0, incl, len(f)) + f
        else:
            pad = (-len(f)) % 4
            bl = 32 + len(f) + pad
            iface = 0 if rnd.random() > 0.05 else 1
            btype = 6 if rnd.random() > 0.03 else 3
            if rnd.random() < 0.03:
                bl += rnd.choice([1, 2, -4])
            out += struct.pack(endian + "IIIIIII", btype, bl, iface, 0, 0, len(f), len(f))
            out += f + b"\0" * pad + struct.pack(endian + "I", bl)
    if rnd.random() < 0.5 and out:
        out = out[:rnd.randrange(len(out))]
    return bytes(out)


@needs_c
@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), name=st.sampled_from(["ether", "erf", "synthetic"]),
       kind=st.sampled_from(["pcap", "epb"]), endian=st.sampled_from(["<", ">"]),
       start=st.integers(0, 200), take=st.booleans())
def test_c_and_python_loops_stop_at_the_same_record(seed, name, kind, endian, start, take):
    tests = _tests()[name]
    buf = _stream(tests, seed, kind, endian)
    args = (endian,) if kind == "pcap" else (endian, 0)
    c, py = _both(tests[0], kind, *args, take=tests[1] if take else None)
    pos = min(start, len(buf))
    for n in {len(buf), max(len(buf) - 7, 0)}:
        got = c(buf, pos, n)
        assert got == py(buf, pos, n)
        assert c(bytearray(buf), pos, n) == got  # the readers' buffers may be either
        assert take or not got[2]


@needs_c
def test_the_loops_take_at_most_take_most(monkeypatch):
    """Both loops return after TAKE_MOST taken frames (the readers then call them again)."""
    monkeypatch.setattr(pcapio, "TAKE_MOST", 3)
    run, take = _synthetic()  # new tests: no loops made with another TAKE_MOST
    rnd = random.Random(5)
    frames = [_template(take, rnd, 20) for _ in range(8)]
    buf = b"".join(struct.pack("<IIII", 0, 0, len(f), len(f)) + f for f in frames)
    c, py = _both(run, "pcap", "<", take=take)
    assert c(buf, 0, len(buf)) == py(buf, 0, len(buf)) == (3 * 36, 3, [0, 0, 1, 36, 2, 72])


class _NoTake:
    """The pre-filter without its take tests: every frame not skipped is classified."""

    def __init__(self, pf):
        self.pf = pf

    def classifier(self, linktype):
        return self.pf.classifier(linktype)

    def run_test(self, linktype):
        return self.pf.run_test(linktype)


def _frames_of(path: Path, classifier) -> tuple:
    skipped, got, error = [0], [], None
    try:
        for f, cl in pcapio.classified_input(str(path), classifier, skipped, blobsniff.plausible):
            got.append((f.number, f.time, f.linktype, f.data, f.wirelen, f.comment, cl))
    except CaptureError as exc:
        error = str(exc)
    return got, skipped[0], error


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_a_taken_frame_is_what_the_classifier_makes_of_it(bench_capture, native, monkeypatch):
    """The readers hand a frame the take test holds of over with its value, without asking
    the classifier: over every capture of the project, the fuzz inputs and both bench captures
    (both encapsulations and containers), the same frames, classifications, numbers and
    skipped counts as asking it about every frame, C loops or Python."""
    if not native:
        monkeypatch.setattr(pcapio, "_native_scan", lambda: None)
    pf = prefilter()
    paths = project_inputs() + [bench_capture(k, 3000, encap=e, pcapng=n)
                                for k in ("capture1", "capture2") for e in ("rocev2", "ib")
                                for n in (False, True)]
    took = 0
    for path in paths:
        with_take, without = _frames_of(path, pf), _frames_of(path, _NoTake(pf))
        assert with_take == without, path
        took += sum(isinstance(x[-1], (MadAt, IbMadAt)) for x in with_take[0])
    assert took > 12000


@needs_c
def test_the_c_loops_refuse_a_bad_program_or_bounds():
    test = _tests()["synthetic"][0]
    c, _ = _both(test, "pcap", "<")
    with pytest.raises(ValueError, match="scan bounds"):
        c(b"\0" * 8, 0, 9)
    with pytest.raises(ValueError, match="malformed scan program"):
        _scan.pcap(1, 13, 60, b"\x01" + b"\0" * 7, 0, -1, b"", 9, b"", 0, 0)
    with pytest.raises(ValueError, match="malformed scan program"):  # the take program's
        _scan.pcap(1, 13, 60, pcapio._program(test), 0, 9, b"\x01" + b"\0" * 7, 9, b"", 0, 0)
    with pytest.raises(ValueError, match="scan bounds"):  # a take test reaching past its least
        _scan.pcap(1, 13, 60, pcapio._program(test), 3, 9, pcapio._program(test), 9, b"", 0, 0)
    with pytest.raises(ValueError, match="reads 13 bytes"):
        RunTest(test.terms, 12, 60)
    with pytest.raises(ValueError, match="the loops' own names"):
        RunTest([Term("b", 0, 1, equals=1)], 1, 60)


def _classified(path: Path, native: bool) -> tuple:
    """(frames with their classification, skipped count, error) of the fast path's reader."""
    saved = pcapio._native_scan
    if not native:
        pcapio._native_scan = lambda: None
    got, skipped, error = [], [0], None
    try:
        for f, cl in classified_frames(str(path), prefilter(), blobsniff.plausible, skipped):
            got.append((f.number, f.time, f.linktype, f.data, f.wirelen, f.comment, repr(cl)))
    except CaptureError as exc:
        error = str(exc)
    finally:
        pcapio._native_scan = saved
    return got, skipped[0], error



@needs_c
def test_same_frames_over_the_project_captures_and_the_fuzz_inputs():
    files = project_inputs()
    assert len(files) > 40
    for path in files:
        assert _classified(path, True) == _classified(path, False), path


@needs_c
@pytest.mark.parametrize("kind", ["capture1", "capture2"])
@pytest.mark.parametrize("encap", ["rocev2", "ib"])
@pytest.mark.parametrize("pcapng", [False, True], ids=["pcap", "pcapng"])
def test_same_records_over_the_bench_captures(bench_capture, kind, encap, pcapng):
    """Both bench captures, both encapsulations and containers: the same frames, the same
    records (and statistics), whichever loops skipped the data frames."""
    path = bench_capture(kind, 4000, encap=encap, pcapng=pcapng)
    c, py = _classified(path, True), _classified(path, False)
    assert c == py
    if kind == "capture1":
        assert c[1] == 3800  # the 95 % of RC data the loops skip
    records = []
    for native in (True, False):
        saved = pcapio._native_scan
        if not native:
            pcapio._native_scan = lambda: None
        try:
            d = FastDecoder()
            records.append((list(decode_file_fast(str(path), d)), d.stats.frames, d.skipped))
        finally:
            pcapio._native_scan = saved
    assert records[0] == records[1]


@needs_c
def test_same_report_from_the_command_either_way(bench_capture):
    """`ibpath audit --format json` with the C loops and with IBPATH_NATIVE_SCAN=0: the same
    report, of bench capture 1 (native IB, pcapng: 95 % skipped in runs) beside a capture
    with findings."""
    paths = [bench_capture("capture1", 4000, encap="ib", pcapng=True),
             CAPTURES / "corpus" / "res-no-followup.pcapng"]
    out = []
    for v in ("1", "0"):
        p = subprocess.run([sys.executable, "-m", "ibpath_scapy", "audit", "--format", "json",
                            *map(str, paths)], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "IBPATH_NATIVE_SCAN": v})
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        out.append(json.loads(p.stdout))
    assert out[0] == out[1]
    assert out[0]["findings"] and len(out[0]["files"]) == 2


@needs_c
def test_the_generated_streams_hold_runs_and_every_way_to_stop():
    """The property test above can fail: its streams hold long runs of skipped and taken
    frames and stop in every way (a frame that fails a term, a damaged length, a truncated
    end)."""
    ks, taken, stops = [], [], set()
    for name, tests in _tests().items():
        for kind, args in (("pcap", ("<",)), ("epb", (">", 0))):
            py = _both(tests[0], kind, *args, take=tests[1])[1]
            for seed in range(60):
                buf = _stream(tests, seed, kind, args[0])
                pos, k, got = py(buf, 0, len(buf))
                ks.append(k)
                taken.append(len(got) // 2)
                stops.add("end" if pos == len(buf) else "short" if len(buf) - pos < 16 else "frame")
    assert max(ks) >= 10 and sum(k > 0 for k in ks) > len(ks) // 2
    assert max(taken) >= 5 and sum(t > 0 for t in taken) > len(taken) // 8  # and taken ones
    assert stops == {"end", "short", "frame"}


def _textbook(p, data: bytes) -> int:
    """A bit-at-a-time reflected CRC (the oracle neither engine shares code with)."""
    reg = p.init
    for byte in data:
        reg ^= byte
        for _ in range(8):
            reg = (reg >> 1) ^ p.poly_reflected if reg & 1 else reg >> 1
    return reg ^ p.xorout


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.binary(max_size=60), st.binary(max_size=20),
       st.integers(0, 130), st.integers(0, 130))
def test_c_crc_is_the_python_one(data, mask, prefix, a, b):
    """native/_scan.c's crc against its Python twin (crc.crc_engine without the extension) and a
    textbook CRC of the masked bytes, for both CRCs of crcspec, any slice, mask and prefix."""
    from ibpath_scapy.model import crcspec
    start, end = sorted((a, b))
    for p in (crcspec.ICRC, crcspec.VCRC):
        c, py = crc.crc_engine(p, _scan), crc.crc_engine(p, None)
        if end > len(data):
            for fun in (c, py):
                with pytest.raises(ValueError):
                    fun(prefix, mask, data, start, end)
            continue
        masked = bytes(x | (mask[i] if i < len(mask) else 0)
                       for i, x in enumerate(data[start:end]))
        want = _textbook(p, prefix + masked)
        assert c(prefix, mask, data, start, end) == py(prefix, mask, data, start, end) == want
        assert c(prefix, mask, bytearray(data), start, end) == want


@needs_c
def test_c_crc_refuses_a_bad_table_and_leaves_its_input_alone():
    from array import array
    from ibpath_scapy.model import crcspec
    table = crc.crc_table(crcspec.ICRC)
    # too short, too short in bytes, the 2048 words off their alignment
    for bad in (table[:2047], table.tobytes()[1:], memoryview(b"\0" + table.tobytes())[1:]):
        with pytest.raises(ValueError):
            _scan.crc(bad, 0, 0, b"", b"", b"abc", 0, 3)
    with pytest.raises(ValueError):
        _scan.crc(table, 0, 0, b"", b"", b"abc", 2, 1)
    data = bytes(range(64))
    _scan.crc(table, 0xFFFFFFFF, 0xFFFFFFFF, b"\xff" * 8, b"\xff" * 8, data, 0, 64)
    assert data == bytes(range(64))
    assert isinstance(table, array)
