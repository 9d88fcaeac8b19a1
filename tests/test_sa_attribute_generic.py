"""A new SA attribute is a layer class and a table entry, in every engine.

A toy SA attribute is declared here only: a 24-byte Scapy layer with a bit field, an enum and
a GID, and a reserved field. It is registered in the SA attribute table
(layers.sa.register_sa_record) and nothing of the package is edited; then a GetTableResp of
it, an RMPP answer of two segments over RoCEv2, is decoded by the Scapy engine, the fast path
in Python, the fast path's C decoder and the tshark engine with a plugin generated from the
layers as they stand. All four give the same records, and those records are the values the
toy records were built with (the oracle is the test's own struct packing of them).
"""

from __future__ import annotations

import ipaddress
import struct

import pytest
from scapy.fields import BitEnumField, BitField, ByteEnumField, XIntField, XShortField
from scapy.packet import Packet

from ibpath_scapy.capture.encap import rocev2_frame
from ibpath_scapy.capture.pcapio import PcapWriter
from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast
from ibpath_scapy.engines.fast import decoder as fast_decoder
from ibpath_scapy.engines.scapy.decode import Decoder, decode_file
from ibpath_scapy.engines.tshark import tree as tshark_tree
from ibpath_scapy.facts import public
from ibpath_scapy.facts.rmpp import segment
from ibpath_scapy.layers import MAD, RMPP, SAHeader
from ibpath_scapy.layers.sa import (
    GIDField,
    SA_RECORD_CLASSES,
    register_sa_record,
    unregister_sa_record,
)
from ibpath_scapy.native import extension

from tshark_util import needs_tshark, tshark_env

TOY_ATTRIBUTE = 0x00F7  # no SA attribute of IBA 1.4 has this ID
STATES = {0: "down", 1: "init", 2: "armed", 4: "active"}


class ToyRecord(Packet):
    """A toy SA record: a GID, a 4-bit level, a 4-bit enum, a state, a key, reserved."""

    name = "ToyRecord"
    fields_desc = [
        GIDField("port_gid", "::"),
        BitField("level", 0, 4),
        BitEnumField("speed", 0, 4, {1: "SDR", 2: "DDR", 4: "QDR"}),
        ByteEnumField("state", 0, STATES),
        XShortField("toy_key", 0),
        XIntField("reserved_160", 0),
    ]

    def extract_padding(self, s):
        return b"", s


def packed(gid: str, level: int, speed: int, state: int, key: int, reserved: int = 0) -> bytes:
    """One toy record as the test declares its wire format: struct, not the layer."""
    return struct.pack(">16sBBHI", ipaddress.IPv6Address(gid).packed, level << 4 | speed,
                       state, key, reserved)


RECORDS = [(f"fe80::{k + 1:x}", k % 16, (1, 2, 4)[k % 3], (0, 1, 2, 4)[k % 4], 0x1000 + k)
           for k in range(11)]  # 264 bytes of records: two RMPP segments (200 data bytes each)


@pytest.fixture
def toy():
    assert len(ToyRecord()) == 24
    register_sa_record(TOY_ATTRIBUTE, ToyRecord)
    try:
        yield ToyRecord
    finally:
        unregister_sa_record(TOY_ATTRIBUTE)
        # the tshark engine's cache of plugin fields by layer class: the toy's go with it
        tshark_tree._LAYER_CACHE.pop(ToyRecord, None)
    assert TOY_ATTRIBUTE not in SA_RECORD_CLASSES


