"""`ibpath lab build|list|run`: the kernel lab (a Debian kernel with soft-RoCE under QEMU)."""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser(
        "lab", help="run scenarios on a real kernel with soft-RoCE, in a QEMU guest",
        description="Build a guest from Debian packages (mmdebstrap bookworm + a stock "
        "linux-image-6.1 kernel, cached under $IBPATH_LAB_CACHE or ~/.cache/ibpath/lab), boot "
        "it headless under QEMU (TCG), run scenarios with rdma_rxe on a veth pair and bring "
        "back captures: RoCEv2 traffic with the blob frames, and NETLINK_RDMA recordings. "
        "Needs qemu-system-x86_64 and mmdebstrap on the host. Exit status: 0 every scenario "
        "ran as expected, 1 some did not, 2 the lab cannot be built or booted.")
    kinds = p.add_subparsers(dest="lab_command", required=True)
    b = kinds.add_parser("build", help="build the guest into the cache (once)")
    b.add_argument("--force", action="store_true", help="rebuild everything")
    b.set_defaults(func=run_build)
    ls = kinds.add_parser("list", help="list the scenarios")
    ls.set_defaults(func=run_list)
    r = kinds.add_parser("run", help="boot the guest once and run scenarios in it")
    r.add_argument("scenarios", nargs="+", metavar="SCENARIO|all")
    r.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="where the captures and lab.json go")
    r.add_argument("--keep", action="store_true",
                   help="also keep the guest's raw results and console log in DIR/raw")
    r.set_defaults(func=run_run)
    m = kinds.add_parser("acm-matrix", help="write the stand-in ibacm matrix of acm runs",
                         description="Read DIR's acm-*.pcapng (from `ibpath lab run acm-all "
                         "-o DIR`), audit them and write DIR/matrix.json, DIR/manifest.json "
                         "(for `ibpath craft --verify DIR`) and print the matrix as Markdown.")
    m.add_argument("directory", metavar="DIR")
    m.set_defaults(func=run_acm_matrix)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_build(args) -> int:
    from ..lab.guest import LabError, build
    t0 = time.monotonic()
    try:
        guest = build(force=args.force, log=_log)
    except LabError as exc:
        _log(f"ibpath lab build: {exc}")
        return 2
    m = guest.manifest
    _log(f"ibpath lab: guest ready ({m['kernel_package']} {m['kernel_package_version']}, "
         f"{m['cache_bytes'] / 1e6:.0f} MB cache) in {time.monotonic() - t0:.0f} s")
    return 0


def run_list(args) -> int:
    from ..lab.scenarios import SCENARIOS
    for sc in SCENARIOS:
        print(f"{sc.name:28} {sc.description}")
    return 0


def run_run(args) -> int:
    from ..lab.export import export
    from ..lab.guest import LabError, build, cache_dir
    from ..lab.runner import boot
    from ..lab.scenarios import select
    try:
        chosen = select(args.scenarios)
    except KeyError as exc:
        _log(f"ibpath lab run: {exc.args[0]}")
        return 2
    out = Path(args.output)
    command = "ibpath lab run " + " ".join(shlex.quote(a) for a in args.scenarios) + \
        f" -o {shlex.quote(args.output)}"
    spec = {"command": command, "scenarios": [s.to_json() for s in chosen]}
    t0 = time.monotonic()
    try:
        guest = build(log=_log)
        cache_dir().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="run-", dir=cache_dir()) as work:
            results = boot(guest, spec, Path(work), log=_log)
            lab = export(results, out)
            if args.keep:
                raw = out / "raw"
                if raw.exists():
                    shutil.rmtree(raw)
                shutil.copytree(results, raw)
                shutil.copy(Path(work) / "console.log", raw / "console.log")
    except (LabError, OSError) as exc:
        _log(f"ibpath lab run: {exc}")
        return 2
    from ..lab.scenarios import lookup
    failed = [n for n, s in lab["scenarios"].items()
              if (not s.get("client_exit") and not s.get("server_exit")) != lookup(n).connects
              or ("client_exit" not in s)]
    for name, s in lab["scenarios"].items():
        verdict = s.get("set_option", "-")
        expect = "" if lookup(name).connects else " (meant not to connect)"
        _log(f"  {name:28} rdma_set_option={verdict!s:8} client {s.get('client_exit')} "
             f"server {s.get('server_exit')} {s.get('seconds')} s{expect}"
             + (f"  {s['error']}" if s.get("error") and name in failed else ""))
    _log(f"ibpath lab: {len(chosen)} scenario(s), {len(failed)} not as expected, in "
         f"{time.monotonic() - t0:.0f} s; captures in {out}")
    return 1 if failed else 0


def run_acm_matrix(args) -> int:
    from ..lab import acmmatrix
    from ..capture.pcapio import CaptureError
    try:
        table = acmmatrix.write(args.directory)
    except (OSError, ValueError, CaptureError) as exc:
        _log(f"ibpath lab acm-matrix: {exc}")
        return 2
    if not table:
        _log(f"ibpath lab acm-matrix: {args.directory}: no acm-*.pcapng")
        return 2
    print(acmmatrix.markdown(table), end="")
    return 0
