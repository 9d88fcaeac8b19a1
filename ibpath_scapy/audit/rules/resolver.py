"""Resolver rules (audit-rules.md "Resolver rules"): one resolution at a time.

The contract is the seed's (linux-rdma 2009, "Re: [PATCH 1/2] rdma/cm: support
option to allow manually setting IB path", Jason Gunthorpe): "The rdma_getaddrinfo resolver would
ask the SA for a FORWARD path, if the result comes back with reversible set then it just passes it
to the kernel as a single: GMP_PRIMARY | FORWARD_PRIMARY | RETURN_PRIMARY_REV. Otherwise the
resolver does two more queries to get a GMP reversible path and a return path, and the kernel gets
3 records." and "this resolver should be able to construct this data blob: FORWARD_PRIMARY,
RETURN_PRIMARY, GMP_PRIMARY | FORWARD_PRIMARY | RETURN_PRIMARY_REV" ("Kernel searches in order").

How a resolution is read here:

- A *side* is one requester's view: its local GID is the SGID of its first query (audit-rules.md
  "Terms"), and only its own transactions count for its blobs. A capture taken where both ends
  resolve holds two sides in one resolution; the remote's forward query is not our return query.
- A *hand-over* is a blob the resolver gave the kernel: a blob frame (rdma_set_option optval) or a
  netlink LS RESOLVE response with records and without RDMA_NL_LS_F_ERR. It belongs to the side
  whose local GID it starts from (SGID of its first record; DGID for an INBOUND record). Blobs
  given with ``--blob`` are not frames of the capture and have no place in its time line, so
  these rules leave them to the CM rules.
- The *forward query* for a hand-over is the side's last query SGID = local, DGID = remote that
  leaves reversibility open (no Reversible component, or the component with bit 0, which OpenSM
  treats as "don't care", wire-formats.md §8) answered with status 0 and records before it; where
  there is none, the last such query that asked Reversible = 1 (the kernel's own
  rdma_resolve_route query, wire-formats.md §6.4). The forward path *came back reversible* when
  its answer holds a reversible record (the resolver can hand that one over as 0x2B).
- The *follow-ups* are the GMP query (Reversible component set and bit 1, either direction) and
  the return query (SGID = remote, DGID = local), sent by the same requester after the forward
  answer and before the hand-over.
- An LS response to a request with path_use UNIDIRECTIONAL needs one forward path only (UD, "1
  pathrecord", wire-formats.md §6.2); RES-NO-FOLLOWUP and RES-BLOB-SHAPE leave it alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...facts.records import PATH_RECORD_FIELDS
from ...layers.mad import status_text
from ...layers.pathdata import (
    GMP_PRIMARY_BIDIRECTIONAL,
    IB_PATH_GMP,
    IB_PATH_INBOUND,
    IB_PATH_INBOUND_REVERSE,
    IB_PATH_OUTBOUND,
    IB_PATH_PRIMARY,
    flags_text,
)
from ...layers.netlink import LS_RESOLVE_PATH_USE_UNIDIRECTIONAL
from ...model import sources
from ..model import rule
from ..replay import Resolution, Transaction

SEED = sources.SEED_THREAD

# The reversed storage format of a _REV record swaps the endpoints (seed: "The _REV notation
# indicates the path is stored in reversed format").
_SWAP = {"sgid": "dgid", "dgid": "sgid", "slid": "dlid", "dlid": "slid"}


# -- reading a resolution ----------------------------------------------------------------------

@dataclass
class Handover:
    rec: dict
    frame: int
    records: list[dict]  # blob record dicts: flags, reserved, path_record
    what: str
    unidirectional: bool = False

    @property
    def local(self) -> str | None:
        if not self.records:
            return None
        r = self.records[0]
        pr = r["path_record"]
        return pr["dgid"] if r["flags"] & IB_PATH_INBOUND else pr["sgid"]


@dataclass
class Side:
    local: str
    remote: str
    transactions: list[Transaction] = field(default_factory=list)
    handovers: list[Handover] = field(default_factory=list)

    def is_forward(self, t: Transaction) -> bool:
        q = t.query
        return bool(q) and q.sgid == self.local and q.dgid == self.remote

    def is_return(self, t: Transaction) -> bool:
        q = t.query
        return bool(q) and q.sgid == self.remote and q.dgid == self.local

    def forward_open(self) -> list[Transaction]:
        return [t for t in self.transactions if self.is_forward(t) and not t.asks_reversible()]

    def gmp_queries(self) -> list[Transaction]:
        return [t for t in self.transactions if t.asks_reversible()]

    def return_queries(self) -> list[Transaction]:
        return [t for t in self.transactions if self.is_return(t)]

    def forward_answer(self, before: int) -> Transaction | None:
        """The forward query whose answer the hand-over at frame `before` rests on."""
        def ok(t):
            return t.answered and t.completing_frame < before and not t.status and t.records
        fwd = [t for t in self.forward_open() if ok(t)]
        if not fwd:
            fwd = [t for t in self.transactions if self.is_forward(t) and t.asks_reversible() and ok(t)]
        return max(fwd, key=lambda t: t.completing_frame) if fwd else None


def first_frame(t: Transaction) -> int:
    return t.first_frame


def reversible_open_answer(t: Transaction) -> bool:
    """A query that leaves reversibility open, answered with status 0 and a reversible
    record: what RES-REDUNDANT-QUERIES needs a resolution to hold (as its forward query)
    before it can find anything there (its only_if_transaction: engine.run_rules reads no
    other resolution's transactions back for it)."""
    return bool(t.answered and not t.status and not t.asks_reversible()
                and any(r["reversible"] for r in t.records))


def handovers(res: Resolution) -> list[Handover]:
    out = []
    for b in res.blobs:
        if b.get("blob_records"):
            out.append(Handover(b, b["frame"], b["blob_records"], f"blob frame {b['frame']}"))
    for r in res.ls_responses:
        if r.get("blob_records") and not r.get("ls", {}).get("error"):
            uni = r["ls"].get("request_path_use") == LS_RESOLVE_PATH_USE_UNIDIRECTIONAL
            out.append(Handover(r, r["frame"], r["blob_records"],
                                f"LS response frame {r['frame']}", uni))
    return sorted(out, key=lambda h: h.frame)


def sides(res: Resolution) -> list[Side]:
    """The resolution split by requester (see the module docstring)."""
    by_local: dict[str, Side] = {}
    groups: dict[str | None, list[Transaction]] = {}
    for t in sorted(res.transactions, key=first_frame):
        groups.setdefault(t.requester, []).append(t)
    for ts in groups.values():
        q = ts[0].query
        side = by_local.setdefault(q["sgid"], Side(q["sgid"], q["dgid"]))
        side.transactions += ts
    for side in by_local.values():
        side.transactions.sort(key=first_frame)
    for h in handovers(res):
        local = h.local
        if local not in by_local:
            remote = res.remote if local == res.local else res.local
            by_local[local] = Side(local, remote)
        by_local[local].handovers.append(h)
    return list(by_local.values())


def handover_sides(res: Resolution) -> list[Side]:
    """sides(res) for the rules that judge hand-overs: none when the resolution has no blob
    and no LS response (an SA storm's resolutions have none, and splitting them is most of
    those rules' cost there)."""
    if not res.blobs and not res.ls_responses:
        return []
    return sides(res)


def same_path(a: dict, b: dict) -> bool:
    return all(a[f] == b[f] for f in PATH_RECORD_FIELDS)


def reversed_path(pr: dict) -> dict:
    return {f: pr[_SWAP.get(f, f)] for f in PATH_RECORD_FIELDS}


def differences(a: dict, b: dict) -> list[str]:
    return [f for f in PATH_RECORD_FIELDS if a[f] != b[f]]


def _frames(*ts: Transaction) -> list[int]:
    out = []
    for t in ts:
        out += t.frames
    return out


def _missing_followups(side: Side, fwd: Transaction, h: Handover) -> list[str]:
    lo, hi = fwd.completing_frame, h.frame
    gmp = [t for t in side.gmp_queries() if lo < first_frame(t) < hi]
    ret = [t for t in side.return_queries() if lo < first_frame(t) < hi]
    missing = []
    if not gmp:
        missing.append("a reversible GMP path (Reversible component, bit 1)")
    if not ret:
        missing.append("the return path (SGID and DGID swapped)")
    return missing


def _no_followup(side: Side, h: Handover) -> Transaction | None:
    """The forward query whose non-reversible answer was not followed up before h, or None."""
    if h.unidirectional:
        return None
    fwd = side.forward_answer(h.frame)
    if fwd is None or any(r["reversible"] for r in fwd.records):
        return None
    return fwd if _missing_followups(side, fwd, h) else None


# -- rules -------------------------------------------------------------------------------------

@rule("RES-NO-FOLLOWUP", "error", "resolution", SEED)
def no_followup(subject):
    """The forward path came back not reversible, and the resolver did not query both a
    reversible GMP path and the return path before handing over a blob.

    The seed: "Otherwise the resolver does two more queries to get a GMP reversible path and a
    return path". A follow-up is a query with the Reversible component set and bit 1 (the GMP
    query) and a query with the GIDs swapped (the return path), both from the requester of the
    forward query, after the forward answer and before the blob or LS response. A forward query
    with the Reversible component and bit 0 is still the forward query (OpenSM: "don't care").
    Frames: the forward query and its answer, and the hand-over.
    """
    res, _options = subject
    for side in handover_sides(res):
        for h in side.handovers:
            fwd = _no_followup(side, h)
            if fwd is None:
                continue
            missing = _missing_followups(side, fwd, h)
            yield _frames(fwd) + [h.frame], (
                f"forward path (query frame {first_frame(fwd)}, answer frame "
                f"{fwd.completing_frame}) is not reversible, but the resolver handed over "
                f"{h.what} without asking the SA for {' or '.join(missing)}")


no_followup.only_with_handovers = True  # nothing to judge without a blob or LS response


@rule("RES-REDUNDANT-QUERIES", "warning", "resolution", SEED)
def redundant_queries(subject):
    """The forward path came back reversible, yet the resolver still made GMP or return queries.

    The seed: "if the result comes back with reversible set then it just passes it to the kernel
    as a single: GMP_PRIMARY | FORWARD_PRIMARY | RETURN_PRIMARY_REV". Counted: GMP queries
    (Reversible component, bit 1) and return queries (GIDs swapped) from the same requester after
    the reversible forward answer and before the next hand-over or the next forward query.
    """
    res, _options = subject
    for side in sides(res):
        fwds = side.forward_open()
        for k, fwd in enumerate(fwds):
            if not reversible_open_answer(fwd):
                continue
            lo = fwd.completing_frame
            ends = [h.frame for h in side.handovers if h.frame > lo]
            ends += [first_frame(t) for t in fwds[k + 1:] if first_frame(t) > lo]
            hi = min(ends, default=float("inf"))
            extra = [t for t in side.transactions
                     if t is not fwd and lo < first_frame(t) < hi
                     and (t.asks_reversible() or side.is_return(t))]
            if extra:
                kinds = sorted({"GMP" if t.asks_reversible() else "return" for t in extra})
                yield _frames(fwd, *extra), (
                    f"forward path (answer frame {lo}) is reversible, yet the resolver made "
                    f"{len(extra)} more {' and '.join(kinds)} quer{'ies' if len(extra) > 1 else 'y'} "
                    f"(frames {', '.join(str(first_frame(t)) for t in extra)})")


redundant_queries.only_if_transaction = reversible_open_answer


def _matches(rec: dict, answers: list[dict], reverse: bool = False) -> bool:
    pr = rec["path_record"]
    want = reversed_path(pr) if reverse else pr
    return any(same_path(want, a) for a in answers)


def _answers(ts: list[Transaction]) -> list[dict]:
    return [r for t in ts if t.answered and not t.status for r in t.records]


def _shape_problems(side: Side, fwd: Transaction, h: Handover) -> list[str]:
    recs = h.records
    if any(r["reversible"] for r in fwd.records):
        good = [r for r in fwd.records if r["reversible"]]
        if any(r["flags"] == GMP_PRIMARY_BIDIRECTIONAL and _matches(r, good) for r in recs):
            return []
        return [f"the forward path (answer frame {fwd.completing_frame}) is reversible: expected "
                "a GMP|PRIMARY|BIDIRECTIONAL (0x2b) record built from it"]
    lo, hi = fwd.completing_frame, h.frame
    gmp_ans = _answers([t for t in side.gmp_queries() if lo < first_frame(t) < hi])
    ret_ans = _answers([t for t in side.return_queries() if lo < first_frame(t) < hi])
    problems = []

    def role(name, flag_ok, content_ok, content_what):
        cands = [i for i, r in enumerate(recs) if flag_ok(r["flags"])]
        if not cands:
            problems.append(f"no {name} record")
            return None
        good = [i for i in cands if content_ok(recs[i])]
        if not good:
            problems.append(f"the {name} record{'s' if len(cands) > 1 else ''} "
                            f"({', '.join(map(str, cands))}) {content_what}")
            return None
        return good[0]

    primary_outbound = IB_PATH_PRIMARY | IB_PATH_OUTBOUND
    fwd_i = role("FORWARD_PRIMARY (PRIMARY|OUTBOUND, no GMP)",
                 lambda f: f & primary_outbound == primary_outbound and not f & IB_PATH_GMP,
                 lambda r: _matches(r, fwd.records),
                 f"not the forward path of answer frame {fwd.completing_frame}")
    ret_i = role("RETURN_PRIMARY (PRIMARY with INBOUND or INBOUND_REVERSE, no GMP)",
                 lambda f: f & IB_PATH_PRIMARY and f & (IB_PATH_INBOUND | IB_PATH_INBOUND_REVERSE)
                 and not f & (IB_PATH_GMP | IB_PATH_OUTBOUND),
                 lambda r: not ret_ans or _matches(r, ret_ans, bool(r["flags"] & IB_PATH_INBOUND_REVERSE)
                                                   and not r["flags"] & IB_PATH_INBOUND),
                 "not the return path the SA returned (INBOUND as returned, INBOUND_REVERSE "
                 "with the endpoints swapped)")
    gmp_i = role("GMP_PRIMARY (GMP|PRIMARY)",
                 lambda f: f & (IB_PATH_GMP | IB_PATH_PRIMARY) == IB_PATH_GMP | IB_PATH_PRIMARY,
                 lambda r: r["path_record"]["reversible"] == 1
                 and (not gmp_ans or _matches(r, gmp_ans)),
                 "not a reversible GMP path the SA returned")
    if gmp_i is not None and recs[gmp_i]["flags"] & (IB_PATH_OUTBOUND | IB_PATH_INBOUND_REVERSE):
        late = [name for name, i in (("FORWARD_PRIMARY", fwd_i), ("RETURN_PRIMARY", ret_i))
                if i is not None and i > gmp_i]
        if late:
            problems.append(
                f"{' and '.join(late)} after the {flags_text(recs[gmp_i]['flags'])} record "
                f"{gmp_i}: a kernel searching in order takes the forward/return path from the "
                "GMP record (the compatible layout puts them before it)")
    return problems


@rule("RES-BLOB-SHAPE", "error", "resolution", SEED)
def blob_shape(subject):
    """The blob does not match the outcome of the forward query.

    Reversible forward path → a GMP|PRIMARY|BIDIRECTIONAL (0x2B) record built from it (records
    before it are tolerated: the seed's compatible layout). Not reversible → a FORWARD_PRIMARY
    record (PRIMARY|OUTBOUND) holding the forward path, a RETURN_PRIMARY record (PRIMARY|INBOUND
    holding the return path as the SA returned it, or PRIMARY|INBOUND_REVERSE holding it with
    the endpoints swapped) and a GMP_PRIMARY record holding a reversible path (the GMP answer
    where one is in the capture); when the GMP record also carries OUTBOUND/INBOUND_REVERSE
    (0x2B), the forward and return records must come before it, since "Kernel searches in
    order" (seed) and the compatible layout is "FORWARD_PRIMARY, RETURN_PRIMARY, GMP_PRIMARY |
    FORWARD_PRIMARY | RETURN_PRIMARY_REV". A blob RES-NO-FOLLOWUP reports is not reported again.
    """
    res, _options = subject
    for side in handover_sides(res):
        for h in side.handovers:
            if h.unidirectional:
                continue
            fwd = side.forward_answer(h.frame)
            if fwd is None or _no_followup(side, h) is not None:
                continue
            problems = _shape_problems(side, fwd, h)
            if problems:
                layout = ", ".join(flags_text(r["flags"]) for r in h.records)
                outcome = "reversible" if any(r["reversible"] for r in fwd.records) else "not reversible"
                yield _frames(fwd) + [h.frame], (
                    f"{h.what} [{layout}] does not match the outcome (forward path {outcome}): "
                    + "; ".join(problems))


blob_shape.only_with_handovers = True  # nothing to judge without a blob or LS response


def _sa_answers_before(res: Resolution, frame: int) -> list[tuple[Transaction, dict]]:
    return [(t, r) for t in res.transactions
            if t.answered and not t.status and t.completing_frame < frame for r in t.records]


@rule("RES-BLOB-MISMATCH", "error", "resolution", sources.CATALOGUE + " (resolvers pass SA "
      "data through, in MAD format); " + sources.ACM_VERBATIM)
def blob_mismatch(subject):
    """A blob record's 64 bytes are not byte-identical to a PathRecord the SA returned in this
    resolution.

    The resolver must pass SA data through, in MAD format. Compared: every canonical PathRecord
    field (interfaces.md: service_id through preference, 21 fields, all 512 bits but the reserved
    ones; reserved bits set are reported by the decoder and BLOB-NOT-MAD-FORMAT) against every
    record of every answer (status 0) of this resolution completed before the blob. A record
    flagged INBOUND_REVERSE without OUTBOUND may hold an SA record in the seed's reversed format
    (SGID/DGID and SLID/DLID swapped). Judged only where the capture holds such answers: a blob
    without SA traffic in the capture has nothing to be compared with. Blob frames and LS
    responses alike; frames: the hand-over and the answer closest to the record.
    """
    res, _options = subject
    for h in handovers(res):
        answers = _sa_answers_before(res, h.frame)
        if not answers:
            continue
        for i, rec in enumerate(h.records):
            rev = bool(rec["flags"] & IB_PATH_INBOUND_REVERSE) and not rec["flags"] & IB_PATH_OUTBOUND
            sa = [a for _, a in answers]
            if _matches(rec, sa) or (rev and _matches(rec, sa, reverse=True)):
                continue
            pr = rec["path_record"]
            t, closest = min(answers, key=lambda ta: len(differences(pr, ta[1])))
            diff = differences(pr, closest)
            detail = ", ".join(f"{f} {pr[f]} (SA {closest[f]})" for f in diff[:6])
            yield [h.frame, t.completing_frame], (
                f"{h.what} record {i} ({flags_text(rec['flags'])}) is not a PathRecord the SA "
                f"returned; closest is in answer frame {t.completing_frame}: {detail}"
                + (" ..." if len(diff) > 6 else ""))


blob_mismatch.only_with_handovers = True  # nothing to judge without a blob or LS response


@rule("RES-STALE-BLOB", "warning", "resolution", sources.CATALOGUE + "; " + sources.SA_STATUS)
def stale_blob(subject):
    """A blob handed to the kernel after the SA answered with a non-zero status for that
    resolution.

    For each kind of query the blob's requester made (forward, GMP, return: same GIDs and
    reversibility), the latest answer before the blob counts: a non-zero status there means the
    blob cannot come from that answer (a later successful retry makes it current again).
    """
    res, _options = subject
    for side in handover_sides(res):
        for h in side.handovers:
            latest: dict[tuple, Transaction] = {}
            for t in side.transactions:
                if t.answered and t.completing_frame < h.frame:
                    q = t.query
                    key = (q["sgid"], q["dgid"], t.asks_reversible())
                    if key not in latest or latest[key].completing_frame < t.completing_frame:
                        latest[key] = t
            bad = sorted((t for t in latest.values() if t.status), key=lambda t: t.completing_frame)
            if bad:
                what = "; ".join(f"frame {t.completing_frame}: status 0x{t.status:04x} "
                                 f"{status_text(t.status, 3)}" for t in bad)
                yield [t.completing_frame for t in bad] + [h.frame], (
                    f"{h.what} handed over after the SA answered with an error ({what})")


stale_blob.only_with_handovers = True  # nothing to judge without a blob or LS response
