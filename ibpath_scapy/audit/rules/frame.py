"""Rules about single frames, including the single-packet rules shared with the Lua plugin."""

from __future__ import annotations

from operator import attrgetter, itemgetter

from ...facts.problems import Code
from ...facts.records import Fact, MadFrame
from ..packet_rules import PACKET_RULES
from ...model import sources
from ..conditions import compile_condition
from ..model import rule


@rule("DECODE-MALFORMED", "warning", "frame",
      sources.CATALOGUE + ": an undecodable frame is reported, never skipped")
def decode_malformed(rec: dict):
    """A frame that cannot be decoded: reported with its number and the reason; the run goes on."""
    if isinstance(rec, Fact):  # a decoder's record: its fields are attributes
        kind, flagged, limit = rec.kind, getattr(rec, "malformed", None), getattr(rec, "limit", None)
    else:
        kind, flagged, limit = rec.get("kind"), rec.get("malformed"), rec.get("limit")
    if kind != "malformed" and not flagged or limit:
        return  # nothing malformed (the common case), or DECODE-LIMIT reports it
    if kind == "malformed" and (error := rec.get("error")) is not None:
        if error.code is not Code.RMPP_UNFINISHED:  # SAR-RMPP reports those
            yield rec.get("frames", [rec["frame"]]), str(error)
    elif kind == "malformed":
        yield rec.get("frames", [rec["frame"]]), "malformed"
    else:
        yield [rec["frame"]], "; ".join(map(str, rec.get("errors", []))) or "malformed"


# engine.py asks these two only about records that can have a finding (see decode_unsupported)
decode_malformed.only_kinds = ("malformed",)
decode_malformed.only_if = ("malformed",)


@rule("DECODE-LIMIT", "warning", "frame",
      sources.CATALOGUE + ": bounded memory and time per frame, every cap reported")
def decode_limit(rec: dict):
    """A cap of the decoder or the analyser was hit, so frames were not fully analysed: a frame
    over the size limit (decode.MAX_FRAME_BYTES, MAX_LIST_FRAME_BYTES), an RMPP transfer over
    its segment limit or evicted from the open-transfer table (rmpp.py caps), an unanswered SA
    transaction evicted from the open-transaction table (Replay.MAX_OPEN_TRANSACTIONS), a
    resolution's oldest transactions let go (Replay.RESOLUTION_HISTORY), unanswered LS or
    umad requests let go from the decoder's memory of them (Assembler.LS_REQUEST_MEMORY,
    UMAD_REQUEST_MEMORY)."""
    if getattr(rec, "limit", None) if isinstance(rec, Fact) else rec.get("limit"):
        error = rec.get("error")
        yield rec.get("frames", [rec["frame"]]), str(error) if error else rec["limit"]


decode_limit.only_if = ("limit",)


# the fields each layer's view is read for, by any audited condition (filled by compiling)
_READS: dict[str, set[str]] = {}
_AUDITED = [(pr, compile_condition(pr, _READS)) for pr in PACKET_RULES if pr.audit]
_HEADER_READS = tuple((layer, tuple(sorted(_READS.get(layer, ()))))
                      for layer in ("MAD", "RMPP", "SAHeader"))
_RECORD_READS = tuple(sorted(_READS.get("PathRecord", ())))
assert set(_READS) <= {"MAD", "RMPP", "SAHeader", "PathRecord"}, _READS
# run_rules asks every packet rule about the same record in turn: the hits of the last record
# are kept so that the conditions run once per record, not once per rule
_last: list = [None, ()]
# The rules that hold, by the values the conditions read (an SA storm repeats a few method /
# attribute / ComponentMask / NumbPath combinations): the conditions run once per combination.
_MEMO: dict[tuple, tuple] = {}
_MEMO_SIZE = 4096


