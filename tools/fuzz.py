"""Fuzz ibpath's decoders, analyser and Lua plugin with hostile captures (issue #9).

    .venv/bin/python tools/fuzz.py --minutes 30 --huge --crashers /tmp/fuzz-crashers
    .venv/bin/python tools/fuzz.py --rounds 1 --no-tshark        # one quick round

Wireshark's discipline (tools/fuzz-test.sh: `editcap -E`, then `tshark -nVxr`) for both halves
of ibpath. Seeds are the committed captures, the external ones (read only) and a capture built
with CaptureBuilder (RoCEv2 and native IB SA exchanges with RMPP, CM, RDMA netlink LS, blobs).
Each round mutates them into capture files:

* truncation of a frame at every length;
* random bytes at several error rates (in process, and the real `editcap -E --seed`);
* random values (edge values preferred) in the integer fields of every Scapy layer of a
  frame, list items included (PathRecords, netlink messages and attributes, blob records);
* RDMA netlink messages with random attributes, huge nla_len and lying nlmsg_len;
* RMPP transfers whose segment numbers are out of order, repeated, lost or hostile;
* zero-length frames on every link type; the capture file cut at every length (first round)
  or at a sample of lengths; pcapng blocks with damaged types and lengths;
* with --huge, once per run: one 64 MiB frame per link type, then one of 262144 bytes (the
  largest Wireshark reads), written to a temporary file a chunk at a time.

Every file goes through the Scapy decoder and the audit in process (a CPU-time limit per frame:
FRAME_TIME_LIMIT), and through the audit's fast path, which must give the same records, error
and counts, `--cli` files a round through the real `ibpath decode`, `ibpath audit` and
`ibpath audit --engine tshark`, and every readable file through tshark with the generated
plugin. A problem is: a Python exception other than the documented CaptureError (whose
message must name the file), a frame over the time limit, a frame count other than the
number of frames written (or capinfos's count, for editcap output), a frame that should have
given a record and gave none, a fast-path record unlike the Scapy path's (fastpath-diff), a
malformed frame with no DECODE-MALFORMED / DECODE-LIMIT finding, a CLI traceback or unexpected exit status, "Lua Error" (or a failed load) in
tshark's output, or tshark dissecting fewer frames than the file has (frames Wireshark's own
reader refuses are dropped first and counted as tshark_refused). Each problem's input is
copied to --crashers; tests/data/fuzz/ keeps small regression inputs. The last line printed
is the run's numbers as JSON; exit status 1 when there was any problem.

--differential also decodes every tshark-checked file with both engines (`ibpath audit
--engine scapy|tshark`) and counts the frames whose records differ (engine_diffs, with one
example per file on stderr): the engines are meant to agree, so each difference is a place
where one of them reads hostile bytes differently. Not counted as a problem (yet).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ibpath_scapy.engines.scapy import blobsniff  # noqa: E402
from ibpath_scapy.facts import Code  # noqa: E402
from ibpath_scapy.audit.engine import audit_records  # noqa: E402
from ibpath_scapy.audit.model import AuditOptions  # noqa: E402
from ibpath_scapy.engines.scapy.decode import Decoder, dissect  # noqa: E402
from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast  # noqa: E402
from ibpath_scapy.capture.pcapio import CaptureError, Frame, read_input  # noqa: E402
from ibpath_scapy.layers.pathdata import PathArray  # noqa: E402

EXTERNAL = ROOT.parent / "shared" / "captures" / "external"
LUA = ROOT / "dissector" / "ibpath.lua"
LINKTYPES = (1, 197, 252, 253)
EDITCAP_RATES = (0.001, 0.01, 0.05, 0.2)
FRAME_TIME_LIMIT = 5.0  # CPU seconds a single frame may take in the decoder (per-input limit)


@dataclass
class Seed:
    """One frame to mutate: its link type, bytes, where it came from, and how many leading
    bytes are encapsulation (Ethernet/IP/UDP/BTH/DETH, ERF/LRH, cooked netlink, exported-PDU
    tags) that the decoder needs intact to know the frame carries a MAD, LS message or blob."""

    linktype: int
    data: bytes
    origin: str
    header: int | None = None  # None: the decoder gives no record for this frame


@dataclass
class Problem:
    kind: str
    detail: str
    path: str | None = None


@dataclass
class Stats:
    files: int = 0
    frames: int = 0
    records: int = 0
    malformed: int = 0
    limit_findings: int = 0
    cli_runs: int = 0
    tshark_runs: int = 0
    tshark_frames: int = 0
    tshark_refused: int = 0  # frames Wireshark's own reader refused (see check_tshark)
    slowest_frame: float = 0.0
    engine_frames: int = 0  # --differential: frames compared between the two engines
    engine_diffs: int = 0  # ... and those where they disagree
    engine_examples: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # check_in_process: the fast path's (records, statistics, skipped, closing error or None),
    # for a caller that holds it against another engine (covfuzz: the C loops' Python twins)
    fast: tuple | None = None

    def merge(self, other: "Stats") -> None:
        for k in ("files", "frames", "records", "malformed", "limit_findings", "cli_runs",
                  "tshark_runs", "tshark_frames", "tshark_refused", "engine_frames", "engine_diffs"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.slowest_frame = max(self.slowest_frame, other.slowest_frame)
        self.problems += other.problems
        self.engine_examples += other.engine_examples


# ------------------------------------------------------------------------------------------
# Seeds
# ------------------------------------------------------------------------------------------

def corpus_files() -> list[Path]:
    """The committed captures and the external ones (never written to)."""
    files = sorted((ROOT / "captures").glob("*/*.pcap*"))
    if EXTERNAL.is_dir():
        files += sorted(EXTERNAL.glob("*.pcap"))
    return files


def build_seed_capture(path: Path) -> Path:
    """A pcapng with every kind of frame the decoder reads: SA queries and RMPP answers on
    RoCEv2 and native IB, CM REQs, LS requests and responses (netlink), blobs."""
    from ibpath_scapy.craft import CaptureBuilder
    from ibpath_scapy.layers import PathRecord

    local, remote = "fe80::2:c903:0:10", "fe80::2:c903:0:20"
    rec = PathRecord(sgid=local, dgid=remote, slid=0x10, dlid=0x20, reversible=1, pkey=0xFFFF,
                     mtu_selector=2, mtu=4, rate_selector=2, rate=7, packet_life_time=18)
    back = PathRecord(sgid=remote, dgid=local, slid=0x20, dlid=0x10, pkey=0xFFFF)
    with CaptureBuilder(str(path), encap="rocev2") as b:
        q = b.sa_query(PathRecord(sgid=local, dgid=remote, pkey=0xFFFF, numb_path=1))
        b.sa_answer(q, [rec])
        q = b.sa_query(PathRecord(sgid=local, dgid=remote), method=0x12)
        b.sa_answer(q, [rec, back, rec, back, rec])  # 2 RMPP segments
        b.ls_request(7, path_use=2, sgid=local, dgid=remote, service_id=0x0106, tclass=3)
        b.ls_response(7, [(0x2B, rec), (0x12, back)])
        b.ls_response(8, [(0x2B, rec)], error=True)
        b.blob([(0x2B, rec), (0x0A, rec)], set_option=0)
        b.blob(bytes(75))
        b.cm_req(rec, alternate=back)
        b.encap = "ib"
        q = b.sa_query(PathRecord(sgid=local, dgid=remote, pkey=0xFFFF, numb_path=1))
        b.sa_answer(q, [rec, back, rec, back])
        b.cm_req(rec)
    return path


def header_length(linktype: int, data: bytes) -> int | None:
    """Bytes before the MAD, the netlink messages or the blob, from a Scapy dissection of an
    intact seed frame; None when the decoder gives no record for it."""
    from ibpath_scapy.layers import MAD
    from ibpath_scapy.layers.ib import ExportedPDU
    from ibpath_scapy.layers.netlink import NETLINK_RDMA, NetlinkCooked

    try:
        pkt = dissect(Frame(1, 0.0, linktype, data, len(data)))
    except Exception:
        return None
    if pkt is None:
        return None
    if isinstance(pkt, NetlinkCooked):
        return 16 if pkt.protocol == NETLINK_RDMA and pkt.messages else None
    if isinstance(pkt, ExportedPDU) and isinstance(pkt.payload, PathArray):
        return len(data) - len(bytes(pkt.payload))
    mad = pkt.getlayer(MAD)
    if mad is None:
        return None
    return len(data) - len(bytes(mad))


def load_seeds(work: Path) -> list[Seed]:
    """Every frame of the corpus and of the built capture, with its header length."""
    seeds = []
    for f in corpus_files() + [build_seed_capture(work / "seed-built.pcapng")]:
        for fr in read_input(str(f)):
            seeds.append(Seed(fr.linktype, fr.data, f"{f.name}#{fr.number}",
                              header_length(fr.linktype, fr.data)))
    return seeds


# ------------------------------------------------------------------------------------------
# Frame mutators: each returns [(linktype, data, header or None)]; header is the number of
# leading bytes left untouched by the mutation when they hold the whole encapsulation (so the
# decoder must give a record), else None.
# ------------------------------------------------------------------------------------------

TRUNCATE_EVERY = 2048  # seeds are cut at every length up to this; past it, at 64 lengths


def truncations(seed: Seed, rnd: random.Random | None = None) -> list[tuple]:
    """The seed cut at every length (a seed over TRUNCATE_EVERY bytes, such as the corpus's
    64 KiB blob, at every length up to it and 64 random ones past it: every length of 64 KiB
    would be 2 GiB of frames)."""
    h = seed.header
    lengths = list(range(min(len(seed.data), TRUNCATE_EVERY) + 1))
    if len(seed.data) > TRUNCATE_EVERY:
        rnd = rnd or random.Random(len(seed.data))
        lengths += sorted(rnd.sample(range(TRUNCATE_EVERY + 1, len(seed.data) + 1),
                                     min(64, len(seed.data) - TRUNCATE_EVERY)))
    return [(seed.linktype, seed.data[:n], h if h is not None and n >= h + _min_body(seed) else None)
            for n in lengths]


def _min_body(seed: Seed) -> int:
    # the decoder yields "malformed" for a MAD cut anywhere after its first 24 bytes, and a
    # blob needs 4 bytes (a flags word); netlink needs one whole 16-byte message header
    return {253: 16, 252: 0}.get(seed.linktype, 24)


def flips(rnd: random.Random, seed: Seed, rate: float) -> tuple:
    """Each byte replaced by a random one with probability rate (editcap -E)."""
    b = bytearray(seed.data)
    first = None
    for i in range(len(b)):
        if rnd.random() < rate:
            b[i] = rnd.randrange(256)
            first = i if first is None else first
    h = seed.header
    keep = h if h is not None and (first is None or first >= h + 24) else None
    return seed.linktype, bytes(b), keep


def _int_fields(pkt, out=None):
    """(layer, field name, bit width) for every integer field of every layer, the packets in
    list fields included (PathRecords, netlink messages and attributes, blob records)."""
    from scapy.fields import BitField, Field, FlagsField
    from scapy.packet import Packet
    out = [] if out is None else out
    layer = pkt
    while layer is not None and layer.__class__.__name__ not in ("NoPayload", "Raw", "Padding"):
        for f in layer.fields_desc:
            fld = getattr(f, "fld", f)
            size = getattr(fld, "size", None)
            val = layer.getfieldval(f.name)
            if isinstance(val, Packet):
                _int_fields(val, out)
            elif isinstance(val, list):
                for item in val[:8]:
                    if isinstance(item, Packet):
                        _int_fields(item, out)
            elif isinstance(fld, (BitField, FlagsField)) and size:
                out.append((layer, f.name, size))
            elif (isinstance(fld, Field) and isinstance(val, int) and fld.fmt
                  and fld.fmt[-1] in "BHIQbhiq"):
                out.append((layer, f.name, 8 * struct.calcsize("!" + fld.fmt[-1])))
        layer = layer.payload if layer.payload else None
    return out


def field_values(rnd: random.Random, seed: Seed, n: int = 3) -> tuple | None:
    """Random values (edge values preferred) in n random integer fields of the layers."""
    from ibpath_scapy.layers.coded import RawCode

    try:
        pkt = dissect(Frame(1, 0.0, seed.linktype, seed.data, len(seed.data)))
        fields = _int_fields(pkt) if pkt is not None else []
        if not fields:
            return None
        for _ in range(n):
            layer, name, bits = rnd.choice(fields)
            top = (1 << bits) - 1
            # RawCode: any value that fits, an IBA code or not (coded fields refuse others)
            layer.setfieldval(name, RawCode(rnd.choice([0, 1, top, top - 1, top >> 1,
                                                        rnd.randint(0, top)])))
        data = bytes(pkt)
    except Exception:
        return None  # Scapy cannot build the combination: not an input
    return seed.linktype, data, None


def netlink_frame(rnd: random.Random) -> tuple:
    """An RDMA netlink record of 1-3 LS messages with random attributes: random types (known,
    unknown, flag bits), lengths from 0 to 0xFFFF (huge nla_len), values of random size, and
    an nlmsg_len that may lie."""
    msgs = []
    for _ in range(rnd.randint(1, 3)):
        attrs = b""
        for _ in range(rnd.randint(0, 8)):
            value = rnd.randbytes(rnd.choice([0, 1, 2, 4, 8, 16, 64, 72, rnd.randint(0, 300)]))
            nla_type = rnd.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, rnd.randrange(1 << 16)])
            if rnd.random() < 0.3:
                nla_type |= rnd.choice([0x2000, 0x4000, 0x8000])
            nla_len = rnd.choice([4 + len(value)] * 4 + [0, 3, 0xFFFF, rnd.randrange(1 << 16)])
            attrs += struct.pack("<HH", nla_len & 0xFFFF, nla_type) + value + b"\0" * (-len(value) % 4)
        op = rnd.choice([0, 0, 1, 2, 3, 4, rnd.randrange(1024)])
        client = rnd.choice([4, 4, 4, 5, rnd.randrange(64)])  # RDMA_NL_LS mostly
        flags = rnd.choice([0, 1, 0x100, 0x101, rnd.randrange(1 << 16)])
        body = b""
        if op == 0 and flags & 1:  # RESOLVE request: device name, port, path_use
            body = rnd.randbytes(64) if rnd.random() < 0.2 else b"rxe0".ljust(64, b"\0")
            body += bytes([rnd.randrange(256), rnd.choice([0, 1, 2, rnd.randrange(256)])]) + b"\0\0"
        elif op == 1:
            body = struct.pack("<I", rnd.randrange(1 << 32))
        body += attrs
        total = 16 + len(body)
        nlmsg_len = rnd.choice([total] * 5 + [0, 15, 16, total + 1, 0xFFFFFFFF, rnd.randrange(1 << 32)])
        msgs.append(struct.pack("<IHHII", nlmsg_len, (client << 10) | op, flags,
                                rnd.randrange(1 << 32), 0) + body)
    pkttype = rnd.choice([0, 4, 4, 4, rnd.randrange(1 << 16)])
    family = 20 if rnd.random() < 0.9 else rnd.randrange(64)  # NETLINK_RDMA mostly
    cooked = struct.pack("!HHH8sH", pkttype, 824 if rnd.random() < 0.9 else 1, 0, b"\0" * 8, family)
    data = cooked + b"".join(msgs) + rnd.randbytes(rnd.choice([0, 0, 0, 1, 3, 15]))
    # every NETLINK_RDMA record gives a record per message, or one "malformed"
    return 253, data, 16 if family == 20 else None


def rmpp_transfer(rnd: random.Random) -> list[tuple]:
    """The segments of one GetTableResp, out of order, some repeated, some lost, with hostile
    segment numbers, FIRST/LAST flags and PayloadLengths now and then."""
    from ibpath_scapy.capture.encap import rocev2_frame
    from ibpath_scapy.layers import MAD, RMPP, PathRecord, SAHeader
    from ibpath_scapy.facts.rmpp import segment

    tid = rnd.randrange(1 << 64)
    hdr = bytes(MAD(method=0x92, transaction_id=tid) / RMPP(rmpp_version=1, rmpp_type=1)
                / SAHeader(attribute_offset=8))[:56]
    segs = [bytearray(s) for s in segment(hdr + bytes(PathRecord(dlid=rnd.randrange(1 << 16)))
                                          * rnd.randint(0, 20))]
    order = list(range(len(segs)))
    rnd.shuffle(order)
    out = []
    for i in order:
        s = segs[i]
        r = rnd.random()
        if r < 0.15:
            struct.pack_into("!I", s, 28, rnd.choice([0, 0xFFFFFFFF, 4097, 1 << 31, rnd.randrange(1 << 32)]))
        elif r < 0.25:
            s[26] = rnd.randrange(256)
        elif r < 0.35:
            struct.pack_into("!I", s, 32, rnd.choice([0, 0xFFFFFFFF, rnd.randrange(1 << 32)]))
        elif r < 0.40:
            continue  # lost
        frame = bytes(rocev2_frame(MAD(bytes(s)), src="10.0.0.2", dst="10.0.0.1"))
        out.append((1, frame, 62))
        if rnd.random() < 0.2:
            out.append((1, frame, 62))  # retransmitted
    return out


def zero_length() -> list[tuple]:
    return [(lt, b"", None) for lt in LINKTYPES]


# ------------------------------------------------------------------------------------------
# Writing inputs
# ------------------------------------------------------------------------------------------

@dataclass
class Input:
    """A capture file written by the fuzzer and what the checks expect of it."""

    path: Path
    frames: int  # frames in the file (complete records), from the writer's own count
    must_decode: set[int] = field(default_factory=set)  # frames that must give a record
    unreadable: bool = False  # cut or damaged on purpose: a CaptureError is the right answer
    damaged: bool = False  # file structure damaged: a CaptureError or a clean read, either way


def write_frames(path: Path, frames: list[tuple]) -> Input:
    """One pcap per link type would hide cross-link-type state bugs; pcapng holds them all."""
    from ibpath_scapy.capture.pcapio import PcapNgWriter

    must = set()
    with PcapNgWriter(str(path)) as w:
        for i, (lt, data, header) in enumerate(frames, 1):
            w.write(data, lt, float(i))
            if header is not None:
                must.add(i)
    return Input(path, len(frames), must)


def file_cuts(src: Input, lengths: list[int], work: Path) -> list[Input]:
    """The file src cut at each of the given byte lengths; the expected frame count is the
    number of whole frames before the cut, from walking the pcapng blocks we wrote."""
    data = src.path.read_bytes()
    ends, off, n = [], 0, 0
    while off + 8 <= len(data):
        btype, blen = struct.unpack_from("<II", data, off)
        off += blen
        if btype == 6:
            n += 1
            ends.append(off)
    out = []
    for k in lengths:
        p = work / f"{src.path.stem}-cut{k}.pcapng"
        p.write_bytes(data[:k])
        whole = sum(1 for e in ends if e <= k)
        out.append(Input(p, whole, {f for f in src.must_decode if f <= whole},
                         unreadable=k < len(data)))
    return out


def damaged_blocks(rnd: random.Random, src: Input, count: int, work: Path) -> list[Input]:
    """src (a pcapng we wrote) with one block's type or length damaged: lengths short of the
    block's fixed fields, odd, huge; the trailing length moved to match or left. The reader
    must stop with a CaptureError naming the file (or read on), never raise anything else."""
    data = src.path.read_bytes()
    offs, off = [], 0
    while off + 8 <= len(data):
        offs.append(off)
        off += struct.unpack_from("<I", data, off + 4)[0]
    out = []
    for k in range(count):
        off = rnd.choice(offs)
        btype, blen = struct.unpack_from("<II", data, off)
        b = bytearray(data)
        if rnd.random() < 0.3:
            btype = rnd.choice([1, 2, 3, 5, 6, 0x0A0D0D0A, rnd.randrange(1 << 32)])
        if rnd.random() < 0.8:
            new = rnd.choice([0, 4, 8, 12, 16, 20, 24, 28, 32, blen - 4, blen + 4, blen + 1,
                              0xFFFFFFFC, rnd.randrange(1 << 32)]) & 0xFFFFFFFF
            if rnd.random() < 0.5 and 12 <= new < blen:  # a consistent, shorter block
                b = b[:off + new - 4] + struct.pack("<I", new) + b[off + blen:]
            blen = new
        struct.pack_into("<II", b, off, btype, blen)
        p = work / f"{src.path.stem}-block{k}.pcapng"
        p.write_bytes(bytes(b))
        out.append(Input(p, -1, damaged=True))
    return out


def editcap(src: Path, rate: float, seed: int, work: Path) -> Input | None:
    """`editcap -E rate --seed seed` over src (every byte may change, link headers too),
    the frames counted by capinfos."""
    if shutil.which("editcap") is None:
        return None
    out = work / f"{src.stem}-E{rate}-s{seed}{src.suffix}"
    fmt = "pcap" if src.suffix == ".pcap" else "pcapng"  # editcap writes pcapng unless told
    p = subprocess.run(["editcap", "-F", fmt, "-E", str(rate), "--seed", str(seed), str(src), str(out)],
                       capture_output=True,
                       text=True, timeout=60)
    if p.returncode != 0:
        return None
    return Input(out, capinfos_count(out))


def capinfos_count(path: Path) -> int:
    """Frames in a file by Wireshark's own reader (the independent count)."""
    p = subprocess.run(["capinfos", "-M", "-c", "-T", str(path)], capture_output=True, text=True,
                       timeout=60)
    m = re.search(r"\t(\d+)\s*$", p.stdout.strip().splitlines()[-1]) if p.stdout.strip() else None
    if m is None:
        raise RuntimeError(f"capinfos could not count {path}: {p.stderr.strip()}")
    return int(m.group(1))


