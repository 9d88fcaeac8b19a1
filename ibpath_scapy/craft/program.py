"""A librdmacm program as `ibpath record` sees it, for the process scenarios: its ucma
commands on one cm_id and its ACM messages, in the order librdmacm makes them.

rdma_resolve_addr writes RESOLVE_ADDR and reads the ADDR_RESOLVED event; rdma_resolve_route
on an IB transport asks ibacm (one RESOLVE on its socket, ucma_ib_resolve) and hands the
answer's path entries to SET_OPTION(IB, IB_PATH), or issues RESOLVE_ROUTE when there is no
usable answer (librdmacm cma.c ucma_set_ib_route, acm.c); after ROUTE_RESOLVED librdmacm
reads the kernel's path back with QUERY(PATH) (cma.c ucma_query_path). The structs are the
layers' (layers/ucma.py, layers/acm.py), so a capture written here reads like one recorded.
"""

from __future__ import annotations

import errno
import ipaddress
import struct

from ..facts.kernelview import blob_from_bytes, select_ucma

from ..layers.acm import (
    ACM_EP_FLAG_DEST,
    ACM_EP_FLAG_SOURCE,
    ACM_EP_INFO_ADDRESS_IP,
    ACM_EP_INFO_PATH,
    ACM_OP_ACK,
    ACM_OP_RESOLVE,
    AcmEpAddrData,
    AcmHdr,
    AcmResolve,
)
from ..layers.pathdata import PathArray, PathRecData
from ..layers.sa import SERVICE_RECORD_SIZE, PathRecord, ServiceRecord
from ..layers.ucma import (
    AF_IB,
    AF_INET,
    CM_EVENTS,
    CMD,
    RDMA_OPTION_IB,
    RDMA_OPTION_IB_PATH,
    RDMA_USER_CM_QUERY_IB_SERVICE,
    RDMA_USER_CM_QUERY_PATH,
    SOCKADDR_STORAGE_SIZE,
    UcmaCmdHdr,
    UcmaCreateId,
    UcmaCreateIdResp,
    UcmaEventResp,
    UcmaGetEvent,
    UcmaIbService,
    UcmaQuery,
    UcmaQueryIbServiceResp,
    UcmaQueryPathResp,
    UcmaResolveAddr,
    UcmaResolveIbService,
    UcmaResolveRoute,
    UcmaSetOption,
)
from .builder import CaptureBuilder

EVENT = {name: num for num, name in CM_EVENTS.items()}
RDMA_PS_TCP, IBV_QPT_RC = 0x0106, 2
_RESPONSE_PTR = 0x7FFD_0000_1000  # the caller's response buffer (any user address)


def sockaddr_in(ip: str, port: int = 0) -> bytes:
    """struct sockaddr_in in a sockaddr_storage: family host order, port and address network
    order (linux/in.h)."""
    raw = struct.pack("<H", AF_INET) + struct.pack("!H", port) + ipaddress.IPv4Address(ip).packed
    return raw.ljust(SOCKADDR_STORAGE_SIZE, b"\0")


def sockaddr_ib(gid: str, pkey: int = 0xFFFF, sid: int = 0) -> bytes:
    """struct sockaddr_ib (rdma/ib.h): family, pkey, flowinfo, gid, sid, sid_mask, scope_id."""
    raw = (struct.pack("<H", AF_IB) + struct.pack("!HI", pkey, 0)
           + ipaddress.IPv6Address(gid).packed + struct.pack("!QQ", sid, (1 << 64) - 1)
           + bytes(8))
    return raw.ljust(SOCKADDR_STORAGE_SIZE, b"\0")


def address_entry(flag: int, ip: str) -> AcmEpAddrData:
    """An ACM_EP_INFO_ADDRESS_IP entry (acm.h): flags SOURCE or DEST, the IPv4 address."""
    return AcmEpAddrData(flags=flag, type=ACM_EP_INFO_ADDRESS_IP,
                         info=ipaddress.IPv4Address(ip).packed.ljust(64, b"\0"))


def path_entry(flags: int, record: PathRecord) -> AcmEpAddrData:
    """An ACM_EP_INFO_PATH entry: its flags are the path's IB_PATH_* flags."""
    return AcmEpAddrData(flags=flags, type=ACM_EP_INFO_PATH, path=record)


