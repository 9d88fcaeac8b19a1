"""Builders that put a MAD on the wire: RoCEv2 (what rxe sends), native IB (LRH..VCRC), and
the ERF and exported-PDU records captures store them in.

The layers do the packing and CRCs; these helpers only choose the usual header values for a
GSI (QP0/QP1) datagram. The frame builders (rocev2_frame, native_ib_frame) return a Scapy
Packet, as every layer does (`bytes()` of it is the frame); the record builders (erf_record,
exported_pdu) take a frame as a Packet or bytes and return the record's bytes, ready for a
capture writer.
"""

from __future__ import annotations

from scapy.contrib.roce import BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from ..layers.ib import ERF, LRH, ExportedPDU
from ..layers.mad import MAD
from ..layers.roce import DETH, GSI_QKEY, ROCEV2_UDP_PORT, UD_SEND_ONLY


def _mad_layer(mad: bytes | Packet) -> Packet:
    return MAD(mad) if isinstance(mad, (bytes, bytearray)) else mad


def udp_sport_for_flow_label(flow_label: int) -> int:
    """Kernel rdma_flow_label_to_udp_sport(): RoCEv2 source port from a flow label."""
    fl_low = flow_label & 0x3FFF
    fl_low ^= (flow_label & 0xFC000) >> 14
    return fl_low | 0xC000


def rocev2_frame(mad: bytes | Packet, *, src: str, dst: str, smac: str = "02:00:00:00:00:01",
                 dmac: str = "02:00:00:00:00:02", dqpn: int = 1, sqpn: int = 1, psn: int = 0,
                 pkey: int = 0xFFFF, qkey: int = GSI_QKEY, flow_label: int = 0) -> Packet:
    """Ether/IP(v6)/UDP/BTH/DETH/MAD with the ICRC computed."""
    ip = IPv6(src=src, dst=dst) if ":" in src else IP(src=src, dst=dst, flags="DF")
    return (Ether(src=smac, dst=dmac) / ip
            / UDP(sport=udp_sport_for_flow_label(flow_label), dport=ROCEV2_UDP_PORT, chksum=0)
            / BTH(opcode=UD_SEND_ONLY, pkey=pkey, dqpn=dqpn, psn=psn)
            / DETH(q_key=qkey, src_qp=sqpn) / _mad_layer(mad))


def native_ib_frame(mad: bytes | Packet, *, slid: int, dlid: int, sl: int = 0, dqpn: int = 1,
                    sqpn: int = 1, qkey: int = GSI_QKEY, pkey: int = 0xFFFF, psn: int = 0) -> Packet:
    """LRH/BTH/DETH/MAD of a local-route GSI datagram (QP0 travels on VL15); ICRC and VCRC
    are computed when it is built."""
    vl = 15 if dqpn == 0 else 0
    return (LRH(vl=vl, sl=sl, dlid=dlid, slid=slid)
            / BTH(opcode=UD_SEND_ONLY, pkey=pkey, dqpn=dqpn, psn=psn)
            / DETH(q_key=qkey, src_qp=sqpn) / _mad_layer(mad))


def erf_record(frame: bytes | Packet, ts: float) -> bytes:
    """An ERF type-21 record as ibdump writes it (DLT_ERF, 197)."""
    return bytes(ERF.from_time(ts, flags=4) / Raw(bytes(frame)))


def exported_pdu(payload: bytes | Packet, dissector: str) -> bytes:
    """A link-type-252 record carrying payload for the named Wireshark dissector."""
    return bytes(ExportedPDU.for_dissector(dissector) / Raw(bytes(payload)))
