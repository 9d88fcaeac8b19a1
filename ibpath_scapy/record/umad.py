"""Record a real SA exchange (OpenSM as SA, ``saquery`` as client) on the ibsim simulator and
write it as a native-InfiniBand capture.

How it works
------------
* ``ibsim`` simulates a small fabric (``DEFAULT_TOPOLOGY``: one switch, three HCAs).
  Applications reach it through ``libumad2sim.so`` (LD_PRELOAD), which replaces the
  ``/dev/infiniband/umad*`` character devices libibumad talks to.
* ``umadrec.c`` (next to this file) is a second LD_PRELOAD library, loaded *before*
  libumad2sim.so.  It logs every buffer a process writes to or reads from a umad fd
  (``struct ib_user_mad``: 64-byte header + MAD) and forwards the call.  It is compiled here
  at run time (``cc -shared -fPIC ... -ldl``) into a cache directory.
* OpenSM runs with the shim (its log is the ground truth: what the SA read = requests, what
  it wrote = responses, full length).  Each ``saquery`` runs with the shim too (its log gives
  the requests exactly as the client wrote them, and what it was handed back).
* ibsim has no RMPP: umad2sim forwards only the first 256 bytes of a write, and its receive
  path (ibsim 0.10) mangles MAD bytes 224..255 (the receive buffer is sized for ibsim's
  request struct, not for umad header + 256).  So:
  - the capture's responses are taken from what OpenSM *wrote*, segmented exactly as the
    kernel RMPP sender would (``ibpath_scapy.rmpp.segment``);
  - the capture's requests are what OpenSM *read* (so the TID carries the high bits the
    transport put in), with bytes 224..255 restored from what saquery wrote (after checking
    that bytes 0..223 agree apart from the TID);
  - so that saquery can print every record OpenSM sent, the shim's optional "SAR side
    channel" hands the client the full response OpenSM wrote (as a kernel would after RMPP
    reassembly).  The client's log marks such reads (flag 0x01).
* The pcap is deterministic: frame times are ``epoch + n * step`` (not wall-clock), PSNs
  are per-sender counters, and saquery's TID generator is seeded per query (the shim
  overrides libibmad's ``srandom(time*pid)``).

Nothing in here packs MAD or PathRecord fields: every MAD byte in the capture comes from
OpenSM or saquery; only LRH/BTH/DETH/ICRC/VCRC (``ibpath_scapy.encap``) and the kernel's RMPP
segmentation (``ibpath_scapy.rmpp``) are added.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

# --------------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------------

UMAD_HDR_SIZE = 64  # struct ib_user_mad header with pkey_index (ABI 5, IB_USER_MAD_ENABLE_PKEY)
MAD_SIZE = 256
LOG_MAGIC = b"UMR1"
LOG_REC_HDR = struct.Struct("<4ssB2xiIqII")  # magic, dir, flags, fd, pid, sec, nsec, len
FLAG_SAR_SERVED = 0x01
FLAG_SAR_REPLACED = 0x02

MGMT_CLASS_SA = 0x03
RMPP_CLASSES = {MGMT_CLASS_SA}  # classes the kernel's RMPP layer segments (SA; vendor 0x30-0x4f)
RMPP_FLAG_ACTIVE = 0x01
UMAD2SIM_INTACT_BYTES = 224  # MAD bytes that survive umad2sim's receive path intact
GSI_QKEY = 0x80010000
DEFAULT_PKEYS = {0: 0xFFFF}  # ibsim's P_Key table: index 0 = full default partition

FIXED_EPOCH = 1704067200.0  # 2024-01-01T00:00:00Z: frame n is at FIXED_EPOCH + n * step
FRAME_STEP = 0.001

PACKAGES = ["ibsim-utils", "libumad2sim0", "opensm", "libopensm9", "libosmvendor5",
            "infiniband-diags", "libibmad5", "libibumad3"]

SHIM_SOURCE = Path(__file__).with_name("umadrec.c")

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


@dataclass(frozen=True)
class Query:
    """One saquery run.  args may use {lid[Node]} and {gid[Node]} fields, filled in
    from the running subnet (LIDs are assigned by OpenSM)."""

    name: str
    args: tuple[str, ...]
    note: str = ""


DEFAULT_QUERIES: tuple[Query, ...] = (
    Query("all-paths", ("-p",),
          "PathRecord GetTable, empty ComponentMask: every LID pair -> multi-segment RMPP"),
    Query("src-to-dst-lids", ("-p", "--src-to-dst", "{lid[Hca2]}:{lid[Hca3]}"),
          "SLID+DLID (+NumbPath 0x7f, which saquery always sets): one LID pair -> 1 record"),
    Query("src-to-dst-names", ("-p", "--src-to-dst", "Hca2:Hca3"),
          "names: saquery first resolves them with NodeRecord GetTable queries"),
    Query("sgid-to-dgid", ("-p", "--sgid-to-dgid", "{gid[Hca2]}-{gid[Hca3]}"),
          "SGID+DGID (+NumbPath 0x7f): every LID pair of the two ports (LMC 1 -> 4 paths)"),
    Query("dgid-only", ("-p", "--dgid", "{gid[Hca3]}"),
          "DGID only: paths from every LID in the subnet to Hca3's LIDs"),
    Query("unknown-dlid", ("-p", "--src-to-dst", "{lid[Hca2]}:99"),
          "DLID 99 does not exist: OpenSM answers GetTableResp with 0 records, status 0"),
    Query("invalid-rate", ("-p", "--rate", "63", "--src-to-dst", "{lid[Hca2]}:{lid[Hca3]}"),
          "Rate 63 is not a valid rate: OpenSM answers status 0x0200 (ERR_REQ_INVALID)"),
)


# --------------------------------------------------------------------------------------------
# Shim log parsing
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class UmadHeader:
    """struct ib_user_mad header (rdma/ib_user_mad.h; host-endian u32s, network-endian addr)."""

    agent_id: int
    status: int
    timeout_ms: int
    retries: int
    length: int
    qpn: int
    qkey: int
    lid: int
    sl: int
    path_bits: int
    grh_present: int
    gid_index: int
    hop_limit: int
    traffic_class: int
    gid: bytes
    flow_label: int
    pkey_index: int

    @classmethod
    def parse(cls, b: bytes) -> "UmadHeader":
        if len(b) < UMAD_HDR_SIZE:
            raise ValueError(f"umad header needs {UMAD_HDR_SIZE} bytes, got {len(b)}")
        agent_id, status, timeout_ms, retries, length = struct.unpack_from("=5I", b, 0)
        qpn, qkey, lid, sl, path_bits, grh, gid_index, hop, tclass = struct.unpack_from(
            "!IIHBBBBBB", b, 20)
        gid = bytes(b[36:52])
        flow_label, = struct.unpack_from("!I", b, 52)
        pkey_index, = struct.unpack_from("=H", b, 56)
        return cls(agent_id, status, timeout_ms, retries, length, qpn, qkey, lid, sl, path_bits,
                   grh, gid_index, hop, tclass, gid, flow_label, pkey_index)


@dataclass(frozen=True)
class UmadRecord:
    """One buffer the shim logged."""

    index: int  # position in its log
    direction: str  # "W" written (sent), "R" read (received)
    flags: int
    fd: int
    pid: int
    time: float
    buf: bytes

    @property
    def hdr(self) -> UmadHeader:
        return UmadHeader.parse(self.buf)

    @property
    def mad(self) -> bytes:
        return self.buf[UMAD_HDR_SIZE:]

    @property
    def mgmt_class(self) -> int | None:
        return self.mad[1] if len(self.mad) > 1 else None

    @property
    def method(self) -> int | None:
        return self.mad[3] if len(self.mad) > 3 else None

    @property
    def is_response(self) -> bool:
        return bool(self.method is not None and self.method & 0x80)

    @property
    def tid(self) -> int | None:
        return struct.unpack_from("!Q", self.mad, 8)[0] if len(self.mad) >= 16 else None

    @property
    def attr_id(self) -> int | None:
        return struct.unpack_from("!H", self.mad, 16)[0] if len(self.mad) >= 18 else None


def parse_log(data: bytes, name: str = "<log>") -> list[UmadRecord]:
    out = []
    off = 0
    while off < len(data):
        if len(data) - off < LOG_REC_HDR.size:
            raise ValueError(f"{name}: truncated record header at byte {off}")
        magic, d, flags, fd, pid, sec, nsec, ln = LOG_REC_HDR.unpack_from(data, off)
        if magic != LOG_MAGIC:
            raise ValueError(f"{name}: bad record magic {magic!r} at byte {off}")
        start = off + LOG_REC_HDR.size
        if start + ln > len(data):
            raise ValueError(f"{name}: truncated record body at byte {off}")
        out.append(UmadRecord(len(out), d.decode("ascii"), flags, fd, pid, sec + nsec * 1e-9,
                              data[start:start + ln]))
        off = start + ln
    return out


def read_log(path: str | os.PathLike) -> list[UmadRecord]:
    """Parse a umadrec log file (format documented in umadrec.c)."""
    return parse_log(Path(path).read_bytes(), str(path))


# --------------------------------------------------------------------------------------------
# umad records -> wire MADs -> pcap
# --------------------------------------------------------------------------------------------

@dataclass
class WireMad:
    """One 256-byte MAD as it would cross the wire, with its addressing."""

    slid: int
    dlid: int
    sl: int
    sqpn: int
    dqpn: int
    qkey: int
    pkey: int
    mad: bytes
    source: str  # "request" (from the SA's read) or "response" (from the SA's write)
    log_index: int  # index of the SA log record it came from
    segment: int = 0  # RMPP segment number (0: not RMPP)
    segments: int = 0
    message_len: int = 0  # length of the MAD as the SA read/wrote it (before segmentation)
    notes: list[str] = field(default_factory=list)


def _client_writes(client_records: Iterable[UmadRecord]) -> dict[tuple, list[UmadRecord]]:
    by_key: dict[tuple, list[UmadRecord]] = {}
    for r in client_records:
        if r.direction == "W" and r.mgmt_class == MGMT_CLASS_SA and not r.is_response:
            by_key.setdefault((r.tid & 0xFFFFFFFF, r.attr_id, r.method), []).append(r)
    return by_key


def sa_wire_mads(sa_records: Sequence[UmadRecord], client_records: Sequence[UmadRecord] = (),
                 *, sa_lid: int, pkeys: dict[int, int] | None = None,
                 mgmt_classes: Iterable[int] = (MGMT_CLASS_SA,)) -> list[WireMad]:
    """The SA-class MADs the SA process read (requests) and wrote (responses), in log order,
    as wire MADs.  Long RMPP-active responses are segmented like the kernel does."""
    from ibpath_scapy import rmpp  # the project's kernel-equivalent segmentation

    pkeys = DEFAULT_PKEYS if pkeys is None else pkeys
    classes = set(mgmt_classes)
    client = _client_writes(client_records)
    # TID -> (damaged bytes 224..255 as the SA read them, what the client really sent)
    repaired: dict[int, tuple[bytes, bytes]] = {}
    out: list[WireMad] = []
    for r in sa_records:
        if r.mgmt_class not in classes or r.direction not in ("R", "W"):
            continue
        h = r.hdr
        pkey = pkeys.get(h.pkey_index)
        if pkey is None:
            raise ValueError(f"SA log record {r.index}: unknown P_Key index {h.pkey_index}")
        if h.grh_present:
            raise ValueError(f"SA log record {r.index}: GRH present; only LID-routed MADs "
                             "are supported")
        if r.direction == "R":
            mad = bytearray(r.mad[:MAD_SIZE].ljust(MAD_SIZE, b"\0"))
            notes = []
            qkey = GSI_QKEY
            cands = client.get((r.tid & 0xFFFFFFFF, r.attr_id, r.method), [])
            if cands:
                sent = cands.pop(0)
                smad = sent.mad[:MAD_SIZE].ljust(MAD_SIZE, b"\0")
                n = UMAD2SIM_INTACT_BYTES
                diff = [i for i in range(n) if mad[i] != smad[i] and not 8 <= i < 12]
                if diff:
                    raise ValueError(
                        f"SA log record {r.index}: request read by the SA differs from what "
                        f"the client wrote at MAD bytes {diff[:8]} (TID {r.tid:#018x})")
                if mad[n:] != smad[n:]:
                    notes.append(f"bytes {n}..255 restored from the client's write "
                                 "(umad2sim receive path damages them)")
                    repaired[r.tid] = (bytes(mad[n:]), bytes(smad[n:]))
                mad[n:] = smad[n:]
                qkey = sent.hdr.qkey or GSI_QKEY
            else:
                notes.append("no client write found for this request; bytes "
                             f"{UMAD2SIM_INTACT_BYTES}..255 are as umad2sim delivered them")
            out.append(WireMad(slid=h.lid, dlid=sa_lid, sl=h.sl, sqpn=h.qpn, dqpn=1,
                               qkey=qkey, pkey=pkey, mad=bytes(mad), source="request",
                               log_index=r.index, message_len=len(r.mad), notes=notes))
        else:
            mad = r.mad
            base = dict(slid=sa_lid, dlid=h.lid, sl=h.sl, sqpn=1, dqpn=h.qpn,
                        qkey=h.qkey or GSI_QKEY, pkey=pkey, source="response",
                        log_index=r.index, message_len=len(mad))
            if r.mgmt_class in RMPP_CLASSES and len(mad) > 26 and mad[26] & RMPP_FLAG_ACTIVE:
                segs = rmpp.segment(mad)
                for k, seg in enumerate(segs, 1):
                    out.append(WireMad(mad=seg, segment=k, segments=len(segs), **base))
            else:
                if len(mad) > MAD_SIZE:
                    raise ValueError(f"SA log record {r.index}: {len(mad)}-byte MAD without "
                                     "RMPP ACTIVE cannot be sent")
                mad = mad.ljust(MAD_SIZE, b"\0")
                notes = []
                n = UMAD2SIM_INTACT_BYTES
                fix = repaired.get(r.tid)
                if fix and mad[n:] == fix[0]:
                    # OpenSM's error responses echo the whole request MAD, including the
                    # bytes umad2sim damaged on the way in: echo what the client sent.
                    mad = mad[:n] + fix[1]
                    notes.append(f"bytes {n}..255 echo the request: restored like the "
                                 "request's")
                out.append(WireMad(mad=mad, notes=notes, **base))
    return out


def write_pcap(wire: Sequence[WireMad], path: str | os.PathLike, *,
               epoch: float = FIXED_EPOCH, step: float = FRAME_STEP) -> int:
    """Write wire MADs as ERF type-21 records (pcap link type 197, as ibdump does).
    Frame n (0-based) gets time epoch + n*step.  PSNs count per (SLID, source QP)."""
    from ibpath_scapy.encap import erf_record, native_ib_frame
    from ibpath_scapy.layers.ib import LINKTYPE_ERF
    from ibpath_scapy.pcapio import PcapWriter

    psn: dict[tuple[int, int], int] = {}
    with PcapWriter(str(path), LINKTYPE_ERF) as w:
        for n, m in enumerate(wire):
            key = (m.slid, m.sqpn)
            p = psn.get(key, 0)
            psn[key] = (p + 1) & 0xFFFFFF
            frame = native_ib_frame(m.mad, slid=m.slid, dlid=m.dlid, sl=m.sl, dqpn=m.dqpn,
                                    sqpn=m.sqpn, qkey=m.qkey, pkey=m.pkey, psn=p)
            ts = epoch + n * step
            w.write(erf_record(frame, ts), ts)
    return len(wire)


# --------------------------------------------------------------------------------------------
# Tools and the shim
# --------------------------------------------------------------------------------------------

def find_umad2sim() -> str | None:
    pats = ["/usr/lib/*/umad2sim/libumad2sim.so", "/usr/lib/umad2sim/libumad2sim.so",
            "/usr/lib64/umad2sim/libumad2sim.so", "/usr/local/lib/umad2sim/libumad2sim.so"]
    for p in pats:
        hits = sorted(glob.glob(p))
        if hits:
            return hits[0]
    return None


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for d in ("/usr/sbin", "/sbin", "/usr/local/sbin")
         if os.access(p := os.path.join(d, name), os.X_OK)), None)


def missing_tools() -> list[str]:
    """What record_sa_session needs and cannot find (empty list: all there)."""
    missing = [n for n in ("ibsim", "opensm", "saquery", "sminfo", "ibaddr") if not _which(n)]
    if not find_umad2sim():
        missing.append("libumad2sim.so (package libumad2sim0)")
    if not (shutil.which("cc") or shutil.which("gcc")):
        missing.append("cc")
    return missing


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ibpath"


def compile_shim(cache_dir: str | os.PathLike | None = None, *, timeout: float = 60,
                 source: Path = SHIM_SOURCE, defines: Sequence[str] = ()) -> Path:
    """Compile umadrec.c (or another shim `source`, with -D `defines`) into
    <cache>/<stem>-<hash>.so (reused while the source, defines and compiler are unchanged)
    and return its path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("no C compiler (cc) found")
    src = source.read_bytes()
    flags = [f"-D{d}" for d in defines]
    key = hashlib.sha256(src + os.path.realpath(cc).encode() + "\0".join(flags).encode()
                         ).hexdigest()[:16]
    candidates = [Path(cache_dir)] if cache_dir else [_cache_dir(), Path(tempfile.gettempdir())
                                                      / f"ibpath-cache-{os.getuid()}"]
    last_err: Exception | None = None
    for d in candidates:
        try:
            d.mkdir(parents=True, exist_ok=True)
            so = d / f"{source.stem}-{key}.so"
            if so.exists():
                return so
            tmp = d / f".{source.stem}-{key}.{os.getpid()}.so"
            subprocess.run([cc, "-O2", "-Wall", "-shared", "-fPIC", *flags, "-o", str(tmp),
                            str(source), "-ldl", "-lpthread"], check=True, timeout=timeout,
                           capture_output=True, text=True)
            os.replace(tmp, so)
            return so
        except subprocess.CalledProcessError as e:
            raise RuntimeError(f"compiling {source} failed:\n{e.stderr}") from e
        except OSError as e:
            last_err = e
    raise RuntimeError(f"no writable cache directory for the shim: {last_err}")


