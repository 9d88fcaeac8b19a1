"""Where kernelview's verdicts change, against the kernel's own tables (issue 43, item 5: the
mutants of ibpath_scapy/facts/kernelview.py that survived the older tests; tests/README.md).

The oracle is drivers/infiniband/core/sa_query.c, copied here by hand and never from the
package (Linux 4.5 to 6.17 alike):

    static const struct nla_policy ib_nl_policy[LS_NLA_TYPE_MAX] = {
        [LS_NLA_TYPE_PATH_RECORD] = {.type = NLA_BINARY, .len = sizeof(struct ib_path_rec_data)},
        [LS_NLA_TYPE_TIMEOUT]     = {.type = NLA_U32},
        [LS_NLA_TYPE_SERVICE_ID]  = {.type = NLA_U64},
        [LS_NLA_TYPE_DGID]        = {.type = NLA_BINARY, .len = sizeof(struct rdma_nla_ls_gid)},
        [LS_NLA_TYPE_SGID]        = {.type = NLA_BINARY, .len = sizeof(struct rdma_nla_ls_gid)},
        [LS_NLA_TYPE_TCLASS]      = {.type = NLA_U8},
        [LS_NLA_TYPE_PKEY]        = {.type = NLA_U16},
        [LS_NLA_TYPE_QOS_CLASS]   = {.type = NLA_U16},
    };

with include/uapi/rdma/rdma_netlink.h's types (PATH_RECORD 1 ... QOS_CLASS 8, IPV4 9, IPV6
10, LS_NLA_TYPE_MAX 11) and lib/nlattr.c validate_nla(): an NLA_BINARY value longer than
.len, or an NLA_U8/U16/U32/U64 value shorter than its width, is -ERANGE; nla_type() masks
NLA_TYPE_MASK = ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER) only. Attributes are packed here with
struct (struct nlattr: u16 nla_len, u16 nla_type, host order), not with ibpath's layers.
"""

from __future__ import annotations

import struct

import pytest

from ibpath_scapy.facts.kernelview import ls_parse_error
from ibpath_scapy.layers.netlink import LsAttr

# (type, name, kind, bound): NLA_BINARY bounds are maxima, NLA_U* widths minima
POLICY = [(1, "PATH_RECORD", "max", 72), (2, "TIMEOUT", "min", 4), (3, "SERVICE_ID", "min", 8),
          (4, "DGID", "max", 16), (5, "SGID", "max", 16), (6, "TCLASS", "min", 1),
          (7, "PKEY", "min", 2), (8, "QOS_CLASS", "min", 2)]
NLA_F_NESTED, NLA_F_NET_BYTEORDER, RDMA_NLA_F_MANDATORY = 0x8000, 0x4000, 0x2000


def nlattr(nla_type: int, size: int) -> LsAttr:
    value = bytes(range(size))
    raw = struct.pack("<HH", 4 + size, nla_type) + value + b"\0" * (-size % 4)
    return LsAttr(raw)


@pytest.mark.parametrize("typ,name,kind,bound", POLICY, ids=[p[1] for p in POLICY])
def test_policy_bounds_are_the_kernels(typ, name, kind, bound):
    """One byte either side of each bound: the GIDs of 15, 16 and 17 bytes, the TIMEOUT of 3
    and 4, the TCLASS of 0 and 1, ..."""
    if kind == "max":
        assert ls_parse_error([nlattr(typ, bound)]) is None
        assert ls_parse_error([nlattr(typ, bound - 1)]) is None
        err = ls_parse_error([nlattr(typ, bound + 1)])
        assert err == (f"attribute 0 ({name}): {bound + 1}-byte value is longer than "
                       f"ib_nl_policy's {bound} (-ERANGE)")
    else:
        assert ls_parse_error([nlattr(typ, bound)]) is None
        assert ls_parse_error([nlattr(typ, bound + 1)]) is None
        err = ls_parse_error([nlattr(typ, bound - 1)])
        assert err == (f"attribute 0 ({name}): {bound - 1}-byte value is shorter than "
                       f"ib_nl_policy's {bound} (-ERANGE)")


@pytest.mark.parametrize("typ", [0, 9, 10])
def test_types_without_a_policy_entry_are_never_refused(typ):
    for size in (0, 1, 17, 200):
        assert ls_parse_error([nlattr(typ, size)]) is None


