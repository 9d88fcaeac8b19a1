"""Process rules (audit-rules.md "Process rules", ibpath's catalogue): what a program did
with the rdma_cm device and librdmacm's ACM socket, from `ibpath record`'s captures.

A check is given ``(replay, options)`` and reads the replay's process view
(audit/process.py): each cm_id's commands, its hand-overs (SET_OPTION(IB, IB_PATH) and its
path array) and PATH readbacks, each ACM exchange with what the process did next, and each
IB service resolution (RESOLVE_IB_SERVICE, the kernel's SA GetTable, the ADDRINFO event,
the QUERY(IB_SERVICE) readbacks).

Sources: drivers/infiniband/core/ucma.c (ucma_set_option_ib, ucma_set_ib_path,
ucma_query_path; 6.17: ucma_resolve_ib_service, ucma_query_ib_service),
drivers/infiniband/core/cma.c (rdma_set_ib_path; 6.17: rdma_resolve_ib_service,
cma_query_ib_service_handler), sa_query.c (6.17: ib_sa_service_rec_callback), rdma-core
librdmacm/acm.c (ucma_ib_resolve, ucma_ib_save_resp, ucma_resolve_af_ib) and cma.c
(ucma_query_ib_service, resolve_ai_sa), and the lab's observations on a 6.1 kernel with rxe
(captures/rxe/acm/README.md).
"""

from __future__ import annotations

import errno
import ipaddress

from ...facts import Code
from ...facts.records import PATH_RECORD_FIELDS
from ...layers.pathdata import GMP_PRIMARY_BIDIRECTIONAL, flags_text
from ...layers.sa import SERVICE_NAME_SIZE, name_unterminated
from ...layers.ucma import AF_IB, ADDRESS_FAMILIES
from ..kernel import kernel_view_of
from ..model import rule
from ...facts.librdmacm import ACM_MSG_SIZE
from ..process import SET_PATH_STATES, process_view

RDMA_SET_IB_PATH = "drivers/infiniband/core/cma.c rdma_set_ib_path"
UCMA_SET_IB_PATH = "drivers/infiniband/core/ucma.c ucma_set_ib_path"
UCMA_QUERY_PATH = "drivers/infiniband/core/ucma.c ucma_query_path"
ACM_RESOLVE = "rdma-core librdmacm/acm.c ucma_ib_resolve"
ACM_SAVE_RESP = "rdma-core librdmacm/acm.c ucma_ib_save_resp"
ACM_AF_IB = "rdma-core librdmacm/acm.c ucma_resolve_af_ib; cma.c ucma_set_af_ib_support"
LAB = "ibpath kernel lab, captures/rxe/acm (kernel 6.1, rxe, rdma-core 44)"
CMA_RESOLVE_IB_SERVICE = ("Linux 6.17 drivers/infiniband/core/cma.c cma_resolve_ib_service "
                          "(RDMA_USER_CM_IB_SERVICE_FLAG_ID/_NAME -> IB_SA_SERVICE_REC_SERVICE_ID/"
                          "_NAME); ucma.c ucma_resolve_ib_service")
_AF_IB = ADDRESS_FAMILIES[AF_IB]
# What a RoCE readback does not carry: the kernel's RoCE path record (rec_type ROCE_V*,
# cma.c cma_iboe_set_path_rec_l2_fields) keeps route_resolved and the destination MAC where
# an IB record has its LIDs, and ucma_query_path packs those bytes as DLID and SLID. The lab
# shows it: readback LIDs 0x01f2 0xea52 = route_resolved 1, then f2:ea:52 of the peer's MAC
# f2:ea:52:f2:43:75 (the RoCEv2 frames' Ethernet header), whatever the array said.
# struct sa_path_rec (include/rdma/ib_sa.h) keeps the IB fields and the RoCE ones in one
# union: ib.dlid, ib.slid, ib.raw_traffic lie over roce.route_resolved and roce.dmac[0..3], so
# a RoCE readback's raw_traffic bit is the low bit of the peer MAC's fourth byte
_ROCE_UNKEPT = {"dlid", "slid", "raw_traffic"}
_ROUTE_RESOLVED = 1


def _is_roce(path_record) -> bool:
    """A RoCEv2 path over IPv4: its GIDs are IPv4-mapped addresses (rdma_ip2gid)."""
    try:
        return ipaddress.IPv6Address(path_record.sgid).ipv4_mapped is not None
    except ValueError:
        return False


