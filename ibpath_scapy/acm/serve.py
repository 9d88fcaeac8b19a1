"""A stand-in ibacm: answers librdmacm's ACM requests with what a craft scenario's resolver
handed over (``ibpath acm serve``).

librdmacm asks ibacm for a route whenever rdma_resolve_route runs on a port whose transport
is IB (rxe included): ucma_set_ib_route → rdma_getaddrinfo(RAI_ROUTEONLY) → ucma_ib_resolve
sends a RESOLVE with the source and destination addresses on /run/ibacm.sock (or TCP
127.0.0.1:PORT when /run/ibacm.port names a port) and blocks in recv() for the answer, with
no timeout. ucma_ib_save_resp copies the answer's path entries into ai_route, which
ucma_set_ib_route hands to rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH); a failed
call or an answer without paths falls back to the kernel's own route.

What a scenario answers (`plan_for`): the scenario is run through the craft Session and the
stand-in keeps what its resolver did there:

* a blob handed to rdma_set_option (or, failing that, the records of an LS response): one
  ACM_EP_INFO_PATH entry per 72-byte record, its flags as the entry's flags. Bytes past the
  last whole record go after the last entry (AcmResolve.trailing) and the header's length
  counts them, as a resolver copying a ragged array into the message would send them;
* an SA answer with an error status: ibacm's mapping, ACM status = SA status >> 8
  (acmp_sa_resp), header only;
* an SA query never answered: ibacm's ETIMEDOUT after its retries (acmp: timeout 2000 ms,
  2 retries), or, with ``no_answer``, nothing at all: the connection is closed after a hold.

ib_acme's queries are answered as ibacm answers them, in network order (acm.h):

* PERF_QUERY: the stand-in's counters, kept as ibacm keeps its own (acm.c: RESOLVE counts
  every RESOLVE read, No Data every ENODATA answer, Error every other failed one; the
  address and route query and cache counters are the provider's, and the stand-in has no
  provider that queries or caches: they stay 0), for the service or for its one endpoint
  (by index, or by one of its addresses; an unknown one: ESRCADDR);
* EP_QUERY: that endpoint (Endpoint): port 1 of a one-port device, its GUID the scenario's
  local GID's interface ID, its P_Key the first path's, its addresses the scenario's local
  address and every source address a RESOLVE asked about while the stand-in maps endpoints
  (it answers for any source as if it were its own). Any other index or port: EINVAL.

A request of another version or an unknown opcode is not answered: ibacm closes the
connection (acm_svr_receive). Every message is built and parsed with the layers of
layers/acm.py. Sources: rdma-core librdmacm/acm.c (ucma_ib_init, ucma_ib_resolve,
ucma_ib_save_resp), librdmacm/cma.c (ucma_set_ib_route, rdma_resolve_route),
ibacm/src/acm.c (acm_svr_receive, acm_svr_perf_query, acm_svr_ep_query, acm_get_ep,
acm_resolve_response), ibacm/src/libacm.c (ib_acm_query_perf, ib_acm_enum_ep),
ibacm/prov/acmp/src/acmp.c (acmp_sa_resp, acmp_resolve_response).
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from ..layers.ib import LINKTYPE_WIRESHARK_UPPER_PDU
from ..capture.encap import exported_pdu
from ..layers.acm import (
    ACM_CNTR_ERROR,
    ACM_CNTR_NODATA,
    ACM_CNTR_RESOLVE,
    ACM_DISSECTOR,
    ACM_EP_FLAG_DEST,
    ACM_EP_FLAG_SOURCE,
    ACM_EP_INFO_ADDRESS_IP,
    ACM_EP_INFO_ADDRESS_IP6,
    ACM_EP_INFO_PATH,
    ACM_MAX_ADDRESS,
    ACM_MAX_COUNTER,
    ACM_MSG_DATA_LENGTH,
    ACM_MSG_EP_LENGTH,
    ACM_MSG_HDR_LENGTH,
    ACM_OP_ACK,
    ACM_OP_EP_QUERY,
    ACM_OP_MASK,
    ACM_OP_PERF_QUERY,
    ACM_OP_RESOLVE,
    ACM_OPCODES,
    ACM_STATUS,
    ACM_STATUS_EINVAL,
    ACM_STATUS_ENODATA,
    ACM_STATUS_ESRCADDR,
    ACM_STATUS_ETIMEDOUT,
    ACM_VERSION,
    AcmCounter,
    AcmEpAddrData,
    AcmEpAddress,
    AcmEpConfigData,
    AcmHdr,
    AcmPerfData,
    AcmResolve,
)
from ..layers.mad import MAD
from ..layers.pathdata import RECORD_SIZE, PathArray, PathRecData
from ..layers.sa import PathRecord

DEFAULT_SOCKET = "/run/ibacm.sock"  # IBACM_SERVER_PATH, RUNDIR /run on Debian (config.h.in)
PORT_FILE = "/run/ibacm.port"  # IBACM_PORT_FILE: librdmacm uses TCP when it holds a port
# acmp.c: `static int timeout = 2000; static int retries = 2;` (ms, tries = retries + 1)
IBACM_SA_TIMEOUT_S = 2.0 * 3
MAX_MESSAGE = ACM_MSG_HDR_LENGTH + ACM_MSG_DATA_LENGTH  # sizeof(struct acm_msg)
# ibacm keeps its clients in an array of FD_SETSIZE - 1 and turns a client away when it is full
# (acm.c acm_svr_accept: "all connections busy - rejecting"); the stand-in does the same
MAX_CLIENTS = 1023
# A client that sends nothing for this long is let go, so that a stalled or hostile client
# (one byte at a time, a header and no body) cannot hold a thread forever; librdmacm sends a
# whole request in one send()
CLIENT_IDLE_S = 30.0
PROVIDER = "ibpath"  # the provider name EP_QUERY gives: the stand-in's, not acmp's "ibacmp"
DEFAULT_PKEY = 0xFFFF  # the default partition's, which the scenarios query with


class AcmServeError(Exception):
    """The stand-in cannot start: the message names the file or scenario and why."""


# -- what a scenario answers -------------------------------------------------------------------

@dataclass
class Plan:
    """What the stand-in answers for one scenario.

    kind: "paths" (arrays: the path arrays the resolver handed over, in order; the n-th
    RESOLVE gets the n-th, the last one again after that), "status" (ACM status `status`,
    no entries), "timeout" (ETIMEDOUT after `delay` seconds, or nothing with no_answer).
    local_gid/remote_gid: the scenario's endpoints, replaced by the requester's addresses
    when the stand-in maps endpoints; local_ip: the local end's IP address."""

    scenario: str
    kind: str
    arrays: list[bytes] = field(default_factory=list)
    source: str = ""
    status: int = 0
    sa_status: int | None = None
    delay: float = 0.0
    local_gid: str = ""
    remote_gid: str = ""
    local_ip: str = ""
    encap: str = ""
    seed: int = 0

    def describe(self) -> str:
        """One line: the scenario and what it is answered with."""
        if self.kind == "paths":
            sizes = ", ".join(f"{len(a)} bytes" for a in self.arrays)
            return (f"{self.scenario}: {len(self.arrays)} path array(s) from its {self.source} "
                    f"({sizes})")
        if self.kind == "status":
            return (f"{self.scenario}: {self.source} → ACM status "
                    f"{ACM_STATUS.get(self.status, self.status)}")
        return f"{self.scenario}: {self.source} → ACM ETIMEDOUT after {self.delay:g} s"


