"""Kernel view: for each profile of audit-rules.md, which record becomes which path, checked
against the kernel code each case comes from (quoted in the docstrings)."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from ibpath_scapy.facts.kernelview import (
    EINVAL,
    EIO,
    NO_GMP,
    OK,
    SA_FALLBACK,
    DROPPED,
    Blob,
    LsContext,
    PROFILE_NAMES,
    blob_from_bytes,
    blob_from_ls_response,
    kernel_view,
    ls_parse_error,
)
from ibpath_scapy.layers.netlink import LsAttr, LsPkey
from ibpath_scapy.layers.pathdata import PathRecData

ALL, UNI, GMP = 0, 1, 2


def blob(*flags, length=None, path_use=None, ls=False, **lsargs) -> Blob:
    ctx = LsContext(path_use=path_use, **lsargs) if (ls or path_use is not None or lsargs) else None
    return Blob(tuple(flags), 72 * len(flags) if length is None else length, ctx)


def roles(choice):
    return (choice.gmp, choice.forward, choice.inbound)


def raw_blob(*flags) -> bytes:
    """struct ib_path_rec_data[] packed from the C layout (flags <I, reserved <I, 64 bytes)."""
    return b"".join(struct.pack("<II", f, 0) + b"\0" * 64 for f in flags)


# -- ibacm's single 0x2B record ---------------------------------------------------------------

def test_ibacm_single_gmp_bidirectional_record_is_taken_by_every_profile():
    """ibacm acm_nl_send: `rec.flags = IB_PATH_PRIMARY | IB_PATH_GMP | IB_PATH_BIDIRECTIONAL`
    for non-UD requests; ucma_set_ib_path takes the first `flags == (IB_PATH_GMP |
    IB_PATH_PRIMARY | IB_PATH_BIDIRECTIONAL)`; ls-legacy's mask is that same 0x2B; ls-multi's
    cma_query_handler files `flags & IB_PATH_GMP` as route->path_rec; the seed: "a 0x2B record
    supplies all three"."""
    view = kernel_view(blob_from_bytes(raw_blob(0x2B)))
    assert set(view) == set(PROFILE_NAMES) == {"ucma", "ls-legacy", "ls-multi-6.1", "ls-multi",
                                               "proposal"}
    for name, c in view.items():
        assert c.accepted and c.outcome == OK, name
        assert roles(c) == (0, 0, 0), name
        assert c.alternate is None


# -- UNIDIRECTIONAL -----------------------------------------------------------------------------

def test_primary_outbound_only_for_unidirectional():
    """sa_query.c ib_nl_process_good_resolve_rsp: `case LS_RESOLVE_PATH_USE_UNIDIRECTIONAL: mask =
    IB_PATH_PRIMARY | IB_PATH_OUTBOUND;` (both before and after 6.1); ibacm answers UD requests
    with PRIMARY|OUTBOUND (0x0A). ucma_set_ib_path wants 0x2B exactly → -EINVAL."""
    b = blob(0x0A, path_use=UNI)
    v = kernel_view(b)
    assert v["ls-legacy"].accepted and roles(v["ls-legacy"]) == (0, 0, 0)
    assert v["ls-multi"].accepted and roles(v["ls-multi"]) == (0, 0, 0)
    assert not v["ucma"].accepted and v["ucma"].outcome == EINVAL
    assert not v["proposal"].accepted and "GMP_PRIMARY" in v["proposal"].notes[-1]


def test_primary_outbound_is_not_enough_for_a_gmp_request():
    """ls-legacy, path_use GMP: mask = IB_PATH_PRIMARY | IB_PATH_GMP | IB_PATH_BIDIRECTIONAL; no
    match leaves `int status = -EIO;` and `query->callback(query, status, mad)`: an error, not an
    SA query."""
    c = kernel_view(blob(0x0A, path_use=GMP))["ls-legacy"]
    assert not c.accepted and c.outcome == EIO


# -- the seed's three-record layout --------------------------------------------------------------

def test_seed_forward_return_gmp_layout():
    """FORWARD_PRIMARY (0x0A), RETURN_PRIMARY (0x12), GMP|PRIMARY|BIDIRECTIONAL (0x2B).
    ucma_set_ib_path scans for the exact 0x2B → record 2. ls-legacy (path_use GMP) → the first
    record with all of 0x2B → record 2. ls-multi (path_use ALL, mask PRIMARY, all three match):
    cma_query_handler: 0x0A has OUTBOUND → path_rec_outbound, 0x12 INBOUND →
    path_rec_inbound, 0x2B GMP → route->path_rec. The seed: "Someday new kernels will pickup the
    FORWARD/RETURN paths from the earlier two records"."""
    v = kernel_view(blob_from_bytes(raw_blob(0x0A, 0x12, 0x2B)))
    assert roles(v["ucma"]) == (2, 2, 2)
    assert roles(v["ls-legacy"]) == (2, 2, 2)
    assert roles(v["ls-multi"]) == (2, 0, 1)
    assert roles(v["proposal"]) == (2, 0, 1)
    assert all(c.accepted for c in v.values())