def huge_frame_file(work: Path, size: int = 64 << 20, linktypes=LINKTYPES) -> Input:
    """A pcapng of one `size`-byte frame per link type, each a real frame of its kind (RoCEv2
    MAD, ERF native IB MAD, blob PDU, netlink LS response) padded out, written straight to
    disk a chunk at a time (never two copies in memory)."""
    from ibpath_scapy.capture.encap import erf_record, native_ib_frame, rocev2_frame
    from ibpath_scapy.layers import MAD, RMPP, PathRecord, SAHeader
    from ibpath_scapy.layers.pathdata import blob_pdu

    mad = MAD(method=0x81) / RMPP() / SAHeader(records=[PathRecord()])
    heads = {1: bytes(rocev2_frame(mad, src="10.0.0.1", dst="10.0.0.2")),
             197: erf_record(native_ib_frame(mad, slid=1, dlid=2), 0.0),
             252: bytes(blob_pdu(bytes(72))),
             253: struct.pack("!HHH8sH", 4, 824, 0, b"\0" * 8, 20)
             + struct.pack("<IHHII", size - 16, 4 << 10, 0, 1, 0)}
    p = work / "huge.pcapng"
    chunk = b"\0" * (1 << 20)
    with open(p, "wb") as f:
        shb = struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)
        f.write(struct.pack("<II", 0x0A0D0D0A, 28) + shb + struct.pack("<I", 28))
        for lt in linktypes:
            f.write(struct.pack("<IIHHII", 1, 20, lt, 0, 0, 20))
        for i, lt in enumerate(linktypes):
            blen = 32 + size
            f.write(struct.pack("<IIIIIII", 6, blen, i, 0, 0, size, size))
            f.write(heads[lt])
            left = size - len(heads[lt])
            while left:
                f.write(chunk[:min(left, len(chunk))])
                left -= min(left, len(chunk))
            f.write(struct.pack("<I", blen))
    return Input(p, len(linktypes), set(range(1, len(linktypes) + 1)))


