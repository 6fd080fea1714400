"""``/v1/events``: publish (fan-out, idempotency) and read."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from relay import tracing
from relay.api.access import pinned_app
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
    if tracing.on:  # a span continuing the caller's traceparent (relay.tracing)
        with tracing.publish_span(request.headers) as span:
            try:
                resp = await _publish(request, span)
            except web.HTTPException as exc:  # ApiError: the 4xx it answers
                tracing.http_status(span, exc.status)
                raise
            tracing.http_status(span, resp.status)
            return resp
    return await _publish(request)


async def _publish(request: web.Request, span: Any = None) -> web.Response:
    idem = _idempotency_key(request)
    event, _ = await body(request, EventIn)
    app = pinned_app(request, event.app, "app" in event.model_fields_set, ApiError)
    if app != event.app:  # an app key publishes to its own app
        event = event.model_copy(update={"app": app})
    trace = "" if span is None else tracing.carrier()
    try:
        done = await request.app[PUBLISHER].publish(event, idempotency_key=idem, trace=trace)
    except PublishError as exc:
        raise ApiError(exc.status, exc.code, exc.message, **exc.extra) from None
    if span is not None:
        span.set_attributes(
            {
                "relay.event.id": done.answer["id"],
                "relay.event.type": event.type,
                "relay.app": event.app,
                "relay.deliveries": len(done.answer["deliveries"]),
                "relay.created": done.created,
            }
        )
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
