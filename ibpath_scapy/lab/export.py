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
from pathlib import Path

from ..layers.ib import LINKTYPE_WIRESHARK_UPPER_PDU
from ..layers.pathdata import blob_pdu, set_option_comment
from ..capture.pcapio import PcapNgWriter, read_frames
from .scenarios import lookup



class CommentedPcapNgWriter(PcapNgWriter):
    """PcapNgWriter whose section header block carries an opt_comment."""

    def __init__(self, path: str, comment: str):
        super().__init__(path, options=[(1, comment)])  # opt_comment


def header(meta: dict, what: str) -> str:
    return (f"ibpath kernel lab: {what}\n"
            f"guest kernel: {meta['kernel_version']}\n"
            f"command: {meta.get('command') or 'ibpath lab run'}")


def scenario_capture(results: Path, name: str, out: Path, meta: dict) -> dict:
    """Write out/NAME.pcapng from results/NAME; returns the scenario's summary."""
    d = results / name
    client = json.loads((d / "client.json").read_text()) if (d / "client.json").exists() else {}
    frames = [(f.time, f.data, f.linktype, None) for f in read_frames(str(d / "wire.pcap"))]
    if "blob" in client and not (d / "record.pcapng").exists():
        # the test program's own report of its blob; under `ibpath record` the shim's frame
        # of the same call is the capture's (the report stays beside it, NAME.client.json)
        frames.append((client["blob_time"], bytes(blob_pdu(bytes.fromhex(client["blob"]))),
                       LINKTYPE_WIRESHARK_UPPER_PDU, set_option_comment(client["set_option"])))
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
    for key in ("set_option", "route", "sent", "error", "steps"):
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


def record_files(results: Path, name: str, out: Path, meta: dict) -> None:
    """A recorded run's extra files: the test program's own report (NAME.client.json) and
    the client's output (NAME.client.log); for record-netlink, `rdma dev` as the shim and
    the strace recorder saw it (NAME-shim.pcapng, NAME-strace.pcapng, NAME.txt)."""
    d = results / name
    if (d / "client.json").exists():
        shutil.copyfile(d / "client.json", out / f"{name}.client.json")
    if (d / "client.log").exists():
        shutil.copyfile(d / "client.log", out / f"{name}.client.log")
    for recorder, what in (("shim", "`ibpath record -- rdma dev` (the LD_PRELOAD shim)"),
                           ("strace", "`ibpath record netlink` (strace) around it")):
        if (d / f"{recorder}.pcapng").exists():
            with CommentedPcapNgWriter(str(out / f"{name}-{recorder}.pcapng"),
                                       header(meta, f"NETLINK_RDMA of `rdma dev` recorded by "
                                              f"{what}")) as w:
                for f in read_frames(str(d / f"{recorder}.pcapng")):
                    w.write(f.data, f.linktype, f.time, comment=f.comment)
    if (d / "rdma-dev.txt").exists():
        shutil.copyfile(d / "rdma-dev.txt", out / f"{name}.txt")


RECORDED_KINDS = ("acm", "record", "record-netlink")


def export(results: Path, out: Path, kernel: dict | None = None) -> dict:
    """Write every capture and lab.json into out; returns lab.json's content. `kernel`: the
    booted kernel's kernel.json (guest.build_kernel), whose origin (the Debian package and
    version, or the user's image and its sha256) lab.json keeps. The setup's NETLINK_RDMA
    recordings are written only when a plain scenario ran (the acm and record runs'
    directories keep their own captures only)."""
    out.mkdir(parents=True, exist_ok=True)
    meta = json.loads((results / "meta.json").read_text())
    lab = {k: meta[k] for k in ("kernel_release", "kernel_version", "packages", "command")}
    if kernel is not None:
        lab["kernel_origin"] = kernel["origin"]
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
        if sc.get("kind") in ("record", "record-netlink"):
            record_files(results, name, out, meta)
        lab["scenarios"][name] = entry
    if any(sc.get("kind") not in RECORDED_KINDS for sc in meta.get("scenarios", [])):
        for src in sorted((results / "setup").glob("rdma-*.pcapng")):
            netlink_capture(src, out, meta)
    (out / "lab.json").write_text(json.dumps(lab, indent=1) + "\n")
    return lab
