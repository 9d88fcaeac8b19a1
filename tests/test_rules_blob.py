"""Blob rules (audit-rules.md "Blob rules"): every rule fired by a blob that breaks it and kept
quiet by a near-identical blob that does not, with exact rule IDs and frame numbers.

Blobs are packed here from the C layout with struct (`<II` flags/reserved, then the 64-byte
PathRecord `!Q16s16sHHIBBHHBBBB6s`), not with the project's layers, so that the verdicts
that come from kernel rules do not only round-trip through the layers. They reach the audit
as raw optval files (frame 1) or, in pcapng, through CaptureBuilder (blob frames and LS
responses). Findings of other rule families (SA, resolver, CM) are left out of the
comparison: this file pins the blob rules only.
"""

from __future__ import annotations

import ipaddress
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from ibpath_scapy.audit.engine import audit_records
from ibpath_scapy.audit.model import RULES, AuditOptions
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.craft.builder import CaptureBuilder
from ibpath_scapy.engines.scapy.decode import Decoder
from ibpath_scapy.layers.sa import PathRecord
from ibpath_scapy.capture.pcapio import RAW_BLOB_LINKTYPE, Frame

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main"]

from oracles import IBV_PATH_RECORD  # noqa: E402
L_TEXT, R_TEXT, X_TEXT = "fe80::2:c903:0:1", "fe80::2:c903:0:2", "fe80::2:c903:0:9"
L, R, X = (ipaddress.IPv6Address(g).packed for g in (L_TEXT, R_TEXT, X_TEXT))

GMP_BIDIR, FWD, RET, RET_REV, ALT_BIDIR = 0x2B, 0x0A, 0x12, 0x22, 0x2C


def path(*, sgid=L, dgid=R, slid=1, dlid=2, rev=1, pkey=0xFFFF, sl=0, mtu=4, rate=16, plt=18,
         mtu_sel=2, rate_sel=2, plt_sel=2, sid=0, flow=0, hop=0, tclass=0, qos=0, pref=0,
         raw=0, resv3=0, tail=b"\0" * 6) -> bytes:
    """A 64-byte PathRecord in SA wire format, from IBA 15.2.5.16's layout alone."""
    word = raw << 31 | resv3 << 28 | flow << 8 | hop
    out = IBV_PATH_RECORD.pack(sid, dgid, sgid, dlid, slid, word, tclass, rev << 7, pkey,
                      qos << 4 | sl, mtu_sel << 6 | mtu, rate_sel << 6 | rate, plt_sel << 6 | plt,
                      pref, tail)
    assert len(out) == 64
    return out


def rec(flags: int, reserved: int = 0, **kw) -> bytes:
    """One struct ib_path_rec_data: u32 flags and u32 reserved in host (little-endian) order."""
    return struct.pack("<II", flags, reserved) + path(**kw)


def word_swap(data: bytes) -> bytes:
    """Every 32-bit word byte-reversed: what a resolver that forgot htonl() hands over."""
    return b"".join(data[k:k + 4][::-1] for k in range(0, len(data), 4))


def swapped_rec(flags: int, **kw) -> bytes:
    return struct.pack("<II", flags, 0) + word_swap(path(**kw))


# The seed's three outcomes: a reversible forward path → one 0x2B record; a forward path that
# is not reversible → forward (0x0A), return (0x12, or 0x22 stored reversed) and a reversible
# GMP path (0x2B).
SINGLE = rec(GMP_BIDIR)
THREE = (rec(FWD, rev=0) + rec(RET, sgid=R, dgid=L, slid=2, dlid=1, rev=0)
         + rec(GMP_BIDIR, dlid=7))
THREE_REV = rec(FWD, rev=0) + rec(RET_REV, rev=0) + rec(GMP_BIDIR, dlid=7)

MINE = {r for r in RULES if r.startswith("BLOB-") or r.startswith("RES-LS-")}


def audit(path_: Path, kernel: str = "all", messages: bool = False) -> list[tuple]:
    """(rule, severity, frames) of every blob/LS finding, sorted; with messages appended."""
    audits, unreadable = audit_paths([str(path_)], AuditOptions(kernel=kernel), quiet=True)
    assert not unreadable
    out = [(f.rule, f.severity, list(f.frames)) + ((f.message,) if messages else ())
           for f in audits[0].findings if f.rule in MINE]
    return sorted(out)


