"""Frame times as pcapio gives them, from tshark's seconds.nanoseconds and the file's own
interfaces (pcapio.Interfaces)."""

from __future__ import annotations


from ...capture.pcapio import Interfaces, PCAP_MAGICS, sniff_format


# --------------------------------------------------------------------------------------------
# Time: the float pcapio computes, from tshark's seconds.nanoseconds
# --------------------------------------------------------------------------------------------

class _Clock:
    """Timestamps as pcapio.read_frames gives them (decode.py rounds them to 9 places), from
    the interfaces pcapio reads (pcapio.Interfaces: a pcap's header, a pcapng's IDBs on
    demand; sections count from 1 and interfaces from 0 in each section, as tshark's
    frame.section_number/interface_id do)."""

    def __init__(self, path: str, head: bytes):
        self.kind = sniff_format(head)
        self.res = PCAP_MAGICS[head[:4]][1] if self.kind == "pcap" else None
        self._ng = Interfaces(path) if self.kind == "pcapng" else None
        self._pcap_linktype = None
        if self.kind == "pcap":
            with Interfaces(path) as interfaces:
                pcap = interfaces.get()
            self._pcap_linktype = pcap.linktype if pcap is not None else None

    def linktype(self, section: int, iface: int) -> int | None:
        """The link type pcapio gives the frame (None where the file does not say)."""
        if self._ng is not None:
            known = self._ng.get(section, iface)
            return known.linktype if known is not None else None
        return self._pcap_linktype

    def time(self, epoch: str, section: int, iface: int) -> float:
        sec_text, _, frac = epoch.partition(".")
        sec, ns = int(sec_text), int((frac + "000000000")[:9])
        if self.kind == "pcap":
            return sec + (ns // 1000 if self.res == 1e-6 else ns) * self.res
        if self._ng is not None:
            known = self._ng.get(section, iface)
            units, res = (known.units, known.resolution) if known is not None else (10 ** 6, 1e-6)
            if units <= 10 ** 9:
                ticks = sec * units + -(-ns * units // 10 ** 9)
            else:
                ticks = sec * units + ns * units // 10 ** 9
            return ticks * res
        return sec + ns * 1e-9

    def close(self) -> None:
        if self._ng is not None:
            self._ng.close()


