"""`ibpath record -o OUT.pcapng -- CMD [ARGS...]`: run CMD under the ibpathrec.c shim, then
turn its spool into one pcapng (record/capture.py).

The shim is compiled at run time into a cache directory (compile_shim), with the spool
format of record/spool.py. CMD inherits LD_PRELOAD (the shim first, then whatever was already
preloaded, e.g. libumad2sim.so on ibsim) and IBPATHREC_* through its environment, so its
children and the programs they exec are recorded into the same spool.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from . import spool as spool_format
from .capture import ConvertResult, write_pcapng
from .spool import read_spool

SHIM_SOURCE = Path(__file__).with_name("ibpathrec.c")
SPOOL_ENV = "IBPATHREC_SPOOL"
LOST_ENV = "IBPATHREC_LOST"  # the shim's lost-record counters (spool.LOST_SLOT)


class RecordError(RuntimeError):
    """Recording could not start, or its spool could not be converted."""


@dataclass
class RecordOptions:
    """Caps and where ibacm listens; None keeps the shim's default."""

    max_record: int | None = None  # bytes per recorded part (IBPATHREC_MAX_RECORD)
    max_total: int | None = None  # spool bytes per run (IBPATHREC_MAX_TOTAL)
    acm_sockets: Sequence[str] | None = None  # AF_UNIX paths (IBPATHREC_ACM_SOCKETS)
    acm_port: int | None = None  # TCP port of ibacm's server mode (IBPATHREC_ACM_PORT)
    spool: str | None = None  # keep the spool here (default: a temporary file)


@dataclass
class RecordResult:
    """The command's exit status and what the capture holds."""

    exit_status: int
    capture: ConvertResult
    spool: str


SHIM_ENV = "IBPATH_RECORD_SHIM"


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ibpath"


def compile_shim(cache_dir: str | os.PathLike | None = None, *, timeout: float = 60,
                 source: Path = SHIM_SOURCE, defines: Sequence[str] = ()) -> Path:
    """Compile a shim `source` (with -D `defines`) into <cache>/<stem>-<hash>.so (reused
    while the source, defines and compiler are unchanged) and return its path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("no C compiler (cc) found")
    src = source.read_bytes()
    flags = [f"-D{d}" for d in defines]
    key = hashlib.sha256(src + os.path.realpath(cc).encode() + "\0".join(flags).encode()
                         ).hexdigest()[:16]
    candidates = [Path(cache_dir)] if cache_dir else [_cache_dir(), Path(tempfile.gettempdir())
                                                      / f"ibpath-cache-{os.getuid()}"]
    last_err: Exception | None = None
    for d in candidates:
        try:
            d.mkdir(parents=True, exist_ok=True)
            so = d / f"{source.stem}-{key}.so"
            if so.exists():
                return so
            tmp = d / f".{source.stem}-{key}.{os.getpid()}.so"
            subprocess.run([cc, "-O2", "-Wall", "-shared", "-fPIC", *flags, "-o", str(tmp),
                            str(source), "-ldl", "-lpthread"], check=True, timeout=timeout,
                           capture_output=True, text=True)
            os.replace(tmp, so)
            return so
        except subprocess.CalledProcessError as e:
            raise RuntimeError(f"compiling {source} failed:\n{e.stderr}") from e
        except OSError as e:
            last_err = e
    raise RuntimeError(f"no writable cache directory for the shim: {last_err}")


def build_shim() -> Path:
    """The compiled shim (cached while its source and the spool format are unchanged), or the
    prebuilt one $IBPATH_RECORD_SHIM names (the lab guest has no compiler: the host builds
    the shim and ships it)."""
    prebuilt = os.environ.get(SHIM_ENV)
    if prebuilt:
        if not os.path.isfile(prebuilt):
            raise RecordError(f"{prebuilt}: ${SHIM_ENV} names no file")
        return Path(prebuilt)
    try:
        return compile_shim(source=SHIM_SOURCE, defines=spool_format.compile_defines())
    except RuntimeError as exc:
        raise RecordError(str(exc)) from None


def shim_environment(shim: Path, spool: str, options: RecordOptions,
                     base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment CMD runs with."""
    env = dict(os.environ if base is None else base)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{shim} {preload}".strip()
    env[SPOOL_ENV] = spool
    for var, value in (("IBPATHREC_MAX_RECORD", options.max_record),
                       ("IBPATHREC_MAX_TOTAL", options.max_total),
                       ("IBPATHREC_ACM_PORT", options.acm_port)):
        if value is not None:
            env[var] = str(value)
    if options.acm_sockets is not None:
        env["IBPATHREC_ACM_SOCKETS"] = ":".join(options.acm_sockets)
    return env


def record_command(argv: Sequence[str], out: str, options: RecordOptions | None = None, *,
                   env: Mapping[str, str] | None = None) -> RecordResult:
    """Run argv with the shim and write what it recorded to the pcapng out."""
    options = options or RecordOptions()
    if not argv:
        raise RecordError("no command to run")
    shim = build_shim()
    tmpdir = None
    if options.spool:
        spool = os.path.abspath(options.spool)  # CMD may change directory
        Path(spool).unlink(missing_ok=True)
    else:
        tmpdir = tempfile.TemporaryDirectory(prefix="ibpath-record-")
        spool = os.path.join(tmpdir.name, "spool")
    try:
        # a fresh, empty spool: the shim appends
        Path(spool).touch()
        # the lost-record counters, written whole now: the shim maps them when the spool
        # cannot be written, when the disk may be full
        lost = spool + ".lost"
        Path(lost).write_bytes(bytes(spool_format.LOST_SLOTS * spool_format.LOST_SLOT.size))
        run_env = shim_environment(shim, spool, options, env)
        run_env[LOST_ENV] = lost
        status = _run(argv, run_env)
        records = read_spool(spool)
        records += lost_notes(Path(lost).read_bytes(), records)
        if not options.spool:
            Path(lost).unlink(missing_ok=True)
        capture = write_pcapng(records, out, spool)
        return RecordResult(status, capture, spool if options.spool else "")
    finally:
        if tmpdir is not None:
            tmpdir.cleanup()


def lost_notes(ledger: bytes, records: list[spool_format.SpoolRecord]
               ) -> list[spool_format.SpoolRecord]:
    """A note for each process whose records the shim could not write, saying how many, at
    the end of the recording."""
    ts = max((r.ts_ns for r in records), default=0)
    notes = []
    for pid, err, count in spool_format.lost_records(ledger):
        name = errno.errorcode.get(err, str(err))
        text = (f"{count} record(s) of pid {pid} lost: the recorder could not write the "
                f"spool ({name}: {os.strerror(err)})")
        notes.append(spool_format.SpoolRecord(len(records) + len(notes), -1,
                                              spool_format.KIND_NOTE, spool_format.PART_CALL,
                                              0, pid, pid, -1, 0, ts, 0, 0, len(text),
                                              text.encode()))
    return notes


def _run(argv: Sequence[str], env: dict[str, str]) -> int:
    """Run the command in the foreground; Ctrl-C reaches it (same process group) and the
    recorder stays to convert what was recorded."""
    try:
        proc = subprocess.Popen(list(argv), env=env)
    except OSError as exc:
        raise RecordError(f"cannot run {argv[0]}: {exc.strerror}") from None
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        status = proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
    return 128 - status if status < 0 else status
