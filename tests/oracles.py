"""Wire formats written from the C headers, never through the project's layers: the tests'
independent oracle for what the layers build and dissect."""

import struct

# rdma-core libibverbs/sa.h struct ibv_path_record (= the SA PathRecord in MAD format, 64 bytes,
# network order; wire-formats.md §3): service_id, dgid, sgid, dlid, slid, flowlabel word,
# hop_limit, tclass, reversible_numpath, pkey, qosclass_sl, mtu, rate, packetlifetime,
# preference, reserved.
IBV_PATH_RECORD = struct.Struct("!Q16s16sHHIBBHHBBBB6s")
assert IBV_PATH_RECORD.size == 64

# rdma-core libibverbs/sa.h struct ibv_path_data: u32 flags and u32 reserved in host order
# (x86_64: little-endian), then the ibv_path_record.
IBV_PATH_DATA_HEAD = struct.Struct("<II")
IBV_PATH_DATA_SIZE = IBV_PATH_DATA_HEAD.size + IBV_PATH_RECORD.size


def _gid(raw: bytes) -> str:
    import ipaddress
    return str(ipaddress.IPv6Address(raw))


def ibv_path_record_fields(raw: bytes) -> dict:
    """An ibv_path_record's fields by ibpath's PathRecord names, unpacked as sa.h lays it out
    (flowlabel word: RawTraffic bit 31, FlowLabel bits 27..8, HopLimit 7..0;
    reversible_numpath; qosclass_sl; selector in the top 2 bits of mtu, rate and
    packetlifetime)."""
    (sid, dgid, sgid, dlid, slid, fl_hop, tclass, rev_num, pkey, qos_sl, mtu, rate, plt, pref,
     _res) = IBV_PATH_RECORD.unpack(raw)
    return {"service_id": sid, "dgid": _gid(dgid), "sgid": _gid(sgid), "dlid": dlid,
            "slid": slid, "raw_traffic": fl_hop >> 31, "flow_label": fl_hop >> 8 & 0xFFFFF,
            "hop_limit": fl_hop & 0xFF, "tclass": tclass, "reversible": rev_num >> 7,
            "numb_path": rev_num & 0x7F, "pkey": pkey, "qos_class": qos_sl >> 4,
            "sl": qos_sl & 0xF, "mtu_selector": mtu >> 6, "mtu": mtu & 0x3F,
            "rate_selector": rate >> 6, "rate": rate & 0x3F,
            "packet_life_time_selector": plt >> 6, "packet_life_time": plt & 0x3F,
            "preference": pref}


def ibv_path_data(raw: bytes) -> list[tuple[int, dict]]:
    """(flags, path record fields) of each whole struct ibv_path_data of a path array."""
    out = []
    for off in range(0, len(raw) - IBV_PATH_DATA_SIZE + 1, IBV_PATH_DATA_SIZE):
        flags, _reserved = IBV_PATH_DATA_HEAD.unpack_from(raw, off)
        rec = raw[off + IBV_PATH_DATA_HEAD.size:off + IBV_PATH_DATA_SIZE]
        out.append((flags, ibv_path_record_fields(rec)))
    return out