def test_seed_layout_with_reversed_return_path():
    """RETURN_PRIMARY_REV = PRIMARY|INBOUND_REVERSE (0x22): the seed accepts it as the return path;
    ls-multi's cma_query_handler has no branch for it: `else status = -EINVAL` (6.3)."""
    v = kernel_view(blob(0x0A, 0x22, 0x2B))
    assert roles(v["proposal"]) == (2, 0, 1)
    assert v["ls-multi"].outcome == EINVAL
    assert roles(v["ucma"]) == (2, 2, 2)


# -- ls-multi corner cases ---------------------------------------------------------------------

@pytest.mark.parametrize("flags", [0x02, 0x22, 0x06])
def test_ls_multi_record_with_none_of_gmp_inbound_outbound_is_einval(flags):
    """cma.c cma_query_handler (6.3): `if (!path_rec[i].flags || (path_rec[i].flags & IB_PATH_GMP))
    ... else if (... & IB_PATH_INBOUND) ... else if (... & IB_PATH_OUTBOUND) ... else status =
    -EINVAL;` — a PRIMARY record (it passes the ALL mask) with none of the three."""
    c = kernel_view(blob(0x2B, flags, path_use=ALL))["ls-multi"]
    assert not c.accepted and c.outcome == EINVAL
    assert "record 1" in c.notes[-1]


def test_ls_multi_takes_at_most_three_and_later_gmp_records_overwrite():
    """ib_nl_process_good_resolve_rsp: `if (num_prs >= RDMA_PRIMARY_PATH_MAX_REC_NUM) break;`
    (3); cma_query_handler assigns `*route->path_rec = path_rec[i]` for each GMP record, so the
    last one wins."""
    c = kernel_view(blob(0x2B, 0x2B, 0x12, 0x0A, path_use=ALL))["ls-multi"]
    assert c.accepted and roles(c) == (1, 1, 2)
    assert any("record 3 ignored" in n for n in c.notes)


def test_ls_multi_without_a_gmp_record():
    """cma_query_handler never fills route->path_rec when no record is GMP-flagged."""
    c = kernel_view(blob(0x0A, 0x12, path_use=ALL))["ls-multi"]
    assert not c.accepted and c.outcome == NO_GMP
    assert (c.forward, c.inbound) == (0, 1)


def test_ls_multi_gmp_path_use_keeps_the_0x2b_mask():
    """`case LS_RESOLVE_PATH_USE_GMP: default: mask = IB_PATH_PRIMARY | IB_PATH_GMP |
    IB_PATH_BIDIRECTIONAL;` also after 6.1."""
    v = kernel_view(blob(0x0A, 0x2B, path_use=GMP))
    assert roles(v["ls-multi"]) == (1, 1, 1)
    assert kernel_view(blob(0x0A, path_use=GMP))["ls-multi"].outcome == EIO


def test_unknown_path_use_assumes_what_rdma_resolve_route_sends():
    """sa_query.c ib_nl_set_path_rec_attrs: a reversible query → LS_RESOLVE_PATH_USE_GMP (< 6.1) or
    LS_RESOLVE_PATH_USE_ALL (≥ 6.1, "so that the service knows kernel supports multiple PRs")."""
    v = kernel_view(blob(0x0A, 0x12, 0x2B))
    assert v["ls-legacy"].path_use == GMP and v["ls-multi"].path_use == ALL


# -- alternates (APM) ------------------------------------------------------------------------------

def test_alternate_records():
    """No kernel consumes ALTERNATE records (ucma: only 0x2B; LS masks require PRIMARY); the seed
    gives *_SECONDARY records the alternate paths."""
    v = kernel_view(blob(0x2B, 0x2C))
    assert roles(v["ucma"]) == (0, 0, 0) and v["ucma"].alternate is None
    assert v["ls-multi"].alternate is None
    p = v["proposal"]
    assert (p.alternate, p.alternate_inbound, p.alternate_gmp) == (1, 1, None)
    six = kernel_view(blob(0x03, 0x0A, 0x12, 0x05, 0x0C, 0x14))["proposal"]
    assert roles(six) == (0, 1, 2) and (six.alternate_gmp, six.alternate, six.alternate_inbound) == (3, 4, 5)
    assert kernel_view(blob(0x03, 0x0A, 0x12, 0x05, 0x0C, 0x14))["ucma"].outcome == EINVAL


