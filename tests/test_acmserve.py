"""The stand-in ibacm (`ibpath acm serve`, acmserve.py) outside the lab.

A real rdma_getaddrinfo cannot reach it here: librdmacm's ucma_init() needs an RDMA device
(cma.c sync_devices_list: ENODEV) before ucma_ib_resolve ever opens ibacm's socket; the test
below shows that and says so. So the exchange is checked as librdmacm makes it, a RESOLVE
with a source and a destination address entry (acm.c ucma_ib_resolve), and the answer is
read with struct at acm.h's offsets, not with the layers that built it. The oracle for the
path entries is the committed corpus capture of each scenario (captures/corpus, written by
`ibpath craft --corpus`): its blob frame is what the resolver handed over.

ib_acme (Debian's ibacm package) needs no device: it talks to the socket -S names through
libacm, which sends PERF_QUERY and EP_QUERY in network order and parses the answers as
ibacm sends them. Its printout is the oracle for those answers and for a RESOLVE by IP
address; `ibpath record` around it gives the recording that decode and audit must read.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import ipaddress
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ibpath_scapy.acm.serve import DEFAULT_SOCKET, AcmServeError, Plan, StandIn, plan_for
from ibpath_scapy.layers.ib import ExportedPDU
from ibpath_scapy.capture.pcapio import read_frames

IBPATH = [sys.executable, "-m", "ibpath_scapy"]

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "captures" / "corpus"
MANIFEST = {e["scenario"]: e
            for e in json.loads((CORPUS / "manifest.json").read_text())["scenarios"]}
HDR = struct.Struct("<BBBBBBHQ")  # struct acm_hdr: version opcode status data[3] length tid
EP = struct.Struct("<IHH64s")  # struct acm_ep_addr_data: flags type reserved info
EP_CONFIG = struct.Struct(">QBBHHH64s")  # struct acm_ep_config_data, network order
ACM_EP_INFO_ADDRESS_IP, ACM_EP_INFO_PATH = 0x0002, 0x0010
LIMIT = (0xFFFF - 16) // 72  # entries that fit the 16-bit length
# libacm ib_acm_cntr_name, in acm.h's ACM_CNTR_* order
COUNTER_NAMES = ["Error Count", "Resolve Count", "No Data", "Addr Query Count",
                 "Addr Cache Count", "Route Query Count", "Route Cache Count"]


def unpack_hdr(data: bytes) -> tuple:
    """struct acm_hdr as acm.h says it travels: RESOLVE not byte swapped, PERF_QUERY and
    EP_QUERY in network order (the length; ibacm acm_msg_length, libacm be16toh)."""
    fields = HDR.unpack_from(data)
    if fields[1] & 0x0F != 0x01:
        fields = fields[:6] + struct.unpack_from(">H", data, 6) + fields[7:]
    return fields


def libacm_query(opcode: int, src_out: int = 0, src_index: int = 0, entry: bytes = b"") -> bytes:
    """A PERF_QUERY or EP_QUERY as libacm sends it: header in network order, tid 0, an
    optional entry in host order (ib_acm_query_perf, ib_acm_enum_ep, acm_format_ep_addr)."""
    return (struct.pack("<BBBBBB", 1, opcode, 0, src_out, src_index, 0)
            + struct.pack(">H", 16 + len(entry)) + bytes(8) + entry)


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
    length = unpack_hdr(head)[6]
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


def test_perf_and_ep_query_answered_as_ibacm(tmp_path):
    """ibacm's answers to libacm's queries, read with struct in network order: PERF_QUERY
    gets src_out 64-bit counters (RESOLVE counted, ENODATA as No Data), for the service, for
    endpoint 1 or for one of its addresses, and ESRCADDR for another endpoint or address;
    EP_QUERY gets struct acm_ep_config_data for endpoint 1 (on port 1 or any port), EINVAL
    for any other. An unknown opcode or version is not answered: the connection closes."""
    plan = plan_for("conform-ucma")
    local_ip = plan.local_ip
    with Running(tmp_path, plan) as s:
        perf = s.ask(libacm_query(0x02))
        s.ask(librdmacm_request("10.0.0.1", "10.0.0.2"))
        after = s.ask(libacm_query(0x02))
        by_index = s.ask(libacm_query(0x02, src_index=1))
        other = s.ask(libacm_query(0x02, src_index=2))
        addr = lambda a: EP.pack(1, ACM_EP_INFO_ADDRESS_IP, 0, ipaddress.IPv4Address(a).packed)
        by_address = s.ask(libacm_query(0x02, entry=addr("10.0.0.1")))
        unknown = s.ask(libacm_query(0x02, entry=addr("10.9.9.9")))
        not_source = s.ask(libacm_query(0x02, entry=EP.pack(2, 2, 0, bytes(64))))
        ep = s.ask(libacm_query(0x03, src_out=1, src_index=1))
        ep_any_port = s.ask(libacm_query(0x03, src_out=1, src_index=0))
        ep2 = s.ask(libacm_query(0x03, src_out=2, src_index=1))
        port2 = s.ask(libacm_query(0x03, src_out=1, src_index=2))
        bad = s.ask(libacm_query(0x07))
        version = s.ask(b"\x02" + libacm_query(0x02)[1:])
    counters = lambda m: list(struct.unpack_from(f">{unpack_hdr(m)[3]}Q", m, 16))
    assert unpack_hdr(perf) == (1, 0x82, 0, 7, 0, 0, 16 + 7 * 8, 0) and len(perf) == 72
    assert counters(perf) == [0] * 7
    assert counters(after) == [0, 1, 0, 0, 0, 0, 0]  # Resolve Count 1
    assert counters(by_index) == counters(by_address) == counters(not_source) == counters(after)
    assert unpack_hdr(by_index)[3:5] == (7, 1)  # src_index kept, as acm_svr_perf_query does
    for m in (other, unknown):
        assert unpack_hdr(m)[1:3] == (0x82, 7) and len(m) == 16  # ESRCADDR, the header alone
    head = unpack_hdr(ep)
    assert head[:6] == (1, 0x83, 0, 1, 0, 0) and head[6] == len(ep) == 16 + 80 + 2 * 64
    guid, port, ports, _rsvd, pkey, count, prov = EP_CONFIG.unpack_from(ep, 16)
    names = [ep[96 + 64 * i:160 + 64 * i].rstrip(b"\0").decode() for i in range(count)]
    assert guid == int.from_bytes(ipaddress.IPv6Address(plan.local_gid).packed[8:], "big")
    assert (port, ports, pkey, prov.rstrip(b"\0")) == (1, 1, 0xFFFF, b"ibpath")
    assert names == [local_ip, "10.0.0.1"]  # its own, then the source it answered for
    assert ep_any_port == ep
    for m in (ep2, port2):
        assert unpack_hdr(m)[1:3] == (0x83, 2) and len(m) == 16  # EINVAL
    assert bad == b"" and version == b""
    with Running(tmp_path, plan_for("sar-status")) as s:  # answered ENODATA
        s.ask(librdmacm_request("10.0.0.1", "10.0.0.2"))
        assert counters(s.ask(libacm_query(0x02))) == [0, 1, 1, 0, 0, 0, 0]


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


# -- ib_acme, the real client -------------------------------------------------------------------

IB_ACME = shutil.which("ib_acme")
needs_ib_acme = pytest.mark.skipif(IB_ACME is None, reason="ib_acme is not installed (Debian "
                                   "package ibacm; tools/install.sh installs it)")
# IBA 15.2.5.16 PathRecord, MAD format: dgid, sgid, dlid, slid, flow label/hop limit word,
# tclass, reversible/numbpath, pkey, qos/sl, mtu, rate, packet lifetime
PATH_FIELDS = struct.Struct(">8x16s16sHHIBBHHBBB")


class Served:
    """`ibpath acm serve` as a process on a socket in tmp_path, logging to a file there."""

    def __init__(self, tmp_path: Path, scenario: str, *options: str):
        self.sock, self.log_path = tmp_path / "acm.sock", tmp_path / "serve.jsonl"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ibpath_scapy.cli.main", "acm", "serve", "--scenario",
             scenario, "--socket", str(self.sock), "--log", str(self.log_path), *options],
            stderr=subprocess.PIPE, text=True, cwd=ROOT)
        line = self.proc.stderr.readline()
        assert "listening on" in line, line + self.proc.stderr.read()

    def acme(self, *args: str, status: int = 0) -> str:
        """ib_acme's printout for `ib_acme -S SOCKET ARGS`, which must exit with `status` (0
        also when a perf or endpoint query failed: it prints why; 255 for a failed RESOLVE,
        "return status 0xffffffff")."""
        p = subprocess.run([IB_ACME, "-S", str(self.sock), *args], capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == status, f"ib_acme {' '.join(args)}: exit {p.returncode}\n{p.stdout}"
        return p.stdout

    def answers(self, opcode: str) -> list[dict]:
        """The answers the stand-in logged to requests of that opcode, in order."""
        lines = [json.loads(x) for x in self.log_path.read_text().splitlines()]
        assert not [x for x in lines if "error" in x], lines
        return [x["answer"] for x in lines if x["request"]["opcode"] == opcode]

    def close(self) -> None:
        self.proc.terminate()
        _out, err = self.proc.communicate(timeout=30)
        assert self.proc.returncode == 0, err

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def perf_rows(text: str) -> tuple[list[str], list[list[int]]]:
    """ib_acme -P's printout (acme.c query_perf_one): "svc,<counter names>", then one
    "svc,<values>" row per query."""
    lines = [ln for ln in text.splitlines() if "," in ln]
    head = lines[0].split(",")
    assert head[0] == "svc", text
    return head[1:], [[int(v) for v in ln.split(",")[1:]] for ln in lines[1:]]


def perf_column(text: str) -> dict[str, int]:
    """ib_acme -P col's printout: "<name> : <value>" lines."""
    return {k: int(v) for k, v in re.findall(r"^(.+?) : (\d+)$", text, re.M)}


