"""`ibpath record netlink [--protocol NAME|NUM] [--pid PID] -o OUT [-- COMMAND...]`."""

from __future__ import annotations

import argparse
import sys

from ..layers.netlink import NETLINK_RDMA
from ..record.netlink import RecorderError, parse_protocol, protocol_name, record


def _protocol(text: str) -> int:
    try:
        return parse_protocol(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(sub) -> None:
    p = sub.add_parser("record", help="record traffic of real software into a capture",
                       description="Record traffic that no capture device sees.")
    kinds = p.add_subparsers(dest="kind", required=True)
    nl = kinds.add_parser(
        "netlink", help="a process's netlink messages, traced with strace",
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
    nl.set_defaults(func=run_netlink)


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
