"""Where the SA rules' verdicts change (issue 43, item 5: the mutants of the @rule bodies of
ibpath_scapy/audit/rules/sa.py that survived the older tests; tests/README.md).

Oracles: IBA 15.2.1.1 / the kernel's ib_sa.h: an SA's class-specific status is the upper byte
of MAD status (0x0100 NO_RESOURCES ... 0x0800), the lower byte the common MAD status;
mad_rmpp.c: a completed transfer's segments that come again within 10 s are acknowledged and
dropped (continue_rmpp, RMPP_STATE_COMPLETE); segment numbers count from 1. Captures are built
as in tests/test_rules_resolver.py.
"""

from __future__ import annotations

import re
import struct

import pytest

from ibpath_scapy.craft.builder import CaptureBuilder
from ibpath_scapy.layers.mad import MAD, RMPP
from ibpath_scapy.layers.sa import SAHeader
from ibpath_scapy.facts.rmpp import segment

from test_rules_resolver import FWD, audit, path, query  # noqa: E402


def messages(fa, rule):
    return [f.message for f in fa.findings if f.rule == rule]


@pytest.mark.parametrize("status,sa_error", [(0x0200, True), (0x0300, True), (0x0700, True),
                                             (0x000C, False), (0x001C, False)])
def test_an_sa_status_is_named_and_an_sa_error_forbids_a_hand_over(tmp_path, status, sa_error):
    f = tmp_path / "st.pcapng"
    with CaptureBuilder(str(f)) as b:
        q = b.sa_query(query())
        b.sa_answer(q, [FWD], status=status)
    (msg,) = messages(audit(f), "SAR-STATUS")
    assert msg.startswith(f"SA status 0x{status:04x} ")
    assert msg.endswith(" (the resolver must not hand a path over)") is sa_error


def test_more_than_five_dropped_segments_are_counted_past_the_fifth(tmp_path):
    """A GetTable answer of 20 records (7 segments) sent twice: the second time every segment
    belongs to a transfer the receiver completed, and is dropped."""
    f = tmp_path / "resent.pcapng"
    records = [path(dlid=k + 2) for k in range(20)]
    with CaptureBuilder(str(f)) as b:
        q = b.sa_query(query(), method=0x12)
        b.sa_answer(q, records)
        b.sa_answer(q, records)
    (msg,) = messages(audit(f), "SAR-RMPP-RETRY")
    assert "7 segments dropped by the receiver as the kernel does" in msg
    assert len(re.findall(r"frame \d+: segment", msg)) == 5 and msg.endswith("; 2 more")


def test_a_segment_numbered_0_inside_a_transfer_is_named_when_it_completes(tmp_path):
    """The reassembly keeps the problem with the transfer; the frame that completes it
    carries it, and SAR-RMPP names it in the reassembler's words."""
    f = tmp_path / "zero.pcapng"
    with CaptureBuilder(str(f)) as b:
        q = b.sa_query(query(), method=0x12)
        hdr = bytes(MAD(method=0x92, transaction_id=q.tid) / RMPP(rmpp_version=1, rmpp_type=1)
                    / SAHeader(attribute_offset=8))[:56]
        segs = segment(hdr + b"".join(bytes(path(dlid=k + 2)) for k in range(5)))
        zero = bytearray(segs[1])
        struct.pack_into("!I", zero, 28, 0)
        for s in [segs[0], bytes(zero)] + segs[1:]:
            b.mad(s, from_sa=True)
    assert "segment number 0 outside 1..4096" in messages(audit(f), "SAR-RMPP")


def test_one_dropped_segment_is_one_segment(tmp_path):
    f = tmp_path / "one.pcapng"
    records = [path(dlid=k + 2) for k in range(5)]  # two segments
    with CaptureBuilder(str(f)) as b:
        q = b.sa_query(query(), method=0x12)
        b.sa_answer(q, records)
        b.sa_answer(q, records, skip_segments=(2,))  # segment 1 again
    (msg,) = messages(audit(f), "SAR-RMPP-RETRY")
    assert ": 1 segment dropped by the receiver as the kernel does: frame " in msg
    assert not msg.endswith("more")


