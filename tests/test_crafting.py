"""Crafting MADs the way Scapy users expect (issue 18): coded fields, summaries, computed RMPP
PayloadLength, the frame builders and the README's library snippet.

Oracles, none of them the layers' own tables:
* the IBA coding and naming tables of ../shared/reference/wire-formats.md, parsed here (§1
  Methods, SA and CM attribute IDs; §2 RMPP segmentation rules and worked examples; §3
  Encodings: MTU, Rate, PacketLifeTime); the tests that need them skip when ../shared is absent;
* the kernel's RMPP sender as the OpenSM capture recorded it (captures/opensm/, segments the
  Linux kernel cut and numbered), read with plain struct;
* the README's own snippet, executed as written.
"""

from __future__ import annotations

import ast
import re
import struct
import subprocess
import sys

import pytest
from scapy.packet import Packet, Raw

from ibpath_scapy.facts import rmpp
from ibpath_scapy.craft import CaptureBuilder
from ibpath_scapy.capture.encap import erf_record, exported_pdu, native_ib_frame, rocev2_frame
from ibpath_scapy.layers import MAD, RMPP, CMReq, PathRecord, SAHeader
from ibpath_scapy.layers.cm import CMMra, CMRep
from ibpath_scapy.layers.coded import RawCode
from ibpath_scapy.layers.mad import ATTRIBUTES_BY_CLASS, METHODS

from conftest import CAPTURES, ROOT, SHARED
from tshark_util import tshark_fields, tshark_path

WIRE_FORMATS = SHARED / "reference" / "wire-formats.md"


# -- wire-formats.md, parsed -----------------------------------------------------------------

@pytest.fixture(scope="module")
def wf() -> str:
    if not WIRE_FORMATS.is_file():
        pytest.skip(f"{WIRE_FORMATS} not found: the IBA tables come from it")
    return WIRE_FORMATS.read_text()


def _section(text: str, start: str, end: str) -> str:
    i = text.index(start)
    return text[i:text.index(end, i + len(start))]


def wf_mtu(text: str) -> dict[int, int]:
    """§3 Encodings: 'MTU (...): 1=256, 2=512, ...' → {code: bytes}."""
    line = next(x for x in text.splitlines() if x.startswith("MTU ("))
    return {int(c): int(b) for c, b in re.findall(r"(\d+)=(\d+)", line.split(":", 1)[1])}


def wf_rate(text: str) -> dict[int, float | None]:
    """§3 Encodings, the Rate table: {code: Gb/s}, None for 'port current', reserved left out."""
    table = _section(text, "Rate (OSM", "Selectors (2 bits")
    out: dict[int, float | None] = {}
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if not row.startswith("|") or not cells[0].isdigit():
            continue
        for val, gbps in zip(cells[0::2], cells[1::2]):
            if not val.isdigit() or "reserved" in gbps:
                continue
            out[int(val)] = None if gbps.startswith("port current") else float(gbps.split()[0])
    return out


def wf_plt_unit(text: str) -> float:
    """§3: 'PacketLifeTime: 6-bit exponent, time = 4.096 µs × 2^PLT' → 4.096e-6."""
    m = re.search(r"PacketLifeTime: 6-bit exponent, time = ([\d.]+) µs × 2\^PLT", text)
    return float(m.group(1)) * 1e-6


def wf_methods(text: str) -> dict[int, str]:
    table = _section(text, "### Methods", "Response bit mask")
    return {int(v, 16): name for name, v in re.findall(r"\|\s*(\w+)\s*\|\s*(0x[0-9A-Fa-f]{2})\b", table)}


def wf_attributes(text: str, heading: str) -> dict[int, str]:
    line = _section(text, heading, "\n\n").splitlines()[1]
    return {int(v, 16): name for name, v in re.findall(r"(\w+) (0x[0-9A-Fa-f]{4})", line)}


def wf_worked_examples(text: str) -> list[tuple[int, ...]]:
    """§2's table: (records, data bytes, segments, pad, PayloadLength seg1, PayloadLength last)."""
    table = _section(text, "Worked examples", "Records cross segment")
    return [tuple(int(c) for c in row.strip("|").split("|"))
            for row in table.splitlines() if re.match(r"\|\s*\d", row)]


