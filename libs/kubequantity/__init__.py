"""Kubernetes resource quantities (``500m``, ``16Gi``, ``1e3``, ``8``) as exact decimals.

One parser for the two places that read quantities: kubesim's Kueue (quota, requests)
and the Actuator's manifest validation. A leaf package: it imports nothing of ours, so
the emulator and XMC can share it and still not import each other.

The grammar is apimachinery's ``resource.Quantity``: a signed decimal number, then a
binary suffix (``Ki`` … ``Ei``), a decimal suffix (``n u m k M G T P E``) or an
exponent (``e3``, ``E-3``). Surrounding white space is allowed, as the API server's JSON
decoding trims it (``Quantity.UnmarshalJSON``). Signs are kept: callers decide whether a
negative quantity is an error.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Final

__all__ = ["format_quantity", "parse_quantity"]

_SUFFIXES: Final[dict[str, Decimal]] = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY: Final = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exponent>[+-]?[0-9]+))?"
)
_BINARY: Final = [(s, int(f)) for s, f in _SUFFIXES.items() if s.endswith("i")][::-1]
_BYTE_RESOURCES: Final = ("memory", "storage")


def parse_quantity(value: object) -> Decimal:
    """The quantity's value; a JSON number is taken as it is. ``ValueError`` for anything
    else: other text, booleans, None, containers."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise ValueError(f"invalid quantity {value!r}")
    match = _QUANTITY.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"invalid quantity {value!r}")
    try:
        number = Decimal(match["number"])
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        raise ValueError(f"invalid quantity {value!r}") from None
    if match["exponent"] is not None:
        return number.scaleb(int(match["exponent"]))
    return number * _SUFFIXES[match["suffix"] or ""]


def format_quantity(value: Decimal, resource: str = "") -> str:
    """Canonical-looking text: ``16Gi`` for byte resources, ``500m``, ``4``."""
    if value == value.to_integral_value():
        number = int(value)
        if number and resource.endswith(_BYTE_RESOURCES):
            for suffix, factor in _BINARY:
                if number % factor == 0:
                    return f"{number // factor}{suffix}"
        return str(number)
    milli = value * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return format(value.normalize(), "f")
