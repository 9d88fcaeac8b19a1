"""The audit's fast path (ibpath_scapy.engines.fast) against the Scapy path it stands in for.

Oracles: decode.decode_file (the Scapy layers, frame by frame) for every record and error;
pcapio.read_frames and tshark for the frame counts; the Scapy decoder's own output per frame
for the pre-filter's classification. Inputs: every capture of the project, the external
captures, the bench corpora, and edge cases built here (truncations, wrong length fields,
IPv6, VLAN tags, bad ICRCs, RMPP transfers out of order or never finished, a file cut in
the middle of a frame).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw

from ibpath_scapy.facts.problems import ICRC_MISMATCH, VCRC_MISMATCH
from ibpath_scapy.engines.scapy.decode import Decoder, decode_file, dissect
from ibpath_scapy.capture.encap import erf_record, native_ib_frame, rocev2_frame
from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast, prefilter
from ibpath_scapy.engines.fast.prefilter import FULL, IbMadAt, MadAt
from ibpath_scapy.layers.ib import ERF, GRH, LRH
from ibpath_scapy.layers import MAD, RMPP, PathRecord, SAHeader
from ibpath_scapy.layers.roce import DETH
from ibpath_scapy.capture.pcapio import CaptureError, Frame, PcapNgWriter, PcapWriter, read_frames
from ibpath_scapy.facts.rmpp import segment

from conftest import CAPTURES, EXTERNAL, ROOT
from tshark_util import tshark_env

sys.path.insert(0, str(ROOT / "bench"))
import corpus as bench_corpus  # noqa: E402


def _decode(fn, path, decoder):
    """Records, the error a bad file ends with, and the decoder's statistics."""
    out, error = [], None
    try:
        for rec in fn(str(path), decoder):
            out.append(rec)
    except CaptureError as exc:
        error = str(exc)
    return out, error, decoder.stats


def assert_identical(path: Path) -> list[dict]:
    scapy = _decode(decode_file, path, Decoder())
    fast = _decode(decode_file_fast, path, FastDecoder())
    assert fast[1] == scapy[1], path
    assert len(fast[0]) == len(scapy[0]), path
    for a, b in zip(scapy[0], fast[0]):
        assert b == a, f"{path}: frame {a.get('frame')}"
        assert list(b) == list(a), f"{path}: frame {a.get('frame')}: key order"  # JSON output
    assert fast[2] == scapy[2], path
    return scapy[0]


def _project_captures() -> list[Path]:
    files = sorted(CAPTURES.rglob("*.pcap")) + sorted(CAPTURES.rglob("*.pcapng"))
    return [f for f in files if f.stat().st_size]


@pytest.mark.parametrize("path", _project_captures(), ids=lambda p: p.name)
def test_identical_on_project_captures(path):
    assert_identical(path)


def test_identical_on_external_captures(external):
    files = sorted(external.glob("*.pcap"))
    assert files
    for path in files:
        assert_identical(path)


@pytest.fixture(scope="module")
def bench_corpora(bench_capture):
    return [bench_capture("capture1", 2000), bench_capture("capture2", 600)]


@pytest.mark.parametrize("build,seed,n", [("_data_frames", 1, 30), ("_mad_frames", 2, 30)])
def test_memoised_bench_pools_are_the_bench_pools(build, seed, n):
    """conftest's memoised pool builders give bench/corpus.py's frames and leave the random
    generator where the build leaves it (so the bench captures are the bench's bytes)."""
    import random
    memo = getattr(bench_corpus, build)
    plain_rnd, memo_rnd = random.Random(seed), random.Random(seed)
    plain = memo.unmemoised(plain_rnd, n)
    assert memo(memo_rnd, n) == plain and memo_rnd.getstate() == plain_rnd.getstate()
    memo_rnd = random.Random(seed)
    assert memo(memo_rnd, n) == plain and memo_rnd.getstate() == plain_rnd.getstate()  # cached
    assert memo_rnd.random() == plain_rnd.random()


