"""`ibpath decode` through the audit's fast path (issue 19 point 6, issue 22).

Oracle: the same command with IBPATH_FASTPATH=0, every frame through the Scapy layers (what
`ibpath decode` printed before it read through ibpath_scapy.engines.fast). Compared byte for byte:
standard output in both formats, standard error and the exit status, on every committed
capture (captures/, tests/data/fuzz/, the external ones), the bench corpora (RoCEv2 and
native IB, pcap and pcapng), and damaged files (cut, a raw blob, --as blob, a directory, a
missing file).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ibpath_scapy.cli.main import main
from ibpath_scapy.engines.fast import FastDecoder

from conftest import CAPTURES, ROOT

FUZZ = ROOT / "tests" / "data" / "fuzz"


def decode(monkeypatch, fastpath: str, *args) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `ibpath decode ARGS` run in this process."""
    monkeypatch.setenv("IBPATH_FASTPATH", fastpath)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["decode", *[str(a) for a in args]])
    return status, out.getvalue(), err.getvalue()


def assert_same_decode(monkeypatch, path, *extra) -> dict[str, tuple[int, str, str]]:
    """Both formats give the Scapy path's bytes, stderr and exit status through the fast
    path; returns the fast path's results by format."""
    got = {}
    for fmt in ("json", "text"):
        scapy = decode(monkeypatch, "0", path, "--format", fmt, *extra)
        fast = decode(monkeypatch, "1", path, "--format", fmt, *extra)
        assert fast[0] == scapy[0], f"{path} ({fmt}): exit status"
        assert fast[2] == scapy[2], f"{path} ({fmt}): stderr"
        if fast[1] != scapy[1]:
            a, b = scapy[1].splitlines(), fast[1].splitlines()
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            pytest.fail(f"{path} ({fmt}): line {first + 1} differs:\n"
                        f"scapy: {a[first] if first < len(a) else '<end>'}\n"
                        f"fast:  {b[first] if first < len(b) else '<end>'}")
        got[fmt] = fast
    return got


def _committed_captures() -> list[Path]:
    files = [f for d in (CAPTURES, FUZZ) for f in sorted(d.rglob("*")) if f.is_file()
             and f.suffix in (".pcap", ".pcapng")]
    return [f for f in files if f.stat().st_size]


@pytest.mark.parametrize("path", _committed_captures(),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_same_output_on_committed_captures(monkeypatch, path):
    assert_same_decode(monkeypatch, path)


def test_same_output_on_external_captures(monkeypatch, external):
    files = sorted(f for f in external.iterdir() if f.is_file())
    assert files
    for path in files:
        assert_same_decode(monkeypatch, path)


@pytest.fixture(scope="module")
def bench_corpora(bench_capture) -> list[Path]:
    """Both bench captures, RoCEv2 and native IB, as classic pcap and as pcapng: capture 1
    RoCEv2, capture 2 RoCEv2, capture 1 IB, capture 2 IB, then the same four as pcapng."""
    sizes = {"capture1": 3000, "capture2": 1500}
    return [bench_capture(kind, sizes[kind], encap, pcapng)
            for pcapng in (False, True) for encap in ("rocev2", "ib") for kind in sizes]


def test_same_output_on_bench_corpora(monkeypatch, bench_corpora):
    for path in bench_corpora:
        got = assert_same_decode(monkeypatch, path)
        assert got["json"][0] == 0 and got["json"][1].count("\n") > 100, path
        if path.name.startswith("capture1"):
            assert "CM Send(REQ)" in got["text"][1], path
        else:
            assert '"reassembled_from"' in got["json"][1], path


def test_the_fast_path_takes_the_bench_frames(monkeypatch, bench_corpora):
    """The fast path is what decode runs: the frames of capture 1's RC data are skipped, its
    MADs decoded without the Scapy layers."""
    from ibpath_scapy.cli import decode as cli_decode
    from ibpath_scapy.capture.pcapio import Input

    monkeypatch.setenv("IBPATH_FASTPATH", "1")
    fed = []
    monkeypatch.setattr(FastDecoder, "feed", lambda self, frame: fed.append(frame) or iter(()))
    with Input(str(bench_corpora[0])) as src:
        decoder, recs = cli_decode.records(src)
        n = sum(1 for _ in recs)
    assert isinstance(decoder, FastDecoder)
    assert n == 150 and not fed and decoder.skipped == 2850


@pytest.mark.parametrize("cut", [3, 24 + 7, 24 + 16 + 30, 5000, -1, -300])
def test_same_output_on_cut_files(monkeypatch, bench_capture, tmp_path, cut):
    """Capture 2 (RoCEv2 and IB pcap, RoCEv2 pcapng) cut inside its headers, inside a frame
    and in its last frames. 300 frames of it: what a cut is about is where the file ends (the
    whole captures are test_same_output_on_bench_corpora's)."""
    for src in (bench_capture("capture2", 300), bench_capture("capture2", 300, "ib"),
                bench_capture("capture2", 300, pcapng=True)):
        path = tmp_path / f"cut{src.suffix}"
        path.write_bytes(src.read_bytes()[:cut])
        got = assert_same_decode(monkeypatch, path)
        assert got["json"][0] == 2 and "byte offset" in got["json"][2]


def test_same_output_on_other_inputs(monkeypatch, tmp_path):
    blob = tmp_path / "optval.bin"
    blob.write_bytes(bytes(72 * 2))
    odd = tmp_path / "odd.bin"
    odd.write_bytes(bytes(71))
    assert_same_decode(monkeypatch, blob)
    assert_same_decode(monkeypatch, odd)
    assert_same_decode(monkeypatch, odd, "--as", "blob")
    assert_same_decode(monkeypatch, CAPTURES / "corpus" / "res-no-followup.pcapng", "--as", "blob")
    assert_same_decode(monkeypatch, CAPTURES / "corpus")  # a directory: refused, status 2
    got = assert_same_decode(monkeypatch, tmp_path / "absent.pcap")
    assert got["text"][0] == 2


def test_same_output_from_standard_input(bench_corpora):
    """`ibpath decode -` (a stream) through the console entry point, both ways."""
    for path in (bench_corpora[1], bench_corpora[6]):
        data = path.read_bytes()
        runs = [subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "decode",
                                "--format", "json", "-"], input=data, capture_output=True,
                               env={**os.environ, "IBPATH_FASTPATH": fp},
                               timeout=300) for fp in ("0", "1")]
        assert runs[1].returncode == runs[0].returncode == 0
        assert runs[1].stdout == runs[0].stdout and runs[1].stderr == runs[0].stderr
