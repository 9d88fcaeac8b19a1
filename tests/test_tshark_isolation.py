"""Issue 39: nothing a user installed or configured for Wireshark changes what the test suite's
tshark prints. With ibpath's plugin in root's HOME, a fresh clone's suite had 94 failures.

Every tshark the tests run gets tshark_util.tshark_env() (a HOME, XDG_CONFIG_HOME and
XDG_DATA_HOME of its own). Here a HOME like a user's, with an older ibpath plugin among its
personal Lua plugins and Wireshark's InfiniBand dissector disabled in its personal
configuration, first changes what a plain tshark prints, then leaves tests of every kind of
tshark run in the suite passing; and every place in tests/ (and the fuzzer) that starts tshark
itself passes an environment."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tshark_util import require_tshark, tshark_env

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = ROOT / "captures" / "corpus" / "res-no-followup.pcapng"

# A plugin as an older `ibpath dissector install` left it: it takes the name "ibpath" first
# (personal plugins load before -X lua_script:), so the fields of the plugin under test are gone.
STALE_PLUGIN = 'local p = Proto("ibpath", "ibpath (an older copy)")\n'

# Tests of each way the suite runs tshark: tshark_util's run_tshark and run_pyshark
# (test_tshark_oracle), its tshark_fields (test_netlink's own, through tshark_env), the plugin
# oracle's tshark() with the plugin (test_plugin, test_luagen), tshark started by the test itself
# (test_opensm_capture, test_pcapio, test_luagen's -G fields), and the tshark engine, which
# isolates itself (test_inputs).
TESTS = [
    "tests/test_tshark_oracle.py::test_assert_clean_catches_lua_failures_that_exit_0",
    "tests/test_netlink.py::test_tshark_check_catches_a_malformed_packet",
    "tests/test_plugin.py::test_no_lua_error_and_no_malformed_on_real_captures[resolve.pcapng]",
    "tests/test_luagen.py::test_hostile_names_are_inert",
    "tests/test_opensm_capture.py::test_tshark_reads_every_frame_as_infiniband_sa",
    "tests/test_pcapio.py::test_interfaces_equal_tsharks_and_scapys",
    "tests/test_inputs.py::test_fifo_fed_by_a_writer_process[tshark]",
]


@pytest.fixture
def users_home(tmp_path) -> Path:
    home = tmp_path / "home"
    plugins = home / ".local" / "lib" / "wireshark" / "plugins"
    plugins.mkdir(parents=True)
    (plugins / "ibpath.lua").write_text(STALE_PLUGIN)
    config = home / ".config" / "wireshark"
    config.mkdir(parents=True)
    (config / "disabled_protos").write_text("infiniband\n")
    return home


def _as_user(home: Path) -> dict[str, str]:
    """This process's environment with home as the user's HOME (XDG defaults under it)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "WIRESHARK_CONFIG_DIR")}
    return dict(env, HOME=str(home))


def test_the_users_wireshark_changes_a_plain_tsharks_output(users_home):
    """The control: the HOME below is one that would change the suite's results."""
    cmd = [require_tshark(), "-n", "-r", str(CAPTURE), "-T", "fields", "-e", "infiniband.lrh.slid",
           "-X", f"lua_script:{ROOT / 'dissector' / 'ibpath.lua'}"]
    clean = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=tshark_env())
    user = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env=_as_user(users_home))
    assert clean.stdout.startswith("36\n") and "ibpath: skipped" not in clean.stderr
    assert user.stdout.startswith("\n")  # no InfiniBand dissector
    assert "ibpath: skipped " in user.stderr and "an earlier copy" in user.stderr


def test_the_suites_tshark_runs_ignore_the_users_wireshark(users_home, tmp_path):
    require_tshark()
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        f"--basetemp={tmp_path / 'inner'}", *TESTS],
                       cwd=ROOT, capture_output=True, text=True, timeout=900,
                       env=_as_user(users_home))
    summary = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr
    assert p.returncode == 0, p.stdout[-3000:]
    # every one ran and passed: none skipped (a parametrized test may count more than one)
    m = re.fullmatch(r"(\d+) passed in [\d.]+s(?: \(.*\))?", summary)
    assert m and int(m.group(1)) >= len(TESTS), summary


# -- every tshark the tests start themselves gets an environment ---------------------------------

_TSHARK = re.compile(r"""(["'])tshark\1|tshark|TSHARK|(?:\w+\.)?(?:tshark_path|require_tshark)\(\)""")
_SUBPROCESS = {"run", "Popen", "check_output", "call", "check_call"}


def _program(command: ast.expr, fn: ast.AST) -> ast.expr | None:
    """The first element of a command list (`[tshark, ...]`, `cmd + args`, or a name assigned
    such a list in the same function), None when it is not written out there."""
    if isinstance(command, ast.BinOp):
        command = command.left
    if isinstance(command, ast.Name):
        assigned = [n.value for n in ast.walk(fn) if isinstance(n, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == command.id for t in n.targets)]
        command = assigned[0] if assigned else command
        command = command.left if isinstance(command, ast.BinOp) else command
    return command.elts[0] if isinstance(command, ast.List) and command.elts else None


def tshark_runs_without_env(path: Path) -> list[str]:
    """FILE:LINE of each subprocess call in path that starts tshark without env=."""
    src = path.read_text()
    bad = []
    for fn in ast.walk(ast.parse(src)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for call in ast.walk(fn):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr in _SUBPROCESS and isinstance(call.func.value, ast.Name)
                    and call.func.value.id == "subprocess" and call.args):
                continue
            head = _program(call.args[0], fn)
            if head is not None and _TSHARK.fullmatch(ast.get_source_segment(src, head)) \
                    and not any(k.arg == "env" for k in call.keywords):
                bad.append(f"{path.name}:{call.lineno}")
    return bad


def test_the_check_finds_a_tshark_run_without_env(tmp_path):
    f = tmp_path / "test_x.py"
    f.write_text("import subprocess\n\ndef test_a(p):\n    cmd = ['tshark', '-r', p]\n"
                 "    subprocess.run(cmd + ['-V'], check=True)\n"
                 "    subprocess.run([tshark_path(), '-G'], env={})\n")
    assert tshark_runs_without_env(f) == ["test_x.py:5"]


def test_every_tshark_the_tests_start_gets_an_environment():
    files = sorted((ROOT / "tests").glob("*.py")) + [ROOT / "tools" / "fuzz.py"]
    assert [b for f in files for b in tshark_runs_without_env(f)] == []
