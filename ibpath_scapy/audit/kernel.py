"""What each kernel profile makes of a kernel-bound path array: the audit's judgement of the
"kernel_blob" facts a decoder states for a blob frame or an LS RESOLVE response."""

from __future__ import annotations

from ..facts.records import Fact, remember
from ..facts.kernelview import kernel_view_dict


def kernel_view_of(rec) -> dict[str, dict]:
    """Each profile's choice (KernelChoice.to_dict()) for the blob or LS response `rec`, or {}
    for a record that hands the kernel no array. Judged once per record and kept with it (a
    fact's cache; a plain dict's "kernel_view", as `ibpath decode` shows it)."""
    fact = isinstance(rec, Fact)
    view = getattr(rec, "_view", None) if fact else rec.get("kernel_view")
    if view is None:
        blob = rec.get("kernel_blob")
        view = kernel_view_dict(blob) if blob is not None else {}
        if fact:
            remember(rec, "_view", view)
        else:
            rec["kernel_view"] = view
    return view
