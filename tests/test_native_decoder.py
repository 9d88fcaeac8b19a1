"""The fast path's MAD decoder in C (ibpath_scapy/native/_mad.c) against the same decoder in
Python (fast/decoder.py FastDecoder.decode_at without it), which remains the reference: the
same records, statistics and frames handed back over the project's captures, the fuzz inputs,
both bench captures in both encapsulations and containers, and Hypothesis' mutations of SA
MADs (fields, lengths, addresses, CRCs right and wrong). The Python decoder is itself held
to the Scapy layers (tests/test_fastpath.py), and so, through it, is this one."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ibpath_scapy.model import crc
from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast, prefilter
from ibpath_scapy.engines.fast.decoder import Tables, mad_decoder, mad_plan
from ibpath_scapy.engines.fast.prefilter import IbMadAt, MadAt
from ibpath_scapy.engines.scapy.gcpace import paced
from ibpath_scapy.facts.records import MadFrame
from ibpath_scapy.capture.pcapio import CaptureError, Frame, PcapWriter, read_frames

from conftest import CAPTURES, project_inputs

needs_c = pytest.mark.skipif(
    mad_decoder(Tables(FastDecoder().c)) is None,
    reason="the package was built without its C extension (no compiler or no Python "
           "headers): the Python decoder runs alone")


def _decoder(native: bool) -> FastDecoder:
    d = FastDecoder()
    if not native:
        d._native = None
    return d


def _records(path: Path, native: bool) -> tuple:
    """(records, statistics, error) of the fast path over path, with or without the C
    decoder."""
    d = _decoder(native)
    out, error = [], None
    try:
        out = list(decode_file_fast(str(path), d))
    except CaptureError as exc:
        error = str(exc)
    return out, d.stats, d.skipped, error



@needs_c
def test_the_fast_decoder_takes_the_c_one_unless_told_not_to(monkeypatch):
    assert FastDecoder()._native is not None
    monkeypatch.setenv("IBPATH_NATIVE_SCAN", "0")
    assert FastDecoder()._native is None


@needs_c
def test_same_records_over_the_project_captures_and_the_fuzz_inputs():
    files = project_inputs()
    assert len(files) > 40
    for path in files:
        assert _records(path, True) == _records(path, False), path


@needs_c
@pytest.mark.parametrize("kind", ["capture1", "capture2"])
@pytest.mark.parametrize("encap", ["rocev2", "ib"])
@pytest.mark.parametrize("pcapng", [False, True], ids=["pcap", "pcapng"])
def test_same_records_over_the_bench_captures(bench_capture, kind, encap, pcapng):
    path = bench_capture(kind, 4000, encap=encap, pcapng=pcapng)
    c, py = _records(path, True), _records(path, False)
    assert c == py
    assert sum(r["kind"] == "sa" for r in c[0]) > (100 if kind == "capture1" else 3000)


@needs_c
def test_the_c_decoder_takes_the_storm_and_shares_its_facts(bench_capture):
    """Every frame of an SA storm is read in C (none handed back) and its record finished
    there (MadFrame), the segments of multi-segment answers too (handed to the decoder's
    RMPP reassembler), and repeated headers and PathRecords are the same objects whichever
    path read them (the replay keeps one body for identical frames: tests/test_fastpath.py)."""
    path = bench_capture("capture2", 2000, encap="ib")
    d = _decoder(True)
    handed_back, finished, to_finish = [], [], []
    native = d._native

    class Spy:
        def frame(self, *args):
            got = native.frame(*args)
            (handed_back if got is None else finished if isinstance(got, MadFrame)
             else to_finish).append(got)
            return got

        def taken(self, *args):  # a run of frames: frame() of each (FastDecoder.decode_taken)
            records, rest = native.taken(*args)
            finished.extend(r for r in records if r is not None)
            for _, _, _, got in rest:
                (handed_back if got is None else to_finish).append(got)
            return records, rest

    d._native = Spy()
    recs = [r for r in decode_file_fast(str(path), d) if r["kind"] == "sa"]
    assert len(recs) == 2000 and not handed_back
    # nothing for Python to finish, the first frames (before any kind was named) included
    assert finished and not to_finish
    segments = [r for r in finished
                if r.rmpp is not None and r.rmpp.rmpp_flags & 1 and r.rmpp.rmpp_flags & 6 != 6]
    assert segments and any(r.reassembled_from for r in segments)
    by_bytes: dict = {}
    for r in recs:
        for pr in r.path_records or ():
            assert by_bytes.setdefault(tuple(pr.items()), pr) is pr


@needs_c
def test_segments_after_a_frame_left_to_python_keep_their_order(bench_capture, tmp_path):
    """A segment the C decoder leaves to Python (a wrong ICRC) goes to the reassembler after
    the run it came in: the segments of the run behind it go there after it, not before, so
    that the transfer its wrong FIRST segment opened is completed by its LAST one, as the
    Python decoder has it (fails with the C decoder handing on every segment at once)."""
    frames = list(read_frames(str(bench_capture("capture2", 400, encap="ib"))))
    d = _decoder(False)
    recs = [d.decode_at(f, _classify(f)) for f in frames]
    # a transfer of two segments or more: the frames of its FIRST and LAST segments
    done = next(r for r in recs if r is not None and r.reassembled_from
                and len(r.reassembled_from) > 1)
    bad = done.reassembled_from[0]
    data = bytearray(frames[bad - 1].data)
    data[-3] ^= 0xFF  # (native IB: the ICRC's last byte, before the VCRC)
    path = tmp_path / "bad-segment.pcap"
    with PcapWriter(str(path), frames[0].linktype) as w:
        for f in frames:
            w.write(bytes(data) if f.number == bad else f.data, f.time)
    c, py = _records(path, True), _records(path, False)
    assert c == py
    got = {r["frame"]: r for r in py[0]}
    assert got[bad].errors and got[done.frame].reassembled_from == done.reassembled_from


# -- Hypothesis: SA MADs with their fields, lengths and CRCs changed ------------------------
_SEEDS: list[Frame] = []


def _seed_frames(bench_capture) -> list[Frame]:
    """SA frames of both encapsulations: queries, single and multi-segment answers."""
    if not _SEEDS:
        for encap in ("rocev2", "ib"):
            frames = list(read_frames(str(bench_capture("capture2", 60, encap=encap))))
            _SEEDS.extend(frames[:40])
    return _SEEDS


def _classify(f: Frame):
    return prefilter().classifier(f.linktype)(f.data, 0, len(f.data))


def _fix_crcs(data: bytearray, at) -> None:
    """Make the frame's ICRC (and VCRC) right again after a change."""
    if isinstance(at, MadAt):
        data[-4:] = crc.rocev2_icrc(bytes(data[at.ip:]))
    else:
        body = bytes(data[at.lrh:-2])
        data[-6:-2] = crc.native_icrc(body)
        data[-2:] = struct.pack("<H", crc.vcrc(bytes(data[at.lrh:-2])))


