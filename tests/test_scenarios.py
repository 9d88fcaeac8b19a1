"""`ibpath craft`: the scenario library, the SA model and the bundled corpus (captures/corpus/).

* every scenario's capture, audited (with its --kernel profile), gives exactly the rule IDs it
  declares: errors, warnings and infos alike (the convention: a scenario declares the whole
  set `ibpath audit` reports, info findings such as SAQ-RETRY or SAR-STATUS included), in every
  encapsulation it supports and for a second seed;
* together the scenarios trigger every registered rule (minus NOT_SHOWABLE, with reasons);
* every corpus capture goes through tshark with the generated plugin: no Lua error, no
  malformed packet except in scenarios about malformed data, no Error expert other than the
  single-packet rules the scenario declares, and the plugin's rule experts name the same rules
  on the same frames as the audit;
* the SA model answers the real OpenSM capture's queries with OpenSM's bytes (captures/opensm/,
  read with plain struct by tests/test_opensm_capture.py's readers, not the project's layers);
* the committed corpus is what a fresh generation writes, and its manifest is right.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys

import pytest

from ibpath_scapy.audit.model import RULES, AuditOptions
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.cli.main import main as ibpath_main
from ibpath_scapy.craft.corpus import (
    MANIFEST, manifest_entry, scenario_seed, verify_corpus, write_corpus,
)
from ibpath_scapy.craft.resolver import Ibacm
from ibpath_scapy.craft.sa_model import Fabric, Port, SAModel
from ibpath_scapy.craft.scenarios import SCENARIOS
from ibpath_scapy.craft.session import Session
from ibpath_scapy.audit.packet_rules import PACKET_RULES
from ibpath_scapy.capture.pcapio import read_frames

from conftest import CAPTURES, ROOT
from test_opensm_capture import PCAP as OPENSM_PCAP, SESSION as OPENSM_SESSION, read_pcap, split_frame
from tshark_util import assert_clean, require_tshark, run_tshark

CORPUS = CAPTURES / "corpus"
LUA = str(ROOT / "dissector" / "ibpath.lua")

# Rules no capture can show, with the reason. Empty: every rule of audit-rules.md has a scenario.
NOT_SHOWABLE: dict[str, str] = {}


def audited_rules(path, kernel: str) -> set[str]:
    (fa,), unreadable = audit_paths([str(path)], AuditOptions(kernel=kernel), quiet=True)
    assert not unreadable, f"{path} could not be read to its end: {fa.error}"
    return {f.rule for f in fa.findings}


CASES = [pytest.param(name, enc, 0, id=f"{name}-{enc}")
         for name, sc in SCENARIOS.items() for enc in sc.encaps]
CASES += [pytest.param(name, sc.default_encap, 1, id=f"{name}-seed1")
          for name, sc in SCENARIOS.items()]


@pytest.mark.parametrize("name,encap,seed", CASES)
def test_scenario_audits_to_exactly_its_rules(tmp_path, name, encap, seed):
    sc = SCENARIOS[name]
    path = sc.write(tmp_path / f"{name}.pcapng", seed=seed, encap=encap)
    assert audited_rules(path, sc.kernel) == set(sc.rules)


def test_scenarios_cover_every_rule():
    declared = set().union(*(sc.rules for sc in SCENARIOS.values()))
    assert not declared - set(RULES), "scenarios declare rules nobody registered"
    assert declared == set(RULES) - set(NOT_SHOWABLE)


def test_one_conforming_scenario_per_kernel_profile():
    clean = {sc.kernel for sc in SCENARIOS.values() if not sc.rules}
    assert {"all", "ls-multi-6.1", "ls-multi", "proposal"} <= clean
    # ucma and ls-legacy are judged under "all" by their conforming flows
    assert not SCENARIOS["conform-ucma"].rules and not SCENARIOS["conform-ls-legacy"].rules


def test_every_scenario_is_documented():
    for name, sc in SCENARIOS.items():
        assert sc.summary and len(sc.doc.split("\n\n")) >= 2, f"{name}: summary and a why"


# -- the SA model against OpenSM -------------------------------------------------------------

def opensm_fabric() -> Fabric:
    """captures/opensm's subnet: the HCAs of session.json (LMC from it; MTU 2048, the ibsim
    default) and switch port 0 (one LID, 4, and GID fe80::20:0 as the capture's table shows,
    MTU 1024)."""
    lmc = OPENSM_SESSION["lmc"]
    ports = [Port("Switch1", "fe80::20:0", 4, 0, mtu=3)]
    ports += [Port(n, v["gid"], v["lid"], lmc) for n, v in sorted(OPENSM_SESSION["nodes"].items())]
    return Fabric(ports, rate=3, packet_life_time=18)


@pytest.mark.skipif(OPENSM_SESSION is None, reason="captures/opensm/ not present")
def test_sa_model_answers_byte_for_byte_as_opensm():
    """Each PathRecord query saquery sent (GetTable of every path, by LIDs, by GIDs, by DGID,
    an unknown DLID, an invalid rate) gets the MADs OpenSM wrote: headers, RMPP segmentation,
    record order, preference, selectors, NumbPath 0, error echo."""
    mads = [split_frame(f)["mad"] for f in read_pcap(OPENSM_PCAP)]
    sa = SAModel(opensm_fabric())
    queries = [m for m in mads if struct.unpack_from("!H", m, 16)[0] == 0x0035 and m[3] < 0x80]
    # every PathRecord query of session.json (the one by names never got past its NodeRecord
    # lookup: umad2sim cut that answer)
    assert len(queries) == sum(bool(q["request_tids"]) and q["name"] != "src-to-dst-names"
                               for q in OPENSM_SESSION["queries"]) == 6
    for q in queries:
        want = [m for m in mads if m[8:16] == q[8:16] and m[3] & 0x80]
        assert sa.respond(q) == want, f"TID {q[8:16].hex()}"


def test_ibacm_query_is_what_acmp_sends(tmp_path):
    """wire-formats.md §7.2: DGID|SGID|SLID|PKEY = 0x202C, method Get, no NumbPath."""
    s = Session(str(tmp_path / "x.pcapng"))
    ans = Ibacm(s).resolve(2).answers[0]
    s.close()
    raw = ans.query.raw
    assert raw[3] == 0x01 and struct.unpack_from("!Q", raw, 48)[0] == 0x202C


@pytest.mark.parametrize("name,status", [
    ("saq-serviceid-half", "0x0600 INSUF_COMPS"), ("saq-bad-method", "0x000c"),
    ("sar-status", "0x0300 NO_RECORDS"), ("res-ls-err", "0x0500 INVALID_GID"),
    ("res-stale-blob", "0x0500 INVALID_GID")])
def test_sa_model_status_codes(name, status):
    """The statuses of wire-formats.md §1 and §8 for what OpenSM refuses (the capture of
    captures/opensm/ only shows REQ_INVALID)."""
    (fa,), _ = audit_paths([str(CORPUS / f"{name}.pcapng")], AuditOptions(), quiet=True)
    (msg,) = [f.message for f in fa.findings if f.rule == "SAR-STATUS"]
    assert status.lower() in msg.lower()


# -- the corpus -------------------------------------------------------------------------------

def manifest() -> list[dict]:
    return json.loads((CORPUS / MANIFEST).read_text())["scenarios"]


def test_corpus_is_fresh(tmp_path):
    write_corpus(tmp_path)
    fresh = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_bytes() for p in CORPUS.iterdir()}
    assert sorted(committed) == sorted(fresh)
    stale = [n for n in fresh if fresh[n] != committed[n]]
    assert not stale, f"run `ibpath craft --corpus captures/corpus`: {stale} differ"


def test_manifest_rows_and_readme():
    rows = manifest()
    assert [r["scenario"] for r in rows] == sorted(SCENARIOS)
    readme = (CORPUS / "README.md").read_text()
    for r in rows:
        assert r == manifest_entry(r["scenario"], 0)
        line = next(ln for ln in readme.splitlines() if ln.startswith(f"| {r['file']} |"))
        for rule in r["rules"]:
            assert rule in line
        if "DECODE-LIMIT" not in r["rules"]:  # that one is about a 64 KiB frame
            assert (CORPUS / r["file"]).stat().st_size < 8192, "keep the corpus small"


@pytest.mark.parametrize("row", manifest(), ids=lambda r: r["file"])
def test_committed_file_audits_to_its_manifest_row(row):
    assert audited_rules(CORPUS / row["file"], row["kernel"]) == set(row["rules"])


def test_verify_reports_and_detects_a_difference(tmp_path, capsys):
    assert ibpath_main(["craft", "--verify", str(CORPUS)]) == 0
    out = capsys.readouterr().out
    assert f"{len(manifest())} files, {len(manifest())} as expected, 0 not" in out
    assert "== " in out and "RES-NO-FOLLOWUP" in out  # the audit's text report is shown
    # a corpus whose manifest expects nothing from a faulty file fails the check
    for p in CORPUS.iterdir():
        shutil.copy(p, tmp_path / p.name)
    rows = manifest()
    rows[[r["scenario"] for r in rows].index("res-no-followup")]["rules"] = []
    (tmp_path / MANIFEST).write_text(json.dumps({"scenarios": rows}))
    with open(tmp_path / "out.txt", "w") as out:
        assert verify_corpus(tmp_path, out, report=False) is False
    assert "MISMATCH res-no-followup.pcapng" in (tmp_path / "out.txt").read_text()


# -- the plugin in tshark ----------------------------------------------------------------------

_RULE_IDS = set(RULES)
_EXPERT = re.compile(r"\[Expert Info \((\w+)/(\w+)\): ([A-Z][A-Z0-9-]+)?")
_FRAME = re.compile(r"^Frame (\d+): ", re.MULTILINE)


def test_corpus_in_tshark_with_the_plugin(tmp_path):
    """One tshark run over the corpus files and the RoCEv2 variants of its native-IB scenarios,
    concatenated (mergecap -a; every file has its own TIDs, GIDs and LIDs, so nothing is
    reassembled across files), each frame's -V text judged by the rules of its own file."""
    require_tshark()
    mergecap = shutil.which("mergecap")
    if mergecap is None:
        pytest.skip("mergecap (wireshark-common) not installed")
    rows = [dict(r, path=str(CORPUS / r["file"])) for r in manifest()]
    for r in list(rows):
        sc = SCENARIOS[r["scenario"]]
        if r["encap"] != "rocev2" and "rocev2" in sc.encaps:
            path = tmp_path / f"rocev2-{r['file']}"
            sc.write(path, seed=scenario_seed(sc.name, 1), encap="rocev2")
            rows.append(dict(r, file=path.name, path=str(path)))
    merged = tmp_path / "all.pcapng"
    subprocess.run([mergecap, "-a", "-F", "pcapng", "-w", str(merged),
                    *[r["path"] for r in rows]], check=True)
    owner = []  # merged frame number - 1 → (row, frame number in its file)
    for r in rows:
        owner += [(r, k) for k in range(1, sum(1 for _ in read_frames(r["path"])) + 1)]
    run = run_tshark(merged, ["-X", f"lua_script:{LUA}", "-V"])
    assert run.returncode == 0, run.stderr[-2000:]
    assert_clean("", run.stderr)
    starts = list(_FRAME.finditer(run.stdout))
    assert len(starts) == len(owner), "tshark did not show every frame"
    packet_ids = {p.rule_id for p in PACKET_RULES}
    plugin: dict[str, set] = {r["file"]: set() for r in rows}
    for m, nxt in zip(starts, starts[1:] + [None]):
        block = run.stdout[m.start():nxt.start() if nxt else len(run.stdout)]
        row, frame = owner[int(m.group(1)) - 1]
        assert "Lua Error" not in block, f"{row['file']} frame {frame}: {block[:2000]}"
        for sev, group, rid in _EXPERT.findall(block):
            if rid in packet_ids:
                plugin[row["file"]].add((rid, frame))
        if row["malformed"]:
            continue
        kept = "\n".join(ln for ln in block.splitlines()
                         if not ((hit := _EXPERT.search(ln)) and hit.group(2) == "Protocol"
                                 and hit.group(3) in set(row["rules"]) & _RULE_IDS))
        try:
            assert_clean(kept, "")
        except AssertionError as exc:
            raise AssertionError(f"{row['file']} frame {frame}: {exc}") from None
    # the single-packet rules are declared once: plugin experts = audit findings, frame by
    # frame (the one-frame findings: a rule may also judge a whole transaction, e.g. an answer
    # to a Set, which no single packet shows)
    for r in rows:
        (fa,), _ = audit_paths([r["path"]], AuditOptions(kernel=r["kernel"]), quiet=True)
        audit = {(x.rule, x.frames[0]) for x in fa.findings
                 if x.rule in packet_ids and len(x.frames) == 1}
        assert plugin[r["file"]] == audit, r["file"]


