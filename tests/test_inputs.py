"""Issue 17, point 1: every input read or refused out loud. Standard input and FIFOs as pcap
and pcapng streams (written a packet at a time by another process, as `tcpdump -U -w -`
does), directories audited recursively with the files they skip listed, and --jobs N giving
the serial run's report."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ibpath_scapy.craft import CaptureBuilder
from ibpath_scapy.capture.pcapio import PcapWriter, read_frames

from test_rules_blob import rec
from test_rules_resolver import FWD_REV, exchange, query

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "captures" / "corpus"
IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main"]


def run(*args, stdin=None) -> tuple[int, str, str]:
    p = subprocess.run(IBPATH + [str(a) for a in args], capture_output=True, text=True,
                       timeout=300, stdin=stdin)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, p.stdout, p.stderr


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    """A real corpus capture (errors in it) as pcapng."""
    return CORPUS / "res-no-followup.pcapng"


@pytest.fixture(scope="module")
def capture_pcap(tmp_path_factory, capture) -> Path:
    """The MAD frames of the same capture as a classic pcap (one link type: its blob frame,
    an exported PDU, stays out)."""
    out = tmp_path_factory.mktemp("pcap") / "exchange.pcap"
    frames = list(read_frames(str(capture)))
    linktype = frames[0].linktype
    frames = [f for f in frames if f.linktype == linktype]
    with PcapWriter(str(out), linktype) as w:
        for f in frames:
            w.write(f.data, f.time)
    return out


class _Lines:
    """Lines of a pipe as they come, each within a timeout (select on the descriptor, with a
    buffer of our own: a buffered reader's readline() could take two lines at once)."""

    def __init__(self, stream):
        self.fd, self.buf = stream.fileno(), b""

    def next(self, seconds: float) -> bytes | None:
        end = time.monotonic() + seconds
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line + b"\n"

    def rest(self) -> bytes:
        while chunk := os.read(self.fd, 65536):
            self.buf += chunk
        return self.buf


def _same_report(a: str, b: str, name_a: str, name_b: str) -> None:
    assert a.replace(name_a, "<input>") == b.replace(name_b, "<input>")


# -- standard input and pipes -----------------------------------------------------------------

@pytest.mark.parametrize("which", ["pcapng", "pcap"])
def test_stdin_gives_the_files_report(which, capture, capture_pcap):
    path = capture if which == "pcapng" else capture_pcap
    rc_file, out_file, _ = run("audit", "--quiet", "--format", "json", path)
    with open(path, "rb") as f:
        rc, out, err = run("audit", "--quiet", "--format", "json", "-", stdin=f)
    assert rc == rc_file, err
    assert json.loads(out_file)["summary"]["packets"] > 0
    _same_report(out, out_file, '"-"', json.dumps(str(path)))


# A writer process: the file's header, then each packet record on its own write, flushed, with
# a pause (what tcpdump -U does); with `gate`, it waits for a line on its stdin before each
# packet after the first, so a test can see a packet processed before the next one exists.
_WRITER = textwrap.dedent("""
    import os, sys, time
    from ibpath_scapy.capture.pcapio import Input, sniff_format
    data, out, gate = open(sys.argv[1], "rb").read(), sys.argv[2], sys.argv[3] == "1"
    fd = os.open(out, os.O_WRONLY) if out != "-" else 1
    if sniff_format(data[:4]) == "pcap":
        cuts, pos = [24], 24
        while pos < len(data):
            pos += 16 + int.from_bytes(data[pos + 8:pos + 12], "little")
            cuts.append(pos)
    else:  # pcapng: block by block
        cuts, pos = [], 0
        while pos < len(data):
            pos += int.from_bytes(data[pos + 4:pos + 8], "little")
            cuts.append(pos)
    start = 0
    for i, end in enumerate(cuts):
        if gate and i > 1:
            sys.stdin.readline()
        os.write(fd, data[start:end])
        start = end
        time.sleep(0.01)
    os.close(fd)
""")


def _writer(src: Path, out: str, gate: bool = False, stdout=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WRITER, str(src), out, "1" if gate else "0"],
                            stdin=subprocess.PIPE if gate else None, stdout=stdout)


