"""Where the CM rules' verdicts change (issue 43, item 5: the mutants of the @rule bodies of
ibpath_scapy/audit/rules/cm.py that survived the older tests; tests/README.md).

Oracles: cm.c cm_format_req (a routed GMP path, hop limit > 1, gets the permissive LID
0xFFFF, a subnet-local one, hop limit <= 1, its SLID and DLID), the 6.1 change "RDMA/cm: Use
DLID from inbound/outbound PathRecords as the datapath DLID" (ls-multi: the INBOUND record's
DLID is the REQ's Primary Local Port LID for a routed path), cma.c cma_query_handler (which
record ls-multi files as inbound), roce_gid_mgmt.c (a RoCEv2 GID is the port's IP address,
IPv4 as ::ffff:a.b.c.d). Captures are built as in tests/test_rules_cm.py, whose helpers these
are.
"""

from __future__ import annotations

import pytest

from ibpath_scapy.craft.builder import CaptureBuilder

from test_rules_cm import GMP_LS, L, OUT_LS, PKEY, R, ROCE_R, cm_hits, modified, path
from test_rules_resolver import audit

ROUTED = modified(GMP_LS, hop_limit=3)


def ls_capture(f, records, req_path):
    with CaptureBuilder(str(f), encap="ib") as b:
        b.ls_request(5, path_use=0, sgid=L, dgid=R, pkey=PKEY)
        resp = b.ls_response(5, records)
        req = b.cm_req(req_path)
    return resp, req


def inbound(dlid):
    return path(R, L, slid=2, dlid=dlid, reversible=0)


def test_an_inbound_dlid_above_256_is_compared_by_value(tmp_path):
    f = tmp_path / "big.pcapng"
    ls_capture(f, [(0x0A, OUT_LS), (0x12, inbound(0x1234)), (0x2B, ROUTED)],
               modified(ROUTED, slid=0x1234, dlid=0xFFFF))
    assert cm_hits(audit(f, kernel="ls-multi")) == []


def test_hop_limit_1_is_subnet_local(tmp_path):
    gmp = modified(GMP_LS, hop_limit=1)
    f = tmp_path / "hop1.pcapng"
    resp, req = ls_capture(f, [(0x0A, OUT_LS), (0x12, inbound(5)), (0x2B, gmp)], gmp)
    fa = audit(f, kernel="ls-multi")
    msgs = [x.message for x in fa.findings if x.rule == "CM-REQ-INBOUND-LID"]
    assert len(msgs) == 1 and "the GMP path is subnet-local (hop limit ≤ 1), so the kernel " \
        "writes its SLID 1 there" in msgs[0]


def test_a_single_0x2b_record_is_its_own_inbound_path(tmp_path):
    """ls-multi files one 0x2B record as route->path_rec and nothing else: no INBOUND record,
    nothing for CM-REQ-INBOUND-LID to compare."""
    f = tmp_path / "one.pcapng"
    ls_capture(f, [(0x2B, ROUTED)], modified(ROUTED, slid=0xFFFF, dlid=0xFFFF))
    assert cm_hits(audit(f, kernel="ls-multi")) == []


def test_an_inbound_record_after_the_gmp_record_counts_as_well(tmp_path):
    """Records [0x2B, 0x0A, 0x12]: the inbound record comes after the GMP one; a routed REQ
    carries its DLID (5) as the local LID, and another local LID is the finding."""
    f = tmp_path / "order.pcapng"
    records = [(0x2B, ROUTED), (0x0A, OUT_LS), (0x12, inbound(5))]
    ls_capture(f, records, modified(ROUTED, slid=5, dlid=0xFFFF))
    assert cm_hits(audit(f, kernel="ls-multi")) == []
    g = tmp_path / "order-bad.pcapng"
    resp, req = ls_capture(g, records, modified(ROUTED, slid=7, dlid=0xFFFF))
    assert cm_hits(audit(g, kernel="ls-multi")) == [("CM-REQ-INBOUND-LID", (resp, req))]


@pytest.mark.parametrize("local_lid,expected", [(0xFFFF, []), (5, ["CM-REQ-PATH-MISMATCH"])])
def test_the_proposal_reading_has_no_inbound_lid(tmp_path, local_lid, expected):
    """The seed's proposal takes a RETURN_PRIMARY record too, but only ls-multi's 6.1 kernel
    puts an inbound DLID in the REQ: under the proposal a routed REQ's local LID is 0xFFFF."""
    ret = inbound(5)
    f = tmp_path / "prop.pcapng"
    with CaptureBuilder(str(f), encap="ib") as b:
        blob = b.blob([(0x0A, modified(ROUTED, reversible=0)), (0x12, ret), (0x2B, ROUTED)],
                      set_option=0)
        req = b.cm_req(modified(ROUTED, slid=local_lid, dlid=0xFFFF))
    assert cm_hits(audit(f, kernel="proposal")) == [(r, (blob, req)) for r in expected]


def test_a_roce_gid_below_the_packets_address_is_a_mismatch_too(tmp_path):
    f = tmp_path / "roce.pcapng"
    with CaptureBuilder(str(f)) as b:  # RoCEv2 from 192.168.2.24 to 192.168.2.25
        req = b.cm_req(path("::ffff:192.168.2.1", ROCE_R))
    assert cm_hits(audit(f)) == [("CM-ROCE-GID", (req,))]
