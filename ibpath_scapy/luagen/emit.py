"""Emit a Wireshark Lua dissector from layer models.

Output idiom (style.md §3): ProtoFields in an indexed table flattened into each layer's
Proto.fields, one Proto per layer (`<prefix>.<layer>`), ProtoExperts registered up front, a
bounds check before every read, one dissect function per layer in table D, registration
last. Strings from layer definitions only ever appear inside lua_str() literals.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..model.expr import LUA_RUNTIME, Expr, LuaEnv
from ..model.hints import ListHint
from .lua import Hex, Writer, is_lua_name, lua_int, lua_key, lua_str, lua_table, lua_value
from ..audit.packet_rules import PacketRule as Rule
from ..model.layout import (
    FieldLayout,
    GeneratorError,
    Item,
    LayerModel,
    Step,
    build_layer,
    header_layout,
)

from ..engines.wireshark import EARLIER_COPY, SKIPPED_COPY

MAX_LIST_ITEMS = 4096  # a hostile count cannot make the dissector loop for long

def _once_lua(prefix: str, description: str) -> str:
    """The plugin's first statements: create the main Proto unless a copy of the plugin has
    (a global of the shared Lua state names its file), else say so and register nothing. A
    Lua plugin is a chunk, so `return` ends its loading there."""
    key = lua_str(f"{prefix} plugin")
    note = SKIPPED_COPY.replace("%", "%%").format(prefix=prefix, skipped="%s", loaded="%s")
    earlier = EARLIER_COPY.replace("%", "%%").format(why="%s")
    return f"""\
-- Loaded once: see SKIPPED_COPY (engines/wireshark.py). The key is not a name Lua code could use.
local ib_self = debug and (debug.getinfo(1, "S").source:gsub("^@", "")) or "?"
local ib_loaded = rawget(_G, {key})
local ib_new, ib_main = false, nil
if ib_loaded == nil then
  ib_new, ib_main = pcall(Proto, {lua_str(prefix)}, {lua_str(description)})
  if not ib_new then ib_loaded = string.format({lua_str(earlier)}, tostring(ib_main)) end
end
if not ib_new then
  io.stderr:write(string.format({lua_str(note + chr(10))}, ib_self, ib_loaded))
  return
