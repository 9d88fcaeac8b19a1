#!/usr/bin/env bash
# The README's first command: install, then audit every capture bundled in captures/
# (and the external ones beside the checkout, when present).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install.sh
shopt -s nullglob globstar
files=(captures/**/*.pcap captures/**/*.pcapng ../shared/captures/external/*.pcap)
rc=0
.venv/bin/ibpath audit "${files[@]}" || rc=$?
if [ "$rc" -eq 1 ]; then
  echo "(the errors are expected: captures/crafted/seed-3-no-follow-up.pcapng is a faulty resolver)"
  rc=0
fi
exit "$rc"
