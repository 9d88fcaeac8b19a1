"""Record a real SA exchange on the simulated fabric (record/fabric.py) with `ibpath record`:
OpenSM as SM and SA and each saquery as client, every one under the recorder, and write
OpenSM's side of the SA exchange also as the native-InfiniBand capture ibdump would have
taken on its port.

What is recorded, and how it is turned into wire frames
-------------------------------------------------------
* `ibpath record` records every MAD a process writes to or reads from its umad fd (an
  "ibpath.umad" exported PDU: struct ib_user_mad_hdr and the message). OpenSM's recording
  holds what the SA read (requests) and wrote (answers, whole: OpenSM writes an RMPP answer as
  one message for the kernel to segment); each saquery's, what it wrote and what it read.
* umad2sim (ibsim 0.10) has no RMPP: it forwards only the first 256 bytes of a MAD a process
  writes, and its receive path damages MAD bytes 224..255 of what a process reads. So
  saquery reads at most 200 data bytes of an answer (3 PathRecords, the third damaged), and
  prints what it read; OpenSM's recording keeps the whole answer.
* The wire capture is built from OpenSM's recording: requests are what OpenSM read, with MAD
  bytes 224..255 restored from the client's own write (after checking bytes 0..223 agree
  but for the TID's upper half, which the transport sets as a kernel does with its agent's
  hi_tid); answers are what OpenSM wrote, an RMPP-active one segmented as the kernel's RMPP
  sender does (rmpp.segment). Only LRH/BTH/DETH/ICRC/VCRC (encap.native_ib_frame) and the
  segmentation are added; every MAD byte comes from OpenSM or saquery.
* Frame times are synthetic (epoch + n ms) and PSNs count per sender, so the wire capture
  depends on the recordings alone; the TIDs are saquery's (libibmad seeds its generator with
  time and pid), so each session has its own.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ..layers.ib import ExportedPDU
from ..layers.mad import MAD_SIZE, MGMT_CLASS_SA, RMPP_ACTIVE
from ..layers.roce import GSI_QKEY
from ..layers.umad import UMAD_DISSECTOR, UMAD_HDR_SIZE, UMAD_TID_LOW, UserMad
from ..capture.comment import parse_call_comment
from .fabric import DEFAULT_TOPOLOGY, Fabric, missing_tools, package_versions

UMAD2SIM_INTACT_BYTES = 224  # MAD bytes that survive umad2sim's receive path intact
DEFAULT_PKEYS = {0: 0xFFFF}  # ibsim's P_Key table: index 0 = full default partition

FIXED_EPOCH = 1704067200.0  # 2024-01-01T00:00:00Z: frame n is at FIXED_EPOCH + n * step
FRAME_STEP = 0.001
OPENSM_CAPTURE = "opensm.pcapng"

__all__ = ["DEFAULT_QUERIES", "DEFAULT_TOPOLOGY", "Query", "SessionResult", "UmadCall",
           "WireMad", "missing_tools", "record_sa_session", "sa_wire_mads", "umad_calls",
           "write_pcap"]


@dataclass(frozen=True)
class Query:
    """One saquery run.  args may use {lid[Node]} and {gid[Node]} fields, filled in
    from the running subnet (LIDs are assigned by OpenSM)."""

    name: str
    args: tuple[str, ...]
    note: str = ""


DEFAULT_QUERIES: tuple[Query, ...] = (
    Query("all-paths", ("-p",),
          "PathRecord GetTable, empty ComponentMask: every LID pair -> multi-segment RMPP"),
    Query("src-to-dst-lids", ("-p", "--src-to-dst", "{lid[Hca2]}:{lid[Hca3]}"),
          "SLID+DLID (+NumbPath 0x7f, which saquery always sets): one LID pair -> 1 record"),
    Query("src-to-dst-names", ("-p", "--src-to-dst", "Hca2:Hca3"),
          "names: saquery first resolves them with NodeRecord GetTable queries"),
    Query("sgid-to-dgid", ("-p", "--sgid-to-dgid", "{gid[Hca2]}-{gid[Hca3]}"),
          "SGID+DGID (+NumbPath 0x7f): every LID pair of the two ports (LMC 1 -> 4 paths)"),
    Query("dgid-only", ("-p", "--dgid", "{gid[Hca3]}"),
          "DGID only: paths from every LID in the subnet to Hca3's LIDs"),
    Query("unknown-dlid", ("-p", "--src-to-dst", "{lid[Hca2]}:99"),
          "DLID 99 does not exist: OpenSM answers GetTableResp with 0 records, status 0"),
    Query("invalid-rate", ("-p", "--rate", "63", "--src-to-dst", "{lid[Hca2]}:{lid[Hca3]}"),
          "Rate 63 is not a valid rate: OpenSM answers status 0x0200 (ERR_REQ_INVALID)"),
)


# --------------------------------------------------------------------------------------------
# A recording's umad calls
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class UmadCall:
    """One MAD a process wrote to ("W") or read from ("R") its umad fd, as `ibpath record`
    took it: the recording's frame, the call, struct ib_user_mad_hdr and the message."""

    frame: int
    direction: str
    pid: int
    fd: int
    header: UserMad
    mad: bytes

    @property
    def mgmt_class(self) -> int:
        return self.mad[1]

    @property
    def method(self) -> int:
        return self.mad[3]

    @property
    def tid(self) -> int:
        return int.from_bytes(self.mad[8:16], "big")

    @property
    def attr_id(self) -> int:
        return int.from_bytes(self.mad[16:18], "big")


