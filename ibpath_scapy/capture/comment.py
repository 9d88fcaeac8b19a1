"""The packet comment `ibpath record` writes on each frame of a system call, and its reader.

One definition for both sides: capture.py writes these lines, the decoders read them back
into the record's `call` (facts.process.Call), so that the audit knows which process, thread
and descriptor made the call and what the kernel answered:

    ucma write SET_OPTION pid 393 tid 393 fd 3      where: source, call, pid, tid, fd
    rc=-1 errno=EINVAL                              the call's return value (and errno)
    response: 280 bytes written back by the kernel  the response buffer (ucma)
    truncated: ... / unreadable: ...                a cap the recorder hit

Lines of other forms (a blob's "rdma_set_option=", a note) are left to their own readers.
"""

from __future__ import annotations

import errno as errno_mod
import re

from scapy.packet import Raw

from ..layers.ib import (
    EXP_PDU_TAG_COL_PROT_TEXT,
    EXP_PDU_TAG_DISSECTOR_NAME,
    EXP_PDU_TAG_END,
    ExportedPDU,
    ExportedPDUTag,
)

_WHERE = re.compile(r"^(?P<source>\S+) (?P<call>.+?) pid (?P<pid>\d+) tid (?P<tid>\d+) "
                    r"fd (?P<fd>-?\d+)(?: optlen \d+)?$")
_RESULT = re.compile(r"^rc=(?P<rc>-?\d+)(?: errno=(?P<errno>\S+))?$")
_RESPONSE = re.compile(r"^response: (?P<n>\d+) bytes written back by the kernel$")
CAP_PREFIXES = ("truncated:", "unreadable:")
# A note of the recorder's own (a cap reached, a call that failed with nothing to show) is an
# exported PDU for Wireshark's "data" dissector with this protocol column text; its payload is
# the note's text.
NOTE_DISSECTOR = "data"
NOTE_COLUMN = "ibpath note"


def note_pdu(text: str) -> bytes:
    """A note as an exported PDU: its text for Wireshark's "data" dissector, "ibpath note" in
    the protocol column (exported_pdu_tlvs.h EXP_PDU_TAG_COL_PROT_TEXT; the packet comment
    holds the text: Wireshark 4.0 leaves the info column of "data" empty whatever its tag)."""
    tags = [(EXP_PDU_TAG_DISSECTOR_NAME, NOTE_DISSECTOR), (EXP_PDU_TAG_COL_PROT_TEXT, NOTE_COLUMN)]
    return bytes(ExportedPDU(tags=[ExportedPDUTag(tag=t, value=v.encode()) for t, v in tags]
                             + [ExportedPDUTag(tag=EXP_PDU_TAG_END)]) / Raw(text.encode()))


def errno_name(err: int) -> str:
    """An errno by its symbolic name (EINVAL), its number when it has none."""
    return errno_mod.errorcode.get(err, str(err))


def where_line(source: str, call: str, pid: int, tid: int, fd: int) -> str:
    return f"{source} {call} pid {pid} tid {tid} fd {fd}"


def result_line(rc: int, err: int) -> str:
    return f"rc={rc}" + (f" errno={errno_name(err)}" if rc < 0 else "")


def response_line(n: int) -> str:
    return f"response: {n} bytes written back by the kernel"


def parse_call_comment(comment: str | None) -> dict | None:
    """The call a frame's comment describes: source, call, pid, tid, fd, and when written rc,
    errno (a name), response_bytes and the caps hit (their lines); None without a where line."""
    out: dict | None = None
    caps: list[str] = []
    for line in (comment or "").splitlines():
        line = line.strip()
        m = _WHERE.match(line)
        if m and out is None:
            out = {"source": m["source"], "call": m["call"], "pid": int(m["pid"]),
                   "tid": int(m["tid"]), "fd": int(m["fd"]), "rc": None, "errno": None,
                   "response_bytes": None}
            continue
        if out is None:
            continue
        m = _RESULT.match(line)
        if m:
            out["rc"], out["errno"] = int(m["rc"]), m["errno"]
        elif (m := _RESPONSE.match(line)):
            out["response_bytes"] = int(m["n"])
        elif line.startswith(CAP_PREFIXES):
            caps.append(line)
    if out is not None:
        out["caps"] = caps or None
    return out
