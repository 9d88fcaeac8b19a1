"""Crafting resolver exchanges: a capture builder (and, later, named scenarios)."""

from .builder import CaptureBuilder  # noqa: F401