# where in a MAD the decoders branch: the header (class, method, status, attribute), RMPP
# (flags, type, segment, PayloadLength), the SA header (AttributeOffset, ComponentMask) and
# the records
_HOT = [0, 1, 2, 3, 4, 5, 16, 17, 18, 19, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36,
        37, 38, 39, 44, 45, 46, 47, 48, 49, 50, 51, 56, 57, 60, 100, 120, 200, 250, 255]


@needs_c
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_sa_mads_decode_alike(bench_capture, data):
    seeds = _seed_frames(bench_capture)
    # a few frames before it, so that the tables and the RMPP reassembly hold something
    start = data.draw(st.integers(0, len(seeds) - 2))
    frames = seeds[start:start + data.draw(st.integers(1, 4))]
    f = frames[-1]
    at = _classify(f)
    assert isinstance(at, (MadAt, IbMadAt))
    b = bytearray(f.data)
    for _ in range(data.draw(st.integers(0, 6))):
        region = data.draw(st.sampled_from(["mad", "addr", "any"]))
        if region == "mad":
            pos = at.mad + data.draw(st.sampled_from(_HOT))
        elif region == "addr":
            pos = data.draw(st.integers(0, at.mad - 1))
        else:
            pos = data.draw(st.integers(0, len(b) - 1))
        b[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        _fix_crcs(b, at)
    frames = [*frames[:-1], Frame(f.number, f.time, f.linktype, bytes(b), f.wirelen)]
    got = []
    for native in (True, False):
        d = _decoder(native)
        out = []
        with paced():
            for fr in frames:
                cl = _classify(fr)
                rec = d.decode_at(fr, cl) if isinstance(cl, (MadAt, IbMadAt)) else "other"
                out.append(rec)
        got.append((out, d.stats))
    assert got[0] == got[1]


@needs_c
def test_a_frame_the_c_decoder_hands_back_is_read_in_python(bench_capture):
    """A CM MAD (a layer the C decoder leaves to Python) among SA ones: the same records."""
    path = CAPTURES / "corpus" / "cm-req-path-mismatch.pcapng"
    c, py = _records(path, True), _records(path, False)
    assert c == py and any(r["kind"] == "cm" for r in c[0])


@needs_c
def test_the_c_decoder_refuses_a_bad_plan():
    from types import SimpleNamespace

    from ibpath_scapy.native import _scan
    with pytest.raises(AttributeError):
        _scan.MadDecoder(SimpleNamespace())
    d = FastDecoder()
    good = vars(mad_plan(d.tables))
    _scan.MadDecoder(SimpleNamespace(**good))
    for change in ({"mad_steps": [(0, 9, 0, 1, 0)]}, {"mad_steps": [(0, 1, 0, 1, 0)] * 17},
                   {"mad_which": (0, 1, 2, 99)}, {"where_v4": [(0, 0, 40)] * 3},
                   {"where_local": [(-1, 0, 2)]}, {"ipv4_masks": ()}, {"icrc_len": 3},
                   {"icrc": (b"short", 0, 0)}, {"errors": ((), ())}, {"mads": []},
                   {"cache_max": 0}, {"count_reads": [(0, 1, 0, 1, 0)] * 9},
                   # a record class whose slots the construction table does not fill exactly
                   {"mad_frame": good["mad_class"]}, {"mad_class": good["mad_frame"]},
                   {"construction": lambda cls: ((), ())}, {"kinds": []},
                   {"rocev2_qps": [(0, (0, 1, 0, 1, 0))]}, {"addrs_max": 0}):
        with pytest.raises(ValueError):
            _scan.MadDecoder(SimpleNamespace(**{**good, **change}))
    rnd = random.Random(1)
    # any bytes and any offsets: never a crash, None where the frame is not one it reads
    for _ in range(2000):
        data = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 400)))
        offs = [rnd.randrange(-2, 420) for _ in range(6)]
        at = MadAt(*offs) if rnd.random() < 0.5 else IbMadAt(*offs[:5])
        for call in (lambda: d._native.decode(data, at),
                     lambda: d._native.frame(data, at, 7, 1.5, d.stats)):
            try:
                call()
            except (ValueError, TypeError, KeyError, IndexError, struct.error):
                pass  # a Python extractor's complaint about impossible offsets, never a crash
