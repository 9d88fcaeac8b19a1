"""One crafted capture in the making: the fabric, the SA model answering on it, and the capture
builder that writes every message, with the endpoints a scenario talks about.

A scenario gets a Session and drives resolvers (resolver.py) or writes messages itself; the
seed picks the GIDs, LIDs and TIDs, so two seeds give two different but equivalent captures.
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass

from ..layers.mad import METHOD_GET
from ..layers.sa import PathRecord
from .builder import CaptureBuilder, Query
from .resolver import seed_query
from .sa_model import Fabric, Port, SAModel

ENCAPS = ("ib", "rocev2")


@dataclass
class Answer:
    """One SA transaction as written: the query, the status and records of the answer (as the
    SA model computed them) and the frames of the answer."""

    query: Query
    status: int
    records: list[PathRecord]
    frames: list[int]

    @property
    def record(self) -> PathRecord | None:
        return self.records[0] if self.records else None


class Session:
    """The capture of one scenario: `local` resolves paths to `remote` through the SA at `sm`.

    On native IB the two hosts and the SM are HCA ports with LMC 1 (two LIDs each, so a pair of
    ports has four routes, as on the OpenSM capture's fabric); on RoCEv2 the GIDs are the hosts'
    IPv4-mapped addresses, as the kernel's RoCE GID table holds them."""

    def __init__(self, path: str, *, seed: int = 0, encap: str = "ib"):
        if encap not in ENCAPS:
            raise ValueError(f"encap must be one of {', '.join(ENCAPS)}, not {encap!r}")
        self.rng = random.Random(seed)
        self.encap = encap
        net = self.rng.randrange(1, 250)
        self.local_ip, self.remote_ip, self.sm_ip = (f"192.168.{net}.{h}" for h in (24, 25, 1))
        if encap == "rocev2":
            local_gid, remote_gid, sm_gid = (f"::ffff:{ip}" for ip in
                                             (self.local_ip, self.remote_ip, self.sm_ip))
        else:
            guid = self.rng.randrange(0x1000, 0xFFFF)
            local_gid, remote_gid, sm_gid = (str(ipaddress.IPv6Address(
                f"fe80::2:c903:{guid:x}:{k:x}")) for k in (0x10, 0x20, 0x01))
        base = 2 * self.rng.randrange(1, 40)
        self.sm = Port("sm", sm_gid, base)
        self.local = Port("local", local_gid, base + 2, lmc=1)
        self.remote = Port("remote", remote_gid, base + 4, lmc=1)
        self.fabric = Fabric([self.sm, self.local, self.remote])
        self.sa = SAModel(self.fabric)
        self.b = CaptureBuilder(path, encap=encap, requester=self.local_ip, sa=self.sm_ip)
        self.b.tid = self.rng.randrange(1, 1 << 24) << 16
        self.b.lids = {self.local_ip: self.local.lid, self.sm_ip: self.sm.lid,
                       self.remote_ip: self.remote.lid}

    # -- the SA ----------------------------------------------------------------------------
    def query(self, *, reverse: bool = False, **fields) -> PathRecord:
        """A PathRecord query template from local to remote (or back, with reverse) with
        P_Key 0xFFFF and NumbPath 1 (the seed's queries), plus `fields`."""
        src, dst = (self.remote, self.local) if reverse else (self.local, self.remote)
        return seed_query(src.gid, dst.gid, **fields)

    def ask(self, query: PathRecord, *, method: int = METHOD_GET, component_mask: int | None = None,
            skip_segments: tuple[int, ...] = (), answer: bool = True) -> Answer:
        """Send a query and, unless answer is False, the SA model's answer (dropping the RMPP
        segments listed in skip_segments)."""
        q = self.b.sa_query(query, method=method, component_mask=component_mask)
        resp = self.sa.respond(q.raw)
        status = int.from_bytes(resp[0][4:6], "big")
        mask = int.from_bytes(q.raw[48:56], "big")
        records = [] if status else self.sa.paths(query, mask, method)[1]
        frames = []
        if answer:
            frames = [self.b.mad(seg, from_sa=True) for k, seg in enumerate(resp, 1)
                      if k not in skip_segments]
        return Answer(q, status, records, frames)

    def retransmit(self, answer: Answer) -> int:
        """The same request again, same TID (a requester whose timer ran out)."""
        return self.b.sa_query(PathRecord(), retransmit_of=answer.query).frame

    def answer(self, ans: Answer) -> list[int]:
        """Write the SA's answer to a query asked with answer=False (a late answer)."""
        ans.frames = [self.b.mad(seg, from_sa=True) for seg in self.sa.respond(ans.query.raw)]
        return ans.frames

    # -- the data side -----------------------------------------------------------------------
    def cm_req(self, primary: PathRecord, **kw) -> int:
        """The CM REQ the kernel sends on the connection, built from `primary`."""
        return self.b.cm_req(primary, src=self.local_ip, dst=self.remote_ip, **kw)

    def close(self) -> None:
        self.b.close()
