"""A bare SA client for the OpenSM oracle tests (tests/test_opensm_oracle.py): sends the MADs
it is given to the SA through libibumad, as any umad program does, and prints OpenSM's
answers. Nothing of ibpath is used here: the MADs come in as bytes, go out behind a
struct ib_user_mad header packed with plain struct (include/uapi/rdma/ib_user_mad.h), and the
answers go back as bytes.

Run under LD_PRELOAD=libumad2sim.so with SIM_HOST and IBSIM_SOCKNAME set (an ibsim fabric,
ibpath_scapy.record.fabric.Fabric):

    python sa_client.py SA_LID < requests.hex     one MAD in hex per line

prints one line per request: OpenSM's answer in hex (its first 256 bytes: umad2sim has no
RMPP), or "timeout".
"""

from __future__ import annotations

import ctypes
import struct
import sys

UMAD_HDR = 64  # struct ib_user_mad without data (ABI 5, with pkey_index)
MAD_SIZE = 256
MGMT_CLASS_SA, SA_CLASS_VERSION, RMPP_VERSION = 0x03, 2, 1
QP1, GSI_QKEY = 1, 0x80010000


def main() -> int:
    sa_lid = int(sys.argv[1])
    lib = ctypes.CDLL("libibumad.so.3")
    if lib.umad_init() < 0:
        raise SystemExit("umad_init failed")
    port = lib.umad_open_port(None, 0)
    if port < 0:
        raise SystemExit(f"umad_open_port failed: {port}")
    agent = lib.umad_register(port, MGMT_CLASS_SA, SA_CLASS_VERSION, RMPP_VERSION, None)
    if agent < 0:
        raise SystemExit(f"umad_register failed: {agent}")
    for line in sys.stdin:
        if not line.strip():
            continue
        mad = bytes.fromhex(line.strip()).ljust(MAD_SIZE, b"\0")
        hdr = bytearray(UMAD_HDR)
        # struct ib_mad_addr (network order) at offset 20: qpn, qkey, lid
        struct.pack_into("!IIH", hdr, 20, QP1, GSI_QKEY, sa_lid)
        buf = ctypes.create_string_buffer(bytes(hdr) + mad, UMAD_HDR + MAD_SIZE)
        if lib.umad_send(port, agent, buf, MAD_SIZE, 2000, 3) < 0:
            raise SystemExit("umad_send failed")
        answer = ctypes.create_string_buffer(UMAD_HDR + 4096)
        length = ctypes.c_int(4096)
        got = lib.umad_recv(port, answer, ctypes.byref(length), 5000)
        print("timeout" if got < 0 else answer.raw[UMAD_HDR:UMAD_HDR + MAD_SIZE].hex(),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
