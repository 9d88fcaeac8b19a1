"""Human-readable text for decoded frames (the `ibpath decode` text format), and the one
display convention every ibpath output shares (Scapy's show(), decode text, the HTML report,
the generated Wireshark plugin): LIDs in decimal (the plugin adds hex), MTU, rate and time
exponents as their meaning with the code in parentheses ("2048 (4)", "10 Gb/s (3)", "1.074 s
(18)", "Unknown (7)"), durations in s/ms/µs/ns with 4 significant digits, GIDs as IPv6 text.
The text comes from the layers' own fields (`i2repr`), so it is written once.
"""

from __future__ import annotations

from ..layers.acm import ACM_COUNTERS
from ..layers.cm import CMReq
from ..layers.coded import coded_text, MTU_CODES, RATE_CODES, time_exponent_text
from ..layers.pathdata import flags_text
from ..layers.sa import SA_RECORD_CLASSES, SELECTORS, PathRecord, ServiceRecord

_SEL = {0: ">", 1: "<", 2: "=", 3: "best"}
_FIELDS = {f.name: f for cls in (CMReq, PathRecord) for f in cls.fields_desc}


def field_text(name: str, value) -> str:
    """A PathRecord or CM REQ field's value as every ibpath text shows it (the layer field's
    own repr): 'dlid' 58 → '58', 'mtu' 4 → '2048 (4)', 'pkey' 0xffff → '0xffff'."""
    fld = _FIELDS.get(name)
    if value is None:
        return ""
    if fld is None or not isinstance(value, int):
        return str(value)
    return str(fld.i2repr(None, value))


def record_field_text(cls, name: str, value) -> str:
    """A field of an SA record of layer class cls as its layer shows it (hex where the
    field is hex; a name, already text, in quotes)."""
    fld = next((f for f in getattr(cls, "fields_desc", ()) if f.name == name), None)
    if isinstance(value, str) and getattr(fld, "as_text", False):
        return f'"{value}"'
    if fld is None or not isinstance(value, int):
        return field_text(name, value)
    return str(fld.i2repr(None, value))


def _selected(rec: dict, name: str) -> str:
    sel = _SEL.get(rec[f"{name}_selector"], "?")
    return f"{sel}{field_text(name, rec[name])}"


def query_line(rec: dict, components: list[str]) -> str:
    """The components a query selects, as name=value."""
    parts = []
    for name in components:
        base = name.removesuffix("_msb").removesuffix("_lsb")
        if base in rec and f"{base}=" not in " ".join(parts):
            parts.append(f"{base}={field_text(base, rec[base])}")
    return " ".join(parts) or "(no components)"


def path_record_line(rec: dict) -> str:
    flags = []
    if rec["reversible"]:
        flags.append("reversible")
    if rec["raw_traffic"]:
        flags.append("raw")
    return (
        f"{rec['sgid']} → {rec['dgid']}  slid {rec['slid']} dlid {rec['dlid']}  "
        f"pkey 0x{rec['pkey']:04x} sl {rec['sl']} qos {rec['qos_class']}  "
        f"mtu {_selected(rec, 'mtu')} rate {_selected(rec, 'rate')} "
        f"plt {_selected(rec, 'packet_life_time')}  "
        f"flow 0x{rec['flow_label']:05x} hop {rec['hop_limit']} tclass {rec['tclass']}  "
        f"numb_path {rec['numb_path']} pref {rec['preference']}  sid 0x{rec['service_id']:016x}"
        + (f"  [{', '.join(flags)}]" if flags else "")
    )


