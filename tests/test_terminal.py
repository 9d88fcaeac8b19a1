"""Issue 17, point 7: `ibpath audit` on a terminal. Progress (share of bytes, frames per
second, time left) on stderr only when it is a terminal and not --quiet; the ladder default
switched to the summary for big inputs, with a line saying how to get it. Run under a real
pseudo-terminal (bench/tty_rss.py measures the memory of the same mode)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from ibpath_scapy.audit.progress import Progress
from ibpath_scapy.cli.audit import TTY_LADDER_LIMIT

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from tty_rss import run_on_pty  # noqa: E402

from conftest import drain_pty  # noqa: E402

IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main", "audit"]


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_shows_share_rate_and_time_left():
    now = [100.0]
    pos = [0]
    out = _Tty()
    p = Progress("cap.pcap", True, lambda: pos[0], 1000, stream=out, clock=lambda: now[0])
    now[0], pos[0] = 102.0, 250
    p(5000)
    text = out.getvalue()
    assert "cap.pcap:" in text and " 25.0 %" in text
    assert "5,000 frames, 2,500 frames/s" in text and "0:06 left" in text
    p.done()
    assert out.getvalue().endswith("\r")


def test_progress_of_a_stream_has_no_share():
    out = _Tty()
    now = [0.0]
    p = Progress("-", True, lambda: 10, None, stream=out, clock=lambda: now[0])
    now[0] = 1.0
    p(300)
    assert "-:  300 frames, 300 frames/s" in out.getvalue() and "%" not in out.getvalue()


def test_no_progress_unless_a_terminal():
    out = io.StringIO()
    p = Progress("x", True, lambda: 1, 2, stream=out, clock=lambda: 10.0)
    p(1)
    assert out.getvalue() == ""


# capture 2 of this many frames: over the terminal's ladder limit, and long enough for the
# audit to draw its progress line (at most every 0.5 s) a few times (about 2 s of audit)
BIG = 160_000


@pytest.fixture(scope="module")
def big(bench_capture) -> Path:
    """Capture 2 over the terminal's ladder limit."""
    path = bench_capture("capture2", BIG)
    assert path.stat().st_size > TTY_LADDER_LIMIT
    return path


def test_terminal_mode_progress_and_summary_default(big):
    rc, rss, _, _, head, tail, _ = run_on_pty(IBPATH + [str(big)], None)
    text = tail.decode(errors="replace")
    assert rc == 0 and "Traceback" not in text
    progress = head.decode(errors="replace")  # stderr's line comes before the report
    assert "frames/s" in progress and " %  " in progress and "left" in progress
    assert "(ladder diagrams not drawn on a terminal for" in text and "--ladder draws them" in text
    assert f"== 1 file(s), {BIG} frames" in text


def test_quiet_silences_the_progress(big):
    rc, _, _, _, head, tail, _ = run_on_pty(IBPATH + ["--quiet", str(big)], None)
    assert rc == 0 and "frames/s" not in (head + tail).decode(errors="replace")


def test_small_input_on_a_terminal_still_draws_the_ladder():
    corpus = ROOT / "captures" / "corpus" / "res-no-followup.pcapng"
    rc, _, _, _, _, tail, _ = run_on_pty(IBPATH + [str(corpus)], None)
    text = tail.decode(errors="replace")
    assert rc == 1 and "ladder diagrams not drawn" not in text
    # the ladder: its lanes, and the first arrow (resolver to SA) with its frame
    assert "   kernel        resolver      SA            remote" in text
    assert "   |             |------------>|             |  f1 SA Get" in text


def test_a_recorded_run_on_a_terminal_draws_the_process():
    """A real recorded run (librdmacm, a 6.1 kernel, the stand-in ibacm answering ENODATA):
    the terminal's ladder has the process and ibacm lanes, the ACM RESOLVE and its answer, the
    RESOLVE_ROUTE the process fell back to, and ACM-FALLBACK under it (issue 39; on main the
    ladder drew the CM exchange alone and the finding under no message)."""
    run = ROOT / "captures" / "rxe" / "acm" / "acm-sar-status.pcapng"
    rc, _, _, _, _, tail, _ = run_on_pty(IBPATH + [str(run)], None)
    text = tail.decode(errors="replace").replace("\r\n", "\n")
    assert rc == 0 and "ladder diagrams not drawn" not in text
    assert "   kernel        process       ibacm         SA            remote" in text
    assert "   |             |------------>|             |             |  f21 ACM RESOLVE" in text
    assert "   |             |<------------|             |             |  f22 ACM answer" in text
    route = "   |<------------|             |             |             |  f23 ucma RESOLVE_ROUTE"
    assert route in text
    after = text[text.index(route):].splitlines()
    assert after[1].strip() == "^ warning ACM-FALLBACK"


def test_progress_goes_to_stderr_only(big, tmp_path):
    """stdout to a file, stderr a terminal: the report (no ladder: stdout is no terminal) in
    the file, the progress on the terminal."""
    import os
    import pty
    import subprocess

    master, slave = pty.openpty()
    report = tmp_path / "report.txt"
    with open(report, "w") as out:
        p = subprocess.Popen(IBPATH + [str(big)], stdout=out, stderr=slave)
        os.close(slave)
        seen = drain_pty(master)
        assert p.wait(120) == 0
    assert b"frames/s" in seen
    text = report.read_text()
    assert "frames/s" not in text and f"== 1 file(s), {BIG} frames" in text