def _roce_readback(given, got) -> bool:
    """The readback is of a RoCE path: its GIDs say so, or its DLID's first byte is the RoCE
    record's route_resolved flag (a path array with garbage GIDs, BLOB-NOT-MAD-FORMAT)."""
    return _is_roce(given) or got.dlid >> 8 == _ROUTE_RESOLVED


@rule("UCMA-SET-OPTION-STATE", "error", "process", RDMA_SET_IB_PATH + "; " + UCMA_SET_IB_PATH)
def set_option_state(subject):
    """SET_OPTION(IB, IB_PATH) on a cm_id whose address is not resolved, or whose route is.

    rdma_set_ib_path moves the cm_id from ADDR_RESOLVED to ROUTE_RESOLVED with
    cma_comp_exch and returns EINVAL in any other state; ucma_set_ib_path also wants a bound
    device. So the path array is refused before RESOLVE_ADDR has completed (rdma_resolve_addr
    not called, or its ADDR_ERROR) and once a route is set (an earlier accepted SET_OPTION, a
    ROUTE_RESOLVED event, RESOLVE_ROUTE under way). A SET_OPTION made while the address
    query is still pending (its event not yet read) is not judged: the kernel may have
    resolved it already.
    Source: cma.c rdma_set_ib_path; ucma.c ucma_set_ib_path.
    """
    replay, _ = subject
    for cm in process_view(replay).cm_ids:
        for h in cm.hand_overs:
            if h.state in SET_PATH_STATES or h.state == "unknown":
                continue
            verdict = h.verdict()
            said = {None: "", "-EINVAL": ": the kernel returned -EINVAL"}.get(
                verdict, f": the kernel returned {verdict}, not the EINVAL rdma_set_ib_path "
                "gives (another kernel?)")
            yield h.frames, (f"{cm.name}: SET_OPTION(IB, IB_PATH) in state {h.state}; "
                             f"rdma_set_ib_path takes a path only in ADDR_RESOLVED{said}")


@rule("UCMA-VERDICT", "error", "process", UCMA_SET_IB_PATH + "; " + RDMA_SET_IB_PATH + "; " + LAB)
def set_option_verdict(subject):
    """The kernel's verdict on a SET_OPTION(IB, IB_PATH) is not the one the ucma profile predicts.

    From the path array and the cm_id's state the ucma profile predicts 0 (a 0x2B record, the
    address resolved) or EINVAL; the lab's 6.1 kernel gave exactly that for every array of
    the matrix. Another answer means a kernel that reads the array differently (a patched or
    newer ucma_set_ib_path) or a cause outside the array: ENODEV on RoCE when the bound
    address has no net device (cma_iboe_set_path_rec_l2_fields), ENOMEM.
    Source: ucma.c ucma_set_ib_path; cma.c rdma_set_ib_path; kernelview.select_ucma.
    """
    replay, _ = subject
    for cm in process_view(replay).cm_ids:
        for h in cm.hand_overs:
            verdict = h.verdict()
            if verdict is None or h.blob is None or h.state == "unknown":
                continue
            ucma = kernel_view_of(h.blob).get("ucma")
            if ucma is None:
                continue
            state_ok = h.state in SET_PATH_STATES
            predicted = "0" if ucma["accepted"] and state_ok else "-EINVAL"
            if verdict != predicted:
                why = (ucma["action"] if not ucma["accepted"] else
                       "the array holds a 0x2b record" if state_ok else f"state {h.state}")
                yield h.frames, (f"{cm.name}: the kernel answered SET_OPTION(IB, IB_PATH) with "
                                 f"{verdict}; the ucma profile predicts {predicted} ({why})")


def _differing(a, b, skip=frozenset()) -> list[str]:
    return [n for n in PATH_RECORD_FIELDS if n not in skip and a[n] != b[n]]