def ep_rows(text: str) -> list[dict]:
    """ib_acme -e's printout (acme.c enumerate_ep): svc, 0x%016 guid, port, 0x%04x pkey,
    ep_index, provider, then the addresses."""
    lines = [ln for ln in text.splitlines() if "," in ln]
    assert lines[0] == "svc,guid,port,pkey,ep_index,prov,addr_0,addresses", text
    rows = []
    for ln in lines[1:]:
        _svc, guid, port, pkey, index, prov, *addrs = ln.split(",")
        rows.append({"guid": int(guid, 16), "port": int(port), "pkey": int(pkey, 16),
                     "index": int(index), "prov": prov, "addresses": addrs})
    return rows


def path_info(text: str) -> dict[str, str]:
    """ib_acme's "Path information" block (acme.c show_path): "  <key>: <value>"."""
    block = text.split("Path information\n", 1)[1]
    return dict(re.findall(r"^  ([a-z ]+): (\S+)$", block, re.M))


def printed_path(record: bytes) -> dict[str, str]:
    """What show_path prints of a 64-byte PathRecord, computed here from its bytes."""
    dgid, sgid, dlid, slid, fl_hop, tclass, rev, pkey, qos_sl, mtu, rate, plt = \
        PATH_FIELDS.unpack(record[:PATH_FIELDS.size])
    gid = lambda b: socket.inet_ntop(socket.AF_INET6, b)  # noqa: E731  libc's, as show_path
    return {"dgid": gid(dgid), "sgid": gid(sgid), "dlid": str(dlid), "slid": str(slid),
            "flow label": hex(fl_hop >> 8), "hop limit": str(fl_hop & 0xFF),
            "tclass": str(tclass), "reversible": str(rev >> 7), "pkey": hex(pkey),
            "sl": str(qos_sl & 0xF), "mtu": str(mtu & 0x1F), "rate": str(rate & 0x1F),
            "packet lifetime": str(plt & 0x1F)}