def capture(path, reserved_on: int | None = None) -> None:
    data = b"".join(packed(*r, reserved=0xAB if k == reserved_on else 0)
                    for k, r in enumerate(RECORDS))
    hdr = bytes(MAD(method=0x92, attribute_id=TOY_ATTRIBUTE, transaction_id=0x77)
                / RMPP(rmpp_version=1, rmpp_type=1)
                / SAHeader(attribute_offset=3, component_mask=0))[:56]
    segments = segment(hdr + data)
    assert len(segments) == 2
    query = MAD(method=0x12, attribute_id=TOY_ATTRIBUTE, transaction_id=0x77) / RMPP() \
        / SAHeader(component_mask=0) / packed(*RECORDS[0])
    w = PcapWriter(str(path), 1)  # Ethernet
    w.write(bytes(rocev2_frame(bytes(query), src="10.0.0.1", dst="10.0.0.2")), 1.0)
    for k, seg in enumerate(segments):
        w.write(bytes(rocev2_frame(seg, src="10.0.0.2", dst="10.0.0.1")), 2.0 + k)
    w.close()


def expected() -> list[dict]:
    return [{"port_gid": g, "level": lv, "speed": sp, "state": st, "toy_key": key}
            for g, lv, sp, st, key in RECORDS]


def _engine_records(records) -> list[dict]:
    return [public(r) for r in records]


def _answer(recs: list[dict]) -> dict:
    done = [r for r in recs if r.get("sa_records") and r.get("reassembled_from")]
    assert len(done) == 1, recs
    return done[0]


def test_scapy_and_fast_python_and_c_read_the_toy_attribute(toy, tmp_path, monkeypatch):
    path = tmp_path / "toy.pcap"
    capture(path)
    scapy = _engine_records(decode_file(str(path), Decoder()))
    answer = _answer(scapy)
    assert answer["sa_records"] == expected()
    assert answer["mad"]["attribute_name"] == "ToyRecord"
    assert "path_records" not in answer
    # the query: one record, the first
    assert scapy[0]["sa_records"] == expected()[:1]

    python = FastDecoder()
    python._native = None
    fast_py = _engine_records(decode_file_fast(str(path), python))
    assert fast_py == scapy
    if extension() is None:
        pytest.skip("the C extension is not built here")
    native = FastDecoder()
    assert native._native is not None
    fast_c = _engine_records(decode_file_fast(str(path), native))
    assert fast_c == scapy
    # the C decoder read the SA frames itself: their route is the toy's record plan
    plan = native.c.plan_index[TOY_ATTRIBUTE]
    assert fast_decoder.ROUTE_SA_RECORDS + plan in native.tables.routes.values()
    assert any(native.tables.records[plan])


def test_reserved_bits_of_a_toy_record_are_reported(toy, tmp_path):
    path = tmp_path / "toy-reserved.pcap"
    capture(path, reserved_on=9)
    for recs in (decode_file(str(path), Decoder()), decode_file_fast(str(path), FastDecoder())):
        answer = _answer(_engine_records(recs))
        assert answer["errors"] == ["reserved ToyRecord bits set in record(s) [9]"]


@needs_tshark
def test_the_generated_plugin_reads_the_toy_attribute(toy, tmp_path, monkeypatch):
    from ibpath_scapy.engines.tshark import tshark_records
    from ibpath_scapy.luagen.plugin import generate_plugin

    plugin = tmp_path / "ibpath.lua"
    plugin.write_text(generate_plugin())
    assert "toyrecord" in plugin.read_text().lower()
    path = tmp_path / "toy.pcap"
    capture(path)
    scapy = _engine_records(decode_file(str(path), Decoder()))
    for k, v in tshark_env().items():  # a HOME and configuration of the test's own
        monkeypatch.setenv(k, v)
    tshark = list(tshark_records(str(path), plugin=plugin, render=True))
    assert _answer(tshark)["sa_records"] == expected()
    assert [r.get("sa_records") for r in tshark] == [r.get("sa_records") for r in scapy]


def test_unregistering_restores_the_table():
    assert TOY_ATTRIBUTE not in SA_RECORD_CLASSES
    before = SAHeader.field_hints["records"]
    register_sa_record(TOY_ATTRIBUTE, ToyRecord)
    unregister_sa_record(TOY_ATTRIBUTE)
    assert repr(SAHeader.field_hints["records"].stride) == repr(before.stride)
    assert MAD(attribute_id=TOY_ATTRIBUTE).sprintf("%MAD.attribute_id%") != "ToyRecord"
