"""What is wrong with a frame, as typed codes with their data: the decoders (Scapy, the fast
path, the tshark engine) report Problems, the rules test their codes, and the sentences of
`ibpath decode` and of the findings are rendered here, from the codes, and nowhere else.

A record's "errors" (and a malformed record's "error") hold Problems while the audit reads
it; facts.public() renders them at the edge, where a record becomes JSON.
"""

from __future__ import annotations

import errno as errno_mod

from dataclasses import dataclass
from enum import Enum
from typing import Callable

from ..layers.mad import MAD_SIZE
from ..layers.pathdata import RECORD_SIZE


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


class Code(Enum):
    """Every problem a decoder reports. The value is the renderer of its data (args)."""

    # a frame as a whole
    FRAME_TOO_LARGE = "FRAME_TOO_LARGE"      # (size, limit, list_framed)
    CANNOT_DISSECT = "CANNOT_DISSECT"        # (reason from the dissector,)
    GSI_SHORT = "GSI_SHORT"                  # (bytes after DETH,)
    UD_NO_DETH = "UD_NO_DETH"                # ()
    MAD_LENGTH = "MAD_LENGTH"                # (length,)
    UMAD_SHORT = "UMAD_SHORT"                # (length, bytes its class's headers take)
    UMAD_CUT = "UMAD_CUT"                    # (length, whole records, stride, bytes past them)
    UMAD_SEND_STATUS = "UMAD_SEND_STATUS"    # (the header's status: an errno)
    REQUESTS_LET_GO = "REQUESTS_LET_GO"      # (what, how many, the memory's size, first frame)
    ICRC_MISMATCH = "ICRC_MISMATCH"          # ()
    VCRC_MISMATCH = "VCRC_MISMATCH"          # ()
    # records inside a frame
    PR_RESERVED = "PR_RESERVED"              # (record indexes,) of an SA answer's PathRecords
    SA_RECORD_RESERVED = "SA_RECORD_RESERVED"  # (attribute name, record indexes) of another SA attribute
    BLOB_RESERVED = "BLOB_RESERVED"          # (record indexes,) of a blob's or LS answer's records
    BLOB_LENGTH = "BLOB_LENGTH"              # (length, trailing bytes)
    BLOB_EMPTY = "BLOB_EMPTY"                # ()
    # RMPP
    RMPP_SEGMENT_RANGE = "RMPP_SEGMENT_RANGE"  # (segment number, highest followed)
    RMPP_UNFINISHED = "RMPP_UNFINISHED"      # (tid, why: the transfer's own account)
    # about the file as a whole (decoders' end-of-file records)
    LINKTYPE_UNSUPPORTED = "LINKTYPE_UNSUPPORTED"  # (link type, count, first frame)
    ICRC_ZERO_SOME = "ICRC_ZERO_SOME"        # (zero ICRCs, frames with an ICRC)
    # RDMA netlink
    NL_ARPHRD = "NL_ARPHRD"                  # (hatype,)
    NL_TRAILING = "NL_TRAILING"              # (bytes,)
    NL_NO_MESSAGE = "NL_NO_MESSAGE"          # ()
    NL_UNDISSECTABLE = "NL_UNDISSECTABLE"    # ()
    NL_LEN_PAST_END = "NL_LEN_PAST_END"      # (nlmsg_len, bytes left)
    LS_ANSWER_AS_REQUEST = "LS_ANSWER_AS_REQUEST"  # ()
    LS_UNKNOWN_OP = "LS_UNKNOWN_OP"          # (op,)
    LS_BODY_UNDISSECTABLE = "LS_BODY_UNDISSECTABLE"  # (layer name, bytes)
    LS_ATTR_TRAILING = "LS_ATTR_TRAILING"    # (bytes,)
    ATTR_PAST_END = "ATTR_PAST_END"          # (label, nla_len, bytes left)
    ATTR_BAD = "ATTR_BAD"                    # (label, (Problem, ...)): one attribute's problems
    ATTR_UNKNOWN_TYPE = "ATTR_UNKNOWN_TYPE"  # (type, mandatory in a request)
    ATTR_VALUE_SIZE = "ATTR_VALUE_SIZE"      # (got, name, want)
    ATTR_FLAGS = "ATTR_FLAGS"                # (raw nla_type,)
    # process records (ibpath record): ucma commands and ACM messages
    UCMA_SHORT = "UCMA_SHORT"                # (command, bytes after the header, its struct's size)
    ACM_LENGTH = "ACM_LENGTH"                # (acm_hdr.length, bytes of the message)
    ACM_TRAILING = "ACM_TRAILING"            # (bytes past the last whole entry,)
    RECORDER_NOTE = "RECORDER_NOTE"          # (the note's text,): what ibpath record missed
    # several problems of one netlink record reported as its one "error"
    JOINED = "JOINED"                        # ((Problem, ...),)


