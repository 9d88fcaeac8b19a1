"""Record a process's netlink traffic as LINKTYPE_NETLINK (253) records by tracing it with strace.

An nlmon device never sees NETLINK_RDMA: net/netlink/af_netlink.c netlink_filter_tap() passes
only ROUTE, USERSOCK, SOCK_DIAG, NFLOG, XFRM, FIB_LOOKUP, NETFILTER and GENERIC to taps. So the
resolver (ibacm, ibarr, ...) is traced instead:

    strace -f -qq -ttt -T -y -xx -s 0 -e trace=<socket and I/O calls> -e read=all -e write=all

and every message it sends or receives on a netlink socket of the chosen protocol becomes one
record with the cooked header nlmon would have written (layers/netlink.py NetlinkCooked):

- pkttype PACKET_KERNEL (7) for what the process sends to the kernel (destination nl_pid 0),
  PACKET_USER (6) for what it receives and what it sends to another process (nl_pid != 0):
  the values af_netlink.c __netlink_deliver_tap_skb gives the tap's skb (libpcap on nlmon
  stores PACKET_OUTGOING instead, losing the direction);
- protocol = the socket's netlink family;
- the timestamp of a send is the syscall's entry, of a receive its return (-ttt plus -T);
- one record per send/receive call, as nlmon writes one per skb. MSG_PEEK receives are skipped
  (the data is read again without MSG_PEEK).

Which descriptors are netlink sockets of the protocol is learnt from socket() calls, and, for
sockets the process opened before strace attached (--pid), from /proc/PID/net/netlink; -y
prints every descriptor as socket:[inode], which stays true across dup(), fork() and threads.

Limits: sendmmsg/recvmmsg are split into messages at each iovec 0, and every message of one
sendmmsg gets the direction of its first msg_name;
-e read=all also dumps ordinary file reads, which costs time (not correctness) at start-up.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from ..layers.netlink import (
    LINKTYPE_NETLINK,
    NETLINK_FAMILIES,
    NETLINK_RDMA,
    PACKET_KERNEL,
    PACKET_USER,
    NetlinkCooked,
)
from ..capture.pcapio import PcapNgWriter, PcapWriter

TRACED_SYSCALLS = ("socket", "connect", "sendto", "sendmsg", "sendmmsg", "recvfrom",
                   "recvmsg", "recvmmsg", "read", "write", "readv", "writev")
SEND_CALLS = {"sendto", "sendmsg", "sendmmsg", "write", "writev"}
RECV_CALLS = {"recvfrom", "recvmsg", "recvmmsg", "read", "readv"}


def parse_protocol(text: str | int) -> int:
    """A netlink family from a name (RDMA, NETLINK_ROUTE) or number (20, 0x14)."""
    if isinstance(text, int):
        return text
    t = text.strip().upper().removeprefix("NETLINK_")
    for num, name in NETLINK_FAMILIES.items():
        if name == t:
            return num
    if t == "INET_DIAG":  # the older name of SOCK_DIAG
        return 4
    try:
        return int(t, 0)
    except ValueError:
        raise ValueError(f"unknown netlink protocol {text!r}") from None


def protocol_name(num: int) -> str:
    return "NETLINK_" + NETLINK_FAMILIES.get(num, str(num))


def proc_netlink_sockets(pid: int | None = None) -> dict[int, int]:
    """inode → netlink protocol of every netlink socket in the network namespace of pid
    (/proc/PID/net/netlink, columns: sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode)."""
    path = f"/proc/{pid}/net/netlink" if pid else "/proc/net/netlink"
    out = {}
    try:
        with open(path) as f:
            next(f, None)
            for line in f:
                cols = line.split()
                if len(cols) >= 10 and cols[1].isdigit() and cols[-1].isdigit():
                    out[int(cols[-1])] = int(cols[1])
    except OSError:
        pass
    return out


@dataclass(slots=True)
class Message:
    """One netlink send or receive of the traced process."""

    time: float
    pid: int
    syscall: str
    fd: int
    protocol: int
    pkttype: int
    data: bytes

    def record(self) -> bytes:
        """The link-type-253 record: cooked header, then the bytes as they crossed the socket."""
        return bytes(NetlinkCooked(pkttype=self.pkttype, protocol=self.protocol)) + self.data

    def comment(self) -> str:
        return f"{self.syscall} pid {self.pid} fd {self.fd}"


@dataclass
class _Call:
    pid: int
    time: float
    name: str
    args: list[str]
    ret: int | None
    duration: float | None
    buffers: list[bytearray] = field(default_factory=list)


_LINE = re.compile(r"^(?P<pid>\d+)\s+(?P<ts>\d+\.\d+)\s+(?P<rest>.*)$")
_RESUMED = re.compile(r"^<\.\.\. (?P<name>\w+) resumed>(?P<rest>.*)$")
_CALL = re.compile(
    r"^(?P<name>\w+)\((?P<args>.*)\)\s+=\s+(?P<ret>-?\d+|\?)(?P<retdeco><[^>]*>)?"
    r"(?P<tail>.*?)(?:\s+<(?P<dur>\d+\.\d+)>)?\s*$")
_FD = re.compile(r"^(?P<fd>\d+)<(?P<deco>(?:\\x[0-9a-f]{2})*)>$")
_DUMP = re.compile(r"^ \| [0-9a-f]{5,}  ")
_BUFFER = re.compile(r"^ \* \d+ bytes in buffer (?P<n>\d+)")
_NL_PID = re.compile(r"nl_pid=(\d+)")


def split_args(text: str) -> list[str]:
    """strace's argument list split at top-level commas (not inside {}, [], () or quotes)."""
    out, depth, cur, quote, esc = [], 0, [], False, False
    for ch in text:
        if quote:
            cur.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                quote = False
            continue
        if ch == '"':
            quote = True
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if cur or out:
        out.append("".join(cur).strip())
    return out


