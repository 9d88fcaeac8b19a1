"""Shared paths. CI lays out shared/ beside the clone, as on a developer machine."""

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
