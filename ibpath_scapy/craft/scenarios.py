"""The scenario library: conforming resolver flows for every kernel profile and one fault for
every rule of audit-rules.md a capture can show.

Each scenario is a function of a Session (session.py) registered with the rule IDs `ibpath
audit` reports on its capture, every severity included (info findings such as SAQ-RETRY count:
a scenario declares exactly the set of rule IDs the audit gives). Its docstring's first
paragraph is the one-line description `ibpath craft --list` shows; the rest says why.
"""

from __future__ import annotations

from ..layers.mad import MAD, MAD_SIZE, METHOD_GET_TABLE, METHOD_GET_TABLE_RESP, RMPP
from ..layers.netlink import (
    LS_RESOLVE_PATH_USE_ALL,
    LS_RESOLVE_PATH_USE_GMP,
    LS_RESOLVE_PATH_USE_UNIDIRECTIONAL,
)
from ..layers.pathdata import (
    IB_PATH_ALTERNATE,
    IB_PATH_INBOUND_REVERSE,
    IB_PATH_PRIMARY,
    PathArray,
    PathRecData,
)
from ..layers.sa import PathRecord, SAHeader, component_mask_for
from ..layers.umad import UMAD_HDR_SIZE, UserMad
from .registry import SCENARIOS, Scenario, scenario  # noqa: F401  (re-exported)
from .resolver import (
    FORWARD_PRIMARY,
    GMP_BIDIR,
    GMP_BIDIR_SECONDARY,
    RETURN_PRIMARY,
    Ibacm,
    Records,
    Resolution,
    SeedResolver,
)
from .sa_model import SAModel
from .session import Session

__all__ = ["SCENARIOS", "Scenario", "scenario"]  # registered on import of this module

# the seed's return path stored reversed: a record cma_query_handler cannot file
RETURN_PRIMARY_REV = IB_PATH_PRIMARY | IB_PATH_INBOUND_REVERSE  # 0x22

# what the kernel returns for the blob (the ucma profile, checked against a real kernel in the lab)
SET_OPTION_KERNEL = "kernel"


# -- helpers ---------------------------------------------------------------------------------

def irreversible_forward(s: Session) -> None:
    """The forward route on the base LIDs has no reverse path: OpenSM answers it with
    Reversible 0, and a reversible route exists on the second LIDs (LMC 1)."""
    s.fabric.irreversible.add((s.local.lid, s.remote.lid))


def hand_over(s: Session, records: Records | bytes, res: Resolution | None = None, *,
              req: PathRecord | None = None, alternate: PathRecord | None = None,
              set_option: int | str = SET_OPTION_KERNEL) -> None:
    """rdma_set_option(RDMA_OPTION_IB_PATH) with the records (its result: what a shipped kernel
    returns, unless given), then the connection: a CM REQ on the GMP path (or `req`), the REP
    and the RTU."""
    s.b.blob(records, set_option=set_option)
    primary = req if req is not None else (res.gmp() if res else None)
    if primary is None:
        return
    s.cm_req(primary, alternate=alternate if alternate is not None else
             (res.alternate() if res else None))
    s.b.cm_rep_rtu(src=s.local_ip, dst=s.remote_ip)


def word_swapped(rec: PathRecord) -> bytes:
    """The record's 32-bit words in little-endian host order: what a resolver that copied an
    unpacked/host-order buffer hands over."""
    raw = bytes(rec)
    return b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))


def raw_blob(entries: list[tuple[int, int, bytes]]) -> bytes:
    """A blob from (flags, reserved, 64 record bytes) entries, host order like the kernel's."""
    return b"".join(f.to_bytes(4, "little") + r.to_bytes(4, "little") + rec
                    for f, r, rec in entries)


# -- conforming flows, one per kernel profile ---------------------------------------------------

@scenario("conform-ucma")
def conform_ucma(s: Session) -> None:
    """The seed's resolver, reversible forward path: one 0x2B record via rdma_set_option, CM on it.

    ucma_set_ib_path takes the first record whose flags are exactly 0x2B; the REQ carries it."""
    res = SeedResolver(s).resolve()
    hand_over(s, res.records, res)


@scenario("conform-ls-legacy")
def conform_ls_legacy(s: Session) -> None:
    """ibacm answers the kernel's netlink RESOLVE (path_use GMP) with one 0x2B record.

    Kernels before 6.1 take the first record with (flags & 0x2B) == 0x2B; the forward path is
    reversible, so ibacm's single record is right."""
    res = Ibacm(s).serve(1, LS_RESOLVE_PATH_USE_GMP)
    s.cm_req(res.gmp())
    s.b.cm_rep_rtu(src=s.local_ip, dst=s.remote_ip)


