"""Peak RSS of `ibpath audit FILE` in terminal mode (issue 17): stdout and stderr on a
pseudo-terminal, as a person at a terminal runs it, on capture 2 (corpus.py) at 200,000 frames.

    python bench/tty_rss.py [--frames 200000] [--keep DIR] [--ladder]

The child gets a pty as stdout and stderr (so the text report, its default on a terminal,
and the progress line are both on), its output is read and counted as it comes (a terminal
drains it too), and its peak RSS is read with wait4 for that child alone. --ladder forces
the ladder diagrams as well (what the terminal default was before issue 17). Target: under
300 MB.
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from corpus import write_capture2  # noqa: E402
from suite import IBPATH  # noqa: E402

TARGET_MB = 300


def run_on_pty(cmd: list[str], env: dict | None
               ) -> tuple[int, float, float, int, bytes, bytes, float]:
    """(exit status, peak RSS MB, wall seconds, bytes written, the first and the last 4,000
    bytes of output, CPU seconds) of cmd run with a pseudo-terminal as its stdout and stderr
    (bench/rss_formats.py runs its terminal case here too)."""
    master, slave = pty.openpty()
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env,
                            close_fds=True)
    os.close(slave)
    total, head, tail = 0, b"", b""
    while True:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        total += len(chunk)
        if len(head) < 4000:
            head += chunk[:4000 - len(head)]
        tail = (tail + chunk)[-4000:]
    _, status, ru = os.wait4(proc.pid, 0)
    os.close(master)
    return (os.waitstatus_to_exitcode(status), ru.ru_maxrss / 1024,
            time.perf_counter() - t, total, head, tail, ru.ru_utime + ru.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=200_000)
    ap.add_argument("--keep", help="write (or reuse) the capture in this directory")
    ap.add_argument("--ladder", action="store_true", help="also force --ladder")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(args.keep or tmp)
        d.mkdir(parents=True, exist_ok=True)
        path = d / f"capture2-{args.frames}.pcap"
        if not path.exists():
            write_capture2(path, args.frames)
        env = {**os.environ, "IBPATH_FASTPATH": "1"}
        base = IBPATH + ["audit", str(path)]
        runs = [("terminal default", base)] + ([("--ladder", base + ["--ladder"])]
                                               if args.ladder else [])
        print(f"capture 2, {args.frames:,} frames, {path.stat().st_size / 2**20:.0f} MiB")
        for name, cmd in runs:
            rc, rss, wall, nbytes, _, tail, _ = run_on_pty(cmd, env)
            if rc not in (0, 1) or b"Traceback" in tail:
                raise SystemExit(f"{name}: exit {rc}: {tail.decode(errors='replace')}")
            ok = "ok" if rss < TARGET_MB else f"OVER the {TARGET_MB} MB target"
            print(f"{name:>17}: peak RSS {rss:6.0f} MB ({ok}), {wall:5.0f} s wall, "
                  f"{nbytes / 1024:,.0f} KiB to the terminal, exit {rc}")
            last = [ln for ln in tail.decode(errors="replace").splitlines() if ln.strip()]
            print(f"{'':>19}last lines: {last[-2:]}")


if __name__ == "__main__":
    main()