def package_versions(packages: Sequence[str] = PACKAGES) -> dict[str, str]:
    out = {}
    for p in packages:
        try:
            r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", p], capture_output=True,
                               text=True, timeout=10)
            out[p] = r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else "?"
        except (OSError, subprocess.TimeoutExpired):
            out[p] = "?"
    return out


# --------------------------------------------------------------------------------------------
# Process handling
# --------------------------------------------------------------------------------------------

class _Daemon:
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

    def stop(self, grace: float = 8.0) -> int | None:
        try:
            if self.alive():
                try:
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


def _wait_for(pred, timeout: float, what: str, daemons: Sequence[_Daemon] = ()) -> None:
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


def _abstract_socket_exists(name: str) -> bool:
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


def _run(argv: list[str], *, cwd: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=timeout, start_new_session=True)


_IBADDR_RE = re.compile(r"GID\s+(\S+)\s+LID start\s+(0x[0-9a-fA-F]+|\d+)")
_SMINFO_RE = re.compile(r"sm lid (\d+) sm guid (0x[0-9a-fA-F]+).*state (\d+) (\S+)")


# --------------------------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------------------------

@dataclass
class QueryResult:
    name: str
    argv: list[str]
    note: str
    seed: int
    returncode: int
    stdout_file: str
    stderr: str
    request_tids: list[str]  # SA requests this saquery sent (TID low 32 bits, hex)


