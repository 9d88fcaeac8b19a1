"""Build capture files of resolver exchanges, one message a call, with the project's layers.

    b = CaptureBuilder("out.pcapng")
    q = b.sa_query(PathRecord(sgid=L, dgid=R, pkey=0xffff, numb_path=1))
    b.sa_answer(q, [PathRecord(sgid=L, dgid=R, reversible=1, ...)])
    b.blob([(0x2B, record)], set_option=0)
    b.cm_req(record)
    b.close()

Every call returns the frame number it wrote. MADs go out as RoCEv2 (Ethernet, link type 1)
by default or as native IB in ERF records (link type 197); LS messages as link type 253;
blobs as exported PDUs "ibpath.blob" (252), all in one pcapng.
"""

from __future__ import annotations

import errno

from dataclasses import dataclass

from scapy.packet import Packet

from ..layers.ib import LINKTYPE_WIRESHARK_UPPER_PDU
from ..capture.encap import erf_record, exported_pdu, native_ib_frame, rocev2_frame
from ..facts.kernelview import blob_from_bytes, select_ucma
from ..layers.cm import CMRep, CMReq, CMRtu
from ..layers.mad import MAD, RMPP
from ..layers.netlink import (
    PACKET_KERNEL,
    PACKET_USER,
    LsAttr,
    LsDgid,
    LsPkey,
    LsResolveRequest,
    LsResolveResponse,
    LsSgid,
    LsServiceId,
    LsTclass,
    NetlinkCooked,
    RdmaNLMsgHdr,
)
from ..layers.pathdata import BLOB_DISSECTOR, PathArray, PathRecData, set_option_comment
from ..layers.sa import PathRecord, SAHeader, component_mask_for
from ..layers.acm import ACM_DISSECTOR
from ..layers.ucma import UCMA_COMMANDS, UCMA_DISSECTOR
from ..layers.umad import UMAD_DISSECTOR
from ..capture.pcapio import PcapNgWriter
from ..capture.comment import note_pdu, response_line, result_line, where_line
from ..facts.rmpp import segment

NLM_F_REQUEST = 0x01
LS_F_ERR = 0x0100


@dataclass
class Query:
    frame: int
    tid: int
    method: int
    header: bytes  # the request's 56-byte MAD+RMPP+SA header, for the answer
    raw: bytes = b""  # the whole request MAD, for an SA model to answer


# the process, rdma_cm descriptor and ACM socket of a crafted program's frames
RECORD_PID, UCMA_FD, ACM_FD, UMAD_FD = 4242, 3, 7, 5


