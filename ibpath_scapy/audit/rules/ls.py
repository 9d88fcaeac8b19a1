"""RDMA netlink local-service rules (audit-rules.md RES-LS-*): one LS exchange at a time.

A check is given ``(entry, options)``: ``entry`` is ``{"request": decoded LS RESOLVE request
or None, "responses": [decoded LS RESOLVE responses]}`` for one nlmsg_seq (replay.Replay._ls).

Sources: drivers/infiniband/core/sa_query.c (ib_nl_send_msg, ib_nl_set_path_rec_attrs,
ib_nl_handle_resolve_resp, ib_nl_process_good_resolve_rsp, ib_nl_request_timeout), ibacm
acm.c (acm_nl_process_resolve, acm_nl_send), OpenSM osm_sa_path_record.c; wire-formats.md
§6.2-6.4 and §7.1.
"""

from __future__ import annotations

import ipaddress

from ...layers.netlink import (
    LS_RESOLVE_PATH_USE_ALL,
    LS_RESOLVE_PATH_USE_GMP,
    LS_RESOLVE_PATH_USE_UNIDIRECTIONAL,
    PATH_USE,
)
from ...layers.pathdata import (
    IB_PATH_INBOUND,
    IB_PATH_INBOUND_REVERSE,
    IB_PATH_OUTBOUND,
    flags_text,
)
from ...facts.kernelview import LS_PROFILES, PROFILES
from ..model import rule
from .blob import ls_view

IB_SA_LOCAL_SVC_TIMEOUT_DEFAULT_MS = 2000

# Which kernels send each path_use (sa_query.c ib_nl_set_path_rec_attrs, wire-formats.md
# §6.3): GMP only before 6.1, ALL only from 6.1 on (5a3749493394: `query->path_use =
# LS_RESOLVE_PATH_USE_ALL;`), UNIDIRECTIONAL from all.
_SENDERS = {
    LS_RESOLVE_PATH_USE_UNIDIRECTIONAL: LS_PROFILES,
    LS_RESOLVE_PATH_USE_GMP: ("ls-legacy",),
    LS_RESOLVE_PATH_USE_ALL: ("ls-multi-6.1", "ls-multi"),
}


def senders(path_use: int, kernel: str | None) -> tuple[str, ...]:
    """The LS profiles that send this path_use, narrowed to --kernel when it names one of
    them (6.1/6.2 and 6.3 on both send ALL and read its answer differently); a --kernel that
    cannot have sent the request does not override what the request says."""
    profiles = _SENDERS.get(path_use, LS_PROFILES)
    return (kernel,) if kernel in profiles else profiles


def _seq(rec: dict) -> int:
    return rec["ls"]["seq"]


def _path_use(req: dict) -> int | None:
    return req["ls"].get("path_use")


def _path_use_name(pu) -> str:
    return PATH_USE.get(pu, str(pu))


def _frames(req: dict | None, resp: dict) -> list[int]:
    return ([req["frame"]] if req else []) + [resp["frame"]]


def _good(responses: list[dict]) -> list[dict]:
    """The responses whose records the kernel reads (no RDMA_NL_LS_F_ERR)."""
    return [r for r in responses if not r["ls"].get("error")]


@rule("RES-LS-PATHUSE", "error", "ls", "sa_query.c ib_nl_process_good_resolve_rsp; "
      "cma.c cma_query_handler (ibpath kernel profiles "
      + ", ".join(PROFILES[p].label() for p in LS_PROFILES) + ")")
