"""What the tests on the simulated fabric (ibpath_scapy/record/fabric.py) share: whether its
programs are installed, the mark that skips a test with the reason where they are not, and
the two-host topology (TWO_HCAS) of the real-client and SA oracle tests."""

from __future__ import annotations

import pytest

from ibpath_scapy.record.fabric import missing_tools

FABRIC_MISSING = missing_tools(("ibsim", "opensm", "saquery", "sminfo", "ibaddr"))
needs_fabric = pytest.mark.skipif(
    bool(FABRIC_MISSING), reason="the simulated fabric needs ibsim-utils, libumad2sim0, opensm, "
    "infiniband-diags and cc (tools/install.sh): missing " + ", ".join(FABRIC_MISSING))

# ibsim's topology of the real-client and SA oracle tests: two HCAs on one switch
TWO_HCAS = """\
Switch	8 "Switch1"
[1]	"HcaA"[1]
[2]	"HcaB"[1]

Hca	1 "HcaA"
[1]	"Switch1"[1]

Hca	1 "HcaB"
[1]	"Switch1"[2]
"""
