"""Shared paths. CI lays out shared/ beside the clone, as on a developer machine."""

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
EXTERNAL = SHARED / "captures" / "external"
CAPTURES = ROOT / "captures"


@pytest.fixture
def external():
    if not EXTERNAL.is_dir():
        pytest.skip(f"external captures not found at {EXTERNAL}")
    return EXTERNAL


def drain_pty(master: int) -> bytes:
    """Everything written to a pseudo-terminal until its other side is closed (EIO or EOF);
    closes master."""
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return out


# -- ibpath as a user gets it: a wheel of this checkout in a fresh venv (tests/test_packaging.py,
# tests/test_record_installed.py), built once a run ------------------------------------------
def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    p = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)])
    assert p.returncode == 0, p.stderr[-3000:]
    (whl,) = out.glob("ibpath_scapy-*.whl")
    return whl


@pytest.fixture(scope="session")
def installed(wheel, tmp_path_factory):
    """(env, bin dir, work dir): the wheel in a new venv; the work dir is outside the checkout."""
    base = tmp_path_factory.mktemp("user")
    v = base / "venv"
    venv.create(v, with_pip=True)
    p = _run([str(v / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)])
    assert p.returncode == 0, p.stderr[-3000:]
    work = base / "work"
    work.mkdir()
    env = {k: val for k, val in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(HOME=str(base / "home"), PATH=f"{v / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}")
    return env, v / "bin", work
