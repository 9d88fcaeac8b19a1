"""The generated Lua plugin in a real tshark: fresh, loads cleanly, shows what Scapy decodes,
agrees with Wireshark's own fields where those are right, and never raises a Lua error."""

import ipaddress
import random
import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st
from scapy.fields import StrFixedLenField, _BitField

from scapy.layers.inet import IP, IPOption_NOP
from scapy.layers.l2 import Ether

from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.capture.encap import erf_record, native_ib_frame, rocev2_frame
from ibpath_scapy.layers import (
    BTH, DETH, ERF, LRH, MAD, RMPP, CMDrep, CMDreq, CMRej, CMRep, CMReq, CMRtu, PathRecord,
    SAHeader,
)
from ibpath_scapy.layers.coded import RawCode
from ibpath_scapy.luagen.emit import reachable
from ibpath_scapy.luagen.plugin import CHECKOUT_PLUGIN, generate_plugin
from ibpath_scapy.capture.pcapio import PcapWriter

from conftest import CAPTURES, EXTERNAL
from plugin_oracle import assert_no_malformed, compare, field_map, need_tshark, tshark

LUA = str(CHECKOUT_PLUGIN)
PLUGIN_CLASSES = reachable([LRH, BTH], ("Raw", "Padding", "NoPayload", "MADPadding"))
FMAP = field_map(PLUGIN_CLASSES)


def test_committed_plugin_is_fresh():
    """dissector/ibpath.lua must equal a fresh `ibpath dissector generate`."""
    assert CHECKOUT_PLUGIN.read_text() == generate_plugin(), (
        "dissector/ibpath.lua is stale: run `ibpath dissector generate` and commit it")


def test_generation_is_deterministic():
    assert generate_plugin() == generate_plugin()