def frame_text(d: dict) -> list[str]:
    """Lines describing one decoded frame."""
    head = f"frame {d['frame']:>6}  "
    if d["kind"] in ("ls", "blob", "rdma_netlink") or d.get("encap") == "netlink":
        return _netlink_or_blob_text(head, d)
    if d["kind"] == "malformed" and "mad" not in d:
        return [head + f"MALFORMED: {d['error']}"]
    if d["kind"] in ("unsupported", "crc"):  # about the file, made at its end
        return [head + (f"! {d['error']}" if "error" in d else d["note"])]
    if d["kind"] in ("ucma", "acm"):
        return _process_text(head, d)
    if d["kind"] == "note":
        return [head + f"ibpath record note: {d['note']}"]
    lines = []
    where = f"{d.get('src', '?')} → {d.get('dst', '?')}"
    mad = d.get("mad")
    if mad:
        attr = mad["attribute_name"] or f"0x{mad['attribute_id']:04x}"
        status = "" if not mad["status"] else f"  status 0x{mad['status']:04x} {mad['status_text']}"
        lines.append(head + f"{where}  {d['kind'].upper()} {mad['method_name']}({attr}) "
                     f"tid 0x{mad['transaction_id']:016x}{status}")
    if d["kind"] == "malformed":
        lines.append("        MALFORMED: " + d["error"])
    if "umad" in d:
        lines += _umad_lines(d["umad"])
    rmpp = d.get("rmpp")
    if rmpp and rmpp["rmpp_flags"]:
        names = [n for b, n in ((1, "ACTIVE"), (2, "FIRST"), (4, "LAST")) if rmpp["rmpp_flags"] & b]
        lines.append(f"        RMPP type {rmpp['rmpp_type']} seg {rmpp['segment_number']} "
                     f"paylen {rmpp['payload_length']} flags {'|'.join(names)} "
                     f"rresptime {rmpp['r_resp_time']}")
    if "rmpp_dropped" in d:
        lines.append(f"        RMPP segment dropped by the receiver: {d['rmpp_dropped']}")
    sa = d.get("sa")
    if sa and mad and not mad["method"] & 0x80:
        lines.append(f"        component mask 0x{sa['component_mask']:016x}: {' '.join(sa['components'])}")
    if "reassembled_from" in d:
        lines.append(f"        reassembled from frames {d['reassembled_from']}")
    is_query = bool(mad) and not mad["method"] & 0x80
    for i, rec in enumerate(d.get("path_records", [])):
        text = query_line(rec, sa["components"]) if is_query and sa else path_record_line(rec)
        lines.append(f"        PathRecord[{i}] {text}")
    name = mad.get("attribute_name", "record") if mad else "record"
    cls = SA_RECORD_CLASSES.get(mad["attribute_id"]) if mad else None
    for i, rec in enumerate(d.get("sa_records", [])):
        shown = [k for k in rec if k in sa["components"]] if is_query and sa else list(rec)
        text = " ".join(f"{k}={record_field_text(cls, k, rec[k])}" for k in shown)
        lines.append(f"        {name}[{i}] {text or '(no components)'}")
    lines += blob_lines(d)
    req = d.get("cm_req")
    if req:
        lines.append(f"        REQ comm_id 0x{req['local_comm_id']:08x} sid 0x{req['service_id']:016x} "
                     f"pkey 0x{req['pkey']:04x} mtu {field_text('path_packet_payload_mtu', req['path_packet_payload_mtu'])}")
        for p in ("primary", "alternate"):
            if req[f"{p}_local_lid"] or req[f"{p}_local_gid"] != "::":
                lines.append(
                    f"        {p:9} {req[f'{p}_local_gid']} (lid {req[f'{p}_local_lid']}) → "
                    f"{req[f'{p}_remote_gid']} (lid {req[f'{p}_remote_lid']})  "
                    f"flow 0x{req[f'{p}_flow_label']:05x} "
                    f"rate {field_text(f'{p}_packet_rate', req[f'{p}_packet_rate'])} "
                    f"tclass {req[f'{p}_traffic_class']} hop {req[f'{p}_hop_limit']} sl {req[f'{p}_sl']} "
                    f"ack_timeout {field_text(f'{p}_local_ack_timeout', req[f'{p}_local_ack_timeout'])}")
    elif d.get("cm"):
        cm = d["cm"]
        lines.append(f"        {cm['message']} local_comm_id 0x{cm['local_comm_id']:08x}"
                     + (f" remote_comm_id 0x{cm['remote_comm_id']:08x}" if "remote_comm_id" in cm else ""))
    for e in d.get("errors", []):
        lines.append(f"        ! {e}")
    return lines