def umad_calls(path: str | os.PathLike) -> list[UmadCall]:
    """The umad frames of an `ibpath record` capture, in order."""
    from ..capture.pcapio import read_frames

    out = []
    for f in read_frames(str(path)):
        pdu = ExportedPDU(f.data)
        call = parse_call_comment(f.comment)
        if pdu.dissector_name() != UMAD_DISSECTOR or call is None:
            continue
        raw = bytes(pdu.payload)
        if len(raw) < UMAD_HDR_SIZE + 18:
            raise ValueError(f"{path}: frame {f.number}: umad frame of {len(raw)} bytes")
        out.append(UmadCall(f.number, "W" if call["call"] == "write" else "R", call["pid"],
                            call["fd"], UserMad(raw[:UMAD_HDR_SIZE]), raw[UMAD_HDR_SIZE:]))
    return out


# --------------------------------------------------------------------------------------------
# umad calls -> wire MADs -> pcap
# --------------------------------------------------------------------------------------------

@dataclass
class WireMad:
    """One 256-byte MAD as it would cross the wire, with its addressing."""

    slid: int
    dlid: int
    sl: int
    sqpn: int
    dqpn: int
    qkey: int
    pkey: int
    mad: bytes
    source: str  # "request" (from the SA's read) or "response" (from the SA's write)
    sa_frame: int  # the frame of the SA's recording it came from
    segment: int = 0  # RMPP segment number (0: not RMPP)
    segments: int = 0
    message_len: int = 0  # length of the MAD as the SA read/wrote it (before segmentation)
    notes: list[str] = field(default_factory=list)


def _client_writes(client: Iterable[UmadCall]) -> dict[tuple, list[UmadCall]]:
    by_key: dict[tuple, list[UmadCall]] = {}
    for r in client:
        if r.direction == "W" and r.mgmt_class == MGMT_CLASS_SA and not r.method & 0x80:
            by_key.setdefault((r.tid & UMAD_TID_LOW, r.attr_id, r.method), []).append(r)
    return by_key


