"""Reading tshark's JSON protocol tree: nodes as ordered (key, value) pairs, the plugin's
fields named from the layers (the generator's own model) and converted to decode.py's values."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Iterable

from ...layers.sa import gid_text, name_text
from ...model.layout import build_layer
from .clock import _Clock


# --------------------------------------------------------------------------------------------
# Field names from the layers (the generator's own model) and value conversion
# --------------------------------------------------------------------------------------------

def _ipv6(text: str) -> str:
    return gid_text(ipaddress.IPv6Address(text).packed)  # as decode spells GIDs


def _int(text: str) -> int:
    return int(text, 16) if text[:2] in ("0x", "0X") else int(text)


def _hex(text: str) -> str:
    return text.replace(":", "").lower()


def _name(text: str) -> str:
    """A name field (layers.sa.NameField): the plugin gives its bytes, shown as decode does."""
    return name_text(bytes.fromhex(_hex(text)))


_CONVERT = {"ipv6": _ipv6, "ipv4": str, "bytes": _hex, "varbytes": _hex}


@dataclass(frozen=True)
class _LayerFields:
    node: str  # ibpath.<layer>: the protocol node
    fields: tuple  # (name, abbrev, convert) in wire order


_LAYER_CACHE: dict[type, _LayerFields] = {}


def _fields_of(cls: type) -> _LayerFields:
    lf = _LAYER_CACHE.get(cls)
    if lf is None:
        model = build_layer(cls, "ibpath", set())
        fields = tuple((s.name, s.item.abbrev, _name if s.text else _CONVERT.get(s.kind, _int))
                       for s in model.steps if s.item is not None)
        lf = _LAYER_CACHE[cls] = _LayerFields(model.proto_name, fields)
    return lf


# --------------------------------------------------------------------------------------------
# The JSON tree: nodes are lists of (key, value) pairs (duplicate keys kept, in order)
# --------------------------------------------------------------------------------------------

def _pairs(node) -> list:
    return node if isinstance(node, list) else []


def _first(node, key):
    for k, v in _pairs(node):
        if k == key:
            return v
    return None


def _all(node, key) -> list:
    return [v for k, v in _pairs(node) if k == key]


def _values(node, cls: type, names: Iterable[str] | None = None) -> dict:
    """The layer's field values found directly in its node, converted, keyed by field name."""
    lf = _fields_of(cls)
    flat: dict = {}
    for k, v in _pairs(node):
        if isinstance(v, str) and k not in flat:
            flat[k] = v
    wanted = None if names is None else set(names)
    out = {}
    for name, abbrev, conv in lf.fields:
        if (wanted is None or name in wanted) and abbrev in flat:
            out[name] = conv(flat[abbrev])
    return out


def _public(values: dict, cls: type) -> dict:
    """decode.layer_dict's choice of fields: every field but the reserved ones, in order."""
    return {f.name: values[f.name] for f in cls.fields_desc
            if f.name != "records" and not f.name.startswith("reserved") and f.name in values}


def _reserved_set(values: dict) -> bool:
    return any(v for k, v in values.items() if k.startswith("reserved"))


@dataclass
class _Frame:
    number: int
    time: float
    cap_len: int
    encap_type: int
    comment: str | None
    layers: list  # top-level (key, node) pairs
    linktype: int | None = None  # the file's link type for the frame (pcap or pcapng IDB)


def _frame_of(layers: list, clock: _Clock) -> _Frame:
    frame = _first(layers, "frame")
    number = _int(_first(frame, "frame.number"))
    epoch = _first(frame, "frame.time_epoch") or "0.0"
    section = _int(_first(frame, "frame.section_number") or "1")
    iface = _int(_first(frame, "frame.interface_id") or "0")
    comment = None
    for c in _all(layers, "pkt_comment"):
        comment = _first(c, "frame.comment")
        if comment is not None:
            break
    return _Frame(number=number, time=clock.time(epoch, section, iface),
                  cap_len=_int(_first(frame, "frame.cap_len") or "0"),
                  encap_type=_int(_first(frame, "frame.encap_type") or "0"),
                  comment=comment, layers=layers, linktype=clock.linktype(section, iface))


