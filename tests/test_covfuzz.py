"""tools/covfuzz.py, the coverage-guided fuzzer (issue #43): every committed input (the seed
corpus and the regression inputs findings left) replayed through its target's oracle, the
oracles shown able to fail, and a CI smoke of each target under atheris for a fixed short time
(skipped, with the reason, where atheris is not installed)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest

from tools import covfuzz
from tools import fuzz

try:
    import atheris  # noqa: F401
except ImportError:
    atheris = None

needs_atheris = pytest.mark.skipif(
    atheris is None, reason="atheris is not installed (pip install -e '.[test]'; it has wheels "
    "for CPython 3.11 on x86-64 Linux): the coverage-guided smoke cannot run")

SMOKE_SECONDS = 1  # per target: the smoke is a check that each target runs, not a hunt

# Every regression input findings left, by target and name, and what it found.
REGRESSIONS = {
    ("blob", "blob-sniffed-by-records-not-flags"):
        # two 72-byte records whose first flags word is 0x5b00000a (over 0x100) but whose
        # PathRecords read as resolved paths: blobsniff.plausible (decode_file, the fast
        # path, the audit) takes the file as a blob, tools/fuzz.py's check read it with the
        # older PathArray.plausible and called it no capture: a false fastpath-diff
        "the random fuzzer's oracle read raw blobs with another sniff than decode_file",
    ("audit", "answer-of-another-attribute"):
        # a PathRecord Get whose answer under the same TID carries ServiceRecords: the
        # replay took them for the query's records and SAR-MISMATCH read a ServiceRecord's
        # DGID (AttributeError); an answer of another attribute now answers none of them
        "the replay judged another attribute's records against a PathRecord query",
    ("rmpp", "rmpp-segment-past-last-held"):
        # segment 1538 of a transfer arrives before its LAST (4): the Reassembler holds it
        # (the receive window is not followed, rmpp.py's docstring) and completes 1..4; the
        # first rmpp oracle wanted exactly 1..LAST held
        "covfuzz's own RMPP oracle was stricter than the reassembly's documented model",
    ("rmpp", "rmpp-one-transfer-over-the-open-cap"):
        # six segments of one transfer (1536 bytes) over the oracle's small open-bytes cap
        # (1280), then a second transfer: a transfer is never evicted for its own segment, so
        # the open bytes pass the cap by at most the oldest transfer's (1 MiB, real caps)
        "covfuzz's RMPP oracle took the open-bytes cap for a hard bound",
}


def test_every_regression_input_is_listed():
    found = {(t, f.name) for t in covfuzz.TARGETS for f in covfuzz.regression_files(t)}
    assert found == set(REGRESSIONS)


@pytest.mark.parametrize("target", sorted(covfuzz.TARGETS))
def test_committed_inputs_pass_the_oracle(target):
    """The seed corpus and the regression inputs of a target: no finding."""
    files = covfuzz.corpus_files(target) + covfuzz.regression_files(target)
    assert len(covfuzz.corpus_files(target)) >= 10, "tools/covfuzz.py --make-corpus"
    bad = covfuzz.replay(files, target)
    assert not bad, bad[0][1]


def test_the_committed_corpus_is_small():
    size = sum(p.stat().st_size for p in covfuzz.CORPUS.rglob("*") if p.is_file())
    assert size < 2 * 1024 * 1024


def test_blob_sniffed_by_its_records_is_read_as_a_blob_everywhere(tmp_path):
    """The regression input: a raw blob whose first flags word is no flag set (0x5b00000a)
    but whose records read as resolved paths is one blob frame for decode_file and the fast
    path alike, and tools/fuzz.py's in-process check now agrees."""
    from ibpath_scapy.engines.scapy import blobsniff
    from ibpath_scapy.engines.scapy.decode import decode_file
    from ibpath_scapy.layers.pathdata import PathArray

    data = (covfuzz.CORPUS / "blob" / "regressions" / "blob-sniffed-by-records-not-flags").read_bytes()
    assert struct.unpack_from("<I", data)[0] >= 0x100 and len(data) % 72 == 0
    assert blobsniff.plausible(data) and not PathArray.plausible(data)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    (rec,) = list(decode_file(str(path)))
    assert rec["kind"] == "blob" and rec["blob"]["records"] == 2
    st = fuzz.check_in_process(fuzz.Input(path, 1, {1}))
    assert not st.problems, [p.detail for p in st.problems]


