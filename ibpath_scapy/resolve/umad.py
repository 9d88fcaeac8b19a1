"""The SA through libibumad (ctypes): the port chosen as saquery chooses it, one SA agent, MADs
written and read whole, each call kept for a recording.

What libibumad does is read in rdma-core libibumad/umad.c and umad.h (rdma-core 44, the
Debian package libibumad3):

* umad_get_port(NULL, 0) / umad_open_port(NULL, 0): resolve_ca_name takes the first CA with
  an active InfiniBand port (else one whose link is up), as saquery does (infiniband-diags
  ibdiag_sa.c sa_get_handle with no -C/-P); `ca`/`port` pick one instead.
* The SA's address: the port's SM LID and SM SL (sysfs sm_lid, sm_sl), QP 1, Q_Key
  0x80010000 (IB_DEFAULT_QP1_QKEY), as saquery's sa_query sets them with umad_set_addr.
* umad_register(fd, 0x03, 2, 1, NULL): an SA class-2 agent with RMPP version 1, so the kernel
  reassembles an RMPP answer and a read returns it whole.
* umad_send(..., timeout_ms, retries): the kernel's MAD layer retransmits and, when the last
  try times out, hands the request back with status ETIMEDOUT. ibacm sends its SA queries with
  timeout 2000 ms and 2 retries (ibacm/src/acm.c: `sa = { 2000, 2, ... }`, acm_send_sa_mad).
* umad_recv: a read of a buffer too small for the message fails with ENOSPC and `length` set to
  the message's size; the read is made again with a buffer that size (saquery's sa_query).

Under ibsim, libumad2sim.so (LD_PRELOAD) answers these same calls; it does not retransmit and
never hands a request back, so a SA that does not answer is noticed here by the clock: no
answer after (retries + 1) × timeout.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno as errno_mod
import ipaddress
import os
import threading
import time
from dataclasses import dataclass, field

from ..layers.mad import MAD, MAD_HDR_SIZE, MAD_SIZE, MGMT_CLASS_SA, RMPP_VERSION, SA_CLASS_VERSION
from ..layers.roce import GSI_QKEY
from ..layers.umad import UMAD_HDR_SIZE, UMAD_TID_LOW, UserMad

UMAD_CA_NAME_LEN = 20  # umad.h
QP1 = 1
PORT_STATE_ACTIVE = 4
# ibacm's SA timeout and retries (ibacm/src/acm.c `sa = { 2000, 2, ... }`)
IBACM_TIMEOUT_MS, IBACM_RETRIES = 2000, 2
# past the kernel's last timeout, how long to wait for the request it hands back
_GRACE_S = 0.5


class UmadError(Exception):
    """The SA cannot be asked: the message is one line naming what and why."""


class _UmadPort(ctypes.Structure):
    """struct umad_port (umad.h)."""

    _fields_ = [("ca_name", ctypes.c_char * UMAD_CA_NAME_LEN), ("portnum", ctypes.c_int),
                ("base_lid", ctypes.c_uint), ("lmc", ctypes.c_uint), ("sm_lid", ctypes.c_uint),
                ("sm_sl", ctypes.c_uint), ("state", ctypes.c_uint), ("phys_state", ctypes.c_uint),
                ("rate", ctypes.c_uint), ("capmask", ctypes.c_uint32),
                ("gid_prefix", ctypes.c_uint64), ("port_guid", ctypes.c_uint64),  # __be64
                ("pkeys_size", ctypes.c_uint), ("pkeys", ctypes.c_void_p),
                ("link_layer", ctypes.c_char * UMAD_CA_NAME_LEN)]


def _be64(x: int) -> bytes:
    """A __be64 read as a native (little-endian) integer, back to its wire bytes."""
    return x.to_bytes(8, "little")


@dataclass(frozen=True)
class PortInfo:
    """The local port as libibumad reads it (sysfs, or umad2sim's stand-in for it)."""

    ca: str
    port: int
    lid: int
    lmc: int
    sm_lid: int
    sm_sl: int
    state: int
    gid: str
    link_layer: str

    def to_dict(self) -> dict:
        return dict(ca=self.ca, port=self.port, lid=self.lid, lmc=self.lmc, sm_lid=self.sm_lid,
                    sm_sl=self.sm_sl, state=self.state, gid=self.gid, link_layer=self.link_layer)


@dataclass(frozen=True)
class UmadCall:
    """One write() or read() of a umad message: the bytes (struct ib_user_mad header and MAD),
    when, and who made it, as `ibpath record` records a call."""

    write: bool
    data: bytes
    ts_ns: int
    pid: int
    tid: int
    fd: int


def _lib() -> ctypes.CDLL:
    name = ctypes.util.find_library("ibumad") or "libibumad.so.3"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise UmadError(f"cannot load libibumad ({name}): {exc}; install libibumad3") from None
    c_int, c_void_p, c_char_p = ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p
    for fn, args in (("umad_get_port", [c_char_p, c_int, ctypes.POINTER(_UmadPort)]),
                     ("umad_release_port", [ctypes.POINTER(_UmadPort)]),
                     ("umad_open_port", [c_char_p, c_int]),
                     ("umad_close_port", [c_int]),
                     ("umad_register", [c_int, c_int, c_int, ctypes.c_uint8, c_void_p]),
                     ("umad_unregister", [c_int, c_int]),
                     ("umad_set_addr", [c_void_p, c_int, c_int, c_int, c_int]),
                     ("umad_send", [c_int, c_int, c_void_p, c_int, c_int, c_int]),
                     ("umad_recv", [c_int, c_void_p, ctypes.POINTER(c_int), c_int])):
        f = getattr(lib, fn)
        f.argtypes, f.restype = args, c_int
    lib.umad_size.argtypes, lib.umad_size.restype = [], ctypes.c_size_t
    return lib


def _errno_text(rc: int) -> str:
    err = -rc if rc < 0 else ctypes.get_errno()
    return os.strerror(err) if err else f"error {rc}"


class SaPort:
    """A umad port registered as an SA client. Every MAD written or read is kept in `calls`."""

    def __init__(self, ca: str | None = None, port: int = 0):
        self.lib = _lib()
        cname = ca.encode() if ca else None
        raw = _UmadPort()
        where = f"{ca or 'the first CA with an active port'}" + (f" port {port}" if port else "")
        rc = self.lib.umad_get_port(cname, port, ctypes.byref(raw))
        if rc < 0:
            raise UmadError(f"no InfiniBand port: {where}: {_errno_text(rc)} "
                            "(no device, or no ib_umad)")
        gid = ipaddress.IPv6Address(_be64(raw.gid_prefix) + _be64(raw.port_guid))
        self.info = PortInfo(raw.ca_name.decode(), raw.portnum, raw.base_lid, raw.lmc,
                             raw.sm_lid, raw.sm_sl, raw.state, str(gid),
                             raw.link_layer.decode())
        self.lib.umad_release_port(ctypes.byref(raw))
        self.fd = self.lib.umad_open_port(cname, port)
        if self.fd < 0:
            raise UmadError(f"cannot open the umad device of {self.info.ca} port "
                            f"{self.info.port}: {_errno_text(self.fd)}")
        # umad_open_port enables the P_Key index (IB_USER_MAD_ENABLE_PKEY): from then on the
        # header is the 64 bytes layers/umad.py reads
        if self.lib.umad_size() != UMAD_HDR_SIZE:
            self.lib.umad_close_port(self.fd)
            raise UmadError(f"libibumad's umad header is {self.lib.umad_size()} bytes, not the "
                            f"{UMAD_HDR_SIZE} of ABI 5 with the P_Key index; cannot use it")
        self.agent = self.lib.umad_register(self.fd, MGMT_CLASS_SA, SA_CLASS_VERSION,
                                            RMPP_VERSION, None)
        if self.agent < 0:
            self.lib.umad_close_port(self.fd)
            raise UmadError(f"cannot register an SA agent on {self.info.ca} port "
                            f"{self.info.port}: {_errno_text(self.agent)}")
        self.calls: list[UmadCall] = []

    def _keep(self, write: bool, data: bytes) -> None:
        self.calls.append(UmadCall(write, data, time.time_ns(), os.getpid(),
                                   threading.get_native_id(), self.fd))

    def send(self, mad: bytes, timeout_ms: int, retries: int) -> None:
        """Write one request MAD to the SA (SM LID, SM SL, QP 1)."""
        buf = ctypes.create_string_buffer(UMAD_HDR_SIZE + len(mad))
        ctypes.memmove(ctypes.addressof(buf) + UMAD_HDR_SIZE, mad, len(mad))
        self.lib.umad_set_addr(buf, self.info.sm_lid, QP1, self.info.sm_sl, GSI_QKEY)
        rc = self.lib.umad_send(self.fd, self.agent, buf, len(mad), timeout_ms, retries)
        if rc < 0:
            raise UmadError(f"umad_send to the SA (LID {self.info.sm_lid}) failed: "
                            f"{_errno_text(rc)}")
        # umad_send fills agent_id, timeout_ms and retries: keep the bytes as written
        self._keep(True, buf.raw)

    def recv(self, wait_ms: int) -> bytes | None:
        """The next umad message read (header and the whole MAD), None when none came within
        wait_ms."""
        length = MAD_SIZE
        while True:
            buf = ctypes.create_string_buffer(UMAD_HDR_SIZE + length)
            n = ctypes.c_int(length)
            rc = self.lib.umad_recv(self.fd, buf, ctypes.byref(n), max(wait_ms, 1))
            if rc == -errno_mod.ETIMEDOUT:
                return None
            if rc < 0 and ctypes.get_errno() == errno_mod.ENOSPC and n.value > length:
                length = n.value  # an RMPP answer longer than the buffer: read it whole
                continue
            if rc < 0:
                raise UmadError(f"umad_recv failed: {_errno_text(rc)}")
            data = buf.raw[:UMAD_HDR_SIZE + n.value]
            self._keep(False, data)
            return data

    def close(self) -> None:
        self.lib.umad_unregister(self.fd, self.agent)
        self.lib.umad_close_port(self.fd)


@dataclass
class UmadTransport:
    """Request/answer over a SaPort: the request goes out once with ibacm's timeout and
    retries (the kernel retransmits); the answer is the first response MAD read whose low 32
    TID bits are the request's (the kernel puts its agent's bits above them)."""

    port: SaPort
    timeout_ms: int = IBACM_TIMEOUT_MS
    retries: int = IBACM_RETRIES
    skipped: list[bytes] = field(default_factory=list)
    failure: str = ""  # how the last exchange without an answer ended

    @property
    def sa_lid(self) -> int:
        return self.port.info.sm_lid

    def wait_s(self) -> float:
        """How long an answer is waited for: every try's timeout, and a little more."""
        return (self.retries + 1) * self.timeout_ms / 1000 + _GRACE_S

    def exchange(self, mad: bytes) -> bytes | None:
        """The umad message (header and whole MAD) answering request `mad`, None when the SA
        did not answer in time."""
        tid = MAD(mad).transaction_id & UMAD_TID_LOW
        self.port.send(mad, self.timeout_ms, self.retries)
        start = time.monotonic()
        end = start + self.wait_s()
        while (left := end - time.monotonic()) > 0:
            got = self.port.recv(int(left * 1000))
            if got is None:
                break
            hdr = UserMad(got[:UMAD_HDR_SIZE])
            answer = got[UMAD_HDR_SIZE:]
            if len(answer) < MAD_HDR_SIZE or MAD(answer).transaction_id & UMAD_TID_LOW != tid:
                self.skipped.append(got)  # not ours (a late answer to an earlier request)
                continue
            if hdr.status:
                # the request handed back: the kernel does it when its last try timed out,
                # ibsim at once when nothing on the SA's LID takes the class
                name = errno_mod.errorcode.get(hdr.status, str(hdr.status))
                self.failure = (f"the request came back with status {name} after "
                                f"{time.monotonic() - start:.1f} s")
                return None
            return got
        self.failure = f"nothing came back within {self.wait_s():.1f} s"
        return None
