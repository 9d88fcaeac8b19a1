"""Resolver rules (audit-rules.md "Resolver rules", ibpath_scapy/audit/rules/resolver.py).

Each rule has a crafted capture that triggers it and a near-identical one that does not; the
assertions name the exact rule IDs (severity error/warning) and frames. The three resolver shapes
of the seed (../shared/seed/) run end to end:

1. reversible forward path → one 0x2B record: no error;
2. not reversible → GMP query (Reversible component, bit 1) and return query (GIDs swapped), and
   three records (0x0A, 0x12 or 0x22, 0x2B): no error;
3. not reversible, a single 0x2B record handed over → RES-NO-FOLLOWUP and BLOB-GMP-NOT-REVERSIBLE.

Findings of the blob rules (BLOB-*) and LS rules (RES-LS-*), written elsewhere, are left out of
the exact comparisons; where a scenario is about one of them it is asserted when registered.
"""

from __future__ import annotations

import pytest

from ibpath_scapy.audit.model import RULES, AuditOptions
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.craft.builder import CaptureBuilder
from ibpath_scapy.layers.sa import PathRecord

L, R = "fe80::2:c903:0:1", "fe80::2:c903:0:2"
PKEY = 0xFFFF
OTHER_FAMILIES = ("BLOB-", "RES-LS-")  # rules written concurrently in blob.py and ls.py


def path(sgid=L, dgid=R, reversible=0, **kw) -> PathRecord:
    """An answer record as OpenSM builds it (wire-formats.md §8): selectors 2, NumbPath 0."""
    lids = dict(slid=1, dlid=2) if sgid == L else dict(slid=2, dlid=1)
    base = dict(sgid=sgid, dgid=dgid, pkey=PKEY, sl=0, mtu=4, rate=3, packet_life_time=18,
                reversible=reversible, numb_path=0, **lids)
    base.update(kw)
    return PathRecord(**base)


def reversed_record(p: PathRecord) -> PathRecord:
    """The seed's _REV storage format: endpoints swapped."""
    q = p.copy()
    q.sgid, q.dgid, q.slid, q.dlid = p.dgid, p.sgid, p.dlid, p.slid
    return q


FWD = path()                                   # forward, not reversible
FWD_REV = path(reversible=1)                   # forward, reversible
GMP = path(reversible=1, flow_label=0x77)      # a reversible GMP path (another route)
RET = path(R, L)                               # return path


def query(sgid=L, dgid=R, **kw) -> PathRecord:
    return PathRecord(sgid=sgid, dgid=dgid, pkey=PKEY, **kw)


def exchange(b: CaptureBuilder, q: PathRecord, answer: list[PathRecord], **kw) -> tuple[int, int]:
    """A query and its answer: (request frame, answer frame)."""
    qq = b.sa_query(q)
    frames = b.sa_answer(qq, answer, **kw)
    return qq.frame, frames[-1]


def audit(path_, **options):
    audits, unreadable = audit_paths([str(path_)], AuditOptions(**options), quiet=True)
    assert not unreadable
    return audits[0]


def hits(fa) -> list[tuple[str, tuple[int, ...]]]:
    """(rule, frames) of every error/warning finding outside the concurrently written families."""
    return sorted((f.rule, f.frames) for f in fa.findings
                  if f.severity in ("error", "warning") and not f.rule.startswith(OTHER_FAMILIES))


def errors(fa) -> list[str]:
    return sorted({f.rule for f in fa.findings if f.severity == "error"})


def rule_frames(fa, rule_id) -> list[tuple[int, ...]]:
    return [f.frames for f in fa.findings if f.rule == rule_id]


# -- the seed's three shapes -------------------------------------------------------------------

def test_shape1_reversible_forward_one_2b_record(tmp_path):
    f = tmp_path / "shape1.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD_REV])
        b.blob([(0x2B, FWD_REV)], set_option=0)
    fa = audit(f)
    assert hits(fa) == []
    assert errors(fa) == []


@pytest.mark.parametrize("ret_flags", [0x12, 0x22])
def test_shape2_not_reversible_followups_three_records(tmp_path, ret_flags):
    f = tmp_path / "shape2.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD])
        exchange(b, query(reversible=1), [GMP])
        exchange(b, query(R, L), [RET])
        ret = RET if ret_flags == 0x12 else reversed_record(RET)
        b.blob([(0x0A, FWD), (ret_flags, ret), (0x2B, GMP)], set_option=0)
    fa = audit(f)
    assert hits(fa) == []
    assert errors(fa) == []


