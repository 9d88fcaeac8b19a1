"""Kernel view of a blob: which record each kernel consumer takes as GMP path, forward
(outbound) path, return (inbound) path and alternate path, or why it rejects the blob and what
it does instead.

One profile per consumer (audit-rules.md "Kernel profiles"), each a record of data plus one
selection function:

- ``ucma``: drivers/infiniband/core/ucma.c ucma_set_ib_path (rdma_set_option), 2.6.33 on.
- ``ls-legacy``: drivers/infiniband/core/sa_query.c ib_nl_handle_resolve_resp,
  ib_nl_is_good_resolve_resp and ib_nl_process_good_resolve_rsp before Linux 6.1 (v6.0 is the
  last release with them).
- ``ls-multi-6.1``: the same functions after 5a3749493394 "RDMA/cma: Multiple path records
  support with netlink channel" (first in v6.1), plus drivers/infiniband/core/cma.c
  cma_query_handler and the CM's use of the inbound/outbound records (eb8336dbe373, v6.1):
  Linux 6.1 and 6.2, where a record cma_query_handler cannot file is ignored.
- ``ls-multi``: Linux 6.3 on, after ccae0447af0e "RDMA/cma: Refactor the inbound/outbound path
  records process flow" (first in v6.3): such a record fails the route with -EINVAL.
- ``proposal``: the 2009 linux-rdma thread (never merged).

"forward" is the record whose path data leaves on (outbound), "inbound" the one the remote
side uses to reach us (return); with a single bidirectional record they are all the GMP record.

Findings worth knowing (read in sa_query.c, see wire-formats.md §6.4): the kernel falls back
to an SA query only when the response has RDMA_NL_LS_F_ERR or nla_parse() fails; a response
whose PATH_RECORD attributes match no record completes the query with -EIO (no SA query).
PATH_RECORD attributes are compared with the raw nla_type, so one with RDMA_NLA_F_MANDATORY
(0x2001) is skipped.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Sequence

from scapy.packet import Packet

from ..model import sources
from ..layers.netlink import (
    LS_NLA_TYPE_PATH_RECORD,
    LS_NLA_TYPES,
    LS_RESOLVE_PATH_USE_ALL,
    LS_RESOLVE_PATH_USE_GMP,
    LS_RESOLVE_PATH_USE_UNIDIRECTIONAL,
    NLA_F_NESTED,
    NLA_F_NET_BYTEORDER,
    NLM_F_REQUEST,
    PATH_USE,
    RDMA_NL_LS_F_ERR,
    LsAttr,
)
from ..layers.pathdata import (
    GMP_PRIMARY_BIDIRECTIONAL,
    IB_PATH_ALTERNATE,
    IB_PATH_GMP,
    IB_PATH_INBOUND,
    IB_PATH_INBOUND_REVERSE,
    IB_PATH_OUTBOUND,
    IB_PATH_PRIMARY,
    PRIMARY_OUTBOUND,
    RECORD_SIZE,
    PathArray,
    PathRecData,
    flags_text,
)

# sa_query.c ib_nl_policy: NLA_BINARY entries give a maximum length, NLA_U* a minimum.
# Types 9 and 10 (IPV4/IPV6) and 0 have no entry, so nla_parse() does not check them.
LS_POLICY_MAX = {1: 72, 4: 16, 5: 16}
LS_POLICY_MIN = {2: 4, 3: 8, 6: 1, 7: 2, 8: 2}
LS_NLA_PARSE_MAXTYPE = 10  # nla_parse(tb, LS_NLA_TYPE_MAX - 1, ...)
RDMA_PRIMARY_PATH_MAX_REC_NUM = 3

OK = "ok"
EINVAL = "EINVAL"
EIO = "EIO"
SA_FALLBACK = "sa-fallback"
DROPPED = "dropped"
NO_GMP = "no-gmp"


@dataclass(frozen=True)
class LsContext:
    """What an RDMA netlink RESOLVE response adds to its records.

    path_use: the matched request's path_use (None when the request is not in the capture:
    each profile then assumes what the kernel's own rdma_resolve_route query sends).
    nla_types: the raw nla_type of the PATH_RECORD attribute each record came from.
    parse_error: why nla_parse() with ib_nl_policy fails on the message, if it does.
    """

    path_use: int | None = None
    nlmsg_flags: int = 0
    parse_error: str | None = None
    nla_types: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Blob:
    """The facts the kernel looks at: each whole record's flags, the optval length in bytes
    (None for an LS response, which has no optlen) and the LS context."""

    flags: tuple[int, ...]
    length: int | None = None
    ls: LsContext | None = None

    def nla_type(self, i: int) -> int:
        if self.ls is None or self.ls.nla_types is None:
            return LS_NLA_TYPE_PATH_RECORD
        return self.ls.nla_types[i]


@dataclass(frozen=True)
class KernelChoice:
    """One profile's view of one blob. Indices are 0-based record indices in the blob."""

    profile: str
    accepted: bool
    outcome: str
    action: str
    source: str
    gmp: int | None = None
    forward: int | None = None
    inbound: int | None = None
    alternate: int | None = None
    alternate_gmp: int | None = None
    alternate_inbound: int | None = None
    path_use: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["notes"] = list(self.notes)
        if self.path_use is None:
            del d["path_use"]
        else:
            d["path_use_name"] = PATH_USE.get(self.path_use, str(self.path_use))
        return d


