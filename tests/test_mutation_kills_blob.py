"""Where the blob rules' verdicts change (issue 43, item 5: the mutants of
ibpath_scapy/audit/rules/blob.py that survived the older tests; tests/README.md).

Blobs and netlink attributes are packed with struct from the C layouts, as in
tests/test_rules_blob.py (whose helpers these are). Oracles: sa_query.c ib_nl_policy
(PATH_RECORD is NLA_BINARY with .len 72, a maximum; other attribute types are other sizes),
ib_user_sa.h's flag bits (GMP 0x01, PRIMARY 0x02, ALTERNATE 0x04, OUTBOUND 0x08, INBOUND 0x10,
INBOUND_REVERSE 0x20), and cm.c cm_ack_timeout (a 5-bit Local ACK Timeout: 31 is the largest
PacketLifeTime a CM can carry).
"""

from __future__ import annotations

import struct

import pytest

from ibpath_scapy.craft.builder import CaptureBuilder

from test_rules_blob import (  # noqa: E402  (tests/ is on sys.path through rootdir)
    GMP_BIDIR, L, L_TEXT, R, R_TEXT, SINGLE, X, X_TEXT, audit, err, raw_file, rec, warn,
)

GMP, PRIMARY = 0x01, 0x02


def nlattr(typ: int, value: bytes) -> bytes:
    return struct.pack("<HH", 4 + len(value), typ) + value + b"\0" * (-len(value) % 4)


def ls_answer(tmp_path, attrs: bytes):
    """An LS RESOLVE request and the answer with these attributes (struct-built netlink)."""
    cap = tmp_path / "ls.pcapng"
    cooked_to_kernel = struct.pack("!HHH8sH", 7, 824, 0, b"\0" * 8, 20)
    body = struct.pack("<IHHII", 16 + len(attrs), 0x1000, 0, 1, 4242) + attrs
    with CaptureBuilder(str(cap)) as b:
        b.ls_request(1, path_use=2, sgid=L_TEXT, dgid=R_TEXT)
        b._write(cooked_to_kernel + body, 253)
    return cap


# -- BLOB-LENGTH measures PATH_RECORD attributes only ------------------------------------------

@pytest.mark.parametrize("typ,value", [(2, struct.pack("<I", 1000)),      # TIMEOUT
                                       (4, R), (5, L),                    # DGID, SGID
                                       (7, struct.pack("<H", 0xFFFF)),    # PKEY
                                       (6, b"\0"), (8, struct.pack("<H", 0))],
                         ids=["TIMEOUT", "DGID", "SGID", "PKEY", "TCLASS", "QOS_CLASS"])
def test_other_attributes_beside_a_whole_record_are_no_length_finding(tmp_path, typ, value):
    found = audit(ls_answer(tmp_path, nlattr(typ, value) + nlattr(1, SINGLE)), messages=True)
    assert not [f for f in found if f[0] == "BLOB-LENGTH"], found


def test_a_short_path_record_attribute_is_read_past_its_end(tmp_path):
    found = audit(ls_answer(tmp_path, nlattr(4, R) + nlattr(1, SINGLE[:64])), messages=True)
    (length,) = [f for f in found if f[0] == "BLOB-LENGTH"]
    assert length[:3] == err("BLOB-LENGTH", [2])
    assert length[3] == ("LS RESOLVE response seq 1: PATH_RECORD attribute 1 carries 64 bytes, "
                         "not 72: ib_nl_policy lets it through and the kernel reads the record "
                         "past the attribute's end")


def test_a_long_path_record_attribute_fails_nla_parse(tmp_path):
    found = audit(ls_answer(tmp_path, nlattr(1, SINGLE + bytes(4))), messages=True)
    (length,) = [f for f in found if f[0] == "BLOB-LENGTH"]
    assert length[3].endswith("carries 76 bytes, not 72: nla_parse() fails (-ERANGE against "
                              "ib_nl_policy's 72): the kernel sends the query to the SA itself")


