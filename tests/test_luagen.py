"""The generator on Scapy layers it was not written for: every field kind it maps, declared
hints for what Scapy says in lambdas, clear refusals, and hostile names kept inert."""

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from scapy.fields import (
    BitEnumField,
    BitField,
    ByteEnumField,
    ByteField,
    ConditionalField,
    FieldLenField,
    FlagsField,
    IntField,
    IP6Field,
    LEIntField,
    LEShortField,
    MACField,
    MultipleTypeField,
    PacketListField,
    ShortField,
    StrFixedLenField,
    StrLenField,
    X3BytesField,
    XBitField,
    XLongField,
)
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw, bind_layers

from ibpath_scapy.model import crcspec
from ibpath_scapy.model.expr import F, LUA_RUNTIME
from ibpath_scapy.model.hints import ByteOrderHint, LengthHint, ListHint, WhenHint
from ibpath_scapy.luagen import GeneratorError, Spec, generate
from ibpath_scapy.luagen import plugin as luagen_plugin
from ibpath_scapy.luagen.emit import constants_lua
from ibpath_scapy.luagen.lua import lua_str
from ibpath_scapy.model.layout import header_layout
from ibpath_scapy.capture.pcapio import PcapWriter

from plugin_oracle import compare, field_map, tshark
from tshark_util import tshark_env

PORT = 47123


class Item(Packet):
    name = "Item"
    fields_desc = [ShortField("key", 0), ByteEnumField("colour", 0, {0: "red", 1: "green"}),
                   XBitField("nib", 0, 4), BitField("low", 0, 4)]

    def extract_padding(self, s):
        return b"", s


class Gadget(Packet):
    """A made-up layer with every field kind the generator maps."""

    name = "Gadget"
    fields_desc = [
        ByteEnumField("kind", 1, {1: "plain", 2: "with option"}),
        BitField("a", 0, 3), BitEnumField("b", 0, 13, {0: "zero", 8191: "all ones"}),
        XBitField("c", 0, 20), BitField("d", 0, 4),  # 40-bit run, c straddles 3 bytes
        BitField("w4", 0, 4), BitField("wide", 0, 36),  # 36 bits past a nibble: no mask fits
        LEShortField("le16", 0), LEIntField("le32", 0), XLongField("big", 0),
        # big-endian for kind 2, little-endian otherwise (ACM's length, by opcode)
        MultipleTypeField([(IntField("either", 0), lambda p: p.kind == 2)], LEIntField("either", 0)),
        X3BytesField("three", 0),
        FlagsField("fl", 0, 12, ["f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9",
                                 "f10", "f11"]),
        BitField("pad4", 0, 4),
        FlagsField("wideflags", 0, 64, [f"w{i}" for i in range(64)]),
        FlagsField("leflags", 0, -32, [f"l{i}" for i in range(32)]),
        IP6Field("gid", "::"), MACField("mac", "00:00:00:00:00:00"),
        StrFixedLenField("blob", b"", 5),
        FieldLenField("n", None, count_of="items", fmt="B"),
        PacketListField("items", [], Item, count_from=lambda p: p.n),
        ConditionalField(ShortField("opt", 0), lambda p: p.kind == 2),
        FieldLenField("slen", None, length_of="s", fmt="B"),
        StrLenField("s", b"", length_from=lambda p: p.slen),
    ]
    field_hints = {
        "items": ListHint(count=F("n"), stride=F("n") * 0 + 4, selector=F("n") * 0, classes={0: Item}),
        "opt": WhenHint(F("kind") == 2),
        "s": LengthHint(F("slen")),
        "either": ByteOrderHint(F("kind") == 2),
    }


bind_layers(UDP, Gadget, dport=PORT)

REGISTER = f"""
local reg = Proto("gadgettest", "gadget test")
function reg.dissector(tvb, pinfo, tree)
  return D["Gadget"](tvb, pinfo, tree, 0, {{limit = tvb:len(), v = {{}}, at = {{}}}})
end
DissectorTable.get("udp.port"):add({PORT}, reg)
"""


