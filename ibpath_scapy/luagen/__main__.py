"""python -m ibpath_scapy.luagen: regenerate, in a checkout, the committed plugin
(dissector/ibpath.lua, as `ibpath dissector generate` does) and the generated block of the
tshark engine's helper (ibpath_scapy/data/engine_helper.lua)."""

import sys

from .plugin import CHECKOUT_PLUGIN, ENGINE_HELPER, engine_helper_lua, generate_plugin, in_checkout


def main() -> int:
    if not in_checkout():
        print("not in a checkout: nothing to regenerate (use `ibpath dissector generate -o FILE`)",
              file=sys.stderr)
        return 1
    for path, text in ((CHECKOUT_PLUGIN, generate_plugin()),
                       (ENGINE_HELPER, engine_helper_lua(ENGINE_HELPER.read_text()))):
        if path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path}")
        else:
            print(f"{path} is fresh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
