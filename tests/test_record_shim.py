"""`ibpath record -- CMD` and its LD_PRELOAD shim (record/ibpathrec.c), without RDMA hardware.

- ucma: tests/data/record/ucmaprog.c, compiled here, writes real ucma command structs
  (<rdma/rdma_user_cm.h>) to a stand-in /dev/infiniband/rdma_cm (a regular file
  bind-mounted in a mount namespace of the test's own, `unshare -m`), from threads, a forked
  child and an exec'd grandchild, through dup2/fcntl copies, and with calls that fail. It
  logs what it wrote and got; the recording must hold exactly those bytes, and the program
  must behave the same with and without the recorder. The SET_OPTION blob is the one
  `ibpath craft res-no-followup` hands the kernel; `ibpath audit` of the recording must find
  what it finds in that blob alone.
- ACM: tests/data/record/acm_peers.py (a stand-in ibacm and a client, messages packed with
  plain struct from acm.h) on a unix socket.
- umad: saquery and OpenSM on ibsim under `ibpath record` are tested against saquery's own
  printout in tests/test_real_clients.py and tests/test_opensm_capture.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from scapy.packet import raw

from ibpath_scapy.layers.acm import AcmHdr, AcmResolve
from ibpath_scapy.layers.ib import ExportedPDU
from ibpath_scapy.layers.pathdata import parse_set_option_comment
from ibpath_scapy.layers.ucma import (
    UcmaCmdHdr, UcmaCreateIdResp, UcmaEventResp, UcmaQueryPathResp, UcmaResolveAddr,
    UcmaSetOption,
)
from ibpath_scapy.capture.pcapio import read_frames
from ibpath_scapy.record.process import build_shim
from ibpath_scapy.record.spool import (
    HEADER, KIND_UMAD, MAGIC, PART_CALL, PART_READ, SpoolError, parse_spool,
)

from tshark_util import tshark_env

DATA = Path(__file__).with_name("data") / "record"
IBPATH = [sys.executable, "-m", "ibpath_scapy"]

# Runs "$@" with a stand-in /dev/infiniband/rdma_cm in the caller's new mount namespace:
# the host's /dev is left alone (a tmpfs over /dev in this namespace, with links back to
# the host's entries, when /dev/infiniband does not exist).
NAMESPACE_SH = r"""
set -e
mount --make-rprivate /
if [ ! -d /dev/infiniband ]; then
  old=$(mktemp -d)
  mount --bind /dev "$old"
  mount -t tmpfs tmpfs /dev
  for e in "$old"/*; do ln -s "$e" /dev/; done
  mkdir /dev/infiniband
fi
standin=$(mktemp -d)/rdma_cm
: > "$standin"
[ -e /dev/infiniband/rdma_cm ] || : > /dev/infiniband/rdma_cm
mount --bind "$standin" /dev/infiniband/rdma_cm
exec "$@"
"""


def _can_unshare() -> str | None:
    if os.geteuid() != 0:
        return "needs root for unshare -m and mount"
    if not shutil.which("unshare"):
        return "unshare (util-linux) not installed"
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    return None if r.returncode == 0 else f"unshare -m fails here: {r.stderr.strip()}"


NO_NAMESPACE = _can_unshare()
needs_namespace = pytest.mark.skipif(NO_NAMESPACE is not None, reason=NO_NAMESPACE or "")


def in_namespace(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "-m", "sh", "-c", NAMESPACE_SH, "sh", *argv],
                          capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("shim")
    subprocess.run([cc, "-O2", "-Wall", "-no-pie", "-pthread", "-o", str(d / "ucmaprog"),
                    str(DATA / "ucmaprog.c")], check=True, capture_output=True, text=True)
    crafted = d / "crafted.pcapng"
    subprocess.run(IBPATH + ["craft", "res-no-followup", "-o", str(crafted)], check=True,
                   capture_output=True, text=True)
    blobs = [bytes(p.payload) for p in map(lambda f: ExportedPDU(f.data), read_frames(
        str(crafted))) if p.dissector_name() == "ibpath.blob"]
    assert len(blobs) == 1
    (d / "blob.bin").write_bytes(blobs[0])
    return d


def parse_log(stdout: str) -> list[tuple]:
    """ucmaprog's lines: (CALL, tag, rc, errno, hex) and (RESP, tag, hex)."""
    out = []
    for line in stdout.splitlines():
        parts = line.split(" ")
        out.append(tuple(parts))
    return out


def capture_frames(path: Path) -> list[dict]:
    frames = []
    for f in read_frames(str(path)):
        pkt = ExportedPDU(f.data) if f.linktype == 252 else None
        frames.append({"number": f.number, "linktype": f.linktype, "comment": f.comment or "",
                       "proto": pkt.dissector_name() if pkt else None,
                       "payload": bytes(pkt.payload) if pkt else f.data, "time": f.time})
    return frames


def comment_field(comment: str, key: str) -> str:
    """'pid 12' style fields of the first comment line."""
    words = comment.splitlines()[0].split()
    return words[words.index(key) + 1]


@pytest.fixture(scope="module")
def plain_run(work):
    r = in_namespace([str(work / "ucmaprog"), str(work / "blob.bin")])
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def recorded(work):
    out = work / "rec.pcapng"
    r = in_namespace(IBPATH + ["record", "-o", str(out), "--keep-spool", str(work / "spool"),
                               "--", str(work / "ucmaprog"), str(work / "blob.bin")])
    assert r.returncode == 0, r.stderr
    return r, capture_frames(out), out


@needs_namespace
def test_program_behaves_the_same_with_the_recorder(plain_run, recorded):
    # every call's return value, errno and bytes (addresses inside are fixed: non-PIE
    # globals), in whatever order the threads ran
    assert Counter(plain_run.stdout.splitlines()) == Counter(recorded[0].stdout.splitlines())
    assert "recorder failure" not in recorded[0].stderr
    assert "CALL ebadf -1 EBADF" in plain_run.stdout and "CALL efault -1 EFAULT" in plain_run.stdout


@needs_namespace
def test_recording_holds_exactly_what_the_program_wrote(work, recorded):
    proc, frames, _ = recorded
    log = parse_log(proc.stdout)
    ucma = [f for f in frames if f["proto"] == "ibpath.ucma"]
    # what each frame holds of the call (the response, where there is one, follows it)
    written = []
    for f in ucma:
        lines = f["comment"].splitlines()
        resp = [int(l.split()[1]) for l in lines if l.startswith("response:")]
        call = f["payload"][:len(f["payload"]) - resp[0]] if resp else f["payload"]
        written.append(call.hex())
    # (the EFAULT call handed a pointer nothing can be read from: a note, below)
    expected = [e[4] for e in log if e[0] == "CALL" and e[1] not in ("not_tracked", "efault")]
    assert Counter(written) == Counter(expected)
    assert len(ucma) == len(expected) == 112
    # responses as the program holds them after the call (QUERY: trimmed to num_paths)
    responses = {e[1]: e[2] for e in log if e[0] == "RESP"}
    by_cmd = {}
    for f in ucma:
        hdr = UcmaCmdHdr(f["payload"])
        by_cmd.setdefault(hdr.cmd, []).append((f, hdr))
    (f, cid), = by_cmd[0]
    assert raw(cid[UcmaCreateIdResp]).hex() == responses["create_id"] and cid[UcmaCreateIdResp].id == 7
    (f, q), = by_cmd[19]
    assert raw(q[UcmaQueryPathResp]).hex() == responses["query"]
    assert q[UcmaQueryPathResp].num_paths == 1 and len(q[UcmaQueryPathResp].path_data) == 1
    assert raw(q[UcmaQueryPathResp].path_data[0]) == (work / "blob.bin").read_bytes()[:72]
    (f, ev), = by_cmd[12]
    assert raw(ev[UcmaEventResp]).hex() == responses["get_event"]
    assert ev[UcmaEventResp].event == 2 and ev[UcmaEventResp].id == 7  # ROUTE_RESOLVED
    (f, ra), = by_cmd[21]
    assert ra[UcmaResolveAddr].mysummary().endswith("[fe80::20]:7471")


@needs_namespace
def test_set_option_blob_is_a_blob_frame_with_the_kernels_verdict(work, recorded):
    _, frames, _ = recorded
    blob = (work / "blob.bin").read_bytes()
    blob_frames = [f for f in frames if f["proto"] == "ibpath.blob"]
    assert len(blob_frames) == 1
    bf = blob_frames[0]
    assert bf["payload"] == blob
    assert parse_set_option_comment(bf["comment"]) == "0"  # the stand-in took the write
    so = next(f for f in frames if f["proto"] == "ibpath.ucma"
              and UcmaCmdHdr(f["payload"]).cmd == 14)
    opt = UcmaCmdHdr(so["payload"])[UcmaSetOption]
    assert opt.is_ib_path() and opt.optlen == len(blob) and opt.id == 7
    assert so["number"] + 1 == bf["number"]
    for key in ("pid", "tid", "fd"):
        assert comment_field(bf["comment"].splitlines()[1], key) == comment_field(so["comment"], key)


@needs_namespace
def test_audit_of_the_recording_reports_the_blobs_findings(work, recorded):
    _, _, out = recorded

    def rules(path, *options):
        r = subprocess.run(IBPATH + ["audit", "--format", "json", *options, str(path)],
                           capture_output=True, text=True)
        assert r.returncode in (0, 1), r.stderr
        return sorted(f["rule"] for f in json.loads(r.stdout)["findings"])

    blob = rules(work / "blob.bin")
    assert blob == ["BLOB-BIDIR-NOT-REVERSIBLE", "BLOB-GMP-NOT-REVERSIBLE"]
    # and the program's own steps: it sets the path on a cm_id whose address it never
    # resolved, which a real kernel refuses (EINVAL) and the stand-in rdma_cm accepts; and
    # its write from a bad pointer, which the recorder could not read (a note)
    expected = sorted(blob + ["RECORD-INCOMPLETE", "UCMA-SET-OPTION-STATE", "UCMA-VERDICT"])
    assert rules(out) == expected
    # the tshark engine (the plugin's fields) agrees: the QUERY PATH readback is no blob
    if shutil.which("tshark"):
        assert rules(out, "--engine", "tshark") == expected


@needs_namespace
def test_threads_fork_exec_and_fd_copies_are_followed(recorded):
    proc, frames, _ = recorded
    ucma = [f for f in frames if f["proto"] == "ibpath.ucma"]
    main_pid = comment_field(ucma[0]["comment"], "pid")
    ids = {}
    for f in ucma:
        hdr = UcmaCmdHdr(f["payload"])
        if hdr.cmd == 4:  # RESOLVE_ROUTE: the id tells which call it is
            ids[hdr.payload.id] = f
    threads = {comment_field(ids[1000 * (t + 1) + i]["comment"], "tid") for t in range(4)
               for i in range(25)}
    assert len(threads) == 4 and main_pid not in threads
    assert all(comment_field(ids[1000 * (t + 1)]["comment"], "pid") == main_pid
               for t in range(4))
    fork_pid = comment_field(ids[11]["comment"], "pid")
    assert fork_pid != main_pid
    assert comment_field(ids[4242]["comment"], "pid") == fork_pid  # exec'd: same pid
    assert comment_field(ids[8]["comment"], "fd") == "50"  # dup2(fd, 50)
    assert int(comment_field(ids[9]["comment"], "fd")) >= 60  # fcntl(F_DUPFD_CLOEXEC, 60)
    assert 12 not in ids  # fd 50 after close: a plain file, not recorded
    assert "errno=EBADF" in ids[10]["comment"]
    efault = [f for f in frames if "errno=EFAULT" in f["comment"]]
    assert len(efault) == 1 and efault[0]["proto"] == "data"
    assert "unreadable" in efault[0]["comment"] and f"pid {main_pid}" in efault[0]["comment"]
    assert [f["time"] for f in frames] == sorted(f["time"] for f in frames)


@needs_namespace
def test_each_source_has_its_interface(recorded):
    _, _, out = recorded
    if not shutil.which("tshark"):
        pytest.skip("tshark not installed")
    r = subprocess.run(["tshark", "-r", str(out), "-T", "fields", "-e", "frame.interface_name",
                        "-e", "frame.comment"], capture_output=True, text=True, check=True,
                       env=tshark_env())
    names = Counter(line.split("\t")[0] for line in r.stdout.splitlines())
    assert names == {"ibpath record ucma": 113, "ibpath record note": 1}
    assert r.stdout.count("rdma_set_option=0") == 1


@needs_namespace
def test_per_record_cap_is_reported(work):
    out = work / "capped.pcapng"
    r = in_namespace(IBPATH + ["record", "-o", str(out), "--max-record", "64", "--",
                               str(work / "ucmaprog"), str(work / "blob.bin")])
    assert r.returncode == 0, r.stderr
    frames = capture_frames(out)
    addr = next(f for f in frames if f["proto"] == "ibpath.ucma"
                and "RESOLVE_ADDR" in f["comment"])
    assert len(addr["payload"]) == 64
    assert "truncated: call 64 of 280 bytes recorded" in addr["comment"]
    # the 72-byte blob does not fit: said so, and never handed to the audit cut short
    assert not [f for f in frames if f["proto"] == "ibpath.blob"]
    notes = [f for f in frames if f["proto"] == "data" and "not written as a blob" in f["comment"]]
    assert len(notes) == 1
    assert "not written as a blob" in r.stderr


@needs_namespace
def test_per_run_cap_is_reported(work):
    out = work / "runcap.pcapng"
    r = in_namespace(IBPATH + ["record", "-o", str(out), "--max-total", "2000", "--",
                               str(work / "ucmaprog"), str(work / "blob.bin")])
    assert r.returncode == 0, r.stderr
    frames = capture_frames(out)
    notes = [f for f in frames if f["proto"] == "data"]
    # one note per recording process that hit the cap (the main one at least)
    assert notes and all("per-run cap reached" in n["comment"] for n in notes)
    assert sum(len(f["payload"]) for f in frames) < 2000
    assert len([f for f in frames if f["proto"] == "ibpath.ucma"]) < 113


@needs_namespace
def test_recorder_failure_leaves_the_program_running(work, plain_run):
    shim = build_shim()
    env = dict(os.environ, LD_PRELOAD=str(shim), IBPATHREC_SPOOL="/nonexistent/dir/spool")
    r = in_namespace([str(work / "ucmaprog"), str(work / "blob.bin")], env=env)
    assert r.returncode == 0
    assert Counter(r.stdout.splitlines()) == Counter(plain_run.stdout.splitlines())
    failures = [l for l in r.stderr.splitlines() if "recorder failure" in l]
    # said once per process that tried to record (the main program and its forked child)
    assert 1 <= len(failures) <= 2 and "cannot open the spool" in failures[0]


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_acm_messages_are_recorded_and_reframed(tmp_path, transport):
    path_record = (bytes(64))  # a PathRecord, MAD format: its DLID and P_Key set below
    path_record = path_record[:40] + b"\x00\x3a" + path_record[42:50] + b"\xff\xff" + \
        path_record[52:]
    (tmp_path / "pr.bin").write_bytes(path_record)
    if transport == "unix":
        where = str(tmp_path / "ibacm-test.sock")
        options = ["--acm-socket", where]
    else:  # ibacm's server mode (the recorder's default port is 6125)
        port = _free_port()
        where, options = f"tcp:{port}", ["--acm-port", str(port)]
    out = tmp_path / "acm.pcapng"
    r = subprocess.run(IBPATH + ["record", "-o", str(out), *options, "--",
                                 sys.executable, str(DATA / "acm_peers.py"), where,
                                 str(tmp_path / "pr.bin")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    said = Counter()
    for line in r.stdout.splitlines():
        who, what, hexed = line.split()
        said[bytes.fromhex(hexed)] += 1
    frames = [f for f in capture_frames(out) if f["proto"] == "ibpath.acm"]
    # each message twice: sent by one peer, received by the other (the server's two
    # send() calls are one frame)
    assert Counter(f["payload"] for f in frames) == Counter({m: 2 for m in said})
    assert len(frames) == 4
    response = next(AcmHdr(f["payload"]) for f in frames if f["payload"][1] == 0x81)
    assert response.tid == 0x1234 and response.is_response()
    paths = response[AcmResolve].path_records()
    assert len(paths) == 1 and paths[0].dlid == 58 and paths[0].pkey == 0xFFFF


def test_spool_errors_name_the_file_the_record_and_the_reason():
    good = HEADER.pack(MAGIC, KIND_UMAD, PART_CALL, 0, 1, 1, 3, 0, 0, 4, 0, 4, 4) + b"abcd"
    assert len(parse_spool(good + good, "s")) == 2
    with pytest.raises(SpoolError, match=r"s: record 1 at byte 56: truncated body \(2 of 4"):
        parse_spool(good + good[:-2], "s")
    with pytest.raises(SpoolError, match=r"s: record 0 at byte 0: bad magic"):
        parse_spool(b"XXXX" + good[4:], "s")
    with pytest.raises(SpoolError, match=r"s: record 1 at byte 56: truncated header"):
        parse_spool(good + good[:10], "s")
    bad_kind = good[:4] + b"\x09" + good[5:]
    with pytest.raises(SpoolError, match="unknown source kind 9"):
        parse_spool(bad_kind, "s")
    lone = HEADER.pack(MAGIC, 1, 2, 0, 1, 1, 3, 0, 0, 4, 0, 0, 0)
    from ibpath_scapy.record.capture import frames_of
    with pytest.raises(SpoolError, match="record 0 at byte 0: response without the ucma call"):
        frames_of(parse_spool(lone, "s"), "s")


def test_netlink_records_become_the_frames_nlmon_would_write(tmp_path):
    # the craft builder's link-type-253 frames of an LS exchange are the oracle: the kernel's
    # request as the resolver receives it, the resolver's answer sent to the kernel (nl_pid 0)
    from ibpath_scapy.craft.builder import CaptureBuilder
    from ibpath_scapy.layers.pathdata import GMP_PRIMARY_BIDIRECTIONAL
    from ibpath_scapy.layers.sa import PathRecord
    from ibpath_scapy.record.capture import frames_of
    from ibpath_scapy.record.spool import KIND_NETLINK
    crafted = tmp_path / "ls.pcapng"
    with CaptureBuilder(str(crafted)) as b:
        b.ls_request(7, path_use=0, sgid="fe80::10", dgid="fe80::20")
        b.ls_response(7, [(GMP_PRIMARY_BIDIRECTIONAL, PathRecord(dlid=58))])
    request, response = [f.data for f in read_frames(str(crafted))]
    cooked = 16  # the cooked header the recorder adds (layers/netlink.py NetlinkCooked)
    spool = b"".join(
        HEADER.pack(MAGIC, KIND_NETLINK, part, 0, 9, 9, 4, 0, ts, len(body), 0,
                    len(body), len(body)) + body
        for ts, part, body in ((1000, PART_READ, request[cooked:]),
                               (2000, PART_CALL, response[cooked:])))
    frames, result = frames_of(parse_spool(spool, "s"), "s")
    assert [f.data for f in frames] == [request, response]
    assert [f.linktype for f in frames] == [253, 253] and result.frames["netlink"] == 2


def _netlink_rdma_unavailable() -> str | None:
    import socket
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 20).close()
    except OSError as exc:
        return f"no NETLINK_RDMA socket here ({exc.strerror}; ib_core not loaded)"
    if not shutil.which("rdma") or not shutil.which("strace"):
        return "needs iproute2's rdma and strace"
    return None


@pytest.mark.skipif(_netlink_rdma_unavailable() is not None,
                    reason=_netlink_rdma_unavailable() or "")
def test_netlink_messages_equal_the_strace_recorders(tmp_path):
    shim_out, strace_out = tmp_path / "shim.pcapng", tmp_path / "strace.pcapng"
    for argv in (IBPATH + ["record", "-o", str(shim_out), "--", "rdma", "dev"],
                 IBPATH + ["record", "netlink", "-o", str(strace_out), "--", "rdma", "dev"]):
        subprocess.run(argv, check=True, capture_output=True, timeout=60)
    ours = [f.data for f in read_frames(str(shim_out)) if f.linktype == 253]
    theirs = [f.data for f in read_frames(str(strace_out)) if f.linktype == 253]
    assert ours and ours == theirs


@needs_namespace
def test_recording_opens_cleanly_in_tshark_with_the_plugin(recorded, work):
    from plugin_oracle import assert_no_malformed, need_tshark, tshark
    from ibpath_scapy.luagen.plugin import CHECKOUT_PLUGIN
    need_tshark()
    _, frames, out = recorded
    lua = str(CHECKOUT_PLUGIN)
    assert_no_malformed(str(out), lua)
    cols = tshark(["-r", str(out), "-T", "fields", "-e", "_ws.col.Protocol", "-e",
                   "_ws.col.Info"], lua).stdout.splitlines()
    assert cols[0] == "ibpath ucma\tCREATE_ID"
    assert Counter(c.split("\t")[0] for c in cols) == {"ibpath ucma": 112, "ibpath blob": 1,
                                                        "ibpath note": 1}
    rows = tshark(["-r", str(out), "-T", "fields", "-e", "_ws.col.Protocol", "-e",
                   "frame.comment"], lua).stdout.splitlines()
    notes = [r for r in rows if r.startswith("ibpath note\t")]
    assert len(notes) == 1 and "ucma write on fd" in notes[0] and "errno=EFAULT" in notes[0]
    # the note (the EFAULT call) opens as data, its text in the comment


def test_cli_errors_name_the_cause(tmp_path):
    r = subprocess.run(IBPATH + ["record", "-o", str(tmp_path / "x.pcapng"), "--",
                                 str(tmp_path / "no-such-program")], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "cannot run" in r.stderr and "no-such-program" in r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run(IBPATH + ["record", "--", "true"], capture_output=True, text=True)
    assert r.returncode == 2 and "-o OUT.pcapng" in r.stderr
    # the command's exit status is ibpath record's
    r = subprocess.run(IBPATH + ["record", "-o", str(tmp_path / "y.pcapng"), "--", "sh", "-c",
                                 "exit 7"], capture_output=True, text=True)
    assert r.returncode == 7 and (tmp_path / "y.pcapng").exists()


@needs_namespace
def test_fork_while_threads_record_never_hangs_a_child(work):
    out = work / "storm.pcapng"
    r = in_namespace(IBPATH + ["record", "-o", str(out), "--", str(work / "ucmaprog"),
                               "--fork-storm"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "children 20"
    ids = Counter()
    pids = set()
    for f in capture_frames(out):
        assert f["proto"] == "ibpath.ucma"
        ids[UcmaCmdHdr(f["payload"]).payload.id] += 1
        pids.add(comment_field(f["comment"], "pid"))
    assert all(ids[500 + c] == 1 for c in range(20))  # every child recorded, once
    assert all(ids[10000 * (t + 1) + i] == 1 for t in range(2) for i in range(2000))
    assert len(pids) == 21


def test_acm_stream_reframing_and_its_faults():
    import struct as st
    from ibpath_scapy.record.capture import frames_of
    from ibpath_scapy.record.spool import KIND_ACM

    def msg(tid, n):  # acm.h: acm_hdr (host order) + n entries
        body = b"".join(st.pack("<IHH", 2, 2, 0) + bytes(64) for _ in range(n))
        return st.pack("<BBBBBBHQ", 1, 1, 0, 0, 0, 0, 16 + len(body), tid) + body

    def rec(part, data, ts, fd=5):
        return HEADER.pack(MAGIC, KIND_ACM, part, 0, 7, 7, fd, 0, ts, len(data), 0, len(data),
                           len(data)) + data

    a, b, c = msg(1, 2), msg(2, 0), msg(3, 1)
    bad = st.pack("<BBBBBBHQ", 1, 1, 0, 0, 0, 0, 4, 9) + b"rest"
    spool = (rec(PART_CALL, a[:10], 1) + rec(PART_CALL, a[10:100], 2) +
             rec(PART_CALL, a[100:] + b, 3) +       # a ends, b whole, in one send
             rec(PART_READ, c[:30], 4) +            # c never completes: said at the end
             rec(PART_CALL, bad, 5, fd=6))          # a length shorter than the header
    frames, _ = frames_of(parse_spool(spool, "s"), "s")
    payloads = [bytes(ExportedPDU(f.data).payload) for f in frames]
    assert payloads[:2] == [a, b]  # in time order: a, b (t=3), c (t=4), the bad one (t=5)
    assert payloads[2] == c[:30]
    assert "incomplete message at the end of the recording: 30 bytes of 88" in frames[2].comment
    assert payloads[3] == bad and "shorter than the 16-byte header" in frames[3].comment
    assert len(frames) == 4


def test_hostile_spools_give_a_spool_error_or_a_capture(tmp_path):
    """Random spools (valid headers around random bytes, and random corruptions of them)
    either convert or fail with a SpoolError naming the record: never another exception."""
    import random
    from ibpath_scapy.record.capture import write_pcapng
    from ibpath_scapy.record.spool import KIND_NAMES, PART_NAMES
    rng = random.Random(7)
    out = tmp_path / "h.pcapng"
    converted = refused = 0
    for _ in range(300):
        spool = b""
        for _ in range(rng.randrange(1, 8)):
            data = rng.randbytes(rng.choice((0, 3, 8, 16, 24, 72, 100, 336)))
            orig = len(data) + rng.choice((0, 0, 5))
            flags = 1 if orig > len(data) else rng.choice((0, 2))
            spool += HEADER.pack(MAGIC, rng.choice(sorted(KIND_NAMES)),
                                 rng.choice(sorted(PART_NAMES)), flags, 1, 1, 3,
                                 rng.getrandbits(32), rng.getrandbits(40),
                                 rng.choice((-1, 0, len(data))), rng.choice((0, 22)),
                                 len(data), orig) + data
        if rng.random() < 0.3:
            i = rng.randrange(len(spool))
            spool = spool[:i] + bytes([rng.getrandbits(8)]) + spool[i + 1:]
        if rng.random() < 0.2:
            spool = spool[:rng.randrange(len(spool))]
        try:
            write_pcapng(parse_spool(spool, "h"), str(out), "h")
            converted += 1
        except SpoolError as exc:
            assert str(exc).startswith("h: record ")
            refused += 1
    assert converted > 20 and refused > 20  # 32 and 268 with seed 7


@pytest.mark.parametrize("argv,says", [
    (["umad", "-o", "x.pcapng"], "'umad' is not a subcommand: one run records every source"),
    (["-o", "x.pcapng"], "no command to run after --"),
    (["--", "true"], "no -o OUT.pcapng to write"),
])
def test_record_says_what_is_missing(tmp_path, argv, says):
    """The README's recorder table names interfaces ("ibpath record umad"), which a user may
    take for subcommands: the error says what is meant, with the usage."""
    r = subprocess.run(IBPATH + ["record", *argv], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert says in r.stderr and "ibpath record -o OUT.pcapng [options] -- CMD [ARGS...]" in r.stderr
    assert not (tmp_path / "x.pcapng").exists()
