"""Guest-side test program: one RDMA CM connection through librdmacm, with ctypes only.

Runs inside the lab guest (Python standard library only, no ibpath import) as

    python3 cmtest.py server ADDR PORT [--wait S]
    python3 cmtest.py client SRC DST PORT [--blob FILE] --record OUT.json

The client resolves the addresses, hands the blob to rdma_set_option(RDMA_OPTION_IB,
RDMA_OPTION_IB_PATH) when one is given, records the blob, the call's return value and the time
of the call, then connects, sends one message over an RC QP and disconnects. When
rdma_set_option fails (or no blob is given) the route comes from rdma_resolve_route, the
kernel's own resolution, so the connection still happens and the capture shows what the
kernel did instead.

Why the call order: ucma.c ucma_set_ib_path ends with a ROUTE_RESOLVED event of its own
(rdma_set_ib_path moves the id from ADDR_RESOLVED to ROUTE_RESOLVED), so after a successful
rdma_set_option the program waits for that event and must not call rdma_resolve_route.

The verbs data path (ibv_post_send, ibv_post_recv, ibv_poll_cq) is inline in verbs.h: it calls
through struct ibv_context's ops table, so the function pointers are read from there
(rdma-core libibverbs/verbs.h struct ibv_context_ops: poll_cq is entry 11, post_send 25,
post_recv 26; ops follows the device pointer).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import select
import socket
import struct
import sys
import time

RDMA_PS_TCP = 0x0106
RDMA_OPTION_IB = 1
RDMA_OPTION_IB_PATH = 1
IBV_QPT_RC = 2
IBV_ACCESS_LOCAL_WRITE = 1
IBV_WR_SEND = 2
IBV_SEND_SIGNALED = 2
EVENTS = ["ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST",
          "CONNECT_RESPONSE", "CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED",
          "DISCONNECTED", "DEVICE_REMOVAL", "MULTICAST_JOIN", "MULTICAST_ERROR",
          "ADDR_CHANGE", "TIMEWAIT_EXIT"]
TIMEOUT_MS = 5000
EVENT_TIMEOUT = 20  # s; the CM's own REQ retries give up well within this
MESSAGE = b"ibpath lab: hello over RC"

OPS_OFFSET = 8  # struct ibv_context { struct ibv_device *device; struct ibv_context_ops ops; }
OP_POLL_CQ, OP_POST_SEND, OP_POST_RECV = 11, 25, 26
QP_CONTEXT_OFFSET = 0  # struct ibv_qp { struct ibv_context *context; ... }
CQ_CONTEXT_OFFSET = 0  # struct ibv_cq { struct ibv_context *context; ... }
ID_VERBS_OFFSET, ID_QP_OFFSET = 0, 24  # struct rdma_cm_id { verbs; channel; context; qp; ... }


class Sockaddr(ctypes.Structure):
    _fields_ = [("raw", ctypes.c_ubyte * 128)]  # struct sockaddr_storage


class ConnParam(ctypes.Structure):
    _fields_ = [("private_data", ctypes.c_void_p), ("private_data_len", ctypes.c_uint8),
                ("responder_resources", ctypes.c_uint8), ("initiator_depth", ctypes.c_uint8),
                ("flow_control", ctypes.c_uint8), ("retry_count", ctypes.c_uint8),
                ("rnr_retry_count", ctypes.c_uint8), ("srq", ctypes.c_uint8),
                ("qp_num", ctypes.c_uint32)]


class CmEvent(ctypes.Structure):
    _fields_ = [("id", ctypes.c_void_p), ("listen_id", ctypes.c_void_p),
                ("event", ctypes.c_int), ("status", ctypes.c_int)]


class QpCap(ctypes.Structure):
    _fields_ = [("max_send_wr", ctypes.c_uint32), ("max_recv_wr", ctypes.c_uint32),
                ("max_send_sge", ctypes.c_uint32), ("max_recv_sge", ctypes.c_uint32),
                ("max_inline_data", ctypes.c_uint32)]


class QpInitAttr(ctypes.Structure):
    _fields_ = [("qp_context", ctypes.c_void_p), ("send_cq", ctypes.c_void_p),
                ("recv_cq", ctypes.c_void_p), ("srq", ctypes.c_void_p), ("cap", QpCap),
                ("qp_type", ctypes.c_int), ("sq_sig_all", ctypes.c_int)]


class Sge(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_uint64), ("length", ctypes.c_uint32), ("lkey", ctypes.c_uint32)]


class SendWr(ctypes.Structure):
    # struct ibv_send_wr up to send_flags, then the unions (zero for a plain SEND): 128 bytes
    _fields_ = [("wr_id", ctypes.c_uint64), ("next", ctypes.c_void_p), ("sg_list", ctypes.c_void_p),
                ("num_sge", ctypes.c_int), ("opcode", ctypes.c_int), ("send_flags", ctypes.c_uint),
                ("imm_data", ctypes.c_uint32), ("unions", ctypes.c_ubyte * 88)]


class RecvWr(ctypes.Structure):
    _fields_ = [("wr_id", ctypes.c_uint64), ("next", ctypes.c_void_p), ("sg_list", ctypes.c_void_p),
                ("num_sge", ctypes.c_int)]


class Wc(ctypes.Structure):
    _fields_ = [("wr_id", ctypes.c_uint64), ("status", ctypes.c_int), ("opcode", ctypes.c_int),
                ("vendor_err", ctypes.c_uint32), ("byte_len", ctypes.c_uint32),
                ("imm_data", ctypes.c_uint32), ("qp_num", ctypes.c_uint32),
                ("src_qp", ctypes.c_uint32), ("wc_flags", ctypes.c_int),
                ("pkey_index", ctypes.c_uint16), ("slid", ctypes.c_uint16),
                ("sl", ctypes.c_uint8), ("dlid_path_bits", ctypes.c_uint8)]


class LabError(Exception):
    """A librdmacm or verbs step failed; the message names the step and errno."""


def _lib(name: str) -> ctypes.CDLL:
    path = ctypes.util.find_library(name) or f"lib{name}.so.1"
    return ctypes.CDLL(path, use_errno=True)


rdmacm = _lib("rdmacm")
verbs = _lib("ibverbs")
for fn in ("rdma_create_id", "rdma_resolve_addr", "rdma_resolve_route", "rdma_set_option",
           "rdma_create_qp", "rdma_connect", "rdma_accept", "rdma_disconnect", "rdma_listen",
           "rdma_bind_addr", "rdma_get_cm_event", "rdma_ack_cm_event", "rdma_destroy_id"):
    getattr(rdmacm, fn).restype = ctypes.c_int
rdmacm.rdma_create_event_channel.restype = ctypes.c_void_p
rdmacm.rdma_create_id.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                                  ctypes.c_void_p, ctypes.c_int]
rdmacm.rdma_resolve_addr.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
rdmacm.rdma_resolve_route.argtypes = [ctypes.c_void_p, ctypes.c_int]
rdmacm.rdma_set_option.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                   ctypes.c_size_t]
rdmacm.rdma_create_qp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(QpInitAttr)]
rdmacm.rdma_connect.argtypes = [ctypes.c_void_p, ctypes.POINTER(ConnParam)]
rdmacm.rdma_accept.argtypes = [ctypes.c_void_p, ctypes.POINTER(ConnParam)]
rdmacm.rdma_disconnect.argtypes = [ctypes.c_void_p]
rdmacm.rdma_bind_addr.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
rdmacm.rdma_listen.argtypes = [ctypes.c_void_p, ctypes.c_int]
rdmacm.rdma_get_cm_event.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(CmEvent))]
rdmacm.rdma_ack_cm_event.argtypes = [ctypes.POINTER(CmEvent)]
rdmacm.rdma_destroy_id.argtypes = [ctypes.c_void_p]
verbs.ibv_alloc_pd.restype = ctypes.c_void_p
verbs.ibv_alloc_pd.argtypes = [ctypes.c_void_p]
verbs.ibv_create_cq.restype = ctypes.c_void_p
verbs.ibv_create_cq.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_int]
verbs.ibv_reg_mr.restype = ctypes.c_void_p
verbs.ibv_reg_mr.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

POLL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(Wc))
POST_SEND = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(SendWr),
                             ctypes.POINTER(ctypes.c_void_p))
POST_RECV = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(RecvWr),
                             ctypes.POINTER(ctypes.c_void_p))


def _check(ret: int, what: str) -> None:
    if ret:
        err = ctypes.get_errno()
        raise LabError(f"{what} failed: {os.strerror(err)} (errno {err})")


def _ptr(addr: int, offset: int) -> int:
    return ctypes.c_void_p.from_address(addr + offset).value


def _op(obj: int, index: int, proto):
    """The verbs op `index` of obj's context (obj: an ibv_qp or ibv_cq, context first)."""
    ctx = _ptr(obj, 0)
    return proto(_ptr(ctx, OPS_OFFSET + 8 * index))


