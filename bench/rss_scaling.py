"""The audit's peak RSS as capture 2 grows: does it stay flat (issue 8, "independent of capture size")?

    python bench/rss_scaling.py [--sizes 50000,200000,400000] [--keep DIR]

Writes capture 2 (corpus.py: SA PathRecord queries and RMPP GetTableResp answers only) at
each size, runs `ibpath audit --quiet --format json FILE` once per size and prints its peak
RSS (wait4, that child alone), its CPU time, and the growth per extra frame between sizes.
Capture 2 asks for the paths of 364 pairs over and over with new transaction IDs: memory grows
while each resolution's history fills (Replay.RESOLUTION_HISTORY summaries of ~0.4 KB) and must
be flat after that (at about 220,000 frames).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from corpus import write_capture2  # noqa: E402
from suite import IBPATH, measure  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="50000,200000,400000",
                    help="comma-separated frame counts (default: %(default)s)")
    ap.add_argument("--keep", help="write (or reuse) the captures in this directory")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.keep or tmp)
        d.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "IBPATH_FASTPATH": "1"}
        print(f"{'frames':>9} {'audit CPU':>10} {'peak RSS':>9} {'growth':>14}")
        prev = None
        for n in sizes:
            path = d / f"capture2-{n}.pcap"
            if not path.exists():
                write_capture2(path, n)
            cpu, _, rss = measure(IBPATH + ["audit",
                                   "--quiet", "--format", "json", str(path)], env)
            growth = ""
            if prev is not None and n != prev[0]:
                growth = f"{(rss - prev[1]) * 1024 * 1024 / (n - prev[0]):8.0f} B/frame"
            print(f"{n:9,d} {cpu:9.2f}s {rss:6.0f} MB {growth:>14}", flush=True)
            prev = (n, rss)


if __name__ == "__main__":
    main()
