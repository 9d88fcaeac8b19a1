"""Process scenarios: a librdmacm program as `ibpath record` records it (program.py), one
conforming flow and one fault for every process rule (audit/rules/process.py).

Every flow resolves over RoCEv2, as the kernel lab's rxe does: the GIDs are the hosts'
IPv4-mapped addresses, and the kernel's PATH readback carries its RoCE fields where the
array had LIDs (route_resolved 1, then the peer's MAC; audit/rules/process.py).
"""

from __future__ import annotations

import errno

from ..layers.acm import ACM_MSG_EP_LENGTH, ACM_MSG_HDR_LENGTH, ACM_STATUS_ENODATA
from ..layers.mad import (ATTR_SERVICE_RECORD, MAD, METHOD_GET_TABLE, METHOD_GET_TABLE_RESP, RMPP,
                          RMPP_TYPE_DATA)
from ..layers.sa import (SA_MAD_HDR_SIZE, SERVICE_NAME_SIZE, SERVICE_RECORD_SIZE, PathRecord,
                         SAHeader, ServiceRecord)
from ..layers.ucma import IB_SERVICE_FLAG_ID, IB_SERVICE_FLAG_NAME
from ..facts.librdmacm import ai_route_bytes
from ..facts.rmpp import segment
from .program import Program, address_entry, path_entry, sockaddr_ib
from .registry import scenario
from .resolver import GMP_BIDIR, GMP_BIDIR_SECONDARY
from .session import Session

ROCE = ("rocev2",)


def _program(s: Session) -> Program:
    return Program(s.b, s.local_ip, s.remote_ip)


def _path(s: Session, k: int = 0) -> PathRecord:
    """The route from local to remote on LID pair k (the SA's record, as ibacm passes it)."""
    return s.sa.record(s.local, s.remote, s.local.lids[k], s.remote.lids[k])


def _roce_readback(rec: PathRecord) -> PathRecord:
    """The kernel's readback of a RoCE path: the record, its LIDs replaced by route_resolved
    (1) and the first bytes of the peer's MAC (52:54:00, QEMU's prefix)."""
    out = rec.copy()
    out.dlid, out.slid = 0x0152, 0x5400
    return out


def _address(p: Program) -> None:
    """rdma_create_id, then rdma_resolve_addr and its ADDR_RESOLVED event."""
    p.create_id()
    p.resolve_addr()
    p.event("ADDR_RESOLVED")


def _through_acm(s: Session, answer: list, passed: list | None = None, *,
                 verdict: int | str = "kernel", trailing: bytes = b"") -> Program:
    """The address resolved, ibacm's answer, and the array librdmacm hands to SET_OPTION
    (the answer's entries unless `passed` says otherwise)."""
    p = _program(s)
    _address(p)
    p.acm_request()
    p.acm_answer(answer, trailing=trailing)
    p.set_path(answer if passed is None else passed, verdict=verdict)
    return p


def _connect(s: Session, path: PathRecord) -> None:
    """The kernel's CM REQ on the path it holds, answered."""
    s.cm_req(path)
    s.b.cm_rep_rtu(src=s.local_ip, dst=s.remote_ip)


def _resolved(s: Session, p: Program, path: PathRecord, readback: PathRecord | None = None):
    """ROUTE_RESOLVED, the readback librdmacm asks for, and the connection."""
    p.event("ROUTE_RESOLVED")
    p.query_path([(GMP_BIDIR, readback if readback is not None else _roce_readback(path))])
    _connect(s, path)


@scenario("conform-acm", encaps=ROCE, program=True)
def conform_acm(s: Session) -> None:
    """librdmacm resolves the route through ibacm: one 0x2B path entry, handed to SET_OPTION verbatim, read back and connected on.

    rdma_resolve_addr, ADDR_RESOLVED; rdma_resolve_route asks ibacm (RESOLVE) and passes the
    answer's path entry to rdma_set_option; ROUTE_RESOLVED; the PATH readback is the record
    (its LIDs the kernel's RoCE fields); the CM REQ carries it."""
    path = _path(s)
    _resolved(s, _through_acm(s, [(GMP_BIDIR, path)]), path)


@scenario("ucma-set-option-state", ("UCMA-SET-OPTION-STATE",), encaps=ROCE, program=True)
def ucma_set_option_state(s: Session) -> None:
    """A program hands the kernel a path array before resolving the address: SET_OPTION fails with EINVAL.

    rdma_set_ib_path takes a path only in ADDR_RESOLVED; the array itself is good (0x2B)."""
    p = _program(s)
    p.create_id()
    p.set_path([(GMP_BIDIR, _path(s))], verdict=-errno.EINVAL)


