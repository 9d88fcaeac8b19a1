"""The second audit engine: the generated Wireshark plugin, run by tshark, read as facts.

``tshark_records(path)`` runs tshark once over a capture with the plugin this package ships
(``dissector/ibpath.lua``; ``wireshark.packaged_plugin()``), after checking that this tshark
loads it at all (``wireshark.Tshark.probe``), and yields, frame by frame, the same records
(facts.records, made by the one assembler) ``decode.decode_file(path)`` yields: the facts
``audit.engine.audit_records`` consumes. Because the audit rules see only these records, the
engines can be compared finding for finding.

Output format. ``tshark -T json`` with ``-J`` limited to ``frame``, ``pkt_comment``, ``ip``,
``ipv6``, ``udp``, ``netlink``, ``exported_pdu``, the plugin's own protocols (read from the
plugin's ``Proto(...)`` calls) and the engine's helper (``ibpath_engine``, below). JSON keeps
the protocol tree: repeated fields stay in order (objects are read as ordered key/value pairs,
duplicates included) and a field belongs to the node it sits in. ``-T fields`` and ``-T ek``
flatten the tree, which loses which LS attribute a value belongs to and which MAD of a frame
(segment or reassembled message) a field came from. tshark prints one packet object after
another, each opening with a line ``  {`` and closing with ``  }`` at two spaces of indent, so
the output is parsed one packet at a time as it streams; only one packet's text is held in
memory. ``-x`` (raw bytes and offsets of every field) would double tshark's run time and is
not used. tshark is run with subprocess, not pyshark: pyshark reads PDML or EK through
asyncio and drops tshark's stderr, which the Lua-error check needs.

How fields are attributed:

- MAD frames: the plugin adds one top-level protocol node per layer (``ibpath.lrh``,
  ``ibpath.bth``, ``ibpath.deth``, ``ibpath.mad``, ``ibpath.rmpp``, ``ibpath.sa``,
  ``ibpath.cm_req`` ...); PathRecords are children of their ``ibpath.sa`` node. On the frame
  that completes an RMPP transfer, the reassembled message (tvb "Reassembled RMPP") is
  dissected inside the segment's top-level ``ibpath.sa`` node: the ``ibpath.rmpp.segment``
  fields there are ``reassembled_from``, and its nested ``ibpath.mad``/``ibpath.rmpp``/
  ``ibpath.sa`` nodes (with the PathRecords of the whole answer) are the reassembled message.
  The top-level nodes are the segment's own fields (``mad``, ``rmpp``, ``sa``).
- RDMA netlink: Wireshark's netlink dissector hands every message of a record to the plugin,
  which adds ``ibpath.nl`` and the body node (``ibpath.ls_resolve_request`` ...) at top level,
  message after message. Inside a body, each ``ibpath.ls_attr`` node is followed by the node of
  its value (``ibpath.ls_sgid``, ``ibpath.pathdata`` ...).
- Blobs: the ``ibpath.blob`` node holds one ``ibpath.pathdata`` per record (each with its
  ``ibpath.pathrecord``) and ``ibpath.blob.trailing``.

Field names come from the layers through ``model.layout.build_layer`` (what the generator
uses), values are converted by the field's kind (integers, GIDs as canonical IPv6 text, bytes
as hex), and the derived parts of a record (method and attribute names, status text, component
names, flag names, error texts, the kernel view) use the same tables and functions as
decode.py. Cross-frame state is kept the way decode.py keeps it: ``rmpp.Reassembler`` decides
(by decode.py's key) when an RMPP transfer completes and records its problems (repeated and
out-of-range segments, transfers never completed, reported at the end as decode.py does), and
LS requests are remembered by sequence number for their responses' ``path_use``.

What does not come from the plugin:

- ``time``: ``frame.time_epoch`` (seconds and nanoseconds as text), turned into the float
  pcapio computes (ticks × resolution) with the resolution of the file: the pcap magic, or the
  pcapng interface's ``if_tsresol`` (pcapio.Interfaces: the file is read, lazily, only as far
  as the interface's IDB).
- ``src``/``dst``: ``ip.src``/``ip.dst`` or ``ipv6.src``/``ipv6.dst`` (RoCEv2); the LRH's
  SLID/DLID and the GRH's GIDs come from the plugin (native IB).
- MAD length (the "MAD is N bytes" error, truncated MADs): the length of ``udp.payload``
  (RoCEv2); for native IB the LRH's PktLen (ERF records: the plugin dissects only records whose
  length matches it) or the capture length less the exported-PDU tags, minus the fixed headers
  and trailers.
- ``set_option_result``: ``frame.comment`` (pcapng packet comment).
- Netlink: a helper postdissector (``data/engine_helper.lua``, a second ``-X lua_script``) adds
  the cooked header's ``pkttype`` (hence ``direction``), which Wireshark 4.0 shows in no
  field; copies the ``netlink.hdr_*`` fields of the messages Wireshark dissects itself
  (header-only and control messages, which it does not hand to the plugin; ``-J`` would drop
  them); and has the plugin read a RESOLVE answer to the kernel that carries NLM_F_REQUEST
  (which the plugin, following the flag, dissected as a request) once more as a response,
  as decode.py reads it. Offsets of messages and attributes (for the "runs past the end"
  errors, ``value_length`` and the kernel's nla_parse verdict) follow from ``nlmsg_len``,
  ``nla_len`` and ``frame.cap_len``.
- Raw blob files (not a capture): tshark cannot read them, so the file is wrapped into a
  one-frame pcapng as an exported PDU "ibpath.blob" (the layers build the framing) and the
  plugin dissects that; the record says ``encap: raw``, time 0.0, as decode.py's does.

Known differences. None changes a finding on the captures of captures/, the external captures
or the crafted captures of tests/test_tshark_engine.py:

- ``time`` of ERF records: tshark's is the ERF header's timestamp (nanoseconds), decode.py's
  the pcap record's (microseconds). They differ by less than a microsecond; the only rule that
  reads times (RES-LS-UNANSWERED) compares delays in milliseconds.
- ``value_hex`` of an LS attribute whose value the plugin does not show (unknown type, value
  shorter than its type's) is missing: the plugin shows no raw value bytes. No rule reads it.
- tshark 4.0 cannot read pcap files of LINKTYPE_INFINIBAND (247), which decode.py reads: the
  engine raises TsharkEngineError for them ("network type 247 unknown or unsupported").
- Framing that Wireshark and Scapy read differently, all of it malformed or unusual input:
  bytes after the IP datagram (an Ethernet FCS, padding) or an IP/UDP length shorter than the
  frame: decode.py counts them into the MAD ("MAD is 260 bytes; ...", "ICRC mismatch"),
  Wireshark stops at the datagram's length; an ERF record whose length disagrees with its
  LRH's PktLen and an exported PDU with a cut tag list do not reach the plugin; a netlink
  record whose cooked header is not ARPHRD_NETLINK, or whose nlmsg_len runs far past the
  record, is not dissected by Wireshark; frames Scapy cannot dissect at all are reported by
  decode.py ("cannot dissect: ..."). Such frames give no record here, or another malformed
  one.
- A PATH_RECORD attribute of exactly 8 value bytes (flags and reserved word, no PathRecord):
  decode.py takes it as a record whose PathRecord has Scapy's default field values; the plugin
  shows no record.
- Wireshark 4.0 starts the next netlink message of a record right after ``nlmsg_len`` bytes,
  the kernel and Scapy at NLMSG_ALIGN(nlmsg_len): a record holding several messages whose
  lengths are not multiples of 4 is split differently (the kernel and ibacm align them).
- The plugin shows at most 4096 items of a list (MAX_LIST_ITEMS, expert
  ``ibpath.list_capped``): of a reassembled answer of more than 4096 PathRecords only the first
  4096 are reported.
- The plugin reassembles RMPP by (network source, destination, class, TID), decode.py by
  (source, destination, TID, attribute, method); they differ only when one TID carries two
  concurrent transfers of different attributes or methods. Completion follows decode.py's key
  (rmpp.Reassembler); the records and ``reassembled_from`` come from the plugin's reassembly
  on that frame (no records when it did not complete a transfer there).
- The plugin checks the RoCEv2 ICRC of IPv4 headers without options and of IPv6 headers whose
  next header is UDP; decode.py checks it behind any IP header.
- The plugin hooks UDP port 4791 in either direction (Wireshark's port table), Scapy's binding
  only the destination port.

Every tshark run is checked: "Lua Error" and "dissector bug" in the output of any packet, a
Lua loading error on stderr, or a non-zero exit raise TsharkEngineError (tshark exits 0 when a
Lua script fails), after the records of the frames before.


The engine's modules: tshark_engine.process runs tshark and checks every run, tshark_engine.tree
reads its JSON protocol tree, tshark_engine.clock gives frame times as pcapio does, and
tshark_engine.builder turns a frame's nodes into records.
"""

from __future__ import annotations

from .builder import blob_from_records
from .process import (  # noqa: F401  (_FAILURE, _HELPER_LUA: tests check the run's checks)
    _FAILURE,
    _HELPER_LUA,
    TsharkEngineError,
    plugin_path,
    tshark_path,
    tshark_records,
)
from .tree import _LAYER_CACHE  # noqa: F401  (tests read the field model the engine built)

__all__ = ["TsharkEngineError", "tshark_records", "blob_from_records", "plugin_path",
           "tshark_path"]
