"""The tshark audit engine (ibpath_scapy.engines.tshark) against the Scapy engine (decode.py).

For every capture of captures/ (recursively), the external captures and the crafted captures
below, both engines decode the file once and

1. the audit gives the same findings: sorted (rule, severity, frames) of
   audit_records(path, records, AuditOptions()) fed with decode_file(path) and with
   tshark_records(path);
2. the engines report the same frames, in the same order and of the same kind, and every
   decoded dict is equal key for key, except:
   - ``time`` of frames in ERF records: tshark reports the ERF header's timestamp, decode.py
     the pcap record's; they are compared to within a microsecond (elsewhere exactly);
   - ``value_hex`` of an LS attribute (decode.py's raw value of an attribute whose value it
     cannot dissect): the plugin shows no raw value bytes. No rule reads it.

The engine checks the output of every tshark run it makes for "Lua Error" and "dissector
bug" items (and stderr for Lua loading errors) and raises TsharkEngineError (tshark exits 0
even then): test_lua_error_* prove that the check works, so every comparison above ran on
clean tshark output.
"""

from __future__ import annotations

import functools
import re
import struct
import subprocess
from pathlib import Path

import pytest
from scapy.contrib.roce import BTH, GRH
from scapy.packet import Raw

from ibpath_scapy.engines import tshark as tshark_engine
from ibpath_scapy.audit.engine import audit_records
from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.craft import CaptureBuilder
from ibpath_scapy.engines.scapy.decode import DecodeStats, decode_file
from ibpath_scapy.capture.encap import erf_record, exported_pdu, native_ib_frame, rocev2_frame
from ibpath_scapy.facts.kernelview import blob_from_array, blob_from_ls_response
from ibpath_scapy.layers import DETH, LRH, MAD, RMPP, PathRecord, SAHeader
from ibpath_scapy.layers.coded import RawCode
from ibpath_scapy.layers.cm import CM_MESSAGE_CLASSES, CMDrep, CMDreq, CMMra, CMRej, CMRep, CMRtu
from ibpath_scapy.layers.netlink import (
    PACKET_KERNEL,
    PACKET_USER,
    LsAttr,
    LsIpResolveRequest,
    LsIpv4,
    LsQosClass,
    LsResolveResponse,
    LsSetTimeout,
    LsTclass,
    LsTimeout,
    NetlinkCooked,
    RdmaNLMsgHdr,
)
from ibpath_scapy.layers.pathdata import PathArray, PathRecData, apm_blob, forward_return_gmp_blob
from ibpath_scapy.capture.pcapio import CaptureError, PcapWriter, read_frames
from ibpath_scapy.facts.rmpp import segment
from ibpath_scapy.engines.tshark import TsharkEngineError, blob_from_records, tshark_records

from tshark_util import tshark_env

ROOT = Path(__file__).resolve().parents[1]
EXTERNAL = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "external"
CORPUS = sorted(p for p in (ROOT / "captures").rglob("*") if p.suffix in (".pcap", ".pcapng"))
EXTERNALS = sorted(EXTERNAL.glob("*.pcap")) if EXTERNAL.is_dir() else []

pytestmark = pytest.mark.skipif(tshark_engine.tshark_path() is None,
                                reason="tshark is not installed (apt-get install tshark)")

LINKTYPE_ERF = 197
L, R, X = "fe80::2:c903:0:1", "fe80::2:c903:0:2", "fe80::2:c903:0:9"


def pr(i: int = 0, **kw) -> PathRecord:
    """A resolved path L → R as OpenSM answers it (selectors 2, reversible)."""
    d = dict(sgid=L, dgid=R, slid=1, dlid=2 + i, pkey=0xFFFF, reversible=1, mtu=4, rate=3,
             mtu_selector=2, rate_selector=2, packet_life_time_selector=2, packet_life_time=18)
    d.update(kw)
    return PathRecord(**d)


def rev(p: PathRecord) -> PathRecord:
    return pr(sgid=p.dgid, dgid=p.sgid, slid=p.dlid, dlid=p.slid)


# --------------------------------------------------------------------------------------------
# Crafted captures
# --------------------------------------------------------------------------------------------

