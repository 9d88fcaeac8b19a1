"""The HTML audit report (audit/html.py) and the ladder model behind it (audit/ladder.py), read
back from the page itself in headless Debian Chromium (started here through Playwright; no
browser download).

For every capture of the corpus: every finding of the JSON report is on the page (rule,
severity, frames, file and message text), every message of the capture has exactly one arrow
(the oracle: the decoder's own records of SA, CM, LS RESOLVE and blob frames, independent of
the replay and of the ladder), the summary matches the JSON summary, there is no console error
and the page fetches nothing. Captures built here check the arrows' lanes exactly, where each
finding is attached, the caps, escaping, and that a broken page is caught by the same checks.
The file table (one row per input, counts by severity, a link to its section) is checked
against the JSON report per file and severity, and the corpus report at 1280 px has no
horizontal overflow; cut arrow labels keep their text in an SVG <title>; the PathRecord table
shows each code decoded beside the raw value (issue 17 point 8).
A screenshot is kept under build/test-artefacts/.
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ibpath_scapy.audit.html import to_html
from ibpath_scapy.audit.model import AuditOptions
from ibpath_scapy.audit.run import audit_paths
from ibpath_scapy.craft.builder import CaptureBuilder
from ibpath_scapy.engines.scapy.decode import Decoder, decode_file
from ibpath_scapy.layers.cm import CMRep, CMRtu
from ibpath_scapy.layers.mad import MAD

from conftest import CAPTURES, EXTERNAL, ROOT, drain_pty
from test_rules_resolver import FWD, L, R, exchange, path, query

CHROMIUM = "/usr/bin/chromium"  # Debian's chromium (tools/install.sh)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTEFACTS = ROOT / "build" / "test-artefacts"
IBPATH = [sys.executable, "-m", "ibpath_scapy.cli.main", "audit", "--quiet"]
PEER = "192.168.2.25"


def _corpus() -> list[Path]:
    corpus = sorted((CAPTURES / "corpus").glob("*.pcap*")) if (CAPTURES / "corpus").is_dir() else []
    files = corpus or sorted((CAPTURES / "crafted").glob("*.pcapng"))
    files.append(CAPTURES / "opensm" / "opensm-saquery.pcap")
    if EXTERNAL.is_dir():
        files += sorted(EXTERNAL.glob("*.pcap"))
    return files


# -- the browser and what the page says ----------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: Debian's chromium is installed by tools/install.sh")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


# Read from the DOM: the hooks html.py documents, and the visible text of each finding row.
FACTS_JS = """() => ({
  findings: [...document.querySelectorAll('tr.finding')].map(tr => ({
    rule: tr.dataset.rule, severity: tr.dataset.severity, frames: tr.dataset.frames,
    file: tr.dataset.file, arrow: tr.dataset.arrow, text: tr.innerText})),
  ladders: [...document.querySelectorAll('section.ladder')].map(s => ({
    id: s.id, file: s.dataset.file, resolution: s.dataset.resolution,
    messages: +s.dataset.messages, drawn: +s.dataset.drawn, same_as: s.dataset.sameAs,
    lanes: [...s.querySelectorAll('text.lane-name')].map(t => [t.dataset.lane, t.textContent]),
    capped: s.querySelectorAll('.capped').length,
    arrows: [...s.querySelectorAll('g.arrow')].map(g => ({
      n: +g.dataset.arrow, frame: +g.dataset.frame, kind: g.dataset.kind, src: g.dataset.src,
      dst: g.dataset.dst, cls: g.getAttribute('class'),
      width: g.getBoundingClientRect().width}))})),
  summary: Object.fromEntries([...document.querySelectorAll('#summary td[data-count]')]
    .map(td => [td.dataset.count, +td.textContent])),
  blobs: [...document.querySelectorAll('table.kernel-view tr.blob')].map(tr => ({
    file: tr.dataset.file, frame: +tr.dataset.frame})),
  capped: document.querySelectorAll('.capped').length,
  files: [...document.querySelectorAll('table.files tr.file')].map(tr => {
    const a = tr.querySelector('a'), target = document.querySelector(a.getAttribute('href'));
    return {file: tr.dataset.file, error: +tr.dataset.error, warning: +tr.dataset.warning,
      info: +tr.dataset.info, cells: [...tr.cells].slice(2).map(td => +td.textContent),
      target: target && target.matches('section.file') ? target.dataset.file : null};
  }),
  overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  cut: [...document.querySelectorAll('svg text')].filter(t => t.querySelector('title'))
    .map(t => ({shown: [...t.childNodes].filter(n => n.nodeType === 3).map(n => n.data).join(''),
                full: t.querySelector('title').textContent})),
  labels: [...document.querySelectorAll('g.arrow text')].map(t =>
    t.querySelector('title') ? t.querySelector('title').textContent : t.textContent),
  records: [...document.querySelectorAll('table.records td[data-field]')].map(td => ({
    field: td.dataset.field, value: td.dataset.value, text: td.textContent})),
})"""


class Page:
    """A report loaded in Chromium: its facts, console errors and every request it made."""

    def __init__(self, browser, html: Path, screenshot: Path | None = None, width: int = 1400):
        page = browser.new_page(viewport={"width": width, "height": 900})
        self.errors: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))
        self.url = html.resolve().as_uri()
        page.goto(self.url, wait_until="load")
        self.facts = page.evaluate(FACTS_JS)
        self.title = page.title()
        self.page = page
        if screenshot is not None:
            page.screenshot(path=str(screenshot), full_page=True)
        self.dom = page.evaluate("() => document.body.innerText")
        page.close()


def check_clean(p: Page) -> None:
    assert p.requests == [p.url], f"the page fetched {set(p.requests) - {p.url}}"
    assert p.errors == [], f"console errors: {p.errors}"


def check_findings(p: Page, doc: dict) -> None:
    """Every finding of the JSON report is a row of the page, and nothing else is."""
    key = lambda f: (f["rule"], f["severity"], f["frames"], f["file"])  # noqa: E731
    want = Counter(key({**f, "frames": ",".join(map(str, f["frames"]))}) for f in doc["findings"])
    got = Counter(key(f) for f in p.facts["findings"])
    assert got == want
    for f in doc["findings"]:
        rows = [r for r in p.facts["findings"]
                if key(r) == key({**f, "frames": ",".join(map(str, f["frames"]))})]
        assert any(f["message"] in r["text"] for r in rows), f


def check_arrows(p: Page, message_frames: dict[str, set[int]]) -> None:
    """One drawn arrow per message of the capture: each message frame exactly once, numbered
    in frame order, with a visible line."""
    by_file: dict[str, list[int]] = {}
    for lad in p.facts["ladders"]:
        arrows = lad["arrows"]
        assert len(arrows) == lad["drawn"] == lad["messages"], lad["id"]
        assert [a["n"] for a in arrows] == list(range(1, len(arrows) + 1))
        assert [a["frame"] for a in arrows] == sorted(a["frame"] for a in arrows)
        assert all(a["width"] > 20 for a in arrows)  # rendered, not an empty group
        by_file.setdefault(lad["file"], []).extend(a["frame"] for a in arrows)
    for file, frames in message_frames.items():
        got = by_file.get(file, [])
        assert sorted(got) == sorted(set(got)), f"{file}: a message drawn twice"
        assert set(got) == frames, f"{file}: missing {sorted(frames - set(got))}, " \
                                   f"extra {sorted(set(got) - frames)}"


# The ucma commands a ladder draws (README, "Auditing captures"): the route steps the process
# rules judge and the events that set the cm_id state they judge by; an IB service
# resolution's command, ADDRINFO event and IB_SERVICE queries.
DRAWN_UCMA = {"RESOLVE_ADDR", "RESOLVE_IP", "RESOLVE_ROUTE", "RESOLVE_IB_SERVICE"}
STATE_EVENTS = {"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR",
                "ADDRINFO_RESOLVED", "ADDRINFO_ERROR"}


def drawn_ucma(rec: dict) -> bool:
    c = rec["command"]
    return (c in DRAWN_UCMA and rec.get("id") is not None
            or c == "GET_EVENT" and rec.get("event") in STATE_EVENTS
            or c == "SET_OPTION" and (rec.get("level"), rec.get("optname")) == ("IB", "PATH")
            or c == "QUERY" and rec.get("option") in ("PATH", "IB_SERVICE"))


def message_frames(path: Path) -> set[int]:
    """The oracle: frames the decoder reads as SA, CM, LS RESOLVE or blob messages, ACM
    messages and the ucma commands a ladder draws (drawn_ucma)."""
    out = set()
    for rec in decode_file(str(path), Decoder()):
        kind = rec.get("kind")
        if kind in ("sa", "cm", "blob", "acm") or (
                kind == "ls" and (rec["ls"].get("op") in ("RESOLVE", "resolve")
                                  or rec["ls"].get("op_code") == 0)) or (
                kind == "ucma" and drawn_ucma(rec)):
            out.add(rec["frame"])
    return out


def run_cli(*args) -> subprocess.CompletedProcess:
    p = subprocess.run(IBPATH + [str(a) for a in args], capture_output=True, text=True, timeout=300)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode in (0, 1), p.stderr
    return p


def reports(captures: Path | list[Path], tmp_path: Path) -> tuple[dict, Path]:
    """The JSON report (parsed) and the HTML report file of captures, from the CLI."""
    captures = captures if isinstance(captures, list) else [captures]
    doc = json.loads(run_cli("--format", "json", *captures).stdout)
    html = tmp_path / (captures[0].name + ".html")
    run_cli("--format", "html", "-o", html, *captures)
    return doc, html


# -- the corpus -------------------------------------------------------------------------------

def test_corpus_report_in_chromium(browser, tmp_path):
    """One report of the whole corpus from the CLI (JSON and HTML), read back from the page."""
    corpus = _corpus()
    doc, html = reports(corpus, tmp_path)
    p = Page(browser, html)
    check_clean(p)
    check_findings(p, doc)
    check_arrows(p, {str(c): message_frames(c) for c in corpus})
    s = doc["summary"]
    assert p.facts["summary"] == {
        "files": s["files"], "frames": s["packets"], "transactions": s["transactions"],
        "resolutions": s["resolutions"], "blobs": s["blobs"], "cm_reqs": s["cm_reqs"],
        "cm_ids": s["cm_ids"], "acm_exchanges": s["acm_exchanges"],
        **s["findings"]} and s["files"] == len(corpus) and s["cm_ids"] and s["acm_exchanges"]
    assert sorted((b["file"], b["frame"]) for b in p.facts["blobs"]) == \
        sorted((k["file"], k["frame"]) for k in doc["kernel_view"])
    named = [(lad["file"], lad["resolution"]) for lad in p.facts["ladders"] if lad["resolution"]]
    assert len(set(named)) == len(named) == s["resolutions"]
    assert p.facts["capped"] == 0


def _recorded_runs() -> list[Path]:
    """Real recorded runs: librdmacm and a 6.1 kernel against the stand-in ibacm
    (captures/rxe/acm) and unmodified programs under ibpath record (captures/rxe/record)."""
    return sorted((CAPTURES / "rxe" / "acm").glob("*.pcapng")) + sorted(
        (CAPTURES / "rxe" / "record").glob("rec-*.pcapng"))


PROCESS_RULES = ("ACM-", "UCMA-")


def test_recorded_runs_draw_what_the_process_did(browser, tmp_path):
    """Issue 39: a recorded run's picture tells the story of its findings. Every ACM message
    and every ucma route step of the decoder's records is one arrow (ACM RESOLVE and answer
    between the process and the ibacm lane, the commands between the process and the
    kernel), as many ACM RESOLVE arrows as the summary counts ACM exchanges, and every finding
    of a process rule rests on a drawn message. On main a recording's ladder drew the blob
    and the CM exchange only: no ACM arrow, and the process findings rested on nothing."""
    runs = _recorded_runs()
    assert len(runs) > 40
    doc, html = reports(runs, tmp_path)
    p = Page(browser, html)
    check_clean(p)
    check_findings(p, doc)
    check_arrows(p, {str(c): message_frames(c) for c in runs})
    arrows = [a for lad in p.facts["ladders"] for a in lad["arrows"]]
    acm = Counter((a["kind"], a["src"], a["dst"]) for a in arrows if a["kind"].startswith("acm"))
    assert set(acm) == {("acm-request", "resolver", "ibacm"), ("acm-response", "ibacm", "resolver")}
    assert acm[("acm-request", "resolver", "ibacm")] == doc["summary"]["acm_exchanges"] > 30
    ucma = {(a["src"], a["dst"]) for a in arrows if a["kind"] == "ucma"}
    assert ucma == {("resolver", "kernel"), ("kernel", "resolver")}
    process = [f for f in p.facts["findings"] if f["rule"].startswith(PROCESS_RULES)]
    assert len(process) >= 8 and all(f["arrow"] for f in process), process
    # lanes: the process is the resolver lane; ibacm only where ACM messages are drawn
    for lad in p.facts["ladders"]:
        kinds = {a["kind"] for a in lad["arrows"]}
        want = [("kernel", "kernel"), ("resolver", "process" if kinds & {
            "ucma", "acm-request", "acm-response"} else "resolver")]
        want += [("ibacm", "ibacm")] if kinds & {"acm-request", "acm-response"} else []
        assert [tuple(x) for x in lad["lanes"]] == want + [("SA", "SA"), ("remote", "remote")], \
            lad["id"]


# -- a capture built here: lanes, attachment, screenshot ------------------------------------------

def cm_rep_rtu(b: CaptureBuilder, comm_id: int, peer_id: int) -> tuple[int, int]:
    """The remote's REP and our RTU for the builder's CM REQ (comm_id)."""
    rep = b.mad(MAD(mgmt_class=7, method=3, attribute_id=0x13, transaction_id=comm_id)
                / CMRep(local_comm_id=peer_id, remote_comm_id=comm_id), src=PEER, dst=b.requester)
    rtu = b.mad(MAD(mgmt_class=7, method=3, attribute_id=0x14, transaction_id=comm_id)
                / CMRtu(local_comm_id=comm_id, remote_comm_id=peer_id), src=b.requester, dst=PEER)
    return rep, rtu


@pytest.fixture
def conversation(tmp_path) -> Path:
    """Every kind of message: LS request, SA GetTable and its retry, a two-segment RMPP
    answer, LS response, blob, CM REQ/REP/RTU. Not reversible and handed over alone as 0x2B:
    RES-NO-FOLLOWUP and BLOB-GMP-NOT-REVERSIBLE rest on the blob."""
    f = tmp_path / "conversation.pcapng"
    with CaptureBuilder(str(f)) as b:
        b.ls_request(7, path_use=0, sgid=L, dgid=R)
        q = b.sa_query(query(numb_path=1), method=0x12)
        b.sa_query(query(), retransmit_of=q)
        b.sa_answer(q, [FWD] * 5)
        b.ls_response(7, [(0x2B, FWD)])
        b.blob([(0x2B, FWD)], set_option=0)
        b.cm_req(FWD)
        cm_rep_rtu(b, 0x1234, 0x5678)
    return f


CONVERSATION = [
    (1, "ls-request", "kernel", "resolver"),
    (2, "sa-query", "resolver", "SA"),
    (3, "sa-query", "resolver", "SA"),
    (4, "sa-answer", "SA", "resolver"),
    (5, "sa-answer", "SA", "resolver"),
    (6, "ls-response", "resolver", "kernel"),
    (7, "blob", "resolver", "kernel"),
    (8, "cm", "kernel", "remote"),
    (9, "cm", "remote", "kernel"),
    (10, "cm", "kernel", "remote"),
]


def test_conversation_ladder_lanes_and_findings(browser, conversation, tmp_path):
    doc, html = reports(conversation, tmp_path)
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTEFACTS / "html-report-ladder.png"
    p = Page(browser, html, screenshot=shot)
    print(f"screenshot: {shot}")
    assert shot.stat().st_size > 20_000
    check_clean(p)
    check_findings(p, doc)
    check_arrows(p, {str(conversation): set(range(1, 11))})
    (lad,) = p.facts["ladders"]
    assert lad["resolution"] == f"{L} > {R} pkey 0xffff"
    assert [(a["frame"], a["kind"], a["src"], a["dst"]) for a in lad["arrows"]] == CONVERSATION
    rules = {f["rule"] for f in doc["findings"]}
    assert {"RES-NO-FOLLOWUP", "BLOB-GMP-NOT-REVERSIBLE"} <= rules
    arrow_of = {a["frame"]: a for a in lad["arrows"]}
    message = set(arrow_of)
    for f in p.facts["findings"]:
        on = [int(x) for x in f["frames"].split(",") if int(x) in message]
        # attached to the last message it rests on, and every message it rests on coloured
        assert f["arrow"] == (str(arrow_of[max(on)]["n"]) if on else ""), f
        for fr in on:
            assert "sev-" in arrow_of[fr]["cls"], (f, fr)
    assert "sev-error" in arrow_of[7]["cls"]
    assert "sev-" not in arrow_of[1]["cls"]
    # the side-by-side table: SA answer, the LS response, the blob and the CM REQ
    for title in ("SA answer f5 rec 0", "LS response f6 rec 0 0x2B", "blob f7 rec 0 0x2B",
                  "CM REQ f8 primary"):
        assert title in p.dom
    assert p.title.startswith("ibpath audit: 1 resolution(s)")


def test_broken_pages_are_caught(browser, conversation, tmp_path):
    """The checks above fail on a page with a script error, a fetch, a lost finding or a lost
    arrow."""
    doc, html = reports(conversation, tmp_path)
    text = html.read_text()
    frames = {str(conversation): set(range(1, 11))}

    def variant(name: str, new: str) -> Page:
        assert new != text
        f = tmp_path / f"broken-{name}.html"
        f.write_text(new)
        return Page(browser, f)

    with pytest.raises(AssertionError, match="console errors"):
        check_clean(variant("script", text.replace("</body>", "<script>noSuchFunction()</script></body>")))
    with pytest.raises(AssertionError, match="fetched"):
        check_clean(variant("fetch", text.replace("</body>", '<img src="http://192.0.2.1/x.png"></body>')))
    with pytest.raises(AssertionError):
        check_findings(variant("finding", re.sub(r'<tr class="finding.*?</tr>', "", text, count=1)), doc)
    with pytest.raises(AssertionError):
        check_arrows(variant("arrow", re.sub(r'<g class="arrow.*?</g>', "", text, count=1)), frames)
    with pytest.raises(AssertionError):
        check_arrows(variant("twice", re.sub(r'data-frame="2"', 'data-frame="3"', text, count=1)), frames)


def test_text_is_escaped(browser, tmp_path):
    """A file name with markup in it is shown as text, not interpreted."""
    f = tmp_path / "a<b>&'\"x.pcapng"
    with CaptureBuilder(str(f)) as b:
        exchange(b, query(), [FWD])
        b.blob([(0x2B, FWD)], set_option=0)
    doc, html = reports(f, tmp_path)
    p = Page(browser, html)
    check_clean(p)
    check_findings(p, doc)
    assert str(f) in p.dom
    assert {lad["file"] for lad in p.facts["ladders"]} == {str(f)}


def test_caps_are_stated_and_keep_every_finding(browser, tmp_path):
    """Over the caps: diagrams and arrows cut with the counts on the page; findings all kept."""
    f = tmp_path / "three.pcapng"
    with CaptureBuilder(str(f)) as b:
        for k in range(3):
            dgid = f"fe80::2:c903:0:{0x10 + k:x}"
            exchange(b, query(dgid=dgid), [path(dgid=dgid)])
            b.blob([(0x2B, path(dgid=dgid))], set_option=0)
    audits, _ = audit_paths([str(f)], AuditOptions(), quiet=True)
    html = tmp_path / "three.html"
    html.write_text(to_html(audits, max_ladders=2, max_arrows=2))
    doc = json.loads(run_cli("--format", "json", f).stdout)
    p = Page(browser, html)
    check_clean(p)
    check_findings(p, doc)
    lads = p.facts["ladders"]
    assert [(lad["messages"], lad["drawn"], len(lad["arrows"])) for lad in lads] == \
        [(3, 2, 2), (3, 2, 2), (3, 0, 0)]
    assert [lad["capped"] for lad in lads] == [1, 1, 0]
    assert "1 more message(s) not drawn (frames 3–3)" in p.dom
    assert "1 of 3 ladders listed without a diagram" in p.dom


def test_identical_ladders_point_to_the_first(browser, tmp_path):
    """After `full_ladders` diagrams, a resolution with the same messages and findings points
    to the one drawn; one with another shape is still drawn; every finding is on the page."""
    f = tmp_path / "alike.pcapng"
    with CaptureBuilder(str(f)) as b:
        for k in range(3):
            dgid = f"fe80::2:c903:0:{0x10 + k:x}"
            exchange(b, query(dgid=dgid), [path(dgid=dgid)])
            b.blob([(0x2B, path(dgid=dgid))], set_option=0)
        dgid = "fe80::2:c903:0:99"  # another shape: a reversible answer, no finding
        exchange(b, query(dgid=dgid), [path(dgid=dgid, reversible=1)])
        b.blob([(0x2B, path(dgid=dgid, reversible=1))], set_option=0)
    audits, _ = audit_paths([str(f)], AuditOptions(), quiet=True)
    html = tmp_path / "alike.html"
    html.write_text(to_html(audits, full_ladders=1))
    doc = json.loads(run_cli("--format", "json", f).stdout)
    p = Page(browser, html)
    check_clean(p)
    check_findings(p, doc)
    lads = p.facts["ladders"]
    assert [(lad["drawn"], lad["same_as"]) for lad in lads] == \
        [(3, ""), (0, lads[0]["id"]), (0, lads[0]["id"]), (3, "")]
    assert "2 of 4 ladders point to an identical one drawn before them" in p.dom


# -- the text ladder ----------------------------------------------------------------------------

def test_text_ladder_with_flag(conversation):
    out = run_cli("--ladder", conversation).stdout
    lines = out.splitlines()
    assert any(re.fullmatch(r"\s+kernel\s+resolver\s+SA\s+remote", line) for line in lines)
    drawn = [line for line in lines if re.search(r"\|  f\d+ ", line)]
    assert [int(re.search(r"\|  f(\d+) ", line).group(1)) for line in drawn] == list(range(1, 11))
    blob = next(i for i, line in enumerate(lines) if "|  f7 " in line)
    assert "<" in drawn[6].split("|  f7")[0]  # resolver → kernel points left
    marks = lines[blob + 1: blob + 4]
    assert any("^ error RES-NO-FOLLOWUP" in m for m in marks), marks
    # the findings are still listed in full, as without --ladder
    plain = run_cli(conversation).stdout
    assert "kernel" not in plain.split("\n")[1]
    for line in plain.splitlines()[1:]:
        assert line in lines


def test_text_ladder_of_recorded_runs():
    """The text ladder of every real recorded run draws what the HTML one does (issue 39):
    each ACM message and ucma route step of the decoder's records once, the lanes kernel,
    process, ibacm (where ACM messages are), SA, remote, and a marker for every process
    finding under a message. On main: no ACM or ucma line, the findings unmarked."""
    runs = _recorded_runs()
    out = run_cli("--ladder", *runs).stdout
    doc = json.loads(run_cli("--format", "json", *runs).stdout)
    sections = re.split(r"^== (\S+): \d+ frames$", out, flags=re.M)[1:]
    by_file = dict(zip(sections[0::2], sections[1::2]))
    assert set(by_file) == {str(r) for r in runs}
    for run in runs:
        text = by_file[str(run)]
        frames = [int(m) for m in re.findall(r"\|  f(\d+) ", text)]
        assert sorted(frames) == sorted(message_frames(run)), run
        heads = re.findall(r"^   (kernel.*)$", text, flags=re.M)
        for head, ladder in zip(heads, re.split(r"^   kernel.*$", text, flags=re.M)[1:]):
            names = head.split()
            acm = re.search(r"\|  f\d+ ACM ", ladder)
            assert names == ["kernel", "process" if re.search(r"\|  f\d+ (ACM|ucma) ", ladder)
                             else "resolver"] + (["ibacm"] if acm else []) + ["SA", "remote"]
        marks = Counter(re.findall(r"^\s+\^ (\w+) ([A-Z][A-Z0-9-]+)$", text, flags=re.M))
        for f in doc["findings"]:
            if f["file"] == str(run) and f["rule"].startswith(PROCESS_RULES):
                assert marks[(f["severity"], f["rule"])] > 0, (run, f)
    # the ACM exchange of a fallback: process -> ibacm, ibacm -> process, then RESOLVE_ROUTE
    # to the kernel, with ACM-FALLBACK under it
    text = by_file[str(CAPTURES / "rxe" / "acm" / "acm-sar-status.pcapng")]
    lines = text.splitlines()
    req = next(ln for ln in lines if "|  f21 ACM RESOLVE" in ln)
    ans = next(ln for ln in lines if "|  f22 ACM answer" in ln)
    assert re.match(r"\s+\|\s+\|-+>\|", req) and re.match(r"\s+\|\s+\|<-+\|", ans)
    route = next(i for i, ln in enumerate(lines) if "|  f23 ucma RESOLVE_ROUTE" in ln)
    assert re.match(r"\s+\|<-+\|", lines[route])
    assert lines[route + 1].strip() == "^ warning ACM-FALLBACK"


def test_text_ladder_on_a_terminal(conversation):
    """Without --ladder, the ladder is drawn when stdout is a terminal."""
    master, slave = pty.openpty()
    p = subprocess.run(IBPATH + [str(conversation)], stdout=slave, stderr=subprocess.PIPE,
                       timeout=120)
    os.close(slave)
    out = drain_pty(master)
    assert p.returncode == 1, p.stderr
    text = out.decode()
    assert re.search(r"kernel\s+resolver\s+SA\s+remote", text)
    assert "|  f10 CM RTU" in text


def test_single_segment_rmpp_answer_is_drawn_as_the_answer():
    """OpenSM answers a one-record GetTable with one RMPP DATA segment flagged FIRST|LAST
    (captures/opensm, the frames session.json lists with one segment of 20 + 64 bytes):
    that frame is the whole answer, drawn with its status and records, not as "RMPP
    segment 1" of an answer never completed."""
    from ibpath_scapy.audit.ladder import ladders

    path = CAPTURES / "opensm" / "opensm-saquery.pcap"
    table = json.loads((CAPTURES / "opensm" / "session.json").read_text())["frame_table"]
    single = [f["frame"] for f in table if f.get("rmpp_segments") == 1
              and f.get("rmpp_paylen") == 20 + 64]
    assert single
    recs = {r["frame"]: r for r in decode_file(str(path), Decoder())}
    (fa,), _ = audit_paths([str(path)], AuditOptions(), quiet=True)
    arrows = {a.frame: a for lad in ladders(fa) for a in lad.arrows}
    for frame in single:
        assert recs[frame]["rmpp"]["rmpp_flags"] == 7
        assert len(recs[frame]["path_records"]) == 1
        assert arrows[frame].label.endswith("status 0x0000: 1 record(s) Reversible=1")
    assert "RMPP segment 1" in arrows[2].label  # a segment of a 15-segment answer stays one


