"""ServiceRecord (IBA Vol1 15.2.5.14, SA attribute 0x0031) in every engine.

The oracle of the layout is OpenSM's ib_service_record_t (include/iba/ib_types.h) written
here as a struct format, not the layer: ServiceID, ServiceGID, ServiceP_Key, 16 reserved
bits, ServiceLease, ServiceKey[16], ServiceName[64], ServiceData8[16], ServiceData16[8],
ServiceData32[4], ServiceData64[2], all big-endian, 176 bytes. The ComponentMask bits are
ib_sa.h's IB_SA_SERVICE_REC_* (OpenSM IB_SR_COMPMASK_*), also written out here.

An RMPP GetTableResp of two ServiceRecords over RoCEv2 (two segments) is decoded by the Scapy
engine, the fast path in Python and in C, and tshark with the generated plugin; all give the
records the test packed, with ServiceName as text: a name that is not UTF-8 and one that no
NUL ends are escaped as the test spells them (layers.sa.name_text's convention).
"""

from __future__ import annotations

import ipaddress
import struct

import pytest

from ibpath_scapy.capture.encap import rocev2_frame
from ibpath_scapy.capture.pcapio import PcapWriter
from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast
from ibpath_scapy.engines.scapy.decode import Decoder, decode_file
from ibpath_scapy.facts import public
from ibpath_scapy.facts.rmpp import segment
from ibpath_scapy.layers import MAD, RMPP, SAHeader
from ibpath_scapy.layers.sa import ServiceRecord, component_names, name_text
from ibpath_scapy.native import extension

from tshark_util import assert_clean, needs_tshark, run_tshark, tshark_env

ATTR_SERVICE_RECORD = 0x0031  # IBA Table 206 (ib_types.h IB_MAD_ATTR_SERVICE_RECORD)
# ib_service_record_t, field for field (OpenSM include/iba/ib_types.h)
SR = struct.Struct(">Q16sHHI16s64s16B8H4I2Q")
SR_FIELDS = (["service_id", "service_gid", "service_pkey", "reserved_208", "service_lease",
              "service_key", "service_name"] + [f"service_data8_{i}" for i in range(16)]
             + [f"service_data16_{i}" for i in range(8)]
             + [f"service_data32_{i}" for i in range(4)]
             + [f"service_data64_{i}" for i in range(2)])
# IB_SA_SERVICE_REC_*: ID 0, GID 1, PKEY 2, (3 reserved), LEASE 4, KEY 5, NAME 6,
# DATA8_0..15 7-22, DATA16_0..7 23-30, DATA32_0..3 31-34, DATA64_0..1 35-36
COMPONENT_BITS = {"service_id": 0, "service_gid": 1, "service_pkey": 2, "service_lease": 4,
                  "service_key": 5, "service_name": 6,
                  **{f"service_data8_{i}": 7 + i for i in range(16)},
                  **{f"service_data16_{i}": 23 + i for i in range(8)},
                  **{f"service_data32_{i}": 31 + i for i in range(4)},
                  **{f"service_data64_{i}": 35 + i for i in range(2)}}


def values(k: int, name: bytes) -> dict:
    """The test's record k: every field distinct and non-zero where it can be."""
    return {"service_id": 0x1000000000000000 + k, "service_gid": f"fe80::2:c903:0:{k + 1:x}",
            "service_pkey": 0xFFFF - k, "service_lease": 0xFFFFFFFF - 3600 * k,
            "service_key": bytes(range(16 * k, 16 * k + 16)), "service_name": name,
            **{f"service_data8_{i}": (k * 16 + i + 1) & 0xFF for i in range(16)},
            **{f"service_data16_{i}": 0x1000 * (k + 1) + i for i in range(8)},
            **{f"service_data32_{i}": 0x10000000 * (k + 1) + i for i in range(4)},
            **{f"service_data64_{i}": 0x0100000000000000 * (k + 1) + i for i in range(2)}}


def packed(v: dict, reserved: int = 0) -> bytes:
    return SR.pack(v["service_id"], ipaddress.IPv6Address(v["service_gid"]).packed,
                   v["service_pkey"], reserved, v["service_lease"], v["service_key"],
                   v["service_name"], *[v[f"service_data8_{i}"] for i in range(16)],
                   *[v[f"service_data16_{i}"] for i in range(8)],
                   *[v[f"service_data32_{i}"] for i in range(4)],
                   *[v[f"service_data64_{i}"] for i in range(2)])


