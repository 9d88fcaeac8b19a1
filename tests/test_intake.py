"""The replay's intake of SA frames in C (ibpath_scapy/native/_intake.c, SaIntake) against
Replay.feed in Python, which remains the reference: fed the same records, both replays open,
fill and close the same transactions in the same order (every frame on the same side, the
same answer, the same records), keep the same frames for the frame rules and count the same,
over the project's captures, the fuzz inputs, the three bench captures in both
encapsulations, records of the Scapy engine, and with tables small enough that every frame
closes or evicts a transaction; and the audits' findings are the same."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ibpath_scapy.audit import engine
from ibpath_scapy.audit.engine import audit_records
from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.audit.replay import (ClosedTransaction, Replay, Transaction,
                                       _components)
from ibpath_scapy.audit.storage import FrameList
from ibpath_scapy.capture.pcapio import CaptureError
from ibpath_scapy.craft import CaptureBuilder
from ibpath_scapy.engines.fast import decode_file_fast
from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.facts.records import Mad, MadFrame, Rmpp
from ibpath_scapy.layers.sa import PathRecord, component_mask_for
from ibpath_scapy.native import extension

from conftest import ROOT, project_inputs

sys.path.insert(0, str(ROOT / "bench"))
from corpus import write_capture3  # noqa: E402

needs_c = pytest.mark.skipif(
    extension() is None or not hasattr(extension(), "SaIntake"),
    reason="the package was built without its C extension (no compiler or no Python "
           "headers): Replay.feed runs alone")


def _records(path, scapy: bool = False) -> list:
    out = []
    try:
        for rec in (decode_file if scapy else decode_file_fast)(str(path)):
            out.append(rec)
    except CaptureError:
        pass  # the records before the damage are fed as the audit feeds them
    return out


def _side(frames) -> list:
    """A transaction's side: its frames' numbers and (FrameList) the records themselves."""
    return [(r["frame"], id(r) if isinstance(r, MadFrame) else None) for r in frames]


def _summary(t) -> tuple:
    """What a resolution keeps of a closed transaction, by value (read back from the Spill
    file, its records are facts of their own)."""
    if not isinstance(t, ClosedTransaction):
        return ("open", t.requester, t.tid)
    return (t.requester, t.tid, t.attribute_id, t.answered, t.completing_frame,
            t.query and dict(t.query), t.status, t.component_mask, t.components, t.first_frame,
            t.request_count, t.frames, [dict(r) for r in t.records], t.method,
            t.asks_reversible(), t.arrows)


def _replay(records: list, native: bool, keep_closed: bool = False,
            frame_rules: bool = True, spills: bool = False, batch: int | None = None) -> tuple:
    """What a replay fed `records` did: the transactions in the order they closed, what it
    kept for the frame rules (every record, without frame_rules), its counts, and its
    resolutions with what each holds (its transactions read back from the Spill file).
    batch: the records handed over `batch` at a time (feed_all), as the audit hands them."""
    replay = Replay(keep_closed=keep_closed)
    replay.keep_frame_record = engine._frame_finding_test() if frame_rules else bool
    replay.transaction_marks = engine.transaction_marks()
    replay.spills = spills
    closed = []

    def on_close(t, res):
        closed.append((t.requester, t.tid, t.attribute_id, t.answered, t.completing_frame,
                       [id(r) for r in t.records], _side(t.requests), _side(t.responses),
                       t.request and t.request["frame"], t.query and dict(t.query),
                       t.components,
                       res.name if res is not None else None))

    replay.on_close = on_close
    feed = replay.intake() if native else replay.feed
    if native:
        assert feed != replay.feed
    if batch is None:
        for rec in records:
            feed(rec, replay.keep_frame_record(rec))
    else:
        feed_all = feed.__self__.feed_all
        for i in range(0, len(records), batch):
            group = records[i:i + batch]
            feed_all(group, [replay.keep_frame_record(rec) for rec in group])
    held = replay._held
    replay.finish()
    kept = [(r["frame"], r["kind"], id(r) if isinstance(r, MadFrame) else r.get("limit"))
            for r in replay.frame_records]
    resolutions = [(name, res.spilled_count, res.marks, res.let_go, res.folded,
                    [_summary(t) for t in (replay.read_back(res) if not keep_closed
                                           else res.transactions)])
                   for name, res in replay.resolutions.items()]
    replay.close_spill()
    return (closed, kept, replay.records, replay.evicted, replay.sa_count, resolutions,
            len(replay.malformed), len(replay.blobs), held, len(replay.done))


def _same(records: list, **kw) -> tuple:
    c, py = _replay(records, True, **kw), _replay(records, False, **kw)
    assert c == py
    return c


@needs_c
def test_the_audit_takes_the_c_intake_unless_told_not_to(monkeypatch):
    replay = Replay(keep_closed=False)
    assert replay.intake() != replay.feed
    replay.linger_seconds = 10.0  # a live stream: feed closes by the clock, per record
    assert replay.intake() == replay.feed
    monkeypatch.setenv("IBPATH_NATIVE_SCAN", "0")
    replay = Replay(keep_closed=False)
    assert replay.intake() == replay.feed


@needs_c
@pytest.mark.parametrize("keep_closed", [False, True], ids=["cli", "library"])
def test_same_transactions_over_the_project_captures_and_the_fuzz_inputs(keep_closed):
    files = project_inputs()
    assert len(files) > 40
    sa = 0
    for path in files:
        closed = _same(_records(path), keep_closed=keep_closed)[0]
        sa += len(closed)
    assert sa > 100


@needs_c
@pytest.mark.parametrize("kind", ["capture1", "capture2", "capture3"])
@pytest.mark.parametrize("encap", ["rocev2", "ib"])
def test_same_transactions_over_the_bench_captures(bench_capture, tmp_path, kind, encap):
    if kind == "capture3":
        path = write_capture3(tmp_path / "c3.pcap", 3000, encap=encap)
    else:
        path = bench_capture(kind, 4000, encap=encap)
    closed = _same(_records(path))[0]
    assert sum(t[3] for t in closed) > (30 if kind == "capture1" else 1000)


@needs_c
@pytest.mark.parametrize("batch", [1, 7, 2048])
def test_same_transactions_fed_a_batch_at_a_time(tmp_path, batch):
    """feed_all, the audit's way in: the C's (records counted once a batch, transactions
    opened in C) against the Python replay fed record by record, on the storm and on the
    project's captures and fuzz inputs."""
    storm = write_capture3(tmp_path / "c3.pcap", 3000, encap="ib")
    closed = 0
    for path in [storm, *project_inputs()]:
        records = _records(path)
        c = _replay(records, True, batch=batch)
        assert c == _replay(records, False) == _replay(records, False, batch=batch)
        closed += len(c[0])
    assert closed > 1000


