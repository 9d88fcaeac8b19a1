"""The `ibpath` console script's entry point: Scapy's routing tables and network interfaces
left unread at start.

Scapy reads the host's IPv4 and IPv6 routes when its layers are imported, 0.1 s of the
command's 0.5 s start here (more on a host with many routes), and lists its interfaces over
rtnetlink, decoding the answers with its own layers: 125 of the 924 million instructions of
the start that remains, on a host with 4 interfaces, more on one with hundreds (containers,
virtual functions). The command routes nothing and sends through no Scapy socket (it reads
and writes captures, asks kernels through its own sockets, gives every address it builds),
so it tells Scapy not to, before ibpath_scapy imports Scapy; that has to happen outside the
package, whose import runs first. `import ibpath_scapy` as a library keeps Scapy's
behaviour, and so does this when Scapy was imported before.
"""

import gc
import sys


def main() -> int:
    """Run `ibpath` with the arguments of the process."""
    gc.disable()
    if "scapy.route" not in sys.modules:
        from scapy.config import conf

        conf.route_autoload = conf.route6_autoload = False
        import scapy.interfaces  # noqa: F401  (it makes conf.ifaces, which scapy.arch fills)

        conf.ifaces.reload = lambda: None
    from ibpath_scapy.cli.main import main as ibpath

    # What the imports made lives as long as the process: frozen, the cycle collector no
    # longer walks it again and again (1,269 -> 1,162 million instructions of the start)
    gc.freeze()
    gc.enable()
    return ibpath()


if __name__ == "__main__":
    sys.exit(main())
