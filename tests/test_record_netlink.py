"""`ibpath record netlink`: a real program traced with strace (these machines have no ib_core, so
NETLINK_RDMA cannot be opened: the recorder is shown on NETLINK_ROUTE with `ip link show` and on
a small Python client attached with --pid), then the strace-output parser on a canned ibacm-like
NETLINK_RDMA session."""

import json
import shutil
import struct
import subprocess
import sys
import time

import pytest

from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.capture.pcapio import read_frames
from ibpath_scapy.record.netlink import StraceParser, parse_protocol, write_messages

from test_netlink import resolve_request, resolve_response, tshark_fields
from test_pathdata import pack_record

needs_strace = pytest.mark.skipif(shutil.which("strace") is None, reason="strace not installed")
IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main"]


def cooked_fields(raw: bytes) -> tuple[int, int, int, int]:
    """pkttype, hatype, halen, protocol of a link-type-253 record (struct oracle)."""
    pkttype, hatype, halen, _addr, proto = struct.unpack("!HHH8sH", raw[:16])
    return pkttype, hatype, halen, proto


def run_record(args, **kw):
    return subprocess.run(IBPATH + ["record", "netlink", *args], capture_output=True, text=True,
                          timeout=60, **kw)


@needs_strace
@pytest.mark.skipif(shutil.which("ip") is None, reason="iproute2 not installed")
def test_records_ip_link_show(tmp_path):
    out = tmp_path / "route.pcapng"
    t0 = time.time()
    p = run_record(["--protocol", "ROUTE", "-o", str(out), "--", "ip", "link", "show"])
    t1 = time.time()
    assert p.returncode == 0, p.stderr
    assert "NETLINK_ROUTE messages" in p.stderr
    frames = list(read_frames(str(out)))
    assert len(frames) >= 3 and {f.linktype for f in frames} == {253}
    rows = tshark_fields(out, ["netlink.family", "netlink.hatype", "netlink.hdr_flags",
                               "netlink.hdr_pid", "netlink-route.nltype",
                               "netlink-route.ifla_ifname", "frame.comment"])
    requests = replies = 0
    names = set()
    for f in frames:
        row = rows[f.number]
        pkttype, hatype, halen, proto = cooked_fields(f.data)
        assert (hatype, halen, proto) == (824, 0, 0)
        assert [int(v, 0) for v in row["netlink.family"]] == [0]
        assert [int(v) for v in row["netlink.hatype"]] == [824]
        flags = [int(v, 0) for v in row["netlink.hdr_flags"]]
        syscall, _, pid, _, _fd = row["frame.comment"][0].split()
        if syscall.startswith("send"):
            # ip's requests: NLM_F_REQUEST set, sent to the kernel → PACKET_KERNEL (7)
            assert flags[0] & 1 and pkttype == 7
            requests += 1
        else:
            # the kernel's replies carry the socket's port id and go to user space (6); an
            # NLMSG_ERROR ack echoes the request's header after its own, hence [0]
            assert pkttype == 6 and not flags[0] & 1
            assert row["netlink.hdr_pid"][0] == pid
            replies += 1
        names.update(row["netlink-route.ifla_ifname"])
        assert t0 - 1 <= f.time <= t1 + 1
    assert requests >= 1 and replies >= 2 and "lo" in names
    types = [int(t) for r in rows.values() for t in r["netlink-route.nltype"]]
    assert 18 in types and 16 in types  # RTM_GETLINK asked, RTM_NEWLINK answered
    assert [f.time for f in frames] == sorted(f.time for f in frames)
    assert list(decode_file(str(out))) == []  # route netlink is not path resolution


CHILD = r"""
import socket, struct, sys
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
s.bind((0, 0))
print("ready", flush=True)
sys.stdin.readline()
req = struct.pack("=LHHLL", 32, 18, 0x301, 1, 0) + struct.pack("=BxxxiII", 0, 0, 0, 0)
s.send(req)                                  # sendto(..., NULL, 0)
while struct.unpack("=LH", s.recv(65536)[:6])[1] != 3:   # recvfrom, until NLMSG_DONE
    pass
s.sendmsg([req[:16], req[16:]], [], 0, (0, 0))   # sendmsg, two iovecs, to the kernel
s.recvmsg(65536, 0, socket.MSG_PEEK)            # peeked: must not be recorded
s.recvmsg(65536)
"""


