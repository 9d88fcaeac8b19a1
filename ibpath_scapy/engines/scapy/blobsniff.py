"""Is a file that is no capture a raw blob (rdma_set_option optval)? Told from its content.

Two ways in: the first record's flags word (host order) below 0x100, as every defined flag
set is (IB_PATH_* use 0x3F); or, whatever the flags word says (an unknown bit above 0xFF,
flags written in network order), a length of whole 72-byte records each of whose
PathRecords reads as a resolved path in SA wire format: no reserved bit set, an MTU code of
1-5, a known rate code, GIDs with a unicast prefix. Text and other formats fail both.
"""

from __future__ import annotations

import ipaddress

from ...facts.values import path_record_dict, reserved_nonzero
from ...layers.pathdata import RECORD_SIZE, PathRecData
from ...layers.sa import RATE_CODES


def swapped_prefix(gid: ipaddress.IPv6Address) -> bool:
    """fe80:: link-local prefix with its 32-bit words (or the whole 64-bit prefix) in little
    endian: 0000:80fe:… or ::80fe…"""
    b = gid.packed
    return b[:4] == b"\x00\x00\x80\xfe" or b[:8] == b"\x00" * 6 + b"\x80\xfe"


def wire_anomalies(pr: dict, reserved: bool = False) -> list[str]:
    """What a resolved PathRecord (decoded record dict) in SA wire format cannot hold."""
    out = []
    if reserved:
        out.append("reserved bits or bytes are not zero")
    if not 1 <= pr["mtu"] <= 5:
        out.append(f"MTU code {pr['mtu']} is outside 1-5")
    if pr["rate"] not in RATE_CODES:
        out.append(f"rate code {pr['rate']} is unknown")
    for g in ("sgid", "dgid"):
        if swapped_prefix(ipaddress.IPv6Address(pr[g])):
            out.append(f"{g.upper()} {pr[g]} has the fe80:: prefix byte-swapped")
    return out


def _unicast_gid(gid: ipaddress.IPv6Address) -> bool:
    """A GID a path can name: link- or site-local (fe80::/10, fec0::/10), unique local
    (fc00::/7), global unicast (2000::/3), or IPv4-mapped (RoCE, ::ffff:a.b.c.d)."""
    b = gid.packed
    return (b[0] == 0xFE and b[1] & 0xC0 in (0x80, 0xC0)) or b[0] & 0xFE == 0xFC \
        or b[0] & 0xE0 == 0x20 or gid.ipv4_mapped is not None


def records_look_like_paths(data: bytes) -> bool:
    """Whether data is one or more whole 72-byte records whose PathRecords all read as
    resolved paths in wire format (wire_anomalies finds nothing, unicast GIDs)."""
    if not data or len(data) % RECORD_SIZE:
        return False
    for k in range(0, len(data), RECORD_SIZE):
        pr = PathRecData(data[k:k + RECORD_SIZE]).path_record
        d = path_record_dict(pr)
        if wire_anomalies(d, bool(reserved_nonzero(pr))):
            return False
        if not all(_unicast_gid(ipaddress.IPv6Address(d[g])) for g in ("sgid", "dgid")):
            return False
    return True


# at most this many records are parsed to sniff a file (a real path array holds a handful)
_SNIFF_RECORDS = 64


def plausible(data: bytes) -> bool:
    """Whether bytes that are no capture file can be a raw blob (see the module docstring)."""
    if len(data) < 4:
        return False
    _, flags = PathRecData.fields_desc[0].getfield(None, data[:4])
    if int(flags) < 0x100:
        return True
    if len(data) > _SNIFF_RECORDS * RECORD_SIZE:
        return False
    return records_look_like_paths(data)
