"""Issue 17, points 3 and 4: link types ibpath does not decode (DECODE-UNSUPPORTED) and the
CRC rules (CRC-MISMATCH, CRC-ZERO), on real files: `ibpath decode`'s exit status and records,
the audit's findings, and the same findings from the tshark engine (whose CRC checks are the
plugin's Lua, not crc.py). Which frames are bad is known by construction: one byte of a good
frame flipped (Wireshark 4.0's InfiniBand dissector shows the CRCs without checking them)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ibpath_scapy.engines import tshark as tshark_engine
from ibpath_scapy.audit.engine import audit_records
from ibpath_scapy.audit.model import RULES, AuditOptions
from ibpath_scapy.craft import CaptureBuilder
from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.capture.encap import erf_record, native_ib_frame, rocev2_frame
from ibpath_scapy.layers import MAD, RMPP, PathRecord, SAHeader
from ibpath_scapy.capture.pcapio import PcapNgWriter, PcapWriter

L, R = "fe80::2:c903:0:1", "fe80::2:c903:0:2"
needs_tshark = pytest.mark.skipif(tshark_engine.tshark_path() is None, reason="tshark missing")


def pr(**kw) -> PathRecord:
    d = dict(sgid=L, dgid=R, slid=1, dlid=2, pkey=0xFFFF, reversible=1, mtu=4, rate=3,
             mtu_selector=2, rate_selector=2, packet_life_time_selector=2, packet_life_time=18)
    d.update(kw)
    return PathRecord(**d)


def answer_mad(tid: int) -> bytes:
    return bytes(MAD(method=0x81, transaction_id=tid) / RMPP()
                 / SAHeader(attribute_offset=8, records=[pr()]))


def decode_cli(path) -> tuple[int, list[dict], str]:
    p = subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "decode", "--format",
                        "json", str(path)], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, [json.loads(ln) for ln in p.stdout.splitlines()], p.stderr


def audit_cli(*args) -> tuple[int, dict]:
    p = subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "audit", "--quiet",
                        "--format", "json", *map(str, args)],
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout)


def findings(path, records) -> list[tuple]:
    fa = audit_records(str(path), records, AuditOptions())
    return sorted((f.rule, f.severity, f.frames, f.message) for f in fa.findings)


def test_new_rules_are_in_the_catalogue():
    for rid, sev in (("DECODE-UNSUPPORTED", "warning"), ("CRC-MISMATCH", "error"),
                     ("CRC-ZERO", "info"), ("SAR-RMPP-RETRY", "info")):
        assert RULES[rid].severity == sev and RULES[rid].source and RULES[rid].summary


# -- link types -----------------------------------------------------------------------------

@pytest.fixture
def usr0_pcap(tmp_path):
    """Link type 147 (USER0): 3 frames ibpath cannot read."""
    f = tmp_path / "user0.pcap"
    with PcapWriter(str(f), 147) as w:
        for k in range(3):
            w.write(bytes(rocev2_frame(answer_mad(k), src="10.0.0.1", dst="10.0.0.2")), k)
    return f


@pytest.fixture
def wifi_pcapng(tmp_path):
    """A pcapng with an Ethernet interface (one good MAD) and an 802.11 one (105, 2 frames)."""
    f = tmp_path / "mixed.pcapng"
    mad = bytes(rocev2_frame(answer_mad(7), src="10.0.0.1", dst="10.0.0.2"))
    with PcapNgWriter(str(f)) as w:
        w.write(b"\x08\x02" + bytes(30), 105, 1.0)
        w.write(mad, 1, 2.0)
        w.write(b"\x08\x02" + bytes(40), 105, 3.0)
    return f


def test_linktype_147_is_reported_once_and_decode_exits_1(usr0_pcap):
    rc, recs, err = decode_cli(usr0_pcap)
    assert rc == 1, err
    (rec,) = recs
    assert rec["kind"] == "unsupported" and rec["linktype"] == 147 and rec["count"] == 3
    assert "link type 147" in rec["error"] and "3 frames" in rec["error"]
    rc, doc = audit_cli(usr0_pcap)
    (f,) = doc["findings"]
    assert (f["rule"], f["severity"], f["frames"]) == ("DECODE-UNSUPPORTED", "warning", [1])
    assert "link type 147" in f["message"] and "3 frames" in f["message"]
    # the warning stays, but no frame of the file was audited: not a green report (issue 39)
    assert rc == 2
    assert doc["unreadable"] == [{"file": str(usr0_pcap), "error": "no frame audited: 3 frames "
                                  "of link type 147 not decoded"}]


def test_linktype_105_beside_ethernet(wifi_pcapng):
    rc, recs, _ = decode_cli(wifi_pcapng)
    assert rc == 1
    assert [r["kind"] for r in recs] == ["sa", "unsupported"]
    assert (recs[1]["linktype"], recs[1]["count"], recs[1]["frame"]) == (105, 2, 1)
    rc, doc = audit_cli(wifi_pcapng)
    assert [(f["rule"], f["frames"]) for f in doc["findings"]] == [("DECODE-UNSUPPORTED", [1])]


@needs_tshark
def test_tshark_engine_reports_the_same_link_types(usr0_pcap, wifi_pcapng):
    for path in (usr0_pcap, wifi_pcapng):
        scapy = list(decode_file(str(path)))
        tshark = list(tshark_engine.tshark_records(str(path)))
        assert findings(path, tshark) == findings(path, scapy)
        assert [r for r in tshark if r["kind"] == "unsupported"] == \
            [r for r in scapy if r["kind"] == "unsupported"]


# -- CRCs -----------------------------------------------------------------------------------

def _flip_last(frame: bytes, back: int = 1) -> bytes:
    i = len(frame) - back
    return frame[:i] + bytes([frame[i] ^ 0x5A]) + frame[i + 1:]


@pytest.fixture
def bad_crcs(tmp_path):
    """RoCEv2: a good answer, one with its ICRC flipped; native IB (ERF): one with its VCRC
    flipped, one with its ICRC flipped."""
    f = tmp_path / "crc.pcapng"
    with CaptureBuilder(str(f)) as b:
        q = b.sa_query(pr())
        good = bytes(rocev2_frame(answer_mad(q.tid), src=b.sa, dst=b.requester))
        b._write(good, 1)
        b._write(_flip_last(good), 1)
        ib = bytes(native_ib_frame(answer_mad(q.tid + 1), slid=3, dlid=4))
        b._write(erf_record(_flip_last(ib), b.t), 197)  # the VCRC's last byte
        b._write(erf_record(_flip_last(ib, 3), b.t), 197)  # the ICRC's last byte
    return f


def test_flipped_icrc_and_vcrc(bad_crcs):
    rc, recs, err = decode_cli(bad_crcs)
    assert rc == 1, err
    by = {r["frame"]: r for r in recs}
    assert "errors" not in by[2]
    assert by[3]["errors"] == ["ICRC mismatch"]
    assert by[4]["errors"] == ["VCRC mismatch"]
    # the VCRC covers the ICRC: a flipped ICRC byte breaks both
    assert by[5]["errors"] == ["ICRC mismatch", "VCRC mismatch"]
    assert "3 with CRC errors" in err
    rc, doc = audit_cli(bad_crcs)
    assert rc == 1
    crc = [(f["frames"], f["severity"]) for f in doc["findings"] if f["rule"] == "CRC-MISMATCH"]
    assert crc == [([3], "error"), ([4], "error"), ([5], "error")]


@needs_tshark
def test_tshark_engine_gives_the_same_crc_findings(bad_crcs):
    """The plugin's checks (ibpath.check.icrc/vcrc, Lua) against crc.py's: the same
    findings from both engines."""
    scapy = list(decode_file(str(bad_crcs)))
    got = findings(bad_crcs, list(tshark_engine.tshark_records(str(bad_crcs))))
    assert got == findings(bad_crcs, scapy)
    assert [x[2] for x in got if x[0] == "CRC-MISMATCH"] == [(3,), (4,), (5,)]


def _zero_icrc(frame: bytes) -> bytes:
    return frame[:-4] + bytes(4)


def test_capture_whose_icrcs_are_all_zero_is_said_once(tmp_path):
    f = tmp_path / "zero.pcap"
    with PcapWriter(str(f), 1) as w:
        for k in range(5):
            w.write(_zero_icrc(bytes(rocev2_frame(answer_mad(k), src="10.0.0.1",
                                                  dst="10.0.0.2"))), k)
    rc, recs, err = decode_cli(f)
    assert rc == 0, err
    assert all("errors" not in r for r in recs)
    (note,) = [r for r in recs if r["kind"] == "crc"]
    assert note["icrc_zero"] == 5 and note["frames"] == [1, 2, 3, 4, 5]
    rc, doc = audit_cli(f)
    assert rc == 0
    crc = [f for f in doc["findings"] if f["rule"].startswith("CRC-")]
    assert [(x["rule"], x["severity"]) for x in crc] == [("CRC-ZERO", "info")]
    assert "every ICRC of the capture is zero (5 frames)" in crc[0]["message"]


def test_some_zero_icrcs_among_computed_ones_are_mismatches(tmp_path):
    f = tmp_path / "some-zero.pcap"
    with PcapWriter(str(f), 1) as w:
        for k in range(4):
            frame = bytes(rocev2_frame(answer_mad(k), src="10.0.0.1", dst="10.0.0.2"))
            w.write(_zero_icrc(frame) if k == 2 else frame, k)
    rc, recs, _ = decode_cli(f)
    assert rc == 1
    rc, doc = audit_cli(f)
    crc = [(x["rule"], x["frames"]) for x in doc["findings"] if x["rule"].startswith("CRC-")]
    assert crc == [("CRC-MISMATCH", [3])] and rc == 1


@needs_tshark
def test_tshark_engine_agrees_on_zero_icrcs(tmp_path):
    f = tmp_path / "zero.pcapng"
    with PcapNgWriter(str(f)) as w:
        for k in range(3):
            w.write(_zero_icrc(bytes(rocev2_frame(answer_mad(k), src="10.0.0.1",
                                                  dst="10.0.0.2"))), 1, k)
    scapy = list(decode_file(str(f)))
    assert findings(f, list(tshark_engine.tshark_records(str(f)))) == findings(f, scapy)
    assert any(r["kind"] == "crc" for r in scapy)
