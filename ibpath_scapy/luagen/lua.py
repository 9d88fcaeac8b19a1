"""Lua source text: inert string literals and a small indenting writer."""

from __future__ import annotations

import re


def lua_str(text: str) -> str:
    """A Lua string literal for any text: printable ASCII kept, everything else (quotes,
    backslashes, newlines, brackets are fine but escaped when risky, non-ASCII) as decimal
    escapes, valid in Lua 5.1-5.4. Nothing in the text can end the literal or run as code."""
    return lua_bytes(str(text).encode("utf-8"))


def lua_bytes(data: bytes) -> str:
    """A Lua string literal holding exactly these bytes: printable ASCII but quotes and
    backslashes kept, every other byte as a decimal escape."""
    out = []
    for b in data:
        ch = chr(b)
        out.append(ch if 0x20 <= b < 0x7F and ch not in "\"\\'" else f"\\{b:03d}")
    return '"' + "".join(out) + '"'


def lua_int(n: int) -> str:
    return f"0x{n:x}" if n > 9 else str(n)


class Hex(int):
    """An integer lua_value writes in hex (flags, masks, opcodes)."""


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LUA_KEYWORDS = {"and", "break", "do", "else", "elseif", "end", "false", "for", "function",
                 "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then",
                 "true", "until", "while"}


def lua_key(k) -> str:
    """A table key: [k] for an integer, k for an identifier, ["k"] for other text."""
    if isinstance(k, bool) or not isinstance(k, (int, str)):
        raise TypeError(f"no Lua key for {k!r}")
    if isinstance(k, int):
        return f"[{int(k)}]"
    if is_lua_name(k):
        return k
    return f"[{lua_str(k)}]"


def is_lua_name(name: str) -> bool:
    return bool(_IDENT.fullmatch(name)) and name not in _LUA_KEYWORDS


def lua_value(x) -> str:
    """A Lua constant for plain data: integers (decimal; Hex in hex), booleans, text, bytes,
    lists (as sequences) and dicts (lua_key keys), in their own order."""
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, Hex):
        return f"0x{int(x):x}"
    if isinstance(x, int):
        return str(int(x))
    if isinstance(x, str):
        return lua_str(x)
    if isinstance(x, (bytes, bytearray)):
        return lua_bytes(bytes(x))
    if isinstance(x, (list, tuple)):
        return "{" + ", ".join(lua_value(v) for v in x) + "}"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{lua_key(k)} = {lua_value(v)}" for k, v in x.items()) + "}"
    raise TypeError(f"no Lua constant for {type(x).__name__} {x!r}")


def lua_table(d: dict) -> str:
    """{[k] = "v", ...} with sorted integer keys."""
    return "{" + ", ".join(f"[{int(k)}] = {lua_str(v)}" for k, v in sorted(d.items())) + "}"


class Writer:
    def __init__(self):
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, line: str = "") -> "Writer":
        self.lines.append(("  " * self.depth + line) if line else "")
        return self

    def block(self, opener: str):
        w = self

        class _Block:
            def __enter__(self_inner):
                w(opener)
                w.depth += 1

            def __exit__(self_inner, *exc):
                w.depth -= 1
                w("end")

        return _Block()

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
