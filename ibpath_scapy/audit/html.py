"""The audit as one self-contained HTML page: summary, a ladder diagram per resolution (inline
SVG) with the findings attached to the messages they rest on, the decoded PathRecords side by
side, and the kernel view of every blob.

No script, no external resource: the page is inline CSS and SVG only, every text escaped.
Large captures stay small and quick to load: after the first `full_ladders` diagrams of a
file, a resolution whose messages and findings have the shape of one already drawn points to it; at
most `max_ladders` resolutions are drawn (the others are listed with their findings), at
most `max_arrows` messages per diagram, `max_findings` finding rows and `max_blobs`
kernel-view rows; each cut is stated with its count on the page.

The page fits a 1280 px window: arrow labels longer than `LABEL_CHARS` are cut with "…" and
the full text in a <title> (shown on hover), wide tables scroll inside their own box, long
file names break. PathRecord values are shown as every ibpath output shows them (render.py):
"2048 (4)", "10 Gb/s (3)", "1.074 s (18)", LIDs in decimal.

Stable hooks for tools and tests (tests/test_html_report.py):
  table.files tr.file[data-file][data-error][data-warning][data-info]    one per input, with
                                                                          a link to its section
  section.file#file-N[data-file]                                          one per input
  section.ladder[data-file][data-resolution][data-messages][data-drawn][data-same-as]
                                                                          one per ladder
  g.arrow[data-frame][data-kind][data-src][data-dst][data-arrow]          one per drawn message
  svg text.lane-name[data-lane]                                           one per lane drawn
  tr.finding[data-rule][data-severity][data-frames][data-file][data-arrow] one per finding
  #summary td[data-count=KEY]                                            summary numbers
  table.kernel-view tr.blob[data-file][data-frame]                        one per blob
"""

from __future__ import annotations

import io
import itertools
import shutil
import tempfile
from collections import Counter
from html import escape

from .. import __version__
from ..facts.render import field_text
from .engine import FileAudit
from .ladder import Arrow, Ladder, iter_ladders, let_go_note
from .model import Finding
from .report import kernel_views, summary

