"""Crafting resolver exchanges: a capture builder, an OpenSM-like SA model, resolver models
and the named scenarios `ibpath craft` writes (scenarios.py, listed in SCENARIOS)."""

from .builder import CaptureBuilder  # noqa: F401