# -- the file table, the width, labels and decoded codes (issue 17 point 8) ----------------------

def check_file_table(p: Page, doc: dict, files: list[Path]) -> None:
    """One row per input in order, its counts by severity those of the JSON report, its link
    to that file's own section."""
    rows = p.facts["files"]
    assert [r["file"] for r in rows] == [str(f) for f in files]
    for r in rows:
        mine = Counter(f["severity"] for f in doc["findings"] if f["file"] == r["file"])
        want = [mine["error"], mine["warning"], mine["info"]]
        assert [r["error"], r["warning"], r["info"]] == want == r["cells"], r
        assert r["target"] == r["file"], r


def test_file_table_counts_and_width_1280(browser, tmp_path):
    """The whole corpus in one report read at 1280 px: the file table and its counts, and
    nothing wider than the window."""
    corpus = _corpus()
    doc, html = reports(corpus, tmp_path)
    p = Page(browser, html, width=1280)
    check_clean(p)
    check_file_table(p, doc, corpus)
    assert sum(r["error"] + r["warning"] + r["info"] for r in p.facts["files"]) == \
        len(doc["findings"]) > 0
    assert any(r["error"] for r in p.facts["files"]) and any(not r["error"] for r in p.facts["files"])
    assert p.facts["overflow"] <= 0, f"the page is {p.facts['overflow']} px wider than 1280"