def craft_sa(b: CaptureBuilder) -> None:
    """SA traffic: RMPP answers (complete, missing a segment, a repeated segment and an ACK),
    Get/GetResp, error status, retransmission, no answer, reserved bits, a mismatch, and the
    resolution's blob and CM REQ."""
    fwd = b.sa_query(pr(numb_path=1), method=0x12)  # GetTable: 3 RMPP segments
    b.sa_answer(fwd, [pr(i) for i in range(8)])
    back = b.sa_query(rev(pr()))  # Get + GetResp
    b.sa_answer(back, [rev(pr())])
    gone = b.sa_query(pr(dgid=X))  # NO_RECORDS
    b.sa_answer(gone, [], status=0x0300)
    again = b.sa_query(pr(dgid=X, pkey=0x8001))
    b.sa_query(pr(), retransmit_of=again)  # retried, never answered
    part = b.sa_query(pr(sl=3), method=0x12)
    b.sa_answer(part, [pr(i) for i in range(8)], skip_segments=(2,))  # never completes
    rep = b.sa_query(pr(sl=1), method=0x12)
    hdr = bytes(MAD(method=0x92, transaction_id=rep.tid) / RMPP(rmpp_version=1, rmpp_type=1)
                / SAHeader(component_mask=0x300C, attribute_offset=8))[:56]
    segs = segment(hdr + b"".join(bytes(pr(i, sl=1)) for i in range(6)))
    b.mad(segs[0], from_sa=True)
    b.mad(segs[0], from_sa=True)  # repeated segment
    b.mad(MAD(method=0x92, transaction_id=rep.tid)
          / RMPP(rmpp_version=1, rmpp_type=2, rmpp_flags=1, segment_number=1, payload_length=2)
          / SAHeader())  # the requester's ACK
    b.mad(segs[1], from_sa=True)
    odd = b.sa_query(pr(dgid=X, sl=2))
    b.sa_answer(odd, [pr(sgid=L, dgid=R, sl=5, reserved_353=1)])  # mismatch, reserved bits
    b.mad(MAD(method=0x12, attribute_id=0x11) / RMPP() / SAHeader())  # NodeRecord query
    b.sa_query(pr(), method=0x02)  # Set: not a PathRecord query method
    b.sa_query(PathRecord(sgid=L, dgid=R, numb_path=0), method=0x12, component_mask=0x100C)
    b.sa_query(pr(), component_mask=0x308C)  # a reserved component bit
    b.sa_query(pr(service_id=5), component_mask=0x300D)  # half a ServiceID
    odd = b.sa_query(pr(dlid=9))
    b.mad(MAD(method=0x81, transaction_id=odd.tid) / RMPP()
          / SAHeader(component_mask=0x300C, attribute_offset=4, records=[pr()]), from_sa=True)
    b.blob([(0x2B, pr())], set_option=0)
    b.cm_req(pr(), dst="192.168.2.25")
    b.cm_req(pr(sl=4), dst="192.168.2.25", comm_id=0x99)  # disagrees with the blob


