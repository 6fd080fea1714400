"""What JSON relay accepts beyond "it parses": one nesting limit, exact integers only.

orjson parses 1,024 levels but serializes only 254, and turns an integer literal beyond
64 bits into a float (``123456789012345678901234567890`` becomes ``1.2345678901234568e+29``).
Both are refused at parse instead (the API answers 422), so what relay stores and sends
is exactly what it was given. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 64  # nesting levels of arrays and objects in a request body, the body itself 1
INT_MIN, INT_MAX = -(2**63), 2**64 - 1  # what orjson keeps exact (int64 and uint64)
_LONG_DIGITS = re.compile(rb"\d{19}")


class JsonLimitError(ValueError):
    """The JSON parsed, but relay does not accept it (too deep, an inexact integer)."""


def check(raw: bytes, data: Any) -> None:
    """Raise :class:`JsonLimitError` when ``data`` (parsed from ``raw``) breaks a limit."""
    # Cheap common case: fewer brackets than the limit cannot nest deeper than it.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and depth(data) > MAX_DEPTH:
        raise JsonLimitError(f"JSON nested deeper than {MAX_DEPTH} levels")
    if _LONG_DIGITS.search(raw):
        # 19 digits in a row somewhere (a number or inside a string): the standard
        # parser, which keeps integers exact, says whether an integer does not fit.
        json.loads(raw, parse_int=_exact_int)


def depth(data: Any) -> int:
    """Nesting levels of arrays and objects (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        stack.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))
    return deepest


def _exact_int(literal: str) -> int:
    value = int(literal)
    if not INT_MIN <= value <= INT_MAX:
        raise JsonLimitError(
            f"integer {literal[:40]}{'...' if len(literal) > 40 else ''} does not fit in 64 "
            "bits; send it as a string to keep it exact"
        )
    return value
