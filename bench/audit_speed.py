"""`ibpath audit` against `tshark -r` on the same capture, with the audit's peak RSS.

    python bench/audit_speed.py [--frames 100000] [--capture 1|2] [--encap rocev2|ib]

capture 1: RoCEv2, 5 % MADs (SA + CM), 95 % RC data (bench/corpus.py); capture 2: SA
PathRecord queries and multi-segment RMPP answers only; --encap ib writes either as native
InfiniBand in ERF records, as ibdump does. Issue 8 sets the targets (audit at
most 0.5x / 1.0x tshark -r, RSS below 300 MB); this reports where the audit stands.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import write_capture1, write_capture2  # noqa: E402
from suite import IBPATH  # noqa: E402


def run(cmd: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and peak RSS (KiB) of one child run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, after.ru_maxrss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--capture", type=int, choices=(1, 2), default=1)
    ap.add_argument("--encap", choices=("rocev2", "ib"), default="rocev2")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"capture{args.capture}.pcap"
        (write_capture1 if args.capture == 1 else write_capture2)(path, args.frames,
                                                                  encap=args.encap)
        tw, tc, _ = run(["tshark", "-n", "-r", str(path)])
        aw, ac, rss = run(IBPATH + ["audit", "--quiet", "--format", "json", str(path)])
    print(f"capture{args.capture} ({args.encap}): {args.frames} frames")
    print(f"tshark -r     : {tw:8.2f} s wall {tc:8.2f} s CPU")
    print(f"ibpath audit  : {aw:8.2f} s wall {ac:8.2f} s CPU  ratio {ac / tc:.2f}x CPU, "
          f"{args.frames / aw:,.0f} frames/s, peak RSS {rss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
