"""Robustness on hostile input (issue #9): the short fuzz run of tools/fuzz.py, Hypothesis
targets for the frame decoder and the blob parser, the caps that bound memory and time per
frame, and the inputs the fuzzer found bugs with (tests/data/fuzz/)."""

import json
import random
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ibpath_scapy.facts import public
from ibpath_scapy.facts.assemble import ADDRESS_KEYS
from ibpath_scapy.audit.engine import audit_records
from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.audit.replay import Replay
from ibpath_scapy.craft import CaptureBuilder
from ibpath_scapy.engines.scapy.decode import MAX_LIST_FRAME_BYTES, Decoder, decode_file
from ibpath_scapy.engines.fast import decoder as fast_decoder
from ibpath_scapy.layers import MAD, RMPP, PathRecord, SAHeader
from ibpath_scapy.layers.pathdata import RECORD_SIZE, PathArray, blob_pdu
from ibpath_scapy.capture.pcapio import RAW_BLOB_LINKTYPE, CaptureError, Frame, read_frames
from ibpath_scapy.facts.rmpp import MAX_PROBLEMS, MAX_SEGMENTS, Reassembler, segment

from conftest import ROOT
from tools import fuzz
from tshark_util import tshark_path

DATA = ROOT / "tests" / "data" / "fuzz"
LUA = str(ROOT / "dissector" / "ibpath.lua")




def audit(path):
    recs = list(decode_file(str(path)))
    return recs, audit_records(str(path), recs, AuditOptions()).findings


# -- the short fuzz run ----------------------------------------------------------------------

def test_short_fuzz_run(tmp_path):
    """One round of every mutator (thousands of frames) through the decoder and the audit in
    process, the real CLI on one file, and tshark with the plugin on the nine files of
    frame-level mutations (tools/fuzz.py runs it on every file): no
    traceback, no Lua error, no frame over the time limit, every frame counted, no frame that
    should give a record silently dropped, every malformed frame reported."""
    rnd = random.Random(20261129)
    seeds = fuzz.load_seeds(tmp_path)
    st_ = fuzz.run_round(rnd, seeds, tmp_path, scale=1, tshark=tshark_path() is not None,
                         tshark_files=9, cli=1, keep=tmp_path / "crashers")
    problems = [f"{p.kind}: {p.path}: {p.detail[:800]}" for p in st_.problems]
    assert not problems, "\n".join(problems)
    assert st_.frames >= 2500 and st_.files >= 40  # thousands (the draw follows the corpus)
    assert st_.malformed > 0 and st_.records > 1000  # the mutations did reach the decoder
    if tshark_path() is not None:
        # thousands of frames (the nine files drawn follow the corpus: 2,220 with its ucma
        # and ACM captures, which are short)
        assert st_.tshark_runs == 9 and st_.tshark_frames >= 2000
    assert st_.cli_runs == (3 if tshark_path() else 2)


def test_fuzzer_catches_what_it_claims_to(tmp_path, monkeypatch):
    """The checks can fail: a decoder that raises, hangs, drops a frame or miscounts is
    caught."""
    inp = fuzz.write_frames(tmp_path / "x.pcapng", [fuzz.zero_length()[0],
                                                   (252, bytes(blob_pdu(b"")), 20)])
    assert not fuzz.check_in_process(inp).problems

    def boom(self, frame):
        raise KeyError("boom")
        yield
    monkeypatch.setattr(Decoder, "feed", boom)
    assert [p.kind for p in fuzz.check_in_process(inp).problems] == ["traceback"]
    monkeypatch.undo()

    def spin(self, frame):
        while True:
            pass
        yield
    monkeypatch.setattr(Decoder, "feed", spin)
    assert [p.kind for p in fuzz.check_in_process(inp, limit=0.5).problems] == ["hang"]
    monkeypatch.undo()
    monkeypatch.setattr(Decoder, "_blob", lambda self, frame, array: {"frame": 99, "kind": "blob"})
    assert "dropped" in [p.kind for p in fuzz.check_in_process(inp).problems]
    monkeypatch.undo()
    inp.frames += 1
    assert [p.kind for p in fuzz.check_in_process(inp).problems] == ["frame-count"]
    # the fast path is held to the Scapy path's records (native IB here)
    path = ROOT / "captures" / "corpus" / "sar-get-multi.pcapng"
    ib = fuzz.Input(path=path, frames=sum(1 for _ in read_frames(str(path))))
    assert not fuzz.check_in_process(ib).problems
    # addresses as the fast path hands them over (assemble.ADDRESS_KEYS), all but encap lost
    lost = tuple("ib" if k == "encap" else None for k in ADDRESS_KEYS)
    # (native_where: what both the C decoder's address table and the Python path read)
    monkeypatch.setattr(fast_decoder, "native_where", lambda data, at: lost)
    assert [p.kind for p in fuzz.check_in_process(ib).problems] == ["fastpath-diff"]