# the two records of the answer: a ServiceName that is not UTF-8 (Latin-1 é, a backslash, a
# control character), and one that fills its 64 bytes with no NUL; and how ibpath writes them
NAMES = [b"caf\xe9\\srv\x01", "ünïcode-".encode() * 6 + b"x" * 4]
TEXTS = ["caf\\xe9\\\\srv\\x01", "ünïcode-" * 6 + "xxxx\\c"]
RECORDS = [values(k, name) for k, name in enumerate(NAMES)]


def expected() -> list[dict]:
    out = []
    for v, text in zip(RECORDS, TEXTS):
        d = {n: v[n] for n in SR_FIELDS if not n.startswith("reserved")}
        d["service_key"] = v["service_key"].hex()
        d["service_name"] = text
        out.append(d)
    return out


def test_service_record_packs_as_ib_service_record_t():
    assert SR.size == 176 == len(ServiceRecord())
    for v in RECORDS + [values(7, b"ibpath.test\0")]:
        layer = ServiceRecord(**v)
        assert bytes(layer) == packed(v)
        back = ServiceRecord(packed(v, reserved=0xABCD))
        assert back.reserved_208 == 0xABCD
        for name in SR_FIELDS[:-30]:
            if name not in ("reserved_208", "service_name", "service_key", "service_gid"):
                assert back.getfieldval(name) == v[name], name
        assert [back.getfieldval(f"service_data64_{i}") for i in range(2)] == \
            [v["service_data64_0"], v["service_data64_1"]]
    # text given for the name is UTF-8, NUL-padded to 64 bytes
    assert bytes(ServiceRecord(service_name="né"))[48:112] == "né".encode().ljust(64, b"\0")


def test_service_name_text_convention():
    assert name_text(b"ibpath.test\0garbage") == "ibpath.test"
    assert name_text("né".encode() + b"\0") == "né"
    assert name_text(b"\xe2\x82A\0") == "\\xe2\\x82A"  # a cut sequence, byte by byte
    assert name_text(b"a\\b\x7f\0") == "a\\\\b\\x7f"
    assert name_text(b"A" * 64) == "A" * 64 + "\\c"
    assert [name_text(n.ljust(64, b"\0")) for n in NAMES] == TEXTS
    assert len(NAMES[1]) == 64


def test_component_mask_names_are_servicerecords():
    names = component_names(ServiceRecord)
    assert {n: names.index(n) for n in COMPONENT_BITS} == COMPONENT_BITS
    assert [b for b, n in enumerate(names) if n.startswith("reserved")] == [3] + list(range(37, 64))
    q = MAD(method=0x12, attribute_id=ATTR_SERVICE_RECORD) / RMPP() / SAHeader(records=[
        ServiceRecord(service_name="ibpath.test", service_data16_3=7)])
    assert MAD(bytes(q))[SAHeader].component_mask == 1 << 6 | 1 << 26
    assert "service_name" in str(MAD(bytes(q))[SAHeader].component_mask)


def capture(path, records=RECORDS, *, query_mask=1 << 6 | 1 << 3) -> int:
    """A GetTable(ServiceRecord) and its GetTableResp of `records` in RMPP segments over
    RoCEv2; returns the number of segments."""
    data = b"".join(packed(v) for v in records)
    hdr = bytes(MAD(method=0x92, attribute_id=ATTR_SERVICE_RECORD, transaction_id=0x5151)
                / RMPP(rmpp_version=1, rmpp_type=1)
                / SAHeader(attribute_offset=22, component_mask=0))[:56]
    segments = segment(hdr + data)
    query = MAD(method=0x12, attribute_id=ATTR_SERVICE_RECORD, transaction_id=0x5151) / RMPP() \
        / SAHeader(component_mask=query_mask) / packed(values(0, b"caf\xe9\\srv\x01"))
    w = PcapWriter(str(path), 1)  # Ethernet
    w.write(bytes(rocev2_frame(bytes(query), src="10.0.0.1", dst="10.0.0.2")), 1.0)
    for k, seg in enumerate(segments):
        w.write(bytes(rocev2_frame(seg, src="10.0.0.2", dst="10.0.0.1")), 2.0 + k)
    w.close()
    return len(segments)


def _answer(recs: list[dict]) -> dict:
    done = [r for r in recs if r.get("reassembled_from")]
    assert len(done) == 1, recs
    return done[0]


