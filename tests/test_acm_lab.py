"""The committed stand-in ibacm runs (captures/rxe/acm, `ibpath lab run acm-all`): real
librdmacm (rdma-core 44, the guest's) and a real kernel (6.1, rdma_rxe) against every craft
scenario that hands over a path array.

The oracles are the real programs, recorded in the captures: the ACM messages the client
process sent and received on librdmacm's socket, the array librdmacm passed to
rdma_set_option with the kernel's return value (`ibpath record`'s shim), the CM REQ on the
wire (tcpdump). They are checked against the stand-in's code (what it answers for the
request librdmacm sent), against acm.c as read (ucma_ib_save_resp), and against the `ucma`
kernel-view profile; the matrix (matrix.json, README.md) must be what the captures show.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ibpath_scapy.acm.serve import MAX_MESSAGE, answer, plan_for
from ibpath_scapy.lab import acmmatrix
from ibpath_scapy.lab.scenarios import acm_scenarios
from ibpath_scapy.layers.acm import AcmHdr
from ibpath_scapy.layers.ib import ExportedPDU
from ibpath_scapy.capture.pcapio import read_frames

ROOT = Path(__file__).resolve().parent.parent
ACM = ROOT / "captures" / "rxe" / "acm"
MATRIX = {r["scenario"]: r for r in json.loads((ACM / "matrix.json").read_text())["rows"]}
LAB = json.loads((ACM / "lab.json").read_text())
RUNS = {s.name: s for s in acm_scenarios()}


def acm_messages(name: str) -> list[tuple[bytes, str]]:
    """The ACM messages of the client process (ibpath record) with their packet comment."""
    out = []
    for f in read_frames(str(ACM / f"{name}.pcapng")):
        if f.linktype == 252:
            pdu = ExportedPDU(f.data)
            if pdu.dissector_name() == "ibpath.acm":
                out.append((bytes(pdu.payload), f.comment or ""))
    return out


def test_every_run_is_committed():
    """One capture and one matrix row per acm run of the lab, nothing else."""
    assert set(MATRIX) == set(RUNS) == set(LAB["scenarios"])
    assert {p.stem for p in ACM.glob("*.pcapng")} >= set(RUNS)
    assert LAB["kernel_release"].startswith("6.1.") and LAB["packages"]["librdmacm1"] == "44.0-2"


@pytest.mark.parametrize("name", sorted(RUNS))
def test_librdmacm_asked_the_stand_in(name):
    """Feasibility: the guest's unmodified librdmacm (the test program through ctypes, and
    rping) connected to /run/ibacm.sock and sent a RESOLVE with its source and destination,
    and got the stand-in's answer (or, with --no-answer, nothing)."""
    msgs = acm_messages(name)
    sent = [AcmHdr(m) for m, c in msgs if c.startswith("acm send")]
    got = [AcmHdr(m) for m, c in msgs if c.startswith("acm recv")]
    assert len(sent) == 1 and sent[0].opcode == 0x01, name
    assert [e.address_text() for e in sent[0].resolve_data] == ["10.0.0.1", "10.0.0.2"]
    assert [int(e.flags) for e in sent[0].resolve_data] == [1, 2]  # SOURCE, DEST
    silent = "--no-answer" in RUNS[name].standin_args
    assert len(got) == (0 if silent else 1), name


@pytest.mark.parametrize("name", sorted(n for n in RUNS if "--no-answer" not in
                                        RUNS[n].standin_args))
def test_answer_received_is_the_stand_ins(name):
    """What librdmacm received is what the stand-in's code answers for the request it sent
    (seed 0, endpoints mapped), up to the sizeof(struct acm_msg) librdmacm's recv() takes."""
    msgs = acm_messages(name)
    req = AcmHdr(next(m for m, c in msgs if c.startswith("acm send")))
    got = next(m for m, c in msgs if c.startswith("acm recv"))
    want, _notes = answer(req, plan_for(RUNS[name].craft), 0)
    assert got == bytes(want)[:MAX_MESSAGE], name


def test_matrix_is_what_the_captures_show():
    """matrix.json, recomputed from the captures (and the audit of each)."""
    assert {r["scenario"]: r for r in acmmatrix.rows(ACM)} == MATRIX


@pytest.mark.parametrize("name", sorted(n for n in MATRIX if MATRIX[n]["verdict"]))
def test_librdmacm_passes_the_path_entries_verbatim(name):
    """Real librdmacm against acm.c as read: the array given to rdma_set_option is the
    answer's path entries, type zeroed, whole entries only (acmmatrix.expected_route)."""
    assert MATRIX[name]["passed"].startswith("verbatim"), MATRIX[name]


