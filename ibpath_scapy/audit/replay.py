"""Replay: decoded frames (decode.py records, from either engine) → transactions, LS
exchanges, blobs, CM REQs and the resolutions that join them.

Frames are consumed one at a time; only the small per-exchange summaries are kept.
"""

from __future__ import annotations

import sys
from array import array
from collections import deque
from dataclasses import dataclass, field
from operator import attrgetter

from ..facts.records import Fact, Mad, MadFrame, PathRecord
from ..layers.mad import ATTR_PATH_RECORD, ATTR_SERVICE_RECORD, METHOD_RESP, MGMT_CLASS_SA
from ..layers.umad import UMAD_TID_LOW
from ..facts.assemble import umad_send_returned
from ..facts.rmpp import carries_whole_message
from ..native import extension
from .arrows import sa_arrows
from .spill import CHUNK_ENTRIES, OBJECTS, ROWS, NotPlain, Spill, pickled as _pickled
from .storage import FrameList, KeptFrames, KeptRecord


# records about the file as a whole that decoders make at its end (assemble.Assembler.finish):
# judged by the frame rules only
FILE_KINDS = ("unsupported", "crc")


@dataclass(slots=True)
class Transaction:
    """One SA transaction: a request (with its retries) and its answer, matched by
    (requester, TID); RMPP segments and ACKs belong to it too."""

    requester: str
    tid: int
    attribute_id: int = 0
    # the request frames (retries too), and the response frames with the RMPP ACKs
    requests: KeptFrames = field(default_factory=lambda: KeptFrames())
    responses: KeptFrames = field(default_factory=lambda: KeptFrames())
    records: list[dict] = field(default_factory=list)  # PathRecords of the whole answer
    answered: bool = False
    completing_frame: int | None = None

    # once closed (Replay._close), the request and the query are read again and again by
    # the rules: kept here then
    _sealed: tuple | None = field(default=None, repr=False, compare=False)

    def seal(self) -> None:
        """No more frames: fix the request and its query for the rules to read."""
        self.requests.seal()
        self.responses.seal()
        self._sealed = None  # read them from the frames once more
        self._sealed = (self.request, self.query, _components(self.request))

    @property
    def request(self) -> dict | None:
        if self._sealed is not None:
            return self._sealed[0]
        return self.requests[0] if self.requests else None

    @property
    def query(self) -> dict | None:
        """The request's PathRecord template."""
        if self._sealed is not None:
            return self._sealed[1]
        r = self.request
        recs = r.path_records if r is not None else None
        return recs[0] if recs else None

    @property
    def components(self) -> frozenset[str]:
        if self._sealed is not None:
            return self._sealed[2]
        return _components(self.request)

    @property
    def component_mask(self) -> int:
        r = self.request
        sa = r.sa if r is not None else None
        return sa.component_mask if sa is not None else 0

    @property
    def status(self) -> int | None:
        for r in self.responses:
            return r.mad.status
        return None

    @property
    def frames(self) -> list[int]:
        return sorted(set(self.requests.frame_numbers() + self.responses.frame_numbers()))

    @property
    def first_frame(self) -> int:
        """The first request's frame (the first frame, if no request was seen)."""
        return self.requests[0].frame if self.requests else self.frames[0]

    @property
    def request_count(self) -> int:
        """How many times the request was sent (1 + its retries with the same TID)."""
        return len(self.requests)

    @property
    def method(self) -> int | None:
        """The request's MAD method (None: no request seen)."""
        r = self.request
        return r.mad.method if r is not None else None

    def asks_reversible(self) -> bool:
        q = self.query
        return q is not None and "reversible" in self.components and q.reversible == 1