@rule("UCMA-READBACK", "warning", "process", UCMA_QUERY_PATH + "; " + RDMA_SET_IB_PATH + "; " + LAB)
def readback(subject):
    """The kernel's PATH readback after a hand-over is not the record the ucma profile takes.

    After an accepted SET_OPTION(IB_PATH) the cm_id holds one path (num_pri_alt_paths = 1),
    the first 0x2b record of the array; QUERY with RDMA_USER_CM_QUERY_PATH (librdmacm asks it
    after ROUTE_RESOLVED) reports it as one ib_path_rec_data with flags 0x2b. Compared: the
    count, the flags and every PathRecord field, except on RoCE the LIDs, which the kernel's
    RoCE path record does not keep. A difference means the connection runs on another path than
    the one the audit judged.
    On RoCE the readback's DLID, SLID and raw_traffic bit are the kernel's RoCE fields
    (route_resolved, then the first bytes of the peer's MAC: 0x01f2 0xea52 in the lab for the
    MAC f2:ea:52:..., raw_traffic the low bit of its fourth byte), not compared.
    Source: ucma.c ucma_query_path; cma.c rdma_set_ib_path; kernelview.select_ucma.
    """
    replay, _ = subject
    for cm in process_view(replay).cm_ids:
        for q, h in cm.readbacks:
            if h is None or h.blob is None:
                continue  # the kernel's own route, or a capture without the array
            ucma = kernel_view_of(h.blob).get("ucma")
            if not ucma or not ucma["accepted"]:
                continue
            want = h.blob.blob_records[ucma["gmp"]]
            frames = h.frames + [q.frame]
            if len(q.paths) != 1:
                yield frames, (f"{cm.name}: the PATH readback holds {len(q.paths)} paths; the "
                               f"kernel keeps one, record {ucma['gmp']} of the array")
                continue
            got = q.paths[0]
            roce = _roce_readback(want.path_record, got.path_record)
            skip = _ROCE_UNKEPT if roce else frozenset()
            diff = _differing(got.path_record, want.path_record, skip)
            if got.flags != GMP_PRIMARY_BIDIRECTIONAL:
                diff.insert(0, f"flags {flags_text(got.flags)}")
            if diff:
                yield frames, (f"{cm.name}: the kernel's PATH readback differs from record "
                               f"{ucma['gmp']} of the array it was given, which the ucma "
                               f"profile takes: {', '.join(diff)}")


@rule("ACM-ROUTE-DIFFERS", "error", "process", ACM_SAVE_RESP + "; " + LAB)
def acm_route_differs(subject):
    """The path array that reached SET_OPTION is not the ai_route librdmacm made of the ACM answer.

    librdmacm makes rdma_getaddrinfo's ai_route of the answer's path entries, in order: each
    entry's flags and its 64 PathRecord bytes (ucma_ib_save_resp, librdmacm.py), and
    rdma_resolve_route hands ai_route to rdma_set_option. The lab saw exactly that for every
    answer. An array that differs (records dropped, reordered, flags changed) was made by
    something between ibacm and the kernel: another librdmacm, a shim, the application.
    Source: librdmacm acm.c ucma_ib_save_resp; cma.c ucma_set_ib_route.
    """
    replay, _ = subject
    for cm in process_view(replay).cm_ids:
        for h in cm.hand_overs:
            x = h.acm
            route = x.route() if x is not None else None
            if route is None or h.blob is None:
                continue
            records = h.blob.blob_records
            if len(route) != len(records):
                yield x.frames + h.frames, (
                    f"{cm.name}: librdmacm's ai_route from the ACM answer holds {len(route)} "
                    f"entries, the array handed to SET_OPTION {len(records)} records")
                continue
            for i, (e, r) in enumerate(zip(route, records)):
                if e.path_record is None:
                    continue  # an address entry copied as a path: ACM-PATH-SPLIT
                diff = _differing(r.path_record, e.path_record)
                if e.flags != r.flags:
                    diff.insert(0, f"flags {flags_text(e.flags)} → {flags_text(r.flags)}")
                if diff:
                    yield x.frames + h.frames, (
                        f"{cm.name}: record {i} of the array is not entry {e.index} of the ACM "
                        f"answer: {', '.join(diff)}")


