"""``/v1/events``: publish (fan-out, idempotency), list and search, read."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from relay import tracing
from relay.api.access import pinned_app
from relay.api.archive import payload_filter
from relay.api.common import HISTORY, PUBLISHER, STORE, ApiError, body, found, json, query, route
from relay.api.deliveries import cursor_position, invalid_cursor, sealed
from relay.api.eventmodels import EventList, EventPage, EventPageQuery, EventQuery
from relay.api.models import EventOut, EventPublishIn
from relay.api.sentheaders import sent_headers
from relay.domain import signing
from relay.eventsearch import ArchiveRequired, event_page, list_events
from relay.publishing import PublishError
from relay.queue.store import EventFilter

IDEMPOTENCY_HEADER = "Idempotency-Key"


def _idempotency_key(request: web.Request) -> str | None:
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    if not valid_key(key):
        raise ApiError(422, "validation_error", "Idempotency-Key must be 1-256 printable chars")
    return key


def valid_key(key: object) -> bool:
    """Whether ``key`` can be an idempotency key: 1-256 printable characters."""
    return isinstance(key, str) and 1 <= len(key) <= 256 and key.isprintable()


@route(
    "POST",
    "/v1/events",
    summary="Publish an event",
    operation_id="publishEvent",
    tag="Events",
    body=EventPublishIn,
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
            "deliver_at_invalid",
            "deliver_at_too_far",
            "deliver_at_ordered",
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
        "scheduled": (
            "An event whose deliveries go at a later time (status scheduled until then)",
            {
                "type": "trial.ending",
                "deliver_at": "2026-12-24T09:00:00Z",
                "payload": {"customer": "cus_42"},
            },
        ),
    },
)
async def publish(request: web.Request) -> web.Response:
    """Store the event and one delivery per endpoint of its app that subscribes to its
    type (or per ``endpoint_ids``), then answer 201: once answered, it is in Redis. A type
    of the catalog with a schema validates the payload first. With an
    ``Idempotency-Key``, a retry answers the first event (200) and writes nothing. With
    ``deliver_at`` ahead, the deliveries are ``scheduled`` and go at that time."""
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
    event, _ = await body(request, EventPublishIn)
    app = pinned_app(request, event.app, "app" in event.model_fields_set, ApiError)
    if app != event.app:  # an app key publishes to its own app
        event = event.model_copy(update={"app": app})
    trace = "" if span is None else tracing.carrier()
    try:
        done = await request.app[PUBLISHER].publish(
            event, idempotency_key=idem, trace=trace, deliver_at=event.deliver_at_ms()
        )
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
    "/v1/events",
    summary="List and search events, newest first",
    operation_id="listEvents",
    tag="Events",
    query=EventQuery,
    responses={200: EventList},
    errors={
        400: ("invalid_cursor", "invalid_payload_filter"),
        422: ("validation_error", "archive_required"),
        503: ("archive_unavailable",),
    },
)
async def list_(request: web.Request) -> web.Response:
    """A page of events, newest first, each with its deliveries' statuses; filter by
    type, app, endpoint, the status of a delivery, creation time or ``Idempotency-Key``.
    ``next_cursor`` continues; a rare filter may answer a short page with a cursor. An
    API key or portal session lists its own app's events only. With the archive
    (``RELAY_ARCHIVE_URL``), archived events are listed too, and ``payload`` (a JSON
    object the payload contains) searches them; without it, ``payload`` is refused."""
    q = query(request, EventQuery)
    app = pinned_app(request, q.app or "", q.app is not None, ApiError) or None
    f = EventFilter(
        app=app,
        event_type=q.type,
        endpoint_id=q.endpoint_id,
        status=q.status,
        since=q.since,
        until=q.until,
        idempotency_key=q.idempotency_key,
    )
    payload = payload_filter(q.payload)
    position = await cursor_position(request, q.cursor)
    try:
        rows, after = await list_events(
            request.app[STORE],
            f,
            limit=q.limit,
            position=position,
            history=request.app[HISTORY],
            payload=payload,
        )
    except ValueError:  # a position relay sealed but cannot read: its own older format
        raise invalid_cursor() from None
    except ArchiveRequired:
        raise ApiError(
            422, "archive_required", "payload search needs the archive (RELAY_ARCHIVE_URL)"
        ) from None
    for row in rows:
        row["created_at"] = signing.rfc3339_ms(row["created_at"])
    return json({"data": rows, "next_cursor": await sealed(request, after)})


@route(
    "GET",
    "/v1/events/{id}",
    summary="Read an event and its deliveries",
    operation_id="getEvent",
    tag="Events",
    query=EventPageQuery,
    responses={200: EventPage},
    errors={422: ("validation_error",), 503: ("archive_unavailable",)},
)
async def read(request: web.Request) -> web.Response:
    """The event with its payload, its ``idempotency_key``, its deliveries, and
    ``filtered``: the endpoints left out because their filter erred on it. With
    ``expand=deliveries``, each delivery (the first 50) in full: status, attempt log with
    what the receiver answered, and the headers it was sent with (signatures and custom
    header values hidden)."""
    ident = request.match_info["id"]
    q = query(request, EventPageQuery)
    expand = q.expand == "deliveries"
    page = await event_page(request.app[STORE], ident, expand=expand, history=request.app[HISTORY])
    event = shown(found(page, "event", ident))
    endpoints, body_len = event.pop("endpoints", {}), event.pop("body_length", None)
    for row in event["deliveries"] if q.expand else ():
        row["headers_sent"] = sent_headers(row, endpoints.get(row["endpoint_id"]), body_len)
    return json(event)


def shown(event: dict[str, Any]) -> dict[str, Any]:
    """A stored event as the API answers it: its times in RFC 3339."""
    event["created_at"] = signing.rfc3339_ms(event["created_at"])
    if "deliver_at" in event:
        event["deliver_at"] = signing.rfc3339_ms(event["deliver_at"])
    return event
