"""RDMA netlink local-service rules (audit-rules.md RES-LS-*): each rule fired by an exchange
that breaks it and kept quiet by a near-identical one, with exact rule IDs and frame numbers.

Captures are written with CaptureBuilder (kernel → resolver requests, resolver → kernel
responses, link type 253); the requests the builder cannot express (QOS_CLASS, a
PATH_RECORD attribute with RDMA_NLA_F_MANDATORY) are packed with struct from the C layout
(struct nlmsghdr, struct rdma_ls_resolve_header, struct nlattr). Findings are compared over
the blob and LS rules (the engine passes LS responses to the blob rules too).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from ibpath_scapy.craft.builder import CaptureBuilder

from test_rules_blob import (
    FWD,
    MINE,
    GMP_BIDIR,
    L,
    L_TEXT,
    R,
    R_TEXT,
    RET,
    X,
    X_TEXT,
    audit,
    cli_json,
    err,
    pr,
    rec,
    warn,
)

UNI, GMP, ALL = 1, 2, 0
SID = 0x0106000000001234
MANDATORY = 0x2000
PACKET_USER, PACKET_KERNEL = 6, 7


def cooked(pkttype: int) -> bytes:
    """The nlmon cooked header (LINKTYPE_NETLINK): pkttype, ARPHRD_NETLINK, family NETLINK_RDMA."""
    return struct.pack("!HHH8sH", pkttype, 824, 0, b"\0" * 8, 20)


def nlattr(typ: int, value: bytes) -> bytes:
    return struct.pack("<HH", 4 + len(value), typ) + value + b"\0" * (-len(value) % 4)


def nlmsg(seq: int, flags: int, body: bytes) -> bytes:
    return struct.pack("<IHHII", 16 + len(body), 0x1000, flags, seq, 0) + body


def raw_request(b: CaptureBuilder, seq: int, path_use: int, *, pkey=0xFFFF, qos=None) -> int:
    """sa_query.c ib_nl_send_msg: header, then mandatory attributes in ib_nl_set_path_rec_attrs'
    order (SERVICE_ID, DGID, SGID, TCLASS, PKEY, QOS_CLASS), values in cpu order."""
    body = struct.pack("64sBB2x", b"mlx5_0", 1, path_use)
    body += nlattr(3 | MANDATORY, struct.pack("<Q", SID)) + nlattr(4 | MANDATORY, R)
    body += nlattr(5 | MANDATORY, L) + nlattr(7 | MANDATORY, struct.pack("<H", pkey))
    if qos is not None:
        body += nlattr(8 | MANDATORY, struct.pack("<H", qos))
    return b._write(cooked(PACKET_USER) + nlmsg(seq, 0x1, body), 253)


def raw_response(b: CaptureBuilder, seq: int, records: list[bytes], *, nla_type=1) -> int:
    """acm_nl_send: nlmsghdr, then one PATH_RECORD attribute per struct ib_path_rec_data."""
    body = b"".join(nlattr(nla_type, r) for r in records)
    return b._write(cooked(PACKET_KERNEL) + nlmsg(seq, 0, body), 253)


def capture(tmp_path: Path, name: str, build) -> Path:
    cap = tmp_path / name
    with CaptureBuilder(str(cap)) as b:
        build(b)
    return cap


def exchange(tmp_path, path_use, records, name="x.pcapng", **req):
    def build(b):
        b.ls_request(21, path_use=path_use, sgid=L_TEXT, dgid=R_TEXT, **req)
        b.ls_response(21, records)
    return capture(tmp_path, name, build)


RET_PR = dict(sgid=R, dgid=L, slid=2, dlid=1, rev=0)


# -- RES-LS-PATHUSE -----------------------------------------------------------------------------

@pytest.mark.parametrize("path_use, bad, good, judges", [
    (UNI, [(RET, RET_PR)], [(FWD, dict(rev=0))], ["ls-legacy", "ls-multi", "ls-multi-6.1"]),
    (GMP, [(FWD, dict(rev=0))], [(GMP_BIDIR, {})], ["ls-legacy"]),
    (ALL, [(FWD, dict(rev=0))], [(FWD, dict(rev=0)), (GMP_BIDIR, {})],
     ["ls-multi", "ls-multi-6.1"]),
], ids=["unidirectional", "gmp", "all"])
def test_path_use_not_satisfied(tmp_path, path_use, bad, good, judges):
    """UNIDIRECTIONAL needs PRIMARY|OUTBOUND (every kernel sends it); GMP, sent by kernels
    < 6.1, needs 0x2B; ALL, sent by kernels ≥ 6.1 (6.1/6.2 and 6.3 on, each reading judged),
    needs a record cma_query_handler files as the GMP path."""
    found = audit(exchange(tmp_path, path_use, [(f, pr(**kw)) for f, kw in bad]), messages=True)
    pathuse = [x for x in found if x[0] == "RES-LS-PATHUSE"]
    assert [x[:3] for x in pathuse] == [err("RES-LS-PATHUSE", [1, 2])] * len(judges)
    for msg, profile in zip(sorted(x[3] for x in pathuse), judges):
        assert f": {profile} " in msg
    assert [x[:3] for x in found if x[0] != "RES-LS-PATHUSE"] == [
        err("BLOB-KERNEL-REJECT", [2])] * 3
    assert audit(exchange(tmp_path, path_use, [(f, pr(**kw)) for f, kw in good], "ok")) == []


def test_path_use_all_with_a_primary_record_of_no_role(tmp_path):
    """cma_query_handler (6.3 on, ccae0447af0e): a PRIMARY record with none of GMP, INBOUND,
    OUTBOUND fails the route with -EINVAL; 6.1 and 6.2 (ls-multi-6.1) skip it and take the 0x2B
    record, as ls-legacy (mask 0x2B) does: only ls-multi rejects."""
    found = audit(exchange(tmp_path, ALL, [(GMP_BIDIR, pr()), (0x02, pr(flow=1))]), messages=True)
    assert [x[:3] for x in found] == [err("BLOB-KERNEL-REJECT", [2]), err("RES-LS-PATHUSE", [1, 2])]
    assert "ls-multi EINVAL" in found[1][3] and found[0][3].startswith("ls-multi")


def test_path_record_attribute_with_the_mandatory_bit(tmp_path):
    """ib_nl_process_good_resolve_rsp compares the raw nla_type with LS_NLA_TYPE_PATH_RECORD:
    an attribute typed 0x2001 is skipped, so its 0x2B record does not count."""
    def build(nla_type):
        def f(b):
            raw_request(b, 31, GMP)
            raw_response(b, 31, [rec(GMP_BIDIR)], nla_type=nla_type)
        return f
    found = audit(capture(tmp_path, "m.pcapng", build(1 | MANDATORY)), messages=True)
    assert [x[:3] for x in found] == [err("BLOB-KERNEL-REJECT", [2])] * 3 + [
        err("RES-LS-PATHUSE", [1, 2])]
    assert "nla_type 0x2001" in found[3][3]
    assert audit(capture(tmp_path, "ok.pcapng", build(1))) == []


def test_no_path_use_verdict_without_the_request(tmp_path):
    """A response whose request is not in the capture: RES-LS-PATHUSE cannot tell the path_use
    (BLOB-KERNEL-REJECT still judges it with the path_use each profile assumes)."""
    def build(b):
        b.ls_response(41, [(FWD, pr(rev=0))])
    assert audit(capture(tmp_path, "orphan.pcapng", build)) == [err("BLOB-KERNEL-REJECT", [1])] * 3


# -- RES-LS-MISMATCH ----------------------------------------------------------------------------

REQ = dict(pkey=0x8001, service_id=SID, tclass=0x10)


@pytest.mark.parametrize("kw, what", [
    (dict(pkey=0xFFFF), "P_Key 0xffff (request 0x8001)"),
    (dict(pkey=0x8001, tclass=0x20), "tclass 0x20 (request 0x10)"),
    (dict(pkey=0x8001, sid=SID + 1), "service_id 0x0106000000001235"),
    (dict(pkey=0x8001, dgid=X), f"DGID {X_TEXT} (request DGID {R_TEXT})"),
    (dict(pkey=0x8001, sgid=R), f"SGID {R_TEXT} (request SGID {L_TEXT})"),
])
def test_response_contradicts_the_request(tmp_path, kw, what):
    found = audit(exchange(tmp_path, GMP, [(GMP_BIDIR, pr(**kw))], **REQ), messages=True)
    mism = [x for x in found if x[0] == "RES-LS-MISMATCH"]
    assert [x[:3] for x in mism] == [err("RES-LS-MISMATCH", [1, 2])]
    assert what in mism[0][3]
    assert [x for x in found if x[0] != "RES-LS-MISMATCH"] == []


def test_response_that_matches_the_request(tmp_path):
    same = pr(pkey=0x8001, sid=SID, tclass=0x10)
    assert audit(exchange(tmp_path, GMP, [(GMP_BIDIR, same)], **REQ)) == []


def test_zero_service_id_and_tclass_are_what_opensm_returns(tmp_path):
    """OpenSM's pr_rcv_build_pr never fills ServiceID or TClass; ibacm hands its record over
    verbatim: 0 there is no contradiction."""
    assert audit(exchange(tmp_path, GMP, [(GMP_BIDIR, pr(pkey=0x8001))], **REQ)) == []


def test_qos_class(tmp_path):
    def build(qos_in_record):
        def f(b):
            raw_request(b, 51, GMP, qos=0x123)
            raw_response(b, 51, [rec(GMP_BIDIR, qos=qos_in_record)])
        return f
    found = audit(capture(tmp_path, "q.pcapng", build(0x124)), messages=True)
    assert [x[:3] for x in found] == [err("RES-LS-MISMATCH", [1, 2])]
    assert "qos_class 0x124 (request 0x123)" in found[0][3]
    assert audit(capture(tmp_path, "q0.pcapng", build(0))) == []
    assert audit(capture(tmp_path, "q1.pcapng", build(0x123))) == []


def test_inbound_record_is_compared_with_the_gids_swapped(tmp_path):
    """A multi-record answer (path_use ALL): the INBOUND record goes remote → local."""
    good = [(FWD, pr(rev=0)), (RET, pr(**RET_PR)), (GMP_BIDIR, pr(flow=3))]
    assert audit(exchange(tmp_path, ALL, good)) == []
    bad = [(FWD, pr(rev=0)), (RET, pr(slid=2, dlid=1, rev=0)), (GMP_BIDIR, pr(flow=3))]
    found = audit(exchange(tmp_path, ALL, bad, "bad.pcapng"), messages=True)
    assert [x[:3] for x in found] == [err("BLOB-ENDPOINTS", [2]), err("RES-LS-MISMATCH", [1, 2])]
    assert "record 1 (PRIMARY|INBOUND)" in found[1][3] and "GIDs swapped" in found[1][3]


# -- RES-LS-ERR ---------------------------------------------------------------------------------

def test_error_response(tmp_path):
    def build(error):
        def f(b):
            b.ls_request(61, path_use=GMP, sgid=L_TEXT, dgid=R_TEXT)
            b.ls_response(61, [] if error else [(GMP_BIDIR, pr())], error=error)
        return f
    found = audit(capture(tmp_path, "e.pcapng", build(True)), messages=True)
    assert [x[:3] for x in found] == [("RES-LS-ERR", "info", [1, 2])]
    assert "falls back to its own SA query" in found[0][3]
    assert audit(capture(tmp_path, "ok.pcapng", build(False))) == []


def test_error_response_without_its_request(tmp_path):
    def build(b):
        b.ls_response(62, [], error=True)
    assert audit(capture(tmp_path, "e.pcapng", build)) == [("RES-LS-ERR", "info", [1])]


# -- RES-LS-UNANSWERED --------------------------------------------------------------------------

def test_unanswered_request(tmp_path):
    def build(b):
        b.ls_request(71, path_use=GMP, sgid=L_TEXT, dgid=R_TEXT)       # 1: never answered
        b.ls_request(72, path_use=UNI, sgid=L_TEXT, dgid=R_TEXT)       # 2
        b.ls_response(72, [(FWD, pr(rev=0))])                          # 3
    found = audit(capture(tmp_path, "u.pcapng", build), messages=True)
    assert [x[:3] for x in found] == [warn("RES-LS-UNANSWERED", [1])]
    assert "seq 71 (path_use GMP) has no response" in found[0][3]
    assert "2000 ms" in found[0][3]


@pytest.mark.parametrize("delay, late", [(2.5, True), (1.5, False)])
def test_answer_after_the_kernel_timeout(tmp_path, delay, late):
    def build(b):
        b.ls_request(81, path_use=GMP, sgid=L_TEXT, dgid=R_TEXT)
        b.t += delay
        b.ls_response(81, [(GMP_BIDIR, pr())])
    found = audit(capture(tmp_path, "late.pcapng", build), messages=True)
    if late:
        assert [x[:3] for x in found] == [warn("RES-LS-UNANSWERED", [1, 2])]
        assert "answered after 2501 ms" in found[0][3]
    else:
        assert found == []


# -- several exchanges in one capture, through the command line ------------------------------

def test_cli_several_exchanges(tmp_path):
    def build(b):
        b.ls_request(1, path_use=GMP, sgid=L_TEXT, dgid=R_TEXT)        # 1
        b.ls_request(2, path_use=GMP, sgid=L_TEXT, dgid=R_TEXT)        # 2
        b.ls_response(2, [(GMP_BIDIR, pr(pkey=0x7FFF))])               # 3 P_Key contradicts
        b.ls_response(1, [(GMP_BIDIR, pr())])                          # 4 fine
        b.ls_request(3, path_use=GMP, sgid=L_TEXT, dgid=R_TEXT)        # 5
        b.ls_response(3, [], error=True)                               # 6
        b.ls_request(4, path_use=UNI, sgid=L_TEXT, dgid=R_TEXT)        # 7 unanswered
    rc, doc = cli_json(capture(tmp_path, "many.pcapng", build))
    assert rc == 1
    got = sorted((x["rule"], x["severity"], x["frames"]) for x in doc["findings"]
                 if x["rule"] in MINE)
    assert got == [("RES-LS-ERR", "info", [5, 6]), err("RES-LS-MISMATCH", [2, 3]),
                   warn("RES-LS-UNANSWERED", [7])]
    views = {(v["frame"], v["kind"]) for v in doc["kernel_view"]}
    assert {(3, "ls"), (4, "ls"), (6, "ls")} <= views
