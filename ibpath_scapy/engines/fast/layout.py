"""Field extractors made from the Scapy layers' own definitions.

The layer classes stay the single definition of every format: model.layout walks their
fields_desc into steps (offset, width, bit position, byte order) for the Lua generator, and
the same steps are turned here into one Python function per layer (closures over the steps:
one struct.Struct read, then shifts and masks) that reads every field of a layer at a given
offset of a bytes object and returns the dict decode.layer_dict() would build from the Scapy
packet (same names, same order, same values: GIDs as IPv6 text, flags as ints, byte strings
as hex, names as text). Nothing here knows an offset that a layer defines.
"""

from __future__ import annotations

from typing import Callable, Iterable

from scapy.fields import ConditionalField, Field, IP6Field, IPField, MACField, StrField, _BitField
from scapy.packet import Packet

from ...layers.sa import gid_text as _gid_text
from ...layers.sa import name_text
from ...model.layout import GeneratorError, build_layer


class NotCompilable(Exception):
    """A layer (or a field of it) has a shape the extractor compiler does not handle."""


_GID_CACHE: dict[bytes, str] = {}
_GID_CACHE_MAX = 65536


def gid_text(b: bytes) -> str:
    """A 16-byte GID as decode.field_value spells it (layers.sa.gid_text), cached: captures
    repeat the same few GIDs on every frame."""
    s = _GID_CACHE.get(b)
    if s is None:
        if len(_GID_CACHE) >= _GID_CACHE_MAX:
            _GID_CACHE.clear()
        s = _GID_CACHE[b] = _gid_text(b)
    return s


def step_source(step, base: str = "o") -> str:
    """Python source reading one step's value from `b` at offset `o` (the name of `base`)."""
    if step.when is not None or step.offset is None:
        raise NotCompilable(f"{step.name}: conditional or variable position")
    if step.byte_order is not None:
        raise NotCompilable(f"{step.name}: its byte order is decided by the message")
    start = f"{base} + {step.offset}" if step.offset else base
    end = f"{base} + {step.offset + step.nbytes}"
    order = "little" if step.little_endian else "big"
    if step.kind == "ipv6":
        return f"_gid(b[{start}:{end}])"
    if step.kind == "bytes":
        return f"_text(b[{start}:{end}])" if step.text else f"b[{start}:{end}].hex()"
    if step.kind == "int":
        return f"b[{start}]" if step.nbytes == 1 else f"_fb(b[{start}:{end}], '{order}')"
    if step.kind in ("bitint", "flags"):
        word = f"b[{start}]" if step.nbytes == 1 else f"_fb(b[{start}:{end}], '{order}')"
        shift = step.nbytes * 8 - step.bit_off - step.bits
        mask = (1 << step.bits) - 1
        return f"(({word} >> {shift}) & {mask:#x})" if shift else f"({word} & {mask:#x})"
    raise NotCompilable(f"{step.name}: {step.kind} field")


def layer_steps(cls: type[Packet]) -> dict:
    """Step of every field of a layer, by name (model.layout)."""
    try:
        model = build_layer(cls, "fast")
    except GeneratorError as exc:
        raise NotCompilable(str(exc)) from exc
    return {s.name: s for s in model.steps}


def static_length(cls: type[Packet]) -> int:
    """Bytes of a layer whose fields all have fixed sizes (model.layout)."""
    try:
        n = build_layer(cls, "fast").static_len
    except GeneratorError as exc:
        raise NotCompilable(str(exc)) from exc
    if n is None:
        raise NotCompilable(f"{cls.__name__} has variable-length fields")
    return n


def default_names(cls: type[Packet], reserved: bool = False) -> list[str]:
    """The fields decode.layer_dict() shows by default: all but "records" and reserved_*."""
    return [f.name for f in cls.fields_desc
            if f.name != "records" and (reserved or not f.name.startswith("reserved"))]


_STRUCT_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}


def _windows(steps: list) -> dict[str, tuple[int, int, int]] | None:
    """The byte windows one struct.Struct reads: the steps' windows, overlapping ones merged
    (bit fields that share bytes). Returns {field: (window index, window offset, window
    length)} plus the windows under the key "" as a list of (offset, length, struct code),
    or None for a shape read field by field (little-endian groups, variable fields, a GID
    or byte string sharing bytes with another field)."""
    spans = []
    for st in steps:
        if st.when is not None or st.offset is None or st.little_endian or st.byte_order:
            return None
        if st.kind not in ("ipv6", "bytes", "int", "bitint", "flags"):
            return None
        spans.append((st.offset, st.offset + st.nbytes, st))
    spans.sort(key=lambda x: (x[0], x[1]))
    merged: list[list] = []  # [start, end, [steps]]
    for a, e, st in spans:
        if merged and a < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
            merged[-1][2].append(st)
        else:
            merged.append([a, e, [st]])
    out: dict = {"": []}
    for i, (a, e, sts) in enumerate(merged):
        n = e - a
        raw = any(st.kind in ("ipv6", "bytes") for st in sts)
        if raw and len(sts) > 1:
            return None
        code = f"{n}s" if raw else _STRUCT_CODES.get(n, f"{n}s")
        out[""].append((a, n, code))
        for st in sts:
            out[st.name] = (i, a, n)
    return out


