"""Entry point of the `ibpath` console script."""

from __future__ import annotations

import argparse
import importlib
import sys

from .. import __version__

# The verbs, each defined by the module of its name in this package (add_parser). A command
# line that names one builds that verb's parser alone, so that it imports none of the
# others' modules (0.05 s of `ibpath audit`'s start: bench/README.md); anything else (no
# verb, --help, --version, a mistyped verb, `completion`, which describes them all) builds
# them all.
VERBS = ("decode", "audit", "craft", "record", "resolve", "dissector", "lab", "acm",
         "completion")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of `ibpath`: every verb's, or with `only` that verb's alone."""
    parser = argparse.ArgumentParser(
        prog="ibpath",
        description="See what an InfiniBand/RoCE path resolver asked the SA, what the SA "
        "answered, and what path array reached the kernel.")
    parser.add_argument("--version", action="version", version=f"ibpath {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for verb in VERBS:
        if only is None or verb == only:
            importlib.import_module(f".{verb}", __package__).add_parser(sub)
    parser.set_defaults(root_parser=parser)  # `ibpath completion` describes the whole parser
    return parser


def _verb(argv: list[str]) -> str | None:
    """The verb argv names first, where its parser alone can parse it (see VERBS)."""
    first = argv[0] if argv else ""
    return first if first in VERBS and first != "completion" else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_verb(argv)).parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
