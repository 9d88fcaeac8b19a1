"""Coverage-guided fuzzing of ibpath's readers and decoders with atheris (issue #43, item 1).

    .venv/bin/python tools/covfuzz.py --seconds 60                  # every target, 60 s each
    .venv/bin/python tools/covfuzz.py --seconds 600 --target mad    # one target
    .venv/bin/python tools/covfuzz.py --runs 1000000 --target pcapio --corpus-out /tmp/c
    .venv/bin/python tools/covfuzz.py --sanitize --seconds 60       # C extension with ASan+UBSan
    .venv/bin/python tools/covfuzz.py --make-corpus                 # tests/data/covfuzz/ again
    .venv/bin/python tools/covfuzz.py --replay [FILE ...]           # inputs through the oracle

atheris is libFuzzer for Python: it instruments the package's bytecode (ibpath_scapy only,
not Scapy) and libFuzzer mutates inputs towards new coverage. Each target runs in a process
of its own (atheris.Setup/Fuzz), seeded from tests/data/covfuzz/<target>/ (the project's
captures cut into units by --make-corpus, reproducibly), writing what it learns to
--corpus-out (a temporary folder unless given: the committed corpus stays small).

The targets and their oracles (a problem raises Finding, or is an uncaught exception):

* pcapio: the bytes as a capture file. read_input must give frames or a CaptureError that
  names the file; the fast path's reader (pre-filter as classifier, runs of frames skipped in
  compiled loops) with the C loops and with their Python twins must give the same frames,
  classifications, skipped count and error, frame by frame and in runs of taken frames
  (pcapio.Taken, expanded); and frames read + skipped = frames of read_input.
* prefilter: a selector byte, then a buffer. The C scan loops (native/_scan.c) and the Python
  ones over the buffer as pcap records or pcapng EPBs: the same (pos, k, taken). The buffer as
  one frame: a frame the run test skips is one the classifier skips, a frame the take test
  takes is classified as the take test says, on every link type the classifier never raises.
* mad: up to 4 frames (selector, length, bytes; the selector may have the CRCs made right).
  The pre-filter's fast-path MADs through FastDecoder.decode_at with the C decoder
  (native/_mad.c) and with the Python one: the same records and statistics, frame by frame.
* rmpp: RMPP segments (a control byte and a 256-byte MAD each) as RoCEv2 or native-IB
  frames through the whole fast path, C and Python alike, and straight into a small
  rmpp.Reassembler whose bookkeeping (open bytes, caps, completion) is checked after each.
* blob: the bytes as a raw blob file and as an ibpath.blob exported PDU: blobsniff, PathArray
  (len // 72 records), and the whole-file oracle below.
* netlink: a pkttype selector and an RDMA netlink record after the cooked header.
* process: a selector (ucma, acm, umad), a pcapng comment and the exported PDU's payload.
* audit: the bytes as a whole capture file (seeded with the project's smaller captures);
  also the CLI's audit of it with the extension's twins (the replay's SA steps, the
  frame-finding test, the spill's chunks) against the same audit with their Python: the same
  findings and transactions.

The whole-file oracle (blob, netlink, process, audit) is tools/fuzz.py's check_in_process:
the Scapy decoder, the fast path (same records, error and statistics) and the audit, each
frame under a CPU-time limit, no exception but a CaptureError naming the file, every
malformed frame reported; here also the fast path with the C extension against its Python
twins (IBPATH_NATIVE_SCAN=0's code).

A crash, an uncaught exception, a difference, a timeout or a sanitizer report is a finding:
libFuzzer writes its input to tests/data/covfuzz/<target>/regressions/ (or --findings DIR),
where tests/test_covfuzz.py replays every input through the same oracle. The report per
target: executions, exec/s, coverage (libFuzzer's cov and ft), corpus size and findings; the
last line printed is all of it as JSON; exit status 1 when there was a finding.

--sanitize builds the C extension again with IBPATH_SANITIZE=1 (setup.py: AddressSanitizer
and UndefinedBehaviorSanitizer, gcc) into build/covfuzz-sanitize/, and runs each target with
gcc's libasan preloaded (LD_PRELOAD: the Python interpreter is not built with ASan) and that
extension imported in place of the installed one. Coverage feedback covers the Python code
only (atheris' bytecode instrumentation; gcc has no libFuzzer coverage instrumentation): the
C code is reached through its Python callers and held to its Python twins, the sanitizers
catching what the comparison cannot see.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "covfuzz"
SANITIZE_BUILD = ROOT / "build" / "covfuzz-sanitize"
EXT_ENV = "IBPATH_COVFUZZ_EXT"  # the sanitized extension a child imports, when set

# target: libFuzzer's -max_len (bytes) and -timeout (seconds per input)
TARGETS = {
    "pcapio": (8192, 20),
    "prefilter": (2048, 20),
    "mad": (2048, 20),
    "rmpp": (2600, 20),
    "blob": (2048, 30),
    "netlink": (2048, 30),
    "process": (1200, 30),
    "audit": (16384, 60),
}


# the targets whose oracle is tools/fuzz.py's whole-file check (the audit included)
WHOLE_FILE = ("blob", "netlink", "process", "audit")


class Finding(Exception):
    """A difference between twins or a broken invariant (an uncaught exception is one too)."""


# ------------------------------------------------------------------------------------------
# Import of the package (instrumented in a fuzzing child), the sanitized extension
# ------------------------------------------------------------------------------------------

def _use_extension(path: str) -> None:
    """Import ibpath_scapy.native._scan from path (the sanitized build) instead of the package's."""
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, target=None, path_=None):
            if name == "ibpath_scapy.native._scan":
                return importlib.util.spec_from_file_location(name, path)
            return None

    sys.meta_path.insert(0, Finder())


_M = None  # the modules the oracles use, imported once (by _modules)


def _modules():
    global _M
    if _M is None:
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        from types import SimpleNamespace

        import ibpath_scapy.engines.scapy.blobsniff as blobsniff
        import ibpath_scapy.model.crc as crc
        import ibpath_scapy.engines.scapy.decode as decode
        import ibpath_scapy.engines.fast as fast
        import importlib
        import ibpath_scapy.capture.pcapio as pcapio
        import ibpath_scapy.facts.rmpp as rmpp
        from ibpath_scapy.capture.encap import exported_pdu
        from ibpath_scapy.layers.pathdata import RECORD_SIZE, PathArray, blob_pdu
        from tools import fuzz
        # (the package's prefilter() function hides the module of that name)
        prefilter = importlib.import_module("ibpath_scapy.engines.fast.prefilter")
        _M = SimpleNamespace(blobsniff=blobsniff, crc=crc, fast=fast, prefilter=prefilter,
                             pcapio=pcapio, rmpp=rmpp, decode=decode, fuzz=fuzz, exported_pdu=exported_pdu,
                             RECORD_SIZE=RECORD_SIZE, PathArray=PathArray, blob_pdu=blob_pdu)
        # tools/fuzz.py's fast-path check makes its FastDecoder by this name: a reset one
        fuzz.FastDecoder = _fast_decoder
    return _M


