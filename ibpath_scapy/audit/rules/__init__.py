"""The rule catalogue (audit-rules.md), one module per family; importing this package
registers every rule in ibpath_scapy.audit.model.RULES (a duplicate ID fails the import)."""

from . import blob, capture, cm, frame, ls, resolver, sa  # noqa: F401
