"""`ibpath audit --format parquet` and `--resolutions-out` (issue 44): the README's three fleet
queries run verbatim with DuckDB on the tables of a fleet of corpus captures (four hosts,
each audited with --label), their numbers checked against the JSON reports and Wireshark's
own InfiniBand dissector (tshark, no plugin); the schema as pyarrow reads it against
docs/parquet.md; the host from a pcapng section header as capinfos reads it; bad uses."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import CAPTURES, ROOT
from tshark_util import run_tshark, require_tshark

pa = pytest.importorskip("pyarrow", reason="the fleet extra (pip install '.[fleet]')")
pq = pytest.importorskip("pyarrow.parquet")
duckdb = pytest.importorskip("duckdb", reason="the fleet extra (pip install '.[fleet]')")

CORPUS = CAPTURES / "corpus"
# four hosts' captures: resolvers that never ask for a reversible path (gpu-01, gpu-03), ones
# that do (gpu-02, gpu-04); SA retries on gpu-01 and gpu-03
FLEET = {
    "gpu-01": ["res-no-followup", "ibacm-not-reversible", "saq-retry"],
    "gpu-02": ["conform-ucma", "conform-proposal", "res-redundant-queries",
               "seed-followup-compat"],
    "gpu-03": ["crc-mismatch", "saq-no-response", "res-blob-mismatch"],
    "gpu-04": ["sar-status", "conform-apm"],
}
IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main", "audit", "--quiet"]
PATH_RECORD_REQUESTS = ("infiniband.mad.mgmtclass == 0x03 && infiniband.mad.attributeid == "
                        "0x0035 && (infiniband.mad.method == 0x01 || infiniband.mad.method == "
                        "0x12)")
REVERSIBLE_COMPONENT = 1 << 11  # IBA 15.2.5.16 PathRecord ComponentMask bit 11


def ibpath(*args, cwd=None, ok=(0, 1)) -> subprocess.CompletedProcess:
    p = subprocess.run(IBPATH + [str(a) for a in args], capture_output=True, text=True,
                       timeout=300, cwd=cwd)
    assert p.returncode in ok, f"exit {p.returncode}: {p.stderr[-2000:]}"
    assert "Traceback" not in p.stderr, p.stderr
    return p


def readme_queries() -> dict[str, str]:
    """The README's fleet queries, by their comment line."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sql\n(.*?)```", text, re.S).group(1)
    queries = {}
    for part in block.strip().split("\n\n"):
        title, sql = part.split("\n", 1)
        queries[title.removeprefix("-- ")] = sql
    return queries


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """(work dir, {host: JSON report}): each host's captures in a directory of its own, audited
    as the README says (--label, one findings and one resolutions file per host), and as JSON."""
    work = tmp_path_factory.mktemp("fleet")
    (work / "fleet").mkdir()
    reports = {}
    for host, names in FLEET.items():
        d = work / "hosts" / host
        d.mkdir(parents=True)
        for n in names:
            shutil.copy(CORPUS / f"{n}.pcapng", d / f"{n}.pcapng")
        ibpath("--format", "parquet", "-o", f"fleet/{host}.findings.parquet",
               "--resolutions-out", f"fleet/{host}.resolutions.parquet", "--label", host,
               f"hosts/{host}", cwd=work)
        reports[host] = json.loads(ibpath("--format", "json", f"hosts/{host}", cwd=work).stdout)
    return work, reports


def test_readme_has_the_three_queries():
    assert list(readme_queries()) == ["findings per rule per host",
                                      "hosts whose resolver never asked for a reversible path",
                                      "the pairs with the most SA retries"]


def _query(work: Path, title: str) -> list[tuple]:
    con = duckdb.connect()
    try:
        con.execute(f"SET file_search_path = '{work}'")
        return con.execute(readme_queries()[title]).fetchall()
    finally:
        con.close()


def test_findings_per_rule_per_host_match_the_json_reports(fleet):
    work, reports = fleet
    rows = _query(work, "findings per rule per host")
    got = {(h, r, s): n for h, r, s, n in rows}
    want = Counter((host, f["rule"], f["severity"]) for host, rep in reports.items()
                   for f in rep["findings"])
    assert got == dict(want)
    assert sum(got.values()) == sum(len(r["findings"]) for r in reports.values()) >= 10
    assert {h for h, *_ in got} == {h for h, r in reports.items() if r["findings"]}
    # the order the query asks for: by host, then most findings first
    keys = [(h, -n, r) for h, r, _, n in rows]
    assert keys == sorted(keys)