def make_gadget(rnd: random.Random) -> Gadget:
    kind = rnd.choice([1, 2])
    items = [Item(key=rnd.randrange(65536), colour=rnd.randrange(2), nib=rnd.randrange(16),
                  low=rnd.randrange(16)) for _ in range(rnd.randrange(4))]
    edge = lambda bits: rnd.choice([0, (1 << bits) - 1, rnd.randrange(1 << bits)])  # noqa: E731
    return Gadget(kind=kind, a=edge(3), b=edge(13), c=edge(20), d=edge(4), w4=edge(4),
                  wide=edge(36), le16=edge(16), le32=edge(32), big=edge(64), three=edge(24),
                  either=rnd.choice([0x01020304, edge(32)]),
                  fl=edge(12), pad4=edge(4), wideflags=edge(64), leflags=edge(32),
                  gid=":".join(f"{rnd.randrange(65536):x}" for _ in range(8)),
                  mac=":".join(f"{rnd.randrange(256):02x}" for _ in range(6)),
                  blob=rnd.randbytes(5), items=items, opt=edge(16),
                  s=rnd.randbytes(rnd.randrange(6)))


def write_plugin(tmp_path, spec: Spec) -> str:
    lua = tmp_path / "gen.lua"
    lua.write_text(generate(spec))
    luac = shutil.which("luac5.4")
    if luac:
        p = subprocess.run([luac, "-p", str(lua)], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
    return str(lua)


def test_made_up_layer_values_equal_scapy(tmp_path):
    lua = write_plugin(tmp_path, Spec(prefix="gadget", entry_layers=[Gadget], extra_lua=REGISTER))
    rnd = random.Random(7)
    pkts = [Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1000, dport=PORT)
            / make_gadget(rnd) for _ in range(120)]
    path = tmp_path / "g.pcap"
    with PcapWriter(str(path), 1) as w:
        for i, p in enumerate(pkts):
            w.write(bytes(p), float(i))
    dissected = [Ether(bytes(p)) for p in pkts]
    assert all(d.haslayer(Gadget) for d in dissected)
    n = compare(str(path), lua, dissected, field_map([Gadget, Item], "gadget"))
    assert n > 120 * 100


def test_truncated_made_up_layer_reports_not_raises(tmp_path):
    lua = write_plugin(tmp_path, Spec(prefix="gadget", entry_layers=[Gadget], extra_lua=REGISTER))
    full = bytes(Ether() / IP() / UDP(sport=1000, dport=PORT) / make_gadget(random.Random(1)))
    path = tmp_path / "t.pcap"
    with PcapWriter(str(path), 1) as w:
        for k in range(42, len(full) + 1):
            w.write(full[:k])
    out = tshark(["-r", str(path), "-V"], lua).stdout
    assert "Truncated" in out


def test_lambda_without_hint_is_refused_with_a_clear_error():
    class NoHint(Packet):
        fields_desc = [FieldLenField("n", None, length_of="s", fmt="B"),
                       StrLenField("s", b"", length_from=lambda p: p.n)]

    with pytest.raises(GeneratorError, match=r"NoHint\.s: a variable-length field needs a LengthHint"):
        generate(Spec(prefix="x", entry_layers=[NoHint]))

    class Cond(Packet):
        fields_desc = [ConditionalField(ShortField("o", 0), lambda p: True)]

    with pytest.raises(GeneratorError, match="WhenHint"):
        generate(Spec(prefix="x", entry_layers=[Cond]))

    class Either(Packet):
        fields_desc = [ByteField("k", 0),
                       MultipleTypeField([(ShortField("n", 0), lambda p: p.k)], LEShortField("n", 0))]

    with pytest.raises(GeneratorError, match=r"Either\.n: a MultipleTypeField needs a ByteOrderHint"):
        generate(Spec(prefix="x", entry_layers=[Either]))

    class Other(Packet):
        fields_desc = [ByteField("k", 0),
                       MultipleTypeField([(IntField("n", 0), lambda p: p.k)], LEShortField("n", 0))]
        field_hints = {"n": ByteOrderHint(F("k") == 1)}

    with pytest.raises(GeneratorError, match=r"Other\.n: a MultipleTypeField is modelled only "
                       "as one integer in both byte orders"):
        generate(Spec(prefix="x", entry_layers=[Other]))


