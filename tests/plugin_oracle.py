"""Compare what a generated Lua plugin shows in tshark with what Scapy dissects, field by field.

The oracle is Scapy's dissection of the same bytes; the generator's model only supplies the
mapping from (layer class, field) to the display-filter name being compared.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess

import pytest
from scapy.fields import ConditionalField, IP6Field, MACField, TrailerField

from ibpath_scapy.model.layout import build_layer, flag_items
from tshark_util import tshark_env

TSHARK = shutil.which("tshark")


def need_tshark():
    if TSHARK is None:
        pytest.skip("tshark is not installed (tools/install.sh installs it)")


def assert_no_lua_error(stdout: str, stderr: str) -> None:
    """tshark exits 0 even when a Lua script fails to load or raises: look for it."""
    for text in (stdout, stderr):
        for marker in ("Lua Error", "Lua: Error", "lua_script", "dissector bug",
                       "Unhandled exception", "attempt to"):
            assert marker not in text, f"{marker!r} in tshark output:\n{text[:3000]}"


def tshark(args: list[str], lua: str | None, timeout: int = 300) -> subprocess.CompletedProcess:
    need_tshark()
    cmd = [TSHARK, "-n"]
    if lua:
        cmd += ["-X", f"lua_script:{lua}"]
    p = subprocess.run(cmd + args, capture_output=True, text=True, timeout=timeout,
                       env=tshark_env())
    assert_no_lua_error(p.stdout, p.stderr)
    return p


PI_CHECKSUM, PI_MALFORMED = 0x01000000, 0x07000000


def assert_no_malformed(pcap: str, lua: str | None) -> None:
    """No malformed-packet or bad-checksum expert info anywhere in the file (rule experts,
    group Protocol, are what a faulty capture is for and are checked elsewhere)."""
    p = tshark(["-r", pcap, "-Y", f"_ws.malformed || _ws.expert.group == {PI_MALFORMED} || "
                f"_ws.expert.group == {PI_CHECKSUM}",
                "-T", "fields", "-e", "frame.number", "-e", "_ws.expert.message"], lua)
    assert p.stdout.strip() == "", f"malformed/error experts in {pcap}:\n{p.stdout[:2000]}"


def field_map(classes: list[type], prefix: str = "ibpath") -> dict[tuple[str, str], list[str]]:
    """(class name, field name) → [abbrev, sub-abbrevs of its flag bits...]."""
    used: set[str] = set()
    out = {}
    for cls in classes:
        m = build_layer(cls, prefix, used)
        for s in m.steps:
            if s.item is not None:
                out[(cls.__name__, s.name)] = [s.item.abbrev] + [it.abbrev for it, _, _ in s.flags]
    return out


def _expected(pkt, fname: str, abbrevs: list[str]) -> list[tuple[str, object]]:
    fld = pkt.get_field(fname)
    if isinstance(fld, ConditionalField):
        if not fld._evalcond(pkt):
            return []
        fld = fld.fld
    val = pkt.getfieldval(fname)
    if isinstance(fld, IP6Field):
        return [(abbrevs[0], ipaddress.IPv6Address(val).packed)]
    if isinstance(fld, MACField):
        return [(abbrevs[0], str(val).lower())]
    if isinstance(val, bytes):
        return [(abbrevs[0], val.hex())] if val else []  # a zero-length field adds no item
    if isinstance(fld, TrailerField):
        return [(abbrevs[0], int(val))]
    out = [(abbrevs[0], int(val))]
    if len(abbrevs) > 1:
        for (n, _), sub in zip(flag_items(fld), abbrevs[1:]):
            out.append((sub, (int(val) >> n) & 1))
    return out


def expected_values(pkt, fmap) -> dict[str, list]:
    """abbrev → values in the order the plugin shows them, for every layer of pkt."""
    from scapy.packet import Packet

    exp: dict[str, list] = {}

    def walk(p):
        while p is not None and isinstance(p, Packet) and p.__class__.__name__ != "NoPayload":
            for f in p.fields_desc:
                key = (p.__class__.__name__, f.name)
                if key in fmap:
                    for ab, v in _expected(p, f.name, fmap[key]):
                        exp.setdefault(ab, []).append(v)
                sub = p.getfieldval(f.name)
                if isinstance(sub, list) and sub and isinstance(sub[0], Packet):
                    for item in sub:
                        walk(item)
                elif isinstance(sub, Packet):
                    walk(sub)
            p = p.payload

    walk(pkt)
    return exp


def parse_value(text: str, like):
    if isinstance(like, bytes):  # IPv6
        return ipaddress.IPv6Address(text).packed
    if isinstance(like, str):
        return text.replace(":", "").lower() if not ":" in like else text.lower()
    if text in ("True", "False"):
        return int(text == "True")
    return int(text, 0)


def compare(pcap: str, lua: str, packets: list, fmap) -> int:
    """Run tshark once over pcap and compare every mapped field of every frame; returns the
    number of values compared."""
    abbrevs = sorted({a for v in fmap.values() for a in v})
    args = ["-r", pcap, "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=|",
            "-E", "separator=\t"]
    for a in abbrevs:
        args += ["-e", a]
    p = tshark(args, lua)
    lines = p.stdout.rstrip("\n").split("\n")
    assert len(lines) == len(packets), p.stderr[:2000]
    compared = 0
    for n, (line, pkt) in enumerate(zip(lines, packets), 1):
        cols = dict(zip(abbrevs, line.split("\t")))
        exp = expected_values(pkt, fmap)
        for ab, values in exp.items():
            got_text = cols.get(ab, "")
            got = [x for x in got_text.split("|") if x != ""] if got_text else []
            assert len(got) == len(values), f"frame {n} {ab}: tshark {got_text!r}, scapy {values!r}"
            for g, e in zip(got, values):
                if isinstance(e, str) and not isinstance(e, bytes):
                    g2 = g.replace(":", "").lower()
                    assert g2 == e.replace(":", "").lower(), f"frame {n} {ab}: {g!r} != {e!r}"
                else:
                    assert parse_value(g, e) == e, f"frame {n} {ab}: tshark {g!r}, scapy {e!r}"
                compared += 1
    return compared
