"""What a process did, as a time line the process rules read (rules/process.py): the records
of `ibpath record` (facts.process: ucma commands, ACM messages) and the path arrays they
handed over (blob frames), put in order per cm_id and per ACM exchange.

- A *cm_id* is (pid, fd, id): ucma ids are per open rdma_cm file (ucma.c ctx_idr), and an id
  is given again after DESTROY_ID, so each CREATE_ID starts a new time line. Its *state* is
  the kernel's, as far as the capture shows it: RESOLVE_ADDR/RESOLVE_IP move it to
  "addr_query", the ADDR_RESOLVED event to "addr_resolved", an accepted SET_OPTION(IB_PATH)
  or the ROUTE_RESOLVED event to "route_resolved" (cma.c rdma_set_ib_path, cma_work_handler);
  ADDR_ERROR and ROUTE_ERROR step back.
- A *hand-over* is a SET_OPTION(IB, IB_PATH) with the blob frame the recorder writes right
  after it (its optval), the state it met and the ACM exchange whose answer it came from.
- A *service resolution* (Linux 6.17, rdma_resolve_ib_service) is a RESOLVE_IB_SERVICE, the
  kernel's SubnAdmGetTable(ServiceRecord) when the wire is in the same input (the first
  ServiceRecord query sent after the command and before its event; the kernel sends one, with
  no retry of its own: sa_query.c ib_sa_service_rec_get), the ADDRINFO_RESOLVED or
  ADDRINFO_ERROR event, and the QUERY(IB_SERVICE) calls that read the records back (librdmacm
  asks room for 6, then again for the kernel's count: cma.c ucma_query_ib_service). The
  command moves the cm_id (bound: ADDR_BOUND) to "addrinfo_query", ADDRINFO_RESOLVED to
  "addrinfo_resolved", ADDRINFO_ERROR back to "addr_bound" (cma.c rdma_resolve_ib_service,
  cma_query_ib_service_handler). BIND is not decoded (no layer): its cm_id is not known.
- An *ACM exchange* is a RESOLVE request and the response read on the same socket with the
  same tid (librdmacm acm.c ucma_ib_resolve: one send, one recv, no timeout); what the
  process did next with the cm_id (a hand-over, or RESOLVE_ROUTE: the kernel's own route).
  PERF_QUERY and EP_QUERY (ib_acme's, through libacm) resolve nothing and are left out.

Crafted captures carry no packet comments: pid and fd are then None and every record counts
as one process's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..facts import librdmacm
from ..facts.kernelview import Blob, select_ucma
from ..layers.pathdata import RECORD_SIZE
from ..facts.process import AcmFrame, UcmaFrame
from ..layers.acm import ACM_OP_MASK, ACM_OP_RESOLVE
from ..layers.mad import METHOD_GET_TABLE
from ..layers.ucma import (ADDRESS_FAMILIES, AF_IB, QUERY_OPTIONS, RDMA_USER_CM_QUERY_IB_SERVICE,
                           RDMA_USER_CM_QUERY_PATH)
PATH_QUERY = QUERY_OPTIONS[RDMA_USER_CM_QUERY_PATH]
SERVICE_QUERY = QUERY_OPTIONS[RDMA_USER_CM_QUERY_IB_SERVICE]
ADDRINFO_EVENTS = ("ADDRINFO_RESOLVED", "ADDRINFO_ERROR")

# the states of a cm_id the kernel accepts SET_OPTION(IB_PATH) in, or may (the ADDR_RESOLVED
# event may not have been read yet when the call is made)
SET_PATH_STATES = ("addr_resolved", "addr_query")


@dataclass
class AcmExchange:
    """An ACM RESOLVE and its answer (None: none in the capture)."""

    request: AcmFrame
    response: AcmFrame | None = None
    followed_by: UcmaFrame | None = None  # the process's next route step (SET_OPTION, RESOLVE_ROUTE)

    @property
    def frames(self) -> list[int]:
        return [self.request.frame] + ([self.response.frame] if self.response else [])

    def _read(self) -> list:
        """The answer's entries librdmacm reads ((length - 16) / 72 of them)."""
        r = self.response
        return list(r.entries or ())[:librdmacm.entries_read(r.acm.length)]

    def unusable(self) -> str | None:
        """Why librdmacm takes no route from the answer (librdmacm.no_route), or None."""
        r = self.response
        if r is None:
            return "no answer"
        why = librdmacm.no_route(r.acm.status, r.acm.length, r.size,
                                 [e.type for e in self._read()])
        if why is not None and why.startswith("status"):
            why = f"status {r.acm.status_name or r.acm.status}"
        return why

    def route(self) -> list | None:
        """The entries librdmacm copies into ai_route, the array it hands the kernel (None:
        no route, the kernel resolves it)."""
        if self.unusable() is not None:
            return None
        read = self._read()
        return [read[i] for i in librdmacm.ai_route([e.type for e in read])]


