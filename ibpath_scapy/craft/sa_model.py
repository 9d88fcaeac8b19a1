"""An SA that answers PathRecord queries the way OpenSM 3.3.23 does (wire-formats.md §8), over a
small fabric description, so crafted captures carry the bytes a real subnet would send.

What is modelled, from osm_sa_path_record.c and the real exchange in captures/opensm/:

* methods: Get and GetTable only, anything else → status 0x000C (method/attribute combination);
* ServiceID with one of its two ComponentMask bits → INSUF_COMPS (0x0600); an invalid Rate or
  MTU with its selector and value bits → REQ_INVALID (0x0200); an SGID or DGID not in the
  fabric → INVALID_GID (0x0500); a Get with no matching path → NO_RECORDS (0x0300), a GetTable
  with none → an empty GetTableResp with status 0 (capture query 6);
* every (SLID, DLID) pair of the two ports (LMC), same-offset pairs first, preference 0 for
  them and 2 for the others (the real capture; §8's "0 for the first pair" is not what 3.3.23
  does with LMC 1);
* Reversible is computed per LID pair (the fabric says which pairs have no reverse path); with
  the Reversible component and bit 1, irreversible pairs are dropped, with bit 0 it is "don't
  care"; NumbPath is always answered 0;
* MTU, rate and PacketLifeTime with selector 2; PacketLifeTime 0 on loopback; hop limit, flow
  label and QoS class 0; P_Key 0xFFFF unless asked. What a query selects of MTU, rate and
  PacketLifeTime with both bits of a pair (pr_rcv_get_path_parms: greater, less, exactly,
  best) is not modelled: such a query is refused with a ValueError rather than answered
  wrongly, but for "largest/smallest available" (3), which disqualifies no path; half a pair
  is answered with the fabric's values, as OpenSM does (tests/test_opensm_oracle.py);
* Get → one record (GetResp, AttributeOffset 8, RMPP inactive); GetTable → every record,
  NumbPath per port pair when its component is set, segmented by RMPP as the kernel's SAR does;
  an error is the request MAD sent back with the status set (osm_sa_send_error).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from ..layers.mad import ATTR_PATH_RECORD, MAD, MAD_HDR_SIZE, MAD_SIZE, MAD_STATUS, METHOD_GET, \
    METHOD_GET_TABLE, RMPP_HDR_SIZE, SA_STATUS
from ..layers.sa import PATH_RECORD_SIZE, SA_MAD_HDR_SIZE, PathRecord, SAHeader, selector_pairs
from ..model.layout import field_offset
from ..facts.rmpp import segment

# The status codes the model answers with, by their names in layers/mad.py (wire-formats.md
# §1: the common bits, and the SA's class codes << 8)
_SA_CODE = {name: code for code, name in SA_STATUS.items()}
STATUS_OK = next(code for code, text in MAD_STATUS.items() if text == "success")
STATUS_UNSUP_METHOD_ATTR = next(code for code, text in MAD_STATUS.items()
                                if text == "method/attribute combination not supported")
STATUS_REQ_INVALID = _SA_CODE["REQ_INVALID"]
STATUS_NO_RECORDS = _SA_CODE["NO_RECORDS"]
STATUS_INVALID_GID = _SA_CODE["INVALID_GID"]
STATUS_INSUF_COMPS = _SA_CODE["INSUF_COMPS"]

# where the model edits an answer's bytes: the MAD's status, the RMPP header, AttributeOffset
_OFF_STATUS = field_offset(MAD, "status")
_OFF_RMPP = MAD_HDR_SIZE
_OFF_ATTR_OFFSET = MAD_HDR_SIZE + RMPP_HDR_SIZE + field_offset(SAHeader, "attribute_offset")
_VALID_MTU = range(1, 6)
_VALID_RATE = range(2, 23)  # IB_MIN_RATE .. IB_MAX_RATE of OpenSM 3.3.23
_BEST = 3  # the selector "largest available" ("smallest" for PacketLifeTime)


def _bit(mask: int, n: int) -> bool:
    return bool(mask >> n & 1)


@dataclass(frozen=True)
class Port:
    """An end port: its GID, base LID, LMC (2**lmc LIDs) and the MTU code of its link."""

    name: str
    gid: str
    lid: int
    lmc: int = 0
    mtu: int = 4

    @property
    def lids(self) -> range:
        return range(self.lid, self.lid + (1 << self.lmc))


@dataclass
class Fabric:
    """What OpenSM knows: ports, link rate, PacketLifeTime, and routing facts the scenarios set.

    `irreversible` holds (SLID, DLID) pairs whose reverse route cannot be computed (so their
    records carry Reversible 0); `sl` maps (SGID, DGID) to the SL the QoS policy gives that
    direction (0 otherwise)."""

    ports: list[Port]
    rate: int = 3
    packet_life_time: int = 18
    irreversible: set[tuple[int, int]] = field(default_factory=set)
    sl: dict[tuple[str, str], int] = field(default_factory=dict)

    def port_by_gid(self, gid: str) -> Port | None:
        want = ipaddress.IPv6Address(gid)
        return next((p for p in self.ports if ipaddress.IPv6Address(p.gid) == want), None)

    def port_by_lid(self, lid: int) -> Port | None:
        return next((p for p in self.ports if lid in p.lids), None)


class SAModel:
    """Answers request MADs (bytes, 256) with the response MADs OpenSM would write."""

    def __init__(self, fabric: Fabric):
        self.fabric = fabric

    # -- the records ---------------------------------------------------------------------------
    def record(self, src: Port, dst: Port, slid: int, dlid: int, pkey: int = 0xFFFF,
               service_id: int = 0) -> PathRecord:
        """The record OpenSM builds for one LID pair (pr_rcv_build_pr)."""
        f = self.fabric
        loopback = src is dst
        return PathRecord(
            service_id=service_id, dgid=dst.gid, sgid=src.gid, dlid=dlid, slid=slid,
            reversible=0 if (slid, dlid) in f.irreversible else 1, numb_path=0, pkey=pkey,
            sl=f.sl.get((src.gid, dst.gid), 0), mtu_selector=2, mtu=min(src.mtu, dst.mtu),
            rate_selector=2, rate=f.rate, packet_life_time_selector=2,
            packet_life_time=0 if loopback else f.packet_life_time,
            preference=0 if slid - src.lid == dlid - dst.lid else 2)

    @staticmethod
    def lid_pairs(src: Port, dst: Port) -> list[tuple[int, int]]:
        """Same-offset pairs first, then the others, as OpenSM 3.3.23 lists them."""
        same = [(s, d) for s, d in zip(src.lids, dst.lids)]
        other = [(s, d) for s in src.lids for d in dst.lids if (s, d) not in same]
        return same + other

    def paths(self, query: PathRecord, mask: int, method: int) -> tuple[int, list[PathRecord]]:
        """(status, records) for a PathRecord query with this ComponentMask."""
        f = self.fabric
        if method not in (METHOD_GET, METHOD_GET_TABLE):
            return STATUS_UNSUP_METHOD_ATTR, []
        if _bit(mask, 0) != _bit(mask, 1):
            return STATUS_INSUF_COMPS, []
        if _bit(mask, 18) and _bit(mask, 19) and query.rate not in _VALID_RATE:
            return STATUS_REQ_INVALID, []
        if _bit(mask, 16) and _bit(mask, 17) and query.mtu not in _VALID_MTU:
            return STATUS_REQ_INVALID, []
        selected = [v for v, sel, vbit, sbit in selector_pairs()
                    if _bit(mask, vbit) and _bit(mask, sbit) and getattr(query, sel) != _BEST]
        if selected:
            raise ValueError(f"the SA model does not select paths by {', '.join(selected)} "
                             "(both ComponentMask bits of the pair set): OpenSM's "
                             "pr_rcv_get_path_parms is not modelled")
        srcs, dsts = list(f.ports), list(f.ports)
        if _bit(mask, 3):
            p = f.port_by_gid(query.sgid)
            if p is None:
                return STATUS_INVALID_GID, []
            srcs = [p]
        if _bit(mask, 2):
            p = f.port_by_gid(query.dgid)
            if p is None:
                return STATUS_INVALID_GID, []
            dsts = [p]
        pkey = query.pkey if _bit(mask, 13) else 0xFFFF
        sid = query.service_id if _bit(mask, 0) else 0
        per_pair = query.numb_path & 0x7F if method == METHOD_GET_TABLE and _bit(mask, 12) else None
        out = []
        for dst in dsts:
            for src in srcs:
                got = []
                for slid, dlid in self.lid_pairs(src, dst):
                    if _bit(mask, 5) and slid != query.slid or _bit(mask, 4) and dlid != query.dlid:
                        continue
                    rec = self.record(src, dst, slid, dlid, pkey, sid)
                    if _bit(mask, 11) and query.reversible and not rec.reversible:
                        continue
                    if _bit(mask, 15) and rec.sl != query.sl:
                        continue
                    got.append(rec)
                out += got if per_pair is None else got[:per_pair]
        if method == METHOD_GET:
            return (STATUS_OK, out[:1]) if out else (STATUS_NO_RECORDS, [])
        return STATUS_OK, out

    # -- the MADs ------------------------------------------------------------------------------
    def respond(self, request: bytes) -> list[bytes]:
        """The response MADs (one, or the RMPP segments of a GetTableResp) to one request."""
        req = MAD(request)
        sa = req.getlayer("SAHeader")
        if req.attribute_id != ATTR_PATH_RECORD or sa is None:
            raise ValueError("the SA model answers PathRecord queries only")
        mask = sa.component_mask or 0
        query = sa.records[0] if sa.records else PathRecord(bytes(PATH_RECORD_SIZE))
        status, records = self.paths(query, mask, req.method)
        return self.response(request, status, records)

    @staticmethod
    def response(request: bytes, status: int, records: list[PathRecord]) -> list[bytes]:
        """osm_sa_respond: the request's 56-byte header with method | 0x80 (a Set answers as
        GetResp), SM_Key 0 and AttributeOffset 8 (0 without records); GetTableResp with data
        goes out in RMPP segments, a GetResp in one MAD. An error (osm_sa_send_error) is the
        whole request MAD sent back, its data included, with the status set."""
        method = request[3]
        resp_method = (METHOD_GET if method == 0x02 else method) | 0x80
        if status:
            mad = bytearray(request[:MAD_SIZE].ljust(MAD_SIZE, b"\0"))
            mad[3] = resp_method
            mad[_OFF_STATUS:_OFF_STATUS + 2] = status.to_bytes(2, "big")
            mad[36:44] = bytes(8)  # SM_Key: always 0 in a response (C15-0.1.5)
            if method == METHOD_GET_TABLE:
                mad[_OFF_ATTR_OFFSET:_OFF_ATTR_OFFSET + 2] = bytes(2)
            return [bytes(mad)]
        hdr = bytearray(request[:SA_MAD_HDR_SIZE])
        hdr[3] = resp_method
        hdr[_OFF_RMPP:_OFF_RMPP + RMPP_HDR_SIZE] = bytes(RMPP_HDR_SIZE)
        hdr[36:44] = bytes(8)
        hdr[_OFF_ATTR_OFFSET:_OFF_ATTR_OFFSET + 2] = (8 if records else 0).to_bytes(2, "big")
        data = b"".join(bytes(r) for r in records)
        if method == METHOD_GET_TABLE:
            return segment(bytes(hdr) + data)
        mad = bytes(hdr) + data[:PATH_RECORD_SIZE]
        return [mad + bytes(MAD_SIZE - len(mad))]