@rule("ACM-PATH-SPLIT", "error", "process", ACM_SAVE_RESP)
def acm_path_split(subject):
    """An ACM answer's path entries are not together: librdmacm hands the kernel an address entry as a path.

    ucma_ib_save_resp counts the path entries and copies that many 72-byte entries from the
    first path entry on: an address entry between two paths is copied into ai_route (its
    flags and address bytes as ib_path_rec_data) and the last path entry is lost. ibacm's own
    answers put the paths last; another responder may not.
    Source: librdmacm acm.c ucma_ib_save_resp (read from the code).
    """
    replay, _ = subject
    for x in process_view(replay).exchanges:
        route = x.route()
        if not route:
            continue
        copied = [e for e in route if e.path_record is None]
        if copied:
            routed = {e.index for e in route}
            lost = [e.index for e in x.response.path_entries() if e.index not in routed]
            addr = ", ".join(str(e.index) for e in copied)
            addr = (f"address entry {addr} reaches the kernel as a path record" if len(copied) == 1
                    else f"address entries {addr} reach the kernel as path records")
            paths = ", ".join(map(str, lost))
            paths = f"path entry {paths} does not" if len(lost) == 1 else f"path entries {paths} do not"
            yield [x.response.frame], (
                f"ACM answer: librdmacm copies entries {route[0].index}..{route[-1].index} as "
                f"the path array: {addr}, {paths}")


@rule("ACM-UNANSWERED", "warning", "process", ACM_RESOLVE + "; " + LAB)
def acm_unanswered(subject):
    """An ACM RESOLVE without an answer in the capture.

    librdmacm's recv() on the ACM socket has no timeout: the resolution waits until ibacm
    answers or closes the connection (the lab's client waited 5 s, until the stand-in closed
    it), then takes the kernel's route without saying so.
    Source: librdmacm acm.c ucma_ib_resolve.
    """
    replay, _ = subject
    for x in process_view(replay).exchanges:
        if x.response is None:
            then = (f"; the process then called {x.followed_by.command}"
                    if x.followed_by is not None else "")
            yield x.frames, f"ACM RESOLVE (tid 0x{x.request.acm.tid:x}) never answered{then}"


@rule("ACM-FALLBACK", "warning", "process", ACM_RESOLVE + "; " + ACM_SAVE_RESP + "; " + LAB)
def acm_fallback(subject):
    """librdmacm got no route from ibacm and resolved the route through the kernel instead.

    An answer with a status, without a path entry, or whose length is not what recv() read
    (one longer than struct acm_msg included) leaves ai_route empty; rdma_resolve_route then
    issues RESOLVE_ROUTE (the kernel's SA query or netlink) and the application cannot tell.
    The lab saw it for ENODATA, ETIMEDOUT, an 8-byte answer and a 65464-byte one.
    Source: librdmacm acm.c ucma_ib_resolve, ucma_ib_save_resp; cma.c ucma_set_ib_route.
    """
    replay, _ = subject
    for x in process_view(replay).exchanges:
        why = x.unusable()
        f = x.followed_by
        if why is None or why == "no answer" or f is None or f.command != "RESOLVE_ROUTE":
            continue
        yield x.frames + [f.frame], (f"ACM gave librdmacm no route ({why}): the route was "
                                     f"resolved by the kernel (RESOLVE_ROUTE, frame {f.frame})")


@rule("ACM-AF-IB-ON-ROCE", "error", "process", ACM_AF_IB + "; " + LAB)
def acm_af_ib_on_roce(subject):
    """An IP resolution turned into AF_IB addresses from an ACM answer, on RoCE.

    When the caller of rdma_getaddrinfo did not ask RAI_ROUTEONLY (ucmatose, rdma_client,
    every rdma_create_ep user), librdmacm puts an AF_IB entry made of the answer's path
    first (ucma_resolve_af_ib): sockaddr_ib of its SGID and DGID. On a RoCE port AF_IB has no
    meaning: RESOLVE_ADDR with them fails with ENODEV (the lab: `cmatose: failure getting
    addr: No such device`), and the same program connects without ibacm.
    Source: librdmacm acm.c ucma_resolve_af_ib; the lab's ucmatose run.
    """
    replay, _ = subject
    for rec, x in process_view(replay).resolve_addrs:
        if rec.dst_family != _AF_IB or x is None or x.response is None:
            continue
        paths = x.response.path_records()
        roce = any(_is_roce(p) for p in paths)
        failed = rec.failed
        if not paths or not (roce or failed):
            continue
        how = (f"it failed with {rec.call.errno}" if failed else
               "the path is a RoCE path (IPv4-mapped GIDs)")
        yield x.frames + [rec.frame], (
            f"RESOLVE_ADDR with AF_IB addresses from the ACM answer's path ({rec.dst}) for an "
            f"IP resolution; {how}: AF_IB has no meaning on a RoCE port")


