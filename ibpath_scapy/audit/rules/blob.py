"""Blob rules (audit-rules.md "Blob rules"): one kernel-bound path array at a time.

A check is given ``(rec, options)``: ``rec`` is the decoded dict (decode.py) of either

- a blob frame (kind "blob": a raw optval file, or an exported PDU "ibpath.blob"): the optval
  of rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH); or
- an RDMA netlink LS RESOLVE response (kind "ls") without RDMA_NL_LS_F_ERR, whose
  PATH_RECORD attributes are the records (the engine passes these too).

Which kernel profiles (kernelview.py) judge which kind of blob:

- a blob frame is an rdma_set_option optval: **ucma** (ucma_set_ib_path, what every kernel
  does with it) and **proposal** (the seed's design for the same option). The LS profiles never
  see an optval.
- an LS response is read by sa_query.c only: **ls-legacy** (before 6.1), **ls-multi-6.1**
  (6.1, 6.2) and **ls-multi** (6.3 on). ucma and the proposal never see a netlink message.

``--kernel PROFILE`` narrows that to one profile; a blob of a kind the profile does not consume
is not judged by the profile rules (BLOB-KERNEL-REJECT, BLOB-PROFILE-DIVERGENCE). Selection
itself is kernelview.py's; these rules only read its choices.

Rules that need more than one message (a word-swapped copy of an SA record, for instance)
have a second check in the "resolution" family, given ``(resolution, options)``.
"""

from __future__ import annotations

import functools
import ipaddress

from ...engines.scapy.blobsniff import wire_anomalies
from ...facts.problems import Code, of_code
from ...facts.records import PATH_RECORD_FIELDS
from ...facts.values import path_record_dict, reserved_nonzero
from ...facts.kernelview import (
    LS_PROFILES,
    OPTVAL_PROFILES,
    PROFILES,
    Blob,
    LsContext,
    kernel_view,
)
from ..conditions import packet_rule
from ..kernel import kernel_view_of
from ...layers.coded import raw_values
from ...layers.netlink import LS_NLA_TYPE_PATH_RECORD
from ...layers.pathdata import (
    IB_PATH_ALTERNATE,
    IB_PATH_GMP,
    IB_PATH_INBOUND,
    IB_PATH_INBOUND_REVERSE,
    IB_PATH_OUTBOUND,
    IB_PATH_PRIMARY,
    KNOWN_FLAGS,
    RECORD_SIZE,
    flags_text,
)
from ...layers.sa import SELECTOR_EXACTLY, PathRecord
from ...model import sources
from ..model import rule

SET_OPTION_PROFILES = OPTVAL_PROFILES  # ("ucma", "proposal")

_UCMA = sources.UCMA_SET_PATH
_SAQ = sources.LS_RESPONSE
_UAPI = sources.UAPI_SA
_SEED = sources.SEED_LAYOUT
# each profile cited by the kernel code (file, function, release, commits) it follows
_PROFILES = "ibpath kernel profiles (" + "; ".join(
    f"{p.name}: {p.source}" for p in PROFILES.values()) + ")"



# -- what a check is given --------------------------------------------------------------------

def _is_ls(rec: dict) -> bool:
    return rec.get("kind") == "ls"


def _what(rec: dict) -> str:
    if _is_ls(rec):
        return f"LS RESOLVE response seq {rec['ls']['seq']}"
    return "blob"


def _records(rec: dict) -> list[dict]:
    return rec.get("blob_records") or []


def _rec_label(i: int, r: dict) -> str:
    return f"record {i} ({flags_text(r['flags'])})"


def applicable_profiles(rec: dict, options) -> tuple[str, ...]:
    """The kernel profiles that consume this kind of blob, narrowed by --kernel."""
    kinds = LS_PROFILES if _is_ls(rec) else SET_OPTION_PROFILES
    kernel = getattr(options, "kernel", "all") or "all"
    return kinds if kernel == "all" else tuple(p for p in kinds if p == kernel)


def _choices(rec: dict, options) -> dict[str, dict]:
    """The decoder's kernel view (kernelview.py choices as dicts) for the applicable profiles."""
    view = kernel_view_of(rec)
    return {p: view[p] for p in applicable_profiles(rec, options) if p in view}


@functools.lru_cache(maxsize=65536)
def _gid(text: str) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(text)


def _reserved_records(rec: dict) -> set[int]:
    """The blob records whose reserved PathRecord bits the decoder found set."""
    return {i for p in of_code(rec, Code.BLOB_RESERVED) for i in p.args[0]}


