"""Deterministic benchmark inputs, built with the project's layers.

capture1: RoCEv2, `mad_share` of the frames QP1 MADs (SA PathRecord queries and answers, CM
REQ/REP/RTU), the rest RC RDMA WRITE / SEND / ACK data frames. capture2: SA PathRecord queries
and their (mostly multi-segment RMPP GetTableResp) answers only. Either can be written as
native InfiniBand instead (encap="ib"): the same packets from the BTH on, behind an LRH and
with native ICRC and VCRC, in ERF records as ibdump writes them (link type 197). A pool of distinct frames is
built once with Scapy and written cyclically, so a million frames take seconds; every pass
over the pool has transaction IDs of its own (_cycle), so the paths of the same pairs are
asked again in new transactions, not retried.
"""

from __future__ import annotations

import random
from pathlib import Path

from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from ibpath_scapy.model.crc import native_icrc, rocev2_icrc, vcrc
from ibpath_scapy.capture.encap import rocev2_frame
from ibpath_scapy.layers import MAD, RMPP, CMReq, CMRep, CMRtu, PathRecord, SAHeader
from ibpath_scapy.layers.ib import ERF, LINKTYPE_ERF, LRH
from ibpath_scapy.capture.pcapio import PcapWriter
from ibpath_scapy.facts.rmpp import segment

A, B = "192.168.2.24", "192.168.2.25"


def _data_frames(rnd: random.Random, n: int) -> list[bytes]:
    out = []
    for i in range(n):
        op = rnd.choice([0x0A, 0x04, 0x00, 0x01, 0x02, 0x11])  # WRITE_ONLY, SEND_*, ACK
        pay = AETH(syndrome=0, msn=i) if op == 0x11 else Raw(rnd.randbytes(rnd.choice([64, 256, 1024])))
        out.append(bytes(Ether() / IP(src=A, dst=B) / UDP(sport=0xC000 + i % 4096, dport=4791)
                         / BTH(opcode=op, dqpn=0x11 + i % 7, psn=i) / pay))
    return out


def _mad_frames(rnd: random.Random, n: int) -> list[bytes]:
    out = []
    tid = 0x1000
    while len(out) < n:
        tid += 1
        kind = rnd.random()
        if kind < 0.5:
            q = MAD(method=0x12, transaction_id=tid) / RMPP() / SAHeader(records=[PathRecord(  # GetTable
                sgid="fe80::1", dgid=f"fe80::{tid & 0xFFFF:x}", pkey=0xFFFF, numb_path=1,
                reversible=1, service_id=0x0106000000000000 | tid)])
            recs = [PathRecord(sgid="fe80::1", dgid=f"fe80::{tid & 0xFFFF:x}", dlid=tid & 0xBFFF,
                               slid=1, reversible=1, pkey=0xFFFF) for _ in range(rnd.choice([1, 1, 4]))]
            hdr = bytes(MAD(method=0x92, transaction_id=tid) / RMPP(rmpp_version=1, rmpp_type=1)
                        / SAHeader(attribute_offset=8, component_mask=0x380F))[:56]
            out.append(bytes(rocev2_frame(q, src=A, dst=B)))
            out += [bytes(rocev2_frame(MAD(s), src=B, dst=A))
                    for s in segment(hdr + b"".join(bytes(r) for r in recs))]
        else:
            for m in (MAD(mgmt_class=7, method=3, attribute_id=0x10, transaction_id=tid) / CMReq(
                          local_comm_id=tid, primary_local_gid="::ffff:192.168.2.24",
                          primary_remote_gid="::ffff:192.168.2.25"),
                      MAD(mgmt_class=7, method=3, attribute_id=0x13, transaction_id=tid) / CMRep(
                          remote_comm_id=tid),
                      MAD(mgmt_class=7, method=3, attribute_id=0x14, transaction_id=tid) / CMRtu(
                          remote_comm_id=tid)):
                out.append(bytes(rocev2_frame(m, src=A, dst=B)))
    return out[:n]