def raw_file(tmp_path: Path, data: bytes, name: str = "optval") -> Path:
    f = tmp_path / name
    f.write_bytes(data)
    return f


def cli_json(*args) -> tuple[int, dict]:
    p = subprocess.run(IBPATH + ["audit", "--format", "json", "--quiet", *map(str, args)],
                       capture_output=True, text=True, timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout)


def err(rule, frames=(1,)):
    return (rule, "error", list(frames))


def warn(rule, frames=(1,)):
    return (rule, "warning", list(frames))


# -- the seed's three resolver outcomes ---------------------------------------------------------

@pytest.mark.parametrize("kernel", ["all", "ucma", "proposal"])
def test_seed_single_reversible_0x2b_record_is_clean(tmp_path, kernel):
    assert audit(raw_file(tmp_path, SINGLE), kernel) == []


@pytest.mark.parametrize("kernel", ["ucma", "proposal"])
@pytest.mark.parametrize("blob", [THREE, THREE_REV], ids=["0x12", "0x22"])
def test_seed_three_records_have_no_error_under_ucma_and_proposal(tmp_path, kernel, blob):
    """ucma takes the 0x2B record (the first with flags == 0x2B exactly), the proposal the
    0x0A/0x12(0x22)/0x2B roles: both accept, no error."""
    assert audit(raw_file(tmp_path, blob), kernel) == []


def test_seed_three_records_under_all_profiles_diverge_on_the_data_path(tmp_path):
    """ucma sends data on the GMP record (DLID 7), the proposal on the FORWARD one (DLID 2)."""
    f = raw_file(tmp_path, THREE)
    (found,) = audit(f, messages=True)
    assert found[:3] == warn("BLOB-PROFILE-DIVERGENCE")
    assert "ucma sends data per record(s) [2], proposal per record(s) [0]: DLID 7 vs 2" in found[3]


def test_seed_three_records_with_the_same_data_path_do_not_diverge(tmp_path):
    same = (rec(FWD, rev=0) + rec(RET, sgid=R, dgid=L, slid=2, dlid=1, rev=0)
            + rec(GMP_BIDIR, flow=5))  # GMP path differs only in its flow label
    assert audit(raw_file(tmp_path, same)) == []


def test_seed_single_0x2b_record_of_a_path_that_is_not_reversible(tmp_path):
    f = raw_file(tmp_path, rec(GMP_BIDIR, rev=0))
    assert audit(f) == [err("BLOB-BIDIR-NOT-REVERSIBLE"), err("BLOB-GMP-NOT-REVERSIBLE")]


# -- BLOB-LENGTH, BLOB-EMPTY, BLOB-KERNEL-REJECT on optvals -------------------------------------

def test_length_not_a_multiple_of_72(tmp_path):
    assert audit(raw_file(tmp_path, SINGLE)) == []
    found = audit(raw_file(tmp_path, SINGLE + b"\0" * 5, "ragged"), messages=True)
    assert [x[:3] for x in found] == [err("BLOB-KERNEL-REJECT"), err("BLOB-KERNEL-REJECT"),
                                      err("BLOB-LENGTH")]
    assert "length 77 is not a multiple of 72" in found[2][3]
    assert found[0][3].startswith("proposal rejects") and found[1][3].startswith("ucma rejects")
    assert "EINVAL" in found[1][3]
    assert [x[:3] for x in audit(raw_file(tmp_path, SINGLE + b"\0" * 5, "r2"), "ucma")] == [
        err("BLOB-KERNEL-REJECT"), err("BLOB-LENGTH")]


def test_empty_blob(tmp_path):
    """60 bytes: not even one record (also a ragged length, so ucma says EINVAL twice over)."""
    assert audit(raw_file(tmp_path, SINGLE[:60])) == [
        err("BLOB-EMPTY"), err("BLOB-KERNEL-REJECT"), err("BLOB-KERNEL-REJECT"),
        err("BLOB-LENGTH")]
    assert audit(raw_file(tmp_path, SINGLE, "whole")) == []