# The rules the plugin shows as expert infos are declared once, in packet_rules.PACKET_RULES:
# their Exprs decide here too, over the record's facts (PathArray: the blob's bytes as
# Remaining(); PathRecData: a blob record; PathRecord: its PathRecord).
_LENGTH = packet_rule("BLOB-LENGTH")
_RAGGED = _LENGTH[1]
_UNKNOWN_FLAGS = packet_rule("BLOB-UNKNOWN-FLAGS")
_GMP_NOT_REVERSIBLE = packet_rule("BLOB-GMP-NOT-REVERSIBLE")
_BIDIR_NOT_REVERSIBLE = packet_rule("BLOB-BIDIR-NOT-REVERSIBLE")


def declared(shared) -> tuple[str, str, str, str]:
    """The rule() arguments of a blob rule the plugin shares: its ID, severity and source as
    packet_rules declares them, family blob."""
    pr, _ = shared
    return pr.rule_id, pr.severity, "blob", pr.source


def _on_record(rule, r) -> bool:
    """Whether a PathRecData or PathRecord rule's condition holds on blob record r."""
    pr, condition = rule
    own = r if pr.layer == "PathRecData" else r["path_record"]
    return bool(condition({"PathRecData": r}, own))


# -- BLOB-LENGTH ------------------------------------------------------------------------------

@rule(*declared(_LENGTH))
def blob_length(subject):
    """The blob's length is not a whole number of 72-byte records.

    ucma_set_ib_path starts with `if (optlen % sizeof(struct ib_path_rec_data)) return
    -EINVAL;`. In an LS response each PATH_RECORD attribute must carry exactly one 72-byte
    struct ib_path_rec_data: ib_nl_policy gives PATH_RECORD as NLA_BINARY with len 72, a
    maximum, so a longer value fails nla_parse() (the kernel sends the query to the SA itself)
    and a shorter one passes and is read past its end (ib_nl_process_good_resolve_rsp copies
    64 bytes from it).
    Source: drivers/infiniband/core/ucma.c ucma_set_ib_path; sa_query.c ib_nl_policy.
    """
    rec, _ = subject
    if _is_ls(rec):
        for a in rec["ls"].get("attributes", []):
            if a.get("type") != LS_NLA_TYPE_PATH_RECORD:
                continue
            size = a["nla_len"] - 4
            if size == RECORD_SIZE:
                continue
            what = ("nla_parse() fails (-ERANGE against ib_nl_policy's 72): the kernel sends "
                    "the query to the SA itself" if size > RECORD_SIZE else
                    "ib_nl_policy lets it through and the kernel reads the record past the "
                    "attribute's end")
            yield [rec["frame"]], (f"{_what(rec)}: PATH_RECORD attribute {a['index']} carries "
                                   f"{size} bytes, not {RECORD_SIZE}: {what}")
        return
    length = rec["blob"]["length"]
    if _RAGGED({}, {}, length):
        yield [rec["frame"]], (
            f"blob length {length} is not a multiple of {RECORD_SIZE} (struct "
            f"ib_path_rec_data): {rec['blob']['records']} whole record(s) and "
            f"{length % RECORD_SIZE} bytes more; ucma_set_ib_path returns EINVAL")


# -- BLOB-EMPTY -------------------------------------------------------------------------------

@rule("BLOB-EMPTY", "error", "blob", _UCMA + "; " + _SAQ)
def blob_empty(subject):
    """The blob holds no record.

    ucma_set_ib_path finds no 0x2B record in an empty optval and returns -EINVAL; an LS
    response without RDMA_NL_LS_F_ERR and without a PATH_RECORD attribute passes
    ib_nl_is_good_resolve_resp, then ib_nl_process_good_resolve_rsp matches nothing and
    completes the query with -EIO (no SA query: the route fails).
    Source: ucma.c ucma_set_ib_path; sa_query.c ib_nl_process_good_resolve_rsp.
    """
    rec, _ = subject
    if _records(rec):
        return
    if _is_ls(rec):
        yield [rec["frame"]], (f"{_what(rec)} carries no PATH_RECORD attribute and no "
                               "RDMA_NL_LS_F_ERR: the kernel completes the query with -EIO "
                               "(no SA query)")
    else:
        yield [rec["frame"]], (f"blob of {rec['blob']['length']} bytes holds no whole record: "
                               "ucma_set_ib_path returns EINVAL")


# -- BLOB-RESERVED ----------------------------------------------------------------------------

