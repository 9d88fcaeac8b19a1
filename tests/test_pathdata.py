"""The flagged path array (struct ib_path_rec_data[]): layers against bytes packed by hand from the
C struct layout, crafting helpers for the seed's layouts, and the exported-PDU capture form.

Oracle: include/uapi/rdma/ib_user_sa.h `struct ib_path_rec_data { __u32 flags; __u32 reserved;
__u32 path_rec[16]; }` with flags/reserved in host order (little-endian here) and path_rec in SA
wire format, packed below with `struct` exactly as rdma-core's `struct ibv_path_record`
(`!Q16s16sHHIBBHHBBBB6s`, wire-formats.md §3).
"""

import ipaddress
import struct

import pytest
from hypothesis import given, settings, strategies as st

from ibpath_scapy.layers.ib import EXPORTED_PDU_DISSECTORS, ExportedPDU
from ibpath_scapy.layers.pathdata import (
    BLOB_DISSECTOR,
    PathArray,
    PathRecData,
    apm_blob,
    blob_pdu,
    flag_names,
    flags_text,
    forward_return_gmp_blob,
    parse_set_option_comment,
    set_option_comment,
    single_gmp_blob,
    six_path_blob,
)
from ibpath_scapy.layers.coded import RawCode
from ibpath_scapy.layers.sa import PathRecord
from ibpath_scapy.capture.pcapio import PcapNgWriter


from oracles import IBV_PATH_RECORD  # noqa: E402
u = st.integers


def pack_record(flags, reserved, *, service_id=0, dgid=b"\0" * 16, sgid=b"\0" * 16, dlid=0,
                slid=0, raw=0, flow=0, hop=0, tclass=0, rev=0, numb=0, pkey=0xFFFF, qos=0, sl=0,
                mtu_sel=2, mtu=4, rate_sel=2, rate=3, plt_sel=2, plt=18, pref=0) -> bytes:
    """One struct ib_path_rec_data, from the C layout alone."""
    path = IBV_PATH_RECORD.pack(service_id, dgid, sgid, dlid, slid,
                       raw << 31 | flow << 8 | hop, tclass, rev << 7 | numb, pkey,
                       qos << 4 | sl, mtu_sel << 6 | mtu, rate_sel << 6 | rate,
                       plt_sel << 6 | plt, pref, b"\0" * 6)
    assert len(path) == 64
    return struct.pack("<II", flags, reserved) + path


record_kwargs = st.fixed_dictionaries(dict(
    service_id=u(0, 2**64 - 1), dgid=st.binary(min_size=16, max_size=16),
    sgid=st.binary(min_size=16, max_size=16), dlid=u(0, 0xFFFF), slid=u(0, 0xFFFF),
    raw=u(0, 1), flow=u(0, 2**20 - 1), hop=u(0, 255), tclass=u(0, 255), rev=u(0, 1),
    numb=u(0, 127), pkey=u(0, 0xFFFF), qos=u(0, 0xFFF), sl=u(0, 15), mtu_sel=u(0, 3),
    mtu=u(0, 63), rate_sel=u(0, 3), rate=u(0, 63), plt_sel=u(0, 3), plt=u(0, 63),
    pref=u(0, 255)))


def check_record(rec: PathRecData, flags, reserved, kw) -> None:
    assert int(rec.flags) == flags
    assert rec.reserved == reserved
    p = rec.path_record
    gid = lambda b: str(ipaddress.IPv6Address(b))  # noqa: E731
    assert (p.service_id, p.dgid, p.sgid, p.dlid, p.slid) == (
        kw["service_id"], gid(kw["dgid"]), gid(kw["sgid"]), kw["dlid"], kw["slid"])
    assert (p.raw_traffic, p.flow_label, p.hop_limit, p.tclass) == (
        kw["raw"], kw["flow"], kw["hop"], kw["tclass"])
    assert (p.reversible, p.numb_path, p.pkey, p.qos_class, p.sl) == (
        kw["rev"], kw["numb"], kw["pkey"], kw["qos"], kw["sl"])
    assert (p.mtu_selector, p.mtu, p.rate_selector, p.rate) == (
        kw["mtu_sel"], kw["mtu"], kw["rate_sel"], kw["rate"])
    assert (p.packet_life_time_selector, p.packet_life_time, p.preference) == (
        kw["plt_sel"], kw["plt"], kw["pref"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(u(0, 2**32 - 1), u(0, 2**32 - 1), record_kwargs), min_size=0, max_size=5),
       st.binary(max_size=71))
