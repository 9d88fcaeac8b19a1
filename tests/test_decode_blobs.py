"""`ibpath decode` on blobs: raw blob files told apart from captures by content, LS responses and
exported-PDU blob frames in pcapng, each with `blob_records` (interfaces.md) and a kernel view."""

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from ibpath_scapy.facts import public
from ibpath_scapy.engines.scapy.decode import Decoder
from ibpath_scapy.facts.records import PATH_RECORD_FIELDS
from ibpath_scapy.layers.pathdata import blob_pdu, set_option_comment
from ibpath_scapy.capture.pcapio import RAW_BLOB_LINKTYPE, Frame, PcapNgWriter
from ibpath_scapy.facts.render import frame_text

from test_netlink import cooked, nlmsg, resolve_request, resolve_response
from test_pathdata import pack_record

IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main"]

FWD = dict(sgid=b"\xfe\x80" + b"\0" * 13 + b"\x01", dgid=b"\xfe\x80" + b"\0" * 13 + b"\x02",
           slid=1, dlid=2, rev=0, pkey=0x8001, sl=3, mtu=5, rate=16, plt=14, flow=0x12345, hop=9)
RET = dict(FWD, sgid=FWD["dgid"], dgid=FWD["sgid"], slid=2, dlid=1)
GMP = dict(FWD, rev=1, dlid=7)
SEED = pack_record(0x0A, 0, **FWD) + pack_record(0x12, 0, **RET) + pack_record(0x2B, 0, **GMP)


def decode(path, fmt="json"):
    p = subprocess.run(IBPATH + ["decode", "--format", fmt, str(path)], capture_output=True,
                       text=True, timeout=60)
    recs = [json.loads(line) for line in p.stdout.splitlines()] if fmt == "json" else p.stdout
    return p.returncode, recs, p.stderr


def test_raw_blob_file(tmp_path):
    f = tmp_path / "optval"  # no extension: content decides
    f.write_bytes(SEED)
    rc, recs, err = decode(f)
    assert rc == 0, err
    assert len(recs) == 1
    r = recs[0]
    assert (r["frame"], r["kind"], r["encap"]) == (1, "blob", "raw")
    assert r["blob"] == {"length": 216, "records": 3, "trailing_bytes": 0}
    assert [b["flags"] for b in r["blob_records"]] == [0x0A, 0x12, 0x2B]
    assert r["blob_records"][2]["flag_names"] == ["GMP", "PRIMARY", "OUTBOUND", "INBOUND_REVERSE"]
    assert r["blob_records"][1]["flag_names"] == ["PRIMARY", "INBOUND"]
    assert all(b["reserved"] == 0 for b in r["blob_records"])
    p0 = r["blob_records"][0]["path_record"]
    assert list(p0) == PATH_RECORD_FIELDS
    assert (p0["sgid"], p0["dgid"], p0["slid"], p0["dlid"], p0["pkey"]) == ("fe80::1", "fe80::2", 1, 2, 0x8001)
    assert (p0["sl"], p0["mtu"], p0["rate"], p0["packet_life_time"]) == (3, 5, 16, 14)
    assert (p0["flow_label"], p0["hop_limit"], p0["reversible"]) == (0x12345, 9, 0)
    assert r["blob_records"][1]["path_record"]["sgid"] == "fe80::2"
    assert r["blob_records"][2]["path_record"]["reversible"] == 1
    kv = r["kernel_view"]
    assert set(kv) == {"ucma", "ls-legacy", "ls-multi-6.1", "ls-multi", "proposal"}
    assert (kv["ucma"]["gmp"], kv["ucma"]["accepted"]) == (2, True)
    assert (kv["ls-multi"]["gmp"], kv["ls-multi"]["forward"], kv["ls-multi"]["inbound"]) == (2, 0, 1)
    assert "errors" not in r
    rc, text, _ = decode(f, "text")
    assert "raw blob file  3 record(s), 216 bytes" in text
    assert "GMP|PRIMARY|BIDIRECTIONAL" in text and "kernel ucma         takes gmp 2" in text


def test_raw_blob_of_odd_length(tmp_path):
    f = tmp_path / "short.bin"
    f.write_bytes(SEED[:100])
    rc, recs, err = decode(f)
    assert rc == 1, err  # decoded, with an error: the help's "1"
    (r,) = recs
    assert (r["frame"], r["kind"]) == (1, "blob")
    assert r["blob"] == {"length": 100, "records": 1, "trailing_bytes": 28}
    assert any("length 100 is not a multiple of 72" in e for e in r["errors"])
    assert r["kernel_view"]["ucma"]["outcome"] == "EINVAL"


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400))
def test_any_blob_bytes_decode_without_a_crash(data):
    (rec,) = map(public, Decoder().feed(Frame(1, 0.0, RAW_BLOB_LINKTYPE, data, len(data))))
    json.dumps(rec)
    assert frame_text(rec)
    assert rec["blob"]["length"] == len(data)
    assert len(rec["blob_records"]) == len(data) // 72
    errors = rec.get("errors", [])
    # exactly: the length error when it is not a whole number of records, the no-record error
    # when there is not one whole record (the empty blob has only that one)
    ragged = [e for e in errors if e.startswith(f"blob length {len(data)} is not a multiple of 72")]
    assert len(ragged) == (1 if len(data) % 72 else 0), errors
    assert errors.count("blob holds no whole record") == (1 if len(data) < 72 else 0), errors