def test_a_malformed_scenario_is_malformed_in_wireshark():
    """decode-malformed is about undecodable data: Wireshark must call it malformed too."""
    run = run_tshark(CORPUS / "decode-malformed.pcapng", ["-X", f"lua_script:{LUA}", "-V"])
    with pytest.raises(AssertionError, match="(?i)malformed"):
        assert_clean(run.stdout, run.stderr)
    assert "Lua Error" not in run.stdout + run.stderr


# -- the command line ----------------------------------------------------------------------------

def test_cli_list_names_every_scenario_and_its_rules(capsys):
    assert ibpath_main(["craft", "--list"]) == 0
    out = capsys.readouterr().out
    for name, sc in SCENARIOS.items():
        line = next(ln for ln in out.splitlines() if ln.startswith(name + " "))
        assert all(r in line for r in sc.rules)


def test_cli_writes_the_scenario(tmp_path):
    out = tmp_path / "x.pcapng"
    p = subprocess.run([sys.executable, "-m", "ibpath_scapy.cli.main", "craft", "res-no-followup",
                        "-o", str(out), "--seed", "3", "--encap", "rocev2"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "RES-NO-FOLLOWUP" in p.stdout
    ref = SCENARIOS["res-no-followup"].write(tmp_path / "ref.pcapng", seed=3, encap="rocev2")
    assert out.read_bytes() == ref.read_bytes()


@pytest.mark.parametrize("argv,message", [
    (["craft", "no-such-scenario", "-o", "x.pcapng"], "unknown scenario 'no-such-scenario'"),
    (["craft", "cm-roce-gid", "--encap", "ib", "-o", "x.pcapng"], "rocev2 only"),
    (["craft", "conform-ucma"], "-o FILE"),
    (["craft", "conform-ucma", "-o", "/nonexistent-dir/x.pcapng"], "/nonexistent-dir/x.pcapng"),
])
def test_cli_errors(capsys, argv, message):
    assert ibpath_main(argv) == 2
    assert message in capsys.readouterr().err


def test_blob_records_what_the_kernel_returns(tmp_path):
    """set_option="kernel": the ucma profile's verdict, which the kernel lab showed equal to a
    real 6.1 kernel's (captures/rxe): 0 for a blob with a 0x2B record, -EINVAL without one or
    with a ragged length."""
    from ibpath_scapy.craft import CaptureBuilder
    from ibpath_scapy.engines.scapy.decode import decode_file
    from ibpath_scapy.layers import PathRecord

    rec = PathRecord(sgid="fe80::1", dgid="fe80::2", reversible=1)
    path = tmp_path / "k.pcapng"
    with CaptureBuilder(str(path)) as b:
        b.blob([(0x2B, rec)], set_option="kernel")
        b.blob([(0x0A, rec), (0x12, rec)], set_option="kernel")
        b.blob(bytes(72 + 8), set_option="kernel")
    got = [r["blob"]["set_option_result"] for r in decode_file(str(path)) if r["kind"] == "blob"]
    assert got == ["0", "-EINVAL", "-EINVAL"]


def test_main_command_demonstrates_and_exits_0():
    """The README's first command (tools/main.sh, without its install step): the corpus and
    the lab captures give exactly their manifests' findings and real traffic has no error."""
    import os
    import subprocess

    if not (ROOT / ".venv" / "bin" / "ibpath").exists():
        pytest.skip("tools/main.sh runs .venv/bin/ibpath: run tools/install.sh first")
    p = subprocess.run(["bash", "tools/main.sh"], cwd=ROOT, capture_output=True, text=True,
                       timeout=600, env={**os.environ, "IBPATH_SKIP_INSTALL": "1"})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Traceback" not in p.stdout + p.stderr
    for d in ("corpus", "rxe"):
        n = len(json.loads((CAPTURES / d / "manifest.json").read_text())["scenarios"])
        assert f"{n} files, {n} as expected, 0 not" in p.stdout
    assert p.stdout.rstrip().endswith("real traffic has no error")