# ------------------------------------------------------------------------------------------
# Checks
# ------------------------------------------------------------------------------------------

class FrameTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise FrameTimeout()


def check_in_process(inp: Input, limit: float = FRAME_TIME_LIMIT,
                     new_fast=FastDecoder) -> Stats:
    """Decode and audit inp in this process. Every frame is timed in CPU seconds (SIGPROF),
    so that a loaded machine does not pass for a hang. new_fast() gives the fast path's
    decoder as a new one is (covfuzz resets a pooled one: building one takes ~0.3 ms)."""
    st = Stats(files=1)
    path = str(inp.path)
    decoder = Decoder()
    records: list[dict] = []
    got: set[int] = set()
    old = signal.signal(signal.SIGPROF, _alarm)
    error = None
    number = 0
    try:
        # the sniff decode_file and the fast path use (PathArray.plausible takes fewer blobs)
        frames = read_input(path, blobsniff.plausible)
        while True:
            signal.setitimer(signal.ITIMER_PROF, limit)
            t0 = time.process_time()
            try:
                frame = next(frames)
            except StopIteration:
                break
            number = frame.number
            recs = list(decoder.feed(frame))
            signal.setitimer(signal.ITIMER_PROF, 0)
            st.slowest_frame = max(st.slowest_frame, time.process_time() - t0)
            records += recs
            got.update(r["frame"] for r in recs)
        signal.setitimer(signal.ITIMER_PROF, limit)
        records += list(decoder.finish())
    except CaptureError as exc:
        error = exc
        if not inp.unreadable and not inp.damaged:
            st.problems.append(Problem("capture-error", str(exc), path))
        elif path not in str(exc):
            st.problems.append(Problem("vague-capture-error", str(exc), path))
    except FrameTimeout:
        st.problems.append(Problem("hang", f"frame {number + 1} took more than {limit} s", path))
        return st
    except Exception:  # the fuzzer's whole point: any other exception is a bug
        import traceback
        st.problems.append(Problem("traceback", traceback.format_exc(limit=-6), path))
        return st
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)
    st.frames += decoder.stats.frames
    st.records += len(records)
    st.malformed += decoder.stats.malformed
    st.problems += check_fast_path(inp, records, error, decoder, new_fast(), st)
    if decoder.stats.frames != inp.frames and not inp.damaged:
        st.problems.append(Problem(
            "frame-count", f"decoder read {decoder.stats.frames} frames, the file has {inp.frames}"
            + (f" (stopped by: {error})" if error else ""), path))
    missing = sorted(f for f in inp.must_decode if f not in got and f <= decoder.stats.frames)
    if missing:
        st.problems.append(Problem("dropped", f"frames {missing[:10]} gave no record", path))
    try:
        fa = audit_records(path, records, AuditOptions())
    except Exception:
        import traceback
        st.problems.append(Problem("traceback", "audit: " + traceback.format_exc(limit=-6), path))
        return st
    reported = {f for fd in fa.findings if fd.rule in ("DECODE-MALFORMED", "DECODE-LIMIT")
                for f in fd.frames}
    st.limit_findings += sum(1 for fd in fa.findings if fd.rule == "DECODE-LIMIT")
    unreported = sorted(r["frame"] for r in records
                        if (r.get("kind") == "malformed" or r.get("malformed"))
                        and getattr(r.get("error"), "code", None) is not Code.RMPP_UNFINISHED
                        and r["frame"] not in reported)
    if unreported:
        st.problems.append(Problem("unreported", f"malformed frames {unreported[:10]} have no "
                                   "DECODE-MALFORMED/DECODE-LIMIT finding", path))
    return st


