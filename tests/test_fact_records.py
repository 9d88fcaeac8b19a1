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


# -- a layer fact's JSON text in C (native/_factjson.c) against dumps(plain()) ----------------

needs_fact_json = pytest.mark.skipif(
    type(R._JSON[R.Mad]).__name__ != "FactJson",
    reason="the package was built without its C extension: layer facts' text is _layer_json's")


def _layer_facts(records) -> list:
    """Every layer fact in the records, each once (the JSON text maker of its class is the
    C writer)."""
    found: dict[int, object] = {}

    def walk(v):
        if isinstance(v, R.Fact):
            if type(R._JSON.get(type(v))).__name__ == "FactJson":
                found[id(v)] = v
            for k in v.KEYS:
                walk(getattr(v, k, None))
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    for r in records:
        walk(r)
    return list(found.values())


def _text_both_ways(fact) -> tuple[str, str]:
    """(the C writer's text, json.dumps of plain()), each made afresh."""
    R._set(fact, "_text", None)
    c = R._JSON[type(fact)](fact)
    assert fact._text == c  # kept for the next records that show the same fact
    R._set(fact, "_text", None)
    R._set(fact, "_json", None)
    return c, json.dumps(fact.plain())


@needs_fact_json
def test_layer_fact_text_in_c_is_json_dumps(tmp_path):
    """Each layer fact of the corpus, of bench capture 3 and of the external captures (where
    ../shared is): the C writer's text is json.dumps's of its plain() (json's encoder, not
    the project's)."""
    from conftest import EXTERNAL, bench_corpus

    storm = tmp_path / "c3.pcap"
    bench_corpus.write_capture3(storm, 3000)
    external = sorted(EXTERNAL.glob("*.pcap*")) if EXTERNAL.is_dir() else []
    paths = CORPUS + [storm] + external
    facts = []
    for path in paths:
        facts += _layer_facts(decode_file_fast(str(path), FastDecoder()))
    kinds = {type(f).__name__ for f in facts}
    assert len(facts) > 5000 and {"Mad", "Rmpp", "PathRecord", "SaHeader"} <= kinds
    for f in facts:
        c, py = _text_both_ways(f)
        assert c == py, type(f).__name__


@needs_fact_json
def test_layer_fact_text_in_c_escapes_and_falls_back_as_json_does():
    """Values a capture seldom has: json.dumps's escapes (control characters, quotes, non-ASCII,
    astral characters as surrogate pairs), ints at 64 bits and past them, floats, nested lists,
    None shown where nullable; an int subclass, a nested fact (refused, as json refuses it)
    and a fact of another class left to the Python (_layer_json)."""
    import enum

    class Code(enum.IntEnum):
        A = 7

    names = ("method_name", "attribute_name", "status_text")
    fields = dict.fromkeys(R.Mad._INIT, 1)
    odd_values = ["", "a\"b\\c\n\r\t\b\f\x00\x1f\x7f", "é€\U0001f600", "x" * 300,
                  2 ** 63, 2 ** 64 - 1, 2 ** 64, -2 ** 63, -2 ** 63 - 1, 0, -1,
                  0.1, 1e300, -0.0, float("nan"), float("inf"), float("-inf"),
                  [], [1, [2, ("three", None)]], (True, False), None, Code.A]
    for v in odd_values:
        for name in ("transaction_id", "method_name"):  # shown where None, and not
            f = R.Mad(**{**fields, **dict.fromkeys(names), name: v})
            c, py = _text_both_ways(f)
            assert c == py, (name, v)
    rmpp = R.Rmpp(rmpp_version=1, rmpp_type=1, r_resp_time=0, rmpp_flags=0, rmpp_status=0,
                  segment_number=1, payload_length=0)
    nested = R.Mad(**{**fields, **dict.fromkeys(names), "transaction_id": rmpp})
    for make in (R._JSON[R.Mad], lambda f: json.dumps(f.plain())):  # (a layer holds none)
        with pytest.raises(TypeError, match="Rmpp is not JSON serializable"):
            make(nested)
    f = R.Mad(**{**fields, **dict.fromkeys(names)})
    assert R._JSON[R.Mad](f) == json.dumps(f.plain())
    assert R._JSON[R.Mad](R.PathRecord(**dict.fromkeys(R.PathRecord._INIT, 3))) == \
        json.dumps(dict.fromkeys(R.PathRecord.KEYS, 3))  # another class: the Python's
