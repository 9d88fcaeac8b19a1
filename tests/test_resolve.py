"""`ibpath resolve` against OpenSM on an ibsim fabric, judged by oracles it does not control:
saquery's printout for the same pair on the same fabric, OpenSM's own answers recorded by
`ibpath record`, and the raw path array unpacked as rdma-core's sa.h lays it out
(tests/oracles.py). The branches OpenSM never takes (a forward path that is not reversible, an
SA error on a follow-up query) run the same resolver and LiveSA over craft's SA model, the
transport replaced, not the algorithm.
"""

from __future__ import annotations

import itertools
import shutil
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ibpath_scapy.craft.sa_model import Fabric as ModelFabric, Port, SAModel
from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.facts import public
from ibpath_scapy.layers.umad import UMAD_TID_LOW
from ibpath_scapy.record.fabric import (DEFAULT_TOPOLOGY, Daemon, Fabric, abstract_socket_exists,
                                        missing_tools, wait_for)
from ibpath_scapy.resolve.kernel import SEED, SEED_NATIVE, SINGLE, choose
from ibpath_scapy.resolve.live import LiveSA, ModelTransport, SATimeout
from ibpath_scapy.resolve.report import outcome_dict, outcome_lines
from ibpath_scapy.resolve.run import EXIT_SA_ERROR, resolve
from oracles import ibv_path_data
from fabric_util import FABRIC_MISSING as _MISSING, needs_fabric
from saquery_oracle import printed_path_record, saquery_records

HOSTS = ("Hca1", "Hca2", "Hca3")


@pytest.fixture(scope="module")
def fabric():
    if _MISSING:
        pytest.skip("missing " + ", ".join(_MISSING))
    with Fabric(DEFAULT_TOPOLOGY, sm_host="Hca1") as fab:
        yield fab


