"""The ucma side of IB service resolution (Linux 6.17, issue 41 item 2): RESOLVE_IB_SERVICE,
the ADDRINFO events and QUERY IB_SERVICE, as layers and as process facts.

The oracle of the layouts is include/uapi/rdma/rdma_user_cm.h written here with struct, host
order (x86_64, little-endian), with the reserved words of the 6.18 ABI fix (rdma-core and the
kernel agree on them on every 64-bit architecture):

    struct rdma_ucm_ib_service { __aligned_u64 service_id; __u8 service_name[64];
                                 __u32 flags; __u32 reserved; };            /* 80 bytes */
    struct rdma_ucm_resolve_ib_service { __u32 id; __u32 reserved;
                                         struct rdma_ucm_ib_service ibs; }; /* 88 bytes */
    struct rdma_ucm_query_ib_service_resp { __u32 num_service_recs; __u32 reserved;
                                            struct ib_user_service_rec recs[]; };

and ib_user_service_rec (ib_user_sa.h) is the ServiceRecord in SA wire layout, 176 bytes,
packed here as OpenSM's ib_service_record_t. ucma_query_ib_service (ucma.c) copies as many
records as the caller's buffer has room for, at most the kernel's count, and always says the
count: librdmacm asks room for 6 and asks again for the kernel's count.
"""

from __future__ import annotations

import ipaddress
import struct

from ibpath_scapy.craft import CaptureBuilder
from ibpath_scapy.engines import tshark as tshark_engine
from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.facts import public
from ibpath_scapy.layers.ucma import (
    UcmaCmdHdr,
    UcmaCreateId,
    UcmaCreateIdResp,
    UcmaEventResp,
    UcmaGetEvent,
    UcmaIbService,
    UcmaQuery,
    UcmaQueryIbServiceResp,
    UcmaResolveIbService,
)
from ibpath_scapy.layers.sa import ServiceRecord

from tshark_util import assert_clean, needs_tshark, run_tshark, tshark_env

CMD_RESOLVE_IB_SERVICE, CMD_QUERY, CMD_GET_EVENT = 23, 19, 12  # RDMA_USER_CM_CMD_*
QUERY_IB_SERVICE = 3  # RDMA_USER_CM_QUERY_IB_SERVICE
ADDRINFO_RESOLVED, ADDRINFO_ERROR = 16, 17  # enum rdma_cm_event_type
FLAG_ID, FLAG_NAME = 1, 2  # RDMA_USER_CM_IB_SERVICE_FLAG_*
RESOLVE = struct.Struct("<II Q64sII")
QUERY_RESP = struct.Struct("<II")
SR = struct.Struct(">Q16sHHI16s64s16B8H4I2Q")  # ib_service_record_t


def sr(k: int, name: bytes) -> bytes:
    return SR.pack(0x1000000000000000 + k, ipaddress.IPv6Address(f"fe80::{k + 1:x}").packed,
                   0xFFFF, 0, 0xFFFFFFFF, bytes(16), name, *([k] * 16), *([k] * 8),
                   *([k] * 4), k, k)


NAMES = [b"ibpath.svc\0", b"caf\xe9\0"] + [f"svc{k}\0".encode() for k in range(2, 8)]
TEXTS = ["ibpath.svc", "caf\\xe9"] + [f"svc{k}" for k in range(2, 8)]


def test_resolve_ib_service_packs_as_the_uapi_struct():
    layer = UcmaResolveIbService(id=7, ibs=UcmaIbService(
        service_id=0x1122334455667788, service_name="ibpath.svc", flags=FLAG_ID | FLAG_NAME))
    want = RESOLVE.pack(7, 0, 0x1122334455667788, b"ibpath.svc", FLAG_ID | FLAG_NAME, 0)
    assert RESOLVE.size == 88 and bytes(layer) == want
    back = UcmaResolveIbService(want)
    assert back.ibs.service_id == 0x1122334455667788 and int(back.ibs.flags) == 3


def test_query_ib_service_resp_packs_as_the_uapi_struct():
    recs = [sr(k, NAMES[k]) for k in range(3)]
    want = QUERY_RESP.pack(8, 0) + b"".join(recs)
    layer = UcmaQueryIbServiceResp(num_service_recs=8, recs=[ServiceRecord(r) for r in recs])
    assert bytes(layer) == want
    back = UcmaQueryIbServiceResp(want)
    assert back.num_service_recs == 8 and [bytes(r) for r in back.recs] == recs


