"""Oracle: Wireshark's built-in InfiniBand dissector (tshark) against the Scapy layers.

Each property test draws a list of packet specs with hypothesis and builds every packet with the
project's layers and encapsulation helpers. The packets are RoCEv2 over IPv4 and IPv6 (link
type 1), and native IB in ERF type-21 records (link type 197), all in ONE pcapng per example.
tshark runs once per capture. The test then compares, packet by packet, three things:
  spec (what was built)  ==  Scapy's dissection of the wire bytes  ==  tshark's field.
A mismatch message names the frame, the field and all three values. A "spec != scapy" mismatch
is a layer bug; a "scapy != tshark" mismatch (with spec == scapy) is a Wireshark bug.

Each property test first runs an explicit example (@example), a capture of edge-value specs.
They set each field to 0, to its maximum (all ones), to 0x55…/0xAA… bit patterns, and to its
maximum alone with every other field 0. The last kind catches overlapping bit masks.
Then it runs EXAMPLES generated examples (default 2, $IBPATH_ORACLE_EXAMPLES for soak runs).

Fields compared for equality: those tshark 4.0.17 decodes correctly, each checked against the
kernel layout (include/rdma/ib_mad.h, sa_query.c path_rec_table, ibta_vol1_c12.h):
  MAD header, RMPP (except the RRespTime/Flags byte), SA header, PathRecord record 0 (except
  ServiceID and QoSClass), CM REQ/REP/RTU/REJ/DREQ/DREP, BTH, DETH, LRH and GRH.
Known Wireshark errors are pinned by tests named test_pinned_*. Each asserts tshark's WRONG
value, computed by a formula from the raw bytes, so the test fails when Wireshark changes.
Sources: ../shared/reference/landscape.md A.3-A.6 and wire-formats.md §1-4.
"""

from __future__ import annotations

import ipaddress
import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from scapy.contrib.roce import BTH, GRH
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.capture.encap import erf_record, native_ib_frame, rocev2_frame
from ibpath_scapy.layers import (
    DETH, ERF, LRH, MAD, RMPP, CMDrep, CMDreq, CMMra, CMRej, CMRep, CMReq, CMRtu, PathRecord,
    SAHeader,
)
from ibpath_scapy.layers.coded import RawCode
from ibpath_scapy.capture.pcapio import PcapNgWriter, read_frames

from tshark_util import assert_clean, needs_tshark, run_pyshark, run_tshark, tshark_fields

pytestmark = needs_tshark

EXTERNAL = Path(__file__).resolve().parents[1].parent / "shared" / "captures" / "external"

LINKTYPE_ETHERNET = 1
LINKTYPE_ERF = 197
ENCAPS = ("rocev2-ipv4", "rocev2-ipv6", "ib-erf")

# Generated examples per property test, on top of the explicit edge-value example. Raise it
# for a longer soak run: IBPATH_ORACLE_EXAMPLES=50 pytest tests/test_tshark_oracle.py
# List sizes stay well under hypothesis' entropy budget per example (BUFFER_SIZE). Near that
# budget most draws overrun and generation slows from under a second to minutes. Measured
# limits for the specs here: about 60 transport or PathRecord specs, 70 CM REQ/MRA/REJ, 110
# RMPP/SA, 140 MAD headers.
EXAMPLES = int(os.environ.get("IBPATH_ORACLE_EXAMPLES", "2"))
ORACLE_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=False,
    # No shrinking: each step would rebuild a capture and rerun tshark. The assertion message
    # already names the frame, the field and the three values.
    phases=(Phase.explicit, Phase.generate),
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
)
PACKET_COUNTS: dict[str, int] = {}

# rxe (rxe_net.c prepare_udp_hdr) and rocev2_frame send UDP checksum 0, over IPv6 too
# (RFC 6935/6936 tunnel exemption). tshark's UDP dissector flags that as an Error unless this
# preference is set. The error is not about InfiniBand, so every oracle run sets it.
WS_ARGS = ["-o", "udp.ignore_ipv6_zero_checksum:TRUE"]


class Specs(list):
    """A list of packet specs whose repr stays short (hypothesis prints falsifying examples)."""

    def __repr__(self):
        kinds = sorted({s.get("encap", "?") for s in self if isinstance(s, dict)})
        return f"Specs({len(self)} packets, {', '.join(kinds)})"


def specs_of(strategy: st.SearchStrategy, min_size: int, max_size: int) -> st.SearchStrategy[Specs]:
    return st.lists(strategy, min_size=min_size, max_size=max_size).map(Specs)


BUILT_COUNTS: dict[str, int] = {}
# The oracle tests that count what they compare: test function -> PACKET_COUNTS key. When one of
# them has run, test_report_packet_counts requires its count, and every frame it built compared.
COUNTED = {
    "test_mad_header_matches_tshark": "mad_header",
    "test_pinned_reserved_mgmt_class_is_malformed_in_tshark": "pinned_reserved_class",
    "test_transport_headers_match_tshark": "transport",
    "test_rmpp_and_sa_header_match_tshark": "rmpp_sa",
    "test_pinned_rmpp_rresptime_and_flags_split_4_4": "pinned_rmpp_byte26",
    "test_pinned_rmpp_reserved_type_misplaces_sa_header": "pinned_rmpp_reserved_type",
    "test_path_record_matches_tshark": "path_record",
    "test_pinned_path_record_service_id_is_reserved_and_qos_class_missing":
        "pinned_path_record_sid_qos",
    "test_pinned_get_table_resp_shows_only_first_record": "pinned_get_table_resp",
    "test_cm_messages_match_tshark": "cm",
    "test_pinned_cm_req_flow_label_packet_rate_and_other_cm_errors": "pinned_cm",
}


def _count(test: str, frames: list, seen) -> None:
    """`test` built `frames` (frame numbers 1..len) and tshark returned the frame numbers
    `seen` (the keys of its rows or PDML packets): the packets compared are those of both."""
    BUILT_COUNTS[test] = BUILT_COUNTS.get(test, 0) + len(frames)
    compared = set(seen) & set(range(1, len(frames) + 1))
    PACKET_COUNTS[test] = PACKET_COUNTS.get(test, 0) + len(compared)


# ============================================================================================
# Field tables: (Scapy field, width in bits, tshark field or None, kind)
# kind: "int"; "gid" (128-bit GID, IPv6 text in Scapy and tshark); "gid_int" (a GID Scapy keeps as
# an int); "bytes" (octets, compared as bytes so that the length counts too).
# The widths follow the kernel tables, not the layer's fields_desc. Each table must add up to
# the size of its structure (test_field_tables_cover_the_wire_formats).
# ============================================================================================

MAD_TABLE = [
    ("base_version", 8, "infiniband.mad.baseversion", "int"),
    ("mgmt_class", 8, "infiniband.mad.mgmtclass", "int"),
    ("class_version", 8, "infiniband.mad.classversion", "int"),
    ("method", 8, "infiniband.mad.method", "int"),
    ("status", 16, "infiniband.mad.status", "int"),
    ("class_specific", 16, "infiniband.mad.classspecific", "int"),
    ("transaction_id", 64, "infiniband.mad.transactionid", "int"),
    ("attribute_id", 16, "infiniband.mad.attributeid", "int"),
    ("reserved_144", 16, None, "int"),
    ("attribute_modifier", 32, "infiniband.mad.attributemodifier", "int"),
]

# RMPP: rresptime/rmppflags are pinned (wrong 4/4 split); data1/data2 depend on the type.
RMPP_TABLE = [
    ("rmpp_version", 8, "infiniband.rmpp.rmppversion", "int"),
    ("rmpp_type", 8, "infiniband.rmpp.rmpptype", "int"),
    ("r_resp_time", 5, None, "int"),
    ("rmpp_flags", 3, None, "int"),
    ("rmpp_status", 8, "infiniband.rmpp.rmppstatus", "int"),
    ("segment_number", 32, None, "int"),
    ("payload_length", 32, None, "int"),
]
# tshark's names for RMPP Data1 / Data2 per RMPP type (IBA 13.6.2.1); STOP/ABORT: reserved.
RMPP_DATA_FIELDS = {
    0: ("infiniband.rmpp.data1", "infiniband.rmpp.data2"),
    1: ("infiniband.rmpp.segmentnumber", "infiniband.rmpp.payloadlength"),
    2: ("infiniband.rmpp.segmentnumber", "infiniband.rmpp.newwindowlast"),
    3: (None, None),
    4: (None, None),
}

SA_TABLE = [
    ("sm_key", 64, "infiniband.sa.smkey", "int"),
    ("attribute_offset", 16, "infiniband.sa.attributeoffset", "int"),
    ("reserved_80", 16, None, "int"),
    ("component_mask", 64, "infiniband.sa.componentmask", "int"),
]

PATH_RECORD_TABLE = [
    ("service_id", 64, None, "int"),  # pinned: tshark shows bytes 0-7 as "Reserved"
    ("dgid", 128, "infiniband.pathrecord.dgid", "gid"),
    ("sgid", 128, "infiniband.pathrecord.sgid", "gid"),
    ("dlid", 16, "infiniband.pathrecord.dlid", "int"),
    ("slid", 16, "infiniband.pathrecord.slid", "int"),
    ("raw_traffic", 1, "infiniband.pathrecord.rawtraffic", "int"),
    ("reserved_353", 3, None, "int"),
    ("flow_label", 20, "infiniband.pathrecord.flowlabel", "int"),
    ("hop_limit", 8, "infiniband.pathrecord.hoplimit", "int"),
    ("tclass", 8, "infiniband.pathrecord.tclass", "int"),
    ("reversible", 1, "infiniband.pathrecord.reversible", "int"),
    ("numb_path", 7, "infiniband.pathrecord.numbpath", "int"),
    ("pkey", 16, "infiniband.pathrecord.p_key", "int"),
    ("qos_class", 12, None, "int"),  # pinned: no tshark field
    ("sl", 4, "infiniband.pathrecord.sl", "int"),  # tshark: mask 0x000F on the 16-bit word
    ("mtu_selector", 2, "infiniband.pathrecord.mtuselector", "int"),
    ("mtu", 6, "infiniband.pathrecord.mtu", "int"),
    ("rate_selector", 2, "infiniband.pathrecord.rateselector", "int"),
    ("rate", 6, "infiniband.pathrecord.rate", "int"),
    ("packet_life_time_selector", 2, "infiniband.pathrecord.packetlifetimeselector", "int"),
    ("packet_life_time", 6, "infiniband.pathrecord.packetlifetime", "int"),
    ("preference", 8, "infiniband.pathrecord.preference", "int"),
    ("reserved_464", 48, None, "int"),
]


