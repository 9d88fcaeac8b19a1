"""What the decoders establish about a capture and the rules read: typed problems (problems.py)
and the one place a record becomes JSON (public).

A decoded record states facts only: its problems as codes, and for a kernel-bound path array
(blob frame, LS RESOLVE response) what the kernel reads of it ("kernel_blob", a
kernelview.Blob). What the kernels make of that is policy, judged by the audit
(audit.kernel.kernel_view_of) and shown in `ibpath decode` output as "kernel_view"."""

from __future__ import annotations

from ..kernelview import kernel_view_dict
from .problems import Code, Problem, of_code, problem

__all__ = ["Code", "Problem", "of_code", "problem", "public"]


def public(rec: dict) -> dict:
    """A decoded record as `ibpath decode --format json` prints it (interfaces.md): its
    problems rendered as sentences, its kernel_blob as each kernel profile's kernel_view (in
    its place). The record itself is left as it is."""
    errors, error = rec.get("errors"), rec.get("error")
    blob = rec.get("kernel_blob")
    if errors is None and not isinstance(error, Problem) and blob is None:
        return rec
    if blob is not None:
        out = {("kernel_view" if k == "kernel_blob" else k): v for k, v in rec.items()}
        out["kernel_view"] = kernel_view_dict(blob)
    else:
        out = dict(rec)
    if errors is not None:
        out["errors"] = [str(p) for p in errors]
    if isinstance(error, Problem):
        out["error"] = str(error)
    return out
