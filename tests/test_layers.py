"""Layer definitions against independent oracles: C-struct packing (struct module), the
kernel's path_rec_table offsets, and reflective checks over every layer."""

import importlib
import inspect
import ipaddress
import pkgutil
import struct

import pytest
from layer_checks import assert_bit_runs_close
from hypothesis import given, settings, strategies as st
from scapy.fields import FCSField, PacketField, PacketListField, _BitField
from scapy.packet import Packet

from ibpath_scapy import layers
from ibpath_scapy.layers import acm, cm, ib, mad, netlink, pathdata, roce, sa, ucma, umad
from ibpath_scapy.layers.coded import RawCode
from ibpath_scapy.layers.sa import PathRecord, SAHeader, component_fields, component_mask_for

from oracles import IBV_PATH_RECORD

# Linux sa_query.c path_rec_table: (field, offset_words, offset_bits, size_bits).
KERNEL_PATH_REC_TABLE = [
    ("service_id", 0, 0, 64), ("dgid", 2, 0, 128), ("sgid", 6, 0, 128),
    ("dlid", 10, 0, 16), ("slid", 10, 16, 16), ("raw_traffic", 11, 0, 1),
    ("reserved_353", 11, 1, 3), ("flow_label", 11, 4, 20), ("hop_limit", 11, 24, 8),
    ("tclass", 12, 0, 8), ("reversible", 12, 8, 1), ("numb_path", 12, 9, 7),
    ("pkey", 12, 16, 16), ("qos_class", 13, 0, 12), ("sl", 13, 12, 4),
    ("mtu_selector", 13, 16, 2), ("mtu", 13, 18, 6), ("rate_selector", 13, 24, 2),
    ("rate", 13, 26, 6), ("packet_life_time_selector", 14, 0, 2),
    ("packet_life_time", 14, 2, 6), ("preference", 14, 8, 8), ("reserved_464", 14, 16, 48),
]

def _defined_layers() -> list[type]:
    """Every Packet class the modules of ibpath_scapy.layers define (not what they import)."""
    out = []
    for m in pkgutil.iter_modules(layers.__path__):
        mod = importlib.import_module(f"{layers.__name__}.{m.name}")
        out += [obj for name, obj in vars(mod).items()
                if inspect.isclass(obj) and issubclass(obj, Packet)
                and obj.__module__ == mod.__name__ and not name.startswith("_")]
    return out


ALL_LAYERS = _defined_layers()
# Header sizes from the specs and C headers, not from the layers: IBA (MAD 24, RMPP 12,
# PathRecord 64, CM messages 232 of the MAD data, DETH 8, LRH 8), ERF 16 (ERF types doc),
# struct ib_path_rec_data 72 (uapi ib_user_sa.h), struct nlmsghdr 16 (uapi linux/netlink.h),
# struct rdma_ucm_cmd_hdr 8 (uapi rdma_user_cm.h), struct acm_hdr 16 (librdmacm acm.h),
# struct ib_user_mad 64 with pkey_index (uapi ib_user_mad.h, ABI 5).
SPEC_LEN = {
    mad.MAD: 24, mad.RMPP: 12, sa.PathRecord: 64, roce.DETH: 8, ib.LRH: 8, ib.ERF: 16,
    cm.CMReq: 232, cm.CMRep: 232, cm.CMRtu: 232, cm.CMRej: 232, cm.CMDreq: 232,
    cm.CMDrep: 232, cm.CMMra: 232,
    pathdata.PathRecData: 72, netlink.NLMsgHdr: 16, netlink.RdmaNLMsgHdr: 16,
    ucma.UcmaCmdHdr: 8, acm.AcmHdr: 16, umad.UserMad: 64,
}
# What a build adds beyond the header: the LRH's VCRC trailer; a MAD is padded to 256 bytes.
BUILT_LEN = {ib.LRH: 8 + 2, mad.MAD: mad.MAD_SIZE}


def _width(f) -> int:
    """Bits a fixed-size field takes (a packet field: its packet's built length)."""
    if isinstance(f, _BitField):
        return f.size
    if isinstance(f, PacketField):
        return 8 * len(bytes(f.cls()))
    return f.sz * 8


def _field_bit_layout(cls):
    """(name, bit offset, width) for every field of a fixed-size layer."""
    out, bit = [], 0
    for f in cls.fields_desc:
        out.append((f.name, bit, _width(f)))
        bit += _width(f)
    return out, bit


