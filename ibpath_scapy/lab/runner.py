"""Boot the lab guest headless under QEMU (TCG), run scenarios, bring the results back.

One boot runs every requested scenario in turn (booting costs more than a scenario). The
run's files reach the guest as a second newc archive appended to the cached base initramfs
(the kernel unpacks concatenated archives in order); the results come back as a tar stream
the guest writes onto a raw virtio disk, and the serial console is kept as console.log.

KVM on these hosts is a nested kind that a stock guest kernel cannot use, so the accelerator
is TCG (software emulation) and one guest takes a whole core.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

from .cpio import CpioWriter
from .guest import Guest, LabError, require_tools

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent  # ibpath_scapy/
DISK_BYTES = 64 * 1024 * 1024
MEMORY_MB = 1536
BOOT_TIMEOUT = 900


GUEST_SHIM = "lab/ibpathrec.so"  # the recorder shim built on the host (the guest has no cc)
RECORDED_KINDS = ("acm", "record", "record-netlink")  # the kinds that run `ibpath record`


def overlay(scenarios: dict, shim: Path | None = None) -> bytes:
    """The run's archive: /init, the project's Python source under /lab, scenarios.json, and
    the host-built recorder shim when `ibpath record` runs in the guest (acm and record
    scenarios)."""
    buf = io.BytesIO()
    w = CpioWriter(buf)
    w.file("init", (HERE / "guestinit.sh").read_bytes(), 0o755)
    w.directory("lab")
    w.directory(f"lab/{PACKAGE.name}")
    for path in sorted(PACKAGE.rglob("*")):
        rel = path.relative_to(PACKAGE.parent)
        if "__pycache__" in rel.parts:
            continue
        if path.is_dir():
            w.directory(f"lab/{rel}")
        elif path.suffix == ".py":
            w.file(f"lab/{rel}", path.read_bytes())
    w.file("lab/scenarios.json", json.dumps(scenarios, indent=1).encode())
    if shim is not None:
        w.file(GUEST_SHIM, shim.read_bytes(), 0o755)
    w.close()
    return buf.getvalue()


def boot(guest: Guest, scenarios: dict, workdir: Path, *, log=print,
         timeout: float = BOOT_TIMEOUT) -> Path:
    """Boot once, run the scenarios; returns the directory the guest's results went to
    (workdir/results). console.log in workdir keeps the serial console."""
    require_tools("qemu-system-x86_64")
    workdir.mkdir(parents=True, exist_ok=True)
    initrd = workdir / "initrd.cpio"
    with open(initrd, "wb") as out:
        for part in guest.initramfs:  # the kernel unpacks concatenated archives in order
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
        shim = None
        if any(sc["kind"] in RECORDED_KINDS for sc in scenarios["scenarios"]):
            # host and guest are both bookworm: the host's build of the shim runs there
            from ..record.process import RecordError, build_shim
            try:
                shim = build_shim()
            except RecordError as exc:
                raise LabError(f"the recorder shim for the guest: {exc}") from None
        out.write(overlay(scenarios, shim))
    disk = workdir / "results.img"
    with open(disk, "wb") as f:
        f.truncate(DISK_BYTES)
    console = workdir / "console.log"
    args = ["qemu-system-x86_64", "-accel", "tcg", "-m", str(MEMORY_MB), "-smp", "1",
            "-nographic", "-no-reboot", "-kernel", str(guest.kernel), "-initrd", str(initrd),
            "-append", "console=ttyS0 panic=-1 quiet loglevel=4",
            "-drive", f"file={disk},format=raw,if=virtio", "-nic", "none"]
    t0 = time.monotonic()
    with open(console, "wb") as con:
        proc = subprocess.Popen(args, stdout=con, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise LabError(f"the guest did not finish within {timeout:.0f} s (see {console})")
    seconds = time.monotonic() - t0
    initrd.unlink()
    results = workdir / "results"
    if results.exists():
        shutil.rmtree(results)
    try:
        with tarfile.open(disk, mode="r:") as tar:
            tar.extractall(workdir, filter="data")
    except tarfile.TarError as exc:
        tail = console.read_text(errors="replace")[-2000:]
        raise LabError(f"no results on the guest's disk ({exc}); console tail:\n{tail}") from None
    disk.unlink()
    meta_path = results / "meta.json"
    if not meta_path.exists():
        tail = console.read_text(errors="replace")[-2000:]
        raise LabError(f"the guest wrote no results; console tail:\n{tail}")
    meta = json.loads(meta_path.read_text())
    meta["boot_seconds"] = round(seconds, 1)
    meta_path.write_text(json.dumps(meta, indent=1) + "\n")
    log(f"ibpath lab: guest ran {len(scenarios['scenarios'])} scenario(s) in {seconds:.0f} s")
    return results

