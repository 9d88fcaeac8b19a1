#!/usr/bin/env bash
# Installs everything ibpath and its tests need on Debian 12 / Python >= 3.11:
# tshark (the oracle and the plugin's host), lua5.4 (luac -p of the generated plugin),
# strace (netlink recorder), chromium (the HTML report tests), the simulated fabric (ibsim,
# OpenSM, saquery) for the real SA captures, mmdebstrap (Debian chroots with Wireshark 4.4 and
# 4.6 for the plugin tests, tests/wireshark_versions.py), librdmacm1 (a real rdma_getaddrinfo
# against the stand-in ibacm, tests/test_acmserve.py), ibacm (for its ib_acme, libacm's
# client: PERF_QUERY, EP_QUERY and RESOLVE against `ibpath acm serve` in
# tests/test_acmserve.py, on sockets of the tests' own), gcc and python3-dev (the capture
# readers' optional C loops, ibpath_scapy/native/_scan.c), libibumad3 (`ibpath resolve` and
# `acm serve --resolve` load libibumad.so.3 with ctypes to ask the SA), zsh (the completion
# script run by zsh itself, tests/test_completion.py), and the Python package in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >/dev/null
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  had_ibacm=$(dpkg-query -W -f='${Status}' ibacm 2>/dev/null || true)
  $SUDO apt-get install -y -q --no-install-recommends \
    tshark lua5.4 strace ibsim-utils libumad2sim0 opensm infiniband-diags python3-venv python3-dev gcc libc6-dev chromium mmdebstrap librdmacm1 ibacm libibumad3 zsh >/dev/null
  # The package enables ibacm.socket where systemd runs: /run/ibacm.sock and the kernel's
  # netlink path requests would go to a real ibacm. Only ib_acme is wanted here, so a
  # socket unit this install enabled is disabled again (an ibacm installed before is left).
  if [ "$had_ibacm" != "install ok installed" ] && [ -d /run/systemd/system ]; then
    $SUDO systemctl disable --now ibacm.socket ibacm.service >/dev/null 2>&1 &&
      echo "install.sh: ibacm.socket disabled (ib_acme is what the tests use)"
  fi
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# the fleet extra too: its tests (Parquet read back by DuckDB, a Dask cluster on 127.0.0.1)
# PYTHONWARNINGS: setuptools' notice that an editable install is one (printed on every run)
PYTHONWARNINGS=ignore .venv/bin/python -m pip install -q -e '.[test,fleet]'
