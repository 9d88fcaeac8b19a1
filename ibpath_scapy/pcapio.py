"""Streaming pcap / pcapng reading and writing, with errors that name the file and offset.

Own code rather than scapy's readers: a truncated or corrupt file must give a precise error
(frame number, byte offset) after yielding every good frame before it, and the audit's fast
path needs raw bytes without building any Scapy object.
"""

from __future__ import annotations

import os
import stat
import struct
import sys
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterator

PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}
PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"
_BYTE_ORDER_MAGIC = 0x1A2B3C4D

# pcapng block types
_IDB, _PB, _SPB, _EPB = 0x00000001, 0x00000002, 0x00000003, 0x00000006
EPB_TYPE = _EPB
# Shortest block of each type: 12 bytes of type, length and trailing length around its fixed
# fields (an IDB's link type, reserved, snaplen; a packet block's interface and lengths).
_MIN_BLOCK = {_IDB: 20, _PB: 32, _SPB: 16, _EPB: 32}
MAX_BLOCK = 256 * 1024 * 1024  # refuse absurd lengths instead of allocating them
READ_BLOCK = 4 * 1024 * 1024  # captures are read in blocks of this size (pcapng here, pcap in fast.reader)

# Not a pcap link type: the link type of the single frame read_input() makes of a raw blob file
# (the exact optval bytes of rdma_set_option). Negative so that it can never collide.
RAW_BLOB_LINKTYPE = -1
MAX_RAW_BLOB = 16 * 1024 * 1024


class CaptureError(Exception):
    """A capture file cannot be read on; the message names file, frame and byte offset."""


@dataclass(slots=True)
class Frame:
    number: int  # 1-based, as Wireshark numbers frames
    time: float
    linktype: int
    data: bytes
    wirelen: int
    comment: str | None = None


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


def read_frames(src: "str | Input") -> Iterator[Frame]:
    """Yield every frame of a pcap or pcapng file (or stream), in order, one at a time."""
    with opened(src) as f:
        path = f.name
        head = f.head(4)
        kind = sniff_format(head)
        if kind == "pcap":
            yield from _read_pcap(path, f)
        elif kind == "pcapng":
            yield from _read_pcapng(path, f)
        else:
            raise CaptureError(f"{path}: not a pcap or pcapng file (starts with {head.hex() or 'nothing'})")


def read_input(src: "str | Input", blob_plausible: Callable[[bytes], bool] | None = None,
               as_blob: bool = False) -> Iterator[Frame]:
    """Frames of a pcap or pcapng file; or, when the file is neither and blob_plausible
    accepts its content (or as_blob says it is one, whatever its content), one frame (number
    1, link type RAW_BLOB_LINKTYPE) holding the whole file. Captures and blobs are told apart
    by content, never by name."""
    with opened(src) as f:
        path = f.name
        is_capture = not as_blob and sniff_format(f.head(4)) != "other"
        if is_capture or (blob_plausible is None and not as_blob):
            yield from read_frames(f)
            return
        yield raw_blob_frame(path, f.read(MAX_RAW_BLOB + 1),
                             None if as_blob else blob_plausible)


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


def _read_exact(f: Input, n: int, path: str, what: str, frame: int) -> bytes:
    off = f.tell()
    b = f.read(n)
    if len(b) != n:
        raise CaptureError(
            f"{path}: frame {frame}: truncated {what} at byte offset {off} "
            f"({len(b)} of {n} bytes)")
    return b


def _read_pcap(path: str, f: Input) -> Iterator[Frame]:
    hdr = _read_exact(f, 24, path, "pcap file header", 0)
    endian, tsres = PCAP_MAGICS[hdr[:4]]
    linktype = struct.unpack(endian + "I", hdr[20:24])[0] & 0x0FFFFFFF
    snaplen = struct.unpack(endian + "I", hdr[16:20])[0]
    number = 0
    while True:
        off = f.tell()
        rec = f.read(16)
        if not rec:
            return
        number += 1
        if len(rec) < 16:
            raise CaptureError(f"{path}: frame {number}: truncated record header at byte offset {off}")
        sec, frac, incl, orig = struct.unpack(endian + "IIII", rec)
        if incl > max(snaplen, 262144) and incl > MAX_BLOCK:
            raise CaptureError(f"{path}: frame {number}: record length {incl} at byte offset {off} is not plausible")
        data = _read_exact(f, incl, path, "packet data", number)
        yield Frame(number, sec + frac * tsres, linktype, data, orig)