@dataclass(frozen=True)
class Commit:
    """A mainline Linux commit a profile rests on: its abbreviated hash, its subject and the
    first release tag that contains it (the merge window it landed in)."""

    sha: str
    subject: str
    release: str

    def cite(self) -> str:
        return f'{self.sha} "{self.subject}" ({self.release})'


# The commits that changed how an LS RESOLVE response is read (Mark Zhang's series, merged for
# v6.1, and its refactor, merged for v6.3). Both landed in torvalds/linux master during the
# merge window after the release before them: 5a3749493394 and eb8336dbe373 after v6.0
# (October 2022), ccae0447af0e after v6.2 (24 February 2023).
MULTI_PATH_RECORDS = Commit("5a3749493394", "RDMA/cma: Multiple path records support with "
                            "netlink channel", "v6.1")
INBOUND_OUTBOUND_DLID = Commit("eb8336dbe373", "RDMA/cm: Use DLID from inbound/outbound "
                               "PathRecords as the datapath DLID", "v6.1")
PATH_RECORDS_REFACTOR = Commit("ccae0447af0e", "RDMA/cma: Refactor the inbound/outbound path "
                               "records process flow", "v6.3")

# what a profile reads: rdma_set_option's optval, or an RDMA netlink LS RESOLVE response
OPTVAL, LS_RESPONSE = "optval", "ls"


@dataclass(frozen=True)
class Profile:
    """A kernel consumer of path arrays. `since`/`before`: the Linux versions it describes
    (before is exclusive; None: no bound), the machine-readable form of `kernels`; a profile of
    no kernel has since None and before (0,). `source` names the kernel code (file, function,
    release, commits) the selection function follows; `reads` what the profile consumes
    (OPTVAL or LS_RESPONSE); `directional` whether the CM takes the data-path DLIDs from the
    INBOUND/OUTBOUND records the profile files (eb8336dbe373)."""

    name: str
    consumer: str
    kernels: str
    source: str
    select: Callable[[Blob], KernelChoice]
    since: tuple[int, ...] | None = None
    before: tuple[int, ...] | None = None
    reads: str = OPTVAL
    commits: tuple[Commit, ...] = ()
    directional: bool = False

    def covers(self, version: tuple[int, ...]) -> bool:
        """Whether a kernel of this version (major, minor[, patch]) is one the profile
        describes."""
        return ((self.since is None or version >= self.since)
                and (self.before is None or version < self.before))

    def label(self) -> str:
        """The name with the kernels it stands for and the commits that set them apart:
        "ls-multi (Linux 6.3 on; ccae0447af0e)"."""
        shas = ", ".join(c.sha for c in self.commits)
        return f"{self.name} ({self.kernels}{'; ' + shas if shas else ''})"


# -- ucma ---------------------------------------------------------------------------------------

_UCMA_SRC = "drivers/infiniband/core/ucma.c ucma_set_ib_path"