def _cycle(pool: list[bytes], k: int) -> bytes:
    """The k-th frame of a capture that cycles through `pool` (RoCEv2 MAD frames): every pass
    over the pool gets transaction IDs of its own, as a real SA storm has (a TID seen again
    would be a retry of the same transaction: a pool replayed as is would look like one
    handful of transactions retried thousands of times), with the ICRC made anew."""
    turn, i = divmod(k, len(pool))
    f = pool[i]
    if not turn:
        return f
    mad = len(f) - 4 - 256  # DETH, the MAD, the ICRC end every QP0/QP1 RoCEv2 frame
    tid = (int.from_bytes(f[mad + 8:mad + 16], "big") + (turn << 24)) & (1 << 64) - 1
    f = f[:mad + 8] + tid.to_bytes(8, "big") + f[mad + 16:-4]
    return f + rocev2_icrc(f[14:] + bytes(4))


class _Native:
    """RoCEv2 frames of the pools (Ethernet / IPv4 / UDP / BTH ... ICRC) as ERF records of
    native-IB packets: LRH (LIDs from the IPv4 addresses' last bytes, "IBA local") / the
    same BTH and what follows / native ICRC / VCRC. Headers come from the layers, built once
    per shape; the CRCs are computed per frame with ibpath_scapy.model.crc."""

    def __init__(self):
        self._lrh: dict[tuple, bytes] = {}
        self._erf: dict[int, bytes] = {}

    IP_AT = len(Ether(dst="ff:ff:ff:ff:ff:ff"))  # (a dst given: no neighbour look-up)
    BTH_AT = IP_AT + len(IP()) + len(UDP())

    def __call__(self, f: bytes, t: float) -> bytes:
        ip = self.IP_AT
        payload = f[self.BTH_AT:-4]  # BTH up to the ICRC
        key = (f[ip + 15], f[ip + 19], len(payload))
        lrh = self._lrh.get(key)
        if lrh is None:  # pkt_len counts LRH..ICRC in words
            lrh = self._lrh[key] = bytes(LRH(slid=key[0], dlid=key[1],
                                             pkt_len=(8 + len(payload) + 4) // 4))[:8]
        body = lrh + payload
        body += native_icrc(body + bytes(4))
        pkt = body + vcrc(body).to_bytes(2, "little")
        hdr = self._erf.get(len(pkt))
        if hdr is None:
            hdr = self._erf[len(pkt)] = bytes(ERF(flags=4, wlen=len(pkt), rlen=16 + len(pkt)))[:16]
        return ERF.ts_of(t).to_bytes(8, "little") + hdr[8:] + pkt


def _writer(path: Path, encap: str):
    """(PcapWriter, frame converter) for an encapsulation: "rocev2" (Ethernet) or "ib" (ERF)."""
    if encap == "rocev2":
        return PcapWriter(str(path), 1), lambda f, t: f
    if encap == "ib":
        return PcapWriter(str(path), LINKTYPE_ERF), _Native()
    raise ValueError(f"unknown encapsulation {encap!r}")


def write_capture1(path: Path, frames: int, mad_share: float = 0.05, seed: int = 1,
                   encap: str = "rocev2") -> Path:
    """Capture of `frames` frames, `mad_share` of them MADs, RoCEv2 or native IB."""
    rnd = random.Random(seed)
    data = _data_frames(rnd, 500)
    mads = _mad_frames(rnd, 500)
    every = max(1, round(1 / mad_share)) if mad_share else 0
    w, native = _writer(path, encap)
    data = [native(f, 0.0) for f in data]  # timestamps of the ERF copies: pcap's own count
    with w:
        di = mi = 0
        for i in range(frames):
            if every and i % every == 0:
                w.write(native(_cycle(mads, mi), i * 1e-6), i * 1e-6)
                mi += 1
            else:
                w.write(data[di % len(data)], i * 1e-6)
                di += 1
    return path


def write_capture2(path: Path, frames: int, seed: int = 2, encap: str = "rocev2") -> Path:
    """SA PathRecord traffic only: the SA frames of the MAD pool (queries, RMPP answers),
    RoCEv2 or native IB."""
    pool = _mad_frames(random.Random(seed), 2000)
    sa = [f for f in pool if bytes(Ether(f)[MAD])[1] == 3]  # management class SA
    w, native = _writer(path, encap)
    with w:
        for i in range(frames):
            w.write(native(_cycle(sa, i), i * 1e-6), i * 1e-6)
    return path