def test_plugin_compiles_with_lua_5_4():
    luac = shutil.which("luac5.4")
    if luac is None:
        pytest.skip("luac5.4 not installed (Debian package lua5.4)")
    p = subprocess.run([luac, "-p", LUA], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def all_captures():
    # captures/corpus/ holds deliberately malformed scenarios: tests/test_scenarios.py runs the
    # plugin over the whole corpus and allows malformed packets exactly where the manifest says
    files = sorted(EXTERNAL.glob("*.pcap")) + sorted(
        f for f in CAPTURES.glob("*/*.pcap*") if f.parent.name != "corpus")
    return [pytest.param(f, id=f.name) for f in files]


@pytest.mark.parametrize("path", all_captures())
def test_no_lua_error_and_no_malformed_on_real_captures(path):
    p = tshark(["-r", str(path), "-V"], LUA)
    # rocev2-rc-send.pcap is RC data only: no MAD, so no ibpath tree; every other one has MADs
    assert ("ibpath" in p.stdout) == (path.name != "rocev2-rc-send.pcap"), path.name
    assert_no_malformed(str(path), LUA)


# -- field-by-field agreement with Scapy over generated packets ----------------------------------
u = st.integers
gid = st.binary(min_size=16, max_size=16).map(lambda b: str(ipaddress.IPv6Address(b)))


def path_record():
    return st.builds(
        PathRecord, service_id=u(0, 2**64 - 1), dgid=gid, sgid=gid, dlid=u(0, 0xFFFF),
        slid=u(0, 0xFFFF), raw_traffic=u(0, 1), flow_label=u(0, 2**20 - 1), hop_limit=u(0, 255),
        tclass=u(0, 255), reversible=u(0, 1), numb_path=u(0, 127), pkey=u(0, 0xFFFF),
        qos_class=u(0, 0xFFF), sl=u(0, 15), mtu_selector=u(0, 3), mtu=u(0, 63).map(RawCode),
        rate_selector=u(0, 3), rate=u(0, 63).map(RawCode), packet_life_time_selector=u(0, 3),
        packet_life_time=u(0, 63), preference=u(0, 255))


@st.composite
def sa_mad(draw):
    method = draw(st.sampled_from([0x01, 0x12, 0x81, 0x92]))
    n = draw(u(0, 3)) if method == 0x92 else 1
    recs = [draw(path_record()) for _ in range(n)]
    rmpp = RMPP(rmpp_version=draw(u(0, 255)), r_resp_time=draw(u(0, 31)),
                rmpp_status=draw(u(0, 255)))
    if method == 0x92:
        rmpp.rmpp_type, rmpp.rmpp_flags = 1, 7
        rmpp.segment_number, rmpp.payload_length = 1, 20 + 64 * n
    return (MAD(method=method, status=0, transaction_id=draw(u(0, 2**64 - 1)),
                class_specific=draw(u(0, 0xFFFF)), attribute_modifier=draw(u(0, 2**32 - 1)))
            / rmpp / SAHeader(sm_key=draw(u(0, 2**64 - 1)), component_mask=draw(u(0, 2**64 - 1)),
                              attribute_offset=8 if method & 0x80 else 0, records=recs))


def _cm_fields(cls, draw):
    """Random values for every non-reserved field of a CM message."""
    kw = {}
    for f in cls.fields_desc:
        if f.name.startswith("reserved") or f.name == "private_data":
            continue
        if type(f).__name__ == "GIDField":
            kw[f.name] = draw(gid)
        elif isinstance(f, StrFixedLenField):
            n = f.length_from(None)
            kw[f.name] = draw(st.binary(min_size=n, max_size=n))
        elif isinstance(f, _BitField):
            kw[f.name] = RawCode(draw(u(0, (1 << f.size) - 1)))  # coded fields too
        else:
            nbytes = 3 if "3Bytes" in type(f).__name__ else f.sz
            kw[f.name] = draw(u(0, (1 << (8 * nbytes)) - 1))
    return kw


@st.composite
def cm_mad(draw):
    cls = draw(st.sampled_from([CMReq, CMRep, CMRtu, CMRej, CMDreq, CMDrep]))
    attr = {CMReq: 0x10, CMRej: 0x12, CMRep: 0x13, CMRtu: 0x14, CMDreq: 0x15, CMDrep: 0x16}[cls]
    return MAD(mgmt_class=7, method=3, attribute_id=attr,
               transaction_id=draw(u(0, 2**64 - 1))) / cls(**_cm_fields(cls, draw))


@st.composite
def frame(draw):
    mad = draw(st.one_of(sa_mad(), cm_mad()))
    if draw(st.booleans()):
        return rocev2_frame(mad, src="192.168.2.24", dst="192.168.2.25", psn=draw(u(0, 2**24 - 1)),
                            pkey=draw(u(0, 0xFFFF)))
    raw = native_ib_frame(mad, slid=draw(u(1, 0xBFFF)), dlid=draw(u(1, 0xBFFF)), sl=draw(u(0, 15)))
    return ERF(erf_record(raw, 1.0))


# Shrinking a 150-packet example takes minutes; a failure names the frame and field anyway.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), phases=NO_SHRINK)
@given(st.lists(frame(), min_size=30, max_size=30))
def test_plugin_fields_equal_scapy_over_generated_packets(tmp_path_factory, frames):
    need_tshark()
    d = tmp_path_factory.mktemp("gen")
    eth = [f for f in frames if not isinstance(f, ERF)]
    ib = [f for f in frames if isinstance(f, ERF)]
    total = 0
    for name, pkts, lt in (("eth.pcap", eth, 1), ("ib.pcap", ib, 197)):
        if not pkts:
            continue
        raw = [bytes(p) for p in pkts]
        with PcapWriter(str(d / name), lt) as w:
            for i, b in enumerate(raw):
                w.write(b, float(i))
        dissected = [(type(p))(b) for p, b in zip(pkts, raw)]
        total += compare(str(d / name), LUA, dissected, FMAP)
    assert total > 30 * 40  # every field of every layer was compared


# -- what the plugin adds --------------------------------------------------------------------
def test_every_record_of_reassembled_get_table_resp_matches_decode():
    """The OpenSM capture: multi-segment RMPP GetTableResps show every record, equal to
    the Scapy decoder's records for the completing frame."""
    path = str(CAPTURES / "opensm" / "opensm-saquery.pcap")
    expect = {r["frame"]: r["path_records"] for r in decode_file(path)
              if r.get("path_records") and r["mad"]["method"] & 0x80}
    names = ["dlid", "slid", "dgid", "sgid", "reversible", "numb_path", "mtu", "rate",
             "packet_life_time", "preference", "pkey", "sl", "qos_class", "service_id"]
    args = ["-r", path, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|",
            "-e", "frame.number"] + [x for n in names for x in ("-e", f"ibpath.pathrecord.{n}")]
    rows = [line.split("\t") for line in tshark(args, LUA).stdout.splitlines()]
    seen = 0
    for row in rows:
        fno = int(row[0])
        if fno not in expect:
            continue
        recs = expect[fno]
        for col, n in enumerate(names, 1):
            vals = row[col].split("|")
            want = [r[n] for r in recs]
            if n in ("dgid", "sgid"):
                assert [ipaddress.IPv6Address(v) for v in vals] == [ipaddress.IPv6Address(w) for w in want]
            else:
                assert [int(v, 0) for v in vals] == want, (fno, n)
        seen += len(recs)
    assert seen == 68  # every PathRecord OpenSM sent (captures/opensm/README.md)


def test_two_pass_marks_segments_reassembled_in():
    path = str(CAPTURES / "opensm" / "opensm-saquery.pcap")
    out = tshark(["-2", "-r", path, "-T", "fields", "-e", "frame.number",
                  "-e", "ibpath.rmpp.reassembled_in", "-e", "ibpath.sa.record_count"], LUA).stdout
    rows = {int(r.split("\t")[0]): r.split("\t")[1:] for r in out.splitlines()}
    assert all(rows[f][0] == "17" for f in range(2, 17))
    assert rows[17][1] == "49"


def test_agrees_with_builtin_fields_where_they_are_right(external):
    path = str(external / "ib-erf-sminfo-cm.pcap")
    pairs = [("ibpath.mad.transaction_id", "infiniband.mad.transactionid"),
             ("ibpath.mad.attribute_id", "infiniband.mad.attributeid"),
             ("ibpath.pathrecord.dlid", "infiniband.pathrecord.dlid"),
             ("ibpath.pathrecord.slid", "infiniband.pathrecord.slid"),
             ("ibpath.pathrecord.dgid", "infiniband.pathrecord.dgid"),
             ("ibpath.pathrecord.mtu", "infiniband.pathrecord.mtu"),
             ("ibpath.pathrecord.reversible", "infiniband.pathrecord.reversible"),
             ("ibpath.cm_req.primary_local_lid", "infiniband.cm.req.prim_locallid"),
             ("ibpath.cm_req.service_id", "infiniband.cm.req.serviceid"),
             ("ibpath.sa.component_mask", "infiniband.sa.componentmask")]
    args = ["-r", path, "-T", "fields"] + [x for a, b in pairs for x in ("-e", a, "-e", b)]
    compared = 0
    for line in tshark(args, LUA).stdout.splitlines():
        cols = line.split("\t")
        for i in range(0, len(cols), 2):
            a, b = cols[i], cols[i + 1]
            if a and b:
                if ":" in a:
                    assert ipaddress.IPv6Address(a) == ipaddress.IPv6Address(b)
                else:
                    assert int(a, 0) == int(b, 0)
                compared += 1
    assert compared >= 15


def _write(tmp_path, name, frames, linktype=1):
    path = tmp_path / name
    with PcapWriter(str(path), linktype) as w:
        for i, f in enumerate(frames):
            w.write(bytes(f), float(i))
    return str(path)


def query(**kw):
    return MAD(transaction_id=7) / RMPP() / SAHeader(records=[PathRecord(**kw)])


def test_native_lid_4791_is_not_taken_for_a_rocev2_udp_port(tmp_path):
    """A native-IB packet whose DLID is 4791 (RoCEv2's UDP port, 0x12B7) is dissected once,
    from its LRH; a RoCEv2 frame whose IPv4 header has options is still found."""
    ib = erf_record(native_ib_frame(query(dgid="fe80::2"), slid=3, dlid=4791), 1.0)
    p1 = _write(tmp_path, "lid4791.pcap", [ib], 197)
    out = tshark(["-r", p1, "-V", "-T", "fields", "-E", "occurrence=a", "-e", "ibpath.lrh.dlid",
                  "-e", "ibpath.bth.dqpn", "-e", "ibpath.mad.transaction_id"], LUA).stdout
    assert out.split("\t") == ["4791", "1", "0x0000000000000007\n"]  # LIDs decimal (0x12b7)
    roce = rocev2_frame(query(dgid="fe80::2"), src="10.0.0.1", dst="10.0.0.2")
    roce[IP].options = [IPOption_NOP()] * 4  # IHL 6
    p2 = _write(tmp_path, "ipopts.pcap", [Ether(bytes(roce))])
    out = tshark(["-r", p2, "-T", "fields", "-e", "ibpath.mad.transaction_id"], LUA).stdout
    assert out.split() == ["0x0000000000000007"]


def test_icrc_checked(tmp_path):
    good = bytes(rocev2_frame(query(dgid="fe80::2"), src="10.0.0.1", dst="10.0.0.2"))
    bad = good[:-1] + bytes([good[-1] ^ 1])
    path = _write(tmp_path, "icrc.pcap", [good, bad])
    out = tshark(["-r", path, "-T", "fields", "-e", "ibpath.check.icrc", "-e", "_ws.expert.message"],
                 LUA).stdout.splitlines()
    assert out[0].split("\t")[0] == "1"
    assert out[1].split("\t")[0] == "0" and "ICRC mismatch" in out[1]


def test_single_packet_rules_raise_expert_infos(tmp_path):
    half = MAD(transaction_id=1) / RMPP() / SAHeader(component_mask=0x1, records=[PathRecord()])
    whole = MAD(transaction_id=2) / RMPP() / SAHeader(component_mask=0x3, records=[PathRecord()])
    numb0 = MAD(method=0x12, transaction_id=3) / RMPP() / SAHeader(
        component_mask=1 << 12, records=[PathRecord(numb_path=0)])
    frames = [rocev2_frame(m, src="10.0.0.1", dst="10.0.0.2") for m in (half, whole, numb0)]
    path = _write(tmp_path, "rules.pcap", frames)
    out = tshark(["-r", path, "-T", "fields", "-E", "occurrence=a", "-e", "_ws.expert.message"],
                 LUA).stdout.splitlines()
    assert "SAQ-SERVICEID-HALF" in out[0]
    assert "SAQ-" not in out[1]
    assert "SAQ-NUMBPATH-ZERO" in out[2]


def test_truncated_at_every_length_never_raises_a_lua_error(tmp_path):
    req = bytes(rocev2_frame(query(dgid="fe80::2", slid=3), src="10.0.0.1", dst="10.0.0.2"))
    cm = bytes(rocev2_frame(MAD(mgmt_class=7, method=3, attribute_id=0x10) / CMReq(),
                            src="10.0.0.1", dst="10.0.0.2"))
    ib = bytes(native_ib_frame(MAD(method=0x81) / RMPP() / SAHeader(records=[PathRecord()]), slid=1, dlid=2))
    eth_frames = [req[:n] for n in range(len(req) + 1)] + [cm[:n] for n in range(len(cm) + 1)]
    p1 = _write(tmp_path, "trunc-eth.pcap", eth_frames)
    p2 = _write(tmp_path, "trunc-ib.pcap", [erf_record(ib[:n], 0.0) for n in range(len(ib) + 1)], 197)
    for p in (p1, p2):
        out = tshark(["-r", p, "-V"], LUA)
        assert "Truncated" in out.stdout  # our expert, not a Lua error


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), phases=NO_SHRINK)
@given(st.integers(0, 2**32 - 1))
def test_random_bytes_in_every_field_never_raise_a_lua_error(tmp_path_factory, seed):
    """200 MADs a run whose 232 data bytes are random, under headers of every class the
    plugin decodes (and some it does not), in RoCEv2 and native IB framing."""
    rnd = random.Random(seed)
    frames = []
    for _ in range(200):
        cls = rnd.choice([3, 7, 1, 4])
        attr = rnd.choice([0x35, 0x10, 0x13, 0x14, 0x12, rnd.randrange(65536)])
        head = bytes(MAD(mgmt_class=cls, method=rnd.randrange(256), attribute_id=attr))[:24]
        mad = head + rnd.randbytes(232)
        if rnd.random() < 0.5:
            frames.append((1, bytes(rocev2_frame(MAD(mad), src="10.0.0.1", dst="10.0.0.2"))))
        else:
            frames.append((197, erf_record(native_ib_frame(mad, slid=1, dlid=2), 0.0)))
    d = tmp_path_factory.mktemp("rnd")
    for lt in (1, 197):
        path = _write(d, f"r{lt}.pcap", [f for t, f in frames if t == lt], lt)
        tshark(["-r", path, "-V"], LUA)


