"""Link type 253 and the RDMA netlink local service: layers against messages packed by hand from
the C structs, captures written by the project against tshark's netlink.* fields, and hostile
bytes reported without a crash.

Oracle layouts: the cooked header as tcpdump.org LINKTYPE_NETLINK / Linux SLL (`!HHH8sH`);
include/uapi/linux/netlink.h `struct nlmsghdr` (`<IHHII`) and `struct nlattr` (`<HH`, value
padded to 4); include/uapi/rdma/rdma_netlink.h `struct rdma_ls_resolve_header` (`64sBB` + 2
bytes of NLMSG_ALIGN), `struct rdma_ls_ip_resolve_header` (`<I`), attribute byte orders from
its table (SERVICE_ID u64 cpu, PKEY/QOS_CLASS u16 cpu, TIMEOUT u32 cpu, GIDs and IPs BE).
"""

import ipaddress
import json
import shutil
import struct
import subprocess

from hypothesis import HealthCheck, given, settings, strategies as st

import pytest
from layer_checks import assert_bit_runs_close

from ibpath_scapy.facts import public
from ibpath_scapy.engines.scapy.decode import Decoder
from ibpath_scapy.layers import netlink as nl
from ibpath_scapy.layers.netlink import (
    LsAttr,
    LsDgid,
    LsIpResolveRequest,
    LsIpResolveResponse,
    LsPkey,
    LsQosClass,
    LsResolveRequest,
    LsResolveResponse,
    LsServiceId,
    LsSetTimeout,
    LsSgid,
    LsTclass,
    NetlinkCooked,
    RdmaNLMsgHdr,
)
from ibpath_scapy.layers.pathdata import PathRecData
from ibpath_scapy.capture.pcapio import Frame, PcapNgWriter
from ibpath_scapy.facts.render import frame_text

from test_pathdata import pack_record
from tshark_util import tshark_env

u = st.integers
MANDATORY = 0x2000
PI_ERROR = 0x00800000  # epan/proto.h expert severity Error


def tshark_fields(capture, fields: list[str]) -> dict[int, dict[str, list[str]]]:
    """`tshark -T fields` (every occurrence of each field) by frame number. tshark runs with an
    empty HOME, so personal plugins and preferences cannot change what it shows. It exits 0
    even when a Lua script fails or a packet is malformed, so this fails on "Lua Error",
    malformed packets and expert infos of severity Error instead."""
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark not installed (tools/install.sh installs it)")
    cols = ["frame.number", *fields, "_ws.malformed", "_ws.expert.severity", "_ws.expert.message"]
    args = [tshark, "-n", "-r", str(capture), "-T", "fields", "-E", "header=y",
            "-E", "occurrence=a", "-E", "aggregator=|", "-E", "quote=n"]
    for c in cols:
        args += ["-e", c]
    p = subprocess.run(args, capture_output=True, text=True, env=tshark_env(), timeout=120)
    assert p.returncode == 0, p.stderr
    for name, text in (("stdout", p.stdout), ("stderr", p.stderr)):
        for marker in ("Lua Error", "Lua: Error", "Malformed", "Dissector bug"):
            assert marker not in text, f"{marker!r} in tshark {name}:\n{text[:2000]}"
    lines = p.stdout.splitlines()
    header = lines[0].split("\t")
    rows = {}
    for line in lines[1:]:
        values = line.split("\t") + [""] * len(header)
        row = {h: (v.split("|") if v else []) for h, v in zip(header, values)}
        assert not row["_ws.malformed"], f"malformed packet: {line}"
        assert all(int(sev) < PI_ERROR for sev in row["_ws.expert.severity"]), f"error expert: {line}"
        rows[int(row["frame.number"][0])] = row
    return rows


def cooked(pkttype: int, family: int = 20) -> bytes:
    return struct.pack("!HHH8sH", pkttype, 824, 0, b"\0" * 8, family)


def nlattr(typ: int, value: bytes, mandatory: bool = False, nla_len: int | None = None) -> bytes:
    n = 4 + len(value) if nla_len is None else nla_len
    return struct.pack("<HH", n, typ | (MANDATORY if mandatory else 0)) + value + b"\0" * (-len(value) % 4)


def nlmsg(typ: int, flags: int, seq: int, pid: int, body: bytes, nlmsg_len: int | None = None) -> bytes:
    n = 16 + len(body) if nlmsg_len is None else nlmsg_len
    return struct.pack("<IHHII", n, typ, flags, seq, pid) + body + b"\0" * (-len(body) % 4)


