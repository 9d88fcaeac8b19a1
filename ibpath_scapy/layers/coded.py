"""IBA-coded fields: path MTU, static rate and the 4.096 µs × 2^n time exponents
(PathRecord PacketLifeTime, CM timeouts), IBA Vol1 §15.2.5.16 and §12.6.

Sources: wire-formats.md §3 "Encodings" (OpenSM IB_MTU_LEN_* / IB_PATH_RECORD_RATE_*, kernel
enum ib_mtu / enum ib_rate; PacketLifeTime = 4.096 µs × 2^code).

One definition of each code table and of its display text, shared by the Scapy fields (any2i,
i2repr), the decode text (render.py), the HTML report and, through the fields' value strings,
the generated Wireshark plugin.

What a coded field accepts (`PathRecord(mtu=...)`, `CMReq(primary_packet_rate=...)`):

- an integer is always the code: ``mtu=4``, ``rate=3``, ``packet_life_time=18``; it must be a
  code the IBA defines (every 6-bit exponent is one), else ValueError;
- the value's name or human value: ``mtu=2048`` or ``"2048"``, ``rate="100 Gb/s"`` (also
  ``"100Gb/s"``, ``"100 Gbps"``, ``"100G"``, ``"IB_RATE_100_GBPS"``), ``packet_life_time=
  "1.074 s"`` (any time within 0.5 % of 4.096 µs × 2^n, in s, ms, µs/us or ns).
  A rate in Gb/s is only read from a string: ``rate=10`` is code 10 (120 Gb/s), not 10 Gb/s;
  an integer that is no rate code but a Gb/s value (``rate=40``) raises, naming the code;
- a selector (PathRecord ``mtu_selector``, ``rate_selector``, ``packet_life_time_selector``):
  its code 0-3 or its name, ``"greater than"``, ``"less than"``, ``"exactly"``, ``"largest
  available"`` (``"smallest available"`` for PacketLifeTime);
- ``RawCode(n)``: any code that fits the field's width, defined or not, written as is (to
  craft a malformed record: ``PathRecord(mtu=RawCode(0))``).

A PathRecord's rate 0 is reserved (OpenSM answers REQ_INVALID to a query for it); 0 is "port
current" only where the kernel's enum ib_rate is carried, the CM REQ's packet rates.

Anything else raises ValueError naming the field and what it accepts; a value is never
masked or changed silently.
"""

from __future__ import annotations

import math
import re

from scapy.fields import BitEnumField, ShortField, _BitField
from scapy.packet import RawVal

# Path MTU codes (enum ib_mtu, OpenSM IB_MTU_LEN_*): wire-formats.md §3 Encodings.
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
MTU_CODES = {code: str(n) for code, n in MTU_BYTES.items()}

# Static rate codes (enum ib_rate, OpenSM IB_PATH_RECORD_RATE_*), Gb/s.
RATE_GBPS = {2: 2.5, 3: 10, 4: 30, 5: 5, 6: 20, 7: 40, 8: 60, 9: 80, 10: 120, 11: 14, 12: 56,
             13: 112, 14: 168, 15: 25, 16: 100, 17: 200, 18: 300, 19: 28, 20: 50, 21: 400,
             22: 600, 23: 800, 24: 1200, 25: 1600}
# A PathRecord's rate (IBA 15.2.5.16; OpenSM's rates start at IB_MIN_RATE = 2, 2.5 Gb/s, and a
# query for rate 0 is answered REQ_INVALID): 0 and 1 are reserved.
PATH_RATE_CODES = {c: f"{g:g} Gb/s" for c, g in sorted(RATE_GBPS.items())}
# The kernel's enum ib_rate, which the CM REQ's packet rates carry: 0 is IB_RATE_PORT_CURRENT,
# the rate of the port the connection leaves by.
RATE_CODES = {0: "port current", **PATH_RATE_CODES}

TIME_UNIT = 4.096e-6  # seconds: a time exponent n stands for 4.096 µs × 2^n


def time_exponent_seconds(code: int) -> float:
    """4.096 µs × 2^code: PacketLifeTime, CM ACK timeout and response timeouts."""
    return TIME_UNIT * (1 << code)