def _cm_path_table(prefix: str, ws: str, base: int, gids: bool = True) -> list:
    """Primary (REQ byte 52) or alternate (byte 96) path block, ibta_vol1_c12.h Table 106."""
    bit = base * 8
    gid_kind = "gid" if prefix == "primary" else "bytes"  # tshark: alt GIDs are FT_BYTES
    return [
        (f"{prefix}_local_lid", 16, f"infiniband.cm.req.{ws}_locallid", "int"),
        (f"{prefix}_remote_lid", 16, f"infiniband.cm.req.{ws}_remotelid", "int"),
        (f"{prefix}_local_gid", 128, f"infiniband.cm.req.{ws}_localgid", gid_kind),
        (f"{prefix}_remote_gid", 128, f"infiniband.cm.req.{ws}_remotegid", gid_kind),
        (f"{prefix}_flow_label", 20, None, "int"),  # pinned: tshark reads 12 bits at byte 88/132
        (f"reserved_{bit + 308}", 6, None, "int"),
        (f"{prefix}_packet_rate", 6, None, "int"),  # pinned: tshark reads byte 88/132
        (f"{prefix}_traffic_class", 8, f"infiniband.cm.req.{ws}_tfcclass", "int"),
        (f"{prefix}_hop_limit", 8, f"infiniband.cm.req.{ws}_hoplim", "int"),
        (f"{prefix}_sl", 4, f"infiniband.cm.req.{ws}_sl", "int"),
        (f"{prefix}_subnet_local", 1, f"infiniband.cm.req.{ws}_subnetlocal", "int"),
        (f"reserved_{bit + 341}", 3, None, "int"),
        (f"{prefix}_local_ack_timeout", 5, f"infiniband.cm.req.{ws}_localacktout", "int"),
        ("sap_supported" if prefix == "alternate" else f"reserved_{bit + 349}", 1, None, "int"),
        (f"reserved_{bit + 350}", 2, None, "int"),
    ]


CM_REQ_TABLE = [
    ("local_comm_id", 32, "infiniband.cm.req", "int"),
    ("reserved_32", 32, None, "int"),
    ("service_id", 64, "infiniband.cm.req.serviceid", "int"),
    ("local_ca_guid", 64, "infiniband.cm.req.localcaguid", "int"),
    ("reserved_192", 32, None, "int"),
    ("local_q_key", 32, "infiniband.cm.req.localqkey", "int"),
    ("local_qpn", 24, "infiniband.cm.req.localqpn", "int"),
    ("responder_resources", 8, "infiniband.cm.req.responderres", "int"),
    ("local_eecn", 24, "infiniband.cm.req.localeecn", "int"),
    ("initiator_depth", 8, "infiniband.cm.req.initdepth", "int"),
    ("remote_eecn", 24, "infiniband.cm.req.remoteeecn", "int"),
    ("remote_cm_response_timeout", 5, "infiniband.cm.req.remoteresptout", "int"),
    ("transport_service_type", 2, "infiniband.cm.req.transpsvctype", "int"),
    ("end_to_end_flow_control", 1, "infiniband.cm.req.e2eflowctrl", "int"),
    ("starting_psn", 24, "infiniband.cm.req.startpsn", "int"),
    ("local_cm_response_timeout", 5, "infiniband.cm.req.localresptout", "int"),
    ("retry_count", 3, "infiniband.cm.req.retrcount", "int"),
    ("pkey", 16, "infiniband.cm.req.pkey", "int"),
    ("path_packet_payload_mtu", 4, "infiniband.cm.req.pppmtu", "int"),
    ("rdc_exists", 1, "infiniband.cm.req.rdcexist", "int"),
    ("rnr_retry_count", 3, "infiniband.cm.req.rnrretrcount", "int"),
    ("max_cm_retries", 4, "infiniband.cm.req.maxcmretr", "int"),
    ("srq", 1, "infiniband.cm.req.srq", "int"),
    ("extended_transport_type", 3, "infiniband.cm.req.ext_transport", "int"),
    *_cm_path_table("primary", "prim", 52),
    *_cm_path_table("alternate", "alt", 96),
    ("private_data", 92 * 8, "infiniband.cm.req.private", "bytes"),
]
CM_REP_TABLE = [
    ("local_comm_id", 32, "infiniband.cm.rep", "int"),
    ("remote_comm_id", 32, "infiniband.cm.rep.remotecommid", "int"),
    ("local_q_key", 32, "infiniband.cm.rep.localqkey", "int"),
    ("local_qpn", 24, "infiniband.cm.rep.localqpn", "int"),
    ("reserved_120", 8, None, "int"),
    ("local_ee_context_number", 24, "infiniband.cm.rep.localeecn", "int"),
    ("reserved_152", 8, None, "int"),
    ("starting_psn", 24, "infiniband.cm.rep.startpsn", "int"),
    ("reserved_184", 8, None, "int"),
    ("responder_resources", 8, "infiniband.cm.rep.respres", "int"),
    ("initiator_depth", 8, "infiniband.cm.rep.initdepth", "int"),
    ("target_ack_delay", 5, "infiniband.cm.rep.tgtackdelay", "int"),
    ("failover_accepted", 2, "infiniband.cm.rep.failoveracc", "int"),
    ("end_to_end_flow_control", 1, "infiniband.cm.rep.e2eflowctrl", "int"),
    ("rnr_retry_count", 3, "infiniband.cm.rep.rnrretrcount", "int"),
    ("srq", 1, "infiniband.cm.rep.srq", "int"),
    ("reserved_220", 4, "infiniband.cm.rep.reserved", "int"),
    ("local_ca_guid", 64, "infiniband.cm.rep.localcaguid", "int"),
    ("private_data", 196 * 8, "infiniband.cm.rep.private", "bytes"),
]
CM_RTU_TABLE = [
    ("local_comm_id", 32, "infiniband.cm.rtu.localcommid", "int"),
    ("remote_comm_id", 32, "infiniband.cm.rtu.remotecommid", "int"),
    ("private_data", 224 * 8, "infiniband.cm.rtu.private", "bytes"),
]
CM_REJ_TABLE = [
    ("local_comm_id", 32, "infiniband.cm.rej.localcommid", "int"),
    ("remote_comm_id", 32, "infiniband.cm.rej.remotecommid", "int"),
    ("message_rejected", 2, "infiniband.cm.rej.msgrej", "int"),
    ("reserved_66", 6, None, "int"),  # pinned: tshark's reserved0 has mask 0x03
    ("reject_info_length", 7, "infiniband.cm.rej.rejinfolen", "int"),
    ("reserved_79", 1, "infiniband.cm.rej.reserved1", "int"),
    ("reason", 16, "infiniband.cm.rej.reason", "int"),
    ("ari", 72 * 8, "infiniband.cm.rej.ari", "bytes"),
    ("private_data", 148 * 8, "infiniband.cm.rej.private", "bytes"),
]
CM_DREQ_TABLE = [
    ("local_comm_id", 32, "infiniband.cm.dreq.localcommid", "int"),
    ("remote_comm_id", 32, "infiniband.cm.dreq.remotecommid", "int"),
    # Wireshark registers DREQ's Remote QPN/EECN under the REQ prefix.
    ("remote_qpn_eecn", 24, "infiniband.cm.req.remoteqpneecn", "int"),
    ("reserved_88", 8, None, "int"),
    ("private_data", 220 * 8, "infiniband.cm.dreq.private", "bytes"),
]
CM_DREP_TABLE = [
    ("local_comm_id", 32, "infiniband.cm.drsp.localcommid", "int"),
    ("remote_comm_id", 32, "infiniband.cm.drsp.remotecommid", "int"),
    ("private_data", 224 * 8, "infiniband.cm.drsp.private", "bytes"),
]
CM_MRA_TABLE = [
    ("local_comm_id", 32, None, "int"),
    ("remote_comm_id", 32, None, "int"),
    ("message_mraed", 2, None, "int"),
    ("reserved_66", 6, None, "int"),
    ("service_timeout", 5, None, "int"),
    ("reserved_77", 3, None, "int"),
    ("private_data", 222 * 8, None, "bytes"),
]
# attribute id → (layer, table); CM data area = 232 bytes (MAD bytes 24-255).
CM_MESSAGES = {
    0x0010: (CMReq, CM_REQ_TABLE),
    0x0011: (CMMra, CM_MRA_TABLE),
    0x0012: (CMRej, CM_REJ_TABLE),
    0x0013: (CMRep, CM_REP_TABLE),
    0x0014: (CMRtu, CM_RTU_TABLE),
    0x0015: (CMDreq, CM_DREQ_TABLE),
    0x0016: (CMDrep, CM_DREP_TABLE),
}

BTH_TABLE = [
    ("opcode", 8, "infiniband.bth.opcode", "int"),
    ("solicited", 1, "infiniband.bth.se", "int"),
    ("migreq", 1, "infiniband.bth.m", "int"),
    ("padcount", 2, "infiniband.bth.padcnt", "int"),
    ("version", 4, "infiniband.bth.tver", "int"),
    ("pkey", 16, "infiniband.bth.p_key", "int"),
    ("fecn", 1, None, "int"),  # byte 4 is one "Reserved" item in tshark, checked as a byte
    ("becn", 1, None, "int"),
    ("resv6", 6, None, "int"),
    ("dqpn", 24, "infiniband.bth.destqp", "int"),
    ("ackreq", 1, "infiniband.bth.a", "int"),
    ("resv7", 7, "infiniband.bth.reserved7", "int"),
    ("psn", 24, "infiniband.bth.psn", "int"),
]
DETH_TABLE = [
    ("q_key", 32, "infiniband.deth.q_key", "int"),
    ("reserved_32", 8, None, "int"),
    ("src_qp", 24, "infiniband.deth.srcqp", "int"),
]
LRH_TABLE = [
    ("vl", 4, "infiniband.lrh.vl", "int"),
    ("lver", 4, "infiniband.lrh.lver", "int"),
    ("sl", 4, "infiniband.lrh.sl", "int"),
    ("reserved_10", 2, "infiniband.lrh.reserved2", "int"),
    ("lnh", 2, "infiniband.lrh.lnh", "int"),
    ("dlid", 16, "infiniband.lrh.dlid", "int"),
    ("reserved_32", 5, "infiniband.lrh.reserved5", "int"),
    ("pkt_len", 11, "infiniband.lrh.pktlen", "int"),
    ("slid", 16, "infiniband.lrh.slid", "int"),
]

# scapy.contrib.roce GRH (native IB global route, LRH LNH=3); its GIDs are 128-bit ints.
GRH_TABLE = [
    ("ipver", 4, "infiniband.grh.ipver", "int"),
    ("tclass", 8, "infiniband.grh.tclass", "int"),
    ("flowlabel", 20, "infiniband.grh.flowlabel", "int"),
    ("paylen", 16, "infiniband.grh.paylen", "int"),
    ("nexthdr", 8, "infiniband.grh.nxthdr", "int"),
    ("hoplmt", 8, "infiniband.grh.hoplmt", "int"),
    ("sgid", 128, "infiniband.grh.sgid", "gid_int"),
    ("dgid", 128, "infiniband.grh.dgid", "gid_int"),
]

# Management classes tshark dissects without an exception; the others are pinned.
TSHARK_CLEAN_CLASSES = [0x01, 0x81, *range(0x03, 0x50)]
TSHARK_RESERVED_CLASSES = [c for c in range(256) if c not in TSHARK_CLEAN_CLASSES]
SA_METHODS = [0x01, 0x02, 0x06, 0x12, 0x13, 0x14, 0x15, 0x81, 0x86, 0x92, 0x94, 0x95]
SA_ATTRIBUTES = [0x0001, 0x0002, 0x0003, 0x0011, 0x0012, 0x0013, 0x0014, 0x0015, 0x0016, 0x0017,
                 0x0018, 0x0019, 0x0020, 0x0030, 0x0031, 0x0033, 0x0035, 0x0036, 0x0038, 0x0039,
                 0x003A, 0x003B, 0x00F3]


# ============================================================================================
# Strategies and edge-value specs
# ============================================================================================