@dataclass
class SessionResult:
    outdir: str
    pcap: str
    frames: int
    sa_lid: int
    sm_guid: str
    nodes: dict[str, dict]
    queries: list[QueryResult]
    packages: dict[str, str]
    opensm_argv: list[str]
    files: dict[str, str]
    lmc: int = 0
    sm_host: str = ""
    client_host: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


@dataclass
class Fabric:
    """A running ibsim fabric with OpenSM as its SM and SA (opensm_fabric): who is who, and
    the environment a client on one of its hosts runs in."""

    work: Path
    env: dict  # the base environment: IBSIM_SOCKNAME, LC_ALL (no LD_PRELOAD)
    umad2sim: str
    sa_lid: int
    sm_guid: str
    nodes: dict[str, dict]  # host -> {"gid": port GID, "lid": base LID}
    opensm: _Daemon
    opensm_argv: list[str]

    def client_env(self, host: str, preload: Sequence[str] = (), **extra) -> dict:
        """The environment of a client on `host`: libumad2sim.so preloaded (after `preload`),
        SIM_HOST set, and `extra`."""
        return dict(self.env, LD_PRELOAD=":".join([*map(str, preload), self.umad2sim]),
                    SIM_HOST=host, **extra)


@contextmanager
def opensm_fabric(*, topology: str = DEFAULT_TOPOLOGY, sm_host: str = "Hca1",
                  client_host: str = "Hca2", lookup_hosts: Sequence[str] = ("Hca1", "Hca2", "Hca3"), lmc: int = 0,
                  opensm_preload: Sequence[str] = (), opensm_env: dict | None = None,
                  startup_timeout: float = 30, query_timeout: float = 15,
                  session_limit: float = 300) -> Iterator[Fabric]:
    """ibsim with `topology` and OpenSM on `sm_host` (LMC `lmc`, `opensm_preload` before
    libumad2sim.so, `opensm_env` added to its environment), up once OpenSM logs SUBNET UP;
    yields the Fabric with the SA's LID (sminfo on `client_host`) and each of `lookup_hosts`'
    GID and LID (ibaddr); neither is recorded. Every process runs in its own process group under a time limit
    and is stopped when the block ends (OpenSM first, so that its logs are complete), also
    on error. The work directory is removed then."""
    missing = [n for n in ("ibsim", "opensm", "sminfo", "ibaddr") if not _which(n)]
    umad2sim = find_umad2sim()
    if not umad2sim:
        missing.append("libumad2sim.so (package libumad2sim0)")
    if missing:
        raise RuntimeError("missing: " + ", ".join(missing))
    work = Path(tempfile.mkdtemp(prefix="ibpath-fabric-"))
    sockname = f"ibpath{os.getpid()}x{int(time.time() * 1000) % 100000}"
    daemons: list[_Daemon] = []
    try:
        for d in ("ibsim", "opensm", "client"):
            (work / d).mkdir()
        netfile = work / "topology.net"
        netfile.write_text(topology)
        osm_conf = work / "opensm.conf"
        # defaults (whatever /etc/opensm holds), but flush the log so "SUBNET UP" can be seen
        osm_conf.write_text("force_log_flush TRUE\n")
        osm_log = work / "opensm" / "opensm.log"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("UMADREC_", "IBSIM_", "SIM_")) and k != "LD_PRELOAD"}
        env["IBSIM_SOCKNAME"] = sockname
        env["LC_ALL"] = "C"

        # 1. the simulator
        ibsim = _Daemon(["ibsim", "-s", "-n", str(netfile)], cwd=work / "ibsim", env=env,
                        log=work / "ibsim.out", limit=session_limit)
        daemons.append(ibsim)
        _wait_for(lambda: _abstract_socket_exists(f"{sockname}:ctl"), startup_timeout,
                  "ibsim's control socket", daemons)

        # 2. OpenSM
        osm_env = dict(env, LD_PRELOAD=":".join([*map(str, opensm_preload), umad2sim]),
                       SIM_HOST=sm_host, OSM_TMP_DIR=str(work / "opensm"),
                       OSM_CACHE_DIR=str(work / "opensm"), **(opensm_env or {}))
        opensm_argv = ["opensm", "-F", str(osm_conf), "-f", str(osm_log), "-s", "0",
                       "-l", str(lmc)]
        osm = _Daemon(opensm_argv, cwd=work / "opensm", env=osm_env,
                      log=work / "opensm.out", limit=session_limit)
        daemons.append(osm)
        _wait_for(lambda: osm_log.exists() and b"SUBNET UP" in osm_log.read_bytes(),
                  startup_timeout, "OpenSM 'SUBNET UP'", daemons)

        # 3. who is who (SMPs)
        sim_env = dict(env, LD_PRELOAD=umad2sim)
        r = _run(["sminfo"], cwd=work / "client", env=dict(sim_env, SIM_HOST=client_host),
                 timeout=query_timeout)
        m = _SMINFO_RE.search(r.stdout.decode(errors="replace"))
        if not m or m.group(4) != "SMINFO_MASTER":
            raise RuntimeError(f"sminfo did not report a master SM: {r.stdout!r} {r.stderr!r}")
        sa_lid, sm_guid = int(m.group(1)), m.group(2)
        nodes: dict[str, dict] = {}
        for host in lookup_hosts:
            r = _run(["ibaddr"], cwd=work / "client", env=dict(sim_env, SIM_HOST=host),
                     timeout=query_timeout)
            m = _IBADDR_RE.search(r.stdout.decode(errors="replace"))
            if not m:
                raise RuntimeError(f"ibaddr on {host} failed: {r.stdout!r} {r.stderr!r}")
            nodes[host] = {"gid": m.group(1), "lid": int(m.group(2), 0)}
        fabric = Fabric(work, env, umad2sim, sa_lid, sm_guid, nodes, osm, [
            a if not a.startswith(str(work)) else "<workdir>" + a[len(str(work)):]
            for a in opensm_argv])
        try:
            yield fabric
        finally:
            for d in reversed(daemons):
                d.stop()
            daemons.clear()
    finally:
        for d in reversed(daemons):
            d.stop()
        shutil.rmtree(work, ignore_errors=True)


