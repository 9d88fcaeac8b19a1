"""`ibpath record -o OUT.pcapng -- CMD [ARGS...]` (the process recorder, record/process.py) and
`ibpath record netlink [--protocol NAME|NUM] [--pid PID] -o OUT [-- COMMAND...]` (strace)."""

from __future__ import annotations

import argparse
import sys

from ..layers.netlink import NETLINK_RDMA
from ..record.netlink import RecorderError, parse_protocol, protocol_name, record
from ..record.spool import DEFAULT_MAX_RECORD, DEFAULT_MAX_TOTAL, MAX_RECORD_LIMIT, SpoolError


def _protocol(text: str) -> int:
    try:
        return parse_protocol(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _bytes_arg(low: int, high: int | None):
    def parse(text: str) -> int:
        try:
            n = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of bytes: {text!r}") from None
        if n < low or (high is not None and n > high):
            raise argparse.ArgumentTypeError(
                f"{n} is outside {low}..{high}" if high is not None else f"{n} is below {low}")
        return n
    return parse


def add_parser(sub) -> None:
    p = sub.add_parser(
        "record", help="record what a program said to the RDMA stack into a capture",
        description="Run CMD with an LD_PRELOAD recorder and write, on one timeline, the ucma "
        "commands it wrote to /dev/infiniband/rdma_cm (SET_OPTION path arrays as blob frames "
        "with the kernel's verdict, QUERY PATH readbacks, events), the MADs on "
        "/dev/infiniband/umad*, its ACM messages to ibacm and its NETLINK_RDMA messages. "
        "Children and exec'd programs are followed. Exit status: CMD's, or 2 when recording "
        "cannot start or its spool cannot be read. `ibpath record netlink ...` traces "
        "netlink with strace instead (`ibpath record netlink --help`).",
        usage="ibpath record -o OUT.pcapng [options] -- CMD [ARGS...]\n"
              "       ibpath record netlink [--protocol NAME|NUM] [--pid PID] -o OUT "
              "[-- COMMAND...]")
    p.add_argument("-o", "--output", metavar="OUT.pcapng", help="the capture to write")
    p.add_argument("--max-record", type=_bytes_arg(0, MAX_RECORD_LIMIT), metavar="BYTES",
                   help=f"cap on the bytes kept of one call's data (default "
                   f"{DEFAULT_MAX_RECORD}, at most {MAX_RECORD_LIMIT}); a cut is noted on "
                   "the packet")
    p.add_argument("--max-total", type=_bytes_arg(1, None), metavar="BYTES",
                   help=f"cap on the recording's size (default {DEFAULT_MAX_TOTAL >> 20} MiB); "
                   "reaching it is noted")
    p.add_argument("--acm-socket", action="append", metavar="PATH",
                   help="ibacm's unix socket (default /run/ibacm-unix.sock, /run/ibacm.sock, "
                   "/var/run/ibacm.sock); repeat for several")
    p.add_argument("--acm-port", type=int, metavar="PORT",
                   help="ibacm's TCP port in server mode (default 6125)")
    p.add_argument("--keep-spool", metavar="PATH", help="keep the recorder's raw spool here")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")
    p.set_defaults(func=run_record)


def _netlink_parser() -> argparse.ArgumentParser:
    nl = argparse.ArgumentParser(
        prog="ibpath record netlink",
        description="Trace COMMAND (or the running process PID) with strace and write every "
        "message it sends or receives on its netlink sockets of PROTOCOL as a link-type-253 "
        "record (the cooked header nlmon writes; pkttype 7 = to the kernel, 6 = to a user "
        "socket). nlmon never sees NETLINK_RDMA, hence the tracing. OUT is pcapng unless its "
        "name ends in .pcap. Ctrl-C stops (with --pid: detaches). Exit status: the command's, "
        "or 2 when recording cannot start.")
    nl.add_argument("--protocol", type=_protocol, default=NETLINK_RDMA, metavar="NAME|NUM",
                    help="netlink family to keep: RDMA (default), ROUTE, GENERIC, 20, ...")
    nl.add_argument("--pid", type=int, help="attach to this running process instead")
    nl.add_argument("-o", "--output", required=True, metavar="OUT")
    nl.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND...")
    return nl


USAGE = "ibpath record -o OUT.pcapng [options] -- CMD [ARGS...]"


def run_record(args) -> int:
    argv = list(args.argv)
    if argv[:1] == ["netlink"]:
        return run_netlink(_netlink_parser().parse_args(argv[1:]))
    if argv[:1] in (["ucma"], ["umad"], ["acm"], ["note"]):
        # the README's table names the capture's interfaces "ibpath record umad", ...
        print(f"ibpath record: {argv[0]!r} is not a subcommand: one run records every source "
              f"(ucma, umad, acm, netlink) of CMD at once, each on an interface of its own "
              f"(\"ibpath record {argv[0]}\"); run {USAGE}", file=sys.stderr)
        return 2
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not args.output:
        print(f"ibpath record: no -o OUT.pcapng to write: {USAGE}", file=sys.stderr)
        return 2
    if not argv:
        print(f"ibpath record: no command to run after --: {USAGE}", file=sys.stderr)
        return 2
    # here, not at the top: the recorder (its shims, umad and capture writers) is 20-30 ms of
    # every start of the other verbs
    from ..record.process import RecordError, RecordOptions, record_command

    options = RecordOptions(max_record=args.max_record, max_total=args.max_total,
                            acm_sockets=args.acm_socket, acm_port=args.acm_port,
                            spool=args.keep_spool)
    try:
        result = record_command(argv, args.output, options)
    except (RecordError, SpoolError, OSError) as exc:
        print(f"ibpath record: {exc}", file=sys.stderr)
        return 2
    cap = result.capture
    per_source = ", ".join(f"{n} {src}" for src, n in sorted(cap.frames.items())) or "nothing"
    print(f"ibpath record: {cap.total} frames ({per_source}; {cap.blobs} blob(s)) from "
          f"{len(cap.pids)} process(es) written to {args.output}", file=sys.stderr)
    for text in cap.notes:
        print(f"ibpath record: note: {text}", file=sys.stderr)
    return result.exit_status


def run_netlink(args) -> int:
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if bool(command) == (args.pid is not None):
        print("ibpath record netlink: give either -- COMMAND... or --pid PID", file=sys.stderr)
        return 2
    try:
        result = record(args.output, command=command or None, pid=args.pid,
                        protocol=args.protocol)
    except (RecorderError, OSError) as exc:
        print(f"ibpath record netlink: {exc}", file=sys.stderr)
        return 2
    print(f"ibpath: {result.messages} {protocol_name(args.protocol)} messages "
          f"({result.to_kernel} to the kernel, {result.to_user} to user sockets) on "
          f"{result.sockets} socket(s) written to {args.output}", file=sys.stderr)
    if result.unattributed:
        print(f"ibpath: {result.unattributed} I/O call(s) were already in progress when strace "
              "attached; what they carried (netlink or not) is not recorded", file=sys.stderr)
    for failure in result.socket_failures:
        hint = " (is ib_core loaded?)" if args.protocol == NETLINK_RDMA else ""
        print(f"ibpath: the traced process's {failure}{hint}", file=sys.stderr)
    return result.exit_status
