"""Build and cache the lab guest from Debian packages only.

The cache ($IBPATH_LAB_CACHE, else ~/.cache/ibpath/lab) holds:

    apt/                       the lab's own apt index of Debian's kernels (kernels.py)
    debs/*.deb                 the kernel packages, as `apt-get download` fetched them
    rootfs/                    mmdebstrap bookworm minbase + GUEST_PACKAGES
    rootfs.cpio                rootfs + the wheels below: the guest's root file system,
                               the same whatever kernel boots it
    wheels/scapy-*.whl         `pip download` of the scapy the host venv runs: bookworm's
                               python3-scapy (2.5.0) lacks what the project's layers use
                               (PacketListField max_count), so the wheel is unpacked over it
                               into /usr/local/lib/python3.11/dist-packages
    kernels/RELEASE/           one per kernel: vmlinuz, modules.cpio (the modules the lab
                               needs, uncompressed) and kernel.json (where it came from)
    manifest.json              what the root file system was built from, sizes, build times

A stock kernel is used as it is: no initramfs-tools, no kernel build. Only the modules
reachable from LAB_MODULES (their .modinfo "depends=") go into the image; the guest's /init
runs depmod over them, so the image needs no host-side kmod. At boot the initramfs is
rootfs.cpio, the kernel's modules.cpio and the run's own archive, concatenated.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .cpio import CpioWriter
from . import kernels
from .kernels import KernelError

SUITE = "bookworm"
MIRROR = kernels.MIRROR
GUEST_PACKAGES = ("rdma-core", "ibverbs-providers", "ibverbs-utils", "rdmacm-utils", "iproute2",
                  "tcpdump", "strace", "kmod", "python3", "python3-scapy")
# The roots of the module closure: soft-RoCE and the RDMA CM user API, the veth pair, and the
# virtio disk that carries the results back. crc32_generic is what 6.1's rdma_rxe needs for
# its crc32 shash; later kernels have crc32 as a library and no such module.
LAB_MODULES = ("rdma_rxe", "rdma_ucm", "ib_uverbs", "veth", "virtio_pci", "virtio_blk")
OPTIONAL_MODULES = ("crc32_generic",)
# Parts of the rootfs the guest never reads (saves about a fifth of the image).
SKIP_DIRS = ("proc", "sys", "dev", "usr/share/doc", "usr/share/locale", "usr/share/man",
             "usr/share/info", "usr/lib/udev", "var/cache/apt", "var/lib/apt/lists")
ROOTFS_FORMAT = 2  # rootfs.cpio without modules (format 1 was base.cpio with 6.1's)


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
    try:
        return kernels.run(args, cwd)
    except KernelError as exc:
        raise LabError(str(exc)) from None


def modinfo_depends(ko: Path) -> list[str]:
    """The "depends=" entry of a module's .modinfo strings (kernels.modinfo_depends)."""
    return kernels.modinfo_depends(ko)


def module_closure(moddir: Path, roots: tuple[str, ...] = LAB_MODULES) -> list[Path]:
    """The module files the lab needs from moddir (kernels.module_closure)."""
    try:
        return kernels.module_closure(moddir, roots, OPTIONAL_MODULES)
    except KernelError as exc:
        raise LabError(str(exc)) from None

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
    """A built guest: the kernel image, the initramfs parts booted in this order (the root
    file system, the kernel's modules) and what they were built from."""

    kernel: Path
    initramfs: tuple[Path, ...]
    manifest: dict

    @property
    def release(self) -> str:
        return self.manifest["kernel"]["release"]


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_symlink() and p.is_file())


