"""What each kernel profile makes of a kernel-bound path array: the audit's judgement of the
"kernel_blob" facts a decoder states for a blob frame or an LS RESOLVE response."""

from __future__ import annotations

from ..kernelview import kernel_view_dict


def kernel_view_of(rec: dict) -> dict[str, dict]:
    """Each profile's choice (KernelChoice.to_dict()) for the blob or LS response `rec`, or {}
    for a record that hands the kernel no array. Judged once per record: kept on the record
    under "kernel_view", as `ibpath decode` shows it."""
    view = rec.get("kernel_view")
    if view is None:
        blob = rec.get("kernel_blob")
        view = kernel_view_dict(blob) if blob is not None else {}
        rec["kernel_view"] = view
    return view