def sa_wire_mads(sa: Sequence[UmadCall], client: Sequence[UmadCall] = (), *, sa_lid: int,
                 pkeys: dict[int, int] | None = None) -> list[WireMad]:
    """The SA-class MADs the SA process read (requests) and wrote (answers), in its order,
    as wire MADs. RMPP-active answers are segmented like the kernel does."""
    from ..facts import rmpp  # the project's kernel-equivalent segmentation

    pkeys = DEFAULT_PKEYS if pkeys is None else pkeys
    writes = _client_writes(client)
    # TID -> (damaged bytes 224..255 as the SA read them, what the client really sent)
    repaired: dict[int, tuple[bytes, bytes]] = {}
    out: list[WireMad] = []
    for r in sa:
        if r.mgmt_class != MGMT_CLASS_SA:
            continue
        h = r.header
        pkey = pkeys.get(h.pkey_index)
        if pkey is None:
            raise ValueError(f"SA frame {r.frame}: unknown P_Key index {h.pkey_index}")
        if h.grh_present:
            raise ValueError(f"SA frame {r.frame}: GRH present; only LID-routed MADs "
                             "are supported")
        if r.direction == "R":
            out.append(_request(r, writes, repaired, sa_lid, pkey))
            continue
        mad = r.mad
        base = dict(slid=sa_lid, dlid=h.lid, sl=h.sl, sqpn=1, dqpn=h.qpn,
                    qkey=h.qkey or GSI_QKEY, pkey=pkey, source="response",
                    sa_frame=r.frame, message_len=len(mad))
        if len(mad) > 26 and mad[26] & RMPP_ACTIVE:
            segs = rmpp.segment(mad)
            for k, seg in enumerate(segs, 1):
                out.append(WireMad(mad=seg, segment=k, segments=len(segs), **base))
            continue
        if len(mad) > MAD_SIZE:
            raise ValueError(f"SA frame {r.frame}: {len(mad)}-byte MAD without RMPP ACTIVE "
                             "cannot be sent")
        mad = mad.ljust(MAD_SIZE, b"\0")
        notes = []
        n = UMAD2SIM_INTACT_BYTES
        fix = repaired.get(r.tid)
        if fix and mad[n:] == fix[0]:
            # OpenSM's error responses echo the whole request MAD, including the bytes
            # umad2sim damaged on the way in: echo what the client sent.
            mad = mad[:n] + fix[1]
            notes.append(f"bytes {n}..255 echo the request: restored like the request's")
        out.append(WireMad(mad=mad, notes=notes, **base))
    return out


def _request(r: UmadCall, writes: dict, repaired: dict, sa_lid: int, pkey: int) -> WireMad:
    """A request the SA read, its bytes 224..255 restored from the client's write."""
    h = r.header
    mad = bytearray(r.mad[:MAD_SIZE].ljust(MAD_SIZE, b"\0"))
    notes = []
    qkey = GSI_QKEY
    cands = writes.get((r.tid & UMAD_TID_LOW, r.attr_id, r.method), [])
    if cands:
        sent = cands.pop(0)
        smad = sent.mad[:MAD_SIZE].ljust(MAD_SIZE, b"\0")
        n = UMAD2SIM_INTACT_BYTES
        diff = [i for i in range(n) if mad[i] != smad[i] and not 8 <= i < 12]
        if diff:
            raise ValueError(f"SA frame {r.frame}: request read by the SA differs from what "
                             f"the client wrote at MAD bytes {diff[:8]} (TID {r.tid:#018x})")
        if mad[n:] != smad[n:]:
            notes.append(f"bytes {n}..255 restored from the client's write "
                         "(umad2sim receive path damages them)")
            repaired[r.tid] = (bytes(mad[n:]), bytes(smad[n:]))
        mad[n:] = smad[n:]
        qkey = sent.header.qkey or GSI_QKEY
    else:
        notes.append("no client write found for this request; bytes "
                     f"{UMAD2SIM_INTACT_BYTES}..255 are as umad2sim delivered them")
    return WireMad(slid=h.lid, dlid=sa_lid, sl=h.sl, sqpn=h.qpn, dqpn=1, qkey=qkey, pkey=pkey,
                   mad=bytes(mad), source="request", sa_frame=r.frame,
                   message_len=len(r.mad), notes=notes)