def record_sa_session(outdir: str | os.PathLike, queries: Sequence[Query] = DEFAULT_QUERIES, *,
                      topology: str = DEFAULT_TOPOLOGY, sm_host: str = "Hca1",
                      client_host: str = "Hca2", lookup_hosts: Sequence[str] = ("Hca1", "Hca2",
                                                                                "Hca3"),
                      lmc: int = 1, query_timeout: float = 15, startup_timeout: float = 30,
                      session_limit: float = 300, pcap_name: str = "opensm-saquery.pcap",
                      write_readme: bool = True, keep_workdir: bool = False,
                      also_preload: Sequence[str] = ()) -> SessionResult:
    """Run ibsim + OpenSM (recorded) + the saquery ``queries`` (recorded) and write to outdir:

    * ``<pcap_name>``: the SA exchange as native IB frames (ERF type 21, link type 197);
    * ``opensm.umadrec`` / ``saquery.umadrec``: the raw shim logs of OpenSM / all saquery runs;
    * ``saquery-NN-<name>.txt``: each saquery's stdout;
    * ``topology.net``, ``session.json`` (everything needed to interpret the files) and,
      if write_readme, ``README.md``.

    also_preload: libraries preloaded into OpenSM and each saquery before the recorder
    (another recorder, to compare both on the same run).

    Every process is started in its own process group with a timeout and is killed before
    this returns (also on error); the fabric is opensm_fabric's."""
    missing = missing_tools()
    if missing:
        raise RuntimeError("missing: " + ", ".join(missing))
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    shim = compile_shim()
    logs = Path(tempfile.mkdtemp(prefix="ibpath-rec-"))
    try:
        (logs / "sar").mkdir()
        sa_log = logs / "opensm.umadrec"
        client_log = logs / "saquery.umadrec"
        with opensm_fabric(topology=topology, sm_host=sm_host, client_host=client_host,
                           lookup_hosts=lookup_hosts,
                           lmc=lmc, opensm_preload=[*also_preload, shim],
                           opensm_env={"UMADREC_LOG": str(sa_log),
                                       "UMADREC_SAR_DIR": str(logs / "sar")},
                           startup_timeout=startup_timeout, query_timeout=query_timeout,
                           session_limit=session_limit) as fabric:
            lid = {k: v["lid"] for k, v in fabric.nodes.items()}
            gid = {k: v["gid"] for k, v in fabric.nodes.items()}

            # the queries, recorded
            results: list[QueryResult] = []
            for i, q in enumerate(queries, 1):
                argv = ["saquery"] + [a.format(lid=lid, gid=gid) for a in q.args]
                seed = 1000 + i
                env = fabric.client_env(client_host, [*also_preload, shim],
                                        UMADREC_LOG=str(client_log),
                                        UMADREC_SAR_DIR=str(logs / "sar"),
                                        UMADREC_SEED=str(seed))
                before = len(read_log(client_log)) if client_log.exists() else 0
                try:
                    r = _run(argv, cwd=fabric.work / "client", env=env, timeout=query_timeout)
                    rc, out, err = r.returncode, r.stdout, r.stderr
                except subprocess.TimeoutExpired as e:
                    rc, out, err = -1, e.stdout or b"", (e.stderr or b"") + b"\n[timed out]"
                fname = f"saquery-{i:02d}-{q.name}.txt"
                (outdir / fname).write_bytes(out)
                new = read_log(client_log)[before:] if client_log.exists() else []
                tids = [f"{rec.tid & 0xFFFFFFFF:08x}" for rec in new
                        if rec.direction == "W" and rec.mgmt_class == MGMT_CLASS_SA]
                results.append(QueryResult(q.name, argv, q.note, seed, rc, fname,
                                           err.decode(errors="replace"), tids))
                if not fabric.opensm.alive():
                    raise RuntimeError("OpenSM died during the queries:\n" + (
                        fabric.work / "opensm.out").read_text(errors="replace")[-2000:])
            if keep_workdir:
                kept = Path(tempfile.mkdtemp(prefix="ibpath-rec-work-"))
                shutil.copytree(fabric.work, kept, dirs_exist_ok=True)
        # (the fabric is stopped, OpenSM first: its log is complete)
        if keep_workdir:
            print(f"work directory kept: {kept} (logs: {logs})")

        # convert
        sa_records = read_log(sa_log)
        client_records = read_log(client_log) if client_log.exists() else []
        wire = sa_wire_mads(sa_records, client_records, sa_lid=fabric.sa_lid)
        pcap = outdir / pcap_name
        frames = write_pcap(wire, pcap)
        shutil.copyfile(sa_log, outdir / "opensm.umadrec")
        if client_log.exists():
            shutil.copyfile(client_log, outdir / "saquery.umadrec")
        (outdir / "topology.net").write_text(topology)
        result = SessionResult(
            outdir=str(outdir), pcap=pcap_name, frames=frames, sa_lid=fabric.sa_lid,
            sm_guid=fabric.sm_guid, nodes=fabric.nodes, queries=results,
            packages=package_versions(), opensm_argv=fabric.opensm_argv,
            files={"sa_log": "opensm.umadrec", "client_log": "saquery.umadrec",
                   "topology": "topology.net"},
            lmc=lmc, sm_host=sm_host, client_host=client_host)
        (outdir / "session.json").write_text(_session_json(result, wire))
        if write_readme:
            (outdir / "README.md").write_text(render_readme(result, wire, sm_host, client_host,
                                                            lmc))
        return result
    finally:
        if not keep_workdir:
            shutil.rmtree(logs, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------

_METHODS = {0x01: "Get", 0x81: "GetResp", 0x12: "GetTable", 0x92: "GetTableResp",
            0x02: "Set", 0x06: "Report", 0x86: "ReportResp", 0x14: "GetMulti",
            0x94: "GetMultiResp", 0x15: "Delete", 0x95: "DeleteResp"}
_ATTRS = {0x0001: "ClassPortInfo", 0x0011: "NodeRecord", 0x0012: "PortInfoRecord",
          0x0035: "PathRecord", 0x0038: "MCMemberRecord", 0x0031: "ServiceRecord"}


def frame_summary(wire: Sequence[WireMad]) -> list[dict]:
    """One dict per frame (1-based), read from the MAD bytes for the README/session.json."""
    out = []
    for n, m in enumerate(wire, 1):
        mad = m.mad
        method, status, tid, attr = mad[3], struct.unpack_from("!H", mad, 4)[0], \
            struct.unpack_from("!Q", mad, 8)[0], struct.unpack_from("!H", mad, 16)[0]
        d = {"frame": n, "source": m.source, "slid": m.slid, "dlid": m.dlid,
             "method": _METHODS.get(method, f"{method:#04x}"), "status": f"{status:#06x}",
             "attribute": _ATTRS.get(attr, f"{attr:#06x}"), "tid": f"{tid:#018x}",
             "comp_mask": f"{struct.unpack_from('!Q', mad, 48)[0]:#018x}",
             "log_index": m.log_index}
        if m.segment:
            seg, paylen = struct.unpack_from("!II", mad, 28)
            d.update(rmpp_segment=seg, rmpp_segments=m.segments, rmpp_flags=mad[26] & 7,
                     rmpp_paylen=paylen, attr_offset=struct.unpack_from("!H", mad, 44)[0])
        if m.notes:
            d["notes"] = list(m.notes)
        out.append(d)
    return out


def _session_json(result: SessionResult, wire: Sequence[WireMad]) -> str:
    d = asdict(result)
    d["outdir"] = "."
    d["frame_table"] = frame_summary(wire)
    return json.dumps(d, indent=2, sort_keys=True) + "\n"


def render_readme(result: SessionResult, wire: Sequence[WireMad], sm_host: str,
                  client_host: str, lmc: int) -> str:
    pk = "\n".join(f"| {p} | {v} |" for p, v in sorted(result.packages.items()))
    nodes = "\n".join(f"| {h} | {v['lid']} | {v['gid']} |" for h, v in result.nodes.items())
    q_rows = []
    for i, q in enumerate(result.queries, 1):
        cmd = " ".join(q.argv)
        err = q.stderr.strip().replace("\n", " ").replace("|", "\\|")
        q_rows.append(f"| {i} | `{cmd}` | {q.returncode} | `{q.stdout_file}` | "
                      f"{', '.join(q.request_tids)} | {q.note}{(' — stderr: ' + err) if err else ''} |")
    frows = []
    for f in frame_summary(wire):
        rm = (f"{f['rmpp_segment']}/{f['rmpp_segments']} flags={f['rmpp_flags']} "
              f"paylen={f['rmpp_paylen']}" if "rmpp_segment" in f else "")
        frows.append(f"| {f['frame']} | {f['slid']}→{f['dlid']} | {f['method']} | "
                     f"{f['attribute']} | {f['status']} | {f['tid']} | {rm} |")
    osm_cmd = " ".join(result.opensm_argv)
    max_resp = max((m.message_len for m in wire if m.source == "response"), default=0)
    return f"""# captures/opensm — a real OpenSM SA exchange, recorded on ibsim

**Regenerate:** `python tools/record_opensm.py` (needs the Debian packages below and a C
compiler; runs in a few seconds). It rewrites every file in this directory, this README
included (the README is generated from the session).

| File | What |
|---|---|
| `{result.pcap}` | {result.frames} frames: the SA-class MADs OpenSM read (requests) and wrote (responses), as native InfiniBand packets (LRH/BTH/DETH/MAD/ICRC/VCRC) in ERF type-21 records, pcap link type 197 — the format ibdump writes |
| `opensm.umadrec` | raw shim log of OpenSM's umad fd: every buffer it read/wrote (64-byte `struct ib_user_mad` header + MAD), format in `ibpath_scapy/record/umadrec.c` (also contains OpenSM's SMPs) |
| `saquery.umadrec` | raw shim log of all saquery runs (their requests as written, the responses as handed to them) |
| `saquery-NN-*.txt` | each saquery's stdout, byte for byte |
| `topology.net` | the ibsim topology |
| `session.json` | commands, seeds, return codes, stderr, LIDs/GIDs, per-frame table |

## Software

| Debian package | Version |
|---|---|
{pk}

No InfiniBand hardware and no kernel rdma modules: ibsim simulates the fabric; OpenSM, saquery,
sminfo and ibaddr reach it through `LD_PRELOAD=libumad2sim.so`.

## Setup

* `ibsim -s -n topology.net` (own abstract socket name via `IBSIM_SOCKNAME`).
* `SIM_HOST={sm_host} LD_PRELOAD=umadrec.so:libumad2sim.so {osm_cmd}` — the config file holds
  only `force_log_flush TRUE` (everything else default), LMC {lmc}, no periodic sweeps
  (`-s 0`); the recorder waits for `SUBNET UP` in OpenSM's log. With LMC {lmc} every HCA port
  has {2 ** lmc} LIDs (switch port 0 has one), so there are several paths per port pair.
* `sminfo` (SIM_HOST={client_host}) → SM/SA at LID {result.sa_lid}, port GUID {result.sm_guid}, SMINFO_MASTER.
* Each query: `SIM_HOST={client_host} UMADREC_SEED=<seed> LD_PRELOAD=umadrec.so:libumad2sim.so saquery ...`
  (the seed replaces libibmad's `srandom(time*pid)`, so TIDs are reproducible).

| Node | LID | Port GID |
|---|---|---|
{nodes}

## Queries

| # | Command | rc | stdout | request TIDs (low 32 bits) | Note |
|---|---|---|---|---|---|
{chr(10).join(q_rows)}

## How the capture is built from the logs

* Only management class 0x03 (SA) is kept; OpenSM's own SMPs stay in the raw log only.
* **Requests** = what OpenSM `read()`: LRH SLID = the umad header's LID (the client),
  DLID = SA LID {result.sa_lid}, source QP = umad header QPN, dest QP 1. MAD bytes 224..255
  are restored from the client's `write()` (umad2sim's receive buffer is too small and damages
  them); bytes 0..223 are checked to be identical except TID bytes 8..11 (umad2sim rewrites
  the TID's upper half on the way, as the kernel does with its per-agent hi_tid).
* **Responses** = what OpenSM `write()`, full length (up to {max_resp} bytes here). An RMPP-active
  SA response is segmented exactly as the kernel RMPP sender does
  (`ibpath_scapy.rmpp.segment`: 56-byte header repeated, 200 data bytes per segment,
  RMPPVersion 1, type DATA, ACTIVE/FIRST/LAST, SegmentNumber, PayloadLength first =
  segments*220 - pad, last = 220 - pad, middle 0). LRH SLID = SA LID, DLID / SL / dest QP /
  Q_Key from the umad header OpenSM wrote. A response OpenSM wrote without RMPP ACTIVE (its
  error responses) goes out as one 256-byte MAD; as OpenSM's error response echoes the whole
  request MAD, its bytes 224..255 are restored like the request's.
* Framing (`ibpath_scapy.encap.native_ib_frame`): VL 0, LVer 0, LNH 2 (local), BTH opcode
  0x64 (UD SEND_ONLY), P_Key 0xffff (P_Key index 0), DETH Q_Key 0x80010000, PSN counting per
  sender from 0, ICRC and VCRC computed.
* Timestamps are synthetic: frame n is at 2024-01-01T00:00:00Z + n ms. With the seeds above
  the pcap is byte-for-byte reproducible; the `.umadrec` logs are not (wall-clock times,
  pids, and whatever heap bytes umad2sim left in MAD bytes 224..255 of what OpenSM read).
* Not on the wire here, unlike a real fabric: RMPP ACKs (the kernel receiver would ACK each
  window; ibsim has no RMPP) and any retransmissions; SMP traffic.
* ibsim cannot carry more than 256 bytes per MAD, so saquery was handed the full response
  OpenSM wrote through the shim's "SAR side channel" (what a kernel would deliver after RMPP
  reassembly). Without it saquery prints at most 3 records per response, the third one damaged.

## Frames

| Frame | SLID→DLID | Method | Attribute | Status | TID | RMPP seg flags paylen |
|---|---|---|---|---|---|---|
{chr(10).join(frows)}
"""
