"""`ibpath audit --dask SCHEDULER` (issue 44) on a real cluster: a `dask scheduler` and two
`dask worker` processes on 127.0.0.1 (bench/dask_cluster.py), started once for the module
and stopped at its end. The report must be the serial run's, byte for byte (JSON and text,
stderr, exit status), with a worker killed mid-task; a file whose worker always dies is
reported as not read (exit 2); the workers run elsewhere (their own working directory) and
are given absolute paths. Worker deaths come from tests/data/fleet/worker_faults.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CAPTURES, ROOT, drain_pty

pytest.importorskip("distributed", reason="the fleet extra (pip install '.[fleet]')")
from dask_cluster import local_cluster  # noqa: E402  (bench/, on sys.path by conftest)

CORPUS = CAPTURES / "corpus"
IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main", "audit"]
FAULTS = ROOT / "tests" / "data" / "fleet" / "worker_faults.py"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(scheduler address, the marker a worker's death leaves)."""
    work = tmp_path_factory.mktemp("dask")
    marker = work / "a-worker-died"
    env = {"IBPATH_TEST_DIE_ONCE": str(marker), "IBPATH_TEST_POISON": "poison.pcapng"}
    # a file is given up after one worker died of it (the default, 3, only takes longer)
    sched = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1"}
    with local_cluster(work / "cluster", workers=2, env=env, preload=FAULTS,
                       scheduler_env=sched) as address:
        yield address, marker


@pytest.fixture
def inputs(tmp_path):
    """A directory of captures given by a relative path (from tmp_path): corpus captures, one
    cut short (unreadable), a file that is none (skipped), one a worker dies on once."""
    d = tmp_path / "in"
    (d / "sub").mkdir(parents=True)
    for i, f in enumerate(sorted(CORPUS.glob("*.pcapng"))[:24]):
        shutil.copy(f, (d / "sub" if i % 3 == 0 else d) / f.name)
    shutil.copy(CORPUS / "res-no-followup.pcapng", d / "die-once.pcapng")
    data = (CORPUS / "saq-retry.pcapng").read_bytes()
    (d / "cut.pcapng").write_bytes(data[:len(data) - 7])
    (d / "notes.txt").write_text("not a capture\n")
    return tmp_path


def ibpath(*args, cwd, env=None, ok=(0, 1, 2)) -> subprocess.CompletedProcess:
    p = subprocess.run(IBPATH + [str(a) for a in args], capture_output=True, text=True,
                       timeout=300, cwd=cwd, env=env)
    assert p.returncode in ok, f"exit {p.returncode}: {p.stderr[-3000:]}"
    assert "Traceback" not in p.stderr, p.stderr
    return p


def test_same_report_as_serial_with_a_worker_lost_mid_task(cluster, inputs):
    address, marker = cluster
    serial = {}
    for fmt in ("json", "text"):
        serial[fmt] = ibpath("--quiet", "--format", fmt, "in", cwd=inputs)
        dask = ibpath("--quiet", "--format", fmt, "--dask", address, "in", cwd=inputs)
        assert (dask.returncode, dask.stdout, dask.stderr) == (
            serial[fmt].returncode, serial[fmt].stdout, serial[fmt].stderr)
    assert marker.exists()  # a worker died on die-once.pcapng, and another audited it
    run = serial["json"]
    report = json.loads(run.stdout)
    assert run.returncode == 2 and [u["file"] for u in report["unreadable"]] == ["in/cut.pcapng"]
    assert "ibpath: in/cut.pcapng: frame" in run.stderr and "skipped in/notes.txt" in run.stderr
    assert len(report["files"]) == 26 and "in/die-once.pcapng" in report["files"]
    assert {f["file"] for f in report["findings"]} >= {"in/die-once.pcapng", "in/cut.pcapng"}


def test_same_parquet_tables_as_serial(cluster, inputs):
    pq = pytest.importorskip("pyarrow.parquet")
    address, _ = cluster
    for where, extra in (("serial", []), ("dask", ["--dask", address])):
        ibpath("--quiet", "--format", "parquet", "-o", f"{where}.parquet", "--resolutions-out",
               f"{where}.res.parquet", *extra, "in", cwd=inputs)
    for suffix in (".parquet", ".res.parquet"):
        a, b = (pq.read_table(inputs / f"{w}{suffix}") for w in ("serial", "dask"))
        assert a.num_rows > 10 and a.equals(b)


def test_a_file_that_fails_everywhere_is_reported_not_read(cluster, tmp_path):
    address, _ = cluster
    (tmp_path / "in").mkdir()
    shutil.copy(CORPUS / "res-no-followup.pcapng", tmp_path / "in" / "poison.pcapng")
    shutil.copy(CORPUS / "saq-retry.pcapng", tmp_path / "in" / "retry.pcapng")
    p = ibpath("--quiet", "--format", "json", "--dask", address, "in", cwd=tmp_path, ok=(2,))
    report = json.loads(p.stdout)
    assert report["files"] == ["in/poison.pcapng", "in/retry.pcapng"]
    (bad,) = report["unreadable"]
    assert bad["file"] == "in/poison.pcapng"
    assert bad["error"].startswith("not read: the Dask cluster failed it on every try "
                                   "(KilledWorker")
    assert "ibpath: in/poison.pcapng: not read: the Dask cluster failed it" in p.stderr
    serial = json.loads(ibpath("--quiet", "--format", "json", "in/retry.pcapng",
                               cwd=tmp_path).stdout)
    assert [f for f in report["findings"] if f["file"] == "in/retry.pcapng"] == serial["findings"]


def test_progress_on_a_terminal(cluster, tmp_path):
    address, _ = cluster
    (tmp_path / "in").mkdir()
    for name in ("saq-retry", "res-no-followup", "conform-ucma"):
        shutil.copy(CORPUS / f"{name}.pcapng", tmp_path / "in" / f"{name}.pcapng")
    master, slave = os.openpty()
    p = subprocess.run(IBPATH + ["--format", "json", "--dask", address, "in"], cwd=tmp_path,
                       stdout=subprocess.PIPE, stderr=slave, timeout=300)
    os.close(slave)
    err = drain_pty(master).decode()
    assert p.returncode == 1 and json.loads(p.stdout)["findings"]
    assert f"dask {address}: 3/3 files audited, 2 workers" in err


def test_unreachable_scheduler_exit_2(tmp_path):
    env = dict(os.environ, DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s")
    p = ibpath("--quiet", "--dask", "tcp://127.0.0.1:9", CORPUS / "saq-retry.pcapng",
               cwd=tmp_path, env=env, ok=(2,))
    assert "ibpath audit: --dask tcp://127.0.0.1:9: cannot reach the scheduler" in p.stderr
    assert p.stdout == ""


def test_refusals(tmp_path):
    p = ibpath("--dask", "tcp://127.0.0.1:9", "--jobs", "2", CORPUS, cwd=tmp_path, ok=(2,))
    assert "--dask and --jobs" in p.stderr
    p = subprocess.run(IBPATH + ["--dask", "tcp://127.0.0.1:9", "-"], capture_output=True,
                       text=True, stdin=open(CORPUS / "saq-retry.pcapng", "rb"), timeout=60)
    assert p.returncode == 2 and "- is a stream, read by this process only" in p.stderr