def craft_ls(b: CaptureBuilder) -> None:
    """RDMA netlink local service: every path_use, LS_F_ERR, an unanswered request, mismatches,
    a header-only answer and an NLMSG_ERROR (Wireshark dissects both itself), two messages in
    one record, SET_TIMEOUT, IP_RESOLVE, a misflagged answer, odd and truncated attributes."""
    b.ls_request(1, path_use=2, sgid=L, dgid=R, service_id=0x1234, tclass=0)
    b.ls_response(1, [(0x2B, pr())])
    b.ls_request(2, path_use=0, sgid=L, dgid=R)
    b.ls_response(2, [(0x03, pr()), (0x0A, pr(1)), (0x12, rev(pr(2)))])
    b.ls_request(3, path_use=1, sgid=L, dgid=R)
    b.ls_response(3, [(0x12, pr())])  # no PRIMARY|OUTBOUND record
    b.ls_request(4, path_use=2, sgid=L, dgid=X)
    b.ls_response(4, [(0x2B, pr())], error=True)
    b.ls_request(5, path_use=2, sgid=L, dgid=R, pkey=0x8001)  # never answered
    b.ls_response(6, [(0x2B, pr(dgid=X, pkey=0x7FFF, reserved_464=5))])  # no request
    # a header-only answer, and an NLMSG_ERROR echoing a request header, with an answer
    # between them in the same record
    b.ls_request(7, path_use=2, sgid=L, dgid=R)
    header_only = bytes(RdmaNLMsgHdr(rdma_op=0, nlmsg_flags=0, nlmsg_seq=7))
    answer = bytes(RdmaNLMsgHdr(rdma_op=0, nlmsg_seq=8) / LsResolveResponse(
        attributes=[LsAttr(nla_type=1) / PathRecData(flags=0x2B, path_record=pr())]))
    error = struct.pack("<IHHIIi", 36, 2, 0, 9, 0, -2) + header_only
    b._write(bytes(NetlinkCooked(pkttype=PACKET_KERNEL)) + header_only + answer + error, 253)
    # a resolver's answer flagged NLM_F_REQUEST (the kernel refuses it)
    b.ls_request(10, path_use=2, sgid=L, dgid=R)
    misflagged = RdmaNLMsgHdr(rdma_op=0, nlmsg_flags=1, nlmsg_seq=10) / LsResolveResponse(
        attributes=[LsAttr(nla_type=1) / PathRecData(flags=0x2B, path_record=pr())])
    b._write(bytes(NetlinkCooked(pkttype=PACKET_KERNEL, messages=[misflagged])), 253)
    # two messages and three stray bytes in one record
    timeout = RdmaNLMsgHdr(rdma_op=1, nlmsg_seq=11) / LsSetTimeout(
        attributes=[LsAttr(nla_type=2) / LsTimeout(timeout_ms=3000)])
    b._write(bytes(NetlinkCooked(pkttype=PACKET_KERNEL, messages=[RdmaNLMsgHdr(answer), timeout]))
             + b"\x01\x02\x03", 253)
    ip = RdmaNLMsgHdr(rdma_op=2, nlmsg_flags=1, nlmsg_seq=12) / LsIpResolveRequest(
        ifindex=3, attributes=[LsAttr(nla_type=9) / LsIpv4(ipv4="10.0.0.1")])
    b._write(bytes(NetlinkCooked(pkttype=PACKET_USER, messages=[ip])), 253)
    # odd attributes: unknown mandatory type, wrong sizes, NESTED, QOS_CLASS; a PATH_RECORD
    # that is too long and one that is too short
    rec = bytes(PathRecData(flags=0x2B, path_record=pr()))
    odd = RdmaNLMsgHdr(rdma_op=0, nlmsg_flags=0, nlmsg_seq=13) / LsResolveResponse(attributes=[
        LsAttr(nla_type=11, mandatory=1) / Raw(b"abcd"),
        LsAttr(nla_type=7) / Raw(b"\x01\x02\x03"),
        LsAttr(nla_type=6, nested=1) / LsTclass(tclass=1),
        LsAttr(nla_type=8) / LsQosClass(qos_class=5),
        LsAttr(nla_type=1, nla_len=84) / Raw(rec + bytes(8)),
        LsAttr(nla_type=1) / Raw(rec[:40])])
    b._write(bytes(NetlinkCooked(pkttype=PACKET_KERNEL, messages=[odd])), 253)
    cut = bytearray(answer)
    cut[16:18] = struct.pack("<H", 200)  # an nla_len past the end of the message
    b._write(bytes(NetlinkCooked(pkttype=PACKET_KERNEL)) + bytes(cut), 253)
    b._write(bytes(NetlinkCooked(pkttype=PACKET_KERNEL)) + answer[:60], 253)  # record cut
    b._write(bytes(NetlinkCooked(pkttype=PACKET_USER)) + bytes(RdmaNLMsgHdr(
        rdma_op=0, nlmsg_flags=1, nlmsg_seq=14, nlmsg_len=40)) + bytes(24), 253)  # short header
    b._write(bytes(NetlinkCooked(pkttype=4, messages=[RdmaNLMsgHdr(rdma_client=5, rdma_op=1,
                                                                    nlmsg_seq=15)])), 253)
    b._write(bytes(NetlinkCooked(pkttype=4)), 253)  # no message at all