def _observe(obj, name: str, hook: Callable) -> None:
    """Call hook(result, *args, **kw) after obj.name(...) (an instance attribute over the
    method, so the scenario runs unchanged)."""
    orig = getattr(obj, name)

    def wrapped(*args, **kw):
        result = orig(*args, **kw)
        hook(result, *args, **kw)
        return result
    setattr(obj, name, wrapped)


def _array(records) -> bytes:
    if isinstance(records, (bytes, bytearray)):
        return bytes(records)
    return bytes(PathArray(records=[PathRecData(flags=f, path_record=r) for f, r in records]))


def plan_for(name: str, *, seed: int = 0, encap: str | None = None,
             sa_timeout: float = IBACM_SA_TIMEOUT_S) -> Plan:
    """Run craft scenario `name` (into a scratch capture) and return what a stand-in ibacm
    answers for it. RoCEv2 is preferred where the scenario allows it (its GIDs are then
    IPv4-mapped addresses, as on rxe). KeyError names an unknown scenario."""
    from ..craft.scenarios import SCENARIOS  # the scenario library: only to plan an answer
    from ..craft.session import Session
    if name not in SCENARIOS:
        raise KeyError(f"unknown scenario {name!r} (ibpath craft --list names them)")
    sc = SCENARIOS[name]
    encap = encap or ("rocev2" if "rocev2" in sc.encaps else sc.default_encap)
    if encap not in sc.encaps:
        raise KeyError(f"scenario {name} is about {'/'.join(sc.encaps)} only, not {encap}")
    blobs: list[bytes] = []
    ls: list[tuple[bytes, bool]] = []
    sa: list[list] = []  # [status, answered, query] per query, in order
    with tempfile.TemporaryDirectory(prefix="ibpath-acm-") as tmp:
        s = Session(os.path.join(tmp, "scenario.pcapng"), seed=seed, encap=encap)
        _observe(s.b, "blob", lambda _r, records, **kw: blobs.append(_array(records)))
        _observe(s.b, "ls_response",
                 lambda _r, seq, records, error=False: ls.append((_array(records), error)))
        answers: dict[int, list] = {}

        def asked(ans, *a, **kw):
            answers[id(ans)] = [ans.status, bool(ans.frames), ans.query]
            sa.append(answers[id(ans)])

        def answered(_r, ans):
            answers[id(ans)][1] = True

        def sa_mad(_r, mad, from_sa=False, **kw):
            # a scenario writing the SA's answer itself (a mismatched or damaged one)
            if from_sa:
                m = MAD(bytes(mad))
                for row in answers.values():
                    if row[2].tid == m.transaction_id:
                        row[:2] = [m.status, True]
        _observe(s, "ask", asked)
        _observe(s, "answer", answered)
        _observe(s.b, "mad", sa_mad)
        try:
            sc.build(s)
        finally:
            s.close()
    plan = Plan(name, "paths", local_gid=s.local.gid, remote_gid=s.remote.gid,
                local_ip=s.local_ip, encap=encap, seed=seed)
    if blobs:
        plan.arrays, plan.source = blobs, "rdma_set_option blob"
    elif any(not err and arr for arr, err in ls):
        plan.arrays = [arr for arr, err in ls if not err and arr]
        plan.source = "LS (netlink) response"
    elif failed := [st for st, done, _q in sa if done and st]:
        plan.kind, plan.sa_status = "status", failed[-1]
        plan.source = f"SA status 0x{failed[-1]:04x}"
        # acmp_sa_resp: hdr.status = SA status >> 8. A status with only the class-independent
        # low byte set would read as success there; the stand-in answers ENODATA instead.
        plan.status = (failed[-1] >> 8) or ACM_STATUS_ENODATA
    elif sa and not any(done for _st, done, _q in sa):
        plan.kind, plan.status, plan.delay = "timeout", ACM_STATUS_ETIMEDOUT, sa_timeout
        plan.source = "the SA never answered"
    else:
        plan.kind, plan.status = "status", ACM_STATUS_ENODATA
        plan.source = ("the SA answered, the resolver handed nothing over" if sa
                       else "no SA query and nothing handed over")
    return plan


