"""Streaming pcap / pcapng reading and writing, with errors that name the file and offset.

Own code rather than scapy's readers: a truncated or corrupt file must give a precise error
(frame number, byte offset) after yielding every good frame before it, and the audit's fast
path needs raw bytes without building any Scapy object.

The one reader of captures: classic pcap and pcapng are each parsed in one place (_pcap,
_pcapng), read in blocks of READ_BLOCK bytes, and every path reads through them:

    read_frames(src), read_input(src, ...)      Frames (decode.py's Scapy path)
    classified_input(src, classifier, ...)      (Frame, classification): the fast path, whose
                                                FrameClassifier looks at each frame's bytes in
                                                the read buffer first and may skip it unbuilt
    interfaces(src), Interfaces(src)            each interface's link type and clock (the
                                                tshark engine's timestamps)

Every error of a damaged file is worded once (_damage, _truncated), whichever path reads it.
"""

from __future__ import annotations

import array
import functools
import os
import stat
import struct
import sys
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator, Mapping, Protocol, Sequence

from ..native import extension as _native_scan  # (tests swap it for a lambda: None)

PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}
PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_BYTE_ORDER_MAGIC = 0x1A2B3C4D

_PCAP_HDR, _REC_HDR = 24, 16  # classic pcap: file header, record header
# pcapng block types
_IDB, _PB, _SPB, _EPB = 0x00000001, 0x00000002, 0x00000003, 0x00000006
# Shortest block of each type: 12 bytes of type, length and trailing length around its fixed
# fields (an IDB's link type, reserved, snaplen; a packet block's interface and lengths).
_MIN_BLOCK = {_IDB: 20, _PB: 32, _SPB: 16, _EPB: 32}
# An EPB's type, length, interface, timestamp (high, low), captured and original lengths
_EPB_HEAD = {e: struct.Struct(e + "7I").unpack_from for e in "<>"}
_EPB_DATA = struct.calcsize("<7I")  # where its packet data starts
# a pcap record's seconds, fraction, captured and original lengths
_REC_HEAD = {e: struct.Struct(e + "4I").unpack_from for e in "<>"}
# pcapng interface options: if_name, if_tsresol, if_tsoffset
_IF_NAME, _IF_TSRESOL, _IF_TSOFFSET = 2, 9, 14
# and those that say where a capture was made: if_description, if_os, if_hardware; the section
# header's shb_hardware, shb_os, shb_userappl; opt_comment, of any block
_IF_DESCRIPTION, _IF_OS, _IF_HARDWARE = 3, 12, 15
_SHB_HARDWARE, _SHB_OS, _SHB_USERAPPL = 2, 3, 4
_OPT_COMMENT = 1
MAX_BLOCK = 256 * 1024 * 1024  # refuse absurd lengths instead of allocating them
READ_BLOCK = 4 * 1024 * 1024  # captures are read in blocks of this size (pcap and pcapng)

# Not a pcap link type: the link type of the single frame read_input() makes of a raw blob file
# (the exact optval bytes of rdma_set_option). Negative so that it can never collide.
RAW_BLOB_LINKTYPE = -1
MAX_RAW_BLOB = 16 * 1024 * 1024


class CaptureError(Exception):
    """A capture file cannot be read on; the message names file, frame and byte offset."""


def _damage(path: str, frame: int, reason: str) -> CaptureError:
    """The error of a capture that cannot be read on, as every reader words it: the file, the
    number of the frame being read (0: the file header) and what is wrong (with the byte
    offset)."""
    return CaptureError(f"{path}: frame {frame}: {reason}")


def _truncated(path: str, frame: int, what: str, off: int, got: int, n: int) -> CaptureError:
    """The file ends inside `what`, n bytes at byte offset off of which got are there."""
    return _damage(path, frame, f"truncated {what} at byte offset {off} ({got} of {n} bytes)")


def _not_a_capture(path: str, head: bytes) -> CaptureError:
    return CaptureError(f"{path}: not a pcap or pcapng file "
                        f"(starts with {head.hex() or 'nothing'})")


@dataclass(slots=True)
class Frame:
    number: int  # 1-based, as Wireshark numbers frames
    time: float
    linktype: int
    data: bytes
    wirelen: int
    comment: str | None = None


@dataclass(frozen=True, slots=True)
class Taken:
    """A run of frames a reader's loop took (the classifier's TakeTest held of each), as
    classified_input(runs=True) hands it over: not yet made Frames. buf is the read buffer
    and taken the loop's flat (index in the run of records or blocks, position of the
    record or block) pairs; frame(j) makes the j-th taken frame, exactly as the readers
    make every frame. A consumer that reads the records from buf itself (the fast path's
    C decoder: FastDecoder.decode_taken) makes no Frame at all."""

    buf: bytes
    taken: list
    number: int  # the frames before the run
    linktype: int
    res: float  # seconds per timestamp unit
    little: bool  # the capture's byte order
    epb: bool  # pcapng enhanced packet blocks, else classic pcap records

    def __len__(self) -> int:
        return len(self.taken) // 2

    def frame(self, j: int) -> Frame:
        """The j-th frame taken (0-based), as _pcap and _pcapng make it."""
        buf, at, number = self.buf, self.taken[2 * j + 1], self.number + self.taken[2 * j] + 1
        endian = "<" if self.little else ">"
        if self.epb:
            _, blen, _, ts_hi, ts_lo, incl, orig = _EPB_HEAD[endian](buf, at)
            return _epb_frame(buf, at + _EPB_DATA, at + blen, number, self.res, self.linktype,
                              incl, orig, ts_hi, ts_lo, endian)
        sec, frac, incl, orig = _REC_HEAD[endian](buf, at)
        return Frame(number, sec + frac * self.res, self.linktype,
                     buf[at + _REC_HDR:at + _REC_HDR + incl], orig)


@dataclass(frozen=True, slots=True)
class Interface:
    """A capture interface: a classic pcap's one (its file header), or a pcapng IDB.

    Its clock: a frame's timestamp counts ticks of `resolution` seconds (`units` ticks a
    second), from if_tsresol (pcapng; microseconds when absent) or the pcap magic (micro- or
    nanoseconds). Frame.time is ticks × resolution (pcapng) or seconds + fraction ×
    resolution (pcap). if_tsoffset (seconds to add, says the file) is `tsoffset`, and
    Frame.time does not add it (it never has); tshark's frame.time_epoch does."""

    linktype: int
    snaplen: int
    units: int = 10 ** 6  # ticks per second
    resolution: float = 1e-6  # seconds per tick
    tsoffset: int = 0  # if_tsoffset, seconds (0 when absent, and for pcap)
    name: str | None = None  # if_name (None when absent, and for pcap)
    section: int = 1  # the pcapng section, counted from 1 (pcap: 1)
    index: int = 0  # the interface ID in its section, from 0 (pcap: 0)