def check_fast_path(inp: Input, records: list[dict], error: CaptureError | None,
                    decoder: Decoder, fast: FastDecoder | None = None,
                    st: Stats | None = None) -> list[Problem]:
    """The audit's fast path (pre-filter, compiled decoder, buffered readers) must give the
    Scapy path's records, closing error and statistics on any input, hostile ones included.
    The fast path's outcome is kept in st.fast."""
    path = str(inp.path)
    fast, got, err = fast or FastDecoder(), [], None
    try:
        for rec in decode_file_fast(path, fast):
            got.append(rec)
    except CaptureError as exc:
        err = exc
    except Exception:
        import traceback
        return [Problem("traceback", "fast path: " + traceback.format_exc(limit=-6), path)]
    if st is not None:
        st.fast = (got, fast.stats, fast.skipped, None if err is None else str(err))
    if str(err) != str(error):
        return [Problem("fastpath-diff", f"closing error {err!s} (Scapy path: {error!s})", path)]
    for a, b in zip(records, got):
        if a != b or list(a) != list(b):
            return [Problem("fastpath-diff", f"frame {a.get('frame')}: {b} (Scapy path: {a})", path)]
    if len(got) != len(records) or fast.stats != decoder.stats:
        return [Problem("fastpath-diff", f"{len(got)} records, {fast.stats} (Scapy path: "
                        f"{len(records)}, {decoder.stats})", path)]
    return []