@needs_ib_acme
def test_ib_acme_prints_what_the_stand_in_answers(tmp_path):
    """ib_acme -P (row, col, by endpoint, by address), -e (all, by index) and -f i against
    the stand-in: every printout is what its answers say, as libacm parses them. The path
    is the corpus blob's record with the requester's RoCE GIDs; the counters count the
    RESOLVE; the endpoint is the scenario's (its GID's interface ID, P_Key, address) and
    the source it answered for."""
    e = MANIFEST["conform-ucma"]
    plan = plan_for("conform-ucma", seed=e["seed"], encap=e["encap"])
    record = bytearray(corpus_blob("conform-ucma")[8:72])
    record[8:40] = (ipaddress.IPv6Address("::ffff:10.0.0.2").packed
                    + ipaddress.IPv6Address("::ffff:10.0.0.1").packed)
    with Served(tmp_path, "conform-ucma", "--seed", str(e["seed"]), "--encap", e["encap"]) as s:
        names, rows = perf_rows(s.acme("-P"))
        assert names == COUNTER_NAMES and rows == [[0] * 7]
        out = s.acme("-f", "i", "-s", "10.0.0.1", "-d", "10.0.0.2")
        assert path_info(out) == printed_path(bytes(record))
        answered = s.answers("RESOLVE")[0]["entries"][0]
        assert path_info(out)["sgid"] == answered["sgid"] == "::ffff:10.0.0.1"
        _names, rows = perf_rows(s.acme("-P"))
        assert rows == [[0, 1, 0, 0, 0, 0, 0]] == [s.answers("PERF_QUERY")[-1]["counters"]]
        assert perf_column(s.acme("-P", "col")) == dict(zip(COUNTER_NAMES, rows[0]))
        assert perf_rows(s.acme("-P", "1"))[1] == rows  # endpoint 1: every RESOLVE reached it
        assert perf_rows(s.acme("-P", "s", "-s", "10.0.0.1"))[1] == rows  # by its address
        assert perf_rows(s.acme("-P", "all"))[1] == rows  # endpoint 1, then none
        # ESRCADDR → EADDRNOTAVAIL (libacm acm_error)
        assert "Failed to query perf data: Cannot assign requested address" in s.acme("-P", "2")
        assert "ib_acm_query_perf failed: Cannot assign requested address" in s.acme(
            "-P", "s", "-s", "10.9.9.9")
        eps = ep_rows(s.acme("-e"))
        want = {"guid": int.from_bytes(ipaddress.IPv6Address(plan.local_gid).packed[8:], "big"),
                "port": 1, "pkey": int.from_bytes(record[50:52], "big"), "index": 1,
                "prov": "ibpath", "addresses": [plan.local_ip, "10.0.0.1"]}
        assert eps == [want]
        logged = s.answers("EP_QUERY")[0]["endpoint"]
        assert (logged["dev_guid"], logged["pkey"], logged["addresses"]) == (
            want["guid"], want["pkey"], want["addresses"])
        # -e asks index 2 on every port 1..255 (acme.c enumerate_ep) and gets EINVAL each time
        assert [a["status"] for a in s.answers("EP_QUERY")] == ["SUCCESS"] + ["EINVAL"] * 255
        assert ep_rows(s.acme("-e", "1")) == [want]
        assert s.acme("-e", "2").startswith(" Endpoint 2 is not available")


