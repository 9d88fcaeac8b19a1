"""Where a replay puts the closed transactions its resolutions keep while they wait for the
resolution rules (Replay.HELD_TRANSACTIONS): a temporary file, so that memory does not grow
with the number of distinct (source, destination) pairs of an SA storm (issue 45).

A resolution's transactions go to the file as chunks, each chunk naming the one written
before it for the same resolution, so that a resolution holds one number however often it
was spilled (Resolution.spilled). A chunk is pickle's text of the transactions' rows
(ClosedTransaction.row: plain values, the PathRecords as the tuples of their fields), or of
the transactions themselves where a row cannot be made (a record that is not a PathRecord
fact). (Rows were marshal's text until 2026-12-05: pickle writes a storm's one-row chunk in
1.8 us against 3.0 us, reads it in 2.6 against 3.1 us, in 284 bytes against 448.)"""

from __future__ import annotations

import os
import pickle
import tempfile

ROWS, OBJECTS = b"r", b"p"  # a chunk's kinds: rows, or the transactions as they are


class NotPlain(Exception):
    """A transaction that ClosedTransaction.row cannot write as plain values."""


class Spill:
    """Chunks of rows in an anonymous temporary file (gone when closed or at exit)."""

    def __init__(self):
        self._file = tempfile.TemporaryFile(prefix="ibpath-spill-")
        self._end = 0
        self._unflushed = False
        self.chunks = 0  # written so far

    def write(self, previous: int, rows: list, transactions: list) -> int:
        """Append a chunk (rows, or the transactions themselves when rows is None) after
        the chunk `previous` of the same resolution (0: none); its reference."""
        data = (ROWS if rows is not None else OBJECTS) + pickle.dumps(
            (previous, rows if rows is not None else transactions), pickle.HIGHEST_PROTOCOL)
        self._file.write(data)
        self._unflushed = True
        ref = (self._end << 32 | len(data)) + 1  # never 0
        self._end += len(data)
        self.chunks += 1
        return ref

    def read(self, ref: int) -> list[tuple[bytes, list]]:
        """The chunks ending with `ref`, oldest first: (kind, rows or transactions)."""
        if self._unflushed:
            self._file.flush()
            self._unflushed = False
        fd = self._file.fileno()
        out = []
        while ref:
            ref -= 1
            data = os.pread(fd, ref & 0xFFFFFFFF, ref >> 32)
            kind = data[:1]
            ref, items = pickle.loads(data[1:])
            out.append((kind, items))
        out.reverse()
        return out

    def close(self) -> None:
        self._file.close()

    @property
    def size(self) -> int:
        return self._end


__all__ = ["OBJECTS", "ROWS", "NotPlain", "Spill"]