def write_pcap(wire: Sequence[WireMad], path: str | os.PathLike, *,
               epoch: float = FIXED_EPOCH, step: float = FRAME_STEP) -> int:
    """Write wire MADs as ERF type-21 records (pcap link type 197, as ibdump does).
    Frame n (0-based) gets time epoch + n*step.  PSNs count per (SLID, source QP)."""
    from ..capture.encap import erf_record, native_ib_frame
    from ..layers.ib import LINKTYPE_ERF
    from ..capture.pcapio import PcapWriter

    psn: dict[tuple[int, int], int] = {}
    with PcapWriter(str(path), LINKTYPE_ERF) as w:
        for n, m in enumerate(wire):
            key = (m.slid, m.sqpn)
            p = psn.get(key, 0)
            psn[key] = (p + 1) & 0xFFFFFF
            frame = native_ib_frame(m.mad, slid=m.slid, dlid=m.dlid, sl=m.sl, dqpn=m.dqpn,
                                    sqpn=m.sqpn, qkey=m.qkey, pkey=m.pkey, psn=p)
            ts = epoch + n * step
            w.write(erf_record(frame, ts), ts)
    return len(wire)


# --------------------------------------------------------------------------------------------
# The session
# --------------------------------------------------------------------------------------------

@dataclass
class QueryResult:
    name: str
    argv: list[str]
    note: str
    returncode: int
    stdout_file: str
    capture: str  # saquery's own recording
    stderr: str
    request_tids: list[str]  # SA requests this saquery sent (TID low 32 bits, hex)


@dataclass
class SessionResult:
    outdir: str
    pcap: str
    frames: int
    sa_lid: int
    sm_guid: str
    nodes: dict[str, dict]
    queries: list[QueryResult]
    packages: dict[str, str]
    opensm_argv: list[str]
    files: dict[str, str]
    lmc: int = 0
    sm_host: str = ""
    client_host: str = ""