def resolve_request(seq=7, path_use=0, device=b"mlx5_0", port=1, sid=0x0106000000000000,
                    dgid=b"\xfe\x80" + b"\0" * 13 + b"\x02", sgid=b"\xfe\x80" + b"\0" * 13 + b"\x01",
                    tclass=0x20, pkey=0xFFFF, qos=0x123) -> bytes:
    """What sa_query.c ib_nl_send_msg / ib_nl_set_path_rec_attrs put on the socket."""
    body = struct.pack("64sBB2x", device, port, path_use)
    body += nlattr(3, struct.pack("<Q", sid), True) + nlattr(4, dgid, True)
    body += nlattr(5, sgid, True) + nlattr(6, struct.pack("B", tclass), True)
    body += nlattr(7, struct.pack("<H", pkey), True) + nlattr(8, struct.pack("<H", qos), True)
    return nlmsg(0x1000, 0x1, seq, 0, body)


def resolve_response(records: list[bytes], seq=7, pid=4242, flags=0) -> bytes:
    """ibacm acm_nl_send: nlmsghdr, then one PATH_RECORD attribute (nla_len 76) per record."""
    return nlmsg(0x1000, flags, seq, pid, b"".join(nlattr(1, r) for r in records))


# -- layout -----------------------------------------------------------------------------------

SPEC_LEN = {nl.NetlinkCooked: 16, nl.NLMsgHdr: 16, nl.RdmaNLMsgHdr: 16, nl.LsAttr: 4,
            nl.LsResolveRequest: 68, nl.LsIpResolveRequest: 4, nl.LsResolveResponse: 0,
            nl.LsSetTimeout: 0, nl.LsIpResolveResponse: 0}
VALUE_CLASSES = {1: PathRecData, 2: nl.LsTimeout, 3: nl.LsServiceId, 4: nl.LsDgid, 5: nl.LsSgid,
                 6: nl.LsTclass, 7: nl.LsPkey, 8: nl.LsQosClass, 9: nl.LsIpv4, 10: nl.LsIpv6}


@pytest.mark.parametrize("cls", list(SPEC_LEN), ids=lambda c: c.__name__)
def test_header_lengths_and_byte_aligned_bit_runs(cls):
    """rdma_ls_resolve_header is 66 bytes, NLMSG_ALIGNed to 68 (ib_nl_send_msg skb_put)."""
    assert len(bytes(cls())) == SPEC_LEN[cls]
    assert_bit_runs_close(cls)


@pytest.mark.parametrize("typ", sorted(VALUE_CLASSES))
def test_attribute_value_layers_have_the_header_sizes(typ):
    """The size column of rdma_netlink.h's attribute table, and the binding by type."""
    cls = VALUE_CLASSES[typ]
    assert len(bytes(cls())) == nl.LS_NLA_VALUE_SIZES[typ]
    attr = LsAttr(bytes(LsAttr() / cls()))
    assert attr.nla_type == typ and attr.nla_len == 4 + nl.LS_NLA_VALUE_SIZES[typ]
    assert isinstance(attr.payload, cls)

def test_cooked_header_layout():
    assert bytes(NetlinkCooked(pkttype=7, protocol=20)) == cooked(7, 20)
    assert bytes(NetlinkCooked(pkttype=6, protocol=0)) == cooked(6, 0)
    hdr = NetlinkCooked(cooked(6, 20) + resolve_request())
    assert (hdr.pkttype, hdr.hatype, hdr.halen, hdr.protocol) == (6, 824, 0, 20)
    assert len(hdr.messages) == 1 and not hdr.trailing


