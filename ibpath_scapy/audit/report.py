"""Audit reports: text (per resolution, for a person at a terminal), JSON and JUnit."""

from __future__ import annotations

import itertools
import json
import re

from .engine import FileAudit
from .kernel import kernel_view_of
from .ladder import iter_ladders, text_ladder
from .model import RULES
from .process import librdmacm_view, process_view

_COLOURS = {"error": "\033[31m", "warning": "\033[33m", "info": "\033[36m"}
_RESET = "\033[0m"


def summary(audits: list[FileAudit]) -> dict:
    s = {"files": len(audits), "packets": 0, "transactions": 0, "resolutions": 0, "blobs": 0,
         "cm_reqs": 0, "cm_ids": 0, "acm_exchanges": 0,
         "findings": {"error": 0, "warning": 0, "info": 0}}
    for a in audits:
        s["packets"] += a.frames
        if a.replay:
            s["transactions"] += a.replay.sa_count
            s["resolutions"] += len(a.replay.resolutions)
            s["blobs"] += len(a.replay.blobs)
            s["cm_reqs"] += len(a.replay.cm_reqs)
            if a.replay.process:  # ibpath record's ucma commands and ACM messages
                view = process_view(a.replay)
                s["cm_ids"] += len(view.cm_ids)
                s["acm_exchanges"] += len(view.exchanges)
                s["resolutions"] += len(view.services)  # IB service resolutions, each one
        for f in a.findings:
            s["findings"][f.severity] += 1
    return s


def kernel_views(audits: list[FileAudit]) -> list[dict]:
    out = []
    for a in audits:
        if not a.replay:
            continue
        for rec in a.replay.blobs + [r for e in a.replay.ls.values() for r in e["responses"]]:
            if "kernel_blob" in rec:
                out.append({"file": a.path, "frame": rec["frame"], "kind": rec["kind"],
                            "profiles": kernel_view_of(rec)})
        if a.replay.process:  # ACM answers: librdmacm's layer before the kernel's
            out += [{"file": a.path, "frame": x.response.frame, "kind": "acm",
                     "profiles": librdmacm_view(x)}
                    for x in process_view(a.replay).exchanges if x.response is not None]
    return out


def to_json(audits: list[FileAudit], skipped: list = ()) -> str:
    doc = {
        "files": [a.path for a in audits],
        "findings": [f.as_dict() for a in audits for f in a.findings],
        "kernel_view": kernel_views(audits),
        "summary": summary(audits),
    }
    errors = [{"file": a.path, "error": a.error} for a in audits if a.error]
    if errors:
        doc["unreadable"] = errors
    if skipped:
        doc["skipped"] = [{"file": s.path, "reason": s.reason} for s in skipped]
    return json.dumps(doc, indent=2)


JUNIT_PACKAGE = "ibpath.audit"
# a suite's test case for reading its input: an error where it cannot be read to its end
READ_CASE = "read"


def junit_classname(path: str) -> str:
    """A stable dotted class name for an input: JUNIT_PACKAGE, then the path as given, its
    folders as packages (Jenkins and GitLab group by the dots) and the other characters
    outside [A-Za-z0-9_] as "_" (captures/corpus/x.pcapng -> ibpath.audit.captures.corpus.
    x_pcapng)."""
    parts = [re.sub(r"[^A-Za-z0-9_]", "_", p) for p in re.split(r"[/\\]+", path)
             if p not in ("", ".")]
    return ".".join([JUNIT_PACKAGE] + parts)


def _junit_case(classname: str, name: str, body: str = "", time: float = 0.0) -> str:
    from xml.sax.saxutils import quoteattr  # here: it imports urllib and ssl, 60 ms a start
    return (f"    <testcase classname={quoteattr(classname)} name={quoteattr(name)} "
            f'time="{time:.3f}">{body}</testcase>')


# Which rules get a test case in each input's suite (--junit-cases): every rule of the
# catalogue (a rule that found nothing is a passed test, so that CI tools record a failure
# going away as a test fixed), or only those with findings.
JUNIT_CASES = ("all", "findings")


def _junit_suite(a: FileAudit, cases_of: str = "all") -> tuple[str, int, int, int]:
    """One input's <testsuite>: a test case per rule (cases_of "all"; "findings": per rule
    with a finding), failed for each error finding (the others under system-out), and
    READ_CASE, an error when the input could not be read to its end. Returns (xml, tests,
    failures, errors)."""
    from xml.sax.saxutils import escape, quoteattr  # (_junit_case)
    cls = junit_classname(a.path)
    by_rule: dict[str, list] = {}
    for f in a.findings:
        by_rule.setdefault(f.rule, []).append(f)
    cases, failures = [], 0
    read_body = ""
    if a.error:
        read_body = (f"<error type=\"unreadable\" message={quoteattr(a.error)}>"
                     f"{escape(a.error)}</error>")
    cases.append(_junit_case(cls, READ_CASE, read_body, a.seconds))
    judged = () if a.replay is None else sorted(RULES) if cases_of == "all" else sorted(by_rule)
    for rid in judged:  # an input never opened was judged by no rule
        hits = by_rule.get(rid, [])
        errs = [f for f in hits if f.severity == "error"]
        body = ""
        if errs:
            failures += 1
            text = "\n".join(f"frames {list(f.frames)}: {f.message}" for f in errs)
            body = (f'<failure type="error" message={quoteattr(f"{len(errs)} error(s)")}>'
                    f"{escape(text)}</failure>")
        elif hits:
            body = "<system-out>" + escape("\n".join(
                f"{f.severity} frames {list(f.frames)}: {f.message}" for f in hits)) + "</system-out>"
        cases.append(_junit_case(cls, rid, body))
    errors = 1 if a.error else 0
    head = (f"  <testsuite name={quoteattr(a.path)} tests=\"{len(cases)}\" "
            f'failures="{failures}" errors="{errors}" skipped="0" time="{a.seconds:.3f}">')
    return "\n".join([head] + cases + ["  </testsuite>"]), len(cases), failures, errors