def _unescape(deco: str) -> str:
    return re.sub(r"\\x([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), deco)


def _inode(arg: str) -> tuple[int, int | None] | None:
    """(fd, socket inode or None) of an fd argument decorated by -y -xx."""
    m = _FD.match(arg.strip())
    if not m:
        return None
    deco = _unescape(m.group("deco"))
    sm = re.fullmatch(r"socket:\[(\d+)\]", deco)
    return int(m.group("fd")), int(sm.group(1)) if sm else None


class StraceParser:
    """Turns strace output lines (the options of strace_command) into netlink Messages of one
    protocol, or of every protocol when protocol is None."""

    def __init__(self, protocol: int | None = NETLINK_RDMA, pid: int | None = None):
        self.protocol = protocol
        self.pid = pid
        self.sockets: dict[int, int] = proc_netlink_sockets(pid)  # inode → protocol
        self._rescanned: set[int] = set()
        self.peers: dict[int, int] = {}  # inode → nl_pid of connect()
        self.unfinished: dict[int, tuple[float, str]] = {}
        self.current: _Call | None = None
        self.socket_failures: list[str] = []
        self.sockets_seen: set[int] = set()
        # I/O calls already in progress when strace attached: strace prints only their end,
        # without the descriptor, so they cannot be attributed to a socket.
        self.unattributed = 0

    # -- lines ------------------------------------------------------------------------------
    def feed(self, line: str) -> Iterator[Message]:
        line = line.rstrip("\n")
        if _DUMP.match(line):
            if self.current is not None:
                if not self.current.buffers:
                    self.current.buffers.append(bytearray())
                self.current.buffers[-1] += _dump_bytes(line)
            return
        m = _BUFFER.match(line)
        if m:
            if self.current is not None:
                if int(m.group("n")) == 0 or not self.current.buffers:
                    self.current.buffers.append(bytearray())
            return
        yield from self.flush()
        m = _LINE.match(line)
        if not m:
            return
        pid, ts, rest = int(m.group("pid")), float(m.group("ts")), m.group("rest")
        if rest.endswith("<unfinished ...>"):
            self.unfinished[pid] = (ts, rest[: -len("<unfinished ...>")].rstrip())
            return
        r = _RESUMED.match(rest)
        if r:
            start = self.unfinished.pop(pid, None)
            if start is None:
                if r.group("name") in SEND_CALLS | RECV_CALLS and " = -" not in r.group("rest"):
                    self.unattributed += 1
                return
            ts, head = start[0], start[1]
            rest = head + (" " if head.endswith(",") else "") + r.group("rest")
        call = _CALL.match(rest)
        if not call or call.group("ret") == "?":
            return
        self._call(_Call(pid, ts, call.group("name"), split_args(call.group("args")),
                         int(call.group("ret")),
                         float(call.group("dur")) if call.group("dur") else None),
                   call.group("retdeco"), call.group("tail"))

    def flush(self) -> Iterator[Message]:
        call, self.current = self.current, None
        if call is not None:
            yield from self._messages(call)

    # -- syscalls ---------------------------------------------------------------------------
    def _call(self, call: _Call, retdeco: str | None, tail: str) -> None:
        if call.name == "socket":
            self._socket(call, retdeco, tail)
            return
        if not call.args:
            return
        fdi = _inode(call.args[0])
        if fdi is None or fdi[1] is None:
            return
        inode = fdi[1]
        proto = self._protocol_of(inode)
        if proto is None:
            return
        if call.name == "connect" and call.ret == 0:
            m = _NL_PID.search(call.args[1] if len(call.args) > 1 else "")
            if m:
                self.peers[inode] = int(m.group(1))
            return
        if call.name not in SEND_CALLS | RECV_CALLS or call.ret is None or call.ret < 0:
            return
        if self.protocol is not None and proto != self.protocol:
            return
        if call.name in RECV_CALLS and _peeked(call):
            return
        self.current = call

    def _socket(self, call: _Call, retdeco: str | None, tail: str) -> None:
        if len(call.args) < 3 or call.args[0] not in ("AF_NETLINK", "PF_NETLINK", "16"):
            return
        try:
            proto = parse_protocol(call.args[2].split("/*")[0].strip())
        except ValueError:
            return
        if call.ret is None or call.ret < 0:
            if self.protocol is None or proto == self.protocol:
                err = tail.strip().split(" ")[0] if tail.strip() else "error"
                self.socket_failures.append(
                    f"socket(AF_NETLINK, {call.args[1]}, {protocol_name(proto)}) failed: {err}")
            return
        m = re.fullmatch(r"<((?:\\x[0-9a-f]{2})*)>", retdeco or "")
        sm = re.fullmatch(r"socket:\[(\d+)\]", _unescape(m.group(1))) if m else None
        if sm:
            self.sockets[int(sm.group(1))] = proto

    def _protocol_of(self, inode: int) -> int | None:
        if inode not in self.sockets and inode not in self._rescanned:
            # a socket opened before strace attached, or received over a unix socket
            self._rescanned.add(inode)
            self.sockets.update(proc_netlink_sockets(self.pid))
        return self.sockets.get(inode)

    def _messages(self, call: _Call) -> Iterator[Message]:
        fd, inode = _inode(call.args[0])
        proto = self.sockets[inode]
        self.sockets_seen.add(inode)
        if call.name in SEND_CALLS:
            dest = None
            if call.name in ("sendto", "sendmsg", "sendmmsg"):
                where = call.args[4] if call.name == "sendto" and len(call.args) > 4 else \
                    (call.args[1] if len(call.args) > 1 else "")
                m = _NL_PID.search(where)
                dest = int(m.group(1)) if m else None
            if dest is None:
                dest = self.peers.get(inode, 0)
            pkttype = PACKET_KERNEL if dest == 0 else PACKET_USER
            when = call.time
        else:
            pkttype = PACKET_USER
            when = call.time + (call.duration or 0.0)
        buffers = call.buffers
        if call.name not in ("sendmmsg", "recvmmsg"):
            buffers = [bytearray().join(buffers)]
        for data in buffers:
            if data:
                yield Message(when, call.pid, call.name, fd, proto, pkttype, bytes(data))


def _peeked(call: _Call) -> bool:
    flags = ""
    if call.name == "recvfrom" and len(call.args) > 3:
        flags = call.args[3]
    elif call.name == "recvmsg" and len(call.args) > 2:
        flags = call.args[2]
    elif call.name == "recvmmsg" and len(call.args) > 3:
        flags = call.args[3]
    return "MSG_PEEK" in flags


def _dump_bytes(line: str) -> bytes:
    """The bytes of one strace hex-dump line: ` | 00000  20 00 ... 00  ascii |`."""
    start = line.index("  ", 3) + 2
    return bytes.fromhex("".join(line[start:start + 49].split()))


def strace_command(output: str, *, command: list[str] | None = None, pid: int | None = None,
                   strace: str = "strace") -> list[str]:
    """The strace invocation whose output StraceParser reads."""
    cmd = [strace, "-f", "-qq", "-ttt", "-T", "-y", "-xx", "-s", "0",
           "-e", "trace=" + ",".join(TRACED_SYSCALLS), "-e", "read=all", "-e", "write=all",
           "-o", output]
    if pid is not None:
        return cmd + ["-p", str(pid)]
    return cmd + ["--", *(command or [])]


@dataclass
class RecordResult:
    exit_status: int
    messages: int = 0
    to_kernel: int = 0
    to_user: int = 0
    sockets: int = 0
    socket_failures: list[str] = field(default_factory=list)
    unattributed: int = 0


class RecorderError(Exception):
    """The recorder could not run (no strace, bad output path)."""


def _open_writer(path: str):
    if path.endswith(".pcap"):
        return PcapWriter(path, LINKTYPE_NETLINK, nano=True), False
    return PcapNgWriter(path), True


def write_messages(messages: Iterable[Message], out: str) -> RecordResult:
    """Write messages to out (pcapng, or classic pcap when the name ends in .pcap)."""
    result = RecordResult(0)
    writer, ng = _open_writer(out)
    with writer:
        for msg in messages:
            _write(writer, ng, msg, result)
    return result


def _write(writer, ng: bool, msg: Message, result: RecordResult) -> None:
    if ng:
        writer.write(msg.record(), LINKTYPE_NETLINK, msg.time, comment=msg.comment())
    else:
        writer.write(msg.record(), msg.time)
    result.messages += 1
    if msg.pkttype == PACKET_KERNEL:
        result.to_kernel += 1
    else:
        result.to_user += 1


def record(out: str, *, command: list[str] | None = None, pid: int | None = None,
           protocol: int | None = NETLINK_RDMA, strace: str = "strace") -> RecordResult:
    """Run command (or attach to pid) under strace and write its netlink messages of protocol
    to out as they happen. Returns when the traced processes are gone (or strace detached on
    SIGINT/SIGTERM); exit_status is strace's, i.e. the command's."""
    if shutil.which(strace) is None:
        raise RecorderError(f"{strace} not found (Debian package strace)")
    if (command is None) == (pid is None):
        raise RecorderError("give either a command or --pid")
    parser = StraceParser(protocol, pid)
    result = RecordResult(0)
    with tempfile.TemporaryDirectory(prefix="ibpath-record-") as tmp:
        fifo = os.path.join(tmp, "strace.out")
        os.mkfifo(fifo)
        # Non-blocking, so that a strace that dies before opening the FIFO cannot hang us.
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        writer, ng = _open_writer(out)
        proc = subprocess.Popen(strace_command(fifo, command=command, pid=pid, strace=strace))
        try:
            with writer:
                for line in _lines(fd, proc):
                    for msg in parser.feed(line):
                        _write(writer, ng, msg, result)
                for msg in parser.flush():
                    _write(writer, ng, msg, result)
        finally:
            os.close(fd)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            result.exit_status = proc.wait()
    result.sockets = len(parser.sockets_seen)
    result.socket_failures = parser.socket_failures
    result.unattributed = parser.unattributed
    return result


def _lines(fd: int, proc: subprocess.Popen) -> Iterator[str]:
    """Lines strace writes into the FIFO, until strace has exited and the FIFO is drained.
    Ctrl-C makes strace detach (with --pid) or stop; what it wrote until then is kept."""
    pending = b""
    interrupted = False
    while True:
        try:
            ready, _, _ = select.select([fd], [], [], 0.2)
            chunk = os.read(fd, 1 << 16) if ready else None
        except BlockingIOError:
            continue
        except KeyboardInterrupt:
            if not interrupted and proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            interrupted = True
            continue
        if chunk:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                yield raw.decode("ascii", "replace")
            continue
        if proc.poll() is not None:
            if chunk == b"" or not ready:
                break
        if chunk == b"":
            time.sleep(0.02)  # no writer (yet): strace has not opened the FIFO
    if pending:
        yield pending.decode("ascii", "replace")