def sockaddr_in(addr: str, port: int) -> Sockaddr:
    sa = Sockaddr()
    raw = struct.pack("=H", socket.AF_INET) + struct.pack("!H", port) + socket.inet_aton(addr)
    ctypes.memmove(sa.raw, raw, len(raw))
    return sa


class Channel:
    """An rdma_cm event channel and the events it delivers."""

    def __init__(self):
        self.ch = rdmacm.rdma_create_event_channel()
        if not self.ch:
            _check(1, "rdma_create_event_channel")

    def create_id(self) -> int:
        cm_id = ctypes.c_void_p()
        _check(rdmacm.rdma_create_id(self.ch, ctypes.byref(cm_id), None, RDMA_PS_TCP),
               "rdma_create_id")
        return cm_id.value

    def wait(self, want: str, timeout: float = EVENT_TIMEOUT) -> tuple[int, int]:
        """Wait for the next event; it must be `want`. Returns (the event's id, status)."""
        # struct rdma_event_channel { int fd; }: wait on it so that a lost REQ cannot hang
        fd = ctypes.c_int.from_address(self.ch).value
        if not select.select([fd], [], [], timeout)[0]:
            raise LabError(f"no RDMA CM event within {timeout:g} s (waiting for {want})")
        ev = ctypes.POINTER(CmEvent)()
        _check(rdmacm.rdma_get_cm_event(self.ch, ctypes.byref(ev)), "rdma_get_cm_event")
        name = EVENTS[ev.contents.event] if ev.contents.event < len(EVENTS) else str(ev.contents.event)
        cm_id, status = ev.contents.id, ev.contents.status
        rdmacm.rdma_ack_cm_event(ev)
        if name != want:
            raise LabError(f"expected RDMA_CM_EVENT_{want}, got RDMA_CM_EVENT_{name} "
                           f"(status {status})")
        return cm_id, status