def test_empty_blob_frame_in_a_capture(tmp_path):
    """An 8-byte optval (flags and reserved, no PathRecord) after a good one. (A 0-byte
    exported PDU is not decoded as a blob at all: see the report.)"""
    cap = tmp_path / "empty.pcapng"
    with CaptureBuilder(str(cap)) as b:
        b.blob(SINGLE, set_option=0)
        b.blob(SINGLE[:8], set_option=-22)
    assert audit(cap) == [err("BLOB-EMPTY", [2]), err("BLOB-KERNEL-REJECT", [2]),
                          err("BLOB-KERNEL-REJECT", [2]), err("BLOB-LENGTH", [2])]
    found = audit(cap, "ucma", messages=True)
    assert found[1][0] == "BLOB-KERNEL-REJECT"
    assert found[1][3].endswith("(the capture records rdma_set_option=-EINVAL)")


def test_kernel_reject_without_a_0x2b_record(tmp_path):
    """0x0A + 0x12 only: ucma finds no flags == 0x2B (EINVAL), the proposal no GMP_PRIMARY."""
    blob = rec(FWD, rev=0) + rec(RET, sgid=R, dgid=L, slid=2, dlid=1, rev=0)
    f = raw_file(tmp_path, blob)
    found = audit(f, messages=True)
    assert [x[:3] for x in found] == [err("BLOB-KERNEL-REJECT")] * 2
    assert "proposal rejects the blob: RDMA_OPTION_IB fails (EINVAL)" in found[0][3]
    assert "missing GMP_PRIMARY" in found[0][3]
    assert "ucma rejects the blob: rdma_set_option fails with EINVAL" in found[1][3]
    assert "0x2b" in found[1][3]
    assert audit(f, "ucma") == [err("BLOB-KERNEL-REJECT")]
    assert audit(f, "proposal") == [err("BLOB-KERNEL-REJECT")]
    # an optval is never read by the netlink code: the LS profiles do not judge it
    assert audit(f, "ls-legacy") == [] and audit(f, "ls-multi") == []
    # the same records plus the compatible 0x2B record: accepted everywhere
    assert audit(raw_file(tmp_path, blob + rec(GMP_BIDIR), "ok")) == []


# -- BLOB-RESERVED, BLOB-UNKNOWN-FLAGS, BLOB-FLAG-CONFLICT ----------------------------------------

def test_reserved_word(tmp_path):
    assert audit(raw_file(tmp_path, rec(GMP_BIDIR, reserved=7))) == [warn("BLOB-RESERVED")]
    assert audit(raw_file(tmp_path, rec(GMP_BIDIR, reserved=0), "zero")) == []


def test_unknown_flag_bit(tmp_path):
    """0x6B: ucma compares flags == 0x2B exactly and skips it; the proposal still finds its
    roles in the known bits."""
    found = audit(raw_file(tmp_path, rec(0x6B)), messages=True)
    assert [x[:3] for x in found] == [err("BLOB-KERNEL-REJECT"), err("BLOB-UNKNOWN-FLAGS")]
    assert found[0][3].startswith("ucma rejects")
    assert "unknown bits 0x40" in found[1][3]


def test_flags_in_network_order(tmp_path):
    """flags packed big-endian: 0x2B000000 (a raw file like that is not a plausible blob, so
    it travels in a capture)."""
    cap = tmp_path / "be.pcapng"
    with CaptureBuilder(str(cap)) as b:
        b.blob(struct.pack(">I", GMP_BIDIR) + SINGLE[4:])
    found = audit(cap, messages=True)
    assert [x[:3] for x in found] == [err("BLOB-FLAG-CONFLICT"), err("BLOB-KERNEL-REJECT"),
                                      err("BLOB-KERNEL-REJECT"), err("BLOB-UNKNOWN-FLAGS")]
    assert "byte-swapped it would read 0x2b" in found[3][3]