def ls_path_use(subject):
    """An LS response's records do not satisfy the request's path_use.

    The kernel filters PATH_RECORD attributes with a mask chosen by the path_use it sent:
    UNIDIRECTIONAL → PRIMARY|OUTBOUND (0x0A); GMP (sent by kernels < 6.1) → 0x2B, first match;
    ALL (sent by kernels ≥ 6.1 only) → PRIMARY, then cma_query_handler files GMP, INBOUND and
    OUTBOUND records; a PRIMARY record with none of them fails the route with -EINVAL from 6.3
    on (ccae0447af0e) and is ignored by 6.1 and 6.2. No match completes the query with -EIO:
    the route fails and the SA is not asked. The request's path_use tells which kernel
    generations can have asked, so the verdict uses the profile(s) that send it, narrowed to
    the one --kernel names if it is one of them (ALL: ls-multi-6.1 or ls-multi); a --kernel
    that cannot have sent it is not followed (BLOB-KERNEL-REJECT judges per selected
    profile).
    Source: sa_query.c ib_nl_set_path_rec_attrs, ib_nl_process_good_resolve_rsp; cma.c
    cma_query_handler; kernelview.py select_ls_legacy, select_ls_multi_61, select_ls_multi.
    """
    entry, options = subject
    req = entry["request"]
    if not req:
        return
    pu = _path_use(req)
    if pu is None:
        return
    profiles = senders(pu, getattr(options, "kernel", None))
    for resp in _good(entry["responses"]):
        for profile, c in ls_view(resp, pu, profiles).items():
            if c.accepted:
                continue
            flags = ", ".join(flags_text(r["flags"]) for r in resp.get("blob_records", [])) \
                or "no record"
            yield _frames(req, resp), (
                f"LS RESOLVE response seq {_seq(resp)} ({flags}) does not satisfy path_use "
                f"{_path_use_name(pu)} of its request: {profile} {c.outcome}: {c.action}"
                + (f" — {'; '.join(c.notes)}" if c.notes else ""))


def _request_attrs(req: dict) -> dict:
    out = {}
    for a in req["ls"].get("attributes", []):
        if "value" in a and a.get("type_name") not in out:
            out[a["type_name"]] = a["value"]
    return out


def _gid(text: str) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(text)


@rule("RES-LS-MISMATCH", "error", "ls", "sa_query.c ib_nl_set_path_rec_attrs; "
      "OpenSM osm_sa_path_record.c pr_rcv_build_pr")
def ls_mismatch(subject):
    """An LS response's records contradict the request's SGID, DGID, P_Key, TClass, ServiceID, QoS.

    The request's attributes are the components of the kernel's PathRecord query
    (ib_nl_set_path_rec_attrs); the response stands in for the SA's GetResp and is used as
    is. An INBOUND record (the remote side's path to us) is compared with SGID and DGID
    swapped. ServiceID, TClass and QoS class of 0 in a record are not contradictions: OpenSM's
    pr_rcv_build_pr never fills ServiceID or TClass and sets QoSClass 0, and ibacm copies its
    SA answer verbatim, so a genuine answer carries 0 there.
    Source: sa_query.c ib_nl_set_path_rec_attrs, ib_nl_process_good_resolve_rsp; OpenSM
    pr_rcv_build_pr; ibacm acmp.c (SA record stored with memcpy).
    """
    entry, _ = subject
    req = entry["request"]
    if not req:
        return
    want = _request_attrs(req)
    for resp in _good(entry["responses"]):
        for i, r in enumerate(resp.get("blob_records", [])):
            pr, f = r["path_record"], r["flags"]
            inbound = f & IB_PATH_INBOUND and not f & (IB_PATH_OUTBOUND | IB_PATH_INBOUND_REVERSE)
            sgid_attr, dgid_attr = ("DGID", "SGID") if inbound else ("SGID", "DGID")
            bad = []
            for field, attr in (("sgid", sgid_attr), ("dgid", dgid_attr)):
                if attr in want and _gid(pr[field]) != _gid(want[attr]):
                    bad.append(f"{field.upper()} {pr[field]} (request {attr} {want[attr]})")
            if "PKEY" in want and pr["pkey"] != want["PKEY"]:
                bad.append(f"P_Key 0x{pr['pkey']:04x} (request 0x{want['PKEY']:04x})")
            for field, attr, fmt in (("tclass", "TCLASS", "0x{:02x}"),
                                     ("service_id", "SERVICE_ID", "0x{:016x}"),
                                     ("qos_class", "QOS_CLASS", "0x{:03x}")):
                if attr in want and pr[field] and pr[field] != want[attr]:
                    bad.append(f"{field} {fmt.format(pr[field])} "
                               f"(request {fmt.format(want[attr])})")
            if bad:
                role = " (INBOUND: compared with the GIDs swapped)" if inbound else ""
                yield _frames(req, resp), (
                    f"LS RESOLVE response seq {_seq(resp)} record {i} ({flags_text(f)}) "
                    f"contradicts the request{role}: " + "; ".join(bad))


