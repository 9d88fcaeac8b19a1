"""RMPP segmentation and reassembly against the kernel's worked examples (wire-formats.md §2)."""

import struct

import pytest

from ibpath_scapy.layers.mad import MAD, RMPP
from ibpath_scapy.layers.sa import PathRecord, SAHeader
from ibpath_scapy.facts.rmpp import Reassembler, reassemble, segment

# (records, segments, pad, PayloadLength of segment 1, PayloadLength of the last segment)
WORKED_EXAMPLES = [(1, 1, 136, 84, 84), (3, 1, 8, 212, 212), (4, 2, 144, 296, 76),
                   (10, 4, 160, 720, 60)]


def table_response(n: int, tid: int = 0x42) -> bytes:
    """A GetTableResp of n PathRecords as one long message (56-byte header + 64n bytes)."""
    hdr = bytes(MAD(method=0x92, transaction_id=tid) / RMPP(rmpp_version=1, rmpp_type=1,
                                                            r_resp_time=0x1F)
                / SAHeader(attribute_offset=8, component_mask=0x30))[:56]
    data = b"".join(bytes(PathRecord(dlid=i + 1, slid=0x100 + i)) for i in range(n))
    return hdr + data


@pytest.mark.parametrize("n,segs,pad,first,last", WORKED_EXAMPLES)
def test_kernel_worked_examples(n, segs, pad, first, last):
    out = segment(table_response(n))
    assert len(out) == segs
    assert all(len(s) == 256 for s in out)
    seg_no = [struct.unpack("!I", s[28:32])[0] for s in out]
    paylen = [struct.unpack("!I", s[32:36])[0] for s in out]
    flags = [s[26] & 0x07 for s in out]
    assert seg_no == list(range(1, segs + 1))
    assert paylen[0] == first and paylen[-1] == last
    assert all(p == 0 for p in paylen[1:-1])  # middle segments: 0 (send_next_seg)
    assert flags[0] & 0x3 == 0x3 and flags[-1] & 0x5 == 0x5
    assert all(f & 1 for f in flags)
    assert all(s[26] >> 3 == 0x1F for s in out)  # RRespTime kept, only flags OR'ed in
    assert all(s[:24] == out[0][:24] and s[36:56] == out[0][36:56] for s in out)
    assert out[-1][256 - pad:] == bytes(pad)
    # first_paylen = 20 * seg_count + data_len
    assert first == 20 * segs + 64 * n


@pytest.mark.parametrize("n", [0, 1, 3, 4, 10, 25])
def test_reassembly_returns_every_record(n):
    msg = reassemble(segment(table_response(n)))
    assert len(msg) == 56 + 64 * n  # kernel get_mad_len
    recs = MAD(msg)[SAHeader].records
    assert [r.dlid for r in recs] == list(range(1, n + 1))


def test_records_cross_segment_boundaries():
    out = segment(table_response(4))
    # record 3 occupies stream bytes 192..255: 8 bytes in segment 1, 56 in segment 2
    assert out[0][56 + 192:] == bytes(PathRecord(dlid=4, slid=0x103))[:8]
    assert MAD(out[0])[SAHeader].records == []  # a lone segment holds no whole record list


def test_zero_records_take_one_padded_segment():
    out = segment(table_response(0))
    assert len(out) == 1 and struct.unpack("!I", out[0][32:36])[0] == 20


def test_streaming_reassembler_out_of_order_and_duplicates():
    """As the kernel's receiver (mad_rmpp.c): out of order inside an open transfer is fine; a
    segment held already is dropped (find_seg_location), not a problem; segment 2 before the
    transfer opened is dropped too (continue_rmpp: no rmpp_recv), so it must come again."""
    segs = segment(table_response(10))
    r = Reassembler()
    order = [2, 1, 1, 4, 3, 2]
    results, drops = [], []
    for i, k in enumerate(order):
        results.append(r.add(("a", "b", 0x42), k, segs[k - 1][26] & 7, segs[k - 1], frame=i + 1))
        drops.append(r.dropped)
    assert results[:-1] == [None] * 5
    msg, transfer = results[-1]
    assert len(MAD(msg)[SAHeader].records) == 10
    assert transfer.problems == [] and transfer.frames == {1: 2, 2: 6, 3: 5, 4: 4}
    assert [d is not None for d in drops] == [True, False, True, False, False, False]
    assert "no transfer" in drops[0] and "repeated (held from frame 2)" in drops[2]
    assert r.pending() == []


def test_reassembler_drops_resent_segments_of_a_completed_transfer():
    """complete_rmpp keeps the transfer 10 s (cleanup_work): a resent segment is dropped then,
    a segment 1 after that starts a new transfer."""
    segs = segment(table_response(10))
    r = Reassembler()
    key = ("a", "b", 0x42)
    for k in (1, 2, 3, 4):
        done = r.add(key, k, segs[k - 1][26] & 7, segs[k - 1], frame=k, time=1.0)
    assert done is not None
    assert r.add(key, 1, segs[0][26] & 7, segs[0], frame=5, time=10.9) is None
    assert "completed in frame 4" in r.dropped
    assert r.add(key, 1, segs[0][26] & 7, segs[0], frame=6, time=11.5) is None
    assert r.dropped is None and len(r.pending()) == 1


def test_reassembler_stop_ends_the_transfer():
    segs = segment(table_response(10))
    r = Reassembler()
    r.add(("a", "b", 0x42), 1, segs[0][26] & 7, segs[0], frame=1)
    r.control(("a", "b", 0x42), 3, frame=2)
    (key, t), = r.pending()
    assert "ended by the receiver's RMPP STOP in frame 2" in t.why_unfinished()
    assert r.add(("a", "b", 0x42), 2, segs[1][26] & 7, segs[1], frame=3) is None
    assert "no transfer" in r.dropped


def test_reassembler_reports_unfinished_transfer():
    segs = segment(table_response(10))
    r = Reassembler()
    for k in (1, 2, 4):
        r.add(("x",), k, segs[k - 1][26] & 7, segs[k - 1], frame=k)
    (key, t), = r.pending()
    assert t.last == 4 and 3 not in t.segments
