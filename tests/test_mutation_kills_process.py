"""Where the process rules' verdicts change (issue 43, item 5: the mutants of
ibpath_scapy/audit/rules/process.py that survived the older tests; tests/README.md).

UCMA-READBACK leaves the LIDs out of its comparison on RoCE, where the kernel's path record
keeps route_resolved and the peer's MAC in their place (cma.c
cma_iboe_set_path_rec_l2_fields; ucma.c ucma_query_path packs them as DLID and SLID): the
lab's readback DLID 0x01f2 is route_resolved 1, then 0xf2 of the peer's MAC f2:ea:52:...
A RoCEv2 path over IPv4 has IPv4-mapped GIDs (rdma_ip2gid: ::ffff:a.b.c.d).
"""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from ibpath_scapy.audit.rules.process import _differing, _is_roce, _roce_readback


@pytest.mark.parametrize("sgid,roce", [("::ffff:10.0.0.1", True), ("::ffff:192.168.2.25", True),
                                       ("fe80::2:c903:0:1", False), ("::", False),
                                       ("not a gid", False)])
def test_a_roce_path_is_one_with_ipv4_mapped_gids(sgid, roce):
    assert _is_roce(NS(sgid=sgid)) is roce


@pytest.mark.parametrize("sgid,dlid,roce", [
    ("::ffff:10.0.0.1", 0x0005, True),     # the GIDs say so, whatever the DLID
    ("fe80::1", 0x01F2, True),             # route_resolved 1 in the DLID's first byte
    ("fe80::1", 0x0100, True),
    ("fe80::1", 0x01FF, True),
    ("fe80::1", 0x00F2, False),            # an IB DLID
    ("fe80::1", 0x02F2, False),
    ("fe80::1", 0x0001, False),
    ("garbage", 0x0201, False),
])
def test_a_roce_readback_by_gids_or_route_resolved(sgid, dlid, roce):
    assert _roce_readback(NS(sgid=sgid), NS(dlid=dlid)) is roce


def test_differing_names_each_field_that_differs_except_the_skipped():
    from ibpath_scapy.audit.rules.process import PATH_RECORD_FIELDS

    a = {n: 0 for n in PATH_RECORD_FIELDS}
    b = dict(a, dlid=1, slid=2, sl=3)
    assert _differing(a, b) == [n for n in PATH_RECORD_FIELDS if n in ("dlid", "slid", "sl")]
    assert _differing(a, b, {"dlid", "slid"}) == ["sl"]
    assert _differing(a, dict(a)) == []
