"""`ibpath audit --annotate OUT` (issue 44): the copy's packet comments as tshark reads them
(frame.comment, in a tshark with a HOME of its own), every other frame as it was, a pcap
written as pcapng with its timestamps, comments a frame had kept, several inputs into a
directory, and the refusals (a stream, two inputs on one name, an output that is an input)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import CAPTURES
from tshark_util import needs_tshark, run_tshark

pytestmark = needs_tshark

CORPUS = CAPTURES / "corpus"
NO_FOLLOWUP = CORPUS / "res-no-followup.pcapng"
IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main", "audit", "--quiet"]


def ibpath(*args, ok=(0, 1), **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(IBPATH + [str(a) for a in args], capture_output=True, text=True,
                       timeout=300, **kw)
    assert p.returncode in ok, f"exit {p.returncode}: {p.stderr[-2000:]}"
    assert "Traceback" not in p.stderr, p.stderr
    return p


def comments(capture, display_filter=None) -> dict[int, list[str]]:
    """{frame: its packet comments} as tshark reads them."""
    args = ["-T", "fields", "-E", "occurrence=a", "-E", "aggregator=\x1f",
            "-e", "frame.number", "-e", "frame.comment"]
    if display_filter:
        args += ["-Y", display_filter]
    out = run_tshark(capture, args).check().stdout
    rows = {}
    for line in out.splitlines():
        n, _, c = line.partition("\t")
        rows[int(n)] = c.split("\x1f") if c else []
    return rows


def frames(capture) -> tuple[str, str]:
    """What tshark shows of every frame but its comments: time, lengths, protocols, and the
    summary lines with every frame's bytes."""
    fields = run_tshark(capture, ["-T", "fields", "-e", "frame.number", "-e", "frame.time_epoch",
                                  "-e", "frame.len", "-e", "frame.cap_len",
                                  "-e", "frame.protocols"]).check().stdout
    return fields, run_tshark(capture, ["-x"]).check().stdout


def test_findings_on_their_frames_as_tshark_shows_them(tmp_path):
    out = tmp_path / "nf.pcapng"
    p = ibpath("--annotate", out, "--format", "json", NO_FOLLOWUP)
    findings = json.loads(p.stdout)["findings"]
    got = comments(out)
    before = comments(NO_FOLLOWUP)
    want = {n: list(before[n]) for n in before}
    for f in findings:
        for n in f["frames"]:
            want[n].append(f"{f['rule']} {f['severity']}: {f['message']}")
    assert got == want
    # RES-NO-FOLLOWUP rests on the query, the answer and the blob: it is on each of them
    res = comments(out, 'frame.comment contains "RES-"')
    assert sorted(res) == [1, 2, 3]
    assert all(any(c.startswith("RES-NO-FOLLOWUP error: forward path") for c in cs)
               for cs in res.values())
    # the comment the blob frame had (the kernel's verdict, from the capture) is kept, first
    assert before[3] and got[3][0] == before[3][0]


def test_every_frame_is_as_it_was(tmp_path):
    out = tmp_path / "nf.pcapng"
    ibpath("--annotate", out, NO_FOLLOWUP)
    assert frames(out) == frames(NO_FOLLOWUP)


def test_a_pcap_becomes_a_pcapng_with_its_timestamps(tmp_path):
    """RoCEv2 frames (Ethernet) in a nanosecond pcap. (ERF records are not used here: for
    them Wireshark takes the time in the ERF header from a pcap and the block's from a
    pcapng.)"""
    from ibpath_scapy.capture.pcapio import PcapWriter, read_frames
    pcap = tmp_path / "roce.pcap"
    with PcapWriter(str(pcap), 1, nano=True) as w:
        for f in read_frames(str(CORPUS / "cm-roce-gid.pcapng")):
            if f.linktype == 1:
                w.write(f.data, f.time + 0.123456789)
    out = tmp_path / "roce-annotated.pcapng"
    p = ibpath("--annotate", out, "--format", "json", pcap)
    findings = json.loads(p.stdout)["findings"]
    assert findings
    want: dict[int, list[str]] = {}
    for f in findings:
        for n in f["frames"]:
            want.setdefault(n, []).append(f"{f['rule']} {f['severity']}: {f['message']}")
    assert {n: c for n, c in comments(out).items() if c} == want
    if shutil.which("capinfos"):
        info = subprocess.run(["capinfos", "-t", str(out)], capture_output=True, text=True)
        assert "File type:           Wireshark/... - pcapng" in info.stdout, info.stdout
    assert open(out, "rb").read(4) == b"\x0a\x0d\x0d\x0a"  # a pcapng section header
    assert frames(out) == frames(pcap)