def _umad_lines(u: dict) -> list[str]:
    """How a process wrote or read a MAD on a umad fd: its header's addressing, the answer's
    request and the TID the kernel rewrote."""
    h = u["header"]
    grh = f" gid {h['gid']} (index {h['gid_index']})" if h["grh_present"] else ""
    where = (f"        umad {u.get('direction') or '?'} agent {h['agent_id']} lid {h['lid']} "
             f"qpn {h['qpn']} sl {h['sl']} pkey_index {h['pkey_index']}{grh}"
             f"{_call_text(u)}")
    lines = [where]
    if "request_frame" in u:
        written = ""
        if "written_tid" in u:
            written = (f"; written with tid 0x{u['written_tid']:016x}: the kernel put its "
                       f"agent's hi_tid in the upper 32 bits")
        lines.append(f"        answers the request of frame {u['request_frame']}{written}")
    return lines


def _call_text(d: dict) -> str:
    c = d.get("call")
    if not c:
        return ""
    rc = "" if c.get("rc") is None else f" rc={c['rc']}" + (f" {c['errno']}" if c.get("errno") else "")
    return f"  [pid {c['pid']} tid {c['tid']} fd {c['fd']}{rc}]"


def _process_text(head: str, d: dict) -> list[str]:
    """A ucma command or an ACM message (ibpath record)."""
    if d["kind"] == "ucma":
        parts = [d["command"]] + ([f"id {d['id']}"] if "id" in d else [])
        if "dst" in d:
            parts.append(f"{d['src']} → {d['dst']}")
        if "event" in d:
            parts.append(f"{d['event']} status {d['status']}")
        if "level" in d:
            parts.append(f"{d['level']}/{d['optname']} optlen {d['optlen']}")
        if "option" in d:
            parts.append(d["option"] + (f": {d['num_paths']} path(s)" if "num_paths" in d else "")
                         + (f": {d['num_service_recs']} service record(s), "
                            f"{len(d['service_records'])} copied"
                            if "num_service_recs" in d else ""))
        if "service_flags" in d:
            parts.append(f"sid 0x{d['service_id']:016x} name \"{d['service_name']}\" flags "
                         + ("|".join(d["service_flags"]) or "0"))
        lines = [head + "ucma  " + "  ".join(parts) + _call_text(d)]
        for i, rec in enumerate(d.get("paths", [])):
            lines.append(f"        path[{i}] flags 0x{rec['flags']:02x} {flags_text(rec['flags'])}  "
                         + path_record_line(rec["path_record"]))
        for i, rec in enumerate(d.get("service_records", [])):
            lines.append(f"        ServiceRecord[{i}] " + " ".join(
                f"{k}={record_field_text(ServiceRecord, k, v)}" for k, v in rec.items()))
    else:
        a = d["acm"]
        lines = [head + f"acm  {a['opcode_name'] or a['opcode']} status "
                 f"{a['status_name'] or a['status']} tid 0x{a['tid']:x} length {a['length']}"
                 + _call_text(d)]
        for e in d.get("entries", []):
            what = (path_record_line(e["path_record"]) if "path_record" in e
                    else e.get("address", ""))
            lines.append(f"        entry[{e['index']}] {e['type_name'] or e['type']} flags "
                         f"0x{e['flags']:x} {flags_text(e['flags']) if 'path_record' in e else '|'.join(e['flag_names'])}  {what}")
        if "counters" in d:
            names = list(ACM_COUNTERS) + [f"counter {i}" for i in
                                          range(len(ACM_COUNTERS), len(d["counters"]))]
            lines.append("        counters " + ", ".join(
                f"{n} {v}" for n, v in zip(names, d["counters"])))
        if "endpoint" in d:
            ep = d["endpoint"]
            lines.append(f"        endpoint guid 0x{ep['dev_guid']:016x} port {ep['port_num']}/"
                         f"{ep['phys_port_cnt']} pkey 0x{ep['pkey']:04x} provider "
                         f"{ep['provider']}  " + ", ".join(ep["addresses"]))
    for e in d.get("errors", []):
        lines.append(f"        ! {e}")
    return lines


