"""The committed recorded runs (captures/rxe/record, `ibpath lab run record-all`): issue 20
point 5, "proof against real software", in the kernel lab (real librdmacm, rdma-core 44; a
real kernel, 6.1 with rdma_rxe).

Each run's client (the lab's test program with every blob of the matrix, or without one;
Debian's rping and ucmatose as they are) ran under `ibpath record` while tcpdump captured the
rxe link. The oracles are independent of the recorder and of each other:

* the test program's own report (NAME.client.json: the blob it passed, rdma_set_option's
  return value and errno as ctypes saw them) and the blob scenarios.py built;
* the wire: the CM REQ the kernel sent, read here at IBTA offsets with struct (and with the
  Scapy CM layer), and the IP header it travelled in;
* the kernel's own readback (RDMA_USER_CM_CMD_QUERY with RDMA_USER_CM_QUERY_PATH, the
  ib_path_rec_data array librdmacm asked for after ROUTE_RESOLVED), read at
  rdma_user_cm.h / IBTA PathRecord offsets with struct (and with the Scapy layers);
* for NETLINK_RDMA, the strace recorder, which saw the same `rdma dev` process through
  ptrace rather than the shim's LD_PRELOAD wrappers, and the command's printed output.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ibpath_scapy.lab import recordmatrix
from ibpath_scapy.lab.scenarios import record_scenarios
from ibpath_scapy.layers.ib import ExportedPDU
from ibpath_scapy.capture.pcapio import read_frames

ROOT = Path(__file__).resolve().parent.parent
REC = ROOT / "captures" / "rxe" / "record"
LAB = json.loads((REC / "lab.json").read_text())
MATRIX = {r["scenario"]: r for r in json.loads((REC / "matrix.json").read_text())["rows"]}
RUNS = {s.name: s for s in record_scenarios() if s.kind == "record"}
NETLINK = next(s.name for s in record_scenarios() if s.kind == "record-netlink")
BLOB_RUNS = sorted(n for n, s in RUNS.items() if s.blob is not None)
CMTEST_RUNS = sorted(n for n, s in RUNS.items() if s.client == "cmtest")

UCMA_CMD_SET_OPTION, UCMA_CMD_QUERY, UCMA_CMD_CONNECT = 14, 19, 6  # rdma_user_cm.h
RDMA_USER_CM_QUERY_PATH = 1
FLAGS_GMP_PRIMARY_BIDIRECTIONAL = 0x2B


def report(name: str) -> dict:
    return json.loads((REC / f"{name}.client.json").read_text())


def upper_pdus(name: str, dissector: str, directory: Path = REC) -> list:
    """(payload bytes, packet comment) of the capture's exported PDUs for dissector, read
    at the exported PDU's TLVs with struct (tag 12 = dissector name, tag 0 ends)."""
    out = []
    for f in read_frames(str(directory / f"{name}.pcapng")):
        if f.linktype != 252:
            continue
        data, off, proto = f.data, 0, None
        while True:
            tag, length = struct.unpack_from(">HH", data, off)
            off += 4
            if tag == 0:
                break
            if tag == 12:
                proto = data[off:off + length].rstrip(b"\0").decode()
            off += length + (-length) % 4
        if proto == dissector:
            out.append((data[off:], f.comment or ""))
    return out


# -- PathRecord (IBTA 15.2.5.16) and CM REQ (IBTA 12.6.5) at their offsets -----------------

def path_record(b: bytes) -> dict:
    word, = struct.unpack_from(">I", b, 44)
    return {"dgid": ipaddress.IPv6Address(b[8:24]), "sgid": ipaddress.IPv6Address(b[24:40]),
            "dlid": struct.unpack_from(">H", b, 40)[0], "slid": struct.unpack_from(">H", b, 42)[0],
            "flow_label": (word >> 8) & 0xFFFFF, "hop_limit": word & 0xFF, "tclass": b[48],
            "pkey": struct.unpack_from(">H", b, 50)[0],
            "sl": struct.unpack_from(">H", b, 52)[0] & 0xF, "mtu": b[54] & 0x3F,
            "rate": b[55] & 0x3F, "packet_life_time": b[56] & 0x3F}


