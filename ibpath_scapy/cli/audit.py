"""`ibpath audit FILE... [--kernel PROFILE] [--format text|json|junit] [-o OUT]`."""

from __future__ import annotations

import sys

from ..audit.model import AuditOptions
from ..audit.run import audit_paths
from ..audit import report
from ..audit.html import to_html


def add_parser(sub) -> None:
    p = sub.add_parser(
        "audit", help="check captures and blobs against the rule catalogue",
        description="Replay captures (RoCEv2, native IB/ERF, RDMA netlink, exported PDU, raw "
        "blobs), rebuild every resolution and check it against the rule catalogue. Exit "
        "status: 0 no error finding, 1 at least one error, 2 an input cannot be read.")
    p.add_argument("files", nargs="*", metavar="FILE")
    p.add_argument("--kernel", choices=("ucma", "ls-legacy", "ls-multi", "proposal", "all"),
                   default="all", help="which kernel's use of a blob to judge (default: all)")
    p.add_argument("--format", choices=("text", "json", "junit", "html"), default="text",
                   help="html: one self-contained page with a ladder diagram per resolution")
    p.add_argument("--ladder", action="store_true",
                   help="text format: draw each resolution's ladder diagram (the default when "
                   "the report goes to a terminal)")
    p.add_argument("-o", "--output", help="write the report here instead of stdout")
    p.add_argument("--blob", action="append", default=[], metavar="FILE",
                   help="a rdma_set_option optval recorded outside the capture (raw blob or "
                   "capture with blob frames): audited on its own and added to every FILE's "
                   "replay, where the CM rules use it (repeatable)")
    p.add_argument("--engine", choices=("scapy", "tshark"), default="scapy",
                   help="decode with the Scapy layers (default), or with tshark and the "
                   "generated plugin: the same facts, for link types only Wireshark reads and "
                   "as a second opinion")
    p.add_argument("--list-rules", action="store_true", help="print the rule catalogue")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.list_rules:
        sys.stdout.write(report.rule_list())
        return 0
    if not args.files and not args.blob:
        print("ibpath audit: give at least one FILE (or --list-rules)", file=sys.stderr)
        return 2
    out = open(args.output, "w") if args.output else sys.stdout
    try:
        tty = out.isatty()
        ladders = args.format == "html" or (args.format == "text" and (args.ladder or tty))
        # closed transactions are let go; ladder diagrams keep the messages they draw
        options = AuditOptions(kernel=args.kernel, extra_blobs=args.blob,
                               keep_transactions=False, ladder_arrows=ladders)
        paths = args.files + [b for b in dict.fromkeys(args.blob) if b not in args.files]
        audits, unreadable = audit_paths(paths, options, engine=args.engine, quiet=args.quiet)
        if args.format == "json":
            out.write(report.to_json(audits) + "\n")
        elif args.format == "junit":
            out.write(report.to_junit(audits))
        elif args.format == "html":
            out.write(to_html(audits))
        else:
            out.write(report.to_text(audits, colour=tty, ladder=ladders))
    finally:
        if args.output:
            out.close()
    if unreadable:
        return 2
    return 1 if any(f.severity == "error" for a in audits for f in a.findings) else 0
