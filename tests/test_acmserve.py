"""The stand-in ibacm (`ibpath acm serve`, acmserve.py) outside the lab.

A real rdma_getaddrinfo cannot reach it here: librdmacm's ucma_init() needs an RDMA device
(cma.c sync_devices_list: ENODEV) before ucma_ib_resolve ever opens ibacm's socket; the test
below shows that and says so. So the exchange is checked as librdmacm makes it, a RESOLVE
with a source and a destination address entry (acm.c ucma_ib_resolve), and the answer is
read with struct at acm.h's offsets, not with the layers that built it. The oracle for the
path entries is the committed corpus capture of each scenario (captures/corpus, written by
`ibpath craft --corpus`): its blob frame is what the resolver handed over.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import ipaddress
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ibpath_scapy.acmserve import (
    ACM_MAX_COUNTER,
    DEFAULT_SOCKET,
    AcmServeError,
    Plan,
    StandIn,
    plan_for,
)
from ibpath_scapy.layers.ib import ExportedPDU
from ibpath_scapy.pcapio import read_frames

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "captures" / "corpus"
MANIFEST = {e["scenario"]: e
            for e in json.loads((CORPUS / "manifest.json").read_text())["scenarios"]}
HDR = struct.Struct("<BBBBBBHQ")  # struct acm_hdr: version opcode status data[3] length tid
EP = struct.Struct("<IHH64s")  # struct acm_ep_addr_data: flags type reserved info
ACM_EP_INFO_ADDRESS_IP, ACM_EP_INFO_PATH = 0x0002, 0x0010
LIMIT = (0xFFFF - 16) // 72  # entries that fit the 16-bit length


def corpus_blob(name: str) -> bytes | None:
    for f in read_frames(str(CORPUS / MANIFEST[name]["file"])):
        if f.linktype == 252:
            pdu = ExportedPDU(f.data)
            if pdu.dissector_name() == "ibpath.blob":
                return bytes(pdu.payload)
    return None


BLOB_SCENARIOS = sorted(n for n in MANIFEST if corpus_blob(n) is not None)


def librdmacm_request(src: str, dst: str, tid: int = 0) -> bytes:
    """The RESOLVE ucma_ib_resolve sends for AF_INET source and destination (acm.h layout,
    packed with struct: the test's own reading of the C, not the layers)."""
    body = b"".join(EP.pack(flag, ACM_EP_INFO_ADDRESS_IP, 0, ipaddress.IPv4Address(a).packed)
                    for flag, a in ((1, src), (2, dst)))
    return HDR.pack(1, 0x01, 0, 0, 0, 0, 16 + len(body), tid) + body


def read_message(conn: socket.socket) -> bytes:
    head = b""
    while len(head) < 16:
        part = conn.recv(16 - len(head))
        if not part:
            return head
        head += part
    length = HDR.unpack(head)[6]
    body = b""
    while len(body) < length - 16:
        part = conn.recv(length - 16 - len(body))
        if not part:
            break
        body += part
    return head + body


class Running:
    """A StandIn on a socket in tmp_path, served from a thread."""

    def __init__(self, tmp_path, plan, **kw):
        self.path = str(tmp_path / "acm.sock")
        self.server = StandIn(plan, socket_path=self.path, **kw)
        ready = threading.Event()
        self.thread = threading.Thread(target=self.server.serve_forever, args=(ready.set,),
                                       daemon=True)
        self.thread.start()
        ready.wait(5)

    def ask(self, data: bytes, timeout: float = 10) -> bytes:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(timeout)
        c.connect(self.path)
        with c:
            c.sendall(data)
            return read_message(c)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.stop()
        self.thread.join(5)


@pytest.mark.parametrize("name", BLOB_SCENARIOS)
def test_resolve_answers_the_corpus_blob(tmp_path, name):
    """Every scenario that hands over a blob: the answer's path entries are the blob of its
    committed corpus capture, record for record (flags, PathRecord bytes, the reserved word's
    high half; bytes past the last whole record after the entries)."""
    e = MANIFEST[name]
    blob = corpus_blob(name)
    plan = plan_for(name, seed=e["seed"], encap=e["encap"])
    assert plan.kind == "paths"
    with Running(tmp_path, plan, map_endpoints=False) as s:
        data = s.ask(librdmacm_request("10.0.0.1", "10.0.0.2", tid=0x1234))
    version, opcode, status, *_data, length, tid = HDR.unpack(data[:16])
    assert (version, opcode, status, tid, length) == (1, 0x81, 0, 0x1234, len(data))
    whole = len(blob) // 72
    sent = min(whole, LIMIT)
    entries = [EP.unpack(data[16 + 72 * i:16 + 72 * (i + 1)]) for i in range(sent)]
    for i, (flags, typ, reserved, path) in enumerate(entries):
        rflags, rreserved = struct.unpack("<II", blob[72 * i:72 * i + 8])
        assert (typ, flags, reserved, path) == (ACM_EP_INFO_PATH, rflags, rreserved >> 16,
                                                blob[72 * i + 8:72 * (i + 1)]), (name, i)
    tail = data[16 + 72 * sent:]
    assert tail == (blob[72 * whole:] if sent == whole else b""), name


def test_endpoints_are_mapped_to_the_requester(tmp_path):
    """By default the scenario's local and remote GIDs become the RoCE GIDs of the request's
    source and destination; every other byte of the record stays."""
    blob = corpus_blob("conform-ucma")
    e = MANIFEST["conform-ucma"]
    plan = plan_for("conform-ucma", seed=e["seed"], encap=e["encap"])
    with Running(tmp_path, plan) as s:
        data = s.ask(librdmacm_request("10.0.0.1", "10.0.0.2"))
    flags, _typ, _res, path = EP.unpack(data[16:88])
    # PathRecord (IBA 15.2.5.16): ServiceID bytes 0-7, DGID 8-23, SGID 24-39
    assert path[8:24] == ipaddress.IPv6Address("::ffff:10.0.0.2").packed
    assert path[24:40] == ipaddress.IPv6Address("::ffff:10.0.0.1").packed
    assert blob[16:48] != path[8:40]
    assert path[:8] + path[40:] == blob[8:16] + blob[48:72] and flags == 0x2B


def test_nth_resolve_gets_the_nth_blob(tmp_path):
    """A scenario handing over several arrays (res-stale-blob: two, equal there): the n-th
    RESOLVE gets the n-th, the last again after that. Two different corpus blobs here."""
    assert len(plan_for("res-stale-blob").arrays) == 2
    first, second = corpus_blob("conform-ucma"), corpus_blob("cm-req-path-mismatch")
    assert first[8:72] != second[8:72]
    plan = Plan("two", "paths", arrays=[first, second], local_gid="::1", remote_gid="::2")
    with Running(tmp_path, plan, map_endpoints=False) as s:
        got = [s.ask(librdmacm_request("10.0.0.1", "10.0.0.2"))[24:88] for _ in range(3)]
    assert got == [first[8:72], second[8:72], second[8:72]]


@pytest.mark.parametrize("name,status", [("sar-status", 3), ("saq-serviceid-half", 6),
                                         ("saq-bad-method", 3)])
def test_sa_status_answers(tmp_path, name, status):
    """acmp_sa_resp: hdr.status = SA status >> 8, header only (NO_RECORDS 0x0300 → ENODATA;
    0x0600 → 6); 0x000C has no SA-specific byte, which ibacm would read as success: the
    stand-in answers ENODATA."""
    plan = plan_for(name)
    with Running(tmp_path, plan) as s:
        data = s.ask(librdmacm_request("10.0.0.1", "10.0.0.2", tid=9))
    assert HDR.unpack(data) == (1, 0x81, status, 0, 0, 0, 16, 9)


def test_unanswered_sa_times_out(tmp_path):
    """saq-no-response: ETIMEDOUT after the delay; with no_answer, EOF after the hold."""
    plan = plan_for("saq-no-response", sa_timeout=0.3)
    with Running(tmp_path, plan) as s:
        t0 = time.monotonic()
        data = s.ask(librdmacm_request("10.0.0.1", "10.0.0.2"))
        assert time.monotonic() - t0 >= 0.3
    assert HDR.unpack(data)[2] == 6 and len(data) == 16
    with Running(tmp_path, plan, no_answer=True, hold=0.3) as s:
        assert s.ask(librdmacm_request("10.0.0.1", "10.0.0.2")) == b""
        assert s.server.exchanges[0]["answer"] is None


def test_perf_and_ep_query(tmp_path):
    """ib_acme's PERF_QUERY gets ACM_MAX_COUNTER counters, EP_QUERY an ENODATA end of list;
    an unknown opcode EINVAL."""
    with Running(tmp_path, plan_for("conform-ucma")) as s:
        perf = s.ask(HDR.pack(1, 0x02, 0, 0, 0, 0, 16, 5))
        ep = s.ask(HDR.pack(1, 0x03, 0, 0, 0, 0, 16, 6))
        bad = s.ask(HDR.pack(1, 0x07, 0, 0, 0, 0, 16, 7))
    assert HDR.unpack(perf[:16]) == (1, 0x82, 0, 0, ACM_MAX_COUNTER, 0,
                                     16 + 8 * ACM_MAX_COUNTER, 5)
    assert HDR.unpack(ep) == (1, 0x83, 3, 0, 0, 0, 16, 6)
    assert HDR.unpack(bad)[1:3] == (0x87, 2)


def test_log_and_capture(tmp_path):
    """Each exchange is one JSON line; --pcap writes request and answer as ibpath.acm."""
    log = tmp_path / "log.jsonl"
    with open(log, "w") as f, Running(tmp_path, plan_for("conform-ucma"), log=f,
                                      pcap=str(tmp_path / "acm.pcapng")) as s:
        s.ask(librdmacm_request("10.0.0.1", "10.0.0.2"))
    line = json.loads(log.read_text().splitlines()[0])
    assert line["request"]["opcode"] == "RESOLVE" and line["answer"]["status"] == "SUCCESS"
    names = [ExportedPDU(f.data).dissector_name()
             for f in read_frames(str(tmp_path / "acm.pcapng"))]
    assert names == ["ibpath.acm", "ibpath.acm"]


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "acm", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_cli_errors(tmp_path):
    """Bad input: exit 2 and one line naming the scenario or file and why; no traceback."""
    p = _cli("serve", "--scenario", "no-such", "--socket", str(tmp_path / "s"))
    assert p.returncode == 2 and "unknown scenario 'no-such'" in p.stderr
    p = _cli("serve", "--scenario", "conform-ucma", "--socket", str(tmp_path / "nodir" / "s"))
    assert p.returncode == 2 and f"{tmp_path / 'nodir'} does not exist" in p.stderr
    regular = tmp_path / "file"
    regular.write_text("x")
    p = _cli("serve", "--scenario", "conform-ucma", "--socket", str(regular))
    assert p.returncode == 2 and "exists and is not a socket" in p.stderr
    assert regular.read_text() == "x"
    p = _cli("serve", "--scenario", "conform-ucma", "--socket", str(tmp_path / "s"),
             "--log", str(tmp_path / "nodir" / "log"))
    assert p.returncode == 2 and "cannot write the log" in p.stderr
    assert "Traceback" not in p.stderr
    p = _cli("serve", "--scenario", "conform-ucma", "--port", "99999")
    assert p.returncode == 2 and "port 99999 is outside 1..65535" in p.stderr
    p = _cli("serve", "--scenario", "cm-roce-gid", "--encap", "ib", "--socket", str(tmp_path / "s"))
    assert p.returncode == 2 and "scenario cm-roce-gid is about rocev2 only, not ib" in p.stderr
    with Running(tmp_path, plan_for("conform-ucma")) as s:
        with pytest.raises(AcmServeError, match="already listens there"):
            StandIn(plan_for("conform-ucma"), socket_path=s.path)


def test_cli_serves_until_sigterm(tmp_path):
    """`ibpath acm serve` says "listening" once it accepts, answers, exits 0 on SIGTERM."""
    sock = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-m", "ibpath_scapy.cli.main", "acm", "serve",
                             "--scenario", "conform-ucma", "--socket", str(sock), "--log",
                             str(tmp_path / "log")], stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert "listening on" in proc.stderr.readline()
        c = socket.socket(socket.AF_UNIX)
        c.connect(str(sock))
        c.sendall(librdmacm_request("10.0.0.1", "10.0.0.2"))
        assert HDR.unpack(read_message(c)[:16])[2] == 0
        c.close()
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "1 exchange(s)" in err and not sock.exists()


