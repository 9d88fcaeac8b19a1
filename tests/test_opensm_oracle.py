"""OpenSM as the oracle of the queries the layers build (issue 39): a query is sent, as built
by `MAD() / RMPP() / SAHeader(records=[PathRecord(...)])`, to OpenSM 3.3.23 on an ibsim fabric
(tests/sa_client.py: libibumad, no ibpath code), and OpenSM's answer, read here with plain
struct at the offsets of wire-formats.md §2-3, says what the query asked.

OpenSM judges MTU, rate and PacketLifeTime only when a query sets both the value's and the
selector's ComponentMask bits (osm_sa_path_record.c pr_rcv_get_path_parms: "we silently
ignore cases where only the MTU selector is defined", and the value alone is not read
either); it validates a rate only then too (osm_pr_rcv_process: REQ_INVALID for a rate
outside IB_MIN_RATE..IB_MAX_RATE, which starts at 2, 2.5 Gb/s). The fabric: one switch, three
HCAs, LMC 0; every path has MTU 2048 (4), rate 10 Gb/s (3), PacketLifeTime 18 (OpenSM's
subnet_timeout).
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from ibpath_scapy.layers import MAD, RMPP, PathRecord, SAHeader
from ibpath_scapy.layers.coded import RawCode
from ibpath_scapy.record.fabric import Fabric, missing_tools

HERE = Path(__file__).resolve().parent
STATUS_OK, STATUS_REQ_INVALID, STATUS_NO_RECORDS = 0x0000, 0x0200, 0x0300
PATH_MTU, PATH_RATE, PATH_PLT = 4, 3, 18  # what OpenSM answers on this fabric (asked nothing)


@pytest.fixture(scope="module")
def fabric():
    missing = missing_tools(("ibsim", "opensm", "sminfo", "ibaddr"))
    if missing:
        pytest.skip("no ibsim/OpenSM fabric (missing: " + ", ".join(missing) + "; apt-get "
                    "install ibsim-utils libumad2sim0 opensm infiniband-diags)")
    with Fabric(lmc=0, limit=120) as f:
        yield f


def ask(fabric, *queries: PathRecord | tuple[PathRecord, int]) -> list[dict]:
    """Each query, a record (ComponentMask computed by the build) or (record, ComponentMask),
    as a SubnAdmGet(PathRecord) from Hca2 built by the layers; OpenSM's answers read with
    struct: status, the ComponentMask sent back, the answered selector/value bytes."""
    lines = []
    for i, q in enumerate(queries):
        r, mask = q if isinstance(q, tuple) else (q, None)
        lines.append(bytes(MAD(method=0x01, transaction_id=0x3900 + i) / RMPP()
                           / SAHeader(component_mask=mask, records=[r])).hex())
    p = subprocess.run([sys.executable, str(HERE / "sa_client.py"), str(fabric.sa_lid)],
                       input="\n".join(lines) + "\n", capture_output=True, text=True,
                       timeout=60, env=fabric.env("Hca2"), cwd=fabric.work / "client")
    assert p.returncode == 0, p.stderr
    out = []
    for line in p.stdout.split():
        assert line != "timeout", "OpenSM did not answer"
        mad = bytes.fromhex(line)
        mtu, rate, plt = mad[56 + 54], mad[56 + 55], mad[56 + 56]
        out.append({"method": mad[3], "status": struct.unpack_from("!H", mad, 4)[0],
                    "mask": struct.unpack_from("!Q", mad, 48)[0],
                    "mtu": (mtu >> 6, mtu & 0x3F), "rate": (rate >> 6, rate & 0x3F),
                    "plt": (plt >> 6, plt & 0x3F)})
    assert len(out) == len(queries)
    return out


def between(fabric, **fields) -> PathRecord:
    n = fabric.nodes
    return PathRecord(sgid=n["Hca2"].gid, dgid=n["Hca3"].gid, **fields)


def test_the_fabric_answers_its_own_path_when_asked_nothing_more(fabric):
    (a,) = ask(fabric, between(fabric))
    assert (a["status"], a["mtu"], a["rate"], a["plt"]) == (
        STATUS_OK, (2, PATH_MTU), (2, PATH_RATE), (2, PATH_PLT))


def test_a_query_for_an_mtu_rate_or_lifetime_gets_it(fabric):
    """PathRecord(mtu=256) asks for 256 (OpenSM's "exact match" takes a smaller MTU than the
    path's): its ComponentMask has the MTU selector with the value. On main it had MTU alone
    (mask 0x2000c) and OpenSM answered the path's 2048. The same for PacketLifeTime, and for
    a rate the path does not have (exactly 2.5 Gb/s: no record)."""
    mtu, plt, rate, rate_ok = ask(fabric, between(fabric, mtu=256),
                                  between(fabric, packet_life_time=10),
                                  between(fabric, rate="2.5 Gb/s"),
                                  between(fabric, rate="10 Gb/s"))
    assert mtu["mask"] == 0x3000C and (mtu["status"], mtu["mtu"]) == (STATUS_OK, (2, 1))
    assert plt["mask"] == 0x30000C and (plt["status"], plt["plt"]) == (STATUS_OK, (2, 10))
    assert rate["mask"] == 0xC000C and rate["status"] == STATUS_NO_RECORDS
    assert (rate_ok["status"], rate_ok["rate"]) == (STATUS_OK, (2, PATH_RATE))


def test_selectors_by_name_select(fabric):
    """The selector's value goes with it: "less than" 2048 is answered 1024 (OpenSM adjusts to
    the highest MTU below), "greater than" 2048 has no record, "largest available" alone
    (its value bit set by the build too) the path's 2048."""
    less, greater, best = ask(fabric, between(fabric, mtu_selector="less than", mtu=2048),
                              between(fabric, mtu_selector="greater than", mtu=2048),
                              between(fabric, mtu_selector="largest available"))
    assert (less["status"], less["mtu"]) == (STATUS_OK, (2, 3))
    assert greater["status"] == STATUS_NO_RECORDS
    assert best["mask"] == 0x3000C and (best["status"], best["mtu"]) == (STATUS_OK, (2, PATH_MTU))