@pytest.mark.parametrize("flags, what", [
    (0x2F, "both PRIMARY and ALTERNATE"),
    (0x32, "both INBOUND and INBOUND_REVERSE"),
    (0x08, "neither PRIMARY nor ALTERNATE"),
])
def test_flag_conflict(tmp_path, flags, what):
    """A second record with contradictory flags next to a good 0x2B record (so that no
    profile rejects the blob)."""
    found = audit(raw_file(tmp_path, SINGLE + rec(flags, slid=3, dlid=4)), messages=True)
    assert [x[:3] for x in found] == [err("BLOB-FLAG-CONFLICT")]
    assert what in found[0][3] and "record 1" in found[0][3]
    assert audit(raw_file(tmp_path, SINGLE + rec(0x0A, slid=3, dlid=4), "ok")) == []


def test_flags_zero_is_a_warning(tmp_path):
    found = audit(raw_file(tmp_path, SINGLE + rec(0)), messages=True)
    assert [x[:3] for x in found] == [warn("BLOB-FLAG-CONFLICT")]
    assert "record 1 has flags 0" in found[0][3]


def test_flag_conflict_that_also_rejects(tmp_path):
    """A lone PRIMARY|ALTERNATE 0x2F record: ucma wants 0x2B exactly, the proposal skips it."""
    assert audit(raw_file(tmp_path, rec(0x2F))) == [
        err("BLOB-FLAG-CONFLICT"), err("BLOB-KERNEL-REJECT"), err("BLOB-KERNEL-REJECT")]


# -- reversibility ------------------------------------------------------------------------------

def test_bidirectional_alternate_not_reversible(tmp_path):
    """0x2C (ALTERNATE|BIDIRECTIONAL) carries no GMP bit: only BLOB-BIDIR-NOT-REVERSIBLE."""
    good = SINGLE + rec(ALT_BIDIR, slid=3, dlid=5)
    bad = SINGLE + rec(ALT_BIDIR, slid=3, dlid=5, rev=0)
    assert audit(raw_file(tmp_path, good)) == []
    assert audit(raw_file(tmp_path, bad, "bad")) == [err("BLOB-BIDIR-NOT-REVERSIBLE")]


def test_gmp_record_not_reversible(tmp_path):
    """0x03 GMP|PRIMARY (no BIDIRECTIONAL): only BLOB-GMP-NOT-REVERSIBLE among the reversibility
    rules; ucma rejects the blob for want of a 0x2B record."""
    blob = rec(0x03, dlid=7, rev=0) + rec(FWD, rev=0) + rec(RET, sgid=R, dgid=L, slid=2, dlid=1)
    assert audit(raw_file(tmp_path, blob), "proposal") == [err("BLOB-GMP-NOT-REVERSIBLE")]
    blob_ok = rec(0x03, dlid=7) + rec(FWD, rev=0) + rec(RET, sgid=R, dgid=L, slid=2, dlid=1)
    assert audit(raw_file(tmp_path, blob_ok, "ok"), "proposal") == []


# -- BLOB-ENDPOINTS ----------------------------------------------------------------------------

def test_inbound_record_in_the_wrong_direction(tmp_path):
    bad = (rec(FWD, rev=0) + rec(RET, sgid=L, dgid=R, slid=1, dlid=2, rev=0)
           + rec(GMP_BIDIR, flow=5))
    found = audit(raw_file(tmp_path, bad), messages=True)
    assert [x[:3] for x in found] == [err("BLOB-ENDPOINTS")]
    assert "record 1 (PRIMARY|INBOUND)" in found[0][3] and "remote → local" in found[0][3]


def test_inbound_reverse_record_goes_local_to_remote(tmp_path):
    ok = rec(FWD, rev=0) + rec(RET_REV, rev=0) + rec(GMP_BIDIR, flow=5)
    bad = rec(FWD, rev=0) + rec(RET_REV, sgid=R, dgid=L, rev=0) + rec(GMP_BIDIR, flow=5)
    assert audit(raw_file(tmp_path, ok)) == []
    assert audit(raw_file(tmp_path, bad, "bad")) == [err("BLOB-ENDPOINTS")]


def test_record_for_a_third_gid(tmp_path):
    found = audit(raw_file(tmp_path, SINGLE + rec(ALT_BIDIR, dgid=X, dlid=9)), messages=True)
    assert [x[:3] for x in found] == [err("BLOB-ENDPOINTS")]
    assert X_TEXT in found[0][3] and "not the blob's endpoints" in found[0][3]
    assert audit(raw_file(tmp_path, SINGLE + rec(ALT_BIDIR, dlid=9), "ok")) == []


