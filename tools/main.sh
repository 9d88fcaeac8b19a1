#!/usr/bin/env bash
# The README's first command: install, then run ibpath over every bundled capture.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install.sh
status=0
for f in captures/*/*.pcap captures/*/*.pcapng; do
  [ -e "$f" ] || continue
  echo "=== ibpath decode $f"
  .venv/bin/ibpath decode "$f" || status=$?
done
exit $status
