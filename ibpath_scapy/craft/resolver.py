"""Two path resolvers, modelled on what they send and what they hand the kernel.

* SeedResolver: the 2009 linux-rdma design (the 2009 linux-rdma thread, wire-formats.md §7.4): ask the SA
  for the forward path; reversible → one GMP|PRIMARY|BIDIRECTIONAL (0x2B) record; otherwise ask
  for a reversible GMP path (Reversible component, bit 1) and the return path (GIDs swapped)
  and hand three records, in the seed's own layout (GMP_PRIMARY, FORWARD_PRIMARY,
  RETURN_PRIMARY) or the compatibility layout (FORWARD_PRIMARY, RETURN_PRIMARY, then 0x2B so
  older kernels fall through to the last). With APM it asks for a second route of each and
  adds the *_SECONDARY (ALTERNATE) records.
* Ibacm: what ibacm does (wire-formats.md §7.1-7.2): one SA Get with DGID|SGID|SLID|P_Key, the
  record stored verbatim, one record handed back, flags by path_use (UNIDIRECTIONAL →
  PRIMARY|OUTBOUND 0x0A, GMP or ALL → 0x2B); an SA failure → an LS response with
  RDMA_NL_LS_F_ERR.

Each returns the records it hands over; the caller decides where they go (a netlink LS
response, a rdma_set_option blob) so a scenario can damage them on the way.

SeedResolver asks its SA through two calls (PathSA): a craft Session answers with the SA model
into a crafted capture, and ``ibpath resolve`` (resolve/live.py) answers with a real SA through
libibumad. The algorithm is this one class in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..layers.netlink import LS_RESOLVE_PATH_USE_UNIDIRECTIONAL
from ..layers.pathdata import (
    IB_PATH_ALTERNATE,
    IB_PATH_BIDIRECTIONAL,
    IB_PATH_GMP,
    IB_PATH_INBOUND,
    IB_PATH_OUTBOUND,
    IB_PATH_PRIMARY,
)
from ..layers.sa import PathRecord


GMP_PRIMARY = IB_PATH_GMP | IB_PATH_PRIMARY                                   # 0x03
FORWARD_PRIMARY = IB_PATH_PRIMARY | IB_PATH_OUTBOUND                          # 0x0A
RETURN_PRIMARY = IB_PATH_PRIMARY | IB_PATH_INBOUND                            # 0x12
GMP_BIDIR = IB_PATH_GMP | IB_PATH_PRIMARY | IB_PATH_BIDIRECTIONAL             # 0x2B
GMP_BIDIR_SECONDARY = IB_PATH_GMP | IB_PATH_ALTERNATE | IB_PATH_BIDIRECTIONAL  # 0x2D
FORWARD_SECONDARY = IB_PATH_ALTERNATE | IB_PATH_OUTBOUND                      # 0x0C
RETURN_SECONDARY = IB_PATH_ALTERNATE | IB_PATH_INBOUND                        # 0x14
GMP_SECONDARY = IB_PATH_GMP | IB_PATH_ALTERNATE                               # 0x05

Records = list[tuple[int, PathRecord]]
SEED_PKEY = 0xFFFF  # the default partition the seed's queries name


def seed_query(src_gid: str, dst_gid: str, **fields) -> PathRecord:
    """The seed's PathRecord query template from src_gid to dst_gid: SGID, DGID, P_Key 0xFFFF
    and NumbPath 1 (ComponentMask DGID|SGID|NUMB_PATH|PKEY, 0x300C, computed from the fields
    set), plus `fields` (reversible=1 adds the Reversible component: 0x380C)."""
    base = dict(sgid=src_gid, dgid=dst_gid, pkey=SEED_PKEY, numb_path=1)
    base.update(fields)
    return PathRecord(**base)


class SAAnswer(Protocol):
    """One SA transaction as a resolver reads it (craft.session.Answer, resolve.live's)."""

    status: int
    records: list
    record: PathRecord | None


class PathSA(Protocol):
    """What SeedResolver asks: a query template (forward, or with reverse=True the return
    direction, SGID and DGID swapped) and an SA transaction whose answer has `status`,
    `records` and `record` (craft Session, resolve.live.LiveSA)."""

    def query(self, *, reverse: bool = False, **fields) -> PathRecord: ...

    def ask(self, query: PathRecord, *, method: int = ...) -> SAAnswer: ...


@dataclass
class Resolution:
    """What a resolver did: its SA transactions (forward first) and the records it hands over
    (None when it gives up)."""

    answers: list[SAAnswer] = field(default_factory=list)
    records: Records | None = None

    @property
    def forward(self) -> PathRecord | None:
        return self.answers[0].record if self.answers else None

    def gmp(self) -> PathRecord | None:
        """The path the CM REQ travels on: the record flagged GMP and PRIMARY."""
        for flags, rec in self.records or ():
            if flags & GMP_PRIMARY == GMP_PRIMARY:
                return rec
        return None

    def alternate(self) -> PathRecord | None:
        for flags, rec in self.records or ():
            if flags & IB_PATH_GMP and flags & IB_PATH_ALTERNATE:
                return rec
        return None


class SeedResolver:
    """The seed's algorithm. `compat` picks the compatibility layout, `apm` adds alternates,
    `followups=False` is the faulty resolver that never asks the follow-up queries (one 0x2B
    record whatever the answer: ``ibpath resolve --layout single``). `split` hands three
    records even for a reversible forward answer (``--layout seed``): the return path is asked
    (GIDs swapped) and the reversible forward answer is the GMP record, as it would be of a
    Reversible query."""

    def __init__(self, s: PathSA, *, compat: bool = True, apm: bool = False,
                 followups: bool = True, split: bool = False):
        self.s, self.compat, self.apm, self.followups = s, compat, apm, followups
        self.split = split

    def _get(self, res: Resolution, query: PathRecord) -> PathRecord | None:
        ans = self.s.ask(query)
        res.answers.append(ans)
        return ans.record

    def _two(self, res: Resolution, query: PathRecord) -> list[PathRecord]:
        """A primary and a second route (APM): GetTable with NumbPath 2."""
        query.numb_path = 2
        ans = self.s.ask(query, method=0x12)
        res.answers.append(ans)
        return ans.records[:2]

    def resolve(self) -> Resolution:
        s, res = self.s, Resolution()
        ask = self._two if self.apm else (lambda r, q: [p] if (p := self._get(r, q)) else [])
        fwd = ask(res, s.query())
        if not fwd:
            return res
        reversible = fwd[0].reversible and (not self.apm or all(p.reversible for p in fwd))
        if reversible and not self.split:
            res.records = [(GMP_BIDIR, fwd[0])]
            if self.apm and len(fwd) > 1:
                res.records.append((GMP_BIDIR_SECONDARY, fwd[1]))
            return res
        if not self.followups:
            res.records = [(GMP_BIDIR, fwd[0])]
            return res
        # a reversible forward answer is already the reversible GMP path the query would give
        gmp = fwd if reversible else ask(res, s.query(reversible=1))
        ret = ask(res, s.query(reverse=True))
        if not gmp or not ret:
            return res
        if self.compat:
            res.records = [(FORWARD_PRIMARY, fwd[0]), (RETURN_PRIMARY, ret[0]), (GMP_BIDIR, gmp[0])]
        else:
            res.records = [(GMP_PRIMARY, gmp[0]), (FORWARD_PRIMARY, fwd[0]), (RETURN_PRIMARY, ret[0])]
        if self.apm:
            for flags, paths in ((FORWARD_SECONDARY, fwd), (RETURN_SECONDARY, ret),
                                 (GMP_SECONDARY, gmp)):
                if len(paths) > 1:
                    res.records.append((flags, paths[1]))
        return res


class Ibacm:
    """ibacm's acmp provider answering the kernel's netlink RESOLVE requests, on a craft
    Session `s` (its endpoints and its SA model)."""

    def __init__(self, s):
        self.s = s

    def query(self) -> PathRecord:
        """acmp_record_path_addr: P_Key, DGID, SLID and SGID only (no NumbPath, no
        Reversible): comp_mask DGID|SGID|SLID|PKEY = 0x202C."""
        s = self.s
        return PathRecord(sgid=s.local.gid, dgid=s.remote.gid, slid=s.local.lid, pkey=0xFFFF)

    def resolve(self, path_use: int) -> Resolution:
        res = Resolution()
        ans = self.s.ask(self.query())
        res.answers.append(ans)
        if ans.record is not None:
            flags = FORWARD_PRIMARY if path_use == LS_RESOLVE_PATH_USE_UNIDIRECTIONAL else GMP_BIDIR
            res.records = [(flags, ans.record)]
        return res

    def serve(self, seq: int, path_use: int, **request) -> Resolution:
        """The whole exchange: the kernel's LS request, ibacm's SA query, its LS response
        (RDMA_NL_LS_F_ERR when the SA gave nothing)."""
        s = self.s
        s.b.ls_request(seq, path_use=path_use, sgid=s.local.gid, dgid=s.remote.gid, **request)
        res = self.resolve(path_use)
        if res.records is None:
            s.b.ls_response(seq, [], error=True)
        else:
            s.b.ls_response(seq, res.records)
        return res