@dataclass
class HandOver:
    """A SET_OPTION(IB, IB_PATH), its path array and where it came from."""

    command: UcmaFrame
    state: str
    blob: object | None = None  # its BlobFrame
    acm: AcmExchange | None = None

    @property
    def frames(self) -> list[int]:
        return [self.command.frame] + ([self.blob.frame] if self.blob is not None else [])

    def verdict(self) -> str | None:
        """What the kernel answered: "0" or "-ERRNO" (the blob frame's comment, else the
        write's errno), or None when the capture does not say."""
        if self.blob is not None and self.blob.blob.set_option_result is not None:
            return self.blob.blob.set_option_result
        call = self.command.call
        if call is None or call.rc is None:
            return None
        return f"-{call.errno}" if call.rc < 0 else "0"


def service_keys(rec: UcmaFrame) -> str:
    """What a RESOLVE_IB_SERVICE asks by, as its flags say: 'name "..."', 'ServiceID 0x...',
    both, or '' (flags 0)."""
    keys = []
    if "NAME" in (rec.service_flags or ()):
        keys.append(f'name "{rec.service_name}"')
    if "ID" in (rec.service_flags or ()):
        keys.append(f"ServiceID 0x{rec.service_id or 0:x}")
    return ", ".join(keys)


@dataclass
class ServiceResolution:
    """One RESOLVE_IB_SERVICE and what followed it: the kernel's SA GetTable(ServiceRecord)
    (a replay Transaction or its ClosedTransaction; None when the wire is not in the input),
    the ADDRINFO event and the QUERY(IB_SERVICE) readbacks, in order."""

    command: UcmaFrame
    cm_name: str
    sa: object | None = None
    event: UcmaFrame | None = None
    queries: list[UcmaFrame] = field(default_factory=list)

    @property
    def name(self) -> str:
        """What its ladder is called: the cm_id, the service asked for and the frame of the
        command (a program may ask one cm_id for one service twice: two resolutions)."""
        return (f"IB service of {self.cm_name}: {service_keys(self.command) or 'no key'}, "
                f"frame {self.command.frame}")

    @property
    def frames(self) -> list[int]:
        """Its commands' frames and its SA transaction's."""
        out = [self.command.frame] + (self.sa.frames if self.sa is not None else [])
        out += [self.event.frame] if self.event is not None else []
        return sorted(out + [q.frame for q in self.queries])

    def sa_answer(self) -> tuple[int, int] | None:
        """(MAD status, ServiceRecords) of the SA's whole answer (RMPP reassembled), or None
        when the input holds no answered SA query of this resolution."""
        t = self.sa
        if t is None or not t.answered:
            return None
        return t.status or 0, len(t.records)


@dataclass
class CmId:
    """One rdma_cm_id: its commands in order, its hand-overs and PATH readbacks."""

    pid: int | None
    fd: int | None
    id: int
    state: str = "idle"
    commands: list[UcmaFrame] = field(default_factory=list)
    hand_overs: list[HandOver] = field(default_factory=list)
    readbacks: list[tuple[UcmaFrame, HandOver | None]] = field(default_factory=list)
    # the ACM exchanges whose answer its route steps used or followed (a hand-over, its
    # RESOLVE_ROUTE, an AF_IB RESOLVE_ADDR), in order
    exchanges: list[AcmExchange] = field(default_factory=list)
    services: list[ServiceResolution] = field(default_factory=list)

    @property
    def name(self) -> str:
        where = f"pid {self.pid} fd {self.fd} " if self.pid is not None else ""
        return f"{where}cm_id {self.id}"

    def frames(self) -> list[int]:
        """Its commands' frames, its blobs' and its ACM exchanges'."""
        out = [c.frame for c in self.commands]
        out += [h.blob.frame for h in self.hand_overs if h.blob is not None]
        return out + [f for x in self.exchanges for f in x.frames]

    def _uses(self, x: AcmExchange | None) -> None:
        if x is not None and all(y is not x for y in self.exchanges):
            self.exchanges.append(x)