def test_pcap_stream_written_a_packet_at_a_time_through_a_pipe(capture_pcap):
    """decode - prints each frame's record as its packet arrives: the writer sends packet k+1
    only after the record of packet k was read back."""
    writer = _writer(capture_pcap, "-", gate=True, stdout=subprocess.PIPE)
    dec = subprocess.Popen(IBPATH + ["decode", "--format", "json", "-"], stdin=writer.stdout,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    writer.stdout.close()
    n = len(list(read_frames(str(capture_pcap))))
    got, lines = [], _Lines(dec.stdout)
    try:
        for k in range(1, n + 1):
            line = lines.next(60)
            assert line, f"no record for frame {k} while the writer waits"
            rec = json.loads(line)
            assert rec["frame"] == k
            got.append(rec)
            if k < n:
                writer.stdin.write(b"go\n")
                writer.stdin.flush()
        writer.stdin.close()
        rc = dec.wait(60)
    finally:
        writer.kill()
        dec.kill()
    err = dec.stderr.read().decode()
    assert "Traceback" not in err and f"-: {n} frames" in err
    rc_file, want, _ = run("decode", "--format", "json", capture_pcap)
    assert [json.loads(ln) for ln in want.splitlines()] == got and rc == rc_file


def test_pcapng_stream_through_a_pipe(capture):
    writer = _writer(capture, "-", stdout=subprocess.PIPE)
    rc, out, err = run("audit", "--quiet", "--format", "json", "-", stdin=writer.stdout)
    writer.wait(30)
    rc_file, out_file, _ = run("audit", "--quiet", "--format", "json", capture)
    assert rc == rc_file == 1, err
    _same_report(out, out_file, '"-"', json.dumps(str(capture)))


@pytest.mark.parametrize("engine", ["scapy", "tshark"])
def test_fifo_fed_by_a_writer_process(tmp_path, capture, engine):
    if engine == "tshark":
        from ibpath_scapy.engines import tshark as tshark_engine
        if tshark_engine.tshark_path() is None:
            pytest.skip("tshark missing")
    fifo = tmp_path / "live.fifo"
    os.mkfifo(fifo)
    writer = _writer(capture, str(fifo))
    rc, out, err = run("audit", "--quiet", "--format", "json", "--engine", engine, fifo)
    assert writer.wait(30) == 0
    rc_file, out_file, _ = run("audit", "--quiet", "--format", "json", capture)
    assert rc == rc_file == 1, err
    _same_report(out, out_file, json.dumps(str(fifo)), json.dumps(str(capture)))


def test_stream_cut_short_names_the_input_and_keeps_the_findings_before(capture):
    data = capture.read_bytes()
    rc, out, err = run("audit", "--quiet", "--format", "json", "-",
                       stdin=subprocess.Popen(["head", "-c", str(len(data) - 100), str(capture)],
                                              stdout=subprocess.PIPE).stdout)
    assert rc == 2 and err.startswith("ibpath: -: frame ") and "truncated" in err
    doc = json.loads(out)
    assert doc["unreadable"][0]["file"] == "-" and doc["findings"]


def test_empty_stdin_is_not_a_green_report():
    rc, out, err = run("audit", "--quiet", "-", stdin=subprocess.DEVNULL)
    assert rc == 2 and "-: not a capture or blob file (empty)" in err
    assert "unreadable: -: not a capture or blob file (empty)" in out


# -- directories -------------------------------------------------------------------------------

@pytest.fixture
def tree(tmp_path, capture, capture_pcap) -> Path:
    """Captures, blobs and junk, two levels deep."""
    d = tmp_path / "cluster"
    (d / "node1" / "logs").mkdir(parents=True)
    (d / "node2").mkdir()
    (d / "node1" / "a.pcapng").write_bytes(capture.read_bytes())
    (d / "node2" / "b.cap").write_bytes(capture_pcap.read_bytes())
    with CaptureBuilder(str(d / "node2" / "clean.pcapng")) as b:
        exchange(b, query(), [FWD_REV])
        b.blob([(0x2B, FWD_REV)], set_option=0)
    (d / "node1" / "optval").write_bytes(rec(0x2B))
    (d / "node1" / "optval-42b").write_bytes(rec(0x42B))
    (d / "node1" / "logs" / "ibacm.log").write_text("acm: resolving 10.0.0.2\n")
    (d / "node1" / "logs" / "empty").write_bytes(b"")
    (d / "node2" / "ELF").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(200))
    os.mkfifo(d / "node2" / "live.fifo")  # read only when named: it would block the walk
    (d / "node2" / "old").symlink_to(d / "node1")  # not followed, and said so
    return d


