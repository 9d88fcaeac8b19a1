"""What librdmacm does with an ibacm answer before the kernel sees anything: the layer
between the ACM socket and rdma_set_option (rdma-core librdmacm/acm.c, cma.c).

ucma_ib_resolve sends the RESOLVE, reads at most sizeof(struct acm_msg) with one recv() and
keeps the answer only when the bytes read equal acm_hdr.length and the status is 0.
ucma_ib_save_resp then reads (length - 16) / 72 entries: it counts the path entries
(ACM_EP_INFO_PATH), zeroes their type, and copies that many 72-byte entries starting at the
first path entry into ai_route, which rdma_resolve_route hands to
rdma_set_option(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) as the path array. So the kernel gets
the path entries verbatim when they stand together; an address entry between them is
copied as if it were a path, and the last path is lost. No ai_route (no usable answer, no
path entry) means RESOLVE_ROUTE: the kernel resolves the route itself, silently.

The lab observed all of this on rdma-core 44 (captures/rxe/acm/README.md), except the split
path entries, which is read from the code (no scenario answers that way on its own).
"""

from __future__ import annotations

from typing import Sequence

from ..layers.acm import (
    ACM_EP_INFO_PATH,
    ACM_MSG_DATA_LENGTH,
    ACM_MSG_EP_LENGTH,
    ACM_MSG_HDR_LENGTH,
)

SOURCE = "rdma-core librdmacm/acm.c ucma_ib_resolve, ucma_ib_save_resp"
ACM_MSG_SIZE = ACM_MSG_HDR_LENGTH + ACM_MSG_DATA_LENGTH  # sizeof(struct acm_msg): one recv()


def entries_read(length: int) -> int:
    """How many entries ucma_ib_save_resp reads of an answer of `length` bytes."""
    return max(length - ACM_MSG_HDR_LENGTH, 0) // ACM_MSG_EP_LENGTH


def ai_route(types: Sequence[int]) -> range:
    """The entries (indexes) copied into ai_route, given the types of the entries read: as
    many as there are path entries, from the first path entry on, whatever their type."""
    paths = [i for i, t in enumerate(types) if t == ACM_EP_INFO_PATH]
    return range(paths[0], paths[0] + len(paths)) if paths else range(0)


def no_route(status: int, length: int, received: int, types: Sequence[int]) -> str | None:
    """Why librdmacm takes no route from an answer (rdma_resolve_route then falls back to
    the kernel's RESOLVE_ROUTE), or None: `received` is the bytes recv() gave, `types` the
    types of the entries it reads."""
    got = min(received, ACM_MSG_SIZE)
    if got < ACM_MSG_HDR_LENGTH or got != length:
        if length > ACM_MSG_SIZE:
            return (f"acm_hdr.length {length} is over sizeof(struct acm_msg) ({ACM_MSG_SIZE}): "
                    f"recv() reads {ACM_MSG_SIZE} bytes, not the length")
        return f"acm_hdr.length {length} is not the {got} bytes read"
    if status:
        return f"status {status}"
    if not ai_route(types):
        return "no path entry"
    return None


def ai_route_bytes(entries) -> bytes:
    """ai_route's bytes of an answer's entries (layers.acm.AcmEpAddrData packets): the
    entries ai_route() copies, each with its type zeroed in place (`ep_data->type = 0`: the
    two bytes after the flags; re-typing the layer would change which union member it
    shows)."""
    raws = [bytes(e) for e in entries]
    return b"".join(raws[i][:4] + bytes(2) + raws[i][6:] for i in ai_route([e.type for e in entries]))