def test_shape3_not_reversible_single_2b_record(tmp_path):
    f = tmp_path / "shape3.pcapng"
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, query(), [FWD])
        blob = b.blob([(0x2B, FWD)], set_option=0)
    fa = audit(f)
    assert hits(fa) == [("RES-NO-FOLLOWUP", (qf, af, blob))]
    if "BLOB-GMP-NOT-REVERSIBLE" in RULES:
        assert rule_frames(fa, "BLOB-GMP-NOT-REVERSIBLE") == [(blob,)]
    (msg,) = [x.message for x in fa.findings if x.rule == "RES-NO-FOLLOWUP"]
    assert "GMP" in msg and "return path" in msg


# -- RES-NO-FOLLOWUP ---------------------------------------------------------------------------

@pytest.mark.parametrize("gmp_bit,expected", [(1, False), (0, True)])
def test_no_followup_needs_reversible_bit_1(tmp_path, gmp_bit, expected):
    """A "GMP" query with the Reversible component but bit 0 is OpenSM's "don't care": not a
    GMP query but one more forward query, whose non-reversible answer is then the one that
    needed following up. The forward query itself may carry that component with bit 0."""
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(reversible=0), [FWD])  # Reversible component, bit 0
        qg, ag = exchange(b, query(reversible=gmp_bit), [GMP if gmp_bit else FWD])
        exchange(b, query(R, L), [RET])
        blob = b.blob([(0x0A, FWD), (0x12, RET), (0x2B, GMP)], set_option=0)
    fa = audit(f)
    if expected:  # ... and the GMP record is not one the SA returned in this resolution
        assert hits(fa) == [("RES-BLOB-MISMATCH", (2, blob)),
                            ("RES-NO-FOLLOWUP", (qg, ag, blob))]
    else:
        assert hits(fa) == []


def test_no_followup_return_query_missing(tmp_path):
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, query(), [FWD])
        exchange(b, query(reversible=1), [GMP])
        blob = b.blob([(0x0A, FWD), (0x12, RET), (0x2B, GMP)], set_option=0)
    fa = audit(f)
    assert ("RES-NO-FOLLOWUP", (qf, af, blob)) in hits(fa)
    (msg,) = [x.message for x in fa.findings if x.rule == "RES-NO-FOLLOWUP"]
    assert "return path" in msg and "GMP" not in msg.split("asking the SA for")[1]


def test_no_followup_queries_before_forward_answer_do_not_count(tmp_path):
    """Follow-ups come after the forward answer: ones sent before it were not decided by it."""
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        qg, ag = exchange(b, query(reversible=1), [GMP])
        qr, ar = exchange(b, query(R, L), [RET])
        qf, af = exchange(b, query(), [FWD])
        blob = b.blob([(0x0A, FWD), (0x12, RET), (0x2B, GMP)], set_option=0)
    fa = audit(f)
    assert hits(fa) == [("RES-NO-FOLLOWUP", (qf, af, blob))]


def test_no_followup_other_requesters_queries_do_not_count(tmp_path):
    """The remote end resolving its own path (SGID = remote) is not our return query."""
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, query(), [FWD])
        exchange(b, query(reversible=1), [GMP])
        ours = b.requester
        b.requester = "192.168.2.25"  # the remote host asks for its forward path
        exchange(b, query(R, L), [RET])
        b.requester = ours
        blob = b.blob([(0x0A, FWD), (0x12, RET), (0x2B, GMP)], set_option=0)
    fa = audit(f)
    assert hits(fa) == [("RES-NO-FOLLOWUP", (qf, af, blob))]


