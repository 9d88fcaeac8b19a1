"""Recording real management traffic from real software.

``ibpath_scapy.record.process`` runs any program under the LD_PRELOAD recorder
``ibpathrec.c`` (`ibpath record -o OUT.pcapng -- CMD`): its ucma commands, umad MADs, ACM
messages and NETLINK_RDMA messages go to a spool (``spool.py``), which ``capture.py`` turns
into one pcapng. ``ibpath_scapy.record.netlink`` traces netlink with strace instead.

``ibpath_scapy.record.umad`` runs OpenSM (as SM/SA) and ``saquery`` (as SA client) on the
user-space fabric simulator ibsim, records every MAD each of them writes to / reads from its
``/dev/infiniband/umad*`` device with an LD_PRELOAD shim (``umadrec.c``, compiled at run
time), and turns OpenSM's side of the exchange into a native-InfiniBand capture (ERF type 21
records, pcap link type 197) the way ibdump would have seen it on the wire.
"""

from importlib import import_module

__all__ = [
    "DEFAULT_QUERIES", "DEFAULT_TOPOLOGY", "Query", "SessionResult", "UmadHeader",
    "UmadRecord", "WireMad", "compile_shim", "missing_tools", "read_log",
    "record_sa_session", "sa_wire_mads", "write_pcap",
]


def __getattr__(name: str):
    """The ibsim recorder's names, from record.umad when first asked (PEP 562): decoding a
    capture imports record.comment, and should not pay for the ibsim recorder."""
    if name in __all__:
        return getattr(import_module(".umad", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
