"""Guest-side test program: IB service resolution through the ucma device itself.

Runs inside the lab guest (Python standard library only, no ibpath import: the structures are
packed here from include/uapi/rdma/rdma_user_cm.h, so the capture `ibpath record` makes of it
is decoded by the project's layers against bytes they did not write) as

    python3 ibservice.py SRC --record OUT.json

Bookworm's librdmacm (44) has no rdma_resolve_addrinfo, so the program writes the commands
librdmacm 57+ would: CREATE_ID; RESOLVE_IB_SERVICE on the id still unbound; BIND to SRC (the
rxe port's address, which attaches the id to the device); RESOLVE_IB_SERVICE by ServiceName
and by ServiceID; QUERY(IB_SERVICE) with room for 6 records as librdmacm asks first, and with
a buffer smaller than the response header; DESTROY_ID. Each write's result (the byte count,
or -errno) goes to OUT.json. Whatever the kernel: a kernel without the command refuses it as
an unknown one, a kernel with it refuses it on RoCE (no SA); the lab's profile check
(profilecheck.py) holds each result against what the kernel's source says.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import socket
import struct
import sys

DEVICE = "/dev/infiniband/rdma_cm"
# rdma_user_cm.h: enum { RDMA_USER_CM_CMD_CREATE_ID, ..., RDMA_USER_CM_CMD_RESOLVE_IB_SERVICE }
CREATE_ID, DESTROY_ID, QUERY, BIND, RESOLVE_IB_SERVICE = 0, 1, 19, 20, 23
RDMA_USER_CM_QUERY_IB_SERVICE = 3
RDMA_PS_IB, IBV_QPT_UD = 0x013F, 4  # rdma_resolve_addrinfo's id (librdmacm's tests)
FLAG_ID, FLAG_NAME = 1, 2  # RDMA_USER_CM_IB_SERVICE_FLAG_*
SERVICE_ID = 0x1000000000000001
SERVICE_NAME = b"ibpath.lab"
QUERY_ROOM = 6  # librdmacm's first try: room for 6 records
SERVICE_REC_SIZE = 176  # struct ib_user_service_rec
QUERY_RESP_HEAD = 8  # struct rdma_ucm_query_ib_service_resp: num_service_recs, reserved


def hdr(cmd: int, payload: bytes, out: int = 0) -> bytes:
    """struct rdma_ucm_cmd_hdr { __u32 cmd; __u16 in; __u16 out; } and the command."""
    return struct.pack("=IHH", cmd, len(payload), out) + payload


def create_id(resp_addr: int) -> bytes:
    """struct rdma_ucm_create_id { u64 uid; u64 response; u16 ps; u8 qp_type; u8 rsvd[5]; }"""
    return hdr(CREATE_ID, struct.pack("=QQHB5x", 0, resp_addr, RDMA_PS_IB, IBV_QPT_UD), 4)


def destroy_id(resp_addr: int, cm_id: int) -> bytes:
    """struct rdma_ucm_destroy_id { u64 response; u32 id; u32 reserved; }"""
    return hdr(DESTROY_ID, struct.pack("=QII", resp_addr, cm_id, 0), 4)


def bind(cm_id: int, addr: str) -> bytes:
    """struct rdma_ucm_bind { u32 id; u16 addr_size; u16 reserved; sockaddr_storage addr; }"""
    sin = struct.pack("=H", socket.AF_INET) + struct.pack("!H", 0) + socket.inet_aton(addr)
    return hdr(BIND, struct.pack("=IHH", cm_id, 16, 0) + sin.ljust(128, b"\0"))


def resolve_ib_service(cm_id: int, flags: int, service_id: int = 0, name: bytes = b"") -> bytes:
    """struct rdma_ucm_resolve_ib_service { u32 id; u32 reserved; struct rdma_ucm_ib_service
    { u64 service_id; u8 service_name[64]; u32 flags; u32 reserved; } }: 88 bytes."""
    return hdr(RESOLVE_IB_SERVICE, struct.pack("=IIQ64sII", cm_id, 0, service_id, name, flags, 0))


def query(resp_addr: int, cm_id: int, option: int, out: int) -> bytes:
    """struct rdma_ucm_query { u64 response; u32 id; u32 option; }"""
    return hdr(QUERY, struct.pack("=QII", resp_addr, cm_id, option), out)


def write(fd: int, data: bytes) -> int:
    """The write's result as the kernel gave it: the byte count, or -errno."""
    try:
        return os.write(fd, data)
    except OSError as exc:
        return -exc.errno


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] != "--record":
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    src, out_path = argv[0], argv[2]
    fd = os.open(DEVICE, os.O_RDWR | os.O_CLOEXEC)
    resp = ctypes.create_string_buffer(QUERY_RESP_HEAD + QUERY_ROOM * SERVICE_REC_SIZE)
    addr = ctypes.addressof(resp)
    steps = []

    def step(name: str, data: bytes, *, reads: int = 0) -> int:
        rc = write(fd, data)
        entry = {"step": name, "cmd": struct.unpack_from("=I", data)[0], "rc": rc,
                 "errno": errno.errorcode.get(-rc) if rc < 0 else None}
        if rc >= 0 and reads:
            entry["response"] = resp.raw[:reads].hex()
        steps.append(entry)
        return rc

    if step("create_id", create_id(addr), reads=4) < 0:
        cm_id = None
    else:
        cm_id = struct.unpack_from("=I", resp.raw)[0]
        step("resolve_unbound", resolve_ib_service(cm_id, FLAG_NAME, name=SERVICE_NAME))
        step("bind", bind(cm_id, src))
        step("resolve_by_name", resolve_ib_service(cm_id, FLAG_NAME, name=SERVICE_NAME))
        step("resolve_by_id", resolve_ib_service(cm_id, FLAG_ID, service_id=SERVICE_ID))
        step("query_ib_service", query(addr, cm_id, RDMA_USER_CM_QUERY_IB_SERVICE,
                                       QUERY_RESP_HEAD + QUERY_ROOM * SERVICE_REC_SIZE),
             reads=QUERY_RESP_HEAD)
        step("query_ib_service_short", query(addr, cm_id, RDMA_USER_CM_QUERY_IB_SERVICE,
                                             QUERY_RESP_HEAD - 4))
        step("destroy_id", destroy_id(addr, cm_id), reads=4)
    os.close(fd)
    with open(out_path, "w") as f:
        json.dump({"program": "ibservice", "src": src, "cm_id": cm_id, "steps": steps}, f,
                  indent=1)
    print(" ".join(f"{s['step']}={s['rc']}" for s in steps))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
