"""CM rules (audit-rules.md "CM rules"): CM REQs against the paths the kernel took."""
