"""CM rules (audit-rules.md "CM rules"): CM REQs against the paths the kernel took.

Which path the kernel took: the blob handed over for the REQ's endpoint pair, read through the
kernel profile that consumes it (kernelview.py): a blob frame (rdma_set_option optval) through
``ucma`` (``proposal`` under ``--kernel proposal``); an LS RESOLVE response through ``ls-multi``,
``ls-multi-6.1`` and ``ls-legacy`` under ``--kernel all`` (or any profile that does not read LS
responses), or the one LS profile picked. Under ``all`` an LS response has one reading per kernel
generation: a REQ that agrees with any of them is consistent.

The blob for a REQ is the latest one before the REQ (frame order) whose GMP record, as the
profile takes it, has SGID = the REQ's primary local GID and DGID = its primary remote GID (a
REQ sent by the other end is judged against that end's blob, if any), that the profile accepts
and whose rdma_set_option did not fail (pcapng comment); among several, one with the REQ's
P_Key. Without one in the capture, the blobs given with ``--blob FILE`` count (named by file).

What the kernel writes into a REQ (drivers/infiniband/core/cm.c cm_format_req, from the GMP path
``route->path_rec``): GIDs, flow label, traffic class, hop limit, SL and rate as they are in the
path; P_Key and path MTU from the primary path; Local ACK Timeout = cm_ack_timeout(ack_delay,
PacketLifeTime) ≥ min(31, PacketLifeTime + 1); LIDs = the path's SLID/DLID when hop_limit ≤ 1,
else permissive 0xFFFF, except that since 6.1 (eb8336dbe373 "RDMA/cm: Use DLID from
inbound/outbound PathRecords as the datapath DLID"; the profiles whose Profile.directional is
set) the local LID of a routed path is the inbound record's DLID when there is one.
On RoCEv2 the kernel keeps the path but recomputes its L2 part (cma_iboe_set_path_rec_l2_fields)
and the LIDs mean nothing (0xFFFF with the IP hop limit, see the rxe capture in
the external rxe captures), so LIDs are not compared there.
"""

from __future__ import annotations

import functools
import ipaddress

from ...layers.pathdata import (
    IB_PATH_ALTERNATE,
    IB_PATH_GMP,
    IB_PATH_INBOUND_REVERSE,
    IB_PATH_OUTBOUND,
    IB_PATH_PRIMARY,
    flags_text,
)
from ...layers.coded import PERMISSIVE_LID
from ...layers.sa import gid_text
from ...facts.kernelview import LS_PROFILES, PROFILES
from ...model import sources
from ..model import rule
from ..kernel import kernel_view_of

CM_SRC = "drivers/infiniband/core/cm.c cm_format_req, cm_ack_timeout"

# (REQ field without the primary_/alternate_ prefix, PathRecord field)
_PATH_FIELDS = [("local_gid", "sgid"), ("remote_gid", "dgid"), ("flow_label", "flow_label"),
                ("traffic_class", "tclass"), ("hop_limit", "hop_limit"), ("sl", "sl"),
                ("packet_rate", "rate")]
# REQ fields shared by both paths, taken from the primary path
_REQ_FIELDS = [("pkey", "pkey"), ("path_packet_payload_mtu", "mtu")]


def is_rocev2(c: dict) -> bool:
    return "rocev2" in (c.get("encap") or "")


@functools.lru_cache(maxsize=65536)
def _gid(text: str) -> ipaddress.IPv6Address:
    return ipaddress.IPv6Address(text)


def _same(a, b, gid: bool) -> bool:
    if gid:
        return _gid(a) == _gid(b)
    return a == b


def profiles_for(blob: dict, options) -> list[str]:
    """The profiles whose reading of the blob a REQ is held to: the LS one picked, or every LS
    profile newest first; ucma (or the proposal) for an optval."""
    if blob.get("kind") == "ls":
        return [options.kernel] if options.kernel in LS_PROFILES else list(LS_PROFILES[::-1])
    return ["proposal"] if options.kernel == "proposal" else ["ucma"]


def _directional_inbound(p: str, kv: dict) -> int | None:
    """The INBOUND record a directional profile (6.1 on) filed apart from the GMP one."""
    if PROFILES[p].directional and kv.get("inbound") is not None and kv["inbound"] != kv["gmp"]:
        return kv["inbound"]
    return None