def test_rate_0_is_no_rate_of_a_path_record(fabric):
    """Rate 0 is the CM REQ's "port current"; in a PathRecord it is reserved: OpenSM refuses
    a query for it (REQ_INVALID), and a PathRecord does not take it as a code."""
    (a,) = ask(fabric, between(fabric, rate=RawCode(0)))
    assert a["status"] == STATUS_REQ_INVALID
    with pytest.raises(ValueError, match="rate"):
        PathRecord(rate=0)


def test_a_value_without_its_selector_is_ignored(fabric):
    """What SAQ-SELECTOR-MISSING warns about, on OpenSM: MTU 256 with its value bit alone, or
    its selector bit alone, is answered with the path's 2048: the query asked for nothing."""
    value_only, selector_only = ask(fabric, (between(fabric, mtu=256), 0x2000C),
                                    (between(fabric, mtu=256), 0x1000C))
    assert (value_only["status"], value_only["mtu"]) == (STATUS_OK, (2, PATH_MTU))
    assert (selector_only["status"], selector_only["mtu"]) == (STATUS_OK, (2, PATH_MTU))


def test_the_craft_sa_model_answers_these_queries_as_opensm(fabric):
    """The craft SA model (ibpath craft's OpenSM) over the same three ports: a half pair and
    "largest available" are answered as OpenSM answers them; a whole pair that selects, which
    it does not model, is refused, never answered wrongly."""
    from ibpath_scapy.craft import sa_model

    ports = [sa_model.Port(h, n.gid, n.lid, mtu=PATH_MTU) for h, n in fabric.nodes.items()]
    model = sa_model.SAModel(sa_model.Fabric(ports, rate=PATH_RATE, packet_life_time=PATH_PLT))
    queries = [(between(fabric, mtu=256), 0x2000C), (between(fabric, mtu=256), 0x1000C),
               between(fabric, mtu_selector="largest available"), between(fabric)]
    for q, a in zip(queries, ask(fabric, *queries)):
        r, mask = q if isinstance(q, tuple) else (q, None)
        req = bytes(MAD(method=0x01, transaction_id=0x3900) / RMPP()
                    / SAHeader(component_mask=mask, records=[r]))
        (resp,) = model.respond(req)
        got = {"status": struct.unpack_from("!H", resp, 4)[0],
               "mtu": (resp[110] >> 6, resp[110] & 0x3F), "rate": (resp[111] >> 6, resp[111] & 0x3F),
               "plt": (resp[112] >> 6, resp[112] & 0x3F)}
        assert got == {k: a[k] for k in got}, (q, got, a)
    with pytest.raises(ValueError, match="does not select paths by mtu"):
        model.respond(bytes(MAD(method=0x01) / RMPP() / SAHeader(records=[
            between(fabric, mtu=256)])))