# The wire-formats.md list shortens six SA attribute names (kernel ib_sa.h style); the layers
# use the full IBA names (IBA Vol1 §15.2.5, Table 195 "Subnet Administration attributes").
IBA_LONG_NAMES = {"SL2VL": "SLtoVLMappingTableRecord", "LFT": "LinearForwardingTableRecord",
                  "RFT": "RandomForwardingTableRecord", "MFT": "MulticastForwardingTableRecord",
                  "LinkSpeedWidthPairs": "LinkSpeedWidthPairsTableRecord",
                  "VLArb": "VLArbitrationTableRecord"}


# -- coded fields ---------------------------------------------------------------------------------

def _repr(pkt, name) -> str:
    return pkt.get_field(name).i2repr(pkt, pkt.getfieldval(name))


def test_every_mtu_in_bytes_maps_to_its_code_and_back(wf):
    table = wf_mtu(wf)
    assert table == {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
    for code, nbytes in table.items():
        for given in (nbytes, str(nbytes), f"IB_MTU_{nbytes}", code):
            p = PathRecord(mtu=given)
            assert p.mtu == code, given
            back = PathRecord(bytes(p))
            assert bytes(p)[54] & 0x3F == code and back.mtu == code
            assert _repr(back, "mtu") == f"{nbytes} ({code})"
            assert PathRecord(mtu=_repr(back, "mtu").split()[0]).mtu == code  # shown → code
        req = CMReq(path_packet_payload_mtu=nbytes)
        assert CMReq(bytes(req)).path_packet_payload_mtu == code


def test_every_rate_in_gbps_maps_to_its_code_and_back(wf):
    table = wf_rate(wf)
    assert len(table) == 25 and table[0] is None and table[3] == 10 and table[25] == 1600
    for code, gbps in table.items():
        text = "port current" if gbps is None else f"{gbps:g} Gb/s"
        givens = [text, code]
        if gbps is not None:
            givens += [f"{gbps:g}Gb/s", f"{gbps:g} Gbps", f"{gbps:g}G",
                       f"IB_RATE_{str(gbps).replace('.0', '').replace('.', '_')}_GBPS"]
        for given in givens if gbps is not None else ():  # (0: the CM REQ's only, below)
            p = PathRecord(rate=given)
            assert p.rate == code, given
            back = PathRecord(bytes(p))
            assert bytes(p)[55] & 0x3F == code
            shown = _repr(back, "rate")
            assert shown == f"{text} ({code})"
            assert PathRecord(rate=shown.rsplit(" (", 1)[0]).rate == code  # shown → code
        req = CMReq(bytes(CMReq(primary_packet_rate=text)))
        assert req.primary_packet_rate == code
        assert _repr(req, "primary_packet_rate") == f"{text} ({code})"


def test_rate_0_is_port_current_in_a_cm_req_and_reserved_in_a_path_record(wf):
    """wire-formats.md §3 gives rate 0 as the kernel's IB_RATE_PORT_CURRENT (enum ib_rate),
    which the CM REQ's packet rates carry; OpenSM's PathRecord rates (IB_PATH_RECORD_RATE_*)
    start at 2, and it answers a query for rate 0 REQ_INVALID (tests/test_opensm_oracle.py).
    On main a PathRecord took rate=0 and showed it as "port current"."""
    row = next(r for r in _section(wf, "Rate (OSM", "Selectors (2 bits").splitlines()
               if r.startswith("| 0 |"))
    assert "port current" in row and "kernel" in row and "OSM" not in row
    assert _repr(CMReq(primary_packet_rate=0), "primary_packet_rate") == "port current (0)"
    assert CMReq(primary_packet_rate="IB_RATE_PORT_CURRENT").primary_packet_rate == 0
    reserved = PathRecord(rate=RawCode(0))
    assert _repr(reserved, "rate") == "Unknown (0)"  # as the other reserved code, 1
    assert _repr(PathRecord(rate=RawCode(1)), "rate") == "Unknown (1)"
    assert "port current" not in reserved.show(dump=True) + reserved.summary()
    for given in (0, "port current", "IB_RATE_PORT_CURRENT"):
        with pytest.raises(ValueError, match=r"^rate: .* give a rate code \(2-25\)"):
            PathRecord(rate=given)


def test_an_integer_rate_is_the_code_never_gbps(wf):
    """The documented rule for the ambiguity: rate=10 is code 10 (120 Gb/s)."""
    table = wf_rate(wf)
    assert PathRecord(rate=10).rate == 10 and table[10] == 120
    assert PathRecord(rate="10 Gb/s").rate == 3 and table[3] == 10
    with pytest.raises(ValueError, match=r"rate: 40 .*rate='40 Gb/s', code 7"):
        PathRecord(rate=40)  # 40 is no rate code; the message names the one meant


def test_every_packet_life_time_maps_to_its_code_and_back(wf):
    unit = wf_plt_unit(wf)
    for code in range(64):
        t = unit * 2 ** code
        p = PathRecord(packet_life_time=code)
        shown = _repr(PathRecord(bytes(p)), "packet_life_time")
        text, paren = shown.rsplit(" (", 1)
        assert paren == f"{code})"
        assert PathRecord(packet_life_time=text).packet_life_time == code  # shown → code
        for scale, unit_name in ((1, "s"), (1e3, "ms"), (1e6, "µs"), (1e6, "us"), (1e9, "ns")):
            given = f"{t * scale!r} {unit_name}"
            assert PathRecord(packet_life_time=given).packet_life_time == code, given
        assert bytes(p)[56] & 0x3F == code
    # the same exponent in the CM messages' timeouts (5 bits)
    assert CMReq(bytes(CMReq(primary_local_ack_timeout="2.147 s"))).primary_local_ack_timeout == 19
    assert CMRep(target_ack_delay="4.096 µs").target_ack_delay == 0
    assert CMMra(service_timeout=31).service_timeout == 31


@pytest.mark.parametrize("field, value", [
    ("mtu", 0), ("mtu", 6), ("mtu", 63), ("mtu", 64), ("mtu", -1), ("mtu", 1500), ("mtu", 8192),
    ("mtu", "9000"), ("mtu", "jumbo"), ("mtu", 2048.0), ("mtu", True), ("mtu", "IB_MTU_8192"),
    ("rate", 0), ("rate", 1), ("rate", 26), ("rate", 40), ("rate", 63), ("rate", 64), ("rate", 100),
    ("rate", -1), ("rate", "3 Gb/s"), ("rate", "10 Mb/s"), ("rate", "fast"), ("rate", 2.5),
    ("packet_life_time", 64), ("packet_life_time", -1), ("packet_life_time", "1 s"),
    ("packet_life_time", "0 s"), ("packet_life_time", "3 ms"), ("packet_life_time", "18 s"),
    ("packet_life_time", "1e30 s"),
])
def test_out_of_range_values_raise_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field}: .*not accepted; give .*RawCode"):
        PathRecord(**{field: value})
    p = PathRecord()
    with pytest.raises(ValueError, match=rf"^{field}: "):
        setattr(p, field, value)  # assignment too: never masked or changed silently