# -- Hypothesis targets: the frame decoder and the blob parser -------------------------------

SEEDS: list = []


def _seed_frames(tmp_path_factory):
    if not SEEDS:
        SEEDS.extend(fuzz.load_seeds(tmp_path_factory.mktemp("seeds")))
    return SEEDS


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_frame_decoder_never_raises(tmp_path_factory, data):
    """Any bytes on any link type, or a seed frame with bytes changed, inserted or cut: the
    decoder returns records (each for this frame, JSON-ready) and never raises."""
    seeds = _seed_frames(tmp_path_factory)
    if data.draw(st.booleans()):
        lt = data.draw(st.sampled_from([1, 197, 252, 253, 113, 276, 101, 247, RAW_BLOB_LINKTYPE]))
        raw = data.draw(st.binary(max_size=700))
    else:
        seed = data.draw(st.sampled_from(seeds))
        b = bytearray(seed.data)
        for _ in range(data.draw(st.integers(0, 6))):
            if not b:
                break
            i = data.draw(st.integers(0, len(b) - 1))
            b[i] = data.draw(st.integers(0, 255))
        cut = data.draw(st.integers(0, len(b)))
        lt, raw = seed.linktype, bytes(b[:cut]) + data.draw(st.binary(max_size=40))
    d = Decoder()
    recs = [public(r) for r in list(d.feed(Frame(1, 0.0, lt, raw, len(raw)))) + list(d.finish())]
    assert d.stats.frames == 1
    for r in recs:
        assert r["frame"] == 1 and r["kind"]
        json.dumps(r)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=8 * RECORD_SIZE + 71))
def test_blob_parser_never_raises_and_splits_by_struct_size(raw):
    """PathArray over any bytes: len // 72 records whose flags and reserved words are the
    little-endian words at 72k and 72k+4 (struct ib_path_rec_data), the rest trailing; and the
    decoder's blob record says the same."""
    arr = PathArray(raw)
    n = len(raw) // RECORD_SIZE
    assert len(arr.records) == n and arr.trailing == raw[n * RECORD_SIZE:]
    for k, rec in enumerate(arr.records):
        flags, reserved = struct.unpack_from("<II", raw, k * RECORD_SIZE)
        assert int(rec.flags) == flags and rec.reserved == reserved
        assert bytes(rec.path_record) == raw[k * RECORD_SIZE + 8:(k + 1) * RECORD_SIZE]
    (rec,) = map(public, Decoder().feed(Frame(1, 0.0, RAW_BLOB_LINKTYPE, raw, len(raw))))
    assert rec["kind"] == "blob" and rec["blob"]["records"] == n
    assert rec["blob"]["trailing_bytes"] == len(raw) % RECORD_SIZE
    assert [r["flags"] for r in rec["blob_records"]] == \
        [struct.unpack_from("<I", raw, k * RECORD_SIZE)[0] for k in range(n)]
    json.dumps(rec)


# -- limits: bounded memory and time per frame, each reported when hit ------------------------

def test_64_mib_frames_are_reported_not_dissected(tmp_path):
    """One 64 MiB frame per link type (RoCEv2, ERF, blob PDU, netlink), written to tmp on the
    fly: each is a DECODE-LIMIT finding naming its frame; nothing else is lost or hangs."""
    inp = fuzz.huge_frame_file(tmp_path)
    st_ = fuzz.check_in_process(inp, limit=60)
    assert not st_.problems, [p.detail for p in st_.problems]
    recs, findings = audit(inp.path)
    inp.path.unlink()
    assert [r["frame"] for r in recs] == [1, 2, 3, 4]
    assert all(r["kind"] == "malformed" and r["limit"] == "frame size" for r in recs)
    assert "67108864 bytes" in str(recs[0]["error"])
    assert sorted(f.frames for f in findings if f.rule == "DECODE-LIMIT") == [(1,), (2,), (3,), (4,)]
    assert not [f for f in findings if f.rule == "DECODE-MALFORMED"]  # one finding per frame