# -- BLOB-NOT-MAD-FORMAT: the single-blob heuristics --------------------------------------------

def test_record_with_its_words_in_host_order(tmp_path):
    """Swapped words: MTU code 0, reserved bytes set, fe80:: prefix reading 0000:80fe (the
    swapped selectors and P_Key are out of range too, but BLOB-FIELD-RANGE does not judge a
    record that is not wire format)."""
    found = audit(raw_file(tmp_path, swapped_rec(GMP_BIDIR)), messages=True)
    assert [x[:3] for x in found] == [err("BLOB-NOT-MAD-FORMAT")]
    msg = found[0][3]
    assert "MTU code 0 is outside 1-5" in msg and "reserved bits or bytes are not zero" in msg
    assert "SGID 0:80fe::3c9:200:100:0 has the fe80:: prefix byte-swapped" in msg
    assert f"swapped back it reads as a valid path {L_TEXT} → {R_TEXT}" in msg
    assert audit(raw_file(tmp_path, rec(GMP_BIDIR), "ok")) == []


@pytest.mark.parametrize("kw, what", [
    (dict(tail=b"\0\0\0\0\0\x01"), "reserved bits or bytes are not zero"),
    (dict(resv3=5), "reserved bits or bytes are not zero"),
    (dict(mtu=6), "MTU code 6 is outside 1-5"),
    (dict(mtu=0), "MTU code 0 is outside 1-5"),
    (dict(rate=1), "rate code 1 is unknown"),
    (dict(rate=40), "rate code 40 is unknown"),
    (dict(dgid=word_swap(R)), "DGID 0:80fe::3c9:200:200:0 has the fe80:: prefix byte-swapped"),
])
def test_not_mad_format_heuristics(tmp_path, kw, what):
    """Each heuristic on its own; the same record without the defect is clean."""
    found = audit(raw_file(tmp_path, rec(GMP_BIDIR, **kw)), messages=True)
    found = [x for x in found if x[0] != "BLOB-ENDPOINTS"]  # a swapped DGID is another GID too
    assert [x[:3] for x in found] == [err("BLOB-NOT-MAD-FORMAT")]
    assert what in found[0][3]


# -- BLOB-FIELD-RANGE ---------------------------------------------------------------------------

@pytest.mark.parametrize("kw, what", [
    (dict(mtu_sel=0), "MTU selector 0"),
    (dict(rate_sel=3), "rate selector 3"),
    (dict(plt_sel=1), "PacketLifeTime selector 1"),
    (dict(rate=0), "rate 0 (port current)"),
    (dict(pkey=0x8000), "P_Key 0x8000 is invalid"),
    (dict(pkey=0x0000), "P_Key 0x0000 is invalid"),
    (dict(plt=40), "PacketLifeTime 40 is above 31"),
])
def test_field_range(tmp_path, kw, what):
    found = audit(raw_file(tmp_path, rec(GMP_BIDIR, **kw)), messages=True)
    assert [x[:3] for x in found] == [warn("BLOB-FIELD-RANGE")]
    assert what in found[0][3]


def test_field_range_zero_gid(tmp_path):
    found = audit(raw_file(tmp_path, rec(GMP_BIDIR, sgid=b"\0" * 16)), messages=True)
    assert [x[:3] for x in found] == [warn("BLOB-FIELD-RANGE")]
    assert "SGID is all zero" in found[0][3]


# -- alternates -----------------------------------------------------------------------------------

def test_alternate_without_primary(tmp_path):
    found = audit(raw_file(tmp_path, rec(ALT_BIDIR, slid=3, dlid=5)), messages=True)
    assert [x[:3] for x in found] == [err("BLOB-ALT-WITHOUT-PRIMARY"), err("BLOB-KERNEL-REJECT"),
                                      err("BLOB-KERNEL-REJECT")]
    assert "ALTERNATE record(s) 0 but no PRIMARY record" in found[0][3]
    assert audit(raw_file(tmp_path, SINGLE + rec(ALT_BIDIR, slid=3, dlid=5), "ok")) == []


