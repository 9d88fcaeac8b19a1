"""The assembler's part for what a process did (ibpath record's ucma and ACM frames): each
engine hands over the layers' values (Scapy through the layers, the tshark engine through
the plugin's fields) and these functions build the one record of each frame
(facts.process), with the system call read from the frame's comment (record/comment.py).
"""

from __future__ import annotations

import functools

from . import Code, problem
from .process import (
    ACM_ENDPOINT_FIELDS,
    AcmEndpoint,
    AcmEntry,
    AcmFrame,
    AcmHeader,
    Call,
    RecorderNote,
    UcmaFrame,
)
from .records import Umad, UmadHeader
from ..layers.acm import (
    _EP_FLAG_NAMES,
    ACM_EP_INFO_TYPES,
    ACM_OP_ACK,
    ACM_OP_MASK,
    ACM_OP_RESOLVE,
    ACM_OPCODES,
    ACM_STATUS,
    info_text,
)
from ..layers import ucma as U
from ..layers.pathdata import flag_names as path_flag_names
from ..capture.comment import parse_call_comment

# the struct each command carries after rdma_ucm_cmd_hdr (rdma_user_cm.h), and its response
COMMAND_LAYERS: dict[int, type] = {
    U.CMD["CREATE_ID"]: U.UcmaCreateId, U.CMD["RESOLVE_IP"]: U.UcmaResolveIp,
    U.CMD["RESOLVE_ROUTE"]: U.UcmaResolveRoute, U.CMD["CONNECT"]: U.UcmaConnect,
    U.CMD["GET_EVENT"]: U.UcmaGetEvent, U.CMD["SET_OPTION"]: U.UcmaSetOption,
    U.CMD["QUERY"]: U.UcmaQuery, U.CMD["RESOLVE_ADDR"]: U.UcmaResolveAddr,
    U.CMD["RESOLVE_IB_SERVICE"]: U.UcmaResolveIbService,
}

# the values of a command's struct and of its response the records read (the engines hand
# over those of them the frame's layers have)
COMMAND_FIELDS = ("id", "src_addr", "dst_addr", "timeout_ms", "level", "optname", "optlen",
                  "option")
RESPONSE_LAYERS = (U.UcmaCreateIdResp, U.UcmaEventResp, U.UcmaQueryPathResp,
                   U.UcmaQueryIbServiceResp)
RESPONSE_FIELDS = ("id", "event", "status", "num_paths", "num_service_recs")
# the service of RESOLVE_IB_SERVICE (struct rdma_ucm_ib_service, its struct's `ibs`)
IB_SERVICE_FIELDS = ("service_id", "service_name", "flags")


@functools.lru_cache(maxsize=None)
def struct_size(cls: type) -> int:
    """The bytes of a command's struct (its layer built with its defaults)."""
    return len(cls().self_build())


def call_fact(comment: str | None) -> Call | None:
    """The system call a frame's packet comment describes, or None (a crafted frame)."""
    c = parse_call_comment(comment)
    return Call(**c) if c is not None else None


def umad_fact(header: dict, comment: str | None) -> Umad:
    """The umad side of a MAD ibpath record took from a umad fd: struct ib_user_mad_hdr's
    public values, and the call the frame's comment names ("umad write ..."/"umad read ..."),
    which gives the direction; Assembler.umad_frame pairs it with its request."""
    call = call_fact(comment)
    direction = call.call if call is not None and call.call in ("write", "read") else None
    return Umad(direction=direction, header=UmadHeader(**header), call=call)


def _raw(v) -> bytes:
    """A bytes field as the engines give it: bytes, or hex text (layer_dict, the plugin)."""
    return v if isinstance(v, bytes) else bytes.fromhex(str(v).replace(":", ""))


def _family(raw: bytes) -> str:
    fam = int.from_bytes(raw[:2], "little") if len(raw) >= 2 else 0
    return U.ADDRESS_FAMILIES.get(fam, f"family {fam}")