def _read_pcapng(path: str, f: Input) -> Iterator[Frame]:
    for frame, _ in pcapng_classified(path, f):
        yield frame


class _Stream:
    """A file read in large blocks: buf[pos:] are the bytes from file offset base + pos on."""

    __slots__ = ("f", "buf", "pos", "base")

    def __init__(self, f: Input):
        self.f, self.buf, self.pos, self.base = f, b"", 0, f.tell()

    def avail(self, n: int) -> int:
        """Bytes at pos, reading on until there are n or the file ends."""
        have = len(self.buf) - self.pos
        while have < n:
            more = self.f.read_block(max(READ_BLOCK, n - have))
            if not more:
                break
            self.buf = self.buf[self.pos:] + more
            self.base += self.pos
            self.pos = 0
            have = len(self.buf)
        return have

    def need(self, at: int, n: int, path: str, what: str, frame: int) -> int:
        """The buffer offset of n bytes at pos + at, or the error pcapio gives for a file that
        ends before them (as _read_exact words it)."""
        have = self.avail(at + n) - at
        if have < n:
            raise CaptureError(f"{path}: frame {frame}: truncated {what} at byte offset "
                               f"{self.base + self.pos + at} ({max(have, 0)} of {n} bytes)")
        return self.pos + at


def pcapng_classified(path: str, f: "Input",
                      classifier_for: Callable[[int], Callable] | None = None,
                      skipped: list | None = None,
                      scanner_for: Callable[[int, str, int], Callable | None] | None = None,
                      ) -> Iterator[tuple[Frame, object]]:
    """(frame, classification) for the frames of a pcapng file read in large blocks.

    Without classifier_for, every frame with classification None. With it, each packet's
    bytes are first classified in the read buffer by classifier_for(link type)(buf, start,
    end); a frame classified None is counted in skipped[0] and never built, the others come
    with their classification. scanner_for(link type, byte order, interface), when given,
    makes for an interface a scan(buf, pos, n) → (pos, k) that skips, after a skipped packet,
    the run of k packet blocks that follows it and would be skipped too."""
    endian = "<"
    interfaces: list[tuple[int, float, Callable | None]] = []
    number = 0
    st = _Stream(f)
    while True:
        have = st.avail(8)
        if not have:
            return
        off = st.base + st.pos
        if have < 8:
            raise CaptureError(f"{path}: frame {number + 1}: truncated block header at byte offset {off}")
        buf, pos = st.buf, st.pos
        if buf[pos:pos + 4] == PCAPNG_SHB:
            b = st.need(8, 4, path, "section header", number + 1)
            bom = st.buf[b:b + 4]
            endian = "<" if struct.unpack("<I", bom)[0] == _BYTE_ORDER_MAGIC else ">"
            if struct.unpack(endian + "I", bom)[0] != _BYTE_ORDER_MAGIC:
                raise CaptureError(f"{path}: bad pcapng byte-order magic at byte offset {off + 8}")
            blen = struct.unpack(endian + "I", st.buf[st.pos + 4:st.pos + 8])[0]
            st.need(12, _check_len(path, blen, off, number) - 12, path, "section header", number + 1)
            st.pos += blen
            interfaces = []
            continue
        btype, blen = struct.unpack_from(endian + "II", buf, pos)
        body = st.need(8, _check_len(path, blen, off, number) - 8, path, "pcapng block", number + 1)
        buf = st.buf
        st.pos = body - 8 + blen
        if blen < _MIN_BLOCK.get(btype, 12):
            raise CaptureError(f"{path}: frame {number + 1}: pcapng block type {btype} of {blen} bytes "
                               f"is shorter than its fixed fields at byte offset {off}")
        if btype == _EPB:
            number += 1
            iface, ts_hi, ts_lo, incl, orig = struct.unpack_from(endian + "IIIII", buf, body)
            if iface >= len(interfaces):
                raise CaptureError(f"{path}: frame {number}: interface {iface} not described (byte offset {off})")
            if 20 + incl > blen - 12:
                raise CaptureError(f"{path}: frame {number}: packet length {incl} overruns its block at byte offset {off}")
            linktype, res, classify, scan = interfaces[iface]
            d = body + 20
            cl = None
            if classify is not None:
                cl = classify(buf, d, d + incl)
                if cl is None:
                    skipped[0] += 1
                    if scan is not None:
                        st.pos, k = scan(buf, st.pos, len(buf))
                        number += k
                        skipped[0] += k
                    continue
            comment = _comment(buf[d + ((incl + 3) & ~3):body + blen - 12], endian)
            yield (Frame(number, ((ts_hi << 32) | ts_lo) * res, linktype, buf[d:d + incl], orig,
                         comment), cl)
            continue
        raw = buf[body:body + blen - 8]  # with the trailing length, as these blocks were read
        frame = None
        if btype == _IDB:
            linktype = struct.unpack(endian + "H", raw[:2])[0]
            interfaces.append((linktype, _tsresol(raw[8:-4], endian),
                               classifier_for(linktype) if classifier_for else None,
                               scanner_for(linktype, endian, len(interfaces))
                               if scanner_for else None))
        elif btype == _SPB:
            number += 1
            if not interfaces:
                raise CaptureError(f"{path}: frame {number}: no interface described (byte offset {off})")
            orig = struct.unpack(endian + "I", raw[:4])[0]
            frame = Frame(number, 0.0, interfaces[0][0], raw[4:4 + orig], orig)
        elif btype == _PB:
            number += 1
            iface = struct.unpack(endian + "H", raw[:2])[0]
            ts_hi, ts_lo, incl, orig = struct.unpack(endian + "IIII", raw[4:20])
            linktype, res = interfaces[iface][:2] if iface < len(interfaces) else (1, 1e-6)
            frame = Frame(number, ((ts_hi << 32) | ts_lo) * res, linktype, raw[20:20 + incl], orig)
        # other blocks (NRB, ISB, DSB, custom) carry no frames
        if frame is not None:
            cl = None
            if classifier_for is not None:
                cl = classifier_for(frame.linktype)(frame.data, 0, len(frame.data))
                if cl is None:
                    skipped[0] += 1
                    continue
            yield frame, cl