# ------------------------------------------------------------------------------------------
# Shared pieces of the oracles
# ------------------------------------------------------------------------------------------

_WORK: Path | None = None


def _work() -> Path:
    """A private folder for the files the oracles write (in memory where /dev/shm is)."""
    global _WORK
    if _WORK is None:
        import atexit
        base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        _WORK = Path(tempfile.mkdtemp(prefix="ibpath-covfuzz-", dir=base))
        atexit.register(shutil.rmtree, _WORK, ignore_errors=True)
    return _WORK


class _PythonTwins:
    """Within: the package's C extension unused (pcapio's loops in Python, FastDecoder's
    decoder in Python), as IBPATH_NATIVE_SCAN=0 asks at import."""

    def __enter__(self):
        m = _modules()
        self.saved = m.pcapio._native_scan
        m.pcapio._native_scan = lambda: None
        return self

    def __exit__(self, *exc):
        _modules().pcapio._native_scan = self.saved


_POOL: dict = {}


def _fast_decoder(native: bool = True):
    """A FastDecoder (with the C decoder, or its Python twin alone) as a new one is: one per
    kind, made once and reset for each input (assembler state and statistics new, the
    flyweight tables emptied in place, where the C decoder reads them too). Building one
    compiles the C decoder's plan from the layers, ~1 ms: most of an input's time."""
    m = _modules()
    d = _POOL.get(native)
    if d is None:
        d = _POOL[native] = m.fast.FastDecoder()
        if not native:
            d._native = None
    m.decode.Decoder.__init__(d)
    d.skipped = 0
    for table in vars(d.tables).values():
        if isinstance(table, dict):
            table.clear()
    return d


def _fast_file(path: str, native: bool) -> tuple:
    """(records, statistics, skipped, error) of the fast path over a file."""
    m = _modules()
    d = _fast_decoder(native)
    out, error = [], None
    try:
        # (appended one by one: the records before a damaged frame are compared too)
        if native:
            for rec in m.fast.decode_file_fast(path, d):
                out.append(rec)
        else:
            with _PythonTwins():
                for rec in m.fast.decode_file_fast(path, d):
                    out.append(rec)
    except m.pcapio.CaptureError as exc:
        error = str(exc)
    return out, d.stats, d.skipped, error


def _twins_differ(c: tuple, py: tuple) -> None:
    """A Finding where the C and Python fast paths' (records, statistics, skipped[, error])
    differ: the first differing record, else the counts."""
    if c == py:
        return
    for a, b in zip(c[0], py[0]):
        if a != b:
            raise Finding(f"C/Python fast path differ: C {a!r:.600} / Python {b!r:.600}")
    rest = ", ".join(f"{what} {x!r} / {y!r}" for what, x, y in
                     zip(("stats", "skipped", "error"), c[1:], py[1:]))
    raise Finding(f"C/Python fast path differ: {len(c[0])} / {len(py[0])} records, {rest}")


def _fast_frames(frames: list, native: bool) -> tuple:
    """(records, statistics, skipped) of the fast path over frames in memory: what
    fast._fast_records does with a file's frames (classify, decode_at or feed, finish)."""
    m = _modules()
    d = _fast_decoder(native)
    pf = m.fast.prefilter()
    out = []
    for fr in frames:
        cl = pf.classifier(fr.linktype)(fr.data, 0, len(fr.data))
        if cl is m.prefilter.SKIP:
            d.stats.frames += 1
            d.skipped += 1
            continue
        rec = None if cl == m.prefilter.FULL else d.decode_at(fr, cl)
        if rec is None:
            out.extend(d.feed(fr))
        else:
            out.append(rec)
    out.extend(d.finish())
    return out, d.stats, d.skipped


def _compare_fast_twins_frames(frames: list) -> None:
    _twins_differ(_fast_frames(frames, True), _fast_frames(frames, False))


def _whole_file(path: Path, frames: int, must_decode: set[int] | None = None,
                damaged: bool = False, unreadable: bool = False, twins: bool = True) -> None:
    """tools/fuzz.py's in-process checks (Scapy path, fast path, audit), then (twins) the
    fast path with the C extension against its Python twins."""
    fuzz = _modules().fuzz
    inp = fuzz.Input(path, frames, must_decode or set(), damaged=damaged, unreadable=unreadable)
    st = fuzz.check_in_process(inp, new_fast=_fast_decoder)
    if st.problems:
        raise Finding("; ".join(f"{p.kind}: {p.detail[:1500]}" for p in st.problems))
    if twins:  # the fast path's run there had the C loops: hold it against their twins
        _twins_differ(st.fast, _fast_file(str(path), False))


def _write_frames(name: str, frames: list[tuple]) -> Path:
    """A pcapng of (link type, bytes[, comment]) frames in the work folder."""
    path = _work() / name
    with _modules().pcapio.PcapNgWriter(str(path)) as w:
        for i, fr in enumerate(frames, 1):
            w.write(fr[1], fr[0], float(i), *(fr[2:] if len(fr) > 2 and fr[2] else ()))
    return path


def _chunks(data: bytes, most: int) -> list[tuple[int, bytes]]:
    """[selector byte][2-byte length][bytes] repeated (at most `most`); a last chunk short of
    its length takes what is left."""
    out, i = [], 0
    while i < len(data) and len(out) < most:
        sel = data[i]
        n = int.from_bytes(data[i + 1:i + 3], "big")
        body = data[i + 3:i + 3 + n]
        i += 3 + n
        out.append((sel, body))
    return out


def _chunk_bytes(sel: int, body: bytes) -> bytes:
    return bytes([sel]) + struct.pack(">H", len(body)) + body


# ------------------------------------------------------------------------------------------
# Targets: one_input(data) per target, raising on a finding
# ------------------------------------------------------------------------------------------

