"""The stored form of an event (layout v3): one Redis string, a header line, then the payload.

``<header JSON>\\n<stored>``. The header holds what relay needs besides the payload:
``type``, ``app``, ``max_attempts`` (the attempt budget of its deliveries), the deliveries
as ``d``, and when there are any, ``filtered``, the trace context ``tp``, ``at`` (the
``deliver_at`` of an event published for later, ms), the ``Idempotency-Key`` it was
published with ``ik``, ``z`` and ``raw``. The payload is stored once per event whatever
its fan-out.

``d`` lists one entry per delivery, in order: an endpoint id, for a delivery whose id
derives from the event's (:func:`relay.domain.ids.delivery_id`, everything layout v3
publishes), or ``[delivery id, endpoint id]`` for one that does not (an event moved from
layout v2 by ``relay migrate``).

What is stored after the newline is the payload, exactly as published: the body that is
signed and sent is :func:`relay.domain.signing.build_body` of the event's id, type,
creation time and this payload, the same bytes every time. The creation time is the one
the event id carries (``created_at`` is in the header only when it is not). ``raw: 1``:
what is stored is the whole body as sent (an event moved from an older layout, or one
whose body is not :func:`build_body`'s).

``z: 1``: what is stored is zlib-compressed (it is past :data:`COMPRESS_FROM` bytes and
compression saved at least an eighth). Webhook payloads are JSON, which deflate makes
about half as large, and the payload is most of what an event costs in Redis. The
compressed bytes are not UTF-8: relay's Redis clients decode with ``surrogateescape``
(:mod:`relay.queue.base`), which gives back the exact bytes. The header never holds a raw
newline (compact JSON), so the first newline splits the two parts, in Python and in the
scripts (claim.lua, expire.lua) alike.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import orjson

from relay.domain import ids, signing

COMPRESS_FROM = 256  # bytes stored; below this deflate saves too little to pay
LEVEL = 6


def pack(
    *,
    event_id: str,
    event_type: str,
    app: str,
    created_ms: int,
    max_attempts: int,
    deliveries: Sequence[tuple[str, str]],
    body: bytes,
    filtered: Sequence[dict[str, str]] = (),
    trace: str = "",
    deliver_at: int | None = None,
    idempotency_key: str = "",
) -> bytes:
    """The stored value of an event whose body (as sent) is ``body``. A delivery whose id
    derives from ``event_id`` is listed by its endpoint id alone."""
    header: dict[str, Any] = {
        "type": event_type,
        "app": app,
        "max_attempts": max_attempts,
        "d": [
            e if ids.is_delivery_of(d, event_id, i) else [d, e]
            for i, (d, e) in enumerate(deliveries)
        ],
    }
    if created_ms != ids.created_ms(event_id):
        header["created_at"] = created_ms
    if filtered:
        header["filtered"] = list(filtered)
    if trace:
        header["tp"] = trace
    if deliver_at is not None:
        header["at"] = deliver_at
    if idempotency_key:
        header["ik"] = idempotency_key
    head = signing.body_head(event_id, event_type, created_ms)
    if body.startswith(head) and body.endswith(b"}"):
        stored = body[len(head) : -1]  # the payload: the body is made again from it
    else:
        header["raw"] = 1
        stored = body
    if len(stored) >= COMPRESS_FROM:
        packed = zlib.compress(stored, LEVEL)
        if len(packed) <= len(stored) - len(stored) // 8:
            header["z"] = 1
            stored = packed
    return orjson.dumps(header) + b"\n" + stored


def raw(value: str | bytes) -> bytes:
    """The stored bytes of a value read through a client that decodes responses (with
    ``surrogateescape``: compressed bytes come back exactly)."""
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")


def header_of(value: str | bytes) -> dict[str, Any]:
    """Only the header of a stored event (or of its first bytes, when they hold it)."""
    return orjson.loads(raw(value).partition(b"\n")[0])


def created(event_id: str, header: dict[str, Any]) -> int:
    """When the event was created (ms): the time its id carries, unless the header says."""
    at = header.get("created_at")
    return int(at) if at is not None else int(ids.created_ms(event_id) or 0)


def unpack(value: str | bytes, event_id: str) -> tuple[dict[str, Any], bytes]:
    """``(header, body)`` of a stored event: the body exactly as it is signed and sent."""
    header, stored = _parts(value)
    if header.get("raw"):
        return header, stored
    head = signing.body_head(event_id, header["type"], created(event_id, header))
    return header, head + stored + b"}"


def payload(value: str | bytes) -> Any:
    """The event's payload (the body's ``data``), parsed."""
    header, stored = _parts(value)
    return orjson.loads(stored)["data"] if header.get("raw") else orjson.loads(stored)


def _parts(value: str | bytes) -> tuple[dict[str, Any], bytes]:
    head, _, stored = raw(value).partition(b"\n")
    header = orjson.loads(head)
    return header, zlib.decompress(stored) if header.get("z") else stored


def endpoint_of(delivery_id: str, header: dict[str, Any]) -> str | None:
    """The endpoint id the header lists for a delivery whose id derives from its event's
    (the entry of ``d`` at the index the id ends with); None for any other."""
    derived = ids.derived(delivery_id)
    return None if derived is None else endpoint_at(header, derived[1])


def endpoint_at(header: dict[str, Any], index: int) -> str | None:
    """The endpoint id at ``index`` of the header's ``d``, if that entry is one (not a
    ``[delivery id, endpoint id]`` pair); None for any other index."""
    entries = header.get("d", ())
    entry = entries[index] if 0 <= index < len(entries) else None
    return entry if isinstance(entry, str) else None


def deliveries(event_id: str, header: dict[str, Any]) -> list[tuple[str, str]]:
    """``(delivery id, endpoint id)`` of every delivery of the event, in order."""
    return [
        (ids.delivery_id(event_id, i), e) if isinstance(e, str) else (e[0], e[1])
        for i, e in enumerate(header["d"])
    ]


def listed(event_id: str, header: dict[str, Any]) -> list[dict[str, str]]:
    """The event's deliveries as the API lists them."""
    return [{"id": d, "endpoint_id": e} for d, e in deliveries(event_id, header)]


def view(event_id: str, value: str | bytes) -> dict[str, Any]:
    """The event as the API shows it, from its stored form (Redis's, or the archive's copy
    of it)."""
    header = header_of(value)
    event = {
        "id": event_id,
        "type": header["type"],
        "app": header["app"],
        "created_at": created(event_id, header),
        "payload": payload(value),
        "deliveries": listed(event_id, header),
    }
    if "filtered" in header:  # endpoints whose filter erred on it (relay.domain.filters)
        event["filtered"] = header["filtered"]
    if "at" in header:  # published for later: its deliver_at, ms
        event["deliver_at"] = header["at"]
    if "ik" in header:  # the Idempotency-Key it was published with
        event["idempotency_key"] = header["ik"]
    return event
