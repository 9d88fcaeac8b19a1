"""Issue 45: an SA storm of many distinct (source, destination) pairs audited in bounded
memory. The replay holds at most Replay.HELD_TRANSACTIONS closed transactions in memory and
writes the others to its Spill file (audit/spill.py); the resolution rules read a resolution's
transactions back only where one of them can find something (engine.resolution_needs); the
CLI folds each resolution into its counts once judged, or, to draw ladders, leaves its
transactions in the Spill file for the reports to read back one ladder at a time
(AuditOptions.stream_resolutions, ladder.iter_ladders, report.write_text, html.write_html).

Oracles: the same audit with nothing spilled (a cap larger than the capture), and with every
resolution check asked of every resolution; the library's audit that keeps every closed
transaction whole (keep_transactions)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from ibpath_scapy.audit import engine, report
from ibpath_scapy.audit.html import to_html
from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.audit.replay import ClosedTransaction, Replay, Resolution, Tally
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.audit.spill import CHUNK_ENTRIES, Spill
from ibpath_scapy.audit.tables import resolution_rows
from ibpath_scapy.facts.records import PathRecord
from ibpath_scapy.native import extension

from conftest import CAPTURES, ROOT

sys.path.insert(0, str(ROOT / "bench"))
from corpus import write_capture2, write_capture3  # noqa: E402

NEVER = 10 ** 9
needs_rows = pytest.mark.skipif(
    extension() is None or not hasattr(extension(), "RowsText"),
    reason="the package was built without its C extension: the spill's chunks are pickle's")


@pytest.fixture(scope="module")
def storm3(tmp_path_factory) -> Path:
    """Bench capture 3: every query a pair of its own (3,000 sources x 97 destinations)."""
    return write_capture3(tmp_path_factory.mktemp("storm3") / "c3.pcap", 5000)


@pytest.fixture(scope="module")
def storm2(tmp_path_factory) -> Path:
    """Bench capture 2: 364 pairs asked again and again."""
    return write_capture2(tmp_path_factory.mktemp("storm2") / "c2.pcap", 6000)


def _corpus() -> list[str]:
    files = sorted(CAPTURES.rglob("*.pcap")) + sorted(CAPTURES.rglob("*.pcapng"))
    return [str(f) for f in files if f.stat().st_size]


def _cli_options(ladders: bool = False) -> AuditOptions:
    """What `ibpath audit` asks (cli/audit.py)."""
    return AuditOptions(keep_transactions=False, ladder_arrows=ladders,
                        stream_resolutions=True)


def _reports(paths: list[str], held: int, monkeypatch, ladders: bool = False,
             every_check: bool = False):
    monkeypatch.setattr(Replay, "HELD_TRANSACTIONS", held)
    spills = []
    spill_held = Replay.spill_held

    def counted(self):
        spill_held(self)
        spills.append(self.spill.chunks)

    monkeypatch.setattr(Replay, "spill_held", counted)
    if every_check:
        needs = engine.resolution_needs
        monkeypatch.setattr(engine, "resolution_needs",
                            lambda checks, marks: [(c, False, 0) for c, _, _ in needs(checks, marks)])
    audits, _ = audit_paths(paths, _cli_options(ladders), quiet=True)
    out = {"json": report.to_json(audits), "text": report.to_text(audits, ladder=ladders),
           "rows": list(resolution_rows(audits, "all"))}
    if ladders:
        out["html"] = to_html(audits)
    monkeypatch.undo()
    return out, spills, audits


def test_storm_spilled_gives_the_same_reports(storm3, monkeypatch):
    """Capture 3 with at most 16 transactions held: the transactions go to the Spill file
    many times over, and the JSON and text reports and the resolutions table are those of
    the audit that spilled nothing."""
    whole, none, _ = _reports([str(storm3)], NEVER, monkeypatch)
    spilled, spills, audits = _reports([str(storm3)], 16, monkeypatch)
    assert none == [] and len(spills) > 50
    assert spilled == whole
    replay = audits[0].replay
    assert len(replay.resolutions) > 1000
    assert replay.spill is None  # closed once every resolution was judged
    for res in replay.resolutions.values():  # folded: counts only
        assert res.transactions == () and not res.spilled and res.folded.transactions >= 1


def test_repeated_pairs_spilled_past_their_history(storm2, monkeypatch):
    """Capture 2's pairs come back hundreds of times: with a short RESOLUTION_HISTORY and a
    small cap, a spilled resolution that passes its history is brought back to let its
    oldest go; findings (DECODE-LIMIT included), text, ladders, HTML and the table are
    those of the audit that spilled nothing."""
    monkeypatch.setattr(Replay, "RESOLUTION_HISTORY", 5)
    for ladders in (False, True):
        whole, _, _ = _reports([str(storm2)], NEVER, monkeypatch, ladders)
        monkeypatch.setattr(Replay, "RESOLUTION_HISTORY", 5)
        spilled, spills, _ = _reports([str(storm2)], 7, monkeypatch, ladders)
        monkeypatch.setattr(Replay, "RESOLUTION_HISTORY", 5)
        assert spills and spilled == whole
        assert '"DECODE-LIMIT"' in whole["json"]


def test_corpus_spilled_and_every_check_asked(monkeypatch):
    """The project's captures, one closed transaction held at a time: the same reports as
    with nothing spilled, and as with every resolution check asked of every resolution
    (what engine.resolution_needs leaves out finds nothing)."""
    paths = _corpus()
    assert len(paths) > 40
    for ladders in (False, True):
        whole, _, _ = _reports(paths, NEVER, monkeypatch, ladders)
        spilled, spills, _ = _reports(paths, 1, monkeypatch, ladders)
        asked, _, _ = _reports(paths, 1, monkeypatch, ladders, every_check=True)
        assert spills
        assert spilled == whole == asked
    kept, _ = audit_paths(paths, AuditOptions(keep_transactions=True), quiet=True)
    assert report.to_json(kept) == whole["json"]


def test_closed_transaction_row_round_trip(storm2):
    """ClosedTransaction.row and from_row: every value the rules and the ladder read comes
    back equal, PathRecords as PathRecord facts."""
    options = AuditOptions(keep_transactions=False, ladder_arrows=True)  # kept in memory
    audits, _ = audit_paths([str(storm2)], options, quiet=True)
    ts = [t for r in audits[0].replay.resolutions.values() for t in r.transactions]
    assert len(ts) > 1000
    for t in ts:
        c = ClosedTransaction.from_row(t.row())
        for name in ClosedTransaction.__slots__:
            assert getattr(c, name) == getattr(t, name), name
        assert c.frames == t.frames and c.asks_reversible() == t.asks_reversible()
        assert type(c.query) is PathRecord and all(type(r) is PathRecord for r in c.records)


def _closed(path: Path) -> list:
    """The closed transactions a CLI replay of path holds (nothing spilled), as the C
    intake summarised them."""
    from ibpath_scapy.engines.fast import decode_file_fast

    replay = Replay(keep_closed=False)
    replay.transaction_marks = engine.transaction_marks()
    feed = replay.intake()
    for rec in decode_file_fast(str(path)):
        feed(rec, False)
    replay.finish()
    return [t for r in replay.resolutions.values() for t in r.transactions]


def _same(a, b) -> bool:
    """Equal, and of the same types all the way down (True == 1, but not here)."""
    if type(a) is not type(b):
        return False
    if type(a) in (tuple, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _writer():
    from ibpath_scapy.audit.spill import OBJECTS, ROWS, NotPlain, pickled

    return extension().RowsText(ClosedTransaction, PathRecord, PathRecord._INIT, NotPlain,
                                (ROWS, OBJECTS), pickled)


def _python_chunk(entries) -> bytes:
    """The chunk Replay._spill has Spill.write_chunk pickle without the C writer."""
    import pickle

    from ibpath_scapy.audit.spill import OBJECTS, ROWS, NotPlain, pickled

    chunk = []
    for previous, ts in entries:
        try:
            chunk.append((ROWS, previous, [t.row() for t in ts]))
        except NotPlain:
            chunk.append((OBJECTS, previous, pickled(ts)))
    return pickle.dumps(chunk, pickle.HIGHEST_PROTOCOL)


def _read_alike(text: bytes, want: bytes) -> bool:
    """pickle reads text as it reads want, pickletools finds nothing wrong in it (its opcodes,
    its memo: every fetch of something memoized before), and it ends where its STOP is."""
    import pickle
    import pickletools

    pickletools.dis(text, io.StringIO())
    return _same(pickle.loads(text), pickle.loads(want))


@needs_rows
@pytest.mark.parametrize("storm", ["storm2", "storm3"])
def test_chunks_written_in_c_read_as_the_python_ones(storm, request):
    """native/_rows.c against the Python chunks (ClosedTransaction.row, pickled): pickle
    reads the same values of the same types, over the storms and every capture of the
    project, in chunks of 1 to CHUNK_ENTRIES entries, references past 64 bits included."""
    import random

    ts = _closed(request.getfixturevalue(storm))
    for path in _corpus():
        ts += _closed(Path(path))
    assert len(ts) > 2000 and any(len(t.records) > 1 for t in ts)
    unasked = ClosedTransaction.from_row(ts[0].row())
    unasked.query = None  # (no resolution holds one: it names no pair)
    ts.append(unasked)
    assert any(not t.records for t in ts)
    rnd = random.Random(45)
    write = _writer()
    i = 0
    while i < len(ts):
        entries = []
        for _ in range(rnd.randint(1, CHUNK_ENTRIES)):
            n = rnd.randint(1, 3)
            entries.append((rnd.choice([0, 1, 255, 2 ** 31, 2 ** 40 + 7, 2 ** 63, 2 ** 70 + 3]),
                            ts[i:i + n]))
            i += n
        text = write(entries)
        assert text is not None and _read_alike(text, _python_chunk(entries))


@needs_rows
def test_chunks_written_in_c_go_as_row_and_pickle_go(storm2):
    """A query or a record that is not a PathRecord fact: its entry's transactions pickled
    as they are, as row()'s NotPlain has Replay._spill do, the entries around it as rows
    (what the entry memoized before it was found taken back); a transaction of another
    class is asked for its own row(); a value of a type written by no opcode here: None, the
    chunk left to pickle."""
    import enum
    import pickle

    from ibpath_scapy.facts.records import Rmpp

    write = _writer()
    t = next(t for t in _closed(storm2) if t.query is not None and t.records)
    odd = Rmpp(rmpp_version=1, rmpp_type=1, r_resp_time=0, rmpp_flags=0, rmpp_status=0,
               segment_number=1, payload_length=0)
    for field, value in (("query", odd), ("records", (t.records[0], odd))):
        bad = ClosedTransaction.from_row(t.row())
        setattr(bad, field, value)
        entries = [(2, [t, bad]), (1, [t]), (3, [t])]
        text = write(entries)
        assert _read_alike(text, _python_chunk(entries))
        kinds = [kind for kind, _, _ in pickle.loads(text)]
        assert kinds == [b"p", b"r", b"r"]

    class Other:
        def __init__(self, row):
            self._row = row

        def row(self):
            return self._row

    many = tuple(f"s{k}" for k in range(1500))  # more than the memo keeps
    plain = (None, True, False, 0, -1, 255, 256, 65535, 65536, -2 ** 31, 2 ** 31, -2 ** 63 - 1,
             2 ** 64, 0.25, "é" * 300, b"\0" * 300, (), (1,), (1, 2), (1, 2, 3), [], [()],
             frozenset(), frozenset({"a", "b"}), many, many)
    entries = [(0, [Other(plain), t, Other(plain)])]
    assert _read_alike(write(entries), _python_chunk(entries))

    class Code(enum.IntEnum):
        A = 1

    for unwritten in (Code.A, "\ud800", [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]):
        assert write([(0, [t]), (0, [Other((unwritten,))])]) is None
    assert write([(2 ** 2100, [t])]) is None  # (an int of LONG4)
    entries = [(2 ** 300, [t])]  # (of LONG1)
    assert _read_alike(write(entries), _python_chunk(entries))
    with pytest.raises(TypeError):
        write([(0, [t], "more")])
    with pytest.raises(AttributeError):
        extension().RowsText(ClosedTransaction, PathRecord, ("no_such_field",), Exception,
                             (b"r", b"p"), pickle.dumps)
    with pytest.raises(ValueError):  # a method, not a slot
        extension().RowsText(ClosedTransaction, PathRecord, ("get",), Exception,
                             (b"r", b"p"), pickle.dumps)
    with pytest.raises(TypeError):
        extension().RowsText(ClosedTransaction, PathRecord, PathRecord._INIT, Exception,
                             ("r", "p"), pickle.dumps)


def test_a_replay_with_its_c_writer_crosses_to_another_process(storm3, monkeypatch):
    """The replay of an audit that spilled with the C writer of its chunks pickles (what
    --jobs and --dask hand back: audit/run.py _portable), without it, and spills again with
    row() and pickle."""
    import pickle

    from ibpath_scapy.engines.fast import decode_file_fast

    from ibpath_scapy.audit.run import _portable

    monkeypatch.setattr(Replay, "HELD_TRANSACTIONS", 100)
    options = _cli_options(ladders=True)  # (so that the resolutions keep their transactions)
    fa = engine.audit_records(str(storm3), list(decode_file_fast(str(storm3))), options)
    assert fa.replay._text is not None or extension() is None
    back = pickle.loads(pickle.dumps(_portable(fa, options).replay))
    assert back._text is None and len(back.resolutions) == len(fa.replay.resolutions)
    res = next(r for r in back.resolutions.values() if r.transactions)
    back._spill([res])
    assert back.read_back(res) and back.spill is not None
    back.close_spill()


def test_spill_chunks_chain_per_resolution():
    """Chunks of several resolutions interleaved in one file come back per resolution,
    oldest first; a chunk of transactions that make no rows goes as they are."""
    spill = Spill()
    refs = {"a": 0, "b": 0}
    want = {"a": [], "b": []}
    for i in range(40):
        key = "ab"[i % 3 == 0]
        rows = [(key, i, b"\0" * i, None, (1, 2))]
        refs[key], = spill.write_chunk([(refs[key], rows, None)])
        want[key].append(rows)
    odd = [Resolution("x", "y", 1)]  # no row: pickled as it is
    refs["c"], = spill.write_chunk([(0, None, odd)])
    for key in "ab":
        assert [items for kind, items in spill.read(refs[key])] == want[key]
    assert spill.read(refs["c"]) == [(b"p", odd)]
    spill.close()


@pytest.mark.parametrize("cache", [4096, 20, 1], ids=["cached", "evicting", "one-chunk"])
def test_spill_entries_in_chunks_read_back_in_any_order(monkeypatch, cache):
    """Resolutions spilled together share chunks of CHUNK_ENTRIES; each comes back whole,
    oldest entry first, read in any order, however few decoded chunks are kept."""
    import random

    from ibpath_scapy.audit import spill as spill_module

    monkeypatch.setattr(spill_module, "CACHE_ENTRIES", cache)
    spill = Spill()
    names = [f"r{i}" for i in range(37)]
    refs = dict.fromkeys(names, 0)
    want: dict[str, list] = {n: [] for n in names}
    rnd = random.Random(7)
    for rnd_pass in range(5):
        batch = [n for n in names if rnd.random() < 0.8]
        entries = []
        for n in batch:
            rows = [(n, rnd_pass, k) for k in range(rnd.randint(1, 3))]
            entries.append((refs[n], rows, None))
            want[n].append(rows)
        got = [ref for i in range(0, len(entries), spill_module.CHUNK_ENTRIES)
               for ref in spill.write_chunk(entries[i:i + spill_module.CHUNK_ENTRIES])]
        for n, ref in zip(batch, got):
            refs[n] = ref
        assert len(set(refs[n] for n in batch)) == len(batch)
    assert spill.chunks >= 5 * 2
    order = names[:]
    rnd.shuffle(order)
    for n in order + order[::-1]:
        assert [items for kind, items in spill.read(refs[n])] == want[n]
        assert spill._cached <= max(cache, spill_module.CHUNK_ENTRIES)
    spill.close()


def test_spilled_transactions_come_back_new_at_each_read():
    """What makes no rows goes pickled in its entry: each read gives objects of its own, as
    a chunk kept decoded must not hand one object to two readers."""
    spill = Spill()
    odd = [Resolution("x", "y", 1)]
    ref = spill.write_chunk([(0, None, odd), (0, [("row",)], None)])[0]
    with pytest.raises(ValueError, match="a chunk holds"):
        spill.write_chunk([(0, [("row",)], None)] * (CHUNK_ENTRIES + 1))
    (kind, first), = spill.read(ref)
    (_, again), = spill.read(ref)
    assert kind == b"p" and first == again == odd and first[0] is not again[0]
    spill.close()


def test_text_written_as_it_is_made(storm3, monkeypatch):
    """write_text writes what to_text returns, in pieces of whole lines."""
    audits, _ = audit_paths([str(storm3)], _cli_options(), quiet=True)
    out = io.StringIO()
    pieces = []
    write = out.write
    out.write = lambda s: (pieces.append(s), write(s))[1]
    report.write_text(out, audits)
    assert out.getvalue() == report.to_text(audits)
    assert len(pieces) > 1 and all(p.endswith("\n") for p in pieces)


def test_tally_of_counts_as_count_does(storm2):
    """Tally.of (the spill's and fold's count of a resolution's transactions in one pass)
    against Tally.count of each, on transactions with retries, unanswered ones and both
    kinds of reversible asks; taking them out again with count(t, -1) leaves nothing."""
    from ibpath_scapy.audit.replay import Tally

    ts = _closed(storm2)
    odd = ClosedTransaction.from_row(ts[0].row())
    odd.request_count, odd.answered, odd._asks = 3, False, True
    ts.append(odd)
    assert any(t.asks_reversible() for t in ts) and not all(t.answered for t in ts)
    for part in (ts, ts[:1], ts[-1:], []):
        each = Tally()
        for t in part:
            each.count(t)
        assert Tally.of(part) == each
        for t in part:
            each.count(t, -1)
        assert each == Tally()
    assert Tally.of([odd]) == Tally(1, 3, 2, 0, 1)


def _spill_both(ts: list, make) -> tuple:
    """The same resolutions (make(ts): fresh ones) spilled by the C steps (RowsText.spill)
    and by _spill_part with the same C writer: (file bytes, resolutions) of each."""
    import os

    out = []
    for steps in (True, False):
        replay = Replay(keep_closed=False)
        replay.intake()  # (sets the C writer and its spill steps)
        assert replay._spill_steps is not None
        if not steps:
            replay._spill_steps = None
        resolutions = make(ts)
        parts = []
        part = replay._spill_part
        replay._spill_part = lambda p: (parts.append(len(p)), part(p))[1]
        replay._spill(resolutions)
        replay.spill._file.flush()
        data = os.pread(replay.spill._file.fileno(), replay.spill.size, 0)
        out.append((data, resolutions, parts, replay))
    return out


def _resolution_state(res) -> tuple:
    return (type(res), res.spilled, res.spilled_count, res.transactions,
            None if res.folded is None else (type(res.folded), tuple(
                getattr(res.folded, f) for f in Tally.__slots__)))


@needs_rows
def test_spill_steps_in_c_as_spill_part_takes_them(storm2, storm3):
    """native/_rows.c RowsText.spill against Replay._spill_part, the reference: the same
    Spill file, byte for byte, and every resolution left alike (its chunk's reference, its
    spilled count, its counts folded with those it had, no transaction held), over the
    storms' and the corpus's transactions in resolutions of 1 to 4, some spilled before,
    some with counts already; a chunk with a resolution or transaction of another class, a
    Tally subclass, an entry that is not plain or a value no opcode writes goes to
    _spill_part whole, and the chunks around it stay the C steps'."""
    import random

    ts = _closed(storm2) + _closed(storm3)
    for path in _corpus()[:20]:
        ts += _closed(Path(path))
    for k in range(60):  # retried, unanswered and reversible-asking ones among them
        odd = ClosedTransaction.from_row(ts[k].row())
        odd.request_count, odd.answered, odd._asks = 1 + k % 4, k % 3 == 0, k % 5 == 0
        ts.insert(7 * k, odd)
    rnd = random.Random(4545)

    class OtherResolution(Resolution):
        pass

    class OtherTally(Tally):
        pass

    class Other:
        request_count, answered = 2, True

        def row(self):
            return ("plain", 1)

        def asks_reversible(self):
            return True

    from ibpath_scapy.facts.records import Rmpp

    not_plain = ClosedTransaction.from_row(ts[1].row())
    not_plain.query = Rmpp(rmpp_version=1, rmpp_type=1, r_resp_time=0, rmpp_flags=0,
                           rmpp_status=0, segment_number=1, payload_length=0)
    unwritten = ClosedTransaction.from_row(ts[2].row())
    unwritten.arrows = [("\ud800",)]
    specials = [OtherResolution, OtherTally, Other, not_plain, unwritten]

    def make(ts):
        rnd.seed(45)
        out, i = [], 0
        while i < len(ts):
            n = rnd.randint(1, 4)
            res = Resolution(f"l{i}", f"r{i}", 0xFFFF, transactions=list(ts[i:i + n]))
            i += n
            roll = rnd.random()
            if roll < 0.3:  # (an earlier entry of no file here: not read back below)
                res.spilled, res.spilled_count = rnd.choice([1, 2 ** 40 + 3, 2 ** 70]), 5
            if roll < 0.2:
                res.folded = Tally(5, 7, 2, 4, 1)
            if rnd.random() < 0.01:
                odd = specials[len(out) % len(specials)]
                if odd is OtherResolution:
                    res = OtherResolution(res.local, res.remote, res.pkey,
                                          transactions=res.transactions)
                elif odd is OtherTally:
                    res.folded = OtherTally(1, 1, 0, 1, 0)
                elif odd is Other:
                    res.transactions.append(Other())
                else:
                    res.transactions.append(odd)
            out.append(res)
        return out

    (c_data, c_res, c_parts, _), (py_data, py_res, py_parts, replay) = _spill_both(ts, make)
    assert len(c_res) > 1000 and py_parts and all(n <= CHUNK_ENTRIES for n in py_parts)
    assert 0 < len(c_parts) < len(py_parts)  # (the odd chunks, and only they, in Python)
    assert c_data == py_data
    assert [_resolution_state(r) for r in c_res] == [_resolution_state(r) for r in py_res]
    assert all(r.transactions == () for r in c_res)
    fresh = [r for r in py_res if r.spilled_count < 6]  # (no earlier entry: 5 + 1 or more)
    for res in fresh[::37]:  # (and what the file holds comes back)
        assert replay.read_back(res)


@needs_rows
def test_spill_steps_in_c_refuse_what_they_cannot_take():
    """RowsText.spill without its classes, with another tally class, a chunk size out of
    range, or a write_text that gives no reference per resolution: an error, not a
    resolution half spilled."""
    from ibpath_scapy.audit.spill import OBJECTS, ROWS, NotPlain, pickled

    make = extension().RowsText
    args = (ClosedTransaction, PathRecord, PathRecord._INIT, NotPlain, (ROWS, OBJECTS), pickled)
    with pytest.raises(TypeError, match="made without spill"):
        make(*args).spill([], print, print)
    for spill, error in (((Resolution, Resolution, 16), ValueError),
                         ((Resolution, Tally, 0), ValueError),
                         ((Resolution, Tally, 257), ValueError),
                         ((Tally, Tally, 16), AttributeError),
                         ((Resolution, Tally), TypeError)):
        with pytest.raises(error):
            make(*args, spill=spill)
    steps = make(*args, spill=(Resolution, Tally, CHUNK_ENTRIES))
    res = Resolution("a", "b", 1, transactions=[])
    with pytest.raises(TypeError, match="a reference each"):
        steps.spill([res], lambda text, n: [], print)
    with pytest.raises(TypeError, match="takes 3"):
        steps.spill([res])