def t_pcapio(data: bytes) -> None:
    m = _modules()
    path = _work() / "input"
    path.write_bytes(data)
    frames, error = [], None
    try:
        for fr in m.pcapio.read_input(str(path), m.blobsniff.plausible):
            frames.append(fr)
    except m.pcapio.CaptureError as exc:
        error = str(exc)
        if str(path) not in error:
            raise Finding(f"CaptureError does not name the file: {error}")

    def classified(native: bool, runs: bool = False):
        skipped, got, err = [0], [], None
        saved = m.pcapio._native_scan
        if not native:
            m.pcapio._native_scan = lambda: None
        try:
            for item, cl in m.fast.reader.classified_frames(str(path), m.fast.prefilter(),
                                                            m.blobsniff.plausible, skipped,
                                                            runs=runs):
                run = item if item.__class__ is m.pcapio.Taken else None
                for fr in map(run.frame, range(len(run))) if run is not None else [item]:
                    got.append((fr.number, fr.time, fr.linktype, fr.data, fr.wirelen,
                                fr.comment, repr(cl)))
        except m.pcapio.CaptureError as exc:
            err = str(exc)
        finally:
            m.pcapio._native_scan = saved
        return got, skipped[0], err

    c, py = classified(True), classified(False)
    if c != py:
        raise Finding(f"C/Python loops differ: {len(c[0])}/{len(py[0])} frames, skipped "
                      f"{c[1]}/{py[1]}, error {c[2]!r}/{py[2]!r}")
    for native in (True, False):  # runs of taken frames handed over whole (pcapio.Taken)
        runs = classified(native, runs=True)
        if runs != c:
            raise Finding(f"runs ({'C' if native else 'Python'} loops) differ from frames: "
                          f"{len(runs[0])}/{len(c[0])} frames, skipped {runs[1]}/{c[1]}, "
                          f"error {runs[2]!r}/{c[2]!r}")
    if c[2] != error:
        raise Finding(f"fast reader's error {c[2]!r}, read_input's {error!r}")
    if len(c[0]) + c[1] != len(frames):
        raise Finding(f"fast reader: {len(c[0])} frames + {c[1]} skipped, read_input: "
                      f"{len(frames)}")
    by_number = {f.number: f for f in frames}
    for number, t, lt, d, wirelen, comment, _ in c[0]:
        f = by_number.get(number)
        if f is None or (f.time, f.linktype, f.data, f.wirelen, f.comment) != (t, lt, d, wirelen, comment):
            raise Finding(f"frame {number}: the fast reader's differs from read_input's")


_PF_TESTS: dict | None = None


def _pf_tests() -> dict:
    """The pre-filter's run and take tests by name (as tests/test_native_scan.py has them),
    with the link type whose classifier they stand for (None: synthetic)."""
    global _PF_TESTS
    if _PF_TESTS is None:
        m = _modules()
        pf = m.fast.prefilter()
        P = m.pcapio
        run = P.RunTest([P.Term("f1", 0, 1, shift=2, mask=3, equals=1),
                         P.Term("f2", 1, 2, len_minus=3),
                         P.Term("f3", 3, 4, not_in=frozenset({0, 7, 0xFFFFFFFF})),
                         P.Term("f4", 9, 4, mask=0xF0F0, equals=0x10)], 13, 60)
        take = P.TakeTest([P.Term("f1", 0, 1, shift=2, mask=3, equals=2),
                           P.Term("g2", 1, 2, len_minus=5),
                           P.Term("g3", 3, 4, mask=0xFFFFFF, is_in=frozenset({1, 0x10000, 0xFFFFFF}))],
                          16, 70, "taken")
        _PF_TESTS = {0: (1, pf.run_test(1), pf.take_test(1)),
                     1: (197, pf.run_test(197), pf.take_test(197)),
                     2: (None, run, take)}
    return _PF_TESTS


_CLASSIFY_LINKTYPES = (1, 197, 247, 101, 228, 229, 252, 253, 113, -1)


def t_prefilter(data: bytes) -> None:
    """selector: bits 0-1 the tests (Ethernet, ERF, synthetic), bit 2 EPBs (else pcap
    records), bit 3 big-endian, bit 4 with the take test, bits 5-7 the start position / 8."""
    if not data:
        return
    m = _modules()
    sel, buf = data[0], data[1:]
    lt, run, take = _pf_tests()[sel & 3 if sel & 3 < 3 else 2]
    take = take if sel & 16 else None
    endian = ">" if sel & 8 else "<"
    kind = "epb" if sel & 4 else "pcap"
    args = (endian, 0) if kind == "epb" else (endian,)
    c = m.pcapio._scanners(run, kind, *args, take=take)
    with _PythonTwins():
        py = m.pcapio._scanners(run, kind, *args, take=take)
    pos = min((sel >> 5) * 8, len(buf))
    for n in {len(buf), max(len(buf) - 7, 0)}:
        if n < pos:
            continue
        got = c(buf, pos, n)
        want = py(buf, pos, n)
        if got != want or c(bytearray(buf), pos, n) != got:
            raise Finding(f"C/Python scan loops differ ({kind}{endian}, pos {pos}, n {n}): "
                          f"C {got!r:.300} / Python {want!r:.300}")
        if not (pos <= got[0] <= n):
            raise Finding(f"scan loop ended at {got[0]}, outside [{pos}, {n}]")
    pf = m.fast.prefilter()
    for t in _CLASSIFY_LINKTYPES:
        pf.classifier(t)(buf, 0, len(buf))
    if lt is None:
        return
    # the buffer as one frame: the loops' verdict is the classifier's
    rec = struct.pack("<IIII", 0, 0, len(buf), len(buf)) + buf
    for tk in (take, None):
        loop = m.pcapio._scanners(run, "pcap", "<", take=tk)
        end, k, taken = loop(rec, 0, len(rec))
        cl = pf.classifier(lt)(buf, 0, len(buf))
        if k == 1 and not taken and cl is not m.prefilter.SKIP:
            raise Finding(f"link type {lt}: the run test skips a frame the classifier gives {cl!r}")
        if taken and cl != take.value:
            raise Finding(f"link type {lt}: the take test takes a frame ({take.value!r}) the "
                          f"classifier gives {cl!r}")


def _fix_crcs(data: bytearray, at) -> None:
    """Make the frame's ICRC (and a native-IB frame's VCRC) right after a change."""
    crc = _modules().crc
    MadAt = _modules().prefilter.MadAt
    if isinstance(at, MadAt):
        data[-4:] = crc.rocev2_icrc(bytes(data[at.ip:]))
    else:
        data[-6:-2] = crc.native_icrc(bytes(data[at.lrh:-2]))
        data[-2:] = struct.pack("<H", crc.vcrc(bytes(data[at.lrh:-2])))


