"""The findings' wording, per mutant (issue 43, item 5; tests/README.md).

A finding's message is what a reader acts on: which record, which field, which value the
kernel would have used. tests/test_golden.py compares every report of every committed capture
with tests/golden/ (32 s), too slow to run for each mutant; this is its audit-text part for
the craft corpus (one capture per scenario, captures/corpus/), in-process, in about 3 s, so
that a mutant that only rewords or drops part of a message is caught by the mutation run too.
The golden files were written before these tests (tests/golden_outputs.py).
"""

from __future__ import annotations

import difflib

import pytest

import golden_outputs as golden

CORPUS = [c for c in golden.captures() if c.parent.name == "corpus"]


@pytest.mark.parametrize("capture", CORPUS, ids=lambda p: p.name)
def test_corpus_findings_read_as_their_golden_text(capture):
    want = (golden.GOLDEN / golden.golden_name(capture, "audit.txt")).read_text()
    text = golden.run_cli(golden.OUTPUTS["audit.txt"] + [str(capture.relative_to(golden.ROOT))])
    if text != want:
        diff = "\n".join(list(difflib.unified_diff(want.splitlines(), text.splitlines(),
                                                   "golden", "now", lineterm=""))[:20])
        pytest.fail(f"{capture.name}: findings differ from the golden text:\n{diff}")


def test_the_corpus_is_every_scenario():
    assert len(CORPUS) >= 60
