"""The fast path's capture reading: pcapio's one reader (classic pcap and pcapng in blocks of
pcapio.READ_BLOCK bytes, raw blob files as one frame), with the pre-filter as its
classifier, so that a skipped frame costs a header unpack and a few byte reads and never a
copy, and runs of them are skipped in a loop compiled from the pre-filter's first test.

Errors are pcapio's (file, frame, byte offset), raised after every frame before the damage
has been handed over.
"""

from __future__ import annotations

from typing import Iterator

from ...capture.pcapio import Frame, Taken, classified_input
from .prefilter import Prefilter


def classified_frames(src, prefilter: Prefilter, blob_plausible=None,
                      skipped: list | None = None, as_blob: bool = False,
                      runs: bool = False) -> Iterator[tuple[Frame | Taken, object]]:
    """(frame, classification) of every frame the pre-filter does not skip; `skipped[0]`
    counts the others as they pass. src: a path or a pcapio.Input (a stream too); runs: the
    frames the reader's loops take come a run at a time (pcapio.Taken)."""
    return classified_input(src, prefilter, skipped, blob_plausible, as_blob, runs)