def test_identical_on_bench_corpora(bench_corpora):
    c1, c2 = bench_corpora
    recs = assert_identical(c1)
    assert {r["kind"] for r in recs} >= {"sa", "cm"}
    assert any("cm_req" in r for r in recs)
    recs = assert_identical(c2)
    assert any("reassembled_from" in r and len(r["path_records"]) == 4 for r in recs)


def test_identical_on_native_ib_bench_corpora(bench_capture):
    """The bench corpora as ibdump would record them on native IB (ERF): the fast path takes
    their GSI datagrams and skips their RC data, with the Scapy path's records (no ICRC or
    VCRC error: ibpath_scapy.model.crc is checked on a real ibdump capture in test_crc.py); tshark
    reads every frame as InfiniBand, with the LIDs the records name."""
    c1 = bench_capture("capture1", 2000, encap="ib")
    c2 = bench_capture("capture2", 600, encap="ib")
    for path in (c1, c2):
        recs = assert_identical(path)
        assert recs and all(r["encap"] == "ib" and "errors" not in r for r in recs)
        d = FastDecoder()
        list(decode_file_fast(str(path), d))
        assert d.skipped == (1900 if path == c1 else 0)
        p = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.number",
                            "-e", "infiniband.lrh.slid", "-e", "infiniband.bth.opcode"],
                           capture_output=True, text=True, check=True, env=tshark_env())
        rows = {int(n): (slid, op) for n, slid, op in
                (line.split("\t") for line in p.stdout.splitlines())}
        assert len(rows) == d.stats.frames and all(op for _, op in rows.values())
        assert all(r["src"] == f"LID {rows[r['frame']][0]}" for r in recs)
    assert {r["kind"] for r in assert_identical(c1)} >= {"sa", "cm"}


# -- edge cases ---------------------------------------------------------------------------------

A, B = "192.168.2.24", "192.168.2.25"


def _sa_query(tid: int) -> MAD:
    return MAD(transaction_id=tid) / RMPP() / SAHeader(records=[PathRecord(
        sgid="fe80::1", dgid=f"fe80::{tid:x}", pkey=0xFFFF, numb_path=1, reversible=1)])


def _answer_segments(tid: int, n: int) -> list[bytes]:
    recs = [PathRecord(sgid="fe80::1", dgid=f"fe80::{tid:x}", dlid=tid, slid=1, reversible=1)
            for _ in range(n)]
    hdr = bytes(MAD(method=0x92, transaction_id=tid) / RMPP(rmpp_version=1, rmpp_type=1)
                / SAHeader(attribute_offset=8, component_mask=0x380F))[:56]
    return segment(hdr + b"".join(bytes(r) for r in recs))