def test_netlink_frame_over_the_list_limit_is_reported(tmp_path):
    """A netlink record of 4-byte attributes just over MAX_LIST_FRAME_BYTES took Scapy ~3 s
    per 64 KiB (and grows faster than linearly): over the limit it is reported instead;
    at the limit it is still decoded."""
    cooked = struct.pack("!HHH8sH", 4, 824, 0, b"\0" * 8, 20)

    def frame(size):
        n = (size - 16 - 16) // 4
        return cooked + struct.pack("<IHHII", 16 + 4 * n, 4 << 10, 0, 1, 0) + b"\x04\0\x01\0" * n

    over, at = frame(MAX_LIST_FRAME_BYTES + 4), frame(MAX_LIST_FRAME_BYTES)
    assert len(at) == MAX_LIST_FRAME_BYTES
    d = Decoder()
    (r1,) = d.feed(Frame(1, 0.0, 253, over, len(over)))
    assert r1["kind"] == "malformed" and r1["limit"] == "frame size"
    (r2,) = d.feed(Frame(2, 0.0, 253, at, len(at)))
    assert r2["kind"] == "ls" and len(r2["ls"]["attributes"]) == (len(at) - 32) // 4


def test_rmpp_caps(tmp_path):
    """rmpp.Reassembler: segment numbers past MAX_SEGMENTS, too many open transfers, too many
    open bytes: each transfer that hits a cap is reported unfinished with its limit; a flood
    of repeats is dropped as the kernel drops it (nothing kept), a flood of segment numbers
    no sender uses keeps MAX_PROBLEMS problems and counts the rest."""
    hdr = bytes(MAD(method=0x92) / RMPP(rmpp_version=1, rmpp_type=1) / SAHeader())[:56]
    seg = segment(hdr + bytes(200))[0]
    r = Reassembler(max_open=2, max_open_bytes=3 * 256)
    r.add(("a",), MAX_SEGMENTS + 1, 0, seg, 1)
    for f in range(2, 40):
        r.add(("b",), 1, 0, seg, f)  # repeated: dropped
        assert (r.dropped is None) == (f == 2)
    for f in range(2, 40):
        r.add(("b",), 0, 0, seg, f)  # segment number 0: a problem each
    r.add(("c",), 1, 0, seg, 40)  # third open transfer: "a" evicted
    r.add(("c",), 2, 0, seg, 41)
    r.add(("c",), 3, 0, seg, 42)  # 4 segments open > 3 * 256 bytes: "b" evicted
    pending = dict(r.pending())
    assert set(pending) == {("a",), ("b",), ("c",)}
    assert "open at once" in pending[("a",)].limit
    assert "bytes of RMPP segments open" in pending[("b",)].limit
    assert pending[("c",)].limit is None and r.open_bytes == 3 * 256
    b = pending[("b",)]
    assert len(b.problems) == MAX_PROBLEMS and "more problems" in b.why_unfinished()


def test_rmpp_transfer_of_max_segments_completes():
    """The largest transfer the caps allow, segment 1 (which opens it, as in the kernel) and
    then every other segment in reverse order, reassembles."""
    hdr = bytes(MAD(method=0x92, transaction_id=5) / RMPP(rmpp_version=1, rmpp_type=1)
                / SAHeader(attribute_offset=8))[:56]
    segs = segment(hdr + bytes(200 * MAX_SEGMENTS))
    assert len(segs) == MAX_SEGMENTS
    r, done = Reassembler(), None
    for k in [1] + list(range(MAX_SEGMENTS, 1, -1)):
        done = r.add(("k",), k, segs[k - 1][26], segs[k - 1], k)
    msg, t = done
    assert len(msg) == 56 + 200 * MAX_SEGMENTS and not r.pending() and r.open_bytes == 0