@dataclass(frozen=True)
class Term:
    """One conjunct of a RunTest: the field of `size` bytes (1, 2 or 4, big-endian) at
    `offset` from the frame's start, as (value >> shift) & mask (the whole value when mask is
    None), compared in one way: == `equals`, == the frame's length less `len_minus`, not in
    `not_in`, or in `is_in`."""

    name: str  # the field's name in the Python test
    offset: int
    size: int
    shift: int = 0
    mask: int | None = None
    equals: int | None = None
    len_minus: int | None = None
    not_in: frozenset | None = None
    is_in: frozenset | None = None

    @property
    def set_name(self) -> str:
        """The global that holds not_in or is_in in the Python test."""
        return f"_in_{self.name}"

    @property
    def values(self) -> frozenset | None:
        """The set of not_in or is_in."""
        return self.not_in if self.not_in is not None else self.is_in

    def source(self) -> str:
        """The term as a Python expression over `name`, `s` and `e` (the frame's bounds)."""
        v = self.name if self.mask is None else f"({self.name} >> {self.shift}) & {self.mask}"
        if self.equals is not None:
            return f"{v} == {self.equals}"
        if self.len_minus is not None:
            return f"{v} == e - s - {self.len_minus}"
        return f"{v} {'not in' if self.not_in is not None else 'in'} {self.set_name}"


_CODES = {1: "B", 2: "H", 4: "I"}


def struct_format(fields: list[tuple[int, str]]) -> tuple[str, int]:
    """A big-endian struct format reading the (offset, "B", "H" or "I") fields in one go,
    gaps skipped ("x"), and the bytes it needs; fields in order, none overlapping."""
    fmt, pos = ">", 0
    for off, code in fields:
        if off < pos:
            raise ValueError(f"field at byte {off} overlaps the one before (ends at {pos})")
        fmt += (f"{off - pos}x" if off > pos else "") + code
        pos = off + struct.calcsize(">" + code)
    return fmt, pos


class RunTest:
    """A classifier's test for the bulk of a capture, for the readers to compile into loops
    that skip runs of frames without a call per frame (a pcap's records, a pcapng's enhanced
    packet blocks of one interface): a frame is skipped when its length is in least..most and
    every one of `terms` holds. A skipped frame must be one the classifier would skip (return
    None). The terms are data, so that both loops, the Python one compiled from `test` and the
    C one (native/_scan.c), run the same declaration. A TakeTest is one too: the frames it holds
    of the loops hand over with its classification, the classifier not asked."""

    __slots__ = ("terms", "least", "most", "fields", "test", "namespace", "_makers")

    def __init__(self, terms: "list[Term] | tuple[Term, ...]", least: int, most: int):
        terms = tuple(sorted(terms, key=lambda t: t.offset))
        for t in terms:
            if t.size not in _CODES or sum(
                    x is not None for x in (t.equals, t.len_minus, t.not_in, t.is_in)) != 1:
                raise ValueError(f"run test term {t!r}: of an odd size, or not exactly one "
                                 "comparison")
        fmt, pos = struct_format([(t.offset, _CODES[t.size]) for t in terms])
        taken = {"b", "s", "e", "pos", "n", "k", "bt", "bl", "ifc", "incl", "head", "incl_at"}
        names = [t.name for t in terms]
        if len(set(names)) < len(names) or not all(x.isidentifier() for x in names) \
                or taken & set(names):
            raise ValueError(f"run test field names {names}: repeated, not identifiers, or "
                             "the loops' own names")
        if least < pos:
            raise ValueError(f"run test reads {pos} bytes of frames as short as {least}")
        self.terms, self.least, self.most = terms, least, most
        self.fields = ", ".join(t.name for t in terms) + ","  # what namespace["_unpack"] binds
        self.test = " and ".join(t.source() for t in terms)
        self.namespace = {"_unpack": struct.Struct(fmt).unpack_from,
                          **{t.set_name: t.values for t in terms if t.values is not None}}
        self._makers: dict[tuple, dict] = {}  # the loops' makers, by (C, take test)

    def holds(self, b: bytes, s: int, e: int) -> bool:
        """Whether the frame at b[s:e] passes: its length in least..most, every term true."""
        if not self.least <= e - s <= self.most:
            return False
        for t, v in zip(self.terms, self.namespace["_unpack"](b, s)):
            if t.mask is not None:
                v = (v >> t.shift) & t.mask
            if t.equals is not None:
                if v != t.equals:
                    return False
            elif t.len_minus is not None:
                if v != e - s - t.len_minus:
                    return False
            elif (v in t.not_in) if t.not_in is not None else (v not in t.is_in):
                return False
        return True


class TakeTest(RunTest):
    """A classifier's test for the frames it would classify `value` (the same object every
    time), which the readers' loops over runs hand over without asking it: a frame is taken
    when it is not skipped (the RunTest), its length is in least..most and every one of
    `terms` holds."""

    __slots__ = ("value",)

    def __init__(self, terms: "list[Term] | tuple[Term, ...]", least: int, most: int, value):
        super().__init__(terms, least, most)
        self.value = value


class FrameClassifier(Protocol):
    """What classified_input asks of its classifier (fast.prefilter.Prefilter is one)."""

    def classifier(self, linktype: int) -> Callable[[bytes, int, int], object]:
        """classify(buf, start, end) of the frames of a link type: their bytes are
        buf[start:end] (the read buffer); None skips the frame (counted, never built), any
        other value is the frame's classification."""

    def run_test(self, linktype: int) -> RunTest | None:
        """The test the readers may skip runs of frames of a link type by, or None."""

    def take_test(self, linktype: int) -> "TakeTest | None":
        """The test of the frames of a link type the readers' loops may hand over classified
        without asking (only with a run_test), or None."""


class _KeepAll:
    """The classifier of read_frames: every frame, classified True."""

    @staticmethod
    def classifier(linktype: int) -> Callable[[bytes, int, int], object]:
        return _keep

    @staticmethod
    def run_test(linktype: int) -> None:
        return None

    @staticmethod
    def take_test(linktype: int) -> None:
        return None


class _SkipAll(_KeepAll):
    """The classifier of interfaces(): no frame is built."""

    @staticmethod
    def classifier(linktype: int) -> Callable[[bytes, int, int], object]:
        return _skip


def _keep(b: bytes, s: int, e: int) -> bool:
    return True


def _skip(b: bytes, s: int, e: int) -> None:
    return None