class Endpoint:
    """PD, CQ, RC QP and one registered buffer on a connected (or connecting) cm id."""

    def __init__(self, cm_id: int):
        self.cm_id = cm_id
        ctx = _ptr(cm_id, ID_VERBS_OFFSET)
        self.pd = verbs.ibv_alloc_pd(ctx)
        self.cq = verbs.ibv_create_cq(ctx, 8, None, None, 0)
        if not self.pd or not self.cq:
            _check(1, "ibv_alloc_pd/ibv_create_cq")
        attr = QpInitAttr(send_cq=self.cq, recv_cq=self.cq, qp_type=IBV_QPT_RC,
                          cap=QpCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1))
        _check(rdmacm.rdma_create_qp(cm_id, self.pd, ctypes.byref(attr)), "rdma_create_qp")
        self.qp = _ptr(cm_id, ID_QP_OFFSET)
        self.buf = ctypes.create_string_buffer(256)
        self.mr = verbs.ibv_reg_mr(self.pd, self.buf, 256, IBV_ACCESS_LOCAL_WRITE)
        if not self.mr:
            _check(1, "ibv_reg_mr")
        # struct ibv_mr { context; pd; addr; length; handle; lkey; rkey }
        self.lkey = ctypes.c_uint32.from_address(self.mr + 36).value

    def post_recv(self) -> None:
        sge = Sge(ctypes.addressof(self.buf), 256, self.lkey)
        wr = RecvWr(wr_id=1, sg_list=ctypes.addressof(sge), num_sge=1)
        bad = ctypes.c_void_p()
        _check(_op(self.qp, OP_POST_RECV, POST_RECV)(self.qp, ctypes.byref(wr), ctypes.byref(bad)),
               "ibv_post_recv")
        self._keep = (sge, wr)

    def send(self, data: bytes) -> None:
        ctypes.memmove(self.buf, data, len(data))
        sge = Sge(ctypes.addressof(self.buf), len(data), self.lkey)
        wr = SendWr(wr_id=2, sg_list=ctypes.addressof(sge), num_sge=1, opcode=IBV_WR_SEND,
                    send_flags=IBV_SEND_SIGNALED)
        bad = ctypes.c_void_p()
        _check(_op(self.qp, OP_POST_SEND, POST_SEND)(self.qp, ctypes.byref(wr), ctypes.byref(bad)),
               "ibv_post_send")
        self.completion("send")

    def completion(self, what: str) -> Wc:
        poll = _op(self.cq, OP_POLL_CQ, POLL)
        wc = Wc()
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while time.monotonic() < deadline:
            n = poll(self.cq, 1, ctypes.byref(wc))
            if n < 0:
                raise LabError(f"ibv_poll_cq failed ({n})")
            if n:
                if wc.status:
                    raise LabError(f"{what} completion status {wc.status}")
                return wc
            time.sleep(0.001)
        raise LabError(f"no {what} completion within {TIMEOUT_MS} ms")