@pytest.mark.parametrize("cls", [c for c in ALL_LAYERS if c in SPEC_LEN])
def test_layer_has_spec_length_and_byte_aligned_bitfields(cls):
    """The header's fields add up to the spec's size exactly (lists and trailers aside), and
    a default build is exactly that long."""
    fixed = [f for f in cls.fields_desc if not isinstance(f, (PacketListField, FCSField))]
    assert sum(_width(f) for f in fixed) == 8 * SPEC_LEN[cls], [f.name for f in fixed]
    assert len(bytes(cls())) == BUILT_LEN.get(cls, SPEC_LEN[cls])
    assert_bit_runs_close(cls)


def test_every_layers_module_is_in_all_layers():
    """ALL_LAYERS reads every module of ibpath_scapy.layers, the recorder's and netlink's too."""
    mods = {cls.__module__.rsplit(".", 1)[1] for cls in ALL_LAYERS}
    assert {"acm", "cm", "ib", "mad", "netlink", "pathdata", "roce", "sa", "ucma", "umad"} <= mods
    assert {pathdata.PathRecData, pathdata.PathArray, netlink.NLMsgHdr, netlink.RdmaNLMsgHdr,
            netlink.LsResolveRequest, ucma.UcmaCmdHdr, acm.AcmHdr, umad.UserMad} <= set(ALL_LAYERS)


@pytest.mark.parametrize("cls", ALL_LAYERS,
                         ids=lambda c: f"{c.__module__.rsplit('.', 1)[1]}.{c.__name__}")
def test_every_layer_closes_its_bit_runs_and_round_trips(cls):
    """Every layer ALL_LAYERS holds (path data, netlink, ucma, ACM and umad included): its bit
    fields close on byte boundaries, and its default build dissects back to the same bytes."""
    assert_bit_runs_close(cls)
    wire = bytes(cls())
    assert bytes(cls(wire)) == wire


def test_path_record_matches_kernel_path_rec_table():
    layout, total = _field_bit_layout(PathRecord)
    assert total == 512
    got = {name: (bit, width) for name, bit, width in layout}
    for name, words, bits, size in KERNEL_PATH_REC_TABLE:
        assert got[name] == (words * 32 + bits, size), name


gid = st.binary(min_size=16, max_size=16)


@settings(max_examples=300, deadline=None)
@given(st.tuples(
    st.integers(0, 2**64 - 1), gid, gid, st.integers(0, 0xFFFF), st.integers(0, 0xFFFF),
    st.integers(0, 1), st.integers(0, 2**20 - 1), st.integers(0, 255), st.integers(0, 255),
    st.integers(0, 1), st.integers(0, 127), st.integers(0, 0xFFFF), st.integers(0, 0xFFF),
    st.integers(0, 15), st.integers(0, 3), st.integers(0, 63), st.integers(0, 3),
    st.integers(0, 63), st.integers(0, 3), st.integers(0, 63), st.integers(0, 255)))
def test_path_record_against_c_struct_packing(v):
    (sid, dgid, sgid, dlid, slid, raw, flow, hop, tclass, rev, numb, pkey, qos, sl,
     mtu_sel, mtu, rate_sel, rate, plt_sel, plt, pref) = v
    wire = IBV_PATH_RECORD.pack(
        sid, dgid, sgid, dlid, slid, raw << 31 | flow << 8 | hop, tclass, rev << 7 | numb,
        pkey, qos << 4 | sl, mtu_sel << 6 | mtu, rate_sel << 6 | rate, plt_sel << 6 | plt,
        pref, bytes(6))
    built = PathRecord(
        service_id=sid, dgid=str(ipaddress.IPv6Address(dgid)), sgid=str(ipaddress.IPv6Address(sgid)),
        dlid=dlid, slid=slid, raw_traffic=raw, flow_label=flow, hop_limit=hop, tclass=tclass,
        reversible=rev, numb_path=numb, pkey=pkey, qos_class=qos, sl=sl, mtu_selector=mtu_sel,
        mtu=RawCode(mtu), rate_selector=rate_sel, rate=RawCode(rate),
        packet_life_time_selector=plt_sel,
        packet_life_time=plt, preference=pref)
    assert bytes(built) == wire
    d = PathRecord(wire)
    assert (d.service_id, d.dlid, d.slid, d.flow_label, d.hop_limit, d.qos_class, d.sl) == (
        sid, dlid, slid, flow, hop, qos, sl)
    assert ipaddress.IPv6Address(d.dgid).packed == dgid
    assert (d.reversible, d.numb_path, d.mtu, d.rate, d.packet_life_time, d.preference) == (
        rev, numb, mtu, rate, plt, pref)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=256, max_size=256))
