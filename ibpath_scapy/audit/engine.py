"""Run the catalogue over captures: decode (or read decoded records), replay, apply rules."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator

from ..capture.batch import batches
from ..facts.records import Fact, MadFrame
from ..native import extension
from .model import FAMILIES, RULES, AuditOptions, Finding
from .process import frames_by_resolution, process_view
from ..layers.mad import ATTR_PATH_RECORD
from .replay import Replay
from .rules.frame import FACT_READS, RECORD_READS, packet_rule_hits


@dataclass
class FileAudit:
    path: str
    findings: list[Finding] = field(default_factory=list)
    replay: Replay | None = None
    frames: int = 0
    error: str | None = None  # the file could not be read to its end
    seconds: float = 0.0  # how long its audit took (the JUnit report's time)
    # with AuditOptions.tables (the Parquet tables, audit/tables.py): where the capture says
    # it was made (pcapio.Origin, None when not read) and {frame: time} of the first frame
    # of each finding, read where the file is (a worker of --jobs or --dask)
    origin: object = None
    times: dict = field(default_factory=dict)


def _finding(rule_id: str, r, hit, path: str, resolution: str | None) -> Finding:
    frames, message = hit[0], hit[1]
    severity = hit[2] if len(hit) > 2 else r.severity
    return Finding(rule_id, severity, path, tuple(sorted(set(int(f) for f in frames))),
                   message, resolution)


def family_checks(family: str) -> list[tuple[str, object, Callable]]:
    """(rule ID, rule, check) of every rule with a check in `family`, in ID order: looked up
    once per audit, not once per subject."""
    return [(rid, r, r.checks[family]) for rid, r in sorted(RULES.items()) if family in r.checks]


def _findings(checks: list, subject, path: str, resolution: str | None = None):
    for rule_id, r, check in checks:
        for hit in check(subject):
            yield _finding(rule_id, r, hit, path, resolution)


def _frame_finding_test() -> Callable[[dict], bool]:
    """A test whether any frame check fires on a record (run_rules runs the checks again on
    the records kept, so only these need keeping)."""
    frame_checks = [r.checks["frame"] for r in RULES.values() if "frame" in r.checks]
    # the packet rules' checks all read packet_rule_hits(rec): one call answers for them all
    checks = [c for c in frame_checks if not getattr(c, "packet_rule", False)]
    packet_rules = len(checks) < len(frame_checks)
    # a check with `only_if` keys or `only_kinds` (rules/capture.py, rules/frame.py) is asked
    # only about records with one of those keys or of one of those kinds
    always = [c for c in checks if not hasattr(c, "only_if") and not hasattr(c, "only_kinds")]
    guarded = [c for c in checks if c not in always]
    guard_keys = tuple(sorted({k for c in guarded for k in getattr(c, "only_if", ())}))
    guard_kinds = frozenset(k for c in guarded for k in getattr(c, "only_kinds", ()))
    # per fact class and kind: (whether the kind asks for the guarded checks, the guard keys
    # the class declares): a MadFrame of an SA storm is asked about two keys, not all
    plans: dict[tuple, tuple] = {}

    def has_finding(rec) -> bool:
        if packet_rules and packet_rule_hits(rec):
            return True
        for check in always:
            for _ in check(rec):
                return True
        if isinstance(rec, Fact):  # a decoder's record: its fields are attributes
            plan = plans.get((rec.__class__, rec.kind))
            if plan is None:
                plan = plans[(rec.__class__, rec.kind)] = (
                    rec.kind in guard_kinds, tuple(k for k in guard_keys if k in rec.KEYSET))
            ask = plan[0] or any(getattr(rec, k) is not None for k in plan[1])
        else:
            ask = rec.get("kind") in guard_kinds or any(k in rec for k in guard_keys)
        if ask:
            for check in guarded:
                for _ in check(rec):
                    return True
        return False

    # (what frame_finding_batch's C twin needs to know of it)
    has_finding.plan = (packet_rules, bool(always), guard_kinds, guard_keys)
    return has_finding


def frame_finding_batch(has_finding: Callable[[dict], bool]) -> Callable[[list], list[bool]]:
    """has_finding of each record of a batch: where has_finding is a _frame_finding_test, the
    extension is built and every frame check is a packet rule's or guarded, its C twin
    (native/_frametest.c, FrameTest), which asks has_finding about any record but a plain
    SA or other MadFrame; else has_finding record by record."""
    native = extension()
    plan = getattr(has_finding, "plan", None)  # (None: another test, python_floor's)
    if native is None or plan is None or plan[1] or not plan[0]:
        return lambda group: [has_finding(rec) for rec in group]
    guard_kinds, guard_keys = plan[2:]
    return native.FrameTest(MadFrame, "sa", FACT_READS, RECORD_READS, frozenset(guard_kinds),
                            tuple(k for k in guard_keys if k in MadFrame.KEYSET), has_finding,
                            packet_rule_hits)


def resolution_needs(checks: list, marks: tuple) -> list[tuple]:
    """(check entry, whether it needs a hand-over, its mark bit or 0) of each resolution
    check: a check with `only_with_handovers` finds nothing in a resolution without a blob
    or LS response, one with `only_if_transaction` nothing where none of its transactions
    passed that test (the bit of the test in `marks`, Replay.transaction_marks; a test not
    among them is not asked: the check judges every resolution)."""
    out = []
    for entry in checks:
        check = entry[2]
        test = getattr(check, "only_if_transaction", None)
        mark = 1 << marks.index(test) if test is not None and test in marks else 0
        out.append((entry, bool(getattr(check, "only_with_handovers", False)), mark))
    return out


def transaction_marks() -> tuple:
    """The only_if_transaction tests of the resolution checks (Replay.transaction_marks)."""
    tests = []
    for _, _, check in family_checks("resolution"):
        test = getattr(check, "only_if_transaction", None)
        if test is not None and test not in tests:
            tests.append(test)
    return tuple(tests)


def transaction_judge(path: str, out: list[Finding]) -> Callable:
    """Replay.on_close: the transaction rules over each SA transaction as it is closed, the
    findings (named by the transaction's resolution) appended to `out`."""
    tx_checks = family_checks("transaction")

    def judge(t, res) -> None:
        if t.attribute_id != ATTR_PATH_RECORD:
            return
        # _findings, without a generator around the checks' (one per transaction of a storm);
        # a transaction check returns its hits, a generator or a list (() when none: called
        # nine times per transaction of a storm, it makes no generator to find nothing)
        for rule_id, r, check in tx_checks:
            hits = check(t)
            if hits:
                for hit in hits:
                    out.append(_finding(rule_id, r, hit, path,
                                        res.name if res is not None else None))

    return judge


def run_rules(path: str, replay: Replay, options: AuditOptions,
              transaction_findings: Iterable[Finding] = ()) -> Iterator[Finding]:
    """Every registered check over what the replay collected; the transaction rules' findings
    come from transaction_judge, given here."""
    checks = {family: family_checks(family) for family in FAMILIES}
    # findings are grouped per resolution in reports: name the one each message belongs to
    by_frame: dict[int, str] = {}
    for res in replay.resolutions.values():
        for recs in (res.blobs, res.ls_requests, res.ls_responses, res.cm_reqs):
            for rec in recs:
                by_frame[rec["frame"]] = res.name
    # frame checks run once per kept record, building a Finding only on a hit
    for rec in replay.frame_records:
        yield from _findings(checks["frame"], rec, path)
    # the transaction rules judged each SA transaction as the replay closed it
    yield from transaction_findings
    # Blob rules judge both kinds of blob: rdma_set_option optvals (blob frames) and the
    # PATH_RECORD attributes of LS RESOLVE responses the kernel reads (no RDMA_NL_LS_F_ERR),
    # in frame order; every finding names the frame of its own message.
    ls_blobs = [r for e in replay.ls.values() for r in e["responses"]
                if "blob_records" in r and not r.get("ls", {}).get("error")]
    for b in sorted(replay.blobs + ls_blobs, key=lambda r: r["frame"]):
        yield from _findings(checks["blob"], (b, options), path, by_frame.get(b["frame"]))
    # each resolution is asked of the checks that can find something in it (needs); its
    # transactions come back from the replay's Spill file only for those, or for a report
    # that draws them, and go (folded into its counts) once judged where none does
    stream = options.stream_resolutions and not options.keep_transactions
    needs = resolution_needs(checks["resolution"], replay.transaction_marks)
    # what a resolution without hand-overs and marks is asked (an SA storm's, every one)
    unmarked = [c for c, handovers, mark in needs if not handovers and not mark]
    for res in replay.resolutions.values():
        if res.marks or res.blobs or res.ls_responses:
            handed = bool(res.blobs or res.ls_responses)
            asked = [c for c, handovers, mark in needs
                     if (handed or not handovers) and (not mark or res.marks & mark)]
        else:
            asked = unmarked
        if asked or not stream:
            replay.restore(res)
        if asked:
            yield from _findings(asked, (res, options), path, res.name)
        if stream:
            replay.let_judged_go(res)
    for c in replay.cm_reqs:
        yield from _findings(checks["cm"], (c, replay, options), path, by_frame.get(c["frame"]))
    if replay.process:  # ibpath record's: a cm_id's findings are its resolution's
        owner = frames_by_resolution(process_view(replay), by_frame)
        for f in _findings(checks["process"], (replay, options), path):
            name = next((owner[fr] for fr in f.frames if fr in owner), None)
            yield replace(f, resolution=name) if name else f
    else:
        yield from _findings(checks["process"], (replay, options), path)
    for entry in replay.ls.values():
        first = entry["request"] or (entry["responses"][0] if entry["responses"] else None)
        name = by_frame.get(first["frame"]) if first else None
        yield from _findings(checks["ls"], (entry, options), path, name)


# a live stream's transactions are judged once the capture is this far past their answer:
# retries and repeated answers of a real exchange come within the SA query's timeouts
LIVE_LINGER_SECONDS = 10.0


def audit_records(path: str, records: Iterable[dict], options: AuditOptions,
                  on_frame: Callable[[int], None] | None = None,
                  on_finding: Callable[[Finding], None] | None = None,
                  batch: int = 2048) -> FileAudit:
    """Audit one file's decoded records (from either engine): an iterable of them, or an
    object whose record_batches() yields them in lists (audit/run.py's). on_finding, when
    given, is called with each frame finding and each transaction finding as soon as it is known (a
    live stream: its transactions are then also closed LIVE_LINGER_SECONDS of capture time
    after their answer); the FileAudit has them all, in the usual order, at the end. batch:
    records fed at a time (1 for a live stream, so that nothing waits for more frames)."""
    fa = FileAudit(path)
    replay = Replay(keep_closed=options.keep_transactions)
    replay.arrows = options.ladder_arrows
    replay.keep_frame_record = _frame_finding_test()
    judged: list[Finding] = []
    replay.on_close = transaction_judge(path, judged)
    replay.transaction_marks = transaction_marks()
    replay.spills = options.stream_resolutions and not options.keep_transactions
    has_finding = replay.keep_frame_record
    finding_tests = frame_finding_batch(has_finding)
    told = 0
    frame_checks = []
    if on_finding is not None:
        replay.linger_seconds = LIVE_LINGER_SECONDS
        frame_checks = family_checks("frame")
    feed = replay.intake()
    # (a source of record lists, audit/run.py's, hands them over as they were decoded)
    groups = (records.record_batches() if hasattr(records, "record_batches")
              else batches(records, batch))
    # the same steps a batch at a time, where no finding is told as it is made: the feed_all
    # of what feed is bound to (SaIntake's, or Replay's); another feed, record by record
    feed_all = getattr(getattr(feed, "__self__", None), "feed_all", None)
    for group in groups:
        # the frame checks of a whole batch, then its replay (ibpath_scapy.capture.batch)
        keep = finding_tests(group)
        if on_finding is None and feed_all is not None:
            feed_all(group, keep)
        else:
            for rec, k in zip(group, keep):
                feed(rec, k)
                if k and on_finding is not None:
                    for f in _findings(frame_checks, rec, path):
                        on_finding(f)
        if on_finding is not None:
            for f in judged[told:]:
                on_finding(f)
            told = len(judged)
        if on_frame:
            on_frame(group[-1]["frame"])
    replay.finish()
    fa.replay = replay
    fa.findings = list(run_rules(path, replay, options, judged))
    if not replay.arrows:  # every resolution was brought back or folded by run_rules
        replay.close_spill()
    return fa
