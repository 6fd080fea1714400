"""``/api/v1/app/{app_id}/msg``: messages, which are relay events published through the
same :class:`relay.publishing.Publisher` as ``POST /v1/events``.

``eventId`` is the publish's idempotency key (else the ``idempotency-key`` the SDK
sends): the same ``eventId`` and payload again answers the first message, another
payload is 409. ``GET .../msg/{eventId}`` finds a message by it while relay keeps the
key (``RELAY_IDEMPOTENCY_TTL``). ``channels``, ``tags``, transformations, payload
retention are refused (422 ``unsupported``); ``deliverAt`` is relay's scheduled
delivery (``deliver_at`` on ``POST /v1/events``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import orjson
from aiohttp import web
from pydantic import Field

from relay.api.common import PUBLISHER, STORE, ApiError, body, json, route
from relay.api.deliveries import cursor_position
from relay.api.svix.applications import POST_HEADERS, TAG, app_or_create
from relay.api.svix.base import (
    IDEMPOTENCY_HEADER,
    ListQuery,
    app_of,
    iterator_of,
    ms,
    not_found,
    page,
    query,
    refuse,
    refuse_set,
    relay_fields,
    when,
)
from relay.api.svix.models import SvixMessageIn, SvixMessageOut, listing
from relay.domain import ids
from relay.domain.schema import EventIn, Strict
from relay.publishing import PublishError
from relay.queue.store import encode_cursor

UNSUPPORTED = {
    "channels": "relay has no channels: endpoints subscribe by eventType",
    "tags": "relay has no message tags",
    "transformations_params": "relay has no transformations",
    "payload_retention_period": "retention is relay-wide (RELAY_RETENTION)",
    "payload_retention_hours": "retention is relay-wide (RELAY_RETENTION)",
}
# a delivery's relay status as Svix's MessageStatus (else 1, pending)
AUTO_KEY = "auto_"  # the SDKs' own idempotency-key when the caller gives none
STATUS = {"succeeded": (0, "success"), "dead": (2, "fail"), "delivering": (3, "sending")}


def status_of(delivery: dict[str, Any]) -> dict[str, Any]:
    """``status``, ``statusText`` and ``nextAttempt`` of one delivery."""
    code, text = STATUS.get(str(delivery.get("status")), (1, "pending"))
    nxt = delivery.get("next_attempt_at") if code == 1 else None
    return {"status": code, "statusText": text, "nextAttempt": None if nxt is None else when(nxt)}


def message_out(
    event_id: str,
    event_type: str,
    created: str,
    payload: Any,
    event_key: str | None = None,
    deliver_at: str | None = None,
) -> dict[str, Any]:
    """A relay event as Svix shows a message (``payload`` {} when left out)."""
    return {
        "id": event_id,
        "eventId": event_key,
        "eventType": event_type,
        "payload": payload,
        "channels": None,
        "tags": None,
        "timestamp": created,
        "deliverAt": deliver_at,
    }


def event_key(key: str | None) -> str | None:
    """The message's ``eventId``: ``key``, the idempotency key it was published with,
    unless the SDK made that key up (``auto_...``, sent when the caller gave none)."""
    return None if key is None or key.startswith(AUTO_KEY) else str(key)


def event_out(event: dict[str, Any], with_content: bool) -> dict[str, Any]:
    payload = event["payload"] if with_content else {}
    at = event.get("deliver_at")
    return message_out(
        event["id"],
        event["type"],
        when(event["created_at"]),
        payload,
        event_key(event.get("idempotency_key")),
        None if at is None else when(at),
    )


class ContentQuery(Strict):
    with_content: bool = True


async def message_of(request: web.Request, app: str) -> dict[str, Any]:
    """The path's ``{msg_id}`` (an ``evt_`` id, or an ``eventId`` relay still keeps) as an
    event of ``app``; else 404."""
    ident = request.match_info["msg_id"]
    store = request.app[STORE]
    if ident.startswith("evt_"):
        event = await store.get_event(ident)
    else:
        event = None
        raw = await request.app[PUBLISHER].guard.remembered(app, ident)
        if raw is not None:
            event = await store.get_event(orjson.loads(raw)["answer"]["id"])
    if event is None or event["app"] != app:
        raise not_found("message", ident)
    return event


@route(
    "POST",
    "/api/v1/app/{app_id}/msg",
    summary="Send a message (publish an event)",
    operation_id="svixCreateMessage",
    tag=TAG,
    body=SvixMessageIn,
    examples={
        "paid": (
            "An order.paid message, idempotent by its eventId",
            {"eventType": "order.paid", "eventId": "order-1001-paid", "payload": {"order": 1001}},
        )
    },
    query=ContentQuery,
    headers=POST_HEADERS,
    responses={202: SvixMessageOut},
    errors={
        409: ("idempotency_key_reused",),
        422: (
            "unsupported",
            "payload_invalid",
            "unknown_event_type",
            "schema_invalid",
            "schema_budget_exceeded",
            "too_many_deliveries",
            "app_reserved",
            "deliver_at_too_far",
            "deliver_at_ordered",
        ),
        503: ("replication_timeout",),
    },
)
async def create(request: web.Request) -> web.Response:
    """Publish ``payload`` as an event of type ``eventType`` to the application's
    subscribed endpoints, as ``POST /v1/events`` does; answered once it is in Redis.
    ``eventId`` (else the ``idempotency-key``) makes a retry answer the first message.
    With ``application``, an application that does not exist is created first."""
    q = query(request, ContentQuery)
    data, _ = await body(request, SvixMessageIn)
    refuse_set(data, UNSUPPORTED)
    app = await app_or_create(request, data.application)
    key = data.event_id or request.headers.get(IDEMPOTENCY_HEADER)
    if key is not None and (len(key) > 256 or not key.isprintable()):
        raise refuse("eventId", "an idempotency key is 1-256 printable characters")
    fields = relay_fields(EventIn, {"type": data.event_type, "payload": data.payload, "app": app})
    try:
        done = await request.app[PUBLISHER].publish(
            EventIn(**fields),
            idempotency_key=key,
            deliver_at=None if data.deliver_at is None else ms(data.deliver_at),
        )
    except PublishError as exc:
        raise ApiError(exc.status, exc.code, exc.message, **exc.extra) from None
    answer = done.answer
    payload = data.payload if q.with_content else {}
    out = message_out(
        answer["id"],
        answer["type"],
        answer["created_at"],
        payload,
        event_key(key),
        answer.get("deliver_at"),
    )
    return json(out, status=202)


@route(
    "GET",
    "/api/v1/app/{app_id}/msg/{msg_id}",
    summary="Read a message by its id or eventId",
    operation_id="svixGetMessage",
    tag=TAG,
    query=ContentQuery,
    responses={200: SvixMessageOut},
)
async def read(request: web.Request) -> web.Response:
    """The message (its ``evt_`` id, or the ``eventId`` it was sent with while relay keeps
    idempotency keys)."""
    event = await message_of(request, await app_of(request))
    return json(event_out(event, query(request, ContentQuery).with_content))


class MessageQuery(ListQuery):
    with_content: bool = True
    expanded_statuses: bool = Field(default=True, description="accepted: relay has no canceled")
    before: datetime | None = None
    after: datetime | None = None
    event_types: Annotated[str | None, Field(max_length=4096)] = Field(
        default=None, description="comma-separated event types"
    )
    status: Annotated[int | None, Field(ge=0, le=4)] = Field(
        default=None, description="endpoint messages: only those of this MessageStatus"
    )
    channel: str | None = Field(default=None, description="refused: relay has no channels")
    tag: str | None = Field(default=None, description="refused: relay has no tags")


async def walk(
    request: web.Request, app: str, q: MessageQuery, endpoint_id: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """A page of the app's deliveries (of one endpoint), one per event, newest first,
    within ``before``/``after`` and ``event_types``; and the next page's iterator."""
    if q.channel or q.tag:
        raise refuse("channel" if q.channel else "tag", "relay has no channels or tags")
    types = set(q.event_types.split(",")) - {""} if q.event_types else set()
    store = request.app[STORE]
    at = await cursor_position(request, q.iterator)
    if at is None and q.before is not None:
        at = encode_cursor(ms(q.before), "")
    since = None if q.after is None else ms(q.after)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(rows) < q.limit:
        batch, at = await store.list_deliveries(
            app=app, endpoint_id=endpoint_id, limit=q.limit, cursor=at
        )
        for r in batch:
            if since is not None and r["created_at"] <= since:
                return rows, None
            if r["event_id"] in seen or (types and r["type"] not in types):
                continue
            if q.status is not None and status_of(r)["status"] != q.status:
                continue
            seen.add(r["event_id"])
            rows.append(r)
            if len(rows) == q.limit:
                break
        if at is None:
            return rows, None
    last = rows[-1]  # the next page starts below every delivery of the last event
    return rows, await iterator_of(
        request, encode_cursor(last["created_at"], ids.delivery_id(last["event_id"], 0))
    )