def test_no_followup_ls_response(tmp_path):
    """An LS response is a hand-over too; with path_use UNIDIRECTIONAL one forward record is
    all the kernel asks for."""
    f = tmp_path / "ls.pcapng"
    with CaptureBuilder(str(f)) as b:
        b.ls_request(9, path_use=2, sgid=L, dgid=R, pkey=PKEY)
        qf, af = exchange(b, query(), [FWD])
        resp = b.ls_response(9, [(0x2B, FWD)])
    fa = audit(f)
    assert ("RES-NO-FOLLOWUP", (qf, af, resp)) in hits(fa)

    f = tmp_path / "ls-ud.pcapng"
    with CaptureBuilder(str(f)) as b:
        b.ls_request(9, path_use=1, sgid=L, dgid=R, pkey=PKEY)
        exchange(b, query(), [FWD])
        b.ls_response(9, [(0x0A, FWD)])
    fa = audit(f)
    assert hits(fa) == []
    assert errors(fa) == []


# -- RES-REDUNDANT-QUERIES ---------------------------------------------------------------------

def test_redundant_queries(tmp_path):
    f = tmp_path / "r.pcapng"
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, query(), [FWD_REV])
        qg, ag = exchange(b, query(reversible=1), [FWD_REV])
        qr, ar = exchange(b, query(R, L), [RET])
        b.blob([(0x2B, FWD_REV)], set_option=0)
    fa = audit(f)
    assert hits(fa) == [("RES-REDUNDANT-QUERIES", (qf, af, qg, ag, qr, ar))]


def test_redundant_queries_not_after_the_blob(tmp_path):
    """Queries after the hand-over belong to the next resolution attempt."""
    f = tmp_path / "r.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD_REV])
        b.blob([(0x2B, FWD_REV)], set_option=0)
        exchange(b, query(reversible=1), [FWD_REV])
    fa = audit(f)
    assert hits(fa) == []


# -- RES-BLOB-SHAPE ----------------------------------------------------------------------------

def test_blob_shape_not_reversible_only_gmp_record(tmp_path):
    f = tmp_path / "s.pcapng"
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, query(), [FWD])
        exchange(b, query(reversible=1), [GMP])
        exchange(b, query(R, L), [RET])
        blob = b.blob([(0x2B, GMP)], set_option=0)
    fa = audit(f)
    assert hits(fa) == [("RES-BLOB-SHAPE", (qf, af, blob))]
    (msg,) = [x.message for x in fa.findings if x.rule == "RES-BLOB-SHAPE"]
    assert "FORWARD_PRIMARY" in msg and "RETURN_PRIMARY" in msg


def test_blob_shape_order_matters(tmp_path):
    """0x2B first: a kernel searching in order takes forward and return from the GMP record."""
    f = tmp_path / "s.pcapng"
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, query(), [FWD])
        exchange(b, query(reversible=1), [GMP])
        exchange(b, query(R, L), [RET])
        blob = b.blob([(0x2B, GMP), (0x0A, FWD), (0x12, RET)], set_option=0)
    fa = audit(f)
    assert hits(fa) == [("RES-BLOB-SHAPE", (qf, af, blob))]
    assert "searching in order" in next(x.message for x in fa.findings if x.rule == "RES-BLOB-SHAPE")


def test_blob_shape_return_rev_must_be_reversed(tmp_path):
    """RETURN_PRIMARY_REV (0x22) holds the return path with its endpoints swapped; holding it
    as the SA returned it is the wrong format."""
    f = tmp_path / "s.pcapng"
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, query(), [FWD])
        exchange(b, query(reversible=1), [GMP])
        exchange(b, query(R, L), [RET])
        blob = b.blob([(0x0A, FWD), (0x22, RET), (0x2B, GMP)], set_option=0)
    fa = audit(f)
    assert hits(fa) == [("RES-BLOB-SHAPE", (qf, af, blob))]


def test_blob_shape_reversible_but_no_2b(tmp_path):
    f = tmp_path / "s.pcapng"
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, query(), [FWD_REV])
        blob = b.blob([(0x0A, FWD_REV)], set_option=0)
    fa = audit(f)
    assert hits(fa) == [("RES-BLOB-SHAPE", (qf, af, blob))]


# -- RES-BLOB-MISMATCH -------------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [("sl", 3), ("numb_path", 1), ("preference", 2),
                                         ("mtu_selector", 3), ("service_id", 1)])