def test_directory_tree_with_captures_blobs_and_junk(tree):
    rc, out, err = run("audit", "--quiet", "--format", "json", tree)
    doc = json.loads(out)
    rel = [str(Path(f).relative_to(tree)) for f in doc["files"]]
    assert rel == ["node1/a.pcapng", "node1/optval", "node1/optval-42b", "node2/b.cap",
                   "node2/clean.pcapng"]
    skipped = {str(Path(s["file"]).relative_to(tree)): s["reason"] for s in doc["skipped"]}
    assert skipped == {"node1/logs/empty": "empty",
                       "node1/logs/ibacm.log": "not a capture or blob file (starts with "
                                               "61636d3a20726573)",
                       "node2/ELF": "not a capture or blob file (starts with 7f454c4602010100)",
                       "node2/live.fifo": "not a regular file (give it by name to read it)",
                       "node2/old": "a symbolic link to a directory (not followed)"}
    for name in skipped:
        assert f"ibpath: skipped {tree / name}: " in err
    assert rc == 1 and "unreadable" not in doc
    by_file = {}
    for f in doc["findings"]:
        by_file.setdefault(str(Path(f["file"]).relative_to(tree)), set()).add(f["rule"])
    assert "BLOB-UNKNOWN-FLAGS" in by_file["node1/optval-42b"]
    assert "RES-NO-FOLLOWUP" in by_file["node1/a.pcapng"]
    assert "node2/b.cap" not in by_file  # the same exchange without its blob: nothing to judge
    rc, text, _ = run("audit", "--quiet", tree)
    assert f"== skipped {tree / 'node2/ELF'}: not a capture or blob file" in text
    assert "5 file(s) (5 skipped)" in text


def test_directory_without_any_capture_exits_2(tmp_path):
    (tmp_path / "notes.txt").write_text("x\n")
    rc, _, err = run("audit", "--quiet", tmp_path)
    assert rc == 2 and "no capture or blob file" in err


# -- folders and files that cannot be read -----------------------------------------------------

NOBODY = 65534


def _unreadable_to_us(path: Path) -> None:
    """Make path unreadable to the audit as `_as_plain_user` runs it: owned by someone else
    (nobody) with mode 700 when we are root, mode 000 otherwise (its owner cannot read it)."""
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
        os.chmod(path, 0o700 if path.is_dir() else 0o600)
    else:
        os.chmod(path, 0)


def _as_plain_user(*args) -> tuple[int, str, str]:
    """ibpath as a user without root's power over file modes. As root: root without the two
    capabilities that bypass them (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH; setpriv drops them
    from the bounding set, which execve applies), so the kernel checks the modes as for any
    user; unlike --reuid=nobody, this still reads a checkout that nobody may not enter."""
    prefix = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("setpriv (util-linux) is needed to audit as root without "
                        "CAP_DAC_OVERRIDE")
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search"]
    p = subprocess.run(prefix + IBPATH + [str(a) for a in args], capture_output=True,
                       text=True, timeout=300)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def locked_tree(tmp_path, capture) -> Path:
    """DIR with a readable capture, a folder and a capture that cannot be read."""
    d = tmp_path / "locked"
    (d / "sub").mkdir(parents=True)
    (d / "a.pcapng").write_bytes(capture.read_bytes())
    (d / "sub" / "x.pcapng").write_bytes(capture.read_bytes())
    (d / "z.pcapng").write_bytes(capture.read_bytes())
    yield d
    for p in (d / "sub", d / "z.pcapng", d):
        os.chmod(p, 0o700)  # pytest removes tmp_path


def test_unreadable_folder_and_file_are_named_in_every_format(locked_tree):
    """Issue 39: `ibpath audit DIR` where DIR/sub cannot be listed gave "1 file(s) ... 0
    errors" and exit 0; now the folder (and a file that cannot be opened) is named with the
    reason on stderr and in every format, exit status 2."""
    from junitparser import Error, JUnitXml

    d = locked_tree
    rc, out, _ = _as_plain_user("audit", "--quiet", "--format", "json", d)
    assert rc == 1 and len(json.loads(out)["files"]) == 3  # the control: all of it is read
    _unreadable_to_us(d / "sub")
    _unreadable_to_us(d / "z.pcapng")
    rc, out, err = run("audit", "--quiet", "--format", "json", d)
    assert rc == 1 and "unreadable" not in json.loads(out)  # root reads it: the modes matter
    locked = {str(d / "sub"): "Permission denied (a folder that cannot be listed: none of its "
                              "files was audited)",
              str(d / "z.pcapng"): "Permission denied"}
    reports = {}
    for fmt in ("text", "json", "junit", "html"):
        rc, out, err = _as_plain_user("audit", "--quiet", "--format", fmt, d)
        assert rc == 2, (fmt, err)
        for path, why in locked.items():
            assert f"ibpath: {path}: {why}\n" in err, (fmt, err)
        reports[fmt] = out
    for path, why in locked.items():
        assert f"unreadable: {path}: {why}" in reports["text"]
        assert f"unreadable: {why}" in reports["html"]
    doc = json.loads(reports["json"])
    assert {u["file"]: u["error"] for u in doc["unreadable"]} == locked
    # the walk's order: a folder's files, then its folders
    assert doc["files"] == [str(d / "a.pcapng"), str(d / "z.pcapng"), str(d / "sub")]
    xml = JUnitXml.fromstring(reports["junit"].encode())
    errors = {s.name: r.message for s in xml for c in s for r in c.result
              if isinstance(r, Error)}
    assert errors == locked and xml.errors == 2