def resolve_on(fab, host: str, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return fab.run(host, [sys.executable, "-m", "ibpath_scapy", "resolve", *argv],
                   timeout=timeout)


def saquery_path(fab, host: str, sgid: str, dgid: str) -> dict:
    """The one PathRecord saquery prints for SGID → DGID (LMC 0: one path a pair)."""
    r = fab.run(host, ["saquery", "-p", "--sgid-to-dgid", f"{sgid}-{dgid}"])
    assert r.returncode == 0, r.stderr.decode()
    printed = [printed_path_record(p) for p in saquery_records(r.stdout.decode())]
    assert len(printed) == 1, r.stdout.decode()
    return printed[0]


def audit(path: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "ibpath_scapy", "audit", "--format", "json",
                        str(path)], capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return json.loads(r.stdout)


# -- against OpenSM ---------------------------------------------------------------------------

@needs_fabric
@pytest.mark.parametrize("src,dst", list(itertools.permutations(HOSTS, 2)))
def test_blob_record_is_saquerys_answer_for_every_pair(fabric, tmp_path, src, dst):
    s, d = fabric.nodes[src], fabric.nodes[dst]
    blob = tmp_path / "blob.bin"
    r = resolve_on(fabric, src, d.gid, "--format", "json", "-o", str(blob))
    assert r.returncode == 0, r.stderr.decode()
    out = json.loads(r.stdout)
    expected = saquery_path(fabric, src, s.gid, d.gid)
    # the raw array, unpacked as sa.h lays it out: one 0x2b record, saquery's path
    assert ibv_path_data(blob.read_bytes()) == [(0x2B, expected)]
    assert out["blob"]["records"][0]["path_record"] == expected
    assert out["layout"] == SINGLE and out["sgid"] == s.gid and out["dgid"] == d.gid
    # the seed's forward query: a Get of SGID, DGID, P_Key 0xffff, NumbPath 1, to the SM LID
    (q,) = out["queries"]
    assert (q["method"], q["component_mask"], q["status"]) == ("Get", 0x300C, 0)
    assert out["port"]["sm_lid"] == fabric.sa_lid and out["port"]["lid"] == s.lid
    assert out["kernel_view"]["ucma"]["accepted"] and out["kernel_view"]["ucma"]["gmp"] == 0


@needs_fabric
def test_seed_layout_has_the_swapped_query_as_return_record(fabric, tmp_path):
    s, d = fabric.nodes["Hca2"], fabric.nodes["Hca3"]
    rec, blob = tmp_path / "seed.pcapng", tmp_path / "seed.bin"
    r = resolve_on(fabric, "Hca2", d.gid, "--layout", "seed", "--format", "json",
                   "-o", str(blob), "--record", str(rec))
    assert r.returncode == 0, r.stderr.decode()
    out = json.loads(r.stdout)
    forward = saquery_path(fabric, "Hca2", s.gid, d.gid)
    back = saquery_path(fabric, "Hca2", d.gid, s.gid)
    assert ibv_path_data(blob.read_bytes()) == [(0x0A, forward), (0x12, back), (0x2B, forward)]
    assert [q["role"] for q in out["queries"]] == ["forward", "return"]
    ret = out["queries"][1]
    assert (ret["query"]["sgid"], ret["query"]["dgid"]) == (d.gid, s.gid)
    assert ret["component_mask"] == 0x300C
    assert [x["from"] for x in out["blob"]["records"]] == ["forward", "return", "forward"]
    # the kernels: ucma falls through to the 0x2b record; ls-multi takes the three
    views = out["kernel_view"]
    assert (views["ucma"]["gmp"], views["ls-multi"]["forward"], views["ls-multi"]["inbound"]) \
        == (2, 0, 1)
    report = audit(rec)
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
    assert report["summary"]["transactions"] == 2


@needs_fabric
def test_recording_audits_clean_and_decodes_as_a_recording(fabric, tmp_path):
    s, d = fabric.nodes["Hca3"], fabric.nodes["Hca1"]
    rec = tmp_path / "rec.pcapng"
    r = resolve_on(fabric, "Hca3", d.gid, "--record", str(rec))
    assert r.returncode == 0, r.stderr.decode()
    report = audit(rec)
    assert report["findings"] == []
    assert report["summary"]["transactions"] == 1
    recs = [public(x) for x in decode_file(str(rec))]
    request, answer, blob = recs
    assert request["mad"]["method_name"] == "Get" and answer["mad"]["method_name"] == "GetResp"
    assert request["umad"]["direction"] == "write" and answer["umad"]["direction"] == "read"
    assert answer["umad"]["request_frame"] == request["frame"]
    assert request["dst"] == answer["src"] == f"LID {fabric.sa_lid}"
    assert answer["path_records"] == [saquery_path(fabric, "Hca3", s.gid, d.gid)]
    assert blob["kind"] == "blob"
    # the text report says where it asked and what the kernel can take
    text = r.stdout.decode()
    assert f"SA at LID {fabric.sa_lid}" in text and "capability file" in text


@needs_fabric
def test_unknown_destination_gives_opensms_status_and_exit_1(tmp_path):
    """The status is the one OpenSM wrote, read from OpenSM's own recording."""
    osm = tmp_path / "opensm.pcapng"
    with Fabric(DEFAULT_TOPOLOGY, sm_host="Hca1", sm_record=osm) as fab:
        nowhere = fab.nodes["Hca3"].gid.rsplit(":", 1)[0] + ":99"
        r = resolve_on(fab, "Hca2", nowhere, "--format", "json")
    assert r.returncode == EXIT_SA_ERROR, r.stderr.decode()
    out = json.loads(r.stdout)
    err_lines = r.stderr.decode().strip().splitlines()
    assert len(err_lines) == 1
    (q,) = out["queries"]
    # OpenSM read our Get and wrote its GetResp
    seen = [x for x in decode_file(str(osm)) if x["kind"] == "sa" and
            x["mad"]["transaction_id"] & UMAD_TID_LOW == q["tid"] & UMAD_TID_LOW]
    assert [x["mad"]["method_name"] for x in seen] == ["Get", "GetResp"]
    sent = seen[1:]
    status = sent[0]["mad"]["status"]
    assert status != 0 and out["error"]["status"] == q["status"] == status
    assert f"status 0x{status:04x}" in err_lines[0] and "forward query" in err_lines[0]
    assert "blob" not in out


@needs_fabric
def test_sa_that_never_answers_times_out_with_exit_2(tmp_path):
    """OpenSM gone after it configured the subnet: the port keeps its SM LID, nothing on it
    takes the SA class. ibsim hands the request back at once with status ETIMEDOUT, as the
    kernel does after its last try; one line says so."""
    rec = tmp_path / "timeout.pcapng"
    with Fabric(DEFAULT_TOPOLOGY, sm_host="Hca1") as fab:
        fab.opensm.stop()
        r = resolve_on(fab, "Hca2", fab.nodes["Hca3"].gid, "--record", str(rec))
        j = resolve_on(fab, "Hca2", fab.nodes["Hca3"].gid, "--format", "json")
    assert j.returncode == 2 and json.loads(j.stdout)["error"]["kind"] == "timeout"
    assert r.returncode == 2, r.stdout.decode() + r.stderr.decode()
    (line,) = r.stderr.decode().strip().splitlines()
    assert "no answer from the SA at LID 1 to the forward query" in line
    assert "timeout of 2000 ms and 2 retries" in line and "status ETIMEDOUT" in line
    recs = [public(x) for x in decode_file(str(rec))]
    assert [x["umad"]["direction"] for x in recs] == ["write", "read"]
    assert recs[1]["umad"]["header"]["status"] == 110  # ETIMEDOUT, handed back
    findings = audit(rec)["findings"]
    assert {f["rule"] for f in findings} == {"SAQ-NO-RESPONSE"}


def test_silent_sa_lid_times_out_by_the_clock(tmp_path):
    """A transport on which nothing comes back: (retries + 1) × timeout, then one line."""
    from ibpath_scapy.resolve.umad import UmadTransport

    class Mute:  # a SaPort whose reads never return anything
        calls: list = []

        def send(self, mad, timeout_ms, retries):
            pass

        def recv(self, wait_ms):
            time.sleep(wait_ms / 1000)
            return None

    t = UmadTransport(Mute(), timeout_ms=100, retries=2)
    t0 = time.monotonic()
    with pytest.raises(SATimeout):
        resolve(LiveSA(t, "fe80::1", "fe80::2"), "auto", choose("ucma"))
    assert time.monotonic() - t0 >= 0.3 and t.failure == "nothing came back within 0.8 s"


def test_port_without_sm_lid_says_so_with_exit_2(tmp_path):
    """ibsim without any subnet manager: the port has no SM LID, so no SA to ask."""
    missing = missing_tools(("ibsim",))
    if missing:
        pytest.skip("missing " + ", ".join(missing))
    fab = Fabric(DEFAULT_TOPOLOGY)
    (fab.work / "ibsim").mkdir()
    (fab.work / "client").mkdir()
    net = fab.work / "topology.net"
    net.write_text(DEFAULT_TOPOLOGY)
    sim = Daemon(["ibsim", "-s", "-n", str(net)], cwd=fab.work / "ibsim", env=fab.base_env(),
                 log=fab.work / "ibsim.out", limit=120)
    fab.daemons.append(sim)
    try:
        wait_for(lambda: abstract_socket_exists(f"{fab.sockname}:ctl"), 30, "ibsim", [sim])
        r = resolve_on(fab, "Hca2", "fe80::1")
    finally:
        fab.stop()
    assert r.returncode == 2
    (line,) = r.stderr.decode().strip().splitlines()
    assert "has no SM LID" in line and "no SA to ask" in line


# -- the branches OpenSM never takes: craft's SA model as the transport ---------------------

def _model(irreversible=()) -> tuple[SAModel, Port, Port]:
    local = Port("local", "fe80::2:c903:0:10", 4, lmc=1)
    remote = Port("remote", "fe80::2:c903:0:20", 8, lmc=1)
    sm = Port("sm", "fe80::2:c903:0:1", 1)
    return SAModel(ModelFabric([sm, local, remote], irreversible=set(irreversible))), local, remote


def test_irreversible_forward_path_gives_three_records():
    model, local, remote = _model({(4, 8)})  # the first LID pair has no reverse route
    sa = LiveSA(ModelTransport(model), local.gid, remote.gid, tid=0x100)
    out = resolve(sa, "auto", choose("ucma", "6.1.0"))
    assert [a.role for a in out.answers] == ["forward", "gmp", "return"]
    assert [a.component_mask for a in out.answers] == [0x300C, 0x380C, 0x300C]
    assert out.layout == SEED
    fwd, ret, gmp = (r for _, r in out.records)
    assert (fwd.slid, fwd.dlid, fwd.reversible) == (4, 8, 0)
    assert (gmp.slid, gmp.dlid, gmp.reversible) == (5, 9, 1)  # the next pair, reversible
    assert (ret.sgid, ret.dgid, ret.slid, ret.dlid) == (remote.gid, local.gid, 8, 4)
    assert out.views["ucma"].gmp == 2 and out.views["proposal"].forward == 0
    assert ibv_path_data(out.blob)[2][1]["slid"] == 5


def test_proposal_kernel_gets_the_seeds_own_order():
    model, local, remote = _model({(4, 8)})
    out = resolve(LiveSA(ModelTransport(model), local.gid, remote.gid), "auto",
                  choose("proposal"))
    assert out.layout == SEED_NATIVE
    assert [f for f, _ in out.records] == [0x03, 0x0A, 0x12]
    assert out.views["proposal"].accepted and not out.views["ucma"].accepted


def test_sa_error_on_the_gmp_query_stops_with_its_status():
    # no pair from local to remote has a reverse route: the Reversible query finds nothing
    model, local, remote = _model({(s, d) for s in (4, 5) for d in (8, 9)})
    out = resolve(LiveSA(ModelTransport(model), local.gid, remote.gid), "auto", choose("ucma"))
    assert out.records is None and out.exit_status == EXIT_SA_ERROR
    assert (out.failed.role, out.failed.status) == ("gmp", 0x0300)
    assert outcome_dict(out, None)["error"]["status_text"] == "NO_RECORDS"
    assert outcome_lines(out, None)[-1].startswith("no path array: the SA answered the gmp "
                                                   "query with status 0x0300")


def test_single_layout_never_asks_follow_ups():
    model, local, remote = _model({(4, 8)})
    transport = ModelTransport(model)
    out = resolve(LiveSA(transport, local.gid, remote.gid), "single", choose("ucma"))
    assert len(transport.requests) == 1 and [f for f, _ in out.records] == [0x2B]


@pytest.mark.parametrize("release,profiles", [
    ("6.1.0-18-amd64", ["ucma", "ls-multi-6.1"]), ("6.3.0", ["ucma", "ls-multi"]),
    ("5.10.0-28-amd64", ["ucma", "ls-legacy"]),
    ("3.10.0-1160.el7.x86_64", ["ucma"]), ("weird", [])])
def test_kernel_choice_from_the_release(release, profiles):
    target = choose(None, release)
    assert target.profile == "ucma" and list(target.covered) == profiles
    assert target.to_dict()["capability_file"] is None
    assert choose("ls-legacy", release).overridden


# -- ib_acme through `acm serve --resolve` -----------------------------------------------------

IB_ACME = shutil.which("ib_acme")


def _shown_by_ib_acme(p: dict) -> dict:
    """What ib_acme's show_path (acme.c) prints of a path, from saquery's fields: mtu, rate
    and packet lifetime masked with 0x1f, as it prints them."""
    return {"dgid": p["dgid"], "sgid": p["sgid"], "dlid": str(p["dlid"]),
            "slid": str(p["slid"]), "flow label": hex(p["flow_label"]),
            "hop limit": str(p["hop_limit"]), "tclass": str(p["tclass"]),
            "reversible": str(p["reversible"]), "pkey": hex(p["pkey"]), "sl": str(p["sl"]),
            "mtu": str(p["mtu"] & 0x1F), "rate": str(p["rate"] & 0x1F),
            "packet lifetime": str(p["packet_life_time"] & 0x1F)}


@needs_fabric
@pytest.mark.skipif(IB_ACME is None, reason="ib_acme is not installed (Debian package ibacm)")
def test_ib_acme_gets_the_seeds_array_from_opensm(fabric, tmp_path):
    """`acm serve --resolve` on Hca2 (through umad2sim), ib_acme -f i by IP address: each path
    ib_acme prints is saquery's answer for the pair the hosts file maps the addresses to; an
    address of no fabric port gives OpenSM's NO_RECORDS as ENODATA, one not in the file
    EDESTADDR."""
    from test_acmserve import path_info

    n = fabric.nodes
    hosts = tmp_path / "hosts"
    hosts.write_text("# ADDRESS GID\n" + "".join(
        f"10.0.0.{k} {n[h].gid}\n" for k, h in enumerate(HOSTS, 1))
        + f"10.0.0.9 {n['Hca3'].gid.rsplit(':', 1)[0]}:99\n")
    sock, log = tmp_path / "acm.sock", tmp_path / "serve.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "ibpath_scapy", "acm", "serve", "--resolve",
                             "--hosts", str(hosts), "--socket", str(sock), "--log", str(log)],
                            env=fabric.env("Hca2"), stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stderr.readline()
        assert "listening on" in line and f"GID {n['Hca2'].gid}" in line, line

        def acme(dst: str, status: int = 0) -> str:
            r = subprocess.run([IB_ACME, "-S", str(sock), "-f", "i", "-s", "10.0.0.2", "-d",
                                dst], capture_output=True, text=True, timeout=60)
            assert r.returncode == status, r.stdout + r.stderr
            return r.stdout
        for k, host in ((1, "Hca1"), (3, "Hca3")):
            shown = path_info(acme(f"10.0.0.{k}"))
            assert shown == _shown_by_ib_acme(
                saquery_path(fabric, "Hca2", n["Hca2"].gid, n[host].gid))
        assert "ib_acm_resolve_ip failed: No data available" in acme("10.0.0.9", 255)
        assert "ib_acm_resolve_ip failed: Cannot assign requested address" in acme(
            "10.0.0.7", 255)
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    logged = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["answer"]["status"] for x in logged] == ["SUCCESS", "SUCCESS", "ENODATA",
                                                        "EDESTADDR"]
    assert [e["flags"] for e in logged[0]["answer"]["entries"]] == [0x2B]
    # one TID counter across the resolutions
    tids = [int(note.split()[3], 16) for x in logged[:3] for note in x["notes"][:1]]
    assert len(set(tids)) == 3


def test_an_answer_longer_than_a_mad_is_read_whole():
    """libibumad's umad_recv (umad.c): a buffer too small fails with ENOSPC and `length` set
    to the message's size; SaPort reads again with that size, as saquery's sa_query does. The
    fake library below behaves as that code does for a 64 + 600-byte RMPP answer."""
    import ctypes
    import errno

    from ibpath_scapy.resolve.umad import SaPort

    message = bytes(64) + bytes(range(256)) * 2 + bytes(88)  # header and a 600-byte MAD

    class Lib:
        reads: list[int] = []

        def umad_recv(self, fd, buf, length, timeout_ms):
            want = length._obj.value
            self.reads.append(want)
            if want < len(message) - 64:
                length._obj.value = len(message) - 64
                ctypes.set_errno(errno.ENOSPC)
                return -errno.ENOSPC
            ctypes.memmove(buf, message, len(message))
            length._obj.value = len(message) - 64
            return 0

    port = SaPort.__new__(SaPort)
    port.lib, port.fd, port.calls = Lib(), 3, []
    assert port.recv(100) == message
    assert Lib.reads == [256, 600] and port.calls[0].data == message