def craft_blobs(b: CaptureBuilder) -> None:
    """rdma_set_option optvals with set_option comments: conforming, APM, the seed's layout,
    ragged, empty, unknown (byte-swapped) flags, reserved words and bits, query templates."""
    b.blob([(0x2B, pr())], set_option=0)
    b.blob(bytes(apm_blob(pr(), pr(1))), set_option=0)
    b.blob(bytes(forward_return_gmp_blob(pr(reversible=0), rev(pr(1)), pr(2))), set_option=-22)
    b.blob(bytes(PathArray(records=[PathRecData(flags=0x2B, path_record=pr())])) + b"xyz",
           set_option=-22)
    b.blob(b"\x2b\x00\x00\x00")
    b.blob([(0x2B000000, pr()), (0x00, pr(1, reserved_464=1)), (0x0C, pr(2))])
    b.blob(bytes(PathArray(records=[PathRecData(flags=0x2B, reserved=7, path_record=pr())])))
    b.blob([(0x2B, PathRecord(sgid=L, dgid=R, pkey=0, rate=RawCode(0), mtu_selector=0))])
    b.blob([(0x2C, pr()), (0x06, pr())])  # alternates only, PRIMARY+ALTERNATE
    b.blob(bytes(apm_blob(pr(), pr())))  # the alternate is the primary route


def craft_cm(b: CaptureBuilder) -> None:
    """A resolution (both ways), its blob and CM REQ, then the other CM messages."""
    q = b.sa_query(pr(reversible=1))
    b.sa_answer(q, [pr()])
    q = b.sa_query(rev(pr()))
    b.sa_answer(q, [rev(pr())])
    b.blob(bytes(apm_blob(pr(), pr(1))), set_option=0)
    b.cm_req(pr(), alternate=pr(2), dst="192.168.2.25")
    b.cm_req(pr(), local_ack_timeout=2, dst="192.168.2.25", comm_id=0x77)
    for cls in (CMRep, CMRtu, CMRej, CMMra, CMDreq, CMDrep):
        attr = next(a for a, c in CM_MESSAGE_CLASSES.items() if c is cls)
        extra = {"ari": b"\x01\x02"} if cls is CMRej else {}
        b.mad(MAD(mgmt_class=7, method=3, attribute_id=attr, transaction_id=5)
              / cls(local_comm_id=7, **extra))
    b.mad(MAD(mgmt_class=0x81, method=1, attribute_id=0x20, status=0x8000))  # DR SMP
    b.mad(MAD(mgmt_class=0x04, method=1, attribute_id=0x12))  # PerfMgt
    b._write(bytes(rocev2_frame(MAD(transaction_id=0x42) / RMPP() / SAHeader(records=[pr()]),
                                src="fe80::1", dst="fe80::2")), 1)  # RoCEv2 over IPv6


def craft_resolver(b: CaptureBuilder) -> None:
    """Resolutions that break the resolver rules: no follow-up queries after a path that is
    not reversible, redundant queries after a reversible one, a blob after an error status,
    blobs whose records disagree on their endpoints."""
    a, c, e = "fe80::a", "fe80::c", "fe80::e"
    q = b.sa_query(pr(sgid=a, dgid=c, reversible=1), component_mask=0x380C)
    b.sa_answer(q, [pr(sgid=a, dgid=c, reversible=0)])
    b.blob([(0x2B, pr(sgid=a, dgid=c, reversible=0))], set_option=0)
    q = b.sa_query(pr(sgid=a, dgid=e))
    b.sa_answer(q, [pr(sgid=a, dgid=e)])
    q = b.sa_query(pr(sgid=e, dgid=a))
    b.sa_answer(q, [pr(sgid=e, dgid=a)])
    q = b.sa_query(pr(sgid=a, dgid=e, reversible=1), component_mask=0x380C)
    b.sa_answer(q, [pr(sgid=a, dgid=e)])
    b.blob([(0x2B, pr(sgid=a, dgid=e))], set_option=0)
    q = b.sa_query(pr(sgid=c, dgid=e))
    b.sa_answer(q, [], status=0x0300)
    b.blob([(0x2B, pr(sgid=c, dgid=e)), (0x12, pr(sgid=c, dgid=a))])


def craft_ib(b: CaptureBuilder) -> None:
    """Native IB in ERF records (ibdump): SA with RMPP, CM REQ, a bad VCRC, a bad ICRC."""
    q = b.sa_query(pr(numb_path=1), method=0x12)
    b.sa_answer(q, [pr(i) for i in range(5)])
    q = b.sa_query(pr())
    b.sa_answer(q, [pr()])
    b.cm_req(pr())
    frame = bytes(native_ib_frame(MAD(transaction_id=77) / RMPP() / SAHeader(records=[pr()]),
                                  slid=3, dlid=4))
    b._write(erf_record(frame[:-1] + bytes([frame[-1] ^ 1]), b.t), LINKTYPE_ERF)
    b._write(erf_record(frame[:-6] + bytes(4) + frame[-2:], b.t), LINKTYPE_ERF)


