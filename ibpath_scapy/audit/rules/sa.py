"""SA PathRecord query and response rules (audit-rules.md "SA query and response rules").

Sources: OpenSM osm_sa_path_record.c / osm_sa.c (wire-formats.md §8), kernel mad_rmpp.c
(§2), IBA MAD method/response pairing (§1).
"""

from __future__ import annotations

import ipaddress
from operator import attrgetter

from ...layers.mad import METHOD_RESP, SA_STATUS, status_text
from ...layers.sa import PathRecord, selector_pairs
from ...facts.render import field_text
from ...facts.problems import RMPP_CODES, Code, of_code
from ...facts.rmpp import MAX_SEGMENTS, RMPP_DATA_SIZE
from ...model import sources
from ..conditions import compile_condition, packet_rule
from ..model import rule
from ..replay import Transaction

# Query components compared one to one with every answered record (SAR-MISMATCH).
_EXACT = ["service_id", "dgid", "sgid", "dlid", "slid", "raw_traffic", "flow_label", "hop_limit",
          "tclass", "pkey", "qos_class", "sl"]
# (value field, selector field): selector 0 greater than, 1 less than, 2 exactly, 3 best
_SELECTED = list(PathRecord.SELECTED.items())


def _same(name: str, a, b) -> bool:
    if a == b:
        return True
    if name in ("dgid", "sgid"):  # the same GID may be spelled two ways (::ffff:a.b.c.d)
        return ipaddress.IPv6Address(a) == ipaddress.IPv6Address(b)
    return False


# IBA's responses that are not the request's method with the R bit: Set() is answered by
# GetResp() (there is no SetResp), GetTraceTable() by GetTableResp()
_RESPONSE_METHOD = {0x02: 0x81, 0x13: 0x92}


@rule("SAQ-BAD-METHOD", "error", "transaction", "IBA §13.4.5 method/response pairing")
def response_method(t: Transaction):
    """A response whose method is not the one IBA pairs with the request's: the request's
    with the R bit set, GetResp for a Set, GetTableResp for a GetTraceTable."""
    if t.request is None:
        return ()
    method = t.request.mad.method
    want = _RESPONSE_METHOD.get(method, method | 0x80)
    for r in t.responses:
        if r.rmpp_control:
            continue
        if r.mad.method != want:
            return [([t.request["frame"], r["frame"]],
                     f"response method 0x{r['mad']['method']:02x} to request method "
                     f"0x{t.request['mad']['method']:02x} (expected 0x{want:02x})")]
    return ()


# SAQ-SELECTOR-MISSING: the plugin's expert info and this check decide by one Expr
# (packet_rules.PACKET_RULES); the check says which half pair and what the SA answered
_SELECTOR_PR, _SELECTOR_MISSING = packet_rule("SAQ-SELECTOR-MISSING")
# its verdict by the values its condition reads of the request (the MAD header's and the SA
# header's fields, by dotted attrgetter): a storm asks the same few headers again and again
_SELECTOR_READS: dict[str, set[str]] = {}
compile_condition(_SELECTOR_PR, _SELECTOR_READS)
assert set(_SELECTOR_READS) <= {"MAD", "SAHeader"}, _SELECTOR_READS
_SELECTOR_KEY = attrgetter(*(f"{view}.{n}" for layer, view in (("MAD", "mad"), ("SAHeader", "sa"))
                             for n in sorted(_SELECTOR_READS.get(layer, ()))))
_SELECTOR_MEMO: dict[tuple, bool] = {}
_PAIRS = selector_pairs()
_SELECTOR_NAMES = {f.name: f.i2s for f in PathRecord.fields_desc
                   if f.name in PathRecord.SELECTED.values()}