def _sa_requests(capture: Path) -> list[tuple[str, int, str]]:
    """(TID, ComponentMask, Reversible) of every PathRecord Get/GetTable request, as
    Wireshark's InfiniBand dissector reads them (no plugin)."""
    run = run_tshark(capture, ["-Y", PATH_RECORD_REQUESTS, "-T", "fields",
                               "-e", "infiniband.mad.transactionid",
                               "-e", "infiniband.sa.componentmask",
                               "-e", "infiniband.pathrecord.reversible"]).check()
    return [(tid, int(mask, 16), rev) for tid, mask, rev in
            (line.split("\t") for line in run.stdout.splitlines())]


def test_hosts_that_never_asked_for_a_reversible_path(fleet):
    require_tshark()
    work, reports = fleet
    rows = _query(work, "hosts whose resolver never asked for a reversible path")
    asked = {host: any(mask & REVERSIBLE_COMPONENT and rev == "0x01"
                       for n in names for _, mask, rev in _sa_requests(CORPUS / f"{n}.pcapng"))
             for host, names in FLEET.items()}
    assert [h for h, *_ in rows] == sorted(h for h, a in asked.items() if not a)
    assert [h for h, *_ in rows] == ["gpu-01", "gpu-03"]  # the fleet is chosen so
    for host, transactions, resolutions in rows:
        # every PathRecord query of these captures is between two GIDs: the JSON's count
        assert transactions == reports[host]["summary"]["transactions"]
        # the resolutions with a finding are among them (the JSON names no other)
        assert resolutions >= len({f["resolution"] for f in reports[host]["findings"]
                                   if "resolution" in f}) > 0


def test_pairs_with_the_most_sa_retries(fleet):
    require_tshark()
    work, reports = fleet
    rows = _query(work, "the pairs with the most SA retries")
    # the JSON: one SAQ-RETRY per transaction sent more than once, naming its frames
    want = Counter()
    for host, rep in reports.items():
        for f in rep["findings"]:
            if f["rule"] == "SAQ-RETRY":
                want[(host, f["resolution"])] += len(f["frames"]) - 1
    got = {(h, f"{lo} > {re_} pkey 0x{pk:04x}"): r for h, lo, re_, pk, r, _ in rows}
    assert got == dict(want) and len(got) == 2
    # Wireshark: the same TID asked again, per host
    by_host = Counter()
    for host, names in FLEET.items():
        for n in names:
            tids = Counter(t for t, _, _ in _sa_requests(CORPUS / f"{n}.pcapng"))
            by_host[host] += sum(c - 1 for c in tids.values())
    assert Counter({h: r for (h, _), r in got.items()}) == +by_host
    assert all(req > r for *_, r, req in rows)


def test_schema_as_pyarrow_reads_it_is_the_documented_one(fleet):
    work, _ = fleet
    types = {"string": pa.string(), "int64": pa.int64(), "int32": pa.int32(),
             "list<int64>": pa.list_(pa.int64()),
             "timestamp[us, UTC]": pa.timestamp("us", tz="UTC")}
    doc = (ROOT / "docs" / "parquet.md").read_text()
    for table in ("findings", "resolutions"):
        section = doc.split(f"## {table}\n", 1)[1].split("\n## ", 1)[0]
        documented = re.findall(r"^\| `(\w+)` \| `([^`]+)` \| (yes|no) \|", section, re.M)
        sch = pq.read_schema(work / "fleet" / f"gpu-01.{table}.parquet")
        assert [(f.name, f.type, f.nullable) for f in sch] == [
            (name, types[t], null == "yes") for name, t, null in documented]
        assert sch.metadata[b"ibpath.table"] == table.encode()
        assert sch.metadata[b"ibpath.schema_version"] == b"1"


def test_docs_page_is_generated_from_the_code():
    from ibpath_scapy.audit.tables import markdown
    assert (ROOT / "docs" / "parquet.md").read_text() == markdown(), (
        "docs/parquet.md is stale: python -m ibpath_scapy.audit.tables > docs/parquet.md")


