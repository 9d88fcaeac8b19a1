"""OpenSM and `saquery SR` as the oracle of ServiceRecord decoding (issue 41, item 3).

On an ibsim fabric (record/fabric.py), a small umad client of the tests (tests/sa_client.py:
libibumad through ctypes, no ibpath code) registers services with OpenSM 3.3.23 by
SubnAdmSet(ServiceRecord); the records are packed here with struct as OpenSM's
ib_service_record_t lays them out. `saquery -K --smkey 1 SR` (trusted: OpenSM hides
ServiceKeys from a query with SM_Key 0, osm_sa_service_record.c __osm_sr_rcv_respond) reads
them back under `ibpath record`, and what ibpath decodes of saquery's recording, through the
Scapy engine and through the generated plugin under tshark, equals what saquery printed.

umad2sim (ibsim 0.10) forwards at most 256 bytes of a MAD (tests/test_real_clients.py): an
answer of several 176-byte records reaches saquery as its first record only (ibpath says the
message was cut), and MAD bytes 224..255 of what any process reads are damaged: a record's
ServiceData64.1 (record bytes 168..175), in the Set OpenSM reads as in the answer saquery
reads. So each service is read back alone: saquery SR, then SubnAdmDelete of the record it
printed, until OpenSM answers with no record at all (an empty GetTableResp, which is not
malformed). OpenSM's own recording holds its whole answers: the first lists every service as
OpenSM read it.
"""

from __future__ import annotations

import ipaddress
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ibpath_scapy.engines import tshark as tshark_engine
from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.facts import public
from ibpath_scapy.record.fabric import Fabric

from fabric_util import TWO_HCAS, needs_fabric
from saquery_oracle import printed_service_record, saquery_service_records

pytestmark = needs_fabric

HERE = Path(__file__).resolve().parent

# IBA 15.2.5.14 / OpenSM ib_types.h ib_service_record_t; the MAD, RMPP and SA headers
# (IBA 13.4.3, 13.6.2.1, 15.2.1.1) with struct, as tests/test_opensm_oracle.py reads them
SR = struct.Struct(">Q16sHHI16s64s16B8H4I2Q")
MAD_HDR = struct.Struct(">BBBBHHQHHI")  # base version, class, class version, method, ...
SA_HDR = struct.Struct(">QHHQ")  # SM_Key, AttributeOffset, reserved, ComponentMask
ATTR_SERVICE_RECORD, MGMT_CLASS_SA = 0x0031, 0x03
SET, DELETE, GET_RESP, DELETE_RESP = 0x02, 0x15, 0x81, 0x95
COMP_ALL = (1 << 37) - 1 & ~(1 << 3)  # every component (bit 3 is the reserved field's)
COMP_RID = 0b111  # ServiceID, ServiceGID, ServiceP_Key: OpenSM's record ID

# (ServiceID, name bytes, lease, how ibpath writes the name)
SERVICES = [
    (0x1000000000000001, b"ibpath.oracle\0", 0xFFFFFFFF, "ibpath.oracle"),
    (0x1000000000000002, b"caf\xe9\\srv\x01\0", 3600, "caf\\xe9\\\\srv\\x01"),
    (0x1000000000000003, b"N" * 64, 0xFFFFFFFF, "N" * 64 + "\\c"),
    (0x1000000000000004, "ünïcode-ß\0".encode(), 60, "ünïcode-ß"),
]


def service(k: int, gid: str) -> dict:
    sid, name, lease, _ = SERVICES[k]
    return {"service_id": sid, "service_gid": gid, "service_pkey": 0xFFFF,
            "service_lease": lease, "service_key": bytes(range(16 * k, 16 * k + 16)),
            "service_name": name.ljust(64, b"\0"),
            **{f"service_data8_{i}": 0x10 * k + i for i in range(16)},
            **{f"service_data16_{i}": 0x1000 * k + 0x100 + i for i in range(8)},
            **{f"service_data32_{i}": 0x10000000 * k + 0x10000 + i for i in range(4)},
            **{f"service_data64_{i}": 0x0100000000000000 * (k + 1) + 0x1122334455 + i
               for i in range(2)}}


