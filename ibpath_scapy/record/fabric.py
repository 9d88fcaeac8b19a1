"""A simulated InfiniBand fabric in user space: ibsim, OpenSM as SM and SA, and real programs
(saquery, ibaddr, ib_acme, a resolver) on its hosts, each reaching the fabric through
libumad2sim.so (LD_PRELOAD), optionally under `ibpath record`.

Every run is its own: ibsim listens on an abstract socket name of its own (IBSIM_SOCKNAME),
OpenSM keeps its files in the fabric's work folder, every process runs in a process group
of its own with a time limit, and everything is stopped when the fabric is (also on error).
Nothing here writes a MAD byte: the fabric's programs do; this module only starts them and
reads what they print.

    with Fabric() as fab:
        print(fab.nodes["Hca2"].lid)
        fab.run("Hca2", ["saquery", "-p", "--src-to-dst", "3:1"], record="sq.pcapng")
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

DEFAULT_TOPOLOGY = """\
# ibpath recorder topology (ibsim net file, ibnetdiscover-like syntax):
# one 8-port switch, three single-port HCAs.  OpenSM runs on Hca1, saquery on Hca2.
# (OpenSM runs with LMC 1, so every HCA port has two LIDs: several paths per port pair.)
Switch	8 "Switch1"
[1]	"Hca1"[1]
[2]	"Hca2"[1]
[3]	"Hca3"[1]

Hca	1 "Hca1"
[1]	"Switch1"[1]

Hca	1 "Hca2"
[1]	"Switch1"[2]

Hca	1 "Hca3"
[1]	"Switch1"[3]
"""

# Debian packages of the fabric and its clients (the README's Software table)
PACKAGES = ["ibsim-utils", "libumad2sim0", "opensm", "libopensm9", "libosmvendor5",
            "infiniband-diags", "libibmad5", "libibumad3"]

_IBADDR_RE = re.compile(r"GID\s+(\S+)\s+LID start\s+(0x[0-9a-fA-F]+|\d+)")
_SMINFO_RE = re.compile(r"sm lid (\d+) sm guid (0x[0-9a-fA-F]+).*state (\d+) (\S+)")


def find_umad2sim() -> str | None:
    """libumad2sim.so's path (package libumad2sim0), None where it is not installed."""
    pats = ["/usr/lib/*/umad2sim/libumad2sim.so", "/usr/lib/umad2sim/libumad2sim.so",
            "/usr/lib64/umad2sim/libumad2sim.so", "/usr/local/lib/umad2sim/libumad2sim.so"]
    for p in pats:
        hits = sorted(glob.glob(p))
        if hits:
            return hits[0]
    return None


def which(name: str) -> str | None:
    """A program on PATH or in the sbin folders (OpenSM and ibsim live there)."""
    return shutil.which(name) or next(
        (p for d in ("/usr/sbin", "/sbin", "/usr/local/sbin")
         if os.access(p := os.path.join(d, name), os.X_OK)), None)


def missing_tools(programs: Sequence[str] = ("ibsim", "opensm", "saquery", "sminfo",
                                             "ibaddr")) -> list[str]:
    """What a fabric with these programs needs and cannot find (empty list: all there)."""
    missing = [n for n in programs if not which(n)]
    if not find_umad2sim():
        missing.append("libumad2sim.so (package libumad2sim0)")
    if not (shutil.which("cc") or shutil.which("gcc")):
        missing.append("cc (ibpath record compiles its recorder)")
    return missing


def package_versions(packages: Sequence[str] = PACKAGES) -> dict[str, str]:
    """The installed Debian version of each package ("?" where dpkg does not know it)."""
    out = {}
    for p in packages:
        try:
            r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", p], capture_output=True,
                               text=True, timeout=10)
            out[p] = r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "?"
        except (OSError, subprocess.TimeoutExpired):
            out[p] = "?"
    return out