@pytest.mark.parametrize("cls, field, width", [
    (CMReq, "path_packet_payload_mtu", 4), (CMReq, "primary_packet_rate", 6),
    (CMReq, "alternate_local_ack_timeout", 5), (CMReq, "remote_cm_response_timeout", 5),
])
def test_cm_coded_fields_check_too(cls, field, width):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        cls(**{field: 1 << width})
    with pytest.raises(ValueError, match=rf"^{field}: RawCode\({1 << width}\) does not fit"):
        cls(**{field: RawCode(1 << width)})
    top = RawCode((1 << width) - 1)
    assert getattr(cls(bytes(cls(**{field: top}))), field) == top


def test_raw_codes_round_trip():
    """RawCode writes any code of the field's width, defined or not, byte for byte."""
    for code in range(64):
        p = PathRecord(mtu=RawCode(code), rate=RawCode(code), packet_life_time=RawCode(code),
                       mtu_selector=1, rate_selector=0, packet_life_time_selector=3)
        wire = bytes(p)
        assert wire[54:57] == bytes([0x40 | code, code, 0xC0 | code])
        back = PathRecord(wire)
        assert (back.mtu, back.rate, back.packet_life_time) == (code, code, code)
        assert bytes(back) == wire
    assert _repr(PathRecord(mtu=RawCode(7)), "mtu") == "Unknown (7)"  # as Wireshark says
    for bad in (64, -1):
        with pytest.raises(ValueError, match="does not fit in 6 bits"):
            PathRecord(mtu=RawCode(bad))


