"""How fast CPython can walk an SA capture at all: the floor under any audit written in it.

    python bench/python_floor.py FILE        (e.g. capture 2 kept by suite.py --keep DIR)
    python bench/python_floor.py --parts FILE   (any capture: where the audit's CPU goes)

Times, in CPU seconds, on the same file:
  * `tshark -n -r FILE` (the issue-8 yardstick);
  * a new interpreter that imports the audit's modules and exits (paid once per run);
  * the least per-frame work an audit of SA traffic needs, in plain Python: walk the pcap
    records, check that each is Ethernet / IPv4 / UDP 4791, check its ICRC (zlib over the
    masked headers), read its MAD's class, method and TID and file the frame under its
    transaction (requester, TID, class) in a dict. Nothing is decoded, no record is built, no rule runs;
  * the other side of the floor: the audit's own frame checks, replay and rules
    (engine.audit_records, as the CLI runs them) over records decoded beforehand, so that
    decoding costs nothing in the time taken.

The offsets here are written out for Ethernet / IPv4 without options, which is all capture 2
holds: this is a measurement, not a decoder (the audit's own reader takes every offset from
the layers). If the floor plus the start-up is already close to tshark's time, an audit
that decodes and judges each frame in Python cannot reach 1.0x on this capture; see the
README's numbers.

--parts (issue 45) takes the audit apart instead, on any capture (capture 3, native IB
too): `tshark -T fields` with suite.py's AUDITOR_FIELDS, the start, the fast path's decode
alone, and engine.audit_records over records decoded beforehand, whole and with each of its
parts switched off in turn (the transaction rules, the Spill file, the frame-finding test)
and all three at once: what is left then is the replay itself (transactions matched,
sealed, placed in resolutions). Start + decode + that rest is what this design costs before
any rule runs, against the -T fields target.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from suite import AUDITOR_FIELDS, installed_env, measure  # noqa: E402

SEED = zlib.crc32(b"\xff" * 8)


def start_cpu(runs: int = 3) -> float:
    """Best CPU seconds of a new interpreter importing the audit's modules, byte code cached
    as in a pip-installed package (suite.installed_env)."""
    with tempfile.TemporaryDirectory(prefix="ibpath-floor-pycache-") as d:
        env = installed_env(Path(d))
        return min(measure([sys.executable, "-c", "import ibpath_scapy.cli.main, "
                            "ibpath_scapy.engines.fast.decoder, ibpath_scapy.audit.engine"],
                           env)[0] for _ in range(runs + 1))  # (the first writes the cache)


def floor_walk(path: str) -> tuple[int, int, int]:
    """(MAD frames, transactions, ICRC mismatches) of the minimal walk."""
    data = Path(path).read_bytes()
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    rec = struct.Struct(endian + "IIII").unpack_from
    mad_head = struct.Struct(">BBBBHHQ").unpack_from
    transactions: dict[tuple, list[int]] = {}
    pos, n, frames, bad = 24, len(data), 0, 0
    while pos + 16 <= n:
        incl = rec(data, pos)[2]
        s, e = pos + 16, pos + 16 + incl
        pos = e
        if data[s + 12:s + 14] != b"\x08\x00" or data[s + 14] != 0x45 or data[s + 23] != 17 \
                or data[s + 36:s + 38] != b"\x12\xb7":
            continue
        ip = s + 14
        h = bytearray(data[ip:ip + 33])
        h[1] = h[8] = h[32] = 0xFF
        h[10:12] = h[26:28] = b"\xff\xff"
        c = zlib.crc32(memoryview(data)[ip + 33:e - 4], zlib.crc32(h, SEED))
        bad += c != int.from_bytes(data[e - 4:e], "little")
        _, mgmt_class, _, method, _, _, tid = mad_head(data, ip + 48)
        requester = data[ip + 16:ip + 20] if method & 0x80 else data[ip + 12:ip + 16]
        transactions.setdefault((requester, tid, mgmt_class), []).append(frames)
        frames += 1
    return frames, len(transactions), bad


def best_cpu(fn, runs: int) -> tuple[float, object]:
    """(least CPU seconds of `runs` calls of fn, what that call returned)."""
    best = None
    for _ in range(runs):
        t = time.process_time()
        got = fn()
        cpu = time.process_time() - t
        if best is None or cpu < best[0]:
            best = (cpu, got)
    return best


def cli_audit(path: str, records: list):
    """engine.audit_records over records with the CLI's options (cli/audit.py)."""
    from ibpath_scapy.audit.engine import audit_records
    from ibpath_scapy.audit.model import AuditOptions

    return audit_records(path, records, AuditOptions(keep_transactions=False,
                                                     stream_resolutions=True))