def test_unreadable_top_folder_is_named_not_empty(locked_tree):
    """An unreadable top folder said only "no capture or blob file in DIR"."""
    _unreadable_to_us(locked_tree)
    rc, out, err = _as_plain_user("audit", "--quiet", locked_tree)
    assert rc == 2 and "no capture or blob file" not in err
    assert f"ibpath: {locked_tree}: Permission denied (a folder that cannot be listed" in err
    assert f"unreadable: {locked_tree}: Permission denied" in out


# -- several processes ------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["json", "text"])
def test_parallel_run_gives_the_serial_report(tmp_path, tree, fmt):
    missing = tmp_path / "missing.pcap"
    args = ("audit", "--quiet", "--format", fmt, CORPUS, tree, missing)
    serial = run(*args)
    t = time.monotonic()
    parallel = run(*args, "--jobs", "2")
    assert parallel == serial
    assert serial[0] == 2  # the missing file
    assert time.monotonic() - t < 300


def test_parallel_junit_equals_serial_but_for_times(tmp_path):
    out = [tmp_path / "s.xml", tmp_path / "p.xml"]
    rc_s = run("audit", "--quiet", "--format", "junit", "-o", out[0], CORPUS)[0]
    rc_p = run("audit", "--quiet", "--format", "junit", "-o", out[1], CORPUS, "-j", "3")[0]
    assert rc_s == rc_p == 1

    def untimed(p):
        import re
        return re.sub(r'time="[\d.]+"', 'time=""', p.read_text())

    assert untimed(out[0]) == untimed(out[1])


def _blocks(path: Path) -> list[bytes]:
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        end = pos + int.from_bytes(data[pos + 4:pos + 8], "little")
        out.append(data[pos:end])
        pos = end
    return out


def test_live_stream_reports_findings_while_the_capture_runs(tmp_path):
    """`tcpdump -U -w - | ibpath audit -`: a frame finding is printed as soon as its frame is
    in, a transaction's once the capture's clock is 10 s past its answer, all while the
    stream is still open; the full report follows when it ends."""
    from test_rules_sa import answer, query as sa_query

    cap = tmp_path / "live.pcapng"
    with CaptureBuilder(str(cap)) as b:
        q = b.sa_query(sa_query(service_id=0x106), component_mask=0x1 | 0x0C)  # half ServiceID
        b.sa_answer(q, [], status=0x0600)  # SAR-STATUS, judged when the transaction closes
        b.t += 11
        b.sa_answer(b.sa_query(sa_query()), [answer()])
    shb, idb, *packets = _blocks(cap)
    p = subprocess.Popen(IBPATH + ["audit", "--quiet", "-"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=False)
    out = _Lines(p.stdout)
    try:
        p.stdin.write(shb + idb + packets[0])
        p.stdin.flush()
        assert b"findings as they are found" in out.next(60)
        assert b"SAQ-SERVICEID-HALF" in out.next(60)
        p.stdin.write(packets[1])
        p.stdin.flush()
        assert out.next(1) is None  # the answer's transaction is still open
        p.stdin.write(packets[2])  # 11 s later
        p.stdin.flush()
        line = out.next(60)
        assert line and b"info SAR-STATUS" in line and b"INSUF_COMPS" in line
        p.stdin.write(packets[3])
        p.stdin.close()
        rest = out.rest().decode()
        assert p.wait(60) == 1
    finally:
        p.kill()
    assert "== -: 4 frames" in rest and "== 1 file(s), 4 frames, 2 SA transactions" in rest
    assert "SAQ-SERVICEID-HALF" in rest and "SAR-STATUS" in rest


def test_ctrl_c_on_a_stream_reports_what_was_read(capture):
    """Ctrl-C reaches both ends of `tcpdump | ibpath audit -`: the audit ends the input there
    and reports, without a traceback."""
    import signal

    shb, *blocks = _blocks(capture)
    p = subprocess.Popen(IBPATH + ["audit", "--quiet", "--format", "json", "-"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdin.write(shb + b"".join(blocks))
    p.stdin.flush()
    time.sleep(3)  # imports, then waiting on the open stream
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert b"Traceback" not in err, err
    doc = json.loads(out)
    assert doc["summary"]["packets"] == 6 and p.returncode == 1
    assert "RES-NO-FOLLOWUP" in {f["rule"] for f in doc["findings"]}
