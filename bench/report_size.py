"""Size and Chromium load time of the HTML audit report of the performance suite's capture 1.

    python bench/report_size.py [--frames 1000000] [--loads 3] [--keep DIR]

Builds capture 1 (bench/corpus.py: RoCEv2, 5 % MADs), runs `ibpath audit --format html -o`,
then opens the report in headless Debian Chromium (/usr/bin/chromium through Playwright) and
times the load: wall time from navigation to the load event, and the page's own
PerformanceNavigationTiming (loadEventEnd) plus the first full layout of the page. Issue 10
sets the targets: under 10 MB, under 5 seconds.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import write_capture1  # noqa: E402
from suite import IBPATH  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
SIZE_TARGET = 10 * 1024 * 1024
LOAD_TARGET = 5.0


def load_times(html: Path, loads: int) -> list[tuple[float, float, int, int]]:
    """(wall s, navigation-timing s, arrows, findings) of each load in a fresh page."""
    from playwright.sync_api import sync_playwright
    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        for _ in range(loads):
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            errors = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            t = time.perf_counter()
            page.goto(html.resolve().as_uri(), wait_until="load", timeout=120_000)
            # force the full layout of the page (scroll height), then read the timing
            page.evaluate("() => document.body.scrollHeight")
            wall = time.perf_counter() - t
            nav = page.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd")
            arrows = page.evaluate("() => document.querySelectorAll('g.arrow').length")
            findings = page.evaluate("() => document.querySelectorAll('tr.finding').length")
            if errors:
                raise SystemExit(f"console errors in {html}: {errors}")
            out.append((wall, nav / 1000, arrows, findings))
            page.close()
        browser.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--loads", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="copy the capture's report here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cap = write_capture1(Path(d) / "capture1.pcap", args.frames)
        html = Path(d) / "capture1.html"
        t = time.perf_counter()
        p = subprocess.run(IBPATH + ["audit", "--quiet",
                            "--format", "html", "-o", str(html), str(cap)],
                           capture_output=True, text=True)
        audit = time.perf_counter() - t
        if p.returncode not in (0, 1) or not html.exists():
            raise SystemExit(f"ibpath audit failed ({p.returncode}): {p.stderr}")
        size = html.stat().st_size
        times = load_times(html, args.loads)
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(html, args.keep / f"capture1-{args.frames}.html")
    best = min(times)
    print(f"capture1: {args.frames} frames; audit to HTML {audit:.1f} s wall")
    print(f"report size   : {size / 1e6:8.2f} MB ({size:,} bytes; target < 10 MB: "
          f"{'ok' if size < SIZE_TARGET else 'MISSED'})")
    print(f"chromium load : {best[0]:8.2f} s wall to load + layout (best of {len(times)}: "
          + ", ".join(f"{w:.2f}" for w, *_ in times) + f"), loadEventEnd {best[1]:.2f} s; "
          f"target < 5 s: {'ok' if best[0] < LOAD_TARGET else 'MISSED'}")
    print(f"page          : {best[2]} arrows drawn, {best[3]} finding rows")


if __name__ == "__main__":
    main()
