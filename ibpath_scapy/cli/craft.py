"""`ibpath craft SCENARIO -o FILE [--seed N] [--encap ib|rocev2]`, `ibpath craft --list`,
`ibpath craft --corpus DIR` and `ibpath craft --verify DIR`."""

from __future__ import annotations

import sys
import textwrap


def add_parser(sub) -> None:
    p = sub.add_parser(
        "craft", help="write a capture of a named resolver scenario (conforming or faulty)",
        description="Write a pcapng of a resolver exchange: SA queries answered as OpenSM "
        "answers them, netlink LS messages, the rdma_set_option blob and the CM REQ/REP/RTU, "
        "for a conforming flow or a fault the audit reports. Exit status: 0 done (--verify: "
        "every file gave exactly its expected rule IDs), 1 --verify found a difference, 2 bad "
        "arguments or unwritable output.")
    p.add_argument("scenario", nargs="?", metavar="SCENARIO", help="a name from --list")
    p.add_argument("-o", "--output", metavar="FILE", help="the pcapng to write")
    p.add_argument("--seed", type=int, default=0,
                   help="picks GIDs, LIDs and TIDs (default 0; same seed, same bytes)")
    p.add_argument("--encap", choices=("ib", "rocev2"),
                   help="MADs as native IB in ERF records or as RoCEv2 (default: the "
                   "scenario's first, ib for all but RoCE-only ones)")
    p.add_argument("--list", action="store_true",
                   help="list the scenarios with the rule IDs each one triggers")
    p.add_argument("--corpus", metavar="DIR",
                   help="write every scenario, manifest.json and README.md into DIR")
    p.add_argument("--verify", metavar="DIR",
                   help="audit every file of a corpus against its manifest and show the report")
    p.set_defaults(func=run)


def _list() -> str:
    from ..craft.scenarios import SCENARIOS

    out = []
    for name, sc in SCENARIOS.items():
        extra = []
        if sc.kernel != "all":
            extra.append(f"--kernel {sc.kernel}")
        if sc.encaps != ("ib", "rocev2"):
            extra.append(f"{'/'.join(sc.encaps)} only")
        rules = ", ".join(sorted(sc.rules)) or "(no finding)"
        out.append(f"{name:28} {rules}" + (f"  [{'; '.join(extra)}]" if extra else ""))
        out += textwrap.wrap(sc.summary, 96, initial_indent=" " * 4, subsequent_indent=" " * 4)
    return "\n".join(out) + "\n"


def run(args) -> int:
    from ..craft.corpus import verify_corpus, write_corpus
    from ..craft.scenarios import SCENARIOS

    if args.list:
        sys.stdout.write(_list())
        return 0
    try:
        if args.corpus:
            entries = write_corpus(args.corpus, seed=args.seed)
            print(f"wrote {len(entries)} captures, manifest.json and README.md to {args.corpus}")
            return 0
        if args.verify:
            return 0 if verify_corpus(args.verify) else 1
        if not args.scenario:
            print("ibpath craft: give a SCENARIO (see --list), --corpus DIR or --verify DIR",
                  file=sys.stderr)
            return 2
        sc = SCENARIOS.get(args.scenario)
        if sc is None:
            print(f"ibpath craft: unknown scenario {args.scenario!r}; known: "
                  f"{', '.join(SCENARIOS)}", file=sys.stderr)
            return 2
        if not args.output:
            print("ibpath craft: give the output file with -o FILE", file=sys.stderr)
            return 2
        sc.write(args.output, seed=args.seed, encap=args.encap)
    except ValueError as exc:
        print(f"ibpath craft: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"ibpath craft: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    rules = ", ".join(sorted(sc.rules)) or "no finding"
    kernel = "" if sc.kernel == "all" else f" with --kernel {sc.kernel}"
    print(f"wrote {args.output}: {sc.name}; ibpath audit{kernel} reports {rules}")
    return 0
