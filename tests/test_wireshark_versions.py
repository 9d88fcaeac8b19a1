"""The committed plugin in three Wireshark releases (4.0 on the host, 4.4 and 4.6 in Debian
chroots, tests/wireshark_versions.py): every ibpath.* field identical on every capture of
captures/ and on generated packets, with no Lua error and no malformed packet anywhere; and
what root gets from 4.4, which runs no Lua as root."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ibpath_scapy.layers import ERF
from ibpath_scapy.capture.pcapio import PcapWriter
from ibpath_scapy.engines.wireshark import packaged_plugin

from conftest import CAPTURES
from test_plugin import NO_SHRINK, frame, ls_or_blob, write_ls_or_blob
from tshark_util import AGGREGATOR, TsharkRun, assert_clean, require_tshark, tshark_env
from wireshark_versions import (
    CHROOT_RELEASES, NOBODY, build_chroot, fields_args, host_run, plugin_fields,
)

PLUGIN = packaged_plugin()
FIELDS = plugin_fields(PLUGIN.read_text())
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def chroots():
    return {rel: build_chroot(rel) for rel in CHROOT_RELEASES}


def _rows(stdout: str) -> list[dict[str, str]]:
    """Per frame {column: value} of `-T fields` output, empty columns left out; the
    _ws.malformed and _ws.expert.* columns are kept, so experts are compared too."""
    lines = stdout.splitlines()
    header = lines[0].split("\t")
    return [{h: _BOOL.sub(lambda m: "1" if m.group(0) == "True" else "0", v)
             for h, v in zip(header, line.split("\t")) if v} for line in lines[1:]]


# `-T fields` prints a boolean as 1/0 up to 4.2 and True/False from 4.4 on: the plugin's value
# is the same, the printing is not (the only normalisation made).
_BOOL = re.compile(r"(?<![^|])(?:True|False)(?![^|])")


EXPERT_COLS = ["-T", "fields", "-E", "occurrence=a", "-E", f"aggregator={AGGREGATOR}",
               "-e", "_ws.expert.message", "-e", "_ws.expert.severity"]


def _own_experts(row: dict[str, str], builtin_line: str) -> None:
    """Drop from row the experts Wireshark's own dissectors give without the plugin: those
    differ between releases (4.0's InfiniBand dissector adds "Trailing stray characters")."""
    msgs = row.pop("_ws.expert.message", "").split(AGGREGATOR) if "_ws.expert.message" in row else []
    sevs = row.pop("_ws.expert.severity", "").split(AGGREGATOR) if "_ws.expert.severity" in row else []
    bmsg, _, bsev = builtin_line.partition("\t")
    builtin = list(zip(bmsg.split(AGGREGATOR), bsev.split(AGGREGATOR))) if bmsg else []
    kept = []
    for pair in zip(msgs, sevs):
        if pair in builtin:
            builtin.remove(pair)
        else:
            kept.append(pair)
    if kept:
        row["_ws.expert.message"] = AGGREGATOR.join(m for m, _ in kept)
        row["_ws.expert.severity"] = AGGREGATOR.join(s for _, s in kept)


def fields_in_every_release(capture: Path, chroots) -> dict[str, list[dict[str, str]]]:
    """{release: per-frame {field: values}} for capture, each run checked clean; experts are
    the plugin's own (what the release's built-in dissectors add is taken out)."""
    args = fields_args(FIELDS)
    runs = {"4.0": (host_run(["-r", str(capture), "-X", f"lua_script:{PLUGIN}", *args]),
                    host_run(["-r", str(capture), *EXPERT_COLS]))}
    for rel, ch in chroots.items():
        staged, (lua, cap) = ch.stage(PLUGIN, capture)
        try:
            runs[rel] = (ch.run(["-r", cap, "-X", f"lua_script:{lua}", *args]),
                         ch.run(["-r", cap, *EXPERT_COLS]))
        finally:
            shutil.rmtree(staged, ignore_errors=True)
    out = {}
    for rel, (run, plain) in runs.items():
        for r in (run, plain):
            assert r.returncode == 0, f"tshark {rel} exited {r.returncode}: {r.stderr[-1500:]}"
            # no Lua error, no dissector bug, nothing on stderr; rule experts of severity Error
            # are what the corpus is for, so they are compared between releases instead
            assert_clean("", r.stderr)
        for bad in ("Lua Error", "Lua: Error during loading", "Dissector bug"):
            assert bad not in run.stdout, f"tshark {rel}: {bad} in the output"
        rows = _rows(run.stdout)
        builtin = plain.stdout.split("\n")
        for i, row in enumerate(rows):
            _own_experts(row, builtin[i] if i < len(builtin) else "")
        out[rel] = rows
    return out


def assert_identical(per_release: dict[str, list[dict[str, str]]], where,
                     malformed_ok=lambda i: False) -> int:
    """Every release gives the 4.0 fields frame for frame, and no frame is malformed but
    where malformed_ok(i) allows it; returns the values compared."""
    base = per_release["4.0"]
    for i, row in enumerate(base):
        assert "_ws.malformed" not in row or malformed_ok(i), f"{where(i)}: malformed in 4.0"
    for rel, rows in per_release.items():
        assert len(rows) == len(base), f"{rel}: {len(rows)} frames, 4.0: {len(base)}"
        for i, (a, b) in enumerate(zip(base, rows)):
            if a != b:
                diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
                pytest.fail(f"{where(i)}: {len(diff)} fields differ between tshark {rel} and "
                            "4.0: " + "; ".join(f"{k} {b.get(k)!r} vs {a.get(k)!r}"
                                                for k in diff[:6]))
    return sum(len(v.split(AGGREGATOR)) for r in base for k, v in r.items()
               if k.startswith("ibpath."))


def test_every_release_is_the_one_it_claims(chroots):
    require_tshark()
    assert host_run(["--version"]).stdout.startswith("TShark (Wireshark) 4.0.")
    assert {rel: ch.version.rsplit(".", 1)[0] for rel, ch in chroots.items()} == {
        "4.4": "4.4", "4.6": "4.6"}


def test_fields_identical_on_every_committed_capture(chroots, tmp_path):
    files = sorted(p for d in ("corpus", "opensm", "rxe") for p in (CAPTURES / d).iterdir()
                   if p.suffix in (".pcap", ".pcapng"))
    # scenarios about undecodable data are malformed in Wireshark too (test_scenarios.py)
    malformed = {r["file"] for r in json.loads((CAPTURES / "corpus" / "manifest.json")
                                               .read_text())["scenarios"] if r["malformed"]}
    assert len(files) >= 60
    # one concatenated pcapng (an interface per source file) keeps it to one tshark a release
    merged = tmp_path / "all.pcapng"
    subprocess.run(["mergecap", "-a", "-F", "pcapng", "-w", str(merged), *map(str, files)],
                   check=True, capture_output=True)
    counts = []
    for f in files:
        rows = host_run(["-r", str(f), "-T", "fields", "-e", "frame.number"]).stdout.split()
        counts.append((f.name, len(rows)))

    def owner(i):
        for name, n in counts:
            if i < n:
                return name, i + 1
            i -= n
        return "past the files", i + 1

    def where(i):
        return "%s frame %d" % owner(i)

    per = fields_in_every_release(merged, chroots)
    assert len(per["4.0"]) == sum(n for _, n in counts)
    compared = assert_identical(per, where, lambda i: owner(i)[0] in malformed)
    assert compared > 20_000, compared  # the plugin dissected the captures at all


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=NO_SHRINK)
@given(st.lists(frame(), min_size=40, max_size=40), st.lists(ls_or_blob(), min_size=20, max_size=20))
def test_fields_identical_on_generated_packets(tmp_path_factory, chroots, frames, items):
    """The plugin tests' property-based MADs (RoCEv2 and native IB) and netlink/blob messages."""
    d = tmp_path_factory.mktemp("gen")
    compared = 0
    eth = [bytes(f) for f in frames if not isinstance(f, ERF)]
    ib = [bytes(f) for f in frames if isinstance(f, ERF)]
    for name, pkts, lt in (("eth.pcap", eth, 1), ("ib.pcap", ib, 197)):
        if pkts:
            with PcapWriter(str(d / name), lt) as w:
                for i, b in enumerate(pkts):
                    w.write(b, float(i))
            compared += assert_identical(fields_in_every_release(d / name, chroots),
                                         lambda i, n=name: f"{n} frame {i + 1}")
    nl = write_ls_or_blob(d / "nl.pcapng", items)
    compared += assert_identical(fields_in_every_release(nl, chroots),
                                 lambda i: f"nl.pcapng frame {i + 1}")
    assert compared > 40 * 20


