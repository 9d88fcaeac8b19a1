"""`ibpath dissector generate [-o PATH]` and `ibpath dissector install [--dir DIR]`."""

from __future__ import annotations

import sys
from pathlib import Path

from ..luagen.plugin import default_output, generate_plugin, in_checkout
from ..engines.wireshark import Tshark, find_tshark, install_plugin, write_atomically

# Where Wireshark 3.x-4.6 look for a user's Lua plugins on Linux; used only when no tshark
# can be asked (`tshark -G folders`, "Personal Lua Plugins").
FALLBACK_PERSONAL = Path("~/.local/lib/wireshark/plugins")
PERSONAL_KEY = "Personal Lua Plugins"


def add_parser(sub) -> None:
    p = sub.add_parser("dissector", help="generate or install the Wireshark Lua plugin")
    dsub = p.add_subparsers(dest="action", required=True)
    g = dsub.add_parser("generate", help="write the Lua plugin generated from the Scapy layers")
    where = ("the checkout's dissector/ibpath.lua" if in_checkout()
             else "ibpath.lua in the current directory")
    g.add_argument("-o", "--output", default=None,
                   help=f"where to write it, - for standard output (default: {where})")
    g.set_defaults(func=run_generate)
    i = dsub.add_parser(
        "install", help="install the plugin where the tshark on PATH (or $TSHARK) loads it",
        description="Writes ibpath.lua (mode 0644) into the \"Personal Lua Plugins\" folder "
        "that `tshark -G folders` names for this user, then checks that this tshark loads it.")
    i.add_argument("--dir", default=None,
                   help="plugin folder instead, e.g. the \"Global Lua Plugins\" folder for a "
                   "system-wide install")
    i.set_defaults(func=run_install)


def run_generate(args) -> int:
    text = generate_plugin()
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    out = Path(args.output) if args.output else default_output()
    write_atomically(out, text)
    print(f"wrote {out}", file=sys.stderr)
    return 0


def _tshark() -> tuple[Tshark | None, str | None]:
    path = find_tshark()
    if path is None:
        return None, "no tshark on PATH (nor $TSHARK)"
    try:
        return Tshark.at(path), None
    except (OSError, ValueError) as exc:
        return None, f"cannot ask {path} its version ({exc})"


def run_install(args) -> int:
    tshark, why_not = _tshark()
    personal = tshark.folders().get(PERSONAL_KEY) if tshark and not args.dir else None
    dest = Path(args.dir or personal or FALLBACK_PERSONAL).expanduser()
    # Install what this version generates, so an installed plugin never lags the layers.
    target = install_plugin(generate_plugin(), dest)
    print(f"installed {target} (mode 0644)", file=sys.stderr)
    if tshark is None:
        print(f"warning: {why_not}: could not check which Wireshark loads it; "
              f"{FALLBACK_PERSONAL} is where Wireshark looks for a user's Lua plugins",
              file=sys.stderr)
        return 0
    refused = tshark.refuses_lua
    if refused:
        print(f"warning: {refused}, so it will not load {target.name} for this user. "
              "Run Wireshark and tshark as a regular user (for live capture, add that user to "
              "the wireshark group so dumpcap can capture), and install the plugin as that "
              "user with `ibpath dissector install`.", file=sys.stderr)
        return 0
    problem = tshark.probe()
    if problem is None:
        print(f"tshark {tshark.version_text} ({tshark.path}) loads it: restart Wireshark to "
              "see the ibpath.* fields", file=sys.stderr)
    else:
        print(f"warning: {problem}. Wireshark loads Lua plugins from the folders "
              f"`{tshark.path} -G folders` lists; install there (default) or pass it to "
              f"tshark with -X lua_script:{target}", file=sys.stderr)
    return 0