@dataclass
class ProcessView:
    """The time lines of a capture's process records."""

    cm_ids: list[CmId] = field(default_factory=list)
    exchanges: list[AcmExchange] = field(default_factory=list)
    resolve_addrs: list[tuple[UcmaFrame, AcmExchange | None]] = field(default_factory=list)
    services: list[ServiceResolution] = field(default_factory=list)


def _who(rec) -> tuple:
    c = rec.call
    return (c.pid, c.fd) if c is not None else (None, None)


def _pid(rec):
    return rec.call.pid if rec.call is not None else None


# the events that move a cm_id's state, and the state they move it to
EVENT_STATES = {"ADDR_RESOLVED": "addr_resolved", "ADDR_ERROR": "idle",
                "ROUTE_RESOLVED": "route_resolved", "ROUTE_ERROR": "addr_resolved",
                "ADDRINFO_RESOLVED": "addrinfo_resolved", "ADDRINFO_ERROR": "addr_bound"}


def build(records: list) -> ProcessView:
    """The view of the process records and blob frames of a capture, in frame order."""
    view = ProcessView()
    ids: dict[tuple, CmId] = {}
    open_acm: dict[tuple, list[AcmExchange]] = {}
    last_acm: dict = {}  # pid -> the last exchange not yet followed by a route step
    waiting_blob: HandOver | None = None
    for rec in records:
        kind = rec["kind"]
        if kind == "blob":
            if waiting_blob is not None:
                waiting_blob.blob = rec
                waiting_blob = None
            continue
        if kind == "acm":
            if rec.acm.opcode & ACM_OP_MASK != ACM_OP_RESOLVE:
                continue
            who = _who(rec) + (rec.acm.tid,)
            if not rec.response:
                x = AcmExchange(rec)
                view.exchanges.append(x)
                open_acm.setdefault(who, []).append(x)
                last_acm[_pid(rec)] = x
            elif open_acm.get(who):
                open_acm[who].pop(0).response = rec
            continue
        if kind != "ucma":
            continue
        waiting_blob = None
        key = _who(rec) + (rec.id,)
        if rec.command == "CREATE_ID" and rec.id is not None and not rec.failed:
            ids[key] = cm = CmId(*key)
            view.cm_ids.append(cm)
        elif rec.id is None:
            continue
        cm = ids.get(key)
        if cm is None:  # the capture began after its CREATE_ID
            ids[key] = cm = CmId(*key, state="unknown")
            view.cm_ids.append(cm)
        cm.commands.append(rec)
        if rec.command in ("RESOLVE_ADDR", "RESOLVE_IP"):
            x = last_acm.get(_pid(rec))
            x = x if x is not None and x.response else None
            view.resolve_addrs.append((rec, x))
            if x is not None and rec.dst_family == ADDRESS_FAMILIES[AF_IB]:
                cm._uses(x)  # its AF_IB addresses come from the answer (ucma_resolve_af_ib)
            if not rec.failed:
                cm.state = "addr_query"
        elif rec.command == "GET_EVENT" and rec.event in EVENT_STATES and (
                not rec.status or rec.event.endswith("_ERROR")):  # an error event has a status
            cm.state = EVENT_STATES[rec.event]
        elif rec.command == "SET_OPTION" and rec.level == "IB" and rec.optname == "PATH":
            h = HandOver(rec, cm.state, acm=last_acm.pop(_pid(rec), None))
            if h.acm is not None:
                h.acm.followed_by = rec
                cm._uses(h.acm)
            cm.hand_overs.append(h)
            waiting_blob = h
            if not rec.failed:
                cm.state = "route_resolved"
        elif rec.command == "RESOLVE_ROUTE":
            x = last_acm.pop(_pid(rec), None)
            if x is not None:
                x.followed_by = rec
                cm._uses(x)
            if not rec.failed:
                cm.state = "route_query"
        elif rec.command == "CONNECT" and not rec.failed:
            cm.state = "connect"
        elif rec.command == "RESOLVE_IB_SERVICE":
            sr = ServiceResolution(rec, cm.name)
            cm.services.append(sr)
            view.services.append(sr)
            if not rec.failed:
                cm.state = "addrinfo_query"
        elif rec.command == "QUERY" and rec.option == PATH_QUERY and rec.paths is not None:
            accepted = [h for h in cm.hand_overs if not h.command.failed]
            cm.readbacks.append((rec, accepted[-1] if accepted else None))
        if cm.services and _of_service(rec):  # (an ADDRINFO event set the state above)
            sr = cm.services[-1]
            if rec.command == "QUERY":
                sr.queries.append(rec)
            elif sr.event is None:
                sr.event = rec
    return view