@scenario("conform-ls-unidirectional")
def conform_ls_unidirectional(s: Session) -> None:
    """ibacm answers a path_use UNIDIRECTIONAL request (a UD user) with one PRIMARY|OUTBOUND record.

    The kernel asks for the outbound path only; 0x0A is what it masks for."""
    Ibacm(s).serve(1, LS_RESOLVE_PATH_USE_UNIDIRECTIONAL)


@scenario("conform-ls-multi", kernel="ls-multi")
def conform_ls_multi(s: Session) -> None:
    """The seed's resolver behind netlink, path_use ALL, not reversible: outbound, inbound and GMP records (kernel >= 6.3).

    Kernels since 6.1 take up to three PRIMARY records: the 0x2B record as the GMP path, the
    INBOUND one as the inbound path and the OUTBOUND one as the outbound path (6.1, 6.2 and
    6.3 on read these three alike: ls-return-rev is where they part). Here both
    same-offset LID pairs lack a reverse path, so the reversible GMP route leaves from the base
    LID, where the return path arrives: the REQ's local LID is the inbound record's DLID."""
    s.fabric.irreversible |= set(zip(s.local.lids, s.remote.lids))
    s.b.ls_request(1, path_use=LS_RESOLVE_PATH_USE_ALL, sgid=s.local.gid, dgid=s.remote.gid)
    res = SeedResolver(s).resolve()
    s.b.ls_response(1, res.records)
    s.cm_req(res.gmp())
    s.b.cm_rep_rtu(src=s.local_ip, dst=s.remote_ip)


def stored_reversed(rec: PathRecord) -> PathRecord:
    """The path as the other end sees it: GIDs and LIDs swapped (the seed's *_REV records,
    "stored in reversed format")."""
    out = rec.copy()
    out.sgid, out.dgid, out.slid, out.dlid = rec.dgid, rec.sgid, rec.dlid, rec.slid
    return out


@scenario("ls-return-rev", kernel="ls-multi-6.1")
def ls_return_rev(s: Session) -> None:
    """path_use ALL answered with the return path as RETURN_PRIMARY_REV (0x22): kernels 6.1 and 6.2 skip it and connect; 6.3 on fail the route.

    The seed's layout stores the return path reversed (PRIMARY|INBOUND_REVERSE). It passes
    ib_nl_process_good_resolve_rsp's ALL mask (PRIMARY), but cma_query_handler files only GMP,
    INBOUND and OUTBOUND records: 6.1 and 6.2 (ls-multi-6.1) have no else branch, file the
    0x0A record as outbound and the 0x2B one as the GMP path, and the CM REQ follows, as here.
    From ccae0447af0e (v6.3, ls-multi) `else status = -EINVAL;` fails rdma_resolve_route, and
    the same capture gives BLOB-KERNEL-REJECT and RES-LS-PATHUSE under --kernel ls-multi
    (tests/test_kernelview_split.py)."""
    irreversible_forward(s)
    s.b.ls_request(1, path_use=LS_RESOLVE_PATH_USE_ALL, sgid=s.local.gid, dgid=s.remote.gid)
    res = SeedResolver(s).resolve()
    (fwd_flags, fwd), (_, ret), (gmp_flags, gmp) = res.records
    s.b.ls_response(1, [(fwd_flags, fwd), (RETURN_PRIMARY_REV, stored_reversed(ret)),
                        (gmp_flags, gmp)])
    s.cm_req(gmp)
    s.b.cm_rep_rtu(src=s.local_ip, dst=s.remote_ip)


@scenario("conform-proposal", kernel="proposal")
def conform_proposal(s: Session) -> None:
    """The seed's own layout (GMP_PRIMARY, FORWARD_PRIMARY, RETURN_PRIMARY) for a kernel implementing the proposal.

    Not reversible: the resolver asks for a reversible GMP path and the return path and hands
    three separate records; only a kernel implementing the 2009 design reads them."""
    irreversible_forward(s)
    res = SeedResolver(s, compat=False).resolve()
    hand_over(s, res.records, res, set_option=0)  # the proposal's kernel accepts them


@scenario("seed-followup-compat", ("BLOB-PROFILE-DIVERGENCE",))
def seed_followup_compat(s: Session) -> None:
    """Not reversible: GMP and return queries, then 0x0A, 0x12, 0x2B (the seed's compatibility layout).

    Every kernel accepts the blob, but they disagree on the data path: ucma and ls-legacy use
    the 0x2B GMP path (second LIDs), ls-multi-6.1, ls-multi and the proposal the forward path
    (base LIDs): BLOB-PROFILE-DIVERGENCE (warning). Was captures/crafted/seed-2."""
    irreversible_forward(s)
    res = SeedResolver(s).resolve()
    hand_over(s, res.records, res)


