"""Deterministic benchmark inputs, built with the project's layers.

capture3 (write_capture3): an SA storm of distinct paths, as after a fabric event: every
source asks every destination, so nearly every PathRecord is new, with a transaction ID of
its own per query (issue 45).

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
from ibpath_scapy.layers.mad import METHOD_GET, METHOD_GET_RESP, METHOD_GET_TABLE, \
    METHOD_GET_TABLE_RESP
from ibpath_scapy.layers.sa import SA_MAD_HDR_SIZE
from ibpath_scapy.model.layout import field_offset
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


# capture 3: an all-to-all SA storm (issue 45). 3,000 sources ask 97 destinations each; the
# k-th query is from source k mod 3000 to destination (k div 3000) mod 97, so a pair comes
# back only after 291,000 queries. 60 % are Gets (GetResp, one record, no RMPP), 40 %
# GetTables answered over RMPP with 1, 3 or 4 records (4 make two segments).
STORM_SOURCES, STORM_DESTINATIONS = 3000, 97
_PR_SIZE = len(PathRecord())
_PR_AT = {name: field_offset(PathRecord, name) for name in ("sgid", "dgid", "slid", "dlid")}
_TID_AT = field_offset(MAD, "transaction_id")


def _storm_ip(side: int, i: int) -> bytes:
    return bytes((10, side, i >> 8, i & 0xFF))


def _storm_gid(side: int, i: int) -> bytes:
    return bytes.fromhex("fe80000000000000") + bytes((0, 0, 0, 0, 0, side, i >> 8, i & 0xFF))


def _storm_lid(side: int, i: int) -> bytes:
    return (side << 12 | i).to_bytes(2, "big")


class _Storm:
    """The frames of capture 3, made from templates the layers build once: per frame only
    the addresses, GIDs, LIDs and transaction IDs are written in, and the IPv4 checksum and
    the ICRC computed."""

    def __init__(self):
        pr = PathRecord(sgid="fe80::1", dgid="fe80::2", slid=1, dlid=2, pkey=0xFFFF,
                        reversible=1, numb_path=1, mtu=4, rate=16, packet_life_time=18)
        self.record = bytes(pr)
        self.query = {m: bytes(MAD(method=m) / RMPP() / SAHeader(records=[PathRecord(
            sgid="fe80::1", dgid="fe80::2", pkey=0xFFFF, numb_path=1, reversible=1)]))
            for m in (METHOD_GET, METHOD_GET_TABLE)}
        self.get_resp = bytes(MAD(method=METHOD_GET_RESP) / RMPP()
                              / SAHeader(attribute_offset=_PR_SIZE // 8, records=[pr]))
        self.table_hdr = bytes(MAD(method=METHOD_GET_TABLE_RESP) / RMPP(rmpp_version=1,
                               rmpp_type=1) / SAHeader(attribute_offset=_PR_SIZE // 8,
                                                       component_mask=0x380F))[:SA_MAD_HDR_SIZE]
        frame = bytes(rocev2_frame(self.get_resp, src="10.0.0.1", dst="10.0.0.2"))
        self.mad_at = len(frame) - 4 - len(self.get_resp)
        self.ip_at = len(Ether(dst="ff:ff:ff:ff:ff:ff"))
        self.head = bytearray(frame[:self.mad_at])

    def _record(self, rec: bytes, src: int, dst: int, fill: bool) -> bytes:
        b = bytearray(rec)
        b[_PR_AT["sgid"]:_PR_AT["sgid"] + 16] = _storm_gid(1, src)
        b[_PR_AT["dgid"]:_PR_AT["dgid"] + 16] = _storm_gid(2, dst)
        if fill:
            b[_PR_AT["slid"]:_PR_AT["slid"] + 2] = _storm_lid(1, src)
            b[_PR_AT["dlid"]:_PR_AT["dlid"] + 2] = _storm_lid(2, dst)
        return bytes(b)

    def _frame(self, mad: bytes, tid: int, src_ip: bytes, dst_ip: bytes) -> bytes:
        m = bytearray(mad)
        m[_TID_AT:_TID_AT + 8] = tid.to_bytes(8, "big")
        h = self.head
        ip = self.ip_at
        h[ip + 12:ip + 16], h[ip + 16:ip + 20] = src_ip, dst_ip
        h[ip + 10:ip + 12] = b"\0\0"
        words = sum(int.from_bytes(h[k:k + 2], "big") for k in range(ip, ip + 20, 2))
        while words >> 16:
            words = (words & 0xFFFF) + (words >> 16)
        h[ip + 10:ip + 12] = (~words & 0xFFFF).to_bytes(2, "big")
        f = bytes(h) + bytes(m)
        return f + rocev2_icrc(f[ip:] + bytes(4))

    def exchange(self, k: int, rnd: random.Random) -> list[bytes]:
        """The frames of the k-th query and its answer."""
        src, dst = k % STORM_SOURCES, (k // STORM_SOURCES) % STORM_DESTINATIONS
        tid = 0x5A00000000000000 | k
        s_ip, d_ip = _storm_ip(1, src), _storm_ip(2, dst)
        r = SA_MAD_HDR_SIZE
        if rnd.random() < 0.6:
            q = self.query[METHOD_GET]
            a = [self.get_resp[:r] + self._record(self.get_resp[r:r + _PR_SIZE], src, dst, True)
                 + self.get_resp[r + _PR_SIZE:]]
        else:
            q = self.query[METHOD_GET_TABLE]
            recs = self._record(self.record, src, dst, True) * rnd.choice((1, 3, 4))
            a = segment(self.table_hdr + recs)
        q = q[:r] + self._record(q[r:r + _PR_SIZE], src, dst, False) + q[r + _PR_SIZE:]
        return [self._frame(q, tid, s_ip, d_ip)] + [self._frame(seg, tid, d_ip, s_ip) for seg in a]


def write_capture3(path: Path, frames: int, seed: int = 3, encap: str = "rocev2") -> Path:
    """An SA storm of distinct paths (see _Storm), RoCEv2 or native IB."""
    storm, rnd = _Storm(), random.Random(seed)
    w, native = _writer(path, encap)
    i = k = 0
    with w:
        while i < frames:
            for f in storm.exchange(k, rnd):
                if i == frames:
                    break
                w.write(native(f, i * 1e-6), i * 1e-6)
                i += 1
            k += 1
    return path