def blob_scenarios() -> list[str]:
    """The craft scenarios whose resolver hands over a path array (blob or LS records); a
    program scenario is librdmacm's side already, not an answer to give it."""
    from ..craft.scenarios import SCENARIOS
    return [n for n, sc in SCENARIOS.items() if not sc.program and plan_for(n).kind == "paths"]


# -- building answers --------------------------------------------------------------------------

def _gid_bytes(text: str) -> bytes:
    return ipaddress.IPv6Address(text).packed


def _address_gid(entry: AcmEpAddrData) -> str | None:
    """The GID rxe/RoCEv2 gives an IP address: IPv4-mapped for IPv4, the address for IPv6."""
    if entry.type == ACM_EP_INFO_ADDRESS_IP:
        return "::ffff:" + entry.address_text()
    if entry.type == ACM_EP_INFO_ADDRESS_IP6:
        return entry.address_text()
    return None


def request_endpoints(req: AcmHdr) -> tuple[str | None, str | None]:
    """(source GID, destination GID) of a RESOLVE request's address entries."""
    src = dst = None
    if AcmResolve in req:
        for e in req[AcmResolve].resolve_data:
            gid = _address_gid(e)
            if gid and e.flags & ACM_EP_FLAG_SOURCE and src is None:
                src = gid
            elif gid and e.flags & ACM_EP_FLAG_DEST and dst is None:
                dst = gid
    return src, dst


