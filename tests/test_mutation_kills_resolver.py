"""Where the resolver rules' verdicts change (issue 43, item 5: the mutants of
ibpath_scapy/audit/rules/resolver.py that survived the older tests; tests/README.md).

The seed (../shared/seed/): a resolver asks the forward path; if the answer is not reversible
it asks a reversible GMP path (the Reversible component with bit 1) and the return path (SGID
and DGID swapped). A resolver may also ask the forward path with Reversible bit 1 from the
start; that query's answer is then the forward path the hand-over rests on. Captures are
built as in tests/test_rules_resolver.py (whose helpers these are).
"""

from __future__ import annotations

from ibpath_scapy.craft.builder import CaptureBuilder

from test_rules_resolver import (  # noqa: E402  (tests/ is on sys.path through rootdir)
    FWD_REV, L, R, RET, audit, exchange, hits, query,
)


def test_a_forward_query_asking_reversible_is_the_forward_path(tmp_path):
    """No plain forward query: the one with Reversible bit 1 is the forward path, and its
    reversible answer handed over as one 0x2B record is the seed's first shape."""
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(reversible=1), [FWD_REV])
        b.blob([(0x2B, FWD_REV)], set_option=0)
    assert hits(audit(f)) == []


def test_a_later_return_query_is_not_taken_for_the_forward_path(tmp_path):
    """The return path's answer (not reversible) comes after the reversible forward answer:
    the hand-over still rests on the forward one, which needs no follow-up."""
    f = tmp_path / "q.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(reversible=1), [FWD_REV])
        exchange(b, query(R, L), [RET])
        b.blob([(0x2B, FWD_REV)], set_option=0)
    assert not [h for h in hits(audit(f)) if h[0] == "RES-NO-FOLLOWUP"]