@rule("BLOB-RESERVED", "warning", "blob", _UAPI)
def blob_reserved(subject):
    """A record's reserved u32 (after the flags) is not 0.

    struct ib_path_rec_data { __u32 flags; __u32 reserved; __u32 path_rec[16]; }: no kernel
    reads the reserved word (ucma_set_ib_path and ib_nl_process_good_resolve_rsp look at flags
    and path_rec only), so it works today, but a future kernel may give it a meaning. librdmacm
    (ucma_ib_save_resp) leaves it 0 (type/reserved of acm_ep_addr_data).
    Source: include/uapi/rdma/ib_user_sa.h; rdma-core librdmacm/acm.c.
    """
    rec, _ = subject
    for i, r in enumerate(_records(rec)):
        if r["reserved"]:
            yield [rec["frame"]], (f"{_what(rec)} {_rec_label(i, r)}: reserved word is "
                                   f"0x{r['reserved']:08x}, not 0")


# -- BLOB-UNKNOWN-FLAGS -----------------------------------------------------------------------

@rule(*declared(_UNKNOWN_FLAGS))
def blob_unknown_flags(subject):
    """A record sets a flag bit outside IB_PATH_* (0x3F).

    ib_user_sa.h defines GMP 0x01, PRIMARY 0x02, ALTERNATE 0x04, OUTBOUND 0x08, INBOUND 0x10,
    INBOUND_REVERSE 0x20. ucma_set_ib_path compares flags for equality with 0x2B, so an
    extra bit makes it skip the record; flags in host order read on the other endianness show
    up here too (0x2B000000).
    Source: include/uapi/rdma/ib_user_sa.h; ucma.c ucma_set_ib_path.
    """
    rec, _ = subject
    for i, r in enumerate(_records(rec)):
        if _on_record(_UNKNOWN_FLAGS, r):
            extra = r["flags"] & ~KNOWN_FLAGS
            hint = ""
            swapped = int.from_bytes(r["flags"].to_bytes(4, "little"), "big")
            if not swapped & ~KNOWN_FLAGS:
                hint = (f"; byte-swapped it would read 0x{swapped:02x}: flags written in "
                        "network order instead of host order?")
            yield [rec["frame"]], (f"{_what(rec)} record {i}: flags 0x{r['flags']:x} set "
                                   f"unknown bits 0x{extra:x} (IB_PATH_* use 0x3f){hint}")


# -- BLOB-FLAG-CONFLICT -----------------------------------------------------------------------

@rule("BLOB-FLAG-CONFLICT", "error", "blob", _UAPI + "; " + _PROFILES)
def blob_flag_conflict(subject):
    """A record's flags contradict themselves (PRIMARY+ALTERNATE, neither, INBOUND+INBOUND_REVERSE).

    A record whose flags are 0 is a warning instead.

    A path is either the primary or the alternate one (seed: *_PRIMARY / *_SECONDARY), and a
    return path is stored either as the remote side's path (INBOUND) or reversed
    (INBOUND_REVERSE), not both. Flags 0: audit-rules.md says ls-multi reads such a record as
    a GMP path (cma_query_handler's `!flags` case); in fact ib_nl_process_good_resolve_rsp's
    mask (PRIMARY at least) drops it before cma_query_handler sees it (that case serves
    SA-sourced records), and ucma, ls-legacy and the proposal ignore it: a record no consumer
    uses.
    Source: ib_user_sa.h; seed thread; sa_query.c ib_nl_process_good_resolve_rsp; cma.c
    cma_query_handler.
    """
    rec, _ = subject
    for i, r in enumerate(_records(rec)):
        f = r["flags"]
        label = f"{_what(rec)} {_rec_label(i, r)}"
        if f == 0:
            yield [rec["frame"]], (
                f"{_what(rec)} record {i} has flags 0: no consumer uses it (ucma wants 0x2b, "
                "the netlink masks want PRIMARY at least, the proposal PRIMARY or ALTERNATE)"
            ), "warning"
            continue
        problems = []
        if f & IB_PATH_PRIMARY and f & IB_PATH_ALTERNATE:
            problems.append("both PRIMARY and ALTERNATE")
        elif not f & (IB_PATH_PRIMARY | IB_PATH_ALTERNATE):
            problems.append("neither PRIMARY nor ALTERNATE")
        if f & IB_PATH_INBOUND and f & IB_PATH_INBOUND_REVERSE:
            problems.append("both INBOUND and INBOUND_REVERSE")
        if problems:
            yield [rec["frame"]], f"{label} is {' and '.join(problems)}"


