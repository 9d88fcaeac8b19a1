"""`ibpath audit --dask SCHEDULER`: the files of the inputs audited by a Dask cluster's
workers (dask.distributed), with the report of a serial run.

Each file is one task whose arguments are its path and the audit's options: the workers
read the files where they are (the same paths, on NFS or a cluster filesystem), nothing of
a capture goes through the scheduler, and a FileAudit comes back (what --jobs' processes
hand back). The results are put back in input order, so the report, its order and the exit
status are those of `ibpath audit` in one process.

A task that raises is tried again (RETRIES); a task whose worker dies is given to another by
the scheduler (its `allowed-failures`, 3 by default). A file that fails every time is
reported as not read, naming the cluster's reason: exit status 2, never dropped.

distributed is imported here only, from the `fleet` extra. The workers need ibpath installed
(the same version) and import this module to run audit_task.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import time
import uuid

from .extras import need
from .engine import FileAudit

# tries of a file beyond the first when its task raises (a worker lost mid-task is retried by
# the scheduler, not counted here)
RETRIES = 2

# The audit's module state (the rule registry loaded on first use, the cycle collector's
# pacing, decoder caches) is a process's, not a thread's, and the audit holds the GIL: a
# worker process audits one file at a time, whatever its thread count (run workers with
# --nthreads 1 and as many processes as cores).
_ONE_AT_A_TIME = threading.Lock()


class ClusterError(Exception):
    """The cluster cannot be used (scheduler unreachable); the message says which and why."""


def audit_task(work, task: tuple) -> tuple[FileAudit, str | None]:
    """What a worker runs for one file: work(task), one at a time in the worker process
    (run._audit_in_worker: run.audit_one's result, portable)."""
    with _ONE_AT_A_TIME:
        return work(task)


class _Progress:
    """On a terminal: files done of all, and the workers, on one stderr line."""

    def __init__(self, address: str, total: int, enabled: bool, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self.address, self.total, self.done, self.width = address, total, 0, 0
        self.last = 0.0

    def step(self, workers: int) -> None:
        self.done += 1
        now = time.monotonic()
        if not self.enabled or (now - self.last < 0.5 and self.done < self.total):
            return
        self.last = now
        text = (f"dask {self.address}: {self.done}/{self.total} files audited, "
                f"{workers} worker{'s' if workers != 1 else ''}")
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def close(self) -> None:
        if self.enabled and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()


def _for_workers(task: tuple) -> tuple:
    """A task as a worker runs it: its paths absolute (a worker's working directory is not
    this process's), the --blob files' too (audit_one knows them by path)."""
    path, options, *rest = task
    options = dataclasses.replace(options, extra_blobs=[os.path.abspath(b)
                                                        for b in options.extra_blobs])
    return (os.path.abspath(path), options, *rest)


def _as_given(result: tuple, given: str, absolute: str) -> tuple:
    """A worker's result named by the path as it was given (the serial run's names)."""
    fa, message = result
    if given == absolute:
        return result
    fa.path = given
    fa.findings = [dataclasses.replace(f, file=given) if f.file == absolute else f
                   for f in fa.findings]
    if fa.error:
        fa.error = fa.error.replace(absolute, given)
    return fa, message.replace(absolute, given) if message else message


def _workers(client) -> int:
    """The workers the scheduler has now (for the progress line)."""
    try:
        info = client.scheduler_info(n_workers=-1)  # distributed 2025.4+: all, not the first 5
    except TypeError:
        info = client.scheduler_info()
    return len(info.get("workers", {}))


def _not_read(path: str, exc: BaseException) -> tuple[FileAudit, str]:
    why = (f"not read: the Dask cluster failed it on every try ({type(exc).__name__}: "
           f"{str(exc).strip() or 'no reason given'})")
    return FileAudit(path, error=why), f"ibpath: {path}: {why}"


def audit_on_cluster(address: str, work, tasks: list[tuple], quiet: bool = False
                     ) -> list[tuple[FileAudit, str | None]]:
    """(FileAudit, stderr line or None) of each task (run.audit_paths' tuples), in order,
    from the workers of the scheduler at `address`, which run work(task) (a module-level
    function, sent by reference: run._audit_in_worker)."""
    distributed = need("distributed", "--dask")
    # the client's own warnings ("Couldn't gather 1 keys, rescheduling" when a worker is
    # lost) would land among the report's stderr lines; what befell a file is said per file.
    # Dask's logging config gives distributed.client a level and a handler of its own.
    for name in [n for n in logging.root.manager.loggerDict if n.split(".")[0] == "distributed"]:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        # the connect timeout is Dask's own setting (distributed.comm.timeouts.connect, 30 s)
        client = distributed.Client(address, set_as_default=False)
    except Exception as exc:  # OSError, TimeoutError, ValueError of a bad address
        raise ClusterError(f"--dask {address}: cannot reach the scheduler: {exc}") from None
    run_id = uuid.uuid4().hex[:12]
    results: list = [None] * len(tasks)
    with client:
        sent = [_for_workers(task) for task in tasks]
        futures = {client.submit(audit_task, work, task, key=f"ibpath-audit-{run_id}-{i}",
                                 retries=RETRIES, pure=False): i
                   for i, task in enumerate(sent)}
        bar = _Progress(address, len(tasks), not quiet)
        try:
            for fut in distributed.as_completed(list(futures), loop=client.loop):
                i = futures[fut]
                try:
                    results[i] = _as_given(fut.result(), tasks[i][0], sent[i][0])
                except Exception as exc:  # raised on every try, or its workers were lost
                    results[i] = _not_read(tasks[i][0], exc)
                bar.step(_workers(client) if bar.enabled else 0)
        finally:
            bar.close()
    return results
