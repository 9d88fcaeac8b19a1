"""Rules about single frames, including the single-packet rules shared with the Lua plugin."""

from __future__ import annotations

from ...expr import Env
from ...packet_rules import PACKET_RULES
from ..model import rule


@rule("DECODE-MALFORMED", "warning", "frame", "audit-rules.md: also expected of the analyser")
def decode_malformed(rec: dict):
    """A frame that cannot be decoded: reported with its number and the reason; the run goes on."""
    if rec.get("kind") == "malformed" and "RMPP transfer" not in rec.get("error", ""):
        yield rec.get("frames", [rec["frame"]]), rec.get("error", "malformed")
    elif rec.get("malformed"):
        yield [rec["frame"]], "; ".join(rec.get("errors", [])) or "malformed"


# Decoded-record views of the layers the packet rules name.
def _layer_values(rec: dict, layer: str, index: int = 0) -> dict | None:
    if layer == "MAD":
        return rec.get("mad")
    if layer == "RMPP":
        return rec.get("rmpp")
    if layer == "SAHeader":
        return rec.get("sa")
    if layer == "PathRecord":
        recs = rec.get("path_records") or []
        return recs[index] if index < len(recs) else None
    return None


def packet_rule_hits(rec: dict):
    """(rule, frames, message) for every single-packet rule that holds on a decoded SA frame,
    evaluated from the same Expr the plugin turns into expert infos."""
    if rec.get("kind") != "sa":
        return
    for pr in PACKET_RULES:
        if not pr.audit:
            continue
        n = len(rec.get("path_records") or []) if pr.layer == "PathRecord" else 1
        for i in range(max(n, 0)):
            own = _layer_values(rec, pr.layer, i)
            if own is None:
                continue

            def field(layer, name, own=own):
                part = None
                if name.endswith(("__hi", "__lo")):
                    name, part = name[:-4], name[-2:]
                vals = own if layer is None else _layer_values(rec, layer)
                v = int((vals or {}).get(name, 0) or 0)
                return v >> 32 if part == "hi" else (v & 0xFFFFFFFF if part == "lo" else v)

            if pr.condition.evaluate(Env(field)):
                yield pr, [rec["frame"]], pr.message
                break


def _register_packet_rule(pr):
    @rule(pr.rule_id, pr.severity, "frame", f"packet_rules.py (plugin expert {pr.rule_id})")
    def check(rec: dict, _pr=pr):
        for hit, frames, message in packet_rule_hits(rec):
            if hit is _pr:
                yield frames, message

    check.__doc__ = pr.message
    return check


for _pr in PACKET_RULES:
    if _pr.audit:
        _register_packet_rule(_pr)
