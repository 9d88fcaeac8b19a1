"""The user's Wireshark: where the packaged plugin is, where tshark looks for Lua plugins,
and whether a given tshark really loads the plugin.

Wireshark says nothing when it skips a Lua plugin: 4.4 and later run no Lua as root, a build
may have no Lua at all, and a file another user cannot read is just missing. So the only
answer that holds is tshark's own: ``probe()`` runs it on an empty capture with a display
filter on one of the plugin's fields, which tshark refuses when the field is unknown.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

__all__ = ["PLUGIN_NAME", "PROBE_FIELD", "Tshark", "packaged_plugin", "find_tshark",
           "install_plugin", "pyshark_capture"]

PLUGIN_NAME = "ibpath.lua"
# A field every version of the plugin registers; the probe's display filter.
PROBE_FIELD = "ibpath.pathrecord.dlid"
# The plugin's protocol and the first part of every field name (ibpath.<layer>.<field>).
PREFIX = "ibpath"
# What a second copy of a plugin says on stderr as it steps aside (an installed copy and one
# given with -X lua_script:, a personal and a global one: Proto() of a taken name would raise,
# "Lua: Error during loading"). The Lua writes it with string.format; loaded_copy() reads it.
SKIPPED_COPY = "{prefix}: skipped {skipped}: the {prefix} plugin is already loaded from {loaded}"
# `loaded` for a copy generated before this note, which leaves no trace of its file
EARLIER_COPY = "an earlier copy ({why})"

# Wireshark 4.4 stopped running Lua when started as root (4.0 still does).
LUA_ROOT_REFUSED_FROM = (4, 4)
_EMPTY_PCAP = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)  # Ethernet, no frame
_NOISE = re.compile(r'^Running as user "[^"]*" and group "[^"]*"\.')


def skipped_copy_pattern(prefix: str) -> "re.Pattern":
    """A line of SKIPPED_COPY, its groups `skipped` and `loaded`."""
    pattern = re.escape(SKIPPED_COPY).replace(r"\{prefix\}", re.escape(prefix))
    pattern = pattern.replace(r"\{skipped\}", "(?P<skipped>.+?)").replace(
        r"\{loaded\}", "(?P<loaded>.+)")
    return re.compile("^" + pattern + "$", re.M)


def loaded_copy(stderr: str, prefix: str, plugin: str) -> str | None:
    """The copy tshark loaded instead of plugin, from what plugin said on stderr when it was
    skipped (SKIPPED_COPY); None when it was not."""
    for m in skipped_copy_pattern(prefix).finditer(stderr):
        if m.group("skipped") == plugin:
            return m.group("loaded")
    return None


def packaged_plugin() -> Path:
    """The plugin shipped in the package (in a checkout: dissector/ibpath.lua itself)."""
    return Path(str(resources.files("ibpath_scapy").joinpath("data", PLUGIN_NAME)))


def find_tshark() -> str | None:
    """$TSHARK when set (and executable), else tshark from PATH."""
    env = os.environ.get("TSHARK")
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    return shutil.which("tshark")


def _run(cmd: list[str], env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _stderr_lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not _NOISE.match(ln.strip())]


@dataclass(frozen=True)
class Tshark:
    """One tshark binary, as the current user runs it."""

    path: str
    version: tuple[int, int, int]
    has_lua: bool

    @classmethod
    def at(cls, path: str) -> "Tshark":
        """Ask ``path --version``; OSError or ValueError when it is not a tshark that runs."""
        out = _run([path, "--version"]).stdout
        m = re.search(r"TShark \(Wireshark\) (\d+)\.(\d+)\.(\d+)", out)
        if not m:
            raise ValueError(f"{path} --version does not name a TShark version")
        # "with Lua 5.2.4" / "without Lua" (4.0); "with Lua 5.4.6" (4.4 and later)
        has_lua = re.search(r"\bwith(?:out)? Lua\b", out)
        return cls(path, tuple(int(g) for g in m.groups()),
                   has_lua is None or not has_lua.group(0).startswith("without"))

    @property
    def version_text(self) -> str:
        return ".".join(map(str, self.version))

    @property
    def refuses_lua(self) -> str | None:
        """Why this tshark, run by this user, runs no Lua at all (None: it runs Lua)."""
        if not self.has_lua:
            return f"tshark {self.version_text} ({self.path}) was built without Lua"
        if os.geteuid() == 0 and self.version >= LUA_ROOT_REFUSED_FROM:
            return (f"tshark {self.version_text} ({self.path}) runs no Lua plugin as root "
                    f"(Wireshark {'.'.join(map(str, LUA_ROOT_REFUSED_FROM))} and later)")
        return None

    def folders(self, env: dict | None = None) -> dict[str, str]:
        """``tshark -G folders`` as a dict ("Personal Lua Plugins": "/home/u/.local/...")."""
        out = _run([self.path, "-G", "folders"], env=env).stdout
        folders: dict[str, str] = {}
        for line in out.splitlines():
            name, sep, value = line.partition(":")
            if sep and value.strip():
                folders.setdefault(name.strip(), value.strip())
        return folders

    def probe(self, plugin: str | os.PathLike | None = None, env: dict | None = None) -> str | None:
        """None when tshark has the plugin's fields (loaded with ``-X lua_script:plugin``, or
        from its plugin folders when plugin is None), else the reason in one sentence."""
        with tempfile.TemporaryDirectory(prefix="ibpath-probe-") as tmp:
            empty = Path(tmp) / "empty.pcap"
            empty.write_bytes(_EMPTY_PCAP)
            os.chmod(tmp, 0o755)
            os.chmod(empty, 0o644)
            cmd = [self.path, "-n", "-r", str(empty), "-Y", PROBE_FIELD]
            if plugin is not None:
                cmd[1:1] = ["-X", f"lua_script:{plugin}"]
            try:
                res = _run(cmd, env=env)
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"cannot run {self.path}: {exc}"
        if res.returncode == 0:
            return None
        lines = _stderr_lines(res.stderr)
        lua = next((ln for ln in lines if "Lua" in ln and "rror" in ln), None)
        if lua:
            return f"the plugin failed to load: {lua.removeprefix('tshark: ')}"
        why = self.refuses_lua
        if why:
            return why
        where = f"{plugin}" if plugin is not None else "its Lua plugin folders"
        return (f"tshark {self.version_text} ({self.path}) has no ibpath fields after loading "
                f"{where} ({lines[0] if lines else f'exit status {res.returncode}'})")


def install_plugin(text: str, directory: Path) -> Path:
    """Write the plugin into directory as ibpath.lua, atomically, readable by every user
    (0644: tshark run by another user, or a system-wide folder)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / PLUGIN_NAME
    write_atomically(target, text)
    return target


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace path with text in one rename, never leaving a half-written plugin; mode as a
    plain file would get it (mkstemp's 0600 would hide the plugin from other users)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".ibpath-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def pyshark_capture(path: str | os.PathLike, **kwargs):
    """A ``pyshark.FileCapture`` of path whose tshark loads the packaged plugin, so that every
    ``ibpath.*`` field is there to script over::

        cap = pyshark_capture("resolve.pcapng", display_filter="ibpath.pathrecord")
        for pkt in cap:
            print(pkt["ibpath.sa"].get_field("ibpath_pathrecord_dlid").all_fields)

    Keyword arguments go to FileCapture (display_filter, tshark_path, ...); extra tshark
    options can still be given with custom_parameters."""
    import pyshark

    params = kwargs.pop("custom_parameters", None) or []
    if isinstance(params, dict):
        params = [item for kv in params.items() for item in kv]
    params = ["-X", f"lua_script:{packaged_plugin()}", *params]
    return pyshark.FileCapture(str(path), custom_parameters=params, **kwargs)