@needs_c
def test_feed_all_wants_a_keep_for_each_record():
    replay = Replay(keep_closed=False)
    feed_all = replay.intake().__self__.feed_all
    with pytest.raises(ValueError, match="a keep for each record"):
        feed_all([], [True])
    with pytest.raises(ValueError):
        replay.feed_all([], [True])


@needs_c
@pytest.mark.parametrize("linger, max_open", [(2, 8), (1000, 1)], ids=["closed", "evicted"])
def test_same_transactions_when_every_frame_closes_or_evicts_one(monkeypatch, tmp_path,
                                                                  linger, max_open):
    """Tables so small that nearly every new transaction closes an answered one (batches of
    4) or evicts the oldest (_evict_oldest), on the storm and on the captures with RMPP,
    retries and unanswered queries."""
    monkeypatch.setattr(Replay, "LINGER", linger)
    monkeypatch.setattr(Replay, "MAX_OPEN_TRANSACTIONS", max_open)
    monkeypatch.setattr(Replay, "CLOSE_BATCH", 4)
    storm = write_capture3(tmp_path / "c3.pcap", 2000, encap="ib")
    closed = evicted = 0
    for path in [storm, *project_inputs()]:
        got = _same(_records(path))
        closed, evicted = closed + len(got[0]), evicted + got[3]
    assert closed > 900 and (evicted > 900 if max_open == 1 else evicted == 0)


@needs_c
def test_same_transactions_from_the_scapy_engine():
    files = [p for p in project_inputs() if p.suffix in (".pcap", ".pcapng")][:25]
    for path in files:
        _same(_records(path, scapy=True))


@needs_c
def test_same_findings_from_the_audit(monkeypatch, tmp_path):
    storm = write_capture3(tmp_path / "c3.pcap", 3000, encap="ib")
    options = AuditOptions(keep_transactions=False, stream_resolutions=True)
    for path in [storm, *project_inputs()]:
        records = _records(path)
        c = audit_records(str(path), records, options)
        with monkeypatch.context() as m:
            m.setattr(Replay, "intake", lambda self: self.feed)
            py = audit_records(str(path), records, options)
        assert c.findings == py.findings, path
        assert (c.replay.records, c.replay.sa_count) == (py.replay.records, py.replay.sa_count)


