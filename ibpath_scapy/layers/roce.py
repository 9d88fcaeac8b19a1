"""RoCEv2 transport for QP1 MADs: DETH after scapy.contrib.roce's BTH (IBA Vol1 §9.3.3).

BTH, GRH and the RoCEv2 ICRC come from scapy.contrib.roce; this module adds the Datagram
Extended Transport Header that UD SEND packets (all GSI/QP1 MADs) carry, and the MAD binding.
Sources: Linux drivers/infiniband/sw/rxe/rxe_hdr.h, wire-formats.md §4.1.
"""

from scapy.contrib.roce import BTH
from scapy.fields import X3BytesField, XByteField, XIntField
from scapy.packet import Packet, bind_layers

from ..model.expr import Under
from ..model.hints import NextLayer, next_layer_by_hints
from .mad import MAD

UD_SEND_ONLY = 0x64
UD_SEND_ONLY_WITH_IMMEDIATE = 0x65
GSI_QKEY = 0x80010000  # IB_QP1_QKEY
ROCEV2_UDP_PORT = 4791


class DETH(Packet):
    """Datagram Extended Transport Header (8 bytes)."""

    name = "DETH"
    fields_desc = [
        XIntField("q_key", GSI_QKEY),
        XByteField("reserved_32", 0),
        X3BytesField("src_qp", 1),
    ]

    # A GMP answer may come from a QP other than 0/1 but always goes to QP0/QP1
    # (Wireshark's rule too: packet-infiniband.c parse_PAYLOAD).
    payload_hints = [NextLayer(Under("BTH").dqpn <= 1, MAD)]

    def guess_payload_class(self, payload):
        return next_layer_by_hints(self, super().guess_payload_class(payload))


bind_layers(BTH, DETH, opcode=UD_SEND_ONLY)
bind_layers(DETH, MAD, src_qp=1)
bind_layers(DETH, MAD, src_qp=0)
