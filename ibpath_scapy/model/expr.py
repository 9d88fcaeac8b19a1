"""A tiny expression language for what Scapy would say with a lambda.

Layers declare record counts, conditions and single-packet rule checks as Expr trees instead
of Python lambdas, so that the same definition runs in Python (``evaluate``) and is emitted
as Lua by the dissector generator (``to_lua``). Only integers and booleans; operators follow
Python semantics (``//`` floors, comparisons give booleans).

    F("attribute_offset") * 8          a field of the layer being decoded
    Under("RMPP").payload_length       a field of a layer below it (by class name)
    Remaining()                        bytes left in the layer's data
    Within("UserMad")                  1 when a layer of that class is below, else 0
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable


class Expr(ABC):
    __hash__ = object.__hash__

    # -- construction helpers --------------------------------------------------------------
    def _bin(self, op: str, other) -> "Expr":
        return BinOp(op, self, lift(other))

    def _rbin(self, op: str, other) -> "Expr":
        return BinOp(op, lift(other), self)

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._rbin("+", o)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._rbin("-", o)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._rbin("*", o)
    def __floordiv__(self, o): return self._bin("//", o)
    def __mod__(self, o): return self._bin("%", o)
    def __and__(self, o): return self._bin("&", o)
    def __rand__(self, o): return self._rbin("&", o)
    def __or__(self, o): return self._bin("|", o)
    def __ror__(self, o): return self._rbin("|", o)
    def __xor__(self, o): return self._bin("^", o)
    def __rshift__(self, o): return self._bin(">>", o)
    def __lshift__(self, o): return self._bin("<<", o)
    def __eq__(self, o): return self._bin("==", o)  # type: ignore[override]
    def __ne__(self, o): return self._bin("!=", o)  # type: ignore[override]
    def __lt__(self, o): return self._bin("<", o)
    def __le__(self, o): return self._bin("<=", o)
    def __gt__(self, o): return self._bin(">", o)
    def __ge__(self, o): return self._bin(">=", o)

    def __bool__(self):
        raise TypeError("an Expr has no truth value in Python; use And/Or/Not")

    def isin(self, *values: int) -> "Expr":
        return Or(*[self == v for v in values])

    # -- evaluation ---------------------------------------------------------------------------
    @abstractmethod
    def evaluate(self, env: "Env") -> int:
        """The value on a packet (Python)."""

    @abstractmethod
    def lua(self, env: "LuaEnv") -> str:
        """The Lua expression computing the value in the generated dissector."""

    def refs(self) -> list["Expr"]:
        """Every field reference in the tree."""
        return []


def lift(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        return Const(int(x))
    if isinstance(x, int):
        return Const(x)
    raise TypeError(f"cannot use {x!r} in an expression")


class Env:
    """Python evaluation context: resolves field references."""

    def __init__(self, field: Callable[[str | None, str], int], remaining: int = 0,
                 within: Callable[[str], bool] = lambda layer: False):
        self.field = field
        self.remaining = remaining
        self.within = within


class LuaEnv:
    """Lua emission context: how a reference to a field is spelt in the generated code."""

    def __init__(self, field: Callable[[str | None, str], str], remaining: str = "remaining",
                 within: Callable[[str], str] = lambda layer: "false"):
        self.field = field
        self.remaining = remaining
        self.within = within


class Const(Expr):
    def __init__(self, value: int):
        self.value = int(value)

    def evaluate(self, env):
        return self.value

    def lua(self, env):
        return str(self.value) if self.value >= 0 else f"({self.value})"

    def __repr__(self):
        return f"Const({self.value})"


class F(Expr):
    """A field of the current layer (layer=None) or, through Under(), of a lower layer.

    Lua sees numbers exactly up to 2^53 and bit operations on 32 bits: name a 64-bit field
    as "name__hi" / "name__lo" to test its halves."""

    def __init__(self, name: str, layer: str | None = None):
        self.name, self.layer = name, layer

    def evaluate(self, env):
        return int(env.field(self.layer, self.name))

    def lua(self, env):
        return env.field(self.layer, self.name)

    def refs(self):
        return [self]

    def __repr__(self):
        return f"{self.layer + '.' if self.layer else ''}{self.name}"


class Under:
    """Under("RMPP").payload_length: a field of the nearest lower layer of that class."""

    def __init__(self, layer: str):
        self._layer = layer

    def __getattr__(self, name: str) -> F:
        if name.startswith("_"):
            raise AttributeError(name)
        return F(name, self._layer)


class Remaining(Expr):
    """Bytes left in the data being decoded (for a layer: from its first byte)."""

    def evaluate(self, env):
        return env.remaining

    def lua(self, env):
        return env.remaining

    def __repr__(self):
        return "Remaining()"


class Within(Expr):
    """1 when a layer of that class lies below the one being decoded, else 0: the context a
    header is read in (a MAD under struct ib_user_mad is a umad message, not a wire MAD)."""

    def __init__(self, layer: str):
        self.layer = layer

    def evaluate(self, env):
        return int(bool(env.within(self.layer)))

    def lua(self, env):
        return f"({env.within(self.layer)} and 1 or 0)"

    def __repr__(self):
        return f"Within({self.layer!r})"


_PY_OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b if b else 0,
    "%": lambda a, b: a % b if b else 0,
    "&": lambda a, b: a & b,
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
    ">>": lambda a, b: a >> b,
    "<<": lambda a, b: a << b,
    "==": lambda a, b: int(a == b),
    "!=": lambda a, b: int(a != b),
    "<": lambda a, b: int(a < b),
    "<=": lambda a, b: int(a <= b),
    ">": lambda a, b: int(a > b),
    ">=": lambda a, b: int(a >= b),
}
# Lua: arithmetic and comparisons inline; bit operations and floor division through runtime
# helpers (ib_band …) that work on Lua 5.2 (bit library) and 5.4 (native operators).
_LUA_INFIX = {"+": "+", "-": "-", "*": "*", "==": "==", "!=": "~=", "<": "<", "<=": "<=",
              ">": ">", ">=": ">="}
_LUA_CALL = {"//": "ib_idiv", "%": "ib_mod", "&": "ib_band", "|": "ib_bor", "^": "ib_bxor",
             ">>": "ib_rshift", "<<": "ib_lshift"}
_COMPARISONS = {"==", "!=", "<", "<=", ">", ">="}


class BinOp(Expr):
    def __init__(self, op: str, a: Expr, b: Expr):
        self.op, self.a, self.b = op, a, b

    def evaluate(self, env):
        return _PY_OPS[self.op](self.a.evaluate(env), self.b.evaluate(env))

    def lua(self, env):
        a, b = self.a.lua(env), self.b.lua(env)
        if self.op in _LUA_INFIX:
            code = f"({a} {_LUA_INFIX[self.op]} {b})"
            return f"ib_bool({code})" if self.op in _COMPARISONS else code
        return f"{_LUA_CALL[self.op]}({a}, {b})"

    def refs(self):
        return self.a.refs() + self.b.refs()

    def __repr__(self):
        return f"({self.a!r} {self.op} {self.b!r})"


class _Call(Expr):
    name = ""
    lua_name = ""

    def __init__(self, *args):
        self.args = [lift(a) for a in args]

    def refs(self):
        return [r for a in self.args for r in a.refs()]

    def lua(self, env):
        return f"{self.lua_name}({', '.join(a.lua(env) for a in self.args)})"

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(map(repr, self.args))})"


class And(_Call):
    lua_name = "ib_and"

    def evaluate(self, env):
        return int(all(a.evaluate(env) for a in self.args))


class Or(_Call):
    lua_name = "ib_or"

    def evaluate(self, env):
        return int(any(a.evaluate(env) for a in self.args))


class Not(_Call):
    lua_name = "ib_not"

    def evaluate(self, env):
        return int(not self.args[0].evaluate(env))


class Min(_Call):
    lua_name = "math.min"

    def evaluate(self, env):
        return min(a.evaluate(env) for a in self.args)


class Max(_Call):
    lua_name = "math.max"

    def evaluate(self, env):
        return max(a.evaluate(env) for a in self.args)


class If(Expr):
    def __init__(self, cond, then, otherwise):
        self.cond, self.then, self.otherwise = lift(cond), lift(then), lift(otherwise)

    def evaluate(self, env):
        return self.then.evaluate(env) if self.cond.evaluate(env) else self.otherwise.evaluate(env)

    def lua(self, env):
        # Lua's and/or idiom fails when `then` is falsy; numbers never are (0 is true in Lua),
        # and ib_truthy turns a 0/1 condition into a Lua boolean.
        return (f"(ib_truthy({self.cond.lua(env)}) and {self.then.lua(env)} "
                f"or {self.otherwise.lua(env)})")

    def refs(self):
        return self.cond.refs() + self.then.refs() + self.otherwise.refs()

    def __repr__(self):
        return f"If({self.cond!r}, {self.then!r}, {self.otherwise!r})"


def evaluate_on(expr: Expr, pkt: Any, remaining: int = 0) -> int:
    """Evaluate expr on a Scapy packet: F() reads pkt, Under("X") the nearest lower X layer."""

    def field(layer, name):
        p = pkt
        if layer is not None:
            p = pkt.underlayer
            while p is not None and type(p).__name__ != layer:
                p = p.underlayer
            if p is None:
                return 0
        part = None
        if name.endswith(("__hi", "__lo")):
            name, part = name[:-4], name[-2:]
        v = p.getfieldval(name)
        v = 0 if v is None else int(v)
        if part == "hi":
            return v >> 32
        return v & 0xFFFFFFFF if part == "lo" else v

    def within(layer):
        p = pkt.underlayer
        while p is not None and type(p).__name__ != layer:
            p = p.underlayer
        return p is not None

    return expr.evaluate(Env(field, remaining, within))


# Runtime helpers the Lua side of Expr needs; luagen emits them once at the top of the file.
LUA_RUNTIME = r"""
local ib_bitlib = bit or bit32
local ib_band, ib_bor, ib_bxor, ib_rshift, ib_lshift
if ib_bitlib then
  -- BitOp results are signed 32-bit; fold them back to unsigned so comparisons hold
  ib_band = function(a, b) return ib_bitlib.band(a, b) % 4294967296 end
  ib_bor = function(a, b) return ib_bitlib.bor(a, b) % 4294967296 end
  ib_bxor = function(a, b) return ib_bitlib.bxor(a, b) % 4294967296 end
  ib_rshift = function(a, b) return ib_bitlib.rshift(a, b) % 4294967296 end
  ib_lshift = function(a, b) return ib_bitlib.lshift(a, b) % 4294967296 end
