"""SA query and response rules and DECODE-MALFORMED: for each, a capture that triggers it and
a near-identical one that does not, with the exact rule IDs and frames."""

import pytest

from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.craft import CaptureBuilder
from ibpath_scapy.layers import MAD, RMPP, PathRecord, SAHeader
from ibpath_scapy.capture.pcapio import PcapNgWriter

L, R = "fe80::2:c903:0:10", "fe80::2:c903:0:20"
SA_RULES = {"SAQ-SERVICEID-HALF", "SAQ-RESERVED-COMP", "SAQ-BAD-METHOD", "SAQ-NUMBPATH-ZERO",
            "SAQ-SELECTOR-MISSING",
            "SAQ-NO-RESPONSE", "SAQ-RETRY", "SAR-STATUS", "SAR-MISMATCH", "SAR-GET-MULTI",
            "SAR-RMPP", "DECODE-MALFORMED"}


def answer(**kw) -> PathRecord:
    base = dict(sgid=L, dgid=R, slid=0x10, dlid=0x20, reversible=1, pkey=0xFFFF, sl=0,
                mtu_selector=2, mtu=4, rate_selector=2, rate=7, packet_life_time_selector=2,
                packet_life_time=18)
    base.update(kw)
    return PathRecord(**base)


def _findings(tmp_path, build) -> list:
    path = tmp_path / "c.pcapng"
    with CaptureBuilder(str(path)) as b:
        build(b)
    (fa,), _ = audit_paths([str(path)], AuditOptions(), quiet=True)
    return fa.findings


def audit(tmp_path, build) -> set[tuple[str, tuple[int, ...]]]:
    return {(f.rule, f.frames) for f in _findings(tmp_path, build) if f.rule in SA_RULES}


def query(**kw) -> PathRecord:
    return PathRecord(sgid=L, dgid=R, pkey=0xFFFF, **kw)


def test_clean_exchange_has_no_sa_finding(tmp_path):
    assert audit(tmp_path, lambda b: b.sa_answer(b.sa_query(query(numb_path=1)), [answer()])) == set()


@pytest.mark.parametrize("mask,hit", [(0x1 | 0x0C, True), (0x2 | 0x0C, True), (0x3 | 0x0C, False)])
def test_serviceid_half(tmp_path, mask, hit):
    got = audit(tmp_path, lambda b: b.sa_answer(
        b.sa_query(query(service_id=0x106), component_mask=mask), [answer()]))
    assert got == ({("SAQ-SERVICEID-HALF", (1,))} if hit else set())


@pytest.mark.parametrize("mask,hit", [(0x0C | 1 << 7, True), (0x0C | 1 << 40, True), (0x0C, False)])
def test_reserved_component(tmp_path, mask, hit):
    got = audit(tmp_path, lambda b: b.sa_answer(b.sa_query(query(), component_mask=mask), [answer()]))
    assert got == ({("SAQ-RESERVED-COMP", (1,))} if hit else set())


# ComponentMask bits of the three pairs (wire-formats.md §3: MTUSelector 16, MTU 17,
# RateSelector 18, Rate 19, PacketLifeTimeSelector 20, PacketLifeTime 21); GIDs 2 and 3
@pytest.mark.parametrize("mask,hit", [
    (0x0C | 1 << 17, True), (0x0C | 1 << 16, True), (0x0C | 1 << 19, True),
    (0x0C | 1 << 18, True), (0x0C | 1 << 21, True), (0x0C | 1 << 20, True),
    (0x0C | 3 << 16 | 1 << 19, True),  # MTU whole, rate half
    (0x0C | 3 << 16, False), (0x0C | 3 << 18, False), (0x0C | 3 << 20, False),
    (0x0C | 0x3F << 16, False), (0x0C, False)])
