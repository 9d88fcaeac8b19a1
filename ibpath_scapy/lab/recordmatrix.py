"""The recorded runs' matrix (issue 20 point 5), read from the captures of `ibpath lab run
record-all` (captures/rxe/record).

A recorded run's capture (export.py) holds tcpdump's RoCEv2 frames on the rxe link and what
`ibpath record`'s shim saw the client process do: its ucma commands on /dev/infiniband/rdma_cm
with the kernel's responses (layers/ucma.py), and, for a SET_OPTION(IB, IB_PATH), the path
array as an "ibpath.blob" frame with the kernel's verdict as its comment. From those frames,
per run:

* set: what the program handed to rdma_set_option (the records' flags, the length), or
  nothing (rdma_resolve_route alone);
* verdict: the kernel's answer to that SET_OPTION (the shim's comment: 0 or -ERRNO);
* readback: the path the kernel holds for the connecting id, as librdmacm read it back with
  RDMA_USER_CM_CMD_QUERY(RDMA_USER_CM_QUERY_PATH) after ROUTE_RESOLVED (the ib_path_rec_data
  array of the response): which record of the blob it is, or the kernel's own route;
* req: the CM REQ on the wire against that readback, field by field (REQ_FIELDS; the fields
  the REQ carries derived from the path, DERIVED; the rest cannot be compared, see
  captures/rxe/record/README.md), and which record of the blob it is.

Run as `python -m ibpath_scapy.lab.recordmatrix DIR` it writes DIR/matrix.json and
DIR/manifest.json (the rows `ibpath craft --verify DIR` checks) and prints the Markdown table.
The audit's findings are `ibpath audit`'s, rule IDs of every severity, profile "all".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from ..layers.cm import CMReq
from ..layers.coded import PERMISSIVE_LID
from ..layers.ib import ExportedPDU
from ..layers.pathdata import PathArray, flags_text, parse_set_option_comment
from ..layers.ucma import CMD, UcmaCmdHdr, UcmaQuery, UcmaQueryPathResp
from ..capture.pcapio import read_frames

# readback PathRecord field -> CM REQ field that carries it unchanged (cm.c cm_format_req,
# cm_format_path_lid/gid and friends)
REQ_FIELDS = {
    "sgid": "primary_local_gid", "dgid": "primary_remote_gid",
    "flow_label": "primary_flow_label", "tclass": "primary_traffic_class",
    "hop_limit": "primary_hop_limit", "sl": "primary_sl", "rate": "primary_packet_rate",
    "mtu": "path_packet_payload_mtu", "pkey": "pkey",
}
RXE_CA_ACK_DELAY = 15  # rxe_param.h RXE_LOCAL_CA_ACK_DELAY: the port's local_ca_ack_delay


def cm_ack_timeout(ca_ack_delay: int, packet_life_time: int) -> int:
    """cm.c cm_ack_timeout (6.1): the REQ's Local ACK Timeout from the path's
    PacketLifeTime and the CA's ACK delay."""
    t = packet_life_time + 1
    if t >= ca_ack_delay:
        t += ca_ack_delay >= t - 1
    else:
        t = ca_ack_delay + (t >= ca_ack_delay - 1)
    return min(31, t)


def derived(rec) -> dict:
    """What cm_format_req puts into a RoCE REQ computed from the path, not copied: the LIDs
    (sa_path_get_slid/dlid are 0 on a RoCE path; 0xFFFF when hop limit > 1), SubnetLocal
    (hop limit <= 1) and the Local ACK Timeout (cm_ack_timeout with rxe's ACK delay)."""
    lid = 0 if rec.hop_limit <= 1 else PERMISSIVE_LID
    return {"primary_local_lid": lid, "primary_remote_lid": lid,
            "primary_subnet_local": int(rec.hop_limit <= 1),
            "primary_local_ack_timeout": cm_ack_timeout(RXE_CA_ACK_DELAY,
                                                        rec.packet_life_time)}


