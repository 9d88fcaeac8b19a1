"""Optional dependencies: the verbs that need one import it here, and a missing one is named
with the extra that brings it, instead of an ImportError's traceback."""

from __future__ import annotations

import importlib
from types import ModuleType

# the extra of each optional module (pyproject.toml, [project.optional-dependencies])
EXTRAS = {"pyarrow": "fleet", "pyarrow.parquet": "fleet", "duckdb": "fleet",
          "distributed": "fleet"}


class MissingExtra(Exception):
    """An optional dependency is not installed; the message says what needs it and the pip
    command that brings it."""


def need(module: str, what: str) -> ModuleType:
    """Import `module` for `what` (e.g. "--format parquet"), or raise MissingExtra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = EXTRAS.get(module, "fleet")
        raise MissingExtra(
            f"{what} needs {module.split('.')[0]}, which is not installed ({exc}): "
            f"pip install 'ibpath_scapy[{extra}]'") from None