def server(addr: str, port: int, first_wait: float = EVENT_TIMEOUT) -> dict:
    """Accept one connection, receive one message, wait for the disconnect. first_wait: how
    long to wait for the client's REQ (its resolution may wait for a stand-in ibacm)."""
    ch = Channel()
    listen_id = ch.create_id()
    sa = sockaddr_in(addr, port)
    _check(rdmacm.rdma_bind_addr(listen_id, ctypes.byref(sa)), "rdma_bind_addr")
    _check(rdmacm.rdma_listen(listen_id, 1), "rdma_listen")
    print("listening", flush=True)
    cm_id, _ = ch.wait("CONNECT_REQUEST", first_wait)
    ep = Endpoint(cm_id)
    ep.post_recv()
    param = ConnParam(responder_resources=1, initiator_depth=1, rnr_retry_count=7)
    _check(rdmacm.rdma_accept(cm_id, ctypes.byref(param)), "rdma_accept")
    ch.wait("ESTABLISHED")
    wc = ep.completion("receive")
    got = ep.buf.raw[:wc.byte_len]
    ch.wait("DISCONNECTED")
    return {"received": got.decode(errors="replace")}


def client(out: dict, src: str, dst: str, port: int, blob: bytes | None) -> dict:
    """Connect to the server, via the blob when one is given; see the module docstring. Fills
    `out` as it goes, so that what happened before a failure is still reported."""
    out.update(src=src, dst=dst, port=port)
    ch = Channel()
    cm_id = ch.create_id()
    s, d = sockaddr_in(src, 0), sockaddr_in(dst, port)
    _check(rdmacm.rdma_resolve_addr(cm_id, ctypes.byref(s), ctypes.byref(d), TIMEOUT_MS),
           "rdma_resolve_addr")
    ch.wait("ADDR_RESOLVED")
    route = "rdma_resolve_route"
    if blob is not None:
        buf = ctypes.create_string_buffer(blob, len(blob))
        out["blob_time"] = time.time()
        ret = rdmacm.rdma_set_option(cm_id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, buf, len(blob))
        err = ctypes.get_errno() if ret else 0
        out["blob"] = blob.hex()
        out["set_option"] = -err if ret else ret
        if ret == 0:
            ch.wait("ROUTE_RESOLVED")
            route = "rdma_set_option"
    if route == "rdma_resolve_route":
        _check(rdmacm.rdma_resolve_route(cm_id, TIMEOUT_MS), "rdma_resolve_route")
        ch.wait("ROUTE_RESOLVED")
    out["route"] = route
    ep = Endpoint(cm_id)
    ep.post_recv()
    param = ConnParam(responder_resources=1, initiator_depth=1, retry_count=7, rnr_retry_count=7)
    _check(rdmacm.rdma_connect(cm_id, ctypes.byref(param)), "rdma_connect")
    ch.wait("ESTABLISHED")
    ep.send(MESSAGE)
    out["sent"] = MESSAGE.decode()
    _check(rdmacm.rdma_disconnect(cm_id), "rdma_disconnect")
    ch.wait("DISCONNECTED")
    return out


def main(argv: list[str]) -> int:
    role = argv[0] if argv else ""
    record = None
    if "--record" in argv:
        i = argv.index("--record")
        record = argv[i + 1]
        del argv[i:i + 2]
    first_wait = EVENT_TIMEOUT
    if "--wait" in argv:
        i = argv.index("--wait")
        first_wait = float(argv[i + 1])
        del argv[i:i + 2]
    blob = None
    if "--blob" in argv:
        i = argv.index("--blob")
        with open(argv[i + 1], "rb") as f:
            blob = f.read()
        del argv[i:i + 2]
    result: dict = {"role": role}
    status = 0
    try:
        if role == "server" and len(argv) == 3:
            result.update(server(argv[1], int(argv[2]), first_wait))
        elif role == "client" and len(argv) == 4:
            client(result, argv[1], argv[2], int(argv[3]), blob)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except LabError as exc:
        result["error"] = str(exc)
        status = 1
    text = json.dumps(result, indent=1)
    if record:
        with open(record, "w") as f:
            f.write(text + "\n")
    print(text, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