end
rawset(_G, {key}, ib_self)
"""


@dataclass
class Const:
    """A named constant of the block the extra Lua reads: plain data (lua_value), or an Expr,
    which becomes a function of a table of field values, `NAME(v)`. `source` says where the
    value comes from (a comment line above the first constant of each source)."""

    name: str
    value: object
    source: str = ""
    note: str = ""  # a comment at the end of its line


@dataclass
class Spec:
    """What to generate: the layers (with everything reachable from them through bindings,
    hints and packet fields), the prefix of every name, rules, and extra Lua (runtime and
    registration) the caller appends. Before the extra Lua come the layouts of `layouts`
    (LAYOUT, HDR_LEN) and the `constants`, so that it states no offset or value itself."""

    prefix: str
    entry_layers: list[type]
    rules: list[Rule] = field(default_factory=list)
    exclude: tuple[str, ...] = ("Raw", "Padding", "NoPayload", "MADPadding")
    keep: dict[str, set[str]] = field(default_factory=dict)  # field values hooks read
    header_comment: str = ""
    extra_lua: str = ""
    layouts: list[type] = field(default_factory=list)
    constants: list[Const] = field(default_factory=list)


def reachable(entries: list[type], exclude: tuple[str, ...]) -> list[type]:
    """Entry classes plus every class reachable through bindings, NextLayer hints, list item
    classes and PacketFields, in a stable order."""
    from scapy.fields import ConditionalField, PacketField, PacketListField

    seen: list[type] = []
    todo = list(entries)
    while todo:
        cls = todo.pop(0)
        if cls in seen or cls.__name__ in exclude:
            continue
        seen.append(cls)
        nxt = [sub for _, sub in getattr(cls, "payload_guess", [])]
        nxt += [h.cls for h in getattr(cls, "payload_hints", []) or []]
        for h in (getattr(cls, "field_hints", {}) or {}).values():
            if isinstance(h, ListHint):
                nxt += list(h.classes.values())
        for f in cls.fields_desc:
            f = f.fld if isinstance(f, ConditionalField) else f
            if isinstance(f, PacketField) and not isinstance(f, PacketListField):
                nxt.append(f.cls)
        todo += [c for c in nxt if c not in seen]
    return seen


def _needed_fields(models: list[LayerModel], rules: list[Rule]) -> dict[str, set[str]]:
    """Which field values each layer must keep for dispatch, hints and rules."""
    need: dict[str, set[str]] = {m.key: set() for m in models}

    def add_refs(owner: str, expr: Expr):
        for ref in expr.refs():
            target = ref.layer or owner
            base = ref.name.removesuffix("__hi").removesuffix("__lo")
            need.setdefault(target, set()).add(base)

    for m in models:
        for fv, _ in m.bindings:
            need[m.key].update(fv)
        for h in m.next_hints:
            add_refs(m.key, h.condition)
        for s in m.steps:
            if isinstance(s.hint, ListHint):
                for e in (s.hint.count, s.hint.stride, s.hint.selector):
                    if e is not None:
                        add_refs(m.key, e)
            elif s.hint is not None and hasattr(s.hint, "length"):
                add_refs(m.key, s.hint.length)
            if s.when is not None:
                add_refs(m.key, s.when.condition)
            if s.byte_order is not None:
                add_refs(m.key, s.byte_order.big_endian)
    for m in models:
        length = getattr(m.cls, "length_hint", None)
        if length is not None:
            add_refs(m.key, length)
    for r in rules:
        add_refs(r.layer, r.condition)
    return need


def _merge(a: dict[str, set[str]], b: dict[str, set[str]]) -> dict[str, set[str]]:
    for k, v in b.items():
        a.setdefault(k, set()).update(v)
    return a


def _lua_env(remaining: str) -> LuaEnv:
    def field(layer, name):
        part = None
        if name.endswith(("__hi", "__lo")):
            name, part = name[:-4], name[-2:]
        if layer is None:
            ref = f"ib_val(v, {lua_str(name)})"
        else:
            ref = f"ib_under(ctx, {lua_str(layer)}, {lua_str(name)})"
        return f"ib_{part}({ref})" if part else ref

    def within(layer):
        return f"(ctx.v[{lua_str(layer)}] ~= nil)"

    return LuaEnv(field, remaining, within)


class Emitter:
    def __init__(self, spec: Spec):
        self.spec = spec
        classes = reachable(spec.entry_layers, spec.exclude)
        used: set[str] = set()
        self.models = [build_layer(c, spec.prefix, used) for c in classes]
        self.keys = {m.key for m in self.models}
        self.need = _merge(_needed_fields(self.models, spec.rules), spec.keep)
        self.varcount = 0
        self.items: list[Item] = []
        self.item_index: dict[int, int] = {}
        self.vs: list[dict] = []
        self.w = Writer()

    # -- registry of ProtoFields ------------------------------------------------------------
    def pf(self, it: Item) -> str:
        if id(it) not in self.item_index:
            self.items.append(it)
            self.item_index[id(it)] = len(self.items)
        return f"PF[{self.item_index[id(it)]}]"

    def _declare_field(self, idx: int, it: Item) -> str:
        if it.ftype == "bool":
            return (f"ProtoField.bool({lua_str(it.abbrev)}, {lua_str(it.label)}, {it.bool_bits}, "
                    f"nil, {lua_int(it.mask)}, {lua_str(it.desc)})")
        if it.ftype in ("ipv4", "ipv6", "ether", "bytes"):
            return f"ProtoField.{it.ftype}({lua_str(it.abbrev)}, {lua_str(it.label)}, {lua_str(it.desc)})"
        vs = "nil"
        if it.valuestring:
            # one table per distinct value string: the coded fields (MTU, rate, time
            # exponents) share theirs
            if it.valuestring not in self.vs:
                self.vs.append(it.valuestring)
            vs = f"VS[{self.vs.index(it.valuestring) + 1}]"
        mask = lua_int(it.mask) if it.mask is not None else "nil"
        base = f"base.{it.base or 'DEC'}"
        return (f"ProtoField.{it.ftype}({lua_str(it.abbrev)}, {lua_str(it.label)}, {base}, {vs}, "
                f"{mask}, {lua_str(it.desc)})")

    # -- the file --------------------------------------------------------------------------------
    def emit(self) -> str:
        body = Writer()
        self.w = body
        for m in self.models:
            self._layer_function(m)
        head = Writer()
        for line in self.spec.header_comment.splitlines():
            head(f"-- {line}" if line else "--")
        head("")
        head(_once_lua(self.spec.prefix, self.spec.prefix + " (generated from Scapy layers)"))
        head(LUA_RUNTIME.strip())
        head("")
        head("local VS, PF, P, D, EX, HOOKS = {}, {}, {}, {}, {}, {}")
        head("local MAX_LIST_ITEMS = " + str(MAX_LIST_ITEMS))
        decls = [(i + 1, self._declare_field(i + 1, it)) for i, it in enumerate(self.items)]
        for n, table in enumerate(self.vs, 1):
            head(f"VS[{n}] = {lua_table(table)}")
        for idx, decl in decls:
            head(f"PF[{idx}] = {decl}")
        head("")
        for m in self.models:
            head(f"P[{lua_str(m.key)}] = Proto({lua_str(m.proto_name)}, {lua_str(self.spec.prefix + ' ' + m.title)})")
            idxs = sorted({self.item_index[id(it)] for it in self._items_of(m)})
            head(f"P[{lua_str(m.key)}].fields = {{{', '.join(f'PF[{i}]' for i in idxs)}}}")
        head("")
        head(f"EX.short = ProtoExpert.new({lua_str(self.spec.prefix + '.truncated')}, "
             f"{lua_str('Truncated')}, expert.group.MALFORMED, expert.severity.ERROR)")
        head(f"EX.count = ProtoExpert.new({lua_str(self.spec.prefix + '.list_capped')}, "
             f"{lua_str('List longer than the dissector shows')}, expert.group.MALFORMED, expert.severity.WARN)")
        sev = {"error": "ERROR", "warning": "WARN", "info": "NOTE"}
        for n, r in enumerate(self.spec.rules, 1):
            head(f"EX[{n}] = ProtoExpert.new({lua_str(self.spec.prefix + '.rule.' + r.rule_id.lower().replace('-', '_'))}, "
                 f"{lua_str(r.rule_id + ': ' + r.message)}, expert.group.PROTOCOL, expert.severity.{sev[r.severity]})")
        experts = ["EX.short", "EX.count"] + [f"EX[{n}]" for n in range(1, len(self.spec.rules) + 1)]
        head(f"local EXPERT_LIST = {{{', '.join(experts)}}}")
        head("")
        head(_LUA_HELPERS.strip())
        head("")
        tail = "\n-- experts are registered once, after the runtime added its own\nib_main.experts = EXPERT_LIST\n"
        consts = ""
        if self.spec.layouts or self.spec.constants:
            consts = constants_lua(self.spec.layouts, self.spec.constants) + "\n"
        return (head.text() + body.text() + "\n" + consts + self.spec.extra_lua.strip() + "\n"
                + tail)

    def _items_of(self, m: LayerModel) -> list[Item]:
        out = []
        for s in m.steps:
            if s.item is not None:
                out.append(s.item)
            out += [it for it, _, _ in s.flags]
            for _, flags in s.flag_sets:
                out += [it for it, _, _ in flags]
        for it in out:
            self.pf(it)
        return out

    # -- one layer ---------------------------------------------------------------------------------
    def _layer_function(self, m: LayerModel) -> None:
        w = self.w
        key = lua_str(m.key)
        need = self.need.get(m.key, set())
        self._items_of(m)
        with w.block(f"D[{key}] = function(tvb, pinfo, tree, off, ctx)"):
            w("local limit = ctx.limit")
            w("local ctx_limit = limit")
            w("local v = {}")
            w(f"ctx.v[{key}] = v")
            w(f"ctx.at[{key}] = off")
            trailers = [s for s in m.steps if s.kind == "trailer"]
            tsize = sum(s.nbytes for s in trailers)
            if tsize:
                w(f"if limit - off < {tsize} then return ib_short(tvb, tree, P[{key}], off, limit, {tsize}) end")
                w("local trailer_at = {}")
                for s in reversed(trailers):
                    w(f"limit = limit - {s.nbytes}")
                    w(f"trailer_at[{lua_str(s.name)}] = limit")
                    w(f"v[{lua_str(s.name)}] = {self._read_int(s, 'limit')}")
                w("ctx.limit = limit")
            w(f"if off + {m.fixed_len} > limit then return ib_short(tvb, tree, P[{key}], off, limit, {m.fixed_len}) end")
            # With no tree (tshark -r without -V or a filter) only values are computed:
            # every TreeItem call is skipped, which is most of a layer's cost.
            w("local show = ctx.show ~= false  -- callers without a tree pass show = false")
            w("local t = tree")
            w(f"if show then t = tree:add(P[{key}], tvb(off, {m.fixed_len if m.fixed_len else 0})) end")
            w(f"local o = off + {m.fixed_len}")
            static = True
            for s in m.steps:
                if s.kind == "trailer":
                    continue
                if static and s.offset is None and s.kind not in ("bitint", "flags"):
                    static = False
                if s.when is not None or s.kind in ("list", "varbytes") or (
                        s.kind == "packet" and not static):
                    static = False
                self._step(m, s, need, static)
            w("if show then t:set_len(o - off) end")
            for s in trailers:
                w(f"if show then t:add{'_le' if s.little_endian else ''}({self.pf(s.item)}, tvb(trailer_at[{lua_str(s.name)}], {s.nbytes})) end")
            w(f"if HOOKS[{key}] then HOOKS[{key}](tvb, pinfo, t, off, o, ctx, v) end")
            for n, r in enumerate(self.spec.rules, 1):
                if r.layer == m.key:
                    cond = r.condition.lua(_lua_env("(limit - off)"))
                    w(f"if ib_truthy({cond}) then t:add_proto_expert_info(EX[{n}]) end")
            length = getattr(m.cls, "length_hint", None)
            if length is not None:
                # a self-delimiting item (nlattr, nlmsghdr): its payload ends where its own
                # length says, and the next item starts at that length aligned
                align = int(getattr(m.cls, "length_align", 1))
                w(f"local item_len = {length.lua(_lua_env('(limit - off)'))}")
                w(f"if item_len < {m.fixed_len} then return off end")
                w("limit = math.min(limit, off + item_len)")
                w("ctx.limit = limit")
                w(f"local item_next = math.min(ctx_limit, off + ib_idiv(item_len + {align - 1}, {align}) * {align})")
            branches = []
            for fv, sub in m.bindings:
                if sub.__name__ not in self.keys:
                    continue
                cond = " and ".join(f"ib_val(v, {lua_str(k)}) == {int(val)}" for k, val in sorted(fv.items())) or "true"
                # as Scapy: a bound payload is dissected only from bytes that remain (a ucma
                # command whose write failed has no response after it)
                branches.append((f"o < limit and {cond}", sub))
            for h in m.next_hints:
                if h.cls.__name__ in self.keys:
                    branches.append((f"ib_truthy({h.condition.lua(_lua_env('(limit - o)'))})", h.cls))
            w("local r = o")
            for i, (cond, sub) in enumerate(branches):
                kw = "if" if i == 0 else "elseif"
                w(f"{kw} {cond} then r = D[{lua_str(sub.__name__)}](tvb, pinfo, tree, o, ctx)")
            if branches:
                w("end")
            w("return item_next or r" if length is not None else "return r")
        w("")

    def _read_int(self, s: Step, at: str) -> str:
        rng = f"tvb({at}, {s.nbytes})"
        if s.little_endian and s.kind in ("bitint", "flags"):
            whole = f"{rng}:le_uint()"
            if s.bits == s.nbytes * 8:
                return whole
            shift = s.nbytes * 8 - s.bit_off - s.bits
            return f"ib_band(ib_rshift({whole}, {shift}), {(1 << s.bits) - 1})"
        if s.kind == "bitint" or (s.kind == "flags" and not s.little_endian and (s.bit_off or s.bits % 8)):
            val = f"{rng}:bitfield({s.bit_off}, {s.bits})"
            return f"ib_num({val})" if s.bits > 32 else val
        if s.nbytes > 4:
            return f"{rng}:{'le_' if s.little_endian else ''}uint64():tonumber()"
        return f"{rng}:{'le_' if s.little_endian else ''}uint()"

    def _step(self, m: LayerModel, s: Step, need: set[str], static: bool) -> None:
        w = self.w
        at = f"off + {s.offset}" if static and s.offset is not None else "o"
        name = lua_str(s.name)
        guard = s.when is not None
        if guard:
            w(f"if ib_truthy({s.when.condition.lua(_lua_env('(limit - o)'))}) then")
            w.depth += 1
        if s.kind in ("int", "bitint", "flags", "ipv4", "ipv6", "ether", "bytes") and not static:
            w(f"if o + {s.nbytes} > limit then return ib_short(tvb, t, P[{lua_str(m.key)}], o, limit, {s.nbytes}) end")
        add = "add_le" if s.little_endian else "add"
        if s.byte_order is not None:
            # the byte order is the message's own (an opcode, say): both reads, one chosen
            be = s.byte_order.big_endian.lua(_lua_env('(limit - o)'))
            rng = f"tvb({at}, {s.nbytes})"
            wide = "64():tonumber()" if s.nbytes > 4 else "()"
            with w.block("do"):
                w(f"local be = ib_truthy({be})")
                w(f"v[{name}] = be and {rng}:uint{wide} or {rng}:le_uint{wide}")
                w(f"if show then if be then t:add({self.pf(s.item)}, {rng}) "
                  f"else t:add_le({self.pf(s.item)}, {rng}) end end")
        elif s.kind in ("int", "bitint", "flags"):
            if s.name in need or (s.kind == "bitint" and s.wide_value):
                w(f"v[{name}] = {self._read_int(s, at)}")
            if s.kind == "bitint" and s.wide_value:
                w(f"if show then t:add({self.pf(s.item)}, tvb({at}, {s.nbytes}), tvb({at}, {s.nbytes}):bitfield({s.bit_off}, {s.bits})) end")
            elif s.kind == "flags":
                with w.block("if show then"):
                    w(f"local ft = t:{add}({self.pf(s.item)}, tvb({at}, {s.nbytes}))")

                    def bools(flags):
                        for it, win_off, win_len in flags:
                            rel = win_off - (s.offset or 0)
                            w(f"ft:{add}({self.pf(it)}, tvb({at} + {rel}, {win_len}))")

                    if s.flag_sets:  # the bits named by another field's value
                        w(f"local sel = {s.flag_selector.lua(_lua_env('(limit - o)'))}")
                        for k, (value, flags) in enumerate(s.flag_sets):
                            w(f"{'if' if k == 0 else 'elseif'} sel == {int(value)} then")
                            w.depth += 1
                            bools(flags)
                            w.depth -= 1
                        w("else")
                        w.depth += 1
                        bools(s.flags)
                        w.depth -= 1
                        w("end")
                    else:
                        bools(s.flags)
            else:
                w(f"if show then t:{add}({self.pf(s.item)}, tvb({at}, {s.nbytes})) end")
        elif s.kind == "bytes" and s.text:
            label = lua_str(f"{s.item.label}: \"")
            w(f"if show then local r = tvb({at}, {s.nbytes}); "
              f"t:add({self.pf(s.item)}, r):set_text({label} .. ib_name_text(r) .. '\"') end")
        elif s.kind in ("ipv4", "ipv6", "ether", "bytes"):
            w(f"if show then t:add({self.pf(s.item)}, tvb({at}, {s.nbytes})) end")
        elif s.kind == "varbytes":
            length = s.hint.length.lua(_lua_env("(limit - o)"))
            self.varcount += 1
            n = f"n{self.varcount}"
            w(f"local {n} = math.max(0, {length})")
            w(f"if o + {n} > limit then return ib_short(tvb, t, P[{lua_str(m.key)}], o, limit, {n}) end")
            w(f"if show and {n} > 0 then t:add({self.pf(s.item)}, tvb(o, {n})) end")
            w(f"o = o + {n}")
        elif s.kind == "packet":
            from ..model.layout import static_length
            size = static_length(s.sub)
            sub = lua_str(s.sub.__name__)
            if size is None:
                w(f"o = D[{sub}](tvb, pinfo, t, o, ib_subctx(ctx, limit))")
            else:
                if not static:
                    w(f"if o + {size} > limit then return ib_short(tvb, t, P[{lua_str(m.key)}], o, limit, {size}) end")
                w(f"D[{sub}](tvb, pinfo, t, {at}, ib_subctx(ctx, {at} + {size}))")
                if not static:
                    w(f"o = o + {size}")
        elif s.kind == "list":
            self._list(m, s)
        if not static and s.kind in ("int", "bitint", "flags", "ipv4", "ipv6", "ether", "bytes"):
            w(f"o = o + {s.nbytes}")
        if guard:
            w.depth -= 1
            w("end")

    def _list(self, m: LayerModel, s: Step) -> None:
        w = self.w
        h: ListHint = s.hint
        env = _lua_env("(limit - o)")
        items = [(value, cls) for value, cls in sorted(h.classes.items()) if cls.__name__ in self.keys]

        def dispatch(at: str, limit: str, target: str):
            first = True
            for value, cls in items:
                kw = "if" if first else "elseif"
                w(f"{kw} sel == {int(value)} then {target}D[{lua_str(cls.__name__)}](tvb, pinfo, t, {at}, ib_subctx(ctx, {limit}))")
                first = False
            if not first:
                w("end")

        with w.block("do"):
            if h.count is None:
                from ..model.layout import build_layer as _bl
                header = min((_bl(c, "x").fixed_len for _, c in items), default=1) or 1
                w("local count = 0")
                with w.block(f"while o + {header} <= limit and count < MAX_LIST_ITEMS do"):
                    w(f"local sel = {h.selector.lua(env)}")
                    w("local nexto = o")
                    dispatch("o", "limit", "nexto = ")
                    w("if nexto <= o then break end")
                    w("o = nexto")
                    w("count = count + 1")
                w(f"v[{lua_str(s.name + '_count')}] = count")
                return
            w(f"local count = math.floor({h.count.lua(env)})")
            w(f"local stride = math.floor({h.stride.lua(env)})")
            w(f"local sel = {h.selector.lua(env)}")
            w("if stride < 1 then count = 0 end")
            w("if count > MAX_LIST_ITEMS then t:add_proto_expert_info(EX.count); count = MAX_LIST_ITEMS end")
            with w.block("for i = 0, count - 1 do"):
                w("local s = o + i * stride")
                w(f"if s + stride > limit then ib_short(tvb, t, P[{lua_str(m.key)}], s, limit, stride); count = i; break end")
                dispatch("s", "s + stride", "")
            w("o = o + math.max(count, 0) * math.max(stride, 0)")
            w(f"v[{lua_str(s.name + '_count')}] = count")


_LUA_HELPERS = r"""
local function ib_val(v, k) return v[k] or 0 end
local function ib_under(ctx, layer, k) local t = ctx.v[layer]; return t and t[k] or 0 end
local function ib_hi(x) return math.floor(x / 4294967296) end
local function ib_lo(x) return x % 4294967296 end
local function ib_num(x) if type(x) == "number" then return x end return x:tonumber() end
local function ib_subctx(ctx, limit)
  return setmetatable({limit = limit}, {__index = ctx})
