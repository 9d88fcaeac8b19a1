"""Cost of the Lua plugin: `tshark -r FILE` with the plugin, with an empty Lua postdissector
(the floor of any Lua plugin) and with neither, on Wireshark 4.0 (the host's tshark) and on
4.4 and 4.6 (the Debian chroots the tests build, tests/wireshark_versions.py).

    python bench/plugin_cost.py [--capture 1|2] [--frames N] [--runs 3] [--release 4.0 4.4 4.6]

Times are the best CPU time (user + system) of --runs runs, the three commands interleaved.
In a chroot tshark runs as nobody (4.4 and later run no Lua as root). With --instructions
(needs valgrind; in a chroot, valgrind installed there: chroot DIR apt-get install -y
valgrind) it also counts the instructions tshark executes per frame (callgrind, first 20,000
frames, less a one-frame run); valgrind needs /proc, which is mounted in the chroot for those
runs (as root) and unmounted after.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from corpus import write_capture1, write_capture2  # noqa: E402

LUA = HERE.parent / "dissector" / "ibpath.lua"
EMPTY_POSTDISSECTOR = """\
local p = Proto("ibpath_bench_floor", "empty postdissector")
function p.dissector(tvb, pinfo, tree) end
register_postdissector(p)
"""
CHROOT_SUITES = {"4.4": "trixie", "4.6": "unstable"}


class Release:
    """One tshark: the host's, or a chroot's run as nobody on files staged inside it."""

    def __init__(self, name: str, work: Path):
        self.name = name
        self.root = None
        self.stage = work
        if name != "4.0":
            from wireshark_versions import cache_dir
            self.root = cache_dir() / CHROOT_SUITES[name]
            if not (self.root / "usr" / "bin" / "tshark").is_file():
                raise SystemExit(f"no {name} chroot at {self.root}: run "
                                 "tests/test_wireshark_versions.py once to build it")
            self.stage = Path(tempfile.mkdtemp(prefix="bench-", dir=self.root / "tmp"))
            os.chmod(self.stage, 0o755)

    def put(self, path: Path) -> str:
        """path as this tshark sees it (copied into the chroot)."""
        if self.root is None:
            return str(path)
        dst = self.stage / path.name
        if not dst.exists():
            shutil.copyfile(path, dst)
            os.chmod(dst, 0o644)
        return "/" + str(dst.relative_to(self.root))

    def cmd(self, *args: str, tool: list[str] = ()) -> list[str]:
        if self.root is None:
            return [*tool, "tshark", "-n", *args]
        return ["chroot", "--userspec=65534:65534", str(self.root), "env", "-i", "HOME=/tmp",
                "PATH=/usr/bin:/bin", *tool, "tshark", "-n", *args]

    def mount_proc(self) -> None:
        """valgrind reads /proc/self/maps: mount a proc in the chroot unless it has one."""
        self.mounted = False
        if self.root is not None and not (self.root / "proc" / "self").exists():
            subprocess.run(["mount", "-t", "proc", "proc", str(self.root / "proc")], check=True)
            self.mounted = True

    def cleanup(self) -> None:
        if self.root is not None:
            if getattr(self, "mounted", False):
                subprocess.run(["umount", str(self.root / "proc")], check=False)
            shutil.rmtree(self.stage, ignore_errors=True)


def cpu(cmd: list[str]) -> float:
    """CPU time (user + system) of the child: on a shared machine wall time measures the
    neighbours too."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def instructions(rel: Release, cap: str, extra: list[str]) -> int:
    """Instructions callgrind counts for `tshark -n -r cap` (startup included)."""
    p = subprocess.run(rel.cmd(*extra, "-r", cap, tool=["valgrind", "--tool=callgrind",
                                                        "--callgrind-out-file=/dev/null"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    return int(re.search(r"Collected : (\d+)", p.stderr).group(1))


def per_frame_instructions(rel: Release, cap: Path, d: Path, luas: dict[str, str]) -> dict:
    n = 20000
    big, one = d / f"slice-{cap.stem}.pcap", d / f"one-{cap.stem}.pcap"
    subprocess.run(["editcap", "-r", str(cap), str(big), f"1-{n}"], check=True)
    subprocess.run(["editcap", "-r", str(cap), str(one), "1-1"], check=True)
    b, o = rel.put(big), rel.put(one)
    return {k: (instructions(rel, b, x) - instructions(rel, o, x)) / (n - 1)
            for k, x in (("plain", []), ("floor", ["-X", f"lua_script:{luas['floor']}"]),
                         ("plugin", ["-X", f"lua_script:{luas['plugin']}"]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capture", type=int, choices=(1, 2), action="append",
                    help="1: RoCEv2, 5%% MADs; 2: SA only (default: both)")
    ap.add_argument("--frames", type=int, help="frames per capture (default 300,000 / 50,000)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--release", nargs="+", default=["4.0", "4.4", "4.6"],
                    choices=["4.0", "4.4", "4.6"])
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per frame with callgrind (valgrind)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "floor.lua").write_text(EMPTY_POSTDISSECTOR)
        caps = []
        for c in args.capture or [1, 2]:
            frames = args.frames or (300_000 if c == 1 else 50_000)
            writer = write_capture1 if c == 1 else write_capture2
            caps.append((c, frames, writer(d / f"capture{c}-{frames}.pcap", frames)))
        rels = [Release(r, d) for r in args.release]
        try:
            if args.instructions:
                for rel in rels:
                    rel.mount_proc()
            print(f"{'capture':<22} {'tshark':>6} {'-r s':>7} {'+empty Lua':>15} {'+plugin':>15}"
                  + ("   instructions/frame (plain, empty, plugin)" if args.instructions else ""))
            for c, frames, cap in caps:
                for rel in rels:
                    luas = {"floor": rel.put(d / "floor.lua"), "plugin": rel.put(LUA)}
                    path = rel.put(cap)
                    best = {"plain": float("inf"), "floor": float("inf"), "plugin": float("inf")}
                    for _ in range(args.runs):  # interleaved: a busy spell hits all three alike
                        best["plain"] = min(best["plain"], cpu(rel.cmd("-r", path)))
                        for k in ("floor", "plugin"):
                            best[k] = min(best[k], cpu(rel.cmd("-X", f"lua_script:{luas[k]}",
                                                               "-r", path)))
                    p = best["plain"]
                    line = (f"{c} ({frames:>9,} frames) {rel.name:>6} {p:7.2f} "
                            f"{best['floor']:7.2f} {best['floor'] / p:5.2f}x "
                            f"{best['plugin']:7.2f} {best['plugin'] / p:5.2f}x")
                    if args.instructions:
                        ir = per_frame_instructions(rel, cap, d, luas)
                        line += (f"   {ir['plain']:8.0f} {ir['floor']:8.0f} {ir['plugin']:8.0f}"
                                 f" ({ir['plugin'] / ir['plain']:.2f}x)")
                    print(line, flush=True)
        finally:
            for rel in rels:
                rel.cleanup()


if __name__ == "__main__":
    main()