def test_hand_packed_array_decodes_to_the_same_fields(records, tail):
    """Every field of every record, and bytes past the last whole record kept aside."""
    blob = b"".join(pack_record(f, r, **kw) for f, r, kw in records) + tail
    arr = PathArray(blob)
    assert len(arr.records) == len(records)
    for rec, (flags, reserved, kw) in zip(arr.records, records):
        check_record(rec, flags, reserved, kw)
    assert arr.trailing == tail
    assert bytes(arr) == blob  # and it rebuilds byte for byte


@settings(max_examples=40, deadline=None)
@given(u(0, 0xFF), record_kwargs)
def test_layer_builds_the_c_layout(flags, kw):
    p = PathRecord(service_id=kw["service_id"], dgid=str(ipaddress.IPv6Address(kw["dgid"])),
                   sgid=str(ipaddress.IPv6Address(kw["sgid"])), dlid=kw["dlid"],
                   slid=kw["slid"], raw_traffic=kw["raw"], flow_label=kw["flow"],
                   hop_limit=kw["hop"], tclass=kw["tclass"], reversible=kw["rev"],
                   numb_path=kw["numb"], pkey=kw["pkey"], qos_class=kw["qos"], sl=kw["sl"],
                   mtu_selector=kw["mtu_sel"], mtu=RawCode(kw["mtu"]),
                   rate_selector=kw["rate_sel"], rate=RawCode(kw["rate"]),
                   packet_life_time_selector=kw["plt_sel"],
                   packet_life_time=kw["plt"], preference=kw["pref"])
    assert bytes(PathRecData(flags=flags, reserved=7, path_record=p)) == pack_record(flags, 7, **kw)


def test_record_is_72_bytes():
    """sizeof(struct ib_path_rec_data) = 72: ucma_set_ib_path's granularity."""
    assert len(bytes(PathRecData())) == 72
    assert len(bytes(PathArray())) == 0
    assert bytes(PathRecData())[:8] == struct.pack("<II", 0x2B, 0)  # the default is ibacm's


def test_flags_are_host_order_and_named():
    rec = PathRecData(pack_record(0x2B, 0))
    assert int(rec.flags) == 0x2B
    assert bytes(rec)[:4] == b"\x2b\x00\x00\x00"  # host order, not network order
    assert "GMP|PRIMARY|BIDIRECTIONAL (0x2b)" in repr(rec)
    assert flags_text(0x28) == "BIDIRECTIONAL"
    assert flags_text(0x0A) == "PRIMARY|OUTBOUND"
    assert flags_text(0x08) == "OUTBOUND"  # one half of BIDIRECTIONAL stays itself
    assert flags_text(0x140) == "0x140"
    assert flag_names(0x2B) == ["GMP", "PRIMARY", "OUTBOUND", "INBOUND_REVERSE"]
    assert flag_names(0x12) == ["PRIMARY", "INBOUND"]


def _flags(arr):
    return [int(r.flags) for r in PathArray(bytes(arr)).records]


