"""The recorder under stress (issue 43, item 2): `ibpath record` must not change what a
program's calls return, must not hang it, and must account for every record it loses.

tests/data/stress/recstress.c checks its own calls' results (return values, errno, bytes
moved, signals delivered) and prints them; it runs without and with `ibpath record`, and the
printouts must be equal:

- threads: 8 threads writing (write, send, writev) to tracked ACM sockets, whose peers a
  thread each reads (recorded too), and to untracked fds (/dev/null, a pipe read back);
- fork_exec: fork while a thread records, the child writes on an inherited tracked fd and
  execs a program that writes more on it;
- eintr / restart: SIGALRM interrupts a recorded write blocked on a full socket, without and
  with SA_RESTART;
- handler_writes: a signal handler that itself writes to a tracked fd, every 200 us while
  the program records 20,000 writes (the recorder deadlocked here: the handler waited for the
  spool lock its own thread held);
- close_reuse: a tracked fd closed and its number reused by open(), and dup2 of an untracked
  fd over a tracked one: neither is recorded;
- diskfull: the spool on a 64 KiB tmpfs (a mount namespace of the test's own): the program
  runs on, the capture holds the records that fit, and a note per process counts the rest
  (before, the record the disk cut in two made the spool unreadable: no capture at all).

The oracle is the program's run without the recorder, on the same kernel.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ibpath_scapy.layers.ib import ExportedPDU
from ibpath_scapy.capture.pcapio import read_frames

SOURCE = Path(__file__).with_name("data") / "stress" / "recstress.c"
IBPATH = [sys.executable, "-m", "ibpath_scapy"]
TIMEOUT = 180  # a deadlock fails here, with what was printed before it
MSG = 64


def _run(argv: list[str], **kw) -> tuple[int, str, str]:
    """(status, stdout, stderr); a run that does not end in TIMEOUT seconds fails the test
    with its output so far."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{argv[-3:]} hung (deadlock?) after:\n{out}\n{err[-2000:]}")
    return proc.returncode, out, err


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("recstress")
    subprocess.run([cc, "-O2", "-Wall", "-Werror", "-pthread", "-o", str(d / "recstress"),
                    str(SOURCE)], check=True, capture_output=True, text=True)
    return d / "recstress"


def _frames(path: Path) -> list[dict]:
    out = []
    for f in read_frames(str(path)):
        pkt = ExportedPDU(f.data)
        out.append({"proto": pkt.dissector_name(), "payload": bytes(pkt.payload),
                    "comment": f.comment or ""})
    return out


def _tid(payload: bytes) -> int:
    return int.from_bytes(payload[8:16], "little")


def _field(comment: str, key: str) -> str:
    words = comment.splitlines()[0].split()
    return words[words.index(key) + 1]


@pytest.fixture(scope="module")
def runs(prog, tmp_path_factory):
    plain_dir = tmp_path_factory.mktemp("plain")
    plain = _run([str(prog), "all", str(plain_dir)])
    rec_dir = tmp_path_factory.mktemp("recorded")
    out = rec_dir / "rec.pcapng"
    recorded = _run(IBPATH + ["record", "-o", str(out),
                              "--acm-socket", str(rec_dir / "tracked.sock"),
                              "--acm-socket", str(rec_dir / "link.sock"), "--",
                              str(prog), "all", str(rec_dir)])
    return plain, recorded, out


def test_every_result_equals_the_run_without_the_recorder(runs):
    (st0, out0, err0), (st1, out1, err1), _ = runs
    assert st0 == 0, err0
    assert st1 == 0, err1
    assert "FATAL" not in out0 + out1
    # one line per scenario (and the exec'd child's), each a result the program checked
    assert out1.splitlines() == out0.splitlines()
    assert [line.split(":")[0] for line in out0.splitlines()] == [
        "threads", "execchild", "fork_exec", "eintr", "restart", "restart",
        "handler_writes", "close_reuse", "close_reuse"]
    assert "eintr: rc=-1 errno=EINTR signals=1" in out0
    assert "restart: rc=64 signals=1" in out0
    assert "recorder failure" not in err1