def blob_lines(d: dict) -> list[str]:
    """The records of a blob and each kernel profile's choice."""
    lines = []
    for i, rec in enumerate(d.get("blob_records", [])):
        reserved = f" reserved 0x{rec['reserved']:x}" if rec["reserved"] else ""
        lines.append(f"        record[{i}] flags 0x{rec['flags']:02x} {flags_text(rec['flags'])}{reserved}  "
                     + path_record_line(rec["path_record"]))
    for name, v in d.get("kernel_view", {}).items():
        lines.append(f"        kernel {name:12} {kernel_choice_text(v)}")  # ls-multi-6.1
    return lines


def kernel_choice_text(v: dict) -> str:
    """One profile's choice: the record index of each path, or the rejection."""
    roles = [f"{role} {v[role]}" for role in ("gmp", "forward", "inbound", "alternate")
             if v.get(role) is not None]
    if v["accepted"]:
        return "takes " + ", ".join(roles)
    why = "; ".join(v["notes"][-1:])
    return f"{v['outcome']}: {v['action']}" + (f" ({why})" if why else "")


def _attr_text(a: dict) -> str:
    m = "*" if a["mandatory"] else ""  # RDMA_NLA_F_MANDATORY
    if "value" in a:
        v = a["value"]
        v = hex(v) if isinstance(v, int) and a["type_name"] in ("SERVICE_ID", "PKEY", "TCLASS") else v
        return f"{a['type_name']}{m}={v}"
    if "blob_record" in a:
        return f"{a['type_name']}{m}=record[{a['blob_record']}]"
    return f"{a['type_name']}{m} len={a['nla_len']}"


def _netlink_or_blob_text(head: str, d: dict) -> list[str]:
    lines = []
    if d["kind"] == "malformed":
        lines.append(head + f"netlink {d.get('direction', '?')}  MALFORMED: {d['error']}")
    elif d["kind"] == "blob":
        b = d["blob"]
        where = "raw blob file" if d.get("encap") == "raw" else "blob (exported PDU)"
        res = f"  rdma_set_option={b['set_option_result']}" if "set_option_result" in b else ""
        lines.append(head + f"{where}  {b['records']} record(s), {b['length']} bytes{res}")
    elif d["kind"] == "ls":
        ls = d["ls"]
        what = "request" if ls["request"] else "response"
        err = " [LS_F_ERR]" if ls["error"] else ""
        lines.append(head + f"netlink {d['direction'].replace('_', ' ')}  LS {ls['op']} {what} "
                     f"seq {ls['seq']}{err}")
        if "path_use" in ls:
            lines.append(f"        device {ls['device_name'] or '?'} port {ls['port_num']} "
                         f"path_use {ls['path_use_name']}")
        if "request_frame" in ls:
            lines.append(f"        answers frame {ls['request_frame']} (path_use "
                         f"{ls['request_path_use']})")
        attrs = [_attr_text(a) for a in ls.get("attributes", []) if "blob_record" not in a]
        if attrs:
            lines.append("        attributes (* mandatory): " + " ".join(attrs))
    else:
        n = d["netlink"]
        lines.append(head + f"netlink {d['direction'].replace('_', ' ')}  RDMA client "
                     f"{n.get('client_name') or n['rdma_client']} op {n['rdma_op']} "
                     f"seq {n['nlmsg_seq']}")
    lines += blob_lines(d)
    for e in d.get("errors", []):
        lines.append(f"        ! {e}")
    return lines


__all__ = ["frame_text", "field_text", "path_record_line", "blob_lines", "kernel_choice_text",
           "SELECTORS", "MTU_CODES", "RATE_CODES", "coded_text", "time_exponent_text"]
