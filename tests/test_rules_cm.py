"""CM rules (audit-rules.md "CM rules", ibpath_scapy/audit/rules/cm.py): a crafted capture that
triggers each rule and a near-identical one that does not, exact rule IDs and frames; native IB
and RoCEv2; set_option blobs (ucma), LS responses (ls-multi / ls-legacy) and --blob files; the
real external CM captures raise nothing."""

from __future__ import annotations

import pytest

from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.craft.builder import CaptureBuilder
from ibpath_scapy.layers.pathdata import PathArray, PathRecData
from ibpath_scapy.layers.sa import PathRecord

from test_rules_resolver import PKEY, audit, exchange, hits, query

L, R = "fe80::2:c903:0:1", "fe80::2:c903:0:2"
ROCE_L, ROCE_R = "::ffff:192.168.2.24", "::ffff:192.168.2.25"  # the builder's requester/peer


def path(sgid=L, dgid=R, **kw) -> PathRecord:
    base = dict(sgid=sgid, dgid=dgid, slid=1, dlid=2, pkey=PKEY, sl=0, mtu=4, rate=3,
                packet_life_time=18, reversible=1, numb_path=0)
    base.update(kw)
    return PathRecord(**base)


def modified(p: PathRecord, **kw) -> PathRecord:
    q = p.copy()
    for k, v in kw.items():
        setattr(q, k, v)
    return q


def cm_hits(fa):
    return [h for h in hits(fa) if h[0].startswith("CM-")]


def set_option_capture(f, req_path, *, encap="ib", blob_path=None, set_option=0, **req_kw):
    """SA exchange, blob 0x2B, CM REQ built from req_path. Returns (blob frame, REQ frame)."""
    p = blob_path or path()
    with CaptureBuilder(str(f), encap=encap) as b:
        exchange(b, query(p.sgid, p.dgid), [p])
        blob = b.blob([(0x2B, p)], set_option=set_option)
        req = b.cm_req(req_path, **req_kw)
    return blob, req


# -- CM-REQ-PATH-MISMATCH ----------------------------------------------------------------------

def test_req_matches_blob_gmp_path(tmp_path):
    f = tmp_path / "ok.pcapng"
    set_option_capture(f, path())
    assert hits(audit(f)) == []


@pytest.mark.parametrize("field,value,shown", [
    ("sl", 3, "primary_sl"), ("flow_label", 0x123, "primary_flow_label"),
    ("tclass", 4, "primary_traffic_class"), ("rate", 7, "primary_packet_rate"),
    ("mtu", 5, "path_packet_payload_mtu"), ("pkey", 0x8001, "pkey"),
    ("dlid", 9, "primary_remote_lid"), ("slid", 9, "primary_local_lid"),
])
def test_req_path_mismatch_field(tmp_path, field, value, shown):
    f = tmp_path / "bad.pcapng"
    blob, req = set_option_capture(f, modified(path(), **{field: value}))
    fa = audit(f)
    assert cm_hits(fa) == [("CM-REQ-PATH-MISMATCH", (blob, req))]
    msg = next(x.message for x in fa.findings if x.rule == "CM-REQ-PATH-MISMATCH")
    assert shown in msg and "ucma" in msg


@pytest.mark.parametrize("timeout,bad", [(19, False), (25, False), (18, True), (10, True)])
def test_req_local_ack_timeout(tmp_path, timeout, bad):
    """cm_ack_timeout: at least PacketLifeTime (18) + 1."""
    f = tmp_path / "ack.pcapng"
    blob, req = set_option_capture(f, path(), local_ack_timeout=timeout)
    fa = audit(f)
    assert cm_hits(fa) == ([("CM-REQ-PATH-MISMATCH", (blob, req))] if bad else [])


@pytest.mark.parametrize("req_lids,bad", [((0xFFFF, 0xFFFF), False), ((1, 2), True)])
def test_req_routed_path_permissive_lids(tmp_path, req_lids, bad):
    """Hop limit > 1: cm_format_req writes 0xFFFF for both LIDs."""
    f = tmp_path / "routed.pcapng"
    routed = path(hop_limit=4)
    blob, req = set_option_capture(f, modified(routed, slid=req_lids[0], dlid=req_lids[1]),
                                   blob_path=routed)
    fa = audit(f)
    assert cm_hits(fa) == ([("CM-REQ-PATH-MISMATCH", (blob, req))] if bad else [])


