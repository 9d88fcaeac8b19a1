"""`ibpath audit FILE... [--kernel PROFILE] [--format text|json|junit|html] [-o OUT]`."""

from __future__ import annotations

import os
import sys

from ..audit import annotate, catalogue, report
from ..audit.cluster import ClusterError
from ..audit.html import write_html
from ..audit.model import AuditOptions
from ..audit.run import audit_paths, expand_inputs
from ..audit.extras import MissingExtra, need
from ..engines.scapy.gcpace import paced
from ..facts.kernelview import PROFILE_NAMES, PROFILES
from ..capture.pcapio import STDIN

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
    p.add_argument("--kernel", choices=PROFILE_NAMES + ("all",), default="all",
                   help="which kernel's use of a blob to judge (default: all): " + "; ".join(
                       PROFILES[n].label() for n in PROFILE_NAMES))
    p.add_argument("--format", choices=("text", "json", "junit", "html", "parquet"),
                   default="text",
                   help="html: one self-contained page with a ladder diagram per resolution; "
                   "parquet (with -o): one row per finding, for DuckDB (docs/parquet.md; "
                   "the fleet extra)")
    p.add_argument("--junit-cases", choices=report.JUNIT_CASES, default="all",
                   help="junit format: a test case per rule of the catalogue in every input's "
                   "suite, passed where the rule found nothing (all, the default: CI tools "
                   "then show a finding that goes away as a test fixed), or only the read case "
                   "and the rules with findings (findings)")
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
    p.add_argument("--resolutions-out", metavar="OUT.parquet",
                   help="also write one row per resolution (its counts and verdict) as Parquet "
                   "(docs/parquet.md; the fleet extra)")
    p.add_argument("--label", metavar="NAME",
                   help="what the reports call standard input ('-'): the file name in text "
                   "and JSON, the suite and class name in JUnit (default: '-'); and the host "
                   "column of the Parquet tables (default: what each pcapng's section header "
                   "says of the machine that made it)")
    p.add_argument("--annotate", metavar="OUT",
                   help="write a pcapng copy of the capture whose frames carry the findings "
                   "that rest on them as packet comments (Wireshark: frame.comment contains "
                   "\"RES-\"); with several inputs or a directory, OUT is a directory of copies")
    p.add_argument("--dask", metavar="SCHEDULER",
                   help="audit the files on the workers of this Dask scheduler "
                   "(tcp://HOST:PORT), which read them at the same paths; the same report as "
                   "one process (the fleet extra)")
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


def _refusal(args, files: list[str]) -> str | None:
    """Why the options cannot be done as given (before any file is audited), or None."""
    if args.format == "parquet" and not args.output:
        return "--format parquet writes a file: give -o OUT.parquet"
    if args.dask and args.jobs > 1:
        return "--dask and --jobs: the cluster's workers are the processes; give one of them"
    if args.dask:
        streams = [f for f in files if _is_stream(f)]
        if streams:
            return (f"--dask: {streams[0]} is a stream, read by this process only; give "
                    "files the workers can read")
    try:
        if args.format == "parquet":
            need("pyarrow", "--format parquet")
        if args.resolutions_out:
            need("pyarrow", "--resolutions-out")
        if args.dask:
            need("distributed", "--dask")
    except MissingExtra as exc:
        return str(exc)
    return None


def _write_tables(args, audits) -> None:
    from ..audit import parquet  # pyarrow: imported only when a table is asked for
    if args.format == "parquet":
        parquet.write_findings(args.output, audits, args.kernel, args.label)
    if args.resolutions_out:
        parquet.write_resolutions(args.resolutions_out, audits, args.kernel, args.label)


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
    if args.label is not None and not args.label.strip():
        print("ibpath audit: --label takes a name that is not blank (of standard input, and "
              "the Parquet tables' host)", file=sys.stderr)
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
    why = _refusal(args, paths)
    targets = {}
    if why is None and args.annotate:
        try:
            targets = annotate.plan(args.files + args.blob, paths, args.annotate)
        except annotate.AnnotateError as exc:
            why = str(exc)
    if why is not None:
        print(f"ibpath audit: {why}", file=sys.stderr)
        return 2
    binary = args.format == "parquet"
    out = sys.stdout if binary or not args.output else open(args.output, "w")
    try:
        tty = out.isatty() and not binary
        ladders, note = args.format == "html" or args.ladder, None
        if args.format == "text" and tty and not args.ladder:
            size = _input_bytes(paths)
            ladders = size is not None and size <= TTY_LADDER_LIMIT
            if not ladders:
                note = ("(ladder diagrams not drawn on a terminal for "
                        + ("a stream" if size is None else f"{size / 2 ** 20:.0f} MiB of input")
                        + ": --ladder draws them)")
        ladders = ladders and args.format in ("text", "html")
        # closed transactions are let go; ladder diagrams keep the messages they draw; the
        # Parquet tables read each capture's origin and its findings' frame times
        options = AuditOptions(kernel=args.kernel, extra_blobs=args.blob,
                               keep_transactions=False, ladder_arrows=ladders,
                               stream_resolutions=True,
                               tables=binary or bool(args.resolutions_out))
        live = None
        if args.format == "text" and any(_is_stream(p) for p in paths):
            live = _live_printer(out)
        try:
            audits, unreadable = audit_paths(paths, options, engine=args.engine,
                                             quiet=args.quiet, jobs=args.jobs, as_blob=as_blob,
                                             live=live, unlisted=inputs.unlisted,
                                             names={STDIN: args.label} if args.label else None,
                                             dask=args.dask)
        except ClusterError as exc:
            print(f"ibpath audit: {exc}", file=sys.stderr)
            return 2
        if args.format == "json":
            out.write(report.to_json(audits, skipped) + "\n")
        elif args.format == "junit":
            out.write(report.to_junit(audits, skipped, cases_of=args.junit_cases))
        elif args.format == "html":
            write_html(out, audits)
        elif args.format == "text":
            report.write_text(out, audits, colour=tty, ladder=ladders, skipped=skipped)
            if note:
                out.write(note + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    failed = False
    try:
        _write_tables(args, audits)
    except OSError as exc:
        print(f"ibpath audit: {exc.filename}: cannot write: {exc.strerror}", file=sys.stderr)
        failed = True
    if targets:
        lines, bad = annotate.write(audits, targets, as_blob)
        for line in lines:
            print(line, file=sys.stderr)
        failed = failed or bad
    if unreadable or failed:
        return 2
    return 1 if any(f.severity == "error" for a in audits for f in a.findings) else 0
