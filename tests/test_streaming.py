"""The replay's streaming of SA transactions (issue 8: memory independent of the capture's
length): answered transactions are closed and judged as the capture goes, and what the
resolutions keep of them is bounded.

Oracles: the same audit with every closed transaction kept (Replay.keep_closed, what the
ladder diagrams use, which closes nothing early when fewer than Replay.LINGER transactions
are open: the audit as it was before streaming); hand-built captures whose findings are known.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ibpath_scapy.audit import report
from ibpath_scapy.audit.html import to_html
from ibpath_scapy.audit.engine import audit_records
from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.audit.replay import ClosedTransaction, Replay, Transaction
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.craft import CaptureBuilder
from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.layers import PathRecord

from conftest import CAPTURES, EXTERNAL, ROOT

sys.path.insert(0, str(ROOT / "bench"))
from corpus import write_capture2  # noqa: E402


def _captures() -> list[Path]:
    files = sorted(CAPTURES.rglob("*.pcap")) + sorted(CAPTURES.rglob("*.pcapng"))
    if EXTERNAL.is_dir():
        files += sorted(p for p in EXTERNAL.iterdir() if p.suffix in (".pcap", ".pcapng"))
    return [f for f in files if f.stat().st_size]


def _report(paths: list[Path], keep: bool) -> tuple[dict, list]:
    audits, _ = audit_paths([str(p) for p in paths], AuditOptions(keep_transactions=keep),
                            quiet=True)
    findings = [f.as_dict() for a in audits for f in a.findings]
    return report.summary(audits), findings


def test_same_report_when_closed_transactions_are_let_go():
    """Every capture of the project and the external ones: the same findings, in the same
    order, and the same summary, whether closed transactions are kept or let go."""
    paths = _captures()
    assert len(paths) > 60
    assert _report(paths, keep=False) == _report(paths, keep=True)


def test_same_ladders_from_the_messages_drawn_when_let_go():
    """The HTML report and the text ladders from the messages drawn as each transaction is
    let go (Replay.arrows, what the CLI does) equal those drawn from every transaction kept."""
    paths = [str(p) for p in _captures()]
    kept, _ = audit_paths(paths, AuditOptions(keep_transactions=True), quiet=True)
    drawn, _ = audit_paths(paths, AuditOptions(keep_transactions=False, ladder_arrows=True),
                           quiet=True)
    assert any(a.replay.unplaced_arrows for a in drawn)
    assert all(a.replay.done == [] for a in drawn)
    assert to_html(drawn) == to_html(kept)
    assert report.to_text(drawn, ladder=True) == report.to_text(kept, ladder=True)


@pytest.fixture(scope="module")
def storm(tmp_path_factory) -> Path:
    """Capture 2 of the bench: 364 pairs, each resolved again every ~850 frames, unique TIDs."""
    return write_capture2(tmp_path_factory.mktemp("storm") / "c2.pcap", 6000)


def _audit(path: Path, keep: bool = False):
    return audit_records(str(path), decode_file(str(path)), AuditOptions(keep_transactions=keep))


def test_storm_closes_and_judges_transactions_as_it_goes(storm, monkeypatch):
    """With a short linger the open table stays small and nothing but the resolutions'
    summaries is kept, yet every transaction is judged and counted as with everything kept."""
    whole = _audit(storm, keep=True)
    monkeypatch.setattr(Replay, "LINGER", 16)
    most_open = [0]
    feed = Replay.feed

    def watched(self, rec, keep=None):
        feed(self, rec, keep)
        most_open[0] = max(most_open[0], len(self.transactions))

    monkeypatch.setattr(Replay, "feed", watched)
    streamed = _audit(storm)
    assert most_open[0] <= 16 + 2  # the linger, the one opened last and one unanswered
    assert streamed.replay.done == []
    kept = [t for r in streamed.replay.resolutions.values() for t in r.transactions]
    assert kept and all(isinstance(t, ClosedTransaction) for t in kept)
    assert streamed.replay.sa_count == whole.replay.sa_count == len(kept) > 2000
    assert [f.as_dict() for f in streamed.findings] == [f.as_dict() for f in whole.findings]


def test_resolution_history_is_bounded_and_says_so(storm, monkeypatch):
    """A resolution keeps its last RESOLUTION_HISTORY transactions; letting older ones go is
    a DECODE-LIMIT warning naming the resolution, on the frames of the last one let go."""
    monkeypatch.setattr(Replay, "RESOLUTION_HISTORY", 3)
    fa = _audit(storm)
    for res in fa.replay.resolutions.values():
        assert len(res.transactions) <= 3
    limits = [f for f in fa.findings if f.rule == "DECODE-LIMIT"]
    over = [r for r in fa.replay.resolutions.values() if r.let_go]
    assert over and len(limits) == len(over)
    res = over[0]
    f = next(f for f in limits if res.name in f.message)
    assert f"its {res.let_go.transactions} oldest SA transactions were let go" in f.message
    assert list(f.frames) == res.let_go.last_frames
    assert res.transactions[0].first_frame > res.let_go.last_frames[0]


def _storm_audit(path: Path, keep: bool):
    options = AuditOptions(keep_transactions=keep, ladder_arrows=not keep)
    return audit_records(str(path), decode_file(str(path)), options)


def test_long_resolution_ladder_is_bounded_and_says_so(storm, monkeypatch):
    """A ladder draws what its resolution keeps: the transactions let go (RESOLUTION_HISTORY)
    leave with their arrows, the replay keeps no arrow of them, and the ladder says how many
    transactions, messages and frames it does not draw, in the text ladder and the HTML page
    alike; the same whether closed transactions are kept whole or let go; findings unchanged."""
    from ibpath_scapy.audit.ladder import ladders, let_go_note

    want = [f.as_dict() for f in _audit(storm, keep=True).findings]
    monkeypatch.setattr(Replay, "RESOLUTION_HISTORY", 3)
    kept, drawn = _storm_audit(storm, keep=True), _storm_audit(storm, keep=False)
    assert [f.as_dict() for f in drawn.findings] == [f.as_dict() for f in kept.findings]
    assert [f.as_dict() for f in drawn.findings if f.rule != "DECODE-LIMIT"] == \
        [f for f in want if f["rule"] != "DECODE-LIMIT"]
    replay = drawn.replay
    assert replay.unplaced_arrows == []  # every transaction of the storm has its resolution
    most = max(len(t.frames) for r in replay.resolutions.values() for t in r.transactions)
    over = 0
    for lad in ladders(drawn):
        assert lad.name is not None  # nothing left over for a ladder of no resolution
        res = lad.resolution
        assert len(lad.arrows) <= 3 * most
        assert {a.frame for a in lad.arrows} == {f for t in res.transactions for f in t.frames}
        if res.let_go:
            over += 1
            g = lad.let_go
            assert g is res.let_go and g.transactions > 0
            assert g.first_frame <= g.last_frames[0] < lad.arrows[0].frame
            note = let_go_note(lad)
            assert note.startswith(f"{g.transactions} earlier SA transaction(s) of this resolution"
                                   f" ({g.messages} message(s), frames {g.first_frame}-"
                                   f"{g.last_frames[-1]}) not drawn")
            assert note.endswith("it keeps its last 3 (DECODE-LIMIT)")
            # its DECODE-LIMIT is in its ladder, resting on no drawn message
            limit = [f for f in lad.findings if f.rule == "DECODE-LIMIT"]
            assert len(limit) == 1 and lad.anchor[lad.findings.index(limit[0])] is None
        else:
            assert lad.let_go is None
    assert over > 300
    sent = sum((r.let_go.messages if r.let_go else 0) + sum(len(t.frames) for t in r.transactions)
               for r in replay.resolutions.values())
    assert sent == 6000  # every frame either drawn or counted as not drawn
    text = report.to_text([drawn], ladder=True)
    assert text == report.to_text([kept], ladder=True)
    assert text.count(" earlier SA transaction(s) of this resolution (") == over
    assert "-- not tied to a resolution" in text  # the DECODE-LIMIT findings are listed there
    page = to_html([drawn])
    assert page == to_html([kept])
    assert page.count('<p class="note let-go" data-transactions=') == over


def test_closed_transaction_reads_like_the_transaction(storm):
    """What a resolution keeps of a closed transaction: every value the resolution rules read,
    equal to the transaction's own."""
    whole = _audit(storm, keep=True)
    ts = [t for t in whole.replay.done if t.query]
    assert len(ts) > 2000
    for t in ts[:500] + [t for t in ts if not t.answered]:
        c = ClosedTransaction(t)
        for name in ("requester", "tid", "attribute_id", "answered", "completing_frame",
                     "query", "status", "component_mask", "frames", "first_frame"):
            assert getattr(c, name) == getattr(t, name), name
        assert list(c.records) == t.records
        assert set(c.components) == set(t.components)
        assert c.asks_reversible() == t.asks_reversible()


