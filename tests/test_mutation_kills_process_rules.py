"""Where the process rules' verdicts change (issue 43, item 5: the mutants of the @rule bodies
of ibpath_scapy/audit/rules/process.py that survived the older tests; tests/README.md).

Each capture is a librdmacm program as `ibpath record` records it (craft/program.py, the
flows of craft/process_scenarios.py), with one more step than the scenario of its rule: a
second exchange or hand-over, an entry that differs the other way, an answer of exactly
sizeof(struct acm_msg). Oracles: librdmacm acm.c (ucma_ib_resolve reads at most
sizeof(struct acm_msg) = 16 + 8 x 72 = 592 bytes and keeps an answer whose acm_hdr.length is
the bytes read; ucma_ib_save_resp copies as many 72-byte entries as there are path entries,
from the first path entry on), ucma.c ucma_set_ib_path / ucma_query_path.
"""

from __future__ import annotations

import errno

import pytest

from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.craft.process_scenarios import (
    _address, _path, _program, _resolved, _roce_readback, _through_acm,
)
from ibpath_scapy.craft.program import address_entry, path_entry, sockaddr_ib
from ibpath_scapy.craft.resolver import GMP_BIDIR, GMP_BIDIR_SECONDARY
from ibpath_scapy.craft.session import Session
from ibpath_scapy.layers.acm import ACM_MSG_EP_LENGTH, ACM_MSG_HDR_LENGTH
from ibpath_scapy.facts.librdmacm import ai_route_bytes

PROCESS = ("UCMA-", "ACM-")


def findings(path, family=PROCESS) -> list[tuple[str, list[int], str]]:
    audits, unreadable = audit_paths([str(path)], AuditOptions(), quiet=True)
    assert not unreadable
    return [(f.rule, list(f.frames), f.message) for f in audits[0].findings
            if f.rule.startswith(family)]


@pytest.fixture
def session(tmp_path):
    s = Session(str(tmp_path / "p.pcapng"), encap="rocev2")
    yield s
    s.close()


def test_an_entry_whose_flags_the_array_raised_is_a_route_difference(session, tmp_path):
    """The ACM answer's entry is 0x0A (PRIMARY|OUTBOUND), the array's record 0x2B: another
    array than librdmacm's ai_route, whichever way the flags changed."""
    s = session
    path = _path(s)
    p = _through_acm(s, [(0x0A, path)], [(GMP_BIDIR, path)])
    _resolved(s, p, path)
    s.close()
    found = [f for f in findings(tmp_path / "p.pcapng") if f[0] == "ACM-ROUTE-DIFFERS"]
    assert len(found) == 1
    rule, frames, msg = found[0]
    assert msg.endswith("record 0 of the array is not entry 0 of the ACM answer: flags "
                        "PRIMARY|OUTBOUND → GMP|PRIMARY|BIDIRECTIONAL")
    assert len(frames) >= 4  # the ACM request and answer, the SET_OPTION and its array


def test_an_answer_of_exactly_sizeof_acm_msg_is_read_whole(session, tmp_path):
    """8 path entries: 16 + 8 x 72 = 592 bytes, all that librdmacm reads, and kept."""
    s = session
    path = _path(s)
    p = _program(s)
    _address(p)
    p.acm_request()
    p.acm_answer([(GMP_BIDIR, path)] * 8)
    s.close()
    assert not [f for f in findings(tmp_path / "p.pcapng") if f[0] == "ACM-LENGTH"]


def test_an_answer_over_sizeof_acm_msg_is_discarded(session, tmp_path):
    s = session
    path = _path(s)
    p = _program(s)
    _address(p)
    p.acm_request()
    p.acm_answer([(GMP_BIDIR, path)] * 8, trailing=bytes(72))
    s.close()
    found = [f for f in findings(tmp_path / "p.pcapng") if f[0] == "ACM-LENGTH"]
    assert [m for _, _, m in found] == [
        "ACM answer acm_hdr.length 664 is over sizeof(struct acm_msg) (592): librdmacm "
        "discards it"]