def _mask(bits: int) -> int:
    return (1 << bits) - 1


def uint(bits: int) -> st.SearchStrategy[int]:
    return st.integers(0, _mask(bits))


def _fill(mode: str, seed: int, nbytes: int) -> int:
    if mode == "zero":
        return 0
    if mode == "ones":
        return _mask(8 * nbytes)
    return int.from_bytes(random.Random(seed).randbytes(nbytes), "big")


def blob(nbytes: int) -> st.SearchStrategy[int]:
    """Opaque octets (private data, ARI): all 0x00, all 0xFF or seeded random, as an int."""
    return st.builds(_fill, st.sampled_from(["zero", "ones", "random"]), uint(32), st.just(nbytes))


def gid() -> st.SearchStrategy[int]:
    return st.one_of(
        uint(128),
        st.builds(lambda iid: (0xFE80 << 112) | iid, uint(64)),  # link-local
        st.builds(lambda v4: (0xFFFF << 32) | v4, uint(32)),  # IPv4-mapped (RoCEv2)
    )


def _is_gid(name: str, bits: int) -> bool:
    """A 128-bit GID (Scapy GIDField, IPv6 text), whatever type tshark gives it."""
    return bits == 128 and name.endswith("gid")


def table_strategy(table, **overrides) -> st.SearchStrategy[dict]:
    strategies = {}
    for name, bits, _ws, kind in table:
        if name in overrides:
            strategies[name] = overrides[name]
        elif _is_gid(name, bits):
            strategies[name] = gid()
        elif kind == "bytes":
            strategies[name] = blob(bits // 8)
        else:
            strategies[name] = uint(bits)
    return st.fixed_dictionaries(strategies)


def edge_specs(table, **fixed) -> list[dict]:
    """All 0; all ones; 0x55.. and 0xAA.. patterns; then each field at max with the others 0."""
    def pattern(byte: int, bits: int) -> int:
        return int.from_bytes(bytes([byte]) * ((bits + 7) // 8), "big") & _mask(bits)

    specs = [{n: pattern(b, bits) for n, bits, _w, _k in table} for b in (0x00, 0xFF, 0x55, 0xAA)]
    for name, *_ in table:
        specs.append({n: (_mask(bits) if n == name else 0) for n, bits, _w, _k in table})
    for s in specs:
        for k, v in fixed.items():
            s[k] = v(s) if callable(v) else v
    return specs


def scapy_kwargs(table, spec: dict) -> dict:
    """Scapy field values for a spec: GIDs as IPv6 text, octet strings as bytes."""
    out = {}
    for name, bits, _ws, kind in table:
        if name not in spec or spec[name] is None:
            continue
        v = spec[name]
        if _is_gid(name, bits) and kind != "gid_int":
            out[name] = str(ipaddress.IPv6Address(v))
        elif kind == "bytes":
            out[name] = v.to_bytes(bits // 8, "big")
        else:
            out[name] = RawCode(v)  # any value of its width, an IBA code or not
    return out


# ============================================================================================
# Building packets and captures
# ============================================================================================

@dataclass
class Built:
    linktype: int
    data: bytes  # the capture record (Ethernet frame or ERF record)
    spec: dict

    @property
    def mad(self) -> bytes:
        """The MAD as it sits on the wire: before the ICRC (RoCEv2) or ICRC+VCRC (native IB)."""
        return self.data[-260:-4] if self.linktype == LINKTYPE_ETHERNET else self.data[-262:-6]


def encapsulate(mad: Packet, encap: str, n: int, **transport) -> Built:
    """One MAD in the given encapsulation, built by the project's helpers."""
    if encap == "rocev2-ipv4":
        data = bytes(rocev2_frame(mad, src="192.0.2.1", dst="192.0.2.2", **transport))
        linktype = LINKTYPE_ETHERNET
    elif encap == "rocev2-ipv6":
        data = bytes(rocev2_frame(mad, src="fe80::2:c903:0:1", dst="fe80::2:c903:0:2", **transport))
        linktype = LINKTYPE_ETHERNET
    else:
        ib = native_ib_frame(mad, slid=0x0001 + n % 0xBFFE, dlid=0x0002 + n % 0xBFFD, **transport)
        data = erf_record(ib, 1_700_000_000 + n)
        linktype = LINKTYPE_ERF
    built = Built(linktype, data, {})
    assert built.mad == bytes(mad), f"{encap}: the frame does not carry the MAD as built"
    return built


def write_capture(path: Path, frames: list[Built]) -> Path:
    with PcapNgWriter(str(path)) as w:
        for i, f in enumerate(frames):
            w.write(f.data, f.linktype, ts=1_700_000_000 + i * 1e-3)
    return path


def dissect(b: Built) -> Packet:
    return Ether(b.data) if b.linktype == LINKTYPE_ETHERNET else ERF(b.data)


@pytest.fixture(scope="module")
def capdir(tmp_path_factory):
    return tmp_path_factory.mktemp("oracle")


_seq = [0]


def new_capture(capdir: Path, name: str) -> Path:
    _seq[0] += 1
    return capdir / f"{name}-{_seq[0]}.pcapng"


# ============================================================================================
# Reading values back and comparing
# ============================================================================================

def ws_int(s: str) -> int:
    return int(s, 16) if s.lower().startswith("0x") else int(s)


def ws_parse(s: str, kind: str):
    """A tshark value as an int; "bytes" as bytes (so that the length is compared too)."""
    if kind in ("gid", "gid_int"):
        return int(ipaddress.IPv6Address(s))
    if kind == "bytes":
        return bytes.fromhex(s.replace(":", ""))
    if kind == "ipv4":
        return int(ipaddress.IPv4Address(s))
    return ws_int(s)


def scapy_value(layer: Packet, name: str, kind: str):
    """A Scapy field value in the form ws_parse gives for the same kind."""
    v = layer.getfieldval(name)
    if isinstance(v, str):  # GIDField
        addr = ipaddress.IPv6Address(v)
        return addr.packed if kind == "bytes" else int(addr)
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    return int(v)


def spec_value(v: int | None, bits: int, kind: str):
    """A spec value (always an int) in the form ws_parse gives for the kind."""
    return v.to_bytes(bits // 8, "big") if kind == "bytes" and v is not None else v


class FieldsFrame:
    """tshark -T fields row of one frame."""

    def __init__(self, row: dict[str, list[str]] | None):
        self.row = row or {}

    def values(self, name: str, kind: str = "int") -> list[int]:
        return [ws_parse(v, kind) for v in self.row.get(name, [])]

    def raw(self, name: str) -> list[str]:
        return self.row.get(name, [])


class PdmlFrame:
    """pyshark packet (PDML) of one frame, InfiniBand layer."""

    def __init__(self, pkt):
        self.pkt = pkt
        self.layer = next((lay for lay in pkt.layers if lay.layer_name == "infiniband"), None)

    def fields(self, name: str) -> list:
        if self.layer is None:
            return []
        c = self.layer.get_field(name)
        return list(c.all_fields) if c is not None else []

    def values(self, name: str, kind: str = "int") -> list[int]:
        out = []
        for f in self.fields(name):
            text = f.raw_value if kind == "bytes" else f.show
            out.append(ws_parse(text, kind))
        return out


class Mismatches:
    def __init__(self, title: str):
        self.title = title
        self.items: list[str] = []
        self.checked = 0

    def check(self, frame: int, what: str, spec, scapy, ws=None, *, ws_name: str | None = None):
        """spec (what was built) == Scapy's decode [== tshark's value when ws_name is given]."""
        self.checked += 1
        if spec is not None and spec != scapy:
            self.items.append(f"frame {frame} {what}: LAYER decode {_fmt(scapy)} != built {_fmt(spec)}")
        if ws_name is not None and ws != [scapy]:
            self.items.append(f"frame {frame} {what}: tshark {ws_name}={_fmt(ws)} != Scapy {_fmt(scapy)}"
                              f" (built {_fmt(spec)})")

    def expect(self, frame: int, what: str, got, want):
        self.checked += 1
        if got != want:
            self.items.append(f"frame {frame} {what}: got {_fmt(got)}, expected {_fmt(want)}")

    def assert_none(self, require: bool = True):
        if self.items:
            shown = self.items[:40]
            more = f"\n... and {len(self.items) - 40} more" if len(self.items) > 40 else ""
            raise AssertionError(f"{self.title}: {len(self.items)} mismatch(es) in {self.checked} checks:\n"
                                 + "\n".join(shown) + more)
        if require and not self.checked:
            raise AssertionError(f"{self.title}: nothing was compared")


def _fmt(v):
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt(x) for x in v) + ")"
    if isinstance(v, (bytes, bytearray)):
        return v.hex() if len(v) <= 24 else f"{v[:24].hex()}…({len(v)} bytes)"
    return hex(v) if isinstance(v, int) and not isinstance(v, bool) else repr(v)


def compare_table(m: Mismatches, frame: int, label: str, table, spec: dict | None, layer: Packet,
                  ws, *, skip_ws: set[str] = frozenset()):
    """spec None: compare Scapy with tshark only."""
    for name, _bits, ws_name, kind in table:
        if spec is not None and name not in spec:
            continue
        want = spec_value(spec[name], _bits, kind) if spec is not None else None
        got = scapy_value(layer, name, kind)
        if ws_name is None or ws_name in skip_ws:
            m.check(frame, f"{label}.{name}", want, got)
        else:
            m.check(frame, f"{label}.{name}", want, got, ws.values(ws_name, kind), ws_name=ws_name)


def _pdml_by_frame(run) -> dict[int, PdmlFrame]:
    return {int(p.number): PdmlFrame(p) for p in run.packets}


def _fields_of(table) -> list[str]:
    return [ws for _n, _b, ws, _k in table if ws]


# ============================================================================================
# 0. The helper itself: tshark exits 0 when Lua fails, assert_clean does not.
# ============================================================================================

def test_assert_clean_catches_lua_failures_that_exit_0(capdir):
    """tshark exits 0 when a Lua script fails to load or raises while dissecting, and when a
    packet is malformed. assert_clean must fail on each case, and pass on a clean run."""
    cap = write_capture(new_capture(capdir, "lua"), [
        encapsulate(MAD(method=0x81) / RMPP() / SAHeader(records=[PathRecord(dlid=7)]), "rocev2-ipv4", 0)])
    load_error = capdir / "load_error.lua"
    load_error.write_text('error("oracle: fails while loading")\n')
    dissect_error = capdir / "dissect_error.lua"
    dissect_error.write_text(
        'local p = Proto("oracle_fail", "fails while dissecting")\n'
        'function p.dissector(tvb, pinfo, tree) error("oracle: fails while dissecting") end\n'
        'register_postdissector(p)\n')

    clean = run_tshark(cap, [*WS_ARGS, "-V"])
    assert clean.returncode == 0
    assert_clean(clean.stdout, clean.stderr)

    for script, args in ((load_error, ["-V"]), (dissect_error, ["-V"]), (dissect_error, ["-T", "pdml"])):
        run = run_tshark(cap, [*WS_ARGS, "-X", f"lua_script:{script}", *args])
        assert run.returncode == 0, "tshark now fails on Lua errors; update tshark_util's docstring"
        with pytest.raises(AssertionError, match="Lua"):
            assert_clean(run.stdout, run.stderr)

    run = run_pyshark(cap, extra_args=[*WS_ARGS, "-X", f"lua_script:{dissect_error}"])
    assert len(run.packets) == 1
    with pytest.raises(AssertionError, match="Lua Error"):
        assert_clean(run.stdout, run.stderr)

    malformed = tshark_fields(write_capture(new_capture(capdir, "malformed"), [
        encapsulate(MAD(mgmt_class=0x60), "rocev2-ipv4", 0)]), ["infiniband.mad.mgmtclass"],
        extra_args=WS_ARGS)[0]
    assert malformed.returncode == 0
    with pytest.raises(AssertionError, match="malformed"):
        assert_clean(malformed.stdout, malformed.stderr)


def test_field_tables_cover_the_wire_formats():
    """Each table is the full structure: the widths add up (kernel layouts, not the layer's)."""
    assert sum(b for _n, b, _w, _k in MAD_TABLE) == 24 * 8
    assert sum(b for _n, b, _w, _k in RMPP_TABLE) == 12 * 8
    assert sum(b for _n, b, _w, _k in SA_TABLE) == 20 * 8
    assert sum(b for _n, b, _w, _k in PATH_RECORD_TABLE) == 64 * 8
    for attr, (_cls, table) in CM_MESSAGES.items():
        assert sum(b for _n, b, _w, _k in table) == 232 * 8, hex(attr)
    assert sum(b for _n, b, _w, _k in BTH_TABLE) == 12 * 8
    assert sum(b for _n, b, _w, _k in DETH_TABLE) == 8 * 8
    assert sum(b for _n, b, _w, _k in LRH_TABLE) == 8 * 8
    assert sum(b for _n, b, _w, _k in GRH_TABLE) == 40 * 8


# ============================================================================================
# 1. MAD common header (pyshark)
# ============================================================================================

MAD_HEADER_SPEC = st.fixed_dictionaries({
    "hdr": table_strategy(MAD_TABLE, mgmt_class=st.sampled_from(TSHARK_CLEAN_CLASSES)),
    "data": blob(232),
    "encap": st.sampled_from(ENCAPS),
})
MAD_HEADER_EDGES = [
    {"hdr": {**h, "mgmt_class": TSHARK_CLEAN_CLASSES[(i * 7) % len(TSHARK_CLEAN_CLASSES)]},
     "data": _fill(("zero", "ones", "random")[i % 3], i, 232), "encap": ENCAPS[i % 3]}
    for i, h in enumerate(edge_specs(MAD_TABLE))
] + [  # every class tshark dissects cleanly, once
    {"hdr": {**edge_specs(MAD_TABLE)[2], "mgmt_class": c}, "data": _fill("random", c, 232),
     "encap": ENCAPS[c % 3]}
    for c in TSHARK_CLEAN_CLASSES
]


def _mad_packet(hdr: dict, data: int) -> Packet:
    return MAD(**scapy_kwargs(MAD_TABLE, hdr)) / Raw(data.to_bytes(232, "big"))


@ORACLE_SETTINGS
@example(specs=Specs(MAD_HEADER_EDGES))
@given(specs=specs_of(MAD_HEADER_SPEC, 50, 60))
def test_mad_header_matches_tshark(capdir, specs):
    frames = []
    for i, s in enumerate(specs):
        b = encapsulate(_mad_packet(s["hdr"], s["data"]), s["encap"], i)
        b.spec = s
        frames.append(b)
    cap = write_capture(new_capture(capdir, "mad"), frames)
    run = run_pyshark(cap, extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    ws_frames = _pdml_by_frame(run)
    _count("mad_header", frames, ws_frames)

    m = Mismatches("MAD header: spec / Scapy / tshark (pyshark)")
    for n, b in enumerate(frames, start=1):
        pkt = dissect(b)
        mad = pkt.getlayer(MAD)
        ws = ws_frames.get(n)
        if mad is None or ws is None or ws.layer is None:
            m.expect(n, "MAD decoded by both", (mad is not None, ws is not None and ws.layer is not None),
                     (True, True))
            continue
        compare_table(m, n, "mad", MAD_TABLE, b.spec["hdr"], mad, ws)
        # tshark's 232 data bytes are the wire's, and so are the bytes Scapy dissected and rebuilds.
        m.expect(n, "infiniband.mad.data", ws.values("infiniband.mad.data", "bytes"), [b.mad[24:]])
        m.expect(n, "Scapy MAD dissected from / rebuilt to the wire bytes",
                 (mad.original[:256], bytes(mad)[:256]), (b.mad, b.mad))
    m.assert_none()


# Wireshark bug: a MAD of a reserved management class is reported as a malformed packet.
@ORACLE_SETTINGS
@example(specs=Specs([{"hdr": {**h, "mgmt_class": c}, "encap": ENCAPS[c % 3]}
                for c, h in zip(TSHARK_RESERVED_CLASSES, edge_specs(MAD_TABLE) * 13)]))
@given(specs=specs_of(st.fixed_dictionaries({
    "hdr": table_strategy(MAD_TABLE, mgmt_class=st.sampled_from(TSHARK_RESERVED_CLASSES)),
    "encap": st.sampled_from(ENCAPS)}), 40, 60))
def test_pinned_reserved_mgmt_class_is_malformed_in_tshark(capdir, specs):
    """Classes 0x00, 0x02, 0x50-0x80 and 0x82-0xFF are IBA-reserved, but the MAD is complete.
    tshark 4.0.17 still decodes the common header right. It then throws: "[Malformed Packet: IB]",
    expert "Malformed Packet (Exception occurred)", and no ICRC item. The 256-byte MAD is fine."""
    frames = []
    for i, s in enumerate(specs):
        b = encapsulate(MAD(**scapy_kwargs(MAD_TABLE, s["hdr"])), s["encap"], i)
        b.spec = s
        frames.append(b)
    cap = write_capture(new_capture(capdir, "reserved-class"), frames)
    fields = _fields_of(MAD_TABLE) + ["infiniband.invariant.crc"]
    run, rows = tshark_fields(cap, fields, extra_args=WS_ARGS)
    _count("pinned_reserved_class", frames, rows)
    # The malformed packets are the pinned behaviour; everything else must be clean.
    pinned = {n for n, r in rows.items() if r.get("_ws.malformed")}
    lines = run.stdout.splitlines()
    assert_clean("\n".join([lines[0]] + [ln for ln in lines[1:] if int(ln.split("\t", 1)[0]) not in pinned]),
                 run.stderr)

    m = Mismatches("pinned: reserved management class")
    for n, b in enumerate(frames, start=1):
        row = rows.get(n, {})
        ws = FieldsFrame(row)
        compare_table(m, n, "mad", MAD_TABLE, b.spec["hdr"], dissect(b)[MAD], ws)
        m.expect(n, "tshark _ws.malformed (pinned Wireshark bug)", bool(row.get("_ws.malformed")), True)
        m.expect(n, "tshark expert message", row.get("_ws.expert.message"),
                 ["Malformed Packet (Exception occurred)"])
        m.expect(n, "tshark shows no ICRC after the exception", row.get("infiniband.invariant.crc"), [])
    m.assert_none()


# ============================================================================================
# 2. Transport: BTH, DETH (RoCEv2 and native IB) and LRH (native IB)
# ============================================================================================

TRANSPORT_ENCAPS = (*ENCAPS, "ib-erf-grh")
TRANSPORT_SPEC = st.fixed_dictionaries({
    "encap": st.sampled_from(TRANSPORT_ENCAPS),
    "bth": table_strategy(BTH_TABLE, opcode=st.just(0x64)),
    "deth": table_strategy(DETH_TABLE),
    "lrh": table_strategy(LRH_TABLE, lnh=st.just(2), pkt_len=st.just(None)),
    "grh": table_strategy(GRH_TABLE, nexthdr=st.just(0x1B)),  # NxtHdr 0x1B: BTH follows
    # A datagram is a MAD for tshark (and our DETH) when DestQP or SrcQP is 0 or 1.
    "gmp_dst": st.booleans(),
    "gmp_qp": st.sampled_from([0, 1]),
    "tid": uint(64),
})


def _transport_edges() -> list[dict]:
    bths = edge_specs(BTH_TABLE, opcode=0x64)
    deths = edge_specs(DETH_TABLE)
    lrhs = edge_specs(LRH_TABLE, lnh=2, pkt_len=None)
    grhs = edge_specs(GRH_TABLE, nexthdr=0x1B)
    n = max(len(bths), len(deths), len(lrhs), len(grhs))
    return [{"encap": TRANSPORT_ENCAPS[i % 4], "bth": bths[i % len(bths)], "deth": deths[i % len(deths)],
             "lrh": lrhs[i % len(lrhs)], "grh": grhs[(i // 4) % len(grhs)], "gmp_dst": bool(i % 2),
             "gmp_qp": (i // 2) % 2, "tid": i}
            for i in range(3 * n)]


def _transport_frame(s: dict, n: int) -> Built:
    bth, deth = dict(s["bth"]), dict(s["deth"])
    if s["gmp_dst"]:
        bth["dqpn"] = s["gmp_qp"]
    else:
        deth["src_qp"] = s["gmp_qp"]
    s["bth_eff"], s["deth_eff"] = bth, deth
    mad = MAD(method=0x81, transaction_id=s["tid"]) / RMPP() / SAHeader(records=[PathRecord(dlid=n)])
    if s["encap"].startswith("rocev2"):
        b = encapsulate(mad, s["encap"], n, dqpn=bth["dqpn"], sqpn=deth["src_qp"], psn=bth["psn"],
                        pkey=bth["pkey"], qkey=deth["q_key"])
        # rocev2_frame sets the usual BTH/DETH values; put the drawn ones in every bit.
        pkt = dissect(b)
        for k, v in scapy_kwargs(BTH_TABLE, bth).items():
            pkt[BTH].setfieldval(k, v)
        pkt[BTH].icrc = None
        pkt[DETH].reserved_32 = deth["reserved_32"]
        b.data = bytes(pkt)
    else:
        lrh = {k: v for k, v in s["lrh"].items() if k != "pkt_len"}
        grh = []
        if s["encap"] == "ib-erf-grh":
            lrh["lnh"] = 3  # IBA global: GRH follows the LRH
            grh = [GRH(**scapy_kwargs(GRH_TABLE, s["grh"]))]
        s["lrh_eff"] = lrh
        frame = LRH(**scapy_kwargs(LRH_TABLE, lrh))
        for layer in (*grh, BTH(**scapy_kwargs(BTH_TABLE, bth)), DETH(**scapy_kwargs(DETH_TABLE, deth)), mad):
            frame = frame / layer
        b = Built(LINKTYPE_ERF, erf_record(bytes(frame), 1_700_000_000 + n), {})
    assert b.mad == bytes(mad)
    b.spec = s
    return b


@ORACLE_SETTINGS
@example(specs=Specs(_transport_edges()))
@given(specs=specs_of(TRANSPORT_SPEC, 35, 45))
def test_transport_headers_match_tshark(capdir, specs):
    frames = [_transport_frame(s, i) for i, s in enumerate(specs)]
    cap = write_capture(new_capture(capdir, "transport"), frames)
    fields = (_fields_of(BTH_TABLE) + _fields_of(DETH_TABLE) + _fields_of(LRH_TABLE) + _fields_of(GRH_TABLE)
              + ["infiniband.reserved", "infiniband.mad.transactionid", "infiniband.pathrecord.dlid"])
    run, rows = tshark_fields(cap, fields, extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    _count("transport", frames, rows)

    m = Mismatches("BTH/DETH/LRH/GRH: spec / Scapy / tshark")
    for n, b in enumerate(frames, start=1):
        s, pkt, ws = b.spec, dissect(b), FieldsFrame(rows.get(n))
        compare_table(m, n, "bth", BTH_TABLE, s["bth_eff"], pkt[BTH], ws)
        compare_table(m, n, "deth", DETH_TABLE, s["deth_eff"], pkt[DETH], ws)
        byte4 = (s["bth_eff"]["fecn"] << 7) | (s["bth_eff"]["becn"] << 6) | s["bth_eff"]["resv6"]
        # tshark: BTH byte 4 (FECN/BECN/Resv6a) is one "Reserved" byte, DETH byte 4 another.
        m.expect(n, "infiniband.reserved[0:2] = BTH byte 4, DETH byte 4",
                 ws.values("infiniband.reserved", "bytes")[:2],
                 [bytes([byte4]), bytes([s["deth_eff"]["reserved_32"]])])
        if b.linktype == LINKTYPE_ERF:
            lrh_spec = dict(s["lrh_eff"])
            lrh_spec["pkt_len"] = (len(b.data) - 16 - 2) // 4  # LRH..ICRC in 4-byte words
            compare_table(m, n, "lrh", LRH_TABLE, lrh_spec, pkt[LRH], ws)
        else:
            m.expect(n, "no LRH on RoCEv2", ws.raw("infiniband.lrh.dlid"), [])
        if s["encap"] == "ib-erf-grh":
            compare_table(m, n, "grh", GRH_TABLE, s["grh"], pkt[GRH], ws)
        else:
            m.expect(n, "no GRH", ws.raw("infiniband.grh.sgid"), [])
        mad = pkt.getlayer(MAD)
        m.expect(n, "MAD found behind the transport (tshark, Scapy)",
                 (ws.values("infiniband.mad.transactionid"), mad.transaction_id if mad else None),
                 ([s["tid"]], s["tid"]))
    m.assert_none()


def test_native_ib_grh_built_with_defaults_has_iba_paylen_and_next_header(capdir):
    """LAYER BUG (fails until fixed): `LRH(lnh=3)/GRH(...)/BTH()/DETH()/MAD()` gets GRH PayLen 0
    and NxtHdr 0 on the wire. tshark reads those bytes correctly, and Scapy's dissection agrees
    with it. The kernel builds the same UD datagram (drivers/infiniband/core/ud_header.c,
    ib_ud_header_init) with PayLen = (BTH + DETH + payload + ICRC + 3) & ~3 (280 for a MAD) and
    NxtHdr 0x1B (IBA transport). The LRH's PktLen and ICRC are computed, but the GRH that
    ib.py binds for LNH=3 is scapy.contrib.roce.GRH, whose paylen/nexthdr default to 0.
    Fix: in ibpath_scapy/layers/ib.py, bind LRH (lnh=3) to a GRH subclass with paylen=None and
    nexthdr=0x1B defaults. Its post_build fills PayLen as (len(pay) + 3) & ~3 when None. The
    payload already holds BTH..ICRC; the VCRC belongs to the LRH."""
    frames = []
    for i in range(3):
        mad = MAD(method=0x81, transaction_id=i) / RMPP() / SAHeader(records=[PathRecord(dlid=i)])
        pkt = (LRH(lnh=3, dlid=2, slid=1) / GRH(sgid=int(ipaddress.IPv6Address("fe80::1")),
                                                dgid=int(ipaddress.IPv6Address("fe80::2")))
               / BTH(opcode=0x64, dqpn=1) / DETH() / mad)
        frames.append(Built(LINKTYPE_ERF, erf_record(bytes(pkt), 1_700_000_000 + i), {}))
    cap = write_capture(new_capture(capdir, "grh-defaults"), frames)
    run, rows = tshark_fields(cap, _fields_of(GRH_TABLE) + ["infiniband.mad.transactionid"],
                              extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)

    m = Mismatches("LRH/GRH built with defaults vs the kernel's UD header (ud_header.c)")
    for n, b in enumerate(frames, start=1):
        ws, grh = FieldsFrame(rows.get(n)), dissect(b)[GRH]
        kernel_paylen = (12 + 8 + 256 + 4 + 3) & ~3
        m.expect(n, "GRH PayLen on the wire (Scapy decode, tshark) vs kernel ud_header.c",
                 (grh.paylen, ws.values("infiniband.grh.paylen")), (kernel_paylen, [kernel_paylen]))
        m.expect(n, "GRH NxtHdr on the wire (Scapy decode, tshark) vs kernel ud_header.c",
                 (grh.nexthdr, ws.values("infiniband.grh.nxthdr")), (0x1B, [0x1B]))
    m.assert_none()


# ============================================================================================
# 3. RMPP and SA header
# ============================================================================================

RMPP_SA_SPEC = st.fixed_dictionaries({
    "encap": st.sampled_from(ENCAPS),
    "method": st.one_of(st.sampled_from(SA_METHODS), uint(8)),
    "status": uint(16),
    "attribute_id": st.one_of(st.sampled_from(SA_ATTRIBUTES), uint(16)),
    "tid": uint(64),
    "rmpp": table_strategy(RMPP_TABLE, rmpp_type=st.integers(0, 4)),
    "sa": table_strategy(SA_TABLE),
})
_RMPP_EDGES, _SA_EDGES = edge_specs(RMPP_TABLE), edge_specs(SA_TABLE)
RMPP_SA_EDGES = [  # every RMPP edge with every RMPP type 0-4, SA edges cycled alongside
    {"encap": ENCAPS[i % 3], "method": SA_METHODS[i % len(SA_METHODS)], "status": (0, 0xFFFF)[i % 2],
     "attribute_id": SA_ATTRIBUTES[i % len(SA_ATTRIBUTES)], "tid": i,
     "rmpp": {**_RMPP_EDGES[i // 5], "rmpp_type": i % 5}, "sa": _SA_EDGES[i % len(_SA_EDGES)]}
    for i in range(5 * len(_RMPP_EDGES))
]


def _sa_mad(s: dict) -> Packet:
    return (MAD(mgmt_class=0x03, class_version=2, method=s["method"], status=s["status"],
                transaction_id=s["tid"], attribute_id=s["attribute_id"])
            / RMPP(**scapy_kwargs(RMPP_TABLE, s["rmpp"]))
            / SAHeader(**scapy_kwargs(SA_TABLE, s["sa"]), records=[]))


@ORACLE_SETTINGS
@example(specs=Specs(RMPP_SA_EDGES))
@given(specs=specs_of(RMPP_SA_SPEC, 60, 70))
def test_rmpp_and_sa_header_match_tshark(capdir, specs):
    frames = []
    for i, s in enumerate(specs):
        b = encapsulate(_sa_mad(s), s["encap"], i)
        b.spec = s
        frames.append(b)
    cap = write_capture(new_capture(capdir, "rmpp-sa"), frames)
    fields = (_fields_of(RMPP_TABLE) + _fields_of(SA_TABLE)
              + [f for pair in RMPP_DATA_FIELDS.values() for f in pair if f]
              + ["infiniband.rmpp.extendederrordata", "infiniband.mad.method"])
    run, rows = tshark_fields(cap, sorted(set(fields)), extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    _count("rmpp_sa", frames, rows)

    m = Mismatches("RMPP / SA header: spec / Scapy / tshark")
    for n, b in enumerate(frames, start=1):
        s, pkt, ws = b.spec, dissect(b), FieldsFrame(rows.get(n))
        rmpp, sa = pkt.getlayer(RMPP), pkt.getlayer(SAHeader)
        if rmpp is None or sa is None:
            m.expect(n, "Scapy finds RMPP and SA headers", (rmpp is not None, sa is not None), (True, True))
            continue
        compare_table(m, n, "rmpp", RMPP_TABLE, s["rmpp"], rmpp, ws)
        compare_table(m, n, "sa", SA_TABLE, s["sa"], sa, ws)
        d1, d2 = RMPP_DATA_FIELDS[s["rmpp"]["rmpp_type"]]
        for name, ws_name in (("segment_number", d1), ("payload_length", d2)):
            if ws_name:
                m.check(n, f"rmpp.{name}", s["rmpp"][name], getattr(rmpp, name),
                        ws.values(ws_name), ws_name=ws_name)
        shown = {f for pair in RMPP_DATA_FIELDS.values() for f in pair if f} - {d1, d2}
        m.expect(n, "no other RMPP Data1/Data2 names", [ws.raw(f) for f in sorted(shown)],
                 [[] for _ in shown])
        if s["rmpp"]["rmpp_type"] in (3, 4):  # STOP/ABORT: Optional Extended Error Data
            m.expect(n, "infiniband.rmpp.extendederrordata",
                     ws.values("infiniband.rmpp.extendederrordata", "bytes"), [b.mad[36:256]])
    m.assert_none()


def test_pinned_rmpp_rresptime_and_flags_split_4_4(capdir):
    """Wireshark bug: byte 26 of an RMPP MAD is RRespTime(5) | RMPPFlags(3) (ib_mad.h
    ib_get_rmpp_resptime/flags). tshark 4.0.17 masks it 0xF0 / 0x0F. All 256 byte values."""
    frames = []
    for v in range(256):
        s = {"encap": ENCAPS[v % 3], "method": 0x92, "status": 0, "attribute_id": 0x35, "tid": v,
             "rmpp": {"rmpp_version": 1, "rmpp_type": 1 + v % 2, "r_resp_time": v >> 3,
                      "rmpp_flags": v & 7, "rmpp_status": 0, "segment_number": 1, "payload_length": 84},
             "sa": {"sm_key": 0, "attribute_offset": 8, "reserved_80": 0, "component_mask": 0}}
        b = encapsulate(_sa_mad(s), s["encap"], v)
        b.spec = s
        frames.append(b)
    cap = write_capture(new_capture(capdir, "rmpp-byte26"), frames)
    run, rows = tshark_fields(cap, ["infiniband.rmpp.rresptime", "infiniband.rmpp.rmppflags"],
                              extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    _count("pinned_rmpp_byte26", frames, rows)

    m = Mismatches("pinned: RMPP RRespTime/Flags")
    for n, b in enumerate(frames, start=1):
        byte26 = b.mad[26]
        rmpp, ws = dissect(b)[RMPP], FieldsFrame(rows.get(n))
        m.check(n, "rmpp.r_resp_time (kernel: byte >> 3)", byte26 >> 3, rmpp.r_resp_time)
        m.check(n, "rmpp.rmpp_flags (kernel: byte & 0x07)", byte26 & 7, int(rmpp.rmpp_flags))
        m.expect(n, "tshark rresptime (pinned: byte >> 4)", ws.values("infiniband.rmpp.rresptime"),
                 [byte26 >> 4])
        m.expect(n, "tshark rmppflags (pinned: byte & 0x0F)", ws.values("infiniband.rmpp.rmppflags"),
                 [byte26 & 0x0F])
    m.assert_none()


def test_pinned_rmpp_reserved_type_misplaces_sa_header(capdir):
    """Wireshark bug: for an RMPP type above ABORT (4), parse_RMPP does not step over Data1 and
    Data2. tshark then reads the SA header 8 bytes early, at MAD byte 28 instead of 36, and
    the PathRecord at byte 48. Scapy keeps the IBA layout. Every reserved type 5-255."""
    frames = []
    rnd = random.Random(0x0A1)
    for t in range(5, 256):
        s = {"encap": ENCAPS[t % 3], "method": 0x81, "status": 0, "attribute_id": 0x35, "tid": t,
             "rmpp": {"rmpp_version": 1, "rmpp_type": t, "r_resp_time": 0, "rmpp_flags": 0,
                      "rmpp_status": 0, "segment_number": rnd.getrandbits(32),
                      "payload_length": rnd.getrandbits(32)},
             "sa": {"sm_key": rnd.getrandbits(64), "attribute_offset": rnd.getrandbits(16),
                    "reserved_80": 0, "component_mask": rnd.getrandbits(64)}}
        b = encapsulate(_sa_mad(s), s["encap"], t)
        b.spec = s
        frames.append(b)
    cap = write_capture(new_capture(capdir, "rmpp-reserved-type"), frames)
    run, rows = tshark_fields(cap, _fields_of(SA_TABLE) + ["infiniband.rmpp.rmpptype"],
                              extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    _count("pinned_rmpp_reserved_type", frames, rows)

    m = Mismatches("pinned: reserved RMPP type")
    for n, b in enumerate(frames, start=1):
        mad, ws = b.mad, FieldsFrame(rows.get(n))
        compare_table(m, n, "sa", SA_TABLE, b.spec["sa"], dissect(b)[SAHeader], ws,
                      skip_ws={w for _n, _b, w, _k in SA_TABLE if w})
        m.expect(n, "tshark rmpptype", ws.values("infiniband.rmpp.rmpptype"), [mad[25]])
        m.expect(n, "tshark smkey (pinned: MAD bytes 28-35)", ws.values("infiniband.sa.smkey"),
                 [int.from_bytes(mad[28:36], "big")])
        m.expect(n, "tshark attributeoffset (pinned: MAD bytes 36-37)",
                 ws.values("infiniband.sa.attributeoffset"), [int.from_bytes(mad[36:38], "big")])
        m.expect(n, "tshark componentmask (pinned: MAD bytes 40-47)",
                 ws.values("infiniband.sa.componentmask"), [int.from_bytes(mad[40:48], "big")])
    m.assert_none()


# ============================================================================================
# 4. PathRecord (pyshark): record 0 of Get / GetResp / single-segment GetTableResp
# ============================================================================================

PATH_RECORD_SPEC = st.fixed_dictionaries({
    "encap": st.sampled_from(ENCAPS),
    "kind": st.sampled_from(["get", "getresp", "gettableresp"]),
    "rec": table_strategy(PATH_RECORD_TABLE),
    "extra": st.lists(uint(32), max_size=2),  # seeds of records 1-2 (GetTableResp only)
    "tid": uint(64),
    "comp_mask": uint(64),
    "sm_key": uint(64),
    "resp_time": uint(5),
})
PATH_RECORD_EDGES = [
    {"encap": ENCAPS[i % 3], "kind": ("get", "getresp", "gettableresp")[(i // 3) % 3], "rec": r,
     "extra": [i] * (i % 3), "tid": i, "comp_mask": (0, _mask(64), 0x3CC)[i % 3],
     "sm_key": (0, _mask(64))[i % 2], "resp_time": (0, 0x1F)[i % 2]}
    for i, r in enumerate(edge_specs(PATH_RECORD_TABLE))
]


def _random_record(seed: int) -> dict:
    rnd = random.Random(seed)
    return {name: rnd.getrandbits(bits) for name, bits, _w, _k in PATH_RECORD_TABLE}


def _path_record_mad(s: dict) -> tuple[Packet, list[dict]]:
    recs = [s["rec"]]
    if s["kind"] == "gettableresp":
        recs += [_random_record(seed) for seed in s["extra"]]
    records = [PathRecord(**scapy_kwargs(PATH_RECORD_TABLE, r)) for r in recs]
    method = {"get": 0x01, "getresp": 0x81, "gettableresp": 0x92}[s["kind"]]
    if s["kind"] == "gettableresp":
        # One DATA segment, ACTIVE|FIRST|LAST, PayloadLength = SA header + records (wire-formats §2).
        rmpp = RMPP(rmpp_version=1, rmpp_type=1, r_resp_time=s["resp_time"], rmpp_flags=7,
                    segment_number=1, payload_length=20 + 64 * len(records))
    else:
        rmpp = RMPP()
    mad = (MAD(mgmt_class=0x03, class_version=2, method=method, transaction_id=s["tid"],
               attribute_id=0x0035)
           / rmpp / SAHeader(sm_key=s["sm_key"], component_mask=s["comp_mask"], records=records))
    return mad, recs


def _build_path_record_frames(specs: list[dict]) -> list[Built]:
    frames = []
    for i, s in enumerate(specs):
        mad, recs = _path_record_mad(s)
        b = encapsulate(mad, s["encap"], i)
        b.spec = {**s, "recs": recs}
        frames.append(b)
    return frames


@settings(ORACLE_SETTINGS, max_examples=EXAMPLES + 1)
@example(specs=Specs(PATH_RECORD_EDGES))
@given(specs=specs_of(PATH_RECORD_SPEC, 35, 45))
def test_path_record_matches_tshark(capdir, specs):
    frames = _build_path_record_frames(specs)
    cap = write_capture(new_capture(capdir, "pathrecord"), frames)
    run = run_pyshark(cap, extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    ws_frames = _pdml_by_frame(run)
    _count("path_record", frames, ws_frames)

    m = Mismatches("PathRecord: spec / Scapy / tshark (pyshark)")
    for n, b in enumerate(frames, start=1):
        s, pkt, ws = b.spec, dissect(b), ws_frames.get(n)
        sa = pkt.getlayer(SAHeader)
        records = list(sa.records) if sa is not None else []
        m.expect(n, f"Scapy record count ({s['kind']})", len(records), len(s["recs"]))
        for i, (rec_spec, rec) in enumerate(zip(s["recs"], records)):
            if i == 0 and ws is not None:
                compare_table(m, n, "pathrecord[0]", PATH_RECORD_TABLE, rec_spec, rec, ws)
            else:
                compare_table(m, n, f"pathrecord[{i}]", PATH_RECORD_TABLE, rec_spec, rec, ws,
                              skip_ws={w for _n, _b, w, _k in PATH_RECORD_TABLE if w})
        if ws is None:
            m.expect(n, "tshark packet", None, "present")
            continue
        # MAD/SA header of these packets, through pyshark too.
        compare_table(m, n, "mad", MAD_TABLE, None, pkt[MAD], ws)
        for name, spec_v, ws_name in (("sm_key", s["sm_key"], "infiniband.sa.smkey"),
                                      ("component_mask", s["comp_mask"], "infiniband.sa.componentmask")):
            m.check(n, f"sa.{name}", spec_v, int(getattr(sa, name)), ws.values(ws_name), ws_name=ws_name)
        m.check(n, "sa.attribute_offset", None, sa.attribute_offset,
                ws.values("infiniband.sa.attributeoffset"), ws_name="infiniband.sa.attributeoffset")
    m.assert_none()


@ORACLE_SETTINGS
@example(specs=Specs(PATH_RECORD_EDGES))
@given(specs=specs_of(PATH_RECORD_SPEC, 20, 30))
def test_pinned_path_record_service_id_is_reserved_and_qos_class_missing(capdir, specs):
    """Wireshark gap: PathRecord bytes 0-7 (ServiceID) appear only as an 8-byte
    `infiniband.reserved` item. The 12-bit QoSClass has no item: the only field on bytes
    52-53 is `pathrecord.sl`, mask 0x000F. landscape.md A.3/A.4."""
    frames = _build_path_record_frames(specs)
    cap = write_capture(new_capture(capdir, "pathrecord-sid"), frames)
    run = run_pyshark(cap, extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    ws_frames = _pdml_by_frame(run)
    _count("pinned_path_record_sid_qos", frames, ws_frames)

    m = Mismatches("pinned: PathRecord ServiceID / QoSClass")
    for n, b in enumerate(frames, start=1):
        s, ws = b.spec, ws_frames[n]
        rec0 = dissect(b)[SAHeader].records[0]
        m.check(n, "pathrecord[0].service_id", s["recs"][0]["service_id"], rec0.service_id)
        m.check(n, "pathrecord[0].qos_class", s["recs"][0]["qos_class"], rec0.qos_class)
        mad_pos = int(ws.fields("infiniband.mad.baseversion")[0].pos)
        rec_pos = mad_pos + 56
        reserved_at_rec = [f for f in ws.fields("infiniband.reserved") if int(f.pos) == rec_pos]
        m.expect(n, "infiniband.reserved at record byte 0 (pinned: ServiceID shown as Reserved)",
                 [(int(f.size), f.raw_value) for f in reserved_at_rec], [(8, b.mad[56:64].hex())])
        on_qos = [(f.name, f.show, f.unmaskedvalue) for container in ws.layer._all_fields.values()
                  for f in container.all_fields
                  if f.pos is not None and int(f.pos) in (rec_pos + 52, rec_pos + 53)]
        m.expect(n, "items on record bytes 52-53 (pinned: only SL, QoSClass not decoded)",
                 on_qos, [("infiniband.pathrecord.sl", f"0x{rec0.sl:04x}", b.mad[108:110].hex())])
        names = {name for name in ws.layer._all_fields if name.startswith("infiniband.pathrecord.")}
        m.expect(n, "PathRecord items tshark shows",
                 sorted(names), sorted(w for _n, _b, w, _k in PATH_RECORD_TABLE if w))
    m.assert_none()


def test_pinned_no_service_id_or_qos_class_field_registered():
    run = run_tshark(None, ["-G", "fields"])
    assert run.returncode == 0
    assert_clean("", run.stderr)  # -G output is a field list, not dissection output
    names = {line.split("\t")[2] for line in run.stdout.splitlines() if line.startswith("F\t")}
    pathrecord = {n for n in names if n.startswith("infiniband.pathrecord.")}
    assert pathrecord == {w for _n, _b, w, _k in PATH_RECORD_TABLE if w}, sorted(pathrecord)
    assert not [n for n in pathrecord if "service" in n or "qos" in n]


@ORACLE_SETTINGS
@example(specs=Specs({**e, "kind": "gettableresp", "extra": [i, i + 1][: 1 + i % 2]}
                     for i, e in enumerate(PATH_RECORD_EDGES)))
@given(specs=specs_of(st.fixed_dictionaries({
    "encap": st.sampled_from(ENCAPS), "kind": st.just("gettableresp"),
    "rec": table_strategy(PATH_RECORD_TABLE),
    "extra": st.lists(uint(32), min_size=1, max_size=2), "tid": uint(64), "comp_mask": uint(64),
    "sm_key": st.just(0), "resp_time": uint(5)}), 30, 40))
def test_pinned_get_table_resp_shows_only_first_record(capdir, specs):
    """Wireshark gap: parse_SUBA_Attribute decodes one attribute at MAD offset 56 and ignores
    AttributeOffset. In a 2- or 3-record GetTableResp, tshark shows record 0 and never record 1.
    Scapy decodes every record. landscape.md A.1/A.4."""
    frames = _build_path_record_frames(specs)
    cap = write_capture(new_capture(capdir, "gettable"), frames)
    run, rows = tshark_fields(cap, _fields_of(PATH_RECORD_TABLE), extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    _count("pinned_get_table_resp", frames, rows)

    m = Mismatches("pinned: GetTableResp shows only the first record")
    for n, b in enumerate(frames, start=1):
        s, ws = b.spec, FieldsFrame(rows.get(n))
        records = dissect(b)[SAHeader].records
        m.expect(n, "Scapy record count", len(records), len(s["recs"]))
        for i, (rec_spec, rec) in enumerate(zip(s["recs"], records)):
            compare_table(m, n, f"pathrecord[{i}]", PATH_RECORD_TABLE, rec_spec, rec, ws,
                          skip_ws={w for _n, _b, w, _k in PATH_RECORD_TABLE if w} if i else frozenset())
        # Every tshark PathRecord item occurs once (record 0 checked above): record 1 is absent.
        m.expect(n, "tshark occurrences of each pathrecord field",
                 {w: len(ws.raw(w)) for w in _fields_of(PATH_RECORD_TABLE)},
                 {w: 1 for w in _fields_of(PATH_RECORD_TABLE)})
    m.assert_none()


# ============================================================================================
# 5. CM REQ/REP/RTU/REJ/DREQ/DREP (and MRA, which tshark does not decode)
# ============================================================================================

def _ip_cm_service_id(proto: int, port: int) -> int:
    return (0x0000000001 << 24) | (proto << 16) | port  # RDMA IP CM Service ID (IBA Annex A11)


def _cm_spec(attr: int, **overrides) -> st.SearchStrategy[dict]:
    _cls, table = CM_MESSAGES[attr]
    return st.fixed_dictionaries({
        "attr": st.just(attr), "encap": st.sampled_from(ENCAPS), "tid": uint(64),
        "msg": table_strategy(table, **overrides)})


CM_SPEC = st.one_of(
    _cm_spec(0x0010, service_id=st.one_of(uint(64), st.builds(_ip_cm_service_id, uint(8), uint(16)))),
    _cm_spec(0x0012), _cm_spec(0x0013), _cm_spec(0x0014), _cm_spec(0x0015), _cm_spec(0x0016),
)


def _cm_edges(attrs=(0x0010, 0x0012, 0x0013, 0x0014, 0x0015, 0x0016)) -> list[dict]:
    out = []
    for attr in attrs:
        for i, msg in enumerate(edge_specs(CM_MESSAGES[attr][1])):
            out.append({"attr": attr, "encap": ENCAPS[i % 3], "tid": i, "msg": msg})
    return out


def _cm_frames(specs: list[dict]) -> list[Built]:
    frames = []
    for i, s in enumerate(specs):
        cls, table = CM_MESSAGES[s["attr"]]
        mad = (MAD(mgmt_class=0x07, class_version=2, method=0x03, transaction_id=s["tid"],
                   attribute_id=s["attr"]) / cls(**scapy_kwargs(table, s["msg"])))
        b = encapsulate(mad, s["encap"], i)
        b.spec = s
        frames.append(b)
    return frames


def _is_ip_cm(service_id: int) -> bool:
    return service_id >> 24 == 1


CM_FIELDS = sorted({w for _cls, t in CM_MESSAGES.values() for _n, _b, w, _k in t if w} | {
    "infiniband.cm.req.serviceid.prefix", "infiniband.cm.req.serviceid.protocol",
    "infiniband.cm.req.serviceid.dport", "infiniband.cm.req.ip_cm",
    "infiniband.cm.req.prim_localgid_ipv4", "infiniband.cm.req.prim_remotegid_ipv4",
    "infiniband.mad.attributeid"})


@ORACLE_SETTINGS
@example(specs=Specs(_cm_edges()))
@given(specs=specs_of(CM_SPEC, 40, 50))
def test_cm_messages_match_tshark(capdir, specs):
    frames = _cm_frames(specs)
    cap = write_capture(new_capture(capdir, "cm"), frames)
    run, rows = tshark_fields(cap, CM_FIELDS, extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    _count("cm", frames, rows)

    m = Mismatches("CM: spec / Scapy / tshark")
    for n, b in enumerate(frames, start=1):
        s, ws = b.spec, FieldsFrame(rows.get(n))
        cls, table = CM_MESSAGES[s["attr"]]
        msg = dissect(b).getlayer(cls)
        if msg is None:
            m.expect(n, f"Scapy decodes {cls.__name__}", None, cls.__name__)
            continue
        skip = set()
        if s["attr"] == 0x0010:
            if b.spec["encap"] == "rocev2-ipv4":  # pinned below: GIDs shown as IPv4
                skip |= {"infiniband.cm.req.prim_localgid", "infiniband.cm.req.prim_remotegid"}
            sid = s["msg"]["service_id"]
            if _is_ip_cm(sid):  # tshark decodes the private data as IP CM instead
                skip.add("infiniband.cm.req.private")
                m.expect(n, "IP CM service id prefix/protocol/dport",
                         [ws.values("infiniband.cm.req.serviceid.prefix", "bytes"),
                          ws.values("infiniband.cm.req.serviceid.protocol"),
                          ws.values("infiniband.cm.req.serviceid.dport")],
                         [[(sid >> 24).to_bytes(5, "big")], [(sid >> 16) & 0xFF], [sid & 0xFFFF]])
                m.expect(n, "IP CM private data item", ws.values("infiniband.cm.req.ip_cm", "bytes"),
                         [b.mad[24 + 140:256]])
        compare_table(m, n, cls.__name__, table, s["msg"], msg, ws, skip_ws=skip)
    m.assert_none()


def _cm_req_mra_rej_spec():
    return st.one_of(
        _cm_spec(0x0010, service_id=uint(64)),
        _cm_spec(0x0011), _cm_spec(0x0012))


PINNED_CM_FIELDS = [
    "infiniband.cm.req.prim_flowlabel", "infiniband.cm.req.prim_pktrate",
    "infiniband.cm.req.prim_reserved0", "infiniband.cm.req.alt_flowlabel",
    "infiniband.cm.req.alt_pktrate", "infiniband.cm.req.alt_reserved0",
    "infiniband.cm.req.alt_reserved1", "infiniband.cm.req.prim_localgid",
    "infiniband.cm.req.prim_remotegid", "infiniband.cm.req.prim_localgid_ipv4",
    "infiniband.cm.req.prim_remotegid_ipv4", "infiniband.cm.rej.reserved0",
    "infiniband.cm.req", "infiniband.cm.rej.localcommid", "infiniband.mad.attributeid",
]


def tshark_cm_req_path_formulas(cm: bytes, base: int) -> dict:
    """What tshark 4.0.17 shows for the flow label / packet rate word of a REQ path block.
    parse_CM_Req adds the FT_UINT32 flow label (mask 0xFFFFF000) with a 3-byte length at the
    word start. It adds the packet rate (mask 0x3F) and Reserved (mask 0xFC0) with a 1-byte
    length at the same offset."""
    return {"flowlabel": int.from_bytes(cm[base:base + 3], "big") >> 12,
            "pktrate": cm[base] & 0x3F,
            "reserved0": (cm[base] & 0xC0) >> 6}


def kernel_cm_req_path(cm: bytes, base: int) -> dict:
    """ibta_vol1_c12.h: CM_REQ_PRIMARY_FLOW_LABEL = CM_FIELD32_LOC(88, 20) (top 20 bits of
    the BE u32); CM_REQ_PRIMARY_PACKET_RATE = CM_FIELD_BLOC(91, 2, 6) (low 6 bits of byte 91)."""
    return {"flow_label": int.from_bytes(cm[base:base + 4], "big") >> 12, "packet_rate": cm[base + 3] & 0x3F}


@ORACLE_SETTINGS
@example(specs=Specs(_cm_edges((0x0010, 0x0011, 0x0012))))
@given(specs=specs_of(_cm_req_mra_rej_spec(), 35, 45))
def test_pinned_cm_req_flow_label_packet_rate_and_other_cm_errors(capdir, specs):
    """Wireshark bugs in CM, each pinned as tshark's formula on the raw CM bytes:
    * REQ primary/alternate flow label = the top 12 bits of the 3 bytes at 88/132. The kernel
      and IBA value is the top 20 bits of the u32. Packet rate = byte 88/132 & 0x3F. IBA: byte
      91/135 & 0x3F. landscape.md A.6 saw 3a 12 60 00 → 0x003a1 / 0x3a.
    * REQ alternate SAP Supported (byte 139 bit 0x04, CM_REQ_SAP_SUPPORTED) is not decoded.
      It shows inside a second `alt_reserved1` item = byte 139 & 0x07.
    * RoCEv2 over IPv4: the primary GIDs show as IPv4 addresses made from GID bytes 12-15.
      No 128-bit GID item appears, even when the GID is not IPv4-mapped.
    * REJ Reserved after MessageRejected is 6 bits. tshark's mask is 0x03.
    * MRA (attribute 0x0011): no CM field is decoded ("Dissector Not Implemented")."""
    frames = _cm_frames(specs)
    cap = write_capture(new_capture(capdir, "cm-pinned"), frames)
    run, rows = tshark_fields(cap, PINNED_CM_FIELDS, extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    _count("pinned_cm", frames, rows)

    m = Mismatches("pinned: CM")
    for n, b in enumerate(frames, start=1):
        s, ws, pkt = b.spec, FieldsFrame(rows.get(n)), dissect(b)
        cm = b.mad[24:]
        if s["attr"] == 0x0010:
            req = pkt[CMReq]
            for prefix, ws_prefix, base in (("primary", "prim", 88), ("alternate", "alt", 132)):
                kern = kernel_cm_req_path(cm, base)
                m.check(n, f"{prefix}_flow_label (kernel)", s["msg"][f"{prefix}_flow_label"],
                        getattr(req, f"{prefix}_flow_label"))
                m.check(n, f"{prefix}_packet_rate (kernel)", s["msg"][f"{prefix}_packet_rate"],
                        int(getattr(req, f"{prefix}_packet_rate")))
                m.expect(n, f"kernel formula {prefix}", kern,
                         {"flow_label": s["msg"][f"{prefix}_flow_label"],
                          "packet_rate": s["msg"][f"{prefix}_packet_rate"]})
                wrong = tshark_cm_req_path_formulas(cm, base)
                for key in ("flowlabel", "pktrate", "reserved0"):
                    name = f"infiniband.cm.req.{ws_prefix}_{key}"
                    m.expect(n, f"{name} (pinned Wireshark formula)", ws.values(name), [wrong[key]])
            m.expect(n, "alt_reserved1 x2 (pinned: SAP Supported inside Reserved)",
                     ws.values("infiniband.cm.req.alt_reserved1"), [(cm[138] & 0x07), (cm[139] & 0x07)])
            m.check(n, "sap_supported", s["msg"]["sap_supported"], req.sap_supported)
            if s["encap"] == "rocev2-ipv4":
                m.expect(n, "prim GIDs as IPv4 (pinned: GID bytes 12-15)",
                         [ws.values("infiniband.cm.req.prim_localgid_ipv4", "ipv4"),
                          ws.values("infiniband.cm.req.prim_remotegid_ipv4", "ipv4"),
                          ws.raw("infiniband.cm.req.prim_localgid"),
                          ws.raw("infiniband.cm.req.prim_remotegid")],
                         [[int.from_bytes(cm[68:72], "big")], [int.from_bytes(cm[84:88], "big")], [], []])
        elif s["attr"] == 0x0012:
            m.check(n, "rej.reserved_66", s["msg"]["reserved_66"], pkt[CMRej].reserved_66)
            m.expect(n, "infiniband.cm.rej.reserved0 (pinned: byte 8 & 0x03)",
                     ws.values("infiniband.cm.rej.reserved0"), [cm[8] & 0x03])
        else:  # MRA
            compare_table(m, n, "CMMra", CM_MRA_TABLE, s["msg"], pkt[CMMra], ws)
            m.expect(n, "MRA: no CM field decoded (pinned gap)",
                     [ws.raw(f) for f in PINNED_CM_FIELDS if f.startswith("infiniband.cm.")],
                     [[] for f in PINNED_CM_FIELDS if f.startswith("infiniband.cm.")])
            m.expect(n, "MRA attribute id", ws.values("infiniband.mad.attributeid"), [0x0011])
    m.assert_none()


# ============================================================================================
# 6. Real captures made by others (read in place, never modified)
# ============================================================================================

def _external(name: str) -> Path:
    path = EXTERNAL / name
    if not path.is_file():
        pytest.skip(f"external capture not found: {path}")
    return path


EXTERNAL_MAD_CAPTURES = ["rxe-cm-rdma-rw.pcap", "ib-erf-sminfo-cm.pcap", "rocev2-rc-send.pcap"]

# decode.py's "cm" keys → tshark fields, for the CM messages tshark decodes right.
# (decode.py leaves out private data; ARI and private data are compared on generated packets.)
EXTERNAL_CM_FIELDS = {
    msg: [(n, w, k) for n, _b, w, k in table
          if w and n not in ("private_data", "ari") and not n.startswith("reserved")]
    for msg, table in (("REQ", CM_REQ_TABLE), ("REP", CM_REP_TABLE), ("RTU", CM_RTU_TABLE),
                       ("REJ", CM_REJ_TABLE), ("DREQ", CM_DREQ_TABLE), ("DREP", CM_DREP_TABLE))
}


def _decoded_value(v, kind: str):
    """A decode_file value (GIDs as IPv6 text, octets as hex) in the form ws_parse gives."""
    if isinstance(v, str) and ":" in v:
        addr = ipaddress.IPv6Address(v)
        return addr.packed if kind == "bytes" else int(addr)
    if kind == "bytes" and isinstance(v, str):
        return bytes.fromhex(v)
    return int(v)


@pytest.mark.parametrize("name", EXTERNAL_MAD_CAPTURES)
def test_external_capture_mad_and_cm_fields_match_tshark(name):
    path = _external(name)
    decoded = {r["frame"]: r for r in decode_file(str(path)) if "mad" in r}
    assert not [r for r in decoded.values() if r["kind"] == "malformed"]
    ws_fields = sorted({w for _n, _b, w, _k in MAD_TABLE if w}
                       | {w for fl in EXTERNAL_CM_FIELDS.values() for _n, w, _k in fl}
                       | {"infiniband.cm.req.prim_localgid_ipv4", "infiniband.cm.req.prim_remotegid_ipv4",
                          "infiniband.cm.req.prim_flowlabel", "infiniband.cm.req.prim_pktrate",
                          "infiniband.cm.req.alt_flowlabel", "infiniband.cm.req.alt_pktrate"})
    run, rows = tshark_fields(path, ws_fields, extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    ws_mad_frames = {n for n, r in rows.items() if r.get("infiniband.mad.baseversion")}
    assert set(decoded) == ws_mad_frames, "frames with a MAD: Scapy vs tshark"
    raw = {f.number: f for f in read_frames(str(path))}

    m = Mismatches(f"{name}: decode_file vs tshark")
    for n, rec in sorted(decoded.items()):
        ws = FieldsFrame(rows[n])
        for field_name, _bits, ws_name, kind in MAD_TABLE:
            if ws_name:
                m.check(n, f"mad.{field_name}", None, int(rec["mad"][field_name]), ws.values(ws_name, kind),
                        ws_name=ws_name)
        cm = rec.get("cm")
        if not cm:
            continue
        ipv4 = rec.get("encap") == "rocev2" and ":" not in rec.get("src", ":")
        for field_name, ws_name, kind in EXTERNAL_CM_FIELDS.get(cm["message"], []):
            if ipv4 and ws_name.endswith(("prim_localgid", "prim_remotegid")):
                v4 = ws.values(ws_name + "_ipv4", "ipv4")
                m.expect(n, f"{ws_name}_ipv4 (pinned: GID bytes 12-15)", v4,
                         [_decoded_value(cm[field_name], kind) & 0xFFFFFFFF])
                continue
            m.check(n, f"cm.{cm['message']}.{field_name}", None, _decoded_value(cm[field_name], kind),
                    ws.values(ws_name, kind), ws_name=ws_name)
        if cm["message"] == "REQ":
            mad = dissect_frame_mad(raw[n])
            req = rec["cm_req"]
            for prefix, ws_prefix, base in (("primary", "prim", 88), ("alternate", "alt", 132)):
                kern = kernel_cm_req_path(mad[24:], base)
                m.expect(n, f"{prefix} flow label/rate: decode vs kernel layout",
                         (req[f"{prefix}_flow_label"], req[f"{prefix}_packet_rate"]),
                         (kern["flow_label"], kern["packet_rate"]))
                wrong = tshark_cm_req_path_formulas(mad[24:], base)
                m.expect(n, f"{ws_prefix} flow label/rate (pinned Wireshark formula)",
                         (ws.values(f"infiniband.cm.req.{ws_prefix}_flowlabel"),
                          ws.values(f"infiniband.cm.req.{ws_prefix}_pktrate")),
                         ([wrong["flowlabel"]], [wrong["pktrate"]]))
    if name == "rxe-cm-rdma-rw.pcap":  # landscape.md A.6, literally
        req = decoded[1]["cm_req"]
        assert (req["primary_flow_label"], req["primary_packet_rate"]) == (0x3A126, 0)
        # tshark's tree: "Primary Flow Label: 0x003a1", "Primary Packet Rate: 0x3a".
        assert [ws_int(v) for v in rows[1]["infiniband.cm.req.prim_flowlabel"]] == [0x3A1]
        assert [ws_int(v) for v in rows[1]["infiniband.cm.req.prim_pktrate"]] == [0x3A]
    m.assert_none(require=name != "rocev2-rc-send.pcap")


def dissect_frame_mad(frame) -> bytes:
    """The 256 wire bytes the layers dissected as the frame's MAD."""
    pkt = Ether(frame.data) if frame.linktype == LINKTYPE_ETHERNET else ERF(frame.data)
    return pkt[MAD].original[:256]


def test_external_native_sa_path_record_exchange_matches_tshark():
    """ib-erf-sminfo-cm.pcap frames 32/33: a real SubnAdmGet / GetResp(PathRecord), both with a
    PathRecord at MAD offset 56. Every PathRecord field tshark decodes, plus MAD/RMPP/SA."""
    path = _external("ib-erf-sminfo-cm.pcap")
    decoded = {r["frame"]: r for r in decode_file(str(path))}
    run = run_pyshark(path, display_filter="frame.number == 32 || frame.number == 33",
                      extra_args=WS_ARGS)
    assert_clean(run.stdout, run.stderr)
    ws_frames = _pdml_by_frame(run)
    assert sorted(ws_frames) == [32, 33]
    raw = {f.number: f for f in read_frames(str(path))}

    m = Mismatches("ib-erf-sminfo-cm.pcap SA PathRecord: decode_file / Scapy layers vs tshark (pyshark)")
    for n in (32, 33):
        rec, ws = decoded[n], ws_frames[n]
        assert rec["kind"] == "sa" and rec["mad"]["attribute_id"] == 0x0035
        assert len(rec["path_records"]) == 1
        pr = rec["path_records"][0]
        sa_layer = (ERF(raw[n].data))[SAHeader]
        for field_name, _bits, ws_name, kind in PATH_RECORD_TABLE:
            if field_name.startswith("reserved"):
                continue
            got = _decoded_value(pr[field_name], kind)
            m.expect(n, f"path_records[0].{field_name}: decode_file == layer", got,
                     scapy_value(sa_layer.records[0], field_name, kind))
            if ws_name:
                m.check(n, f"path_records[0].{field_name}", None, got, ws.values(ws_name, kind),
                        ws_name=ws_name)
        for field_name, _bits, ws_name, kind in MAD_TABLE:
            if ws_name:
                m.check(n, f"mad.{field_name}", None, rec["mad"][field_name], ws.values(ws_name, kind),
                        ws_name=ws_name)
        for field_name, ws_name in (("rmpp_version", "infiniband.rmpp.rmppversion"),
                                    ("rmpp_type", "infiniband.rmpp.rmpptype"),
                                    ("rmpp_status", "infiniband.rmpp.rmppstatus")):
            m.check(n, f"rmpp.{field_name}", None, rec["rmpp"][field_name], ws.values(ws_name),
                    ws_name=ws_name)
        for field_name, ws_name in (("sm_key", "infiniband.sa.smkey"),
                                    ("attribute_offset", "infiniband.sa.attributeoffset"),
                                    ("component_mask", "infiniband.sa.componentmask")):
            m.check(n, f"sa.{field_name}", None, rec["sa"][field_name], ws.values(ws_name),
                    ws_name=ws_name)
    # The real exchange, as read (also in test_decode_external): SGID/DGID/LIDs of the answer.
    pr = decoded[33]["path_records"][0]
    assert (pr["sgid"], pr["dgid"], pr["slid"], pr["dlid"]) == (
        "fe80::2:c902:24:f636", "fe80::2:c903:0:1895", 4, 2)
    assert decoded[32]["sa"]["component_mask"] == 0x340C
    m.assert_none()


def test_report_packet_counts(request):
    """Last in the file: prints how many packets each oracle test compared (pytest -s), and
    fails when a counting oracle test that ran before it compared no packet (it never counted,
    or tshark returned none of its frames) or when tshark left out frames a test built."""
    items = request.session.items
    ran = {i.originalname for i in items[:items.index(request.node)]
           if i.module is not None and i.module.__name__ == __name__} & set(COUNTED)
    if not ran:
        pytest.skip("no counting oracle test ran before this one (run the whole file)")
    tests = {name for name in globals() if name.startswith("test_")}
    assert set(COUNTED) <= tests, f"COUNTED names no such test: {sorted(set(COUNTED) - tests)}"
    unknown = sorted(set(PACKET_COUNTS) - set(COUNTED.values()))
    assert not unknown, f"counts under keys COUNTED does not know: {unknown}"
    print("\noracle packet counts:", ", ".join(f"{k}={v}" for k, v in PACKET_COUNTS.items()),
          f"total={sum(PACKET_COUNTS.values())}")
    empty = sorted(COUNTED[t] for t in ran if not PACKET_COUNTS.get(COUNTED[t]))
    assert not empty, f"oracle tests that compared no packet: {empty}"
    short = {k: f"{PACKET_COUNTS[k]} of {BUILT_COUNTS[k]}" for k in PACKET_COUNTS
             if PACKET_COUNTS[k] != BUILT_COUNTS[k]}
    assert not short, f"frames built that tshark did not return: {short}"
