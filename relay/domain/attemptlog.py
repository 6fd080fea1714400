"""The attempt log's entries: their fields, what they keep of the receiver's answer, and
their short form for the common case (one request, and it succeeded).

An entry keeps the answer's body excerpt (``detail``, up to ``RELAY_RESPONSE_BODY_CAP``
bytes) and, for an answer that was not a success, its headers (``response_headers``,
bounded and without credentials: :func:`answer_headers`).

A delivery's requests are logged in its own list (``ShardKeys.log``), one JSON entry
each. Most deliveries are made by one request that succeeds, and a list key of one
entry costs Redis a key, a quicklist and a node. So record.lua keeps that
first request in the delivery hash instead, as the field ``a1``:
``"<at ms> <duration ms> <status code> <worker>[ <detail>]"``, the status code ``-`` for
a request that has none (a broker's: its answer is the detail), short enough (at most
64 bytes, Redis's ``hash-max-listpack-value``) that the hash stays a compact listpack.
Any later request (a replay, a fenced late write) still goes to the list, and a reader
puts ``a1`` first (:func:`expand`): the API and the CLI show one log either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

INLINE_MAX = 64  # bytes; past Redis's hash-max-listpack-value the hash is a hashtable
NO_STATUS = "-"  # an a1's status code when its request had none (record.lua reads it too)

# The receiver's answer headers kept in an entry (``response_headers``), bounded: so many
# headers, names and values cut, and the lot under a byte budget.
HEADERS_MAX = 20
HEADER_NAME_MAX = 64
HEADER_VALUE_MAX = 200
HEADERS_BYTES = 2048
# Never kept: cookies and credentials, by name, and any name that looks like one.
DROPPED = frozenset({"set-cookie", "cookie", "authorization", "proxy-authorization"})
CREDENTIAL_LIKE = re.compile(
    r"auth|token|secret|passw|session|cookie|key|credential|signature|csrf|xsrf|bearer"
)


def answer_headers(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The headers of a receiver's answer as an entry keeps them: names in lower case,
    repeats joined with ``", "``, cookies and credential-like names dropped, bounded by
    :data:`HEADERS_MAX`, :data:`HEADER_NAME_MAX`, :data:`HEADER_VALUE_MAX` and
    :data:`HEADERS_BYTES` (a header past the budget is left out, not cut)."""
    out: dict[str, str] = {}
    used = 0
    for raw_name, raw_value in items:
        name = raw_name.lower()
        if name in DROPPED or CREDENTIAL_LIKE.search(name) or len(name) > HEADER_NAME_MAX:
            continue
        value = raw_value if name not in out else f"{out[name]}, {raw_value}"
        value = value[:HEADER_VALUE_MAX]
        cost = len(name) + len(value) - len(out.get(name, ""))
        if (name not in out and len(out) >= HEADERS_MAX) or used + cost > HEADERS_BYTES:
            continue
        used += cost
        out[name] = value
    return out


def inline(
    attempt: int, at_ms: int, duration_ms: float, status: int | None, worker: str, detail: str
) -> str:
    """The ``a1`` form of a first request that succeeded; "" when it has no short form."""
    if attempt != 1 or not worker or " " in worker:
        return ""
    code = NO_STATUS if status is None else status
    text = f"{at_ms} {duration_ms!r} {code} {worker}" + (f" {detail}" if detail else "")
    return text if len(text.encode()) <= INLINE_MAX else ""


def fields(
    attempt: int,
    at_ms: int,
    duration_ms: float,
    status: int | None,
    error: str,
    detail: str,
    outcome: str,
    worker: str,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One attempt-log entry, every field its writers put in it (its ``n`` is the log's:
    record.lua numbers entries as it appends them). ``headers``: the answer's, as
    :func:`answer_headers` keeps them (``response_headers``, only when there are any)."""
    entry: dict[str, Any] = {
        "attempt": attempt,
        "at": at_ms,
        "duration_ms": duration_ms,
        "status_code": status,
        "error": error or None,
        "detail": detail or None,
        "outcome": outcome,
        "worker": worker,
    }
    if headers:
        entry["response_headers"] = headers
    return entry


def expand(value: str) -> dict[str, Any]:
    """The attempt-log entry an ``a1`` field stands for (number 1)."""
    at, duration, status, worker, *detail = value.split(" ", 4)
    text = detail[0] if detail else ""
    code = None if status == NO_STATUS else int(status)
    return {"n": 1, **fields(1, int(at), float(duration), code, "", text, "succeeded", worker)}