@rule("SAQ-SELECTOR-MISSING", "warning", "transaction", sources.OPENSM_PR_SELECTED)
def selector_missing(t: Transaction):
    """A PathRecord query has MTU, rate or PacketLifeTime without its selector bit, or the converse.

    OpenSM ignores either half of such a pair: it judges a path's MTU, rate and
    PacketLifeTime against a query only when both bits of the pair are set
    (pr_rcv_get_path_parms: "we silently ignore cases where only the MTU selector is
    defined", and the value alone is not read either), so the query asks for any MTU, rate
    or lifetime and is answered with whatever the path has: a resolver asking for MTU 4096
    with the MTU bit alone gets a 2048-byte path without being told. Each half pair is named
    with the value asked and, when the SA answered, what it answered.
    Source: OpenSM osm_sa_path_record.c pr_rcv_get_path_parms; IBA 15.2.5.16 Table 205.
    """
    r = t.request
    sa = r.sa if r is not None else None
    if sa is None:
        return ()
    try:
        key = _SELECTOR_KEY(r)
    except AttributeError:  # a view without a field read: no memo
        key = None
    hit = _SELECTOR_MEMO.get(key) if key is not None else None
    if hit is None:
        hit = bool(_SELECTOR_MISSING({"MAD": r.mad, "SAHeader": sa}, sa))
        if key is not None:
            if len(_SELECTOR_MEMO) >= 4096:
                _SELECTOR_MEMO.clear()
            _SELECTOR_MEMO[key] = hit
    if not hit:
        return ()
    mask, q = sa.component_mask, t.query
    halves = []
    for value, selector, vbit, sbit in _PAIRS:
        has_value, has_selector = mask >> vbit & 1, mask >> sbit & 1
        if has_value == has_selector:
            continue
        half = (f"{value} (bit {vbit}) without {selector} (bit {sbit})" if has_value else
                f"{selector} (bit {sbit}) without {value} (bit {vbit})")
        if q is not None:
            how = _SELECTOR_NAMES[selector].get(q[selector], f"selector {q[selector]}")
            half += f", so {value} {how} {field_text(value, q[value])} is not asked"
        got = sorted({field_text(value, rec[value]) for rec in t.records})
        if got:
            half += f" (the answer, frame {t.completing_frame}, has {', '.join(got)})"
        halves.append(half)
    return [([x.frame for x in t.requests], (
        f"PathRecord query tid 0x{t.tid:016x}, ComponentMask 0x{mask:x}: "
        + "; ".join(halves) + ": OpenSM reads neither half of a pair alone"))]


@rule("SAQ-NO-RESPONSE", "warning", "transaction",
      "drivers/infiniband/core/mad.c timeout_sends; sa_query.c send_handler (-ETIMEDOUT)")
def no_response(t: Transaction):
    """A request never answered in the capture (after its retries)."""
    if t.requests and not t.answered:
        return [([r["frame"] for r in t.requests], (
            f"PathRecord request tid 0x{t.tid:016x} never answered "
            f"({len(t.requests)} transmission{'s' if len(t.requests) > 1 else ''})"))]
    return ()


@rule("SAQ-RETRY", "info", "transaction",
      "drivers/infiniband/core/mad.c retry_send (the same TID sent again)")
def retry(t: Transaction):
    """A request retransmitted with the same TID."""
    if len(t.requests) > 1:
        return [([r["frame"] for r in t.requests],
                 f"request tid 0x{t.tid:016x} sent {len(t.requests)} times")]
    return ()


@rule("SAR-STATUS", "info", "transaction", sources.SA_STATUS)
def status(t: Transaction):
    """A response with a non-zero status; the message decodes it."""
    for r in t.responses:
        st = r.mad.status
        if st:
            name = SA_STATUS.get(st & 0xFF00)
            return [([r["frame"]], f"SA status 0x{st:04x} {status_text(st, 3)}" + (
                " (the resolver must not hand a path over)" if name else ""))]
    return ()


# per ComponentMask's names: the _EXACT fields masked, a getter of their values, whether
# Reversible is masked and the _SELECTED pairs masked (an SA storm asks a few masks)
_PLANS: dict[frozenset, tuple] = {}


def _plan(comps: frozenset) -> tuple:
    plan = _PLANS.get(comps)
    if plan is None:
        if len(_PLANS) >= 4096:
            _PLANS.clear()
        exact = [n for n in _EXACT if n in comps]
        plan = _PLANS[comps] = (
            exact, attrgetter(*exact) if exact else None, "reversible" in comps,
            [(val, sel) for val, sel in _SELECTED if val in comps and sel in comps])
    return plan


def _contradicted(q, rec, comps: frozenset) -> list[str]:
    """The masked fields of the query q that the answered record rec contradicts."""
    # q and rec are PathRecord facts: their declared fields are read directly
    exact, values, reversible, selected = _plan(comps)
    if values is not None and values(q) == values(rec):
        bad = []  # every masked field equal (the common case): none contradicted
    else:
        bad = [n for n in exact if not _same(n, getattr(q, n), getattr(rec, n))]
    if reversible and q.reversible == 1 and rec.reversible != 1:
        bad.append("reversible")
    for val, sel in selected:
        want, got, s = getattr(q, val), getattr(rec, val), getattr(q, sel)
        ok = {0: got > want, 1: got < want, 2: got == want, 3: True}[s]
        if not ok:
            bad.append(val)
    return bad


