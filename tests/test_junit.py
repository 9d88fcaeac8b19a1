"""Issue 17, point 6: `ibpath audit --format junit` as Jenkins and GitLab read it. The report
validates against tests/data/junit.xsd (after the Jenkins xUnit plugin's junit-10.xsd) with
xmlschema, and junitparser (the maintained JUnit reader on PyPI) reads it back: one suite per
input with tests/failures/errors/time, unreadable inputs as errors, a stable dotted
classname, and totals that are never green for an input that was not read."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from junitparser import Error, Failure, JUnitXml, Skipped

from ibpath_scapy.audit import report
from ibpath_scapy.audit.model import RULES

from test_audit_cli import bad, good  # noqa: F401  (fixtures)

SCHEMA = xmlschema.XMLSchema(str(Path(__file__).parent / "data" / "junit.xsd"))
IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main", "audit", "--quiet", "--format", "junit"]


def junit(tmp_path, *inputs) -> tuple[int, Path, str]:
    out = tmp_path / "report.xml"
    p = subprocess.run(IBPATH + ["-o", str(out)] + [str(i) for i in inputs],
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, out, p.stderr


def test_schema_rejects_the_old_report_shape(tmp_path):
    """The schema can fail: the pre-issue-17 root (<testsuite> without a name)."""
    old = tmp_path / "old.xml"
    old.write_text('<testsuite tests="1" failures="0"><testcase classname="x" name="y"/>'
                   "</testsuite>")
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        SCHEMA.validate(str(old))
    bad_count = tmp_path / "count.xml"
    bad_count.write_text('<testsuites><testsuite name="a" tests="many"/></testsuites>')
    assert not SCHEMA.is_valid(str(bad_count))


def test_report_with_unreadable_inputs_is_valid_and_red(tmp_path, good):  # noqa: F811
    """The issue's command: a good capture, a text file and a missing one."""
    notes = tmp_path / "notes.txt"
    notes.write_text("meeting notes\n")
    missing = tmp_path / "missing.pcap"
    rc, out, err = junit(tmp_path, good, notes, missing)
    assert rc == 2 and str(notes) in err and str(missing) in err
    SCHEMA.validate(str(out))
    xml = JUnitXml.fromfile(str(out))
    suites = {s.name: s for s in xml}
    assert list(suites) == [str(good), str(notes), str(missing)]
    assert xml.errors == 2 and xml.failures == 0
    ok, text, gone = (suites[str(p)] for p in (good, notes, missing))
    assert (ok.tests, ok.errors, ok.failures) == (len(RULES) + 1, 0, 0)
    for s, what in ((text, "not a capture or blob file"), (gone, "No such file")):
        cases = list(s)
        assert s.errors == 1 and s.tests == len(cases) >= 1
        (read,) = [c for c in cases if c.name == report.READ_CASE]
        (e,) = read.result
        assert isinstance(e, Error) and what in e.message
    assert len(list(gone)) == 1  # never opened: no rule judged it, so no rule passes
    # every suite has a time, every test a dotted classname from its path
    for s in xml:
        assert s.time >= 0 and re.fullmatch(r"ibpath\.audit(\.\w+)+", list(s)[0].classname)


def test_failures_round_trip(tmp_path, bad, good):  # noqa: F811
    rc, out, _ = junit(tmp_path, bad, good)
    assert rc == 1
    SCHEMA.validate(str(out))
    xml = JUnitXml.fromfile(str(out))
    failed = {(c.classname, c.name) for s in xml for c in s
              if any(isinstance(r, Failure) for r in c.result)}
    assert (report.junit_classname(str(bad)), "RES-NO-FOLLOWUP") in failed
    assert xml.failures == len(failed) and xml.errors == 0
    assert xml.tests == 2 * (len(RULES) + 1)


def test_classname_is_stable_and_dotted():
    assert report.junit_classname("captures/corpus/blob-length.pcapng") == \
        "ibpath.audit.captures.corpus.blob_length_pcapng"
    assert report.junit_classname("./a//b.pcap") == "ibpath.audit.a.b_pcap"
    assert report.junit_classname("-") == "ibpath.audit._"


def test_skipped_files_of_a_directory(tmp_path, good):  # noqa: F811
    d = tmp_path / "d"
    d.mkdir()
    (d / "good.pcapng").write_bytes(good.read_bytes())
    (d / "README").write_text("captures of the cluster\n")
    rc, out, _ = junit(tmp_path, d)
    assert rc == 0
    SCHEMA.validate(str(out))
    xml = JUnitXml.fromfile(str(out))
    (skipped,) = [c for s in xml for c in s if any(isinstance(r, Skipped) for r in c.result)]
    assert skipped.classname == report.junit_classname(str(d / "README"))
    assert "not a capture or blob file" in skipped.result[0].message


