"""Cost of the Lua plugin: `tshark -r FILE` with the plugin against without it.

    python bench/plugin_cost.py [--frames 1000000] [--runs 3]

Target (issue 4): at most 1.3× the time without the plugin. Times are the best CPU time
(user + system) of --runs runs. With --instructions (needs valgrind), it also counts the
instructions tshark executes per frame (callgrind, on the first 20,000 frames, less those of a
one-frame run): a count that a busy neighbour cannot skew.
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import write_capture1  # noqa: E402

LUA = Path(__file__).resolve().parents[1] / "dissector" / "ibpath.lua"
# The floor of any Lua plugin: a postdissector that does nothing (what Wireshark's Lua binding
# costs a frame before a plugin does any work of its own).
EMPTY_POSTDISSECTOR = """\
local p = Proto("ibpath_bench_floor", "empty postdissector")
function p.dissector(tvb, pinfo, tree) end
register_postdissector(p)
"""


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


def instructions(cap: Path, extra: list[str]) -> int:
    """Instructions callgrind counts for `tshark -n -r cap` (startup included)."""
    p = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                        "tshark", "-n", *extra, "-r", str(cap)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    return int(re.search(r"Collected : (\d+)", p.stderr).group(1))


def per_frame_instructions(cap: Path, d: Path) -> tuple[float, float]:
    """Instructions per frame without and with the plugin, startup subtracted."""
    big, one = d / "slice.pcap", d / "one.pcap"
    n = 20000
    subprocess.run(["editcap", "-r", str(cap), str(big), f"1-{n}"], check=True)
    subprocess.run(["editcap", "-r", str(cap), str(one), "1-1"], check=True)
    out = []
    for extra in ([], ["-X", f"lua_script:{LUA}"]):
        out.append((instructions(big, extra) - instructions(one, extra)) / (n - 1))
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per frame with callgrind (valgrind)")
    ap.add_argument("--no-tree", action="store_true", help="skip the slow -V runs")
    args = ap.parse_args()
    ir = None
    with tempfile.TemporaryDirectory() as d:
        cap = write_capture1(Path(d) / "capture1.pcap", args.frames)
        size = cap.stat().st_size
        floor_lua = Path(d) / "floor.lua"
        floor_lua.write_text(EMPTY_POSTDISSECTOR)
        plain = plugin = floor = float("inf")
        for _ in range(args.runs):  # interleaved, so a busy spell hits all three alike
            plain = min(plain, best_time(["tshark", "-n", "-r", str(cap)], 1))
            floor = min(floor, best_time(["tshark", "-n", "-X", f"lua_script:{floor_lua}",
                                          "-r", str(cap)], 1))
            plugin = min(plugin, best_time(["tshark", "-n", "-X", f"lua_script:{LUA}",
                                            "-r", str(cap)], 1))
        if not args.no_tree:
            tree = best_time(["tshark", "-n", "-V", "-X", f"lua_script:{LUA}", "-r", str(cap)], 1)
            tree0 = best_time(["tshark", "-n", "-V", "-r", str(cap)], 1)
        if args.instructions and shutil.which("valgrind"):
            ir = per_frame_instructions(cap, Path(d))
    print(f"capture1: {args.frames} frames, {size / 1e6:.1f} MB, 5% MADs")
    print(f"tshark -r             : {plain:8.2f} s")
    print(f"tshark -r + empty Lua : {floor:8.2f} s   ratio {floor / plain:.2f}x (the floor of any Lua hook)")
    print(f"tshark -r + plugin    : {plugin:8.2f} s   ratio {plugin / plain:.2f}x (target <= 1.3x)")
    if not args.no_tree:
        print(f"tshark -V             : {tree0:8.2f} s")
        print(f"tshark -V + plugin    : {tree:8.2f} s   ratio {tree / tree0:.2f}x")
    if ir:
        print(f"instructions/frame    : {ir[0]:8.0f} -> {ir[1]:.0f}   ratio {ir[1] / ir[0]:.2f}x "
              "(callgrind, first 20,000 frames)")


if __name__ == "__main__":
    main()
