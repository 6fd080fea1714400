"""The attempt log's short form for the common case: one request, and it succeeded.

A delivery's requests are logged in its own list (``ShardKeys.log``), one JSON entry
each. Most deliveries are made by one request that succeeds, and a list key of one
entry costs Redis a key, a quicklist and a node. So record.lua keeps that
first request in the delivery hash instead, as the field ``a1``:
``"<at ms> <duration ms> <status code> <worker>[ <detail>]"``, short enough (at most
64 bytes, Redis's ``hash-max-listpack-value``) that the hash stays a compact listpack.
Any later request (a replay, a fenced late write) still goes to the list, and a reader
puts ``a1`` first (:func:`expand`): the API and the CLI show one log either way.
"""

from __future__ import annotations

from typing import Any

INLINE_MAX = 64  # bytes; past Redis's hash-max-listpack-value the hash is a hashtable


def inline(
    attempt: int, at_ms: int, duration_ms: float, status: int | None, worker: str, detail: str
) -> str:
    """The ``a1`` form of a first request that succeeded; "" when it has no short form."""
    if attempt != 1 or status is None or not worker or " " in worker:
        return ""
    text = f"{at_ms} {duration_ms!r} {status} {worker}" + (f" {detail}" if detail else "")
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
) -> dict[str, Any]:
    """One attempt-log entry, every field its writers put in it (its ``n`` is the log's:
    record.lua numbers entries as it appends them)."""
    return {
        "attempt": attempt,
        "at": at_ms,
        "duration_ms": duration_ms,
        "status_code": status,
        "error": error or None,
        "detail": detail or None,
        "outcome": outcome,
        "worker": worker,
    }


def expand(value: str) -> dict[str, Any]:
    """The attempt-log entry an ``a1`` field stands for (number 1)."""
    at, duration, status, worker, *detail = value.split(" ", 4)
    text = detail[0] if detail else ""
    return {
        "n": 1,
        **fields(1, int(at), float(duration), int(status), "", text, "succeeded", worker),
    }
