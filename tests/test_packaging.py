"""ibpath as a user gets it: a wheel built from this checkout, installed into a fresh venv
outside it, run from a folder with no source tree anywhere on sys.path."""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile

import pytest

from conftest import CAPTURES, ROOT
from tshark_util import assert_clean, require_tshark

COMMITTED_PLUGIN = ROOT / "dissector" / "ibpath.lua"
CAPTURE = CAPTURES / "corpus" / "res-no-followup.pcapng"
DLID = 38  # the path's DLID in that capture (`ibpath decode` frame 2)


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


def ibpath(installed, *args, ok=(0,)) -> subprocess.CompletedProcess:
    env, bindir, work = installed
    p = _run([str(bindir / "ibpath"), *map(str, args)], cwd=work, env=env)
    assert p.returncode in ok, f"ibpath {' '.join(map(str, args))} exited {p.returncode}:\n" \
                               f"{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    assert "Traceback" not in p.stderr, p.stderr
    return p


# -- what the wheel holds ---------------------------------------------------------------------
def test_wheel_carries_what_runs_and_the_license(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        assert {"ibpath_scapy/luagen/runtime.lua", "ibpath_scapy/data/ibpath.lua",
                "ibpath_scapy/data/engine_helper.lua",
                "ibpath_scapy/record/ibpathrec.c", "ibpath_scapy/lab/guestinit.sh",
                "ibpath_scapy/__main__.py", "_ibpath_launcher.py"} <= names
        assert z.read("ibpath_scapy/data/ibpath.lua") == COMMITTED_PLUGIN.read_bytes()
        (lic,) = [n for n in names if n.endswith("licenses/LICENSE")]
        assert b"GNU GENERAL PUBLIC LICENSE\n                       Version 2, June 1991" in z.read(lic)
        meta = z.read(next(n for n in names if n.endswith("METADATA"))).decode()
        assert "License-Expression: GPL-2.0-only" in meta
        # a package's texts cite documents by name, never paths beside this repository
        for n in names:
            if n.endswith((".py", ".lua", ".c", ".sh")) or n.endswith("METADATA"):
                text = z.read(n).decode()
                assert "../shared" not in text and "shared/seed" not in text, n


def test_sdist_builds_the_same_wheel_contents(tmp_path, wheel):
    p = _run([sys.executable, "-m", "build", "--version"])
    if p.returncode != 0:
        pytest.skip("python -m build is not installed (test extra)")
    p = _run([sys.executable, "-m", "build", "-q", "--sdist", "--outdir", str(tmp_path), str(ROOT)])
    assert p.returncode == 0, p.stderr[-3000:]
    (sdist,) = tmp_path.glob("*.tar.gz")
    p = _run([sys.executable, "-m", "build", "-q", "--wheel", "--outdir", str(tmp_path / "w"),
              str(sdist)])
    assert p.returncode == 0, p.stderr[-3000:]
    (w2,) = (tmp_path / "w").glob("*.whl")
    with zipfile.ZipFile(wheel) as a, zipfile.ZipFile(w2) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())
        assert b.read("ibpath_scapy/data/ibpath.lua") == COMMITTED_PLUGIN.read_bytes()


# -- every verb from the installed package ---------------------------------------------------
def test_runs_from_site_packages_not_the_checkout(installed):
    env, bindir, work = installed
    p = _run([str(bindir / "python"), "-c", "import ibpath_scapy, sys; print(ibpath_scapy.__file__);"
              "print(sys.path)"], cwd=work, env=env)
    where, path = p.stdout.splitlines()
    assert "site-packages" in where and str(ROOT) not in where
    assert str(ROOT) not in path
    p = _run([str(bindir / "python"), "-m", "ibpath_scapy", "--version"], cwd=work, env=env)
    assert p.returncode == 0 and re.fullmatch(r"ibpath \d+\.\d+\.\d+\n", p.stdout), p


def test_the_command_leaves_scapys_routes_unread_and_the_library_not(installed):
    """The console script (_ibpath_launcher) turns Scapy's route loading and its listing of
    the network interfaces off before the package imports Scapy; `import ibpath_scapy` and a
    process that imported Scapy first keep Scapy's own behaviour (the host has at least lo)."""
    env, bindir, work = installed
    run_command = ("import sys, _ibpath_launcher\n"
                   "sys.argv = ['ibpath', '--version']\n"
                   "try:\n    _ibpath_launcher.main()\nexcept SystemExit:\n    pass\n"
                   "from scapy.config import conf\n"
                   "print(conf.route_autoload, conf.route6_autoload, conf.route.routes,\n"
                   "      'ibpath_scapy.layers' in sys.modules, len(conf.ifaces))\n")
    p = _run([str(bindir / "python"), "-c", run_command], cwd=work, env=env)
    assert p.stdout.split("\n")[-2] == "False False [] True 0", p
    p = _run([str(bindir / "python"), "-c", "import scapy.route\n" + run_command], cwd=work,
             env=env)
    got = p.stdout.split("\n")[-2]
    assert got.startswith("True True ") and not got.endswith(" 0"), p
    p = _run([str(bindir / "python"), "-c", "import ibpath_scapy\nfrom scapy.config import conf\n"
              "from scapy.arch import read_routes\n"
              "print(conf.route_autoload, conf.route.routes == read_routes(),\n"
              "      len(conf.ifaces) > 0)"], cwd=work, env=env)
    assert p.stdout == "True True True\n", p