def compare(rec, req: CMReq) -> dict[str, tuple]:
    """The fields where readback record `rec` and the REQ's primary path differ:
    {REQ field: (expected, on the wire)}; empty when the REQ is the readback."""
    diff = {}
    for a, b in REQ_FIELDS.items():
        want, got = getattr(rec, a), getattr(req, b)
        if a in ("sgid", "dgid"):
            want, got = str(want), str(got)
        if want != got:
            diff[b] = (want, got)
    for b, want in derived(rec).items():
        if getattr(req, b) != want:
            diff[b] = (want, getattr(req, b))
    return diff


def frames(path: str | Path) -> dict:
    """The run's ucma commands (with their packet comments), blob frames, QUERY PATH
    readbacks (the last one before CONNECT counts) and CM REQs with their IP/UDP headers."""
    out: dict = {"blobs": [], "readbacks": [], "reqs": [], "connect": False, "ucma": []}
    for f in read_frames(str(path)):
        if f.linktype == 252:
            pdu = ExportedPDU(f.data)
            name = pdu.dissector_name()
            if name == "ibpath.blob":
                out["blobs"].append((bytes(pdu.payload), f.comment or "", f.time))
            elif name == "ibpath.ucma" and UcmaCmdHdr in pdu:
                cmd = pdu[UcmaCmdHdr].cmd
                out["ucma"].append((cmd, f.comment or ""))
                if cmd == CMD["CONNECT"]:
                    out["connect"] = True
                elif UcmaQueryPathResp in pdu and not out["connect"] and \
                        pdu[UcmaQueryPathResp].path_data:
                    out["readbacks"].append(pdu[UcmaQueryPathResp])
        elif f.linktype == 1:
            p = Ether(f.data)
            if CMReq in p:
                out["reqs"].append(p)
    return out


def which_record(rec, records) -> str:
    """Which blob record the path `rec` is (the fields the kernel keeps), or the kernel's
    own route."""
    keep = ("sgid", "dgid", "flow_label", "tclass", "hop_limit", "sl", "rate", "mtu", "pkey",
            "packet_life_time")
    same = [i for i, r in enumerate(records)
            if all(getattr(r.path_record, k) == getattr(rec, k) for k in keep)]
    if len(same) == 1:
        return f"record {same[0]}"
    if same:
        return "records " + ", ".join(map(str, same))
    return "kernel route"


def _path_text(rec) -> str:
    return (f"SL {rec.sl}, TC 0x{rec.tclass:02X}, FL 0x{rec.flow_label:X}, HL "
            f"{rec.hop_limit}, MTU {rec.mtu}, rate {rec.rate}, PLT {rec.packet_life_time}")


def row(path: str | Path) -> dict:
    """The matrix row of one recorded run's capture."""
    fr = frames(path)
    r: dict = {"file": Path(path).name}
    records = []
    if fr["blobs"]:
        data, comment, _ = fr["blobs"][0]
        arr = PathArray(data)
        r["set"] = ", ".join(f"0x{int(x.flags):02X}" for x in arr.records) + \
            f" ({len(data)} bytes)"
        r["set_flags"] = [flags_text(int(x.flags)) for x in arr.records]
        r["verdict"] = parse_set_option_comment(comment)
        if r["verdict"] == "0":
            records = arr.records
    else:
        r["set"] = "nothing (rdma_resolve_route)"
        r["verdict"] = None
    if fr["readbacks"]:
        rb = fr["readbacks"][-1]
        rec = rb.path_data[0].path_record
        r["readback"] = which_record(rec, records) + f": {_path_text(rec)}"
        r["readback_paths"] = len(rb.path_data)
    else:
        r["readback"] = "no QUERY PATH readback"
        rec = None
    if not fr["reqs"]:
        r["req"] = "no CM REQ on the wire"
    else:
        req = fr["reqs"][0][CMReq]
        if rec is None:
            r["req"] = "a CM REQ, no readback to compare"
        else:
            diff = compare(rec, req)
            r["req"] = "= readback" if not diff else "differs from the readback: " + \
                ", ".join(f"{k} {a} vs {b}" for k, (a, b) in diff.items())
            r["req"] += f" ({which_req(req, records)})"
    return r


