"""An ibacm stand-in and a librdmacm-like client on a unix socket, in one process, for
tests/test_record_shim.py. The messages are packed here with plain struct from
rdma-core librdmacm/acm.h (struct acm_hdr: u8 version, opcode, status, data[3], u16 length,
u64 tid, host order; struct acm_ep_addr_data: u32 flags, u16 type, u16 reserved, 64-byte
info), never with ibpath's layers. The server answers in two send() calls, so the recorder
has to re-frame the stream. Every message is printed as "<who> <sent|received> <hex>".

Usage: acm_peers.py SOCKET_PATH|tcp:PORT PATH_RECORD_FILE (64 bytes, MAD format)
(tcp:PORT: on 127.0.0.1, as ibacm's server mode listens)
"""

import socket
import struct
import sys
import threading

HDR = struct.Struct("<BBBBBBHQ")
EP = struct.Struct("<IHH64s")
ACM_OP_RESOLVE, ACM_OP_ACK = 0x01, 0x80
ACM_EP_INFO_ADDRESS_IP, ACM_EP_INFO_PATH = 0x0002, 0x0010
ACM_EP_FLAG_SOURCE, ACM_EP_FLAG_DEST = 1, 2
_out = threading.Lock()


def say(who: str, what: str, msg: bytes) -> None:
    with _out:  # one line at a time from the two threads
        sys.stdout.write(f"{who} {what} {msg.hex()}\n")
        sys.stdout.flush()


def message(opcode: int, tid: int, entries: list[bytes]) -> bytes:
    return HDR.pack(1, opcode, 0, 0, 0, 0, HDR.size + EP.size * len(entries), tid) + \
        b"".join(entries)


def recv_message(conn: socket.socket) -> bytes:
    buf = b""
    while len(buf) < HDR.size or len(buf) < struct.unpack_from("<H", buf, 6)[0]:
        chunk = conn.recv(4096)
        if not chunk:
            raise SystemExit("peer closed")
        buf += chunk
    return buf


def main() -> None:
    where, record_file = sys.argv[1], sys.argv[2]
    record = open(record_file, "rb").read()
    if where.startswith("tcp:"):
        family, address = socket.AF_INET, ("127.0.0.1", int(where[4:]))
    else:
        family, address = socket.AF_UNIX, where
    server = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(address)
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        request = recv_message(conn)
        say("server", "received", request)
        tid = HDR.unpack_from(request)[7]
        response = message(ACM_OP_RESOLVE | ACM_OP_ACK, tid,
                           [EP.pack(0x2B, ACM_EP_INFO_PATH, 0, record)])
        conn.send(response[:20])
        conn.send(response[20:])
        say("server", "sent", response)
        conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    client = socket.socket(family, socket.SOCK_STREAM)
    client.connect(address)
    request = message(ACM_OP_RESOLVE, 0x1234, [
        EP.pack(ACM_EP_FLAG_SOURCE, ACM_EP_INFO_ADDRESS_IP, 0, socket.inet_aton("192.0.2.1")),
        EP.pack(ACM_EP_FLAG_DEST, ACM_EP_INFO_ADDRESS_IP, 0, socket.inet_aton("192.0.2.2"))])
    client.send(request)
    say("client", "sent", request)
    say("client", "received", recv_message(client))
    thread.join()
    client.close()
    server.close()


if __name__ == "__main__":
    main()
