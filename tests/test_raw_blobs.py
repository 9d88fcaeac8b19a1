"""Issue 17, point 5: raw blob files whatever their flags word. The content sniff
(blobsniff.plausible) takes whole records whose PathRecords read as resolved paths in wire
format; `--as blob` and `--blob FILE` take any file; flags written in the wrong byte order are
reported as such; decode's exit status follows its help for every blob problem. Records are
packed with `struct` from IBA's layout (test_rules_blob.path), independently of the layers."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest

from ibpath_scapy.engines.scapy import blobsniff
from ibpath_scapy.engines import tshark as tshark_engine
from ibpath_scapy.audit.engine import audit_records
from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.engines.scapy.decode import decode_file

from test_rules_blob import GMP_BIDIR, SINGLE, path, rec, swapped_rec
from test_audit_cli import good  # noqa: F401  (fixture)

IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main"]


def cli(*args) -> tuple[int, str, str]:
    p = subprocess.run(IBPATH + [str(a) for a in args], capture_output=True, text=True,
                       timeout=120)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, p.stdout, p.stderr


def audit_json(*args) -> tuple[int, dict, str]:
    rc, out, err = cli("audit", "--quiet", "--format", "json", *args)
    return rc, json.loads(out), err


def rules(doc: dict, file=None) -> set[str]:
    return {f["rule"] for f in doc["findings"] if file is None or f["file"] == str(file)}


@pytest.fixture
def blob_42b(tmp_path):
    """0x42B: the 0x2B record with an unknown bit above 0xFF (once refused by the sniff)."""
    f = tmp_path / "flags-42b.bin"
    f.write_bytes(rec(0x42B))
    return f


@pytest.fixture
def blob_swapped(tmp_path):
    """The 0x2B flags word written in network order (0x2B000000 read in host order)."""
    f = tmp_path / "flags-be.bin"
    f.write_bytes(struct.pack(">I", GMP_BIDIR) + SINGLE[4:])
    return f


def test_sniff_accepts_any_flags_when_the_records_look_like_paths():
    assert blobsniff.plausible(rec(0x42B))
    assert blobsniff.plausible(struct.pack(">I", GMP_BIDIR) + SINGLE[4:])
    assert blobsniff.plausible(rec(0xFFFFFFFF) + rec(0x2B))
    assert blobsniff.plausible(rec(0x2B)[:71])  # a flags word below 0x100 suffices


@pytest.mark.parametrize("data, why", [
    (rec(0x42B)[:71], "not whole records"),
    (rec(0x42B, mtu=7), "MTU code 7"),
    (rec(0x42B, rate=1), "rate code 1"),
    (rec(0x42B, resv3=1), "reserved bits"),
    (struct.pack("<I", 0x42B) + bytes(4) + path(sgid=bytes(16)), "GID ::"),
    (swapped_rec(0x2B000000), "PathRecord words byte-swapped (fe80 prefix swapped)"),
    (b"root:x:0:0:root:/root:/bin/bash\n" * 9, "text"),
    (b"\x7fELF\x02\x01\x01\x00" + bytes(64), "an ELF header"),
])
def test_sniff_refuses_what_is_no_path_array(data, why):
    assert not blobsniff.plausible(data), why


def test_flags_42b_raw_file(blob_42b):
    rc, out, err = cli("decode", "--format", "json", blob_42b)
    assert rc == 0, err  # decoded whole: the flags are the audit's business
    (r,) = map(json.loads, out.splitlines())
    assert r["kind"] == "blob" and r["blob_records"][0]["flags"] == 0x42B
    rc, doc, _ = audit_json(blob_42b)
    assert rc == 1 and "BLOB-UNKNOWN-FLAGS" in rules(doc)
    (f,) = [f for f in doc["findings"] if f["rule"] == "BLOB-UNKNOWN-FLAGS"]
    assert "unknown bits 0x400" in f["message"]


def test_byte_swapped_flags_raw_file_is_reported_as_written_in_the_wrong_order(blob_swapped):
    rc, doc, _ = audit_json(blob_swapped)
    assert rc == 1 and "unreadable" not in doc
    (f,) = [f for f in doc["findings"] if f["rule"] == "BLOB-UNKNOWN-FLAGS"]
    assert "byte-swapped it would read 0x2b" in f["message"]
    assert "network order instead of host order" in f["message"]


def test_blob_option_takes_them_too(tmp_path, good, blob_42b, blob_swapped):  # noqa: F811
    for blob in (blob_42b, blob_swapped):
        rc, doc, err = audit_json("--blob", blob, good)
        assert rc == 1 and "unreadable" not in doc, err
        assert doc["files"] == [str(good), str(blob)]
        assert "BLOB-UNKNOWN-FLAGS" in rules(doc, blob)


def test_as_blob_reads_a_file_the_sniff_refuses(tmp_path):
    """A record with its words byte-swapped (no htonl): the sniff says no, --as blob says
    yes, and the audit says what is wrong with it."""
    f = tmp_path / "host-order.bin"
    f.write_bytes(swapped_rec(0x2B000000))
    rc, _, err = cli("decode", f)
    assert rc == 2 and "not a capture or blob file" in err and str(f) in err
    rc, out, err = cli("decode", "--as", "blob", "--format", "json", f)
    r = json.loads(out)
    assert r["kind"] == "blob", err
    # swapped words put bits in reserved places: an error, so exit 1
    assert rc == 1 and any("reserved PathRecord bits" in e for e in r["errors"])
    rc, doc, _ = audit_json("--as", "blob", f)
    assert rc == 1 and {"BLOB-NOT-MAD-FORMAT", "BLOB-UNKNOWN-FLAGS"} <= rules(doc)
    rc, doc, _ = audit_json(f)
    assert rc == 2 and doc["unreadable"][0]["file"] == str(f)


def test_71_byte_blob_decode_exits_1(tmp_path):
    f = tmp_path / "short.bin"
    f.write_bytes(SINGLE[:71])
    rc, out, err = cli("decode", "--format", "json", f)
    assert rc == 1, err
    (r,) = map(json.loads, out.splitlines())
    assert r["blob"]["length"] == 71 and any("not a multiple of 72" in e for e in r["errors"])
    rc, doc, _ = audit_json(f)
    assert rc == 1 and {"BLOB-LENGTH", "BLOB-EMPTY"} <= rules(doc)


@pytest.mark.skipif(tshark_engine.tshark_path() is None, reason="tshark missing")
def test_tshark_engine_gives_the_same(blob_42b, blob_swapped):
    for f in (blob_42b, blob_swapped):
        want = audit_records(str(f), list(decode_file(str(f))), AuditOptions()).findings
        got = audit_records(str(f), list(tshark_engine.tshark_records(str(f))),
                            AuditOptions()).findings
        assert sorted(got, key=repr) == sorted(want, key=repr)