class Daemon:
    """A background process in its own session (process group), killed as a group."""

    def __init__(self, argv: list[str], *, cwd: Path, env: dict, log: Path, limit: float):
        self.argv = argv
        self.log = log
        self._logf = open(log, "wb")
        timeout_bin = shutil.which("timeout")
        # coreutils timeout as a backstop: the daemon dies even if this Python process is
        # killed before it can clean up.
        full = ([timeout_bin, "-k", "5", str(int(limit))] if timeout_bin else []) + argv
        self.proc = subprocess.Popen(full, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._logf, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def descendant(self, name: str) -> int | None:
        """The pid of the first process of the group named `name` (its comm), or None."""
        for stat in glob.glob("/proc/[0-9]*/stat"):
            try:
                text = Path(stat).read_text()
            except OSError:
                continue
            comm = text[text.index("(") + 1:text.rindex(")")]
            fields = text[text.rindex(")") + 2:].split()
            if comm == name[:15] and int(fields[2]) == self.proc.pid:  # fields[2]: pgrp
                return int(Path(stat).parent.name)
        return None

    def stop(self, grace: float = 8.0, first: str | None = None) -> int | None:
        """Stop the group: SIGTERM to the process named `first` alone when given (a program
        under `ibpath record`, so that the recorder writes its capture and exits), else to the
        group; SIGKILL to what is left after `grace` seconds."""
        try:
            if self.alive():
                pid = self.descendant(first) if first else None
                try:
                    if pid is not None:
                        os.kill(pid, signal.SIGTERM)
                    else:
                        os.killpg(self.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    pass
            try:  # anything left in the group (the daemon itself under `timeout`)
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            return self.proc.returncode
        finally:
            self._logf.close()


def wait_for(pred, timeout: float, what: str, daemons: Sequence[Daemon] = ()) -> None:
    """Wait until pred() holds; raise when a daemon exits first or time runs out."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        for d in daemons:
            if not d.alive():
                tail = d.log.read_bytes()[-2000:].decode(errors="replace")
                raise RuntimeError(f"{d.argv[0]} exited while waiting for {what}:\n{tail}")
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def abstract_socket_exists(name: str) -> bool:
    """Whether an abstract-namespace datagram socket is bound to name (connect() on a
    datagram socket sends nothing)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        # ibsim's make_name() binds the name including its terminating NUL
        s.connect("\0" + name + "\0")
        return True
    except OSError:
        return False
    finally:
        s.close()


def run_quiet(argv: list[str], *, cwd: Path, env: dict,
              timeout: float) -> subprocess.CompletedProcess:
    """Run a program to its end in its own session, its output captured."""
    return subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=timeout, start_new_session=True)


def record_argv(out: str | os.PathLike, argv: Sequence[str]) -> list[str]:
    """`ibpath record -o OUT -- ARGV` with this interpreter's ibpath_scapy."""
    return [sys.executable, "-m", "ibpath_scapy", "record", "-o", str(out), "--", *argv]


@dataclass(frozen=True)
class Node:
    """A host of the fabric as ibaddr prints it: its port's GID and base LID."""

    gid: str
    lid: int


class Fabric:
    """ibsim with `topology`, OpenSM on `sm_host` (LMC `lmc`; under `ibpath record -o
    sm_record` when given) up to "SUBNET UP", the SA's LID from sminfo and every host's
    LID and GID from ibaddr. A context manager: everything started is stopped on exit."""

    def __init__(self, topology: str = DEFAULT_TOPOLOGY, *, sm_host: str = "Hca1",
                 lmc: int = 0, sm_record: str | os.PathLike | None = None,
                 startup_timeout: float = 30, limit: float = 600):
        self.topology, self.sm_host, self.lmc = topology, sm_host, lmc
        self.sm_record = sm_record
        self.startup_timeout, self.limit = startup_timeout, limit
        self.umad2sim = find_umad2sim()
        self.work = Path(tempfile.mkdtemp(prefix="ibpath-fabric-"))
        self.sockname = f"ibpath{os.getpid()}x{time.monotonic_ns() % 10**8}"
        self.daemons: list[Daemon] = []
        self.opensm: Daemon | None = None
        self.nodes: dict[str, Node] = {}
        self.sa_lid = 0
        self.sm_guid = ""
        self.opensm_argv: list[str] = []

    # -- environment ------------------------------------------------------------------------
    def base_env(self) -> dict:
        """The caller's environment without any other simulator's or recorder's variables,
        with this fabric's ibsim socket name."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("UMADREC_", "IBSIM_", "SIM_", "IBPATHREC_"))
               and k != "LD_PRELOAD"}
        env.update(IBSIM_SOCKNAME=self.sockname, LC_ALL="C")
        return env

    def env(self, host: str, **extra: str) -> dict:
        """The environment of a program on `host`: umad2sim preloaded, SIM_HOST set."""
        return dict(self.base_env(), LD_PRELOAD=self.umad2sim, SIM_HOST=host, **extra)

    # -- start and stop -----------------------------------------------------------------------
    def __enter__(self) -> "Fabric":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        missing = missing_tools(("ibsim", "opensm", "sminfo", "ibaddr"))
        if missing:
            raise RuntimeError("cannot start the fabric, missing: " + ", ".join(missing))
        for d in ("ibsim", "opensm", "client"):
            (self.work / d).mkdir()
        netfile = self.work / "topology.net"
        netfile.write_text(self.topology)
        ibsim = Daemon(["ibsim", "-s", "-n", str(netfile)], cwd=self.work / "ibsim",
                       env=self.base_env(), log=self.work / "ibsim.out", limit=self.limit)
        self.daemons.append(ibsim)
        wait_for(lambda: abstract_socket_exists(f"{self.sockname}:ctl"), self.startup_timeout,
                 "ibsim's control socket", self.daemons)
        osm_dir = self.work / "opensm"
        conf = osm_dir / "opensm.conf"
        # defaults (whatever /etc/opensm holds), but flush the log so "SUBNET UP" can be seen
        conf.write_text("force_log_flush TRUE\n")
        osm_log = osm_dir / "opensm.log"
        self.opensm_argv = ["opensm", "-F", str(conf), "-f", str(osm_log), "-s", "0",
                            "-l", str(self.lmc)]
        argv = (record_argv(self.sm_record, self.opensm_argv) if self.sm_record
                else self.opensm_argv)
        self.opensm = Daemon(argv, cwd=osm_dir, log=self.work / "opensm.out", limit=self.limit,
                             env=self.env(self.sm_host, OSM_TMP_DIR=str(osm_dir),
                                          OSM_CACHE_DIR=str(osm_dir)))
        self.daemons.append(self.opensm)
        wait_for(lambda: osm_log.exists() and b"SUBNET UP" in osm_log.read_bytes(),
                 self.startup_timeout, "OpenSM 'SUBNET UP'", self.daemons)
        self._who_is_who()

    def _who_is_who(self) -> None:
        hosts = re.findall(r'^Hca\s+\d+\s+"([^"]+)"', self.topology, re.M)
        r = self.run(hosts[0], ["sminfo"])
        m = _SMINFO_RE.search(r.stdout.decode(errors="replace"))
        if not m or m.group(4) != "SMINFO_MASTER":
            raise RuntimeError(f"sminfo did not report a master SM: {r.stdout!r} {r.stderr!r}")
        self.sa_lid, self.sm_guid = int(m.group(1)), m.group(2)
        for host in hosts:
            r = self.run(host, ["ibaddr"])
            m = _IBADDR_RE.search(r.stdout.decode(errors="replace"))
            if not m:
                raise RuntimeError(f"ibaddr on {host} failed: {r.stdout!r} {r.stderr!r}")
            self.nodes[host] = Node(gid=m.group(1), lid=int(m.group(2), 0))

    def stop(self) -> None:
        """Stop OpenSM first (under the recorder: OpenSM alone, so that the capture is
        written), then the simulator; remove the work folder."""
        for d in reversed(self.daemons):
            d.stop(first="opensm" if d is self.opensm and self.sm_record else None)
        self.daemons.clear()
        shutil.rmtree(self.work, ignore_errors=True)

    def opensm_alive(self) -> bool:
        return self.opensm is not None and self.opensm.alive()

    # -- programs on the fabric ------------------------------------------------------------------
    def run(self, host: str, argv: Sequence[str], *, timeout: float = 30,
            record: str | os.PathLike | None = None, **env: str) -> subprocess.CompletedProcess:
        """Run a program on `host` to its end (under `ibpath record -o record` when given);
        its output captured. Raises subprocess.TimeoutExpired past `timeout` seconds."""
        full = record_argv(record, argv) if record else list(argv)
        return run_quiet(full, cwd=self.work / "client", env=self.env(host, **env),
                         timeout=timeout)