def test_broken_file_table_is_caught(browser, conversation, tmp_path):
    doc, html = reports(conversation, tmp_path)
    text = html.read_text()
    f = tmp_path / "broken-count.html"
    f.write_text(text.replace('data-error="', 'data-error="1', 1))
    with pytest.raises(AssertionError):
        check_file_table(Page(browser, f), doc, [conversation])
    f = tmp_path / "broken-wide.html"
    f.write_text(text.replace("</body>", '<div style="width:3000px">x</div></body>'))
    assert Page(browser, f, width=1280).facts["overflow"] > 0


def test_long_labels_are_cut_with_the_full_text_on_hover(browser, conversation, tmp_path,
                                                         monkeypatch):
    """A label longer than LABEL_CHARS is cut with "…"; its <title> holds the whole label."""
    from ibpath_scapy.audit import html as html_mod

    audits, _ = audit_paths([str(conversation)], AuditOptions(), quiet=True)
    full = tmp_path / "full.html"
    full.write_text(to_html(audits))
    labels = Page(browser, full).facts["labels"]
    monkeypatch.setattr(html_mod, "LABEL_CHARS", 24)
    short = tmp_path / "short.html"
    short.write_text(to_html(audits))
    p = Page(browser, short, width=1280)
    check_clean(p)
    long_ones = [t for t in labels if len(t) > 24]
    assert long_ones and len(p.facts["cut"]) >= len(long_ones)
    fulls = {c["full"] for c in p.facts["cut"]}
    assert set(long_ones) <= fulls
    for c in p.facts["cut"]:
        assert len(c["shown"]) == 24 and c["shown"].endswith("…")
        assert c["full"].startswith(c["shown"][:-1]) and len(c["full"]) > 24
    assert p.facts["overflow"] <= 0