def check_cli(inp: Input, timeout: float = 300) -> Stats:
    """The real `ibpath decode` and `ibpath audit`: no traceback, the documented exit status,
    and decode's frame count on stderr."""
    st = Stats()
    cmds = [["decode", "--format", "json"], ["audit", "--quiet", "--format", "json"]]
    if shutil.which("tshark") is not None:
        cmds.append(["audit", "--quiet", "--format", "json", "--engine", "tshark"])
    for cmd in cmds:
        args = [sys.executable, "-m", "ibpath_scapy.cli.main", cmd[0], str(inp.path), *cmd[1:]]
        try:
            p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            st.problems.append(Problem("hang", f"ibpath {' '.join(cmd)} ran over {timeout} s", str(inp.path)))
            continue
        st.cli_runs += 1
        if "Traceback" in p.stderr:
            st.problems.append(Problem("traceback", f"ibpath {' '.join(cmd)}: {p.stderr[-1500:]}", str(inp.path)))
        allowed = {0, 1, 2} if inp.damaged else {2} if inp.unreadable else {0, 1}
        if "tshark" in cmd:  # Wireshark's reader may refuse a file ours reads (check_tshark)
            allowed.add(2)
        if p.returncode == 2 and str(inp.path) not in p.stderr:
            st.problems.append(Problem("vague-error", f"ibpath {' '.join(cmd)} exited 2 without "
                                       f"naming the file: {p.stderr[-500:]}", str(inp.path)))
        if p.returncode not in allowed:
            st.problems.append(Problem("exit-status", f"ibpath {' '.join(cmd)} exited {p.returncode} "
                                       f"(expected {sorted(allowed)}): {p.stderr[-500:]}", str(inp.path)))
        if cmd[0] == "decode" and not inp.unreadable and not inp.damaged:
            m = re.search(r": (\d+) frames?,", p.stderr)  # "1 frame," "2 frames,"
            if not m or int(m.group(1)) != inp.frames:
                st.problems.append(Problem("frame-count", f"ibpath decode said {p.stderr.strip()[-200:]!r}; "
                                           f"the file has {inp.frames} frames", str(inp.path)))
    return st


