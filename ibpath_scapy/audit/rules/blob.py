"""Blob rules (audit-rules.md "Blob rules"): one kernel-bound path array at a time."""