def test_annotating_twice_adds_nothing(tmp_path):
    once, twice = tmp_path / "once.pcapng", tmp_path / "twice.pcapng"
    ibpath("--annotate", once, NO_FOLLOWUP)
    ibpath("--annotate", twice, once)
    assert comments(twice) == comments(once)


def test_several_inputs_go_into_a_directory(tmp_path):
    tree = tmp_path / "in"
    (tree / "a").mkdir(parents=True)
    shutil.copy(NO_FOLLOWUP, tree / "a" / "nf.pcapng")
    shutil.copy(CORPUS / "saq-retry.pcapng", tree / "retry.pcap")
    out = tmp_path / "out"
    ibpath("--annotate", out, tree, CORPUS / "conform-ucma.pcapng")
    made = sorted(str(f.relative_to(out)) for f in out.rglob("*") if f.is_file())
    assert made == ["a/nf.pcapng", "conform-ucma.pcapng", "retry.pcapng"]
    assert sorted(comments(out / "a" / "nf.pcapng", 'frame.comment contains "RES-"')) == [1, 2, 3]
    assert comments(out / "conform-ucma.pcapng") == comments(CORPUS / "conform-ucma.pcapng")


def test_a_raw_blob_gets_no_copy_and_a_line_says_why(tmp_path):
    p = ibpath("--annotate", tmp_path / "b.pcapng", "--as", "blob", NO_FOLLOWUP)
    assert f"{NO_FOLLOWUP}: not annotated: a raw blob file has no frames" in p.stderr
    assert not (tmp_path / "b.pcapng").exists()


def test_refusals_before_the_audit(tmp_path):
    # a stream cannot be read a second time
    p = subprocess.run(IBPATH + ["--annotate", str(tmp_path / "s.pcapng"), "-"],
                       stdin=open(NO_FOLLOWUP, "rb"), capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "is a stream: save it to a file first" in p.stderr
    assert not (tmp_path / "s.pcapng").exists()
    # two inputs on one name
    (tmp_path / "x").mkdir()
    shutil.copy(NO_FOLLOWUP, tmp_path / "x" / "nf.pcap")
    shutil.copy(NO_FOLLOWUP, tmp_path / "x" / "nf.pcapng")
    p = ibpath("--annotate", tmp_path / "out", tmp_path / "x", ok=(2,))
    assert "would both be written to" in p.stderr and not (tmp_path / "out").exists()
    # an output that is an input
    copy = tmp_path / "c.pcapng"
    shutil.copy(NO_FOLLOWUP, copy)
    p = ibpath("--annotate", copy, copy, ok=(2,))
    assert "is an input" in p.stderr and copy.read_bytes() == NO_FOLLOWUP.read_bytes()
    # several inputs and OUT a file
    p = ibpath("--annotate", copy, NO_FOLLOWUP, CORPUS / "saq-retry.pcapng", ok=(2,))
    assert "OUT is a directory, and this is a file" in p.stderr


def test_an_unreadable_input_gets_no_copy(tmp_path):
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(NO_FOLLOWUP.read_bytes()[:-10])
    p = ibpath("--annotate", tmp_path / "out.pcapng", cut, ok=(2,))
    assert f"{cut}: not annotated: it cannot be read to its end" in p.stderr
    assert not (tmp_path / "out.pcapng").exists()


def test_an_unwritable_copy_is_named_and_exit_2(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    target = ro / "missing-dir" / "x.pcapng"
    (ro / "missing-dir").write_text("a file, not a directory")
    p = ibpath("--annotate", target, NO_FOLLOWUP, ok=(2,))
    assert "cannot write the annotated copy" in p.stderr and str(NO_FOLLOWUP) in p.stderr
