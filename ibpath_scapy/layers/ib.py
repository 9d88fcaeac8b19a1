"""Native InfiniBand framing: LRH (IBA Vol1 §7.7), ERF records as ibdump writes them, and
Wireshark's exported-PDU framing (pcap link type 252).

Sources: Mellanox ibdump set_pcap_header (ERF type 21 under DLT_ERF 197), Wireshark
exported_pdu_tlvs.h, wire-formats.md §4.2-4.3.
"""

import struct

from scapy.config import conf
from scapy.contrib.roce import BTH, GRH
from scapy.fields import (
    BitEnumField,
    BitField,
    FCSField,
    FieldLenField,
    FlagsField,
    LELongField,
    PacketListField,
    ShortEnumField,
    ShortField,
    StrLenField,
    XBitField,
)
from scapy.packet import Packet, Raw, bind_layers

from ..model import crc, crcspec
from .coded import CheckedBits, LIDField

LINKTYPE_ERF = 197
LINKTYPE_INFINIBAND = 247
LINKTYPE_WIRESHARK_UPPER_PDU = 252

LNH_VALUES = {0: "Raw", 1: "IP non-IBA", 2: "IBA local", 3: "IBA global"}
LNH_IBA_LOCAL = 2
LNH_IBA_GLOBAL = 3
GRH_NEXT_HEADER_IBA = 0x1B

ERF_TYPES = {21: "InfiniBand", 25: "InfiniBand link", 2: "Ethernet"}
ERF_TYPE_INFINIBAND = 21
ERF_HDR_SIZE = 16


class LRH(CheckedBits, Packet):
    """Local Route Header (8 bytes); the packet's VCRC is its trailer.

    icrc/vcrc of a built packet are computed when left as None (native-IB ICRC: VL, GRH
    TClass/FlowLabel/HopLmt and BTH Resv8a taken as all ones; IBA Vol1 §7.8).
    """

    name = "LRH"
    fields_desc = [
        BitField("vl", 0, 4),
        BitField("lver", 0, 4),
        BitField("sl", 0, 4),
        XBitField("reserved_10", 0, 2),
        BitEnumField("lnh", LNH_IBA_LOCAL, 2, LNH_VALUES),
        LIDField("dlid", 0),
        XBitField("reserved_32", 0, 5),
        BitField("pkt_len", None, 11),
        LIDField("slid", 0),
        FCSField("vcrc", None, fmt="<H"),
    ]

    def do_build_payload(self):
        bth = self.payload.getlayer(BTH) if self.payload else None
        self._icrc_pending = bth is not None and bth.icrc is None
        if not self._icrc_pending:
            return super().do_build_payload()
        bth.icrc = 0  # scapy's ICRC code is RoCEv2-only; the native one is applied in post_build
        try:
            return super().do_build_payload()
        finally:
            bth.icrc = None

    def post_build(self, p, pay):
        body = (p + pay)[:-2]  # pay ends with the 2 bytes reserved for the VCRC
        grh = self.payload if isinstance(self.payload, GRH) else None
        if grh is not None and len(body) >= 8 + 40:
            # scapy.contrib.roce's GRH defaults PayLen and NxtHdr to 0; a GRH under an LRH
            # gets what the kernel gives a built header (ud_header.c ib_ud_header_init) unless
            # the user set them: PayLen = BTH..ICRC rounded up to 4 bytes, NxtHdr 0x1B.
            b = bytearray(body)
            if "paylen" not in grh.fields:
                b[12:14] = struct.pack("!H", (len(body) - 48 + 3) & ~3)
            if "nexthdr" not in grh.fields:
                b[14] = GRH_NEXT_HEADER_IBA
            body = bytes(b)
        if self.pkt_len is None:
            words = len(body) // 4  # LRH..ICRC; the VCRC is not counted
            v = (struct.unpack("!H", body[4:6])[0] & 0xF800) | (words & 0x7FF)
            body = body[:4] + struct.pack("!H", v) + body[6:]
        if getattr(self, "_icrc_pending", False):
            body = body[:-4] + crc.native_icrc(body)
        vcrc = crc.vcrc(body) if self.vcrc is None else self.vcrc
        return body + struct.pack("<H", vcrc)


class ERFExtension(Packet):
    name = "ERF extension header"
    fields_desc = [
        BitField("more", 0, 1),
        BitField("ext_type", 0, 7),
        XBitField("data", 0, 56),
    ]

    def extract_padding(self, s):
        return b"", s