def which_req(req: CMReq, records) -> str:
    same = [i for i, x in enumerate(records)
            if all((str(getattr(x.path_record, a)) if a in ("sgid", "dgid") else
                    getattr(x.path_record, a)) ==
                   (str(getattr(req, b)) if a in ("sgid", "dgid") else getattr(req, b))
                   for a, b in REQ_FIELDS.items())]
    if len(same) == 1:
        return f"record {same[0]}"
    if same:
        return "records " + ", ".join(map(str, same))
    return "kernel route"


# -- the committed directory -------------------------------------------------------------------

MATRIX = "matrix.json"
NETLINK = ("-shim.pcapng", "-strace.pcapng")


def run_files(directory: str | Path) -> list[Path]:
    """The recorded runs' captures (not the two netlink ones)."""
    return sorted(p for p in Path(directory).glob("rec-*.pcapng")
                  if not p.name.endswith(NETLINK))


def rows(directory: str | Path) -> list[dict]:
    """The matrix of every recorded run in directory, with its audit findings."""
    from .acmmatrix import audit_rules
    from .scenarios import lookup
    files = run_files(directory)
    found = audit_rules([str(p) for p in files])
    out = []
    for p in files:
        sc = lookup(p.stem)
        if sc is None or sc.kind != "record":
            raise ValueError(f"{p}: not the capture of a known recorded lab run")
        program = "test program" if sc.client == "cmtest" else sc.client
        out.append({"scenario": p.stem, "program": program, **row(p),
                    "findings": found[p.name]})
    return out


def write(directory: str | Path) -> list[dict]:
    """Write matrix.json and manifest.json for the recorded captures in directory (the
    netlink pair included in the manifest); returns the rows."""
    from .acmmatrix import audit_rules
    from .scenarios import lookup
    d = Path(directory)
    table = rows(d)
    (d / MATRIX).write_text(json.dumps({"rows": table}, indent=1) + "\n")
    entries = [{"file": r["file"], "scenario": r["scenario"], "kernel": "all",
                "rules": r["findings"], "malformed": False,
                "shows": lookup(r["scenario"]).description} for r in table]
    netlink = sorted(p for p in d.glob("rec-*.pcapng") if p.name.endswith(NETLINK))
    for p, rules in zip(netlink, audit_rules([str(p) for p in netlink]).values()):
        recorder = "the LD_PRELOAD shim" if p.name.endswith("-shim.pcapng") else "strace"
        entries.append({"file": p.name, "scenario": p.stem, "kernel": "all", "rules": rules,
                        "malformed": False,
                        "shows": f"NETLINK_RDMA of `rdma dev` in the guest recorded by {recorder}"})
    (d / "manifest.json").write_text(json.dumps({"scenarios": entries}, indent=1) + "\n")
    return table


def markdown(table: list[dict]) -> str:
    """The matrix as a Markdown table (captures/rxe/record/README.md)."""
    head = ("| run | program | set (rdma_set_option) | kernel's verdict | QUERY PATH readback | "
            "CM REQ on the wire | audit |")
    lines = [head, "|" + "---|" * 7]
    for r in table:
        lines.append("| " + " | ".join([
            r["scenario"], r["program"], r["set"], r["verdict"] or "—", r["readback"],
            r["req"], ", ".join(r["findings"]) or "none"]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m ibpath_scapy.lab.recordmatrix DIR", file=sys.stderr)
        return 2
    table = write(argv[0])
    if not table:
        print(f"{argv[0]}: no rec-*.pcapng", file=sys.stderr)
        return 2
    print(markdown(table), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