def _check_len(path: str, blen: int, off: int, number: int) -> int:
    if blen < 12 or blen % 4 or blen > MAX_BLOCK:
        raise CaptureError(f"{path}: frame {number + 1}: bad pcapng block length {blen} at byte offset {off}")
    return blen


def _options(raw: bytes, endian: str) -> Iterator[tuple[int, bytes]]:
    i = 0
    while i + 4 <= len(raw):
        code, length = struct.unpack(endian + "HH", raw[i:i + 4])
        if code == 0:
            return
        yield code, raw[i + 4:i + 4 + length]
        i += 4 + ((length + 3) & ~3)


def _tsresol(opts: bytes, endian: str) -> float:
    for code, val in _options(opts, endian):
        if code == 9 and val:
            v = val[0]
            return 2.0 ** -(v & 0x7F) if v & 0x80 else 10.0 ** -v
    return 1e-6


def _comment(opts: bytes, endian: str) -> str | None:
    for code, val in _options(opts, endian):
        if code == 1:
            return val.decode("utf-8", "replace")
    return None


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
    """Write a pcapng with one interface per link type (created on first use)."""

    def __init__(self, path: str):
        self.f = open(path, "wb")
        self.ifaces: dict[int, int] = {}
        shb_body = struct.pack("<IHHq", _BYTE_ORDER_MAGIC, 1, 0, -1)
        self._block(0x0A0D0D0A, shb_body)

    def _block(self, btype: int, body: bytes) -> None:
        body += b"\x00" * ((-len(body)) % 4)
        blen = len(body) + 12
        self.f.write(struct.pack("<II", btype, blen) + body + struct.pack("<I", blen))

    def _iface(self, linktype: int) -> int:
        if linktype not in self.ifaces:
            tsresol = struct.pack("<HHB3x", 9, 1, 9)  # nanoseconds
            self._block(_IDB, struct.pack("<HHI", linktype, 0, 0) + tsresol + b"\x00" * 4)
            self.ifaces[linktype] = len(self.ifaces)
        return self.ifaces[linktype]

    def write(self, data: bytes, linktype: int, ts: float = 0.0, comment: str | None = None) -> None:
        iface = self._iface(linktype)
        t = int(round(ts * 1e9))
        body = struct.pack("<IIIII", iface, t >> 32, t & 0xFFFFFFFF, len(data), len(data)) + data
        body += b"\x00" * ((-len(body)) % 4)
        if comment:
            c = comment.encode()
            body += struct.pack("<HH", 1, len(c)) + c + b"\x00" * ((-len(c)) % 4) + b"\x00" * 4
        self._block(_EPB, body)



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