def path_entries(array: bytes, gid_map: dict[bytes, bytes] | None = None
                 ) -> tuple[list[AcmEpAddrData], bytes, list[str]]:
    """The ACM path entries for a path array, the bytes past its last whole record, and
    notes on what could not be carried. gid_map replaces SGIDs/DGIDs (16 raw bytes)."""
    notes = []
    whole = len(array) - len(array) % RECORD_SIZE
    entries = []
    for rec in PathArray(array[:whole]).records:
        path = PathRecord(bytes(rec.path_record))
        for f in ("sgid", "dgid"):
            raw = _gid_bytes(getattr(path, f))
            if gid_map and raw in gid_map:
                setattr(path, f, str(ipaddress.IPv6Address(gid_map[raw])))
        # acm_ep_addr_data has flags (32), type (16) and reserved (16) where ibv_path_data
        # has flags and a 32-bit reserved: the reserved word's low half is the entry type,
        # which ucma_ib_save_resp zeroes. Only its high half can be carried.
        if rec.reserved & 0xFFFF:
            notes.append(f"record {len(entries)}: reserved 0x{rec.reserved:08x}: its low 16 "
                         "bits are the ACM entry's type and cannot be carried")
        entries.append(AcmEpAddrData(flags=int(rec.flags), type=ACM_EP_INFO_PATH,
                                     reserved=rec.reserved >> 16, path=path))
    return entries, array[whole:], notes


@dataclass
class Endpoint:
    """The stand-in's one endpoint, as EP_QUERY reports it (struct acm_ep_config_data):
    port 1 of a one-port device."""

    guid: int
    pkey: int
    addresses: list[str] = field(default_factory=list)
    port_num: int = 1
    phys_port_cnt: int = 1
    provider: str = PROVIDER

    def has_address(self, entry: AcmEpAddrData) -> bool:
        """The entry names one of its addresses (ibacm acm_get_ep_address)."""
        text = entry.address_text()
        if entry.type in (ACM_EP_INFO_ADDRESS_IP, ACM_EP_INFO_ADDRESS_IP6):
            return any(_same_ip(text, a) for a in self.addresses)
        return text in self.addresses

    def adopt(self, entry: AcmEpAddrData) -> None:
        """Take a RESOLVE's source address as one of its own (the stand-in answers for it)."""
        if entry.type in (ACM_EP_INFO_ADDRESS_IP, ACM_EP_INFO_ADDRESS_IP6) and \
                not self.has_address(entry):
            self.addresses.append(entry.address_text())


