"""`ibpath record` as a user gets it: from the wheel, installed into a fresh venv outside the
checkout (tests/test_packaging.py's fixtures); the shim compiled from the package's own
ibpathrec.c into the user's cache."""

from __future__ import annotations

import zipfile
from pathlib import Path

from test_packaging import ibpath


def test_wheel_carries_the_shim(wheel):
    with zipfile.ZipFile(wheel) as z:
        assert "ibpath_scapy/record/ibpathrec.c" in z.namelist()


def test_record_runs_from_the_installed_package(installed, tmp_path):
    env, _, _ = installed
    out = tmp_path / "x.pcapng"
    p = ibpath(installed, "record", "-o", out, "--", "sh", "-c", "exit 3", ok=(3,))
    assert "0 frames" in p.stderr and out.exists()
    assert list((Path(env["HOME"]) / ".cache" / "ibpath").glob("ibpathrec-*.so"))