@scenario("conform-apm")
def conform_apm(s: Session) -> None:
    """APM: a reversible primary and a second route (GetTable NumbPath 2) as 0x2B and 0x2D; the REQ carries both.

    The alternate is the route on the second LIDs, so a failover has somewhere to go."""
    res = SeedResolver(s, apm=True).resolve()
    hand_over(s, res.records, res)


# -- resolver faults --------------------------------------------------------------------------

@scenario("res-no-followup", ("RES-NO-FOLLOWUP", "BLOB-GMP-NOT-REVERSIBLE",
                              "BLOB-BIDIR-NOT-REVERSIBLE"))
def res_no_followup(s: Session) -> None:
    """Faulty resolver: the forward path is not reversible, yet it is handed over alone as 0x2B.

    No GMP or return query follows the answer; the single record claims GMP and BIDIRECTIONAL
    for a path OpenSM marked not reversible. Was captures/crafted/seed-3."""
    irreversible_forward(s)
    res = SeedResolver(s, followups=False).resolve()
    hand_over(s, res.records, res)


@scenario("ibacm-not-reversible", ("RES-NO-FOLLOWUP", "BLOB-GMP-NOT-REVERSIBLE",
                                   "BLOB-BIDIR-NOT-REVERSIBLE"))
def ibacm_not_reversible(s: Session) -> None:
    """ibacm's real behaviour on a path that is not reversible: one 0x2B record anyway (path_use GMP).

    ibacm never asks for reversibility nor composes forward and return paths (wire-formats.md
    §7.2, §7.4): the seed's rule is not implemented, and the audit says so."""
    irreversible_forward(s)
    Ibacm(s).serve(1, LS_RESOLVE_PATH_USE_GMP)


@scenario("res-redundant-queries", ("RES-REDUNDANT-QUERIES",))
def res_redundant_queries(s: Session) -> None:
    """The forward path is reversible, yet the resolver still asks for a GMP path and the return path.

    The blob (one 0x2B record) is right; the two extra queries are wasted SA load."""
    res = SeedResolver(s).resolve()
    s.ask(s.query(reversible=1))
    s.ask(s.query(reverse=True))
    hand_over(s, res.records, res)


@scenario("res-blob-shape", ("RES-BLOB-SHAPE", "BLOB-PROFILE-DIVERGENCE"))
def res_blob_shape(s: Session) -> None:
    """Not reversible, follow-ups asked, but the return path is left out of the blob.

    The resolver hands FORWARD_PRIMARY and the 0x2B GMP record only; the seed wants the
    return path as a record of its own. The kernels also disagree on the data path (forward
    or GMP route), as in seed-followup-compat."""
    irreversible_forward(s)
    res = SeedResolver(s).resolve()
    records = [r for r in res.records if r[0] != RETURN_PRIMARY]
    hand_over(s, records, res)


@scenario("res-blob-mismatch", ("RES-BLOB-MISMATCH", "RES-BLOB-SHAPE"))
def res_blob_mismatch(s: Session) -> None:
    """The resolver rewrites the SA's record (its own SL) before handing it over.

    The blob must carry the SA's 64 bytes unchanged, and its one 0x2B record is no longer
    the reversible forward path the SA gave; the REQ follows the blob."""
    res = SeedResolver(s).resolve()
    rec = res.records[0][1].copy()
    rec.sl = 5
    hand_over(s, [(GMP_BIDIR, rec)], req=rec)


@scenario("res-stale-blob", ("RES-STALE-BLOB", "SAR-STATUS"))
def res_stale_blob(s: Session) -> None:
    """The SA answers a re-resolution with an error (the remote port left), and the resolver hands its cached blob anyway.

    A first resolution succeeds; then the remote port disappears from the subnet, OpenSM
    answers INVALID_GID (0x0500), and the stale path is handed to the kernel again."""
    res = SeedResolver(s).resolve()
    hand_over(s, res.records, res)
    s.fabric.ports.remove(s.remote)
    SeedResolver(s).resolve()
    s.b.blob(res.records, set_option=SET_OPTION_KERNEL)


# -- netlink local-service faults -------------------------------------------------------------

@scenario("res-ls-pathuse", ("RES-LS-PATHUSE", "BLOB-KERNEL-REJECT", "RES-BLOB-SHAPE"))
def res_ls_pathuse(s: Session) -> None:
    """Wrong flags for path_use: a GMP request answered with one PRIMARY|OUTBOUND (0x0A) record.

    A pre-6.1 kernel finds no record matching the 0x2B mask and falls back to its own SA
    query; the answer was wasted (and a reversible forward path should have gone as 0x2B)."""
    s.b.ls_request(1, path_use=LS_RESOLVE_PATH_USE_GMP, sgid=s.local.gid, dgid=s.remote.gid)
    res = Ibacm(s).resolve(LS_RESOLVE_PATH_USE_UNIDIRECTIONAL)
    s.b.ls_response(1, res.records)


