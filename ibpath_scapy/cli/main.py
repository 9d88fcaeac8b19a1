"""Entry point of the `ibpath` console script."""

from __future__ import annotations

import argparse
import sys

from .. import __version__
from . import acm, audit, completion, craft, decode, dissector, lab, record, resolve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ibpath",
        description="See what an InfiniBand/RoCE path resolver asked the SA, what the SA "
        "answered, and what path array reached the kernel.")
    parser.add_argument("--version", action="version", version=f"ibpath {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (decode, audit, craft, record, resolve, dissector, lab, acm, completion):
        module.add_parser(sub)
    parser.set_defaults(root_parser=parser)  # `ibpath completion` describes the whole parser
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