def edge_frames() -> list[bytes]:
    """Frames at and around every decision the pre-filter and the compiled decoder take."""
    rnd = random.Random(8)
    q = bytes(rocev2_frame(_sa_query(0x42), src=A, dst=B))
    out = [q]
    out += [q[:n] for n in (10, 14, 20, 33, 40, 42, 50, 54, 60, 62, 70, 86, 100, 300, len(q) - 1)]
    bad_icrc = bytearray(q)
    bad_icrc[-1] ^= 0xFF
    out.append(bytes(bad_icrc))
    out.append(q + b"\x00" * 6)  # Ethernet trailer after the IP datagram
    for off, val in ((16, 0x00), (17, 0x10), (38, 0x00), (39, 0x20), (14, 0x46), (14, 0x55),
                     (20, 0x20), (20, 0x00), (21, 0x01), (23, 6), (23, 1), (23, 99)):
        b = bytearray(q)
        b[off] = val  # IPv4 length, UDP length, IHL, version, flags/fragment, protocol
        out.append(bytes(b))
    # ports: another UDP service, VXLAN's port, RoCE as the source port only
    for sport, dport in ((4791, 53), (53, 4791), (4791, 4789), (1234, 4791)):
        b = bytearray(q)
        b[34:38] = sport.to_bytes(2, "big") + dport.to_bytes(2, "big")
        out.append(bytes(b))
    # QPs: DETH source QP and BTH destination QP other than 0/1 (the hint), UD SEND with imm
    for bth_over in ({"dqpn": 5}, {"opcode": 0x65}, {"opcode": 0x0A}, {"opcode": 0x64, "dqpn": 7}):
        for src_qp in (1, 0, 9):
            pkt = (Ether() / IP(src=A, dst=B) / UDP(sport=0xC000, dport=4791)
                   / BTH(**{"opcode": 0x64, "dqpn": 1, **bth_over}) / DETH(src_qp=src_qp)
                   / _sa_query(0x43))
            out.append(bytes(pkt))
    # IPv6, VLAN, TCP, raw data frames, a short MAD, a long MAD, other management classes
    out.append(bytes(Ether() / IPv6(src="fe80::a", dst="fe80::b") / UDP(sport=0xC001, dport=4791)
                     / BTH(opcode=0x64, dqpn=1) / DETH(src_qp=1) / _sa_query(0x44)))
    out.append(bytes(Ether() / IPv6(src="::ffff:192.168.2.24", dst="fe80::b")
                     / UDP(sport=0xC001, dport=4791) / BTH(opcode=0x04, dqpn=0x11) / Raw(b"x" * 64)))
    out.append(bytes(Ether() / Dot1Q(vlan=5) / IP(src=A, dst=B) / UDP(sport=0xC000, dport=4791)
                     / BTH(opcode=0x64, dqpn=1) / DETH(src_qp=1) / _sa_query(0x45)))
    out.append(bytes(Ether() / IP(src=A, dst=B) / TCP(sport=22, dport=40000) / Raw(b"ssh")))
    out.append(bytes(Ether() / IP(src=A, dst=B) / UDP(sport=0xC000, dport=4791)
                     / BTH(opcode=0x0A, dqpn=0x12) / Raw(rnd.randbytes(256))))
    out.append(bytes(Ether(type=0x88B5) / Raw(b"\x00" * 50)))
    out.append(out[-2] + bytes(270000))  # over the decoder's frame size limit (DECODE-LIMIT)
    mad = bytes(_sa_query(0x46))
    for body in (mad[:200], mad + b"\x00" * 8):
        out.append(bytes(Ether() / IP(src=A, dst=B) / UDP(sport=0xC000, dport=4791)
                         / BTH(opcode=0x64, dqpn=1) / DETH(src_qp=1) / Raw(body)))
    for cls, attr in ((0x01, 0x15), (0x81, 0x15), (0x04, 0x12), (0x07, 0x99), (0x07, 0x12),
                      (0x07, 0x15), (0x2C, 0x01), (0x03, 0x38), (0x03, 0x35)):
        m = MAD(mgmt_class=cls, attribute_id=attr, method=0x81, status=0x0300,
                transaction_id=0x50 + cls) / Raw(rnd.randbytes(232))
        out.append(bytes(rocev2_frame(m, src=A, dst=B)))
    # SA answers: whole, segmented in order, out of order, repeated, never finished, an ACK
    for tid, order in ((0x60, None), (0x61, [1, 0, 2]), (0x62, [0, 0, 1, 2]), (0x63, [0, 1])):
        segs = _answer_segments(tid, 7)
        for k in (order if order is not None else range(len(segs))):
            out.append(bytes(rocev2_frame(MAD(segs[k]), src=B, dst=A)))
    ack = MAD(method=0x12, transaction_id=0x61) / RMPP(rmpp_version=1, rmpp_type=2,
                                                        rmpp_flags=1, segment_number=3)
    out.append(bytes(rocev2_frame(ack, src=A, dst=B)))
    one = MAD(method=0x92, transaction_id=0x64) / RMPP(rmpp_version=1, rmpp_type=1, rmpp_flags=7,
                                                        payload_length=20 + 128) / SAHeader(
        attribute_offset=9, component_mask=(1 << 63) | 3,
        records=[PathRecord(dgid="fe80::9", reversible=1), PathRecord(sgid="fe80::7")])
    out.append(bytes(rocev2_frame(one, src=B, dst=A)))
    rsv = bytearray(bytes(rocev2_frame(_sa_query(0x65), src=A, dst=B)))
    rsv[62 + 56 + 44] |= 0x70  # PathRecord reserved_353
    out.append(bytes(rsv))
    return out