# -- BLOB-KERNEL-REJECT -----------------------------------------------------------------------

@rule("BLOB-KERNEL-REJECT", "error", "blob", _PROFILES + ": " + _UCMA + "; " + _SAQ
      + "; cma.c cma_query_handler; " + _SEED)
def blob_kernel_reject(subject):
    """A kernel profile finds no usable record; the message names it and what the kernel does.

    Judged by the profiles that consume the blob's kind (module docstring): an optval by ucma
    (EINVAL: ragged length or no record with flags == 0x2B) and the proposal (EINVAL without
    GMP, forward and return paths); an LS response by ls-legacy, ls-multi-6.1 and ls-multi
    (-EIO when no record matches the path_use mask: the route fails, no SA query; -EINVAL from
    cma_query_handler for a PRIMARY record with none of GMP/INBOUND/OUTBOUND, from 6.3 on
    (ccae0447af0e; ls-multi-6.1 ignores it); resolved without a GMP path; refused with -EPERM
    when it carries NLM_F_REQUEST; an SA query when nla_parse fails).
    Source: kernelview.py select_ucma, select_ls_legacy, select_ls_multi_61, select_ls_multi,
    select_proposal.
    """
    rec, options = subject
    if _is_ls(rec) and rec["ls"].get("error"):
        return  # RES-LS-ERR: the kernel does not read the records
    result = (rec.get("blob") or {}).get("set_option_result")
    for profile, c in _choices(rec, options).items():
        if c["accepted"]:
            continue
        pu = f" (path_use {c['path_use_name']})" if "path_use_name" in c else ""
        notes = "; ".join(c.get("notes") or [])
        msg = f"{profile}{pu} rejects the {_what(rec)}: {c['action']} [{c['outcome']}]"
        if notes:
            msg += f" — {notes}"
        if profile == "ucma" and result is not None:
            msg += f" (the capture records rdma_set_option={result})"
        yield [rec["frame"]], msg


# -- reversibility ----------------------------------------------------------------------------

@rule(*declared(_GMP_NOT_REVERSIBLE))
def blob_gmp_not_reversible(subject):
    """A record flagged GMP carries a PathRecord whose Reversible bit is 0.

    CM MADs travel the GMP path in both directions (the passive side answers on the path
    reversed from the REQ), so the seed demands "a GMP reversible path" whenever the forward
    path is not reversible. ucma_set_ib_path does not check it (wire-formats.md 6.1: "No
    reversibility check"): the connection then fails at run time.
    Source: seed thread; ucma.c ucma_set_ib_path (no check); cm.c cm_format_req.
    """
    rec, _ = subject
    for i, r in enumerate(_records(rec)):
        if _on_record(_GMP_NOT_REVERSIBLE, r):
            yield [rec["frame"]], (f"{_what(rec)} {_rec_label(i, r)} is the GMP path but its "
                                   "PathRecord is not reversible (Reversible bit 0)")


@rule(*declared(_BIDIR_NOT_REVERSIBLE))
def blob_bidir_not_reversible(subject):
    """A record flagged BIDIRECTIONAL (OUTBOUND|INBOUND_REVERSE) whose PathRecord is not reversible.

    BIDIRECTIONAL says the same record, reversed, is also the return path (seed:
    FORWARD_PRIMARY | RETURN_PRIMARY_REV); a path the SA did not mark reversible cannot be
    used backwards. The seed's resolver hands over a single 0x2B record only when the forward
    path came back reversible.
    Source: seed thread; include/uapi/rdma/ib_user_sa.h IB_PATH_BIDIRECTIONAL.
    """
    rec, _ = subject
    for i, r in enumerate(_records(rec)):
        if _on_record(_BIDIR_NOT_REVERSIBLE, r):
            yield [rec["frame"]], (f"{_what(rec)} {_rec_label(i, r)} claims to be the return "
                                   "path too (BIDIRECTIONAL) but its PathRecord is not "
                                   "reversible")


# -- BLOB-ENDPOINTS ---------------------------------------------------------------------------

def _endpoints(records: list[dict]) -> tuple | None:
    """(local, remote) GIDs as the records' direction flags tell them: the first OUTBOUND or
    INBOUND_REVERSE record's SGID → DGID, else the first INBOUND record's DGID → SGID, else
    the first record's SGID → DGID."""
    for r in records:
        if r["flags"] & (IB_PATH_OUTBOUND | IB_PATH_INBOUND_REVERSE):
            return _gid(r["path_record"]["sgid"]), _gid(r["path_record"]["dgid"])
    for r in records:
        if r["flags"] & IB_PATH_INBOUND:
            return _gid(r["path_record"]["dgid"]), _gid(r["path_record"]["sgid"])
    if records:
        return _gid(records[0]["path_record"]["sgid"]), _gid(records[0]["path_record"]["dgid"])
    return None


