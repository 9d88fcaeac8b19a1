"""RDMA netlink local-service rules (audit-rules.md RES-LS-*): one LS exchange at a time."""
