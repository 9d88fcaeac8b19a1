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
    b = kinds.add_parser("build", help="build the guest into the cache (once per kernel)")
    b.add_argument("--force", action="store_true", help="rebuild everything")
    _kernel_options(b)
    b.set_defaults(func=run_build)
    k = kinds.add_parser("kernels", help="list the Debian kernels --kernel can name, and the "
                         "kernels in the cache")
    k.add_argument("--update", action="store_true", help="fetch the package lists again")
    k.set_defaults(func=run_kernels)
    ls = kinds.add_parser("list", help="list the scenarios")
    ls.set_defaults(func=run_list)
    r = kinds.add_parser("run", help="boot the guest once and run scenarios in it")
    r.add_argument("scenarios", nargs="+", metavar="SCENARIO|all")
    r.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="where the captures and lab.json go")
    r.add_argument("--keep", action="store_true",
                   help="also keep the guest's raw results and console log in DIR/raw")
    _kernel_options(r)
    r.set_defaults(func=run_run)
    c = kinds.add_parser("check", help="hold a run's results against the kernel profiles "
                         "again", description="Write DIR/profiles.json and DIR/profiles.md "
                         "for the run in DIR (what `lab run` does at its end) and print the "
                         "table. Exit status 1 when the kernel departs from a profile.")
    c.add_argument("directory", metavar="DIR")
    c.set_defaults(func=run_check)
    d = kinds.add_parser("diff", help="what changed between two runs on two kernels",
                         description="Compare two runs (`lab run ... -o A`, `-o B`, on two "
                         "kernels) scenario by scenario: outcomes, ucma answers, the CM REQ, "
                         "the QUERY PATH readback. A field that also differs between A and "
                         "another run of A's kernel (--same-kernel) is reported as varying "
                         "run to run, not as a change.")
    d.add_argument("a", metavar="A")
    d.add_argument("b", metavar="B")
    d.add_argument("--same-kernel", action="append", default=[], metavar="C",
                   help="another run of A's kernel (repeatable)")
    d.set_defaults(func=run_diff)
    m = kinds.add_parser("acm-matrix", help="write the stand-in ibacm matrix of acm runs",
                         description="Read DIR's acm-*.pcapng (from `ibpath lab run acm-all "
                         "-o DIR`), audit them and write DIR/matrix.json, DIR/manifest.json "
                         "(for `ibpath craft --verify DIR`) and print the matrix as Markdown.")
    m.add_argument("directory", metavar="DIR")
    m.set_defaults(func=run_acm_matrix)


def _kernel_options(p) -> None:
    p.add_argument("--kernel", metavar="K", help="the guest's kernel: a Debian kernel by "
                   "version (6.1, 6.12, 7.3.4), by package name (linux-image-...-amd64) or "
                   "'newest' (bookworm, its backports, trixie, trixie-backports, sid), or a "
                   "bzImage of your own build with --modules; default: Debian 12's 6.1")
    p.add_argument("--modules", metavar="DIR", help="with --kernel PATH/bzImage: the "
                   "INSTALL_MOD_PATH of its `make modules_install` (DIR/lib/modules/RELEASE; "
                   "rdma_rxe, rdma_ucm, ib_uverbs, veth and virtio_blk as modules or built in)")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_build(args) -> int:
    from ..lab.guest import LabError, build
    t0 = time.monotonic()
    try:
        guest = build(kernel=args.kernel, modules=args.modules, force=args.force, log=_log)
    except LabError as exc:
        _log(f"ibpath lab build: {exc}")
        return 2
    m = guest.manifest
    _log(f"ibpath lab: guest ready (kernel {guest.release}, {_origin(m['kernel'])}; "
         f"{m['cache_bytes'] / 1e6:.0f} MB cache) in {time.monotonic() - t0:.0f} s")
    return 0


def _origin(info: dict) -> str:
    o = info["origin"]
    if o["kind"] == "debian":
        return f"{o['package']} {o['version']}"
    return f"own build {o['image']} (sha256 {o['image_sha256'][:12]}), modules {o['modules']}"