def test_frames_read_equals_frames_in_file(tmp_path):
    frames = [rocev2_frame(query(dgid="fe80::2"), src="10.0.0.1", dst="10.0.0.2")] * 5
    path = _write(tmp_path, "n.pcap", frames)
    out = tshark(["-r", path, "-T", "fields", "-e", "ibpath.mad.transaction_id"], LUA).stdout
    assert out.splitlines() == ["0x0000000000000007"] * 5


# -- NETLINK_RDMA and blob frames ----------------------------------------------------------------
def test_netlink_and_blob_fields_equal_scapy(tmp_path):
    from ibpath_scapy.craft import CaptureBuilder
    from ibpath_scapy.layers.ib import ExportedPDU
    from ibpath_scapy.layers.netlink import NetlinkCooked, RdmaNLMsgHdr
    from ibpath_scapy.layers.pathdata import PathArray
    from ibpath_scapy.capture.pcapio import read_frames

    L, R = "fe80::2:c903:0:1", "fe80::2:c903:0:2"
    fwd = PathRecord(sgid=L, dgid=R, slid=1, dlid=2, reversible=1, pkey=0x8001, sl=3, mtu=5)
    ret = PathRecord(sgid=R, dgid=L, slid=2, dlid=1, reversible=0, pkey=0x8001)
    path = tmp_path / "ls.pcapng"
    with CaptureBuilder(str(path)) as b:
        b.ls_request(7, path_use=0, sgid=L, dgid=R, service_id=0x0106000000001234, tclass=5)
        b.ls_response(7, [(0x0A, fwd), (0x12, ret), (0x2B, fwd)])
        b.ls_response(8, [], error=True)  # header-only: the postdissector shows it
        b.blob([(0x2B, fwd), (0x2C, ret)], set_option=0)
        b.blob(bytes(PathArray(records=[])) + b"\x2b\x00\x00\x00" + bytes(70), set_option=-22)
    frames = list(read_frames(str(path)))
    # tshark splits netlink records into messages and hands each one to the plugin; compare
    # per frame with Scapy's view of the same bytes
    dissected = [NetlinkCooked(f.data) if f.linktype == 253 else ExportedPDU(f.data) for f in frames]
    classes = reachable([PathArray, RdmaNLMsgHdr], ("Raw", "Padding", "NoPayload", "MADPadding"))
    fmap = {k: v for k, v in field_map(PLUGIN_CLASSES + [c for c in classes if c not in PLUGIN_CLASSES]).items()}
    n = compare(str(path), LUA, dissected, fmap)
    assert n > 150
    out = tshark(["-r", str(path), "-T", "fields", "-E", "occurrence=a", "-e", "_ws.expert.message"],
                 LUA).stdout.splitlines()
    assert "BLOB-GMP-NOT-REVERSIBLE" not in out[3] and "BLOB-LENGTH" in out[4]