@pytest.mark.parametrize("flag", [NLA_F_NESTED, NLA_F_NET_BYTEORDER,
                                  NLA_F_NESTED | NLA_F_NET_BYTEORDER])
def test_nested_and_byteorder_flags_are_masked_before_the_policy(flag):
    """nla_type() drops both flags: a 17-byte DGID with either is still a DGID, refused."""
    assert "(DGID): 17-byte value" in ls_parse_error([nlattr(4 | flag, 17)])
    assert ls_parse_error([nlattr(4 | flag, 16)]) is None


def test_the_mandatory_flag_puts_a_type_above_maxtype():
    """RDMA_NLA_F_MANDATORY is not in NLA_TYPE_MASK: 0x2004 > LS_NLA_TYPE_MAX - 1, skipped."""
    assert ls_parse_error([nlattr(4 | RDMA_NLA_F_MANDATORY, 17)]) is None


def test_the_first_failing_attribute_is_named_by_its_index():
    attrs = [nlattr(7, 2), nlattr(6, 1), nlattr(5, 17), nlattr(2, 3)]
    assert ls_parse_error(attrs).startswith("attribute 2 (SGID): 17-byte")


def test_parsing_stops_at_an_attribute_that_runs_past_the_end():
    """nla_for_each_attr stops at a header whose nla_len runs past the remaining bytes; what
    follows is never validated."""
    cut = LsAttr(struct.pack("<HH", 4 + 16, 4) + bytes(8))  # says 16 bytes, has 8
    assert cut.truncated()
    assert ls_parse_error([cut, nlattr(5, 17)]) is None
    assert ls_parse_error([nlattr(5, 17), cut]) is not None


# -- ib_nl_handle_resolve_resp's preconditions, as every LS profile reports them -------------
# sa_query.c: `if ((nlh->nlmsg_flags & NLM_F_REQUEST) || !netlink_capable(skb, CAP_NET_ADMIN))
# return -EPERM;` (the request then times out, 2000 ms by default, and goes to the SA);
# ib_nl_is_good_resolve_resp: RDMA_NL_LS_F_ERR (0x100) set, or nla_parse() failing, sends the
# query to the SA (ib_sa_disable_local_svc, ib_post_send_mad). Each reading names the
# request's path_use it was judged with.
from ibpath_scapy.facts.kernelview import (  # noqa: E402
    DROPPED, EIO, SA_FALLBACK, Blob, LsContext, kernel_view,
)

NLM_F_REQUEST, RDMA_NL_LS_F_ERR = 0x1, 0x100
LS_PROFILES = ("ls-legacy", "ls-multi-6.1", "ls-multi")


def ls_blob(*flags, **ctx) -> Blob:
    return Blob(tuple(flags), None, LsContext(**ctx))


@pytest.mark.parametrize("profile", LS_PROFILES)
@pytest.mark.parametrize("path_use", [None, 0, 1, 2])
def test_a_response_with_nlm_f_request_is_dropped(profile, path_use):
    c = kernel_view(ls_blob(0x2B, path_use=path_use, nlmsg_flags=NLM_F_REQUEST))[profile]
    assert (c.profile, c.accepted, c.outcome, c.path_use, c.notes) == (
        profile, False, DROPPED, path_use, ("response carries NLM_F_REQUEST",))
    assert c.action == ("the response is refused (-EPERM); the query waits for its timeout "
                        "(2000 ms by default), then goes to the SA")
    assert c.source.endswith(" (NLM_F_REQUEST check)") and "sa_query.c" in c.source
    assert c.gmp is None and c.forward is None and c.inbound is None


@pytest.mark.parametrize("profile", LS_PROFILES)
@pytest.mark.parametrize("path_use", [None, 1])
def test_a_response_with_ls_f_err_goes_to_the_sa(profile, path_use):
    c = kernel_view(ls_blob(0x2B, path_use=path_use, nlmsg_flags=RDMA_NL_LS_F_ERR))[profile]
    assert (c.accepted, c.outcome, c.path_use, c.notes) == (
        False, SA_FALLBACK, path_use, ("RDMA_NL_LS_F_ERR set",))
    assert c.action == "the kernel sends the query to the SA itself"
    assert c.source.endswith(", ib_nl_is_good_resolve_resp")


