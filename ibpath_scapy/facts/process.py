"""The records of what a process did, as `ibpath record` captures it: one per ucma command
written to /dev/infiniband/rdma_cm (UcmaFrame) and one per ACM message on librdmacm's socket
to ibacm (AcmFrame), each with the system call that carried it (Call, from the frame's packet
comment: record/comment.py).

The SET_OPTION(IB, IB_PATH) path array is not here: it is its own blob frame
(records.BlobFrame), the next frame of the capture. What the rules read of a resolution's
time line (audit/process.py) is these records' declared fields.
"""

from __future__ import annotations

from typing import Any

from ..layers.acm import AcmEpConfigData, AcmHdr
from .records import Fact, Record, _fact, layer_fact


@_fact
class Call(Fact):
    """The system call a frame was recorded from: which process, thread and descriptor made
    it, its return value and errno (a name), the bytes the kernel wrote back (ucma) and any
    recorder cap it hit."""

    source: str
    call: str
    pid: int
    tid: int
    fd: int
    rc: Any = None
    errno: Any = None
    response_bytes: Any = None
    caps: Any = None

    @property
    def failed(self) -> bool:
        return self.rc is not None and self.rc < 0


@_fact
class UcmaFrame(Record):
    """One ucma command (struct rdma_ucm_cmd_hdr and its struct, rdma_user_cm.h) and what
    the kernel wrote back: the cm_id it names (for CREATE_ID the id the kernel gave; for
    GET_EVENT the event's), and by command its addresses (RESOLVE_ADDR, RESOLVE_IP), event
    and status (GET_EVENT), option (SET_OPTION), QUERY option and, for the PATH query, the
    paths the kernel holds (its readback, BlobRecord facts); the service RESOLVE_IB_SERVICE
    asks for (Linux 6.17: service_id, service_name as text, service_flags ID and NAME), and
    for the IB_SERVICE query how many ServiceRecords the kernel holds (num_service_recs) and
    those it copied (service_records, ServiceRecord facts)."""

    frame: int
    time: float
    kind: str
    encap: str
    command: str
    cmd: int
    id: Any = None
    call: Any = None
    src: Any = None
    dst: Any = None
    dst_family: Any = None
    timeout_ms: Any = None
    event: Any = None
    status: Any = None
    level: Any = None
    optname: Any = None
    optlen: Any = None
    option: Any = None
    num_paths: Any = None
    paths: Any = None
    service_id: Any = None
    service_name: Any = None
    service_flags: Any = None
    num_service_recs: Any = None
    service_records: Any = None
    errors: Any = None

    @property
    def failed(self) -> bool:
        """The kernel refused the write (rc < 0)."""
        return self.call is not None and self.call.failed


AcmHeader = layer_fact("AcmHeader", AcmHdr, derived=("opcode_name", "status_name"),
                       doc="struct acm_hdr: its fields and the names of its opcode and status.")
AcmHeader.__module__ = __name__  # pickle finds it here


@_fact
class AcmEntry(Fact):
    """One struct acm_ep_addr_data: flags and their names, the info type; an address or name
    (text), or the PathRecord of a path entry."""

    index: int
    flags: int
    flag_names: list
    type: int
    type_name: Any = None
    address: Any = None
    path_record: Any = None
    NULLABLE = frozenset({"type_name"})


# struct acm_ep_config_data's values a record shows; its name and addresses as text
ACM_ENDPOINT_FIELDS = ("dev_guid", "port_num", "phys_port_cnt", "pkey", "addr_cnt")
AcmEndpoint = layer_fact("AcmEndpoint", AcmEpConfigData, names=ACM_ENDPOINT_FIELDS,
                         derived=("provider", "addresses"),
                         doc="struct acm_ep_config_data (an EP_QUERY answer): the endpoint's "
                             "device GUID, port, device port count, P_Key, provider and "
                             "addresses.")
AcmEndpoint.__module__ = __name__


@_fact
class AcmFrame(Record):
    """One ACM message (struct acm_msg, librdmacm/acm.h): whether it is a response
    (ACM_OP_ACK), its size as recorded (what recv() returned for an answer), its header, its
    entries (RESOLVE, and a PERF_QUERY naming an endpoint), the bytes past the last whole
    entry, a PERF_QUERY answer's counters (ACM_CNTR_* order), an EP_QUERY answer's endpoint."""

    frame: int
    time: float
    kind: str
    encap: str
    response: bool
    size: int
    acm: Any
    entries: Any = None
    trailing_bytes: Any = None
    counters: Any = None
    endpoint: Any = None
    call: Any = None
    errors: Any = None

    def path_records(self) -> list:
        """The PathRecord facts of the path entries, in order (rdma_getaddrinfo's ai_route)."""
        return [e.path_record for e in self.entries or () if e.path_record is not None]

    def path_entries(self) -> list:
        return [e for e in self.entries or () if e.path_record is not None]


@_fact
class RecorderNote(Record):
    """What `ibpath record` says it could not record (a cap reached, a call that failed with
    nothing to show, an fd it could not track): the note, as a problem of the frame."""

    frame: int
    time: float
    kind: str
    encap: str
    note: str
    errors: Any = None


PROCESS_KINDS = ("ucma", "acm")
