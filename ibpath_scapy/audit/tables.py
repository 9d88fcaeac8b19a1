"""The audit as two tables, one row per finding and one per resolution: what `--format
parquet` and `--resolutions-out` write (audit/parquet.py) for DuckDB and the like.

Plain Python rows here, no pyarrow: the columns are declared once (FINDING_COLUMNS,
RESOLUTION_COLUMNS, with the type each has in Parquet and what it holds: docs/parquet.md is
written from them), the rows are built from the FileAudits as the other reports are.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from ..capture.pcapio import CaptureError, frame_times, origin
from .engine import FileAudit
from .model import SEVERITIES

# The tables' version: bumped when a column changes meaning or type or goes away (adding one
# does not), and written into every file (parquet.py, key "ibpath.schema_version").
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Column:
    """One column: its name, its Parquet type (as docs/parquet.md spells it: string, int64,
    int32, list<int64>, timestamp[us, UTC]), whether it may be null, and what it holds."""

    name: str
    type: str
    nullable: bool
    doc: str


_KEY_COLUMNS = (
    Column("local_gid", "string", True, "the resolution's local GID (IPv6 text)"),
    Column("remote_gid", "string", True, "the resolution's remote GID (IPv6 text)"),
    Column("pkey", "int32", True, "the resolution's P_Key"),
)
_WHERE_COLUMNS = (
    Column("file", "string", False, "the input as given (a file of a directory: its path)"),
    Column("host", "string", True,
           "--label, else what the capture says of the machine that made it: the pcapng "
           "section header's shb_hardware and shb_os (else the first interface's if_hardware "
           "and if_os), joined by \" / \"; null when neither says"),
    Column("profile", "string", False,
           "the kernel profile(s) the audit judged blobs by (--kernel: all, ucma, ls-legacy, "
           "ls-multi-6.1, ls-multi, proposal)"),
)

FINDING_COLUMNS = _WHERE_COLUMNS[:2] + (
    Column("rule", "string", False, "the rule ID (docs/rules.md)"),
    Column("severity", "string", False, "error, warning or info"),
) + _WHERE_COLUMNS[2:] + (
    Column("frames", "list<int64>", False,
           "every frame the finding rests on, 1-based as Wireshark numbers them, ascending"),
    Column("first_frame", "int64", True, "the first of them (null: none)"),
    Column("first_frame_time", "timestamp[us, UTC]", True,
           "that frame's capture time; null for a stream (read once), a raw blob file "
           "(no clock) or a frame past the damage of a file"),
) + _KEY_COLUMNS + (
    Column("message", "string", False, "the finding's text, as the other reports give it"),
)

RESOLUTION_COLUMNS = _WHERE_COLUMNS + _KEY_COLUMNS + (
    Column("transactions", "int64", False,
           "SA PathRecord transactions between the pair (a request, its retries, its answer)"),
    Column("sa_requests", "int64", False, "SA request frames sent, retries included"),
    Column("sa_retries", "int64", False,
           "requests sent again with the same TID (SAQ-RETRY: frames less one, per transaction)"),
    Column("answered", "int64", False, "transactions answered in the capture"),
    Column("reversible_queries", "int64", False,
           "transactions whose query asked for a reversible path (Reversible component, "
           "bit 1)"),
    Column("blobs", "int64", False, "path arrays handed to the kernel (rdma_set_option blobs)"),
    Column("ls_requests", "int64", False, "RDMA netlink LS RESOLVE requests from the kernel"),
    Column("ls_responses", "int64", False, "LS RESOLVE responses to the kernel"),
    Column("cm_reqs", "int64", False, "CM REQs sent on the pair's paths"),
    Column("errors", "int64", False, "findings of severity error on the resolution"),
    Column("warnings", "int64", False, "findings of severity warning"),
    Column("infos", "int64", False, "findings of severity info"),
    Column("verdict", "string", False,
           "the worst severity of its findings (error, warning, info), or ok"),
)


def read_capture_facts(fa: FileAudit, path: str) -> None:
    """Fill fa.origin and fa.times from the file itself (a second read: the section header,
    and the frames up to the last finding's first frame). A stream cannot be read again:
    left empty. A file damaged before those frames gives what comes before the damage."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return
        fa.origin = origin(path)
    except (OSError, CaptureError):
        fa.origin = None
    try:
        fa.times = frame_times(path, {f.frames[0] for f in fa.findings if f.frames})
    except OSError:
        fa.times = {}


def host(label: str | None, fa: FileAudit) -> str | None:
    """The host column of a file's rows (FINDING_COLUMNS' doc)."""
    if label:
        return label
    o = fa.origin
    if o is None:
        return None
    parts = [o.hardware, o.os]
    if not any(parts) and o.interfaces:
        parts = [o.interfaces[0].get("hardware"), o.interfaces[0].get("os")]
    return " / ".join(p for p in parts if p) or None


def _keys(fa: FileAudit) -> dict[str, tuple]:
    """(local, remote, pkey) of each resolution of the file, by its name (Finding.resolution)."""
    if fa.replay is None:
        return {}
    return {r.name: (r.local, r.remote, r.pkey) for r in fa.replay.resolutions.values()}


def finding_rows(audits: list[FileAudit], profile: str, label: str | None = None):
    """One dict per finding, keyed by FINDING_COLUMNS, in the order of the JSON report."""
    for a in audits:
        keys, who = _keys(a), host(label, a)
        for f in a.findings:
            first = f.frames[0] if f.frames else None
            local, remote, pkey = keys.get(f.resolution, (None, None, None))
            yield {"file": a.path, "host": who, "rule": f.rule, "severity": f.severity,
                   "profile": profile, "frames": list(f.frames), "first_frame": first,
                   "first_frame_time": a.times.get(first), "local_gid": local,
                   "remote_gid": remote, "pkey": pkey, "message": f.message}


def resolution_rows(audits: list[FileAudit], profile: str, label: str | None = None):
    """One dict per resolution, keyed by RESOLUTION_COLUMNS, in the order of the reports."""
    for a in audits:
        if a.replay is None:
            continue
        who = host(label, a)
        counts: dict[str, dict[str, int]] = {}
        for f in a.findings:
            if f.resolution is not None:
                c = counts.setdefault(f.resolution, dict.fromkeys(SEVERITIES, 0))
                c[f.severity] += 1
        for res in a.replay.resolutions.values():
            t = res.tally()
            c = counts.get(res.name, dict.fromkeys(SEVERITIES, 0))
            worst = next((s for s in SEVERITIES if c[s]), "ok")
            yield {
                "file": a.path, "host": who, "profile": profile, "local_gid": res.local,
                "remote_gid": res.remote, "pkey": res.pkey, "transactions": t.transactions,
                "sa_requests": t.requests, "sa_retries": t.retries, "answered": t.answered,
                "reversible_queries": t.reversible_asked,
                "blobs": len(res.blobs), "ls_requests": len(res.ls_requests),
                "ls_responses": len(res.ls_responses), "cm_reqs": len(res.cm_reqs),
                "errors": c["error"], "warnings": c["warning"], "infos": c["info"],
                "verdict": worst}

def markdown() -> str:
    """docs/parquet.md: the two tables' columns (a test fails when the page is stale)."""
    out = ["# ibpath audit tables (Parquet)", "",
           "Generated from ibpath_scapy/audit/tables.py (`python -m ibpath_scapy.audit.tables "
           "> docs/parquet.md`). `ibpath audit --format parquet -o FINDINGS.parquet` writes the "
           "findings table, `--resolutions-out RESOLUTIONS.parquet` the resolutions table "
           "(the `fleet` extra: `pip install 'ibpath_scapy[fleet]'`). README, \"A fleet of "
           "captures\", has the queries.", "",
           f"Schema version: **{SCHEMA_VERSION}**, in each file's key-value metadata as "
           "`ibpath.schema_version`, with `ibpath.table` (`findings` or `resolutions`): "
           "`SELECT * FROM parquet_kv_metadata('x.parquet')` in DuckDB. The version changes "
           "when a column changes meaning or type or goes away; a new column does not change "
           "it. The JSON report is unchanged by these tables.", "",
           "A file is written whole or not at all. Rows come in the JSON report's order: "
           "inputs in the order given (a directory's files sorted), then each file's findings "
           "or resolutions as the reports list them.", ""]
    for title, columns, what in (
            ("findings", FINDING_COLUMNS, "One row per finding (the JSON report's `findings`)."),
            ("resolutions", RESOLUTION_COLUMNS,
             "One row per resolution: the SA, blob, LS and CM traffic between a local and a "
             "remote GID on a P_Key (README, \"Auditing captures\"), its counts and verdict. "
             "An input that could not be read to its end has the rows of what came before "
             "the damage; the tables do not list unreadable inputs (the exit status is 2 and "
             "stderr names them).")):
        out += [f"## {title}", "", what, "", "| column | type | null | what |",
                "|---|---|---|---|"]
        out += [f"| `{c.name}` | `{c.type}` | {'yes' if c.nullable else 'no'} | {c.doc} |"
                for c in columns]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    import sys
    sys.stdout.write(markdown())
