"""One `ibpath resolve`: the seed's resolver (craft/resolver.py SeedResolver) asking a LiveSA,
the path array it hands over, and what every kernel profile takes from it.

Layouts (kernel.LAYOUTS):

* auto: the seed's algorithm as written. A reversible forward answer is handed over as one
  0x2b record, which every profile takes; otherwise the resolver asks a reversible GMP path
  and the return path and hands three records: in the compatible order (0x0a, 0x12, 0x2b)
  for the kernels of today, which take the last, or, for the seed's proposed kernel
  (--kernel proposal), in the order that kernel reads (0x03, 0x0a, 0x12).
* single: one 0x2b record of the forward answer, whatever it is (no follow-up query).
* seed: the three records 0x0a, 0x12, 0x2b whatever the forward answer; the return record is
  the answer to the swapped query, the 0x2b record the reversible GMP path (the forward answer
  itself when it is reversible, else the answer to the Reversible query).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..craft.resolver import SeedResolver
from ..facts.kernelview import KernelChoice, blob_from_bytes, kernel_view
from ..layers.pathdata import PathArray, PathRecData
from ..layers.sa import PathRecord
from .kernel import SEED, SEED_NATIVE, SINGLE, KernelTarget
from .live import LiveAnswer, LiveSA

LAYOUT_CHOICES = ("auto", SINGLE, SEED)
_FLAGS_LAYOUT = {(0x2B,): SINGLE, (0x0A, 0x12, 0x2B): SEED, (0x03, 0x0A, 0x12): SEED_NATIVE}

# exit statuses: a blob; the SA answered with an error (or something that is no answer);
# no SA answer at all, or the SA could not be asked
EXIT_OK, EXIT_SA_ERROR, EXIT_NO_SA = 0, 1, 2


def resolver_for(sa: LiveSA, layout: str, profile: str) -> SeedResolver:
    """The SeedResolver a layout asks for (see the module docstring)."""
    if layout == SINGLE:
        return SeedResolver(sa, followups=False)
    if layout == SEED:
        return SeedResolver(sa, split=True)
    return SeedResolver(sa, compat=profile != "proposal")


@dataclass
class Outcome:
    """What one resolution gave: the transactions (in order), the records handed over (None
    when an SA error stopped it), their path array, and each profile's view of it."""

    sgid: str
    dgid: str
    layout_asked: str
    target: KernelTarget
    answers: list[LiveAnswer] = field(default_factory=list)
    records: list[tuple[int, PathRecord]] | None = None
    blob: bytes = b""
    views: dict[str, KernelChoice] = field(default_factory=dict)

    @property
    def layout(self) -> str | None:
        """The layout of the records handed over, by its name."""
        if self.records is None:
            return None
        return _FLAGS_LAYOUT.get(tuple(f for f, _ in self.records), "other")

    @property
    def failed(self) -> LiveAnswer | None:
        """The first transaction the SA answered with an error status."""
        return next((a for a in self.answers if a.status), None)

    @property
    def exit_status(self) -> int:
        return EXIT_OK if self.records is not None else EXIT_SA_ERROR

    def role_of(self, index: int) -> str:
        """Which answer a record of the blob is (forward, gmp, return), by identity."""
        rec = self.records[index][1]
        return next((a.role for a in self.answers if a.record is rec), "?")


def resolve(sa: LiveSA, layout: str, target: KernelTarget) -> Outcome:
    """Run the resolver against `sa`. SATimeout and BadAnswer propagate."""
    res = resolver_for(sa, layout, target.profile).resolve()
    out = Outcome(sa.sgid, sa.dgid, layout, target, list(sa.answers), res.records)
    if res.records is not None:
        out.blob = bytes(PathArray(records=[PathRecData(flags=f, path_record=r)
                                            for f, r in res.records]))
        out.views = kernel_view(blob_from_bytes(out.blob))
    return out