@pytest.mark.parametrize("content", [
    b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n",
    b"\x7fELF\x02\x01\x01\x00" + b"\0" * 64,
    b"\x2b\x00\x00",
    b"",
], ids=["text", "elf", "3-bytes", "empty"])
def test_not_a_capture_or_blob(tmp_path, content):
    f = tmp_path / "thing"
    f.write_bytes(content)
    rc, recs, err = decode(f)
    assert rc == 2 and recs == []
    assert f"{f}: not a capture or blob file" in err


def test_etc_passwd_is_not_a_blob():
    rc, _, err = decode("/etc/passwd")
    assert rc == 2 and "not a capture or blob file" in err


def test_ls_exchange_in_pcapng(tmp_path):
    cap = tmp_path / "ls.pcapng"
    uni_records = [pack_record(0x0A, 0, **FWD)]
    with PcapNgWriter(str(cap)) as w:
        w.write(cooked(6) + resolve_request(seq=5, path_use=1), 253, 10.0)
        w.write(cooked(7) + resolve_response(uni_records, seq=5), 253, 10.001)
        w.write(cooked(6) + resolve_request(seq=6, path_use=0), 253, 11.0)
        w.write(cooked(7) + nlmsg(0x1000, 0x100, 6, 4242, b""), 253, 11.001)
        w.write(cooked(7) + resolve_response([SEED[:72], SEED[72:144], SEED[144:]], seq=99), 253, 12.0)
    rc, recs, err = decode(cap)
    assert rc == 0, err
    assert [r["kind"] for r in recs] == ["ls"] * 5
    req, resp, req2, errresp, orphan = recs
    assert req["ls"]["path_use_name"] == "UNIDIRECTIONAL" and "blob_records" not in req
    assert req["ls"]["attributes"][0] == {"index": 0, "type": 3, "type_name": "SERVICE_ID",
                                          "nla_type": 0x2003, "nla_len": 12, "mandatory": True,
                                          "value": 0x0106000000000000}
    assert [b["flags"] for b in resp["blob_records"]] == [0x0A]
    assert resp["ls"]["request_frame"] == 1 and resp["ls"]["attributes"][0]["blob_record"] == 0
    assert resp["kernel_view"]["ls-legacy"]["accepted"]  # PRIMARY|OUTBOUND for UNIDIRECTIONAL
    assert resp["kernel_view"]["ls-legacy"]["path_use_name"] == "UNIDIRECTIONAL"
    assert not resp["kernel_view"]["ucma"]["accepted"]
    assert errresp["ls"]["error"] and errresp["blob_records"] == []
    assert errresp["kernel_view"]["ls-multi"]["outcome"] == "sa-fallback"
    assert "request_frame" not in orphan  # no request with seq 99 in the capture
    assert orphan["kernel_view"]["ls-multi"]["path_use"] == 0  # assumed ALL
    assert [b["flags"] for b in orphan["blob_records"]] == [0x0A, 0x12, 0x2B]
    rc, text, _ = decode(cap, "text")
    assert "LS RESOLVE response seq 6 [LS_F_ERR]" in text
    assert "kernel ls-multi     sa-fallback" in text


def test_blob_frames_in_pcapng(tmp_path):
    cap = tmp_path / "blobs.pcapng"
    with PcapNgWriter(str(cap)) as w:
        w.write(bytes(blob_pdu(SEED)), 252, 1.0, comment=set_option_comment(0))
        w.write(bytes(blob_pdu(SEED[:72 * 2])), 252, 2.0, comment=set_option_comment(-22))
    rc, recs, err = decode(cap)
    assert rc == 0, err
    assert [(r["frame"], r["kind"], r["encap"]) for r in recs] == [
        (1, "blob", "exported_pdu"), (2, "blob", "exported_pdu")]
    assert [b["flags"] for b in recs[0]["blob_records"]] == [0x0A, 0x12, 0x2B]
    assert recs[0]["blob"]["set_option_result"] == "0"
    assert recs[1]["blob"]["set_option_result"] == "-EINVAL"
    assert recs[1]["kernel_view"]["ucma"]["outcome"] == "EINVAL"