@rule("BLOB-ENDPOINTS", "error", "blob", _UAPI + "; " + _SEED)
def blob_endpoints(subject):
    """The records disagree on the endpoint pair or on the direction their flags give.

    OUTBOUND and INBOUND_REVERSE records must go local → remote, INBOUND records remote →
    local, and every record must join the same two GIDs.

    The flags name each record's direction (ib_user_sa.h: OUTBOUND = the path we send on,
    INBOUND = the remote side's path to us, INBOUND_REVERSE = that path stored reversed);
    ls-multi-6.1 and ls-multi file INBOUND and OUTBOUND records as the connection's inbound
    and outbound paths without checking their GIDs. The local end is taken from the records themselves (the
    first OUTBOUND/INBOUND_REVERSE record's SGID): a blob does not say who handed it over;
    RES-LS-MISMATCH compares an LS answer with its request.
    Source: ib_user_sa.h; seed thread (_REV "stored in reversed format"); cma.c
    cma_query_handler.
    """
    rec, _ = subject
    records = _records(rec)
    ends = _endpoints(records)
    if ends is None:
        return
    local, remote = ends
    for i, r in enumerate(records):
        pr = r["path_record"]
        s, d = _gid(pr["sgid"]), _gid(pr["dgid"])
        label = f"{_what(rec)} {_rec_label(i, r)}"
        if {s, d} != {local, remote}:
            yield [rec["frame"]], (f"{label} joins {s} and {d}, not the blob's endpoints "
                                   f"{local} (local) and {remote} (remote)")
            continue
        f = r["flags"]
        if f & (IB_PATH_OUTBOUND | IB_PATH_INBOUND_REVERSE) and (s, d) != (local, remote):
            yield [rec["frame"]], (f"{label} goes {s} → {d}; an OUTBOUND/INBOUND_REVERSE record "
                                   f"goes local → remote ({local} → {remote})")
        elif f & IB_PATH_INBOUND and not f & (IB_PATH_OUTBOUND | IB_PATH_INBOUND_REVERSE) \
                and (s, d) != (remote, local):
            yield [rec["frame"]], (f"{label} goes {s} → {d}; an INBOUND record goes remote → "
                                   f"local ({remote} → {local})")
        elif f & IB_PATH_INBOUND and f & IB_PATH_OUTBOUND and local != remote:
            yield [rec["frame"]], (f"{label} is both OUTBOUND and INBOUND: one record cannot go "
                                   "both ways unreversed")


# -- BLOB-NOT-MAD-FORMAT ----------------------------------------------------------------------

def word_swap(data: bytes) -> bytes:
    """Each 32-bit word byte-reversed: wire (big-endian) words read as host order."""
    return b"".join(data[k:k + 4][::-1] for k in range(0, len(data), 4))


def record_bytes(pr: dict) -> bytes:
    """The 64 wire bytes of a decoded PathRecord (reserved bits, which decoding drops, as 0)."""
    return bytes(PathRecord(**raw_values({k: pr[k] for k in PATH_RECORD_FIELDS})))


def swapped_reading(pr: dict) -> tuple[dict, bool]:
    """The record read with its 32-bit words swapped back, and whether reserved bits show."""
    pkt = PathRecord(word_swap(record_bytes(pr)))
    return path_record_dict(pkt), bool(reserved_nonzero(pkt))


