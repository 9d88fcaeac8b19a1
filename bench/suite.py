"""Issues 8 and 22's benchmark: `ibpath audit`, `ibpath decode` and the plugin against tshark on
both captures, in one run.

    python bench/suite.py [--runs 3] [--frames1 1000000] [--frames2 200000] [--frames3 200000]
                          [--keep DIR] [--encap rocev2|ib|both] [--container pcap|pcapng|both]
                          [--only 1|2|3]

For capture 1 (RoCEv2, 5 % SA and CM MADs, 95 % RC data), capture 2 (SA PathRecord
queries and RMPP GetTableResp answers only, 364 pairs asked again and again) and capture 3
(an all-to-all SA storm: 3,000 sources times 97 destinations, nearly every PathRecord new),
built deterministically by corpus.py, each
also as native InfiniBand in ERF records as ibdump writes them (--encap), written as classic
pcap (ibdump's and tcpdump's format) and, converted by editcap, as pcapng (dumpcap's and
Wireshark's; --container), it runs on the same file:

- `tshark -n -r FILE`: the built-in dissectors, no output kept (the ratios' base);
- `tshark -n -r FILE -T fields -e ...`: the fields an auditor would script from Wireshark's
  own InfiniBand dissector (AUDITOR_FIELDS: the MAD, RMPP and SA headers and every
  PathRecord field the rules read), issue 22's "what a user would script today";
- the same `tshark -r` with an empty Lua postdissector (the floor of any Lua plugin) and with
  the generated plugin (dissector/ibpath.lua), on the host's Wireshark (4.0 on Debian 12;
  bench/plugin_cost.py runs 4.4 and 4.6 too);
- `ibpath audit --quiet --format json FILE` and `ibpath decode --format json FILE` (the fast
  path; IBPATH_FASTPATH=0 would force the Scapy path).

Each is run --runs times and the best CPU time (user + system of that child alone, from
wait4) is kept: the machine is shared, and wall time measures the neighbours too; the runs of
the commands are taken in turn, so that a change in load weighs on all of them. Printed per
capture: CPU and wall seconds, each command's ratio to plain tshark, frames per CPU second
and peak RSS, then whether each target holds:

- capture 2: audit <= 1.0x tshark -T fields (stretch: <= 1.5x tshark -r);
- capture 3: audit <= 0.8x tshark -T fields (issue 45);
- capture 1: audit <= 0.35x tshark -r;
- both: decode --format json <= 1.5x audit; audit RSS < 300 MB (bench/rss_formats.py: every
  output format at 1,000,000 and 4,000,000 frames);
- plugin: capture 2 <= 1.5x tshark -r, capture 1 within 0.1x of the empty postdissector.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from corpus import write_capture1, write_capture2, write_capture3  # noqa: E402

LUA = HERE.parent / "dissector" / "ibpath.lua"
RSS_TARGET_MB = 300
# What an auditor scripts from Wireshark's built-in dissector: the MAD, RMPP and SA headers and
# the PathRecord fields the rules read (frame time for the response times).
AUDITOR_FIELDS = (
    "frame.number", "frame.time_epoch",
    "infiniband.mad.method", "infiniband.mad.status", "infiniband.mad.transactionid",
    "infiniband.mad.attributeid",
    "infiniband.rmpp.rmpptype", "infiniband.rmpp.rmppflags", "infiniband.rmpp.segmentnumber",
    "infiniband.rmpp.payloadlength",
    "infiniband.sa.componentmask",
    "infiniband.pathrecord.dgid", "infiniband.pathrecord.sgid", "infiniband.pathrecord.dlid",
    "infiniband.pathrecord.slid", "infiniband.pathrecord.flowlabel",
    "infiniband.pathrecord.hoplimit", "infiniband.pathrecord.tclass",
    "infiniband.pathrecord.reversible", "infiniband.pathrecord.numbpath",
    "infiniband.pathrecord.p_key", "infiniband.pathrecord.sl", "infiniband.pathrecord.mtu",
    "infiniband.pathrecord.rate", "infiniband.pathrecord.packetlifetime",
    "infiniband.pathrecord.preference",
)
# The empty postdissector: what any Lua plugin costs at least (bench/plugin_cost.py's too).
EMPTY_POSTDISSECTOR = """\
local p = Proto("ibpath_bench_floor", "empty postdissector")
function p.dissector(tvb, pinfo, tree) end
register_postdissector(p)
"""
# (label, key) of the commands, in the order they run and print
COMMANDS = (("tshark -r", "plain"), ("tshark -T fields", "fields"),
            ("tshark -r + empty Lua", "floor"), ("tshark -r + plugin", "plugin"),
            ("ibpath audit", "audit"), ("ibpath decode json", "decode"))


def measure(cmd: list[str], env: dict | None = None) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, peak RSS in MB) of one run of cmd, for that child alone."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode not in (0, 1) or "Traceback" in err or "Lua Error" in err:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    return ru.ru_utime + ru.ru_stime, wall, ru.ru_maxrss / 1024


def interleaved(cmds: dict[str, tuple[list[str], dict | None]], runs: int) -> dict:
    """For each command, its run with the least CPU time (that run's wall time, the peak RSS
    of all runs); the runs are taken in turn (a, b, c, a, b, c, ...) so that a change in the
    machine's load weighs on every command alike."""
    results: dict[str, list] = {k: [] for k in cmds}
    for _ in range(runs):
        for key, (cmd, env) in cmds.items():
            results[key].append(measure(cmd, env))
    return {k: (*min(r)[:2], max(x[2] for x in r)) for k, r in results.items()}


