"""``/v1/events``: publish (fan-out, idempotency) and read."""

from __future__ import annotations

from aiohttp import web

from relay.api.common import PUBLISHER, STORE, ApiError, body, found, json, route
from relay.api.models import ErrorOut, EventDetail, EventIn, EventOut
from relay.domain import signing
from relay.publishing import PublishError

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
    responses={
        201: EventOut,
        200: EventOut,
        409: ErrorOut,
        413: ErrorOut,
        422: ErrorOut,
        503: ErrorOut,
    },
)
async def publish(request: web.Request) -> web.Response:
    idem = _idempotency_key(request)
    event, _ = await body(request, EventIn)
    if event.app == request.app[STORE].settings.ops_app:  # relay's own operational events
        raise ApiError(422, "app_reserved", f"app {event.app!r} is reserved for relay's events")
    try:
        done = await request.app[PUBLISHER].publish(event, idempotency_key=idem)
    except PublishError as exc:
        raise ApiError(exc.status, exc.code, exc.message) from None
    return json(done.answer, status=201 if done.created else 200)


@route(
    "GET",
    "/v1/events/{id}",
    summary="Read an event and its deliveries",
    responses={200: EventDetail, 404: ErrorOut},
)
async def read(request: web.Request) -> web.Response:
    ident = request.match_info["id"]
    event = found(await request.app[STORE].get_event(ident), "event", ident)
    event["created_at"] = signing.rfc3339_ms(event["created_at"])
    return json(event)
