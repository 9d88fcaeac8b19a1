"""Issue 22's decode target: `ibpath decode` against `ibpath audit` on the same file.

    python bench/decode_speed.py [--runs 3] [--frames1 1000000] [--frames2 200000]
                                 [--only 1|2] [--encap rocev2|ib|both] [--keep DIR]
                                 [--text] [--scapy [--scapy-runs 1]]

For capture 1 (RoCEv2, 5 % SA and CM MADs, 95 % RC data) and capture 2 (SA PathRecord
queries and RMPP GetTableResp answers only) of corpus.py, RoCEv2 and native IB (ERF), it runs
`ibpath decode --format json FILE` and `ibpath audit --quiet --format json FILE` (both
through the fast path, standard output to /dev/null), with --text `ibpath decode FILE` too,
--runs times each, in turn (suite.interleaved), and keeps each command's best CPU time (user +
system of the child, wait4). --scapy adds the decode of every frame through the Scapy layers
(IBPATH_FASTPATH=0: what `ibpath decode` ran before it read through the fast path), --scapy-
runs times (it takes minutes on the full sizes).

Target (issue 22): decode --format json <= 1.5x the audit on both captures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from suite import IBPATH, captures, interleaved  # noqa: E402

TARGET = 1.5


def bench_file(path: Path, runs: int, text: bool, scapy_runs: int) -> dict:
    fast = {**os.environ, "IBPATH_FASTPATH": "1"}
    cmds = {
        "audit": (IBPATH + ["audit", "--quiet", "--format", "json", str(path)], fast),
        "decode json": (IBPATH + ["decode", "--format", "json", str(path)], fast),
    }
    if text:
        cmds["decode text"] = (IBPATH + ["decode", str(path)], fast)
    got = interleaved(cmds, runs)
    if scapy_runs:
        slow = {**os.environ, "IBPATH_FASTPATH": "0"}
        got.update(interleaved({
            "decode json, Scapy path": (IBPATH + ["decode", "--format", "json", str(path)], slow),
        }, scapy_runs))
    return got


def report(name: str, frames: int, got: dict) -> str:
    base = got["audit"][0]
    lines = [f"{name}: {frames:,} frames"]
    for key, (cpu, wall, rss) in got.items():
        lines.append(f"    {key:<26} {cpu:8.2f} s CPU {wall:8.2f} s wall {cpu / base:7.2f}x audit "
                     f"{frames / cpu:11,.0f} frames/CPU s {rss:6.0f} MB")
    ratio = got["decode json"][0] / base
    lines.append(f"    target: decode --format json <= {TARGET}x audit -> "
                 f"{'met' if ratio <= TARGET else 'NOT met'} ({ratio:.2f}x)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--frames1", type=int, default=1_000_000)
    ap.add_argument("--frames2", type=int, default=200_000)
    ap.add_argument("--frames3", type=int, default=200_000)
    ap.add_argument("--only", type=int, choices=(1, 2, 3), help="run one capture only")
    ap.add_argument("--encap", choices=("rocev2", "ib", "both"), default="both")
    ap.add_argument("--keep", type=Path, help="write (or reuse) the captures in this directory")
    ap.add_argument("--text", action="store_true", help="time `ibpath decode` (text) too")
    ap.add_argument("--scapy", action="store_true",
                    help="time the decode through the Scapy path too (IBPATH_FASTPATH=0)")
    ap.add_argument("--scapy-runs", type=int, default=1)
    args = ap.parse_args()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        for n, encap, frames, path in captures(args, d):  # suite.py's files and names
            got = bench_file(path, args.runs, args.text, args.scapy_runs if args.scapy else 0)
            out.append(report(f"capture {n} {encap}", frames, got))
            print(out[-1], flush=True)
    print()
    print(f"best CPU of {args.runs} interleaved run(s) each; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print("\n".join(out))


if __name__ == "__main__":
    main()
