"""What `ibpath resolve` prints: the queries and answers, the path array and every kernel
profile's view of it, as text or as one JSON object."""

from __future__ import annotations

from ..facts.values import path_record_dict
from ..facts.kernelview import PROFILE_NAMES
from ..layers.mad import METHODS, MAD
from ..layers.pathdata import flags_text
from ..facts.render import path_record_line, query_line
from ..layers.sa import component_fields
from .kernel import LAYOUTS, NO_CAPABILITY_FILE
from .live import LiveAnswer
from .run import Outcome


def answer_dict(a: LiveAnswer) -> dict:
    """One transaction in JSON form."""
    mask = a.component_mask
    return {"role": a.role, "method": METHODS.get(MAD(a.request).method), "tid": a.tid,
            "component_mask": mask, "components": component_fields(mask),
            "query": path_record_dict(a.query), "status": a.status,
            "status_text": a.status_text(),
            "records": [path_record_dict(r) for r in a.records]}


def outcome_dict(out: Outcome, port: dict | None) -> dict:
    """The whole resolution in JSON form (port: the local port as umad.PortInfo.to_dict)."""
    d = {"sgid": out.sgid, "dgid": out.dgid, "port": port, "kernel": out.target.to_dict(),
         "layout_asked": out.layout_asked, "layout": out.layout,
         "queries": [answer_dict(a) for a in out.answers]}
    if out.records is None:
        bad = out.failed
        d["error"] = {"role": bad.role, "status": bad.status, "status_text": bad.status_text()}
        return d
    d["blob"] = {"length": len(out.blob), "hex": out.blob.hex(), "records": [
        {"index": i, "flags": f, "flags_text": flags_text(f), "from": out.role_of(i),
         "path_record": path_record_dict(r)} for i, (f, r) in enumerate(out.records)]}
    d["kernel_view"] = {n: c.to_dict() for n, c in out.views.items()}
    return d


def _roles(choice) -> str:
    roles = [(k, getattr(choice, k)) for k in ("gmp", "forward", "inbound", "alternate")]
    return " ".join(f"{k} {v}" for k, v in roles if v is not None)


def outcome_lines(out: Outcome, port: dict | None) -> list[str]:
    """The resolution as text."""
    lines = [f"ibpath resolve {out.sgid} → {out.dgid}"]
    if port:
        lines.append(f"  port {port['ca']} port {port['port']} LID {port['lid']}; SA at "
                     f"LID {port['sm_lid']} SL {port['sm_sl']} (the port's SM)")
    lines.append(f"  kernel: {out.target.why()}")
    lines.append(f"  ({NO_CAPABILITY_FILE})")
    lines.append("queries:")
    for k, a in enumerate(out.answers, 1):
        mask = a.component_mask
        lines.append(f"  {k}. {a.role:<7} {METHODS.get(MAD(a.request).method)} tid "
                     f"0x{a.tid:08x} comp_mask 0x{mask:x} ({' '.join(component_fields(mask))}):"
                     f" {query_line(path_record_dict(a.query), component_fields(mask))}")
        if a.status:
            lines.append(f"     status 0x{a.status:04x} ({a.status_text()})")
        for r in a.records:
            lines.append(f"     → {path_record_line(path_record_dict(r))}")
    if out.records is None:
        bad = out.failed
        lines.append(f"no path array: the SA answered the {bad.role} query with status "
                     f"0x{bad.status:04x} ({bad.status_text()})")
        return lines
    layout = out.layout
    lines.append(f"path array ({len(out.blob)} bytes), layout {layout} "
                 f"(--layout {out.layout_asked}): {LAYOUTS.get(layout, 'records as below')}")
    for i, (f, r) in enumerate(out.records):
        lines.append(f"  [{i}] {flags_text(f)} (0x{f:02x}) from the {out.role_of(i)} answer")
        lines.append(f"      {path_record_line(path_record_dict(r))}")
    lines.append("kernel view:")
    for name in PROFILE_NAMES:
        c = out.views[name]
        mark = "*" if name == out.target.profile else " "
        verdict = f"takes {_roles(c)}" if c.accepted else f"rejects it ({c.outcome})"
        lines.append(f" {mark}{name:<12} {verdict}: {c.action}")  # ls-multi-6.1
    return lines
