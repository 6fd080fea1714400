"""What JSON relay accepts beyond "it parses": one nesting limit, exact integers only.

orjson parses 1,024 levels but serializes only 254, and turns an integer literal beyond
64 bits into a float (``123456789012345678901234567890`` becomes ``1.2345678901234568e+29``).
Both are refused at parse instead (the API answers 422), so what relay stores and sends
is exactly what it was given. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64  # nesting levels of arrays and objects in a request body, the body itself 1
INT_MIN, INT_MAX = -(2**63), 2**64 - 1  # what orjson keeps exact (int64 and uint64)
# Each byte of a body mapped to its class: a digit "0", what may stand before a number
# ("!": ``:`` ``,`` ``[`` ``-`` whitespace), anything else " "; then one ``bytes.find``
# for 19 digits after such a byte, at C speed.
_CLASSES = bytes(
    0x30 if 0x30 <= c <= 0x39 else 0x21 if c in b":,[- \t\r\n" else 0x20 for c in range(256)
)
_LONG_RUN = b"0" * 19


class JsonLimitError(ValueError):
    """The JSON parsed, but relay does not accept it (too deep, an inexact integer)."""


def check(raw: bytes, data: Any) -> None:
    """Raise :class:`JsonLimitError` when ``data`` (parsed from ``raw``) breaks a limit."""
    # Cheap common case: fewer brackets than the limit cannot nest deeper than it.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and depth(data) > MAX_DEPTH:
        raise JsonLimitError(f"JSON nested deeper than {MAX_DEPTH} levels")
    classes = raw.translate(_CLASSES)
    if classes.startswith(_LONG_RUN) or classes.find(b"!" + _LONG_RUN) >= 0:
        # 19 digits in a row where a number may start (or inside a string that looks so):
        # the standard parser, which keeps integers exact, says whether one does not fit.
        json.loads(raw, parse_int=_exact_int)


def depth(data: Any) -> int:
    """Nesting levels of arrays and objects (a scalar is 0), without recursion: one level
    of containers at a time, stopping past the limit."""
    level = [data] if isinstance(data, (dict, list)) else []
    deepest = 0
    while level and deepest <= MAX_DEPTH:
        deepest += 1
        below: list[Any] = []
        for value in level:
            children = value.values() if isinstance(value, dict) else value
            below += [c for c in children if isinstance(c, (dict, list))]
        level = below
    return deepest


def _exact_int(literal: str) -> int:
    value = int(literal)
    if not INT_MIN <= value <= INT_MAX:
        raise JsonLimitError(
            f"integer {literal[:40]}{'...' if len(literal) > 40 else ''} does not fit in 64 "
            "bits; send it as a string to keep it exact"
        )
    return value
