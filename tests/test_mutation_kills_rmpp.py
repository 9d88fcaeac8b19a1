"""Where the RMPP reassembly's verdicts change (issue 43, item 5: the mutants of
ibpath_scapy/facts/rmpp.py that survived the older tests; tests/README.md).

Oracles: drivers/infiniband/core/mad_rmpp.c (torvalds/linux): process_rmpp_stop() and
process_rmpp_abort() both end the sender's transfer (abort_send); continue_rmpp() drops a
segment for which acquire_rmpp_recv() finds no open receive; and the package's documented
caps (README, "Robustness": "an RMPP transfer keeps at most 4,096 segments and 1 MiB, at most
4,096 transfers and 64 MiB are open at once (oldest evicted)"); mad.c ib_is_mad_class_rmpp():
which management classes carry an RMPP header. Segments are built by rmpp.segment(), itself
checked against the kernel's worked examples in tests/test_rmpp.py.
"""

from __future__ import annotations

import pytest

from ibpath_scapy.layers.mad import MAD, RMPP
from ibpath_scapy.layers.sa import PathRecord, SAHeader
from ibpath_scapy.facts.rmpp import Reassembler, segment

KEY = ("sa", "client", 0x42)
STOP, ABORT, ACK = 3, 4, 2


def table_response(n: int) -> bytes:
    """A GetTableResp of n PathRecords as one message (56-byte header + 64n bytes)."""
    hdr = bytes(MAD(method=0x92, transaction_id=0x42) /
                RMPP(rmpp_version=1, rmpp_type=1, r_resp_time=0x1F) /
                SAHeader(attribute_offset=8, component_mask=0x30))[:56]
    return hdr + b"".join(bytes(PathRecord(dlid=i + 1)) for i in range(n))


def flags(seg: bytes) -> int:
    return seg[26] & 7


@pytest.mark.parametrize("kind,word", [(STOP, "STOP"), (ABORT, "ABORT")])
def test_stop_and_abort_both_end_the_transfer(kind, word):
    segs = segment(table_response(10))
    r = Reassembler()
    r.add(KEY, 1, flags(segs[0]), segs[0], frame=1)
    r.control(KEY, kind, frame=7)
    (key, t), = r.pending()
    assert key == KEY and not t.segments and t.size == 0
    assert t.stopped == f"ended by the receiver's RMPP {word} in frame 7"
    assert r.open_bytes == 0 and r.open == {}
    # the rest of the transfer comes to no open receive: dropped
    assert r.add(KEY, 2, flags(segs[1]), segs[1], frame=8) is None
    assert "no transfer" in r.dropped


@pytest.mark.parametrize("kind", [ACK, 0, 1, 5])
def test_other_control_types_change_nothing(kind):
    segs = segment(table_response(10))
    r = Reassembler()
    r.add(KEY, 1, flags(segs[0]), segs[0], frame=1)
    r.control(KEY, kind, frame=2)
    assert KEY in r.open and r.open_bytes == 256
    for k in (2, 3):
        assert r.add(KEY, k, flags(segs[k - 1]), segs[k - 1], frame=k + 1) is None
    msg, t = r.add(KEY, 4, flags(segs[3]), segs[3], frame=5)
    assert len(MAD(msg)[SAHeader].records) == 10 and t.stopped is None


def test_control_for_a_transfer_not_open_is_ignored():
    r = Reassembler()
    r.control(KEY, STOP, frame=1)
    assert r.pending() == [] and r.open_bytes == 0


def test_open_bytes_after_a_stop_let_later_transfers_stay():
    """After a STOP the transfer's bytes are no longer open: two later transfers fit a budget
    of 3 segments together; counted still, the older would be evicted."""
    segs = segment(table_response(10))
    r = Reassembler(max_open_bytes=3 * 256)
    r.add(("a",), 1, flags(segs[0]), segs[0], frame=1)
    r.add(("a",), 2, flags(segs[1]), segs[1], frame=2)
    r.control(("a",), STOP, frame=3)
    assert r.open_bytes == 0
    r.add(("b",), 1, flags(segs[0]), segs[0], frame=4)
    r.add(("c",), 1, flags(segs[0]), segs[0], frame=5)
    r.add(("c",), 2, flags(segs[1]), segs[1], frame=6)
    assert set(r.open) == {("b",), ("c",)} and r.open_bytes == 3 * 256
    assert [k for k, t in r.evicted] == [("a",)]
    r.add(("c",), 3, flags(segs[2]), segs[2], frame=7)  # a fourth segment: b goes
    assert set(r.open) == {("c",)} and [k for k, _ in r.evicted] == [("a",), ("b",)]
    assert r.evicted[1][1].limit == "evicted: more than 768 bytes of RMPP segments open"
    assert r.open_bytes == 3 * 256


@pytest.mark.parametrize("seg_num", [2, 4095, 4096])
def test_a_stray_segment_up_to_the_cap_is_dropped(seg_num):
    """continue_rmpp: a segment after the first with no open receive is dropped (not an
    error), up to the last segment number the reassembly keeps (4096)."""
    segs = segment(table_response(10))
    r = Reassembler()
    assert r.add(KEY, seg_num, 0x1, segs[1], frame=1) is None
    assert r.dropped == (f"segment {seg_num} while no transfer of this TID is open: dropped "
                         "(continue_rmpp: no rmpp_recv)")
    assert r.open == {} and r.pending() == []