def test_selector_missing(tmp_path, mask, hit):
    """OpenSM reads MTU, rate and PacketLifeTime only with both bits of their pair
    (tests/test_opensm_oracle.py shows a value alone and a selector alone answered with the
    path's MTU): half a pair is the warning, a whole pair or none is not."""
    got = audit(tmp_path, lambda b: b.sa_answer(
        b.sa_query(query(mtu=4096, rate="100 Gb/s", packet_life_time=10), component_mask=mask),
        [answer()]))
    got = {g for g in got if g[0] == "SAQ-SELECTOR-MISSING"}  # (a whole pair: SAR-MISMATCH)
    assert got == ({("SAQ-SELECTOR-MISSING", (1,))} if hit else set())


def test_selector_missing_names_the_half_pair_and_the_answer(tmp_path):
    def build(b):
        q = b.sa_query(query(mtu=4096), component_mask=0x0C | 1 << 17)
        b.sa_answer(q, [answer()])
        b.sa_query(query(mtu_selector="largest available"), component_mask=0x0C | 1 << 16)
    got = sorted((f.frames, f.message) for f in _findings(tmp_path, build)
                 if f.rule == "SAQ-SELECTOR-MISSING")
    assert [frames for frames, _ in got] == [(1,), (3,)]
    assert ("mtu (bit 17) without mtu_selector (bit 16), so mtu exactly 4096 (5) is not asked "
            "(the answer, frame 2, has 2048 (4))") in got[0][1]
    assert ("mtu_selector (bit 16) without mtu (bit 17), so mtu largest available 2048 (4) is "
            "not asked") in got[1][1]


def test_selector_missing_is_about_queries(tmp_path):
    """An answer echoing the query's ComponentMask (OpenSM copies the request header) is not
    judged again: only the query's frame carries the finding."""
    def build(b):
        q = b.sa_query(query(mtu=4096), component_mask=0x0C | 1 << 17)
        b.sa_answer(q, [answer()])
    assert audit(tmp_path, build) == {("SAQ-SELECTOR-MISSING", (1,))}


def test_bad_method_request_and_response(tmp_path):
    # a PathRecord Set is not a valid SA PathRecord method
    got = audit(tmp_path, lambda b: b.mad(MAD(method=0x02, transaction_id=5) / RMPP()
                                          / SAHeader(records=[query()])))
    assert ("SAQ-BAD-METHOD", (1,)) in got
    # a Get answered with a GetTableResp
    def wrong_resp(b):
        q = b.sa_query(query())
        b.mad(MAD(method=0x92, transaction_id=q.tid) / RMPP(rmpp_version=1, rmpp_type=1,
              rmpp_flags=7, segment_number=1, payload_length=84) / SAHeader(records=[answer()]),
              from_sa=True)
    assert audit(tmp_path, wrong_resp) == {("SAQ-BAD-METHOD", (1, 2))}


@pytest.mark.parametrize("method,resp,hit", [
    (0x02, 0x81, False),  # Set → GetResp (IBA: there is no SetResp), as OpenSM answers
    (0x02, 0x82, True),
    (0x13, 0x92, False),  # GetTraceTable → GetTableResp
    (0x13, 0x93, True),
    (0x12, 0x92, False),
    (0x12, 0x81, True),
])
def test_response_method_pairing(tmp_path, method, resp, hit):
    def exchange(b):
        q = b.sa_query(query(), method=method)
        b.mad(MAD(method=resp, transaction_id=q.tid) / RMPP() / SAHeader(records=[answer()]),
              from_sa=True)
    got = [f for f in _findings(tmp_path, exchange) if f.rule == "SAQ-BAD-METHOD"]
    responses = [f for f in got if "response method" in f.message]
    assert len(responses) == (1 if hit else 0), [f.message for f in got]
    if hit:
        want = {0x02: 0x81, 0x13: 0x92, 0x12: 0x92}[method]
        assert f"(expected 0x{want:02x})" in responses[0].message


@pytest.mark.parametrize("numb,hit", [(0, True), (1, False)])
def test_numbpath_zero(tmp_path, numb, hit):
    got = audit(tmp_path, lambda b: b.sa_answer(
        b.sa_query(query(numb_path=numb), method=0x12), [] if numb == 0 else [answer()]))
    assert got == ({("SAQ-NUMBPATH-ZERO", (1,))} if hit else set())


