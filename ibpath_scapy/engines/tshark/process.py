"""Running tshark for the engine: the plugin and its helper loaded, tshark's JSON read
packet by packet as it streams, every run checked for Lua errors and dissector bugs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from importlib import resources
from pathlib import Path
from typing import Iterator

from ..scapy import blobsniff
from ..scapy.decode import DecodeStats
from ...facts import public
from ...layers.ib import ExportedPDU, LINKTYPE_WIRESHARK_UPPER_PDU
from ...layers.pathdata import BLOB_DISSECTOR
from ...capture.pcapio import (
    CaptureError,
    MAX_RAW_BLOB,
    PCAPNG_SHB,
    PcapNgWriter,
    read_frames,
    sniff_format,
)
from ..wireshark import (PREFIX, Tshark, find_tshark, loaded_copy, packaged_plugin,
                        skipped_copy_pattern)
from .builder import _Builder
from .clock import _Clock
from .tree import _first, _frame_of


class TsharkEngineError(CaptureError):
    """tshark is missing, cannot read the file, or the plugin failed on it. The message is one
    line and names the file. A CaptureError, so that callers that handle unreadable inputs
    (exit status 2) handle this too."""


# --------------------------------------------------------------------------------------------
# tshark and the plugin
# --------------------------------------------------------------------------------------------


# Capture facts the plugin cannot give and tshark's JSON output would drop come from a helper
# postdissector loaded with a second -X lua_script: data/engine_helper.lua says which and why.
HELPER = resources.files("ibpath_scapy").joinpath("data", "engine_helper.lua")
_HELPER_LUA = HELPER.read_text()

# Wireshark protocols whose fields the engine reads, besides the plugin's own.
_WIRESHARK_PROTOCOLS = ("frame", "pkt_comment", "ip", "ipv6", "udp", "netlink", "exported_pdu")
# A Lua error or a dissector bug is a tree item of its own: a key of the packet's JSON (with -J a
# {"filtered": ...} stand-in), "Lua Error: <file>:<line>: <msg>" or "[Dissector bug, ...]".
# Matching keys, not any text, keeps a packet comment that quotes them from failing a run.
_FAILURE = re.compile(r'^\s*"((?:Lua Error|\[?Dissector bug)[^"\n]*)"\s*:', re.M | re.I)


tshark_path = find_tshark


def plugin_path() -> Path:
    """The plugin this package ships, which matches its layers (a personal copy may lag)."""
    return packaged_plugin()


def _plugin_protocols(text: str) -> list[str]:
    return sorted(set(re.findall(r'Proto(?:\.new)?\(\s*"([^"]+)"', text)))


def _packets(stream) -> Iterator[str]:
    """The text of each packet object of `tshark -T json` output, as it streams."""
    buf: list[str] | None = None
    for line in stream:
        if buf is None:
            if line.startswith("  {"):
                buf = [line]
            continue
        if line.startswith("  }"):
            buf.append("}")
            yield "".join(buf)
            buf = None
        else:
            buf.append(line)


def _raw_blob_capture(path: str, tmpdir: str, as_blob: bool = False) -> str:
    """A raw blob file as a one-frame pcapng (exported PDU "ibpath.blob"), or CaptureError as
    decode.py raises it for a file that is neither a capture nor a blob."""
    with open(path, "rb") as f:
        data = f.read(MAX_RAW_BLOB + 1)
    if not data:
        raise TsharkEngineError(f"{path}: not a capture or blob file (empty)")
    if len(data) > MAX_RAW_BLOB or not (as_blob or blobsniff.plausible(data)):
        raise TsharkEngineError(f"{path}: not a capture or blob file "
                                f"(starts with {data[:8].hex()} at byte offset 0)")
    out = os.path.join(tmpdir, "blob.pcapng")
    with PcapNgWriter(out) as w:
        w.write(bytes(ExportedPDU.for_dissector(BLOB_DISSECTOR)) + data,
                LINKTYPE_WIRESHARK_UPPER_PDU, 0.0)
    return out


def tshark_records(path: str, *, stats: DecodeStats | None = None, tshark: str | None = None,
                   plugin: str | os.PathLike | None = None,
                   as_blob: bool = False, render: bool = False) -> Iterator[dict]:
    """Decoded records of every frame of a capture (or of a raw blob file; of any file with
    as_blob), from tshark and the
    ibpath plugin, in the format of decode.decode_file (see the module docstring for how and
    where they differ). Streams: tshark runs once, and its output is read packet by packet.

    stats, when given, is filled as decode.Decoder fills its own (frames, kinds, malformed).
    Raises TsharkEngineError (a pcapio.CaptureError) when tshark is missing, the plugin fails,
    or tshark cannot read the file to its end, after the records of the frames before.
    render=True gives the records' problems as sentences (facts.public), not facts.Problem."""
    edge = public if render else (lambda rec: rec)
    tshark = tshark or tshark_path()
    if not tshark:
        raise TsharkEngineError(f"{path}: tshark not found (install Wireshark's tshark, or set "
                                "$TSHARK); the tshark engine needs it")
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise TsharkEngineError(f"{path}: {exc.strerror or exc}") from None
    with tempfile.TemporaryDirectory(prefix="ibpath-tshark-") as tmp:
        capture, raw_blob = path, as_blob or sniff_format(head) == "other"
        if raw_blob:
            capture = _raw_blob_capture(path, tmp, as_blob)
            head = PCAPNG_SHB
        plugin_file = Path(plugin) if plugin else plugin_path()
        helper = Path(tmp) / "ibpath_engine.lua"
        helper.write_text(_HELPER_LUA)
        protocols = _plugin_protocols(plugin_file.read_text()) + ["ibpath_engine"]
        home = Path(tmp) / "home"
        home.mkdir()
        env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
                   XDG_DATA_HOME=str(home / ".local" / "share"), LC_ALL="C")
        env.pop("WIRESHARK_CONFIG_DIR", None)
        _require_plugin(path, tshark, plugin_file, env)
        cmd = [tshark, "-n", "-r", capture, "-X", f"lua_script:{plugin_file}",
               "-X", f"lua_script:{helper}", "-T", "json",
               "-J", " ".join(list(_WIRESHARK_PROTOCOLS) + protocols)]
        frames, damage = (0, None) if raw_blob else _container_damage(capture)
        if damage is not None:
            if not frames:
                raise TsharkEngineError(str(damage)) from None
            cmd += ["-c", str(frames)]  # the frames before the damage, as decode gives them
        builder = _Builder(raw_blob=raw_blob)
        if stats is not None:
            builder.stats = stats
        clock = _Clock(capture, head)
        errfile = open(Path(tmp) / "stderr", "w+")
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errfile, env=env,
                                    text=True, encoding="utf-8", errors="replace")
        except OSError as exc:
            errfile.close()
            clock.close()
            raise TsharkEngineError(f"{path}: cannot run {tshark}: {exc.strerror or exc}") from None
        def stderr_text() -> str:
            errfile.seek(0)
            return errfile.read()

        try:
            first = True
            for text in _packets(proc.stdout):
                if first:  # a script that fails to load says so before the first packet
                    _check_stderr(path, stderr_text(), 0, plugin_file)
                    first = False
                bad = _FAILURE.search(text)
                if bad:
                    m = re.search(r'"frame\.number":\s*"(\d+)"', text)
                    raise TsharkEngineError(
                        f"{path}: frame {m.group(1) if m else '?'}: the ibpath plugin failed "
                        f"in tshark ({bad.group(1)})")
                try:
                    layers = _first(_first(json.loads(text, object_pairs_hook=list),
                                           "_source"), "layers")
                    fr = _frame_of(layers, clock)
                except (ValueError, TypeError) as exc:
                    raise TsharkEngineError(f"{path}: tshark's JSON output cannot be read "
                                            f"({exc})") from None
                if raw_blob:
                    fr.time = 0.0
                yield from map(edge, builder.feed(fr))
            proc.wait()
            if damage is not None:
                raise TsharkEngineError(str(damage)) from None
            _check_stderr(path, stderr_text(), proc.returncode, plugin_file)
            yield from map(edge, builder.finish())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            errfile.close()
            clock.close()


