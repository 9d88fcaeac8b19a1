"""The reports of every verb on every committed capture, against tests/golden/ (written by
tests/golden_outputs.py before the fact model replaced the decoders' dicts; a change to any report
shows up here as the file that differs and its first differing lines)."""

from __future__ import annotations

import difflib

import pytest

import golden_outputs as golden


@pytest.mark.parametrize("capture", golden.captures(),
                         ids=lambda p: str(p.relative_to(golden.ROOT / "captures")))
def test_reports_match_golden(capture):
    for name, text in golden.outputs(capture):
        want = (golden.GOLDEN / name).read_text()
        if text != want:
            diff = "\n".join(list(difflib.unified_diff(
                want.splitlines(), text.splitlines(), "golden/" + name, "now", lineterm=""))[:40])
            pytest.fail(f"{name} differs from its golden output:\n{diff}")


def test_every_golden_file_has_a_capture():
    made = {golden.golden_name(c, s) for c in golden.captures() for s in golden.OUTPUTS}
    assert made == {p.name for p in golden.GOLDEN.iterdir()}