@scenario("res-ls-mismatch", ("RES-LS-MISMATCH",))
def res_ls_mismatch(s: Session) -> None:
    """The kernel asks for P_Key 0x8001; ibacm queries with its endpoint's P_Key and answers 0xFFFF.

    ibacm copies only the GIDs and LIDs into its SA query (wire-formats.md §7.2), so the
    record it returns can contradict the request's P_Key."""
    s.b.ls_request(1, path_use=LS_RESOLVE_PATH_USE_GMP, sgid=s.local.gid, dgid=s.remote.gid,
                   pkey=0x8001)
    res = Ibacm(s).resolve(LS_RESOLVE_PATH_USE_GMP)
    s.b.ls_response(1, res.records)


@scenario("res-ls-err", ("RES-LS-ERR", "SAR-STATUS"))
def res_ls_err(s: Session) -> None:
    """The remote port is not in the subnet: OpenSM answers INVALID_GID and ibacm replies RDMA_NL_LS_F_ERR.

    The kernel then sends its own SA query (not in this capture)."""
    s.fabric.ports.remove(s.remote)
    Ibacm(s).serve(1, LS_RESOLVE_PATH_USE_GMP)


@scenario("res-ls-unanswered", ("RES-LS-UNANSWERED",))
def res_ls_unanswered(s: Session) -> None:
    """ibacm gets the SA's answer but never replies to the kernel's RESOLVE request.

    The kernel waits its 2000 ms timeout, then queries the SA itself."""
    s.b.ls_request(1, path_use=LS_RESOLVE_PATH_USE_GMP, sgid=s.local.gid, dgid=s.remote.gid)
    Ibacm(s).resolve(LS_RESOLVE_PATH_USE_GMP)


# -- blob faults ------------------------------------------------------------------------------

@scenario("blob-host-order", ("BLOB-NOT-MAD-FORMAT",))
def blob_host_order(s: Session) -> None:
    """Host-order path copied into the blob: the SA's record with its 32-bit words byte-swapped.

    The kernel unpacks garbage (ib_sa_unpack_path expects wire format); the REQ shows the path
    the resolver meant."""
    res = SeedResolver(s).resolve()
    flags, rec = res.records[0]
    hand_over(s, raw_blob([(flags, 0, word_swapped(rec))]), req=rec)


@scenario("blob-length", ("BLOB-LENGTH", "BLOB-KERNEL-REJECT"))
def blob_length(s: Session) -> None:
    """The optval carries 4 stray bytes after the 0x2B record: not a multiple of 72.

    ucma_set_ib_path returns EINVAL for the whole option."""
    res = SeedResolver(s).resolve()
    raw = bytes(PathArray(records=[PathRecData(flags=f, path_record=r) for f, r in res.records]))
    s.b.blob(raw + b"\0\0\0\0", set_option=SET_OPTION_KERNEL)


@scenario("blob-empty", ("BLOB-EMPTY", "BLOB-LENGTH", "BLOB-KERNEL-REJECT", "SAQ-NO-RESPONSE"))
def blob_empty(s: Session) -> None:
    """The SA never answers and the resolver calls rdma_set_option with an entry header but no PathRecord.

    8 bytes (flags 0x2B, reserved 0) and no record: the kernel answers EINVAL, recorded in
    the blob frame's comment; the unanswered query is reported too."""
    s.ask(s.query(), answer=False)
    s.b.blob(GMP_BIDIR.to_bytes(4, "little") + bytes(4), set_option=-22)


@scenario("blob-reserved", ("BLOB-RESERVED",))
def blob_reserved(s: Session) -> None:
    """The record's reserved word holds ACM_EP_INFO_PATH (0x10): an ibacm entry copied without clearing its type.

    librdmacm's ucma_ib_save_resp zeroes the type before handing the entry over as
    ibv_path_data; a copy that skips this leaves the reserved u32 non-zero."""
    res = SeedResolver(s).resolve()
    flags, rec = res.records[0]
    hand_over(s, raw_blob([(flags, 0x10, bytes(rec))]), req=rec)


@scenario("blob-unknown-flags", ("BLOB-UNKNOWN-FLAGS",))
def blob_unknown_flags(s: Session) -> None:
    """A second record with flag bit 0x40 (outside IB_PATH_*) after the good 0x2B record.

    ucma still finds its 0x2B record; the unknown bit means the resolver and the kernel
    disagree on the format."""
    res = SeedResolver(s).resolve()
    rec = res.records[0][1]
    hand_over(s, res.records + [(0x40 | FORWARD_PRIMARY, rec)], res)