HOSTILE = [
    'quote " and \' apostrophe',
    "new\nline and \r return",
    "]] long bracket close [[",
    "--[[ comment open",
    '"); os.exit(1); print("',
    "\\ backslash \\0 nul \x00 byte",
    "ünïcødé ✓",
]


def test_hostile_names_are_inert(tmp_path):
    """Scapy needs identifiers for field names; everything else a layer author writes
    (class name, layer title, lua_layer, enum labels, flag names) may be anything."""
    enum = {i: s for i, s in enumerate(HOSTILE)}
    Evil = type('Evil"]]\n', (Packet,), {
        "name": 'Evil "layer" ]] --',
        "lua_layer": 'ev"il]]',
        "fields_desc": [ByteEnumField("x", 0, enum),
                        FlagsField("fl", 0, 8, HOSTILE + ["last"]),
                        ShortField("y", 0)],
    })
    reg = REGISTER.replace('D["Gadget"]', f"D[{lua_str(Evil.__name__)}]")
    lua = write_plugin(tmp_path, Spec(prefix="evil", entry_layers=[Evil], extra_lua=reg))
    text = open(lua).read()
    for s in HOSTILE:
        assert not any(c in s for c in "\"'\\\n\r\x00") and s.isascii() or s not in text
    path = tmp_path / "e.pcap"
    with PcapWriter(str(path), 1) as w:
        for i in range(len(HOSTILE)):
            w.write(bytes(Ether() / IP() / UDP(sport=1000, dport=PORT) / Raw(bytes([i, 0xFF, 0, 7]))))
    out = tshark(["-r", str(path), "-V"], lua).stdout
    assert out.count("Evil") >= len(HOSTILE)
    assert "]] long bracket close [[" in out and "ünïcødé ✓" in out  # shown verbatim, not run
    g = subprocess.run(["tshark", "-G", "fields", "-X", f"lua_script:{lua}"], capture_output=True,
                       text=True, timeout=120, env=tshark_env())  # -G must come first
    names = g.stdout
    assert "evil.ev_il" in names and "evil.ev_il.x" in names


def test_lua_str_round_trips_through_lua():
    lua = shutil.which("lua5.4")
    if lua is None:
        pytest.skip("lua5.4 not installed")
    for s in HOSTILE:
        p = subprocess.run([lua, "-e", f"io.write({lua_str(s)})"], capture_output=True)
        assert p.returncode == 0 and p.stdout == s.encode()


def test_display_hints_come_from_the_fields():
    """A field's own `lua_base` sets the display base (LIDs: DEC_HEX), and fields with the same
    code table share one value string (the coded MTU, rate and time fields)."""
    from ibpath_scapy.layers.coded import LIDField, MTUField, RateField, TimeExponentField

    class Coded(Packet):
        name = "Coded"
        fields_desc = [LIDField("dlid", 0), MTUField("mtu", 4, 6), RateField("rate", 3, 6),
                       BitField("pad", 0, 4), MTUField("mtu2", 4, 4),
                       TimeExponentField("plt", 18, 6), TimeExponentField("plt2", 18, 6),
                       RateField("rate2", 3, 6), BitField("pad2", 0, 2)]

    lua = generate(Spec(prefix="coded", entry_layers=[Coded]))
    assert 'ProtoField.uint16("coded.coded.dlid", "DLID", base.DEC_HEX' in lua
    tables = [line for line in lua.splitlines() if line.startswith("VS[")]
    assert len(tables) == 3, tables  # MTU, rate, the 6-bit times: each once
    assert any('[4] = "2048"' in t for t in tables)
    assert any('[18] = "1.074 s"' in t for t in tables)


# -- the plugin's layouts and constants: generated from the layers, not restated ------------

RUNTIME_LUA = Path(luagen_plugin.__file__).with_name("runtime.lua")