_TEXT: dict[Code, Callable[..., str]] = {
    Code.FRAME_TOO_LARGE: lambda size, limit, list_framed: (
        f"frame of {size} bytes not dissected: over the decoder's limit of {limit} bytes"
        + (" for netlink, exported-PDU and blob frames" if list_framed else "")),
    Code.CANNOT_DISSECT: lambda reason: f"cannot dissect: {reason}",
    Code.GSI_SHORT: lambda n: f"GSI datagram without a complete MAD header ({n} bytes after DETH)",
    Code.UD_NO_DETH: lambda: "UD SEND without a complete DETH",
    Code.MAD_LENGTH: lambda n: f"MAD is {n} bytes; IB MADs are {MAD_SIZE}",
    Code.UMAD_SHORT: lambda n, need: (
        f"umad message of {n} bytes, shorter than its class's headers ({need} bytes)"),
    Code.REQUESTS_LET_GO: lambda what, n, memory, first: (
        f"{n} unanswered {what}(s) let go from the decoder's memory of the last {memory} "
        f"(the first at frame {first}): an answer to one of them is not tied to it"),
    Code.UMAD_SEND_STATUS: lambda status: (
        f"the kernel handed this send back with status {status} "
        f"({errno_mod.errorcode.get(status, '?')}): no answer came for it"),
    Code.UMAD_CUT: lambda n, records, stride, extra: (
        f"umad message of {n} bytes holds {records} whole record(s) of {stride} bytes and "
        f"{extra} bytes of another: it was cut before the process read it"),
    Code.ICRC_MISMATCH: lambda: "ICRC mismatch",
    Code.VCRC_MISMATCH: lambda: "VCRC mismatch",
    Code.PR_RESERVED: lambda idx: f"reserved PathRecord bits set in record(s) {list(idx)}",
    Code.SA_RECORD_RESERVED: lambda name, idx: f"reserved {name} bits set in record(s) {list(idx)}",
    Code.BLOB_RESERVED: lambda idx: f"reserved PathRecord bits set in blob record(s) {list(idx)}",
    Code.BLOB_LENGTH: lambda length, trailing: (
        f"blob length {length} is not a multiple of {RECORD_SIZE} (struct ib_path_rec_data): "
        f"{trailing} trailing bytes; ucma_set_ib_path returns EINVAL"),
    Code.BLOB_EMPTY: lambda: "blob holds no whole record",
    Code.RMPP_SEGMENT_RANGE: lambda n, top: f"segment number {n} outside 1..{top}",
    Code.RMPP_UNFINISHED: lambda tid, why: f"RMPP transfer tid=0x{tid:016x} never completed ({why})",
    Code.LINKTYPE_UNSUPPORTED: lambda lt, count, first: (
        f"link type {lt} is not decoded: {_plural(count, 'frame')} not read (first: frame {first})"),
    Code.ICRC_ZERO_SOME: lambda zero, frames: (
        f"{zero} of {frames} frames carry a zero ICRC where the others carry computed ones: "
        "ICRC mismatch"),
    Code.NL_ARPHRD: lambda hatype: f"cooked header ARPHRD {hatype}, not ARPHRD_NETLINK (824)",
    Code.NL_TRAILING: lambda n: (f"{n} bytes after the last netlink message cannot start another "
                                 "(a message needs 16 bytes and nlmsg_len >= 16)"),
    Code.NL_NO_MESSAGE: lambda: "no netlink message in the record",
    Code.NL_UNDISSECTABLE: lambda: "netlink message could not be dissected",
    Code.NL_LEN_PAST_END: lambda n, left: (
        f"nlmsg_len {n} runs past the end of the record ({left} bytes left)"),
    Code.LS_ANSWER_AS_REQUEST: lambda: ("RESOLVE answer to the kernel carries NLM_F_REQUEST: "
                                        "ib_nl_handle_resolve_resp refuses it (-EPERM)"),
    Code.LS_UNKNOWN_OP: lambda op: f"unknown local-service operation {op}",
    Code.LS_BODY_UNDISSECTABLE: lambda name, n: (
        f"{name} body ({n} bytes) could not be dissected (truncated family header?)"),
    Code.LS_ATTR_TRAILING: lambda n: (f"{n} bytes after the last attribute: an incomplete "
                                      "nlattr header or nla_len below 4"),
    Code.ATTR_PAST_END: lambda label, n, left: (
        f"{label}: nla_len {n} runs past the end of the message ({left} bytes left)"),
    Code.ATTR_BAD: lambda label, parts: f"{label}: " + "; ".join(map(str, parts)),
    Code.ATTR_UNKNOWN_TYPE: lambda t, mandatory: (
        f"unknown attribute type {t}"
        + (" with RDMA_NLA_F_MANDATORY (ibacm rejects the request)" if mandatory else "")),
    Code.ATTR_VALUE_SIZE: lambda got, name, want: f"value is {got} bytes, {name} takes {want}",
    Code.ATTR_FLAGS: lambda raw: f"NLA_F_NESTED/NLA_F_NET_BYTEORDER set (nla_type 0x{raw:04x})",
    Code.UCMA_SHORT: lambda cmd, got, want: (
        f"ucma {cmd}: {got} bytes after the command header, struct of the command is {want}"),
    Code.ACM_LENGTH: lambda length, got: (
        f"acm_hdr.length {length} but the message holds {got} bytes"),
    Code.ACM_TRAILING: lambda n: (
        f"{n} bytes past the last whole 72-byte entry (librdmacm reads (length - 16) / 72 "
        "entries and drops them)"),
    Code.RECORDER_NOTE: lambda text: f"ibpath record: {text}",
    Code.JOINED: lambda parts: "; ".join(map(str, parts)),
}
assert set(_TEXT) == set(Code), set(Code) - set(_TEXT)