_LUA_PROBLEMS = re.compile(r"Lua Error|Lua: Error|dissector bug|attempt to (?:index|call|compare|"
                           r"perform|concatenate)|stack traceback")


_TSHARK_HOME: str | None = None


def _tshark_env() -> dict:
    """An empty HOME, so that no personal preference or plugin changes what tshark prints."""
    global _TSHARK_HOME
    if _TSHARK_HOME is None:
        import atexit
        _TSHARK_HOME = tempfile.mkdtemp(prefix="ibpath-fuzz-home-")
        atexit.register(shutil.rmtree, _TSHARK_HOME, ignore_errors=True)
    return dict(os.environ, HOME=_TSHARK_HOME, XDG_CONFIG_HOME=_TSHARK_HOME + "/.config",
                XDG_DATA_HOME=_TSHARK_HOME + "/.local/share", LC_ALL="C")


def _tshark_count(tshark: str, path: Path, timeout: float) -> tuple[int, str]:
    c = subprocess.run([tshark, "-n", "-X", f"lua_script:{LUA}", "-r", str(path), "-T", "fields",
                        "-e", "frame.number"], capture_output=True, text=True, timeout=timeout,
                       env=_tshark_env())
    return len(c.stdout.split()), c.stderr


def _without_refused(tshark: str, inp: Input, timeout: float) -> tuple[Path, int, int, str]:
    """Wireshark's file reader (not the plugin) stops for good at a frame it refuses (an ERF
    record whose header lies, a frame over 262144 bytes), which would hide every later frame
    from the plugin. Drop each refused frame from a copy until tshark reads it all. Returns
    (path, frames dropped, frames tshark counted, its stderr)."""
    from ibpath_scapy.capture.pcapio import PcapNgWriter, read_frames

    copy = inp.path.with_name(inp.path.stem + ".wiretap.pcapng")

    def write(frames):
        tmp = copy.with_suffix(".tmp")
        with PcapNgWriter(str(tmp)) as w:
            for fr in frames:
                w.write(fr.data, fr.linktype, fr.time, fr.comment)
        os.replace(tmp, copy)

    def refused(fr):  # known without asking: wiretap's ERF header and frame size checks
        return (fr.linktype == 197 and len(fr.data) < 16) or len(fr.data) > 262144

    path, dropped = inp.path, 0
    if any(refused(fr) for fr in read_frames(str(path))):
        frames = [fr for fr in read_frames(str(path)) if not refused(fr)]
        dropped = inp.frames - len(frames)
        write(frames)
        path = copy
    counted, err = _tshark_count(tshark, path, timeout)
    retries = 0
    while counted < inp.frames - dropped and "appears to be damaged or corrupt" in err and retries < 50:
        frames = list(read_frames(str(path)))
        write(frames[:counted] + frames[counted + 1:])
        path, dropped, retries = copy, dropped + 1, retries + 1
        counted, err = _tshark_count(tshark, path, timeout)
    return path, dropped, counted, err