def test_a_length_fault_after_an_unanswered_resolve_is_still_found(session, tmp_path):
    s = session
    path = _path(s)
    p = _program(s)
    _address(p)
    p.acm_request()                      # never answered
    p.acm_request()
    p.acm_answer([(GMP_BIDIR, path)], trailing=bytes(4),
                 length=ACM_MSG_HDR_LENGTH + 2 * ACM_MSG_EP_LENGTH)
    s.close()
    found = [f for f in findings(tmp_path / "p.pcapng") if f[0] == "ACM-LENGTH"]
    assert len(found) == 1 and found[0][2].endswith("librdmacm discards it")


def test_a_path_split_names_the_first_and_last_entry_copied(session, tmp_path):
    """Paths 0, 2, 3 and an address entry at 1: librdmacm copies entries 0..2, so the
    address reaches the kernel and path entry 3 does not."""
    s = session
    path, alt = _path(s), _path(s, 1)
    answer = [path_entry(GMP_BIDIR, path), address_entry(2, s.remote_ip),
              path_entry(GMP_BIDIR_SECONDARY, alt), path_entry(GMP_BIDIR_SECONDARY, alt)]
    p = _program(s)
    _address(p)
    p.acm_request()
    p.acm_answer(answer)
    p.set_path(ai_route_bytes(answer))
    s.close()
    found = [f for f in findings(tmp_path / "p.pcapng") if f[0] == "ACM-PATH-SPLIT"]
    assert [m for _, _, m in found] == [
        "ACM answer: librdmacm copies entries 0..2 as the path array: address entry 1 "
        "reaches the kernel as a path record, path entry 3 does not"]


def test_a_verdict_in_an_unknown_state_is_not_judged(session, tmp_path):
    """A cm_id whose CREATE_ID and RESOLVE_ADDR are not in the capture: its state is unknown,
    and so is what ucma_set_ib_path would answer; a 0 there is no finding."""
    s = session
    p = _program(s)
    p.id = 7
    p.set_path([(GMP_BIDIR, _path(s))], verdict=0)
    s.close()
    assert not [f for f in findings(tmp_path / "p.pcapng") if f[0] == "UCMA-VERDICT"]


def test_a_readback_after_a_refused_array_is_judged_against_the_accepted_one(session, tmp_path):
    """The first array holds no 0x2B record: the ucma profile takes nothing from it, though
    this kernel answered 0 (UCMA-VERDICT's business), so its readback has no record to be
    compared with; the second is taken, and its readback differs (SL 3)."""
    s = session
    path = _path(s)
    p = _program(s)
    _address(p)
    p.set_path([(0x0A, path)], verdict=0)            # no 0x2B record, yet answered 0
    p.query_path([(GMP_BIDIR, _roce_readback(path))])
    p.set_path([(GMP_BIDIR, path)])
    other = _roce_readback(path)
    other.sl = 3
    _resolved(s, p, path, readback=other)
    s.close()
    found = [f for f in findings(tmp_path / "p.pcapng") if f[0] == "UCMA-READBACK"]
    assert len(found) == 1 and found[0][2].endswith(
        "the kernel's PATH readback differs from record 0 of the array it was given, which "
        "the ucma profile takes: sl")


def test_af_ib_addresses_after_an_ip_resolution_of_the_same_program(session, tmp_path):
    """rdma_resolve_addr with IP addresses first, then the AF_IB ones made of the ACM answer:
    the second RESOLVE_ADDR is the finding."""
    s = session
    path = _path(s)
    p = _program(s)
    p.acm_request()
    p.acm_answer([(GMP_BIDIR, path)])
    p.create_id()
    p.resolve_addr()
    p.resolve_addr(sockaddr_ib(path.sgid), sockaddr_ib(path.dgid, sid=0x1061D53),
                   rc=-1, err=errno.ENODEV)
    s.close()
    found = [f for f in findings(tmp_path / "p.pcapng") if f[0] == "ACM-AF-IB-ON-ROCE"]
    assert len(found) == 1 and "it failed with ENODEV" in found[0][2]