@scenario("ucma-verdict", ("UCMA-VERDICT",), encaps=ROCE, program=True)
def ucma_verdict(s: Session) -> None:
    """The kernel refuses a good path array in the right state with ENODEV, which the ucma profile does not predict.

    On RoCE rdma_set_ib_path fails so when the bound address has no net device; the audit
    cannot know the array is the cause, and says the verdict is not the predicted one."""
    _through_acm(s, [(GMP_BIDIR, _path(s))], verdict=-errno.ENODEV)


@scenario("ucma-readback", ("UCMA-READBACK",), encaps=ROCE, program=True)
def ucma_readback(s: Session) -> None:
    """The kernel's PATH readback is not the record it was given: SL 3 and MTU 1024 instead.

    A kernel that rewrote the path (QoS policy, a patched ucma) connects on another path than
    the one the array and the audit describe."""
    path = _path(s)
    p = _through_acm(s, [(GMP_BIDIR, path)])
    other = _roce_readback(path)
    other.sl, other.mtu = 3, 3
    _resolved(s, p, path, readback=other)


@scenario("acm-route-differs", ("ACM-ROUTE-DIFFERS",), encaps=ROCE, program=True)
def acm_route_differs(s: Session) -> None:
    """ibacm answers a primary and an alternate path (0x2B, 0x2D); only the primary reaches SET_OPTION.

    librdmacm passes every path entry on (ucma_ib_save_resp); something between them dropped
    the alternate, so the connection has no failover path the resolver meant it to have."""
    path, alt = _path(s), _path(s, 1)
    p = _through_acm(s, [(GMP_BIDIR, path), (GMP_BIDIR_SECONDARY, alt)], [(GMP_BIDIR, path)])
    _resolved(s, p, path)


@scenario("acm-unanswered", ("ACM-UNANSWERED",), encaps=ROCE, program=True)
def acm_unanswered(s: Session) -> None:
    """ibacm never answers librdmacm's RESOLVE; the route is resolved by the kernel.

    librdmacm's recv() has no timeout: it waits until ibacm closes the socket, then
    rdma_resolve_route issues RESOLVE_ROUTE."""
    p = _program(s)
    _address(p)
    p.acm_request()
    p.resolve_route()
    _resolved(s, p, _path(s))


@scenario("acm-fallback", ("ACM-FALLBACK",), encaps=ROCE, program=True)
def acm_fallback(s: Session) -> None:
    """ibacm answers ENODATA; librdmacm silently lets the kernel resolve the route.

    An answer with a status leaves ai_route empty; rdma_resolve_route issues RESOLVE_ROUTE
    and the application cannot tell that ibacm was not used."""
    p = _program(s)
    _address(p)
    p.acm_request()
    p.acm_answer([], status=ACM_STATUS_ENODATA)
    p.resolve_route()
    _resolved(s, p, _path(s))


@scenario("acm-af-ib-on-roce", ("ACM-AF-IB-ON-ROCE",), encaps=ROCE, program=True)
def acm_af_ib_on_roce(s: Session) -> None:
    """rdma_getaddrinfo without RAI_ROUTEONLY turns ibacm's path into AF_IB addresses; RESOLVE_ADDR with them fails with ENODEV on RoCE.

    What the lab's ucmatose run showed: the same program connects without ibacm."""
    p = _program(s)
    path = _path(s)
    p.acm_request()
    p.acm_answer([(GMP_BIDIR, path)])
    p.create_id()
    p.resolve_addr(sockaddr_ib(path.sgid), sockaddr_ib(path.dgid, sid=0x1061D53),
                   rc=-1, err=errno.ENODEV)


@scenario("acm-length", ("ACM-LENGTH",), encaps=ROCE, program=True)
def acm_length(s: Session) -> None:
    """ibacm's answer carries 4 bytes past its last whole entry; librdmacm drops them.

    ucma_ib_save_resp reads (length - 16) / 72 entries: the route still works, but ibacm and
    the kernel disagree on what was sent."""
    path = _path(s)
    _resolved(s, _through_acm(s, [(GMP_BIDIR, path)], trailing=bytes(4)), path)