def packed(v: dict) -> bytes:
    return SR.pack(v["service_id"], ipaddress.IPv6Address(v["service_gid"]).packed,
                   v["service_pkey"], 0, v["service_lease"], v["service_key"],
                   v["service_name"], *[v[f"service_data8_{i}"] for i in range(16)],
                   *[v[f"service_data16_{i}"] for i in range(8)],
                   *[v[f"service_data32_{i}"] for i in range(4)],
                   *[v[f"service_data64_{i}"] for i in range(2)])


def sa_mad(method: int, tid: int, mask: int, record: bytes) -> str:
    """A ServiceRecord SA MAD in hex, as sa_client.py takes it (SM_Key 1: trusted)."""
    return (MAD_HDR.pack(1, MGMT_CLASS_SA, 2, method, 0, 0, tid, ATTR_SERVICE_RECORD, 0, 0)
            + bytes(12) + SA_HDR.pack(1, 0, 0, mask) + record).hex()


def sa_client(fab: Fabric, host: str, mads: list[str]) -> list[tuple[int, int]]:
    """(method, status) of OpenSM's answer to each MAD, sent by tests/sa_client.py."""
    p = subprocess.run([sys.executable, str(HERE / "sa_client.py"), str(fab.sa_lid)],
                       input="\n".join(mads) + "\n", capture_output=True, text=True,
                       timeout=60, env=fab.env(host), cwd=fab.work / "client")
    assert p.returncode == 0, p.stderr
    out = []
    for line in p.stdout.split():
        assert line != "timeout", "OpenSM did not answer"
        mad = bytes.fromhex(line)
        out.append((mad[3], struct.unpack_from("!H", mad, 4)[0] >> 8))  # status: SA's
    return out


def decoded(path: Path, engine: str) -> list[dict]:
    if engine == "scapy":
        return [public(r) for r in decode_file(str(path))]
    return [public(r) for r in tshark_engine.tshark_records(str(path))]


def as_ibpath(v: dict, text: str) -> dict:
    """A registered service as ibpath's decode shows it."""
    return {**v, "service_key": v["service_key"].hex(), "service_name": text}


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    """Register SERVICES, then read them back one by one with saquery SR under `ibpath
    record` (each round deletes the service saquery printed). Returns the registered
    services, each round's (saquery stdout, recording), and OpenSM's recording."""
    tmp = tmp_path_factory.mktemp("sr-oracle")
    osm = tmp / "opensm.pcapng"
    out = []
    with Fabric(TWO_HCAS, sm_host="HcaA", sm_record=osm) as fab:
        gids = [fab.nodes["HcaB"].gid, fab.nodes["HcaA"].gid]
        registered = [service(k, gids[k % 2]) for k in range(len(SERVICES))]
        answers = sa_client(fab, "HcaB", [sa_mad(SET, 0x5E70 + k, COMP_ALL, packed(v))
                                          for k, v in enumerate(registered)])
        assert answers == [(GET_RESP, 0)] * len(SERVICES)
        by_id = {v["service_id"]: v for v in registered}
        for n in range(len(SERVICES) + 1):
            rec = tmp / f"saquery-{n}.pcapng"
            r = fab.run("HcaB", ["saquery", "-K", "--smkey", "1", "SR"], record=rec)
            assert r.returncode == 0, r.stderr.decode()
            out.append((r.stdout, rec))
            printed = saquery_service_records(r.stdout)
            if n == len(SERVICES):
                assert printed == []
                break
            assert len(printed) == 1, r.stdout
            gone = by_id.pop(printed_service_record(printed[0])["service_id"])
            assert sa_client(fab, "HcaB", [sa_mad(DELETE, 0xDE70 + n, COMP_RID,
                                                  packed(gone))]) == [(DELETE_RESP, 0)]
        assert not by_id
    return registered, out, osm


ENGINES = ["scapy", pytest.param("tshark", marks=pytest.mark.skipif(
    tshark_engine.tshark_path() is None, reason="tshark is not installed"))]


