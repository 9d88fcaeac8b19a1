"""A real Dask cluster on this machine, as processes: `dask scheduler` and `dask worker`
commands on 127.0.0.1 (the fleet extra's), for tests/test_fleet_dask.py and
bench/fleet_dask.py. Everything it starts is stopped when the context ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

START_TIMEOUT = 90  # seconds for the scheduler to listen and the workers to join


def _dask(*args: str) -> list[str]:
    exe = Path(sys.executable).parent / "dask"
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "dask", *args]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:  # SIGTERM: a nanny stops its worker, the scheduler closes
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


@contextmanager
def local_cluster(workdir: Path, workers: int = 2, env: dict | None = None,
                  preload: Path | None = None, scheduler_env: dict | None = None):
    """Start a scheduler and `workers` worker processes (one thread each, each under a
    nanny that restarts it if it dies) on 127.0.0.1; yield the scheduler's address. The
    workers run in workdir/worker-cwd (not the caller's directory) with `env` added to the
    environment and `preload` (a file) as their --preload."""
    from distributed import Client

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "worker-cwd").mkdir(exist_ok=True)
    info = workdir / "scheduler.json"
    base = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    base["DASK_DISTRIBUTED__WORKER__DAEMON"] = "False"
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        log = open(workdir / "scheduler.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen(
            _dask("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                  "--scheduler-file", str(info)),
            stdout=log, stderr=subprocess.STDOUT, cwd=workdir,
            env={**base, **(scheduler_env or {})}))
        deadline = time.monotonic() + START_TIMEOUT
        while not (info.exists() and info.stat().st_size):
            if procs[0].poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("dask scheduler did not start: "
                                   + (workdir / "scheduler.log").read_text()[-2000:])
            time.sleep(0.1)
        address = json.loads(info.read_text())["address"]
        for i in range(workers):
            log = open(workdir / f"worker-{i}.log", "w")
            logs.append(log)
            cmd = _dask("worker", address, "--nthreads", "1", "--nworkers", "1",
                        "--host", "127.0.0.1", "--no-dashboard", "--name", f"w{i}",
                        "--local-directory", str(workdir / f"worker-{i}"))
            if preload is not None:
                cmd += ["--preload", str(Path(preload).resolve())]
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                          cwd=workdir / "worker-cwd",
                                          env={**base, **(env or {})}))
        with Client(address, set_as_default=False) as c:
            c.wait_for_workers(workers, timeout=START_TIMEOUT)
        yield address
    finally:
        _stop(procs[1:])
        _stop(procs[:1])
        for log in logs:
            log.close()