def test_hand_packed_resolve_request_decodes():
    data = cooked(6) + resolve_request(seq=99, path_use=2, device=b"mlx4_1", port=2,
                                       sid=0x1122334455667788, tclass=0xA0, pkey=0x8001, qos=0xABC)
    msg = NetlinkCooked(data).messages[0]
    assert isinstance(msg, RdmaNLMsgHdr)
    assert (msg.rdma_client, msg.rdma_op, msg.nlmsg_type) == (4, 0, 0x1000)
    assert (int(msg.nlmsg_flags), msg.nlmsg_seq, msg.nlmsg_pid) == (1, 99, 0)
    req = msg[LsResolveRequest]
    assert (req.device_name.rstrip(b"\0"), req.port_num, req.path_use) == (b"mlx4_1", 2, 2)
    attrs = req.attributes
    assert [a.nla_type for a in attrs] == [3, 4, 5, 6, 7, 8]
    assert all(a.mandatory for a in attrs) and [a.raw_type() for a in attrs][0] == 0x2003
    assert attrs[0][LsServiceId].service_id == 0x1122334455667788
    assert attrs[1][LsDgid].dgid == "fe80::2"
    assert attrs[2][LsSgid].sgid == "fe80::1"
    assert attrs[3][LsTclass].tclass == 0xA0
    assert attrs[4][LsPkey].pkey == 0x8001
    assert attrs[5][LsQosClass].qos_class == 0xABC


def test_layers_build_the_kernel_request_bytes():
    built = RdmaNLMsgHdr(nlmsg_flags="REQUEST", nlmsg_seq=7) / LsResolveRequest(
        device_name=b"mlx5_0", port_num=1, path_use=0, attributes=[
            LsAttr(mandatory=1) / LsServiceId(service_id=0x0106000000000000),
            LsAttr(mandatory=1) / LsDgid(dgid="fe80::2"),
            LsAttr(mandatory=1) / LsSgid(sgid="fe80::1"),
            LsAttr(mandatory=1) / LsTclass(tclass=0x20),
            LsAttr(mandatory=1) / LsPkey(pkey=0xFFFF),
            LsAttr(mandatory=1) / LsQosClass(qos_class=0x123)])
    assert bytes(built) == resolve_request()


def test_hand_packed_response_records():
    recs = [pack_record(0x0A, 0, dlid=5), pack_record(0x12, 0, dlid=6), pack_record(0x2B, 0, dlid=7)]
    msg = NetlinkCooked(cooked(7) + resolve_response(recs)).messages[0]
    resp = msg[LsResolveResponse]
    assert [a.nla_len for a in resp.attributes] == [76, 76, 76]
    got = [a[PathRecData] for a in resp.attributes]
    assert [int(r.flags) for r in got] == [0x0A, 0x12, 0x2B]
    assert [r.path_record.dlid for r in got] == [5, 6, 7]
    built = RdmaNLMsgHdr(nlmsg_seq=7, nlmsg_pid=4242) / LsResolveResponse(
        attributes=[LsAttr() / PathRecData(r) for r in recs])
    assert bytes(built) == resolve_response(recs)


def test_err_flag_set_timeout_and_ip_resolve():
    err = NetlinkCooked(cooked(7) + nlmsg(0x1000, 0x100, 9, 1, b"")).messages[0]
    assert int(err.nlmsg_flags) == 0x100 and not err.is_request() and not err.payload
    assert "LS_F_ERR" in repr(err)
    st_ = NetlinkCooked(cooked(7) + nlmsg(0x1001, 1, 3, 1, nlattr(2, struct.pack("<I", 5000)))).messages[0]
    assert (st_.rdma_op, st_[LsSetTimeout].attributes[0].payload.timeout_ms) == (1, 5000)
    ipreq = NetlinkCooked(cooked(6) + nlmsg(0x1002, 1, 4, 0, struct.pack("<I", 3) + nlattr(
        9, bytes([192, 168, 2, 25]), True))).messages[0]
    assert ipreq[LsIpResolveRequest].ifindex == 3
    assert ipreq[LsIpResolveRequest].attributes[0].payload.ipv4 == "192.168.2.25"
    gid = ipaddress.IPv6Address("fe80::2:c903:0:1").packed
    ipresp = NetlinkCooked(cooked(7) + nlmsg(0x1002, 0, 4, 1, nlattr(4, gid))).messages[0]
    assert ipresp[LsIpResolveResponse].attributes[0].payload.dgid == "fe80::2:c903:0:1"


def test_two_messages_in_one_record():
    data = cooked(6) + resolve_request(seq=1) + resolve_request(seq=2, path_use=1)
    msgs = NetlinkCooked(data).messages
    assert [m.nlmsg_seq for m in msgs] == [1, 2]
    assert [m[LsResolveRequest].path_use for m in msgs] == [0, 1]


# -- tshark reads what the project writes ----------------------------------------------------------

TSHARK_FIELDS = ["netlink.family", "netlink.hatype", "netlink.hdr_len", "netlink.hdr_type",
                 "netlink.hdr_flags", "netlink.hdr_seq", "netlink.hdr_pid"]