def capture(path) -> None:
    """A librdmacm rdma_resolve_ib_service as ibpath record writes it: CREATE_ID, the
    RESOLVE_IB_SERVICE write, the ADDRINFO_RESOLVED event, QUERY IB_SERVICE with room for 6
    of the kernel's 8 records, then again with room for 8; then a second service, by
    ServiceID, that fails (ADDRINFO_ERROR, status -ENODATA)."""
    def query(n: int, copied: int):
        resp = QUERY_RESP.pack(8, 0) + b"".join(sr(k, NAMES[k]) for k in range(copied))
        return UcmaCmdHdr(out_len=QUERY_RESP.size + n * SR.size) / UcmaQuery(
            id=7, option=QUERY_IB_SERVICE), resp

    with CaptureBuilder(str(path)) as b:
        b.ucma(UcmaCmdHdr(out_len=4) / UcmaCreateId(ps=0x013F), response=UcmaCreateIdResp(id=7))
        b.ucma(UcmaCmdHdr() / UcmaResolveIbService(id=7, ibs=UcmaIbService(
            service_name=b"caf\xe9", flags=FLAG_NAME)))
        b.ucma(UcmaCmdHdr(out_len=336) / UcmaGetEvent(),
               response=UcmaEventResp(id=7, event=ADDRINFO_RESOLVED))
        for n, copied in ((6, 6), (8, 8)):
            cmd, resp = query(n, copied)
            b.ucma(cmd, response=resp)
        b.ucma(UcmaCmdHdr() / UcmaResolveIbService(id=7, ibs=UcmaIbService(
            service_id=0x1234, flags=FLAG_ID)))
        b.ucma(UcmaCmdHdr(out_len=336) / UcmaGetEvent(),
               response=UcmaEventResp(id=7, event=ADDRINFO_ERROR, status=(1 << 32) - 61))


def _ucma(recs) -> list[dict]:
    return [public(r) for r in recs if r["kind"] == "ucma"]


def check(recs: list[dict]) -> None:
    assert [r["command"] for r in recs] == ["CREATE_ID", "RESOLVE_IB_SERVICE", "GET_EVENT",
                                            "QUERY", "QUERY", "RESOLVE_IB_SERVICE", "GET_EVENT"]
    assert not [r for r in recs if r.get("errors")]
    ask = recs[1]
    assert (ask["id"], ask["service_id"], ask["service_name"], ask["service_flags"]) == \
        (7, 0, "caf\\xe9", ["NAME"])
    assert (recs[2]["event"], recs[2]["status"]) == ("ADDRINFO_RESOLVED", 0)
    for q, copied in ((recs[3], 6), (recs[4], 8)):
        assert q["option"] == "IB_SERVICE" and q["num_service_recs"] == 8
        got = q["service_records"]
        assert [r["service_id"] for r in got] == [0x1000000000000000 + k for k in range(copied)]
        assert [r["service_name"] for r in got] == TEXTS[:copied]
        assert [r["service_gid"] for r in got] == [f"fe80::{k + 1:x}" for k in range(copied)]
    assert (recs[5]["service_id"], recs[5]["service_name"], recs[5]["service_flags"]) == \
        (0x1234, "", ["ID"])
    assert (recs[6]["event"], recs[6]["status"]) == ("ADDRINFO_ERROR", -61)


def test_an_ib_service_resolution_as_process_facts(tmp_path):
    path = tmp_path / "ibs.pcapng"
    capture(path)
    check(_ucma(decode_file(str(path))))


@needs_tshark
def test_the_plugin_gives_the_same_process_facts(tmp_path, monkeypatch):
    from ibpath_scapy.luagen.plugin import generate_plugin

    plugin = tmp_path / "ibpath.lua"
    plugin.write_text(generate_plugin())
    path = tmp_path / "ibs.pcapng"
    capture(path)
    for k, v in tshark_env().items():
        monkeypatch.setenv(k, v)
    tshark = _ucma(tshark_engine.tshark_records(str(path), plugin=plugin))
    check(tshark)
    assert tshark == _ucma(decode_file(str(path)))
    run = run_tshark(path, ["-X", f"lua_script:{plugin}", "-V"])
    assert_clean(run.stdout, run.stderr)
    assert 'Service Name: "caf\\xe9"' in run.stdout