_MAD_LINKTYPES = (1, 197, 247, 228)


def _mad_frames(data: bytes, most: int = 4) -> list:
    """Frames of the mad target's input: link type by the selector's bits 0-1; bit 2: the
    CRCs made right where the pre-filter takes the frame."""
    m = _modules()
    pf = m.fast.prefilter()
    out = []
    for i, (sel, body) in enumerate(_chunks(data, most), 1):
        lt = _MAD_LINKTYPES[sel & 3]
        at = pf.classifier(lt)(body, 0, len(body))
        if sel & 4 and isinstance(at, (m.prefilter.MadAt, m.prefilter.IbMadAt)):
            b = bytearray(body)
            _fix_crcs(b, at)
            body = bytes(b)
            at = pf.classifier(lt)(body, 0, len(body))
        out.append((m.pcapio.Frame(i, float(i), lt, body, len(body)), at))
    return out


def t_mad(data: bytes) -> None:
    m = _modules()
    frames = _mad_frames(data)
    got = []
    for native in (True, False):
        d = _fast_decoder(native)
        out = []
        for fr, at in frames:
            if isinstance(at, (m.prefilter.MadAt, m.prefilter.IbMadAt)):
                out.append(d.decode_at(fr, at))
            else:
                out.append(repr(at))
        got.append((out, d.stats))
    if got[0] != got[1]:
        for k, (a, b) in enumerate(zip(got[0][0], got[1][0]), 1):
            if a != b:
                raise Finding(f"frame {k}: C decoder {a!r:.800} / Python {b!r:.800}")
        raise Finding(f"C/Python statistics differ: {got[0][1]} / {got[1][1]}")


_RMPP_TEMPLATES: dict | None = None


def _rmpp_templates() -> dict:
    """A RoCEv2 and a native-IB (ERF) frame of one 256-byte MAD, and where their MAD is."""
    global _RMPP_TEMPLATES
    if _RMPP_TEMPLATES is None:
        from ibpath_scapy.capture.encap import erf_record, native_ib_frame, rocev2_frame
        from ibpath_scapy.layers import MAD
        m = _modules()
        pf = m.fast.prefilter()
        mad = MAD(bytes(256))
        out = {}
        for lt, fr in ((1, bytes(rocev2_frame(mad, src="10.0.0.2", dst="10.0.0.1"))),
                       (197, erf_record(native_ib_frame(mad, slid=1, dlid=2), 0.0))):
            at = pf.classifier(lt)(fr, 0, len(fr))
            assert isinstance(at, (m.prefilter.MadAt, m.prefilter.IbMadAt)), (lt, at)
            out[lt] = (fr, at)
        _RMPP_TEMPLATES = out
    return _RMPP_TEMPLATES


_SEG_OFF, _FLAGS_OFF = 28, 26  # RMPP SegmentNumber and RMPP flags in a MAD


def _rmpp_units(data: bytes) -> list[tuple[int, bytes]]:
    """(control byte, 256-byte MAD) units: the last one zero-padded."""
    out = []
    for i in range(0, len(data), 257):
        unit = data[i:i + 257]
        out.append((unit[0], unit[1:].ljust(256, b"\0")))
    return out[:10]


def t_rmpp(data: bytes) -> None:
    """Control byte: bit 0 native IB (else RoCEv2), bit 1 the CRCs left wrong, bit 2 the
    frame sent twice, bits 4-5 the Reassembler's key (else the MAD's TID)."""
    m = _modules()
    units = _rmpp_units(data)
    if not units:
        return
    tpl = _rmpp_templates()
    frames = []
    for ctl, mad in units:
        fr, at = tpl[197 if ctl & 1 else 1]
        b = bytearray(fr)
        b[at.mad:at.mad + 256] = mad
        if not ctl & 2:
            _fix_crcs(b, at)
        frames += [(197 if ctl & 1 else 1, bytes(b))] * (2 if ctl & 4 else 1)
    _compare_fast_twins_frames([m.pcapio.Frame(i, float(i), lt, b, len(b))
                                for i, (lt, b) in enumerate(frames, 1)])
    # the reassembler alone, small caps so that eviction is reached
    R = m.rmpp
    r = R.Reassembler(max_open=3, max_open_bytes=5 * 256)
    for k, (ctl, mad) in enumerate(units, 1):
        key = (ctl >> 4 & 3,) if ctl & 0x30 else (mad[8:16],)
        seg = int.from_bytes(mad[_SEG_OFF:_SEG_OFF + 4], "big")
        flags = mad[_FLAGS_OFF] & 7
        before = (dict((key_, (dict(t.segments), t.last)) for key_, t in r.open.items()),
                  r.open_bytes)
        if mad[25] in (R.RMPP_TYPE_STOP, R.RMPP_TYPE_ABORT) and ctl & 8:
            r.control(key, mad[25], k)
        else:
            done = r.add(key, seg, flags, mad, k, float(k))
            if r.dropped is not None:
                after = (dict((key_, (dict(t.segments), t.last)) for key_, t in r.open.items()),
                         r.open_bytes)
                if after != before:
                    raise Finding(f"segment {seg} dropped ({r.dropped}) but the open transfers changed")
            if done is not None:
                msg, t = done
                if key in r.open:
                    raise Finding("a completed transfer is still open")
                # (segments numbered past LAST may be held: the receive window is not followed)
                if t.last is None or any(s not in t.segments for s in range(1, t.last + 1)):
                    raise Finding(f"completed with segments {sorted(t.segments)[:20]}, last {t.last}")
                if len(msg) != R.message_length(t.segments[t.last], t.last):
                    raise Finding(f"message of {len(msg)} bytes")
        held = sum(len(s) for t in r.open.values() for s in t.segments.values())
        if r.open_bytes != held or r.open_bytes != sum(t.size for t in r.open.values()):
            raise Finding(f"open_bytes {r.open_bytes}, segments held {held}")
        if len(r.open) > r.max_open:
            raise Finding(f"{len(r.open)} transfers open, cap {r.max_open}")
        # the cap holds but for the oldest transfer: a segment added to it evicts nothing
        # (nor does one transfer alone), so the open bytes may pass the cap by its size
        # (at most MAX_TRANSFER_BYTES, 1 MiB, with the real caps), never by more
        oldest = next(iter(r.open.values()), None)
        if r.open_bytes - (oldest.size if oldest else 0) > r.max_open_bytes:
            raise Finding(f"{r.open_bytes} bytes open, {oldest.size} of them the oldest "
                          f"transfer's: over the cap {r.max_open_bytes}")
        for t in list(r.open.values()) + [t for _, t in r.evicted]:
            if len(t.problems) > R.MAX_PROBLEMS or len(t.rejected) > R.MAX_REJECTED:
                raise Finding("a transfer keeps more problems or frames than its caps")
            if any(not 1 <= s <= R.MAX_SEGMENTS or len(b) > 256 for s, b in t.segments.items()):
                raise Finding("a segment out of range is held")
            if not isinstance(t.why_unfinished(), str):
                raise Finding("why_unfinished() is no text")


