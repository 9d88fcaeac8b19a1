"""The one assembler: decoded records (facts.records) from the values each engine reads.

Three engines read frames: the Scapy layers (decode.Decoder), the fast path's compiled
extractors (fast.FastDecoder) and the plugin's fields under tshark (tshark_engine). Each reads
a frame's layers into layer facts (Mad, Rmpp, SaHeader, PathRecord, a CM message, blob
records) and hands them here, with what only it can know (addresses, the MAD's length, the
CRC verdicts, how to read the records of a reassembled answer). The Assembler owns what
spans frames (RMPP reassembly, the LS requests an answer is tied to, the statistics) and
builds every record, so that the three engines' records are the same by construction.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

from . import Code, Problem, problem
from . import problems as P
from .records import (
    BlobFrame,
    BlobInfo,
    BlobRecord,
    CrcCensus,
    Fact,
    FrameLimit,
    LsAttribute,
    LsMessage,
    Mad,
    Malformed,
    MadFrame,
    NetlinkFrame,
    NlClientHeader,
    NlHeader,
    SaHeader,
    Umad,
    Unfinished,
    Unsupported,
)
from ..model.exprc import compile_expr, part_src, split_name
from ..layers.mad import (
    ATTR_PATH_RECORD,
    ATTRIBUTES_BY_CLASS,
    MGMT_CLASS_CM,
    MGMT_CLASS_PERF,
    MGMT_CLASS_SA,
    MGMT_CLASS_SMP,
    MGMT_CLASS_SMP_DR,
    MAD_SIZE,
    METHODS,
    MGMT_CLASSES,
    METHOD_RESP,
    RMPP_ACTIVE,
    RMPP_TYPE_DATA,
    status_text,
)
from ..layers.pathdata import RECORD_SIZE, flag_names, parse_set_option_comment
from ..layers.sa import IS_SEGMENT, SA_MAD_HDR_SIZE, SA_RECORD_CLASSES, component_names
from ..layers.umad import UMAD_TID_LOW, UserMad, umad_headers_size
from .rmpp import Reassembler

ICRC_MISMATCH, VCRC_MISMATCH = P.ICRC_MISMATCH, P.VCRC_MISMATCH
KIND_BY_CLASS = {MGMT_CLASS_SA: "sa", MGMT_CLASS_CM: "cm", MGMT_CLASS_SMP: "smp",
                 MGMT_CLASS_SMP_DR: "smp", MGMT_CLASS_PERF: "perf"}

# Frames larger than these (bytes) are reported (DECODE-LIMIT) instead of dissected: Scapy
# walks netlink attribute and blob record lists at seconds per 64 KiB, and the native IB VCRC
# is computed in Python. 262144 is Wireshark's own frame limit (WTAP_MAX_PACKET_SIZE_STANDARD);
# nlmon records and rdma_set_option optvals stay far below 64 KiB.
MAX_FRAME_BYTES = 262144
MAX_LIST_FRAME_BYTES = 65536


@dataclass
class DecodeStats:
    frames: int = 0
    mad_frames: int = 0
    netlink_frames: int = 0
    blob_frames: int = 0
    malformed: int = 0
    by_kind: dict = field(default_factory=dict)
    rmpp_dropped: int = 0  # segments the receiving kernel drops (retransmissions, strays)
    # frames of link types no layer reads: link type -> [first frame, count]
    unsupported: dict = field(default_factory=dict)
    crc_errors: int = 0  # frames whose ICRC or VCRC does not match
    icrc_frames: int = 0  # frames with an ICRC checked ...
    icrc_zero: int = 0  # ... of which the ICRC is zero
    icrc_zero_frames: list = field(default_factory=list)  # the first few of those

    @property
    def undecoded(self) -> int:
        """How many frames are of link types no layer reads."""
        return sum(count for _, count in self.unsupported.values())

    def undecoded_text(self) -> str:
        """Those frames in words: "1 frame of link type 65000 not decoded", "5 frames of link
        types 147 and 65000 not decoded" (decode's summary, the audit's error for a capture
        of which no frame was decoded)."""
        n, types = self.undecoded, [str(t) for t in sorted(self.unsupported)]
        named = ", ".join(types[:-1]) + " and " + types[-1] if len(types) > 1 else types[0]
        return (f"{n} frame{'s' if n != 1 else ''} of link type{'s' if len(types) > 1 else ''} "
                f"{named} not decoded")


# -- layer facts from an engine's values ------------------------------------------------------
# a record's kind by its MAD's class (kind_of fills it; the C decoder reads it too)
KINDS: dict[int, str] = {}
_MAD_NAMES: dict[tuple, tuple] = {}
_COMPONENTS: dict[tuple, list] = {}


def mad_fact(values: dict) -> Mad:
    """The Mad fact of a MAD header's values (the layer's public fields), with the names of
    its method, attribute and status (memoised: a capture has few combinations)."""
    which = (values["method"], values["mgmt_class"], values["attribute_id"], values["status"])
    names = _MAD_NAMES.get(which) or _mad_names(which)
    return Mad(**values, method_name=names[0], attribute_name=names[1], status_text=names[2])


# the MAD header's own fields, in Mad's order (then the three names): mad_fact_of's values
MAD_VALUE_FIELDS = Mad._INIT[:-3]
# where among them the fields are that a MAD's names are told by (mad_names' arguments)
MAD_NAMED_BY = tuple(MAD_VALUE_FIELDS.index(k) for k in (
    "method", "mgmt_class", "attribute_id", "status"))
_named_by = itemgetter(*MAD_NAMED_BY)


def mad_fact_of(values: tuple) -> Mad:
    """mad_fact of the values of MAD_VALUE_FIELDS, in that order (the fast path's extractor):
    the fact made positionally, no keyword to bind per field."""
    which = _named_by(values)
    return Mad(*values, *(_MAD_NAMES.get(which) or _mad_names(which)))


def mad_names(method: int, mgmt_class: int, attribute_id: int, status: int) -> tuple:
    """(method name, attribute name, status text) of a MAD: the last three fields of its Mad
    fact after MAD_VALUE_FIELDS (what native/_mad.c makes the fact with)."""
    which = (method, mgmt_class, attribute_id, status)
    return _MAD_NAMES.get(which) or _mad_names(which)


def _mad_names(which: tuple) -> tuple:
    method, mc, attr, status = which
    names = (METHODS.get(method, f"0x{method:02x}"),
             ATTRIBUTES_BY_CLASS.get(mc, {}).get(attr), status_text(status, mc))
    if len(_MAD_NAMES) < 4096:
        _MAD_NAMES[which] = names
    return names


def sa_fact(sm_key: int, attribute_offset: int, component_mask: int,
            attribute_id: int = ATTR_PATH_RECORD) -> SaHeader:
    """The SaHeader fact, with the names of the ComponentMask bits set: the components of
    the record class of the MAD's attribute (layers.sa.component_names)."""
    key = (SA_RECORD_CLASSES.get(attribute_id), component_mask)
    names = _COMPONENTS.get(key)
    if names is None:
        table = component_names(key[0])
        names = [table[b] for b in range(64) if component_mask >> b & 1]
        if len(_COMPONENTS) < 4096:
            _COMPONENTS[key] = names
    return SaHeader(sm_key=sm_key, attribute_offset=attribute_offset,
                    component_mask=component_mask, components=list(names))


def blob_record(flags: int, reserved: int, path_record: Fact) -> BlobRecord:
    """One ib_path_rec_data of a blob or LS answer."""
    return BlobRecord(flags=flags, flag_names=flag_names(flags), reserved=reserved,
                      path_record=path_record)


def kind_of(mgmt_class: int) -> str:
    kind = KINDS.get(mgmt_class)
    if kind is None:
        kind = KINDS[mgmt_class] = KIND_BY_CLASS.get(
            mgmt_class, MGMT_CLASSES.get(mgmt_class, "mad").lower())
    return kind


def header_expr(e):
    """Compile an Expr over the MAD (m), RMPP (r) and SA (h) facts of a frame, as
    SAHeader's hints name them (Under("MAD"), Under("RMPP"), its own fields), and the umad
    header (u: Within("UserMad"), None for a MAD off the wire); a value an engine did not
    see reads 0."""
    spell = {"MAD": "m", "RMPP": "r", None: "h", "SAHeader": "h"}
    below = {UserMad.__name__: "int(u is not None)"}

    def ref(f):
        name, part = split_name(f.name)
        return part_src(f"({spell[f.layer]}.{name} or 0)", part)

    return compile_expr(e, ref, "m, r, h, remaining=0, u=None", below.__getitem__)


is_segment = header_expr(IS_SEGMENT)


def is_rmpp_control(rmpp) -> bool:
    """Whether an active RMPP header is a control message (ACK, STOP, ABORT), not data."""
    return rmpp.rmpp_type not in (0, RMPP_TYPE_DATA, None) and bool((rmpp.rmpp_flags or 0) & 1)


def own_records_on_wire(rmpp) -> bool:
    """Whether an SA MAD off the wire with this RMPP header carries its own records: neither
    one segment of a transfer (IS_SEGMENT) nor an RMPP control message, so that its record
    needs no RMPP state (Assembler.mad_frame_at). The C decoder asks it once per header shape
    (native/_mad.c frame). IS_SEGMENT reads the RMPP header alone: were it to read the MAD or
    SA header, the None given for them here would raise, not answer wrongly."""
    return not is_segment(None, rmpp, None, 0, None) and not is_rmpp_control(rmpp)


def segment_on_wire(rmpp) -> bool:
    """Whether an SA MAD off the wire with this RMPP header is one segment of a transfer
    (IS_SEGMENT): the RMPP reassembler's (Assembler.mad_frame_at). The C decoder asks it once
    per header shape, as own_records_on_wire."""
    return bool(is_segment(None, rmpp, None, 0, None))


def record_reserved_errors(mad: Mad, reserved: Iterable) -> list[Problem]:
    """The errors of an SA MAD's records with reserved bits set (reserved: a flag per
    record, one set at least): a PathRecord's, or a record of another attribute's."""
    if mad.attribute_id != ATTR_PATH_RECORD:
        return reserved_errors(Code.SA_RECORD_RESERVED, reserved, mad.attribute_name)
    return reserved_errors(Code.PR_RESERVED, reserved)


def native_record_plan() -> dict:
    """What the C decoder (native/_mad.c MadDecoder.frame) makes mad_frame_at's record of a
    frame by: the record's class, the kinds by MAD class (kind_of fills it), the tests of a
    header shape whose MAD carries its own records or is one RMPP segment, and the errors of
    records with reserved bits set. Records stay this module's: the decoders hand this over
    without naming a record class."""
    return {"mad_frame": MadFrame, "kinds": KINDS, "kind_of": kind_of,
            "own_records": own_records_on_wire, "segment": segment_on_wire,
            "reserved_errors": record_reserved_errors}


class SaParts(NamedTuple):
    """What an engine read of an SA MAD: its RMPP and SA headers; `records`, the PathRecord
    facts of the MAD (None: its attribute is not a PathRecord), and for each whether its
    reserved bits are set; the MAD's bytes (what the RMPP reassembler keeps of a segment);
    `whole(message)`, the (records, reserved) of a reassembled answer."""

    rmpp: Fact
    sa: Fact
    records: list | None
    reserved: Iterable
    segment: bytes
    whole: Callable[[bytes], tuple[list, Iterable]]


# mad_frame builds an SA MadFrame positionally: the order it relies on, checked at import
assert MadFrame.KEYS == (
    "frame", "time", "kind", "encap", "src", "dst", "src_gid", "dst_gid", "dst_qp", "src_qp",
    "mad", "error", "rmpp", "sa", "rmpp_dropped", "rmpp_control", "reassembled_from",
    "path_records", "cm", "cm_req", "errors", "umad", "sa_records"), MadFrame.KEYS
# where a MAD came from, in MadFrame's order: the tuple mad_frame_at takes
ADDRESS_KEYS = MadFrame.KEYS[MadFrame.KEYS.index("encap"):MadFrame.KEYS.index("mad")]


# -- umad: a MAD as a process wrote or read it ----------------------------------------------------


def umad_direction(umad: Umad, mad: Mad) -> str:
    """"write" or "read": the call's, or where no comment says, a request is taken as written
    and a response as read (a client's view, as saquery's or a resolver's)."""
    if umad.direction is not None:
        return umad.direction
    return "read" if mad.method & METHOD_RESP else "write"


def umad_send_returned(umad: Umad, mad: Mad) -> bool:
    """Whether a umad read is a send the kernel hands back, not a MAD that arrived: a request
    whose answer timed out comes back with its MAD header alone and hdr.status ETIMEDOUT
    (user_mad.c send_handler: packet->length = IB_MGMT_MAD_HDR)."""
    return bool(umad.header.status) and umad_direction(umad, mad) == "read" \
        and not mad.method & METHOD_RESP


def umad_where(umad: Umad, mad: Mad) -> tuple:
    """The ADDRESS_KEYS values of a umad MAD: the process's side named by its pid, fd and
    agent, the peer by the LID (and GID, with a GRH) and QP of struct ib_user_mad_hdr, which
    is the destination of a write and the source of a read (user_mad.c)."""
    h, call = umad.header, umad.call
    local = f"pid {call.pid} fd {call.fd} agent {h.agent_id}" if call is not None \
        else f"agent {h.agent_id}"
    remote = f"LID {h.lid}"
    gid = h.gid if h.grh_present else None
    if umad_direction(umad, mad) == "write":
        return ("umad", local, remote, None, gid, h.qpn, None)
    return ("umad", remote, local, gid, None, None, h.qpn)


def umad_cut(length: int | None, attribute_offset: int | None) -> list[Problem]:
    """The problem of an RMPP umad message whose data is not whole records: a kernel hands
    a process an RMPP answer whole and unpadded (user_mad.c copy_recv_mad, mad_rmpp.c
    get_mad_len), so bytes past the last whole record mean the message was cut on its way
    (umad2sim forwards 256 bytes of any MAD)."""
    stride = (attribute_offset or 0) * 8
    if length is None or not stride:
        return []
    whole, extra = divmod(length - SA_MAD_HDR_SIZE, stride)
    return [problem(Code.UMAD_CUT, length, whole, stride, extra)] if extra else []


# -- the assembler -------------------------------------------------------------------------
class Assembler:
    """Builds the records of a file from the facts engines read; owns the state across
    frames. Engines subclass it (decode.Decoder) or hold one."""

    # LS requests remembered for their responses (path_use by nlmsg_seq); bounded so that a
    # long capture of unanswered requests cannot grow without limit.
    LS_REQUEST_MEMORY = 65536

    # umad requests remembered for the answers read on the same fd and agent; bounded alike
    UMAD_REQUEST_MEMORY = 65536

    def __init__(self):
        self.rmpp = Reassembler()
        self.stats = DecodeStats()
        self.ls_requests: OrderedDict[int, list] = OrderedDict()  # [path_use, frame, answered]
        self.umad_requests: OrderedDict[tuple, list] = OrderedDict()
        # requests let go unanswered from those memories: what -> [first frame, count, memory]
        self.let_go: dict[str, list] = {}

    # -- MADs ---------------------------------------------------------------------------------
    def mad_frame(self, number: int, time: float, addr: dict, mad: Mad, length: int | None,
                  crc_errors: list, icrc: bytes | None, sa: SaParts | None = None,
                  cm: Fact | None = None, cm_req: Fact | None = None) -> MadFrame:
        """The record of a frame carrying a MAD. addr: encap, src, dst (src_gid, dst_gid),
        dst_qp, src_qp; length: the MAD's bytes (None: unknown); crc_errors, icrc: the CRC
        verdicts and the ICRC field (None where the frame has none)."""
        return self.mad_frame_at(number, time, tuple(map(addr.get, ADDRESS_KEYS)), mad, length,
                                 crc_errors, icrc, sa, cm, cm_req)

    def umad_frame(self, number: int, time: float, umad: Umad, mad: Mad, length: int | None,
                   sa: SaParts | None = None, cm: Fact | None = None,
                   cm_req: Fact | None = None) -> MadFrame:
        """The record of a MAD a process wrote to or read from a umad fd (umad: its umad
        side, the engine's; length: the message's bytes after struct ib_user_mad_hdr)."""
        return self.mad_frame_at(number, time, umad_where(umad, mad), mad, length, [], None,
                                 sa, cm, cm_req, umad)

    def mad_frame_at(self, number: int, time: float, where: tuple, mad: Mad, length: int | None,
                     crc_errors: list, icrc: bytes | None, sa: SaParts | None = None,
                     cm: Fact | None = None, cm_req: Fact | None = None,
                     umad: Umad | None = None) -> MadFrame:
        """mad_frame with the addresses as a tuple, the values of ADDRESS_KEYS in order (None
        where absent): what the fast path hands over, with no dict made per frame."""
        stats = self.stats
        stats.mad_frames += 1
        errors = list(crc_errors)
        if umad is not None:
            # a umad message is no wire MAD: whole, of any length past its headers
            umad = self._umad_paired(mad, umad, number)
            need = umad_headers_size(mad.mgmt_class)
            short = False
            if umad_send_returned(umad, mad):
                # a copy of what the process sent, not an SA exchange of its own
                errors.insert(0, problem(Code.UMAD_SEND_STATUS, umad.header.status))
                sa = cm = cm_req = None
            elif length is not None and length < need:
                short = True
                errors.insert(0, problem(Code.UMAD_SHORT, length, need))
        else:
            if length != MAD_SIZE and length is not None:
                errors.insert(0, problem(Code.MAD_LENGTH, length))
            # the zero-ICRC census counts whole MADs only (a cut frame's "ICRC" is any 4 bytes)
            if errors or length != MAD_SIZE:
                note_crc(stats, number, errors, icrc if length == MAD_SIZE else None)
            elif icrc is not None:  # note_crc's common case, without the call (one per frame)
                stats.icrc_frames += 1
            short = length is not None and length < MAD_SIZE
        time = round(time, 9)
        encap, src, dst, src_gid, dst_gid, dst_qp, src_qp = where
        if short:
            stats.malformed += 1
            return MadFrame(number, time, "malformed", encap, src, dst, src_gid, dst_gid,
                            dst_qp, src_qp, mad, errors[0], umad=umad)
        kind = KINDS.get(mad.mgmt_class) or kind_of(mad.mgmt_class)
        if sa is None:
            return MadFrame(number, time, kind, encap, src, dst, src_gid, dst_gid, dst_qp,
                            src_qp, mad, cm=cm, cm_req=cm_req, errors=errors or None,
                            umad=umad)
        rmpp, hdr, records, reserved, segment, whole = sa
        dropped = control = reassembled = None
        if is_segment(mad, rmpp, hdr, 0, umad):
            done = self.rmpp.add((src, dst, mad.transaction_id, mad.attribute_id, mad.method),
                                 rmpp.segment_number or 0, rmpp.rmpp_flags or 0, segment,
                                 number, time)
            if self.rmpp.dropped:
                dropped = self.rmpp.dropped
                stats.rmpp_dropped += 1
            if done is None:
                records, reserved = ([] if records is not None else None), ()
            else:
                message, transfer = done
                if records is not None:
                    records, reserved = whole(message)
                reassembled = [transfer.frames[k] for k in sorted(transfer.frames)]
                errors += transfer.problems
        elif is_rmpp_control(rmpp):
            control = True
            self.rmpp.control(rmpp_control_key(src, dst, mad.transaction_id, mad.attribute_id,
                                               mad.method), rmpp.rmpp_type, number)
        if umad is not None and rmpp.rmpp_flags & RMPP_ACTIVE and not mad.status:
            errors += umad_cut(length, hdr.attribute_offset)
        others = None
        if records is not None and reserved and any(reserved):
            errors += record_reserved_errors(mad, reserved)
        if records is not None and mad.attribute_id != ATTR_PATH_RECORD:
            others, records = records, None  # another attribute of the SA table
        # positional, in MadFrame's field order (an SA storm makes one per frame)
        return MadFrame(number, time, kind, encap, src, dst, src_gid, dst_gid, dst_qp, src_qp,
                        mad, None, rmpp, hdr, dropped, control, reassembled, records, None,
                        None, errors or None, umad, others)

    def _umad_paired(self, mad: Mad, umad: Umad, number: int) -> Umad:
        """The umad side of a MAD with the pairing the kernel makes: a request a process
        writes leaves with the agent's hi_tid in the TID's upper 32 bits (user_mad.c
        ib_umad_write), and the answer the process reads carries that TID; so an answer
        read is tied to the request written on the same fd and agent with the same low 32
        bits, and says the TID it was written with where the kernel changed it."""
        call, direction = umad.call, umad_direction(umad, mad)
        # a send handed back is paired with its request as an answer is
        key = (call.pid if call else None, call.fd if call else None, umad.header.agent_id,
               mad.mgmt_class, mad.transaction_id & UMAD_TID_LOW)
        if not mad.method & METHOD_RESP and not umad_send_returned(umad, mad):
            if direction == "write":
                self.umad_requests[key] = [number, mad.transaction_id, False]
                if len(self.umad_requests) > self.UMAD_REQUEST_MEMORY:
                    _, (frame, _, answered) = self.umad_requests.popitem(last=False)
                    if not answered:
                        self._let_go("umad request", self.UMAD_REQUEST_MEMORY, frame)
            return umad
        request = self.umad_requests.get(key) if direction == "read" else None
        if request is None:
            return umad
        frame, tid, _ = request
        request[2] = True
        return Umad(direction=umad.direction, header=umad.header, call=umad.call,
                    request_frame=frame,
                    written_tid=tid if tid != mad.transaction_id else None)

    def malformed(self, number: int, reason: Problem) -> Malformed:
        """A frame that should carry a MAD or a path array but cannot be read."""
        self.stats.malformed += 1
        return Malformed(frame=number, error=reason)

    def size_limit(self, number: int, size: int, list_framed: bool) -> FrameLimit | None:
        """The DECODE-LIMIT record of a frame too large to dissect, or None. list_framed: a
        netlink, exported-PDU or raw blob frame (attribute and record lists)."""
        limit = MAX_LIST_FRAME_BYTES if list_framed else MAX_FRAME_BYTES
        if size <= limit:
            return None
        self.stats.malformed += 1
        return FrameLimit(frame=number, limit="frame size",
                          error=problem(Code.FRAME_TOO_LARGE, size, limit, list_framed))

    # -- blobs ---------------------------------------------------------------------------------
    def blob_frame(self, number: int, time: float, raw: bool, length: int, trailing: int,
                   comment: str | None, records: list[BlobRecord], blob,
                   reserved: Sequence[int]) -> BlobFrame:
        """The record of a blob frame: `blob` is what the kernel reads of it (kernelview.Blob);
        reserved: the records with reserved PathRecord bits set."""
        self.stats.blob_frames += 1
        errors = []
        if length % RECORD_SIZE:
            errors.append(problem(Code.BLOB_LENGTH, length, trailing))
        if not records:
            errors.append(P.BLOB_EMPTY)
        if reserved:
            errors.append(problem(Code.BLOB_RESERVED, tuple(reserved)))
        info = BlobInfo(length=length, records=len(records), trailing_bytes=trailing,
                        set_option_result=parse_set_option_comment(comment))
        return BlobFrame(frame=number, time=round(time, 9), kind="blob",
                         encap="raw" if raw else "exported_pdu", blob=info, blob_records=records,
                         kernel_blob=blob, errors=errors or None)

    # -- RDMA netlink ---------------------------------------------------------------------------
    def remember_ls_request(self, seq: int, path_use: int, number: int) -> None:
        """An LS RESOLVE request, for the answer of the same sequence number."""
        self.ls_requests[seq] = [path_use, number, False]
        if len(self.ls_requests) > self.LS_REQUEST_MEMORY:
            _, (_, frame, answered) = self.ls_requests.popitem(last=False)
            if not answered:
                self._let_go("LS request", self.LS_REQUEST_MEMORY, frame)

    def link_ls_request(self, seq: int, ls: dict) -> int | None:
        """Tie an LS answer to the request of its sequence number: that request's frame and
        path_use go into the answer's ls values; returns the path_use (None: no request)."""
        matched = self.ls_requests.get(seq)
        if matched is None:
            return None
        path_use, ls["request_frame"], _ = matched
        matched[2] = True
        ls["request_path_use"] = path_use
        return path_use

    def _let_go(self, what: str, memory: int, frame: int) -> None:
        """Count an unanswered request pushed out of a bounded memory (DECODE-LIMIT at the
        end of the file, limit_records): an answer to it, if one comes, is not tied to it."""
        seen = self.let_go.setdefault(what, [frame, 0, memory])
        seen[1] += 1

    def netlink_empty(self, base: dict, problems: list[Problem]) -> NetlinkFrame:
        """A netlink record that holds no message: its problems together."""
        self.stats.malformed += 1
        return NetlinkFrame(**base, kind="malformed", error=joined(problems))

    def netlink_message(self, base: dict, header: dict, kind: str, ls: dict | None,
                        attributes: list[dict] | None, errors: list, structural: list,
                        record_problems: list = (), blob_records: list | None = None,
                        kernel_blob=None, client_name=None) -> NetlinkFrame:
        """The record of one RDMA netlink message. structural problems (lengths past the
        end) and record_problems (of the netlink record as a whole: cooked header, trailing
        bytes, given to its last message) make it malformed."""
        malformed = None
        if structural or record_problems:
            malformed = True
            self.stats.malformed += 1
        errors = structural + errors + list(record_problems)
        if kind == "rdma_netlink":
            hdr = NlClientHeader(**header, client_name=client_name)
        else:
            hdr = NlHeader(**header)
        msg = None
        if ls is not None:
            msg = LsMessage(**ls, attributes=[LsAttribute(**a) for a in attributes or ()])
        return NetlinkFrame(**base, netlink=hdr, kind=kind, ls=msg, blob_records=blob_records,
                            kernel_blob=kernel_blob, malformed=malformed, errors=errors or None)

    def netlink_undissectable(self, base: dict) -> NetlinkFrame:
        self.stats.malformed += 1
        return NetlinkFrame(**base, kind="malformed", error=P.NL_UNDISSECTABLE)

    # -- the end of a file ------------------------------------------------------------------------
    def finish(self) -> Iterator[Fact]:
        """The records made at the end of a file: RMPP transfers never completed, link types
        not decoded, a capture whose ICRCs are all zero, requests let go unanswered from the
        bounded memories (LS requests, umad requests)."""
        stats = self.stats
        for key, t in self.rmpp.pending():
            frames = t.all_frames()
            stats.malformed += 1
            yield Unfinished(frame=frames[-1], frames=frames, limit=t.limit or None,
                             error=problem(Code.RMPP_UNFINISHED, key[2], t.why_unfinished()))
        for linktype, (first, count) in sorted(stats.unsupported.items()):
            yield Unsupported(frame=first, linktype=linktype, count=count,
                              error=problem(Code.LINKTYPE_UNSUPPORTED, linktype, count, first))
        yield from crc_records(stats)
        for what, (first, count, memory) in sorted(self.let_go.items()):
            stats.malformed += 1
            yield FrameLimit(frame=first, limit=f"{what} memory",
                             error=problem(Code.REQUESTS_LET_GO, what, count, memory, first))

    def note_unsupported(self, linktype: int, frame_no: int) -> None:
        """Count a frame of a link type no layer reads."""
        seen = self.stats.unsupported.get(linktype)
        if seen is None:
            self.stats.unsupported[linktype] = [frame_no, 1]
        else:
            seen[1] += 1


def rmpp_control_key(src, dst, tid: int, attribute_id: int, method: int) -> tuple:
    """The reassembly key of the DATA transfer an RMPP ACK/STOP/ABORT answers: it travels the
    other way, and its method is the data's without the R bit (mad_rmpp.c format_ack and
    nack_recv flip IB_MGMT_METHOD_RESP)."""
    return (dst, src, tid, attribute_id, method ^ METHOD_RESP)


_ZERO_ICRC = bytes(4)
# frames listed in the one record of a capture whose ICRCs are all zero (the rest are counted)
_ZERO_ICRC_FRAMES = 20


def note_crc(stats: DecodeStats, frame_no: int, errors: list, icrc: bytes | None) -> None:
    """Count a frame's CRC verdict: icrc is its ICRC field (None if it has none). A zero
    ICRC that does not match is taken out of the frame's errors: whether it is a mismatch
    depends on the other frames (crc_records, at the end of the file)."""
    if icrc is None:
        return
    stats.icrc_frames += 1
    if not errors:  # the common case, on every frame of the fast path
        return
    if icrc == _ZERO_ICRC and ICRC_MISMATCH in errors:
        stats.icrc_zero += 1
        if len(stats.icrc_zero_frames) < _ZERO_ICRC_FRAMES:
            stats.icrc_zero_frames.append(frame_no)
        errors.remove(ICRC_MISMATCH)
    if ICRC_MISMATCH in errors or VCRC_MISMATCH in errors:
        stats.crc_errors += 1


def crc_records(stats: DecodeStats) -> Iterator[CrcCensus]:
    """At the end of a file: when every ICRC was zero (a capture path that zeroes or does not
    compute it), one record saying so; when only some were, they are mismatches."""
    if not stats.icrc_zero:
        return
    frames = stats.icrc_zero_frames
    if stats.icrc_zero == stats.icrc_frames:
        yield CrcCensus(frame=frames[0], frames=frames, icrc_zero=stats.icrc_zero,
                        note=f"every ICRC of the capture is zero ({stats.icrc_zero} frames): the "
                             "capture path zeroed or did not compute it, so no ICRC was checked")
    else:
        stats.crc_errors += stats.icrc_zero
        yield CrcCensus(frame=frames[-1], frames=frames, icrc_zero=stats.icrc_zero,
                        error=problem(Code.ICRC_ZERO_SOME, stats.icrc_zero, stats.icrc_frames))


def reserved_errors(code: Code, reserved: Iterable, *before) -> list[Problem]:
    """The problem (PR_RESERVED: an SA MAD's PathRecords, SA_RECORD_RESERVED: its records of
    another attribute, named in `before`; BLOB_RESERVED: a blob's or LS answer's records) of
    records with reserved bits set; reserved: per record, in order, whether it has."""
    bad = tuple(i for i, r in enumerate(reserved) if r)
    return [problem(code, *before, bad)] if bad else []


def joined(problems: list[Problem]) -> Problem:
    """The one "error" of a netlink record that holds no message: its problems together."""
    return problem(Code.JOINED, tuple(problems)) if problems else P.NL_NO_MESSAGE