def _container_damage(path: str) -> tuple[int, CaptureError | None]:
    """How many frames the pcap or pcapng container holds before it breaks its format, and
    the default engine's CaptureError there (None: whole). tshark falls back to other readers
    where the format breaks (a pcapng cut inside its section header becomes one frame of its
    MIME-file dissector): the file is read first as pcapio reads it (the C loops: ~0.1 s for
    200,000 frames), so that the engine decodes the same frames and refuses the same file."""
    count = 0
    try:
        for _ in read_frames(path):
            count += 1
    except CaptureError as exc:
        return count, exc
    return count, None


def _require_plugin(path: str, tshark: str, plugin: Path, env: dict) -> None:
    """TsharkEngineError naming why this tshark loads no ibpath protocol (root on Wireshark
    4.4 and later, no Lua, a plugin that fails), before the capture is blamed for it."""
    try:
        problem = Tshark.at(tshark).probe(plugin, env=env)
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        problem = f"cannot ask {tshark} its version ({exc})"
    if problem:
        raise TsharkEngineError(f"{path}: the tshark engine cannot use {tshark}: {problem}; "
                                "the capture was not read (use the default engine, or run as a "
                                "regular user)")


_STDERR_NOISE = re.compile(
    r'^Running as user "[^"]*" and group "[^"]*"\. This could be dangerous\.$')


