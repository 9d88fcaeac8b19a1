"""Findings, the rule registry and what a rule is given to look at."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Callable, Iterator

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    file: str
    frames: tuple[int, ...]
    message: str
    resolution: str | None = None  # "local GID > remote GID pkey 0x…" when the finding has one

    def as_dict(self) -> dict:
        d = {"rule": self.rule, "severity": self.severity, "file": self.file,
             "frames": list(self.frames), "message": self.message}
        if self.resolution:
            d["resolution"] = self.resolution
        return d


@dataclass
class Rule:
    """One entry of the catalogue (audit-rules.md): ID, default severity, source, and its
    checks by family (what a check is given: a frame's decoded record, a blob, an SA
    transaction, a resolution, a CM REQ, an LS exchange, a capture's process time lines).
    The first check's docstring documents the rule."""

    rule_id: str
    severity: str
    source: str
    checks: dict[str, Callable[..., Iterator[tuple]]] = field(default_factory=dict)

    @property
    def doc(self) -> str:
        for fn in self.checks.values():
            if fn.__doc__:
                return fn.__doc__.strip()
        return ""

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else ""


class _Catalogue(dict):
    """The rule registry, by ID. Reading it loads the rule modules (ibpath_scapy.audit.rules)
    first, so whoever reads it sees every rule, whatever it imported before; the `rule`
    decorator registers through dict's own methods, which load nothing."""

    _loading = False

    def _load(self) -> None:
        if not _Catalogue._loading:
            _Catalogue._loading = True
            import_module(f"{__package__}.rules")

    def __getitem__(self, key):
        self._load()
        return dict.__getitem__(self, key)

    def __iter__(self):
        self._load()
        return dict.__iter__(self)

    def __len__(self):
        self._load()
        return dict.__len__(self)

    def __contains__(self, key):
        self._load()
        return dict.__contains__(self, key)

    def get(self, key, default=None):
        self._load()
        return dict.get(self, key, default)

    def keys(self):
        self._load()
        return dict.keys(self)

    def values(self):
        self._load()
        return dict.values(self)

    def items(self):
        self._load()
        return dict.items(self)


RULES: dict[str, Rule] = _Catalogue()
FAMILIES = ("frame", "blob", "transaction", "resolution", "cm", "ls", "process")


def rule(rule_id: str, severity: str, family: str, source: str):
    """Register a check under a stable ID. The check yields (frames, message) pairs, or
    (frames, message, severity) where audit-rules.md lowers one finding's severity; a
    transaction check (asked of every SA transaction of a storm) returns them in a list
    instead, or () when it finds nothing, as a generator made per call costs more. A rule
    may have one check per family (a packet rule also checked across a transaction); the same
    ID twice in one family, or with two severities, fails at import."""
    if severity not in SEVERITIES:
        raise ValueError(f"{rule_id}: unknown severity {severity!r}")
    if family not in FAMILIES:
        raise ValueError(f"{rule_id}: unknown family {family!r}")

    def deco(fn):
        r = dict.get(RULES, rule_id)
        if r is None:
            r = Rule(rule_id, severity, source)
            dict.__setitem__(RULES, rule_id, r)
        elif family in r.checks or r.severity != severity:
            raise ValueError(f"rule {rule_id} registered twice for {family} "
                             f"({fn.__module__}.{fn.__name__})")
        r.checks[family] = fn
        return fn

    return deco


@dataclass
class AuditOptions:
    kernel: str = "all"  # a kernelview.PROFILE_NAMES profile or all
    extra_blobs: list = field(default_factory=list)  # paths given with --blob
    # keep every closed SA transaction whole in the replay (Replay.done); without (the CLI),
    # memory does not grow with the capture's length (Replay's docstring)
    keep_transactions: bool = True
    # without keep_transactions: draw each transaction's ladder messages as it is let go
    # (Replay.arrows), for ladder diagrams at ~0.2 KB a frame
    ladder_arrows: bool = False
    # after each file's audit, read where the capture was made and the times of its findings'
    # first frames (FileAudit.origin, .times): what the Parquet tables add to the findings
    tables: bool = False
    # without keep_transactions (the CLI's): once the resolution rules judged a resolution,
    # keep none of its transactions in memory: folded into the counts the reports read
    # (Resolution.fold) where no ladder is drawn, else left in the replay's Spill file for
    # the ladders to read back one resolution at a time (ladder.iter_ladders). The audit's
    # memory then follows neither the capture's length nor its number of pairs (issue 45)
    stream_resolutions: bool = False
