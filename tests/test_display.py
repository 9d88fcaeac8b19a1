"""One display convention across Scapy, `ibpath decode` text, the Wireshark plugin and the HTML
report (issue 18 point 4), on one capture compared field by field.

The capture is `ibpath craft conform-ucma` (native IB in ERF records, no finding: OpenSM's
answer, the blob, the CM REQ). Each rendering is read back from what the user sees: Scapy's
show(), the decode text, `tshark -V` with the plugin (checked clean), the HTML records table.
The expected text is built here from decode's JSON integers (which must stay integers) and
the IBA tables of wire-formats.md §3, transcribed below:
LIDs decimal (the plugin adds `(0x003a)`), MTU/rate/time codes as `meaning (code)`, times with
4 significant digits, GIDs as inet_ntop() text, P_Key in hex.
"""

from __future__ import annotations

import html as html_lib
import ipaddress
import json
import re
import socket
import subprocess
import sys

import pytest
from scapy.utils import rdpcap

from ibpath_scapy.layers import CMReq, LRH, SAHeader

from conftest import ROOT
from tshark_util import run_tshark

LUA = str(ROOT / "dissector" / "ibpath.lua")
CLI = [sys.executable, "-m", "ibpath_scapy.cli.main"]

# wire-formats.md §3 Encodings (OSM IB_MTU_LEN_*, IB_PATH_RECORD_RATE_*; PLT = 4.096 µs × 2^n)
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
RATE_GBPS = {0: "port current", 2: "2.5 Gb/s", 3: "10 Gb/s", 7: "40 Gb/s", 16: "100 Gb/s"}


def seconds_text(code: int) -> str:
    t = 4.096e-6 * 2 ** code
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if t >= scale:
            return f"{t / scale:.4g} {unit}"
    return f"{t * 1e9:.4g} ns"


PR_FIELDS = ("sgid", "dgid", "slid", "dlid", "pkey", "mtu", "rate", "packet_life_time")
CM_FIELDS = ("primary_local_gid", "primary_remote_gid", "primary_local_lid",
             "primary_remote_lid", "path_packet_payload_mtu", "primary_packet_rate",
             "primary_local_ack_timeout")


def expected(name: str, v) -> str:
    """The convention, from the JSON value."""
    if name.endswith("gid"):
        return socket.inet_ntop(socket.AF_INET6, ipaddress.IPv6Address(v).packed)
    assert isinstance(v, int) and not isinstance(v, bool), (name, v)  # JSON keeps integers
    if name.endswith("lid"):
        return str(v)
    if name.endswith("mtu"):
        return f"{MTU_BYTES[v]} ({v})"
    if name.endswith("rate"):
        return f"{RATE_GBPS[v]} ({v})"
    if name.endswith(("life_time", "ack_timeout")):
        return f"{seconds_text(v)} ({v})"
    if name == "pkey":
        return f"0x{v:04x}"
    raise KeyError(name)


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    d = tmp_path_factory.mktemp("display")
    path = d / "conform-ucma.pcapng"
    subprocess.run(CLI + ["craft", "conform-ucma", "-o", str(path)], check=True,
                   capture_output=True, timeout=120)
    recs = {}
    out = subprocess.run(CLI + ["decode", "--format", "json", str(path)], capture_output=True,
                         text=True, timeout=120).stdout
    for line in out.splitlines():
        r = json.loads(line)
        recs[r["frame"]] = r
    sa = next(f for f, r in recs.items() if r.get("path_records") and r["mad"]["method"] == 0x81)
    cm = next(f for f, r in recs.items() if "cm_req" in r)
    return path, recs, sa, cm


# -- the four readings -------------------------------------------------------------------------

