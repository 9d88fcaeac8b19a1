"""An IB service resolution's time line (issue 41, item 2): RESOLVE_IB_SERVICE, the kernel's
SA GetTable(ServiceRecord) when the wire is in the same input, the ADDRINFO event and the
QUERY(IB_SERVICE) readbacks, as one resolution of the audit; and where the rules that read it
change their verdict.

Oracles (Linux 6.17, the series "RDMA/cma: Support IB service record resolution"):
sa_query.c recv_handler gives the callback -EINVAL for a non-zero MAD status and
ib_sa_service_rec_callback -ENODATA for an answer of no record, whatever its status;
cma.c cma_query_ib_service_handler turns an error into ADDRINFO_ERROR with that status and
records into ADDRINFO_RESOLVED; ucma.c ucma_query_ib_service says the kernel's count and
copies what the buffer holds; librdmacm cma.c ucma_query_ib_service asks for 6, then for the
count.
"""

from __future__ import annotations

import errno

import pytest

from ibpath_scapy.audit.ladder import ladders
from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.audit.process import process_view
from ibpath_scapy.audit.rules.process import expected_addrinfo_event
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.craft.process_scenarios import (
    _NAME_BIT, SERVICE_NAME, _by_name, _program, _service, _service_get_table,
)
from ibpath_scapy.craft.session import Session
from ibpath_scapy.layers.sa import ServiceRecord
from ibpath_scapy.layers.ucma import IB_SERVICE_FLAG_NAME

from conftest import CAPTURES


def audit(path, keep: bool = False):
    """The audit of one capture: as the CLI makes it for a ladder (closed transactions let
    go, their arrows drawn as they go), or with every transaction kept (the library's
    default)."""
    options = AuditOptions(keep_transactions=keep, ladder_arrows=not keep)
    audits, unreadable = audit_paths([str(path)], options, quiet=True)
    assert not unreadable
    return audits[0]


@pytest.fixture
def session(tmp_path):
    s = Session(str(tmp_path / "p.pcapng"), encap="ib")
    yield s
    s.close()


@pytest.mark.parametrize("keep", [False, True])
def test_a_service_resolution_is_one_resolution_from_command_to_retry(keep):
    """conform-ib-service-retry: the command, the GetTable and its 8 RMPP frames, the event
    and librdmacm's two queries are one time line, and one ladder draws each frame once."""
    fa = audit(CAPTURES / "corpus" / "conform-ib-service-retry.pcapng", keep)
    (sr,) = process_view(fa.replay).services
    assert sr.command.frame == 3 and sr.event.event == "ADDRINFO_RESOLVED"
    assert sr.sa is not None and sr.sa_answer() == (0, 8)
    assert [(q.num_service_recs, len(q.service_records)) for q in sr.queries] == [(8, 6), (8, 8)]
    assert sr.frames == list(range(3, 16))
    (lad,) = [lad for lad in ladders(fa) if lad.name == sr.name]
    assert [a.frame for a in lad.arrows] == sr.frames
    assert not fa.findings


def test_the_kernel_event_of_an_sa_answer():
    """No record is -ENODATA even with an error status (counted first); an error status with
    records -EINVAL; records ADDRINFO_RESOLVED."""
    assert expected_addrinfo_event(0, 0) == ("ADDRINFO_ERROR", -errno.ENODATA)
    assert expected_addrinfo_event(0x0C00, 0) == ("ADDRINFO_ERROR", -errno.ENODATA)
    assert expected_addrinfo_event(0x0C00, 2) == ("ADDRINFO_ERROR", -errno.EINVAL)
    assert expected_addrinfo_event(0, 1) == ("ADDRINFO_RESOLVED", 0)


def _rules(fa, prefix="UCMA-IBS-") -> list[tuple[str, list[int]]]:
    return [(f.rule, list(f.frames)) for f in fa.findings if f.rule.startswith(prefix)]