def test_findings_rows_are_the_json_findings_with_frame_times(fleet):
    require_tshark()
    work, reports = fleet
    con = duckdb.connect()
    rows = con.execute(
        "SELECT host, file, rule, severity, profile, frames, first_frame, "
        "epoch_us(first_frame_time), message FROM read_parquet(?) ORDER BY host, "
        "file, first_frame, rule, message",
        [str(work / "fleet" / "gpu-01.findings.parquet")]).fetchall()
    js = sorted(((f["file"], f["frames"][0] if f["frames"] else None, f["rule"], f["message"]),
                 f) for f in reports["gpu-01"]["findings"])
    assert len(rows) == len(js)
    times = {}
    for (host, file, rule, sev, profile, frames, first, micros, message), (_, f) in zip(rows, js):
        assert (host, file, rule, sev, profile, frames, message) == (
            "gpu-01", f["file"], f["rule"], f["severity"], "all", f["frames"], f["message"])
        if file not in times:  # Wireshark's clock for the same frames
            out = run_tshark(work / file, ["-T", "fields", "-e", "frame.number",
                                           "-e", "frame.time_epoch"]).check().stdout
            times[file] = {int(n): float(t) for n, t in
                           (line.split("\t") for line in out.splitlines())}
        assert abs(micros / 1e6 - times[file][first]) < 2e-6


def test_resolution_key_columns_name_the_resolution(fleet):
    work, reports = fleet
    con = duckdb.connect()
    rows = con.execute("SELECT local_gid, remote_gid, pkey, rule, message FROM read_parquet(?) "
                       "WHERE local_gid IS NOT NULL",
                       [str(work / "fleet" / "gpu-01.findings.parquet")]).fetchall()
    named = {(f["rule"], f["message"]): f["resolution"] for f in reports["gpu-01"]["findings"]
             if "resolution" in f}
    assert rows and len(rows) == len(named)
    for lo, rem, pkey, rule, message in rows:
        assert named[(rule, message)] == f"{lo} > {rem} pkey 0x{pkey:04x}"


def test_host_from_the_section_header_as_capinfos_reads_it(tmp_path):
    """A pcapng whose section header names the machine (as dumpcap writes shb_hardware and
    shb_os): the host column is what capinfos reads there."""
    from ibpath_scapy.capture.pcapio import PcapNgWriter, read_frames
    if shutil.which("capinfos") is None:
        pytest.skip("capinfos (Wireshark's) is not installed")
    cap = tmp_path / "x.pcapng"
    with PcapNgWriter(str(cap), options=[(2, "Xeon E5-2680 v4"), (3, "Linux 6.1.0-18-amd64"),
                                         (4, "test")]) as w:
        for f in read_frames(str(CORPUS / "res-no-followup.pcapng")):
            w.write(f.data, f.linktype, f.time, f.comment)
    info = subprocess.run(["capinfos", str(cap)], capture_output=True, text=True).stdout
    hardware = re.search(r"^Capture hardware:\s+(.*)$", info, re.M).group(1)
    os_ = re.search(r"^Capture oper-sys:\s+(.*)$", info, re.M).group(1)
    ibpath("--format", "parquet", "-o", tmp_path / "f.parquet", cap)
    hosts = set(pq.read_table(tmp_path / "f.parquet").column("host").to_pylist())
    assert hosts == {f"{hardware} / {os_}"} == {"Xeon E5-2680 v4 / Linux 6.1.0-18-amd64"}
    # no options, no --label: null
    ibpath("--format", "parquet", "-o", tmp_path / "g.parquet", CORPUS / "res-no-followup.pcapng")
    assert set(pq.read_table(tmp_path / "g.parquet").column("host").to_pylist()) == {None}


def test_parquet_needs_an_output_file(tmp_path):
    p = ibpath("--format", "parquet", CORPUS / "res-no-followup.pcapng", ok=(2,))
    assert "--format parquet writes a file: give -o OUT.parquet" in p.stderr
    assert p.stdout == ""


def test_unwritable_table_is_named_and_exit_2(tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "r.parquet"
    p = ibpath("--format", "json", "--resolutions-out", missing,
               CORPUS / "res-no-followup.pcapng", ok=(2,))
    assert str(missing.parent) in p.stderr and "cannot write" in p.stderr
    assert not missing.parent.exists()
    assert json.loads(p.stdout)["findings"]  # the report itself was written


def test_an_unreadable_input_keeps_its_findings_and_exits_2(tmp_path):
    data = (CORPUS / "res-no-followup.pcapng").read_bytes()
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(data[:-10])
    p = ibpath("--format", "parquet", "-o", tmp_path / "f.parquet", "--resolutions-out",
               tmp_path / "r.parquet", cut, CORPUS / "saq-retry.pcapng", ok=(2,))
    assert str(cut) in p.stderr
    files = set(pq.read_table(tmp_path / "f.parquet").column("file").to_pylist())
    assert str(CORPUS / "saq-retry.pcapng") in files
