"""``/v1/events``: publish (fan-out, idempotency) and read."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from relay import tracing
from relay.api.access import pinned_app
from relay.api.common import HISTORY, PUBLISHER, ApiError, body, found, json, route
from relay.api.models import EventDetail, EventIn, EventOut
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
    operation_id="publishEvent",
    tag="Events",
    body=EventIn,
    headers={
        IDEMPOTENCY_HEADER: "1-256 printable characters. The same key with the same body "
        "answers the first event again (200); with another body 409. Remembered for "
        "RELAY_IDEMPOTENCY_TTL (24 h), per app."
    },
    responses={201: EventOut, 200: EventOut},
    errors={
        409: ("idempotency_key_reused",),
        422: (
            "payload_invalid",
            "unknown_event_type",
            "schema_invalid",
            "schema_budget_exceeded",
            "unknown_endpoint",
            "too_many_deliveries",
            "app_reserved",
        ),
        503: ("replication_timeout",),
    },
    examples={
        "order-paid": (
            "An event for every subscribed endpoint of the app default",
            {"type": "order.paid", "payload": {"order": 1001, "amount": 4200}},
        ),
        "ordered": (
            "An event of the app shop, in order with the others of its order",
            {
                "type": "order.refunded",
                "app": "shop",
                "ordering_key": "order-1001",
                "payload": {"order": 1001, "amount": 4200},
            },
        ),
    },
)
async def publish(request: web.Request) -> web.Response:
    """Store the event and one delivery per endpoint of its app that subscribes to its
    type (or per ``endpoint_ids``), then answer 201: once answered, it is in Redis. A type
    of the catalog with a schema validates the payload first. With an
    ``Idempotency-Key``, a retry answers the first event (200) and writes nothing."""
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
    operation_id="getEvent",
    tag="Events",
    responses={200: EventDetail},
    errors={503: ("archive_unavailable",)},
)
async def read(request: web.Request) -> web.Response:
    """The event with its payload, its deliveries, and ``filtered``: the endpoints left
    out because their filter erred on it."""
    ident = request.match_info["id"]
    event = found(await request.app[HISTORY].get_event(ident), "event", ident)
    event["created_at"] = signing.rfc3339_ms(event["created_at"])
    return json(event)