@rule("BLOB-NOT-MAD-FORMAT", "error", "blob", _UCMA + " (ib_sa_unpack_path); " + _SAQ)
def blob_not_mad_format(subject):
    """A record's 64 bytes are not a PathRecord in SA wire format.

    Causes: 32-bit words in host order, an unpacked kernel struct copied in, ... Judged by what
    a resolved path cannot hold: reserved bits or bytes set, MTU code outside 1-5, an unknown
    rate code, a byte-swapped fe80:: GID prefix.

    ucma_set_ib_path reads path_rec with ib_sa_unpack_path() and ls-legacy copies it into the
    MAD as the SA's GetResp record: both take SA wire format (big-endian, packed), as the seed
    asked ("it would be really nice if ibv_kern_path_rec could be in MAD format"). When the
    record read with its words swapped back is clean, the message says so.
    Source: ucma.c ucma_set_ib_path; sa_query.c ib_nl_process_good_resolve_rsp; seed thread.
    """
    rec, _ = subject
    reserved = _reserved_records(rec)
    for i, r in enumerate(_records(rec)):
        pr = r["path_record"]
        bad = wire_anomalies(pr, i in reserved)
        if not bad:
            continue
        msg = f"{_what(rec)} {_rec_label(i, r)} is not SA wire format: " + "; ".join(bad)
        back, back_reserved = swapped_reading(pr)
        if not wire_anomalies(back, back_reserved):
            msg += (f". With its 32-bit words swapped back it reads as a valid path "
                    f"{back['sgid']} → {back['dgid']} (SLID {back['slid']}, DLID "
                    f"{back['dlid']}): written in host order?")
        yield [rec["frame"]], msg


def _same_record(a: dict, b: dict) -> bool:
    for k in PATH_RECORD_FIELDS:
        if k in ("sgid", "dgid"):
            if _gid(a[k]) != _gid(b[k]):
                return False
        elif a[k] != b[k]:
            return False
    return True


@rule("BLOB-NOT-MAD-FORMAT", "error", "resolution", _UCMA + "; " + _SAQ)
def blob_is_word_swapped_sa_record(subject):
    """A blob record equals a PathRecord the SA returned, with its 32-bit words byte-swapped.

    Field for field, within one resolution: the resolver converted SA data to host order.

    Both consumers (ib_sa_unpack_path in ucma_set_ib_path, the GetResp copy in
    ib_nl_process_good_resolve_rsp) read SA wire format. Blobs and LS responses of the
    resolution are compared with every record of its answered SA transactions.
    Source: ucma.c ucma_set_ib_path; sa_query.c ib_nl_process_good_resolve_rsp.
    """
    res, _ = subject
    blobs = list(res.blobs) + [r for r in res.ls_responses
                               if r.get("blob_records") and not r["ls"].get("error")]
    if not blobs:
        return  # nothing to compare: spare re-encoding every SA record (the costly part)
    sa = []
    for t in res.transactions:
        for k, pr in enumerate(t.records):
            raw = record_bytes(pr)
            if word_swap(raw) == raw:
                continue
            sa.append((t.completing_frame, k, pr, path_record_dict(PathRecord(word_swap(raw)))))
    if not sa:
        return
    for b in sorted(blobs, key=lambda r: r["frame"]):
        for i, r in enumerate(_records(b)):
            for frame, k, orig, swapped in sa:
                if _same_record(r["path_record"], swapped):
                    yield [b["frame"], frame], (
                        f"{_what(b)} {_rec_label(i, r)} is SA record {k} of frame {frame} "
                        f"({orig['sgid']} → {orig['dgid']}, DLID {orig['dlid']}) with its "
                        "32-bit words byte-swapped (host order), not the SA's wire format")
                    break


blob_is_word_swapped_sa_record.only_with_handovers = True  # no blob, no LS response: nothing to compare


# -- BLOB-FIELD-RANGE -------------------------------------------------------------------------

_SELECTORS = (("mtu_selector", "MTU"), ("rate_selector", "rate"),
              ("packet_life_time_selector", "PacketLifeTime"))


@rule("BLOB-FIELD-RANGE", "warning", "blob", "OpenSM osm_sa_path_record.c pr_rcv_build_pr; "
      "IBA 10.9.1.2 (P_Key); cm.c cm_ack_timeout")