# The numeric literals runtime.lua may still hold: each with why it says nothing about a format,
# and (when the value is also an offset or size somewhere) the only lines it may appear on.
ALLOWED_LITERALS = {
    0: ("zero: empty counts and values, first indices, value string 'Bad'", None),
    1: ("one: Lua's 1-based strings, the next index or item, value string 'Good', "
        "the first RMPP segment", None),
    2: ("the radix of a bit (field_bits: a field's lowest bit weighs 2 ^ shift)",
        r"floor\(x / 2 \^ f\.shift\)"),
    8: ("the bits of a byte (CRC table, CRC byte shift)",
        r"for _ = 1, 8 do|rshift\(crc, 8\)"),
    255: ("a byte's largest value (CRC table range, byte mask 0xFF in the CRC loops)",
          r"for i = 0, 255 do|CRC(32|16)_T\[band\(bxor\(crc, byte\(s, i\)\), 0xFF\)\]"),
    256: ("the radix of a byte (integers from bytes and back)", r"[*%/] 256\b"),
    1e9: ("nanoseconds in a second (NSTime)", r"NSTime\.new\("),
}
_LUA_NUMBER = re.compile(r"(?<![\w.])(0[xX][0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?![\w.])")
_LUA_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'')


def lua_code(line: str) -> str:
    """A line of Lua without its string literals and comment (runtime.lua has no long ones)."""
    code = _LUA_STRING.sub('""', line)
    return code.split("--", 1)[0]


def numeric_literals(text: str):
    """(line number, value, line) of every numeric literal in Lua code."""
    for n, line in enumerate(text.splitlines(), 1):
        for m in _LUA_NUMBER.finditer(lua_code(line)):
            lit = m.group(1)
            value = int(lit, 16) if lit.lower().startswith("0x") else (
                float(lit) if any(c in lit for c in ".eE") else int(lit))
            yield n, value, line


def disallowed_literals(text: str, allowed: dict) -> list[str]:
    bad = []
    for n, value, line in numeric_literals(text):
        why = allowed.get(value)
        if why is None or (why[1] is not None and not re.search(why[1], line)):
            bad.append(f"line {n}: {value!r} in {line.strip()!r}")
    return bad


def test_literal_scanner_finds_what_it_must():
    text = 'local a = 0x64 -- 4791\nlocal b = x + 8 .. "20" .. c2d\nfor _ = 1, 8 do end\nlocal e = 1e9'
    assert [(n, v) for n, v, _ in numeric_literals(text)] == [(1, 0x64), (2, 8), (3, 1), (3, 8), (4, 1e9)]
    assert disallowed_literals(text, ALLOWED_LITERALS) == [
        "line 1: 100 in 'local a = 0x64 -- 4791'",
        "line 2: 8 in 'local b = x + 8 .. \"20\" .. c2d'",
        "line 4: 1000000000.0 in 'local e = 1e9'"]


def test_runtime_lua_states_no_offset_or_constant():
    """Offsets, sizes, opcodes, ports, flags, CRC polynomials and masks come from the
    generated block (LAYOUT, HDR_LEN, constants); runtime.lua keeps only the literals of
    ALLOWED_LITERALS, on the lines they are allowed on."""
    bad = disallowed_literals(RUNTIME_LUA.read_text(), ALLOWED_LITERALS)
    assert not bad, "runtime.lua restates a format: use LAYOUT/HDR_LEN or a generated constant:\n" + "\n".join(bad)


def test_engine_helper_is_fresh_and_states_no_offset():
    helper = luagen_plugin.ENGINE_HELPER.read_text()
    assert helper == luagen_plugin.engine_helper_lua(helper), (
        "ibpath_scapy/data/engine_helper.lua's generated block is stale: run "
        "`python -m ibpath_scapy.luagen` and commit it")
    begin, end = helper.index(luagen_plugin.HELPER_BEGIN), helper.index(luagen_plugin.HELPER_END)
    hand_written = helper[:begin] + helper[end:]
    allowed = {0: ALLOWED_LITERALS[0], 1: ALLOWED_LITERALS[1],
               2: ("the flag's bit is set: the quotient is odd", r"% 2 == 1")}
    assert not disallowed_literals(hand_written, allowed)


def test_layouts_and_constants_come_before_the_runtime():
    text = luagen_plugin.generate_plugin()
    block = constants_lua(luagen_plugin.RUNTIME_LAYOUTS, luagen_plugin.runtime_constants())
    runtime = RUNTIME_LUA.read_text().strip()
    assert block in text and runtime in text
    assert text.index(block) < text.index(runtime)


