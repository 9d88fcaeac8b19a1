"""Where the resolver rules' verdicts change (issue 43, item 5: the mutants of the @rule
bodies of ibpath_scapy/audit/rules/resolver.py that survived the older tests;
tests/README.md).

The seed (../shared/seed/): a reversible forward answer is handed over as one 0x2B record,
with no more queries; a record flagged INBOUND_REVERSE may hold the return path "stored in
reversed format" (SGID/DGID and SLID/DLID swapped), an INBOUND record holds it as the SA
returned it; the latest answer of each kind of query before a hand-over is the one it rests
on. Captures are built as in tests/test_rules_resolver.py (whose helpers these are).
"""

from __future__ import annotations

import pytest

from ibpath_scapy.craft.builder import CaptureBuilder

from test_rules_resolver import (  # noqa: E402  (tests/ is on sys.path through rootdir)
    FWD, FWD_REV, GMP, L, R, audit, exchange, path, query, reversed_record,
)


def found(fa, rule):
    return [(f.frames, f.message) for f in fa.findings if f.rule == rule]


def test_a_second_forward_query_sent_before_the_first_answer_does_not_end_its_window(tmp_path):
    """Two forward queries in flight; the first comes back reversible, the second not; a
    GMP query after both answers is redundant for the first."""
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        q1 = b.sa_query(query())
        q2 = b.sa_query(query(sl=0))
        b.sa_answer(q1, [FWD_REV])
        b.sa_answer(q2, [FWD])
        exchange(b, query(reversible=1), [GMP])
        b.blob([(0x2B, FWD_REV)], set_option=0)
    hits = found(audit(f), "RES-REDUNDANT-QUERIES")
    assert len(hits) == 1 and "1 more GMP query (frames " in hits[0][1]


@pytest.mark.parametrize("n", [1, 2])
def test_redundant_queries_are_counted_in_words(tmp_path, n):
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD_REV])
        exchange(b, query(reversible=1), [GMP])
        if n == 2:
            exchange(b, query(R, L), [path(R, L)])
        b.blob([(0x2B, FWD_REV)], set_option=0)
    (hit,) = found(audit(f), "RES-REDUNDANT-QUERIES")
    assert ("1 more GMP query (frames " if n == 1
            else "2 more GMP and return queries (frames ") in hit[1]


RET_OWN = path(R, L, flow_label=0x55)  # a return path no other answer equals once reversed


@pytest.mark.parametrize("flags,stored,ok", [
    (0x22, "reversed", True),    # INBOUND_REVERSE: the seed's reversed storage
    (0x12, "as-is", True),       # INBOUND: as the SA returned it
    (0x12, "reversed", False),   # INBOUND holding a reversed record: not what the SA said
    (0x2A, "reversed", False),   # INBOUND_REVERSE with OUTBOUND: the record must match as is
])
def test_which_records_may_hold_the_return_path_reversed(tmp_path, flags, stored, ok):
    f = tmp_path / "q.pcapng"
    ret = reversed_record(RET_OWN) if stored == "reversed" else RET_OWN
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD])
        exchange(b, query(reversible=1), [GMP])
        exchange(b, query(R, L), [RET_OWN])
        b.blob([(0x0A, FWD), (flags, ret), (0x2B, GMP)], set_option=0)
    hits = [m for _, m in found(audit(f), "RES-BLOB-MISMATCH") if "record 1 " in m]
    assert (hits == []) is ok


@pytest.mark.parametrize("fields,more", [(6, False), (7, True)])
def test_a_mismatch_lists_six_differences_then_says_there_are_more(tmp_path, fields, more):
    changed = dict(sl=1, mtu=3, rate=6, packet_life_time=10, flow_label=7, hop_limit=2,
                   tclass=9)
    kw = dict(list(changed.items())[:fields])
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD_REV])
        b.blob([(0x2B, path(reversible=1, **kw))], set_option=0)
    (hit,) = found(audit(f), "RES-BLOB-MISMATCH")
    assert hit[1].endswith(" ...") is more
    assert hit[1].count(" (SA ") == 6


