"""The kernel lab (issue 6) on its committed captures, captures/rxe/ (no QEMU needed).

The captures were made by `ibpath lab run all -o captures/rxe` on a stock Debian 6.1 kernel
with rdma_rxe (see captures/rxe/README.md). What the kernel did is read from them with
oracles independent of the project's layers: the rdma_set_option return value from the blob
frame's pcapng comment, and the CM REQ's primary path from tshark's built-in InfiniBand CM
dissector. The ucma profile (kernelview.py) must predict that verdict; `ibpath audit` must
report exactly the rules that apply; the NETLINK_RDMA recordings of `rdma link` / `rdma dev`
must decode (struct-level netlink parsing checked against the commands' own output).

A test that really boots the lab runs only with IBPATH_LAB=1 (see test_lab_boots).
"""

from __future__ import annotations

import json
import re
import os
import shutil
import struct
import subprocess
import sys

import pytest

from conftest import CAPTURES
from test_netlink import tshark_fields

from ibpath_scapy.cli.main import main as ibpath_main
from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.facts.kernelview import blob_from_bytes, select_ucma
from ibpath_scapy.lab.cpio import CpioWriter
from ibpath_scapy.lab.guest import modinfo_depends
from ibpath_scapy.lab.scenarios import BY_NAME, SCENARIOS
from ibpath_scapy.layers.pathdata import RECORD_SIZE, parse_set_option_comment
from ibpath_scapy.capture.pcapio import read_frames

RXE = CAPTURES / "rxe"
LAB = json.loads((RXE / "lab.json").read_text()) if (RXE / "lab.json").exists() else None
IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main"]
BLOB_SCENARIOS = [s.name for s in SCENARIOS if s.kind == "blob"]
ROUTE_SCENARIOS = [s.name for s in SCENARIOS if s.kind != "blob"]
REQ = "infiniband.cm.req."
REQ_FIELDS = ["prim_sl", "prim_tfcclass", "prim_flowlabel", "prim_hoplim", "prim_pktrate",
              "pppmtu", "pkey", "prim_localgid_ipv4", "prim_remotegid_ipv4",
              "prim_locallid", "prim_remotelid", "alt_locallid", "alt_remotelid"]

pytestmark = pytest.mark.skipif(LAB is None, reason=f"no lab captures in {RXE}")


# -- oracles -------------------------------------------------------------------------------------

def blob_frame(name: str) -> tuple[bytes, str | None]:
    """The optval bytes and rdma_set_option result of the scenario's blob frame. The exported
    PDU is parsed here by hand (tag 12 = dissector name, tag 0 ends the tags)."""
    found = [f for f in read_frames(str(RXE / f"{name}.pcapng")) if f.linktype == 252]
    assert len(found) == 1, f"{name}: {len(found)} blob frames"
    data, off = found[0].data, 0
    while True:
        tag, length = struct.unpack_from("!HH", data, off)
        value = data[off + 4: off + 4 + length]
        off += 4 + length + (-length % 4)
        if tag == 12:
            assert value.rstrip(b"\0") == b"ibpath.blob"
        if tag == 0:
            break
    return data[off:], parse_set_option_comment(found[0].comment)


