"""What the decoders establish about a capture and the rules read: typed problems (problems.py)
and the one place a record becomes JSON (public).

A decoded record states facts only: its problems as codes, and for a kernel-bound path array
(blob frame, LS RESOLVE response) what the kernel reads of it ("kernel_blob", a
kernelview.Blob). What the kernels make of that is policy, judged by the audit
(audit.kernel.kernel_view_of) and shown in `ibpath decode` output as "kernel_view"."""

from __future__ import annotations

from .kernelview import kernel_view_dict
from .problems import Code, Problem, of_code, problem
from .records import Fact, dumps, plain

__all__ = ["Code", "Problem", "of_code", "problem", "public", "public_json"]


def public(rec) -> dict:
    """A decoded record as `ibpath decode --format json` prints it (interfaces.md): a plain
    dict in the order of its fields, its problems rendered as sentences, its kernel_blob as
    each kernel profile's kernel_view (in its place). The record itself is left as it is."""
    if isinstance(rec, Fact):
        return rec.plain()
    return _plain_dict(rec)


def _plain_dict(rec: dict) -> dict:
    """public() of a record written as a dict (a test's, an audit-made one)."""
    out = {}
    for k, v in rec.items():
        if k == "kernel_blob":
            out["kernel_view"] = kernel_view_dict(v)
        else:
            out[k] = _plain_dict(v) if type(v) is dict else plain(v)
    return out


def public_json(rec) -> str:
    """json.dumps(public(rec)), the same text (a line of `ibpath decode --format json`), made
    from the record without the intermediate dicts (Fact.to_json)."""
    if isinstance(rec, Fact):
        return rec.to_json()
    return dumps(_plain_dict(rec))
