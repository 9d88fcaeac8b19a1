"""Shared paths and session fixtures. CI lays out shared/ beside the clone, as on a developer
machine."""

import os
import random
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
EXTERNAL = SHARED / "captures" / "external"
CAPTURES = ROOT / "captures"


def project_inputs() -> list[Path]:
    """Every capture of the project and every fuzz input (the C and Python twins' common
    ground: tests/test_native_scan.py, tests/test_native_decoder.py)."""
    files = sorted(CAPTURES.rglob("*.pcap")) + sorted(CAPTURES.rglob("*.pcapng"))
    return files + sorted((ROOT / "tests" / "data" / "fuzz").glob("*"))

sys.path.insert(0, str(ROOT / "bench"))
try:  # bench/corpus.py, the bench captures' one writer (memoised below)
    import corpus as bench_corpus
except Exception:  # noqa: BLE001  the test files that import it report why
    bench_corpus = None


@pytest.fixture
def external():
    if not EXTERNAL.is_dir():
        pytest.skip(f"external captures not found at {EXTERNAL}")
    return EXTERNAL


def drain_pty(master: int) -> bytes:
    """Everything written to a pseudo-terminal until its other side is closed (EIO or EOF);
    closes master."""
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return out


# -- ibpath as a user gets it: a wheel of this checkout in a fresh venv (tests/test_packaging.py,
# tests/test_record_installed.py), built once a run ------------------------------------------
def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    p = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)])
    assert p.returncode == 0, p.stderr[-3000:]
    (whl,) = out.glob("ibpath_scapy-*.whl")
    return whl


@pytest.fixture(scope="session")
def installed(wheel, tmp_path_factory):
    """(env, bin dir, work dir): the wheel in a new venv; the work dir is outside the checkout."""
    base = tmp_path_factory.mktemp("user")
    v = base / "venv"
    venv.create(v, with_pip=True)
    p = _run([str(v / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)])
    assert p.returncode == 0, p.stderr[-3000:]
    work = base / "work"
    work.mkdir()
    env = {k: val for k, val in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(HOME=str(base / "home"), PATH=f"{v / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}")
    return env, v / "bin", work


# -- the bench captures (bench/corpus.py): written once a run ---------------------------------
# Building a capture's frame pools with Scapy is what costs (about 4 s for capture 2's, 1.5 s
# for capture 1's, against well under a second to write thousands of frames from them), and
# every bench capture of a seed draws the same pools. Each pool builder is memoised on the
# state of the random generator it is given: a second call with the same state gets the same
# frames, and leaves the generator in the state the build would have, so the captures are
# byte for byte what bench/corpus.py writes (test_fastpath checks it against the unmemoised
# builders). Every test file that writes a bench capture shares the pools, whether through
# the fixtures below or by calling bench/corpus.py itself.
def _memoised_pool(build):
    cache = {}

    def pool(rnd: random.Random, n: int) -> list[bytes]:
        key = (rnd.getstate(), n)
        if key not in cache:
            frames = build(rnd, n)
            cache[key] = (tuple(frames), rnd.getstate())
        frames, after = cache[key]
        rnd.setstate(after)
        return list(frames)

    pool.unmemoised = build
    return pool


for _name in ("_data_frames", "_mad_frames") if bench_corpus else ():
    _build = getattr(bench_corpus, _name)
    if not hasattr(_build, "unmemoised"):
        setattr(bench_corpus, _name, _memoised_pool(_build))


@pytest.fixture(scope="session")
def bench_capture(tmp_path_factory):
    """bench_capture(kind, frames, encap="rocev2", pcapng=False) -> the path of bench capture
    `kind` ("capture1": RC data with a MAD every 20th frame; "capture2": SA PathRecord traffic
    only; "capture3": an all-to-all SA storm, RMPP answers among them) of that many frames, RoCEv2 or native IB ("ib"), as classic pcap or converted to
    pcapng. Written once a run per set of arguments: read it, never change it."""
    d = tmp_path_factory.mktemp("bench")
    writers = {"capture1": bench_corpus.write_capture1, "capture2": bench_corpus.write_capture2,
               "capture3": bench_corpus.write_capture3}
    made: dict[tuple, Path] = {}

    def capture(kind: str, frames: int, encap: str = "rocev2", pcapng: bool = False) -> Path:
        key = (kind, frames, encap, pcapng)
        if key not in made:
            if pcapng:
                from ibpath_scapy.capture.pcapio import PcapNgWriter, read_frames
                src = capture(kind, frames, encap)
                path = src.with_suffix(".pcapng")
                with PcapNgWriter(str(path)) as w:
                    for f in read_frames(str(src)):
                        w.write(f.data, f.linktype, f.time)
            else:
                path = writers[kind](d / f"{kind}-{frames}-{encap}.pcap", frames, encap=encap)
            made[key] = path
        return made[key]

    return capture


@pytest.fixture(scope="session")
def sa_storm(bench_capture) -> Path:
    """A long SA storm: bench capture 2, 6000 frames of PathRecord queries and their mostly
    multi-segment RMPP answers, every pass over the pool with transaction IDs of its own."""
    return bench_capture("capture2", 6000)