@pytest.fixture(scope="module")
def edge_pcap(tmp_path_factory):
    path = tmp_path_factory.mktemp("edge") / "edge.pcap"
    with PcapWriter(str(path), 1) as w:
        for i, f in enumerate(edge_frames()):
            w.write(f, i * 1e-3)
    return path


def test_identical_on_edge_cases(edge_pcap):
    recs = assert_identical(edge_pcap)
    kinds = {r["kind"] for r in recs}
    assert {"sa", "malformed", "smp", "cm"} <= kinds
    assert any(ICRC_MISMATCH in r.get("errors", []) for r in recs)


def test_identical_on_edge_cases_pcapng_and_raw_ip(tmp_path):
    path = tmp_path / "edge.pcapng"
    with PcapNgWriter(str(path)) as w:
        for i, f in enumerate(edge_frames()):
            w.write(f, 1, i * 1e-3)
            if len(f) > 14:
                w.write(f[14:], 101, i * 1e-3)  # LINKTYPE_RAW: the IP datagram alone
    assert_identical(path)


def _ib(mad, **kw) -> bytes:
    return bytes(native_ib_frame(mad, **{"slid": 7, "dlid": 2, **kw}))


def _erf_with(raw: bytes, **fields) -> bytes:
    """An ERF record of `raw` with header fields overridden (lengths are not recomputed)."""
    rec = bytearray(erf_record(raw, 1.0))
    hdr = ERF(bytes(rec[:16]))
    for k, v in fields.items():
        setattr(hdr, k, v)
    rec[:16] = bytes(hdr)[:16]
    return bytes(rec)


def ib_edge_frames() -> list[tuple[int, bytes]]:
    """(link type, frame) at and around every decision of the native-IB pre-filter: ERF
    records (197) as ibdump writes them and bare LRH packets (247)."""
    rnd = random.Random(9)
    q = _ib(_sa_query(0x142))
    out = [q] + [q[:n] for n in (1, 2, 8, 9, 10, 20, 21, 23, 30, 43, 44, 100, len(q) - 3,
                                  len(q) - 1)]
    out += [q + b"\x00" * 4, q[:-1] + bytes([q[-1] ^ 1])]  # trailing bytes, a bad VCRC
    bad = bytearray(q)
    bad[-3] ^= 0xFF  # ICRC (and so VCRC)
    out.append(bytes(bad))
    for lnh in (0, 1):  # raw and IP non-IBA payloads
        b = bytearray(q)
        b[1] = (b[1] & 0xFC) | lnh
        out.append(bytes(b))
    grh = LRH(lnh=3, slid=7, dlid=2) / GRH(sgid=0xFE800000000000000002C9030000AAAA,
                                          dgid=0x20010DB8000000000000000000000001, nexthdr=0x1B)
    out.append(bytes(grh / BTH(opcode=0x64, dqpn=1) / DETH(src_qp=1) / _sa_query(0x143)))
    out.append(bytes(grh / BTH(opcode=0x0A, dqpn=0x40) / Raw(rnd.randbytes(64))))
    out.append(bytes(grh)[:30])
    # data, QPs and opcodes: RC WRITE and ACK, UD to a non-GSI QP, UD with immediate, the hint
    for bth, src_qp in ((dict(opcode=0x0A, dqpn=0x11), None), (dict(opcode=0x11, dqpn=0x11), None),
                        (dict(opcode=0x64, dqpn=5), 9), (dict(opcode=0x65, dqpn=1), 1),
                        (dict(opcode=0x64, dqpn=7), 1), (dict(opcode=0x64, dqpn=1), 0)):
        pay = Raw(rnd.randbytes(48)) if src_qp is None else DETH(src_qp=src_qp) / _sa_query(0x144)
        out.append(bytes(LRH(slid=3, dlid=4) / BTH(**bth) / pay))
    # SMPs on QP0, CM, other classes, a short and a long MAD
    out.append(_ib(MAD(mgmt_class=0x81, attribute_id=0x20, method=0x81) / Raw(bytes(232)), dqpn=0,
                   sqpn=0))
    for cls, attr in ((0x07, 0x10), (0x04, 0x12), (0x03, 0x35)):
        out.append(_ib(MAD(mgmt_class=cls, attribute_id=attr, method=0x81, status=0x0300,
                           transaction_id=0x150 + cls) / Raw(rnd.randbytes(232))))
    mad = bytes(_sa_query(0x146))
    for body in (mad[:200], mad + b"\x00" * 8):
        out.append(bytes(LRH(slid=7, dlid=2) / BTH(opcode=0x64, dqpn=1) / DETH(src_qp=1)
                         / Raw(body)))
    # SA answers: whole, segmented in order and out of order, never finished
    for tid, order in ((0x160, None), (0x161, [1, 0, 2]), (0x163, [0, 1])):
        segs = _answer_segments(tid, 7)
        for k in (order if order is not None else range(len(segs))):
            out.append(_ib(MAD(segs[k]), slid=2, dlid=7))
    frames = [(197, erf_record(f, 1.0)) for f in out] + [(247, f) for f in out[:24]]
    erf = erf_record(q, 1.0)
    frames += [
        (197, _erf_with(q + bytes(6), rlen=len(erf) + 6)),  # rlen padding after the packet
        (197, _erf_with(q[:200], wlen=len(q))),  # the capture cut the packet short
        (197, _erf_with(q, wlen=len(q) - 10)),
        (197, _erf_with(q, type=2)),  # ERF Ethernet
        (197, _erf_with(q, type=25)),
        (197, _erf_with(bytes(8) + q, ext=1)),  # one extension header
        (197, erf[:12]),
    ]
    return frames


