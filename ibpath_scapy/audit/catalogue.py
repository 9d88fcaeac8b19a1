"""The rule catalogue as people read it, generated from the registry (audit.model.RULES):
`ibpath audit --list-rules` (text, or JSON with --format json) and docs/rules.md.

    python -m ibpath_scapy.audit.catalogue > docs/rules.md

tests/test_catalogue.py fails when docs/rules.md is not what the registry gives.
"""

from __future__ import annotations

import json
import sys

from ..facts.kernelview import PROFILES
from .model import RULES, Rule

PROFILES_HEAD = "kernel profiles (--kernel PROFILE; rules citing them follow this code):"


def _rules() -> list[Rule]:
    return [RULES[rid] for rid in sorted(RULES)]


def text() -> str:
    """--list-rules: ID, severity and summary of every rule, with its source; then the kernel
    profiles the blob, LS and CM rules judge by, each with its kernels, commits and code."""
    lines = []
    for r in _rules():
        lines.append(f"{r.rule_id:28} {r.severity:8} {r.summary}")
        lines.append(f"{'':28} {'':8} source: {r.source}")
    lines += ["", PROFILES_HEAD]
    for p in PROFILES.values():
        lines.append(f"  {p.name:14} {p.kernels}: {p.consumer}")
        lines += [f"  {'':14} commit {c.cite()}" for c in p.commits]
        lines.append(f"  {'':14} source: {p.source}")
    return "\n".join(lines) + "\n"


def as_json() -> str:
    """--list-rules --format json: one object per rule."""
    return json.dumps([{"rule": r.rule_id, "severity": r.severity, "families": list(r.checks),
                        "summary": r.summary, "source": r.source, "doc": r.doc}
                       for r in _rules()], indent=2) + "\n"


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _profiles_markdown() -> list[str]:
    """The kernel profiles as a table: which kernels each stands for, the commits that set it
    apart and the code it follows."""
    out = ["", "## Kernel profiles", "",
           "What `--kernel PROFILE` selects; the blob, LS and CM rules read each blob through "
           "these (`ibpath_scapy/facts/kernelview.py`).", "",
           "| profile | kernels | reads | commits | source |", "|---|---|---|---|---|"]
    for p in PROFILES.values():
        commits = "<br>".join(c.cite() for c in p.commits) or "—"
        out.append(f"| `{p.name}` | {p.kernels} | {_cell(p.consumer)} | {_cell(commits)} | "
                   f"{_cell(p.source)} |")
    return out


def markdown() -> str:
    """docs/rules.md: a table of every rule, then each rule's full description and source."""
    out = ["# ibpath audit rules", "",
           "Generated from the rule registry (`python -m ibpath_scapy.audit.catalogue`); "
           "`ibpath audit --list-rules` prints the same catalogue. Families: what a check is "
           "given (a frame's record, a blob, an SA transaction, a resolution, a CM REQ, an LS "
           "exchange, the process time lines of `ibpath record`'s captures).", "",
           "| ID | severity | families | condition |", "|---|---|---|---|"]
    for r in _rules():
        out.append(f"| [{r.rule_id}](#{r.rule_id.lower()}) | {r.severity} | "
                   f"{', '.join(r.checks)} | {_cell(r.summary)} |")
    out += _profiles_markdown()
    for r in _rules():
        out += ["", f"## {r.rule_id}", "", f"**{r.severity}**, {', '.join(r.checks)}. "
                f"Source: {_cell(r.source)}.", ""]
        out += [line.strip() if not line.startswith("    ") else line[4:]
                for line in r.doc.splitlines()]
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
