"""The generator on Scapy layers it was not written for: every field kind it maps, declared
hints for what Scapy says in lambdas, clear refusals, and hostile names kept inert."""

import random
import shutil
import subprocess

import pytest
from scapy.fields import (
    BitEnumField,
    BitField,
    ByteEnumField,
    ConditionalField,
    FieldLenField,
    FlagsField,
    IP6Field,
    LEIntField,
    LEShortField,
    MACField,
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

from ibpath_scapy.expr import F
from ibpath_scapy.hints import LengthHint, ListHint, WhenHint
from ibpath_scapy.luagen import GeneratorError, Spec, generate
from ibpath_scapy.luagen.lua import lua_str
from ibpath_scapy.pcapio import PcapWriter

from plugin_oracle import compare, field_map, tshark

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
                       text=True, timeout=120)  # -G must come first
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