# IBA encodings as wire-formats.md §3 gives them (transcribed: MTU codes, the rate codes used
# here, PacketLifeTime = 4.096 µs × 2^code).
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
RATE_GBPS = {3: "10", 7: "40", 16: "100"}


def test_records_table_shows_codes_decoded_beside_the_raw_code(browser, conversation, tmp_path):
    doc, html = reports(conversation, tmp_path)
    p = Page(browser, html)
    cells = p.facts["records"]
    by_field: dict[str, list[tuple[str, str]]] = {}
    for c in cells:
        by_field.setdefault(c["field"], []).append((c["value"], c["text"]))
    for value, text in by_field["mtu"]:
        assert text == f"{MTU_BYTES[int(value)]} ({value})"
    for value, text in by_field["rate"]:
        assert text == f"{RATE_GBPS[int(value)]} Gb/s ({value})"
    for value, text in by_field["packet_life_time"]:
        if value:
            seconds = 4.096e-6 * 2 ** int(value)
            assert text == f"{seconds:.4g} s ({value})" and seconds >= 1
    for value, text in by_field["slid"] + by_field["dlid"]:
        assert text == value  # LIDs in decimal
    for value, text in by_field["pkey"]:
        assert text == f"0x{int(value):04x}"
    assert by_field["mtu"] and by_field["rate"] and by_field["local_ack_timeout"]