def select_ucma(blob: Blob) -> KernelChoice:
    """ucma_set_ib_path: `if (optlen % sizeof(*path_data)) return -EINVAL;` then the first
    record with `path_data->flags == (IB_PATH_GMP | IB_PATH_PRIMARY | IB_PATH_BIDIRECTIONAL)`;
    none → -EINVAL. Every other record (alternate, inbound, outbound) is ignored."""
    if blob.length is not None and blob.length % RECORD_SIZE:
        return KernelChoice(
            "ucma", False, EINVAL, "rdma_set_option fails with EINVAL", _UCMA_SRC,
            notes=(f"length {blob.length} is not a multiple of {RECORD_SIZE} "
                   "(optlen % sizeof(struct ib_path_rec_data))",))
    for i, flags in enumerate(blob.flags):
        if flags == GMP_PRIMARY_BIDIRECTIONAL:
            ignored = tuple(f"record {j} ({flags_text(f)}) ignored"
                            for j, f in enumerate(blob.flags) if j != i)
            return KernelChoice(
                "ucma", True, OK, "rdma_set_ib_path(); the single record is the route's path "
                "in both directions", _UCMA_SRC, gmp=i, forward=i, inbound=i, notes=ignored)
    return KernelChoice(
        "ucma", False, EINVAL, "rdma_set_option fails with EINVAL", _UCMA_SRC,
        notes=("no record with flags == GMP|PRIMARY|BIDIRECTIONAL (0x2b) exactly",))


# -- netlink local service ------------------------------------------------------------------

_LS_SRC = "drivers/infiniband/core/sa_query.c ib_nl_handle_resolve_resp"


def _ls_precondition(profile: str, blob: Blob, source: str) -> KernelChoice | None:
    """ib_nl_handle_resolve_resp: a response with NLM_F_REQUEST → -EPERM (dropped, the query
    times out and goes to the SA); ib_nl_is_good_resolve_resp false (RDMA_NL_LS_F_ERR, or
    nla_parse() fails) → ib_sa_disable_local_svc + ib_post_send_mad (SA query)."""
    ls = blob.ls
    if ls is None:
        return None
    if ls.nlmsg_flags & NLM_F_REQUEST:
        return KernelChoice(
            profile, False, DROPPED, "the response is refused (-EPERM); the query waits for its "
            "timeout (2000 ms by default), then goes to the SA", _LS_SRC + " (NLM_F_REQUEST check)",
            path_use=ls.path_use, notes=("response carries NLM_F_REQUEST",))
    if ls.nlmsg_flags & RDMA_NL_LS_F_ERR:
        return KernelChoice(
            profile, False, SA_FALLBACK, "the kernel sends the query to the SA itself", _LS_SRC
            + ", ib_nl_is_good_resolve_resp", path_use=ls.path_use,
            notes=("RDMA_NL_LS_F_ERR set",))
    if ls.parse_error:
        return KernelChoice(
            profile, False, SA_FALLBACK, "nla_parse() fails: the kernel sends the query to the SA "
            "itself", _LS_SRC + ", ib_nl_is_good_resolve_resp", path_use=ls.path_use,
            notes=(ls.parse_error,))
    return None


def _ls_candidates(blob: Blob, mask: int) -> tuple[list[int], list[str]]:
    """ib_nl_process_good_resolve_rsp's loop: `curr->nla_type == LS_NLA_TYPE_PATH_RECORD`
    (raw compare) and `(rec->flags & mask) == mask`."""
    hits, notes = [], []
    for i, flags in enumerate(blob.flags):
        raw = blob.nla_type(i)
        if raw != LS_NLA_TYPE_PATH_RECORD:
            notes.append(f"record {i}: nla_type 0x{raw:04x} is not {LS_NLA_TYPE_PATH_RECORD} as "
                         "the kernel compares it (flag bits set), skipped")
            continue
        if flags & mask == mask:
            hits.append(i)
        else:
            notes.append(f"record {i} ({flags_text(flags)}) lacks {flags_text(mask & ~flags)}")
    return hits, notes


def _path_use(blob: Blob, default: int) -> tuple[int, list[str]]:
    if blob.ls is not None and blob.ls.path_use is not None:
        return blob.ls.path_use, []
    return default, [f"path_use unknown: assumed {PATH_USE[default]}, what rdma_resolve_route's "
                     "reversible query sends"]


_SAQ_RSP = "drivers/infiniband/core/sa_query.c ib_nl_process_good_resolve_rsp"
_LS_LEGACY_SRC = (_SAQ_RSP + " (v4.3 to v6.0: the first record with (flags & mask) == mask "
                  "becomes the SA GetResp record)")