def blob_name(blob: dict) -> str:
    if "file" in blob:
        return f"blob file {blob['file']}" + (f" frame {blob['frame']}" if blob["frame"] != 1 else "")
    return f"{'LS response' if blob.get('kind') == 'ls' else 'blob'} frame {blob['frame']}"


def _readings(blob: dict, options, local: str, remote: str) -> list[tuple[str, dict]]:
    """(profile, kernel choice) for each profile that takes a GMP path for local → remote."""
    if blob.get("blob", {}).get("set_option_result") not in (None, "0"):
        return []  # rdma_set_option failed: the kernel took nothing from it
    out = []
    recs = blob.get("blob_records") or []
    for p in profiles_for(blob, options):
        kv = kernel_view_of(blob).get(p)
        if not kv or not kv.get("accepted") or kv.get("gmp") is None or kv["gmp"] >= len(recs):
            continue
        pr = recs[kv["gmp"]]["path_record"]
        if _same(pr["sgid"], local, True) and _same(pr["dgid"], remote, True):
            out.append((p, kv))
    return out


def kernel_paths(c: dict, replay, options) -> tuple[dict | None, list[tuple[str, dict]]]:
    """The blob the kernel built the REQ's connection from, and its readings (module doc)."""
    req = c["cm_req"]
    local, remote = req["primary_local_gid"], req["primary_remote_gid"]
    if local == "::" or remote == "::":
        return None, []
    extra = [id(b) for b in replay.extra_blobs]
    capture = [b for b in replay.kernel_blobs() if id(b) not in extra and b["frame"] < c["frame"]]
    for pool in (capture[::-1], list(replay.extra_blobs)):
        found = [(b, r) for b in pool for r in [_readings(b, options, local, remote)] if r]
        if found:
            same_pkey = [(b, r) for b, r in found
                         if b["blob_records"][r[0][1]["gmp"]]["path_record"]["pkey"] == req["pkey"]]
            return (same_pkey or found)[0]
    return None, []


def _lid_expectations(path: dict, inbound: dict | None) -> dict[str, int]:
    if path["hop_limit"] <= 1:
        return {"local_lid": path["slid"], "remote_lid": path["dlid"]}
    if inbound is not None:
        return {"remote_lid": PERMISSIVE_LID}  # local LID: CM-REQ-INBOUND-LID
    return {"local_lid": PERMISSIVE_LID, "remote_lid": PERMISSIVE_LID}


def path_differences(req: dict, prefix: str, path: dict, inbound: dict | None, roce: bool,
                     shared: bool) -> list[str]:
    """What the REQ's path (prefix primary_/alternate_) has that the kernel would not write."""
    out = []
    pairs = [(prefix + a, b) for a, b in _PATH_FIELDS] + (_REQ_FIELDS if shared else [])
    for rf, pf in pairs:
        if not _same(req[rf], path[pf], pf in ("sgid", "dgid")):
            out.append(f"{rf} {req[rf]} (path {pf} {path[pf]})")
    if not roce:
        for name, want in _lid_expectations(path, inbound).items():
            got = req[prefix + name]
            if got != want:
                if path["hop_limit"] <= 1:
                    why = f"path {'slid' if name == 'local_lid' else 'dlid'} {want}"
                else:
                    why = f"the kernel writes 0x{want:04x}: hop limit {path['hop_limit']} > 1"
                out.append(f"{prefix}{name} {got} ({why})")
    least = min(31, path["packet_life_time"] + 1)
    got = req[prefix + "local_ack_timeout"]
    if got < least:
        out.append(f"{prefix}local_ack_timeout {got} (at least {least} = PacketLifeTime "
                   f"{path['packet_life_time']} + 1)")
    return out


