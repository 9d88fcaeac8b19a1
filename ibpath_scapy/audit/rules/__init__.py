"""The rule catalogue, one module per family. ibpath_scapy.audit.model.RULES imports this
package the first time it is read, and each module registers its rules there (a duplicate ID
fails the import)."""

from . import blob, capture, cm, frame, ls, process, resolver, sa  # noqa: F401
