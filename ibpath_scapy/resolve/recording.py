"""`ibpath resolve --record`: its own SA exchange and the path array in one pcapng, framed as
`ibpath record` frames them (record/capture.py), so decode and audit read it as a recording.

Every umad write and read becomes a spool record of the recorder's format (record/spool.py:
kind umad, the call's pid, tid and fd, rc the bytes moved) and goes through the recorder's own
converter; the path array follows as an "ibpath.blob" frame whose comment says that no
rdma_set_option took it.
"""

from __future__ import annotations

import time

from ..record.capture import ConvertResult, blob_frame, write_pcapng
from ..record.spool import KIND_UMAD, PART_CALL, PART_READ, SpoolRecord
from .umad import UmadCall


def spool_records(calls: list[UmadCall]) -> list[SpoolRecord]:
    """The spool records `ibpath record` would have written for these umad calls."""
    return [SpoolRecord(index=i, offset=0, kind=KIND_UMAD,
                        part=PART_CALL if c.write else PART_READ, flags=0, pid=c.pid,
                        tid=c.tid, fd=c.fd, aux=0, ts_ns=c.ts_ns, rc=len(c.data), err=0,
                        orig_length=len(c.data), data=c.data)
            for i, c in enumerate(calls)]


def write_recording(out: str, calls: list[UmadCall], blob: bytes | None, what: str
                    ) -> ConvertResult:
    """Write the calls and, when there is one, the blob (described by `what`) to `out`."""
    extra = []
    if blob:
        extra.append(blob_frame(blob, time.time_ns(), [
            f"ibpath resolve: {what}", "handed to no kernel: no rdma_set_option call"]))
    return write_pcapng(spool_records(calls), out, "ibpath resolve", extra)
