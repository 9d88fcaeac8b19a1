"""The lab's scenarios: the kernel's own route resolution (rping, ucmatose, the test program
without a blob) and the blob matrix of issue 6 through rdma_set_option.

Every record of a blob carries its own SL, traffic class and flow label, so the CM REQ on the
wire shows which record the kernel took (fields it keeps) or that it took none of them.
"""

from __future__ import annotations

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

    def to_json(self) -> dict:
        d = {"name": self.name, "kind": self.kind}
        if self.blob is not None:
            d["blob"] = self.blob.hex()
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


def select(names: list[str]) -> list[Scenario]:
    """Scenarios by name; "all" is every one. Unknown names raise KeyError naming them."""
    if not names or names == ["all"]:
        return list(SCENARIOS)
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise KeyError(f"unknown scenario(s) {', '.join(unknown)}; known: "
                       f"{', '.join(BY_NAME)}")
    return [BY_NAME[n] for n in names]