def test_an_audit_starts_without_what_only_other_verbs_need(installed):
    """`ibpath audit --format json` (the console script's path, in-process) loads neither the
    JUnit writer's XML module (urllib, http and ssl behind it) nor the recorder: what keeps
    its start short (bench/README, "the start")."""
    env, bindir, work = installed
    code = ("import sys, _ibpath_launcher\n"
            f"sys.argv = ['ibpath', 'audit', '--quiet', '--format', 'json', {str(CAPTURE)!r}]\n"
            "try:\n    _ibpath_launcher.main()\nexcept SystemExit:\n    pass\n"
            "late = ['xml.sax.saxutils', 'urllib.request', 'ibpath_scapy.record.process',\n"
            "        'pyarrow', 'duckdb', 'distributed', 'dask']\n"
            "print('loaded:', [m for m in late if m in sys.modules])\n")
    p = _run([str(bindir / "python"), "-c", code], cwd=work, env=env)
    assert p.stdout.splitlines()[-1] == "loaded: []", p
    assert '"findings"' in p.stdout, p


def test_the_fleet_verbs_name_the_missing_extra(installed):
    """The base install (no extra) has none of pyarrow, duckdb, dask: --format parquet,
    --resolutions-out and --dask say which extra brings them and exit 2, before any audit;
    the other formats and --annotate (pcapio's own writer) need none of it."""
    env, bindir, work = installed
    p = _run([str(bindir / "python"), "-c", "import importlib.util as u; print([m for m in "
              "('pyarrow', 'duckdb', 'distributed', 'dask') if u.find_spec(m)])"], cwd=work, env=env)
    assert p.stdout == "[]\n", p
    for args, what in ((["--format", "parquet", "-o", work / "f.parquet"], "--format parquet"),
                       (["--resolutions-out", work / "r.parquet"], "--resolutions-out"),
                       (["--dask", "tcp://127.0.0.1:1"], "--dask")):
        p = ibpath(installed, "audit", *args, CAPTURE, ok=(2,))
        assert what in p.stderr and "pip install 'ibpath_scapy[fleet]'" in p.stderr, p.stderr
        assert p.stdout == ""
    assert not (work / "f.parquet").exists() and not (work / "r.parquet").exists()
    ibpath(installed, "audit", "--annotate", work / "a.pcapng", CAPTURE, ok=(1,))
    assert (work / "a.pcapng").stat().st_size > CAPTURE.stat().st_size


def test_the_installed_package_runs_the_c_loops(installed, wheel):
    """Where the machine has a compiler and Python's headers (tools/install.sh), the wheel
    carries the C extension (built from the sdist, its shared header included) and the
    installed package picks it: the capture readers' loops and the MAD decoder."""
    import shutil
    import sysconfig
    from pathlib import Path
    if not shutil.which("gcc") or not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        pytest.skip("no gcc or no Python.h: the wheel is the pure-Python build")
    with zipfile.ZipFile(wheel) as z:
        assert [n for n in z.namelist() if re.fullmatch(r"ibpath_scapy/native/_scan\..*\.so", n)]
    env, bindir, work = installed
    p = _run([str(bindir / "python"), "-c", "from ibpath_scapy.capture import pcapio; "
              "m = pcapio._native_scan(); print(m.__name__, m.__file__)"], cwd=work, env=env)
    name, where = p.stdout.split()
    assert name == "ibpath_scapy.native._scan" and "site-packages" in where, p
    p = _run([str(bindir / "python"), "-c", "from ibpath_scapy.engines.fast import FastDecoder; "
              "print(type(FastDecoder()._native).__name__)"], cwd=work, env=env)
    assert p.stdout == "MadDecoder\n", p


def test_every_verb_has_help(installed):
    for verb in ("decode", "audit", "craft", "record", "dissector", "lab"):
        assert "usage: ibpath" in ibpath(installed, verb, "--help").stdout