def installed_env(pycache: Path) -> dict:
    """The environment of the ibpath runs: byte code cached, as in a pip-installed package (pip
    compiles it at install). Without it (PYTHONDONTWRITEBYTECODE, set on some CI and sandbox
    images) every run compiles its ~90 modules again, +0.3 s CPU; the cache goes to pycache,
    not into the checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "IBPATH_FASTPATH": "1", "PYTHONPYCACHEPREFIX": str(pycache)}


# what the `ibpath` console script runs (pyproject.toml's entry point), from this interpreter
IBPATH = [sys.executable, "-m", "_ibpath_launcher"]


def bench_capture(n: int, path: Path, frames: int, runs: int, encap: str = "rocev2",
                  floor_lua: Path | None = None, *, env: dict) -> dict:
    """One row: every command on path, interleaved; env: installed_env's, warmed up."""
    ibpath = IBPATH
    fields = [x for f in AUDITOR_FIELDS for x in ("-e", f)]
    cmds = {
        "plain": (["tshark", "-n", "-r", str(path)], None),
        "fields": (["tshark", "-n", "-r", str(path), "-T", "fields", *fields], None),
        "floor": (["tshark", "-n", "-X", f"lua_script:{floor_lua}", "-r", str(path)], None),
        "plugin": (["tshark", "-n", "-X", f"lua_script:{LUA}", "-r", str(path)], None),
        "audit": (ibpath + ["audit", "--quiet", "--format", "json", str(path)], env),
        "decode": (ibpath + ["decode", "--format", "json", str(path)], env),
    }
    if floor_lua is None:
        del cmds["floor"]
    got = interleaved(cmds, runs)
    return {"capture": n, "encap": encap, "pcapng": path.suffix == ".pcapng", "frames": frames,
            "mb": path.stat().st_size / 1e6, **got}


def targets(r: dict) -> list[tuple[str, float, float]]:
    """(what, measured ratio, target) of each issue-22 target that applies to a row."""
    cpu = {k: v[0] for k, v in r.items() if isinstance(v, tuple)}
    out = []
    if r["capture"] == 3:  # issue 45: the storm of distinct paths
        out.append(("audit / tshark -T fields", cpu["audit"] / cpu["fields"], 0.8))
    elif r["capture"] == 2:
        out.append(("audit / tshark -T fields", cpu["audit"] / cpu["fields"], 1.0))
        out.append(("audit / tshark -r (stretch)", cpu["audit"] / cpu["plain"], 1.5))
        out.append(("plugin / tshark -r", cpu["plugin"] / cpu["plain"], 1.5))
    else:
        out.append(("audit / tshark -r", cpu["audit"] / cpu["plain"], 0.35))
        if "floor" in cpu:
            out.append(("plugin - empty Lua, x tshark -r",
                        (cpu["plugin"] - cpu["floor"]) / cpu["plain"], 0.1))
    out.append(("decode json / audit", cpu["decode"] / cpu["audit"], 1.5))
    return out