def test_no_response_and_retry(tmp_path):
    def unanswered(b):
        q = b.sa_query(query())
        b.sa_query(query(), retransmit_of=q)
    assert audit(tmp_path, unanswered) == {("SAQ-NO-RESPONSE", (1, 2)), ("SAQ-RETRY", (1, 2))}

    def retried(b):
        q = b.sa_query(query())
        b.sa_query(query(), retransmit_of=q)
        b.sa_answer(q, [answer()])
    assert audit(tmp_path, retried) == {("SAQ-RETRY", (1, 2))}


@pytest.mark.parametrize("status,hit", [(0x0300, True), (0, False)])
def test_status(tmp_path, status, hit):
    got = audit(tmp_path, lambda b: b.sa_answer(b.sa_query(query()), [answer()], status=status))
    assert got == ({("SAR-STATUS", (2,))} if hit else set())


@pytest.mark.parametrize("field,value,hit", [("slid", 0x99, False), ("pkey", 0x8001, True),
                                             ("sgid", "fe80::99", True), ("reversible", 0, True)])
def test_mismatch(tmp_path, field, value, hit):
    q = query(slid=0x10, reversible=1)
    got = audit(tmp_path, lambda b: b.sa_answer(b.sa_query(q), [answer(**{field: value})]))
    # slid 0x99 contradicts the query's SLID 0x10 too: every masked field is compared
    assert ("SAR-MISMATCH", (1, 2)) in got if (hit or field == "slid") else got == set()


def test_get_resp_with_two_records(tmp_path):
    def two(b):
        q = b.sa_query(query())
        b.mad(MAD(method=0x81, transaction_id=q.tid) / RMPP(rmpp_version=1, rmpp_type=1,
              rmpp_flags=7, segment_number=1, payload_length=20 + 128)
              / SAHeader(attribute_offset=8, records=[answer(), answer(dlid=0x21)]), from_sa=True)
    assert audit(tmp_path, two) == {("SAR-GET-MULTI", (2,))}


def test_rmpp_missing_segment(tmp_path):
    def gap(b):
        b.sa_answer(b.sa_query(query(), method=0x12), [answer(dlid=i) for i in range(1, 11)],
                    skip_segments=(3,))
    assert audit(tmp_path, gap) == {("SAR-RMPP", (2, 3, 4)), ("SAQ-NO-RESPONSE", (1,))}

    def whole(b):
        b.sa_answer(b.sa_query(query(), method=0x12), [answer(dlid=i) for i in range(1, 11)])
    assert audit(tmp_path, whole) == set()


def test_rmpp_hostile_segment_number_is_bounded(tmp_path):
    def hostile(b):
        q = b.sa_query(query(), method=0x12)
        b.mad(MAD(method=0x92, transaction_id=q.tid) / RMPP(
            rmpp_version=1, rmpp_type=1, rmpp_flags=5, segment_number=0xFFFFFFFF,
            payload_length=60) / SAHeader(attribute_offset=8), from_sa=True)
    got = audit(tmp_path, hostile)
    assert {r for r, _ in got} >= {"SAR-RMPP"}


def test_decode_malformed(tmp_path):
    path = tmp_path / "m.pcapng"
    with CaptureBuilder(str(path)) as b:
        b.sa_answer(b.sa_query(query()), [answer()])
    data = path.read_bytes()
    cut = tmp_path / "cut.pcapng"
    from ibpath_scapy.capture.pcapio import read_frames
    frames = list(read_frames(str(path)))
    with PcapNgWriter(str(cut)) as w:
        w.write(frames[0].data[:150], 1, 1.0)  # MAD cut after 88 bytes
        w.write(frames[1].data, 1, 2.0)
    (fa,), _ = audit_paths([str(cut)], AuditOptions(), quiet=True)
    got = {(f.rule, f.frames) for f in fa.findings if f.rule in SA_RULES}
    assert ("DECODE-MALFORMED", (1,)) in got
    assert data