def record_paths(blob: bytes) -> list[dict]:
    """Flags and the fields the REQ shows of each whole record (struct unpacking of the SA
    wire format, IBA 15.2.5.16; the 64-byte PathRecord starts at offset 8 of each 72-byte
    record, after the host-order flags and the reserved word)."""
    out = []
    for k in range(len(blob) // RECORD_SIZE):
        rec = blob[k * RECORD_SIZE:(k + 1) * RECORD_SIZE]
        flags = struct.unpack_from("<I", rec, 0)[0]
        pr = rec[8:]
        word = struct.unpack_from("!I", pr, 44)[0]  # RawTraffic, reserved, FlowLabel, HopLimit
        flow_label, hop_limit = (word >> 8) & 0xFFFFF, word & 0xFF
        sl = struct.unpack_from("!H", pr, 52)[0] & 0xF  # QoSClass:12, SL:4
        out.append({"flags": flags, "sl": sl, "tclass": pr[48], "flow_label": flow_label,
                    "hop_limit": hop_limit, "mtu": pr[54] & 0x3F, "rate": pr[55] & 0x3F,
                    "dgid": pr[8:24], "sgid": pr[24:40]})
    return out


CM_REQ_AT = 14 + 20 + 8 + 12 + 8 + 24  # Ethernet, IPv4, UDP, BTH, DETH, MAD header


def req_paths(name: str) -> list[dict]:
    """Every CM REQ's primary path in the scenario's capture, as tshark's built-in
    InfiniBand CM dissector reads it; flow label and packet rate by struct from REQ bytes
    88-91 (flow label the top 20 bits, rate the low 6; IBA 12.6.5), because Wireshark 4.0
    prints wrong values for both (flow label 0x11111 as 0x111, rate 7 as 0x11)."""
    path = RXE / f"{name}.pcapng"
    rows = tshark_fields(path, [REQ + f for f in REQ_FIELDS])
    frames = {f.number: f.data for f in read_frames(str(path))}
    reqs = []
    for num, row in sorted(rows.items()):
        if not row[REQ + "prim_sl"]:
            continue
        req = {f: row[REQ + f][0] for f in REQ_FIELDS}
        word = struct.unpack_from("!I", frames[num], CM_REQ_AT + 88)[0]
        req["prim_flowlabel"], req["prim_pktrate"] = str(word >> 12), str(word & 0x3F)
        reqs.append(req)
    return reqs


def req_record(req: dict, records: list[dict]) -> int | None:
    """Index of the blob record whose SL, traffic class, flow label and hop limit the REQ
    carries (every record of the matrix differs in all four), else None."""
    hits = [k for k, r in enumerate(records)
            if (int(req["prim_sl"], 0), int(req["prim_tfcclass"], 0),
                int(req["prim_flowlabel"], 0), int(req["prim_hoplim"], 0))
            == (r["sl"], r["tclass"], r["flow_label"], r["hop_limit"])]
    assert len(hits) <= 1
    return hits[0] if hits else None


def audit(path, tmp_path) -> dict:
    """`ibpath audit FILE --format json`, in-process (the CLI's own entry point)."""
    out = tmp_path / "audit.json"
    status = ibpath_main(["audit", str(path), "--format", "json", "-o", str(out)])
    assert status in (0, 1)
    return json.loads(out.read_text())


def rule_ids(report: dict, severities=("error", "warning")) -> set[str]:
    return {f["rule"] for f in report["findings"] if f["severity"] in severities}


# -- the matrix: ucma prediction == the kernel's verdict -------------------------------------

def test_captures_cover_the_matrix():
    assert set(LAB["scenarios"]) == set(BY_NAME)
    for name in BY_NAME:
        assert (RXE / f"{name}.pcapng").stat().st_size < 16_384, name
    assert LAB["kernel_release"].startswith("6.1.")


@pytest.mark.parametrize("name", BLOB_SCENARIOS)
def test_ucma_profile_predicts_the_kernel(name):
    """rdma_set_option's return value and the record the CM REQ's primary path came from (or
    none: the kernel's own route after a rejection) are what select_ucma says."""
    blob, result = blob_frame(name)
    assert blob.hex() == BY_NAME[name].blob.hex() == LAB["scenarios"][name]["blob"]
    choice = select_ucma(blob_from_bytes(blob))
    assert result == ("0" if choice.accepted else "-" + choice.outcome), (name, result, choice)
    records = record_paths(blob)
    reqs = req_paths(name)
    if name == "blob-foreign-dgid":
        return  # no REQ reaches the wire: test_foreign_dgid_is_kept
    assert len(reqs) == 1, f"{name}: {len(reqs)} CM REQs"
    taken = req_record(reqs[0], records)
    assert taken == choice.gmp, (name, reqs[0], choice)
    if not choice.accepted:
        # rejected: rdma_resolve_route's own path, SL 0, traffic class 0, hop limit 64
        assert [int(reqs[0][f], 0) for f in ("prim_sl", "prim_tfcclass", "prim_hoplim")] == \
            [0, 0, 64]


TAKEN = [n for n in BLOB_SCENARIOS if LAB and LAB["scenarios"][n].get("set_option") == 0
         and n != "blob-foreign-dgid"]


@pytest.mark.parametrize("name", TAKEN)
def test_roce_req_keeps_the_blob_path(name):
    """On RoCE the REQ's primary path is the taken record's: SL, traffic class, flow label, hop
    limit, rate, MTU, P_Key and GIDs; the LIDs are the permissive LID (hop limit > 1)."""
    blob, result = blob_frame(name)
    assert result == "0"
    records = record_paths(blob)
    (req,) = req_paths(name)
    rec = records[req_record(req, records)]
    assert int(req["prim_pktrate"], 0) == rec["rate"]
    assert int(req["pppmtu"], 0) == rec["mtu"]
    assert int(req["pkey"], 0) == 0xFFFF
    assert req["prim_localgid_ipv4"] == "10.0.0.1" and rec["sgid"][-4:] == bytes([10, 0, 0, 1])
    assert req["prim_remotegid_ipv4"] == "10.0.0.2" and rec["dgid"][-4:] == bytes([10, 0, 0, 2])
    assert int(req["prim_locallid"], 0) == int(req["prim_remotelid"], 0) == 0xFFFF
    assert int(req["alt_locallid"], 0) == int(req["alt_remotelid"], 0) == 0  # no APM


def _roce_frames(name: str) -> list[dict]:
    """IPv4/UDP/BTH facts of every RoCEv2 frame (struct oracle)."""
    out = []
    for f in read_frames(str(RXE / f"{name}.pcapng")):
        if f.linktype != 1:
            continue
        d = f.data
        out.append({"src": ".".join(map(str, d[26:30])), "tos": d[15], "ttl": d[22],
                    "sport": struct.unpack_from("!H", d, 34)[0], "opcode": d[42],
                    "dest_qp": int.from_bytes(d[47:50], "big")})
    return out


def test_data_path_uses_blob_tclass_and_flow_label_not_its_hop_limit():
    """The connection's traffic: IP TOS = the blob's traffic class in both directions, the
    data packets' UDP source port = rdma_flow_label_to_udp_sport(flow label), but the data
    QP's TTL is the route's 64 (ib_resolve_unicast_gid_dmac re-resolves the hop limit when
    the QP's address vector is set) while the CM MADs keep the blob's hop limit."""
    blob, _ = blob_frame("blob-single-2b")
    rec = record_paths(blob)[0]
    frames = _roce_frames("blob-single-2b")
    fl = rec["flow_label"]
    sport = ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) | 0xC000
    assert {f["tos"] for f in frames} == {rec["tclass"]}
    data = [f for f in frames if f["dest_qp"] != 1]
    mads = [f for f in frames if f["dest_qp"] == 1 and f["src"] == "10.0.0.1"]
    assert data and mads
    assert {f["sport"] for f in data} == {sport}
    assert {f["ttl"] for f in data} == {64}
    assert {f["ttl"] for f in mads} == {rec["hop_limit"]}
    own = _roce_frames("resolve")  # the kernel's own route: TOS 0, TTL 64
    assert {f["tos"] for f in own} == {0} and {f["ttl"] for f in own} == {64}


