"""Every rule of the registry has its fixtures (issue 19 point 4): a failing input, where the rule
fires on exactly the expected frames, and a passing input, where it does not fire.

The inputs are committed captures: the crafted scenarios of captures/corpus/ (one per rule, the
scenario library's), the rxe lab captures of captures/rxe/ and the OpenSM capture of
captures/opensm/. A passing input is, where one exists, a near miss: a capture that gives the
rule what it looks at (a blob, a CM REQ, an SA transaction, a resolution) and is right about it,
e.g. SAQ-NO-RESPONSE passes on a query answered after its retry.

The table, RULE_FIXTURES, is the one place the fixtures are kept, keyed by rule ID. A rule of the
registry without an entry, or an entry naming a rule the registry does not have, fails
test_every_registered_rule_has_fixtures. Each input is audited once, through `ibpath audit
--format json` (in this process), with the --kernel profile its manifest gives.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from ibpath_scapy.audit.model import RULES
from ibpath_scapy.cli.main import main

from conftest import CAPTURES

# rule ID: ((failing input, frames of each of its findings there), passing input).
# Inputs are paths under captures/; frames are compared as a sorted list of frame lists.
RULE_FIXTURES: dict[str, tuple[tuple[str, list[list[int]]], str]] = {
    # the process rules: real librdmacm and a real kernel where the lab showed the fault
    "ACM-AF-IB-ON-ROCE": (("rxe/acm/acm-ucmatose-conform-ucma.pcapng", [[17, 18, 19]]),
                          "rxe/acm/acm-rping-conform-ucma.pcapng"),  # RAI_ROUTEONLY: no AF_IB
    "ACM-FALLBACK": (("rxe/acm/acm-sar-status.pcapng", [[21, 22, 23]]),
                     "rxe/acm/acm-conform-ucma.pcapng"),  # the answer's path was used
    "ACM-LENGTH": (("rxe/acm/acm-blob-length.pcapng", [[22]]),
                   "rxe/acm/acm-conform-apm.pcapng"),  # two whole entries
    "ACM-PATH-SPLIT": (("corpus/acm-path-split.pcapng", [[5]]),
                       "rxe/acm/acm-conform-apm.pcapng"),  # two path entries, together
    "ACM-ROUTE-DIFFERS": (("corpus/acm-route-differs.pcapng", [[4, 5, 6, 7]]),
                          "rxe/acm/acm-conform-apm.pcapng"),  # 0x2B and 0x2D passed on
    "ACM-UNANSWERED": (("rxe/acm/acm-saq-no-response-silent.pcapng", [[21]]),
                       "rxe/acm/acm-saq-no-response.pcapng"),  # answered, with ETIMEDOUT
    "RECORD-INCOMPLETE": (("corpus/record-incomplete.pcapng", [[9]]),
                          "corpus/conform-acm.pcapng"),
    "UCMA-IBS-EVENT-MISMATCH": (("corpus/ucma-ibs-event-mismatch.pcapng", [[5, 6]]),
                                "corpus/conform-ib-service-none.pcapng"),  # none: -ENODATA
    "UCMA-IBS-ON-ROCE": (("corpus/ucma-ibs-on-roce.pcapng", [[3]]),
                         "corpus/conform-ib-service.pcapng"),  # an IB port: the SA asked
    "UCMA-IBS-QUERY-EARLY": (("corpus/ucma-ibs-query-early.pcapng", [[4]]),
                             "corpus/conform-ib-service.pcapng"),  # after ADDRINFO_RESOLVED
    "UCMA-IBS-TWICE": (("corpus/ucma-ibs-twice.pcapng", [[8]]),
                       "corpus/conform-ib-service.pcapng"),  # one resolution a cm_id
    "UCMA-IBS-QUERY-TRUNCATED": (("corpus/ucma-ibs-query-truncated.pcapng", [[14]]),
                                 "corpus/conform-ib-service-retry.pcapng"),  # asked again for 8
    "UCMA-IBS-NAME-UNTERMINATED": (("corpus/ucma-ibs-name-unterminated.pcapng", [[3]]),
                                   "corpus/conform-ib-service.pcapng"),  # a 14-byte name
    "UCMA-IBS-NO-KEY": (("corpus/ucma-ibs-no-key.pcapng", [[3]]),
                        "corpus/conform-ib-service.pcapng"),  # FLAG_NAME
    "UCMA-READBACK": (("corpus/ucma-readback.pcapng", [[6, 7, 9]]),
                      "rxe/acm/acm-blob-endpoints.pcapng"),  # the kernel read back record 2
    "UCMA-SET-OPTION-STATE": (("corpus/ucma-set-option-state.pcapng", [[2, 3]]),
                              "rxe/acm/acm-conform-ucma.pcapng"),  # after ADDR_RESOLVED
    "UCMA-VERDICT": (("corpus/ucma-verdict.pcapng", [[6, 7]]),
                     "rxe/acm/acm-blob-kernel-reject.pcapng"),  # -EINVAL, as predicted
    "BLOB-ALT-SAME-AS-PRIMARY": (("corpus/blob-alt-same-as-primary.pcapng", [[5]]),
                                 "corpus/conform-apm.pcapng"),  # a distinct second route
    "BLOB-ALT-WITHOUT-PRIMARY": (("corpus/blob-alt-without-primary.pcapng", [[3]]),
                                 "corpus/conform-apm.pcapng"),  # 0x2B with its 0x2D
    "BLOB-BIDIR-NOT-REVERSIBLE": (("corpus/ibacm-not-reversible.pcapng", [[4]]),
                                  "corpus/conform-ucma.pcapng"),  # 0x2B of a reversible path
    "BLOB-EMPTY": (("corpus/blob-empty.pcapng", [[2]]),
                   "rxe/blob-ragged.pcapng"),  # a bad length, but a record
    "BLOB-ENDPOINTS": (("corpus/blob-endpoints.pcapng", [[7]]),
                       "corpus/seed-followup-compat.pcapng"),  # forward, return, GMP agree
    "BLOB-FIELD-RANGE": (("corpus/blob-field-range.pcapng", [[3]]),
                         "corpus/conform-ucma.pcapng"),
    "BLOB-FLAG-CONFLICT": (("corpus/blob-flag-conflict.pcapng", [[3]]),
                           "corpus/conform-apm.pcapng"),  # PRIMARY and ALTERNATE records
    "BLOB-GMP-NOT-REVERSIBLE": (("corpus/res-no-followup.pcapng", [[3]]),
                                "corpus/conform-ucma.pcapng"),
    "BLOB-KERNEL-REJECT": (("corpus/blob-kernel-reject.pcapng", [[7]]),
                           "rxe/blob-single-2b.pcapng"),  # what rdma_set_option takes
    "BLOB-LENGTH": (("corpus/blob-length.pcapng", [[3]]),
                    "rxe/blob-two-2b.pcapng"),  # two whole records
    "BLOB-NOT-MAD-FORMAT": (("corpus/blob-host-order.pcapng", [[3]]),
                            "corpus/conform-ucma.pcapng"),
    "BLOB-PROFILE-DIVERGENCE": (("corpus/seed-followup-compat.pcapng", [[7]]),
                                "rxe/blob-two-2b.pcapng"),  # every profile takes record 0
    "BLOB-RESERVED": (("corpus/blob-reserved.pcapng", [[3]]),
                      "corpus/conform-ucma.pcapng"),
    "BLOB-UNKNOWN-FLAGS": (("corpus/blob-unknown-flags.pcapng", [[3]]),
                           "rxe/blob-single-2b.pcapng"),
    "CM-REQ-ALT-MISMATCH": (("corpus/cm-req-alt-mismatch.pcapng", [[3, 4]]),
                            "corpus/conform-apm.pcapng"),  # the REQ carries both routes
    "CM-REQ-INBOUND-LID": (("corpus/cm-req-inbound-lid.pcapng", [[8, 9]]),
                           "corpus/conform-ls-multi.pcapng"),
    "CM-REQ-PATH-MISMATCH": (("corpus/cm-req-path-mismatch.pcapng", [[3, 4]]),
                             "corpus/conform-ucma.pcapng"),
    "CM-ROCE-GID": (("corpus/cm-roce-gid.pcapng", [[7]]),
                    "rxe/ucmatose.pcapng"),  # a real RoCEv2 REQ
    "CRC-MISMATCH": (("corpus/crc-mismatch.pcapng", [[1]]),
                     "rxe/rping.pcapng"),  # real ICRCs
    "CRC-ZERO": (("corpus/crc-zero.pcapng", [[1, 2, 4, 5, 6]]),
                 "rxe/rping.pcapng"),
    "DECODE-LIMIT": (("corpus/decode-limit.pcapng", [[3]]),
                     "opensm/opensm-saquery.pcap"),
    "DECODE-MALFORMED": (("corpus/decode-malformed.pcapng", [[2]]),
                         "opensm/opensm-saquery.pcap"),
    "DECODE-UNSUPPORTED": (("corpus/decode-unsupported.pcapng", [[1]]),
                           "rxe/netlink-rdma-dev.pcapng"),  # netlink: a link type of its own
    "RES-BLOB-MISMATCH": (("corpus/res-blob-mismatch.pcapng", [[2, 3]]),
                          "corpus/conform-ucma.pcapng"),  # the SA's record passed through
    "RES-BLOB-SHAPE": (("corpus/res-blob-shape.pcapng", [[1, 2, 7]]),
                       "corpus/seed-followup-compat.pcapng"),  # not reversible, return kept
    "RES-LS-ERR": (("corpus/res-ls-err.pcapng", [[1, 4]]),
                   "corpus/conform-ls-legacy.pcapng"),
    "RES-LS-MISMATCH": (("corpus/res-ls-mismatch.pcapng", [[1, 4]]),
                        "corpus/conform-ls-legacy.pcapng"),
    "RES-LS-PATHUSE": (("corpus/res-ls-pathuse.pcapng", [[1, 4]]),
                       "corpus/conform-ls-unidirectional.pcapng"),  # 0x0A, as UNIDIRECTIONAL asks
    "RES-LS-UNANSWERED": (("corpus/res-ls-unanswered.pcapng", [[1]]),
                          "corpus/conform-ls-legacy.pcapng"),
    "RES-NO-FOLLOWUP": (("corpus/res-no-followup.pcapng", [[1, 2, 3]]),
                        "corpus/seed-followup-compat.pcapng"),  # not reversible, followed up
    "RES-REDUNDANT-QUERIES": (("corpus/res-redundant-queries.pcapng", [[1, 2, 3, 4, 5, 6]]),
                              "corpus/conform-ucma.pcapng"),  # reversible, one query
    "RES-STALE-BLOB": (("corpus/res-stale-blob.pcapng", [[8, 9]]),
                       "corpus/sar-status.pcapng"),  # an error status, and no blob after it
    "SAQ-BAD-METHOD": (("corpus/saq-bad-method.pcapng", [[1]]),
                       "opensm/opensm-saquery.pcap"),  # saquery's Gets and GetTables
    "SAQ-NO-RESPONSE": (("corpus/saq-no-response.pcapng", [[1]]),
                        "corpus/saq-retry.pcapng"),  # answered after its retry
    "SAQ-NUMBPATH-ZERO": (("corpus/saq-numbpath-zero.pcapng", [[1]]),
                          "corpus/conform-apm.pcapng"),  # GetTable NumbPath 2
    "SAQ-RESERVED-COMP": (("corpus/saq-reserved-comp.pcapng", [[1]]),
                          "opensm/opensm-saquery.pcap"),
    "SAQ-SR-RESERVED-COMP": (("corpus/saq-sr-reserved-comp.pcapng", [[4]]),
                             "corpus/conform-ib-service.pcapng"),  # the ServiceName bit only
    "SAQ-SELECTOR-MISSING": (("corpus/saq-selector-missing.pcapng", [[1]]),
                             "opensm/opensm-saquery.pcap"),  # saquery --rate: both bits
    "SAQ-RETRY": (("corpus/saq-retry.pcapng", [[1, 2]]),
                  "opensm/opensm-saquery.pcap"),
    "SAQ-SERVICEID-HALF": (("corpus/saq-serviceid-half.pcapng", [[1]]),
                           "corpus/conform-ucma.pcapng"),  # both ServiceID bits
    "SAR-GET-MULTI": (("corpus/sar-get-multi.pcapng", [[2]]),
                      "opensm/opensm-saquery.pcap"),  # OpenSM's GetResps
    "SAR-MISMATCH": (("corpus/sar-mismatch.pcapng", [[1, 2]]),
                     "opensm/opensm-saquery.pcap"),
    # saquery's own recording on ibsim: umad2sim cut OpenSM's 16-segment answer to 256 bytes
    "UMAD-CUT": (("opensm/saquery-01-all-paths.pcapng", [[2]]),
                 "opensm/saquery-02-src-to-dst-lids.pcapng"),  # one record, whole
    "SAR-RESERVED": (("corpus/sar-reserved.pcapng", [[2]]),
                     "corpus/conform-ucma.pcapng"),  # SA answers with reserved bits zero
    "SAR-RMPP": (("corpus/sar-rmpp-gap.pcapng", [[2]]),
                 "opensm/opensm-saquery.pcap"),  # OpenSM's multi-segment GetTableResps
    "SAR-RMPP-RETRY": (("corpus/sar-rmpp-retry.pcapng", [[4]]),
                       "corpus/sar-rmpp-gap.pcapng"),  # a segment missing, none twice
    "SAR-TABLE-OFFSET": (("corpus/sar-table-offset.pcapng", [[2]]),
                         "opensm/opensm-saquery.pcap"),  # OpenSM's GetTableResps: offset 8
    "SAR-STATUS": (("corpus/sar-status.pcapng", [[4]]),
                   "corpus/conform-ucma.pcapng"),
}

# What a passing input must hold for the rule to have something to judge (the JSON summary's
# counts), by rule family: a passing input that never shows the rule its subject proves nothing.
SUBJECT = {"BLOB": "blobs", "CM": "cm_reqs", "SAQ": "transactions", "SAR": "transactions",
           "RES": "resolutions", "CRC": "packets", "DECODE": "packets", "UCMA": "cm_ids",
           "ACM": "acm_exchanges", "RECORD": "packets", "UMAD": "transactions",
           # ServiceRecord requests are judged a packet at a time (no PathRecord transaction)
           "SAQ-SR": "packets"}


def _manifests() -> dict[str, dict]:
    """The entries of every captures/**/manifest.json by path under captures/."""
    out = {}
    for m in sorted(CAPTURES.glob("**/manifest.json")):
        for e in json.loads(m.read_text())["scenarios"]:
            out[f"{m.parent.relative_to(CAPTURES).as_posix()}/{e['file']}"] = e
    return out


MANIFESTS = _manifests()


def _inputs() -> set[str]:
    return {f for (fail, _frames), ok in RULE_FIXTURES.values() for f in (fail, ok)}


def _kernel(name: str) -> str:
    return MANIFESTS[name]["kernel"] if name in MANIFESTS else "all"


@pytest.fixture(scope="module")
def audits(tmp_path_factory) -> dict[str, dict]:
    """Each input's JSON report: {"findings": {rule: sorted frame lists}, "summary": {...}},
    from `ibpath audit --format json --kernel <its manifest's profile>` on that input alone."""
    out_dir = tmp_path_factory.mktemp("rule-fixtures")
    got = {}
    for name in sorted(_inputs()):
        report = out_dir / f"{name.replace('/', '_')}.json"
        rc = main(["audit", "--quiet", "--format", "json", "--kernel", _kernel(name),
                   "-o", str(report), str(CAPTURES / name)])
        assert rc in (0, 1), f"{name}: exit status {rc}"
        doc = json.loads(report.read_text())
        assert doc["files"] == [str(CAPTURES / name)]
        findings = defaultdict(list)
        for f in doc["findings"]:
            assert f["file"] == str(CAPTURES / name)
            findings[f["rule"]].append(f["frames"])
        got[name] = {"findings": {r: sorted(v) for r, v in findings.items()},
                     "summary": doc["summary"]}
    return got


def test_every_registered_rule_has_fixtures():
    registered = set(RULES)
    assert len(registered) >= 40, "the registry looks empty: is the rules package loading?"
    missing = sorted(registered - set(RULE_FIXTURES))
    unknown = sorted(set(RULE_FIXTURES) - registered)
    assert not missing, f"rules without fixtures: {missing}"
    assert not unknown, f"fixtures for rules the registry does not have: {unknown}"


def test_fixture_inputs_exist_and_agree_with_their_manifests():
    """Every input is committed. Where a manifest describes it, the manifest lists the rule
    for the failing input and does not for the passing one."""
    for rule_id, ((fail, frames), ok) in RULE_FIXTURES.items():
        assert frames and all(frames), f"{rule_id}: no expected frames"
        assert fail != ok, rule_id
        for name in (fail, ok):
            assert (CAPTURES / name).is_file(), f"{rule_id}: {name} is not committed"
        if fail in MANIFESTS:
            assert rule_id in MANIFESTS[fail]["rules"], f"{rule_id}: {fail}'s manifest"
        if ok in MANIFESTS:
            assert rule_id not in MANIFESTS[ok]["rules"], f"{rule_id}: {ok}'s manifest"


@pytest.mark.parametrize("rule_id", sorted(RULE_FIXTURES))
def test_rule_fires_on_its_failing_input_at_the_expected_frames(audits, rule_id):
    (fail, frames), _ok = RULE_FIXTURES[rule_id]
    got = audits[fail]["findings"].get(rule_id, [])
    assert got == sorted(frames), f"{rule_id} on {fail}: frames {got}, expected {sorted(frames)}"


@pytest.mark.parametrize("rule_id", sorted(RULE_FIXTURES))
def test_rule_is_silent_on_its_passing_input(audits, rule_id):
    _fail, ok = RULE_FIXTURES[rule_id]
    report = audits[ok]
    assert rule_id not in report["findings"], \
        f"{rule_id} fires on its passing input {ok}: {report['findings'][rule_id]}"
    subject = SUBJECT.get("-".join(rule_id.split("-")[:2])) or SUBJECT[rule_id.split("-", 1)[0]]
    assert report["summary"][subject] > 0, f"{ok} has no {subject} for {rule_id} to judge"
