"""ls-multi-6.1 (Linux 6.1, 6.2) against ls-multi (6.3 on): the one place they differ, pinned to
the kernel lines each reading follows.

Kernel sources read (line numbers of those trees): Debian's linux-source 6.1.176 (the 6.1
code, with no backport of ccae0447af0e), 6.12.117 and 7.2.13 (the 6.3 code); v6.0 and v6.2
through the pre-images of 5a3749493394 and ccae0447af0e.

- sa_query.c ib_nl_set_path_rec_attrs (6.1.176:724, 7.2.13:781), since 5a3749493394 (v6.1):
  `query->path_use = LS_RESOLVE_PATH_USE_ALL;` for a reversible query (v6.0: `..._GMP`).
- sa_query.c ib_nl_process_good_resolve_rsp (6.1.176:910, 7.2.13:958): `case
  LS_RESOLVE_PATH_USE_ALL: mask = IB_PATH_PRIMARY;`; `if ((srec->flags & mask) != mask)
  continue;` (6.1.176:926; 7.2.13:973 `rec_data->flags`); `if (num_prs >=
  RDMA_PRIMARY_PATH_MAX_REC_NUM) break;` (6.1.176:940, 7.2.13:993; the constant is 3).
- cma.c cma_query_handler, 6.1.176:2877-2882 (no else branch, then `if (!route->path_rec)` at
  2884, never true: cma_resolve_ib_route kmalloc'ed it at 3046):
      if (!path_rec[i].flags || (path_rec[i].flags & IB_PATH_GMP))
              *route->path_rec = path_rec[i];
      else if (path_rec[i].flags & IB_PATH_INBOUND)
              route_set_path_rec_inbound(work, &path_rec[i]);
      else if (path_rec[i].flags & IB_PATH_OUTBOUND)
              route_set_path_rec_outbound(work, &path_rec[i]);
- cma.c cma_query_handler after ccae0447af0e (v6.3), 7.2.13:2923-2934:
      else
              status = -EINVAL;
      if (status)
              goto fail;

The LS responses here are packed from the C layouts (struct nlattr: u16 nla_len, u16
nla_type; struct ib_path_rec_data: u32 flags, u32 reserved, u32 path_rec[16], host order), not
built with the project's layers.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.craft.scenarios import SCENARIOS
from ibpath_scapy.facts.kernelview import (
    EINVAL,
    LS_PROFILES,
    NO_GMP,
    OK,
    PROFILES,
    blob_from_ls_response,
    kernel_view,
    profiles_of,
    release_version,
)
from ibpath_scapy.layers.netlink import LsAttr
from ibpath_scapy.resolve.kernel import choose

ALL, UNI, GMP = 0, 1, 2  # enum rdma_nl_ls_resolve_path_use (rdma_netlink.h)
LS_NLA_TYPE_PATH_RECORD = 1
SPLIT = ("ls-multi-6.1", "ls-multi")


def path_record_attr(flags: int) -> bytes:
    """One PATH_RECORD attribute: nlattr header, then struct ib_path_rec_data."""
    value = struct.pack("<II", flags, 0) + bytes(64)
    return struct.pack("<HH", 4 + len(value), LS_NLA_TYPE_PATH_RECORD) + value


def response_view(*flags: int, path_use: int = ALL) -> dict:
    """Each LS profile's reading of a RESOLVE response carrying these records."""
    attrs = [LsAttr(path_record_attr(f)) for f in flags]
    return kernel_view(blob_from_ls_response(0, attrs, path_use), LS_PROFILES)


def roles(c) -> tuple:
    return c.gmp, c.forward, c.inbound


# -- which profile a kernel release gets ------------------------------------------------------

@pytest.mark.parametrize("release,ls", [
    ("6.0.19", "ls-legacy"), ("6.1.0-18-amd64", "ls-multi-6.1"), ("6.1.176", "ls-multi-6.1"),
    ("6.2.16-300.fc38.x86_64", "ls-multi-6.1"), ("6.3.0", "ls-multi"), ("6.12.117", "ls-multi"),
    ("6.18.44-fc-v1147", "ls-multi"), ("7.2.13", "ls-multi")])
def test_a_release_gets_the_ls_profile_of_its_code(release, ls):
    """5a3749493394 first in v6.1 (in 6.1.176 unchanged: Debian's tree has the 6.1 form);
    ccae0447af0e first in v6.3 (merged 24 February 2023, after v6.2)."""
    assert profiles_of(release_version(release)) == ["ucma", ls]


def test_the_profiles_name_their_releases_and_commits():
    old, new = PROFILES["ls-multi-6.1"], PROFILES["ls-multi"]
    assert (old.since, old.before, new.since, new.before) == ((6, 1), (6, 3), (6, 3), None)
    assert [c.sha for c in old.commits] == ["5a3749493394", "eb8336dbe373"]
    assert [c.sha for c in new.commits][-1] == "ccae0447af0e"
    assert new.commits[-1].release == "v6.3" and old.commits[0].release == "v6.1"
    assert "cma_query_handler" in old.source and "cma_query_handler" in new.source
    assert old.directional and new.directional and not PROFILES["ls-legacy"].directional
    why = choose(None, "6.2.16").why()
    assert "ls-multi-6.1 (Linux 6.1 and 6.2; 5a3749493394, eb8336dbe373)" in why
    assert "ccae0447af0e" in choose(None, "6.3.1").why()


