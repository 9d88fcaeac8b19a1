"""The audit's fast path: a raw-byte pre-filter and a decoder compiled from the layers.

    decode_file_fast(path, decoder)   like decode.decode_file, with the same records
    decode_batches_fast(path, decoder)   the same records, a list per batch of frames

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
from ...capture.pcapio import Taken
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


def decode_batches_fast(path, decoder: FastDecoder | None = None,
                        as_blob: bool = False) -> Iterator[list]:
    """decode_file_fast's records (render=False) in lists of 2,048 or more (a run of
    taken frames, up to pcapio.TAKE_MOST, is not cut), the last one shorter (a live stream's: one per frame, so that
    no frame waits for the next): what the audit replays a list at a time
    (engine.audit_records), without handing each record through the generators between.
    Raises as decode_file_fast does, after a last list of the records before the damage."""
    decoder = decoder if decoder is not None else FastDecoder()
    skipped = [0]
    stats = decoder.stats
    decode_at, decode_taken, feed = decoder.decode_at, decoder.decode_taken, decoder.feed
    try:
        # a file's runs of frames the reader's loop took come whole (pcapio.Taken) and are
        # decoded at once, no more than one held at a time (each holds a read buffer); a
        # stream's frames come one by one and each is handed over, so that none waits for
        # the next
        stream = getattr(path, "stream", False)
        n = 1 if stream else 2048
        items = classified_frames(path, prefilter(), blobsniff.plausible, skipped,
                                  as_blob=as_blob, runs=not stream)
        more = True
        while more:
            out, more = [], False
            try:
                for frame, cl in items:
                    if skipped[0]:
                        stats.frames += skipped[0]
                        decoder.skipped += skipped[0]
                        skipped[0] = 0
                    if frame.__class__ is Taken:
                        out += decode_taken(frame, cl)
                    else:
                        rec = None if cl is FULL else decode_at(frame, cl)
                        if rec is None:
                            out += feed(frame)
                        else:
                            out.append(rec)
                    if len(out) >= n:
                        more = True
                        break
            except BaseException:
                if out:  # the records before the damage, then the error
                    yield out
                raise
            if out:
                yield out
    finally:
        stats.frames += skipped[0]
        decoder.skipped += skipped[0]
        skipped[0] = 0
    tail = list(decoder.finish())
    if tail:
        yield tail


def _fast_records(path, decoder: FastDecoder | None, as_blob: bool) -> Iterator[dict]:
    for records in decode_batches_fast(path, decoder, as_blob):
        yield from records


__all__ = ["FastDecoder", "decode_batches_fast", "decode_file_fast", "enabled", "prefilter"]
