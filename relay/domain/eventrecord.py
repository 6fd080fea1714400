"""The stored form of an event (layout v2): one Redis string, a header line, then the body.

``<header JSON>\\n<body>``: the header holds what relay needs besides the bytes it sends
(``type``, ``app``, ``created_at``, the deliveries as ``d`` = ``[[delivery id, endpoint
id], ...]``, and when there are any, ``filtered`` and the trace context ``tp``); the body
is the exact JSON that is signed and sent, stored once per event whatever its fan-out.
Neither part has a raw newline (both are compact JSON), so the first newline splits them:
claim.lua and expire.lua split it the same way.

One string costs about 1,405 bytes of Redis for a 1 KiB body, where layout v1's hash
(body and fields, a hashtable: its body is past ``hash-max-listpack-value``) cost about
2,020. The event never changes after publish, so it needs no fields of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson


def pack(
    *,
    event_type: str,
    app: str,
    created_ms: int,
    deliveries: Sequence[tuple[str, str]],
    body: bytes,
    filtered: Sequence[dict[str, str]] = (),
    trace: str = "",
) -> bytes:
    """The stored value of an event (``body`` must hold no raw newline: compact JSON)."""
    header: dict[str, Any] = {
        "type": event_type,
        "app": app,
        "created_at": created_ms,
        "d": [[d, e] for d, e in deliveries],
    }
    if filtered:
        header["filtered"] = list(filtered)
    if trace:
        header["tp"] = trace
    return orjson.dumps(header) + b"\n" + body


def unpack(value: str | bytes) -> tuple[dict[str, Any], str]:
    """``(header, body)`` of a stored event."""
    text = value.decode() if isinstance(value, bytes) else value
    head, _, body = text.partition("\n")
    return orjson.loads(head), body


def deliveries(header: dict[str, Any]) -> list[dict[str, str]]:
    """The event's deliveries as the API lists them."""
    return [{"id": d, "endpoint_id": e} for d, e in header["d"]]