def test_alternate_same_as_primary(tmp_path):
    found = audit(raw_file(tmp_path, SINGLE + rec(ALT_BIDIR)), messages=True)
    assert [x[:3] for x in found] == [warn("BLOB-ALT-SAME-AS-PRIMARY")]
    assert "alternate record 1" in found[0][3] and "primary record 0" in found[0][3]
    # another SL is another route (VL): no warning
    assert audit(raw_file(tmp_path, SINGLE + rec(ALT_BIDIR, sl=1), "ok")) == []


# -- BLOB-PROFILE-DIVERGENCE -----------------------------------------------------------------------

@pytest.mark.parametrize("kw, what", [
    (dict(dlid=7), "DLID 7 vs 2"), (dict(sl=3), "SL 3 vs 0"), (dict(mtu=5), "MTU 5 vs 4"),
    (dict(rate=7), "rate 7 vs 16")])
def test_profile_divergence(tmp_path, kw, what):
    blob = (rec(FWD, rev=0) + rec(RET, sgid=R, dgid=L, slid=2, dlid=1, rev=0)
            + rec(GMP_BIDIR, **kw))
    f = raw_file(tmp_path, blob)
    found = audit(f, messages=True)
    assert [x[:3] for x in found] == [warn("BLOB-PROFILE-DIVERGENCE")]
    assert what in found[0][3]
    assert audit(f, "ucma") == [] and audit(f, "proposal") == []  # one profile: nothing to compare


# -- LS responses are blobs too -------------------------------------------------------------------

def pr(**kw) -> PathRecord:
    """A PathRecord layer object over struct-packed bytes (for CaptureBuilder.ls_response)."""
    return PathRecord(path(**kw))


def test_ls_response_records_go_through_the_blob_rules(tmp_path):
    """Blob rules on an LS RESOLVE response, with its own frame number; only the LS profiles
    judge it (ucma would reject a lone 0x0A record, but ucma never reads netlink)."""
    cap = tmp_path / "ls.pcapng"
    with CaptureBuilder(str(cap)) as b:
        b.ls_request(5, path_use=1, sgid=L_TEXT, dgid=R_TEXT)              # 1 UNIDIRECTIONAL
        b.ls_response(5, [(FWD, pr(rev=0))])                               # 2 fine
        b.ls_request(6, path_use=2, sgid=L_TEXT, dgid=R_TEXT)              # 3 GMP
        b.ls_response(6, [(GMP_BIDIR, pr(rev=0))])                         # 4 not reversible
        b.ls_request(7, path_use=2, sgid=L_TEXT, dgid=R_TEXT)              # 5 GMP
        b.ls_response(7, [(FWD, pr(rev=0))])                               # 6 no 0x2B
        b.ls_request(8, path_use=2, sgid=L_TEXT, dgid=R_TEXT)              # 7
        b.ls_response(8, [], error=True)                                   # 8 LS_F_ERR: not a blob
        b.ls_request(9, path_use=0, sgid=L_TEXT, dgid=R_TEXT)              # 9 ALL
        b.ls_response(9, [])                                               # 10 no record, no ERR
    found = audit(cap, messages=True)
    assert [x[:3] for x in found] == [
        err("BLOB-BIDIR-NOT-REVERSIBLE", [4]),
        err("BLOB-EMPTY", [10]),
        err("BLOB-GMP-NOT-REVERSIBLE", [4]),
        *[err("BLOB-KERNEL-REJECT", [6])] * 3, *[err("BLOB-KERNEL-REJECT", [10])] * 3,
        ("RES-LS-ERR", "info", [7, 8]),
        # path_use ALL: sent by 6.1/6.2 and by 6.3 on, each reading judged
        err("RES-LS-PATHUSE", [5, 6]), *[err("RES-LS-PATHUSE", [9, 10])] * 2]
    rejects = [x[3] for x in found if x[0] == "BLOB-KERNEL-REJECT"]
    assert rejects[0].startswith("ls-legacy (path_use GMP) rejects the LS RESOLVE response seq 7")
    assert rejects[1].startswith("ls-multi (path_use GMP) rejects")
    assert rejects[2].startswith("ls-multi-6.1 (path_use GMP) rejects")
    assert all("-EIO" in m for m in rejects)
    assert "no PATH_RECORD attribute" in found[1][3]
    assert [x[:3] for x in audit(cap, "ucma")] == [
        err("BLOB-BIDIR-NOT-REVERSIBLE", [4]), err("BLOB-EMPTY", [10]),
        err("BLOB-GMP-NOT-REVERSIBLE", [4]), ("RES-LS-ERR", "info", [7, 8]),
        err("RES-LS-PATHUSE", [5, 6]), *[err("RES-LS-PATHUSE", [9, 10])] * 2]
    assert [x[:3] for x in audit(cap, "ls-multi-6.1")][-1] == err("RES-LS-PATHUSE", [9, 10])


