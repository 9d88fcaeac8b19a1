"""What changed between two lab runs on two kernels, scenario by scenario.

`ibpath lab diff A B [--same-kernel C]` compares the runs in directories A and B (`ibpath lab
run ... -o DIR`), on what the kernel decides and the captures show:

* each scenario's outcome (rdma_set_option's verdict, the client's and server's exit codes);
* the ucma commands of recorded runs, in order, with the kernel's answer to each write;
* the CM REQ on the wire (every field the kernel fills from the path and the port: not the
  per-connection identifiers, COMM_IDS), its IP TOS and TTL;
* the QUERY PATH readback (every PathRecord field, and the record's flags).

Some values differ from one run to the next on one kernel (the kernel route's flow label, the
MAC bytes a RoCE readback shows as LIDs). Given C, a second run of A's kernel, a field that
differs between A and C is reported as run-to-run variation, not as a kernel change.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..layers.cm import CMReq
from .recordmatrix import frames

# per-connection identifiers: never the same twice
COMM_IDS = frozenset(("local_comm_id", "local_qpn", "starting_psn", "local_eecn",
                      "local_ca_guid", "private_data"))


def _ucma(fr: dict) -> list[tuple[int, str]]:
    """(command, the recorder's rc line) of every recorded ucma write."""
    out = []
    for cmd, comment in fr["ucma"]:
        rc = next((line for line in comment.splitlines() if line.startswith("rc=")), "")
        out.append((cmd, rc))
    return out


def facts(directory: Path, name: str) -> dict[str, object]:
    """Everything compared of one scenario: 'key' → value."""
    lab = json.loads((directory / "lab.json").read_text())["scenarios"].get(name, {})
    out: dict[str, object] = {f"outcome.{k}": lab.get(k)
                              for k in ("set_option", "client_exit", "server_exit")}
    path = directory / f"{name}.pcapng"
    if not path.exists():
        return out
    fr = frames(path)
    ucma = _ucma(fr)
    if ucma:
        from ..layers.ucma import UCMA_COMMANDS
        out["ucma.writes"] = len(ucma)
        for i, (c, rc) in enumerate(ucma):
            out[f"ucma.{i:02d} {UCMA_COMMANDS.get(c, c)}"] = rc[3:]
    if fr["reqs"]:
        pkt = fr["reqs"][0]
        req = pkt[CMReq]
        for f in req.fields_desc:
            if f.name not in COMM_IDS:
                out[f"req.{f.name}"] = getattr(req, f.name)
        from scapy.layers.inet import IP
        if IP in pkt:
            out["req.ip_tos"], out["req.ip_ttl"] = pkt[IP].tos, pkt[IP].ttl
    else:
        out["req"] = None
    if fr["readbacks"]:
        data = fr["readbacks"][-1].path_data[0]
        out["readback.flags"] = int(data.flags)
        for f in data.path_record.fields_desc:
            out[f"readback.{f.name}"] = getattr(data.path_record, f.name)
    return out


def diff(a: str | Path, b: str | Path, same_kernel: list[str | Path] = ()) -> dict:
    """{'a', 'b' (kernel releases), 'changes': [(scenario, key, value in a, value in b)],
    'varies': [(scenario, key)] (differs between a and a run in same_kernel too), 'only_a',
    'only_b' (scenarios run on one side only)}."""
    a, b = Path(a), Path(b)
    la, lb = (json.loads((d / "lab.json").read_text()) for d in (a, b))
    names_a, names_b = list(la["scenarios"]), list(lb["scenarios"])
    common = [n for n in names_a if n in lb["scenarios"]]
    out = {"a": la["kernel_release"], "b": lb["kernel_release"], "changes": [], "varies": [],
           "only_a": [n for n in names_a if n not in lb["scenarios"]],
           "only_b": [n for n in names_b if n not in la["scenarios"]]}
    others = []  # (directory, its scenarios) of the other runs of a's kernel
    for c in map(Path, same_kernel):
        lab_c = json.loads((c / "lab.json").read_text())
        if lab_c["kernel_release"] != la["kernel_release"]:
            raise ValueError(f"{c} ran {lab_c['kernel_release']}, not {a}'s "
                             f"{la['kernel_release']}: not a second run of the same kernel")
        others.append((c, lab_c["scenarios"]))
    for name in common:
        fa, fb = facts(a, name), facts(b, name)
        seen = [facts(c, name) for c, names in others if name in names]
        for key in sorted(set(fa) | set(fb)):
            if fa.get(key) == fb.get(key):
                continue
            if any(fc.get(key) != fa.get(key) for fc in seen):
                out["varies"].append((name, key))
            else:
                out["changes"].append((name, key, fa.get(key), fb.get(key)))
    return out


def markdown(d: dict) -> str:
    """The diff as Markdown: the changes, then what varies run to run."""
    lines = [f"Kernel {d['a']} → {d['b']}: {len(d['changes'])} change(s)"
             + (f"; {len(d['varies'])} difference(s) that vary run to run on {d['a']} too"
                if d["varies"] else "") + ".", ""]
    if d["changes"]:
        lines += ["| scenario | what | " + d["a"] + " | " + d["b"] + " |", "|---|---|---|---|"]
        lines += [f"| {n} | {k} | {va} | {vb} |" for n, k, va, vb in d["changes"]]
        lines.append("")
    if d["varies"]:
        keys = sorted({k for _, k in d["varies"]})
        lines.append("Varies run to run (not a kernel change): " + ", ".join(keys) + ".")
    for side in ("only_a", "only_b"):
        if d[side]:
            lines.append(f"Run on {d[side[-1]]} only: {', '.join(d[side])}.")
    return "\n".join(lines) + "\n"