@scenario("blob-flag-conflict", ("BLOB-FLAG-CONFLICT",))
def blob_flag_conflict(s: Session) -> None:
    """A second record flagged PRIMARY and ALTERNATE at once.

    A record is either the primary or the alternate path, never both."""
    res = SeedResolver(s).resolve()
    rec = res.records[0][1]
    hand_over(s, res.records + [(FORWARD_PRIMARY | IB_PATH_ALTERNATE, rec)], res)


@scenario("blob-kernel-reject", ("BLOB-KERNEL-REJECT",))
def blob_kernel_reject(s: Session) -> None:
    """The seed's own layout handed to today's kernels: no 0x2B record, ucma returns EINVAL.

    Right for the proposal (see conform-proposal), rejected by every shipped kernel; librdmacm
    then falls back to the kernel's own route resolution."""
    irreversible_forward(s)
    res = SeedResolver(s, compat=False).resolve()
    s.b.blob(res.records, set_option=SET_OPTION_KERNEL)


@scenario("blob-endpoints", ("BLOB-ENDPOINTS", "RES-BLOB-MISMATCH", "RES-BLOB-SHAPE",
                                "BLOB-PROFILE-DIVERGENCE"))
def blob_endpoints(s: Session) -> None:
    """The return record is stored local→remote (the GIDs swapped back), yet flagged INBOUND.

    INBOUND records carry SGID = remote, DGID = local; the rewritten record is no longer the
    SA's either, the blob has no usable return record, and the kernels disagree on the data
    path as in seed-followup-compat."""
    irreversible_forward(s)
    res = SeedResolver(s).resolve()
    ret = res.records[1][1].copy()
    ret.sgid, ret.dgid, ret.slid, ret.dlid = ret.dgid, ret.sgid, ret.dlid, ret.slid
    records = [res.records[0], (RETURN_PRIMARY, ret), res.records[2]]
    hand_over(s, records, res)


@scenario("blob-field-range", ("BLOB-FIELD-RANGE", "RES-BLOB-MISMATCH", "RES-BLOB-SHAPE"))
def blob_field_range(s: Session) -> None:
    """The resolver hands over its query template instead of the SA's answer.

    The template asks for MTU and rate "greater than" (selector 0) and NumbPath 1: no
    resolved path looks like that, and it is not what the SA returned."""
    SeedResolver(s).resolve()
    template = s.query(reversible=1, mtu_selector=0, rate_selector=0,
                       packet_life_time_selector=0)
    s.b.blob([(GMP_BIDIR, template)], set_option=SET_OPTION_KERNEL)


@scenario("blob-alt-without-primary", ("BLOB-ALT-WITHOUT-PRIMARY", "BLOB-KERNEL-REJECT",
                                      "RES-BLOB-SHAPE"))
def blob_alt_without_primary(s: Session) -> None:
    """APM: the resolver hands the alternate record (0x2D) and loses the primary.

    No kernel takes an ALTERNATE record as its path: ucma finds no 0x2B record."""
    res = SeedResolver(s, apm=True).resolve()
    s.b.blob([r for r in res.records if r[0] & IB_PATH_PRIMARY == 0], set_option=SET_OPTION_KERNEL)


@scenario("blob-alt-same-as-primary", ("BLOB-ALT-SAME-AS-PRIMARY",))
def blob_alt_same_as_primary(s: Session) -> None:
    """APM: the alternate record is the primary route again (two Gets, the same answer).

    No failover benefit: when the primary route fails, so does the alternate."""
    res = SeedResolver(s).resolve()
    again = SeedResolver(s).resolve()
    records = res.records + [(GMP_BIDIR_SECONDARY, again.records[0][1])]
    hand_over(s, records, req=res.gmp(), alternate=again.records[0][1])


# -- CM faults --------------------------------------------------------------------------------

@scenario("cm-req-path-mismatch", ("CM-REQ-PATH-MISMATCH",))
def cm_req_path_mismatch(s: Session) -> None:
    """CM REQ disagreeing with the blob: the application overrides the SL after rdma_set_option.

    The kernel builds the REQ from the blob's GMP path; an SL of its own means the blob was
    not what the connection used."""
    res = SeedResolver(s).resolve()
    req = res.gmp().copy()
    req.sl = 3
    hand_over(s, res.records, res, req=req)


@scenario("cm-req-alt-mismatch", ("CM-REQ-ALT-MISMATCH",), encaps=("ib",))
def cm_req_alt_mismatch(s: Session) -> None:
    """APM: the REQ's alternate path is not the blob's ALTERNATE record (the primary route again).

    The blob offered the second LIDs for failover; the REQ announces the first ones. Native
    IB only: on RoCEv2 the two routes differ only in LIDs, which a RoCE REQ does not carry."""
    res = SeedResolver(s, apm=True).resolve()
    hand_over(s, res.records, res, alternate=res.gmp())


