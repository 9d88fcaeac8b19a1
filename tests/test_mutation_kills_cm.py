"""Where the CM rules' verdicts change (issue 43, item 5: the mutants of
ibpath_scapy/audit/rules/cm.py that survived the older tests; tests/README.md).

Oracles: drivers/infiniband/core/cm.c cm_format_req (the REQ's LIDs are the path's SLID and
DLID when `pri_path->hop_limit <= 1`, else IB_LID_PERMISSIVE 0xFFFF; GIDs, flow label, traffic
class, hop limit, SL and rate from the path; P_Key and MTU from the primary path only) and
cm_ack_timeout (the Local ACK Timeout is at least PacketLifeTime + 1, a 5-bit field: 31 at
most); include/uapi/rdma/ib_user_sa.h's flags (GMP 0x01, PRIMARY 0x02, ALTERNATE 0x04,
OUTBOUND 0x08, INBOUND 0x10, INBOUND_REVERSE 0x20).
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from ibpath_scapy.audit.rules.cm import (
    alternate_record, blob_name, is_rocev2, path_differences, profiles_for,
)

GMP, PRIMARY, ALTERNATE, OUTBOUND, INBOUND, INBOUND_REVERSE = 1, 2, 4, 8, 0x10, 0x20


def path(**kw) -> dict:
    p = dict(sgid="fe80::1", dgid="fe80::2", flow_label=0, tclass=0, hop_limit=0, sl=0, rate=3,
             pkey=0xFFFF, mtu=4, slid=1, dlid=2, packet_life_time=18)
    p.update(kw)
    return p


def req(prefix="primary_", **kw) -> dict:
    """A REQ that agrees with path() in every field."""
    r = {prefix + "local_gid": "fe80::1", prefix + "remote_gid": "fe80::2",
         prefix + "flow_label": 0, prefix + "traffic_class": 0, prefix + "hop_limit": 0,
         prefix + "sl": 0, prefix + "packet_rate": 3, prefix + "local_lid": 1,
         prefix + "remote_lid": 2, prefix + "local_ack_timeout": 19, "pkey": 0xFFFF,
         "path_packet_payload_mtu": 4}
    r.update({(k if k in ("pkey", "path_packet_payload_mtu") else prefix + k): v
              for k, v in kw.items()})
    return r


def diff(r, p, inbound=None, roce=False, shared=True, prefix="primary_"):
    return path_differences(r, prefix, p, inbound, roce, shared)


def test_a_req_as_the_kernel_writes_it_has_no_difference():
    assert diff(req(), path()) == []
    assert diff(req("alternate_"), path(), prefix="alternate_") == []


def test_gids_compare_as_addresses_not_text():
    assert diff(req(local_gid="fe80:0:0:0:0:0:0:1"), path()) == []
    assert diff(req(local_gid="fe80::9"), path()) == [
        "primary_local_gid fe80::9 (path sgid fe80::1)"]


@pytest.mark.parametrize("hop", [0, 1])
def test_a_local_path_carries_the_paths_lids(hop):
    p = path(hop_limit=hop)
    assert diff(req(hop_limit=hop), p) == []
    assert diff(req(hop_limit=hop, local_lid=9, remote_lid=8), p) == [
        "primary_local_lid 9 (path slid 1)", "primary_remote_lid 8 (path dlid 2)"]


@pytest.mark.parametrize("hop", [2, 64, 255])
def test_a_routed_path_carries_the_permissive_lid(hop):
    p = path(hop_limit=hop)
    assert diff(req(hop_limit=hop, local_lid=0xFFFF, remote_lid=0xFFFF), p) == []
    assert diff(req(hop_limit=hop), p) == [
        f"primary_local_lid 1 (the kernel writes 0xffff: hop limit {hop} > 1)",
        f"primary_remote_lid 2 (the kernel writes 0xffff: hop limit {hop} > 1)"]


def test_a_routed_path_with_an_inbound_record_leaves_the_local_lid_to_its_rule():
    p = path(hop_limit=2)
    assert diff(req(hop_limit=2, local_lid=7, remote_lid=0xFFFF), p, inbound=path()) == []
    assert diff(req(hop_limit=2, local_lid=7, remote_lid=2), p, inbound=path()) == [
        "primary_remote_lid 2 (the kernel writes 0xffff: hop limit 2 > 1)"]


def test_roce_compares_no_lid():
    assert diff(req(local_lid=0xFFFF, remote_lid=0xFFFF), path(), roce=True) == []


def test_pkey_and_mtu_come_from_the_primary_path_only():
    r = req(pkey=0x8001, path_packet_payload_mtu=5)
    assert diff(r, path()) == ["pkey 32769 (path pkey 65535)",
                               "path_packet_payload_mtu 5 (path mtu 4)"]
    assert diff(r, path(), shared=False) == []


@pytest.mark.parametrize("plt,least", [(0, 1), (18, 19), (30, 31), (31, 31), (63, 31)])
def test_local_ack_timeout_is_at_least_packet_life_time_plus_one_up_to_31(plt, least):
    p = path(packet_life_time=plt)
    assert diff(req(local_ack_timeout=least), p) == []
    assert diff(req(local_ack_timeout=least - 1), p) == [
        f"primary_local_ack_timeout {least - 1} (at least {least} = PacketLifeTime {plt} + 1)"]


def test_every_path_field_is_compared():
    r = req(flow_label=5, traffic_class=6, hop_limit=0, sl=7, packet_rate=8)
    assert diff(r, path()) == ["primary_flow_label 5 (path flow_label 0)",
                               "primary_traffic_class 6 (path tclass 0)",
                               "primary_sl 7 (path sl 0)", "primary_packet_rate 8 (path rate 3)"]


# -- the alternate path's record ------------------------------------------------------------

def recs(*flags):
    return [{"flags": f} for f in flags]


@pytest.mark.parametrize("flags,want", [
    ((GMP | PRIMARY, ALTERNATE | GMP), 1),
    ((GMP | PRIMARY, ALTERNATE | OUTBOUND), 1),
    ((GMP | PRIMARY, ALTERNATE | INBOUND_REVERSE), 1),
    ((GMP | PRIMARY, ALTERNATE | INBOUND), None),        # remote → local: not the REQ's
    ((GMP | PRIMARY, ALTERNATE | PRIMARY | GMP), None),  # PRIMARY too: not an alternate
    ((ALTERNATE | OUTBOUND, ALTERNATE | GMP), 1),        # a GMP one first
    ((ALTERNATE | OUTBOUND, ALTERNATE | INBOUND_REVERSE), 0),
    ((), None),
])
def test_the_alternate_record(flags, want):
    assert alternate_record(recs(*flags)) == want


# -- names and profiles -------------------------------------------------------------------

def test_blob_names():
    assert blob_name({"file": "a.bin", "frame": 1}) == "blob file a.bin"
    assert blob_name({"file": "a.bin", "frame": 3}) == "blob file a.bin frame 3"
    assert blob_name({"kind": "ls", "frame": 4}) == "LS response frame 4"
    assert blob_name({"frame": 5}) == "blob frame 5"


@pytest.mark.parametrize("kind,kernel,want", [
    ("ls", "all", ["ls-multi", "ls-multi-6.1", "ls-legacy"]), ("ls", "ls-legacy", ["ls-legacy"]),
    ("ls", "ls-multi", ["ls-multi"]), ("ls", "ls-multi-6.1", ["ls-multi-6.1"]),
    ("ls", "ucma", ["ls-multi", "ls-multi-6.1", "ls-legacy"]),
    ("blob", "all", ["ucma"]), ("blob", "proposal", ["proposal"]),
    ("blob", "ls-multi", ["ucma"]), ("blob", "ucma", ["ucma"]),
])
def test_the_profiles_that_read_a_blob(kind, kernel, want):
    assert profiles_for({"kind": kind}, NS(kernel=kernel)) == want


def test_rocev2_is_named_by_the_encapsulation():
    assert is_rocev2({"encap": "rocev2-ipv4"}) and is_rocev2({"encap": "eth/rocev2"})
    assert not is_rocev2({"encap": "ib"}) and not is_rocev2({"encap": None})
    assert not is_rocev2({})


# -- which blob a REQ is judged against ------------------------------------------------------
# (crafted captures as in tests/test_rules_cm.py, whose helpers these are)
from ibpath_scapy.craft.builder import CaptureBuilder  # noqa: E402

from test_rules_cm import cm_hits, modified  # noqa: E402
from test_rules_cm import path as cm_path  # noqa: E402
from test_rules_resolver import audit, exchange, query  # noqa: E402


def mismatches(fa):
    return [h for h in cm_hits(fa) if h[0] == "CM-REQ-PATH-MISMATCH"]


def test_among_blobs_for_the_same_ends_the_one_with_the_reqs_pkey_is_taken(tmp_path):
    """Two blobs join the REQ's GIDs; the older carries the REQ's P_Key: the kernel built the
    connection from that one (the newer is another resolution), and the REQ agrees with it."""
    older = cm_path(pkey=0x8001)
    newer = modified(cm_path(), sl=3)
    f = tmp_path / "two.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(older.sgid, older.dgid), [older])
        b.blob([(0x2B, older)], set_option=0)
        exchange(b, query(newer.sgid, newer.dgid), [newer])
        b.blob([(0x2B, newer)], set_option=0)
        b.cm_req(older)
    assert mismatches(audit(f)) == []
    g = tmp_path / "newest.pcapng"
    with CaptureBuilder(str(g)) as b:  # no P_Key match: the newest blob, which it differs from
        exchange(b, query(older.sgid, older.dgid), [older])
        b.blob([(0x2B, older)], set_option=0)
        exchange(b, query(newer.sgid, newer.dgid), [newer])
        blob = b.blob([(0x2B, newer)], set_option=0)
        req = b.cm_req(modified(newer, sl=5))
    assert mismatches(audit(g)) == [("CM-REQ-PATH-MISMATCH", (blob, req))]


@pytest.mark.parametrize("end", ["sgid", "dgid"])
def test_a_req_with_an_all_zero_gid_is_not_judged(tmp_path, end):
    """A REQ whose primary local or remote GID is :: names no endpoint pair to look a blob up
    by, even where a blob's record has :: there too."""
    p = cm_path(**{end: "::"})
    f = tmp_path / "zero.pcapng"
    with CaptureBuilder(str(f)) as b:
        b.blob([(0x2B, p)], set_option=0)
        b.cm_req(modified(p, sl=3))
    assert mismatches(audit(f)) == []
