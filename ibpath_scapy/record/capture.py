"""Spool (ibpathrec.c) to pcapng: one clock, one interface per source kind.

- ucma: an "ibpath.ucma" exported PDU per write() to rdma_cm, the bytes written followed by
  the response the kernel wrote back (layers/ucma.py). A SET_OPTION(IB, IB_PATH) is followed
  by an "ibpath.blob" frame of its optval with the call's result as
  "rdma_set_option=<result>" in the packet comment, the form ``ibpath audit`` reads
  (layers/pathdata.py, craft/builder.py ``blob()``).
- umad: an "ibpath.umad" exported PDU per MAD written or read (layers/umad.py).
- acm: an "ibpath.acm" exported PDU per message, re-framed from the socket's byte stream by
  acm_hdr.length (layers/acm.py).
- netlink: link type 253 records with the cooked header nlmon writes (layers/netlink.py),
  pkttype to-the-kernel for a send to nl_pid 0, to-a-user-socket otherwise.
- note: what the recorder itself has to say (a cap reached, an fd it could not track, a call
  that failed without data), as an exported PDU for Wireshark's "data" dissector whose packet
  comment is the note.

Every packet comment starts with the source, the call, pid, tid and fd; the call's return
value, errno and any cap hit follow on their own lines.
"""

from __future__ import annotations

import errno as errno_mod
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from ..capture.encap import exported_pdu
from ..layers.acm import ACM_DISSECTOR, ACM_MSG_HDR_LENGTH, AcmHdr
from ..layers.ib import LINKTYPE_WIRESHARK_UPPER_PDU
from ..layers.netlink import LINKTYPE_NETLINK, NETLINK_RDMA, PACKET_KERNEL, PACKET_USER
from ..layers.pathdata import BLOB_DISSECTOR, set_option_comment
from ..layers.ucma import UCMA_COMMANDS, UCMA_DISSECTOR, UcmaCmdHdr
from ..layers.umad import UMAD_DISSECTOR
from ..capture.pcapio import _IDB, PcapNgWriter
from ..capture.comment import errno_name, note_pdu, response_line, result_line, where_line
from .netlink import Message
from .spool import (
    KIND_ACM,
    KIND_NAMES,
    KIND_NETLINK,
    KIND_NOTE,
    KIND_UCMA,
    KIND_UMAD,
    PART_CALL,
    PART_NAMES,
    PART_OPTVAL,
    PART_RESPONSE,
    SpoolError,
    SpoolRecord,
)

_UCMA_HDR_SIZE = len(UcmaCmdHdr(in_len=0))
# pcapng IDB options (pcapng spec, "Interface Description Block"): pcapio's writer names no
# interface, so the names are added here
_OPT_IF_NAME, _OPT_IF_TSRESOL, _TSRESOL_NS = 2, 9, 9


class SourceWriter(PcapNgWriter):
    """PcapNgWriter with one named interface per source kind (pcapio gives one per link
    type; the ucma, umad and ACM sources share link type 252)."""

    def __init__(self, path: str):
        super().__init__(path)
        self._source = ""
        self._named: dict[tuple[int, str], int] = {}

    def write_source(self, source: str, data: bytes, linktype: int, ts: float,
                     comment: str | None = None) -> None:
        self._source = source
        self.write(data, linktype, ts, comment=comment)

    def _iface(self, linktype: int) -> int:
        key = (linktype, self._source)
        if key not in self._named:
            name = f"ibpath record {self._source}".encode()
            opts = struct.pack("<HH", _OPT_IF_NAME, len(name)) + name + b"\0" * ((-len(name)) % 4)
            opts += struct.pack("<HHB3x", _OPT_IF_TSRESOL, 1, _TSRESOL_NS)  # as pcapio writes
            opts += b"\0" * 4  # opt_endofopt
            self._block(_IDB, struct.pack("<HHI", linktype, 0, 0) + opts)
            self._named[key] = len(self._named)
        return self._named[key]


@dataclass
class ConvertResult:
    """What a conversion wrote: frames per source, blobs, notes, the notes' text."""

    frames: Counter = field(default_factory=Counter)
    blobs: int = 0
    notes: list[str] = field(default_factory=list)
    pids: set = field(default_factory=set)

    @property
    def total(self) -> int:
        return sum(self.frames.values())


@dataclass
class _Frame:
    ts_ns: int
    order: int
    source: str
    linktype: int
    data: bytes
    comment: str


_errno_text = errno_name


def _where(rec: SpoolRecord, call: str) -> str:
    return where_line(KIND_NAMES[rec.kind], call, rec.pid, rec.tid, rec.fd)


def _result_lines(rec: SpoolRecord) -> list[str]:
    return [result_line(rec.rc, rec.err)] + _cap_lines(rec)


def _cap_lines(rec: SpoolRecord) -> list[str]:
    lines = []
    what = PART_NAMES[rec.part]
    if rec.truncated:
        lines.append(f"truncated: {what} {len(rec.data)} of {rec.orig_length} bytes recorded "
                     "(per-record cap, IBPATHREC_MAX_RECORD)")
    if rec.unreadable:
        lines.append(f"unreadable: {what} memory of the caller could not be read after "
                     f"{len(rec.data)} of {rec.orig_length} bytes")
    return lines