def _of_service(rec) -> bool:
    """An ADDRINFO event or a QUERY(IB_SERVICE): a step of the cm_id's service resolution."""
    return (rec.command == "GET_EVENT" and rec.event in ADDRINFO_EVENTS
            or rec.command == "QUERY" and rec.option == SERVICE_QUERY)


def join_service_queries(view: ProcessView, queries) -> None:
    """Give each service resolution its SA GetTable(ServiceRecord): the first one not yet
    given whose first request follows the command and precedes the event (the kernel sends
    its query between the two: cma.c cma_resolve_ib_service). A failed command sent none."""
    free = sorted((t for t in queries if t.method == METHOD_GET_TABLE),
                  key=lambda t: t.first_frame)
    for sr in view.services:
        if sr.command.failed:
            continue
        end = sr.event.frame if sr.event is not None else float("inf")
        for i, t in enumerate(free):
            if sr.command.frame < t.first_frame < end:
                sr.sa = free.pop(i)
                break


def process_view(replay) -> ProcessView:
    """The replay's process view, built once (the process rules share it)."""
    view = getattr(replay, "_process_view", None)
    if view is None:
        recs = sorted(replay.process + [b for b in replay.blobs], key=lambda r: r["frame"])
        view = replay._process_view = build(recs)
        join_service_queries(view, getattr(replay, "service_queries", ()))
    return view


def frames_by_resolution(view: ProcessView, blob_owner: dict[int, str]) -> dict[int, str]:
    """The resolution each process frame belongs to: a service resolution's frames (its
    commands and SA transaction) are its own; a cm_id's (its commands, blobs and ACM
    exchanges) is the resolution of the blobs it handed over (`blob_owner`: blob frame ->
    resolution name); the frames of a cm_id that handed none over belong to none."""
    out: dict[int, str] = {}
    for sr in view.services:
        for frame in sr.frames:
            out.setdefault(frame, sr.name)
    for cm in view.cm_ids:
        name = next((blob_owner[h.blob.frame] for h in cm.hand_overs
                     if h.blob is not None and h.blob.frame in blob_owner), None)
        if name is not None:
            for frame in cm.frames():
                out.setdefault(frame, name)
    return out


def librdmacm_view(x: AcmExchange) -> dict:
    """The kernel view of an ACM answer: what librdmacm makes of it (the "librdmacm" layer:
    the entries of ai_route, or no route and why), then what the ucma profile takes of that
    array, as the kernel view of a blob frame shows each profile."""
    route, why, r = x.route(), x.unusable(), x.response
    notes = [why] if why else []
    if route is not None and r.trailing_bytes:
        notes.append(f"{r.trailing_bytes} bytes past the last whole entry dropped")
    if route is not None and any(e.path_record is None for e in route):
        notes.append("address entries copied as paths (ACM-PATH-SPLIT)")
    view = {"librdmacm": {
        "profile": "librdmacm", "accepted": route is not None,
        "outcome": "ok" if route is not None else "no route",
        "action": (f"ai_route of entries {[e.index for e in route]} handed to rdma_set_option"
                   if route is not None else
                   "no ai_route: rdma_resolve_route lets the kernel resolve the route"),
        "source": librdmacm.SOURCE, "entries": [e.index for e in route or ()], "notes": notes}}
    if route:
        blob = Blob(tuple(e.flags for e in route), len(route) * RECORD_SIZE)
        view["ucma"] = select_ucma(blob).to_dict()
    return view