def wf_selectors(text: str) -> dict[str, dict[int, str]]:
    """§3: 'Selectors (...): 0 = greater than, 1 = less than, 2 = exactly, 3 = "best": largest
    available for MTU/Rate, smallest available for PacketLifeTime.' → names per selector field."""
    line = next(x for x in text.splitlines() if x.startswith("Selectors (2 bits"))
    base = {int(c): n for c, n in re.findall(r"(\d) = (greater than|less than|exactly)", line)}
    best = re.search(r'3 = "best": (largest available) for MTU/Rate, (smallest available) for '
                     r"PacketLifeTime", line)
    return {"mtu_selector": {**base, 3: best.group(1)}, "rate_selector": {**base, 3: best.group(1)},
            "packet_life_time_selector": {**base, 3: best.group(2)}}


def wf_component_bits(text: str) -> dict[str, int]:
    """§3's PathRecord table: field name (IBA spelling) → its ComponentMask bit."""
    table = _section(text, "## 3. PathRecord", "Python `struct` view")
    out = {}
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) == 7 and re.fullmatch(r"\d+", cells[6]):
            out[cells[0]] = int(cells[6])
    return out


@pytest.mark.parametrize("field", ["mtu_selector", "rate_selector", "packet_life_time_selector"])
def test_selectors_take_their_names_and_codes(wf, field):
    """Each selector takes its code or its name (§3), shows the name; anything else is a
    ValueError naming the field and what it takes. On main, mtu_selector="exact" raised a
    bare KeyError and "largest available" was no name."""
    names = wf_selectors(wf)[field]
    for code, name in names.items():
        for given in (code, name, str(code)):
            p = PathRecord(**{field: given})
            assert getattr(p, field) == code, given
        assert _repr(PathRecord(bytes(PathRecord(**{field: name}))), field) == f"{name} ({code})"
    other = "largest available" if names[3] == "smallest available" else "smallest available"
    for bad in ("exact", "best", other, 4, -1, 2.0, True):
        with pytest.raises(ValueError, match=rf"^{field}: .*not accepted; give a selector code "
                                             rf"0-3 or its name: 'greater than' \(0\), 'less "
                                             rf"than' \(1\), 'exactly' \(2\), '{names[3]}' \(3\)"):
            PathRecord(**{field: bad})


def test_a_query_value_brings_its_selector(wf):
    """MTU, rate or PacketLifeTime set on a query record sets its selector's ComponentMask bit
    too (OpenSM reads neither alone: tests/test_opensm_oracle.py asks it), with the selector
    field's value, "exactly" unless set; a selector set alone brings its value's bit. The bits
    are §3's. On main PathRecord(mtu=4096) gave DGID|SGID|MTU, 0x2000c."""
    bits = wf_component_bits(wf)
    pairs = {"mtu": ("MTU", "MTUSelector", 54), "rate": ("Rate", "RateSelector", 55),
             "packet_life_time": ("PacketLifeTime", "PacketLifeTimeSelector", 56)}
    gids = 1 << bits["DGID"] | 1 << bits["SGID"]
    for field, given in (("mtu", 4096), ("rate", "100 Gb/s"), ("packet_life_time", "1.074 s")):
        value, selector, byte = pairs[field]
        want = gids | 1 << bits[value] | 1 << bits[selector]
        for rec, sel in ((PathRecord(sgid="fe80::1", dgid="fe80::2", **{field: given}), 2),
                         (PathRecord(sgid="fe80::1", dgid="fe80::2", **{field: given,
                                     f"{field}_selector": "less than"}), 1),
                         (PathRecord(sgid="fe80::1", dgid="fe80::2",
                                     **{f"{field}_selector": 3}), 3)):
            q = MAD(method=0x01) / RMPP() / SAHeader(records=[rec])
            wire = bytes(q)
            assert struct.unpack_from("!Q", wire, 48)[0] == want, (field, sel)
            assert wire[56 + byte] >> 6 == sel
            assert f"comp_mask=0x{want:x} (computed)" in q.summary()
    # an explicit ComponentMask is kept, half a pair included (SAQ-SELECTOR-MISSING's query)
    q = MAD(method=0x01) / RMPP() / SAHeader(component_mask=gids | 1 << bits["MTU"],
                                             records=[PathRecord(mtu=4096)])
    assert struct.unpack_from("!Q", bytes(q), 48)[0] == 0x2000C