def set_option_result(call: SpoolRecord) -> int:
    """rdma_set_option's return value for a recorded SET_OPTION write (librdmacm/cma.c
    rdma_set_option: a write of the whole command is 0; a short write is ENODATA; -1 sets
    errno), as set_option_comment takes it (0 or -errno)."""
    if call.rc < 0:
        return -call.err
    return 0 if call.rc == call.orig_length else -errno_mod.ENODATA


class _Converter:
    def __init__(self, name: str):
        self.name = name
        self.frames: list[_Frame] = []
        self.result = ConvertResult()
        self.acm_streams: dict[tuple[int, int, int], tuple[bytearray, SpoolRecord]] = {}

    def add(self, rec: SpoolRecord, source: str, linktype: int, data: bytes, lines: list[str],
            ts_ns: int | None = None) -> None:
        self.frames.append(_Frame(rec.ts_ns if ts_ns is None else ts_ns, rec.index, source,
                                  linktype, data, "\n".join(lines)))
        self.result.frames[source] += 1

    def note(self, rec: SpoolRecord, text: str) -> None:
        self.result.notes.append(text)
        self.add(rec, KIND_NAMES[KIND_NOTE], LINKTYPE_WIRESHARK_UPPER_PDU, note_pdu(text),
                 [f"ibpath record: {text}", f"pid {rec.pid} tid {rec.tid}"])

    # -- per source ---------------------------------------------------------------------
    def ucma(self, call: SpoolRecord, extra: SpoolRecord | None) -> None:
        data = call.data
        if not data:
            # nothing to dissect: what happened is the note
            why = "; ".join(_cap_lines(call)) or "no bytes"
            self.note(call, f"ucma write on fd {call.fd} (pid {call.pid} tid {call.tid}): "
                      f"rc={call.rc} errno={_errno_text(call.err)}; {why}")
            return
        cmd_name = "write"
        if len(data) >= _UCMA_HDR_SIZE:
            cmd, = struct.unpack_from("<I", data)
            cmd_name = f"write {UCMA_COMMANDS.get(cmd, f'command {cmd}')}"
        lines = [_where(call, cmd_name)] + _result_lines(call)
        ts = call.ts_ns
        if extra is not None and extra.part == PART_RESPONSE:
            data = data + extra.data
            lines.append(response_line(len(extra.data)))
            lines += _cap_lines(extra)
            ts = extra.ts_ns  # the call completes (GET_EVENT: the event arrives) then
        self.add(call, "ucma", LINKTYPE_WIRESHARK_UPPER_PDU, exported_pdu(data, UCMA_DISSECTOR),
                 lines, ts)
        if extra is not None and extra.part == PART_OPTVAL:
            self.blob(call, extra)

    def blob(self, call: SpoolRecord, optval: SpoolRecord) -> None:
        where = f"{self.name}: record {optval.index}"
        if optval.truncated or optval.unreadable:
            why = "; ".join(_cap_lines(optval))
            self.note(optval, f"{where}: SET_OPTION path array not written as a blob "
                      f"(pid {optval.pid} fd {optval.fd}): {why}")
            return
        lines = [set_option_comment(set_option_result(call)),
                 _where(optval, "SET_OPTION(IB, IB_PATH) optval") + f" optlen {len(optval.data)}",
                 result_line(call.rc, call.err)]
        self.add(optval, "ucma", LINKTYPE_WIRESHARK_UPPER_PDU,
                 exported_pdu(optval.data, BLOB_DISSECTOR), lines)
        self.result.blobs += 1

    def umad(self, rec: SpoolRecord) -> None:
        call = "write" if rec.part == PART_CALL else "read"
        if not rec.data:
            self.note(rec, f"umad {call} on fd {rec.fd} (pid {rec.pid}) failed: rc={rec.rc} "
                      f"errno={_errno_text(rec.err)}")
            return
        self.add(rec, "umad", LINKTYPE_WIRESHARK_UPPER_PDU,
                 exported_pdu(rec.data, UMAD_DISSECTOR), [_where(rec, call)] + _result_lines(rec))

    def netlink(self, rec: SpoolRecord) -> None:
        call = "send" if rec.part == PART_CALL else "recv"
        if not rec.data:
            self.note(rec, f"netlink {call} on fd {rec.fd} (pid {rec.pid}) failed: "
                      f"rc={rec.rc} errno={_errno_text(rec.err)}")
            return
        pkttype = PACKET_KERNEL if rec.part == PART_CALL and rec.aux == 0 else PACKET_USER
        msg = Message(rec.ts_ns / 1e9, rec.pid, call, rec.fd, NETLINK_RDMA, pkttype, rec.data)
        dest = [f"to nl_pid {rec.aux}"] if rec.part == PART_CALL and rec.aux else []
        self.add(rec, "netlink", LINKTYPE_NETLINK, msg.record(),
                 [_where(rec, call)] + dest + _result_lines(rec))

    def acm(self, rec: SpoolRecord) -> None:
        call = "send" if rec.part == PART_CALL else "recv"
        if not rec.data or rec.rc < 0:  # a failed send moved nothing: not in the stream
            self.note(rec, f"acm {call} on fd {rec.fd} (pid {rec.pid}) failed: rc={rec.rc} "
                      f"errno={_errno_text(rec.err)}")
            return
        key = (rec.pid, rec.fd, rec.part)
        buf, _ = self.acm_streams.get(key, (bytearray(), rec))
        buf += rec.data
        extra = _cap_lines(rec)
        while len(buf) >= ACM_MSG_HDR_LENGTH:
            length = AcmHdr(bytes(buf[:ACM_MSG_HDR_LENGTH])).length
            if length < ACM_MSG_HDR_LENGTH:
                self.add(rec, "acm", LINKTYPE_WIRESHARK_UPPER_PDU,
                         exported_pdu(bytes(buf), ACM_DISSECTOR),
                         [_where(rec, call), f"acm_hdr.length {length} is shorter than the "
                          f"{ACM_MSG_HDR_LENGTH}-byte header: the rest of this stream is not "
                          "framed"] + extra)
                buf.clear()
                break
            if len(buf) < length:
                break
            msg = bytes(buf[:length])
            del buf[:length]
            self.add(rec, "acm", LINKTYPE_WIRESHARK_UPPER_PDU, exported_pdu(msg, ACM_DISSECTOR),
                     [_where(rec, call)] + extra)
        self.acm_streams[key] = (buf, rec)

    def finish_acm(self) -> None:
        for (pid, fd, part), (buf, rec) in self.acm_streams.items():
            if buf:
                call = "send" if part == PART_CALL else "recv"
                want = AcmHdr(bytes(buf)).length if len(buf) >= ACM_MSG_HDR_LENGTH else None
                self.add(rec, "acm", LINKTYPE_WIRESHARK_UPPER_PDU,
                         exported_pdu(bytes(buf), ACM_DISSECTOR),
                         [_where(rec, call), f"incomplete message at the end of the recording: "
                          f"{len(buf)} bytes" + (f" of {want}" if want else "")])

    # -- the spool --------------------------------------------------------------------------
    def run(self, records: list[SpoolRecord]) -> None:
        i = 0
        while i < len(records):
            rec = records[i]
            self.result.pids.add(rec.pid)
            if rec.part in (PART_RESPONSE, PART_OPTVAL):
                raise SpoolError(f"{self.name}: record {rec.index} at byte {rec.offset}: "
                                 f"{PART_NAMES[rec.part]} without the ucma call before it")
            if rec.kind == KIND_UCMA:
                extra = records[i + 1] if i + 1 < len(records) else None
                if extra is not None and extra.part in (PART_RESPONSE, PART_OPTVAL):
                    if (extra.kind, extra.pid, extra.tid, extra.fd) != \
                            (rec.kind, rec.pid, rec.tid, rec.fd):
                        raise SpoolError(
                            f"{self.name}: record {extra.index} at byte {extra.offset}: "
                            f"{PART_NAMES[extra.part]} of pid {extra.pid} fd {extra.fd} after "
                            f"a call of pid {rec.pid} fd {rec.fd}")
                    i += 1
                else:
                    extra = None
                self.ucma(rec, extra)
            elif rec.kind == KIND_UMAD:
                self.umad(rec)
            elif rec.kind == KIND_ACM:
                self.acm(rec)
            elif rec.kind == KIND_NETLINK:
                self.netlink(rec)
            else:
                self.note(rec, rec.data.decode("utf-8", "replace"))
            i += 1
        self.finish_acm()