ROCE_MAD = 14 + 20 + 8 + 12 + 8  # Ethernet, IPv4, UDP, BTH, DETH: the MAD starts here
MAD_HDR = 24


def cm_reqs(name: str, directory: Path = REC) -> list[tuple[dict, dict]]:
    """(the REQ's primary path, the IP header) of every CM REQ (MAD class 0x07, attribute
    0x0010) tcpdump captured, at IBTA offsets."""
    out = []
    for f in read_frames(str(directory / f"{name}.pcapng")):
        d = f.data
        if f.linktype != 1 or len(d) < ROCE_MAD + MAD_HDR + 96 or d[12:14] != b"\x08\x00":
            continue
        if struct.unpack_from(">H", d, 36)[0] != 4791:  # UDP destination port: RoCEv2
            continue
        mad = d[ROCE_MAD:]
        if mad[1] != 0x07 or struct.unpack_from(">H", mad, 16)[0] != 0x0010:
            continue
        r = mad[MAD_HDR:]
        word, = struct.unpack_from(">I", r, 88)
        req = {"pkey": struct.unpack_from(">H", r, 48)[0], "mtu": r[50] >> 4,
               "slid": struct.unpack_from(">H", r, 52)[0],
               "dlid": struct.unpack_from(">H", r, 54)[0],
               "sgid": ipaddress.IPv6Address(r[56:72]), "dgid": ipaddress.IPv6Address(r[72:88]),
               "flow_label": word >> 12, "rate": word & 0x3F, "tclass": r[92],
               "hop_limit": r[93], "sl": r[94] >> 4, "subnet_local": (r[94] >> 3) & 1,
               "local_ack_timeout": r[95] >> 3}
        # private data (byte 140 on): the CMA header, cma_version, ip_version, the source port
        req["service_id"], = struct.unpack_from(">Q", r, 8)
        req["cma_sport"], = struct.unpack_from(">H", r, 140 + 2)
        ip = {"tos": d[15], "ttl": d[22], "src": ipaddress.IPv4Address(d[26:30]),
              "dst": ipaddress.IPv4Address(d[30:34]), "dmac": d[0:6]}
        out.append((req, ip))
    return out


def readbacks(name: str, directory: Path = REC) -> list[list[dict]]:
    """The QUERY(PATH) responses before the CONNECT, each a list of (flags, path record):
    the ucma frame is the command (8-byte header, rdma_ucm_query: response u64, id u32,
    option u32) followed by the response (num_paths u32, reserved u32, 72-byte records)."""
    out = []
    for data, _ in upper_pdus(name, "ibpath.ucma", directory):
        cmd, = struct.unpack_from("<I", data)
        if cmd == UCMA_CMD_CONNECT:
            break
        if cmd != UCMA_CMD_QUERY or struct.unpack_from("<I", data, 20)[0] != \
                RDMA_USER_CM_QUERY_PATH or len(data) < 32:
            continue
        num, = struct.unpack_from("<I", data, 24)
        recs = [(struct.unpack_from("<I", data, 32 + 72 * i)[0],
                 path_record(data[40 + 72 * i:104 + 72 * i]))
                for i in range(num) if len(data) >= 104 + 72 * i]
        if recs:
            out.append(recs)
    return out


# -- the tests ----------------------------------------------------------------------------------