# The plugin's rule experts against the audit's one-frame findings, frame by frame, over the
# whole corpus: tests/test_scenarios.py::test_corpus_in_tshark_with_the_plugin.


# Property-based: LS requests, LS responses (records with any flags, a zero-length or odd
# trailing attribute), and blobs of any length, as the plugin shows them against Scapy's view.
@st.composite
def ls_or_blob(draw):
    """(kind, args) for CaptureBuilder: an LS request, an LS response or a blob."""
    kind = draw(st.sampled_from(["request", "response", "blob", "blob_raw"]))
    if kind == "request":
        return kind, dict(seq=draw(u(0, 2**32 - 1)), path_use=draw(u(0, 255)), sgid=draw(gid),
                          dgid=draw(gid), pkey=draw(u(0, 0xFFFF)),
                          service_id=draw(st.none() | u(0, 2**64 - 1)),
                          tclass=draw(st.none() | u(0, 255)))
    recs = [(draw(u(0, 2**32 - 1)), draw(path_record())) for _ in range(draw(u(0, 4)))]
    if kind == "response":
        return kind, dict(seq=draw(u(0, 2**32 - 1)), records=recs, error=draw(st.booleans()))
    if kind == "blob":
        return kind, dict(records=recs, set_option=draw(st.sampled_from([None, 0, -22])))
    return kind, dict(records=draw(st.binary(min_size=0, max_size=300)), set_option=-22)