def _mad(method: int, tid: int = 9) -> Mad:
    return Mad(base_version=1, mgmt_class=3, class_version=2, method=method, status=0,
               class_specific=0, transaction_id=tid, attribute_id=0x35, attribute_modifier=0,
               method_name="", attribute_name="PathRecord", status_text="")


def _rmpp(rmpp_type: int, flags: int) -> Rmpp:
    return Rmpp(rmpp_version=1, rmpp_type=rmpp_type, r_resp_time=0, rmpp_flags=flags,
                rmpp_status=0, segment_number=1, payload_length=0)


@needs_c
def test_same_steps_for_an_rmpp_answer_with_the_requesters_acks():
    """A GetTable answered in two RMPP segments, the requester's ACKs (the kernel's
    format_ack turns the response bit off: not responses by their method, on the responses'
    side all the same), an ACK and a segment of a transfer never seen from its start, and an
    answer of another attribute's records: what no project capture holds."""
    def frame(n, method, src, dst, rmpp=None, tid=9, **kw):
        return MadFrame(frame=n, time=float(n), kind="sa", src=src, dst=dst,
                        mad=_mad(method, tid), rmpp=rmpp, **kw)

    records = [
        frame(1, 0x12, "a", "sa", _rmpp(0, 0)),
        frame(2, 0x92, "sa", "a", _rmpp(1, 0x3)),
        frame(3, 0x12, "a", "sa", _rmpp(2, 0x1), rmpp_control=True),
        frame(4, 0x92, "sa", "a", _rmpp(1, 0x5), reassembled_from=[2, 4],
              path_records=("pr1", "pr2")),
        frame(5, 0x12, "a", "sa", _rmpp(2, 0x1), rmpp_control=True),
        frame(6, 0x92, "sa", "b", _rmpp(2, 0x1), tid=10, rmpp_control=True),
        frame(7, 0x12, "b", "sa", _rmpp(2, 0x1), tid=11, rmpp_control=True),
        frame(8, 0x92, "sa", "c", _rmpp(1, 0x7), tid=12, sa_records=("sr",)),
        frame(11, 0x92, "sa", "e", _rmpp(1, 0x5), tid=14, path_records=("pr4",)),
        frame(9, 0x92, "sa", "d", tid=13, path_records=()),
        frame(10, 0x92, "sa", "d", tid=13, path_records=("pr3",)),
    ]
    closed = _same(records, frame_rules=False)[0]
    assert [(t[1], t[3], t[4], t[6], [f for f, _ in t[7]]) for t in closed] == [
        (9, True, 4, [(1, id(records[0]))], [2, 3, 4, 5]),
        (11, False, None, [], [7]),
        (12, True, 8, [], [8]),
        (14, False, None, [], [11]),
        (13, True, 10, [], [9, 10])]
    assert closed[0][5] == [id("pr1"), id("pr2")] and closed[4][5] == [id("pr3")]


@needs_c
@pytest.mark.parametrize("linger", [1, 4096], ids=["closed-as-fed", "closed-at-finish"])
def test_same_resolutions_for_queries_with_and_without_a_pkey(monkeypatch, tmp_path, linger):
    """A query that names no P_Key is placed by the P_Key of its answer's first record, or
    0xFFFF answered with none; one that names no SGID or no DGID is placed nowhere."""
    monkeypatch.setattr(Replay, "LINGER", linger)
    monkeypatch.setattr(Replay, "CLOSE_BATCH", 1)
    path = tmp_path / "pkeys.pcapng"
    with CaptureBuilder(str(path)) as b:
        pair = PathRecord(sgid="fe80::1", dgid="fe80::2")
        b.sa_answer(b.sa_query(pair), [], status=0x0200)  # ERR_NO_RECORDS: no P_Key chosen
        b.sa_answer(b.sa_query(pair), [PathRecord(sgid="fe80::1", dgid="fe80::2", pkey=0x8001)])
        b.sa_answer(b.sa_query(PathRecord(sgid="fe80::1", dgid="fe80::3", pkey=0x8002)),
                    [PathRecord(sgid="fe80::1", dgid="fe80::3", pkey=0x8002)])
        b.sa_answer(b.sa_query(PathRecord(sgid="fe80::1")), [pair])
        back = PathRecord(sgid="fe80::2", dgid="fe80::1", pkey=0x8001)  # the return path
        b.sa_answer(b.sa_query(back), [back])
        zero = PathRecord(sgid="::", dgid="fe80::2")  # asks by SGID, and names none
        b.sa_answer(b.sa_query(zero, component_mask=component_mask_for(pair)), [pair])
        for n in range(4, 8):  # later exchanges close the ones before (linger 1)
            b.sa_query(PathRecord(sgid="fe80::1", dgid=f"fe80::{n}"))
    got = _same(_records(path))
    assert [r[0] for r in got[5]][:3] == [("fe80::1", "fe80::2", 0xFFFF),
                                          ("fe80::1", "fe80::2", 0x8001),
                                          ("fe80::1", "fe80::3", 0x8002)]
    assert len(got[5][1][5]) == 2  # the forward query and the return path's
    assert not any("::" in r[0][:2] for r in got[5])


