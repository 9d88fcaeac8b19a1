"""The stand-in ibacm's result matrix (issue 21), read from a lab capture of an acm run.

An acm run's capture (export.py) holds tcpdump's RoCEv2 frames and what `ibpath record` saw
the client do: its ACM messages on librdmacm's socket (the RESOLVE it sent and the answer it
received, "ibpath.acm") and the path array librdmacm then handed to rdma_set_option with the
kernel's return value ("ibpath.blob" with its comment). From those frames alone, per run:

* answered: the ACM answer librdmacm received (status, path entries and their flags, bytes
  past the last whole entry);
* passed: what librdmacm passed to the kernel, against the answer: "verbatim" (the path
  entries, the type field zeroed as ucma_ib_save_resp does), or how it differs;
  a run that called no rdma_set_option says so, and names a RESOLVE_ADDR with AF_IB
  addresses (the entry ucma_resolve_af_ib puts in front of rdma_getaddrinfo's answer when
  the caller did not ask for RAI_ROUTEONLY) with its result;
* verdict: the kernel's return value for it;
* route: which record the CM REQ's primary path is, or the kernel's own route;
* ucma: the `ucma` kernel-view profile's prediction for the array the kernel got, and for
  the scenario's own array had it been handed over directly.

The audit's findings are added by the caller (audit_rules), so this module stays a reader.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

from scapy.layers.l2 import Ether

from ..facts.kernelview import blob_from_bytes, select_ucma
from ..facts.librdmacm import ai_route_bytes
from ..layers.acm import ACM_EP_INFO_PATH, ACM_STATUS, AcmHdr, AcmResolve
from ..layers.cm import CMReq
from ..layers.ib import ExportedPDU
from ..layers.pathdata import PathArray, flags_text, parse_set_option_comment
from ..layers.ucma import AF_IB, UcmaResolveAddr
from ..capture.pcapio import read_frames

# The kernel's own route on the lab's rxe ports (captures/rxe/README.md): rate "port
# current" (0), MTU 1024 (3), hop limit 64, SL 0, traffic class 0.
KERNEL_ROUTE = {"mtu": 3, "rate": 0, "hop_limit": 64, "sl": 0, "tclass": 0}


def _frames(path: str | Path):
    acm, blobs, reqs, af_ib = [], [], [], []
    for f in read_frames(str(path)):
        if f.linktype == 252:
            pdu = ExportedPDU(f.data)
            name = pdu.dissector_name()
            if name == "ibpath.acm":
                acm.append(AcmHdr(bytes(pdu.payload)))
            elif name == "ibpath.blob":
                blobs.append((bytes(pdu.payload), f.comment))
            elif name == "ibpath.ucma" and UcmaResolveAddr in pdu and \
                    struct.unpack_from("<H", pdu[UcmaResolveAddr].dst_addr)[0] == AF_IB:
                # ucma_resolve_af_ib's entry: the ACM path's GIDs as AF_IB addresses
                rc = re.search(r"rc=(-?\d+)(?: errno=(\w+))?", f.comment or "")
                af_ib.append(rc.group(2) or rc.group(1) if rc else "?")
        elif f.linktype == 1:
            p = Ether(f.data)
            if CMReq in p:
                reqs.append(p[CMReq])
    return acm, blobs, reqs, af_ib


def expected_route(answer: AcmHdr) -> bytes:
    """ai_route as ucma_ib_save_resp builds it from an answer (librdmacm.ai_route_bytes)."""
    return ai_route_bytes(answer[AcmResolve].resolve_data if AcmResolve in answer else [])


def _route_of(req: CMReq, records) -> str:
    fields = {"sgid": "primary_local_gid", "dgid": "primary_remote_gid",
              "sl": "primary_sl", "tclass": "primary_traffic_class",
              "flow_label": "primary_flow_label", "hop_limit": "primary_hop_limit",
              "rate": "primary_packet_rate"}
    same = [i for i, rec in enumerate(records)
            if all(getattr(rec.path_record, a) == getattr(req, b) for a, b in fields.items())
            and rec.path_record.mtu == req.path_packet_payload_mtu]
    if len(same) == 1:
        return f"record {same[0]}"
    if same:
        # records differing only in what RoCE overwrites (LIDs): the wire cannot tell them apart
        return "records " + ", ".join(map(str, same)) + " (alike on the wire)"
    if all(getattr(req, f"primary_{k}" if k != "mtu" else "path_packet_payload_mtu") == v
           for k, v in {"packet_rate": 0, "hop_limit": 64, "sl": 0, "traffic_class": 0,
                        "mtu": 3}.items()):
        return "kernel route"
    return "neither a record nor the kernel route"


def _ucma(data: bytes) -> str:
    choice = select_ucma(blob_from_bytes(data))
    return f"gmp {choice.gmp}" if choice.accepted else "EINVAL"


def row(path: str | Path, scenario_array: bytes | None) -> dict:
    """The matrix row of one acm run's capture; scenario_array is the craft scenario's own
    path array (None when it hands over none)."""
    acm, blobs, reqs, af_ib = _frames(path)
    answers = [m for m in acm if m.is_response()]
    r: dict = {"file": Path(path).name}
    if not answers:
        r["answered"] = "nothing"
    else:
        a = answers[0]
        res = a[AcmResolve] if AcmResolve in a else None
        paths = [e for e in res.resolve_data if e.type == ACM_EP_INFO_PATH] if res else []
        text = ACM_STATUS.get(a.status, str(a.status))
        if paths:
            text += ", " + ", ".join(f"0x{int(e.flags):02X}" for e in paths)
        if res is not None and res.trailing:
            text += f" + {len(res.trailing)} bytes"
        if a.length != len(bytes(a)):
            # librdmacm's recv() takes sizeof(struct acm_msg); the rest stays in the socket
            text += f" (of {a.length} bytes, {len(bytes(a))} read)"
        r["answered"] = text
    if not blobs:
        r["passed"] = "no rdma_set_option"
        r["verdict"] = None
        if af_ib:
            r["passed"] += (f"; RESOLVE_ADDR with AF_IB addresses from the answer's path "
                            f"({', '.join(af_ib)})")
    else:
        data, comment = blobs[0]
        flags = [flags_text(int(x.flags)) for x in PathArray(data).records]
        r["passed_flags"] = flags
        want = expected_route(answers[0]) if answers else b""
        trailing = len(answers[0][AcmResolve].trailing) if answers and \
            AcmResolve in answers[0] else 0
        if data == want:
            r["passed"] = "verbatim" + (f", the {trailing} bytes past the last entry dropped"
                                        if trailing else "")
        else:
            r["passed"] = "differs from the answer's path entries"
        r["verdict"] = parse_set_option_comment(comment)  # "0", "-EINVAL"
        r["ucma"] = _ucma(data)
        r["passed_length"] = len(data)
    if scenario_array is not None:
        r["ucma_direct"] = _ucma(scenario_array)
    if not reqs:
        r["route"] = "no CM REQ on the wire"
    else:
        recs = PathArray(blobs[0][0]).records if blobs and r.get("verdict") == "0" else []
        r["route"] = _route_of(reqs[0], recs)
    return r


# -- the committed directory -------------------------------------------------------------------

MATRIX = "matrix.json"
COLUMNS = ("answered", "passed", "verdict", "route", "ucma", "ucma_direct", "findings")


def audit_rules(paths: list[str]) -> dict[str, list[str]]:
    """The rule IDs (every severity) `ibpath audit` gives each capture, profile "all"."""
    from ..audit.model import AuditOptions
    from ..audit.run import audit_paths
    audits, _ = audit_paths(paths, AuditOptions(kernel="all"), quiet=True)
    return {Path(p).name: sorted({f.rule for f in a.findings}) for p, a in zip(paths, audits)}


def scenario_array(craft: str) -> bytes | None:
    """The craft scenario's own first path array (seed 0, as `ibpath acm serve` runs it)."""
    from ..acm.serve import plan_for
    plan = plan_for(craft)
    return plan.arrays[0] if plan.kind == "paths" else None


