"""The lab's kernels: a Debian kernel package by name or version, or a kernel built by the user.

`ibpath lab build|run --kernel K` takes:

    (nothing)                      the newest linux-image-6.1.0-N-amd64 of bookworm (Debian 12)
    6.1, 6.12, 7.3.4, 6.1.0-57     the newest Debian kernel whose version starts so
    newest                         the newest Debian kernel of LAB_SUITES
    linux-image-7.3.4+deb13-amd64  that package
    PATH/bzImage --modules DIR     a user's build: DIR is the INSTALL_MOD_PATH of
                                   `make modules_install`, so DIR/lib/modules/RELEASE

Debian's packages are looked up in an apt index of the lab's own (cache/apt: LAB_SUITES of
the Debian mirror), so the host's apt configuration changes nothing. Newer Debian kernels
split the image package (linux-image-X depends on linux-binary-X with the vmlinuz,
linux-modules-X and linux-base-X of the same version): those are fetched and unpacked
together. Modules compressed by the kernel build (.ko.xz, .ko.gz, .ko.zst) are stored
uncompressed in the guest image, so the guest's kmod needs no decompressor.
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
# Where Debian keeps kernels: bookworm's 6.1 (and its security updates), then the newer
# ones of backports, trixie and unstable.
LAB_SUITES = ((MIRROR, "bookworm"), (SECURITY_MIRROR, "bookworm-security"),
              (MIRROR, "bookworm-backports"), (MIRROR, "trixie"), (MIRROR, "trixie-backports"),
              (MIRROR, "sid"))
DEFAULT_KERNEL = "6.1"  # the kernel of Debian 12, which the committed lab captures came from
# linux-image-6.1.0-57-amd64, linux-image-7.3.4+deb13-amd64 (not -rt, -cloud, -dbg, -unsigned)
IMAGE_NAME = re.compile(r"^linux-image-(\d+\.\d+(?:\.\d+)?(?:-\d+)?(?:\+deb\d+)?)-amd64$")
MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.gz", ".ko.zst")


class KernelError(Exception):
    """The kernel asked for cannot be found, fetched or read; the message says why."""


@dataclass(frozen=True)
class Kernel:
    """An unpacked kernel: its image, its modules directory (lib/modules/RELEASE) and where
    it came from (a Debian package and version, or the user's files)."""

    release: str
    image: Path
    moddir: Path
    origin: dict


def run(args: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if proc.returncode:
        tail = "\n".join(proc.stdout.splitlines()[-15:])
        raise KernelError(f"{' '.join(args[:3])} ... failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


# -- Debian's archive ------------------------------------------------------------------------

class Archive:
    """apt over LAB_SUITES with a state directory of its own (cache/apt)."""

    def __init__(self, root: Path):
        self.root = root

    def options(self) -> list[str]:
        r = self.root
        return ["-o", f"Dir::State={r}/state", "-o", f"Dir::Cache={r}/cache",
                "-o", f"Dir::Etc::SourceList={r}/sources.list",
                "-o", "Dir::Etc::SourceParts=/dev/null", "-o", "Dir::State::status=/dev/null",
                "-o", "APT::Architecture=amd64", "-o", "Acquire::Languages=none",
                # apt-get download as root writes where user _apt may not: no sandbox
                "-o", "APT::Sandbox::User=root"]

    def update(self, *, force: bool = False) -> None:
        """Fetch the suites' package lists once (again with force)."""
        lists = self.root / "state" / "lists"
        if not force and any(lists.glob("*_Packages")):
            return
        for d in (lists / "partial", self.root / "cache" / "archives" / "partial"):
            d.mkdir(parents=True, exist_ok=True)
        (self.root / "sources.list").write_text(
            "".join(f"deb {mirror} {suite} main\n" for mirror, suite in LAB_SUITES))
        run(["apt-get", *self.options(), "-q", "update"])

    def images(self) -> list[str]:
        """The names of every linux-image-*-amd64 kernel package the suites hold."""
        out = run(["apt-cache", *self.options(), "search", "--names-only",
                   r"^linux-image-[0-9].*-amd64$"])
        return sorted({line.split(" ", 1)[0] for line in out.splitlines()
                       if IMAGE_NAME.match(line.split(" ", 1)[0])}, key=version_key)

    def field(self, package: str, name: str) -> str:
        out = run(["apt-cache", *self.options(), "show", "--no-all-versions", package])
        m = re.search(rf"^{name}: (.*)$", out, re.M)
        return m.group(1).strip() if m else ""

    def download(self, packages: list[str], dest: Path) -> list[Path]:
        dest.mkdir(parents=True, exist_ok=True)
        missing = [p for p in packages if not list(dest.glob(f"{p}_*.deb"))]
        if missing:
            run(["apt-get", *self.options(), "-q", "download", *missing], cwd=dest)
        return [sorted(dest.glob(f"{p}_*.deb"))[-1] for p in packages]


def version_key(name: str) -> tuple[int, ...]:
    """Sort key of a kernel package by the numbers of its version (6.1.0-57 → 6,1,0,57)."""
    m = IMAGE_NAME.match(name)
    return tuple(int(x) for x in re.findall(r"\d+", m.group(1).split("+")[0])) if m else ()


def pick(spec: str, names: list[str]) -> str:
    """The package `spec` names among `names`: itself, the newest, or the newest whose
    version starts with spec (a whole number at a time: 6.1 is not 6.12)."""
    if spec in names:
        return spec
    if spec == "newest":
        if not names:
            raise KernelError("the lab's apt index holds no linux-image-*-amd64 package")
        return max(names, key=version_key)
    if spec.startswith("linux-image-"):
        raise KernelError(f"no package {spec} in {', '.join(s for _, s in LAB_SUITES)}")
    if not re.fullmatch(r"\d+(\.\d+){0,2}(-\d+)?", spec):
        raise KernelError(f"--kernel {spec}: neither a version (6.1, 7.3.4), a package "
                          "name (linux-image-...-amd64), 'newest', nor a file")
    want = tuple(int(x) for x in re.findall(r"\d+", spec))
    found = [n for n in names if version_key(n)[:len(want)] == want]
    if not found:
        near = ", ".join(sorted({".".join(map(str, version_key(n)[:2])) for n in names},
                                key=lambda v: tuple(map(int, v.split(".")))))
        raise KernelError(f"no Debian kernel {spec} in {', '.join(s for _, s in LAB_SUITES)} "
                          f"(series there: {near})")
    return max(found, key=version_key)


def companions(archive: Archive, package: str) -> list[str]:
    """The package and the linux-* packages of the same version it depends on (trixie's
    kernels keep vmlinuz in linux-binary-X and the modules in linux-modules-X)."""
    depends = archive.field(package, "Depends")
    same = [d.split(" ", 1)[0] for d in re.split(r",\s*", depends)
            if "|" not in d and re.match(r"linux-(binary|modules|base)-", d) and "(=" in d]
    return [package, *same]


def fetch_debian(spec: str, cache: Path, *, log=print) -> Kernel:
    """Download and unpack the Debian kernel `spec` names (cache/kernels/RELEASE)."""
    archive = Archive(cache / "apt")
    archive.update()
    package = pick(spec, archive.images())
    version = archive.field(package, "Version")
    packages = companions(archive, package)
    log(f"ibpath lab: kernel {package} {version} ({', '.join(packages[1:]) or 'one package'})")
    debs = archive.download(packages, cache / "debs")
    unpacked = cache / "kernels" / "unpack"
    if unpacked.exists():
        shutil.rmtree(unpacked)
    unpacked.mkdir(parents=True)
    for deb in debs:
        run(["dpkg-deb", "-x", str(deb), str(unpacked)])
    moddir = _only_release(unpacked)
    release = moddir.name
    image = next((p for p in (unpacked / "boot" / f"vmlinuz-{release}", moddir / "vmlinuz")
                  if p.exists()), None)
    if image is None:
        raise KernelError(f"{package}: no vmlinuz-{release} in {', '.join(d.name for d in debs)}")
    origin = {"kind": "debian", "package": package, "version": version,
              "debs": [d.name for d in debs]}
    return Kernel(release, image, moddir, origin)


def _only_release(root: Path) -> Path:
    """root's one lib/modules/RELEASE (or usr/lib/modules/RELEASE) directory."""
    found = [d for base in (root / "lib" / "modules", root / "usr" / "lib" / "modules")
             if base.is_dir() and not base.is_symlink() for d in base.iterdir() if d.is_dir()]
    if len(found) != 1:
        raise KernelError(f"{root}: {len(found)} lib/modules/RELEASE directories, want 1 "
                          f"({', '.join(d.name for d in found) or 'none'})")
    return found[0]


# -- a user's build --------------------------------------------------------------------------

def bzimage_release(image: Path) -> str:
    """The release a bzImage was built as (the first word of its version string). Linux boot
    protocol (Documentation/arch/x86/boot.rst): "HdrS" at 0x202, protocol ≥ 2.00, and the
    2-byte kernel_version at 0x20E points at the string, 0x200 bytes before the offset."""
    with open(image, "rb") as f:
        head = f.read(0x8000)
    if len(head) < 0x210 or head[0x202:0x206] != b"HdrS":
        raise KernelError(f"{image}: not a bzImage (no 'HdrS' boot header at 0x202)")
    ptr = int.from_bytes(head[0x20E:0x210], "little")
    if not ptr or ptr + 0x200 >= len(head):
        raise KernelError(f"{image}: its boot header gives no kernel version string")
    text = head[ptr + 0x200:ptr + 0x200 + 256].split(b"\0", 1)[0].decode("ascii", "replace")
    if not text.strip():
        raise KernelError(f"{image}: empty kernel version string")
    return text.split()[0]


def user_build(image: str, modules: str | None) -> Kernel:
    """A kernel built by the user: the bzImage and its `make modules_install
    INSTALL_MOD_PATH=DIR` folder. Their releases must agree."""
    img = Path(image)
    if not img.is_file():
        raise KernelError(f"--kernel {image}: no such file")
    if not modules:
        raise KernelError(f"--kernel {image} is a file: --modules DIR (the INSTALL_MOD_PATH "
                          "of `make modules_install`) must come with it")
    moddir = _only_release(Path(modules))
    release = bzimage_release(img)
    if release != moddir.name:
        raise KernelError(f"{img} is {release} but {moddir} is {moddir.name}: not one build")
    digest = hashlib.sha256(img.read_bytes()).hexdigest()
    return Kernel(release, img, moddir, {"kind": "build", "image": str(img.resolve()),
                                         "modules": str(Path(modules).resolve()),
                                         "image_sha256": digest})


# -- modules ---------------------------------------------------------------------------------

def module_name(path: Path) -> str:
    """rdma_rxe for .../rdma_rxe.ko(.xz), with - read as _ (as modprobe does)."""
    name = path.name
    for suffix in MODULE_SUFFIXES[::-1]:
        if name.endswith(suffix):
            return name[:-len(suffix)].replace("-", "_")
    return name.replace("-", "_")


def module_bytes(path: Path) -> bytes:
    """A module's ELF bytes, decompressed."""
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".gz"):
        return gzip.decompress(data)
    if path.name.endswith(".zst"):
        if shutil.which("zstd") is None:
            raise KernelError(f"{path}: zstd-compressed, and no zstd on the host (Debian: zstd)")
        return subprocess.run(["zstd", "-dc", str(path)], stdout=subprocess.PIPE,
                              check=True).stdout
    return data


def modinfo_depends(ko: Path) -> list[str]:
    """The "depends=" entry of a module's .modinfo strings (NUL-separated key=value)."""
    m = re.search(rb"(?:^|\0)depends=([^\0]*)\0", module_bytes(ko))
    return [d for d in m.group(1).decode().split(",") if d] if m else []


def builtin_names(moddir: Path) -> set[str]:
    path = moddir / "modules.builtin"
    if not path.exists():
        return set()
    return {module_name(Path(line.strip())) for line in path.read_text().splitlines()
            if line.strip()}


def module_closure(moddir: Path, roots: tuple[str, ...], optional: tuple[str, ...] = ()
                   ) -> list[Path]:
    """The module files of roots and everything they depend on; a module built into the
    kernel needs no file. A root in `optional` may be missing altogether (crc32_generic:
    6.1's rxe needs it, newer kernels have no such module)."""
    index = {module_name(p): p for p in moddir.rglob("*.ko*") if p.name.endswith(MODULE_SUFFIXES)}
    builtin = builtin_names(moddir)
    todo, seen = [r.replace("-", "_") for r in (*roots, *optional)], {}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        if name not in index:
            if name in builtin or name in optional:
                seen[name] = None
                continue
            raise KernelError(f"kernel module {name} is neither in {moddir} nor built in "
                              "(the lab needs rdma_rxe, rdma_ucm, ib_uverbs, veth, virtio_pci "
                              "and virtio_blk, as modules or built in)")
        seen[name] = index[name]
        todo += [d.replace("-", "_") for d in modinfo_depends(index[name])]
    return sorted(p for p in seen.values() if p is not None)


def stored_name(path: Path) -> str:
    """The name a module file gets in the guest image: uncompressed, so .ko."""
    return path.name[:path.name.index(".ko")] + ".ko"
