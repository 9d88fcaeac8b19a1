"""What `ibpath record`'s shim (ibpath_scapy/record/ibpathrec.c) costs a program (issue 20).

Two programs, each run with and without the shim preloaded (spool on a tmpfs-backed temp
file, as `ibpath record` does):

- 100,000 write()s of 64 bytes to /dev/null: calls the shim only looks at (an fd it does not
  track): the cost every program pays;
- 10,000 ucma RESOLVE_ROUTE commands to a stand-in /dev/infiniband/rdma_cm (a regular file in
  a mount namespace of this script's own, as tests/test_record_shim.py sets it up;
  tests/data/record/ucmaprog.c --bench): each is recorded.

Reported per case: the program's own loop time (CLOCK_MONOTONIC around the calls) and the
whole process's wall time (start, preload, constructor, exit), best and median of --runs.

    python bench/record_overhead.py [--runs 7]     (root: it uses unshare -m)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from ibpath_scapy.record.process import build_shim  # noqa: E402
from test_record_shim import NAMESPACE_SH  # noqa: E402

WRITES_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	long n = atol(argv[1]), i;
	char buf[64] = { 0 };
	struct timespec t0, t1;
	int fd = open("/dev/null", O_WRONLY);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < n; i++)
		if (write(fd, buf, sizeof(buf)) != sizeof(buf))
			return 1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%lld\n", (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL +
	       (t1.tv_nsec - t0.tv_nsec));
	return 0;
}
"""


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(loop seconds as the program measured it, process wall seconds)."""
    t0 = time.perf_counter()
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - t0
    return int(out.split()[-1]) / 1e9, wall


def measure(name: str, argv: list[str], calls: int, runs: int, shim: Path, tmp: Path) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("IBPATHREC_")
            and k != "LD_PRELOAD"}
    rows = {}
    for label, preload in (("without", False), ("with", True)):
        loops, walls = [], []
        for i in range(runs):
            env = dict(base)
            if preload:
                spool = tmp / f"{name}-{i}.spool"
                env.update(LD_PRELOAD=str(shim), IBPATHREC_SPOOL=str(spool))
            loop, wall = run(argv, env)
            loops.append(loop)
            walls.append(wall)
        rows[label] = (loops, walls)
    wo, wi = rows["without"], rows["with"]
    return {
        "name": name, "calls": calls,
        "loop_without": min(wo[0]), "loop_with": min(wi[0]),
        "loop_without_med": statistics.median(wo[0]), "loop_with_med": statistics.median(wi[0]),
        "wall_without": min(wo[1]), "wall_with": min(wi[1]),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--writes", type=int, default=100_000)
    ap.add_argument("--ucma", type=int, default=10_000)
    args = ap.parse_args()
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or os.geteuid() != 0 or not shutil.which("unshare"):
        print("needs cc, root and unshare", file=sys.stderr)
        return 2
    shim = build_shim()
    with tempfile.TemporaryDirectory(prefix="ibpath-bench-") as d:
        tmp = Path(d)
        (tmp / "writes.c").write_text(WRITES_C)
        subprocess.run([cc, "-O2", "-o", str(tmp / "writes"), str(tmp / "writes.c")], check=True)
        subprocess.run([cc, "-O2", "-no-pie", "-pthread", "-o", str(tmp / "ucmaprog"),
                        str(REPO / "tests" / "data" / "record" / "ucmaprog.c")], check=True)
        results = [measure("non-RDMA write()s to /dev/null", [str(tmp / "writes"),
                                                               str(args.writes)],
                           args.writes, args.runs, shim, tmp),
                   measure("ucma commands to rdma_cm (recorded)",
                           ["unshare", "-m", "sh", "-c", NAMESPACE_SH, "sh",
                            str(tmp / "ucmaprog"), "--bench", str(args.ucma)],
                           args.ucma, args.runs, shim, tmp)]
    print(f"best of {args.runs} runs (median in brackets); loop = the calls alone, "
          "process = wall time of the whole program")
    print(f"{'program':40} {'calls':>7} {'loop without':>14} {'loop with':>14} "
          f"{'per call +':>11} {'process without':>16} {'process with':>13}")
    for r in results:
        extra = (r["loop_with"] - r["loop_without"]) / r["calls"] * 1e9
        print(f"{r['name']:40} {r['calls']:>7} "
              f"{r['loop_without'] * 1e3:>8.2f} ms ({r['loop_without_med'] * 1e3:.1f}) "
              f"{r['loop_with'] * 1e3:>6.2f} ms ({r['loop_with_med'] * 1e3:.1f}) "
              f"{extra:>8.0f} ns {r['wall_without'] * 1e3:>13.1f} ms "
              f"{r['wall_with'] * 1e3:>10.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