@scenario("acm-length-discarded", ("ACM-LENGTH", "ACM-FALLBACK"), encaps=ROCE, program=True)
def acm_length_discarded(s: Session) -> None:
    """An ACM answer's header claims two entries; one and 4 stray bytes arrive: librdmacm discards it and the kernel resolves the route.

    ucma_ib_resolve keeps an answer only when acm_hdr.length is the bytes recv() returned;
    it never reads this one's entries, so its stray bytes are no finding of their own: one
    ACM-LENGTH, then ACM-FALLBACK for the kernel's RESOLVE_ROUTE."""
    p = _program(s)
    _address(p)
    path = _path(s)
    p.acm_request()
    p.acm_answer([(GMP_BIDIR, path)], trailing=bytes(4),
                 length=ACM_MSG_HDR_LENGTH + 2 * ACM_MSG_EP_LENGTH)
    p.resolve_route()
    _resolved(s, p, path)


@scenario("acm-path-split", ("ACM-PATH-SPLIT", "BLOB-ENDPOINTS", "BLOB-NOT-MAD-FORMAT"),
          encaps=ROCE, program=True)
def acm_path_split(s: Session) -> None:
    """An ACM responder puts an address entry between two path entries; librdmacm hands the kernel the address as a path record and loses the second path.

    ucma_ib_save_resp copies as many entries as there are paths from the first path on: the
    array holds 0x2B and the DEST address entry (flags 0x02, its address bytes as a
    PathRecord), which the blob rules find is no resolved path between the endpoints. The
    kernel takes the 0x2B
    record; the alternate path is gone."""
    p = _program(s)
    _address(p)
    path, alt = _path(s), _path(s, 1)
    answer = [path_entry(GMP_BIDIR, path), address_entry(2, s.remote_ip),
              path_entry(GMP_BIDIR_SECONDARY, alt)]
    p.acm_request()
    p.acm_answer(answer)
    p.set_path(ai_route_bytes(answer))
    _resolved(s, p, path)


@scenario("record-incomplete", ("RECORD-INCOMPLETE",), encaps=ROCE, program=True)
def record_incomplete(s: Session) -> None:
    """The conforming ibacm flow, and a note of ibpath record's: the run reached its size cap, so the capture ends early.

    The recorder never drops a call in silence: what it could not write is a note, and the
    audit says the process view is incomplete."""
    path = _path(s)
    p = _through_acm(s, [(GMP_BIDIR, path)])
    p.event("ROUTE_RESOLVED")
    s.b.recorder_note("per-run cap reached (--max-total 268435456 bytes): the calls after "
                      "this one are not recorded")


# -- IB service resolution (Linux 6.17: rdma_resolve_ib_service) -----------------------------
# Native IB only: on RoCE there is no SA and rdma_resolve_ib_service returns EOPNOTSUPP
# (rdma_cap_ib_sa). The kernel's SA query is on the wire; the program's ucma commands are
# its own view.
IB = ("ib",)
SERVICE_NAME = b"ibpath.service"
SERVICE_ID = 0x1000000000000001


def _service(s: Session, k: int = 0, name: bytes = SERVICE_NAME) -> ServiceRecord:
    """The k-th service the remote host registered with the SA."""
    return ServiceRecord(service_id=SERVICE_ID + k, service_gid=s.remote.gid,
                         service_pkey=0xFFFF, service_lease=0xFFFFFFFF, service_name=name,
                         service_data8_0=k)


def _service_get_table(s: Session, asked: ServiceRecord, mask: int,
                       held: list[ServiceRecord]) -> None:
    """The kernel's SubnAdmGetTable(ServiceRecord) for `asked` under ComponentMask `mask`
    (cma.c cma_resolve_ib_service) and the SA's answer `held` in RMPP segments: each query
    a TID of its own, as the kernel's MAD agent gives."""
    s.b.tid += 1
    tid = s.b.tid + 0x5000
    s.b.mad(MAD(method=METHOD_GET_TABLE, attribute_id=ATTR_SERVICE_RECORD, transaction_id=tid)
            / RMPP() / SAHeader(component_mask=mask, records=[asked]))
    answer = bytes(MAD(method=METHOD_GET_TABLE_RESP, attribute_id=ATTR_SERVICE_RECORD,
                       transaction_id=tid) / RMPP(rmpp_version=1, rmpp_type=RMPP_TYPE_DATA)
                   / SAHeader(records=held))
    # the layer pads a MAD to 256 bytes: cut it to the records, as the SA sends them
    for seg in segment(answer[:SA_MAD_HDR_SIZE + SERVICE_RECORD_SIZE * len(held)]):
        s.b.mad(seg, from_sa=True)