def t_blob(data: bytes) -> None:
    m = _modules()
    m.blobsniff.plausible(data)
    n = len(data) // m.RECORD_SIZE
    arr = m.PathArray(data)
    if len(arr.records) != n or arr.trailing != data[n * m.RECORD_SIZE:]:
        raise Finding(f"PathArray: {len(arr.records)} records, {len(arr.trailing)} trailing "
                      f"bytes of {len(data)}")
    raw = _work() / "blob.bin"
    raw.write_bytes(data)
    head = data[:4]
    capture = len(head) == 4 and struct.unpack("<I", head)[0] in (
        0xA1B2C3D4, 0xD4C3B2A1, 0xA1B23C4D, 0x4D3CB2A1, 0x0A0D0D0A)
    blob = not capture and m.blobsniff.plausible(data)
    # a capture's magic: read as one (damaged, most likely); else a blob, or a CaptureError
    # (the twins only where the bytes may be a capture: no C code reads a blob, raw or in an
    # exported PDU: no pre-filter loop has a test for link types -1 and 252)
    _whole_file(raw, int(blob), {1} if blob else set(), damaged=capture,
                unreadable=not capture and not blob, twins=capture)
    comment = "rdma_set_option=0" if len(data) % 2 else None
    path = _write_frames("blob.pcapng", [(252, bytes(m.blob_pdu(data)), comment)])
    _whole_file(path, 1, {1}, twins=False)


_COOKED = struct.Struct("!HHH8sH")
_PKTTYPES = (0, 4, 3, 1)  # to the kernel, outgoing, from another host, broadcast


def t_netlink(data: bytes) -> None:
    """selector: bits 0-1 the cooked header's pkttype; bit 2 hatype 1 (else ARPHRD_NETLINK)."""
    if not data:
        return
    sel = data[0]
    frame = _COOKED.pack(_PKTTYPES[sel & 3], 1 if sel & 4 else 824, 0, bytes(8), 20) + data[1:]
    path = _write_frames("netlink.pcapng", [(253, frame)])
    # (no C code reads link type 253: no pre-filter loop, no MAD; both twins feed Scapy)
    _whole_file(path, 1, {1}, twins=False)


_PROCESS = ("ibpath.ucma", "ibpath.acm", "ibpath.umad")


def t_process(data: bytes) -> None:
    """selector (which dissector), a comment's length and bytes, then the payload."""
    if len(data) < 2:
        return
    m = _modules()
    name = _PROCESS[data[0] % 3]
    clen = data[1]
    comment = data[2:2 + clen].decode("utf-8", "replace") or None
    payload = data[2 + clen:]
    path = _write_frames("process.pcapng", [(252, m.exported_pdu(payload, name), comment)])
    _whole_file(path, 1, {1}, twins=False)  # (as netlink: no C code reads link type 252)


def t_audit(data: bytes) -> None:
    path = _work() / "capture"
    path.write_bytes(data)
    _whole_file(path, -1, damaged=True)
    _replay_twins_differ(str(path))


def _replay_twins_differ(path: str) -> None:
    """A Finding where the CLI's audit of path with the extension's twins (the replay fed and
    closing in C, native/_intake.c; the frame-finding test, _frametest.c; the spill's chunks,
    _rows.c) and the same audit with their Python find differently."""
    from ibpath_scapy.audit.engine import audit_records
    from ibpath_scapy.audit.model import AuditOptions
    from ibpath_scapy.audit.replay import Replay

    records = []
    try:
        for rec in _modules().fast.decode_file_fast(path, _fast_decoder(True)):
            records.append(rec)
    except _modules().pcapio.CaptureError:
        pass  # (what came before the damage: what the audit judges)
    options = AuditOptions(keep_transactions=False, stream_resolutions=True)
    c = audit_records(path, records, options)
    native, switch = Replay.intake, os.environ.get("IBPATH_NATIVE_SCAN")
    Replay.intake = lambda self: self.feed
    os.environ["IBPATH_NATIVE_SCAN"] = "0"  # (native.extension() reads it each time)
    try:
        py = audit_records(path, records, options)
    finally:
        Replay.intake = native
        if switch is None:
            del os.environ["IBPATH_NATIVE_SCAN"]
        else:
            os.environ["IBPATH_NATIVE_SCAN"] = switch
    if c.findings != py.findings or c.replay.sa_count != py.replay.sa_count:
        first = next(((a, b) for a, b in zip(c.findings, py.findings) if a != b), None)
        raise Finding(f"C/Python twins differ: {len(c.findings)} / {len(py.findings)} findings,"
                      f" {c.replay.sa_count} / {py.replay.sa_count} PathRecord transactions;"
                      f" first differing: {first!r:.1200}")


ONE_INPUT = {"pcapio": t_pcapio, "prefilter": t_prefilter, "mad": t_mad, "rmpp": t_rmpp,
             "blob": t_blob, "netlink": t_netlink, "process": t_process, "audit": t_audit}
assert set(ONE_INPUT) == set(TARGETS)


# ------------------------------------------------------------------------------------------
# The corpus: the project's captures cut into units
# ------------------------------------------------------------------------------------------

def _capture_files() -> list[Path]:
    return sorted(p for p in (ROOT / "captures").rglob("*.pcap*") if p.is_file())


def _pcapng_unit(frames: list) -> bytes:
    """A pcapng of the given frames (comments kept), as bytes."""
    m = _modules()
    tmp = _work() / "unit.pcapng"
    with m.pcapio.PcapNgWriter(str(tmp)) as w:
        for fr in frames:
            w.write(fr.data, fr.linktype, fr.time, *((fr.comment,) if fr.comment else ()))
    return tmp.read_bytes()


def _pcap_unit(frames: list, linktype: int) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, linktype)
    for fr in frames:
        out += struct.pack("<IIII", int(fr.time), 0, len(fr.data), fr.wirelen) + fr.data
    return out