def record_sa_session(outdir: str | os.PathLike, queries: Sequence[Query] = DEFAULT_QUERIES, *,
                      topology: str = DEFAULT_TOPOLOGY, sm_host: str = "Hca1",
                      client_host: str = "Hca2", lmc: int = 1, query_timeout: float = 30,
                      startup_timeout: float = 30, session_limit: float = 300,
                      pcap_name: str = "opensm-saquery.pcap",
                      write_readme: bool = True) -> SessionResult:
    """Run the fabric with OpenSM under `ibpath record`, each of `queries` as a saquery under
    `ibpath record`, and write to outdir:

    * ``opensm.pcapng``: OpenSM's recording (its SMPs and the SA exchange);
    * ``saquery-NN-<name>.pcapng`` and ``.txt``: each saquery's recording and stdout;
    * ``<pcap_name>``: the SA exchange as native IB frames (ERF type 21, link type 197);
    * ``topology.net``, ``session.json`` and, if write_readme, ``README.md``."""
    missing = missing_tools()
    if missing:
        raise RuntimeError("missing: " + ", ".join(missing))
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    osm_capture = outdir / OPENSM_CAPTURE
    results: list[QueryResult] = []
    with Fabric(topology, sm_host=sm_host, lmc=lmc, sm_record=osm_capture,
                startup_timeout=startup_timeout, limit=session_limit) as fab:
        lid = {k: v.lid for k, v in fab.nodes.items()}
        gid = {k: v.gid for k, v in fab.nodes.items()}
        for i, q in enumerate(queries, 1):
            argv = ["saquery"] + [a.format(lid=lid, gid=gid) for a in q.args]
            stem = f"saquery-{i:02d}-{q.name}"
            try:
                r = fab.run(client_host, argv, record=outdir / f"{stem}.pcapng",
                            timeout=query_timeout)
                rc, out, err = r.returncode, r.stdout, r.stderr
            except subprocess.TimeoutExpired as e:
                rc, out, err = -1, e.stdout or b"", (e.stderr or b"") + b"\n[timed out]"
            (outdir / f"{stem}.txt").write_bytes(out)
            tids = [f"{c.tid & UMAD_TID_LOW:08x}" for c in umad_calls(outdir / f"{stem}.pcapng")
                    if c.direction == "W" and c.mgmt_class == MGMT_CLASS_SA]
            results.append(QueryResult(q.name, argv, q.note, rc, f"{stem}.txt",
                                       f"{stem}.pcapng", _recorder_lines_dropped(err), tids))
            if not fab.opensm_alive():
                raise RuntimeError("OpenSM died during the queries")
        sa_lid, sm_guid = fab.sa_lid, fab.sm_guid
        nodes = {k: asdict(v) for k, v in fab.nodes.items()}
        opensm_argv = [_workdir_free(a, fab.work) for a in fab.opensm_argv]
    # the fabric is stopped: OpenSM's recording is written
    client = [c for q in results for c in umad_calls(outdir / q.capture)]
    wire = sa_wire_mads(umad_calls(osm_capture), client, sa_lid=sa_lid)
    frames = write_pcap(wire, outdir / pcap_name)
    (outdir / "topology.net").write_text(topology)
    result = SessionResult(
        outdir=str(outdir), pcap=pcap_name, frames=frames, sa_lid=sa_lid, sm_guid=sm_guid,
        nodes=nodes, queries=results, packages=package_versions(), opensm_argv=opensm_argv,
        files={"sa_capture": OPENSM_CAPTURE, "topology": "topology.net"},
        lmc=lmc, sm_host=sm_host, client_host=client_host)
    (outdir / "session.json").write_text(_session_json(result, wire))
    if write_readme:
        (outdir / "README.md").write_text(render_readme(result, wire))
    return result


def _workdir_free(arg: str, work: Path) -> str:
    return "<workdir>" + arg[len(str(work)):] if arg.startswith(str(work)) else arg


def _recorder_lines_dropped(stderr: bytes) -> str:
    """saquery's stderr without `ibpath record`'s own summary lines."""
    lines = stderr.decode(errors="replace").splitlines()
    return "\n".join(x for x in lines if not x.startswith("ibpath record:"))


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------

_METHODS = {0x01: "Get", 0x81: "GetResp", 0x12: "GetTable", 0x92: "GetTableResp",
            0x02: "Set", 0x06: "Report", 0x86: "ReportResp", 0x14: "GetMulti",
            0x94: "GetMultiResp", 0x15: "Delete", 0x95: "DeleteResp"}
_ATTRS = {0x0001: "ClassPortInfo", 0x0011: "NodeRecord", 0x0012: "PortInfoRecord",
          0x0035: "PathRecord", 0x0038: "MCMemberRecord", 0x0031: "ServiceRecord"}


def frame_summary(wire: Sequence[WireMad]) -> list[dict]:
    """One dict per frame (1-based), read from the MAD bytes for the README/session.json."""
    out = []
    for n, m in enumerate(wire, 1):
        mad = m.mad
        method, status = mad[3], int.from_bytes(mad[4:6], "big")
        tid, attr = int.from_bytes(mad[8:16], "big"), int.from_bytes(mad[16:18], "big")
        d = {"frame": n, "source": m.source, "slid": m.slid, "dlid": m.dlid,
             "method": _METHODS.get(method, f"{method:#04x}"), "status": f"{status:#06x}",
             "attribute": _ATTRS.get(attr, f"{attr:#06x}"), "tid": f"{tid:#018x}",
             "comp_mask": f"{int.from_bytes(mad[48:56], 'big'):#018x}",
             "sa_frame": m.sa_frame}
        if m.segment:
            seg, paylen = int.from_bytes(mad[28:32], "big"), int.from_bytes(mad[32:36], "big")
            d.update(rmpp_segment=seg, rmpp_segments=m.segments, rmpp_flags=mad[26] & 7,
                     rmpp_paylen=paylen, attr_offset=int.from_bytes(mad[44:46], "big"))
        if m.notes:
            d["notes"] = list(m.notes)
        out.append(d)
    return out


