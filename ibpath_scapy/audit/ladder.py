"""Ladder model of a resolution: the messages between kernel, resolver, SA and remote CM in
frame order, one arrow per captured message, with the findings that rest on them.

Shared by the HTML report (html.py) and the text ladder (report.to_text with ladders).
A message is one frame: an SA query (each retry too), each SA answer frame (each RMPP segment,
the last one carrying the reassembled answer) and the requester's RMPP ACKs, each LS RESOLVE
request and response, each blob handed to the kernel (rdma_set_option optval) and each CM
message of the connection (REQ, then REP, RTU, REJ... joined by communication ID).

A recording of a process (`ibpath record`) adds what the process rules judge (audit/process.py):
each ACM RESOLVE and its answer, between the process and an ibacm lane, and the process's ucma
commands to the kernel that make its route (RESOLVE_ADDR/RESOLVE_IP, SET_OPTION(IB, IB_PATH)
with the kernel's verdict, RESOLVE_ROUTE, the QUERY(PATH) readback) with the events that set
the cm_id state they are judged in (ADDR_RESOLVED, ROUTE_RESOLVED and the errors). There the
resolver lane is the process (its title says so); the ibacm lane is drawn only in a ladder with
ACM messages. A cm_id's messages, and the ACM exchanges that led to its route steps, belong to
the resolution whose blob it handed over, else to the ladder of no resolution. An IB service
resolution (Linux 6.17) has a ladder of its own: RESOLVE_IB_SERVICE, the kernel's SA
GetTable(ServiceRecord) and its RMPP answer when the wire is in the same input, the ADDRINFO
event and the QUERY(IB_SERVICE) readbacks (process.ServiceResolution).

A ladder is bounded like the rest of its resolution's history: it draws the SA transactions
its resolution keeps (the last Replay.RESOLUTION_HISTORY); the older ones were let go with
their arrows (a DECODE-LIMIT finding), and the ladder says how many, with their messages and
frames, in one line (let_go_note), in the HTML report and the text ladder alike.

The SA is always queried from the resolver lane: a capture does not tell whether the kernel or
a user-space resolver sent a PathRecord query, and in both resolver designs the kernel itself
reads the answer only through a blob or an LS response.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..layers.pathdata import flags_text
from .engine import FileAudit
from .model import Finding
from .arrows import sa_arrows
from .process import (EVENT_STATES, PATH_QUERY, SERVICE_QUERY, AcmExchange, CmId, ProcessView,
                      ServiceResolution, process_view, service_keys)
from .replay import LetGo, Replay, Resolution

LANES = ("kernel", "resolver", "ibacm", "SA", "remote")
KINDS = ("sa-query", "sa-answer", "rmpp-ack", "ls-request", "ls-response", "blob", "cm",
         "ucma", "acm-request", "acm-response")
PROCESS_KINDS = ("ucma", "acm-request", "acm-response")  # a recorded process's messages

# PathRecord fields the rules compare (audit-rules.md BLOB-*, CM-REQ-*), in display order
COMPARED_FIELDS = ("sgid", "dgid", "slid", "dlid", "pkey", "sl", "flow_label", "tclass",
                   "hop_limit", "rate", "mtu", "packet_life_time", "reversible")
# CM REQ primary path fields for the same columns (cm.c cm_format_req)
_CM_FIELDS = {"sgid": "primary_local_gid", "dgid": "primary_remote_gid",
              "slid": "primary_local_lid", "dlid": "primary_remote_lid", "pkey": "pkey",
              "sl": "primary_sl", "flow_label": "primary_flow_label",
              "tclass": "primary_traffic_class", "hop_limit": "primary_hop_limit",
              "rate": "primary_packet_rate", "mtu": "path_packet_payload_mtu"}
_CM_SHOWN_AS = {**_CM_FIELDS, "local_ack_timeout": "primary_local_ack_timeout"}


@dataclass(slots=True)
class Arrow:
    """One message: from lane `src` to lane `dst`, at capture frame `frame`."""

    number: int  # 1-based, in frame order within the ladder
    kind: str  # one of KINDS
    src: str
    dst: str
    frame: int
    label: str
    findings: list[int] = field(default_factory=list)  # indices into Ladder.findings resting here


@dataclass
class RecordColumn:
    """One decoded PathRecord for the side-by-side table: where it came from and its fields."""

    source: str  # "SA answer", "blob", "LS response", "CM REQ"
    frame: int
    title: str
    fields: dict
    # the layer field each value is shown as (render.field_text) where it is not the
    # PathRecord's of the same name: a CM REQ's rate is its packet rate, whose 0 is "port
    # current" (in a PathRecord, 0 is reserved)
    shown_as: dict = field(default_factory=dict)


@dataclass
class Ladder:
    """The messages of one resolution (or, with name None, of the messages of a file that
    belong to none) and its findings. `anchor[i]` is the arrow number finding i is attached to
    (the last message it rests on), or None when none of its frames is a message of the ladder.
    `let_go`: the resolution's oldest SA transactions, let go and not drawn
    (Replay.RESOLUTION_HISTORY: replay.LetGo), or None."""

    file: str
    name: str | None
    arrows: list[Arrow] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    anchor: list[int | None] = field(default_factory=list)
    resolution: Resolution | None = field(default=None, repr=False, compare=False)
    # its resolution's transactions as drawn (read back from the replay's Spill file where
    # the audit streamed its resolutions: Replay.read_back), None: the resolution's own
    transactions: list | None = field(default=None, repr=False, compare=False)

    @property
    def let_go(self) -> LetGo | None:
        return self.resolution.let_go if self.resolution is not None else None

    def columns(self) -> list[RecordColumn]:
        """The decoded PathRecords of the resolution side by side, made when asked (up to
        RESOLUTION_HISTORY answers of a few records each: a page draws the first few of
        them, and keeps no ladder's whole table)."""
        if self.resolution is None:
            return []
        return _columns(self.resolution, self.transactions)

    def worst(self) -> str | None:
        for sev in ("error", "warning", "info"):
            if any(f.severity == sev for f in self.findings):
                return sev
        return None

    @property
    def lanes(self) -> tuple[str, ...]:
        """The lanes drawn, in LANES order: ibacm only where an arrow uses it."""
        used = {lane for a in self.arrows for lane in (a.src, a.dst)}
        return tuple(lane for lane in LANES if lane != "ibacm" or lane in used)

    def lane_title(self, lane: str) -> str:
        """A lane's name as drawn: the resolver lane of a recorded process is the process."""
        if lane == "resolver" and any(a.kind in PROCESS_KINDS for a in self.arrows):
            return "process"
        return lane


# -- messages -----------------------------------------------------------------------------------

def _flags(records: list[dict]) -> str:
    return ", ".join(f"0x{r['flags']:02X} {flags_text(r['flags'])}" for r in records)


def _blob_label(b: dict) -> str:
    recs = b.get("blob_records", [])
    info = b.get("blob", {})
    res = info.get("set_option_result")
    tail = f" → {res}" if res is not None else ""
    return f"blob (rdma_set_option IB_PATH): {len(recs)} record(s) [{_flags(recs)}]{tail}"


def _ls_label(rec: dict) -> str:
    ls = rec.get("ls", {})
    if ls.get("request") and rec.get("direction") != "to_kernel":
        use = ls.get("path_use_name", ls.get("path_use"))
        return f"LS RESOLVE request seq {ls.get('seq')} path_use {use}"
    recs = rec.get("blob_records", [])
    err = " RDMA_NL_LS_F_ERR" if ls.get("error") else ""
    return f"LS RESOLVE response seq {ls.get('seq')}{err}: {len(recs)} PATH_RECORD(s) [{_flags(recs)}]"


def _failed(rec) -> str:
    """' → -ERRNO' of a command the kernel refused, else ''."""
    return f" → -{rec.call.errno}" if rec.failed else ""


def _acm_label(rec) -> str:
    a = rec.acm
    tid = f"tid 0x{a.tid:x}"
    entries = list(rec.entries or ())
    if not rec.response:
        asked = ", ".join(f"{'|'.join(e.flag_names) or e.type_name} {e.address}"
                          for e in entries if e.path_record is None)
        return f"ACM RESOLVE {tid}: {asked}" if asked else f"ACM RESOLVE {tid}"
    paths = [e for e in entries if e.path_record is not None]
    status = a.status_name or a.status
    got = f"{len(paths)} path(s) [{_flags(paths)}]" if paths else "no path"
    return f"ACM answer {tid} status {status}: {got}"


def _ucma_label(cm: CmId, rec, hand_over=None) -> tuple[str, str, str]:
    """(src lane, dst lane, label) of a drawn ucma command of cm_id `cm`."""
    who = f"cm_id {cm.id}"
    if rec.command == "GET_EVENT":
        status = f" status {rec.status}" if rec.status else ""
        return "kernel", "resolver", f"ucma event {rec.event} {who}{status}"
    if rec.command == "QUERY" and rec.option == SERVICE_QUERY:
        if rec.failed:
            return "kernel", "resolver", f"ucma QUERY(IB_SERVICE) {who}{_failed(rec)}"
        copied = len(rec.service_records or ())
        return "kernel", "resolver", (f"ucma QUERY(IB_SERVICE) {who}: {rec.num_service_recs} "
                                      f"held, {copied} copied{_failed(rec)}")
    if rec.command == "QUERY":
        paths = list(rec.paths or ())
        return "kernel", "resolver", (f"ucma QUERY(PATH) {who}: {len(paths)} path(s) "
                                      f"[{_flags(paths)}]{_failed(rec)}")
    if rec.command == "SET_OPTION":
        verdict = hand_over.verdict() if hand_over is not None else None
        state = hand_over.state if hand_over is not None else cm.state
        return "resolver", "kernel", (f"ucma SET_OPTION(IB_PATH) → {verdict or '(not recorded)'}"
                                      f": {who} in {state}, {rec.optlen} bytes")
    if rec.command == "RESOLVE_ROUTE":
        return "resolver", "kernel", f"ucma RESOLVE_ROUTE {who}: the kernel's route{_failed(rec)}"
    if rec.command == "RESOLVE_IB_SERVICE":
        return "resolver", "kernel", (f"ucma RESOLVE_IB_SERVICE {who} by "
                                      f"{service_keys(rec) or 'no key (flags 0)'}{_failed(rec)}")
    return "resolver", "kernel", f"ucma {rec.command} {who} {rec.src} → {rec.dst}{_failed(rec)}"


def _drawn(rec) -> bool:
    """Whether a ladder draws a ucma command (see the module docstring)."""
    c = rec.command
    return (c in ("RESOLVE_ADDR", "RESOLVE_IP", "RESOLVE_ROUTE", "RESOLVE_IB_SERVICE")
            or c == "GET_EVENT" and rec.event in EVENT_STATES
            or c == "SET_OPTION" and rec.level == "IB" and rec.optname == "PATH"
            or c == "QUERY" and rec.option in (PATH_QUERY, SERVICE_QUERY))


class ProcessMessages:
    """The messages of a capture's process view (process.ProcessView), by cm_id: its drawn
    commands and the ACM exchanges that led to its route steps (CmId.exchanges); the
    exchanges of no cm_id apart; and apart too, each service resolution's commands
    (`services`), which its own ladder draws."""

    def __init__(self, view: ProcessView | None):
        self.by_cm: list[tuple[CmId, list[tuple]]] = []
        self.loose: list[tuple] = []
        self.services: list[tuple[ServiceResolution, list[tuple]]] = []
        if view is None:
            return
        placed: set[int] = set()
        for cm in view.cm_ids:
            hand_over = {h.command.frame: h for h in cm.hand_overs}
            msgs = []
            service_frames = set()
            for sr in cm.services:
                steps = [sr.command] + ([sr.event] if sr.event is not None else []) + sr.queries
                service_frames.update(r.frame for r in steps)
                self.services.append((sr, [(r.frame, "ucma", *_ucma_label(cm, r)) for r in steps]))
            for rec in cm.commands:
                if rec.frame in service_frames:
                    continue
                if _drawn(rec):
                    src, dst, label = _ucma_label(cm, rec, hand_over.get(rec.frame))
                    msgs.append((rec.frame, "ucma", src, dst, label))
            for x in cm.exchanges:
                placed.add(id(x))
                msgs += self._acm(x)
            if msgs:
                self.by_cm.append((cm, msgs))
        for x in view.exchanges:
            if id(x) not in placed:
                self.loose += self._acm(x)

    @staticmethod
    def _acm(x: AcmExchange) -> list[tuple]:
        out = [(x.request.frame, "acm-request", "resolver", "ibacm", _acm_label(x.request))]
        if x.response is not None:
            out.append((x.response.frame, "acm-response", "ibacm", "resolver",
                        _acm_label(x.response)))
        return out

    def of(self, res: Resolution) -> list[tuple]:
        """The messages of the cm_ids that handed over one of the resolution's blobs."""
        blobs = {b["frame"] for b in res.blobs}
        return [m for cm, msgs in self.by_cm
                if any(h.blob is not None and h.blob.frame in blobs for h in cm.hand_overs)
                for m in msgs]

    def every(self) -> list[tuple]:
        return [m for _, msgs in self.by_cm for m in msgs] + self.loose


class CmIndex:
    """The CM messages other than REQ (Replay.cm_others) by communication ID, and where each
    connection attempt ends (the next REQ with the same local ID), so that a REQ is joined
    to its own REP/RTU only, in time linear in the messages."""

    def __init__(self, replay: Replay | None):
        others = getattr(replay, "cm_others", []) if replay else []
        self.by_id: dict[int, list[dict]] = {}
        for o in others:
            for key in {o.get("local_comm_id"), o.get("remote_comm_id")} - {None}:
                self.by_id.setdefault(key, []).append(o)
        self.req_frames: dict[int, list[int]] = {}
        for c in (replay.cm_reqs if replay else []):
            cid = c["cm_req"].get("local_comm_id")
            self.req_frames.setdefault(cid, []).append(c["frame"])

    def following(self, cid: int | None, frame: int) -> list[dict]:
        if cid is None:
            return []
        later = [f for f in self.req_frames.get(cid, []) if f > frame]
        end = min(later) if later else float("inf")
        return [o for o in self.by_id.get(cid, []) if frame < o["frame"] < end]


def _cm_arrows(res: Resolution, index: CmIndex) -> list[tuple]:
    out = []
    for c in res.cm_reqs:
        req = c["cm_req"]
        # a REQ of no resolution is drawn as sent by this side
        outgoing = not res.local or req.get("primary_local_gid") == res.local
        src, dst = ("kernel", "remote") if outgoing else ("remote", "kernel")
        cid = req.get("local_comm_id")
        out.append((c["frame"], "cm", src, dst, f"CM REQ comm 0x{cid or 0:x} service 0x"
                    f"{req.get('service_id', 0):x} P_Key 0x{req.get('pkey', 0):04x}"))
        # REP/REJ/MRA carry the REQ's ID as remote ID (sent back), the requester's RTU/DREQ
        # carry it as local ID
        for o in index.following(cid, c["frame"]):
            s, d = (dst, src) if o.get("remote_comm_id") == cid else (src, dst)
            out.append((o["frame"], "cm", s, d, f"CM {o.get('message')} comm 0x"
                        f"{o.get('local_comm_id') or 0:x} → 0x{o.get('remote_comm_id') or 0:x}"))
    return out


def _columns(res: Resolution, transactions: list | None = None) -> list[RecordColumn]:
    """The records the rules compare: the SA answers' records (forward and return queries),
    the records of each blob and LS response, and each CM REQ's primary path."""
    cols = []
    for t in res.transactions if transactions is None else transactions:
        for i, r in enumerate(t.records[:4]):
            cols.append(RecordColumn("SA answer", t.completing_frame or 0,
                                     f"SA answer f{t.completing_frame} rec {i}",
                                     {k: r.get(k) for k in COMPARED_FIELDS}))
    for src, recs in (("blob", res.blobs), ("LS response", res.ls_responses)):
        for b in recs:
            for i, r in enumerate(b.get("blob_records", [])[:8]):
                pr = r["path_record"]
                cols.append(RecordColumn(src, b["frame"],
                                         f"{src} f{b['frame']} rec {i} 0x{r['flags']:02X}",
                                         {**{k: pr.get(k) for k in COMPARED_FIELDS},
                                          "flags": flags_text(r["flags"])}))
    for c in res.cm_reqs:
        req = c["cm_req"]
        f = {k: req.get(v) for k, v in _CM_FIELDS.items()}
        f["packet_life_time"] = None  # the REQ carries local_ack_timeout instead
        f["local_ack_timeout"] = req.get("primary_local_ack_timeout")
        cols.append(RecordColumn("CM REQ", c["frame"], f"CM REQ f{c['frame']} primary", f,
                                 _CM_SHOWN_AS))
    return sorted(cols, key=lambda c: c.frame)


def resolution_messages(res: Resolution, cm: CmIndex, extra: list[tuple] = (),
                        transactions: list | None = None) -> list[tuple]:
    """(frame, kind, src lane, dst lane, label) of every message of a resolution (and the
    `extra` ones), in frame order, each frame once; `transactions`: its transactions, when
    not res.transactions (Replay.read_back)."""
    msgs = list(extra)
    for t in res.transactions if transactions is None else transactions:
        # a transaction let go once judged was drawn then (ClosedTransaction.arrows), or not
        # at all when the replay was not asked to (Replay.arrows)
        arrows = getattr(t, "arrows", None)
        if arrows is not None:
            msgs += arrows
        elif hasattr(t, "requests"):
            msgs += sa_arrows(t, res.remote)
    msgs += [(b["frame"], "blob", "resolver", "kernel", _blob_label(b)) for b in res.blobs]
    msgs += [(r["frame"], "ls-request", "kernel", "resolver", _ls_label(r)) for r in res.ls_requests]
    msgs += [(r["frame"], "ls-response", "resolver", "kernel", _ls_label(r))
             for r in res.ls_responses]
    msgs += _cm_arrows(res, cm)
    seen, out = set(), []
    for m in sorted(msgs, key=lambda m: m[0]):
        if m[0] not in seen:
            seen.add(m[0])
            out.append(m)
    return out


def service_messages(sr: ServiceResolution, cm: CmIndex, msgs: list[tuple]) -> list[tuple]:
    """The messages of a service resolution: its ucma commands (`msgs`) and the frames of its
    SA GetTable(ServiceRecord), drawn as a resolution's SA transactions are."""
    own = Resolution("", "", 0)
    own.transactions = [sr.sa] if sr.sa is not None else []
    return resolution_messages(own, cm, msgs)


def let_go_note(lad: Ladder, dash: str = "-") -> str:
    """What a ladder whose resolution let transactions go says of them (the HTML report and
    the text ladder alike)."""
    g = lad.let_go
    return (f"{g.transactions} earlier SA transaction(s) of this resolution ({g.messages} "
            f"message(s), frames {g.first_frame}{dash}{g.last_frames[-1]}) not drawn: it keeps its last {Replay.RESOLUTION_HISTORY} "
            "(DECODE-LIMIT)")


def _attach(ladder: Ladder, findings: list[Finding]) -> None:
    by_frame = {a.frame: a for a in ladder.arrows}
    for f in findings:
        i = len(ladder.findings)
        ladder.findings.append(f)
        on = [by_frame[fr] for fr in f.frames if fr in by_frame]
        ladder.anchor.append(on[-1].number if on else None)
        for a in on:
            a.findings.append(i)


def ladders(fa: FileAudit) -> list[Ladder]:
    """One ladder per resolution of the file, in the replay's order, then (name None) one for
    the findings tied to no resolution. A finding goes to its resolution's ladder; one the
    engine did not tie to a resolution (frame rules) goes to the ladder holding its frames."""
    return list(iter_ladders(fa))


def iter_ladders(fa: FileAudit):
    """ladders(fa), one at a time: a report that writes each as it comes holds one ladder
    (and its resolution's transactions, read back from the replay's Spill file where the
    audit streamed its resolutions) at a time, whatever the number of resolutions (issue
    45). Which ladder a finding tied to no resolution goes to is known first, from the
    frames of the messages alone (_message_frames), and only for the frames that matter."""
    replay: Replay | None = fa.replay
    resolutions = replay.resolutions.values() if replay else ()
    others = CmIndex(replay)
    view = process_view(replay) if replay and replay.process else None
    process = ProcessMessages(view)
    # the service resolutions' ladders come after the path resolutions', in the process
    # view's order (the text report names them in that order: report._text_lines)
    order = {id(sr): i for i, sr in enumerate(view.services)} if view else {}
    services = sorted(process.services, key=lambda x: order[id(x[0])])
    service_msgs = [service_messages(sr, others, msgs) for sr, msgs in services]

    def transactions(res: Resolution) -> list | None:
        return replay.read_back(res) if res.spilled else None

    named = {f.resolution for f in fa.findings if f.resolution}
    index = {res.name: i for i, res in enumerate(resolutions) if named and res.name in named}
    by_frame = [f for f in fa.findings if index.get(f.resolution) is None]
    nobody = _nobody_messages(replay, others, process) if replay else []
    wanted = ({fr for f in by_frame for fr in f.frames} | {m[0] for m in nobody}
              | {o["frame"] for o in getattr(replay, "cm_others", ())})
    owner: dict[int, int] = {}  # a wanted frame -> the first ladder with a message on it
    if wanted:
        for i, res in enumerate(resolutions):
            frames = _message_frames(res, others, process.of(res), transactions(res))
            for frame in (res.let_go.last_frames if res.let_go else ()):  # its DECODE-LIMIT rests on them
                frames.append(frame)
            for frame in frames:
                if frame in wanted:
                    owner.setdefault(frame, i)
        for k, msgs in enumerate(service_msgs, len(resolutions)):
            for m in msgs:
                if m[0] in wanted:
                    owner.setdefault(m[0], k)
    placed: dict[int, list[Finding]] = {}
    loose: list[Finding] = []
    for f in fa.findings:
        i = index.get(f.resolution) if f.resolution else None
        if i is None:
            i = next((owner[fr] for fr in f.frames if fr in owner), None)
        if i is None:
            loose.append(f)
        else:
            placed.setdefault(i, []).append(f)
    for i, res in enumerate(resolutions):
        ts = transactions(res)
        lad = Ladder(fa.path, res.name, resolution=res, transactions=ts)
        for n, (frame, kind, src, dst, label) in enumerate(
                resolution_messages(res, others, process.of(res), ts), 1):
            lad.arrows.append(Arrow(n, kind, src, dst, frame, label))
        _attach(lad, placed.get(i, []))
        yield lad
    for k, ((sr, _), msgs) in enumerate(zip(services, service_msgs), len(resolutions)):
        lad = Ladder(fa.path, sr.name)
        for n, (frame, kind, src, dst, label) in enumerate(msgs, 1):
            lad.arrows.append(Arrow(n, kind, src, dst, frame, label))
        _attach(lad, placed.get(k, []))
        yield lad
    rest = _unplaced_messages(replay, set(owner), nobody) if replay else []
    if loose or rest:
        lad = Ladder(fa.path, None)
        for n, (frame, kind, src, dst, label) in enumerate(rest, 1):
            lad.arrows.append(Arrow(n, kind, src, dst, frame, label))
        _attach(lad, loose)
        yield lad


def _message_frames(res: Resolution, cm: CmIndex, extra: list[tuple],
                    transactions: list | None) -> list[int]:
    """The frames of resolution_messages(res, cm, extra, transactions), without the
    messages."""
    frames = [m[0] for m in extra]
    for t in res.transactions if transactions is None else transactions:
        arrows = getattr(t, "arrows", None)
        if arrows is not None:
            frames += [a[0] for a in arrows]
        elif hasattr(t, "requests"):
            frames += t.frames
    for recs in (res.blobs, res.ls_requests, res.ls_responses):
        frames += [r["frame"] for r in recs]
    frames += [m[0] for m in _cm_arrows(res, cm)]
    return frames


def _nobody_messages(replay: Replay, others: CmIndex, process: ProcessMessages) -> list[tuple]:
    """The messages of a file that may belong to no resolution (saquery -p, CM between
    endpoints whose paths were not resolved in the capture, blobs of no pair, a process's
    route steps that handed over no blob), before those of a resolution's ladder are taken
    out (_unplaced_messages)."""
    nobody = Resolution("", "", 0)
    # every SA transaction, of any attribute, but those a resolution let go
    nobody.transactions = ([t for t in replay.done if id(t) not in replay.let_go]
                           if replay.let_go else list(replay.done))
    nobody.blobs = list(replay.blobs)
    nobody.ls_requests = [e["request"] for e in replay.ls.values() if e["request"]]
    nobody.ls_responses = [r for e in replay.ls.values() for r in e["responses"]]
    nobody.cm_reqs = list(replay.cm_reqs)
    return resolution_messages(nobody, others, list(replay.unplaced_arrows) + process.every())


def _unplaced_messages(replay: Replay, placed: set[int], nobody: list[tuple]) -> list[tuple]:
    """The messages of a file that belong to no resolution, as one ladder: those of
    _nobody_messages on no frame of `placed` (the frames of a resolution's ladder among
    them), and the CM messages whose REQ is not in the capture."""
    msgs = [m for m in nobody if m[0] not in placed]
    seen = placed | {m[0] for m in msgs}
    # CM messages whose REQ is not in the capture: replies drawn as coming from the remote
    for o in getattr(replay, "cm_others", []):
        if o["frame"] not in seen:
            reply = o.get("message") in _CM_REPLIES
            msgs.append((o["frame"], "cm", "remote" if reply else "kernel",
                         "kernel" if reply else "remote",
                         f"CM {o.get('message')} comm 0x{o.get('local_comm_id') or 0:x} → "
                         f"0x{o.get('remote_comm_id') or 0:x} (its REQ is not in the capture)"))
    return sorted(msgs, key=lambda m: m[0])


_CM_REPLIES = {"REP", "REJ", "MRA", "DREP", "APR", "SIDR_REP"}


# -- text ------------------------------------------------------------------------------------

_COL = 14  # characters between two lanes


def text_ladder(lad: Ladder, max_arrows: int | None = None) -> list[str]:
    """The ladder as plain text lines: a header of lanes, one line per message, and below it
    the severity and rule ID of each finding attached to it (the report lists them in full)."""
    lanes = lad.lanes
    titles = [lad.lane_title(n) for n in lanes]
    width = _COL * (len(lanes) - 1) + 1
    lines = ["   " + "".join(t.ljust(_COL) for t in titles[:-1]) + titles[-1]]
    if lad.let_go:
        lines.append(f"   ... {let_go_note(lad)}")
    shown = lad.arrows if max_arrows is None else lad.arrows[:max_arrows]
    by_anchor: dict[int, list[int]] = {}
    for i, a in enumerate(lad.anchor):
        if a is not None:
            by_anchor.setdefault(a, []).append(i)
    for a in shown:
        row = [" "] * width
        for k in range(len(lanes)):
            row[k * _COL] = "|"
        s, d = lanes.index(a.src) * _COL, lanes.index(a.dst) * _COL
        lo, hi = min(s, d), max(s, d)
        for x in range(lo + 1, hi):
            row[x] = "-"
        if d > s:
            row[hi - 1] = ">"
        else:
            row[lo + 1] = "<"
        lines.append("   " + "".join(row) + f"  f{a.frame} {a.label}")
        for i in by_anchor.get(a.number, []):
            f = lad.findings[i]
            lines.append("   " + " " * width + f"    ^ {f.severity} {f.rule}")
    if len(shown) < len(lad.arrows):
        lines.append(f"   ... {len(lad.arrows) - len(shown)} more message(s) not drawn "
                     f"(frames {lad.arrows[len(shown)].frame}-{lad.arrows[-1].frame})")
    return lines


__all__ = ["Arrow", "Ladder", "LANES", "KINDS", "PROCESS_KINDS", "RecordColumn", "ladders",
           "iter_ladders",
           "let_go_note",
           "resolution_messages", "service_messages", "text_ladder", "COMPARED_FIELDS"]
