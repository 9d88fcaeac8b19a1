"""The audit's fast path: a raw-byte pre-filter and a decoder compiled from the layers.

    decode_file_fast(path, decoder)   like decode.decode_file, with the same records

The Scapy layers remain the single definition of every format: the pre-filter takes its
offsets and dispatch from the layers' fields and bind_layers() tables (fast.prefilter), the
decoder its extractors from their fields_desc through model.layout (fast.layout), and any
frame either does not recognise goes through decode.Decoder. IBPATH_FASTPATH=0 in the
environment turns the fast path off (everything through Scapy), for comparison and as a
fallback.
"""

from __future__ import annotations

import os
from typing import Iterator

from ..scapy import blobsniff
from ...capture.batch import batched
from ...facts import public
from .decoder import FastDecoder
from .prefilter import FULL, Prefilter
from .reader import classified_frames

_PREFILTER: Prefilter | None = None


def enabled() -> bool:
    """False when IBPATH_FASTPATH=0 (or "no"/"off"/"false") forces the Scapy path."""
    return os.environ.get("IBPATH_FASTPATH", "1").strip().lower() not in ("0", "no", "off", "false")


def prefilter() -> Prefilter:
    """The shared pre-filter (built on first use: it compiles readers from the layers), built
    again when a layer module imported since has added bindings (bind_layers), so that it
    always follows the dispatch the Scapy path would take."""
    global _PREFILTER
    if _PREFILTER is None or _PREFILTER.stale():
        _PREFILTER = Prefilter()
    return _PREFILTER


def decode_file_fast(path, decoder: FastDecoder | None = None,
                     as_blob: bool = False, render: bool = False) -> Iterator[dict]:
    """Every record decode.decode_file(path) yields, in the same order, built by the fast path
    where it can. decoder.stats counts every frame, the skipped ones included; raises
    pcapio.CaptureError on a bad file after yielding everything before the damage. path: a
    path or a pcapio.Input (a stream too); as_blob: read it as a raw blob whatever it holds;
    render=True: problems as sentences (facts.public), as `ibpath decode` prints them."""
    records = _fast_records(path, decoder, as_blob)
    return map(public, records) if render else records


def _fast_records(path, decoder: FastDecoder | None, as_blob: bool) -> Iterator[dict]:
    decoder = decoder if decoder is not None else FastDecoder()
    skipped = [0]
    stats = decoder.stats
    try:
        # classify a batch of frames, then decode it (ibpath_scapy.capture.batch)
        # a live stream is decoded frame by frame: no frame waits for the next ones
        n = 1 if getattr(path, "stream", False) else 2048
        for frame, cl in batched(classified_frames(path, prefilter(), blobsniff.plausible,
                                                   skipped, as_blob=as_blob), n):
            if skipped[0]:
                stats.frames += skipped[0]
                decoder.skipped += skipped[0]
                skipped[0] = 0
            rec = None if cl is FULL else decoder.decode_at(frame, cl)
            if rec is None:
                yield from decoder.feed(frame)
            else:
                yield rec
    finally:
        stats.frames += skipped[0]
        decoder.skipped += skipped[0]
        skipped[0] = 0
    yield from decoder.finish()


__all__ = ["FastDecoder", "decode_file_fast", "enabled", "prefilter"]