# -- the oracles can fail ---------------------------------------------------------------------

def test_mad_oracle_sees_the_c_decoder_differ(monkeypatch):
    """A C decoder that gets one MAD's length wrong is a finding."""
    d = covfuzz._fast_decoder(True)
    if d._native is None:
        pytest.skip("the package was built without its C extension")
    native = d._native

    def c_reads(data: bytes) -> bool:
        return any(not isinstance(at, str) and at is not None
                   and native.decode(fr.data, at) is not None
                   for fr, at in covfuzz._mad_frames(data))

    data = next(d_ for d_ in (f.read_bytes() for f in covfuzz.corpus_files("mad")) if c_reads(d_))
    covfuzz.t_mad(data)

    class Wrong:
        def frame(self, data, at, *_):
            got = native.decode(data, at)
            return None if got is None else (*got[:2], got[2] - 1, *got[3:])

    monkeypatch.setattr(d, "_native", Wrong())
    with pytest.raises(covfuzz.Finding, match="C decoder"):
        covfuzz.t_mad(data)


def test_scan_oracles_see_the_c_loops_differ(monkeypatch):
    """C loops that stop one record early are a finding of the prefilter and pcapio targets."""
    m = covfuzz._modules()
    if m.pcapio._native_scan() is None:
        pytest.skip("the package was built without its C extension")
    real = m.pcapio._scanners

    def early(test, kind, *args, take=None):
        scan = real(test, kind, *args, take=take)
        if scan is None or m.pcapio._native_scan() is None:
            return scan
        return lambda b, pos, n: (lambda r: (pos, 0, []) if r[1] else r)(scan(b, pos, n))

    data = next(d for d in (f.read_bytes() for f in covfuzz.corpus_files("prefilter"))
                if real(covfuzz._pf_tests()[d[0] & 3][1], "pcap", "<")(d[1:], 0, len(d) - 1)[1])
    monkeypatch.setattr(m.pcapio, "_scanners", early)
    with pytest.raises(covfuzz.Finding, match="C/Python scan loops differ"):
        covfuzz.t_prefilter(bytes([data[0] & ~0x1C]) + data[1:])


def test_rmpp_oracle_sees_bookkeeping_go_wrong(monkeypatch):
    """A Reassembler that forgets to count a segment's bytes is a finding."""
    m = covfuzz._modules()
    data = max((f.read_bytes() for f in covfuzz.corpus_files("rmpp")), key=len)
    covfuzz.t_rmpp(data)
    real = m.rmpp.Reassembler.add

    def add(self, *a, **k):
        got = real(self, *a, **k)
        self.open_bytes += 1 if self.open else 0
        return got

    monkeypatch.setattr(m.rmpp.Reassembler, "add", add)
    with pytest.raises(covfuzz.Finding, match="open_bytes"):
        covfuzz.t_rmpp(data)


def test_whole_file_twins_are_compared_before_the_damage(monkeypatch):
    """On a capture damaged part way, the Python twins losing a record read before the
    damage is a finding (the comparison once took an error's records as none on both sides)."""
    m = covfuzz._modules()
    if m.pcapio._native_scan() is None:
        pytest.skip("the package was built without its C extension")
    path = covfuzz._work() / "capture"

    def damaged_with_records(data: bytes) -> bool:
        path.write_bytes(data)
        recs, _, _, error = covfuzz._fast_file(str(path), True)
        return bool(recs) and error is not None

    # a seed cut 7 bytes short: its last block is truncated
    data = next(d[:-7] for d in (f.read_bytes() for f in covfuzz.corpus_files("audit"))
                if damaged_with_records(d[:-7]))
    covfuzz.t_audit(data)
    real = m.fast.decode_file_fast

    def twin_loses_one(path_, decoder=None, **kw):
        recs = real(path_, decoder, **kw)
        if m.pcapio._native_scan() is None:  # within _PythonTwins
            next(recs)
        return recs

    monkeypatch.setattr(m.fast, "decode_file_fast", twin_loses_one)
    with pytest.raises(covfuzz.Finding, match="C/Python fast path differ"):
        covfuzz.t_audit(data)