@pytest.mark.parametrize("name", sorted(n for n in MATRIX if MATRIX[n]["verdict"]))
def test_kernel_verdict_is_the_ucma_prediction(name):
    """The real kernel's rdma_set_option result against the `ucma` kernel-view profile, and
    the CM REQ's primary path is the record the profile says it takes."""
    r = MATRIX[name]
    assert (r["verdict"] == "0") == r["ucma"].startswith("gmp"), r
    if r["verdict"] == "0" and r["route"] != "no CM REQ on the wire":
        gmp = r["ucma"].split()[1]
        assert r["route"] == f"record {gmp}" or (
            r["route"].startswith("records ") and gmp in r["route"].split(" (")[0]), r
    else:
        assert r["route"] in ("kernel route", "no CM REQ on the wire"), r


def test_no_array_means_the_kernel_route():
    """An answer without paths (ENODATA, ETIMEDOUT, an empty entry list, one longer than
    struct acm_msg, no answer at all): librdmacm calls no rdma_set_option and
    rdma_resolve_route takes the kernel's own route."""
    none = {n for n, r in MATRIX.items() if r["passed"] == "no rdma_set_option"}
    assert none == {"acm-sar-status", "acm-saq-no-response", "acm-saq-no-response-silent",
                    "acm-blob-empty", "acm-decode-limit"}
    assert all(MATRIX[n]["route"] == "kernel route" for n in none)


def test_af_ib_entry_breaks_rdma_getaddrinfo_callers():
    """ucmatose resolves with rdma_getaddrinfo, no RAI_ROUTEONLY: librdmacm turns the
    answer's path into an AF_IB entry (acm.c ucma_resolve_af_ib) and ucmatose's
    rdma_resolve_addr with it fails with ENODEV on rxe; the AF_IB addresses are the path's
    GIDs. rping (rdma_resolve_route) on the same answer connects on the record."""
    from ibpath_scapy.layers.ucma import UcmaResolveAddr, sockaddr_text
    r = MATRIX["acm-ucmatose-conform-ucma"]
    assert r["passed"].endswith("RESOLVE_ADDR with AF_IB addresses from the answer's path "
                                "(ENODEV)") and r["route"] == "no CM REQ on the wire"
    assert MATRIX["acm-rping-conform-ucma"]["route"] == "record 0"
    msgs = acm_messages("acm-ucmatose-conform-ucma")
    path = AcmHdr(next(m for m, c in msgs if c.startswith("acm recv"))).resolve_data[0].path
    resolve = [ExportedPDU(f.data)[UcmaResolveAddr] for f in
               read_frames(str(ACM / "acm-ucmatose-conform-ucma.pcapng"))
               if f.linktype == 252 and UcmaResolveAddr in ExportedPDU(f.data)]
    assert len(resolve) == 1
    # struct sockaddr_ib: family, pkey, flowinfo, then the GID at bytes 8-23
    assert ipaddress.IPv6Address(resolve[0].src_addr[8:24]) == ipaddress.IPv6Address(path.sgid)
    assert ipaddress.IPv6Address(resolve[0].dst_addr[8:24]) == ipaddress.IPv6Address(path.dgid)
    assert sockaddr_text(resolve[0].dst_addr).startswith("AF_IB ")


def test_readme_and_manifest_match_the_matrix(capsys):
    """captures/rxe/acm/README.md carries the matrix table; manifest.json names every
    capture with its audit findings, which `ibpath craft --verify` (tools/main.sh) checks."""
    from ibpath_scapy.craft.corpus import verify_corpus
    assert acmmatrix.markdown(list(MATRIX.values())) in (ACM / "README.md").read_text()
    rows = json.loads((ACM / "manifest.json").read_text())["scenarios"]
    assert {r["file"]: r["rules"] for r in rows} == \
        {r["file"]: r["findings"] for r in MATRIX.values()}
    assert verify_corpus(ACM, report=False)
    assert f"{len(rows)} files, {len(rows)} as expected, 0 not" in capsys.readouterr().out


IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main"]


@pytest.mark.skipif(os.environ.get("IBPATH_LAB") != "1" or shutil.which("qemu-system-x86_64")
                    is None or shutil.which("mmdebstrap") is None,
                    reason="boots a QEMU guest (a full core, a 560 MB cache): set IBPATH_LAB=1 "
                    "with qemu-system-x86 and mmdebstrap installed")
def test_lab_acm_run(tmp_path):
    """The real lab: two runs end to end, and their rows as in the committed matrix."""
    names = ["acm-blob-length", "acm-sar-status"]
    p = subprocess.run(IBPATH + ["lab", "run", *names, "-o", str(tmp_path)],
                       capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    got = {r["scenario"]: r for r in acmmatrix.rows(tmp_path)}
    for n in names:
        assert {k: v for k, v in got[n].items()} == MATRIX[n], n
