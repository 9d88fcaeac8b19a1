"""Write (or check) the golden outputs: every verb's report on every committed capture.

    python tests/golden_outputs.py          # rewrite tests/golden/
    python tests/golden_outputs.py --check  # exit 1 and list the files whose output changed

tests/test_golden.py imports it and runs the same comparison. The outputs are the CLI's own, produced in
process (ibpath_scapy.cli.main with stdout and stderr captured), so they cover the JSON,
text (with and without ladders), JUnit and HTML writers and decode's two formats.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
CAPTURE_SUFFIXES = (".pcap", ".pcapng")

# verb arguments per output file suffix
OUTPUTS = {
    "audit.json": ["audit", "--quiet", "--format", "json"],
    "audit.txt": ["audit", "--quiet", "--format", "text"],
    "audit.ladder.txt": ["audit", "--quiet", "--format", "text", "--ladder"],
    "audit.junit.xml": ["audit", "--quiet", "--format", "junit"],
    "audit.html": ["audit", "--quiet", "--format", "html"],
    "decode.json": ["decode", "--format", "json"],
    "decode.txt": ["decode", "--format", "text"],
}


def captures() -> list[Path]:
    """The committed captures, in a stable order."""
    return sorted(p for p in (ROOT / "captures").rglob("*")
                  if p.suffix in CAPTURE_SUFFIXES and p.is_file())


def golden_name(capture: Path, suffix: str) -> str:
    rel = capture.relative_to(ROOT / "captures")
    return f"{str(rel).replace('/', '__')}.{suffix}"


def run_cli(argv: list[str]) -> str:
    """The CLI's stdout and exit status for argv, run in this process from the captures'
    parent (file names in reports are relative)."""
    from ibpath_scapy.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            contextlib.chdir(ROOT):
        rc = main(argv)
    # JUnit carries measured times: the one part of a report that differs run to run
    text = _TIMES.sub('time="T"', out.getvalue())
    return f"{text}\n# exit {rc}\n# stderr:\n{err.getvalue()}"


_TIMES = re.compile(r'time="[0-9.]+"')


def outputs(capture: Path):
    """(golden file name, output text) of every verb on capture."""
    rel = str(capture.relative_to(ROOT))
    for suffix, argv in OUTPUTS.items():
        yield golden_name(capture, suffix), run_cli(argv + [rel])


def main(argv: list[str]) -> int:
    check = "--check" in argv
    changed = []
    for cap in captures():
        for name, text in outputs(cap):
            path = GOLDEN / name
            if check:
                if not path.exists() or path.read_text() != text:
                    changed.append(name)
            else:
                path.write_text(text)
    for name in changed:
        print(f"changed: {name}")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
