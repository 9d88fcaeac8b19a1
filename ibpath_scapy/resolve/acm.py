"""`ibpath acm serve --resolve`: the stand-in ibacm answers each RESOLVE with a live `ibpath
resolve` (run.py) instead of a craft scenario, so an unmodified librdmacm program gets the
seed's path array from the real SA.

A RESOLVE names its endpoints by address (ACM_EP_INFO_ADDRESS_IP/IP6 or NAME, flagged SOURCE
and DEST); the hosts file maps them to GIDs, one "ADDRESS GID" line each (the first two
columns of ibacm's ibacm_hosts.data; '#' starts a comment). A source the file does not name is
the local port's GID; a destination it does not name is answered EDESTADDR. The answer is the
array's records as path entries (acmserve.answer), an SA error status as ibacm maps it
(status >> 8, acmp.c acmp_sa_resp), no SA answer as ETIMEDOUT.
"""

from __future__ import annotations

import ipaddress
import threading

from ..acm.serve import Plan
from ..layers.acm import (
    ACM_EP_FLAG_DEST,
    ACM_EP_FLAG_SOURCE,
    ACM_STATUS_EDESTADDR,
    ACM_STATUS_ENODATA,
    ACM_STATUS_ETIMEDOUT,
    AcmHdr,
    AcmResolve,
)
from .kernel import KernelTarget
from .live import BadAnswer, LiveSA, SATimeout
from .run import resolve
from .umad import SaPort, UmadError, UmadTransport

SCENARIO = "resolve"


class HostsError(ValueError):
    """A hosts file that cannot be read: names the file, the line and why."""


def _key(text: str) -> str:
    """An address as the hosts file and a RESOLVE are compared: canonical IP text, else the
    name as written."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text


def read_hosts(path: str) -> dict[str, str]:
    """ADDRESS → GID from a hosts file."""
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as exc:
        raise HostsError(f"{path}: cannot read the hosts file: {exc.strerror}") from None
    out = {}
    for n, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) < 2:
            raise HostsError(f"{path}:{n}: want 'ADDRESS GID', got {line.strip()!r}")
        try:
            gid = str(ipaddress.IPv6Address(words[1]))
        except ValueError:
            raise HostsError(f"{path}:{n}: {words[1]!r} is not a GID") from None
        out[_key(words[0])] = gid
    return out


class LiveAnswers:
    """Answers RESOLVEs with live resolutions on one SA port (one at a time: the port's
    reads are not shared between threads)."""

    def __init__(self, port: SaPort, hosts: dict[str, str], target: KernelTarget, *,
                 layout: str = "auto", timeout_ms: int, retries: int):
        self.port, self.hosts, self.target, self.layout = port, hosts, target, layout
        self.transport = UmadTransport(port, timeout_ms, retries)
        self.lock = threading.Lock()
        self.tid: int | None = None  # the TID counter runs on from one resolution to the next

    def describe(self) -> str:
        """One line: where the SA is asked and for which kernel."""
        i = self.port.info
        return (f"live SA queries from {i.ca} port {i.port} (GID {i.gid}) to the SA at LID "
                f"{i.sm_lid}, layout {self.layout}, --kernel {self.target.profile}; "
                f"{len(self.hosts)} host(s)")

    def base_plan(self) -> Plan:
        """The stand-in's own plan (its endpoint for EP_QUERY): the local port's GID and the
        address the hosts file gives it."""
        gid = self.port.info.gid
        ip = next((a for a, g in self.hosts.items() if g == gid), "")
        return Plan(SCENARIO, "paths", local_gid=gid, remote_gid="", local_ip=ip,
                    source="live SA queries")

    def endpoints(self, req: AcmHdr) -> tuple[str | None, str | None]:
        """(source address, destination address) of a RESOLVE, as text."""
        src = dst = None
        for e in req[AcmResolve].resolve_data if AcmResolve in req else []:
            if e.flags & ACM_EP_FLAG_SOURCE and src is None:
                src = e.address_text()
            elif e.flags & ACM_EP_FLAG_DEST and dst is None:
                dst = e.address_text()
        return src, dst

    def plan(self, req: AcmHdr) -> tuple[Plan, list[str]]:
        """The plan answering this RESOLVE, and notes for the log."""
        src, dst = self.endpoints(req)
        sgid = self.hosts.get(_key(src), None) if src else None
        sgid = sgid or self.port.info.gid
        plan = self.base_plan()
        dgid = self.hosts.get(_key(dst)) if dst else None
        if dgid is None:
            plan.kind, plan.status = "status", ACM_STATUS_EDESTADDR
            plan.source = f"destination {dst!r} is not in the hosts file"
            return plan, [plan.source]
        with self.lock:
            sa = LiveSA(self.transport, sgid, dgid, tid=self.tid)
            try:
                out = resolve(sa, self.layout, self.target)
            except SATimeout:
                plan.kind, plan.status = "timeout", ACM_STATUS_ETIMEDOUT
                plan.source = f"no SA answer: {self.transport.failure}"
                return plan, [plan.source]
            except (BadAnswer, UmadError) as exc:
                plan.kind, plan.status, plan.source = "status", ACM_STATUS_ENODATA, str(exc)
                return plan, [plan.source]
            finally:
                self.tid = sa.tid
        notes = [f"{a.role} query tid 0x{a.tid:x} comp_mask 0x{a.component_mask:x}: status "
                 f"0x{a.status:04x}, {len(a.records)} record(s)" for a in out.answers]
        plan.local_gid, plan.remote_gid = sgid, dgid
        if out.records is None:
            bad = out.failed
            plan.kind, plan.sa_status = "status", bad.status
            # acmp_sa_resp: ACM status = SA status >> 8 (ENODATA for a common-bits status)
            plan.status = (bad.status >> 8) or ACM_STATUS_ENODATA
            plan.source = f"SA status 0x{bad.status:04x} to the {bad.role} query"
        else:
            plan.arrays = [out.blob]
            plan.source = f"layout {out.layout} for {sgid} → {dgid}"
        return plan, notes + [plan.source]