@needs_strace
def test_attaches_with_pid_to_a_socket_opened_before(tmp_path):
    out = tmp_path / "pid.pcapng"
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        rec = subprocess.Popen(IBPATH + ["record", "netlink", "--protocol", "0", "--pid",
                                         str(child.pid), "-o", str(out)],
                               stderr=subprocess.PIPE, text=True)
        for _ in range(200):  # wait until strace is attached
            with open(f"/proc/{child.pid}/status") as st:
                if next(l for l in st if l.startswith("TracerPid")).split()[1] != "0":
                    break
            time.sleep(0.02)
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.wait(timeout=30) == 0
        _, err = rec.communicate(timeout=30)
        assert rec.returncode == 0, err
    finally:
        child.kill()
    frames = list(read_frames(str(out)))
    calls = [f.comment.split()[0] for f in frames]
    assert calls[0] == "sendto" and calls.count("sendmsg") == 1 and calls.count("recvmsg") == 1
    assert calls.index("sendmsg") == len(calls) - 2 and set(calls[1:-2]) == {"recvfrom"}
    pkttypes = [cooked_fields(f.data)[0] for f in frames]
    assert pkttypes == [7 if c.startswith("send") else 6 for c in calls]
    req = frames[0].data[16:]
    assert frames[-2].data[16:] == req  # both iovecs, joined
    assert struct.unpack("<IHH", req[:8]) == (32, 18, 0x301)


@needs_strace
def test_rdma_socket_failure_is_reported(tmp_path):
    prog = ("import socket\ntry:\n socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 20)\n"
            "except OSError as e:\n print(e.errno)\n")
    p = run_record(["-o", str(tmp_path / "rdma.pcapng"), "--", sys.executable, "-c", prog])
    assert p.returncode == 0, p.stderr
    if p.stdout.strip():  # no ib_core: EPROTONOSUPPORT
        assert "NETLINK_RDMA) failed: EPROTONOSUPPORT (is ib_core loaded?)" in p.stderr
    assert "0 NETLINK_RDMA messages" in p.stderr


def test_cli_rejects_bad_arguments(tmp_path):
    assert run_record(["-o", str(tmp_path / "x")]).returncode == 2
    assert run_record(["--pid", "1", "-o", str(tmp_path / "x"), "--", "true"]).returncode == 2
    assert run_record(["--protocol", "NOPE", "-o", "x", "--", "true"]).returncode == 2
    assert parse_protocol("rdma") == parse_protocol("NETLINK_RDMA") == parse_protocol("0x14") == 20
    assert parse_protocol("SOCK_DIAG") == parse_protocol("inet_diag") == 4


# -- the parser on a canned NETLINK_RDMA session ------------------------------------------------

def hexesc(text: str) -> str:
    return "".join(f"\\x{ord(c):02x}" for c in text)


def fd(n: int, inode: int) -> str:
    return f"{n}<{hexesc(f'socket:[{inode}]')}>"