def craft_bad_icrc(b: CaptureBuilder) -> None:
    """RoCEv2 frames whose ICRC does not match, among good ones."""
    q = b.sa_query(pr())
    good = bytes(rocev2_frame(MAD(method=0x81, transaction_id=q.tid) / RMPP()
                              / SAHeader(attribute_offset=8, records=[pr()]),
                              src=b.sa, dst=b.requester))
    b._write(good[:-1] + bytes([good[-1] ^ 0xFF]), 1)
    b.blob([(0x2B, pr())], set_option=0)
    q = b.sa_query(pr(sl=1))
    b.sa_answer(q, [pr(sl=1)])


def write_truncated(path: Path) -> None:
    """A classic pcap (microseconds): a MAD cut short, 10 bytes of MAD, a DETH cut short, a MAD
    of 272 bytes, and good frames around them."""
    def frame(tid, extra=b""):
        mad = bytes(MAD(transaction_id=tid) / RMPP() / SAHeader(records=[pr()])) + extra
        return bytes(rocev2_frame(mad, src="192.168.2.24", dst="192.168.2.1"))

    with PcapWriter(str(path), 1) as w:
        w.write(frame(1), 1.000001)
        w.write(frame(2)[:62 + 100], 1.5)
        w.write(frame(3)[:62 + 10], 2.25)
        w.write(frame(4)[:58], 3.125)
        w.write(frame(5, bytes(16)), 4.0625)
        w.write(frame(6), 5.999999)


def write_exported_ib(path: Path) -> None:
    """Native IB as exported PDUs "infiniband" (link type 252, nanoseconds), one with a GRH."""
    import ipaddress

    def mad(tid):
        return MAD(transaction_id=tid) / RMPP() / SAHeader(records=[pr()])

    grh = bytes(LRH(lnh=3, slid=5, dlid=6)
                / GRH(sgid=int(ipaddress.IPv6Address(L)), dgid=int(ipaddress.IPv6Address(R)))
                / BTH(opcode=0x64, dqpn=1) / DETH(src_qp=1) / mad(79))
    with PcapWriter(str(path), 252, nano=True) as w:
        w.write(exported_pdu(native_ib_frame(mad(78), slid=3, dlid=4), "infiniband"), 1.123456789)
        w.write(exported_pdu(grh, "infiniband"), 2.25)
        w.write(exported_pdu(bytes(native_ib_frame(mad(80), slid=3, dlid=4))[:100], "infiniband"), 3.0)


CRAFTED = {
    "sa.pcapng": (craft_sa, "rocev2"),
    "ls.pcapng": (craft_ls, "rocev2"),
    "blobs.pcapng": (craft_blobs, "rocev2"),
    "cm.pcapng": (craft_cm, "rocev2"),
    "resolver.pcapng": (craft_resolver, "rocev2"),
    "ib.pcapng": (craft_ib, "ib"),
    "bad-icrc.pcapng": (craft_bad_icrc, "rocev2"),
}
OTHER = {"truncated.pcap": write_truncated, "exported-ib.pcap": write_exported_ib}
RAW_BLOB = "optval.bin"


