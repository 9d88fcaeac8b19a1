"""Issue 44's measurements (the fleet extra): `ibpath audit --dask` against the serial run on
directories of at least 50 captures, with 1 and 2 workers on 127.0.0.1 (wall time: the
cluster's point is the machines it adds, and its overhead is wall time), the reports
compared byte for byte; and the size of the findings table per 1,000 findings.

    python bench/fleet.py                      # both, ~2 minutes on 2 cores
    python bench/fleet.py --only dask --storm-files 50 --storm-frames 20000
    python bench/fleet.py --only parquet
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
from dask_cluster import local_cluster  # noqa: E402

IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main", "audit", "--quiet", "--format", "json"]


def _timed(args: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t = time.monotonic()
    p = subprocess.run(IBPATH + args, capture_output=True, text=True)
    return time.monotonic() - t, p


def storm_dir(work: Path, files: int, frames: int) -> Path:
    """files SA storms (bench capture 2) of `frames` frames each, each a file of its own."""
    d = work / "storms"
    d.mkdir()
    first = corpus.write_capture2(d / "storm-000.pcap", frames)
    for i in range(1, files):
        shutil.copy(first, d / f"storm-{i:03d}.pcap")
    return d


def corpus_dir(work: Path) -> Path:
    d = work / "corpus"
    shutil.copytree(ROOT / "captures" / "corpus", d)
    return d


def bench_dask(work: Path, dirs: list[Path], runs: int) -> None:
    print("| inputs | files | serial | dask, 1 worker | dask, 2 workers | reports |")
    print("|---|---|---|---|---|---|")
    rows = {d: {"serial": [], 1: [], 2: []} for d in dirs}
    same = {d: True for d in dirs}
    serial_out = {}
    for d in dirs:
        for _ in range(runs):
            t, p = _timed([str(d)])
            rows[d]["serial"].append(t)
            serial_out[d] = (p.returncode, p.stdout, p.stderr)
    for n in (1, 2):
        with local_cluster(work / f"cluster-{n}", workers=n) as address:
            for d in dirs:
                for _ in range(runs):
                    t, p = _timed(["--dask", address, str(d)])
                    rows[d][n].append(t)
                    same[d] &= (p.returncode, p.stdout, p.stderr) == serial_out[d]
    for d in dirs:
        files = sum(1 for f in d.rglob("*") if f.is_file() and f.suffix in (".pcap", ".pcapng"))
        r = rows[d]
        print(f"| {d.name} | {files} | {min(r['serial']):.1f} s | {min(r[1]):.1f} s | "
              f"{min(r[2]):.1f} s | {'identical' if same[d] else 'DIFFER'} |")


def bench_parquet(work: Path) -> None:
    """The corpus audited once, its FileAudits repeated as files of many hosts, written with
    the real writer: bytes per 1,000 findings at several sizes."""
    from ibpath_scapy.audit.model import AuditOptions
    from ibpath_scapy.audit.parquet import write_findings, write_resolutions
    from ibpath_scapy.audit.run import audit_paths, expand_inputs
    files, _ = expand_inputs([str(ROOT / "captures" / "corpus")])
    audits, _ = audit_paths(files, AuditOptions(keep_transactions=False, tables=True), quiet=True)
    per_copy = sum(len(a.findings) for a in audits)
    print("| findings | resolutions | findings table | per 1,000 findings | resolutions table |")
    print("|---|---|---|---|---|")
    for copies in (1, 11, 109, 1087):
        fleet = []
        for k in range(copies):
            for a in audits:
                path = f"/srv/captures/host{k:04d}/{Path(a.path).name}"
                fleet.append(dataclasses.replace(
                    a, path=path, findings=[dataclasses.replace(f, file=path)
                                            for f in a.findings]))
        out, res = work / f"f{copies}.parquet", work / f"r{copies}.parquet"
        n = write_findings(str(out), fleet, "all")
        m = write_resolutions(str(res), fleet, "all")
        size = out.stat().st_size
        print(f"| {n:,} | {m:,} | {size:,} B | {size * 1000 / n:,.0f} B | "
              f"{res.stat().st_size:,} B |")
    print(f"(the corpus: {per_copy} findings in {len(audits)} captures per copy)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("dask", "parquet"))
    ap.add_argument("--storm-files", type=int, default=50)
    ap.add_argument("--storm-frames", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--keep", type=Path, help="work here (kept) instead of a temporary folder")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="ibpath-fleet-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.only in (None, "parquet"):
            bench_parquet(work)
        if args.only in (None, "dask"):
            dirs = [corpus_dir(work), storm_dir(work, args.storm_files, args.storm_frames)]
            bench_dask(work, dirs, args.runs)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    sys.exit(main())