def _getter(names: tuple):
    """A function giving a view's values of `names` as a tuple (None for a missing view or
    field): one attrgetter call on a fact (a decoder's record), the common case."""
    if not names:
        return lambda v: ()
    if len(names) > 1:
        facts, items = attrgetter(*names), itemgetter(*names)
    else:
        facts = (lambda v, g=attrgetter(names[0]): (g(v),))
        items = (lambda v, g=itemgetter(names[0]): (g(v),))

    def values(v):
        if v is None:
            return None
        if isinstance(v, Fact):
            return facts(v)
        try:
            return items(v)
        except KeyError:
            return tuple([v.get(n) for n in names])

    return values


_VALUES = {layer: _getter(names) for layer, names in _HEADER_READS}
_MAD_VALUES, _RMPP_VALUES, _SA_VALUES = _VALUES["MAD"], _VALUES["RMPP"], _VALUES["SAHeader"]
_RECORD_VALUES = _getter(_RECORD_READS)


# A decoder's record (a MadFrame fact) keys the memo in one C call: the header fields the
# conditions read, by dotted attrgetter (a view without a field read keyed by its class: there
# or None); its records by theirs. A view that is None where a field is read raises
# AttributeError, and the record is keyed as any other.
_VIEW = {"MAD": "mad", "RMPP": "rmpp", "SAHeader": "sa"}
# (view, field) of each header value in the key (native/_frametest.c keys by them too)
FACT_READS = tuple((_VIEW[layer], n) for layer, names in _HEADER_READS
                   for n in (names or ("__class__",)))
RECORD_READS = _RECORD_READS
_FACT_HEADERS = attrgetter(*(f"{view}.{n}" for view, n in FACT_READS))
_FACT_RECORD = attrgetter(*_RECORD_READS) if _RECORD_READS else type


def _rules_holding(views: dict, records: list) -> tuple:
    out = []
    for pr, cond in _AUDITED:
        if pr.layer == "PathRecord":
            owns = records
        else:
            own = views.get(pr.layer)
            owns = () if own is None else (own,)
        for own in owns:
            if own is not None and cond(views, own):
                out.append(pr)
                break
    return tuple(out)


def packet_rule_hits(rec: dict):
    """(rule, frames, message) for every single-packet rule that holds on a decoded SA frame,
    evaluated from the same Expr the plugin turns into expert infos."""
    if (rec.kind if isinstance(rec, Fact) else rec.get("kind")) != "sa":
        return ()
    if _last[0] is rec:
        return _last[1]
    # an SA record is a MadFrame fact: its declared fields are read directly. The key: the
    # values every audited condition reads (None for a missing view or field); records with
    # the same key get the same verdicts.
    records = rec.path_records or []
    key = None
    if rec.__class__ is MadFrame:
        try:
            key = (_FACT_HEADERS(rec), tuple(map(_FACT_RECORD, records)))
        except AttributeError:  # a view missing where a field is read
            pass
    if key is None:  # a record written as a dict, or such a fact
        key = (_MAD_VALUES(rec.mad), _RMPP_VALUES(rec.rmpp), _SA_VALUES(rec.sa),
               tuple(map(_RECORD_VALUES, records)))
    holding = _MEMO.get(key)
    if holding is None:
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.clear()
        # every layer view a condition can name
        views = {"MAD": rec.mad, "RMPP": rec.rmpp, "SAHeader": rec.sa,
                 "PathRecord": records[0] if records else None}
        holding = _MEMO[key] = _rules_holding(views, records)
    hits = [(pr, [rec.frame], pr.message) for pr in holding] if holding else ()
    _last[0], _last[1] = rec, hits
    return hits


def _register_packet_rule(pr):
    @rule(pr.rule_id, pr.severity, "frame", pr.source)
    def check(rec: dict, _pr=pr):
        for hit, frames, message in packet_rule_hits(rec):
            if hit is _pr:
                yield frames, message

    check.__doc__ = pr.message
    check.packet_rule = True  # engine.py asks packet_rule_hits once for all of these
    return check


for _pr in PACKET_RULES:
    if _pr.audit:
        _register_packet_rule(_pr)