def scapy_text(pkt) -> dict[str, str]:
    """name → value text of a layer's show() lines (the layer only, not its payload)."""
    out = {}
    for line in pkt.show(dump=True).splitlines()[1:]:
        if "###[" in line:
            break
        m = re.match(r"^\s*(\w+)\s*=\s*(.*?)\s*$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def decode_text(path, sa: int, cm: int) -> tuple[dict, dict, dict]:
    text = subprocess.run(CLI + ["decode", str(path)], capture_output=True, text=True,
                          timeout=120).stdout
    lines = text.splitlines()
    head = next(x for x in lines if re.match(rf"frame\s+{sa}\s", x))
    rec = lines[lines.index(head) + 1]
    m = re.search(r"PathRecord\[0\] (\S+) → (\S+)  slid (\d+) dlid (\d+)  pkey (0x\w+) .*"
                  r"mtu =(.+?) rate =(.+?) plt =(.+?)  flow", rec)
    pr = dict(zip(PR_FIELDS, m.groups()))
    lrh = re.search(r"LID (\d+) → LID (\d+)", head)
    req_at = next(i for i, x in enumerate(lines) if re.match(rf"frame\s+{cm}\s", x))
    mtu = re.search(r" mtu (.+)$", lines[req_at + 1]).group(1)
    m = re.search(r"primary\s+(\S+) \(lid (\d+)\) → (\S+) \(lid (\d+)\) .* rate (.+?) tclass .*"
                  r"ack_timeout (.+)$", lines[req_at + 2])
    gl, ll, gr, lr, rate, ack = m.groups()
    req = {"primary_local_gid": gl, "primary_remote_gid": gr, "primary_local_lid": ll,
           "primary_remote_lid": lr, "path_packet_payload_mtu": mtu,
           "primary_packet_rate": rate, "primary_local_ack_timeout": ack}
    return pr, req, {"slid": lrh.group(1), "dlid": lrh.group(2)}


PLUGIN_LABELS = {"sgid": "SGID", "dgid": "DGID", "slid": "SLID", "dlid": "DLID",
                 "pkey": "P_Key", "mtu": "MTU", "rate": "Rate",
                 "packet_life_time": "Packet Life Time",
                 "primary_local_gid": "Primary Local GID", "primary_remote_gid": "Primary Remote GID",
                 "primary_local_lid": "Primary Local LID", "primary_remote_lid": "Primary Remote LID",
                 "path_packet_payload_mtu": "Path Packet Payload MTU",
                 "primary_packet_rate": "Primary Packet Rate",
                 "primary_local_ack_timeout": "Primary Local ACK Timeout"}


def plugin_text(path, frame: int, tree: str, fields) -> dict[str, str]:
    """Values the plugin shows in its subtree `tree` ('ibpath PathRecord') of a frame."""
    run = run_tshark(path, ["-X", f"lua_script:{LUA}", "-V", "-Y", f"frame.number=={frame}"]).check()
    lines = run.stdout.splitlines()
    start = next(i for i, x in enumerate(lines) if x.strip() == tree)
    depth = len(lines[start]) - len(lines[start].lstrip())
    body = []
    for line in lines[start + 1:]:
        if len(line) - len(line.lstrip()) <= depth:
            break
        body.append(line)
    out = {}
    for name in fields:
        label = re.escape(PLUGIN_LABELS.get(name, name))
        m = next(re.search(rf"(?:= )?{label}: (.*)$", x) for x in body
                 if re.search(rf"(?:^\s+|= ){label}: ", x))
        out[name] = m.group(1)
    return out


def _text(cell: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", "", cell))


def html_text(path, tmp_path) -> dict[str, dict[str, str]]:
    """The HTML report's records table: {column title: {field: shown text}}."""
    html = tmp_path / "report.html"
    subprocess.run(CLI + ["audit", "--quiet", "--format", "html", "-o", str(html), str(path)],
                   capture_output=True, timeout=120)
    table = re.search(r"<table class=records>(.*?)</table>", html.read_text(), re.S).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    cols = [_text(c) for c in re.findall(r"<th[^>]*>(.*?)</th>", rows[0], re.S)][1:]
    out: dict[str, dict[str, str]] = {c: {} for c in cols}
    for row in rows[1:]:
        field = _text(re.search(r"<th>(.*?)</th>", row, re.S).group(1))
        for col, cell in zip(cols, re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)):
            out[col][field] = _text(cell)
    return out


# -- the comparison ------------------------------------------------------------------------------

def test_path_record_reads_the_same_everywhere(capture, tmp_path):
    path, recs, sa, cm = capture
    rec = recs[sa]["path_records"][0]
    pkts = rdpcap(str(path))
    scapy = scapy_text(pkts[sa - 1][SAHeader].records[0])
    decode, _, _ = decode_text(path, sa, cm)
    plugin = plugin_text(path, sa, "ibpath PathRecord", PR_FIELDS)
    html = html_text(path, tmp_path)[f"SA answer f{sa} rec 0"]
    for name in PR_FIELDS:
        want = expected(name, rec[name])
        got = {"scapy": scapy[name], "decode": decode[name], "html": html[name],
               "plugin": plugin[name]}
        if name.endswith("lid"):  # Wireshark users get the hex too
            assert got["plugin"] == f"{want} (0x{rec[name]:04x})", got
            got["plugin"] = want
        assert set(got.values()) == {want}, (name, want, got)


def test_cm_req_reads_the_same_everywhere(capture, tmp_path):
    path, recs, sa, cm = capture
    req = recs[cm]["cm_req"]
    scapy = scapy_text(rdpcap(str(path))[cm - 1][CMReq])
    _, decode, _ = decode_text(path, sa, cm)
    plugin = plugin_text(path, cm, "ibpath CM REQ", CM_FIELDS)
    html = html_text(path, tmp_path)[f"CM REQ f{cm} primary"]
    html_names = {"primary_local_gid": "sgid", "primary_remote_gid": "dgid",
                  "primary_local_lid": "slid", "primary_remote_lid": "dlid",
                  "path_packet_payload_mtu": "mtu", "primary_packet_rate": "rate",
                  "primary_local_ack_timeout": "local_ack_timeout"}
    for name in CM_FIELDS:
        want = expected(name, req[name])
        got = {"scapy": scapy[name], "decode": decode[name], "html": html[html_names[name]],
               "plugin": plugin[name]}
        if name.endswith("lid"):
            assert got["plugin"] == f"{want} (0x{req[name]:04x})", got
            got["plugin"] = want
        assert set(got.values()) == {want}, (name, want, got)


def test_lrh_lids_read_the_same_everywhere(capture):
    path, recs, sa, cm = capture
    lrh = rdpcap(str(path))[sa - 1][LRH]
    scapy = scapy_text(lrh)
    _, _, decode = decode_text(path, sa, cm)
    plugin = plugin_text(path, sa, "ibpath LRH", ("slid", "dlid"))
    for name in ("slid", "dlid"):
        v = getattr(lrh, name)
        assert scapy[name] == decode[name] == str(v)
        assert plugin[name] == f"{v} (0x{v:04x})"
    assert recs[sa]["src"] == f"LID {lrh.slid}"  # JSON: the same number


def test_ipv4_mapped_gids_read_as_wireshark_and_scapy_print_them():
    """A RoCE GID is IPv4-mapped: decode writes it as inet_ntop() does (::ffff:192.168.2.25),
    as Scapy and Wireshark do, whatever Python's ipaddress prints on this version."""
    from ibpath_scapy.layers.sa import GIDField, gid_text

    packed = ipaddress.IPv6Address("::ffff:192.168.2.25").packed
    assert gid_text(packed) == "::ffff:192.168.2.25"
    fld = GIDField("g", "::")
    assert fld.i2repr(None, fld.m2i(None, packed)) == "::ffff:192.168.2.25"
    assert gid_text(ipaddress.IPv6Address("fe80::2:c903:0:1").packed) == "fe80::2:c903:0:1"


def test_rate_0_is_port_current_in_a_cm_req_only(tmp_path):
    """Rate 0 is the kernel's IB_RATE_PORT_CURRENT (wire-formats.md §3: enum ib_rate), which
    the CM REQ carries; in a PathRecord it is reserved (OpenSM's rates start at 2 and it
    answers a query for 0 REQ_INVALID: tests/test_opensm_oracle.py), shown as any code a
    PathRecord does not define. Scapy, decode, the plugin and the HTML report read one table
    each; on main all four showed the PathRecord's 0 as "port current"."""
    from ibpath_scapy.craft import CaptureBuilder
    from ibpath_scapy.layers import PathRecord
    from ibpath_scapy.layers.coded import RawCode

    path = tmp_path / "rate0.pcapng"
    rec = PathRecord(sgid="fe80::1", dgid="fe80::2", slid=1, dlid=2, rate=RawCode(0))
    with CaptureBuilder(str(path), encap="ib") as b:
        q = b.sa_query(PathRecord(sgid="fe80::1", dgid="fe80::2"))
        b.sa_answer(q, [rec])
        b.cm_req(rec)
    sa, cm = 2, 3
    pkts = rdpcap(str(path))
    decode_pr, decode_req, _ = decode_text(path, sa, cm)
    html = html_text(path, tmp_path)
    readings = {
        "PathRecord": ("Unknown (0)", [
            scapy_text(pkts[sa - 1][SAHeader].records[0])["rate"], decode_pr["rate"],
            plugin_text(path, sa, "ibpath PathRecord", ["rate"])["rate"],
            html[f"SA answer f{sa} rec 0"]["rate"]]),
        "CM REQ": (f"{RATE_GBPS[0]} (0)", [
            scapy_text(pkts[cm - 1][CMReq])["primary_packet_rate"],
            decode_req["primary_packet_rate"],
            plugin_text(path, cm, "ibpath CM REQ", ["primary_packet_rate"])["primary_packet_rate"],
            html[f"CM REQ f{cm} primary"]["rate"]])}
    for what, (want, got) in readings.items():
        assert set(got) == {want}, (what, got)