def test_every_run_is_committed():
    """One capture, one report and one matrix row per recorded run, nothing else; the guest
    is the lab's (6.1 kernel, rdma-core 44)."""
    assert set(MATRIX) == set(RUNS)
    assert set(LAB["scenarios"]) == set(RUNS) | {NETLINK}
    assert {p.stem for p in recordmatrix.run_files(REC)} == set(RUNS)
    assert {p.name.split(".")[0] for p in REC.glob("*.client.json")} == set(CMTEST_RUNS)
    assert LAB["kernel_release"].startswith("6.1.") and LAB["packages"]["librdmacm1"] == "44.0-2"


@pytest.mark.parametrize("name", sorted(RUNS))
def test_connected_as_meant(name):
    """Every run connected (client and server exit 0) except the foreign DGID, which must
    not; the programs say so themselves (the test program's report, rping's and
    ucmatose's own output)."""
    s = LAB["scenarios"][name]
    assert (s["client_exit"] == 0 and s["server_exit"] == 0) == RUNS[name].connects, s
    log = (REC / f"{name}.client.log").read_text()
    if RUNS[name].client == "cmtest":
        assert ("sent" in report(name)) == RUNS[name].connects
    elif RUNS[name].client == "rping":
        assert "ping data: rdma-ping-0" in log
    else:
        assert "data transfers complete" in log


@pytest.mark.parametrize("name", CMTEST_RUNS)
def test_recorded_blob_and_verdict_are_the_programs(name):
    """The blob and verdict `ibpath record` recorded (the ibpath.blob frame and its comment,
    the SET_OPTION command's rc/errno) are what the test program reports it passed and got
    back (ctypes: rdma_set_option's return value and errno), and the blob is the one
    scenarios.py built. A run without a blob has no SET_OPTION at all."""
    rep = report(name)
    blobs = upper_pdus(name, "ibpath.blob")
    cmds = [(d, c) for d, c in upper_pdus(name, "ibpath.ucma")
            if struct.unpack_from("<I", d)[0] == UCMA_CMD_SET_OPTION]
    if RUNS[name].blob is None:
        assert "blob" not in rep and not blobs and not cmds
        assert rep["route"] == "rdma_resolve_route"
        return
    assert len(blobs) == 1 and len(cmds) == 1
    data, comment = blobs[0]
    assert data == bytes.fromhex(rep["blob"]) == RUNS[name].blob
    want = "0" if rep["set_option"] == 0 else "-" + errno.errorcode[-rep["set_option"]]
    assert comment.splitlines()[0] == f"rdma_set_option={want}"
    # the write(2) itself: rc -1 with the errno, or the command's length
    rc_line = next(line for line in cmds[0][1].splitlines() if line.startswith("rc="))
    if rep["set_option"]:
        assert rc_line.startswith("rc=-1") and errno.errorcode[-rep["set_option"]] in rc_line
    else:
        assert rc_line.startswith(f"rc={len(cmds[0][0])}")
    assert rep["route"] == ("rdma_set_option" if rep["set_option"] == 0 else
                            "rdma_resolve_route")


KERNEL_ROUTE = {"sl": 0, "tclass": 0, "hop_limit": 64, "mtu": 3, "rate": 0, "packet_life_time": 18}
KEPT = ("sgid", "dgid", "flow_label", "tclass", "hop_limit", "sl", "rate", "mtu", "pkey",
        "packet_life_time")