class Program:
    """One process with one cm_id, resolving `dst` from `src` (IPv4)."""

    def __init__(self, b: CaptureBuilder, src: str, dst: str, port: int = 7471):
        self.b, self.src, self.dst, self.port = b, src, dst, port
        self.id = 0
        self.acm_tid = 0

    def _cmd(self, cmd: str, body, out: int | None = None, **kw) -> int:
        """One command; `out` is the response buffer's size (the response's, unless given)."""
        if out is None:
            out = len(bytes(kw["response"])) if kw.get("response") else 0
        return self.b.ucma(UcmaCmdHdr(cmd=CMD[cmd], out_len=out) / body, **kw)

    # -- rdma_cm commands ------------------------------------------------------------------
    def create_id(self, cm_id: int = 1) -> int:
        self.id = cm_id
        return self._cmd("CREATE_ID", UcmaCreateId(uid=1, response=_RESPONSE_PTR,
                                                   ps=RDMA_PS_TCP, qp_type=IBV_QPT_RC),
                         response=UcmaCreateIdResp(id=cm_id))

    def resolve_addr(self, src: bytes | None = None, dst: bytes | None = None, *,
                     rc: int | None = None, err: int = 0) -> int:
        """RESOLVE_ADDR of this program's addresses (or the sockaddrs given)."""
        src = src if src is not None else sockaddr_in(self.src)
        dst = dst if dst is not None else sockaddr_in(self.dst, self.port)
        return self._cmd("RESOLVE_ADDR", UcmaResolveAddr(
            id=self.id, timeout_ms=2000, src_size=16, dst_size=16, src_addr=src, dst_addr=dst),
            rc=rc, err=err)

    def event(self, name: str, status: int = 0) -> int:
        """GET_EVENT returning `name` for the cm_id (status: 0 or -errno)."""
        return self._cmd("GET_EVENT", UcmaGetEvent(response=_RESPONSE_PTR),
                         response=UcmaEventResp(id=self.id, event=EVENT[name],
                                                status=status & 0xFFFFFFFF))

    def set_path(self, records: list[tuple[int, PathRecord]] | bytes, *,
                 verdict: int | str = "kernel") -> tuple[int, int]:
        """rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH): the write and its optval's blob
        frame. verdict: 0 or -errno; "kernel" is what ucma_set_ib_path answers the array."""
        raw = records if isinstance(records, bytes) else bytes(PathArray(records=[
            PathRecData(flags=f, path_record=r) for f, r in records]))
        if verdict == "kernel":
            verdict = 0 if select_ucma(blob_from_bytes(raw)).accepted else -errno.EINVAL
        body = UcmaSetOption(optval=_RESPONSE_PTR, id=self.id, level=RDMA_OPTION_IB,
                             optname=RDMA_OPTION_IB_PATH, optlen=len(raw))
        rc, err = (None, 0) if verdict == 0 else (-1, -verdict)
        write = self._cmd("SET_OPTION", body, rc=rc, err=err)
        return write, self.b.blob(raw, set_option=verdict)

    def resolve_route(self) -> int:
        return self._cmd("RESOLVE_ROUTE", UcmaResolveRoute(id=self.id, timeout_ms=2000))

    def query_path(self, records: list[tuple[int, PathRecord]]) -> int:
        """QUERY(PATH): the paths the kernel holds, written back."""
        return self._cmd("QUERY", UcmaQuery(response=_RESPONSE_PTR, id=self.id,
                                            option=RDMA_USER_CM_QUERY_PATH),
                         response=UcmaQueryPathResp(path_data=[
                             PathRecData(flags=f, path_record=r) for f, r in records]))

    def bind(self) -> int:
        """BIND (rdma_bind_addr) to this program's address: struct rdma_ucm_bind (u32 id,
        u16 addr_size, u16 reserved, sockaddr_storage addr; rdma_user_cm.h), which ibpath has
        no layer for: the bytes. rdma_resolve_ib_service wants the cm_id bound."""
        body = struct.pack("<IHH", self.id, 16, 0) + sockaddr_in(self.src).ljust(
            SOCKADDR_STORAGE_SIZE, b"\0")
        return self.b.ucma(UcmaCmdHdr(cmd=CMD["BIND"], in_len=len(body)) / body)

    def resolve_ib_service(self, *, service_id: int = 0, name: bytes | str = b"",
                           flags: int, err: int = 0) -> int:
        """RESOLVE_IB_SERVICE (rdma_resolve_ib_service, Linux 6.17): by ServiceID (flag ID
        1), ServiceName (flag NAME 2), both or (flags 0) neither; `err` the errno the write
        fails with (0: it succeeds)."""
        return self._cmd("RESOLVE_IB_SERVICE", UcmaResolveIbService(id=self.id, ibs=UcmaIbService(
            service_id=service_id, service_name=name, flags=flags)),
            rc=-1 if err else None, err=err)

    def query_ib_service(self, records: list[ServiceRecord], room: int = 6, *,
                         err: int = 0) -> int:
        """QUERY(IB_SERVICE) with room for `room` records (librdmacm asks for 6 first): the
        kernel says how many it holds and copies as many as there is room for; `err` the
        errno the write fails with instead (ENODATA: the kernel holds no record)."""
        copied = records[:room]
        out = len(UcmaQueryIbServiceResp(num_service_recs=0)) + room * SERVICE_RECORD_SIZE
        return self._cmd("QUERY", UcmaQuery(response=_RESPONSE_PTR, id=self.id,
                                            option=RDMA_USER_CM_QUERY_IB_SERVICE), out=out,
                         response=UcmaQueryIbServiceResp(num_service_recs=len(records),
                                                         recs=copied),
                         rc=-1 if err else None, err=err)

    # -- the ACM socket ----------------------------------------------------------------------
    def acm_request(self) -> int:
        """librdmacm's RESOLVE: source and destination addresses (ucma_ib_resolve)."""
        entries = [address_entry(flag, ip)
                   for flag, ip in ((ACM_EP_FLAG_SOURCE, self.src), (ACM_EP_FLAG_DEST, self.dst))]
        self.acm_tid += 1
        return self.b.acm(AcmHdr(opcode=ACM_OP_RESOLVE, tid=self.acm_tid)
                          / AcmResolve(resolve_data=entries), send=True)

    def acm_answer(self, records: list[tuple[int, PathRecord]] | list[AcmEpAddrData], *,
                   status: int = 0, trailing: bytes = b"", length: int | None = None) -> int:
        """ibacm's answer: a path entry per record (or the entries given); `length` what its
        header claims, when that is not the bytes recv() returns."""
        entries = [e if isinstance(e, AcmEpAddrData) else path_entry(*e) for e in records]
        msg = AcmHdr(opcode=ACM_OP_RESOLVE | ACM_OP_ACK, status=status, tid=self.acm_tid,
                     length=length)
        if records or trailing:
            msg = msg / AcmResolve(resolve_data=entries, trailing=trailing)
        return self.b.acm(msg, send=False)
