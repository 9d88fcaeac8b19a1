#!/usr/bin/env python3
"""Regenerate captures/opensm/: a real OpenSM SA exchange (saquery as client) on the ibsim
simulator, OpenSM and every saquery under `ibpath record`, with the SA exchange also written
as a native-InfiniBand pcap.

Needs the Debian packages ibsim-utils, libumad2sim0, opensm and infiniband-diags, and a C
compiler (`ibpath record` compiles its recorder on first use).  See
ibpath_scapy/record/opensm.py and captures/opensm/README.md.

    python tools/record_opensm.py [--outdir DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ibpath_scapy.record.opensm import missing_tools, record_sa_session  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--outdir", default=str(ROOT / "captures" / "opensm"),
                    help="output directory (default: captures/opensm)")
    args = ap.parse_args(argv)
    missing = missing_tools()
    if missing:
        print("cannot record, missing: " + ", ".join(missing), file=sys.stderr)
        print("on Debian/Ubuntu: apt-get install -y ibsim-utils libumad2sim0 opensm "
              "infiniband-diags gcc", file=sys.stderr)
        return 2
    res = record_sa_session(args.outdir)
    print(f"wrote {Path(res.outdir) / res.pcap}: {res.frames} frames; SA LID {res.sa_lid}")
    for q in res.queries:
        print(f"  rc={q.returncode:<3} {' '.join(q.argv)}  -> {q.stdout_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
