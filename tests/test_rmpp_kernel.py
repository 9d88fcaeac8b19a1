"""Issue 17, point 2: RMPP as the kernel's receiver takes it (drivers/infiniband/core/
mad_rmpp.c continue_rmpp, find_seg_location, complete_rmpp), on real captures: a segment sent
twice (the sender's ib_retry_rmpp after an ACK timeout) and a stray segment before the first.
decode's `errors`, its exit status and the audit's findings agree, in both engines."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ibpath_scapy.engines import tshark as tshark_engine
from ibpath_scapy.audit.engine import audit_records
from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.craft import CaptureBuilder
from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.layers import MAD, RMPP, PathRecord, SAHeader
from ibpath_scapy.facts.rmpp import segment

L, R = "fe80::2:c903:0:1", "fe80::2:c903:0:2"
N_RECORDS = 8  # 3 segments


def pr(i: int = 0) -> PathRecord:
    return PathRecord(sgid=L, dgid=R, slid=1, dlid=2 + i, pkey=0xFFFF, reversible=1, mtu=4,
                      rate=3, mtu_selector=2, rate_selector=2, packet_life_time_selector=2,
                      packet_life_time=18)


def _segments(b: CaptureBuilder, q) -> list[bytes]:
    hdr = bytes(MAD(method=0x92, transaction_id=q.tid) / RMPP(rmpp_version=1, rmpp_type=1)
                / SAHeader(component_mask=0x300C, attribute_offset=8))[:56]
    return segment(hdr + b"".join(bytes(pr(i)) for i in range(N_RECORDS)))


def _ack(b: CaptureBuilder, q, seg: int) -> None:
    b.mad(MAD(method=0x12, transaction_id=q.tid)
          / RMPP(rmpp_version=1, rmpp_type=2, rmpp_flags=1, segment_number=seg,
                 payload_length=seg + 1) / SAHeader())


def write(path, order: list[int], ack_after: int | None = None) -> None:
    """A GetTable query (frame 1) and its 3 segments sent in `order`."""
    with CaptureBuilder(str(path)) as b:
        q = b.sa_query(PathRecord(sgid=L, dgid=R, pkey=0xFFFF, numb_path=1), method=0x12)
        segs = _segments(b, q)
        for k in order:
            b.mad(segs[k - 1], from_sa=True)
            if k == ack_after:
                _ack(b, q, k)


def decode_cli(path):
    p = subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "decode", "--format",
                        "json", str(path)], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr
    return p.returncode, [json.loads(ln) for ln in p.stdout.splitlines()], p.stderr


def audit(path, records=None) -> list[tuple]:
    records = list(decode_file(str(path))) if records is None else records
    fa = audit_records(str(path), records, AuditOptions())
    return sorted((f.rule, f.severity, f.frames) for f in fa.findings)


def test_resent_segment_is_dropped_and_counted_not_an_error(tmp_path):
    """1, 2, ACK of 2, 2 again (the ACK was lost: ib_retry_rmpp rewinds), 3."""
    f = tmp_path / "resent.pcapng"
    write(f, [1, 2, 2, 3], ack_after=None)
    rc, recs, err = decode_cli(f)
    assert rc == 0, err
    assert all("errors" not in r for r in recs)
    by = {r["frame"]: r for r in recs}
    assert "repeated (held from frame 3)" in by[4]["rmpp_dropped"]
    assert by[5]["reassembled_from"] == [2, 3, 5]
    assert len(by[5]["path_records"]) == N_RECORDS
    assert "1 RMPP segment dropped (resent)" in err and "0 malformed" in err
    assert audit(f) == [("SAR-RMPP-RETRY", "info", (4,))]


def test_stray_segment_before_the_first_is_dropped(tmp_path):
    """Segment 2 before segment 1: no transfer is open, so the kernel drops it (continue_rmpp:
    acquire_rmpp_recv finds none); the sender's retry sends it again."""
    f = tmp_path / "stray.pcapng"
    write(f, [2, 1, 2, 3])
    rc, recs, err = decode_cli(f)
    assert rc == 0, err
    by = {r["frame"]: r for r in recs}
    assert "no transfer of this TID is open" in by[2]["rmpp_dropped"]
    assert by[5]["reassembled_from"] == [3, 4, 5]
    assert audit(f) == [("SAR-RMPP-RETRY", "info", (2,))]


def test_stray_segment_never_resent_leaves_the_transfer_unfinished(tmp_path):
    """2, 1, 3: the kernel dropped 2 and it never came again, so the answer never completes
    (as in the kernel, which times the transfer out): SAR-RMPP, an error, and decode exits 1."""
    f = tmp_path / "stray-lost.pcapng"
    write(f, [2, 1, 3])
    rc, recs, err = decode_cli(f)
    assert rc == 1
    (unfinished,) = [r for r in recs if r["kind"] == "malformed"]
    assert "segments [2] missing" in unfinished["error"]
    got = audit(f)
    assert ("SAR-RMPP-RETRY", "info", (2,)) in got
    assert any(r == "SAR-RMPP" and s == "error" for r, s, _ in got)


def test_resent_after_completion_is_dropped(tmp_path):
    """The whole answer, then segment 3 again within complete_rmpp's 10 s."""
    f = tmp_path / "late.pcapng"
    write(f, [1, 2, 3, 3])
    rc, recs, _ = decode_cli(f)
    assert rc == 0
    assert "completed in frame 4" in [r for r in recs if r["frame"] == 5][0]["rmpp_dropped"]
    assert audit(f) == [("SAR-RMPP-RETRY", "info", (5,))]


def test_stop_from_the_receiver_ends_the_transfer(tmp_path):
    f = tmp_path / "stop.pcapng"
    with CaptureBuilder(str(f)) as b:
        q = b.sa_query(PathRecord(sgid=L, dgid=R, pkey=0xFFFF, numb_path=1), method=0x12)
        segs = _segments(b, q)
        b.mad(segs[0], from_sa=True)
        b.mad(MAD(method=0x12, transaction_id=q.tid)
              / RMPP(rmpp_version=1, rmpp_type=3, rmpp_flags=1, rmpp_status=118) / SAHeader())
        b.mad(segs[1], from_sa=True)  # in flight when the STOP went out
    rc, recs, _ = decode_cli(f)
    assert rc == 1
    (unfinished,) = [r for r in recs if r["kind"] == "malformed"]
    assert "ended by the receiver's RMPP STOP in frame 3" in unfinished["error"]
    assert "no transfer" in [r for r in recs if r["frame"] == 4][0]["rmpp_dropped"]


@pytest.mark.skipif(tshark_engine.tshark_path() is None, reason="tshark missing")
@pytest.mark.parametrize("order", [[1, 2, 2, 3], [2, 1, 2, 3], [2, 1, 3], [1, 2, 3, 3]])
def test_tshark_engine_gives_the_same(tmp_path, order):
    f = tmp_path / "c.pcapng"
    write(f, order, ack_after=2)
    scapy = list(decode_file(str(f)))
    tshark = list(tshark_engine.tshark_records(str(f)))
    assert audit(f, tshark) == audit(f, scapy)
    assert [r.get("rmpp_dropped") for r in tshark] == [r.get("rmpp_dropped") for r in scapy]