end
local function ib_short(tvb, tree, proto, off, limit, need)
  local have = limit - off
  if have > 0 then
    local it = tree:add(proto, tvb(off, have))
    it:add_proto_expert_info(EX.short, string.format("Truncated: %d bytes needed, %d present", need, have))
  else
    tree:add_proto_expert_info(EX.short, string.format("Truncated: %d bytes needed, none present", need))
  end
  return math.max(limit, off)
end
-- layers.sa.name_text: a NUL-terminated UTF-8 name as every ibpath output shows it (the
-- bytes before the first NUL; a backslash as \\, a byte of no valid UTF-8 sequence (RFC
-- 3629) or a control character as \xHH; \c after a name no NUL ends)
local function ib_name_text(range)
  local s = range:raw()
  local z = s:find("\0", 1, true)
  local last = z and z - 1 or #s
  local out, i = {}, 1
  while i <= last do
    local c, len, lo, hi = s:byte(i), 0, 0x80, 0xBF
    if c == 0x5C then len = -1
    elseif c >= 0x20 and c < 0x7F then len = 1
    elseif c >= 0xC2 and c <= 0xDF then len = 2
    elseif c == 0xE0 then len, lo = 3, 0xA0
    elseif (c >= 0xE1 and c <= 0xEC) or c == 0xEE or c == 0xEF then len = 3
    elseif c == 0xED then len, hi = 3, 0x9F
    elseif c == 0xF0 then len, lo = 4, 0x90
    elseif c >= 0xF1 and c <= 0xF3 then len = 4
    elseif c == 0xF4 then len, hi = 4, 0x8F
    end
    if len > 1 and i + len - 1 <= last then
      for j = 1, len - 1 do
        local b = s:byte(i + j)
        if b < (j == 1 and lo or 0x80) or b > (j == 1 and hi or 0xBF) then len = 0; break end
      end
    elseif len > 1 then
      len = 0
    end
    if len == -1 then out[#out + 1] = "\\\\"; i = i + 1
    elseif len == 0 then out[#out + 1] = string.format("\\x%02x", c); i = i + 1
    else out[#out + 1] = s:sub(i, i + len - 1); i = i + len end
  end
  return table.concat(out) .. (z and "" or "\\c")
end
"""


LAYOUT_COMMENT = """\
Layouts and constants, generated from the Python definitions (layers' fields_desc through
model.layout.header_layout; the constants' sources are named above each group).
LAYOUT.<header>.<field>: `len` bytes at `off` from the header's start, read big-endian
unless `le`; a field narrower than that window is ib_band(ib_rshift(window, shift), mask),
`bits` wide. A trailer (ICRC, VCRC: `len` bytes) ends the packet. HDR_LEN.<header>: the
bytes of its fixed part (all of it, or those before its first variable-length field)."""


def field_lua(f: FieldLayout) -> str:
    """One LAYOUT entry."""
    if f.trailer:
        d = {"len": f.nbytes, "trailer": True}
    else:
        d = {"off": f.off, "len": f.nbytes}
        if f.bits is not None:
            d.update(bits=f.bits, shift=f.shift, mask=Hex(f.mask))
    if f.little_endian:
        d["le"] = True
    return lua_value(d)


def constants_lua(layouts: list[type], constants: list[Const],
                  comment: str = LAYOUT_COMMENT) -> str:
    """The block of `local`s: LAYOUT and HDR_LEN of the layouts' headers (by class name),
    then the constants."""
    w = Writer()
    w("-" * 94)
    for line in comment.splitlines():
        w(f"-- {line}" if line else "--")
    w("-" * 94)
    if layouts:
        lays = [header_layout(cls) for cls in layouts]
        w("local LAYOUT = {")
        for lay in lays:
            w(f"  {lua_key(lay.key)} = {{")
            for f in lay.fields.values():
                w(f"    {lua_key(f.name)} = {field_lua(f)},")
            w("  },")
        w("}")
        _assign(w, "HDR_LEN", {lay.key: lay.fixed_len for lay in lays})
    source = None
    for c in constants:
        if not is_lua_name(c.name):
            raise GeneratorError(f"constant {c.name!r}: not a Lua name")
        if c.source and c.source != source:
            w(f"-- {c.source}")
        source = c.source or source
        note = f"  -- {c.note}" if c.note else ""
        if isinstance(c.value, Expr):
            # v: the values of the layer's fields; ctx.v: those of the layers below (Under)
            w(f"local function {c.name}(v, ctx) return {c.value.lua(_lua_env('0'))} end{note}")
        else:
            _assign(w, c.name, c.value, note)
    return w.text()


def _assign(w: Writer, name: str, value, note: str = "") -> None:
    """`local name = value`; a table too long for one line gets a line per key."""
    line = f"local {name} = {lua_value(value)}{note}"
    if len(line) <= 96 or not isinstance(value, dict):
        w(line)
        return
    w(f"local {name} = {{{note}")
    for k, v in value.items():
        w(f"  {lua_key(k)} = {lua_value(v)},")
    w("}")


def generate(spec: Spec) -> str:
    """Lua source for spec."""
    return Emitter(spec).emit()
