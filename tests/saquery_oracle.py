"""saquery's printout, the oracle of what OpenSM answers (tests/test_real_clients.py,
tests/test_resolve.py): saquery prints each PathRecord it got ("PathRecord dump:", one line a
field, IBA's packed bytes as libibmad's mad_dump_path_record reads them)."""

import re

_LINE = re.compile(r"^\s+(\w+)\.+(\S+)\s*$")


def saquery_records(text: str, kind: str = "PathRecord") -> list[dict]:
    """The records saquery printed ("<kind> dump:" blocks), each {field: text}."""
    out: list[dict] = []
    for line in text.splitlines():
        if line.startswith(f"{kind} dump:"):
            out.append({})
        elif out and (m := _LINE.match(line)):
            out[-1][m.group(1)] = m.group(2)
    return out


def printed_path_record(p: dict) -> dict:
    """saquery's PathRecord fields as ibpath's PathRecord fields: the IBA bytes libibmad
    prints packed split as IBA 15.2.5.16 packs them."""
    hop_flow = int(p["hop_flow_raw"], 16)
    revers = int(p["num_path_revers"], 16)
    qos_sl = (int(p["qos_class"], 16), int(p["sl"], 16))
    out = {"service_id": int(p["service_id"], 16), "dgid": p["dgid"], "sgid": p["sgid"],
           "dlid": int(p["dlid"]), "slid": int(p["slid"]),
           "raw_traffic": hop_flow >> 31, "flow_label": hop_flow >> 8 & 0xFFFFF,
           "hop_limit": hop_flow & 0xFF, "tclass": int(p["tclass"], 16),
           "reversible": revers >> 7, "numb_path": revers & 0x7F,
           "pkey": int(p["pkey"], 16), "qos_class": qos_sl[0], "sl": qos_sl[1],
           "preference": int(p["preference"], 16)}
    for name, printed in (("mtu", "mtu"), ("rate", "rate"), ("packet_life_time", "pkt_life")):
        v = int(p[printed], 16)
        out[f"{name}_selector"], out[name] = v >> 6, v & 0x3F
    return out


# `saquery SR` (infiniband-diags saquery.c dump_service_record): "ServiceRecord dump:", then
# one line a field, "\t\t" and a label padded with dots to 24 columns, then the value. The
# ServiceName is printed as its raw bytes up to the first NUL (strncpy of 64 bytes into a
# 65-byte buffer), so the printout is read as bytes, by column, not by pattern.
_SR_LABEL_WIDTH = 24
_SR_DATA = {"ServiceData8": 16, "ServiceData16": 8, "ServiceData32": 4, "ServiceData64": 2}


def saquery_service_records(raw: bytes) -> list[dict]:
    """The ServiceRecords `saquery SR` printed, each {label: value bytes}."""
    out: list[dict] = []
    for line in raw.split(b"\n"):
        if line.startswith(b"ServiceRecord dump:"):
            out.append({})
        elif out and line.startswith(b"\t\t") and len(line) > 2 + _SR_LABEL_WIDTH:
            label = line[2:2 + _SR_LABEL_WIDTH].rstrip(b".").decode()
            out[-1][label] = line[2 + _SR_LABEL_WIDTH:]
    return out


def printed_service_record(p: dict) -> dict:
    """saquery's ServiceRecord fields as ibpath's ServiceRecord fields (service_name: the
    bytes saquery printed; service_key: hex digits, None where saquery hides keys)."""
    key = p["ServiceKey"].decode()
    out = {"service_id": int(p["ServiceID"], 16), "service_gid": p["ServiceGID"].decode(),
           "service_pkey": int(p["ServiceP_Key"], 16),
           "service_lease": int(p["ServiceLease"], 16),
           "service_key": key[2:] if key.startswith("0x") else None,
           "service_name": p["ServiceName"]}
    for label, n in _SR_DATA.items():
        width = label.removeprefix("ServiceData")
        for i in range(n):  # saquery counts from 1, the ComponentMask names from 0
            out[f"service_data{width}_{i}"] = int(p[f"{label}.{i + 1}"], 16)
    return out