# -- issue 39: JUnit as CI tools read it ----------------------------------------------------------

def _recounted(xml: JUnitXml) -> dict:
    """The root's counts as junitparser makes them from the suites (update_statistics)."""
    again = JUnitXml.fromstring(xml.tostring())
    again.update_statistics()
    return {k: getattr(again, k) for k in ("tests", "failures", "errors", "skipped")}


def test_root_carries_the_counts_of_its_suites(tmp_path, good, bad):  # noqa: F811
    """The root <testsuites> had no skipped count."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "README").write_text("captures of the cluster\n")
    (d / "notes.txt").write_text("more\n")
    rc, out, _ = junit(tmp_path, good, bad, d, tmp_path / "missing.pcap")
    assert rc == 2
    SCHEMA.validate(str(out))
    # as written: junitparser recounts a root that lacks a count, so ask the XML itself
    root = ET.parse(out).getroot().attrib
    written = {k: int(root[k]) if k in root else None
               for k in ("tests", "failures", "errors", "skipped")}
    assert written == _recounted(JUnitXml.fromfile(str(out))) and written["skipped"] == 2


def test_skipped_files_keep_the_walks_order(tmp_path, good):  # noqa: F811
    """Skipped files came after every capture, not in the order the README promises."""
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    for name in ("a.pcapng", "c.pcapng", "sub/e.pcapng"):
        (d / name).write_bytes(good.read_bytes())
    for name in ("b.txt", "d.txt", "sub/f.txt"):
        (d / name).write_text("not a capture\n")
    rc, out, _ = junit(tmp_path, d)
    assert rc == 0
    names = [str(Path(s.name).relative_to(d)) for s in JUnitXml.fromfile(str(out))]
    assert names == ["a.pcapng", "b.txt", "c.pcapng", "d.txt", "sub/e.pcapng", "sub/f.txt"]


def _stdin_report(capture: Path, *args) -> str:
    """ibpath audit's report of capture given on standard input (exit status 1: its errors)."""
    with open(capture, "rb") as f:
        p = subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "audit", "--quiet",
                            *args, "-"], stdin=f, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    return p.stdout


def test_label_names_standard_input_in_every_report(tmp_path, bad):  # noqa: F811
    """Standard input was classname ibpath.audit._ whatever it carried."""
    out = tmp_path / "report.xml"
    with open(bad, "rb") as f:
        p = subprocess.run(IBPATH + ["--label", "node7/rxe0.pcapng", "-o", str(out), "-"],
                           stdin=f, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    (suite,) = JUnitXml.fromfile(str(out))
    assert suite.name == "node7/rxe0.pcapng"
    assert {c.classname for c in suite} == {"ibpath.audit.node7.rxe0_pcapng"}
    text, doc = (_stdin_report(bad, "--format", fmt, "--label", "node7")
                 for fmt in ("text", "json"))
    assert "== node7: 5 frames" in text and "node7:1,2,3: error RES-NO-FOLLOWUP" in text
    doc = json.loads(doc)
    assert doc["files"] == ["node7"] and {x["file"] for x in doc["findings"]} == {"node7"}
    # a file keeps its own name (--label is then only the Parquet tables' host)
    p = subprocess.run(IBPATH + ["--label", "x", "--format", "json", str(bad)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and json.loads(p.stdout)["files"] == [str(bad)], p.stderr
    p = subprocess.run(IBPATH + ["--label", " ", str(bad)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "--label takes a name that is not blank" in p.stderr


def test_junit_cases_findings_lists_the_read_case_and_the_rules_that_found(tmp_path, bad, good):  # noqa: F811,E501
    out = tmp_path / "short.xml"
    p = subprocess.run(IBPATH + ["--junit-cases", "findings", "-o", str(out), str(bad), str(good)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, p.stderr
    SCHEMA.validate(str(out))
    bad_suite, good_suite = JUnitXml.fromfile(str(out))
    rules = {f["rule"] for f in json.loads(subprocess.run(
        IBPATH[:-2] + ["--format", "json", str(bad)], capture_output=True, text=True,
        timeout=120).stdout)["findings"]}
    assert [c.name for c in bad_suite] == [report.READ_CASE] + sorted(rules)
    assert [c.name for c in good_suite] == [report.READ_CASE]
    # the default stays a test case per rule (interfaces.md)
    rc, full, _ = junit(tmp_path, good)
    assert [c.name for s in JUnitXml.fromfile(str(full)) for c in s] == \
        [report.READ_CASE] + sorted(RULES)
