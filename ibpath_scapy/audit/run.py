"""Audit files from the command line: decoding engine, progress and unreadable inputs."""

from __future__ import annotations

import gc
import sys
from contextlib import contextmanager

from .. import fast
from ..decode import Decoder, decode_file
from ..fast import FastDecoder, decode_file_fast
from ..pcapio import CaptureError
from .engine import FileAudit, audit_records
from .model import AuditOptions
from .replay import extra_blob_record


class _Progress:
    """A frame counter on stderr when it is a terminal (every 10,000 frames)."""

    def __init__(self, path: str, enabled: bool):
        self.path, self.enabled, self.last = path, enabled and sys.stderr.isatty(), 0

    def __call__(self, frame: int) -> None:
        if self.enabled and frame - self.last >= 10000:
            self.last = frame
            sys.stderr.write(f"\r{self.path}: frame {frame}")
            sys.stderr.flush()

    def done(self) -> None:
        if self.enabled and self.last:
            sys.stderr.write("\r" + " " * (len(self.path) + 20) + "\r")


def _records(path: str, decoder: Decoder, engine: str, extra: list[dict] = ()):
    """Decoded records of one file from the chosen engine: the Scapy layers, or tshark with
    the generated plugin (the same facts, so the same rules judge both)."""
    if engine == "tshark":
        from ..tshark_engine import tshark_records
        yield from tshark_records(path, stats=decoder.stats)
    elif engine == "scapy":
        if isinstance(decoder, FastDecoder):
            yield from decode_file_fast(path, decoder)
        else:
            yield from decode_file(path, decoder)
    else:
        raise ValueError(f"unknown engine {engine!r}")
    yield from extra


def extra_blobs(paths: list[str]) -> list[dict]:
    """The blob records of the --blob files, wrapped for every capture's replay
    (replay.extra_blob_record). A file that cannot be read to its end gives what came before
    the damage; the file's own audit reports why."""
    out = []
    for path in paths:
        try:
            for rec in decode_file(path, Decoder()):
                if rec.get("kind") == "blob":
                    out.append(extra_blob_record(rec, path))
        except (CaptureError, OSError):
            pass
    return out


def _decoder(engine: str) -> Decoder:
    """The Scapy engine's decoder: the fast path (pre-filter + compiled decoder, the same
    records) unless IBPATH_FASTPATH=0."""
    return FastDecoder() if fast.enabled() and engine == "scapy" else Decoder()


@contextmanager
def _young_gc_only():
    """Decoded records and the replay's state hold no reference cycles, yet full collections
    would walk the growing replay again and again (a fifth of the audit's time on SA-heavy
    captures). During the audit only the young generations are collected (what Scapy's packet
    cycles need: they die young); full collections resume afterwards."""
    old = gc.get_threshold()
    gc.set_threshold(10000, 50, 1_000_000)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def audit_paths(paths: list[str], options: AuditOptions, engine: str = "scapy",
                quiet: bool = False) -> tuple[list[FileAudit], list[str]]:
    """Audit each file; an unreadable file is reported on stderr (file and reason) and its
    findings up to the damage are kept. The blobs of options.extra_blobs (--blob) join the
    replay of every other file, without being counted as its frames."""
    with _young_gc_only():
        return _audit_paths(paths, options, engine, quiet)


def _audit_paths(paths: list[str], options: AuditOptions, engine: str,
                 quiet: bool) -> tuple[list[FileAudit], list[str]]:
    audits, unreadable = [], []
    extras = extra_blobs(options.extra_blobs)
    for path in paths:
        decoder = _decoder(engine)
        progress = _Progress(path, not quiet)
        extra = [] if path in options.extra_blobs else extras
        try:
            fa = audit_records(path, _records(path, decoder, engine, extra), options,
                               on_frame=progress)
        except CaptureError as exc:
            progress.done()
            print(f"ibpath: {exc}", file=sys.stderr)
            unreadable.append(path)
            fa = _partial(path, decoder, options, str(exc), extra, engine)
        except OSError as exc:
            print(f"ibpath: {path}: {exc.strerror or exc}", file=sys.stderr)
            unreadable.append(path)
            fa = FileAudit(path, error=exc.strerror or str(exc))
        progress.done()
        fa.frames = decoder.stats.frames
        audits.append(fa)
    return audits, unreadable


def _partial(path: str, decoder: Decoder, options: AuditOptions, error: str,
             extra: list[dict] = (), engine: str = "scapy") -> FileAudit:
    """Findings from the frames before the damage: decode again, with the same engine, up to
    the error."""
    out = []
    try:
        for rec in _records(path, _decoder(engine), engine):
            out.append(rec)
    except CaptureError:
        pass
    fa = audit_records(path, out + list(extra), options)
    fa.error = error
    return fa
