"""Audit reports: text (per resolution, for a person at a terminal), JSON and JUnit."""

from __future__ import annotations

import json
from xml.sax.saxutils import escape, quoteattr

from .engine import FileAudit
from .ladder import ladders as _ladders, text_ladder
from .model import RULES

_COLOURS = {"error": "\033[31m", "warning": "\033[33m", "info": "\033[36m"}
_RESET = "\033[0m"


def summary(audits: list[FileAudit]) -> dict:
    s = {"files": len(audits), "packets": 0, "transactions": 0, "resolutions": 0, "blobs": 0,
         "cm_reqs": 0, "findings": {"error": 0, "warning": 0, "info": 0}}
    for a in audits:
        s["packets"] += a.frames
        if a.replay:
            s["transactions"] += a.replay.sa_count
            s["resolutions"] += len(a.replay.resolutions)
            s["blobs"] += len(a.replay.blobs)
            s["cm_reqs"] += len(a.replay.cm_reqs)
        for f in a.findings:
            s["findings"][f.severity] += 1
    return s


def kernel_views(audits: list[FileAudit]) -> list[dict]:
    out = []
    for a in audits:
        if not a.replay:
            continue
        for rec in a.replay.blobs + [r for e in a.replay.ls.values() for r in e["responses"]]:
            if "kernel_view" in rec:
                out.append({"file": a.path, "frame": rec["frame"], "kind": rec["kind"],
                            "profiles": rec["kernel_view"]})
    return out


def to_json(audits: list[FileAudit]) -> str:
    doc = {
        "files": [a.path for a in audits],
        "findings": [f.as_dict() for a in audits for f in a.findings],
        "kernel_view": kernel_views(audits),
        "summary": summary(audits),
    }
    errors = [{"file": a.path, "error": a.error} for a in audits if a.error]
    if errors:
        doc["unreadable"] = errors
    return json.dumps(doc, indent=2)


def to_junit(audits: list[FileAudit]) -> str:
    """One test case per rule per file, failed for each error finding."""
    cases, failures = [], 0
    for a in audits:
        for rid in sorted(RULES):
            hits = [f for f in a.findings if f.rule == rid]
            errs = [f for f in hits if f.severity == "error"]
            body = ""
            if errs:
                failures += 1
                text = "\n".join(f"frames {list(f.frames)}: {f.message}" for f in errs)
                body = f'<failure message={quoteattr(f"{len(errs)} error(s)")}>{escape(text)}</failure>'
            elif hits:
                body = "<system-out>" + escape("\n".join(
                    f"{f.severity} frames {list(f.frames)}: {f.message}" for f in hits)) + "</system-out>"
            cases.append(f'  <testcase classname={quoteattr(a.path)} name={quoteattr(rid)}>{body}</testcase>')
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuite name="ibpath audit" tests="{len(cases)}" failures="{failures}">\n'
            + "\n".join(cases) + "\n</testsuite>\n")


def to_text(audits: list[FileAudit], colour: bool = False, ladder: bool = False) -> str:
    """Findings per resolution; with `ladder`, each resolution's ladder diagram first
    (audit/ladder.py), its findings marked under the messages they rest on."""
    lines = []
    ladders = {}
    if ladder:
        ladders = {(a.path, lad.name): lad for a in audits for lad in _ladders(a)}

    def sev(s):
        return f"{_COLOURS[s]}{s}{_RESET}" if colour else s

    for a in audits:
        lines.append(f"== {a.path}: {a.frames} frames")
        if a.error:
            lines.append(f"   unreadable: {a.error}")
        by_res: dict = {}
        for f in a.findings:
            by_res.setdefault(f.resolution, []).append(f)
        res_names = [r.name for r in (a.replay.resolutions.values() if a.replay else [])]
        for name in res_names + [None]:
            fs = by_res.get(name, [])
            if name is None and not fs and (a.path, None) not in ladders:
                continue
            lines.append(f"-- resolution {name}" if name else "-- not tied to a resolution")
            if (a.path, name) in ladders:
                lines += text_ladder(ladders[(a.path, name)], max_arrows=60)
            if not fs:
                lines.append("   no findings")
            for f in sorted(fs, key=lambda f: (f.frames[:1], f.rule)):
                frames = ",".join(map(str, f.frames))
                lines.append(f"   {a.path}:{frames}: {sev(f.severity)} {f.rule} {f.message}")
    s = summary(audits)
    lines.append(f"== {s['files']} file(s), {s['packets']} frames, {s['transactions']} SA "
                 f"transactions, {s['resolutions']} resolutions, {s['blobs']} blobs: "
                 f"{s['findings']['error']} errors, {s['findings']['warning']} warnings, "
                 f"{s['findings']['info']} infos")
    return "\n".join(lines) + "\n"


def rule_list() -> str:
    lines = []
    for rid in sorted(RULES):
        r = RULES[rid]
        lines.append(f"{rid:28} {r.severity:8} {r.summary}")
        lines.append(f"{'':28} {'':8} source: {r.source}")
    return "\n".join(lines) + "\n"
