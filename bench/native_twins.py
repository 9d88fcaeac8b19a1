"""What each C twin of the audit saves: the rows its one-line comments name.

    python bench/native_twins.py [--runs N] FILE   (e.g. bench capture 3 from corpus.py)

Each row times one step of `ibpath audit` on FILE with its C twin and with the Python code
that remains the reference, interleaved in one process (C, Python, C, ...), best of N, in
CPU seconds, the records decoded beforehand where the step does not decode:

  decode                   the fast path's decode (native/_mad.c: MadDecoder.frame and
                           .taken)
  decode, runs / frames    with the C on both sides: the readers' runs of taken frames
                           decoded whole (pcapio.Taken, MadDecoder.taken) against
                           decode_at frame by frame (MadDecoder.frame)
  decode, segments         with the C on both sides: RMPP DATA segments handed to the
                           assembler's reassembler by the C decoder (its segment_step)
                           against their records finished by mad_frame_at in Python
  frame-finding test       engine.frame_finding_batch over every record (native/_frametest.c)
  replay alone             engine.audit_records with the transaction rules, the Spill file
                           and the frame-finding test off: the SA intake (native/_intake.c)
  spill chunks             the Spill file's chunks of every transaction the CLI's replay
                           closes, one a resolution, 16 to a chunk: written as pickle's
                           text in C (native/_rows.c, RowsText) against pickle.dumps of
                           their ClosedTransaction.row (Replay._spill's two ways)
  spill steps              Replay._spill of those transactions, one a resolution: the
                           C writer's steps chunk after chunk (RowsText.spill) against
                           Replay._spill_part's, the chunks' text written in C by both
  audit_records, whole     the CLI's audit of the decoded records, every twin on or off

A twin stays only where its row is more than 10 % faster (the project's rule for C code).
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from python_floor import cli_audit  # noqa: E402


@contextmanager
def python_twins():
    """The extension's functions as absent (native.extension() reads this each time)."""
    old = os.environ.get("IBPATH_NATIVE_SCAN")
    os.environ["IBPATH_NATIVE_SCAN"] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["IBPATH_NATIVE_SCAN"]
        else:
            os.environ["IBPATH_NATIVE_SCAN"] = old


def interleaved(step, runs: int) -> tuple[float, float]:
    """(best C, best Python) CPU seconds of step(), a fresh setup each call."""
    best = [float("inf"), float("inf")]
    for _ in range(runs):
        for i in (0, 1):
            if i:
                with python_twins():
                    run = step()
                    t = time.process_time()
                    run()
            else:
                run = step()
                t = time.process_time()
                run()
            best[i] = min(best[i], time.process_time() - t)
    return best[0], best[1]


def closed_transactions(records: list) -> list:
    """Every PathRecord transaction the CLI's replay closes, as it summarises them."""
    from ibpath_scapy.audit.engine import transaction_marks
    from ibpath_scapy.audit.replay import Replay

    replay = Replay(keep_closed=False)
    replay.transaction_marks = transaction_marks()
    feed = replay.intake()
    for rec in records:
        feed(rec, False)
    replay.finish()
    return [t for r in replay.resolutions.values() for t in r.transactions]


def frame_by_frame(path: str, decoder) -> list:
    """The fast path's records of path with every frame made and decoded alone (decode_at,
    feed where it gives None): how the fast path read before the readers handed runs over."""
    from ibpath_scapy.engines.fast import FULL, prefilter
    from ibpath_scapy.engines.fast.reader import classified_frames
    from ibpath_scapy.engines.scapy import blobsniff

    out, skipped = [], [0]
    for f, cl in classified_frames(path, prefilter(), blobsniff.plausible, skipped):
        rec = None if cl is FULL else decoder.decode_at(f, cl)
        if rec is None:
            out += decoder.feed(f)
        else:
            out.append(rec)
    return out + list(decoder.finish())


