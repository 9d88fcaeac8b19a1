"""`ibpath audit --annotate OUT`: a copy of each capture whose frames carry the findings that
rest on them as packet comments, for Wireshark (`frame.comment contains "RES-"`).

One input: OUT is the copy (pcapng, whatever the input was). Several inputs, or a directory:
OUT is a directory, made if missing, holding one copy per capture under the input's name
(a directory's files under their path below it), with .pcap/.cap/.pcapng ending in .pcapng.
The plan is made before the audit, so that a name two inputs would share, an output that is
an input, or a stream (which cannot be read a second time) is refused before any work.
"""

from __future__ import annotations

import os

from ..capture.pcapio import STDIN, CaptureError, Input, annotate, sniff_format
from .engine import FileAudit
from .model import Finding

_CAPTURE_SUFFIXES = (".pcapng", ".pcap", ".cap")


class AnnotateError(Exception):
    """--annotate cannot be done as asked; the message says why (exit status 2)."""


def comment(f: Finding) -> str:
    """A finding as one packet comment of one line: RULE SEVERITY: MESSAGE."""
    text = " ".join(f.message.split())  # a comment of one line, whatever the message holds
    return f"{f.rule} {f.severity}: {text}"


def comments_by_frame(fa: FileAudit) -> dict[int, list[str]]:
    """{frame: comments} of every frame the file's findings rest on, in the report's order
    (a finding of several frames is on each of them)."""
    out: dict[int, list[str]] = {}
    for f in fa.findings:
        c = comment(f)
        for n in f.frames:
            if n > 0:  # frame 0: a --blob file's record, no frame of this capture
                out.setdefault(n, []).append(c)
    return out


def _copy_name(name: str) -> str:
    for suffix in _CAPTURE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[:-len(suffix)] + ".pcapng"
    return name + ".pcapng"


def plan(inputs: list[str], files: list[str], out: str) -> dict[str, str]:
    """{input file: its annotated copy} for the files expanded from `inputs` (the paths given,
    directories among them). Raises AnnotateError for a stream, a name shared by two copies,
    a copy that would overwrite an input, or an OUT that cannot be what is asked of it."""
    for f in files:
        if f == STDIN or (os.path.exists(f) and not os.path.isfile(f)):
            raise AnnotateError(f"--annotate reads each capture a second time, and {f} is a "
                                "stream: save it to a file first")
    several = len(files) > 1 or any(os.path.isdir(p) for p in inputs)
    if not several:
        if os.path.isdir(out):
            raise AnnotateError(f"--annotate {out}: a directory; for one input, give the "
                                "file to write")
        targets = {f: out for f in files}
    else:
        if os.path.exists(out) and not os.path.isdir(out):
            raise AnnotateError(f"--annotate {out}: with several inputs (or a directory) OUT "
                                "is a directory, and this is a file")
        dirs = [p.rstrip("/") or "/" for p in inputs if os.path.isdir(p)]
        targets = {}
        for f in files:
            base = next((d for d in dirs if f.startswith(d.rstrip("/") + "/")), None)
            rel = os.path.relpath(f, base) if base else os.path.basename(f)
            targets[f] = os.path.join(out, _copy_name(rel))
    seen: dict[str, str] = {}
    real_inputs = {os.path.realpath(f): f for f in files}
    for f, t in targets.items():
        key = os.path.realpath(t)
        if key in seen:
            raise AnnotateError(f"--annotate: {seen[key]} and {f} would both be written to {t}")
        if key in real_inputs:
            raise AnnotateError(f"--annotate: {t} is an input; write the copy elsewhere")
        seen[key] = f
    return targets


def write(audits: list[FileAudit], targets: dict[str, str],
          as_blob: bool = False) -> tuple[list[str], bool]:
    """Write the annotated copies of the audited captures. Returns the lines for stderr and
    whether one could not be written (exit status 2). An input that cannot be read to its
    end gets no copy (its audit already said why); a raw blob file (every input, with
    as_blob: --as blob) has no frames to carry a comment, which a line says."""
    lines, failed = [], False
    for fa in audits:
        target = targets.get(fa.path)
        if target is None:
            continue
        if fa.error:
            lines.append(f"ibpath: {fa.path}: not annotated: it cannot be read to its end")
            continue
        try:
            with Input(fa.path) as f:
                kind = "other" if as_blob else sniff_format(f.head(4))
            if kind == "other":
                lines.append(f"ibpath: {fa.path}: not annotated: a raw blob file has no frames "
                             "to carry comments")
                continue
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            annotate(fa.path, target, comments_by_frame(fa))
        except CaptureError as exc:
            lines.append(f"ibpath: {exc}")
            failed = True
        except OSError as exc:
            where = exc.filename if exc.filename and exc.filename != fa.path else target
            lines.append(f"ibpath: {where}: cannot write the annotated copy of {fa.path}: "
                         f"{exc.strerror or exc}")
            failed = True
    return lines, failed