def check_tshark(inp: Input, timeout: float = 300) -> Stats:
    """tshark with the plugin over the whole file (-nVx, as fuzz-test.sh's -nVxr; -T fields
    for the frame count). Built-in dissectors may rightly call a fuzzed frame malformed; what
    must never appear is a Lua error or a failed load, and every frame must be dissected
    (frames Wireshark's own reader refuses are dropped first and counted in tshark_refused)."""
    st = Stats()
    tshark = shutil.which("tshark")
    if tshark is None or inp.unreadable or inp.damaged:
        return st
    try:
        path, dropped, counted, err = _without_refused(tshark, inp, timeout)
        p = subprocess.run([tshark, "-n", "-X", f"lua_script:{LUA}", "-r", str(path), "-V", "-x"],
                           capture_output=True, text=True, timeout=timeout, env=_tshark_env(),
                           errors="replace")
    except subprocess.TimeoutExpired:
        st.problems.append(Problem("hang", f"tshark with the plugin ran over {timeout} s", str(inp.path)))
        return st
    st.tshark_runs += 1
    st.tshark_refused += dropped
    st.tshark_frames += counted
    for text in (p.stdout, p.stderr, err):
        m = _LUA_PROBLEMS.search(text)
        if m:
            line = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.end())][:400]
            st.problems.append(Problem("lua-error", line, str(path)))
            break
    if counted != inp.frames - dropped:
        st.problems.append(Problem("frame-count", f"tshark dissected {counted} frames, the file "
                                   f"has {inp.frames - dropped} it reads: {err.strip()[-300:]}", str(path)))
    if path != inp.path:
        if not st.problems:
            path.unlink()
    return st


def _per_frame(records) -> dict[int, list]:
    out: dict[int, list] = {}
    for r in records:
        out.setdefault(r["frame"], []).append(
            (r.get("kind"), bool(r.get("malformed")), r.get("error"), r.get("errors")))
    return out


def check_engines(inp: Input) -> tuple[int, int, str | None]:
    """Differential: the Scapy decoder and the tshark engine (the plugin) over the same file,
    frame by frame (kind, malformed, error texts). Returns (frames compared, frames that
    differ, the first difference). Not a problem by itself: the engines are meant to agree,
    and where they do not on hostile input, one of them reads the bytes differently."""
    from ibpath_scapy.engines.scapy.decode import decode_file
    from ibpath_scapy.engines.tshark import tshark_records

    if shutil.which("tshark") is None or inp.unreadable or inp.damaged:
        return 0, 0, None
    try:
        a = _per_frame(decode_file(str(inp.path)))
        b = _per_frame(tshark_records(str(inp.path)))
    except CaptureError:
        return 0, 0, None  # Wireshark's reader refused the file: nothing to compare
    frames = sorted(set(a) | set(b))
    diff = [f for f in frames if a.get(f) != b.get(f)]
    first = None
    if diff:
        f = diff[0]
        first = f"{inp.path.name} frame {f}: scapy {a.get(f)!r:.300} / tshark {b.get(f)!r:.300}"
    return len(frames), len(diff), first


# ------------------------------------------------------------------------------------------
# A round: all mutators once over the seeds
# ------------------------------------------------------------------------------------------

def make_inputs(rnd: random.Random, seeds: list[Seed], work: Path, *, scale: int = 1,
                every_cut: bool = False) -> list[Input]:
    """One round of inputs. scale multiplies the random mutations; every_cut cuts one file at
    every byte length (else at a random sample of lengths)."""
    inputs = []
    mad_seeds = [s for s in seeds if s.header is not None]
    # truncation at every length of a few seeds
    picks = rnd.sample(mad_seeds, min(len(mad_seeds), 6 * scale))
    inputs.append(write_frames(work / "trunc.pcapng", [f for s in picks for f in truncations(s, rnd)]))
    for rate in EDITCAP_RATES:
        frames = [flips(rnd, rnd.choice(seeds), rate) for _ in range(150 * scale)]
        inputs.append(write_frames(work / f"flip{rate}.pcapng", frames))
    frames = [f for f in (field_values(rnd, rnd.choice(seeds), rnd.randint(1, 6))
                          for _ in range(200 * scale)) if f]
    inputs.append(write_frames(work / "fields.pcapng", frames))
    inputs.append(write_frames(work / "netlink.pcapng", [netlink_frame(rnd) for _ in range(300 * scale)]))
    frames = [f for _ in range(20 * scale) for f in rmpp_transfer(rnd)]
    inputs.append(write_frames(work / "rmpp.pcapng", frames))
    small_seeds = [s for s in mad_seeds if len(s.data) <= TRUNCATE_EVERY]  # the file is cut at every length
    inputs.append(write_frames(work / "zero.pcapng",
                               zero_length() + [flips(rnd, s, 0) for s in rnd.sample(small_seeds, 4)]))
    small = inputs[-1]
    lengths = list(range(small.path.stat().st_size)) if every_cut else sorted(
        rnd.sample(range(small.path.stat().st_size), 40))
    inputs += file_cuts(small, lengths, work)
    inputs += damaged_blocks(rnd, small, 30 * scale, work)
    corpus = corpus_files()
    pcaps = [f for f in corpus if f.suffix == ".pcap"]  # our pcap reader gets its share
    for f in rnd.sample(pcaps, min(len(pcaps), 2 * scale)) + rnd.sample(corpus, min(len(corpus), 2 * scale)):
        inp = editcap(f, rnd.choice(EDITCAP_RATES), rnd.randrange(1 << 30), work)
        if inp is not None:
            inputs.append(inp)
    return inputs