class LeavingSegments:
    """The C decoder as it was before it took RMPP segments: given no reassembler, it leaves
    them to mad_frame_at (the "decode, segments" row)."""

    def __init__(self, native):
        self.native = native

    def frame(self, *args):
        return self.native.frame(*args[:5])

    def taken(self, *args):
        return self.native.taken(*args[:8])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("file")
    a = ap.parse_args()

    from ibpath_scapy.audit import engine
    from ibpath_scapy.audit.replay import ClosedTransaction, Replay, Resolution
    from ibpath_scapy.audit.spill import CHUNK_ENTRIES, OBJECTS, ROWS, NotPlain, pickled
    from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast
    from ibpath_scapy.engines.scapy.gcpace import paced
    from ibpath_scapy.facts.records import PathRecord
    from ibpath_scapy.native import extension

    if extension() is None:
        sys.exit("native_twins: the package was built without its C extension")
    path = a.file
    with paced():  # as audit.run does
        records = list(decode_file_fast(path, FastDecoder()))
        ts = closed_transactions(records)
        text = extension().RowsText(ClosedTransaction, PathRecord, PathRecord._INIT, NotPlain,
                                    (ROWS, OBJECTS), pickled)
        chunks = [[(k, [t]) for k, t in enumerate(ts[i:i + CHUNK_ENTRIES])]
                  for i in range(0, len(ts), CHUNK_ENTRIES)]

        def decode():
            decoder = FastDecoder()  # (its C decoder chosen as it is made)
            return lambda: list(decode_file_fast(path, decoder))

        def frame_test():
            test = engine.frame_finding_batch(engine._frame_finding_test())
            return lambda: test(records)

        def spill_chunks():
            if extension() is None:
                return lambda: [pickle.dumps([(ROWS, k, [t.row() for t in x]) for k, x in c],
                                             pickle.HIGHEST_PROTOCOL) for c in chunks]
            return lambda: [text(c) for c in chunks]

        def spill_steps():
            replay = Replay(keep_closed=False)
            replay.intake()  # (its C writer, and the writer's spill steps)
            if extension() is None:
                replay._spill_steps = None
                replay._text = text
            resolutions = [Resolution(t.requester, "", 0xFFFF, transactions=[t]) for t in ts]

            def run():
                replay._spill(resolutions)
                replay.close_spill()
            return run

        def whole():
            return lambda: cli_audit(path, records)

        steps = {"decode": decode, "frame-finding test": frame_test,
                 "spill chunks": spill_chunks, "spill steps": spill_steps,
                 "audit_records, whole": whole}
        print(f"{path}: {len(records):,} records, {len(ts):,} transactions closed; "
              f"best of {a.runs}, CPU seconds")
        print(f"{'':24s}{'C':>8s}{'Python':>8s}  C against Python")
        for name, step in steps.items():
            c, py = interleaved(step, a.runs)
            print(f"{name:24s}{c:8.3f}{py:8.3f}  {(c / py - 1) * 100:+6.1f} %")
        best = [float("inf"), float("inf")]
        for _ in range(a.runs):  # the runs against the frames, the C decoder on both sides
            for i, read in enumerate((lambda d: list(decode_file_fast(path, d)),
                                      lambda d: frame_by_frame(path, d))):
                decoder = FastDecoder()
                t = time.process_time()
                read(decoder)
                best[i] = min(best[i], time.process_time() - t)
        print(f"{'decode, runs / frames':24s}{best[0]:8.3f}{best[1]:8.3f}  "
              f"{(best[0] / best[1] - 1) * 100:+6.1f} %")
        best = [float("inf"), float("inf")]
        for _ in range(a.runs):  # segments to the reassembler in C, or by mad_frame_at
            for i in (0, 1):
                decoder = FastDecoder()
                if i:
                    decoder._native = LeavingSegments(decoder._native)
                t = time.process_time()
                list(decode_file_fast(path, decoder))
                best[i] = min(best[i], time.process_time() - t)
        print(f"{'decode, segments':24s}{best[0]:8.3f}{best[1]:8.3f}  "
              f"{(best[0] / best[1] - 1) * 100:+6.1f} %")
        judge, test, held = (engine.transaction_judge, engine._frame_finding_test,
                             Replay.HELD_TRANSACTIONS)
        try:  # the replay itself: what python_floor --parts calls "without all three"
            engine.transaction_judge = lambda p, out: lambda t, res: None
            engine._frame_finding_test = lambda: lambda rec: False
            Replay.HELD_TRANSACTIONS = sys.maxsize
            c, py = interleaved(whole, a.runs)
        finally:
            engine.transaction_judge, engine._frame_finding_test = judge, test
            Replay.HELD_TRANSACTIONS = held
        print(f"{'replay alone':24s}{c:8.3f}{py:8.3f}  {(c / py - 1) * 100:+6.1f} %")


if __name__ == "__main__":
    main()