def write_ls_or_blob(path, items):
    """A pcapng of ls_or_blob() items, written with CaptureBuilder; returns path."""
    from ibpath_scapy.craft import CaptureBuilder

    with CaptureBuilder(str(path)) as b:
        for kind, kw in items:
            kw = dict(kw)
            if kind == "request":
                b.ls_request(kw.pop("seq"), **kw)
            elif kind == "response":
                b.ls_response(kw.pop("seq"), kw.pop("records"), **kw)
            else:
                b.blob(kw["records"], set_option=kw["set_option"])
    return path


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), phases=NO_SHRINK)
@given(st.lists(ls_or_blob(), min_size=25, max_size=25))
def test_netlink_and_blob_fields_equal_scapy_over_generated_messages(tmp_path_factory, items):
    from ibpath_scapy.layers.ib import ExportedPDU
    from ibpath_scapy.layers.netlink import NetlinkCooked, RdmaNLMsgHdr
    from ibpath_scapy.layers.pathdata import PathArray
    from ibpath_scapy.capture.pcapio import read_frames

    need_tshark()
    path = write_ls_or_blob(tmp_path_factory.mktemp("nl") / "gen.pcapng", items)
    frames = list(read_frames(str(path)))
    dissected = [NetlinkCooked(f.data) if f.linktype == 253 else ExportedPDU(f.data) for f in frames]
    classes = reachable([PathArray, RdmaNLMsgHdr], ("Raw", "Padding", "NoPayload", "MADPadding"))
    fmap = field_map(PLUGIN_CLASSES + [c for c in classes if c not in PLUGIN_CLASSES])
    assert compare(str(path), LUA, dissected, fmap) > 25 * 5
    assert_no_malformed(str(path), LUA)


