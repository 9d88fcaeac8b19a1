"""Three Wireshark releases for the plugin tests: Debian 12's tshark 4.0 on the host, and 4.4
(Debian 13 "trixie") and 4.6 (Debian unstable) in chroots that mmdebstrap builds from
Debian's archive.

A chroot is built once and kept under $IBPATH_WIRESHARK_CACHE (default
~/.cache/ibpath/wireshark): a later run reuses it. Building needs root (chroot), mmdebstrap
(tools/install.sh installs it) and Debian's archive. Where one is missing, the tests skip
with the reason; with CI=true they fail instead, so CI never passes on a version it did not
run. Wireshark 4.4 and later run no Lua as root, so tshark runs there as nobody
(uid 65534), with its own HOME, on copies of the plugin and capture inside the chroot.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tshark_util import AGGREGATOR, TsharkRun, require_tshark, run_tshark

# release -> (Debian suite, extra mmdebstrap options)
CHROOT_RELEASES = {
    "4.4": ("trixie", []),
    # unstable's Release file is often past its Valid-Until date in the archive's snapshot
    "4.6": ("unstable", ['--aptopt=Acquire::Check-Valid-Until "false"']),
}
NOBODY = "65534:65534"
FIELD = re.compile(r'ProtoField\.\w+\(\s*"(ibpath\.[^"]+)"')


def cache_dir() -> Path:
    return Path(os.environ.get("IBPATH_WIRESHARK_CACHE",
                               Path.home() / ".cache" / "ibpath" / "wireshark"))


def unavailable(reason: str):
    """Skip, or fail under CI=true: CI must run every release."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {reason}")
    pytest.skip(reason)


@dataclass
class ChrootTshark:
    """tshark of one Debian release, inside its chroot."""

    release: str
    suite: str
    root: Path
    version: str

    def stage(self, *files: Path) -> tuple[Path, list[str]]:
        """Copy files into a fresh folder of the chroot's /tmp readable by nobody; returns the
        folder (host path) and the files' paths as tshark in the chroot sees them."""
        rel = Path("tmp") / f"ibpath-{uuid.uuid4().hex[:12]}"
        host = self.root / rel
        host.mkdir(mode=0o755)
        inside = []
        for f in files:
            shutil.copyfile(f, host / f.name)
            os.chmod(host / f.name, 0o644)
            inside.append(f"/{rel}/{f.name}")
        return host, inside

    def run(self, args: list[str], *, user: str | None = NOBODY, timeout: float = 600) -> TsharkRun:
        """`tshark -n ARGS` in the chroot, as user (None: as root), with an empty HOME."""
        home = f"/tmp/home-{uuid.uuid4().hex[:8]}"
        spec = [f"--userspec={user}"] if user else []
        cmd = ["chroot", *spec, str(self.root), "env", "-i", f"HOME={home}", "LC_ALL=C",
               "PATH=/usr/bin:/bin", "sh", "-c", 'mkdir -p "$HOME" && exec tshark "$@"',
               "tshark", "-n", *args]
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                           timeout=timeout, stdin=subprocess.DEVNULL)
        return TsharkRun(cmd, p.returncode, p.stdout, p.stderr)


def build_chroot(release: str) -> ChrootTshark:
    """The chroot of release, built now unless the cache has it."""
    suite, opts = CHROOT_RELEASES[release]
    if os.geteuid() != 0:
        unavailable(f"Wireshark {release} needs a chroot, and chroot needs root")
    mmdebstrap = shutil.which("mmdebstrap")
    if mmdebstrap is None:
        unavailable("mmdebstrap is not installed (tools/install.sh installs it)")
    root = cache_dir() / suite
    if not (root / "usr" / "bin" / "tshark").is_file():
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{suite}-", dir=root.parent))
        tmp.rmdir()  # mmdebstrap wants to create it
        p = subprocess.run([mmdebstrap, "--quiet", "--variant=apt", "--include=tshark", *opts,
                            suite, str(tmp)], capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            unavailable(f"mmdebstrap {suite} failed (Debian's archive unreachable?): "
                        + " | ".join(tail))
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    out = subprocess.run(["chroot", str(root), "tshark", "--version"], capture_output=True,
                         text=True, timeout=120).stdout
    m = re.search(r"TShark \(Wireshark\) (\d+\.\d+\.\d+)", out)
    if not m or not m.group(1).startswith(release + "."):
        pytest.fail(f"the {suite} chroot's tshark is {m.group(1) if m else 'missing'}, "
                    f"not {release}.x")
    return ChrootTshark(release, suite, root, m.group(1))


def plugin_fields(plugin_text: str) -> list[str]:
    """Every ibpath.* field the plugin registers, in order of registration."""
    return list(dict.fromkeys(FIELD.findall(plugin_text)))


def fields_args(fields: list[str]) -> list[str]:
    args = ["-T", "fields", "-E", "header=y", "-E", "occurrence=a", "-E",
            f"aggregator={AGGREGATOR}", "-E", "quote=n", "-e", "frame.number"]
    for f in [*fields, "_ws.malformed", "_ws.expert.severity", "_ws.expert.message"]:
        args += ["-e", f]
    return args


def host_run(args: list[str]) -> TsharkRun:
    require_tshark()
    return run_tshark(None, args)
