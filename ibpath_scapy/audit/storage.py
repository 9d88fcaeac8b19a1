"""How a transaction keeps its SA frames: compactly while the replay may still judge it
(KeptFrames, KeptRecord), as plain records when it is let go once judged (FrameList).
What is kept of an SA frame follows its fact (facts.records.MadFrame): the MAD header, the
fields an SA MAD adds, the problems."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from operator import attrgetter

from ..facts.records import Fact, MadFrame

_ABSENT = None  # a fact's absent field; a dict's missing key reads so too
# the keys of an SA frame's record that the transaction rules (rules/sa.py, rules/resolver.py)
# and the ladder (ladder.py) may read, besides "frame"
KEPT_KEYS = ("mad", *MadFrame.SA_FIELDS, "errors", "umad")
_SLOT = {k: i for i, k in enumerate(KEPT_KEYS)}
_ALL_ABSENT = (_ABSENT,) * len(KEPT_KEYS)
_PRS, _RA = _SLOT["path_records"], _SLOT["reassembled_from"]
_ERR, _DROP = _SLOT["errors"], _SLOT["rmpp_dropped"]  # values no other frame shares
_kept = attrgetter(*KEPT_KEYS)  # a fact's KEPT_KEYS values (None where absent)
_PACKED = object()  # a body's "reassembled_from": the frames are in KeptFrames' side arrays


class KeptRecord(Mapping):
    """An SA frame's record as its transaction gives it back: the frame number and the body
    (the values of KEPT_KEYS, _ABSENT where the record had none), read like the record
    (rec["mad"], rec.get("rmpp", {}), "reassembled_from" in rec). Read-only."""

    __slots__ = ("_frame", "_body")

    def __init__(self, frame: int, body: tuple):
        self._frame, self._body = frame, body

    def __getitem__(self, key):
        if key == "frame":
            return self._frame
        i = _SLOT.get(key)
        if i is not None:
            v = self._body[i]
            if v is not _ABSENT:
                return v
        raise KeyError(key)

    def get(self, key, default=None):
        if key == "frame":
            return self._frame
        i = _SLOT.get(key)
        if i is None:
            return default
        v = self._body[i]
        return default if v is _ABSENT else v

    def __contains__(self, key) -> bool:
        return key == "frame" or (key in _SLOT and self._body[_SLOT[key]] is not _ABSENT)

    def __getattr__(self, name: str):
        """The record's fields as attributes too, as on the MadFrame fact it keeps (None for
        a field the record has not)."""
        if name == "frame":
            return self._frame
        i = _SLOT.get(name)
        if i is None:
            raise AttributeError(name)
        return self._body[i]

    def __iter__(self):
        yield "frame"
        for k, v in zip(KEPT_KEYS, self._body):
            if v is not _ABSENT:
                yield k

    def __len__(self) -> int:
        return 1 + sum(1 for v in self._body if v is not _ABSENT)

    def __bool__(self) -> bool:
        return True  # it always has "frame" (and `if rec` need not count the rest)

    def __repr__(self) -> str:
        return f"KeptRecord({dict(self)!r})"


class KeptFrames(Sequence):
    """The SA frames of one side of a transaction (its requests, or its responses and ACKs),
    stored compactly: a long SA storm keeps every frame of every transaction (the rules name
    them, the ladder draws them), so each costs 12 bytes here (frame number, index of its
    body) instead of a record (~0.6 KB). A body is the tuple of the KEPT_KEYS values; identical bodies
    (the fast decoder shares the dicts of identical headers and PathRecords, so retries and
    repeated answers give the same objects) are stored once per transaction. The segment
    frames of a reassembled answer ("reassembled_from") are packed in side arrays, so that its
    body is shared too. Items are KeptRecords, made when read."""

    __slots__ = ("_frames", "_which", "_bodies", "_index", "_ra")

    def __init__(self):
        self._frames = array("Q")
        self._which = array("I")
        self._bodies: list[tuple] = []
        # identity of a body's values → its index; the bodies list keeps those values alive,
        # so an id here always names the object it was taken from
        self._index: dict[tuple, int] | None = {}
        # reassembled_from lists: (positions, concatenated frames, end offsets), made on need
        self._ra: tuple[array, array, array] | None = None

    def append(self, rec: dict) -> None:
        body = _kept(rec) if isinstance(rec, Fact) else tuple(map(rec.get, KEPT_KEYS, _ALL_ABSENT))
        prs = body[_PRS]
        if prs is not _ABSENT and not prs:
            # RMPP segments but the last have no records: one shared empty sequence
            body = body[:_PRS] + ((),) + body[_PRS + 1:]
        if body[_RA] is not _ABSENT:
            if self._ra is None:
                self._ra = (array("Q"), array("Q"), array("Q"))
            at, frames, ends = self._ra
            at.append(len(self._frames))
            frames.extend(body[_RA])
            ends.append(len(frames))
            body = body[:_RA] + (_PACKED,) + body[_RA + 1:]
        index = self._index
        key = None
        if body[_ERR] is _ABSENT and body[_DROP] is _ABSENT and index is not None:
            # the identity of every value, a PathRecord list by its records' (each frame
            # has its own list). A frame with errors (or a dropped RMPP segment) has values of
            # its own: nothing to share.
            key = tuple(map(id, body[:_PRS] + body[_PRS + 1:]))
            if prs is _ABSENT:
                key += (id(_ABSENT),)
            elif prs:
                key += tuple(map(id, prs))
            i = index.get(key)
        else:
            i = None
        if i is None:
            i = len(self._bodies)
            self._bodies.append(body)
            if key is not None:
                index[key] = i
        self._frames.append(rec["frame"])
        self._which.append(i)

    def seal(self) -> None:
        """No more appends: drop the identity index (the bodies stay)."""
        self._index = None

    def __len__(self) -> int:
        return len(self._frames)

    def _item(self, pos: int, frame: int, body: tuple) -> KeptRecord:
        if body[_RA] is _PACKED:
            at, frames, ends = self._ra
            k = bisect_left(at, pos)
            start = ends[k - 1] if k else 0
            body = body[:_RA] + (frames[start:ends[k]].tolist(),) + body[_RA + 1:]
        return KeptRecord(frame, body)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        return self._item(i, self._frames[i], self._bodies[self._which[i]])

    def __iter__(self):
        bodies = self._bodies
        return (self._item(pos, f, bodies[w])
                for pos, (f, w) in enumerate(zip(self._frames, self._which)))

    def frame_numbers(self) -> list[int]:
        return self._frames.tolist()


class FrameList(list):
    """The SA frames of one side of a transaction as their records, when the transaction is
    let go once judged (Replay.keep_closed false): it lives only while open, so KeptFrames'
    packing would cost time and save nothing."""

    __slots__ = ()

    def seal(self) -> None:
        pass

    def frame_numbers(self) -> list[int]:
        return [r.frame for r in self]