@pytest.fixture(scope="module")
def ib_edge_pcapng(tmp_path_factory):
    path = tmp_path_factory.mktemp("ibedge") / "ib-edge.pcapng"
    with PcapNgWriter(str(path)) as w:
        for i, (lt, f) in enumerate(ib_edge_frames()):
            w.write(f, lt, i * 1e-3)
    return path


def test_identical_on_native_ib_edge_cases(ib_edge_pcapng, tmp_path):
    recs = assert_identical(ib_edge_pcapng)
    kinds = {r["kind"] for r in recs}
    assert {"sa", "malformed", "smp", "cm"} <= kinds
    errors = [e for r in recs for e in r.get("errors", [])]
    assert ICRC_MISMATCH in errors and VCRC_MISMATCH in errors
    assert any("src_gid" in r for r in recs)
    # classic pcap (the block reader) of the ERF records alone
    path = tmp_path / "ib-edge.pcap"
    with PcapWriter(str(path), 197) as w:
        for i, (lt, f) in enumerate(ib_edge_frames()):
            if lt == 197:
                w.write(f, i * 1e-3)
    assert_identical(path)


def test_native_ib_prefilter_takes_plain_gsi_datagrams(ib_edge_pcapng):
    """The fast path does the bulk of an ibdump capture: plain GSI datagrams with and without
    a GRH, and RC data skipped; its offsets point at the layers Scapy dissects."""
    kinds = {"skip": 0, "mad": 0, "full": 0}
    with_grh = 0
    for frame in read_frames(str(ib_edge_pcapng)):
        cl = _classify(frame)
        kinds["skip" if cl is None else "full" if cl is FULL else "mad"] += 1
        if isinstance(cl, IbMadAt):
            pkt = dissect(frame)
            assert frame.data[cl.lrh:cl.lrh + 8] == bytes(pkt[LRH])[:8]
            assert frame.data[cl.bth:cl.bth + 12] == bytes(pkt[BTH])[:12]
            assert frame.data[cl.mad:cl.mad + 256] == bytes(pkt[MAD])[:256]
            if cl.grh >= 0:
                assert frame.data[cl.grh:cl.grh + 40] == bytes(pkt[GRH])[:40]
                with_grh += 1
    assert kinds["mad"] >= 20 and kinds["skip"] >= 8 and kinds["full"] >= 20, kinds
    assert with_grh