def step_reader(step) -> Callable[[bytes, int], object]:
    """A function (b, o) reading one step's value from b at offset o (what step_source spells)."""
    if step.when is not None or step.offset is None:
        raise NotCompilable(f"{step.name}: conditional or variable position")
    if step.byte_order is not None:
        raise NotCompilable(f"{step.name}: its byte order is decided by the message")
    start, end = step.offset, step.offset + step.nbytes
    order = "little" if step.little_endian else "big"
    if step.kind == "ipv6":
        return lambda b, o: gid_text(b[o + start:o + end])
    if step.kind == "bytes":
        if step.text:
            return lambda b, o: name_text(b[o + start:o + end])
        return lambda b, o: b[o + start:o + end].hex()
    if step.kind not in ("int", "bitint", "flags"):
        raise NotCompilable(f"{step.name}: {step.kind} field")
    if step.nbytes == 1:
        def word(b, o):
            return b[o + start]
    else:
        def word(b, o):
            return int.from_bytes(b[o + start:o + end], order)
    if step.kind == "int":
        return word
    shift = step.nbytes * 8 - step.bit_off - step.bits
    mask = (1 << step.bits) - 1
    return lambda b, o: (word(b, o) >> shift) & mask


def _window_value(step, index: int, w_off: int, w_len: int, code: str) -> Callable:
    """A function of the windows struct.Struct read giving the step's value."""
    if step.kind == "ipv6":
        return lambda w: gid_text(w[index])
    if step.kind == "bytes":
        if step.text:
            return lambda w: name_text(w[index])
        return lambda w: w[index].hex()
    odd = code.endswith("s")  # an integer window of odd width (3, 5, 6 bytes)
    # bits below the field: those of its own window, then the window's bytes after it
    shift = step.nbytes * 8 - step.bit_off - step.bits if step.kind != "int" else 0
    shift += 8 * ((w_off + w_len) - (step.offset + step.nbytes))
    bits = step.bits if step.kind != "int" else step.nbytes * 8
    mask = (1 << bits) - 1

    def value(w):
        x = w[index]
        if odd:
            x = int.from_bytes(x, "big")
        return (x >> shift) & mask

    return value


def compile_extractor(cls: type[Packet], names: Iterable[str] | None = None,
                      as_tuple: bool = False) -> Callable[[bytes, int], dict]:
    """A function (b, o) → {name: value} for the fields `names` (default: decode.layer_dict's
    choice) of layer `cls` starting at offset o of b; as_tuple: the values alone, in the
    order of `names` (a fact made of them positionally binds no keywords).

    When the fields' byte windows tile the layer, one struct.Struct reads them all in one
    call (then shifts and masks cut the bit fields out); otherwise each field is read alone."""
    import struct

    steps = layer_steps(cls)
    names = list(names) if names is not None else default_names(cls)
    for n in names:
        if n not in steps:
            raise NotCompilable(f"{cls.__name__}.{n}: no step")
    wins = _windows([steps[n] for n in names])
    if wins:
        fmt, pos = ">", 0
        for off, n, code in wins[""]:
            fmt += (f"{off - pos}x" if off > pos else "") + code
            pos = off + n
        unpack = struct.Struct(fmt).unpack_from
        values = [_window_value(steps[n], *wins[n], wins[""][wins[n][0]][2]) for n in names]

        def read(b, o):
            w = unpack(b, o)
            return [v(w) for v in values]
    else:
        readers = [step_reader(steps[n]) for n in names]

        def read(b, o):
            return [r(b, o) for r in readers]

    if as_tuple:
        def extract(b, o):
            return tuple(read(b, o))
    else:
        def extract(b, o):
            return dict(zip(names, read(b, o)))
    return extract


def compile_reader(cls: type[Packet], name: str) -> Callable[[bytes, int], int]:
    """A function (b, o) → value of one field of layer `cls` at offset o."""
    return step_reader(layer_steps(cls)[name])


def compile_readers(cls: type[Packet], names: Iterable[str]) -> Callable[[bytes, int], tuple]:
    """A function (b, o) → the tuple of the values of the fields `names` of layer `cls`."""
    steps = layer_steps(cls)
    readers = [step_reader(steps[n]) for n in names]
    return lambda b, o: tuple([r(b, o) for r in readers])


def compile_nonzero(cls: type[Packet], names: Iterable[str]) -> Callable[[bytes, int], bool]:
    """A function (b, o) → True when any of the fields `names` is non-zero (the reserved-bit
    checks of decode.reserved_nonzero)."""
    steps = layer_steps(cls)
    readers = [step_reader(steps[n]) for n in names]
    return lambda b, o: any(r(b, o) for r in readers)


def prefix_offsets(cls: type[Packet]) -> dict[str, tuple[int, int, int]]:
    """(byte offset, bit offset in that byte, bits) of each field of a layer's fixed-size
    prefix, up to its first field of variable size (e.g. IPv4 up to its options): for Scapy's
    own layers that model.layout does not model."""
    out, bit = {}, 0
    for fld in cls.fields_desc:
        fld = getattr(fld, "fld", fld) if type(fld).__name__ == "Emph" else fld
        if isinstance(fld, (ConditionalField, StrField)) or getattr(fld, "islist", 0):
            break
        if isinstance(fld, _BitField):
            size = fld.size
        elif isinstance(fld, (IPField, IP6Field, MACField)):
            size = fld.sz * 8
        elif isinstance(fld, Field) and isinstance(getattr(fld, "sz", None), int) and fld.sz > 0 \
                and fld.fmt[-1] not in "sp":
            size = fld.sz * 8
        else:
            break
        out[fld.name] = (bit // 8, bit % 8, size)
        bit += size
    return out