class ERF(Packet):
    """ERF record header (16 bytes) as ibdump writes it (Endace ERF; type 21 = InfiniBand).

    ts is little-endian 32.32 fixed point; rlen may include padding past the packet.
    """

    name = "ERF"
    fields_desc = [
        LELongField("ts", 0),
        BitField("ext", 0, 1),
        BitEnumField("type", ERF_TYPE_INFINIBAND, 7, ERF_TYPES),
        FlagsField("flags", 4, 8, ["if0", "if1", "vlen", "trunc", "rxerr", "dserror", "res6", "res7"]),
        ShortField("rlen", None),
        ShortField("lctr", 0),
        ShortField("wlen", None),
        PacketListField(
            "extensions", [], ERFExtension, next_cls_cb=lambda pkt, lst, cur, remain: (
                ERFExtension if (pkt.ext if cur is None else cur.more) else None
            )
        ),
    ]

    def extract_padding(self, s):
        # rlen rounds records up to 8 bytes; wlen is the packet itself.
        if self.wlen is not None and self.wlen < len(s):
            return s[:self.wlen], s[self.wlen:]
        return s, b""

    def post_build(self, p, pay):
        if self.wlen is None:
            p = p[:14] + struct.pack("!H", len(pay)) + p[16:]
        if self.rlen is None:
            p = p[:10] + struct.pack("!H", len(p) + len(pay)) + p[12:]
        return p + pay

    @staticmethod
    def ts_of(t: float) -> int:
        """The ts field (32.32 fixed point) of t seconds since the epoch."""
        sec = int(t)
        return (sec << 32) | int(round((t - sec) * (1 << 32))) & 0xFFFFFFFF

    @classmethod
    def from_time(cls, t: float, **kw):
        """An ERF header whose timestamp is t seconds since the epoch."""
        return cls(ts=cls.ts_of(t), **kw)

    def timestamp(self) -> float:
        return (self.ts >> 32) + (self.ts & 0xFFFFFFFF) / (1 << 32)


EXP_PDU_TAGS = {
    0: "end of options",
    12: "dissector name",
    13: "heuristic dissector name",
    14: "dissector table name",
    20: "IPv4 src",
    21: "IPv4 dst",
    22: "IPv6 src",
    23: "IPv6 dst",
    30: "original frame number",
    32: "dissector table value",
    33: "protocol column text",
    36: "info column text",
}
EXP_PDU_TAG_END = 0
EXP_PDU_TAG_DISSECTOR_NAME = 12
EXP_PDU_TAG_COL_PROT_TEXT = 33


class ExportedPDUTag(Packet):
    """One TLV of Wireshark's exported-PDU header; values are padded to 4 bytes."""

    name = "Exported PDU tag"
    fields_desc = [
        ShortEnumField("tag", EXP_PDU_TAG_END, EXP_PDU_TAGS),
        FieldLenField("length", None, length_of="value", fmt="!H",
                      adjust=lambda pkt, x: (x + 3) & ~3),
        StrLenField("value", b"", length_from=lambda pkt: pkt.length),
    ]

    def post_build(self, p, pay):
        pad = (-len(self.value)) % 4 if self.length is None else 0
        return p + b"\x00" * pad + pay

    def extract_padding(self, s):
        return b"", s

    def text(self) -> str:
        return self.value.rstrip(b"\x00").decode("ascii", "replace")


# Content dissector names → layer for the PDU (Wireshark's own name for native IB is
# "infiniband"; ibpath's blob layer registers itself here too).
EXPORTED_PDU_DISSECTORS: dict[str, type] = {}


class ExportedPDU(Packet):
    """Wireshark upper-PDU export framing (LINKTYPE_WIRESHARK_UPPER_PDU, 252)."""

    name = "Exported PDU"
    fields_desc = [
        PacketListField(
            "tags", [], ExportedPDUTag,
            # scapy hands the tag just read as `cur` (not yet in lst)
            next_cls_cb=lambda pkt, lst, cur, remain: (
                None if (cur is not None and cur.tag == EXP_PDU_TAG_END) or len(remain) < 4
                else ExportedPDUTag
            ),
        ),
    ]

    def dissector_name(self) -> str | None:
        for t in self.tags:
            if t.tag == EXP_PDU_TAG_DISSECTOR_NAME:
                return t.text()
        return None

    def guess_payload_class(self, payload):
        return EXPORTED_PDU_DISSECTORS.get(self.dissector_name() or "", Raw)

    @classmethod
    def for_dissector(cls, name: str):
        return cls(tags=[
            ExportedPDUTag(tag=EXP_PDU_TAG_DISSECTOR_NAME, value=name.encode()),
            ExportedPDUTag(tag=EXP_PDU_TAG_END),
        ])


EXPORTED_PDU_DISSECTORS["infiniband"] = LRH

crcspec.register_lrh(LRH, LNH_IBA_GLOBAL)
bind_layers(ERF, LRH, type=ERF_TYPE_INFINIBAND)
bind_layers(LRH, BTH, lnh=LNH_IBA_LOCAL)
bind_layers(LRH, GRH, lnh=LNH_IBA_GLOBAL)

conf.l2types.register(LINKTYPE_ERF, ERF)
conf.l2types.register(LINKTYPE_INFINIBAND, LRH)
conf.l2types.register(LINKTYPE_WIRESHARK_UPPER_PDU, ExportedPDU)