def blob_field_range(subject):
    """A record holds a value no resolved path has: it looks like a query template.

    Checked: a selector other than 2 ("exactly"), rate 0 ("port current"), an invalid P_Key
    (0x0000/0x8000), PacketLifeTime above 31, an all-zero GID. A record that is not SA wire
    format at all (BLOB-NOT-MAD-FORMAT) is not judged here: its fields mean nothing.

    OpenSM's pr_rcv_build_pr returns MTU, rate and PacketLifeTime with selector 2 (`| 0x80`)
    and the kernel's own RoCE path (cma_resolve_iboe_route) sets IB_SA_EQ; "port current" is a
    query value; P_Keys 0x0000 and 0x8000 are invalid; a PacketLifeTime above 31 cannot be
    carried in the CM's 5-bit Local ACK Timeout (cm_ack_timeout clamps to 31).
    Source: OpenSM pr_rcv_build_pr; cma.c cma_resolve_iboe_route; cm.c cm_ack_timeout.
    """
    rec, _ = subject
    reserved = _reserved_records(rec)
    for i, r in enumerate(_records(rec)):
        pr = r["path_record"]
        if wire_anomalies(pr, i in reserved):
            continue
        bad = [f"{name} selector {pr[sel]} (not 2, exactly)" for sel, name in _SELECTORS
               if pr[sel] != SELECTOR_EXACTLY]
        if pr["rate"] == 0:
            bad.append("rate 0 (port current)")
        if pr["pkey"] & 0x7FFF == 0:
            bad.append(f"P_Key 0x{pr['pkey']:04x} is invalid")
        if pr["packet_life_time"] > 31:
            bad.append(f"PacketLifeTime {pr['packet_life_time']} is above 31")
        for g in ("sgid", "dgid"):
            if _gid(pr[g]) == _gid("::"):
                bad.append(f"{g.upper()} is all zero")
        if bad:
            yield [rec["frame"]], (f"{_what(rec)} {_rec_label(i, r)} does not look like a "
                                   "resolved path: " + "; ".join(bad))


# -- alternates -------------------------------------------------------------------------------

def _primaries(records):
    return [(i, r) for i, r in enumerate(records)
            if r["flags"] & IB_PATH_PRIMARY and not r["flags"] & IB_PATH_ALTERNATE]


def _alternates(records):
    return [(i, r) for i, r in enumerate(records)
            if r["flags"] & IB_PATH_ALTERNATE and not r["flags"] & IB_PATH_PRIMARY]


@rule("BLOB-ALT-WITHOUT-PRIMARY", "error", "blob", _SEED + "; " + _UAPI)
def blob_alt_without_primary(subject):
    """The blob has ALTERNATE records but no PRIMARY record.

    An alternate path is the APM failover for a primary one (seed: FORWARD_SECONDARY next to
    GMP_PRIMARY | FORWARD_PRIMARY | RETURN_PRIMARY_REV); without a primary record ucma
    (0x2B only), both netlink masks (PRIMARY at least) and the proposal reject the blob.
    Source: seed thread; ib_user_sa.h IB_PATH_ALTERNATE.
    """
    rec, _ = subject
    records = _records(rec)
    alts = _alternates(records)
    if alts and not _primaries(records):
        yield [rec["frame"]], (f"{_what(rec)} has ALTERNATE record(s) "
                               f"{', '.join(str(i) for i, _ in alts)} but no PRIMARY record")


_ROUTE_FIELDS = ("sgid", "dgid", "slid", "dlid", "sl", "flow_label", "hop_limit", "tclass")
_ROLE_BITS = IB_PATH_GMP | IB_PATH_OUTBOUND | IB_PATH_INBOUND | IB_PATH_INBOUND_REVERSE


@rule("BLOB-ALT-SAME-AS-PRIMARY", "warning", "blob", _SEED + " (APM)")
def blob_alt_same_as_primary(subject):
    """An ALTERNATE record is the same route as the PRIMARY record of its role (no failover).

    Same route: same GIDs, LIDs, SL, flow label, hop limit and traffic class.

    APM switches to the alternate path when the primary one fails; an alternate over the same
    LIDs and SL fails with it. Records are paired by role (GMP, OUTBOUND, INBOUND,
    INBOUND_REVERSE); an alternate with no role bit is compared with every primary.
    Source: seed thread (SECONDARY paths for APM); IBA 17.2.8 (APM).
    """
    rec, _ = subject
    records = _records(rec)
    prims = _primaries(records)
    for i, a in _alternates(records):
        for j, p in prims:
            roles = a["flags"] & _ROLE_BITS
            if roles and not roles & p["flags"]:
                continue
            if all(a["path_record"][k] == p["path_record"][k] for k in _ROUTE_FIELDS):
                pa = a["path_record"]
                yield [rec["frame"]], (
                    f"{_what(rec)} alternate {_rec_label(i, a)} is the same route as primary "
                    f"{_rec_label(j, p)} (SLID {pa['slid']} → DLID {pa['dlid']}, SL {pa['sl']}): "
                    "no failover benefit")
                break


# -- BLOB-PROFILE-DIVERGENCE ------------------------------------------------------------------

_DATA_FIELDS = ("dlid", "sl", "mtu", "rate")


