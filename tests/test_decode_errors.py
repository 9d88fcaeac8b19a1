"""Bad input: malformed frames are reported and decoding goes on; unreadable files exit 2."""

import json
import subprocess
import sys

from ibpath_scapy.capture.encap import rocev2_frame
from ibpath_scapy.layers import MAD, RMPP, PathRecord, SAHeader
from ibpath_scapy.capture.pcapio import PcapWriter
from ibpath_scapy.facts.rmpp import segment


def decode(path, fmt="json"):
    p = subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "decode", str(path),
                        "--format", fmt], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p, [json.loads(x) for x in p.stdout.splitlines()] if fmt == "json" else p.stdout


def query(tid=1):
    return MAD(transaction_id=tid) / RMPP() / SAHeader(records=[PathRecord(dgid="fe80::2")])


def test_truncated_and_garbage_frames_are_reported_and_decoding_goes_on(tmp_path):
    good = bytes(rocev2_frame(query(1), src="10.0.0.1", dst="10.0.0.2"))
    cap = tmp_path / "bad.pcap"
    with PcapWriter(str(cap), 1) as w:
        w.write(good, 1.0)
        w.write(good[:62 + 100], 2.0)  # MAD cut after 100 bytes
        w.write(b"\x00" * 7, 3.0)  # garbage, shorter than an Ethernet header
        w.write(good[:-1] + bytes([good[-1] ^ 0xFF]), 4.0)  # ICRC corrupted
        w.write(bytes(rocev2_frame(query(5), src="10.0.0.1", dst="10.0.0.2")), 5.0)
    p, recs = decode(cap)
    assert p.returncode == 1
    by = {r["frame"]: r for r in recs}
    assert by[1]["kind"] == "sa" and "errors" not in by[1]
    assert by[2]["kind"] == "malformed" and "bytes" in by[2]["error"]
    assert by[3]["kind"] == "malformed" and "cannot dissect" in by[3]["error"]
    assert by[4]["errors"] == ["ICRC mismatch"]
    assert by[5]["mad"]["transaction_id"] == 5
    assert "5 frames" in p.stderr and "2 malformed" in p.stderr


def test_truncated_capture_file_names_file_frame_and_offset(tmp_path, external):
    data = (external / "ib-erf-sminfo-cm.pcap").read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:5000])
    p, recs = decode(cut)
    assert p.returncode == 2
    assert str(cut) in p.stderr and "frame" in p.stderr and "byte offset" in p.stderr
    assert recs and recs[-1]["frame"] < 43  # everything before the damage was printed
    assert len(p.stderr.strip().splitlines()) == 1


def test_not_a_capture_is_one_line_exit_2(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("root:x:0:0:root:/root:/bin/bash\n" * 20)
    p, _ = decode(f, fmt="text")
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and str(f) in p.stderr


def test_missing_file_exit_2(tmp_path):
    p, _ = decode(tmp_path / "nope.pcap", fmt="text")
    assert p.returncode == 2 and "nope.pcap" in p.stderr


def test_unfinished_rmpp_transfer_is_reported(tmp_path):
    long = bytes(MAD(method=0x92, transaction_id=9) / RMPP(rmpp_version=1, rmpp_type=1)
                 / SAHeader(attribute_offset=8))[:56] + bytes(PathRecord()) * 10
    segs = segment(long)
    cap = tmp_path / "gap.pcap"
    with PcapWriter(str(cap), 1) as w:
        for i, s in enumerate(segs):
            if i != 2:
                w.write(bytes(rocev2_frame(MAD(s), src="10.0.0.2", dst="10.0.0.1")), float(i))
    p, recs = decode(cap)
    assert p.returncode == 1
    bad = [r for r in recs if r["kind"] == "malformed"]
    assert len(bad) == 1 and "[3] missing" in bad[0]["error"]
    assert bad[0]["frames"] == [1, 2, 3]


def test_bytes_past_the_packet_are_not_part_of_it(tmp_path):
    """An Ethernet FCS or trailer past the IP length, and ERF record padding past wlen, are
    not the MAD's: the frame decodes as it does without them (no false "MAD is 260 bytes",
    ICRC or VCRC error), on the Scapy path, the fast path and the tshark engine alike."""
    from ibpath_scapy.engines.scapy.decode import Decoder, decode_file
    from ibpath_scapy.capture.encap import erf_record, native_ib_frame
    from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast
    from ibpath_scapy.capture.pcapio import PcapNgWriter
    from ibpath_scapy.engines.tshark import tshark_records

    roce = bytes(rocev2_frame(query(7), src="10.0.0.1", dst="10.0.0.2"))
    ib = native_ib_frame(query(8), slid=3, dlid=1)
    erf = erf_record(ib, 1.0)
    padded = erf[:10] + (len(erf) + 8).to_bytes(2, "big") + erf[12:] + bytes(8)
    clean, dirty = tmp_path / "clean.pcapng", tmp_path / "trailers.pcapng"
    with PcapNgWriter(str(clean)) as c, PcapNgWriter(str(dirty)) as d:
        for i, (lt, good, bad) in enumerate(((1, roce, roce + b"\xde\xad\xbe\xef"),  # FCS
                                             (1, roce, roce + bytes(6)),
                                             (197, erf, padded))):
            c.write(good, lt, float(i))
            d.write(bad, lt, float(i))
    want = list(decode_file(str(clean), Decoder()))
    assert len(want) == 3 and not any("errors" in r for r in want)
    assert list(decode_file(str(dirty), Decoder())) == want
    assert list(decode_file_fast(str(dirty), FastDecoder())) == want
    assert list(tshark_records(str(dirty))) == want
