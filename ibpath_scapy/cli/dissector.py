"""`ibpath dissector generate [-o PATH]` and `ibpath dissector install [--dir DIR]`."""

from __future__ import annotations


import sys
from pathlib import Path

from ..luagen.plugin import DEFAULT_OUTPUT, generate_plugin, write_atomically

PERSONAL_PLUGINS = Path.home() / ".local" / "lib" / "wireshark" / "plugins"


def add_parser(sub) -> None:
    p = sub.add_parser("dissector", help="generate or install the Wireshark Lua plugin")
    dsub = p.add_subparsers(dest="action", required=True)
    g = dsub.add_parser("generate", help="write the Lua plugin generated from the Scapy layers")
    g.add_argument("-o", "--output", default=str(DEFAULT_OUTPUT),
                   help=f"where to write it (default {DEFAULT_OUTPUT})")
    g.set_defaults(func=run_generate)
    i = dsub.add_parser("install", help="copy the plugin into Wireshark's personal plugin folder")
    i.add_argument("--dir", default=str(PERSONAL_PLUGINS),
                   help=f"plugin folder (default {PERSONAL_PLUGINS})")
    i.set_defaults(func=run_install)


def run_generate(args) -> int:
    out = Path(args.output)
    write_atomically(out, generate_plugin())
    print(f"wrote {out}", file=sys.stderr)
    return 0


def run_install(args) -> int:
    dest = Path(args.dir)
    dest.mkdir(parents=True, exist_ok=True)
    # Install what this version generates, so an installed plugin never lags the layers.
    target = dest / "ibpath.lua"
    write_atomically(target, generate_plugin())
    print(f"installed {target}; restart Wireshark (or run tshark) to load it", file=sys.stderr)
    return 0