def test_crafting_helpers_give_the_seed_layouts():
    a, b, c = (PathRecord(sgid="fe80::1", dgid="fe80::2", slid=1, dlid=d, reversible=1)
               for d in (2, 3, 4))
    assert _flags(single_gmp_blob(a)) == [0x2B]  # ibacm, ucma_query_path
    assert _flags(forward_return_gmp_blob(a, b, c)) == [0x0A, 0x12, 0x2B]
    assert _flags(forward_return_gmp_blob(a, b, c, return_reversed=True)) == [0x0A, 0x22, 0x2B]
    assert _flags(apm_blob(a, b)) == [0x2B, 0x2C]
    assert _flags(six_path_blob(a, b, c, a, b, c)) == [0x03, 0x0A, 0x12, 0x05, 0x0C, 0x14, 0x2B]
    assert _flags(six_path_blob(a, b, c, a, b, c, compat=False))[-1] == 0x14
    blob = bytes(forward_return_gmp_blob(a, b, c))
    assert len(blob) == 3 * 72
    assert [PathArray(blob).records[i].path_record.dlid for i in range(3)] == [2, 3, 4]


def test_plausible_blob_rule():
    assert PathArray.plausible(pack_record(0x2B, 0))
    assert PathArray.plausible(pack_record(0, 0)[:4])
    assert PathArray.plausible(pack_record(0xFF, 0) + b"xx")
    assert not PathArray.plausible(struct.pack("<I", 0x100))
    assert not PathArray.plausible(b"root:x:0:0:root:/root:/bin/bash\n")
    assert not PathArray.plausible(b"\x2b\x00\x00")  # no whole flags word
    assert not PathArray.plausible(b"\x7fELF\x02\x01\x01\x00")


def test_set_option_comment():
    assert set_option_comment(0) == "rdma_set_option=0"
    assert set_option_comment(-22) == "rdma_set_option=-EINVAL"
    assert parse_set_option_comment("rdma_set_option=-EINVAL") == "-EINVAL"
    assert parse_set_option_comment("other\nrdma_set_option = 0") == "0"
    assert parse_set_option_comment("nothing") is None
    assert parse_set_option_comment(None) is None


def test_blob_pdu_bytes_follow_wireshark_exported_pdu_tlvs():
    """exported_pdu_tlvs.h: tag 12 (dissector name) with the name padded to 4 bytes, tag 0 (end),
    all big-endian, then the optval bytes untouched."""
    blob = bytes(single_gmp_blob(PathRecord(dlid=5)))
    raw = bytes(blob_pdu(blob))
    name = BLOB_DISSECTOR.encode()
    padded = name + b"\0" * (-len(name) % 4)
    assert raw[:4] == struct.pack("!HH", 12, len(padded))
    assert raw[4:4 + len(padded)] == padded
    assert raw[4 + len(padded):8 + len(padded)] == struct.pack("!HH", 0, 0)
    assert raw[8 + len(padded):] == blob
    assert EXPORTED_PDU_DISSECTORS[BLOB_DISSECTOR] is PathArray


def test_exported_pdu_dissects_to_the_blob():
    blob = bytes(forward_return_gmp_blob(PathRecord(dlid=1), PathRecord(dlid=2), PathRecord(dlid=3)))
    pkt = ExportedPDU(bytes(blob_pdu(blob)))
    assert pkt.haslayer(PathArray)
    assert [int(r.flags) for r in pkt[PathArray].records] == [0x0A, 0x12, 0x2B]


def test_tshark_reads_the_blob_frame(tmp_path):
    """Wireshark's exported_pdu dissector finds the name and hands over exactly the optval."""
    blob = bytes(apm_blob(PathRecord(dlid=1), PathRecord(dlid=2)))
    cap = tmp_path / "blob.pcapng"
    with PcapNgWriter(str(cap)) as w:
        w.write(bytes(blob_pdu(blob)), 252, 1.5, comment=set_option_comment(0))
    from test_netlink import tshark_fields  # the isolated tshark runner with its checks

    rows = tshark_fields(cap, ["exported_pdu.prot_name", "exported_pdu.exported_pdu",
                               "frame.comment"])
    assert rows[1]["exported_pdu.prot_name"] == [BLOB_DISSECTOR]
    assert bytes.fromhex(rows[1]["exported_pdu.exported_pdu"][0].replace(":", "")) == blob
    assert rows[1]["frame.comment"] == ["rdma_set_option=0"]