@rule("SAR-MISMATCH", "error", "transaction", "OpenSM osm_sa_path_record.c (component matching)")
def mismatch(t: Transaction):
    """A response record contradicts a masked field of the query (SGID, DGID, SLID, DLID,
    P_Key, SL, ...); or Reversible was asked with bit 1 and a record is not reversible."""
    q = t.query
    if q is None or not t.records:
        return ()
    comps = t.components
    _, values, reversible, selected = _plan(comps)
    # the common case, asked here once per record: every masked field equal, no selector
    # pair masked, and a reversible path asked for and answered (else _contradicted says)
    want = values(q) if values is not None and not selected else None
    rev = reversible and q.reversible == 1
    hits = []
    for i, rec in enumerate(t.records):
        if want is not None and values(rec) == want and not (rev and rec.reversible != 1):
            continue
        # (no memo: with _plan's getter a verdict costs less than a memo's key, and a storm's
        # records are all new)
        bad = _contradicted(q, rec, comps)
        if bad:
            detail = ", ".join(f"{n} {rec[n]} (asked {q[n]})" for n in bad)
            hits.append(([t.request.frame, t.completing_frame],
                         f"record {i} contradicts the query: {detail}"))
    return hits


@rule("SAR-GET-MULTI", "error", "transaction", "OpenSM osm_sa_respond (C15-0.1.30)")
def get_multi(t: Transaction):
    """A GetResp (0x81) carrying more than one record."""
    hits = []
    for r in t.responses:
        if r.mad.method == 0x81 and len(r.path_records or ()) > 1:
            hits.append(([r["frame"]],
                         f"GetResp carries {len(r['path_records'])} records; Get returns one"))
    return hits


@rule("SAR-RMPP", "error", "transaction", "kernel mad_rmpp.c send_next_seg/get_mad_len")
def rmpp_rules(t: Transaction):
    """An RMPP segment sequence breaks the rules: segment numbers not 1..N, FIRST/LAST flags
    wrong, PayloadLength inconsistent with the kernel's rules, missing segments."""
    # the segments the receiver kept: those it drops (SAR-RMPP-RETRY) are no part of the
    # sequence
    # (the responses' declared fields, read as attributes: MadFrame facts or what a
    # transaction keeps of them)
    # (a loop, not a comprehension: most transactions have one response and no segment,
    # and a comprehension is a function call of its own)
    segs = []
    for r in t.responses:
        rmpp = r.rmpp
        if (rmpp is not None and (rmpp.rmpp_flags or 0) & 1 and rmpp.rmpp_type == 1
                and not r.rmpp_dropped):
            segs.append(r)
    if not segs or (len(segs) == 1 and t.answered and not segs[0].errors
                    and segs[0].rmpp.segment_number == 1):
        return ()  # one whole segment, numbered 1, answered, no problem: the common case
    return list(_rmpp_breaks(t, segs))


def _rmpp_breaks(t: Transaction, segs: list):
    """SAR-RMPP's findings in the segments segs the receiver kept of t."""
    for r in segs:
        for p in r.errors or ():
            if p.code in RMPP_CODES:
                yield [r.frame], str(p)
    by_num = {r.rmpp.segment_number: r for r in segs}
    if len(by_num) == 1 and 1 in by_num and t.answered:
        return  # one whole segment, numbered 1, answered: nothing below holds
    frames = [r.frame for r in segs]
    n = max(by_num)
    below = sorted(k for k in by_num if k < 1)
    if below:  # segment numbers count from 1 (a lone FIRST|LAST DATA segment numbered 0, ...)
        yield [by_num[k].frame for k in below], (
            f"RMPP transfer tid 0x{t.tid:016x}: segment number {below[0]} outside 1..N")
        if n < 1:
            return
    # a hostile segment number (up to 2^32) must not make the analyser walk to it
    missing = [k for k in range(1, min(n, MAX_SEGMENTS) + 1) if k not in by_num][:20]
    if n > MAX_SEGMENTS:
        yield frames, (f"RMPP transfer tid 0x{t.tid:016x}: segment number {n} beyond the "
                       f"{MAX_SEGMENTS} segments the analyser follows")
        return
    if missing or not t.answered:
        yield frames, (f"RMPP transfer tid 0x{t.tid:016x}: segments {missing} missing"
                       if missing else f"RMPP transfer tid 0x{t.tid:016x}: no LAST segment")
        return
    if n == 1:
        return
    first, last = by_num[1].rmpp, by_num[n].rmpp
    if first.rmpp_flags & 7 != 3 or last.rmpp_flags & 7 != 5:
        yield [by_num[1].frame, by_num[n].frame], "FIRST/LAST flags wrong"
    for k in range(2, n):
        m = by_num[k].rmpp
        if m.rmpp_flags & 6 or m.payload_length != 0:
            yield [by_num[k].frame], f"middle segment {k}: flags 0x{m.rmpp_flags:x}, PayloadLength {m.payload_length} (kernel: ACTIVE only, 0)"
    want_first = (n - 1) * RMPP_DATA_SIZE + last.payload_length
    if first.payload_length != want_first:
        yield [by_num[1].frame, by_num[n].frame], (
            f"first PayloadLength {first.payload_length}, expected {want_first} "
            f"({n} segments, last PayloadLength {last.payload_length})")