@rule("ACM-LENGTH", "warning", "process", ACM_RESOLVE + "; " + ACM_SAVE_RESP + "; " + LAB)
def acm_length(subject):
    """An ACM answer's length does not fit what librdmacm reads of it.

    librdmacm reads at most sizeof(struct acm_msg) (16 + 8 x 72 = 592 bytes) and discards an
    answer whose acm_hdr.length is not the bytes it read; of a kept answer it reads
    (length - 16) / 72 entries and drops the bytes past the last whole one. Either way ibacm
    and the kernel see different routes than the answer says. One finding an answer: a
    discarded answer's entries are never read (ucma_ib_resolve returns before
    ucma_ib_save_resp), so the bytes past its last whole entry are not its fault too.
    Source: librdmacm acm.c ucma_ib_resolve, ucma_ib_save_resp.
    """
    replay, _ = subject
    for x in process_view(replay).exchanges:
        r = x.response
        if r is None:
            continue
        problems = {p.code: p for p in r.errors or ()}
        if r.acm.length > ACM_MSG_SIZE:
            yield [r.frame], (f"ACM answer acm_hdr.length {r.acm.length} is over sizeof(struct "
                              f"acm_msg) ({ACM_MSG_SIZE}): librdmacm discards it")
        elif Code.ACM_LENGTH in problems:
            yield [r.frame], f"ACM answer: {problems[Code.ACM_LENGTH]}: librdmacm discards it"
        elif Code.ACM_TRAILING in problems:
            yield [r.frame], f"ACM answer: {problems[Code.ACM_TRAILING]}"


@rule("RECORD-INCOMPLETE", "warning", "frame",
      "ibpath record (record/capture.py): every cap and every call it could not record noted")
def record_incomplete(rec):
    """ibpath record noted that it could not record everything the program did.

    A cap reached (a call's bytes past --max-record, the run past --max-total), a call that
    failed with nothing to show, caller memory it could not read, an fd it could not track:
    the capture is short of what happened there, so the audit's picture of the process is
    too. The finding names the recorder's note.
    Source: ibpath record's notes (record/capture.py).
    """
    if rec.get("kind") == "note":  # a fact, or a record the audit wrote as a dict
        yield [rec["frame"]], str(rec["errors"][0])


record_incomplete.only_kinds = ("note",)  # engine.py asks it about notes only


def _ib_service_request(rec):
    """(frame, cm_id, flags, name) of a RESOLVE_IB_SERVICE record, else None."""
    if rec.get("command") != "RESOLVE_IB_SERVICE" or rec.get("service_flags") is None:
        return None
    return rec.get("frame"), rec.get("id"), list(rec.get("service_flags")), rec.get("service_name")


def _ib_service_requests(subject):
    """(frame, cm_id, flags, name) of every RESOLVE_IB_SERVICE of the replay's cm_ids."""
    replay, _ = subject
    for cm in process_view(replay).cm_ids:
        for rec in cm.commands:
            got = _ib_service_request(rec)
            if got is not None:
                yield got


@rule("UCMA-IBS-NO-KEY", "warning", "process", CMA_RESOLVE_IB_SERVICE)
def ibs_no_key(subject):
    """RESOLVE_IB_SERVICE with neither FLAG_ID nor FLAG_NAME: the kernel asks the SA for every service.

    cma_resolve_ib_service sets the ServiceID component for FLAG_ID and the ServiceName
    component for FLAG_NAME, nothing else: with neither, its SubnAdmGetTable(ServiceRecord)
    has ComponentMask 0, every ServiceRecord the SA holds comes back, and the cm_id's
    destination is the first of them (cma_query_ib_service_handler), whatever the program
    meant by the service_id or service_name it passed.
    Source: cma.c cma_resolve_ib_service, cma_query_ib_service_handler.
    """
    for frame, cm_id, flags, _ in _ib_service_requests(subject):
        if not {"ID", "NAME"} & set(flags):
            yield [frame], (f"RESOLVE_IB_SERVICE id {cm_id} with flags "
                            f"{'|'.join(flags) or '0'}: neither ID nor NAME, the kernel asks the "
                            "SA with ComponentMask 0 and takes the first of every service it holds")


@rule("UCMA-IBS-NAME-UNTERMINATED", "warning", "process", CMA_RESOLVE_IB_SERVICE +
      "; OpenSM osm_sa_service_record.c __get_matching_sr (memcmp of all 64 name bytes)")
