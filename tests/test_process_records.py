"""ucma commands and ACM messages as records (facts.process), and the process time lines the
process rules read (audit/process.py), checked against oracles that are not the layers:

- the C structs of include/uapi/rdma/rdma_user_cm.h and librdmacm/acm.h, unpacked here with
  struct from the raw exported-PDU payloads;
- the stand-in ibacm's own log of what it was asked and answered (captures/rxe/acm/lab.json,
  captures/ibacm/ib-acme.serve.jsonl);
- ib_acme's printout of the counters and endpoints it was answered (captures/ibacm);
- the lab's matrix of what librdmacm handed the kernel and the kernel's verdict, measured on
  a real 6.1 kernel (captures/rxe/acm/matrix.json);
- the CM REQ on the wire, for the kernel's PATH readback.
"""

from __future__ import annotations

import ipaddress
import json
import struct
from pathlib import Path

import pytest

from ibpath_scapy.audit.process import build, librdmacm_view
from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.capture.pcapio import read_frames
from ibpath_scapy.capture.comment import parse_call_comment

from conftest import CAPTURES

ACM = CAPTURES / "rxe" / "acm"
IBACM = CAPTURES / "ibacm"
PROCESS_CAPTURES = sorted(ACM.glob("*.pcapng")) + sorted(IBACM.glob("*.pcapng")) + sorted(
    p for p in (CAPTURES / "corpus").glob("*.pcapng")
    if p.name.startswith(("acm-", "ucma-", "conform-acm")))
LAB = json.loads((ACM / "lab.json").read_text())["scenarios"]
MATRIX = {r["file"]: r for r in json.loads((ACM / "matrix.json").read_text())["rows"]}

# rdma_user_cm.h / acm.h, written from the headers (not from the layers)
HDR = struct.Struct("<IHH")                      # struct rdma_ucm_cmd_hdr
CMD = {"CREATE_ID": 0, "RESOLVE_ROUTE": 4, "CONNECT": 6, "GET_EVENT": 12, "SET_OPTION": 14,
       "QUERY": 19, "RESOLVE_ADDR": 21, "RESOLVE_IB_SERVICE": 23}
EVENTS = {0: "ADDR_RESOLVED", 1: "ADDR_ERROR", 2: "ROUTE_RESOLVED", 3: "ROUTE_ERROR",
          5: "CONNECT_RESPONSE", 9: "ESTABLISHED", 10: "DISCONNECTED",
          16: "ADDRINFO_RESOLVED", 17: "ADDRINFO_ERROR"}
SET_OPTION = struct.Struct("<QIIII")             # optval, id, level, optname, optlen
EVENT_RESP = struct.Struct("<QIIi")              # uid, id, event, status
QUERY = struct.Struct("<QII")                    # response, id, option
RESOLVE_ADDR = struct.Struct("<IIHHI")           # id, timeout_ms, src_size, dst_size, reserved
ACM_HDR = struct.Struct("<BBBBBBHQ")             # struct acm_hdr (RESOLVE: host order)
ACM_EP = struct.Struct("<IHH64s")                # struct acm_ep_addr_data
ACM_EP_CONFIG = struct.Struct(">QBBHHH64s")      # struct acm_ep_config_data (network order)


def acm_header(p: bytes) -> tuple:
    """struct acm_hdr: length in host order for RESOLVE, network order for PERF_QUERY and
    EP_QUERY (acm.h; ibacm acm.c acm_msg_length)."""
    fields = ACM_HDR.unpack_from(p)
    if fields[1] & 0x0F != 0x01:
        fields = fields[:6] + struct.unpack_from(">H", p, 6) + fields[7:]
    return fields
PATH_REC = struct.Struct(">Q16s16sHH")           # ibv_path_record: service_id, dgid, sgid, dlid, slid


def _payload(data: bytes) -> tuple[str, bytes]:
    """The exported PDU's dissector name and payload (Wireshark's exported_pdu TLVs)."""
    off, name = 0, ""
    while off + 4 <= len(data):
        tag, length = struct.unpack_from("!HH", data, off)
        off += 4
        if tag == 0:
            break
        if tag == 12:  # EXP_PDU_TAG_DISSECTOR_NAME
            name = data[off:off + length].rstrip(b"\0").decode()
        off += length
    return name, data[off:]