def _session_json(result: SessionResult, wire: Sequence[WireMad]) -> str:
    d = asdict(result)
    d["outdir"] = "."
    d["frame_table"] = frame_summary(wire)
    return json.dumps(d, indent=2, sort_keys=True) + "\n"


def render_readme(result: SessionResult, wire: Sequence[WireMad]) -> str:
    """captures/opensm/README.md, from the session."""
    pk = "\n".join(f"| {p} | {v} |" for p, v in sorted(result.packages.items()))
    nodes = "\n".join(f"| {h} | {v['lid']} | {v['gid']} |" for h, v in result.nodes.items())
    q_rows = []
    for i, q in enumerate(result.queries, 1):
        cmd = " ".join(q.argv)
        err = q.stderr.strip().replace("\n", " ").replace("|", "\\|")
        q_rows.append(f"| {i} | `{cmd}` | {q.returncode} | `{q.stdout_file}`, `{q.capture}` | "
                      f"{', '.join(q.request_tids)} | {q.note}"
                      f"{(' — stderr: ' + err) if err else ''} |")
    frows = []
    for f in frame_summary(wire):
        rm = (f"{f['rmpp_segment']}/{f['rmpp_segments']} flags={f['rmpp_flags']} "
              f"paylen={f['rmpp_paylen']}" if "rmpp_segment" in f else "")
        frows.append(f"| {f['frame']} | {f['slid']}→{f['dlid']} | {f['method']} | "
                     f"{f['attribute']} | {f['status']} | {f['tid']} | {f['sa_frame']} | {rm} |")
    osm_cmd = " ".join(result.opensm_argv)
    max_resp = max((m.message_len for m in wire if m.source == "response"), default=0)
    return f"""# captures/opensm — a real OpenSM SA exchange, recorded on ibsim by `ibpath record`

**Regenerate:** `python tools/record_opensm.py` (needs the Debian packages below and a C
compiler; runs in a few seconds). It rewrites every file in this directory, this README
included (the README is generated from the session).

| File | What |
|---|---|
| `{OPENSM_CAPTURE}` | OpenSM under `ibpath record`: every MAD it read from and wrote to its umad fd (its SMPs too), as `ibpath.umad` exported PDUs with the call on each frame's comment |
| `saquery-NN-*.pcapng` | each saquery under `ibpath record`: the requests it wrote, the answers it read |
| `saquery-NN-*.txt` | each saquery's stdout, byte for byte: the oracle of what its recording decodes to |
| `{result.pcap}` | {result.frames} frames: OpenSM's side of the SA exchange as native InfiniBand packets (LRH/BTH/DETH/MAD/ICRC/VCRC) in ERF type-21 records, pcap link type 197 — the format ibdump writes — made from the recordings (below) |
| `topology.net` | the ibsim topology |
| `session.json` | commands, return codes, stderr, LIDs/GIDs, per-frame table |

## Software

| Debian package | Version |
|---|---|
{pk}

No InfiniBand hardware and no kernel rdma modules: ibsim simulates the fabric; OpenSM, saquery,
sminfo and ibaddr reach it through `LD_PRELOAD=libumad2sim.so` (`ibpath_scapy/record/fabric.py`).

## Setup

* `ibsim -s -n topology.net` (own abstract socket name via `IBSIM_SOCKNAME`).
* `SIM_HOST={result.sm_host} LD_PRELOAD=libumad2sim.so ibpath record -o {OPENSM_CAPTURE} -- {osm_cmd}`
  — the config file holds only `force_log_flush TRUE` (everything else default), LMC
  {result.lmc}, no periodic sweeps (`-s 0`); the fabric waits for `SUBNET UP` in OpenSM's log.
  With LMC {result.lmc} every HCA port has {2 ** result.lmc} LIDs (switch port 0 has one), so
  there are several paths per port pair.
* `sminfo` → SM/SA at LID {result.sa_lid}, port GUID {result.sm_guid}, SMINFO_MASTER.
* Each query: `SIM_HOST={result.client_host} LD_PRELOAD=libumad2sim.so ibpath record -o saquery-NN-<name>.pcapng -- saquery ...`

| Node | LID | Port GID |
|---|---|---|
{nodes}

## Queries

| # | Command | rc | stdout, recording | request TIDs (low 32 bits) | Note |
|---|---|---|---|---|---|
{chr(10).join(q_rows)}

## umad2sim's limits, as these files show them

ibsim has no RMPP. umad2sim forwards only the first 256 bytes of any MAD a process writes, and
its receive path damages MAD bytes 224..255 of what a process reads. So OpenSM writes each
answer whole (up to {max_resp} bytes here, in `{OPENSM_CAPTURE}`), but saquery reads its first
256 bytes: 200 data bytes, at most three PathRecords, the third damaged from MAD byte 224 on.
saquery prints what it read, and `ibpath decode` of its recording shows the same. A kernel
hands a process an RMPP answer whole (`user_mad.c` `copy_recv_mad`), so on real hardware the
client reads every record.

## How the wire capture is built from the recordings

* Only management class 0x03 (SA) is kept; OpenSM's own SMPs stay in its recording only.
* **Requests** = what OpenSM read: LRH SLID = the umad header's LID (the client), DLID = SA
  LID {result.sa_lid}, source QP = umad header QPN, dest QP 1. MAD bytes 224..255 are restored
  from the client's own write (its recording); bytes 0..223 are checked to be identical
  except TID bytes 8..11 (umad2sim rewrites the TID's upper half on the way, as the kernel
  does with its per-agent hi_tid).
* **Responses** = what OpenSM wrote, whole. An RMPP-active SA response is segmented exactly as
  the kernel RMPP sender does (`ibpath_scapy.facts.rmpp.segment`: 56-byte header repeated, 200 data
  bytes per segment, RMPPVersion 1, type DATA, ACTIVE/FIRST/LAST, SegmentNumber,
  PayloadLength first = segments*220 - pad, last = 220 - pad, middle 0). LRH SLID = SA LID,
  DLID / SL / dest QP / Q_Key from the umad header OpenSM wrote. A response OpenSM wrote
  without RMPP ACTIVE (its error responses) goes out as one 256-byte MAD; as OpenSM's error
  response echoes the whole request MAD, its bytes 224..255 are restored like the request's.
* Framing (`ibpath_scapy.capture.encap.native_ib_frame`): VL 0, LVer 0, LNH 2 (local), BTH opcode
  0x64 (UD SEND_ONLY), P_Key 0xffff (P_Key index 0), DETH Q_Key {GSI_QKEY:#010x}, PSN counting per
  sender from 0, ICRC and VCRC computed.
* Timestamps are synthetic: frame n is at 2024-01-01T00:00:00Z + n ms. The TIDs are saquery's
  own (libibmad seeds its generator with the time and pid), so every session has its own.
* Not on the wire here, unlike a real fabric: RMPP ACKs (the kernel receiver would ACK each
  window) and any retransmissions; SMP traffic.

## Frames

| Frame | SLID→DLID | Method | Attribute | Status | TID | OpenSM frame | RMPP seg flags paylen |
|---|---|---|---|---|---|---|---|
{chr(10).join(frows)}
"""