def _names(profiles: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return " and ".join([", ".join(profiles[:-1]), profiles[-1]] if len(profiles) > 1
                        else profiles)


def _frames(c: dict, blob: dict) -> list[int]:
    return [c["frame"]] if "file" in blob else [c["frame"], blob["frame"]]


@rule("CM-REQ-PATH-MISMATCH", "error", "cm", CM_SRC + "; " + sources.CATALOGUE
      + " (the kernel connects on the GMP path its profile takes)")
def req_path_mismatch(subject):
    """The CM REQ's primary path disagrees with the GMP path the kernel took from the blob.

    Compared, native IB: local/remote LID (per cm_format_req: the path's SLID/DLID when its hop
    limit is ≤ 1, else 0xFFFF; the local LID of a routed path with a separate INBOUND record
    under ls-multi-6.1 or ls-multi is CM-REQ-INBOUND-LID's), local/remote GID, flow label, traffic class, hop limit, SL,
    rate, path MTU, P_Key, and Local ACK Timeout ≥ PacketLifeTime + 1 (cm_ack_timeout; the
    receiver takes PacketLifeTime = timeout − 1). RoCEv2: the same without the LIDs. Under
    ``--kernel all`` an LS response is read by ls-multi, ls-multi-6.1 and ls-legacy and the REQ
    must agree with one of them; each disagreeing reading is reported (readings that take the same records
    once). Frames: the REQ and the blob (a ``--blob`` file is named in the message).
    """
    c, replay, options = subject
    blob, readings = kernel_paths(c, replay, options)
    if blob is None:
        return
    req, recs, roce = c["cm_req"], blob["blob_records"], is_rocev2(c)
    results = []
    for p, kv in readings:
        i = _directional_inbound(p, kv)
        inbound = recs[i]["path_record"] if i is not None else None
        diff = path_differences(req, "primary_", recs[kv["gmp"]]["path_record"], inbound, roce, True)
        results.append((p, kv, diff))
    if any(not d for _, _, d in results):
        return
    groups: dict[tuple, list] = {}
    for p, kv, diff in results:
        groups.setdefault((kv["gmp"], tuple(diff)), []).append(p)
    for (gmp, diff), profiles in groups.items():
        yield _frames(c, blob), (
            f"REQ primary path disagrees with the GMP path {_names(profiles)} take"
            f"{'s' if len(profiles) == 1 else ''} from {blob_name(blob)} record {gmp} "
            f"({flags_text(recs[gmp]['flags'])}"
            f"{', RoCEv2: LIDs not compared' if roce else ''}): " + "; ".join(diff))


def alternate_record(recs: list[dict]) -> int | None:
    """The blob's ALTERNATE record for the REQ's alternate path: ALTERNATE without PRIMARY,
    oriented local → remote (GMP, OUTBOUND or INBOUND_REVERSE), a GMP one first."""
    cands = [i for i, r in enumerate(recs)
             if r["flags"] & IB_PATH_ALTERNATE and not r["flags"] & IB_PATH_PRIMARY
             and r["flags"] & (IB_PATH_GMP | IB_PATH_OUTBOUND | IB_PATH_INBOUND_REVERSE)]
    gmp = [i for i in cands if recs[i]["flags"] & IB_PATH_GMP]
    return (gmp or cands or [None])[0]


def has_alternate(req: dict) -> bool:
    return (req["alternate_local_gid"] not in ("::", None) or req["alternate_local_lid"] != 0
            or req["alternate_remote_lid"] != 0)


@rule("CM-REQ-ALT-MISMATCH", "error", "cm", CM_SRC + "; " + sources.SEED_THREAD
      + " (*_SECONDARY records)")
def req_alt_mismatch(subject):
    """The REQ's alternate path disagrees with the blob's ALTERNATE record.

    The blob is the one CM-REQ-PATH-MISMATCH uses; its ALTERNATE record is the first one
    without PRIMARY that is oriented local → remote, a GMP one preferred (the seed's
    GMP_SECONDARY / FORWARD_SECONDARY). Compared as for the primary path (cm_format_req fills
    the alternate fields from the alternate path the same way), without P_Key and MTU, which
    the REQ carries once. Judged only when the REQ carries an alternate path and the blob an
    ALTERNATE record: ucma and the LS consumers drop ALTERNATE records (num_pri_alt_paths = 1),
    so a REQ without one is what today's kernels send.
    """
    c, replay, options = subject
    blob, readings = kernel_paths(c, replay, options)
    if blob is None or not has_alternate(c["cm_req"]):
        return
    recs = blob["blob_records"]
    i = alternate_record(recs)
    if i is None:
        return
    diff = path_differences(c["cm_req"], "alternate_", recs[i]["path_record"], None,
                            is_rocev2(c), False)
    if diff:
        yield _frames(c, blob), (
            f"REQ alternate path disagrees with {blob_name(blob)} record {i} "
            f"({flags_text(recs[i]['flags'])}): " + "; ".join(diff))


@rule("CM-REQ-INBOUND-LID", "warning", "cm", "P-mpr4 eb8336dbe373 'RDMA/cm: Use DLID from "
      "inbound/outbound PathRecords as the datapath DLID' (v6.1), cm.c cm_format_req / "
      "cm_req_handler (ibpath kernel profiles ls-multi-6.1, ls-multi)")
def req_inbound_lid(subject):
    """With an INBOUND record (ls-multi-6.1, ls-multi), the REQ's primary local port LID is not
    the inbound record's DLID.

    Since 6.1 the inbound record's DLID travels in the REQ's Primary Local Port LID and the
    responder sends data to it (cm_req_handler: av.dlid_datapath). cm_format_req only puts it
    there for a routed GMP path (hop limit > 1); for a subnet-local one it writes the GMP path's
    SLID, so an inbound DLID different from it never reaches the responder. Native IB only (the
    LIDs of a RoCEv2 REQ mean nothing), and only where ls-multi-6.1 or ls-multi reads the blob
    (both take the inbound record: eb8336dbe373 is in 6.1).
    """
    c, replay, options = subject
    if is_rocev2(c):
        return
    blob, readings = kernel_paths(c, replay, options)
    seen = set()
    for p, kv in readings:
        i = _directional_inbound(p, kv)
        if i is None or (i, kv["gmp"]) in seen:
            continue  # ls-multi-6.1 and ls-multi file the same records: one finding
        seen.add((i, kv["gmp"]))
        recs = blob["blob_records"]
        inbound, gmp = recs[i]["path_record"], recs[kv["gmp"]]["path_record"]
        got = c["cm_req"]["primary_local_lid"]
        if got == inbound["dlid"]:
            continue
        why = ("the GMP path is subnet-local (hop limit ≤ 1), so the kernel writes its SLID "
               f"{gmp['slid']} there" if gmp["hop_limit"] <= 1 else
               "a kernel before 6.1 writes the permissive LID there")
        dest = ("the REQ's source LID (cm_process_routed_req)" if got == PERMISSIVE_LID
                else f"LID {got}")
        yield _frames(c, blob), (
            f"REQ primary local LID {got} is not the DLID {inbound['dlid']} of the INBOUND "
            f"record {kv['inbound']} of {blob_name(blob)}: the responder sends data to {dest} "
            f"({why})")


_v6 = functools.lru_cache(maxsize=4096)(ipaddress.IPv6Address)  # few GIDs, many REQs


@functools.lru_cache(maxsize=4096)  # a capture has few addresses and many REQs
def _ip_gid(addr: str) -> ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return None
    if ip.version == 4:
        return ipaddress.IPv6Address("::ffff:" + str(ip))
    return ip


@rule("CM-ROCE-GID", "warning", "cm", "RoCEv2 GIDs are the port's IP addresses (IPv4-mapped "
      "or IPv6), drivers/infiniband/core/roce_gid_mgmt.c; rxe captures (ibpath lab)")
def roce_gid(subject):
    """On RoCEv2, the REQ's primary GIDs are not the IPv4-mapped / IPv6 addresses of the packet
    that carries it.

    A RoCEv2 GID is an IP address of the port (IPv4 as ::ffff:a.b.c.d); the REQ travels from the
    requester (local GID) to the responder (remote GID), so its IP source and destination are
    those GIDs. A mismatch means the path was built for other addresses (a wrong GID index, a
    RoCEv1 GID or a stale blob).
    """
    c, _replay, _options = subject
    if not is_rocev2(c) or "src" not in c or "dst" not in c:
        return
    req = c["cm_req"]
    bad = []
    for name, addr in (("primary_local_gid", c["src"]), ("primary_remote_gid", c["dst"])):
        want = _ip_gid(addr)
        if want is not None and _v6(req[name]) != want:
            bad.append(f"{name} {req[name]} (packet {'source' if 'local' in name else 'destination'} "
                       f"{addr} = GID {gid_text(want.packed)})")
    if bad:
        yield [c["frame"]], "RoCEv2 REQ: " + "; ".join(bad)
