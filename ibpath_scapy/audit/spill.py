"""Where a replay puts the closed transactions its resolutions keep while they wait for the
resolution rules (Replay.HELD_TRANSACTIONS): a temporary file, so that memory does not grow
with the number of distinct (source, destination) pairs of an SA storm (issue 45).

A resolution's transactions go to the file as entries, each naming the one written before
it for the same resolution, so that a resolution holds one number however often it was
spilled (Resolution.spilled). An entry holds the transactions' rows (ClosedTransaction.row:
plain values, the PathRecords as the tuples of their fields), or the transactions
themselves, pickled, where a row cannot be made (a record that is not a PathRecord fact).
The entries of up to CHUNK_ENTRIES resolutions spilled together are one chunk, pickle's text
of them: pickle.dumps's (write_chunk), or the same values as the replay's C writer puts them
(native/_rows.c, RowsText; write_text), which pickle reads alike. (Rows were marshal's text
until 2026-12-05: pickle writes a storm's one-row chunk in 1.8 us against 3.0 us, reads it in
2.6 against 3.1 us, in 284 bytes against 448.)"""

from __future__ import annotations

import os
import pickle
import tempfile

ROWS, OBJECTS = b"r", b"p"  # a chunk entry's kinds: rows, or the transactions pickled
# Resolutions per chunk: one pickle call for several costs less than one each (capture 3's
# 82,000 spilled: 0.20 -> 0.13 s), and reading one resolution back reads its chunk's others
# too, at most this many
CHUNK_ENTRIES = 16
# decoded chunks kept for the next reads, in entries: resolutions read back in the order
# they were spilled find theirs decoded already, however many passes spilled each
CACHE_ENTRIES = 4096


def pickled(transactions) -> bytes:
    """An OBJECTS entry's transactions, as its chunk holds them."""
    return pickle.dumps(transactions, pickle.HIGHEST_PROTOCOL)


class NotPlain(Exception):
    """A transaction that ClosedTransaction.row cannot write as plain values."""


class Spill:
    """Chunks of rows in an anonymous temporary file (gone when closed or at exit)."""

    def __init__(self):
        self._file = tempfile.TemporaryFile(prefix="ibpath-spill-")
        self._end = 0
        self._unflushed = False
        self._cache: dict[int, list] = {}  # a chunk's offset -> its entries, oldest first
        self._cached = 0  # entries in _cache
        self.chunks = 0  # written so far

    def write_chunk(self, entries: list[tuple]) -> list[int]:
        """Append the entries of resolutions, each (previous, rows, transactions): its rows,
        or its transactions themselves where rows is None, after its entry `previous` (0:
        none); at most CHUNK_ENTRIES of them, as one chunk. Their references, in order."""
        chunk = [(ROWS, previous, rows) if rows is not None else
                 (OBJECTS, previous, pickled(transactions))
                 for previous, rows, transactions in entries]
        return self.write_text(pickle.dumps(chunk, pickle.HIGHEST_PROTOCOL), len(chunk))

    def write_text(self, data: bytes, entries: int) -> list[int]:
        """Append a chunk of `entries` entries, as the pickle text that write_chunk makes of
        them or one that unpickles the same (native/_rows.c, RowsText); their references."""
        if not 0 < entries <= CHUNK_ENTRIES:
            raise ValueError(f"a chunk holds 1 to {CHUNK_ENTRIES} entries, not {entries}")
        self._file.write(data)
        self._unflushed = True
        span = (self._end << 32 | len(data)) * CHUNK_ENTRIES
        self._end += len(data)
        self.chunks += 1
        return [span + k + 1 for k in range(entries)]  # never 0

    def read(self, ref: int) -> list[tuple[bytes, list]]:
        """The entries ending with `ref`, oldest first: (kind, rows or transactions). The
        transactions are unpickled anew at each read; rows are tuples, shared."""
        out = []
        while ref:
            span, index = divmod(ref - 1, CHUNK_ENTRIES)
            kind, ref, items = self._chunk(span >> 32, span & 0xFFFFFFFF)[index]
            out.append((kind, items if kind == ROWS else pickle.loads(items)))
        out.reverse()
        return out

    def _chunk(self, offset: int, length: int) -> list:
        """The entries of the chunk at offset, decoded (kept for the next reads)."""
        entries = self._cache.get(offset)
        if entries is None:
            if self._unflushed:
                self._file.flush()
                self._unflushed = False
            entries = self._cache[offset] = pickle.loads(
                os.pread(self._file.fileno(), length, offset))
            self._cached += len(entries)
            while self._cached > CACHE_ENTRIES and len(self._cache) > 1:
                self._cached -= len(self._cache.pop(next(iter(self._cache))))
        return entries

    def close(self) -> None:
        self._file.close()
        self._cache.clear()
        self._cached = 0

    @property
    def size(self) -> int:
        return self._end


__all__ = ["CHUNK_ENTRIES", "OBJECTS", "ROWS", "NotPlain", "Spill", "pickled"]
