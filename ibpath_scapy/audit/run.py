"""Audit files from the command line: inputs (files, streams, directories), the decoding
engine, progress, unreadable inputs, and files audited in several processes."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from ..engines.scapy import blobsniff
from ..engines import fast
from ..engines.scapy.decode import Decoder, decode_file
from ..engines.scapy.gcpace import paced
from ..engines.fast import FastDecoder, decode_batches_fast, decode_file_fast
from ..capture.batch import batches
from ..capture.pcapio import MAX_RAW_BLOB, STDIN, CaptureError, Input, sniff_format
from .engine import FileAudit, audit_records
from .model import AuditOptions
from .progress import Progress
from .replay import extra_blob_record
from .tables import read_capture_facts


@dataclass(frozen=True)
class Skipped:
    """A file of a directory given as input that is neither a capture nor a blob. position:
    how many of the files to audit come before it in the walk (the reports that list both
    keep the walk's order)."""

    path: str
    reason: str
    position: int = 0


def _recognised(path: str) -> str | None:
    """None when the file of a directory is a capture or a blob by its content (or cannot be
    opened: its audit says why, so that it is never left out in silence), else why not."""
    try:
        with Input(path) as f:
            head = f.head(4)
            if sniff_format(head) != "other":
                return None
            data = f.read(MAX_RAW_BLOB + 1)
    except OSError:
        return None
    if not data:
        return "empty"
    if len(data) > MAX_RAW_BLOB:
        return f"not a capture, and over {MAX_RAW_BLOB} bytes for a blob"
    if blobsniff.plausible(data):
        return None
    return f"not a capture or blob file (starts with {data[:8].hex()})"


# The error of a capture that was read to its end but of which no frame was decoded (only link
# types no layer reads): not a green report, whatever the one DECODE-UNSUPPORTED warning says.
NOTHING_DECODED = "no frame audited: {undecoded}"

# Why a folder's files are missing from the report, when the folder cannot be listed: the
# audit's error for it (on stderr, in every format), after the system's reason.
UNLISTED_FOLDER = "{reason} (a folder that cannot be listed: none of its files was audited)"


@dataclass
class Inputs:
    """What the command line names, a directory's files expanded: `files` to audit in order
    (a folder that cannot be listed among them, at its place, so that its audit names it as
    unreadable), the files `skipped`, and `unlisted`: each such folder and the system's
    reason."""

    files: list[str]
    skipped: list[Skipped]
    unlisted: dict[str, str]


def expand_inputs(paths: list[str], as_blob: bool = False) -> Inputs:
    """The files to audit: each path as given, and for a directory every file under it
    (recursively, in sorted order) that is a capture or a blob by content (with as_blob,
    every file). The files of a directory that are neither come back as Skipped; a folder
    that cannot be listed (permissions), the top one too, is never passed over in silence."""
    inputs = Inputs([], [], {})

    def unlisted(exc: OSError) -> None:  # os.walk's onerror: it would skip the folder
        inputs.files.append(exc.filename)
        inputs.unlisted[exc.filename] = exc.strerror or str(exc)

    for p in paths:
        if p == STDIN or not os.path.isdir(p):
            inputs.files.append(p)
            continue
        for root, dirs, names in os.walk(p, onerror=unlisted):
            dirs.sort()
            for d in dirs:  # os.walk does not follow them: say so
                if os.path.islink(os.path.join(root, d)):
                    inputs.skipped.append(Skipped(
                        os.path.join(root, d), "a symbolic link to a directory (not followed)",
                        len(inputs.files)))
            for name in sorted(names):
                f = os.path.join(root, name)
                if os.path.exists(f) and not os.path.isfile(f):
                    # a FIFO or device inside a tree would block the walk or never end
                    inputs.skipped.append(Skipped(
                        f, "not a regular file (give it by name to read it)", len(inputs.files)))
                    continue
                why = None if as_blob else _recognised(f)
                if why is None:
                    inputs.files.append(f)
                else:
                    inputs.skipped.append(Skipped(f, why, len(inputs.files)))
    return inputs


def _records(src, decoder: Decoder, engine: str, as_blob: bool):
    """Decoded records of one input from the chosen engine: the Scapy layers (src an Input),
    or tshark with the generated plugin (src a path: the same facts, so the same rules judge
    both)."""
    if engine == "tshark":
        from ..engines.tshark import tshark_records
        yield from tshark_records(src, stats=decoder.stats, as_blob=as_blob, render=False)
    elif engine == "scapy":
        if isinstance(decoder, FastDecoder):
            yield from decode_file_fast(src, decoder, as_blob=as_blob, render=False)
        else:
            yield from decode_file(src, decoder, as_blob=as_blob, render=False)
    else:
        raise ValueError(f"unknown engine {engine!r}")


def _record_batches(src, decoder: Decoder, engine: str, as_blob: bool, n: int):
    """_records in lists of about n (engine.audit_records replays a list at a time): the
    fast path's own batches of frames, else _records drawn n at a time."""
    if engine == "scapy" and isinstance(decoder, FastDecoder):
        return decode_batches_fast(src, decoder, as_blob=as_blob)
    return batches(_records(src, decoder, engine, as_blob), n)


def _blob_option_file(f: Input) -> bool:
    """A --blob FILE is a blob whatever its content unless it is a capture (with blob
    frames)."""
    return sniff_format(f.head(4)) == "other"


def extra_blobs(paths: list[str]) -> list[dict]:
    """The blob records of the --blob files, wrapped for every capture's replay
    (replay.extra_blob_record). A file that cannot be read to its end gives what came before
    the damage; the file's own audit reports why."""
    out = []
    for path in paths:
        try:
            with Input(path) as f:
                for rec in decode_file(f, Decoder(), as_blob=_blob_option_file(f), render=False):
                    if rec.get("kind") == "blob":
                        out.append(extra_blob_record(rec, path))
        except (CaptureError, OSError):
            pass
    return out


def _decoder(engine: str) -> Decoder:
    """The Scapy engine's decoder: the fast path (pre-filter + compiled decoder, the same
    records) unless IBPATH_FASTPATH=0."""
    return FastDecoder() if fast.enabled() and engine == "scapy" else Decoder()


class _Interrupted(BaseException):
    """Ctrl-C while auditing a stream: the end of the input (_interrupt_ends)."""


@contextmanager
def _interrupt_ends(stream: bool):
    """For a stream (tcpdump -U -w - | ibpath audit -, where Ctrl-C reaches both), make the
    first SIGINT end the input instead of the program, so that what was read is reported."""
    import signal
    import threading

    if not stream or threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        signal.signal(signal.SIGINT, old)  # a second Ctrl-C stops everything
        raise _Interrupted()

    old = signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class _UpToDamage:
    """The records of an input up to the damage, in lists (record_batches: what
    engine.audit_records replays a list at a time) or one by one: a CaptureError ends them
    (kept in .error) instead of the audit, so that the findings of the frames before it are
    judged in the one pass (a stream cannot be read twice); so does Ctrl-C on a stream. The
    --blob records follow either way."""

    def __init__(self, batches, extra: list[dict]):
        self.batches, self.extra, self.error = batches, extra, None

    def record_batches(self):
        try:
            yield from self.batches
        except CaptureError as exc:
            self.error = exc
        except _Interrupted:
            pass
        if self.extra:
            yield list(self.extra)

    def __iter__(self):
        for records in self.record_batches():
            yield from records


@contextmanager
def _tshark_source(path: str):
    """What tshark reads for an input: the file itself, or a stream copied to a temporary
    file first (the tshark engine reads a capture twice: tshark, and the pcapng interface
    table for timestamps)."""
    if path != STDIN and os.path.isfile(path):
        yield path
        return
    with Input(path) as src, tempfile.TemporaryDirectory(prefix="ibpath-stream-") as tmp:
        copy = os.path.join(tmp, "stream")
        with open(copy, "wb") as out:
            shutil.copyfileobj(src, out)
        yield copy


def _unreadable(path: str, why: str, start: float) -> tuple[FileAudit, str]:
    """The audit of an input that could not be opened: its error and the line for stderr."""
    fa = FileAudit(path, error=why)
    fa.seconds = time.monotonic() - start
    return fa, f"ibpath: {path}: {why}"


def audit_one(path: str, options: AuditOptions, engine: str = "scapy",
              extras: list[dict] = (), as_blob: bool = False,
              progress: bool = False, live=None, unlisted: str | None = None,
              name: str | None = None) -> tuple[FileAudit, str | None]:
    """Audit one input: its FileAudit (with .error and the findings up to the damage when it
    cannot be read to its end) and the line for stderr when it cannot (file and reason).
    live(finding), when given, is told each frame and transaction finding of a stream as
    soon as it is known (engine.audit_records). Interrupted (Ctrl-C) while it waits on a
    stream, the audit ends there with what was read, as at the end of the stream. unlisted:
    path is a folder that could not be listed, and why (Inputs.unlisted). name: what the
    reports and messages call the input (--label for standard input; default: path)."""
    start = time.monotonic()
    name = name or path
    if unlisted is not None:
        return _unreadable(name, UNLISTED_FOLDER.format(reason=unlisted), start)
    decoder = _decoder(engine)
    blob_option = path in options.extra_blobs
    extra = [] if blob_option else list(extras)
    try:
        if engine == "tshark":
            with _tshark_source(path) as source:
                bar = Progress(name, progress)
                records = _UpToDamage(_record_batches(source, decoder, engine, as_blob, 2048),
                                      extra)
                try:
                    fa = audit_records(name, records, options, on_frame=bar)
                finally:
                    bar.done()
                if records.error is not None and source != path:
                    records.error = CaptureError(str(records.error).replace(source, path))
        else:
            with Input(path) as src, _interrupt_ends(src.stream):
                blob = as_blob or (blob_option and _blob_option_file(src))
                bar = Progress(name, progress, lambda: src.pos, src.size)
                n = 1 if src.stream else 2048
                records = _UpToDamage(_record_batches(src, decoder, engine, blob, n), extra)
                try:
                    fa = audit_records(name, records, options, on_frame=bar,
                                       on_finding=live if src.stream else None, batch=n)
                finally:
                    bar.done()
    except _Interrupted:  # Ctrl-C outside the wait for input: nothing whole to report
        return _unreadable(name, "interrupted", start)
    except OSError as exc:
        return _unreadable(name, exc.strerror or str(exc), start)
    fa.frames = decoder.stats.frames
    fa.seconds = time.monotonic() - start
    if options.tables and path != STDIN:  # read again where it is (read_capture_facts)
        read_capture_facts(fa, path)
    if records.error is not None:
        # the readers name the input by its path first ("-: frame 3: ...")
        fa.error = str(records.error).replace(path, name, 1)
        return fa, f"ibpath: {fa.error}"
    stats = decoder.stats
    if stats.frames and stats.undecoded == stats.frames:
        fa.error = NOTHING_DECODED.format(undecoded=stats.undecoded_text())
        return fa, f"ibpath: {name}: {fa.error}"
    return fa, None


def _portable(fa: FileAudit, options: AuditOptions) -> FileAudit:
    """A FileAudit another process can hand back: the replay's callbacks (closures of the
    audit that made it, used no more) dropped, and where no ladder is drawn of it, its
    resolutions' judged transactions folded into the counts the reports read
    (Resolution.fold): what crosses to the other process is then ~27 KB for an SA storm of
    60,000 frames instead of 3 MB."""
    if fa.replay is not None:
        fa.replay.on_close = None
        fa.replay.keep_frame_record = None
        fa.replay.restore_all()  # its Spill file is this process's
        if not (options.ladder_arrows or options.keep_transactions):  # (the library's keeps)
            for res in fa.replay.resolutions.values():
                res.fold()
    return fa


def _audit_in_worker(args) -> tuple[FileAudit, str | None]:
    with paced():
        fa, message = audit_one(*args)
    return _portable(fa, args[1]), message


def audit_paths(paths: list[str], options: AuditOptions, engine: str = "scapy",
                quiet: bool = False, jobs: int = 1, as_blob: bool = False,
                messages: list[str] | None = None, live=None,
                unlisted: dict[str, str] | None = None,
                names: dict[str, str] | None = None,
                dask: str | None = None) -> tuple[list[FileAudit], list[str]]:
    """Audit each input in order; an unreadable one is reported on stderr (file and reason)
    and its findings up to the damage are kept. The blobs of options.extra_blobs (--blob)
    join the replay of every other file, without being counted as its frames. With jobs > 1
    the files are audited in that many processes, with dask (a scheduler's address) by that
    Dask cluster's workers (audit/cluster.py); the audits, their order and the stderr lines
    are those of a serial run. messages, when given, receives the stderr lines instead of
    stderr. live: see audit_one (streams are audited in this process). unlisted: the
    folders among paths that could not be listed, and why (Inputs.unlisted). names: what the
    reports call an input instead of its path (--label names standard input)."""
    with paced():
        extras = extra_blobs(options.extra_blobs)
    unlisted, names = unlisted or {}, names or {}
    tasks = [(p, options, engine, extras, as_blob, False, None, unlisted.get(p), names.get(p))
             for p in paths]
    if dask and STDIN not in paths:
        from .cluster import audit_on_cluster
        results = audit_on_cluster(dask, _audit_in_worker, tasks, quiet)
    elif jobs > 1 and len(paths) > 1 and STDIN not in paths:
        with ProcessPoolExecutor(max_workers=min(jobs, len(paths))) as pool:
            results = list(pool.map(_audit_in_worker, tasks))
    else:
        results = []
        with paced():
            for p, opts, eng, ext, blob, _, _, why, name in tasks:
                results.append(audit_one(p, opts, eng, ext, blob, progress=not quiet,
                                         live=live, unlisted=why, name=name))
    audits, unreadable = [], []
    for fa, message in results:
        audits.append(fa)
        if message is not None:
            unreadable.append(fa.path)
            if messages is not None:
                messages.append(message)
            else:
                print(message, file=sys.stderr)
    return audits, unreadable