@pytest.mark.parametrize("pkt, name", [
    (lambda: PathRecord(sl=20), "PathRecord.sl"), (lambda: PathRecord(numb_path=128), "PathRecord.numb_path"),
    (lambda: PathRecord(flow_label=1 << 20), "PathRecord.flow_label"),
    (lambda: CMReq(primary_sl=16), "CMReq.primary_sl"),
    (lambda: RMPP(r_resp_time=32), "RMPP.r_resp_time"),
])
def test_other_bit_fields_refuse_values_wider_than_themselves(pkt, name):
    """Scapy would mask these silently (SL 20 on the wire as 4); the build says so instead."""
    with pytest.raises(ValueError, match=rf"^{re.escape(name)}: \d+ does not fit in \d+ bits"):
        bytes(pkt())


# -- summaries ------------------------------------------------------------------------------------

def _mad(mgmt_class: int, method: int, attr: int):
    if mgmt_class == 0x03:
        return MAD(mgmt_class=mgmt_class, method=method, attribute_id=attr) / RMPP() / SAHeader()
    return MAD(mgmt_class=mgmt_class, method=method, attribute_id=attr) / Raw(bytes(232))


def test_summaries_name_every_method_and_attribute(wf):
    """Every method × attribute pair of every class the layers know, built and dissected,
    summarises as Method(Attribute) with wire-formats.md's names (§1)."""
    methods = wf_methods(wf)
    attrs = {0x03: wf_attributes(wf, "### SA attribute IDs"),
             0x07: wf_attributes(wf, "### CM attribute IDs")}
    assert set(METHODS) == set(methods)
    for cls, known in ATTRIBUTES_BY_CLASS.items():
        if cls in attrs:
            assert set(known) == set(attrs[cls]), f"class 0x{cls:02x}"
        for method in METHODS:
            for attr, name in known.items():
                # wire-formats.md has no SMP attribute table: those keep the layers' names
                want = attrs.get(cls, {}).get(attr, name)
                want = IBA_LONG_NAMES.get(want, want)
                title = f"{methods[method]}({want})"
                built = _mad(cls, method, attr)
                for pkt in (built, MAD(bytes(built))):
                    assert title in pkt.summary(), (hex(cls), hex(method), hex(attr), pkt.summary())


def test_sa_summary_counts_records_and_shows_the_computed_mask():
    recs = [PathRecord(dlid=5 + i) for i in range(4)]
    table = MAD(method=0x92) / RMPP(rmpp_version=1, rmpp_type=1, rmpp_flags=7) / SAHeader(records=recs)
    assert table.summary() == "MAD / RMPP / SA GetTableResp(PathRecord) 4 records"
    assert MAD(bytes(table)).summary().startswith("MAD / RMPP / SA GetTableResp(PathRecord) 4 records")
    q = MAD(method=0x01) / RMPP() / SAHeader(records=[PathRecord(
        sgid="fe80::1", dgid="fe80::2", pkey=0xFFFF, numb_path=1, reversible=1, service_id=1 << 56)])
    assert q.summary() == "MAD / RMPP / SA Get(PathRecord) 1 record comp_mask=0x380f (computed)"
    wire = bytes(q)
    assert struct.unpack_from("!Q", wire, 48)[0] == 0x380F  # what the summary promised
    assert "comp_mask=0x380f" in MAD(wire).summary() and "(computed)" not in MAD(wire).summary()
    shown = q.show(dump=True)
    assert "component_mask= computed: 0x380f (service_id dgid sgid reversible numb_path pkey)" in shown
    assert hex(MAD(wire)[SAHeader].component_mask) == "0x380f"
    seg = MAD(rmpp.segment(bytes(table)[:56 + 256])[1])
    assert seg.summary().startswith("MAD / RMPP / SA GetTableResp(PathRecord) RMPP segment 2")
    assert "PathRecord :: > :: slid 0 dlid 5 pkey 0xffff mtu 2048 rate 10 Gb/s" == recs[0].summary()