@rule("SAR-RMPP-RETRY", "info", "transaction",
      "kernel mad_rmpp.c continue_rmpp/find_seg_location/complete_rmpp (receiver), "
      "ib_retry_rmpp/send_next_seg (sender)")
def rmpp_retry(t: Transaction):
    """RMPP segments the receiving kernel drops: segments resent after an ACK timeout (the
    sender's ib_retry_rmpp rewinds to the last ACK and sends again), which the receiver
    already holds or whose transfer it completed, and segments of no open transfer. The
    reassembly goes on without them, as the kernel's does; like SAQ-RETRY, one info per
    transaction naming the frames."""
    for r in t.responses:  # (the common case, none dropped, without a comprehension)
        if r.rmpp_dropped:
            break
    else:
        return ()
    dropped = [r for r in t.responses if r.rmpp_dropped]
    return [([r["frame"] for r in dropped], (
        f"RMPP transfer tid 0x{t.tid:016x}: {len(dropped)} segment"
        f"{'s' if len(dropped) > 1 else ''} dropped by the receiver as the kernel does: "
        + "; ".join(f"frame {r['frame']}: {r['rmpp_dropped']}" for r in dropped[:5])
        + (f"; {len(dropped) - 5} more" if len(dropped) > 5 else "")))]


@rule("SAR-RESERVED", "warning", "frame",
      "IBA 15.2.5.16 PathRecord (reserved fields); kernel sa_query.c path_rec_table "
      "(ib_unpack skips them)")
def sar_reserved(rec: dict):
    """A PathRecord of an SA answer has reserved bits set (the 3 bits after NumbPath, the 48
    at the end).

    IBA has the sender zero reserved fields and receivers ignore them: the kernel's
    path_rec_table skips them, and so does librdmacm, so the path works today. An SA that
    leaves them set sends an unzeroed buffer or a record built from the wrong layout, and
    ibacm copies the record verbatim into the path array a later kernel may read more of.
    Reserved bits of a query's template are not judged: no SA reads them."""
    if rec.get("kind") != "sa" or not rec["mad"]["method"] & METHOD_RESP:
        return
    for p in of_code(rec, Code.PR_RESERVED):
        yield [rec["frame"]], (f"SA answer tid 0x{rec['mad']['transaction_id']:016x}: reserved "
                               f"PathRecord bits set in record(s) {list(p.args[0])}; receivers "
                               "ignore them (sa_query.c path_rec_table)")


sar_reserved.only_if = ("errors",)


@rule("UMAD-CUT", "warning", "frame",
      "kernel user_mad.c copy_recv_mad (a process reads an RMPP answer whole, or the read "
      "fails with ENOSPC) and mad_rmpp.c get_mad_len (unpadded); ibsim's umad2sim forwards "
      "256 bytes of a MAD")
def umad_cut(rec: dict):
    """An RMPP message a process read from (or wrote to) a umad fd holds bytes past its last
    whole record: the message was cut on its way.

    A kernel hands a process an RMPP answer whole, the first segment's headers and then
    every segment's data without the padding, so its data is whole records of
    AttributeOffset x 8 bytes; a buffer too small fails the read with ENOSPC instead of
    cutting it. A cut message comes from a transport without RMPP: ibsim's umad2sim forwards
    the first 256 bytes of any MAD (and damages MAD bytes 224 to 255 of what a process reads),
    so the client sees at most 200 data bytes and the last record it sees may be damaged.
    What the records say then is the transport's doing, not the SA's."""
    if rec.get("kind") != "sa":
        return
    for p in of_code(rec, Code.UMAD_CUT):
        yield [rec["frame"]], (f"SA {rec['mad']['method_name']} tid "
                               f"0x{rec['mad']['transaction_id']:016x}: {p}; a kernel hands "
                               "an RMPP answer over whole (user_mad.c copy_recv_mad), "
                               "umad2sim forwards 256 bytes of a MAD")


umad_cut.only_if = ("errors",)
