"""Cost of the Lua plugin: `tshark -r FILE` with the plugin, with an empty Lua postdissector
(the floor of any Lua plugin) and with neither, on Wireshark 4.0 (the host's tshark) and on
4.4 and 4.6 (the Debian chroots the tests build, tests/wireshark_versions.py).

    python bench/plugin_cost.py [--capture 1|2|3] [--frames N] [--runs 3] [--release 4.0 4.4 4.6]
                                [--plugin FILE]

Times are the best CPU time (user + system) of --runs runs, the three commands interleaved.
In a chroot tshark runs as nobody (4.4 and later run no Lua as root). With --instructions
(needs valgrind; in a chroot, valgrind installed there: chroot DIR apt-get install -y
valgrind) it also counts the instructions tshark executes per frame (callgrind, first 20,000
frames, less a one-frame run); valgrind needs /proc, which is mounted in the chroot for those
runs (as root) and unmounted after.

With --floors it also runs postdissectors that do the least any plugin must do, to show what
a target for the plugin can ask: on both captures
  * "entry": the plugin's first test alone (pinfo.dst_port), which sends a data frame away:
    what any MAD plugin pays on capture 1's RC data;
and on capture 2 two that do the least any tracking plugin must do on a MAD frame:
  * "bytes": the plugin's two entry tests (pinfo.dst_port, pinfo.port_type) and the frame's
    bytes taken once (tvb:raw);
  * "track": that, plus the tree test the plugin makes (a tree or not), the frame number,
    pinfo.visited, a key of the MAD's class and TID cut from the bytes, and one table store
    per new TID with the request time (pinfo.abs_ts), which a response's "response time"
    needs: no RMPP, no locating (the MAD's offset is fixed, from the layers, for capture 2's
    Ethernet / IPv4 / UDP / BTH / DETH frames), nothing shown.
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
from corpus import write_capture1, write_capture2, write_capture3  # noqa: E402

LUA = HERE.parent / "dissector" / "ibpath.lua"
EMPTY_POSTDISSECTOR = """\
local p = Proto("ibpath_bench_floor", "empty postdissector")
function p.dissector(tvb, pinfo, tree) end
register_postdissector(p)
"""
CHROOT_SUITES = {"4.4": "trixie", "4.6": "unstable"}


def runtime_lua() -> str:
    """The plugin's hand-written runtime (luagen/runtime.lua)."""
    from importlib import resources

    return resources.files("ibpath_scapy.luagen").joinpath("runtime.lua").read_text()


def plugin_function(name: str) -> str:
    """A local function of the plugin's runtime (luagen/runtime.lua), as the plugin has it."""
    m = re.search(rf"^local function {name}\(.*?^end$", runtime_lua(), re.M | re.S)
    if m is None:
        raise SystemExit(f"runtime.lua has no local function {name}")
    return m.group(0)


def entry_postdissector() -> str:
    """The --floors "entry" postdissector: the plugin's first test, nothing more."""
    return f"""local p = Proto("ibpath_bench_entry", "the plugin's first test")
function p.dissector(tvb, pinfo, tree)
{entry_test()}
end
register_postdissector(p)
"""


def entry_test() -> str:
    """The first line of the plugin's postdissector (runtime.lua), its test of the port, with
    the value of the constant it names."""
    from ibpath_scapy.luagen.plugin import runtime_constants

    m = re.search(r"^function post\.dissector\(tvb, pinfo, tree\)\n(.*)$", runtime_lua(), re.M)
    if m is None or "pinfo.dst_port > MAD_QPN_MAX" not in m.group(1):
        raise SystemExit("runtime.lua's postdissector does not start with its port test")
    const = {c.name: c.value for c in runtime_constants()}
    return m.group(1).replace("MAD_QPN_MAX", str(int(const["MAD_QPN_MAX"])))


def floor_postdissectors(capture: Path) -> dict[str, str]:
    """The --floors postdissectors (module docstring), their offsets from the layers and the
    MAD's offset as the audit's pre-filter finds it in the capture's first frame."""
    from ibpath_scapy.engines.scapy import blobsniff
    from ibpath_scapy.engines import fast
    from ibpath_scapy.engines.fast.layout import prefix_offsets
    from ibpath_scapy.engines.fast.prefilter import MadAt
    from ibpath_scapy.engines.fast.reader import classified_frames
    from ibpath_scapy.layers.mad import MAD
    from ibpath_scapy.luagen.plugin import runtime_constants

    _, at = next(iter(classified_frames(str(capture), fast.prefilter(), blobsniff.plausible)))
    assert isinstance(at, MadAt), at  # a RoCEv2 MAD (capture 2's frames all are)
    mad = at.mad
    f = prefix_offsets(MAD)
    cls, tid = f["mgmt_class"], f["transaction_id"]
    assert cls[1] == tid[1] == 0 and cls[2] == 8 and tid[2] == 64, (cls, tid)
    const = {c.name: c.value for c in runtime_constants()}  # the plugin's, as it tests them
    entry = f"""{entry_test()}
  if pinfo.port_type ~= {int(const["PT_IBQP"])} then return end
  local s = tvb:raw(0, tvb:len())"""
    key = (f"string.sub(s, {mad + cls[0] + 1}, {mad + cls[0] + 1}) .. "
           f"string.sub(s, {mad + tid[0] + 1}, {mad + tid[0] + 8})")
    bytes_only = f"""local p = Proto("ibpath_bench_bytes", "entry tests and bytes")
function p.dissector(tvb, pinfo, tree)
{entry}
end
register_postdissector(p)
"""
    track = f"""local p = Proto("ibpath_bench_track", "least TID tracking")
local frames, times = {{}}, {{}}
{plugin_function("has_tree")}
function p.dissector(tvb, pinfo, tree)
{entry}
  if has_tree(tree) then return end
  local number, visited = pinfo.number, pinfo.visited
  if not visited then
    local key = {key}
    if frames[key] == nil then frames[key] = number; times[key] = pinfo.abs_ts end
  end
end
register_postdissector(p)
"""
    return {"bytes": bytes_only, "track": track}


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
    p = subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    lua_ok(p.stderr, cmd)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def lua_ok(stderr: str, cmd: list[str]) -> None:
    """tshark exits 0 when a Lua script fails: a failed script would time as a cheap one."""
    if "Lua Error" in stderr:
        raise SystemExit(f"{' '.join(cmd)}: {stderr.strip()}")