# -- RMPP PayloadLength ------------------------------------------------------------------------

def kernel_paylens(n_records: int) -> tuple[int, int, int]:
    """(segments, first, last) PayloadLength of the kernel's sender for n PathRecords, from
    wire-formats.md §2 alone: pad = get_pad_size (200 for no data), first = seg_count*220 - pad,
    last = 220 - pad."""
    data = 64 * n_records
    pad = 200 if not data else (200 - data % 200) % 200
    count = (data + pad) // 200
    return count, count * 220 - pad, 220 - pad


def test_kernel_rule_reproduces_the_worked_examples(wf):
    examples = wf_worked_examples(wf)
    assert len(examples) == 4
    for n, data, segs, pad, first, last in examples:
        assert (data, kernel_paylens(n)) == (64 * n, (segs, first, last))


def _table(n: int) -> MAD:
    recs = [PathRecord(sgid="fe80::1", dgid="fe80::2", slid=1, dlid=1 + i % 0xBFFE)
            for i in range(n)]
    return (MAD(method=0x92, transaction_id=0x5A00 + n)
            / RMPP(rmpp_version=1, rmpp_type=1, rmpp_flags="active+first+last")
            / SAHeader(records=recs))


@pytest.mark.parametrize("n", [0, 1, *range(4, 201)])
def test_payload_length_single_and_segmented(n):
    """PayloadLength left unset: the whole answer as one MAD carries what the kernel puts in
    its first segment; rmpp.segment() of it gives the kernel's segments, each of which the
    layers dissect and rebuild (PayloadLength recomputed) to the same bytes, except a first
    segment of several, which only the whole message knows (it keeps its value)."""
    segs_n, first, last = kernel_paylens(n)
    whole = bytes(_table(n))
    assert struct.unpack_from("!I", whole, 32)[0] == first
    back = MAD(whole)
    assert len(back[SAHeader].records) == n
    assert [r.dlid for r in back[SAHeader].records] == [1 + i for i in range(n)]
    segments = rmpp.segment(whole[:56 + 64 * n])
    assert len(segments) == segs_n
    for k, seg in enumerate(segments, 1):
        want = first if k == 1 else last if k == segs_n else 0
        assert struct.unpack_from("!II", seg, 28) == (k, want)
        m = MAD(seg)
        assert m[RMPP].payload_length == want
        if k == 1 and segs_n > 1:
            continue  # a first segment of several: only the whole message knows the total
        if k > 1:  # a later segment's data: its slice of the stream, without the pad
            m[Raw].load = seg[56:] if k < segs_n else seg[56:56 + last - 20]
        m[RMPP].payload_length = None
        rebuilt = bytes(m)  # (a dissected MAD keeps its own bytes: no padding added again)
        assert rebuilt == seg[:len(rebuilt)] and len(rebuilt) >= 56, k
    joined = MAD(rmpp.reassemble(segments))
    assert len(joined[SAHeader].records) == n
    # an explicit value is kept, malformed or not
    bad = _table(n)
    bad[RMPP].payload_length = 7
    assert struct.unpack_from("!I", bytes(bad), 32)[0] == 7


def test_active_flags_alone_make_a_kernel_rmpp_header():
    """The issue's GetTableResp: only rmpp_flags set. The build gives what the kernel's RMPP
    layer needs of an active MAD (version 1, type DATA; mad_rmpp.c ib_process_rmpp_recv_wc
    drops any other) and the PayloadLength, so it dissects back to its 4 records; the same
    bytes as a header given in full; an explicit version or type is kept, wrong or not."""
    recs = [PathRecord(dlid=5 + i) for i in range(4)]
    q = MAD(method=0x92) / RMPP(rmpp_flags="active+first+last") / SAHeader(records=recs)
    full = MAD(method=0x92) / RMPP(rmpp_version=1, rmpp_type=1, rmpp_flags=7) / SAHeader(records=recs)
    wire = bytes(q)
    assert wire == bytes(full)
    assert wire[24:26] == b"\x01\x01"
    assert struct.unpack_from("!I", wire, 32)[0] == kernel_paylens(4)[1] == 2 * 20 + 4 * 64
    assert [r.dlid for r in MAD(wire)[SAHeader].records] == [5, 6, 7, 8]
    assert "computed: DATA" in q[RMPP].show(dump=True)
    assert bytes(RMPP())[:2] == b"\x00\x00"  # inactive: none of it
    assert bytes(RMPP(rmpp_version=0, rmpp_type=2, rmpp_flags=1))[:2] == b"\x00\x02"


