"""The ladder's arrows of an SA transaction: one message per captured frame (each query and
retry, each answer frame or RMPP segment, the requester's RMPP ACKs). Apart from ladder.py so
that the replay can draw a transaction when it lets it go (Replay.arrows)."""

from __future__ import annotations

from ..layers.mad import ATTR_SERVICE_RECORD, METHOD_RESP
from ..facts.rmpp import carries_whole_message


def _rev(records: list[dict]) -> str:
    vals = sorted({r.get("reversible") for r in records if "reversible" in r})
    return "Reversible=" + "/".join(str(v) for v in vals) if vals else ""


def sa_arrows(t, remote: str) -> list[tuple]:
    """(frame, kind, src lane, dst lane, label) of each frame of an SA transaction (a
    Transaction with its frames); `remote` is its resolution's remote GID (a query from it
    asks for the return path)."""
    out = []
    ret = " (return path)" if t.query and t.query.get("sgid") == remote else ""
    service = t.attribute_id == ATTR_SERVICE_RECORD
    for i, rec in enumerate(t.requests):
        method = rec["mad"].get("method_name", hex(rec["mad"]["method"]))
        if service:  # the kernel's query of a service resolution: what it asks by
            method += " ServiceRecord"
            ask = f"by {'+'.join(sorted(t.components)) or 'nothing (ComponentMask 0)'}"
        else:
            ask = ("asks Reversible=1" if t.asks_reversible() else
                   "does not ask Reversible")
        retry = " retry" if i else ""
        out.append((rec["frame"], "sa-query", "resolver", "SA",
                    f"SA {method}{retry}{ret} tid 0x{t.tid:x}: {ask}"))
    for rec in t.responses:
        mad = rec["mad"]
        if not mad["method"] & METHOD_RESP:
            out.append((rec["frame"], "rmpp-ack", "resolver", "SA", f"RMPP ACK tid 0x{t.tid:x}"))
            continue
        method = mad.get("method_name", hex(mad["method"]))
        if rec.get("rmpp_control"):
            label = f"SA {method} RMPP control tid 0x{t.tid:x}"
        elif not carries_whole_message(rec):
            label = f"SA {method} RMPP segment {rec['rmpp'].get('segment_number', '?')}"
        else:
            recs = rec.get("path_records", [])
            status = mad.get("status", 0)
            if service:
                recs = rec.get("sa_records") or []
                method += " ServiceRecord"
            label = (f"SA {method}{ret} status 0x{status:04x}: {len(recs)} record(s) "
                     f"{_rev(recs)}").rstrip()
        out.append((rec["frame"], "sa-answer", "SA", "resolver", label))
    return out
