"""Where a replay puts the closed transactions its resolutions keep while they wait for the
resolution rules (Replay.HELD_TRANSACTIONS): a temporary file, so that memory does not grow
with the number of distinct (source, destination) pairs of an SA storm (issue 45).

A resolution's transactions go to the file as chunks, each chunk naming the one written
before it for the same resolution, so that a resolution holds one number however often it
was spilled (Resolution.spilled). A chunk is marshal's text of the transactions' rows
(ClosedTransaction.row: plain values, the PathRecords as the tuples of their fields), or
pickle's where a row cannot be made (a record that is not a PathRecord fact)."""

from __future__ import annotations

import marshal
import os
import pickle
import tempfile

_MARSHAL, _PICKLE = b"m", b"p"


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
        if rows is not None:
            data = _MARSHAL + marshal.dumps((previous, rows))
        else:
            data = _PICKLE + pickle.dumps((previous, transactions), pickle.HIGHEST_PROTOCOL)
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
            ref, items = (marshal.loads(data[1:]) if kind == _MARSHAL
                          else pickle.loads(data[1:]))
            out.append((kind, items))
        out.reverse()
        return out

    def close(self) -> None:
        self._file.close()

    @property
    def size(self) -> int:
        return self._end


__all__ = ["NotPlain", "Spill"]
