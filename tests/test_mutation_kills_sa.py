"""Where SAR-MISMATCH's verdict changes (issue 43, item 5: the mutants of
ibpath_scapy/audit/rules/sa.py that survived the older tests; tests/README.md).

Oracles: IBA 15.2.5.16 / OpenSM osm_sa_path_record.c (pr_rcv_get_path_parms): a selector of 0
asks for a value greater than the one given, 1 less than, 2 exactly, 3 the largest available
(any); a masked exact field (GIDs, LIDs, P_Key, SL, ...) must come back as asked; Reversible
asked with bit 1 needs a reversible answer, with bit 0 means "don't care". The same GID may be
written two ways (::ffff:10.0.0.1 and ::ffff:a00:1).
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from ibpath_scapy.audit.rules.sa import _contradicted, _same

FIELDS = dict(service_id=0, dgid="fe80::2", sgid="fe80::1", dlid=2, slid=1, raw_traffic=0,
              flow_label=0, hop_limit=0, tclass=0, pkey=0xFFFF, qos_class=0, sl=0,
              reversible=0, mtu=4, mtu_selector=2, rate=6, rate_selector=2,
              packet_life_time=18, packet_life_time_selector=2)


def pr(**kw) -> NS:
    return NS(**dict(FIELDS, **kw))


def test_gids_written_two_ways_are_the_same():
    assert _same("sgid", "::ffff:10.0.0.1", "::ffff:a00:1")
    assert _same("dgid", "fe80:0:0:0::2", "fe80::2")
    assert not _same("sgid", "fe80::1", "fe80::2")
    assert not _same("pkey", 0xFFFF, 0x7FFF) and _same("pkey", 5, 5)


@pytest.mark.parametrize("name,asked,got", [
    ("dgid", "fe80::2", "fe80::9"), ("sgid", "fe80::1", "fe80::9"), ("dlid", 2, 3),
    ("slid", 1, 3), ("pkey", 0xFFFF, 0x8001), ("sl", 0, 3), ("service_id", 0, 7),
    ("flow_label", 0, 5), ("hop_limit", 0, 1), ("tclass", 0, 8), ("qos_class", 0, 1),
    ("raw_traffic", 0, 1)])
def test_a_masked_exact_field_must_come_back_as_asked(name, asked, got):
    q, rec = pr(**{name: asked}), pr(**{name: got})
    assert _contradicted(q, rec, frozenset({name})) == [name]
    assert _contradicted(q, rec, frozenset()) == []            # not masked: anything goes
    assert _contradicted(q, pr(**{name: asked}), frozenset({name})) == []


@pytest.mark.parametrize("asked,got,bad", [(1, 0, True), (1, 1, False), (0, 0, False),
                                           (0, 1, False)])
def test_reversible_with_bit_1_needs_a_reversible_answer(asked, got, bad):
    v = _contradicted(pr(reversible=asked), pr(reversible=got), frozenset({"reversible"}))
    assert v == (["reversible"] if bad else [])
    assert _contradicted(pr(reversible=asked), pr(reversible=got), frozenset()) == []


@pytest.mark.parametrize("value,selector", [("mtu", "mtu_selector"), ("rate", "rate_selector"),
                                            ("packet_life_time", "packet_life_time_selector")])
@pytest.mark.parametrize("sel,got,ok", [
    (0, 5, True), (0, 4, False), (0, 3, False),     # greater than 4
    (1, 3, True), (1, 4, False), (1, 5, False),     # less than 4
    (2, 4, True), (2, 3, False), (2, 5, False),     # exactly 4
    (3, 1, True), (3, 9, True),                     # the largest available: any
])
def test_selectors(value, selector, sel, got, ok):
    q = pr(**{value: 4, selector: sel})
    rec = pr(**{value: got})
    both = frozenset({value, selector})
    assert _contradicted(q, rec, both) == ([] if ok else [value])
    # a selector without its value, or a value without its selector, selects nothing
    assert _contradicted(q, rec, frozenset({value})) == []
    assert _contradicted(q, rec, frozenset({selector})) == []


def test_every_contradicted_field_is_listed_in_order():
    q = pr(dlid=2, sl=1, reversible=1, mtu=4, mtu_selector=2)
    rec = pr(dlid=3, sl=2, reversible=0, mtu=5)
    comps = frozenset({"dlid", "sl", "reversible", "mtu", "mtu_selector"})
    assert _contradicted(q, rec, comps) == ["dlid", "sl", "reversible", "mtu"]


class PR(NS):
    """A PathRecord fact's reads: fields as attributes and as items (the messages')."""

    def __getitem__(self, name):
        return getattr(self, name)


@pytest.mark.parametrize("comps,asked,got,bad", [
    ({"dlid", "mtu", "mtu_selector"}, dict(mtu_selector=0), {}, "mtu 4 (asked 4)"),
    ({"dlid", "reversible"}, dict(reversible=1), dict(reversible=0),
     "reversible 0 (asked 1)"),
    ({"dlid", "mtu", "mtu_selector", "reversible"}, dict(reversible=1), dict(reversible=1),
     None),
])
def test_every_masked_field_equal_is_not_yet_agreement(comps, asked, got, bad):
    """SAR-MISMATCH over a transaction whose record has every masked exact field as asked
    (its shortcut for the common case): a selector pair or Reversible asked with bit 1 may
    still contradict it."""
    from ibpath_scapy.audit.rules.sa import mismatch

    q, rec = PR(**dict(FIELDS, **asked)), PR(**dict(FIELDS, **got))
    t = NS(query=q, records=[rec], components=frozenset(comps), request=NS(frame=1),
           completing_frame=2)
    assert [m for _, m in mismatch(t)] == (
        [f"record 0 contradicts the query: {bad}"] if bad else [])


def test_one_answer_judged_against_two_queries_and_one_query_against_two_answers(tmp_path):
    """IBA 15.2.5.16 / OpenSM pr_rcv_get_path_parms: a record answering a query whose mask
    holds DLID must have that DLID. Three Get transactions in one capture, each judged on
    its own: the same record bytes answer a query for DLID 2 (agrees) and one for DLID 5
    (SAR-MISMATCH); the DLID 2 query asked again gets a record with DLID 5 (SAR-MISMATCH).
    Byte-identical queries and records may be one object to the decoder; the verdict is
    still the pair's."""
    from ibpath_scapy.craft.builder import CaptureBuilder

    from test_rules_resolver import audit, exchange, path, query  # noqa: E402

    f = tmp_path / "pairs.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(dlid=2), [path()])                 # answer DLID 2: agrees
        _, second = exchange(b, query(dlid=5), [path()])     # the same answer bytes
        _, third = exchange(b, query(dlid=2), [path(dlid=5)])  # the first query's bytes
    found = sorted((x.frames[-1], x.message) for x in audit(f).findings
                   if x.rule == "SAR-MISMATCH")
    assert found == [(second, "record 0 contradicts the query: dlid 2 (asked 5)"),
                     (third, "record 0 contradicts the query: dlid 5 (asked 2)")]
