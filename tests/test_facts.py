"""The decoders' problems are typed codes, rendered in one place, and no rule reads their text."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import ibpath_scapy
from ibpath_scapy.engines.scapy.decode import decode_file
from ibpath_scapy.facts import Code, Problem, public
from ibpath_scapy.facts import problems as P

PKG = Path(ibpath_scapy.__file__).parent
ROOT = PKG.parent
AUDIT = PKG / "audit"
DECODERS = [PKG / "engines" / "scapy" / "decode.py", PKG / "engines" / "fast" / "decoder.py",
            PKG / "engines" / "tshark" / "builder.py", PKG / "facts" / "rmpp.py",
            PKG / "facts" / "assemble.py"]


def _error_key(node: ast.AST) -> bool:
    """Whether node reads a record's "error" or "errors" (rec["errors"], rec.get("error"))."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and sub.value in ("error", "errors"):
            return True
    return False


def _text_tests(tree: ast.AST) -> list[int]:
    """Lines that test text against an error: `"x" in rec["error"]`, `e.startswith(..)`,
    re.search(.., e), `e == "ICRC mismatch"` where e iterates over errors."""
    error_names: set[str] = set()
    for node in ast.walk(tree):  # loop variables over a record's errors
        if isinstance(node, (ast.For, ast.comprehension)) and _error_key(node.iter):
            error_names |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}

    def errorish(n: ast.AST) -> bool:
        return _error_key(n) or any(isinstance(s, ast.Name) and s.id in error_names
                                    for s in ast.walk(n))

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left] + node.comparators
            texts = [s for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)
                     and s.value not in ("error", "errors")]
            if texts and any(errorish(s) for s in sides if s not in texts):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if f.attr in ("search", "match", "fullmatch", "findall") and any(
                    errorish(a) for a in node.args):
                lines.append(node.lineno)
            if f.attr in ("startswith", "endswith", "find", "index") and errorish(f.value):
                lines.append(node.lineno)
    return lines


def test_no_rule_reads_error_text():
    found = {}
    for path in sorted(AUDIT.rglob("*.py")):
        lines = _text_tests(ast.parse(path.read_text()))
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert not found, f"rules and audit code match error text at {found}: test Problem.code"


def test_the_check_finds_text_matching():
    """The scan above can fail: each way a rule used to read error text is caught."""
    for src in ('for e in rec.get("errors", []):\n    if "segment" in e: pass',
                'x = "RMPP transfer" not in rec.get("error", "")',
                'for err in rec["errors"]:\n    m = PAT.search(err)',
                'ok = [e for e in rec["errors"] if e == "ICRC mismatch"]'):
        assert _text_tests(ast.parse(src)), src


def test_every_code_is_reported_by_a_decoder():
    """A code no decoder makes is dead; a decoder that writes a sentence of its own (a string
    where a Problem belongs) is caught by test_decoders_write_no_sentences."""
    text = "\n".join(p.read_text() for p in DECODERS + [PKG / "facts" / "problems.py"])
    used = {c for c in Code if f"Code.{c.name}" in text or f"P.{c.name}" in text}
    dead = set(Code) - used
    assert not dead, dead


def test_decoders_write_no_sentences():
    """errors.append / problems.append / "error": take Problems, never an f-string or literal."""
    bad = []
    for path in DECODERS:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("append", "problem")
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in ("errors", "structural", "problems", "t")
                    and node.args and isinstance(node.args[0], (ast.JoinedStr, ast.Constant))):
                bad.append(f"{path.name}:{node.lineno}")
            if (isinstance(node, ast.keyword) and node.arg == "error"
                    and isinstance(node.value, (ast.JoinedStr, ast.Constant))):
                bad.append(f"{path.name}:{node.value.lineno}")  # a fact's error=
            if isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    if (isinstance(k, ast.Constant) and k.value == "error"
                            and isinstance(v, (ast.JoinedStr, ast.Constant))
                            and not isinstance(getattr(v, "value", None), bool)):
                        bad.append(f"{path.name}:{node.lineno}")
    assert not bad, bad


def test_every_code_renders():
    samples = {Code.PR_RESERVED: ((1, 2),), Code.BLOB_RESERVED: ((0,),),
               Code.SA_RECORD_RESERVED: ("NodeRecord", (0, 3)),
               Code.ATTR_BAD: ("attribute 0 (DGID)", (P.problem(Code.ATTR_FLAGS, 0x8001),)),
               Code.JOINED: ((P.problem(Code.NL_ARPHRD, 1), P.problem(Code.NL_TRAILING, 3)),)}
    for code in Code:
        args = samples.get(code)
        if args is None:  # the renderer's own arity, filled with small ints and text
            fn = P._TEXT[code]
            args = tuple(1 if i % 2 == 0 else 2 for i in range(fn.__code__.co_argcount))
            if code is Code.RMPP_UNFINISHED:
                args = (1, "no LAST segment")
        assert str(Problem(code, args)), code
    assert str(P.problem(Code.JOINED, (P.problem(Code.NL_ARPHRD, 1),
                                       P.problem(Code.NL_TRAILING, 3)))) == (
        "cooked header ARPHRD 1, not ARPHRD_NETLINK (824); 3 bytes after the last netlink "
        "message cannot start another (a message needs 16 bytes and nlmsg_len >= 16)")


CORPUS = ROOT / "captures" / "corpus"


@pytest.mark.skipif(not CORPUS.is_dir(), reason="captures/corpus not in this tree")
def test_records_carry_problems_and_public_renders_them():
    path = CORPUS / "crc-mismatch.pcapng"
    raw = list(decode_file(str(path)))
    problems = [p for r in raw for p in r.get("errors", ())]
    assert problems and all(isinstance(p, Problem) for p in problems)
    assert P.ICRC_MISMATCH in problems
    shown = [public(r) for r in raw]
    json.dumps(shown)  # every problem rendered
    assert shown == list(decode_file(str(path), render=True))
    assert "ICRC mismatch" in [e for r in shown for e in r.get("errors", ())]
    # a blob's kernel view is the audit's judgement, shown at the edge in the record's place
    blob = next(r for r in decode_file(str(CORPUS / "blob-length.pcapng")) if r["kind"] == "blob")
    assert "kernel_view" not in blob and "kernel_blob" in blob
    keys = list(public(blob))
    assert keys.index("kernel_view") == list(blob).index("kernel_blob")