def sniff_format(head: bytes) -> str:
    """'pcap', 'pcapng' or 'other' from a file's first 4 bytes."""
    if head[:4] in PCAP_MAGICS:
        return "pcap"
    if head[:4] == PCAPNG_SHB:
        return "pcapng"
    return "other"


STDIN = "-"  # the input name of standard input


class Input:
    """One input opened for reading, by name: a regular file, or a stream that cannot seek
    (standard input "-", a FIFO, /dev/stdin, a process substitution), read as its bytes arrive.

    The first bytes can be looked at (head()) without seeking: they are kept and handed out
    again. `pos` counts the bytes handed out and `size` is the file's size (None for a
    stream), for progress. read() returns n bytes unless the input ends; read_block() returns
    what is there, at most n bytes, so that a stream written a packet at a time (tcpdump -U)
    is decoded packet by packet rather than 4 MiB at a time."""

    def __init__(self, name: str):
        self.name = name
        if name == STDIN:
            self._f, self._own = sys.stdin.buffer, False
        else:
            self._f, self._own = open(name, "rb"), True
        try:
            st = os.fstat(self._f.fileno())
            regular = stat.S_ISREG(st.st_mode)
        except (OSError, ValueError):  # a file object without a descriptor (tests)
            st, regular = None, True
        self.stream = not regular
        self.size = st.st_size if regular and st is not None else None
        self.pos = 0
        self._pending = b""

    def head(self, n: int) -> bytes:
        """The first n bytes (fewer if the input is shorter), left to be read again."""
        while len(self._pending) < n:
            more = self._f.read(n - len(self._pending))
            if not more:
                break
            self._pending += more
        return self._pending[:n]

    def read(self, n: int = -1) -> bytes:
        b, self._pending = self._pending, b""
        if n < 0:
            b += self._f.read()
        elif len(b) > n:
            b, self._pending = b[:n], b[n:]
        elif len(b) < n:
            b += self._f.read(n - len(b))
        self.pos += len(b)
        return b

    def read_block(self, n: int) -> bytes:
        if self._pending or not self.stream:
            return self.read(n if not self._pending else min(n, len(self._pending)))
        b = self._f.read1(n)
        self.pos += len(b)
        return b

    def tell(self) -> int:
        return self.pos

    def close(self) -> None:
        if self._own:
            self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def opened(src: "str | Input") -> Input:
    """src itself if it is an Input, else the file of that name opened as one."""
    return src if isinstance(src, Input) else Input(src)


# --------------------------------------------------------------------------------------------
# Reading: the entry points
# --------------------------------------------------------------------------------------------

def read_frames(src: "str | Input") -> Iterator[Frame]:
    """Yield every frame of a pcap or pcapng file (or stream), in order, one at a time."""
    for frame, _ in classified_input(src, _KeepAll):
        yield frame


def read_input(src: "str | Input", blob_plausible: Callable[[bytes], bool] | None = None,
               as_blob: bool = False) -> Iterator[Frame]:
    """Frames of a pcap or pcapng file; or, when the file is neither and blob_plausible
    accepts its content (or as_blob says it is one, whatever its content), one frame (number
    1, link type RAW_BLOB_LINKTYPE) holding the whole file. Captures and blobs are told apart
    by content, never by name."""
    for frame, _ in classified_input(src, _KeepAll, None, blob_plausible, as_blob):
        yield frame


def classified_input(src: "str | Input", classifier: FrameClassifier,
                     skipped: list | None = None,
                     blob_plausible: Callable[[bytes], bool] | None = None,
                     as_blob: bool = False, runs: bool = False
                     ) -> Iterator[tuple["Frame | Taken", object]]:
    """(frame, classification) of every frame of src (read as read_input reads it) that
    `classifier` does not skip; skipped[0] counts the others as they pass. Each frame's bytes
    are classified where they were read (classifier.classifier(link type)(buf, start, end)),
    and runs of frames its run_test holds of are skipped in one compiled loop: a skipped frame
    costs a header unpack and a few byte reads, and no copy. runs=True: a run of frames the
    loop took (its take_test) comes as one (Taken, classification), its frames not made and
    skipped[0] counting up to its last one. Errors as read_frames raises them, after every
    frame before the damage has been handed over (and counted)."""
    skipped = skipped if skipped is not None else [0]
    with opened(src) as f:
        path = f.name
        if as_blob or (blob_plausible is not None and sniff_format(f.head(4)) == "other"):
            frame = raw_blob_frame(path, f.read(MAX_RAW_BLOB + 1),
                                   None if as_blob else blob_plausible)
            cl = classifier.classifier(frame.linktype)(frame.data, 0, len(frame.data))
            if cl is None:
                skipped[0] += 1
            else:
                yield frame, cl
            return
        yield from _reader(f)(path, f, classifier, skipped, runs=runs)


def interfaces(src: "str | Input") -> Iterator[Interface]:
    """Every interface of a pcap or pcapng file (or stream), in file order, read by the
    readers of its frames: a pcap's one interface (its file header), then nothing more is
    read; a pcapng's IDBs, each as it is reached (packet blocks are checked and passed over,
    never built). Raises CaptureError as read_frames does, at the same byte, after every
    interface before it."""
    with opened(src) as f:
        for iface, _ in _reader(f)(f.name, f, _SkipAll, [0], describe=True):
            yield iface


class Interfaces:
    """The interfaces of a capture by (section, interface ID), read on demand: the file is
    read (interfaces()) only as far as the interface asked for, and left open until close()
    (a context manager too). Sections count from 1 and interfaces from 0 in each section, as
    tshark's frame.section_number and frame.interface_id do (a pcap: section 1, interface 0).

    Lenient, for callers that read the frames elsewhere: an interface the file does not
    describe before its end, or before damage (the CaptureError is kept in `error`), is None."""

    def __init__(self, src: "str | Input"):
        self._input = opened(src)
        self._it: Iterator[Interface] | None = interfaces(self._input)
        self.sections: list[list[Interface]] = []
        self.error: CaptureError | None = None

    def get(self, section: int = 1, index: int = 0) -> Interface | None:
        while self._it is not None and not self._known(section, index):
            try:
                iface = next(self._it)
            except StopIteration:
                self._it = None
            except CaptureError as exc:
                self._it, self.error = None, exc
            else:
                while len(self.sections) < iface.section:
                    self.sections.append([])
                self.sections[iface.section - 1].append(iface)
        return self.sections[section - 1][index] if self._known(section, index) else None

    def _known(self, section: int, index: int) -> bool:
        return 0 < section <= len(self.sections) and 0 <= index < len(self.sections[section - 1])

    def close(self) -> None:
        if self._it is not None:
            self._it.close()
            self._it = None
        self._input.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def raw_blob_frame(path: str, data: bytes,
                   blob_plausible: Callable[[bytes], bool] | None) -> Frame:
    """The one frame of a raw blob file, or the CaptureError of a file that is none (empty,
    over MAX_RAW_BLOB, or refused by blob_plausible when given)."""
    if not data:
        raise CaptureError(f"{path}: not a capture or blob file (empty)")
    if len(data) > MAX_RAW_BLOB:
        raise CaptureError(f"{path}: not a capture or blob file (over {MAX_RAW_BLOB} bytes)")
    if blob_plausible is not None and not blob_plausible(data):
        raise CaptureError(f"{path}: not a capture or blob file "
                           f"(starts with {data[:8].hex()} at byte offset 0)")
    return Frame(1, 0.0, RAW_BLOB_LINKTYPE, data, len(data))


