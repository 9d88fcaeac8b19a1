"""Draw an iterator's items in batches (a speed measure of the audit's pipeline)."""

from __future__ import annotations

from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")


def batched(items: Iterable[T], n: int = 2048) -> Iterator[T]:
    """The items, drawn from their source `n` at a time. Between the stages of the audit
    (reading and classifying frames, decoding them, replaying the records) this runs each
    stage's code in a tight loop, which CPython does markedly faster than alternating the
    stages item by item (bench/README.md: ~25 % on capture 2). An error of the source comes
    after the items read before it."""
    it = iter(items)
    while True:
        batch: list[T] = []
        try:
            for item in it:
                batch.append(item)
                if len(batch) == n:
                    break
        except BaseException:
            yield from batch
            raise
        yield from batch
        if len(batch) < n:
            return
