"""``/v1/archive/deliveries``: search the archived deliveries (PostgreSQL)."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from relay.api.access import scoped_app
from relay.api.common import HISTORY, STORE, ApiError, json, query, route
from relay.api.deliveries import cursor_position, invalid_cursor
from relay.api.models import ArchiveQuery, DeliveryList
from relay.archive.tables import Filters
from relay.domain import cursors


def payload_filter(text: str | None) -> dict[str, Any] | None:
    """The ``payload`` query parameter as the JSON object it must be (400 otherwise)."""
    if text is None:
        return None
    try:
        payload = orjson.loads(text)
    except orjson.JSONDecodeError:
        payload = None
    if not isinstance(payload, dict):
        raise ApiError(400, "invalid_payload_filter", "payload must be a JSON object")
    return payload


@route(
    "GET",
    "/v1/archive/deliveries",
    summary="Search archived deliveries, newest first",
    operation_id="searchArchivedDeliveries",
    tag="Deliveries",
    query=ArchiveQuery,
    responses={200: DeliveryList},
    errors={400: ("invalid_cursor", "invalid_payload_filter"), 503: ("archive_unavailable",)},
)
async def search(request: web.Request) -> web.Response:
    """Deliveries moved to the archive (``RELAY_ARCHIVE_URL``) by creation time range,
    endpoint, status, the last HTTP status code, event type and a JSON object the event's
    payload contains; ``next_cursor`` continues. Without an archive the list is empty."""
    q = query(request, ArchiveQuery)
    app = scoped_app(request)
    key = await request.app[STORE].cursor_key()  # Redis's, which seals the cursor
    payload = payload_filter(q.payload)
    filters = Filters(
        status=q.status,
        endpoint_id=q.endpoint_id,
        event_type=q.type,
        app=app,
        since=q.since,
        until=q.until,
        status_code=q.status_code,
        payload=payload,
    )
    try:
        rows, at = await request.app[HISTORY].search(
            filters, limit=q.limit, cursor=await cursor_position(request, q.cursor)
        )
    except ValueError:
        raise invalid_cursor() from None
    cursor = None if at is None else cursors.seal(key, app, at)
    return json({"data": rows, "next_cursor": cursor})