def run_round(rnd: random.Random, seeds: list[Seed], work: Path, *, scale: int = 1,
              tshark: bool = True, tshark_files: int | None = None, cli: int = 2,
              every_cut: bool = False, keep: Path | None = None,
              differential: bool = False) -> Stats:
    """Make one round's inputs and check them all in process; `cli` of them with the real
    CLI, and with tshark and the plugin every readable one (or `tshark_files` of them, the
    frame-level mutations first). Problem inputs are copied to keep."""
    total = Stats()
    inputs = make_inputs(rnd, seeds, work, scale=scale, every_cut=every_cut)
    cli_picks = set(rnd.sample(range(len(inputs)), min(cli, len(inputs))))
    readable = [i for i, inp in enumerate(inputs) if not inp.unreadable and not inp.damaged]
    ts_picks = set(readable if tshark_files is None else readable[:tshark_files])
    for i, inp in enumerate(inputs):
        st = check_in_process(inp)
        if i in cli_picks:
            st.merge(check_cli(inp))
        if tshark and i in ts_picks:
            st.merge(check_tshark(inp))
            if differential:
                n, d, first = check_engines(inp)
                st.engine_frames += n
                st.engine_diffs += d
                if first:
                    st.engine_examples.append(first)
        if st.problems and keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            dest = keep / f"{int(time.time())}-{inp.path.name}"
            shutil.copy(inp.path, dest)
            for pr in st.problems:
                pr.path = str(dest)
        total.merge(st)
    return total


def report(st: Stats, seconds: float, rounds: int) -> dict:
    """The numbers of a run (the last line fuzz.py prints, as JSON)."""
    kinds: dict[str, int] = {}
    for p in st.problems:
        kinds[p.kind] = kinds.get(p.kind, 0) + 1
    return {"rounds": rounds, "seconds": round(seconds), "files": st.files, "frames": st.frames,
            "records": st.records, "malformed": st.malformed, "limit_findings": st.limit_findings,
            "cli_runs": st.cli_runs, "tshark_runs": st.tshark_runs,
            "tshark_frames": st.tshark_frames, "tshark_refused": st.tshark_refused,
            "slowest_frame_cpu_s": round(st.slowest_frame, 3), "problems": len(st.problems),
            "problem_kinds": kinds, "engine_frames": st.engine_frames,
            "engine_diffs": st.engine_diffs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=0, help="run rounds until this much time passed")
    ap.add_argument("--rounds", type=int, default=1, help="rounds when --minutes is not given")
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: time)")
    ap.add_argument("--scale", type=int, default=2, help="random mutations per round x this")
    ap.add_argument("--crashers", type=Path,
                    default=Path(tempfile.gettempdir()) / "ibpath-fuzz-crashers",
                    help="where inputs that caused a problem are copied (default: %(default)s)")
    ap.add_argument("--no-tshark", action="store_true", help="skip tshark with the plugin")
    ap.add_argument("--cli", type=int, default=2, help="files per round through the real CLI")
    ap.add_argument("--differential", action="store_true",
                    help="also compare the Scapy and tshark engines frame by frame (reported "
                    "as engine_diffs, with examples; not counted as problems)")
    ap.add_argument("--huge", action="store_true",
                    help="also 64 MiB and 262144-byte frames, once per run")
    args = ap.parse_args(argv)
    # stopped with kill: leave through SystemExit so that the temporary files go too
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    seed = args.seed if args.seed is not None else int(time.time())
    rnd = random.Random(seed)
    total, rounds, t0 = Stats(), 0, time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ibpath-fuzz-") as tmp:
        work = Path(tmp)
        seeds = load_seeds(work)
        print(f"fuzz: seed {seed}, {len(seeds)} seed frames", file=sys.stderr)
        if args.huge:
            # 64 MiB frames (the decoder's size limits; Wireshark refuses them), then the
            # largest frames Wireshark reads (262144 bytes) for the plugin
            for size in (64 << 20, 262144):
                inp = huge_frame_file(work, size)
                st = check_in_process(inp, limit=60)
                st.merge(check_cli(inp))
                if not args.no_tshark:
                    st.merge(check_tshark(inp))
                inp.path.unlink()
                total.merge(st)
                for p in st.problems:
                    print(f"fuzz: PROBLEM {p.kind}: huge {size}: {p.detail[:2000]}", file=sys.stderr)
            print(f"fuzz: huge frames: {json.dumps(report(total, time.monotonic() - t0, 0))}",
                  file=sys.stderr, flush=True)
        while True:
            rdir = work / f"r{rounds}"
            rdir.mkdir()
            st = run_round(rnd, seeds, rdir, scale=args.scale, tshark=not args.no_tshark,
                           cli=args.cli, every_cut=rounds == 0, keep=args.crashers,
                           differential=args.differential)
            shutil.rmtree(rdir)
            total.merge(st)
            rounds += 1
            for p in st.problems:
                print(f"fuzz: PROBLEM {p.kind}: {p.path}: {p.detail[:2000]}", file=sys.stderr)
            for e in st.engine_examples:
                print(f"fuzz: engines differ: {e}", file=sys.stderr)
            elapsed = time.monotonic() - t0
            print(f"fuzz: round {rounds}: {json.dumps(report(total, elapsed, rounds))}",
                  file=sys.stderr, flush=True)
            if (args.minutes and elapsed >= args.minutes * 60) or (not args.minutes and rounds >= args.rounds):
                break
    print(json.dumps(report(total, time.monotonic() - t0, rounds)))
    return 1 if total.problems else 0


if __name__ == "__main__":
    sys.exit(main())