def rows(directory: str | Path) -> list[dict]:
    """The matrix of every acm-*.pcapng in directory, with its audit findings."""
    from .scenarios import lookup
    d = Path(directory)
    files = sorted(d.glob("acm-*.pcapng"))
    found = audit_rules([str(p) for p in files])
    out = []
    for p in files:
        sc = lookup(p.stem)
        if sc is None or sc.craft is None:
            raise ValueError(f"{p}: not the capture of a known acm lab run")
        r = {"scenario": p.stem, "craft": sc.craft, "client": sc.client,
             **row(p, scenario_array(sc.craft)), "findings": found[p.name]}
        out.append(r)
    return out


def write(directory: str | Path) -> list[dict]:
    """Write matrix.json and manifest.json (the rows `ibpath craft --verify` checks) for the
    acm captures in directory; returns the rows."""
    d = Path(directory)
    table = rows(d)
    (d / MATRIX).write_text(json.dumps({"rows": table}, indent=1) + "\n")
    manifest = {"scenarios": [
        {"file": r["file"], "scenario": r["scenario"], "kernel": "all", "rules": r["findings"],
         "malformed": False,
         "shows": f"stand-in ibacm answering with craft scenario {r['craft']}; "
                  f"{'the test program' if r['client'] == 'cmtest' else r['client']} resolves"}
        for r in table]}
    (d / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return table


def markdown(table: list[dict]) -> str:
    """The matrix as a Markdown table (captures/rxe/acm/README.md)."""
    head = ("| run | stand-in answered | librdmacm → kernel | kernel | CM REQ primary path | "
            "ucma predicts | ucma, scenario's array direct | audit |")
    lines = [head, "|" + "---|" * 8]
    for r in table:
        lines.append("| " + " | ".join([
            r["scenario"], r["answered"], r["passed"] + (
                f" ({r['passed_length']} bytes)" if "passed_length" in r else ""),
            r.get("verdict") or "—", r["route"], r.get("ucma", "—"),
            r.get("ucma_direct", "—"), ", ".join(r["findings"]) or "none"]) + " |")
    return "\n".join(lines) + "\n"
