"""`ibpath audit FILE... [--kernel PROFILE] [--format text|json|junit|html] [-o OUT]`."""

from __future__ import annotations

import os
import sys

from ..audit import catalogue, report
from ..audit.html import to_html
from ..audit.model import AuditOptions
from ..audit.run import audit_paths, expand_inputs
from ..gcpace import paced
from ..pcapio import STDIN

# On a terminal the text report draws ladder diagrams by default, which keep every SA
# frame's arrow (README "Memory"); past this much input (or for a stream, whose size is not
# known) the default is the summary, with a line saying how to get the ladders.
TTY_LADDER_LIMIT = 8 * 1024 * 1024


def add_parser(sub) -> None:
    p = sub.add_parser(
        "audit", help="check captures and blobs against the rule catalogue",
        description="Replay captures (RoCEv2, native IB/ERF, RDMA netlink, exported PDU, raw "
        "blobs), rebuild every resolution and check it against the rule catalogue. FILE may be "
        "'-' (a pcap or pcapng stream on standard input, e.g. tcpdump -U -w -), a FIFO, or a "
        "directory (audited recursively; files recognised by content, the others listed as "
        "skipped). Exit status: 0 no error finding, 1 at least one error, 2 an input cannot "
        "be read.")
    p.add_argument("files", nargs="*", metavar="FILE")
    p.add_argument("--kernel", choices=("ucma", "ls-legacy", "ls-multi", "proposal", "all"),
                   default="all", help="which kernel's use of a blob to judge (default: all)")
    p.add_argument("--format", choices=("text", "json", "junit", "html"), default="text",
                   help="html: one self-contained page with a ladder diagram per resolution")
    p.add_argument("--junit-cases", choices=report.JUNIT_CASES, default="all",
                   help="junit format: a test case per rule of the catalogue in every input's "
                   "suite, passed where the rule found nothing (all, the default: CI tools "
                   "then show a finding that goes away as a test fixed), or only the read case "
                   "and the rules with findings (findings)")
    p.add_argument("--label", metavar="NAME",
                   help="what the reports call standard input ('-'): the file name in text "
                   "and JSON, the suite and class name in JUnit (default: '-')")
    p.add_argument("--ladder", action="store_true",
                   help="text format: draw each resolution's ladder diagram (the default when "
                   f"the report goes to a terminal and the inputs are under "
                   f"{TTY_LADDER_LIMIT // (1024 * 1024)} MiB)")
    p.add_argument("-o", "--output", help="write the report here instead of stdout")
    p.add_argument("--blob", action="append", default=[], metavar="FILE",
                   help="a rdma_set_option optval recorded outside the capture (a raw blob, "
                   "read as one whatever its flags, or a capture with blob frames): audited on "
                   "its own and added to every FILE's replay, where the CM rules use it "
                   "(repeatable)")
    p.add_argument("--as", dest="as_kind", choices=("blob",),
                   help="blob: read every FILE as a raw blob (rdma_set_option optval bytes), "
                   "whatever its content")
    p.add_argument("--engine", choices=("scapy", "tshark"), default="scapy",
                   help="decode with the Scapy layers (default), or with tshark and the "
                   "generated plugin: the same facts, for link types only Wireshark reads and "
                   "as a second opinion")
    p.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                   help="audit the files in N processes (the same report as one process)")
    p.add_argument("--list-rules", action="store_true", help="print the rule catalogue (--format json: as JSON)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def _input_bytes(paths: list[str]) -> int | None:
    """Total size of the inputs, None when one is a stream (no size known)."""
    total = 0
    for p in paths:
        if p == STDIN or not os.path.isfile(p):
            if p != STDIN and not os.path.exists(p):
                continue  # unreadable: reported by its audit
            return None
        total += os.path.getsize(p)
    return total


def _is_stream(path: str) -> bool:
    return path == STDIN or (os.path.exists(path) and not os.path.isfile(path)
                             and not os.path.isdir(path))


def _live_printer(out):
    """For a stream in text format: each frame and transaction finding printed as soon as it
    is known, under a line saying so (the whole report follows when the stream ends)."""
    started = set()

    def live(f) -> None:
        if f.file not in started:
            started.add(f.file)
            out.write(f"== {f.file}: findings as they are found (the report follows when the "
                      "input ends)\n")
        out.write(report.finding_line(f) + "\n")
        out.flush()

    return live


@paced()  # the reports too are written without walking the records again (gcpace)
def run(args) -> int:
    if args.list_rules:
        sys.stdout.write(catalogue.as_json() if args.format == "json" else catalogue.text())
        return 0
    if not args.files and not args.blob:
        print("ibpath audit: give at least one FILE (or --list-rules)", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("ibpath audit: --jobs takes a number of processes, 1 or more", file=sys.stderr)
        return 2
    if args.label is not None and (STDIN not in args.files or not args.label.strip()):
        print("ibpath audit: --label names standard input: give '-' among the FILEs, and a "
              "name that is not blank", file=sys.stderr)
        return 2
    as_blob = args.as_kind == "blob"
    inputs = expand_inputs(args.files, as_blob)
    files, skipped = inputs.files, inputs.skipped
    for s in skipped:
        print(f"ibpath: skipped {s.path}: {s.reason}", file=sys.stderr)
    paths = files + [b for b in dict.fromkeys(args.blob) if b not in files]
    if not paths:
        print(f"ibpath audit: no capture or blob file in {', '.join(args.files)}",
              file=sys.stderr)
        return 2
    out = open(args.output, "w") if args.output else sys.stdout
    try:
        tty = out.isatty()
        ladders, note = args.format == "html" or args.ladder, None
        if args.format == "text" and tty and not args.ladder:
            size = _input_bytes(paths)
            ladders = size is not None and size <= TTY_LADDER_LIMIT
            if not ladders:
                note = ("(ladder diagrams not drawn on a terminal for "
                        + ("a stream" if size is None else f"{size / 2 ** 20:.0f} MiB of input")
                        + ": --ladder draws them)")
        ladders = ladders and args.format in ("text", "html")
        # closed transactions are let go; ladder diagrams keep the messages they draw
        options = AuditOptions(kernel=args.kernel, extra_blobs=args.blob,
                               keep_transactions=False, ladder_arrows=ladders)
        live = None
        if args.format == "text" and any(_is_stream(p) for p in paths):
            live = _live_printer(out)
        audits, unreadable = audit_paths(paths, options, engine=args.engine, quiet=args.quiet,
                                         jobs=args.jobs, as_blob=as_blob, live=live,
                                         unlisted=inputs.unlisted,
                                         names={STDIN: args.label} if args.label else None)
        if args.format == "json":
            out.write(report.to_json(audits, skipped) + "\n")
        elif args.format == "junit":
            out.write(report.to_junit(audits, skipped, cases_of=args.junit_cases))
        elif args.format == "html":
            out.write(to_html(audits))
        else:
            out.write(report.to_text(audits, colour=tty, ladder=ladders, skipped=skipped))
            if note:
                out.write(note + "\n")
    finally:
        if args.output:
            out.close()
    if unreadable:
        return 2
    return 1 if any(f.severity == "error" for a in audits for f in a.findings) else 0
