"""Real clients nobody here wrote, on a simulated fabric, recorded by `ibpath record`: what
they printed is the oracle of what ibpath decodes of their recording.

The fabric (record/fabric.py): ibsim with one switch and two HCAs, OpenSM as SM and SA, every
program on it through libumad2sim.so. saquery prints each PathRecord it got ("PathRecord
dump:", one line a field, IBA's packed bytes as it reads them, libibmad's
mad_dump_path_record); those lines are parsed here and compared field by field with the
answer ibpath decodes from saquery's own recording, through the Scapy engine and through the
generated plugin under tshark (--engine tshark). ibpath's decode of its own recording is never
the reference.

umad2sim's limits (ibsim 0.10) are shown by a test of their own, so that neither is taken for
the other: it forwards at most 256 bytes of any MAD a process writes (no RMPP: OpenSM's answer
of N records reaches saquery cut to its first 200 data bytes) and its receive path damages MAD
bytes 224 to 255 of what a process reads. A kernel hands a process an RMPP answer whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.facts import public
from ibpath_scapy.layers.sa import SA_MAD_HDR_SIZE
from ibpath_scapy.layers.umad import UMAD_TID_LOW
from ibpath_scapy.record.fabric import Fabric

from ibpath_scapy.engines import tshark as tshark_engine
from fabric_util import TWO_HCAS, needs_fabric
from saquery_oracle import printed_path_record, saquery_records


pytestmark = needs_fabric


@pytest.fixture(scope="module")
def fabric():
    with Fabric(TWO_HCAS, sm_host="HcaA") as fab:
        yield fab


def decoded(path: Path, engine: str) -> list[dict]:
    if engine == "scapy":
        return [public(r) for r in decode_file(str(path))]
    return [public(r) for r in tshark_engine.tshark_records(str(path))]


ENGINES = ["scapy", pytest.param("tshark", marks=pytest.mark.skipif(
    tshark_engine.tshark_path() is None, reason="tshark is not installed"))]


def _audit(path: Path) -> dict:
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "ibpath_scapy", "audit", "--format", "json",
                        str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def _queries(fab: Fabric) -> dict[str, list[str]]:
    a, b = fab.nodes["HcaA"], fab.nodes["HcaB"]
    return {
        "src-to-dst B:A": ["saquery", "--src-to-dst", f"{b.lid}:{a.lid}"],
        "src-to-dst A:B": ["saquery", "--src-to-dst", f"{a.lid}:{b.lid}"],
        "-p src-to-dst B:A": ["saquery", "-p", "--src-to-dst", f"{b.lid}:{a.lid}"],
        "-p sgid-to-dgid B-A": ["saquery", "-p", "--sgid-to-dgid", f"{b.gid}-{a.gid}"],
    }


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("query", ["src-to-dst B:A", "src-to-dst A:B", "-p src-to-dst B:A",
                                   "-p sgid-to-dgid B-A"])
def test_saquery_pathrecord_decodes_as_saquery_printed_it(fabric, tmp_path, query, engine):
    out = tmp_path / "sq.pcapng"
    r = fabric.run("HcaB", _queries(fabric)[query], record=out)
    assert r.returncode == 0, r.stderr.decode()
    printed = [printed_path_record(p) for p in saquery_records(r.stdout.decode())]
    assert len(printed) == 1, r.stdout.decode()
    recs = decoded(out, engine)
    assert not [x for x in recs if x["kind"] == "malformed"], recs
    request, answer = (x for x in recs if x["kind"] == "sa")
    assert request["mad"]["method_name"] == "GetTable"
    assert answer["mad"]["method_name"] == "GetTableResp"
    assert answer["path_records"] == printed
    # the addresses ib_user_mad carries: the SA's LID and QP1, the process on the other side
    assert request["dst"] == answer["src"] == f"LID {fabric.sa_lid}"
    assert request["src"] == answer["dst"] and request["src"].startswith("pid ")
    assert request["umad"]["direction"] == "write" and answer["umad"]["direction"] == "read"
    # the TID rewrite: the process wrote only the low 32 bits, the answer has the agent's hi_tid
    assert answer["umad"]["request_frame"] == request["frame"]
    low = request["mad"]["transaction_id"] & UMAD_TID_LOW
    assert answer["mad"]["transaction_id"] & UMAD_TID_LOW == low
    if answer["mad"]["transaction_id"] != request["mad"]["transaction_id"]:
        assert answer["umad"]["written_tid"] == request["mad"]["transaction_id"]


def test_saquery_recording_audits_clean_and_paired(fabric, tmp_path):
    out = tmp_path / "sq.pcapng"
    r = fabric.run("HcaB", _queries(fabric)["src-to-dst B:A"], record=out)
    assert r.returncode == 0
    report = _audit(out)
    assert report["findings"] == []
    assert report["summary"]["transactions"] == 1


@pytest.mark.parametrize("query,kind,attribute", [
    (["saquery", "NR"], "NodeRecord", "NodeRecord"),
    (["saquery", "PIR"], "PortInfoRecord", "PortInfoRecord"),
])
def test_saquery_other_attributes_are_sa_records_not_malformed(fabric, tmp_path, query, kind,
                                                              attribute):
    out = tmp_path / "sq.pcapng"
    r = fabric.run("HcaB", query, record=out)
    assert r.returncode == 0, r.stderr.decode()
    assert saquery_records(r.stdout.decode(), kind) or f"{kind} dump" in r.stdout.decode()
    for engine in ("scapy",) + (("tshark",) if tshark_engine.tshark_path() else ()):
        recs = decoded(out, engine)
        sa = [x for x in recs if x["kind"] == "sa"]
        assert not [x for x in recs if x["kind"] == "malformed"], (engine, recs)
        assert [x["mad"]["attribute_name"] for x in sa] == [attribute] * 2, (engine, sa)
        assert [x["mad"]["method_name"] for x in sa] == ["GetTable", "GetTableResp"]
    assert not [f for f in _audit(out)["findings"] if f["severity"] == "error"]


def test_umad2sim_limits_shown_against_opensm_recording(tmp_path):
    """What ibsim/umad2sim do that a kernel does not, measured on one saquery -p: OpenSM
    writes the whole answer (every PathRecord of the subnet), saquery reads its first 256
    MAD bytes with bytes 224..255 damaged, and prints exactly what it read (the third
    record damaged); ibpath decodes both recordings as they are."""
    osm_capture = tmp_path / "opensm.pcapng"
    client = tmp_path / "saquery.pcapng"
    with Fabric(TWO_HCAS, sm_host="HcaA", sm_record=osm_capture) as fab:
        r = fab.run("HcaB", ["saquery", "-p"], record=client)
    assert r.returncode == 0, r.stderr.decode()
    printed = [printed_path_record(p) for p in saquery_records(r.stdout.decode())]
    sent = [x for x in decode_file(str(osm_capture))
            if x["kind"] == "sa" and x["mad"]["method_name"] == "GetTableResp"]
    got = [x for x in decode_file(str(client))
           if x["kind"] == "sa" and x["mad"]["method_name"] == "GetTableResp"]
    assert len(sent) == 1 and len(got) == 1
    sent, got = public(sent[0]), public(got[0])
    # three switch/HCA LIDs: every ordered pair is a path, OpenSM sent all of them
    assert len(sent["path_records"]) == 9
    stride = sent["sa"]["attribute_offset"] * 8
    osm_write = sent["umad"]["call"]["rc"] - 64
    assert osm_write == SA_MAD_HDR_SIZE + 9 * stride  # the whole message, unpadded
    # saquery read 256 bytes: 200 data bytes, 3 records and 8 bytes of a fourth
    assert got["umad"]["call"]["rc"] - 64 == 256
    assert got["path_records"] == printed and len(printed) == 3
    # the first two records are OpenSM's; the third is damaged from MAD byte 224 on
    assert got["path_records"][:2] == sent["path_records"][:2]
    assert got["path_records"][2] != sent["path_records"][2]
    assert got["path_records"][2]["sgid"] == sent["path_records"][2]["sgid"]  # bytes < 224


def test_a_send_the_kernel_hands_back_is_no_new_request(tmp_path):
    """A request whose answer timed out comes back to the process on its umad fd: its MAD
    header alone (IB_MGMT_MAD_HDR, 24 bytes) and struct ib_user_mad_hdr's status ETIMEDOUT
    (user_mad.c send_handler). It is tied to the request and says so; the audit reports the
    one unanswered request, and nothing malformed."""
    from ibpath_scapy.craft import CaptureBuilder
    from ibpath_scapy.layers import MAD, RMPP, PathRecord, SAHeader
    from ibpath_scapy.layers.umad import UserMad

    request = bytes(MAD(method=0x12, transaction_id=0x1234) / RMPP() / SAHeader(
        records=[PathRecord(dlid=1, slid=3)]))
    path = tmp_path / "timeout.pcapng"
    with CaptureBuilder(str(path)) as b:
        b.umad(UserMad(timeout_ms=1000, lid=1), request, write=True)
        b.umad(UserMad(status=110, lid=1, length=64 + 24), request[:24], write=False)
    recs = [public(x) for x in decode_file(str(path))]
    assert [x["kind"] for x in recs] == ["sa", "sa"]
    assert recs[1]["umad"]["request_frame"] == 1
    assert recs[1]["errors"] == ["the kernel handed this send back with status 110 (ETIMEDOUT): "
                                 "no answer came for it"]
    report = _audit_any(path)
    assert [(f["rule"], f["frames"]) for f in report["findings"]] == [("SAQ-NO-RESPONSE", [1])]
    assert report["summary"]["transactions"] == 1


def _audit_any(path: Path) -> dict:
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "ibpath_scapy", "audit", "--format", "json",
                        str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return json.loads(r.stdout)