def dump(data: bytes) -> list[str]:
    """strace's -e read/-e write hex dump (strace/util.c dumpstr): offset, 16 bytes in two groups of
    8, the printable characters."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        hx = " ".join(f"{b:02x}" for b in chunk[:8])
        if len(chunk) > 8:
            hx += "  " + " ".join(f"{b:02x}" for b in chunk[8:])
        asc = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f" | {off:05x}  {hx:<49} {asc:<16} |")
    return lines


def canned_session() -> tuple[list[str], bytes, bytes]:
    req = resolve_request(seq=41, path_use=0)
    resp = resolve_response([pack_record(0x0A, 0, dlid=3), pack_record(0x12, 0, dlid=4),
                             pack_record(0x2B, 0, dlid=5)], seq=41, pid=555)
    lines = [
        # a recv already in progress when strace attached: no descriptor, cannot be attributed
        '554 1700000000.000050 <... recvfrom resumed>""..., 8192, 0, NULL, NULL) = 20 <1.000000>',
        *dump(b"\x14" + b"\x00" * 19),
        f"555 1700000000.000100 socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA) = 5<{hexesc('socket:[777]')}> <0.000010>",
        f"555 1700000000.000150 socket(AF_NETLINK, SOCK_RAW|SOCK_CLOEXEC, NETLINK_ROUTE) = 6<{hexesc('socket:[888]')}> <0.000010>",
        f"556 1700000000.100000 recvfrom({fd(5, 777)}, <unfinished ...>",
        f"555 1700000000.100500 sendto({fd(6, 888)}, \"\"..., 20, 0, NULL, 0) = 20 <0.000020>",
        *dump(b"\x14\x00\x00\x00" + b"\x00" * 16),
        f"556 1700000000.200000 <... recvfrom resumed>\"\"..., 8192, 0, NULL, NULL) = {len(req)} <0.100000>",
        *dump(req),
        f"556 1700000000.300000 recvfrom({fd(5, 777)}, \"\"..., 8192, MSG_PEEK, NULL, NULL) = {len(req)} <0.000005>",
        *dump(req),
        f"556 1700000000.400000 sendto({fd(5, 777)}, \"\"..., {len(resp)}, 0, {{sa_family=AF_NETLINK, "
        f"nl_pid=0, nl_groups=0x000004}}, 12) = {len(resp)} <0.000020>",
        *dump(resp),
        f"556 1700000000.500000 sendmsg({fd(5, 777)}, {{msg_name={{sa_family=AF_NETLINK, nl_pid=1234, "
        "nl_groups=00000000}, msg_namelen=12, msg_iov=[{iov_base=\"\"..., iov_len=16}, "
        f"{{iov_base=\"\"..., iov_len={len(resp) - 16}}}], msg_iovlen=2, msg_controllen=0, msg_flags=0}}, 0) = {len(resp)} <0.000030>",
        " * 16 bytes in buffer 0",
        *dump(resp[:16]),
        f" * {len(resp) - 16} bytes in buffer 1",
        *dump(resp[16:]),
        f"556 1700000000.600000 recvmsg({fd(5, 777)}, {{msg_namelen=12}}, MSG_DONTWAIT) = -1 EAGAIN "
        "(Resource temporarily unavailable) <0.000003>",
        "557 1700000000.700000 socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA) = -1 EPROTONOSUPPORT "
        "(Protocol not supported) <0.000011>",
        "556 1700000000.800000 +++ exited with 0 +++",
    ]
    return lines, req, resp


def test_parser_on_canned_rdma_session(tmp_path):
    lines, req, resp = canned_session()
    parser = StraceParser(20, pid=None)
    parser.sockets.clear()  # this machine's sockets are not the canned ones
    msgs = [m for line in lines for m in parser.feed(line)] + list(parser.flush())
    assert [(m.syscall, m.pkttype, m.protocol, m.pid, m.fd) for m in msgs] == [
        ("recvfrom", 6, 20, 556, 5), ("sendto", 7, 20, 556, 5), ("sendmsg", 6, 20, 556, 5)]
    assert [m.data for m in msgs] == [req, resp, resp]
    assert msgs[0].time == pytest.approx(1700000000.2)  # a receive: the syscall's return
    assert msgs[1].time == pytest.approx(1700000000.4)  # a send: its entry
    assert parser.unattributed == 1
    assert parser.socket_failures == [
        "socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA) failed: EPROTONOSUPPORT"]
    out = tmp_path / "ls.pcapng"
    assert write_messages(msgs, str(out)).messages == 3
    recs = list(decode_file(str(out), render=True))
    json.dumps(recs)
    assert [r["kind"] for r in recs] == ["ls", "ls", "ls"]
    assert recs[0]["direction"] == "to_user" and recs[0]["ls"]["request"]
    assert recs[1]["direction"] == "to_kernel" and recs[1]["ls"]["request_frame"] == 1
    assert [r["flags"] for r in recs[1]["blob_records"]] == [0x0A, 0x12, 0x2B]
    assert recs[1]["kernel_view"]["ls-multi"]["gmp"] == 2
    assert recs[1]["kernel_view"]["ls-multi"]["forward"] == 0
    rows = tshark_fields(out, ["netlink.family", "netlink.hdr_type", "netlink.hdr_seq"])
    assert all(r["netlink.family"] == ["0x0014"] and r["netlink.hdr_seq"] == ["41"]
               for r in rows.values())


def test_parser_keeps_every_protocol_when_asked():
    lines, _, _ = canned_session()
    parser = StraceParser(None)
    parser.sockets.clear()
    msgs = [m for line in lines for m in parser.feed(line)] + list(parser.flush())
    assert [(m.protocol, m.pkttype) for m in msgs] == [(0, 7), (20, 6), (20, 7), (20, 6)]