def build_rootfs(cache: Path, *, force: bool = False, log=print) -> dict:
    """rootfs/ and rootfs.cpio (the root file system with the wheels); returns the manifest."""
    manifest_path = cache / "manifest.json"
    if not force and manifest_path.exists() and (cache / "rootfs.cpio").exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("format") == ROOTFS_FORMAT and \
                len(manifest.get("wheels", ())) == len(GUEST_WHEELS):
            return manifest
    require_tools("mmdebstrap")
    times = {}
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
    t = time.monotonic()
    tmp_cpio = cache / "rootfs.cpio.tmp"
    with open(tmp_cpio, "wb") as f:
        w = CpioWriter(f)
        w.tree(str(rootfs), skip=SKIP_DIRS)
        w.char_device("dev/console", 5, 1)
        w.char_device("dev/null", 1, 3, 0o666)
        for d in ("usr/local/lib/python3.11", PY_SITE):
            w.directory(d)
        for whl in wheels:
            _add_wheel(w, whl, PY_SITE)
        w.close()
    tmp_cpio.rename(cache / "rootfs.cpio")
    for old in ("base.cpio", "kernel"):  # format 1's 6.1-only layout
        p = cache / old
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    times["initramfs"] = round(time.monotonic() - t, 1)
    manifest = {
        "format": ROOTFS_FORMAT, "suite": SUITE, "mirror": MIRROR,
        "packages": list(GUEST_PACKAGES), "scapy_wheel": wheels[0].name,
        "wheels": [whl.name for whl in wheels], "build_seconds": times,
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rootfs_bytes": _size(cache / "rootfs.cpio"),
    }
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def build_kernel(cache: Path, spec: str | None = None, modules: str | None = None, *,
                 force: bool = False, log=print) -> dict:
    """kernels/RELEASE/ for the kernel `spec` names (kernels.py): its image and
    modules.cpio; returns its kernel.json. A Debian kernel is fetched once; a user's build
    is read again whenever its image changed (its sha256 keys the folder)."""
    require_tools("apt-get", "apt-cache", "dpkg-deb")
    t = time.monotonic()
    try:
        if spec is not None and (os.sep in spec or Path(spec).is_file()):
            k = kernels.user_build(spec, modules)
            key = f"{k.release}-{k.origin['image_sha256'][:12]}"
        else:
            if modules:
                raise KernelError("--modules goes with --kernel PATH/bzImage only")
            done = _cached_debian(cache, spec or kernels.DEFAULT_KERNEL)
            if done is not None and not force:
                return done
            k = kernels.fetch_debian(spec or kernels.DEFAULT_KERNEL, cache, log=log)
            key = k.release
        kdir = cache / "kernels" / key
        info_path = kdir / "kernel.json"
        if not force and info_path.exists():
            info = json.loads(info_path.read_text())
            if (kdir / info["image"]).exists() and (kdir / "modules.cpio").exists():
                return info
        modules_found = module_closure(k.moddir)
        if kdir.exists():
            shutil.rmtree(kdir)
        kdir.mkdir(parents=True)
        shutil.copyfile(k.image, kdir / "vmlinuz")
        _modules_cpio(kdir / "modules.cpio", k.moddir, modules_found)
    except KernelError as exc:
        raise LabError(str(exc)) from None
    finally:
        unpack = cache / "kernels" / "unpack"
        if unpack.exists():  # the other modules of a Debian kernel (~400 MB) are not kept
            shutil.rmtree(unpack)
    info = {"release": k.release, "key": key, "image": "vmlinuz",
            "spec": spec or kernels.DEFAULT_KERNEL,
            "origin": k.origin, "modules": [str(p.relative_to(k.moddir)) for p in modules_found],
            "seconds": round(time.monotonic() - t, 1),
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (kdir / "kernel.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def _cached_debian(cache: Path, spec: str) -> dict | None:
    """The kernel.json of a Debian kernel already in the cache that `spec` names exactly
    (package name, or a version its package name starts with), without asking apt: the
    newest such, or None. "newest" always asks apt."""
    if spec == "newest":
        return None
    found = []
    for info_path in (cache / "kernels").glob("*/kernel.json"):
        info = json.loads(info_path.read_text())
        origin = info.get("origin", {})
        if origin.get("kind") != "debian" or info.get("spec") != spec:
            continue
        if (info_path.parent / info["image"]).exists() and \
                (info_path.parent / "modules.cpio").exists():
            found.append((kernels.version_key(origin["package"]), info))
    return max(found, key=lambda x: x[0])[1] if found else None


def _modules_cpio(path: Path, moddir: Path, modules: list[Path]) -> None:
    """The modules archive: usr/lib/modules/RELEASE with the lab's modules uncompressed
    and the kernel's module lists (modules.builtin says what needs no file)."""
    release = moddir.name
    with open(path, "wb") as f:
        w = CpioWriter(f)
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
            w.file(f"{base}/{rel.parent}/{kernels.stored_name(ko)}", kernels.module_bytes(ko))
        for meta in ("modules.builtin", "modules.builtin.modinfo", "modules.order"):
            if (moddir / meta).exists():
                w.file(f"{base}/{meta}", (moddir / meta).read_bytes())
        w.close()


def build(cache: Path | None = None, *, kernel: str | None = None, modules: str | None = None,
          force: bool = False, log=print) -> Guest:
    """Build what is missing in the cache (everything with force) and return the guest for
    the kernel `kernel` names (kernels.py; None: Debian 12's 6.1)."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    # the kernel first: a wrong --kernel or --modules is told before mmdebstrap runs
    info = build_kernel(cache, kernel, modules, force=force, log=log)
    manifest = dict(build_rootfs(cache, force=force, log=log))
    kdir = cache / "kernels" / info["key"]
    manifest["kernel"] = info
    manifest["cache_bytes"] = _size(cache)
    return Guest(kdir / info["image"], (cache / "rootfs.cpio", kdir / "modules.cpio"), manifest)


def cached_kernels(cache: Path | None = None) -> list[dict]:
    """The kernel.json of every kernel in the cache."""
    cache = cache or cache_dir()
    return [json.loads(p.read_text()) for p in sorted((cache / "kernels").glob("*/kernel.json"))]