# -- root on 4.4: no Lua, and ibpath says so ---------------------------------------------------
def _root_tshark_wrapper(tmp_path: Path, root: Path) -> Path:
    """A `tshark` that is the chroot's, run as root, seeing /tmp and the checkout at their
    own paths (a private mount namespace, so nothing leaks to the host)."""
    binds = " && ".join(f'mkdir -p "{root}{d}" && mount --bind "{d}" "{root}{d}"'
                        for d in ("/tmp", str(REPO), sys.prefix))
    script = tmp_path / "tshark"
    script.write_text(f"#!/bin/sh\nexec unshare -m sh -c '{binds} && exec chroot \"{root}\" "
                      f"tshark \"$@\"' tshark \"$@\"\n")
    script.chmod(0o755)
    return script


def test_root_on_4_4_install_warns_and_tshark_engine_exits_2(chroots, tmp_path):
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    wrapper = _root_tshark_wrapper(tmp_path, chroots["4.4"].root)
    env = dict(os.environ, TSHARK=str(wrapper), HOME=str(tmp_path / "home"))
    ibpath = [sys.executable, "-m", "ibpath_scapy"]
    inst = subprocess.run([*ibpath, "dissector", "install", "--dir", str(tmp_path / "plugins")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert inst.returncode == 0, inst.stderr
    assert "warning: tshark 4.4." in inst.stderr and "runs no Lua plugin as root" in inst.stderr
    installed = tmp_path / "plugins" / "ibpath.lua"
    assert stat.S_IMODE(installed.stat().st_mode) == 0o644
    cap = CAPTURES / "corpus" / "conform-ucma.pcapng"
    audit = subprocess.run([*ibpath, "audit", "--engine", "tshark", "--quiet", str(cap)],
                           capture_output=True, text=True, env=env, timeout=300)
    assert audit.returncode == 2, audit.stdout + audit.stderr
    err = audit.stderr.strip().splitlines()
    assert any("runs no Lua plugin as root" in ln and str(cap) in ln for ln in err), err
    assert "Traceback" not in audit.stderr
    assert "No such file" not in audit.stderr  # never blames the capture


# -- the plugin loaded twice (issue 39) ----------------------------------------------------------

GLOBAL_LUA = "/usr/lib/x86_64-linux-gnu/wireshark/plugins"  # Debian's, in all three releases
PERSONAL_LUA = ".local/lib/wireshark/plugins"


def _tshark_with_copies(release: str, chroots, tmp_path: Path, capture: Path, copies: set[str],
                        args: list[str]) -> tuple[TsharkRun, dict[str, str]]:
    """tshark of release on capture with the plugin in each place of copies: "personal" (in a
    HOME of its own), "global" (laid over the global Lua folder in a private mount namespace,
    the real folder untouched) and "lua_script" (-X). Returns the run and where each copy is
    as tshark sees it."""
    chroot = chroots[release] if release != "4.0" else None
    root = chroot.root if chroot else Path("/")
    staged = Path(tempfile.mkdtemp(prefix="ibpath-copies-", dir=root / "tmp"))
    os.chmod(staged, 0o755)
    inside = "/" + str(staged.relative_to(root))
    where = {"personal": f"{inside}/home/{PERSONAL_LUA}/ibpath.lua",
             "global": f"{GLOBAL_LUA}/ibpath.lua", "lua_script": f"{inside}/script/ibpath.lua"}
    for place, folder in (("personal", f"home/{PERSONAL_LUA}"), ("global", "global"),
                          ("lua_script", "script")):
        (staged / folder).mkdir(parents=True)
        if place in copies:
            shutil.copyfile(PLUGIN, staged / folder / "ibpath.lua")
    shutil.copyfile(capture, staged / capture.name)
    for p in staged.rglob("*"):
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    cmd = ["tshark", "-n", "-r", f"{inside}/{capture.name}", *args]
    if "lua_script" in copies:
        cmd[1:1] = ["-X", f"lua_script:{where['lua_script']}"]
    cmd = ["env", "-i", f"HOME={inside}/home", "LC_ALL=C", "PATH=/usr/bin:/bin", *cmd]
    if chroot:
        cmd = ["chroot", f"--userspec={NOBODY}", str(root), *cmd]
    if "global" in copies:
        over = f"{root}{GLOBAL_LUA}"
        cmd = ["unshare", "-m", "sh", "-c", 'mount -t overlay overlay -o lowerdir="$1:$2" "$2" '
               '&& shift 2 && exec "$@"', "sh", str(staged / "global"), over, *cmd]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=600,
                           stdin=subprocess.DEVNULL, env=tshark_env())
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return TsharkRun(cmd, p.returncode, p.stdout, p.stderr), where


@pytest.mark.parametrize("copies", [("personal", "lua_script"), ("global", "lua_script"),
                                    ("global", "personal")])
@pytest.mark.parametrize("release", ["4.0", "4.4", "4.6"])
def test_plugin_installed_twice_loads_once_and_names_the_copy_it_skipped(
        release, copies, chroots, tmp_path):
    """`ibpath dissector install`, then `tshark -X lua_script:dissector/ibpath.lua` (or a
    personal and a global copy) gave "Lua: Error during loading" from Proto(...). Now the
    copy loaded second says which it is and which copy is loaded, and the fields are there."""
    require_tshark()
    if "global" in copies and shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is needed to lay a copy over the global folder")
    capture = CAPTURES / "corpus" / "res-no-followup.pcapng"
    args = ["-T", "fields", "-e", "frame.number", "-e", "ibpath.pathrecord.dlid",
            "-Y", "ibpath.pathrecord"]
    once, _ = _tshark_with_copies(release, chroots, tmp_path, capture, {copies[0]}, args)
    twice, where = _tshark_with_copies(release, chroots, tmp_path, capture, set(copies), args)
    for run in (once, twice):
        assert run.returncode == 0, run.stderr
        assert_clean(run.stdout, run.stderr)
    assert once.stdout == twice.stdout and once.stdout.count("\n") == 3  # query, answer, blob
    notes = [ln for ln in twice.stderr.splitlines() if ln.startswith("ibpath: ")]
    if copies == ("global", "personal") and release != "4.0":
        # 4.4 and later load no global Lua plugin of a personal one's file name
        assert notes == [], twice.stderr
        return
    first, second = (where[c] for c in copies)
    assert notes in ([f"ibpath: skipped {second}: the ibpath plugin is already loaded from "
                      f"{first}"],
                     [f"ibpath: skipped {first}: the ibpath plugin is already loaded from "
                      f"{second}"]), twice.stderr
    if "lua_script" in copies:  # the folders load before -X: the checkout's copy steps aside
        assert notes[0].startswith(f"ibpath: skipped {where['lua_script']}:")