@rule("RES-LS-ERR", "info", "ls", "sa_query.c ib_nl_handle_resolve_resp, "
      "ib_nl_is_good_resolve_resp; ibacm acm.c acm_nl_send")
def ls_err(subject):
    """An LS response with RDMA_NL_LS_F_ERR: the kernel sends the query to the SA itself.

    ib_nl_is_good_resolve_resp() is false for a response with RDMA_NL_LS_F_ERR, so
    ib_nl_handle_resolve_resp disables the local service for the query and posts the MAD to
    the SA (ibacm answers so when it cannot resolve the path).
    Source: sa_query.c ib_nl_handle_resolve_resp; ibacm acm.c acm_nl_send.
    """
    entry, _ = subject
    req = entry["request"]
    for resp in entry["responses"]:
        if resp["ls"].get("error"):
            n = len(resp.get("blob_records") or [])
            extra = f"; its {n} record(s) are not read" if n else ""
            yield _frames(req, resp), (
                f"LS RESOLVE response seq {_seq(resp)} has RDMA_NL_LS_F_ERR: the kernel falls "
                f"back to its own SA query{extra}")


@rule("RES-LS-UNANSWERED", "warning", "ls", "sa_query.c ib_nl_request_timeout, "
      "IB_SA_LOCAL_SVC_TIMEOUT_DEFAULT")
def ls_unanswered(subject):
    """An LS request with no response in the capture, or answered after the 2000 ms timeout.

    The kernel queues the query and waits IB_SA_LOCAL_SVC_TIMEOUT_DEFAULT (2000 ms, settable
    with RDMA_NL_LS_OP_SET_TIMEOUT) for the resolver; ib_nl_request_timeout then sends the MAD
    to the SA itself, and a later response finds no pending query and is ignored. Either way
    the connection setup is 2 s slower and the resolver's answer is not used.
    Source: sa_query.c ib_nl_request_timeout, ib_nl_handle_resolve_resp.
    """
    entry, _ = subject
    req = entry["request"]
    if not req:
        return
    pu = _path_use_name(_path_use(req))
    if not entry["responses"]:
        yield [req["frame"]], (
            f"LS RESOLVE request seq {_seq(req)} (path_use {pu}) has no response in the "
            f"capture: the kernel waits its timeout ({IB_SA_LOCAL_SVC_TIMEOUT_DEFAULT_MS} ms "
            "by default) and then queries the SA itself")
        return
    first = entry["responses"][0]
    if "time" in req and "time" in first:
        delay_ms = (first["time"] - req["time"]) * 1000
        if delay_ms > IB_SA_LOCAL_SVC_TIMEOUT_DEFAULT_MS:
            yield [req["frame"], first["frame"]], (
                f"LS RESOLVE request seq {_seq(req)} (path_use {pu}) answered after "
                f"{delay_ms:.0f} ms, past the kernel's default timeout "
                f"({IB_SA_LOCAL_SVC_TIMEOUT_DEFAULT_MS} ms): the kernel has already queried "
                "the SA and ignores the answer (unless a SET_TIMEOUT raised it)")