def test_evicted_unanswered_sa_transactions_are_reported(tmp_path, monkeypatch):
    """Replay's open-transaction table is capped; an unanswered transaction pushed out is a
    DECODE-LIMIT finding on its frames (answered ones leave silently)."""
    monkeypatch.setattr(Replay, "MAX_OPEN_TRANSACTIONS", 2)
    path = tmp_path / "many.pcapng"
    with CaptureBuilder(str(path)) as b:
        q = b.sa_query(PathRecord(sgid="fe80::1", dgid="fe80::2"))
        b.sa_answer(q, [PathRecord(sgid="fe80::1", dgid="fe80::2")])  # frames 1, 2
        for _ in range(3):
            b.sa_query(PathRecord(sgid="fe80::1", dgid="fe80::3"))  # frames 3, 4, 5
    _, findings = audit(path)
    limits = sorted(f.frames for f in findings if f.rule == "DECODE-LIMIT")
    assert limits == [(3,)]
    assert "evicted unanswered" in next(f.message for f in findings if f.rule == "DECODE-LIMIT")


def test_ls_requests_let_go_unanswered_are_reported(tmp_path, monkeypatch):
    """The decoder remembers the last LS_REQUEST_MEMORY LS requests for their answers; an
    unanswered one pushed out is counted in one DECODE-LIMIT finding at its frame (answered
    ones leave silently), in both engines (the assembler is theirs)."""
    from ibpath_scapy.facts.assemble import Assembler
    from ibpath_scapy.layers.pathdata import GMP_PRIMARY_BIDIRECTIONAL

    monkeypatch.setattr(Assembler, "LS_REQUEST_MEMORY", 2)
    path = tmp_path / "ls.pcapng"
    with CaptureBuilder(str(path)) as b:
        b.ls_request(1, path_use=0, sgid="fe80::1", dgid="fe80::2")  # frame 1, answered
        b.ls_response(1, [(GMP_PRIMARY_BIDIRECTIONAL, PathRecord(sgid="fe80::1",
                                                                 dgid="fe80::2"))])
        for seq in (2, 3, 4, 5):  # frames 3..6: 2 and 3 are pushed out unanswered
            b.ls_request(seq, path_use=0, sgid="fe80::1", dgid="fe80::3")
    _, findings = audit(path)
    (limit,) = [f for f in findings if f.rule == "DECODE-LIMIT"]
    assert limit.frames == (3,)
    assert limit.message.startswith("2 unanswered LS request(s) let go from the decoder's "
                                    "memory of the last 2 (the first at frame 3)")
    if tshark_path() is not None:
        from ibpath_scapy.engines.tshark import tshark_records
        recs = list(tshark_records(str(path)))
        findings = audit_records(str(path), recs, AuditOptions()).findings
        assert [f.frames for f in findings if f.rule == "DECODE-LIMIT"] == [(3,)]


# -- regression inputs the fuzzer found -------------------------------------------------------

def test_empty_blob_pdu_is_a_blob_frame():
    """tests/data/fuzz/empty-blob-pdu.pcapng: an exported PDU "ibpath.blob" with no bytes (an
    optval of length 0, EINVAL) gave no record at all: a silently dropped frame."""
    path = DATA / "empty-blob-pdu.pcapng"
    recs, findings = audit(path)
    assert len(list(read_frames(str(path)))) == 2
    (rec,) = [r for r in recs if r["frame"] == 2]
    assert rec["kind"] == "blob" and rec["blob"]["length"] == 0
    assert "blob holds no whole record" in map(str, rec["errors"])


def test_erf_records_captured_short_give_no_lua_error():
    """tests/data/fuzz/erf-captured-short-x150.pcapng: 150 ERF records whose capture kept 8 of
    290 bytes. Wireshark's InfiniBand dissector threw BoundsError through the plugin's
    Dissector.call, which leaked Lua's C-call count: from frame 99 on every frame was a
    "Lua Error: ... C stack overflow" (runtime.lua call_builtin)."""
    from tshark_util import require_tshark, run_tshark

    require_tshark()
    path = DATA / "erf-captured-short-x150.pcapng"
    run = run_tshark(path, ["-X", f"lua_script:{LUA}", "-V"])
    assert run.stdout.count("\nFrame ") + run.stdout.startswith("Frame ") == 150
    assert "Lua Error" not in run.stdout + run.stderr
    assert "C stack overflow" not in run.stdout