# the problems that say a frame's bytes do not match its CRCs (CRC-MISMATCH)
CRC_CODES = frozenset({Code.ICRC_MISMATCH, Code.VCRC_MISMATCH})
# the problems of an RMPP segment sequence, carried by the frame that completes it (SAR-RMPP)
RMPP_CODES = frozenset({Code.RMPP_SEGMENT_RANGE})


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem: its code and the data its sentence is made of. str() is the sentence."""

    code: Code
    args: tuple = ()

    def __str__(self) -> str:
        return _TEXT[self.code](*self.args)


def problem(code: Code, *args) -> Problem:
    return Problem(code, args)


# the problems without data, made once (every CRC mismatch of a capture is the same object)
ICRC_MISMATCH = Problem(Code.ICRC_MISMATCH)
VCRC_MISMATCH = Problem(Code.VCRC_MISMATCH)
UD_NO_DETH = Problem(Code.UD_NO_DETH)
BLOB_EMPTY = Problem(Code.BLOB_EMPTY)
NL_NO_MESSAGE = Problem(Code.NL_NO_MESSAGE)
NL_UNDISSECTABLE = Problem(Code.NL_UNDISSECTABLE)
LS_ANSWER_AS_REQUEST = Problem(Code.LS_ANSWER_AS_REQUEST)


def of_code(rec, *wanted: Code) -> list[Problem]:
    """A record's problems of the given codes, in order."""
    return [p for p in rec.get("errors", ()) if p.code in wanted]