def test_the_recording_holds_every_tracked_message_once(runs):
    _, (_, _, err), out = runs
    frames = _frames(out)
    sent = Counter(_tid(f["payload"]) for f in frames
                   if f["proto"] == "ibpath.acm" and "acm send" in f["comment"])
    got = Counter(_tid(f["payload"]) for f in frames
                  if f["proto"] == "ibpath.acm" and "acm recv" in f["comment"])
    threads = {((w + 1) << 32) | i for w in range(8) for i in range(1000)}
    forked = {(k << 40) | i for k in (1, 2, 3) for i in range(100)}
    main = {(13 << 40) | i for i in range(20000)}
    for tid in threads | forked | main:
        assert sent[tid] == 1, hex(tid)
    for tid in threads:  # the peers' reads, re-framed into the same messages
        assert got[tid] == 1, hex(tid)
    # the handler's writes, made while the main thread records its own: each recorded (or,
    # past the recorder's two levels, a note), never lost silently
    calls = int(next(line for line in err.splitlines()
                     if line.startswith("info handler_calls=")).split("=")[1])
    handler = [t for t in sent if t >> 40 == 12]
    assert all(sent[t] == 1 for t in handler)
    skipped = [f for f in frames if f["proto"] == "data" and "from a signal handler" in
               f["comment"]]
    assert len(handler) + len(skipped) == calls
    assert calls >= 50 and not skipped  # one handler at a time: every call recorded


def test_closed_and_reused_fds_are_not_recorded(runs):
    _, _, out = runs
    frames = _frames(out)
    assert not [f for f in frames if b"REUSED" in f["payload"]]
    assert len([f for f in frames if _tid(f["payload"]) == 15 << 40]) == 1


def test_fork_and_exec_keep_recording_under_the_childs_pid(runs):
    _, _, out = runs
    pids: dict[int, set[str]] = {}
    for f in _frames(out):
        if f["proto"] == "ibpath.acm" and "acm send" in f["comment"]:
            pids.setdefault(_tid(f["payload"]) >> 40, set()).add(_field(f["comment"], "pid"))
    assert len(pids[1]) == len(pids[2]) == len(pids[3]) == 1
    assert pids[1] != pids[2]  # the forked child has its own pid
    assert pids[2] == pids[3]  # and keeps it across exec


def test_signals_interrupting_recorded_writes_are_recorded_as_returned(runs):
    _, _, out = runs
    frames = _frames(out)
    eintr = [f for f in frames if f["proto"] == "data" and "errno=EINTR" in f["comment"]]
    assert len(eintr) == 1 and "acm send" in eintr[0]["comment"]
    restarted = [f for f in frames if f["proto"] == "ibpath.acm"
                 and _tid(f["payload"]) == 11 << 40]
    assert len(restarted) == 1  # once: the restarted call is one call


# -- the spool's disk full ----------------------------------------------------------------
# a 64 KiB tmpfs in a mount namespace of this test's own (root: unshare -m, mount)
TMPFS_SH = ('mount --make-rprivate / && mount -t tmpfs -o size=64k tmpfs "$1" && shift && '
            'exec "$@"')


def _no_tmpfs() -> str | None:
    if os.geteuid() != 0:
        return "needs root to mount a small tmpfs (unshare -m)"
    if not shutil.which("unshare"):
        return "unshare (util-linux) not installed"
    r = subprocess.run(["unshare", "-m", "sh", "-c", TMPFS_SH, "sh", "/mnt", "true"],
                       capture_output=True, text=True)
    return None if r.returncode == 0 else f"cannot mount a tmpfs here: {r.stderr.strip()}"


@pytest.mark.skipif(_no_tmpfs() is not None, reason=_no_tmpfs() or "")
def test_disk_full_spool_loses_records_as_notes_only(prog, tmp_path):
    n = 2000
    (tmp_path / "plain").mkdir()
    plain = _run([str(prog), "diskfull", str(tmp_path / "plain"), str(n)])
    small, work = tmp_path / "small", tmp_path / "rec"
    small.mkdir()
    work.mkdir()
    out = tmp_path / "full.pcapng"
    status, stdout, stderr = _run(
        ["unshare", "-m", "sh", "-c", TMPFS_SH, "sh", str(small)] + IBPATH +
        ["record", "-o", str(out), "--keep-spool", str(small / "spool"),
         "--acm-socket", str(work / "link.sock"), "--", str(prog), "diskfull", str(work),
         str(n)])
    assert plain[0] == 0 and status == 0, stderr
    assert stdout == plain[1] == f"diskfull: ok={n} child_exit=0 peer_bytes={2 * n * MSG}\n"
    assert "cannot write the spool: No space left on device" in stderr
    frames = _frames(out)
    recorded = [f for f in frames if f["proto"] == "ibpath.acm"]
    notes = [f for f in frames if f["proto"] == "data"]
    assert all(len(f["payload"]) == MSG for f in recorded)  # whole messages only
    assert 0 < len(recorded) < 2 * n
    lost = 0
    for f in notes:
        text = f["comment"].splitlines()[0]
        assert "lost: the recorder could not write the spool (ENOSPC" in text, text
        lost += int(text.split("ibpath record: ")[1].split()[0])
    # the program's records and the child's: each one recorded or counted in a note
    assert len(notes) == 2
    assert len(recorded) + lost == 2 * n