def test_blob_mismatch_any_canonical_field(tmp_path, field, value):
    f = tmp_path / "m.pcapng"
    changed = FWD_REV.copy()
    setattr(changed, field, value)
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, query(), [FWD_REV])
        blob = b.blob([(0x2B, changed)], set_option=0)
    fa = audit(f)
    # the 0x2B record is not the forward path either: RES-BLOB-SHAPE
    assert hits(fa) == sorted([("RES-BLOB-MISMATCH", (af, blob)),
                               ("RES-BLOB-SHAPE", (qf, af, blob))])
    (msg,) = [x.message for x in fa.findings if x.rule == "RES-BLOB-MISMATCH"]
    assert field in msg


def test_blob_mismatch_only_with_sa_traffic(tmp_path):
    """A blob without SA answers for its resolution in the capture is not compared."""
    f = tmp_path / "m.pcapng"
    with CaptureBuilder(str(f)) as b:
        b.blob([(0x2B, FWD_REV)], set_option=0)
    assert hits(audit(f)) == []


def test_blob_mismatch_answer_after_blob_does_not_count(tmp_path):
    f = tmp_path / "m.pcapng"
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, query(), [FWD_REV])
        blob = b.blob([(0x2B, GMP)], set_option=0)
        exchange(b, query(reversible=1), [GMP])
    fa = audit(f)
    assert ("RES-BLOB-MISMATCH", (af, blob)) in hits(fa)


# -- RES-STALE-BLOB ----------------------------------------------------------------------------

def test_stale_blob_after_error_status(tmp_path):
    f = tmp_path / "st.pcapng"
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, query(), [FWD_REV])
        b.blob([(0x2B, FWD_REV)], set_option=0)        # current
        q2, a2 = exchange(b, query(), [], status=0x0300)  # NO_RECORDS
        blob2 = b.blob([(0x2B, FWD_REV)], set_option=0)   # from the resolver's cache
    fa = audit(f)
    assert hits(fa) == [("RES-STALE-BLOB", (a2, blob2))]
    assert "NO_RECORDS" in next(x.message for x in fa.findings if x.rule == "RES-STALE-BLOB")


def test_stale_blob_not_after_successful_retry(tmp_path):
    f = tmp_path / "st.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [], status=0x0300)
        exchange(b, query(), [FWD_REV])
        b.blob([(0x2B, FWD_REV)], set_option=0)
    fa = audit(f)
    assert hits(fa) == []


# -- joining -----------------------------------------------------------------------------------

def test_unmasked_pkey_joins_by_answer_pkey(tmp_path):
    """A forward query without the P_Key component joins the resolution of the P_Key the SA
    chose, which is what the blob carries."""
    f = tmp_path / "pk.pcapng"
    fwd = path(pkey=0x8001)
    with CaptureBuilder(str(f)) as b:
        qf, af = exchange(b, PathRecord(sgid=L, dgid=R), [fwd])
        blob = b.blob([(0x2B, fwd)], set_option=0)
    fa = audit(f)
    assert list(fa.replay.resolutions) == [(L, R, 0x8001)]
    assert hits(fa) == [("RES-NO-FOLLOWUP", (qf, af, blob))]


def test_two_sides_in_one_capture(tmp_path):
    """Both ends resolve; each is judged on its own queries and blobs."""
    f = tmp_path / "two.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD_REV])
        b.blob([(0x2B, FWD_REV)], set_option=0)
        b.requester = "192.168.2.25"
        qb, ab = exchange(b, query(R, L), [path(R, L)])
        blob = b.blob([(0x2B, path(R, L))], set_option=0)
    fa = audit(f)
    assert len(fa.replay.resolutions) == 1
    assert hits(fa) == [("RES-NO-FOLLOWUP", (qb, ab, blob))]


def test_real_opensm_capture_has_no_resolver_findings():
    from conftest import CAPTURES
    fa = audit(CAPTURES / "opensm" / "opensm-saquery.pcap")
    assert [f for f in fa.findings if f.rule.startswith("RES-")] == []
    assert errors(fa) == []


def test_rules_documented():
    for rid in ("RES-NO-FOLLOWUP", "RES-REDUNDANT-QUERIES", "RES-BLOB-SHAPE", "RES-BLOB-MISMATCH",
                "RES-STALE-BLOB"):
        r = RULES[rid]
        assert "resolution" in r.checks and r.summary and r.source
    assert RULES["RES-NO-FOLLOWUP"].severity == "error"
    assert RULES["RES-REDUNDANT-QUERIES"].severity == "warning"
    assert RULES["RES-STALE-BLOB"].severity == "warning"