def ucma_frame(number: int, time: float, comment: str | None, cmd: int, body: int,
               command: dict | None, response: dict | None, paths: list | None,
               service: dict | None = None, services: list | None = None) -> UcmaFrame:
    """The record of one ucma command: `body` is the bytes after the command header;
    `command` and `response` the public field values of the command's and the response's
    layers (None: not in the frame); `paths` the QUERY PATH readback's BlobRecord facts;
    `service` RESOLVE_IB_SERVICE's struct rdma_ucm_ib_service values (IB_SERVICE_FIELDS),
    `services` the QUERY IB_SERVICE readback's ServiceRecord facts."""
    name = U.UCMA_COMMANDS.get(cmd, f"command {cmd}")
    layer = COMMAND_LAYERS.get(cmd)
    errors = []
    if layer is not None and body < struct_size(layer):
        errors.append(problem(Code.UCMA_SHORT, name, body, struct_size(layer)))
        command = response = paths = service = services = None
    c, r = command or {}, response or {}
    v: dict = {"id": c.get("id")}
    if "dst_addr" in c:
        src, dst = _raw(c["src_addr"]), _raw(c["dst_addr"])
        v.update(src=U.sockaddr_text(src), dst=U.sockaddr_text(dst), dst_family=_family(dst))
    if "timeout_ms" in c:
        v["timeout_ms"] = c["timeout_ms"]
    if cmd == U.CMD["CREATE_ID"] and "id" in r:
        v["id"] = r["id"]
    if cmd == U.CMD["GET_EVENT"] and "event" in r:
        v.update(id=r["id"], event=U.CM_EVENTS.get(r["event"], f"event {r['event']}"),
                 status=U.signed_status(r["status"]))
    if cmd == U.CMD["SET_OPTION"] and "level" in c:
        v.update(level=U.OPTION_LEVELS.get(c["level"], str(c["level"])),
                 optname=U.OPTION_NAMES.get(c["level"], {}).get(c["optname"], str(c["optname"])),
                 optlen=c["optlen"])
    if cmd == U.CMD["QUERY"] and "option" in c:
        v["option"] = U.QUERY_OPTIONS.get(c["option"], str(c["option"]))
        if "num_paths" in r:
            v.update(num_paths=r["num_paths"], paths=list(paths or []))
        if "num_service_recs" in r:
            v.update(num_service_recs=r["num_service_recs"],
                     service_records=list(services or []))
    if cmd == U.CMD["RESOLVE_IB_SERVICE"] and service:
        flags = int(service["flags"])
        v.update(service_id=service["service_id"], service_name=service["service_name"],
                 service_flags=[n for i, n in enumerate(U.IB_SERVICE_FLAGS) if flags >> i & 1]
                 + ([f"0x{flags & ~3:x}"] if flags & ~3 else []))
    return UcmaFrame(frame=number, time=round(time, 9), kind="ucma", encap="exported_pdu",
                     command=name, cmd=cmd, call=call_fact(comment), errors=errors or None, **v)


def _flag_names(flags: int) -> list[str]:
    return [n for i, n in enumerate(_EP_FLAG_NAMES) if flags >> i & 1]


def acm_entry(index: int, values: dict, path_record) -> AcmEntry:
    """One acm_ep_addr_data: its public values; path_record the PathRecord fact of a path
    entry (None otherwise)."""
    t = values["type"]
    address = None
    if path_record is None and "info" in values:
        address = info_text(t, _raw(values["info"]))
    flags = int(values["flags"])
    # a path entry's flags are the path's IB_PATH_* flags (acm.c ucma_ib_save_resp copies
    # them into ib_path_rec_data.flags); an address entry's are ACM_EP_FLAG_*
    names = path_flag_names(flags) if path_record is not None else _flag_names(flags)
    return AcmEntry(index=index, flags=flags, flag_names=names, type=t,
                    type_name=ACM_EP_INFO_TYPES.get(t), address=address,
                    path_record=path_record)


def _text(raw: bytes) -> str:
    """A NUL-padded name (prov_name, an endpoint's address) as text."""
    return raw.split(b"\0", 1)[0].decode("ascii", "replace")


def acm_endpoint(values: dict, addresses: list) -> AcmEndpoint:
    """struct acm_ep_config_data: its public values with prov_name, and the raw addresses
    (bytes or hex text, as the engines give them)."""
    return AcmEndpoint(**{n: values[n] for n in ACM_ENDPOINT_FIELDS},
                       provider=_text(_raw(values["prov_name"])),
                       addresses=[_text(_raw(a)) for a in addresses])


def acm_frame(number: int, time: float, comment: str | None, header: dict, size: int,
              entries: list[AcmEntry] | None, trailing: int, counters: list[int] | None = None,
              endpoint: AcmEndpoint | None = None) -> AcmFrame:
    """The record of one ACM message of `size` bytes: its header's public values, its
    entries (None: no entry layer), the bytes past the last whole entry, the counters of a
    PERF_QUERY answer and the endpoint of an EP_QUERY answer. The engines may give an empty
    entry or counter list where the message has no body; a RESOLVE's entries are a list
    (an error answer: empty), the others' are None when empty."""
    op, status = header["opcode"], header["status"]
    hdr = AcmHeader(**header, opcode_name=ACM_OPCODES.get(op), status_name=ACM_STATUS.get(status))
    resolve = op & ACM_OP_MASK == ACM_OP_RESOLVE
    if resolve:
        entries = entries or []  # an error answer is its header alone
    else:
        entries = entries or None
        trailing = 0  # what librdmacm drops is a RESOLVE answer's
    errors = []
    if header["length"] != size:
        errors.append(problem(Code.ACM_LENGTH, header["length"], size))
    elif trailing:  # a message whose length is not what it holds: its entries are not read
        errors.append(problem(Code.ACM_TRAILING, trailing))
    return AcmFrame(frame=number, time=round(time, 9), kind="acm", encap="exported_pdu",
                    response=bool(op & ACM_OP_ACK), size=size, acm=hdr, entries=entries,
                    trailing_bytes=trailing if entries is not None else None,
                    counters=counters or None, endpoint=endpoint,
                    call=call_fact(comment), errors=errors or None)


def recorder_note(number: int, time: float, text: bytes) -> RecorderNote:
    """The record of one of ibpath record's notes (its payload is the text)."""
    note = text.decode("utf-8", "replace")
    return RecorderNote(frame=number, time=round(time, 9), kind="note", encap="exported_pdu",
                        note=note, errors=[problem(Code.RECORDER_NOTE, note)])
