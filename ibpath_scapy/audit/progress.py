"""Progress of an audit on stderr, when stderr is a terminal: share of the bytes read, frames
per second and time left (or, for a stream, frames and rate only).

Hand-written rather than with tqdm or rich: it is one status line redrawn at most twice a
second, and neither library's bar reads both a byte position (for the share and the time
left) and a frame count (for the rate) without wrapping it this much anyway.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

# redraw at most this often (seconds): cheap, and a terminal is not flooded
_INTERVAL = 0.5


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """Call with the number of the last frame read; done() clears the line. position() gives
    the bytes read so far and size the input's size (None: unknown, a stream)."""

    def __init__(self, name: str, enabled: bool, position: Callable[[], int] | None = None,
                 size: int | None = None, stream=None, clock=time.monotonic):
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self.name, self.position, self.size, self.clock = name, position, size, clock
        self.start = self.last = clock()
        self.width = 0

    def line(self, frame: int, now: float) -> str:
        """The status text after `frame` frames at time `now`."""
        elapsed = max(now - self.start, 1e-9)
        rate = frame / elapsed
        parts = [f"{self.name}:"]
        if self.position is not None and self.size:
            share = min(self.position() / self.size, 1.0)
            parts.append(f"{share * 100:5.1f} %")
        parts.append(f"{frame:,} frames, {rate:,.0f} frames/s")
        if self.position is not None and self.size:
            done = self.position()
            if done:
                parts.append(f"{_duration(elapsed * (self.size - done) / done)} left")
        return "  ".join(parts)

    def __call__(self, frame: int) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if now - self.last < _INTERVAL:
            return
        self.last = now
        text = self.line(frame, now)
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def done(self) -> None:
        if self.enabled and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0