_LS_MULTI_61_SRC = (_SAQ_RSP + ", drivers/infiniband/core/cma.c cma_query_handler, "
                    "drivers/infiniband/core/cm.c cm_format_req (v6.1, v6.2: "
                    f"{MULTI_PATH_RECORDS.cite()}, {INBOUND_OUTBOUND_DLID.cite()}; a record "
                    "cma_query_handler cannot file is ignored)")
_LS_MULTI_SRC = (_SAQ_RSP + ", drivers/infiniband/core/cma.c cma_query_handler, "
                 "drivers/infiniband/core/cm.c cm_format_req (v6.3 on: "
                 f"{PATH_RECORDS_REFACTOR.cite()}, after {MULTI_PATH_RECORDS.sha} and "
                 f"{INBOUND_OUTBOUND_DLID.sha}; `else status = -EINVAL;`)")


def select_ls_legacy(blob: Blob) -> KernelChoice:
    """ib_nl_process_good_resolve_rsp (< 6.1): mask PRIMARY|OUTBOUND for UNIDIRECTIONAL,
    PRIMARY|GMP|BIDIRECTIONAL for GMP and ALL; the first PATH_RECORD attribute with
    (flags & mask) == mask is copied into the MAD as the SA GetResp ("Get the first one. In
    the future, we may need to get up to 6 pathrecords"). None → callback with -EIO."""
    src = _LS_LEGACY_SRC
    pre = _ls_precondition("ls-legacy", blob, src)
    if pre:
        return pre
    path_use, notes = _path_use(blob, LS_RESOLVE_PATH_USE_GMP)
    mask = PRIMARY_OUTBOUND if path_use == LS_RESOLVE_PATH_USE_UNIDIRECTIONAL else GMP_PRIMARY_BIDIRECTIONAL
    hits, why = _ls_candidates(blob, mask)
    if not hits:
        return KernelChoice(
            "ls-legacy", False, EIO, "the query completes with -EIO (no SA query): "
            "rdma_resolve_route reports a route error", src, path_use=path_use,
            notes=tuple(notes + why + [f"no record has all of {flags_text(mask)}"]))
    i = hits[0]
    notes += [f"record {j} ignored (only the first match is used)" for j in hits[1:]]
    return KernelChoice("ls-legacy", True, OK, "the record is used as the SA GetResp record",
                        src, gmp=i, forward=i, inbound=i, path_use=path_use,
                        notes=tuple(notes + why))


def _multi_mask(path_use: int) -> int:
    """ib_nl_process_good_resolve_rsp (≥ 6.1): `case LS_RESOLVE_PATH_USE_ALL: mask =
    IB_PATH_PRIMARY;`, UNIDIRECTIONAL PRIMARY|OUTBOUND, GMP (and any other) 0x2B."""
    if path_use == LS_RESOLVE_PATH_USE_UNIDIRECTIONAL:
        return PRIMARY_OUTBOUND
    if path_use == LS_RESOLVE_PATH_USE_ALL:
        return IB_PATH_PRIMARY
    return GMP_PRIMARY_BIDIRECTIONAL


@dataclass
class _Filed:
    """What cma_query_handler's loop made of the records so far: the record each of
    route->path_rec, path_rec_inbound and path_rec_outbound holds, and the first record it
    could not file (one with none of GMP, INBOUND, OUTBOUND)."""

    gmp: int | None = None
    inbound: int | None = None
    outbound: int | None = None
    unfiled: int | None = None


def _file_records(blob: Blob, hits: list[int], stop_at_unfiled: bool,
                  notes: list[str]) -> _Filed:
    """cma_query_handler's loop over the matched records: `!flags || flags & IB_PATH_GMP` →
    route->path_rec, else INBOUND → path_rec_inbound, else OUTBOUND → path_rec_outbound (a
    later record of a kind overwrites the earlier one); anything else is ignored before
    ccae0447af0e and ends the loop with -EINVAL from it on (`stop_at_unfiled`)."""
    filed = _Filed()
    for i in hits:
        flags = blob.flags[i]
        if not flags or flags & IB_PATH_GMP:
            kind, slot = "route->path_rec", "gmp"
        elif flags & IB_PATH_INBOUND:
            kind, slot = "path_rec_inbound", "inbound"
        elif flags & IB_PATH_OUTBOUND:
            kind, slot = "path_rec_outbound", "outbound"
        else:
            what = f"record {i} ({flags_text(flags)}) has none of GMP, INBOUND, OUTBOUND"
            if stop_at_unfiled:
                notes.append(what)
                filed.unfiled = i
                return filed
            notes.append(what + ": ignored (no else branch before ccae0447af0e)")
            continue
        earlier = getattr(filed, slot)
        if earlier is not None:
            notes.append(f"record {i} replaces record {earlier} as {kind}")
        setattr(filed, slot, i)
    return filed


