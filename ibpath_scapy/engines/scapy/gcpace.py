"""The cycle collector during an audit or a decode: paced by the frames Scapy decodes.

Reference counting frees what the fast path's records, the replay and the reports leave
behind: none of them holds a reference cycle (tests/test_gcpace.py counts what a collection
finds after auditing each capture of the project). The cycle collector would only walk them
again: every object that outlives one young collection is walked there and again in the
middle generation's, 0.55 s of the 4.5 s audit of capture 2 as native IB (bench/README.md).
Scapy's packets do hold cycles (each layer and its underlayer point at each other). So while
paced() is on, automatic collection is off, and the decoder's Scapy path tells each frame it
dissects (scapy_frame()): every YOUNG_EVERY of them the young generation is collected, every
MIDDLE_EVERY the middle one too. A capture that never leaves the fast path is never
collected; one that goes through Scapy throughout is collected about as often as before.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager

# Scapy frames between young collections: their garbage (a few tens of KB a frame) stays
# small, and the young generation then holds no more than before (~10,000 objects)
YOUNG_EVERY = 256
# young collections between collections of the middle generation (gc's own default is 10)
MIDDLE_EVERY = 10

_paced = 0  # paced() contexts open: nested ones (the CLI around the audit) keep it on
_frames = 0


@contextmanager
def paced():
    """Automatic collection off; Scapy frames collect (see the module). On leaving, the
    collector is as it was (on, for a library caller: the objects made meanwhile are then
    walked once, at its next young collection)."""
    global _paced
    was = gc.isenabled()
    gc.disable()
    _paced += 1
    try:
        yield
    finally:
        _paced -= 1
        if was:
            gc.enable()


def scapy_frame() -> None:
    """One frame dissected by the Scapy layers (decode.Decoder.feed): its packet's cycles
    are collected with the next YOUNG_EVERY frames' while paced() is on."""
    global _frames
    if not _paced:
        return
    _frames += 1
    if _frames % YOUNG_EVERY == 0:
        gc.collect(1 if _frames % (YOUNG_EVERY * MIDDLE_EVERY) == 0 else 0)