class CaptureBuilder:
    """Writes frames into one pcapng, with a clock that advances 1 ms a frame."""

    def __init__(self, path: str, encap: str = "rocev2", requester: str = "192.168.2.24",
                 sa: str = "192.168.2.1", start: float = 1_700_000_000.0):
        self.w = PcapNgWriter(path)
        self.encap = encap
        self.requester, self.sa = requester, sa
        self.t = start
        self.frame = 0
        self.tid = 0x0000_0001_0000_1000
        self.lids = {requester: 6, sa: 2}  # native IB: LRH LIDs of the two ends
        # capture faults: damage the next MAD frame on the wire (its last MAD byte flipped
        # after the CRCs were computed), and write every RoCEv2 ICRC as zero (capture points
        # that zero or do not compute it)
        self.damage_next = False
        self.zero_icrc = False

    # -- plumbing ------------------------------------------------------------------------------
    def _write(self, data: bytes, linktype: int, comment: str | None = None) -> int:
        self.t += 0.001
        self.frame += 1
        self.w.write(data, linktype, self.t, comment=comment)
        return self.frame

    def mad(self, mad: bytes | Packet, *, from_sa: bool = False, src: str | None = None,
            dst: str | None = None) -> int:
        """One MAD on the wire (requester → SA, or back)."""
        a, b = (self.sa, self.requester) if from_sa else (self.requester, self.sa)
        a, b = src or a, dst or b
        damage, self.damage_next = self.damage_next, False
        if self.encap == "ib":
            raw = bytes(native_ib_frame(mad, slid=self.lids.get(a, 7), dlid=self.lids.get(b, 8)))
            if damage:  # the MAD's last byte sits before ICRC (4) and VCRC (2)
                raw = raw[:-7] + bytes([raw[-7] ^ 0x01]) + raw[-6:]
            return self._write(erf_record(raw, self.t), 197)
        frame = bytes(rocev2_frame(mad, src=a, dst=b))
        if damage:  # the MAD's last byte sits before the ICRC
            frame = frame[:-5] + bytes([frame[-5] ^ 0x01]) + frame[-4:]
        if self.zero_icrc:
            frame = frame[:-4] + bytes(4)
        return self._write(frame, 1)

    def other_frame(self, data: bytes, linktype: int) -> int:
        """Any frame of any link type (frames ibpath does not read, for instance)."""
        return self._write(data, linktype)

    def close(self) -> None:
        self.w.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- SA ------------------------------------------------------------------------------------
    def sa_query(self, record: PathRecord, *, method: int = 0x01, component_mask: int | None = None,
                 tid: int | None = None, retransmit_of: Query | None = None) -> Query:
        """A PathRecord Get (or GetTable) query; the ComponentMask is computed from the fields
        set on `record` unless given."""
        if retransmit_of is not None:
            raw = retransmit_of.raw or retransmit_of.header + bytes(200)
            frame = self.mad(raw, from_sa=False)
            return Query(frame, retransmit_of.tid, retransmit_of.method, retransmit_of.header, raw)
        if tid is None:
            self.tid += 1
            tid = self.tid
        mask = component_mask_for(record) if component_mask is None else component_mask
        mad = MAD(method=method, transaction_id=tid) / RMPP() / SAHeader(
            component_mask=mask, records=[record])
        raw = bytes(mad)
        return Query(self.mad(raw), tid, method, raw[:56], raw)

    def sa_answer(self, query: Query, records: list[PathRecord], *, status: int = 0,
                  skip_segments: tuple[int, ...] = ()) -> list[int]:
        """OpenSM's answer (wire-formats.md §8): GetResp with one record, or a GetTableResp
        segmented by RMPP as the kernel does; an error status carries no record."""
        method = query.method | 0x80
        if method == 0x81 or status:
            mad = MAD(method=method, status=status, transaction_id=query.tid) / RMPP() / SAHeader(
                component_mask=int.from_bytes(query.header[48:56], "big"),
                attribute_offset=8 if records and not status else 0,
                records=[] if status else records[:1])
            return [self.mad(bytes(mad), from_sa=True)]
        hdr = bytes(MAD(method=method, transaction_id=query.tid)
                    / RMPP(rmpp_version=1, rmpp_type=1)
                    / SAHeader(component_mask=int.from_bytes(query.header[48:56], "big"),
                               attribute_offset=8 if records else 0))[:56]
        data = b"".join(bytes(r) for r in records)
        return [self.mad(s, from_sa=True) for k, s in enumerate(segment(hdr + data), 1)
                if k not in skip_segments]

    # -- RDMA netlink local service ------------------------------------------------------------
    def ls_request(self, seq: int, *, path_use: int, sgid: str, dgid: str, pkey: int = 0xFFFF,
                   service_id: int | None = None, tclass: int | None = None,
                   device: bytes = b"rxe0") -> int:
        """The kernel's RESOLVE request to the resolver (sa_query.c ib_nl_send_msg)."""
        attrs = []
        if service_id is not None:
            attrs.append(LsAttr(nla_type=3, mandatory=1) / LsServiceId(service_id=service_id))
        attrs += [LsAttr(nla_type=4, mandatory=1) / LsDgid(dgid=dgid),
                  LsAttr(nla_type=5, mandatory=1) / LsSgid(sgid=sgid)]
        if tclass is not None:
            attrs.append(LsAttr(nla_type=6, mandatory=1) / LsTclass(tclass=tclass))
        attrs.append(LsAttr(nla_type=7, mandatory=1) / LsPkey(pkey=pkey))
        msg = RdmaNLMsgHdr(rdma_op=0, nlmsg_flags=NLM_F_REQUEST, nlmsg_seq=seq) / LsResolveRequest(
            device_name=device, port_num=1, path_use=path_use, attributes=attrs)
        return self._write(bytes(NetlinkCooked(pkttype=PACKET_USER, messages=[msg])), 253)

    def ls_response(self, seq: int, records: list[tuple[int, PathRecord]], *,
                    error: bool = False) -> int:
        """The resolver's answer to the kernel: one PATH_RECORD attribute per record."""
        attrs = [LsAttr(nla_type=1) / PathRecData(flags=f, path_record=r) for f, r in records]
        msg = RdmaNLMsgHdr(rdma_op=0, nlmsg_flags=LS_F_ERR if error else 0, nlmsg_seq=seq) \
            / LsResolveResponse(attributes=attrs)
        return self._write(bytes(NetlinkCooked(pkttype=PACKET_KERNEL, messages=[msg])), 253)

    # -- blobs and CM ----------------------------------------------------------------------------
    def blob(self, records: list[tuple[int, PathRecord]] | bytes, *,
             set_option: int | str | None = None) -> int:
        """rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) optval as a blob frame.
        set_option: the call's return value for the packet comment; "kernel" gives what the
        kernel returns for these bytes (ucma_set_ib_path, the `ucma` profile: 0 or -EINVAL,
        as the kernel lab measured), None records no result."""
        raw = records if isinstance(records, bytes) else bytes(PathArray(records=[
            PathRecData(flags=f, path_record=r) for f, r in records]))
        if set_option == "kernel":
            set_option = 0 if select_ucma(blob_from_bytes(raw)).accepted else -errno.EINVAL
        comment = None if set_option is None else set_option_comment(set_option)
        # the bytes as given: parsing them into a PathArray first costs seconds for a big blob
        return self._write(exported_pdu(raw, BLOB_DISSECTOR), LINKTYPE_WIRESHARK_UPPER_PDU, comment)

    # -- what a process did (ibpath record's frames) -----------------------------------------
    def ucma(self, command: Packet, *, response: bytes | Packet = b"", rc: int | None = None,
             err: int = 0, pid: int = RECORD_PID, fd: int = UCMA_FD) -> int:
        """One write() to /dev/infiniband/rdma_cm as `ibpath record` writes it: the command
        (UcmaCmdHdr / its struct), the response the kernel wrote back (kept only when the write
        succeeded) and the comment with the call (rc: the write's return value, the command's
        size unless given; err: errno when rc < 0)."""
        raw = bytes(command)
        rc = len(raw) if rc is None else rc
        name = UCMA_COMMANDS.get(command.cmd, f"command {command.cmd}")
        lines = [where_line("ucma", f"write {name}", pid, pid, fd), result_line(rc, err)]
        resp = bytes(response)
        if resp and rc >= 0:
            lines.append(response_line(len(resp)))
            raw += resp
        return self._write(exported_pdu(raw, UCMA_DISSECTOR),
                           LINKTYPE_WIRESHARK_UPPER_PDU, "\n".join(lines))

    def acm(self, message: Packet | bytes, *, send: bool, pid: int = RECORD_PID,
            fd: int = ACM_FD) -> int:
        """One ACM message on librdmacm's socket to ibacm (send: librdmacm's request)."""
        where = where_line("acm", "send" if send else "recv", pid, pid, fd)
        return self._write(exported_pdu(bytes(message), ACM_DISSECTOR),
                           LINKTYPE_WIRESHARK_UPPER_PDU, where)

    def umad(self, header: Packet, mad: bytes, *, write: bool, pid: int = RECORD_PID,
             fd: int = UMAD_FD) -> int:
        """One write() to or read() from a umad fd as `ibpath record` writes it: struct
        ib_user_mad_hdr (a UserMad layer), the message, the call on the comment."""
        raw = bytes(header) + mad
        lines = [where_line("umad", "write" if write else "read", pid, pid, fd),
                 result_line(len(raw), 0)]
        return self._write(exported_pdu(raw, UMAD_DISSECTOR),
                           LINKTYPE_WIRESHARK_UPPER_PDU, "\n".join(lines))

    def recorder_note(self, text: str, pid: int = RECORD_PID) -> int:
        """One of ibpath record's notes, framed as the recorder frames it."""
        return self._write(note_pdu(text),
                           LINKTYPE_WIRESHARK_UPPER_PDU,
                           f"ibpath record: {text}\npid {pid} tid {pid}")

    def cm_req(self, primary: PathRecord, *, alternate: PathRecord | None = None,
               service_id: int = 0x0106000000000000, local_ack_timeout: int | None = None,
               comm_id: int = 0x1234, src: str | None = None, dst: str | None = None) -> int:
        """A CM REQ whose paths are taken from PathRecords, as the kernel's cm_format_req()."""
        kw = {}
        for prefix, p in (("primary", primary), ("alternate", alternate)):
            if p is None:
                continue
            kw.update({
                f"{prefix}_local_lid": p.slid, f"{prefix}_remote_lid": p.dlid,
                f"{prefix}_local_gid": p.sgid, f"{prefix}_remote_gid": p.dgid,
                f"{prefix}_flow_label": p.flow_label, f"{prefix}_packet_rate": p.rate,
                f"{prefix}_traffic_class": p.tclass, f"{prefix}_hop_limit": p.hop_limit,
                f"{prefix}_sl": p.sl, f"{prefix}_subnet_local": 1,
                f"{prefix}_local_ack_timeout": (local_ack_timeout if local_ack_timeout is not None
                                                else min(31, p.packet_life_time + 1)),
            })
        req = CMReq(local_comm_id=comm_id, service_id=service_id, pkey=primary.pkey,
                    path_packet_payload_mtu=primary.mtu, transport_service_type=0, **kw)
        mad = MAD(mgmt_class=7, method=3, attribute_id=0x10, transaction_id=comm_id) / req
        return self.mad(mad, src=src or self.requester, dst=dst or "192.168.2.25")

    def cm_rep_rtu(self, *, comm_id: int = 0x1234, remote_comm_id: int = 0x5678,
                   src: str | None = None, dst: str | None = None) -> tuple[int, int]:
        """The passive side's REP and the active side's RTU that complete a REQ (CM attribute
        IDs 0x13 and 0x14, the REQ's TID)."""
        local, remote = src or self.requester, dst or "192.168.2.25"
        rep = MAD(mgmt_class=7, method=3, attribute_id=0x13, transaction_id=comm_id) / CMRep(
            local_comm_id=remote_comm_id, remote_comm_id=comm_id, local_qpn=0x11, starting_psn=1,
            rnr_retry_count=7)
        rtu = MAD(mgmt_class=7, method=3, attribute_id=0x14, transaction_id=comm_id) / CMRtu(
            local_comm_id=comm_id, remote_comm_id=remote_comm_id)
        return self.mad(rep, src=remote, dst=local), self.mad(rtu, src=local, dst=remote)