def _select_ls_multi(profile: str, src: str, stop_at_unfiled: bool, blob: Blob) -> KernelChoice:
    """The ≥ 6.1 reading of an LS response (select_ls_multi_61, select_ls_multi): up to
    RDMA_PRIMARY_PATH_MAX_REC_NUM (3) records match the path_use mask, none → -EIO; for ALL,
    cma_query_handler files them (_file_records)."""
    pre = _ls_precondition(profile, blob, src)
    if pre:
        return pre
    path_use, notes = _path_use(blob, LS_RESOLVE_PATH_USE_ALL)
    mask = _multi_mask(path_use)
    hits, why = _ls_candidates(blob, mask)
    notes += why
    if not hits:
        return KernelChoice(
            profile, False, EIO, "the query completes with -EIO (no SA query): "
            "rdma_resolve_route reports a route error", src, path_use=path_use,
            notes=tuple(notes + [f"no record has all of {flags_text(mask)}"]))
    if len(hits) > RDMA_PRIMARY_PATH_MAX_REC_NUM:
        notes += [f"record {j} ignored (only {RDMA_PRIMARY_PATH_MAX_REC_NUM} are taken)"
                  for j in hits[RDMA_PRIMARY_PATH_MAX_REC_NUM:]]
        hits = hits[:RDMA_PRIMARY_PATH_MAX_REC_NUM]
    if path_use != LS_RESOLVE_PATH_USE_ALL:
        i = hits[0]
        notes += [f"record {j} passed on but unused (callers other than the CM take rec[0])"
                  for j in hits[1:]]
        return KernelChoice(profile, True, OK, "the first record is the path", src,
                            gmp=i, forward=i, inbound=i, path_use=path_use, notes=tuple(notes))
    filed = _file_records(blob, hits, stop_at_unfiled, notes)
    if filed.unfiled is not None:
        return KernelChoice(
            profile, False, EINVAL, "cma_query_handler fails with -EINVAL: rdma_resolve_route "
            "reports a route error (Linux 6.1 and 6.2, profile ls-multi-6.1, ignore the "
            "record)", src, path_use=path_use, notes=tuple(notes))
    if filed.gmp is None:
        return KernelChoice(
            profile, False, NO_GMP, "no record is filed as route->path_rec: the route is "
            "reported resolved without a GMP path", src, forward=filed.outbound,
            inbound=filed.inbound, path_use=path_use, notes=tuple(notes))
    return KernelChoice(
        profile, True, OK, "route->path_rec from the GMP record; data-path DLIDs from the "
        "outbound/inbound records where present (RDMA/cm: Use DLID from inbound/outbound "
        "PathRecords)", src, gmp=filed.gmp,
        forward=filed.outbound if filed.outbound is not None else filed.gmp,
        inbound=filed.inbound if filed.inbound is not None else filed.gmp, path_use=path_use,
        notes=tuple(notes))


def select_ls_multi_61(blob: Blob) -> KernelChoice:
    """Linux 6.1 and 6.2 (5a3749493394): cma_query_handler's loop has no else branch, so a
    matched record with none of GMP, INBOUND, OUTBOUND is skipped, and its `if
    (!route->path_rec)` never fires (cma_resolve_ib_route allocated it)."""
    return _select_ls_multi("ls-multi-6.1", _LS_MULTI_61_SRC, False, blob)


def select_ls_multi(blob: Blob) -> KernelChoice:
    """Linux 6.3 on (ccae0447af0e): `else status = -EINVAL; if (status) goto fail;` — such a
    record fails the route (RDMA_CM_EVENT_ROUTE_ERROR, status -EINVAL)."""
    return _select_ls_multi("ls-multi", _LS_MULTI_SRC, True, blob)


# -- the seed's proposal -------------------------------------------------------------------

_PROPOSAL_SRC = sources.SEED_THREAD