def run_kernels(args) -> int:
    from ..lab.guest import cache_dir, cached_kernels
    from ..lab.kernels import LAB_SUITES, Archive, KernelError
    archive = Archive(cache_dir() / "apt")
    try:
        archive.update(force=args.update)
        names = archive.images()
    except KernelError as exc:
        _log(f"ibpath lab kernels: {exc}")
        return 2
    print(f"# Debian kernels in {', '.join(s for _, s in LAB_SUITES)} (oldest first)")
    for name in names:
        print(name)
    print("# in the cache")
    for info in cached_kernels():
        print(f"{info['release']:32} {_origin(info)}")
    return 0


def run_list(args) -> int:
    from ..lab.scenarios import IB_SERVICE_RUN, SCENARIOS
    for sc in (*SCENARIOS, IB_SERVICE_RUN):
        print(f"{sc.name:28} {sc.description}")
    print(f"{'all':28} every scenario above but {IB_SERVICE_RUN.name}")
    print(f"{'record-all':28} each of them under ibpath record (rec-NAME), and rec-netlink-rdma-dev")
    print(f"{'acm-all':28} the stand-in ibacm runs (acm-<craft scenario>)")
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
    if args.kernel:
        command += f" --kernel {shlex.quote(args.kernel)}"
    if args.modules:
        command += f" --modules {shlex.quote(args.modules)}"
    spec = {"command": command, "scenarios": [s.to_json() for s in chosen]}
    t0 = time.monotonic()
    try:
        guest = build(kernel=args.kernel, modules=args.modules, log=_log)
        cache_dir().mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="run-", dir=cache_dir()) as work:
            results = boot(guest, spec, Path(work), log=_log)
            lab = export(results, out, guest.manifest["kernel"])
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
    failed = [n for n, s in lab["scenarios"].items() if not lookup(n).as_expected(s)]
    for name, s in lab["scenarios"].items():
        verdict = s.get("set_option", "-")
        sc = lookup(name)
        expect = "" if sc.connects or sc.client == "ibservice" else " (meant not to connect)"
        _log(f"  {name:28} rdma_set_option={verdict!s:8} client {s.get('client_exit')} "
             f"server {s.get('server_exit')} {s.get('seconds')} s{expect}"
             + (f"  {s['error']}" if s.get("error") and name in failed else ""))
    from ..lab import profilecheck
    rows, table = profilecheck.write(out)
    departs = [r for r in rows if r.agrees is False]
    if rows:
        print(table, end="")
    _log(f"ibpath lab: kernel {lab['kernel_release']}: {len(chosen)} scenario(s), "
         f"{len(failed)} not as expected; {len(rows)} profile predictions, {len(departs)} "
         f"departure(s) (profiles.md); in {time.monotonic() - t0:.0f} s; captures in {out}")
    return 1 if failed or departs else 0


def _lab_dir(path: str) -> str | None:
    """Why `path` is not a lab run's directory, or None."""
    if not (Path(path) / "lab.json").is_file():
        return f"{path}: no lab.json (not the -o DIR of `ibpath lab run`)"
    return None


def run_check(args) -> int:
    from ..lab import profilecheck
    from ..capture.pcapio import CaptureError
    if (why := _lab_dir(args.directory)):
        _log(f"ibpath lab check: {why}")
        return 2
    try:
        rows, table = profilecheck.write(args.directory)
    except (OSError, ValueError, KeyError, CaptureError) as exc:
        _log(f"ibpath lab check: {args.directory}: {exc}")
        return 2
    print(table, end="")
    return 1 if any(r.agrees is False for r in rows) else 0


def run_diff(args) -> int:
    from ..lab import kerneldiff
    from ..capture.pcapio import CaptureError
    for d in (args.a, args.b, *args.same_kernel):
        if (why := _lab_dir(d)):
            _log(f"ibpath lab diff: {why}")
            return 2
    try:
        result = kerneldiff.diff(args.a, args.b, args.same_kernel)
    except (OSError, ValueError, KeyError, CaptureError) as exc:
        _log(f"ibpath lab diff: {exc}")
        return 2
    print(kerneldiff.markdown(result), end="")
    return 0


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
