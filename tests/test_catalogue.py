"""docs/rules.md and --list-rules come from the registry: a stale page fails here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ibpath_scapy.audit import catalogue
from ibpath_scapy.audit.model import RULES
from ibpath_scapy.facts.kernelview import PROFILES

PAGE = Path(__file__).resolve().parent.parent / "docs" / "rules.md"


def test_rules_page_is_generated_from_the_registry():
    assert PAGE.read_text() == catalogue.markdown(), (
        "docs/rules.md is stale: python -m ibpath_scapy.audit.catalogue > docs/rules.md")


def test_every_rule_has_a_section_and_a_row():
    page = PAGE.read_text()
    for rid, r in RULES.items():
        assert f"\n## {rid}\n" in page and f"| [{rid}](#{rid.lower()}) | {r.severity} |" in page


def test_list_rules_text_and_json():
    run = lambda *a: subprocess.run([sys.executable, "-m", "ibpath_scapy", "audit",
                                     "--list-rules", *a], capture_output=True, text=True,
                                    timeout=60)
    text, js = run(), run("--format", "json")
    assert text.returncode == js.returncode == 0, text.stderr + js.stderr
    rules, profiles = text.stdout.split("\n\n" + catalogue.PROFILES_HEAD + "\n")
    listed = [line.split()[0] for line in rules.splitlines() if not line.startswith(" ")]
    assert listed == sorted(RULES)
    # every profile with its kernels and the commits that set it apart
    names = [line.split()[0] for line in profiles.splitlines() if not line.startswith(" " * 4)]
    assert names == list(PROFILES)
    assert "  ls-multi-6.1   Linux 6.1 and 6.2: " in profiles
    assert '  ls-multi       Linux 6.3 on: ' in profiles
    assert 'commit ccae0447af0e "RDMA/cma: Refactor the inbound/outbound path records ' \
        'process flow" (v6.3)' in profiles
    doc = json.loads(js.stdout)
    assert [d["rule"] for d in doc] == sorted(RULES)
    assert all(d["severity"] == RULES[d["rule"]].severity and d["source"] for d in doc)