def test_every_mad_byte_string_round_trips(raw):
    raw = bytes([1, 3]) + raw[2:]  # an SA MAD with arbitrary content
    assert bytes(mad.MAD(raw)) == raw


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(cm.CM_MESSAGE_CLASSES)), st.binary(min_size=232, max_size=232))
def test_every_cm_message_round_trips(attr, body):
    header = struct.pack("!BBBBHHQHHI", 1, 7, 2, 3, 0, 0, 7, attr, 0, 0)
    pkt = mad.MAD(header + body)
    assert pkt.haslayer(cm.CM_MESSAGE_CLASSES[attr])
    assert bytes(pkt) == header + body


def test_rmpp_byte_26_is_5_bit_resptime_and_3_bit_flags():
    # ib_mad.h ib_get_rmpp_resptime(): rmpp_rtime_flags >> 3; flags: & 0x7.
    r = mad.RMPP(bytes([1, 1, 0xFF, 0]) + bytes(8))
    assert r.r_resp_time == 0x1F and int(r.rmpp_flags) == 7
    r = mad.RMPP(bytes([1, 1, (5 << 3) | 0x3, 0]) + bytes(8))
    assert r.r_resp_time == 5 and int(r.rmpp_flags) == 3
    assert bytes(mad.RMPP(r_resp_time=0x1F, rmpp_flags=7))[2] == 0xFF


def test_component_mask_bits_follow_ib_sa_h():
    # IB_SA_PATH_REC_* in include/rdma/ib_sa.h; IB_SA_COMP_MASK(n) = 1 << n.
    expected = {"dgid": 2, "sgid": 3, "dlid": 4, "slid": 5, "raw_traffic": 6, "flow_label": 8,
                "hop_limit": 9, "tclass": 10, "reversible": 11, "numb_path": 12, "pkey": 13,
                "qos_class": 14, "sl": 15, "mtu_selector": 16, "mtu": 17, "rate_selector": 18,
                "rate": 19, "packet_life_time_selector": 20, "packet_life_time": 21,
                "preference": 22}
    # a value OpenSM reads only with its selector brings the selector's bit, and the converse
    # (osm_sa_path_record.c pr_rcv_get_path_parms; tests/test_opensm_oracle.py asks OpenSM)
    pairs = {"mtu": "mtu_selector", "rate": "rate_selector",
             "packet_life_time": "packet_life_time_selector"}
    partner = {**pairs, **{s: v for v, s in pairs.items()}}
    for name, bit in expected.items():
        want = 1 << bit | (1 << expected[partner[name]] if name in partner else 0)
        assert component_mask_for(PathRecord(**{name: PathRecord().getfieldval(name)})) == want
    assert component_mask_for(PathRecord(service_id=1)) == 0x3
    assert component_fields(0x1) == []  # half a ServiceID selects nothing


def test_kernel_route_query_mask_is_0x380f():
    # cma_query_ib_route(): DGID|SGID|PKEY|NUMB_PATH|REVERSIBLE|SERVICE_ID.
    q = SAHeader(records=[PathRecord(dgid="fe80::2", sgid="fe80::1", pkey=0xFFFF, numb_path=1,
                                     reversible=1, service_id=0x0106000000001234)])
    built = mad.MAD() / mad.RMPP() / q
    wire = bytes(built)
    assert struct.unpack("!Q", wire[48:56])[0] == 0x380F
    assert len(wire) == 256
    assert struct.unpack("!H", wire[44:46])[0] == 0  # requests carry AttributeOffset 0


def test_response_attribute_offset_defaults_to_record_words():
    wire = bytes(mad.MAD(method=0x81) / mad.RMPP() / SAHeader(records=[PathRecord()]))
    assert struct.unpack("!H", wire[44:46])[0] == 8  # OpenSM: ib_get_attr_offset(64) = 8


def test_get_table_resp_records_at_attribute_offset_stride():
    recs = [PathRecord(dlid=i) for i in range(1, 4)]
    wire = bytes(mad.MAD(method=0x92) / mad.RMPP(rmpp_version=1, rmpp_type=1, rmpp_flags=7,
                                                  segment_number=1, payload_length=20 + 192)
                 / SAHeader(records=recs))
    for i in range(3):
        assert struct.unpack("!H", wire[56 + 64 * i + 40:56 + 64 * i + 42])[0] == i + 1
    back = mad.MAD(wire)
    assert [r.dlid for r in back[SAHeader].records] == [1, 2, 3]


def test_gid_and_packet_life_time_display():
    r = PathRecord(dgid="fe80::2:c903:0:1", packet_life_time=18)
    assert r.dgid == "fe80::2:c903:0:1"
    assert "1.074 s" in r.get_field("packet_life_time").i2repr(r, 18)


def test_every_layer_exported():
    """`from ibpath_scapy import *` gives every layer (interfaces.md), sub-structures too."""
    assert len(ALL_LAYERS) > 50
    missing = [cls.__name__ for cls in ALL_LAYERS if cls.__name__ not in layers.__all__]
    assert not missing, missing