def _reader(f: Input) -> Callable[..., Iterator[tuple]]:
    """The reader of f's format (from its first bytes), or the error of a file that is no
    capture."""
    head = f.head(4)
    kind = sniff_format(head)
    if kind == "pcap":
        return _pcap
    if kind == "pcapng":
        return _pcapng
    raise _not_a_capture(f.name, head)


# --------------------------------------------------------------------------------------------
# The read buffer
# --------------------------------------------------------------------------------------------

class _Stream:
    """A file read in large blocks: buf[pos:] are the bytes from file offset base + pos on."""

    __slots__ = ("f", "buf", "pos", "base")

    def __init__(self, f: Input):
        self.f, self.buf, self.pos, self.base = f, b"", 0, f.tell()

    def avail(self, n: int) -> int:
        """Bytes at pos, reading on until there are n or the file ends."""
        have = len(self.buf) - self.pos
        if have >= n:
            return have
        parts = [self.buf[self.pos:]]
        while have < n:
            # never more than MAX_BLOCK at once: a pcap's snaplen may make a length of
            # gigabytes plausible, a file that ends sooner is no reason to allocate them
            more = self.f.read_block(max(READ_BLOCK, min(n - have, MAX_BLOCK)))
            if not more:
                break
            parts.append(more)
            have += len(more)
        self.base += self.pos
        self.pos = 0
        self.buf = b"".join(parts)
        return have

    def need(self, at: int, n: int, path: str, what: str, frame: int) -> int:
        """The buffer offset of n bytes at pos + at, or the error of a file that ends before
        them."""
        have = self.avail(at + n) - at
        if have < n:
            raise _truncated(path, frame, what, self.base + self.pos + at, max(have, 0), n)
        return self.pos + at


def _read_exact(f: Input, n: int, path: str, what: str, frame: int) -> bytes:
    off = f.tell()
    b = f.read(n)
    if len(b) != n:
        raise _truncated(path, frame, what, off, len(b), n)
    return b


# --------------------------------------------------------------------------------------------
# Classic pcap
# --------------------------------------------------------------------------------------------

def _pcap_interface(hdr: bytes) -> tuple[str, Interface]:
    """The byte order and the interface of a pcap file header."""
    endian, res = PCAP_MAGICS[hdr[:4]]
    snaplen, linktype = struct.unpack(endian + "II", hdr[16:24])
    units = 10 ** 6 if res == 1e-6 else 10 ** 9
    return endian, Interface(linktype & 0x0FFFFFFF, snaplen, units, res)


