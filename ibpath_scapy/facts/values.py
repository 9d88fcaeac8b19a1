"""A Scapy layer's field values as the facts hold them: GIDs as IPv6 text, flags and enums
as ints, bytes as hex. The Scapy engine, the blob sniffer, the rules that re-read a record
and `ibpath resolve` all read layers through these."""

from __future__ import annotations

import ipaddress
from typing import Iterable

from scapy.fields import FlagsField, IP6Field
from scapy.packet import Packet

from ..layers.sa import PathRecord, gid_text
from .records import PATH_RECORD_FIELDS, Fact
from .records import PathRecord as PathRecordFact


def field_value(pkt: Packet, name: str):
    """A field's value in JSON form: GIDs as IPv6 text, flags and ints as ints, bytes as hex,
    a name (layers.sa.NameField) as its text."""
    fld, val = pkt.get_field(name), pkt.getfieldval(name)
    if isinstance(fld, IP6Field):
        return gid_text(ipaddress.IPv6Address(val).packed)
    if isinstance(fld, FlagsField) or hasattr(val, "value"):
        return int(val)
    if getattr(fld, "as_text", False):
        return fld.text(pkt, val)
    if isinstance(val, bytes):
        return val.hex()
    return val


def layer_dict(pkt: Packet, names: Iterable[str] | None = None, reserved: bool = False) -> dict:
    names = names if names is not None else [
        f.name for f in pkt.fields_desc
        if f.name != "records" and (reserved or not f.name.startswith("reserved"))
    ]
    return {n: field_value(pkt, n) for n in names}


def path_record_fact(rec: PathRecord) -> Fact:
    """The PathRecord fact of a PathRecord layer."""
    return PathRecordFact(**layer_dict(rec, PATH_RECORD_FIELDS))


def path_record_dict(rec: PathRecord) -> dict:
    """A PathRecord layer's values as a plain dict (the keys of the PathRecord fact)."""
    return layer_dict(rec, PATH_RECORD_FIELDS)


def reserved_nonzero(pkt: Packet) -> list[str]:
    return [f.name for f in pkt.fields_desc
            if f.name.startswith("reserved") and pkt.getfieldval(f.name)]
