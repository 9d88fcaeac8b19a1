"""Build and cache the lab guest from Debian packages only.

The cache ($IBPATH_LAB_CACHE, else ~/.cache/ibpath/lab) holds:

    debs/linux-image-*.deb     `apt-get download` of the newest linux-image-6.1.0-N-amd64
    kernel/boot/               that package unpacked with `dpkg-deb -x` (its modules are
                               dropped once base.cpio has the ones the lab needs)
    rootfs/                    mmdebstrap bookworm minbase + GUEST_PACKAGES
    base.cpio                  rootfs + the kernel modules the lab needs: the initramfs, which
                               is the guest's whole root file system
    wheels/scapy-*.whl         `pip download` of the scapy the host venv runs: bookworm's
                               python3-scapy (2.5.0) lacks what the project's layers use
                               (PacketListField max_count), so the wheel is unpacked over it
                               into /usr/local/lib/python3.11/dist-packages
    manifest.json              what was built from what, sizes and build times

A stock Debian kernel is used as it is: no initramfs-tools, no kernel build. Only the modules
reachable from LAB_MODULES (their .modinfo "depends=") go into the image; the guest's /init
runs depmod over them, so the image needs no host-side kmod.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .cpio import CpioWriter

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
GUEST_PACKAGES = ("rdma-core", "ibverbs-providers", "ibverbs-utils", "rdmacm-utils", "iproute2",
                  "tcpdump", "strace", "kmod", "python3", "python3-scapy")
KERNEL_PATTERN = re.compile(r"^linux-image-6\.1\.0-(\d+)-amd64$")
# The roots of the module closure: soft-RoCE and the RDMA CM user API, the veth pair, and the
# virtio disk that carries the results back. crc32_generic is what rdma_rxe's crc32 needs.
LAB_MODULES = ("rdma_rxe", "rdma_ucm", "ib_uverbs", "crc32_generic", "veth", "virtio_pci",
               "virtio_blk")
# Parts of the rootfs the guest never reads (saves about a fifth of the image).
SKIP_DIRS = ("proc", "sys", "dev", "usr/share/doc", "usr/share/locale", "usr/share/man",
             "usr/share/info", "usr/lib/udev", "var/cache/apt", "var/lib/apt/lists")


PY_SITE = "usr/local/lib/python3.11/dist-packages"


class LabError(Exception):
    """The lab cannot be built or run; the message says which step and why."""


def cache_dir() -> Path:
    env = os.environ.get("IBPATH_LAB_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ibpath" / "lab"


def require_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise LabError(f"missing host tool(s): {', '.join(missing)} (Debian packages: "
                       "qemu-system-x86 for qemu-system-x86_64, mmdebstrap, apt and dpkg)")


def run(args: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if proc.returncode:
        tail = "\n".join(proc.stdout.splitlines()[-15:])
        raise LabError(f"{' '.join(args[:3])} ... failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def kernel_package() -> str:
    """The newest linux-image-6.1.0-N-amd64 the host's apt knows (6.1: the kernel the lab's
    findings are about, and the one the issue showed to run soft-RoCE here)."""
    out = run(["apt-cache", "search", "--names-only", r"^linux-image-6\.1\.0-[0-9]+-amd64$"])
    names = [line.split(" ", 1)[0] for line in out.splitlines()]
    found = sorted((int(m.group(1)), n) for n in names if (m := KERNEL_PATTERN.match(n)))
    if not found:
        raise LabError("apt-cache knows no linux-image-6.1.0-N-amd64 package (apt-get update?)")
    return found[-1][1]


def modinfo_depends(ko: Path) -> list[str]:
    """The "depends=" entry of a module's .modinfo strings (NUL-separated key=value)."""
    data = ko.read_bytes()
    m = re.search(rb"(?:^|\0)depends=([^\0]*)\0", data)
    return [d for d in m.group(1).decode().split(",") if d] if m else []


def module_closure(moddir: Path, roots: tuple[str, ...] = LAB_MODULES) -> list[Path]:
    """The .ko files of roots and everything they depend on (names with - and _ alike)."""
    index = {p.stem.replace("-", "_"): p for p in moddir.rglob("*.ko")}
    todo, seen = [r.replace("-", "_") for r in roots], {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in index:
            builtin = (moddir / "modules.builtin").read_text()
            if f"/{name}.ko" in builtin.replace("-", "_"):
                seen[name] = None
                continue
            raise LabError(f"kernel module {name} is neither in {moddir} nor built in")
        seen[name] = index[name]
        todo += [d.replace("-", "_") for d in modinfo_depends(index[name])]
    return sorted(p for p in seen.values() if p is not None)


# The runtime dependencies the package's code in the guest imports that bookworm does not
# ship (or ships too old): laid over the rootfs from the wheels of the host venv's versions.
# crcmod-plus: crc.py's VCRC (its wheel is abi3 for CPython 3.8+, so bookworm's 3.11 loads it).
GUEST_WHEELS = ("scapy", "crcmod-plus")


def guest_wheel(cache: Path, project: str = "scapy") -> Path:
    """The wheel of the version of `project` this interpreter runs, downloaded once with pip
    (for this platform and the guest's CPython 3.11)."""
    from importlib.metadata import version
    want = version(project)
    stem = project.replace("-", "_")
    wheels = cache / "wheels"
    found = sorted(wheels.glob(f"{stem}-{want}-*.whl"))
    if found:
        return found[-1]
    wheels.mkdir(parents=True, exist_ok=True)
    run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.11", "-d", str(wheels), f"{project}=={want}"])
    found = sorted(wheels.glob(f"{stem}-{want}-*.whl"))
    if not found:
        raise LabError(f"pip download {project}=={want} gave no wheel in {wheels}")
    return found[-1]


def scapy_wheel(cache: Path) -> Path:
    """The wheel of the scapy version this interpreter runs."""
    return guest_wheel(cache, "scapy")


def _add_wheel(w: CpioWriter, wheel: Path, site: str) -> None:
    made = set()
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.is_dir():
                continue
            parts = info.filename.split("/")
            for k in range(1, len(parts)):
                d = "/".join(parts[:k])
                if d not in made:
                    w.directory(f"{site}/{d}")
                    made.add(d)
            w.file(f"{site}/{info.filename}", z.read(info))


@dataclass
class Guest:
    """A built guest: kernel image, base initramfs and what they were built from."""

    kernel: Path
    initramfs: Path
    manifest: dict


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_symlink() and p.is_file())