@pytest.mark.parametrize("encap,expected", [("rocev2", []), ("ib", ["CM-REQ-PATH-MISMATCH"])])
def test_req_lids_not_compared_on_rocev2(tmp_path, encap, expected):
    """RoCE CM REQs carry 0xFFFF LIDs (rxe capture); the same REQ over native IB is wrong."""
    f = tmp_path / "lids.pcapng"
    p = path(ROCE_L, ROCE_R)
    blob, req = set_option_capture(f, modified(p, slid=0xFFFF, dlid=0xFFFF), encap=encap,
                                   blob_path=p)
    fa = audit(f)
    assert cm_hits(fa) == [(r, (blob, req)) for r in expected]


def test_req_failed_set_option_not_used(tmp_path):
    """rdma_set_option failed: the kernel took nothing from that blob."""
    f = tmp_path / "failed.pcapng"
    set_option_capture(f, modified(path(), sl=3), set_option=-22)
    assert cm_hits(audit(f)) == []


def test_req_latest_blob_before_it(tmp_path):
    """The latest blob for the pair before the REQ counts; one after it cannot have been used."""
    f = tmp_path / "order.pcapng"
    old, new = path(sl=1), path(sl=2)
    with CaptureBuilder(str(f), encap="ib") as b:
        b.blob([(0x2B, old)], set_option=0)
        blob = b.blob([(0x2B, new)], set_option=0)
        req = b.cm_req(new)
        b.blob([(0x2B, path(sl=5))], set_option=0)
        req2 = b.cm_req(old)
    assert cm_hits(audit(f)) == [("CM-REQ-PATH-MISMATCH", (req2 - 1, req2))]
    assert req == blob + 1


def test_req_from_the_other_end_not_judged_by_our_blob(tmp_path):
    f = tmp_path / "other.pcapng"
    with CaptureBuilder(str(f), encap="ib") as b:
        b.blob([(0x2B, path())], set_option=0)
        b.cm_req(path(R, L, slid=2, dlid=1, sl=7))
    assert cm_hits(audit(f)) == []


# -- LS responses and kernel profiles ----------------------------------------------------------

GMP_LS = path(flow_label=0x55)
OUT_LS = path(reversible=0)


def ls_capture(f, req_path, inbound_dlid, *, gmp=GMP_LS):
    """LS request (path_use ALL) and response [0x0A, 0x12, 0x2B], then a CM REQ."""
    inbound = path(R, L, slid=2, dlid=inbound_dlid, reversible=0)
    with CaptureBuilder(str(f), encap="ib") as b:
        b.ls_request(5, path_use=0, sgid=L, dgid=R, pkey=PKEY)
        resp = b.ls_response(5, [(0x0A, OUT_LS), (0x12, inbound), (0x2B, gmp)])
        req = b.cm_req(req_path)
    return resp, req


@pytest.mark.parametrize("inbound_dlid,expected", [(1, []), (5, ["CM-REQ-INBOUND-LID"])])
def test_inbound_lid_subnet_local(tmp_path, inbound_dlid, expected):
    """Subnet-local GMP path: the kernel writes its SLID (1); an inbound DLID 5 is lost."""
    f = tmp_path / "inb.pcapng"
    resp, req = ls_capture(f, GMP_LS, inbound_dlid)
    fa = audit(f)
    assert cm_hits(fa) == [(r, (resp, req)) for r in expected]


@pytest.mark.parametrize("kernel,local_lid,expected", [
    ("all", 5, []),                                   # ls-multi reading agrees
    ("all", 0xFFFF, ["CM-REQ-INBOUND-LID"]),          # ls-legacy agrees; inbound DLID lost
    ("ls-multi", 5, []),
    ("ls-multi", 0xFFFF, ["CM-REQ-INBOUND-LID"]),
    ("ls-legacy", 0xFFFF, []),
    ("ls-legacy", 5, ["CM-REQ-PATH-MISMATCH"]),       # < 6.1 writes the permissive LID
])
def test_inbound_lid_routed_by_profile(tmp_path, kernel, local_lid, expected):
    """Routed GMP path (hop limit > 1): since 6.1 the local LID is the inbound record's DLID."""
    f = tmp_path / "routed.pcapng"
    gmp = modified(GMP_LS, hop_limit=3)
    resp, req = ls_capture(f, modified(gmp, slid=local_lid, dlid=0xFFFF), 5, gmp=gmp)
    fa = audit(f, kernel=kernel)
    assert cm_hits(fa) == [(r, (resp, req)) for r in expected]