@pytest.mark.parametrize("engine", ENGINES)
def test_saquery_sr_decodes_as_saquery_printed_it(rounds, engine):
    registered, out, _ = rounds
    texts = {sid: text for sid, _, _, text in SERVICES}
    names = {v["service_id"]: v["service_name"] for v in registered}
    seen = []
    for n, (stdout, rec) in enumerate(out):
        recs = decoded(rec, engine)
        assert not [x for x in recs if x["kind"] == "malformed"], recs
        request, answer = (x for x in recs if x["kind"] == "sa")
        # OpenSM held len(SERVICES) - n services: more than one is more than umad2sim
        # carries, and ibpath says the message saquery read was cut
        cut = ["umad message of 256 bytes holds 1 whole record(s) of 176 bytes and 24 bytes "
               "of another: it was cut before the process read it"]
        assert answer.get("errors") == (cut if len(SERVICES) - n > 1 else None), answer
        assert not request.get("errors")
        assert request["mad"]["method_name"] == "GetTable"
        assert answer["mad"]["method_name"] == "GetTableResp"
        assert answer["mad"]["attribute_name"] == "ServiceRecord"
        printed = [printed_service_record(p) for p in saquery_service_records(stdout)]
        assert len(answer["sa_records"]) == len(printed)
        for got, p in zip(answer["sa_records"], printed):
            sid = p["service_id"]
            # the name: saquery printed the registered bytes up to their NUL (all 64 when
            # none ends them); ibpath shows those bytes as the test spells them
            assert p["service_name"] == names[sid].split(b"\0")[0]
            assert got["service_name"] == texts[sid]
            assert got == {**p, "service_name": texts[sid]}
            seen.append(sid)
    assert sorted(seen) == sorted(v["service_id"] for v in registered)


def test_saquery_read_what_was_registered_but_the_damaged_bytes(rounds):
    """Against the registration: every field saquery printed is what the client set, but
    ServiceData64.1, which umad2sim damages on the way to saquery (MAD bytes 224..231)."""
    registered, out, _ = rounds
    by_id = {v["service_id"]: v for v in registered}
    texts = {sid: text for sid, _, _, text in SERVICES}
    for stdout, _rec in out[:-1]:
        (p,) = [printed_service_record(x) for x in saquery_service_records(stdout)]
        want = as_ibpath(by_id[p["service_id"]], texts[p["service_id"]])
        got = {**p, "service_name": texts[p["service_id"]]}
        assert {k: v for k, v in got.items() if k != "service_data64_1"} == \
            {k: v for k, v in want.items() if k != "service_data64_1"}


def test_opensm_answered_every_service_as_it_read_it(rounds):
    """OpenSM's own recording: its first GetTableResp(ServiceRecord), written whole through
    umad, carries every service as OpenSM read it in the client's Set (newest first); those
    are the registered services but for ServiceData64.1, which umad2sim damaged on the way to
    OpenSM (MAD bytes 224..231 of what a process reads). Each later answer has one service
    fewer; the last has none and is not malformed."""
    registered, _, osm = rounds
    texts = {sid: text for sid, _, _, text in SERVICES}
    recs = decoded(osm, "scapy")
    assert not [x for x in recs if x["kind"] == "malformed"]
    sr = [x for x in recs if x["kind"] == "sa" and x["mad"]["attribute_name"] == "ServiceRecord"]
    read = {x["sa_records"][0]["service_id"]: x["sa_records"][0] for x in sr
            if x["mad"]["method_name"] == "Set"}
    answers = [x for x in sr if x["mad"]["method_name"] == "GetTableResp"]
    assert [len(a["sa_records"]) for a in answers] == list(range(len(SERVICES), -1, -1))
    first = answers[0]["sa_records"]
    assert [r["service_id"] for r in first] == [v["service_id"] for v in reversed(registered)]
    assert first == [read[r["service_id"]] for r in first]
    for v in registered:
        got, want = read[v["service_id"]], as_ibpath(v, texts[v["service_id"]])
        assert {k: x for k, x in got.items() if k != "service_data64_1"} == \
            {k: x for k, x in want.items() if k != "service_data64_1"}
    # the Sets' ComponentMask, named by ServiceRecord's components: all 36 of them
    (mask,) = {x["sa"]["component_mask"] for x in sr if x["mad"]["method_name"] == "Set"}
    sets = [x for x in sr if x["mad"]["method_name"] == "Set"]
    assert mask == COMP_ALL and len(sets[0]["sa"]["components"]) == 36
    assert "reserved_3" not in sets[0]["sa"]["components"]
