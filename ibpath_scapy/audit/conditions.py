"""The single-packet rules' conditions (packet_rules.PACKET_RULES) as Python functions.

One Expr per rule feeds the plugin's expert info and the audit: compiled here once into a
function of (views, own, remaining=0) with the semantics of Expr evaluation. F() reads `own`
(the record's value of the rule's layer: a Mapping), Under("X") reads views["X"], and
Remaining() `remaining` (the bytes of the rule's layer left, for a length check); a missing
view or value reads 0, as in the plugin.
"""

from __future__ import annotations

from typing import Callable

from ..model.exprc import compile_expr, part_src, split_name
from .packet_rules import PACKET_RULES, PacketRule

_EMPTY: dict = {}


def compile_condition(pr: PacketRule, reads: dict[str, set[str]] | None = None) -> Callable:
    """pr's condition as a function of (views, own, remaining=0); `reads`, when given,
    collects the fields it reads per layer."""

    def field(f):
        name, part = split_name(f.name)
        if reads is not None:
            reads.setdefault(f.layer or pr.layer, set()).add(name)
        base = "own" if f.layer is None else f"views.get({f.layer!r})"
        return part_src(f"int(({base} or _E).get({name!r}, 0) or 0)", part)

    fn = compile_expr(pr.condition, field, args="views, own, remaining=0")
    fn.__globals__.update(_E=_EMPTY)
    return fn


def packet_rule(rule_id: str) -> tuple[PacketRule, Callable]:
    """The declared single-packet rule `rule_id` and its compiled condition."""
    pr = next(p for p in PACKET_RULES if p.rule_id == rule_id)
    return pr, compile_condition(pr)
