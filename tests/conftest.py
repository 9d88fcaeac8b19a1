"""Shared paths. CI lays out shared/ beside the clone, as on a developer machine."""

import os
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
