"""The bundled corpus (captures/corpus/): one capture per scenario, a machine-readable manifest
and a README table, written by one call; and the check that audits every file against its
manifest row.

Deterministic: the same seed gives the same bytes (fixed clock, TIDs, GIDs and LIDs), so a
test can compare the committed corpus with a fresh generation. `ibpath craft NAME --seed S
--encap E` with a manifest row's seed and encap writes that row's file again.
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path
from typing import TextIO

from ..audit.model import AuditOptions
from ..audit.run import audit_paths
from .scenarios import SCENARIOS

MANIFEST = "manifest.json"
README = "README.md"


def scenario_seed(name: str, seed: int) -> int:
    """Each file of the corpus gets its own seed, stable when scenarios are added, so no two
    files share TIDs, GIDs or LIDs (they can be merged into one capture and still make sense)."""
    return seed * 10000 + zlib.crc32(name.encode()) % 10000


def manifest_entry(name: str, seed: int) -> dict:
    sc = SCENARIOS[name]
    return {"file": f"{name}.pcapng", "scenario": name, "seed": scenario_seed(name, seed),
            "encap": sc.default_encap,
            "kernel": sc.kernel, "rules": sorted(sc.rules), "malformed": sc.malformed,
            "shows": sc.summary}


def write_corpus(directory: str | Path, seed: int = 0) -> list[dict]:
    """Write every scenario's capture (its first encapsulation), manifest.json and README.md
    into directory; remove stale .pcapng files a renamed scenario left behind."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    entries = [manifest_entry(name, seed) for name in sorted(SCENARIOS)]
    keep = {e["file"] for e in entries}
    for old in out.glob("*.pcapng"):
        if old.name not in keep:
            old.unlink()
    for e in entries:
        SCENARIOS[e["scenario"]].write(out / e["file"], seed=e["seed"], encap=e["encap"])
    (out / MANIFEST).write_text(json.dumps({"scenarios": entries}, indent=1) + "\n")
    (out / README).write_text(readme(entries))
    return entries


def readme(entries: list[dict]) -> str:
    lines = []
    for e in entries:
        rules = ", ".join(e["rules"]) or "none"
        if e["kernel"] != "all":
            rules += f" (--kernel {e['kernel']})"
        lines.append(f"| {e['file']} | {e['shows'].replace('|', '/')} | {rules} |")
    rows = "\n".join(lines)
    return f"""# captures/corpus: one capture per `ibpath craft` scenario

Generated, do not edit: `ibpath craft --corpus captures/corpus` rewrites every file here
(deterministic: the same bytes on every run; tests/test_scenarios.py checks the committed files
are fresh). SA answers come from the OpenSM model (`ibpath_scapy/craft/sa_model.py`, byte for
byte what OpenSM 3.3.23 sends, checked against `../opensm/`), resolvers from
`ibpath_scapy/craft/resolver.py`. Native IB in ERF records unless the file is about RoCEv2;
netlink LS messages as link type 253; rdma_set_option blobs as exported PDUs "ibpath.blob"
with the call's result in a packet comment; CM REQ/REP/RTU on the data side.

`manifest.json` is the machine-readable form of this table. The rule IDs are every finding
`ibpath audit` reports on the file (errors, warnings and infos), under `--kernel all` unless
the row names a profile. Check them all with `ibpath craft --verify captures/corpus`.

Real captures: `../opensm/` (OpenSM over ibsim), and `shared/captures/external/` beside
the checkout.

| file | what it shows | expected rule IDs |
|---|---|---|
{rows}
"""


def verify_corpus(directory: str | Path, out: TextIO | None = None, report: bool = True) -> bool:
    """Audit every manifest file with its kernel profile; print the audit report (text) per
    profile group and a verdict table to out (stdout); True when every file gives exactly its
    rule IDs."""
    from ..audit import report as text_report

    out = out or sys.stdout
    d = Path(directory)
    entries = json.loads((d / MANIFEST).read_text())["scenarios"]
    groups: dict[str, list[dict]] = {}
    for e in entries:
        groups.setdefault(e["kernel"], []).append(e)
    got: dict[str, set[str]] = {}
    for kernel, group in groups.items():
        paths = [str(d / e["file"]) for e in group]
        audits, unreadable = audit_paths(paths, AuditOptions(kernel=kernel), quiet=True)
        if report:
            shown = " ".join(paths) if len(paths) <= 3 else \
                f"<the {len(paths)} files of {d} audited under this profile>"
            out.write(f"\n$ ibpath audit --kernel {kernel} {shown}\n")
            out.write(text_report.to_text(audits))
        for e, a in zip(group, audits):
            got[e["file"]] = {f.rule for f in a.findings} | ({"UNREADABLE"} if a.error else set())
    ok = True
    out.write(f"\nExpected findings ({d / MANIFEST}):\n")
    width = max(len(e["file"]) for e in entries)
    for e in entries:
        want = set(e["rules"])
        have = got[e["file"]]
        verdict = "ok" if have == want else "MISMATCH"
        ok &= have == want
        line = f"  {verdict:8} {e['file']:{width}}  {', '.join(sorted(want)) or 'no finding'}"
        if have != want:
            line += (f"  [missing: {', '.join(sorted(want - have)) or '-'}; "
                     f"unexpected: {', '.join(sorted(have - want)) or '-'}]")
        out.write(line + "\n")
    n_bad = sum(got[e["file"]] != set(e["rules"]) for e in entries)
    out.write(f"{len(entries)} files, {len(entries) - n_bad} as expected, {n_bad} not\n")
    return ok
