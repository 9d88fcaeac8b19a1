"""Write captures/crafted/: the seed's three resolver outcomes, on native IB, as a resolver
following the 2009 linux-rdma design would produce them (and one that does not).

    python tools/make_seed_demo.py

Deterministic: the same bytes on every run (fixed clock, TIDs and paths).
"""

from __future__ import annotations

from pathlib import Path

from ibpath_scapy.craft import CaptureBuilder
from ibpath_scapy.layers import PathRecord

OUT = Path(__file__).resolve().parents[1] / "captures" / "crafted"
LOCAL, REMOTE = "fe80::2:c903:0:10", "fe80::2:c903:0:20"


def path(sgid: str, dgid: str, slid: int, dlid: int, reversible: int, sl: int = 0) -> PathRecord:
    """A resolved path as OpenSM answers it (selectors 2, NumbPath 0, wire-formats.md §8)."""
    return PathRecord(sgid=sgid, dgid=dgid, slid=slid, dlid=dlid, reversible=reversible,
                      numb_path=0, pkey=0xFFFF, sl=sl, mtu_selector=2, mtu=4, rate_selector=2,
                      rate=7, packet_life_time_selector=2, packet_life_time=18)


def forward_query(reversible: int | None = None) -> PathRecord:
    kw = {"reversible": reversible} if reversible is not None else {}
    return PathRecord(sgid=LOCAL, dgid=REMOTE, pkey=0xFFFF, numb_path=1, **kw)


def reversible_forward(out: Path) -> None:
    """The forward path comes back reversible: one GMP|PRIMARY|BIDIRECTIONAL record."""
    fwd = path(LOCAL, REMOTE, 0x10, 0x20, 1)
    with CaptureBuilder(str(out), encap="ib") as b:
        b.sa_answer(b.sa_query(forward_query()), [fwd])
        b.blob([(0x2B, fwd)], set_option=0)
        b.cm_req(fwd)


def follow_up(out: Path) -> None:
    """Not reversible: a reversible GMP path and the return path are asked for too, and the
    kernel gets FORWARD_PRIMARY, RETURN_PRIMARY and GMP|PRIMARY|BIDIRECTIONAL (the seed's
    compatible layout: older kernels fall through to the last record)."""
    fwd = path(LOCAL, REMOTE, 0x10, 0x20, 0, sl=1)
    gmp = path(LOCAL, REMOTE, 0x10, 0x20, 1, sl=0)
    ret = path(REMOTE, LOCAL, 0x20, 0x10, 0, sl=2)
    with CaptureBuilder(str(out), encap="ib") as b:
        b.sa_answer(b.sa_query(forward_query()), [fwd])
        b.sa_answer(b.sa_query(forward_query(reversible=1)), [gmp])
        b.sa_answer(b.sa_query(PathRecord(sgid=REMOTE, dgid=LOCAL, pkey=0xFFFF, numb_path=1)), [ret])
        b.blob([(0x0A, fwd), (0x12, ret), (0x2B, gmp)], set_option=0)
        b.cm_req(gmp)


def no_follow_up(out: Path) -> None:
    """Faulty: the forward path is not reversible, yet it is handed over alone as 0x2B."""
    fwd = path(LOCAL, REMOTE, 0x10, 0x20, 0, sl=1)
    with CaptureBuilder(str(out), encap="ib") as b:
        b.sa_answer(b.sa_query(forward_query()), [fwd])
        b.blob([(0x2B, fwd)], set_option=0)
        b.cm_req(fwd)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    reversible_forward(OUT / "seed-1-reversible-forward.pcapng")
    follow_up(OUT / "seed-2-follow-up-three-records.pcapng")
    no_follow_up(OUT / "seed-3-no-follow-up.pcapng")


if __name__ == "__main__":
    main()