def ibs_name_unterminated(subject):
    """RESOLVE_IB_SERVICE by a ServiceName that fills its 64 bytes with no NUL: the kernel asks for its first 63.

    cma_resolve_ib_service copies the name into its SA query with strscpy(sr.name,
    ibs->service_name, sizeof(sr.name)), which keeps at most 63 bytes and a NUL; OpenSM
    compares all 64 bytes of ServiceName (memcmp), so a service registered under the 64-byte
    name is never found, and the answer is another service's or none (ADDRINFO_ERROR -ENODATA).
    Source: cma.c cma_resolve_ib_service; osm_sa_service_record.c __get_matching_sr.
    """
    for frame, cm_id, flags, name in _ib_service_requests(subject):
        if "NAME" in flags and name_unterminated(str(name)):
            yield [frame], (f"RESOLVE_IB_SERVICE id {cm_id} by name \"{name}\": no NUL in its "
                            f"{SERVICE_NAME_SIZE} bytes; the kernel's strscpy asks the SA for "
                            f"the first {SERVICE_NAME_SIZE - 1}")


# -- the time line of an IB service resolution (process.ServiceResolution) ------------------
# Read from the series merged for Linux 6.17 ("RDMA/cma: Support IB service record
# resolution", "RDMA/sa_query: Support IB service records resolution", "RDMA/ucma: Support
# query resolved service records") and rdma-core 60's librdmacm.
SA_SERVICE_CALLBACK = (
    "Linux 6.17 drivers/infiniband/core/sa_query.c recv_handler (\"query->rmpp_callback(query, "
    "mad->mad_hdr.status ? -EINVAL : 0, mad_recv_wc)\"), ib_sa_service_rec_callback "
    "(\"num_services = (mad_wc->mad_len - IB_SA_DATA_OFFS) / IB_SERVICE_REC_SZ; if "
    "(!num_services) { query->callback(-ENODATA, NULL, 0, query->context)\")")
CMA_SERVICE_HANDLER = (
    "Linux 6.17 drivers/infiniband/core/cma.c cma_query_ib_service_handler (\"if (status) "
    "goto fail; ... fail: work->event.event = RDMA_CM_EVENT_ADDRINFO_ERROR; "
    "work->event.status = status\"), cma_resolve_ib_service (\"work->event.event = "
    "RDMA_CM_EVENT_ADDRINFO_RESOLVED\")")
UCMA_QUERY_IB_SERVICE = (
    "Linux 6.17 drivers/infiniband/core/ucma.c ucma_query_ib_service (\"resp->num_service_recs "
    "= ctx->cm_id->route.num_service_recs; n = (out_len - sizeof(struct "
    "rdma_ucm_query_ib_service_resp)) / sizeof(struct ib_user_service_rec); ... if (n > "
    "ctx->cm_id->route.num_service_recs) n = ctx->cm_id->route.num_service_recs\")")
LIBRDMACM_QUERY_IB_SERVICE = (
    "rdma-core 60 librdmacm/cma.c ucma_query_ib_service (\"int ret, size, num = 6; ... if "
    "(resp->num_service_recs > num) { num = resp->num_service_recs; free(resp); goto retry; }\")")
CMA_RESOLVE_IB_SERVICE_SA = (
    "Linux 6.17 drivers/infiniband/core/cma.c rdma_resolve_ib_service (\"if "
    "(rdma_cap_ib_sa(id->device, id->port_num)) ret = cma_resolve_ib_service(id_priv, ibs); "
    "else ret = -EOPNOTSUPP;\"); ucma.c ucma_resolve_ib_service; rdma-core librdmacm/cma.c "
    "resolve_ai_sa (\"if (ret != sizeof(cmd)) return (ret >= 0) ? ERR(ENODATA) : -1;\")")


def expected_addrinfo_event(status: int, records: int) -> tuple[str, int]:
    """The event (and its status) the kernel gives a service resolution whose SA answer had
    MAD status `status` and `records` ServiceRecords: none is -ENODATA whatever the status
    (ib_sa_service_rec_callback counts before it looks), an error status with records -EINVAL
    (recv_handler), else ADDRINFO_RESOLVED (cma_query_ib_service_handler)."""
    if records == 0:
        return "ADDRINFO_ERROR", -errno.ENODATA
    if status:
        return "ADDRINFO_ERROR", -errno.EINVAL
    return "ADDRINFO_RESOLVED", 0


def _event_text(event: str, status: int) -> str:
    if not status:
        return event
    name = errno.errorcode.get(-status, str(-status))
    return f"{event} -{name}"