@pytest.mark.parametrize("profile", LS_PROFILES)
def test_a_response_nla_parse_refuses_goes_to_the_sa(profile):
    c = kernel_view(ls_blob(0x2B, path_use=2, parse_error="attribute 0 (DGID): ..."))[profile]
    assert (c.accepted, c.outcome, c.path_use, c.notes) == (
        False, SA_FALLBACK, 2, ("attribute 0 (DGID): ...",))
    assert c.action == "nla_parse() fails: the kernel sends the query to the SA itself"


def test_nlm_f_request_is_checked_before_ls_f_err():
    c = kernel_view(ls_blob(0x2B, nlmsg_flags=NLM_F_REQUEST | RDMA_NL_LS_F_ERR))["ls-multi"]
    assert c.outcome == DROPPED


def test_ls_multi_without_a_matching_record_fails_the_route_with_eio():
    """ib_nl_process_good_resolve_rsp (>= 6.1): no record with the path_use mask -> -EIO."""
    c = kernel_view(ls_blob(0x0A, path_use=2))["ls-multi"]  # GMP asked, no GMP record
    assert (c.accepted, c.outcome, c.path_use) == (False, EIO, 2)
    assert c.action == ("the query completes with -EIO (no SA query): rdma_resolve_route "
                        "reports a route error")
    assert "ib_nl_process_good_resolve_rsp" in c.source and "cma_query_handler" in c.source
    assert c.notes[-1] == "no record has all of GMP|PRIMARY|BIDIRECTIONAL"
    d = c.to_dict()
    assert d["path_use"] == 2 and "path_use_name" in d


# -- the seed's proposal and ls-multi's accepted reading, as reported ------------------------
from ibpath_scapy.facts.kernelview import EINVAL, OK, select_proposal  # noqa: E402


def test_the_proposal_refuses_a_ragged_optval_as_ucma_does():
    c = select_proposal(Blob((0x2B,), 73))
    assert (c.profile, c.accepted, c.outcome, c.notes) == (
        "proposal", False, EINVAL, ("length 73 is not a multiple of 72",))
    assert c.action == "RDMA_OPTION_IB fails with EINVAL"


def test_the_proposal_skips_a_record_neither_primary_nor_alternate():
    """The seed's roles are *_PRIMARY and *_SECONDARY (ALTERNATE): a GMP-only record (0x01)
    plays neither."""
    c = select_proposal(Blob((0x01, 0x2B), 144))
    assert c.accepted and c.gmp == 1 and c.alternate_gmp is None
    assert c.notes == ("record 0 (GMP) is neither PRIMARY nor ALTERNATE: skipped",)
    c = select_proposal(Blob((0x2B, 0x2D), 144))  # 0x2D: GMP|ALTERNATE|BIDIRECTIONAL
    assert c.accepted and c.alternate_gmp == 1 and c.alternate == 1


def test_ls_multi_accepting_says_where_the_data_path_comes_from():
    c = kernel_view(ls_blob(0x2B, path_use=0))["ls-multi"]
    assert c.accepted and c.outcome == OK and c.gmp == 0
    assert c.action == ("route->path_rec from the GMP record; data-path DLIDs from the "
                        "outbound/inbound records where present (RDMA/cm: Use DLID from "
                        "inbound/outbound PathRecords)")


def test_every_profile_names_itself_and_reports_its_notes():
    from ibpath_scapy.facts.kernelview import blob_from_bytes

    view = kernel_view(blob_from_bytes(struct.pack("<II", 0x2B, 0) + bytes(64)))
    for name, c in view.items():
        assert c.profile == name
        d = c.to_dict()
        assert d["profile"] == name and isinstance(d["notes"], list)
        # path_use is shown by name where a profile assumed or was given one
        assert ("path_use" in d) == (c.path_use is not None) == ("path_use_name" in d)


def test_ls_multi_refuses_a_record_it_cannot_file_naming_the_path_use():
    """cma_query_handler (6.3): a record with none of GMP, INBOUND, OUTBOUND -> -EINVAL."""
    c = kernel_view(ls_blob(0x02, path_use=0))["ls-multi"]  # PRIMARY alone, path_use ALL
    assert (c.accepted, c.outcome, c.path_use) == (False, EINVAL, 0)
    assert c.notes[-1] == "record 0 (PRIMARY) has none of GMP, INBOUND, OUTBOUND"