def test_audit_oracle_sees_the_c_replay_differ(monkeypatch):
    """An audit whose replay, fed in C (Replay.intake), drops one SA frame finds otherwise
    than the Python replay: a finding."""
    from ibpath_scapy.audit.replay import Replay

    m = covfuzz._modules()
    path = covfuzz._work() / "with-sa"

    def has_sa(data: bytes) -> bool:
        path.write_bytes(data)
        try:
            return any(r.get("kind") == "sa" for r in m.fast.decode_file_fast(str(path)))
        except m.pcapio.CaptureError:
            return False

    data = next(d for d in (f.read_bytes() for f in covfuzz.corpus_files("audit")) if has_sa(d))
    covfuzz.t_audit(data)
    native = Replay.intake

    def drops_one(self):
        feed, dropped = native(self), []

        def wrong(rec, keep):
            if getattr(rec, "kind", None) == "sa" and not dropped:
                dropped.append(rec)
                return
            feed(rec, keep)

        return wrong

    monkeypatch.setattr(Replay, "intake", drops_one)
    with pytest.raises(covfuzz.Finding, match="C/Python twins differ"):
        covfuzz.t_audit(data)


def test_audit_oracle_sees_the_c_frame_test_differ(monkeypatch):
    """An audit whose frame-finding test in C (engine.frame_finding_batch: FrameTest) keeps
    no frame finds otherwise than the Python test where a frame rule holds: a finding."""
    from ibpath_scapy.audit import engine
    from ibpath_scapy.native import extension

    if extension() is None:
        pytest.skip("the package was built without its C extension")
    m = covfuzz._modules()
    path = covfuzz._work() / "with-frame-finding"

    def frame_finding(data: bytes) -> bool:
        path.write_bytes(data)
        try:
            records = list(m.fast.decode_file_fast(str(path)))
        except m.pcapio.CaptureError:
            return False
        return any(map(engine._frame_finding_test(), records))

    data = next(d for d in (f.read_bytes() for f in covfuzz.corpus_files("audit"))
                if frame_finding(d))
    covfuzz.t_audit(data)
    batch = engine.frame_finding_batch

    def keeps_none(has_finding):
        test = batch(has_finding)
        return test if extension() is None else (lambda group: [False] * len(test(group)))

    monkeypatch.setattr(engine, "frame_finding_batch", keeps_none)
    with pytest.raises(covfuzz.Finding, match="C/Python twins differ"):
        covfuzz.t_audit(data)


def test_whole_file_oracle_sees_a_traceback(monkeypatch):
    """An exception from the decoder on a netlink frame is a finding (tools/fuzz.py's
    check_in_process reports it, with the traceback)."""
    from ibpath_scapy.engines.scapy.decode import Decoder

    data = next(f.read_bytes() for f in covfuzz.corpus_files("netlink"))
    covfuzz.t_netlink(data)

    def broken(self, frame, pkt):
        raise ZeroDivisionError("planted")

    monkeypatch.setattr(Decoder, "_netlink", broken)
    with pytest.raises(covfuzz.Finding, match="(?s)traceback.*ZeroDivisionError: planted"):
        covfuzz.t_netlink(data)


def test_corpus_is_made_again_the_same(tmp_path):
    """--make-corpus is reproducible: the committed corpus is what it makes."""
    counts = covfuzz.make_corpus(tmp_path)
    for target, n in counts.items():
        made = sorted(p.name for p in (tmp_path / target).iterdir() if p.is_file())
        committed = sorted(p.name for p in covfuzz.corpus_files(target))
        assert made == committed, target
        assert n == len(made)


