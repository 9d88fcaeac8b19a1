"""Draw an iterator's items in batches (a speed measure of the audit's pipeline)."""

from __future__ import annotations

from itertools import islice
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def batches(items: Iterable[T], n: int = 2048) -> Iterator[list[T]]:
    """The items, drawn from their source `n` at a time, as lists. Between the stages of the
    audit (reading and classifying frames, decoding them, replaying the records, judging)
    this runs each stage's code in a tight loop, which CPython does markedly faster than
    alternating the stages item by item (bench/README.md). An error of the source comes
    after a last list of the items read before it."""
    it = iter(items)
    while True:
        batch: list[T] = []
        try:
            # (list.extend keeps what it took before the source raised: tested)
            batch.extend(islice(it, n))
        except BaseException:
            if batch:
                yield batch
            raise
        if batch:
            yield batch
        if len(batch) < n:
            return