@scenario("cm-req-inbound-lid", ("CM-REQ-INBOUND-LID",), kernel="ls-multi", encaps=("ib",))
def cm_req_inbound_lid(s: Session) -> None:
    """Kernel >= 6.1 with an INBOUND record: the REQ's primary local LID is not the inbound record's DLID.

    Since 6.1 (eb8336dbe373; ls-multi-6.1 and ls-multi alike, audited under ls-multi) the
    datapath DLIDs come from the inbound and outbound records; a REQ built from
    the GMP path alone announces the wrong LID for the return traffic. Native IB only (LIDs)."""
    irreversible_forward(s)
    s.b.ls_request(1, path_use=LS_RESOLVE_PATH_USE_ALL, sgid=s.local.gid, dgid=s.remote.gid)
    res = SeedResolver(s).resolve()
    s.b.ls_response(1, res.records)
    # the inbound record arrives at the first local LID; the REQ names the GMP path's second
    gmp = res.gmp()
    inbound = res.records[1][1]
    assert gmp.slid != inbound.dlid
    s.cm_req(gmp)
    s.b.cm_rep_rtu(src=s.local_ip, dst=s.remote_ip)


@scenario("cm-roce-gid", ("CM-ROCE-GID",), encaps=("rocev2",))
def cm_roce_gid(s: Session) -> None:
    """On RoCEv2, the REQ names link-local fe80:: GIDs that are not the addresses of the packet carrying it.

    RoCEv2 GIDs are the port's IP addresses; a REQ naming other GIDs cannot be routed back."""
    res = SeedResolver(s).resolve()
    hand_over(s, res.records, res)
    req = res.gmp().copy()
    req.sgid, req.dgid = "fe80::1", "fe80::2"
    s.cm_req(req, comm_id=0x4321)


# -- SA query and response faults -------------------------------------------------------------

@scenario("decode-malformed", ("DECODE-MALFORMED", "SAQ-NO-RESPONSE"), malformed=True)
def decode_malformed(s: Session) -> None:
    """The SA's answer is cut short: a frame that cannot be decoded, and a query left unanswered.

    The truncated response is reported with its frame number and the run goes on."""
    ans = s.ask(s.query(), answer=False)
    resp = s.sa.respond(ans.query.raw)[0]
    s.b.mad(resp[:40], from_sa=True)


@scenario("saq-serviceid-half", ("SAQ-SERVICEID-HALF", "SAR-STATUS"))
def saq_serviceid_half(s: Session) -> None:
    """A query with only one of the two ServiceID ComponentMask bits: OpenSM answers INSUF_COMPS (0x0600).

    ServiceID is a 64-bit field split over two component bits; both or neither."""
    q = s.query(service_id=0x0106000000000001)
    s.ask(q, component_mask=component_mask_for(q) & ~0x2)


@scenario("saq-reserved-comp", ("SAQ-RESERVED-COMP",))
def saq_reserved_comp(s: Session) -> None:
    """The forward query sets reserved ComponentMask bit 7; OpenSM ignores it and answers.

    Harmless today, but a bit another SA may give a meaning to."""
    q = s.query()
    ans = s.ask(q, component_mask=component_mask_for(q) | 1 << 7)
    hand_over(s, [(GMP_BIDIR, ans.record)], req=ans.record)


@scenario("saq-selector-missing", ("SAQ-SELECTOR-MISSING",))
def saq_selector_missing(s: Session) -> None:
    """The forward query asks for MTU 4096 with the MTU ComponentMask bit but not MTU_SELECTOR; OpenSM answers the 2048 path.

    OpenSM reads the MTU only with its selector (pr_rcv_get_path_parms), so the query asked for
    any MTU and nothing tells the resolver the 4096 was not granted. (ibpath's own
    PathRecord(mtu=4096) built this mask before issue 39.) The query is the point: no path is
    handed over, so the stand-in ibacm lab, which has no SA, has no run of it."""
    q = s.query(mtu=4096)
    selector_bit = PathRecord.COMPONENTS["mtu_selector"][0]
    s.ask(q, component_mask=component_mask_for(q) & ~(1 << selector_bit))


@scenario("saq-bad-method", ("SAQ-BAD-METHOD", "SAR-STATUS"))
def saq_bad_method(s: Session) -> None:
    """A PathRecord Set (method 0x02): OpenSM answers GetResp with status 0x000C.

    PathRecords are read-only; only Get and GetTable are defined."""
    s.ask(s.query(), method=0x02)


