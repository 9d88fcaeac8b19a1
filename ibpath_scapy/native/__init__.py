"""The package's optional C extension (native/_scan.c, _mad.c, _frametest.c, _intake.c,
_rows.c, _factjson.c), or None: where it was built without a compiler, or
IBPATH_NATIVE_SCAN=0 (or "no"/"off"/"false") asks for the Python twins of its functions
(pcapio's loops over skipped and taken frames, crc's CRCs, the fast path's MAD decoder, the
audit's frame-finding test, the replay's SA steps and Spill chunks, the layer facts' JSON
text)."""

from __future__ import annotations

import os


def extension():
    """ibpath_scapy.native._scan, or None (see the module)."""
    if os.environ.get("IBPATH_NATIVE_SCAN", "1").strip().lower() in ("0", "no", "off", "false"):
        return None
    try:
        from . import _scan
    except ImportError:
        return None
    return _scan
