"""Reflective checks shared by the layer tests."""

from scapy.fields import _BitField


def assert_bit_runs_close(cls) -> None:
    """Every run of bit fields closes on a byte boundary (Scapy does not check this)."""
    run = 0
    for f in cls.fields_desc:
        if isinstance(f, _BitField):
            run += f.size
        else:
            assert run % 8 == 0, f"{cls.__name__}: bit run before {f.name} ends mid-byte"
            run = 0
    assert run % 8 == 0