def test_an_unnumbered_data_segment_is_segment_one(wf, tmp_path):
    """The README's GetTableResp (RMPP version, type DATA and ACTIVE|FIRST|LAST given, no
    segment number): §2 numbers segments from 1, the kernel's sender (and rmpp.segment())
    gives a lone segment number 1, and Wireshark's own RMPP dissector reads 1 back. On main
    the build gave 0 and the audit reported SAR-RMPP "segment number 0 outside 1..N"."""
    row = next(r for r in _section(wf, "## 2. SA MAD", "**DISAGREEMENT").splitlines()
               if "SegmentNumber" in r)
    assert row.rstrip().endswith("| 1-based |")
    path = PathRecord(sgid="fe80::2", dgid="fe80::1", slid=2, dlid=1)
    answer = MAD(method=0x92, transaction_id=0x1234) / RMPP(
        rmpp_version=1, rmpp_type="DATA", rmpp_flags="active+first+last") / SAHeader(
        records=[path] * 3)
    wire = bytes(answer)
    assert struct.unpack_from("!I", wire, 28)[0] == 1
    assert rmpp.segment(wire[:56 + 192])[0][28:32] == wire[28:32]
    assert "segment_number= computed: 1" in answer[RMPP].show(dump=True)
    # ACK, STOP, ABORT and inactive MADs: 0 unless given (an ACK's number is the last
    # segment received: the caller's to say); an explicit value is kept
    assert bytes(RMPP())[4:8] == bytes(RMPP(rmpp_flags=1, rmpp_type=2))[4:8] == bytes(4)
    assert bytes(RMPP(rmpp_flags=7, segment_number=0))[4:8] == bytes(4)
    cap = tmp_path / "readme-answer.pcapng"
    query = MAD(method=0x12, transaction_id=0x1234) / RMPP() / SAHeader(records=[PathRecord(
        sgid="fe80::2", dgid="fe80::1")])
    with CaptureBuilder(str(cap), encap="ib") as b:
        b.mad(bytes(query))
        b.mad(wire, from_sa=True)
    audit = subprocess.run([sys.executable, "-m", "ibpath_scapy", "audit", "--format", "json",
                            str(cap)], capture_output=True, text=True, timeout=120)
    assert "SAR-RMPP" not in audit.stdout, audit.stdout
    if tshark_path() is None:
        pytest.skip("tshark not installed: Wireshark's reading not checked")
    run, rows = tshark_fields(cap, ["infiniband.rmpp.segmentnumber"])
    run.check()
    assert [int(v, 0) for v in rows[2]["infiniband.rmpp.segmentnumber"]] == [1]


def _opensm_segments() -> list[tuple[int, list[bytes]]]:
    """The RMPP DATA transfers of captures/opensm/opensm-saquery.pcap, as the kernel cut them
    (ERF 16 + LRH 8 + BTH 12 + DETH 8 bytes before each MAD), read with struct only."""
    data = (CAPTURES / "opensm" / "opensm-saquery.pcap").read_bytes()
    assert struct.unpack_from("<IHHiIII", data)[-1] == 197
    off, transfers, out = 24, {}, []
    while off < len(data):
        incl = struct.unpack_from("<IIII", data, off)[2]
        mad = data[off + 16 + 44: off + 16 + 44 + 256]
        off += 16 + incl
        if mad[1] != 3 or mad[25] != 1 or not mad[26] & 1 or not mad[3] & 0x80:
            continue
        tid = mad[8:16]
        transfers.setdefault(tid, []).append(mad)
        if mad[26] & 4:
            out.append((len(out), transfers.pop(tid)))
    return out