def format_seconds(t: float) -> str:
    """A duration in the one style of every ibpath output: 4 significant digits, s/ms/µs/ns."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if t >= scale:
            return f"{t / scale:.4g} {unit}"
    return f"{t / 1e-9:.4g} ns"


def time_exponent_text(code: int) -> str:
    """'1.074 s' for 18."""
    return format_seconds(time_exponent_seconds(code))


def coded_text(table: dict, code: int) -> str:
    """A code with its meaning, as Wireshark shows a value string: '2048 (4)', 'Unknown (7)'."""
    return f"{table.get(code, 'Unknown')} ({code})"


# The permissive LID (IBA 4.1.2; ib_verbs.h IB_LID_PERMISSIVE): a CM REQ's LIDs off the
# subnet, a directed-route SMP's
PERMISSIVE_LID = 0xFFFF


class LIDField(ShortField):
    """A 16-bit LID, shown in decimal as infiniband-diags and OpenSM print it; the Wireshark
    plugin adds the hex Wireshark users expect ("58 (0x003a)", `lua_base`)."""

    lua_base = "DEC_HEX"


class RawCode(int):
    """A code written as is, whether the IBA defines it or not (it must fit the field):
    ``PathRecord(mtu=RawCode(0), rate=RawCode(63))`` crafts a record no SA would send."""


class CheckedBits:
    """Packet mixin: building refuses a bit field value wider than the field instead of
    letting Scapy mask it silently (PathRecord(sl=20) would go out as SL 4). Only values the
    user set are checked; RawVal still writes any bytes."""

    def self_build(self):
        for f in self.fields_desc:
            fld = getattr(f, "fld", f)  # a ConditionalField's field
            v = self.fields.get(f.name)
            if (v is None or isinstance(v, RawVal) or not isinstance(fld, _BitField)
                    or isinstance(fld, CodedField)):  # (coded fields check on assignment)
                continue
            try:
                n = int(v)
            except (TypeError, ValueError):
                continue  # a volatile (fuzz) value or a list: Scapy's own business
            if not 0 <= n < 1 << fld.size:
                raise ValueError(f"{type(self).__name__}.{f.name}: {n} does not fit in "
                                 f"{fld.size} bits (0-{(1 << fld.size) - 1})")
        return super().self_build()


def raw_values(values: dict) -> dict:
    """`values` with every integer as a RawCode: to rebuild a layer from decoded wire values,
    which need not be codes the IBA defines (``PathRecord(**raw_values(decoded))``)."""
    return {k: RawCode(v) if isinstance(v, int) and not isinstance(v, bool) else v
            for k, v in values.items()}


_NUMBER = r"((?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?)"  # 2.5, .5, 1.759e+04
_GBPS = re.compile(rf"{_NUMBER}\s*(?:gb/s|gbps|gbit/s|g)", re.I)
_TIME = re.compile(rf"{_NUMBER}\s*(s|ms|µs|us|ns)", re.I)
_TIME_SCALE = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}


class CodedField(BitEnumField):
    """A bit field holding an IBA code; see the module docstring for what it accepts.

    Subclasses say what a human value is (`_human`) and what the field accepts (`accepts`,
    for error messages). The stored value is always the integer code, so dissection, JSON
    and the compiled fast path see plain integers.
    """

    __slots__ = ["_checking", "accepts"]  # scapy's Field metaclass gives every field slots
    ACCEPTS = "a code"

    def __init__(self, name, default, size, enum, accepts: str | None = None):
        self._checking = False  # Field.__init__ passes the default through any2i
        self.accepts = accepts or self.ACCEPTS
        super().__init__(name, default, size, enum)
        self._checking = True

    def _human(self, x) -> int | None:
        """The code of a human value (a number or text), or None."""
        return None

    def _fail(self, x, hint: str = ""):
        raise ValueError(f"{self.name}: {x!r} is not accepted; give {self.accepts}, or "
                         f"RawCode(n) for any {self.size}-bit code{hint}")

    def any2i(self, pkt, x):
        if x is None or not self._checking:
            return x
        if isinstance(x, RawCode):
            if not 0 <= x < 1 << self.size:
                raise ValueError(f"{self.name}: RawCode({int(x)}) does not fit in "
                                 f"{self.size} bits")
            return int(x)
        if isinstance(x, bool):
            self._fail(x)
        if isinstance(x, int):
            if x in self.i2s:
                return x
            code = self._human(x)
            if code is not None:
                return code
            self._fail(x, self._int_hint(x))
        if isinstance(x, str):
            s = x.strip()
            if s in self.s2i:
                return self.s2i[s]
            if s.isdigit() and int(s) in self.i2s:
                return int(s)
            code = self._human(s)
            if code is not None:
                return code
        if isinstance(x, float):
            code = self._human(x)
            if code is not None:
                return code
        self._fail(x)

    def _int_hint(self, x: int) -> str:
        return ""

    def i2repr(self, pkt, x):
        if x is None or not isinstance(x, int):
            return super().i2repr(pkt, x)
        return coded_text(self.i2s, x)


class MTUField(CodedField):
    """Path MTU (6 bits in a PathRecord, 4 in a CM REQ): code 1-5, or bytes 256-4096."""

    ACCEPTS = "an MTU code 1-5 or bytes 256, 512, 1024, 2048, 4096 (e.g. 2048 or '2048')"

    def __init__(self, name, default, size):
        super().__init__(name, default, size, MTU_CODES)

    def _human(self, x):
        text = str(x).strip().upper().removeprefix("IB_MTU_").removesuffix("BYTES").strip()
        if text.isdigit():
            return {n: c for c, n in MTU_BYTES.items()}.get(int(text))
        return None


class RateField(CodedField):
    """Static rate (6 bits): a code, or Gb/s as text ('100 Gb/s'); integers are codes.

    `codes`: the field's table, RATE_CODES (the kernel's enum ib_rate, 0 = port current: the
    CM REQ's packet rates) or PATH_RATE_CODES (a PathRecord's rate, where 0 is reserved)."""

    def __init__(self, name, default, size, codes: dict = RATE_CODES):
        current = "0 = port current, " if 0 in codes else ""
        accepts = (f"a rate code ({current}{min(RATE_GBPS)}-{max(RATE_GBPS)}), or Gb/s as text "
                   "such as '100 Gb/s' (an integer is always the code: rate=10 is 120 Gb/s)")
        super().__init__(name, default, size, codes, accepts)

    def _human(self, x):
        if not isinstance(x, str):
            return None
        s = x.strip()
        kernel = re.fullmatch(r"IB_RATE_(\d+)(?:_(\d+))?_GBPS", s, re.I)
        if kernel:
            s = f"{kernel.group(1)}.{kernel.group(2) or 0} Gb/s"
        if s.upper() == "IB_RATE_PORT_CURRENT":
            return 0 if 0 in self.i2s else None
        m = _GBPS.fullmatch(s)
        if not m:
            return None
        want = float(m.group(1))
        return next((c for c, g in RATE_GBPS.items() if g == want), None)

    def _int_hint(self, x):
        code = next((c for c, g in RATE_GBPS.items() if g == x), None)
        return f" ({x} Gb/s is rate='{x} Gb/s', code {code})" if code is not None else ""


class SelectorField(CodedField):
    """A 2-bit selector of a PathRecord's MTU, rate or PacketLifeTime (enum ib_sa_selector,
    OpenSM IB_PATH_SELECTOR_*): the code 0-3 or its name, as `names` gives them."""

    def __init__(self, name, default, names: dict):
        accepts = ("a selector code 0-3 or its name: "
                   + ", ".join(f"'{n}' ({c})" for c, n in sorted(names.items())))
        super().__init__(name, default, 2, names, accepts)


class TimeExponentField(CodedField):
    """A time exponent (4.096 µs × 2^n): the code, or a time as text ('1.074 s', '4.096 µs')."""

    def __init__(self, name, default, size):
        table = {n: time_exponent_text(n) for n in range(1 << size)}
        accepts = (f"a code 0-{(1 << size) - 1} (4.096 µs × 2^code) or a time such as "
                   f"'{table[min(18, (1 << size) - 1)]}'")
        super().__init__(name, default, size, table, accepts)

    def _human(self, x):
        if not isinstance(x, str):
            return None
        m = _TIME.fullmatch(x.strip())
        if not m:
            return None
        t = float(m.group(1)) * _TIME_SCALE[m.group(2).lower()]
        if t <= 0:
            return None
        n = round(math.log2(t / TIME_UNIT))
        if 0 <= n < 1 << self.size and abs(t / time_exponent_seconds(n) - 1) < 0.005:
            return n
        return None


__all__ = ["CheckedBits", "LIDField", "MTU_BYTES", "MTU_CODES", "RATE_GBPS", "RATE_CODES",
           "PATH_RATE_CODES", "RawCode", "CodedField", "raw_values", "MTUField", "RateField",
           "SelectorField", "TimeExponentField", "time_exponent_seconds",
           "time_exponent_text", "format_seconds", "coded_text"]
