"""ibpath: InfiniBand / RoCE path-resolution layers, decoder and auditor.

``from ibpath_scapy import *`` gives every layer, bound for dissection and building.
"""

__version__ = "0.1.0"

from .layers import *  # noqa: F401,F403
from .layers import __all__ as _layers_all

__all__ = list(_layers_all)