# -- where they differ: a PRIMARY record with none of GMP, INBOUND, OUTBOUND ------------------

@pytest.mark.parametrize("flags", [0x02, 0x06, 0x22, 0x26])  # PRIMARY [|ALTERNATE] [|INBOUND_REVERSE]
def test_an_unfiled_record_is_skipped_by_6_1_and_fails_the_route_from_6_3(flags):
    """The record passes the ALL mask (PRIMARY); 6.1.176 cma.c:2877-2882 has no branch for it,
    7.2.13 cma.c:2930-2934 `else status = -EINVAL; if (status) goto fail;`."""
    v = response_view(0x0A, flags, 0x2B)
    old, new = v["ls-multi-6.1"], v["ls-multi"]
    assert (old.accepted, old.outcome, roles(old)) == (True, OK, (2, 0, 2))
    assert any(n.startswith("record 1 (") and n.endswith(": ignored (no else branch before "
                                                          "ccae0447af0e)") for n in old.notes)
    assert (new.accepted, new.outcome) == (False, EINVAL)
    assert new.notes[-1].startswith("record 1 (") and new.notes[-1].endswith(
        "has none of GMP, INBOUND, OUTBOUND")
    assert roles(new) == (None, None, None)
    # ls-legacy (< 6.1) never sent ALL; read with its mask 0x2B it takes the GMP record
    assert roles(v["ls-legacy"]) == (2, 2, 2)


def test_an_unfiled_record_alone_leaves_6_1_without_a_gmp_path():
    """6.1: nothing is filed and `if (!route->path_rec)` (6.1.176 cma.c:2884) cannot fire, so the
    route resolves on the uninitialised kmalloc of cma_resolve_ib_route; 6.3: -EINVAL."""
    v = response_view(0x02)
    assert v["ls-multi-6.1"].outcome == NO_GMP
    assert v["ls-multi"].outcome == EINVAL


def test_the_fourth_record_is_never_filed_so_both_accept():
    """`if (num_prs >= RDMA_PRIMARY_PATH_MAX_REC_NUM) break;`: an unfiled record past the third
    match never reaches cma_query_handler."""
    v = response_view(0x2B, 0x0A, 0x12, 0x22)
    for p in SPLIT:
        assert v[p].accepted and roles(v[p]) == (0, 1, 2), p
        assert any("record 3 ignored (only 3 are taken)" in n for n in v[p].notes), p


@pytest.mark.parametrize("path_use", [UNI, GMP])
def test_only_all_is_filed_by_cma_so_other_path_uses_agree(path_use):
    """PRIMARY|OUTBOUND or 0x2B masks pass no unfiled record, and only rdma_resolve_route's
    reversible query (ALL) reaches cma_query_handler."""
    v = response_view(0x22, 0x2B, 0x0A, path_use=path_use)
    assert (v["ls-multi-6.1"].outcome, roles(v["ls-multi-6.1"])) == \
        (v["ls-multi"].outcome, roles(v["ls-multi"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 0x3F), max_size=5), st.sampled_from([ALL, UNI, GMP]))
def test_the_two_readings_differ_only_by_the_else_branch(flags, path_use):
    """ccae0447af0e changed nothing else in the reading: unless 6.3 fails with -EINVAL, both
    profiles choose the same records with the same outcome."""
    v = response_view(*flags, path_use=path_use)
    old, new = v["ls-multi-6.1"], v["ls-multi"]
    if new.outcome == EINVAL:
        assert path_use == ALL and old.outcome in (OK, NO_GMP)
        return
    assert (old.accepted, old.outcome, roles(old), old.notes) == \
        (new.accepted, new.outcome, roles(new), new.notes)


# -- the scenario: one capture, two verdicts --------------------------------------------------

def _findings(path, kernel: str) -> dict[str, list[str]]:
    (fa,), unreadable = audit_paths([str(path)], AuditOptions(kernel=kernel), quiet=True)
    assert not unreadable
    out: dict[str, list[str]] = {}
    for f in fa.findings:
        out.setdefault(f.rule, []).append(f.message)
    return out


@pytest.mark.parametrize("encap", SCENARIOS["ls-return-rev"].encaps)
def test_ls_return_rev_is_clean_on_6_1_and_a_route_error_from_6_3(tmp_path, encap):
    path = SCENARIOS["ls-return-rev"].write(tmp_path / "ls-return-rev.pcapng", encap=encap)
    assert _findings(path, "ls-multi-6.1") == {}
    new = _findings(path, "ls-multi")
    assert set(new) == {"BLOB-KERNEL-REJECT", "RES-LS-PATHUSE"}
    (reject,) = new["BLOB-KERNEL-REJECT"]
    assert reject.startswith("ls-multi (path_use ALL) rejects the LS RESOLVE response seq 1: "
                             "cma_query_handler fails with -EINVAL")
    assert "record 1 (PRIMARY|INBOUND_REVERSE) has none of GMP, INBOUND, OUTBOUND" in reject
    (pathuse,) = new["RES-LS-PATHUSE"]
    assert ": ls-multi EINVAL: " in pathuse
    # under all, only ls-multi rejects: the 6.1 reading is the one the REQ agrees with
    every = _findings(path, "all")
    assert [m.split(" ")[0] for m in every["BLOB-KERNEL-REJECT"]] == ["ls-multi"]
    assert "CM-REQ-PATH-MISMATCH" not in every
