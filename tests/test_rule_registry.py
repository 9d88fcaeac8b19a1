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


def test_the_frame_checks_guards_skip_no_finding():
    """engine's has_finding asks a check with `only_if` keys or `only_kinds` only about
    records with one of those keys or kinds: over every record of the project's captures, the
    fuzz inputs and the external ones (both engines' decoders, and the limit records the
    replay writes), it answers as asking every frame check would."""
    from pathlib import Path

    from ibpath_scapy.audit.engine import _frame_finding_test, audit_records
    from ibpath_scapy.audit.model import AuditOptions
    from ibpath_scapy.engines.scapy.decode import decode_file
    from ibpath_scapy.engines.fast import decode_file_fast
    from ibpath_scapy.capture.pcapio import CaptureError

    from conftest import EXTERNAL, project_inputs

    checks = [r.checks["frame"] for r in RULES.values() if "frame" in r.checks]
    has_finding = _frame_finding_test()
    files = project_inputs() + (sorted(EXTERNAL.glob("*.pcap*")) if EXTERNAL.is_dir() else [])
    seen = fired = 0
    for path in files:
        for decode in (decode_file, decode_file_fast):
            records = []
            try:
                records.extend(decode(str(path)))
            except CaptureError:
                pass
            replay = audit_records(str(path), records, AuditOptions()).replay
            for rec in records + [r for r in replay.frame_records if isinstance(r, dict)]:
                every = any(True for c in checks for _ in c(rec))
                assert has_finding(rec) == every, (Path(path).name, rec)
                seen += 1
                fired += every
    assert seen > 5000 and fired >= 20