def test_ls_mismatch_reported_once_for_both_readings(tmp_path):
    f = tmp_path / "ls-bad.pcapng"
    resp, req = ls_capture(f, modified(GMP_LS, sl=6), 1)
    fa = audit(f)
    assert cm_hits(fa) == [("CM-REQ-PATH-MISMATCH", (resp, req))]
    msg = next(x.message for x in fa.findings if x.rule == "CM-REQ-PATH-MISMATCH")
    assert "ls-multi, ls-multi-6.1 and ls-legacy" in msg and "LS response frame" in msg


# -- CM-REQ-ALT-MISMATCH -----------------------------------------------------------------------

ALT = path(slid=3, dlid=4, sl=1)


@pytest.mark.parametrize("alt,expected", [(ALT, []), (modified(ALT, sl=5), ["CM-REQ-ALT-MISMATCH"]),
                                          (None, [])])
def test_alt_mismatch(tmp_path, alt, expected):
    f = tmp_path / "alt.pcapng"
    with CaptureBuilder(str(f), encap="ib") as b:
        blob = b.blob([(0x2B, path()), (0x2D, ALT)], set_option=0)  # GMP|ALTERNATE|BIDIRECTIONAL
        req = b.cm_req(path(), alternate=alt)
    fa = audit(f)
    assert cm_hits(fa) == [(r, (blob, req)) for r in expected]
    if expected:
        assert "alternate_sl 5" in next(x.message for x in fa.findings if x.rule == expected[0])


# -- CM-ROCE-GID -------------------------------------------------------------------------------

@pytest.mark.parametrize("gids,expected", [((ROCE_L, ROCE_R), []), ((L, R), ["CM-ROCE-GID"]),
                                           ((ROCE_R, ROCE_L), ["CM-ROCE-GID"])])
def test_roce_gid(tmp_path, gids, expected):
    f = tmp_path / "roce.pcapng"
    with CaptureBuilder(str(f)) as b:  # RoCEv2 from 192.168.2.24 to 192.168.2.25
        req = b.cm_req(path(*gids))
    assert cm_hits(audit(f)) == [(r, (req,)) for r in expected]


# -- --blob ------------------------------------------------------------------------------------

def blob_file(f, records) -> str:
    f.write_bytes(bytes(PathArray(records=[PathRecData(flags=fl, path_record=p) for fl, p in records])))
    return str(f)


@pytest.mark.parametrize("sl,expected", [(0, []), (3, ["CM-REQ-PATH-MISMATCH"])])
def test_extra_blob_used_for_every_capture(tmp_path, sl, expected):
    optval = blob_file(tmp_path / "optval.bin", [(0x2B, path())])
    caps = []
    for k in range(2):
        f = tmp_path / f"cap{k}.pcapng"
        with CaptureBuilder(str(f), encap="ib") as b:
            b.mad(bytes(40))  # not a MAD: one more frame that is not a blob
            req = b.cm_req(path(sl=sl))
        caps.append(str(f))
    audits, unreadable = audit_paths(caps + [optval], AuditOptions(extra_blobs=[optval]), quiet=True)
    assert not unreadable
    for fa in audits[:2]:
        assert cm_hits(fa) == [(r, (req,)) for r in expected]
        assert fa.frames == 2 and fa.replay.blobs == [] and len(fa.replay.extra_blobs) == 1
        for x in fa.findings:
            if x.rule.startswith("CM-"):
                assert "optval.bin" in x.message
    assert audits[2].path == optval and cm_hits(audits[2]) == []


def test_capture_blob_preferred_to_extra_blob(tmp_path):
    optval = blob_file(tmp_path / "optval.bin", [(0x2B, path(sl=3))])
    f = tmp_path / "cap.pcapng"
    set_option_capture(f, path())
    audits, _ = audit_paths([str(f)], AuditOptions(extra_blobs=[optval]), quiet=True)
    assert cm_hits(audits[0]) == []


# -- real traffic ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["rxe-cm-rdma-rw.pcap", "ib-erf-sminfo-cm.pcap"])
def test_external_cm_captures_raise_nothing(external, name):
    fa = audit(external / name)
    assert fa.replay.cm_reqs
    assert [f for f in fa.findings if f.rule.startswith("CM-")] == []


def test_external_rxe_req_joins_nothing_but_checks_gids(external):
    """The rxe REQ's GIDs are its IPv4 addresses (::ffff:192.168.2.25 → .24): no CM-ROCE-GID."""
    fa = audit(external / "rxe-cm-rdma-rw.pcap")
    (c,) = fa.replay.cm_reqs
    assert c["encap"] == "rocev2" and c["cm_req"]["primary_local_lid"] == 0xFFFF