LANE_STEP = 150  # pixels between two lanes; a ladder draws its own lanes (Ladder.lanes)
ROW = 24  # height of a message row in the diagram
SUB = 18  # height of a finding marker row under its message
TOP = 34
LABEL_CHARS = 64  # an arrow label longer than this is cut, its full text on hover

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"DejaVu Sans",sans-serif;margin:1.5em;color:#1b1f24}
h1{font-size:1.5em;margin:0 0 .5em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ccd}
h3{font-size:1.05em;margin:1.2em 0 .3em;font-family:monospace}
table{border-collapse:collapse;margin:.4em 0}td,th{border:1px solid #ccd;padding:2px 6px;
text-align:left;vertical-align:top}th{background:#eef}
.sev-error{color:#b00020}.sev-warning{color:#9a6200}.sev-info{color:#005a9c}
tr.finding.sev-error td:first-child{border-left:4px solid #b00020}
tr.finding.sev-warning td:first-child{border-left:4px solid #e0a000}
tr.finding.sev-info td:first-child{border-left:4px solid #3b82c4}
svg.ladder{display:block;font:12px monospace;margin:.3em 0;max-width:100%;height:auto}
.scroll{overflow-x:auto;max-width:100%}h2.mono,td.path{word-break:break-all}
table.files td.n{text-align:right}
svg .lane{stroke:#889;stroke-width:1}svg .lane-name{font-weight:bold;text-anchor:middle}
svg .arrow line{stroke:#333;stroke-width:1.4}svg .arrow.sev-error line{stroke:#b00020;stroke-width:2.2}
svg .arrow.sev-warning line{stroke:#e0a000;stroke-width:2.2}svg .arrow.sev-info line{stroke:#3b82c4}
svg .arrow text{fill:#1b1f24}svg .marker.sev-error{fill:#b00020}svg .marker.sev-warning{fill:#9a6200}
svg .marker.sev-info{fill:#005a9c}
td.diff{background:#ffe3e3;font-weight:bold}td.frames{word-break:break-all;max-width:24em}.note{color:#555}.mono{font-family:monospace}
section.ladder{margin-bottom:1.5em}details>summary{cursor:pointer}
"""


def _e(x) -> str:
    return escape(str(x), quote=True)


def _frames(frames) -> str:
    return ",".join(str(f) for f in frames)


def _worst(findings: list[Finding]) -> str | None:
    for sev in ("error", "warning", "info"):
        if any(f.severity == sev for f in findings):
            return sev
    return None


# -- summary ------------------------------------------------------------------------------------

def _profiles(views: list[dict]) -> dict[str, Counter]:
    out: dict[str, Counter] = {}
    for v in views:
        for name, choice in v["profiles"].items():
            out.setdefault(name, Counter())[choice["outcome"]] += 1
    return out


def _summary(audits: list[FileAudit], views: list[dict]) -> str:
    s = summary(audits)
    rows = [("files", s["files"]), ("frames", s["packets"]),
            ("SA transactions", s["transactions"]), ("resolutions", s["resolutions"]),
            ("blobs", s["blobs"]), ("CM REQs", s["cm_reqs"]),
            ("errors", s["findings"]["error"]), ("warnings", s["findings"]["warning"]),
            ("infos", s["findings"]["info"])]
    keys = ["files", "frames", "transactions", "resolutions", "blobs", "cm_reqs", "error",
            "warning", "info"]
    for k, label in (("cm_ids", "cm_ids"), ("acm_exchanges", "ACM exchanges")):
        if s[k]:  # ibpath record's captures
            rows.insert(6, (label, s[k]))
            keys.insert(6, k)
    body = "".join(f'<tr><th>{_e(label)}</th><td data-count="{k}">{v}</td></tr>'
                   for (label, v), k in zip(rows, keys))
    prof = _profiles(views)
    prow = "".join(
        f'<tr data-profile="{_e(p)}"><th>{_e(p)}</th><td>'
        + ", ".join(f"{n} {_e(o)}" for o, n in sorted(c.items())) + "</td></tr>"
        for p, c in sorted(prof.items()))
    return (f'<section id="summary"><h2>Summary</h2><table>{body}</table>'
            + _file_table(audits)
            + "<h3>Kernel profiles (outcome of each blob, per consumer)</h3>"
            + (f'<table class="profiles">{prow}</table>' if prow else
               '<p class="note">no blob or LS response in the input</p>')
            + "</section>")


def _file_table(audits: list[FileAudit]) -> str:
    """One row per input: its frames and findings by severity, linking to its section."""
    rows = []
    for fi, a in enumerate(audits):
        n = Counter(f.severity for f in a.findings)
        worst = _worst(a.findings)
        note = f' <span class="sev-error">unreadable: {_e(a.error)}</span>' if a.error else ""
        rows.append(
            f'<tr class="file{f" sev-{worst}" if worst else ""}" data-file="{_e(a.path)}" '
            + "".join(f'data-{sev}="{n[sev]}" ' for sev in ("error", "warning", "info"))
            + f'><td class="mono path"><a href="#file-{fi}">{_e(a.path)}</a>{note}</td>'
            f'<td class=n>{a.frames}</td>'
            + "".join(f'<td class="n{f" sev-{sev}" if n[sev] else ""}">{n[sev]}</td>'
                      for sev in ("error", "warning", "info")) + "</tr>")
    return ('<h3>Files</h3><div class=scroll><table class="files"><tr><th>file</th>'
            "<th>frames</th><th>errors</th><th>warnings</th><th>infos</th></tr>"
            + "".join(rows) + "</table></div>")


# -- ladder ---------------------------------------------------------------------------------

def _label(text: str, x: int, y: int, cls: str = "") -> str:
    """An SVG text, cut to LABEL_CHARS with the whole text in a <title> (shown on hover)."""
    c = f' class="{cls}"' if cls else ""
    if len(text) <= LABEL_CHARS:
        return f'<text{c} x="{x}" y="{y}">{_e(text)}</text>'
    return (f'<text{c} x="{x}" y="{y}"><title>{_e(text)}</title>'
            f"{_e(text[:LABEL_CHARS - 1])}…</text>")


def _lane_x(lad: Ladder) -> dict[str, int]:
    return {name: 70 + LANE_STEP * i for i, name in enumerate(lad.lanes)}


def _arrow_svg(lad_id: str, a: Arrow, y: int, sev: str | None, lane_x: dict[str, int],
               label_x: int) -> str:
    x1, x2 = lane_x[a.src], lane_x[a.dst]
    head = -8 if x2 > x1 else 8
    cls = f"arrow sev-{sev}" if sev else "arrow"
    return (f'<g class="{cls}" id="{lad_id}-a{a.number}" data-arrow="{a.number}" '
            f'data-frame="{a.frame}" data-kind="{_e(a.kind)}" data-src="{_e(a.src)}" '
            f'data-dst="{_e(a.dst)}"><line x1="{x1}" y1="{y}" x2="{x2}" y2="{y}"/>'
            f'<polygon points="{x2},{y} {x2 + head},{y - 4} {x2 + head},{y + 4}"/>'
            f"{_label(f'f{a.frame}  {a.label}', label_x, y + 4)}</g>")


def _ladder_svg(lad_id: str, lad: Ladder, max_arrows: int) -> str:
    shown = lad.arrows[:max_arrows]
    anchored: dict[int, list[int]] = {}
    for i, n in enumerate(lad.anchor):
        if n is not None:
            anchored.setdefault(n, []).append(i)
    lane_x = _lane_x(lad)
    label_x = max(lane_x.values()) + 40
    parts, y = [], TOP
    longest = 40
    for a in shown:
        y += ROW
        sev = _worst([lad.findings[i] for i in a.findings])
        parts.append(_arrow_svg(lad_id, a, y, sev, lane_x, label_x))
        longest = max(longest, min(len(a.label) + 4, LABEL_CHARS) + 4)
        for i in anchored.get(a.number, []):
            f = lad.findings[i]
            y += SUB
            text = f"▲ {f.severity} {f.rule}"
            parts.append(f'<a href="#{lad_id}-f{i}">'
                         f"{_label(text, label_x + 20, y, f'marker sev-{f.severity}')}</a>")
    height = y + ROW
    width = label_x + 8 * longest
    lanes = "".join(
        f'<line class="lane" x1="{x}" y1="{TOP - 8}" x2="{x}" y2="{height - 6}"/>'
        f'<text class="lane-name" x="{x}" y="{TOP - 14}" data-lane="{_e(name)}">'
        f"{_e(lad.lane_title(name))}</text>"
        for name, x in lane_x.items())
    return (f'<svg class="ladder" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="ladder diagram">{lanes}{"".join(parts)}</svg>')


def _finding_rows(lad_id: str, lad: Ladder, budget: list[int], drawn: int) -> str:
    rows = []
    order = sorted(range(len(lad.findings)),
                   key=lambda i: (lad.findings[i].frames[:1], lad.findings[i].rule))
    for i in order:
        if budget[0] <= 0:
            break
        budget[0] -= 1
        f, n = lad.findings[i], lad.anchor[i]
        if n is None:
            on = "—"
        elif n <= drawn:
            on = f'<a href="#{lad_id}-a{n}">message {n}</a>'
        else:
            on = f"message {n} (not drawn)"
        rows.append(
            f'<tr class="finding sev-{_e(f.severity)}" id="{lad_id}-f{i}" data-rule="{_e(f.rule)}" '
            f'data-severity="{_e(f.severity)}" data-frames="{_frames(f.frames)}" '
            f'data-file="{_e(f.file)}" data-arrow="{n if n is not None else ""}">'
            f'<td class=mono>{_e(f.rule)}</td><td class="sev-{_e(f.severity)}">{_e(f.severity)}</td>'
            f'<td class="mono frames">{_frames(f.frames)}</td><td>{_e(f.message)}</td>'
            f"<td>{on}</td></tr>")
    if not rows:
        return ""
    return ("<table class=findings><tr><th>rule</th><th>severity</th><th>frames</th>"
            "<th>message</th><th>rests on</th></tr>" + "".join(rows) + "</table>")


def _records_table(lad: Ladder, max_columns: int = 12) -> str:
    every = lad.columns()
    cols = every[:max_columns]
    if not cols:
        return ""
    fields: list[str] = []
    for c in cols:
        fields += [k for k in c.fields if k not in fields]
    head = "".join(f'<th data-source="{_e(c.source)}" data-frame="{c.frame}">{_e(c.title)}</th>'
                   for c in cols)
    # each record is compared with the first one of the same direction (same SGID): a
    # return path differs from the forward path by design
    ref_col = []
    for c in cols:
        ref_col.append(next(r for r in cols if r.fields.get("sgid") == c.fields.get("sgid")))
    body = []
    for k in fields:
        cells = []
        for c, r in zip(cols, ref_col):
            v, ref = c.fields.get(k), r.fields.get(k)
            diff = k != "flags" and v is not None and ref is not None and v != ref
            text = "" if v is None else v if k == "flags" else field_text(c.shown_as.get(k, k), v)
            cells.append(f'<td class="{"diff" if diff else ""}" data-field="{_e(k)}" '
                         f'data-value="{"" if v is None else _e(v)}">{_e(text)}</td>')
        body.append(f"<tr><th>{_e(k)}</th>{''.join(cells)}</tr>")
    cut = (f'<p class="note">{len(every) - len(cols)} more record(s) not shown</p>'
           if len(every) > len(cols) else "")
    return ("<details class=records open><summary>Decoded PathRecords side by side (SA answer, "
            "blob or LS response, CM REQ; in red where a record differs from the first one of "
            "its direction)</summary>"
            f"<div class=scroll><table class=records><tr><th>field</th>{head}</tr>"
            f"{''.join(body)}</table></div>{cut}"
            "</details>")


def _ladder_section(lad_id: str, lad: Ladder, max_arrows: int, budget: list[int],
                    draw: bool, open_: bool, same_as: tuple[str, str] | None = None) -> str:
    title = lad.name if lad.name else "messages and findings of no resolution"
    drawn = min(len(lad.arrows), max_arrows) if draw else 0
    sev = lad.worst()
    badge = f' <span class="sev-{sev}">({sev})</span>' if sev else ""
    head = (f'<section class="ladder" id="{lad_id}" data-file="{_e(lad.file)}" '
            f'data-resolution="{_e(lad.name or "")}" data-messages="{len(lad.arrows)}" '
            f'data-drawn="{drawn}" data-same-as="{same_as[0] if same_as else ""}">'
            f"<h3>{_e(title)}{badge}</h3>")
    body = []
    if lad.let_go:
        body.append(f'<p class="note let-go" data-transactions="{lad.let_go.transactions}" '
                    f'data-messages="{lad.let_go.messages}">{_e(let_go_note(lad, "–"))}</p>')
    if draw and lad.arrows:
        svg = _ladder_svg(lad_id, lad, max_arrows)
        body.append(f"<details {'open' if open_ else ''}><summary>{len(lad.arrows)} message(s)"
                    f"</summary>{svg}</details>")
        if drawn < len(lad.arrows):
            rest = lad.arrows[drawn:]
            body.append(f'<p class="note capped">{len(rest)} more message(s) not drawn '
                        f"(frames {rest[0].frame}–{rest[-1].frame}); ibpath audit --format "
                        "json lists every finding</p>")
    elif lad.arrows and same_as:
        body.append(f'<p class="note same">{len(lad.arrows)} message(s), frames '
                    f"{lad.arrows[0].frame}–{lad.arrows[-1].frame}: the same sequence of "
                    f'messages and findings as <a href="#{same_as[0]}">{_e(same_as[1])}</a>, '
                    "not drawn again</p>")
    elif lad.arrows:
        body.append(f'<p class="note">{len(lad.arrows)} message(s), frames '
                    f"{lad.arrows[0].frame}–{lad.arrows[-1].frame}: diagram not drawn "
                    "(see the cap above)</p>")
    body.append(_finding_rows(lad_id, lad, budget, drawn))
    if not lad.findings:
        body.append('<p class="note">no findings</p>')
    if draw:
        body.append(_records_table(lad))
    return head + "".join(body) + "</section>"


# -- kernel view ------------------------------------------------------------------------------

def _idx(v) -> str:
    return "—" if v is None else f"rec {v}"


def _kernel_view(views: list[dict], max_blobs: int) -> str:
    if not views:
        return ('<section id="kernel-view"><h2>Kernel view of every blob</h2>'
                '<p class="note">no blob or LS response in the input</p></section>')
    profiles = sorted({p for v in views for p in v["profiles"]})
    head = "".join(f"<th>{_e(p)}</th>" for p in profiles)
    rows = []
    for v in views[:max_blobs]:
        cells = []
        for p in profiles:
            c = v["profiles"].get(p)
            if c is None:
                cells.append("<td></td>")
                continue
            cls = "" if c["accepted"] else ' class="sev-error"'
            # a kernel profile names the records it takes; librdmacm's layer the entries
            # of the ACM answer it hands over
            taken = (f"GMP {_idx(c['gmp'])}, forward {_idx(c['forward'])}, return "
                     f"{_idx(c['inbound'])}, alternate {_idx(c['alternate'])}" if "gmp" in c
                     else f"entries {', '.join(map(str, c['entries'])) or '—'}")
            cells.append(
                f'<td data-profile="{_e(p)}" data-outcome="{_e(c["outcome"])}">'
                f"<b{cls}>{_e(c['outcome'])}</b> {taken}"
                f"<br><span class=note>{_e(c['action'])}</span></td>")
        rows.append(f'<tr class="blob" data-file="{_e(v["file"])}" data-frame="{v["frame"]}">'
                    f'<td class=mono>{_e(v["file"])}</td><td>{v["frame"]}</td>'
                    f"<td>{_e(v['kind'])}</td>{''.join(cells)}</tr>")
    cut = (f'<p class="note capped">{len(views) - max_blobs} more blob(s) not shown</p>'
           if len(views) > max_blobs else "")
    return ('<section id="kernel-view"><h2>Kernel view of every blob</h2>'
            '<div class=scroll><table class="kernel-view"><tr><th>file</th><th>frame</th>'
            f"<th>kind</th>{head}</tr>{''.join(rows)}</table></div>{cut}</section>")


# -- page ------------------------------------------------------------------------------------

def _shape(lad: Ladder) -> tuple:
    """What two ladders must share to be drawn once: the lanes and kind of every message and
    each finding's rule, severity and message number."""
    return (tuple((a.kind, a.src, a.dst) for a in lad.arrows),
            tuple(sorted((f.rule, f.severity, n or 0) for f, n in zip(lad.findings, lad.anchor))))


def to_html(audits: list[FileAudit], **limits) -> str:
    """The report page for the audited files (write_html's, as a string)."""
    out = io.StringIO()
    write_html(out, audits, **limits)
    return out.getvalue()


def write_html(out, audits: list[FileAudit], *, max_ladders: int = 200, max_arrows: int = 100,
               max_findings: int = 20000, max_blobs: int = 2000, open_ladders: int = 30,
               full_ladders: int = 20) -> None:
    """The report page for the audited files (see the module docstring for its limits),
    written to `out`. The first `full_ladders` ladders of each file are all drawn; after them
    a ladder whose messages and findings have the shape of one already drawn in the file
    points to it. The ladders' sections are made one at a time (ladder.iter_ladders) into a
    temporary file, since the page's head counts them: an SA storm has hundreds of
    thousands (issue 45)."""
    views = kernel_views(audits)
    with tempfile.TemporaryFile("w+", encoding="utf-8") as body:
        n_ladders, n_res, same, capped = _sections(
            body, audits, max_ladders, max_arrows, max_findings, open_ladders, full_ladders)
        total_findings = sum(len(a.findings) for a in audits)
        caps = []
        if same:
            caps.append(f"{same} of {n_ladders} ladders point to an identical one drawn "
                        "before them")
        if capped:
            caps.append(f"{capped} of {n_ladders} ladders listed without a diagram")
        if total_findings > max_findings:
            caps.append(f"{total_findings - max_findings} of {total_findings} findings not "
                        "shown (ibpath audit --format json lists them all)")
        caps_html = ("".join(f'<p class="note capped">{_e(c)}</p>' for c in caps))
        out.write("<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
                  '<meta name="viewport" content="width=device-width">'
                  f"<title>ibpath audit: {n_res} resolution(s), {total_findings} finding(s)"
                  f"</title><style>{CSS}</style></head><body><h1>ibpath audit</h1>"
                  f'<p class="note">ibpath {_e(__version__)}. Lanes: kernel, resolver (ibacm or '
                  "the application; in a recording of a process, the process, with its ucma "
                  "commands to the kernel and its ACM exchanges with an ibacm lane), SA, remote "
                  "CM. One arrow per captured message; a finding is attached to the last "
                  "message it rests on (▲) and every message it rests on is coloured.</p>"
                  f"{caps_html}" + _summary(audits, views))
        body.seek(0)
        shutil.copyfileobj(body, out)
    out.write(_kernel_view(views, max_blobs) + "</body></html>\n")


def _sections(body, audits: list[FileAudit], max_ladders: int, max_arrows: int,
              max_findings: int, open_ladders: int, full_ladders: int) -> tuple[int, ...]:
    """Each file's section with its ladders, written to `body`; (ladders, ladders of a
    resolution, ladders pointing to an identical one, ladders listed without a diagram)."""
    budget = [max_findings]
    n_ladders = n_res = drawn = same = capped = 0
    for fi, a in enumerate(audits):
        body.write(f'<section class="file" id="file-{fi}" data-file="{_e(a.path)}">'
                   f"<h2 class=mono>{_e(a.path)}</h2>")
        if a.error:
            body.write(f'<p class="sev-error">unreadable: {_e(a.error)} (findings up to the '
                       "damage)</p>")
        file_ladders = iter_ladders(a)
        first = next(file_ladders, None)
        if first is None:
            body.write('<p class="note">no resolution and no finding</p>')
        else:
            file_ladders = itertools.chain([first], file_ladders)
        shapes: dict[tuple, tuple[str, str]] = {}  # per file: a link stays within its file
        for li, lad in enumerate(file_ladders if first is not None else ()):
            n_ladders += 1
            n_res += bool(lad.name)
            lad_id = f"l{fi}-{li}"
            shape = _shape(lad)
            same_as = shapes.get(shape) if li >= full_ladders else None
            draw = same_as is None and drawn < max_ladders
            drawn += draw
            same += same_as is not None
            capped += not draw and same_as is None
            if draw:
                shapes.setdefault(shape, (lad_id, lad.name or "messages of no resolution"))
            body.write(_ladder_section(lad_id, lad, max_arrows, budget, draw,
                                       open_=drawn <= open_ladders, same_as=same_as))
        body.write("</section>")
    return n_ladders, n_res, same, capped


__all__ = ["to_html", "write_html"]
