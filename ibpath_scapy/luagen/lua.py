"""Lua source text: inert string literals and a small indenting writer."""

from __future__ import annotations


def lua_str(text: str) -> str:
    """A Lua string literal for any text: printable ASCII kept, everything else (quotes,
    backslashes, newlines, brackets are fine but escaped when risky, non-ASCII) as decimal
    escapes, valid in Lua 5.1-5.4. Nothing in the text can end the literal or run as code."""
    out = []
    for b in str(text).encode("utf-8"):
        ch = chr(b)
        if 0x20 <= b < 0x7F and ch not in "\"\\'":
            out.append(ch)
        else:
            out.append(f"\\{b:03d}")
    return '"' + "".join(out) + '"'


def lua_int(n: int) -> str:
    return f"0x{n:x}" if n > 9 else str(n)


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