async def messages_of(
    request: web.Request, rows: list[dict[str, Any]], with_content: bool
) -> list[dict[str, Any]]:
    """Each row's event as a message (its payload read only ``with_content``; else only
    the events' headers, for their keys)."""
    wanted = [r["event_id"] for r in rows]
    store = request.app[STORE]
    if with_content:
        events = await store.get_events(wanted)
        found = [None if e is None else (e["payload"], e.get("idempotency_key")) for e in events]
    else:  # a stored event's header holds its key as "ik"
        heads = await store.get_headers(wanted)
        found = [None if h is None else ({}, h.get("ik")) for h in heads]
    out = []
    for r, got in zip(rows, found, strict=True):
        payload, key = ({}, None) if got is None else got
        created = when(r["created_at"])
        out.append(message_out(r["event_id"], r["type"], created, payload, event_key(key)))
    return out


@route(
    "GET",
    "/api/v1/app/{app_id}/msg",
    summary="List an application's messages, newest first",
    operation_id="svixListMessages",
    tag=TAG,
    query=MessageQuery,
    responses={200: listing(SvixMessageOut)},
    errors={400: ("invalid_cursor",), 422: ("unsupported",)},
)
async def list_(request: web.Request) -> web.Response:
    """The application's messages that went to at least one endpoint, newest first,
    within ``before``/``after`` and of ``event_types``."""
    app = await app_of(request)
    q = query(request, MessageQuery)
    rows, iterator = await walk(request, app, q)
    return page(await messages_of(request, rows, q.with_content), iterator)