def test_proposal_skips_primary_and_alternate_together():
    c = kernel_view(blob(0x2F, 0x2B))["proposal"]
    assert roles(c) == (1, 1, 1) and "both PRIMARY and ALTERNATE" in c.notes[0]


# -- lengths ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("length", [71, 73, 100, 143, 145])
def test_length_not_a_multiple_of_72(length):
    """ucma_set_ib_path: `if (optlen % sizeof(*path_data)) return -EINVAL;`; the seed keeps the
    72-byte records of RDMA_OPTION_IB."""
    data = raw_blob(0x2B, 0x2B)[:length] if length < 144 else raw_blob(0x2B, 0x2B) + b"\0"
    v = kernel_view(blob_from_bytes(data))
    assert v["ucma"].outcome == EINVAL and "multiple of 72" in v["ucma"].notes[0]
    assert v["proposal"].outcome == EINVAL


def test_empty_blob():
    """ucma_set_ib_path: the scan finds nothing → `if (!optlen) return -EINVAL;`."""
    v = kernel_view(blob_from_bytes(b""))
    assert v["ucma"].outcome == EINVAL
    assert v["ls-legacy"].outcome == EIO and v["ls-multi"].outcome == EIO


# -- what the netlink response itself adds ---------------------------------------------------------

def test_ls_err_flag_and_parse_failure_fall_back_to_the_sa():
    """ib_nl_handle_resolve_resp: `if (!ib_nl_is_good_resolve_resp(nlh)) { /* if the result is a
    failure, send out the packet via IB */ ib_sa_disable_local_svc(query); ib_post_send_mad(...)`;
    ib_nl_is_good_resolve_resp: `if (nlh->nlmsg_flags & RDMA_NL_LS_F_ERR) return 0;` and a failing
    nla_parse()."""
    for name in ("ls-legacy", "ls-multi"):
        assert kernel_view(blob(0x2B, nlmsg_flags=0x100))[name].outcome == SA_FALLBACK
        assert kernel_view(blob(0x2B, parse_error="too long"))[name].outcome == SA_FALLBACK
        assert kernel_view(blob(0x2B, nlmsg_flags=0x1))[name].outcome == DROPPED


def test_ls_path_record_with_mandatory_bit_is_skipped():
    """`if (curr->nla_type == LS_NLA_TYPE_PATH_RECORD)` compares the raw nla_type: 0x2001 is not 1."""
    c = kernel_view(blob(0x2B, nla_types=(0x2001,)))["ls-legacy"]
    assert c.outcome == EIO and any("0x2001" in n for n in c.notes)


def _attr(flags=0x2B, size=None, mandatory=0):
    value = bytes(PathRecData(flags=flags))
    if size is not None:
        value = (value + b"\0" * 8)[:size]
    return LsAttr(bytes(LsAttr(nla_type=1, mandatory=mandatory) / value))


def test_ls_policy_errors_from_layers():
    """sa_query.c ib_nl_policy: PATH_RECORD is NLA_BINARY with .len = sizeof(struct
    ib_path_rec_data) (a maximum), PKEY NLA_U16 (a minimum); a MANDATORY type is above maxtype
    and not checked."""
    assert ls_parse_error([_attr()]) is None
    assert "-ERANGE" in ls_parse_error([_attr(size=76)])
    assert ls_parse_error([_attr(size=76, mandatory=1)]) is None
    short_pkey = LsAttr(bytes(LsAttr(nla_type=7) / b"\x01"))
    assert "PKEY" in ls_parse_error([short_pkey])
    assert ls_parse_error([LsAttr(bytes(LsAttr(nla_type=7) / LsPkey(pkey=5)))]) is None


def test_blob_from_ls_response_aligns_records_with_attributes():
    attrs = [LsAttr(bytes(LsAttr(nla_type=7) / LsPkey())), _attr(0x0A), _attr(0x2B, mandatory=1),
             _attr(0x2B)]
    b = blob_from_ls_response(0, attrs, GMP)
    assert b.flags == (0x0A, 0x2B, 0x2B) and b.ls.nla_types == (1, 0x2001, 1)
    assert kernel_view(b)["ls-legacy"].gmp == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 0xFF), max_size=8), st.sampled_from([None, ALL, UNI, GMP]))
def test_every_view_names_existing_records_or_rejects(flags, path_use):
    for name, c in kernel_view(blob(*flags, path_use=path_use)).items():
        for idx in (c.gmp, c.forward, c.inbound, c.alternate, c.alternate_gmp, c.alternate_inbound):
            assert idx is None or 0 <= idx < len(flags)
        if c.accepted:
            assert c.outcome == OK and c.gmp is not None
        else:
            assert c.outcome != OK and c.action
        if name == "ucma" and c.accepted:
            assert flags[c.gmp] == 0x2B and 0x2B not in flags[:c.gmp]
        assert c.to_dict()["profile"] == name