def _pcap(path: str, f: Input, classifier: FrameClassifier, skipped: list,
          describe: bool = False, runs: bool = False) -> Iterator[tuple]:
    """(frame, classification) of a classic pcap's records, or with describe (interface,
    None) of its one interface and nothing more."""
    endian, iface = _pcap_interface(_read_exact(f, _PCAP_HDR, path, "pcap file header", 0))
    if describe:
        yield iface, None
        return
    linktype, tsres = iface.linktype, iface.resolution
    limit = max(iface.snaplen, 262144)  # lengths up to this (or MAX_BLOCK) are plausible
    classify = classifier.classifier(linktype)
    take = _take_test(classifier, linktype)
    took = take.value if take else None
    # runs of skipped records, and of records taken without asking the classifier
    scan = _scanners(classifier.run_test(linktype), "pcap", endian, take=take)
    rec_hdr = _REC_HEAD[endian]
    little = endian == "<"
    incl_at = struct.Struct(endian + "I").unpack_from
    st = _Stream(f)
    number = 0  # frames before the one at pos
    while True:
        # the bulk: whole records in the buffer, skipped ones cost a length read and the
        # classifier only (16: _REC_HDR, spelled out in the loop)
        buf, pos = st.buf, st.pos
        n = len(buf)
        first = number
        while pos + 16 <= n:
            if scan is not None:
                pos, k, taken = scan(buf, pos, n)
                if taken:
                    run = Taken(buf, taken, number, linktype, tsres, little, False)
                    if runs:
                        last = number + taken[-2] + 1
                        skipped[0] += last - first - len(run)
                        first = last
                        yield run, took
                    else:
                        for i in range(0, len(taken), 2):
                            num = number + taken[i] + 1
                            skipped[0] += num - first - 1
                            first = num
                            yield run.frame(i // 2), took
                number += k
                if pos + 16 > n:
                    break
            incl = incl_at(buf, pos + 8)[0]
            end = pos + 16 + incl
            if end > n:
                break
            cl = classify(buf, pos + 16, end)
            number += 1
            if cl is None:
                pos = end
                continue
            skipped[0] += number - first - 1
            first = number
            sec, frac, _, orig = rec_hdr(buf, pos)
            start = pos + 16
            pos = end
            yield Frame(number, sec + frac * tsres, linktype, buf[start:end], orig), cl
        skipped[0] += number - first
        # the record at pos is not wholly in the buffer: read on, or say what is wrong with it
        st.pos = pos
        off = st.base + pos
        need = _REC_HDR
        if n - pos >= _REC_HDR:
            incl = incl_at(buf, pos + 8)[0]
            if incl > limit and incl > MAX_BLOCK:
                raise _damage(path, number + 1,
                              f"record length {incl} at byte offset {off} is not plausible")
            need += incl
        have = st.avail(need)
        if have >= need:
            continue
        if not have:
            return
        if have < _REC_HDR:
            raise _damage(path, number + 1, f"truncated record header at byte offset {off}")
        raise _truncated(path, number + 1, "packet data", off + _REC_HDR, have - _REC_HDR,
                         need - _REC_HDR)


# --------------------------------------------------------------------------------------------
# pcapng
# --------------------------------------------------------------------------------------------

def _pcapng(path: str, f: Input, classifier: FrameClassifier, skipped: list,
            describe: bool = False, runs: bool = False) -> Iterator[tuple]:
    """(frame, classification) of a pcapng's packet blocks, read in large blocks; with
    describe also (interface, None) of each IDB as it is reached."""
    endian = "<"
    section = 0
    # this section's interfaces: (link type, resolution, classify, scan of its runs of EPBs)
    ifaces: list[tuple[int, float, Callable, Callable | None]] = []
    number = 0
    st = _Stream(f)
    epb_head, epb_min = _EPB_HEAD[endian], _MIN_BLOCK[_EPB]
    while True:
        # the bulk: whole EPBs in the buffer, read as pcap's loop reads its records; the
        # first block that is not one, or fails a check below, goes to the general code after
        # (which says what is wrong with it)
        buf, pos = st.buf, st.pos
        n = len(buf)
        while pos + _EPB_DATA <= n:
            btype, blen, iface, ts_hi, ts_lo, incl, orig = epb_head(buf, pos)
            end = pos + blen
            if btype != _EPB or end > n or blen < epb_min or blen % 4 or blen > MAX_BLOCK \
                    or iface >= len(ifaces) or 20 + incl > blen - 12:
                break
            number += 1
            linktype, res, classify, scan, took = ifaces[iface]
            d = pos + _EPB_DATA
            cl = classify(buf, d, d + incl)
            if cl is not None:
                yield _epb_frame(buf, d, end, number, res, linktype, incl, orig, ts_hi, ts_lo,
                                 endian), cl
            else:
                skipped[0] += 1
            pos = end
            if scan is not None:  # a run of skipped (or taken) EPBs of the same interface
                pos, k, taken = scan(buf, pos, n)
                if taken:
                    run = Taken(buf, taken, number, linktype, res, endian == "<", True)
                    if runs:
                        yield run, took
                    else:
                        for j in range(len(run)):
                            yield run.frame(j), took
                number += k
                skipped[0] += k - len(taken) // 2
        st.pos = pos
        have = st.avail(8)
        if not have:
            return
        off = st.base + st.pos
        if have < 8:
            raise _damage(path, number + 1, f"truncated block header at byte offset {off}")
        buf, pos = st.buf, st.pos
        if buf[pos:pos + 4] == PCAPNG_SHB:
            b = st.need(8, 4, path, "section header", number + 1)
            bom = st.buf[b:b + 4]
            endian = "<" if struct.unpack("<I", bom)[0] == _BYTE_ORDER_MAGIC else ">"
            if struct.unpack(endian + "I", bom)[0] != _BYTE_ORDER_MAGIC:
                raise CaptureError(f"{path}: bad pcapng byte-order magic at byte offset {off + 8}")
            epb_head = _EPB_HEAD[endian]
            blen = struct.unpack(endian + "I", st.buf[st.pos + 4:st.pos + 8])[0]
            st.need(12, _check_len(path, blen, off, number) - 12, path, "section header", number + 1)
            st.pos += blen
            section += 1
            ifaces = []
            continue
        btype, blen = struct.unpack_from(endian + "II", buf, pos)
        body = st.need(8, _check_len(path, blen, off, number) - 8, path, "pcapng block", number + 1)
        buf = st.buf
        st.pos = body - 8 + blen
        if blen < _MIN_BLOCK.get(btype, 12):
            raise _damage(path, number + 1, f"pcapng block type {btype} of {blen} bytes "
                          f"is shorter than its fixed fields at byte offset {off}")
        if btype == _EPB:
            # what the loop above refused in a whole EPB is an error; a block it found cut by
            # the buffer's end is now whole, and it reads it
            iface, incl = struct.unpack_from(endian + "IIII", buf, body)[::3]
            if iface >= len(ifaces):
                raise _damage(path, number + 1, f"interface {iface} not described (byte offset "
                              f"{off})")
            if 20 + incl > blen - 12:  # (the EPB scanner skips only blocks that pass these)
                raise _damage(path, number + 1, f"packet length {incl} overruns its block at "
                              f"byte offset {off}")
            st.pos = body - 8
            continue
        raw = buf[body:body + blen - 8]  # with the trailing length, as these blocks were read
        frame = None
        if btype == _IDB:
            desc = _interface(raw, endian, section, len(ifaces))
            take = _take_test(classifier, desc.linktype)
            ifaces.append((desc.linktype, desc.resolution, classifier.classifier(desc.linktype),
                           _scanners(classifier.run_test(desc.linktype), "epb", endian,
                                     len(ifaces), take=take),
                           take.value if take else None))
            if describe:
                yield desc, None
        elif btype == _SPB:
            number += 1
            if not ifaces:
                raise _damage(path, number, f"no interface described (byte offset {off})")
            orig = struct.unpack(endian + "I", raw[:4])[0]
            frame = Frame(number, 0.0, ifaces[0][0], raw[4:4 + orig], orig)
        elif btype == _PB:
            number += 1
            iface = struct.unpack(endian + "H", raw[:2])[0]
            ts_hi, ts_lo, incl, orig = struct.unpack(endian + "IIII", raw[4:20])
            linktype, res = ifaces[iface][:2] if iface < len(ifaces) else (1, 1e-6)
            frame = Frame(number, ((ts_hi << 32) | ts_lo) * res, linktype, raw[20:20 + incl], orig)
        # other blocks (NRB, ISB, DSB, custom) carry no frames
        if frame is not None:
            cl = classifier.classifier(frame.linktype)(frame.data, 0, len(frame.data))
            if cl is None:
                skipped[0] += 1
                continue
            yield frame, cl


def _epb_frame(buf: bytes, d: int, end: int, number: int, res: float, linktype: int,
               incl: int, orig: int, ts_hi: int, ts_lo: int, endian: str) -> Frame:
    """The frame of the EPB whose packet starts at buf[d] and whose block ends at end."""
    opts = d + ((incl + 3) & ~3)  # the options, if any, up to the trailing length
    comment = _comment(buf[opts:end - 4], endian) if opts < end - 4 else None
    return Frame(number, ((ts_hi << 32) | ts_lo) * res, linktype, buf[d:d + incl], orig, comment)


def _check_len(path: str, blen: int, off: int, number: int) -> int:
    if blen < 12 or blen % 4 or blen > MAX_BLOCK:
        raise _damage(path, number + 1, f"bad pcapng block length {blen} at byte offset {off}")
    return blen


def _interface(raw: bytes, endian: str, section: int, index: int) -> Interface:
    """The interface an IDB describes (raw: its body, from the link type to the trailing
    length); an option given twice counts the first time."""
    linktype, _, snaplen = struct.unpack(endian + "HHI", raw[:8])
    units, res, tsoffset, name = None, 1e-6, None, None
    for code, val in _options(raw[8:-4], endian):
        if code == _IF_TSRESOL and val and units is None:
            v = val[0]
            if v & 0x80:
                units, res = 2 ** (v & 0x7F), 2.0 ** -(v & 0x7F)
            else:
                units, res = 10 ** v, 10.0 ** -v
        elif code == _IF_TSOFFSET and len(val) == 8 and tsoffset is None:
            tsoffset = struct.unpack(endian + "q", val)[0]
        elif code == _IF_NAME and name is None:
            name = val.decode("utf-8", "replace")
    return Interface(linktype, snaplen, units or 10 ** 6, res, tsoffset or 0, name, section, index)


def _options(raw: bytes, endian: str) -> Iterator[tuple[int, bytes]]:
    i = 0
    while i + 4 <= len(raw):
        code, length = struct.unpack(endian + "HH", raw[i:i + 4])
        if code == 0:
            return
        yield code, raw[i + 4:i + 4 + length]
        i += 4 + ((length + 3) & ~3)


def _comment(opts: bytes, endian: str) -> str | None:
    for code, val in _options(opts, endian):
        if code == 1:
            return val.decode("utf-8", "replace")
    return None


# --------------------------------------------------------------------------------------------
# Runs of skipped frames: the classifier's RunTest compiled into loops over records and blocks
# --------------------------------------------------------------------------------------------

def _scanners(test: RunTest | None, kind: str, *args, take: TakeTest | None = None
              ) -> Callable | None:
    """For a pcap ("pcap", byte order) or a pcapng interface ("epb", byte order, interface
    ID): scan(buf, pos, n) → (pos, k, taken), passing the k records or enhanced packet blocks
    from pos on whose frames `test` skips or `take` takes, stopping at the first other one,
    at one not wholly in buf[:n] or after TAKE_MOST taken; taken: (index among the k,
    position of its record or block) of each taken one, flat. None without a test. The C
    loops (native/_scan.c) where the package was built with them and IBPATH_NATIVE_SCAN is not
    0, else the same loops in Python."""
    if test is None:
        return None
    native = _native_scan()
    makers = test._makers.get((native is not None, take))
    if makers is None:
        if native is not None:
            prog = _program(test)
            tprog = _program(take) if take is not None else b""
            tleast, tmost = (take.least, take.most) if take is not None else (0, -1)
            little = {"<": 1, ">": 0}
            pcap, epb = native.pcap, native.epb
            # the loops' fixed arguments first: scan(buf, pos, n) as the Python loops
            makers = {
                "pcap": lambda endian: functools.partial(
                    pcap, little[endian], test.least, test.most, prog, tleast, tmost, tprog,
                    TAKE_MOST),
                "epb": lambda endian, iface: functools.partial(
                    epb, little[endian], iface, test.least, test.most, MAX_BLOCK, _EPB, prog,
                    tleast, tmost, tprog, TAKE_MOST)}
        else:
            ns = {**test.namespace, "_Struct": struct.Struct,
                  "_take": take.holds if take is not None else None}
            # exec: bench/suite.py capture 1 audit (RoCEv2, IBPATH_NATIVE_SCAN=0 only), 14.1k -> 19.3k instructions a frame plain (+37 %)
            exec(compile(_SCAN_SOURCE.format(fields=test.fields, test=test.test,
                                             least=test.least, most=test.most, EPB=_EPB,
                                             MAX_BLOCK=MAX_BLOCK, TAKEN=2 * TAKE_MOST),
                         "<pcapio scan>", "exec"), ns)
            makers = {"pcap": ns["make_pcap_scan"], "epb": ns["make_epb_scan"]}
        test._makers[(native is not None, take)] = makers
    return makers[kind](*args)


def _take_test(classifier: FrameClassifier, linktype: int) -> TakeTest | None:
    """The classifier's take test of a link type, where it has a run test too."""
    if classifier.run_test(linktype) is None:
        return None
    take = getattr(classifier, "take_test", None)
    return take(linktype) if take is not None else None


# frames a loop takes at most before it returns (their list is the handover)
TAKE_MOST = 1024

# a term in the C loops' program: 8 signed 64-bit words, the sets' values after all terms
_KIND_EQUALS, _KIND_LEN_MINUS, _KIND_NOT_IN, _KIND_IN = 0, 1, 2, 3


def _program(test: RunTest) -> bytes:
    """test's terms as the program native/_scan.c runs: per term offset, size, shift, mask (-1:
    none), kind, value, then where its set's values start and how many there are."""
    words: list[int] = [len(test.terms)]
    sets: list[int] = []
    for t in test.terms:
        base = 1 + 8 * len(test.terms) + len(sets)
        if t.values is not None:
            kind, value = (_KIND_NOT_IN if t.not_in is not None else _KIND_IN), 0
            sets.extend(sorted(t.values))
        else:
            kind, value = ((_KIND_EQUALS, t.equals) if t.equals is not None
                           else (_KIND_LEN_MINUS, t.len_minus))
        words += [t.offset, t.size, t.shift, -1 if t.mask is None else t.mask, kind, value,
                  base, len(t.values or ())]
    return array.array("q", words + sets).tobytes()


# The loops check what _pcap and _pcapng check of a record or block before they classify it,
# and stop at anything else: those readers then read it (and name what is wrong with it).
# A frame the test does not skip is taken if _take holds of it (TakeTest.holds).
_SCAN_SOURCE = """
def make_pcap_scan(endian):
    # a record: seconds, fraction, captured length, original length, then the packet
    incl_at = _Struct(endian + "I").unpack_from
    def scan(b, pos, n):
        k = 0
        taken = []
        while pos + 16 <= n:
            s = pos + 16
            e = s + incl_at(b, pos + 8)[0]
            if e > n:
                break
            if {least} <= e - s <= {most}:
                {fields} = _unpack(b, s)
                if {test}:
                    pos = e
                    k += 1
                    continue
            if _take is None or not _take(b, s, e):
                break
            taken += (k, pos)
            pos = e
            k += 1
            if len(taken) >= {TAKEN}:
                break
        return pos, k, taken
    return scan

def make_epb_scan(endian, iface):
    # an EPB: block type, total length, interface, timestamp (2 words), captured length,
    # original length, then the packet
    head = _Struct(endian + "IIIIII").unpack_from
    def scan(b, pos, n):
        k = 0
        taken = []
        while pos + 28 <= n:
            bt, bl, ifc, _, _, incl = head(b, pos)
            if (bt != {EPB} or ifc != iface or bl & 3 or not 32 <= bl <= {MAX_BLOCK}
                    or pos + bl > n or 20 + incl > bl - 12):
                break
            s = pos + 28
            e = s + incl
            if {least} <= e - s <= {most}:
                {fields} = _unpack(b, s)
                if {test}:
                    pos += bl
                    k += 1
                    continue
            if _take is None or not _take(b, s, e):
                break
            taken += (k, pos)
            pos += bl
            k += 1
            if len(taken) >= {TAKEN}:
                break
        return pos, k, taken
    return scan
"""


# --------------------------------------------------------------------------------------------
# Where a capture was made, frame times, and an annotated copy
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Origin:
    """What a capture says of the machine that made it: its first section's shb_hardware,
    shb_os and shb_userappl, and the if_name, if_description, if_hardware and if_os of that
    section's interfaces (pcapng; a classic pcap says none of it, nor do captures whose writer
    left the options out)."""

    hardware: str | None = None
    os: str | None = None
    application: str | None = None
    interfaces: tuple[dict, ...] = ()


def _texts(raw: bytes, endian: str, codes: dict[int, str]) -> dict[str, str]:
    """The options of `codes` (code -> name) in an options area, as text (the first of each)."""
    out: dict[str, str] = {}
    for code, val in _options(raw, endian):
        name = codes.get(code)
        if name is not None and name not in out:
            out[name] = val.rstrip(b"\x00").decode("utf-8", "replace")
    return out


def origin(src: "str | Input") -> Origin:
    """The Origin of a capture, read from its first blocks: the section header and the
    interface blocks before the first packet. A classic pcap, or a file that is neither,
    gives an empty Origin; a pcapng damaged there raises CaptureError."""
    with opened(src) as f:
        path = f.name
        if sniff_format(f.head(4)) != "pcapng":
            return Origin()
        head = _read_exact(f, 12, path, "section header", 0)
        endian = "<" if struct.unpack("<I", head[8:12])[0] == _BYTE_ORDER_MAGIC else ">"
        blen = _check_len(path, struct.unpack(endian + "I", head[4:8])[0], 0, 0)
        body = _read_exact(f, blen - 12, path, "section header", 0)
        shb = _texts(body[12:-4], endian, {_SHB_HARDWARE: "hardware", _SHB_OS: "os",
                                           _SHB_USERAPPL: "application"})
        ifaces = []
        off = blen
        while True:
            hdr = f.read(8)
            if len(hdr) < 8:
                break
            btype, blen = struct.unpack(endian + "II", hdr)
            if btype != _IDB:  # the first packet, or the next section: all that is said
                break
            raw = _read_exact(f, _check_len(path, blen, off, 0) - 8, path, "interface block", 0)
            ifaces.append(_texts(raw[8:-4], endian, {
                _IF_NAME: "name", _IF_DESCRIPTION: "description", _IF_HARDWARE: "hardware",
                _IF_OS: "os"}))
            off += blen
        return Origin(shb.get("hardware"), shb.get("os"), shb.get("application"), tuple(ifaces))


class _Numbered(_KeepAll):
    """A FrameClassifier that takes the frames whose numbers are in `wanted`. It has no run
    test (_KeepAll's), so the readers ask it about every frame once, in file order: counting
    the calls numbers the frames without building the others."""

    def __init__(self, wanted: frozenset[int]):
        self.wanted, self.asked = wanted, 0

    def classifier(self, linktype: int) -> Callable[[bytes, int, int], object]:
        def classify(b: bytes, s: int, e: int) -> bool | None:
            self.asked += 1
            return True if self.asked in self.wanted else None
        return classify


def frame_times(src: "str | Input", numbers: "set[int] | frozenset[int]") -> dict[int, float]:
    """{frame number: Frame.time} of the given frames of a pcap or pcapng file, read up to the
    last of them (a second, cheap pass: no other frame is built). Frames past the end of the
    file or its damage are left out; so is every frame of a raw blob (it has no time)."""
    wanted = frozenset(n for n in numbers if n > 0)
    times: dict[int, float] = {}
    if not wanted:
        return times
    last = max(wanted)
    try:
        for frame, _ in classified_input(src, _Numbered(wanted)):
            if frame.number in wanted:  # the count and the reader agree, as they must
                times[frame.number] = frame.time
            if frame.number >= last:
                break
    except CaptureError:
        pass
    return times


def option_bytes(options: "Sequence[tuple[int, bytes | str]]", endian: str) -> bytes:
    """pcapng options (code, value: bytes, or text written as UTF-8), each padded to 32 bits,
    then opt_endofopt; nothing at all for no options."""
    if not options:
        return b""
    out = []
    for code, val in options:
        v = val.encode() if isinstance(val, str) else val
        out.append(struct.pack(endian + "HH", code, len(v)) + v + b"\x00" * ((-len(v)) % 4))
    return b"".join(out) + b"\x00" * 4


def epb_block(endian: str, iface: int, ticks: int, data: bytes, wirelen: int,
              options: "Sequence[tuple[int, bytes | str]]" = ()) -> bytes:
    """A whole enhanced packet block."""
    body = struct.pack(endian + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(data),
                       wirelen) + data + b"\x00" * ((-len(data)) % 4)
    body += option_bytes(options, endian)
    blen = len(body) + 12
    return struct.pack(endian + "II", _EPB, blen) + body + struct.pack(endian + "I", blen)


# the longest comment --annotate writes (an option's length is 16 bits)
MAX_COMMENT = 60000


def annotate(src: str, dst: str, comments: Mapping[int, Sequence[str]]) -> int:
    """Copy the capture src to dst as pcapng, frame n carrying comments[n] as packet comments
    (one opt_comment each) after the comments it has; a comment it has already is not added
    twice. A pcapng keeps every block as it is but the packet blocks that gain comments (an
    SPB, which has no options, becomes an EPB on interface 0); a classic pcap becomes a pcapng
    with one interface of its link type, snap length and clock, and the exact timestamps.
    dst appears whole or not at all. Returns the number of frames that gained a comment.
    Raises CaptureError for a file that is no capture or cannot be read to its end."""
    wanted = {n: [c[:MAX_COMMENT] for c in cs] for n, cs in comments.items() if cs}
    tmp = f"{dst}.part{os.getpid()}"
    try:
        with opened(src) as f:
            kind = sniff_format(f.head(4))
            if kind == "pcapng":
                with open(tmp, "wb") as out:
                    done = _annotate_pcapng(f, out, wanted)
            elif kind == "pcap":
                with PcapNgWriter(tmp) as w:
                    done = _annotate_pcap(f, w, wanted)
            else:
                raise CaptureError(f"{f.name}: not a pcap or pcapng file: a raw blob has no "
                                   "frames to annotate")
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return done


def _new(existing: list[str], added: Sequence[str]) -> list[str]:
    return [c for c in dict.fromkeys(added) if c not in existing]


def _annotate_pcap(f: Input, w: "PcapNgWriter", wanted: dict[int, list[str]]) -> int:
    path = f.name
    hdr = _read_exact(f, _PCAP_HDR, path, "pcap file header", 0)
    endian, iface = _pcap_interface(hdr)
    nano = iface.units == 10 ** 9
    w.interface(iface.linktype, iface.snaplen, 9 if nano else 6)
    rec = struct.Struct(endian + "IIII")
    number = done = 0
    while True:
        head = f.read(_REC_HDR)
        if not head:
            return done
        number += 1
        if len(head) < _REC_HDR:
            raise _damage(path, number, f"truncated record header at byte offset {f.pos - len(head)}")
        sec, frac, incl, orig = rec.unpack(head)
        data = _read_exact(f, incl, path, "packet data", number)
        added = _new([], wanted.get(number, ()))
        done += bool(added)
        w.write_ticks(0, sec * iface.units + frac, data, orig, added)


def _annotate_pcapng(f: Input, out: BinaryIO, wanted: dict[int, list[str]]) -> int:
    path = f.name
    endian, number, done = "<", 0, 0
    while True:
        off = f.pos
        hdr = f.read(8)
        if not hdr:
            return done
        if len(hdr) < 8:
            raise _damage(path, number + 1, f"truncated block header at byte offset {off}")
        if hdr[:4] == PCAPNG_SHB:
            bom = _read_exact(f, 4, path, "section header", number + 1)
            endian = "<" if struct.unpack("<I", bom)[0] == _BYTE_ORDER_MAGIC else ">"
            blen = _check_len(path, struct.unpack(endian + "I", hdr[4:])[0], off, number)
            out.write(hdr + bom + _read_exact(f, blen - 12, path, "section header", number + 1))
            continue
        btype, blen = struct.unpack(endian + "II", hdr)
        block = hdr + _read_exact(f, _check_len(path, blen, off, number) - 8, path,
                                  "pcapng block", number + 1)
        if btype not in (_EPB, _PB, _SPB):
            out.write(block)
            continue
        number += 1
        if number not in wanted:
            out.write(block)
            continue
        if btype == _SPB:  # no options, no clock: an EPB on interface 0 at time 0
            orig = struct.unpack(endian + "I", block[8:12])[0]
            data, iface, ticks, head_len, opts = block[12:12 + orig], 0, 0, None, []
        else:
            if btype == _EPB:
                iface, ts_hi, ts_lo, incl, orig = struct.unpack_from(endian + "5I", block, 8)
            else:  # the obsolete packet block: interface (16 bits) and drops count
                iface, _, ts_hi, ts_lo, incl, orig = struct.unpack_from(endian + "HH4I", block, 8)
            ticks, head_len = (ts_hi << 32) | ts_lo, 28
            data = block[head_len:head_len + incl]
            if head_len + incl > blen - 4:
                raise _damage(path, number, f"packet length {incl} overruns its block at "
                              f"byte offset {off}")
            opts = list(_options(block[head_len + ((incl + 3) & ~3):-4], endian))
        existing = [v.decode("utf-8", "replace") for c, v in opts if c == _OPT_COMMENT]
        added = _new(existing, wanted[number])
        if not added:
            out.write(block)
            continue
        done += 1
        opts += [(_OPT_COMMENT, c) for c in added]
        if btype == _PB:
            body = block[8:head_len] + data + b"\x00" * ((-len(data)) % 4) + option_bytes(opts, endian)
            blen = len(body) + 12
            out.write(struct.pack(endian + "II", _PB, blen) + body + struct.pack(endian + "I", blen))
        else:
            out.write(epb_block(endian, iface, ticks, data, orig, opts))


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

class _Writer:
    """A file written frame by frame; usable as a context manager."""

    f: BinaryIO

    def close(self) -> None:
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class PcapNgWriter(_Writer):
    """Write a pcapng. write() puts each frame on an interface of its link type (created on
    first use, nanosecond clock); interface() and write_ticks() give a frame the interface and
    the exact clock ticks, length on the wire and comments of a frame read elsewhere (the
    --annotate copy of a classic pcap). options: the section header's, as (code, value)."""

    def __init__(self, path: str, options: "Sequence[tuple[int, bytes | str]]" = ()):
        self.f = open(path, "wb")
        self.ifaces: dict[int, int] = {}
        self._count = 0  # interfaces described so far (write()'s and interface()'s)
        shb_body = struct.pack("<IHHq", _BYTE_ORDER_MAGIC, 1, 0, -1)
        self._block(0x0A0D0D0A, shb_body + option_bytes(options, "<"))

    def _block(self, btype: int, body: bytes) -> None:
        body += b"\x00" * ((-len(body)) % 4)
        blen = len(body) + 12
        self.f.write(struct.pack("<II", btype, blen) + body + struct.pack("<I", blen))

    def interface(self, linktype: int, snaplen: int = 0, tsresol: int = 9,
                  options: "Sequence[tuple[int, bytes | str]]" = ()) -> int:
        """Describe an interface (if_tsresol as pcapng codes it: 6 microseconds, 9
        nanoseconds); its ID for write_ticks()."""
        opts = [(_IF_TSRESOL, bytes([tsresol]))] + list(options)
        self._block(_IDB, struct.pack("<HHI", linktype, 0, snaplen) + option_bytes(opts, "<"))
        self._count += 1
        return self._count - 1

    def _iface(self, linktype: int) -> int:
        if linktype not in self.ifaces:
            self.ifaces[linktype] = self.interface(linktype)
        return self.ifaces[linktype]

    def write(self, data: bytes, linktype: int, ts: float = 0.0, comment: str | None = None) -> None:
        iface = self._iface(linktype)
        self.write_ticks(iface, int(round(ts * 1e9)), data, comments=[comment] if comment else ())

    def write_ticks(self, iface: int, ticks: int, data: bytes, wirelen: int | None = None,
                    comments: "Sequence[str]" = ()) -> None:
        """One frame on interface `iface`, at `ticks` of its clock, with one opt_comment
        per comment."""
        self.f.write(epb_block("<", iface, ticks, data, len(data) if wirelen is None else wirelen,
                               [(_OPT_COMMENT, c) for c in comments]))


class PcapWriter(_Writer):
    """Write a classic pcap (one link type, microsecond or nanosecond timestamps)."""

    def __init__(self, path: str, linktype: int, snaplen: int = 262144, nano: bool = False):
        self.f = open(path, "wb")
        self.nano = nano
        magic = 0xA1B23C4D if nano else 0xA1B2C3D4
        self.f.write(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))

    def write(self, data: bytes, ts: float = 0.0) -> None:
        scale = 1_000_000_000 if self.nano else 1_000_000
        t = int(round(ts * scale))
        self.f.write(struct.pack("<IIII", t // scale, t % scale, len(data), len(data)) + data)