def select_proposal(blob: Blob) -> KernelChoice:
    """The seed: "A successful RDMA_OPTION_IB must locate at least GMP_PRIMARY,
    FORWARD_PRIMARY(_REV), and RETURN_PRIMARY(_REV) paths in the included description. Kernel
    searches in order." A 0x2B record supplies all three; the first record providing a role
    wins. *_SECONDARY (ALTERNATE) records give the alternate paths. A record flagged both
    PRIMARY and ALTERNATE is ambiguous and skipped. The 72-byte record size of
    RDMA_OPTION_IB stays, so a ragged length is EINVAL as in ucma."""
    if blob.length is not None and blob.length % RECORD_SIZE:
        return KernelChoice(
            "proposal", False, EINVAL, "RDMA_OPTION_IB fails with EINVAL", _PROPOSAL_SRC,
            notes=(f"length {blob.length} is not a multiple of {RECORD_SIZE}",))
    notes = []
    roles: dict[str, int] = {}

    def take(role: str, i: int) -> None:
        roles.setdefault(role, i)

    for i, flags in enumerate(blob.flags):
        primary, alternate = flags & IB_PATH_PRIMARY, flags & IB_PATH_ALTERNATE
        if primary and alternate:
            notes.append(f"record {i} ({flags_text(flags)}) is both PRIMARY and ALTERNATE: skipped")
            continue
        prefix = "" if primary else "alternate_" if alternate else None
        if prefix is None:
            notes.append(f"record {i} ({flags_text(flags)}) is neither PRIMARY nor ALTERNATE: skipped")
            continue
        if flags & IB_PATH_GMP:
            take(prefix + "gmp", i)
        if flags & IB_PATH_OUTBOUND:
            take(prefix + "forward", i)
        if flags & (IB_PATH_INBOUND | IB_PATH_INBOUND_REVERSE):
            take(prefix + "inbound", i)
    missing = [name for role, name in (("gmp", "GMP_PRIMARY"), ("forward", "FORWARD_PRIMARY"),
                                       ("inbound", "RETURN_PRIMARY")) if role not in roles]
    alt = dict(alternate=roles.get("alternate_forward"), alternate_gmp=roles.get("alternate_gmp"),
               alternate_inbound=roles.get("alternate_inbound"))
    if missing:
        return KernelChoice(
            "proposal", False, EINVAL, "RDMA_OPTION_IB fails (EINVAL)", _PROPOSAL_SRC,
            gmp=roles.get("gmp"), forward=roles.get("forward"), inbound=roles.get("inbound"),
            notes=tuple(notes + [f"missing {', '.join(missing)}"]), **alt)
    return KernelChoice("proposal", True, OK, "GMP, forward and return paths located",
                        _PROPOSAL_SRC, gmp=roles["gmp"], forward=roles["forward"],
                        inbound=roles["inbound"], notes=tuple(notes), **alt)


PROFILES: dict[str, Profile] = {
    p.name: p for p in (
        Profile("ucma", "rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH)",
                "Linux 2.6.33 on", _UCMA_SRC + " (v2.6.33 on; unchanged in v6.1 and v6.3)",
                select_ucma, since=(2, 6, 33)),
        # the netlink local service came with "IB/sa: Route SA pathrecord query through
        # netlink" (4.3)
        Profile("ls-legacy", "RDMA netlink LS RESOLVE response", "Linux 4.3 to 6.0",
                _LS_LEGACY_SRC, select_ls_legacy, since=(4, 3), before=(6, 1),
                reads=LS_RESPONSE),
        Profile("ls-multi-6.1", "RDMA netlink LS RESOLVE response", "Linux 6.1 and 6.2",
                _LS_MULTI_61_SRC, select_ls_multi_61, since=(6, 1), before=(6, 3),
                reads=LS_RESPONSE, commits=(MULTI_PATH_RECORDS, INBOUND_OUTBOUND_DLID),
                directional=True),
        Profile("ls-multi", "RDMA netlink LS RESOLVE response", "Linux 6.3 on",
                _LS_MULTI_SRC, select_ls_multi, since=(6, 3), reads=LS_RESPONSE,
                commits=(MULTI_PATH_RECORDS, INBOUND_OUTBOUND_DLID, PATH_RECORDS_REFACTOR),
                directional=True),
        Profile("proposal", "RDMA_OPTION_IB as the 2009 seed thread proposed", "none (design)",
                _PROPOSAL_SRC, select_proposal, before=(0,)),
    )
}
PROFILE_NAMES = tuple(PROFILES)
# the profiles of each consumer kind, oldest kernels first
OPTVAL_PROFILES = tuple(p.name for p in PROFILES.values() if p.reads == OPTVAL)
LS_PROFILES = tuple(p.name for p in PROFILES.values() if p.reads == LS_RESPONSE)