def data_path(profile: str, choice: dict, records: list[dict]) -> dict | None:
    """The (DLID, SL, MTU, rate) a profile sends data with, and the records they come from.

    ucma, ls-legacy, proposal: the record chosen as forward (outbound) path. ls-multi-6.1 and
    ls-multi (Profile.directional): the QP takes SL/MTU/rate from route->path_rec (the GMP
    record) and its data-path DLID from the outbound record when that DLID is neither 0 nor
    0xFFFF (cm_init_qp_rtr_attr, eb8336dbe373 "RDMA/cm: Use DLID from inbound/outbound
    PathRecords as the datapath DLID")."""
    if not choice.get("accepted"):
        return None
    fwd, gmp = choice.get("forward"), choice.get("gmp")
    if PROFILES[profile].directional and gmp is not None:
        base = records[gmp]["path_record"]
        out = {k: base[k] for k in _DATA_FIELDS}
        used = {gmp}
        if fwd is not None and fwd != gmp:
            dlid = records[fwd]["path_record"]["dlid"]
            if dlid not in (0, 0xFFFF):
                out["dlid"] = dlid
                used.add(fwd)
        out["records"] = sorted(used)
        return out
    if fwd is None or fwd >= len(records):
        return None
    pr = records[fwd]["path_record"]
    return {**{k: pr[k] for k in _DATA_FIELDS}, "records": [fwd]}


@rule("BLOB-PROFILE-DIVERGENCE", "warning", "blob", _PROFILES + "; " + _UCMA + "; " + _SAQ
      + "; cma.c cma_query_handler, cm.c cm_init_qp_rtr_attr; " + _SEED)
def blob_profile_divergence(subject):
    """Two kernel profiles would send data on different paths (DLID, SL, MTU or rate differ).

    Only under --kernel all, among the profiles that consume the blob's kind: ucma vs the
    proposal for an optval (ucma takes the 0x2B record, the proposal the FORWARD record),
    ls-legacy vs ls-multi-6.1 and ls-multi for an LS response (from 6.1 on the data-path DLID
    comes from the OUTBOUND record). The same resolver output then behaves differently per kernel.
    Source: kernelview.py; ucma.c ucma_set_ib_path; sa_query.c; cm.c cm_init_qp_rtr_attr.
    """
    rec, options = subject
    if (getattr(options, "kernel", "all") or "all") != "all":
        return
    records = _records(rec)
    groups = _same_data_path(rec, options, records)
    for x in range(len(groups)):
        for y in range(x + 1, len(groups)):
            (na, a), (nb, b) = groups[x], groups[y]
            diff = [k for k in _DATA_FIELDS if a[k] != b[k]]
            if diff:
                detail = ", ".join(f"{k.upper() if k != 'rate' else 'rate'} {a[k]} vs {b[k]}"
                                   for k in diff)
                yield [rec["frame"]], (
                    f"{_what(rec)}: {na} send{'s' if ' and ' not in na else ''} data per "
                    f"record(s) {a['records']}, {nb} per record(s) {b['records']}: {detail}")


def _same_data_path(rec: dict, options, records: list[dict]) -> list[tuple[str, dict]]:
    """The accepting profiles grouped by the data path they take, in profile order: ls-multi-6.1
    and ls-multi send data alike whenever both accept, and one divergence is said once."""
    groups: dict[tuple, tuple[list[str], dict]] = {}
    for p, c in _choices(rec, options).items():
        d = data_path(p, c, records)
        if d is not None:
            key = tuple(d[k] for k in _DATA_FIELDS) + (tuple(d["records"]),)
            groups.setdefault(key, ([], d))[0].append(p)
    return [(" and ".join(names), d) for names, d in groups.values()]


# -- helpers for other rule modules -----------------------------------------------------------

def ls_blob(response: dict, path_use: int | None) -> Blob:
    """kernelview Blob facts of a decoded LS response for a given path_use, records only
    (no NLM_F_REQUEST, no nla_parse failure): what the records alone make of it."""
    attrs = sorted((a for a in response["ls"].get("attributes", []) if "blob_record" in a),
                   key=lambda a: a["blob_record"])
    types = tuple(a["nla_type"] for a in attrs)
    flags = tuple(r["flags"] for r in _records(response))
    if len(types) != len(flags):
        types = None
    return Blob(flags, None, LsContext(path_use=path_use, nla_types=types))


def ls_view(response: dict, path_use: int | None, profiles) -> dict:
    """kernelview choices (objects) of an LS response's records under path_use."""
    return kernel_view(ls_blob(response, path_use), profiles)


__all__ = ["applicable_profiles", "data_path", "ls_blob", "ls_view", "wire_anomalies",
           "word_swap"]
