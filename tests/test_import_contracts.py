"""The package's layering as import-linter contracts ([tool.importlinter] in pyproject.toml):
lint-imports reads every import of the package, lazy ones included, and a contract broken by a
new upward import fails here. A contract that cannot fail proves nothing: the test also runs
lint-imports on a copy of the package with one upward import added, and sees it fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which(
    "lint-imports")

pytestmark = pytest.mark.skipif(LINT is None, reason="import-linter is not installed "
                                "(pip install -e '.[test]')")


def lint(root: Path) -> subprocess.CompletedProcess:
    # grimp reads the package from its files: the checkout (or the copy) first on the path
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([LINT, str(root / "pyproject.toml")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_contracts_hold():
    r = lint(ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "6 kept, 0 broken" in r.stdout


@pytest.mark.parametrize("module, line, broken", [
    # the assembler asking the audit: facts and the data-flow layers both say no
    ("facts/records.py", "from ..audit import engine", [
        "Facts never import an engine, the audit or a tool BROKEN",
        "Packages follow the data from bytes to report: imports only run down BROKEN"]),
    # the CRC reaching an engine, as crc -> native -> fast did before the C left fast/
    ("model/crc.py", "from ..engines.fast import decoder", [
        "The format model never imports an engine, capture I/O or the facts BROKEN"]),
    # one engine leaning on another's internals
    ("engines/fast/reader.py", "from ..tshark import tree", [
        "The engines: fast and tshark build on the Scapy engine, not on each other BROKEN"]),
    # a lazy import counts too
    ("native/__init__.py", "def _late():\n    from ..layers import ib", [
        "The C extension's package is a leaf BROKEN"]),
])
def test_an_upward_import_breaks_a_contract(tmp_path, module, line, broken):
    shutil.copytree(ROOT / "ibpath_scapy", tmp_path / "ibpath_scapy",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    path = tmp_path / "ibpath_scapy" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    r = lint(tmp_path)
    assert r.returncode != 0
    for name in broken:
        assert name in r.stdout, r.stdout[-3000:]