def _other_copy(path: str, err: str, plugin: Path) -> None:
    """TsharkEngineError when tshark skipped plugin for another copy of it it had loaded first
    (a global plugin folder: the engine's HOME is its own) that is not the same file: its
    fields would not be this package's layers."""
    loaded = loaded_copy(err, PREFIX, str(plugin))
    if loaded is None:
        return
    try:
        same = Path(loaded).read_bytes() == plugin.read_bytes()
    except OSError:  # an earlier copy, which does not say where it is
        same = False
    if not same:
        raise TsharkEngineError(
            f"{path}: tshark loaded another ibpath plugin before this package's ({loaded}), "
            f"which differs from {plugin}; the capture was not read (remove that copy, or "
            "install this one over it with `ibpath dissector install --dir`)")


def _check_stderr(path: str, err: str, returncode: int, plugin: Path) -> None:
    """A Lua script that failed to load (tshark goes on without it and exits 0), another copy
    of the plugin in its place (_other_copy), or tshark's own complaint when it exits non-zero
    (a file cut short, an unsupported link type)."""
    _other_copy(path, err, plugin)
    skipped = skipped_copy_pattern(PREFIX)
    lines = [ln.strip() for ln in err.splitlines()
             if ln.strip() and not _STDERR_NOISE.match(ln.strip()) and not skipped.match(ln)]
    for ln in lines:
        if "Lua" in ln and "rror" in ln:
            raise TsharkEngineError(f"{path}: a Lua script failed to load in tshark: "
                                    f"{ln.removeprefix('tshark: ')}")
    if returncode != 0:
        first = next((i for i, ln in enumerate(lines) if ln.startswith("tshark:")), None)
        if first is None:
            why = lines[0] if lines else f"exit status {returncode}"
        else:
            why = lines[first].removeprefix("tshark: ")
            if first + 1 < len(lines) and lines[first + 1].startswith("("):
                why += " " + lines[first + 1]
        raise TsharkEngineError(f"{path}: tshark cannot read it: {why}")