# Oracle: the headers as the IBA spec, the kernel and the RFCs tabulate them
# (wire-formats.md §1-2, §4.1-4.2, §6.2; RFC 791, 768, 8200; Linux if_packet.h/netlink.h,
# Wireshark exported_pdu_tlvs.h), written here by hand: header → (base, length, fields), a field
# as (byte, bytes, mask within those bytes or None for all of them). `base` is where the
# table's offsets start (the RMPP and SA tables count from the MAD's first byte).
ORACLE = {
    "LRH": (0, 8, {"vl": (0, 1, 0xF0), "lver": (0, 1, 0x0F), "sl": (1, 1, 0xF0),
                   "reserved_10": (1, 1, 0x0C), "lnh": (1, 1, 0x03), "dlid": (2, 2, None),
                   "reserved_32": (4, 2, 0xF800), "pkt_len": (4, 2, 0x07FF), "slid": (6, 2, None)}),
    "GRH": (0, 40, {"ipver": (0, 4, 0xF0000000), "tclass": (0, 4, 0x0FF00000),
                    "flowlabel": (0, 4, 0x000FFFFF), "paylen": (4, 2, None),
                    "nexthdr": (6, 1, None), "hoplmt": (7, 1, None), "sgid": (8, 16, None),
                    "dgid": (24, 16, None)}),
    "BTH": (0, 12, {"opcode": (0, 1, None), "solicited": (1, 1, 0x80), "migreq": (1, 1, 0x40),
                    "padcount": (1, 1, 0x30), "version": (1, 1, 0x0F), "pkey": (2, 2, None),
                    "fecn": (4, 1, 0x80), "becn": (4, 1, 0x40), "resv6": (4, 1, 0x3F),
                    "dqpn": (4, 4, 0x00FFFFFF), "ackreq": (8, 1, 0x80), "resv7": (8, 1, 0x7F),
                    "psn": (8, 4, 0x00FFFFFF)}),
    "DETH": (0, 8, {"q_key": (0, 4, None), "reserved_32": (4, 1, None),
                    "src_qp": (4, 4, 0x00FFFFFF)}),
    "MAD": (0, 24, {"base_version": (0, 1, None), "mgmt_class": (1, 1, None),
                    "class_version": (2, 1, None), "method": (3, 1, None), "status": (4, 2, None),
                    "class_specific": (6, 2, None), "transaction_id": (8, 8, None),
                    "attribute_id": (16, 2, None), "reserved_144": (18, 2, None),
                    "attribute_modifier": (20, 4, None)}),
    "RMPP": (24, 12, {"rmpp_version": (24, 1, None), "rmpp_type": (25, 1, None),
                      "r_resp_time": (26, 1, 0xF8), "rmpp_flags": (26, 1, 0x07),
                      "rmpp_status": (27, 1, None), "segment_number": (28, 4, None),
                      "payload_length": (32, 4, None)}),
    "SAHeader": (36, 20, {"sm_key": (36, 8, None), "attribute_offset": (44, 2, None),
                          "reserved_80": (46, 2, None), "component_mask": (48, 8, None)}),
    "IP": (0, 20, {"version": (0, 1, 0xF0), "ihl": (0, 1, 0x0F), "tos": (1, 1, None),
                   "len": (2, 2, None), "id": (4, 2, None), "flags": (6, 2, 0xE000),
                   "frag": (6, 2, 0x1FFF), "ttl": (8, 1, None), "proto": (9, 1, None),
                   "chksum": (10, 2, None), "src": (12, 4, None), "dst": (16, 4, None)}),
    "IPv6": (0, 40, {"version": (0, 4, 0xF0000000), "tc": (0, 4, 0x0FF00000),
                     "fl": (0, 4, 0x000FFFFF), "plen": (4, 2, None), "nh": (6, 1, None),
                     "hlim": (7, 1, None), "src": (8, 16, None), "dst": (24, 16, None)}),
    "UDP": (0, 8, {"sport": (0, 2, None), "dport": (2, 2, None), "len": (4, 2, None),
                   "chksum": (6, 2, None)}),
    "ExportedPDUTag": (0, 4, {"tag": (0, 2, None), "length": (2, 2, None)}),
    "NetlinkCooked": (0, 16, {"pkttype": (0, 2, None), "hatype": (2, 2, None),
                              "halen": (4, 2, None), "addr": (6, 8, None),
                              "protocol": (14, 2, None)}),
    # host (little-endian) order: masks apply to the integer read little-endian; nlmsg_type
    # is RDMA_NL_GET_TYPE(client, op) = client << 10 | op
    "RdmaNLMsgHdr": (0, 16, {"nlmsg_len": (0, 4, None), "rdma_client": (4, 2, 0xFC00),
                             "rdma_op": (4, 2, 0x03FF), "nlmsg_flags": (6, 2, None),
                             "nlmsg_seq": (8, 4, None), "nlmsg_pid": (12, 4, None)}),
}
ORACLE_LITTLE_ENDIAN = {"RdmaNLMsgHdr"}
ORACLE_TRAILERS = {"LRH": {"vcrc": 2}, "BTH": {"icrc": 4}}