def build(cache: Path | None = None, *, force: bool = False, log=print) -> Guest:
    """Build what is missing in the cache (everything with force) and return the guest."""
    cache = cache or cache_dir()
    manifest_path = cache / "manifest.json"
    if not force and manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        guest = Guest(cache / manifest["kernel_image"], cache / "base.cpio", manifest)
        # a cache built before a wheel joined GUEST_WHEELS gets its initramfs rebuilt
        wheels_ok = len(manifest.get("wheels", [manifest.get("scapy_wheel")])) == len(GUEST_WHEELS)
        if guest.kernel.exists() and guest.initramfs.exists() and wheels_ok:
            return guest
    require_tools("mmdebstrap", "apt-get", "apt-cache", "dpkg-deb")
    cache.mkdir(parents=True, exist_ok=True)
    times = {}

    t = time.monotonic()
    pkg = kernel_package()
    debs = cache / "debs"
    if force and debs.exists():
        shutil.rmtree(debs)
    debs.mkdir(exist_ok=True)
    if not list(debs.glob(f"{pkg}_*.deb")):
        log(f"ibpath lab: apt-get download {pkg}")
        run(["apt-get", "download", pkg], cwd=debs)
    deb = sorted(debs.glob(f"{pkg}_*.deb"))[-1]
    kdir = cache / "kernel"
    if kdir.exists():
        shutil.rmtree(kdir)
    run(["dpkg-deb", "-x", str(deb), str(kdir)])
    version = run(["dpkg-deb", "-f", str(deb), "Version"]).strip()
    release = next((kdir / "lib" / "modules").iterdir()).name
    times["kernel"] = round(time.monotonic() - t, 1)

    t = time.monotonic()
    rootfs = cache / "rootfs"
    if force or not (rootfs / "usr" / "bin" / "python3").exists():
        tmp = cache / "rootfs.tmp"
        for p in (tmp, rootfs):
            if p.exists():
                shutil.rmtree(p)
        log(f"ibpath lab: mmdebstrap {SUITE} minbase + {', '.join(GUEST_PACKAGES)}")
        run(["mmdebstrap", "--variant=minbase", "--include=" + ",".join(GUEST_PACKAGES),
             SUITE, str(tmp), MIRROR])
        tmp.rename(rootfs)
    times["rootfs"] = round(time.monotonic() - t, 1)

    wheels = [guest_wheel(cache, project) for project in GUEST_WHEELS]
    wheel = wheels[0]

    t = time.monotonic()
    moddir = kdir / "lib" / "modules" / release
    modules = module_closure(moddir)
    tmp_cpio = cache / "base.cpio.tmp"
    with open(tmp_cpio, "wb") as f:
        w = CpioWriter(f)
        w.tree(str(rootfs), skip=SKIP_DIRS)
        w.char_device("dev/console", 5, 1)
        w.char_device("dev/null", 1, 3, 0o666)
        base = f"usr/lib/modules/{release}"
        w.directory("usr/lib/modules")
        w.directory(base)
        made = set()
        for ko in modules:
            rel = ko.relative_to(moddir)
            for parent in reversed(rel.parents[:-1]):
                if parent not in made:
                    w.directory(f"{base}/{parent}")
                    made.add(parent)
            w.file(f"{base}/{rel}", ko.read_bytes())
        for d in ("usr/local/lib/python3.11", PY_SITE):
            w.directory(d)
        for whl in wheels:
            _add_wheel(w, whl, PY_SITE)
        for meta in ("modules.builtin", "modules.builtin.modinfo", "modules.order"):
            w.file(f"{base}/{meta}", (moddir / meta).read_bytes())
        w.close()
    tmp_cpio.rename(cache / "base.cpio")
    times["initramfs"] = round(time.monotonic() - t, 1)
    # The modules the lab needs are in base.cpio now; the other ~400 MB are not kept (a
    # rebuild unpacks the .deb again).
    shutil.rmtree(kdir / "lib")

    manifest = {
        "suite": SUITE, "mirror": MIRROR, "packages": list(GUEST_PACKAGES),
        "kernel_package": pkg, "kernel_package_version": version, "kernel_release": release,
        "kernel_image": str((kdir / "boot" / f"vmlinuz-{release}").relative_to(cache)),
        "scapy_wheel": wheel.name, "wheels": [whl.name for whl in wheels],
        "modules": [str(p.relative_to(moddir)) for p in modules],
        "build_seconds": times, "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    manifest["cache_bytes"] = _size(cache)
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return Guest(cache / manifest["kernel_image"], cache / "base.cpio", manifest)
