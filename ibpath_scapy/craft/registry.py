"""The scenario registry: named, parameterised capture generators, each declaring the rule IDs
its capture makes `ibpath audit` report (every severity, info included)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .session import ENCAPS, Session


@dataclass(frozen=True)
class Scenario:
    """One generator. `kernel` is the --kernel profile the expectation holds for; `encaps`
    where the scenario's point can be seen (CM-ROCE-GID only exists on RoCEv2); `malformed`
    marks captures whose point is undecodable data (Wireshark calls those frames malformed);
    `program` marks a program's own view (ucma commands, ACM messages: process_scenarios.py),
    not a resolver's, so the stand-in ibacm has no answer to take from it."""

    name: str
    build: Callable[[Session], None]
    rules: frozenset[str]
    kernel: str = "all"
    encaps: tuple[str, ...] = ENCAPS
    malformed: bool = False
    program: bool = False

    @property
    def doc(self) -> str:
        return inspect.cleandoc(self.build.__doc__ or "")

    @property
    def summary(self) -> str:
        return self.doc.split("\n\n")[0].replace("\n", " ")

    @property
    def default_encap(self) -> str:
        return self.encaps[0]

    def write(self, path: str | Path, *, seed: int = 0, encap: str | None = None) -> Path:
        """Write the scenario's capture to path (pcapng)."""
        encap = encap or self.default_encap
        if encap not in self.encaps:
            raise ValueError(f"scenario {self.name} is about {'/'.join(self.encaps)} only, "
                             f"not {encap}")
        s = Session(str(path), seed=seed, encap=encap)
        try:
            self.build(s)
        finally:
            s.close()
        return Path(path)


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, rules: tuple[str, ...] = (), *, kernel: str = "all",
             encaps: tuple[str, ...] = ENCAPS, malformed: bool = False, program: bool = False):
    """Register a generator under a name, with the rule IDs its capture triggers."""
    def deco(fn: Callable[[Session], None]):
        if name in SCENARIOS:
            raise ValueError(f"scenario {name} registered twice")
        SCENARIOS[name] = Scenario(name, fn, frozenset(rules), kernel, encaps, malformed, program)
        return fn
    return deco