def _bits(off: int, nbytes: int, mask: int | None, little_endian: bool) -> tuple:
    """A field as what it covers: big-endian, the set of bit numbers from the header's first
    bit (MSB first); little-endian, its window and the mask of the integer read from it."""
    if little_endian:
        return off, nbytes, mask if mask is not None else (1 << 8 * nbytes) - 1
    width = 8 * nbytes
    mask = (1 << width) - 1 if mask is None else mask
    return frozenset(8 * off + width - 1 - k for k in range(width) if mask >> k & 1)


def oracle_fields(key: str) -> dict:
    base, _, fields = ORACLE[key]
    le = key in ORACLE_LITTLE_ENDIAN
    return {name: _bits(off - base, n, mask, le) for name, (off, n, mask) in fields.items()}


def emitted_fields(fields: dict, le_of) -> dict:
    """LAYOUT entries ({off, len, shift, mask} or FieldLayout attributes) in oracle form."""
    out = {}
    for name, f in fields.items():
        if f["trailer"]:
            continue
        mask = None if f["mask"] is None else f["mask"] << f["shift"]
        out[name] = _bits(f["off"], f["len"], mask, le_of(f))
    return out


def _python_layout(key: str) -> dict:
    cls = {c.__name__: c for c in luagen_plugin.RUNTIME_LAYOUTS}[key]
    lay = header_layout(cls)
    return lay.fixed_len, {f.name: {"off": f.off, "len": f.nbytes, "mask": f.mask,
                                    "shift": f.shift, "le": f.little_endian, "trailer": f.trailer}
                           for f in lay.fields.values()}


def test_runtime_layouts_are_the_headers_the_oracle_has():
    assert sorted(c.__name__ for c in luagen_plugin.RUNTIME_LAYOUTS) == sorted(ORACLE)


@pytest.mark.parametrize("key", sorted(ORACLE))
def test_header_layout_equals_the_spec_tables(key):
    fixed_len, fields = _python_layout(key)
    assert fixed_len == ORACLE[key][1]
    assert emitted_fields(fields, lambda f: f["le"]) == oracle_fields(key)
    trailers = {n: f["len"] for n, f in fields.items() if f["trailer"]}
    assert trailers == ORACLE_TRAILERS.get(key, {})
    assert all(f["le"] == (key in ORACLE_LITTLE_ENDIAN) for f in fields.values() if not f["trailer"])