class ClosedTransaction:
    """A closed, judged SA transaction as a resolution keeps it when closed transactions are
    let go (Replay.keep_closed false): the values the resolution rules read (query,
    components, answer records, status, frames), ~0.4 KB instead of every frame's record.
    Read-only; it has no requests or responses to iterate."""

    __slots__ = ("requester", "tid", "attribute_id", "records", "answered", "completing_frame",
                 "query", "components", "component_mask", "status", "first_frame", "_frames",
                 "arrows", "request_count", "method", "_asks")

    def __init__(self, t: Transaction):
        self.requester, self.tid, self.attribute_id = t.requester, t.tid, t.attribute_id
        self.records, self.answered = tuple(t.records), t.answered
        self.completing_frame, self.query, self.status = t.completing_frame, t.query, t.status
        self.component_mask = t.component_mask
        self.components = t.components  # (a sealed transaction's, worked out once)
        self.first_frame = t.first_frame
        self.request_count = t.request_count
        self.method = t.method
        self._frames = array("Q", t.frames)
        self.arrows: list[tuple] | None = None  # its ladder messages (Replay.arrows)
        self._asks = Transaction.asks_reversible(self)  # asked by the rules, Tally, the marks

    @property
    def frames(self) -> list[int]:
        return self._frames.tolist()

    def asks_reversible(self) -> bool:
        return self._asks

    def row(self) -> tuple:
        """Its values as plain ones (what the replay writes to its Spill file): the
        PathRecords as the tuples of their fields. NotPlain when one is another kind."""
        q, recs = self.query, self.records
        if q is not None and type(q) is not PathRecord:
            raise NotPlain(type(q).__name__)
        for r in recs:
            if type(r) is not PathRecord:
                raise NotPlain(type(r).__name__)
        return (self.requester, self.tid, self.attribute_id, self.answered,
                self.completing_frame, None if q is None else _pr_values(q), self.status,
                self.component_mask, self.components, self.first_frame, self.request_count,
                self._frames.tobytes(), tuple(map(_pr_values, recs)), self.arrows, self._asks,
                self.method)

    @classmethod
    def from_row(cls, row: tuple, facts: dict | None = None) -> "ClosedTransaction":
        """The transaction row() was made from (equal in every value). facts: PathRecord facts
        by their values, shared between the transactions read back (as the decoder shares
        them: a pair asked again and again has the same query and answer)."""
        c = object.__new__(cls)
        (c.requester, c.tid, c.attribute_id, c.answered, c.completing_frame, q, c.status,
         c.component_mask, components, c.first_frame, c.request_count, frames, recs,
         c.arrows, c._asks, c.method) = row
        if facts is None:
            facts = {}
        c.query = None if q is None else _fact(facts, q)
        c.records = tuple([_fact(facts, v) for v in recs])
        c.components = _COMPONENTS.get(c.component_mask, components)
        c._frames = array("Q", frames)
        return c


_pr_values = attrgetter(*PathRecord._INIT)  # a PathRecord fact's fields, in its constructor's order


def _fact(facts: dict, values: tuple) -> PathRecord:
    """The PathRecord fact of these values, one per distinct values in `facts`."""
    fact = facts.get(values)
    if fact is None:
        # PathRecord's constructor takes its fields in _INIT's order (facts.records._make_new)
        fact = facts[values] = PathRecord(*values)
    return fact


_COMPONENTS: dict[int, frozenset] = {}


def _components(request) -> frozenset:
    """A request's ComponentMask names as a frozenset, one per distinct mask (the names are
    the mask's: assemble.sa_fact makes every SaHeader fact)."""
    # a MadFrame, or what a transaction keeps of it (`is not None`: a fact's truth is a call)
    sa = request.sa if request is not None else None
    mask = sa.component_mask if sa is not None else 0
    s = _COMPONENTS.get(mask)
    if s is None:
        if len(_COMPONENTS) >= 4096:
            _COMPONENTS.clear()
        s = _COMPONENTS[mask] = frozenset(sa.components) if sa is not None else frozenset()
    return s


@dataclass(slots=True)
class Tally:
    """What the resolutions table counts of SA transactions (audit/tables.py): how many,
    the requests sent (retries with the same TID included), the retries, the answered ones
    and those whose query asked for a reversible path."""

    transactions: int = 0
    requests: int = 0
    retries: int = 0
    answered: int = 0
    reversible_asked: int = 0

    @classmethod
    def of(cls, ts) -> "Tally":
        """The counts of the transactions ts: count() of each, in one pass (a storm's spill
        and fold count ~100,000 resolutions of one transaction: 0.8 -> 0.3 us each)."""
        requests = retries = answered = reversible = 0
        for t in ts:
            sent = t.request_count
            requests += sent
            retries += max(sent - 1, 0)
            answered += bool(t.answered)
            reversible += bool(t.asks_reversible())
        return cls(len(ts), requests, retries, answered, reversible)

    def count(self, t, n: int = 1) -> None:
        """Count a transaction (or its ClosedTransaction); n=-1: take it out again."""
        self.transactions += n
        self.requests += n * t.request_count
        self.retries += n * max(t.request_count - 1, 0)
        self.answered += n * bool(t.answered)
        self.reversible_asked += n * bool(t.asks_reversible())

    def merge(self, other: "Tally | None") -> "Tally":
        if other is not None:
            for f in ("transactions", "requests", "retries", "answered", "reversible_asked"):
                setattr(self, f, getattr(self, f) + getattr(other, f))
        return self


@dataclass(slots=True)
class LetGo(Tally):
    """The oldest SA transactions a resolution let go (Replay.RESOLUTION_HISTORY): how many
    and what the resolutions table counts of them (Tally), their messages (frames, which a
    ladder no longer draws), the first of those frames, and the frames of the last
    transaction let go (its DECODE-LIMIT finding rests on them)."""

    messages: int = 0
    first_frame: int = 0
    last_frames: list[int] = field(default_factory=list)

    def add(self, t) -> None:
        """Count a transaction (or its ClosedTransaction) let go."""
        frames = t.frames
        if not self.transactions:
            self.first_frame = frames[0]
        self.count(t)
        self.messages += len(frames)
        self.last_frames = frames


