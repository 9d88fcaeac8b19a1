"""The decoded records are declared facts (facts.records), built by the one assembler
(assemble.py) for all three engines."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

import ibpath_scapy
from ibpath_scapy.engines.scapy.decode import Decoder, decode_file
from ibpath_scapy.facts import public
from ibpath_scapy.facts import records as R
from ibpath_scapy.engines.fast import FastDecoder, decode_file_fast
from ibpath_scapy.layers import cm as cm_layers
from ibpath_scapy.layers.mad import MAD, RMPP
from ibpath_scapy.layers.sa import PathRecord

PKG = Path(ibpath_scapy.__file__).parent
ROOT = PKG.parent
ENGINES = [PKG / "engines" / "scapy" / "decode.py", PKG / "engines" / "fast" / "decoder.py",
           PKG / "engines" / "tshark" / "builder.py"]
CORPUS = sorted((ROOT / "captures").rglob("*.pcap*"))


def _fields(layer) -> list[str]:
    return [f.name for f in layer.fields_desc
            if f.name != "records" and not f.name.startswith("reserved")]


def test_layer_facts_are_the_layers_fields():
    """A field added to a layer is a fact of its class with no other edit: the classes are
    made from fields_desc (compared here with the layers' own lists, in order)."""
    assert R.Mad.KEYS == tuple(_fields(MAD)) + ("method_name", "attribute_name", "status_text")
    assert R.Rmpp.KEYS == tuple(_fields(RMPP))
    assert R.PathRecord.KEYS == tuple(_fields(PathRecord))
    assert len(R.PathRecord.KEYS) == 21  # IBA 15.2.5.16's components, reserved bits left out
    for layer, fact in R.CM_FACTS.items():
        assert fact.KEYS == ("message",) + tuple(n for n in _fields(layer) if n != "private_data")
    assert set(R.CM_FACTS) == set(cm_layers.CM_MESSAGE_CLASSES.values())


def test_facts_are_frozen_and_slotted():
    rec = R.MadFrame(frame=1, time=0.0, kind="sa", src="a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.frame = 2
    # slots: no field that is not declared (Python 3.11's frozen __setattr__ of a slotted
    # dataclass raises TypeError there, from its super() call, rather than AttributeError)
    with pytest.raises((AttributeError, TypeError)):
        rec.extra = 1
    assert not hasattr(rec, "__dict__")
    for cls in (R.Mad, R.PathRecord, R.BlobFrame, R.NetlinkFrame, R.LsMessage, R.Unfinished):
        assert dataclasses.is_dataclass(cls) and "__slots__" in cls.__dict__


def test_a_fact_reads_like_the_record_it_declares():
    rec = R.MadFrame(frame=1, time=0.5, kind="sa", src="a", errors=None)
    assert dict(rec) == {"frame": 1, "time": 0.5, "kind": "sa", "src": "a"}
    assert rec == {"frame": 1, "time": 0.5, "kind": "sa", "src": "a"}
    assert "errors" not in rec and rec.get("errors", []) == [] and rec["src"] == "a"
    with pytest.raises(KeyError):
        rec["errors"]
    with pytest.raises(KeyError):
        rec["not_a_field"]
    mad = R.Mad(method=1, attribute_name=None)
    assert "attribute_name" in mad and mad["attribute_name"] is None  # NULLABLE: JSON null
    assert list(mad) == ["method", "method_name", "attribute_name", "status_text"]


def test_no_engine_builds_a_record_itself():
    """Records are made in assemble.py only: no engine writes a record dict ({"frame": ...,
    "kind": ...}) or a fact class of a record."""
    record_classes = {c.__name__ for c in vars(R).values()
                      if isinstance(c, type) and issubclass(c, R.Record) and c is not R.Record}
    assert {"MadFrame", "BlobFrame", "NetlinkFrame", "Malformed"} <= record_classes
    for path in ENGINES:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
                assert not {"kind", "frame"} <= keys, f"{path.name}:{node.lineno}"
            if isinstance(node, ast.Name):
                assert node.id not in record_classes, f"{path.name}:{node.lineno}: {node.id}"


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: str(p.relative_to(ROOT / "captures")))
def test_both_engines_give_the_same_facts(path):
    """Every record of the Scapy path and the fast path is a declared record class, and they
    are equal record for record (the JSON too)."""
    scapy = list(decode_file(str(path), Decoder()))
    fast = list(decode_file_fast(str(path), FastDecoder()))
    assert all(isinstance(r, R.Record) for r in scapy + fast)
    assert [type(r) for r in scapy] == [type(r) for r in fast]
    assert scapy == fast
    assert [json.dumps(public(r)) for r in scapy] == [json.dumps(public(r)) for r in fast]