@scenario("saq-numbpath-zero", ("SAQ-NUMBPATH-ZERO",))
def saq_numbpath_zero(s: Session) -> None:
    """GetTable with the NumbPath component and NumbPath 0: OpenSM returns an empty table.

    The resolver gets no path and hands nothing over."""
    s.ask(s.query(numb_path=0), method=0x12)


@scenario("sar-reserved", ("SAR-RESERVED",))
def sar_reserved(s: Session) -> None:
    """A non-OpenSM SA answers with the last 48 bits of its PathRecord, reserved, not zeroed.

    Every receiver ignores them (the kernel's path_rec_table skips them), so the path works;
    the SA sends an unzeroed buffer, which a later IBA revision may read."""
    ans = s.ask(s.query(), answer=False)
    record = ans.records[0].copy()
    record.reserved_464 = 0xA5A5_0000_0001
    mad = MAD(method=0x81, transaction_id=ans.query.tid) / RMPP() / SAHeader(
        component_mask=int.from_bytes(ans.query.raw[48:56], "big"), records=[record])
    s.b.mad(bytes(mad), from_sa=True)


@scenario("umad-cut", ("UMAD-CUT",))
def umad_cut(s: Session) -> None:
    """A client on ibsim (umad2sim) reads an RMPP answer of four PathRecords cut to 256 MAD bytes.

    The SA wrote the whole message, the first 56 header bytes and 256 data bytes; umad2sim
    forwards the first 256 bytes of any MAD, so the client reads three whole records and 8
    bytes of a fourth. A kernel hands a process an RMPP answer whole (user_mad.c
    copy_recv_mad): a cut message is the transport's, whatever its records then say."""
    query = s.query(numb_path=None)
    mask = component_mask_for(query) & ~(1 << 12)  # GetTable of every path of the pair
    records = s.sa.paths(query, mask, METHOD_GET_TABLE)[1]
    tid = s.rng.randrange(1, 1 << 32)
    request = MAD(method=METHOD_GET_TABLE, transaction_id=tid) / RMPP() / SAHeader(
        component_mask=mask, records=[query])
    # the client writes the low 32 TID bits; the kernel (here umad2sim) sets its hi_tid
    hi_tid = 1 << 32
    answer = MAD(method=METHOD_GET_TABLE_RESP, transaction_id=hi_tid | tid) / RMPP(
        rmpp_version=0, rmpp_type=0, rmpp_flags="active", segment_number=0, payload_length=0) \
        / SAHeader(component_mask=mask, attribute_offset=8, records=records)
    cut = bytes(answer)[:MAD_SIZE]
    s.b.umad(UserMad(timeout_ms=1000, lid=s.sm.lid), bytes(request), write=True)
    s.b.umad(UserMad(length=UMAD_HDR_SIZE + len(cut), qkey=0, lid=s.sm.lid), cut, write=False)


@scenario("sar-get-multi", ("SAR-GET-MULTI",))
def sar_get_multi(s: Session) -> None:
    """A non-OpenSM SA answers a Get with a GetResp whose AttributeOffset is 16 words, not PathRecord's 8.

    A GetResp carries exactly one PathRecord and says so with AttributeOffset 8; a reader
    that trusts 16 skips every other record."""
    ans = s.ask(s.query(), answer=False)
    mad = MAD(method=0x81, transaction_id=ans.query.tid) / RMPP() / SAHeader(
        component_mask=int.from_bytes(ans.query.raw[48:56], "big"), attribute_offset=16,
        records=ans.records)
    s.b.mad(bytes(mad), from_sa=True)


@scenario("sar-table-offset", ("SAR-TABLE-OFFSET",))
def sar_table_offset(s: Session) -> None:
    """A non-OpenSM SA answers a GetTable with a GetTableResp whose AttributeOffset is 16 words, not PathRecord's 8.

    saquery (infiniband-diags) takes the record count and each record's place from
    AttributeOffset: it counts half the records and reads every other one."""
    ans = s.ask(s.query(), method=0x12, answer=False)
    mad = MAD(method=0x92, transaction_id=ans.query.tid) \
        / RMPP(rmpp_flags="active+first+last", segment_number=1) \
        / SAHeader(component_mask=int.from_bytes(ans.query.raw[48:56], "big"),
                   attribute_offset=16, records=ans.records)
    s.b.mad(bytes(mad), from_sa=True)


@scenario("saq-no-response", ("SAQ-NO-RESPONSE",))
def saq_no_response(s: Session) -> None:
    """The SA never answers the forward query, and the resolver gives up.

    Nothing reaches the kernel."""
    s.ask(s.query(), answer=False)


@scenario("saq-retry", ("SAQ-RETRY",))
def saq_retry(s: Session) -> None:
    """The forward query times out and is sent again with the same TID; the second try is answered.

    One transaction, two requests: reported as info."""
    ans = s.ask(s.query(), answer=False)
    s.retransmit(ans)
    s.answer(ans)
    hand_over(s, [(GMP_BIDIR, ans.record)], req=ans.record)