def test_a_ragged_optval_names_its_whole_records_and_the_rest(tmp_path):
    found = audit(raw_file(tmp_path, SINGLE + SINGLE + bytes(5)), messages=True)
    (length,) = [f for f in found if f[0] == "BLOB-LENGTH"]
    assert length[3] == ("blob length 149 is not a multiple of 72 (struct ib_path_rec_data): "
                         "2 whole record(s) and 5 bytes more; ucma_set_ib_path returns EINVAL")


# -- BLOB-ENDPOINTS when no record has a direction flag -------------------------------------

@pytest.mark.parametrize("flags", [GMP, PRIMARY], ids=["GMP", "PRIMARY"])
def test_undirected_records_take_the_first_records_ends(tmp_path, flags):
    """No OUTBOUND, INBOUND or INBOUND_REVERSE: the first record's SGID → DGID are local and
    remote, and a record joining the same two GIDs either way is consistent."""
    both_ways = rec(flags) + rec(flags, sgid=R, dgid=L, slid=2, dlid=1)
    assert not [f for f in audit(raw_file(tmp_path, both_ways)) if f[0] == "BLOB-ENDPOINTS"]
    third = rec(flags) + rec(flags, dgid=X, dlid=9)
    found = [f for f in audit(raw_file(tmp_path, third, "third"), messages=True)
             if f[0] == "BLOB-ENDPOINTS"]
    assert [f[:3] for f in found] == [err("BLOB-ENDPOINTS")]
    assert found[0][3].endswith(f"joins {L_TEXT} and {X_TEXT}, not the blob's endpoints "
                                f"{L_TEXT} (local) and {R_TEXT} (remote)")
    first_reversed = rec(flags, sgid=R, dgid=L) + rec(flags, dgid=X, dlid=9)
    found = [f for f in audit(raw_file(tmp_path, first_reversed, "rev"), messages=True)
             if f[0] == "BLOB-ENDPOINTS"]
    assert found[0][3].endswith(f"not the blob's endpoints {R_TEXT} (local) and {L_TEXT} "
                                "(remote)")


def test_only_inbound_records_take_the_remote_end_from_the_sgid(tmp_path):
    """An INBOUND record goes remote → local: its DGID is the local end."""
    inbound = 0x12  # PRIMARY|INBOUND
    blob = rec(inbound, sgid=R, dgid=L) + rec(inbound, sgid=X, dgid=L)
    found = [f for f in audit(raw_file(tmp_path, blob), messages=True)
             if f[0] == "BLOB-ENDPOINTS"]
    assert len(found) == 1 and found[0][3].endswith(
        f"not the blob's endpoints {L_TEXT} (local) and {R_TEXT} (remote)")


def test_a_record_both_outbound_and_inbound_between_two_ends(tmp_path):
    found = [f for f in audit(raw_file(tmp_path, rec(0x1A)), messages=True)
             if f[0] == "BLOB-ENDPOINTS"]
    assert len(found) == 1 and found[0][3].endswith(
        "is both OUTBOUND and INBOUND: one record cannot go both ways unreversed")


# -- BLOB-FIELD-RANGE at PacketLifeTime 31 ----------------------------------------------------

@pytest.mark.parametrize("plt,flagged", [(0, False), (30, False), (31, False), (32, True),
                                         (63, True)])
def test_packet_life_time_above_31_is_a_query_template(tmp_path, plt, flagged):
    found = [f for f in audit(raw_file(tmp_path, rec(GMP_BIDIR, plt=plt)), messages=True)
             if f[0] == "BLOB-FIELD-RANGE"]
    if not flagged:
        assert found == []
    else:
        assert [f[:3] for f in found] == [warn("BLOB-FIELD-RANGE")]
        assert found[0][3] == ("blob record 0 (GMP|PRIMARY|BIDIRECTIONAL) does not look like "
                               f"a resolved path: PacketLifeTime {plt} is above 31")