# What the Lua block says, read back by running it.
_DUMP = r"""
-- the Expr runtime --
local function ib_val(v, k) return v[k] or 0 end
local function ib_under(ctx, layer, k) local t = ctx.v[layer]; return t and t[k] or 0 end
-- the block --
local function keys(t) local k = {} for n in pairs(t) do k[#k + 1] = n end table.sort(k) return k end
for _, h in ipairs(keys(LAYOUT)) do
  print(string.format("len %s %d", h, HDR_LEN[h]))
  for _, n in ipairs(keys(LAYOUT[h])) do
    local f = LAYOUT[h][n]
    print(string.format("field %s %s %s %d %s %s %s %s", h, n, tostring(f.off), f.len,
      tostring(f.shift), tostring(f.mask), tostring(f.le or false), tostring(f.trailer or false)))
  end
end
for _, k in ipairs(keys(ICRC_VARIANT)) do
  for _, m in ipairs(ICRC_VARIANT[k]) do print(string.format("variant %s %d %d", k, m.off, m.ones)) end
end
print(string.format("crc %d %d %d %d %d %d %d %d", ICRC.poly, ICRC.init, ICRC.xorout, ICRC.mod,
                    VCRC.poly, VCRC.init, VCRC.xorout, VCRC.mod))
print(string.format("const %d %d %d %d %d %d %d %d %d", MAD_SIZE, METHOD_RESP, UD_SEND_ONLY,
                    SA_MAD_HDR_SIZE, SA_DATA_SIZE, NETLINK_RDMA, ARPHRD_NETLINK,
                    EXP_PDU_TAG_DISSECTOR_NAME, string.byte(ROCEV2_UDP_PORT_BE, 1) * 256
                    + string.byte(ROCEV2_UDP_PORT_BE, 2)))
local pr, other = {v = {MAD = {attribute_id = 0x35}}}, {v = {MAD = {attribute_id = 0x11}}}
print(string.format("stride %d %d %d %d", SA_RECORD_STRIDE({attribute_offset = 0}, pr),
                    SA_RECORD_STRIDE({attribute_offset = 10}, pr),
                    SA_RECORD_STRIDE({attribute_offset = 0}, other),
                    SA_RECORD_STRIDE({attribute_offset = 14}, other)))
"""


def test_emitted_lua_block_reads_back_as_the_spec_says():
    """The block the plugin carries, run by Lua: its LAYOUT equals the oracle (independent
    of model.layout), HDR_LEN the header lengths, the CRC tables crcspec, and the constants
    the spec's values."""
    lua = shutil.which("lua5.4")
    if lua is None:
        pytest.skip("lua5.4 not installed")
    block = constants_lua(luagen_plugin.RUNTIME_LAYOUTS, luagen_plugin.runtime_constants())
    dump = _DUMP.replace("-- the block --", block).replace("-- the Expr runtime --", LUA_RUNTIME)
    p = subprocess.run([lua, "-"], input=dump, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    layouts: dict = {}
    lens, variant = {}, {}
    for line in p.stdout.splitlines():
        kind, *rest = line.split()
        if kind == "len":
            lens[rest[0]] = int(rest[1])
        elif kind == "field":
            h, n, off, ln, shift, mask, le, trailer = rest
            num = lambda s: None if s == "nil" else int(s)  # noqa: E731
            layouts.setdefault(h, {})[n] = {"off": num(off), "len": int(ln),
                                            "shift": num(shift) or 0, "mask": num(mask),
                                            "le": le == "true", "trailer": trailer == "true"}
        elif kind == "variant":
            variant.setdefault(rest[0], []).append((int(rest[1]), int(rest[2])))
        elif kind == "crc":
            assert [int(x) for x in rest] == [0xEDB88320, 0xFFFFFFFF, 0xFFFFFFFF, 1 << 32,
                                              0xD008, 0xFFFF, 0xFFFF, 1 << 16]
        elif kind == "const":
            assert [int(x) for x in rest] == [256, 0x80, 0x64, 56, 200, 20, 824, 12, 4791]
        elif kind == "stride":
            # AttributeOffset in 8-byte words, never less than the attribute's record (a
            # PathRecord: 64 bytes; an attribute of no record class: no floor)
            assert [int(x) for x in rest] == [64, 80, 0, 112]
    assert sorted(layouts) == sorted(ORACLE)
    for key in ORACLE:
        assert lens[key] == ORACLE[key][1], key
        assert emitted_fields(layouts[key], lambda f: f["le"]) == oracle_fields(key), key
        assert {n for n, f in layouts[key].items() if f["trailer"]} == set(ORACLE_TRAILERS.get(key, {}))
    assert variant == {k: list(v) for k, v in crcspec.variant_masks().items()}