def test_ls_response_divergence_between_ls_legacy_and_ls_multi(tmp_path):
    """path_use ALL, seed layout: ls-legacy takes the 0x2B record (DLID 7) as the path,
    ls-multi takes the data-path DLID from the OUTBOUND record (DLID 2)."""
    cap = tmp_path / "ls3.pcapng"
    with CaptureBuilder(str(cap)) as b:
        b.ls_request(3, path_use=0, sgid=L_TEXT, dgid=R_TEXT)
        b.ls_response(3, [(FWD, pr(rev=0)), (RET, pr(sgid=R, dgid=L, slid=2, dlid=1, rev=0)),
                          (GMP_BIDIR, pr(dlid=7))])
        b.ls_request(4, path_use=0, sgid=L_TEXT, dgid=R_TEXT)
        b.ls_response(4, [(FWD, pr(rev=0)), (RET, pr(sgid=R, dgid=L, slid=2, dlid=1, rev=0)),
                          (GMP_BIDIR, pr(flow=5))])
    found = audit(cap, messages=True)
    assert [x[:3] for x in found] == [warn("BLOB-PROFILE-DIVERGENCE", [2])]
    # ls-multi-6.1 and ls-multi send alike: one finding names both
    assert ("ls-legacy sends data per record(s) [2], ls-multi-6.1 and ls-multi per record(s) "
            "[0, 2]: DLID 7 vs 2") in found[0][3]


def test_ls_path_record_attribute_of_the_wrong_size(tmp_path):
    """PATH_RECORD values of 64 and 80 bytes (struct-built netlink). 80 > ib_nl_policy's 72:
    nla_parse fails and the kernel sends the query to the SA itself."""
    cap = tmp_path / "lslen.pcapng"

    def nlattr(typ, value):
        return struct.pack("<HH", 4 + len(value), typ) + value + b"\0" * (-len(value) % 4)

    def nlmsg(seq, body, flags=0):
        return struct.pack("<IHHII", 16 + len(body), 0x1000, flags, seq, 4242) + body

    cooked_to_kernel = struct.pack("!HHH8sH", 7, 824, 0, b"\0" * 8, 20)
    with CaptureBuilder(str(cap)) as b:
        b.ls_request(1, path_use=2, sgid=L_TEXT, dgid=R_TEXT)
        b._write(cooked_to_kernel + nlmsg(1, nlattr(1, SINGLE + b"\0" * 8)), 253)
        b.ls_request(2, path_use=2, sgid=L_TEXT, dgid=R_TEXT)
        b._write(cooked_to_kernel + nlmsg(2, nlattr(1, SINGLE)), 253)
    found = audit(cap, messages=True)
    assert [x[:3] for x in found] == [err("BLOB-KERNEL-REJECT", [2])] * 3 + [
        err("BLOB-LENGTH", [2])]
    assert "carries 80 bytes, not 72" in found[3][3] and "nla_parse() fails" in found[3][3]
    assert all("sa-fallback" in x[3] for x in found[:3])


# -- BLOB-NOT-MAD-FORMAT against the SA's answer (resolution family) ------------------------------

def resolver_exchange(cap: Path, answer_bytes: bytes, *, via: str):
    """The resolver's SA query and OpenSM's answer, then its hand-over carrying answer_bytes:
    an LS response to the kernel's LS request (record 0), or a blob frame (record 1)."""
    sa_record = PathRecord(path())
    with CaptureBuilder(str(cap)) as b:
        if via == "ls":
            b.ls_request(11, path_use=2, sgid=L_TEXT, dgid=R_TEXT)         # 1
        else:
            b.blob(SINGLE)                                                 # 1 (an earlier blob)
        q = b.sa_query(PathRecord(sgid=L_TEXT, dgid=R_TEXT))              # 2
        (answer,) = b.sa_answer(q, [sa_record])                           # 3
        if via == "ls":
            b.ls_response(11, [(GMP_BIDIR, PathRecord(answer_bytes))])     # 4
        else:
            b.blob(rec(GMP_BIDIR) + struct.pack("<II", ALT_BIDIR, 0) + answer_bytes)  # 4
    return answer


