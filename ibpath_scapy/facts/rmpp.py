"""RMPP segmentation and reassembly of SA MADs, exactly as the Linux kernel does it.

Sources: drivers/infiniband/core/mad_rmpp.c (send_next_seg, get_mad_len), mad.c
(get_pad_size, alloc_send_rmpp_list); wire-formats.md §2 and its worked examples.

The Reassembler receives as the kernel's receiver does (mad_rmpp.c, torvalds/linux):
continue_rmpp() drops a segment whose transfer is not open (acquire_rmpp_recv finds no
rmpp_recv) and a segment it already holds (find_seg_location returns NULL); a transfer stays
known for 10 s after complete_rmpp() (cleanup_work), during which its segments, resent after
the sender's ACK timeout (ib_retry_rmpp rewinds to last_ack and calls send_next_seg), are
acknowledged and dropped; a STOP or ABORT from the receiver ends the sender's transfer
(process_rmpp_stop/process_rmpp_abort -> abort_send). Dropped segments are not errors: the
caller reads Reassembler.dropped after each add(). The receive window (newwin) is not
followed: a capture does not show the receiver's queue depth.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass, field

from .problems import Code, Problem, problem
from ..layers.mad import (
    MAD_HDR_SIZE,
    MAD_SIZE,
    RMPP,
    RMPP_ACTIVE,
    RMPP_DATA_SIZE,
    RMPP_FIRST,
    RMPP_LAST,
    RMPP_TYPE_ABORT,
    RMPP_TYPE_ACK,
    RMPP_TYPE_DATA,
    RMPP_TYPE_STOP,
)
from ..model.layout import field_offset

# complete_rmpp(): a completed transfer is cleaned up 10 s later (cleanup_work)
COMPLETE_LINGER = 10.0
from ..layers.sa import SA_DATA_SIZE, SA_HDR_SIZE, SA_MAD_HDR_SIZE

# Offsets inside a MAD of the RMPP header's fields (it follows the MAD header), from its layout
_OFF_RMPP_VERSION, _OFF_RMPP_TYPE, _OFF_RMPP_FLAGS, _OFF_SEGMENT, _OFF_PAYLEN = (
    MAD_HDR_SIZE + field_offset(RMPP, name) for name in (
        "rmpp_version", "rmpp_type", "rmpp_flags", "segment_number", "payload_length"))

# Caps that keep a hostile capture from holding unbounded memory or time (Reassembler). A
# transfer that hits one is reported as unfinished with Transfer.limit set (rule DECODE-LIMIT).
# Per transfer: segment numbers 1..MAX_SEGMENTS, each segment kept as at most one MAD, so at
# most MAX_TRANSFER_BYTES (1 MiB; 4096 segments hold ~15,000 PathRecords, more than a GetTable
# of every path of a 120-port fabric).
MAX_SEGMENTS = 4096
MAX_MESSAGE_BYTES = MAX_SEGMENTS * SA_DATA_SIZE
MAX_TRANSFER_BYTES = MAX_SEGMENTS * MAD_SIZE
# Across transfers: at most MAX_OPEN transfers and MAX_OPEN_BYTES of segments held open; the
# oldest transfer is evicted (and reported) first.
MAX_OPEN = 4096
MAX_OPEN_BYTES = 64 * 1024 * 1024
# Per transfer, problems and out-of-range frames kept for the report (the rest are counted).
MAX_PROBLEMS = 20
MAX_REJECTED = 1000


def carries_whole_message(rec) -> bool:
    """Whether a decoded MAD record (a facts.records.MadFrame, or what a transaction keeps
    of one) holds its whole message: a umad message (the kernel reassembles what a process
    reads), RMPP inactive, a single FIRST|LAST segment, or the segment that completed a
    reassembly ("reassembled_from")."""
    rmpp = rec.rmpp
    flags = (rmpp.rmpp_flags or 0) if rmpp is not None else 0
    return (rec.reassembled_from is not None or not flags & 1 or flags & 6 == 6
            or getattr(rec, "umad", None) is not None)


def pad_size(data_len: int) -> int:
    """Kernel get_pad_size() for SA: zero data still takes one (fully padded) segment."""
    if not data_len:
        return SA_DATA_SIZE
    pad = SA_DATA_SIZE - data_len % SA_DATA_SIZE
    return 0 if pad == SA_DATA_SIZE else pad


def segment(mad: bytes) -> list[bytes]:
    """Split one SA MAD of any length (56-byte header + data) into 256-byte RMPP DATA segments.

    The header is repeated in every segment; RRespTime is kept, flags/segment/paylen set as
    send_next_seg() sets them.
    """
    if len(mad) < SA_MAD_HDR_SIZE:
        raise ValueError(f"an SA MAD needs at least {SA_MAD_HDR_SIZE} bytes, got {len(mad)}")
    hdr, data = mad[:SA_MAD_HDR_SIZE], mad[SA_MAD_HDR_SIZE:]
    pad = pad_size(len(data))
    count = (len(data) + pad) // SA_DATA_SIZE
    data += b"\x00" * pad
    out = []
    for k in range(1, count + 1):
        flags = RMPP_ACTIVE
        paylen = 0
        if k == 1:
            flags |= RMPP_FIRST
            paylen = count * RMPP_DATA_SIZE - pad
        if k == count:
            flags |= RMPP_LAST
            paylen = RMPP_DATA_SIZE - pad
        h = bytearray(hdr)
        h[_OFF_RMPP_VERSION] = h[_OFF_RMPP_VERSION] or 1
        h[_OFF_RMPP_TYPE] = RMPP_TYPE_DATA
        h[_OFF_RMPP_FLAGS] = (h[_OFF_RMPP_FLAGS] & 0xF8) | flags
        struct.pack_into("!II", h, _OFF_SEGMENT, k, paylen)
        out.append(bytes(h) + data[(k - 1) * SA_DATA_SIZE:k * SA_DATA_SIZE])
    return out


def message_length(last_segment: bytes, seg_count: int) -> int:
    """Reassembled message length (kernel get_mad_len): header + data without the pad."""
    paylen = struct.unpack_from("!I", last_segment, _OFF_PAYLEN)[0]
    pad = RMPP_DATA_SIZE - paylen
    if pad > SA_DATA_SIZE or pad < 0:
        pad = 0
    return SA_MAD_HDR_SIZE + seg_count * SA_DATA_SIZE - pad


def reassemble(segments: list[bytes]) -> bytes:
    """Join segments 1..N (in order) into one SA MAD.

    The result carries the first segment's header with its RMPP header rewritten as a single
    FIRST|LAST transfer whose PayloadLength is the SA header plus all data, so it decodes
    like a one-MAD response.
    """
    data = b"".join(s[SA_MAD_HDR_SIZE:MAD_SIZE] for s in segments)
    total = message_length(segments[-1], len(segments))
    msg = bytearray(segments[0][:SA_MAD_HDR_SIZE] + data)[:total]
    msg[_OFF_RMPP_FLAGS] = (msg[_OFF_RMPP_FLAGS] & 0xF8) | RMPP_ACTIVE | RMPP_FIRST | RMPP_LAST
    struct.pack_into("!II", msg, _OFF_SEGMENT, 1, SA_HDR_SIZE + total - SA_MAD_HDR_SIZE)
    return bytes(msg)


@dataclass
class Transfer:
    """Segments of one RMPP transfer collected so far."""

    segments: dict[int, bytes] = field(default_factory=dict)
    frames: dict[int, int] = field(default_factory=dict)
    last: int | None = None
    problems: list[Problem] = field(default_factory=list)

    rejected: list[int] = field(default_factory=list)  # frames of segments out of range
    limit: str | None = None  # the cap this transfer hit, if any (reported by DECODE-LIMIT)
    size: int = 0  # bytes of segments held
    dropped_problems: int = 0
    stopped: str | None = None  # ended by the receiver's STOP or ABORT (Reassembler.control)

    def complete(self) -> bool:
        # the length test first: a hostile transfer must not cost a walk per segment
        return (self.last is not None and len(self.segments) >= self.last
                and all(k in self.segments for k in range(1, self.last + 1)))

    def problem(self, found: Problem) -> None:
        """Note a problem; past MAX_PROBLEMS only count it (a flood of repeats is one fact)."""
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(found)
        else:
            self.dropped_problems += 1

    def all_frames(self) -> list[int]:
        return sorted(set(self.frames.values()) | set(self.rejected))

    def why_unfinished(self) -> str:
        """Why the transfer never completed, for the report."""
        if self.last is None:
            why = "no LAST segment"
        else:
            missing = [k for k in range(1, self.last + 1) if k not in self.segments]
            why = f"segments {missing[:20]}{' ...' if len(missing) > 20 else ''} missing"
        head = [why] + [x for x in (self.stopped, self.limit) if x]
        more = len(self.problems) - 3 + self.dropped_problems
        return "; ".join(head + [str(p) for p in self.problems[:3]] + ([f"{more} more problems"] if more > 0 else []))


class Reassembler:
    """Streaming RMPP reassembly keyed by (direction, TID); bounded in segments and bytes per
    transfer and in open transfers and their bytes (oldest evicted first, reported): see the
    caps above."""

    def __init__(self, max_open: int = MAX_OPEN, max_open_bytes: int = MAX_OPEN_BYTES):
        self.open: dict[tuple, Transfer] = {}
        self.max_open = max_open
        self.max_open_bytes = max_open_bytes
        self.open_bytes = 0
        self.evicted: list[tuple[tuple, Transfer]] = []
        # transfers completed lately: key -> (capture time, completing frame), bounded
        self.completed: OrderedDict[tuple, tuple[float | None, int]] = OrderedDict()
        # why the kernel would drop the segment of the last add(), or None
        self.dropped: str | None = None

    def _evict_oldest(self, why: str) -> None:
        old_key = next(iter(self.open))
        old = self.open.pop(old_key)
        self.open_bytes -= old.size
        old.limit = why
        old.segments.clear()  # only the frames and problems are reported
        old.size = 0
        self.evicted.append((old_key, old))

    def add(self, key: tuple, seg_num: int, flags: int, mad: bytes, frame: int,
            time: float | None = None):
        """Add a DATA segment; returns (message bytes, Transfer) when the transfer completes.
        A segment the kernel's receiver drops (see the module docstring) leaves everything
        as it was and sets self.dropped to why."""
        self.dropped = None
        t = self.open.get(key)
        if t is None:
            done = self.completed.get(key)
            if done is not None and (time is None or done[0] is None
                                     or time - done[0] <= COMPLETE_LINGER):
                self.dropped = (f"segment {seg_num} of the transfer completed in frame "
                                f"{done[1]}: acknowledged and dropped (continue_rmpp, "
                                "RMPP_STATE_COMPLETE)")
                return None
            if 1 < seg_num <= MAX_SEGMENTS:  # (a number no sender uses is a problem below)
                self.dropped = (f"segment {seg_num} while no transfer of this TID is open: "
                                "dropped (continue_rmpp: no rmpp_recv)")
                return None
            t = self.open[key] = Transfer()
            if len(self.open) > self.max_open:
                self._evict_oldest(f"evicted: more than {self.max_open} RMPP transfers open at once")
        if seg_num < 1 or seg_num > MAX_SEGMENTS:
            t.problem(problem(Code.RMPP_SEGMENT_RANGE, seg_num, MAX_SEGMENTS))
            if seg_num > MAX_SEGMENTS:
                t.limit = f"segment numbers above {MAX_SEGMENTS} are not reassembled"
            if len(t.rejected) < MAX_REJECTED:
                t.rejected.append(frame)
            return None
        seg = mad[:MAD_SIZE]
        if seg_num in t.segments:
            self.dropped = (f"segment {seg_num} repeated (held from frame "
                            f"{t.frames[seg_num]}): dropped (find_seg_location)")
            return None
        t.segments[seg_num] = seg
        t.frames[seg_num] = frame
        t.size += len(seg)
        self.open_bytes += len(seg)
        while self.open_bytes > self.max_open_bytes and len(self.open) > 1 and next(iter(self.open)) != key:
            self._evict_oldest(f"evicted: more than {self.max_open_bytes} bytes of RMPP segments open")
        if flags & RMPP_LAST:
            t.last = seg_num
        if t.complete():
            del self.open[key]
            self.open_bytes -= t.size
            self.completed[key] = (time, frame)
            self.completed.move_to_end(key)
            if len(self.completed) > self.max_open:
                self.completed.popitem(last=False)
            segs = [t.segments[k] for k in range(1, t.last + 1)]
            return reassemble(segs), t
        return None

    def control(self, key: tuple, rmpp_type: int, frame: int) -> None:
        """An RMPP ACK, STOP or ABORT for the DATA transfer of `key` (decode.rmpp_control_key).
        STOP and ABORT from its receiver end it, unfinished (abort_send); an ACK changes
        nothing the reassembly follows."""
        if rmpp_type not in (RMPP_TYPE_STOP, RMPP_TYPE_ABORT) or key not in self.open:
            return
        t = self.open.pop(key)
        self.open_bytes -= t.size
        t.size = 0
        t.segments.clear()
        t.stopped = (f"ended by the receiver's RMPP {'STOP' if rmpp_type == RMPP_TYPE_STOP else 'ABORT'} "
                     f"in frame {frame}")
        self.evicted.append((key, t))

    def pending(self) -> list[tuple[tuple, Transfer]]:
        """Transfers never completed (call at end of capture)."""
        return list(self.open.items()) + self.evicted