def test_every_field_range_fault_is_listed_in_one_finding(tmp_path):
    blob = rec(GMP_BIDIR, mtu_sel=0, rate_sel=1, plt_sel=3, rate=0, pkey=0x8000, plt=40,
               sgid=bytes(16))
    found = [f for f in audit(raw_file(tmp_path, blob), messages=True)
             if f[0] == "BLOB-FIELD-RANGE"]
    assert found[0][3] == (
        "blob record 0 (GMP|PRIMARY|BIDIRECTIONAL) does not look like a resolved path: MTU "
        "selector 0 (not 2, exactly); rate selector 1 (not 2, exactly); PacketLifeTime "
        "selector 3 (not 2, exactly); rate 0 (port current); P_Key 0x8000 is invalid; "
        "PacketLifeTime 40 is above 31; SGID is all zero")


# -- which profiles read a blob, and an LS response's records as the kernel sees them --------
from types import SimpleNamespace as NS  # noqa: E402

from ibpath_scapy.audit.rules.blob import applicable_profiles, ls_blob, ls_view  # noqa: E402


@pytest.mark.parametrize("options", [object(), NS(kernel=None), NS(kernel=""), NS(kernel="all")],
                         ids=["no-attribute", "None", "empty", "all"])
def test_without_a_kernel_choice_every_profile_of_the_kind_reads_it(options):
    assert applicable_profiles({"kind": "ls"}, options) == ("ls-legacy", "ls-multi-6.1",
                                                             "ls-multi")
    assert applicable_profiles({}, options) == ("ucma", "proposal")


def test_one_kernel_choice_narrows_to_that_profile():
    assert applicable_profiles({"kind": "ls"}, NS(kernel="ls-multi")) == ("ls-multi",)
    assert applicable_profiles({"kind": "ls"}, NS(kernel="ls-multi-6.1")) == ("ls-multi-6.1",)
    assert applicable_profiles({}, NS(kernel="ls-multi")) == ()
    assert applicable_profiles({}, NS(kernel="proposal")) == ("proposal",)


def test_an_ls_response_whose_attributes_do_not_line_up_reads_every_record_as_a_path():
    """Records without their attributes (or none recorded): each record counts as a
    PATH_RECORD attribute, as the kernel's loop sees one."""
    for ls in ({}, {"attributes": []}, {"attributes": [{"nla_type": 1}]}):
        response = {"ls": ls, "blob_records": [{"flags": 0x2B}]}
        b = ls_blob(response, 2)
        assert b.flags == (0x2B,) and b.ls.nla_types is None and b.ls.path_use == 2
        view = ls_view(response, 2, ("ls-legacy", "ls-multi"))
        assert view["ls-legacy"].accepted and view["ls-legacy"].gmp == 0
        assert view["ls-multi"].accepted and view["ls-multi"].gmp == 0


def test_an_ls_response_keeps_each_records_raw_nla_type():
    response = {"ls": {"attributes": [{"nla_type": 0x2001, "blob_record": 0},
                                      {"nla_type": 1, "blob_record": 1},
                                      {"nla_type": 7}]},
                "blob_records": [{"flags": 0x2B}, {"flags": 0x2B}]}
    b = ls_blob(response, 2)
    assert b.ls.nla_types == (0x2001, 1)
    assert ls_view(response, 2, ("ls-legacy",))["ls-legacy"].gmp == 1


@pytest.mark.parametrize("local,remote", [(L, R), (R, L)], ids=["low-to-high", "high-to-low"])
def test_an_inbound_record_going_local_to_remote_whichever_gid_is_higher(tmp_path, local,
                                                                         remote):
    """The direction check compares the pair, not an order of GIDs: a local end above or
    below the remote one makes no difference."""
    blob = rec(0x0A, sgid=local, dgid=remote) + rec(0x12, sgid=local, dgid=remote)
    found = [f for f in audit(raw_file(tmp_path, blob), messages=True)
             if f[0] == "BLOB-ENDPOINTS"]
    assert len(found) == 1 and "an INBOUND record goes remote → local" in found[0][3]