def test_ls_response_carries_the_sa_record_word_swapped(tmp_path):
    cap = tmp_path / "swapped-ls.pcapng"
    answer = resolver_exchange(cap, word_swap(path()), via="ls")
    assert answer == 3
    found = audit(cap, messages=True)
    assert [x[:3] for x in found] == [
        err("BLOB-NOT-MAD-FORMAT", [3, 4]), err("BLOB-NOT-MAD-FORMAT", [4]),
        err("RES-LS-MISMATCH", [1, 4])]
    assert "is SA record 0 of frame 3" in found[0][3] and "32-bit words byte-swapped" in found[0][3]
    assert "SGID 0:80fe::3c9:200:100:0 (request SGID fe80::2:c903:0:1)" in found[2][3]


def test_ls_response_carries_the_sa_record_as_is(tmp_path):
    cap = tmp_path / "ok-ls.pcapng"
    resolver_exchange(cap, path(), via="ls")
    assert audit(cap) == []


def test_blob_frame_carries_the_sa_record_word_swapped(tmp_path):
    """Record 1 of the blob (an alternate) is the SA's record in host order; record 0 places
    the blob in the resolution."""
    cap = tmp_path / "swapped-blob.pcapng"
    resolver_exchange(cap, word_swap(path()), via="blob")
    assert audit(cap) == [err("BLOB-ENDPOINTS", [4]), err("BLOB-NOT-MAD-FORMAT", [3, 4]),
                          err("BLOB-NOT-MAD-FORMAT", [4])]
    cap2 = tmp_path / "ok-blob.pcapng"
    resolver_exchange(cap2, path(slid=3, dlid=5), via="blob")
    assert audit(cap2) == []


# -- the command line, and real traffic ----------------------------------------------------------

def test_cli_json_on_a_raw_blob(tmp_path):
    f = raw_file(tmp_path, rec(GMP_BIDIR, rev=0))
    rc, doc = cli_json(f)
    assert rc == 1
    assert sorted((x["rule"], x["severity"], x["frames"]) for x in doc["findings"]
                  if x["rule"] in MINE) == [
        err("BLOB-BIDIR-NOT-REVERSIBLE"), err("BLOB-GMP-NOT-REVERSIBLE")]
    assert all(x["file"] == str(f) for x in doc["findings"])
    rc, doc = cli_json(raw_file(tmp_path, SINGLE, "ok"))
    assert rc == 0 and doc["findings"] == []


def test_real_traffic_raises_no_error():
    files = [ROOT / "captures" / "opensm" / "opensm-saquery.pcap"]
    files += sorted((SHARED / "captures" / "external").glob("*.pcap"))
    files = [f for f in files if f.exists()]
    if not files:
        pytest.skip("no real captures found")
    rc, doc = cli_json(*files)
    assert [x for x in doc["findings"] if x["severity"] == "error"] == []
    assert rc == 0


# -- robustness -----------------------------------------------------------------------------------

@settings(max_examples=120, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 0xFF), st.binary(min_size=64, max_size=64)),
                min_size=0, max_size=4),
       st.binary(max_size=80), st.sampled_from(["all", "ucma", "ls-multi"]))
def test_any_blob_is_judged_without_a_crash(records, tail, kernel):
    """Arbitrary records (flags below 0x100, any 64 bytes) and trailing bytes: every blob rule
    runs, and every finding names frame 1."""
    data = b"".join(struct.pack("<II", f, 0) + body for f, body in records) + tail
    decoded = list(Decoder().feed(Frame(1, 0.0, RAW_BLOB_LINKTYPE, data, len(data))))
    fa = audit_records("fuzz", decoded, AuditOptions(kernel=kernel))
    for f in fa.findings:
        assert f.frames == (1,) and f.severity in ("error", "warning", "info") and f.message