@pytest.mark.parametrize("cut", [3, 20, 24 + 7, 24 + 16 + 30, -1])
def test_identical_on_truncated_files(edge_pcap, tmp_path, cut):
    data = edge_pcap.read_bytes()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[:cut])
    assert_identical(path)
    with pytest.raises(CaptureError):
        list(decode_file_fast(str(path)))


def test_identical_when_a_frame_spans_read_blocks(bench_capture, monkeypatch):
    from ibpath_scapy.capture import pcapio
    monkeypatch.setattr(pcapio, "READ_BLOCK", 1000)  # every frame straddles a block boundary
    assert_identical(bench_capture("capture1", 400))


# -- the pre-filter on its own -------------------------------------------------------------------

def _classify(frame: Frame):
    return prefilter().classifier(frame.linktype)(frame.data, 0, len(frame.data))


def _corpus_frames(paths):
    for path in paths:
        try:
            yield from read_frames(str(path))
        except CaptureError:
            pass


def test_prefilter_agrees_with_the_scapy_decoder(edge_pcap, ib_edge_pcapng, bench_corpora):
    """SKIP only where the Scapy decoder yields nothing; MadAt (IbMadAt) only where it yields
    a MAD record (kind from the management class, never "malformed")."""
    paths = [edge_pcap, ib_edge_pcapng, *bench_corpora, *_project_captures(),
             *sorted(EXTERNAL.glob("*.pcap"))]
    seen = {"skip": 0, "mad": 0, "full": 0}
    for frame in _corpus_frames(paths):
        cl = _classify(frame)
        recs = list(Decoder().feed(frame))
        if cl is None:
            seen["skip"] += 1
            assert recs == [], f"frame {frame.number}: skipped but decodes to {recs}"
        elif isinstance(cl, (MadAt, IbMadAt)):
            seen["mad"] += 1
            assert len(recs) == 1 and "mad" in recs[0] and recs[0]["kind"] != "malformed", frame
        else:
            assert cl is FULL
            seen["full"] += 1
    assert all(seen.values()), seen


def test_prefilter_offsets_point_at_the_layers():
    pkt = rocev2_frame(_sa_query(0x70), src=A, dst=B)
    raw = bytes(pkt)
    at = prefilter().ether(raw, 0, len(raw))
    assert isinstance(at, MadAt)
    assert raw[at.ip:] == bytes(pkt[IP])
    assert raw[at.udp:] == bytes(pkt[UDP])
    assert raw[at.bth:] == bytes(pkt[BTH])
    assert raw[at.mad:at.mad + 256] == bytes(pkt[MAD])


# -- statistics and the switch --------------------------------------------------------------------

def test_stats_count_every_frame(bench_corpora, edge_pcap):
    for path in [*bench_corpora, edge_pcap]:
        d = FastDecoder()
        list(decode_file_fast(str(path), d))
        n = sum(1 for _ in read_frames(str(path)))
        assert d.stats.frames == n
        assert (d.skipped > 0) == (path != bench_corpora[1])  # capture 2 is MADs only
        if path == edge_pcap:
            continue  # tshark refuses its 270 KB frame (over its 262144-byte maximum)
        p = subprocess.run(["tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.number"],
                           capture_output=True, text=True, check=True, env=tshark_env())
        assert len(p.stdout.split()) == n


def _audit_json(path: Path, fastpath: str) -> dict:
    env = {**os.environ, "IBPATH_FASTPATH": fastpath}
    p = subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "audit", "--quiet",
                        "--format", "json", str(path)], capture_output=True, text=True, env=env)
    assert "Traceback" not in p.stderr, p.stderr
    return json.loads(p.stdout)