def test_the_latest_answer_counts_whatever_order_the_queries_were_sent_in(tmp_path):
    """The first query's answer (good) comes after the second one's (an error): the hand-over
    rests on the latest, which is good: not stale."""
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        q1 = b.sa_query(query())
        q2 = b.sa_query(query())
        b.sa_answer(q2, [], status=0x0100)
        b.sa_answer(q1, [FWD_REV])
        b.blob([(0x2B, FWD_REV)], set_option=0)
    assert found(audit(f), "RES-STALE-BLOB") == []
    g = tmp_path / "stale.pcapng"
    with CaptureBuilder(str(g)) as b:  # the other way round: the error is the latest
        q1 = b.sa_query(query())
        q2 = b.sa_query(query())
        b.sa_answer(q1, [FWD_REV])
        b.sa_answer(q2, [], status=0x0100)
        b.blob([(0x2B, FWD_REV)], set_option=0)
    assert len(found(audit(g), "RES-STALE-BLOB")) == 1


def test_a_later_hand_over_without_follow_ups_after_a_good_one(tmp_path):
    """Each hand-over is judged: the first rests on a reversible answer; the second on a
    forward answer that is not reversible, with no GMP or return query after it."""
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD_REV])
        b.blob([(0x2B, FWD_REV)], set_option=0)
        qf, af = exchange(b, query(), [FWD])
        second = b.blob([(0x2B, FWD)], set_option=0)
    hits = found(audit(f), "RES-NO-FOLLOWUP")
    assert [frames for frames, _ in hits] == [(qf, af, second)]


def test_each_later_forward_query_ends_the_window_of_the_one_before(tmp_path):
    """Four forward queries; the third comes back reversible, the fourth does not and is
    followed up by a GMP query: that query answers the fourth, not the third."""
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD])
        exchange(b, query(), [FWD])
        exchange(b, query(), [FWD_REV])
        exchange(b, query(), [FWD])
        exchange(b, query(reversible=1), [GMP])
        exchange(b, query(R, L), [path(R, L)])
        b.blob([(0x0A, FWD), (0x12, path(R, L)), (0x2B, GMP)], set_option=0)
    assert found(audit(f), "RES-REDUNDANT-QUERIES") == []


def test_a_shape_without_a_gmp_record_and_one_with_the_gmp_record_first(tmp_path):
    """The seed: GMP_PRIMARY, FORWARD_PRIMARY(_REV) and RETURN_PRIMARY(_REV) must all be
    there, and a kernel that searches in order takes the first record providing a role: a
    0x2B record first provides the forward and return paths too."""
    ret = path(R, L)
    f = tmp_path / "nogmp.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD])
        exchange(b, query(reversible=1), [GMP])
        exchange(b, query(R, L), [ret])
        b.blob([(0x0A, FWD), (0x12, ret)], set_option=0)
    msgs = [m for _, m in found(audit(f), "RES-BLOB-SHAPE")]
    assert len(msgs) == 1 and "no GMP_PRIMARY (GMP|PRIMARY) record" in msgs[0]
    g = tmp_path / "first.pcapng"
    with CaptureBuilder(str(g)) as b:
        exchange(b, query(), [FWD])
        exchange(b, query(reversible=1), [GMP])
        exchange(b, query(R, L), [ret])
        b.blob([(0x2B, GMP), (0x0A, FWD), (0x12, ret)], set_option=0)
    msgs = [m for _, m in found(audit(g), "RES-BLOB-SHAPE")]
    assert len(msgs) == 1 and (
        "FORWARD_PRIMARY and RETURN_PRIMARY after the GMP|PRIMARY|BIDIRECTIONAL record 0: a "
        "kernel searching in order takes the forward/return path from the GMP record (the "
        "compatible layout puts them before it)") in msgs[0]