def rules_alone(path: str, runs: int = 3) -> tuple[float, int, int]:
    """(CPU seconds, transactions, findings) of the audit's frame checks, replay and rules
    over the file's records, decoded before the clock starts."""
    from ibpath_scapy.engines.fast import decode_file_fast
    from ibpath_scapy.engines.scapy.gcpace import paced

    with paced():  # as audit.run does
        records = list(decode_file_fast(path))
        cpu, fa = best_cpu(lambda: cli_audit(path, records), runs)
    return cpu, fa.replay.sa_count, len(fa.findings)


def parts(path: str) -> None:
    """Print where the audit's CPU goes on path (the module docstring's --parts)."""
    from ibpath_scapy.audit import engine
    from ibpath_scapy.audit.replay import Replay
    from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast
    from ibpath_scapy.engines.scapy.gcpace import paced

    fields = [x for f in AUDITOR_FIELDS for x in ("-e", f)]
    tf = min(measure(["tshark", "-n", "-r", path, "-T", "fields", *fields])[0] for _ in range(2))
    start = start_cpu(2)
    judge, marks, held = engine.transaction_judge, engine._frame_finding_test, Replay.HELD_TRANSACTIONS
    switched_off = {  # each part as nothing: no finding, no file, no frame kept
        "transaction rules": lambda: setattr(engine, "transaction_judge",
                                             lambda p, out: lambda t, res: None),
        "Spill file": lambda: setattr(Replay, "HELD_TRANSACTIONS", sys.maxsize),
        "frame-finding test": lambda: setattr(engine, "_frame_finding_test",
                                              lambda: lambda rec: False),
    }

    def restore() -> None:
        engine.transaction_judge, engine._frame_finding_test = judge, marks
        Replay.HELD_TRANSACTIONS = held

    with paced():  # as audit.run does
        decode, records = best_cpu(lambda: list(decode_file_fast(path, FastDecoder())), 2)

        def audit_cpu() -> float:
            return best_cpu(lambda: cli_audit(path, records), 2)[0]

        whole = audit_cpu()
        print(f"{path}: {len(records):,} records")
        print(f"tshark -T fields:             {tf:6.2f} s CPU")
        print(f"interpreter + audit imports:  {start:6.2f} s CPU")
        print(f"decode (fast path) alone:     {decode:6.2f} s CPU")
        print(f"audit_records, whole:         {whole:6.2f} s CPU")
        try:
            for name, off in switched_off.items():
                off()
                cpu = audit_cpu()
                restore()
                print(f"  without the {name + ':':20s}{cpu:6.2f} s CPU ({cpu - whole:+.2f})")
            for off in switched_off.values():
                off()
            rest = audit_cpu()
        finally:
            restore()
    print(f"  without all three:          {rest:6.2f} s CPU (the replay itself)")
    print(f"start + decode + replay:      {start + decode + rest:6.2f} s CPU = "
          f"{(start + decode + rest) / tf:.2f}x tshark -T fields, before any rule; "
          f"whole: {(start + decode + whole) / tf:.2f}x")


def main() -> None:
    if sys.argv[1] == "--parts":
        parts(sys.argv[2])
        return
    path = sys.argv[1]
    tshark = min(measure(["tshark", "-n", "-r", path])[0] for _ in range(3))
    start = start_cpu()
    best, (frames, transactions, bad) = best_cpu(lambda: floor_walk(path), 3)
    print(f"{path}: {frames:,} MAD frames, {transactions:,} transactions, {bad} bad ICRC")
    print(f"tshark -n -r:                 {tshark:6.2f} s CPU")
    print(f"interpreter + audit imports:  {start:6.2f} s CPU")
    print(f"minimal walk in Python:       {best:6.2f} s CPU ({1e6 * best / max(frames, 1):.1f} "
          f"us a frame)")
    print(f"floor of a Python audit:      {start + best:6.2f} s CPU = "
          f"{(start + best) / tshark:.2f}x tshark, before any decoding or rule")
    rules = rules_alone(path)
    print(f"audit's checks and rules:     {rules[0]:6.2f} s CPU = {rules[0] / tshark:.2f}x tshark "
          f"over decoded records ({rules[1]:,} transactions, {rules[2]} findings), "
          f"decoding free")


if __name__ == "__main__":
    main()