def test_foreign_dgid_is_kept():
    """A 0x2B record whose DGID is not the resolved destination is accepted and used: the REQ
    goes to 10.0.0.9 (ARP for it fails, nothing reaches udp 4791) and the connection times
    out. The kernel would have reached 10.0.0.2 had it overwritten the DGID."""
    sc = LAB["scenarios"]["blob-foreign-dgid"]
    assert sc["set_option"] == 0 and "ESTABLISHED" in sc["error"]
    assert not _roce_frames("blob-foreign-dgid")
    assert "10.0.0.9" in sc["neighbours"] and "FAILED" in sc["neighbours"]
    assert "10.0.0.9" not in LAB["scenarios"]["blob-unknown-flag-then-2b"]["neighbours"]


# -- the audit on real captures -------------------------------------------------------------

EXPECTED_FINDINGS = {
    "rping": set(), "ucmatose": set(), "resolve": set(),
    "blob-single-2b": set(), "blob-two-2b": set(), "blob-alternate": set(),
    "blob-foreign-dgid": set(),
    # the seed's layout: ucma sends data on the 0x2B record, the proposal on the 0x0A one
    "blob-seed-three": {"BLOB-PROFILE-DIVERGENCE"},
    "blob-no-2b": {"BLOB-KERNEL-REJECT"},
    "blob-ragged": {"BLOB-KERNEL-REJECT", "BLOB-LENGTH"},
    "blob-unknown-flag": {"BLOB-KERNEL-REJECT", "BLOB-UNKNOWN-FLAGS"},
    "blob-unknown-flag-then-2b": {"BLOB-UNKNOWN-FLAGS", "BLOB-PROFILE-DIVERGENCE"},
}


# The conforming runs: the kernel's own route, one 0x2B record, the seed's compatible
# layout, a 0x2B record with an ALTERNATE one.
CONFORMING = {"rping", "ucmatose", "resolve", "blob-single-2b", "blob-seed-three",
              "blob-alternate"}


@pytest.mark.parametrize("name", sorted(EXPECTED_FINDINGS))
def test_audit_findings(name, tmp_path):
    report = audit(RXE / f"{name}.pcapng", tmp_path)
    assert not report.get("unreadable")
    assert rule_ids(report) == EXPECTED_FINDINGS[name]
    assert report["summary"]["cm_reqs"] == (0 if name == "blob-foreign-dgid" else 1)
    errors = rule_ids(report, ("error",))
    if name in CONFORMING:
        assert not errors, f"{name}: conforming run with errors {errors}"
    assert "CM-REQ-PATH-MISMATCH" not in rule_ids(report, ("error", "warning", "info"))