def instructions(rel: Release, cap: str, extra: list[str]) -> int:
    """Instructions callgrind counts for `tshark -n -r cap` (startup included)."""
    p = subprocess.run(rel.cmd(*extra, "-r", cap, tool=["valgrind", "--tool=callgrind",
                                                        "--callgrind-out-file=/dev/null"]),
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
    lua_ok(p.stderr, p.args)
    return int(re.search(r"Collected : (\d+)", p.stderr).group(1))


def per_frame_instructions(rel: Release, cap: Path, d: Path, luas: dict[str, str]) -> dict:
    """Instructions per frame of plain tshark and of tshark with each of `luas`."""
    n = 20000
    big, one = d / f"slice-{cap.stem}.pcap", d / f"one-{cap.stem}.pcap"
    subprocess.run(["editcap", "-r", str(cap), str(big), f"1-{n}"], check=True)
    subprocess.run(["editcap", "-r", str(cap), str(one), "1-1"], check=True)
    b, o = rel.put(big), rel.put(one)
    runs = {"plain": [], **{k: ["-X", f"lua_script:{lua}"] for k, lua in luas.items()}}
    return {k: (instructions(rel, b, x) - instructions(rel, o, x)) / (n - 1)
            for k, x in runs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capture", type=int, choices=(1, 2, 3), action="append",
                    help="1: RoCEv2, 5%% MADs; 2: SA only; 3: an all-to-all SA storm, every "
                    "pair new (default: 1 and 2)")
    ap.add_argument("--frames", type=int, help="frames per capture (default 300,000 / 50,000)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--release", nargs="+", default=["4.0", "4.4", "4.6"],
                    choices=["4.0", "4.4", "4.6"])
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per frame with callgrind (valgrind)")
    ap.add_argument("--plugin", type=Path, default=LUA,
                    help="the plugin to measure (default dissector/ibpath.lua; an older "
                    "generation to compare with, say)")
    ap.add_argument("--floors", action="store_true",
                    help="also the least postdissectors any plugin must run (docstring)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "floor.lua").write_text(EMPTY_POSTDISSECTOR)
        caps = []
        for c in args.capture or [1, 2]:
            frames = args.frames or (300_000 if c == 1 else 50_000)
            writer = {1: write_capture1, 2: write_capture2, 3: write_capture3}[c]
            caps.append((c, frames, writer(d / f"capture{c}-{frames}.pcap", frames)))
        rels = [Release(r, d) for r in args.release]
        try:
            if args.instructions:
                for rel in rels:
                    rel.mount_proc()
            kinds = ["floor", "plugin"]
            if args.floors:
                kinds[1:1] = ["entry", "bytes", "track"]
            print(f"{'capture':<22} {'tshark':>6} {'-r s':>7}"
                  + "".join(f" {'+' + k:>15}" for k in kinds)
                  + (f"   instructions/frame (plain, {', '.join(kinds)})"
                     if args.instructions else ""))
            for c, frames, cap in caps:
                # captures 2 and 3 are SA MADs only: the tracking floors apply to them
                use = kinds if c in (2, 3) else [k for k in kinds
                                                  if k in ("floor", "entry", "plugin")]
                (d / "entry.lua").write_text(entry_postdissector())
                files = {"floor": d / "floor.lua", "entry": d / "entry.lua",
                         "plugin": args.plugin.resolve()}
                if "track" in use:
                    for k, text in floor_postdissectors(cap).items():
                        (d / f"{k}.lua").write_text(text)
                        files[k] = d / f"{k}.lua"
                for rel in rels:
                    luas = {k: rel.put(files[k]) for k in use}
                    path = rel.put(cap)
                    best = {k: float("inf") for k in ["plain", *use]}
                    for _ in range(args.runs):  # interleaved: a busy spell hits all alike
                        best["plain"] = min(best["plain"], cpu(rel.cmd("-r", path)))
                        for k in use:
                            best[k] = min(best[k], cpu(rel.cmd("-X", f"lua_script:{luas[k]}",
                                                               "-r", path)))
                    p = best["plain"]
                    line = f"{c} ({frames:>9,} frames) {rel.name:>6} {p:7.2f}" + "".join(
                        f" {best[k]:7.2f} {best[k] / p:5.2f}x" for k in use)
                    if args.instructions:
                        ir = per_frame_instructions(rel, cap, d, luas)
                        line += "   " + " ".join(f"{ir[k]:8.0f}" for k in ["plain", *use]) + \
                            "".join(f" ({k} {ir[k] / ir['plain']:.2f}x)" for k in use[1:])
                    print(line, flush=True)
        finally:
            for rel in rels:
                rel.cleanup()


if __name__ == "__main__":
    main()