def frames_of(records: list[SpoolRecord], name: str = "<spool>") -> tuple[list[_Frame],
                                                                           ConvertResult]:
    """The frames a spool becomes, in time order (spool order breaks ties)."""
    conv = _Converter(name)
    conv.run(records)
    conv.frames.sort(key=lambda f: (f.ts_ns, f.order))
    return conv.frames, conv.result


def blob_frame(data: bytes, ts_ns: int, lines: list[str], source: str = "ucma") -> _Frame:
    """A path array as the "ibpath.blob" frame a recording carries, with these comment lines
    (an rdma_set_option optval has set_option_comment's line first; a blob no call took says
    so in its own words)."""
    return _Frame(ts_ns, 1 << 62, source, LINKTYPE_WIRESHARK_UPPER_PDU,
                  exported_pdu(data, BLOB_DISSECTOR), "\n".join(lines))


def write_pcapng(records: list[SpoolRecord], out: str, name: str = "<spool>",
                 extra: Sequence[_Frame] = ()) -> ConvertResult:
    """Convert spool records into the pcapng out, with `extra` frames (blob_frame) in their
    time order among them."""
    frames, result = frames_of(records, name)
    if extra:
        frames = sorted(frames + list(extra), key=lambda f: (f.ts_ns, f.order))
        result.blobs += len(extra)
    with SourceWriter(out) as w:
        for f in frames:
            w.write_source(f.source, f.data, f.linktype, f.ts_ns / 1e9, comment=f.comment)
    return result