def test_path_mismatch_rule_is_live_on_the_real_capture(tmp_path):
    """The same capture with the blob's SL changed after the fact: now the REQ disagrees with
    the record the kernel took, and CM-REQ-PATH-MISMATCH fires (so its silence above means
    the REQ was judged against the blob and agreed)."""
    src = RXE / "blob-single-2b.pcapng"
    raw = bytearray(src.read_bytes())
    blob, _ = blob_frame("blob-single-2b")
    at = bytes(raw).index(blob)
    sl_byte = at + 8 + 53  # PathRecord byte 53: SL in the low nibble
    assert raw[sl_byte] & 0xF == 1
    raw[sl_byte] = (raw[sl_byte] & 0xF0) | 9
    bad = tmp_path / "sl-changed.pcapng"
    bad.write_bytes(bytes(raw))
    report = audit(bad, tmp_path)
    hits = [f for f in report["findings"] if f["rule"] == "CM-REQ-PATH-MISMATCH"]
    assert len(hits) == 1 and "sl 1 (path sl 9)" in hits[0]["message"], report["findings"]


# -- NETLINK_RDMA recorder on the guest's rdma commands --------------------------------------

RDMA_NLDEV = 5
NLDEV_ATTR_DEV_NAME, NLDEV_ATTR_PORT_INDEX = 2, 3
NLDEV_ATTR_PORT_STATE, NLDEV_ATTR_PORT_PHYS_STATE, NLDEV_ATTR_NDEV_NAME = 12, 13, 51
IB_PORT_ACTIVE, IB_PORT_PHYS_LINK_UP = 4, 5


def nldev_replies(path) -> list[dict]:
    """Attributes of every NLDEV message the kernel sent (struct parsing of the cooked
    header, nlmsghdr and nlattrs, include/uapi/rdma/rdma_netlink.h)."""
    out = []
    for f in read_frames(str(path)):
        assert f.linktype == 253
        pkttype = struct.unpack_from("!H", f.data, 0)[0]
        msg = f.data[16:]
        length, typ = struct.unpack_from("=IH", msg, 0)
        if pkttype != 6 or typ >> 10 != RDMA_NLDEV:
            continue
        attrs, off = {}, 16
        while off + 4 <= length:
            alen, atype = struct.unpack_from("=HH", msg, off)
            attrs[atype & 0x3FFF] = msg[off + 4: off + alen]
            off += (alen + 3) & ~3
        out.append({"op": typ & 0x3FF, "attrs": attrs})
    return out


def _name(value: bytes) -> str:
    return value.rstrip(b"\0").decode()


def test_netlink_rdma_link_recorded_and_decoded():
    path = RXE / "netlink-rdma-link.pcapng"
    decoded = list(decode_file(str(path)))
    # NLDEV requests and replies; the dumps end with NLMSG_DONE (type 3, below 0x10: netlink
    # control messages carry no RDMA client)
    assert decoded and all(r["kind"] == "rdma_netlink" for r in decoded)
    assert all(r["netlink"]["client_name"] == "NLDEV" for r in decoded
               if r["netlink"]["nlmsg_type"] >= 0x10)
    assert {r["direction"] for r in decoded} == {"to_kernel", "to_user"}
    ports = [m for m in nldev_replies(path) if NLDEV_ATTR_NDEV_NAME in m["attrs"]]
    seen = {(_name(m["attrs"][NLDEV_ATTR_DEV_NAME]),
             struct.unpack("=I", m["attrs"][NLDEV_ATTR_PORT_INDEX])[0],
             _name(m["attrs"][NLDEV_ATTR_NDEV_NAME])) for m in ports}
    assert {(m["attrs"][NLDEV_ATTR_PORT_STATE], m["attrs"][NLDEV_ATTR_PORT_PHYS_STATE])
            for m in ports} == {(bytes([IB_PORT_ACTIVE]), bytes([IB_PORT_PHYS_LINK_UP]))}
    text = (RXE / "netlink-rdma-link.txt").read_text()
    assert seen == {("rxe0", 1, "veth0"), ("rxe1", 1, "veth1")}
    for dev, port, ndev in seen:
        assert f"link {dev}/{port} state ACTIVE physical_state LINK_UP netdev {ndev}" in text


