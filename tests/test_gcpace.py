"""The cycle collector paced by Scapy's frames (ibpath_scapy/engines/scapy/gcpace.py): what it rests on,
that the fast path, the replay, the rules and the reports leave no reference cycles behind,
checked by what a full collection finds after each audit; and that the frames Scapy decodes
are still collected while automatic collection is off."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from ibpath_scapy.engines.scapy import gcpace
from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.cli.main import main as ibpath

from conftest import CAPTURES


def _captures() -> list[Path]:
    found = sorted(CAPTURES.rglob("*.pcap*"))
    assert len(found) > 50
    return found


def _garbage_after(run) -> tuple[int, int]:
    """(objects in reference cycles that `run` left behind, Scapy frames it decoded): run
    with automatic collection off, then one full collection."""
    gc.collect()
    with gcpace.paced():
        before = gcpace._frames
        run()
        return gc.collect(), gcpace._frames - before


def test_paced_turns_automatic_collection_off_and_restores_it():
    assert gc.isenabled()
    with gcpace.paced():
        assert not gc.isenabled()
        with gcpace.paced():  # the CLI's around the audit's own
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gcpace.paced():
            pass
        assert not gc.isenabled()  # a caller's choice is left as it was
    finally:
        gc.enable()


@pytest.mark.parametrize("path", _captures(), ids=lambda p: str(p.relative_to(CAPTURES)))
def test_audits_that_never_leave_the_fast_path_leave_no_cycles(path):
    """Every capture of the project: an audit with no frame through Scapy leaves nothing for
    the collector (what gcpace's pacing rests on); one with Scapy frames leaves only theirs,
    a few dozen to 150 objects a frame (a blob of many records), not one a record."""
    garbage, scapy = _garbage_after(
        lambda: audit_paths([str(path)], AuditOptions(keep_transactions=False), quiet=True))
    if scapy == 0:
        assert garbage == 0
    else:
        assert garbage <= 200 * scapy


def test_external_captures_leave_cycles_only_from_scapy_frames(external):
    for path in sorted(external.glob("*.pcap*")):
        garbage, scapy = _garbage_after(
            lambda: audit_paths([str(path)], AuditOptions(keep_transactions=False), quiet=True))
        assert garbage <= 200 * scapy, path


@pytest.mark.parametrize("encap", ["rocev2", "ib"])
def test_a_storm_leaves_no_cycles_in_any_report(bench_capture, encap, capsys):
    """The commands as run from the shell, every output format and the ladder too, over an
    SA storm: nothing goes through Scapy, and what is left for the collector is the command
    line's parser (argparse's objects point at each other), the same for 20 frames as for
    6,000 (the second run of each: the imports a writer makes on its first use aside)."""
    small = str(bench_capture("capture2", 20, encap=encap))
    big = str(bench_capture("capture2", 6000, encap=encap))
    for args in (["audit", "--format", "json"], ["audit", "--format", "html"],
                 ["audit", "--format", "junit"], ["audit", "--ladder"],
                 ["decode", "--format", "json"], ["decode"]):
        ibpath([*args, small])  # what a writer imports on its first use stays out
        parser, _ = _garbage_after(lambda: ibpath([*args, small]))
        garbage, scapy = _garbage_after(lambda: ibpath([*args, big]))
        capsys.readouterr()
        assert (garbage, scapy) == (parser, 0), args


def test_scapy_frames_are_collected_while_paced(bench_capture, monkeypatch):
    """Through the Scapy layers only (IBPATH_FASTPATH=0): a young collection every
    YOUNG_EVERY frames keeps their cycles from piling up (at most YOUNG_EVERY frames' worth
    wait for the next); without it every frame's would."""
    frames = 200
    path = str(bench_capture("capture2", frames))
    monkeypatch.setenv("IBPATH_FASTPATH", "0")
    monkeypatch.setattr(gcpace, "_frames", 0)
    monkeypatch.setattr(gcpace, "YOUNG_EVERY", 16)
    run = lambda: audit_paths([path], AuditOptions(keep_transactions=False), quiet=True)  # noqa: E731
    paced_garbage, scapy = _garbage_after(run)
    assert scapy == frames
    monkeypatch.setattr(gcpace, "YOUNG_EVERY", 10 ** 9)
    unpaced_garbage, _ = _garbage_after(run)
    assert unpaced_garbage > 20 * frames  # each Scapy frame leaves cycles (~40 objects)
    assert paced_garbage < unpaced_garbage / 5
