#!/usr/bin/env bash
# The README's first command: install, then audit the bundled captures and show the reports.
#
# 1. captures/corpus/: one capture per `ibpath craft` scenario, most of them deliberately
#    faulty. `ibpath craft --verify` audits each file (with the --kernel profile its manifest
#    row names), prints the audit's text report, then checks every file gave exactly the rule
#    IDs captures/corpus/manifest.json expects. Errors there are the point; a difference from
#    the manifest is a failure.
#    captures/rxe/ (the kernel lab's real rxe captures, `ibpath lab`) is checked the same way
#    against its own manifest: its faulty blobs were rejected by a real kernel. So is
#    captures/rxe/acm/ (`ibpath lab run acm-all`): what real librdmacm passed to that kernel
#    when the stand-in ibacm answered with each craft scenario's array, and captures/rxe/record/
#    (`ibpath lab run record-all`): unmodified programs recorded by `ibpath record`; and
#    captures/lab-kernels/*/ (`ibpath lab run --kernel K`): the same on Debian 6.1 and 7.3.4,
#    each also held against the kernel profiles (`ibpath lab check`).
# 2. Real traffic: captures/opensm/ (OpenSM over ibsim) and, when present beside the checkout,
#    ../shared/captures/external/. These must audit with no error finding (`ibpath audit`'s
#    own exit status).
#
# Exit status: 0 when both hold, 1 when the corpus differs from its manifest or real traffic
# has an error finding, 2 when a file cannot be read.
set -euo pipefail
cd "$(dirname "$0")/.."
# IBPATH_SKIP_INSTALL=1 skips the install step on a machine that has already run it
[ "${IBPATH_SKIP_INSTALL:-}" = 1 ] || bash tools/install.sh
IBPATH=.venv/bin/ibpath

echo "== The bundled corpus (captures/corpus/, see its README.md): deliberate faults, checked against the manifest"
rc=0
"$IBPATH" craft --verify captures/corpus || rc=$?

echo
echo "== The kernel lab's real soft-RoCE captures (captures/rxe/, see its README.md): the blob matrix, checked against its manifest"
"$IBPATH" craft --verify captures/rxe || rc=$?

echo
echo "== Real librdmacm against the stand-in ibacm (captures/rxe/acm/, see its README.md): every craft scenario's array through rdma_resolve_route, checked against its manifest"
"$IBPATH" craft --verify captures/rxe/acm || rc=$?

echo
echo "== Real programs under ibpath record (captures/rxe/record/, see its README.md): blobs, verdicts, QUERY PATH readback and the CM REQ, checked against its manifest"
"$IBPATH" craft --verify captures/rxe/record || rc=$?

for run in captures/lab-kernels/*/; do
  echo
  echo "== The kernel lab on $(basename "$run") (captures/lab-kernels/, see its README.md): the same matrix and IB service writes, checked against its manifest and the kernel profiles"
  "$IBPATH" craft --verify "$run" || rc=$?
  "$IBPATH" lab check "$run" >/dev/null || rc=$?
done

shopt -s nullglob
real=(captures/opensm/*.pcap captures/opensm/*.pcapng ../shared/captures/external/*.pcap ../shared/captures/external/*.pcapng)
echo
echo "== Real traffic: ${real[*]}"
real_rc=0
"$IBPATH" audit --quiet "${real[@]}" || real_rc=$?
if [ "$real_rc" -ne 0 ]; then
  echo "real traffic: ibpath audit exited $real_rc (1: an error finding, 2: unreadable input)"
fi
if [ "$rc" -eq 0 ] && [ "$real_rc" -eq 0 ]; then
  echo "main.sh: every corpus file gave exactly its expected findings; real traffic has no error"
  exit 0
fi
[ "$real_rc" -eq 2 ] && exit 2
exit 1