RDMACM = ctypes.util.find_library("rdmacm")


@pytest.mark.skipif(RDMACM is None, reason="librdmacm is not installed (apt-get install "
                    "librdmacm1)")
def test_real_rdma_getaddrinfo(tmp_path):
    """The real call through ctypes. Without an RDMA device librdmacm fails in ucma_init()
    (ENODEV) and never opens ibacm's socket: the stand-in on /run/ibacm.sock sees nothing,
    which is why the real exchange is tested in the kernel lab (tests/test_acm_lab.py).
    With a device the answer's path must come back as ai_route."""
    if os.path.exists(DEFAULT_SOCKET) or not os.access(os.path.dirname(DEFAULT_SOCKET),
                                                        os.W_OK):
        pytest.skip(f"{DEFAULT_SOCKET} is taken or its directory is not writable")
    lib = ctypes.CDLL(RDMACM, use_errno=True)
    plan = plan_for("conform-ucma")
    server = StandIn(plan, socket_path=DEFAULT_SOCKET)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        res = ctypes.c_void_p()
        # rdma_addrinfo: flags, family, qp_type, port_space, src_len, dst_len, then
        # pointers; RAI_NUMERICHOST (0x02) keeps it off DNS
        hints = (ctypes.c_int * 6)(0x02, socket.AF_INET, 0, 0x0106, 0, 0)
        ret = lib.rdma_getaddrinfo(b"127.0.0.1", b"7471", ctypes.cast(hints, ctypes.c_void_p),
                                   ctypes.byref(res))
        err = ctypes.get_errno()
        time.sleep(0.2)
    finally:
        server.stop()
        thread.join(5)
    if not os.path.isdir("/sys/class/infiniband"):
        assert (ret, err) == (-1, 19)  # ENODEV from sync_devices_list
        assert server.exchanges == []
    else:
        assert ret == 0 and server.exchanges, "a device exists but librdmacm did not ask"
        lib.rdma_freeaddrinfo(res)


def test_tcp_port(tmp_path):
    """--port: ibacm's server mode, which librdmacm uses when /run/ibacm.port names a port;
    a port in use is refused with the reason."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = StandIn(plan_for("conform-ucma"), port=port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(AcmServeError, match=f"127.0.0.1:{port}: cannot listen: "
                           "Address already in use"):
            StandIn(plan_for("conform-ucma"), port=port)
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        with c:
            c.sendall(librdmacm_request("10.0.0.1", "10.0.0.2", tid=3))
            data = read_message(c)
    finally:
        server.stop()
        thread.join(5)
    assert HDR.unpack(data[:16])[1:3] == (0x81, 0) and len(data) == 88