def test_decode_craft_and_audit_in_every_format(installed):
    env, bindir, work = installed
    ibpath(installed, "craft", "res-no-followup", "-o", work / "nf.pcapng")
    out = ibpath(installed, "decode", work / "nf.pcapng").stdout
    assert "SA GetResp(PathRecord)" in out
    rows = [json.loads(ln) for ln in
            ibpath(installed, "decode", "--format", "json", CAPTURE).stdout.splitlines()]
    assert [r["kind"] for r in rows][:3] == ["sa", "sa", "blob"]
    assert rows[1]["path_records"][0]["dlid"] == DLID
    want = {"BLOB-BIDIR-NOT-REVERSIBLE", "BLOB-GMP-NOT-REVERSIBLE", "RES-NO-FOLLOWUP"}
    text = ibpath(installed, "audit", CAPTURE, ok=(1,)).stdout
    assert all(r in text for r in want)
    js = json.loads(ibpath(installed, "audit", "--format", "json", CAPTURE, ok=(1,)).stdout)
    assert {f["rule"] for f in js["findings"]} == want
    ibpath(installed, "audit", "--format", "junit", "-o", work / "r.xml", CAPTURE, ok=(1,))
    assert ET.parse(work / "r.xml").getroot().iter("testcase")
    ibpath(installed, "audit", "--format", "html", "-o", work / "r.html", CAPTURE, ok=(1,))
    assert "RES-NO-FOLLOWUP" in (work / "r.html").read_text()
    # the craft from the installed package writes the committed corpus file's findings
    js2 = json.loads(ibpath(installed, "audit", "--format", "json", work / "nf.pcapng",
                            ok=(1,)).stdout)
    assert {f["rule"] for f in js2["findings"]} == want


def test_tshark_engine_from_the_installed_package(installed):
    require_tshark()
    plain = json.loads(ibpath(installed, "audit", "--format", "json", CAPTURE, ok=(1,)).stdout)
    ts = json.loads(ibpath(installed, "audit", "--engine", "tshark", "--format", "json", CAPTURE,
                           ok=(1,)).stdout)
    assert ts["findings"] == plain["findings"]


def test_generate_equals_the_committed_plugin(installed):
    env, bindir, work = installed
    ibpath(installed, "dissector", "generate", "-o", work / "x.lua")
    assert (work / "x.lua").read_bytes() == COMMITTED_PLUGIN.read_bytes()
    # outside a checkout the default is ./ibpath.lua, and the help says so
    assert "ibpath.lua in the current directory" in ibpath(installed, "dissector", "generate",
                                                           "--help").stdout
    ibpath(installed, "dissector", "generate")
    assert (work / "ibpath.lua").read_bytes() == COMMITTED_PLUGIN.read_bytes()


def test_install_is_world_readable_and_tshark_loads_it_without_x(installed, tmp_path):
    tshark = require_tshark()
    env, bindir, work = installed
    home = tmp_path / "home"
    env = dict(env, HOME=str(home))
    plugins = home / ".local" / "lib" / "wireshark" / "plugins"
    p = _run([str(bindir / "ibpath"), "dissector", "install", "--dir", str(plugins)], env=env,
             cwd=work)
    assert p.returncode == 0, p.stderr
    target = plugins / "ibpath.lua"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert target.read_bytes() == COMMITTED_PLUGIN.read_bytes()
    assert f"installed {target}" in p.stderr and "loads it" in p.stderr, p.stderr
    # plain tshark, no -X: the personal plugin folder under HOME
    run = _run([tshark, "-n", "-r", str(CAPTURE), "-Y", f"ibpath.pathrecord.dlid == {DLID}",
                "-T", "fields", "-e", "frame.number"], env=env)
    assert run.returncode == 0, run.stderr
    assert_clean("", run.stderr)
    assert run.stdout.split() == ["2", "3"]  # the SA's answer and the blob that carries it


def test_install_default_folder_comes_from_tshark(installed, tmp_path):
    require_tshark()
    env, bindir, work = installed
    env = dict(env, HOME=str(tmp_path / "h2"))
    p = _run([str(bindir / "ibpath"), "dissector", "install"], env=env, cwd=work)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "h2" / ".local" / "lib" / "wireshark" / "plugins" / "ibpath.lua").is_file()


def test_pyshark_helper_gives_the_plugin_fields(installed):
    require_tshark()
    env, bindir, work = installed
    code = ("from ibpath_scapy.engines.wireshark import pyshark_capture\n"
            f"cap = pyshark_capture({str(CAPTURE)!r}, display_filter='ibpath.sa.record_count')\n"
            "print([int(p['ibpath.sa'].get_field('ibpath_pathrecord_dlid').all_fields[0].show, 0) "
            "for p in cap]); cap.close()\n")
    p = _run([str(bindir / "python"), "-c", code], cwd=work, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    # the query (frame 1) carries DLID 0 (not in its mask); the answer's DLID is the path's
    assert p.stdout.strip() == f"[0, {DLID}]", p.stdout