@pytest.fixture(scope="module", params=PROCESS_CAPTURES, ids=lambda p: p.name)
def capture(request):
    path = request.param
    raw = {f.number: f for f in read_frames(str(path))}
    records = list(decode_file(str(path)))
    return path, raw, records


def test_every_ucma_and_acm_frame_is_a_record(capture):
    """Nothing of ibpath record's is skipped: every ucma or ACM exported PDU has its record."""
    _path, raw, records = capture
    want = {n for n, f in raw.items() if f.linktype == 252
            and _payload(f.data)[0] in ("ibpath.ucma", "ibpath.acm")}
    got = {r["frame"] for r in records if r["kind"] in ("ucma", "acm")}
    assert want and got == want


def test_ucma_records_are_the_c_structs(capture):
    path, raw, records = capture
    if not any(r["kind"] == "ucma" for r in records):
        pytest.skip(f"{path.name}: no ucma command (ib_acme talks to ibacm only)")
    checked = 0
    for rec in (r for r in records if r["kind"] == "ucma"):
        _, p = _payload(raw[rec["frame"]].data)
        cmd, in_len, out_len = HDR.unpack_from(p)
        body = p[HDR.size:]
        assert rec["cmd"] == cmd
        if cmd == CMD["SET_OPTION"]:
            _optval, cm_id, level, optname, optlen = SET_OPTION.unpack_from(body)
            assert (rec["id"], rec["optlen"]) == (cm_id, optlen)
            assert (rec["level"], rec["optname"]) == (
                {0: "ID", 1: "IB"}[level], "PATH" if (level, optname) == (1, 1) else rec["optname"])
        elif cmd == CMD["GET_EVENT"] and len(body) > 8:
            _uid, cm_id, event, status = EVENT_RESP.unpack_from(body, 8)
            assert (rec["id"], rec["event"], rec["status"]) == (cm_id, EVENTS.get(event, rec["event"]), status)
        elif cmd == CMD["QUERY"]:
            _resp, cm_id, option = QUERY.unpack_from(body)
            assert rec["id"] == cm_id and rec["option"] == {
                0: "ADDR", 1: "PATH", 2: "GID", 3: "IB_SERVICE"}[option]
            if option == 3 and len(body) > QUERY.size:  # rdma_ucm_query_ib_service_resp
                num, = struct.unpack_from("<I", body, QUERY.size)
                recs = body[QUERY.size + 8:]
                assert rec["num_service_recs"] == num
                assert len(rec["service_records"]) == len(recs) // 176
                for i, sr in enumerate(rec["service_records"]):  # ib_user_service_rec
                    sid, gid = struct.unpack_from("!Q16s", recs, 176 * i)
                    assert (sr["service_id"], ipaddress.IPv6Address(sr["service_gid"]).packed) \
                        == (sid, gid)
            if option == 1 and len(body) > QUERY.size:
                num, = struct.unpack_from("<I", body, QUERY.size)
                paths = body[QUERY.size + 8:]
                assert rec["num_paths"] == num and len(rec["paths"]) == len(paths) // 72
                for i, path in enumerate(rec["paths"]):
                    flags, = struct.unpack_from("<I", paths, 72 * i)
                    _sid, dgid, _sgid, dlid, slid = PATH_REC.unpack_from(paths, 72 * i + 8)
                    assert path["flags"] == flags
                    pr = path["path_record"]
                    assert (ipaddress.IPv6Address(pr["dgid"]).packed, pr["dlid"], pr["slid"]) == (
                        dgid, dlid, slid)
        elif cmd == CMD["RESOLVE_IB_SERVICE"]:  # rdma_ucm_resolve_ib_service, Linux 6.17
            cm_id, _, sid, _name, flags, _ = struct.unpack_from("<IIQ64sII", body)
            assert (rec["id"], rec["service_id"]) == (cm_id, sid)
            assert rec["service_flags"] == [n for b, n in ((1, "ID"), (2, "NAME")) if flags & b]
        elif cmd == CMD["RESOLVE_ADDR"]:
            cm_id, timeout, *_ = RESOLVE_ADDR.unpack_from(body)
            family, = struct.unpack_from("<H", body, RESOLVE_ADDR.size + 128)
            assert (rec["id"], rec["timeout_ms"]) == (cm_id, timeout)
            assert rec["dst_family"] == {2: "AF_INET", 10: "AF_INET6", 27: "AF_IB"}[family]
        elif cmd == CMD["CREATE_ID"]:
            assert rec["id"] == struct.unpack_from("<I", body, 24)[0]
        else:
            continue
        checked += 1
    assert checked