@needs_c
def test_same_summary_of_a_transaction_fed_the_same_frame_twice(monkeypatch):
    """A record fed twice (a library caller's list): Transaction.frames names it once, and
    so does the C summary of it."""
    monkeypatch.setattr(Replay, "LINGER", 1)
    monkeypatch.setattr(Replay, "CLOSE_BATCH", 1)
    path = ROOT / "captures" / "corpus" / "saq-retry.pcapng"
    records = _records(path)
    sa = [r for r in records if getattr(r, "kind", None) == "sa"]
    assert len(sa) >= 3
    # (then another capture's exchanges, which close it as they are fed)
    later = _records(ROOT / "captures" / "corpus" / "conform-proposal.pcapng")
    twice = [sa[0], *sa, sa[-1], *later]
    got = _same(twice, frame_rules=False)
    (first,) = [t for r in got[5] for t in r[5]
                if t[:2] == (sa[0].src, sa[0].mad.transaction_id)]
    assert first[10] >= 3 and first[11].count(sa[0]["frame"]) == 1  # (request_count, frames)


@needs_c
def test_other_records_go_to_feed():
    """A record the C steps do not take reaches Replay.feed whole: a dict, a MadFrame of
    another kind, a umad one, a keep that was not asked."""
    replay = Replay(keep_closed=False)
    fed = []
    replay.feed = lambda rec, keep: fed.append((rec, keep))
    feed = replay.intake()
    mad = Mad(base_version=1, mgmt_class=3, class_version=2, method=1, status=0,
              class_specific=0, transaction_id=7, attribute_id=0x35, attribute_modifier=0,
              method_name="SubnAdmGet", attribute_name="PathRecord", status_text="")
    sa = MadFrame(frame=1, time=0.0, kind="sa", src="a", dst="b", mad=mad)
    others = [({"frame": 1, "kind": "sa"}, False),
              (MadFrame(frame=2, time=0.0, kind="cm", mad=mad), False),
              (MadFrame(frame=3, time=0.0, kind="sa", mad=mad, umad=object()), True),
              (sa, None)]
    for rec, keep in others:
        feed(rec, keep)
    assert fed == others
    assert replay.records == 0 and not replay.transactions
    feed(sa, True)
    assert fed == others and replay.records == 1 and replay.frame_records == [sa]
    (t,) = replay.transactions.values()
    assert (t.requester, t.tid, t.attribute_id, list(t.requests)) == ("a", 7, 0x35, [sa])


@needs_c
@pytest.mark.parametrize("history, held", [(2, 10 ** 9), (10 ** 9, 8), (3, 5)],
                         ids=["let-go", "spilled", "both"])
def test_same_resolutions_when_they_let_go_and_spill(monkeypatch, bench_capture, tmp_path,
                                                     history, held):
    """A resolution past RESOLUTION_HISTORY lets its oldest go (_let_oldest_go, restoring
    from the Spill file first), and past HELD_TRANSACTIONS the held ones are spilled
    (spill_held): the same resolutions, transactions, marks and counts either way."""
    monkeypatch.setattr(Replay, "RESOLUTION_HISTORY", history)
    monkeypatch.setattr(Replay, "HELD_TRANSACTIONS", held)
    monkeypatch.setattr(Replay, "LINGER", 16)
    got = _same(_records(bench_capture("capture2", 3000, encap="ib")), spills=True)
    assert sum(1 for r in got[5] if r[3] is not None) > (10 if history < 100 else -1)
    assert sum(r[1] for r in got[5]) > (0 if held < 100 else -1)
    for path in project_inputs():
        _same(_records(path), spills=True)


@needs_c
def test_the_c_intake_refuses_classes_without_the_slots_it_reads():
    class Loose:
        pass

    native = extension()

    def make(frame=MadFrame, mad=Mad, transaction=Transaction):
        return native.SaIntake(Replay(), frame, mad, transaction, "sa", 0x80, 0x35, FrameList,
                               ClosedTransaction, _components)

    make()
    for bad in ({"frame": Loose}, {"mad": Loose}, {"transaction": Loose}):
        with pytest.raises((ValueError, AttributeError)):
            make(**bad)