def test_netlink_rdma_dev_recorded_and_decoded():
    path = RXE / "netlink-rdma-dev.pcapng"
    assert all(r["kind"] == "rdma_netlink" for r in decode_file(str(path)))
    names = {_name(m["attrs"][NLDEV_ATTR_DEV_NAME]) for m in nldev_replies(path)
             if NLDEV_ATTR_DEV_NAME in m["attrs"]}
    assert names == {"rxe0", "rxe1"}
    text = (RXE / "netlink-rdma-dev.txt").read_text()
    assert "0: rxe0: node_type ca" in text and "1: rxe1: node_type ca" in text


def test_every_capture_names_kernel_and_command():
    for path in sorted(RXE.glob("*.pcapng")):
        head = path.read_bytes()[:2048]
        assert f"guest kernel: {LAB['kernel_version']}".encode() in head, path.name
        assert b"command: ibpath lab run all -o captures/rxe" in head, path.name


# -- the lab's own parts, without QEMU -------------------------------------------------------

def test_cpio_newc_layout():
    """The newc header as the kernel's initramfs unpacker reads it (magic, 13 hex fields,
    name padded to 4 bytes, data padded to 4) and the trailer."""
    import io
    buf = io.BytesIO()
    w = CpioWriter(buf)
    w.file("init", b"#!/bin/sh\n", 0o755)
    w.close()
    raw = buf.getvalue()
    assert raw[:6] == b"070701"
    fields = [int(raw[6 + 8 * k: 14 + 8 * k], 16) for k in range(13)]
    assert fields[1] == 0o100755 and fields[6] == 10 and fields[11] == len(b"init\0")
    name_end = 110 + 5
    data_at = name_end + (-name_end % 4)
    assert raw[110:115] == b"init\0" and raw[data_at:data_at + 10] == b"#!/bin/sh\n"
    assert b"TRAILER!!!\0" in raw and len(raw) % 512 == 0


def test_modinfo_depends(tmp_path):
    ko = tmp_path / "x.ko"
    ko.write_bytes(b"\x7fELF junk\0license=GPL\0depends=ib_core,udp_tunnel\0vermagic=6.1\0")
    assert modinfo_depends(ko) == ["ib_core", "udp_tunnel"]
    ko.write_bytes(b"\0depends=\0")
    assert modinfo_depends(ko) == []


@pytest.mark.skipif(os.environ.get("IBPATH_LAB") != "1" or shutil.which("qemu-system-x86_64")
                    is None or shutil.which("mmdebstrap") is None,
                    reason="boots a QEMU guest (about 2 min, a full core, a 560 MB cache): set "
                    "IBPATH_LAB=1 with qemu-system-x86 and mmdebstrap installed")
def test_lab_boots(tmp_path):
    """The real lab: one blob scenario end to end, and its verdict as in the committed run."""
    p = subprocess.run(IBPATH + ["lab", "run", "blob-two-2b", "-o", str(tmp_path)],
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, p.stderr
    lab = json.loads((tmp_path / "lab.json").read_text())
    assert lab["scenarios"]["blob-two-2b"]["set_option"] == 0
    frames = list(read_frames(str(tmp_path / "blob-two-2b.pcapng")))
    assert [f.linktype for f in frames].count(252) == 1 and len(frames) >= 6


def test_readme_manifest_matches():
    """captures/rxe/README.md's table states each capture's rdma_set_option result and audit
    rule IDs: they must be the recorded results and the expectations tested above."""
    rows = {}
    for line in (RXE / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].endswith(".pcapng"):
            rows[cells[0].removesuffix(".pcapng")] = cells
    assert set(rows) == set(BY_NAME)
    for name, cells in rows.items():
        recorded = LAB["scenarios"][name].get("set_option")
        want = "—" if recorded is None else "0" if recorded == 0 else "-EINVAL"
        assert recorded in (None, 0, -22) and cells[2] == want, name
        ids = set(re.findall(r"\b(?:BLOB|CM|RES|SA|LS)-[A-Z-]+[A-Z]\b", cells[5]))
        assert ids == EXPECTED_FINDINGS[name], name


def test_manifest_states_the_expected_findings(capsys):
    """captures/rxe/manifest.json (what `ibpath craft --verify captures/rxe` and tools/main.sh
    check) names every capture with the findings tested above, and the captures give them."""
    import json

    from ibpath_scapy.craft.corpus import verify_corpus

    rows = json.loads((RXE / "manifest.json").read_text())["scenarios"]
    assert {r["file"] for r in rows} == {p.name for p in RXE.glob("*.pcapng")}
    for r in rows:
        assert set(r["rules"]) == EXPECTED_FINDINGS.get(r["file"].removesuffix(".pcapng"), set())
    assert verify_corpus(RXE, report=False)
    assert f"{len(rows)} files, {len(rows)} as expected, 0 not" in capsys.readouterr().out