else
  -- Lua 5.3+: native integer operators, loaded from text so that Lua 5.2 never parses them
  ib_band, ib_bor, ib_bxor, ib_rshift, ib_lshift = load([[
    return function(a, b) return (math.tointeger(a) & math.tointeger(b)) & 0xFFFFFFFF end,
           function(a, b) return (math.tointeger(a) | math.tointeger(b)) & 0xFFFFFFFF end,
           function(a, b) return (math.tointeger(a) ~ math.tointeger(b)) & 0xFFFFFFFF end,
           function(a, b) return (math.tointeger(a) & 0xFFFFFFFF) >> b end,
           function(a, b) return (math.tointeger(a) << b) & 0xFFFFFFFF end
  ]])()
end
local function ib_idiv(a, b) if b == 0 then return 0 end return math.floor(a / b) end
local function ib_mod(a, b) if b == 0 then return 0 end return a % b end
local function ib_bool(x) if x then return 1 end return 0 end
local function ib_truthy(x) return x ~= 0 and x ~= false and x ~= nil end
local function ib_and(...) for _, x in ipairs({...}) do if not ib_truthy(x) then return 0 end end return 1 end
local function ib_or(...) for _, x in ipairs({...}) do if ib_truthy(x) then return 1 end end return 0 end
local function ib_not(x) if ib_truthy(x) then return 0 end return 1 end
"""
