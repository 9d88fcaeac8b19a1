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
