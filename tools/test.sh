#!/usr/bin/env bash
# The README's second command (and CI's): install, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install.sh
exec .venv/bin/python -m pytest -q "$@"