def test_tracking_caps_are_reached_with_an_expert_info(tmp_path, monkeypatch):
    """The plugin's state is bounded: past TID_TRACK_MAX TIDs nothing new is paired, past
    RMPP_OPEN_MAX open transfers nothing new is reassembled, and the frame that reached a cap
    carries an expert info saying so. Caps lowered here (4 TIDs, no open transfer) on the
    OpenSM capture: TIDs of frames 1, 2, 18 and 19 are tracked, frame 20's request is the
    fifth; the 16-segment answer starting at frame 2 is the first transfer."""
    from ibpath_scapy.luagen import plugin

    monkeypatch.setattr(plugin, "TID_TRACK_MAX", 4)
    monkeypatch.setattr(plugin, "MAX_OPEN", 0)
    lua = tmp_path / "capped.lua"
    lua.write_text(generate_plugin())
    path = str(CAPTURES / "opensm" / "opensm-saquery.pcap")
    rows = tshark(["-r", path, "-T", "fields", "-e", "frame.number", "-e", "_ws.expert.message",
                   "-E", "occurrence=a", "-E", "aggregator=|", "-Y", "frame"], str(lua))
    capped = {int(n): msg for n, msg in (line.split("\t", 1) for line in rows.stdout.splitlines())
              if "cap reached" in msg}
    assert set(capped) == {2, 20}, capped
    assert "RMPP cap reached (0 transfers open)" in capped[2]
    assert "TID tracking cap reached (4 TIDs)" in capped[20]
    # the shipped plugin on the same capture reaches neither
    rows = tshark(["-r", path, "-T", "fields", "-e", "_ws.expert.message", "-Y", "frame"], LUA)
    assert "cap reached" not in rows.stdout