def _ints(vals):
    return [int(v, 0) for v in vals]


ls_message = st.one_of(
    st.builds(lambda seq, pu, port: (6, resolve_request(seq=seq, path_use=pu, port=port)),
              u(0, 2**32 - 1), u(0, 2), u(0, 255)),
    st.builds(lambda n, seq, pid, err: (7, resolve_response(
        [pack_record(f, 0, dlid=i) for i, f in enumerate(n)], seq=seq, pid=pid, flags=err)),
              st.lists(u(0, 0x3F), max_size=4), u(0, 2**32 - 1), u(0, 2**31), st.sampled_from([0, 0x100])),
    st.builds(lambda ms, seq: (7, nlmsg(0x1001, 1, seq, 7, nlattr(2, struct.pack("<I", ms)))),
              u(0, 2**32 - 1), u(0, 2**32 - 1)),
)


@settings(max_examples=1, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(ls_message, min_size=40, max_size=40))
def test_tshark_netlink_header_fields_agree_with_the_layers(tmp_path_factory, msgs):
    """One capture, every record checked: tshark's netlink.* header fields vs the layers."""
    cap = tmp_path_factory.mktemp("nl") / "ls.pcapng"
    records = [cooked(pt) + m for pt, m in msgs]
    records.append(cooked(6) + resolve_request(seq=1) + resolve_request(seq=2))  # two in one
    with PcapNgWriter(str(cap)) as w:
        for i, r in enumerate(records):
            w.write(r, 253, 1000.0 + i)
    rows = tshark_fields(cap, TSHARK_FIELDS)
    assert len(rows) == len(records)
    for i, raw in enumerate(records, start=1):
        pkt = NetlinkCooked(raw)
        row = rows[i]
        assert _ints(row["netlink.family"]) == [pkt.protocol]
        assert _ints(row["netlink.hatype"]) == [pkt.hatype] == [824]
        assert _ints(row["netlink.hdr_len"]) == [m.nlmsg_len for m in pkt.messages]
        assert _ints(row["netlink.hdr_type"]) == [m.nlmsg_type for m in pkt.messages]
        assert _ints(row["netlink.hdr_flags"]) == [int(m.nlmsg_flags) for m in pkt.messages]
        assert _ints(row["netlink.hdr_seq"]) == [m.nlmsg_seq for m in pkt.messages]
        assert _ints(row["netlink.hdr_pid"]) == [m.nlmsg_pid for m in pkt.messages]


def test_tshark_check_catches_a_malformed_packet(tmp_path):
    """The guard above must fail when Wireshark flags a packet (tshark still exits 0)."""
    cap = tmp_path / "bad.pcapng"
    with PcapNgWriter(str(cap)) as w:
        w.write(cooked(7) + nlmsg(0x1000, 0, 1, 1, b"\0" * 24, nlmsg_len=300), 253, 1.0)
    with pytest.raises(AssertionError, match="Malformed"):
        tshark_fields(cap, ["netlink.hdr_len"])


# -- hostile bytes: reported, never a crash ---------------------------------------------------

def decode_one(data: bytes) -> list[dict]:
    d = Decoder()
    out = [public(r) for r in d.feed(Frame(1, 0.0, 253, data, len(data)))]
    json.dumps(out)
    for rec in out:
        assert frame_text(rec)
    return out


def errors_of(recs):
    return " | ".join(e for r in recs for e in r.get("errors", []) + [r.get("error", "")])


def test_truncated_attribute_header():
    body = nlattr(1, pack_record(0x2B, 0)) + b"\x08\x00"  # two bytes of a third nlattr
    recs = decode_one(cooked(7) + nlmsg(0x1000, 0, 1, 1, body)[:16 + len(body)])
    assert recs[0]["kind"] == "ls" and recs[0]["malformed"]
    assert "2 bytes after the last attribute" in errors_of(recs)
    assert len(recs[0]["blob_records"]) == 1


def test_nla_len_past_the_message():
    body = nlattr(1, pack_record(0x2B, 0)) + nlattr(1, pack_record(0x0A, 0), nla_len=200)
    recs = decode_one(cooked(7) + nlmsg(0x1000, 0, 1, 1, body))
    assert "nla_len 200 runs past the end of the message (76 bytes left)" in errors_of(recs)
    assert [r["flags"] for r in recs[0]["blob_records"]] == [0x2B]
    assert recs[0]["malformed"]