@scenario("sar-status", ("SAR-STATUS",))
def sar_status(s: Session) -> None:
    """No reversible route exists: the GMP follow-up gets NO_RECORDS (0x0300) and the resolver gives up.

    Both LID pairs from local to remote lack a reverse path."""
    s.fabric.irreversible |= {(a, b) for a in s.local.lids for b in s.remote.lids}
    SeedResolver(s).resolve()


@scenario("sar-mismatch", ("SAR-MISMATCH",))
def sar_mismatch(s: Session) -> None:
    """A faulty SA answers the forward query with a path to a different DGID.

    The answer contradicts a masked field of the query; the resolver drops it."""
    ans = s.ask(s.query(), answer=False)
    wrong = s.sa.record(s.local, s.sm, s.local.lid, s.sm.lid)
    for seg in SAModel.response(ans.query.raw, 0, [wrong]):
        s.b.mad(seg, from_sa=True)


@scenario("sar-rmpp-gap", ("SAR-RMPP", "SAQ-NO-RESPONSE"))
def sar_rmpp_gap(s: Session) -> None:
    """A GetTable answer (four routes, two RMPP segments) whose second segment never arrives.

    The transfer is never complete, so the query has no answer either."""
    q = s.query(numb_path=4)
    s.ask(q, method=0x12, skip_segments=(2,))


@scenario("sar-rmpp-retry", ("SAR-RMPP-RETRY",))
def sar_rmpp_retry(s: Session) -> None:
    """The SA sends the second RMPP segment of a GetTable answer twice (the ACK came late), and the requester's kernel drops the copy.

    The sender's ib_retry_rmpp rewinds to the last ACK; the receiver's continue_rmpp finds the
    segment held already (find_seg_location) and drops it. The answer is whole: an info."""
    ans = s.ask(s.query(numb_path=4), method=0x12, answer=False)
    segs = s.sa.respond(ans.query.raw)
    for seg in segs[:2] + segs[1:]:
        s.b.mad(seg, from_sa=True)


# -- the capture itself ------------------------------------------------------------------------

# pcap's LINKTYPE_USER0: a private framing no dissector here reads
LINKTYPE_USER0 = 147


@scenario("decode-unsupported", ("DECODE-UNSUPPORTED",))
def decode_unsupported(s: Session) -> None:
    """The conforming exchange in a capture that also holds three frames of a link type ibpath does not read (USER0, 147).

    The frames are counted and named once for their link type, never skipped in silence."""
    for k in range(3):
        s.b.other_frame(bytes([k]) * 40, LINKTYPE_USER0)
    res = SeedResolver(s).resolve()
    hand_over(s, res.records, res)


@scenario("crc-mismatch", ("CRC-MISMATCH", "SAQ-RETRY"), malformed=True)
def crc_mismatch(s: Session) -> None:
    """The forward query is damaged on the wire (one bit flipped) and dropped by the SA; the requester's retry goes through.

    The damaged copy's ICRC (and, natively, VCRC) does not match its bytes; it still decodes as
    the first transmission of the TID, so the retry is an info."""
    s.b.damage_next = True
    ans = s.ask(s.query(), answer=False)
    s.retransmit(ans)
    s.answer(ans)
    hand_over(s, [(GMP_BIDIR, ans.record)], req=ans.record)


# malformed: the plugin checks each frame alone, so in tshark every zero ICRC is a mismatch
@scenario("crc-zero", ("CRC-ZERO",), encaps=("rocev2",), malformed=True)
def crc_zero(s: Session) -> None:
    """The conforming exchange captured where the ICRC is not kept: every ICRC reads zero.

    Some capture points zero the ICRC or never compute it; the capture is said to be so once,
    instead of a mismatch on every frame."""
    s.b.zero_icrc = True
    res = SeedResolver(s).resolve()
    hand_over(s, res.records, res)


# -- analyser limits ----------------------------------------------------------------------------

@scenario("decode-limit", ("DECODE-LIMIT",))
def decode_limit(s: Session) -> None:
    """A 64 KiB optval (911 copies of the 0x2B record): past the analyser's frame cap, reported instead of walked.

    Blob and netlink frames over 64 KiB (decode.MAX_LIST_FRAME_BYTES) are not dissected by
    the analyser (bounded time per frame); the finding says so rather than judging the blob.
    The kernel would take the first record."""
    res = SeedResolver(s).resolve()
    flags, rec = res.records[0]
    s.b.blob(raw_blob([(flags, 0, bytes(rec))] * 911), set_option=SET_OPTION_KERNEL)


from . import process_scenarios  # noqa: E402,F401  (registers the process scenarios)