@pytest.fixture(scope="module")
def crafted(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("crafted")
    for name, (build, encap) in CRAFTED.items():
        with CaptureBuilder(str(d / name), encap=encap) as b:
            build(b)
    for name, write in OTHER.items():
        write(d / name)
    (d / RAW_BLOB).write_bytes(bytes(apm_blob(pr(), pr(1))))
    return d


CAPTURES = ([pytest.param(("corpus", p), id=str(p.relative_to(ROOT))) for p in CORPUS]
            + [pytest.param(("external", p), id=f"external/{p.name}") for p in EXTERNALS]
            + [pytest.param(("crafted", n), id=f"crafted/{n}")
               for n in [*CRAFTED, *OTHER, RAW_BLOB]])


def _path(which, crafted: Path) -> Path:
    kind, p = which
    return crafted / p if kind == "crafted" else p


@functools.lru_cache(maxsize=None)
def both(path: str) -> tuple[list[dict], list[dict]]:
    """Each engine's records of the file, decoded once for all the tests."""
    return list(decode_file(path)), list(tshark_records(path))


def findings(path: str, records: list[dict]) -> list[tuple]:
    fa = audit_records(path, records, AuditOptions())
    return sorted((f.rule, f.severity, f.frames) for f in fa.findings)


# --------------------------------------------------------------------------------------------
# The two engines agree
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", CAPTURES)
def test_audit_findings_are_identical(which, crafted):
    path = str(_path(which, crafted))
    scapy, tshark = both(path)
    assert findings(path, tshark) == findings(path, scapy)


def _erf_frames(path: str) -> set[int]:
    try:
        return {f.number for f in read_frames(path) if f.linktype == LINKTYPE_ERF}
    except CaptureError:
        return set()  # a raw blob file


def _comparable(rec: dict) -> dict:
    """The record without what the module docstring excludes (value_hex)."""
    out = dict(rec)
    ls = out.get("ls")
    if ls and "attributes" in ls:
        out["ls"] = {**ls, "attributes": [{k: v for k, v in a.items() if k != "value_hex"}
                                          for a in ls["attributes"]]}
    return out


@pytest.mark.parametrize("which", CAPTURES)
def test_decoded_records_are_identical(which, crafted):
    path = str(_path(which, crafted))
    scapy, tshark = both(path)
    assert [(r["frame"], r["kind"]) for r in tshark] == [(r["frame"], r["kind"]) for r in scapy]
    erf = _erf_frames(path)
    for a, b in zip(scapy, tshark):
        a, b = _comparable(a), _comparable(b)
        if a["frame"] in erf and "time" in a:
            assert abs(a.pop("time") - b.pop("time")) < 1e-6, f"frame {a['frame']}: time"
        for key in sorted(set(a) | set(b)):
            assert b.get(key, "<missing>") == a.get(key, "<missing>"), (
                f"{Path(path).name} frame {a['frame']} ({a['kind']}): {key!r} differs")


def test_crafted_captures_exercise_the_rule_families(crafted):
    """The comparison means something: the crafted captures fire findings of every family
    and decode every kind of record."""
    rules, kinds = set(), set()
    for name in [*CRAFTED, *OTHER, RAW_BLOB]:
        path = str(crafted / name)
        scapy, _ = both(path)
        rules |= {f[0] for f in findings(path, scapy)}
        kinds |= {r["kind"] for r in scapy}
    for prefix in ("SAQ-", "SAR-", "BLOB-", "RES-LS-", "RES-", "CM-", "DECODE-"):
        assert any(r.startswith(prefix) for r in rules), (prefix, sorted(rules))
    assert len(rules) >= 30, sorted(rules)
    assert {"sa", "cm", "smp", "perf", "ls", "rdma_netlink", "blob", "malformed"} <= kinds


def test_known_differences_are_where_the_docstring_says(crafted):
    """value_hex and ERF times are the only differences, and they occur in the crafted set."""
    scapy, tshark = both(str(crafted / "ls.pcapng"))
    hexes = [a for r in scapy for a in r.get("ls", {}).get("attributes", []) if "value_hex" in a]
    assert hexes and not any("value_hex" in a for r in tshark
                             for a in r.get("ls", {}).get("attributes", []))
    opensm = ROOT / "captures" / "opensm" / "opensm-saquery.pcap"  # ERF records in a pcap
    if opensm.exists():
        scapy, tshark = both(str(opensm))
        deltas = [abs(a["time"] - b["time"]) for a, b in zip(scapy, tshark)]
        assert any(deltas) and max(deltas) < 1e-6


def test_stats_are_filled_as_the_decoder_fills_them(crafted):
    from ibpath_scapy.engines.scapy.decode import Decoder

    path = str(crafted / "ls.pcapng")
    d = Decoder()
    list(decode_file(path, d))
    stats = DecodeStats()
    list(tshark_records(path, stats=stats))
    assert stats == d.stats


# --------------------------------------------------------------------------------------------
# The kernel-view facts from record dicts
# --------------------------------------------------------------------------------------------

def test_blob_from_records_matches_kernelview_on_packets():
    array = forward_return_gmp_blob(pr(reversible=0), rev(pr(1)), pr(2))
    raw = bytes(array) + b"\x00" * 5
    recs = [{"flags": int(r.flags)} for r in PathArray(raw).records]
    assert blob_from_records(recs, length=len(raw)) == blob_from_array(PathArray(raw), len(raw))

    attrs = [LsAttr(nla_type=1) / PathRecData(flags=0x2B, path_record=pr()),
             LsAttr(nla_type=1, mandatory=1) / PathRecData(flags=0x03, path_record=pr()),
             LsAttr(nla_type=4) / Raw(bytes(20))]  # DGID longer than 16: nla_parse fails
    msg = RdmaNLMsgHdr(nlmsg_flags=0, nlmsg_seq=1) / LsResolveResponse(attributes=attrs)
    parsed = RdmaNLMsgHdr(bytes(msg)).payload.attributes
    dicts = [{"nla_type": a.raw_type(), "nla_len": a.nla_len} for a in parsed]
    dicts[0]["blob_record"], dicts[1]["blob_record"] = 0, 1
    recs = [{"flags": 0x2B}, {"flags": 0x03}]
    want = blob_from_ls_response(0, parsed, 2)
    assert want.ls.parse_error and want.ls.nla_types == (1, 0x2001)
    assert blob_from_records(recs, nlmsg_flags=0, attributes=dicts, path_use=2) == want


# --------------------------------------------------------------------------------------------
# Failures: one line naming the file
# --------------------------------------------------------------------------------------------

def _one_line(exc: BaseException, path) -> str:
    text = str(exc)
    assert "\n" not in text and str(path) in text, text
    return text


def test_lua_error_while_dissecting_raises(crafted, tmp_path):
    """A plugin that raises on one frame: tshark exits 0 and prints a "Lua Error" item; the
    engine stops there with the frame and the error."""
    text = tshark_engine.plugin_path().read_text()
    hook = 'HOOKS["SAHeader"] = function(tvb, pinfo, t, off, o, ctx, v)\n'
    assert hook in text
    broken = tmp_path / "broken.lua"
    broken.write_text(text.replace(hook, hook + '  if pinfo.number == 3 then error("boom") end\n'))
    path = crafted / "sa.pcapng"
    got = []
    with pytest.raises(TsharkEngineError) as e:
        for rec in tshark_records(str(path), plugin=broken):
            got.append(rec["frame"])
    msg = _one_line(e.value, path)
    assert "frame 3" in msg and "Lua Error" in msg and "boom" in msg
    assert got == [1, 2]


def test_lua_error_while_loading_raises(crafted, tmp_path):
    bad = tmp_path / "bad.lua"
    bad.write_text(tshark_engine.plugin_path().read_text() + "\nthis is not lua\n")
    path = crafted / "blobs.pcapng"
    with pytest.raises(TsharkEngineError) as e:
        list(tshark_records(str(path), plugin=bad))
    assert "Lua" in _one_line(e.value, path)


def test_dissector_bug_items_are_caught():
    text = ('  {\n    "_source": {\n      "layers": {\n        "frame": {"frame.number": "4"},\n'
            '        "[Dissector bug, protocol ibpath: proto.c:123: failed assertion]": ""\n')
    assert tshark_engine._FAILURE.search(text)
    assert not tshark_engine._FAILURE.search('        "frame.comment": "Lua Error: quoted"\n')


def test_tshark_missing(crafted, monkeypatch):
    monkeypatch.setenv("TSHARK", "/nonexistent/tshark")
    path = crafted / "sa.pcapng"
    with pytest.raises(TsharkEngineError) as e:
        list(tshark_records(str(path)))
    assert "tshark not found" in _one_line(e.value, path)


def test_capture_cut_short_raises_after_the_frames_before(tmp_path, external):
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((external / "ib-erf-sminfo-cm.pcap").read_bytes()[:5000])
    want = []
    with pytest.raises(CaptureError) as decode_error:
        for rec in decode_file(str(cut)):
            want.append(rec)
    got = []
    with pytest.raises(TsharkEngineError) as e:
        for rec in tshark_records(str(cut)):
            got.append(rec)
    # the default engine's message: tshark reads what the format allows as pcapio does
    assert _one_line(e.value, cut) == _one_line(decode_error.value, cut)
    assert "truncated packet data" in str(e.value)
    assert [(r["frame"], r["kind"]) for r in got] == [(r["frame"], r["kind"]) for r in want]


def test_not_a_capture_nor_a_blob(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("root:x:0:0:root:/root:/bin/bash\n" * 20)
    with pytest.raises(CaptureError) as e:  # TsharkEngineError is a CaptureError
        list(tshark_records(str(f)))
    assert "not a capture or blob file" in _one_line(e.value, f)


def test_linktype_infiniband_is_refused_by_tshark(tmp_path):
    """Documented difference: tshark 4.0 does not read LINKTYPE_INFINIBAND (247) pcaps."""
    f = tmp_path / "ib247.pcap"
    with PcapWriter(str(f), 247) as w:
        w.write(bytes(native_ib_frame(MAD(transaction_id=1) / RMPP() / SAHeader(records=[pr()]),
                                      slid=1, dlid=2)), 1.0)
    assert [r["kind"] for r in decode_file(str(f))] == ["sa"]
    with pytest.raises(TsharkEngineError) as e:
        list(tshark_records(str(f)))
    assert "247" in _one_line(e.value, f)


# --------------------------------------------------------------------------------------------
# The field names the engine reads are the plugin's
# --------------------------------------------------------------------------------------------

def test_every_field_the_engine_reads_is_registered_by_the_plugin(crafted):
    """Names come from luagen's model of the layers; tshark -G lists what the plugin (and the
    engine's helper) register."""
    for name in [*CRAFTED, *OTHER]:
        both(str(crafted / name))  # fills the engine's name cache
    helper = crafted / "helper.lua"
    helper.write_text(tshark_engine._HELPER_LUA)
    out = subprocess.run([tshark_engine.tshark_path(), "-G", "fields",
                          "-X", f"lua_script:{tshark_engine.plugin_path()}",
                          "-X", f"lua_script:{helper}"],
                         capture_output=True, text=True, timeout=120, env=tshark_env())
    assert "Lua" not in out.stderr, out.stderr
    registered = {line.split("\t")[2] for line in out.stdout.splitlines()
                  if line.count("\t") >= 2}
    used = {abbrev for lf in tshark_engine._LAYER_CACHE.values() for _, abbrev, _ in lf.fields}
    used |= {lf.node for lf in tshark_engine._LAYER_CACHE.values()}
    engine_src = "".join(p.read_text() for p in Path(tshark_engine.__file__).parent.glob("*.py"))
    engine_src = engine_src.replace('"ibpath_scapy"', "")  # the package, for its data files
    used |= set(re.findall(r'"(ibpath[._][a-z_.]+)"', engine_src + tshark_engine._HELPER_LUA))
    missing = sorted(n for n in used if n not in registered and not n.endswith(".lua"))
    assert not missing, missing


# --------------------------------------------------------------------------------------------
# Another copy of the plugin loaded first (issue 39)
# --------------------------------------------------------------------------------------------

def _tshark_loading_first(tmp_path: Path, copy: Path) -> str:
    """A tshark that loads copy before anything the engine asks for, as a copy in a global
    plugin folder is (the engine's HOME is its own, so that is where one can come from)."""
    wrapper = tmp_path / "tshark"
    wrapper.write_text(f'#!/bin/sh\nexec {tshark_engine.tshark_path()} '
                       f'-X lua_script:{copy} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def test_engine_goes_on_with_an_identical_copy_loaded_first(tmp_path, crafted):
    copy = tmp_path / "global" / "ibpath.lua"
    copy.parent.mkdir()
    copy.write_bytes(tshark_engine.plugin_path().read_bytes())
    path = str(crafted / "sa.pcapng")
    assert list(tshark_records(path, tshark=_tshark_loading_first(tmp_path, copy))) == \
        list(tshark_records(path))


def test_engine_refuses_a_different_copy_loaded_first(tmp_path, crafted):
    """The plugin used to fail to load ("Lua: Error during loading": Proto of a taken name);
    now it steps aside, so the engine must see that the copy in its place is not its own."""
    stale = tmp_path / "global" / "ibpath.lua"
    stale.parent.mkdir()
    stale.write_text(tshark_engine.plugin_path().read_text().replace(
        '"Primary Local GID"', '"Primary local GID"'))
    path = crafted / "sa.pcapng"
    with pytest.raises(TsharkEngineError) as e:
        list(tshark_records(str(path), tshark=_tshark_loading_first(tmp_path, stale)))
    assert _one_line(e.value, path).endswith(
        f": tshark loaded another ibpath plugin before this package's ({stale}), which "
        f"differs from {tshark_engine.plugin_path()}; the capture was not read (remove that "
        "copy, or install this one over it with `ibpath dissector install --dir`)")
