"""The ucma, umad and ACM layers against independent oracles.

- Sizes and offsets: tests/data/record/layout.c, compiled here with gcc, prints them as the
  compiler lays out the kernel's own uapi headers (<rdma/rdma_user_cm.h>,
  <rdma/ib_user_mad.h>, installed by linux-libc-dev) and a transcription of rdma-core's
  librdmacm/acm.h; every Scapy field must sit where its C member does.
- Values: a RESOLVE response, a PERF_QUERY and its answer and an EP_QUERY answer built with
  those C structs, swapped where ibacm and libacm swap (layout.c's SAMPLE lines); every umad
  frame of the committed OpenSM and saquery recordings (captures/opensm/*.pcapng) read by
  plain struct as ib_user_mad.h lays struct ib_user_mad_hdr out.
"""

from __future__ import annotations

import shutil
import subprocess
from struct import Struct
from pathlib import Path

import pytest
from scapy.fields import ConditionalField
from scapy.packet import Padding, Raw, raw

from ibpath_scapy.layers.acm import (
    ACM_DISSECTOR, AcmEpAddrData, AcmEpConfigData, AcmHdr, AcmPerfData, AcmResolve,
)
from ibpath_scapy.layers.ib import EXPORTED_PDU_DISSECTORS, ExportedPDU
from ibpath_scapy.layers.mad import MAD
from ibpath_scapy.layers.pathdata import PathArray, PathRecData
from ibpath_scapy.layers.sa import PathRecord
from ibpath_scapy.layers.ucma import (
    UCMA_DISSECTOR, UcmaAhAttr, UcmaCmdHdr, UcmaConnect, UcmaConnParam, UcmaCreateId,
    UcmaCreateIdResp, UcmaEce, UcmaEventResp, UcmaGetEvent, UcmaQuery, UcmaQueryPathResp,
    UcmaResolveAddr, UcmaResolveIp, UcmaResolveRoute, UcmaSetOption, UcmaUdParam,
    sockaddr_text,
)
from ibpath_scapy.layers.umad import UMAD_DISSECTOR, UserMad
from ibpath_scapy.capture.pcapio import read_frames

from layer_checks import assert_bit_runs_close

ROOT = Path(__file__).resolve().parents[1]
LAYOUT_C = Path(__file__).with_name("data") / "record" / "layout.c"
OPENSM = ROOT / "captures" / "opensm"