def _same_ip(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return False


def endpoint_for(plan: Plan) -> Endpoint:
    """The endpoint a plan's stand-in has: the GUID is the interface ID of the scenario's
    local GID (an IB port GID is its subnet prefix and the port GUID; on RoCEv2 the scenario
    has no device and the IPv4-mapped GID's low half stands in), the P_Key the first path's
    (else the default partition's), the address the scenario's local one."""
    guid = int.from_bytes(_gid_bytes(plan.local_gid)[8:], "big") if plan.local_gid else 0
    pkey = DEFAULT_PKEY
    whole = [a for a in plan.arrays if len(a) >= RECORD_SIZE]
    if whole:
        pkey = PathArray(whole[0][:RECORD_SIZE]).records[0].path_record.pkey
    return Endpoint(guid, pkey, [plan.local_ip] if plan.local_ip else [])


def _get_ep(endpoint: Endpoint, index: int, port: int) -> Endpoint | None:
    """ibacm acm_get_ep(index, port): the index-th endpoint (from 0) of the active ports,
    of port `port` only unless it is 0."""
    eps = [e for e in (endpoint,) if not port or e.port_num == port]
    return eps[index] if 0 <= index < len(eps) else None


def perf_answer(req: AcmHdr, endpoint: Endpoint, counters: list[int]
                ) -> tuple[AcmHdr, list[str]]:
    """ibacm acm_svr_perf_query: the service's counters for a bare request (src_index 0) or
    one whose entry is not a source address; else the endpoint's, found by index (src_index,
    from 1, which acm_get_ep also takes as the port) or by the entry's address; none:
    ESRCADDR, the header alone. The answer is the request's header with ACK, status,
    dst_index 0, src_out the number of counters."""
    entries = req[AcmResolve].resolve_data if AcmResolve in req else []
    entry = entries[0] if req.length >= ACM_MSG_HDR_LENGTH + ACM_MSG_EP_LENGTH and entries \
        else None
    index = req.src_index
    hdr = dict(version=req.version, opcode=req.opcode | ACM_OP_ACK, status=0,
               src_out=req.src_out, src_index=req.src_index, dst_index=0, tid=req.tid)
    if (entry is None and index < 1) or (entry is not None and
                                         not entry.flags & ACM_EP_FLAG_SOURCE):
        return _perf(hdr, counters), []
    if index >= 1:
        ep, asked = _get_ep(endpoint, index - 1, index), f"endpoint {index}"
    else:
        ep = endpoint if endpoint.has_address(entry) else None
        asked = f"address {entry.address_text()}"
    if ep is None:
        return AcmHdr(**{**hdr, "status": ACM_STATUS_ESRCADDR}), [f"no {asked}"]
    # one endpoint: its counters are the service's (every RESOLVE reached it)
    return _perf(hdr, counters), []


def _perf(hdr: dict, counters: list[int]) -> AcmHdr:
    return AcmHdr(**{**hdr, "src_out": len(counters)}) / AcmPerfData(
        counters=[AcmCounter(value=v) for v in counters])


def ep_answer(req: AcmHdr, endpoint: Endpoint) -> tuple[AcmHdr, list[str]]:
    """ibacm acm_svr_ep_query: the endpoint at index src_out (from 1) of port src_index (0:
    any) as struct acm_ep_config_data, else EINVAL and the header alone; src_index and
    dst_index 0 in the answer."""
    hdr = dict(version=req.version, opcode=req.opcode | ACM_OP_ACK, src_out=req.src_out,
               src_index=0, dst_index=0, tid=req.tid)
    ep = _get_ep(endpoint, req.src_out - 1, req.src_index)
    if ep is None:
        return AcmHdr(**hdr, status=ACM_STATUS_EINVAL), [
            f"no endpoint {req.src_out} on port {req.src_index}"]
    # the length is 16 bits (acm_svr_ep_query stops adding addresses there too)
    room = (0xFFFF - ACM_MSG_HDR_LENGTH - len(bytes(AcmEpConfigData()))) // ACM_MAX_ADDRESS
    names = [a.encode("ascii", "replace")[:ACM_MAX_ADDRESS - 1] for a in ep.addresses[:room]]
    body = AcmEpConfigData(dev_guid=ep.guid, port_num=ep.port_num,
                           phys_port_cnt=ep.phys_port_cnt, pkey=ep.pkey,
                           prov_name=ep.provider.encode("ascii"),
                           addrs=[AcmEpAddress(address=n) for n in names])
    notes = [f"{len(ep.addresses) - room} address(es) past the 16-bit length left out"
             ] if len(ep.addresses) > room else []
    return AcmHdr(**hdr, status=0) / body, notes


def answer(req: AcmHdr, plan: Plan, index: int, *, map_endpoints: bool = True,
           endpoint: Endpoint | None = None, counters: list[int] | None = None
           ) -> tuple[AcmHdr | None, list[str]]:
    """The answer to request `req` (the index-th RESOLVE of this stand-in), or None for no
    answer (ibacm closes the connection), with notes for the log. PERF_QUERY reports
    `counters` (ACM_CNTR_* order), EP_QUERY `endpoint` (by default the plan's, counters 0)."""
    op = req.opcode & ACM_OP_MASK
    if req.version != ACM_VERSION:
        return None, [f"version {req.version}, not {ACM_VERSION}: connection closed (ibacm)"]
    if op in (ACM_OP_PERF_QUERY, ACM_OP_EP_QUERY):
        endpoint = endpoint or endpoint_for(plan)
        if op == ACM_OP_EP_QUERY:
            return ep_answer(req, endpoint)
        return perf_answer(req, endpoint, counters or [0] * ACM_MAX_COUNTER)
    if op != ACM_OP_RESOLVE:
        return None, [f"opcode 0x{req.opcode:02x} unknown: connection closed (ibacm)"]
    base = dict(version=ACM_VERSION, opcode=op | ACM_OP_ACK, tid=req.tid, src_out=0,
                src_index=0, dst_index=0)
    if plan.kind in ("status", "timeout"):  # the delay of a timeout is the server's
        return AcmHdr(**base, status=plan.status), []
    notes = []
    array = plan.arrays[min(index, len(plan.arrays) - 1)]
    gid_map = None
    if map_endpoints:
        src, dst = request_endpoints(req)
        gid_map = {}
        if src:
            gid_map[_gid_bytes(plan.local_gid)] = _gid_bytes(src)
        if dst:
            gid_map[_gid_bytes(plan.remote_gid)] = _gid_bytes(dst)
        notes.append(f"GIDs mapped: {plan.local_gid} → {src}, {plan.remote_gid} → {dst}")
    entries, trailing, more = path_entries(array, gid_map)
    notes += more
    if len(entries) > ACM_MSG_DATA_LENGTH // ACM_MSG_EP_LENGTH:
        notes.append(f"{len(entries)} entries: more than struct acm_msg holds (8); "
                     f"librdmacm's recv() reads {MAX_MESSAGE} bytes")
    body = AcmResolve(resolve_data=entries, trailing=trailing)
    if ACM_MSG_HDR_LENGTH + len(bytes(body)) > 0xFFFF:
        keep = (0xFFFF - ACM_MSG_HDR_LENGTH) // ACM_MSG_EP_LENGTH
        notes.append(f"{len(entries)} entries overflow the 16-bit length: the first {keep} sent")
        body = AcmResolve(resolve_data=entries[:keep])
    return AcmHdr(**base, status=0) / body, notes


# -- the server --------------------------------------------------------------------------------

def describe(msg: AcmHdr) -> dict:
    """A message for the log: header fields, entries (addresses as text, paths as GIDs and
    flags), counters or endpoint, and its bytes."""
    d = {"opcode": ACM_OPCODES.get(msg.opcode, f"0x{msg.opcode:02x}"),
         "status": ACM_STATUS.get(msg.status, msg.status),
         "tid": msg.tid, "length": msg.length if msg.length is not None else len(bytes(msg))}
    if AcmResolve in msg:
        ents = []
        for e in msg[AcmResolve].resolve_data:
            if e.type == ACM_EP_INFO_PATH:
                ents.append({"type": "PATH", "flags": int(e.flags), "sgid": e.path.sgid,
                             "dgid": e.path.dgid, "sl": e.path.sl, "tclass": e.path.tclass,
                             "flow_label": e.path.flow_label})
            else:
                ents.append({"type": e.sprintf("%AcmEpAddrData.type%"), "flags": int(e.flags),
                             "address": e.address_text()})
        d["entries"] = ents
        if msg[AcmResolve].trailing:
            d["trailing"] = len(msg[AcmResolve].trailing)
    if AcmPerfData in msg:
        d["counters"] = msg[AcmPerfData].values()
    if AcmEpConfigData in msg:
        ep = msg[AcmEpConfigData]
        d["endpoint"] = {"dev_guid": ep.dev_guid, "port_num": ep.port_num,
                         "phys_port_cnt": ep.phys_port_cnt, "pkey": ep.pkey,
                         "prov_name": ep.provider(), "addresses": ep.addresses()}
    d["hex"] = bytes(msg).hex()
    return d


class StandIn:
    """A listening stand-in. serve_forever() answers until stop(); every exchange goes to
    `log` (one JSON object a line) and, with `pcap`, both messages as "ibpath.acm" exported
    PDUs, the form `ibpath record` writes."""

    def __init__(self, plan: Plan, *, socket_path: str | None = DEFAULT_SOCKET,
                 port: int | None = None, log: TextIO | None = None, pcap: str | None = None,
                 map_endpoints: bool = True, no_answer: bool = False, hold: float = 5.0,
                 live=None):
        self.plan, self.map_endpoints = plan, map_endpoints
        # resolve/acm.py LiveAnswers: a plan per RESOLVE from live SA queries (--resolve)
        self.live = live
        self.no_answer, self.hold = no_answer, hold
        self.log, self.lock = log, threading.Lock()
        self.resolves = 0
        self.counters = [0] * ACM_MAX_COUNTER  # ACM_CNTR_* order, kept as ibacm keeps its own
        self.endpoint = endpoint_for(plan)
        self.exchanges: list[dict] = []
        self.clients = 0  # connections being served (MAX_CLIENTS at most)
        self.idle = CLIENT_IDLE_S
        self.socket_path = socket_path if port is None else None
        self.writer = None
        self._stop = threading.Event()
        if pcap:
            from ..capture.pcapio import PcapNgWriter
            try:
                self.writer = PcapNgWriter(pcap)
            except OSError as exc:
                raise AcmServeError(f"{pcap}: cannot write the capture: {exc.strerror}") from None
        if port is not None:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            where = f"127.0.0.1:{port}"
            addr = ("127.0.0.1", port)
        else:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            where, addr = socket_path, socket_path
            _clear_socket_path(socket_path)
        try:
            self.sock.bind(addr)
            self.sock.listen(16)
        except OSError as exc:
            self.sock.close()
            raise AcmServeError(f"{where}: cannot listen: {exc.strerror}") from None
        if self.socket_path:
            os.chmod(self.socket_path, 0o666)  # ibacm's socket is world-writable too
        self.where = where

    def _record(self, entry: dict, msgs: list[AcmHdr]) -> None:
        with self.lock:
            self.exchanges.append(entry)
            if self.log:
                self.log.write(json.dumps(entry) + "\n")
                self.log.flush()
            if self.writer:
                for m in msgs:
                    self.writer.write(exported_pdu(m, ACM_DISSECTOR),
                                      LINKTYPE_WIRESHARK_UPPER_PDU, time.time())
                self.writer.f.flush()

    def _client(self, conn: socket.socket) -> None:
        try:
            self._serve_client(conn)
        except socket.timeout:
            self._record({"time": time.time(), "error": f"nothing received for {self.idle:g} s: "
                          "closing"}, [])
        finally:
            conn.close()
            with self.lock:
                self.clients -= 1

    def _serve_client(self, conn: socket.socket) -> None:
        with conn:
            while not self._stop.is_set():
                head = _recv_exact(conn, ACM_MSG_HDR_LENGTH)
                if not head:
                    return
                length = AcmHdr(head).length
                if length < ACM_MSG_HDR_LENGTH or length > MAX_MESSAGE:
                    self._record({"time": time.time(), "error": f"request length {length} "
                                  f"outside {ACM_MSG_HDR_LENGTH}..{MAX_MESSAGE}: closing",
                                  "hex": head.hex()}, [])
                    return
                rest = _recv_exact(conn, length - ACM_MSG_HDR_LENGTH)
                if rest is None:
                    return
                req = AcmHdr(head + rest)
                if not self._exchange(conn, req):
                    return

    def _exchange(self, conn: socket.socket, req: AcmHdr) -> bool:
        """Answer one request (False: the connection is to be closed, as ibacm does)."""
        op = req.opcode & ACM_OP_MASK
        resolve = op == ACM_OP_RESOLVE and req.version == ACM_VERSION
        with self.lock:
            index = self.resolves
            self.resolves += resolve
            if resolve:
                self.counters[ACM_CNTR_RESOLVE] += 1  # acm_svr_receive, before answering
                if self.map_endpoints and AcmResolve in req:
                    for e in req[AcmResolve].resolve_data:
                        if e.flags & ACM_EP_FLAG_SOURCE:
                            self.endpoint.adopt(e)
            counters = list(self.counters)
        plan, live_notes = self.plan, []
        if resolve and self.live is not None:
            plan, live_notes = self.live.plan(req)  # the SA was asked: its time is spent
            index = 0
        entry = {"time": time.time(), "scenario": plan.scenario, "request": describe(req)}
        if resolve and plan.kind == "timeout":
            if self.no_answer:
                entry["answer"] = None
                entry["notes"] = live_notes + [f"no answer; connection closed after "
                                               f"{self.hold:g} s"]
                self._record(entry, [req])
                self._stop.wait(self.hold)
                return False
            self._stop.wait(plan.delay)
        resp, notes = answer(req, plan, index, map_endpoints=self.map_endpoints,
                             endpoint=self.endpoint, counters=counters)
        notes = live_notes + notes
        if notes:
            entry["notes"] = notes
        if resp is None:
            entry["answer"] = None
            self._record(entry, [req])
            return False
        data = bytes(resp)
        if resolve and resp.status:
            with self.lock:  # acm_resolve_response counts the failed answers
                self.counters[ACM_CNTR_NODATA if resp.status == ACM_STATUS_ENODATA
                              else ACM_CNTR_ERROR] += 1
        entry["answer"] = describe(AcmHdr(data))
        self._record(entry, [req, AcmHdr(data)])
        # one send: librdmacm takes the answer from a single recv()
        try:
            conn.sendall(data)
        except OSError:
            return False  # the client went away
        return True

    def serve_forever(self, ready: Callable[[], None] | None = None) -> None:
        """Accept connections (one thread each) until stop()."""
        self.sock.settimeout(0.2)
        if ready:
            ready()
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            with self.lock:
                full = self.clients >= MAX_CLIENTS
                self.clients += not full
            if full:
                conn.close()
                self._record({"time": time.time(), "error": f"all {MAX_CLIENTS} connections "
                              "busy - rejecting"}, [])
                continue
            conn.settimeout(self.idle)
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def stop(self) -> None:
        """Stop accepting, remove the socket file, close the capture."""
        self._stop.set()
        self.sock.close()
        if self.socket_path and os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        if self.writer:
            with self.lock:
                self.writer.close()
                self.writer = None


def _recv_exact(conn: socket.socket, n: int) -> bytes | None:
    """n bytes, or None when the client closed or failed; socket.timeout (a client idle
    for the connection's timeout) goes to the caller."""
    buf = b""
    while len(buf) < n:
        try:
            part = conn.recv(n - len(buf))
        except socket.timeout:
            raise
        except OSError:
            return None
        if not part:
            return None
        buf += part
    return buf


def _clear_socket_path(path: str) -> None:
    """Remove a stale socket at path (one nobody listens on); refuse any other file."""
    p = Path(path)
    if not p.parent.is_dir():
        raise AcmServeError(f"{path}: directory {p.parent} does not exist")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        # ibacm makes /run/ibacm.sock a symlink to ibacm-unix.sock: replace the link only
        os.unlink(path)
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise AcmServeError(f"{path}: exists and is not a socket; not replacing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        os.unlink(path)  # stale: nobody is listening
        return
    finally:
        probe.close()
    raise AcmServeError(f"{path}: something (ibacm?) already listens there")
