"""Run tshark (directly and through pyshark) for the oracle tests, and check its output.

Every test that runs tshark must pass what tshark printed to `assert_clean(stdout, stderr)`.
The exit status proves nothing: tshark 4.0.17 exits 0 when a Lua script fails.
* A script that raises while it loads only prints "tshark: Lua: Error during loading:"
  and a traceback on stderr. The script is skipped and every packet is still dissected.
* A dissector or postdissector that raises while dissecting gives a "Lua Error: <file>:<line>:
  <msg>" tree item. That item carries an expert info of severity Error. The item lands in
  stdout (-V, PDML, JSON, or the `_ws.expert.*` fields of `-T fields`).
* A built-in dissector that throws (a bounds error on a short or odd packet) gives
  "[Malformed Packet: <proto>]" (`_ws.malformed`, expert severity Error). tshark still exits 0.
`test_tshark_oracle.py::test_assert_clean_catches_lua_failures_that_exit_0` checks these facts.

Isolation: tshark runs with HOME/XDG_CONFIG_HOME/XDG_DATA_HOME set to an empty temporary
directory (`tshark_env()`, which every test that runs tshark itself uses too). Personal
preferences and personal (Lua) plugins therefore cannot change what Wireshark's built-in
dissectors print. Pass `-X lua_script:<file>` to load a script on purpose.

If tshark is missing, `require_tshark()` and `needs_tshark` skip the test and say why. Set $TSHARK
to use a tshark that is not on PATH.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import re
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

# epan/proto.h: expert severities (PI_COMMENT 0x00100000 ... PI_WARN 0x00600000).
PI_ERROR = 0x00800000
# Aggregator for repeated field occurrences in `-T fields` output (occurrence=a).
AGGREGATOR = "|"

_SKIP_REASON = (
    "tshark (Wireshark's command-line dissector) is not installed or not on PATH; "
    "install it (Debian: apt-get install tshark) or point $TSHARK at the binary"
)


def tshark_path() -> str | None:
    """The tshark binary to use: $TSHARK if set, else tshark from PATH; None when absent."""
    env = os.environ.get("TSHARK")
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    return shutil.which("tshark")


def require_tshark() -> str:
    """The tshark path, or skip the calling test with a clear reason."""
    path = tshark_path()
    if path is None:
        pytest.skip(_SKIP_REASON)
    return path


#: Mark for tests (or `pytestmark` for modules) that need tshark.
needs_tshark = pytest.mark.skipif(tshark_path() is None, reason=_SKIP_REASON)

_HOME: str | None = None


def tshark_env() -> dict[str, str]:
    """The environment every tshark of the test suite runs in: this process's, with HOME,
    XDG_CONFIG_HOME and XDG_DATA_HOME an empty folder of its own (made once a run) and no
    WIRESHARK_CONFIG_DIR, so that nothing the user installed or configured (a personal
    plugin, disabled protocols, preferences) changes what tshark prints. A test that runs
    tshark itself passes env=tshark_env() (test_tshark_isolation.py holds them to it)."""
    global _HOME
    if _HOME is None:
        _HOME = tempfile.mkdtemp(prefix="tshark-home-")
        atexit.register(shutil.rmtree, _HOME, ignore_errors=True)
    env = dict(os.environ)
    env.update(HOME=_HOME, XDG_CONFIG_HOME=os.path.join(_HOME, ".config"),
               XDG_DATA_HOME=os.path.join(_HOME, ".local", "share"), LC_ALL="C")
    env.pop("WIRESHARK_CONFIG_DIR", None)
    return env


@contextmanager
def _environ(env: dict[str, str]):
    """Temporarily replace os.environ (pyshark starts tshark with the process environment)."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def tshark_version() -> tuple[int, ...]:
    """(major, minor, micro) of the tshark in use."""
    out = subprocess.run([require_tshark(), "--version"], capture_output=True, text=True,
                         env=tshark_env(), timeout=60).stdout
    m = re.search(r"TShark \(Wireshark\) (\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else ()


# --------------------------------------------------------------------------------------------
# Running tshark
# --------------------------------------------------------------------------------------------

@dataclass
class TsharkRun:
    """One tshark process: its command line, exit status and output."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> "TsharkRun":
        """Exit status 0 and `assert_clean` on the output. Returns self."""
        assert self.returncode == 0, (
            f"tshark exited {self.returncode}: {' '.join(self.args)}\n{self.stderr[-2000:]}")
        assert_clean(self.stdout, self.stderr)
        return self


def run_tshark(capture: str | os.PathLike | None, args: list[str] | tuple[str, ...] = (), *,
               timeout: float = 120) -> TsharkRun:
    """Run `tshark -n [-r capture] args...` in the isolated environment. Raises nothing on
    a non-zero exit; call `.check()` or `assert_clean(run.stdout, run.stderr)`."""
    cmd = [require_tshark()]
    if list(args[:1]) != ["-G"]:  # -G (glossary reports) must be tshark's first option
        cmd.append("-n")
    if capture is not None:
        cmd += ["-r", str(capture)]
    cmd += list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=tshark_env())
    return TsharkRun(cmd, p.returncode, p.stdout, p.stderr)


def tshark_fields(capture: str | os.PathLike, fields: list[str] | tuple[str, ...], *,
                  display_filter: str | None = None, extra_args: list[str] | tuple[str, ...] = (),
                  timeout: float = 120) -> tuple[TsharkRun, dict[int, dict[str, list[str]]]]:
    """`tshark -T fields` for the given fields, all occurrences of each.

    Returns (run, rows). rows maps each frame number to {field: [value, ...]}, with [] when the
    field is absent. The output always has a header row and the columns `_ws.malformed`,
    `_ws.expert.severity` and `_ws.expert.message`, so `assert_clean(run.stdout, run.stderr)`
    can see malformed packets and error-level expert infos.
    """
    cols = ["frame.number", *fields, "_ws.malformed", "_ws.expert.severity", "_ws.expert.message"]
    args = ["-T", "fields", "-E", "header=y", "-E", "occurrence=a", "-E", f"aggregator={AGGREGATOR}",
            "-E", "quote=n"]
    for c in cols:
        args += ["-e", c]
    if display_filter:
        args += ["-Y", display_filter]
    run = run_tshark(capture, [*args, *extra_args], timeout=timeout)
    rows: dict[int, dict[str, list[str]]] = {}
    lines = run.stdout.splitlines()
    header = lines[0].split("\t") if lines else cols
    for line in lines[1:]:
        values = line.split("\t")
        row = {name: (v.split(AGGREGATOR) if v != "" else [])
               for name, v in zip(header, values + [""] * (len(header) - len(values)))}
        rows[int(row["frame.number"][0])] = row
    return run, rows


@dataclass
class PysharkRun:
    """Packets from pyshark plus what tshark wrote: the PDML of those packets (stdout)
    and its stderr lines, for `assert_clean`."""

    packets: list
    stdout: str
    stderr: str
    args: list[str] = field(default_factory=list)


def run_pyshark(capture: str | os.PathLike, *, display_filter: str | None = None,
                extra_args: list[str] | tuple[str, ...] = ()) -> PysharkRun:
    """Dissect a capture with pyshark (tshark -T pdml underneath), in the isolated environment.

    pyshark drops tshark's stderr and keeps no raw output. This wrapper records both, so the
    caller can pass them to `assert_clean`.
    """
    tshark = require_tshark()
    import pyshark
    from pyshark.tshark.output_parser.tshark_xml import TsharkXmlParser

    class _RecordingParser(TsharkXmlParser):
        def __init__(self, sink: list[bytes]):
            super().__init__(parse_summaries=False)
            self._sink = sink

        def _parse_single_packet(self, packet):
            self._sink.append(packet)
            return super()._parse_single_packet(packet)

    class _Capture(pyshark.FileCapture):
        def __init__(self, *a, **kw):
            self.raw_pdml: list[bytes] = []
            self.stderr_lines: list[str] = []
            super().__init__(*a, **kw)

        def _setup_tshark_output_parser(self):
            return _RecordingParser(self.raw_pdml)

        async def _handle_process_stderr_forever(self, stderr):
            while True:
                line = await stderr.readline()
                if not line:
                    break
                self.stderr_lines.append(line.decode(errors="replace").rstrip("\n"))
                self._last_error_line = self.stderr_lines[-1]

    # pyshark installs a SafeChildWatcher attached to its own event loop and leaves it behind
    # once that loop is closed: any later asyncio subprocess in the run (Playwright's driver,
    # tests/test_html_report.py) then fails. Put the watcher back as it was.
    watcher = asyncio.get_child_watcher()
    with _environ(tshark_env()):
        cap = _Capture(str(capture), display_filter=display_filter, tshark_path=tshark,
                       custom_parameters=list(extra_args))
        try:
            packets = list(cap)
        finally:
            cap.close()
            asyncio.set_child_watcher(watcher)
    stdout = b"".join(cap.raw_pdml).decode(errors="replace")
    return PysharkRun(packets, stdout, "\n".join(cap.stderr_lines),
                      [tshark, "-T", "pdml", "-r", str(capture), *extra_args])


# --------------------------------------------------------------------------------------------
# The mandatory output check
# --------------------------------------------------------------------------------------------

_TEXT_PROBLEMS = [
    (re.compile(r"Lua Error"), "a Lua script raised an error while dissecting"),
    (re.compile(r"Lua: Error during loading"), "a Lua script failed to load"),
    (re.compile(r"dissector bug", re.IGNORECASE), "Wireshark reported a dissector bug"),
    (re.compile(r"Malformed Packet"), "a packet was dissected as malformed"),
    (re.compile(r"_ws\.malformed"), "a packet was dissected as malformed"),
    (re.compile(r"Expert Info \(Error/"), "an expert info of severity Error (-V text)"),
    (re.compile(r'name="_ws\.expert\.severity"[^>]*\bshow="%d"' % PI_ERROR),
     "an expert info of severity Error (PDML)"),
    (re.compile(r'"_ws\.expert\.severity"\s*:\s*"?%d\b' % PI_ERROR),
     "an expert info of severity Error (JSON/EK)"),
]
_STDERR_PROBLEMS = [
    (re.compile(r"^tshark: ", re.MULTILINE), "tshark printed an error"),
    (re.compile(r"\*\* \(tshark:\d+\)"), "GLib warning or critical from tshark"),
    (re.compile(r"\[[A-Za-z0-9 _-]+ (?:CRITICAL|ERROR|WARNING)\]"), "Wireshark logged a warning or error"),
]
_FIELD_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _fields_header(stdout: str) -> list[str] | None:
    first = stdout.split("\n", 1)[0]
    cols = first.split("\t")
    if len(cols) > 1 and all(_FIELD_NAME.match(c) for c in cols) and any(c.startswith("_ws.") for c in cols):
        return cols
    return None


def _context(text: str, m: re.Match) -> str:
    start = text.rfind("\n", 0, m.start()) + 1
    end = text.find("\n", m.end())
    return text[start:end if end != -1 else len(text)][:300]


def assert_clean(stdout: str, stderr: str) -> None:
    """Fail if tshark's output shows a failed Lua script, a dissector bug, a malformed packet or
    an expert info of severity Error, whatever tshark's exit status was.

    stdout may be -V text, PDML (`run_pyshark`), JSON/EK, or `-T fields` output with a header
    row (`tshark_fields`, where the `_ws.malformed` and `_ws.expert.severity` columns are checked).
    """
    problems: list[str] = []
    text = stdout
    header = _fields_header(stdout)
    if header is not None:
        text = stdout.split("\n", 1)[1] if "\n" in stdout else ""
        for n, line in enumerate(text.splitlines(), start=2):
            values = dict(zip(header, line.split("\t")))
            if values.get("_ws.malformed"):
                problems.append(f"a packet was dissected as malformed: stdout line {n}: {line[:300]}")
            sev = values.get("_ws.expert.severity", "")
            if any(int(s) >= PI_ERROR for s in re.findall(r"\d+", sev)):
                problems.append(f"an expert info of severity Error: stdout line {n}: {line[:300]}")
    for pattern, what in _TEXT_PROBLEMS:
        for name, blob in (("stdout", text), ("stderr", stderr)):
            m = pattern.search(blob)
            if m:
                problems.append(f"{what}: {name}: {_context(blob, m)}")
    for pattern, what in _STDERR_PROBLEMS:
        m = pattern.search(stderr)
        if m:
            problems.append(f"{what}: stderr: {_context(stderr, m)}")
    if problems:
        unique = list(dict.fromkeys(problems))
        shown = unique[:25]
        more = f"\n  ... and {len(unique) - len(shown)} more" if len(unique) > len(shown) else ""
        raise AssertionError("tshark output is not clean:\n  " + "\n  ".join(shown) + more)
