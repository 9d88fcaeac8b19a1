"""Issue 22's memory target: peak RSS under 300 MB on both captures at 1,000,000 and 4,000,000
frames, in every output format, the terminal's included.

    python bench/rss_formats.py [--sizes 1000000,4000000] [--only 1|2|3] [--encap rocev2|ib]
                                [--formats text,json,...] [--keep DIR]

For capture 1 (RoCEv2, 5 % SA and CM MADs, 95 % RC data), capture 2 (SA PathRecord
queries and RMPP GetTableResp answers only) and capture 3 (an SA storm of distinct paths),
written by corpus.py at each size (suite.py's
captures(); --keep reuses them), it runs once per format:

    text      ibpath audit --quiet --format text FILE
    json      ibpath audit --quiet --format json FILE
    junit     ibpath audit --quiet --format junit FILE
    html      ibpath audit --quiet --format html FILE
    ladder    ibpath audit --quiet --format text --ladder FILE
    terminal  ibpath audit FILE, stdout and stderr on a pseudo-terminal (tty_rss.py's
              run_on_pty: the text report, its progress line, the ladder when the input is
              under cli.audit.TTY_LADDER_LIMIT)
    decode-json  ibpath decode --format json FILE
    decode-text  ibpath decode FILE

The report goes to /dev/null (the terminal's to the pty, read as it comes). Printed: peak RSS
of that child alone (wait4's ru_maxrss), its CPU seconds (user + system) and whether the
300 MB target is met. Runs are one at a time (the machine is shared: CPU seconds still move
with its load, peak RSS does not).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from suite import IBPATH, RSS_TARGET_MB, captures, measure  # noqa: E402
from tty_rss import run_on_pty  # noqa: E402

_AUDIT = IBPATH + ["audit"]
_DECODE = IBPATH + ["decode"]
# format name -> (command before the file, run under a pseudo-terminal)
FORMATS = {
    "text": (_AUDIT + ["--quiet", "--format", "text"], False),
    "json": (_AUDIT + ["--quiet", "--format", "json"], False),
    "junit": (_AUDIT + ["--quiet", "--format", "junit"], False),
    "html": (_AUDIT + ["--quiet", "--format", "html"], False),
    "ladder": (_AUDIT + ["--quiet", "--format", "text", "--ladder"], False),
    "terminal": (_AUDIT, True),
    "decode-json": (_DECODE + ["--format", "json"], False),
    "decode-text": (_DECODE, False),
}


def run_format(name: str, path: Path, env: dict) -> tuple[float, float]:
    """(CPU seconds, peak RSS MB) of one run of format `name` on path."""
    cmd, on_pty = FORMATS[name]
    cmd = cmd + [str(path)]
    if not on_pty:
        cpu, _, rss = measure(cmd, env)
        return cpu, rss
    rc, rss, _, _, _, tail, cpu = run_on_pty(cmd, env)
    if rc not in (0, 1) or b"Traceback" in tail:
        raise SystemExit(f"{' '.join(cmd)} failed ({rc}): {tail.decode(errors='replace')}")
    return cpu, rss


def row(n: int, encap: str, frames: int, name: str, cpu: float, rss: float) -> str:
    met = "met" if rss < RSS_TARGET_MB else "NOT met"
    return (f"capture {n} {encap:<7} {frames:>10,} {name:<12} {rss:7.0f} MB {cpu:9.1f} s  "
            f"{met}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,4000000",
                    help="comma-separated frame counts (default: %(default)s)")
    ap.add_argument("--only", type=int, choices=(1, 2, 3), help="one capture only")
    ap.add_argument("--encap", choices=("rocev2", "ib", "both"), default="rocev2")
    ap.add_argument("--formats", default=",".join(FORMATS),
                    help="comma-separated, of: %(default)s")
    ap.add_argument("--keep", type=Path, help="write (or reuse) the captures in this directory")
    args = ap.parse_args()
    names = args.formats.split(",")
    unknown = set(names) - set(FORMATS)
    if unknown:
        ap.error(f"unknown format(s): {', '.join(sorted(unknown))}")
    env = {**os.environ, "IBPATH_FASTPATH": "1"}
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        print(f"{'':8} {'':7} {'frames':>10} {'format':<12} {'peak RSS':>10} {'CPU':>11}  "
              f"target < {RSS_TARGET_MB} MB", flush=True)
        for size in (int(s) for s in args.sizes.split(",")):
            sel = argparse.Namespace(encap=args.encap, only=args.only, frames1=size,
                                     frames2=size, frames3=size)
            for n, encap, frames, path in captures(sel, d):
                for name in names:
                    cpu, rss = run_format(name, path, env)
                    lines.append(row(n, encap, frames, name, cpu, rss))
                    print(lines[-1], flush=True)
    met = sum("NOT" not in ln for ln in lines)
    print(f"\n{met} of {len(lines)} runs under {RSS_TARGET_MB} MB; python "
          f"{sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