# -- the CI smoke: each target under atheris for a fixed short time ------------------------

@needs_atheris
@pytest.mark.parametrize("target", sorted(covfuzz.TARGETS))
def test_smoke(target, tmp_path):
    r = covfuzz.run_target(target, SMOKE_SECONDS, None, tmp_path / "corpus",
                           tmp_path / "findings", log=tmp_path / "log", quiet=True)
    log = (tmp_path / "log").read_text()
    assert not r["findings"], log[-4000:]
    assert r["exit"] == 0 and not r["sanitizer_reports"], log[-4000:]
    # every seed ran (INITED) and coverage was measured
    assert "INITED" in log and r["cov"] and r["ft"]
    assert r["executions"] >= len(covfuzz.corpus_files(target))


def test_the_tool_reports_as_json_and_refuses_no_time():
    p = subprocess.run([sys.executable, str(covfuzz.ROOT / "tools" / "covfuzz.py")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--seconds" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, str(covfuzz.ROOT / "tools" / "covfuzz.py"), "--replay",
                        "--target", "prefilter"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[-1])["findings"] == 0


def test_logs_folder_is_made_or_refused(tmp_path):
    """--logs names a folder the tool makes (a long run's only record of its progress), or
    refuses at once when it cannot, before any build or run: never a traceback at the end."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    p = subprocess.run([sys.executable, str(covfuzz.ROOT / "tools" / "covfuzz.py"), "--runs", "1",
                        "--target", "prefilter", "--logs", str(blocker / "logs")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--logs" in p.stderr and "Traceback" not in p.stderr, p.stderr
    if atheris is None:  # (the run below needs it)
        return
    logs = tmp_path / "new" / "logs"
    p = subprocess.run([sys.executable, str(covfuzz.ROOT / "tools" / "covfuzz.py"), "--runs", "1",
                        "--target", "prefilter", "--logs", str(logs),
                        "--corpus-out", str(tmp_path / "corpus"),
                        "--findings", str(tmp_path / "findings")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "INITED" in (logs / "prefilter.log").read_text()


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory):
    """The extension built with IBPATH_SANITIZE=1 (covfuzz.build_sanitized), once."""
    if covfuzz.asan_runtime() is None:
        pytest.skip("gcc's libasan is not installed: no sanitized build to make")
    return covfuzz.build_sanitized(tmp_path_factory.mktemp("asan"))


def test_a_sanitized_build_leaves_the_plain_build_plain(sanitized, tmp_path):
    """pip builds in the checkout's build/: a plain wheel built after covfuzz's sanitized one
    (IBPATH_SANITIZE=1) has an extension of its own, not the sanitized objects taken as up to
    date (which no interpreter without libasan preloaded can import)."""
    import zipfile

    so = sanitized
    assert b"__asan_init" in so.read_bytes()
    out = tmp_path / "wheel"
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir",
                        "-w", str(out), str(covfuzz.ROOT)], capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (whl,) = out.glob("*.whl")
    with zipfile.ZipFile(whl) as z:
        (name,) = [n for n in z.namelist() if n.startswith("ibpath_scapy/native/_scan.")
                   and n.endswith(".so")]
        assert b"__asan_init" not in z.read(name)


def test_a_sanitized_replay_runs_the_sanitized_build(sanitized, monkeypatch, capsys):
    """--replay with --sanitize replays in a child that loads the sanitized build (the flag
    was once ignored there: a plain replay reported as sanitized)."""
    monkeypatch.setattr(covfuzz, "build_sanitized", lambda: sanitized)
    files = [str(f) for f in covfuzz.corpus_files("audit")[:3]]
    assert covfuzz.main(["--sanitize", "--target", "audit", "--replay", *files]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["sanitized"] and got["extension"] == str(sanitized)
    assert (got["replayed"], got["findings"], got["sanitizer_reports"]) == (3, 0, 0)