def release_version(release: str) -> tuple[int, ...] | None:
    """(major, minor, patch) of a kernel release string as uname -r prints it
    ("6.1.0-18-amd64" → (6, 1, 0)); None when it does not start with a version."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release)
    if not m:
        return None
    return tuple(int(g) for g in m.groups(default="0"))


def profiles_of(version: tuple[int, ...]) -> list[str]:
    """The profiles that describe a kernel of this version, in PROFILES order."""
    return [p.name for p in PROFILES.values() if p.covers(version)]


def kernel_view(blob: Blob, profiles: Iterable[str] = PROFILE_NAMES) -> dict[str, KernelChoice]:
    """Each named profile's choice for the blob."""
    return {name: PROFILES[name].select(blob) for name in profiles}


def kernel_view_dict(blob: Blob) -> dict:
    """kernel_view(blob) in JSON form (interfaces.md "kernel_view": profile → choice)."""
    return {name: choice.to_dict() for name, choice in kernel_view(blob).items()}


# -- building Blob facts from the layers ------------------------------------------------------

def blob_from_array(array: PathArray, length: int | None = None) -> Blob:
    """Facts of a raw blob (rdma_set_option optval) dissected as a PathArray."""
    if length is None:
        length = len(array.records) * RECORD_SIZE + len(array.trailing)
    return Blob(tuple(int(r.flags) for r in array.records), length)


def blob_from_bytes(data: bytes) -> Blob:
    return blob_from_array(PathArray(data), len(data))


def ls_parse_error(attributes: Sequence[LsAttr]) -> str | None:
    """Why nla_parse(tb, LS_NLA_TYPE_MAX - 1, ..., ib_nl_policy) fails on these attributes,
    or None. nla_type() drops NESTED and NET_BYTEORDER but keeps RDMA_NLA_F_MANDATORY, so a
    mandatory attribute's type is above maxtype and is not checked. Leftover bytes after the
    last whole attribute only warn, and parsing stops at an attribute that runs past the end."""
    for i, attr in enumerate(attributes):
        if attr.truncated():
            break
        typ = attr.raw_type() & ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER)
        if typ > LS_NLA_PARSE_MAXTYPE:
            continue
        size = attr.value_length()
        name = LS_NLA_TYPES.get(typ, str(typ))
        if typ in LS_POLICY_MAX and size > LS_POLICY_MAX[typ]:
            return (f"attribute {i} ({name}): {size}-byte value is longer than ib_nl_policy's "
                    f"{LS_POLICY_MAX[typ]} (-ERANGE)")
        if typ in LS_POLICY_MIN and size < LS_POLICY_MIN[typ]:
            return (f"attribute {i} ({name}): {size}-byte value is shorter than ib_nl_policy's "
                    f"{LS_POLICY_MIN[typ]} (-ERANGE)")
    return None


def path_record_attributes(attributes: Sequence[LsAttr]) -> list[tuple[LsAttr, PathRecData]]:
    """The PATH_RECORD attributes (type under RDMA_NLA_TYPE_MASK) whose value decoded as a
    whole record, in order: the records of an LS response's blob. An attribute whose nla_len
    runs past the message is left out: the kernel's nla_for_each_attr() stops before it."""
    out = []
    for attr in attributes:
        if attr.truncated():
            break
        if attr.nla_type == LS_NLA_TYPE_PATH_RECORD and isinstance(attr.payload, PathRecData):
            out.append((attr, attr.payload))
    return out


def blob_from_ls_response(nlmsg_flags: int, attributes: Sequence[LsAttr],
                          path_use: int | None) -> Blob:
    """Facts of an RDMA_NL_LS RESOLVE response for the ls profiles."""
    recs = path_record_attributes(attributes)
    ls = LsContext(path_use=path_use, nlmsg_flags=nlmsg_flags,
                   parse_error=ls_parse_error(attributes),
                   nla_types=tuple(a.raw_type() for a, _ in recs))
    return Blob(tuple(int(r.flags) for _, r in recs), None, ls)


def view_packet(pkt: Packet, profiles: Iterable[str] = PROFILE_NAMES) -> dict[str, KernelChoice]:
    """Kernel view of a PathArray packet."""
    return kernel_view(blob_from_array(pkt), profiles)
