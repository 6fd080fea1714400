"""``/v1/events``: publish (fan-out, idempotency) and read."""

from __future__ import annotations

import hashlib
import random
import time
import zlib

import orjson
from aiohttp import web

from relay.api.common import ENDPOINT_CACHE, SETTINGS, STORE, ApiError, body, json, route
from relay.api.models import ErrorOut, EventDetail, EventIn, EventOut
from relay.domain import ids, matching, signing

IDEMPOTENCY_HEADER = "Idempotency-Key"


def _idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    if not 1 <= len(key) <= 256 or not key.isprintable():
        raise ApiError(422, "validation_error", "Idempotency-Key must be 1-256 printable chars")
    return key


@route(
    "POST",
    "/v1/events",
    summary="Publish an event",
    body=EventIn,
    responses={201: EventOut, 200: EventOut, 409: ErrorOut, 413: ErrorOut, 422: ErrorOut},
)
async def publish(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    store = request.app[STORE]
    idem = _idempotency_key(request)
    event, _ = await body(request, EventIn)
    payload_json = orjson.dumps(event.payload)
    if len(payload_json) > settings.max_payload_bytes:
        raise ApiError(
            413,
            "payload_too_large",
            f"payload is {len(payload_json)} bytes; the limit is {settings.max_payload_bytes}",
        )

    endpoints = await request.app[ENDPOINT_CACHE].endpoints_for_app(event.app)
    if event.endpoint_ids is not None:
        known = {e["id"] for e in endpoints}
        unknown = [i for i in event.endpoint_ids if i not in known]
        if unknown:
            raise ApiError(
                422,
                "unknown_endpoint",
                f"not endpoints of app {event.app!r}: {', '.join(unknown[:10])}",
            )
        wanted = set(event.endpoint_ids)
        endpoints = [e for e in endpoints if e["id"] in wanted]
    targets = [
        e for e in endpoints if e["enabled"] and matching.matches(e["event_types"], event.type)
    ]

    if idem is not None:  # the same key always lands on the same shard
        shard = zlib.crc32(f"{event.app}\0{idem}".encode()) % settings.shards
    else:
        shard = random.randrange(settings.shards)
    now_ms = int(time.time() * 1000)
    event_id = ids.new_id("evt", shard, now_ms)
    deliveries = [(ids.new_id("dlv", shard, now_ms), e["id"]) for e in targets]
    answer = {
        "id": event_id,
        "type": event.type,
        "app": event.app,
        "created_at": signing.rfc3339_ms(now_ms),
        "deliveries": [{"id": d, "endpoint_id": e} for d, e in deliveries],
    }
    guard = None
    if idem is not None:
        fingerprint = hashlib.sha256(
            orjson.dumps(event.model_dump(), option=orjson.OPT_SORT_KEYS)
        ).hexdigest()
        guard = (idem, orjson.dumps({"h": fingerprint, "answer": answer}))
    taken = await store.publish(
        shard=shard,
        event_id=event_id,
        event_type=event.type,
        app=event.app,
        body=signing.build_body(event_id, event.type, now_ms, payload_json),
        created_ms=now_ms,
        deliveries=deliveries,
        idempotency=guard,
    )
    if taken is not None:
        first = orjson.loads(taken)
        if first["h"] != fingerprint:
            raise ApiError(
                409,
                "idempotency_key_reused",
                "this Idempotency-Key was used with a different request body",
            )
        return json(first["answer"], status=200)
    return json(answer, status=201)


@route(
    "GET",
    "/v1/events/{id}",
    summary="Read an event and its deliveries",
    responses={200: EventDetail, 404: ErrorOut},
)
async def read(request: web.Request) -> web.Response:
    event = await request.app[STORE].get_event(request.match_info["id"])
    if event is None:
        raise ApiError(404, "not_found", f"event {request.match_info['id']} does not exist")
    event["created_at"] = signing.rfc3339_ms(event["created_at"])
    return json(event)