@dataclass(slots=True)
class Resolution:
    """Paths between a local and a remote endpoint: (local GID, remote GID, P_Key).

    Slotted, and what finish() attaches to it (blobs, LS messages, CM REQs) an empty tuple
    until there is one (attach()): an SA storm makes one per (source, destination) pair, and
    what each holds once judged is what bounds the audit's memory (issue 45)."""

    local: str
    remote: str
    pkey: int
    transactions: list[Transaction] = field(default_factory=list)
    blobs: list[dict] | tuple = ()
    ls_requests: list[dict] | tuple = ()
    ls_responses: list[dict] | tuple = ()
    cm_reqs: list[dict] | tuple = ()
    # blobs given with --blob (ibpath audit --blob FILE) whose records concern this pair; they
    # are not frames of the capture and have no place in its time line
    extra_blobs: list[dict] | tuple = ()
    # its oldest transactions, let go (Replay.RESOLUTION_HISTORY), or None
    let_go: LetGo | None = None
    # its transactions folded into counts once judged, where nothing draws them (fold()),
    # and those in the replay's Spill file, counted there until they come back
    folded: Tally | None = None
    # its older closed transactions in the replay's Spill file (Replay.HELD_TRANSACTIONS):
    # the reference of the last chunk (0: none) and how many transactions the chunks hold;
    # Replay.restore() brings them back before them in `transactions`
    spilled: int = field(default=0, repr=False, compare=False)
    spilled_count: int = field(default=0, repr=False, compare=False)
    # bit i set: one of its transactions passed the replay's transaction_marks[i], a test a
    # resolution rule asks of a resolution before it can find anything (engine.run_rules)
    marks: int = field(default=0, repr=False, compare=False)

    def attach(self, what: str, rec: dict) -> None:
        """Add a record to one of the lists finish() fills (blobs, ls_requests, ...)."""
        kept = getattr(self, what)
        if type(kept) is tuple:
            kept = list(kept)
            setattr(self, what, kept)
        kept.append(rec)

    def fold(self) -> None:
        """Let the judged transactions go, keeping what the resolutions table counts of them:
        what a process hands back of an audit no ladder is drawn from (audit/run.py), a
        hundredth of the bytes of an SA storm's summaries; those in the replay's Spill file
        are counted already, and not read back."""
        if self.transactions:
            self.folded = Tally.of(self.transactions).merge(self.folded)
            self.transactions = ()
        self.spilled = self.spilled_count = 0

    def tally(self) -> Tally:
        """The counts of all its SA transactions: kept, folded and let go."""
        return Tally.of(self.transactions).merge(self.let_go).merge(self.folded)

    @property
    def name(self) -> str:
        return f"{self.local} > {self.remote} pkey 0x{self.pkey:04x}"

    def forward(self) -> list[Transaction]:
        return [t for t in self.transactions if t.query and t.query.get("sgid") == self.local]

    def returning(self) -> list[Transaction]:
        return [t for t in self.transactions if t.query and t.query.get("sgid") == self.remote]


def _slim(rec):
    """What frame rules need of a record (its records are kept by the transaction): a fact
    as it is (immutable, slotted), a record written as a dict in part."""
    if isinstance(rec, Fact):
        return rec
    keep = ("frame", "frames", "kind", "mad", "rmpp", "sa", "path_records", "error", "errors",
            "malformed", "limit", "note", "linktype", "count")
    return {k: rec[k] for k in keep if k in rec}


_ENDPOINTS = frozenset(("sgid", "dgid"))  # the components of a point-to-point path query


def _gid(x: str | None) -> str | None:
    return None if x in (None, "::") else x


EXTRA_BLOB = "extra_blob"


def extra_blob_record(rec: dict, source: str) -> dict:
    """Wrap a decoded blob record of a --blob FILE for feeding into a capture's replay: the
    replay keeps it apart (Replay.extra_blobs, with its file name under "file") and does not
    count it as a record of the capture."""
    return {"frame": 0, "kind": EXTRA_BLOB, "file": source, "record": rec}