def test_payload_length_is_what_the_kernel_sent():
    """Against the kernel itself: each transfer OpenSM sent through the kernel's RMPP layer,
    rebuilt through the layers with PayloadLength unset, carries the kernel's first-segment
    value, and rmpp.segment() of it gives the captured segments byte for byte."""
    transfers = _opensm_segments()
    assert len(transfers) >= 3 and any(len(s) > 1 for _, s in transfers)
    for _, segs in transfers:
        last_paylen = struct.unpack_from("!I", segs[-1], 32)[0]
        length = 56 + 200 * len(segs) - (220 - last_paylen)
        stream = b"".join(s[56:] for s in segs)[:length - 56]
        sa = SAHeader(segs[0][36:56])
        if struct.unpack_from("!H", segs[0], 16)[0] == 0x35:  # PathRecords, through the layer
            sa.records = [PathRecord(stream[i:i + 64]) for i in range(0, len(stream), 64)]
            rebuilt = MAD(segs[0][:24]) / RMPP(rmpp_version=1, rmpp_type=1, rmpp_flags=7) / sa
        else:  # records the layers keep as bytes (NodeRecord, ...)
            rebuilt = (MAD(segs[0][:24]) / RMPP(rmpp_version=1, rmpp_type=1, rmpp_flags=7)
                       / sa / Raw(stream))
        wire = bytes(rebuilt)
        assert struct.unpack_from("!I", wire, 32)[0] == struct.unpack_from("!I", segs[0], 32)[0]
        assert rmpp.segment(wire[:length]) == segs
        for k, seg in enumerate(segs[1:], 2):  # later segments recompute from their own data
            m = MAD(seg)
            if k == len(segs):
                m[Raw].load = seg[56:56 + last_paylen - 20]
            m[RMPP].payload_length = None
            rebuilt = bytes(m)
            assert rebuilt == seg[:len(rebuilt)] and len(rebuilt) >= 56


def test_show_says_what_the_build_computes():
    shown = _table(1).show(dump=True)
    assert "payload_length= computed: 84" in shown
    assert "attribute_offset= computed: 8" in shown  # what OpenSM puts: 64-byte records
    assert "attribute_offset= computed: 0" in (MAD() / RMPP() / SAHeader()).show(dump=True)
    assert "payload_length= 0" in (MAD() / RMPP() / SAHeader()).show2(dump=True)


# -- the frame builders and the README ----------------------------------------------------------

def test_frame_builders_return_packets():
    q = _table(1)
    roce, ib = rocev2_frame(q, src="10.0.0.1", dst="10.0.0.2"), native_ib_frame(q, slid=1, dlid=2)
    for frame in (roce, ib):
        assert isinstance(frame, Packet)
        assert frame.haslayer(SAHeader) and "SA GetTableResp(PathRecord) 1 record" in frame.summary()
    assert type(roce)(bytes(roce))[SAHeader].records[0].dlid == 1
    assert type(ib)(bytes(ib))[SAHeader].records[0].dlid == 1
    # the record builders take a frame either way
    assert erf_record(ib, 1.0) == erf_record(bytes(ib), 1.0)
    assert exported_pdu(ib, "infiniband") == exported_pdu(bytes(ib), "infiniband")


def readme_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    crafting = text[text.index("## Crafting MADs"):]
    return re.search(r"```python\n(.*?)```", crafting, re.S).group(1)


def test_readme_snippet_runs_as_written():
    """The library snippet of the README, executed; each line ending in `# → VALUE` must give
    that value."""
    code = readme_snippet()
    env: dict = {}
    checks = 0
    statement = ""
    for line in code.splitlines(keepends=True):
        statement += line
        try:
            ast.parse(statement)
        except SyntaxError:
            continue  # a statement spread over several lines
        m = re.match(r"(.*?)\s*# → (.*)$", statement.strip(), re.S)
        if m and not re.match(r"^\w+\s*=[^=]", m.group(1)):
            got = eval(m.group(1), env)  # noqa: S307 - the README's own code
            assert got == ast.literal_eval(m.group(2)), statement
            checks += 1
        else:
            exec(statement, env)  # noqa: S102
        statement = ""
    assert checks >= 4 and "frame" in env and "ib" in env