def report(rows: list[dict]) -> str:
    lines = [f"{'':23} {'frames':>9} {'what':<22} {'CPU s':>8} {'wall s':>8} {'x tshark':>9} "
             f"{'frames/CPU s':>13} {'peak RSS':>9}"]
    for r in rows:
        base = r["plain"][0]
        kind = r.get("encap", "rocev2") + (" pcapng" if r.get("pcapng") else "")
        name = f"capture {r['capture']} {kind:<13}"
        for label, key in COMMANDS:
            if key not in r:
                continue
            cpu, wall, rss = r[key]
            lines.append(f"{name} {r['frames']:>9,} {label:<22} {cpu:8.2f} "
                         f"{wall:8.2f} {cpu / base:8.2f}x {r['frames'] / cpu:13,.0f} "
                         f"{rss:7.0f} MB")
        for what, ratio, target in targets(r):
            lines.append(f"{'':23} target: {what} <= {target} -> "
                         f"{'met' if ratio <= target else 'NOT met'} ({ratio:.2f})")
        for key in ("audit", "decode"):
            rss = r[key][2]
            lines.append(f"{'':23} target: {key} RSS < {RSS_TARGET_MB} MB -> "
                         f"{'met' if rss < RSS_TARGET_MB else 'NOT met'} ({rss:.0f} MB)")
    return "\n".join(lines)


def captures(args, d: Path):
    """(capture number, encap, frames, path) of every bench capture args ask for (--encap,
    --only, --frames1/2/3), written into d unless it is there already (--keep reuses them)."""
    encaps = ("rocev2", "ib") if args.encap == "both" else (args.encap,)
    for encap in encaps:
        for n, frames, write in ((1, args.frames1, write_capture1),
                                 (2, args.frames2, write_capture2),
                                 (3, args.frames3, write_capture3)):
            if args.only and n != args.only:
                continue
            suffix = "" if encap == "rocev2" else f"-{encap}"
            path = d / f"capture{n}-{frames}{suffix}.pcap"
            if not path.exists():
                write(path, frames, encap=encap)
            yield n, encap, frames, path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--frames1", type=int, default=1_000_000)
    ap.add_argument("--frames2", type=int, default=200_000)
    ap.add_argument("--frames3", type=int, default=200_000)
    ap.add_argument("--only", type=int, choices=(1, 2, 3), help="run one capture only")
    ap.add_argument("--keep", type=Path, help="write (or reuse) the captures in this directory")
    ap.add_argument("--encap", choices=("rocev2", "ib", "both"), default="both",
                    help="RoCEv2 (Ethernet), native IB (ERF, as ibdump writes it), or both")
    ap.add_argument("--container", choices=("pcap", "pcapng", "both"), default="both",
                    help="classic pcap, pcapng (editcap -F pcapng), or both")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        floor = Path(tmp) / "floor.lua"
        floor.write_text(EMPTY_POSTDISSECTOR)
        env = installed_env(Path(tmp) / "pycache")
        # one run to write the byte code, so that no measured run compiles
        subprocess.run(IBPATH + ["--help"], env=env,
                       check=True, stdout=subprocess.DEVNULL)
        containers = ("pcap", "pcapng") if args.container == "both" else (args.container,)
        rows = []
        for n, encap, frames, path in captures(args, d):
            for container in containers:
                if container == "pcapng":
                    ng = path.with_suffix(".pcapng")
                    if not ng.exists():
                        subprocess.run(["editcap", "-F", "pcapng", str(path), str(ng)], check=True)
                    path = ng
                rows.append(bench_capture(n, path, frames, args.runs, encap, floor, env=env))
                print(report(rows[-1:]), flush=True)
    print()
    print(f"best CPU of {args.runs} run(s) each; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; "
          f"{subprocess.run(['tshark', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}")
    print(report(rows))


if __name__ == "__main__":
    main()