def test_an_empty_answer_with_enoent_is_not_what_the_kernel_gives(session, tmp_path):
    """An empty table is ADDRINFO_ERROR -ENODATA: -ENOENT (cma_query_ib_service_handler's own
    check of no record, which ib_sa_service_rec_callback keeps out of reach) is a mismatch."""
    _by_name(session, [], event=("ADDRINFO_ERROR", -errno.ENOENT))
    session.close()
    fa = audit(tmp_path / "p.pcapng")
    assert _rules(fa) == [("UCMA-IBS-EVENT-MISMATCH", [5, 6])]
    assert "makes ADDRINFO_ERROR -ENODATA; the process got ADDRINFO_ERROR -ENOENT" in \
        fa.findings[0].message


def test_resolved_from_an_empty_answer_is_a_mismatch(session, tmp_path):
    _by_name(session, [], event=("ADDRINFO_RESOLVED", 0))
    session.close()
    assert _rules(audit(tmp_path / "p.pcapng")) == [("UCMA-IBS-EVENT-MISMATCH", [5, 6])]


def test_without_the_wire_the_event_is_not_judged(session, tmp_path):
    """A recording of the process alone: no SA answer to judge the event by."""
    p = _program(session)
    p.create_id()
    p.bind()
    p.resolve_ib_service(name=SERVICE_NAME, flags=IB_SERVICE_FLAG_NAME)
    p.event("ADDRINFO_ERROR", -errno.ENOENT)
    session.close()
    fa = audit(tmp_path / "p.pcapng")
    (sr,) = process_view(fa.replay).services
    assert sr.sa is None and _rules(fa) == []


def test_an_sa_query_before_the_command_is_not_its_own(session, tmp_path):
    """A ServiceRecord query sent before RESOLVE_IB_SERVICE (saquery, another program) is not
    the kernel's: the resolution has no SA answer, and its event is not judged by that one."""
    s = session
    _service_get_table(s, ServiceRecord(service_name=SERVICE_NAME), _NAME_BIT, [_service(s)])
    p = _program(s)
    p.create_id()
    p.bind()
    p.resolve_ib_service(name=SERVICE_NAME, flags=IB_SERVICE_FLAG_NAME)
    p.event("ADDRINFO_ERROR", -errno.ENODATA)
    s.close()
    fa = audit(tmp_path / "p.pcapng")
    (sr,) = process_view(fa.replay).services
    assert sr.sa is None and _rules(fa) == []


def test_a_retry_with_room_short_of_the_count_is_still_truncated(session, tmp_path):
    """Asked again, but with room for 7 of 8: the last service is still lost."""
    _by_name(session, [_service(session, k) for k in range(8)], rooms=[6, 7])
    session.close()
    assert _rules(audit(tmp_path / "p.pcapng")) == [("UCMA-IBS-QUERY-TRUNCATED", [15])]


def test_a_second_try_after_an_error_is_allowed(session, tmp_path):
    """ADDRINFO_ERROR puts the cm_id back in ADDR_BOUND: a second RESOLVE_IB_SERVICE is the
    kernel's to take, not UCMA-IBS-TWICE."""
    s = session
    p = _by_name(s, [])
    p.resolve_ib_service(name=SERVICE_NAME, flags=IB_SERVICE_FLAG_NAME)
    _service_get_table(s, ServiceRecord(service_name=SERVICE_NAME), _NAME_BIT, [_service(s)])
    p.event("ADDRINFO_RESOLVED")
    p.query_ib_service([_service(s)])
    s.close()
    fa = audit(tmp_path / "p.pcapng")
    first, second = process_view(fa.replay).services
    assert first.sa is not None and second.sa is not None and first.sa is not second.sa
    assert _rules(fa) == []


def test_a_query_after_an_error_is_early(session, tmp_path):
    """After ADDRINFO_ERROR the kernel holds no record: the QUERY fails with ENODATA."""
    p = _by_name(session, [])
    p.query_ib_service([], err=errno.ENODATA)
    session.close()
    fa = audit(tmp_path / "p.pcapng")
    assert _rules(fa) == [("UCMA-IBS-QUERY-EARLY", [7])]
    assert "after ADDRINFO_ERROR; it failed with ENODATA" in fa.findings[0].message
