"""Cost of the Lua plugin: `tshark -r FILE` with the plugin against without it.

    python bench/plugin_cost.py [--frames 1000000] [--runs 3]

Target (issue 4): at most 1.3× the time without the plugin. Times are the best CPU time
(user + system) of --runs runs.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import write_capture1  # noqa: E402

LUA = Path(__file__).resolve().parents[1] / "dissector" / "ibpath.lua"


def best_time(cmd: list[str], runs: int) -> float:
    """Best CPU time (user + system) of the child over `runs` runs: on a shared machine wall
    time measures the neighbours too."""
    best = float("inf")
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        best = min(best, cpu)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cap = write_capture1(Path(d) / "capture1.pcap", args.frames)
        size = cap.stat().st_size
        plain = best_time(["tshark", "-n", "-r", str(cap)], args.runs)
        plugin = best_time(["tshark", "-n", "-X", f"lua_script:{LUA}", "-r", str(cap)], args.runs)
        tree = best_time(["tshark", "-n", "-V", "-X", f"lua_script:{LUA}", "-r", str(cap)], 1)
        tree0 = best_time(["tshark", "-n", "-V", "-r", str(cap)], 1)
    print(f"capture1: {args.frames} frames, {size / 1e6:.1f} MB, 5% MADs")
    print(f"tshark -r             : {plain:8.2f} s")
    print(f"tshark -r + plugin    : {plugin:8.2f} s   ratio {plugin / plain:.2f}x (target <= 1.3x)")
    print(f"tshark -V             : {tree0:8.2f} s")
    print(f"tshark -V + plugin    : {tree:8.2f} s   ratio {tree / tree0:.2f}x")


if __name__ == "__main__":
    main()