def test_acm_records_are_the_c_structs(capture):
    _path, raw, records = capture
    for rec in (r for r in records if r["kind"] == "acm"):
        _, p = _payload(raw[rec["frame"]].data)
        version, opcode, status, _o, _s, _d, length, tid = acm_header(p)
        a = rec["acm"]
        assert (a["version"], a["opcode"], a["status"], a["length"], a["tid"]) == (
            version, opcode, status, length, tid)
        assert rec["response"] == bool(opcode & 0x80)
        body = p[ACM_HDR.size:length] if length <= len(p) else p[ACM_HDR.size:]
        if opcode == 0x82:  # PERF_QUERY's answer: src_out big-endian counters
            n = min(_o, len(body) // 8)
            assert rec.get("counters", []) == list(struct.unpack_from(f">{n}Q", body))
            continue
        if opcode == 0x83:  # EP_QUERY's answer: struct acm_ep_config_data, addr_cnt names
            if not body:
                assert "endpoint" not in rec
                continue
            guid, port, ports, _rsvd, pkey, count, prov = ACM_EP_CONFIG.unpack_from(body)
            names = [body[80 + 64 * i:144 + 64 * i].split(b"\0")[0].decode()
                     for i in range(count)]
            ep = rec["endpoint"]
            assert (ep["dev_guid"], ep["port_num"], ep["phys_port_cnt"], ep["pkey"],
                    ep["provider"], ep["addresses"]) == (
                guid, port, ports, pkey, prov.split(b"\0")[0].decode(), names)
            continue
        if opcode & 0x0F != 0x01 and not body:
            assert "entries" not in rec
            continue
        assert len(rec["entries"]) == len(body) // 72
        assert rec["trailing_bytes"] == (len(body) % 72 if opcode & 0x0F == 0x01 else 0)
        for e, i in zip(rec["entries"], range(0, len(body) - 71, 72)):
            flags, typ, _res, info = ACM_EP.unpack_from(body, i)
            assert (e["flags"], e["type"]) == (flags, typ)
            if typ == 0x10:
                _sid, _dgid, sgid, _dl, _sl = PATH_REC.unpack_from(info)
                assert ipaddress.IPv6Address(e["path_record"]["sgid"]).packed == sgid
            elif typ == 2:
                assert e["address"] == str(ipaddress.IPv4Address(info[:4]))


def test_each_record_names_the_call_the_recorder_saw(capture):
    _path, raw, records = capture
    for rec in (r for r in records if r["kind"] in ("ucma", "acm")):
        comment = raw[rec["frame"]].comment
        if comment:
            head = comment.splitlines()[0].split()
            c = rec["call"]
            assert (c["source"], c["pid"], c["tid"], c["fd"]) == (
                head[0], int(head[-5]), int(head[-3]), int(head[-1]))


def test_the_comment_reader_on_the_recorders_lines():
    c = parse_call_comment("ucma write SET_OPTION pid 393 tid 394 fd 3\nrc=-1 errno=EINVAL")
    assert (c["call"], c["pid"], c["tid"], c["fd"], c["rc"], c["errno"]) == (
        "write SET_OPTION", 393, 394, 3, -1, "EINVAL")
    c = parse_call_comment("rdma_set_option=0\nucma SET_OPTION(IB, IB_PATH) optval pid 7 tid 7 "
                           "fd 3 optlen 216\nrc=32")
    assert (c["call"], c["fd"], c["rc"]) == ("SET_OPTION(IB, IB_PATH) optval", 3, 32)
    c = parse_call_comment("ucma write QUERY pid 1 tid 1 fd 3\nrc=24\nresponse: 80 bytes written "
                           "back by the kernel\ntruncated: response 80 of 9000 bytes recorded")
    assert c["response_bytes"] == 80 and c["caps"] == ["truncated: response 80 of 9000 bytes recorded"]
    assert parse_call_comment("rdma_set_option=-EINVAL") is None
    assert parse_call_comment(None) is None


# -- against the lab's own account ---------------------------------------------------------------

def _scenario(path: Path) -> str:
    return path.stem


@pytest.mark.parametrize("path", sorted(ACM.glob("*.pcapng")), ids=lambda p: p.name)
def test_acm_exchanges_are_what_the_stand_in_logged(path):
    """Every RESOLVE and answer the stand-in ibacm logged, in order, and nothing else."""
    records = list(decode_file(str(path)))
    view = build(records)
    log = LAB[_scenario(path)].get("acm", [])
    assert len(view.exchanges) == len(log)
    for x, entry in zip(view.exchanges, log):
        for rec, side in ((x.request, entry["request"]), (x.response, entry.get("answer"))):
            if side is None:
                assert rec is None
                continue
            a = rec.acm
            assert (a.opcode_name, a.status_name, a.tid) == (side["opcode"], side["status"],
                                                            side["tid"])
            if a.length <= 592:  # a longer answer is what the client read, not what was sent
                assert a.length == side["length"]
                logged_entries = side.get("entries", [])  # an error answer: its header alone
                assert [e.type_name for e in rec.entries] == [e["type"] for e in logged_entries]
                for e, logged in zip(rec.entries, logged_entries):
                    assert e.flags == logged["flags"]
                    if e.path_record is not None:
                        pr = e.path_record
                        assert (pr.sgid, pr.dgid, pr.sl, pr.tclass, pr.flow_label) == (
                            logged["sgid"], logged["dgid"], logged["sl"], logged["tclass"],
                            logged["flow_label"])


@pytest.mark.parametrize("name", sorted(MATRIX), ids=str)
def test_hand_overs_are_what_the_lab_measured(name):
    """What librdmacm passed the kernel and the kernel's verdict (the matrix, measured on a
    6.1 kernel): a hand-over where the matrix has one, with its length and verdict."""
    row = MATRIX[name]
    view = build(list(decode_file(str(ACM / name))))
    hand_overs = [h for cm in view.cm_ids for h in cm.hand_overs]
    if row["passed"].startswith("no rdma_set_option"):
        assert not hand_overs
        return
    h, = hand_overs
    assert h.state == "addr_resolved"
    assert h.acm is not None and h.acm.response is not None
    assert len(h.blob.blob_records) * 72 == row["passed_length"] == h.command.optlen
    assert h.blob.blob.set_option_result == row["verdict"]


@pytest.mark.parametrize("name", sorted(MATRIX), ids=str)
def test_the_kernels_readback_is_the_path_on_the_wire(name):
    """The PATH readback after ROUTE_RESOLVED is what the kernel put in the CM REQ: GIDs, flow
    label, traffic class, hop limit, SL, rate, MTU (the LIDs are not on the RoCE wire)."""
    records = list(decode_file(str(ACM / name)))
    view = build(records)
    readbacks = [q for cm in view.cm_ids for q, _ in cm.readbacks]
    reqs = [r for r in records if r["kind"] == "cm" and "cm_req" in r]
    if not reqs:
        return
    assert readbacks, f"{name}: a CM REQ but no readback"
    got = readbacks[-1].paths[0].path_record
    req = reqs[0]["cm_req"]
    assert (got.sgid, got.dgid, got.flow_label, got.tclass, got.hop_limit, got.sl, got.rate,
            got.mtu) == (
        req["primary_local_gid"], req["primary_remote_gid"], req["primary_flow_label"],
        req["primary_traffic_class"], req["primary_hop_limit"], req["primary_sl"],
        req["primary_packet_rate"], req["path_packet_payload_mtu"])


def test_a_cm_id_time_line():
    """acm-blob-endpoints: librdmacm's probe cm_id (CREATE_ID, BIND, QUERY, DESTROY_ID), then
    the connection's; ADDR_RESOLVED before the ACM exchange; the hand-over from its answer;
    the readback after ROUTE_RESOLVED."""
    view = build(list(decode_file(str(ACM / "acm-blob-endpoints.pcapng"))))
    probe, conn = view.cm_ids
    assert (probe.id, conn.id) == (1, 1) and not probe.hand_overs
    h, = conn.hand_overs
    assert (h.state, h.command.frame, h.blob.frame, h.acm.frames) == ("addr_resolved", 23, 24,
                                                                      [21, 22])
    assert view.exchanges[0].followed_by is h.command
    (q, of), = conn.readbacks
    assert q.frame == 26 and of is h
    assert conn.state == "connect"


@pytest.mark.parametrize("name", sorted(MATRIX), ids=str)
def test_the_librdmacm_layer_predicts_what_reached_the_kernel(name):
    """The kernel view's librdmacm layer, from the ACM answer alone, against what the lab
    saw librdmacm hand the kernel and what the kernel made of it (rdma_resolve_route runs:
    ucmatose resolves with rdma_getaddrinfo and never sets a route)."""
    row = MATRIX[name]
    if row["client"] == "ucmatose":
        return
    view = build(list(decode_file(str(ACM / name))))
    x, = view.exchanges
    if x.response is None:
        assert row["answered"] == "nothing"
        return
    lib = librdmacm_view(x)
    handed_over = not row["passed"].startswith("no rdma_set_option")
    assert lib["librdmacm"]["accepted"] == handed_over, lib["librdmacm"]
    if handed_over:
        ucma = lib["ucma"]
        assert (f"gmp {ucma['gmp']}" if ucma["accepted"] else "EINVAL") == row["ucma"]
        assert len(lib["librdmacm"]["entries"]) * 72 == row["passed_length"]


def test_ib_acme_recording_is_what_ib_acme_printed_and_the_stand_in_logged():
    """captures/ibacm: every recorded message is the bytes the stand-in logged, request then
    answer; the counters and endpoints decoded are what ib_acme printed of them (its
    printout, ib-acme.txt, is libacm's own reading of the network-order answers)."""
    from test_acmserve import ep_rows, perf_column, perf_rows

    path = IBACM / "ib-acme.pcapng"
    raw = [_payload(f.data)[1] for f in read_frames(str(path))]
    log = [json.loads(x) for x in (IBACM / "ib-acme.serve.jsonl").read_text().splitlines()]
    assert raw == [bytes.fromhex(x[side]["hex"]) for x in log for side in ("request", "answer")]
    records = list(decode_file(str(path), render=True))
    assert all(r["acm"]["length"] == r["size"] and "errors" not in r for r in records)
    runs = (IBACM / "ib-acme.txt").read_text().split("return status 0x0\n")
    counters = [r["counters"] for r in records if "counters" in r]
    assert counters == [perf_rows(runs[0])[1][0], list(perf_column(runs[3]).values()),
                        perf_rows(runs[4])[1][0]]
    assert [0, 1] == [c[1] for c in counters[:2]]  # Resolve Count, before and after the RESOLVE
    endpoints = [r["endpoint"] for r in records if "endpoint" in r]
    printed = [ep_rows(runs[1])[0], ep_rows(runs[5])[0]]
    assert [(e["dev_guid"], e["port_num"], e["pkey"], e["provider"], e["addresses"])
            for e in endpoints] == [(p["guid"], p["port"], p["pkey"], p["prov"], p["addresses"])
                                    for p in printed]
    assert "Failed to query perf data: Cannot assign requested address" in runs[6]
    assert records[-1]["acm"]["status_name"] == "ESRCADDR" and "counters" not in records[-1]
    assert build(list(decode_file(str(path)))).exchanges[0].request.frame == 5
    assert len(build(list(decode_file(str(path)))).exchanges) == 1