def test_audit_same_with_and_without_fast_path(edge_pcap, ib_edge_pcapng):
    paths = [edge_pcap, ib_edge_pcapng, CAPTURES / "corpus" / "sar-rmpp-gap.pcapng",
             CAPTURES / "opensm" / "opensm-saquery.pcap"]
    for path in paths:
        assert _audit_json(path, "1") == _audit_json(path, "0"), path


# -- what the replay keeps of each SA frame (issue 8: bounded memory) ----------------------------

def _kept_view(rec: dict) -> dict:
    """The keys a transaction keeps of a decoded record, as the record has them (RMPP segments'
    empty PathRecord lists come back as an empty sequence)."""
    from ibpath_scapy.audit.storage import KEPT_KEYS
    out = {k: rec[k] for k in ("frame",) + KEPT_KEYS if k in rec}
    if "path_records" in out and not out["path_records"]:
        out["path_records"] = []
    return out


def test_replay_keeps_what_the_records_say(bench_corpora, edge_pcap):
    """Every request and response a transaction gives back reads like the decoded record it
    came from (the oracle: the Scapy path's records, which share no dicts), in frame order."""
    from ibpath_scapy.audit.replay import Replay
    paths = [edge_pcap, bench_corpora[1]] + [p for p in _project_captures()
                                              if "corpus" in p.parts or "opensm" in p.parts]
    checked = 0
    for path in paths:
        for fn, decoder in ((decode_file, Decoder()), (decode_file_fast, FastDecoder())):
            recs, _, _ = _decode(fn, path, decoder)
            by_frame = {r["frame"]: r for r in recs if r.get("kind") == "sa"}
            replay = Replay()
            for r in recs:
                replay.feed(r)
            replay.finish()
            for t in replay.done:
                for kept in list(t.requests) + list(t.responses):
                    got = dict(kept)
                    got["path_records"] = list(got.get("path_records", []))
                    want = _kept_view(by_frame[kept["frame"]])
                    want.setdefault("path_records", [])
                    assert got == want, f"{path}: frame {kept['frame']}"
                    assert "no such key" not in kept and kept.get("time") is None
                    checked += 1
                assert t.frames == sorted({k["frame"] for k in list(t.requests) + list(t.responses)})
    assert checked > 500


def test_replay_shares_the_bodies_of_repeated_frames(sa_storm):
    """A long SA storm costs the replay a few bytes per frame: the retries and repeated answers
    of a transaction share one stored body (only reassembled answers keep their own)."""
    from ibpath_scapy.audit.replay import Replay
    replay = Replay()
    for r in decode_file_fast(str(sa_storm), FastDecoder()):
        replay.feed(r)
    replay.finish()
    frames = sum(len(t.requests) + len(t.responses) for t in replay.done)
    bodies = sum(len(t.requests._bodies) + len(t.responses._bodies) for t in replay.done)
    reassembled = sum(1 for t in replay.done for r in t.responses if "reassembled_from" in r)
    assert frames == 6000
    assert bodies <= reassembled + 4 * len(replay.done), (bodies, reassembled, frames)


def test_packet_rule_memo_matches_the_conditions(bench_corpora, edge_pcap):
    """The packet rules' verdicts, memoised by the values their conditions read, equal the
    conditions evaluated on each record (Scapy path: no shared dicts)."""
    from ibpath_scapy.audit.rules import frame as fr
    n = fired = 0
    for path in [edge_pcap, bench_corpora[1]] + _project_captures():
        for rec in _decode(decode_file, path, Decoder())[0]:
            if rec.get("kind") != "sa":
                continue
            records = rec.get("path_records") or []
            views = {"MAD": rec.get("mad"), "RMPP": rec.get("rmpp"), "SAHeader": rec.get("sa"),
                     "PathRecord": records[0] if records else None}
            want = [pr.rule_id for pr in fr._rules_holding(views, records)]
            got = [pr.rule_id for pr, _, _ in fr.packet_rule_hits(rec)]
            assert got == want, f"{path}: frame {rec['frame']}"
            n += 1
            fired += bool(want)
    assert n > 500 and fired, (n, fired)
