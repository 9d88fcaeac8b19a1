"""Where the resolver rules' verdicts change (issue 43, item 5: the mutants of
ibpath_scapy/audit/rules/resolver.py that survived the older tests; tests/README.md).

The seed (../shared/seed/): a resolver asks the forward path; if the answer is not reversible
it asks a reversible GMP path (the Reversible component with bit 1) and the return path (SGID
and DGID swapped). A resolver may also ask the forward path with Reversible bit 1 from the
start; that query's answer is then the forward path the hand-over rests on. sa_query.c
ib_nl_is_good_resolve_resp(): an LS response flagged RDMA_NL_LS_F_ERR hands nothing over.
Captures are built as in tests/test_rules_resolver.py (whose helpers these are).
"""

from __future__ import annotations

from ibpath_scapy.craft.builder import CaptureBuilder

from test_rules_resolver import (  # noqa: E402  (tests/ is on sys.path through rootdir)
    FWD, FWD_REV, L, R, RET, audit, exchange, hits, query,
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



def test_an_ls_response_flagged_err_hands_nothing_over(tmp_path):
    """sa_query.c ib_nl_is_good_resolve_resp(): a RESOLVE response with RDMA_NL_LS_F_ERR is
    not good whatever it carries; ib_nl_handle_resolve_resp() then sends the query to the SA
    itself and never reads the response's PATH_RECORD attributes. So the records of an
    LS_F_ERR response are no hand-over: the unreversible forward path in it needs no
    follow-up. The same response without the flag is a hand-over that does."""
    for error in (True, False):
        f = tmp_path / f"ls-{error}.pcapng"
        with CaptureBuilder(str(f)) as b:
            b.ls_request(9, path_use=2, sgid=L, dgid=R)
            qf, af = exchange(b, query(), [FWD])
            resp = b.ls_response(9, [(0x2B, FWD)], error=error)
        found = [h for h in hits(audit(f)) if h[0].startswith("RES-")]
        assert found == ([] if error else [("RES-NO-FOLLOWUP", (qf, af, resp))])