def test_a_segment_number_past_the_cap_is_a_problem_not_a_drop():
    segs = segment(table_response(10))
    r = Reassembler()
    assert r.add(KEY, 4097, 0x1, segs[1], frame=9) is None
    assert r.dropped is None
    (key, t), = r.pending()
    assert t.limit == "segment numbers above 4096 are not reassembled"
    assert t.rejected == [9] and len(t.problems) == 1
    assert "4097" in str(t.problems[0])


def test_segment_zero_opens_a_transfer_with_a_range_problem_and_no_limit():
    segs = segment(table_response(10))
    r = Reassembler()
    assert r.add(KEY, 0, 0x1, segs[0], frame=3) is None
    (key, t), = r.pending()
    assert t.limit is None and t.rejected == [3] and len(t.problems) == 1


def test_the_oldest_transfer_is_evicted_past_max_open():
    segs = segment(table_response(10))
    r = Reassembler(max_open=2)
    for i, key in enumerate([("a",), ("b",), ("c",)]):
        r.add(key, 1, flags(segs[0]), segs[0], frame=i + 1)
    assert list(r.open) == [("b",), ("c",)]
    (key, t), = r.evicted
    assert key == ("a",) and t.limit == "evicted: more than 2 RMPP transfers open at once"
    assert t.segments == {} and t.size == 0 and t.frames == {1: 1}
    assert r.open_bytes == 2 * 256


def test_why_unfinished_names_every_missing_segment_from_1():
    segs = segment(table_response(10))
    r = Reassembler()
    r.add(KEY, 1, flags(segs[0]), segs[0], frame=1)
    r.control(KEY, STOP, frame=2)  # what was held is gone with the transfer
    (_, t), = r.pending()
    assert t.why_unfinished() == "no LAST segment; ended by the receiver's RMPP STOP in frame 2"
    r = Reassembler()
    for k in (2, 4):  # segment 1 never came: the transfer never opened, both are dropped
        assert r.add(KEY, k, flags(segs[k - 1]), segs[k - 1], frame=k) is None
    r.add(KEY, 1, flags(segs[0]), segs[0], frame=5)
    r.add(KEY, 4, flags(segs[3]), segs[3], frame=6)
    (_, t), = r.pending()
    assert t.why_unfinished() == "segments [2, 3] missing"


def test_why_unfinished_counts_the_problems_past_the_third():
    from ibpath_scapy.facts.rmpp import Transfer

    t = Transfer(last=3, segments={2: b"", 3: b""})
    assert t.why_unfinished() == "segments [1] missing"
    t = Transfer(last=30)
    assert t.why_unfinished() == (f"segments {list(range(1, 21))} ... missing")


def test_a_reassembled_message_reads_as_one_first_and_last_segment():
    """What reassemble() hands the decoder: the first segment's header, RMPP flags
    ACTIVE|FIRST|LAST, segment number 1, PayloadLength = SA header (20) + all data."""
    import struct as _struct

    from ibpath_scapy.facts.rmpp import reassemble

    msg = reassemble(segment(table_response(10)))
    assert len(msg) == 56 + 10 * 64
    assert msg[26] & 7 == 7
    assert _struct.unpack_from("!II", msg, 28) == (1, 20 + 10 * 64)


@pytest.mark.parametrize("done_at,again_at,dropped", [
    (None, 5.0, True),    # completed in a capture without times: known still
    (1.0, None, True),
    (1.0, 11.0, True),    # 10 s after complete_rmpp: cleanup_work has not run yet
    (1.0, 11.5, False),   # later: a new transfer
])
def test_a_completed_transfer_is_known_for_10_s(done_at, again_at, dropped):
    segs = segment(table_response(10))
    r = Reassembler()
    for k in (1, 2, 3, 4):
        done = r.add(KEY, k, flags(segs[k - 1]), segs[k - 1], frame=k, time=done_at)
    assert done is not None
    assert r.add(KEY, 1, flags(segs[0]), segs[0], frame=5, time=again_at) is None
    if dropped:
        assert r.dropped == ("segment 1 of the transfer completed in frame 4: acknowledged "
                             "and dropped (continue_rmpp, RMPP_STATE_COMPLETE)")
    else:
        assert r.dropped is None and KEY in r.open


def test_a_mad_of_a_class_without_rmpp_is_a_whole_message(tmp_path):
    """mad.c ib_is_mad_class_rmpp(): only SA, DevMgt, DevAdm, BIS and the vendor range-2
    classes carry an RMPP header (ib_get_mad_data_offset gives the CM its data right after
    the 24-byte MAD header), so a CM MAD is its whole message. carries_whole_message() on
    a decoded CM REQ (a MadFrame with no RMPP fact), from both decoders, says so."""
    from ibpath_scapy.craft.builder import CaptureBuilder
    from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast
    from ibpath_scapy.engines.scapy.decode import Decoder, decode_file
    from ibpath_scapy.facts.rmpp import carries_whole_message

    f = tmp_path / "cm.pcapng"
    with CaptureBuilder(str(f)) as b:
        b.cm_req(PathRecord(sgid="fe80::1", dgid="fe80::2", slid=1, dlid=2, pkey=0xFFFF))
    for recs in (list(decode_file(str(f), Decoder())),
                 list(decode_file_fast(str(f), FastDecoder()))):
        (rec,) = recs
        assert rec.mad.mgmt_class == 0x07 and rec.rmpp is None
        assert carries_whole_message(rec) is True