@pytest.mark.parametrize("name", sorted(RUNS))
def test_readback_is_the_kernel_choice(name):
    """The kernel's QUERY PATH readback holds one path: the blob's first record whose flags
    are exactly 0x2B (every field the kernel keeps) when SET_OPTION was 0, else the
    kernel's own route; reported as GMP|PRIMARY|BIDIRECTIONAL either way."""
    rb = readbacks(name)
    assert rb, name
    (flags, got), = rb[-1]
    assert flags == FLAGS_GMP_PRIMARY_BIDIRECTIONAL
    assert (got["sgid"], got["dgid"]) == (ipaddress.IPv6Address("::ffff:10.0.0.1"),
                                          ipaddress.IPv6Address("::ffff:10.0.0.2")) or \
        name == "rec-blob-foreign-dgid"
    rep = report(name) if RUNS[name].client == "cmtest" else {}
    if rep.get("set_option") == 0:
        blob = RUNS[name].blob
        first = next(i for i in range(len(blob) // 72)
                     if struct.unpack_from("<I", blob, 72 * i)[0] ==
                     FLAGS_GMP_PRIMARY_BIDIRECTIONAL)
        want = path_record(blob[72 * first + 8:72 * first + 72])
        assert {k: got[k] for k in KEPT} == {k: want[k] for k in KEPT}, name
    else:
        assert {k: got[k] for k in KERNEL_ROUTE} == KERNEL_ROUTE, name


def cm_ack_timeout(ca_ack_delay: int, packet_life_time: int) -> int:
    """cm.c cm_ack_timeout (6.1), restated here."""
    t = packet_life_time + 1
    if t >= ca_ack_delay:
        t += ca_ack_delay >= t - 1
    else:
        t = ca_ack_delay + (t >= ca_ack_delay - 1)
    return min(31, t)


REQ_RUNS = sorted(n for n in RUNS if n != "rec-blob-foreign-dgid")


def check_readback_is_the_req(name: str, directory: Path = REC) -> None:
    (_flags, rb), = readbacks(name, directory)[-1]
    reqs = cm_reqs(name, directory)
    assert reqs, name
    req, ip = reqs[0]
    for k in ("sgid", "dgid", "flow_label", "tclass", "hop_limit", "sl", "rate", "mtu", "pkey"):
        assert req[k] == rb[k], (name, k, req[k], rb[k])
    lid = 0xFFFF if rb["hop_limit"] > 1 else 0
    assert (req["slid"], req["dlid"]) == (lid, lid)
    assert req["subnet_local"] == int(rb["hop_limit"] <= 1)
    assert req["local_ack_timeout"] == cm_ack_timeout(15, rb["packet_life_time"])
    assert ip["tos"] == rb["tclass"] and ip["ttl"] == rb["hop_limit"]
    assert ip["src"] == rb["sgid"].ipv4_mapped and ip["dst"] == rb["dgid"].ipv4_mapped
    # every retry of the REQ carries the same path
    assert all(r == req for r, _ in reqs), name


@pytest.mark.parametrize("name", REQ_RUNS)
def test_readback_is_the_cm_req_on_the_wire(name):
    """The kernel's QUERY PATH readback against the CM REQ tcpdump saw, field by field:
    what the REQ copies from the path (GIDs, flow label, traffic class, hop limit, SL, rate,
    MTU, P_Key), what it derives from it (the LIDs: 0xFFFF when hop limit > 1, else the
    RoCE path's 0; SubnetLocal; the Local ACK Timeout from the PacketLifeTime and rxe's ACK
    delay 15), and the IP header the REQ travelled in (TOS = traffic class, TTL = hop
    limit, the GIDs' IPv4 addresses)."""
    check_readback_is_the_req(name)


def check_kernel_flow_label(name: str, directory: Path = REC) -> None:
    (_f, rb), = readbacks(name, directory)[-1]
    req, _ip = cm_reqs(name, directory)[0]
    assert req["service_id"] >> 16 == 0x0106
    assert rb["flow_label"] == (req["cma_sport"] * 31 + (req["service_id"] & 0xFFFF)) & 0xFFFFF


@pytest.mark.parametrize("name", sorted(n for n in REQ_RUNS if LAB["scenarios"][n].get(
    "set_option") != 0))
def test_kernel_route_flow_label_is_the_port_hash(name):
    """The kernel's own route on RoCE has a flow label of its own (not 0): cma.c
    cma_get_roce_udp_flow_label, sport * 31 + dport (masked to 20 bits), with the source port
    from the REQ's CMA header and the destination port from its service ID (RDMA_PS_TCP)."""
    check_kernel_flow_label(name)


@pytest.mark.parametrize("name", REQ_RUNS)
def test_readback_lids_are_the_roce_l2_fields(name):
    """The readback's DLID and SLID are not LIDs: ucma_query_path packs the RoCE
    sa_path_rec with ib_sa_pack_path, whose DLID/SLID bytes overlay struct sa_path_rec_roce
    (route_resolved, dmac[]): DLID = 0x01 (route resolved) and the destination MAC's first
    byte, SLID its next two, the MAC the REQ was sent to."""
    (_f, rb), = readbacks(name)[-1]
    _req, ip = cm_reqs(name)[0]
    mac = ip["dmac"]
    assert rb["dlid"] == 0x0100 | mac[0] and rb["slid"] == mac[1] << 8 | mac[2], name


def test_foreign_dgid_sends_nothing_to_the_link():
    """The foreign DGID is kept (readback), and the REQ goes to 10.0.0.9, which no host on
    the veth pair owns: no CM REQ on the capture, the ARP entry FAILED."""
    (_f, rb), = readbacks("rec-blob-foreign-dgid")[-1]
    assert rb["dgid"] == ipaddress.IPv6Address("::ffff:10.0.0.9")
    assert not cm_reqs("rec-blob-foreign-dgid")
    assert "10.0.0.9" in LAB["scenarios"]["rec-blob-foreign-dgid"]["neighbours"]


RXE = ROOT / "captures" / "rxe"
PLAIN_MANIFEST = {r["file"]: r for r in json.loads((RXE / "manifest.json").read_text())[
    "scenarios"]}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_same_as_the_unrecorded_boot(name):
    """Against captures/rxe (another boot, the same programs without `ibpath record`, the
    blob reported by the test program alone): the same verdict, the same audit findings,
    and a CM REQ with the same primary path (the kernel route's flow label aside: it hashes
    the source port, which differs run to run)."""
    plain = name.removeprefix("rec-")
    old = json.loads((RXE / "lab.json").read_text())["scenarios"][plain]
    assert LAB["scenarios"][name].get("set_option") == old.get("set_option")
    assert MATRIX[name]["findings"] == PLAIN_MANIFEST[f"{plain}.pcapng"]["rules"]
    new, old_req = cm_reqs(name), cm_reqs(plain, RXE)
    assert bool(new) == bool(old_req) == RUNS[name].connects
    if new:
        a, b = dict(new[0][0]), dict(old_req[0][0])
        for k in ("service_id", "cma_sport") + (("flow_label",) if old.get("set_option") != 0
                                                 else ()):
            a.pop(k), b.pop(k)
        assert a == b, name


def test_scapy_layers_agree_with_the_offsets():
    """The matrix (the Scapy layers: ucma, pathdata, cm) says the same as the offsets above:
    "= readback" exactly where the struct comparison holds."""
    for name in REQ_RUNS:
        assert MATRIX[name]["req"].startswith("= readback"), MATRIX[name]
    assert MATRIX["rec-blob-foreign-dgid"]["req"] == "no CM REQ on the wire"


def test_matrix_is_what_the_captures_show():
    """matrix.json, recomputed from the captures (and the audit of each)."""
    assert {r["scenario"]: r for r in recordmatrix.rows(REC)} == MATRIX


def test_readme_and_manifest_match_the_matrix(capsys):
    """README.md carries the matrix; manifest.json names every capture with its audit
    findings, and `ibpath craft --verify` agrees."""
    from ibpath_scapy.craft.corpus import verify_corpus
    assert recordmatrix.markdown(list(MATRIX.values())) in (REC / "README.md").read_text()
    rows = json.loads((REC / "manifest.json").read_text())["scenarios"]
    assert {r["file"] for r in rows} == {p.name for p in REC.glob("*.pcapng")}
    assert {r["file"]: r["rules"] for r in rows if r["file"] in
            {m["file"] for m in MATRIX.values()}} == \
        {r["file"]: r["findings"] for r in MATRIX.values()}
    assert verify_corpus(REC, report=False)
    assert f"{len(rows)} files, {len(rows)} as expected, 0 not" in capsys.readouterr().out


# -- NETLINK_RDMA: the shim and strace on one `rdma dev` -------------------------------------

def netlink_messages(path: Path) -> list[bytes]:
    """Every NETLINK_RDMA record's bytes (the 16-byte cooked header nlmon writes, then the
    netlink messages)."""
    return [f.data for f in read_frames(str(path)) if f.linktype == 253]


def test_netlink_shim_and_strace_recorded_the_same_messages():
    """One `rdma dev` process seen by both recorders (strace around `ibpath record`): the
    same records, byte for byte (direction, protocol, sequence numbers, port ids, payload),
    in the same order, and they carry what `rdma dev` printed."""
    shim = netlink_messages(REC / f"{NETLINK}-shim.pcapng")
    strace = netlink_messages(REC / f"{NETLINK}-strace.pcapng")
    assert len(shim) >= 2 and shim == strace
    # the cooked header: pkttype (to the kernel 7 / to user 6), ARPHRD_NETLINK, protocol 20
    assert {struct.unpack_from(">H", m, 0)[0] for m in shim} == {6, 7}
    assert all(struct.unpack_from(">H", m, 14)[0] == 20 for m in shim)
    text = (REC / f"{NETLINK}.txt").read_text()
    blob = b"".join(shim)
    for dev in ("rxe0", "rxe1"):
        assert dev in text and dev.encode() + b"\0" in blob


def test_netlink_matches_the_setup_recording():
    """The strace recorder's `rdma dev` of the lab's setup (captures/rxe) asked the kernel
    the same question: the requests are the same bar sequence number and port id."""
    def requests(msgs):
        # nlmsghdr after the 16-byte cooked header: len, type, flags, seq, pid
        return [m[16:16 + 8] + m[16 + 16:] for m in msgs if struct.unpack_from(">H", m)[0] == 7]
    ours = requests(netlink_messages(REC / f"{NETLINK}-shim.pcapng"))
    setup = requests(netlink_messages(ROOT / "captures" / "rxe" / "netlink-rdma-dev.pcapng"))
    assert ours and ours == setup


IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main"]


@pytest.mark.skipif(os.environ.get("IBPATH_LAB") != "1" or shutil.which("qemu-system-x86_64")
                    is None or shutil.which("mmdebstrap") is None,
                    reason="boots a QEMU guest (a full core, a 560 MB cache): set IBPATH_LAB=1 "
                    "with qemu-system-x86 and mmdebstrap installed")
def test_lab_record_run(tmp_path):
    """The real lab: two recorded runs and the netlink pair end to end: their rows as in the
    committed matrix (the kernel route's flow label aside: it hashes a source port chosen
    at random, checked instead against that hash), the readback equal to the REQ, the
    netlink recorders agreeing."""
    names = ["rec-blob-two-2b", "rec-blob-no-2b", NETLINK]
    p = subprocess.run(IBPATH + ["lab", "run", *names, "-o", str(tmp_path)],
                       capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    got = {r["scenario"]: r for r in recordmatrix.rows(tmp_path)}

    def port_free(row: dict) -> dict:
        if row["readback"].startswith("kernel route"):
            row = dict(row, readback=re.sub(r"FL 0x[0-9A-F]+, ", "", row["readback"]))
        return row
    for n in names[:2]:
        assert port_free(got[n]) == port_free(MATRIX[n]), n
        check_readback_is_the_req(n, tmp_path)
    check_kernel_flow_label("rec-blob-no-2b", tmp_path)
    assert netlink_messages(tmp_path / f"{NETLINK}-shim.pcapng") == \
        netlink_messages(tmp_path / f"{NETLINK}-strace.pcapng") != []