@needs_ib_acme
def test_ib_acme_sees_the_scenarios_errors_and_their_counts(tmp_path):
    """A scenario whose SA answered NO_RECORDS: ENODATA, counted as No Data; one whose SA
    never answered: ETIMEDOUT after --timeout, counted as an error (acm.c
    acm_resolve_response)."""
    with Served(tmp_path, "sar-status") as s:
        out = s.acme("-f", "i", "-s", "10.0.0.1", "-d", "10.0.0.2", status=255)
        assert "ib_acm_resolve_ip failed: No data available" in out
        assert perf_rows(s.acme("-P"))[1] == [[0, 1, 1, 0, 0, 0, 0]]
    with Served(tmp_path, "saq-no-response", "--timeout", "0.2") as s:
        out = s.acme("-f", "i", "-s", "10.0.0.1", "-d", "10.0.0.2", status=255)
        assert "ib_acm_resolve_ip failed: Connection timed out" in out
        assert perf_rows(s.acme("-P"))[1] == [[1, 1, 0, 0, 0, 0, 0]]


@needs_ib_acme
@pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")),
                    reason="no C compiler for ibpath record's shim")
def test_ib_acme_recorded_decodes_and_audits(tmp_path):
    """ib_acme -P, -e, -f i and -P col under `ibpath record`: every ACM message a frame whose
    length (host order for RESOLVE, network order for the others) is its size, nothing
    malformed; the recorded counters and endpoint are what ib_acme printed; the audit finds
    nothing and sees one RESOLVE exchange. The tshark engine (with the plugin) reads the
    same records."""
    from ibpath_scapy.engines.scapy.decode import Decoder, decode_file

    with Served(tmp_path, "conform-ucma") as s:
        rec = tmp_path / "ib_acme.pcapng"
        sock = str(s.sock)
        script = "; ".join(f"{IB_ACME} -S {sock} {a}" for a in
                           ("-P", "-e", "-f i -s 10.0.0.1 -d 10.0.0.2", "-P col"))
        p = subprocess.run(IBPATH + ["record", "-o", str(rec), "--acm-socket", sock, "--",
                                     "sh", "-c", script],
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        served = sum(1 for _ in s.log_path.read_text().splitlines())
    printed = p.stdout.split("return status 0x0\n")
    decoder = Decoder()
    records = list(decode_file(str(rec), decoder, render=True))
    assert decoder.stats.malformed == 0
    assert len(records) == 2 * served == 2 * (1 + 256 + 1 + 1)
    assert all(r["kind"] == "acm" and r["acm"]["length"] == r["size"] and "errors" not in r
               for r in records)
    raw = [ExportedPDU(f.data) for f in read_frames(str(rec))]
    assert [unpack_hdr(bytes(x.payload))[6] for x in raw] == [r["size"] for r in records]
    perf = [r["counters"] for r in records if r["acm"]["opcode"] == 0x82]
    assert perf == [perf_rows(printed[0])[1][0], list(perf_column(printed[3]).values())]
    (ep,) = [r["endpoint"] for r in records if "endpoint" in r]
    (row,) = ep_rows(printed[1])
    assert (ep["dev_guid"], ep["port_num"], ep["pkey"], ep["provider"], ep["addresses"]) == (
        row["guid"], row["port"], row["pkey"], row["prov"], row["addresses"])
    report = tmp_path / "audit.json"
    from ibpath_scapy.cli.main import main
    assert main(["audit", "--quiet", "--format", "json", "-o", str(report), str(rec)]) == 0
    doc = json.loads(report.read_text())
    assert doc["findings"] == [] and doc["summary"]["acm_exchanges"] == 1
    if shutil.which("tshark"):
        from ibpath_scapy.engines.tshark.process import tshark_records
        from plugin_oracle import assert_no_malformed
        from ibpath_scapy.luagen.plugin import CHECKOUT_PLUGIN

        def same(r):
            return {k: v for k, v in r.items() if k != "time"}
        assert [same(r) for r in tshark_records(str(rec), render=True)] == \
            [same(r) for r in records]
        assert_no_malformed(str(rec), str(CHECKOUT_PLUGIN))


def test_hostile_clients_leave_the_stand_in_answering(tmp_path, monkeypatch):
    """Random bytes, a truncated header, a length of 0xFFFF, one byte at a time, a header and
    no body, 300 connections at once and more than MAX_CLIENTS: the stand-in closes what it
    cannot read (logged), lets an idle client go after its idle time, turns clients away over
    its cap as ibacm does, and still answers librdmacm's RESOLVE afterwards."""
    import random

    from ibpath_scapy.acm import serve as acmserve

    monkeypatch.setattr(acmserve, "MAX_CLIENTS", 40)
    rnd = random.Random(43)
    with Running(tmp_path, plan_for("conform-ucma"), map_endpoints=False) as s:
        s.server.idle = 0.5

        def connect():
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.connect(s.path)  # blocking: waits for a place in the listen backlog
            c.settimeout(5)
            return c

        def closed(c) -> bool:
            """The stand-in closed the connection (a reset where bytes were left unread)."""
            try:
                return c.recv(64) == b""
            except ConnectionResetError:
                return True

        good = librdmacm_request("10.0.0.1", "10.0.0.2")
        for data in (rnd.randbytes(4096), good[:7], good[:6] + b"\xff\xff" + good[8:16],
                     good[:16]):
            with connect() as c:
                c.sendall(data)
                assert closed(c)  # unreadable, or idle past 0.5 s
        with connect() as c:  # one byte at a time still makes a request
            for b in good:
                c.sendall(bytes([b]))
            assert HDR.unpack(read_message(c)[:16])[1] == 0x81
        many = [connect() for _ in range(300)]  # over the cap: the rest are turned away
        turned_away = 0
        for c in many:
            c.settimeout(2)
            try:
                turned_away += closed(c)
            except socket.timeout:
                pass  # held open, idle: let go later
        for c in many:
            c.close()
        assert turned_away >= 300 - 40
        time.sleep(1)  # the idle ones are let go
        answer = s.ask(good)
        assert HDR.unpack(answer[:16])[1:3] == (0x81, 0)
        errors = [e["error"] for e in s.server.exchanges if "error" in e]
    assert any("outside 16..592" in e for e in errors)
    assert any("nothing received for 0.5 s" in e for e in errors)
    assert any("connections busy - rejecting" in e for e in errors)
    assert s.server.clients == 0