@rule("UCMA-IBS-EVENT-MISMATCH", "error", "process",
      SA_SERVICE_CALLBACK + "; " + CMA_SERVICE_HANDLER)
def ibs_event_mismatch(subject):
    """The ADDRINFO event is not what the kernel makes of the SA answer in the capture: an error although the SA answered records, or RESOLVED although it answered none.

    The kernel's SubnAdmGetTable(ServiceRecord) is answered once (RMPP reassembled by the MAD
    layer). ib_sa_service_rec_callback counts the records of the whole answer ((mad_len -
    56) / 176) and gives cma -ENODATA when there is none; recv_handler gives -EINVAL for a
    non-zero MAD status; cma_query_ib_service_handler turns any error into ADDRINFO_ERROR with
    that status and records into ADDRINFO_RESOLVED, the first record the destination. An
    event that does not follow from the captured answer means the kernel did not see that
    answer: it came late (the kernel waits 2000 ms, then ADDRINFO_ERROR -ETIMEDOUT), it was
    answered to another port, or something between the SA and the process changed the event.
    Source: sa_query.c recv_handler, ib_sa_service_rec_callback; cma.c
    cma_query_ib_service_handler.
    """
    replay, _ = subject
    for sr in process_view(replay).services:
        answer, got = sr.sa_answer(), sr.event
        if answer is None or got is None:
            continue
        status, records = answer
        want = expected_addrinfo_event(status, records)
        seen = (got.event, got.status or 0)
        if seen != want:
            yield [sr.sa.completing_frame, got.frame], (
                f"{sr.cm_name}: the SA answered {records} ServiceRecord(s) with MAD status "
                f"0x{status:04x} (frame {sr.sa.completing_frame}), which the kernel makes "
                f"{_event_text(*want)}; the process got {_event_text(*seen)}")


@rule("UCMA-IBS-QUERY-TRUNCATED", "warning", "process",
      UCMA_QUERY_IB_SERVICE + "; " + LIBRDMACM_QUERY_IB_SERVICE)
def ibs_query_truncated(subject):
    """A QUERY(IB_SERVICE) answer says the kernel holds more ServiceRecords than the buffer held, and the program never asked again.

    ucma_query_ib_service always writes the kernel's count (num_service_recs) and copies as
    many records as the caller's buffer has room for; it does not fail on a short buffer.
    librdmacm asks room for 6 and, when the count is larger, asks again with room for all of
    them. A program that reads the records itself (or another librdmacm) and stops at the
    first answer sees only the first records: the services past them are lost to it.
    Source: ucma.c ucma_query_ib_service; librdmacm cma.c ucma_query_ib_service.
    """
    replay, _ = subject
    for sr in process_view(replay).services:
        read = [q for q in sr.queries if not q.failed and q.num_service_recs is not None]
        # the last query short of the count that no query with room for all of it followed
        # (librdmacm asks again with room for num_service_recs)
        short = [q for i, q in enumerate(read)
                 if q.num_service_recs > len(q.service_records or ())
                 and not any(len(later.service_records or ()) >= q.num_service_recs
                             for later in read[i + 1:])]
        if short:
            q = short[-1]
            yield [q.frame], (f"{sr.cm_name}: QUERY(IB_SERVICE) answered {q.num_service_recs} "
                              f"ServiceRecords held, {len(q.service_records or ())} copied, "
                              f"and no QUERY with room for all of them followed")


@rule("UCMA-IBS-ON-ROCE", "error", "process", CMA_RESOLVE_IB_SERVICE_SA)
def ibs_on_roce(subject):
    """RESOLVE_IB_SERVICE refused with EOPNOTSUPP: the cm_id's port has no IB SA (RoCE or iWARP).

    rdma_resolve_ib_service sends its SA query only where rdma_cap_ib_sa holds (an IB port);
    on any other it returns -EOPNOTSUPP and puts the cm_id back to ADDR_BOUND, so the write()
    fails and no ADDRINFO event comes. librdmacm's rdma_resolve_addrinfo with RAI_SA returns
    that error; a RoCE program must resolve by address (RAI_DNS or rdma_resolve_addr).
    Source: cma.c rdma_resolve_ib_service; ucma.c ucma_resolve_ib_service; librdmacm
    cma.c resolve_ai_sa.
    """
    replay, _ = subject
    for sr in process_view(replay).services:
        c = sr.command
        if c.failed and c.call.errno in _EOPNOTSUPP:
            yield [c.frame], (f"{sr.cm_name}: RESOLVE_IB_SERVICE failed with EOPNOTSUPP: the "
                              "port has no IB SA (rdma_cap_ib_sa: RoCE or iWARP); the kernel "
                              "sent no SA query and gives no ADDRINFO event")


