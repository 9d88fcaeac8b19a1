"""Resolver rules (audit-rules.md "Resolver rules"): one resolution at a time."""