def _pair(n: int) -> PathRecord:
    return PathRecord(sgid="fe80::1", dgid=f"fe80::{n:x}")


def test_retry_and_bad_answer_judged_when_closed_early(tmp_path, monkeypatch):
    """Transaction findings do not depend on when a transaction is closed: a retried query
    and an answer contradicting its query, closed early by a linger of 1, give the same
    SAQ-RETRY and SAR-MISMATCH as at the end of the capture."""
    path = tmp_path / "early.pcapng"
    with CaptureBuilder(str(path)) as b:
        q = b.sa_query(_pair(2))
        b.sa_query(_pair(2), retransmit_of=q)  # frame 2: a retry, same TID
        b.sa_answer(q, [PathRecord(sgid="fe80::1", dgid="fe80::9")])  # wrong DGID
        for n in range(3, 8):  # later, unrelated exchanges push it out
            b.sa_answer(b.sa_query(_pair(n)), [_pair(n)])
    want = [f.as_dict() for f in _audit(path, keep=True).findings]
    monkeypatch.setattr(Replay, "LINGER", 1)
    got = [f.as_dict() for f in _audit(path).findings]
    assert got == want
    assert {f["rule"] for f in got} >= {"SAQ-RETRY", "SAR-MISMATCH"}


def test_retry_after_the_transaction_closed_starts_a_new_one(tmp_path, monkeypatch):
    """The documented limit of streaming: a frame for a transaction closed LINGER newer
    transactions ago opens a new transaction (here: a late retry is a query never answered)."""
    path = tmp_path / "late.pcapng"
    with CaptureBuilder(str(path)) as b:
        q = b.sa_query(_pair(2))
        b.sa_answer(q, [_pair(2)])
        for n in range(3, 6):
            b.sa_answer(b.sa_query(_pair(n)), [_pair(n)])
        late = b.sa_query(_pair(2), retransmit_of=q)
    rules = {f.rule: f for f in _audit(path, keep=True).findings}
    assert "SAQ-RETRY" in rules and "SAQ-NO-RESPONSE" not in rules
    monkeypatch.setattr(Replay, "LINGER", 1)
    rules = {f.rule: f for f in _audit(path).findings}
    assert "SAQ-RETRY" not in rules
    assert rules["SAQ-NO-RESPONSE"].frames == (late.frame,)


def test_transaction_seal_fixes_request_and_query():
    t = Transaction("a", 1)
    t.seal()
    assert t.request is None and t.query is None and t.components == frozenset()


def test_batches_keep_order_and_the_error_after_the_records_before_it():
    from ibpath_scapy.capture.batch import batches

    def source(n, fail):
        for i in range(n):
            yield {"frame": i}
        if fail:
            raise ValueError("damaged")

    for n in (0, 1, 5, 6, 13):
        assert [r["frame"] for b in batches(source(n, False), 3) for r in b] == list(range(n))
        got = []
        with pytest.raises(ValueError, match="damaged"):
            for b in batches(source(n, True), 3):
                got += [r["frame"] for r in b]
        assert got == list(range(n))
    assert [len(b) for b in batches(source(7, False), 3)] == [3, 3, 1]
    assert [len(b) for b in batches(source(6, False), 3)] == [3, 3]