def _junit_skipped(s) -> str:
    """The suite of a file of a directory that is neither a capture nor a blob: one skipped
    case."""
    from xml.sax.saxutils import quoteattr  # (_junit_case)
    body = f'<skipped message={quoteattr(s.reason)}/>'
    return "\n".join([
        f'  <testsuite name={quoteattr(s.path)} tests="1" failures="0" errors="0" '
        'skipped="1" time="0.000">',
        _junit_case(junit_classname(s.path), READ_CASE, body), "  </testsuite>"])


def to_junit(audits: list[FileAudit], skipped: list = (), cases_of: str = "all") -> str:
    """JUnit XML as Jenkins and GitLab read it (the schema of tests/data/junit.xsd): a
    <testsuites> root with the sums of its suites' counts (tests, failures, errors, skipped,
    time) and one <testsuite> per input, in the order of the inputs and of a directory's walk;
    a file of a directory that is neither a capture nor a blob is a suite of one skipped case
    at its place (Skipped.position). cases_of: JUNIT_CASES, which rules get a test case."""
    suites, tests, failures, errors, seconds = [], 0, 0, 0, 0.0
    pending = sorted(skipped, key=lambda s: s.position)  # stable: the walk's order kept
    for i, a in enumerate(audits):
        while pending and pending[0].position <= i:
            suites.append(_junit_skipped(pending.pop(0)))
        xml, t, f, e = _junit_suite(a, cases_of)
        suites.append(xml)
        tests, failures, errors, seconds = tests + t, failures + f, errors + e, seconds + a.seconds
    suites += [_junit_skipped(s) for s in pending]
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuites name="ibpath audit" tests="{tests + len(skipped)}" '
            f'failures="{failures}" errors="{errors}" skipped="{len(skipped)}" '
            f'time="{seconds:.3f}">\n' + "\n".join(suites) + "\n</testsuites>\n")


def finding_line(f, sev=lambda s: s) -> str:
    """A finding as the text report writes it: FILE:FRAMES: SEVERITY RULE MESSAGE."""
    frames = ",".join(map(str, f.frames))
    return f"   {f.file}:{frames}: {sev(f.severity)} {f.rule} {f.message}"


def to_text(audits: list[FileAudit], colour: bool = False, ladder: bool = False,
            skipped: list = ()) -> str:
    """Findings per resolution; with `ladder`, each resolution's ladder diagram first
    (audit/ladder.py), its findings marked under the messages they rest on. The files of a
    directory that were skipped come first, each with why."""
    return "".join(text_chunks(audits, colour, ladder, skipped))


def write_text(out, audits: list[FileAudit], colour: bool = False, ladder: bool = False,
               skipped: list = ()) -> None:
    """to_text's report written to `out` as it is made: an SA storm's report has a few lines
    for each of its hundreds of thousands of resolutions (issue 45)."""
    for chunk in text_chunks(audits, colour, ladder, skipped):
        out.write(chunk)


def text_chunks(audits: list[FileAudit], colour: bool = False, ladder: bool = False,
                skipped: list = (), lines_per_chunk: int = 4096):
    """to_text's report in pieces of whole lines, in order."""
    lines = []
    for line in _text_lines(audits, colour, ladder, skipped):
        lines.append(line)
        if len(lines) >= lines_per_chunk:
            yield "\n".join(lines) + "\n"
            lines = []
    if lines:
        yield "\n".join(lines) + "\n"


def _text_lines(audits: list[FileAudit], colour: bool, ladder: bool, skipped: list):
    yield from (f"== skipped {s.path}: {s.reason}" for s in skipped)

    def sev(s):
        return f"{_COLOURS[s]}{s}{_RESET}" if colour else s

    for a in audits:
        yield f"== {a.path}: {a.frames} frames"
        if a.error:
            yield f"   unreadable: {a.path}: {a.error.removeprefix(a.path + ': ')}"
        by_res: dict = {}
        for f in a.findings:
            by_res.setdefault(f.resolution, []).append(f)
        # a ladder per resolution in the same order (path resolutions, then IB service
        # resolutions), then maybe the one of no resolution, drawn as they are written
        # (iter_ladders)
        ladders = iter_ladders(a) if ladder else None
        resolutions = a.replay.resolutions.values() if a.replay else ()
        services = (process_view(a.replay).services
                    if a.replay is not None and a.replay.process else ())
        for name in itertools.chain((r.name for r in resolutions), (sr.name for sr in services),
                                    [None]):
            fs = by_res.get(name, [])
            lad = next(ladders, None) if ladders is not None else None
            if name is None and not fs and lad is None:
                continue
            yield f"-- resolution {name}" if name else "-- not tied to a resolution"
            if lad is not None:
                yield from text_ladder(lad, max_arrows=60)
            if not fs:
                yield "   no findings"
            for f in sorted(fs, key=lambda f: (f.frames[:1], f.rule)):
                yield finding_line(f, sev)
    s = summary(audits)
    more = f" ({len(skipped)} skipped)" if skipped else ""
    process = "".join(f", {s[k]} {what}" for k, what in (("cm_ids", "cm_ids"),
                                                         ("acm_exchanges", "ACM exchanges"))
                      if s[k])
    yield (f"== {s['files']} file(s){more}, {s['packets']} frames, {s['transactions']} SA "
           f"transactions, {s['resolutions']} resolutions, {s['blobs']} blobs{process}: "
           f"{s['findings']['error']} errors, {s['findings']['warning']} warnings, "
           f"{s['findings']['info']} infos")