# EOPNOTSUPP and ENOTSUP are one value on Linux (95); the recorder names it either way
_EOPNOTSUPP = frozenset(("EOPNOTSUPP", "ENOTSUP", str(errno.EOPNOTSUPP)))


CMA_RESOLVE_ONCE = (
    "Linux 6.17 drivers/infiniband/core/cma.c rdma_resolve_ib_service (\"if (!id_priv->cma_dev "
    "|| !cma_comp_exch(id_priv, RDMA_CM_ADDR_BOUND, RDMA_CM_ADDRINFO_QUERY)) return -EINVAL;\"); "
    "include/rdma/rdma_cm.h (\"The resolution can be done once per rdma_cm_id.\")")
UCMA_QUERY_NO_RECORDS = (
    "Linux 6.17 drivers/infiniband/core/ucma.c ucma_query_ib_service (\"if "
    "(!ctx->cm_id->route.service_recs) return -ENODATA;\"); cma.c cma_query_ib_service_handler "
    "(service_recs set only on success, before the ADDRINFO_RESOLVED work is queued)")


@rule("UCMA-IBS-TWICE", "error", "process", CMA_RESOLVE_ONCE)
def ibs_twice(subject):
    """A second RESOLVE_IB_SERVICE on a cm_id whose service was already resolved: the kernel refuses it with EINVAL.

    rdma_resolve_ib_service moves the cm_id from ADDR_BOUND only; after ADDRINFO_RESOLVED it
    is in ADDRINFO_RESOLVED and stays out of ADDR_BOUND (rdma_resolve_route or
    rdma_resolve_addr take it on), so a second resolution fails with EINVAL and the records of
    the first are what the cm_id keeps. After ADDRINFO_ERROR the cm_id is back in ADDR_BOUND
    and may try again. A program that resolves another service needs another cm_id.
    Source: cma.c rdma_resolve_ib_service; rdma_cm.h.
    """
    replay, _ = subject
    for cm in process_view(replay).cm_ids:
        resolved = None
        for sr in cm.services:
            if resolved is not None:
                c = sr.command
                got = (f"it failed with {c.call.errno}" if c.failed else
                       "the write is not recorded as failed")
                yield [c.frame], (
                    f"{cm.name}: RESOLVE_IB_SERVICE again after ADDRINFO_RESOLVED (frame "
                    f"{resolved.frame}): the cm_id is no longer in ADDR_BOUND, the kernel answers "
                    f"-EINVAL; {got}")
            if sr.event is not None and sr.event.event == "ADDRINFO_RESOLVED":
                resolved = resolved or sr.event


@rule("UCMA-IBS-QUERY-EARLY", "warning", "process", UCMA_QUERY_NO_RECORDS)
def ibs_query_early(subject):
    """QUERY(IB_SERVICE) before the ADDRINFO_RESOLVED event was read, or after ADDRINFO_ERROR: the kernel may hold no record and answers ENODATA.

    The kernel keeps the service records only once the SA answered records
    (cma_query_ib_service_handler), and ucma_query_ib_service answers -ENODATA while it holds
    none. Before ADDRINFO_RESOLVED is read the query races the SA; after ADDRINFO_ERROR it
    always fails. librdmacm queries when it reads ADDRINFO_RESOLVED (ucma_process_addrinfo_resolved).
    Source: ucma.c ucma_query_ib_service; cma.c cma_query_ib_service_handler.
    """
    replay, _ = subject
    for sr in process_view(replay).services:
        ev = sr.event
        for q in sr.queries:
            if ev is not None and ev.frame < q.frame and ev.event == "ADDRINFO_RESOLVED":
                continue
            when = ("after ADDRINFO_ERROR" if ev is not None and ev.frame < q.frame else
                    "before the ADDRINFO event was read")
            got = (f"it failed with {q.call.errno}" if q.failed else
                   "it succeeded, as the kernel had already taken the SA's records")
            yield [q.frame], f"{sr.cm_name}: QUERY(IB_SERVICE) {when}; {got}"
