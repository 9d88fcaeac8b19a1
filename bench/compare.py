"""bench/suite.py's ibpath rows for two installs of ibpath, in one interleaved run: what a
redesign must show before and after (issue 40: every row within 5 %).

    python bench/compare.py OLD_PYTHON NEW_PYTHON [--runs 3] [--frames1 200000]
                            [--frames2 50000] [--frames3 50000] [--encap rocev2|ib|both]
                            [--keep DIR]

OLD_PYTHON and NEW_PYTHON are the interpreters of two environments that have ibpath
installed (e.g. two git worktrees, each with its .venv). For each bench capture (corpus.py's
captures 1, 2 and 3, classic pcap), `ibpath audit --quiet --format json` and `ibpath decode
--format json` of both run in turn, --runs times, and the best CPU time of each is kept
(suite.py's measure and interleaved: the CPU of that child alone, so that the neighbours'
load weighs on both alike). Printed: CPU seconds old and new, and the change.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from corpus import write_capture1, write_capture2, write_capture3  # noqa: E402
from suite import installed_env, interleaved  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path, help="the python of the install before the change")
    ap.add_argument("new", type=Path, help="the python of the install after it")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--frames1", type=int, default=200_000)
    ap.add_argument("--frames2", type=int, default=50_000)
    ap.add_argument("--frames3", type=int, default=50_000)
    ap.add_argument("--encap", choices=("rocev2", "ib", "both"), default="both")
    ap.add_argument("--keep", type=Path, help="write (or reuse) the captures in this directory")
    args = ap.parse_args()
    for py in (args.old, args.new):
        if not py.is_file():
            raise SystemExit(f"{py}: no such interpreter")
    encaps = ("rocev2", "ib") if args.encap == "both" else (args.encap,)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        envs = {v: installed_env(Path(tmp) / f"pycache-{v}") for v in ("old", "new")}
        for encap in encaps:
            for n, frames, write in ((1, args.frames1, write_capture1),
                                     (2, args.frames2, write_capture2),
                                     (3, args.frames3, write_capture3)):
                path = d / f"capture{n}-{frames}-{encap}.pcap"
                if not path.exists():
                    write(path, frames, encap=encap)
                cmds = {}
                for verb, argv in (("audit", ["audit", "--quiet", "--format", "json"]),
                                   ("decode", ["decode", "--format", "json"])):
                    for v, py in (("old", args.old), ("new", args.new)):
                        # -P: the install's package, not one in the working directory
                        cmd = [str(py), "-P", "-m", "ibpath_scapy", *argv, str(path)]
                        cmds[(verb, v)] = (cmd, envs[v])
                got = interleaved(cmds, args.runs)
                for verb in ("audit", "decode"):
                    old, new = got[(verb, "old")], got[(verb, "new")]
                    rows.append((f"capture {n} {encap}", frames, verb, old[0], new[0], old[2],
                                 new[2]))
                    print(_line(rows[-1]), flush=True)
    print()
    print(f"{'row':<18} {'frames':>8} {'what':<7} {'old CPU s':>10} {'new CPU s':>10} "
          f"{'change':>8} {'old RSS':>8} {'new RSS':>8}")
    for r in rows:
        print(_line(r))


def _line(r: tuple) -> str:
    name, frames, verb, old, new, old_rss, new_rss = r
    return (f"{name:<18} {frames:>8,} {verb:<7} {old:10.2f} {new:10.2f} "
            f"{(new - old) / old * 100:+7.1f}% {old_rss:6.0f} MB {new_rss:6.0f} MB")


if __name__ == "__main__":
    main()
