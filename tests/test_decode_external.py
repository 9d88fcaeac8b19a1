"""`ibpath decode` on the real external captures (never edited; read in place)."""

import json
import subprocess
import sys

from ibpath_scapy.engines.scapy.decode import Decoder, decode_file


def run_decode(path, fmt="json"):
    p = subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "decode", str(path),
                        "--format", fmt], capture_output=True, text=True, timeout=120)
    return p


def test_rxe_first_cm_req_flow_label_and_rate(external):
    p = run_decode(external / "rxe-cm-rdma-rw.pcap")
    assert p.returncode == 0, p.stderr
    recs = [json.loads(line) for line in p.stdout.splitlines()]
    reqs = [r for r in recs if "cm_req" in r]
    assert reqs and reqs[0]["frame"] == 1
    req = reqs[0]["cm_req"]
    # ibta_vol1_c12.h: flow label = top 20 bits of the u32 at REQ offset 88 (bytes 3a 12 60 00)
    assert req["primary_flow_label"] == 0x3A126
    assert req["primary_packet_rate"] == 0
    # RoCEv2: the GIDs are the IPv4-mapped addresses of the carrying packet
    assert req["primary_local_gid"] == "::ffff:" + reqs[0]["src"]  # canonical on every Python
    assert {r["cm"]["message"] for r in recs if "cm" in r} >= {"REQ", "REP", "RTU", "DREQ", "DREP"}
    assert all("errors" not in r for r in recs), [r for r in recs if "errors" in r]


def test_every_cm_req_of_native_ib_capture_decodes(external):
    recs = list(decode_file(str(external / "ib-erf-sminfo-cm.pcap")))
    reqs = [r for r in recs if "cm_req" in r]
    assert [r["frame"] for r in reqs] == [7, 27, 34]
    for r in reqs:
        req = r["cm_req"]
        assert req["primary_local_lid"] and req["primary_remote_lid"]
        assert req["primary_local_gid"].startswith("fe80::")
        assert req["path_packet_payload_mtu"] == 4  # 2048
        assert r["encap"] == "ib" and "errors" not in r
    assert all(r["kind"] != "malformed" for r in recs)


def test_real_sa_path_record_exchange_in_native_capture(external):
    recs = {r["frame"]: r for r in decode_file(str(external / "ib-erf-sminfo-cm.pcap"))}
    q, a = recs[32], recs[33]
    assert q["kind"] == a["kind"] == "sa"
    assert q["mad"]["transaction_id"] == a["mad"]["transaction_id"]
    assert q["sa"]["components"] == ["dgid", "sgid", "tclass", "numb_path", "pkey"]
    (rec,) = a["path_records"]
    assert (rec["sgid"], rec["dgid"], rec["slid"], rec["dlid"]) == (
        "fe80::2:c902:24:f636", "fe80::2:c903:0:1895", 4, 2)
    assert (rec["reversible"], rec["numb_path"], rec["mtu"], rec["rate"]) == (1, 0, 4, 3)
    assert (rec["mtu_selector"], rec["rate_selector"], rec["packet_life_time"]) == (2, 2, 18)


def test_rc_data_capture_reports_no_mad(external):
    d = Decoder()
    assert list(decode_file(str(external / "rocev2-rc-send.pcap"), d)) == []
    assert d.stats.frames == 123 and d.stats.mad_frames == 0


def test_text_format_is_readable(external):
    p = run_decode(external / "ib-erf-sminfo-cm.pcap", fmt="text")
    assert p.returncode == 0
    assert "SA GetResp(PathRecord)" in p.stdout
    assert "component mask 0x000000000000340c: dgid sgid tclass numb_path pkey" in p.stdout
    assert "43 frames, 17 MAD frames, 0 malformed" in p.stderr