def _engines(path) -> dict[str, list[dict]]:
    out = {"scapy": [public(r) for r in decode_file(str(path), Decoder())]}
    python = FastDecoder()
    python._native = None
    out["fast-python"] = [public(r) for r in decode_file_fast(str(path), python)]
    if extension() is not None:
        native = FastDecoder()
        assert native._native is not None
        out["fast-c"] = [public(r) for r in decode_file_fast(str(path), native)]
    return out


def test_engines_read_a_two_segment_service_record_answer(tmp_path):
    path = tmp_path / "sr.pcap"
    assert capture(path) == 2
    engines = _engines(path)
    scapy = engines["scapy"]
    answer = _answer(scapy)
    assert answer["mad"]["attribute_name"] == "ServiceRecord"
    assert answer["sa_records"] == expected()
    assert not answer.get("errors")
    assert [r["kind"] for r in scapy] == ["sa"] * 3
    query = scapy[0]
    assert query["sa"]["components"] == ["reserved_3", "service_name"]
    assert query["sa_records"][0]["service_name"] == TEXTS[0]
    for name, recs in engines.items():
        assert recs == scapy, name
    if extension() is None:
        pytest.skip("the C extension is not built here")


def test_reserved_bits_of_a_service_record_are_reported(tmp_path):
    path = tmp_path / "sr-reserved.pcap"
    data = b"".join(packed(v, reserved=0x1 if k == 1 else 0) for k, v in enumerate(RECORDS))
    hdr = bytes(MAD(method=0x92, attribute_id=ATTR_SERVICE_RECORD, transaction_id=9)
                / RMPP(rmpp_version=1, rmpp_type=1) / SAHeader(attribute_offset=22))[:56]
    w = PcapWriter(str(path), 1)
    for k, seg in enumerate(segment(hdr + data)):
        w.write(bytes(rocev2_frame(seg, src="10.0.0.2", dst="10.0.0.1")), 1.0 + k)
    w.close()
    for name, recs in _engines(path).items():
        assert _answer(recs)["errors"] == ["reserved ServiceRecord bits set in record(s) [1]"], name


def test_an_empty_get_table_resp_is_not_malformed(tmp_path):
    """OpenSM answers a GetTable that matches nothing with a GetTableResp of no records
    (osm_sa_respond: a one-segment RMPP DATA, PayloadLength 20, the SA header alone)."""
    path = tmp_path / "sr-empty.pcap"
    answer = MAD(method=0x92, attribute_id=ATTR_SERVICE_RECORD, transaction_id=3) / RMPP(
        rmpp_version=1, rmpp_type=1, rmpp_flags="active+first+last") / SAHeader(
        attribute_offset=22, records=[])
    assert MAD(bytes(answer))[RMPP].payload_length == 20
    w = PcapWriter(str(path), 1)
    w.write(bytes(rocev2_frame(bytes(answer), src="10.0.0.2", dst="10.0.0.1")), 1.0)
    w.close()
    for name, recs in _engines(path).items():
        assert [r["kind"] for r in recs] == ["sa"], (name, recs)
        assert recs[0]["sa_records"] == [] and not recs[0].get("errors"), (name, recs)


@needs_tshark
def test_the_plugin_reads_service_records_as_the_other_engines(tmp_path, monkeypatch):
    from ibpath_scapy.engines.tshark import tshark_records
    from ibpath_scapy.luagen.plugin import generate_plugin

    plugin = tmp_path / "ibpath.lua"
    plugin.write_text(generate_plugin())
    path = tmp_path / "sr.pcap"
    capture(path)
    scapy = [public(r) for r in decode_file(str(path), Decoder())]
    for k, v in tshark_env().items():
        monkeypatch.setenv(k, v)
    tshark = [public(r) for r in tshark_records(str(path), plugin=plugin, render=True)]
    assert _answer(tshark)["sa_records"] == expected()
    assert [r.get("sa_records") for r in tshark] == [r.get("sa_records") for r in scapy]
    assert [r.get("sa") for r in tshark] == [r.get("sa") for r in scapy]
    # what Wireshark shows: no Lua error, nothing malformed, the names as text, the
    # query's ComponentMask by ServiceRecord's names
    run = run_tshark(path, ["-X", f"lua_script:{plugin}", "-V"])
    assert_clean(run.stdout, run.stderr)
    assert "Lua Error" not in run.stdout + run.stderr
    assert "Malformed" not in run.stdout
    for text in TEXTS:
        assert f'Service Name: "{text}"' in run.stdout, run.stdout
    assert "= Service Name: True" in run.stdout