def test_nla_len_below_header_size_and_nlmsg_len_past_record():
    recs = decode_one(cooked(7) + nlmsg(0x1000, 0, 1, 1, struct.pack("<HH", 2, 1) + b"\0" * 8))
    assert "an incomplete nlattr header or nla_len below 4" in errors_of(recs)
    recs = decode_one(cooked(7) + nlmsg(0x1000, 0, 1, 1, nlattr(1, pack_record(0x2B, 0)), nlmsg_len=500))
    assert "nlmsg_len 500 runs past the end of the record (92 bytes left)" in errors_of(recs)
    recs = decode_one(cooked(7) + struct.pack("<IHHII", 8, 0x1000, 0, 1, 1))
    assert recs[0]["kind"] == "malformed" and "cannot start another" in recs[0]["error"]


def test_unknown_and_wrong_sized_attributes():
    body = struct.pack("64sBB2x", b"x", 1, 0) + nlattr(42, b"abcd", True) + nlattr(7, b"\1\2\3", True)
    recs = decode_one(cooked(6) + nlmsg(0x1000, 1, 1, 0, body))
    text = errors_of(recs)
    assert "unknown attribute type 42 with RDMA_NLA_F_MANDATORY (ibacm rejects the request)" in text
    assert "value is 3 bytes, PKEY takes 2" in text
    assert not recs[0].get("malformed")  # well-formed netlink, odd content
    assert recs[0]["ls"]["attributes"][0]["value_hex"] == "61626364"
    resp = decode_one(cooked(7) + nlmsg(0x1000, 0, 1, 1, nlattr(1, pack_record(0x2B, 0) + b"\0" * 4)))
    assert "value is 76 bytes, PATH_RECORD takes 72" in errors_of(resp)
    assert resp[0]["kernel_view"]["ls-legacy"]["outcome"] == "sa-fallback"


def test_resolve_answer_with_request_flag_is_refused():
    """sa_query.c ib_nl_handle_resolve_resp: `if ((nlh->nlmsg_flags & NLM_F_REQUEST) || ...)
    return -EPERM;` — the query then times out and goes to the SA."""
    recs = decode_one(cooked(7) + resolve_response([pack_record(0x2B, 0)], flags=0x1))
    assert "refuses it (-EPERM)" in errors_of(recs)
    assert [b["flags"] for b in recs[0]["blob_records"]] == [0x2B]
    assert recs[0]["kernel_view"]["ls-legacy"]["outcome"] == "dropped"


def test_truncated_family_header_and_unknown_op():
    recs = decode_one(cooked(6) + nlmsg(0x1000, 1, 1, 0, b"mlx5_0" + b"\0" * 30))
    assert "could not be dissected" in errors_of(recs)
    recs = decode_one(cooked(6) + nlmsg(0x1007, 1, 1, 0, b""))
    assert "unknown local-service operation 7" in errors_of(recs)
    other = decode_one(cooked(6) + nlmsg(0x1401, 0x301, 1, 0, b""))  # RDMA_NL_NLDEV
    assert other[0]["kind"] == "rdma_netlink" and other[0]["netlink"]["client_name"] == "NLDEV"
    assert decode_one(cooked(6, family=0) + nlmsg(18, 0x301, 1, 0, b"\0" * 16)) == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), u(0, 0xFFFF), u(0, 0xFFFF), u(0, 600), st.sampled_from([6, 7]))
def test_random_bodies_never_crash(body, typ, flags, cut, pkttype):
    data = cooked(pkttype) + nlmsg(0x1000 | (typ & 0x3), flags, 1, 1, body)
    for chunk in (data, data[:16 + cut]):
        for rec in decode_one(chunk):
            assert rec["frame"] == 1 and rec["kind"] in ("ls", "malformed")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(u(0, 0xFFFF), u(0, 0xFFFF), st.binary(max_size=90)), max_size=6), u(0, 900))
def test_random_attribute_lists_never_crash(attrs, cut):
    body = b"".join(struct.pack("<HH", n, t) + v for n, t, v in attrs)
    for flags in (0, 1):
        data = cooked(7) + nlmsg(0x1000, flags, 1, 1, body)
        for chunk in (data, data[:cut]):
            for rec in decode_one(chunk):
                assert rec["kind"] in ("ls", "malformed")