def make_corpus(dest: Path = CORPUS) -> dict[str, int]:
    """Cut every capture of captures/ into the units each target reads, deterministically:
    one unit per distinct (kind of frame), small ones first. Rewrites dest/<target>/ but
    leaves its regressions/ alone. Returns units per target."""
    m = _modules()
    from ibpath_scapy.layers.ib import ExportedPDU

    units: dict[str, dict[bytes, None]] = {t: {} for t in TARGETS}
    kinds: dict[str, set] = {t: set() for t in TARGETS}

    def add(target: str, kind, unit: bytes, most: int = 60) -> None:
        if kind in kinds[target] or len(units[target]) >= most or len(unit) > TARGETS[target][0]:
            return
        kinds[target].add(kind)
        units[target][unit] = None

    pf = m.fast.prefilter()
    tpl = _rmpp_templates()
    for path in _capture_files():
        try:
            frames = list(m.pcapio.read_frames(str(path)))
        except m.pcapio.CaptureError:
            continue
        if not frames:
            continue
        rel = path.relative_to(ROOT / "captures")
        # pcapio: the file's first frame, and its first frame of each link type, alone
        seen_lt = set()
        for fr in frames:
            if fr.linktype in seen_lt:
                continue
            seen_lt.add(fr.linktype)
            add("pcapio", ("ng", fr.linktype, len(fr.data) // 64, fr.comment is not None),
                _pcapng_unit([fr]))
            if fr.linktype in (1, 197):
                add("pcapio", ("pcap", fr.linktype, len(fr.data) // 64), _pcap_unit([fr], fr.linktype))
        # audit: small captures whole; larger ones cut to their first frames
        whole = path.read_bytes()
        if len(whole) <= 6000:
            add("audit", ("whole", rel.parts[0], len(kinds["audit"]) // 1), whole, most=40)
        else:
            cut = _pcapng_unit(frames[:6])
            add("audit", ("cut", str(rel.parent), frames[0].linktype), cut, most=40)
        for fr in frames:
            at = pf.classifier(fr.linktype)(fr.data, 0, len(fr.data))
            if isinstance(at, (m.prefilter.MadAt, m.prefilter.IbMadAt)):
                mad = fr.data[at.mad:at.mad + 256]
                key = (fr.linktype, mad[1], mad[3], mad[16:18], mad[26] & 7)
                sel = {1: 0, 197: 1, 247: 2, 228: 3}.get(fr.linktype)
                if sel is not None:
                    add("mad", key, _chunk_bytes(sel, fr.data))
                # rmpp: every active DATA segment, control byte by encapsulation
                if mad[26] & 1 and mad[25] == 1:
                    add("rmpp", ("seg", fr.linktype, mad[26] & 7, mad[3]),
                        bytes([1 if at.__class__ is m.prefilter.IbMadAt else 0]) + mad)
                # prefilter: the frame as a pcap record (Ethernet / ERF tests)
                if fr.linktype in (1, 197):
                    add("prefilter", (fr.linktype, "take", key[1:]),
                        bytes([16 | (0 if fr.linktype == 1 else 1)]) + fr.data)
            elif at is None and fr.linktype in (1, 197):
                add("prefilter", (fr.linktype, "skip", len(fr.data) // 256),
                    bytes([0 if fr.linktype == 1 else 1]) + _pcap_unit([fr], fr.linktype)[24:])
            if fr.linktype == 253 and len(fr.data) > 16:
                nl = fr.data[16:]
                add("netlink", (fr.data[0:2], nl[4:6], len(nl) // 32),
                    bytes([_PKTTYPES.index(fr.data[1]) if fr.data[1] in _PKTTYPES else 0]) + nl)
            if fr.linktype == 252:
                try:
                    pdu = ExportedPDU(fr.data)
                    name = pdu.dissector_name()
                    payload = bytes(pdu.payload)
                except Exception:
                    continue
                if name == "ibpath.blob":
                    add("blob", (len(payload) // 72, len(payload) % 72, payload[:4]), payload)
                elif name in _PROCESS:
                    c = (fr.comment or "").encode()[:255]
                    sub = payload[:8] if name != "ibpath.umad" else payload[64:68]
                    add("process", (name, sub, len(payload) // 64),
                        bytes([_PROCESS.index(name), len(c)]) + c + payload)
    # rmpp: whole transfers (segments in order, and the last first) from multi-segment answers
    fr, at = tpl[1]
    from ibpath_scapy.layers import MAD, RMPP, PathRecord, SAHeader
    for n in (1, 2, 4):
        hdr = bytes(MAD(method=0x92, transaction_id=n) / RMPP(rmpp_version=1, rmpp_type=1)
                    / SAHeader(attribute_offset=8))[:56]
        segs = m.rmpp.segment(hdr + bytes(PathRecord(dlid=n)) * (3 * n))
        units["rmpp"][b"".join(b"\0" + s for s in segs)] = None
        units["rmpp"][b"".join(b"\0" + s for s in reversed(segs))] = None
        units["rmpp"][b"".join(b"\x05" + s for s in segs)] = None  # native IB, repeated
    # blob and prefilter extras: a synthetic stream of every test
    units["blob"][b""] = None
    units["blob"][bytes(72)] = None
    units["prefilter"][bytes([2]) + bytes(64)] = None
    units["prefilter"][bytes([2 | 4 | 16]) + bytes(64)] = None

    out = {}
    for target, us in units.items():
        d = dest / target
        d.mkdir(parents=True, exist_ok=True)
        for old in d.iterdir():
            if old.is_file():
                old.unlink()
        for unit in us:
            (d / hashlib.sha1(unit).hexdigest()[:16]).write_bytes(unit)
        (d / "regressions").mkdir(exist_ok=True)
        keep = d / "regressions" / ".gitkeep"
        if not any((d / "regressions").iterdir()):
            keep.write_text("")
        out[target] = len(us)
    return out


def corpus_files(target: str) -> list[Path]:
    d = CORPUS / target
    return sorted(p for p in d.iterdir() if p.is_file()) if d.is_dir() else []


def regression_files(target: str) -> list[Path]:
    d = CORPUS / target / "regressions"
    return sorted(p for p in d.iterdir() if p.is_file() and not p.name.startswith(".")) \
        if d.is_dir() else []


# ------------------------------------------------------------------------------------------
# Running: a child process per target
# ------------------------------------------------------------------------------------------

def _gcc_lib(name: str) -> str | None:
    cc = shutil.which(os.environ.get("CC", "gcc"))
    if cc is None:
        return None
    p = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True)
    lib = p.stdout.strip()
    return os.path.realpath(lib) if lib and os.path.isabs(lib) and os.path.exists(lib) else None


def asan_runtime() -> str | None:
    """gcc's AddressSanitizer runtime (the one the IBPATH_SANITIZE=1 build links against)."""
    return _gcc_lib("libasan.so")


def build_sanitized(dest: Path = SANITIZE_BUILD) -> Path:
    """The C extension built with IBPATH_SANITIZE=1 (setup.py) into dest; returns the .so's
    path. Built as pip builds the package (a wheel, in an isolated build environment with the
    setuptools pyproject.toml asks for), the extension then taken out of the wheel."""
    import fcntl
    import zipfile

    env = dict(os.environ, IBPATH_SANITIZE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    tmp = Path(tempfile.mkdtemp(prefix="ibpath-asan-build-"))
    dest.mkdir(parents=True, exist_ok=True)
    # pip builds in the checkout's build/: two runs at once (one target a core) would build
    # over each other, so they build one after the other
    lock = open(dest / ".build.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                            "--no-cache-dir", "-w", str(tmp), str(ROOT)],
                           env=env, capture_output=True, text=True)
        wheels = list(tmp.glob("*.whl"))
        if p.returncode != 0 or not wheels:
            raise SystemExit(f"covfuzz: the sanitized build failed (pip wheel with "
                             f"IBPATH_SANITIZE=1):\n{p.stdout}{p.stderr[-3000:]}")
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        name = f"ibpath_scapy/native/_scan{suffix}"
        so = dest / name
        so.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as z:
            part = so.with_name(so.name + ".part")
            part.write_bytes(z.read(name))
        part.replace(so)  # a new file: a run that has the old one loaded keeps it intact
    finally:
        lock.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return so


def sanitizer_env(so: Path) -> dict:
    lib = asan_runtime()
    if lib is None:
        raise SystemExit("covfuzz: --sanitize needs gcc's libasan (gcc -print-file-name=libasan.so)")
    # libstdc++ loaded with it: ASan intercepts __cxa_throw, and finds the real one only in a
    # library there when it starts (atheris' pybind11 throws each Python exception through it)
    cxx = _gcc_lib("libstdc++.so")
    return {"LD_PRELOAD": ":".join(x for x in (lib, cxx) if x), EXT_ENV: str(so),
            # Python's own allocations are never freed at exit: no leak report
            "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1:abort_on_error=1:"
                            "handle_abort=1:symbolize=1",
            "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:abort_on_error=1",
            # every Python object from malloc, so that ASan sees the bounds of the buffers the
            # extension reads (pymalloc's arenas would hide an overrun of a small bytes)
            "PYTHONMALLOC": "malloc"}


_DONE = re.compile(r"#(\d+)\s+DONE\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)")
_STATUS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)")
_STAT = re.compile(r"stat::(\w+):\s+(\d+)")
_SANITIZER = re.compile(r"ERROR: AddressSanitizer|runtime error:|ERROR: UndefinedBehaviorSanitizer|"
                        r"ERROR: LeakSanitizer")


def run_target(target: str, seconds: float | None, runs: int | None, corpus_out: Path,
               findings: Path, env: dict | None = None, log: Path | None = None,
               quiet: bool = False) -> dict:
    """One target in a child process; its numbers from libFuzzer's output."""
    findings.mkdir(parents=True, exist_ok=True)
    corpus_out.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in findings.iterdir()}
    max_len, timeout = TARGETS[target]
    args = [sys.executable, str(Path(__file__).resolve()), "--child", target, "--",
            str(corpus_out), str(CORPUS / target), f"-max_len={max_len}",
            f"-timeout={timeout}", f"-artifact_prefix={findings}/", "-print_final_stats=1",
            "-len_control=0",  # mutate whole seeds (captures of kilobytes) from the start
            "-rss_limit_mb=4096"]
    if seconds:
        args.append(f"-max_total_time={int(seconds)}")
    if runs:
        args.append(f"-runs={runs}")
    t0 = time.monotonic()
    child_env = dict(os.environ, **(env or {}))
    if log is None:
        p = subprocess.run(args, capture_output=True, text=True, errors="replace",
                           env=child_env, cwd=ROOT)
        out = p.stderr + p.stdout
    else:
        # streamed, so that a long run stopped before its end leaves its progress lines
        # (libFuzzer's "#N pulse/NEW/REDUCE" with the executions so far) and its corpus
        with open(log, "w") as f:
            p = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, env=child_env, cwd=ROOT)
        out = log.read_text(errors="replace")
    wall = time.monotonic() - t0
    stats = {k: int(v) for k, v in _STAT.findall(out)}
    m = _DONE.search(out)
    last = (_STATUS.findall(out) or [None])[-1]
    cov = ft = corp = None
    if m:
        cov, ft, corp = int(m.group(2)), int(m.group(3)), int(m.group(4))
    elif last:
        cov, ft, corp = int(last[1]), int(last[2]), int(last[3])
    new = sorted(set(p_.name for p_ in findings.iterdir()) - before)
    execs = stats.get("number_of_executed_units")
    res = {"target": target, "executions": execs,
           "exec_per_s": stats.get("average_exec_per_sec"),
           "cov": cov, "ft": ft, "corpus": corp,
           "corpus_files": sum(1 for _ in corpus_out.iterdir()),
           "new_units": stats.get("new_units_added"),
           "peak_rss_mb": stats.get("peak_rss_mb"),
           "seconds": round(wall, 1), "exit": p.returncode,
           "findings": [str(findings / n) for n in new],
           "sanitizer_reports": len(_SANITIZER.findall(out)),
           "sanitized": bool(env and EXT_ENV in env)}
    if p.returncode != 0 and not new:
        res["error"] = out[-3000:]
    if not quiet and (new or p.returncode != 0):
        sys.stderr.write(out[-6000:])
    return res


def child(target: str, libfuzzer_args: list[str]) -> None:
    """The fuzzing process of one target: the package imported with atheris' coverage
    instrumentation (ibpath_scapy's modules only), then atheris.Fuzz()."""
    import atheris

    if os.environ.get(EXT_ENV):
        _use_extension(os.environ[EXT_ENV])
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    with atheris.instrument_imports(include=["ibpath_scapy"]):
        import ibpath_scapy.engines.fast  # noqa: F401  (readers, pre-filter, decoders, RMPP, blobsniff)
        if target in WHOLE_FILE:  # the audit too (~1 s more to instrument)
            import ibpath_scapy.audit.engine  # noqa: F401
    _modules()
    one = ONE_INPUT[target]
    one(b"")  # build what the oracle builds once (pre-filter, templates) before fuzzing
    _fast_decoder(True)
    ext = sys.modules.get("ibpath_scapy.native._scan")
    print(f"covfuzz: {target}: C extension {getattr(ext, '__file__', None)}", file=sys.stderr)
    atheris.Setup([sys.argv[0], *libfuzzer_args], one)
    atheris.Fuzz()


def replay(files: list[Path], target: str | None = None) -> list[tuple[Path, str]]:
    """Each file through its target's oracle (the target: the folder under
    tests/data/covfuzz/, or `target`). Returns (file, problem) for each failing one."""
    bad = []
    for f in files:
        t = target or next((p.name for p in [f.parent, f.parent.parent] if p.name in TARGETS), None)
        if t is None:
            bad.append((f, "no target: give --target"))
            continue
        try:
            ONE_INPUT[t](f.read_bytes())
        except Exception as exc:  # noqa: BLE001  (a finding, whatever it is)
            import traceback
            bad.append((f, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-4)}"))
    return bad


def sanitized_replay(argv: list[str]) -> int:
    """--replay with --sanitize: the same replay in a child with the sanitized build loaded
    and libasan preloaded (sanitizer_env); a sanitizer report is a finding too."""
    so = build_sanitized()
    env = dict(os.environ, **sanitizer_env(so))
    p = subprocess.run([sys.executable, str(Path(__file__).resolve()), *argv], env=env,
                       capture_output=True, text=True)
    reports = len(_SANITIZER.findall(p.stdout + p.stderr))
    sys.stderr.write(p.stderr[-20000:])
    lines = p.stdout.strip().splitlines()
    try:
        got = json.loads(lines[-1])
    except (IndexError, ValueError):
        got = {"error": f"the sanitized replay ended with {p.returncode} and no summary"}
    got["sanitizer_reports"] = reports
    print(json.dumps(got))
    return 1 if p.returncode or reports or not got.get("sanitized") else 0


def _table(results: list[dict]) -> str:
    head = f"{'target':10} {'executions':>11} {'exec/s':>7} {'cov':>6} {'ft':>7} {'corpus':>7} {'findings':>8} {'san':>4}"
    rows = [head]
    for r in results:
        rows.append(f"{r['target']:10} {r['executions'] or 0:>11} {r['exec_per_s'] or 0:>7} "
                    f"{r['cov'] or 0:>6} {r['ft'] or 0:>7} {r['corpus'] or 0:>7} "
                    f"{len(r['findings']):>8} {r['sanitizer_reports']:>4}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], argv[3:] if argv[2:3] == ["--"] else argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=None, help="fuzzing time per target")
    ap.add_argument("--runs", type=int, default=None, help="executions per target (libFuzzer -runs)")
    ap.add_argument("--target", action="append", choices=sorted(TARGETS),
                    help="a target (repeatable; default: all, one after the other)")
    ap.add_argument("--corpus-out", type=Path, default=None,
                    help="where each target's grown corpus goes (DIR/<target>/; default: a "
                    "temporary folder, removed)")
    ap.add_argument("--findings", type=Path, default=None,
                    help="where findings are written (DIR/<target>/; default: "
                    "tests/data/covfuzz/<target>/regressions/)")
    ap.add_argument("--sanitize", action="store_true",
                    help="the C extension built with ASan and UBSan (IBPATH_SANITIZE=1), libasan "
                    "preloaded")
    ap.add_argument("--logs", type=Path, default=None, help="keep each child's output here")
    ap.add_argument("--make-corpus", action="store_true",
                    help="cut captures/ into tests/data/covfuzz/<target>/ again and exit")
    ap.add_argument("--replay", nargs="*", type=Path, default=None,
                    help="run these inputs (default: every corpus and regression input) "
                    "through their target's oracle and exit")
    args = ap.parse_args(argv)
    targets = args.target or list(TARGETS)
    if args.make_corpus:
        counts = make_corpus()
        size = sum(p.stat().st_size for p in CORPUS.rglob("*") if p.is_file())
        print(json.dumps({"units": counts, "bytes": size}))
        return 0
    if args.replay is not None and args.sanitize:
        return sanitized_replay([a for a in argv if a != "--sanitize"])
    if args.replay is not None:
        ext = os.environ.get(EXT_ENV)  # (set: the child of sanitized_replay)
        if ext:
            _use_extension(ext)
        files = args.replay or [f for t in targets for f in corpus_files(t) + regression_files(t)]
        bad = replay(files, args.target[0] if args.target and args.replay else None)
        for f, why in bad:
            print(f"covfuzz: FINDING {f}: {why}", file=sys.stderr)
        loaded = getattr(sys.modules.get("ibpath_scapy.native._scan"), "__file__", None)
        print(json.dumps({"replayed": len(files), "findings": len(bad),
                          "extension": loaded, "sanitized": bool(ext) and loaded == ext}))
        return 1 if bad else 0
    if args.seconds is None and args.runs is None:
        ap.error("give --seconds N and/or --runs N (or --make-corpus, --replay)")
    if args.logs is not None:  # (before the sanitized build: a bad folder fails at once)
        try:
            args.logs.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            ap.error(f"--logs {args.logs}: {e.strerror or e}")
    try:
        import atheris  # noqa: F401
    except ImportError:
        print("covfuzz: atheris is not installed (pip install -e '.[test]')", file=sys.stderr)
        return 2
    env = None
    if args.sanitize:
        so = build_sanitized()
        env = sanitizer_env(so)
        print(f"covfuzz: sanitized extension {so}, LD_PRELOAD={env['LD_PRELOAD']}", file=sys.stderr)
    tmp = None
    if args.corpus_out is None:
        tmp = Path(tempfile.mkdtemp(prefix="ibpath-covfuzz-corpus-"))
    out_root = args.corpus_out or tmp
    results = []
    try:
        for t in targets:
            findings = (args.findings / t) if args.findings else CORPUS / t / "regressions"
            r = run_target(t, args.seconds, args.runs, out_root / t, findings, env,
                           log=(args.logs / f"{t}.log") if args.logs else None)
            results.append(r)
            print(f"covfuzz: {json.dumps(r)}", file=sys.stderr, flush=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    print(_table(results), file=sys.stderr)
    print(json.dumps(results))
    bad = any(r["findings"] or r["sanitizer_reports"] or r.get("error") for r in results)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
