"""`ibpath audit` from the command line (interfaces.md): exit statuses 0/1/2, the JSON and JUnit
contracts, --list-rules, --kernel, --blob, unreadable inputs with the findings up to the damage,
and real unmodified traffic without an error. No run may print a Traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ibpath_scapy.audit import report
from ibpath_scapy.audit.model import RULES
from ibpath_scapy.cli.main import main
from ibpath_scapy.craft.builder import CaptureBuilder

from test_rules_cm import GMP_LS, blob_file, ls_capture, modified, path
from test_rules_resolver import FWD, FWD_REV, exchange, query

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
OPENSM = ROOT / "captures" / "opensm" / "opensm-saquery.pcap"
IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main", "audit", "--quiet"]


def run(*args) -> tuple[int, str, str]:
    p = subprocess.run(IBPATH + [str(a) for a in args], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, p.stdout, p.stderr


def run_json(*args) -> tuple[int, dict, str]:
    rc, out, err = run("--format", "json", *args)
    return rc, json.loads(out), err


def inproc(capsys, *args) -> tuple[int, str, str]:
    rc = main(["audit", "--quiet", *[str(a) for a in args]])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


@pytest.fixture
def good(tmp_path) -> Path:
    """Seed shape 1: reversible forward path, one 0x2B record."""
    f = tmp_path / "good.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD_REV])
        b.blob([(0x2B, FWD_REV)], set_option=0)
    return f


@pytest.fixture
def bad(tmp_path) -> Path:
    """Seed shape 3: not reversible, one 0x2B record (RES-NO-FOLLOWUP on frames 1-3), then one
    more exchange (frames 4, 5)."""
    f = tmp_path / "bad.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD])
        b.blob([(0x2B, FWD)], set_option=0)
        exchange(b, query(), [FWD])
    return f


# -- exit statuses -----------------------------------------------------------------------------

def test_exit_0_without_error(good):
    rc, doc, err = run_json(good)
    assert rc == 0, err
    assert [f for f in doc["findings"] if f["severity"] == "error"] == []


def test_exit_1_with_an_error(bad):
    rc, doc, err = run_json(bad)
    assert rc == 1, err
    rules = {(f["rule"], tuple(f["frames"])) for f in doc["findings"]}
    assert ("RES-NO-FOLLOWUP", (1, 2, 3)) in rules


def test_exit_2_truncated_capture_keeps_findings(bad, tmp_path):
    cut = tmp_path / "cut.pcapng"
    data = bad.read_bytes()
    cut.write_bytes(data[:-40])  # into the last frame (the second answer)
    rc, doc, err = run_json(cut)
    assert rc == 2
    assert str(cut) in err and "byte offset" in err
    assert doc["unreadable"][0]["file"] == str(cut)
    assert doc["summary"]["packets"] == 4
    got = {(f["rule"], tuple(f["frames"])) for f in doc["findings"]}
    assert ("RES-NO-FOLLOWUP", (1, 2, 3)) in got       # made before the damage
    assert ("SAQ-NO-RESPONSE", (4,)) in got             # its answer is in the cut frame


def test_exit_2_truncated_real_capture(tmp_path):
    cut = tmp_path / "opensm-cut.pcap"
    shutil.copy(OPENSM, cut)
    cut.write_bytes(cut.read_bytes()[:3000])
    rc, out, err = run(cut)
    assert rc == 2
    assert "frame 10: truncated" in err and "byte offset" in err and str(cut) in err
    assert "unreadable" in out and "9 frames" in out


def test_exit_2_not_a_capture_and_other_files_still_reported(tmp_path, bad):
    junk = tmp_path / "notes.txt"
    junk.write_text("this is not a capture\n")
    rc, doc, err = run_json(junk, bad)
    assert rc == 2
    assert str(junk) in err and "not a capture or blob file" in err
    assert doc["files"] == [str(junk), str(bad)]
    assert any(f["rule"] == "RES-NO-FOLLOWUP" and f["file"] == str(bad) for f in doc["findings"])


def test_missing_file_exit_2(tmp_path):
    rc, _out, err = run(tmp_path / "nope.pcap")
    assert rc == 2 and "nope.pcap" in err


def test_odd_length_blob_is_readable(tmp_path):
    """A blob of odd length is a blob: read, and judged (BLOB-LENGTH), not unreadable."""
    f = tmp_path / "optval"
    blob_file(f, [(0x2B, path())])
    f.write_bytes(f.read_bytes() + b"\x00\x00\x00")
    rc, doc, err = run_json(f)
    assert "unreadable" not in doc
    assert doc["summary"]["packets"] == 1
    if "BLOB-LENGTH" in RULES:
        assert rc == 1
        errs = {(x["rule"], tuple(x["frames"])) for x in doc["findings"] if x["severity"] == "error"}
        assert ("BLOB-LENGTH", (1,)) in errs
        assert all(r.startswith("BLOB-") for r, _ in errs)  # the blob rules' own business
    else:
        assert rc in (0, 1)


# -- report contracts --------------------------------------------------------------------------

def test_json_contract(bad, capsys):
    rc, out, _ = inproc(capsys, "--format", "json", bad)
    doc = json.loads(out)
    assert rc == 1
    assert set(doc) >= {"files", "findings", "kernel_view", "summary"}
    assert doc["files"] == [str(bad)]
    for f in doc["findings"]:
        assert set(f) >= {"rule", "severity", "file", "frames", "message"}
        assert f["rule"] in RULES and f["severity"] in ("error", "warning", "info")
        assert f["file"] == str(bad) and f["frames"] == sorted(f["frames"]) and f["frames"]
        assert all(isinstance(n, int) for n in f["frames"])
    assert doc["summary"]["packets"] == 5
    (kv,) = doc["kernel_view"]
    assert kv["frame"] == 3 and kv["profiles"]["ucma"]["gmp"] == 0


def test_junit_contract(bad, good, capsys, tmp_path):
    """<testsuites>, one <testsuite> per input: a "read" case, then one case per rule, failed
    for each error finding (tests/test_junit.py checks the schema and a JUnit parser)."""
    out_file = tmp_path / "report.xml"
    rc, out, _ = inproc(capsys, "--format", "junit", "-o", out_file, bad, good)
    assert rc == 1 and out == ""
    root = ET.parse(out_file).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [str(bad), str(good)]
    cases = [c for s in suites for c in s.findall("testcase")]
    assert len(cases) == 2 * (len(RULES) + 1)
    names = {(c.get("classname"), c.get("name")) for c in cases}
    assert names == {(report.junit_classname(str(f)), r) for f in (bad, good)
                     for r in list(RULES) + [report.READ_CASE]}
    failed = {(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None}
    doc = json.loads(inproc(capsys, "--format", "json", bad, good)[1])
    errors = {(report.junit_classname(f["file"]), f["rule"]) for f in doc["findings"]
              if f["severity"] == "error"}
    assert failed == errors and (report.junit_classname(str(bad)), "RES-NO-FOLLOWUP") in failed
    assert int(root.get("failures")) == len(failed) == sum(int(s.get("failures")) for s in suites)
    assert root.get("errors") == "0"


def test_list_rules(capsys):
    rc, out, _ = inproc(capsys, "--list-rules")
    assert rc == 0
    for rid in ("RES-NO-FOLLOWUP", "RES-REDUNDANT-QUERIES", "RES-BLOB-SHAPE", "RES-BLOB-MISMATCH",
                "RES-STALE-BLOB", "CM-REQ-PATH-MISMATCH", "CM-REQ-ALT-MISMATCH",
                "CM-REQ-INBOUND-LID", "CM-ROCE-GID"):
        (line,) = [ln for ln in out.splitlines() if ln.startswith(rid + " ")]
        assert RULES[rid].severity in line and RULES[rid].summary in line


def test_kernel_option(tmp_path, capsys):
    """A routed GMP path from an LS response: the ≥ 6.1 kernel puts the inbound DLID into the
    REQ, the < 6.1 kernel the permissive LID."""
    f = tmp_path / "ls.pcapng"
    gmp = modified(GMP_LS, hop_limit=3)
    resp, req = ls_capture(f, modified(gmp, slid=5, dlid=0xFFFF), 5, gmp=gmp)

    def cm(kernel):
        rc, out, _ = inproc(capsys, "--format", "json", "--kernel", kernel, f)
        return rc, sorted((x["rule"], tuple(x["frames"])) for x in json.loads(out)["findings"]
                          if x["rule"].startswith("CM-"))

    assert cm("ls-multi") == (0, [])
    assert cm("all") == (0, [])
    assert cm("ls-legacy") == (1, [("CM-REQ-PATH-MISMATCH", (resp, req))])


def test_blob_option(tmp_path, capsys):
    optval = blob_file(tmp_path / "optval.bin", [(0x2B, path())])
    caps = []
    for name in ("a", "b"):
        f = tmp_path / f"{name}.pcapng"
        with CaptureBuilder(str(f), encap="ib") as b:
            b.cm_req(path(sl=4))
        caps.append(f)
    rc, out, _ = inproc(capsys, "--format", "json", "--blob", optval, *caps)
    doc = json.loads(out)
    assert rc == 1
    assert doc["files"] == [str(caps[0]), str(caps[1]), optval]
    hits = [(f["file"], f["rule"], f["frames"]) for f in doc["findings"] if f["rule"].startswith("CM-")]
    assert hits == [(str(caps[0]), "CM-REQ-PATH-MISMATCH", [1]),
                    (str(caps[1]), "CM-REQ-PATH-MISMATCH", [1])]
    assert all("optval.bin" in f["message"] for f in doc["findings"] if f["rule"].startswith("CM-"))
    assert doc["summary"]["packets"] == 3  # one frame per capture, the blob file's one
    rc, out, _ = inproc(capsys, "--blob", optval, caps[0])
    assert f"== {caps[0]}: 1 frames" in out


# -- real traffic ------------------------------------------------------------------------------

def test_real_traffic_has_no_error():
    external = sorted((SHARED / "captures" / "external").glob("*.pcap"))
    if not external:
        pytest.skip("shared/captures/external not found")
    rc, doc, err = run_json(OPENSM, *external)
    assert rc == 0, err
    assert [f for f in doc["findings"] if f["severity"] == "error"] == []
    assert doc["summary"]["packets"] == 36 + 43 + 123 + 16


def test_unreadable_blob_option_exit_2(tmp_path, good):
    """A --blob file that cannot be read is reported like any input; the captures still are."""
    blob = tmp_path / "optval"
    rc, doc, err = run_json("--blob", blob, good)
    assert rc == 2 and str(blob) in err
    assert doc["files"] == [str(good), str(blob)]
    assert doc["unreadable"][0]["file"] == str(blob)


def test_blob_option_reads_any_non_capture_as_a_blob(tmp_path, good):
    """--blob says "this is a blob" (issue 17): a text file given so is judged as one (11
    bytes: BLOB-LENGTH, no whole record), not refused."""
    blob = tmp_path / "optval"
    blob.write_text("not a blob\n")
    rc, doc, err = run_json("--blob", blob, good)
    assert rc == 1 and "unreadable" not in doc, err
    assert {f["rule"] for f in doc["findings"] if f["file"] == str(blob)} >= {"BLOB-LENGTH"}


# -- captures of which no frame was decoded (issue 39) ------------------------------------------

def _undecodable(path: Path, linktypes: list[int]) -> Path:
    """A pcapng with one frame of each of linktypes, none of which ibpath decodes."""
    from ibpath_scapy.capture.pcapio import PcapNgWriter
    with PcapNgWriter(str(path)) as w:
        for k, lt in enumerate(linktypes):
            w.write(bytes([k]) * 40, lt, float(k))
    return path


def test_capture_of_which_no_frame_was_decoded_is_not_green(tmp_path):
    """Only link type 65000: a DECODE-UNSUPPORTED warning and exit 0 before; now exit 2, the
    reason on stderr and an error `read` case in JUnit (the warning is still there)."""
    from junitparser import Error, JUnitXml

    cap = _undecodable(tmp_path / "user.pcapng", [65000, 65000, 65000])
    why = "no frame audited: 3 frames of link type 65000 not decoded"
    rc, doc, err = run_json(cap)
    assert rc == 2 and f"ibpath: {cap}: {why}\n" in err
    assert doc["unreadable"] == [{"file": str(cap), "error": why}]
    assert [f["rule"] for f in doc["findings"]] == ["DECODE-UNSUPPORTED"]
    rc, out, _ = run("--format", "junit", cap)
    (suite,) = JUnitXml.fromstring(out.encode())
    (read,) = [c for c in suite if c.name == report.READ_CASE]
    assert rc == 2 and suite.errors == 1
    assert isinstance(read.result[0], Error) and read.result[0].message == why


def test_capture_with_some_frames_decoded_keeps_the_warning():
    rc, doc, err = run_json(ROOT / "captures" / "corpus" / "decode-unsupported.pcapng")
    assert rc == 0 and "unreadable" not in doc and err == ""
    assert [f["severity"] for f in doc["findings"]] == ["warning"]


@pytest.mark.parametrize("linktypes, says", [
    ([65000], "1 frame of link type 65000 not decoded"),
    ([65000, 147, 65000], "3 frames of link types 147 and 65000 not decoded"),
])
def test_decode_summary_of_frames_not_decoded_reads_as_english(tmp_path, linktypes, says):
    """It said "1 of link types not decoded"."""
    cap = _undecodable(tmp_path / "user.pcapng", linktypes)
    p = subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "decode", str(cap)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert p.stderr == (f"{cap}: {len(linktypes)} frame{'s' * (len(linktypes) > 1)}, "
                        f"0 MAD frames, 0 malformed, {says}\n")
