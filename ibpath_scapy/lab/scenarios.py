"""The lab's scenarios: the kernel's own route resolution (rping, ucmatose, the test program
without a blob) and the blob matrix of issue 6 through rdma_set_option.

Every record of a blob carries its own SL, traffic class and flow label, so the CM REQ on the
wire shows which record the kernel took (fields it keeps) or that it took none of them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..layers.pathdata import (
    GMP_PRIMARY_BIDIRECTIONAL,
    PathArray,
    apm_blob,
    forward_return_gmp_blob,
    path_data,
)
from ..layers.sa import PathRecord

CLIENT_GID, SERVER_GID = "::ffff:10.0.0.1", "::ffff:10.0.0.2"
UNKNOWN_FLAG = 0x40  # above IB_PATH_INBOUND_REVERSE (0x20), the highest defined flag


def path(sl: int, tclass: int, flow_label: int, *, reverse: bool = False, hop_limit: int,
         mtu: int = 3, rate: int = 7, dgid: str | None = None) -> PathRecord:
    """A RoCEv2 path between the lab's two rxe ports (10.0.0.1 → 10.0.0.2, or back). The
    kernel's own route has hop limit 64, MTU 1024 (code 3) and the port's rate: records that
    differ from it show whether the kernel keeps a field or writes its own."""
    sgid, peer = (SERVER_GID, CLIENT_GID) if reverse else (CLIENT_GID, SERVER_GID)
    return PathRecord(sgid=sgid, dgid=dgid or peer, dlid=0, slid=0, flow_label=flow_label,
                      hop_limit=hop_limit, tclass=tclass, reversible=1, numb_path=1, pkey=0xFFFF,
                      sl=sl, mtu=mtu, rate=rate, packet_life_time=14)


A = path(1, 0x20, 0x11111, hop_limit=41, mtu=2, rate=7)
B = path(2, 0x40, 0x22222, hop_limit=42, mtu=3, rate=3)
FORWARD = path(3, 0x60, 0x33333, hop_limit=43)
RETURN = path(4, 0x80, 0x44444, hop_limit=44, reverse=True)
GMP = path(5, 0xA0, 0x55555, hop_limit=45, mtu=2)
ALT = path(6, 0xC0, 0x66666, hop_limit=46)
FOREIGN = path(7, 0xE0, 0x77777, hop_limit=47, dgid="::ffff:10.0.0.9")


def _blob(*records) -> bytes:
    return bytes(PathArray(records=[path_data(f, r) for f, r in records]))


@dataclass(frozen=True)
class Scenario:
    """One run in the guest. kind: blob (the test program with `blob`), resolve (the test
    program, route from rdma_resolve_route), rping, ucmatose. connects: False where the
    connection is meant to fail (its failure is then the expected result)."""

    name: str
    kind: str
    description: str
    blob: bytes | None = None
    connects: bool = True  # whether the connection is meant to succeed
    craft: str | None = None  # kind acm: the craft scenario the stand-in ibacm answers with
    client: str = "cmtest"  # kind acm/record: the program that resolves (cmtest, rping, ...)
    standin_args: tuple[str, ...] = ()  # kind acm: more `ibpath acm serve` options

    def as_expected(self, result: dict) -> bool:
        """Whether the guest's result for this scenario is what it is meant to be: the
        connection made (or failed, where it is meant to), or for a program that makes none
        (lab/ibservice.py), the program ran to its end."""
        if "client_exit" not in result:
            return False
        if self.client == "ibservice":
            return result["client_exit"] == 0
        made = not result.get("client_exit") and not result.get("server_exit")
        return made == self.connects

    def to_json(self) -> dict:
        d = {"name": self.name, "kind": self.kind}
        if self.blob is not None:
            d["blob"] = self.blob.hex()
        if self.craft is not None:
            d.update(craft=self.craft, client=self.client, standin_args=list(self.standin_args))
        if self.kind == "record":
            d["client"] = self.client
        return d


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("rping", "rping", "rping as it is: the kernel's own route resolution"),
    Scenario("ucmatose", "ucmatose", "ucmatose as it is: the kernel's own route resolution"),
    Scenario("resolve", "resolve", "the test program without a blob (rdma_resolve_route)"),
    Scenario("blob-single-2b", "blob", "one GMP|PRIMARY|BIDIRECTIONAL (0x2B) record",
             _blob((GMP_PRIMARY_BIDIRECTIONAL, A))),
    Scenario("blob-seed-three", "blob", "the seed's compatible layout 0x0A, 0x12, 0x2B",
             bytes(forward_return_gmp_blob(FORWARD, RETURN, GMP))),
    Scenario("blob-two-2b", "blob", "two 0x2B records differing in SL, traffic class and "
             "flow label", _blob((GMP_PRIMARY_BIDIRECTIONAL, A), (GMP_PRIMARY_BIDIRECTIONAL, B))),
    Scenario("blob-no-2b", "blob", "no 0x2B record (0x0A forward, 0x12 return)",
             _blob((0x0A, FORWARD), (0x12, RETURN))),
    Scenario("blob-ragged", "blob", "a 0x2B record plus 8 bytes: length 80, not a multiple "
             "of 72", _blob((GMP_PRIMARY_BIDIRECTIONAL, A)) + bytes(8)),
    Scenario("blob-unknown-flag", "blob", "one record 0x2B with the unknown flag 0x40 (0x6B)",
             _blob((GMP_PRIMARY_BIDIRECTIONAL | UNKNOWN_FLAG, A))),
    Scenario("blob-unknown-flag-then-2b", "blob", "0x6B (unknown flag 0x40) record, then a "
             "plain 0x2B record", _blob((GMP_PRIMARY_BIDIRECTIONAL | UNKNOWN_FLAG, B),
                                        (GMP_PRIMARY_BIDIRECTIONAL, A))),
    Scenario("blob-foreign-dgid", "blob", "one 0x2B record whose DGID (::ffff:10.0.0.9) is "
             "not the resolved destination", _blob((GMP_PRIMARY_BIDIRECTIONAL, FOREIGN)),
             connects=False),
    Scenario("blob-alternate", "blob", "APM: 0x2B primary and 0x2C ALTERNATE|BIDIRECTIONAL",
             bytes(apm_blob(A, ALT))),
)
BY_NAME = {s.name: s for s in SCENARIOS}


@functools.cache  # running every craft scenario to find the blob ones takes a second or two
def acm_scenarios() -> tuple[Scenario, ...]:
    """The stand-in ibacm runs (issue 21): for every craft scenario whose resolver hands over
    a path array, `ibpath acm serve --scenario NAME` answers librdmacm and the test program
    resolves with rdma_resolve_route, no blob of its own; rping and ucmatose as they are on
    conform-ucma; and
    two error answers (an SA status, an SA that never answers). Not part of "all" (they go
    to captures/rxe/acm/, not captures/rxe/); "acm-all" selects them."""
    from ..acm.serve import blob_scenarios
    # blob-host-order's record is word-swapped: its GIDs lead nowhere, rdma_connect fails
    runs = [Scenario(f"acm-{n}", "acm", f"stand-in ibacm answers with craft scenario {n}",
                     craft=n, connects=n != "blob-host-order") for n in blob_scenarios()]
    # ucmatose resolves with rdma_getaddrinfo (no RAI_ROUTEONLY): librdmacm puts an AF_IB
    # entry made from the answer's path first (acm.c ucma_resolve_af_ib), and
    # rdma_resolve_addr with AF_IB addresses fails on RoCE (ENODEV): it cannot connect
    for prog in ("rping", "ucmatose"):
        runs.append(Scenario(f"acm-{prog}-conform-ucma", "acm", f"{prog} as it is, the "
                             "stand-in answering with craft scenario conform-ucma",
                             craft="conform-ucma", client=prog, connects=prog != "ucmatose"))
    for n in ("sar-status", "saq-no-response"):
        runs.append(Scenario(f"acm-{n}", "acm", f"stand-in ibacm answers craft scenario {n}'s "
                             "error", craft=n))
    runs.append(Scenario("acm-saq-no-response-silent", "acm", "stand-in ibacm never answers "
                         "(saq-no-response, --no-answer): closes the connection after 5 s",
                         craft="saq-no-response", standin_args=("--no-answer", "--hold", "5")))
    return tuple(runs)


RECORD_PREFIX = "rec-"
RECORD_NETLINK = "rec-netlink-rdma-dev"
IB_SERVICE = "rec-ib-service"


def record_scenarios() -> tuple[Scenario, ...]:
    """The recorded runs (issue 20 point 5): every run of SCENARIOS, the client under
    `ibpath record` (its ucma commands, the SET_OPTION blob with the kernel's verdict, the
    QUERY PATH readback) with tcpdump on the rxe link; and `rdma dev` recorded by the shim
    and the strace NETLINK_RDMA recorder at once (one process, two recorders). Not part of
    "all" (they go to captures/rxe/record/); "record-all" selects them."""
    runs = [Scenario(RECORD_PREFIX + s.name, "record", s.description + ", under ibpath "
                     "record", blob=s.blob, connects=s.connects,
                     client=s.kind if s.kind in ("rping", "ucmatose") else "cmtest")
            for s in SCENARIOS]
    runs.append(Scenario(RECORD_NETLINK, "record-netlink", "`rdma dev` under ibpath record "
                         "(the shim) inside ibpath record netlink (strace): one process, "
                         "two recorders"))
    return tuple(runs)


# Not part of "record-all" (captures/rxe/record/ is 6.1's recorded matrix): the kernel runs
# of issue 41 name it beside "all" (captures/lab-kernels/).
IB_SERVICE_RUN = Scenario(IB_SERVICE, "record", "RESOLVE_IB_SERVICE on rxe (lab/ibservice.py "
                          "under ibpath record): unbound, bound, by name and by ID, then "
                          "QUERY(IB_SERVICE); refused on every kernel (no SA on RoCE)",
                          connects=False, client="ibservice")


def lookup(name: str) -> Scenario | None:
    """A scenario by name, the acm and recorded runs included."""
    if name in BY_NAME:
        return BY_NAME[name]
    if name == IB_SERVICE:
        return IB_SERVICE_RUN
    if name.startswith("acm-"):
        return {s.name: s for s in acm_scenarios()}.get(name)
    if name.startswith(RECORD_PREFIX):
        return {s.name: s for s in record_scenarios()}.get(name)
    return None


def select(names: list[str]) -> list[Scenario]:
    """Scenarios by name, in the order given; "all" is every one of SCENARIOS, "acm-all"
    every acm run, "record-all" every recorded run, and these mix with names ("all
    rec-rping rec-ib-service"). Unknown names raise KeyError naming them."""
    groups = {"all": SCENARIOS, "acm-all": None, "record-all": None}
    names = names or ["all"]
    unknown = [n for n in names if n not in groups and lookup(n) is None]
    if unknown:
        raise KeyError(f"unknown scenario(s) {', '.join(unknown)}; known: "
                       f"{', '.join(BY_NAME)}, acm-all, acm-<craft scenario>, record-all, "
                       f"{RECORD_PREFIX}<scenario>, {IB_SERVICE}")
    out: list[Scenario] = []
    for n in names:
        group = (SCENARIOS if n == "all" else acm_scenarios() if n == "acm-all" else
                 record_scenarios() if n == "record-all" else (lookup(n),))
        out += [sc for sc in group if sc not in out]
    return out
