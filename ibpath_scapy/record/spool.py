"""The spool ibpathrec.c writes: the one definition of its record header and constants.

The shim is compiled with these values as -D options (``compile_defines``), and its
``struct ipr_hdr`` is checked against ``HEADER.size`` at compile time, so C and Python
read the same layout. A record is the header, then ``length`` bytes:

    magic[4] "IPR1", kind u8, part u8, flags u16, pid u32, tid u32, fd i32, aux u32,
    ts_ns i64 (CLOCK_REALTIME), rc i64, err i32, length u32, orig_length u32

in the recording machine's byte order (little-endian: x86_64). ``aux`` is the ucma command
number for ucma records and the destination nl_pid of a netlink send (0: the kernel).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"IPR1"
HEADER = struct.Struct("<4sBBHIIiIqqiII")

# Source kinds (one pcapng interface each) and the recorder's own notes.
KIND_UCMA = 1
KIND_UMAD = 2
KIND_ACM = 3
KIND_NETLINK = 4
KIND_NOTE = 5
KIND_NAMES = {KIND_UCMA: "ucma", KIND_UMAD: "umad", KIND_ACM: "acm", KIND_NETLINK: "netlink",
              KIND_NOTE: "note"}

# Parts: what the bytes are.
PART_CALL = 0  # what the program wrote or sent (a ucma command, a MAD, a message)
PART_READ = 1  # what it read or received
PART_RESPONSE = 2  # what the kernel wrote into a ucma command's response buffer
PART_OPTVAL = 3  # SET_OPTION's optval[optlen], copied from the caller's memory
PART_NAMES = {PART_CALL: "call", PART_READ: "read", PART_RESPONSE: "response",
              PART_OPTVAL: "optval"}

MAX_RECORD_LIMIT = 1 << 20  # the largest per-part cap the shim accepts (its buffer sizes)
DEFAULT_MAX_RECORD = 65536
DEFAULT_MAX_TOTAL = 256 << 20

# Records a recorder failure lost (the spool's disk full, say), counted per process in a
# file of LOST_SLOTS slots the shim maps ($IBPATHREC_LOST): pid u32, errno i32, records u64.
LOST_SLOTS = 256
LOST_SLOT = struct.Struct("<IiQ")

FLAG_TRUNCATED = 0x0001  # the per-record cap cut the bytes (orig_length keeps the size)
FLAG_UNREADABLE = 0x0002  # the caller's memory could not be read (a bad pointer)


def compile_defines() -> list[str]:
    """The -D options that give ibpathrec.c this module's format."""
    defs = {"IPR_MAGIC": '"' + MAGIC.decode() + '"', "IPR_HDR_SIZE": HEADER.size,
            "IPR_FLAG_TRUNCATED": FLAG_TRUNCATED, "IPR_FLAG_UNREADABLE": FLAG_UNREADABLE,
            "IPR_BUF_MAX": MAX_RECORD_LIMIT, "IPR_DEFAULT_MAX_RECORD": DEFAULT_MAX_RECORD,
            "IPR_DEFAULT_MAX_TOTAL": f"{DEFAULT_MAX_TOTAL}LL", "IPR_LOST_SLOTS": LOST_SLOTS}
    defs.update({f"IPR_KIND_{name.upper()}": kind for kind, name in KIND_NAMES.items()})
    defs.update({f"IPR_PART_{name.upper()}": part for part, name in PART_NAMES.items()})
    return [f"{k}={v}" for k, v in sorted(defs.items())]


class SpoolError(ValueError):
    """A spool that cannot be read: names the file, the record and the reason."""


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """One record of the spool."""

    index: int  # 0-based position in the spool
    offset: int  # byte offset of its header
    kind: int
    part: int
    flags: int
    pid: int
    tid: int
    fd: int
    aux: int
    ts_ns: int
    rc: int
    err: int
    orig_length: int
    data: bytes

    @property
    def truncated(self) -> bool:
        return bool(self.flags & FLAG_TRUNCATED)

    @property
    def unreadable(self) -> bool:
        return bool(self.flags & FLAG_UNREADABLE)


def parse_spool(data: bytes, name: str = "<spool>") -> list[SpoolRecord]:
    """Every record of a spool, in the order they were appended."""
    out: list[SpoolRecord] = []
    off = 0
    while off < len(data):
        where = f"{name}: record {len(out)} at byte {off}"
        if len(data) - off < HEADER.size:
            raise SpoolError(f"{where}: truncated header ({len(data) - off} of "
                             f"{HEADER.size} bytes)")
        (magic, kind, part, flags, pid, tid, fd, aux, ts_ns, rc, err, length,
         orig_length) = HEADER.unpack_from(data, off)
        if magic != MAGIC:
            raise SpoolError(f"{where}: bad magic {magic!r} (expected {MAGIC!r})")
        if kind not in KIND_NAMES:
            raise SpoolError(f"{where}: unknown source kind {kind}")
        if part not in PART_NAMES:
            raise SpoolError(f"{where}: unknown part {part}")
        if length > orig_length and not flags & FLAG_TRUNCATED:
            raise SpoolError(f"{where}: {length} bytes recorded of a {orig_length}-byte call")
        start = off + HEADER.size
        if start + length > len(data):
            raise SpoolError(f"{where}: truncated body ({len(data) - start} of {length} "
                             "bytes)")
        out.append(SpoolRecord(len(out), off, kind, part, flags, pid, tid, fd, aux, ts_ns,
                               rc, err, orig_length, bytes(data[start:start + length])))
        off = start + length
    return out


def read_spool(path: str | Path) -> list[SpoolRecord]:
    """parse_spool of a file."""
    return parse_spool(Path(path).read_bytes(), str(path))


def lost_records(data: bytes) -> list[tuple[int, int, int]]:
    """(pid, errno, records) of every process that lost records, from the $IBPATHREC_LOST
    file's bytes."""
    out = []
    for i in range(min(len(data) // LOST_SLOT.size, LOST_SLOTS)):
        pid, err, count = LOST_SLOT.unpack_from(data, i * LOST_SLOT.size)
        if pid and count:
            out.append((pid, err, count))
    return out
