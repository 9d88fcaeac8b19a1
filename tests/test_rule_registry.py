"""The rule registry holds every rule whoever reads it first, with no import to remember."""

import subprocess
import sys

from ibpath_scapy.audit.model import RULES, SEVERITIES


def test_registry_is_complete_on_first_read_in_a_fresh_interpreter():
    code = ("from ibpath_scapy.audit.model import RULES\n"
            "print(len(RULES), 'SAQ-RETRY' in RULES, len(list(RULES.items())))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out == [str(len(RULES)), "True", str(len(RULES))]
    assert len(RULES) >= 40


def test_every_rule_is_declared_whole():
    """ID, severity, source and at least one check with a docstring, for every rule."""
    for rid, r in RULES.items():
        assert r.rule_id == rid and r.severity in SEVERITIES, rid
        assert r.source and "../" not in r.source and ".md" not in r.source, (rid, r.source)
        assert r.checks and r.summary, rid
