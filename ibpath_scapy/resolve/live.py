"""The SA that craft's SeedResolver asks in `ibpath resolve`: PathRecord Gets built with the
project's layers, sent through a transport, their answers read back with the same layers.

Two transports have the one method `exchange(request MAD) -> umad message | None`:

* umad.UmadTransport: a real SA (OpenSM on hardware, or on ibsim through umad2sim);
* ModelTransport: craft's SA model (craft/sa_model.py) answering the same request bytes, for
  the branches a real OpenSM never takes (a forward path that is not reversible, an SA error
  on a follow-up query). The algorithm and this module are the same in both.

An answer is checked as ibacm checks one (acmp.c acmp_sa_resp via acm.c acm_process_sa_recv:
base version 1, class version 2, the response bit, attribute PathRecord); anything else is a
BadAnswer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ..craft.resolver import seed_query
from ..craft.sa_model import SAModel
from ..layers.mad import ATTR_PATH_RECORD, MAD, METHOD_GET, METHOD_RESP, RMPP, status_text
from ..layers.sa import PathRecord, SAHeader, component_fields
from ..layers.umad import UMAD_HDR_SIZE, UMAD_TID_LOW, UserMad
from ..facts.rmpp import reassemble

ROLES = ("forward", "gmp", "return")


class SATimeout(Exception):
    """The SA never answered a query (every try timed out)."""


class BadAnswer(Exception):
    """What came back is not a PathRecord answer ibacm would take."""


@dataclass
class LiveAnswer:
    """One SA transaction: the query, the request MAD, the answer's status and records (none
    unless the status is 0), the answer's umad message. `record`: its first record, the one
    a Get returns."""

    role: str
    query: PathRecord
    request: bytes
    status: int
    records: list[PathRecord] = field(default_factory=list)
    answer: bytes = b""

    @property
    def record(self) -> PathRecord | None:
        return self.records[0] if self.records else None

    @property
    def tid(self) -> int:
        return MAD(self.request).transaction_id

    @property
    def component_mask(self) -> int:
        return int(MAD(self.request)[SAHeader].component_mask)

    def status_text(self) -> str:
        return status_text(self.status)


class LiveSA:
    """A PathSA (craft/resolver.py) over a transport: `sgid` resolves to `dgid`; `fields` (pkey,
    sl, service_id) go into every query besides the seed's own."""

    def __init__(self, transport, sgid: str, dgid: str, *, tid: int | None = None, **fields):
        self.transport, self.sgid, self.dgid, self.fields = transport, sgid, dgid, fields
        # the low 32 TID bits are the requester's (the kernel owns the high ones): a counter
        # from the process id, as ibacm counts from its own start value
        self.tid = (os.getpid() & 0xFFFF) << 16 if tid is None else tid
        self.answers: list[LiveAnswer] = []

    def query(self, *, reverse: bool = False, **fields) -> PathRecord:
        """The seed's query template (craft/resolver.py seed_query) with this SA's fields."""
        src, dst = (self.dgid, self.sgid) if reverse else (self.sgid, self.dgid)
        return seed_query(src, dst, **{**self.fields, **fields})

    @staticmethod
    def role_of(query: PathRecord, sgid: str) -> str:
        """forward, gmp (the Reversible component asked) or return (the GIDs swapped)."""
        if query.sgid != sgid:
            return "return"
        return "gmp" if "reversible" in query.fields else "forward"

    def ask(self, query: PathRecord, *, method: int = METHOD_GET) -> LiveAnswer:
        """One transaction. Raises SATimeout without an answer, BadAnswer for one that is not
        a PathRecord response."""
        self.tid = (self.tid + 1) & UMAD_TID_LOW
        request = bytes(MAD(method=method, transaction_id=self.tid) / RMPP()
                        / SAHeader(records=[query]))
        role = self.role_of(query, self.sgid)
        got = self.transport.exchange(request)
        if got is None:
            raise SATimeout(role, self.tid)
        umad = UserMad(got)
        mad = umad[MAD]
        if (mad.base_version, mad.class_version) != (1, 2) or not mad.method & METHOD_RESP \
                or mad.attribute_id != ATTR_PATH_RECORD:
            raise BadAnswer(f"the answer to the {role} query (tid 0x{self.tid:x}) is not a "
                            f"PathRecord response: {mad.summary()}")
        records = list(mad[SAHeader].records) if not mad.status and SAHeader in mad else []
        ans = LiveAnswer(role, query, request, mad.status, records, got)
        self.answers.append(ans)
        return ans


def components_text(mask: int) -> str:
    """The components a ComponentMask selects, by name."""
    return " ".join(component_fields(mask)) or "none"


@dataclass
class ModelTransport:
    """craft's SA model as the SA: answers each request MAD as OpenSM 3.3.23 would, as a umad
    message from `sa_lid` (an RMPP answer joined, as the kernel hands it over)."""

    model: SAModel
    sa_lid: int = 1
    requests: list[bytes] = field(default_factory=list)

    def exchange(self, mad: bytes) -> bytes:
        self.requests.append(mad)
        segments = self.model.respond(mad)
        answer = segments[0] if len(segments) == 1 else reassemble(segments)
        # ib_user_mad_hdr.length counts the header too (user_mad.c recv_handler)
        return bytes(UserMad(lid=self.sa_lid, length=UMAD_HDR_SIZE + len(answer))) + answer