# values a layer needs to build its whole struct
LAYOUT_VALUES = {AcmEpAddrData: {"path": PathRecord()}}
# layer -> (C struct, {scapy field: C member} where the names differ)
STRUCTS = {
    UcmaCmdHdr: ("rdma_ucm_cmd_hdr", {"in_len": "in", "out_len": "out"}),
    UcmaCreateId: ("rdma_ucm_create_id", {}),
    UcmaCreateIdResp: ("rdma_ucm_create_id_resp", {}),
    UcmaResolveIp: ("rdma_ucm_resolve_ip", {}),
    UcmaResolveAddr: ("rdma_ucm_resolve_addr", {}),
    UcmaResolveRoute: ("rdma_ucm_resolve_route", {}),
    UcmaConnParam: ("rdma_ucm_conn_param", {}),
    UcmaUdParam: ("rdma_ucm_ud_param", {}),
    UcmaEce: ("rdma_ucm_ece", {}),
    UcmaConnect: ("rdma_ucm_connect", {}),
    UcmaQuery: ("rdma_ucm_query", {}),
    UcmaQueryPathResp: ("rdma_ucm_query_path_resp", {}),
    UcmaGetEvent: ("rdma_ucm_get_event", {}),
    UcmaEventResp: ("rdma_ucm_event_resp", {"param": None, "param_rest": None}),
    UcmaSetOption: ("rdma_ucm_set_option", {}),
    UserMad: ("ib_user_mad_hdr", {"agent_id": "id"}),
    AcmHdr: ("acm_hdr", {"src_out": None, "src_index": None, "dst_index": None}),
    AcmEpAddrData: ("acm_ep_addr_data", {"path": "info"}),  # union acm_ep_info
    # addrs[] (a flexible array) and what follows it: checked below
    AcmEpConfigData: ("acm_ep_config_data", {"reserved": "rsvd", "addrs": None,
                                             "trailing": None}),
}


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    exe = tmp_path_factory.mktemp("layout") / "layout"
    subprocess.run([cc, "-Wall", "-o", str(exe), str(LAYOUT_C)], check=True,
                   capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    sizes, members, samples = {}, {}, {}
    for line in out.splitlines():
        kind, *rest = line.split()
        if kind == "SIZE":
            sizes[rest[0]] = int(rest[1])
        elif kind == "FIELD":
            members[(rest[0], rest[1])] = (int(rest[2]), int(rest[3]))
        else:
            samples[rest[0]] = bytes.fromhex(rest[1])
    return sizes, members, samples


def scapy_layout(cls, **values) -> tuple[dict[str, tuple[int, int]], int]:
    """(offset, size) of every field of cls(**values) as it builds, and the built size."""
    pkt = cls(**values)
    out, off = {}, 0
    for f in cls.fields_desc:
        size = len(f.addfield(pkt, b"", pkt.getfieldval(f.name)))
        if size == 0 and isinstance(f, ConditionalField):
            continue  # the other member of a union
        out[f.name] = (off, size)
        off += size
    assert off == len(raw(pkt))
    return out, off


@pytest.mark.parametrize("cls", list(STRUCTS), ids=lambda c: c.__name__)
def test_size_and_offsets_match_the_c_struct(oracle, cls):
    sizes, members, _ = oracle
    struct, renamed = STRUCTS[cls]
    layout, size = scapy_layout(cls, **LAYOUT_VALUES.get(cls, {}))
    assert_bit_runs_close(cls)
    assert size == sizes[struct], f"{cls.__name__}: {size} bytes, struct {struct} {sizes[struct]}"
    for name, (off, width) in layout.items():
        member = renamed.get(name, name)
        if member is None:
            continue  # checked by a test of its own below
        assert (struct, member) in members, f"{cls.__name__}.{name}: no member {member} in {struct}"
        assert (off, width) == members[(struct, member)], \
            f"{cls.__name__}.{name} at {off}+{width}, {struct}.{member} at {members[(struct, member)]}"
    # every C member is covered (an extra Scapy field would have failed the size check)
    c_members = {m for (s, m) in members if s == struct}
    covered = {renamed.get(n, n) for n in layout} | {
        "param" if cls is UcmaEventResp else None,
        "data" if cls is AcmHdr else None,
        "addrs" if cls is AcmEpConfigData else None,
        "path_data" if cls is UcmaQueryPathResp else None}
    assert c_members <= covered, f"{struct}: members {sorted(c_members - covered)} not in {cls.__name__}"


def test_split_members_cover_their_c_member(oracle):
    sizes, members, _ = oracle
    ev, _ = scapy_layout(UcmaEventResp)
    off, size = members[("rdma_ucm_event_resp", "param")]
    # the union: read as rdma_ucm_conn_param, the rest of rdma_ucm_ud_param after it
    assert ev["param"][0] == off and ev["param"][1] == sizes["rdma_ucm_conn_param"]
    assert ev["param_rest"] == (off + sizes["rdma_ucm_conn_param"],
                                size - sizes["rdma_ucm_conn_param"])
    assert size == sizes["rdma_ucm_ud_param"]
    hdr, _ = scapy_layout(AcmHdr)
    data_off, data_size = members[("acm_hdr", "data")]
    assert [hdr[n] for n in ("src_out", "src_index", "dst_index")] == \
        [(data_off + i, 1) for i in range(data_size)]  # acm.h: #define src_out data[0] ...
    address, _ = scapy_layout(AcmEpAddrData, type=0x0002)
    assert address["info"] == members[("acm_ep_addr_data", "info")]  # the other union member
    ep, _ = scapy_layout(AcmEpConfigData)
    assert ep["addrs"][0] == members[("acm_ep_config_data", "addrs")][0]
    # UcmaAhAttr flattens ib_uverbs_ah_attr's grh (struct ib_uverbs_global_route)
    ah, _ = scapy_layout(UcmaAhAttr)
    grh_off, _ = members[("ib_uverbs_ah_attr", "dlid")]
    assert grh_off == sizes["ib_uverbs_global_route"]
    for name, member, struct, base in (
            ("dgid", "dgid", "ib_uverbs_global_route", 0),
            ("flow_label", "flow_label", "ib_uverbs_global_route", 0),
            ("sgid_index", "sgid_index", "ib_uverbs_global_route", 0),
            ("hop_limit", "hop_limit", "ib_uverbs_global_route", 0),
            ("traffic_class", "traffic_class", "ib_uverbs_global_route", 0),
            ("reserved_27", "reserved", "ib_uverbs_global_route", 0),
            ("dlid", "dlid", "ib_uverbs_ah_attr", 0), ("sl", "sl", "ib_uverbs_ah_attr", 0),
            ("src_path_bits", "src_path_bits", "ib_uverbs_ah_attr", 0),
            ("static_rate", "static_rate", "ib_uverbs_ah_attr", 0),
            ("is_global", "is_global", "ib_uverbs_ah_attr", 0),
            ("port_num", "port_num", "ib_uverbs_ah_attr", 0),
            ("reserved_39", "reserved", "ib_uverbs_ah_attr", 0)):
        c_off, c_size = members[(struct, member)]
        assert ah[name] == (base + c_off, c_size), name
    assert sizes["ib_uverbs_ah_attr"] == len(raw(UcmaAhAttr()))


def test_acm_message_built_in_c_dissects_field_for_field(oracle):
    msg = oracle[2]["acm_msg"]
    pkt = AcmHdr(msg)
    assert (pkt.version, pkt.opcode, pkt.status) == (1, 0x81, 3)
    assert (pkt.src_out, pkt.src_index, pkt.dst_index) == (1, 2, 3)
    assert pkt.length == len(msg) == 16 + 2 * 72
    assert pkt.tid == 0x0102030405060708
    assert pkt.is_response()
    entries = pkt[AcmResolve].resolve_data
    assert len(entries) == 2 and not pkt[AcmResolve].trailing
    assert int(entries[0].flags) == (1 << 1) | (1 << 30)
    assert entries[0].flags.DEST and entries[0].flags.NODELAY and not entries[0].flags.SOURCE
    assert entries[0].type == 0x0002 and entries[0].address_text() == "192.0.2.1"
    assert int(entries[1].flags) == 0x2b and entries[1].type == 0x0010
    paths = pkt[AcmResolve].path_records()
    assert len(paths) == 1 and paths[0].dlid == 58 and paths[0].pkey == 0xFFFF
    assert raw(pkt) == msg
    # bytes past acm_hdr.length (a reader's buffer) are not part of the message
    padded = AcmHdr(msg + b"\xee" * 40)
    assert len(padded[AcmResolve].resolve_data) == 2 and not padded[AcmResolve].trailing
    assert padded[Padding].load == b"\xee" * 40
    assert raw(AcmHdr(version=1, opcode=0x01, tid=5) / AcmResolve(resolve_data=[
        AcmEpAddrData(type=0x10, path=PathRecord(msg[16 + 72 + 8:]))])) == \
        msg[:1] + b"\x01\x00\x00\x00\x00" + (16 + 72).to_bytes(2, "little") + \
        (5).to_bytes(8, "little") + b"\0\0\0\0\x10\0\0\0" + msg[16 + 72 + 8:]


def test_perf_query_built_in_c_dissects_field_for_field(oracle):
    """ibacm's PERF_QUERY answer and libacm's PERF_QUERY for an address, network order: the
    length big-endian, the counters too; the request's entry in host order (acm_format_ep_addr
    swaps nothing)."""
    msg = oracle[2]["acm_perf"]
    pkt = AcmHdr(msg)
    assert (pkt.version, pkt.opcode, pkt.status, pkt.src_out, pkt.src_index) == (1, 0x82, 0, 7, 1)
    assert pkt.length == len(msg) == 16 + 7 * 8 and pkt.network_order()
    assert pkt.tid == 0x1122334455667788
    assert pkt[AcmPerfData].values() == [0x0100000000000000 * (i + 1) + 1000 + i
                                         for i in range(7)]
    assert not pkt[AcmPerfData].trailing and raw(pkt) == msg
    query = AcmHdr(oracle[2]["acm_perf_query"])
    assert query.opcode == 0x02 and query.length == 16 + 72
    (entry,) = query[AcmResolve].resolve_data
    assert (int(entry.flags), entry.type, entry.address_text()) == (1, 0x0002, "198.51.100.7")
    assert raw(query) == oracle[2]["acm_perf_query"]
    # the same bytes read as RESOLVE (host order) would be another length: 0x4800
    assert int.from_bytes(msg[6:8], "little") != pkt.length


def test_ep_query_answer_built_in_c_dissects_field_for_field(oracle):
    msg = oracle[2]["acm_ep"]
    pkt = AcmHdr(msg)
    assert (pkt.opcode, pkt.status, pkt.src_out, pkt.length) == (0x83, 0, 2, len(msg))
    ep = pkt[AcmEpConfigData]
    assert (ep.dev_guid, ep.port_num, ep.phys_port_cnt, ep.pkey, ep.addr_cnt) == (
        0x0002c90300a1b2c3, 2, 2, 0x8001, 2)
    assert ep.provider() == "ibacmp"
    assert ep.addresses() == ["192.0.2.1", "fe80::2:c903:a1:b2c3"]
    assert not ep.trailing and raw(pkt) == msg
    # an error answer is the header alone: no body layer
    err = AcmHdr(raw(AcmHdr(opcode=0x83, status=2)))
    assert err.length == 16 and AcmEpConfigData not in err


def _recordings():
    return sorted(OPENSM.glob("*.pcapng"))


# struct ib_user_mad_hdr (ib_user_mad.h): the first five u32 host order, then qpn, qkey (be32),
# lid (be16), sl, path_bits, grh_present, gid_index, hop_limit, traffic_class, gid[16],
# flow_label (be32), pkey_index (u16), reserved[6]
_UMAD_HDR = Struct("<5I")
_UMAD_ADDR = Struct("!IIH6B16sI")
_UMAD_PKEY_INDEX = Struct("<H")  # at byte 56
_UMAD_NAMES = ("agent_id", "status", "timeout_ms", "retries", "length", "qpn", "qkey", "lid",
               "sl", "path_bits", "grh_present", "gid_index", "hop_limit", "traffic_class",
               "gid", "flow_label")


@pytest.mark.parametrize("capture", _recordings(), ids=lambda p: p.name)
def test_user_mad_equals_the_header_packed_from_ib_user_mad_h(capture):
    """Every umad frame ibpath record took of OpenSM and saquery, read by the UserMad layer
    and by plain struct from the C header."""
    frames = [f for f in read_frames(str(capture)) if f.linktype == 252]
    assert frames
    for f in frames:
        pdu = ExportedPDU(f.data)
        buf = bytes(pdu.payload)
        pkt = UserMad(buf)
        theirs = dict(zip(_UMAD_NAMES, _UMAD_HDR.unpack_from(buf) + _UMAD_ADDR.unpack_from(buf, 20)))
        theirs["pkey_index"] = _UMAD_PKEY_INDEX.unpack_from(buf, 56)[0]
        ours = {n: pkt.getfieldval(n) for n in theirs}
        ours["gid"] = bytes(pkt.fields_desc[14].addfield(pkt, b"", pkt.gid))
        assert ours == theirs, f"{capture.name} frame {f.number}"
        assert isinstance(pkt.payload, MAD) and raw(pkt) == buf[:len(raw(pkt))]
        assert raw(pkt.payload)[:24] == buf[64:88]


def test_exported_pdu_names_reach_the_layers():
    assert EXPORTED_PDU_DISSECTORS[UCMA_DISSECTOR] is UcmaCmdHdr
    assert EXPORTED_PDU_DISSECTORS[UMAD_DISSECTOR] is UserMad
    assert EXPORTED_PDU_DISSECTORS[ACM_DISSECTOR] is AcmHdr


def test_ucma_command_and_its_response_dissect_as_one_call():
    call = UcmaCmdHdr(out_len=8 + 6 * 72) / UcmaQuery(response=0x1000, id=7, option=1)
    resp = UcmaQueryPathResp(path_data=[PathRecData(flags=0x2b, path_record=PathRecord(dlid=58))])
    assert raw(resp)[:8] == b"\1\0\0\0\0\0\0\0"  # num_paths counted
    pkt = UcmaCmdHdr(raw(call) + raw(resp))
    assert pkt.cmd == 19 and pkt.in_len == 16 and pkt.out_len == 8 + 6 * 72
    assert pkt[UcmaQuery].id == 7 and pkt[UcmaQueryPathResp].num_paths == 1
    assert pkt[UcmaQueryPathResp].path_data[0].path_record.dlid == 58
    assert PathArray not in pkt  # a readback, not a blob
    ev = UcmaCmdHdr(raw(UcmaCmdHdr(out_len=336) / UcmaGetEvent() /
                        UcmaEventResp(id=7, event=2, status=(1 << 32) - 110)))
    assert ev[UcmaEventResp].event == 2 and ev[UcmaEventResp].signed_status() == -110
    assert "ROUTE_RESOLVED" in ev[UcmaEventResp].mysummary()
    so = UcmaCmdHdr(raw(UcmaCmdHdr() / UcmaSetOption(optval=0xdead, id=7, optlen=72)))
    assert so[UcmaSetOption].is_ib_path() and "PATH" in so[UcmaSetOption].mysummary()
    cid = UcmaCmdHdr(raw(UcmaCmdHdr(out_len=4) / UcmaCreateId() / UcmaCreateIdResp(id=9)))
    assert cid[UcmaCreateIdResp].id == 9
    unknown = UcmaCmdHdr(raw(UcmaCmdHdr(cmd=1) / Raw(b"\1" * 16)))
    assert unknown.cmd == 1 and isinstance(unknown.payload, Raw)


def test_sockaddr_text():
    import socket
    import struct
    sin = struct.pack("<H", socket.AF_INET) + struct.pack("!H", 7471) + \
        socket.inet_aton("192.0.2.1") + b"\0" * 8
    assert sockaddr_text(sin) == "192.0.2.1:7471"
    sin6 = struct.pack("<H", socket.AF_INET6) + struct.pack("!HI", 7471, 0) + \
        socket.inet_pton(socket.AF_INET6, "fe80::20") + b"\0" * 4
    assert sockaddr_text(sin6) == "[fe80::20]:7471"
    assert sockaddr_text(b"\0" * 28) == "AF_UNSPEC"
    assert UcmaResolveIp(dst_addr=sin6 + b"\0" * 0).mysummary().endswith("[fe80::20]:7471")


# include/uapi/rdma/rdma_user_cm.h and include/rdma/rdma_cm.h as of Linux 6.18, transcribed
# in declaration order (the enums have no explicit values): Debian 12's linux-libc-dev (6.1)
# has neither the IB service commands nor their events
_UAPI_CMDS = """CREATE_ID DESTROY_ID BIND_IP RESOLVE_IP RESOLVE_ROUTE QUERY_ROUTE CONNECT LISTEN
ACCEPT REJECT DISCONNECT INIT_QP_ATTR GET_EVENT GET_OPTION SET_OPTION NOTIFY JOIN_IP_MCAST
LEAVE_MCAST MIGRATE_ID QUERY BIND RESOLVE_ADDR JOIN_MCAST RESOLVE_IB_SERVICE
WRITE_CM_EVENT""".split()
_CM_EVENTS = """ADDR_RESOLVED ADDR_ERROR ROUTE_RESOLVED ROUTE_ERROR CONNECT_REQUEST
CONNECT_RESPONSE CONNECT_ERROR UNREACHABLE REJECTED ESTABLISHED DISCONNECTED DEVICE_REMOVAL
MULTICAST_JOIN MULTICAST_ERROR ADDR_CHANGE TIMEWAIT_EXIT ADDRINFO_RESOLVED
ADDRINFO_ERROR""".split()
_QUERY_OPTIONS = "ADDR PATH GID IB_SERVICE".split()


def test_ucma_names_are_the_kernels_enums_in_order():
    from ibpath_scapy.layers.ucma import CM_EVENTS, QUERY_OPTIONS, UCMA_COMMANDS
    assert UCMA_COMMANDS == dict(enumerate(_UAPI_CMDS))
    assert CM_EVENTS == dict(enumerate(_CM_EVENTS))
    assert QUERY_OPTIONS == dict(enumerate(_QUERY_OPTIONS))


def test_an_ib_service_resolution_decodes_by_name(tmp_path):
    """A RESOLVE_IB_SERVICE write and the ADDRINFO_ERROR event as ibpath record writes them
    (Linux 6.17): named, not "command 23" and "event 17"."""
    from ibpath_scapy.craft import CaptureBuilder
    from ibpath_scapy.engines.scapy.decode import decode_file
    from ibpath_scapy.layers.ucma import UcmaCmdHdr, UcmaEventResp, UcmaGetEvent
    path = tmp_path / "ibs.pcapng"
    # struct rdma_ucm_resolve_ib_service: u32 id, u32 reserved, then struct rdma_ucm_ib_service
    # (u64 service_id, char service_name[64], u32 flags, u32 reserved)
    body = (7).to_bytes(4, "little") + bytes(4) + (0x1234).to_bytes(8, "little") + bytes(64) \
        + (1).to_bytes(4, "little") + bytes(4)
    with CaptureBuilder(str(path)) as b:
        b.ucma(UcmaCmdHdr(cmd=23, in_len=len(body)) / Raw(body))
        b.ucma(UcmaCmdHdr(out_len=336) / UcmaGetEvent(),
               response=UcmaEventResp(id=7, event=17, status=(1 << 32) - 61))
    recs = [r for r in decode_file(str(path)) if r["kind"] == "ucma"]
    assert [r["command"] for r in recs] == ["RESOLVE_IB_SERVICE", "GET_EVENT"]
    assert recs[1]["event"] == "ADDRINFO_ERROR" and recs[1]["status"] == -61
