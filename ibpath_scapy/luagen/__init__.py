"""Scapy layers → Wireshark Lua dissector.

`model` reads layer classes, `emit` writes Lua from the models, `plugin` says which layers,
rules and runtime make up dissector/ibpath.lua. The generator is generic: any Scapy layer
whose fields are fixed-size, or whose lambdas are declared as hints (ibpath_scapy.model.hints),
can be turned into a dissector with `emit.generate(Spec(...))`.
"""

from .emit import Spec, generate  # noqa: F401
from ..model.layout import GeneratorError  # noqa: F401
