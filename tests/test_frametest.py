"""The audit's frame-finding test in C (ibpath_scapy/native/_frametest.c, FrameTest) against
engine._frame_finding_test in Python, which remains the reference: the same verdict for every
record of the project's captures, the fuzz inputs, the bench captures in both encapsulations
and records of the Scapy engine; records it leaves to Python; a memo that fills past its
bound; and the audit's choice of it."""

from __future__ import annotations

import sys

import pytest

from ibpath_scapy.audit import engine
from ibpath_scapy.audit.rules.frame import packet_rule_hits
from ibpath_scapy.facts.problems import ICRC_MISMATCH
from ibpath_scapy.facts.records import Mad, MadFrame, Rmpp, SaHeader
from ibpath_scapy.native import extension

from conftest import ROOT, project_inputs
from test_intake import _records

sys.path.insert(0, str(ROOT / "bench"))
from corpus import write_capture3  # noqa: E402

needs_c = pytest.mark.skipif(
    extension() is None or not hasattr(extension(), "FrameTest"),
    reason="the package was built without its C extension: has_finding runs alone")


def _same(records: list) -> int:
    """C and Python agree on every record: how many can have a finding."""
    has_finding = engine._frame_finding_test()
    batch = engine.frame_finding_batch(has_finding)
    assert batch.__class__.__name__ == "FrameTest"
    want = [bool(has_finding(rec)) for rec in records]
    assert batch(records) == want
    assert batch(tuple(records)) == want  # (asked again: from its memo)
    return sum(want)


@needs_c
def test_same_verdicts_over_the_project_captures_and_the_fuzz_inputs():
    files = project_inputs()
    assert len(files) > 40
    assert sum(_same(_records(path)) for path in files) >= 10


@needs_c
@pytest.mark.parametrize("encap", ["rocev2", "ib"])
def test_same_verdicts_over_the_bench_captures(bench_capture, tmp_path, encap):
    for path in (bench_capture("capture1", 3000, encap=encap),
                 bench_capture("capture2", 3000, encap=encap),
                 write_capture3(tmp_path / "c3.pcap", 3000, encap=encap)):
        records = _records(path)
        assert len(records) > 100
        _same(records)


@needs_c
def test_same_verdicts_from_the_scapy_engine():
    files = [p for p in project_inputs() if p.suffix in (".pcap", ".pcapng")]
    assert sum(_same(_records(path, scapy=True)) for path in files) >= 10


def _mad(method: int = 0x12, **kw) -> Mad:
    fields = dict(base_version=1, mgmt_class=3, class_version=2, method=method, status=0,
                  class_specific=0, transaction_id=9, attribute_id=0x35, attribute_modifier=0,
                  method_name="", attribute_name="PathRecord", status_text="")
    return Mad(**{**fields, **kw})


def _sa_frame(n: int, mad: Mad, mask: int = 0x3C, **kw) -> MadFrame:
    rmpp = Rmpp(rmpp_version=1, rmpp_type=0, r_resp_time=0, rmpp_flags=0, rmpp_status=0,
                segment_number=0, payload_length=0)
    sa = SaHeader(sm_key=0, attribute_offset=8, component_mask=mask, components=[])
    return MadFrame(frame=n, time=float(n), kind="sa", src="a", dst="b", mad=mad,
                    rmpp=rmpp, sa=sa, **kw)


@needs_c
def test_records_left_to_python_and_a_memo_past_its_bound():
    """A dict, a frame with errors (asked of the guarded checks), one of another kind, one
    without the views the conditions read (packet_rule_hits asked unmemoised), records whose
    PathRecords are not facts; then more distinct headers than the memo holds, a packet
    rule holding on some of them (SAQ-BAD-METHOD: a method SA does not answer)."""
    mad = _mad()
    odd = [{"frame": 1, "kind": "ls"},
           {"frame": 2, "kind": "malformed", "malformed": True, "error": None},
           _sa_frame(3, mad, errors=[ICRC_MISMATCH]),
           MadFrame(frame=4, time=0.0, kind="cm", mad=mad),
           MadFrame(frame=5, time=0.0, kind="sa", mad=mad),
           MadFrame(frame=6, time=0.0, kind="sa", mad=None, rmpp=None, sa=None),
           _sa_frame(7, _mad(0x7F)),
           # a PathRecord written as a dict: keyed by rules/frame.py's other key
           _sa_frame(8, _mad(0x14), path_records=[{"numb_path": 0}])]
    assert _same(odd) >= 2
    # headers of another slotted class, the same names in other slots, met in turn with Mad
    # facts: each read by its own class's slot (a reader that kept the first class's
    # offsets would read another field)
    class OtherMad:
        __slots__ = ("status", "method", "mgmt_class", "class_version", "attribute_id")

        def __init__(self, **kw):
            for k, v in kw.items():
                setattr(self, k, v)

    other = [_sa_frame(n, OtherMad(status=0, method=(0x12, 0x7F)[n % 3 == 0], mgmt_class=3,
                                   class_version=2, attribute_id=0x35) if n % 2
                       else _mad((0x12, 0x7F)[n % 3 == 0]))
             for n in range(12)]
    assert 0 < _same(other) < len(other)
    # (pairs that differ in the class version alone: SAQ-BAD-METHOD holds of version 1)
    many = [_sa_frame(n, _mad(method=(0x12, 0x7F)[n % 7 == 0], class_version=1 + n % 2),
                      mask=n // 2)
            for n in range(10, 10 + 3 * 4096)]
    assert _same(many) > 4096
    assert any(packet_rule_hits(rec) for rec in many)


@needs_c
def test_the_audit_takes_the_c_test_unless_it_cannot(monkeypatch):
    """Python's has_finding alone without the extension, or where a frame check is neither a
    packet rule's nor guarded (it would be asked of every record)."""
    has_finding = engine._frame_finding_test()
    assert engine.frame_finding_batch(has_finding).__class__.__name__ == "FrameTest"
    plan = has_finding.plan
    monkeypatch.setattr(has_finding, "plan", (plan[0], True, *plan[2:]))
    assert engine.frame_finding_batch(has_finding).__class__.__name__ == "function"
    monkeypatch.setattr(has_finding, "plan", plan)
    with pytest.raises(TypeError):  # header reads must be (view, field) names
        extension().FrameTest(MadFrame, "sa", (("mad",),), (), frozenset(), (), bool, bool)
    monkeypatch.setenv("IBPATH_NATIVE_SCAN", "0")
    assert engine.frame_finding_batch(has_finding).__class__.__name__ == "function"
