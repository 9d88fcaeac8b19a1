"""Turn the guest's results into the lab's capture files.

For each scenario, NAME.pcapng holds the tcpdump frames (RoCEv2, link type 1) and, when the
test program handed a blob over, the blob as an "ibpath.blob" exported PDU (link type 252) at
the time of the rdma_set_option call, with its return value as the packet comment: the form
`ibpath audit` reads (layers/pathdata.py). netlink-*.pcapng are the NETLINK_RDMA recordings of
the guest's `rdma` commands (link type 253). Every file's section header comment names the
guest kernel and the lab command that made it. lab.json keeps what the guest reported.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from ..layers.pathdata import blob_pdu, set_option_comment
from ..pcapio import PcapNgWriter, read_frames
from .scenarios import lookup

LINKTYPE_ETHERNET = 1
LINKTYPE_UPPER_PDU = 252


class CommentedPcapNgWriter(PcapNgWriter):
    """PcapNgWriter whose section header block carries an opt_comment."""

    def __init__(self, path: str, comment: str):
        self.f = open(path, "wb")
        self.ifaces = {}
        c = comment.encode()
        opts = struct.pack("<HH", 1, len(c)) + c + b"\x00" * ((-len(c)) % 4) + b"\x00" * 4
        self._block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1) + opts)


def header(meta: dict, what: str) -> str:
    return (f"ibpath kernel lab: {what}\n"
            f"guest kernel: {meta['kernel_version']}\n"
            f"command: {meta.get('command') or 'ibpath lab run'}")


def scenario_capture(results: Path, name: str, out: Path, meta: dict) -> dict:
    """Write out/NAME.pcapng from results/NAME; returns the scenario's summary."""
    d = results / name
    client = json.loads((d / "client.json").read_text()) if (d / "client.json").exists() else {}
    frames = [(f.time, f.data, f.linktype, None) for f in read_frames(str(d / "wire.pcap"))]
    if "blob" in client:
        frames.append((client["blob_time"], bytes(blob_pdu(bytes.fromhex(client["blob"]))),
                       LINKTYPE_UPPER_PDU, set_option_comment(client["set_option"])))
    if (d / "record.pcapng").exists():
        # `ibpath record` of an acm run's client: its ucma commands (SET_OPTION path arrays
        # with the kernel's verdict) and ACM messages, on the guest's clock like tcpdump's
        frames += [(f.time, f.data, f.linktype, f.comment)
                   for f in read_frames(str(d / "record.pcapng"))]
    frames.sort(key=lambda f: f[0])
    sc = lookup(name)
    what = f"scenario {name}" + (f": {sc.description}" if sc else "")
    with CommentedPcapNgWriter(str(out / f"{name}.pcapng"), header(meta, what)) as w:
        for ts, data, linktype, comment in frames:
            w.write(data, linktype, ts, comment=comment)
    summary = {"description": sc.description if sc else None, "frames": len(frames)}
    for key in ("set_option", "route", "sent", "error"):
        if key in client:
            summary[key] = client[key]
    if "blob" in client:
        summary["blob"] = client["blob"]
    if (d / "acm.jsonl").exists():
        # the stand-in's log without the messages' bytes: the capture has them (ibpath.acm)
        summary["acm"] = [json.loads(line) for line in
                          (d / "acm.jsonl").read_text().splitlines() if line.strip()]
        for entry in summary["acm"]:
            for side in ("request", "answer"):
                if entry.get(side):
                    entry[side].pop("hex", None)
    return summary


def netlink_capture(src: Path, out: Path, meta: dict) -> None:
    """Rewrite one recorder output with the lab's section header comment."""
    name = "netlink-" + src.stem
    command = src.with_suffix(".txt").read_text().splitlines()[0].split(" -- ", 1)[-1]
    with CommentedPcapNgWriter(str(out / f"{name}.pcapng"),
                               header(meta, f"NETLINK_RDMA of `{command}`")) as w:
        for f in read_frames(str(src)):
            w.write(f.data, f.linktype, f.time, comment=f.comment)
    shutil.copyfile(src.with_suffix(".txt"), out / f"{name}.txt")


def export(results: Path, out: Path) -> dict:
    """Write every capture and lab.json into out; returns lab.json's content."""
    out.mkdir(parents=True, exist_ok=True)
    meta = json.loads((results / "meta.json").read_text())
    lab = {k: meta[k] for k in ("kernel_release", "kernel_version", "packages", "command")}
    lab["timing_seconds"] = {"boot_total": meta.get("boot_seconds"),
                             "guest_setup": meta.get("setup_seconds"),
                             "guest_total": meta.get("guest_seconds")}
    lab["scenarios"] = {}
    for sc in meta.get("scenarios", []):
        name = sc["name"]
        entry = {k: sc[k] for k in ("client_exit", "server_exit", "seconds", "error",
                                    "neighbours", "standin", "standin_start_seconds")
                 if k in sc}
        if (results / name / "wire.pcap").exists():
            entry.update(scenario_capture(results, name, out, meta))
        lab["scenarios"][name] = entry
    for src in sorted((results / "setup").glob("rdma-*.pcapng")):
        netlink_capture(src, out, meta)
    (out / "lab.json").write_text(json.dumps(lab, indent=1) + "\n")
    return lab