def _resolve_service(s: Session, *, flags: int, name: bytes = SERVICE_NAME,
                     service_id: int = 0, asked: ServiceRecord, mask: int,
                     held: list[ServiceRecord], event: tuple[str, int] | None = None,
                     rooms: list[int] | None = None) -> Program:
    """rdma_resolve_ib_service as the kernel does it: the cm_id bound, RESOLVE_IB_SERVICE,
    the kernel's SubnAdmGetTable(ServiceRecord) with `asked` under ComponentMask `mask`, the
    SA's answer `held` (RMPP segments of the records alone: an empty table is one segment of
    PayloadLength 20, which the kernel counts as no record), the event, and the QUERY
    IB_SERVICE readbacks with room for `rooms` records each.

    The event is the kernel's unless given: ADDRINFO_RESOLVED for records, ADDRINFO_ERROR
    -ENODATA for none (sa_query.c ib_sa_service_rec_callback). The rooms are librdmacm's
    unless given: 6, then the kernel's count when it holds more (cma.c
    ucma_query_ib_service)."""
    p = _program(s)
    p.create_id()
    p.bind()
    p.resolve_ib_service(service_id=service_id, name=name, flags=flags)
    _service_get_table(s, asked, mask, held)
    if event is None:
        event = ("ADDRINFO_RESOLVED", 0) if held else ("ADDRINFO_ERROR", -errno.ENODATA)
    p.event(*event)
    if event[0] == "ADDRINFO_RESOLVED":
        if rooms is None:
            rooms = [6] + ([len(held)] if len(held) > 6 else [])
        for room in rooms:
            p.query_ib_service(held, room=room)
    return p


_NAME_BIT = 1 << ServiceRecord.COMPONENTS["service_name"][0]


@scenario("conform-ib-service", encaps=IB, program=True)
def conform_ib_service(s: Session) -> None:
    """A program resolves a service by its NUL-terminated ServiceName; the SA answers the one service registered under it.

    RESOLVE_IB_SERVICE with FLAG_NAME: the kernel asks with the ServiceName component alone;
    ADDRINFO_RESOLVED, and QUERY IB_SERVICE reads the record back."""
    _resolve_service(s, flags=IB_SERVICE_FLAG_NAME, asked=ServiceRecord(
        service_name=SERVICE_NAME), mask=_NAME_BIT, held=[_service(s)])


@scenario("saq-sr-reserved-comp", ("SAQ-SR-RESERVED-COMP",), encaps=IB, program=True)
def saq_sr_reserved_comp(s: Session) -> None:
    """The ServiceRecord query sets ComponentMask bit 3, the reserved field's; OpenSM ignores it and answers.

    Harmless with OpenSM (it matches on the components it knows), but a bit no component has."""
    _resolve_service(s, flags=IB_SERVICE_FLAG_NAME, asked=ServiceRecord(
        service_name=SERVICE_NAME), mask=_NAME_BIT | 1 << 3, held=[_service(s)])


@scenario("ucma-ibs-no-key", ("UCMA-IBS-NO-KEY",), encaps=IB, program=True)
def ucma_ibs_no_key(s: Session) -> None:
    """A program asks for a service by name but sets neither FLAG_ID nor FLAG_NAME: the kernel asks for every service and takes the first.

    cma_resolve_ib_service sets a component only for a flag: ComponentMask 0, the SA answers
    both services it holds, and the cm_id goes to the first, not the one named."""
    _resolve_service(s, flags=0, asked=ServiceRecord(), mask=0,
                     held=[_service(s, 1, b"other.service"), _service(s)])


@scenario("ucma-ibs-name-unterminated", ("UCMA-IBS-NAME-UNTERMINATED",), encaps=IB,
          program=True)
def ucma_ibs_name_unterminated(s: Session) -> None:
    """A program asks for a ServiceName of 64 bytes with no NUL: the kernel asks the SA for its first 63, which match nothing.

    strscpy keeps 63 bytes and a NUL; OpenSM compares all 64 name bytes, finds no service
    (the one registered has the 64-byte name) and answers an empty table: ADDRINFO_ERROR
    -ENODATA."""
    name = b"N" * SERVICE_NAME_SIZE
    _resolve_service(s, flags=IB_SERVICE_FLAG_NAME, name=name, asked=ServiceRecord(
        service_name=name[:SERVICE_NAME_SIZE - 1]), mask=_NAME_BIT, held=[])