@pytest.mark.parametrize("middle", [2, 3])
def test_every_middle_segment_is_active_only_with_payload_length_0(tmp_path, middle):
    """send_next_seg: a middle segment has ACTIVE alone and PayloadLength 0; segment 2 of a
    4-segment transfer is a middle one as much as segment 3."""
    f = tmp_path / "mid.pcapng"
    with CaptureBuilder(str(f)) as b:
        q = b.sa_query(query(), method=0x12)
        hdr = bytes(MAD(method=0x92, transaction_id=q.tid) / RMPP(rmpp_version=1, rmpp_type=1)
                    / SAHeader(attribute_offset=8))[:56]
        segs = segment(hdr + b"".join(bytes(path(dlid=k + 2)) for k in range(12)))
        assert len(segs) == 4
        bad = bytearray(segs[middle - 1])
        struct.pack_into("!I", bad, 32, 200)  # PayloadLength 200 in a middle segment
        segs[middle - 1] = bytes(bad)
        for s in segs:
            b.mad(s, from_sa=True)
    assert (f"middle segment {middle}: flags 0x1, PayloadLength 200 (kernel: ACTIVE only, 0)"
            in messages(audit(f), "SAR-RMPP"))


def test_wrong_first_or_last_flags_name_the_first_and_last_segments(tmp_path):
    """send_next_seg: segment 1 is ACTIVE|FIRST, the last ACTIVE|LAST; a transfer whose
    first segment lacks FIRST is named by the frames of segments 1 and N."""
    f = tmp_path / "flags.pcapng"
    with CaptureBuilder(str(f)) as b:
        q = b.sa_query(query(), method=0x12)
        hdr = bytes(MAD(method=0x92, transaction_id=q.tid) / RMPP(rmpp_version=1, rmpp_type=1)
                    / SAHeader(attribute_offset=8))[:56]
        segs = segment(hdr + b"".join(bytes(path(dlid=k + 2)) for k in range(12)))
        first = bytearray(segs[0])
        first[26] = (first[26] & 0xF8) | 0x1  # ACTIVE only
        frames = [b.mad(s, from_sa=True) for s in [bytes(first)] + segs[1:]]
    fa = audit(f)
    hits = [x for x in fa.findings if x.rule == "SAR-RMPP" and x.message == "FIRST/LAST flags wrong"]
    assert [list(x.frames) for x in hits] == [[frames[0], frames[-1]]]


def test_a_wrong_first_payload_length_names_the_first_and_last_segments(tmp_path):
    """send_next_seg: the first segment's PayloadLength is the whole message's (N - 1) x 220
    + the last segment's."""
    f = tmp_path / "paylen.pcapng"
    with CaptureBuilder(str(f)) as b:
        q = b.sa_query(query(), method=0x12)
        hdr = bytes(MAD(method=0x92, transaction_id=q.tid) / RMPP(rmpp_version=1, rmpp_type=1)
                    / SAHeader(attribute_offset=8))[:56]
        segs = segment(hdr + b"".join(bytes(path(dlid=k + 2)) for k in range(12)))
        first = bytearray(segs[0])
        want = struct.unpack_from("!I", first, 32)[0]
        struct.pack_into("!I", first, 32, want + 8)
        frames = [b.mad(s, from_sa=True) for s in [bytes(first)] + segs[1:]]
    hits = [x for x in audit(f).findings
            if x.rule == "SAR-RMPP" and x.message.startswith("first PayloadLength")]
    assert [list(x.frames) for x in hits] == [[frames[0], frames[-1]]]
    assert hits[0].message == (f"first PayloadLength {want + 8}, expected {want} (4 segments, "
                               f"last PayloadLength {want - 3 * 220})")