class Replay:
    """Feed decoded records in frame order; read the results after finish().

    SA transactions stream: one is closed when it has been answered and LINGER newer
    transactions have opened since (late retries and duplicate answers of a real exchange
    come well before that), or when it is evicted unanswered (MAX_OPEN_TRANSACTIONS), or at
    finish(). Closing seals it, hands it to on_close (engine.audit_records judges it there
    with the transaction rules) and places a PathRecord transaction in its resolution, which
    keeps its last RESOLUTION_HISTORY transactions. With keep_closed false (the CLI) nothing
    else keeps a closed transaction, only its summary in its resolution (and its ladder
    arrows, when self.arrows), so memory follows the transactions open at once and the
    resolutions, not the length of the capture; with keep_closed (the library's default)
    self.done keeps every closed transaction whole. A frame of a transaction closed long ago
    starts a new one.

    Without keep_closed and with `spills`, the resolutions hold at most HELD_TRANSACTIONS
    closed transactions in memory between them: past that, those held go to a temporary
    file (audit/spill.py),
    each resolution keeping one reference to its chunks, and come back by restore() when the
    resolution rules judge the resolution (engine.run_rules), so that memory follows neither
    the capture's length nor the number of distinct pairs (issue 45)."""

    MAX_OPEN_TRANSACTIONS = 65536
    LINGER = 4096
    RESOLUTION_HISTORY = 256
    SERVICE_HISTORY = 4096
    HELD_TRANSACTIONS = 16384

    def __init__(self, keep_closed: bool = True):
        self.transactions: dict[tuple, Transaction] = {}
        self.done: list[Transaction] = []  # closed transactions (all of them if keep_closed)
        self.keep_closed = keep_closed
        # without keep_closed, draw each transaction's ladder messages as it is let go (kept by
        # its resolution's summary, or in unplaced_arrows): ~0.2 KB a frame for the ladder
        self.arrows = False
        self.unplaced_arrows: list[tuple] = []
        # with keep_closed: id() of the transactions of self.done that a resolution let go
        # (RESOLUTION_HISTORY), which no ladder draws
        self.let_go: set[int] = set()
        self.on_close = None  # called with (transaction, its resolution or None) on closing
        self.sa_count = 0  # PathRecord transactions closed
        # the ServiceRecord transactions closed (the kernel's SubnAdmGetTable of an IB service
        # resolution, Linux 6.17), the last SERVICE_HISTORY, for the process view to join to
        # the RESOLVE_IB_SERVICE they answer (audit/process.py)
        self.service_queries: deque = deque(maxlen=self.SERVICE_HISTORY)
        # answered transactions in the order they were answered, to close the oldest first
        self._answered: deque[tuple[tuple, Transaction, float]] = deque()
        # a live stream (audit of "-" or a FIFO): also close a transaction once the capture's
        # clock is this many seconds past its answer, so that it is judged while the capture
        # runs (None: by LINGER alone)
        self.linger_seconds: float | None = None
        self._closing: list[Transaction] = []  # out of the open table, to be closed
        self.resolutions: dict[tuple, Resolution] = {}
        # without keep_closed: the resolutions holding closed transactions in memory (by id),
        # how many they hold, and the file the others went to (None until the first)
        self._holding: dict[int, Resolution] = {}
        self._held = 0
        self.spill: Spill | None = None
        # the C writer of the spill's chunks (native/_rows.c, RowsText), which intake() sets;
        # without it (or where it gives None) Spill.write_chunk pickles [t.row() for t in ts]
        self._text = None
        # its spill(): _spill_part's steps in C, chunk after chunk (None: _spill_part's)
        self._spill_steps = None
        self._facts: dict = {}  # PathRecord facts read back, by their values (from_row)
        # whether to spill at all (AuditOptions.stream_resolutions): where no report reads
        # the resolutions' transactions all at once
        self.spills = False
        # tests of a closed PathRecord transaction that resolution rules need to have passed
        # in a resolution before they can find anything in it (Resolution.marks)
        self.transaction_marks: tuple = ()
        self.blobs: list[dict] = []
        self.ls: dict[int, dict] = {}  # seq → {"request": rec, "responses": [...]}
        self.cm_reqs: list[dict] = []
        # what a process did (ibpath record: ucma commands, ACM messages), for audit/process.py
        self.process: list = []
        # the other CM messages (REP, RTU, REJ, ...), slim, for the ladder diagram (ladder.py)
        self.cm_others: list[dict] = []
        self.extra_blobs: list[dict] = []  # from --blob files: the record, plus "file"
        self.malformed: list[dict] = []
        self.records = 0
        self.evicted = 0
        # decoded records that frame rules look at: SA frames and anything malformed; when
        # keep_frame_record is set (engine.audit_records), only those it accepts (the ones
        # with a finding), so that a long capture does not keep a copy of every SA frame
        self.frame_records: list[dict] = []
        self.keep_frame_record = None

    # -- intake ------------------------------------------------------------------------------
    def feed_all(self, records: list, keep: list) -> None:
        """feed(rec, k) for each record and its keep_frame_record verdict, in order."""
        for rec, k in zip(records, keep, strict=True):
            self.feed(rec, k)

    def feed(self, rec: dict, keep: bool | None = None) -> None:
        """One decoded record; `keep`, when given, is keep_frame_record(rec), asked already."""
        fact = isinstance(rec, Fact)  # a decoder's record: its fields are attributes
        kind = rec.kind if fact else rec.get("kind")
        if kind == EXTRA_BLOB:
            self.extra_blobs.append({**rec["record"], "file": rec["file"]})
            return
        self.records += 1
        if self.linger_seconds is not None and self._answered and "time" in rec:
            self.close_older(rec["time"])
        if fact:
            malformed = kind == "malformed" or getattr(rec, "malformed", None)
            errors = getattr(rec, "errors", None) is not None
        else:
            malformed = kind == "malformed" or rec.get("malformed")
            errors = "errors" in rec
        if kind == "sa" or malformed or errors or kind in FILE_KINDS:
            # the test reads only keys _slim keeps: ask it before making the copy
            if keep is None:
                keep = self.keep_frame_record is None or self.keep_frame_record(rec)
            if keep:
                self.frame_records.append(_slim(rec))
        if malformed:
            self.malformed.append(rec)
            if kind == "malformed":
                return
        if kind == "sa":
            self._sa(rec)
        elif kind == "blob":
            self.blobs.append(rec)
        elif kind == "ls":
            self._ls(rec)
        elif kind == "ucma" or kind == "acm":
            self.process.append(rec)
        elif kind == "cm" and "cm_req" in rec:
            self.cm_reqs.append(rec)
        elif kind == "cm":
            cm = rec.get("cm", {})
            self.cm_others.append({"frame": rec["frame"], "message": cm.get("message"),
                                   "local_comm_id": cm.get("local_comm_id"),
                                   "remote_comm_id": cm.get("remote_comm_id")})

    def __getstate__(self) -> dict:
        """What pickling keeps (an audit handed back by another process: audit/run.py): all
        but the C writer of the spill's chunks (native/_rows.c), which intake() makes again."""
        state = self.__dict__.copy()
        state["_text"] = state["_spill_steps"] = None
        return state

    def intake(self):
        """What to feed records to once the replay is set up (keep_closed, arrows, spills,
        transaction_marks): feed itself, or its C twin (native/_intake.c, SaIntake), which
        takes an SA frame off the wire (a MadFrame of kind "sa" with no umad side) through
        _sa's steps and hands any other record to feed. Where the replay keeps no closed
        transaction and draws no arrows (the CLI's audit), the C twin also closes the batches
        its steps fill (_close's steps for a PathRecord transaction of such frames). A live
        stream (linger_seconds) is fed by feed alone, as without the extension. With the
        extension, the chunks the spill writes, and its steps (_spill_part's), are C's too
        (native/_rows.c)."""
        native = extension()
        if native is None or self.linger_seconds is not None:
            return self.feed
        self._text = native.RowsText(ClosedTransaction, PathRecord, PathRecord._INIT, NotPlain,
                                     (ROWS, OBJECTS), _pickled,
                                     spill=(Resolution, Tally, CHUNK_ENTRIES))
        self._spill_steps = self._text.spill
        # (the replay holds no reference to it: no cycle for the collector, which an audit
        # runs without: engines/scapy/gcpace.py)
        return native.SaIntake(self, MadFrame, Mad, Transaction, "sa", METHOD_RESP,
                               ATTR_PATH_RECORD, FrameList, ClosedTransaction,
                               _components).feed

    def _sa(self, rec: MadFrame) -> None:
        # an SA record is a facts.records.MadFrame: its declared fields are read directly
        # (native/_intake.c takes the same steps for a MadFrame with no umad side)
        mad = rec.mad
        is_resp = bool(mad.method & METHOD_RESP)
        if rec.umad is not None and umad_send_returned(rec.umad, mad):
            return  # the kernel handing back an unanswered request: no request of its own
        requester = rec.dst if is_resp else rec.src
        # on umad the kernel owns the TID's upper 32 bits (the agent's hi_tid): a process's
        # request and the answer it reads share the low 32 (assemble.Assembler._umad_paired)
        tid = mad.transaction_id if rec.umad is None else mad.transaction_id & UMAD_TID_LOW
        key = (requester, tid, mad.mgmt_class)
        t = self.transactions.get(key)
        if t is None:
            if is_resp and rec.rmpp_control:
                return  # an ACK for a transfer we never saw the start of
            t = self.transactions[key] = self._new_transaction(
                requester, mad.transaction_id, mad.attribute_id)
            open_now = len(self.transactions)
            if open_now > self.LINGER:
                self._close_answered(open_now - self.LINGER)
            if len(self.transactions) > self.MAX_OPEN_TRANSACTIONS:
                self._evict_oldest()
        if is_resp:
            t.responses.append(rec)
            if self._completes(rec) and not rec.rmpp_control:
                if not t.answered:
                    self._answered.append((key, t, rec.time))
                t.answered = True
                t.completing_frame = rec.frame
                # the answer's records of the transaction's attribute: PathRecords, or another
                # attribute's (a ServiceRecord GetTable's, which a service resolution reads); an
                # answer of another attribute under the same TID answers none of them
                t.records = list((rec.path_records if t.attribute_id == ATTR_PATH_RECORD
                                  else rec.sa_records) or ())
        elif rec.rmpp_control:
            t.responses.append(rec)  # the requester's RMPP ACKs
        else:
            t.requests.append(rec)

    def _new_transaction(self, requester: str, tid: int, attribute_id: int) -> Transaction:
        if self.keep_closed:
            return Transaction(requester, tid, attribute_id)
        return Transaction(requester, tid, attribute_id, FrameList(), FrameList())

    @staticmethod
    def _completes(rec: MadFrame) -> bool:
        """Whether an answer frame with an RMPP header completes its answer (with none, it
        does: carries_whole_message). The caller tests the RMPP control messages apart."""
        rmpp = rec.rmpp
        return carries_whole_message(rec) and (rmpp is None or rmpp.rmpp_type in (0, 1, None))

    def _evict_oldest(self) -> None:
        """The oldest open transaction out of the table (MAX_OPEN_TRANSACTIONS), closed."""
        old = self.transactions.pop(next(iter(self.transactions)))
        self.evicted += 1
        if not old.answered:  # its answer, if it comes, is no longer matched: say so
            self.frame_records.append({
                "frame": old.frames[0], "frames": old.frames, "kind": "limit",
                "limit": f"SA transaction tid 0x{old.tid:016x} evicted unanswered: more "
                         f"than {self.MAX_OPEN_TRANSACTIONS} SA transactions open"})
        self._flush_closing()  # closed in the order they left the table
        self._close(old)

    def _ls(self, rec: dict) -> None:
        ls = rec["ls"]
        if ls.get("op") not in ("RESOLVE", "resolve") and ls.get("op_code") != 0:
            return
        entry = self.ls.setdefault(ls["seq"], {"request": None, "responses": []})
        if ls.get("request") and rec.get("direction") != "to_kernel":
            entry["request"] = entry["request"] or rec
        else:
            entry["responses"].append(rec)

    # -- joining ---------------------------------------------------------------------------
    CLOSE_BATCH = 256

    def _close_answered(self, n: int) -> None:
        """Take out of the open table up to n of the transactions answered longest ago; they
        are closed CLOSE_BATCH at a time (judging a batch in a row, not one transaction
        between two frames, is what CPython does fastest: see ibpath_scapy.capture.batch)."""
        answered, open_ = self._answered, self.transactions
        while n > 0 and answered:
            key, t, _ = answered.popleft()
            if open_.get(key) is t:
                del open_[key]
                self._closing.append(t)
                n -= 1
        if len(self._closing) >= self.CLOSE_BATCH:
            self._flush_closing()

    def close_older(self, now: float) -> None:
        """Close the answered transactions whose answer is linger_seconds older than `now`
        (capture time), at once (a live stream)."""
        answered, open_ = self._answered, self.transactions
        while answered and answered[0][2] < now - self.linger_seconds:
            key, t, _ = answered.popleft()
            if open_.get(key) is t:
                del open_[key]
                self._closing.append(t)
        self._flush_closing()

    def _flush_closing(self) -> None:
        for t in self._closing:
            self._close(t)
        self._closing.clear()

    def _close(self, t: Transaction) -> None:
        t.seal()
        res = None
        if t.attribute_id == ATTR_PATH_RECORD:
            self.sa_count += 1
            res = self._place_transaction(t)
        if self.on_close is not None:
            self.on_close(t, res)
        service = t.attribute_id == ATTR_SERVICE_RECORD
        if self.keep_closed:
            if res is not None:
                self._mark(res, t)
            self.done.append(t)
            if service:
                self.service_queries.append(t)
            return
        arrows = sa_arrows(t, res.remote if res is not None else "") if self.arrows else None
        if res is not None:  # judged: the resolution keeps what its rules read
            summary = res.transactions[-1] = ClosedTransaction(t)
            summary.arrows = arrows
            self._mark(res, summary)
            self._holding[id(res)] = res
            self._held += 1
            if self._held > self.HELD_TRANSACTIONS and self.spills:
                self.spill_held()
        else:
            if service:  # its service resolution's ladder draws it, if any (audit/ladder.py)
                summary = ClosedTransaction(t)
                summary.arrows = arrows
                self.service_queries.append(summary)
            if arrows:
                self.unplaced_arrows += arrows

    def _mark(self, res: Resolution, t) -> None:
        """Set the resolution's marks (Resolution.marks) that transaction t passes."""
        for i, test in enumerate(self.transaction_marks):
            if test(t):
                res.marks |= 1 << i

    def spill_held(self) -> None:
        """Write the closed transactions the resolutions hold to the Spill file (each
        resolution's as one entry after its earlier ones, 16 to a chunk), and let them go."""
        history = self.RESOLUTION_HISTORY
        # (one that keeps as many as it ever will stays: its next transaction would bring
        # them all back, to let the oldest go)
        self._spill([res for res in self._holding.values()
                     if res.transactions and len(res.transactions) + res.spilled_count < history])
        self._holding.clear()
        self._held = 0

    def _spill(self, resolutions: list[Resolution]) -> None:
        """Their transactions held in memory to the Spill file, each resolution's after its
        earlier ones, a chunk's worth at a time (_spill_part)."""
        if not resolutions:
            return
        if self.spill is None:
            self.spill = Spill()
        if self._spill_steps is not None:  # (C: what it cannot take comes to _spill_part)
            self._spill_steps(resolutions, self.spill.write_text, self._spill_part)
            return
        for i in range(0, len(resolutions), CHUNK_ENTRIES):
            self._spill_part(resolutions[i:i + CHUNK_ENTRIES])

    def _spill_part(self, part: list[Resolution]) -> None:
        """At most CHUNK_ENTRIES resolutions' transactions as one chunk of the Spill file
        (its rows written while they are fresh in the caches), each resolution left with the
        chunk's reference and its transactions' counts."""
        text = (None if self._text is None
                else self._text([(res.spilled, res.transactions) for res in part]))
        if text is not None:
            refs = self.spill.write_text(text, len(part))
        else:
            entries = []
            for res in part:
                ts = res.transactions
                try:
                    rows = [t.row() for t in ts]
                except NotPlain:
                    rows = None
                entries.append((res.spilled, rows, ts))
            refs = self.spill.write_chunk(entries)
        for res, ref in zip(part, refs):
            ts = res.transactions
            res.spilled = ref
            res.spilled_count += len(ts)
            # counted as folded until they come back (restore)
            res.folded = Tally.of(ts).merge(res.folded)
            res.transactions = ()

    def read_back(self, res: Resolution) -> list:
        """A resolution's transactions, those in the Spill file first, without bringing them
        back into the resolution (a ladder drawn and written, one resolution at a time)."""
        if not res.spilled:
            return list(res.transactions)
        back = []
        facts = self._facts
        if len(facts) > self.HELD_TRANSACTIONS:
            facts.clear()
        for kind, items in self.spill.read(res.spilled):
            back += [ClosedTransaction.from_row(r, facts) for r in items] if kind == ROWS else items
        return back + list(res.transactions)

    def restore(self, res: Resolution) -> None:
        """Bring back a resolution's transactions from the Spill file, before those it
        holds (a resolution the rules judge, or one past RESOLUTION_HISTORY)."""
        if not res.spilled:
            return
        back = self.read_back(res)
        for t in back[:res.spilled_count]:
            res.folded.count(t, -1)
        res.transactions = back
        res.spilled = res.spilled_count = 0
        self._holding[id(res)] = res
        self._held += len(back)

    def let_judged_go(self, res: Resolution) -> None:
        """Once the resolution rules judged it: fold its transactions (Resolution.fold), those
        in the Spill file by their counts, for reports that draw no ladder; for a ladder, to
        the Spill file, whence ladder.iter_ladders reads them back (read_back)."""
        self._holding.pop(id(res), None)
        if not self.arrows:
            res.fold()
        elif res.transactions:
            self._spill([res])

    def restore_all(self) -> None:
        """Every resolution's transactions back from the Spill file, and the file closed
        (an audit handed to another process: --jobs, --dask)."""
        if self.spill is not None:
            for res in self.resolutions.values():
                self.restore(res)
            self.close_spill()

    def close_spill(self) -> None:
        """Close the Spill file: what it holds is not read again (reports and --jobs)."""
        if self.spill is not None:
            self.spill.close()
            self.spill = None

    def finish(self) -> None:
        self._flush_closing()
        for t in list(self.transactions.values()):
            self._close(t)
        self.transactions.clear()
        self._answered.clear()
        for res in self.resolutions.values():
            if res.let_go is not None:
                self.frame_records.append({
                    "frame": res.let_go.last_frames[0], "frames": res.let_go.last_frames,
                    "kind": "limit",
                    "limit": f"resolution {res.name}: its {res.let_go.transactions} oldest SA transactions "
                             f"were let go (it keeps its last {self.RESOLUTION_HISTORY}); the "
                             f"resolution rules judged the rest"})
        for b in self.blobs:
            res = self._resolution_for_records(b.get("blob_records", []))
            if res is not None:
                res.attach("blobs", b)
        for entry in self.ls.values():
            req = entry["request"]
            attrs = {a["type_name"]: a.get("value") for a in (req or {}).get("ls", {}).get("attributes", [])}
            res = None
            if req and attrs.get("SGID") and attrs.get("DGID"):
                res = self._resolution(attrs["SGID"], attrs["DGID"], attrs.get("PKEY") or 0xFFFF)
            for r in entry["responses"]:
                res = res or self._resolution_for_records(r.get("blob_records", []))
            if res is not None:
                if req:
                    res.attach("ls_requests", req)
                for r in entry["responses"]:
                    res.attach("ls_responses", r)
        for b in self.extra_blobs:
            res = self._resolution_for_records(b.get("blob_records", []), create=False)
            if res is not None:
                res.attach("extra_blobs", b)
        for c in self.cm_reqs:
            res = self.cm_resolution(c)
            if res is not None:
                res.attach("cm_reqs", c)

    def cm_resolution(self, cm_rec: dict) -> Resolution | None:
        """The resolution of a CM REQ: by its primary GIDs (either way round; native IB and
        RoCEv2 alike, LIDs play no part: they are 0xFFFF on RoCE and off-subnet), the same
        P_Key preferred, else any P_Key (so that a REQ whose P_Key differs from the path's is
        still judged against it)."""
        req = cm_rec["cm_req"]
        local, remote = _gid(req["primary_local_gid"]), _gid(req["primary_remote_gid"])
        if not local or not remote:
            return None
        exact = self._resolution(local, remote, req["pkey"], create=False)
        if exact is not None:
            return exact
        return self._first_by_pair().get(frozenset((local, remote)))

    def _first_by_pair(self) -> dict:
        """The first resolution (in creation order) of each unordered GID pair: one pass over
        the resolutions instead of one per CM REQ; made again when resolutions were added."""
        index = getattr(self, "_pair_index", None)
        if index is None or index[0] != len(self.resolutions):
            pairs: dict = {}
            for (a, b, _pkey), res in self.resolutions.items():
                pairs.setdefault(frozenset((a, b)), res)
            index = self._pair_index = (len(self.resolutions), pairs)
        return index[1]

    def kernel_blobs(self) -> list[dict]:
        """Everything handed to the kernel as a flagged path array, in frame order: blob frames
        (rdma_set_option optvals), LS RESOLVE responses, then the --blob files' blobs."""
        ls = [r for e in self.ls.values() for r in e["responses"] if "blob_records" in r]
        return sorted(self.blobs + ls, key=lambda r: r["frame"]) + list(self.extra_blobs)

    def _resolution(self, local: str, remote: str, pkey: int, create: bool = True) -> Resolution | None:
        if not _gid(local) or not _gid(remote):
            return None
        resolutions = self.resolutions
        res = resolutions.get((local, remote, pkey))
        if res is None:
            res = resolutions.get((remote, local, pkey))
        if res is not None or not create:
            return res
        # one string per GID, not one per query: a storm's pairs share their endpoints
        local, remote = sys.intern(local), sys.intern(remote)
        res = self.resolutions[(local, remote, pkey)] = Resolution(local, remote, pkey)
        return res

    def _place_transaction(self, t: Transaction) -> Resolution | None:
        q = t.query
        components = t.components
        if q is None or not _ENDPOINTS <= components:
            return None  # not a point-to-point path query (e.g. saquery -p: every path)
        if "pkey" in components:
            pkey = q.pkey
        else:  # the P_Key the SA chose, which is what a blob built from the answer carries
            pkey = t.records[0].pkey if t.records else 0xFFFF
        res = self._resolution(q.sgid, q.dgid, pkey)
        if res is not None:
            if type(res.transactions) is tuple:  # spilled or never held one
                res.transactions = []
            res.transactions.append(t)
            if len(res.transactions) + res.spilled_count > self.RESOLUTION_HISTORY:
                self._let_oldest_go(res)
        return res

    def _let_oldest_go(self, res: Resolution) -> None:
        """A resolution past RESOLUTION_HISTORY lets its oldest transaction go (LetGo)."""
        self.restore(res)  # its oldest is in the Spill file: bring them all back
        # let go with its ladder arrows: a ladder draws what its resolution keeps
        # (ladder.let_go_note says how much it no longer draws)
        old = res.transactions.pop(0)
        if res.let_go is None:
            res.let_go = LetGo()
        res.let_go.add(old)
        if self.keep_closed:  # self.done keeps it: not drawn with no resolution either
            self.let_go.add(id(old))

    def _resolution_for_records(self, records: list[dict], create: bool = True) -> Resolution | None:
        for r in records:
            pr = r["path_record"]
            flags = r["flags"]
            if flags & 0x10:  # INBOUND: SGID is the remote end
                res = self._resolution(pr["dgid"], pr["sgid"], pr["pkey"], create)
            else:
                res = self._resolution(pr["sgid"], pr["dgid"], pr["pkey"], create)
            if res is not None:
                return res
        return None


__all__ = ["ClosedTransaction", "FrameList", "KeptFrames", "KeptRecord", "LetGo", "Replay",
           "Resolution", "Tally", "Transaction", "extra_blob_record"]
