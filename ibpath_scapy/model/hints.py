"""Declared hints: what a layer would otherwise say in a Python lambda, in a form the Lua
generator can read (Expr trees, see expr.py). The layer's Python code uses the same hints,
so each rule has one definition."""

from __future__ import annotations

from dataclasses import dataclass, field

from .expr import Expr


@dataclass(frozen=True)
class ListHint:
    """A list field: `count` items of `stride` bytes each; the item class is chosen by the
    value of `selector` in `classes` (items of unknown selector values stay raw bytes).

    With count and stride None the items are self-delimiting and run to the end of the data:
    each item class says its own length with a `length_hint` (an Expr over its own fields,
    e.g. nla_len) and `length_align`; a list stops at an item whose length is shorter than
    its fixed header."""

    count: Expr | None
    stride: Expr | None
    selector: Expr
    classes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LengthHint:
    """A variable-length field whose byte length is `length`."""

    length: Expr


@dataclass(frozen=True)
class WhenHint:
    """A conditional field, present when `condition` holds."""

    condition: Expr


@dataclass(frozen=True)
class ByteOrderHint:
    """An integer field whose byte order another field decides: big-endian when
    `big_endian` holds, little-endian otherwise (in Scapy, a MultipleTypeField of the same
    integer in both orders)."""

    big_endian: Expr


@dataclass(frozen=True)
class NextLayer:
    """Payload dispatch beyond bind_layers: when `condition` holds the payload is `cls`
    (checked after the bindings, in order)."""

    condition: Expr
    cls: type


def next_layer_by_hints(pkt, default):
    """The payload class of pkt: bindings first (default), then its NextLayer hints."""
    if default is not None and default.__name__ not in ("Raw", "Padding"):
        return default
    from .expr import evaluate_on

    for hint in getattr(pkt, "payload_hints", ()):
        if evaluate_on(hint.condition, pkt):
            return hint.cls
    return default