# Every committed fuzz input: frames in it (by the pcap structure), and whether reading it must
# stop with a CaptureError (exit 2).
REGRESSIONS = {
    "empty-blob-pdu.pcapng": (2, False),
    "erf-captured-short-x150.pcapng": (150, False),
    # `ibpath audit` raised TypeError (the fast engine's _sa() reached from Decoder)
    "sa-mad-with-trailing-bytes.pcap": (1, False),
    # an EPB of 12 bytes: struct.error from pcapio, a traceback from the CLI
    "epb-shorter-than-its-fields.pcapng": (1, True),
    # exported-PDU dissector-name tags of length 0 at the end, or without a NUL: "Lua Error:
    # out of bounds" (runtime.lua, the exported-PDU locate function); found by the long run
    # in editcap -E output
    "exported-pdu-bad-name-tag.pcapng": (6, False),
    # a pcapng cut at byte 19, inside its section header: exit 2 from the default engine, a
    # clean report of "1 packet" from --engine tshark (tshark read it as one MIME-file frame)
    "pcapng-cut-in-section-header.pcapng": (0, True),
}


def test_exported_pdu_name_tags_without_nul_give_no_lua_error():
    """The plugin reads the exported-PDU dissector name of every frame of link type 252: a
    tag of length 0 ending the frame, or a name with no NUL, raised "out of bounds"; the
    blob and infiniband PDUs after them are still dissected."""
    from tshark_util import require_tshark, run_tshark

    require_tshark()
    run = run_tshark(DATA / "exported-pdu-bad-name-tag.pcapng", ["-X", f"lua_script:{LUA}", "-V"])
    assert "Lua Error" not in run.stdout + run.stderr
    frames = run.stdout.split("\nFrame ")
    assert len(frames) == 6
    assert "ibpath PathArray" in frames[4] and "ibpath MAD" in frames[5]


def test_regression_inputs_are_clean_through_every_check():
    """Every committed fuzz input through the in-process checks, the CLI (both engines) and
    tshark with the plugin."""
    assert sorted(REGRESSIONS) == sorted(f.name for f in DATA.iterdir())
    for name, (frames, unreadable) in REGRESSIONS.items():
        inp = fuzz.Input(DATA / name, frames, unreadable=unreadable)
        if not unreadable:
            assert fuzz.capinfos_count(inp.path) == frames
        st_ = fuzz.check_in_process(inp)
        st_.merge(fuzz.check_cli(inp))
        st_.merge(fuzz.check_tshark(inp))
        assert not st_.problems, [(p.kind, p.detail[:500]) for p in st_.problems]


def test_short_pcapng_blocks_are_capture_errors():
    """tests/data/fuzz/epb-shorter-than-its-fields.pcapng: frame 1 is read, then the error
    names the file, the frame and the byte offset of the 12-byte EPB."""
    path = DATA / "epb-shorter-than-its-fields.pcapng"
    got = []
    with pytest.raises(CaptureError) as exc:
        for fr in read_frames(str(path)):
            got.append(fr.number)
    assert got == [1]
    assert str(path) in str(exc.value) and "frame 2" in str(exc.value)
    assert "byte offset 212" in str(exc.value)


def test_cli_decode_counts_every_frame_of_a_fuzzed_file(tmp_path):
    """`ibpath decode` reports as many frames as capinfos counts, on an editcap -E file."""
    src = ROOT / "captures" / "opensm" / "opensm-saquery.pcap"
    inp = fuzz.editcap(src, 0.05, 7, tmp_path)
    if inp is None:
        pytest.skip("editcap not installed (Debian package tshark / wireshark-common)")
    p = subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "decode", str(inp.path)],
                       capture_output=True, text=True, timeout=300)
    assert "Traceback" not in p.stderr and p.returncode in (0, 1)
    assert f": {inp.frames} frames," in p.stderr


def test_seed_capture_is_clean_in_tshark(tmp_path):
    """The fuzzer's built seed capture, unmutated, through tshark with the plugin: clean
    (assert_clean) but for the one blob built with trailing bytes, whose BLOB-LENGTH expert
    (severity Error, a rule) is the point of that frame."""
    from tshark_util import assert_clean, require_tshark, run_tshark

    require_tshark()
    path = fuzz.build_seed_capture(tmp_path / "seed.pcapng")
    odd = [r["frame"] for r in decode_file(str(path))
           if r["kind"] == "blob" and r["blob"]["trailing_bytes"]]
    assert len(odd) == 1
    run = run_tshark(path, ["-X", f"lua_script:{LUA}", "-V", "-Y", f"frame.number != {odd[0]}"])
    assert_clean(run.stdout, run.stderr)
    assert run.stdout.count("ibpath") > 20