def _by_name(s: Session, held: list[ServiceRecord], **kw) -> Program:
    """A resolution by the NUL-terminated SERVICE_NAME, the SA answering `held`."""
    return _resolve_service(s, flags=IB_SERVICE_FLAG_NAME, asked=ServiceRecord(
        service_name=SERVICE_NAME), mask=_NAME_BIT, held=held, **kw)


@scenario("conform-ib-service-none", encaps=IB, program=True)
def conform_ib_service_none(s: Session) -> None:
    """No service is registered under the name: the SA answers an empty table and the kernel gives ADDRINFO_ERROR -ENODATA.

    ib_sa_service_rec_callback counts no record in the answer and gives -ENODATA, which
    cma_query_ib_service_handler passes on as the ADDRINFO_ERROR's status."""
    _by_name(s, [])


@scenario("ucma-ibs-event-mismatch", ("UCMA-IBS-EVENT-MISMATCH",), encaps=IB, program=True)
def ucma_ibs_event_mismatch(s: Session) -> None:
    """The SA answers the service, yet the process gets ADDRINFO_ERROR -ENODATA: the kernel did not see that answer.

    From an answer with one record the kernel makes ADDRINFO_RESOLVED; -ENODATA is what it
    gives an empty one."""
    _by_name(s, [_service(s)], event=("ADDRINFO_ERROR", -errno.ENODATA))


@scenario("conform-ib-service-retry", encaps=IB, program=True)
def conform_ib_service_retry(s: Session) -> None:
    """Eight services answer the name: librdmacm's QUERY with room for 6 reads the count, and it asks again with room for 8.

    ucma_query_ib_service copies 6 and says 8; librdmacm's ucma_query_ib_service frees its
    buffer and asks for num_service_recs."""
    _by_name(s, [_service(s, k) for k in range(8)])


@scenario("ucma-ibs-query-truncated", ("UCMA-IBS-QUERY-TRUNCATED",), encaps=IB, program=True)
def ucma_ibs_query_truncated(s: Session) -> None:
    """Eight services answer the name; the program's one QUERY has room for 6 and it never asks again.

    The kernel says it holds 8 and copies 6: the last two services are lost to the program."""
    _by_name(s, [_service(s, k) for k in range(8)], rooms=[6])


@scenario("ucma-ibs-on-roce", ("UCMA-IBS-ON-ROCE",), encaps=ROCE, program=True)
def ucma_ibs_on_roce(s: Session) -> None:
    """A program asks for an IB service on a RoCE port: RESOLVE_IB_SERVICE fails with EOPNOTSUPP.

    rdma_resolve_ib_service finds no IB SA on the port (rdma_cap_ib_sa) and refuses before
    any query: no SA frame, no ADDRINFO event."""
    p = _program(s)
    p.create_id()
    p.bind()
    p.resolve_ib_service(name=SERVICE_NAME, flags=IB_SERVICE_FLAG_NAME, err=errno.EOPNOTSUPP)


@scenario("ucma-ibs-twice", ("UCMA-IBS-TWICE",), encaps=IB, program=True)
def ucma_ibs_twice(s: Session) -> None:
    """After the service resolved, the program resolves another one on the same cm_id: the kernel refuses it with EINVAL.

    The cm_id is in ADDRINFO_RESOLVED, and rdma_resolve_ib_service starts only from
    ADDR_BOUND."""
    p = _by_name(s, [_service(s)])
    p.resolve_ib_service(service_id=SERVICE_ID + 1, flags=IB_SERVICE_FLAG_ID, err=errno.EINVAL)


@scenario("ucma-ibs-query-early", ("UCMA-IBS-QUERY-EARLY",), encaps=IB, program=True)
def ucma_ibs_query_early(s: Session) -> None:
    """The program asks QUERY(IB_SERVICE) before it reads ADDRINFO_RESOLVED: the kernel does not hold the records yet and answers ENODATA.

    Its query after the event reads them."""
    held = [_service(s)]
    p = _program(s)
    p.create_id()
    p.bind()
    p.resolve_ib_service(name=SERVICE_NAME, flags=IB_SERVICE_FLAG_NAME)
    p.query_ib_service(held, err=errno.ENODATA)
    _service_get_table(s, ServiceRecord(service_name=SERVICE_NAME), _NAME_BIT, held)
    p.event("ADDRINFO_RESOLVED")
    p.query_ib_service(held)
